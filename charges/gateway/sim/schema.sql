-- The simulated provider's own books. They live in their own schema, apart
-- from rebill's tables, because the sim stands for another company: rebill
-- migrations never touch them and they survive rebill's restarts.
-- Every statement is idempotent; Migrate runs the whole file under an
-- advisory lock on every start.

CREATE SCHEMA IF NOT EXISTS gatewaysim;

-- One row per operation a gateway processed. A replayed idempotency key finds
-- its row through the unique constraint and adds nothing.
CREATE TABLE IF NOT EXISTS gatewaysim.operations (
    id               bigserial   PRIMARY KEY,
    gateway          text        NOT NULL,
    op               text        NOT NULL CHECK (op IN ('authorize', 'capture', 'void')),
    idempotency_key  text        NOT NULL,
    reference        text        NOT NULL UNIQUE,
    -- The authorize reference a capture or void acts on; NULL for authorize.
    authorization_id text,
    -- Only the last four characters of the token; the token is never stored.
    token_last4      text        NOT NULL,
    -- The test-token class (ok, decline_funds, ...), so a capture or void
    -- sent without a token behaves like the card it was authorized with.
    -- A recovering token's authorization records the class it behaved as.
    token_kind       text        NOT NULL,
    charge_key       text        NOT NULL,
    amount           bigint      NOT NULL,
    currency         text        NOT NULL,
    status           text        NOT NULL CHECK (status IN ('succeeded', 'declined', 'failed')),
    decline_code     text        NOT NULL DEFAULT '',
    hard             boolean     NOT NULL DEFAULT false,
    -- The operation's time on the sim's clock, written by the sim (rebill's
    -- dev clock in dev mode, so a day reached by moving it has its
    -- operations); look-ups and day listings report it.
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (gateway, idempotency_key)
);

CREATE INDEX IF NOT EXISTS operations_gateway_at_idx
    ON gatewaysim.operations (gateway, at);
CREATE INDEX IF NOT EXISTS operations_authorization_idx
    ON gatewaysim.operations (gateway, authorization_id)
    WHERE authorization_id IS NOT NULL;

-- Calls received per idempotency key, so tok_flaky can fail the first two.
CREATE TABLE IF NOT EXISTS gatewaysim.call_counters (
    gateway         text    NOT NULL,
    idempotency_key text    NOT NULL,
    calls           integer NOT NULL,
    PRIMARY KEY (gateway, idempotency_key)
);

-- Fault switches per gateway; a missing row means no faults.
CREATE TABLE IF NOT EXISTS gatewaysim.faults (
    gateway    text             PRIMARY KEY,
    down       boolean          NOT NULL DEFAULT false,
    latency_ms integer          NOT NULL DEFAULT 0 CHECK (latency_ms >= 0),
    error_rate double precision NOT NULL DEFAULT 0 CHECK (error_rate >= 0 AND error_rate <= 1)
);
-- Captures answer 503 (and do nothing) while the rest works: holds are
-- placed but cannot be collected, as when a provider's capture endpoint
-- fails; this is how a hold outlives its lifetime in tests.
ALTER TABLE gatewaysim.faults ADD COLUMN IF NOT EXISTS captures_down boolean NOT NULL DEFAULT false;
-- Refunds answer 503 (and do nothing) while the rest works; or every
-- refund is performed and its answer lost, as with tok_lost_response.
ALTER TABLE gatewaysim.faults ADD COLUMN IF NOT EXISTS refunds_down boolean NOT NULL DEFAULT false;
ALTER TABLE gatewaysim.faults ADD COLUMN IF NOT EXISTS refunds_lost boolean NOT NULL DEFAULT false;

-- A refund returns captured money of the authorization it names
-- (authorization_id), in part or in full, several times while their sum
-- stays within the capture. Books made before refunds gain the operation.
ALTER TABLE gatewaysim.operations DROP CONSTRAINT IF EXISTS operations_op_check;
ALTER TABLE gatewaysim.operations ADD CONSTRAINT operations_op_check
    CHECK (op IN ('authorize', 'capture', 'void', 'refund'));

-- The real time the sim recorded each operation, whatever its clock: test
-- harnesses order operations against their own requests by it. Rows older
-- than the column were stamped on real time, so at is their real time.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
            WHERE table_schema = 'gatewaysim' AND table_name = 'operations' AND column_name = 'received_at') THEN
        ALTER TABLE gatewaysim.operations ADD COLUMN received_at timestamptz;
        UPDATE gatewaysim.operations SET received_at = at;
        ALTER TABLE gatewaysim.operations ALTER COLUMN received_at SET DEFAULT clock_timestamp(),
            ALTER COLUMN received_at SET NOT NULL;
    END IF;
END
$$;

-- When each recovering test token (tok_funds_after_...) was first used to
-- authorize at a gateway, on the sim's clock: its declines end a set time
-- after that. A token is known by its SHA-256 only, never kept itself.
CREATE TABLE IF NOT EXISTS gatewaysim.token_first_seen (
    gateway      text        NOT NULL,
    token_sha256 bytea       NOT NULL CHECK (length(token_sha256) = 32),
    first_at     timestamptz NOT NULL,
    PRIMARY KEY (gateway, token_sha256)
);

-- The fiscal receipt each operation was sent with (54-FZ), as sent: what a
-- fiscalizing provider would have filed, for tests and the dev ledger.
ALTER TABLE gatewaysim.operations ADD COLUMN IF NOT EXISTS receipt jsonb;
