package charges

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/fault"
	"github.com/rebill/rebill/platform/fsm"
)

// A refund returns captured money of a succeeded charge, in full or in
// part, at the charge's gateway. A charge may have several refunds,
// numbered from 1 (n); each has its own gateway idempotency key,
// `<charge key>:r<n>:refund` ([Refund.GatewayKey], parsed by
// [ParseRefundKey]), so a retried send is performed once and a lost answer
// is looked up by that key, never sent blind under a new one.
//
// The charge row keeps what its refunds hold of the capture: refund_reserved
// is the sum of the refunds that did not fail, which [Store.RequestRefund]
// raises in the very statement that checks it stays within the capture
// (the charge row's lock orders concurrent requests, on any number of
// nodes: the second re-reads the row the first wrote, and its check
// fails if the sum would pass the capture); amount_refunded is the sum of
// those that succeeded. A failed refund gives its reservation back. The
// charge stays succeeded: refunds are a machine of their own.
//
// Every allowed move of a refund is listed once, in [RefundMachine]'s
// table; each is a guarded UPDATE (`WHERE status = ANY(from)`) that also
// writes the charge's sums, in one statement, so a job that runs twice, or
// late, changes nothing the second time.
//
//	pending --(the gateway refunded it)--> succeeded
//	pending --(the gateway refused it)--> failed
//	pending --(no answer: timeout, reset)--> unknown --(looked up by key)--> succeeded | failed
//	unknown --(the gateway never got it)--> pending (sent again under the same key)
//
// succeeded and failed are final.

// RefundStatus is where a refund stands.
type RefundStatus string

const (
	// RefundPending: requested, its amount reserved; the send job is
	// enqueued, or the send is in flight.
	RefundPending RefundStatus = "pending"
	// RefundUnknown: sent, and no answer came; the look-up job asks the
	// gateway by the refund's key.
	RefundUnknown RefundStatus = "unknown"
	// RefundSucceeded: the gateway returned the money. Final.
	RefundSucceeded RefundStatus = "succeeded"
	// RefundFailed: the gateway refused it (or it could not be sent); its
	// reservation is given back. Final.
	RefundFailed RefundStatus = "failed"
)

// refundTransitions lists, for every status, the statuses a refund may
// move to: the one list of allowed moves, which moveRefund asks before
// its guarded UPDATE; the diagram above draws the same graph.
var refundTransitions = map[RefundStatus][]RefundStatus{
	RefundPending: {RefundSucceeded, RefundFailed, RefundUnknown},
	// The look-up's answer; or the gateway never got the send, which goes
	// out again under the same key.
	RefundUnknown:   {RefundSucceeded, RefundFailed, RefundPending},
	RefundSucceeded: nil,
	RefundFailed:    nil,
}

// RefundStatuses lists every refund status, in the order of the life
// cycle.
var RefundStatuses = []RefundStatus{RefundPending, RefundUnknown, RefundSucceeded, RefundFailed}

// RefundMachine is the refund state machine: its table, and the
// *fsm.TransitionError of a move it forbids.
var RefundMachine = fsm.New("refund", RefundStatuses, refundTransitions)

// RefundReason is why a refund was asked for: Stripe's closed set, which
// support teams and clients already know.
type RefundReason string

// The reasons of a refund.
const (
	ReasonDuplicate           RefundReason = "duplicate"
	ReasonFraudulent          RefundReason = "fraudulent"
	ReasonRequestedByCustomer RefundReason = "requested_by_customer"
)

// RefundReasons lists every reason a refund may give.
var RefundReasons = []RefundReason{ReasonDuplicate, ReasonFraudulent, ReasonRequestedByCustomer}

// Valid reports whether r is one of RefundReasons.
func (r RefundReason) Valid() bool {
	for _, x := range RefundReasons {
		if r == x {
			return true
		}
	}
	return false
}

// Refund is one return of a charge's captured money.
type Refund struct {
	ID       uuid.UUID
	ChargeID uuid.UUID
	// N numbers the charge's refunds from 1, in the order they were
	// requested.
	N          int
	GatewayKey string
	Amount     int64
	Currency   string
	Reason     RefundReason
	Status     RefundStatus
	// FailureCode is the gateway's reason for a failed refund.
	FailureCode string
	Gateway     string
	// GatewayRef is the gateway's id of the refund, once it answered.
	GatewayRef string
	// Actor is who asked (an API key's id, a console user); Evidence
	// their note on why.
	Actor     string
	Evidence  string
	CreatedAt time.Time
	UpdatedAt time.Time
	// SentAt is when it was first sent; nil until then.
	SentAt *time.Time
	// SettledAt is when it became succeeded or failed; nil until then.
	SettledAt *time.Time
	// CustomerID is the charge's customer, whom its events concern.
	CustomerID string
}

// RefundKey is the gateway idempotency key of a charge's n-th refund,
// `<charge key>:r<n>:refund`: the charge's keys (Charge.GatewayKey) number
// attempts with `a`, refunds with `r`, so neither can take the other's.
func RefundKey(chargeKey string, n int) string {
	return fmt.Sprintf("%s:r%d:%s", chargeKey, n, gateway.OpRefund)
}

// ParseRefundKey splits a refund's gateway key made by [RefundKey] into
// the charge's business key and the refund's number. ok is false for any
// other key, a charge operation's included (ParseGatewayKey reads those).
func ParseRefundKey(key string) (chargeKey string, n int, ok bool) {
	rest, opText, found := cutLast(key)
	if !found || gateway.Op(opText) != gateway.OpRefund {
		return "", 0, false
	}
	chargeKey, nText, found := cutLast(rest)
	if !found || !strings.HasPrefix(nText, "r") {
		return "", 0, false
	}
	n, err := strconv.Atoi(nText[1:])
	if err != nil || n < 1 || strconv.Itoa(n) != nText[1:] {
		return "", 0, false
	}
	if _, _, found := strings.Cut(chargeKey, ":"); !found {
		return "", 0, false
	}
	return chargeKey, n, true
}

var (
	// ErrRefundNotFound: no refund with that id.
	ErrRefundNotFound = fault.New(fault.NotFound, "refund not found")
	// ErrNotRefundable: only a succeeded charge has money to return.
	ErrNotRefundable = fault.New(fault.Conflict, "only a succeeded charge can be refunded")
	// ErrFineNotRefundable: a fine's payment went to the state through the
	// payment registry; it is returned through the state's own procedure
	// (a claim to the body that issued the fine), not by a card refund,
	// which would leave the registry holding a payment the state never
	// got.
	ErrFineNotRefundable = fault.New(fault.Conflict,
		"a fine's payment is returned through the state's own procedure, not by a card refund")
	// ErrRefundReason: a refund gives one of RefundReasons.
	ErrRefundReason = fault.New(fault.Invalid, "reason must be duplicate, fraudulent or requested_by_customer")
)

// RefundExceedsError refuses a refund larger than what is left of the
// capture; it carries the amounts so the answer can show them.
type RefundExceedsError struct {
	Requested int64
	Captured  int64
	// Reserved is what earlier refunds hold (succeeded or in flight).
	Reserved int64
	Currency string
}

// Remaining is what may still be refunded.
func (e *RefundExceedsError) Remaining() int64 { return e.Captured - e.Reserved }

func (e *RefundExceedsError) Error() string {
	if e.Requested == 0 {
		return fmt.Sprintf("nothing is left to refund: %d %s captured, %d refunded or being refunded",
			e.Captured, e.Currency, e.Reserved)
	}
	return fmt.Sprintf("refund of %d %s is above what is left: %d captured, %d refunded or being refunded, %d left",
		e.Requested, e.Currency, e.Captured, e.Reserved, e.Remaining())
}

// ErrorCode: the charge's state does not allow it (409).
func (*RefundExceedsError) ErrorCode() fault.Code { return fault.Conflict }

// RefundRequest is a refund to make.
type RefundRequest struct {
	ChargeID uuid.UUID
	// Amount in minor units; 0 refunds all that is left.
	Amount   int64
	Reason   RefundReason
	Actor    string
	Evidence string
}

const refundColumns = `id, charge_id, n, gateway_key, amount, currency, reason, status, coalesce(failure_code, ''),
	gateway, coalesce(gateway_ref, ''), actor, coalesce(evidence, ''), created_at, updated_at, sent_at, settled_at,
	(SELECT customer_id FROM charges WHERE charges.id = refunds.charge_id) AS customer_id`

func scanRefund(row pgx.Row) (Refund, error) {
	var r Refund
	err := row.Scan(&r.ID, &r.ChargeID, &r.N, &r.GatewayKey, &r.Amount, &r.Currency, &r.Reason, &r.Status, &r.FailureCode,
		&r.Gateway, &r.GatewayRef, &r.Actor, &r.Evidence, &r.CreatedAt, &r.UpdatedAt, &r.SentAt, &r.SettledAt, &r.CustomerID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, ErrRefundNotFound
	}
	if err != nil {
		return Refund{}, fmt.Errorf("scan refund: %w", err)
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return r, nil
}

func collectRefunds(rows pgx.Rows, err error) ([]Refund, error) {
	if err != nil {
		return nil, fmt.Errorf("query refunds: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Refund, error) { return scanRefund(row) })
	if err != nil {
		return nil, fmt.Errorf("query refunds: %w", err)
	}
	return out, nil
}

// maxRestTries bounds the re-reads of a request for all that is left
// whose charge another refund changed between the read and the
// reservation: each lost race means another refund was reserved, so a
// charge runs out of money to return long before this.
const maxRestTries = 16

// RequestRefund reserves req's amount of a succeeded charge's capture and
// stores the refund, pending, with its send job, in tx. The check and the
// reservation are one guarded UPDATE of the charge row: the sum of the
// refunds that did not fail never passes the capture, however many
// requests race on however many nodes. A request for the rest (Amount 0)
// reads what is left and reserves exactly that, guarded by the sum it
// read; a concurrent reservation makes it read again.
//
// Refused: ErrNotFound, ErrNotRefundable (not succeeded),
// ErrFineNotRefundable (a charge posted to the payment registry),
// *RefundExceedsError (above what is left, or nothing left),
// ErrRefundReason.
func (s *Store) RequestRefund(ctx context.Context, tx pgx.Tx, req RefundRequest, now time.Time) (Refund, error) {
	if !req.Reason.Valid() {
		return Refund{}, ErrRefundReason
	}
	if req.Amount < 0 {
		return Refund{}, fault.New(fault.Invalid, "amount must be positive")
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Refund{}, fmt.Errorf("new refund id: %w", err)
	}
	for range maxRestTries {
		amount, expected := req.Amount, int64(-1)
		if amount == 0 {
			c, reserved, err := refundState(ctx, tx, req.ChargeID)
			if err != nil {
				return Refund{}, err
			}
			if amount = c.Amount - reserved; amount <= 0 {
				return Refund{}, &RefundExceedsError{Captured: c.Amount, Reserved: reserved, Currency: c.Currency}
			}
			expected = reserved
		}
		r, err := scanRefund(tx.QueryRow(ctx, `WITH c AS (
				UPDATE charges SET refund_reserved = refund_reserved + $2, refund_count = refund_count + 1
				WHERE id = $1 AND status = $3 AND coalesce(registry_uin, '') = ''
				  AND refund_reserved + $2 <= amount AND ($4 < 0 OR refund_reserved = $4)
				RETURNING id, coalesce(subscription_id, enrollment_id)::text || ':' || period_key AS key, refund_count,
					currency, gateway
			)
			INSERT INTO refunds (id, charge_id, n, gateway_key, amount, currency, reason, status, gateway, actor, evidence,
				created_at, updated_at)
			SELECT $5, c.id, c.refund_count, c.key || ':r' || c.refund_count || ':' || $6, $2, c.currency, $7, $8,
				c.gateway, $9, nullif($10, ''), $11, $11
			FROM c
			RETURNING `+refundColumns,
			req.ChargeID, amount, string(Succeeded), expected, id, string(gateway.OpRefund), string(req.Reason),
			string(RefundPending), req.Actor, req.Evidence, now))
		if errors.Is(err, ErrRefundNotFound) {
			// Held back: say why, from the charge as it is now.
			c, reserved, err := refundState(ctx, tx, req.ChargeID)
			if err != nil {
				return Refund{}, err
			}
			if req.Amount == 0 && reserved < c.Amount {
				continue // another refund was reserved since the read: read again
			}
			return Refund{}, &RefundExceedsError{Requested: req.Amount, Captured: c.Amount, Reserved: reserved, Currency: c.Currency}
		}
		if err != nil {
			return Refund{}, fmt.Errorf("charge %s: request a refund: %w", req.ChargeID, err)
		}
		if err := s.enqueue(ctx, tx, []river.InsertManyParams{{Args: RefundSendArgs{RefundID: r.ID}}}); err != nil {
			return Refund{}, err
		}
		if err := s.publishRefund(ctx, tx, EventRefundCreated, r, now); err != nil {
			return Refund{}, err
		}
		return r, nil
	}
	return Refund{}, fmt.Errorf("charge %s: request a refund: the charge kept changing", req.ChargeID)
}

// refundState reads a charge and what its refunds reserve of it, and
// refuses one that cannot be refunded at all.
func refundState(ctx context.Context, db DBTX, id uuid.UUID) (Charge, int64, error) {
	c, err := Get(ctx, db, id)
	if err != nil {
		return Charge{}, 0, err
	}
	if err := refundable(c); err != nil {
		return Charge{}, 0, err
	}
	var reserved int64
	if err := db.QueryRow(ctx, `SELECT refund_reserved FROM charges WHERE id = $1`, id).Scan(&reserved); err != nil {
		return Charge{}, 0, fmt.Errorf("charge %s: read its refunds: %w", id, err)
	}
	return c, reserved, nil
}

// refundable is nil when c may be refunded, else why not.
func refundable(c Charge) error {
	if c.RegistryUIN != "" {
		return ErrFineNotRefundable
	}
	if c.Status != Succeeded {
		return fmt.Errorf("charge %s is %s: %w", c.ID, c.Status, ErrNotRefundable)
	}
	return nil
}

// refundMove is one guarded move of a refund and what it writes besides
// its status.
type refundMove struct {
	from        []RefundStatus
	to          RefundStatus
	gatewayRef  string // kept when empty
	failureCode string // cleared when empty
	sent        bool   // sets sent_at, unless set before
}

// moveRefund is the one guarded move of a refund, and the only statement
// that writes refunds.status: from one of m.from to m.to (as the machine
// allows it), with the charge's sums in the same statement (a succeeded
// refund adds to amount_refunded, a failed one gives its reservation
// back). It publishes the refund's event and, when the charge is now
// refunded in full, charge.refunded. ok is false when the guard held the
// refund back (another run moved it first).
func (s *Store) moveRefund(ctx context.Context, tx pgx.Tx, id uuid.UUID, m refundMove, now time.Time) (Refund, bool, error) {
	mv, err := RefundMachine.Move(m.to, m.from...)
	if err != nil {
		return Refund{}, false, err
	}
	var refunded, captured int64
	var settled *time.Time
	if mv.To() == RefundSucceeded || mv.To() == RefundFailed {
		settled = &now
	}
	row := tx.QueryRow(ctx, `WITH r AS (
			UPDATE refunds SET status = $3, updated_at = $4, gateway_ref = coalesce(nullif($5, ''), gateway_ref),
				failure_code = nullif($6, ''), sent_at = CASE WHEN $7 THEN coalesce(sent_at, $4) ELSE sent_at END,
				settled_at = $8
			WHERE id = $1 AND status = ANY($2)
			RETURNING `+refundColumns+`
		), c AS (
			UPDATE charges SET
				amount_refunded = amount_refunded + CASE WHEN r.status = $9 THEN r.amount ELSE 0 END,
				refund_reserved = refund_reserved - CASE WHEN r.status = $10 THEN r.amount ELSE 0 END
			FROM r WHERE charges.id = r.charge_id AND r.status IN ($9, $10)
			RETURNING charges.amount_refunded, charges.amount
		)
		SELECT r.*, coalesce((SELECT amount_refunded FROM c), 0), coalesce((SELECT amount FROM c), 0) FROM r`,
		id, fsm.Texts(mv.From()), string(mv.To()), now, m.gatewayRef, m.failureCode, m.sent, settled,
		string(RefundSucceeded), string(RefundFailed))
	var r Refund
	err = row.Scan(&r.ID, &r.ChargeID, &r.N, &r.GatewayKey, &r.Amount, &r.Currency, &r.Reason, &r.Status, &r.FailureCode,
		&r.Gateway, &r.GatewayRef, &r.Actor, &r.Evidence, &r.CreatedAt, &r.UpdatedAt, &r.SentAt, &r.SettledAt,
		&r.CustomerID, &refunded, &captured)
	if errors.Is(err, pgx.ErrNoRows) {
		return Refund{}, false, nil
	}
	if err != nil {
		return Refund{}, false, fmt.Errorf("refund %s to %s: %w", id, m.to, err)
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	if event, ok := refundEvents[r.Status]; ok {
		if err := s.publishRefund(ctx, tx, event, r, now); err != nil {
			return Refund{}, false, err
		}
	}
	if r.Status == RefundSucceeded && refunded == captured {
		c, err := Get(ctx, tx, r.ChargeID)
		if err != nil {
			return Refund{}, false, err
		}
		if err := s.publish(ctx, tx, EventRefunded, c, now); err != nil {
			return Refund{}, false, err
		}
	}
	return r, true, nil
}

// GetRefund returns one refund. Returns ErrRefundNotFound.
func GetRefund(ctx context.Context, db DBTX, id uuid.UUID) (Refund, error) {
	return scanRefund(db.QueryRow(ctx, `SELECT `+refundColumns+` FROM refunds WHERE id = $1`, id))
}

// RefundsOf returns a charge's refunds, oldest first.
func RefundsOf(ctx context.Context, db DBTX, chargeID uuid.UUID) ([]Refund, error) {
	return collectRefunds(db.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE charge_id = $1 ORDER BY n`, chargeID))
}

// RefundsByKeys returns the refunds with these gateway keys; keys that
// name none are left out: reconciliation matches a gateway's refund
// operations with them.
func RefundsByKeys(ctx context.Context, db DBTX, keys []string) ([]Refund, error) {
	return collectRefunds(db.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE gateway_key = ANY($1) ORDER BY gateway_key`, keys))
}

// RefundsSettled returns the refunds of gateway (every gateway for "")
// that succeeded in [from, to) of the service clock, in the order they
// did: what the books and the daily report count as money returned, each
// with its gateway, currency and amount.
func RefundsSettled(ctx context.Context, db DBTX, gw string, from, to time.Time) ([]Refund, error) {
	return collectRefunds(db.Query(ctx, `SELECT `+refundColumns+` FROM refunds
		WHERE settled_at >= $1 AND settled_at < $2 AND status = $3 AND ($4 = '' OR gateway = $4)
		ORDER BY settled_at, id`, from, to, string(RefundSucceeded), gw))
}

// RefundsStuckUnknown returns the refunds whose outcome has been unknown
// since before olderThan, oldest first: their look-ups have not settled
// them, and a person may need the gateway's dashboard.
func RefundsStuckUnknown(ctx context.Context, db DBTX, olderThan time.Time) ([]Refund, error) {
	return collectRefunds(db.Query(ctx, `SELECT `+refundColumns+` FROM refunds
		WHERE status = $1 AND updated_at < $2 ORDER BY updated_at, id`, string(RefundUnknown), olderThan))
}

// CountRefundsUnknown counts the refunds whose outcome is unknown, by
// gateway, for the metrics.
func CountRefundsUnknown(ctx context.Context, db DBTX) (map[string]int64, error) {
	rows, err := db.Query(ctx, `SELECT gateway, count(*) FROM refunds WHERE status = $1 GROUP BY 1`, string(RefundUnknown))
	if err != nil {
		return nil, fmt.Errorf("count unknown refunds: %w", err)
	}
	out := map[string]int64{}
	var gw string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&gw, &n}, func() error { out[gw] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("count unknown refunds: %w", err)
	}
	return out, nil
}

// RefundsPage returns a charge's refunds in the order they were requested,
// after the refund numbered after (0: from the first), at most limit.
func RefundsPage(ctx context.Context, db DBTX, chargeID uuid.UUID, after int64, limit int) ([]Refund, error) {
	return collectRefunds(db.Query(ctx, `SELECT `+refundColumns+` FROM refunds WHERE charge_id = $1 AND n > $2
		ORDER BY n LIMIT $3`, chargeID, after, limit))
}
