// Package pgembed runs a private PostgreSQL cluster from the machine's
// PostgreSQL binaries, so that `rebill serve` works with no DATABASE_URL.
package pgembed

import (
	"context"
	"errors"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (install PostgreSQL, e.g. `apt-get install postgresql`, or set DATABASE_URL)")

// Options configures a private cluster.
type Options struct {
	// DataDir holds the cluster; it is created on first use and reused after.
	DataDir string
}

// Cluster is a running private PostgreSQL server.
type Cluster struct{}

// Start initialises (first time) and starts the cluster, or attaches to it
// when another process already runs it from the same DataDir.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	return nil, ErrNoBinaries
}

// URL is a connection string for database dbname on the cluster's socket.
func (c *Cluster) URL(dbname string) string { return "" }

// Stop shuts the cluster down if this process started it.
func (c *Cluster) Stop(ctx context.Context) error { return nil }
