package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"

	"github.com/rebill/rebill/apikeys"
	"github.com/rebill/rebill/app/config"
)

func apikey(ctx context.Context, cfg config.Config, log zerolog.Logger, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("apikey create", "Usage: rebill apikey create --role admin|support|customer [--customer ID]\n\n"+
		"Creates an API key and prints it once; only its hash is stored.")
	roleName := fs.String("role", "", "admin, support or customer (required)")
	customer := fs.String("customer", "", "customer_id the key is bound to (customer role only)")
	if len(args) == 0 || args[0] != "create" {
		// "rebill apikey --help" asks for this usage too.
		if done, err := parseFlags(fs, args, stdout, stderr); done || err != nil {
			return err
		}
		fs.SetOutput(stderr)
		fs.Usage()
		return errors.New("apikey: want the subcommand create")
	}
	if done, err := parseFlags(fs, args[1:], stdout, stderr); done || err != nil {
		return err
	}
	if *roleName == "" {
		return errors.New("apikey create: --role is required (admin, support or customer)")
	}
	if _, err := apikeys.ParseRole(*roleName); err != nil {
		return err
	}
	pool, stop, err := openMigrated(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stop()
	key, err := apikeys.NewStore(pool, "").CreateWithPool(ctx, *roleName, *customer)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "id:   %s\nrole: %s\nkey:  %s\n(the key is shown once; only its hash is stored)\n", key.ID, key.Role, key.Secret)
	return nil
}
