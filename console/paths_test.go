package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

// strangeIDs are bill and customer ids an issuer or a customer may choose
// (printable, not "." or ".."): each character that means something in a
// URL, escapes that a second decoding would change ("%41" is not "A",
// "a%2Fb" is not "a/b"), spaces and non-ASCII.
var strangeIDs = []string{
	"INV/2026/12", "a/b", "a%2Fb", "%41", "A", "a/../../x", "..a", "a..", "?q=1&b=2", "x#y", "100%", "% 2",
	"a b  c", " lead", "счёт №5/2", "日本語", "a+b;c,d=e@f:g", `back\slash`, "'quote\"",
}

// link is a URL a page holds: where, and in which bill's section.
type link struct {
	kind, raw, bill string
}

// pageLinks parses a page and returns every link and form action, each
// with the bill id whose section holds it (the section's heading).
func pageLinks(t *testing.T, page string) []link {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	var out []link
	var walk func(n *html.Node, bill string)
	walk = func(n *html.Node, bill string) {
		if n.Type == html.ElementNode {
			attr := map[string]string{}
			for _, a := range n.Attr {
				attr[a.Key] = a.Val
			}
			switch {
			case n.Data == "section" && attr["class"] == "bill":
				bill = billHeading(t, n)
			case n.Data == "a" && attr["href"] != "":
				out = append(out, link{"href", attr["href"], bill})
			case n.Data == "form":
				out = append(out, link{"action", attr["action"], bill})
			case n.Data == "link" && attr["href"] != "":
				out = append(out, link{"href", attr["href"], bill})
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, bill)
		}
	}
	walk(doc, "")
	return out
}

// billHeading is the bill id a section's <h3>Bill …</h3> names.
func billHeading(t *testing.T, section *html.Node) string {
	var find func(n *html.Node) *html.Node
	find = func(n *html.Node) *html.Node {
		if n.Type == html.ElementNode && n.Data == "h3" {
			return n
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if h := find(c); h != nil {
				return h
			}
		}
		return nil
	}
	h := find(section)
	require.NotNil(t, h, "a bill section without its heading")
	var b strings.Builder
	var text func(n *html.Node)
	text = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			text(c)
		}
	}
	text(h)
	id, ok := strings.CutPrefix(b.String(), "Bill ")
	require.True(t, ok, "heading %q", b.String())
	return id
}

// segments splits a resolved path into its decoded segments, as the
// console routes it: on the escaped path, each segment decoded once.
func segments(t *testing.T, u *url.URL) []string {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	for i, p := range parts {
		v, err := url.PathUnescape(p)
		require.NoError(t, err, u.String())
		parts[i] = v
	}
	return parts
}

// strangeBills sets up a housing enrollment whose bills have strangeIDs
// and a crafted id walking up to the retry of another customer's charge,
// which is in review after a decline (so that a retry would start a new
// attempt). Its subscription's and enrollment's customer id holds the
// same characters.
func strangeBills(t *testing.T, n node) (enr, charge string, bills []string) {
	t.Helper()
	ctx := context.Background()
	other := n.api(t, http.MethodPost, "/v1/subscriptions", map[string]any{
		"customer_id": "cust-other", "amount": 1500, "currency": "USD", "interval": "month", "timezone": "UTC",
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_decline_funds", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
	require.Eventually(t, func() bool {
		return n.pool.QueryRow(ctx, `SELECT id::text FROM charges WHERE subscription_id = $1
			AND status IN ('succeeded', 'declined', 'failed')`, other).Scan(&charge) == nil
	}, 20*time.Second, 20*time.Millisecond)
	_, err := n.pool.Exec(ctx, `UPDATE charges SET status = 'requires_review', review_reason = 'a person looks',
		next_attempt_at = NULL WHERE id = $1`, charge)
	require.NoError(t, err)

	now := time.Now().UTC()
	moscow, err := time.LoadLocation("Europe/Moscow")
	require.NoError(t, err)
	enr = n.api(t, http.MethodPost, "/v1/enrollments", map[string]any{
		"customer_id": "cust-paths", "kind": "housing", "account_ref": "76ДД234567",
		"pay_day": min(now.In(moscow).AddDate(0, 0, 10).Day(), 28), "currency": "RUB", "max_amount": 1000000,
		"payment_method": map[string]any{"gateway": "sim1", "token": "tok_ok", "exp_month": 12, "exp_year": 2035},
	})["id"].(string)
	bills = append([]string{"../../../charges/" + charge + "/retry#"}, strangeIDs...)
	for _, id := range bills {
		n.api(t, http.MethodPost, "/v1/enrollments/"+enr+"/bills", map[string]any{
			"bill_id": id, "amount": 5000, "issued_at": now.Add(-time.Hour).Format(time.RFC3339),
			"due_date": now.AddDate(0, 0, 40).Format(time.DateOnly)})
	}
	// Customer ids are checked at entry; the console must not rely on it.
	sub := n.createSubscription(t, "cust-paths")
	_, err = n.pool.Exec(ctx, `UPDATE subscriptions SET customer_id = $1 WHERE id = $2`, strangeCustomer, sub)
	require.NoError(t, err)
	_, err = n.pool.Exec(ctx, `UPDATE enrollments SET customer_id = $1 WHERE id = $2`, strangeCustomer, enr)
	require.NoError(t, err)
	return enr, charge, bills
}

const strangeCustomer = "c/../../x?y#z %41 клиент"

// Every link and form action of every console page resolves, as a browser
// resolves it (url.ResolveReference: dot segments removed, the fragment
// cut), to the object it is about, whatever the ids hold: an object that
// exists, by its own id, and each bill's forms to that bill.
func TestEveryConsoleURLStaysUnderItsObject(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	enr, charge, bills := strangeBills(t, n)
	var sub string
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT id::text FROM subscriptions WHERE customer_id = $1`, strangeCustomer).Scan(&sub))
	var other string
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT subscription_id::text FROM charges WHERE id = $1`, charge).Scan(&other))

	u := newBrowser(t, n.url)
	u.login(adminKey)
	ids := func(query string) []string {
		rows, err := n.pool.Query(ctx, query)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			out = append(out, id)
		}
		require.NoError(t, rows.Err())
		return out
	}
	// What a link may name: an object that exists, by its own id.
	objects := map[string][]string{
		"enrollments":   ids(`SELECT id::text FROM enrollments`),
		"subscriptions": ids(`SELECT id::text FROM subscriptions`),
		"charges":       ids(`SELECT id::text FROM charges`),
		"sessions":      {"bootstrap-admin"},
	}
	pages := []string{"/console/", "/console/search?" + url.Values{"q": {strangeCustomer}}.Encode(), "/console/subscriptions/" + sub,
		"/console/subscriptions/" + other, "/console/charges/" + charge, "/console/review", "/console/enrollments/" + enr,
		"/console/operations", "/console/experiments", "/console/settings", "/console/sessions"}
	seenBills := map[string]int{}
	for _, path := range pages {
		res := u.get(path)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", path, res.body)
		base, err := url.Parse(n.url + path)
		require.NoError(t, err)
		for _, l := range pageLinks(t, res.body) {
			ref, err := url.Parse(l.raw)
			require.NoError(t, err, "%s: %s %q", path, l.kind, l.raw)
			to := base.ResolveReference(ref)
			where := path + ": " + l.kind + " " + l.raw
			require.Equal(t, base.Host, to.Host, where)
			if l.kind == "href" && ref.Path == "" && ref.Fragment != "" {
				continue // a fragment of the page itself (skip link)
			}
			require.Empty(t, ref.Fragment, where)
			require.Equal(t, ref.EscapedPath(), to.EscapedPath(), "%s: a dot segment moved it", where)
			seg := segments(t, to)
			if seg[0] == "riverui" {
				continue
			}
			require.Equal(t, "console", seg[0], where)
			if len(seg) >= 3 && objects[seg[1]] != nil {
				require.Contains(t, objects[seg[1]], seg[2], "%s names no object", where)
			}
			if l.kind == "action" && len(seg) > 3 && seg[1] == "enrollments" {
				require.Len(t, seg, 6, where)
				require.Equal(t, []string{"console", "enrollments", enr, "bills", l.bill}, seg[:5], "%s: not its section's bill", where)
				require.Contains(t, []string{"confirm", "withdraw"}, seg[5], where)
				seenBills[l.bill]++
			}
			if q := to.Query().Get("q"); seg[1] == "search" && l.kind == "href" {
				require.Contains(t, []string{strangeCustomer, "cust-other"}, q, where)
			}
		}
	}
	for _, id := range bills {
		// Withdraw is offered on each of them (Confirm only on a bill
		// awaiting confirmation).
		require.GreaterOrEqual(t, seenBills[id], 1, "bill %q: its forms", id)
	}
}

// Each bill's Withdraw, posted where a browser sends it, withdraws that
// bill and no other, each id decoded exactly once ("%41" is not "A",
// "a%2Fb" is not "a/b", "INV/2026/12" works); the bill id crafted to walk
// up the path withdraws its own bill and leaves the other customer's
// charge in review exactly as it was, not retried.
func TestBillWithdrawActsOnItsOwnBill(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := context.Background()
	enr, charge, bills := strangeBills(t, n)
	var before string
	require.NoError(t, n.pool.QueryRow(ctx, `SELECT row_to_json(c)::text FROM charges c WHERE id = $1`, charge).Scan(&before))
	u := newBrowser(t, n.url)
	u.login(adminKey)
	billStatus := func() map[string]string {
		rows, err := n.pool.Query(ctx, `SELECT bill_id, status FROM bills WHERE enrollment_id = $1`, enr)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var id, st string
			require.NoError(t, rows.Scan(&id, &st))
			out[id] = st
		}
		require.NoError(t, rows.Err())
		return out
	}
	page := "/console/enrollments/" + enr
	base, err := url.Parse(n.url + page)
	require.NoError(t, err)
	for _, id := range bills { // the crafted one first
		was := billStatus()
		require.NotEqual(t, "withdrawn", was[id], id)
		action, fields := billForm(t, u.get(page).body, id, "withdraw")
		ref, err := url.Parse(action)
		require.NoError(t, err)
		res := u.post(base.ResolveReference(ref).RequestURI(), fields)
		var after string
		require.NoError(t, n.pool.QueryRow(ctx, `SELECT row_to_json(c)::text FROM charges c WHERE id = $1`, charge).Scan(&after))
		require.Equal(t, before, after, "withdrawing %q changed the other customer's charge", id)
		require.Zero(t, count(t, n.pool, `SELECT count(*) FROM console_actions WHERE object_id = $1`, charge))
		require.Equal(t, http.StatusSeeOther, res.status, "withdraw %q: %s", id, res.body)
		require.Equal(t, page+"?done="+url.QueryEscape(fields.Get("form_id")), res.header.Get("Location"), id)
		was[id] = "withdrawn"
		require.Equal(t, was, billStatus(), "withdrawing %q", id)
	}
	require.Equal(t, len(bills), count(t, n.pool, `SELECT count(*) FROM console_actions WHERE action = 'bill.withdraw'`))
}

// billForm finds the form of a bill's section (by its heading) whose
// action ends in verb.
func billForm(t *testing.T, page, bill, verb string) (string, url.Values) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	var found *html.Node
	var walk func(n *html.Node, in string)
	walk = func(n *html.Node, in string) {
		if n.Type == html.ElementNode && n.Data == "section" {
			for _, a := range n.Attr {
				if a.Key == "class" && a.Val == "bill" {
					in = billHeading(t, n)
				}
			}
		}
		if n.Type == html.ElementNode && n.Data == "form" && in == bill {
			for _, a := range n.Attr {
				if a.Key == "action" && strings.HasSuffix(a.Val, "/"+verb) {
					found = n
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, in)
		}
	}
	walk(doc, "")
	require.NotNil(t, found, "no %s form for bill %q", verb, bill)
	var action string
	for _, a := range found.Attr {
		if a.Key == "action" {
			action = a.Val
		}
	}
	fields := url.Values{}
	var inputs func(n *html.Node)
	inputs = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "input" {
			var name, value string
			for _, a := range n.Attr {
				switch a.Key {
				case "name":
					name = a.Val
				case "value":
					value = a.Val
				}
			}
			fields.Set(name, value)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			inputs(c)
		}
	}
	inputs(found)
	return action, fields
}
