-- +goose Up
-- The renewal whose charge.upcoming notice a subscription has had (its
-- next_charge_at when the notice was published). The notice scan reads
-- only the subscriptions whose renewal differs (00050's index), so its
-- cost follows the notices due, not every renewal within the lead. NULL
-- on the rows of before: the first scan after the upgrade finds their
-- notices already published (events.notice_key) and marks them.
ALTER TABLE subscriptions ADD COLUMN upcoming_noticed_for timestamptz;

-- +goose Down
ALTER TABLE subscriptions DROP COLUMN upcoming_noticed_for;
