-- +goose NO TRANSACTION
-- +goose Up
-- The renewals still owed their charge.upcoming notice (00049): a row
-- leaves the index when its notice is marked and comes back when its
-- next_charge_at moves on. Built CONCURRENTLY, so that billing goes on
-- while a deployment with millions of subscriptions builds it; an INVALID
-- leftover of a failed build is dropped first, so that IF NOT EXISTS never
-- takes it for a finished one.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'subscriptions_upcoming_idx' AND NOT i.indisvalid) THEN
        ALTER INDEX subscriptions_upcoming_idx RENAME TO subscriptions_upcoming_idx_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_upcoming_idx_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_upcoming_idx ON subscriptions (next_charge_at, id)
    WHERE status IN ('active', 'past_due') AND NOT cancel_at_period_end AND next_period_index >= 1
      AND upcoming_noticed_for IS DISTINCT FROM next_charge_at;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_upcoming_idx;
