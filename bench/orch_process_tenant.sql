-- Orchestrator worker loop of one tenant (:tenant), one task: orch_dequeue
-- with tenant => (transaction 1), then orch_complete (transaction 2).
SELECT count(*) AS n, max(task_id) AS tid, max(lease_token::text) AS tok
  FROM orch_dequeue(:queue, 'w' || :client_id, 1, tenant => :tenant)
\gset
\if :n > 0
SELECT orch_complete(:tid, :tok::uuid, '{}');
\endif
