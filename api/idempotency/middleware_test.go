package idempotency_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/idempotency"
	"github.com/rebill/rebill/testkit/dbtest"
)

// A handler that fails (5xx) leaves nothing behind: its writes roll back,
// no record is stored under the key, and a retry with the same key
// executes at once.
func TestFailedHandlerStoresNothingAndRetryExecutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE effects (n int)`)
	require.NoError(t, err)

	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idempotency.Tx(r.Context())
		require.True(t, ok)
		n := runs.Add(1)
		if _, err := tx.Exec(r.Context(), `INSERT INTO effects (n) VALUES ($1)`, n); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError) // the first attempt fails after writing
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	problems := idempotency.Problems{
		Write: func(w http.ResponseWriter, status int, slug, _, _ string) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(slug))
		},
		BodyTooLarge:   func(w http.ResponseWriter) { w.WriteHeader(http.StatusRequestEntityTooLarge) },
		Unavailable:    func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		InternalFailed: func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
	}
	mw := idempotency.Middleware(idempotency.NewStore(pool, time.Minute),
		func(*http.Request) string { return "client" }, problems, zerolog.Nop())(handler)
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/things", bytes.NewBufferString(`{}`))
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		return rec
	}
	count := func(q string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, q).Scan(&n))
		return n
	}

	require.Equal(t, http.StatusInternalServerError, post().Code)
	require.Zero(t, count(`SELECT count(*) FROM idempotency_keys`), "a failure stores no key")
	require.Zero(t, count(`SELECT count(*) FROM effects`), "its writes rolled back")

	retry := post()
	require.Equal(t, http.StatusCreated, retry.Code, "the retry executes at once")
	require.Empty(t, retry.Header().Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 2, runs.Load())

	replay := post()
	require.Equal(t, http.StatusCreated, replay.Code)
	require.Equal(t, "true", replay.Header().Get(idempotency.ReplayedHeader))
	require.Equal(t, `{"ok":true}`, replay.Body.String())
	require.EqualValues(t, 2, runs.Load(), "a replay does not run the handler")
	require.Equal(t, 1, count(`SELECT count(*) FROM effects`))
	require.Equal(t, 1, count(`SELECT count(*) FROM idempotency_keys WHERE status = 'completed'`))
}

// A creation's id is derived from the client, the key and the kind of
// object: the request executed again once its record is gone (a database
// restored to before it) creates under the id it created under before;
// another key, another client or another kind is another id; outside the
// middleware there is none.
func TestCreationIDIsTheRequestsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	var got []uuid.UUID
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, idempotency.CreationID(r.Context(), "subscription"), idempotency.CreationID(r.Context(), "enrollment"))
		w.WriteHeader(http.StatusCreated)
	})
	problems := idempotency.Problems{
		Write:          func(w http.ResponseWriter, status int, _, _, _ string) { w.WriteHeader(status) },
		BodyTooLarge:   func(w http.ResponseWriter) { w.WriteHeader(http.StatusRequestEntityTooLarge) },
		Unavailable:    func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		InternalFailed: func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
	}
	mw := idempotency.Middleware(idempotency.NewStore(pool, time.Minute),
		func(r *http.Request) string { return r.Header.Get("X-Client") }, problems, zerolog.Nop())(handler)
	post := func(client, key string) {
		req := httptest.NewRequest(http.MethodPost, "/things", bytes.NewBufferString(`{}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Client", client)
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		require.Equal(t, http.StatusCreated, rec.Code)
	}

	post("a", "k")
	_, err := pool.Exec(ctx, `DELETE FROM idempotency_keys`) // the restore
	require.NoError(t, err)
	post("a", "k")
	post("a", "k2")
	post("b", "k")
	require.Len(t, got, 8)
	require.Equal(t, got[0], got[2], "the same request creates under the same id")
	require.Equal(t, got[1], got[3])
	require.NotEqual(t, got[0], got[1], "another kind")
	require.NotEqual(t, got[0], got[4], "another key")
	require.NotEqual(t, got[0], got[6], "another client")
	require.Equal(t, uuid.Nil, idempotency.CreationID(ctx, "subscription"), "no key, no derived id")
}

// A duplicate that commits between a request's look at the key and its
// lock leaves the request executing with its effect already made: it
// refuses (the enrollment exists, the creation id is taken) without
// storing the refusal. The key is completed by then, so the request
// answers with the duplicate's stored response, as its duplicate did.
func TestRefusalAfterADuplicateCommittedIsTheDuplicatesAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	body := `{"kind":"fines"}`
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The duplicate commits its record meanwhile, on its own connection.
		_, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, fingerprint, status, locked_until,
				response_status, response_headers, response_body) VALUES ('client', 'k', $1, 'completed', now(), 201, '{}', $2)`,
			idempotency.Fingerprint(http.MethodPost, "/things", []byte(body)), []byte(`{"id":"e1"}`))
		require.NoError(t, err)
		idempotency.Unstored(r.Context())
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`enrollment-exists`))
	})
	problems := idempotency.Problems{
		Write: func(w http.ResponseWriter, status int, slug, _, _ string) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(slug))
		},
		BodyTooLarge:   func(w http.ResponseWriter) { w.WriteHeader(http.StatusRequestEntityTooLarge) },
		Unavailable:    func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) },
		InternalFailed: func(w http.ResponseWriter) { w.WriteHeader(http.StatusInternalServerError) },
	}
	mw := idempotency.Middleware(idempotency.NewStore(pool, time.Minute),
		func(*http.Request) string { return "client" }, problems, zerolog.Nop())(handler)
	req := httptest.NewRequest(http.MethodPost, "/things", bytes.NewBufferString(body))
	req.Header.Set("Idempotency-Key", "k")
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	require.Equal(t, `{"id":"e1"}`, rec.Body.String())
	require.Equal(t, "true", rec.Header().Get(idempotency.ReplayedHeader))
}
