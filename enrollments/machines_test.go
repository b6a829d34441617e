package enrollments_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/fsmtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

func TestEnrollmentTransitions(t *testing.T) {
	t.Parallel()
	fsmtest.RequireMoves(t, enrollments.Machine, map[enrollments.Status][]enrollments.Status{
		enrollments.Active:    {enrollments.Paused, enrollments.Cancelled},
		enrollments.Paused:    {enrollments.Active, enrollments.Cancelled},
		enrollments.Cancelled: nil,
	})
}

func TestBillTransitions(t *testing.T) {
	t.Parallel()
	const (
		pending   = enrollments.BillPending
		confirm   = enrollments.BillAwaitingConfirmation
		registry  = enrollments.BillAwaitingRegistry
		scheduled = enrollments.BillScheduled
		paying    = enrollments.BillPaying
		paid      = enrollments.BillPaid
		failed    = enrollments.BillFailed
		withdrawn = enrollments.BillWithdrawn
		expired   = enrollments.BillExpired
		duplicate = enrollments.BillDuplicate
		elsewhere = enrollments.BillPaidElsewhere
	)
	fsmtest.RequireMoves(t, enrollments.BillMachine, map[enrollments.BillStatus][]enrollments.BillStatus{
		pending:   {scheduled, confirm, withdrawn, expired, elsewhere},
		confirm:   {scheduled, pending, paying, withdrawn, expired, elsewhere},
		registry:  {scheduled, pending, withdrawn, expired, elsewhere},
		scheduled: {paying, registry, pending, duplicate, withdrawn, expired, elsewhere},
		paying:    {paid, failed, confirm, duplicate, withdrawn, expired, elsewhere},
		failed:    {paying, paid, confirm, duplicate, withdrawn, expired, elsewhere},
		paid:      nil,
		withdrawn: nil,
		expired:   {paid, withdrawn},
		duplicate: {scheduled, pending, confirm, paid, withdrawn, elsewhere},
		elsewhere: nil,
	})
	// Money rules the table encodes.
	require.True(t, enrollments.CanBillTransition(expired, paid), "a capture that landed is recorded")
	require.False(t, enrollments.CanBillTransition(paid, withdrawn), "a paid bill is never annulled here")
	require.False(t, enrollments.CanBillTransition(expired, paying), "an expired bill is never charged again")
	require.False(t, enrollments.CanBillTransition(withdrawn, scheduled), "a withdrawn bill is never charged")
	require.False(t, enrollments.CanBillTransition(pending, paying), "a paused enrollment's bill is not charged")
	require.False(t, enrollments.CanBillTransition(registry, paying), "a fine is charged only once a registry can take it")
	require.False(t, enrollments.CanBillTransition(elsewhere, paying), "a bill paid elsewhere is never charged")
	require.False(t, enrollments.CanBillTransition(paid, elsewhere), "a bill rebill paid stays paid")
}

// No SQL names an enrollment's or a bill's status: conditions are built
// from the constants.
func TestNoEnrollmentOrBillStatusLiteral(t *testing.T) {
	t.Parallel()
	fsmtest.RequireNoLiterals(t, enrollments.Statuses)
	fsmtest.RequireNoLiterals(t, enrollments.BillStatuses)
}

// sink records what the store publishes.
type sink struct {
	mu     sync.Mutex
	events []string // "<type> <status>", or "stored <status>" for a restatement
}

func (s *sink) EnrollmentChanged(_ context.Context, _ pgx.Tx, typ string, e enrollments.Enrollment, _ time.Time) error {
	s.add("enrollment." + typ + " " + string(e.Status))
	return nil
}

func (s *sink) BillChanged(_ context.Context, _ pgx.Tx, typ string, b enrollments.Bill, _ time.Time) error {
	s.add("bill." + typ + " " + string(b.Status))
	return nil
}

func (s *sink) BillStored(_ context.Context, _ pgx.Tx, b enrollments.Bill, _ time.Time) error {
	s.add("stored " + string(b.Status))
	return nil
}

func (s *sink) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

// take returns what was published since the last take.
func (s *sink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.events
	s.events = nil
	return out
}

type storeBundle struct {
	pool  *pgxpool.Pool
	store *enrollments.Store
	sink  *sink
	clock *testsupport.Clock
	rules enrollments.Rules
}

func newStore(t *testing.T) storeBundle {
	t.Helper()
	clk := testsupport.NewClock(time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC))
	st := enrollments.NewStore(clk)
	events := &sink{}
	st.SetEventSink(events)
	return storeBundle{pool: dbtest.Pool(t), store: st, sink: events, clock: clk,
		rules: enrollments.Rules{Dunning: []time.Duration{24 * time.Hour}, CaptureMargin: time.Hour}}
}

func (b storeBundle) inTx(t *testing.T, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, fn))
}

func (b storeBundle) enroll(t *testing.T, kind enrollments.Kind, ref enrollments.AccountRef) enrollments.Enrollment {
	t.Helper()
	var e enrollments.Enrollment
	b.inTx(t, func(tx pgx.Tx) (err error) {
		e, err = b.store.Create(context.Background(), tx, enrollments.New{CustomerID: "cus_1", Kind: kind, AccountRef: ref,
			Currency: "RUB", MaxAmount: 100000,
			PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2030}})
		return err
	})
	return e
}

func (b storeBundle) housing(t *testing.T) enrollments.Enrollment {
	t.Helper()
	return b.enroll(t, enrollments.Housing, enrollments.AccountRef{ELS: "75ДА533315"})
}

func (b storeBundle) push(t *testing.T, e enrollments.Enrollment, billID string, amount int64) enrollments.Bill {
	t.Helper()
	var bill enrollments.Bill
	b.inTx(t, func(tx pgx.Tx) error {
		locked, err := b.store.GetForUpdate(context.Background(), tx, e.ID)
		if err != nil {
			return err
		}
		bill, _, err = b.store.Push(context.Background(), tx, locked, enrollments.BillInput{BillID: billID, Amount: amount,
			IssuedAt: b.clock.Now().Add(-time.Hour), DueDate: enrollments.NewDate(b.clock.Now().AddDate(0, 0, 20))}, b.rules)
		return err
	})
	return bill
}

func (b storeBundle) setStatus(t *testing.T, e enrollments.Enrollment, to enrollments.Status, event string) {
	t.Helper()
	b.inTx(t, func(tx pgx.Tx) error {
		_, _, err := b.store.SetStatus(context.Background(), tx, e.ID, to, event)
		return err
	})
}

func (b storeBundle) bill(t *testing.T, e enrollments.Enrollment, billID string) enrollments.Bill {
	t.Helper()
	got, err := b.store.GetBill(context.Background(), b.pool, e.ID, billID)
	require.NoError(t, err)
	return got
}

// A move the table forbids is refused before anything is written, though
// the guard would let it through: the bill is where it was.
func TestMoveBillRefusesWhatTheTableForbids(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newStore(t)
	e := b.housing(t)
	bill := b.push(t, e, "b-1", 5000)
	require.Equal(t, enrollments.BillScheduled, bill.Status)
	b.sink.take()

	for _, to := range []enrollments.BillStatus{enrollments.BillPaid, enrollments.BillFailed, enrollments.BillScheduled} {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.store.MoveBill(ctx, tx, bill.ID, []enrollments.BillStatus{enrollments.BillScheduled}, to)
			return err
		})
		var te *fsm.TransitionError
		require.ErrorAs(t, err, &te, "scheduled -> %s", to)
		require.Equal(t, fsm.TransitionError{Machine: "bill", From: "scheduled", To: string(to)}, *te)
	}
	// One forbidden origin among allowed ones refuses the whole move.
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.MoveBill(ctx, tx, bill.ID, []enrollments.BillStatus{enrollments.BillScheduled, enrollments.BillPaid},
			enrollments.BillWithdrawn)
		return err
	})
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "paid", te.From)
	after := b.bill(t, e, "b-1")
	require.Equal(t, enrollments.BillScheduled, after.Status)
	require.Equal(t, bill.UpdatedAt, after.UpdatedAt, "nothing written")
	require.Empty(t, b.sink.take(), "nothing published")
}

// A paid bill cannot be withdrawn; an expired one whose capture landed
// after all is recorded paid.
func TestPaidBillsAndLateCaptures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newStore(t)
	e := b.housing(t)
	bill := b.push(t, e, "b-1", 5000)
	chargeID := uuid.New()
	b.inTx(t, func(tx pgx.Tx) error {
		if _, err := b.store.Charging(ctx, tx, bill.ID, chargeID); err != nil {
			return err
		}
		return b.store.ChargeExpired(ctx, tx, chargeID)
	})
	require.Equal(t, enrollments.BillExpired, b.bill(t, e, "b-1").Status)
	b.inTx(t, func(tx pgx.Tx) error { return b.store.ChargeOutcome(ctx, tx, chargeID, true, 5000) })
	paid := b.bill(t, e, "b-1")
	require.Equal(t, enrollments.BillPaid, paid.Status)
	require.Equal(t, int64(5000), *paid.PaidAmount)

	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		locked, err := b.store.GetForUpdate(ctx, tx, e.ID)
		if err != nil {
			return err
		}
		_, _, err = b.store.Withdraw(ctx, tx, locked, "b-1")
		return err
	})
	var te *fsm.TransitionError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "bill", te.Machine)
	require.Equal(t, enrollments.BillPaid, b.bill(t, e, "b-1").Status)

	// A failed outcome reported late changes nothing on a paid bill.
	b.inTx(t, func(tx pgx.Tx) error { return b.store.ChargeOutcome(ctx, tx, chargeID, false, 0) })
	require.Equal(t, enrollments.BillPaid, b.bill(t, e, "b-1").Status)
}

// A confirmation of a pending bill is recorded without a move: the bill
// stays pending, no event of its own is published, and resume schedules
// it instead of asking again.
func TestConfirmingAPendingBillIsNotAMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newStore(t)
	e := b.housing(t)
	b.setStatus(t, e, enrollments.Paused, enrollments.EventPaused)
	bill := b.push(t, e, "b-1", 150000)
	require.Equal(t, enrollments.BillPending, bill.Status, "a paused enrollment keeps it pending, over max_amount or not")
	b.sink.take()

	b.clock.Advance(time.Minute)
	var confirmed enrollments.Bill
	b.inTx(t, func(tx pgx.Tx) (err error) {
		locked, err := b.store.GetForUpdate(ctx, tx, e.ID)
		if err != nil {
			return err
		}
		confirmed, err = b.store.Confirm(ctx, tx, locked, "b-1")
		return err
	})
	require.Equal(t, enrollments.BillPending, confirmed.Status)
	require.NotNil(t, confirmed.ConfirmedAmount)
	require.Equal(t, int64(150000), *confirmed.ConfirmedAmount)
	require.Equal(t, b.clock.Now(), confirmed.UpdatedAt)
	require.Equal(t, []string{"stored pending"}, b.sink.take(), "restated, no event of its own")

	b.inTx(t, func(tx pgx.Tx) error {
		resumed, _, err := b.store.SetStatus(ctx, tx, e.ID, enrollments.Active, enrollments.EventResumed)
		if err != nil {
			return err
		}
		return b.store.Resumed(ctx, tx, resumed)
	})
	require.Equal(t, enrollments.BillScheduled, b.bill(t, e, "b-1").Status, "the confirmation covers it")
}

// Pausing keeps the scheduled bills pending, each through the table's
// move, and leaves the others where they are.
func TestPausedMovesScheduledBillsThroughTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newStore(t)
	e := b.housing(t)
	other := b.enroll(t, enrollments.Housing, enrollments.AccountRef{ELS: "75ДА533316"})
	b.push(t, e, "b-1", 5000)
	b.push(t, e, "b-2", 6000)
	require.Equal(t, enrollments.BillAwaitingConfirmation, b.push(t, e, "b-3", 150000).Status)
	b.push(t, other, "b-1", 5000)
	b.sink.take()

	b.inTx(t, func(tx pgx.Tx) error {
		if _, _, err := b.store.SetStatus(ctx, tx, e.ID, enrollments.Paused, enrollments.EventPaused); err != nil {
			return err
		}
		return b.store.Paused(ctx, tx, e.ID)
	})
	require.Equal(t, []string{"enrollment.paused paused", "stored pending", "stored pending"}, b.sink.take())
	require.Equal(t, enrollments.BillPending, b.bill(t, e, "b-1").Status)
	require.Equal(t, enrollments.BillPending, b.bill(t, e, "b-2").Status)
	require.Equal(t, enrollments.BillAwaitingConfirmation, b.bill(t, e, "b-3").Status)
	require.Equal(t, enrollments.BillScheduled, b.bill(t, other, "b-1").Status, "another enrollment's bill")
}

// Fines that awaited a registry are scheduled once one is configured,
// kept pending for a paused enrollment, each once.
func TestRegistryReadyMovesThroughTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newStore(t)
	active := b.enroll(t, enrollments.Fines, enrollments.AccountRef{STS: "77УА123456"})
	paused := b.enroll(t, enrollments.Fines, enrollments.AccountRef{STS: "77УА654321"})
	const uin1, uin2, uin3 = "18810142200817004923", "18810162210739014395", "18800000000000000008"
	for _, p := range []struct {
		e   enrollments.Enrollment
		uin string
	}{{active, uin1}, {active, uin2}, {paused, uin3}} {
		bill := b.push(t, p.e, p.uin, 5000)
		b.inTx(t, func(tx pgx.Tx) error {
			_, err := b.store.AwaitRegistry(ctx, tx, bill.ID)
			return err
		})
	}
	b.setStatus(t, paused, enrollments.Paused, enrollments.EventPaused)
	b.sink.take()

	var n int
	b.inTx(t, func(tx pgx.Tx) (err error) { n, err = b.store.RegistryReady(ctx, tx, 2); return err })
	require.Equal(t, 2, n, "a batch at most")
	b.inTx(t, func(tx pgx.Tx) (err error) { n, err = b.store.RegistryReady(ctx, tx, 2); return err })
	require.Equal(t, 1, n)
	b.inTx(t, func(tx pgx.Tx) (err error) { n, err = b.store.RegistryReady(ctx, tx, 2); return err })
	require.Zero(t, n, "each once")
	require.Equal(t, enrollments.BillScheduled, b.bill(t, active, uin1).Status)
	require.Equal(t, enrollments.BillScheduled, b.bill(t, active, uin2).Status)
	require.Equal(t, enrollments.BillPending, b.bill(t, paused, uin3).Status)
	require.ElementsMatch(t, []string{"stored scheduled", "stored scheduled", "stored pending"}, b.sink.take())
}

// An enrollment's forbidden move is a *fsm.TransitionError that writes
// nothing; a repeated one changes nothing.
func TestEnrollmentSetStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newStore(t)
	e := b.housing(t)
	b.sink.take()
	b.setStatus(t, e, enrollments.Cancelled, enrollments.EventCancelled)
	cancelled, err := b.store.Get(ctx, b.pool, e.ID)
	require.NoError(t, err)
	require.NotNil(t, cancelled.CancelledAt)
	require.True(t, b.clock.Now().Equal(*cancelled.CancelledAt), "cancelled at %s", cancelled.CancelledAt)
	require.Equal(t, []string{"enrollment.cancelled cancelled"}, b.sink.take())

	b.clock.Advance(time.Minute)
	for _, to := range []enrollments.Status{enrollments.Active, enrollments.Paused} {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, _, err := b.store.SetStatus(ctx, tx, e.ID, to, "x")
			return err
		})
		var te *fsm.TransitionError
		require.True(t, errors.As(err, &te), "%s: %v", to, err)
		require.Equal(t, fsm.TransitionError{Machine: "enrollment", From: "cancelled", To: string(to)}, *te)
	}
	var changed bool
	b.inTx(t, func(tx pgx.Tx) (err error) {
		_, changed, err = b.store.SetStatus(ctx, tx, e.ID, enrollments.Cancelled, enrollments.EventCancelled)
		return err
	})
	require.False(t, changed)
	after, err := b.store.Get(ctx, b.pool, e.ID)
	require.NoError(t, err)
	require.Equal(t, cancelled, after)
	require.Empty(t, b.sink.take())
}

// An enrollment created under an id its request derived is created under
// it (its bills' charges then carry keys made of it); the id taken already
// (the request's key created it, and its stored response has expired
// since) is ErrCreatedBefore, not a second enrollment.
func TestCreateUnderAGivenID(t *testing.T) {
	t.Parallel()
	b := newStore(t)
	ctx := context.Background()
	n := enrollments.New{CustomerID: "cus_1", Kind: enrollments.Housing, AccountRef: enrollments.AccountRef{ELS: "75ДА533315"},
		Currency: "RUB", MaxAmount: 100000, ID: uuid.NewSHA1(uuid.NameSpaceURL, []byte("client\x00key\x00enrollment")),
		PaymentMethod: rebilltype.PaymentMethod{Gateway: "sim1", Token: "tok_ok", ExpMonth: 12, ExpYear: 2030}}
	var e enrollments.Enrollment
	b.inTx(t, func(tx pgx.Tx) (err error) {
		e, err = b.store.Create(ctx, tx, n)
		return err
	})
	require.Equal(t, n.ID, e.ID)
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := b.store.Create(ctx, tx, n)
		return err
	})
	require.ErrorIs(t, err, enrollments.ErrCreatedBefore)
}
