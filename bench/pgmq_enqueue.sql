-- pgmq: send one message per transaction (returns its id, like orch_enqueue).
SELECT * FROM pgmq.send(:queue, '{"kind": "email", "to": "user@example.com", "n": 1}');
