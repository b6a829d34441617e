package billcheck_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/audit/billcheck"
)

var t0 = time.Date(2026, 11, 10, 9, 0, 0, 0, time.UTC)

const (
	housing  = "0190f0aa-0000-7000-8000-000000000001"
	housing2 = "0190f0aa-0000-7000-8000-000000000002"
	fines    = "0190f0aa-0000-7000-8000-000000000003"
	fines2   = "0190f0aa-0000-7000-8000-000000000004"
	uin      = "18810142200817004923"
)

func ptr[T any](v T) *T { return &v }

func op(key string, attempt int, kind string, amount int64) billcheck.Op {
	return billcheck.Op{Gateway: "sim1", Op: kind, Status: "succeeded", Amount: amount, At: t0,
		IdempotencyKey: key + ":a" + string(rune('0'+attempt)) + ":" + kind}
}

// clean is a month of autopay done right: a housing bill paid once (its
// account enrolled twice, the copy never charged), a fine paid at the
// discount with its posting, a fine whose discounted hold was released at
// the deadline (posting annulled) and paid in full after a confirmation.
func clean() *billcheck.Data {
	ends := t0.Add(48 * time.Hour)
	d := &billcheck.Data{Now: t0.Add(30 * 24 * time.Hour),
		Enrollments: []billcheck.Enrollment{
			{ID: housing, Kind: "housing", ELS: "75AB533315", MaxAmount: 500000},
			{ID: housing2, Kind: "housing", ELS: "75АВ533315", MaxAmount: 500000},
			{ID: fines, Kind: "fines", MaxAmount: 60000},
			{ID: fines2, Kind: "fines", MaxAmount: 60000},
		},
		Bills: []billcheck.Bill{
			{ID: "b1", EnrollmentID: housing, BillID: "2026-11:1", Amount: 350000, ExpiresAt: t0.Add(10 * 24 * time.Hour), Status: "paid"},
			{ID: "b2", EnrollmentID: housing2, BillID: "2026-11:1", Amount: 350000, ExpiresAt: t0.Add(10 * 24 * time.Hour), Status: "duplicate"},
			{ID: "b3", EnrollmentID: fines, BillID: uin, Amount: 100000, DiscountedAmount: ptr[int64](50000), DiscountEnds: &ends,
				ExpiresAt: t0.Add(60 * 24 * time.Hour), Status: "paid"},
			{ID: "b4", EnrollmentID: fines2, BillID: "32210839410000000014", Amount: 100000, DiscountedAmount: ptr[int64](50000),
				DiscountEnds: &ends, ExpiresAt: t0.Add(60 * 24 * time.Hour), Status: "paid", ConfirmedAt: ptr(ends.Add(time.Hour))},
		},
		Charges: []billcheck.Charge{
			{ID: "c1", EnrollmentID: housing, BillID: "2026-11:1", Status: "succeeded", AttemptCount: 1, AttemptTimes: []time.Time{t0}, UpdatedAt: t0},
			{ID: "c3", EnrollmentID: fines, BillID: uin, Status: "succeeded", AttemptCount: 1, AttemptTimes: []time.Time{t0}, UpdatedAt: t0},
			{ID: "c4", EnrollmentID: fines2, BillID: "32210839410000000014", Status: "succeeded", AttemptCount: 2,
				AttemptTimes: []time.Time{t0, ends.Add(2 * time.Hour)}, UpdatedAt: ends.Add(2 * time.Hour)},
		},
		Postings: []billcheck.Posting{
			{PaymentID: "p3", ChargeID: "c3", Attempt: 1, UIN: uin, Amount: 50000, Status: "accepted", RegistryStatus: "accepted"},
			{PaymentID: "p4a", ChargeID: "c4", Attempt: 1, Amount: 50000, Status: "annulled", RegistryStatus: "annulled"},
			{PaymentID: "p4b", ChargeID: "c4", Attempt: 2, Amount: 100000, Status: "accepted"},
		},
	}
	d.Ops = []billcheck.Op{
		op(housing+":2026-11:1", 1, "authorize", 350000), op(housing+":2026-11:1", 1, "capture", 350000),
		op(fines+":"+uin, 1, "authorize", 50000), op(fines+":"+uin, 1, "capture", 50000),
		op(fines2+":32210839410000000014", 1, "authorize", 50000), op(fines2+":32210839410000000014", 1, "void", 50000),
		op(fines2+":32210839410000000014", 2, "authorize", 100000), op(fines2+":32210839410000000014", 2, "capture", 100000),
	}
	return d
}

func invariants(vs []billcheck.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant)
	}
	return out
}

func TestCleanBillsPass(t *testing.T) {
	require.Empty(t, billcheck.Check(clean()))
}

// A fine partly paid outside rebill is captured for the rest of either
// price, as its charge found it.
func TestRestOfAFinePaidInPartOutsideRebillPasses(t *testing.T) {
	d := clean()
	d.Charges[1].PaidOutside = 20000
	d.Ops[2].Amount, d.Ops[3].Amount, d.Postings[0].Amount = 30000, 30000, 30000
	d.Charges[2].PaidOutside = 35000
	d.Ops[6].Amount, d.Ops[7].Amount, d.Postings[2].Amount = 65000, 65000, 65000
	require.Empty(t, billcheck.Check(d))
}

// Each case breaks one rule in otherwise clean data: a check that cannot
// fail is worthless.
func TestEachBrokenRuleIsFound(t *testing.T) {
	cases := []struct {
		name    string
		want    string
		breakIt func(d *billcheck.Data)
		also    string // a second rule the same fault breaks
	}{
		{"the same account enrolled twice paid twice (ELS in Latin and in Cyrillic)", billcheck.OneCapturePerIdentity, func(d *billcheck.Data) {
			d.Charges = append(d.Charges, billcheck.Charge{ID: "c2", EnrollmentID: housing2, BillID: "2026-11:1", Status: "succeeded",
				AttemptCount: 1, AttemptTimes: []time.Time{t0}, UpdatedAt: t0})
			d.Ops = append(d.Ops, op(housing2+":2026-11:1", 1, "capture", 350000))
		}, ""},
		{"one fine paid through two people's enrollments", billcheck.OneCapturePerIdentity, func(d *billcheck.Data) {
			d.Charges = append(d.Charges, billcheck.Charge{ID: "c5", EnrollmentID: fines2, BillID: uin, Status: "succeeded",
				AttemptCount: 1, AttemptTimes: []time.Time{t0}, UpdatedAt: t0})
			d.Postings = append(d.Postings, billcheck.Posting{PaymentID: "p5", ChargeID: "c5", Attempt: 1, Amount: 50000, Status: "accepted"})
			d.Ops = append(d.Ops, op(fines2+":"+uin, 1, "capture", 50000))
		}, ""},
		{"one charge captured under two attempts", billcheck.OneCapturePerIdentity, func(d *billcheck.Data) {
			d.Charges[0].AttemptCount, d.Charges[0].AttemptTimes = 2, []time.Time{t0, t0.Add(time.Hour)}
			d.Ops = append(d.Ops, op(housing+":2026-11:1", 2, "capture", 350000))
		}, ""},
		{"the full price above the cap, never confirmed", billcheck.WithinCap, func(d *billcheck.Data) {
			d.Bills[3].ConfirmedAt = nil
		}, ""},
		{"the full price above the cap, confirmed only at the discount", billcheck.WithinCap, func(d *billcheck.Data) {
			d.Bills[3].ConfirmedAt = ptr(t0)
		}, ""},
		{"the full price above the cap, confirmed just before the last discounted start", billcheck.WithinCap, func(d *billcheck.Data) {
			d.Bills[3].ConfirmedAt = ptr(d.Bills[3].DiscountEnds.Add(-billcheck.LastDiscountedMargin - time.Second))
		}, ""},
		{"a housing bill above the cap", billcheck.WithinCap, func(d *billcheck.Data) {
			d.Enrollments[0].MaxAmount = 349999
		}, ""},
		{"a fine captured with no posting", billcheck.FinePosted, func(d *billcheck.Data) {
			d.Postings = d.Postings[1:]
		}, ""},
		{"a fine captured while its posting was annulled at the registry", billcheck.FinePosted, func(d *billcheck.Data) {
			d.Postings[0].RegistryStatus = "annulled"
		}, ""},
		{"a fine captured for another amount than posted", billcheck.FinePosted, func(d *billcheck.Data) {
			d.Postings[2].Amount = 50000
		}, ""},
		{"a fine captured with the posting of another attempt", billcheck.FinePosted, func(d *billcheck.Data) {
			d.Postings = []billcheck.Posting{d.Postings[0], d.Postings[2]}
			d.Postings[1].Attempt = 1
		}, billcheck.PostingAnnulled},
		{"a posting of a voided hold never annulled", billcheck.PostingAnnulled, func(d *billcheck.Data) {
			d.Postings[1].Status, d.Postings[1].RegistryStatus = "accepted", "accepted"
		}, ""},
		{"the registry still holds a posting rebill thinks annulled", billcheck.PostingAnnulled, func(d *billcheck.Data) {
			d.Postings[1].RegistryStatus = "accepted"
		}, ""},
		{"the registry accepted a posting rebill abandoned, after its hold was voided", billcheck.PostingAnnulled, func(d *billcheck.Data) {
			d.Postings[1].Status, d.Postings[1].RegistryStatus = "abandoned", "accepted"
		}, ""},
		{"the registry accepted a posting rebill gave up on, its charge in review with its hold released", billcheck.PostingAnnulled,
			func(d *billcheck.Data) {
				d.Charges[2].Status, d.Charges[2].AttemptCount, d.Charges[2].HoldReleased = "requires_review", 1, true
				d.Charges[2].AttemptTimes = d.Charges[2].AttemptTimes[:1]
				d.Postings = d.Postings[:2]
				d.Postings[1].Status, d.Postings[1].RegistryStatus = "failed", "accepted"
				d.Ops = d.Ops[:6]
			}, ""},
		{"the registry still processes a posting rebill gave up on", billcheck.PostingAnnulled, func(d *billcheck.Data) {
			d.Postings[1].Status, d.Postings[1].RegistryStatus = "failed", "processing"
		}, ""},
		{"a discounted price captured by an attempt that began after the deadline", billcheck.DiscountHonest, func(d *billcheck.Data) {
			d.Charges[1].AttemptTimes = []time.Time{d.Bills[2].DiscountEnds.Add(time.Minute)}
		}, ""},
		{"a discounted price captured by an attempt that began exactly at the deadline", billcheck.DiscountHonest, func(d *billcheck.Data) {
			d.Charges[1].AttemptTimes = []time.Time{*d.Bills[2].DiscountEnds}
		}, ""},
		{"a discounted capture of an attempt with no recorded start, authorized after the deadline", billcheck.DiscountHonest, func(d *billcheck.Data) {
			d.OpsOnServiceClock = true
			d.Charges[1].AttemptTimes = nil
			d.Ops[2].At = d.Bills[2].DiscountEnds.Add(time.Second)
		}, ""},
		{"a discounted capture of an attempt with no recorded start, on a gateway's own clock", billcheck.DiscountHonest, func(d *billcheck.Data) {
			d.Charges[1].AttemptTimes = nil
		}, ""},
		{"a fine captured at a made-up price", billcheck.DiscountHonest, func(d *billcheck.Data) {
			d.Ops[3].Amount = 40000
			d.Postings[0].Amount = 40000
		}, ""},
		{"a fine captured at its discount less more than its charge found paid outside rebill", billcheck.DiscountHonest, func(d *billcheck.Data) {
			d.Charges[1].PaidOutside = 20000
			d.Ops[3].Amount, d.Postings[0].Amount = 20000, 20000
		}, ""},
		{"an attempt within the last hour before expiry", billcheck.NoLateAttempt, func(d *billcheck.Data) {
			d.Charges[0].AttemptTimes = []time.Time{d.Bills[0].ExpiresAt.Add(-59 * time.Minute)}
		}, ""},
		{"an attempt exactly at expires_at - 1 h", billcheck.NoLateAttempt, func(d *billcheck.Data) {
			d.Charges[0].AttemptTimes = []time.Time{d.Bills[0].ExpiresAt.Add(-billcheck.LastAttemptMargin)}
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := clean()
			tc.breakIt(d)
			got := billcheck.Check(d)
			want := []string{tc.want}
			if tc.also != "" {
				want = append(want, tc.also)
			}
			require.Equal(t, want, invariants(got), "%v", got)
		})
	}
}

// A posting of an attempt still in flight, or changed only just now, is
// not yet late; one of a charge in review is left to people.
func TestPostingNotYetDueIsNotReported(t *testing.T) {
	for _, status := range []string{"authorized", "capturing", "unknown", "requires_review"} {
		d := clean()
		d.Charges[1].Status = status
		d.Ops = append(d.Ops[:3:3], d.Ops[4:]...) // c3 not captured
		require.Empty(t, billcheck.Check(d), status)
	}
	d := clean()
	d.Charges[1].Status, d.Charges[1].UpdatedAt = "voided", d.Now.Add(-time.Hour)
	d.Ops = append(d.Ops[:3:3], d.Ops[4:]...)
	require.Empty(t, billcheck.Check(d))
}

// The last moment an attempt may start is just before expires_at - 1 h.
func TestAttemptJustBeforeTheLastHourPasses(t *testing.T) {
	d := clean()
	d.Charges[0].AttemptTimes = []time.Time{d.Bills[0].ExpiresAt.Add(-billcheck.LastAttemptMargin - time.Nanosecond)}
	require.Empty(t, billcheck.Check(d))
}

// An attempt rebill scheduled after the last moment (a person's retry of
// a charge in review, a card change) and voided at its "about to call"
// without a call moved no money: only one that reached a gateway breaks
// the rule.
func TestLateAttemptNeverSentPasses(t *testing.T) {
	d := clean()
	late := d.Bills[0].ExpiresAt.Add(30 * 24 * time.Hour)
	d.Charges[0].AttemptCount, d.Charges[0].AttemptTimes = 2, []time.Time{t0, late}
	require.Empty(t, billcheck.Check(d))

	d.Ops = append(d.Ops, billcheck.Op{Gateway: "sim1", Op: "authorize", Status: "declined", Amount: 350000, At: late,
		IdempotencyKey: housing + ":2026-11:1:a2:authorize"})
	require.Equal(t, []string{billcheck.NoLateAttempt}, invariants(billcheck.Check(d)))
}

// A discounted hold placed before the deadline and captured after it
// (the clock moved while the capture was on its way, as it does in dev
// mode, or the deadline passed meanwhile) paid the fine at the discount
// the customer was owed: the capture's service-clock stamp does not make
// it a violation. Nor does an attempt whose start was not recorded when
// its authorization was stamped before the deadline.
func TestDiscountedCaptureStampedAfterTheDeadlineOfAnAttemptBeforeItPasses(t *testing.T) {
	d := clean()
	d.OpsOnServiceClock = true
	ends := *d.Bills[2].DiscountEnds
	d.Charges[1].AttemptTimes = []time.Time{ends.Add(-time.Nanosecond)}
	d.Ops[2].At, d.Ops[3].At = ends.Add(-time.Nanosecond), ends.Add(72*time.Hour)
	require.Empty(t, billcheck.Check(d))

	d.Charges[1].AttemptTimes = nil
	require.Empty(t, billcheck.Check(d))
}

func TestSplitGatewayKeyKeepsColonsOfBillIDs(t *testing.T) {
	key, attempt, kind, ok := billcheck.SplitGatewayKey(housing + ":inv:2026:a7:a12:capture")
	require.True(t, ok)
	require.Equal(t, housing+":inv:2026:a7", key)
	require.Equal(t, 12, attempt)
	require.Equal(t, "capture", kind)
	_, _, _, ok = billcheck.SplitGatewayKey("pi_foreign")
	require.False(t, ok)
}

// A confirmation given in the last hour of a fine's discount covers its
// full price: an attempt that starts then is at the full price.
func TestConfirmationInTheLastHourOfTheDiscountCoversTheFullPrice(t *testing.T) {
	t.Parallel()
	d := clean()
	d.Bills[3].ConfirmedAt = ptr(d.Bills[3].DiscountEnds.Add(-billcheck.LastDiscountedMargin))
	require.Empty(t, billcheck.Check(d))
}
