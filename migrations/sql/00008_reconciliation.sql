-- +goose Up
-- One row per gateway and UTC day that the daily reconciliation has
-- checked. A day without a row is pending; a later run catches it up.
CREATE TABLE reconciliation_days (
    gateway    text NOT NULL,
    day        date NOT NULL,
    status     text NOT NULL CHECK (status IN ('matched', 'discrepancies')),
    operations int NOT NULL CHECK (operations >= 0),
    checked_at timestamptz NOT NULL,
    PRIMARY KEY (gateway, day)
);

-- What a day's check found. These rows are the review entries of
-- reconciliation: a charge's own status is the pipeline's and may be final
-- (succeeded), so a disagreement with the gateway is recorded here, beside
-- the charge, for a person to settle; reviewed_* are set when one has.
CREATE TABLE reconciliation_discrepancies (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gateway           text NOT NULL,
    day               date NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('missing_at_gateway', 'unknown_at_rebill', 'amount_mismatch',
                          'status_mismatch', 'duplicate_capture')),
    charge_id         uuid,
    gateway_reference text,
    detail            text NOT NULL,
    reviewed_at       timestamptz,
    reviewed_by       text,
    FOREIGN KEY (gateway, day) REFERENCES reconciliation_days (gateway, day) ON DELETE CASCADE
);
CREATE INDEX reconciliation_discrepancies_day_idx ON reconciliation_discrepancies (gateway, day, id);
CREATE INDEX reconciliation_discrepancies_open_idx ON reconciliation_discrepancies (id) WHERE reviewed_at IS NULL;

-- The daily report and reconciliation read the charges that reached a
-- final status (or a soft decline) on one day. The index holds only those
-- rows, which change at most once more, so the pipeline's many updates of
-- charges in flight do not maintain it.
CREATE INDEX charges_settled_idx ON charges (updated_at) WHERE status IN ('succeeded', 'failed', 'voided', 'declined');

-- +goose Down
DROP INDEX charges_settled_idx;
DROP TABLE reconciliation_discrepancies;
DROP TABLE reconciliation_days;
