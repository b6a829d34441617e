package autopay

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rebill/rebill/enrollments"
	"github.com/rebill/rebill/platform/metrics"
)

// cursorState is a source's cursor as a pull starts.
type cursorState struct {
	cursor int64
	// from is the cursor that was current RereadWindow ago (0 before the
	// source's first pull that long ago): where known accounts are read
	// from.
	from       int64
	answeredAt time.Time
}

// accountGroup is the identifiers of one request, and the enrollments
// read for the first time through it (their bills from sequence 0).
type accountGroup struct {
	accounts []enrollments.AccountRef
	fresh    []uuid.UUID
}

// pullSource reads one source and delivers its bills.
//
// The enrolled accounts (enrollments not cancelled) are asked about in
// groups of at most BatchSize identifiers, each group paged through to the
// source's head. An enrollment the source was never read for is read from
// sequence 0, so that it gets the bills published before it; once its
// group has been read to the end it is recorded as read. The others are
// read from the cursor that was current RereadWindow ago: a bill that
// became visible after higher sequences had been read (its publication
// committed late) is read by a later pull, and bills read again are
// no-ops. The cursor moves, in one transaction after every page's bills
// were stored, to the lowest head the groups reached; a pull that fails
// anywhere leaves it where it was.
func (a *Autopay) pullSource(ctx context.Context, kind enrollments.Kind, src BillSource) (int, error) {
	info := src.Info()
	created, err := a.pullSourceOnce(ctx, kind, src, info)
	if err != nil {
		metrics.BillSourceErrors.WithLabelValues(info.Name).Inc()
		return created, fmt.Errorf("pull bill source %s: %w", info.Name, err)
	}
	return created, nil
}

// minBatch is the fewest identifiers one request asks about: an
// enrollment's stay in one request, and a fines enrollment may name an STS
// and a licence, each in two spellings.
const minBatch = 4

func (a *Autopay) pullSourceOnce(ctx context.Context, kind enrollments.Kind, src BillSource, info SourceInfo) (int, error) {
	batch := max(info.BatchSize, minBatch)
	state, err := a.openCursor(ctx, info)
	if err != nil {
		return 0, err
	}
	// Whichever node pulled last, this one reports it from now on.
	metrics.BillSourceAnswered(info.Name, state.answeredAt)
	created, head, groups := 0, int64(0), 0
	read := func(g accountGroup, from int64) error {
		n, h, err := a.readGroup(ctx, kind, src, info, batch, g, from)
		created += n
		if err != nil {
			return err
		}
		if groups == 0 || h < head {
			head = h
		}
		groups++
		return nil
	}
	after := uuid.Nil
	for {
		enrolled, err := a.Enrollments.Enrolled(ctx, a.Pool, kind, after, batch)
		if err != nil {
			return created, err
		}
		if len(enrolled) == 0 {
			break
		}
		known, err := a.readEnrollments(ctx, info.Name, enrolled)
		if err != nil {
			return created, err
		}
		for _, g := range groupAccounts(enrolled, known, batch) {
			from := state.from
			if len(g.fresh) > 0 {
				from = 0
			}
			if err := read(g, from); err != nil {
				return created, err
			}
		}
		if len(enrolled) < batch {
			break
		}
		after = enrolled[len(enrolled)-1].ID
	}
	if groups == 0 {
		// No account to ask about: the source is still asked for its
		// head, which moves the cursor and tells that it answers.
		if err := read(accountGroup{}, state.from); err != nil {
			return created, err
		}
	}
	answeredAt, err := a.advanceCursor(ctx, info, head)
	if err != nil {
		return created, err
	}
	metrics.BillSourceAnswered(info.Name, answeredAt)
	a.Logger.Debug().Str("source", info.Name).Int64("from", state.from).Int64("head", head).Int("groups", groups).
		Int("created", created).Msg("bill source pulled")
	return created, nil
}

// readGroup pages through one group's bills from sequence from to the
// source's head, delivering each page's bills before asking for the next.
// Returns the bills created and the head reached.
func (a *Autopay) readGroup(ctx context.Context, kind enrollments.Kind, src BillSource, info SourceInfo, limit int,
	g accountGroup, from int64) (int, int64, error) {
	created := 0
	after := from
	for {
		page, err := src.Pull(ctx, PullRequest{Accounts: g.accounts, After: after, Limit: limit})
		if err != nil {
			return created, 0, err
		}
		switch {
		case page.Next < after, page.HasMore && page.Next == after:
			return created, 0, fmt.Errorf("source answered next sequence %d after %d: no progress", page.Next, after)
		case len(page.Bills)+len(page.Invalid) > limit:
			return created, 0, fmt.Errorf("source answered %d bills, over the limit of %d", len(page.Bills)+len(page.Invalid), limit)
		}
		metrics.BillSourceBills.WithLabelValues(info.Name).Add(float64(len(page.Bills) + len(page.Invalid)))
		for _, bad := range page.Invalid {
			a.Logger.Warn().Str("source", info.Name).Str("bill_id", bad.BillID).Int64("sequence", bad.Sequence).
				Err(bad.Err).Msg("unreadable bill skipped")
		}
		for _, sb := range page.Bills {
			n, err := a.deliver(ctx, kind, sb)
			created += n
			if err != nil {
				return created, 0, err
			}
		}
		if page.HasMore {
			after = page.Next
			continue
		}
		if len(g.fresh) > 0 {
			if err := a.markRead(ctx, info.Name, g.fresh); err != nil {
				return created, 0, err
			}
		}
		return created, page.Next, nil
	}
}

// groupAccounts splits the identifiers of enrolled into requests of at
// most batch identifiers, the enrollments read before (known) apart from
// the others; an enrollment's identifiers stay in one request. An
// identifier is asked about once per group.
func groupAccounts(enrolled []enrollments.Enrollment, known map[uuid.UUID]bool, batch int) []accountGroup {
	var groups []accountGroup
	for _, fresh := range []bool{false, true} {
		var g accountGroup
		seen := map[enrollments.AccountRef]bool{}
		for _, e := range enrolled {
			if known[e.ID] == fresh {
				continue
			}
			var ids []enrollments.AccountRef
			for _, ref := range identifiers(e) {
				if !seen[ref] {
					ids = append(ids, ref)
				}
			}
			if len(g.accounts)+len(ids) > batch {
				groups = append(groups, g)
				g, seen = accountGroup{}, map[enrollments.AccountRef]bool{}
				ids = identifiers(e)
			}
			for _, ref := range ids {
				seen[ref] = true
			}
			g.accounts = append(g.accounts, ids...)
			if fresh {
				g.fresh = append(g.fresh, e.ID)
			}
		}
		if len(g.accounts) > 0 || len(g.fresh) > 0 {
			groups = append(groups, g)
		}
	}
	return groups
}

// identifiers are the account identifiers an enrollment's bills may be
// filed under, one AccountRef each: its own, and an STS or a driving
// licence also in the Latin spelling of its letters (77YA123456 for
// 77УА123456), under which a source may have filed fines typed on a Latin
// keyboard. ByAccount reads either back as the enrollment's.
func identifiers(e enrollments.Enrollment) []enrollments.AccountRef {
	var out []enrollments.AccountRef
	if e.AccountRef.ELS != "" {
		out = append(out, enrollments.AccountRef{ELS: e.AccountRef.ELS})
	}
	if sts := e.AccountRef.STS; sts != "" {
		out = append(out, enrollments.AccountRef{STS: sts})
		if latin, ok := enrollments.LatinSpelling(sts); ok {
			out = append(out, enrollments.AccountRef{STS: latin})
		}
	}
	if dl := e.AccountRef.DriverLicense; dl != "" {
		out = append(out, enrollments.AccountRef{DriverLicense: dl})
		if latin, ok := enrollments.LatinSpelling(dl); ok {
			out = append(out, enrollments.AccountRef{DriverLicense: latin})
		}
	}
	return out
}

// openCursor creates the source's cursor at 0 on its first pull (its
// answered_at then is when it was first pulled, from which its silence is
// counted) and reads it.
func (a *Autopay) openCursor(ctx context.Context, info SourceInfo) (cursorState, error) {
	now := a.Clock.Now()
	var st cursorState
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO bill_source_cursors (source, answered_at, updated_at)
			VALUES ($1, now(), $2) ON CONFLICT DO NOTHING`, info.Name, now); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT c.cursor, c.answered_at, coalesce((SELECT h.cursor FROM bill_source_cursor_history h
			WHERE h.source = c.source AND h.at <= $2 ORDER BY h.at DESC LIMIT 1), 0)
			FROM bill_source_cursors c WHERE c.source = $1`, info.Name, now.Add(-info.RereadWindow)).
			Scan(&st.cursor, &st.answeredAt, &st.from)
	})
	if err != nil {
		return cursorState{}, fmt.Errorf("read cursor: %w", err)
	}
	return st, nil
}

// advanceCursor moves the cursor up to head (never down: a pull that
// re-read the window reaches a head at least as high as the cursor,
// unless the source lost bills), records its new value in the history,
// drops the history the window no longer needs and sets answered_at.
// Returns answered_at.
func (a *Autopay) advanceCursor(ctx context.Context, info SourceInfo, head int64) (time.Time, error) {
	now := a.Clock.Now()
	var answeredAt time.Time
	err := pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		var old int64
		if err := tx.QueryRow(ctx, `SELECT cursor FROM bill_source_cursors WHERE source = $1 FOR UPDATE`,
			info.Name).Scan(&old); err != nil {
			return err
		}
		cursor := max(old, head)
		if err := tx.QueryRow(ctx, `UPDATE bill_source_cursors SET cursor = $2, answered_at = now(), updated_at = $3
			WHERE source = $1 RETURNING answered_at`, info.Name, cursor, now).Scan(&answeredAt); err != nil {
			return err
		}
		if cursor != old {
			if _, err := tx.Exec(ctx, `INSERT INTO bill_source_cursor_history (source, at, cursor) VALUES ($1, $2, $3)
				ON CONFLICT (source, at) DO UPDATE SET cursor = excluded.cursor`, info.Name, now, cursor); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM bill_source_cursor_history WHERE source = $1 AND at < (
			SELECT max(at) FROM bill_source_cursor_history WHERE source = $1 AND at <= $2)`, info.Name, now.Add(-info.RereadWindow))
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("advance cursor: %w", err)
	}
	return answeredAt, nil
}

// readEnrollments tells which of enrolled the source has been read for
// from sequence 0.
func (a *Autopay) readEnrollments(ctx context.Context, source string, enrolled []enrollments.Enrollment) (map[uuid.UUID]bool, error) {
	ids := make([]uuid.UUID, len(enrolled))
	for i, e := range enrolled {
		ids[i] = e.ID
	}
	rows, err := a.Pool.Query(ctx, `SELECT enrollment_id FROM bill_source_enrollments
		WHERE source = $1 AND enrollment_id = ANY($2)`, source, ids)
	if err != nil {
		return nil, fmt.Errorf("read enrollments pulled: %w", err)
	}
	read, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("read enrollments pulled: %w", err)
	}
	known := make(map[uuid.UUID]bool, len(read))
	for _, id := range read {
		known[id] = true
	}
	return known, nil
}

// markRead records that the source was read for enrollments from sequence
// 0 to its head: later pulls read them from the window only.
func (a *Autopay) markRead(ctx context.Context, source string, ids []uuid.UUID) error {
	_, err := a.Pool.Exec(ctx, `INSERT INTO bill_source_enrollments (source, enrollment_id, read_at)
		SELECT $1, unnest($2::uuid[]), $3 ON CONFLICT DO NOTHING`, source, ids, a.Clock.Now())
	if err != nil {
		return fmt.Errorf("record enrollments pulled: %w", err)
	}
	return nil
}
