//go:build linux

package netns

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Flow is a TCP connection as the namespace's connection tracking sees
// it: the address a client dialed (a Service's ClusterIP), the one its
// packets went to after NAT (the endpoint kube-proxy chose), conntrack's
// state of it and how long conntrack keeps it without another packet.
//
// A flow outlives its connection. One that a reset ended stays in CLOSE
// for nf_conntrack_tcp_timeout_close (10 s), and a new connection from
// the same source port within that time goes where the flow went, not
// where the rules say now (kubernetes/kubernetes#101607: kube-proxy
// removes the stale flows of UDP Services only). After a FIN the flow
// waits in TIME_WAIT, and a new SYN starts a new one.
type Flow struct {
	Client, Dialed, Backend netip.AddrPort
	State                   string
	Timeout                 time.Duration
}

// tcpStates are conntrack's names of its TCP states.
var tcpStates = map[uint8]string{
	nl.TCP_CONNTRACK_NONE:        "NONE",
	nl.TCP_CONNTRACK_SYN_SENT:    "SYN_SENT",
	nl.TCP_CONNTRACK_SYN_RECV:    "SYN_RECV",
	nl.TCP_CONNTRACK_ESTABLISHED: "ESTABLISHED",
	nl.TCP_CONNTRACK_FIN_WAIT:    "FIN_WAIT",
	nl.TCP_CONNTRACK_CLOSE_WAIT:  "CLOSE_WAIT",
	nl.TCP_CONNTRACK_LAST_ACK:    "LAST_ACK",
	nl.TCP_CONNTRACK_TIME_WAIT:   "TIME_WAIT",
	nl.TCP_CONNTRACK_CLOSE:       "CLOSE",
	nl.TCP_CONNTRACK_SYN_SENT2:   "SYN_SENT2",
}

// TCPFlows lists the IPv4 TCP flows the namespace's conntrack holds to
// dialed, over netlink. A namespace whose rules never needed connection
// tracking (no NAT, no ct match) has none.
func (n *NS) TCPFlows(dialed netip.AddrPort) ([]Flow, error) {
	var list []*netlink.ConntrackFlow
	err := n.withHandle(func(h *netlink.Handle) error {
		var err error
		list, err = h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns: list conntrack's flows: %w", err)
	}
	var out []Flow
	for _, f := range list {
		if f.Forward.Protocol != unix.IPPROTO_TCP {
			continue
		}
		to, ok := addrPort(f.Forward.DstIP, f.Forward.DstPort)
		if !ok || to != dialed {
			continue
		}
		fl := Flow{Dialed: to, Timeout: time.Duration(f.TimeOut) * time.Second}
		fl.Client, _ = addrPort(f.Forward.SrcIP, f.Forward.SrcPort)
		fl.Backend, _ = addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort)
		if tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP); ok {
			fl.State = tcpStates[tcp.State]
		}
		out = append(out, fl)
	}
	return out, nil
}

func addrPort(ip []byte, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Unmap(), port), true
}
