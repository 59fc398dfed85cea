package cluster

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fastover/fastover/internal/netns"
)

// A process started on the host outlives the threads that dials into a
// network namespace end: its parent-death signal must follow the test
// binary, not whichever thread forked it. Before the host thread, the
// first dial often ran on the forking thread, ended it, and the kernel
// killed the process.
func TestHostProcessOutlivesNamespaceThreads(t *testing.T) {
	ns := netns.ForTest(t, netns.Options{})
	l, err := ns.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var procs []*Process
	for _, name := range []string{"first", "second", "third"} {
		p := NewProcess(name, "/bin/sleep", t.TempDir(), "60")
		require.NoError(t, p.Start())
		t.Cleanup(func() { p.Stop(syscall.SIGKILL, time.Second) })
		procs = append(procs, p)
		// Each dial runs on a thread that joins the namespace and ends.
		for range 20 {
			c, err := ns.DialContext(ctx, "tcp", l.Addr().String())
			require.NoError(t, err)
			_ = c.Close()
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, p := range procs {
		require.True(t, p.Running(), "%s was killed when a namespace's thread ended: %s", p.name, p.Tail(5))
	}
}
