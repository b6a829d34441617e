package sim

import (
	"crypto/sha256"
	"strconv"
	"strings"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// tokenKind is the test-token class that decides how the sim behaves.
type tokenKind string

const (
	kindOK           tokenKind = "ok"
	kindDeclineFunds tokenKind = "decline_funds"
	kindDeclineHard  tokenKind = "decline_hard"
	kindLostResponse tokenKind = "lost_response"
	kindFlaky        tokenKind = "flaky"
	// kindFundsAfter is a recovering token (see recoveryDelay). An
	// authorization records the class it behaved as, decline_funds or ok.
	kindFundsAfter tokenKind = "funds_after"
	kindInvalid    tokenKind = "invalid"
)

// tokenPrefixes maps test-token prefixes to their class.
var tokenPrefixes = []struct {
	prefix string
	kind   tokenKind
}{
	{"tok_ok", kindOK},
	{"tok_decline_funds", kindDeclineFunds},
	{"tok_decline_hard", kindDeclineHard},
	{"tok_lost_response", kindLostResponse},
	{"tok_flaky", kindFlaky},
}

func classify(token string) tokenKind {
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(token, p.prefix) {
			return p.kind
		}
	}
	if _, ok := recoveryDelay(token); ok {
		return kindFundsAfter
	}
	return kindInvalid
}

// fundsAfterPrefix starts a recovering token: tok_funds_after_<N>d or
// tok_funds_after_<N>h, optionally followed by "_" and anything, so that
// each subscription of a test can have a card of its own.
const fundsAfterPrefix = "tok_funds_after_"

// recoveryUnits are the units a recovering token's delay may be given in,
// with the largest count each allows: a month either way.
var recoveryUnits = map[byte]struct {
	unit time.Duration
	max  int
}{
	'd': {24 * time.Hour, 30},
	'h': {time.Hour, 720},
}

// recoveryDelay parses a recovering token and returns how long after its
// first attempt it stops being declined. The count is 1 or more, written
// without leading zeros, so that one delay has one spelling; anything else
// is no recovering token (and so an invalid one).
func recoveryDelay(token string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(token, fundsAfterPrefix)
	if !ok {
		return 0, false
	}
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	if digits == 0 || digits > 3 || rest[0] == '0' || digits == len(rest) {
		return 0, false
	}
	u, ok := recoveryUnits[rest[digits]]
	if !ok {
		return 0, false
	}
	if tail := rest[digits+1:]; tail != "" && tail[0] != '_' {
		return 0, false
	}
	n, err := strconv.Atoi(rest[:digits])
	if err != nil || n > u.max {
		return 0, false
	}
	return time.Duration(n) * u.unit, true
}

// recoveredKind is how a recovering token authorizes at at, given the
// time of its first attempt: declined like tok_decline_funds until its
// delay has passed, then like tok_ok.
func recoveredKind(token string, first, at time.Time) tokenKind {
	delay, _ := recoveryDelay(token)
	if at.Before(first.Add(delay)) {
		return kindDeclineFunds
	}
	return kindOK
}

// tokenHash identifies a token in the books without keeping it: only
// recovering tokens, which are test tokens, are ever hashed.
func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// last4 keeps what the ledger may show of a token. Runes, not bytes, so the
// stored text stays valid UTF-8 whatever the caller sent.
func last4(token string) string {
	r := []rune(token)
	if len(r) > 4 {
		r = r[len(r)-4:]
	}
	return string(r)
}

// verdict is the provider's rules for a new operation, whichever books
// keep it: an authorize follows the token's class; a capture or void
// needs auth, the succeeded authorization it names (nil: none), not yet
// settled by another capture or void (settledBy, empty when none), and a
// capture its exact amount. A refund needs the authorization captured
// (settledBy a capture), its currency, and an amount that with the
// succeeded refunds before it (refunded) stays within the capture.
func verdict(req opRequest, kind tokenKind, auth *operation, settledBy gateway.Op, refunded int64) operation {
	o := operation{
		Op:              req.Op,
		IdempotencyKey:  req.IdempotencyKey,
		AuthorizationID: req.AuthorizationID,
		TokenLast4:      last4(req.Token),
		Kind:            kind,
		ChargeKey:       req.ChargeKey,
		Amount:          req.Amount,
		Currency:        req.Currency,
		Status:          gateway.StatusSucceeded,
		Receipt:         req.Receipt,
	}
	fail := func(code string) operation {
		o.Status, o.DeclineCode = gateway.StatusFailed, code
		return o
	}
	if req.Op == gateway.OpAuthorize {
		switch kind {
		case kindDeclineFunds:
			o.Status, o.DeclineCode = gateway.StatusDeclined, "insufficient_funds"
		case kindDeclineHard:
			o.Status, o.DeclineCode, o.Hard = gateway.StatusDeclined, "stolen_card", true
		case kindInvalid:
			return fail("invalid_token")
		}
		return o
	}
	if auth == nil {
		return fail("invalid_authorization")
	}
	if o.TokenLast4 == "" {
		o.TokenLast4 = auth.TokenLast4
	}
	if req.Op == gateway.OpVoid {
		o.Amount, o.Currency = auth.Amount, auth.Currency
	}
	if auth.Status != gateway.StatusSucceeded ||
		(req.Op == gateway.OpCapture && (req.Amount != auth.Amount || req.Currency != auth.Currency)) {
		return fail("invalid_authorization")
	}
	if req.Op == gateway.OpRefund {
		switch {
		case settledBy != gateway.OpCapture:
			return fail("not_captured")
		case req.Currency != auth.Currency:
			return fail("currency_mismatch")
		case refunded+req.Amount > auth.Amount:
			return fail("amount_exceeds_captured")
		}
		return o
	}
	switch settledBy {
	case "":
		return o
	case gateway.OpCapture:
		return fail("already_captured")
	default:
		return fail("already_voided")
	}
}
