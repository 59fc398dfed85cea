package cluster

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegistryLocalRef(t *testing.T) {
	r := &Registry{Addr: netip.MustParseAddrPort("198.19.0.254:5000")}
	for ref, want := range map[string]string{
		"registry.k8s.io/pause:3.10":               "198.19.0.254:5000/pause:3.10",
		"ghcr.io/fastover/fastover-webhook:v0.1.0": "198.19.0.254:5000/fastover/fastover-webhook:v0.1.0",
		"busybox:1": "198.19.0.254:5000/library/busybox:1",
		"ghcr.io/fastover/fastover-example@sha256:0000000000000000000000000000000000000000000000000000000000000000": "198.19.0.254:5000/fastover/fastover-example@sha256:0000000000000000000000000000000000000000000000000000000000000000",
	} {
		got, err := r.localRef(ref)
		require.NoError(t, err, ref)
		assert.Equal(t, want, got.String(), ref)
	}
	for _, bad := range []string{"quay.io/x/y:1", "ghcr.io/UPPER:1", "", "ghcr.io/x@sha256:short"} {
		_, err := r.localRef(bad)
		assert.Error(t, err, bad)
	}
	_, err := r.localRef("quay.io/x/y:1")
	assert.ErrorContains(t, err, "not one the nodes mirror")
}

func TestRegistryHostsTOML(t *testing.T) {
	r := &Registry{Addr: netip.MustParseAddrPort("198.19.0.254:5000")}
	assert.Equal(t, "server = \"https://ghcr.io\"\n\n[host.\"http://198.19.0.254:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n", r.hostsTOML("ghcr.io"))
	assert.Contains(t, r.hostsTOML("docker.io"), `server = "https://registry-1.docker.io"`)
}

// TestRealNodeConfigs checks what the configs must say on this kind of
// machine (design.md, "Real nodes"), and that everything a node writes is
// under its directory.
func TestRealNodeConfigs(t *testing.T) {
	n := &RealNode{
		Name: "real-2", IP: netip.MustParseAddr("198.19.2.1"), PodCIDR: netip.MustParsePrefix("198.18.1.0/24"),
		dir: "/tmp/env/nodes/real-2", cgroup: "fastover-4242-n2",
	}
	ctrd := n.containerdConfig("/usr/sbin/runc", "/repo/bin/cni")
	for _, want := range []string{
		"restrict_oom_score_adj = true", "SystemdCgroup = false", "BinaryName = '/usr/sbin/runc'",
		"sandbox = '" + PauseImage + "'", "config_path = '/tmp/env/nodes/real-2/containerd/certs.d'",
		"bin_dirs = ['/repo/bin/cni']", "stream_server_address = '198.19.2.1'",
		`address = "/tmp/env/nodes/real-2/containerd/containerd.sock"`,
	} {
		assert.Contains(t, ctrd, want)
	}
	for _, line := range strings.Split(ctrd, "\n") {
		if strings.Contains(line, "/") && !strings.HasPrefix(strings.TrimSpace(line), "#") &&
			!strings.Contains(line, "/tmp/env/nodes/real-2") && !strings.Contains(line, "/usr/sbin/runc") &&
			!strings.Contains(line, "/repo/bin/cni") && !strings.Contains(line, PauseImage) {
			t.Errorf("containerd's config names a path outside the node's directory: %s", line)
		}
	}
	cni := n.cniConfig()
	assert.Contains(t, cni, `"subnet": "198.18.1.0/24"`)
	assert.Contains(t, cni, `"dataDir": "/tmp/env/nodes/real-2/cni/ipam"`)
	kubelet := n.kubeletConfig("/tmp/env/ca.crt")
	for _, want := range []string{
		"failCgroupV1: false", "cgroupDriver: cgroupfs", "cgroupRoot: /fastover-4242-n2",
		"address: 198.19.2.1", "clientCAFile: /tmp/env/ca.crt", `nodefs.available: "1%"`,
		"containerRuntimeEndpoint: unix:///tmp/env/nodes/real-2/containerd/containerd.sock",
	} {
		assert.Contains(t, kubelet, want)
	}
	assert.NotContains(t, kubelet, "%!", "a format verb left over")
}

func TestAddRealNodeRefusesBadInput(t *testing.T) {
	e := &Env{}
	for _, bad := range []string{"", "Real_1", "real-1-" + strings.Repeat("x", 250)} {
		_, err := e.AddRealNode(context.Background(), bad)
		assert.ErrorContains(t, err, "not a valid Node name", "%q", bad)
	}
	_, err := e.AddRealNode(context.Background(), "real-1")
	assert.ErrorContains(t, err, "needs the control plane in a network namespace")
}

// TestServingCertificateNamesTheKubernetesService: pods reach the API
// server at the kubernetes Service's ClusterIP, or its DNS names, and
// verify its certificate there (in-cluster client-go does).
func TestServingCertificateNamesTheKubernetesService(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, "192.0.2.254", netip.MustParseAddr("198.51.100.1"))
	require.NoError(t, err)
	cert := readCert(t, p.serveCert)
	for _, host := range []string{"198.51.100.1", "192.0.2.254", "127.0.0.1", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		assert.NoError(t, cert.VerifyHostname(host), host)
	}
}
