// One replica of a fleet: its identity, its published address and its
// process; and the look-ups every fleet of replicas makes.

package fleet

import (
	"strconv"
	"syscall"

	"github.com/fastover/fastover/internal/cluster"
)

// Replica is one process of a fleet.
type Replica struct {
	ID   string
	N    int // publishes 192.0.2.N
	Proc *cluster.Process
	// Environ is added to its process's environment (NAME=value): the
	// variables a Pod's downward API would set, for one.
	Environ []string
}

// NewReplica is the fleet's replica number n: its identity is prefix-n.
func NewReplica(prefix string, n int) *Replica {
	return &Replica{ID: prefix + "-" + strconv.Itoa(n), N: n}
}

// Address is the address the replica publishes.
func (r *Replica) Address() string { return PublishedNet + strconv.Itoa(r.N) }

// Launch starts the replica's process as name, binary and args, or, once
// it has one, starts it again (after it exited or was stopped) as it was.
func (r *Replica) Launch(env *cluster.Env, name, binary string, args func() ([]string, error)) error {
	if r.Proc != nil {
		return r.Proc.Start()
	}
	a, err := args()
	if err != nil {
		return err
	}
	r.Proc, err = env.StartProcessWithEnv(name, binary, r.Environ, a...)
	return err
}

func (r *Replica) replica() *Replica { return r }

// Member is a fleet's replica: a Replica, or a type that embeds one.
type Member interface{ replica() *Replica }

// ByID returns the member with the identity, or the zero R.
func ByID[R Member](members []R, id string) R {
	for _, m := range members {
		if m.replica().ID == id {
			return m
		}
	}
	var none R
	return none
}

// ByAddress returns the member that publishes addr, or the zero R.
func ByAddress[R Member](members []R, addr string) R {
	for _, m := range members {
		if m.replica().Address() == addr {
			return m
		}
	}
	var none R
	return none
}

// StopAll kills every member's process.
func StopAll[R Member](members []R) {
	for _, m := range members {
		if p := m.replica().Proc; p != nil {
			p.Stop(syscall.SIGKILL, 0)
		}
	}
}
