package app

import (
	"context"
	"flag"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/rebill/rebill/vault"
)

// NewFlagSet and ParseFlags give a command of its own (cmd/rebill-bench)
// the flag conventions of rebill's commands: usage text then flags, --help
// on stdout without running, a bad flag or stray argument an error.
func NewFlagSet(name, text string) *flag.FlagSet { return newFlagSet(name, text) }

// ParseFlags: see NewFlagSet.
func ParseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (done bool, err error) {
	return parseFlags(fs, args, stdout, stderr)
}

// NewLogger is the service's JSON logger at level (info when empty or
// unknown), for commands of their own to log as rebill does.
func NewLogger(w io.Writer, level string) zerolog.Logger { return newLogger(w, level) }

// StartSimulator starts the simulated gateways names on a database that
// nothing else writes (a benchmark's own), so they may cache their fault
// switches; operations are stamped with real time. maxConns bounds their
// pool. It returns their root URL and a stop function.
func StartSimulator(ctx context.Context, pool *pgxpool.Pool, maxConns int32, names []string, log zerolog.Logger) (string, func(), error) {
	return startSim(ctx, pool, maxConns, names, true, false, log)
}

// SealSecrets seals, now, every payment token and webhook secret not yet
// under the current key: what the secrets_reseal job does on River's start.
// A caller that wrote rows holding tokens in clear (a benchmark's seed) seals
// them before it starts timing.
func (s *Service) SealSecrets(ctx context.Context) error {
	_, err := vault.RunSteps(ctx, s.reseal, resealBatch)
	return err
}
