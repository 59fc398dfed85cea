package leader

import (
	"context"
	"fmt"
	"maps"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// objectAPI is the part of a typed client (EndpointSlices, Endpoints) that
// ownWriter uses.
type objectAPI[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
}

// ownWriter creates or updates an object the leader owns (one of its
// EndpointSlices, its Endpoints object), if it is not as wanted already.
// It starts from the cache; where the cache is behind (the object this
// replica just wrote, or a slice that left the cache because its
// service-name label was removed) the API answers AlreadyExists or
// Conflict, and the object is read from the API and taken back from there,
// once. A stale object of the same name (the endpoints controller's, from
// selector days) is taken over in place. It writes only while leading()
// holds; a write that got no answer is noted (settle.go).
type ownWriter[T metav1.Object] struct {
	kind     string                       // the object's kind, in errors
	cached   func(name string) (T, error) // the informer's copy
	api      objectAPI[T]
	upToDate func(have, want T) bool
	// update is a copy of have, to be written, that serves as want.
	update func(have, want T) T

	leading func() bool
	noted   func(err error)
}

// write brings the object named as want to want.
func (w ownWriter[T]) write(ctx context.Context, want T) error {
	name := want.GetName()
	have, err := w.cached(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	found := err == nil
	for attempt := 0; ; attempt++ {
		if found && w.upToDate(have, want) {
			return nil
		}
		if !w.leading() {
			return errNotLeading
		}
		verb := "create"
		if found {
			// have's resourceVersion: a conflict means another writer,
			// or a cache behind the API.
			verb = "update"
			_, err = w.api.Update(ctx, w.update(have, want), metav1.UpdateOptions{})
		} else {
			_, err = w.api.Create(ctx, want, metav1.CreateOptions{})
		}
		if err == nil {
			return nil
		}
		if attempt > 0 || !retryFromAPI(err) {
			w.noted(err)
			return fmt.Errorf("%s %s %s: %w", verb, w.kind, name, err)
		}
		have, err = w.api.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read %s %s: %w", w.kind, name, err)
		}
		found = err == nil
	}
}

// retryFromAPI reports whether a write failed because the cache it
// started from is behind the API: the object exists already, changed, or
// is gone. The object is then read from the API and the write tried once
// more.
func retryFromAPI(err error) bool {
	return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err)
}

// metaUpToDate reports whether have's metadata serves as want's: want's
// labels and annotations are there (others, added by anyone, are left
// alone), with want's owner. takeMeta writes what it reads.
func metaUpToDate(have, want *metav1.ObjectMeta) bool {
	return subset(want.Labels, have.Labels) &&
		subset(want.Annotations, have.Annotations) &&
		apiequality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences)
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

// subset reports whether every entry of want is in have.
func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
