-- +goose Up
-- A charge may wait with a next attempt time in any open status: declined
-- (dunning), or an in-flight step whose gateway is down (open circuit,
-- definite "not done" answers). Declined still needs one.
ALTER TABLE charges DROP CONSTRAINT charges_check;
ALTER TABLE charges ADD CONSTRAINT charges_declined_waits CHECK (status <> 'declined' OR next_attempt_at IS NOT NULL);

-- When the current attempt was due (the period's start for the first
-- attempt, the dunning time for later ones), and when every attempt of the
-- charge started: same-card retries are bounded per card-network rules.
ALTER TABLE charges ADD COLUMN attempt_due_at timestamptz;
UPDATE charges SET attempt_due_at = created_at;
ALTER TABLE charges ALTER COLUMN attempt_due_at SET NOT NULL;
ALTER TABLE charges ADD COLUMN attempt_times timestamptz[] NOT NULL DEFAULT '{}';

-- Set when a charge in review was looked up at its gateway and no capture
-- exists: its hold, if any, was voided. Such a charge cannot be resolved
-- as succeeded.
ALTER TABLE charges ADD COLUMN hold_released_at timestamptz;

-- When an unpaid subscription's dunning ended: periods that begin at or
-- after it are not owed.
ALTER TABLE subscriptions ADD COLUMN unpaid_since timestamptz;

-- The "created" event has no previous status.
ALTER TABLE subscription_events ALTER COLUMN from_status DROP NOT NULL;
UPDATE subscription_events SET from_status = NULL WHERE type = 'created';

-- +goose Down
UPDATE subscription_events SET from_status = 'active' WHERE type = 'created';
ALTER TABLE subscription_events ALTER COLUMN from_status SET NOT NULL;
ALTER TABLE subscriptions DROP COLUMN unpaid_since;
ALTER TABLE charges DROP COLUMN hold_released_at;
ALTER TABLE charges DROP COLUMN attempt_times;
ALTER TABLE charges DROP COLUMN attempt_due_at;
ALTER TABLE charges DROP CONSTRAINT charges_declined_waits;
UPDATE charges SET next_attempt_at = NULL WHERE status <> 'declined';
ALTER TABLE charges ADD CONSTRAINT charges_check CHECK ((status = 'declined') = (next_attempt_at IS NOT NULL));
