package config_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/app/config"
	"github.com/rebill/rebill/testkit/dbtest"
)

// A connection_timeout the URL sets is kept; without one each host gets
// DefaultConnectTimeout.
func TestPoolConfigBoundsEachHostsConnect(t *testing.T) {
	cfg, err := config.ParsePoolConfig("postgres://u@a:5432,b:5432/db?target_session_attrs=read-write")
	require.NoError(t, err)
	require.Equal(t, config.DefaultConnectTimeout, cfg.ConnConfig.ConnectTimeout)
	cfg, err = config.ParsePoolConfig("postgres://u@a:5432/db?connect_timeout=2")
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.ConnConfig.ConnectTimeout)
}

// A multi-host URL whose first host accepts the connection and never
// answers (a primary that hangs, or whose machine is gone) still reaches
// the next host, within the connect timeout and not the operating
// system's.
func TestMultiHostURLPassesAHostThatDoesNotAnswer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	server, err := pgconn.ParseConfig(dbtest.ServerURL(t))
	require.NoError(t, err)
	url := fmt.Sprintf("postgres://%s@%s,%s:%d/%s?sslmode=disable&target_session_attrs=read-write",
		server.User, silent.Addr(), server.Host, server.Port, server.Database)
	cfg, err := config.ParsePoolConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*config.DefaultConnectTimeout)
	defer cancel()
	began := time.Now()
	require.NoError(t, pool.Ping(ctx), "the second host is reached")
	require.Less(t, time.Since(began), 2*config.DefaultConnectTimeout)
}
