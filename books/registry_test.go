package books_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/books"
	"github.com/rebill/rebill/charges/registry"
	"github.com/rebill/rebill/charges/registry/agentapi"
	"github.com/rebill/rebill/charges/registry/testkit/agentfake"
	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/opstest"
	"github.com/rebill/rebill/testkit/testsupport"
)

const uin = "18810142200817004923"

// registryBundle is a registry (agentfake over the HTTP adapter) whose
// payments are taken at noon of day, rebill's fines charges and postings
// beside it, and the reconciler, its clock two days on.
type registryBundle struct {
	pool       *pgxpool.Pool
	fake       *agentfake.Fake
	client     *agentapi.Client
	rec        *books.Reconciler
	clock      *testsupport.Clock
	enrollment uuid.UUID
	registry   string
}

// setupRegistry names the registry gateway gatewayName: a name of its own
// per test keeps its metrics apart.
func setupRegistry(t *testing.T, gatewayName string) *registryBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	fake := agentfake.New()
	fake.Now = func() time.Time { return day.Add(12 * time.Hour) }
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	client, err := agentapi.New(agentapi.Options{Name: gatewayName, BaseURL: srv.URL})
	require.NoError(t, err)
	clk := testsupport.NewClock(day.Add(50 * time.Hour))
	rec := &books.Reconciler{Pool: pool, Read: pool, Registries: map[string]registry.Gateway{gatewayName: client},
		AnnulWithin: 24 * time.Hour, Clock: clk, Days: 7, Logger: zerolog.New(io.Discard)}
	return &registryBundle{pool: pool, fake: fake, client: client, rec: rec, clock: clk, registry: gatewayName,
		enrollment: opstest.Enrollment(t, pool, "simr", day.AddDate(0, -1, 0))}
}

// fine is a fine's charge at attempt 1 in status, last changed at
// updated, and its posting (made at 11:00 of day) in postingStatus,
// answered by gateway ("" when no gateway answered); it returns the
// charge and the payment id.
func (b *registryBundle) fine(t *testing.T, status, postingStatus, gateway string, amount int64, updated time.Time) (uuid.UUID, string) {
	t.Helper()
	charge, _ := opstest.InsertCharge(t, b.pool, opstest.Charge{Enrollment: b.enrollment, BillID: uuid.NewString(),
		PeriodStart: day.Add(10 * time.Hour), Gateway: "simr", Status: status, Amount: amount, UpdatedAt: updated})
	id := uuid.NewString()
	var gw *string
	if gateway != "" {
		gw = &gateway
	}
	_, err := b.pool.Exec(context.Background(), `INSERT INTO registry_postings (payment_id, charge_id, attempt, uin, amount, status,
			gateway, created_at, updated_at) VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8)`,
		id, charge, uin, amount, postingStatus, gw, day.Add(11*time.Hour), updated)
	require.NoError(t, err)
	return charge, id
}

func (b *registryBundle) post(t *testing.T, id string, amount int64) {
	t.Helper()
	require.NoError(t, b.client.Post(context.Background(), registry.Payment{PaymentID: id, UIN: uin, Amount: amount}))
}

func byKind(res books.Result) map[books.Kind][]books.Discrepancy {
	got := map[books.Kind][]books.Discrepancy{}
	for _, d := range res.Discrepancies {
		got[d.Kind] = append(got[d.Kind], d)
	}
	return got
}

// Each way rebill's postings and captures can disagree with the
// registry's book is a discrepancy of the day, naming the charge and the
// payment: what the registry reconciliation exists to find.
func TestRegistryDiscrepancies(t *testing.T) {
	t.Parallel()
	for _, export := range []bool{true, false} {
		name := map[bool]string{true: "from the export", false: "export 404: by look-ups"}[export]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			registry := "bank-" + map[bool]string{true: "export", false: "lookups"}[export]
			b := setupRegistry(t, registry)
			ctx := context.Background()
			settled := day.Add(13 * time.Hour)
			// Accepted at the registry; the hold was voided and the posting
			// given up on (the registry finished after rebill stopped asking).
			uncollected, uncollectedID := b.fine(t, "declined", "failed", "", 50000, settled)
			b.post(t, uncollectedID, 50000)
			// Captured on a payment the registry annulled.
			annulled, annulledID := b.fine(t, "succeeded", "accepted", registry, 25000, settled)
			b.post(t, annulledID, 25000)
			require.NoError(t, b.client.Annul(ctx, annulledID))
			// Captured on a payment the registry never heard of.
			unknown, unknownID := b.fine(t, "succeeded", "accepted", registry, 30000, settled)
			// Captured, and the registry holds another amount under its id.
			mismatch, mismatchID := b.fine(t, "succeeded", "accepted", registry, 40000, settled)
			b.post(t, mismatchID, 39000)
			// Captured and accepted for the same amount: agreement.
			_, cleanID := b.fine(t, "succeeded", "accepted", registry, 10000, settled)
			b.post(t, cleanID, 10000)
			// Accepted, not captured, and annulled since: agreement.
			_, voidedID := b.fine(t, "voided", "annulled", registry, 20000, settled)
			b.post(t, voidedID, 20000)
			require.NoError(t, b.client.Annul(ctx, voidedID))
			b.fake.PaidOutside(uin, 5000) // another bank's payment: none of rebill's business

			if !export {
				b.fake.SetFaults(agentfake.Faults{NoExport: true})
			}
			before := value(t, metrics.RegistryReconciliationDiscrepancies.WithLabelValues(registry, string(books.CapturedNotAccepted)))
			res, err := b.rec.RunRegistryDay(ctx, registry, day)
			require.NoError(t, err)
			require.Equal(t, books.Discrepancies, res.Status)
			require.Equal(t, !export, res.Unsupported, "a registry without the export is marked unsupported")
			got := byKind(res)
			want := map[books.Kind][]uuid.UUID{
				books.AcceptedNotCaptured: {uncollected},
				books.CapturedNotAccepted: {annulled, unknown},
				books.AmountMismatch:      {mismatch},
			}
			if !export {
				delete(want, books.AmountMismatch) // a look-up tells no amount
			}
			require.Len(t, got, len(want), "%+v", res.Discrepancies)
			for kind, charges := range want {
				var ids []uuid.UUID
				for _, d := range got[kind] {
					require.NotNil(t, d.ChargeID)
					ids = append(ids, *d.ChargeID)
				}
				require.ElementsMatch(t, charges, ids, "%s: %+v", kind, got[kind])
			}
			refs := map[uuid.UUID]string{uncollected: uncollectedID, annulled: annulledID, unknown: unknownID, mismatch: mismatchID}
			for _, d := range res.Discrepancies {
				require.Equal(t, refs[*d.ChargeID], d.GatewayReference, "the payment id is the reference")
			}
			require.Equal(t, 2.0, value(t,
				metrics.RegistryReconciliationDiscrepancies.WithLabelValues(registry, string(books.CapturedNotAccepted)))-before)

			again, err := b.rec.RunRegistryDay(ctx, registry, day)
			require.NoError(t, err)
			require.Equal(t, res.Discrepancies, again.Discrepancies, "a day is recorded once")
			read, err := books.GetRegistry(ctx, b.pool, registry, day)
			require.NoError(t, err)
			require.Len(t, read.Discrepancies, len(res.Discrepancies))
			require.Equal(t, !export, read.Unsupported)
		})
	}
}

// A payment still settling — processing at the registry, or accepted with
// its capture or annulment still within the bound — is no discrepancy:
// the day waits, recording nothing, until the bound has passed.
func TestRegistryTransientStatesWait(t *testing.T) {
	t.Parallel()
	b := setupRegistry(t, "bank-transient")
	name := b.registry
	ctx := context.Background()
	recent := b.clock.Now().Add(-time.Hour)
	_, processingID := b.fine(t, "authorized", "posting", "", 50000, recent)
	b.fake.SetFaults(agentfake.Faults{Processing: 100})
	_, pending := registry.Pending(b.client.Post(ctx, registry.Payment{PaymentID: processingID, UIN: uin, Amount: 50000}))
	require.True(t, pending)
	b.fake.SetFaults(agentfake.Faults{})
	_, annullingID := b.fine(t, "declined", "posting", "", 25000, recent)
	b.post(t, annullingID, 25000)

	_, err := b.rec.RunRegistryDay(ctx, name, day)
	var wait *books.NotSettledError
	require.ErrorAs(t, err, &wait)
	require.Equal(t, recent.Add(24*time.Hour), wait.Until)
	res, err := books.GetRegistry(ctx, b.pool, name, day)
	require.NoError(t, err)
	require.Equal(t, books.Pending, res.Status, "nothing recorded while settling")

	b.clock.Set(wait.Until)
	res, err = b.rec.RunRegistryDay(ctx, name, day)
	require.NoError(t, err)
	got := byKind(res)
	require.Len(t, got[books.ProcessingTooLong], 1, "%+v", res.Discrepancies)
	require.Len(t, got[books.AcceptedNotCaptured], 1, "%+v", res.Discrepancies)
	require.Equal(t, processingID, got[books.ProcessingTooLong][0].GatewayReference)
	require.Equal(t, annullingID, got[books.AcceptedNotCaptured][0].GatewayReference)
}

// A registry that does not answer concludes nothing; a clean day is
// matched.
func TestRegistryDayUnansweredOrClean(t *testing.T) {
	t.Parallel()
	b := setupRegistry(t, "bank-clean")
	name := b.registry
	ctx := context.Background()
	_, id := b.fine(t, "succeeded", "accepted", name, 10000, day.Add(13*time.Hour))
	b.post(t, id, 10000)
	b.fake.SetFaults(agentfake.Faults{Down: true})
	_, err := b.rec.RunRegistryDay(ctx, name, day)
	require.ErrorIs(t, err, registry.ErrUnavailable)
	require.False(t, errors.As(err, new(*books.NotSettledError)))
	res, err := books.GetRegistry(ctx, b.pool, name, day)
	require.NoError(t, err)
	require.Equal(t, books.Pending, res.Status)

	b.fake.SetFaults(agentfake.Faults{})
	res, err = b.rec.RunRegistryDay(ctx, name, day)
	require.NoError(t, err)
	require.Equal(t, books.Matched, res.Status, "%+v", res.Discrepancies)
	require.Equal(t, 1, res.Operations)
	require.False(t, res.Unsupported)
}
