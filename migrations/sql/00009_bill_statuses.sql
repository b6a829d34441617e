-- +goose Up
-- Two more places a bill can stand: a copy of a bill another enrollment
-- pays (duplicate), and a fine waiting for a payment registry to be
-- configured before it may be charged (awaiting_registry).
ALTER TABLE bills DROP CONSTRAINT bills_status_check;
ALTER TABLE bills ADD CONSTRAINT bills_status_check CHECK (status IN ('pending', 'awaiting_confirmation', 'scheduled',
    'paying', 'paid', 'failed', 'withdrawn', 'expired', 'duplicate', 'awaiting_registry'));

-- +goose Down
ALTER TABLE bills DROP CONSTRAINT bills_status_check;
ALTER TABLE bills ADD CONSTRAINT bills_status_check CHECK (status IN ('pending', 'awaiting_confirmation', 'scheduled',
    'paying', 'paid', 'failed', 'withdrawn', 'expired'));
