-- +goose Up
-- Enrollments written before the vault hold their token in clear, like the
-- subscriptions and charges of migration 00007: the re-sealing job finds
-- them here, and the index is empty once it is done.
CREATE INDEX enrollments_clear_token ON enrollments (pm_gateway, pm_token)
    WHERE pm_token !~ '^ptok_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

-- +goose Down
DROP INDEX enrollments_clear_token;
