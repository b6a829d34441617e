-- +goose Up
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    key_hash    bytea NOT NULL UNIQUE,
    role        text NOT NULL CHECK (role IN ('admin', 'support', 'customer')),
    customer_id text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((role = 'customer') = (customer_id IS NOT NULL))
);

CREATE TABLE idempotency_keys (
    principal        text NOT NULL,
    key              text NOT NULL,
    fingerprint      bytea NOT NULL,
    status           text NOT NULL CHECK (status IN ('processing', 'completed')),
    locked_until     timestamptz NOT NULL,
    response_status  int,
    response_headers jsonb,
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, key)
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

CREATE TABLE subscriptions (
    id                   uuid PRIMARY KEY,
    customer_id          text NOT NULL,
    status               text NOT NULL CHECK (status IN ('active', 'paused', 'past_due', 'unpaid', 'cancelled')),
    amount               bigint NOT NULL CHECK (amount > 0),
    currency             text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    interval             text NOT NULL CHECK (interval IN ('day', 'week', 'month', 'quarter', 'year')),
    interval_count       int NOT NULL CHECK (interval_count BETWEEN 1 AND 365),
    timezone             text NOT NULL,
    billing_anchor       timestamptz NOT NULL,
    next_period_index    int NOT NULL DEFAULT 0 CHECK (next_period_index >= 0),
    next_charge_at       timestamptz NOT NULL,
    cancel_at_period_end boolean NOT NULL DEFAULT false,
    paused_at            timestamptz,
    resume_at            timestamptz,
    pm_gateway           text NOT NULL,
    pm_token             text NOT NULL,
    pm_brand             text,
    pm_last4             text,
    pm_exp_month         int NOT NULL CHECK (pm_exp_month BETWEEN 1 AND 12),
    pm_exp_year          int NOT NULL,
    description          text,
    metadata             jsonb NOT NULL DEFAULT '{}',
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    cancelled_at         timestamptz,
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)),
    CHECK ((status = 'paused') = (paused_at IS NOT NULL))
);
CREATE INDEX subscriptions_customer_idx ON subscriptions (customer_id, id DESC);
CREATE INDEX subscriptions_status_idx ON subscriptions (status, id DESC);
CREATE INDEX subscriptions_due_idx ON subscriptions (next_charge_at, id) WHERE status IN ('active', 'past_due');
CREATE INDEX subscriptions_resume_idx ON subscriptions (resume_at, id) WHERE status = 'paused' AND resume_at IS NOT NULL;

CREATE TABLE subscription_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscription_id uuid NOT NULL REFERENCES subscriptions (id),
    type            text NOT NULL,
    from_status     text NOT NULL,
    to_status       text NOT NULL,
    actor_id        text NOT NULL,
    actor_role      text NOT NULL,
    at              timestamptz NOT NULL
);
CREATE INDEX subscription_events_sub_idx ON subscription_events (subscription_id, id);

-- One row: the manual clock of dev mode, shared by every node and restart.
CREATE TABLE dev_clock (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    now       timestamptz NOT NULL
);

-- +goose Down
DROP TABLE dev_clock;
DROP TABLE subscription_events;
DROP TABLE subscriptions;
DROP TABLE idempotency_keys;
DROP TABLE api_keys;
