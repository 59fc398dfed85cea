package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The reconciler stamps the ConfigMap with its identity, once per
// identity: a replica that finds its own stamp leaves it.
func TestReconcileStamps(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", Labels: map[string]string{LabelStamp: "true"}}}
	assert.True(t, Selector().Matches(labels.Set(cm.Labels)))
	c := fake.NewClientBuilder().WithObjects(cm).Build()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "cm"}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

	for i, step := range []struct {
		id     string
		wantAt string
	}{
		{"a", "2026-01-02T03:04:05.000000006Z"},
		{"a", "2026-01-02T03:04:05.000000006Z"}, // its own stamp: left alone
		{"b", "2026-01-02T03:04:07.000000006Z"},
	} {
		at := t0.Add(time.Duration(i) * time.Second)
		r := &ConfigMapReconciler{Client: c, Identity: step.id, Now: func() time.Time { return at }}
		_, err := r.Reconcile(ctx, req)
		require.NoError(t, err)
		var got corev1.ConfigMap
		require.NoError(t, c.Get(ctx, req.NamespacedName, &got))
		assert.Equal(t, step.id, got.Annotations[AnnotationStampedBy], "step %d", i)
		assert.Equal(t, step.wantAt, got.Annotations[AnnotationStampedAt], "step %d", i)
	}

	// Gone: nothing to do.
	r := &ConfigMapReconciler{Client: c, Identity: "a"}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "gone"}})
	assert.NoError(t, err)
}
