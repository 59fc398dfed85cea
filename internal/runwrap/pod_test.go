package runwrap

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const testImage = "registry.example/fastover-run:v1"

func server() (*metav1.ObjectMeta, *corev1.PodSpec) {
	meta := &metav1.ObjectMeta{Annotations: map[string]string{AnnotationLease: "netexec", AnnotationService: "netexec"}}
	spec := &corev1.PodSpec{Containers: []corev1.Container{{
		Name:    "agnhost",
		Image:   "registry.k8s.io/e2e-test-images/agnhost:2.53",
		Command: []string{"/agnhost", "netexec"},
		Args:    []string{"--http-port=8080"},
		Env:     []corev1.EnvVar{{Name: "POD_NAME", Value: "mine"}},
		Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromString("http"),
		}}},
		StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}},
	}}}
	return meta, spec
}

func TestPodSpecWrapsTheAnnotatedContainer(t *testing.T) {
	meta, spec := server()
	changed, err := PodSpec(meta, spec, Options{Image: testImage})
	require.NoError(t, err)
	require.True(t, changed)

	c := spec.Containers[0]
	assert.Equal(t, []string{Binary, "--lease=netexec", "--service=netexec",
		"--ready-http=http://127.0.0.1:8080/healthz", "--grace-period=25s", "--", "/agnhost", "netexec"}, c.Command)
	assert.Equal(t, []string{"--http-port=8080"}, c.Args, "args stay: the kubelet puts them after the command")
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, int32(ProbePort), c.ReadinessProbe.HTTPGet.Port.IntVal)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Nil(t, c.StartupProbe, "COMMAND's startup probe would fail on a standby")
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: VolumeName, MountPath: MountPath, ReadOnly: true})

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		_, dup := env[e.Name]
		assert.False(t, dup, "%s twice", e.Name)
		env[e.Name] = e
	}
	assert.Equal(t, "mine", env["POD_NAME"].Value, "the container's own variable is kept")
	assert.Equal(t, "status.podIP", env["POD_IP"].ValueFrom.FieldRef.FieldPath)
	assert.Equal(t, "metadata.namespace", env["POD_NAMESPACE"].ValueFrom.FieldRef.FieldPath)
	assert.Equal(t, "agnhost", env["CONTAINER_NAME"].Value)

	require.Len(t, spec.InitContainers, 1)
	assert.Equal(t, testImage, spec.InitContainers[0].Image)
	assert.Equal(t, []string{"--copy-to=" + MountPath}, spec.InitContainers[0].Args)
	sc := spec.InitContainers[0].SecurityContext
	require.NotNil(t, sc, "Pod Security's restricted profile")
	assert.True(t, *sc.RunAsNonRoot)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	require.Len(t, spec.Volumes, 1)
	assert.NotNil(t, spec.Volumes[0].EmptyDir)

	// Again: already wrapped, nothing changes.
	before := spec.DeepCopy()
	changed, err = PodSpec(meta, spec, Options{Image: testImage})
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, before, spec)
}

func TestPodSpecLeavesOtherPodsAlone(t *testing.T) {
	_, spec := server()
	before := spec.DeepCopy()
	changed, err := PodSpec(&metav1.ObjectMeta{Annotations: map[string]string{"other": "x"}}, spec, Options{Image: testImage})
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, before, spec)
}

func TestPodSpecReadinessCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		annotations map[string]string
		probe       *corev1.Probe
		want        string // the check flag, "" for none
		err         string
	}{
		"annotation http": {annotations: map[string]string{AnnotationReadyHTTP: "https://localhost:9443/ready"}, want: "--ready-http=https://localhost:9443/ready"},
		"annotation tcp":  {annotations: map[string]string{AnnotationReadyTCP: "127.0.0.1:9000"}, want: "--ready-tcp=127.0.0.1:9000"},
		"annotation over probe": {
			annotations: map[string]string{AnnotationReadyTCP: "127.0.0.1:9000"},
			probe:       &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(1)}}},
			want:        "--ready-tcp=127.0.0.1:9000",
		},
		"https probe with a query": {
			probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Path: "readyz?verbose=1", Port: intstr.FromInt32(10250)}}},
			want:  "--ready-http=https://127.0.0.1:10250/readyz?verbose=1",
		},
		"tcp probe on a named port": {
			probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}},
			want:  "--ready-tcp=127.0.0.1:8080",
		},
		"probe on a host": {
			probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "::1", Port: intstr.FromInt32(80)}}},
			want:  "--ready-tcp=[::1]:80",
		},
		"exec probe": {probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}},
		"no probe":   {},
		"unknown named port": {
			probe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("metrics")}}},
			err:   `no port named "metrics"`,
		},
		"both annotations": {annotations: map[string]string{AnnotationReadyHTTP: "http://a:1/", AnnotationReadyTCP: "a:1"}, err: "not both"},
		"bad url":          {annotations: map[string]string{AnnotationReadyHTTP: "127.0.0.1:8080/readyz"}, err: AnnotationReadyHTTP},
		"bad host:port":    {annotations: map[string]string{AnnotationReadyTCP: "127.0.0.1"}, err: AnnotationReadyTCP},
	} {
		t.Run(name, func(t *testing.T) {
			meta, spec := server()
			for k, v := range tc.annotations {
				meta.Annotations[k] = v
			}
			spec.Containers[0].ReadinessProbe = tc.probe
			before := spec.DeepCopy()
			_, err := PodSpec(meta, spec, Options{Image: testImage})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				assert.Equal(t, before, spec, "unchanged on error")
				return
			}
			require.NoError(t, err)
			cmd := spec.Containers[0].Command
			if tc.want == "" {
				assert.NotContains(t, cmd[3], "--ready")
				return
			}
			assert.Equal(t, tc.want, cmd[3])
		})
	}
}

func TestPodSpecRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*metav1.ObjectMeta, *corev1.PodSpec)
		opts   Options
		err    string
	}{
		"no command": {change: func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.Containers[0].Command = nil }, err: "has no command"},
		"two containers, none named": {
			change: func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
				s.Containers = append(s.Containers, corev1.Container{Name: "sidecar"})
			},
			err: "has 2 containers",
		},
		"named container missing": {
			change: func(m *metav1.ObjectMeta, _ *corev1.PodSpec) { m.Annotations[AnnotationContainer] = "nope" },
			err:    "no such container",
		},
		"bad lease":   {change: func(m *metav1.ObjectMeta, _ *corev1.PodSpec) { m.Annotations[AnnotationLease] = "Not_A_Name" }, err: AnnotationLease},
		"empty lease": {change: func(m *metav1.ObjectMeta, _ *corev1.PodSpec) { m.Annotations[AnnotationLease] = "" }, err: AnnotationLease},
		"bad service": {change: func(m *metav1.ObjectMeta, _ *corev1.PodSpec) { m.Annotations[AnnotationService] = "a.b" }, err: AnnotationService},
		"probe port taken": {
			change: func(_ *metav1.ObjectMeta, s *corev1.PodSpec) {
				s.Containers[0].Ports = append(s.Containers[0].Ports, corev1.ContainerPort{ContainerPort: ProbePort})
			},
			err: "probe port",
		},
		"volume name taken": {
			change: func(_ *metav1.ObjectMeta, s *corev1.PodSpec) { s.Volumes = []corev1.Volume{{Name: VolumeName}} },
			err:    "already has a volume",
		},
		"no image": {opts: Options{}, err: "no image"},
	} {
		t.Run(name, func(t *testing.T) {
			meta, spec := server()
			if tc.change != nil {
				tc.change(meta, spec)
			}
			if tc.opts == (Options{}) && name != "no image" {
				tc.opts = Options{Image: testImage}
			}
			before := spec.DeepCopy()
			_, err := PodSpec(meta, spec, tc.opts)
			require.ErrorContains(t, err, tc.err)
			assert.Equal(t, before, spec, "unchanged on error")
		})
	}
}

func TestPodSpecPicksTheNamedContainer(t *testing.T) {
	meta, spec := server()
	spec.Containers = append([]corev1.Container{{Name: "sidecar", Image: "proxy"}}, spec.Containers...)
	meta.Annotations[AnnotationContainer] = "agnhost"
	_, err := PodSpec(meta, spec, Options{Image: testImage})
	require.NoError(t, err)
	assert.Nil(t, spec.Containers[0].Command, "the sidecar is left alone")
	assert.Equal(t, Binary, spec.Containers[1].Command[0])
}

func TestGracePeriod(t *testing.T) {
	for _, tc := range []struct {
		pod  *int64
		want time.Duration
	}{
		{nil, 25 * time.Second},
		{ptr.To[int64](30), 25 * time.Second},
		{ptr.To[int64](120), 115 * time.Second},
		{ptr.To[int64](10), 5 * time.Second},
		{ptr.To[int64](6), 3 * time.Second},
		{ptr.To[int64](1), 500 * time.Millisecond},
		{ptr.To[int64](0), 100 * time.Millisecond},
		{ptr.To[int64](-1), 100 * time.Millisecond},
	} {
		assert.Equal(t, tc.want, gracePeriod(tc.pod), "pod grace %v", tc.pod)
	}
}
