-- Orchestrator: claim one task and nothing else (claim-only latency).
SELECT count(*) AS n FROM orch_dequeue(:queue, 'w' || :client_id, 1);
