package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// evil is what a customer or a gateway might send, written straight into
// the database (the API refuses part of it at entry): markup, a
// right-to-left override that would make "fdp.exe" read as "exe.pdf", and
// a zero-width space and tag characters, which the API stores, hiding
// text.
const evil = "<script>alert(1)</script>\u202efdp.exe\u2066<img src=x onerror=alert(2)>cust\u200b42\U000E0068\U000E0069"

func requireNeutralised(t *testing.T, page, where string) {
	t.Helper()
	require.NotContains(t, page, "<script>alert", where)
	require.NotContains(t, page, "<img src=x", where)
	require.NotContains(t, page, "\u202e", where)
	require.NotContains(t, page, "\u2066", where)
	require.NotContains(t, page, "\u200b", where)
	require.NotContains(t, page, "\U000E0068", where)
	require.Contains(t, page, `cust<span class="cp">[U+200B]</span>42<span class="cp">[U+E0068]</span>`, where)
	require.Contains(t, page, `<span class="cp">[U+202E]</span>`, where)
	require.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;", where)
}

func TestCustomerAndGatewayStringsAreEscaped(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	sub := n.createSubscription(t, "cust-evil")
	var charge string
	require.Eventually(t, func() bool {
		return n.pool.QueryRow(ctx, `SELECT id::text FROM charges WHERE subscription_id = $1`, sub).Scan(&charge) == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return count(t, n.pool, `SELECT count(*) FROM charges WHERE id = $1 AND status IN ('succeeded', 'declined', 'failed')`, charge) == 1
	}, 20*time.Second, 50*time.Millisecond)

	_, err := n.pool.Exec(ctx, `UPDATE subscriptions SET description = $2, metadata = jsonb_build_object($2::text, $2::text),
		pm_brand = $2 WHERE id = $1`, sub, evil)
	require.NoError(t, err)
	_, err = n.pool.Exec(ctx, `UPDATE charges SET status = 'requires_review', failure_code = $2, review_reason = $2 WHERE id = $1`, charge, evil)
	require.NoError(t, err)
	_, err = n.pool.Exec(ctx, `UPDATE events SET data = jsonb_set(jsonb_set(data::jsonb, '{failure_code}', to_jsonb($2::text)),
		'{review_reason}', to_jsonb($2::text))::json WHERE object_id = $1`, charge, evil)
	require.NoError(t, err)

	u := newBrowser(t, n.url)
	u.login(adminKey)
	for _, path := range []string{"/console/subscriptions/" + sub, "/console/charges/" + charge, "/console/review"} {
		res := u.get(path)
		require.Equal(t, http.StatusOK, res.status, res.body)
		requireNeutralised(t, res.body, path)
	}
	search := u.get("/console/search?" + url.Values{"q": {"cust-evil"}}.Encode())
	requireNeutralised(t, search.body, "search")

	// What a person types is shown back the same way; the console refuses
	// it at entry, as the API does.
	review := u.get("/console/review").body
	action, fields := form(t, review, "Mark failed")
	fields.Set("evidence", "ticket 42 \u202e")
	res := u.post(action, fields)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.NotContains(t, res.body, "\u202e")
	require.Contains(t, res.body, `aria-label="Review queue"`, "refused on the review queue")
	fields.Set("evidence", "")
	require.Equal(t, http.StatusBadRequest, u.post(action, fields).status, "no evidence")
	require.Equal(t, 1, count(t, n.pool, `SELECT count(*) FROM charges WHERE id = $1 AND status = 'requires_review'`, charge))
	fields.Set("evidence", "Gateway dashboard shows no capture, ticket 42")
	res = u.post(action, fields)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, "/console/review?done="+url.QueryEscape(fields.Get("form_id")), res.header.Get("Location"))
	var resolvedBy, evidence string
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT status, resolved_by FROM charges WHERE id = $1`, charge).Scan(&evidence, &resolvedBy))
	require.Equal(t, "failed", evidence)
	require.Equal(t, "admin:bootstrap-admin", resolvedBy)
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT evidence FROM console_actions WHERE form_id = $1`, fields.Get("form_id")).Scan(&evidence))
	require.Equal(t, "Gateway dashboard shows no capture, ticket 42", evidence)
	require.True(t, strings.Contains(u.get(res.header.Get("Location")).body, "Resolved: charge "+charge+" is failed."))
}
