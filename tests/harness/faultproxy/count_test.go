package faultproxy

import (
	"bufio"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		method, url string
		want        Request
	}{
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/ctl", Request{"get", "leases"}},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/ctl", Request{"update", "leases"}},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", Request{"create", "leases"}},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases?fieldSelector=metadata.name%3Dctl&limit=500", Request{"list", "leases"}},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases?watch=true&resourceVersion=5", Request{"watch", "leases"}},
		{"GET", "/apis/coordination.k8s.io/v1/watch/namespaces/ns/leases/ctl", Request{"watch", "leases"}},
		{"GET", "/api/v1/namespaces/ns/services?watch=1", Request{"watch", "services"}},
		{"PATCH", "/api/v1/namespaces/ns/services/ctl", Request{"patch", "services"}},
		{"PUT", "/api/v1/namespaces/ns/services/ctl/status", Request{"update", "services/status"}},
		{"DELETE", "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/ctl-x", Request{"delete", "endpointslices"}},
		{"DELETE", "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices", Request{"deletecollection", "endpointslices"}},
		{"GET", "/api/v1/namespaces/ns", Request{"get", "namespaces"}},
		{"GET", "/api/v1/nodes", Request{"list", "nodes"}},
		{"GET", "/api", Request{"list", "discovery"}},
		{"GET", "/apis/discovery.k8s.io/v1", Request{"list", "discovery"}},
		{"GET", "/version", Request{"list", "discovery"}},
		{"GET", "/healthz", Request{"list", "other"}},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, c.url, nil)
		assert.Equal(t, c.want, Classify(r), "%s %s", c.method, c.url)
	}
}

func TestCounts(t *testing.T) {
	p := upstream(t)
	before := p.Counts()
	assert.Zero(t, before.Total())
	for range 3 {
		resp, err := get(t, p, "/api/v1/namespaces/ns/services/x", 5*time.Second)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	resp, err := get(t, p, "/api/v1/namespaces/ns/services?watch=true", 10*time.Second)
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan())
	c := p.Counts()
	assert.Equal(t, 3, c.Requests[Request{"get", "services"}])
	assert.Equal(t, 1, c.Requests[Request{"watch", "services"}])
	assert.Equal(t, 4, c.Total())
	assert.Equal(t, 3, c.NonWatch())
	assert.Equal(t, 1, c.Watches())
	assert.Equal(t, 1, c.OpenWatches)
	_ = resp.Body.Close()
	require.Eventually(t, func() bool { return p.Counts().OpenWatches == 0 }, 5*time.Second, 20*time.Millisecond,
		"the watch still counts as open after the client closed it")

	resp, err = get(t, p, "/api/v1/namespaces/ns/services/x", 5*time.Second)
	require.NoError(t, err)
	_ = resp.Body.Close()
	d := p.Counts().Sub(c)
	assert.Equal(t, map[Request]int{{"get", "services"}: 1}, d.Requests)
}
