package client

import (
	"context"
	"iter"
	"net/http"
)

// PageFunc fetches the page at cursor (nil: the first) and returns its
// items and the next cursor (nil on the last page).
type PageFunc[T any] func(ctx context.Context, cursor *string) (items []T, next *string, err error)

// All walks every item of a cursor-paginated list, fetching a page only
// when the previous one is used up. An error is yielded once, with a zero
// item, and ends the walk; breaking out of the loop fetches nothing more.
func All[T any](ctx context.Context, page PageFunc[T]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var cursor *string
		for {
			items, next, err := page(ctx, cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, item := range items {
				if !yield(item, nil) {
					return
				}
			}
			if next == nil || *next == "" {
				return
			}
			cursor = next
		}
	}
}

// pageOf turns a list answer into a page; list is nil when the answer was
// not the documented JSON.
func pageOf[L any, T any](list *L, res *http.Response, body []byte, get func(*L) ([]T, *string)) ([]T, *string, error) {
	if list == nil {
		return nil, nil, unexpected(res, body)
	}
	items, next := get(list)
	return items, next, nil
}

// Subscriptions walks GET /v1/subscriptions; params.Cursor is ignored.
func (c *Client) Subscriptions(ctx context.Context, params ListSubscriptionsParams) iter.Seq2[Subscription, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Subscription, *string, error) {
		params.Cursor = cursor
		r, err := c.ListSubscriptionsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *SubscriptionList) ([]Subscription, *string) { return l.Data, l.NextCursor })
	})
}

// SubscriptionCharges walks GET /v1/subscriptions/{id}/charges.
func (c *Client) SubscriptionCharges(ctx context.Context, id SubscriptionId, params ListSubscriptionChargesParams) iter.Seq2[Charge, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Charge, *string, error) {
		params.Cursor = cursor
		r, err := c.ListSubscriptionChargesWithResponse(ctx, id, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, chargePage)
	})
}

// SubscriptionEvents walks GET /v1/subscriptions/{id}/events (oldest first).
func (c *Client) SubscriptionEvents(ctx context.Context, id SubscriptionId, params ListSubscriptionEventsParams) iter.Seq2[Event, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Event, *string, error) {
		params.Cursor = cursor
		r, err := c.ListSubscriptionEventsWithResponse(ctx, id, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *EventList) ([]Event, *string) { return l.Data, l.NextCursor })
	})
}

// ReviewQueue walks GET /v1/review-queue.
func (c *Client) ReviewQueue(ctx context.Context, params ListReviewQueueParams) iter.Seq2[Charge, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Charge, *string, error) {
		params.Cursor = cursor
		r, err := c.ListReviewQueueWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, chargePage)
	})
}

// Events walks GET /v1/events (newest first).
func (c *Client) Events(ctx context.Context, params ListEventsParams) iter.Seq2[NotificationEvent, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]NotificationEvent, *string, error) {
		params.Cursor = cursor
		r, err := c.ListEventsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *NotificationEventList) ([]NotificationEvent, *string) { return l.Data, l.NextCursor })
	})
}

// WebhookEndpoints walks GET /v1/webhook-endpoints.
func (c *Client) WebhookEndpoints(ctx context.Context, params ListWebhookEndpointsParams) iter.Seq2[WebhookEndpoint, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]WebhookEndpoint, *string, error) {
		params.Cursor = cursor
		r, err := c.ListWebhookEndpointsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *WebhookEndpointList) ([]WebhookEndpoint, *string) { return l.Data, l.NextCursor })
	})
}

// Deliveries walks GET /v1/webhook-endpoints/{id}/deliveries.
func (c *Client) Deliveries(ctx context.Context, id WebhookEndpointId, params ListDeliveriesParams) iter.Seq2[Delivery, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Delivery, *string, error) {
		params.Cursor = cursor
		r, err := c.ListDeliveriesWithResponse(ctx, id, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *DeliveryList) ([]Delivery, *string) { return l.Data, l.NextCursor })
	})
}

// Enrollments walks GET /v1/enrollments.
func (c *Client) Enrollments(ctx context.Context, params ListEnrollmentsParams) iter.Seq2[Enrollment, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Enrollment, *string, error) {
		params.Cursor = cursor
		r, err := c.ListEnrollmentsWithResponse(ctx, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *EnrollmentList) ([]Enrollment, *string) { return l.Data, l.NextCursor })
	})
}

// Bills walks GET /v1/enrollments/{id}/bills.
func (c *Client) Bills(ctx context.Context, id EnrollmentId, params ListBillsParams) iter.Seq2[Bill, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Bill, *string, error) {
		params.Cursor = cursor
		r, err := c.ListBillsWithResponse(ctx, id, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, func(l *BillList) ([]Bill, *string) { return l.Data, l.NextCursor })
	})
}

// EnrollmentCharges walks GET /v1/enrollments/{id}/charges.
func (c *Client) EnrollmentCharges(ctx context.Context, id EnrollmentId, params ListEnrollmentChargesParams) iter.Seq2[Charge, error] {
	return All(ctx, func(ctx context.Context, cursor *string) ([]Charge, *string, error) {
		params.Cursor = cursor
		r, err := c.ListEnrollmentChargesWithResponse(ctx, id, &params)
		if err != nil {
			return nil, nil, err
		}
		return pageOf(r.JSON200, r.HTTPResponse, r.Body, chargePage)
	})
}

func chargePage(l *ChargeList) ([]Charge, *string) { return l.Data, l.NextCursor }
