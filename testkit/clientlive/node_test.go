package clientlive_test

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/api/openapitest"
	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/client"
	"github.com/rebill/rebill/testkit/dbtest"
)

const adminKey = "client-test-admin-key-0123456789abcdef" // REBILL_ADMIN_KEY needs 32 characters

// node is a real `rebill serve` in dev mode on its own database, every
// exchange checked against the OpenAPI document.
type node struct {
	url  string
	pool *pgxpool.Pool
}

func startNode(t *testing.T) node {
	t.Helper()
	pool := dbtest.Pool(t)
	env := map[string]string{
		"REBILL_DEV":            "1",
		"REBILL_ADMIN_KEY":      adminKey,
		"REBILL_LOG_LEVEL":      "warn",
		"REBILL_SCAN_INTERVAL":  "200ms",
		"REBILL_DB_MAX_CONNS":   "10",
		"REBILL_ENCRYPTION_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	ctx := context.Background()
	svc, err := app.Build(ctx, cfg, pool, zerolog.New(io.Discard))
	require.NoError(t, err)
	require.NoError(t, svc.River.Start(ctx))
	server := httptest.NewServer(openapitest.Wrap(t, svc.Handler))
	t.Cleanup(func() {
		server.Close()
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.River.Stop(stopCtx)
		svc.Close()
	})
	return node{url: server.URL, pool: pool}
}

func newClient(t *testing.T, url, key string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, key, opts...)
	require.NoError(t, err)
	return c
}

func ptr[T any](v T) *T { return &v }

// subscription is a valid create body for customer with a card that the
// simulated gateways accept.
func subscription(customer string) client.SubscriptionCreate {
	return client.SubscriptionCreate{
		CustomerId: customer,
		Amount:     49900,
		Currency:   "RUB",
		Interval:   client.Month,
		PaymentMethod: client.PaymentMethodInput{
			Gateway: "sim1", Token: ptr("tok_ok_visa"), ExpMonth: 12, ExpYear: time.Now().Year() + 3,
			Brand: ptr("visa"), Last4: ptr("4242"),
		},
	}
}
