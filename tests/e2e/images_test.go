package e2e

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastover/fastover/certs"
	"github.com/fastover/fastover/internal/cluster"
	"github.com/fastover/fastover/internal/fleet"
	"github.com/fastover/fastover/internal/imagebuild"
	"github.com/fastover/fastover/tests/harness/images"
	"github.com/fastover/fastover/toleration"
)

// TestImageWebhook runs the fastover-webhook image with podman as the
// control plane's webhook, locked down as a restricted pod would be:
// non-root (65532), read-only root filesystem, every capability dropped,
// no new privileges, the certificate directory mounted read-only, host
// networking. Pods of a labelled namespace are injected through the real
// API server; the fastover-certs image renews the certificate into the
// mounted directory while a client creates pods, and the webhook serves
// the new one without a restart and without a failed admission.
func TestImageWebhook(t *testing.T) {
	t.Parallel()
	pm := newPodman(t)
	webhookImage := pm.load(t, "fastover-webhook")
	certsImage := pm.load(t, "fastover-certs")

	// The binaries say what they are; the images have no shell.
	for _, img := range []string{webhookImage, certsImage} {
		out, err := pm.output(append(pm.runArgs(pm.name("version"), "--rm"), img, "--version")...)
		require.NoError(t, err, out)
		assert.Contains(t, out, images.TestVersion+" (commit "+images.TestCommit+", "+images.TestCommitTime.Format(time.RFC3339)+";", img)
	}
	out, err := pm.output(append(pm.runArgs(pm.name("shell"), "--rm", "--entrypoint", "/bin/sh"), webhookImage, "-c", "true")...)
	require.Error(t, err, "the webhook image has a shell: %s", out)

	env := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The certificates, as fastover-certs writes them, in a directory of
	// the user the containers run as (as a Secret volume with fsGroup).
	work := ownedDir(t)
	certDir := filepath.Join(work, "tls")
	renew := func() *big.Int {
		t.Helper()
		out, err := pm.output(append(pm.runArgs(pm.name("certs"), "--rm", "-v", work+":/work"),
			certsImage, "--cert-dir=/work/tls", "--ca-dir=/work/ca", "--hosts=127.0.0.1", "--validity=1h")...)
		require.NoError(t, err, "fastover-certs: %s", out)
		pemBytes, err := os.ReadFile(filepath.Join(certDir, certs.CertFile))
		require.NoError(t, err)
		return certSerial(t, pemBytes)
	}
	serial := renew()
	caPEM, err := os.ReadFile(filepath.Join(work, "ca", certs.CAFile))
	require.NoError(t, err)

	ports, err := cluster.FreePorts(3)
	require.NoError(t, err)
	w := &webhookServer{
		addr:    "127.0.0.1:" + strconv.Itoa(ports[0]),
		health:  "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		metrics: "http://127.0.0.1:" + strconv.Itoa(ports[2]) + "/metrics",
		certDir: certDir, ports: ports, ca: &certs.CA{CertPEM: caPEM}, serial: serial,
	}
	container := pm.name("webhook")
	started := time.Now()
	w.proc, err = env.StartProcess(container, pm.path, append(pm.runArgs(container, "-v", certDir+":/certs:ro"),
		webhookImage,
		"--cert-dir=/certs",
		"--host=127.0.0.1",
		"--port="+strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[2]),
		"--shutdown-delay=1s",
	)...)
	require.NoError(t, err)
	readyCtx, readyCancel := context.WithTimeout(ctx, time.Minute)
	require.NoError(t, w.proc.WaitHTTP(readyCtx, w.health+"/readyz"))
	readyCancel()
	ready := time.Since(started)
	state := pm.state(t, container)
	checkLockedDown(t, state.pid)

	w.register(ctx, t, env, admissionregistrationv1.Fail)
	const ns = "image-webhook"
	require.NoError(t, env.CreateNamespace(ctx, ns, injectLabel()))
	pod, err := env.Client.CoreV1().Pods(ns).Create(ctx, bare("direct"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "unreachable=0s", pod.Annotations[toleration.AnnotationInjected])
	assertEffectiveSeconds(t, pod, corev1.TaintNodeUnreachable, ptr.To[int64](0))
	got, err := w.servedSerial()
	require.NoError(t, err)
	assert.Equal(t, 0, got.Cmp(serial), "the webhook serves the certificate written first")

	// A renewal into the mounted directory, under load.
	stream := startPodStream(ctx, env, ns)
	stream.waitMore(ctx, t, 20)
	before := stream.count()
	renewed := time.Now()
	newSerial := renew()
	require.NotEqual(t, 0, newSerial.Cmp(serial), "fastover-certs wrote the same certificate")
	written := time.Since(renewed)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		s, err := w.servedSerial()
		return err == nil && s.Cmp(newSerial) == 0, nil
	}), "the container never served the renewed certificate")
	served := time.Since(renewed)
	stream.waitMore(ctx, t, 20)
	stream.finish(t)
	assert.Equal(t, state, pm.state(t, container), "the container was restarted")

	// podman stop: SIGTERM, a graceful exit.
	stopped := time.Now()
	out, err = pm.output("stop", "-t", "20", container)
	require.NoError(t, err, out)
	exited, _ := w.proc.WaitExit(30 * time.Second)
	require.True(t, exited, "podman run still running after podman stop")
	assert.Equal(t, "0", pm.inspect(t, container, "{{.State.ExitCode}}"), "exit code after podman stop")

	t.Logf("webhook image: ready %v after podman run; renewal by the fastover-certs image took %v, the new certificate served %v after it began; %d pods admitted before, %d after, 0 failed; podman stop took %v",
		ready.Round(time.Millisecond), written.Round(time.Millisecond), served.Round(time.Millisecond),
		before, stream.count()-before, time.Since(stopped).Round(time.Millisecond))
}

// TestImageExampleFleet runs three containers of the fastover-example
// image, as locked down as the webhook's, each with the kubeconfig of a
// ServiceAccount bound to the leader Role mounted read-only: one leader is
// elected and published; podman stop of its container hands over to a
// new leader, which publishes itself within seconds.
func TestImageExampleFleet(t *testing.T) {
	t.Parallel()
	pm := newPodman(t)
	image := pm.load(t, "fastover-example")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := cluster.Start(t, cluster.Options{})
	require.NoError(t, env.CreateNamespace(ctx, "ha", nil))
	f, err := fleet.New(env, "", "ha", "ctl", shortDurations)
	require.NoError(t, err)
	require.NoError(t, f.CreateService(ctx, nil))

	kc, err := env.KubeconfigFor(ctx, "ha", "fastover-example", fleet.LeaderRole)
	require.NoError(t, err)
	work := ownedDir(t)
	kubeconfig := filepath.Join(work, "kubeconfig")
	data, err := os.ReadFile(kc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(kubeconfig, data, 0o400))
	require.NoError(t, os.Chown(kubeconfig, imagebuild.UID, imagebuild.UID))

	containers := map[string]string{} // replica ID → container
	for n := 1; n <= 3; n++ {
		r := &fleet.Replica{ID: "replica-" + strconv.Itoa(n), N: n}
		containers[r.ID] = pm.name(r.ID)
		r.Proc, err = env.StartProcess(containers[r.ID], pm.path, append(pm.runArgs(containers[r.ID], "-v", kubeconfig+":/etc/fastover/kubeconfig:ro"),
			append([]string{image,
				"--kubeconfig=/etc/fastover/kubeconfig",
				"--namespace=" + f.Namespace,
				"--service=" + f.Service,
				"--lease=" + f.Lease,
				"--id=" + r.ID,
				"--address=" + r.Address(),
				"--listen=127.0.0." + strconv.Itoa(n) + ":" + strconv.Itoa(f.Port),
				"--port=" + strconv.Itoa(f.Port),
			}, f.Args...)...)...)
		require.NoError(t, err)
		f.Replicas = append(f.Replicas, r)
	}

	first := waitServing(ctx, t, f, "", time.Minute)
	holder, _, err := f.Holder(ctx)
	require.NoError(t, err)
	assert.Equal(t, holder, first, "the Service answers from the Lease holder")
	sl, err := f.Slices(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{f.ByID(first).Address()}, fleet.PublishedAddresses(sl))
	for _, r := range f.Replicas {
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			code, _, err := f.Get(r.Address(), "/readyz")
			return err == nil && code == 200, nil
		}), "%s never ready", r.ID)
		checkLockedDown(t, pm.state(t, containers[r.ID]).pid)
	}

	// podman stop of the leader: SIGTERM, the leader hands over.
	stopped := time.Now()
	out, err := pm.output("stop", "-t", "20", containers[first])
	require.NoError(t, err, out)
	stopTook := time.Since(stopped)
	second := waitServing(ctx, t, f, first, 30*time.Second)
	handover := time.Since(stopped)
	assert.NotEqual(t, first, second)
	assert.Equal(t, "0", pm.inspect(t, containers[first], "{{.State.ExitCode}}"), "the leader's exit code")
	sl, err = f.Slices(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{f.ByID(second).Address()}, fleet.PublishedAddresses(sl))
	assert.Less(t, handover, 10*time.Second, "handover after podman stop of the leader")
	t.Logf("example image: %s led; podman stop of its container returned after %v, %s served the Service %v after the stop began",
		first, stopTook.Round(time.Millisecond), second, handover.Round(time.Millisecond))
}

// checkLockedDown reads, from the host, the status of a container's main
// process: user and group 65532, no capability, no new privileges.
func checkLockedDown(t *testing.T, pid int) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	fields := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	assert.Equal(t, "65532 65532 65532 65532", fields["Uid"], "uids of pid %d", pid)
	assert.Equal(t, "65532 65532 65532 65532", fields["Gid"], "gids of pid %d", pid)
	for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		assert.Equal(t, "0000000000000000", fields[c], "%s of pid %d", c, pid)
	}
	assert.Equal(t, "1", fields["NoNewPrivs"], "NoNewPrivs of pid %d", pid)
}

// ownedDir is a new directory of the user the images run as, removed at
// the end of the test.
func ownedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fastover-image-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chown(dir, imagebuild.UID, imagebuild.UID))
	return dir
}

var (
	imagesOnce sync.Once
	imagesDir  string
	imagesErr  error
)

// builtImages builds fastover's images once per test run, as `make
// images` does, for this machine's platform, and returns the directory of
// their OCI layouts.
func builtImages(t *testing.T) string {
	t.Helper()
	imagesOnce.Do(func() {
		imagesDir, imagesErr = os.MkdirTemp("", "fastover-e2e-images-")
		if imagesErr != nil {
			return
		}
		var o imagebuild.Options
		if o, imagesErr = images.Options(imagesDir); imagesErr != nil {
			return
		}
		// The platform of this machine, the one podman runs: tests/images
		// proves the index of both platforms.
		o.Platforms = []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		_, imagesErr = imagebuild.Build(ctx, o)
	})
	require.NoError(t, imagesErr, "build the images")
	return imagesDir
}

// podman runs the images. Every container and image it makes is removed
// when the test ends, whether it passed or not.
type podman struct {
	t       *testing.T
	path    string
	prefix  string // of the names of the test's containers
	ulimits []string
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	path, err := exec.LookPath("podman")
	if err == nil {
		_, err = exec.LookPath("runc")
	}
	if err != nil {
		t.Fatalf("%v: these tests run fastover's images with podman and runc; `make e2e` installs them (tests/tools/podman.sh), or: apt-get install -y podman runc", err)
	}
	pm := &podman{t: t, path: path, prefix: fmt.Sprintf("fastover-e2e-%d-%s-", os.Getpid(), strings.ToLower(t.Name()))}
	pm.ulimits, err = ulimitArgs()
	require.NoError(t, err)
	t.Cleanup(pm.removeAll)
	return pm
}

// name is the name of one of the test's containers.
func (pm *podman) name(what string) string { return pm.prefix + what }

// runArgs are the arguments of a podman run of a locked-down container:
// runc (crun cannot run on this kind of machine: cgroups in hybrid mode),
// the host's network, the user 65532, a read-only root, no capabilities,
// no new privileges, and limits no higher than the test's own (the
// sandbox refuses to raise them). The image and its arguments follow.
func (pm *podman) runArgs(name string, extra ...string) []string {
	args := []string{"run", "--name", name, "--runtime", "runc", "--network", "host",
		"--user", imagebuild.User, "--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges",
		"--log-driver", "k8s-file", "--pull", "never"}
	args = append(args, pm.ulimits...)
	return append(args, extra...)
}

// ulimitArgs are --ulimit flags no higher than the current soft limits,
// nor than a ceiling: runc cannot set limits it could not raise itself to
// in this sandbox (nproc=65536 fails where the shell's limit is 96364;
// 32768 passes), and a Go server needs far fewer.
func ulimitArgs() ([]string, error) {
	var args []string
	for _, l := range []struct {
		name, flag string
		ceiling    uint64
	}{{"nofile", "-n", 1 << 14}, {"nproc", "-u", 1 << 12}} {
		out, err := exec.Command("bash", "-c", "ulimit -S "+l.flag).Output()
		if err != nil {
			return nil, fmt.Errorf("ulimit %s: %w", l.flag, err)
		}
		v := strings.TrimSpace(string(out))
		n := l.ceiling
		if v != "unlimited" {
			if n, err = strconv.ParseUint(v, 10, 64); err != nil {
				return nil, fmt.Errorf("ulimit %s: %q", l.flag, v)
			}
			n = min(n, l.ceiling)
		}
		args = append(args, "--ulimit", fmt.Sprintf("%s=%d:%d", l.name, n, n))
	}
	return args, nil
}

// load pulls the image's OCI layout into podman's storage and returns the
// image's ID.
func (pm *podman) load(t *testing.T, image string) string {
	t.Helper()
	dir := filepath.Join(builtImages(t), image)
	out, err := pm.output("pull", "-q", "oci:"+dir)
	require.NoError(t, err, "podman pull oci:%s: %s", dir, out)
	id := strings.TrimSpace(out)
	require.NotEmpty(t, id)
	t.Cleanup(func() { _, _ = pm.output("rmi", "-f", id) })
	return id
}

func (pm *podman) output(args ...string) (string, error) {
	out, err := exec.Command(pm.path, args...).CombinedOutput()
	return string(out), err
}

func (pm *podman) inspect(t *testing.T, container, format string) string {
	t.Helper()
	out, err := pm.output("inspect", "--type", "container", "--format", format, container)
	require.NoError(t, err, out)
	return strings.TrimSpace(out)
}

// containerState identifies a run of a container.
type containerState struct {
	pid       int
	startedAt string
}

func (pm *podman) state(t *testing.T, container string) containerState {
	t.Helper()
	pid, startedAt, _ := strings.Cut(pm.inspect(t, container, "{{.State.Pid}} {{.State.StartedAt}}"), " ")
	n, err := strconv.Atoi(pid)
	require.NoError(t, err, "pid %q", pid)
	require.NotZero(t, n, "%s is not running", container)
	return containerState{pid: n, startedAt: startedAt}
}

// removeAll removes the test's containers, running or not.
func (pm *podman) removeAll() {
	out, err := pm.output("ps", "-a", "--format", "{{.Names}}")
	if err != nil {
		pm.t.Logf("podman ps: %v %s", err, out)
		return
	}
	for _, n := range strings.Fields(out) {
		if strings.HasPrefix(n, pm.prefix) {
			if out, err := pm.output("rm", "-f", "-t", "0", n); err != nil {
				pm.t.Logf("podman rm -f %s: %v %s", n, err, out)
			}
		}
	}
}

// TestImageRunCopiesItself: the fastover-run image as an init container
// runs it, with no shell: --copy-to writes the binary into a mounted
// directory (the emptyDir the controller's container mounts), where it
// runs.
func TestImageRunCopiesItself(t *testing.T) {
	t.Parallel()
	pm := newPodman(t)
	img := pm.load(t, "fastover-run")
	work := ownedDir(t)
	out, err := pm.output(append(pm.runArgs(pm.name("copy"), "--rm", "-v", work+":/fastover"), img, "--copy-to=/fastover")...)
	require.NoError(t, err, out)
	assert.Contains(t, out, "copied to /fastover/fastover-run")
	b, err := exec.Command(filepath.Join(work, "fastover-run"), "--version").CombinedOutput()
	require.NoError(t, err, "%s", b)
	assert.Contains(t, string(b), "fastover-run "+images.TestVersion)
}
