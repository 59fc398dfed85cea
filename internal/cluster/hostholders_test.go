package cluster

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holderEnv names the state directory TestHelperHostHolder holds, and
// holderDirEnv the host directory it records.
const (
	holderEnv    = "FASTOVER_HOST_HOLDER_STATE"
	holderDirEnv = "FASTOVER_HOST_HOLDER_DIR"
)

// TestHelperHostHolder is another process with real nodes: it holds the
// machine's state until its stdin closes.
func TestHelperHostHolder(t *testing.T) {
	if os.Getenv(holderEnv) == "" {
		t.Skip("run by TestHostHeldAcrossProcesses")
	}
	h := &hostHolders{dir: os.Getenv(holderEnv), dirs: []string{os.Getenv(holderDirEnv)}}
	require.NoError(t, h.acquire())
	_, _ = os.Stdout.WriteString("HELD\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	h.release()
}

// holder is a TestHelperHostHolder process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startHolder(t *testing.T, state, dir string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHostHolder$")
	cmd.Env = append(os.Environ(), holderEnv+"="+state, holderDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HELD", strings.TrimSpace(line))
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &holder{cmd: cmd, stdin: stdin}
}

// leave makes the holder release and exit.
func (h *holder) leave(t *testing.T) {
	require.NoError(t, h.stdin.Close())
	require.NoError(t, h.cmd.Wait())
}

// TestHostHeldAcrossProcesses: the machine's state is held by two
// processes, as two test binaries with real nodes do when make test runs
// tests/e2e beside tests/charts. The first to leave must not put it back
// (it removed /run/containerd, and with it the shims' sockets of the
// other's running pods: the kubelet could no longer restart a container);
// the last does. A holder killed without leaving no longer counts, and
// the state it recorded is put back by the next last holder.
func TestHostHeldAcrossProcesses(t *testing.T) {
	tmp := t.TempDir()
	made := filepath.Join(tmp, "run-containerd") // made by the first real node
	h := &hostHolders{dir: filepath.Join(tmp, "state"), dirs: []string{made}}

	require.NoError(t, h.acquire())
	require.NoError(t, h.acquire(), "a second Env of this process")
	require.NoError(t, os.Mkdir(made, 0o755))
	other := startHolder(t, h.dir, made)
	h.release()
	h.release()
	assert.DirExists(t, made, "removed while another process's real nodes use it")
	other.leave(t)
	assert.NoDirExists(t, made, "the last holder puts the machine back")
	assert.NoFileExists(t, filepath.Join(h.dir, "state.json"))

	// A holder killed while it holds: it recorded the machine before any
	// real node, and its record is what the next last holder puts back.
	killed := startHolder(t, h.dir, made)
	require.NoError(t, os.Mkdir(made, 0o755))
	require.NoError(t, killed.cmd.Process.Kill())
	_ = killed.cmd.Wait()
	require.NoError(t, h.acquire())
	h.release()
	assert.NoDirExists(t, made, "a killed holder still counted, or its record was lost")
	entries, err := os.ReadDir(filepath.Join(h.dir, "holders"))
	require.NoError(t, err)
	assert.Empty(t, entries, "holder files left behind")

	h.release() // one release too many changes nothing
}

func TestParseHolder(t *testing.T) {
	pid, start, ok := parseHolder("123-456")
	assert.True(t, ok)
	assert.Equal(t, 123, pid)
	assert.Equal(t, uint64(456), start)
	for _, bad := range []string{"", "123", "x-1", "1-x", "-1-2", "0-5"} {
		_, _, ok := parseHolder(bad)
		assert.False(t, ok, bad)
	}
	assert.NotZero(t, processStart(os.Getpid()))
	assert.Zero(t, processStart(-1))
}
