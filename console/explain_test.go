package console

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/fsm"
	"github.com/rebill/rebill/rebilltype"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/usecases"
)

// What staff see for each error a console action meets: the API's status,
// and a message that never carries an internal error's text.
func TestExplain(t *testing.T) {
	t.Parallel()
	const internal = "Something went wrong; nothing was changed. Try again, or ask an engineer to look at the logs."
	for name, c := range map[string]struct {
		err     error
		status  int
		message string
	}{
		"fields": {rebilltype.Errors{{Field: "evidence", Message: "is required"}, {Field: "outcome", Message: "is unknown"}},
			400, "Not done: evidence is required; outcome is unknown."},
		"form input":             {fmt.Errorf("%w: outcome must be succeeded or failed", errInput), 400, "Not done: outcome must be succeeded or failed."},
		"no such page":           {errNotFound, 404, "Not found: there is no such object, or this key may not see it."},
		"subscription not found": {subscriptions.ErrNotFound, 404, "Not found: there is no such object, or this key may not see it."},
		"charge not found":       {charges.ErrNotFound, 404, "Not found: there is no such object, or this key may not see it."},
		"enrollment not found":   {enrollments.ErrNotFound, 404, "Not found: there is no such object, or this key may not see it."},
		"bill not found":         {enrollments.ErrBillNotFound, 404, "Not found: there is no such object, or this key may not see it."},
		"forbidden":              {usecases.ErrForbidden, 403, "This key may not do that."},
		"subscription transition": {&fsm.TransitionError{Machine: "subscription", From: "cancelled", To: "cancelled", Reason: "the subscription is cancelled"},
			409, "Not done: subscription cannot move from cancelled to cancelled: the subscription is cancelled."},
		"charge transition": {&fsm.TransitionError{Machine: "charge", From: "declined", To: "scheduled"}, 409, "Not done: charge cannot move from declined to scheduled."},
		"bill transition":   {&fsm.TransitionError{Machine: "bill", From: "paid", To: "withdrawn"}, 409, "Not done: bill cannot move from paid to withdrawn."},
		"retry refused": {fmt.Errorf("%w: 3 attempts on this card in 24h0m0s; send a different card", charges.ErrRetryRefused),
			409, "Not done: retry refused: 3 attempts on this card in 24h0m0s; send a different card."},
		"gateway unreachable": {fmt.Errorf("%w: look up charge at sim1: %w", charges.ErrGatewayUnreachable, errors.New("dial tcp: refused")),
			503, "Not done: the payment gateway could not be asked what the charge's last attempt did, so nothing was done. Try again later."},
		"defect":                      {errors.New("pq: relation \"charges\" does not exist"), 500, internal},
		"domain error without a code": {errors.New("widget not found"), 500, internal},
	} {
		status, message := Explain(c.err)
		require.Equal(t, c.status, status, name)
		require.Equal(t, c.message, message, name)
	}
}
