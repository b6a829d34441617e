-- +goose Up
-- Autopay enrollments (housing bills, traffic fines) and their bills. A bill
-- is charged on the same engine as a subscription period: its charge row
-- belongs to the enrollment instead of a subscription, keyed by the bill.
CREATE TABLE enrollments (
    id             uuid PRIMARY KEY,
    customer_id    text NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('housing', 'fines')),
    -- The account the bill sources know the payer by: the ELS for housing,
    -- the STS and/or the driving licence for fines.
    els            text,
    sts            text,
    driver_license text,
    status         text NOT NULL CHECK (status IN ('active', 'paused', 'cancelled')),
    currency       text NOT NULL CHECK (currency = 'RUB'),
    max_amount     bigint NOT NULL CHECK (max_amount > 0),
    pay_day        int CHECK (pay_day BETWEEN 1 AND 28),
    pm_gateway     text NOT NULL,
    pm_token       text NOT NULL,
    pm_brand       text,
    pm_last4       text,
    pm_exp_month   int NOT NULL CHECK (pm_exp_month BETWEEN 1 AND 12),
    pm_exp_year    int NOT NULL,
    description    text,
    metadata       jsonb NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    cancelled_at   timestamptz,
    CHECK ((status = 'cancelled') = (cancelled_at IS NOT NULL)),
    CHECK ((kind = 'housing') = (els IS NOT NULL)),
    CHECK (kind = 'housing' OR sts IS NOT NULL OR driver_license IS NOT NULL),
    CHECK (kind = 'housing' OR pay_day IS NULL)
);
CREATE INDEX enrollments_customer_idx ON enrollments (customer_id, id DESC);
CREATE INDEX enrollments_els_idx ON enrollments (els) WHERE els IS NOT NULL;
CREATE INDEX enrollments_sts_idx ON enrollments (sts) WHERE sts IS NOT NULL;
CREATE INDEX enrollments_dl_idx ON enrollments (driver_license) WHERE driver_license IS NOT NULL;

CREATE TABLE bills (
    id                uuid PRIMARY KEY,
    enrollment_id     uuid NOT NULL REFERENCES enrollments (id),
    customer_id       text NOT NULL,
    bill_id           text NOT NULL,
    amount            bigint NOT NULL CHECK (amount > 0),
    discounted_amount bigint CHECK (discounted_amount > 0 AND discounted_amount < amount),
    discount_deadline date,
    issued_at         timestamptz NOT NULL,
    due_date          date NOT NULL,
    status            text NOT NULL CHECK (status IN ('pending', 'awaiting_confirmation', 'scheduled', 'paying', 'paid',
                          'failed', 'withdrawn', 'expired')),
    -- When the bill is to be charged; for a bill kept pending (paused
    -- enrollment) or awaiting confirmation, when it would be.
    pay_at            timestamptz NOT NULL,
    -- The end (Europe/Moscow) of the last day the bill may be paid.
    expires_at        timestamptz NOT NULL,
    confirmed_at      timestamptz,
    charge_id         uuid,
    paid_at           timestamptz,
    received_at       timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    -- One bill per enrollment and issuer id, whichever path brought it.
    UNIQUE (enrollment_id, bill_id),
    CHECK ((discounted_amount IS NULL) = (discount_deadline IS NULL))
);
CREATE INDEX bills_enrollment_idx ON bills (enrollment_id, id DESC);
CREATE INDEX bills_due_idx ON bills (pay_at, id) WHERE status = 'scheduled';
CREATE INDEX bills_open_idx ON bills (expires_at, id) WHERE status IN ('pending', 'awaiting_confirmation', 'scheduled', 'failed');

-- A charge belongs to a subscription period or to an enrollment's bill
-- (period_key is then the bill_id): one charge per bill.
ALTER TABLE charges ALTER COLUMN subscription_id DROP NOT NULL;
ALTER TABLE charges ADD COLUMN enrollment_id uuid REFERENCES enrollments (id);
ALTER TABLE charges ADD CONSTRAINT charges_one_owner CHECK ((subscription_id IS NULL) <> (enrollment_id IS NULL));
CREATE UNIQUE INDEX charges_bill_key ON charges (enrollment_id, period_key) WHERE enrollment_id IS NOT NULL;
-- A price that rises at a moment (a fine's discount): an attempt whose hold
-- starts at or after discount_until is placed for full_amount, and a hold
-- at the lower amount still uncaptured then is voided and a new attempt made.
ALTER TABLE charges ADD COLUMN full_amount bigint CHECK (full_amount > 0);
ALTER TABLE charges ADD COLUMN discount_until timestamptz;
ALTER TABLE charges ADD CONSTRAINT charges_discount CHECK ((full_amount IS NULL) = (discount_until IS NULL));

-- Dev mode's simulated bill sources: what POST /v1/dev/bill-sources/{kind}/bills
-- published, pulled by the periodic bill pull like a real issuer's feed.
CREATE TABLE dev_bill_source (
    kind        text NOT NULL CHECK (kind IN ('housing', 'fines')),
    account_key text NOT NULL,   -- els, sts:<...> or dl:<...>
    bill_id     text NOT NULL,
    bill        jsonb NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (kind, account_key, bill_id)
);

-- Fines are posted to the state payment registry (GIS GMP) between hold
-- and capture: the UIN a bill charge's payment is posted with.
ALTER TABLE charges ADD COLUMN registry_uin text;

-- One posting per charge attempt, idempotent at the registry by its
-- payment_id (derived from the attempt and its amount).
CREATE TABLE registry_postings (
    payment_id  text PRIMARY KEY,
    charge_id   uuid NOT NULL REFERENCES charges (id),
    attempt     int NOT NULL,
    uin         text NOT NULL,
    amount      bigint NOT NULL CHECK (amount > 0),
    status      text NOT NULL CHECK (status IN ('posting', 'accepted', 'failed', 'cancelled', 'annulled')),
    gateway     text,
    last_error  text,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    UNIQUE (charge_id, attempt)
);
CREATE INDEX registry_postings_accepted_idx ON registry_postings (charge_id) WHERE status = 'accepted';

-- Dev mode's simulated registry (gmp1, gmp2): the registry's own books, one
-- entry per accepted payment_id, and the fault switches of its gateways.
CREATE TABLE dev_registry_ledger (
    payment_id  text PRIMARY KEY,
    gateway     text NOT NULL,
    uin         text NOT NULL,
    amount      bigint NOT NULL,
    status      text NOT NULL CHECK (status IN ('accepted', 'annulled')),
    at          timestamptz NOT NULL,
    annulled_at timestamptz,
    seq         bigint GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE dev_registry_faults (
    gateway       text PRIMARY KEY,
    down          boolean NOT NULL DEFAULT false,
    latency_ms    int NOT NULL DEFAULT 0,
    error_rate    double precision NOT NULL DEFAULT 0,
    lose_response boolean NOT NULL DEFAULT false
);

-- +goose Down
DROP TABLE dev_registry_faults;
DROP TABLE dev_registry_ledger;
DROP TABLE registry_postings;
ALTER TABLE charges DROP COLUMN registry_uin;
DROP TABLE dev_bill_source;
ALTER TABLE charges DROP CONSTRAINT charges_discount;
ALTER TABLE charges DROP COLUMN discount_until;
ALTER TABLE charges DROP COLUMN full_amount;
DROP INDEX charges_bill_key;
DELETE FROM charges WHERE enrollment_id IS NOT NULL;
ALTER TABLE charges DROP CONSTRAINT charges_one_owner;
ALTER TABLE charges DROP COLUMN enrollment_id;
ALTER TABLE charges ALTER COLUMN subscription_id SET NOT NULL;
DROP TABLE bills;
DROP TABLE enrollments;
