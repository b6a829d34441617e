-- +goose Up
-- A registry posting may be abandoned: sent, its fate at the registry
-- unknown, its money released. Its job keeps asking the registry until it
-- is annulled or failed (package gisgmp). Replacing the status check reads
-- registry_postings (one row per attempt of a fine) under the table's
-- lock, in the migration's transaction.
ALTER TABLE registry_postings DROP CONSTRAINT registry_postings_status_check,
    ADD CONSTRAINT registry_postings_status_check
    CHECK (status IN ('posting', 'accepted', 'abandoned', 'failed', 'cancelled', 'annulled'));

-- The registry sweep counts the abandoned postings, and those abandoned
-- longer than REBILL_UNAVAILABLE_FOR, for the alert: only they enter this
-- index. Built in the migration's transaction, not CONCURRENTLY, like
-- subscriptions_experiments (00019): a concurrent build would wait for the
-- other nodes' waits for the migration lock.
CREATE INDEX registry_postings_abandoned_idx ON registry_postings (updated_at) WHERE status = 'abandoned';

-- Dev mode's simulated registry learns two faults of a real one: a payment
-- still processing (answered 202) for its first looks, and a registry that
-- annuls a payment whose acceptance it did not answer (a lost answer, or
-- one still processing), so that the look-up or the replay that follows
-- finds it annulled.
ALTER TABLE dev_registry_ledger DROP CONSTRAINT dev_registry_ledger_status_check;
ALTER TABLE dev_registry_ledger ADD CONSTRAINT dev_registry_ledger_status_check
    CHECK (status IN ('processing', 'accepted', 'annulled'));
ALTER TABLE dev_registry_ledger ADD COLUMN looks_left int NOT NULL DEFAULT 0;
ALTER TABLE dev_registry_faults ADD COLUMN processing int NOT NULL DEFAULT 0;
ALTER TABLE dev_registry_faults ADD COLUMN annul_unanswered boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE dev_registry_faults DROP COLUMN annul_unanswered;
ALTER TABLE dev_registry_faults DROP COLUMN processing;
ALTER TABLE dev_registry_ledger DROP COLUMN looks_left;
UPDATE dev_registry_ledger SET status = 'accepted' WHERE status = 'processing';
ALTER TABLE dev_registry_ledger DROP CONSTRAINT dev_registry_ledger_status_check;
ALTER TABLE dev_registry_ledger ADD CONSTRAINT dev_registry_ledger_status_check CHECK (status IN ('accepted', 'annulled'));
DROP INDEX registry_postings_abandoned_idx;
-- Open again, so that the older code settles them by asking the registry.
UPDATE registry_postings SET status = 'posting' WHERE status = 'abandoned';
ALTER TABLE registry_postings DROP CONSTRAINT registry_postings_status_check;
ALTER TABLE registry_postings ADD CONSTRAINT registry_postings_status_check
    CHECK (status IN ('posting', 'accepted', 'failed', 'cancelled', 'annulled'));
