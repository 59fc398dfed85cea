package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SignalContainer sends sig to the main process of a container of the
// node: containerID is a Pod's containerStatuses[].containerID
// ("containerd://<id>", or the bare id). It is what the node's own
// machinery does to a process: SIGKILL as the kernel's OOM killer or a
// crash ends it (the kubelet sees the container exit and restarts it),
// SIGSTOP and SIGCONT as a stall freezes and resumes it (the kubelet sees
// it running throughout).
func (n *RealNode) SignalContainer(ctx context.Context, containerID string, sig syscall.Signal) error {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok && strings.Contains(containerID, "://") {
		return fmt.Errorf("cluster: container %q of node %s: not a containerd container", containerID, n.Name)
	}
	if id == "" {
		return errors.New("cluster: signal a container: no container ID (the Pod's status has none yet)")
	}
	name := unix.SignalName(sig)
	if name == "" {
		return fmt.Errorf("cluster: signal %d: not a signal", int(sig))
	}
	if _, err := n.ctr(ctx, "tasks", "kill", "--signal", name, id); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
		}
		return fmt.Errorf("cluster: %s to container %s of node %s: %w", name, id, n.Name, err)
	}
	return nil
}
