package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fastover/fastover/retrofit"
)

func TestInstalledAt(t *testing.T) {
	created := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	var stderr bytes.Buffer
	installed := fake.NewClientset(&admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: retrofit.WebhookConfiguration, CreationTimestamp: metav1.NewTime(created)},
	})
	assert.True(t, created.Equal(installedAt(context.Background(), installed, &stderr)))
	assert.Empty(t, stderr.String())

	// Not installed: no warning, the zero time.
	assert.True(t, installedAt(context.Background(), fake.NewClientset(), &stderr).IsZero())
	assert.Empty(t, stderr.String())

	// Not allowed to read it: the audit goes on, and says why its reasons
	// are vaguer.
	forbidden := fake.NewClientset()
	forbidden.PrependReactor("get", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
			retrofit.WebhookConfiguration, nil)
	})
	assert.True(t, installedAt(context.Background(), forbidden, &stderr).IsZero())
	assert.Contains(t, stderr.String(), "warning: read MutatingWebhookConfiguration fastover")
	assert.Contains(t, stderr.String(), "forbidden")
	assert.Contains(t, stderr.String(), "do not say whether a pod predates fastover")
}
