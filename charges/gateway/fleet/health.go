package fleet

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// HealthWindow is how far back a gateway's health looks (the OpenAPI document: "5m").
const HealthWindow = 5 * time.Minute

// Circuit states as GET /v1/gateways names them.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// Health is one node's view of a gateway over the last HealthWindow: each
// node sees only its own calls, and routes by what it sees.
type Health struct {
	Circuit string
	// Calls are the calls made in the window (refused by an open circuit:
	// not made, not counted).
	Calls int
	// ErrorRate is the share of calls that got no verdict: the gateway
	// answered that it did nothing (503, refused connection) or no answer
	// came at all. Declines are answers, not errors.
	ErrorRate float64
	// TimeoutRate is the share of calls whose answer never came (timeout,
	// connection reset): their outcome was unknown.
	TimeoutRate float64
	// P50 and P95 are latencies of the most recent calls in the window
	// (up to latencySamples of them).
	P50, P95 time.Duration
	// CallsSinceStart and LatencySinceStart add up every call this node
	// made, window or not: the count and sum of the latency summary.
	CallsSinceStart   uint64
	LatencySinceStart time.Duration
}

const (
	// healthBuckets split the window: counts age out a bucket at a time
	// (10 s), so memory stays fixed however many calls are made.
	healthBuckets = 30
	// latencySamples bounds the ring of recent latencies the quantiles
	// are read from: at hundreds of calls a second the window's every call
	// would cost megabytes per gateway, and the latest thousand tell the
	// same story.
	latencySamples = 1024
)

type healthBucket struct {
	start                   time.Time
	calls, errors, timeouts int
}

type latencySample struct {
	at      time.Time
	latency time.Duration
}

// healthTracker keeps one gateway's rolling counts and recent latencies.
// Times are real (wall clock): health measures the machine and the
// network, not the billing calendar.
type healthTracker struct {
	now func() time.Time

	mu        sync.Mutex
	buckets   [healthBuckets]healthBucket
	latencies [latencySamples]latencySample
	next      int // where the next latency goes
	total     uint64
	totalTime time.Duration
}

func newHealthTracker(now func() time.Time) *healthTracker {
	return &healthTracker{now: now}
}

// observe records one call that was made, its latency and its error.
func (h *healthTracker) observe(latency time.Duration, err error) {
	now := h.now()
	bucketLen := HealthWindow / healthBuckets
	start := now.Truncate(bucketLen)
	h.mu.Lock()
	defer h.mu.Unlock()
	b := &h.buckets[(start.UnixNano()/int64(bucketLen))%healthBuckets]
	if !b.start.Equal(start) {
		*b = healthBucket{start: start}
	}
	b.calls++
	if errors.Is(err, gateway.ErrUnavailable) || errors.Is(err, gateway.ErrUnknownOutcome) {
		b.errors++
	}
	if errors.Is(err, gateway.ErrUnknownOutcome) {
		b.timeouts++
	}
	h.latencies[h.next] = latencySample{at: now, latency: latency}
	h.next = (h.next + 1) % latencySamples
	h.total++
	h.totalTime += latency
}

// snapshot summarises the window ending now; Circuit is left to the caller.
func (h *healthTracker) snapshot() Health {
	now := h.now()
	from := now.Add(-HealthWindow)
	bucketLen := HealthWindow / healthBuckets
	oldest := now.Truncate(bucketLen).Add(-(healthBuckets - 1) * bucketLen)
	var calls, errs, timeouts int
	recent := make([]time.Duration, 0, 64)
	h.mu.Lock()
	for _, b := range h.buckets {
		if b.calls > 0 && !b.start.Before(oldest) {
			calls += b.calls
			errs += b.errors
			timeouts += b.timeouts
		}
	}
	for _, s := range h.latencies {
		if !s.at.IsZero() && s.at.After(from) {
			recent = append(recent, s.latency)
		}
	}
	out := Health{Calls: calls, CallsSinceStart: h.total, LatencySinceStart: h.totalTime}
	h.mu.Unlock()
	if calls > 0 {
		out.ErrorRate = float64(errs) / float64(calls)
		out.TimeoutRate = float64(timeouts) / float64(calls)
	}
	out.P50, out.P95 = quantile(recent, 0.50), quantile(recent, 0.95)
	return out
}

// quantile is the nearest-rank q-quantile of samples (sorted in place);
// zero when there are none.
func quantile(samples []time.Duration, q float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(q*float64(len(samples))+0.999999) - 1
	return samples[min(max(rank, 0), len(samples)-1)]
}
