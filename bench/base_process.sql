-- Baseline worker loop, one job: claim (transaction 1), then complete
-- (transaction 2).  The claim commits before the work would run.  The claim
-- always returns one row (n = 0 when the queue is empty) so that pgbench's
-- \gset never fails; the complete is skipped then.
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
SELECT count(*) AS n, max(id) AS tid FROM claimed
\gset
\if :n > 0
UPDATE jobs
   SET state = 'done', done_at = now(), result = '{}',
       locked_by = NULL, locked_until = NULL
 WHERE id = :tid AND state = 'running' AND locked_by = 'w' || :client_id;
\endif
