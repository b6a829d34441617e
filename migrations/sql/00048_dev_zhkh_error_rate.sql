-- +goose Up
-- The simulated GIS ZhKH party's error rate: the share of its reports,
-- annulments and look-ups that fail as if it were out of reach, so that
-- dev mode and the soak can make it flaky rather than only down.
ALTER TABLE dev_zhkh_faults ADD COLUMN error_rate double precision NOT NULL DEFAULT 0
    CHECK (error_rate >= 0 AND error_rate <= 1);

-- +goose Down
ALTER TABLE dev_zhkh_faults DROP COLUMN error_rate;
