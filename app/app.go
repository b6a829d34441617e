// Package app wires rebill together: it reads the configuration, opens the
// database (or starts the private cluster), and runs the command asked for.
// cmd/rebill only calls Run, and tests call Run too.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/app/config"
)

const usage = `rebill: recurring payments, exactly one charge per period.

Usage:
  rebill serve                  migrate, then serve HTTP and run the workers
  rebill migrate                apply migrations and print their status
  rebill apikey create --role admin|support|customer [--customer ID]
  rebill gatewaysim [--addr ADDR]  run the simulated gateways sim1..sim5 standalone
  rebill registryfake [--addr ADDR] [--tls-cert FILE --tls-key FILE [--client-ca FILE]]
                                run the conformance fake of a bank's registry gateway (docs/registry.md)
  rebill zhkhfake [--addr ADDR] [--token TOKEN] [--tls-cert FILE --tls-key FILE [--client-ca FILE]]
                                run the conformance fake of a GIS ZhKH reporting party (docs/registry.md)
  rebill secrets rotate         seal payment tokens and webhook secrets under the current key
  rebill version                print the module version and VCS commit
  rebill audit [--from DATE] [--to DATE] [--json]
                                check every owed period against the gateways' captures

Run 'rebill serve --help' for the environment variables, and
'rebill COMMAND --help' for a command's flags.
`

// gatewaysHelp explains the gateways' configuration beyond the table.
const gatewaysHelp = `
Gateways outside dev mode: REBILL_GATEWAYS_FILE names a JSON or YAML list of
gateways; the name is what subscriptions give as payment_method.gateway.
Secrets are read from the environment variables that credentials names:

    - name: yookassa
      kind: yookassa                 # sim, stripe or yookassa
      priority: 1                    # lower wins among equally cheap gateways
      commission_bps: {RUB: 280, "*": 300}
      currencies: [RUB]
      hold_lifetime: 168h            # optional: the kind's default
      timeout: 15s                   # optional: REBILL_GATEWAY_TIMEOUT
      credentials: {shop_id: YOOKASSA_SHOP_ID, secret_key: YOOKASSA_SECRET_KEY}

A bad file stops the start with every fault of the file, one line each
naming the file, the entry and the field. For
simulators only, REBILL_GATEWAYS is a shorthand: name=URL pairs, comma
separated, the URL a simulator's root followed by /<gateway it hosts>:

    REBILL_GATEWAYS=sim1=http://127.0.0.1:8090/sim1,sim2=http://127.0.0.1:8090/sim2

At start each simulated gateway is probed once on URL/health: no answer, or
an answer other than 200 or 503 (a 404 means the URL names no gateway),
stops the start with an error naming the gateway; 503 (down) only logs a
warning. With no gateway configured, production mode starts but warns:
nothing can be charged.
`

// Run executes one rebill command. It returns when the command is done or
// ctx is cancelled (serve shuts down gracefully then). --help on a command
// prints its usage on stdout and returns nil without doing anything else.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[1] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version":
		fs := newFlagSet("version", "Usage: rebill version\n\nPrints the module version, the VCS commit it was built from and the Go version.")
		if done, err := parseFlags(fs, args[2:], stdout, stderr); done || err != nil {
			return err
		}
		info, _ := debug.ReadBuildInfo()
		fmt.Fprint(stdout, versionText(info, buildCommit))
		return nil
	case "registryfake":
		return registryfake(ctx, args[2:], stdout, stderr)
	case "zhkhfake":
		return zhkhfake(ctx, args[2:], stdout, stderr)
	}
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	switch args[1] {
	case "serve":
		fs := newFlagSet("serve", "Usage: rebill serve\n\nMigrates the database, then serves HTTP and runs the billing workers until\nSIGINT or SIGTERM. Configuration comes from environment variables:\n")
		usage := fs.Usage
		fs.Usage = func() {
			usage()
			config.PrintHelp(fs.Output())
			fmt.Fprint(fs.Output(), gatewaysHelp)
		}
		if done, err := parseFlags(fs, args[2:], stdout, stderr); done || err != nil {
			return err
		}
		return serve(ctx, cfg, log, stdout)
	case "migrate":
		fs := newFlagSet("migrate", "Usage: rebill migrate\n\nApplies pending migrations (rebill's and River's) to DATABASE_URL, or to the\nprivate cluster when it is empty, and prints the status of each.")
		if done, err := parseFlags(fs, args[2:], stdout, stderr); done || err != nil {
			return err
		}
		return migrate(ctx, cfg, log, stdout)
	case "apikey":
		return apikey(ctx, cfg, log, args[2:], stdout, stderr)
	case "gatewaysim":
		return gatewaysim(ctx, cfg, log, args[2:], stdout, stderr)
	case "audit":
		return auditCommand(ctx, cfg, log, args[2:], stdout, stderr)
	case "secrets":
		return secretsCommand(ctx, cfg, log, args[2:], stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[1])
}

// newFlagSet returns a flag set whose usage is text followed by its flags,
// written to the set's output.
func newFlagSet(name, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), text)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(fs.Output(), "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses a command's arguments. -h or --help prints the usage on
// stdout and reports done with no error: the command must not run. A bad
// flag or a stray argument prints the usage on stderr and returns the error.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard) // flag would print the usage itself, on one writer for both cases
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return true, nil
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	if err != nil {
		fs.SetOutput(stderr)
		fs.Usage()
		return true, err
	}
	return false, nil
}

// buildCommit is the commit given at link time, for builds that Go does not
// stamp with VCS information (a worktree, whose .git is a file; a build
// context without .git):
//
//	go build -ldflags "-X github.com/rebill/rebill/app.buildCommit=$(git rev-parse HEAD)" ./cmd/rebill
var buildCommit string

// versionText describes the build: the main module's version (a tag, a
// pseudo-version with +dirty, or (devel)), the VCS commit and whether the
// tree had uncommitted changes, and the Go version. A commit set at link
// time (linked, from buildCommit) wins; binaries built without either (go run, go test,
// -buildvcs=false) say the commit is unknown.
func versionText(info *debug.BuildInfo, linked string) string {
	if info == nil {
		return "rebill: no build information in this binary\n"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	commit := settings["vcs.revision"]
	switch {
	case linked != "":
		commit = linked + " (set at link time)"
	case commit == "":
		commit = "unknown (built without VCS information, e.g. by go run; see docs/operating.md)"
	case settings["vcs.modified"] == "true":
		commit += " (modified: built with uncommitted changes)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rebill %s\n", version)
	if info.Main.Path != "" {
		fmt.Fprintf(&b, "module %s\n", info.Main.Path)
	}
	fmt.Fprintf(&b, "commit %s\n", commit)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "commit time %s\n", t)
	}
	fmt.Fprintf(&b, "go %s\n", info.GoVersion)
	return b.String()
}

func newLogger(w io.Writer, level string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", "rebill").Logger()
}

// Main is cmd/rebill's whole body: signals cancel the context, and the exit
// code reports failure.
func Main() {
	ctx, cancel := signalContext()
	defer cancel()
	if err := Run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rebill:", err)
		cancel()
		os.Exit(1)
	}
}
