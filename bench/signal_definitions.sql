-- bench/signal_definitions.sql: the workflow of the signals group (see
-- bench/README.md), defined and published after every reset, its queue
-- 'sig', the plain tasks' queue 'sigbase' (leases of an hour: a claimed
-- task stays claimed for the run), and bench_signal_runs, the runs to
-- signal one after another (filled by bench/run.sh).
SELECT orch_create_queue('sig', '{"lease": "1 hour"}');
SELECT orch_create_queue('sigbase', '{"lease": "1 hour"}');

-- a wait for signal "go", then a task step
SELECT orch_publish('bench_signal', orch_define('bench_signal', '{
  "description": "bench: wait for a signal, then a task",
  "steps": [{"step_id": "w", "type": "wait", "signal": "go"},
            {"step_id": "next", "queue": "sig", "handler": "bench.next", "depends_on": ["w"]}]}'));

DROP TABLE IF EXISTS bench_signal_runs;
CREATE TABLE bench_signal_runs (seq int PRIMARY KEY, run_id bigint NOT NULL);
