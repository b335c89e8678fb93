-- Baseline worker of the steady-load runs: claim up to :batch jobs
-- (transaction 1) and complete them with one UPDATE (transaction 2); when
-- nothing was claimable, sleep 5 ms and poll again.
WITH claimed AS (
    UPDATE jobs
       SET state = 'running', locked_by = 'w' || :client_id,
           locked_until = now() + interval '5 minutes',
           attempts = attempts + 1, started_at = now()
     WHERE id IN (SELECT id FROM jobs
                   WHERE queue = :queue AND state = 'pending' AND run_at <= now()
                   ORDER BY priority, created_at, id
                   LIMIT :batch
                   FOR UPDATE SKIP LOCKED)
    RETURNING id)
SELECT count(*) AS n, array_agg(id)::text AS ids FROM claimed
\gset
\if :n > 0
UPDATE jobs
   SET state = 'done', done_at = now(), result = '{}',
       locked_by = NULL, locked_until = NULL
 WHERE id = ANY (:ids::bigint[]) AND state = 'running' AND locked_by = 'w' || :client_id;
\else
\sleep 5 ms
\endif
