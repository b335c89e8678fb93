-- Orchestrator worker loop, one task: orch_dequeue (transaction 1), then
-- orch_complete with the lease token (transaction 2).  The claim always
-- returns one row (n = 0 when the queue is empty) so that pgbench's \gset
-- never fails; the complete is skipped then.
SELECT count(*) AS n, max(task_id) AS tid, max(lease_token::text) AS tok
  FROM orch_dequeue(:queue, 'w' || :client_id, 1)
\gset
\if :n > 0
SELECT orch_complete(:tid, :tok::uuid, '{}');
\endif
