package notify_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

type deliveryBundle struct {
	pool     *pgxpool.Pool
	recorder *notify.Recorder
	webhooks *notify.Webhooks
}

// startDeliveries runs a River client with the delivery worker on the
// test's database. allowPrivate false is production's policy.
func startDeliveries(t *testing.T, allowPrivate bool, tweak ...func(*notify.DeliverWorker)) deliveryBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	keys, err := secrets.NewKeyring(testKey)
	require.NoError(t, err)
	policy := notify.URLPolicy{AllowPrivate: allowPrivate}
	workers := river.NewWorkers()
	worker := notify.NewDeliverWorker(pool, keys, policy, 100*time.Millisecond)
	for _, fn := range tweak {
		fn(worker)
	}
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{notify.Queue: {MaxWorkers: 4}},
		Workers:           workers,
		Logger:            slog.New(slog.DiscardHandler),
		FetchPollInterval: 50 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})
	clk := testsupport.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	return deliveryBundle{pool: pool, recorder: &notify.Recorder{Enqueue: client},
		webhooks: &notify.Webhooks{Pool: pool, Keys: keys, Policy: policy, Clock: clk, Enqueue: client}}
}

func (b deliveryBundle) endpoint(t *testing.T, url string, events ...string) (uuid.UUID, string) {
	t.Helper()
	var id uuid.UUID
	var secret string
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		ep, s, err := b.webhooks.Create(context.Background(), tx, url, events, "")
		id, secret = ep.ID, s
		return err
	}))
	return id, secret
}

func (b deliveryBundle) publish(t *testing.T, typ string) uuid.UUID {
	t.Helper()
	object := uuid.New()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := b.recorder.Record(context.Background(), tx, typ, object, nil, "cust-1",
			map[string]any{"id": object, "status": "succeeded"}, time.Now(), "")
		return err
	}))
	return object
}

type received struct {
	eventID, signature string
	body               []byte
}

type receiver struct {
	mu    sync.Mutex
	got   []received
	reply func(n int) int // status for the nth request (1-based)
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, received{r.Header.Get("Rebill-Event-Id"), r.Header.Get("Rebill-Signature"), body})
	n := len(rc.got)
	rc.mu.Unlock()
	w.WriteHeader(rc.reply(n))
	_, _ = w.Write([]byte(strings.Repeat("x", 5000))) // more than is kept
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// A receiver that answers 500 twice gets the event a third time with the
// same id and a valid signature; the log shows three attempts.
func TestDeliveryRetriedUntilDelivered(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	rc := &receiver{reply: func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	endpoint, secret := b.endpoint(t, srv.URL+"/hook", "charge.succeeded")
	b.publish(t, "charge.declined") // not subscribed: never sent
	b.publish(t, "charge.succeeded")

	require.Eventually(t, func() bool { return len(rc.requests()) >= 3 }, 20*time.Second, 20*time.Millisecond)
	got := rc.requests()
	require.Len(t, got, 3)
	for _, r := range got {
		require.Equal(t, got[0].eventID, r.eventID)
		require.Equal(t, got[0].body, r.body)
		require.NoError(t, notify.Verify(secret, r.signature, r.body, time.Now(), 5*time.Minute))
		require.ErrorIs(t, notify.Verify(secret, r.signature, append([]byte(" "), r.body...), time.Now(), 5*time.Minute),
			notify.ErrSignatureMismatch)
	}
	require.Contains(t, string(got[0].body), `"type":"charge.succeeded"`)
	require.Contains(t, string(got[0].body), `"id":"`+got[0].eventID+`"`)

	var attempts []notify.Attempt
	require.Eventually(t, func() bool {
		var err error
		attempts, err = b.webhooks.Attempts(context.Background(), endpoint, 0, 10)
		require.NoError(t, err)
		return len(attempts) == 3
	}, 5*time.Second, 20*time.Millisecond)
	// Newest first.
	require.Equal(t, "delivered", attempts[0].Outcome)
	require.Equal(t, 204, *attempts[0].StatusCode)
	require.Nil(t, attempts[0].NextAttemptAt)
	for i, a := range attempts[1:] {
		require.Equal(t, "retrying", a.Outcome)
		require.Equal(t, 500, *a.StatusCode)
		require.Equal(t, 2-i, a.Attempt)
		require.NotNil(t, a.NextAttemptAt)
		require.LessOrEqual(t, len(a.Error), len("HTTP 500: ")+1024)
	}
}

// A receiver that hangs does not delay another endpoint's deliveries.
func TestHangingReceiverDelaysNoOther(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hanging.Close() })
	rc := &receiver{reply: func(int) int { return http.StatusOK }}
	fast := httptest.NewServer(rc)
	t.Cleanup(fast.Close)
	b.endpoint(t, hanging.URL, "*")
	b.endpoint(t, fast.URL, "*")

	// More deliveries to the hanging endpoint than the queue has workers
	// (4): at most 2 of them take a worker at a time.
	start := time.Now()
	for range 6 {
		b.publish(t, "charge.succeeded")
	}
	require.Eventually(t, func() bool { return len(rc.requests()) == 6 }, 5*time.Second, 10*time.Millisecond)
	require.Less(t, time.Since(start), 5*time.Second)
}

// Outside dev mode a delivery does not connect to a loopback address,
// even when the endpoint's host passed the check at creation (DNS
// rebinding): the dialled address is checked.
func TestDeliveryRefusesPrivateAddressAfterResolution(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, false)
	rc := &receiver{reply: func(int) int { return http.StatusOK }}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	// Stored as if the name had resolved to a public address at creation.
	keys, err := secrets.NewKeyring(testKey)
	require.NoError(t, err)
	id := uuid.New()
	_, err = b.pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, url, events, status, secret, created_at, updated_at)
		VALUES ($1, $2, '{*}', 'enabled', $3, now(), now())`, id, "http://localhost:"+port+"/hook", keys.Encrypt([]byte("whsec_x"), id[:]))
	require.NoError(t, err)
	b.publish(t, "charge.succeeded")

	// Refused by the policy: failed at once, not retried for three days.
	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE kind = 'webhook_deliver'`).Scan(&state)
		return err == nil && state == "cancelled"
	}, 10*time.Second, 20*time.Millisecond)
	attempts, err := b.webhooks.Attempts(context.Background(), id, 0, 10)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, notify.OutcomeAddressRefused, attempts[0].Outcome)
	require.Contains(t, attempts[0].Error, "not a public")
	require.Nil(t, attempts[0].NextAttemptAt)
	require.Empty(t, rc.requests())

	// And creation refuses loopback names and addresses.
	for _, url := range []string{"https://localhost:" + port, "https://127.0.0.1:" + port, srv.URL} {
		require.Error(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			_, _, err := b.webhooks.Create(context.Background(), tx, url, []string{"*"}, "")
			return err
		}), url)
	}
}

// A delivery to an endpoint stored with a zoned address (as an endpoint
// created before the policy knew zones would be) does not connect: the
// dial-time check refuses the zone though the kernel would reach ::1.
func TestDeliveryRefusesZonedAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	b := startDeliveries(t, false)
	rc := &receiver{reply: func(int) int { return http.StatusOK }}
	srv := httptest.NewUnstartedServer(rc)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	keys, err := secrets.NewKeyring(testKey)
	require.NoError(t, err)
	id := uuid.New()
	url := fmt.Sprintf("http://[::1%%25lo]:%d/hook", ln.Addr().(*net.TCPAddr).Port)
	_, err = b.pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, url, events, status, secret, created_at, updated_at)
		VALUES ($1, $2, '{*}', 'enabled', $3, now(), now())`, id, url, keys.Encrypt([]byte("whsec_x"), id[:]))
	require.NoError(t, err)
	b.publish(t, "charge.succeeded")

	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE kind = 'webhook_deliver'`).Scan(&state)
		return err == nil && state == "cancelled"
	}, 10*time.Second, 20*time.Millisecond)
	attempts, err := b.webhooks.Attempts(context.Background(), id, 0, 10)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, notify.OutcomeAddressRefused, attempts[0].Outcome)
	require.Contains(t, attempts[0].Error, "zone")
	require.Empty(t, rc.requests())
}

// The signature's test vector in docs/webhooks.md.
func TestSignatureVector(t *testing.T) {
	t.Parallel()
	secret := "whsec_0123456789abcdef0123456789abcdef0123456789abcdef"
	body := []byte(`{"id":"evt_0192f3a4-5b6c-7d8e-9f01-23456789abcd","type":"charge.succeeded"}`)
	at := time.Unix(1796112000, 0)
	header := notify.Sign(secret, at, body)
	require.Equal(t, "t=1796112000,v1=3497f791e9e30bc95a084e226573355590ace65e250c7a3d7a9c6a70c824b852", header)
	require.NoError(t, notify.Verify(secret, header, body, at.Add(time.Minute), 5*time.Minute))
	require.ErrorIs(t, notify.Verify(secret, header, body, at.Add(time.Hour), 5*time.Minute), notify.ErrSignatureTooOld)
	require.ErrorIs(t, notify.Verify("whsec_other", header, body, at, 0), notify.ErrSignatureMismatch)
	require.ErrorIs(t, notify.Verify(secret, "v1=00", body, at, 0), notify.ErrBadSignatureHeader)
}

// A redirect is not followed: it is a failed attempt, retried later.
func TestDeliveryFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true)
	target := &receiver{reply: func(int) int { return http.StatusOK }}
	targetSrv := httptest.NewServer(target)
	t.Cleanup(targetSrv.Close)
	redirecting := httptest.NewServer(http.RedirectHandler(targetSrv.URL, http.StatusFound))
	t.Cleanup(redirecting.Close)
	endpoint, _ := b.endpoint(t, redirecting.URL, "*")
	b.publish(t, "charge.succeeded")
	require.Eventually(t, func() bool {
		attempts, err := b.webhooks.Attempts(context.Background(), endpoint, 0, 10)
		require.NoError(t, err)
		return len(attempts) > 0 && attempts[len(attempts)-1].StatusCode != nil &&
			*attempts[len(attempts)-1].StatusCode == http.StatusFound && attempts[len(attempts)-1].Outcome == "retrying"
	}, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, target.requests())
}

// After three days of failures the delivery is marked failed and River
// stops retrying it.
func TestDeliveryFailsAfterThreeDays(t *testing.T) {
	t.Parallel()
	b := startDeliveries(t, true, func(w *notify.DeliverWorker) {
		w.Now = func() time.Time { return time.Now().Add(notify.GiveUpAfter) } // the delivery was queued 3 days ago
	})
	rc := &receiver{reply: func(int) int { return http.StatusServiceUnavailable }}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	endpoint, _ := b.endpoint(t, srv.URL, "*")
	b.publish(t, "charge.succeeded")
	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE kind = 'webhook_deliver'`).Scan(&state)
		return err == nil && state == "cancelled"
	}, 10*time.Second, 20*time.Millisecond)
	attempts, err := b.webhooks.Attempts(context.Background(), endpoint, 0, 10)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, "failed", attempts[0].Outcome)
	require.Nil(t, attempts[0].NextAttemptAt)
	require.Equal(t, 503, *attempts[0].StatusCode)
}

// Retries wait about RetryBase, then 5x longer each time, capped at an
// hour, with ±20 % jitter.
func TestDeliveryBackoff(t *testing.T) {
	t.Parallel()
	w := &notify.DeliverWorker{RetryBase: 5 * time.Second}
	for attempt, want := range map[int]time.Duration{1: 5 * time.Second, 2: 25 * time.Second, 3: 125 * time.Second,
		4: 625 * time.Second, 5: 3125 * time.Second, 6: time.Hour, 40: time.Hour} {
		for job := int64(1); job < 50; job++ {
			got := w.Backoff(job, attempt)
			require.GreaterOrEqual(t, got, time.Duration(float64(want)*0.8), "attempt %d", attempt)
			require.LessOrEqual(t, got, time.Duration(float64(want)*1.2), "attempt %d", attempt)
			require.Equal(t, got, w.Backoff(job, attempt), "the same wait for the same job and attempt")
		}
	}
}
