-- +goose Up
-- One row per captured housing payment: its payment information reported
-- to GIS ZhKH through a reporting party (package zhkh). report_id is
-- derived from the charge alone, so a retry is a replay at the party; a
-- charge is captured once, so it has one report. The identifiers of the
-- payment document (payment_document_id, service_id, period, supplier_*)
-- are optional: a bill without them is reported by account and bill_id.
-- due_at is when the party must have what the status sends (the report,
-- or its cancellation): past it, pending or cancel_pending, the report is
-- overdue (rebill_zhkh_reports_overdue). review_reason is set when a
-- person must look at it (refused, or refunded in part); reviewed_at when
-- one has.
CREATE TABLE zhkh_reports (
    report_id           text PRIMARY KEY,
    charge_id           uuid NOT NULL UNIQUE,
    enrollment_id       uuid NOT NULL,
    account             text NOT NULL,
    bill_id             text NOT NULL,
    payment_document_id text,
    service_id          text,
    period              text,
    supplier_inn        text,
    supplier_kpp        text,
    supplier_name       text,
    amount              bigint NOT NULL CHECK (amount > 0),
    currency            text NOT NULL,
    amount_refunded     bigint NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0),
    captured_at         timestamptz NOT NULL,
    status              text NOT NULL CHECK (status IN ('pending', 'accepted', 'refused', 'cancel_pending', 'cancelled')),
    due_at              timestamptz NOT NULL,
    sent_at             timestamptz, -- the last send: a look-up comes before the next
    cancel_sent_at      timestamptz,
    party               text,
    last_error          text,
    review_reason       text,
    reviewed_at         timestamptz,
    reviewed_by         text,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);
-- The sweep counts the open reports past due, and those awaiting review.
CREATE INDEX zhkh_reports_open_idx ON zhkh_reports (due_at) WHERE status IN ('pending', 'cancel_pending');
CREATE INDEX zhkh_reports_review_idx ON zhkh_reports (updated_at) WHERE review_reason IS NOT NULL AND reviewed_at IS NULL;

-- +goose Down
DROP TABLE zhkh_reports;
