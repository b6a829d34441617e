-- +goose Up
-- The end of the period a pause interrupted, recorded by every pause: a
-- change of interval while paused restarts the grid and moves
-- next_charge_at, and a pause switched to continue_period after that must
-- still keep the time that was left at the pause. Nullable, so adding it
-- rewrites no row; a pause begun before it falls back to next_charge_at.
ALTER TABLE subscriptions ADD COLUMN paused_period_end timestamptz;

-- +goose Down
ALTER TABLE subscriptions DROP COLUMN paused_period_end;
