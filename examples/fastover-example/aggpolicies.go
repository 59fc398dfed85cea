package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// The aggregated API's second resource, policies: a fixed set of objects
// (--api-policies of them, each with --api-policy-size bytes of rules),
// the payload an agent lists from the controller, as an antrea-agent lists
// its network policies. They never change, so a watch of them carries
// bookmarks only; what they cost is the LIST every agent makes again when
// it reconnects to a new leader, unless the versions are shared
// (--api-versions=shared): then its watch resumes there. Each names the
// replica that served it (servedByAnnotation), so an agent sees whose list
// it holds.
const (
	policiesResource   = "policies"
	policyKind         = "Policy"
	servedByAnnotation = apiGroup + "/served-by"
	// maxPolicyBytes bounds --api-policies × --api-policy-size: one LIST
	// is built in memory.
	maxPolicyBytes = 256 << 20
	// bookmarkInterval is how often a watch of policies that asked for
	// bookmarks gets one, as kube-apiserver sends them about once a minute.
	bookmarkInterval = time.Minute
)

var (
	policiesGR   = schema.GroupResource{Group: apiGroup, Resource: policiesResource}
	policiesPath = versionPath + "/" + policiesResource
)

// Policy is one object of the payload.
type Policy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PolicySpec `json:"spec"`
}

// PolicySpec holds the policy's rules: opaque bytes of the set size.
type PolicySpec struct {
	Rules string `json:"rules"`
}

// PolicyList is the answer to a LIST of policies: all of them.
type PolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Policy `json:"items"`
}

// replicaHeader names, on every answer of the aggregated API, the replica
// that gave it: a client sees who answered a watch that carries no event.
const replicaHeader = "Fastover-Example-Replica"

// sharedVersion is the payload's resourceVersion on every replica with
// --api-versions=shared: the payload never changes, so its version is the
// same wherever it is served, as the versions of a controller that derives
// them from its inputs' are.
const sharedVersion = "1"

// policySet is the payload, built once: the objects differ from one
// replica to the next only in their served-by annotation.
type policySet struct {
	items []Policy
	// shared: the objects' and lists' version is sharedVersion, and a
	// watch from it resumes on any replica.
	shared bool
}

// checkPolicyFlags says what is wrong with --api-policies and
// --api-policy-size.
func checkPolicyFlags(n, size int) error {
	if n < 0 || n > 100000 {
		return fmt.Errorf("--api-policies %d: want 0-100000", n)
	}
	if size < 0 || size > 1<<20 {
		return fmt.Errorf("--api-policy-size %d: want 0-1048576 bytes", size)
	}
	if int64(n)*int64(size) > maxPolicyBytes {
		return fmt.Errorf("--api-policies %d × --api-policy-size %d is over %d MiB: one LIST is built in memory", n, size, maxPolicyBytes>>20)
	}
	return nil
}

// newPolicySet makes n policies of size bytes of rules each, served by id,
// created at created; shared: with sharedVersion as their version.
func newPolicySet(n, size int, id string, created time.Time, shared bool) *policySet {
	rules := strings.Repeat("r", size)
	s := &policySet{items: make([]Policy, n), shared: shared}
	rv := strconv.FormatInt(created.UnixMicro(), 10)
	if shared {
		rv = sharedVersion
	}
	for i := range s.items {
		s.items[i] = Policy{
			TypeMeta: metav1.TypeMeta{Kind: policyKind, APIVersion: groupVersion.String()},
			ObjectMeta: metav1.ObjectMeta{
				Name:              fmt.Sprintf("policy-%05d", i),
				CreationTimestamp: metav1.NewTime(created),
				// The objects never change; the replica's start time
				// makes a restarted replica's versions newer, unless
				// they are shared.
				ResourceVersion: rv,
				Annotations:     map[string]string{servedByAnnotation: id},
			},
			Spec: PolicySpec{Rules: rules},
		}
	}
	return s
}

// servePolicies answers a LIST, a GET of one policy, or a watch.
func (a *aggAPI) servePolicies(w http.ResponseWriter, r *http.Request, name string) {
	me := a.replica()
	if a.refuseStandby && !me.Status.Leading {
		a.refuse(w, me)
		return
	}
	items := a.policies.items
	if name != "" {
		for i := range items {
			if items[i].Name == name {
				writeJSON(w, http.StatusOK, &items[i])
				return
			}
		}
		writeStatus(w, apierrors.NewNotFound(policiesGR, name))
		return
	}
	rv := me.ResourceVersion
	if a.policies.shared {
		rv = sharedVersion
	}
	if isWatch(r) {
		a.watchPolicies(w, r, rv)
		return
	}
	writeJSON(w, http.StatusOK, &PolicyList{
		TypeMeta: metav1.TypeMeta{Kind: policyKind + "List", APIVersion: groupVersion.String()},
		ListMeta: metav1.ListMeta{ResourceVersion: rv},
		Items:    items,
	})
}

// ownVersion reports whether a watch of policies may start at
// resourceVersion v: any ("" or "0"), one this replica gave out, or, with
// shared versions, sharedVersion.
func (a *aggAPI) ownVersion(v string) bool {
	if v == "" || v == "0" || (a.policies.shared && v == sharedVersion) {
		return true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return err == nil && n >= a.firstRV && n <= a.rv.Load()
}

// watchPolicies streams a watch of policies from a version this replica
// gave out (else 410 Gone: ownVersion): the objects as ADDED events
// first if the client asks for initial events (then the bookmark that ends
// them), and then, as nothing changes, a bookmark every bookmarkInterval
// if it allows them, until the client goes or timeoutSeconds passes.
func (a *aggAPI) watchPolicies(w http.ResponseWriter, r *http.Request, rv string) {
	q := r.URL.Query()
	timeout, err := watchTimeout(q.Get("timeoutSeconds"))
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if from := q.Get("resourceVersion"); !a.ownVersion(from) {
		// A version another replica gave out (the client's watch moved to
		// a new leader): as an API server whose store does not have it,
		// 410 Gone, and the client lists again.
		writeStatus(w, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s (replica %s serves versions from %d; --api-versions=shared to share them)", from, a.src.Identity(), a.firstRV)))
		return
	}
	send, ok := startStream(w)
	if !ok {
		return
	}
	mark := func(annotations map[string]string) *Policy {
		return &Policy{
			TypeMeta:   metav1.TypeMeta{Kind: policyKind, APIVersion: groupVersion.String()},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Annotations: annotations},
		}
	}
	if q.Get("sendInitialEvents") == "true" {
		for i := range a.policies.items {
			if !send(watch.Added, &a.policies.items[i]) {
				return
			}
		}
		if !send(watch.Bookmark, mark(map[string]string{initialEventsEnd: "true"})) {
			return
		}
	}
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	everyUntil(r, timeout, bookmarkInterval, func() bool {
		return !bookmarks || send(watch.Bookmark, mark(nil))
	})
}
