-- +goose Up
-- Deleting an event makes PostgreSQL look for the delivery attempts that
-- reference it (the foreign key's check), and the events retention deletes
-- those attempts first: without this index each deleted event would cost a
-- scan of the whole attempts table.
CREATE INDEX webhook_attempts_event ON webhook_attempts (event_id);

-- +goose Down
DROP INDEX webhook_attempts_event;
