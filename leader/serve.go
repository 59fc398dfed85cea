package leader

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServerStopper ends what an http.Server serves when the leader's term
// ends, long-running requests included.
//
// http.Server.Shutdown closes the listeners, sends HTTP/2 connections a
// GOAWAY and closes idle connections, then waits for the requests under
// way; a watch or any other stream never ends by itself, so the clients
// that hold one keep reading from a replica that no longer leads until the
// shutdown gives up. A ServerStopper gives every request a context that
// Stop cancels right after the shutdown's GOAWAY: a handler that follows
// its request's context (as a watch does) returns at once, and its client,
// its stream ended, reconnects on a new connection to the Service and
// reaches the new leader.
type ServerStopper struct {
	srv    *http.Server
	base   context.Context
	cancel context.CancelFunc
	once   sync.Once
	err    error
}

// NewServerStopper sets srv.BaseContext, which must be unset, so that Stop
// can end every request. Call it before srv serves.
func NewServerStopper(srv *http.Server) (*ServerStopper, error) {
	if srv == nil {
		return nil, errors.New("leader: NewServerStopper: nil http.Server")
	}
	if srv.BaseContext != nil {
		return nil, errors.New("leader: NewServerStopper: the http.Server's BaseContext is set already; the stopper sets its own")
	}
	s := &ServerStopper{srv: srv}
	s.base, s.cancel = context.WithCancel(context.Background())
	srv.BaseContext = func(_ net.Listener) context.Context { return s.base }
	return s, nil
}

// goAwayLead is how long Stop lets the shutdown's GOAWAY go out before it
// ends the requests' contexts: http.Server.Shutdown sends it from a
// goroutine of its own, and a client that sees its stream end before the
// GOAWAY sends its next request (a reflector's next watch) on the same
// connection, to this server, which ends it at once.
const goAwayLead = 20 * time.Millisecond

// Stop stops serving: it shuts the server down (listeners closed, GOAWAY
// to HTTP/2 clients, idle connections closed), ends every request's
// context a moment later (goAwayLead), so that the clients whose streams
// end send their next request on a new connection, waits up to grace for
// the handlers to return, and then closes every connection left. It
// returns the shutdown's error (nil, or context.DeadlineExceeded if grace
// passed); a second call returns the first's.
func (s *ServerStopper) Stop(grace time.Duration) error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.srv.Shutdown(ctx) }()
		select {
		case s.err = <-done: // nothing was being served
			s.cancel()
		case <-time.After(min(goAwayLead, grace)):
			s.cancel()
			s.err = <-done
		}
		if s.err != nil {
			_ = s.srv.Close()
		}
	})
	return s.err
}

// Stopped is closed once Stop has begun: a handler that streams can also
// select on it.
func (s *ServerStopper) Stopped() <-chan struct{} { return s.base.Done() }
