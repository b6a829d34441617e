package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/validate"
)

// ReplayedHeader marks a response that was served from the store.
const ReplayedHeader = "Idempotent-Replayed"

// storedHeaders are the response headers kept with a record.
var storedHeaders = []string{"Content-Type", "Location"}

// execution is what the middleware shares with the handler it runs.
type execution struct {
	tx pgx.Tx
	// replayBody, when not nil, is stored in place of the body sent.
	replayBody []byte
	// afterCommit runs once tx has committed.
	afterCommit []func(context.Context)
	// unstored: the response is a refusal that depends on state another
	// request may change; it is neither stored nor replayed.
	unstored bool
	// scope and key name the request: the authenticated client and its
	// Idempotency-Key.
	scope, key string
}

type executionKey struct{}

func executionFrom(ctx context.Context) (*execution, bool) {
	e, ok := ctx.Value(executionKey{}).(*execution)
	return e, ok
}

// Tx returns the transaction the current request executes in: its writes
// commit together with the stored response. ok is false outside the
// middleware (GET requests).
func Tx(ctx context.Context) (pgx.Tx, bool) {
	e, ok := executionFrom(ctx)
	if !ok {
		return nil, false
	}
	return e.tx, true
}

// ReplayBody makes body, instead of the body the handler sends now, what
// the stored record keeps and every replay returns. A response that shows
// a secret once (a new API key) stores a copy without it, so the secret is
// never written to the database and a replay cannot reveal it again. The
// status and stored headers stay those of the response sent. Outside the
// middleware nothing is stored, and ReplayBody does nothing.
func ReplayBody(ctx context.Context, body []byte) {
	if e, ok := executionFrom(ctx); ok {
		e.replayBody = body
	}
}

// Unstored makes the current response a refusal that is not kept under
// the key: the request's transaction is rolled back and nothing is stored,
// so that a retry with the same key is executed afresh. A conflict with
// the current state of another object (an enrollment that already
// exists, and may be cancelled before the retry) is such a refusal: a
// replay would repeat a state that may no longer hold. Outside the
// middleware nothing is stored, and Unstored does nothing.
func Unstored(ctx context.Context) {
	if e, ok := executionFrom(ctx); ok {
		e.unstored = true
	}
}

// AfterCommit runs fn once the request's transaction has committed, for
// work that must see the request's effects and must not happen without
// them (a scan after a dev clock move): not on a rollback, not when another
// request completed the key, not on a replay. Outside the middleware there
// is no transaction to wait for, and fn runs at once.
func AfterCommit(ctx context.Context, fn func(context.Context)) {
	if e, ok := executionFrom(ctx); ok {
		e.afterCommit = append(e.afterCommit, fn)
		return
	}
	fn(ctx)
}

// creationSpace is the namespace of [CreationID]'s name-based UUIDs. It
// never changes: every id derived under it would change with it.
var creationSpace = uuid.MustParse("0e6f3c1a-8d5b-4f2e-b7a9-3c41d2e5f607")

// CreationID is the id of the object of the given kind ("subscription",
// "enrollment", "subscription_change") that the current request creates:
// a UUIDv5 of the authenticated client, the Idempotency-Key and kind, so
// that the same request creates the same id however often it runs. The
// stored response makes a retry a replay while the key's record lives;
// the id covers the case the record does not: a database restored from a
// backup, or a failover that lost its last commits, forgets both the
// object and the record, while the gateway remembers the charge keys
// derived from the object's id, so the client's retry must recreate the
// object under the same id and its charges under the same keys. Outside
// the middleware (no key) it is uuid.Nil: the caller draws a random id,
// and such a creation has no protection against being repeated.
func CreationID(ctx context.Context, kind string) uuid.UUID {
	e, ok := executionFrom(ctx)
	if !ok {
		return uuid.Nil
	}
	return uuid.NewSHA1(creationSpace, []byte(e.scope+"\x00"+e.key+"\x00"+kind))
}

// Problems are the responses the middleware writes itself, supplied by the
// HTTP layer so that every error has its one problem+json shape.
type Problems struct {
	Write          func(w http.ResponseWriter, status int, slug, title, detail string)
	BodyTooLarge   func(w http.ResponseWriter)
	Unavailable    func(w http.ResponseWriter)
	InternalFailed func(w http.ResponseWriter)
}

// Middleware wraps every POST in the idempotency protocol. scope names the
// authenticated client; keys of different clients never meet.
func Middleware(store *Store, scope func(*http.Request) string, problems Problems, log zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				next.ServeHTTP(w, r)
				return
			}
			key, err := validate.IdempotencyKey(r.Header.Values("Idempotency-Key"))
			if errors.Is(err, validate.ErrIdempotencyKeyMissing) {
				problems.Write(w, http.StatusBadRequest, "idempotency-key-missing", "Idempotency-Key required",
					"Every POST needs an Idempotency-Key header.")
				return
			}
			if err != nil {
				problems.Write(w, http.StatusBadRequest, "idempotency-key-invalid", "Invalid Idempotency-Key", err.Error())
				return
			}
			body, err := validate.ReadBody(r.Body)
			if errors.Is(err, validate.ErrBodyTooLarge) {
				problems.BodyTooLarge(w)
				return
			}
			if err != nil {
				problems.Write(w, http.StatusBadRequest, "validation-error", "Unreadable body", "The request body could not be read.")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			client := scope(r)
			ctx := r.Context()

			fingerprint := Fingerprint(r.Method, r.URL.Path, body)
			outcome, stored, claim, err := store.Claim(ctx, client, key, fingerprint)
			if err != nil {
				log.Error().Err(err).Msg("idempotency claim failed")
				problems.Unavailable(w)
				return
			}
			if outcome == Execute {
				rec := execute(r, next, store, claim, client, key, problems, log)
				if rec != nil {
					rec.flush(w)
					return
				}
				// Another request completed the key meanwhile.
				outcome, stored, err = store.Lookup(ctx, client, key, fingerprint)
				if err != nil {
					log.Error().Err(err).Msg("idempotency lookup failed")
					problems.Unavailable(w)
					return
				}
			}
			switch outcome {
			case Replay:
				metrics.IdempotencyReplays.Inc()
				for name, value := range stored.Headers {
					w.Header().Set(name, value)
				}
				w.Header().Set(ReplayedHeader, "true")
				w.WriteHeader(stored.Status)
				_, _ = w.Write(stored.Body)
			case Mismatch:
				metrics.IdempotencyMismatches.Inc()
				problems.Write(w, http.StatusUnprocessableEntity, "idempotency-key-mismatch", "Idempotency-Key reused",
					"This Idempotency-Key was used for a different request (method, path or body).")
			default:
				metrics.IdempotencyConflicts.Inc()
				w.Header().Set("Retry-After", "1")
				problems.Write(w, http.StatusConflict, "idempotency-key-in-use", "Request in progress",
					"A request with this Idempotency-Key is still being processed; retry shortly.")
			}
		})
	}
}

// execute runs the handler in the claim's transaction and either commits
// its response with its effects or rolls both back, storing nothing. It
// returns the response to send, or nil when another request completed the
// key meanwhile.
func execute(r *http.Request, next http.Handler, store *Store, claim *Claim, scope, key string, problems Problems, log zerolog.Logger) *recorder {
	ctx := r.Context()
	exec := &execution{tx: claim.Tx(), scope: scope, key: key}
	r = r.WithContext(context.WithValue(ctx, executionKey{}, exec))
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	defer claim.Rollback(ctx) // a panic; nothing once the claim has ended
	next.ServeHTTP(rec, r)

	if !stored(rec.status) || exec.unstored {
		claim.Rollback(ctx)
		// A refusal that is not stored may be the trace of a duplicate
		// that committed between this claim's look and its lock (an
		// enrollment found to exist, a creation id taken): when the key
		// is completed by now, that is the answer, not the refusal.
		if rec.status >= 400 {
			if outcome, _, err := store.Lookup(ctx, scope, key, claim.fingerprint); err == nil && outcome != InFlight {
				return nil
			}
		}
		return rec
	}
	record := Record{Status: rec.status, Headers: map[string]string{}, Body: rec.body.Bytes()}
	if exec.replayBody != nil {
		record.Body = exec.replayBody
	}
	for _, name := range storedHeaders {
		if v := rec.header.Get(name); v != "" {
			record.Headers[name] = v
		}
	}
	err := store.Complete(ctx, claim, record)
	if errors.Is(err, ErrCompletedElsewhere) {
		return nil
	}
	if err != nil {
		// Whether the commit landed may be unknown: a retry finds the
		// stored response if it did and executes afresh if it did not.
		log.Error().Err(err).Msg("storing idempotent response failed")
		return failure(problems.InternalFailed)
	}
	for _, fn := range exec.afterCommit {
		fn(context.WithoutCancel(ctx))
	}
	return rec
}

// failure records what write would send.
func failure(write func(w http.ResponseWriter)) *recorder {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	write(rec)
	return rec
}

// stored reports whether a response is a result of execution (kept and
// replayed) rather than a refusal before execution or a failure.
func stored(status int) bool {
	return status < 300 || status == http.StatusPaymentRequired || status == http.StatusConflict
}

// recorder buffers the handler's response until its fate is decided.
type recorder struct {
	header      http.Header
	status      int
	body        bytes.Buffer
	wroteHeader bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wroteHeader {
		r.status = status
		r.wroteHeader = true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

func (r *recorder) flush(w http.ResponseWriter) {
	for name, values := range r.header {
		w.Header()[name] = values
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}
