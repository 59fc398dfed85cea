package runwrap

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Names the wrapped pod uses.
const (
	// InitContainerName is the init container that copies fastover-run.
	InitContainerName = "fastover-run"
	// VolumeName is the emptyDir fastover-run is copied into.
	VolumeName = "fastover-run"
	// MountPath is where the emptyDir is mounted, in both containers.
	MountPath = "/fastover"
	// Binary is fastover-run's path in the wrapped container.
	Binary = MountPath + "/fastover-run"
	// ProbePort is the port of fastover-run's /readyz and /healthz, and
	// ProbePortName its name in the wrapped container.
	ProbePort     = 8484
	ProbePortName = "fastover-run"
)

// Options are what a rewrite needs besides the annotations.
type Options struct {
	// Image is fastover-run's image, run as the init container.
	Image string
}

// ErrNoCommand is returned for a container without an explicit command:
// the image's entrypoint is not in the pod spec, so there is nothing to
// wrap it with.
var ErrNoCommand = errors.New("has no command: the image's entrypoint is not in the pod spec, so it cannot be put after fastover-run; set command to the image's entrypoint")

// PodSpec rewrites a pod template for fastover-run if its annotations ask
// for it (Wanted). It returns false, and leaves spec alone, when they do
// not or when spec is already wrapped. On error, spec is unchanged.
func PodSpec(meta *metav1.ObjectMeta, spec *corev1.PodSpec, opts Options) (bool, error) {
	s, err := wrapPod(meta, spec, opts)
	return s != nil, err
}

// wrapPod is PodSpec, returning the settings it wrapped the pod with (nil
// when it did not).
func wrapPod(meta *metav1.ObjectMeta, spec *corev1.PodSpec, opts Options) (*settings, error) {
	if !Wanted(meta.Annotations) || wrapped(spec) {
		return nil, nil
	}
	if opts.Image == "" {
		return nil, errors.New("runwrap: no image for fastover-run")
	}
	s, err := parseSettings(meta.Annotations)
	if err != nil {
		return nil, err
	}
	i, err := pickContainer(spec, s.container)
	if err != nil {
		return nil, err
	}
	c := spec.Containers[i]
	if len(c.Command) == 0 {
		return nil, fmt.Errorf("container %q %w", c.Name, ErrNoCommand)
	}
	for _, p := range c.Ports {
		if p.ContainerPort == ProbePort || p.Name == ProbePortName {
			return nil, fmt.Errorf("container %q uses port %d or the name %q, fastover-run's probe port", c.Name, ProbePort, ProbePortName)
		}
	}
	if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == VolumeName }) {
		return nil, fmt.Errorf("the pod already has a volume named %q", VolumeName)
	}
	check := ""
	switch {
	case s.readyHTTP != "":
		check = "--ready-http=" + s.readyHTTP
	case s.readyTCP != "":
		check = "--ready-tcp=" + s.readyTCP
	default:
		if check, err = probeCheck(&c); err != nil {
			return nil, fmt.Errorf("container %q: %w", c.Name, err)
		}
	}

	// Nothing can fail from here on.
	args := []string{Binary, "--lease=" + s.lease}
	if s.service != "" {
		args = append(args, "--service="+s.service)
	}
	if check != "" {
		args = append(args, check)
	}
	args = append(args, "--grace-period="+gracePeriod(spec.TerminationGracePeriodSeconds).String(), "--")
	c.Command = append(args, c.Command...)
	c.Env = withEnv(c.Env, c.Name)
	// Declared, so that the scheduler keeps two replicas of a hostNetwork
	// pod off one node, where both would bind it.
	c.Ports = append(slices.Clone(c.Ports), corev1.ContainerPort{Name: ProbePortName, ContainerPort: ProbePort, Protocol: corev1.ProtocolTCP})
	c.VolumeMounts = append(slices.Clone(c.VolumeMounts), corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true})
	// COMMAND's own probes would fail on the standbys, which run no
	// COMMAND; fastover-run's stand in (readiness: standing by or leading;
	// liveness: the election runs). COMMAND's readiness is fastover-run's
	// check above.
	c.ReadinessProbe = httpProbe("/readyz")
	c.LivenessProbe = httpProbe("/healthz")
	c.LivenessProbe.FailureThreshold = 3
	c.StartupProbe = nil
	spec.Containers = slices.Clone(spec.Containers)
	spec.Containers[i] = c
	spec.InitContainers = append(slices.Clone(spec.InitContainers), corev1.Container{
		Name:         InitContainerName,
		Image:        opts.Image,
		Args:         []string{"--copy-to=" + MountPath},
		VolumeMounts: []corev1.VolumeMount{{Name: VolumeName, MountPath: MountPath}},
		// Pod Security's restricted profile, so that wrapping never takes
		// a pod out of it.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	})
	spec.Volumes = append(slices.Clone(spec.Volumes), corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	return &s, nil
}

// wrapped says whether spec already runs fastover-run.
func wrapped(spec *corev1.PodSpec) bool {
	for _, c := range spec.InitContainers {
		if c.Name == InitContainerName {
			return true
		}
	}
	for _, c := range spec.Containers {
		if len(c.Command) > 0 && c.Command[0] == Binary {
			return true
		}
	}
	return false
}

// gracePeriod is COMMAND's time to exit on SIGTERM: the pod's grace
// period (30 s if unset) less 5 s for the release, or half of it when it
// is shorter than 10 s; at least 100 ms.
func gracePeriod(seconds *int64) time.Duration {
	pod := 30 * time.Second
	if seconds != nil {
		pod = time.Duration(max(*seconds, 0)) * time.Second
	}
	g := pod / 2
	if pod >= 10*time.Second {
		g = pod - 5*time.Second
	}
	return max(g, 100*time.Millisecond)
}

// probeCheck turns the container's readinessProbe into fastover-run's
// readiness check: an httpGet or tcpSocket probe on the same port, made
// from inside the pod; "" (ready once started) for any other probe or
// none.
func probeCheck(c *corev1.Container) (string, error) {
	p := c.ReadinessProbe
	if p == nil {
		return "", nil
	}
	switch {
	case p.HTTPGet != nil:
		port, err := resolvePort(c, p.HTTPGet.Port)
		if err != nil {
			return "", fmt.Errorf("readinessProbe: %w; or give %s", err, AnnotationReadyHTTP)
		}
		scheme := strings.ToLower(string(p.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := p.HTTPGet.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		u := url.URL{Scheme: scheme, Host: net.JoinHostPort(probeHost(p.HTTPGet.Host), strconv.Itoa(port))}
		u.Path, u.RawQuery, _ = strings.Cut(path, "?")
		return "--ready-http=" + u.String(), nil
	case p.TCPSocket != nil:
		port, err := resolvePort(c, p.TCPSocket.Port)
		if err != nil {
			return "", fmt.Errorf("readinessProbe: %w; or give %s", err, AnnotationReadyTCP)
		}
		return "--ready-tcp=" + net.JoinHostPort(probeHost(p.TCPSocket.Host), strconv.Itoa(port)), nil
	}
	return "", nil
}

// probeHost is where fastover-run checks COMMAND: the probe's host if it
// names one, else the loopback address (the kubelet's probes go to the
// pod's address; fastover-run runs in the pod).
func probeHost(h string) string {
	if h == "" {
		return "127.0.0.1"
	}
	return h
}

func resolvePort(c *corev1.Container, port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		if port.IntVal <= 0 || port.IntVal > 65535 {
			return 0, fmt.Errorf("port %d is out of range", port.IntVal)
		}
		return int(port.IntVal), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("the container has no port named %q", port.StrVal)
}

func httpProbe(path string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(ProbePort)}}}
}

// withEnv adds the downward API's variables fastover-run reads, unless
// the container sets them already.
func withEnv(env []corev1.EnvVar, container string) []corev1.EnvVar {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	add := []corev1.EnvVar{
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "POD_UID", ValueFrom: field("metadata.uid")},
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
		{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
		{Name: "CONTAINER_NAME", Value: container},
	}
	out := slices.Clone(env)
	for _, v := range add {
		if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == v.Name }) {
			out = append(out, v)
		}
	}
	return out
}
