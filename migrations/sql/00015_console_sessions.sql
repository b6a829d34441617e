-- +goose Up
-- The support console's sessions, shared by every node. The cookie holds a
-- random session id of which only a SHA-256 is kept here, so a database
-- dump yields no usable session. key_hash is the SHA-256 that api_keys
-- already holds for the key the session was opened with (no new secret):
-- every request looks the key up by it again, so deleting the key's row
-- (revoking it) or changing the bootstrap key ends its sessions.
CREATE TABLE console_sessions (
    id_hash      bytea PRIMARY KEY,
    key_hash     bytea NOT NULL,
    key_id       text NOT NULL,
    role         text NOT NULL CHECK (role IN ('admin', 'support')),
    time_zone    text NOT NULL DEFAULT 'UTC',
    created_at   timestamptz NOT NULL,   -- wall clock: sessions live in real time
    last_seen_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_key_idx ON console_sessions (key_id);

-- One row per console action, written in the action's own transaction:
-- form_id (one per rendered form) makes a double click or a resubmitted
-- form act once, and the row records who did what, with the evidence a
-- person typed (a bill confirmed above its cap, a charge resolved).
CREATE TABLE console_actions (
    form_id    text PRIMARY KEY,
    key_id     text NOT NULL,
    role       text NOT NULL,
    action     text NOT NULL,
    object_id  text NOT NULL,
    evidence   text,
    result     text NOT NULL DEFAULT '',
    redirect   text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL      -- service clock, like the events it causes
);
CREATE INDEX console_actions_object_idx ON console_actions (object_id, at);

-- +goose Down
DROP TABLE console_actions;
DROP TABLE console_sessions;
