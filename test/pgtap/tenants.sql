-- tenants: tenant isolation (SPEC §10, 0.4.0).  A role x function x tenant
-- matrix over every SQL-callable function of the extension: the privilege
-- outcome (42501 without EXECUTE) and, with EXECUTE, the tenant outcome
-- (own tenant works; another tenant's task is OR005, naming another tenant
-- or spanning tenants is 42501; nothing of another tenant changes).  Then
-- the views as each role sees them, lease-token secrecy, actor/label in
-- events, row-level security on the tables, the binding API itself and the
-- SUSET orchestrator.auto_create_queues.  Workflows (0.4.0): definitions are
-- shared templates (authored by unbound roles only), runs, their steps and
-- approvals are tenant data like tasks.
-- Run: pg_prove -d DB test/pgtap/tenants.sql
\set QUIET 1
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS orchestrator;

BEGIN;
SELECT plan(8380);

-- ---------------------------------------------------------------------------
-- Test roles (NOLOGIN; created in this transaction, so rolled back at the
-- end; reused when they already exist).  kind: the orch role granted; eff:
-- the tenants the role is bound to, directly or through a role it has the
-- privileges of (NULL: unrestricted).
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE tt_roles (ord int PRIMARY KEY, role name UNIQUE NOT NULL, kind text NOT NULL,
                            bind text[], eff text[]);
INSERT INTO tt_roles VALUES
    (1,  't_nobody',      'nobody',   NULL,              NULL),
    (2,  't_reader_a',    'reader',   '{ta}',            '{ta}'),
    (3,  't_reader_b',    'reader',   '{tb}',            '{tb}'),
    (4,  't_reader_u',    'reader',   NULL,              NULL),
    (5,  't_producer_a',  'producer', '{ta}',            '{ta}'),
    (6,  't_producer_b',  'producer', '{tb}',            '{tb}'),
    (7,  't_producer_u',  'producer', NULL,              NULL),
    (8,  't_producer_ab', 'producer', '{ta,tb}',         '{ta,tb}'),
    (9,  't_producer_ad', 'producer', '{default,ta}',    '{default,ta}'),
    (10, 't_worker_a',    'worker',   '{ta}',            '{ta}'),
    (11, 't_worker_b',    'worker',   '{tb}',            '{tb}'),
    (12, 't_worker_u',    'worker',   NULL,              NULL),
    (13, 't_worker_ab',   'worker',   '{ta,tb}',         '{ta,tb}'),
    (14, 't_worker_g',    'worker',   NULL,              '{ta}'),   -- through g_tenant_a
    (15, 't_approver_a',  'approver', '{ta}',            '{ta}'),
    (16, 't_approver_b',  'approver', '{tb}',            '{tb}'),
    (17, 't_approver_u',  'approver', NULL,              NULL),
    (18, 't_admin_a',     'admin',    '{ta}',            '{ta}'),
    (19, 't_admin_b',     'admin',    '{tb}',            '{tb}'),
    (20, 't_admin_u',     'admin',    NULL,              NULL);
GRANT SELECT ON tt_roles TO PUBLIC;

DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT role FROM tt_roles
             UNION ALL VALUES ('g_tenant_a'::name), ('t_spare'), ('t_spare_bound'), ('t_super') LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.role) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r.role);
        END IF;
    END LOOP;
    ALTER ROLE t_super SUPERUSER;
    FOR r IN SELECT role, kind FROM tt_roles WHERE kind <> 'nobody' LOOP
        EXECUTE format('GRANT %I TO %I', 'orch_' || r.kind, r.role);
    END LOOP;
    GRANT g_tenant_a TO t_worker_g, t_super;
    GRANT orch_reader TO t_spare;
    -- one table per role for orch_attach_state_machine, owned by that role
    FOR r IN SELECT role FROM tt_roles LOOP
        EXECUTE format('CREATE TABLE %I (id int PRIMARY KEY, status text)', 'tt_doors_' || r.role);
        EXECUTE format('ALTER TABLE %I OWNER TO %I', 'tt_doors_' || r.role, r.role);
    END LOOP;
END $$;

-- ---------------------------------------------------------------------------
-- 1. The binding API (as the superuser, who is never bound).
-- ---------------------------------------------------------------------------
SELECT is((SELECT array_agg(orch_bind_tenant(r.role, b) ORDER BY r.ord, b)
             FROM tt_roles r, unnest(r.bind) b),
          array_fill(true, ARRAY[(SELECT count(*)::int FROM tt_roles r, unnest(r.bind) b)]),
          'orch_bind_tenant returns true for every new binding');
SELECT is(orch_bind_tenant('g_tenant_a', 'ta'), true, 'a group role can be bound');
SELECT is(orch_bind_tenant('t_spare_bound', 'ta'), true, 'bind t_spare_bound to ta');
SELECT is(orch_bind_tenant('t_spare_bound', 'tb'), true, 'bind t_spare_bound to tb');
SELECT is(orch_bind_tenant('t_worker_a', 'ta'), false, 'binding again returns false and changes nothing');
SELECT is(orch_unbind_tenant('t_worker_a', 'tz'), false, 'unbinding a binding that does not exist returns false');
SELECT throws_ok($$SELECT orch_bind_tenant('t_worker_a', '')$$, '22023', NULL, 'an empty tenant is 22023');
SELECT throws_ok($$SELECT orch_unbind_tenant('t_worker_a', '')$$, '22023', NULL, 'an empty tenant is 22023 (unbind)');
SELECT throws_ok($$SELECT orch_bind_tenant('t_no_such_role', 'ta')$$, '42704', NULL, 'an unknown role is 42704');
SELECT throws_ok($$SELECT orch_unbind_tenant('t_no_such_role', 'ta')$$, '42704', NULL, 'an unknown role is 42704 (unbind)');
SELECT throws_ok($$SELECT orch_bind_tenant('t_super', 'ta')$$, '22023', NULL, 'binding a superuser is 22023');
SELECT throws_ok($$SELECT orch_bind_tenant('postgres', 'ta')$$, '22023', NULL, 'binding the bootstrap superuser is 22023');
SELECT throws_ok($$SELECT orch_bind_tenant(NULL, 'ta')$$, '22004', NULL, 'a NULL role is 22004');
SELECT throws_ok($$SELECT orch_bind_tenant('t_worker_a', NULL)$$, '22004', NULL, 'a NULL tenant is 22004');
SELECT set_eq($$SELECT role::text, tenant_id FROM orch_tenant_bindings$$,
              $$SELECT r.role::text, b FROM tt_roles r, unnest(r.bind) b
                UNION ALL VALUES ('g_tenant_a', 'ta'), ('t_spare_bound', 'ta'), ('t_spare_bound', 'tb')$$,
              'orch_tenant_bindings lists exactly the bindings');
SELECT is((SELECT count(*) FROM orch.history WHERE entity = 'tenant_binding' AND reason_code = 'tenant_bound'
              AND actor = 'postgres'),
          (SELECT count(*) FROM orch.tenant_bindings),
          'every new binding is audited (one tenant_bound event each, actor = the binding role)');
SELECT is(orch_caller_tenants(), NULL, 'the superuser is unrestricted (orch_caller_tenants() is NULL)');

-- Effective tenants, as each role sees them.
CREATE FUNCTION pg_temp.as_role(r name, q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE res text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q INTO res;
    RESET ROLE;
    RETURN coalesce(res, '<null>');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;   -- the subtransaction's abort undid SET LOCAL ROLE
END $$;
-- as_role_msg(role, sql): 'ok', or 'SQLSTATE: message'
CREATE FUNCTION pg_temp.as_role_msg(r name, q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE q;
    RESET ROLE;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- as_session(session user, role, sql): runs sql in a session of that user
-- (SET SESSION AUTHORIZATION) after SET ROLE role (when not NULL), then
-- rolls it back; its first value or the SQLSTATE.
CREATE FUNCTION pg_temp.as_session(sess name, r name, q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE res text;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL SESSION AUTHORIZATION %I', sess);
        IF r IS NOT NULL THEN
            EXECUTE format('SET LOCAL ROLE %I', r);
        END IF;
        EXECUTE q INTO res;
        res := coalesce(res, '<null>');
        RAISE EXCEPTION 'roll back' USING ERRCODE = 'TT001';
    EXCEPTION
        WHEN SQLSTATE 'TT001' THEN NULL;
        WHEN OTHERS THEN res := SQLSTATE;
    END;
    RETURN res;
END $$;
SELECT is(pg_temp.as_role(role, 'SELECT orch_caller_tenants()::text'),
          coalesce(eff::text, '<null>'),
          format('orch_caller_tenants() of %s is %s', role, coalesce(eff::text, 'NULL (unrestricted)')))
  FROM tt_roles WHERE kind <> 'nobody' ORDER BY ord;
SELECT is(pg_temp.as_role('t_nobody', 'SELECT orch_caller_tenants()::text'), '42501',
          'a role without orch_reader may not call orch_caller_tenants');
SELECT is(pg_temp.as_role('t_super', 'SELECT orch_caller_tenants()::text'), '<null>',
          'a superuser that is a member of a bound role is still unrestricted');
SELECT is(pg_temp.as_role('t_spare_bound', 'SELECT orch.tenant_visible(''ta'')::text'), '42501',
          'orch.tenant_visible needs orch_reader');

-- ---------------------------------------------------------------------------
-- 2. Fixtures, as the superuser: tasks of tenants ta and tb (and default) in
--    every waiting state, commands, dead letters, expired leases, delayed
--    work, idempotency keys and rate windows.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE fx (name text, tenant text, task_id bigint, token uuid, PRIMARY KEY (name, tenant));
GRANT SELECT ON fx TO PUBLIC;
-- mk(name, state, tenant, queue): one task of the tenant in that state,
-- reached through the API (each (queue, tenant) holds one claimable task).
CREATE FUNCTION pg_temp.mk(nm text, st text, ten text, q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE c record; tid bigint; tok uuid; got text;
BEGIN
    tid := orch_enqueue(q, jsonb_build_object('fx', nm, 'tenant', ten), tenant => ten);
    IF st <> 'queued' THEN
        SELECT d.task_id, d.lease_token INTO c FROM orch_dequeue(q, 'fx-worker', 1, '1 hour', tenant => ten) d;
        IF c.task_id IS DISTINCT FROM tid THEN
            RAISE EXCEPTION 'setup: claimed % instead of %', c.task_id, tid;
        END IF;
        tok := c.lease_token;
        CASE st
            WHEN 'executing' THEN NULL;
            WHEN 'awaiting_tool' THEN PERFORM orch_await_tool(tid, tok, 'fx-tool', '{}');
            WHEN 'awaiting_user_confirmation' THEN PERFORM orch_await_confirmation(tid, tok, '{"q": "ok?"}');
            WHEN 'completed' THEN PERFORM orch_complete(tid, tok, '{"done": true}');
            WHEN 'failed' THEN PERFORM orch_fail(tid, tok, 'NON_RETRYABLE', 'fx dead letter');
        END CASE;
    END IF;
    SELECT t.state INTO got FROM orch.tasks t WHERE t.id = tid;
    IF got IS DISTINCT FROM st THEN
        RAISE EXCEPTION 'setup: task % is % instead of %', tid, got, st;
    END IF;
    INSERT INTO fx VALUES (nm, ten, tid, tok);
    RETURN tid;
END $$;
CREATE FUNCTION pg_temp.fx(nm text, ten text) RETURNS bigint LANGUAGE sql AS
    $$ SELECT task_id FROM fx WHERE name = nm AND tenant = ten $$;
CREATE FUNCTION pg_temp.tok(nm text, ten text) RETURNS uuid LANGUAGE sql AS
    $$ SELECT token FROM fx WHERE name = nm AND tenant = ten $$;

DO $$
DECLARE t text; cid bigint;
BEGIN
    PERFORM orch_create_queue('q_main');
    PERFORM orch_create_queue('q_claim');
    PERFORM orch_create_queue('q_new_tasks');
    PERFORM orch_create_queue('q_empty');
    PERFORM orch_create_queue('q_paused');
    PERFORM orch_pause_queue('q_paused');
    PERFORM orch_create_queue('q_rate', '{"rate_limit": {"count": 1000, "per": "1 hour"}}');
    PERFORM orch_create_state_machine('tt_door', '{"closed": ["open"], "open": ["closed"]}');
    PERFORM orch_set_concurrency_limit('q_main', 'tt-key', 2);
    FOREACH t IN ARRAY ARRAY['ta', 'tb'] LOOP
        PERFORM pg_temp.mk('queued', 'queued', t, 'fx_queued');
        PERFORM pg_temp.mk('exec', 'executing', t, 'fx_exec');
        PERFORM pg_temp.mk('tool', 'awaiting_tool', t, 'fx_tool');
        PERFORM pg_temp.mk('conf', 'awaiting_user_confirmation', t, 'fx_conf');
        PERFORM pg_temp.mk('dead', 'failed', t, 'fx_dead');
        PERFORM pg_temp.mk('done', 'completed', t, 'fx_done');
        -- lazily recovered by a claim of q_exp: executing, lease expired
        PERFORM pg_temp.mk('expired', 'executing', t, 'q_exp');
        -- delayed work of q_delay, due now but not yet let in
        PERFORM orch_enqueue('q_delay', jsonb_build_object('tenant', t), tenant => t,
                             run_at => now() + interval '1 hour');
        -- dead letters for orch_reprocess
        PERFORM pg_temp.mk('dl', 'failed', t, 'q_dl');
        -- a pending command
        SELECT c.command_id INTO cid FROM orch_command('tt.kind', 'tt-key-' || t, '{"fx": "cmd"}', tenant => t) c;
        INSERT INTO fx VALUES ('cmd', t, cid, NULL);
        -- rate window rows
        PERFORM orch_enqueue('q_rate', '{}', owner => 'tt-owner', tenant => t);
    END LOOP;
    PERFORM pg_temp.mk('dl', 'failed', 'default', 'q_dl');
    -- claimable work of three tenants; the other tenants' tasks come first
    PERFORM orch_enqueue('q_claim', '{"n": "default"}', priority => -30);
    PERFORM orch_enqueue('q_claim', '{"n": "tb"}', priority => -20, tenant => 'tb');
    PERFORM orch_enqueue('q_claim', '{"n": "ta"}', priority => -10, tenant => 'ta');
    -- a key and a command key held by tb
    PERFORM orch_enqueue('fx_idem', '{"x": 1}', idempotency_key => 'idem-shared', tenant => 'tb');
    PERFORM orch_command('tt.kind', 'cmd-shared', '{"x": 1}', tenant => 'tb');
    -- expire the leases, make the delayed work due (raw updates by the owner)
    UPDATE orch.tasks SET lease_expires_at = now() - interval '1 minute' WHERE queue = 'q_exp';
    UPDATE orch.tasks SET run_at = now() - interval '1 minute' WHERE queue = 'q_delay';
END $$;

-- Workflow fixtures: a published definition (a task step with a
-- compensation, then a human approval), a published one to deprecate and a
-- draft to publish; per tenant, runs in every state reached through the API
-- (fx names: run_done succeeded, run_wait waiting for approval, run_exec
-- running with its step task executing (fx run_exec_task holds the task and
-- its token), run_failed failed, run_paused paused with its step task
-- queued); and a run of tb started with an idempotency key.
CREATE FUNCTION pg_temp.mk_run(nm text, st text, ten text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE rid bigint; c record; got text;
BEGIN
    rid := orch_start('tt_wf', jsonb_build_object('fx', nm, 'tenant', ten), tenant => ten);
    IF st = 'paused' THEN
        PERFORM orch_pause_run(rid);
    ELSE
        SELECT d.task_id, d.lease_token INTO c FROM orch_dequeue('q_wf', 'fx-worker', 1, '1 hour', tenant => ten) d;
        IF c.task_id IS DISTINCT FROM (SELECT t.id FROM orch.tasks t WHERE t.run_id = rid AND t.tenant_id = ten) THEN
            RAISE EXCEPTION 'setup: claimed % instead of the step task of run %', c.task_id, rid;
        END IF;
        CASE st
            WHEN 'running' THEN INSERT INTO fx VALUES (nm || '_task', ten, c.task_id, c.lease_token);
            WHEN 'failed' THEN PERFORM orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', 'fx run failure');
            ELSE PERFORM orch_complete(c.task_id, c.lease_token, '{"fx": "done"}');
        END CASE;
        IF st = 'succeeded' THEN
            PERFORM orch_approve(rid, 'gate', 'fx-ref-' || nm, 'fx-approver', 'fx');
        END IF;
    END IF;
    SELECT r.state INTO got FROM orch.runs r WHERE r.id = rid;
    IF got IS DISTINCT FROM st THEN
        RAISE EXCEPTION 'setup: run % is % instead of %', rid, got, st;
    END IF;
    INSERT INTO fx VALUES (nm, ten, rid, NULL);
    RETURN rid;
END $$;

DO $$
DECLARE t text;
BEGIN
    PERFORM orch_create_queue('q_wf');
    PERFORM orch_create_queue('q_wf_comp');
    PERFORM orch_define('tt_wf', '{"steps": [
        {"step_id": "work", "queue": "q_wf", "handler": "tt.work", "compensation": {"handler": "tt.undo", "queue": "q_wf_comp"}},
        {"step_id": "gate", "type": "human_approval", "depends_on": ["work"]}]}');
    PERFORM orch_publish('tt_wf', 1);
    PERFORM orch_define('tt_wf_old', '{"steps": [{"step_id": "s", "queue": "q_wf", "handler": "tt.old"}]}');
    PERFORM orch_publish('tt_wf_old', 1);
    PERFORM orch_define('tt_wf_draft', '{"steps": [{"step_id": "s", "queue": "q_wf", "handler": "tt.draft"}]}');
    FOREACH t IN ARRAY ARRAY['ta', 'tb'] LOOP
        PERFORM pg_temp.mk_run('run_done', 'succeeded', t);
        PERFORM pg_temp.mk_run('run_wait', 'waiting_approval', t);
        PERFORM pg_temp.mk_run('run_exec', 'running', t);
        PERFORM pg_temp.mk_run('run_failed', 'failed', t);
        PERFORM pg_temp.mk_run('run_paused', 'paused', t);
    END LOOP;
    PERFORM orch_start('tt_wf', '{"x": 1}', idempotency_key => 'run-shared', tenant => 'tb');
END $$;

SELECT is((SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id, id) FROM orch.runs),
          'ta=succeeded,ta=waiting_approval,ta=running,ta=failed,ta=paused,'
          'tb=succeeded,tb=waiting_approval,tb=running,tb=failed,tb=paused,tb=running',
          'fixture: runs of ta and tb in every state');
SELECT is((SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks
            WHERE id IN (pg_temp.fx('run_exec_task', 'ta'), pg_temp.fx('run_exec_task', 'tb'))),
          'ta=executing,tb=executing', 'fixture: the running runs'' step tasks are executing');
SELECT is((SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.approvals), 'ta,tb',
          'fixture: one approval in each tenant');

SELECT is((SELECT string_agg(tenant_id || '=' || state || '/' || (ready_at IS NOT NULL), ',' ORDER BY tenant_id)
             FROM orch.tasks WHERE queue = 'q_delay'),
          'ta=queued/false,tb=queued/false', 'fixture: the delayed tasks are due but not yet claimable');
SELECT is((SELECT string_agg(tenant_id || '=' || state || '/' || (lease_expires_at < now()), ',' ORDER BY tenant_id)
             FROM orch.tasks WHERE queue = 'q_exp'),
          'ta=executing/true,tb=executing/true', 'fixture: the q_exp leases have expired');
SELECT is((SELECT array_agg(DISTINCT tenant_id ORDER BY tenant_id) FROM orch.tasks),
          '{default,ta,tb}', 'fixture: tasks of three tenants');
-- cron schedules (0.8.0) of ta and tb: one active, one paused, one due
-- (its next slot set an hour back; a tick or a maintenance pass fires it)
SELECT orch_create_queue('tt_sq');
SELECT orch_schedule(n, '0 0 1 1 *', '{"queue": "tt_sq"}', jsonb_build_object('tenant', t))
  FROM unnest(ARRAY['ta', 'tb']) t, unnest(ARRAY['tt_sched', 'tt_paused', 'tt_due']) n;
SELECT orch_pause_schedule('tt_paused', t) FROM unnest(ARRAY['ta', 'tb']) t;
UPDATE orch.schedules SET next_fire_at = now() - interval '1 hour' WHERE name = 'tt_due';
SELECT is((SELECT string_agg(tenant_id || '=' || name || '/' || paused || '/' || (next_fire_at < now()), ',' ORDER BY tenant_id, name)
             FROM orch.schedules),
          'ta=tt_due/false/true,ta=tt_paused/true/false,ta=tt_sched/false/false,'
          'tb=tt_due/false/true,tb=tt_paused/true/false,tb=tt_sched/false/false',
          'fixture: schedules of ta and tb, active, paused and due');
-- a signal kept by each tenant's running run
DO $$ BEGIN
    PERFORM orch_signal(pg_temp.fx('run_exec', t), 'fx.signal', jsonb_build_object('t', t)) FROM unnest(ARRAY['ta', 'tb']) t;
END $$;
SELECT is((SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.signals), 'ta,tb',
          'fixture: a signal of each tenant');

-- ---------------------------------------------------------------------------
-- 3. The matrix.
-- ---------------------------------------------------------------------------
-- Which kinds of role may execute which function (README "Roles and
-- security"); admin may execute everything listed for any kind.
CREATE TEMP TABLE tt_allowed (kind text, fn text, PRIMARY KEY (kind, fn));
INSERT INTO tt_allowed
SELECT k, f FROM unnest(ARRAY['reader', 'producer', 'worker', 'approver', 'admin']) k,
       unnest(ARRAY['orch_status', 'orch_history', 'orch_queue_settings', 'orch_retry_decision',
                    'orch_caller_tenants', 'orch.tenant_visible', 'orch.caller_is_admin',
                    'orch_definition', 'orch_validate_definition', 'orch_run_status',
                    'orch_metrics_refresh', 'orch_metrics_prometheus', 'orch_duration_stats', 'orch_throughput',
                    'orch.open_tasks', 'orch.dead_letter_counts', 'orch.review_items',
                    'orch.queue_stats', 'orch.error_stats', 'orch.caller_tenants',
                    'orch.caller_queues', 'orch.caller_tasks', 'orch.caller_attempts', 'orch.caller_commands',
                    'orch.caller_dead_letters', 'orch.caller_runs', 'orch.caller_run_steps', 'orch.caller_events',
                    'orch.caller_definitions', 'orch.caller_maintenance_log',
                    'orch_task_rows', 'orch_run_rows', 'orch_run_step_rows',
                    'orch_cron_next', 'orch.caller_schedules', 'orch.caller_signals']) f
UNION ALL
SELECT k, f FROM unnest(ARRAY['producer', 'admin']) k,
       unnest(ARRAY['orch_enqueue', 'orch_enqueue_batch', 'orch_cancel', 'orch_command',
                    'orch_start', 'orch_pause_run', 'orch_resume_run', 'orch_cancel_run',
                    'orch_cancel_where', 'orch_cancel_runs_where',
                    'orch_schedule', 'orch_unschedule', 'orch_pause_schedule', 'orch_resume_schedule', 'orch_signal']) f
UNION ALL
SELECT k, f FROM unnest(ARRAY['worker', 'admin']) k,
       unnest(ARRAY['orch_dequeue', 'orch_complete', 'orch_complete_batch', 'orch_fail', 'orch_heartbeat',
                    'orch_await_tool', 'orch_await_confirmation', 'orch_resume', 'orch_command_result',
                    'orch_progress', 'orch_release']) f
UNION ALL
SELECT k, f FROM unnest(ARRAY['approver', 'admin']) k, unnest(ARRAY['orch_confirm', 'orch_approve', 'orch_reject',
                                                                  'orch_acknowledge_drift']) f
UNION ALL
SELECT 'admin', f FROM unnest(ARRAY['orch_create_queue', 'orch_configure_queue', 'orch_pause_queue',
                                    'orch_resume_queue', 'orch_drop_queue', 'orch_set_concurrency_limit',
                                    'orch_set_fairness_weight',
                                    'orch_create_state_machine', 'orch_attach_state_machine',
                                    'orch_state_machine_trigger', 'orch_maintain', 'orch_schedule_maintenance',
                                    'orch_unschedule_maintenance', 'orch_retry', 'orch_reprocess', 'orch_retry_where',
                                    'orch_bind_tenant', 'orch_unbind_tenant',
                                    'orch_define', 'orch_publish', 'orch_deprecate', 'orch_retry_run',
                                    'orch.caller_tenant_bindings', 'orch_schedule_tick']) f;

-- The cases.  class:
--   task      acts on one task/command of tenant tgt: want own / other
--   tenant    names tenant tgt: want own / other
--   implicit  no tenant named: want by the caller's effective tenants
--             (key 'ta', 'tb', 'ta,tb', 'default,ta', or '*' for
--             unrestricted; 'kind:<kind>' and 'bound' are also looked up)
--   global    administration spanning tenants: 42501 for any bound caller,
--             want '*' for an unrestricted one
--   any       no tenant involved: want '*' for everyone allowed
-- sql returns one value; chk (optional) is read as the superuser right after
-- the call.  {role} is replaced by the calling role.  The outcome is
-- '00000:<result>[|<chk>]' or the SQLSTATE raised; want is a LIKE pattern.
CREATE TEMP TABLE tt_cases (id serial PRIMARY KEY, fn text NOT NULL, class text NOT NULL, tgt text,
                            label text NOT NULL, sql text NOT NULL, chk text, want jsonb NOT NULL);
DO $$
DECLARE t text; o text; e bigint; tk uuid;
BEGIN
    FOREACH t IN ARRAY ARRAY['ta', 'tb'] LOOP
        o := CASE t WHEN 'ta' THEN 'tb' ELSE 'ta' END;
        e := pg_temp.fx('exec', t);
        tk := pg_temp.tok('exec', t);
        INSERT INTO tt_cases (fn, class, tgt, label, sql, chk, want) VALUES
        ('orch_complete', 'task', t, 'complete an executing task',
         format($q$SELECT orch_complete(%s, %L, '{"r": 1}')$q$, e, tk),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:completed|completed", "other": "OR005"}'),
        ('orch_complete_batch', 'task', t, 'complete_batch an executing task',
         format($q$SELECT orch_complete_batch(ARRAY[%s]::bigint[], ARRAY[%L]::uuid[], ARRAY['{"r": 1}']::jsonb[])$q$, e, tk),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:1|completed", "other": "OR005"}'),
        ('orch_fail', 'task', t, 'fail an executing task',
         format($q$SELECT f.state || '/' || f.reason_code FROM orch_fail(%s, %L, 'NON_RETRYABLE', 'boom') f$q$, e, tk),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:failed/non_retryable|failed", "other": "OR005"}'),
        ('orch_heartbeat', 'task', t, 'heartbeat an executing task',
         format($q$SELECT orch_heartbeat(%s, %L, '10 minutes')$q$, e, tk),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:executing|executing", "other": "OR005"}'),
        ('orch_heartbeat', 'task', t, 'heartbeat an executing task with progress',
         format($q$SELECT h.state FROM orch_heartbeat(%s, %L, '10 minutes', '{"pct": 5}') h$q$, e, tk),
         format('SELECT progress::text FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:executing|{\"pct\": 5}", "other": "OR005"}'),
        ('orch_progress', 'task', t, 'report the progress of an executing task',
         format($q$SELECT 'set' FROM orch_progress(%s, %L, '{"pct": 7}') p$q$, e, tk),
         format('SELECT progress::text FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:set|{\"pct\": 7}", "other": "OR005"}'),
        ('orch_release', 'task', t, 'release an executing task',
         format($q$SELECT orch_release(%s, %L)$q$, e, tk),
         format($q$SELECT state || '/' || reason_code || '/' || attempts FROM orch.tasks WHERE id = %s$q$, e),
         '{"own": "00000:awaiting_tool|awaiting_tool/released/0", "other": "OR005"}'),
        -- bulk calls: another tenant's rows are not matched (no rows, nothing changes)
        ('orch_cancel_where', 'task', t, 'cancel_where naming a queued task by id',
         format($q$SELECT coalesce(string_agg(c.state, ','), '') FROM orch_cancel_where(jsonb_build_object('task_ids', jsonb_build_array(%s)), 'tt bulk') c$q$,
                pg_temp.fx('queued', t)),
         format('SELECT state FROM orch.tasks WHERE id = %s', pg_temp.fx('queued', t)),
         '{"own": "00000:cancelled|cancelled", "other": "00000:|queued"}'),
        ('orch_retry_where', 'task', t, 'retry_where naming a dead letter by id',
         format($q$SELECT count(*) FROM orch_retry_where(jsonb_build_object('task_ids', jsonb_build_array(%s)))$q$, pg_temp.fx('dead', t)),
         format($q$SELECT coalesce(string_agg(tenant_id || '/' || state, ','), '') FROM orch.tasks WHERE retry_of = %s$q$, pg_temp.fx('dead', t)),
         jsonb_build_object('own', '00000:1|' || t || '/queued', 'other', '00000:0|')),
        ('orch_cancel_runs_where', 'task', t, 'cancel_runs_where naming a run waiting for approval by id',
         format($q$SELECT coalesce(string_agg(c.state, ','), '') FROM orch_cancel_runs_where(jsonb_build_object('run_ids', jsonb_build_array(%s)), 'tt bulk') c$q$,
                pg_temp.fx('run_wait', t)),
         format('SELECT state FROM orch.runs WHERE id = %s', pg_temp.fx('run_wait', t)),
         '{"own": "00000:canceled|canceled", "other": "00000:|waiting_approval"}'),
        ('orch_await_tool', 'task', t, 'park an executing task for a tool',
         format($q$SELECT orch_await_tool(%s, %L, 'tt-tool', '{"q": 1}')$q$, e, tk),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:awaiting_tool|awaiting_tool", "other": "OR005"}'),
        ('orch_await_confirmation', 'task', t, 'park an executing task for a confirmation',
         format($q$SELECT orch_await_confirmation(%s, %L, '{"q": 1}')$q$, e, tk),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:awaiting_user_confirmation|awaiting_user_confirmation", "other": "OR005"}'),
        ('orch_cancel', 'task', t, 'cancel an executing task',
         format($q$SELECT orch_cancel(%s, 'tt cancel')$q$, e),
         format('SELECT state FROM orch.tasks WHERE id = %s', e),
         '{"own": "00000:cancelled|cancelled", "other": "OR005"}'),
        ('orch_cancel', 'task', t, 'cancel a queued task',
         format($q$SELECT orch_cancel(%s, 'tt cancel')$q$, pg_temp.fx('queued', t)),
         format('SELECT state FROM orch.tasks WHERE id = %s', pg_temp.fx('queued', t)),
         '{"own": "00000:cancelled|cancelled", "other": "OR005"}'),
        ('orch_resume', 'task', t, 'resume a task awaiting a tool',
         format($q$SELECT orch_resume(%s, '{"tool": "ok"}')$q$, pg_temp.fx('tool', t)),
         format('SELECT resume_data::text FROM orch.tasks WHERE id = %s', pg_temp.fx('tool', t)),
         '{"own": "00000:awaiting_tool|{\"tool\": \"ok\"}", "other": "OR005"}'),
        ('orch_confirm', 'task', t, 'approve a task awaiting confirmation',
         format($q$SELECT orch_confirm(%s, true, 'alice', 'fine')$q$, pg_temp.fx('conf', t)),
         format($q$SELECT (resume_data->>'approved') || '/' || (resume_data->>'label') FROM orch.tasks WHERE id = %s$q$, pg_temp.fx('conf', t)),
         '{"own": "00000:awaiting_user_confirmation|true/alice", "other": "OR005"}'),
        ('orch_confirm', 'task', t, 'reject a task awaiting confirmation',
         format($q$SELECT orch_confirm(%s, false, 'alice', 'no')$q$, pg_temp.fx('conf', t)),
         format('SELECT state || ''/'' || reason_code FROM orch.tasks WHERE id = %s', pg_temp.fx('conf', t)),
         '{"own": "00000:failed|failed/confirmation_rejected", "other": "OR005"}'),
        ('orch_status', 'task', t, 'status of a queued task',
         format('SELECT state || ''/'' || tenant_id FROM orch_status(%s)', pg_temp.fx('queued', t)), NULL,
         jsonb_build_object('own', '00000:queued/' || t, 'other', 'OR005')),
        ('orch_status', 'task', t, 'status of a dead letter',
         format('SELECT state || ''/'' || reason_code FROM orch_status(%s)', pg_temp.fx('dead', t)), NULL,
         '{"own": "00000:failed/non_retryable", "other": "OR005"}'),
        ('orch_history', 'task', t, 'history of a completed task',
         format('SELECT count(*) FILTER (WHERE kind = ''event'') || ''+'' || count(*) FILTER (WHERE kind = ''attempt'') FROM orch_history(%s)', pg_temp.fx('done', t)), NULL,
         '{"own": "00000:3+1", "other": "OR005"}'),
        ('orch_retry', 'task', t, 're-drive a dead letter',
         format('SELECT orch_retry(%s)', pg_temp.fx('dead', t)),
         format('SELECT tenant_id || ''/'' || state FROM orch.tasks WHERE retry_of = %s', pg_temp.fx('dead', t)),
         jsonb_build_object('own', '00000:%|' || t || '/queued', 'other', 'OR005')),
        ('orch_command_result', 'task', t, 'record the outcome of a pending command',
         format($q$SELECT orch_command_result(%s, true, '{"ok": 1}')$q$, pg_temp.fx('cmd', t)),
         format('SELECT status FROM orch.commands WHERE id = %s', pg_temp.fx('cmd', t)),
         '{"own": "00000:succeeded|succeeded", "other": "OR005"}'),
        -- a command on behalf of another tenant's task: that task does not exist
        ('orch_command', 'task', t, 'command with task_id of a queued task (no tenant named)',
         format($q$SELECT c.replayed FROM orch_command('tt.kind', 'tt-origin-{role}', '{"n": 1}', task_id => %s) c$q$,
                pg_temp.fx('queued', t)),
         $q$SELECT origin_task_id IS NOT NULL FROM orch.commands WHERE idempotency_key = 'tt-origin-{role}'$q$,
         '{"own": "00000:false|true", "other": "OR005", "ta,tb": "42501"}');

        INSERT INTO tt_cases (fn, class, tgt, label, sql, chk, want) VALUES
        ('orch_enqueue', 'tenant', t, 'enqueue naming the tenant',
         format($q$SELECT orch_enqueue('q_new_tasks', '{"n": 1}', tenant => %L)$q$, t),
         'SELECT tenant_id || ''/'' || state FROM orch.tasks WHERE id = {result}',
         jsonb_build_object('own', '00000:%|' || t || '/queued', 'other', '42501')),
        ('orch_enqueue', 'tenant', t, 'enqueue naming the tenant, with the key tb holds',
         format($q$SELECT orch_enqueue('fx_idem', '{"x": 2}', idempotency_key => 'idem-shared', tenant => %L)$q$, t),
         'SELECT tenant_id FROM orch.tasks WHERE id = {result}',
         jsonb_build_object('own', CASE t WHEN 'ta' THEN '00000:%|ta' ELSE 'OR004' END, 'other', '42501')),
        ('orch_enqueue_batch', 'tenant', t, 'enqueue_batch naming the tenant',
         format($q$SELECT string_agg(i::text, ',') FROM orch_enqueue_batch('q_new_tasks', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], tenant => %L) i$q$, t),
         'SELECT string_agg(tenant_id, '','') FROM orch.tasks WHERE id IN ({result})',
         jsonb_build_object('own', '00000:%|' || t || ',' || t, 'other', '42501')),
        ('orch_command', 'tenant', t, 'command naming the tenant',
         format($q$SELECT c.command_id FROM orch_command('tt.kind', 'tt-new-{role}', '{"n": 1}', tenant => %L) c$q$, t),
         'SELECT c.tenant_id || ''/'' || t.tenant_id FROM orch.commands c JOIN orch.tasks t ON t.id = c.task_id WHERE c.id = {result}',
         jsonb_build_object('own', '00000:%|' || t || '/' || t, 'other', '42501')),
        ('orch_dequeue', 'tenant', t, 'dequeue naming the tenant',
         format($q$SELECT count(d.lease_token) FROM orch_dequeue('q_claim', 'w-{role}', 10, tenant => %L) d$q$, t),
         $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_claim'$q$,
         jsonb_build_object('own', '00000:1|' || CASE t WHEN 'ta' THEN 'default=queued,ta=executing,tb=queued'
                                                       ELSE 'default=queued,ta=queued,tb=executing' END,
                            'other', '42501')),
        ('orch_cancel_where', 'tenant', t, 'cancel_where naming the tenant',
         format($q$SELECT coalesce(string_agg(c.state, ','), '') FROM orch_cancel_where(jsonb_build_object('queue', 'fx_queued', 'tenant', %L)) c$q$, t),
         $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'fx_queued'$q$,
         jsonb_build_object('own', '00000:cancelled|' || CASE t WHEN 'ta' THEN 'ta=cancelled,tb=queued' ELSE 'ta=queued,tb=cancelled' END,
                            'other', '00000:|ta=queued,tb=queued')),
        ('orch_retry_where', 'tenant', t, 'retry_where naming the tenant',
         format($q$SELECT count(*) FROM orch_retry_where(jsonb_build_object('queue', 'q_dl', 'tenant', %L))$q$, t),
         $q$SELECT coalesce(string_agg(tenant_id, ',' ORDER BY tenant_id), '') FROM orch.tasks WHERE queue = 'q_dl' AND retry_of IS NOT NULL$q$,
         jsonb_build_object('own', '00000:1|' || t, 'other', '00000:0|')),
        ('orch_cancel_runs_where', 'tenant', t, 'cancel_runs_where naming the tenant',
         format($q$SELECT coalesce(string_agg(c.state, ','), '') FROM orch_cancel_runs_where(jsonb_build_object('state', '["waiting_approval"]'::jsonb, 'tenant', %L)) c$q$, t),
         $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.runs WHERE input->>'fx' = 'run_wait'$q$,
         jsonb_build_object('own', '00000:canceled|' || CASE t WHEN 'ta' THEN 'ta=canceled,tb=waiting_approval' ELSE 'ta=waiting_approval,tb=canceled' END,
                            'other', '00000:|ta=waiting_approval,tb=waiting_approval')),
        ('orch.tenant_visible', 'tenant', t, 'tenant_visible',
         format('SELECT orch.tenant_visible(%L)', t), NULL,
         '{"own": "00000:true", "other": "00000:false"}');
    END LOOP;
END $$;

INSERT INTO tt_cases (fn, class, tgt, label, sql, chk, want) VALUES
    ('orch_enqueue', 'implicit', NULL, 'enqueue without a tenant',
     $q$SELECT orch_enqueue('q_new_tasks', '{"n": 1}')$q$,
     'SELECT tenant_id FROM orch.tasks WHERE id = {result}',
     '{"ta": "00000:%|ta", "tb": "00000:%|tb", "ta,tb": "42501", "default,ta": "00000:%|default", "*": "00000:%|default"}'),
    ('orch_enqueue', 'implicit', NULL, 'enqueue without a tenant, with the key tb holds (another payload)',
     $q$SELECT orch_enqueue('fx_idem', '{"x": 2}', idempotency_key => 'idem-shared')$q$,
     'SELECT tenant_id FROM orch.tasks WHERE id = {result}',
     '{"ta": "00000:%|ta", "tb": "OR004", "ta,tb": "42501", "default,ta": "00000:%|default", "*": "00000:%|default"}'),
    ('orch_enqueue_batch', 'implicit', NULL, 'enqueue_batch without a tenant',
     $q$SELECT string_agg(i::text, ',') FROM orch_enqueue_batch('q_new_tasks', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]) i$q$,
     'SELECT string_agg(tenant_id, '','') FROM orch.tasks WHERE id IN ({result})',
     '{"ta": "00000:%|ta,ta", "tb": "00000:%|tb,tb", "ta,tb": "42501", "default,ta": "00000:%|default,default", "*": "00000:%|default,default"}'),
    ('orch_command', 'implicit', NULL, 'command without a tenant',
     $q$SELECT c.command_id FROM orch_command('tt.kind', 'tt-new-{role}', '{"n": 1}') c$q$,
     'SELECT c.tenant_id || ''/'' || t.tenant_id FROM orch.commands c JOIN orch.tasks t ON t.id = c.task_id WHERE c.id = {result}',
     '{"ta": "00000:%|ta/ta", "tb": "00000:%|tb/tb", "ta,tb": "42501", "default,ta": "00000:%|default/default", "*": "00000:%|default/default"}'),
    ('orch_command', 'implicit', NULL, 'command without a tenant, with the key tb holds (another payload)',
     $q$SELECT c.replayed || '/' || c.command_id FROM orch_command('tt.kind', 'cmd-shared', '{"x": 2}') c$q$, NULL,
     '{"ta": "00000:false/%", "tb": "OR004", "ta,tb": "42501", "default,ta": "00000:false/%", "*": "00000:false/%"}'),
    ('orch_complete_batch', 'implicit', NULL, 'complete_batch of a ta and a tb task: all or nothing',
     format($q$SELECT orch_complete_batch(ARRAY[%s, %s]::bigint[], ARRAY[%L, %L]::uuid[])$q$,
            pg_temp.fx('exec', 'ta'), pg_temp.fx('exec', 'tb'), pg_temp.tok('exec', 'ta'), pg_temp.tok('exec', 'tb')),
     $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'fx_exec'$q$,
     '{"ta": "OR005", "tb": "OR005", "ta,tb": "00000:2|ta=completed,tb=completed", "default,ta": "OR005",
       "*": "00000:2|ta=completed,tb=completed"}'),
    ('orch_dequeue', 'implicit', NULL, 'dequeue (batch 10) without a tenant',
     $q$SELECT count(d.lease_token) FROM orch_dequeue('q_claim', 'w-{role}', 10) d$q$,
     $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_claim'$q$,
     '{"ta": "00000:1|default=queued,ta=executing,tb=queued", "tb": "00000:1|default=queued,ta=queued,tb=executing",
       "ta,tb": "00000:2|default=queued,ta=executing,tb=executing",
       "default,ta": "00000:2|default=executing,ta=executing,tb=queued",
       "*": "00000:3|default=executing,ta=executing,tb=executing"}'),
    ('orch_dequeue', 'implicit', NULL, 'dequeue (batch 1) without a tenant: skips other tenants'' earlier work',
     $q$SELECT string_agg(d.payload->>'n', ',') FROM orch_dequeue('q_claim', 'w-{role}', 1) d$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:tb", "default,ta": "00000:default", "*": "00000:default"}'),
    ('orch_dequeue', 'implicit', NULL, 'dequeue recovers expired leases of its tenants only',
     $q$SELECT count(*) FROM orch_dequeue('q_exp', 'w-{role}', 10)$q$,
     $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_exp'$q$,
     '{"ta": "00000:0|ta=awaiting_tool,tb=executing", "tb": "00000:0|ta=executing,tb=awaiting_tool",
       "ta,tb": "00000:0|ta=awaiting_tool,tb=awaiting_tool", "default,ta": "00000:0|ta=awaiting_tool,tb=executing",
       "*": "00000:0|ta=awaiting_tool,tb=awaiting_tool"}'),
    ('orch_dequeue', 'implicit', NULL, 'dequeue lets in due delayed work of its tenants only',
     $q$SELECT coalesce(string_agg(d.payload->>'tenant', ','), '') FROM orch_dequeue('q_delay', 'w-{role}', 10) d$q$,
     $q$SELECT string_agg(tenant_id || '=' || state || '/' || (ready_at IS NOT NULL), ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_delay'$q$,
     '{"ta": "00000:ta|ta=executing/false,tb=queued/false", "tb": "00000:tb|ta=queued/false,tb=executing/false",
       "ta,tb": "00000:%|ta=executing/false,tb=executing/false", "default,ta": "00000:ta|ta=executing/false,tb=queued/false",
       "*": "00000:%|ta=executing/false,tb=executing/false"}'),
    ('orch_reprocess', 'implicit', NULL, 'reprocess re-drives the dead letters of its tenants only',
     $q$SELECT count(*) FROM orch_reprocess(queue => 'q_dl')$q$,
     $q$SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_dl' AND retry_of IS NOT NULL$q$,
     '{"ta": "00000:1|ta", "tb": "00000:1|tb", "*": "00000:3|default,ta,tb"}'),
    ('orch_cancel_where', 'implicit', NULL, 'cancel_where by queue cancels the tasks of its tenants only',
     $q$SELECT count(*) FROM orch_cancel_where('{"queue": "fx_queued"}')$q$,
     $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'fx_queued'$q$,
     '{"ta": "00000:1|ta=cancelled,tb=queued", "tb": "00000:1|ta=queued,tb=cancelled", "ta,tb": "00000:2|ta=cancelled,tb=cancelled",
       "default,ta": "00000:1|ta=cancelled,tb=queued", "*": "00000:2|ta=cancelled,tb=cancelled"}'),
    ('orch_retry_where', 'implicit', NULL, 'retry_where by queue re-drives the dead letters of its tenants only',
     $q$SELECT count(*) FROM orch_retry_where('{"queue": "q_dl"}')$q$,
     $q$SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_dl' AND retry_of IS NOT NULL$q$,
     '{"ta": "00000:1|ta", "tb": "00000:1|tb", "*": "00000:3|default,ta,tb"}'),
    ('orch_cancel_runs_where', 'implicit', NULL, 'cancel_runs_where by definition cancels the runs of its tenants only',
     $q$SELECT count(*) FROM orch_cancel_runs_where('{"definition": "tt_wf", "state": ["waiting_approval"]}')$q$,
     $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.runs WHERE input->>'fx' = 'run_wait'$q$,
     '{"ta": "00000:1|ta=canceled,tb=waiting_approval", "tb": "00000:1|ta=waiting_approval,tb=canceled",
       "ta,tb": "00000:2|ta=canceled,tb=canceled", "default,ta": "00000:1|ta=canceled,tb=waiting_approval",
       "*": "00000:2|ta=canceled,tb=canceled"}'),
    ('orch_caller_tenants', 'implicit', NULL, 'caller_tenants',
     $q$SELECT coalesce(orch_caller_tenants()::text, '<null>')$q$, NULL,
     '{"ta": "00000:{ta}", "tb": "00000:{tb}", "ta,tb": "00000:{ta,tb}", "default,ta": "00000:{default,ta}", "*": "00000:<null>"}'),
    ('orch.caller_is_admin', 'implicit', NULL, 'caller_is_admin',
     'SELECT orch.caller_is_admin()', NULL,
     '{"kind:admin": "00000:true", "bound": "00000:false", "*": "00000:false"}'),
    ('orch_create_queue', 'global', NULL, 'create a queue',
     $q$SELECT orch_create_queue('q_created_{role}') IS NOT NULL$q$,
     $q$SELECT count(*) FROM orch.queues WHERE name = 'q_created_{role}'$q$, '{"*": "00000:true|1"}'),
    ('orch_configure_queue', 'global', NULL, 'configure a queue',
     $q$SELECT orch_configure_queue('q_main', '{"priority": 3}')->>'priority'$q$,
     $q$SELECT settings->>'priority' FROM orch.queues WHERE name = 'q_main'$q$, '{"*": "00000:3|3"}'),
    ('orch_pause_queue', 'global', NULL, 'pause a queue',
     $q$SELECT orch_pause_queue('q_main')::text$q$,
     $q$SELECT paused FROM orch.queues WHERE name = 'q_main'$q$, '{"*": "00000:%|true"}'),
    ('orch_resume_queue', 'global', NULL, 'resume a queue',
     $q$SELECT orch_resume_queue('q_paused')::text$q$,
     $q$SELECT paused FROM orch.queues WHERE name = 'q_paused'$q$, '{"*": "00000:%|false"}'),
    ('orch_drop_queue', 'global', NULL, 'drop a queue',
     $q$SELECT orch_drop_queue('q_empty')::text$q$,
     $q$SELECT count(*) FROM orch.queues WHERE name = 'q_empty'$q$, '{"*": "00000:%|0"}'),
    ('orch_set_concurrency_limit', 'global', NULL, 'set a concurrency limit',
     $q$SELECT orch_set_concurrency_limit('q_main', 'ck-{role}', 3)::text$q$,
     $q$SELECT max_running FROM orch.concurrency_limits WHERE queue = 'q_main' AND key = 'ck-{role}'$q$, '{"*": "00000:%|3"}'),
    ('orch_set_fairness_weight', 'global', NULL, 'set a fairness weight',
     $q$SELECT orch_set_fairness_weight('q_main', 'fw-{role}', 3)::text$q$,
     $q$SELECT weight FROM orch.fair_weights WHERE queue = 'q_main' AND fkey = 'fw-{role}'$q$, '{"*": "00000:%|3"}'),
    ('orch_create_state_machine', 'global', NULL, 'create a state machine',
     $q$SELECT orch_create_state_machine('m_{role}', '{"a": ["b"], "b": ["a"]}')::text$q$,
     $q$SELECT count(*) FROM orch.state_machines WHERE name = 'm_{role}'$q$, '{"*": "00000:%|1"}'),
    ('orch_maintain', 'global', NULL, 'maintain (recovers the leases of every tenant)',
     'SELECT count(*) > 0 FROM orch_maintain(100)',
     $q$SELECT string_agg(tenant_id || '=' || state, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'q_exp'$q$,
     '{"*": "00000:true|ta=awaiting_tool,tb=awaiting_tool"}'),
    ('orch_bind_tenant', 'global', NULL, 'bind a role to a tenant',
     $q$SELECT orch_bind_tenant('t_spare', 'tz')$q$,
     $q$SELECT actor || '/' || tenant_id FROM orch.history WHERE reason_code = 'tenant_bound' ORDER BY id DESC LIMIT 1$q$,
     '{"*": "00000:true|{role}/tz"}'),
    ('orch_unbind_tenant', 'global', NULL, 'unbind a role from a tenant',
     $q$SELECT orch_unbind_tenant('t_spare_bound', 'ta')$q$,
     $q$SELECT actor || '/' || tenant_id FROM orch.history WHERE reason_code = 'tenant_unbound' ORDER BY id DESC LIMIT 1$q$,
     '{"*": "00000:true|{role}/ta"}'),
    -- pg_cron is not installed in this database: 55000 for an unrestricted
    -- admin; a bound admin may not schedule work that spans tenants
    ('orch_schedule_maintenance', 'global', NULL, 'schedule maintenance',
     'SELECT orch_schedule_maintenance()', NULL, '{"*": "55000"}'),
    ('orch_unschedule_maintenance', 'global', NULL, 'unschedule maintenance',
     'SELECT orch_unschedule_maintenance()', NULL, '{"*": "55000"}'),
    ('orch_queue_settings', 'any', NULL, 'queue settings',
     $q$SELECT orch_queue_settings('q_main')->>'lease'$q$, NULL, '{"*": "00000:00:00:30"}'),
    ('orch_retry_decision', 'any', NULL, 'retry decision',
     $q$SELECT decision FROM orch_retry_decision('TRANSIENT', 1, 1)$q$, NULL, '{"*": "00000:retry"}'),
    -- global: the events of an attached table land in tenant default
    ('orch_attach_state_machine', 'global', NULL, 'attach a state machine to a table the role owns',
     $q$SELECT orch_attach_state_machine('tt_doors_{role}', 'status', 'tt_door')::text$q$,
     $q$SELECT count(*) FROM pg_trigger WHERE tgrelid = 'tt_doors_{role}'::regclass AND NOT tgisinternal$q$,
     '{"*": "00000:%|1"}'),
    ('orch_state_machine_trigger', 'any', NULL, 'call the lifecycle trigger function directly',
     'SELECT orch_state_machine_trigger()', NULL, '{"*": "39P01"}'),
    ('orch_tasks_statement_end', 'any', NULL, 'call the statement-end trigger function directly',
     'SELECT orch_tasks_statement_end()', NULL, '{"*": "39P01"}'),
    ('orch_queues_changed', 'any', NULL, 'call the queue cache trigger function directly',
     'SELECT orch_queues_changed()', NULL, '{"*": "39P01"}'),
    -- superuser only (no role is granted it): distributing is a cluster change
    ('orch_distribute', 'global', NULL, 'distribute the tables with Citus',
     'SELECT count(*) FROM orch_distribute()', NULL, '{"*": "42501"}');

-- Workflow cases: runs, their step tasks and approvals are the tenant's;
-- definitions are shared, authored by unbound roles only.
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['ta', 'tb'] LOOP
        INSERT INTO tt_cases (fn, class, tgt, label, sql, chk, want) VALUES
        ('orch_task_rows', 'task', t, 'task_rows by id of a queued task',
         format('SELECT count(*) || ''/'' || coalesce(string_agg(state || ''/'' || tenant_id, '',''), '''') FROM orch_task_rows(task_ids => ARRAY[%s]::bigint[])',
                pg_temp.fx('queued', t)), NULL,
         jsonb_build_object('own', '00000:1/queued/' || t, 'other', '00000:0/')),
        ('orch_task_rows', 'task', t, 'task_rows of a run',
         format('SELECT count(*) > 0 FROM orch_task_rows(run_id => %s)', pg_temp.fx('run_wait', t)), NULL,
         '{"own": "00000:true", "other": "00000:false"}'),
        ('orch_task_rows', 'task', t, 'task_rows re-driving a dead letter (none yet)',
         format('SELECT count(*) FROM orch_task_rows(retry_of => %s)', pg_temp.fx('dead', t)), NULL,
         '{"own": "00000:0", "other": "00000:0"}'),
        ('orch_run_rows', 'task', t, 'run_rows by id of a run waiting for approval',
         format('SELECT count(*) || ''/'' || coalesce(string_agg(state, '',''), '''') FROM orch_run_rows(run_ids => ARRAY[%s]::bigint[])',
                pg_temp.fx('run_wait', t)), NULL,
         '{"own": "00000:1/waiting_approval", "other": "00000:0/"}'),
        ('orch_run_step_rows', 'task', t, 'run_step_rows of a run waiting for approval',
         format('SELECT count(*) FROM orch_run_step_rows(%s)', pg_temp.fx('run_wait', t)), NULL,
         '{"own": "00000:2", "other": "00000:0"}'),
        ('orch_run_status', 'task', t, 'run_status of a run waiting for approval',
         format($q$SELECT (s -> 'run' ->> 'state') || '/' || (s -> 'run' ->> 'tenant_id') || '/' || jsonb_array_length(s -> 'steps')
                     FROM orch_run_status(%s) AS f(s)$q$, pg_temp.fx('run_wait', t)), NULL,
         jsonb_build_object('own', '00000:waiting_approval/' || t || '/2', 'other', 'OR005')),
        ('orch_run_status', 'task', t, 'run_status of a succeeded run shows its approval',
         format($q$SELECT (s -> 'run' ->> 'state') || '/' || (s -> 'approvals' -> 0 ->> 'approval_ref')
                     FROM orch_run_status(%s) AS f(s)$q$, pg_temp.fx('run_done', t)), NULL,
         '{"own": "00000:succeeded/fx-ref-run_done", "other": "OR005"}'),
        ('orch_approve', 'task', t, 'approve a run waiting for approval',
         format($q$SELECT orch_approve(%s, 'gate', 'tt-ref', 'alice', 'fine')$q$, pg_temp.fx('run_wait', t)),
         format($q$SELECT r.state || '/' || a.actor || '/' || a.label FROM orch.runs r
                     JOIN orch.approvals a ON a.run_id = r.id AND a.tenant_id = r.tenant_id
                    WHERE r.id = %s AND a.approval_ref = 'tt-ref'$q$, pg_temp.fx('run_wait', t)),
         '{"own": "00000:succeeded|succeeded/{role}/alice", "other": "OR005"}'),
        ('orch_approve', 'task', t, 'approve with the reference another run of the tenant used: OR009',
         format($q$SELECT orch_approve(%s, 'gate', 'fx-ref-run_done')$q$, pg_temp.fx('run_wait', t)), NULL,
         '{"own": "OR009", "other": "OR005"}'),
        ('orch_reject', 'task', t, 'reject a run waiting for approval (the run compensates)',
         format($q$SELECT orch_reject(%s, 'gate', 'tt-ref', 'alice', 'no')$q$, pg_temp.fx('run_wait', t)),
         format($q$SELECT r.state || '/' || r.phase || '/' || c.state FROM orch.runs r
                     JOIN orch.tasks c ON c.run_id = r.id AND c.tenant_id = r.tenant_id AND c.step_key = 'work:compensate'
                    WHERE r.id = %s$q$, pg_temp.fx('run_wait', t)),
         '{"own": "00000:running|running/compensating/queued", "other": "OR005"}'),
        ('orch_acknowledge_drift', 'task', t, 'acknowledge drift of a paused run that has none: OR009',
         format($q$SELECT orch_acknowledge_drift(%s, 'tt-drift-ref', 'alice')$q$, pg_temp.fx('run_paused', t)), NULL,
         '{"own": "OR009", "other": "OR005"}'),
        ('orch_pause_run', 'task', t, 'pause a running run',
         format('SELECT orch_pause_run(%s)', pg_temp.fx('run_exec', t)),
         format('SELECT state FROM orch.runs WHERE id = %s', pg_temp.fx('run_exec', t)),
         '{"own": "00000:paused|paused", "other": "OR005"}'),
        ('orch_resume_run', 'task', t, 'resume a paused run (its pins hold)',
         format($q$SELECT orch_resume_run(%s, '{"definition": "tt_wf", "version": 1}')$q$, pg_temp.fx('run_paused', t)),
         format('SELECT state FROM orch.runs WHERE id = %s', pg_temp.fx('run_paused', t)),
         '{"own": "00000:running|running", "other": "OR005"}'),
        ('orch_resume_run', 'task', t, 'resume a paused run with pins that drifted: OR010',
         format($q$SELECT orch_resume_run(%s, '{"version": 2}')$q$, pg_temp.fx('run_paused', t)), NULL,
         '{"own": "OR010", "other": "OR005"}'),
        ('orch_cancel_run', 'task', t, 'cancel a run waiting for approval',
         format($q$SELECT orch_cancel_run(%s, 'tt cancel')$q$, pg_temp.fx('run_wait', t)),
         format('SELECT state FROM orch.runs WHERE id = %s', pg_temp.fx('run_wait', t)),
         '{"own": "00000:canceled|canceled", "other": "OR005"}'),
        ('orch_cancel_run', 'task', t, 'cancel a running run and its executing step task',
         format($q$SELECT orch_cancel_run(%s, 'tt cancel')$q$, pg_temp.fx('run_exec', t)),
         format($q$SELECT r.state || '/' || k.state FROM orch.runs r JOIN orch.tasks k ON k.run_id = r.id AND k.tenant_id = r.tenant_id
                    WHERE r.id = %s$q$, pg_temp.fx('run_exec', t)),
         '{"own": "00000:canceled|canceled/cancelled", "other": "OR005"}'),
        ('orch_signal', 'task', t, 'signal a running run',
         format($q$SELECT orch_signal(%s, 'tt.signal', '{"s": 1}') > 0$q$, pg_temp.fx('run_exec', t)),
         format($q$SELECT count(*) FROM orch.signals WHERE run_id = %s AND name = 'tt.signal'$q$, pg_temp.fx('run_exec', t)),
         '{"own": "00000:true|1", "other": "OR005"}'),
        ('orch_signal', 'task', t, 'signal a succeeded run: OR002',
         format($q$SELECT orch_signal(%s, 'tt.signal') > 0$q$, pg_temp.fx('run_done', t)), NULL,
         '{"own": "OR002", "other": "OR005"}'),
        ('orch_retry_run', 'task', t, 're-run a failed run',
         format('SELECT orch_retry_run(%s)', pg_temp.fx('run_failed', t)),
         format('SELECT tenant_id || ''/'' || state FROM orch.runs WHERE retry_of = %s', pg_temp.fx('run_failed', t)),
         jsonb_build_object('own', '00000:%|' || t || '/running', 'other', 'OR005')),
        ('orch_complete', 'task', t, 'complete the executing step task of a run (the run then waits for approval)',
         format($q$SELECT orch_complete(%s, %L, '{"r": 1}')$q$, pg_temp.fx('run_exec_task', t), pg_temp.tok('run_exec_task', t)),
         format('SELECT state FROM orch.runs WHERE id = %s', pg_temp.fx('run_exec', t)),
         '{"own": "00000:completed|waiting_approval", "other": "OR005"}'),
        ('orch_start', 'tenant', t, 'start a run naming the tenant',
         format($q$SELECT orch_start('tt_wf', '{"n": 1}', tenant => %L)$q$, t),
         $q$SELECT tenant_id || '/' || state || '/' || created_by FROM orch.runs WHERE id = {result}$q$,
         jsonb_build_object('own', '00000:%|' || t || '/running/{role}', 'other', '42501')),
        ('orch_start', 'tenant', t, 'start naming the tenant, with the key tb holds (another input)',
         format($q$SELECT orch_start('tt_wf', '{"x": 2}', idempotency_key => 'run-shared', tenant => %L)$q$, t),
         'SELECT tenant_id FROM orch.runs WHERE id = {result}',
         jsonb_build_object('own', CASE t WHEN 'ta' THEN '00000:%|ta' ELSE 'OR004' END, 'other', '42501')),
        ('orch_schedule', 'tenant', t, 'schedule naming the tenant',
         format($q$SELECT orch_schedule('tt_new', '0 0 1 1 *', '{"queue": "tt_sq"}', jsonb_build_object('tenant', %L))::text$q$, t),
         format($q$SELECT tenant_id || '/' || created_by FROM orch.schedules WHERE name = 'tt_new' AND tenant_id = %L$q$, t),
         jsonb_build_object('own', '00000:|' || t || '/{role}', 'other', '42501')),
        ('orch_schedule', 'tenant', t, 'replace a schedule naming the tenant',
         format($q$SELECT orch_schedule('tt_sched', '0 0 1 2 *', '{"queue": "tt_sq"}', jsonb_build_object('tenant', %L))::text$q$, t),
         format($q$SELECT cron FROM orch.schedules WHERE name = 'tt_sched' AND tenant_id = %L$q$, t),
         '{"own": "00000:|0 0 1 2 *", "other": "42501"}'),
        ('orch_unschedule', 'tenant', t, 'unschedule naming the tenant',
         format($q$SELECT orch_unschedule('tt_sched', %L)$q$, t),
         format($q$SELECT count(*) FROM orch.schedules WHERE name = 'tt_sched' AND tenant_id = %L$q$, t),
         '{"own": "00000:true|0", "other": "42501"}'),
        ('orch_pause_schedule', 'tenant', t, 'pause a schedule naming the tenant',
         format($q$SELECT orch_pause_schedule('tt_sched', %L)::text$q$, t),
         format($q$SELECT paused FROM orch.schedules WHERE name = 'tt_sched' AND tenant_id = %L$q$, t),
         '{"own": "00000:|true", "other": "42501"}'),
        ('orch_resume_schedule', 'tenant', t, 'resume a paused schedule naming the tenant',
         format($q$SELECT orch_resume_schedule('tt_paused', %L)::text$q$, t),
         format($q$SELECT paused FROM orch.schedules WHERE name = 'tt_paused' AND tenant_id = %L$q$, t),
         '{"own": "00000:|false", "other": "42501"}');
    END LOOP;
END $$;
INSERT INTO tt_cases (fn, class, tgt, label, sql, chk, want) VALUES
    ('orch_start', 'implicit', NULL, 'start a run without a tenant',
     $q$SELECT orch_start('tt_wf', '{"n": 1}')$q$,
     'SELECT tenant_id || ''/'' || state FROM orch.runs WHERE id = {result}',
     '{"ta": "00000:%|ta/running", "tb": "00000:%|tb/running", "ta,tb": "42501", "default,ta": "00000:%|default/running",
       "*": "00000:%|default/running"}'),
    ('orch_start', 'implicit', NULL, 'start without a tenant, with the key tb holds (another input)',
     $q$SELECT orch_start('tt_wf', '{"x": 2}', idempotency_key => 'run-shared')$q$,
     'SELECT tenant_id FROM orch.runs WHERE id = {result}',
     '{"ta": "00000:%|ta", "tb": "OR004", "ta,tb": "42501", "default,ta": "00000:%|default", "*": "00000:%|default"}'),
    ('orch_define', 'global', NULL, 'define a workflow',
     $q$SELECT orch_define('wf_{role}', '{"steps": [{"step_id": "s", "queue": "q_wf", "handler": "h"}]}')$q$,
     $q$SELECT status || '/' || created_by FROM orch.definitions WHERE name = 'wf_{role}'$q$, '{"*": "00000:1|draft/{role}"}'),
    ('orch_publish', 'global', NULL, 'publish a draft',
     $q$SELECT length(orch_publish('tt_wf_draft', 1))$q$,
     $q$SELECT status FROM orch.definitions WHERE name = 'tt_wf_draft'$q$, '{"*": "00000:64|published"}'),
    ('orch_deprecate', 'global', NULL, 'deprecate a published version',
     $q$SELECT orch_deprecate('tt_wf_old', 1)::text$q$,
     $q$SELECT status FROM orch.definitions WHERE name = 'tt_wf_old'$q$, '{"*": "00000:|deprecated"}'),
    ('orch_definition', 'any', NULL, 'the latest published version of a shared definition',
     $q$SELECT version || '/' || status || '/' || length(content_hash) FROM orch_definition('tt_wf')$q$, NULL,
     '{"*": "00000:1/published/64"}'),
    ('orch_validate_definition', 'any', NULL, 'validate a spec',
     $q$SELECT 'valid' FROM orch_validate_definition('{"steps": [{"step_id": "s", "queue": "q", "handler": "h"}]}') v$q$, NULL,
     '{"*": "00000:valid"}'),
    ('orch_validate_definition', 'any', NULL, 'validate an invalid spec: OR008',
     $q$SELECT 'valid' FROM orch_validate_definition('{"steps": []}') v$q$, NULL, '{"*": "OR008"}'),
    ('orch_definitions_guard', 'any', NULL, 'call the definition guard trigger function directly',
     'SELECT orch_definitions_guard()', NULL, '{"*": "39P01"}'),
    ('orch_run_lifecycle', 'any', NULL, 'call the run lifecycle trigger function directly',
     'SELECT orch_run_lifecycle()', NULL, '{"*": "39P01"}'),
    -- metrics (0.5.0): the fold spans tenants; the reads filter by tenant
    ('orch_metrics_refresh', 'global', NULL, 'fold the counters of every tenant',
     'SELECT orch_metrics_refresh() >= 0', NULL, '{"*": "00000:true"}'),
    ('orch_metrics_prometheus', 'any', NULL, 'the Prometheus text',
     $q$SELECT orch_metrics_prometheus() LIKE '# HELP %'$q$, NULL, '{"*": "00000:true"}'),
    ('orch_duration_stats', 'any', NULL, 'duration statistics',
     'SELECT count(*) >= 0 FROM orch_duration_stats()', NULL, '{"*": "00000:true"}'),
    ('orch_throughput', 'any', NULL, 'throughput per minute: the caller''s tenants'' rows only',
     'SELECT count(*) FROM orch_throughput(''2 days'') t WHERE NOT orch.tenant_visible(t.tenant_id)', NULL, '{"*": "00000:0"}'),
    ('orch.open_tasks', 'any', NULL, 'open tasks by queue',
     'SELECT count(*) >= 0 FROM orch.open_tasks()', NULL, '{"*": "00000:true"}'),
    ('orch.dead_letter_counts', 'any', NULL, 'dead letters by queue',
     'SELECT count(*) >= 0 FROM orch.dead_letter_counts()', NULL, '{"*": "00000:true"}'),
    ('orch.review_items', 'any', NULL, 'the review queue',
     'SELECT count(*) >= 0 FROM orch.review_items()', NULL, '{"*": "00000:true"}'),
    -- the rows of orch_queue_stats and orch_error_stats (0.8.0)
    ('orch.queue_stats', 'implicit', NULL, 'queue statistics: the tenants in them',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.queue_stats()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:default,ta,tb"}'),
    ('orch.error_stats', 'any', NULL, 'error statistics',
     'SELECT count(*) >= 0 FROM orch.error_stats()', NULL, '{"*": "00000:true"}'),
    -- what the views read (0.8.0): the caller's tenants' rows, every row for
    -- an unbound caller (the only branch on Citus)
    ('orch.caller_tenants', 'implicit', NULL, 'the caller''s tenants (in schema orch)',
     $q$SELECT coalesce(array_to_string(orch.caller_tenants(), ','), '<null>')$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:<null>"}'),
    ('orch.caller_tenant_bindings', 'implicit', NULL, 'the bindings of the callers tenants',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_tenant_bindings()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "*": "00000:default,ta,tb"}'),
    ('orch.caller_queues', 'implicit', NULL, 'the queues a bound caller sees',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_queues()$q$, NULL,
     '{"ta": "00000:default", "tb": "00000:default", "ta,tb": "00000:default", "default,ta": "00000:default", "*": "00000:default"}'),
    ('orch.caller_tasks', 'implicit', NULL, 'the callers tenants tasks',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_tasks()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:default,ta,tb"}'),
    ('orch.caller_attempts', 'implicit', NULL, 'the callers tenants attempts',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_attempts()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:default,ta,tb"}'),
    ('orch.caller_commands', 'implicit', NULL, 'the callers tenants commands',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_commands()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:ta", "*": "00000:ta,tb"}'),
    ('orch.caller_dead_letters', 'implicit', NULL, 'the callers tenants dead letters',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_dead_letters()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:default,ta,tb"}'),
    ('orch.caller_runs', 'implicit', NULL, 'the callers tenants runs',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_runs()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:ta", "*": "00000:ta,tb"}'),
    ('orch.caller_run_steps', 'implicit', NULL, 'the callers tenants run steps',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_run_steps()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:ta", "*": "00000:ta,tb"}'),
    ('orch.caller_signals', 'implicit', NULL, 'the callers tenants signals',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_signals()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:ta", "*": "00000:ta,tb"}'),
    ('orch.caller_events', 'implicit', NULL, 'the callers tenants events',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_events()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:default,ta,tb"}'),
    ('orch.caller_definitions', 'implicit', NULL, 'every workflow definition',
     $q$SELECT count(*) > 0 FROM orch.caller_definitions()$q$, NULL,
     '{"ta": "00000:true", "tb": "00000:true", "ta,tb": "00000:true", "default,ta": "00000:true", "*": "00000:true"}'),
    ('orch.caller_maintenance_log', 'implicit', NULL, 'the maintenance passes',
     $q$SELECT count(*) >= 0 FROM orch.caller_maintenance_log()$q$, NULL,
     '{"ta": "00000:true", "tb": "00000:true", "ta,tb": "00000:true", "default,ta": "00000:true", "*": "00000:true"}'),
    ('orch.metrics_fold', 'any', NULL, 'call the fold directly',
     'SELECT orch.metrics_fold()', NULL, '{"*": "42501"}'),
    ('orch.metrics_fold_on', 'any', NULL, 'call metrics_fold_on directly',
     $q$SELECT orch.metrics_fold_on('{orch.tasks}', 'orch.metric_state', 1, 1, NULL)$q$, NULL, '{"*": "42501"}'),
    ('orch.metrics_mark', 'any', NULL, 'call metrics_mark directly (it publishes the fold''s clock)',
     'SELECT orch.metrics_mark()', NULL, '{"*": "42501"}'),
    ('orch.metrics_fold_shard', 'any', NULL, 'call metrics_fold_shard directly',
     $q$SELECT orch.metrics_fold_shard('orch.tasks_1')$q$, NULL, '{"*": "42501"}'),
    ('orch.stamp_on_node', 'any', NULL, 'call stamp_on_node directly',
     'SELECT orch.stamp_on_node()', NULL, '{"*": "42501"}'),
    ('orch.run_busy_on_shard', 'any', NULL, 'call run_busy_on_shard directly',
     'SELECT orch.run_busy_on_shard(1, true)', NULL, '{"*": "42501"}'),
    ('orch.step_claimable', 'any', NULL, 'call step_claimable directly (it tells whether a run is running)',
     $q$SELECT orch.step_claimable(1, 'ta', NULL)$q$, NULL, '{"*": "42501"}'),
    ('orch.start_subflow', 'any', NULL, 'call start_subflow directly (a run''s subflow step starts its child)',
     $q$SELECT orch.start_subflow(1, 's', NULL, 'd', 1, '{}')$q$, NULL, '{"*": "42501"}'),
    ('orch.histogram_le', 'any', NULL, 'call histogram_le directly',
     'SELECT orch.histogram_le(1)', NULL, '{"*": "42501"}'),
    ('orch.histogram_quantile', 'any', NULL, 'call histogram_quantile directly',
     $q$SELECT orch.histogram_quantile(0.5, '{1}', '{1}')$q$, NULL, '{"*": "42501"}'),
    ('orch.check_reader_args', 'any', NULL, 'call check_reader_args directly',
     'SELECT orch.check_reader_args(NULL, 1)', NULL, '{"*": "42501"}'),
    ('orch_task_rows', 'implicit', NULL, 'the newest tasks: the caller''s tenants only',
     $q$SELECT string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id) FROM orch_task_rows("limit" => 10000)$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:default,ta", "*": "00000:default,ta,tb"}'),
    ('orch_schedule', 'implicit', NULL, 'schedule without a tenant: the caller''s',
     $q$SELECT orch_schedule('tt_new', '0 0 1 1 *', '{"queue": "tt_sq"}')::text$q$,
     $q$SELECT string_agg(tenant_id, ',') FROM orch.schedules WHERE name = 'tt_new'$q$,
     '{"ta": "00000:|ta", "tb": "00000:|tb", "ta,tb": "42501", "default,ta": "00000:|default", "*": "00000:|default"}'),
    ('orch_unschedule', 'implicit', NULL, 'unschedule without a tenant: the caller''s schedule only',
     $q$SELECT orch_unschedule('tt_sched')$q$,
     $q$SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.schedules WHERE name = 'tt_sched'$q$,
     '{"ta": "00000:true|tb", "tb": "00000:true|ta", "ta,tb": "42501", "default,ta": "00000:false|ta,tb", "*": "00000:false|ta,tb"}'),
    ('orch_pause_schedule', 'implicit', NULL, 'pause without a tenant: the caller''s schedule only',
     $q$SELECT orch_pause_schedule('tt_sched')::text$q$,
     $q$SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.schedules WHERE name = 'tt_sched' AND paused$q$,
     '{"ta": "00000:|ta", "tb": "00000:|tb", "ta,tb": "42501", "default,ta": "OR005", "*": "OR005"}'),
    ('orch_schedule_tick', 'implicit', NULL, 'tick: the due schedules of the caller''s tenants fire',
     'SELECT orch_schedule_tick()',
     $q$SELECT string_agg(tenant_id, ',' ORDER BY tenant_id) FROM orch.tasks WHERE queue = 'tt_sq'$q$,
     '{"ta": "00000:1|ta", "tb": "00000:1|tb", "*": "00000:2|ta,tb"}'),
    ('orch_cron_next', 'any', NULL, 'the next slots of a cron expression',
     $q$SELECT count(*) FROM orch_cron_next('0 * * * *', now(), 'UTC', 3)$q$, NULL, '{"*": "00000:3"}'),
    ('orch.caller_schedules', 'implicit', NULL, 'the callers tenants schedules',
     $q$SELECT coalesce(string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id), '') FROM orch.caller_schedules()$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:ta", "*": "00000:ta,tb"}'),
    ('orch_run_rows', 'implicit', NULL, 'the newest runs: the caller''s tenants only',
     $q$SELECT string_agg(DISTINCT tenant_id, ',' ORDER BY tenant_id) FROM orch_run_rows("limit" => 10000)$q$, NULL,
     '{"ta": "00000:ta", "tb": "00000:tb", "ta,tb": "00000:ta,tb", "default,ta": "00000:ta", "*": "00000:ta,tb"}');

-- Every SQL-callable function of the extension has a case (and no case names
-- a function that does not exist).
CREATE TEMP VIEW tt_ext_functions AS
SELECT CASE WHEN n.nspname = 'public' THEN p.proname::text ELSE n.nspname || '.' || p.proname END AS fn
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator';
SELECT is(ARRAY(SELECT fn FROM tt_ext_functions EXCEPT SELECT fn FROM tt_cases ORDER BY 1), '{}'::text[],
          'the matrix has a case for every function of the extension');
SELECT is(ARRAY(SELECT fn FROM tt_cases EXCEPT SELECT fn FROM tt_ext_functions ORDER BY 1), '{}'::text[],
          'every case of the matrix names a function of the extension');
SELECT is(ARRAY(SELECT fn FROM tt_allowed EXCEPT SELECT fn FROM tt_ext_functions ORDER BY 1), '{}'::text[],
          'the expected grants name functions of the extension');
SELECT cmp_ok((SELECT count(*) FROM tt_ext_functions), '>=', 64::bigint, 'the extension has at least the 64 functions of 0.5.0');

-- A snapshot of every tenant's data (and of the tenant-less tables).
CREATE FUNCTION pg_temp.tt_snap() RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_object_agg(k, h) FROM (
        SELECT tenant_id AS k, md5(string_agg(x, E'\n' ORDER BY x)) AS h FROM (
            SELECT tenant_id, 'T' || to_jsonb(t)::text AS x FROM orch.tasks t
            UNION ALL SELECT tenant_id, 'E' || to_jsonb(e)::text FROM orch.history e
            UNION ALL SELECT tenant_id, 'A' || to_jsonb(a)::text FROM orch.attempt_history a
            UNION ALL SELECT tenant_id, 'C' || to_jsonb(c)::text FROM orch.commands c
            UNION ALL SELECT tenant_id, 'I' || to_jsonb(i)::text FROM orch.idempotency_keys i
            UNION ALL SELECT tenant_id, 'R' || to_jsonb(r)::text FROM orch.rate_window r
            UNION ALL SELECT tenant_id, 'L' || to_jsonb(l)::text FROM orch.concurrency_limits l
            UNION ALL SELECT tenant_id, 'U' || to_jsonb(u)::text FROM orch.runs u
            UNION ALL SELECT tenant_id, 'S' || to_jsonb(p)::text FROM orch.run_steps p
            UNION ALL SELECT tenant_id, 'P' || to_jsonb(v)::text FROM orch.approvals v
            UNION ALL SELECT tenant_id, 'G' || to_jsonb(g)::text FROM orch.signals g
            UNION ALL SELECT tenant_id, 'K' || to_jsonb(k)::text FROM orch.schedules k) s
         GROUP BY tenant_id
        UNION ALL
        SELECT '(global)', md5(coalesce((SELECT string_agg(to_jsonb(q)::text, ',' ORDER BY q.name) FROM orch.queues q), '')
                               || coalesce((SELECT string_agg(to_jsonb(m)::text, ',' ORDER BY m.name) FROM orch.state_machines m), '')
                               || coalesce((SELECT string_agg(to_jsonb(b)::text, ',' ORDER BY b.role, b.tenant_id) FROM orch.tenant_bindings b), '')
                               || coalesce((SELECT string_agg(to_jsonb(d)::text, ',' ORDER BY d.name, d.version) FROM orch.definitions d), ''))
    ) s
$$;

-- tt_try(role, sql, chk): runs sql as the role and chk as the superuser,
-- then rolls everything back, so that every case starts from the fixtures.
-- changed: the snapshot keys (tenants, '(global)') the call changed.
CREATE FUNCTION pg_temp.tt_try(r name, q text, chk text, OUT outcome text, OUT changed text[], OUT msg text)
LANGUAGE plpgsql AS $$
DECLARE before jsonb; after jsonb; res text; st text; c text;
BEGIN
    before := pg_temp.tt_snap();
    BEGIN
        BEGIN
            EXECUTE format('SET LOCAL ROLE %I', r);
            EXECUTE replace(q, '{role}', r) INTO res;
            RESET ROLE;
            st := '00000';
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
        END;
        after := pg_temp.tt_snap();
        IF st = '00000' AND chk IS NOT NULL THEN
            EXECUTE replace(replace(chk, '{role}', r), '{result}', coalesce(res, '0')) INTO c;
        END IF;
        outcome := CASE WHEN st = '00000'
                        THEN '00000:' || coalesce(res, '<null>')
                             || CASE WHEN chk IS NOT NULL THEN '|' || coalesce(c, '<null>') ELSE '' END
                        ELSE st END;
        changed := ARRAY(SELECT k FROM (SELECT jsonb_object_keys(before) UNION SELECT jsonb_object_keys(after)) s(k)
                          WHERE before->k IS DISTINCT FROM after->k ORDER BY k);
        RAISE EXCEPTION 'roll the case back' USING ERRCODE = 'TT001';
    EXCEPTION WHEN SQLSTATE 'TT001' THEN
        NULL;
    END;
END $$;

-- The expected outcome of a case for a role.
CREATE FUNCTION pg_temp.tt_want(r tt_roles, c tt_cases) RETURNS text LANGUAGE plpgsql AS $$
DECLARE w text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tt_allowed a WHERE a.kind = r.kind AND a.fn = c.fn) THEN
        RETURN '42501';
    END IF;
    CASE c.class
        WHEN 'task', 'tenant' THEN
            w := coalesce(c.want->>array_to_string(r.eff, ','),
                          CASE WHEN r.eff IS NULL OR c.tgt = ANY (r.eff) THEN c.want->>'own' ELSE c.want->>'other' END);
        WHEN 'implicit' THEN
            w := coalesce(c.want->>('kind:' || r.kind), c.want->>coalesce(array_to_string(r.eff, ','), '*'),
                          CASE WHEN r.eff IS NOT NULL THEN c.want->>'bound' END);
        WHEN 'global' THEN
            w := CASE WHEN r.eff IS NULL THEN c.want->>'*' ELSE '42501' END;
        ELSE
            w := c.want->>'*';
    END CASE;
    RETURN replace(coalesce(w, 'MISSING EXPECTATION'), '{role}', r.role);
END $$;

-- tt_matrix(): for every role and case, the outcome; then, when the call was
-- refused, that nothing changed at all, and when a bound role's call went
-- through, that nothing outside its tenants changed.
CREATE FUNCTION pg_temp.tt_matrix() RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE r tt_roles; c tt_cases; w text; o record; d text; outside text[];
BEGIN
    FOR r IN SELECT * FROM tt_roles ORDER BY ord LOOP
        FOR c IN SELECT * FROM tt_cases ORDER BY id LOOP
            w := pg_temp.tt_want(r, c);
            o := pg_temp.tt_try(r.role, c.sql, c.chk);
            d := format('%s: %s%s', r.role, c.label, coalesce(' (tenant ' || c.tgt || ')', ''));
            RETURN NEXT alike(o.outcome, w, d || ' -> ' || w)
                || CASE WHEN o.outcome NOT LIKE w AND o.msg IS NOT NULL THEN E'\n' || diag('error: ' || o.msg) ELSE '' END;
            IF o.outcome NOT LIKE '00000%' THEN
                RETURN NEXT is(o.changed, '{}'::text[], d || ': refused, nothing changed');
            ELSIF r.eff IS NOT NULL THEN
                outside := ARRAY(SELECT k FROM unnest(o.changed) k WHERE k <> ALL (r.eff) ORDER BY k);
                RETURN NEXT is(outside, '{}'::text[], d || ': nothing outside ' || array_to_string(r.eff, ',') || ' changed');
            END IF;
        END LOOP;
    END LOOP;
END $$;

SELECT * FROM pg_temp.tt_matrix();

-- ---------------------------------------------------------------------------
-- 4. Views, as each role sees them: rows per tenant.
-- ---------------------------------------------------------------------------
-- tt_counts(rows query): 'tenant:count,...' of the query's tenant_id column
CREATE FUNCTION pg_temp.tt_counts(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE res text;
BEGIN
    EXECUTE format('SELECT coalesce(string_agg(tenant_id || '':'' || n, '','' ORDER BY tenant_id), '''')'
                   ' FROM (SELECT tenant_id, count(*) AS n FROM (%s) s GROUP BY tenant_id) c', q) INTO res;
    RETURN res;
END $$;
CREATE TEMP TABLE tt_views (view text, raw text);
INSERT INTO tt_views VALUES
    ('orch_tasks', 'SELECT tenant_id FROM orch.tasks'),
    ('orch_events', 'SELECT tenant_id FROM orch.history'),
    ('orch_attempts', 'SELECT tenant_id FROM orch.attempt_history'),
    ('orch_commands', 'SELECT tenant_id FROM orch.commands'),
    ('orch_runs', 'SELECT tenant_id FROM orch.runs'),
    ('orch_run_steps', 'SELECT tenant_id FROM orch.run_steps'),
    ('orch_signals', 'SELECT tenant_id FROM orch.signals'),
    ('orch_schedules', 'SELECT tenant_id FROM orch.schedules'),
    ('orch_dead_letters', $$SELECT t.tenant_id FROM orch.tasks t WHERE t.state = 'failed'
        AND t.reason_code IN ('max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                              'compensation_required', 'not_safe_to_retry')
        AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of = t.id)$$);
SELECT is((SELECT count(DISTINCT tenant_id) FROM orch.tasks WHERE state = 'failed'), 3::bigint,
          'fixture: dead letters of three tenants');
SELECT is((SELECT count(DISTINCT tenant_id) FROM orch.commands), 2::bigint, 'fixture: commands of two tenants');
SELECT is((SELECT count(DISTINCT tenant_id) FROM orch.attempt_history), 3::bigint, 'fixture: attempts of three tenants');
SELECT is((SELECT count(DISTINCT tenant_id) FROM orch.runs), 2::bigint, 'fixture: runs of two tenants');
SELECT is((SELECT count(DISTINCT tenant_id) FROM orch.run_steps), 2::bigint, 'fixture: run steps of two tenants');

SELECT is(pg_temp.as_role(r.role, format($$SELECT pg_temp.tt_counts('SELECT tenant_id FROM %s')$$, v.view)),
          CASE WHEN r.kind = 'nobody' THEN '42501'
               ELSE pg_temp.tt_counts(format('SELECT tenant_id FROM (%s) s WHERE %L::text[] IS NULL OR tenant_id = ANY (%L::text[])',
                                             v.raw, r.eff, r.eff)) END,
          CASE WHEN r.kind = 'nobody' THEN format('%s may not read %s', r.view_role, v.view)
               ELSE format('%s sees %s of %s', r.view_role, v.view, coalesce(array_to_string(r.eff, ','), 'every tenant')) END)
  FROM (SELECT *, role AS view_role FROM tt_roles) r, tt_views v ORDER BY r.ord, v.view;

-- Queues (0.8.0): a bound role sees the shared ones (tenant 'default', made
-- by an unbound role) and those its tenants' enqueues created.
SELECT is(pg_temp.as_role(role, 'SELECT count(*) FROM orch_queues'),
          CASE WHEN kind = 'nobody' THEN '42501'
               ELSE (SELECT count(*) FROM orch.queues q
                      WHERE eff IS NULL OR q.tenant_id = 'default' OR q.tenant_id = ANY (eff))::text END,
          role || ' sees in orch_queues the shared queues and its tenants'' own')
  FROM tt_roles ORDER BY ord;
SELECT is(pg_temp.as_role('t_producer_a', $$SELECT orch_enqueue('q_made_by_ta', '{}') > 0$$), 'true',
          'a producer bound to ta creates a queue by enqueueing');
SELECT is((SELECT tenant_id FROM orch.queues WHERE name = 'q_made_by_ta'), 'ta',
          '... which records ta as the tenant that created it');
SELECT is((SELECT tenant_id FROM orch.queues WHERE name = 'q_main'), 'default',
          'a queue created by an unbound role is shared (tenant default)');
SELECT is(pg_temp.as_role(role, $$SELECT count(*) FROM orch_queues WHERE queue = 'q_made_by_ta'$$),
          CASE WHEN kind = 'nobody' THEN '42501'
               WHEN eff IS NULL OR 'ta' = ANY (eff) THEN '1' ELSE '0' END,
          role || CASE WHEN eff IS NULL OR 'ta' = ANY (eff) THEN ' sees' ELSE ' does not see' END
               || ' the queue ta''s enqueue created')
  FROM tt_roles ORDER BY ord;
SELECT is(pg_temp.as_role(role, 'SELECT count(*) FROM orch_definitions'),
          CASE WHEN kind = 'nobody' THEN '42501' ELSE (SELECT count(*) FROM orch.definitions)::text END,
          role || ' sees every workflow definition in orch_definitions (definitions are shared)')
  FROM tt_roles ORDER BY ord;
SELECT is(pg_temp.as_role(role, format('SELECT count(*) FROM orch_runs WHERE run_id IN (%s, %s)',
                                       pg_temp.fx('run_wait', 'ta'), pg_temp.fx('run_wait', 'tb'))),
          CASE WHEN kind = 'nobody' THEN '42501'
               ELSE (SELECT count(*) FROM unnest(ARRAY['ta', 'tb']) x WHERE eff IS NULL OR x = ANY (eff))::text END,
          role || ' finds in orch_runs only its tenants'' runs, even by id')
  FROM tt_roles ORDER BY ord;
SELECT is(pg_temp.as_role(role, 'SELECT count(*) FROM orch_tenant_bindings'),
          CASE WHEN kind = 'admin' THEN (SELECT count(*) FROM orch.tenant_bindings)::text ELSE '42501' END,
          role || CASE WHEN kind = 'admin' THEN ' reads' ELSE ' may not read' END || ' orch_tenant_bindings')
  FROM tt_roles WHERE kind <> 'admin' OR eff IS NULL ORDER BY ord;
-- a bound administrator reads the bindings of its tenants, no other (0.8.0)
SELECT is(pg_temp.as_role(role, 'SELECT string_agg(role || ''@'' || tenant_id, '','' ORDER BY role, tenant_id) FROM orch_tenant_bindings'),
          (SELECT string_agg(b.role || '@' || b.tenant_id, ',' ORDER BY b.role, b.tenant_id)
             FROM orch.tenant_bindings b WHERE b.tenant_id = ANY (eff)),
          role || ' reads in orch_tenant_bindings exactly the bindings of its tenants')
  FROM tt_roles WHERE kind = 'admin' AND eff IS NOT NULL ORDER BY ord;
SELECT is(pg_temp.as_role(role, $$SELECT count(*) FROM orch_tenant_bindings WHERE tenant_id = 'tb'$$), '0',
          role || ' finds no binding of tb even when it asks for one')
  FROM tt_roles WHERE role = 't_admin_a';

-- orch_maintenance_log counts every tenant: only unbound roles read it (0.8.0)
INSERT INTO orch.maintenance_log (started_at, finished_at, actor, actions)
VALUES (now(), now(), 'postgres', '{"recovered": 1}');
SELECT cmp_ok((SELECT count(*) FROM orch.maintenance_log), '>', 0::bigint, 'fixture: the maintenance log has rows');
SELECT is(pg_temp.as_role(role, 'SELECT count(*) FROM orch_maintenance_log'),
          CASE WHEN kind = 'nobody' THEN '42501'
               WHEN eff IS NULL THEN (SELECT count(*) FROM orch.maintenance_log)::text ELSE '0' END,
          role || CASE WHEN eff IS NULL THEN ' reads' ELSE ' reads no row of' END || ' orch_maintenance_log')
  FROM tt_roles ORDER BY ord;

-- ---------------------------------------------------------------------------
-- 5. Lease tokens are secrets: only orch_admin members read them.
-- ---------------------------------------------------------------------------
SELECT cmp_ok((SELECT count(*) FROM orch.history WHERE lease_token IS NOT NULL AND tenant_id = t), '>', 0::bigint,
              'fixture: events of ' || t || ' carry lease tokens')
  FROM unnest(ARRAY['ta', 'tb']) t;
SELECT is(pg_temp.as_role(role, 'SELECT count(lease_token) FROM orch_events'),
          CASE WHEN kind = 'nobody' THEN '42501'
               WHEN kind = 'admin' THEN (SELECT count(lease_token) FROM orch.history WHERE eff IS NULL OR tenant_id = ANY (eff))::text
               ELSE '0' END,
          role || CASE WHEN kind = 'admin' THEN ' reads' ELSE ' does not read' END || ' the lease tokens of orch_events')
  FROM tt_roles ORDER BY ord;
SELECT is(pg_temp.as_role(role, 'SELECT count(lease_token) FROM orch_attempts'),
          CASE WHEN kind = 'nobody' THEN '42501'
               WHEN kind = 'admin' THEN (SELECT count(lease_token) FROM orch.attempt_history WHERE eff IS NULL OR tenant_id = ANY (eff))::text
               ELSE '0' END,
          role || CASE WHEN kind = 'admin' THEN ' reads' ELSE ' does not read' END || ' the lease tokens of orch_attempts')
  FROM tt_roles ORDER BY ord;
SELECT is(pg_temp.as_role(role, format('SELECT count(lease_token) FROM orch_history(%s)', pg_temp.fx('done', 'ta'))),
          CASE WHEN kind = 'nobody' THEN '42501'
               WHEN NOT (eff IS NULL OR 'ta' = ANY (eff)) THEN 'OR005'
               WHEN kind = 'admin' THEN '3'    -- claim and completion events, and the attempt
               ELSE '0' END,
          role || ': lease tokens in orch_history of a completed ta task')
  FROM tt_roles ORDER BY ord;
-- what the views read through (orch.caller_tasks and the others, which a
-- reader may call directly: every row for an unbound caller, the only
-- branch on Citus) hands out no token to a non-admin either
SELECT cmp_ok((SELECT count(lease_token) FROM orch.tasks WHERE tenant_id = t), '>', 0::bigint,
              'fixture: tasks of ' || t || ' hold live lease tokens')
  FROM unnest(ARRAY['ta', 'tb']) t;
SELECT is(pg_temp.as_role(role, format('SELECT count(lease_token) FROM orch.caller_%s()', f)),
          CASE WHEN kind = 'nobody' THEN '42501'
               WHEN kind = 'admin' THEN
                 (CASE f WHEN 'tasks' THEN (SELECT count(lease_token) FROM orch.tasks WHERE eff IS NULL OR tenant_id = ANY (eff))
                         WHEN 'attempts' THEN (SELECT count(lease_token) FROM orch.attempt_history WHERE eff IS NULL OR tenant_id = ANY (eff))
                         ELSE (SELECT count(lease_token) FROM orch.history WHERE eff IS NULL OR tenant_id = ANY (eff)) END)::text
               ELSE '0' END,
          role || CASE WHEN kind = 'admin' THEN ' reads' ELSE ' does not read' END || ' the lease tokens of orch.caller_' || f || '()')
  FROM tt_roles, unnest(ARRAY['tasks', 'attempts', 'events']) f ORDER BY ord, f;
SELECT is(pg_temp.as_role(role, 'SELECT count(*) FROM orch_tasks WHERE to_jsonb(orch_tasks) ?| ARRAY[''lease_token'', ''token'']'),
          CASE WHEN kind = 'nobody' THEN '42501' ELSE '0' END,
          role || ': orch_tasks has no token column')
  FROM tt_roles ORDER BY ord;
SELECT is((SELECT count(*) FROM pg_attribute WHERE attrelid = v::regclass AND attname::text ~ 'token' AND NOT attisdropped),
          0::bigint, v || ' has no token column')
  FROM unnest(ARRAY['orch_tasks', 'orch_dead_letters', 'orch_commands', 'orch_queues']) v;
SELECT is((SELECT count(*) FROM pg_attribute WHERE attrelid = 'orch.task_status'::regclass AND attname::text ~ 'token'),
          0::bigint, 'orch_status returns no token');
-- a worker learns its own token from the claim, and it works
SELECT ok(orch_enqueue('q_tok', '{}', tenant => 'ta') > 0, 'fixture: a ta task in q_tok');
SELECT is(pg_temp.as_role('t_worker_a',
    $$SELECT orch_complete(d.task_id, d.lease_token, '{}') FROM orch_dequeue('q_tok', 'tok-check', 1) d$$),
    'completed', 'a non-admin worker gets its lease token from orch_dequeue and completes with it');

-- ---------------------------------------------------------------------------
-- 6. Events: actor is the role the call acted for (current role, not
--    session_user), label the name the caller gave.
-- ---------------------------------------------------------------------------
SELECT coalesce(max(id), 0) AS ev_mark FROM orch.history \gset
CREATE TEMP TABLE tt_actor (what text, task_id bigint, token uuid);
GRANT ALL ON tt_actor TO PUBLIC;
SET LOCAL ROLE t_producer_a;
INSERT INTO tt_actor SELECT 'enqueued', orch_enqueue('q_actor', '{"a": 1}'), NULL;
RESET ROLE;
SET LOCAL ROLE t_worker_a;
INSERT INTO tt_actor SELECT 'claimed', d.task_id, d.lease_token FROM orch_dequeue('q_actor', 'worker-A1') d;
INSERT INTO tt_actor SELECT 'completed', task_id, NULL FROM tt_actor
 WHERE what = 'claimed' AND orch_complete(task_id, token, '{"ok": true}') = 'completed';
RESET ROLE;
SELECT is((SELECT array_agg(task_id ORDER BY what) FROM tt_actor),
          array_fill((SELECT task_id FROM tt_actor WHERE what = 'enqueued'), ARRAY[3]),
          't_worker_a claimed and completed the task t_producer_a enqueued');
SELECT results_eq(
    format('SELECT from_state, to_state, actor, label, tenant_id FROM orch.history WHERE task_id = %s ORDER BY id',
           (SELECT task_id FROM tt_actor WHERE what = 'enqueued')),
    $$VALUES ('received'::text, 'queued'::text, 't_producer_a'::text, NULL::text, 'ta'::text),
             ('queued', 'executing', 't_worker_a', 'worker-A1', 'ta'),
             ('executing', 'completed', 't_worker_a', 'worker-A1', 'ta')$$,
    'events: actor is the role after SET ROLE (not session_user), label the worker name');
SELECT is((SELECT worker FROM orch.attempt_history WHERE task_id = (SELECT task_id FROM tt_actor WHERE what = 'enqueued')),
          'worker-A1', 'the attempt records the worker name');
SELECT is((SELECT lease_owner FROM orch.tasks WHERE id = (SELECT task_id FROM tt_actor WHERE what = 'enqueued')),
          'worker-A1', 'the task records the worker name as its lease owner');

-- orch_history, read by a bound reader: roles in actor, names in label, no token
CREATE TEMP TABLE tt_hist (at timestamptz, kind text, attempt integer, from_state text, to_state text,
                          reason_code text, actor text, lease_token uuid, outcome text,
                          error_class text, error text, note text, label text, correlation_id text);
GRANT ALL ON tt_hist TO PUBLIC;
SET LOCAL ROLE t_reader_a;
SELECT format('INSERT INTO tt_hist SELECT * FROM orch_history(%s)', task_id) AS hist_sql FROM tt_actor WHERE what = 'enqueued' \gset
:hist_sql;
RESET ROLE;
SELECT is((SELECT count(*) FROM tt_hist), 4::bigint, 'orch_history: three events and one attempt');
SELECT is((SELECT count(*) FROM tt_hist WHERE lease_token IS NOT NULL), 0::bigint, 'orch_history shows a reader no token');
SELECT is((SELECT array_agg(DISTINCT actor ORDER BY actor) FROM tt_hist WHERE kind = 'event'),
          ARRAY['t_producer_a', 't_worker_a'], 'orch_history: the events'' actors are the roles');
SELECT is((SELECT count(*) FROM tt_hist WHERE actor = 'worker-A1'), 0::bigint,
          'orch_history never shows the worker name as actor (attempt rows included)');
SELECT is((SELECT count(*) FROM tt_hist WHERE actor IS NOT NULL AND actor NOT IN (SELECT rolname FROM pg_roles)), 0::bigint,
          'orch_history: every actor is a database role');
SELECT is((SELECT array_agg(kind || ':' || label ORDER BY kind, label) FROM tt_hist WHERE label IS NOT NULL),
          ARRAY['attempt:worker-A1', 'event:worker-A1', 'event:worker-A1'],
          'orch_history: the worker name is in label (claim and completion events, and the attempt)');

-- approver, producer, worker, admin: actor = role, label = given name
SET LOCAL ROLE t_approver_a;
SELECT orch_confirm(pg_temp.fx('conf', 'ta'), true, 'alice', 'looks fine') AS confirmed \gset
RESET ROLE;
SELECT is(:'confirmed'::text, 'awaiting_user_confirmation', 't_approver_a approved the ta task');
SELECT results_eq(
    format('SELECT actor, label, note, reason_code FROM orch.history WHERE task_id = %s AND id > %s ORDER BY id',
           pg_temp.fx('conf', 'ta'), :ev_mark),
    $$VALUES ('t_approver_a'::text, 'alice'::text, 'looks fine'::text, 'confirmation_approved'::text)$$,
    'orch_confirm: actor is the approver role, the actor argument is the label');
SELECT is((SELECT resume_data->>'actor' || '/' || (resume_data->>'label') FROM orch.tasks WHERE id = pg_temp.fx('conf', 'ta')),
          't_approver_a/alice', 'the confirmation handed to the worker names the role and the label');
SET LOCAL ROLE t_producer_b;
SELECT orch_cancel(pg_temp.fx('queued', 'tb'), 'no longer needed') AS cancelled \gset
RESET ROLE;
SELECT results_eq(
    format('SELECT actor, label, note, to_state FROM orch.history WHERE task_id = %s AND id > %s ORDER BY id',
           pg_temp.fx('queued', 'tb'), :ev_mark),
    $$VALUES ('t_producer_b'::text, NULL::text, 'no longer needed'::text, 'cancelled'::text)$$,
    'orch_cancel: actor is the producer role, the reason is the note');
SET LOCAL ROLE t_worker_b;
SELECT f.state AS failed FROM orch_fail(pg_temp.fx('exec', 'tb'), pg_temp.tok('exec', 'tb'), 'NON_RETRYABLE', 'broken') f \gset
RESET ROLE;
SELECT results_eq(
    format('SELECT actor, label, to_state FROM orch.history WHERE task_id = %s AND id > %s ORDER BY id',
           pg_temp.fx('exec', 'tb'), :ev_mark),
    $$VALUES ('t_worker_b'::text, 'fx-worker'::text, 'failed'::text)$$,
    'orch_fail: actor is the calling role, label the lease owner (worker name)');
SET LOCAL ROLE t_worker_a;
SELECT count(*) AS exp_claimed FROM orch_dequeue('q_exp', 'worker-A2') \gset
RESET ROLE;
SELECT results_eq(
    format($$SELECT tenant_id, actor, reason_code FROM orch.history WHERE id > %s AND reason_code = 'lease_expired' ORDER BY id$$,
           :ev_mark),
    $$VALUES ('ta'::text, 't_worker_a'::text, 'lease_expired'::text)$$,
    'a lease recovered by a bound worker''s claim: its tenant only, actor = the worker role');
SET LOCAL ROLE t_admin_a;
SELECT orch_retry(pg_temp.fx('dead', 'ta')) AS redriven \gset
RESET ROLE;
SELECT results_eq(
    format($$SELECT actor, reason_code FROM orch.history WHERE task_id = %s AND id > %s ORDER BY id$$,
           pg_temp.fx('dead', 'ta'), :ev_mark),
    $$VALUES ('t_admin_a'::text, 'redriven'::text)$$,
    'orch_retry by a bound admin on its own tenant: actor = the admin role');
-- workflows: the run records the producer role, the approval the approver
-- role (actor) and the name it gave (label)
SET LOCAL ROLE t_producer_a;
SELECT orch_start('tt_wf', '{"actor": 1}') AS actor_run \gset
RESET ROLE;
SELECT is((SELECT tenant_id || '/' || created_by FROM orch.runs WHERE id = :actor_run), 'ta/t_producer_a',
          'orch_start by a bound producer: a run of its tenant, created_by = the producer role');
SELECT results_eq(format($$SELECT actor, to_state, tenant_id FROM orch.history WHERE run_id = %s AND entity = 'run' ORDER BY id$$, :actor_run),
                  $$VALUES ('t_producer_a'::text, 'running'::text, 'ta'::text)$$,
                  'orch_start: the run''s start event names the producer role');
SET LOCAL ROLE t_approver_a;
SELECT orch_approve(pg_temp.fx('run_wait', 'ta'), 'gate', 'actor-ref', 'carol', 'ship it') AS approved_state \gset
RESET ROLE;
SELECT is(:'approved_state'::text, 'succeeded', 't_approver_a approved its tenant''s run (it succeeded)');
SELECT is((SELECT actor || '/' || label || '/' || note FROM orch.approvals WHERE approval_ref = 'actor-ref'),
          't_approver_a/carol/ship it', 'orch_approve: the approval records the approver role as actor, the actor argument as label');
SELECT results_eq(format($$SELECT actor, label, reason_code FROM orch.history WHERE run_id = %s AND id > %s AND entity = 'run_step' ORDER BY id$$,
                         pg_temp.fx('run_wait', 'ta'), :ev_mark),
                  $$VALUES ('t_approver_a'::text, 'carol'::text, 'step_succeeded'::text)$$,
                  'orch_approve: the step''s event names the approver role, the given name is its label');
SELECT is((SELECT count(*) FROM orch.history WHERE id > :ev_mark AND actor = session_user), 0::bigint,
          'no event of this section names the session user (every call ran under SET ROLE)');
SELECT is((SELECT count(*) FROM orch.history WHERE id > :ev_mark AND actor NOT IN (SELECT rolname FROM pg_roles)), 0::bigint,
          'every event''s actor is a database role');

-- ---------------------------------------------------------------------------
-- 7. Row-level security on the tables, for roles a DBA grants direct access.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE tt_rls (tbl text);
INSERT INTO tt_rls VALUES ('tasks'), ('attempts'), ('events'), ('idempotency_keys'), ('commands'),
                          ('rate_window'), ('concurrency_limits'), ('runs'), ('run_steps'), ('approvals'),
                          ('gate_repairs'), ('metric_totals'), ('metric_minutes'), ('schedules'), ('signals');
SELECT ok((SELECT relrowsecurity FROM pg_class WHERE oid = ('orch.' || tbl)::regclass),
          'row-level security is enabled on orch.' || tbl)
  FROM tt_rls ORDER BY tbl;
SELECT is((SELECT string_agg(format('%s %s %s/%s', policyname, cmd, qual, with_check), '; ')
             FROM pg_policies WHERE schemaname = 'orch' AND tablename = tbl),
          'tenant_isolation ALL orch.tenant_visible(tenant_id)/orch.tenant_visible(tenant_id)',
          'orch.' || tbl || ' has exactly the policy tenant_isolation USING/WITH CHECK orch.tenant_visible(tenant_id)')
  FROM tt_rls ORDER BY tbl;
SELECT cmp_ok((SELECT count(DISTINCT tenant_id) FROM orch.tasks), '>=', 3::bigint, 'fixture: orch.tasks holds three tenants');
SELECT cmp_ok((SELECT count(DISTINCT tenant_id) FROM orch.rate_window), '>=', 2::bigint, 'fixture: orch.rate_window holds two tenants');
SELECT cmp_ok((SELECT count(DISTINCT tenant_id) FROM orch.idempotency_keys), '>=', 1::bigint, 'fixture: orch.idempotency_keys has rows');
SELECT cmp_ok((SELECT count(DISTINCT tenant_id) FROM orch.approvals), '>=', 2::bigint, 'fixture: orch.approvals holds two tenants');
SELECT ok(NOT (SELECT relrowsecurity FROM pg_class WHERE oid = 'orch.definitions'::regclass),
          'orch.definitions (shared by every tenant) has no row-level security');

DO $$
DECLARE t text;
BEGIN
    FOR t IN SELECT tbl FROM tt_rls LOOP
        EXECUTE format('GRANT SELECT ON orch.%I TO t_reader_a, t_reader_u, t_worker_ab, t_worker_g', t);
    END LOOP;
END $$;
SELECT is(pg_temp.as_role(r.role, format($$SELECT pg_temp.tt_counts('SELECT tenant_id FROM orch.%I')$$, t.tbl)),
          pg_temp.tt_counts(format('SELECT tenant_id FROM orch.%I WHERE %L::text[] IS NULL OR tenant_id = ANY (%L::text[])',
                                   t.tbl, r.eff, r.eff)),
          format('a direct SELECT on orch.%s by %s (SELECT granted) sees %s', t.tbl, r.role,
                 coalesce(array_to_string(r.eff, ','), 'every tenant')))
  FROM tt_roles r, tt_rls t
 WHERE r.role IN ('t_reader_a', 't_reader_u', 't_worker_ab', 't_worker_g') ORDER BY r.ord, t.tbl;
SELECT is(pg_temp.as_role('t_reader_a', $$SELECT count(*) FROM orch.tasks WHERE tenant_id = 'tb'$$), '0',
          'a bound role''s direct SELECT finds no row of another tenant even when it asks for one');

-- writes through a direct grant are checked too (WITH CHECK)
GRANT INSERT ON orch.events TO t_worker_a;
GRANT USAGE ON SEQUENCE orch.events_id_seq TO t_worker_a;
GRANT UPDATE ON orch.commands TO t_worker_a;
GRANT SELECT ON orch.commands TO t_worker_a;
SELECT is(pg_temp.as_role_msg('t_worker_a', $$INSERT INTO orch.events (tenant_id, entity, actor, note) VALUES ('tb', 'task', 'x', 'rls')$$),
          '42501: new row violates row-level security policy for table "events"',
          'a bound role with INSERT cannot insert a row of another tenant');
SELECT is(pg_temp.as_role_msg('t_worker_a', $$INSERT INTO orch.events (tenant_id, entity, actor, note) VALUES ('ta', 'task', 'x', 'rls')$$),
          'ok', 'a bound role with INSERT can insert a row of its tenant');
SELECT is(pg_temp.as_role_msg('t_worker_a', $$UPDATE orch.commands SET result = '{"rls": true}'$$),
          'ok', 'a bound role with UPDATE updates rows');
SELECT is((SELECT string_agg(tenant_id || ':' || count, ',' ORDER BY tenant_id)
             FROM (SELECT tenant_id, count(*) FROM orch.commands WHERE result @> '{"rls": true}' GROUP BY 1) s),
          'ta:' || (SELECT count(*) FROM orch.commands WHERE tenant_id = 'ta'),
          '... but only the rows of its tenant');
SELECT is(pg_temp.as_role_msg('t_worker_a', $$UPDATE orch.commands SET tenant_id = 'tb' WHERE tenant_id = 'ta'$$),
          '42501: new row violates row-level security policy for table "commands"',
          'a bound role cannot move a row to another tenant');
DO $$
DECLARE t text;
BEGIN
    FOR t IN SELECT tbl FROM tt_rls LOOP
        EXECUTE format('REVOKE SELECT ON orch.%I FROM t_reader_a, t_reader_u, t_worker_ab, t_worker_g', t);
    END LOOP;
END $$;
REVOKE INSERT ON orch.events FROM t_worker_a;
REVOKE USAGE ON SEQUENCE orch.events_id_seq FROM t_worker_a;
REVOKE SELECT, UPDATE ON orch.commands FROM t_worker_a;
SELECT is(pg_temp.as_role('t_reader_a', 'SELECT count(*) FROM orch.tasks'), '42501', 'the direct grant is revoked again');

-- ---------------------------------------------------------------------------
-- 8. A bound role cannot shed its binding by switching to a role it is a
--    member of (SET ROLE orch_worker from a session of t_worker_a).
-- ---------------------------------------------------------------------------
SELECT is(pg_temp.as_session('t_worker_a', NULL, 'SELECT orch_caller_tenants()::text'), '{ta}',
          'a session of t_worker_a is bound to ta');
SELECT is(pg_temp.as_session('t_worker_a', 'orch_worker', 'SELECT coalesce(orch_caller_tenants()::text, ''<null>'')'), '{ta}',
          'after SET ROLE orch_worker, a session of t_worker_a is still bound to ta');
SELECT is(pg_temp.as_session('t_worker_a', 'orch_worker',
              $$SELECT coalesce(string_agg(d.payload->>'n', ',' ORDER BY d.payload->>'n'), '') FROM orch_dequeue('q_claim', 'escape', 10) d$$),
          'ta', 'after SET ROLE orch_worker, a session of t_worker_a still claims only ta''s work');
SELECT is(pg_temp.as_session('t_worker_a', 'orch_worker',
              format('SELECT state FROM orch_status(%s)', pg_temp.fx('queued', 'ta'))),
          'queued', 'after SET ROLE orch_worker, the session still sees its own tenant');
SELECT is(pg_temp.as_session('t_worker_a', 'orch_worker', 'SELECT count(*) FROM orch_tasks WHERE tenant_id <> ''ta'''),
          '0', 'after SET ROLE orch_worker, a session of t_worker_a sees no other tenant in orch_tasks');

-- ---------------------------------------------------------------------------
-- 9. Bindings come and go; several bindings; orchestrator.auto_create_queues.
-- ---------------------------------------------------------------------------
SELECT is(pg_temp.as_role('t_spare', 'SELECT coalesce(orch_caller_tenants()::text, ''<null>'')'), '<null>',
          'an unbound role is unrestricted');
SELECT is(orch_bind_tenant('t_spare', 'tz'), true, 'bind t_spare to tz');
SELECT is(pg_temp.as_role('t_spare', 'SELECT orch_caller_tenants()::text'), '{tz}', 'the binding applies at once');
SELECT is(pg_temp.as_role('t_spare', 'SELECT count(*) FROM orch_tasks'), '0', 't_spare (tz) sees no task');
SELECT is(orch_unbind_tenant('t_spare', 'tz'), true, 'unbind t_spare from tz');
SELECT is(pg_temp.as_role('t_spare', 'SELECT coalesce(orch_caller_tenants()::text, ''<null>'')'), '<null>',
          'a role left with no binding is unrestricted again');
SELECT is(pg_temp.as_role('t_spare', 'SELECT count(*) FROM orch_tasks'), (SELECT count(*) FROM orch.tasks)::text,
          '... and sees every task');
SELECT is((SELECT string_agg(reason_code || ':' || actor || ':' || tenant_id, ',' ORDER BY id) FROM orch.history
            WHERE entity = 'tenant_binding' AND id > :ev_mark),
          'tenant_bound:postgres:tz,tenant_unbound:postgres:tz', 'binding and unbinding are audited');

SELECT is((SELECT context FROM pg_settings WHERE name = 'orchestrator.auto_create_queues'), 'superuser',
          'orchestrator.auto_create_queues is a superuser setting');
SELECT is(pg_temp.as_role(role, $$SELECT set_config('orchestrator.auto_create_queues', 'off', true)$$), '42501',
          role || ' may not change orchestrator.auto_create_queues')
  FROM tt_roles WHERE role IN ('t_producer_a', 't_producer_u', 't_admin_u', 't_nobody') ORDER BY ord;
SELECT is(pg_temp.as_role_msg('t_producer_u', 'SET orchestrator.auto_create_queues = off'),
          '42501: permission denied to set parameter "orchestrator.auto_create_queues"',
          'SET orchestrator.auto_create_queues by a non-superuser is 42501');
SELECT is(set_config('orchestrator.auto_create_queues', 'off', true), 'off', 'the superuser turns auto_create_queues off');
SELECT is(pg_temp.as_role('t_producer_a', $$SELECT orch_enqueue('q_never_created', '{}')$$), 'OR005',
          'with auto_create_queues off, a producer cannot create a queue by enqueueing');
SELECT is(current_setting('orchestrator.auto_create_queues'), 'off', 'the producer did not turn it back on');

SELECT * FROM finish();
ROLLBACK;
