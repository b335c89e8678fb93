-- Orchestrator worker of the steady-load runs: claim up to :batch tasks
-- (transaction 1) and complete them (transaction 2: orch_complete for one,
-- orch_complete_batch for several); when nothing was claimable, sleep 5 ms
-- and poll again, as a worker without a wake-up does.
SELECT count(*) AS n, max(task_id) AS tid, max(lease_token::text) AS tok,
       array_agg(task_id)::text AS ids, array_agg(lease_token)::text AS toks
  FROM orch_dequeue(:queue, 'w' || :client_id, :batch)
\gset
\if :n = 1
SELECT orch_complete(:tid, :tok::uuid, '{}');
\elif :n > 1
SELECT orch_complete_batch(:ids::bigint[], :toks::uuid[]);
\else
\sleep 5 ms
\endif
