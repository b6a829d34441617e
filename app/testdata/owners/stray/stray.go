package stray

import "fmt"

// ChargesSQL hands out a statement over charges.
const ChargesSQL = `SELECT id FROM charges`

func statements(table string) []any {
	return []any{
		`INSERT INTO charges (id) VALUES ($1)`,
		`SELECT b.id FROM enrollments e JOIN bills b ON b.enrollment_id = e.id FOR UPDATE OF b`,
		`delete from subscriptions where id = $1`,
		`WITH moved AS (UPDATE events SET x = 1 RETURNING id) SELECT id FROM moved`,
		fmt.Errorf("update charges: %w", fmt.Errorf("gone")),
		`SELECT count(*) FROM ` + table,
		"retry backoff from " + table,
		`SELECT extract(epoch FROM ` + table + `)`,
	}
}
