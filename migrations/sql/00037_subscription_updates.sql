-- +goose Up
-- The ledger of subscription changes: one row per change of price or plan
-- (its id is the change id that keys its adjustment charge), with what it
-- changed and what its proration charged or credited, so that every
-- adjustment can be recomputed from the row alone.
CREATE TABLE subscription_changes (
    id                    uuid PRIMARY KEY,
    subscription_id       uuid NOT NULL REFERENCES subscriptions (id),
    effective             text NOT NULL CHECK (effective IN ('now', 'period_end')),
    proration             text NOT NULL CHECK (proration IN ('none', 'charge_now', 'credit_next')),
    amount_before         bigint NOT NULL,
    amount_after          bigint NOT NULL,
    interval_before       text NOT NULL,
    interval_after        text NOT NULL,
    interval_count_before int NOT NULL,
    interval_count_after  int NOT NULL,
    -- The period whose unused part was prorated; NULL when none was.
    period_key            text,
    fraction_num          bigint NOT NULL DEFAULT 0 CHECK (fraction_num >= 0),
    fraction_den          bigint NOT NULL DEFAULT 1 CHECK (fraction_den > 0 AND fraction_num <= fraction_den),
    -- + charged as an adjustment charge, - credited, 0 neither.
    adjustment            bigint NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL,
    applied_at            timestamptz,
    -- A change at period end removed or replaced before it applied.
    removed_at            timestamptz,
    actor_id              text NOT NULL,
    actor_role            text NOT NULL,
    CHECK (applied_at IS NULL OR removed_at IS NULL)
);
CREATE INDEX subscription_changes_sub_idx ON subscription_changes (subscription_id, created_at);

-- Credit granted (+, by a change) and used (-, by a period's charge).
-- A period uses credit once: the unique index over the uses.
CREATE TABLE subscription_credits (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id uuid NOT NULL REFERENCES subscriptions (id),
    change_id       uuid REFERENCES subscription_changes (id),
    period_key      text,
    -- The start of the period that used it: a period paid by credit
    -- alone has no charge to say when it began.
    period_start    timestamptz,
    amount          bigint NOT NULL CHECK (amount <> 0),
    created_at      timestamptz NOT NULL,
    CHECK ((amount > 0) = (change_id IS NOT NULL)),
    CHECK (amount > 0 OR (period_key IS NOT NULL AND period_start IS NOT NULL))
);
CREATE UNIQUE INDEX subscription_credits_use_key ON subscription_credits (subscription_id, period_key) WHERE amount < 0;
CREATE INDEX subscription_credits_grant_idx ON subscription_credits (subscription_id, period_key) WHERE amount > 0;

-- +goose Down
DROP TABLE subscription_credits;
DROP TABLE subscription_changes;
