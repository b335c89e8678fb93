-- The signals group's round trip, one run per transaction (:i counts the
-- client's transactions, from -D i=0): orch_signal to the run that waits
-- for "go" (its transaction: the wait consumes the signal and the next
-- step's task is enqueued), then at once a claim of that task.
\set i :i + 1
SELECT orch_signal(run_id, 'go') FROM bench_signal_runs WHERE seq = :i;
SELECT count(*) FROM orch_dequeue(:queue, 'sig-worker', 1);
