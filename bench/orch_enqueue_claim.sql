-- The signals group's reference round trip: a plain task enqueued, then at
-- once a claim of it (two transactions, as the signal's round trip).
SELECT orch_enqueue(:queue, '{"n": 1}');
SELECT count(*) FROM orch_dequeue(:queue, 'sig-worker', 1);
