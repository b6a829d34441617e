package console

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Failed logins slow down the next attempts from the same address with
// the same key prefix: each failure doubles the wait, from throttleBase
// up to throttleMax, and the count is forgotten throttleForget after the
// last failure. It is a delay, never a lockout: a guesser behind the
// office's proxy slows only logins that share its address and the first
// characters of the key it types, and a right key still gets in. The
// counts live in each node's memory (a guesser spread over nodes gets
// each node's delay), which is enough to make guessing 256-bit keys no
// easier than it already is while keeping a typo cheap.
const (
	throttleBase    = 250 * time.Millisecond
	throttleMax     = 8 * time.Second
	throttleForget  = 15 * time.Minute
	throttlePrefix  = 8 // characters of the typed key that name the bucket ("rbk_" and 4 of the key)
	throttleEntries = 10_000
)

type failures struct {
	count int
	last  time.Time
}

type throttle struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]failures
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, buckets: map[string]failures{}}
}

func bucket(addr, key string) string {
	if len(key) > throttlePrefix {
		key = key[:throttlePrefix]
	}
	return addr + "\x00" + key
}

// delay is how long a login from addr typing key waits first.
func (t *throttle) delay(addr, key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.buckets[bucket(addr, key)]
	if !ok || t.now().Sub(f.last) > throttleForget {
		return 0
	}
	d := throttleBase
	for i := 1; i < f.count && d < throttleMax; i++ {
		d *= 2
	}
	return min(d, throttleMax)
}

func (t *throttle) failed(addr, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.buckets) >= throttleEntries {
		for b, f := range t.buckets {
			if now.Sub(f.last) > throttleForget {
				delete(t.buckets, b)
			}
		}
		if len(t.buckets) >= throttleEntries {
			clear(t.buckets) // a flood of addresses: forget rather than grow
		}
	}
	b := bucket(addr, key)
	f := t.buckets[b]
	if now.Sub(f.last) > throttleForget {
		f.count = 0
	}
	f.count++
	f.last = now
	t.buckets[b] = f
}

func (t *throttle) succeeded(addr, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.buckets, bucket(addr, key))
}

// clientAddr is the client's IP: the last X-Forwarded-For entry (the one
// the operator's proxy added) when the proxy is trusted, else the peer.
func (h *Handler) clientAddr(r *http.Request) string {
	if h.opts.TrustProxy {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			parts := strings.Split(xff[len(xff)-1], ",")
			if last := strings.TrimSpace(parts[len(parts)-1]); last != "" {
				return last
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
