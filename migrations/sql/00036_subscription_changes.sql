-- +goose Up
-- Subscriptions that change: a trial before the first period, a change
-- waiting for the period end, credit left by a downgrade, a key suffix
-- that keeps a restarted schedule's period keys apart from the paid
-- ones, and what a pause keeps for its resume. Every column has a
-- default or is nullable, so adding them rewrites no row.
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_status_check;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_status_check
    CHECK (status IN ('trialing', 'active', 'paused', 'past_due', 'unpaid', 'cancelled'));
ALTER TABLE subscriptions
    ADD COLUMN trial_end timestamptz,
    ADD COLUMN pending_update jsonb,
    ADD COLUMN credit_balance bigint NOT NULL DEFAULT 0 CHECK (credit_balance >= 0),
    ADD COLUMN period_key_suffix text NOT NULL DEFAULT '',
    ADD COLUMN on_resume text NOT NULL DEFAULT 'start_new_period' CHECK (on_resume IN ('start_new_period', 'continue_period')),
    ADD COLUMN paused_time_left_us bigint CHECK (paused_time_left_us >= 0);
CREATE INDEX subscriptions_trial_end_idx ON subscriptions (trial_end, id) WHERE status = 'trialing';

-- +goose Down
DROP INDEX subscriptions_trial_end_idx;
ALTER TABLE subscriptions
    DROP COLUMN trial_end,
    DROP COLUMN pending_update,
    DROP COLUMN credit_balance,
    DROP COLUMN period_key_suffix,
    DROP COLUMN on_resume,
    DROP COLUMN paused_time_left_us;
UPDATE subscriptions SET status = 'cancelled', cancelled_at = coalesce(cancelled_at, now()) WHERE status = 'trialing';
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_status_check;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_status_check
    CHECK (status IN ('active', 'paused', 'past_due', 'unpaid', 'cancelled'));
