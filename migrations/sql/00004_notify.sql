-- +goose Up
-- The event log of notify: one row per state change of a subscription or a
-- charge (and per customer notice), written in the transaction that makes
-- the change. data is the object as its GET returned it then; json, not
-- jsonb, so that its text (key order included) is kept as encoded.
CREATE TABLE events (
    id          uuid PRIMARY KEY,            -- UUIDv7, shown as evt_<uuid>: id order is creation order
    type        text NOT NULL,
    object_id   uuid NOT NULL,
    parent_id   uuid,                        -- a charge's subscription
    customer_id text NOT NULL,               -- ownership
    created_at  timestamptz NOT NULL,        -- service clock
    data        json NOT NULL,
    notice_key  text UNIQUE                  -- customer notices: at most one event per key
);
CREATE INDEX events_object ON events (object_id, id);
CREATE INDEX events_parent ON events (parent_id, id) WHERE parent_id IS NOT NULL;
CREATE INDEX events_customer ON events (customer_id, id);

CREATE TABLE webhook_endpoints (
    id          uuid PRIMARY KEY,
    url         text NOT NULL,
    events      text[] NOT NULL,
    description text,
    status      text NOT NULL CHECK (status IN ('enabled', 'disabled')),
    secret      text NOT NULL,               -- <key id>:<base64 AES-GCM nonce||ciphertext>
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- One row per delivery attempt.
CREATE TABLE webhook_attempts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints (id),
    event_id        uuid NOT NULL REFERENCES events (id),
    attempt         int NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN ('delivered', 'retrying', 'failed')),
    status_code     int,
    error           text,
    duration_ms     bigint NOT NULL,
    at              timestamptz NOT NULL,
    next_attempt_at timestamptz
);
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, id);

-- The scan's card-expiry notices look for cards in their last month.
CREATE INDEX subscriptions_pm_exp_idx ON subscriptions (pm_exp_year, pm_exp_month) WHERE status <> 'cancelled';

-- +goose Down
DROP INDEX subscriptions_pm_exp_idx;
DROP TABLE webhook_attempts;
DROP TABLE webhook_endpoints;
DROP TABLE events;
