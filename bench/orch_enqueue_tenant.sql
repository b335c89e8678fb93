-- Orchestrator: enqueue one task of tenant :tenant per transaction.
SELECT orch_enqueue(:queue, '{"kind": "email", "to": "user@example.com", "n": 1}', tenant => :tenant);
