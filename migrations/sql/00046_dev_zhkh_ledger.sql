-- +goose Up
-- Dev mode's simulated GIS ZhKH party (package zhkh/party/sim): its
-- ledger of the payment information it holds, shared by every node, and
-- its fault switches per party name, like the simulated registry's. The
-- ledger keeps the housing payment's own fields (account, bill, the
-- payment document's identifiers), which the registry's book of UINs has
-- no room for.
CREATE TABLE dev_zhkh_ledger (
    report_id           text PRIMARY KEY,
    party               text NOT NULL,
    account             text NOT NULL,
    bill_id             text NOT NULL,
    payment_document_id text,
    service_id          text,
    period              text,
    supplier_inn        text,
    amount              bigint NOT NULL,
    currency            text NOT NULL,
    paid_at             timestamptz NOT NULL,
    status              text NOT NULL CHECK (status IN ('processing', 'accepted', 'refused', 'cancelled')),
    reason              text,
    looks_left          int NOT NULL DEFAULT 0,
    at                  timestamptz NOT NULL,
    cancelled_at        timestamptz,
    seq                 bigint GENERATED ALWAYS AS IDENTITY
);
CREATE TABLE dev_zhkh_faults (
    party         text PRIMARY KEY,
    down          boolean NOT NULL DEFAULT false,
    lose_response boolean NOT NULL DEFAULT false,
    processing    int NOT NULL DEFAULT 0,
    refuse        text NOT NULL DEFAULT ''
);

-- +goose Down
DROP TABLE dev_zhkh_faults;
DROP TABLE dev_zhkh_ledger;
