package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/notify"
	"github.com/rebill/rebill/platform/secrets"
	"github.com/rebill/rebill/subscriptions"
	"github.com/rebill/rebill/vault"
)

// resealBatch is how many secrets one transaction seals again.
const resealBatch = 200

// keyring is REBILL_ENCRYPTION_KEY with REBILL_ENCRYPTION_OLD_KEYS for
// reading. Outside dev mode the key is required; a dev node built without
// one (serve always has one) gets a key of its own process.
func keyring(cfg config.Config, log zerolog.Logger) (*secrets.Keyring, error) {
	key := cfg.EncryptionKey
	if key == nil {
		if !cfg.Dev {
			return nil, errors.New("REBILL_ENCRYPTION_KEY is required outside dev mode (openssl rand -base64 32): it encrypts payment tokens and webhook secrets")
		}
		key = make([]byte, secrets.KeySize)
		_, _ = rand.Read(key)
		log.Warn().Msg("dev mode without REBILL_ENCRYPTION_KEY: payment tokens and webhook secrets are encrypted under a key of this process only")
	}
	return secrets.NewKeyring(key, cfg.EncryptionOldKeys...)
}

// tokenHolders are the stores whose rows hold payment tokens: the vault
// seals the ones left in clear through them.
func tokenHolders() []vault.TokenHolder {
	return []vault.TokenHolder{subscriptions.Tokens(), charges.Tokens(), enrollments.Tokens()}
}

// resealSteps seal every kind of secret under the current key: payment
// tokens still in clear, tokens under an old key, webhook secrets under an
// old key.
func resealSteps(pool *pgxpool.Pool, tokens *vault.Vault) []vault.Step {
	return []vault.Step{
		{Kind: "clear_token", Run: tokens.SealClear},
		{Kind: "payment_token", Run: tokens.ResealTokens},
		{Kind: "webhook_secret", Run: func(ctx context.Context, limit int) (int, error) {
			return notify.ResealSecrets(ctx, pool, tokens.Keys, limit)
		}},
	}
}

// resealJob runs on every new leader (a restart with a new key starts the
// rotation at once) and hourly.
func resealJob() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return vault.ResealArgs{}, nil },
		&river.PeriodicJobOpts{ID: "secrets_reseal", RunOnStart: true})
}

const secretsUsage = `Usage: rebill secrets rotate

Seals every secret at rest under the current REBILL_ENCRYPTION_KEY: payment
tokens still in clear (rows written before the vault) move into the vault,
and payment tokens and webhook secrets sealed under a key of
REBILL_ENCRYPTION_OLD_KEYS are sealed again. It commits in batches and can
be stopped and run again; every node runs the same work hourly and on
start. Prints how many of each kind it sealed and how many are left.

To rotate: deploy every node with the new key in REBILL_ENCRYPTION_KEY and
the old one in REBILL_ENCRYPTION_OLD_KEYS, run this, then drop the old key.
`

// secretsCommand runs `rebill secrets rotate`.
func secretsCommand(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("secrets rotate", secretsUsage)
	if len(args) == 0 || args[0] != "rotate" {
		// "rebill secrets --help" asks for this usage too.
		if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
			return err
		}
		fs.SetOutput(stderr)
		fs.Usage()
		return errors.New("secrets: want the subcommand rotate")
	}
	if done, err := parseFlags(fs, args[1:], stdout, stderr); done || err != nil {
		return err
	}
	if cfg.Dev && cfg.EncryptionKey == nil {
		var err error
		if cfg.EncryptionKey, err = devEncryptionKey(cfg.DataDir); err != nil {
			return err
		}
	}
	keys, err := keyring(cfg, log)
	if err != nil {
		return err
	}
	pool, stop, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	tokens := &vault.Vault{Pool: pool, Keys: keys, Holders: tokenHolders()}
	counts, err := vault.RunSteps(ctx, resealSteps(pool, tokens), resealBatch)
	fmt.Fprintf(stdout, "sealed under key %s: %d rows' payment tokens moved out of clear, %d payment tokens and %d webhook secrets from old keys\n",
		keys.Current(), counts["clear_token"], counts["payment_token"], counts["webhook_secret"])
	if err != nil {
		return err
	}
	old, clear, err := tokens.Remaining(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "left: %d payment tokens under old keys, %d rows with a token in clear\n", old, clear)
	return nil
}
