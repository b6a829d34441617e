package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rebill/rebill/client"
	"github.com/rebill/rebill/client/signature"
)

// fakeRebill stands in for a rebill node so that the examples run: it
// answers the few calls they make.
func fakeRebill() *httptest.Server {
	const sub = `{"id":"%s","customer_id":"cust-42","status":"active","amount":49900,"currency":"RUB","interval":"month"}`
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/subscriptions":
			if r.Header.Get("Idempotency-Key") == "" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, sub, "0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d")
		case r.URL.Path == "/v1/subscriptions" && r.URL.Query().Get("cursor") == "":
			fmt.Fprintf(w, `{"data":[`+sub+`],"next_cursor":"p2"}`, "0193a5c2-0000-7000-8000-000000000001")
		case r.URL.Path == "/v1/subscriptions":
			fmt.Fprintf(w, `{"data":[`+sub+`],"next_cursor":null}`, "0193a5c2-0000-7000-8000-000000000002")
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"type":"https://rebill.dev/problems/not-found","title":"Not found","status":404,"detail":"No such subscription."}`)
		}
	}))
}

func Example() {
	node := fakeRebill()
	defer node.Close()

	c, err := client.New(node.URL, "your-api-key")
	if err != nil {
		panic(err)
	}
	// No Idempotency-Key given: the client makes one for this call and
	// sends the same one on each of its retries.
	res, err := c.CreateSubscriptionWithResponse(context.Background(), nil, client.SubscriptionCreate{
		CustomerId: "cust-42",
		Amount:     49900, // minor units: 499.00 RUB
		Currency:   "RUB",
		Interval:   client.Month,
		PaymentMethod: client.PaymentMethodInput{
			Gateway: "sim1", Token: ptr("tok_ok_visa"), ExpMonth: 12, ExpYear: 2031,
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.JSON201.Id, res.JSON201.Status)
	// Output: 0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d active
}

func ExampleClient_Subscriptions() {
	node := fakeRebill()
	defer node.Close()
	c, _ := client.New(node.URL, "your-api-key")

	for sub, err := range c.Subscriptions(context.Background(), client.ListSubscriptionsParams{CustomerId: ptr("cust-42")}) {
		if err != nil {
			fmt.Println("list:", err)
			break
		}
		fmt.Println(sub.Id)
	}
	// Output:
	// 0193a5c2-0000-7000-8000-000000000001
	// 0193a5c2-0000-7000-8000-000000000002
}

func ExampleProblem() {
	node := fakeRebill()
	defer node.Close()
	c, _ := client.New(node.URL, "your-api-key")

	_, err := c.GetSubscriptionWithResponse(context.Background(), "0193a5c2-7f1e-7d3a-9c1b-2f4e6a8b0c1d")
	var p *client.Problem
	if errors.As(err, &p) {
		fmt.Println(p.Status, p.Slug())
		for _, f := range p.FieldErrors() {
			fmt.Println(f.Field, f.Message)
		}
	}
	// Output: 404 not-found
}

func ExampleVerifyWebhook() {
	secret := "whsec_0123456789abcdef0123456789abcdef0123456789abcdef"
	// What a webhook handler receives: the raw body and the header.
	body := []byte(`{"id":"evt_1","type":"charge.succeeded","created_at":"2026-12-01T00:00:00Z","data":{"object":{}}}`)
	header := signature.Sign(secret, time.Now(), body)

	if err := client.VerifyWebhook(body, header, secret); err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println("verified")
	err := client.VerifyWebhook([]byte(`{"id":"evt_1","type":"charge.refunded"}`), header, secret)
	fmt.Println(errors.Is(err, client.ErrWebhookMismatch))
	// Output:
	// verified
	// true
}
