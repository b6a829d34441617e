-- +goose Up
-- Where the 54-FZ receipt of an enrollment's bill payments is sent: an
-- e-mail address and/or a phone number, as a subscription's receipt
-- names its customer ({"email": ..., "phone": ...}). NULL: none given;
-- rebill then sends no receipt of its own for the enrollment's payments.
ALTER TABLE enrollments ADD COLUMN receipt_customer jsonb;

-- +goose Down
ALTER TABLE enrollments DROP COLUMN receipt_customer;
