package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/fastover/fastover/internal/cluster"
)

// dialer connects as the control plane's own clients do (inside its
// network namespace, if it runs in one), giving up after timeout.
func dialer(env *cluster.Env, timeout time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	if env.Netns() == nil {
		return (&net.Dialer{Timeout: timeout}).DialContext
	}
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return env.DialContext(ctx, network, address)
	}
}

var errNoNetns = errors.New("fleet: BindPublished needs a control plane in a network namespace (cluster.Options.Netns): 192.0.2.0/24 is not the test's on the host")

// listenAddress is the address replica r listens on: 127.0.0.N, or with
// BindPublished the address it publishes, which it adds to the control
// plane's network namespace.
func (f *Fleet) listenAddress(r *Replica) (string, error) {
	if !f.BindPublished {
		return "127.0.0." + strconv.Itoa(r.N), nil
	}
	ns := f.Env.Netns()
	if ns == nil {
		return "", errNoNetns
	}
	a, err := netip.ParseAddr(r.Address())
	if err != nil {
		return "", fmt.Errorf("fleet: replica %s: %w", r.ID, err)
	}
	if err := ns.AddAddress(netip.PrefixFrom(a, 32)); err != nil {
		return "", err
	}
	return a.String(), nil
}

// callAddress is where the client calls the replica that publishes addr:
// addr itself with BindPublished, else 127.0.0.N for 192.0.2.N.
func (f *Fleet) callAddress(addr string) (string, error) {
	n, ok := strings.CutPrefix(addr, PublishedNet)
	if !ok {
		return "", fmt.Errorf("address %s is not a replica's", addr)
	}
	if f.BindPublished {
		if f.Env.Netns() == nil {
			return "", errNoNetns
		}
		return addr, nil
	}
	return "127.0.0." + n, nil
}
