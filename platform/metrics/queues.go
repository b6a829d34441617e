package metrics

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rebill/rebill/platform/pg"
)

// riverStates are the states of a job that is not finished.
var riverStates = []string{"available", "scheduled", "retryable", "running"}

type queueState struct{ queue, state string }

// sampled remembers the queues of the last sample, so that one that empties
// drops to 0 instead of keeping its last figures.
var sampled struct {
	sync.Mutex
	queues []string
}

// SampleQueues sets RiverJobs and RiverQueueLag from river_job once. River
// keeps its queue in the database, not in the process, so every node
// reports the same figures: dashboards and alerts take their max. Each
// queue of queues gets a series even while empty, so that an alert sees 0
// rather than nothing.
func SampleQueues(ctx context.Context, db pg.DBTX, queues []string) error {
	rows, err := db.Query(ctx, `SELECT queue, state::text, count(*),
		extract(epoch FROM now() - min(scheduled_at))::float8
		FROM river_job WHERE state = ANY($1::river_job_state[]) GROUP BY queue, state`, riverStates)
	if err != nil {
		return fmt.Errorf("sample River queues: %w", err)
	}
	counts := map[queueState]float64{}
	lags := map[string]float64{}
	sampled.Lock()
	defer sampled.Unlock()
	for _, q := range slices.Concat(queues, sampled.queues) {
		lags[q] = 0
		for _, s := range riverStates {
			counts[queueState{q, s}] = 0
		}
	}
	for rows.Next() {
		var k queueState
		var n int64
		var lag float64
		if err := rows.Scan(&k.queue, &k.state, &n, &lag); err != nil {
			rows.Close()
			return fmt.Errorf("sample River queues: %w", err)
		}
		counts[k] = float64(n)
		if k.state == "available" {
			lags[k.queue] = max(lag, 0)
		} else if _, ok := lags[k.queue]; !ok {
			lags[k.queue] = 0
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sample River queues: %w", err)
	}
	for k, n := range counts {
		RiverJobs.WithLabelValues(k.queue, k.state).Set(n)
	}
	sampled.queues = sampled.queues[:0]
	for q, lag := range lags {
		RiverQueueLag.WithLabelValues(q).Set(lag)
		sampled.queues = append(sampled.queues, q)
	}
	return nil
}

// SampleQueuesEvery runs SampleQueues every interval until ctx ends,
// passing each failure to onError (a sample that fails leaves the last
// figures in place).
func SampleQueuesEvery(ctx context.Context, db pg.DBTX, queues []string, interval time.Duration, onError func(error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		sampleCtx, cancel := context.WithTimeout(ctx, interval)
		if err := SampleQueues(sampleCtx, db, queues); err != nil && ctx.Err() == nil {
			onError(err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
