package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A watch of replicas (GET .../replicas?watch=true, what an informer or
// `kubectl get -w` opens) streams the replica that serves it: ADDED at
// once, then MODIFIED every watchInterval whether or not anything changed,
// so that a client sees a stream that stalled (a frozen or cut-off
// replica) as a gap, and which replica, term and role each event comes
// from.
const watchInterval = time.Second

// initialEventsEnd is the annotation of the bookmark that ends the initial
// events of a watch with sendInitialEvents=true (client-go's streaming
// list).
const initialEventsEnd = "k8s.io/initial-events-end"

// maxWatchTimeout bounds timeoutSeconds.
const maxWatchTimeout = time.Hour

// watchEvent is one line of the stream, as kube-apiserver writes them.
type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object any             `json:"object"`
}

// isWatch reports whether a request for the collection asks for a watch.
func isWatch(r *http.Request) bool {
	v := r.URL.Query().Get("watch")
	return v == "true" || v == "1"
}

// serveWatch streams watch events until the client goes or timeoutSeconds
// (if given) passes.
func (a *aggAPI) serveWatch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	timeout, err := watchTimeout(q.Get("timeoutSeconds"))
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	me := a.replica()
	if a.refuseStandby && !me.Status.Leading {
		a.refuse(w, me)
		return
	}
	send, ok := startStream(w)
	if !ok {
		return
	}
	if !send(watch.Added, &me) {
		return
	}
	if q.Get("sendInitialEvents") == "true" {
		mark := Replica{
			TypeMeta:   me.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: me.ResourceVersion, Annotations: map[string]string{initialEventsEnd: "true"}},
		}
		if !send(watch.Bookmark, &mark) {
			return
		}
	}
	everyUntil(r, timeout, a.watchEvery, func() bool {
		me := a.replica()
		return send(watch.Modified, &me)
	})
}

// everyUntil calls f every period until the client goes, timeout passes,
// or f returns false (the client no longer reads).
func everyUntil(r *http.Request, timeout, period time.Duration, f func() bool) {
	end := time.NewTimer(timeout)
	defer end.Stop()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-tick.C:
			if !f() {
				return
			}
		}
	}
}

// watchTimeout is how long a watch with timeoutSeconds s lasts: s, at
// most maxWatchTimeout, which is also the default.
func watchTimeout(s string) (time.Duration, error) {
	if s == "" {
		return maxWatchTimeout, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("timeoutSeconds %q: want a whole number of seconds", s)
	}
	if n > 0 && time.Duration(n)*time.Second < maxWatchTimeout {
		return time.Duration(n) * time.Second, nil
	}
	return maxWatchTimeout, nil
}

// startStream writes a watch's headers and returns send, which writes one
// event and flushes it, reporting whether the client still reads; false if
// the connection cannot stream (an error is answered then).
func startStream(w http.ResponseWriter) (send func(watch.EventType, any) bool, ok bool) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeStatus(w, apierrors.NewInternalError(fmt.Errorf("the connection cannot stream a watch")))
		return nil, false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	// The headers go out now: a watch that has nothing to send yet is
	// established for its client all the same (client-go's Watch returns
	// once they arrive).
	flusher.Flush()
	enc := json.NewEncoder(w)
	return func(typ watch.EventType, obj any) bool {
		if err := enc.Encode(watchEvent{Type: typ, Object: obj}); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}, true
}
