package netns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// cutTable is the nftables table Cut keeps its rules in, apart from
// kube-proxy's tables.
const cutTable = "fastover-cut"

// Cut makes the network drop, silently, every packet to or from addr
// inside the namespace, as a cable pulled out of that address's machine
// would: a connection to it hangs in SYN_SENT, one open through it stalls.
// Packets are dropped in the output hook after destination NAT, so a
// connection to a ClusterIP that kube-proxy sends to addr is dropped too.
// The returned func heals the cut; cuts of several addresses are
// independent. It needs nft in $PATH.
//
// A process that reaches the API server over loopback from another
// address (as the replicas do: the kernel picks the API server's own
// address as the source) keeps that path: cut it apart, e.g. through a
// fault-injecting proxy that it uses as its API server.
func (n *NS) Cut(ctx context.Context, addr netip.Addr) (heal func(context.Context) error, err error) {
	if !addr.Is4() {
		return nil, fmt.Errorf("netns: cut %v: want an IPv4 address", addr)
	}
	chain := "cut-" + strings.ReplaceAll(addr.String(), ".", "-")
	// Priority 0 (filter) runs after kube-proxy's dstnat (-100) in the
	// output hook, and packets on loopback pass output both ways.
	script := fmt.Sprintf("add table ip %[1]s; "+
		"add chain ip %[1]s %[2]s { type filter hook output priority filter; policy accept; }; "+
		"add rule ip %[1]s %[2]s ip daddr %[3]s drop; "+
		"add rule ip %[1]s %[2]s ip saddr %[3]s drop", cutTable, chain, addr)
	if err := n.nft(ctx, script); err != nil {
		return nil, fmt.Errorf("netns: cut %v: %w", addr, err)
	}
	return func(ctx context.Context) error {
		if err := n.nft(ctx, fmt.Sprintf("delete chain ip %s %s", cutTable, chain)); err != nil {
			return fmt.Errorf("netns: heal the cut of %v: %w", addr, err)
		}
		return nil
	}, nil
}

// nft runs nft commands (separated by ";") inside the namespace.
func (n *NS) nft(ctx context.Context, commands string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := n.Command(ctx, "nft", commands)
	return err
}
