// Package startup retries the steps of a node's start that talk to the
// database. A node that starts while PostgreSQL restarts or fails over
// would otherwise exit on the first refused or terminated connection and
// wait for a supervisor to start it again; instead each step is tried
// again with backoff for a bounded time, and errors that no wait can cure
// (a wrong password, a missing database, a bad migration) stop it at once.
package startup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// Backoff between tries: quick at first (a failover often completes in a
// second or two), then no more than every few seconds so that a node
// waiting out a long restart neither floods the log nor the server.
const (
	firstWait = 250 * time.Millisecond
	maxWait   = 5 * time.Second
)

// transientCodes are the SQLSTATEs of a server that is going away or not
// ready yet, or briefly out of room: the same request succeeds later.
// Class 08 (connection exception) is transient as a whole.
var transientCodes = map[string]bool{
	"57P01": true, // admin_shutdown: terminating connection due to administrator command
	"57P02": true, // crash_shutdown
	"57P03": true, // cannot_connect_now: the database system is starting up
	"53300": true, // too_many_connections
	"40001": true, // serialization_failure
	"40P01": true, // deadlock_detected
}

// Transient reports whether err comes from a database that is restarting,
// failing over or momentarily full, rather than from a mistake that a
// retry would only repeat. An error the server sent decides by its
// SQLSTATE; one without (the connection could not be made or broke) is
// transient when it is a refusal, a reset, an early end of the stream or
// a timeout.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientCodes[pgErr.Code] || len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		// The server said nothing (no PgError above): the dial or the
		// handshake failed, which is what a server being replaced does.
		return true
	}
	for _, target := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE, io.EOF, io.ErrUnexpectedEOF} {
		if errors.Is(err, target) {
			return true
		}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// Retry runs step until it succeeds, fails with an error that is not
// [Transient], or bound has passed; 0 tries once. Each failed try that is
// retried is logged with the step's name; the error of the last try is
// returned with the step's name and, when the bound ran out, how long and
// how often it was tried.
func Retry(ctx context.Context, log zerolog.Logger, bound time.Duration, name string, step func() error) error {
	tries := 0
	started := time.Now()
	opts := []backoff.RetryOption{
		backoff.WithBackOff(&backoff.ExponentialBackOff{InitialInterval: firstWait, RandomizationFactor: 0.2,
			Multiplier: 2, MaxInterval: maxWait}),
		backoff.WithNotify(func(err error, next time.Duration) {
			log.Warn().Err(err).Str("step", name).Int("try", tries).Dur("retry_in", next).
				Dur("retry_for", bound).Dur("elapsed", time.Since(started)).
				Msg("start-up step failed on a transient database error; trying again")
		}),
	}
	if bound > 0 {
		opts = append(opts, backoff.WithMaxElapsedTime(bound))
	} else {
		opts = append(opts, backoff.WithMaxTries(1))
	}
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		tries++
		last = step()
		if last != nil && !Transient(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, opts...)
	switch {
	case err == nil:
		if tries > 1 {
			log.Info().Str("step", name).Int("tries", tries).Dur("elapsed", time.Since(started)).
				Msg("start-up step succeeded after transient database errors")
		}
		return nil
	case !Transient(last):
		return fmt.Errorf("%s: %w", name, last)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: stopped after %d tries in %s: %w", name, tries, time.Since(started).Round(time.Millisecond),
			errors.Join(context.Cause(ctx), last))
	case bound == 0:
		return fmt.Errorf("%s: %w (not retried: REBILL_STARTUP_RETRY_FOR is 0)", name, last)
	}
	return fmt.Errorf("%s: the database was still unavailable after %d tries in %s (REBILL_STARTUP_RETRY_FOR=%s): %w",
		name, tries, time.Since(started).Round(time.Millisecond), bound, last)
}
