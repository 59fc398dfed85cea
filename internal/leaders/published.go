package leaders

import (
	"sort"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/fastover/fastover/leader"
)

// published finds the Service a Lease's leaders publish: the one whose
// leader slices name the holder; else, while a new holder has not
// published yet (or failed to), the one whose slices name a replica that
// recorded Events on the Lease, of the highest term. Nil if none does.
func published(slices []discoveryv1.EndpointSlice, lease *coordinationv1.Lease, evs []Handover) *Published {
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	var term int32
	if lease.Spec.LeaseTransitions != nil {
		term = *lease.Spec.LeaseTransitions
	}
	known := map[string]bool{}
	for _, e := range evs {
		if id, _, ok := strings.Cut(e.Message, " "); ok {
			known[id] = true
		}
	}
	byService := map[string]*Published{}
	for i := range slices {
		s := &slices[i]
		if s.Namespace != lease.Namespace {
			continue
		}
		svc := s.Labels[discoveryv1.LabelServiceName]
		id := s.Annotations[leader.AnnotationIdentity]
		if svc == "" || id == "" || (id != holder && !known[id]) {
			continue
		}
		p := byService[svc]
		if p == nil {
			p = &Published{Service: svc, Identity: id, Term: parseTerm(s.Annotations[leader.AnnotationTerm]), handOver: s.Annotations[leader.AnnotationHandOver]}
			byService[svc] = p
		}
		for _, ep := range s.Endpoints {
			p.Addresses = append(p.Addresses, ep.Addresses...)
		}
	}
	var best *Published
	for _, p := range byService {
		p.IsHolder = holder != "" && p.Identity == holder && p.Term == term
		sort.Strings(p.Addresses)
		switch {
		case best == nil,
			p.Identity == holder && best.Identity != holder,
			(p.Identity == holder) == (best.Identity == holder) && (p.Term > best.Term || p.Term == best.Term && p.Service < best.Service):
			best = p
		}
	}
	return best
}
