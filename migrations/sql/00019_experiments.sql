-- +goose Up
-- The arms of the experiments a subscription and each of its charges take
-- part in, by experiment key: the record that rules once written, from
-- which results are computed. A constant default makes adding the columns
-- a catalogue change, not a rewrite of the tables.
ALTER TABLE subscriptions ADD COLUMN experiments jsonb NOT NULL DEFAULT '{}';
ALTER TABLE charges ADD COLUMN experiments jsonb NOT NULL DEFAULT '{}';

-- Results find an experiment's subscriptions by key, and their charges
-- through charges_subscription_idx: a charge's record is its
-- subscription's when it was created, so the charges table needs no index
-- of its own. Only subscriptions in an experiment enter this one. It is
-- built in the migration's transaction, not CONCURRENTLY: a concurrent
-- build waits for every transaction older than it, including the other
-- nodes' waits for the migration lock this node holds, and would never
-- end when several nodes start at once.
CREATE INDEX subscriptions_experiments ON subscriptions USING gin (experiments) WHERE experiments <> '{}';

-- +goose Down
DROP INDEX subscriptions_experiments;
ALTER TABLE charges DROP COLUMN experiments;
ALTER TABLE subscriptions DROP COLUMN experiments;
