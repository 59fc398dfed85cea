// Named target ports, resolved from the leader's own Pod.

package leader

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// ErrNamedTargetPort is returned (wrapped) when a Service port's
// targetPort is a name that the leader cannot resolve: no PodName, no
// such port in its Pod, or the Pod cannot be read.
var ErrNamedTargetPort = errors.New("cannot resolve a named targetPort")

// resolveNamedPorts makes sure that every named targetPort of the Service
// can be resolved from the leader's own Pod, as the endpointslice
// controller resolves it for the Pods it selects: a container port of the
// Pod with that name and the port's protocol. The Pod is read once. With
// explicit Ports there is nothing to resolve. A name it cannot resolve is
// reported (Warning Event NamedTargetPort on the Service) and nothing is
// published: publishing the Service's port number instead would send the
// clients to a port the leader may not listen on.
func (p *publisher) resolveNamedPorts(ctx context.Context, svc *corev1.Service) error {
	if len(p.ep.Ports) > 0 {
		return nil
	}
	for _, sp := range svc.Spec.Ports {
		if sp.TargetPort.Type != intstr.String || sp.TargetPort.StrVal == "" {
			continue
		}
		var reason string
		switch {
		case p.ep.PodName == "":
			reason = "the leader does not know its Pod: set EndpointConfig.PodName ($POD_NAME from the downward API, which EndpointFromEnv reads), or give EndpointConfig.Ports"
		case !p.podRead:
			pod, err := p.cfg.Client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, p.ep.PodName, metav1.GetOptions{})
			if err != nil {
				reason = fmt.Sprintf("the leader's Pod %s could not be read (%v); the Role needs get on pods (PolicyRules), or give EndpointConfig.Ports", p.ep.PodName, err)
				break
			}
			p.podPorts, p.podRead = containerPorts(pod), true
		}
		if reason == "" {
			if _, ok := p.namedPort(sp); ok {
				continue
			}
			reason = fmt.Sprintf("no container of the leader's Pod %s has a %s port named %q", p.ep.PodName, cmp.Or(sp.Protocol, corev1.ProtocolTCP), sp.TargetPort.StrVal)
		}
		msg := fmt.Sprintf("Service %s/%s port %q has targetPort %q, a name, and %s; nothing is published", p.cfg.Namespace, svc.Name, sp.Name, sp.TargetPort.StrVal, reason)
		if p.cfg.EventRecorder != nil {
			p.cfg.EventRecorder.Event(svc, corev1.EventTypeWarning, "NamedTargetPort", msg)
		}
		return fmt.Errorf("%w: %s", ErrNamedTargetPort, msg)
	}
	return nil
}

// containerPorts are the ports of a Pod's containers, its sidecars (init
// containers that keep running) included.
func containerPorts(pod *corev1.Pod) []corev1.ContainerPort {
	var ports []corev1.ContainerPort
	for _, c := range pod.Spec.Containers {
		ports = append(ports, c.Ports...)
	}
	for _, c := range pod.Spec.InitContainers {
		if ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways {
			ports = append(ports, c.Ports...)
		}
	}
	return ports
}

// namedPort resolves a Service port's named targetPort from the leader's
// Pod, once read.
func (p *publisher) namedPort(sp corev1.ServicePort) (int32, bool) {
	protocol := cmp.Or(sp.Protocol, corev1.ProtocolTCP)
	for _, cp := range p.podPorts {
		if cp.Name == sp.TargetPort.StrVal && cmp.Or(cp.Protocol, corev1.ProtocolTCP) == protocol {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}
