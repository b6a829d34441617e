-- +goose Up
-- A housing bill may carry the identifiers GIS ZhKH gives it: its payment
-- document (ИПД), its housing-and-utility service (ИЖКУ), the month it
-- bills, and its supplier. All are optional: bills stored before keep
-- them NULL and stay valid. A bill with a payment document is paid once
-- per document across enrollments as well as once per account and bill id:
-- document_identity ('ipd:' and the ИПД) is that second identity, and a
-- bill's charge claims it with the first (charges.document_identity,
-- unique among the charges that hold their identities).
ALTER TABLE bills
    ADD COLUMN payment_document_id text,
    ADD COLUMN service_id text,
    ADD COLUMN period text CHECK (period ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    ADD COLUMN supplier_inn text CHECK (supplier_inn ~ '^([0-9]{10}|[0-9]{12})$'),
    ADD COLUMN supplier_kpp text CHECK (supplier_kpp ~ '^[0-9]{4}[0-9A-Z]{2}[0-9]{3}$'),
    ADD COLUMN supplier_name text,
    ADD COLUMN document_identity text,
    ADD CONSTRAINT bills_document_identity_check
        CHECK ((payment_document_id IS NULL) = (document_identity IS NULL));
ALTER TABLE charges ADD COLUMN document_identity text;
-- Their indexes come in 00047, built CONCURRENTLY.

-- +goose Down
ALTER TABLE charges DROP COLUMN document_identity;
ALTER TABLE bills DROP CONSTRAINT bills_document_identity_check,
    DROP COLUMN document_identity, DROP COLUMN supplier_name, DROP COLUMN supplier_kpp, DROP COLUMN supplier_inn,
    DROP COLUMN period, DROP COLUMN service_id, DROP COLUMN payment_document_id;
