package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AnnotationHolderPod on the Lease names the process instance that holds
// it: the leader's Pod (namespace, name, UID), its container, and the
// moment its term began (crash.go). Standbys read it only while the Lease
// names the same holder and term.
const AnnotationHolderPod = "leader.fastover.io/holder-pod"

// PodConfig names the Pod and the container this replica runs in, the
// instance its terms record for crash takeover (Config.Pod).
type PodConfig struct {
	// Namespace of the Pod; default Config.Namespace.
	Namespace string
	// Name of the Pod. Required.
	Name string
	// UID of the Pod, if known ($POD_UID from metadata.uid); else read
	// from the Pod. A Pod of that name with another UID is not this
	// replica's.
	UID types.UID
	// Container is the name of the container this process is the main
	// process of; default the Pod's only container. A Pod of several
	// containers needs it: the downward API does not give it, so set
	// $CONTAINER_NAME in the container's env.
	Container string
}

// PodFromEnv returns the Pod of a replica that runs in one, from the
// environment its Pod sets: $POD_NAME, $POD_NAMESPACE and $POD_UID from
// the downward API (metadata.name, metadata.namespace, metadata.uid), and
// $CONTAINER_NAME, a literal; nil when $POD_NAME is unset (not in a Pod:
// crash takeover is off, the Lease decides).
func PodFromEnv() *PodConfig {
	name := os.Getenv("POD_NAME")
	if name == "" {
		return nil
	}
	return &PodConfig{
		Namespace: os.Getenv("POD_NAMESPACE"),
		Name:      name,
		UID:       types.UID(os.Getenv("POD_UID")),
		Container: os.Getenv("CONTAINER_NAME"),
	}
}

// instance is what AnnotationHolderPod records: the holder and term it
// belongs to, the Pod and container the holder runs in, and when its term
// began, on the clock of the holder's node.
type instance struct {
	Holder    string    `json:"holder"`
	Term      int32     `json:"term"`
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"`
	Container string    `json:"container"`
	Since     time.Time `json:"since"`
}

// String is the instance as logs and Events name it.
func (i instance) String() string {
	return fmt.Sprintf("container %q of Pod %s/%s (uid %s)", i.Container, i.Namespace, i.Pod, i.UID)
}

// setInstance records inst on lease's annotations, or removes the record
// if inst is nil.
func setInstance(lease *coordinationv1.Lease, inst *instance) {
	if inst == nil {
		delete(lease.Annotations, AnnotationHolderPod)
		return
	}
	b, err := json.Marshal(inst)
	if err != nil { // a struct of strings, a number and a time
		panic(err)
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AnnotationHolderPod] = string(b)
}

// recordedInstance returns the instance the Lease records for its current
// holder and term: none if the Lease is free, carries no record, or a
// record of another holder or term (left by a previous leader, or by a
// library that keeps annotations it does not know), or one that does not
// parse or lacks a field.
func recordedInstance(lease *coordinationv1.Lease) (instance, error) {
	if lease == nil {
		return instance{}, errors.New("no Lease")
	}
	raw, ok := lease.Annotations[AnnotationHolderPod]
	if !ok {
		return instance{}, errors.New("the Lease records no Pod")
	}
	var inst instance
	if err := json.Unmarshal([]byte(raw), &inst); err != nil {
		return instance{}, fmt.Errorf("annotation %s: %w", AnnotationHolderPod, err)
	}
	holder := holderOf(lease)
	var term int32
	if lease.Spec.LeaseTransitions != nil {
		term = *lease.Spec.LeaseTransitions
	}
	switch {
	case holder == "":
		return instance{}, errors.New("the Lease is free")
	case inst.Holder != holder || inst.Term != term:
		return instance{}, fmt.Errorf("annotation %s is of %q's term %d, not of the holder %q's term %d", AnnotationHolderPod, inst.Holder, inst.Term, holder, term)
	case inst.Namespace == "" || inst.Pod == "" || inst.UID == "" || inst.Container == "" || inst.Since.IsZero():
		return instance{}, fmt.Errorf("annotation %s lacks a field: %s", AnnotationHolderPod, raw)
	}
	return inst, nil
}

// resolveSelf reads this replica's Pod and returns what its terms record
// of it (an instance without holder, term or start: instanceOf fills them
// in) and the Pod as read; an error says why crash takeover cannot name
// this process (its terms then record nothing, and end at the Lease's
// expiry as without it).
func (e *Elector) resolveSelf(ctx context.Context) (*instance, *corev1.Pod, error) {
	pc := e.cfg.Pod
	ns := pc.Namespace
	if ns == "" {
		ns = e.cfg.Namespace
	}
	pod, err := e.cfg.Client.CoreV1().Pods(ns).Get(ctx, pc.Name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("reading this replica's Pod %s/%s: %w", ns, pc.Name, err)
	}
	if pc.UID != "" && pod.UID != pc.UID {
		return nil, nil, fmt.Errorf("the Pod %s/%s has uid %s, not this replica's %s", ns, pc.Name, pod.UID, pc.UID)
	}
	container := pc.Container
	switch {
	case container == "" && len(pod.Spec.Containers) == 1:
		container = pod.Spec.Containers[0].Name
	case container == "":
		return nil, nil, fmt.Errorf("the Pod %s/%s has %d containers: set Config.Pod.Container ($CONTAINER_NAME) to the one this process runs in", ns, pc.Name, len(pod.Spec.Containers))
	case !hasContainer(pod, container):
		return nil, nil, fmt.Errorf("the Pod %s/%s has no container %q", ns, pc.Name, container)
	}
	return &instance{Namespace: ns, Pod: pc.Name, UID: pod.UID, Container: container}, pod, nil
}

// hasContainer reports whether the Pod has a container of that name, a
// sidecar (an init container that keeps running) included.
func hasContainer(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}

// instanceOf is the record of holder's term number term, begun at since,
// in the Pod self names; nil without one (resolveSelf failed or did not
// run).
func instanceOf(self *instance, holder string, term int32, since time.Time) *instance {
	if self == nil {
		return nil
	}
	rec := *self
	rec.Holder, rec.Term, rec.Since = holder, term, since
	return &rec
}
