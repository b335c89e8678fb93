-- Orchestrator worker of the waiting-claim runs: claim up to :batch tasks,
-- waiting in the server up to a second for one (transaction 1), and
-- complete them (transaction 2: orch_complete for one, orch_complete_batch
-- for several).  No sleep in the client: a commit wakes the claim.
SELECT count(*) AS n, max(task_id) AS tid, max(lease_token::text) AS tok,
       array_agg(task_id)::text AS ids, array_agg(lease_token)::text AS toks
  FROM orch_dequeue(:queue, 'w' || :client_id, :batch, wait => '1 second')
\gset
\if :n = 1
SELECT orch_complete(:tid, :tok::uuid, '{}');
\elif :n > 1
SELECT orch_complete_batch(:ids::bigint[], :toks::uuid[]);
\endif
