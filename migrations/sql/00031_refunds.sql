-- +goose Up
-- Refunds of captured charges. A refund is one return of money at the
-- charge's gateway, with its own gateway idempotency key
-- (<charge key>:r<n>:refund): a charge may have several, numbered n from 1.
-- Its status follows charges.RefundMachine: pending (being sent), unknown
-- (sent, answer lost: looked up by key, never resent blind), succeeded,
-- failed. actor and evidence say who asked and on what grounds.
CREATE TABLE refunds (
    id           uuid PRIMARY KEY,
    charge_id    uuid NOT NULL REFERENCES charges (id),
    n            int NOT NULL CHECK (n >= 1),
    gateway_key  text NOT NULL UNIQUE,
    amount       bigint NOT NULL CHECK (amount > 0),
    currency     text NOT NULL CHECK (length(currency) = 3),
    reason       text NOT NULL CHECK (reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
    status       text NOT NULL CHECK (status IN ('pending', 'unknown', 'succeeded', 'failed')),
    failure_code text,
    gateway      text NOT NULL,
    gateway_ref  text,
    actor        text NOT NULL,
    evidence     text,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    -- sent_at is when the refund was first sent (a look-up's bound on how
    -- long ago the key was used); settled_at when it became succeeded or
    -- failed, the day the books count it on.
    sent_at      timestamptz,
    settled_at   timestamptz,
    UNIQUE (charge_id, n)
);
CREATE INDEX refunds_settled_idx ON refunds (settled_at) WHERE settled_at IS NOT NULL;
CREATE INDEX refunds_open_idx ON refunds (updated_at) WHERE status IN ('pending', 'unknown');

-- What a charge's refunds hold of its capture: refund_reserved is the sum
-- of its refunds that did not fail (pending, unknown, succeeded), which the
-- request of a refund raises in the guarded statement that checks it stays
-- within the capture; amount_refunded the sum of those that succeeded;
-- refund_count the number of refunds made (the n of the last). The
-- constraint is added NOT VALID: every existing row holds zeros, and a
-- validating scan would hold the table's lock for as long as it reads.
ALTER TABLE charges
    ADD COLUMN refund_reserved bigint NOT NULL DEFAULT 0,
    ADD COLUMN amount_refunded bigint NOT NULL DEFAULT 0,
    ADD COLUMN refund_count int NOT NULL DEFAULT 0;
ALTER TABLE charges ADD CONSTRAINT charges_refunds_within_capture
    CHECK (amount_refunded >= 0 AND amount_refunded <= refund_reserved AND refund_reserved <= amount) NOT VALID;

-- +goose Down
ALTER TABLE charges DROP CONSTRAINT charges_refunds_within_capture;
ALTER TABLE charges DROP COLUMN refund_count, DROP COLUMN amount_refunded, DROP COLUMN refund_reserved;
DROP TABLE refunds;
