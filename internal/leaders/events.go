package leaders

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// leaseEvents returns the library's Events on Leases, by Lease
// (namespace/name), oldest first.
func leaseEvents(ctx context.Context, client kubernetes.Interface, namespace string) (map[string][]Handover, error) {
	list, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.kind", "Lease").String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list Events: %w", err)
	}
	out := map[string][]Handover{}
	for i := range list.Items {
		e := &list.Items[i]
		if e.InvolvedObject.Kind != "Lease" || e.Source.Component != eventComponent && e.ReportingController != eventComponent {
			continue
		}
		k := key(e.InvolvedObject.Namespace, e.InvolvedObject.Name)
		out[k] = append(out[k], Handover{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count})
	}
	for _, evs := range out {
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	}
	return out, nil
}

// eventTime is when an Event last happened, whichever of its times is set.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}
