package e2e_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rebill/rebill/testkit/dbtest"
)

// scanRuns reads how many billing scans a node has run from its /metrics.
func (p *procServer) scanRuns(t *testing.T) float64 {
	t.Helper()
	res, err := procHTTP.Get(p.URL + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var body bytes.Buffer
	_, err = body.ReadFrom(res.Body)
	require.NoError(t, err)
	lines := bufio.NewScanner(&body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "rebill_charge_stage_runs_total{") && strings.Contains(line, `stage="scan"`) &&
			strings.Contains(line, `outcome="ok"`) {
			fields := strings.Fields(line)
			n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// In production mode (the wall clock, which moves during every
// scan) an idle node scans on its interval, not in a loop that burns a
// core and two database backends.
func TestProductionIdleNodeDoesNotSpin(t *testing.T) {
	t.Parallel()
	node := procStart(t, "prod", map[string]string{
		"DATABASE_URL":          dbtest.URL(t),
		"REBILL_ADMIN_KEY":      "production-admin-key-0123456789abcdef0123",
		"REBILL_LOG_LEVEL":      "warn",
		"REBILL_DB_MAX_CONNS":   "10", // the suite shares the server
		"REBILL_ENCRYPTION_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
	})
	node.waitReady(t, 60*time.Second)
	time.Sleep(10 * time.Second)
	runs := node.scanRuns(t)
	require.GreaterOrEqual(t, runs, 1.0, "the leader scans on start")
	require.LessOrEqual(t, runs, 3.0, "an idle node scans once a minute, not in a loop")
}
