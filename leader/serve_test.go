package leader

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// streamHandler writes a line every 10 ms until its request's context ends,
// as a watch does.
var streamHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	f := w.(http.Flusher)
	for i := 0; ; i++ {
		if _, err := fmt.Fprintf(w, "event %d\n", i); err != nil {
			return
		}
		f.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
})

// openStream starts a stream from ts and returns a reader of its lines,
// after the first one.
func openStream(t *testing.T, ts *httptest.Server) *bufio.Scanner {
	t.Helper()
	resp, err := ts.Client().Get(ts.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	require.True(t, sc.Scan(), "the stream's first line")
	return sc
}

// drained reads the stream to its end and reports how long that took.
func drained(sc *bufio.Scanner) time.Duration {
	start := time.Now()
	for sc.Scan() {
	}
	return time.Since(start)
}

func TestServerStopperEndsStreams(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%t", h2), func(t *testing.T) {
			ts := httptest.NewUnstartedServer(streamHandler)
			ts.EnableHTTP2 = h2
			stopper, err := NewServerStopper(ts.Config)
			require.NoError(t, err)
			ts.StartTLS()
			defer ts.Close()
			sc := openStream(t, ts)

			done := make(chan time.Duration, 1)
			go func() { done <- drained(sc) }()
			start := time.Now()
			require.NoError(t, stopper.Stop(10*time.Second), "the stream's handler returns: no need to wait for the grace period")
			assert.Less(t, time.Since(start), 5*time.Second)
			select {
			case d := <-done:
				assert.Less(t, d, 5*time.Second)
			case <-time.After(10 * time.Second):
				t.Fatal("the client's stream did not end")
			}
			select {
			case <-stopper.Stopped():
			default:
				t.Error("Stopped is not closed after Stop")
			}
			resp, err := ts.Client().Get(ts.URL)
			if err == nil {
				_ = resp.Body.Close()
			}
			assert.Error(t, err, "a stopped server takes no new request")
			assert.NoError(t, stopper.Stop(time.Second), "a second Stop returns the first's result")
		})
	}
}

// Without the stopper, Shutdown waits for a stream until its deadline: the
// client reads from a server that stopped leading.
func TestShutdownAloneWaitsForStreams(t *testing.T) {
	ts := httptest.NewUnstartedServer(streamHandler)
	ts.StartTLS()
	defer ts.Close()
	sc := openStream(t, ts)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, ts.Config.Shutdown(ctx), context.DeadlineExceeded)
	assert.True(t, sc.Scan(), "the stream still runs after the shutdown gave up")
	_ = ts.Config.Close()
}

// A handler that ignores its context is cut off after the grace period.
func TestServerStopperClosesAfterGrace(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "started")
		w.(http.Flusher).Flush()
		<-release
	}))
	stopper, err := NewServerStopper(ts.Config)
	require.NoError(t, err)
	ts.StartTLS()
	defer ts.Close()
	defer close(release) // before ts.Close, which waits for the handler
	sc := openStream(t, ts)
	start := time.Now()
	err = stopper.Stop(200 * time.Millisecond)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Less(t, drained(sc), 5*time.Second, "the connection is closed")
}

func TestNewServerStopperRefuses(t *testing.T) {
	_, err := NewServerStopper(nil)
	assert.ErrorContains(t, err, "nil http.Server")
	srv := &http.Server{BaseContext: func(net.Listener) context.Context { return context.Background() }}
	_, err = NewServerStopper(srv)
	assert.ErrorContains(t, err, "BaseContext is set already")
}

// A client whose stream the stopper ends asks again at once, as a
// client-go reflector does: its next request must go to a new connection
// (one to the next leader), not to the stopping server on the connection
// it has, where it would end at once and cost the client a back-off. So
// the GOAWAY goes out before the streams end.
func TestServerStopperNextRequestIsNotServed(t *testing.T) {
	for i := 0; i < 20; i++ {
		late := make(chan struct{}, 10)
		var stopper *ServerStopper
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-stopper.Stopped():
				late <- struct{}{}
				return
			default:
			}
			streamHandler(w, r)
		}))
		ts.EnableHTTP2 = true
		var err error
		stopper, err = NewServerStopper(ts.Config)
		require.NoError(t, err)
		ts.StartTLS()
		sc := openStream(t, ts)
		// The request's own result does not matter (refused, or served by
		// no one): only that the stopping server did not take it.
		again := make(chan struct{})
		go func() {
			defer close(again)
			drained(sc)
			if resp, err := ts.Client().Get(ts.URL); err == nil {
				_ = resp.Body.Close()
			}
		}()
		require.NoError(t, stopper.Stop(10*time.Second))
		<-again
		ts.Close()
		require.Empty(t, late, "run %d: the request after the stream's end reached the stopping server", i)
	}
}

func TestServerStopperIdle(t *testing.T) {
	ts := httptest.NewUnstartedServer(streamHandler)
	stopper, err := NewServerStopper(ts.Config)
	require.NoError(t, err)
	ts.StartTLS()
	defer ts.Close()
	done := make(chan error, 1)
	go func() { done <- stopper.Stop(time.Second) }()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Stop of a server with nothing to serve did not return")
	}
}
