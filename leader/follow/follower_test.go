package follow

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/leader/internal/names"
)

const (
	ns   = "ha"
	name = "ctl"
)

// service is a selector-less Service with a ClusterIP of each family and
// two ports, one named https to a named target port.
func service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10", "fd00:96::10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{
				{Name: "https", Port: 443, TargetPort: intstr.FromString("api")},
				{Name: "metrics", Port: 8080, TargetPort: intstr.FromInt32(9090)},
			},
		},
	}
}

// slice is the leader's EndpointSlice of one address, as leader
// publishes it: the identity and term annotations, the ports resolved.
func slice(sliceName, identity string, term int, addr string) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if net.ParseIP(addr).To4() == nil {
		at = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: sliceName,
			Labels:      map[string]string{discoveryv1.LabelServiceName: name},
			Annotations: map[string]string{names.AnnotationIdentity: identity, names.AnnotationTerm: strconv.Itoa(term)},
		},
		AddressType: at,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
}

// dialer is a base dial function that records the addresses it dialed
// and hands out one end of a pipe; the other ends are kept to read from.
type dialer struct {
	mu    sync.Mutex
	addrs []string
	peers []net.Conn
	err   error
}

func (d *dialer) dial(_ context.Context, _, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs = append(d.addrs, address)
	if d.err != nil {
		return nil, d.err
	}
	a, b := net.Pipe()
	d.peers = append(d.peers, b)
	return a, nil
}

func (d *dialer) last() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.addrs) == 0 {
		return ""
	}
	return d.addrs[len(d.addrs)-1]
}

// closed reports whether the connection the i-th dial handed out was
// closed: a read of its peer ends with EOF (and not with the deadline).
func (d *dialer) closed(i int) bool {
	d.mu.Lock()
	p := d.peers[i]
	d.mu.Unlock()
	_ = p.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := p.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

type rig struct {
	client *fake.Clientset
	clock  *testingclock.FakeClock
	f      *Follower
	d      *dialer
	dial   DialFunc
}

func start(t testing.TB, objs ...runtime.Object) *rig {
	t.Helper()
	r := &rig{client: fake.NewClientset(objs...), clock: testingclock.NewFakeClock(time.Now()), d: &dialer{}}
	f, err := New(Config{Client: r.client, Namespace: ns, Service: name, Clock: r.clock, LeaderWait: 10 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, f.Start(ctx))
	r.f, r.dial = f, f.Dialer(r.d.dial)
	return r
}

// dialAsync dials address over tcp in a goroutine, closes what it gets,
// and reports the dial's error.
func dialAsync(ctx context.Context, dial DialFunc, address string) <-chan error {
	done := make(chan error, 1)
	go func() {
		c, err := dial(ctx, "tcp", address)
		if err == nil {
			_ = c.Close()
		}
		done <- err
	}()
	return done
}

func (r *rig) dialed() []string {
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	return append([]string(nil), r.d.addrs...)
}

// stepWhileWaiting steps the fake clock by redialInterval whenever a timer
// waits on it, until the returned function is called.
func (r *rig) stepWhileWaiting() func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if r.clock.HasWaiters() {
				r.clock.Step(redialInterval)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (r *rig) publish(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	api := r.client.DiscoveryV1().EndpointSlices(ns)
	if _, err := api.Update(context.Background(), s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = api.Create(context.Background(), s, metav1.CreateOptions{})
		require.NoError(t, err)
	} else {
		require.NoError(t, err)
	}
}

func (r *rig) waitTerm(t testing.TB, term int32) Leader {
	t.Helper()
	var l Leader
	require.Eventually(t, func() bool {
		var ok bool
		l, ok = r.f.Leader()
		return ok && l.Term == term
	}, 5*time.Second, 5*time.Millisecond, "term %d followed", term)
	return l
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	for _, cfg := range []Config{
		{Namespace: ns, Service: name},
		{Client: client, Service: name},
		{Client: client, Namespace: ns},
		{Client: client, Namespace: ns, Service: name, LeaderWait: -time.Second},
	} {
		_, err := New(cfg)
		assert.Error(t, err, "%+v", cfg)
	}
	f, err := New(Config{Client: client, Namespace: ns, Service: name})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, f.cfg.LeaderWait)
	assert.Equal(t, "cluster.local", f.cfg.ClusterDomain)
}

func TestDialOfTheServiceGoesToTheLeader(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"), slice("ctl-fastover-ipv6", "a", 3, "fd00::1"))
	l := r.waitTerm(t, 3)
	assert.Equal(t, "a", l.Identity)
	ctx := context.Background()
	for _, tc := range []struct{ network, address, want string }{
		{"tcp", "10.96.0.10:443", "10.0.0.1:8443"},
		{"tcp", "10.96.0.10:8080", "10.0.0.1:9090"},
		{"tcp", "[fd00:96::10]:443", "[fd00::1]:8443"},
		{"tcp", "ctl.ha:443", "10.0.0.1:8443"},
		{"tcp", "ctl.ha.svc:443", "10.0.0.1:8443"},
		{"tcp", "CTL.ha.svc.cluster.local.:443", "10.0.0.1:8443"},
		{"tcp6", "ctl.ha.svc:443", "[fd00::1]:8443"},
		{"tcp4", "ctl.ha.svc.cluster.local:8080", "10.0.0.1:9090"},
		// Not the Service: dialed as they are.
		{"tcp", "10.96.0.11:443", "10.96.0.11:443"},
		{"tcp", "ctl.other.svc:443", "ctl.other.svc:443"},
		{"tcp", "ctl:443", "ctl:443"},
		{"udp", "10.96.0.10:443", "10.96.0.10:443"},
		{"tcp", "example.com:443", "example.com:443"},
	} {
		c, err := r.dial(ctx, tc.network, tc.address)
		require.NoError(t, err, "%s %s", tc.network, tc.address)
		assert.Equal(t, tc.want, r.d.last(), "%s %s", tc.network, tc.address)
		require.NoError(t, c.Close())
	}
	assert.Zero(t, r.f.Conns(), "closed connections are forgotten")

	_, err := r.dial(ctx, "tcp", "10.96.0.10:9999")
	assert.ErrorContains(t, err, "9999 is not a TCP port of Service ha/ctl")
}

func TestNewerTermClosesOlderConnections(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(t, 3)
	ctx := context.Background()
	held, err := r.dial(ctx, "tcp", "10.96.0.10:443")
	require.NoError(t, err)
	assert.Equal(t, 1, r.f.Conns())

	// A new leader publishes a newer term (in place, as leaders do).
	r.publish(t, slice("ctl-fastover", "b", 4, "10.0.0.2"))
	r.waitTerm(t, 4)
	assert.True(t, r.d.closed(0), "the connection to the older term's leader is closed")
	_ = held.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, err = held.Write([]byte("x"))
	assert.ErrorIs(t, err, io.ErrClosedPipe)
	assert.Zero(t, r.f.Conns())

	c, err := r.dial(ctx, "tcp", "ctl.ha.svc:443")
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	assert.Equal(t, "10.0.0.2:8443", r.d.last())
}

// After a planned hand-over the ex-leader ends its streams itself: its
// connections are closed only after HandOverGrace.
func TestPlannedHandOverLeavesTheConnectionsToTheExLeader(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(t, 3)
	c, err := r.dial(context.Background(), "tcp", "10.96.0.10:443")
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	next := slice("ctl-fastover", "b", 4, "10.0.0.2")
	next.Annotations[names.AnnotationHandOver] = names.HandOverPlanned
	r.publish(t, next)
	assert.True(t, r.waitTerm(t, 4).HandedOver)
	assert.Zero(t, r.f.Conns(), "the ex-leader's connection is not the leader's any more")
	require.Eventually(t, r.clock.HasWaiters, 5*time.Second, time.Millisecond)
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, err = c.Write([]byte("x"))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "open during the grace")
	r.clock.Step(2 * time.Second)
	assert.True(t, r.d.closed(0), "closed after the grace")
}

func TestLowerTermIsNeverFollowed(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "b", 4, "10.0.0.2"))
	r.waitTerm(t, 4)
	c, err := r.dial(context.Background(), "tcp", "10.96.0.10:443")
	require.NoError(t, err)
	defer func() { _ = c.Close() }()

	// A frozen ex-leader wakes up and writes its slice back.
	r.publish(t, slice("ctl-fastover", "a", 3, "10.0.0.1"))
	require.Eventually(t, func() bool { _, ok := r.f.Leader(); return !ok }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1, r.f.Conns(), "the connection to the newest term's leader stays")

	done := dialAsync(context.Background(), r.dial, "10.96.0.10:443")
	require.Eventually(t, r.clock.HasWaiters, 5*time.Second, time.Millisecond)
	r.clock.Step(10 * time.Second)
	err = <-done
	require.ErrorIs(t, err, ErrNoLeader, "dialed %v", r.dialed())
	assert.ErrorContains(t, err, "no leader published for Service ha/ctl within 10s")
	assert.Equal(t, "10.0.0.2:8443", r.d.last(), "the ex-leader is never dialed")

	// A newer leader again.
	r.publish(t, slice("ctl-fastover", "c", 5, "10.0.0.3"))
	r.waitTerm(t, 5)
}

func TestDialWaitsForTheNextLeader(t *testing.T) {
	// A planned stop: the old leader withdrew its slice, the next has not
	// published yet.
	r := start(t, service())
	done := dialAsync(context.Background(), r.dial, "ctl.ha.svc:443")
	require.Eventually(t, r.clock.HasWaiters, 5*time.Second, time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the dial returned before a leader was published: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.publish(t, slice("ctl-fastover", "b", 1, "10.0.0.2"))
	require.NoError(t, <-done)
	assert.Equal(t, "10.0.0.2:8443", r.d.last())
}

func TestDialEndsWithItsContext(t *testing.T) {
	r := start(t, service())
	ctx, cancel := context.WithCancel(context.Background())
	done := dialAsync(ctx, r.dial, "10.96.0.10:443")
	require.Eventually(t, r.clock.HasWaiters, 5*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestConnectionDialedAsTheTermEndsIsClosed(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(t, 3)
	// The base dial of the old leader returns only once a newer term is
	// published.
	slow := func(ctx context.Context, network, address string) (net.Conn, error) {
		if address == "10.0.0.1:8443" {
			r.publish(t, slice("ctl-fastover", "b", 4, "10.0.0.2"))
			r.waitTerm(t, 4)
		}
		return r.d.dial(ctx, network, address)
	}
	c, err := r.f.Dialer(slow)(context.Background(), "tcp", "10.96.0.10:443")
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	assert.Equal(t, []string{"10.0.0.1:8443", "10.0.0.2:8443"}, r.d.addrs, "the connection to the replaced leader is dropped, the next leader dialed")
	assert.True(t, r.d.closed(0))
	assert.Equal(t, 1, r.f.Conns())
}

// A killed leader refuses connections until its successor is published:
// the dial tries again, and goes to the successor the moment it is.
func TestDialOfAKilledLeaderGoesToTheNext(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(t, 3)
	refused := func(ctx context.Context, network, address string) (net.Conn, error) {
		if address == "10.0.0.1:8443" {
			_, _ = r.d.dial(ctx, network, address)
			return nil, errors.New("connect: connection refused")
		}
		return r.d.dial(ctx, network, address)
	}
	done := dialAsync(context.Background(), r.f.Dialer(refused), "10.96.0.10:443")
	// Refused, then tried again after redialInterval (the fake clock
	// stepped by it while the dial waits on it; LeaderWait is 10 s).
	stop := r.stepWhileWaiting()
	require.Eventually(t, func() bool { return len(r.dialed()) >= 2 }, 5*time.Second, time.Millisecond)
	stop()
	r.publish(t, slice("ctl-fastover", "b", 4, "10.0.0.2"))
	require.NoError(t, <-done)
	assert.Equal(t, "10.0.0.2:8443", r.d.last())
}

// A cut-off leader's dial hangs (its packets are dropped): it is
// abandoned when the successor is published.
func TestDialOfACutOffLeaderIsAbandoned(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(t, 3)
	hang := func(ctx context.Context, network, address string) (net.Conn, error) {
		if address == "10.0.0.1:8443" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return r.d.dial(ctx, network, address)
	}
	done := dialAsync(context.Background(), r.f.Dialer(hang), "ctl.ha.svc:443")
	select {
	case err := <-done:
		t.Fatalf("the dial returned before the successor was published: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.publish(t, slice("ctl-fastover", "b", 4, "10.0.0.2"))
	require.NoError(t, <-done)
	assert.Equal(t, "10.0.0.2:8443", r.d.last())
}

func TestDialErrorNamesTheLeader(t *testing.T) {
	r := start(t, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(t, 3)
	r.d.err = errors.New("connection refused")
	stop := r.stepWhileWaiting()
	_, err := r.dial(context.Background(), "tcp", "10.96.0.10:443")
	stop()
	assert.ErrorContains(t, err, "dial the leader a (term 3) of Service ha/ctl at 10.0.0.1:8443: connection refused; then: no other leader published within 10s")
	assert.Greater(t, len(r.dialed()), 10, "tried again until LeaderWait")

	_, err = r.dial(context.Background(), "tcp", "[fd00:96::10]:443")
	assert.ErrorContains(t, err, "publishes no IPv6 address")
}

func TestLeaderOf(t *testing.T) {
	notReady := slice("ctl-b", "b", 9, "10.0.0.9")
	notReady.Endpoints[0].Conditions.Ready = ptr.To(false)
	unannotated := slice("ctl-abc12", "", 0, "10.0.0.7")
	unannotated.Annotations = nil
	badTerm := slice("ctl-c", "c", 0, "10.0.0.8")
	badTerm.Annotations[names.AnnotationTerm] = "x"
	fqdn := slice("ctl-d", "d", 10, "10.0.0.10")
	fqdn.AddressType = discoveryv1.AddressTypeFQDN

	assert.Nil(t, leaderOf(nil))
	assert.Nil(t, leaderOf([]*discoveryv1.EndpointSlice{notReady, unannotated, badTerm, fqdn}))
	l := leaderOf([]*discoveryv1.EndpointSlice{notReady, slice("ctl-fastover", "a", 2, "10.0.0.1"), unannotated, slice("ctl-old", "z", 1, "10.0.0.5")})
	require.NotNil(t, l)
	assert.Equal(t, "a", l.Identity)
	assert.EqualValues(t, 2, l.Term)
	require.Len(t, l.Endpoints, 1)
	assert.Equal(t, "10.0.0.1", l.Endpoints[0].Address.String())
	assert.Equal(t, map[string]int32{"https": 8443, "metrics": 9090}, l.Endpoints[0].Ports)
}

func TestStartNeedsAccess(t *testing.T) {
	for _, tc := range []struct{ verb, resource string }{
		{"get", "services"}, {"list", "endpointslices"}, {"watch", "services"}, {"watch", "endpointslices"},
	} {
		client := fake.NewClientset(service())
		client.PrependReactor(tc.verb, tc.resource, func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: tc.resource}, "", errors.New("RBAC: access denied"))
		})
		client.PrependWatchReactor(tc.resource, func(k8stesting.Action) (bool, watch.Interface, error) {
			if tc.verb != "watch" {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: tc.resource}, "", errors.New("RBAC: access denied"))
		})
		f, err := New(Config{Client: client, Namespace: ns, Service: name})
		require.NoError(t, err)
		err = f.Start(context.Background())
		require.ErrorIs(t, err, ErrForbidden, "%s %s", tc.verb, tc.resource)
		assert.ErrorContains(t, err, "follow.PolicyRules")
		assert.ErrorIs(t, f.Start(context.Background()), ErrForbidden, "Start again checks again")
	}

	f, err := New(Config{Client: fake.NewClientset(), Namespace: ns, Service: name})
	require.NoError(t, err)
	assert.ErrorContains(t, f.Start(context.Background()), "Service ha/ctl not found")

	f, err = New(Config{Client: fake.NewClientset(), Namespace: ns, Service: name})
	require.NoError(t, err)
	_, err = f.DialContext(context.Background(), "tcp", "ctl.ha.svc:443")
	assert.ErrorContains(t, err, "dial before Start")
}
