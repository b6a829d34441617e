-- +goose NO TRANSACTION
-- +goose Up
-- A subscription or enrollment created through the API takes an id derived
-- from its client and Idempotency-Key (a UUIDv5), so that a request run
-- again after a restore forgot it recreates the same object. Such ids are
-- not in creation order, as UUIDv7 ids were: lists, newest first, order by
-- (created_at, id) instead, and these indexes serve them, replacing the
-- ones by id. Built CONCURRENTLY, so writes go on; an INVALID leftover of a
-- failed build is dropped first, so that IF NOT EXISTS never takes it for
-- a finished one.
-- +goose StatementBegin
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['subscriptions_created_idx', 'subscriptions_customer_created_idx',
        'subscriptions_status_created_idx', 'enrollments_created_idx', 'enrollments_customer_created_idx'] LOOP
        IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE c.relname = name AND NOT i.indisvalid) THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', name, name || '_invalid');
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_created_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_customer_created_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_status_created_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS enrollments_created_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS enrollments_customer_created_idx_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_created_idx ON subscriptions (created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_customer_created_idx ON subscriptions (customer_id, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_status_created_idx ON subscriptions (status, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS enrollments_created_idx ON enrollments (created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS enrollments_customer_created_idx ON enrollments (customer_id, created_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_customer_idx;
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_status_idx;
DROP INDEX CONCURRENTLY IF EXISTS enrollments_customer_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_customer_idx ON subscriptions (customer_id, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_status_idx ON subscriptions (status, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS enrollments_customer_idx ON enrollments (customer_id, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_customer_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_status_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS enrollments_created_idx;
DROP INDEX CONCURRENTLY IF EXISTS enrollments_customer_created_idx;
