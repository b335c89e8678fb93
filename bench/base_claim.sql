-- Baseline: claim one job and nothing else (claim-only latency).
WITH claimed AS (
    UPDATE jobs
       SET state = 'running', locked_by = 'w' || :client_id,
           locked_until = now() + interval '5 minutes',
           attempts = attempts + 1, started_at = now()
     WHERE id IN (SELECT id FROM jobs
                   WHERE queue = :queue AND state = 'pending' AND run_at <= now()
                   ORDER BY priority, created_at, id
                   LIMIT 1
                   FOR UPDATE SKIP LOCKED)
    RETURNING id)
SELECT count(*) AS n FROM claimed;
