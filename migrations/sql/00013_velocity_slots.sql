-- +goose Up
-- The declines limit reserves a slot before each gateway call it guards:
-- slots are the calls of the window still in flight, each named by its
-- holder (a charge's attempt, "<charge id>/<attempt>"). They live in the
-- counter's row, so that one row lock orders a customer's reservations,
-- approvals and declines on every node, and a new window drops them with
-- the count.
ALTER TABLE velocity_counters ADD COLUMN slots text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE velocity_counters DROP COLUMN slots;
