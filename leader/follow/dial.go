package follow

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// DialFunc dials a network address, as net.Dialer.DialContext: the type
// of client-go's rest.Config.Dial and net/http's Transport.DialContext.
type DialFunc = func(ctx context.Context, network, address string) (net.Conn, error)

// Dialer returns a dial function that dials the leader when it is given
// the Service (its ClusterIP or DNS name, one of its TCP ports) and dials
// every other address as it is, both with base (nil: a net.Dialer with a
// 30 s timeout and 30 s keep-alive, client-go's). A dial of the Service
// waits for the Follower's first read and, while no leader is published,
// for one; while the leader cannot be reached (killed, cut off) it tries
// again every redialInterval, and dials the next leader the moment it is
// published; all up to Config.LeaderWait (or the dial's context). It fails
// at once if the port is not one of the Service's or the leader publishes
// no address of the family dialed.
func (f *Follower) Dialer(base DialFunc) DialFunc {
	if base == nil {
		base = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		timer := f.cfg.Clock.NewTimer(f.cfg.LeaderWait)
		defer timer.Stop()
		host, port, ok := f.isService(ctx, timer.C(), network, address)
		if !ok {
			return base(ctx, network, address)
		}
		var failed error // the last dial of a leader
		for {
			svc, l, term, err := f.awaitLeader(ctx, timer.C())
			if err != nil {
				if failed != nil {
					return nil, fmt.Errorf("%w; then: %w", failed, err)
				}
				return nil, err
			}
			target, err := targetOf(svc, l, network, host, port)
			if err != nil {
				return nil, err
			}
			c, err := f.dialTerm(ctx, base, network, target, term)
			if err == nil {
				if tc, ok := f.track(c, term); ok {
					return tc, nil
				}
				continue // replaced while it was dialed: dial the next
			}
			failed = fmt.Errorf("follow: dial the leader %s (term %d) of Service %s/%s at %s: %w", l.Identity, term, svc.Namespace, svc.Name, target, err)
			if ctx.Err() != nil {
				return nil, failed
			}
			// A killed or cut-off leader stays published until its
			// successor takes over: try again when the leader changes,
			// and every redialInterval, up to LeaderWait.
			if err := f.awaitChange(ctx, timer.C(), term); err != nil {
				return nil, fmt.Errorf("%w; then: %w", failed, err)
			}
		}
	}
}

// redialInterval is how often a dial of the Service tries the leader
// again when it cannot reach it and no other is published.
const redialInterval = 200 * time.Millisecond

// awaitChange returns at once if a term newer than term is published,
// else when the published leader changes or redialInterval passes; an
// error when ctx ends or expired fires first.
func (f *Follower) awaitChange(ctx context.Context, expired <-chan time.Time, term int32) error {
	newer, changed := f.replaced(term)
	if newer {
		return nil
	}
	retry := f.cfg.Clock.NewTimer(redialInterval)
	defer retry.Stop()
	select {
	case <-changed:
	case <-retry.C():
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return fmt.Errorf("no other leader published within %v", f.cfg.LeaderWait)
	}
	return nil
}

// dialTerm dials the leader of term with base; the dial is abandoned when
// a newer term is published (a cut-off leader's dial would hang until its
// timeout).
func (f *Follower) dialTerm(ctx context.Context, base DialFunc, network, target string, term int32) (net.Conn, error) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			newer, changed := f.replaced(term)
			if newer {
				cancel()
				return
			}
			select {
			case <-changed:
			case <-dctx.Done():
				return
			}
		}
	}()
	return base(dctx, network, target)
}

// DialContext is Dialer(nil): net/http's Transport.DialContext, or
// grpc.WithContextDialer with network "tcp".
func (f *Follower) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f.Dialer(nil)(ctx, network, address)
}

// RESTConfig returns a copy of c whose connections to the Service go to
// its leader: its Dial is Dialer(c.Dial). TLS settings are c's, so the
// server is still verified as the Service's name (c.Host, or
// TLSClientConfig.ServerName). Transports of configs with a Dial are not
// shared through client-go's transport cache: make one client of it and
// share that.
func (f *Follower) RESTConfig(c *rest.Config) *rest.Config {
	out := rest.CopyConfig(c)
	out.Dial = f.Dialer(c.Dial)
	return out
}

// isService reports whether a dial of network and address is a dial of
// the Service, and its host and port if so. A ClusterIP needs the
// Service, so it waits for the first read (until expired fires, or ctx
// ends).
func (f *Follower) isService(ctx context.Context, expired <-chan time.Time, network, address string) (string, int32, bool) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return "", 0, false
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return "", 0, false
	}
	if f.isServiceName(host) {
		return host, int32(port), true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "", 0, false
	}
	if f.awaitSync(ctx, expired) != nil {
		return "", 0, false
	}
	f.mu.Lock()
	svc := f.svc
	f.mu.Unlock()
	if svc == nil {
		return "", 0, false
	}
	for _, ip := range clusterIPs(svc) {
		if ip == addr.Unmap() {
			return host, int32(port), true
		}
	}
	return "", 0, false
}

// isServiceName reports whether host is one of the Service's DNS names:
// <service>.<namespace>, with .svc, with .svc.<cluster domain>, with or
// without the final dot, in any case.
func (f *Follower) isServiceName(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	short := strings.ToLower(f.cfg.Service + "." + f.cfg.Namespace)
	return host == short || host == short+".svc" || host == short+".svc."+strings.ToLower(strings.TrimSuffix(f.cfg.ClusterDomain, "."))
}

func clusterIPs(svc *corev1.Service) []netip.Addr {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// targetOf is the leader's address and port for a dial of the Service's
// host (a ClusterIP or a name) and port over network.
func targetOf(svc *corev1.Service, l *Leader, network, host string, port int32) (string, error) {
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Port == port && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
			sp = p
			break
		}
	}
	if sp == nil {
		return "", fmt.Errorf("follow: %d is not a TCP port of Service %s/%s", port, svc.Namespace, svc.Name)
	}

	// The family: a ClusterIP's; for a name, the network's, or the
	// Service's primary family.
	var want string
	if a, err := netip.ParseAddr(host); err == nil {
		want = family(a.Unmap().Is4())
	} else {
		switch {
		case network == "tcp4":
			want = family(true)
		case network == "tcp6":
			want = family(false)
		case len(svc.Spec.IPFamilies) > 0:
			want = string(svc.Spec.IPFamilies[0])
		}
	}
	var ep *Endpoint
	for i := range l.Endpoints {
		if want == "" || family(l.Endpoints[i].Address.Is4()) == want {
			ep = &l.Endpoints[i]
			break
		}
	}
	if ep == nil && network == "tcp" && net.ParseIP(host) == nil && len(l.Endpoints) > 0 {
		ep = &l.Endpoints[0] // a name: any family will do
	}
	if ep == nil {
		return "", fmt.Errorf("follow: the leader %s (term %d) of Service %s/%s publishes no %s address", l.Identity, l.Term, svc.Namespace, svc.Name, want)
	}
	target, ok := ep.Ports[sp.Name]
	if !ok {
		return "", fmt.Errorf("follow: the leader %s (term %d) of Service %s/%s publishes no port %q (the Service's port %d)", l.Identity, l.Term, svc.Namespace, svc.Name, sp.Name, port)
	}
	return net.JoinHostPort(ep.Address.String(), strconv.Itoa(int(target))), nil
}

func family(is4 bool) string {
	if is4 {
		return string(corev1.IPv4Protocol)
	}
	return string(corev1.IPv6Protocol)
}
