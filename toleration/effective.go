package toleration

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Effective is a pod's effective NoExecute toleration for one taint: the
// one the taint-eviction controller applies (see EffectiveToleration).
type Effective struct {
	// Seconds is its tolerationSeconds; nil means forever or, with
	// Tolerated false, evicted at once.
	Seconds *int64 `json:"seconds,omitempty"`
	// Tolerated is false when no toleration matches the taint.
	Tolerated bool `json:"tolerated"`
	// Default is true when it is exactly the API server's default
	// (Rule.IsAPIServerDefault).
	Default bool `json:"default,omitempty"`
}

// Effective returns the effective toleration among tols for the NoExecute
// taint with the key, and whether it is the API server's default under r.
func (r Rule) Effective(tols []corev1.Toleration, key string) Effective {
	i := EffectiveToleration(tols, key)
	if i < 0 {
		return Effective{}
	}
	return Effective{Tolerated: true, Seconds: tols[i].TolerationSeconds, Default: r.IsAPIServerDefault(tols[i], key)}
}

// String is e.g. "0s", "300s (default)", "forever" or "none".
func (e Effective) String() string {
	switch {
	case !e.Tolerated:
		return "none"
	case e.Seconds == nil:
		return "forever"
	case e.Default:
		return strconv.FormatInt(*e.Seconds, 10) + "s (default)"
	default:
		return strconv.FormatInt(*e.Seconds, 10) + "s"
	}
}
