-- +goose Up
-- What a fine's bill source last reported paid against it (its
-- paid_amount). The figure names no payment and may be rebill's own, so it
-- is never counted as paid: above what the registry last answered, it has
-- the registry asked afresh, and a disagreement that lasts until the last
-- discounted start sends the charge to review (decision 34).
ALTER TABLE bills ADD COLUMN source_paid bigint NOT NULL DEFAULT 0 CHECK (source_paid >= 0);
ALTER TABLE charges ADD COLUMN source_paid bigint NOT NULL DEFAULT 0 CHECK (source_paid >= 0);

-- +goose Down
ALTER TABLE charges DROP COLUMN source_paid;
ALTER TABLE bills DROP COLUMN source_paid;
