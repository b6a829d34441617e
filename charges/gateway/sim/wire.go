package sim

import (
	"encoding/json"
	"time"

	"github.com/rebill/rebill/charges/gateway"
)

// The JSON that crosses the wire between [Client] and the server. Both ends
// live in this package, so one set of types serves both.

// idempotencyHeader carries the key of an operation call. Go's HTTP
// transport also reads it: a POST that carries it may be resent on a
// keep-alive connection that the server closed before reading it.
const idempotencyHeader = "Idempotency-Key"

// Error codes in errorBody that the client acts on.
const (
	codeUnavailable       = "unavailable"
	codeOperationNotFound = "operation_not_found"
	codeKeyReused         = "idempotency_key_reused"
)

// opBody is the body of authorize, capture and void.
type opBody struct {
	Token           string `json:"token,omitempty"`
	Amount          int64  `json:"amount,omitempty"`
	Currency        string `json:"currency,omitempty"`
	ChargeKey       string `json:"charge_key,omitempty"`
	AuthorizationID string `json:"authorization_id,omitempty"`
	// Receipt is the fiscal receipt sent with the operation, kept as sent
	// so that tests and the dev ledger show what a fiscalizing provider
	// would have filed.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// resultBody is an operation the gateway processed.
type resultBody struct {
	Op             gateway.Op     `json:"op"`
	IdempotencyKey string         `json:"idempotency_key"`
	Reference      string         `json:"reference"`
	Status         gateway.Status `json:"status"`
	DeclineCode    string         `json:"decline_code,omitempty"`
	Hard           bool           `json:"hard"`
	Amount         int64          `json:"amount"`
	Currency       string         `json:"currency"`
	At             time.Time      `json:"at"`
}

func resultBodyOf(o operation) resultBody {
	return resultBody{
		Op:             o.Op,
		IdempotencyKey: o.IdempotencyKey,
		Reference:      o.Reference,
		Status:         o.Status,
		DeclineCode:    o.DeclineCode,
		Hard:           o.Hard,
		Amount:         o.Amount,
		Currency:       o.Currency,
		At:             o.At,
	}
}

func (b resultBody) result() gateway.Result {
	return gateway.Result{
		Op:             b.Op,
		IdempotencyKey: b.IdempotencyKey,
		Reference:      b.Reference,
		Status:         b.Status,
		DeclineCode:    b.DeclineCode,
		Hard:           b.Hard,
		Amount:         b.Amount,
		Currency:       b.Currency,
		At:             b.At,
	}
}

// listBody wraps lists, as rebill's own API does.
type listBody[T any] struct {
	Data []T `json:"data"`
}

// errorBody is every non-200 answer.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// healthBody is the 200 answer of GET /{gateway}/health.
type healthBody struct {
	Gateway string `json:"gateway"`
	Status  string `json:"status"`
}
