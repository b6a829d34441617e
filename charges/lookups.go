package charges

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	return collect(db.Query(ctx, `SELECT `+columns+` FROM `+settledBetweenSQL+`
		WHERE status = ANY($4) AND ($3 = '' OR gateway = $3)
		ORDER BY `+settledAtSQL+`, id`, from, to, gw, texts([]Status{Succeeded, Failed, Voided})))
}

// SettledTotals are one gateway's and currency's charges that settled in
// a range, counted under the status each holds now.
type SettledTotals struct {
	Gateway        string
	Currency       string
	CapturedCount  int64
	CapturedAmount int64
	DeclinedCount  int64 // soft declines waiting for dunning
	FailedCount    int64 // hard declines, refused requests, dunning exhausted
	VoidedCount    int64
}

// SettledTotalsBetween sums the charges whose status last changed in
// [from, to) to succeeded, declined, failed or voided (their settled_at),
// by gateway and currency. A charge counts once, under the status it
// holds now: a soft decline recovered by dunning counts as captured on the
// day of the capture, and a declined charge whose card changes while it
// waits stays on the day of its decline.
func SettledTotalsBetween(ctx context.Context, db DBTX, from, to time.Time) ([]SettledTotals, error) {
	rows, err := db.Query(ctx, `SELECT gateway, currency,
			count(*) FILTER (WHERE status = $3),
			coalesce(sum(amount) FILTER (WHERE status = $3), 0)::bigint,
			count(*) FILTER (WHERE status = $4),
			count(*) FILTER (WHERE status = $5),
			count(*) FILTER (WHERE status = $6)
		FROM `+settledBetweenSQL+`
		WHERE status = ANY(ARRAY[$3, $4, $5, $6])
		GROUP BY 1, 2 ORDER BY 1, 2`, from, to, string(Succeeded), string(Declined), string(Failed), string(Voided))
	if err != nil {
		return nil, fmt.Errorf("settled charge totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SettledTotals, error) {
		var t SettledTotals
		err := row.Scan(&t.Gateway, &t.Currency, &t.CapturedCount, &t.CapturedAmount, &t.DeclinedCount, &t.FailedCount, &t.VoidedCount)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("settled charge totals: %w", err)
	}
	return out, nil
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
