-- Orchestrator: enqueue one task per transaction.
SELECT orch_enqueue(:queue, '{"kind": "email", "to": "user@example.com", "n": 1}');
