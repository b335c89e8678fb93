-- Orchestrator worker loop, 100 tasks: orch_dequeue(..., 100) (transaction 1),
-- then orch_complete_batch for all of them in one statement (transaction 2),
-- the same shape as the baseline's claim-100 / one UPDATE.  Ids and lease
-- tokens travel as array literals in pgbench variables.
SELECT count(*) AS n, array_agg(task_id)::text AS ids, array_agg(lease_token)::text AS toks
  FROM orch_dequeue(:queue, 'w' || :client_id, 100)
\gset
\if :n > 0
SELECT orch_complete_batch(:ids::bigint[], :toks::uuid[]);
\endif
