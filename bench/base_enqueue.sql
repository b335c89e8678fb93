-- Baseline: enqueue one job per transaction (returns its id, like orch_enqueue).
INSERT INTO jobs (queue, priority, payload)
VALUES (:queue, 0, '{"kind": "email", "to": "user@example.com", "n": 1}')
RETURNING id;
