-- +goose Up
-- Velocity limits (package velocity): one counter per customer and limit,
-- for the current window of the service clock (the hour or the UTC day
-- that window_start opens). A request counts itself in its own transaction,
-- so a refused or rolled-back request counts nothing, and the row lock
-- orders the requests of one customer across nodes.
CREATE TABLE velocity_counters (
    customer_id  text NOT NULL,
    name         text NOT NULL,       -- creations, payment_method_changes, declines
    window_start timestamptz NOT NULL,
    count        int NOT NULL,
    PRIMARY KEY (customer_id, name)
);

-- Payment tokens at rest (package vault). Subscriptions and charges keep
-- in pm_token a reference ptok_<uuid> to a row here; the token itself is
-- only here, AES-GCM under REBILL_ENCRYPTION_KEY. The fingerprint
-- (HMAC-SHA256 of gateway and token under a key derived from the key that
-- sealed it) finds the reference of a token given again, so the same card
-- keeps one reference.
CREATE TABLE payment_tokens (
    id          text PRIMARY KEY,
    gateway     text NOT NULL,
    fingerprint bytea NOT NULL,
    key_id      text NOT NULL,        -- the key of ciphertext and fingerprint
    ciphertext  text NOT NULL,        -- <key id>:<base64 nonce||ciphertext>, bound to id
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX payment_tokens_fingerprint ON payment_tokens (gateway, fingerprint);
CREATE INDEX payment_tokens_key ON payment_tokens (key_id);
-- Rows still holding a token in clear (written before the vault): the
-- re-sealing job finds them here, and the indexes are empty once it is done.
CREATE INDEX subscriptions_clear_token ON subscriptions (pm_gateway, pm_token)
    WHERE pm_token !~ '^ptok_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';
CREATE INDEX charges_clear_token ON charges (gateway, pm_token)
    WHERE pm_token !~ '^ptok_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

-- +goose Down
DROP INDEX charges_clear_token;
DROP INDEX subscriptions_clear_token;
DROP TABLE payment_tokens;
DROP TABLE velocity_counters;
