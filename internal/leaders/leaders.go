package leaders

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fastover/fastover/leader"
)

// Leader is what the cluster says of one Lease of a fastover leader.
type Leader struct {
	Namespace string `json:"namespace"`
	Lease     string `json:"lease"`
	// Holder is the Lease's holderIdentity; empty when the Lease is free
	// (its last holder released it).
	Holder string `json:"holder,omitempty"`
	// Term is the Lease's leaseTransitions, which the library counts as
	// its terms.
	Term int32 `json:"term"`
	// Since is when the holder acquired the Lease; Renewed its last
	// renewal.
	Since   *time.Time `json:"since,omitempty"`
	Renewed *time.Time `json:"renewed,omitempty"`
	// LeaseDurationSeconds is how long the Lease lasts after a renewal.
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
	// Expired: the Lease was not renewed within its duration; the
	// replicas that wait for it take it.
	Expired bool `json:"expired"`
	// HandOver is how the current term began: "planned" (its previous
	// holder released the Lease), "crash takeover" (a standby took it on
	// the evidence that the holder's process ended) or "unplanned" (an
	// expired Lease, or the first term); empty if unknown.
	HandOver string `json:"handOver,omitempty"`
	// HolderPod is the Pod the current term records, if any.
	HolderPod *Replica `json:"holderPod,omitempty"`
	// Published is what the leader's EndpointSlices say, if a Service is
	// published for this Lease.
	Published *Published `json:"published,omitempty"`
	// Standbys are the holder Pod's siblings (the Pods of its controller,
	// or, without one, of its labels); nil if the term records no Pod.
	Standbys []Replica `json:"standbys,omitempty"`
	// Handovers are the last Events of the library on the Lease, oldest
	// first.
	Handovers []Handover `json:"handovers,omitempty"`
	// Problems are what an operator should look at, in words; empty when
	// all is well.
	Problems []string `json:"problems,omitempty"`
}

// Published is a Service the leader publishes itself on.
type Published struct {
	Service string `json:"service"`
	// Identity and Term are the annotations of the leader's slice: who
	// published it, in which term.
	Identity string `json:"identity"`
	Term     int32  `json:"term"`
	// Addresses are the slice's endpoint addresses.
	Addresses []string `json:"addresses,omitempty"`
	// IsHolder: the slice was written by the Lease's holder in its
	// current term.
	IsHolder bool `json:"isHolder"`

	handOver string // the slice's hand-over annotation
}

// Replica is a Pod of the fleet.
type Replica struct {
	Pod         string `json:"pod"`
	Node        string `json:"node,omitempty"`
	Phase       string `json:"phase,omitempty"`
	Ready       bool   `json:"ready"`
	Terminating bool   `json:"terminating,omitempty"`
	// Missing: the Pod the Lease records does not exist (any more).
	Missing bool `json:"missing,omitempty"`
}

// Handover is one Event of the library on a Lease.
type Handover struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// MaxHandovers is how many of a Lease's last Events List keeps.
const MaxHandovers = 5

// eventComponent is the source of the Events the library records with the
// recorder it makes itself.
const eventComponent = "fastover-leader"

// holderPodRecord is the part of leader.AnnotationHolderPod this package
// reads.
type holderPodRecord struct {
	Holder    string `json:"holder"`
	Term      int32  `json:"term"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
}

// List returns the fastover leaders of namespace ("" for every namespace)
// sorted by namespace and Lease, as of now.
func List(ctx context.Context, client kubernetes.Interface, namespace string, now time.Time) ([]Leader, error) {
	leases, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Leases: %w", err)
	}
	slices, err := client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelManagedBy + "=" + leader.ManagedBy,
	})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices: %w", err)
	}
	events, err := leaseEvents(ctx, client, namespace)
	if err != nil {
		return nil, err
	}
	var out []Leader
	for i := range leases.Items {
		lease := &leases.Items[i]
		evs := events[key(lease.Namespace, lease.Name)]
		pub := published(slices.Items, lease, evs)
		_, recorded := lease.Annotations[leader.AnnotationHolderPod]
		if !recorded && pub == nil && len(evs) == 0 {
			continue // not a fastover leader's
		}
		l := describe(lease, pub, evs, now)
		if err := standbys(ctx, client, lease, &l); err != nil {
			return nil, err
		}
		l.Problems = problems(l)
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Lease < out[j].Lease
	})
	return out, nil
}

// describe is what the Lease, its slice and its Events say.
func describe(lease *coordinationv1.Lease, pub *Published, evs []Handover, now time.Time) Leader {
	s := lease.Spec
	l := Leader{Namespace: lease.Namespace, Lease: lease.Name, Published: pub}
	if s.HolderIdentity != nil {
		l.Holder = *s.HolderIdentity
	}
	if s.LeaseTransitions != nil {
		l.Term = *s.LeaseTransitions
	}
	if s.AcquireTime != nil {
		l.Since = ptrTime(s.AcquireTime.Time)
	}
	if s.RenewTime != nil {
		l.Renewed = ptrTime(s.RenewTime.Time)
	}
	if s.LeaseDurationSeconds != nil {
		l.LeaseDurationSeconds = *s.LeaseDurationSeconds
	}
	l.Expired = l.Holder == "" || l.Renewed == nil ||
		now.After(l.Renewed.Add(time.Duration(l.LeaseDurationSeconds)*time.Second))
	if len(evs) > MaxHandovers {
		evs = evs[len(evs)-MaxHandovers:]
	}
	l.Handovers = evs
	if rec, ok := holderPod(lease); ok && rec.Holder == l.Holder && rec.Term == l.Term {
		l.HolderPod = &Replica{Pod: rec.Namespace + "/" + rec.Pod}
	}
	l.HandOver = handOver(l, evs)
	return l
}

// handOver tells how the current term began: a CrashTakeover Event of the
// holder since its term began, else the hand-over its slice records.
func handOver(l Leader, evs []Handover) string {
	if l.Holder == "" {
		return ""
	}
	for _, e := range evs {
		if e.Reason == "CrashTakeover" && l.Since != nil && !e.Time.Before(l.Since.Add(-time.Second)) &&
			strings.HasPrefix(e.Message, l.Holder+" ") {
			return "crash takeover"
		}
	}
	if l.Published != nil && l.Published.IsHolder {
		return l.Published.handOver
	}
	return ""
}

// holderPod parses the Lease's record of its holder's Pod.
func holderPod(lease *coordinationv1.Lease) (holderPodRecord, bool) {
	raw, ok := lease.Annotations[leader.AnnotationHolderPod]
	if !ok {
		return holderPodRecord{}, false
	}
	var rec holderPodRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Namespace == "" || rec.Pod == "" {
		return holderPodRecord{}, false
	}
	return rec, true
}

// problems are what is wrong with l, in words.
func problems(l Leader) []string {
	var p []string
	switch {
	case l.Holder == "":
		p = append(p, "no leader: the Lease is free")
	case l.Expired:
		p = append(p, fmt.Sprintf("no leader: the Lease of %s expired", l.Holder))
	}
	if l.Holder != "" && l.Published != nil && !l.Published.IsHolder {
		p = append(p, fmt.Sprintf("Service %s publishes %s (term %d), not the holder %s (term %d)",
			l.Published.Service, l.Published.Identity, l.Published.Term, l.Holder, l.Term))
	}
	if h := l.HolderPod; h != nil {
		switch {
		case h.Missing:
			p = append(p, fmt.Sprintf("the holder's Pod %s does not exist", h.Pod))
		case h.Terminating:
			p = append(p, fmt.Sprintf("the holder's Pod %s is Terminating", h.Pod))
		}
	}
	if l.Standbys != nil {
		if l.ReadyStandbys() == 0 {
			p = append(p, "no standby is ready: a failover has no replica to go to")
		}
	}
	return p
}

// ReadyStandbys counts the standbys a failover can go to: Ready and not
// Terminating.
func (l Leader) ReadyStandbys() int {
	ready := 0
	for _, s := range l.Standbys {
		if s.Ready && !s.Terminating {
			ready++
		}
	}
	return ready
}

func key(namespace, name string) string { return namespace + "/" + name }

func ptrTime(t time.Time) *time.Time { return &t }

// parseTerm reads a term annotation; -1 if it is not a number.
func parseTerm(s string) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return -1
	}
	return int32(n)
}
