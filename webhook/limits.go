package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// What one request may cost. The webhook's container has 128 MiB; a review
// is bounded in bytes (MaxRequestBytes), in the number of entries of each
// JSON object and of each list the webhook decodes (MaxEntries), and in how
// many are handled at once (two pools: small reviews, as the API server
// sends for real pods, and large ones, so that large ones never hold up
// the small ones). A request is then held in memory a small multiple of
// its size at most: its body, controller-runtime's copy of it, the pod's
// raw object, and the few fields the rule decodes.
const (
	// DefaultMaxRequestBytes bounds an AdmissionReview's body. The API
	// server refuses request bodies over 3 MiB and etcd objects over
	// 1.5 MiB; a pod CREATE's review is its object (re-encoded as JSON)
	// and a few hundred bytes more, so a real pod's review is far below
	// this. Larger bodies are refused unread with 413, and the API server
	// applies the failurePolicy.
	DefaultMaxRequestBytes = 3 << 20
	// DefaultSmallRequestBytes: reviews up to this size are small and
	// handled DefaultMaxRequestsInFlight at a time; larger ones
	// DefaultMaxLargeRequestsInFlight at a time. A typical pod's review
	// is 2-20 KiB.
	DefaultSmallRequestBytes = 64 << 10
	// DefaultMaxRequestsInFlight bounds the small reviews handled at once.
	DefaultMaxRequestsInFlight = 32
	// DefaultMaxLargeRequestsInFlight bounds the large reviews handled at
	// once.
	DefaultMaxLargeRequestsInFlight = 2
	// DefaultMaxConnections bounds the open connections (each costs
	// buffers and a goroutine even while idle).
	DefaultMaxConnections = 256
	// MaxEntries bounds the members of every JSON object in a review and
	// the elements of every list the webhook decodes (the review's user
	// info; the pod's tolerations and owner references). Decoding "{}" as
	// a Go struct costs 30-100 times its 3 bytes: without this bound, one
	// 3 MiB review of empty tolerations took 380 MiB. No real pod comes
	// near it (the API server caps a pod's annotations at 256 KiB in all).
	MaxEntries = 4096
	// queueTimeout bounds how long a request waits for a place in its
	// pool before it is refused with 429 (the API server gives up after
	// the webhook's timeoutSeconds anyway, 3 s as installed).
	queueTimeout = 5 * time.Second
)

// errTooManyEntries is a JSON document with more entries than MaxEntries
// in an object or a list that is decoded.
var errTooManyEntries = errors.New("too many entries")

// checkEntries walks a JSON document without decoding it and returns an
// error wrapping errTooManyEntries if an object, or a list for which
// cappedList is true, holds more than max entries; a JSON error if the
// document is malformed. cappedList gets the JSON Pointer of the list, and
// is asked only for lists longer than max. exempt, if not nil, exempts the
// containers at and below a pointer (such as raw objects that are copied,
// not decoded). Duplicate names are not tracked: the walk itself costs no
// memory per entry.
func checkEntries(raw []byte, max int64, cappedList func(ptr string) bool, exempt func(ptr string) bool) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true))
	// decided[d]: whether the container at depth d was looked at already
	// (over the limit, and not capped). inExempt: the depth of the exempt
	// container the walk is in, 0 if none.
	var decided []bool
	inExempt := 0
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		depth := dec.StackDepth()
		if inExempt > 0 {
			if depth >= inExempt {
				continue
			}
			inExempt = 0
		}
		if k := tok.Kind(); k == '{' || k == '[' {
			if exempt != nil && exempt(string(dec.StackPointer())) {
				inExempt = depth
				continue
			}
			for len(decided) <= depth {
				decided = append(decided, false)
			}
			decided[depth] = false
			continue
		}
		if depth == 0 || decided[depth] {
			continue
		}
		kind, n := dec.StackIndex(depth)
		if kind == '{' {
			n /= 2
		}
		if n <= max {
			continue
		}
		ptr := string(dec.StackPointer())
		ptr = ptr[:strings.LastIndexByte(ptr, '/')] // the container's, not its last entry's
		if kind == '{' || cappedList(ptr) {
			return fmt.Errorf("%w: more than %d in %q", errTooManyEntries, max, ptr)
		}
		decided[depth] = true
	}
}

// checkPodEntries bounds what DecodePod will allocate for a pod's JSON:
// objects (their names are checked for duplicates) and the lists it
// decodes.
func checkPodEntries(raw []byte) error {
	err := checkEntries(raw, MaxEntries, func(ptr string) bool {
		return ptr == "/spec/tolerations" || ptr == "/metadata/ownerReferences"
	}, nil)
	if err != nil && !errors.Is(err, errTooManyEntries) {
		return fmt.Errorf("decode pod: %w", err)
	}
	return err
}

// checkReviewEntries bounds what controller-runtime allocates decoding an
// AdmissionReview: every object and list outside the request's raw
// objects, which are copied as bytes (the pod is checked on its own).
func checkReviewEntries(raw []byte) error {
	return checkEntries(raw, MaxEntries, func(string) bool { return true }, func(ptr string) bool {
		return ptr == "/request/object" || ptr == "/request/oldObject" || ptr == "/request/options"
	})
}

// limiter is the HTTP front of the webhook: it refuses what would cost too
// much before reading it, and bounds the requests handled at once.
type limiter struct {
	maxBytes   int64
	smallBytes int64
	small      chan struct{}
	large      chan struct{}
	wait       time.Duration // for a place in the pool
	metrics    *Metrics
	// closing: responses ask the client to close the connection, so that
	// it reconnects, through the Service, to a replica that stays.
	closing *atomic.Bool
}

func newLimiter(o *Options, m *Metrics, closing *atomic.Bool) *limiter {
	return &limiter{
		maxBytes:   o.MaxRequestBytes,
		smallBytes: o.SmallRequestBytes,
		small:      make(chan struct{}, o.MaxRequestsInFlight),
		large:      make(chan struct{}, o.MaxLargeRequestsInFlight),
		wait:       queueTimeout,
		metrics:    m,
		closing:    closing,
	}
}

// wrap returns next behind the limits. A refusal is an HTTP error, not an
// AdmissionReview: the API server then applies the failurePolicy (an
// answer with allowed: false would be a denial whatever the policy).
func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if l.closing != nil && l.closing.Load() {
			w.Header().Set("Connection", "close")
		}
		switch {
		case r.ContentLength < 0:
			// The API server always sends the length; a body of unknown
			// length could only be read to find out.
			l.refuse(w, RefusedNoLength, http.StatusLengthRequired, "a Content-Length is required")
			return
		case r.ContentLength > l.maxBytes:
			l.refuse(w, RefusedBodyTooLarge, http.StatusRequestEntityTooLarge,
				"the review is "+strconv.FormatInt(r.ContentLength, 10)+" bytes; the limit is "+strconv.FormatInt(l.maxBytes, 10))
			return
		}
		pool := l.small
		if r.ContentLength > l.smallBytes {
			pool = l.large
		}
		timer := time.NewTimer(l.wait)
		select {
		case pool <- struct{}{}:
			timer.Stop()
		case <-timer.C:
			l.refuse(w, RefusedBusy, http.StatusTooManyRequests, "too many reviews in flight")
			return
		case <-r.Context().Done():
			timer.Stop()
			return // the client is gone
		}
		defer func() { <-pool }()

		// Read the body here, in one allocation of its known size, and
		// bound what decoding it will cost before controller-runtime does.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			http.Error(w, "reading the review: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := checkReviewEntries(body); errors.Is(err, errTooManyEntries) {
			l.refuse(w, RefusedBodyTooLarge, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		// A malformed review is left to controller-runtime, which answers
		// it as such.
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func (l *limiter) refuse(w http.ResponseWriter, reason string, code int, msg string) {
	l.metrics.countRefused(reason)
	http.Error(w, msg, code)
}
