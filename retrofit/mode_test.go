package retrofit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// modeClient is a fake API server that serves MutatingAdmissionPolicy
// (or not) and holds objs.
func modeClient(serves bool, objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	resources := []metav1.APIResource{{Name: "mutatingwebhookconfigurations"}}
	if serves {
		resources = append(resources, metav1.APIResource{Name: "mutatingadmissionpolicies"}, metav1.APIResource{Name: "mutatingadmissionpolicybindings"})
	}
	c.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: resources},
	}
	return c
}

func TestDetectMode(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "fastover", CreationTimestamp: metav1.NewTime(t0.Add(d))}
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: at(0)}
	otherMWC := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: at(time.Hour)}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: at(2 * time.Hour),
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "fastover"}}
	wrongBinding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: at(2 * time.Hour),
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "another"}}
	for _, tc := range []struct {
		name        string
		serves      bool
		objs        []runtime.Object
		want        Mode
		installedAt time.Time
		notes       []string
	}{
		{"none", true, []runtime.Object{otherMWC}, ModeNone, time.Time{}, nil},
		{"webhook", true, []runtime.Object{mwc}, ModeWebhook, t0, nil},
		{"policy: since its binding", true, []runtime.Object{policy, binding}, ModePolicy, t0.Add(2 * time.Hour), nil},
		{"both: since the earlier", true, []runtime.Object{mwc, policy, binding}, ModeBoth, t0, nil},
		{"a policy without its binding applies nowhere", true, []runtime.Object{policy}, ModeNone, time.Time{},
			[]string{"MutatingAdmissionPolicy fastover has no binding fastover: it applies to no pod"}},
		{"a binding of another policy", true, []runtime.Object{mwc, policy, wrongBinding}, ModeWebhook, t0,
			[]string{`MutatingAdmissionPolicyBinding fastover binds "another", not the policy fastover`}},
		{"an API server before 1.36", false, []runtime.Object{mwc}, ModeWebhook, t0,
			[]string{"the API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.36+)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst, err := DetectMode(context.Background(), modeClient(tc.serves, tc.objs...))
			require.NoError(t, err)
			assert.Equal(t, tc.want, inst.Mode)
			assert.Equal(t, tc.installedAt, inst.InstalledAt().UTC())
			assert.Equal(t, tc.notes, inst.Notes)
		})
	}
}

// TestDetectModeErrors: a failure to read is an error, not "none"; what
// could be read is still returned.
func TestDetectModeErrors(t *testing.T) {
	c := modeClient(true, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fastover"}})
	c.PrependReactor("get", "mutatingadmissionpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}, "fastover", nil)
	})
	inst, err := DetectMode(context.Background(), c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "read MutatingAdmissionPolicy fastover")
	assert.True(t, apierrors.IsForbidden(err))
	assert.Equal(t, ModeWebhook, inst.Mode)
}

func TestInstallationString(t *testing.T) {
	assert.Equal(t, "policy", Installation{Mode: ModePolicy}.String())
	assert.Equal(t, "none (a; b)", Installation{Mode: ModeNone, Notes: []string{"a", "b"}}.String())
}
