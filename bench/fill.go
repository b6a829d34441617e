package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rebill/rebill/charges"
	"github.com/rebill/rebill/subscriptions"
)

// History is what a deployment has kept by the time it is measured:
// years of subscriptions, their charges and the events about them. A run
// with history shows whether the speed measured on empty tables holds when
// every index is deep and most of the heap is cold.
type History struct {
	Subscriptions, Charges, Events int
}

// Big is the size a deployment reaches after a few years of a payment
// team's volume: the size the figures must hold at.
var Big = History{Subscriptions: 2_000_000, Charges: 10_000_000, Events: 20_000_000}

// ParseHistory reads "big", "" (none) or "SUBSCRIPTIONS,CHARGES,EVENTS".
func ParseHistory(s string) (History, error) {
	switch s {
	case "":
		return History{}, nil
	case "big":
		return Big, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return History{}, fmt.Errorf("history %q: want big or SUBSCRIPTIONS,CHARGES,EVENTS", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			return History{}, fmt.Errorf("history %q: %q is not a count", s, p)
		}
		n[i] = v
	}
	h := History{Subscriptions: n[0], Charges: n[1], Events: n[2]}
	if h.Charges > 0 && h.Subscriptions == 0 {
		return History{}, fmt.Errorf("history %q: charges need subscriptions to belong to", s)
	}
	return h, nil
}

// fillChunk rows go in per statement: each its own transaction, so the
// server's WAL and locks stay bounded however large the history.
const fillChunk = 500_000

// historyYears is how far back the history reaches.
const historyYears = 3

// uuidV7SQL is an id for the time t laid out as rebill's own (uuid.NewV7):
// time-ordered, so history sits to the left of new rows in every index on
// an id, as it would in a real deployment.
func uuidV7SQL(t string) string {
	return `(lpad(to_hex((extract(epoch FROM ` + t + `) * 1000)::bigint), 12, '0') ||
		substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid`
}

// noticesSentSQL records the charge.upcoming notice of every history
// subscription's next renewal (notify.UpcomingKey), a day ago; the
// subscriptions are written marked noticed (upcoming_noticed_for), as the
// notice scan leaves them.
const noticesSentSQL = `INSERT INTO events (id, type, object_id, customer_id, created_at, data, notice_key)
	SELECT ` + "(lpad(to_hex((extract(epoch FROM now() - interval '1 day') * 1000)::bigint), 12, '0') || substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid" + `,
		'charge.upcoming', id, customer_id, now() - interval '1 day',
		json_build_object('object', 'subscription', 'next_charge_at', next_charge_at),
		'charge.upcoming:' || id || ':' || extract(epoch FROM next_charge_at)::bigint
	FROM subscriptions WHERE customer_id LIKE 'hist-%' AND next_period_index >= 1
	ON CONFLICT (notice_key) DO NOTHING`

// daysReconciledSQL records the last 31 days before $1 as reconciled
// with sim1, the bench's gateway (reconcile looks back 7).
const daysReconciledSQL = `INSERT INTO reconciliation_days (gateway, day, status, operations, checked_at)
	SELECT 'sim1', d::date, 'matched', 0, $1 FROM generate_series($1::date - 31, $1::date - 1, interval '1 day') AS d
	ON CONFLICT DO NOTHING`

// filledTables are the tables Fill writes, whose secondary indexes it
// builds once after the rows are in rather than row by row.
var filledTables = []string{"subscriptions", "charges", "events"}

// Fill writes h into the migrated database with set-based SQL (not the
// API: the point is the tables' size, and the API would take hours), as of
// now. None of it is due: subscriptions still billing are due within the
// next month but not before a day from now, their charges have all
// settled (succeeded, with a few failed and voided), and the events are
// the charges' past notifications. Progress goes to out.
func Fill(ctx context.Context, pool *pgxpool.Pool, h History, now time.Time, out io.Writer) error {
	start := time.Now()
	indexes, err := dropIndexes(ctx, pool)
	if err != nil {
		return err
	}
	foreign, err := dropForeignKeys(ctx, pool)
	if err != nil {
		return err
	}
	past := now.AddDate(-historyYears, 0, 0)
	span := now.Sub(past).Seconds()
	// Subscriptions: 85 % active, 10 % cancelled, 5 % paused, spread over
	// 200,000 customers (10 each at the big size).
	for done := 0; done < h.Subscriptions; done += fillChunk {
		size := min(fillChunk, h.Subscriptions-done)
		_, err := pool.Exec(ctx, `INSERT INTO subscriptions (id, customer_id, status, amount, currency, interval,
				interval_count, timezone, billing_anchor, next_period_index, next_charge_at, pm_gateway, pm_token,
				pm_exp_month, pm_exp_year, created_at, updated_at, cancelled_at, paused_at, upcoming_noticed_for)
			SELECT `+uuidV7SQL("created")+`, 'hist-' || (i % 200000), st, 1990, 'RUB', 'month', 1, 'Europe/Moscow',
				created, 36, next_charge_at, 'sim1',
				'ptok_' || gen_random_uuid(), 1 + i % 12, 2030, created, created,
				CASE WHEN st = $5 THEN $3 END, CASE WHEN st = $6 THEN $3 END, next_charge_at
			FROM (SELECT i, $2::timestamptz + (i::float8 / $7) * interval '1 year' AS created,
					$3::timestamptz + interval '1 day' + (i % 720) * interval '1 hour' AS next_charge_at,
					CASE WHEN i % 20 = 0 THEN $6 WHEN i % 10 = 1 THEN $5 ELSE $4 END AS st
				FROM generate_series($1::bigint, $1::bigint + $8 - 1) AS i) AS g`,
			done, past, now, subscriptions.Active, subscriptions.Cancelled, subscriptions.Paused,
			float64(h.Subscriptions), size)
		if err != nil {
			return fmt.Errorf("fill subscriptions: %w", err)
		}
	}
	fmt.Fprintf(out, "history: %d subscriptions in %s\n", h.Subscriptions, time.Since(start).Round(time.Second))

	// Charges: charge i is period i / S of subscription i % S (ordered by
	// id, so the subscriptions created first have the most periods), its
	// time spread over the history; 95 % succeeded, 4 % failed, 1 % voided.
	mark := time.Now()
	if _, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE bench_history_subscriptions AS
		SELECT row_number() OVER (ORDER BY id) - 1 AS n, id, customer_id FROM subscriptions WHERE customer_id LIKE 'hist-%';
		CREATE UNIQUE INDEX ON bench_history_subscriptions (n)`); err != nil {
		return fmt.Errorf("number history subscriptions: %w", err)
	}
	for done := 0; done < h.Charges; done += fillChunk {
		size := min(fillChunk, h.Charges-done)
		_, err := pool.Exec(ctx, `INSERT INTO charges (id, subscription_id, customer_id, period_key, period_start, amount, currency, gateway,
				pm_token, status, attempt_count, authorization_ref, created_at, updated_at, attempt_due_at, attempt_times,
				failure_code)
			SELECT `+uuidV7SQL("at")+`, s.id, s.customer_id, to_char(at, 'YYYY-MM-DD') || '#' || (g.i / $2), at, 1990, 'RUB',
				'sim1', 'ptok_' || gen_random_uuid(), st, 1, 'hist_auth_' || g.i, at, at + interval '2 seconds', at,
				ARRAY[at], CASE WHEN st = $6 THEN 'card_declined' END
			FROM (SELECT i, $3::timestamptz + (i::float8 / $4) * $5 * interval '1 second' AS at,
					CASE WHEN i % 100 = 7 THEN $7 WHEN i % 25 = 3 THEN $6 ELSE $8 END AS st
				FROM generate_series($1::bigint, $1::bigint + $9 - 1) AS i) AS g
			JOIN bench_history_subscriptions s ON s.n = g.i % $2`,
			done, h.Subscriptions, past, float64(h.Charges), span,
			string(charges.Failed), string(charges.Voided), string(charges.Succeeded), size)
		if err != nil {
			return fmt.Errorf("fill charges: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `DROP TABLE bench_history_subscriptions`); err != nil {
		return fmt.Errorf("drop history numbering: %w", err)
	}
	fmt.Fprintf(out, "history: %d charges in %s\n", h.Charges, time.Since(mark).Round(time.Second))

	// Events: two per charge's worth of history (created, then settled),
	// about the same customers, spread over the same years.
	mark = time.Now()
	for done := 0; done < h.Events; done += fillChunk {
		size := min(fillChunk, h.Events-done)
		_, err := pool.Exec(ctx, `INSERT INTO events (id, type, object_id, customer_id, created_at, data)
			SELECT `+uuidV7SQL("at")+`, CASE WHEN i % 2 = 0 THEN 'charge.created' ELSE 'charge.succeeded' END,
				gen_random_uuid(), 'hist-' || (i / 2 % 200000), at,
				json_build_object('object', 'charge', 'amount', 1990, 'currency', 'RUB', 'status',
					CASE WHEN i % 2 = 0 THEN $6 ELSE $7 END)
			FROM (SELECT i, $2::timestamptz + (i::float8 / $3) * $4 * interval '1 second' AS at
				FROM generate_series($1::bigint, $1::bigint + $5 - 1) AS i) AS g`,
			done, past, float64(h.Events), span, size, string(charges.Scheduled), string(charges.Succeeded))
		if err != nil {
			return fmt.Errorf("fill events: %w", err)
		}
	}
	// The renewals ahead were announced on the days before, as a node
	// running all along would have: without these, the first node on the
	// filled tables would announce them all at once, a burst no deployment
	// sees.
	tag, err := pool.Exec(ctx, noticesSentSQL)
	if err != nil {
		return fmt.Errorf("fill upcoming notices: %w", err)
	}
	fmt.Fprintf(out, "history: %d events and %d notices of renewals ahead in %s\n", h.Events, tag.RowsAffected(),
		time.Since(mark).Round(time.Second))
	// Likewise the days behind were reconciled with the gateway on the
	// days after them; the simulator's ledger starts empty, so a node
	// reconciling them at start would report every history charge missing.
	if _, err := pool.Exec(ctx, daysReconciledSQL, now); err != nil {
		return fmt.Errorf("fill reconciled days: %w", err)
	}

	mark = time.Now()
	if err := buildIndexes(ctx, pool, indexes); err != nil {
		return err
	}
	for _, fk := range foreign {
		if _, err := pool.Exec(ctx, fk); err != nil {
			return fmt.Errorf("%s: %w", fk, err)
		}
	}
	fmt.Fprintf(out, "history: %d indexes built and %d foreign keys checked in %s\n",
		len(indexes), len(foreign), time.Since(mark).Round(time.Second))
	mark = time.Now()
	for _, table := range filledTables {
		if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) `+table); err != nil {
			return fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	var size string
	if err := pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size(current_database()))`).Scan(&size); err != nil {
		return fmt.Errorf("database size: %w", err)
	}
	fmt.Fprintf(out, "history: vacuumed in %s; database %s, filled in %s\n",
		time.Since(mark).Round(time.Second), size, time.Since(start).Round(time.Second))
	return nil
}

// dropIndexes drops the secondary indexes of the filled tables (not those
// behind a primary key or unique constraint) and returns their
// definitions.
func dropIndexes(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
		FROM pg_index i
		WHERE i.indrelid = ANY($1::regclass[])
		  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`, filledTables)
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	type index struct{ name, def string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var i index
		return i, r.Scan(&i.name, &i.def)
	})
	if err != nil {
		return nil, fmt.Errorf("list indexes: %w", err)
	}
	defs := make([]string, 0, len(found))
	for _, i := range found {
		if _, err := pool.Exec(ctx, `DROP INDEX `+i.name); err != nil {
			return nil, fmt.Errorf("drop index %s: %w", i.name, err)
		}
		defs = append(defs, i.def)
	}
	return defs, nil
}

// dropForeignKeys drops the foreign keys from and to the filled tables
// (checked row by row as rows go in, they would cost more than the rows)
// and returns the statements that add them back, checked at once.
func dropForeignKeys(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE contype = 'f' AND (conrelid = ANY($1::regclass[]) OR confrelid = ANY($1::regclass[]))`, filledTables)
	if err != nil {
		return nil, fmt.Errorf("list foreign keys: %w", err)
	}
	type key struct{ table, name, def string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
		var k key
		return k, r.Scan(&k.table, &k.name, &k.def)
	})
	if err != nil {
		return nil, fmt.Errorf("list foreign keys: %w", err)
	}
	adds := make([]string, 0, len(found))
	for _, k := range found {
		name := pgx.Identifier{k.name}.Sanitize()
		if _, err := pool.Exec(ctx, `ALTER TABLE `+k.table+` DROP CONSTRAINT `+name); err != nil {
			return nil, fmt.Errorf("drop foreign key %s: %w", k.name, err)
		}
		adds = append(adds, `ALTER TABLE `+k.table+` ADD CONSTRAINT `+name+` `+k.def)
	}
	return adds, nil
}

// buildIndexes creates the indexes dropIndexes dropped, each with room to
// sort in memory.
func buildIndexes(ctx context.Context, pool *pgxpool.Pool, defs []string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '512MB'`); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `RESET maintenance_work_mem`) }()
	for _, def := range defs {
		if _, err := conn.Exec(ctx, def); err != nil {
			return fmt.Errorf("%s: %w", def, err)
		}
	}
	return nil
}
