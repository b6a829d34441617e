-- +goose NO TRANSACTION
-- +goose Up
-- An event's public id (evt_<uuid>, the id a webhook carries) is derived
-- from what the event is about: its type, its fact (a charge's key and
-- attempt, a refund's key, a subscription's id...) and how many events of
-- that type about that fact came before. The same fact published again
-- after a database restore forgot it has the same public id, so receivers
-- that drop an id they have seen drop the repeat; the insert of a public
-- id already there is a no-op. id stays the row's UUIDv7 (creation order:
-- lists, cursors and retention read it). Rows written before this carry
-- no public id: theirs is id. Indexes built CONCURRENTLY, so writes go on;
-- an INVALID leftover of a failed build is dropped first.
ALTER TABLE events ADD COLUMN IF NOT EXISTS public_id uuid, ADD COLUMN IF NOT EXISTS fact text;
-- +goose StatementBegin
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['events_public_id', 'events_fact'] LOOP
        IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                   WHERE c.relname = name AND NOT i.indisvalid) THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', name, name || '_invalid');
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS events_public_id_invalid;
DROP INDEX CONCURRENTLY IF EXISTS events_fact_invalid;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS events_public_id ON events (public_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_fact ON events (fact, type) WHERE fact IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS events_fact;
DROP INDEX CONCURRENTLY IF EXISTS events_public_id;
ALTER TABLE events DROP COLUMN IF EXISTS fact, DROP COLUMN IF EXISTS public_id;
