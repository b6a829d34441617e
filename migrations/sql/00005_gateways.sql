-- +goose Up
-- When the current attempt's hold was placed (service clock): a hold older
-- than its gateway's hold lifetime is voided and placed again, never
-- captured late. Holds placed before this column existed count from their
-- charge's last change.
ALTER TABLE charges ADD COLUMN authorized_at timestamptz;
UPDATE charges SET authorized_at = updated_at WHERE status IN ('authorized', 'capturing');

-- The 54-FZ fiscal receipt a subscription's payments carry (customer
-- contact, items, VAT codes), as the API took it; each charge keeps the one
-- of its creation, sent with its hold and its capture.
ALTER TABLE subscriptions ADD COLUMN receipt jsonb;
ALTER TABLE charges ADD COLUMN receipt jsonb;

-- +goose Down
ALTER TABLE charges DROP COLUMN receipt;
ALTER TABLE subscriptions DROP COLUMN receipt;
ALTER TABLE charges DROP COLUMN authorized_at;
