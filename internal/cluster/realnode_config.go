package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// The files a real node runs on: containerd's config (and a hosts.toml per
// mirrored registry), the CNI network and the kubelet's config and
// kubeconfig, all under the node's directory.

// containerdConfig is containerd's config for node n: root, state, sockets,
// runc's root, the CNI files and the registry mirrors under its directory;
// restrict_oom_score_adj, because this kind of machine lacks
// CAP_SYS_RESOURCE even for root (runc fails to lower a sandbox's
// oom_score_adj otherwise: "can't get final child's PID from pipe: EOF").
func (n *RealNode) containerdConfig(runc, cniBin string) string {
	d := n.dir
	return fmt.Sprintf(`# containerd for the real node %[1]s: everything under %[2]s.
version = 3
root = "%[2]s/containerd/root"
state = "%[2]s/containerd/state"
temp = "%[2]s/containerd/tmp"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "%[2]s/containerd/containerd.sock"
[ttrpc]
  address = "%[2]s/containerd/containerd.sock.ttrpc"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "%[2]s/containerd/opt"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '%[3]s'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '%[2]s/containerd/certs.d'
  [plugins.'io.containerd.cri.v1.runtime']
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '%[4]s'
          Root = '%[2]s/containerd/runc'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['%[5]s']
      conf_dir = '%[2]s/cni/net.d'
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '%[6]s'
    stream_server_port = '0'
`, n.Name, d, PauseImage, runc, cniBin, n.IP)
}

// cniConfig is the node's pod network: a bridge with the node's pod range
// (host-local), the node its pods' gateway.
func (n *RealNode) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "%[1]s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "%[2]s",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "%[3]s"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "%[4]s/cni/ipam"
      }
    }
  ]
}
`, n.Name, n.bridge(), n.PodCIDR, n.dir)
}

// kubeletConfig is the kubelet's: a cgroup root of the node's own
// (failCgroupV1 off: this kind of machine has a cgroup v1 hybrid
// hierarchy), its ports on the node's address, a node Lease renewed every
// 2 s so that a short --node-monitor-grace-period does not flap, and no
// cluster DNS.
func (n *RealNode) kubeletConfig(caFile string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /%[1]s
enforceNodeAllocatable: ["pods"]
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s/containerd/containerd.sock
imageServiceEndpoint: unix://%[2]s/containerd/containerd.sock
podLogsDir: %[2]s/pod-logs
volumePluginDir: %[2]s/kubelet/volume-plugins
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: %[3]s
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]s}
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: ""
nodeLeaseDurationSeconds: 8
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
serializeImagePulls: false
maxPods: 30
`, n.cgroupName(), n.dir, n.IP, caFile)
}

// writeConfigs writes every file the node's processes read.
func (n *RealNode) writeConfigs(e *Env, runc string) error {
	files := map[string]string{
		"containerd/config.toml":         n.containerdConfig(runc, filepath.Join(e.bin, "cni")),
		"cni/net.d/10-fastover.conflist": n.cniConfig(),
		"kubelet/config.yaml":            n.kubeletConfig(e.pki.caFile),
	}
	for _, host := range Mirrored {
		files["containerd/certs.d/"+host+"/hosts.toml"] = e.registry.hostsTOML(host)
	}
	for rel, data := range files {
		path := filepath.Join(n.dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			return err
		}
	}
	for _, dir := range []string{"pod-logs", "kubelet/pki", "kubelet/root"} {
		if err := os.MkdirAll(filepath.Join(n.dir, dir), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// cgroupName is the node's cgroup root, in every hierarchy.
func (n *RealNode) cgroupName() string { return n.cgroup }

// bridge is the name of the node's pod bridge (in its namespace).
func (n *RealNode) bridge() string { return "fo-br0" }
