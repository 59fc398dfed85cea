package toleration

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/utils/ptr"
)

func TestEffectiveString(t *testing.T) {
	assert.Equal(t, "none", Effective{}.String())
	assert.Equal(t, "forever", Effective{Tolerated: true}.String())
	assert.Equal(t, "5s", Effective{Tolerated: true, Seconds: ptr.To[int64](5)}.String())
	assert.Equal(t, "300s (default)", Effective{Tolerated: true, Seconds: ptr.To[int64](300), Default: true}.String())
}
