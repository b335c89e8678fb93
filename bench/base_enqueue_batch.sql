-- Baseline: enqueue 1,000 jobs in one transaction (one multi-row INSERT).
-- The payload array is built server-side by the same expression as in
-- orch_enqueue_batch.sql, so both sides pay the same for it.
INSERT INTO jobs (queue, priority, payload)
SELECT :queue, 0, p
  FROM unnest(ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g)
                      FROM generate_series(1, 1000) g)) AS p;
