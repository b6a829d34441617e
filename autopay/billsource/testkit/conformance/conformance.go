// Package conformance is the behaviour every autopay.BillSource owes the
// pull, as a test suite: run it against an implementation with Run.
package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/autopay"
	"github.com/rebill/rebill/enrollments"
)

// Harness is a source under test, empty, and how to publish to it.
type Harness struct {
	Source autopay.BillSource
	// Kind of the source's bills: housing accounts are ELS, fines' STS.
	Kind enrollments.Kind
	// Publish makes b visible in the source at once.
	Publish func(t *testing.T, b autopay.SourcedBill)
}

// issued is when the suite's bills are issued, bar the late one.
var issued = time.Date(2027, 3, 1, 9, 0, 0, 0, time.UTC)

// Run runs the suite; setup returns a new, empty source each call.
func Run(t *testing.T, setup func(t *testing.T) Harness) {
	t.Run("PagesInPublicationOrderWithinTheLimit", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		a, b := account(h.Kind, 1), account(h.Kind, 2)
		for i := range 5 {
			h.Publish(t, bill(h.Kind, a, i))
		}
		h.Publish(t, bill(h.Kind, b, 100))
		var got []string
		after, pages := int64(0), 0
		for {
			page := pull(t, h.Source, []enrollments.AccountRef{a}, after, 2)
			require.LessOrEqual(t, len(page.Bills), 2, "a page holds at most limit bills")
			require.GreaterOrEqual(t, page.Next, after)
			for _, sb := range page.Bills {
				got = append(got, sb.Bill.BillID)
			}
			pages++
			if !page.HasMore {
				after = page.Next
				break
			}
			require.Greater(t, page.Next, after, "has_more moves forward")
			after = page.Next
		}
		require.Equal(t, []string{billID(h.Kind, 0), billID(h.Kind, 1), billID(h.Kind, 2), billID(h.Kind, 3),
			billID(h.Kind, 4)}, got, "every bill of the account once, in publication order, none of another account")
		require.GreaterOrEqual(t, pages, 3)
		again := pull(t, h.Source, []enrollments.AccountRef{a}, after, 2)
		require.Empty(t, again.Bills, "nothing above the head")
		require.False(t, again.HasMore)
		require.GreaterOrEqual(t, again.Next, after)
	})

	t.Run("LatePublicationOfAnOldBillIsAboveTheHead", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		a := account(h.Kind, 3)
		h.Publish(t, bill(h.Kind, a, 10))
		head := pull(t, h.Source, []enrollments.AccountRef{a}, 0, 10).Next
		old := bill(h.Kind, a, 11)
		old.Bill.IssuedAt = issued.AddDate(0, -2, 0)
		h.Publish(t, old)
		page := pull(t, h.Source, []enrollments.AccountRef{a}, head, 10)
		require.Len(t, page.Bills, 1, "a bill issued long ago but published now comes after the head")
		require.Equal(t, old.Bill.IssuedAt, page.Bills[0].Bill.IssuedAt.UTC())
	})

	t.Run("BillsComeBackAsPublished", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		a := account(h.Kind, 4)
		want := bill(h.Kind, a, 20)
		h.Publish(t, want)
		page := pull(t, h.Source, []enrollments.AccountRef{a}, 0, 10)
		require.Len(t, page.Bills, 1)
		got := page.Bills[0]
		got.Bill.IssuedAt = got.Bill.IssuedAt.UTC()
		require.Equal(t, want, got)
	})

	t.Run("SeveralAccountsAndTheHeadAlone", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		a, b := account(h.Kind, 5), account(h.Kind, 6)
		h.Publish(t, bill(h.Kind, a, 30))
		h.Publish(t, bill(h.Kind, b, 31))
		h.Publish(t, bill(h.Kind, account(h.Kind, 7), 32))
		page := pull(t, h.Source, []enrollments.AccountRef{a, b}, 0, 10)
		require.Len(t, page.Bills, 2)
		headOnly := pull(t, h.Source, nil, 0, 10)
		require.Empty(t, headOnly.Bills, "no account: no bill")
		require.GreaterOrEqual(t, headOnly.Next, page.Next, "but the head")
	})

	t.Run("DuplicatePublicationIsTheSameBill", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		a := account(h.Kind, 8)
		h.Publish(t, bill(h.Kind, a, 40))
		h.Publish(t, bill(h.Kind, a, 40))
		page := pull(t, h.Source, []enrollments.AccountRef{a}, 0, 10)
		require.NotEmpty(t, page.Bills)
		for _, sb := range page.Bills {
			require.Equal(t, bill(h.Kind, a, 40).Bill.BillID, sb.Bill.BillID)
		}
	})
}

func pull(t *testing.T, s autopay.BillSource, accounts []enrollments.AccountRef, after int64, limit int) autopay.Page {
	t.Helper()
	page, err := s.Pull(context.Background(), autopay.PullRequest{Accounts: accounts, After: after, Limit: limit})
	require.NoError(t, err)
	return page
}

// account is the suite's account n: an ELS, or an STS for fines. The
// test's name is not in it, so sources shared by subtests keep them apart
// by n.
func account(kind enrollments.Kind, n int) enrollments.AccountRef {
	if kind == enrollments.Fines {
		return enrollments.AccountRef{STS: fmt.Sprintf("77УА%06d", n)}
	}
	c, _ := enrollments.CanonicalELS(fmt.Sprintf("%02dКА%06d", 10+n%90, n))
	return enrollments.AccountRef{ELS: c}
}

// billID is the suite's bill n: a valid UIN for fines.
func billID(kind enrollments.Kind, n int) string {
	if kind == enrollments.Fines {
		body := fmt.Sprintf("188%016d", n)
		return body + fmt.Sprint(enrollments.UINCheckDigit(body))
	}
	return fmt.Sprintf("HB-%d", n)
}

func bill(kind enrollments.Kind, ref enrollments.AccountRef, n int) autopay.SourcedBill {
	due, _ := enrollments.ParseDate("2027-05-09")
	in := enrollments.BillInput{BillID: billID(kind, n), Amount: 100000 + int64(n), IssuedAt: issued, DueDate: due}
	if kind == enrollments.Fines {
		deadline, _ := enrollments.ParseDate("2027-03-20")
		discounted := int64(50000)
		in.DiscountDeadline, in.DiscountedAmount = &deadline, &discounted
	}
	return autopay.SourcedBill{Account: ref, Bill: in}
}
