-- +goose Up
-- What a bill's charge may take without asking, checked where an attempt
-- starts: the enrollment's cap (max_amount, copied when the charge is
-- created: an enrollment's cap never changes), raised by the customer's
-- confirmation to the amount due when they confirmed (confirmed_amount).
-- An attempt above both waits, still scheduled, with confirmation_required
-- set. pay_until is the bill's last moment to start an attempt (its
-- expires_at less an hour); void_reason is why the owner asked for the
-- void of a charge that may hold money, written to failure_code when it is
-- voided.
ALTER TABLE charges ADD COLUMN max_amount bigint,
    ADD COLUMN confirmed_amount bigint,
    ADD COLUMN confirmation_required boolean NOT NULL DEFAULT false,
    ADD COLUMN pay_until timestamptz,
    ADD COLUMN void_reason text;
-- A bill keeps what its confirmation covers and what was paid (amount_due
-- of a paid bill is what was captured, whatever the date).
ALTER TABLE bills ADD COLUMN confirmed_amount bigint,
    ADD COLUMN paid_amount bigint;

UPDATE charges c SET max_amount = e.max_amount FROM enrollments e WHERE c.enrollment_id = e.id;
-- A bill confirmed before confirmations had an amount: its amount due at
-- the confirmation.
UPDATE bills SET confirmed_amount = CASE
        WHEN discounted_amount IS NOT NULL
            AND confirmed_at < ((discount_deadline + 1)::timestamp AT TIME ZONE 'Europe/Moscow') THEN discounted_amount
        ELSE amount END
    WHERE confirmed_at IS NOT NULL;
UPDATE charges c SET confirmed_amount = b.confirmed_amount, pay_until = b.expires_at - interval '1 hour'
    FROM bills b WHERE b.charge_id = c.id;
UPDATE bills b SET paid_amount = c.amount FROM charges c WHERE b.charge_id = c.id AND b.status = 'paid';

-- +goose Down
ALTER TABLE bills DROP COLUMN paid_amount, DROP COLUMN confirmed_amount;
ALTER TABLE charges DROP COLUMN void_reason, DROP COLUMN pay_until, DROP COLUMN confirmation_required,
    DROP COLUMN confirmed_amount, DROP COLUMN max_amount;
