-- +goose Up
-- Columns that the partial indexes of charges key on instead of status and
-- updated_at, so that the pipeline's hot moves (scheduled -> authorizing ->
-- capturing) change no indexed column and PostgreSQL can make them HOT
-- (heap-only) updates, which write no index entry. PostgreSQL 15 makes an
-- update HOT only when no column an index keys on, or names in its
-- predicate, changes. Each column is derived from status by the trigger
-- below, so every writer (old nodes of a rolling deploy included) keeps
-- them right; a move that stays within one value of a column leaves it
-- as it was.
--   in_flight:       true while automation works on the charge (scheduled,
--                    authorizing, authorized, capturing, unknown), else NULL.
--   off_path_status: the status when it is off the hot path (unknown,
--                    requires_review, declined, voided, failed), else NULL.
--   off_path_at:     when the charge entered its current off-path status.
--   settled_at:      when the charge entered its current settled status
--                    (succeeded, failed, voided, declined), else NULL.
-- ADD COLUMN without a default or a constraint changes only the catalogue:
-- no rewrite, and no scan of the table under its exclusive lock (which a
-- CHECK would need, to check the rows there are).
ALTER TABLE charges ADD COLUMN in_flight boolean,
    ADD COLUMN off_path_status text,
    ADD COLUMN off_path_at timestamptz,
    ADD COLUMN settled_at timestamptz;

-- A HOT update needs room for the new tuple on the old one's page, and
-- the charges of one scan are inserted side by side and moved at about
-- the same time, before pruning can free their old versions: pages filled
-- to 70% keep room for the new versions of about a third of their rows.
-- Lower fills make more of a burst's moves HOT but leave all of history
-- at 1/fillfactor of its size (rebill bench, 4000 charges: 38% of
-- updates HOT at 70, 48% at 60, 57% at 50, of a ceiling of 67%). It
-- applies to pages written from now on (no rewrite).
ALTER TABLE charges SET (fillfactor = 70);

-- +goose StatementBegin
CREATE FUNCTION charges_derive_layout() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.in_flight := CASE WHEN NEW.status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown') THEN true END;
    NEW.off_path_status := CASE WHEN NEW.status IN ('unknown', 'requires_review', 'declined', 'voided', 'failed') THEN NEW.status END;
    NEW.off_path_at := CASE WHEN NEW.off_path_status IS NOT NULL THEN NEW.updated_at END;
    NEW.settled_at := CASE WHEN NEW.status IN ('succeeded', 'failed', 'voided', 'declined') THEN NEW.updated_at END;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- The update trigger fires only when status changes: an update that keeps
-- the status keeps the derived columns (the times are those of entering
-- the status), and one that changes it between two statuses of the same
-- derived values writes the same values, which PostgreSQL does not count
-- as a change.
CREATE TRIGGER charges_layout_insert BEFORE INSERT ON charges
    FOR EACH ROW EXECUTE FUNCTION charges_derive_layout();
CREATE TRIGGER charges_layout_update BEFORE UPDATE ON charges
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION charges_derive_layout();

-- The charges that exist now: the few in flight, in review, in dunning or
-- able to release a bill identity get their columns here, found through
-- the old partial indexes (dropped by the next migration). Their times
-- are their updated_at, the best record of when they entered their status.
UPDATE charges SET in_flight = true
    WHERE status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown');
UPDATE charges SET off_path_status = status, off_path_at = updated_at
    WHERE status IN ('unknown', 'requires_review');
UPDATE charges SET off_path_status = status, off_path_at = updated_at, settled_at = updated_at
    WHERE status = 'declined';
UPDATE charges SET off_path_status = status, off_path_at = updated_at, settled_at = updated_at
    WHERE identity_held AND status IN ('voided', 'failed');

-- The settled charges are all of history: the settled_layout job fills
-- theirs in batches after the deploy (charges.FillSettled). Until
-- settled_backfilled is true, the queries over settled_at also read the
-- rows it has not reached. A database with no settled charge is done now.
CREATE TABLE charges_layout (
    one bool PRIMARY KEY DEFAULT true CHECK (one),
    settled_backfilled boolean NOT NULL,
    settled_cursor uuid
);
INSERT INTO charges_layout (settled_backfilled)
    SELECT NOT EXISTS (SELECT 1 FROM charges WHERE status IN ('succeeded', 'failed', 'voided', 'declined'));

-- +goose Down
DROP TABLE charges_layout;
DROP TRIGGER charges_layout_update ON charges;
DROP TRIGGER charges_layout_insert ON charges;
DROP FUNCTION charges_derive_layout();
ALTER TABLE charges RESET (fillfactor);
ALTER TABLE charges DROP COLUMN settled_at, DROP COLUMN off_path_at, DROP COLUMN off_path_status, DROP COLUMN in_flight;
