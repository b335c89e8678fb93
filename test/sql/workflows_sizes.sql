-- Runs are bounded: a step's task is given its input (the
-- run's input and its dependencies' outputs) only up to
-- orchestrator.max_step_input_size, else the step fails (its size in the
-- error, never its content) and the run's failure policy applies; a
-- finished run leaves by retention with its steps, its events and the
-- approvals given to it (the reference is single-use while the run is
-- kept, and free again after).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

SELECT orch_create_queue('wsz_q') IS NOT NULL AS created;
SELECT orch_define('wsz_flow', '{"steps": [
    {"step_id": "a", "queue": "wsz_q", "handler": "a"},
    {"step_id": "b", "queue": "wsz_q", "handler": "b"},
    {"step_id": "join", "queue": "wsz_q", "handler": "join", "depends_on": ["a", "b"]}]}') AS version;
SELECT orch_publish('wsz_flow', 1) IS NOT NULL AS published;

-- 1. Under the limit: the join's task carries both outputs.
SELECT orch_start('wsz_flow', '{"n": 1}') AS run1 \gset
SELECT count(*) AS completed FROM orch_dequeue('wsz_q', 'w', 2) d,
       LATERAL orch_complete(d.task_id, d.lease_token, jsonb_build_object('blob', repeat('x', 3000))) c;
SELECT step_key, octet_length(payload::text) > 6000 AS carries_both
  FROM orch.tasks WHERE run_id = :run1 AND step_key = 'join';
SELECT count(*) AS completed FROM orch_dequeue('wsz_q', 'w', 2) d,
       LATERAL orch_complete(d.task_id, d.lease_token, '{}') c;
SELECT state FROM orch.runs WHERE id = :run1;

-- 2. Over the limit: the join fails at once with the size of its input, no
--    task is created, the worker's completion of the last dependency
--    succeeds, and the run fails.
SET orchestrator.max_step_input_size = 5000;
SHOW orchestrator.max_step_input_size;
SELECT orch_start('wsz_flow', '{"n": 2}') AS run2 \gset
SELECT count(*) AS completed FROM orch_dequeue('wsz_q', 'w', 2) d,
       LATERAL orch_complete(d.task_id, d.lease_token, jsonb_build_object('blob', repeat('x', 3000))) c;
SELECT step_id, state, regexp_replace(error, '\d+ bytes', 'N bytes') AS error
  FROM orch.run_steps WHERE run_id = :run2 ORDER BY step_id;
SELECT count(*) AS join_tasks FROM orch.tasks WHERE run_id = :run2 AND step_key = 'join';
SELECT state, reason_code FROM orch.runs WHERE id = :run2;
-- the error says how large, not what: no output content in it
SELECT position('xxx' IN error) = 0 AS no_content FROM orch.run_steps WHERE run_id = :run2 AND step_id = 'join';
SELECT from_state, to_state, reason_code FROM orch.history
 WHERE run_id = :run2 AND entity = 'run_step' AND note = 'join' ORDER BY id;
RESET orchestrator.max_step_input_size;
-- bad values of the setting
SET orchestrator.max_step_input_size = 0;
SET orchestrator.max_step_input_size = '2GB';

-- 3. Retention takes a finished run with its steps and approvals (its
--    events leave with their partition of the history: history_partitions);
--    the approval reference is single-use while the run is kept.
SELECT orch_define('wsz_gate', '{"steps": [
    {"step_id": "gate", "type": "human_approval", "timeout": "1 hour"}]}') AS version;
SELECT orch_publish('wsz_gate', 1) IS NOT NULL AS published;
SELECT orch_start('wsz_gate', '{}') AS g1 \gset
SELECT orch_approve(:g1, 'gate', 'WSZ-REF-1', 'alice') AS decided;
SELECT state FROM orch.runs WHERE id = :g1;
SELECT orch_start('wsz_gate', '{}') AS g2 \gset
DO $$ BEGIN
    PERFORM orch_approve(currval('orch.runs_id_seq'), 'gate', 'WSZ-REF-1', 'bob');
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'reuse while kept: %', SQLSTATE;
END $$;
SELECT count(*) AS approvals_kept FROM orch.approvals WHERE approval_ref = 'WSZ-REF-1';
-- the first run ages past a retention of one second (runs cannot be
-- back-dated: the run trigger refuses any change to a finished run)
SET orchestrator.retention = '1s';
SELECT pg_sleep(1.2);
SELECT (SELECT count FROM orch_maintain() WHERE action = 'runs_purged') >= 1 AS purged;
RESET orchestrator.retention;
SELECT (SELECT count(*) FROM orch.runs WHERE id = :g1) AS run_left,
       (SELECT count(*) FROM orch.run_steps WHERE run_id = :g1) AS steps_left,
       (SELECT count(*) FROM orch.approvals WHERE run_id = :g1) AS approvals_left;
-- free again: the reference now decides the second run
SELECT orch_approve(:g2, 'gate', 'WSZ-REF-1', 'bob') AS decided;
SELECT run_id = :g2 AS bound_to_second_run, actor FROM orch.approvals WHERE approval_ref = 'WSZ-REF-1';

-- 4. A maintenance pass costs what is due, not what is open: with 300 runs
--    waiting for a human (no timer), it reads no run to find the one whose
--    timer is due (0.8.0 read every open run, 20,000 runs: 61 ms a pass).
--    In a database of its own, so that nothing left by other tests is due.
SET client_min_messages = warning;
\set suite_db :DBNAME
DROP DATABASE IF EXISTS orch_ws_bounded;
CREATE DATABASE orch_ws_bounded;
\c orch_ws_bounded
SET client_min_messages = warning;
CREATE EXTENSION orchestrator;
RESET client_min_messages;
SELECT orch_define('wsz_open', '{"steps": [{"step_id": "gate", "type": "human_approval"}]}') AS version;
SELECT orch_publish('wsz_open', 1) IS NOT NULL AS published;
SELECT count(orch_start('wsz_open', jsonb_build_object('n', g))) AS open_runs FROM generate_series(1, 300) g;
SELECT orch_define('wsz_nap', '{"steps": [{"step_id": "nap", "type": "wait", "duration": 0.01}]}') AS version;
SELECT orch_publish('wsz_nap', 1) IS NOT NULL AS published;
SELECT orch_start('wsz_nap', '{}') AS nap \gset
SELECT pg_sleep(0.05);
SELECT count(*) > 0 AS first_pass FROM orch_maintain();
ANALYZE orch.runs, orch.run_steps, orch.tasks;
-- this backend's table counters so far are flushed, so that the pass's own
-- reads are what pg_stat_xact_user_tables shows
SELECT pg_stat_force_next_flush();
SELECT 1 AS flushed;
BEGIN;
SELECT count(*) > 0 AS maintained FROM orch_maintain();
SELECT relname, seq_tup_read + coalesce(idx_tup_fetch, 0) < 50 AS few_read
  FROM pg_stat_xact_user_tables WHERE relid IN ('orch.runs'::regclass, 'orch.run_steps'::regclass) ORDER BY 1;
COMMIT;
SELECT state FROM orch.runs WHERE id = :nap;
SELECT count(*) FILTER (WHERE state = 'waiting_approval') AS still_waiting FROM orch.runs WHERE definition = 'wsz_open';
\c :suite_db
DROP DATABASE orch_ws_bounded;
