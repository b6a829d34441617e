package stripe_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/charges/gateway/stripe"
	"github.com/rebill/rebill/charges/gateway/testkit/stripetest"
	"github.com/rebill/rebill/testkit/dbtest"
	"github.com/rebill/rebill/testkit/testsupport"
)

// BenchmarkChargeCalls measures a charge's gateway calls (authorize, then
// capture of that hold) through the Stripe adapter and the stripetest
// fake, against the sim client and the sim server (its ledger in
// PostgreSQL), with 32 charges in flight. It prices the adapters and
// their loopback HTTP, not the pipeline: charges/s is ops/s.
//
//	go test -run '^$' -bench ChargeCalls -benchtime 2s ./charges/gateway/stripe/
func BenchmarkChargeCalls(b *testing.B) {
	b.Run("stripe-fake", func(b *testing.B) {
		clk := testsupport.NewClock(time.Now())
		fake := stripetest.NewServer(b)
		fake.Now = clk.Now
		g, err := stripe.New(stripe.Config{Name: "stripe1", BaseURL: fake.URL, APIKey: apiKey, Clock: clk})
		if err != nil {
			b.Fatal(err)
		}
		benchCharges(b, g, okCard)
	})
	b.Run("sim", func(b *testing.B) {
		pool := dbtest.Pool(b)
		if err := sim.Migrate(context.Background(), pool); err != nil {
			b.Fatal(err)
		}
		ts := httptest.NewServer(sim.NewServer(pool, []string{"sim1"}, zerolog.Nop()))
		b.Cleanup(ts.Close)
		benchCharges(b, sim.NewClient("sim1", ts.URL+"/sim1", sim.ClientOptions{}), "tok_ok_bench")
	})
}

func benchCharges(b *testing.B, g gateway.Gateway, token string) {
	ctx := context.Background()
	var seq atomic.Int64
	b.SetParallelism(16) // 32 in flight on 2 cores
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := fmt.Sprintf("bench:%d:a1", seq.Add(1))
			req := gateway.Request{IdempotencyKey: key + ":authorize", Token: token, Amount: 1999, Currency: "EUR", ChargeKey: key}
			res, err := g.Authorize(ctx, req)
			if err != nil || res.Status != gateway.StatusSucceeded {
				b.Fatalf("authorize: %v %s", err, res.Status)
			}
			req.IdempotencyKey, req.AuthorizationID = key+":capture", res.Reference
			if res, err = g.Capture(ctx, req); err != nil || res.Status != gateway.StatusSucceeded {
				b.Fatalf("capture: %v %s", err, res.Status)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "charges/s")
}
