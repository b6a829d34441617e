// Command rebill-bench measures River's bare throughput and billing end to
// end (BENCHMARKS.md). It is a command of its own so that the server binary,
// cmd/rebill, links none of the benchmark's code.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rebill/rebill/app"
	"github.com/rebill/rebill/app/config"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rebill-bench:", err)
		cancel()
		os.Exit(1)
	}
}

// run reads the configuration as rebill serve does (the pool size, the
// workers, DATABASE_URL) and runs the benchmark with args as its flags.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	return benchCommand(ctx, cfg, app.NewLogger(stderr, cfg.LogLevel), args, stdout, stderr)
}
