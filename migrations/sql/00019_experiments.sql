-- +goose NO TRANSACTION
-- +goose Up
-- The arms of the experiments a subscription and each of its charges take
-- part in, by experiment key: the record that rules once written, from
-- which results are computed. A constant default makes adding the columns
-- a catalogue change, not a rewrite of the tables.
ALTER TABLE subscriptions ADD COLUMN IF NOT EXISTS experiments jsonb NOT NULL DEFAULT '{}';
ALTER TABLE charges ADD COLUMN IF NOT EXISTS experiments jsonb NOT NULL DEFAULT '{}';

-- Results look rows up by experiment key. Only rows in an experiment are
-- indexed, and no update of the hot path writes the column, so the
-- charges' updates can stay HOT. Built concurrently: a deployment's
-- charges table is large, and a plain build would block its writes. A
-- build that failed leaves an invalid index behind and the migration
-- unrecorded: the next run drops it and builds again.
DROP INDEX CONCURRENTLY IF EXISTS subscriptions_experiments;
DROP INDEX CONCURRENTLY IF EXISTS charges_experiments;
CREATE INDEX CONCURRENTLY IF NOT EXISTS subscriptions_experiments ON subscriptions USING gin (experiments) WHERE experiments <> '{}';
CREATE INDEX CONCURRENTLY IF NOT EXISTS charges_experiments ON charges USING gin (experiments) WHERE experiments <> '{}';

-- +goose Down
DROP INDEX IF EXISTS charges_experiments;
DROP INDEX IF EXISTS subscriptions_experiments;
ALTER TABLE charges DROP COLUMN IF EXISTS experiments;
ALTER TABLE subscriptions DROP COLUMN IF EXISTS experiments;
