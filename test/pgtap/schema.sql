-- schema: the tables of SPEC §1/§11 exist, every table carries tenant_id,
-- keys of the distributed tables include tenant_id, the lifecycle trigger is
-- in place with the built-in matrix, the workflow tables (0.4.0) have their
-- keys and C triggers (run lifecycle, definition guard), and every SECURITY
-- DEFINER function pins search_path (SPEC §10).
-- Run: pg_prove -d DB test/pgtap/schema.sql
\set QUIET 1
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS orchestrator;

BEGIN;
SELECT plan(255);

-- Tables.
SELECT has_schema('orch');
SELECT has_table('orch', t, 'table orch.' || t || ' exists')
  FROM unnest(ARRAY['queues', 'tasks', 'attempts', 'events', 'idempotency_keys',
                    'state_machines', 'state_transitions', 'concurrency_limits', 'rate_window', 'commands',
                    'tenant_bindings', 'gate_repairs', 'definitions', 'runs', 'run_steps', 'approvals',
                    'metric_state', 'metric_shard_state', 'metric_totals', 'metric_minutes', 'maintenance_log',
                    'fair_weights', 'fair_cursors', 'schedules', 'signals']) t;
SELECT has_view(v, 'view ' || v || ' exists')
  FROM unnest(ARRAY['orch_tasks', 'orch_events', 'orch_attempts', 'orch_queues', 'orch_dead_letters', 'orch_commands',
                    'orch_tenant_bindings', 'orch_definitions', 'orch_runs', 'orch_run_steps',
                    'orch_queue_stats', 'orch_error_stats', 'orch_durations', 'orch_review_queue',
                    'orch_maintenance_log', 'orch_schedules', 'orch_signals']) v;
SELECT has_sequence('orch', s, 'sequence orch.' || s || ' exists')
  FROM unnest(ARRAY['runs_id_seq', 'run_steps_done_seq', 'maintenance_log_id_seq', 'signals_id_seq']) s;

-- Every table carries tenant_id text NOT NULL DEFAULT 'default' (SPEC §1);
-- orch.tenant_bindings (0.4.0) names a tenant in every row, without a default;
-- a queue (0.8.0) records the tenant of the bound role whose enqueue created
-- it ('default' for an unbound role).
SELECT has_column('orch', c.relname, 'tenant_id', 'orch.' || c.relname || ' has tenant_id')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'orch' AND c.relkind IN ('r', 'p') AND NOT (c.relispartition AND c.relname !~ '_default$') ORDER BY c.relname;
SELECT col_type_is('orch', c.relname, 'tenant_id', 'text', 'orch.' || c.relname || '.tenant_id is text')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'orch' AND c.relkind IN ('r', 'p') AND NOT (c.relispartition AND c.relname !~ '_default$') ORDER BY c.relname;
SELECT col_not_null('orch', c.relname, 'tenant_id', 'orch.' || c.relname || '.tenant_id is NOT NULL')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'orch' AND c.relkind IN ('r', 'p') AND NOT (c.relispartition AND c.relname !~ '_default$') ORDER BY c.relname;
SELECT col_default_is('orch', c.relname, 'tenant_id', 'default'::text, 'orch.' || c.relname || '.tenant_id defaults to ''default''')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'orch' AND c.relkind IN ('r', 'p') AND NOT (c.relispartition AND c.relname !~ '_default$') AND c.relname NOT IN ('tenant_bindings', 'queues') ORDER BY c.relname;
SELECT col_default_is('orch', 'queues', 'tenant_id', $$COALESCE((orch_caller_tenants())[1], 'default'::text)$$,
                      'orch.queues.tenant_id defaults to the creating role''s first tenant, else ''default''');
SELECT col_hasnt_default('orch', 'tenant_bindings', 'tenant_id', 'orch.tenant_bindings.tenant_id has no default (a binding names its tenant)');
SELECT col_is_pk('orch', 'tenant_bindings', ARRAY['role', 'tenant_id'], 'orch.tenant_bindings is keyed by (role, tenant_id)');

-- Keys of the distributed tables include tenant_id (SPEC §11); the small
-- reference tables (queues, state_machines, state_transitions,
-- concurrency_limits, tenant_bindings, gate_repairs, the workflow
-- definitions, which all tenants share under tenant 'default', and the
-- metrics fold's state and the maintenance log (0.5.0), which are about the
-- whole installation, and the fold state of each shard on Citus (0.8.0),
-- which stays on its node), and the fairness weights and cursors of the
-- queues (0.8.0), are exempt; so are the cron schedules (0.8.0), which are
-- refused with the tables distributed (they key on tenant_id all the same).
-- gate_repairs, a reference table, still carries tenant_id in its key
-- (a deferred key decision is per tenant); so does definitions.
-- (the history's partitions, 0.8.0, are in it: they carry the keys; so are
-- the signals of runs, 0.8.0, which orch_distribute leaves on the
-- coordinator: orch_signal is refused on Citus)
CREATE TEMP VIEW dist_tables AS
SELECT c.oid, c.relname::text AS name, c.relispartition AS partition
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'orch' AND c.relkind IN ('r', 'p') AND NOT (c.relispartition AND c.relname !~ '_default$')
   AND c.relname NOT IN ('queues', 'state_machines', 'state_transitions', 'concurrency_limits', 'tenant_bindings',
                         'gate_repairs', 'definitions', 'metric_state', 'metric_shard_state', 'maintenance_log',
                         'fair_weights', 'fair_cursors', 'schedules');
SELECT is((SELECT array_agg(name ORDER BY name) FROM dist_tables WHERE NOT partition),
          ARRAY['approval_refs', 'approvals', 'attempts', 'commands', 'events', 'idempotency_keys', 'metric_minutes',
                'metric_totals', 'rate_window', 'run_keys', 'run_steps', 'runs', 'signals', 'tasks'],
          'the tenant tables are approval_refs, approvals, attempts, commands, events, idempotency_keys, metric_minutes, metric_totals, rate_window, run_keys, run_steps, runs, signals, tasks');
SELECT has_pk('orch', t, 'orch.' || t || ' has a primary key')
  FROM unnest(ARRAY['attempts_default', 'commands', 'events_default', 'idempotency_keys', 'tasks', 'runs_default',
                    'run_steps_default', 'approvals_default', 'run_keys', 'approval_refs', 'signals_default']) t;
-- the history (0.8.0): partitioned by time, each partition with its own
-- keys; runs, their steps and approvals (0.8.0) by run id
SELECT is((SELECT array_agg(c.relname || ' ' || pg_get_partkeydef(c.oid) ORDER BY c.relname)
             FROM pg_class c WHERE c.relnamespace = 'orch'::regnamespace AND c.relkind = 'p'),
          ARRAY['approvals RANGE (run_id)', 'attempts RANGE (finished_at)', 'events RANGE (at)',
                'run_steps RANGE (run_id)', 'runs RANGE (id)', 'signals RANGE (run_id)'],
          'orch.events and orch.attempts are partitioned by time, orch.runs, orch.run_steps, orch.approvals and orch.signals by run id, and no other table');
SELECT col_is_pk('orch', t, ARRAY['id', 'tenant_id'], 'orch.' || t || ' is keyed by (id, tenant_id)')
  FROM unnest(ARRAY['attempts_default', 'events_default']) t;
SELECT col_is_pk('orch', 'tasks', ARRAY['id', 'tenant_id'], 'orch.tasks is keyed by (id, tenant_id)');
SELECT col_is_pk('orch', 'runs_default', ARRAY['id', 'tenant_id'], 'orch.runs_default is keyed by (id, tenant_id)');
SELECT col_is_pk('orch', 'run_steps_default', ARRAY['run_id', 'step_id', 'tenant_id'], 'orch.run_steps_default is keyed by (run_id, step_id, tenant_id)');
SELECT col_is_pk('orch', 'approvals_default', ARRAY['approval_ref', 'tenant_id'], 'orch.approvals_default is keyed by (approval_ref, tenant_id)');
SELECT col_is_pk('orch', 'signals_default', ARRAY['run_id', 'id', 'tenant_id'], 'orch.signals_default is keyed by (run_id, id, tenant_id)');
SELECT col_is_pk('orch', 'run_keys', ARRAY['tenant_id', 'idempotency_key'], 'orch.run_keys is keyed by (tenant_id, idempotency_key): one run per key across the partitions of orch.runs');
SELECT col_is_pk('orch', 'approval_refs', ARRAY['approval_ref', 'tenant_id'], 'orch.approval_refs is keyed by (approval_ref, tenant_id): a reference is single-use across the partitions of orch.approvals');
SELECT col_is_pk('orch', 'gate_repairs', ARRAY['queue', 'key', 'tenant_id'], 'orch.gate_repairs is keyed by (queue, key, tenant_id)');
SELECT col_is_pk('orch', 'definitions', ARRAY['name', 'version', 'tenant_id'], 'orch.definitions is keyed by (name, version, tenant_id)');
SELECT col_is_pk('orch', 'schedules', ARRAY['tenant_id', 'name'], 'orch.schedules is keyed by (tenant_id, name): one name per tenant');
SELECT is(
    (SELECT coalesce(array_agg(d.name || '.' || con.conname ORDER BY 1), '{}')
       FROM dist_tables d JOIN pg_constraint con ON con.conrelid = d.oid
      WHERE con.contype IN ('p', 'u', 'f', 'x')
        AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                         WHERE a.attrelid = d.oid AND a.attname = 'tenant_id' AND a.attnum = ANY (con.conkey))),
    '{}'::text[], 'every primary key, unique, exclusion and foreign key constraint of a distributed table includes tenant_id');
SELECT is(
    (SELECT coalesce(array_agg(i.indexrelid::regclass::text ORDER BY 1), '{}')
       FROM dist_tables d JOIN pg_index i ON i.indrelid = d.oid
      WHERE i.indisunique
        AND NOT EXISTS (SELECT 1 FROM pg_attribute a
                         WHERE a.attrelid = d.oid AND a.attname = 'tenant_id' AND a.attnum = ANY (i.indkey))),
    '{}'::text[], 'every unique index of a distributed table includes tenant_id');
SELECT is(
    (SELECT coalesce(array_agg(con.conrelid::regclass::text || '.' || con.conname ORDER BY 1), '{}')
       FROM pg_constraint con JOIN dist_tables d ON d.oid = con.confrelid
      WHERE con.contype = 'f'),
    '{}'::text[], 'no foreign key references a distributed table without tenant_id (none at all in 0.1.0)');

-- The lifecycle trigger and the built-in machine.
SELECT has_trigger('orch', 'tasks', 'tasks_lifecycle', 'orch.tasks has the lifecycle trigger');
SELECT trigger_is('orch', 'tasks', 'tasks_lifecycle', 'public', 'orch_state_machine_trigger',
                  'the lifecycle trigger calls orch_state_machine_trigger');
SELECT ok((SELECT (tgtype & 2) <> 0 AND (tgtype & 1) <> 0 AND (tgtype & 4) <> 0 AND (tgtype & 16) <> 0
             FROM pg_trigger WHERE tgrelid = 'orch.tasks'::regclass AND tgname = 'tasks_lifecycle'),
          'the lifecycle trigger is BEFORE INSERT OR UPDATE FOR EACH ROW');
SELECT is((SELECT lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid = 'orch_state_machine_trigger()'::regprocedure),
          'c'::name, 'the lifecycle trigger is written in C');
SELECT set_eq(
    $$SELECT from_state, to_state FROM orch.state_transitions WHERE machine = 'task'$$,
    $$VALUES (NULL, 'received'), (NULL, 'queued'), (NULL, 'failed'),
             ('received', 'received'), ('received', 'queued'), ('received', 'failed'), ('received', 'cancelled'),
             ('queued', 'queued'), ('queued', 'executing'), ('queued', 'failed'), ('queued', 'cancelled'),
             ('executing', 'executing'), ('executing', 'awaiting_tool'), ('executing', 'awaiting_user_confirmation'),
             ('executing', 'completed'), ('executing', 'failed'), ('executing', 'cancelled'),
             ('awaiting_tool', 'awaiting_tool'), ('awaiting_tool', 'executing'), ('awaiting_tool', 'failed'),
             ('awaiting_tool', 'cancelled'),
             ('awaiting_user_confirmation', 'awaiting_user_confirmation'), ('awaiting_user_confirmation', 'executing'),
             ('awaiting_user_confirmation', 'failed'), ('awaiting_user_confirmation', 'cancelled'),
             ('completed', 'completed'), ('failed', 'failed'), ('cancelled', 'cancelled')$$,
    'the built-in task machine is exactly the task state matrix');
SELECT is((SELECT builtin FROM orch.state_machines WHERE name = 'task'), true, 'the task machine is built in');

-- The workflow triggers (0.4.0): the run lifecycle and the definition guard, in C.
SELECT has_trigger('orch', 'runs', 'runs_lifecycle', 'orch.runs has the run lifecycle trigger');
SELECT trigger_is('orch', 'runs', 'runs_lifecycle', 'public', 'orch_run_lifecycle',
                  'the run lifecycle trigger calls orch_run_lifecycle');
SELECT ok((SELECT (tgtype & 2) <> 0 AND (tgtype & 1) <> 0 AND (tgtype & 4) <> 0 AND (tgtype & 16) <> 0 AND (tgtype & 8) = 0
             FROM pg_trigger WHERE tgrelid = 'orch.runs'::regclass AND tgname = 'runs_lifecycle'),
          'the run lifecycle trigger is BEFORE INSERT OR UPDATE FOR EACH ROW');
SELECT has_trigger('orch', 'definitions', 'definitions_guard', 'orch.definitions has the guard trigger');
SELECT trigger_is('orch', 'definitions', 'definitions_guard', 'public', 'orch_definitions_guard',
                  'the definition guard calls orch_definitions_guard');
SELECT ok((SELECT (tgtype & 2) <> 0 AND (tgtype & 1) <> 0 AND (tgtype & 8) <> 0 AND (tgtype & 16) <> 0 AND (tgtype & 4) = 0
             FROM pg_trigger WHERE tgrelid = 'orch.definitions'::regclass AND tgname = 'definitions_guard'),
          'the definition guard is BEFORE UPDATE OR DELETE FOR EACH ROW');
SELECT ok((SELECT (tgtype & 2) <> 0 AND (tgtype & 1) = 0 AND (tgtype & 32) <> 0
             FROM pg_trigger WHERE tgrelid = 'orch.definitions'::regclass AND tgname = 'definitions_guard_truncate'),
          'the definition guard also fires BEFORE TRUNCATE (for each statement)');
SELECT is((SELECT array_agg(lanname::text ORDER BY p.proname) FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.oid IN ('orch_run_lifecycle()'::regprocedure, 'orch_definitions_guard()'::regprocedure)),
          ARRAY['c', 'c'], 'the run lifecycle and the definition guard are written in C');

-- SECURITY DEFINER functions pin search_path (pg_catalog first, pg_temp last).
CREATE TEMP VIEW ext_functions AS
SELECT p.oid, p.oid::regprocedure::text AS sig, p.prosecdef, p.proconfig
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator';
SELECT cmp_ok((SELECT count(*) FROM ext_functions WHERE prosecdef), '>', 0::bigint,
              'the extension has SECURITY DEFINER functions');
SELECT is(
    (SELECT coalesce(array_agg(sig ORDER BY sig), '{}') FROM ext_functions f
      WHERE prosecdef AND sig <> 'orch_state_machine_trigger()'
        AND NOT EXISTS (SELECT 1 FROM unnest(f.proconfig) c
                         WHERE c ~ '^search_path=pg_catalog(,|$)' AND c ~ '[= ,]pg_temp$')),
    '{}'::text[], 'every SECURITY DEFINER function pins search_path to pg_catalog, ..., pg_temp');
-- The row trigger pins it in C around the SQL it runs for user tables (0.6.0:
-- a function-level SET cost a GUC save and restore per task row written);
-- search_path.sql's hijack run fires it on a user table.
SELECT is((SELECT proconfig FROM ext_functions WHERE sig = 'orch_state_machine_trigger()'), NULL::text[],
          'the lifecycle row trigger has no function-level SET (it pins search_path in C)');
SELECT is(
    (SELECT coalesce(array_agg(sig ORDER BY sig), '{}') FROM ext_functions f
      WHERE prosecdef
        AND EXISTS (SELECT 1 FROM unnest(f.proconfig) c WHERE c ~ '^search_path=.*\m(public|"\$user")\M')),
    '{}'::text[], 'no SECURITY DEFINER function puts public or $user on its search_path');

-- No JIT inside the extension's functions (0.6.0): a generic plan is costed
-- without its LIMIT, and with a large backlog it crossed jit_above_cost.
-- Trigger functions run under the setting of the function that fires them;
-- the per-row helpers plan nothing.
SELECT is(
    (SELECT coalesce(array_agg(sig ORDER BY sig), '{}') FROM ext_functions f
      WHERE (SELECT prorettype FROM pg_proc WHERE oid = f.oid) <> 'trigger'::regtype
        AND sig NOT IN ('orch.tenant_visible(text)', 'orch.caller_is_admin()', 'orch.histogram_le(double precision)',
                        'orch.histogram_quantile(double precision,text[],bigint[])')
        AND NOT ('jit=off' = ANY (coalesce(f.proconfig, '{}')))),
    '{}'::text[], 'every function of the extension but the triggers and per-row helpers runs with jit = off');
SELECT is((SELECT count(*) FROM ext_functions WHERE 'jit=off' = ANY (coalesce(proconfig, '{}'))) >= 50, true,
          'the API functions run with jit = off');

-- The extension is not relocatable.  It does not need shared_preload_libraries
-- (every node of the TAP tests, t/*.pl, runs without it); the clusters of
-- scripts/setup.sh and of these tests preload it, for the wake-up of claims
-- that wait.
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'orchestrator'), false, 'the extension is not relocatable');
SELECT ok(current_setting('shared_preload_libraries') ~ 'orchestrator', 'the test cluster preloads the library, as scripts/setup.sh does');

-- The roles exist and are not login roles.
SELECT has_role(r, r || ' exists') FROM unnest(ARRAY['orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader']) r;
SELECT is((SELECT count(*) FROM pg_roles WHERE rolname LIKE 'orch\_%' AND rolname IN ('orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader') AND NOT rolcanlogin), 5::bigint, 'the orch roles cannot log in');

-- 0.8.0: a task's progress (kept across attempts, no default), the
-- worker's lease calls and the bulk actions, with their signatures.
SELECT col_type_is('orch', 'tasks', 'progress', 'jsonb', 'orch.tasks.progress is jsonb');
SELECT col_is_null('orch', 'tasks', 'progress', 'orch.tasks.progress is nullable');
SELECT col_hasnt_default('orch', 'tasks', 'progress', 'orch.tasks.progress has no default');
SELECT has_column('orch_tasks', 'progress', 'orch_tasks shows the progress');
SELECT function_returns(f, args, ret, format('%s(%s) returns %s', f, array_to_string(args, ', '), ret))
  FROM (VALUES
    ('orch_heartbeat', ARRAY['bigint', 'uuid', 'interval'], 'text'),
    ('orch_heartbeat', ARRAY['bigint', 'uuid', 'interval', 'jsonb'], 'setof record'),
    ('orch_progress', ARRAY['bigint', 'uuid', 'jsonb'], 'void'),
    ('orch_release', ARRAY['bigint', 'uuid', 'interval'], 'text'),
    ('orch_cancel_where', ARRAY['jsonb', 'text', 'integer'], 'setof record'),
    ('orch_retry_where', ARRAY['jsonb', 'integer'], 'setof record'),
    ('orch_cancel_runs_where', ARRAY['jsonb', 'text', 'integer'], 'setof record')) AS v(f, args, ret);
SELECT is(pg_get_function_result(oid), r, proname || ': ' || r)
  FROM pg_proc p, (VALUES
    ('orch_heartbeat(bigint,uuid,interval,jsonb)', 'TABLE(state text, lease_expires_at timestamp with time zone)'),
    ('orch_cancel_where(jsonb,text,integer)', 'TABLE(task_id bigint, state text)'),
    ('orch_retry_where(jsonb,integer)', 'TABLE(task_id bigint, new_task_id bigint)'),
    ('orch_cancel_runs_where(jsonb,text,integer)', 'TABLE(run_id bigint, state text)')) AS v(sig, r)
 WHERE p.oid = v.sig::regprocedure;
SELECT is(pg_get_function_arguments(oid), a, proname || ' defaults: ' || a)
  FROM pg_proc p, (VALUES
    ('orch_release(bigint,uuid,interval)', 'task_id bigint, lease_token uuid, delay interval DEFAULT NULL::interval'),
    ('orch_cancel_where(jsonb,text,integer)', 'filter jsonb, reason text DEFAULT NULL::text, max integer DEFAULT 1000'),
    ('orch_retry_where(jsonb,integer)', 'filter jsonb, max integer DEFAULT 1000'),
    ('orch_cancel_runs_where(jsonb,text,integer)', 'filter jsonb, reason text DEFAULT NULL::text, max integer DEFAULT 100')) AS v(sig, a)
 WHERE p.oid = v.sig::regprocedure;

SELECT * FROM finish();
ROLLBACK;
