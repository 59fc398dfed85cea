// Address families: which of the leader's addresses a Service serves.

package leader

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// errAddressFamily: the leader's address is of a family the Service does
// not serve; kube-proxy would ignore the slice.
var errAddressFamily = errors.New("address family not served by the Service")

// checkFamily returns the addresses to publish: the leader's address of
// each family that the Service serves (spec.ipFamilies, in its order; the
// Address's family if it has none). Where the leader has none of them, it
// refuses, with a Warning Event on the Service.
func (p *publisher) checkFamily(svc *corev1.Service) ([]netip.Addr, error) {
	own := p.leaderAddresses()
	if len(svc.Spec.IPFamilies) == 0 {
		return own[:1], nil
	}
	var addrs []netip.Addr
	for _, family := range svc.Spec.IPFamilies {
		for _, addr := range own {
			if ipFamily(addr) == family {
				addrs = append(addrs, addr)
			}
		}
	}
	if len(addrs) > 0 {
		return addrs, nil
	}
	var mine []string
	for _, addr := range own {
		mine = append(mine, addr.String()+" is "+string(ipFamily(addr)))
	}
	msg := fmt.Sprintf("the leader's address %s, but Service %s/%s serves %v only: kube-proxy would ignore it, so it is not published; give the leader an address of the Service's family",
		strings.Join(mine, ", "), p.cfg.Namespace, svc.Name, svc.Spec.IPFamilies)
	if p.cfg.EventRecorder != nil {
		p.cfg.EventRecorder.Event(svc, corev1.EventTypeWarning, "AddressFamilyMismatch", msg)
	}
	return nil, fmt.Errorf("%w: %s", errAddressFamily, msg)
}

// leaderAddresses are the leader's addresses, Address first, then those
// of Addresses of another family (validated: one per family).
func (p *publisher) leaderAddresses() []netip.Addr {
	addrs := []netip.Addr{netip.MustParseAddr(p.ep.Address).Unmap()}
	for _, a := range p.ep.Addresses {
		addr := netip.MustParseAddr(a).Unmap()
		if addressType(addr) != addressType(addrs[0]) {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// ipFamily is the Service IP family of an address.
func ipFamily(addr netip.Addr) corev1.IPFamily {
	if addressType(addr) == discoveryv1.AddressTypeIPv6 {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// addressType is the EndpointSlice address type of an address.
func addressType(addr netip.Addr) discoveryv1.AddressType {
	if addr.Is6() && !addr.Is4In6() {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}
