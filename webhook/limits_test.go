package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestCheckEntries(t *testing.T) {
	list := func(n int, elem string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
	}
	object := func(n int) string {
		var b strings.Builder
		b.WriteByte('{')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":0`, i)
		}
		b.WriteByte('}')
		return b.String()
	}
	const max = MaxEntries
	review := func(userInfo, object string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","userInfo":` + userInfo + `,"object":` + object + `}}`)
	}
	tests := []struct {
		name  string
		check func([]byte) error
		doc   []byte
		want  error // errTooManyEntries, nil, or errSyntax for any other error
	}{
		{"pod: tolerations at the limit", checkPodEntries, []byte(`{"spec":{"tolerations":` + list(max, `{}`) + `}}`), nil},
		{"pod: tolerations over the limit", checkPodEntries, []byte(`{"spec":{"tolerations":` + list(max+1, `{}`) + `}}`), errTooManyEntries},
		{"pod: owner references over the limit", checkPodEntries, []byte(`{"metadata":{"ownerReferences":` + list(max+1, `{}`) + `}}`), errTooManyEntries},
		{"pod: annotations over the limit", checkPodEntries, []byte(`{"metadata":{"annotations":` + object(max+1) + `}}`), errTooManyEntries},
		{"pod: any object over the limit", checkPodEntries, []byte(`{"spec":{"nodeSelector":` + object(max+1) + `}}`), errTooManyEntries},
		{"pod: a long list it does not decode", checkPodEntries, []byte(`{"spec":{"containers":[{"args":` + list(3*max, `""`) + `}]}}`), nil},
		{"pod: escaped names are the same names", checkPodEntries, []byte(`{"\u0073pec":{"toleration\u0073":` + list(max+1, `{}`) + `}}`), errTooManyEntries},
		{"pod: malformed", checkPodEntries, []byte(`{"spec":`), errSyntax},
		{"review: many groups", checkReviewEntries, review(`{"groups":`+list(max+1, `""`)+`}`, `{}`), errTooManyEntries},
		{"review: many extra keys", checkReviewEntries, review(`{"extra":`+object(max+1)+`}`, `{}`), errTooManyEntries},
		{"review: the pod is checked on its own", checkReviewEntries, review(`{}`, `{"spec":{"tolerations":`+list(max+1, `{}`)+`},"metadata":`+object(max+1)+`}`), nil},
		{"review: after the pod, checks resume", checkReviewEntries, []byte(`{"request":{"object":{"a":` + list(max+1, `{}`) + `},"userInfo":{"groups":` + list(max+1, `""`) + `}}}`), errTooManyEntries},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check(tt.doc)
			switch {
			case tt.want == nil:
				assert.NoError(t, err)
			case errors.Is(tt.want, errSyntax):
				require.Error(t, err)
				assert.NotErrorIs(t, err, errTooManyEntries)
			default:
				assert.ErrorIs(t, err, tt.want)
			}
		})
	}
}

var errSyntax = errors.New("any JSON error")

// maximalReviews are reviews of about size bytes shaped to cost the most
// to decode: lists and maps of empty entries where the webhook decodes
// them, a long string, and a user with many groups.
func maximalReviews(size int) map[string][]byte {
	wrap := func(userInfo, object string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",` +
			`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
			`"namespace":"x","operation":"CREATE","userInfo":` + userInfo + `,"object":` + object + `}}`)
	}
	n := size / 3
	empty := strings.TrimSuffix(strings.Repeat(`{},`, n), ",")
	var annotations strings.Builder
	for i := 0; annotations.Len() < size-16; i++ {
		fmt.Fprintf(&annotations, `"%x":"",`, i)
	}
	return map[string][]byte{
		"tolerations":  wrap(`{}`, `{"spec":{"tolerations":[`+empty+`]}}`),
		"owners":       wrap(`{}`, `{"metadata":{"ownerReferences":[`+empty+`]}}`),
		"annotations":  wrap(`{}`, `{"metadata":{"annotations":{`+annotations.String()+`"z":""}}}`),
		"long string":  wrap(`{}`, `{"metadata":{"annotations":{"a":"`+strings.Repeat("x", size-200)+`"}}}`),
		"groups":       wrap(`{"groups":[`+strings.TrimSuffix(strings.Repeat(`"",`, n), ",")+`]}`, `{}`),
		"skipped list": wrap(`{}`, `{"spec":{"containers":[`+empty+`]}}`),
	}
}

// TestMaximalReviewCost sends one maximal review of each shape through the
// webhook's HTTP front and handler: what it allocates stays a small
// multiple of its size (unbounded, empty tolerations cost 128 times their
// size), and it is answered as a well-formed review or refused with 413.
func TestMaximalReviewCost(t *testing.T) {
	h, _ := newHandler(t)
	opts := Options{}
	opts.setDefaults()
	front := newLimiter(&opts, h.Metrics, nil).wrap(&admission.Webhook{Handler: h})
	for name, body := range maximalReviews(DefaultMaxRequestBytes - 1024) {
		t.Run(name, func(t *testing.T) {
			require.LessOrEqual(t, len(body), DefaultMaxRequestBytes)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			front.ServeHTTP(w, r)
			runtime.ReadMemStats(&after)
			ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(body))
			t.Logf("%s: %d bytes, allocated %.1f times that, status %d", name, len(body), ratio, w.Code)
			assert.Less(t, ratio, 8.0, "allocated per byte of review")
			switch w.Code {
			case http.StatusOK:
				var review admissionv1.AdmissionReview
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &review))
				require.NotNil(t, review.Response)
				assert.True(t, review.Response.Allowed, "%+v", review.Response.Result)
			case http.StatusRequestEntityTooLarge:
			default:
				t.Fatalf("status %d: %s", w.Code, w.Body.String())
			}
		})
	}
}

func TestLimiter(t *testing.T) {
	opts := Options{MaxRequestBytes: 1000, SmallRequestBytes: 100, MaxRequestsInFlight: 2, MaxLargeRequestsInFlight: 1}
	opts.setDefaults()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	var closing atomic.Bool
	lim := newLimiter(&opts, m, &closing)
	lim.wait = 200 * time.Millisecond
	release := make(chan struct{})
	var inside atomic.Int32
	srv := httptest.NewServer(lim.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.HasPrefix(body, []byte("block")) {
			inside.Add(1)
			<-release
		}
		_, _ = w.Write([]byte("ok"))
	})))
	defer srv.Close()
	// post returns the response's status, whether it closes the
	// connection, and its body.
	post := func(body []byte, chunked bool) (int, bool, string) {
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // length unknown to the client
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL+Path, rd)
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Close, string(b)
	}
	small := []byte("small")
	large := append([]byte("block"), bytes.Repeat([]byte(" "), 500)...)

	code, _, _ := post(small, false)
	assert.Equal(t, http.StatusOK, code)
	code, _, msg := post(bytes.Repeat([]byte(" "), 1001), false)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, msg)
	code, _, _ = post(small, true)
	assert.Equal(t, http.StatusLengthRequired, code)

	// The large pool full: another large one waits and is refused, small
	// ones pass.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		code, _, _ := post(large, false)
		assert.Equal(t, http.StatusOK, code)
	}()
	require.Eventually(t, func() bool { return inside.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	code, _, _ = post(large, false)
	assert.Equal(t, http.StatusTooManyRequests, code)
	for range 5 {
		code, _, _ = post(small, false)
		assert.Equal(t, http.StatusOK, code, "small reviews pass while the large pool is full")
	}
	closing.Store(true)
	_, closes, _ := post(small, false)
	assert.True(t, closes, "responses close their connection while shutting down")
	close(release)
	wg.Wait()

	assert.Equal(t, 1.0, counterValue(t, reg, `fastover_webhook_requests_refused_total{reason="body-too-large"}`))
	assert.Equal(t, 1.0, counterValue(t, reg, `fastover_webhook_requests_refused_total{reason="no-content-length"}`))
	assert.Equal(t, 1.0, counterValue(t, reg, `fastover_webhook_requests_refused_total{reason="too-many-in-flight"}`))
}
