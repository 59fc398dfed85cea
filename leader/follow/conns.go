package follow

import (
	"net"
	"sync"
)

// conn is a connection to the leader of a term. The Follower closes it
// when a newer term is published; its own Close forgets it.
type conn struct {
	net.Conn
	term int32
	f    *Follower
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.f.untrack(c) })
	return c.Conn.Close()
}

// Conns is the number of open connections the Follower dialed to the
// leader it follows.
func (f *Follower) Conns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}
