-- +goose Up
-- The declines limit holds a customer's cards that are not yet known to
-- be good, not the ones an authorize approved lately. approved maps a
-- card (a keyed digest of its gateway and token reference: never the
-- token) to when a first attempt on it was last approved; it outlives the
-- window (a day) and a decline of the card clears it. approved_slots are
-- the slots, of those in slots, taken from the pool of approved cards.
-- waiters are the River jobs (ids) of charges waiting for a slot, oldest
-- first: a slot given back makes the oldest of them available at once.
-- All of it lives in the counter's row, so that the one row lock that
-- orders a customer's reservations and declines orders these too.
ALTER TABLE velocity_counters
    ADD COLUMN approved jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN approved_slots text[] NOT NULL DEFAULT '{}',
    ADD COLUMN waiters bigint[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE velocity_counters DROP COLUMN waiters, DROP COLUMN approved_slots, DROP COLUMN approved;
