package pgembed

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/proctest"
)

// startSyncPair starts a primary and its synchronous replica on two free
// ports, stopped at the test's end; the test is skipped without the
// server programs.
func startSyncPair(ctx context.Context, t *testing.T) (primary, replica *Member, ports [2]int) {
	t.Helper()
	for i := range ports {
		p, err := proctest.FreePort()
		require.NoError(t, err)
		ports[i] = p
	}
	primary, err := StartPrimary(ctx, ReplicationOptions{DataDir: dataDir(t), Port: ports[0]})
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	replica, err = primary.StartReplica(ctx, ReplicationOptions{DataDir: dataDir(t), Port: ports[1]}, true)
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Stop(context.Background()) })
	return primary, replica, ports
}

// A synchronous pair keeps every acknowledged commit through a crash of the
// primary, and a multi-host URL with target_session_attrs=read-write finds
// the promoted replica with no change of configuration.
func TestReplicaPromotedAfterPrimaryKilledKeepsSyncCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	primary, replica, ports := startSyncPair(ctx, t)

	url := MultiHostURL("postgres", primary, replica)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE facts (n int); INSERT INTO facts SELECT generate_series(1, 100)`)
	require.NoError(t, err)
	require.NoError(t, primary.Kill(ctx))
	_, err = conn.Exec(ctx, `INSERT INTO facts VALUES (0)`)
	require.Error(t, err, "the connection to the killed primary is gone")
	_ = conn.Close(ctx)

	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "before the promotion no host accepts writes")
	require.NoError(t, replica.Promote(ctx))
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO facts VALUES (101) RETURNING (SELECT count(*) FROM facts)`).Scan(&n))
	require.Equal(t, 100, n, "every synchronously committed row survived the promotion")
	require.Equal(t, uint16(ports[1]), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).AddrPort().Port())
}

// A promoted replica feeds a new synchronous replica started on the dead
// primary's port, so the same multi-host URL survives a second failover
// with every synchronous commit.
func TestPromotedReplicaFeedsNewReplicaOnDeadPrimarysPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	primary, replica, ports := startSyncPair(ctx, t)
	url := MultiHostURL("postgres", primary, replica)
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`CREATE TABLE facts (n int); INSERT INTO facts VALUES (1)`)

	require.NoError(t, primary.Kill(ctx))
	require.NoError(t, replica.Promote(ctx))
	exec(`INSERT INTO facts VALUES (2)`)
	second, err := replica.StartReplica(ctx, ReplicationOptions{DataDir: dataDir(t), Port: ports[0]}, true)
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Stop(context.Background()) })
	exec(`INSERT INTO facts VALUES (3)`)

	require.NoError(t, replica.Kill(ctx))
	require.NoError(t, second.Promote(ctx))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM facts`).Scan(&n))
	require.Equal(t, 3, n, "every commit survived both failovers")
	require.Equal(t, uint16(ports[0]), conn.PgConn().Conn().RemoteAddr().(*net.TCPAddr).AddrPort().Port())
}
