-- orch_maintain: lease and timeout recovery, retention, dead letters, re-drive.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
SELECT orch_create_queue('mnt', '{"max_attempts": 2, "initial_delay": 0, "lease": "0.2 seconds"}') IS NOT NULL AS created;

-- 1. An abandoned claim is recovered by maintenance as a TRANSIENT failure.
SELECT orch_enqueue('mnt', '{"job": "abandoned"}') AS a \gset
SELECT count(*) AS claimed FROM orch_dequeue('mnt', 'ghost');
SELECT pg_sleep(0.3);
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';
SELECT state, reason_code, attempts, failures, last_error_class FROM orch_tasks WHERE task_id = :a;
SELECT outcome, error_class FROM orch_attempts WHERE task_id = :a;
-- a second pass finds nothing more to do (idempotent)
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';

-- 2. Retried, abandoned again: budget exhausted -> dead letter.
SELECT attempt FROM orch_dequeue('mnt', 'ghost');
SELECT pg_sleep(0.3);
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';
SELECT state, reason_code, attempts, failures FROM orch_tasks WHERE task_id = :a;
SELECT task_id = :a AS is_a, reason, attempts, failures FROM orch_dead_letters WHERE queue = 'mnt';

-- 3. A task's timeout caps its lease, independent of heartbeats.
SELECT orch_enqueue('mnt', '{"job": "slow"}', timeout => '1 second', max_attempts => 1) AS s \gset
SELECT lease_token AS tok FROM orch_dequeue('mnt', 'w1', lease => '1 hour') \gset
SELECT orch_heartbeat(:s, :'tok', '1 hour');
SELECT pg_sleep(1.1);
SELECT pg_temp.sqlstate_of(format('SELECT orch_heartbeat(%s, %L)', :s, :'tok')) AS heartbeat_after_timeout;
SELECT pg_temp.sqlstate_of(format('SELECT orch_complete(%s, %L)', :s, :'tok')) AS complete_after_timeout;
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';
SELECT state, reason_code FROM orch_tasks WHERE task_id = :s;
SELECT outcome FROM orch_attempts WHERE task_id = :s;

-- 4. Re-drive: one dead letter, then in bulk; audited; not twice.
SELECT orch_retry(:a) AS r \gset
SELECT state, retry_of = :a AS links, attempts, failures, payload FROM orch_tasks WHERE task_id = :r;
SELECT pg_temp.sqlstate_of(format('SELECT orch_retry(%s)', :a)) AS retry_again;
SELECT reason_code, note LIKE 're-driven as task %' AS noted FROM orch_events
 WHERE task_id = :a AND reason_code = 'redriven';
SELECT pg_temp.sqlstate_of(format('SELECT orch_retry(%s)', :r)) AS retry_live_task;
SELECT pg_temp.sqlstate_of('SELECT orch_retry(999999999)') AS retry_unknown;
SELECT pg_temp.sqlstate_of('SELECT orch_retry(NULL)') AS retry_null;
SELECT count(*) AS reprocessed FROM orch_reprocess(queue => 'mnt', reason_code => 'max_attempts_exhausted');
SELECT count(*) AS dead_letters_left FROM orch_dead_letters WHERE queue = 'mnt';
SELECT pg_temp.sqlstate_of($$SELECT * FROM orch_reprocess(reason_code => 'completed')$$) AS bad_reason;
SELECT pg_temp.sqlstate_of($$SELECT * FROM orch_reprocess(max => 0)$$) AS bad_max;

-- 5. Retention purges finished tasks with their attempts and events; live work stays.
SELECT count(*) AS finished_before FROM orch_tasks WHERE queue = 'mnt' AND finished_at IS NOT NULL;
SET orchestrator.retention = 1;
SELECT pg_sleep(1.1);
SELECT action, count > 0 AS purged FROM orch_maintain() WHERE action = 'tasks_purged';
RESET orchestrator.retention;
SELECT count(*) AS finished_after FROM orch_tasks WHERE queue = 'mnt' AND finished_at IS NOT NULL;
SELECT count(*) AS live_after FROM orch_tasks WHERE queue = 'mnt' AND finished_at IS NULL;
SELECT count(*) AS orphan_attempts FROM orch.attempts a
 WHERE NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = a.task_id);
SELECT count(*) AS orphan_events FROM orch.history e
 WHERE e.entity = 'task' AND NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = e.task_id);

-- 6. Bad input; scheduling without pg_cron says so.
SELECT pg_temp.sqlstate_of('SELECT * FROM orch_maintain(0)') AS maintain_zero;
SELECT pg_temp.sqlstate_of('SELECT orch_schedule_maintenance()') AS schedule_without_pg_cron;

SELECT orch_drop_queue('mnt', force => true);

-- 7. Retention purges finished workflow runs with their steps and the run's
--    own events; an open run of the same age stays whole (0.5.0).
SELECT orch_publish('mnt_wf', orch_define('mnt_wf',
  '{"steps": [{"step_id": "a", "queue": "mnt_wfq", "handler": "h"},
              {"step_id": "b", "queue": "mnt_wfq", "handler": "h", "depends_on": ["a"]}]}')) IS NOT NULL AS published;
SELECT orch_start('mnt_wf', '{"n": "done"}') AS run_done \gset
SELECT orch_start('mnt_wf', '{"n": "open"}') AS run_open \gset
-- run_done: both steps; run_open: its first step only
SELECT orch_complete(d.task_id, d.lease_token) FROM orch_dequeue('mnt_wfq', 'w', 2) d ORDER BY d.task_id;
SELECT orch_complete(d.task_id, d.lease_token) FROM orch_dequeue('mnt_wfq', 'w', 1) d;
SELECT run_id = :run_done AS is_done, state FROM orch_runs WHERE run_id IN (:run_done, :run_open) ORDER BY run_id;
SET orchestrator.retention = 1;
SELECT pg_sleep(1.1);
SELECT action, count FROM orch_maintain() WHERE action IN ('tasks_purged', 'runs_purged') ORDER BY action;
RESET orchestrator.retention;
SELECT (SELECT count(*) FROM orch.runs WHERE id = :run_done) AS done_run,
       (SELECT count(*) FROM orch.run_steps WHERE run_id = :run_done) AS done_steps,
       -- (its events leave with their partition of the history: those in
       -- the DEFAULT partition now, those of a range up to one width later)
       (SELECT count(*) FROM orch.events WHERE run_id = :run_done
          AND tableoid = 'orch.events_default'::regclass) AS done_default_events,
       (SELECT count(*) FROM orch.tasks WHERE run_id = :run_done) AS done_tasks;
SELECT (SELECT state FROM orch.runs WHERE id = :run_open) AS open_run,
       (SELECT count(*) FROM orch.run_steps WHERE run_id = :run_open) AS open_steps,
       (SELECT count(*) > 0 FROM orch.history WHERE run_id = :run_open AND task_id IS NULL) AS open_run_events,
       (SELECT count(*) FROM orch.tasks WHERE run_id = :run_open) AS open_tasks;
-- orch_run_status still lists the open run's events, its own and its tasks'
SELECT jsonb_array_length(orch_run_status(:run_open) -> 'events') =
       (SELECT count(*) FROM orch.history WHERE run_id = :run_open) AS status_events_complete;
