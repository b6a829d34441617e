package fault_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/fault"
)

var errTaken = fault.New(fault.Conflict, "seat taken")

type stateError struct{ from, to string }

func (e *stateError) Error() string       { return "cannot move from " + e.from + " to " + e.to }
func (*stateError) ErrorCode() fault.Code { return fault.Conflict }

func TestCodeOfSeesThroughWrapping(t *testing.T) {
	t.Parallel()
	require.Equal(t, fault.Conflict, fault.CodeOf(errTaken))
	require.Equal(t, fault.Conflict, fault.CodeOf(fmt.Errorf("book: %w", fmt.Errorf("%w: row 3", errTaken))))
	require.Equal(t, fault.Conflict, fault.CodeOf(fmt.Errorf("move: %w", &stateError{"a", "b"})))
	require.Equal(t, fault.Code(""), fault.CodeOf(errors.New("disk on fire")))
	require.Equal(t, fault.Code(""), fault.CodeOf(nil))
	// Two codes: the outermost decides, as errors.As finds it first.
	require.Equal(t, fault.NotFound, fault.CodeOf(fmt.Errorf("%w: %w", fault.New(fault.NotFound, "x"), errTaken)))
}

func TestSentinelsKeepTheirIdentity(t *testing.T) {
	t.Parallel()
	wrapped := fmt.Errorf("book: %w", errTaken)
	require.ErrorIs(t, wrapped, errTaken)
	require.NotErrorIs(t, wrapped, fault.New(fault.Conflict, "seat taken"), "two sentinels with one text are two errors")
	require.Equal(t, "book: seat taken", wrapped.Error())
}

func TestMessage(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"sentinel":                    {errTaken, "seat taken"},
		"context in front is dropped": {fmt.Errorf("book seat 3: %w", errTaken), "seat taken"},
		"detail appended is kept":     {fmt.Errorf("%w: row 3 is sold out", errTaken), "seat taken: row 3 is sold out"},
		"both":                        {fmt.Errorf("book: %w", fmt.Errorf("%w: row 3", errTaken)), "seat taken: row 3"},
		"type":                        {&stateError{"a", "b"}, "cannot move from a to b"},
		"type behind context":         {fmt.Errorf("order 7: %w", &stateError{"a", "b"}), "cannot move from a to b"},
		"no code: the whole text":     {fmt.Errorf("query: %w", errors.New("boom")), "query: boom"},
		"two wrapped at once":         {fmt.Errorf("ask: %w", fmt.Errorf("%w: lookup: %w", errTaken, io.EOF)), "seat taken: lookup: EOF"},
	} {
		require.Equal(t, c.want, fault.Message(c.err), name)
	}
}
