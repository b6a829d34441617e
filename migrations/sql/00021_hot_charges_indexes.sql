-- +goose NO TRANSACTION
-- +goose Up
-- The partial indexes of charges rebuilt over the columns of 00020, so
-- that they key on no column the hot moves change. Built CONCURRENTLY:
-- a plain CREATE INDEX would block every write of charges for the whole
-- build. Each statement runs on its own and goose re-runs the whole file
-- after a failure, so each is idempotent: a build that failed midway
-- leaves an INVALID index, renamed away here and dropped, never taken for
-- a finished one by IF NOT EXISTS.
-- +goose StatementBegin
DO $$
DECLARE
    leftover text;
BEGIN
    FOR leftover IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = 'charges'::regclass AND NOT i.indisvalid
          AND c.relname IN ('charges_in_flight_idx', 'charges_declined_idx', 'charges_review_queue_idx',
                            'charges_identity_releasable_idx', 'charges_settled_at_idx')
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', leftover, leftover || '_invalid');
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS charges_in_flight_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS charges_declined_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS charges_review_queue_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS charges_identity_releasable_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS charges_settled_at_idx_invalid;

-- A subscription's charges automation still works on (HasOpen's in-flight
-- part, AnyInFlight).
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_in_flight_idx ON charges (subscription_id) WHERE in_flight;
-- Dunning: declined charges by their next attempt (a move to any other
-- status writes next_attempt_at NULL, as it already is on the hot path).
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_declined_idx ON charges (next_attempt_at, id)
    WHERE off_path_status = 'declined';
-- The review queue, the longest waiting first.
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_review_queue_idx ON charges (off_path_at, id)
    WHERE off_path_status IN ('unknown', 'requires_review');
-- Charges that may let go of a bill identity.
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_identity_releasable_idx ON charges (bill_identity)
    WHERE identity_held AND off_path_status IN ('voided', 'failed');
-- The day's settled charges for reconciliation and the daily totals: a row
-- joins it once, when it settles.
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_settled_at_idx ON charges (settled_at) WHERE settled_at IS NOT NULL;

-- The indexes they replace key on status or updated_at, which every move
-- of a charge changes.
DROP INDEX CONCURRENTLY IF EXISTS charges_open_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_dunning_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_review_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_identity_release_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_settled_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_settled_idx ON charges (updated_at)
    WHERE status IN ('succeeded', 'failed', 'voided', 'declined');
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_identity_release_idx ON charges (bill_identity)
    WHERE identity_held AND status IN ('voided', 'failed');
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_review_idx ON charges (updated_at, id) WHERE status IN ('unknown', 'requires_review');
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_dunning_idx ON charges (next_attempt_at, id) WHERE status = 'declined';
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_open_idx ON charges (subscription_id)
    WHERE status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown');
DROP INDEX CONCURRENTLY IF EXISTS charges_settled_at_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_identity_releasable_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_review_queue_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_declined_idx;
DROP INDEX CONCURRENTLY IF EXISTS charges_in_flight_idx;
