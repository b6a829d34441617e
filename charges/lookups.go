package charges

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rebill/rebill/charges/gateway"
)

// ParseGatewayKey splits a gateway idempotency key made by
// [Charge.GatewayKey] into the charge's business key, the attempt and the
// operation. ok is false for a key rebill did not make: reconciliation and
// the audit report such an operation as unknown to rebill.
func ParseGatewayKey(key string) (chargeKey string, attempt int, op gateway.Op, ok bool) {
	rest, opText, found := cutLast(key)
	if !found {
		return "", 0, "", false
	}
	chargeKey, attemptText, found := cutLast(rest)
	if !found || !strings.HasPrefix(attemptText, "a") {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(attemptText[1:])
	if err != nil || n < 1 {
		return "", 0, "", false
	}
	switch op = gateway.Op(opText); op {
	case gateway.OpAuthorize, gateway.OpCapture, gateway.OpVoid:
	default:
		return "", 0, "", false
	}
	if _, _, found := strings.Cut(chargeKey, ":"); !found {
		return "", 0, "", false
	}
	return chargeKey, n, op, true
}

func cutLast(s string) (before, after string, found bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// ByKeys returns the charges with these business keys
// (`<owner_id>:<period_key>`, the owner a subscription or an enrollment);
// keys that name no charge, or are malformed, are left out. The owner is a
// UUID, which holds no ':', so the key splits at its first ':' and the
// rest is the period key or bill id whatever ':' a bill id holds.
func ByKeys(ctx context.Context, db DBTX, keys []string) ([]Charge, error) {
	owners := make([][16]byte, 0, len(keys))
	periods := make([]string, 0, len(keys))
	for _, k := range keys {
		owner, period, ok := strings.Cut(k, ":")
		id, err := uuid.Parse(owner)
		if !ok || err != nil || len(owner) != 36 {
			continue
		}
		owners, periods = append(owners, id), append(periods, period)
	}
	if len(owners) == 0 {
		return nil, nil
	}
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE (subscription_id, period_key) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))
		   OR (enrollment_id, period_key) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))`, owners, periods))
}

// ByIDs returns the charges with these ids; ids that name no charge are
// left out.
func ByIDs(ctx context.Context, db DBTX, ids []uuid.UUID) ([]Charge, error) {
	return collect(db.Query(ctx, `SELECT `+columns+` FROM charges WHERE id = ANY($1) ORDER BY id`, ids))
}

// SettledOn returns the charges of gateway (every gateway for "") that
// reached a final status (succeeded, failed, voided) in [from, to) of the
// service clock, the ones a day's reconciliation expects the gateway to
// know about, in the order they reached it. A later change of a settled
// charge that keeps its status (a hold check's note) does not move it to
// another day.
func SettledOn(ctx context.Context, db DBTX, gw string, from, to time.Time) ([]Charge, error) {
	return collect(db.Query(ctx, `SELECT `+columns+` FROM `+SettledBetweenSQL+`
		WHERE status = ANY($4) AND ($3 = '' OR gateway = $3)
		ORDER BY `+settledAtSQL+`, id`, from, to, gw, texts([]Status{Succeeded, Failed, Voided})))
}

// ByPeriodStart returns the charges of periods that began in [from, to),
// oldest first: the periods a self-audit of that range judges.
func ByPeriodStart(ctx context.Context, db DBTX, from, to time.Time) ([]Charge, error) {
	cs, err := collect(db.Query(ctx, `SELECT `+columns+` FROM charges
		WHERE period_start >= $1 AND period_start < $2 ORDER BY period_start, id`, from, to))
	if err != nil {
		return nil, fmt.Errorf("charges of periods from %s to %s: %w", from.Format(time.DateOnly), to.Format(time.DateOnly), err)
	}
	return cs, nil
}
