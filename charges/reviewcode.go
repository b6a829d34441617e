package charges

import "fmt"

// ReviewCode says why a charge went to requires_review, from a closed set a
// client can act on (the charge's review_code). The charge's review_reason
// is the code's sentence, written for people, with what the hold check
// found appended: it never holds a host, a URL or an internal error, which
// may reach the customer's own key and the console. What automation knew
// (the gateway's error, the job that failed) is logged where the charge
// goes to review.
type ReviewCode string

// Review codes. The OpenAPI document's Charge.review_code lists them, with
// their sentences; a new one is appended there too.
const (
	// ReviewGatewayTimeout: a call got no answer in time (a timeout, a
	// connection lost after sending) on its last try.
	ReviewGatewayTimeout ReviewCode = "gateway_timeout"
	// ReviewGatewayError: a call got an answer rebill cannot act on (an
	// error status, a malformed body) on its last try.
	ReviewGatewayError ReviewCode = "gateway_error"
	// ReviewGatewayUnavailable: the gateway refused to take the call (a
	// 503, an open circuit) for longer than rebill waits (decision 20).
	ReviewGatewayUnavailable ReviewCode = "gateway_unavailable"
	// ReviewOutcomeUnprovable: the gateway can no longer say whether an
	// operation of the attempt happened.
	ReviewOutcomeUnprovable ReviewCode = "outcome_unprovable"
	// ReviewCaptureRefused: the gateway refused the capture of a hold.
	ReviewCaptureRefused ReviewCode = "capture_refused"
	// ReviewVoidRefused: the gateway refused to void a hold that was to be
	// released.
	ReviewVoidRefused ReviewCode = "void_refused"
	// ReviewGatewayNotConfigured: the charge names a gateway this rebill
	// no longer has.
	ReviewGatewayNotConfigured ReviewCode = "gateway_not_configured"
	// ReviewRegistryRejected: a fine's payment was not accepted by the
	// state payment registry, so its hold is not captured.
	ReviewRegistryRejected ReviewCode = "registry_rejected"
	// ReviewRegistryNotConfigured: a fine was held with no registry to
	// post it to.
	ReviewRegistryNotConfigured ReviewCode = "registry_not_configured"
	// ReviewRegistryAnnulled: the registry holds the fine's payment
	// annulled (found by a look-up or a replay), so it is never captured.
	ReviewRegistryAnnulled ReviewCode = "registry_annulled"
	// ReviewRegistryUnanswered: the registry did not accept the fine's
	// payment in time; the posting is abandoned, and annulled should the
	// registry accept it all the same.
	ReviewRegistryUnanswered ReviewCode = "registry_unanswered"
	// ReviewPaidOutsideDisputed: the fine's bill source reports more paid
	// outside rebill than the registry holds, from the last discounted
	// start on.
	ReviewPaidOutsideDisputed ReviewCode = "paid_outside_disputed"
	// ReviewDeclinesLimit: the customer reached the declines allowed per
	// day (decision 32); a person's retry sends the charge on.
	ReviewDeclinesLimit ReviewCode = "declines_limit"
	// ReviewJobDiscarded: River gave up on the charge's job after its
	// last attempt.
	ReviewJobDiscarded ReviewCode = "job_discarded"
	// ReviewUnknownOverdue: the inspector found the outcome unknown past
	// its threshold (decision 29).
	ReviewUnknownOverdue ReviewCode = "unknown_overdue"
	// ReviewStuck: the inspector found the charge in flight with no job,
	// and could not enqueue it again (decision 29).
	ReviewStuck ReviewCode = "stuck"
	// ReviewLegacy: sent to review by a version of rebill before review
	// codes, for a reason the migration could not classify; no code path
	// sets it.
	ReviewLegacy ReviewCode = "legacy"
)

// ReviewCodes lists every ReviewCode, in the order the OpenAPI document
// lists them.
var ReviewCodes = []ReviewCode{ReviewGatewayTimeout, ReviewGatewayError, ReviewGatewayUnavailable,
	ReviewOutcomeUnprovable, ReviewCaptureRefused, ReviewVoidRefused, ReviewGatewayNotConfigured,
	ReviewRegistryRejected, ReviewRegistryNotConfigured, ReviewRegistryAnnulled, ReviewRegistryUnanswered,
	ReviewPaidOutsideDisputed, ReviewDeclinesLimit, ReviewJobDiscarded,
	ReviewUnknownOverdue, ReviewStuck, ReviewLegacy}

var reviewSentences = map[ReviewCode]string{
	ReviewGatewayTimeout:        "the gateway did not answer in time; rebill is asking it what happened",
	ReviewGatewayError:          "the gateway answered with an error rebill cannot act on; rebill is asking it what happened",
	ReviewGatewayUnavailable:    "the gateway was down for longer than rebill waits for it; rebill is asking it what happened",
	ReviewOutcomeUnprovable:     "the gateway can no longer tell whether this attempt's payment went through: check its dashboard before resolving",
	ReviewCaptureRefused:        "the gateway refused to capture the authorized hold",
	ReviewVoidRefused:           "the gateway refused to release the hold",
	ReviewGatewayNotConfigured:  "the charge's gateway is not configured in this rebill",
	ReviewRegistryRejected:      "the state payment registry did not accept the fine's payment, so it was not captured",
	ReviewRegistryNotConfigured: "a fine was held but no payment registry is configured to post it to",
	ReviewRegistryAnnulled:      "the state payment registry holds the fine's payment annulled, so it was not captured and its hold is released",
	ReviewRegistryUnanswered:    "the state payment registry did not accept the fine's payment in time; its hold is released, and the payment is annulled should the registry still accept it",
	ReviewPaidOutsideDisputed:   "the bill source reports more paid outside rebill than the state payment registry holds: the full price is not charged until a person checks which is right",
	ReviewDeclinesLimit:         "velocity limit: the customer reached the declined charges allowed per day; POST /v1/charges/{id}/retry sends it to the gateway",
	ReviewJobDiscarded:          "rebill's job for this charge failed on every try; check the gateway before resolving",
	ReviewUnknownOverdue:        "rebill could not find out in time what the gateway did; check the gateway before resolving",
	ReviewStuck:                 "the charge stopped moving and rebill could not start it again; check the gateway before resolving",
	ReviewLegacy:                "sent to review by an earlier version of rebill; its logs of that time say why",
}

// reviewSet is the assignment of a move to review; its arguments are the
// code's sentence ($1) and the code ($2).
const reviewSet = "review_reason = $1, review_code = $2"

// reviewSetAt is reviewSet for a statement whose sentence and code are its
// arguments number reason and code.
func reviewSetAt(reason, code int) string {
	return fmt.Sprintf("review_reason = $%d, review_code = $%d", reason, code)
}

// Sentence is the review_reason of a charge sent to review with code c:
// for people, the same for every charge with that code.
func (c ReviewCode) Sentence() string { return reviewSentences[c] }
