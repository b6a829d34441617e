-- +goose NO TRANSACTION
-- +goose Up
-- The scan looks, every time it runs, for paused or unpaid subscriptions
-- whose cancel at period end has come (subscriptions.Store.LockScheduledCancels).
-- Without an index of its own it read every paused and unpaid subscription
-- to find none: 100,000 of them, 57,000 pages and a second of every scan,
-- in a deployment with 2,000,000 subscriptions. This index holds only the
-- few that wait for such a cancel. Built CONCURRENTLY, so writes go on; an
-- INVALID leftover of a failed build is dropped first, so that IF NOT
-- EXISTS never takes it for a finished one.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'subscriptions_cancel_due_idx' AND NOT i.indisvalid) THEN
        ALTER INDEX subscriptions_cancel_due_idx RENAME TO subscriptions_cancel_due_idx_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_cancel_due_idx_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_cancel_due_idx ON subscriptions (next_charge_at, id)
    WHERE cancel_at_period_end AND status IN ('paused', 'unpaid');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_cancel_due_idx;
