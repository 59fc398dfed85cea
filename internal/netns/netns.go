//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The documentation ranges the tests use.
var (
	// PodNet is TEST-NET-1: the addresses replicas publish and bind.
	PodNet = netip.MustParsePrefix("192.0.2.0/24")
	// ServiceNet is TEST-NET-2: the Service (ClusterIP) range.
	ServiceNet = netip.MustParsePrefix("198.51.100.0/24")
)

// ErrNotPermitted is wrapped by New's error when the process may not make
// or configure a network namespace (not root: no CAP_SYS_ADMIN or
// CAP_NET_ADMIN).
var ErrNotPermitted = errors.New("it needs root (CAP_SYS_ADMIN to make it, CAP_NET_ADMIN to configure it)")

// ErrClosed is returned by the methods of a closed namespace.
var ErrClosed = errors.New("netns: the namespace is closed")

// Options configure New.
type Options struct {
	// Addresses are added to loopback, such as 192.0.2.1/32 (one address)
	// or 192.0.2.0/24 (every address of the range is local).
	Addresses []netip.Prefix
	// Routes are routed to loopback without being local, such as
	// ServiceNet: a connection to them leaves the socket, so that a DNAT
	// rule of the namespace can send it on; without a rule it goes nowhere.
	Routes []netip.Prefix
}

// NS is a network namespace of the test's own. Its methods are safe for
// concurrent use.
type NS struct {
	// The thread that lives in the namespace runs work from this channel
	// until quit is closed.
	work chan func()
	quit chan struct{}
	done chan struct{} // closed when that thread has left

	mu     sync.RWMutex // guards fd against Close while a thread joins it
	fd     int          // the namespace (an open /proc/.../ns/net), -1 when closed
	closed bool
	once   sync.Once
}

// New makes a network namespace with loopback up and configures opts in it.
// The caller must Close it.
func New(opts Options) (*NS, error) {
	n := &NS{work: make(chan func()), quit: make(chan struct{}), done: make(chan struct{}), fd: -1}
	ready := make(chan error, 1)
	goLocked(func() { n.loop(ready) })
	if err := <-ready; err != nil {
		return nil, err
	}
	if err := n.configure(opts); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// loop is the namespace's thread.
func (n *NS) loop(ready chan<- error) {
	defer close(n.done)
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		ready <- permission(fmt.Errorf("unshare(CLONE_NEWNET): %w", err))
		return
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		ready <- fmt.Errorf("netns: open the new namespace: %w", err)
		return
	}
	n.fd = fd
	ready <- nil
	for {
		select {
		case fn := <-n.work:
			fn()
		case <-n.quit:
			return
		}
	}
}

// permission wraps an error of making or configuring the namespace, saying
// what is missing when it is a permission error.
func permission(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("netns: cannot make a network namespace: %w, and this process runs as uid %d: %w",
			ErrNotPermitted, os.Geteuid(), err)
	}
	return fmt.Errorf("netns: cannot make a network namespace: %w", err)
}

func (n *NS) configure(opts Options) error {
	if err := n.withHandle(func(h *netlink.Handle) error { return linkUp(h, loopback) }); err != nil {
		return permission(fmt.Errorf("bring loopback up: %w", err))
	}
	for _, p := range opts.Addresses {
		if err := n.AddAddress(p); err != nil {
			return permission(err)
		}
	}
	for _, p := range opts.Routes {
		if err := n.AddRoute(p); err != nil {
			return permission(err)
		}
	}
	return nil
}

// Do runs fn on the namespace's own thread and returns its error: a socket
// fn makes, or a process it forks, is in the namespace. Calls are
// serialised; fn must not block for long, nor unlock the OS thread.
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case n.work <- func() { errc <- fn() }:
		return <-errc
	case <-n.done:
		return ErrClosed
	}
}

// Start starts cmd inside the namespace. Its SysProcAttr.Pdeathsig, if set,
// fires when the namespace is closed (or the test binary dies).
func (n *NS) Start(cmd *exec.Cmd) error {
	return n.Do(cmd.Start)
}

// Command runs a command inside the namespace and returns its combined
// output; a failure includes that output.
func (n *NS) Command(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := n.Start(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s in the namespace: %w: %s", name, err, out.Bytes())
	}
	return out.Bytes(), nil
}

// inside runs fn on a new thread that joins the namespace and is thrown
// away afterwards, so that long calls (a connect) do not hold the
// namespace's own thread.
func (n *NS) inside(fn func()) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ErrClosed
	}
	errc := make(chan error, 1)
	goLocked(func() {
		if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: join the namespace: %w", err)
			return
		}
		fn()
		errc <- nil
	})
	return <-errc
}

// DialContext connects to address from inside the namespace, as
// net.Dialer.DialContext does; it fits http.Transport.DialContext and
// rest.Config.Dial.
func (n *NS) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	var dialErr error
	if err := n.inside(func() { c, dialErr = (&net.Dialer{}).DialContext(ctx, network, address) }); err != nil {
		return nil, err
	}
	return c, dialErr
}

// Listen listens on address inside the namespace, as net.Listen does.
func (n *NS) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	var listenErr error
	if err := n.inside(func() { l, listenErr = net.Listen(network, address) }); err != nil {
		return nil, err
	}
	return l, listenErr
}

// AddAddress adds an address to loopback; adding one that is there
// already does nothing. A prefix shorter than the address (192.0.2.0/24)
// makes every address in it local.
func (n *NS) AddAddress(p netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("netns: add address: invalid prefix %v", p)
	}
	err := n.withHandle(func(h *netlink.Handle) error { return addAddress(h, loopback, p) })
	if err != nil {
		return fmt.Errorf("netns: add address %v to lo: %w", p, err)
	}
	return nil
}

// AddRoute routes a prefix to loopback (scope link, not local); adding a
// route that is there already does nothing.
func (n *NS) AddRoute(p netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("netns: add route: invalid prefix %v", p)
	}
	err := n.withHandle(func(h *netlink.Handle) error { return addRoute(h, loopback, p, netip.Addr{}) })
	if err != nil {
		return fmt.Errorf("netns: route %v to lo: %w", p, err)
	}
	return nil
}

// goLocked runs fn on a new goroutine locked to an OS thread and never
// unlocks it, so that the thread, whose namespace fn may change, ends with
// fn and never runs another goroutine. The thread is never the process's
// main thread: the runtime cannot end that one (it parks it for ever), and
// /proc/PID/ns/net, which tools read, is the main thread's.
func goLocked(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		// On the main thread: hold it while another goroutine, which
		// therefore runs on another thread, takes fn; then give it back
		// as it was.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			fn()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// Path is a path that names the namespace while it is open, for tools
// outside the test: `nsenter --net=PATH nft list ruleset`.
func (n *NS) Path() string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ""
	}
	return "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(n.fd)
}

// Close ends the namespace's thread, which kills the processes started
// with a Pdeathsig, and releases the namespace; it goes away with the last
// process still in it. It is safe to call more than once.
func (n *NS) Close() error {
	n.once.Do(func() {
		close(n.quit)
		<-n.done
		n.mu.Lock()
		n.closed = true
		if n.fd >= 0 {
			_ = unix.Close(n.fd)
			n.fd = -1
		}
		n.mu.Unlock()
	})
	return nil
}
