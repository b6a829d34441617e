package notify

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/secrets"
)

// Delivery limits (the OpenAPI document, webhooks).
const (
	DeliveryTimeout  = 10 * time.Second
	GiveUpAfter      = 72 * time.Hour // then the delivery is marked failed
	maxRetryWait     = time.Hour
	retryGrowth      = 5
	maxResponseBytes = 1024
)

// DeliverWorker sends one event to one endpoint, signed, and records the
// attempt. A 2xx is delivered; anything else is retried by River after
// Backoff, on real time, until GiveUpAfter has passed since the delivery
// was queued, then it is marked failed.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	Pool      *pgxpool.Pool
	Keys      *secrets.Keyring
	Policy    URLPolicy
	RetryBase time.Duration // first retry after about this (REBILL_WEBHOOK_RETRY_BASE)
	Now       func() time.Time
	// PerEndpoint bounds this node's concurrent deliveries to one endpoint
	// (default 2): a slow or dead receiver takes at most that many of the
	// queue's workers; its other deliveries wait (snooze, spending no
	// attempt) instead of holding up other endpoints.
	PerEndpoint int
	client      *http.Client

	mu       sync.Mutex
	inFlight map[uuid.UUID]int
}

// acquire takes one of the endpoint's delivery slots on this node.
func (w *DeliverWorker) acquire(id uuid.UUID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := w.PerEndpoint
	if limit <= 0 {
		limit = 2
	}
	if w.inFlight[id] >= limit {
		return false
	}
	if w.inFlight == nil {
		w.inFlight = map[uuid.UUID]int{}
	}
	w.inFlight[id]++
	return true
}

func (w *DeliverWorker) release(id uuid.UUID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[id]--; w.inFlight[id] <= 0 {
		delete(w.inFlight, id)
	}
}

// NewDeliverWorker returns a worker whose HTTP client dials through the
// URL policy, follows no redirect and gives up after DeliveryTimeout.
func NewDeliverWorker(pool *pgxpool.Pool, keys *secrets.Keyring, policy URLPolicy, retryBase time.Duration) *DeliverWorker {
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would dial for us, past the address check
		DialContext:           policy.Dialer().DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: DeliveryTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &DeliverWorker{Pool: pool, Keys: keys, Policy: policy, RetryBase: retryBase, Now: time.Now,
		client: &http.Client{Transport: transport, Timeout: DeliveryTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Timeout bounds a job beyond the request's own timeout.
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return DeliveryTimeout + 5*time.Second
}

// NextRetry is when River runs the job again after a failed attempt.
func (w *DeliverWorker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	return w.Now().Add(w.Backoff(job.ID, job.Attempt))
}

// Backoff is the wait after attempt (1-based) of job: RetryBase, then 5x
// longer each time, capped at an hour, with ±20 % jitter that depends on
// the job and attempt only, so that the time recorded with the attempt is
// the one River uses.
func (w *DeliverWorker) Backoff(jobID int64, attempt int) time.Duration {
	base := w.RetryBase
	if base <= 0 {
		base = 5 * time.Second
	}
	d := base
	for i := 1; i < attempt && d < maxRetryWait; i++ {
		d *= retryGrowth
	}
	d = min(d, maxRetryWait)
	h := fnv.New64a()
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(jobID))
	binary.BigEndian.PutUint64(buf[8:], uint64(attempt))
	_, _ = h.Write(buf[:])
	jitter := float64(h.Sum64()%4001)/10000 - 0.2 // -0.2..+0.2
	return time.Duration(float64(d) * (1 + jitter))
}

// Work delivers once.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	var url, status, sealed string
	var sealedPrevious *string // the secret a roll replaced, while it still signs
	err := w.Pool.QueryRow(ctx, `SELECT url, status, secret,
			CASE WHEN previous_secret_expires_at > now() THEN previous_secret END
		FROM webhook_endpoints WHERE id = $1`, job.Args.EndpointID).
		Scan(&url, &status, &sealed, &sealedPrevious)
	if errors.Is(err, pgx.ErrNoRows) || status == Disabled {
		return nil // gone or disabled: nothing to send
	}
	if err != nil {
		return fmt.Errorf("load endpoint: %w", err)
	}
	if !w.acquire(job.Args.EndpointID) {
		return river.JobSnooze(time.Second)
	}
	defer w.release(job.Args.EndpointID)
	event, err := eventByRowID(ctx, w.Pool, job.Args.EventID)
	if errors.Is(err, ErrNotFound) {
		// The retention deleted it in the instant between a redelivery's
		// check and its commit: there is nothing left to send.
		return river.JobCancel(fmt.Errorf("event %s is no longer kept: %w", FormatID(job.Args.EventID), err))
	}
	if err != nil {
		return fmt.Errorf("load event: %w", err)
	}
	secrets, err := w.openSecrets(job.Args.EndpointID, sealed, sealedPrevious)
	if err != nil {
		// A node without the key that sealed it (REBILL_ENCRYPTION_KEY
		// differs between nodes): nothing can be signed. Shown in the
		// deliveries log; a redelivery from a node with the key sends it.
		err = fmt.Errorf("endpoint secret: %w", err)
		if _, rerr := w.Pool.Exec(ctx, `INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, outcome, error, duration_ms, at)
			VALUES ($1, $2, $3, $6, $4, 0, $5)`, job.Args.EndpointID, job.Args.EventID, job.Attempt, err.Error(), w.Now().UTC(),
			OutcomeFailed); rerr != nil {
			return fmt.Errorf("record delivery attempt: %w", rerr)
		}
		metrics.WebhookDeliveries.WithLabelValues(OutcomeFailed).Inc()
		return river.JobCancel(err)
	}
	body, err := json.Marshal(event.Body())
	if err != nil {
		return river.JobCancel(fmt.Errorf("encode event: %w", err))
	}

	start := w.Now()
	code, sendErr := w.send(ctx, url, secrets, event.PublicID(), body)
	a := Attempt{EventID: event.ID, Attempt: job.Attempt, At: start.UTC(), DurationMS: w.Now().Sub(start).Milliseconds()}
	if code != 0 {
		a.StatusCode = &code
	}
	if sendErr != nil {
		a.Error = sendErr.Error()
	}
	switch {
	case sendErr == nil:
		a.Outcome = OutcomeDelivered
	case errors.Is(sendErr, ErrURLRefused):
		// The address policy does not change in three days: retrying
		// would only hide the refusal. A redelivery (after the host's DNS
		// is fixed) tries again.
		a.Outcome = OutcomeAddressRefused
	case w.Now().Add(w.Backoff(job.ID, job.Attempt)).Sub(job.CreatedAt) > GiveUpAfter:
		a.Outcome = OutcomeFailed
	default:
		a.Outcome = OutcomeRetrying
		next := w.Now().Add(w.Backoff(job.ID, job.Attempt)).UTC()
		a.NextAttemptAt = &next
	}
	if _, err := w.Pool.Exec(ctx, `INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, outcome, status_code, error,
			duration_ms, at, next_attempt_at) VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, $8, $9)`,
		job.Args.EndpointID, a.EventID, a.Attempt, a.Outcome, a.StatusCode, a.Error, a.DurationMS, a.At, a.NextAttemptAt); err != nil {
		return fmt.Errorf("record delivery attempt: %w", err)
	}
	metrics.WebhookDeliveries.WithLabelValues(a.Outcome).Inc()
	metrics.WebhookDeliveryLag.Observe(start.Sub(job.CreatedAt).Seconds())
	switch a.Outcome {
	case OutcomeDelivered:
		return nil
	case OutcomeFailed:
		return river.JobCancel(fmt.Errorf("gave up after %s: %w", GiveUpAfter, sendErr))
	case OutcomeAddressRefused:
		return river.JobCancel(sendErr)
	}
	return sendErr
}

// The outcomes of a delivery attempt, as the deliveries log shows them.
const (
	OutcomeDelivered = "delivered" // a 2xx came back
	OutcomeRetrying  = "retrying"  // it is tried again at next_attempt_at
	OutcomeFailed    = "failed"    // given up: 3 days of failures, or nothing could be signed
	// OutcomeAddressRefused: the host resolved to an address the URL
	// policy refuses; failed at once, not retried.
	OutcomeAddressRefused = "address_refused"
)

// Outcomes lists every outcome: the closed set of
// rebill_webhook_deliveries_total's outcome label.
var Outcomes = []string{OutcomeDelivered, OutcomeRetrying, OutcomeFailed, OutcomeAddressRefused}

// openSecrets opens the endpoint's live secrets, the current one first.
func (w *DeliverWorker) openSecrets(id uuid.UUID, sealed string, sealedPrevious *string) ([]string, error) {
	current, err := w.Keys.Decrypt(sealed, id[:])
	if err != nil {
		return nil, err
	}
	live := []string{string(current)}
	if sealedPrevious != nil {
		previous, err := w.Keys.Decrypt(*sealedPrevious, id[:])
		if err != nil {
			return nil, err
		}
		live = append(live, string(previous))
	}
	return live, nil
}

// send POSTs body and returns the status code (0 without an answer) and
// an error unless it was a 2xx. At most 1 KiB of the answer is read.
func (w *DeliverWorker) send(ctx context.Context, url string, secrets []string, eventID string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, DeliveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "rebill-webhooks/1")
	req.Header.Set(HeaderEventID, eventID)
	req.Header.Set(HeaderSignature, SignAll(secrets, time.Now(), body)) // t is wall-clock time
	res, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	kept, _ := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64*1024)) // let the connection be reused
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		return res.StatusCode, nil
	}
	msg := fmt.Sprintf("HTTP %d", res.StatusCode)
	if text := strings.ReplaceAll(string(bytes.ToValidUTF8(kept, nil)), "\x00", ""); text != "" {
		msg += ": " + text
	}
	return res.StatusCode, errors.New(msg)
}
