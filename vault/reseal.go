package vault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/internal/metrics"
)

// clearToken matches pm_token values that are no reference (refPattern):
// tokens in clear. The partial indexes of migration 00007 use the same
// predicate, so finding them reads only such rows.
const clearToken = `pm_token !~ '^ptok_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'`

// ResealTokens seals again, under the current key, up to limit tokens
// sealed under an older key, and returns how many. Each call commits on
// its own and concurrent calls skip each other's rows, so a run stopped
// midway resumes where it stopped. A token under a key the ring no longer
// has is an error naming that key: put it back in REBILL_ENCRYPTION_OLD_KEYS.
func (v *Vault) ResealTokens(ctx context.Context, limit int) (int, error) {
	done := 0
	err := pgx.BeginFunc(ctx, v.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, gateway, ciphertext FROM payment_tokens
			WHERE key_id <> $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, v.Keys.Current(), limit)
		if err != nil {
			return fmt.Errorf("find tokens under old keys: %w", err)
		}
		type row struct{ id, gateway, sealed string }
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			return x, r.Scan(&x.id, &x.gateway, &x.sealed)
		})
		if err != nil {
			return fmt.Errorf("find tokens under old keys: %w", err)
		}
		current := v.Keys.Current()
		for _, r := range found {
			token, err := v.Keys.Decrypt(r.sealed, aad(r.id, r.gateway))
			if err != nil {
				return fmt.Errorf("open payment token %s: %w", r.id, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE payment_tokens SET key_id = $2, fingerprint = $3, ciphertext = $4 WHERE id = $1`,
				r.id, current, v.Keys.Fingerprint(current, fingerprintInput(r.gateway, string(token))),
				v.Keys.Encrypt(token, aad(r.id, r.gateway))); err != nil {
				return fmt.Errorf("reseal payment token %s: %w", r.id, err)
			}
		}
		done = len(found)
		return nil
	})
	return done, err
}

// SealClear moves up to limit distinct tokens found in clear in
// subscriptions and charges (rows written before the vault) into the
// vault, replacing each by its reference in every row that holds it, and
// returns how many. Like ResealTokens it commits per call and resumes.
func (v *Vault) SealClear(ctx context.Context, limit int) (int, error) {
	done := 0
	err := pgx.BeginFunc(ctx, v.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT DISTINCT gateway, token FROM (
				(SELECT pm_gateway AS gateway, pm_token AS token FROM subscriptions WHERE `+clearToken+` LIMIT $1)
				UNION ALL
				(SELECT gateway, pm_token FROM charges WHERE `+clearToken+` LIMIT $1)) t
			LIMIT $1`, limit)
		if err != nil {
			return fmt.Errorf("find tokens in clear: %w", err)
		}
		type pair struct{ gateway, token string }
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pair, error) {
			var p pair
			return p, r.Scan(&p.gateway, &p.token)
		})
		if err != nil {
			return fmt.Errorf("find tokens in clear: %w", err)
		}
		for _, p := range found {
			ref, err := v.Seal(ctx, tx, p.gateway, p.token)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE subscriptions SET pm_token = $3 WHERE pm_gateway = $1 AND pm_token = $2`,
				p.gateway, p.token, ref); err != nil {
				return fmt.Errorf("seal subscriptions' token: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE charges SET pm_token = $3 WHERE gateway = $1 AND pm_token = $2`,
				p.gateway, p.token, ref); err != nil {
				return fmt.Errorf("seal charges' token: %w", err)
			}
		}
		done = len(found)
		return nil
	})
	return done, err
}

// Remaining counts what ResealTokens and SealClear have left: tokens
// under old keys, and rows holding a token in clear.
func (v *Vault) Remaining(ctx context.Context) (underOldKeys, inClear int, err error) {
	err = v.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM payment_tokens WHERE key_id <> $1),
		(SELECT count(*) FROM subscriptions WHERE `+clearToken+`) + (SELECT count(*) FROM charges WHERE `+clearToken+`)`,
		v.Keys.Current()).Scan(&underOldKeys, &inClear)
	if err != nil {
		return 0, 0, fmt.Errorf("count secrets left to seal: %w", err)
	}
	return underOldKeys, inClear, nil
}

// Step is one kind of secret to seal under the current key, a batch of at
// most limit per call; it returns how many it sealed, 0 once none is left.
type Step struct {
	Kind string
	Run  func(ctx context.Context, limit int) (int, error)
}

// RunSteps runs each step to completion in batches of batch and returns
// how many secrets of each kind it sealed. Stopped (ctx done, an error),
// it can simply be run again.
func RunSteps(ctx context.Context, steps []Step, batch int) (map[string]int, error) {
	counts := map[string]int{}
	for _, s := range steps {
		for {
			n, err := s.Run(ctx, batch)
			counts[s.Kind] += n
			metrics.SecretsResealed.WithLabelValues(s.Kind).Add(float64(n))
			if err != nil {
				return counts, fmt.Errorf("seal %s: %w", s.Kind, err)
			}
			if n == 0 {
				break
			}
		}
	}
	return counts, nil
}

// ResealArgs is the job that seals every secret under the current key:
// enqueued on start and hourly, so a new REBILL_ENCRYPTION_KEY (with the
// old one in REBILL_ENCRYPTION_OLD_KEYS) and tokens left in clear are
// taken care of without anyone running `rebill secrets rotate`.
type ResealArgs struct{}

// Kind is River's name of the job.
func (ResealArgs) Kind() string { return "secrets_reseal" }

// InsertOpts makes it one at a time.
func (ResealArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: river.UniqueOpts{ByPeriod: time.Minute}}
}

// ResealWorker runs ResealArgs.
type ResealWorker struct {
	river.WorkerDefaults[ResealArgs]
	Steps []Step
	Batch int
}

// Work seals what is left. A run cut short by the job timeout (a large
// first migration) snoozes and goes on a second later.
func (w *ResealWorker) Work(ctx context.Context, _ *river.Job[ResealArgs]) error {
	_, err := RunSteps(ctx, w.Steps, w.Batch)
	if errors.Is(err, context.DeadlineExceeded) {
		return river.JobSnooze(time.Second)
	}
	return err
}
