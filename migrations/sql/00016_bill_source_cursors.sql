-- +goose Up
-- Where each bill source's pull has got to. A source numbers the bills it
-- publishes with a monotonic sequence; cursor is the highest sequence up
-- to which every bill of the accounts rebill knew was read and stored.
-- answered_at is the wall-clock time of the last successful pull (at
-- first, when the source was first pulled), which the silence alert reads.
CREATE TABLE bill_source_cursors (
    source      text PRIMARY KEY,
    cursor      bigint NOT NULL DEFAULT 0 CHECK (cursor >= 0),
    answered_at timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- Every value the cursor took, and when (service clock): a pull reads from
-- the cursor that was current its source's re-read window ago, so that a
-- bill made visible after higher sequences were read is not missed.
-- Rows older than the newest one before the window are deleted.
CREATE TABLE bill_source_cursor_history (
    source text NOT NULL REFERENCES bill_source_cursors (source) ON DELETE CASCADE,
    at     timestamptz NOT NULL,
    cursor bigint NOT NULL,
    PRIMARY KEY (source, at)
);

-- The enrollments whose accounts a source has been read for from its
-- first sequence: an enrollment without a row is read from 0, so that it
-- gets the bills published before it was created.
CREATE TABLE bill_source_enrollments (
    source        text NOT NULL REFERENCES bill_source_cursors (source) ON DELETE CASCADE,
    enrollment_id uuid NOT NULL REFERENCES enrollments (id),
    read_at       timestamptz NOT NULL,
    PRIMARY KEY (source, enrollment_id)
);

-- The simulated sources number their bills like a real one.
ALTER TABLE dev_bill_source ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX dev_bill_source_seq_idx ON dev_bill_source (kind, seq);

-- +goose Down
DROP INDEX dev_bill_source_seq_idx;
ALTER TABLE dev_bill_source DROP COLUMN seq;
DROP TABLE bill_source_enrollments;
DROP TABLE bill_source_cursor_history;
DROP TABLE bill_source_cursors;
