-- Orchestrator: enqueue 1,000 tasks in one transaction (orch_enqueue_batch).
SELECT count(*)
  FROM orch_enqueue_batch(:queue, ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g)
                                          FROM generate_series(1, 1000) g));
