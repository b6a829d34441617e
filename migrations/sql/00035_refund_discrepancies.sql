-- +goose Up
-- The daily reconciliation matches refunds with the gateway's refund
-- operations too; their disagreements are discrepancy kinds of their own,
-- so a review reads at once that money returned (or not) is in question.
ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_kind_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_kind_check
    CHECK (kind IN ('missing_at_gateway', 'unknown_at_rebill', 'amount_mismatch', 'status_mismatch', 'duplicate_capture',
        'refund_missing_at_gateway', 'refund_unknown_at_rebill', 'refund_amount_mismatch', 'refund_status_mismatch'));

-- +goose Down
DELETE FROM reconciliation_discrepancies WHERE kind LIKE 'refund\_%';
ALTER TABLE reconciliation_discrepancies DROP CONSTRAINT reconciliation_discrepancies_kind_check;
ALTER TABLE reconciliation_discrepancies ADD CONSTRAINT reconciliation_discrepancies_kind_check
    CHECK (kind IN ('missing_at_gateway', 'unknown_at_rebill', 'amount_mismatch', 'status_mismatch', 'duplicate_capture'));
