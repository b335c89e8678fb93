-- privileges: role by role (SPEC §10, install script grants), exactly which
-- API functions each role may execute, that no role writes orch.* tables
-- directly (events are append-only), and that PUBLIC gets nothing.
-- Run: pg_prove -d DB test/pgtap/privileges.sql
\set QUIET 1
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS orchestrator;

BEGIN;
SELECT plan(720);

-- ---------------------------------------------------------------------------
-- Test roles (rolled back at the end): one LOGIN role per orch role, and one
-- with no grant at all (what PUBLIC gets).
-- ---------------------------------------------------------------------------
CREATE ROLE tap_admin LOGIN;
CREATE ROLE tap_worker LOGIN;
CREATE ROLE tap_producer LOGIN;
CREATE ROLE tap_approver LOGIN;
CREATE ROLE tap_reader LOGIN;
CREATE ROLE tap_nobody LOGIN;
GRANT orch_admin TO tap_admin;
GRANT orch_worker TO tap_worker;
GRANT orch_producer TO tap_producer;
GRANT orch_approver TO tap_approver;
GRANT orch_reader TO tap_reader;

-- The extension's API functions, and the orch tables.
CREATE TEMP VIEW tap_api AS
SELECT p.oid, p.proname::text AS name
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator'
 WHERE p.proname LIKE 'orch\_%';
CREATE TEMP VIEW tap_tables AS
SELECT c.oid, c.relname::text AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'orch' AND c.relkind IN ('r', 'p');
GRANT SELECT ON tap_api, tap_tables TO PUBLIC;
CREATE FUNCTION pg_temp.executable(r name) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(DISTINCT name ORDER BY name), '{}') FROM tap_api
     WHERE has_function_privilege(r, oid, 'EXECUTE')
$$;
CREATE FUNCTION pg_temp.table_writes(r name) RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(t.name || ':' || p.priv ORDER BY t.name, p.priv), '{}')
      FROM tap_tables t, unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p(priv)
     WHERE has_table_privilege(r, t.oid, p.priv)
$$;

-- ---------------------------------------------------------------------------
-- 1. Catalog: nothing to PUBLIC.
-- ---------------------------------------------------------------------------
SELECT is((SELECT count(*) FROM tap_api), 75::bigint,
          'the extension has the 75 orch_ functions of 0.8.0 (with the internal orch_tasks_statement_end, orch_definitions_guard, orch_run_lifecycle and orch_queues_changed, and the superuser-only orch_distribute)');

SELECT is(
    (SELECT coalesce(array_agg(p.oid::regprocedure::text ORDER BY 1), '{}')
       FROM pg_proc p
       JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
       JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator',
            aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
      WHERE a.grantee = 0),
    '{}'::text[], 'PUBLIC may execute no function of the extension');

SELECT is(
    (SELECT coalesce(array_agg(c.oid::regclass::text ORDER BY 1), '{}')
       FROM pg_class c
       JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
       JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator',
            aclexplode(coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
      WHERE a.grantee = 0),
    '{}'::text[], 'PUBLIC has no privilege on any table, view or sequence of the extension');

SELECT ok(NOT has_schema_privilege('tap_nobody', 'orch', 'USAGE'), 'PUBLIC has no USAGE on schema orch');

-- ---------------------------------------------------------------------------
-- 2. Catalog: exactly which API functions each role may execute.
-- ---------------------------------------------------------------------------
SELECT is(pg_temp.executable('tap_reader'),
    ARRAY['orch_caller_tenants', 'orch_cron_next', 'orch_definition', 'orch_duration_stats', 'orch_history',
          'orch_metrics_prometheus', 'orch_metrics_refresh', 'orch_queue_settings', 'orch_retry_decision',
          'orch_run_rows', 'orch_run_status', 'orch_run_step_rows', 'orch_status', 'orch_task_rows', 'orch_throughput',
          'orch_validate_definition'],
    'orch_reader executes exactly the read functions');
SELECT is(pg_temp.executable('tap_producer'),
    ARRAY['orch_caller_tenants', 'orch_cancel', 'orch_cancel_run', 'orch_cancel_runs_where', 'orch_cancel_where',
          'orch_command', 'orch_cron_next', 'orch_definition',
          'orch_duration_stats', 'orch_enqueue', 'orch_enqueue_batch', 'orch_history',
          'orch_metrics_prometheus', 'orch_metrics_refresh', 'orch_pause_run', 'orch_pause_schedule', 'orch_queue_settings',
          'orch_resume_run', 'orch_resume_schedule', 'orch_retry_decision', 'orch_run_rows', 'orch_run_status',
          'orch_run_step_rows', 'orch_schedule', 'orch_signal', 'orch_start', 'orch_status', 'orch_task_rows', 'orch_throughput', 'orch_unschedule',
          'orch_validate_definition'],
    'orch_producer executes reader + enqueue, enqueue_batch, cancel, cancel_where, command, start, pause_run, resume_run, cancel_run, cancel_runs_where, schedule, unschedule, pause_schedule, resume_schedule, signal');
SELECT is(pg_temp.executable('tap_worker'),
    ARRAY['orch_await_confirmation', 'orch_await_tool', 'orch_caller_tenants', 'orch_command_result',
          'orch_complete', 'orch_complete_batch', 'orch_cron_next', 'orch_definition', 'orch_dequeue', 'orch_duration_stats',
          'orch_fail', 'orch_heartbeat', 'orch_history', 'orch_metrics_prometheus', 'orch_metrics_refresh',
          'orch_progress', 'orch_queue_settings', 'orch_release', 'orch_resume', 'orch_retry_decision',
          'orch_run_rows', 'orch_run_status',
          'orch_run_step_rows', 'orch_status', 'orch_task_rows', 'orch_throughput', 'orch_validate_definition'],
    'orch_worker executes reader + dequeue, complete, complete_batch, fail, heartbeat (both forms), progress, release, await_tool, await_confirmation, resume, command_result');
SELECT is(pg_temp.executable('tap_approver'),
    ARRAY['orch_acknowledge_drift', 'orch_approve', 'orch_caller_tenants', 'orch_confirm', 'orch_cron_next',
          'orch_definition', 'orch_duration_stats', 'orch_history', 'orch_metrics_prometheus', 'orch_metrics_refresh',
          'orch_queue_settings', 'orch_reject', 'orch_retry_decision', 'orch_run_rows', 'orch_run_status',
          'orch_run_step_rows', 'orch_status', 'orch_task_rows', 'orch_throughput', 'orch_validate_definition'],
    'orch_approver executes reader + confirm, approve, reject, acknowledge_drift');
SELECT is(pg_temp.executable('tap_admin'),
    ARRAY['orch_acknowledge_drift', 'orch_approve', 'orch_attach_state_machine', 'orch_await_confirmation',
          'orch_await_tool', 'orch_bind_tenant', 'orch_caller_tenants', 'orch_cancel', 'orch_cancel_run',
          'orch_cancel_runs_where', 'orch_cancel_where', 'orch_command', 'orch_command_result', 'orch_complete', 'orch_complete_batch',
          'orch_configure_queue', 'orch_confirm', 'orch_create_queue', 'orch_create_state_machine', 'orch_cron_next',
          'orch_define', 'orch_definition', 'orch_deprecate', 'orch_dequeue', 'orch_drop_queue',
          'orch_duration_stats', 'orch_enqueue', 'orch_enqueue_batch', 'orch_fail', 'orch_heartbeat',
          'orch_history', 'orch_maintain', 'orch_metrics_prometheus', 'orch_metrics_refresh',
          'orch_pause_queue', 'orch_pause_run', 'orch_pause_schedule', 'orch_progress', 'orch_publish', 'orch_queue_settings',
          'orch_reject', 'orch_release',
          'orch_reprocess', 'orch_resume', 'orch_resume_queue', 'orch_resume_run', 'orch_resume_schedule', 'orch_retry',
          'orch_retry_decision', 'orch_retry_run', 'orch_retry_where', 'orch_run_rows', 'orch_run_status', 'orch_run_step_rows',
          'orch_schedule', 'orch_schedule_maintenance', 'orch_schedule_tick', 'orch_set_concurrency_limit',
          'orch_set_fairness_weight', 'orch_signal', 'orch_start',
          'orch_state_machine_trigger', 'orch_status', 'orch_task_rows', 'orch_throughput', 'orch_unbind_tenant',
          'orch_unschedule', 'orch_unschedule_maintenance', 'orch_validate_definition'],
    'orch_admin executes every API function (the internal trigger functions orch_tasks_statement_end, orch_definitions_guard, orch_run_lifecycle and orch_queues_changed, and the superuser-only orch_distribute aside)');
SELECT is(pg_temp.executable('tap_nobody'), '{}'::text[], 'a role without grants executes no API function');

-- ---------------------------------------------------------------------------
-- 3. Catalog: no role may write the orch tables directly.
-- ---------------------------------------------------------------------------
SELECT is(pg_temp.table_writes(r), '{}'::text[], r || ' has no write privilege on any orch table')
  FROM unnest(ARRAY['orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader', 'tap_nobody']) r;
SELECT ok(NOT has_table_privilege(r, 'orch.events', 'UPDATE') AND NOT has_table_privilege(r, 'orch.events', 'DELETE'),
          r || ' may neither UPDATE nor DELETE orch.events')
  FROM unnest(ARRAY['orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader', 'tap_nobody']) r;

-- ---------------------------------------------------------------------------
-- Fixtures (as the extension owner).
-- ---------------------------------------------------------------------------
CREATE TABLE tap_claims (tag text, task_id bigint, lease_token uuid);
GRANT ALL ON tap_claims TO tap_admin, tap_worker, tap_producer, tap_approver, tap_reader;
DO $$
BEGIN
    PERFORM orch_create_queue('tap_q');
    PERFORM orch_enqueue('tap_q', '{"ref": true}');
    PERFORM orch_enqueue('tap_w', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
    -- tasks awaiting confirmation: one for the approver, one for the admin
    PERFORM orch_enqueue('tap_a', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
    INSERT INTO tap_claims SELECT 'approve', task_id, lease_token FROM orch_dequeue('tap_a', 'setup', 3);
    PERFORM orch_await_confirmation(task_id, lease_token) FROM tap_claims WHERE tag = 'approve';
    -- a published workflow: a task step, then a human approval
    PERFORM orch_define('tap_wf', '{"steps": [{"step_id": "work", "queue": "tap_wq", "handler": "tap.work"},
                                              {"step_id": "gate", "type": "human_approval", "depends_on": ["work"]}]}');
    PERFORM orch_publish('tap_wf', 1);
    -- a failed run (its step task failed) for orch_retry_run
    PERFORM orch_start('tap_wf', '{"fx": "failed"}');
    PERFORM orch_fail(task_id, lease_token, 'NON_RETRYABLE', 'setup') FROM orch_dequeue('tap_wq', 'setup');
    -- four runs waiting for approval: the approver and the admin each approve one and reject one
    PERFORM orch_start('tap_wf', jsonb_build_object('fx', 'waiting', 'n', g)) FROM generate_series(1, 4) g;
    PERFORM orch_complete(task_id, lease_token) FROM orch_dequeue('tap_wq', 'setup', 4);
    -- two dead letters for orch_retry_where, two running runs for orch_cancel_runs_where
    PERFORM orch_enqueue('tap_dl', jsonb_build_object('n', g)) FROM generate_series(1, 2) g;
    PERFORM orch_fail(task_id, lease_token, 'NON_RETRYABLE', 'setup') FROM orch_dequeue('tap_dl', 'setup', 2);
    PERFORM orch_define('tap_bulk', '{"steps": [{"step_id": "s", "queue": "tap_bq", "handler": "tap.bulk"}]}');
    PERFORM orch_publish('tap_bulk', 1);
    PERFORM orch_start('tap_bulk', jsonb_build_object('bulk', g)) FROM generate_series(1, 2) g;
END $$;
SELECT is((SELECT string_agg(state, ',' ORDER BY run_id) FROM orch_runs WHERE definition = 'tap_wf'),
          'failed,waiting_approval,waiting_approval,waiting_approval,waiting_approval',
          'fixture: a failed run and four runs waiting for approval');
-- a table owned by tap_admin for orch_attach_state_machine
CREATE TABLE tap_doors (id int PRIMARY KEY, status text);
ALTER TABLE tap_doors OWNER TO tap_admin;

-- The calls, with arguments that make the allowed ones succeed.
CREATE TEMP TABLE calls (ord serial, fn text, sql text);
GRANT SELECT ON calls TO PUBLIC;
INSERT INTO calls (fn, sql) VALUES
    ('orch_enqueue',              $$SELECT orch_enqueue('tap_p', '{"by": "role"}')$$),
    ('orch_enqueue_batch',        $$SELECT orch_enqueue_batch('tap_p', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[])$$),
    ('orch_cancel',               $$SELECT orch_cancel((SELECT max(task_id) FROM orch_tasks WHERE queue = 'tap_p' AND state = 'queued'), 'by role')$$),
    ('orch_cancel_where',         $$SELECT count(*) FROM orch_cancel_where('{"queue": "tap_p", "state": ["queued"]}', 'by role', 1)$$),
    ('orch_dequeue',              $$INSERT INTO tap_claims SELECT 'w', task_id, lease_token FROM orch_dequeue('tap_w', 'tap-worker')$$),
    ('orch_heartbeat',            $$SELECT orch_heartbeat(task_id, lease_token) FROM tap_claims WHERE tag = 'w'$$),
    ('orch_heartbeat',            $$SELECT h.state FROM tap_claims, orch_heartbeat(task_id, lease_token, '1 minute', '{"pct": 1}') h WHERE tag = 'w'$$),
    ('orch_progress',             $$SELECT orch_progress(task_id, lease_token, '{"pct": 2}') FROM tap_claims WHERE tag = 'w'$$),
    ('orch_release',              $$SELECT orch_release(task_id, lease_token) FROM tap_claims WHERE tag = 'w'$$),
    ('orch_dequeue',              $$UPDATE tap_claims c SET task_id = d.task_id, lease_token = d.lease_token FROM orch_dequeue('tap_w', 'tap-worker') d WHERE c.tag = 'w'$$),
    ('orch_await_tool',           $$SELECT orch_await_tool(task_id, lease_token, 'tool') FROM tap_claims WHERE tag = 'w'$$),
    ('orch_resume',               $$SELECT orch_resume(task_id, '{"tool": "result"}') FROM tap_claims WHERE tag = 'w'$$),
    ('orch_dequeue',              $$UPDATE tap_claims c SET task_id = d.task_id, lease_token = d.lease_token FROM orch_dequeue('tap_w', 'tap-worker') d WHERE c.tag = 'w'$$),
    ('orch_complete',             $$SELECT orch_complete(task_id, lease_token, '{"ok": 1}') FROM tap_claims WHERE tag = 'w'$$),
    ('orch_dequeue',              $$UPDATE tap_claims c SET task_id = d.task_id, lease_token = d.lease_token FROM orch_dequeue('tap_w', 'tap-worker') d WHERE c.tag = 'w'$$),
    ('orch_fail',                 $$SELECT f.state FROM tap_claims, orch_fail(task_id, lease_token, 'NON_RETRYABLE', 'by role') f WHERE tag = 'w'$$),
    ('orch_dequeue',              $$UPDATE tap_claims c SET task_id = d.task_id, lease_token = d.lease_token FROM orch_dequeue('tap_w', 'tap-worker') d WHERE c.tag = 'w'$$),
    ('orch_await_confirmation',   $$SELECT orch_await_confirmation(task_id, lease_token, '{"q": "ok?"}') FROM tap_claims WHERE tag = 'w'$$),
    ('orch_confirm',              $$SELECT orch_confirm((SELECT min(task_id) FROM orch_tasks WHERE queue = 'tap_a' AND state = 'awaiting_user_confirmation' AND resume_data IS NULL), true, 'tap', 'yes')$$),
    ('orch_status',               $$SELECT state FROM orch_status((SELECT min(task_id) FROM orch_tasks WHERE queue = 'tap_q'))$$),
    ('orch_history',              $$SELECT count(*) FROM orch_history((SELECT min(task_id) FROM orch_tasks WHERE queue = 'tap_q'))$$),
    ('orch_queue_settings',       $$SELECT orch_queue_settings('tap_q')$$),
    ('orch_retry_decision',       $$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1)$$),
    ('orch_tasks',                $$SELECT count(*) FROM orch_tasks$$),
    ('orch_events',               $$SELECT count(*) FROM orch_events$$),
    ('orch_attempts',             $$SELECT count(*) FROM orch_attempts$$),
    ('orch_queues',               $$SELECT count(*) FROM orch_queues$$),
    ('orch_dead_letters',         $$SELECT count(*) FROM orch_dead_letters$$),
    ('orch_commands',             $$SELECT count(*) FROM orch_commands$$),
    ('orch_caller_tenants',       $$SELECT orch_caller_tenants()$$),
    ('orch_tenant_bindings',      $$SELECT count(*) FROM orch_tenant_bindings$$),
    ('orch_bind_tenant',          $$SELECT orch_bind_tenant('tap_nobody', 'tap-tenant')$$),
    ('orch_unbind_tenant',        $$SELECT orch_unbind_tenant('tap_nobody', 'tap-tenant')$$),
    ('orch_command',              $$SELECT replayed FROM orch_command('tap.kind', 'tap-key-' || current_user, '{"x": 1}')$$),
    ('orch_command_result',       $$SELECT orch_command_result((SELECT max(command_id) FROM orch_commands WHERE kind = 'tap.kind' AND status = 'pending'), true, '{"ok": true}')$$),
    ('orch_create_queue',         $$SELECT orch_create_queue('tap_new', '{"priority": 1}')$$),
    ('orch_configure_queue',      $$SELECT orch_configure_queue('tap_new', '{"priority": 2}')$$),
    ('orch_pause_queue',          $$SELECT orch_pause_queue('tap_new')$$),
    ('orch_resume_queue',         $$SELECT orch_resume_queue('tap_new')$$),
    ('orch_drop_queue',           $$SELECT orch_drop_queue('tap_new')$$),
    ('orch_create_state_machine', $$SELECT orch_create_state_machine('tap_door', '{"closed": ["open"], "open": ["closed"]}')$$),
    ('orch_attach_state_machine', $$SELECT orch_attach_state_machine('tap_doors', 'status', 'tap_door')$$),
    ('orch_set_concurrency_limit', $$SELECT orch_set_concurrency_limit('tap_q', 'tap-key', 2)$$),
    ('orch_set_fairness_weight',  $$SELECT orch_set_fairness_weight('tap_q', 'tap-tenant', 2)$$),
    ('orch_maintain',             $$SELECT count(*) FROM orch_maintain(100)$$),
    ('orch_retry',                $$SELECT orch_retry((SELECT min(task_id) FROM orch_dead_letters WHERE queue = 'tap_w'))$$),
    ('orch_reprocess',            $$SELECT count(*) FROM orch_reprocess(queue => 'tap_w')$$),
    ('orch_retry_where',          $$SELECT count(*) FROM orch_retry_where('{"queue": "tap_dl"}', 1)$$),
    ('orch_define',               $$SELECT orch_define('tap_wf2', '{"steps": [{"step_id": "s", "queue": "tap_wq", "handler": "h"}]}')$$),
    ('orch_publish',              $$SELECT orch_publish('tap_wf2', 1)$$),
    ('orch_deprecate',            $$SELECT orch_deprecate('tap_wf2', 1)$$),
    ('orch_definition',           $$SELECT status FROM orch_definition('tap_wf')$$),
    ('orch_validate_definition',  $$SELECT orch_validate_definition('{"steps": [{"step_id": "s", "queue": "q", "handler": "h"}]}')$$),
    ('orch_definitions',          $$SELECT count(*) FROM orch_definitions$$),
    ('orch_start',                $$SELECT orch_start('tap_wf', '{"by": "role"}')$$),
    ('orch_signal',               $$SELECT orch_signal((SELECT max(run_id) FROM orch_runs WHERE definition = 'tap_wf' AND state = 'running'), 'tap.signal', '{"by": "role"}')$$),
    ('orch_signals',              $$SELECT count(*) FROM orch_signals$$),
    ('orch_pause_run',            $$SELECT orch_pause_run((SELECT max(run_id) FROM orch_runs WHERE definition = 'tap_wf' AND state = 'running'))$$),
    ('orch_resume_run',           $$SELECT orch_resume_run((SELECT max(run_id) FROM orch_runs WHERE definition = 'tap_wf' AND state = 'paused'), '{"definition": "tap_wf"}')$$),
    ('orch_cancel_run',           $$SELECT orch_cancel_run((SELECT max(run_id) FROM orch_runs WHERE definition = 'tap_wf' AND state = 'running'), 'by role')$$),
    ('orch_cancel_runs_where',    $$SELECT count(*) FROM orch_cancel_runs_where('{"definition": "tap_bulk"}', 'by role', 1)$$),
    ('orch_approve',              $$SELECT orch_approve((SELECT min(run_id) FROM orch_runs WHERE state = 'waiting_approval'), 'gate', 'tap-ok-' || current_user, 'tap', 'yes')$$),
    ('orch_acknowledge_drift',    $$DO $do$ BEGIN PERFORM orch_acknowledge_drift(-1, 'tap-drift-' || current_user); EXCEPTION WHEN SQLSTATE 'OR005' THEN NULL; END $do$ $$),
    ('orch_reject',               $$SELECT orch_reject((SELECT min(run_id) FROM orch_runs WHERE state = 'waiting_approval'), 'gate', 'tap-no-' || current_user, 'tap', 'no')$$),
    ('orch_run_status',           $$SELECT orch_run_status((SELECT min(run_id) FROM orch_runs)) -> 'run' ->> 'state'$$),
    ('orch_runs',                 $$SELECT count(*) FROM orch_runs$$),
    ('orch_run_steps',            $$SELECT count(*) FROM orch_run_steps$$),
    ('orch_task_rows',            $$SELECT count(*) FROM orch_task_rows()$$),
    ('orch_run_rows',             $$SELECT count(*) FROM orch_run_rows()$$),
    ('orch_run_step_rows',        $$SELECT count(*) FROM orch_run_step_rows((SELECT min(run_id) FROM orch_runs))$$),
    ('orch_retry_run',            $$SELECT orch_retry_run((SELECT min(run_id) FROM orch_runs WHERE state = 'failed'))$$),
    ('orch_metrics_refresh',      $$SELECT orch_metrics_refresh()$$),
    ('orch_metrics_prometheus',   $$SELECT length(orch_metrics_prometheus())$$),
    ('orch_duration_stats',       $$SELECT count(*) FROM orch_duration_stats('1 day')$$),
    ('orch_throughput',           $$SELECT count(*) FROM orch_throughput('1 day')$$),
    ('orch_queue_stats',          $$SELECT count(*) FROM orch_queue_stats$$),
    ('orch_error_stats',          $$SELECT count(*) FROM orch_error_stats$$),
    ('orch_durations',            $$SELECT count(*) FROM orch_durations$$),
    ('orch_review_queue',         $$SELECT count(*) FROM orch_review_queue$$),
    ('orch_maintenance_log',      $$SELECT count(*) FROM orch_maintenance_log$$),
    ('orch_schedule',             $$SELECT orch_schedule('tap_s_' || current_user, '0 0 1 1 *', '{"queue": "tap_sq"}')$$),
    ('orch_pause_schedule',       $$SELECT orch_pause_schedule('tap_s_' || current_user)$$),
    ('orch_resume_schedule',      $$SELECT orch_resume_schedule('tap_s_' || current_user)$$),
    ('orch_schedules',            $$SELECT count(*) FROM orch_schedules$$),
    ('orch_cron_next',            $$SELECT count(*) FROM orch_cron_next('0 * * * *')$$),
    ('orch_schedule_tick',        $$SELECT orch_schedule_tick()$$),
    ('orch_unschedule',           $$SELECT orch_unschedule('tap_s_' || current_user)$$);

-- Direct writes on the orch tables: refused for every role.
CREATE TEMP TABLE writes (ord serial, sql text);
GRANT SELECT ON writes TO PUBLIC;
INSERT INTO writes (sql) VALUES
    ($$INSERT INTO orch.tasks (queue, state, payload) VALUES ('tap_q', 'queued', '{}')$$),
    ($$UPDATE orch.tasks SET priority = 1$$),
    ($$DELETE FROM orch.tasks$$),
    ($$INSERT INTO orch.events (actor) VALUES ('forger')$$),
    ($$UPDATE orch.events SET note = 'rewritten'$$),
    ($$DELETE FROM orch.events$$),
    ($$TRUNCATE orch.events$$),
    ($$UPDATE orch.queues SET paused = true$$),
    ($$DELETE FROM orch.idempotency_keys$$),
    ($$INSERT INTO orch.attempts (task_id, attempt, outcome) VALUES (1, 1, 'completed')$$),
    ($$INSERT INTO orch.state_transitions (machine, from_state, to_state) VALUES ('task', 'completed', 'queued')$$),
    ($$INSERT INTO orch.definitions (name, version, spec, content_hash) VALUES ('forged', 1, '{}', repeat('0', 64))$$),
    ($$UPDATE orch.definitions SET status = 'deprecated'$$),
    ($$DELETE FROM orch.definitions$$),
    ($$UPDATE orch.runs SET state = 'succeeded'$$),
    ($$DELETE FROM orch.run_steps$$),
    ($$DELETE FROM orch.signals$$),
    ($$INSERT INTO orch.approvals (approval_ref, run_id, step_id, approved, actor) VALUES ('forged', 1, 'gate', true, 'forger')$$),
    ($$DELETE FROM orch.gate_repairs$$),
    ($$UPDATE orch.metric_totals SET value = 0$$),
    ($$DELETE FROM orch.metric_minutes$$),
    ($$UPDATE orch.metric_state SET snap_xmin = 0$$),
    ($$INSERT INTO orch.maintenance_log (started_at, finished_at, actor, actions) VALUES (now(), now(), 'forger', '{}')$$),
    ($$DELETE FROM orch.maintenance_log$$),
    ($$DELETE FROM orch.schedules$$);

-- run_as(role, allowed functions): for every call, lives_ok when its function
-- is allowed to the role, else throws_ok 42501; then every direct write
-- throws 42501.  Runs as the role (SET LOCAL ROLE).
CREATE FUNCTION pg_temp.run_as(r text, allowed text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    FOR c IN SELECT * FROM calls ORDER BY ord LOOP
        IF c.fn = ANY (allowed) THEN
            RETURN NEXT lives_ok(c.sql, format('%s may call %s (%s)', r, c.fn, c.ord));
        ELSE
            RETURN NEXT throws_ok(c.sql, '42501', NULL, format('%s may not call %s (%s)', r, c.fn, c.ord));
        END IF;
    END LOOP;
    FOR c IN SELECT * FROM writes ORDER BY ord LOOP
        RETURN NEXT throws_ok(c.sql, '42501', NULL, format('%s may not: %s', r, c.sql));
    END LOOP;
    RESET ROLE;
END $$;

-- ---------------------------------------------------------------------------
-- 4. At run time, role by role.
-- ---------------------------------------------------------------------------
SELECT * FROM pg_temp.run_as('tap_nobody', '{}');
SELECT * FROM pg_temp.run_as('tap_reader',
    ARRAY['orch_status', 'orch_history', 'orch_queue_settings', 'orch_retry_decision', 'orch_caller_tenants',
          'orch_tasks', 'orch_events', 'orch_attempts', 'orch_queues', 'orch_dead_letters', 'orch_commands',
          'orch_definition', 'orch_validate_definition', 'orch_definitions', 'orch_run_status', 'orch_runs', 'orch_run_steps', 'orch_signals',
          'orch_task_rows', 'orch_run_rows', 'orch_run_step_rows',
          'orch_metrics_refresh', 'orch_metrics_prometheus', 'orch_duration_stats', 'orch_throughput', 'orch_queue_stats', 'orch_error_stats',
          'orch_durations', 'orch_review_queue', 'orch_maintenance_log', 'orch_schedules', 'orch_cron_next']);
SELECT * FROM pg_temp.run_as('tap_producer',
    ARRAY['orch_enqueue', 'orch_enqueue_batch', 'orch_cancel', 'orch_cancel_where', 'orch_command',
          'orch_start', 'orch_pause_run', 'orch_resume_run', 'orch_cancel_run', 'orch_cancel_runs_where',
          'orch_schedule', 'orch_pause_schedule', 'orch_resume_schedule', 'orch_unschedule', 'orch_signal',
          'orch_status', 'orch_history', 'orch_queue_settings', 'orch_retry_decision', 'orch_caller_tenants',
          'orch_tasks', 'orch_events', 'orch_attempts', 'orch_queues', 'orch_dead_letters', 'orch_commands',
          'orch_definition', 'orch_validate_definition', 'orch_definitions', 'orch_run_status', 'orch_runs', 'orch_run_steps', 'orch_signals',
          'orch_task_rows', 'orch_run_rows', 'orch_run_step_rows',
          'orch_metrics_refresh', 'orch_metrics_prometheus', 'orch_duration_stats', 'orch_throughput', 'orch_queue_stats', 'orch_error_stats',
          'orch_durations', 'orch_review_queue', 'orch_maintenance_log', 'orch_schedules', 'orch_cron_next']);
SELECT * FROM pg_temp.run_as('tap_worker',
    ARRAY['orch_dequeue', 'orch_heartbeat', 'orch_progress', 'orch_release', 'orch_await_tool', 'orch_resume',
          'orch_complete', 'orch_fail', 'orch_await_confirmation', 'orch_command_result',
          'orch_status', 'orch_history', 'orch_queue_settings', 'orch_retry_decision', 'orch_caller_tenants',
          'orch_tasks', 'orch_events', 'orch_attempts', 'orch_queues', 'orch_dead_letters', 'orch_commands',
          'orch_definition', 'orch_validate_definition', 'orch_definitions', 'orch_run_status', 'orch_runs', 'orch_run_steps', 'orch_signals',
          'orch_task_rows', 'orch_run_rows', 'orch_run_step_rows',
          'orch_metrics_refresh', 'orch_metrics_prometheus', 'orch_duration_stats', 'orch_throughput', 'orch_queue_stats', 'orch_error_stats',
          'orch_durations', 'orch_review_queue', 'orch_maintenance_log', 'orch_schedules', 'orch_cron_next']);
SELECT * FROM pg_temp.run_as('tap_approver',
    ARRAY['orch_confirm', 'orch_approve', 'orch_reject', 'orch_acknowledge_drift',
          'orch_status', 'orch_history', 'orch_queue_settings', 'orch_retry_decision', 'orch_caller_tenants',
          'orch_tasks', 'orch_events', 'orch_attempts', 'orch_queues', 'orch_dead_letters', 'orch_commands',
          'orch_definition', 'orch_validate_definition', 'orch_definitions', 'orch_run_status', 'orch_runs', 'orch_run_steps', 'orch_signals',
          'orch_task_rows', 'orch_run_rows', 'orch_run_step_rows',
          'orch_metrics_refresh', 'orch_metrics_prometheus', 'orch_duration_stats', 'orch_throughput', 'orch_queue_stats', 'orch_error_stats',
          'orch_durations', 'orch_review_queue', 'orch_maintenance_log', 'orch_schedules', 'orch_cron_next']);

-- The admin may do everything through the API (with fresh work for the worker calls).
DO $$
BEGIN
    PERFORM orch_enqueue('tap_w', jsonb_build_object('n', g)) FROM generate_series(4, 6) g;
    DELETE FROM tap_claims WHERE tag = 'w';
END $$;
SELECT * FROM pg_temp.run_as('tap_admin', ARRAY(SELECT DISTINCT fn FROM calls));

-- The allowed calls did what they say.
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_p'), 6::bigint, 'producer and admin each enqueued three tasks');
SELECT is((SELECT count(*) FROM orch.signals WHERE name = 'tap.signal'), 2::bigint, 'producer and admin each sent a signal');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_p' AND state = 'cancelled'), 4::bigint,
          'producer and admin each cancelled one by id and one by a filter');
SELECT is((SELECT array_agg(DISTINCT h.actor || ':' || h.note ORDER BY h.actor || ':' || h.note)
             FROM orch.tasks t, orch_history(t.id) h WHERE t.queue = 'tap_p' AND h.to_state = 'cancelled'),
          ARRAY['tap_admin:by role', 'tap_producer:by role'], 'the cancellations are audited with the actor and the reason');
SELECT is((SELECT count(*) FROM orch.attempts WHERE outcome = 'released' AND task_id IN (SELECT id FROM orch.tasks WHERE queue = 'tap_w')),
          2::bigint, 'worker and admin each released a task');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_w' AND progress = '{"pct": 2}'), 2::bigint,
          'worker and admin each reported progress');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_dl' AND retry_of IS NOT NULL), 1::bigint,
          'the admin re-drove a dead letter by a filter (orch_retry_where)');
SELECT is((SELECT array_agg(state ORDER BY id) FROM orch.runs WHERE definition = 'tap_bulk'),
          ARRAY['canceled', 'canceled'], 'producer and admin each cancelled a run by a filter');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_w' AND state = 'completed'), 2::bigint, 'worker and admin each completed one');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_w' AND state = 'failed'), 2::bigint, 'worker and admin each failed one');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_a' AND resume_data IS NOT NULL), 2::bigint, 'approver and admin each approved one');
SELECT is((SELECT count(*) FROM orch.queues WHERE name = 'tap_new'), 0::bigint, 'the admin created and dropped a queue');
SELECT is((SELECT count(*) FROM pg_trigger WHERE tgrelid = 'tap_doors'::regclass AND NOT tgisinternal), 1::bigint, 'the admin attached a state machine');
SELECT is((SELECT count(*) FROM orch.events WHERE actor = 'forger' OR note = 'rewritten'), 0::bigint, 'no forged or rewritten event');
SELECT is((SELECT array_agg(status ORDER BY idempotency_key) FROM orch_commands WHERE kind = 'tap.kind'),
          ARRAY['succeeded', 'succeeded'], 'producer and admin each recorded a command, worker and admin recorded results');
SELECT is((SELECT count(*) FROM orch.tasks WHERE queue = 'tap_w' AND retry_of IS NOT NULL), 2::bigint,
          'the admin re-drove both dead letters (orch_retry, orch_reprocess)');
SELECT is((SELECT count(*) FROM orch.concurrency_limits WHERE queue = 'tap_q'), 1::bigint, 'the admin set a concurrency limit');
SELECT is((SELECT weight FROM orch.fair_weights WHERE queue = 'tap_q' AND fkey = 'tap-tenant'), 2, 'the admin set a fairness weight');
SELECT is((SELECT string_agg(version || ':' || status, ',' ORDER BY version) FROM orch.definitions WHERE name = 'tap_wf2'),
          '1:deprecated', 'the admin defined, published and deprecated a workflow (once: the others were refused)');
SELECT is((SELECT array_agg(created_by || ':' || state ORDER BY created_by) FROM orch.runs WHERE input = '{"by": "role"}'),
          ARRAY['tap_admin:canceled', 'tap_producer:canceled'], 'producer and admin each started a run and cancelled it');
SELECT is((SELECT array_agg(actor || ':' || reason_code ORDER BY actor, reason_code) FROM orch.events
            WHERE entity = 'run' AND reason_code IN ('paused', 'resumed')),
          ARRAY['tap_admin:paused', 'tap_admin:resumed', 'tap_producer:paused', 'tap_producer:resumed'],
          'producer and admin each paused and resumed a run');
SELECT is((SELECT array_agg(actor || ':' || approved ORDER BY actor, approved) FROM orch.approvals),
          ARRAY['tap_admin:false', 'tap_admin:true', 'tap_approver:false', 'tap_approver:true'],
          'approver and admin each approved and rejected a run');
SELECT is((SELECT string_agg(state, ',' ORDER BY id) FROM orch.runs WHERE input ? 'n'),
          'succeeded,failed,succeeded,failed', 'the approved runs succeeded, the rejected ones failed');
SELECT is((SELECT count(*) FROM orch.runs WHERE retry_of IS NOT NULL), 1::bigint, 'the admin retried the failed run');
SELECT is((SELECT count(*) FROM orch.schedules WHERE name LIKE 'tap\_s\_%') || ' ' || (SELECT count(*) FROM orch.queues WHERE name = 'tap_sq'),
          '0 1', 'producer and admin each scheduled, paused, resumed and unscheduled (the target''s queue stays)');

SELECT * FROM finish();
ROLLBACK;
