// Package pg holds the one interface rebill's stores take for a database
// handle, so that a pool, a connection and a transaction are
// interchangeable everywhere, and a caller that holds a transaction can
// pass it to any package's reads and writes.
package pg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what a store needs of a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// UniqueViolation reports whether err is an insert refused by the unique
// constraint named constraint (SQLSTATE 23505).
func UniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}
