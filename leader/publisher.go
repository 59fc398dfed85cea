package leader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader/internal/names"
)

// AnnotationIdentity on the leader's EndpointSlice names the leader.
const AnnotationIdentity = names.AnnotationIdentity

// AnnotationTerm on the leader's EndpointSlice is the leader's term, the
// Lease's transition count (spec.leaseTransitions) when it acquired it, in
// decimal: it grows with every new leader, so a reader can tell a newer
// leader from a stale one (see Elector.Term).
const AnnotationTerm = names.AnnotationTerm

// AnnotationHandOver on the leader's EndpointSlice says how the leader's
// term began: "planned", on a Lease its previous holder released (a
// planned stop: that replica is ending its connections itself), or
// "unplanned", on an expired (or a new) Lease. leader/follow reads it.
const AnnotationHandOver = names.AnnotationHandOver

// ErrServiceHasSelector is returned (wrapped) while the Service still has a
// selector and RemoveSelector is off.
var ErrServiceHasSelector = errors.New("the Service has a selector")

// publisher makes the leader the only endpoint of the Service: one
// EndpointSlice of its own, no other slice, and an Endpoints object of its
// own for the readers of the Endpoints API (none with SkipEndpoints: then
// no stale one either). Its
// reads come from the informers' caches; its writes use optimistic
// concurrency and happen only while leading() holds.
type publisher struct {
	cfg     *Config
	ep      *EndpointConfig
	log     logr.Logger
	leading func() bool
	term    func() int32 // the term being published
	// handedOver reports whether the term began on a released Lease
	// (AnnotationHandOver); nil: never.
	handedOver func() bool
	services   corelisters.ServiceNamespaceLister
	slices     discoverylisters.EndpointSliceNamespaceLister
	// endpoints reads the Service's Endpoints object; nil with
	// SkipEndpoints.
	endpoints corelisters.EndpointsNamespaceLister
	trigger   chan struct{} // the Service, its slices or its Endpoints changed

	// podPorts are the ports of the leader's own Pod's containers, read
	// once (a Pod's containers cannot change) when a named targetPort
	// needs them; podRead says they were.
	podPorts []corev1.ContainerPort
	podRead  bool

	// released says this replica released the Lease on a planned stop:
	// what it withdraws then, it withdraws as the ex-leader (handOff).
	released atomic.Bool
	// unanswered says a write of this term got no answer and may have
	// been applied (settle.go).
	unanswered atomic.Bool
}

// run keeps the leader the Service's only endpoint for the term: at once,
// then whenever the Service or its slices change, and at least every
// LeaseDuration, until ctx ends or the replica no longer leads.
func (p *publisher) run(ctx context.Context, acquired time.Time) {
	clk := p.cfg.Clock
	first := true
	backoff := 50 * time.Millisecond
	for {
		err := p.reconcile(ctx, first)
		wait := p.cfg.LeaseDuration
		switch {
		case err == nil:
			if first {
				took := clk.Since(acquired)
				p.cfg.Metrics.observePublish(took)
				p.log.Info("published the leader as the Service's only endpoint", "address", p.ep.Address, "sinceAcquired", took.Round(time.Microsecond))
				first = false
			}
			backoff = 50 * time.Millisecond
		case errors.Is(err, errNotLeading) || ctx.Err() != nil:
			return
		default:
			p.cfg.Metrics.publishError()
			p.log.Error(err, "could not publish the endpoint; retrying", "in", backoff)
			wait = backoff
			backoff = min(2*backoff, 30*time.Second)
		}
		timer := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.trigger:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// sliceName is the name of the leader's EndpointSlice of its Address's
// family; every leader writes the same one, so a handover replaces the
// address in place.
func (p *publisher) sliceName() string {
	name := p.ep.Service + "-fastover"
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// sliceNameFor is the name of the leader's EndpointSlice of a family: the
// Address's family's is sliceName, the other family's (a dual-stack
// Service's second) has the family as a suffix, "-ipv4" or "-ipv6".
func (p *publisher) sliceNameFor(addrType discoveryv1.AddressType) string {
	if addrType == addressType(netip.MustParseAddr(p.ep.Address)) { // validated
		return p.sliceName()
	}
	suffix := "-fastover-" + strings.ToLower(string(addrType))
	name := p.ep.Service
	if len(name)+len(suffix) > 253 {
		name = name[:253-len(suffix)]
	}
	return name + suffix
}

// mirroringController is the managed-by value of the slices that the
// endpointslicemirroring controller makes from Endpoints objects.
const mirroringController = "endpointslicemirroring-controller.k8s.io"

// errNotLeading stops a reconcile when this replica may no longer write.
var errNotLeading = errors.New("not the leader any more")

// reconcile brings the Service's endpoints to the leader alone: its slice
// written (or already right), every other slice deleted, and, on the
// term's first pass or when a mirrored slice shows one is back, the
// Service's stale Endpoints object deleted.
func (p *publisher) reconcile(ctx context.Context, cleanEndpoints bool) error {
	svc, err := p.services.Get(p.ep.Service)
	if err != nil {
		return fmt.Errorf("service %s/%s: %w", p.cfg.Namespace, p.ep.Service, err)
	}
	if len(svc.Spec.Selector) > 0 {
		if !p.ep.RemoveSelector {
			msg := fmt.Sprintf("Service %s/%s has a selector (%s): its endpoints are managed by the endpointslice controller, so fastover cannot publish the leader as its only endpoint. Remove the selector (kubectl -n %s patch service %s --type=json -p '[{\"op\":\"remove\",\"path\":\"/spec/selector\"}]') or let the leader do it (RemoveSelector, --remove-selector in the example).",
				p.cfg.Namespace, p.ep.Service, metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}), p.cfg.Namespace, p.ep.Service)
			if p.cfg.EventRecorder != nil {
				p.cfg.EventRecorder.Event(svc, corev1.EventTypeWarning, "ServiceHasSelector", msg)
			}
			return fmt.Errorf("%w: %s", ErrServiceHasSelector, msg)
		}
		if err := p.removeSelector(ctx, svc); err != nil {
			return err
		}
		// At once, with SkipEndpoints: the endpoints controller's
		// Endpoints object, left behind, is what the mirroring
		// controller turns into a slice of the old addresses. It
		// reacts to the selector's removal within milliseconds, so
		// that slice usually appears for a moment; with the Endpoints
		// object gone the mirroring controller deletes it again, and
		// so does the loop below. Without SkipEndpoints, the leader's
		// Endpoints object replaces it below, labelled so that the
		// mirroring controller leaves it alone (and deletes what it
		// mirrored).
		if p.ep.SkipEndpoints {
			if err := p.deleteStaleEndpoints(ctx); err != nil {
				return err
			}
		}
		cleanEndpoints = false
	}

	addrs, err := p.checkFamily(svc)
	if err != nil {
		return err
	}
	if err := p.resolveNamedPorts(ctx, svc); err != nil {
		return err
	}
	// One slice per family the Service serves, as the endpointslice
	// controller writes them; the Endpoints object has the first.
	wanted := map[string]bool{}
	var first *discoveryv1.EndpointSlice
	for _, addr := range addrs {
		want := p.desiredSliceFor(svc, addr)
		if err := p.writeSlice(ctx, want); err != nil {
			return err
		}
		wanted[want.Name] = true
		if first == nil {
			first = want
		}
	}
	if !p.ep.SkipEndpoints {
		if err := p.writeEndpoints(ctx, p.desiredEndpoints(svc, first)); err != nil {
			return err
		}
	}

	// Every other slice of the Service goes: the endpointslice
	// controller's leftovers, the mirroring controller's, anything else.
	others, err := p.slices.List(labelsForService(p.ep.Service))
	if err != nil {
		return err
	}
	mirrored := false
	for _, s := range others {
		if wanted[s.Name] {
			continue
		}
		mirrored = mirrored || s.Labels[discoveryv1.LabelManagedBy] == mirroringController
		if !p.leading() {
			return errNotLeading
		}
		err := p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &s.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete stale EndpointSlice %s: %w", s.Name, err)
		}
		p.log.Info("deleted a stale EndpointSlice", "slice", s.Name, "managedBy", s.Labels[discoveryv1.LabelManagedBy])
	}

	// The mirroring controller mirrors an Endpoints object: where it did,
	// that object goes too, or the mirrored slice would come back. (Not
	// the leader's own, which the mirroring controller skips.)
	if p.ep.SkipEndpoints && (cleanEndpoints || mirrored) {
		if err := p.deleteStaleEndpoints(ctx); err != nil {
			return err
		}
	}
	return nil
}

// writeSlice creates or updates the leader's slice, if it is not as
// wanted already. It starts from the cache; where the cache is behind (the
// slice this replica just wrote, or one that left the cache because its
// service-name label was removed) the API answers AlreadyExists or
// Conflict, and the slice is read from the API and taken back from there.
func (p *publisher) writeSlice(ctx context.Context, want *discoveryv1.EndpointSlice) error {
	api := p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace)
	have, err := p.slices.Get(want.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) {
		have = nil
	}
	for attempt := 0; ; attempt++ {
		if have != nil && sliceUpToDate(have, want) {
			return nil
		}
		if !p.leading() {
			return errNotLeading
		}
		if have == nil {
			_, err = api.Create(ctx, want, metav1.CreateOptions{})
		} else {
			update := have.DeepCopy()
			takeMeta(&update.ObjectMeta, &want.ObjectMeta)
			update.AddressType, update.Endpoints, update.Ports = want.AddressType, want.Endpoints, want.Ports
			// have's resourceVersion: a conflict means another writer,
			// or a cache behind the API.
			_, err = api.Update(ctx, update, metav1.UpdateOptions{})
		}
		if err == nil {
			return nil
		}
		if attempt > 0 || !retryFromAPI(err) {
			p.noteUnanswered(err)
			verb := "update"
			if have == nil {
				verb = "create"
			}
			return fmt.Errorf("%s EndpointSlice %s: %w", verb, want.Name, err)
		}
		if have, err = api.Get(ctx, want.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			have = nil
		} else if err != nil {
			return fmt.Errorf("read EndpointSlice %s: %w", want.Name, err)
		}
	}
}

// retryFromAPI reports whether a write failed because the cache it
// started from is behind the API: the object exists already, changed, or
// is gone. The object is then read from the API and the write tried once
// more.
func retryFromAPI(err error) bool {
	return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err)
}

// LabelSkipMirror on the leader's Endpoints object tells the
// endpointslice mirroring controller to leave it alone: the leader writes
// its EndpointSlice itself (kube-apiserver labels the kubernetes
// Service's Endpoints object the same way).
const LabelSkipMirror = discoveryv1.LabelSkipMirror

// desiredEndpoints is the leader's Endpoints object, for the readers of
// the Endpoints API: the slice's address and ports, under the Service's
// name. With two families (see desiredSlice) it holds the address of the
// Service's primary family, as the endpoints controller's does.
//
//nolint:staticcheck // the Endpoints API is what its readers read
func (p *publisher) desiredEndpoints(svc *corev1.Service, slice *discoveryv1.EndpointSlice) *corev1.Endpoints {
	sep := slice.Endpoints[0]
	addr := corev1.EndpointAddress{IP: sep.Addresses[0], NodeName: sep.NodeName, TargetRef: sep.TargetRef}
	ports := make([]corev1.EndpointPort, 0, len(slice.Ports))
	for _, sp := range slice.Ports {
		ports = append(ports, corev1.EndpointPort{
			Name: ptr.Deref(sp.Name, ""), Port: ptr.Deref(sp.Port, 0), Protocol: ptr.Deref(sp.Protocol, corev1.ProtocolTCP), AppProtocol: sp.AppProtocol,
		})
	}
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{
			Name:            svc.Name,
			Namespace:       p.cfg.Namespace,
			Labels:          map[string]string{LabelSkipMirror: "true"},
			Annotations:     p.annotations(),
			OwnerReferences: slice.OwnerReferences,
		},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr}, Ports: ports}},
	}
}

// endpointsUpToDate reports whether have serves as want, as sliceUpToDate.
//
//nolint:staticcheck // the Endpoints API is what its readers read
func endpointsUpToDate(have, want *corev1.Endpoints) bool {
	return subset(want.Labels, have.Labels) &&
		subset(want.Annotations, have.Annotations) &&
		apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		apiequality.Semantic.DeepEqual(have.Subsets, want.Subsets)
}

// writeEndpoints creates or updates the leader's Endpoints object, as
// writeSlice the slice: from the cache, once more from the API where the
// cache is behind. A stale object (the endpoints controller's, from
// selector days) is taken over in place.
//
//nolint:staticcheck // the Endpoints API is what its readers read
func (p *publisher) writeEndpoints(ctx context.Context, want *corev1.Endpoints) error {
	api := p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace)
	have, err := p.endpoints.Get(want.Name)
	if apierrors.IsNotFound(err) {
		have, err = nil, nil
	}
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if have != nil && endpointsUpToDate(have, want) {
			return nil
		}
		if !p.leading() {
			return errNotLeading
		}
		if have == nil {
			_, err = api.Create(ctx, want, metav1.CreateOptions{})
		} else {
			update := have.DeepCopy()
			takeMeta(&update.ObjectMeta, &want.ObjectMeta)
			update.Subsets = want.Subsets
			_, err = api.Update(ctx, update, metav1.UpdateOptions{})
		}
		if err == nil {
			return nil
		}
		if attempt > 0 || !retryFromAPI(err) {
			p.noteUnanswered(err)
			verb := "update"
			if have == nil {
				verb = "create"
			}
			return fmt.Errorf("%s Endpoints %s: %w", verb, want.Name, err)
		}
		if have, err = api.Get(ctx, want.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			have = nil
		} else if err != nil {
			return fmt.Errorf("read Endpoints %s: %w", want.Name, err)
		}
	}
}

// errAddressFamily: the leader's address is of a family the Service does
// not serve; kube-proxy would ignore the slice.
var errAddressFamily = errors.New("address family not served by the Service")

// leaderAddresses are the leader's addresses, Address first, then those
// of Addresses of another family (validated: one per family).
func (p *publisher) leaderAddresses() []netip.Addr {
	addrs := []netip.Addr{netip.MustParseAddr(p.ep.Address).Unmap()}
	for _, a := range p.ep.Addresses {
		addr := netip.MustParseAddr(a).Unmap()
		if addressType(addr) != addressType(addrs[0]) {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// checkFamily returns the addresses to publish: the leader's address of
// each family that the Service serves (spec.ipFamilies, in its order; the
// Address's family if it has none). Where the leader has none of them, it
// refuses, with a Warning Event on the Service.
func (p *publisher) checkFamily(svc *corev1.Service) ([]netip.Addr, error) {
	own := p.leaderAddresses()
	if len(svc.Spec.IPFamilies) == 0 {
		return own[:1], nil
	}
	var addrs []netip.Addr
	for _, family := range svc.Spec.IPFamilies {
		for _, addr := range own {
			if ipFamily(addr) == family {
				addrs = append(addrs, addr)
			}
		}
	}
	if len(addrs) > 0 {
		return addrs, nil
	}
	var mine []string
	for _, addr := range own {
		mine = append(mine, addr.String()+" is "+string(ipFamily(addr)))
	}
	msg := fmt.Sprintf("the leader's address %s, but Service %s/%s serves %v only: kube-proxy would ignore it, so it is not published; give the leader an address of the Service's family",
		strings.Join(mine, ", "), p.cfg.Namespace, svc.Name, svc.Spec.IPFamilies)
	if p.cfg.EventRecorder != nil {
		p.cfg.EventRecorder.Event(svc, corev1.EventTypeWarning, "AddressFamilyMismatch", msg)
	}
	return nil, fmt.Errorf("%w: %s", errAddressFamily, msg)
}

// ipFamily is the Service IP family of an address.
func ipFamily(addr netip.Addr) corev1.IPFamily {
	if addressType(addr) == discoveryv1.AddressTypeIPv6 {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

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

// removeSelector is the migration step RemoveSelector allows.
func (p *publisher) removeSelector(ctx context.Context, svc *corev1.Service) error {
	if !p.leading() {
		return errNotLeading
	}
	// The test op makes the patch fail if the Service changed since it was
	// read, instead of removing a selector someone just set.
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/resourceVersion","value":%q},{"op":"remove","path":"/spec/selector"}]`, svc.ResourceVersion)
	if _, err := p.cfg.Client.CoreV1().Services(p.cfg.Namespace).Patch(ctx, svc.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("remove the selector of Service %s/%s: %w", p.cfg.Namespace, svc.Name, err)
	}
	p.log.Info("removed the Service's selector", "service", svc.Name, "selector", svc.Spec.Selector)
	if p.cfg.EventRecorder != nil {
		p.cfg.EventRecorder.Eventf(svc, corev1.EventTypeNormal, "SelectorRemoved",
			"fastover removed the selector %v: the leader publishes itself as the only endpoint", svc.Spec.Selector)
	}
	return nil
}

// deleteStaleEndpoints deletes the Service's Endpoints object, left by the
// endpoints controller from selector days: for a Service without selector,
// the mirroring controller would turn it into an EndpointSlice again.
func (p *publisher) deleteStaleEndpoints(ctx context.Context) error {
	if !p.leading() {
		return errNotLeading
	}
	err := p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace).Delete(ctx, p.ep.Service, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete stale Endpoints %s: %w", p.ep.Service, err)
	}
	p.log.Info("deleted the Service's stale Endpoints object", "service", p.ep.Service)
	return nil
}

// withdraw deletes the leader's slice and Endpoints object, the versions
// this replica last saw, on a planned stop. It never deletes a newer
// leader's: they are deleted only while this replica leads (or has just
// released the Lease, handOff), only if they name it, and only with the
// UID and resourceVersion it has.
func (p *publisher) withdraw(ctx context.Context) error {
	if err := p.settle(ctx); err != nil {
		return err
	}
	err := p.withdrawSlice(ctx)
	if p.endpoints != nil && !errors.Is(err, errNotLeading) {
		err = errors.Join(err, p.withdrawEndpoints(ctx))
	}
	return err
}

// handOffPoll is how often handOff looks for the successor's endpoint in
// the caches.
const handOffPoll = 10 * time.Millisecond

// handOff is the endpoint's part of a planned stop, once this replica has
// released the Lease: it leaves its slice and Endpoints object to the
// successor, which replaces this replica's address with its own in one
// write each, and waits up to bound for that; whatever still names this
// replica then (no standby took over) is withdrawn, so that the Service
// is not left with the address of a stopped replica.
//
// Left to the successor, the Service changes once, from this replica to
// the next. A withdrawal first would change it twice, through a Service
// without endpoints, which clients that batch changes make last: kube-proxy
// waits --iptables-min-sync-period (1 s by default) between two syncs of
// its rules, and kube-apiserver marks an APIService whose Service has no
// endpoint unavailable until it has checked the next one.
func (p *publisher) handOff(ctx context.Context, bound time.Duration) error {
	p.released.Store(true)
	if err := p.settle(ctx); err != nil {
		return err
	}
	clk := p.cfg.Clock
	deadline := clk.Now().Add(bound)
	for p.namesMe() && clk.Now().Before(deadline) {
		tick := clk.NewTimer(handOffPoll)
		select {
		case <-ctx.Done():
			// The hand-over's time (RenewDeadline) is up: a withdrawal
			// now could not be bounded; the next leader takes the
			// endpoint over.
			tick.Stop()
			return fmt.Errorf("no successor took the endpoint over before the hand-over's deadline; left in place: %w", ctx.Err())
		case <-tick.C():
		}
	}
	if !p.namesMe() {
		p.log.V(1).Info("the successor took the endpoint over")
		return nil
	}
	p.log.Info("no successor took the endpoint over; withdrawing it", "waited", bound)
	return p.withdraw(ctx)
}

// namesMe reports whether one of the leader's slices or its Endpoints
// object, as the caches have them, still names this replica.
func (p *publisher) namesMe() bool {
	mine := func(o metav1.Object, err error) bool {
		return err == nil && o.GetAnnotations()[AnnotationIdentity] == p.cfg.Identity
	}
	for _, addr := range p.leaderAddresses() {
		if mine(p.slices.Get(p.sliceNameFor(addressType(addr)))) {
			return true
		}
	}
	return p.endpoints != nil && mine(p.endpoints.Get(p.ep.Service))
}

// withdrawEndpoints deletes the leader's Endpoints object, as withdraw.
func (p *publisher) withdrawEndpoints(ctx context.Context) error {
	have, err := p.endpoints.Get(p.ep.Service)
	return p.withdrawOwn(ctx, "Endpoints", have, err, p.cfg.Client.CoreV1().Endpoints(p.cfg.Namespace).Delete)
}

// withdrawSlice deletes the leader's slices, as withdraw.
func (p *publisher) withdrawSlice(ctx context.Context) error {
	var errs []error
	for _, addr := range p.leaderAddresses() {
		err := p.withdrawSliceNamed(ctx, p.sliceNameFor(addressType(addr)))
		if errors.Is(err, errNotLeading) {
			return err
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// withdrawSliceNamed deletes one of the leader's slices, as withdraw.
func (p *publisher) withdrawSliceNamed(ctx context.Context, name string) error {
	have, err := p.slices.Get(name)
	return p.withdrawOwn(ctx, "EndpointSlice", have, err, p.cfg.Client.DiscoveryV1().EndpointSlices(p.cfg.Namespace).Delete)
}

// withdrawOwn deletes have, the cache's copy of one of the leader's
// objects (err: the cache's answer), if it still names this replica, at
// the version seen, and only while the replica still leads.
func (p *publisher) withdrawOwn(ctx context.Context, kind string, have metav1.Object, err error,
	del func(context.Context, string, metav1.DeleteOptions) error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if have.GetAnnotations()[AnnotationIdentity] != p.cfg.Identity {
		return nil
	}
	if !p.leading() && !p.released.Load() {
		return errNotLeading
	}
	uid, version := have.GetUID(), have.GetResourceVersion()
	err = del(ctx, have.GetName(), metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &version},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("withdraw %s %s: %w", kind, have.GetName(), err)
	}
	return nil
}

// addressType is the EndpointSlice address type of an address.
func addressType(addr netip.Addr) discoveryv1.AddressType {
	if addr.Is6() && !addr.Is4In6() {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// annotations are the leader's identity and term, on what it publishes.
func (p *publisher) annotations() map[string]string {
	// Every term writes all three: a slice is updated in place, and an
	// annotation left out would keep the previous term's value.
	handOver := names.HandOverUnplanned
	if p.handedOver != nil && p.handedOver() {
		handOver = names.HandOverPlanned
	}
	return map[string]string{
		AnnotationIdentity: p.cfg.Identity,
		AnnotationTerm:     strconv.FormatInt(int64(p.term()), 10),
		AnnotationHandOver: handOver,
	}
}

// desiredSlice is the leader's slice of its Address.
func (p *publisher) desiredSlice(svc *corev1.Service) *discoveryv1.EndpointSlice {
	return p.desiredSliceFor(svc, netip.MustParseAddr(p.ep.Address)) // validated
}

// desiredSliceFor is the leader's slice of one of its addresses.
func (p *publisher) desiredSliceFor(svc *corev1.Service, addr netip.Addr) *discoveryv1.EndpointSlice {
	addrType := addressType(addr)
	ep := discoveryv1.Endpoint{
		Addresses: []string{addr.Unmap().String()},
		Conditions: discoveryv1.EndpointConditions{
			Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false),
		},
	}
	if p.ep.PodName != "" {
		ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: p.cfg.Namespace, Name: p.ep.PodName}
	}
	if p.ep.NodeName != "" {
		ep.NodeName = ptr.To(p.ep.NodeName)
	}
	var ports []discoveryv1.EndpointPort
	for _, port := range p.ep.Ports {
		// As the API server defaults them, so that a written slice
		// reads back equal.
		port.Name = ptr.To(ptr.Deref(port.Name, ""))
		port.Protocol = ptr.To(ptr.Deref(port.Protocol, corev1.ProtocolTCP))
		ports = append(ports, port)
	}
	if len(ports) == 0 {
		for _, sp := range svc.Spec.Ports {
			// As the API server defaults an unset targetPort: the port.
			port := sp.Port
			switch {
			case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
				// resolveNamedPorts made sure it resolves.
				if named, ok := p.namedPort(sp); ok {
					port = named
				}
			case sp.TargetPort.IntVal != 0:
				port = sp.TargetPort.IntVal
			}
			ports = append(ports, discoveryv1.EndpointPort{
				Name: ptr.To(sp.Name), Port: ptr.To(port), Protocol: ptr.To(cmp.Or(sp.Protocol, corev1.ProtocolTCP)), AppProtocol: sp.AppProtocol,
			})
		}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.sliceNameFor(addrType),
			Namespace: p.cfg.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			Annotations: p.annotations(),
			// No blockOwnerDeletion: with OwnerReferencesPermissionEnforcement
			// (OpenShift's default) setting it needs update on
			// services/finalizers, which the Role does not grant; the
			// slice is garbage-collected with its Service all the same.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true),
			}},
		},
		AddressType: addrType,
		Endpoints:   []discoveryv1.Endpoint{ep},
		Ports:       ports,
	}
}

// sliceUpToDate reports whether have serves as want: want's labels and
// annotations are there (others, added by anyone, are left alone), with
// the owner, the address and the ports that want has.
func sliceUpToDate(have, want *discoveryv1.EndpointSlice) bool {
	return subset(want.Labels, have.Labels) &&
		subset(want.Annotations, have.Annotations) &&
		have.AddressType == want.AddressType &&
		apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		apiequality.Semantic.DeepEqual(have.Endpoints, want.Endpoints) &&
		apiequality.Semantic.DeepEqual(have.Ports, want.Ports)
}

// subset reports whether every entry of want is in have.
func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// takeMeta makes an object this leader writes carry want's labels and
// annotations (others' are kept) and want's owner references.
func takeMeta(dst, want *metav1.ObjectMeta) {
	if dst.Labels == nil {
		dst.Labels = map[string]string{}
	}
	if dst.Annotations == nil {
		dst.Annotations = map[string]string{}
	}
	maps.Copy(dst.Labels, want.Labels)
	maps.Copy(dst.Annotations, want.Annotations)
	dst.OwnerReferences = want.OwnerReferences
}
