package fleet

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// embedded is a fleet's replica type of another package's kind.
type embedded struct {
	*Replica
	port int
}

func TestLookupsSeeEmbeddedReplicas(t *testing.T) {
	members := []*embedded{{NewReplica("op", 1), 9001}, {NewReplica("op", 2), 9002}}
	assert.Equal(t, "op-2", members[1].ID)
	assert.Equal(t, "192.0.2.2", members[1].Address())

	assert.Equal(t, 9002, ByID(members, "op-2").port)
	assert.Equal(t, 9001, ByAddress(members, "192.0.2.1").port)
	assert.Nil(t, ByID(members, "op-3"))
	assert.Nil(t, ByAddress(members, "192.0.2.9"))
	StopAll(members) // no process started: nothing to stop, no panic
}
