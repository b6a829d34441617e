-- +goose Up
-- A bill paid outside rebill (at a bank, a kiosk, another app) is not paid
-- again: in full it is paid_elsewhere; in part, what is left is charged.
ALTER TABLE bills DROP CONSTRAINT bills_status_check;
ALTER TABLE bills ADD CONSTRAINT bills_status_check CHECK (status IN ('pending', 'awaiting_confirmation', 'scheduled',
    'paying', 'paid', 'failed', 'withdrawn', 'expired', 'duplicate', 'awaiting_registry', 'paid_elsewhere'));
-- What the registry (fines) or the bill source (housing) last reported
-- paid against the bill by payments rebill did not make.
ALTER TABLE bills ADD COLUMN paid_outside bigint NOT NULL DEFAULT 0 CHECK (paid_outside >= 0);

-- A bill charge's amount and full_amount are net of paid_outside, the
-- payments made outside rebill that its last check found. A fine's first
-- "about to call" of an attempt requires that the registry was asked for
-- that attempt (outside_checked_attempt); outside_recheck marks a hold
-- voided because more was paid outside since, whose next attempt is due
-- at once.
ALTER TABLE charges ADD COLUMN paid_outside bigint NOT NULL DEFAULT 0 CHECK (paid_outside >= 0);
ALTER TABLE charges ADD COLUMN outside_checked_attempt integer;
ALTER TABLE charges ADD COLUMN outside_recheck boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE charges DROP COLUMN outside_recheck;
ALTER TABLE charges DROP COLUMN outside_checked_attempt;
ALTER TABLE charges DROP COLUMN paid_outside;
ALTER TABLE bills DROP COLUMN paid_outside;
UPDATE bills SET status = 'expired' WHERE status = 'paid_elsewhere';
ALTER TABLE bills DROP CONSTRAINT bills_status_check;
ALTER TABLE bills ADD CONSTRAINT bills_status_check CHECK (status IN ('pending', 'awaiting_confirmation', 'scheduled',
    'paying', 'paid', 'failed', 'withdrawn', 'expired', 'duplicate', 'awaiting_registry'));
