package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func configMaps(n int) []runtime.Object {
	objs := []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "stamp"}}}
	for i := range n {
		objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{LabelCache: "true"},
		}})
	}
	return objs
}

// The leader's first unit of work stamps who leads, when, and how many
// ConfigMaps its synced cache holds (the labelled ones only); then the
// workers drain the queue the handlers filled.
func TestLeaderStampsWithItsCache(t *testing.T) {
	client := fake.NewClientset(configMaps(25)...)
	c, err := newController(client, "ns", "replica-a", "stamp")
	require.NoError(t, err)
	at := time.Date(2026, 11, 30, 15, 0, 0, 123456789, time.UTC)
	c.now = func() time.Time { return at }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer c.factory.Shutdown()
	require.NoError(t, c.startInformers(ctx))
	assert.Equal(t, 25, c.cachedLen())

	done := make(chan error, 1)
	go func() { done <- c.lead(ctx, 2) }()
	var cm *corev1.ConfigMap
	require.Eventually(t, func() bool {
		cm, err = client.CoreV1().ConfigMaps("ns").Get(ctx, "stamp", metav1.GetOptions{})
		return err == nil && cm.Annotations != nil
	}, 5*time.Second, time.Millisecond, "no stamp")
	require.Eventually(t, func() bool { return c.queue.Len() == 0 }, 5*time.Second, time.Millisecond, "the workers did not drain the queue")
	assert.Equal(t, map[string]string{
		AnnotationStampedBy: "replica-a",
		AnnotationStampedAt: "2026-11-30T15:00:00.123456789Z",
		AnnotationCached:    "25",
	}, cm.Annotations)
	cancel()
	require.NoError(t, <-done)
}

// A missing stamp ConfigMap ends the work with an error that names it.
func TestStampOfAMissingConfigMap(t *testing.T) {
	c, err := newController(fake.NewClientset(), "ns", "replica-a", "nope")
	require.NoError(t, err)
	assert.ErrorContains(t, c.stampNow(context.Background()), "stamping ConfigMap ns/nope")
}

func TestParseFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	o, err := parseFlags([]string{"--namespace=ns"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "informer-controller", o.stamp, "the stamp defaults to the Lease's name")
	assert.True(t, o.warm)
	for msg, args := range map[string][]string{
		"--namespace is required": nil,
		"want at least 1":         {"--namespace=ns", "--workers=0"},
		"unexpected arguments":    {"--namespace=ns", "extra"},
		"invalid boolean value":   {"--namespace=ns", "--warm=maybe"},
	} {
		_, err := parseFlags(args, io.Discard)
		assert.ErrorContains(t, err, msg)
	}
}
