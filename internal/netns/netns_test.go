//go:build linux

package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var (
	addr1 = netip.MustParsePrefix("192.0.2.1/32")
	addr2 = netip.MustParsePrefix("192.0.2.2/32")
)

// serve answers every connection with its name and closes it.
func serve(t *testing.T, l net.Listener, name string) {
	t.Helper()
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name)
			_ = c.Close()
		}
	}()
}

// read connects through the namespace and returns what the server said.
func read(ctx context.Context, ns *NS, address string) (string, error) {
	c, err := ns.DialContext(ctx, "tcp", address)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestNamespaceHasOnlyLoopbackAndItsAddresses(t *testing.T) {
	ns := ForTest(t, Options{Addresses: []netip.Prefix{addr1}})
	require.NoError(t, ns.AddAddress(addr2))
	require.NoError(t, ns.AddAddress(addr2), "adding an address twice does nothing")

	var ifaces []net.Interface
	var addrs []net.Addr
	require.NoError(t, ns.Do(func() (err error) {
		if ifaces, err = net.Interfaces(); err != nil {
			return err
		}
		addrs, err = ifaces[0].Addrs()
		return err
	}))
	require.Len(t, ifaces, 1, "only loopback: %v", ifaces)
	assert.Equal(t, "lo", ifaces[0].Name)
	assert.NotZero(t, ifaces[0].Flags&net.FlagUp, "loopback is up")
	var got []string
	for _, a := range addrs {
		got = append(got, a.String())
	}
	assert.Subset(t, got, []string{"127.0.0.1/8", "192.0.2.1/32", "192.0.2.2/32"})
}

func TestListenAndDialInside(t *testing.T) {
	ns := ForTest(t, Options{Addresses: []netip.Prefix{addr1, addr2}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l1, err := ns.Listen("tcp", "192.0.2.1:0")
	require.NoError(t, err)
	serve(t, l1, "one")
	l2, err := ns.Listen("tcp", "192.0.2.2:"+port(l1))
	require.NoError(t, err, "the same port on another address of the namespace")
	serve(t, l2, "two")

	got, err := read(ctx, ns, "192.0.2.1:"+port(l1))
	require.NoError(t, err)
	assert.Equal(t, "one", got)
	got, err = read(ctx, ns, "192.0.2.2:"+port(l1))
	require.NoError(t, err)
	assert.Equal(t, "two", got)

	// An address of the range that nobody configured cannot be bound.
	_, err = ns.Listen("tcp", "192.0.2.3:0")
	require.ErrorIs(t, err, unix.EADDRNOTAVAIL)

	// The host's loopback is another one: the namespace's listener is not
	// on it.
	l3, err := ns.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serve(t, l3, "inside")
	hostConn, err := net.DialTimeout("tcp", "127.0.0.1:"+port(l3), time.Second)
	if err == nil {
		_ = hostConn.Close()
		t.Fatalf("the namespace's 127.0.0.1:%s answered on the host", port(l3))
	}
}

func TestChildrenAreBornInside(t *testing.T) {
	ns := ForTest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	want, err := os.Readlink(ns.Path())
	require.NoError(t, err)
	host, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	require.NotEqual(t, host, want)

	out, err := ns.Command(ctx, "readlink", "/proc/self/ns/net")
	require.NoError(t, err)
	assert.Equal(t, want, strings.TrimSpace(string(out)))
}

// TestOneThreadInside: of the test binary's threads, only the namespace's
// own stays inside (the ones that dial and listen end), never the main
// thread, and none after Close.
func TestOneThreadInside(t *testing.T) {
	host, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	ns := ForTest(t, Options{Addresses: []netip.Prefix{addr1}})
	inside, err := os.Readlink(ns.Path())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l, err := ns.Listen("tcp", "192.0.2.1:0")
	require.NoError(t, err)
	serve(t, l, "x")
	for range 50 {
		_, err := read(ctx, ns, "192.0.2.1:"+port(l))
		require.NoError(t, err)
	}
	_, err = ns.Command(ctx, "true")
	require.NoError(t, err)

	assert.Eventually(t, func() bool { return threadsIn(t, inside) == 1 }, 10*time.Second, 20*time.Millisecond,
		"threads inside: %d", threadsIn(t, inside))
	main, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	assert.Equal(t, host, main, "the main thread stays on the host")

	require.NoError(t, ns.Close())
	assert.Eventually(t, func() bool { return threadsIn(t, inside) == 0 }, 10*time.Second, 20*time.Millisecond,
		"threads inside after Close: %d", threadsIn(t, inside))
}

// threadsIn counts the test binary's threads in the namespace.
func threadsIn(t *testing.T, ns string) int {
	tasks, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	n := 0
	for _, task := range tasks {
		if link, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && link == ns {
			n++
		}
	}
	return n
}

func TestCloseKillsItsChildren(t *testing.T) {
	ns := ForTest(t, Options{})
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, ns.Start(cmd))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the child exited before Close: %v", err)
	case <-time.After(200 * time.Millisecond):
	}

	require.NoError(t, ns.Close())
	select {
	case err := <-exited:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "killed")
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the child outlived Close by 10s")
	}
	assert.ErrorIs(t, ns.Start(exec.Command("true")), ErrClosed)
	_, err := ns.DialContext(context.Background(), "tcp", "127.0.0.1:1")
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, ns.AddAddress(addr1), ErrClosed)
	assert.Empty(t, ns.Path())
	assert.NoError(t, ns.Close(), "a second Close")
}

// TestServiceRangeThroughNftables: a connection to a Service address goes
// nowhere until a DNAT rule of the namespace's nftables sends it to a
// listener, as kube-proxy's rules in nftables mode do.
func TestServiceRangeThroughNftables(t *testing.T) {
	testServiceRange(t, "nft", func(ctx context.Context, ns *NS, vip, target string) error {
		host, port, _ := net.SplitHostPort(vip)
		rules := fmt.Sprintf(`table ip fastover-test {
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr %s tcp dport %s dnat to %s
	}
}
`, host, port, target)
		cmd := exec.CommandContext(ctx, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := ns.Start(cmd); err != nil {
			return err
		}
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("nft -f: %w: %s", err, out.Bytes())
		}
		listed, err := ns.Command(ctx, "nft", "list", "ruleset")
		if err != nil {
			return err
		}
		if !strings.Contains(string(listed), "dnat to "+target) {
			return fmt.Errorf("nft list ruleset does not show the rule:\n%s", listed)
		}
		return nil
	})
}

// TestServiceRangeThroughIptables: the same with iptables (kube-proxy's
// fallback mode).
func TestServiceRangeThroughIptables(t *testing.T) {
	testServiceRange(t, "iptables", func(ctx context.Context, ns *NS, vip, target string) error {
		host, port, _ := net.SplitHostPort(vip)
		_, err := ns.Command(ctx, "iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-d", host+"/32", "-p", "tcp", "--dport", port,
			"-j", "DNAT", "--to-destination", target)
		return err
	})
}

func testServiceRange(t *testing.T, tool string, install func(ctx context.Context, ns *NS, vip, target string) error) {
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("%s is not installed (and $%s is set): %v", tool, RequireEnv, err)
		}
		t.Skipf("%s is not installed: %v", tool, err)
	}
	ns := ForTest(t, Options{Addresses: []netip.Prefix{addr1}, Routes: []netip.Prefix{ServiceNet}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := ns.Listen("tcp", "192.0.2.1:0")
	require.NoError(t, err)
	serve(t, l, "backend")
	vip := "198.51.100.10:80"

	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = read(short, ns, vip)
	cancelShort()
	require.Error(t, err, "without a rule, the Service address answers nothing")

	require.NoError(t, install(ctx, ns, vip, "192.0.2.1:"+port(l)))
	got, err := read(ctx, ns, vip)
	require.NoError(t, err)
	assert.Equal(t, "backend", got)
}

func TestPermissionErrorSaysWhatIsMissing(t *testing.T) {
	err := permission(fmt.Errorf("unshare(CLONE_NEWNET): %w", unix.EPERM))
	require.ErrorIs(t, err, ErrNotPermitted)
	require.ErrorIs(t, err, unix.EPERM)
	assert.Contains(t, err.Error(), "it needs root")
	assert.Contains(t, err.Error(), "CAP_SYS_ADMIN")

	err = permission(fmt.Errorf("open: %w", unix.ENOENT))
	assert.NotErrorIs(t, err, ErrNotPermitted)
	assert.Contains(t, err.Error(), "cannot make a network namespace")
}

func TestInvalidPrefix(t *testing.T) {
	ns := ForTest(t, Options{})
	assert.ErrorContains(t, ns.AddAddress(netip.Prefix{}), "invalid prefix")
	assert.ErrorContains(t, ns.AddRoute(netip.Prefix{}), "invalid prefix")
}

func port(l net.Listener) string {
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestWithoutRootSkipsOrFails runs a test of this package as an
// unprivileged user (uid 65534): it skips and says why, or, with
// $FASTOVER_REQUIRE_NETNS set, fails and says why. It needs root itself,
// to switch users.
func TestWithoutRootSkipsOrFails(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the test binary as another user (and without root, the other tests of the package show the skip)")
	}
	// The test binary, where uid 65534 may run it.
	dir, err := os.MkdirTemp("", "netns-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.ReadFile("/proc/self/exe")
	require.NoError(t, err)
	bin := dir + "/netns.test"
	require.NoError(t, os.WriteFile(bin, self, 0o755)) //nolint:gosec // an executable for the test

	run := func(mustRun string) (string, error) {
		cmd := exec.Command(bin, "-test.run=^TestListenAndDialInside$", "-test.v", "-test.count=1")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		if mustRun != "" {
			cmd.Env = append(cmd.Env, RequireEnv+"="+mustRun)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	require.NoError(t, err, out)
	assert.Contains(t, out, "--- SKIP: TestListenAndDialInside")
	assert.Contains(t, out, "it needs root")
	assert.Contains(t, out, "runs as uid 65534")
	assert.Contains(t, out, "set $"+RequireEnv+" to make this a failure")

	out, err = run("1")
	require.Error(t, err, out)
	assert.Contains(t, out, "--- FAIL: TestListenAndDialInside")
	assert.Contains(t, out, "it needs root")
	assert.Contains(t, out, "$"+RequireEnv+" is set, so this test must run")
}
