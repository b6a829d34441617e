package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
)

func TestIdempotencyHeaderIsRequiredAndValidated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := map[string]func(req *http.Request){
		"missing":       func(req *http.Request) {},
		"empty":         func(req *http.Request) { req.Header.Set("Idempotency-Key", "") },
		"too long":      func(req *http.Request) { req.Header.Set("Idempotency-Key", strings.Repeat("k", 256)) },
		"non-printable": func(req *http.Request) { req.Header.Set("Idempotency-Key", "cl\xc3\xa9") },
		"sent twice": func(req *http.Request) {
			req.Header.Add("Idempotency-Key", "a")
			req.Header.Add("Idempotency-Key", "b")
		},
		"empty quoted": func(req *http.Request) { req.Header.Set("Idempotency-Key", `""`) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/subscriptions", strings.NewReader(createBody))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+adminKey)
			mutate(req)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusBadRequest, res.StatusCode)
			require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
		})
	}
	require.Zero(t, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "idempotency_keys"))
}

func TestReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "create-1", createBody)
	require.Equal(t, http.StatusCreated, first.status, string(first.body))
	require.Empty(t, first.header.Get("Idempotent-Replayed"))
	require.NotEmpty(t, first.header.Get("Location"))

	// Key order and whitespace do not change the fingerprint; the quoted
	// structured-field form is the same key.
	reordered := `{"payment_method":{"exp_year":2030,"exp_month":12,"last4":"4242","brand":"visa","token":"tok_ok_visa","gateway":"sim1"},
		"metadata":{"k":"v"},"description":"Gym, monthly","timezone":"Europe/Moscow","interval":"month","currency":"RUB",
		"amount":49900,   "customer_id":"cust-42"}`
	for _, key := range []string{"create-1", `"create-1"`} {
		again := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, key, reordered)
		require.Equal(t, first.status, again.status)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))
		require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
	}
	require.Equal(t, 1, b.count(t, "subscriptions"))
}

func TestConcurrentIdenticalRequestsCreateOneSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 50
	statuses := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "same-key", createBody)
			statuses[i] = res.status
			if res.status == http.StatusConflict {
				require.Equal(t, "1", res.header.Get("Retry-After"))
			}
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, s)
		if s == http.StatusCreated {
			created++
		}
	}
	require.GreaterOrEqual(t, created, 1)
	require.Equal(t, 1, b.count(t, "subscriptions"))
	require.Equal(t, 1, b.count(t, "subscription_events"))
}

func TestDifferentRequestSameKeyIs422AndLeavesRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "k", createBody)
	require.Equal(t, http.StatusCreated, first.status)
	var before []byte
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT response_body FROM idempotency_keys`).Scan(&before))

	other := strings.Replace(createBody, "49900", "50000", 1)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "k", other)
	require.Equal(t, http.StatusUnprocessableEntity, res.status)
	require.Contains(t, res.json(t)["type"], "idempotency-key-mismatch")

	id := first.json(t)["id"].(string)
	res = b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/pause", adminKey, "k", `{}`)
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "another path with the same key")

	var after []byte
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT response_body FROM idempotency_keys`).Scan(&after))
	require.Equal(t, before, after)
	require.Equal(t, 1, b.count(t, "subscriptions"))
	replay := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "k", createBody)
	require.Equal(t, first.body, replay.body)
}

func TestSameKeyDifferentClientsAreIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	support := b.newKey(t, "support", "")
	a := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "shared", createBody)
	s := b.do(t, http.MethodPost, "/v1/subscriptions", support, "shared", createBody)
	require.Equal(t, http.StatusCreated, a.status)
	require.Equal(t, http.StatusCreated, s.status)
	require.Empty(t, s.header.Get("Idempotent-Replayed"))
	require.NotEqual(t, a.json(t)["id"], s.json(t)["id"])
	require.Equal(t, 2, b.count(t, "subscriptions"))
}

func TestRefusedRequestsAreNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := strings.Replace(createBody, `"RUB"`, `"XYZ"`, 1)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "fix-me", bad)
	require.Equal(t, http.StatusBadRequest, res.status)
	res = b.do(t, http.MethodPost, "/v1/subscriptions", "wrong-key", "fix-me", createBody)
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Zero(t, b.count(t, "idempotency_keys"))

	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "fix-me", createBody)
	require.Equal(t, http.StatusCreated, res.status, "the corrected request executes")
	require.Empty(t, res.header.Get("Idempotent-Replayed"))
}

func TestBusinessOutcomeIsStoredAndReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "c", createBody).json(t)["id"].(string)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/cancel", adminKey, "x", `{}`).status)

	first := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/resume", adminKey, "resume-1", `{}`)
	require.Equal(t, http.StatusConflict, first.status)
	require.True(t, strings.HasSuffix(first.json(t)["type"].(string), "invalid-transition"))
	again := b.do(t, http.MethodPost, "/v1/subscriptions/"+id+"/resume", adminKey, "resume-1", `{}`)
	require.Equal(t, http.StatusConflict, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, again.body)
}

// A request of the former protocol (a node not yet upgraded in a rolling
// deploy) that reserved its key and then died holds the key until the
// lease expires; a retry then takes it over and executes exactly once.
func TestCrashedRequestIsRetriedAfterLease(t *testing.T) {
	t.Parallel()
	const lease = time.Minute
	b := setup(t, setupOpts{lease: lease})
	fingerprint := idempotency.Fingerprint(http.MethodPost, "/v1/subscriptions", []byte(createBody))

	// The crashed request: reserved, began its transaction, wrote, died.
	b.formerReserve(t, "key:bootstrap-admin", "crash", fingerprint, lease)

	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "crash", createBody)
	require.Equal(t, http.StatusConflict, res.status, "within the lease the key is still held")

	b.expireLease(t, "crash")
	res = b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "crash", createBody)
	require.Equal(t, http.StatusCreated, res.status, string(res.body))
	res2 := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "crash", createBody)
	require.Equal(t, "true", res2.header.Get("Idempotent-Replayed"))
	require.Equal(t, 1, b.count(t, "subscriptions"))
}

// A request of the former protocol whose lease expired while it was in
// fact still running must not run twice: the retry waits for its row lock
// and then replays.
func TestExpiredLeaseOfLiveRequestDoesNotRunTwice(t *testing.T) {
	t.Parallel()
	const lease = 200 * time.Millisecond
	b := setup(t, setupOpts{lease: lease})
	scope, key := "key:bootstrap-admin", "slow"
	fingerprint := idempotency.Fingerprint(http.MethodPost, "/v1/subscriptions", []byte(createBody))
	b.formerReserve(t, scope, key, fingerprint, lease)
	tx, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The slow request is about to finish: it has stored its response
	// (and holds the record's lock) but not committed yet.
	require.EqualValues(t, 1, formerComplete(t, tx, scope, key, `{"slow":true}`))

	// The lease runs out on the database's clock while the request is
	// still running.
	require.Eventually(t, func() bool {
		var expired bool
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT locked_until <= now() FROM idempotency_keys
			WHERE principal = $1 AND key = $2`, scope, key).Scan(&expired))
		return expired
	}, 10*time.Second, 10*time.Millisecond, "the lease expires")
	done := make(chan response, 1)
	go func() { done <- b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, key, createBody) }()
	// The retry takes the expired lease over and waits for the record's
	// row lock, which the slow request holds until it commits.
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the retry waits for the row lock")
	require.NoError(t, tx.Commit(context.Background()))

	res := <-done
	require.Equal(t, http.StatusCreated, res.status)
	require.Equal(t, `{"slow":true}`, string(res.body))
	require.Equal(t, "true", res.header.Get("Idempotent-Replayed"))
	require.Zero(t, b.count(t, "subscriptions"))
}

func TestStoreUnreachableIs503(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := setup(t, setupOpts{lease: time.Minute, pool: pool})
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "k", createBody)
	require.Equal(t, http.StatusServiceUnavailable, res.status)
	require.NotEmpty(t, res.header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", res.header.Get("Content-Type"))
}

func TestGetIgnoresIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodGet, "/v1/subscriptions", adminKey, "whatever", "")
	require.Equal(t, http.StatusOK, res.status)
	require.Zero(t, b.count(t, "idempotency_keys"))
}

func TestExpiredRecordsAreDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "old", createBody).status)
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, "new", createBodyFor("cust-42")).status)
	_, err := b.pool.Exec(context.Background(), `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'old'`)
	require.NoError(t, err)
	n, err := idempotency.NewStore(b.pool, time.Minute).DeleteExpired(context.Background(), 24*time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 1, b.count(t, "idempotency_keys"))
}

// The other order: the retry takes over the expired lease of a former
// protocol's request and completes first; the slow original then finds the
// key completed and rolls back.
func TestSlowOriginalLosesToCompletedRetry(t *testing.T) {
	t.Parallel()
	const lease = time.Minute
	b := setup(t, setupOpts{lease: lease})
	scope, key := "key:bootstrap-admin", "slow-loses"
	fingerprint := idempotency.Fingerprint(http.MethodPost, "/v1/subscriptions", []byte(createBody))
	b.formerReserve(t, scope, key, fingerprint, lease)
	slow, err := b.pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = slow.Exec(context.Background(), `INSERT INTO api_keys (id, key_hash, role) VALUES (gen_random_uuid(), 'x', 'admin')`)
	require.NoError(t, err)

	b.expireLease(t, key)
	res := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, key, createBody)
	require.Equal(t, http.StatusCreated, res.status)

	require.Zero(t, formerComplete(t, slow, scope, key, `{}`), "the slow request finds the key completed")
	require.NoError(t, slow.Rollback(context.Background()))
	require.Equal(t, 1, b.count(t, "subscriptions"))
	require.Zero(t, b.count(t, "api_keys"), "the slow request's effect was rolled back")
	replay := b.do(t, http.MethodPost, "/v1/subscriptions", adminKey, key, createBody)
	require.Equal(t, res.body, replay.body)
}

// expireLease backdates the lease of an idempotency key, as if its request
// had been silent for longer than the lease: no test waits for a lease.
func (b testBundle) expireLease(t *testing.T, key string) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(),
		`UPDATE idempotency_keys SET locked_until = now() - interval '1 second' WHERE key = $1`, key)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// formerReserve writes what a node of the former protocol wrote, in a
// commit of its own, before running a request: a processing record whose
// lease expires after lease.
func (b testBundle) formerReserve(t *testing.T, scope, key string, fingerprint []byte, lease time.Duration) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), `INSERT INTO idempotency_keys (principal, key, fingerprint, status, locked_until)
		VALUES ($1, $2, $3, 'processing', now() + $4::interval)`, scope, key, fingerprint, lease)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// formerComplete is the former protocol's completion of its record in the
// request's transaction; it returns how many records it completed (0: the
// key was completed by another request).
func formerComplete(t *testing.T, tx pgx.Tx, scope, key, body string) int64 {
	t.Helper()
	tag, err := tx.Exec(context.Background(), `UPDATE idempotency_keys SET status = 'completed', response_status = 201,
			response_headers = '{"Content-Type":"application/json"}', response_body = $3
		WHERE principal = $1 AND key = $2 AND status = 'processing'`, scope, key, []byte(body))
	require.NoError(t, err)
	return tag.RowsAffected()
}
