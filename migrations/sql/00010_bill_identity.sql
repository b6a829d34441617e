-- +goose Up
-- An ELS has one spelling: Cyrillic capitals, the Latin letters drawn like
-- Cyrillic ones read as those (75KA533315 is 75КА533315). Stored ones are
-- rewritten first, so that the identities below compare accounts, not
-- spellings. (translate, not upper: upper of Cyrillic depends on the
-- database's locale.)
-- +goose StatementBegin
CREATE FUNCTION pg_temp.canonical_els(s text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT translate(s, 'abekmhopctxyABEKMHOPCTXYабвгдежзийклмнопрстуфхцчшщъыьэюя',
                        'АВЕКМНОРСТХУАВЕКМНОРСТХУАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯ')
$$;
-- +goose StatementEnd
UPDATE enrollments SET els = pg_temp.canonical_els(els) WHERE els IS NOT NULL AND els <> pg_temp.canonical_els(els);
-- The simulated housing source files bills under the ELS: two spellings
-- of one account with the same bill id keep the first published.
DELETE FROM dev_bill_source d USING dev_bill_source o
WHERE d.kind = 'housing' AND o.kind = 'housing' AND d.bill_id = o.bill_id AND d.account_key <> o.account_key
  AND pg_temp.canonical_els(d.account_key) = pg_temp.canonical_els(o.account_key)
  AND (o.received_at, o.account_key) < (d.received_at, d.account_key);
UPDATE dev_bill_source SET account_key = pg_temp.canonical_els(account_key),
    bill = jsonb_set(bill, '{els}', to_jsonb(pg_temp.canonical_els(bill ->> 'els')))
WHERE kind = 'housing' AND bill ? 'els';

-- A bill's identity is what it is paid for, whichever enrollment carries
-- it: a fine by its UIN across the whole service, a housing bill by its
-- account and the issuer's bill id. Copies of one bill share it.
ALTER TABLE bills ADD COLUMN identity text;
UPDATE bills b SET identity = CASE e.kind WHEN 'fines' THEN 'uin:' || b.bill_id ELSE 'els:' || e.els || ':' || b.bill_id END
FROM enrollments e WHERE e.id = b.enrollment_id;
ALTER TABLE bills ALTER COLUMN identity SET NOT NULL;
CREATE INDEX bills_identity_idx ON bills (identity, received_at, id);
-- A duplicate copy: the enrollment whose charge pays the bill (support
-- sees it; a customer key does not).
ALTER TABLE bills ADD COLUMN paid_by_enrollment_id uuid REFERENCES enrollments (id);

-- A bill's charge claims the bill's identity when it is inserted: at most
-- one charge holds an identity (identity_held) until it is released
-- (identity_released_at), when its money provably never moved.
ALTER TABLE charges ADD COLUMN bill_identity text;
ALTER TABLE charges ADD COLUMN identity_held boolean NOT NULL DEFAULT false;
ALTER TABLE charges ADD COLUMN identity_released_at timestamptz;
UPDATE charges c SET bill_identity = b.identity FROM bills b WHERE b.charge_id = c.id;

-- Charges whose money provably never moved hold nothing.
UPDATE charges c SET identity_released_at = c.updated_at
WHERE c.bill_identity IS NOT NULL
  AND (c.status = 'voided' OR (c.status = 'failed' AND c.hold_released_at IS NOT NULL))
  AND NOT EXISTS (SELECT 1 FROM registry_postings p WHERE p.charge_id = c.id AND p.status IN ('posting', 'accepted'));

-- Of the others, the first of each identity holds it: a succeeded one
-- before any other, then the oldest.
WITH ranked AS (
    SELECT id, row_number() OVER (PARTITION BY bill_identity
        ORDER BY (status = 'succeeded') DESC, created_at, id) AS n
    FROM charges WHERE bill_identity IS NOT NULL AND identity_released_at IS NULL
)
UPDATE charges c SET identity_held = true FROM ranked r WHERE r.id = c.id AND r.n = 1;

-- A later copy already paid twice stays as it is, outside the index, for
-- the audit to report (enrollments.PaidTwice). A later copy not yet paid
-- loses: a charge that moved no money is voided; one that may hold money
-- is flagged so that no capture starts; its bill becomes a duplicate of
-- the holder's.
CREATE TEMP TABLE losers ON COMMIT DROP AS
SELECT c.id, c.status, h.enrollment_id AS holder
FROM charges c JOIN charges h ON h.bill_identity = c.bill_identity AND h.identity_held
WHERE c.bill_identity IS NOT NULL AND NOT c.identity_held AND c.identity_released_at IS NULL AND c.status <> 'succeeded';
UPDATE charges c SET status = 'voided', failure_code = 'duplicate_bill', next_attempt_at = NULL, updated_at = now(),
    identity_released_at = now()
FROM losers l WHERE l.id = c.id AND c.status IN ('scheduled', 'declined');
UPDATE charges c SET void_requested = true, updated_at = now()
FROM losers l WHERE l.id = c.id AND c.status IN ('authorizing', 'authorized', 'unknown');
UPDATE bills b SET status = 'duplicate', paid_by_enrollment_id = l.holder, updated_at = now()
FROM losers l WHERE b.charge_id = l.id AND b.status IN ('scheduled', 'paying', 'failed');
-- Copies with no charge yet whose identity is held become duplicates.
UPDATE bills b SET status = 'duplicate', paid_by_enrollment_id = h.enrollment_id, updated_at = now()
FROM charges h
WHERE h.bill_identity = b.identity AND h.identity_held AND b.charge_id IS NULL
  AND b.status IN ('pending', 'awaiting_confirmation', 'scheduled');

CREATE UNIQUE INDEX charges_bill_identity ON charges (bill_identity) WHERE identity_held;
CREATE INDEX charges_identity_release_idx ON charges (bill_identity) WHERE identity_held AND status IN ('voided', 'failed');

-- +goose Down
DROP INDEX charges_identity_release_idx;
DROP INDEX charges_bill_identity;
ALTER TABLE charges DROP COLUMN identity_released_at;
ALTER TABLE charges DROP COLUMN identity_held;
ALTER TABLE charges DROP COLUMN bill_identity;
UPDATE bills SET status = 'failed' WHERE status = 'duplicate' AND charge_id IS NOT NULL;
UPDATE bills SET status = 'scheduled' WHERE status = 'duplicate';
ALTER TABLE bills DROP COLUMN paid_by_enrollment_id;
DROP INDEX bills_identity_idx;
ALTER TABLE bills DROP COLUMN identity;
