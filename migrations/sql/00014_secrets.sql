-- +goose Up
-- Enrollments written before the vault hold their token in clear, like the
-- subscriptions and charges of migration 00007: the re-sealing job finds
-- them here, and the index is empty once it is done.
CREATE INDEX enrollments_clear_token ON enrollments (pm_gateway, pm_token)
    WHERE pm_token !~ '^ptok_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

-- A delivery whose host resolves to an address the URL policy refuses is
-- failed at once (address_refused) instead of retried for three days.
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_outcome_check;
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_outcome_check
    CHECK (outcome IN ('delivered', 'retrying', 'failed', 'address_refused'));

-- Rolling a webhook secret: the secret it replaced keeps signing next to
-- the new one until previous_secret_expires_at (real time, the database's
-- clock), sealed like secret (<key id>:<base64 AES-GCM nonce||ciphertext>,
-- bound to the endpoint's id).
ALTER TABLE webhook_endpoints
    ADD COLUMN previous_secret text,
    ADD COLUMN previous_secret_expires_at timestamptz,
    ADD CONSTRAINT webhook_endpoints_previous_secret_check
        CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL));

-- +goose Down
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_previous_secret_check,
    DROP COLUMN previous_secret_expires_at, DROP COLUMN previous_secret;
UPDATE webhook_attempts SET outcome = 'failed' WHERE outcome = 'address_refused';
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_outcome_check;
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_outcome_check
    CHECK (outcome IN ('delivered', 'retrying', 'failed'));
DROP INDEX enrollments_clear_token;
