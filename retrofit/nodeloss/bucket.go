package nodeloss

import "time"

// bucket is a token bucket as client-go's and golang.org/x/time/rate's:
// tokens accrue continuously at qps up to burst. A qps of 0 never gives a
// token (the controller's "never" limiter).
type bucket struct {
	qps    float64
	burst  float64
	tokens float64
	at     time.Duration // when tokens was computed
}

func newBucket(qps float64, burst int, now time.Duration) *bucket {
	return &bucket{qps: qps, burst: float64(burst), tokens: float64(burst), at: now}
}

func (b *bucket) advance(now time.Duration) {
	if now <= b.at {
		return
	}
	b.tokens += b.qps * (now - b.at).Seconds()
	if b.tokens > b.burst {
		b.tokens = b.burst
	}
	b.at = now
}

// reportedQPS is the rate the controller's limiter reports: a limiter of
// rate 0 is client-go's "never" limiter, whose QPS method returns 1.
func (b *bucket) reportedQPS() float64 {
	if b.qps <= 0 {
		return 1
	}
	return b.qps
}

// whole is how close to a whole token counts as one: tokens accrue in
// float steps (0.1 s × 0.1/s a tick), whose rounding must not make a
// token due at 10 s come a tick late.
const whole = 1 - 1e-9

// tryAccept takes a token if one is there now.
func (b *bucket) tryAccept(now time.Duration) bool {
	if b.qps <= 0 {
		return false
	}
	b.advance(now)
	if b.tokens >= whole {
		b.tokens--
		return true
	}
	return false
}

// reserve takes the next token, asked for at now, and returns when it is
// granted: requests wait their turn, in the order they ask (client-go's
// rate limiter before each request).
func (b *bucket) reserve(now time.Duration) time.Duration {
	b.advance(now)
	b.tokens--
	if b.tokens >= 0 {
		return now
	}
	return now + time.Duration(-b.tokens/b.qps*float64(time.Second))
}
