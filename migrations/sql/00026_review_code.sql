-- +goose Up
-- review_code says why a charge went to review, from a closed set
-- (charges.ReviewCode); review_reason becomes that code's sentence, for
-- people. Before, review_reason held what automation knew, a gateway's
-- Go error chain with its host, port and URL among it, and showed it to
-- the customer's own key. Existing rows get the code their reason was
-- written for (the texts the earlier versions wrote), 'legacy' when it is
-- none of them, and the code's sentence in place of the reason, keeping
-- what the hold check found (the " (...)" notes it appended). NULL in both
-- for a charge that never went to review. The old texts stay in the logs of
-- their time ("charge status" lines) and in the events already written.
ALTER TABLE charges ADD COLUMN review_code text;

WITH classified AS (
    SELECT id, CASE
        WHEN review_reason LIKE 'velocity limit:%' THEN 'declines_limit'
        WHEN review_reason LIKE '% gave no verdict after its last attempt: %'
             AND review_reason ~ '(gateway outcome unknown|deadline exceeded|[Tt]imeout)' THEN 'gateway_timeout'
        WHEN review_reason LIKE '% gave no verdict after its last attempt: %' THEN 'gateway_error'
        WHEN review_reason LIKE '%: the gateway did nothing for longer than %' THEN 'gateway_unavailable'
        WHEN review_reason LIKE 'the % of attempt % can no longer tell whether %' THEN 'outcome_unprovable'
        WHEN review_reason LIKE 'the gateway refused the capture of an authorized hold%' THEN 'capture_refused'
        WHEN review_reason LIKE 'the gateway refused to void %' THEN 'void_refused'
        WHEN review_reason LIKE 'unknown gateway %' THEN 'gateway_not_configured'
        WHEN review_reason LIKE 'the capture of a fine the payment registry did not accept%'
             OR review_reason LIKE 'the state payment registry did not accept %' THEN 'registry_rejected'
        WHEN review_reason LIKE 'a fine was held but no payment registry %' THEN 'registry_not_configured'
        WHEN review_reason LIKE 'River discarded the % job after its last attempt%' THEN 'job_discarded'
        WHEN review_reason LIKE 'inspector: outcome unknown since %' THEN 'unknown_overdue'
        WHEN review_reason LIKE 'inspector: % with no live job%' THEN 'stuck'
        ELSE 'legacy' END AS code
    FROM charges WHERE review_reason IS NOT NULL
), sentences (code, sentence) AS (VALUES
    ('gateway_timeout', 'the gateway did not answer in time; rebill is asking it what happened'),
    ('gateway_error', 'the gateway answered with an error rebill cannot act on; rebill is asking it what happened'),
    ('gateway_unavailable', 'the gateway was down for longer than rebill waits for it; rebill is asking it what happened'),
    ('outcome_unprovable', 'the gateway can no longer tell whether this attempt''s payment went through: check its dashboard before resolving'),
    ('capture_refused', 'the gateway refused to capture the authorized hold'),
    ('void_refused', 'the gateway refused to release the hold'),
    ('gateway_not_configured', 'the charge''s gateway is not configured in this rebill'),
    ('registry_rejected', 'the state payment registry did not accept the fine''s payment, so it was not captured'),
    ('registry_not_configured', 'a fine was held but no payment registry is configured to post it to'),
    ('declines_limit', 'velocity limit: the customer reached the declined charges allowed per day; POST /v1/charges/{id}/retry sends it to the gateway'),
    ('job_discarded', 'rebill''s job for this charge failed on every try; check the gateway before resolving'),
    ('unknown_overdue', 'rebill could not find out in time what the gateway did; check the gateway before resolving'),
    ('stuck', 'the charge stopped moving and rebill could not start it again; check the gateway before resolving'),
    ('legacy', 'sent to review by an earlier version of rebill; its logs of that time say why')
)
UPDATE charges c SET review_code = k.code,
    review_reason = s.sentence || coalesce((
        SELECT string_agg(' (' || r.m[1] || ')', '' ORDER BY r.n)
        FROM regexp_matches(c.review_reason,
            ' \(((?:the gateway shows|no capture at the gateway; hold|the gateway refused to void hold) [^()]*)\)', 'g')
            WITH ORDINALITY AS r(m, n)), '')
FROM classified k JOIN sentences s USING (code)
WHERE c.id = k.id;

-- +goose Down
-- The reasons' old texts are not restored: they were for the logs.
ALTER TABLE charges DROP COLUMN review_code;
