// Package registrytest is the conformance suite of registry gateways: what
// every registry.Gateway must do, run against the simulated book and the
// HTTP adapter over its fake alike, so that the two cannot drift apart.
package registrytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/registry"
)

// Harness is one gateway under test and the switches of what stands
// behind it. A nil switch is a capability the gateway lacks: its cases are
// skipped.
type Harness struct {
	Gateway registry.Gateway
	// PaidOutside records a payment of amount against uin made elsewhere
	// and returns its payment id.
	PaidOutside func(t *testing.T, uin string, amount int64) string
	// LoseAnswers makes writes do their work and lose the answer.
	LoseAnswers func(t *testing.T, on bool)
	// Unavailable makes the gateway refuse every call having done nothing
	// (429 or 503 over HTTP, down for the simulator).
	Unavailable func(t *testing.T, on bool)
	// Processing makes payments posted meanwhile answer "still
	// processing" to their first looks (posts and look-ups) before they are
	// accepted.
	Processing func(t *testing.T, looks int)
	// NoExport makes the party answer the export of payments as one
	// without it (404 over HTTP); nil: the gateway always has it.
	NoExport func(t *testing.T, on bool)
	// Refused are the same gateway reached with credentials the party
	// refuses (no client certificate, a wrong one), by name.
	Refused map[string]registry.Gateway
}

// seq makes the ids of one run unique, so that harnesses may share a book.
var seq atomic.Int64

func ids() (paymentID, uin string) {
	n := seq.Add(1)
	stamp := time.Now().UnixNano() % 1_000_000_000
	return fmt.Sprintf("conf-%d-%d", stamp, n), fmt.Sprintf("188%09d%08d", stamp, n%100_000_000)
}

// Run runs every case, each on a harness of its own from newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	ctx := context.Background()
	t.Run("post then replay posts once", func(t *testing.T) {
		h := newHarness(t)
		id, uin := ids()
		p := registry.Payment{PaymentID: id, UIN: uin, Amount: 50000, PaidAt: time.Now()}
		require.NoError(t, h.Gateway.Post(ctx, p))
		require.NoError(t, h.Gateway.Post(ctx, p), "a replay answers as the first")
		q, err := h.Gateway.Quittance(ctx, uin)
		require.NoError(t, err)
		require.Equal(t, []registry.QuittancePayment{{PaymentID: id, Amount: 50000}}, q.Payments, "recorded once")
	})
	t.Run("lookup finds a posted payment, not an unknown one", func(t *testing.T) {
		h := newHarness(t)
		id, uin := ids()
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 700}))
		found, annulled, err := h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.True(t, found)
		require.False(t, annulled)
		unknown, _ := ids()
		found, _, err = h.Gateway.Lookup(ctx, unknown)
		require.NoError(t, err)
		require.False(t, found)
	})
	t.Run("annul then lookup shows it annulled, annulling again changes nothing", func(t *testing.T) {
		h := newHarness(t)
		id, uin := ids()
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 700}))
		require.NoError(t, h.Gateway.Annul(ctx, id))
		found, annulled, err := h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.True(t, found)
		require.True(t, annulled)
		require.NoError(t, h.Gateway.Annul(ctx, id))
		found, annulled, err = h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.True(t, found && annulled)
	})
	t.Run("a replay of an annulled payment answers annulled and records nothing", func(t *testing.T) {
		h := newHarness(t)
		id, uin := ids()
		p := registry.Payment{PaymentID: id, UIN: uin, Amount: 700}
		require.NoError(t, h.Gateway.Post(ctx, p))
		require.NoError(t, h.Gateway.Annul(ctx, id))
		err := h.Gateway.Post(ctx, p)
		require.ErrorIs(t, err, registry.ErrAnnulled, "an annulled payment is no accepted one")
		require.False(t, errors.Is(err, registry.ErrUnknownOutcome), "the answer is known: %v", err)
		q, err := h.Gateway.Quittance(ctx, uin)
		require.NoError(t, err)
		require.Equal(t, []registry.QuittancePayment{{PaymentID: id, Amount: 700, Annulled: true}}, q.Payments, "it stays annulled")
	})
	t.Run("annulling an unknown id is a no-op", func(t *testing.T) {
		h := newHarness(t)
		id, _ := ids()
		require.NoError(t, h.Gateway.Annul(ctx, id))
		found, _, err := h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.False(t, found, "nothing was recorded")
	})
	t.Run("quittance lists every payment, annulled and outside ones included", func(t *testing.T) {
		h := newHarness(t)
		kept, uin := ids()
		annulledID, _ := ids()
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: kept, UIN: uin, Amount: 500}))
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: annulledID, UIN: uin, Amount: 1000}))
		require.NoError(t, h.Gateway.Annul(ctx, annulledID))
		outside := h.PaidOutside(t, uin, 300)
		q, err := h.Gateway.Quittance(ctx, uin)
		require.NoError(t, err)
		require.ElementsMatch(t, []registry.QuittancePayment{{PaymentID: kept, Amount: 500},
			{PaymentID: annulledID, Amount: 1000, Annulled: true}, {PaymentID: outside, Amount: 300}}, q.Payments)
		own := func(id string) bool { return id == kept || id == annulledID }
		require.Equal(t, int64(300), q.PaidExcept(own), "paid outside rebill")
		_, other := ids()
		q, err = h.Gateway.Quittance(ctx, other)
		require.NoError(t, err)
		require.Empty(t, q.Payments, "an accrual the registry does not know has no payments")
	})
	t.Run("a lost answer's payment is found by lookup", func(t *testing.T) {
		h := newHarness(t)
		if h.LoseAnswers == nil {
			t.Skip("the gateway cannot lose answers")
		}
		id, uin := ids()
		h.LoseAnswers(t, true)
		err := h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 900})
		require.ErrorIs(t, err, registry.ErrUnknownOutcome)
		_, pending := registry.Pending(err)
		require.False(t, pending, "a lost answer is no pending one")
		h.LoseAnswers(t, false)
		found, annulled, err := h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.True(t, found, "the work was done")
		require.False(t, annulled)
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 900}), "and a replay answers")
	})
	t.Run("a payment still processing is pending, then accepted", func(t *testing.T) {
		h := newHarness(t)
		if h.Processing == nil {
			t.Skip("the gateway answers at once")
		}
		id, uin := ids()
		h.Processing(t, 2)
		p := registry.Payment{PaymentID: id, UIN: uin, Amount: 400}
		err := h.Gateway.Post(ctx, p)
		pe, pending := registry.Pending(err)
		require.True(t, pending, "%v", err)
		require.ErrorIs(t, err, registry.ErrUnknownOutcome, "not accepted yet")
		require.Positive(t, pe.RetryAfter)
		h.Processing(t, 0)
		_, _, err = h.Gateway.Lookup(ctx, id)
		_, pending = registry.Pending(err)
		require.True(t, pending, "still processing: %v", err)
		q, err := h.Gateway.Quittance(ctx, uin)
		require.NoError(t, err)
		require.Empty(t, q.Payments, "not at the registry yet")
		require.NoError(t, h.Gateway.Post(ctx, p), "the replay answers the outcome")
		found, _, err := h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.True(t, found)
	})
	t.Run("export lists the day's payments it took, annulled ones included, outside ones not", func(t *testing.T) {
		h := newHarness(t)
		before := time.Now().UTC()
		kept, uin := ids()
		annulledID, _ := ids()
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: kept, UIN: uin, Amount: 500, PaidAt: before}))
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: annulledID, UIN: uin, Amount: 1000, PaidAt: before}))
		require.NoError(t, h.Gateway.Annul(ctx, annulledID))
		outside := h.PaidOutside(t, uin, 300)
		after := time.Now().UTC()
		day := before.Truncate(24 * time.Hour)
		if !after.Truncate(24 * time.Hour).Equal(day) {
			t.Skip("the UTC day turned during the case")
		}
		got, err := registry.Export(ctx, h.Gateway, day)
		require.NoError(t, err)
		byID := map[string]registry.ExportedPayment{}
		for _, p := range got {
			byID[p.PaymentID] = p
		}
		require.NotContains(t, byID, outside, "a payment made elsewhere is no export of this party's")
		k, a := byID[kept], byID[annulledID]
		require.Equal(t, []any{uin, int64(500), registry.RegistryAccepted}, []any{k.UIN, k.Amount, k.Status})
		require.Equal(t, []any{uin, int64(1000), registry.RegistryAnnulled}, []any{a.UIN, a.Amount, a.Status})
		for _, p := range []registry.ExportedPayment{k, a} {
			require.False(t, p.ReceivedAt.Before(before.Add(-time.Second)) || p.ReceivedAt.After(after.Add(time.Second)),
				"%s received at %s, posted between %s and %s", p.PaymentID, p.ReceivedAt, before, after)
			require.False(t, p.AcceptedAt.IsZero(), "%s was accepted", p.PaymentID)
		}
		require.True(t, k.AnnulledAt.IsZero())
		require.False(t, a.AnnulledAt.IsZero(), "the annulment's time is exported")
		other, err := registry.Export(ctx, h.Gateway, day.AddDate(0, 0, -1))
		require.NoError(t, err)
		for _, p := range other {
			require.NotContains(t, []string{kept, annulledID}, p.PaymentID, "listed under the day it was taken only")
		}
	})
	t.Run("export lists a payment still processing as processing", func(t *testing.T) {
		h := newHarness(t)
		if h.Processing == nil {
			t.Skip("the gateway answers at once")
		}
		day := time.Now().UTC().Truncate(24 * time.Hour)
		id, uin := ids()
		h.Processing(t, 3)
		_, pending := registry.Pending(h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 400}))
		require.True(t, pending)
		h.Processing(t, 0)
		got, err := registry.Export(ctx, h.Gateway, day)
		require.NoError(t, err)
		idx := slices.IndexFunc(got, func(p registry.ExportedPayment) bool { return p.PaymentID == id })
		if idx < 0 && !time.Now().UTC().Truncate(24*time.Hour).Equal(day) {
			t.Skip("the UTC day turned during the case")
		}
		require.GreaterOrEqual(t, idx, 0, "a payment taken is exported before its outcome")
		require.Equal(t, registry.RegistryProcessing, got[idx].Status)
		require.True(t, got[idx].AcceptedAt.IsZero(), "not accepted yet")
	})
	t.Run("a party without the export says so, and is still asked by id", func(t *testing.T) {
		h := newHarness(t)
		if h.NoExport == nil {
			t.Skip("the gateway always has the export")
		}
		id, uin := ids()
		require.NoError(t, h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 800}))
		h.NoExport(t, true)
		_, err := registry.Export(ctx, h.Gateway, time.Now().UTC().Truncate(24*time.Hour))
		require.ErrorIs(t, err, registry.ErrExportUnsupported)
		require.False(t, errors.Is(err, registry.ErrUnavailable), "unsupported is an answer, not a gateway down")
		status, err := registry.LookupStatus(ctx, h.Gateway, id)
		require.NoError(t, err)
		require.Equal(t, registry.RegistryAccepted, status)
	})
	t.Run("an unavailable gateway does nothing", func(t *testing.T) {
		h := newHarness(t)
		if h.Unavailable == nil {
			t.Skip("the gateway cannot be made unavailable")
		}
		id, uin := ids()
		h.Unavailable(t, true)
		err := h.Gateway.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 900})
		require.ErrorIs(t, err, registry.ErrUnavailable)
		_, _, err = h.Gateway.Lookup(ctx, id)
		require.ErrorIs(t, err, registry.ErrUnavailable)
		_, err = registry.Export(ctx, h.Gateway, time.Now().UTC().Truncate(24*time.Hour))
		require.ErrorIs(t, err, registry.ErrUnavailable, "an export refused is nothing learnt")
		require.False(t, errors.Is(err, registry.ErrExportUnsupported))
		h.Unavailable(t, false)
		found, _, err := h.Gateway.Lookup(ctx, id)
		require.NoError(t, err)
		require.False(t, found, "nothing was recorded")
	})
	t.Run("refused credentials do nothing", func(t *testing.T) {
		h := newHarness(t)
		if len(h.Refused) == 0 {
			t.Skip("the gateway takes no credentials")
		}
		for name, g := range h.Refused {
			id, uin := ids()
			err := g.Post(ctx, registry.Payment{PaymentID: id, UIN: uin, Amount: 900})
			require.ErrorIs(t, err, registry.ErrUnavailable, name)
			require.False(t, errors.Is(err, registry.ErrRejected), "%s: a refused credential is no refused payment", name)
			found, _, err := h.Gateway.Lookup(ctx, id)
			require.NoError(t, err)
			require.False(t, found, "%s: nothing was recorded", name)
		}
	})
}
