-- +goose NO TRANSACTION
-- +goose Up
-- The indexes of the payment-document identity (00043): the bills waiting
-- under a document, and the charges holding one, unique so that a document
-- is paid once across enrollments. Built CONCURRENTLY, so that payments go
-- on while a deployment with millions of charges builds them; an INVALID
-- leftover of a failed build is dropped first, so that IF NOT EXISTS never
-- takes it for a finished one (a unique build can fail on a duplicate the
-- index would forbid: none can exist, since the column is new).
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'bills_document_identity_idx' AND NOT i.indisvalid) THEN
        ALTER INDEX bills_document_identity_idx RENAME TO bills_document_identity_idx_invalid;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = 'charges_document_identity' AND NOT i.indisvalid) THEN
        ALTER INDEX charges_document_identity RENAME TO charges_document_identity_invalid;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS bills_document_identity_idx_invalid;
DROP INDEX CONCURRENTLY IF EXISTS charges_document_identity_invalid;
CREATE INDEX CONCURRENTLY IF NOT EXISTS bills_document_identity_idx ON bills (document_identity, received_at, id)
    WHERE document_identity IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS charges_document_identity ON charges (document_identity)
    WHERE identity_held AND document_identity IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS charges_document_identity;
DROP INDEX CONCURRENTLY IF EXISTS bills_document_identity_idx;
