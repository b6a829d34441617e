-- +goose Up
CREATE TABLE charges (
    id                uuid PRIMARY KEY,
    subscription_id   uuid NOT NULL REFERENCES subscriptions (id),
    customer_id       text NOT NULL,
    period_key        text NOT NULL,
    period_start      timestamptz NOT NULL,
    amount            bigint NOT NULL CHECK (amount > 0),
    currency          text NOT NULL,
    gateway           text NOT NULL,
    -- The attempt's payment token, fixed when the attempt starts so that a
    -- technical retry sends the same request under the same gateway key.
    pm_token          text NOT NULL,
    status            text NOT NULL CHECK (status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'succeeded',
                          'declined', 'failed', 'unknown', 'requires_review', 'voided')),
    attempt_count     int NOT NULL DEFAULT 1 CHECK (attempt_count >= 1),
    unknown_phase     text CHECK (unknown_phase IN ('authorize', 'capture')),
    authorization_ref text,
    void_requested    boolean NOT NULL DEFAULT false,
    first_declined_at timestamptz,
    next_attempt_at   timestamptz,
    failure_code      text,
    review_reason     text,
    resolution        text CHECK (resolution IN ('succeeded', 'failed')),
    resolution_evidence text,
    resolved_by       text,
    resolved_at       timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    -- One charge per subscription period: the storage-level guarantee that
    -- outlives idempotency records and survives any scheduler bug.
    UNIQUE (subscription_id, period_key),
    CHECK ((status = 'declined') = (next_attempt_at IS NOT NULL))
);
CREATE INDEX charges_subscription_idx ON charges (subscription_id, id DESC);
CREATE INDEX charges_dunning_idx ON charges (next_attempt_at, id) WHERE status = 'declined';
CREATE INDEX charges_review_idx ON charges (updated_at, id) WHERE status IN ('unknown', 'requires_review');
CREATE INDEX charges_open_idx ON charges (subscription_id) WHERE status IN ('scheduled', 'authorizing', 'authorized', 'capturing', 'unknown');

-- +goose Down
DROP TABLE charges;
