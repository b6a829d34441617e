package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/charges/gateway"
	"github.com/rebill/rebill/charges/gateway/sim"
	"github.com/rebill/rebill/testkit/dbtest"
)

// TestInMemoryBooksAnswerLikePostgres sends the same random calls (new and
// replayed keys, every token class, captures, voids and refunds of
// earlier holds, settled or not, wrong amounts, look-ups) to a simulator keeping its books
// in PostgreSQL and to one keeping them in memory, and requires the same
// answer from both each time: benchmark figures taken with the in-memory
// books are then figures of the same provider behaviour.
func TestInMemoryBooksAnswerLikePostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	pgRoot, stopPG, err := sim.Start(ctx, pool, []string{"sim1", "sim2"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopPG(context.Background()) })
	memRoot, stopMem, err := sim.StartInMemory(ctx, []string{"sim1", "sim2"}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = stopMem(context.Background()) })

	type side struct {
		clients map[string]*sim.Client
		holds   []gateway.Result // successful holds, in order, for later captures and voids
	}
	newSide := func(root string) *side {
		s := &side{clients: map[string]*sim.Client{}}
		for _, gw := range []string{"sim1", "sim2"} {
			s.clients[gw] = sim.NewClient(gw, root+"/"+gw, sim.ClientOptions{})
		}
		return s
	}
	pg, mem := newSide(pgRoot), newSide(memRoot)
	// answer is what may be compared: references differ between the two.
	answer := func(res gateway.Result, err error) string {
		if err != nil {
			switch {
			case errors.Is(err, gateway.ErrUnavailable):
				return "unavailable"
			case errors.Is(err, gateway.ErrNotFound):
				return "not found"
			default:
				return "error"
			}
		}
		return fmt.Sprintf("%s %s %s hard=%t %d %s", res.Op, res.Status, res.DeclineCode, res.Hard, res.Amount, res.Currency)
	}
	tokens := []string{tokOK, tokOK, tokOK, tokDeclineFunds, tokDeclineHard, tokFlaky, tokUnknown, "tok_funds_after_1h_secret"}
	// captured are the holds a capture collected, and the gateway that did:
	// refunds mostly go to those.
	type capturedHold struct {
		hold int
		gw   string
	}
	var captured []capturedHold
	rng := rand.New(rand.NewPCG(7, 7))
	for step := range 400 {
		gw := []string{"sim1", "sim2"}[rng.IntN(2)]
		key := fmt.Sprintf("k%d", rng.IntN(step+1)) // a quarter or so are replays
		var desc string
		var call func(s *side) (gateway.Result, error)
		capturing := -1 // the hold a capture of this step names
		switch choice := rng.IntN(10); {
		case choice == 9 && len(captured) > 0:
			c := captured[rng.IntN(len(captured))]
			amount := int64(1 + rng.IntN(60)) // a part; two or three may pass the capture
			desc = fmt.Sprintf("refund %s %s of hold %d, %d", c.gw, key, c.hold, amount)
			call = func(s *side) (gateway.Result, error) {
				return s.clients[c.gw].Refund(ctx, gateway.Request{IdempotencyKey: key, Amount: amount, Currency: "EUR",
					AuthorizationID: s.holds[c.hold].Reference})
			}
		case choice < 5:
			token, amount := tokens[rng.IntN(len(tokens))], int64(100+rng.IntN(3))
			desc = fmt.Sprintf("authorize %s %s %s %d", gw, key, token, amount)
			call = func(s *side) (gateway.Result, error) {
				return s.clients[gw].Authorize(ctx, gateway.Request{IdempotencyKey: key, Token: token, Amount: amount,
					Currency: "EUR", ChargeKey: key})
			}
		case choice < 9 && len(pg.holds) > 0:
			hold, op := rng.IntN(len(pg.holds)), []gateway.Op{gateway.OpCapture, gateway.OpVoid, gateway.OpRefund}[rng.IntN(3)]
			amount := pg.holds[hold].Amount + int64(rng.IntN(2)) // sometimes not the held amount
			if op == gateway.OpRefund {
				amount = int64(1 + rng.IntN(60)) // a part; two or three may pass the capture
			}
			desc = fmt.Sprintf("%s %s %s of hold %d, %d", op, gw, key, hold, amount)
			if op == gateway.OpCapture {
				capturing = hold
			}
			call = func(s *side) (gateway.Result, error) {
				req := gateway.Request{IdempotencyKey: key, Amount: amount, Currency: "EUR",
					AuthorizationID: s.holds[hold].Reference}
				switch op {
				case gateway.OpCapture:
					return s.clients[gw].Capture(ctx, req)
				case gateway.OpRefund:
					return s.clients[gw].Refund(ctx, req)
				}
				return s.clients[gw].Void(ctx, req)
			}
		default:
			desc = fmt.Sprintf("lookup %s %s", gw, key)
			call = func(s *side) (gateway.Result, error) {
				return s.clients[gw].Lookup(ctx, lookupOf(key))
			}
		}
		pgRes, pgErr := call(pg)
		memRes, memErr := call(mem)
		require.Equal(t, answer(pgRes, pgErr), answer(memRes, memErr), "step %d: %s", step, desc)
		if pgErr == nil && pgRes.Op == gateway.OpAuthorize && pgRes.Status == gateway.StatusSucceeded {
			pg.holds, mem.holds = append(pg.holds, pgRes), append(mem.holds, memRes)
		}
		if pgErr == nil && pgRes.Op == gateway.OpCapture && pgRes.Status == gateway.StatusSucceeded && capturing >= 0 {
			captured = append(captured, capturedHold{capturing, gw})
		}
	}
	ledger := func(root, gw string) []sim.LedgerEntry {
		resp, err := http.Get(root + "/" + gw + "/ledger")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct{ Data []sim.LedgerEntry }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Data
	}
	refunds := map[gateway.Status]int{}
	for _, gw := range []string{"sim1", "sim2"} {
		pgLedger, memLedger := ledger(pgRoot, gw), ledger(memRoot, gw)
		for _, e := range pgLedger {
			if e.Op == gateway.OpRefund {
				refunds[e.Status]++
			}
		}
		require.NotEmpty(t, pgLedger)
		require.Len(t, memLedger, len(pgLedger), "%s: as many operations in both ledgers", gw)
		for i := range pgLedger {
			require.Equal(t, pgLedger[i].IdempotencyKey, memLedger[i].IdempotencyKey, "%s ledger entry %d", gw, i)
			require.Equal(t, pgLedger[i].Status, memLedger[i].Status, "%s ledger entry %d", gw, i)
		}
	}
	require.Positive(t, refunds[gateway.StatusSucceeded], "some refunds went through: %v", refunds)
	require.Positive(t, refunds[gateway.StatusFailed], "some were refused: %v", refunds)
}
