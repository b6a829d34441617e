package client

import (
	"context"
	"net/http"

	"github.com/google/uuid"
)

// The generated operations take ids as strings (their path parameters:
// SubscriptionId, ChargeId, EnrollmentId), while responses carry them as
// UUIDs. These take the UUID a response gave, so it goes back as it came,
// and return the object, its error being a *Problem as for every call.

// Subscription reads one subscription (GET /v1/subscriptions/{id}).
func (c *Client) Subscription(ctx context.Context, id uuid.UUID, editors ...RequestEditorFn) (*Subscription, error) {
	res, err := c.GetSubscriptionWithResponse(ctx, id.String(), editors...)
	if err != nil {
		return nil, err
	}
	return decoded(res.JSON200, res.HTTPResponse, res.Body)
}

// Charge reads one charge (GET /v1/charges/{id}).
func (c *Client) Charge(ctx context.Context, id uuid.UUID, editors ...RequestEditorFn) (*Charge, error) {
	res, err := c.GetChargeWithResponse(ctx, id.String(), editors...)
	if err != nil {
		return nil, err
	}
	return decoded(res.JSON200, res.HTTPResponse, res.Body)
}

// Enrollment reads one autopay enrollment (GET /v1/enrollments/{id}).
func (c *Client) Enrollment(ctx context.Context, id uuid.UUID, editors ...RequestEditorFn) (*Enrollment, error) {
	res, err := c.GetEnrollmentWithResponse(ctx, id.String(), editors...)
	if err != nil {
		return nil, err
	}
	return decoded(res.JSON200, res.HTTPResponse, res.Body)
}

// decoded is a 200's typed body, or an error when it did not decode.
func decoded[T any](v *T, res *http.Response, body []byte) (*T, error) {
	if v == nil {
		return nil, unexpected(res, body)
	}
	return v, nil
}
