// Package partytest is the conformance suite of GIS ZhKH parties: what
// every party.Party must do, run against the simulated party and the HTTP
// adapter over its fake alike, so that the two cannot drift apart.
package partytest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/zhkh/party"
)

// Harness is one party under test and the switches of what stands behind
// it. A nil switch is a capability the party lacks: its cases are skipped.
type Harness struct {
	Party party.Party
	// LoseAnswers makes writes do their work and lose the answer.
	LoseAnswers func(t *testing.T, on bool)
	// Unavailable makes the party refuse every call having done nothing.
	Unavailable func(t *testing.T, on bool)
	// Processing makes reports made meanwhile answer "still processing" to
	// their first looks.
	Processing func(t *testing.T, looks int)
	// Refuse makes GIS ZhKH refuse reports made meanwhile with reason
	// ("" ends it).
	Refuse func(t *testing.T, reason string)
	// Refused are the same party reached with credentials it refuses (no
	// client certificate, a wrong one), by name.
	Refused map[string]party.Party
}

var seq atomic.Int64

// payment is a payment of its own for one case.
func payment() party.Payment {
	n := seq.Add(1)
	id := party.ReportID(fmt.Sprintf("conf-%d-%d", time.Now().UnixNano(), n))
	return party.Payment{ReportID: id, Account: fmt.Sprintf("75ДА%06d", n%1_000_000), BillID: "bill-" + id[:8],
		Amount: 123456, Currency: "RUB", PaidAt: time.Now().UTC().Truncate(time.Second), PaymentRef: id,
		PaymentDocumentID: "", Period: "2026-11"}
}

// Run runs every case, each on a harness of its own from newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	ctx := context.Background()
	look := func(t *testing.T, h Harness, id string) party.Status {
		t.Helper()
		s, _, err := h.Party.Lookup(ctx, id)
		require.NoError(t, err)
		return s
	}
	t.Run("report then replay reports once", func(t *testing.T) {
		h := newHarness(t)
		p := payment()
		require.NoError(t, h.Party.Report(ctx, p))
		require.NoError(t, h.Party.Report(ctx, p), "a replay answers as the first")
		require.Equal(t, party.StatusAccepted, look(t, h, p.ReportID))
	})
	t.Run("lookup of an unknown report finds nothing", func(t *testing.T) {
		h := newHarness(t)
		require.Equal(t, party.StatusNotFound, look(t, h, payment().ReportID))
	})
	t.Run("cancel then lookup shows it cancelled, cancelling again changes nothing", func(t *testing.T) {
		h := newHarness(t)
		p := payment()
		require.NoError(t, h.Party.Report(ctx, p))
		require.NoError(t, h.Party.Cancel(ctx, p.ReportID))
		require.Equal(t, party.StatusCancelled, look(t, h, p.ReportID))
		require.NoError(t, h.Party.Cancel(ctx, p.ReportID))
		require.Equal(t, party.StatusCancelled, look(t, h, p.ReportID))
	})
	t.Run("a replay of a cancelled report answers cancelled and does not make it stand", func(t *testing.T) {
		h := newHarness(t)
		p := payment()
		require.NoError(t, h.Party.Report(ctx, p))
		require.NoError(t, h.Party.Cancel(ctx, p.ReportID))
		err := h.Party.Report(ctx, p)
		require.ErrorIs(t, err, party.ErrCancelled)
		require.False(t, errors.Is(err, party.ErrUnknownOutcome), "the answer is known: %v", err)
		require.Equal(t, party.StatusCancelled, look(t, h, p.ReportID))
	})
	t.Run("cancelling an unknown report is a no-op", func(t *testing.T) {
		h := newHarness(t)
		p := payment()
		require.NoError(t, h.Party.Cancel(ctx, p.ReportID))
		require.Equal(t, party.StatusNotFound, look(t, h, p.ReportID), "nothing was recorded")
	})
	t.Run("a lost answer's report is found by lookup", func(t *testing.T) {
		h := newHarness(t)
		if h.LoseAnswers == nil {
			t.Skip("the party cannot lose answers")
		}
		p := payment()
		h.LoseAnswers(t, true)
		err := h.Party.Report(ctx, p)
		require.ErrorIs(t, err, party.ErrUnknownOutcome)
		_, pending := party.Pending(err)
		require.False(t, pending, "a lost answer is no pending one")
		h.LoseAnswers(t, false)
		require.Equal(t, party.StatusAccepted, look(t, h, p.ReportID), "the work was done")
		require.NoError(t, h.Party.Report(ctx, p), "and a replay answers")
	})
	t.Run("an unavailable party did nothing", func(t *testing.T) {
		h := newHarness(t)
		if h.Unavailable == nil {
			t.Skip("the party cannot be made unavailable")
		}
		p := payment()
		h.Unavailable(t, true)
		require.ErrorIs(t, h.Party.Report(ctx, p), party.ErrUnavailable)
		h.Unavailable(t, false)
		require.Equal(t, party.StatusNotFound, look(t, h, p.ReportID), "nothing was recorded")
	})
	t.Run("a report still processing is pending until GIS ZhKH answers", func(t *testing.T) {
		h := newHarness(t)
		if h.Processing == nil {
			t.Skip("the party answers at once")
		}
		p := payment()
		h.Processing(t, 1)
		err := h.Party.Report(ctx, p)
		_, pending := party.Pending(err)
		require.True(t, pending, "taken, no outcome yet: %v", err)
		h.Processing(t, 0)
		require.Equal(t, party.StatusAccepted, look(t, h, p.ReportID), "the look after the one processing look ends it")
	})
	t.Run("a refusal is for good and carries its reason", func(t *testing.T) {
		h := newHarness(t)
		if h.Refuse == nil {
			t.Skip("the party cannot be made to refuse")
		}
		p := payment()
		h.Refuse(t, "payment document not found")
		err := h.Party.Report(ctx, p)
		h.Refuse(t, "")
		re, ok := party.Refused(err)
		require.True(t, ok, "a refusal: %v", err)
		require.Contains(t, re.Reason, "payment document not found")
		s, reason, err := h.Party.Lookup(ctx, p.ReportID)
		require.NoError(t, err)
		require.Equal(t, party.StatusRefused, s)
		require.Contains(t, reason, "payment document not found")
		require.ErrorIs(t, h.Party.Report(ctx, p), party.ErrRefused, "a replay is refused as the first")
	})
	for name, refused := range newHarness(t).Refused {
		t.Run("refused credentials do nothing: "+name, func(t *testing.T) {
			p := payment()
			require.ErrorIs(t, refused.Report(ctx, p), party.ErrUnavailable)
			h := newHarness(t)
			require.Equal(t, party.StatusNotFound, look(t, h, p.ReportID))
		})
	}
}
