package stripe

import (
	"context"
	"fmt"

	"github.com/rebill/rebill/charges/gateway"
)

// Refund is not implemented by this adapter yet. It refuses every refund
// with an error that is neither ErrUnavailable nor ErrUnknownOutcome, so
// that no caller retries it or looks it up as if it might have happened:
// nothing was sent to the provider.
func (g *Gateway) Refund(_ context.Context, req gateway.Request) (gateway.Result, error) {
	return gateway.Result{}, fmt.Errorf("refund %q: refunds are not implemented by this adapter yet", req.IdempotencyKey)
}
