-- +goose Up
-- One row per registry gateway and UTC day that the daily registry
-- reconciliation has checked (package reconcile). export says how the
-- registry's book was read: its export of the day ('listed'), or, for a
-- party without one, a look-up per payment id of rebill's postings
-- ('unsupported'). A day without a row is pending.
CREATE TABLE registry_reconciliation_days (
    registry   text NOT NULL,
    day        date NOT NULL,
    status     text NOT NULL CHECK (status IN ('matched', 'discrepancies')),
    export     text NOT NULL CHECK (export IN ('listed', 'unsupported')),
    payments   int NOT NULL CHECK (payments >= 0),
    checked_at timestamptz NOT NULL,
    PRIMARY KEY (registry, day)
);

-- What a registry day's check found: review entries of their own, as for
-- the gateways' days; reviewed_* are set when a person has settled one.
CREATE TABLE registry_reconciliation_discrepancies (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    registry    text NOT NULL,
    day         date NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('accepted_not_captured', 'captured_not_accepted', 'amount_mismatch',
                    'processing_too_long')),
    charge_id   uuid,
    payment_id  text NOT NULL,
    detail      text NOT NULL,
    reviewed_at timestamptz,
    reviewed_by text,
    FOREIGN KEY (registry, day) REFERENCES registry_reconciliation_days (registry, day) ON DELETE CASCADE
);
CREATE INDEX registry_reconciliation_discrepancies_day_idx ON registry_reconciliation_discrepancies (registry, day, id);
CREATE INDEX registry_reconciliation_discrepancies_open_idx ON registry_reconciliation_discrepancies (id) WHERE reviewed_at IS NULL;

-- A registry day's check reads the postings made that day.
CREATE INDEX registry_postings_created_idx ON registry_postings (created_at);

-- +goose Down
DROP INDEX registry_postings_created_idx;
DROP TABLE registry_reconciliation_discrepancies;
DROP TABLE registry_reconciliation_days;
