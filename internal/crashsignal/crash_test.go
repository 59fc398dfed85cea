package crashsignal

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary, run again as a child that calls Handle and waits: a
// SIGUSR1 makes it panic (exit code 2).
func TestMain(m *testing.M) {
	if os.Getenv("CRASHSIGNAL_CHILD") == "1" {
		Handle("child")
		_, _ = os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSIGUSR1Panics(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CRASHSIGNAL_CHILD=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr stringWriter
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	buf := make([]byte, 6)
	_, err = out.Read(buf)
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 2, exit.ExitCode(), "a panic's exit code")
	assert.Contains(t, stderr.s, "panic: child: SIGUSR1")
}

type stringWriter struct{ s string }

func (w *stringWriter) Write(p []byte) (int, error) { w.s += string(p); return len(p), nil }
