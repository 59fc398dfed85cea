package follow

import (
	"context"
	"net"
	"strings"
	"testing"
)

// FuzzDial dials whatever address a program may hand over: a dial never
// panics, and either goes to the leader (for the Service's address and
// port), fails with an error, or dials the address unchanged.
func FuzzDial(f *testing.F) {
	for _, s := range []string{"10.96.0.10:443", "[fd00:96::10]:8080", "ctl.ha.svc:443", "CTL.HA.svc.cluster.local.:443",
		"ctl.ha:0", "ctl.ha:99999", "10.96.0.10", ":443", "[::ffff:10.96.0.10]:443", "ctl.ha.svc:-1", "ctl.ha.svc:https", ""} {
		f.Add("tcp", s)
	}
	f.Add("tcp6", "ctl.ha.svc:443")
	f.Add("unix", "/run/x.sock")
	r := start(f, service(), slice("ctl-fastover", "a", 3, "10.0.0.1"))
	r.waitTerm(f, 3)
	f.Fuzz(func(t *testing.T, network, address string) {
		before := len(r.d.addrs)
		c, err := r.dial(context.Background(), network, address)
		if err != nil {
			return
		}
		_ = c.Close()
		r.d.mu.Lock()
		defer r.d.mu.Unlock()
		if len(r.d.addrs) != before+1 {
			t.Fatalf("%s %q: %d dials", network, address, len(r.d.addrs)-before)
		}
		got := r.d.addrs[len(r.d.addrs)-1]
		if got != address && got != "10.0.0.1:8443" && got != "10.0.0.1:9090" {
			t.Fatalf("%s %q dialed %q", network, address, got)
		}
		if got != address {
			host, _, err := net.SplitHostPort(address)
			service := host == "10.96.0.10" || host == "::ffff:10.96.0.10" || strings.HasPrefix(strings.ToLower(host), "ctl.ha")
			if err != nil || !service {
				t.Fatalf("%s %q is not the Service, but went to the leader", network, address)
			}
		}
	})
}
