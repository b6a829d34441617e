package startup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/platform/startup"
)

func pgErr(code string) error {
	return fmt.Errorf("start River: %w", &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"})
}

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"administrator command", pgErr("57P01"), true},
		{"crash shutdown", pgErr("57P02"), true},
		{"starting up", pgErr("57P03"), true},
		{"too many connections", pgErr("53300"), true},
		{"connection failure", pgErr("08006"), true},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"cut stream", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"timeout", &net.OpError{Op: "dial", Err: timeoutErr{}}, true},
		{"password", pgErr("28P01"), false},
		{"no database", pgErr("3D000"), false},
		{"bad migration", pgErr("42601"), false},
		{"duplicate object", pgErr("42710"), false},
		{"other", errors.New("gateway sim1 did not answer"), false},
		{"nil", nil, false},
	} {
		require.Equal(t, c.want, startup.Transient(c.err), c.name)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestRetryUntilTheStepSucceeds(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	tries := 0
	err := startup.Retry(context.Background(), zerolog.New(&logs), time.Minute, "migrate", func() error {
		tries++
		if tries < 4 {
			return pgErr("57P01")
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 4, tries)
	// One line per retried try, numbered, naming the step.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 4, logs.String())
	for i, line := range lines[:3] {
		require.Contains(t, line, `"step":"migrate"`)
		require.Contains(t, line, fmt.Sprintf(`"try":%d`, i+1))
		require.Contains(t, line, "57P01")
	}
	require.Contains(t, lines[3], `"tries":4`)
}

func TestRetryStopsAtTheBound(t *testing.T) {
	t.Parallel()
	const bound = 700 * time.Millisecond
	tries := 0
	started := time.Now()
	err := startup.Retry(context.Background(), zerolog.Nop(), bound, "start River", func() error {
		tries++
		return pgErr("57P01")
	})
	elapsed := time.Since(started)
	require.Error(t, err)
	require.LessOrEqual(t, elapsed, bound, "no try starts after the bound")
	require.GreaterOrEqual(t, tries, 2)
	require.ErrorContains(t, err, fmt.Sprintf("start River: the database was still unavailable after %d tries in", tries))
	require.ErrorContains(t, err, "REBILL_STARTUP_RETRY_FOR=700ms")
	var got *pgconn.PgError
	require.ErrorAs(t, err, &got, "the last error stays inspectable")
	require.Equal(t, "57P01", got.Code)
}

func TestRetryDoesNotRetryPermanentErrors(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	tries := 0
	err := startup.Retry(context.Background(), zerolog.New(&logs), time.Minute, "connect", func() error {
		tries++
		return pgErr("28P01")
	})
	require.Equal(t, 1, tries)
	require.ErrorContains(t, err, "connect: start River: FATAL: m (SQLSTATE 28P01)")
	require.NotContains(t, err.Error(), "unavailable")
	require.Empty(t, logs.String())
}

func TestRetryZeroBoundTriesOnce(t *testing.T) {
	t.Parallel()
	tries := 0
	err := startup.Retry(context.Background(), zerolog.Nop(), 0, "connect", func() error {
		tries++
		return pgErr("57P03")
	})
	require.Equal(t, 1, tries)
	require.ErrorContains(t, err, "REBILL_STARTUP_RETRY_FOR is 0")
}

func TestRetryStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	err := startup.Retry(ctx, zerolog.Nop(), time.Hour, "connect", func() error {
		tries++
		if tries == 2 {
			cancel()
		}
		return pgErr("57P01")
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, tries)
	var got *pgconn.PgError
	require.ErrorAs(t, err, &got)
}
