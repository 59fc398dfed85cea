//go:build linux

package netns

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// loopbackIndex is the interface index of lo, the first interface of every
// network namespace.
const loopbackIndex = 1

// The rtnetlink requests the package makes, each on the calling thread's
// namespace: they run on the namespace's own thread (NS.Do).

// setLinkUp sets IFF_UP on the interface (RTM_NEWLINK).
func setLinkUp(index int) error {
	msg := unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index), Flags: unix.IFF_UP, Change: unix.IFF_UP}
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = msg.Family
	binary.NativeEndian.PutUint16(body[2:], msg.Type)
	binary.NativeEndian.PutUint32(body[4:], uint32(msg.Index))
	binary.NativeEndian.PutUint32(body[8:], msg.Flags)
	binary.NativeEndian.PutUint32(body[12:], msg.Change)
	return request(unix.RTM_NEWLINK, 0, body)
}

// addAddress adds p to the interface (RTM_NEWADDR).
func addAddress(index int, p netip.Prefix) error {
	family, addr := familyOf(p.Addr())
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0] = family
	body[1] = uint8(p.Bits())
	body[2] = unix.IFA_F_PERMANENT
	body[3] = unix.RT_SCOPE_HOST
	if !p.Addr().IsLoopback() {
		body[3] = unix.RT_SCOPE_UNIVERSE
	}
	binary.NativeEndian.PutUint32(body[4:], uint32(index))
	body = appendAttr(body, unix.IFA_LOCAL, addr)
	body = appendAttr(body, unix.IFA_ADDRESS, addr)
	return request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body)
}

// addRoute routes p to the interface, scope link, in the main table
// (RTM_NEWROUTE).
func addRoute(index int, p netip.Prefix) error {
	family, dst := familyOf(p.Addr())
	body := make([]byte, unix.SizeofRtMsg)
	body[0] = family
	body[1] = uint8(p.Bits())
	body[4] = unix.RT_TABLE_MAIN
	body[5] = unix.RTPROT_STATIC
	body[6] = unix.RT_SCOPE_LINK
	body[7] = unix.RTN_UNICAST
	body = appendAttr(body, unix.RTA_DST, dst)
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(index))
	body = appendAttr(body, unix.RTA_OIF, oif)
	return request(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body)
}

func familyOf(a netip.Addr) (uint8, []byte) {
	if a.Is4() {
		b := a.As4()
		return unix.AF_INET, b[:]
	}
	b := a.As16()
	return unix.AF_INET6, b[:]
}

// appendAttr appends a route attribute, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	hdr := make([]byte, unix.SizeofRtAttr)
	binary.NativeEndian.PutUint16(hdr[0:], uint16(unix.SizeofRtAttr+len(data)))
	binary.NativeEndian.PutUint16(hdr[2:], typ)
	b = append(b, hdr...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// request sends one rtnetlink request and waits for its acknowledgement;
// an error the kernel answers is returned as its errno.
func request(typ uint16, flags uint16, body []byte) error {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer func() { _ = unix.Close(s) }()
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	const seq = 1
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	msg = append(msg, body...)
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(s, buf, 0)
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return fmt.Errorf("netlink answer: short error message")
			}
			if errno := int32(binary.NativeEndian.Uint32(m.Data[0:4])); errno != 0 {
				return unix.Errno(-errno)
			}
			return nil
		}
	}
}

// lockedBuffer collects a command's output from its two streams.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.b.Bytes()...)
}
