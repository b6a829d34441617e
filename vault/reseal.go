package vault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/rebill/rebill/platform/metrics"
	"github.com/rebill/rebill/platform/riverjob"
)

// clearToken matches pm_token values that are no reference (refPattern):
// tokens in clear. The partial indexes of migrations 00007 and 00014 use
// the same predicate, so the holders find them reading only such rows.
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

// TokenHolder is a store whose rows keep a payment token in pm_token
// (subscriptions, charges, enrollments). Each one seals its own rows, so
// the vault writes no other package's table; SealClear and Remaining
// iterate them.
type TokenHolder interface {
	// SealClear replaces, in tx, up to limit distinct tokens that its rows
	// hold in clear (rows where inClear, a condition on pm_token, holds)
	// by the reference seal returns for each, in every row that holds it,
	// and returns how many rows it changed.
	SealClear(ctx context.Context, tx pgx.Tx, inClear string, limit int, seal func(gateway, token string) (string, error)) (int, error)
	// CountClear counts its rows where inClear holds.
	CountClear(ctx context.Context, tx pgx.Tx, inClear string) (int, error)
}

// SealClear moves up to limit distinct tokens found in clear in each of
// the Holders' rows (rows written before the vault) into the vault,
// replacing each by its reference, and returns how many rows it changed.
// A token held by two stores gets one reference (Seal finds the one the
// first gave it). Like ResealTokens it commits per call and resumes.
func (v *Vault) SealClear(ctx context.Context, limit int) (int, error) {
	done := 0
	err := pgx.BeginFunc(ctx, v.Pool, func(tx pgx.Tx) error {
		seal := func(gateway, token string) (string, error) { return v.Seal(ctx, tx, gateway, token) }
		done = 0
		for _, h := range v.Holders {
			n, err := h.SealClear(ctx, tx, clearToken, limit, seal)
			if err != nil {
				return fmt.Errorf("seal tokens in clear: %w", err)
			}
			done += n
		}
		return nil
	})
	return done, err
}

// Remaining counts what ResealTokens and SealClear have left: tokens
// under old keys, and rows holding a token in clear.
func (v *Vault) Remaining(ctx context.Context) (underOldKeys, inClear int, err error) {
	err = pgx.BeginTxFunc(ctx, v.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM payment_tokens WHERE key_id <> $1`,
			v.Keys.Current()).Scan(&underOldKeys); err != nil {
			return err
		}
		for _, h := range v.Holders {
			n, err := h.CountClear(ctx, tx, clearToken)
			if err != nil {
				return err
			}
			inClear += n
		}
		return nil
	})
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

// InsertOpts makes it one at a time. A finished run does not count: a
// node restarted with a new key within the minute of the last start must
// still reseal at once, not at the next hourly run.
func (ResealArgs) InsertOpts() river.InsertOpts {
	unique := riverjob.OneAtATime()
	unique.ByPeriod = time.Minute
	return river.InsertOpts{MaxAttempts: 3, UniqueOpts: unique}
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
