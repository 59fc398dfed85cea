package toleration

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func podJSONOf(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	return raw
}

func decodePod(t testing.TB, raw []byte) *corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	require.NoError(t, json.Unmarshal(raw, &pod), "%s", raw)
	return &pod
}
