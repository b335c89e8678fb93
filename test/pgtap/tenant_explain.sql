-- tenant_explain: nothing of another tenant shows in a plan.  The oracle: a role bound to tenant tb runs EXPLAIN (ANALYZE, FORMAT
-- JSON) of a query on each view it can read, with a predicate on one of
-- tenant ta's values, twice: once with the value ta holds (ta has a matching
-- row) and once with another value of the same length (no row matches).
-- The two plans, the literal masked, must be identical: no node ran or
-- stopped, no row was counted or removed, because of ta's row.  Up to 0.7.0
-- they were not: the views filtered by tenant inside, and PostgreSQL
-- evaluated the caller's leakproof comparison (text =, <) first, or used it
-- as an index condition, so a binary search over "< value" read another
-- tenant's last_error or idempotency key from "never executed" and "Rows
-- Removed by Filter".
--
-- Then: the fence leaves unbound roles their indexes (an unbound role's
-- condition on an indexed column is an index condition, in the view's
-- first branch; a bound role's never reaches the table), the planner's
-- estimates show no tenant content (statistics target 0 on those columns),
-- and the measured residue: the estimates of the other columns (tenant_id
-- here), and a role given direct SELECT on a table with row-level security
-- (PostgreSQL evaluates leakproof conditions before a policy).
-- Run: pg_prove -d DB test/pgtap/tenant_explain.sql
\set QUIET 1
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS orchestrator;

BEGIN;
SELECT plan(81);
SET LOCAL jit = off;

-- ---------------------------------------------------------------------------
-- Roles (created in this transaction, rolled back at the end): tx_b, an
-- administrator bound to tb (it reads every view, orch_tenant_bindings
-- included); tx_u, an unbound administrator; tx_p_a, a producer bound to ta
-- (its enqueue creates ta's queue); tx_secret_role_a, bound to ta (a name
-- tb must not learn).
-- ---------------------------------------------------------------------------
CREATE ROLE tx_b NOLOGIN;
CREATE ROLE tx_u NOLOGIN;
CREATE ROLE tx_p_a NOLOGIN;
CREATE ROLE tx_secret_role_a NOLOGIN;
GRANT orch_admin TO tx_b, tx_u;
GRANT orch_producer TO tx_p_a;
DO $$
BEGIN
    PERFORM orch_bind_tenant('tx_b', 'tb');
    PERFORM orch_bind_tenant('tx_p_a', 'ta');
    PERFORM orch_bind_tenant('tx_secret_role_a', 'ta');
END $$;

-- ---------------------------------------------------------------------------
-- Fixtures: the same shapes for ta and tb, values prefixed with the tenant:
-- a queued task with an idempotency key and a correlation id, a dead letter
-- (its attempt, events, last_error), a command, a workflow run, a queue made
-- by ta's enqueue, counters folded, a maintenance pass.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE fx (name text PRIMARY KEY, id bigint);
GRANT SELECT ON fx TO PUBLIC;
DO $$
DECLARE t text; tid bigint; c record;
BEGIN
    PERFORM orch_create_queue('tx_q');
    PERFORM orch_create_queue('tx_dq');
    PERFORM orch_create_queue('tx_wq');
    PERFORM orch_define('tx_wf', '{"steps": [{"step_id": "s", "queue": "tx_wq", "handler": "tx.h"}]}');
    PERFORM orch_publish('tx_wf', 1);
    FOREACH t IN ARRAY ARRAY['ta', 'tb'] LOOP
        tid := orch_enqueue('tx_q', jsonb_build_object('secret', t || '-payload-5'), tenant => t,
                            idempotency_key => t || '-idem-5', correlation_id => t || '-corr-5');
        INSERT INTO fx VALUES (t || '_task', tid);
        tid := orch_enqueue('tx_dq', '{}', tenant => t);
        SELECT d.task_id, d.lease_token INTO c FROM orch_dequeue('tx_dq', t || '-worker', 1, tenant => t) d;
        IF c.task_id IS DISTINCT FROM tid THEN
            RAISE EXCEPTION 'setup: claimed % instead of %', c.task_id, tid;
        END IF;
        PERFORM orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', t || '-error-5');
        INSERT INTO fx VALUES (t || '_dead', tid);
        INSERT INTO fx SELECT t || '_cmd', x.command_id FROM orch_command('tx.kind', t || '-cmd-5', '{}', tenant => t) x;
        INSERT INTO fx VALUES (t || '_run', orch_start('tx_wf', jsonb_build_object('secret', t || '-input-5'),
                                                      idempotency_key => t || '-run-5', tenant => t));
        PERFORM orch_signal((SELECT id FROM fx WHERE name = t || '_run'), 'tx.signal', jsonb_build_object('secret', t || '-signal-5'));
    END LOOP;
END $$;
DO $$
BEGIN
    SET LOCAL ROLE tx_p_a;
    PERFORM orch_enqueue('tx-ta-secret-q5', '{}');
    RESET ROLE;
    PERFORM orch_maintain(10);
END $$;
-- counters (a fold counts only what committed before it: written here)
INSERT INTO orch.metric_totals (tenant_id, queue, metric, l1, l2, value)
SELECT t, q, m, 'NON_RETRYABLE', 'non_retryable', 1
  FROM unnest(ARRAY['ta', 'tb']) t, unnest(ARRAY['failed', 'retry', 'enqueued']) m,
       LATERAL (SELECT CASE WHEN t = 'ta' THEN 'tx-ta-secret-q5' ELSE 'tx_q' END AS q) x;
INSERT INTO orch.metric_minutes (minute, tenant_id, queue, metric, l1, l2, value)
SELECT date_trunc('minute', now()), tenant_id, queue, metric, l1, l2, value FROM orch.metric_totals;

SELECT is((SELECT tenant_id FROM orch.queues WHERE name = 'tx-ta-secret-q5'), 'ta', 'fixture: ta''s enqueue made a queue of ta');
SELECT is((SELECT string_agg(tenant_id || ':' || last_error, ',' ORDER BY tenant_id) FROM orch.tasks WHERE state = 'failed'),
          'ta:ta-error-5,tb:tb-error-5', 'fixture: one dead letter in each tenant');
SELECT cmp_ok((SELECT count(*) FROM orch.maintenance_log), '>', 0::bigint, 'fixture: a maintenance pass is logged');
SELECT cmp_ok((SELECT count(*) FROM orch.metric_totals WHERE tenant_id = 'ta'), '>', 0::bigint,
              'fixture: counters of ta');

-- plan_as(role, query): the EXPLAIN (ANALYZE, FORMAT JSON) of query run as
-- role, with costs, timings and the summary off (what is left is the plan
-- shape, the conditions, and per node the rows and loops).
CREATE FUNCTION pg_temp.plan_as(r name, q text, run boolean DEFAULT true) RETURNS text LANGUAGE plpgsql AS $$
DECLARE p json;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE format('EXPLAIN (ANALYZE %s, COSTS %s, TIMING OFF, SUMMARY OFF, FORMAT JSON) %s',
                   CASE WHEN run THEN 'on' ELSE 'off' END, CASE WHEN run THEN 'off' ELSE 'on' END, q) INTO p;
    RESET ROLE;
    RETURN p::text;
END $$;
-- oracle(role, view, predicate with %s for the literal, value, other):
-- the plan with the value in place, the literal masked, and the same with
-- the other value.
CREATE FUNCTION pg_temp.oracle(r name, v text, pred text, val text, other text, run boolean DEFAULT true)
RETURNS text[] LANGUAGE sql AS $$
    SELECT ARRAY[replace(pg_temp.plan_as(r, format('SELECT * FROM %s WHERE %s', v, format(pred, quote_literal(val))), run),
                         quote_literal(val), '<v>'),
                 replace(pg_temp.plan_as(r, format('SELECT * FROM %s WHERE %s', v, format(pred, quote_literal(other))), run),
                         quote_literal(other), '<v>')]
$$;

-- ---------------------------------------------------------------------------
-- 1. The oracle, view by view, for tx_b (bound to tb), on ta's values.
--    val: what ta holds (its row matches), other: what nobody holds.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE probes (ord serial, v text, pred text, val text, other text);
INSERT INTO probes (v, pred, val, other) VALUES
    ('orch_tasks', 'idempotency_key = %s', 'ta-idem-5', 'ta-idem-6'),
    ('orch_tasks', 'idempotency_key < %s', 'ta-idem-6', 'ta-idem-4'),   -- one step of a binary search
    ('orch_tasks', 'last_error = %s', 'ta-error-5', 'ta-error-6'),
    ('orch_tasks', 'last_error > %s', 'ta-error-4', 'ta-error-6'),
    ('orch_tasks', 'correlation_id = %s', 'ta-corr-5', 'ta-corr-6'),    -- an indexed column
    ('orch_tasks', 'task_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_task')::text, '999999999'),
    ('orch_tasks', 'tenant_id = %s', 'ta', 'tz'),
    ('orch_dead_letters', 'last_error = %s', 'ta-error-5', 'ta-error-6'),
    ('orch_dead_letters', 'task_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_dead')::text, '999999999'),
    ('orch_attempts', 'error = %s', 'ta-error-5', 'ta-error-6'),
    ('orch_attempts', 'task_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_dead')::text, '999999999'),
    ('orch_events', 'task_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_dead')::text, '999999999'),
    ('orch_events', 'label = %s', 'ta-worker', 'ta-workex'),
    ('orch_commands', 'idempotency_key = %s', 'ta-cmd-5', 'ta-cmd-6'),
    ('orch_commands', 'command_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_cmd')::text, '999999999'),
    ('orch_runs', 'idempotency_key = %s', 'ta-run-5', 'ta-run-6'),
    ('orch_runs', 'run_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_run')::text, '999999999'),
    ('orch_run_steps', 'run_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_run')::text, '999999999'),
    ('orch_signals', 'run_id = %s::bigint', (SELECT id FROM fx WHERE name = 'ta_run')::text, '999999999'),
    ('orch_signals', 'payload ->> ''secret'' = %s', 'ta-signal-5', 'ta-signal-6'),
    ('orch_queues', 'queue = %s', 'tx-ta-secret-q5', 'tx-ta-secret-q6'),
    ('orch_queues', 'queue < %s', 'tx-ta-secret-q6', 'tx-ta-secret-q4'),
    ('orch_tenant_bindings', 'role = %s', 'tx_secret_role_a', 'tx_secret_role_z'),
    ('orch_tenant_bindings', 'tenant_id = %s', 'ta', 'tz'),
    ('orch_queue_stats', 'queue = %s', 'tx-ta-secret-q5', 'tx-ta-secret-q6'),
    ('orch_queue_stats', 'tenant_id = %s', 'ta', 'tz'),
    ('orch_error_stats', 'tenant_id = %s', 'ta', 'tz'),
    ('orch_error_stats', 'queue = %s', 'tx-ta-secret-q5', 'tx-ta-secret-q6'),
    ('orch_review_queue', 'error = %s', 'ta-error-5', 'ta-error-6'),
    ('orch_durations', 'tenant_id = %s', 'ta', 'tz'),
    ('orch_maintenance_log', 'actor = %s', 'postgres', 'postgrex');

-- each value is ta's (or, for the maintenance log, every tenant's) indeed
SELECT is((SELECT count(*) FROM orch.tasks WHERE idempotency_key = 'ta-idem-5' AND tenant_id = 'ta'), 1::bigint,
          'fixture: ta holds the idempotency key ta-idem-5');
SELECT cmp_ok((SELECT count(*) FROM orch.history WHERE label = 'ta-worker' AND tenant_id = 'ta'), '>', 0::bigint,
              'fixture: ta''s events carry the worker label ta-worker');
SELECT is((SELECT count(*) FROM orch.tenant_bindings WHERE role::text = 'tx_secret_role_a' AND tenant_id = 'ta'), 1::bigint,
          'fixture: tx_secret_role_a is bound to ta');

SELECT is(o[1], o[2], format('tx_b (bound to tb): EXPLAIN ANALYZE of %s WHERE %s is the same whether ta holds the value or not',
                             p.v, format(p.pred, '...')))
  FROM probes p, LATERAL (SELECT pg_temp.oracle('tx_b', p.v, p.pred, p.val, p.other) AS o) x
 ORDER BY p.ord;

-- the oracle would see a difference if there were one: for the unbound
-- tx_u, ta's row matches in one plan and not in the other
SELECT isnt(o[1], o[2], 'the oracle tells a matching row from none for an unbound role (orch_tasks, idempotency key)')
  FROM (SELECT pg_temp.oracle('tx_u', 'orch_tasks', 'idempotency_key = %s', 'ta-idem-5', 'ta-idem-6') AS o) x;

-- and the fence does not hide tb's own rows from tx_b
SET LOCAL ROLE tx_b;
SELECT is((SELECT count(*) FROM orch_tasks WHERE idempotency_key = 'tb-idem-5'), 1::bigint, 'tx_b finds its own idempotency key');
SELECT is((SELECT count(*) FROM orch_tasks WHERE idempotency_key IN ('ta-idem-5', 'tb-idem-5')), 1::bigint,
          'tx_b finds no row of ta, even by its value');
SELECT is((SELECT string_agg(last_error, ',') FROM orch_dead_letters), 'tb-error-5', 'tx_b lists its own dead letter only');
SELECT is((SELECT count(*) FROM orch_queues WHERE queue = 'tx-ta-secret-q5'), 0::bigint, 'tx_b does not see ta''s queue');
SELECT is((SELECT count(*) FROM orch_queues WHERE queue IN ('tx_q', 'tx_dq', 'tx_wq')), 3::bigint, 'tx_b sees the shared queues');
SELECT is((SELECT string_agg(role, ',') FROM orch_tenant_bindings), 'tx_b', 'tx_b reads only the bindings of tb');
SELECT is((SELECT count(*) FROM orch_maintenance_log), 0::bigint, 'tx_b (bound) reads no maintenance pass');
SELECT is((SELECT string_agg(DISTINCT tenant_id, ',') FROM orch_queue_stats), 'tb', 'tx_b reads its own queue statistics only');
RESET ROLE;
SET LOCAL ROLE tx_u;
SELECT is((SELECT count(*) FROM orch_tasks WHERE idempotency_key IN ('ta-idem-5', 'tb-idem-5')), 2::bigint,
          'the unbound tx_u finds both tenants'' keys');
SELECT cmp_ok((SELECT count(*) FROM orch_maintenance_log), '>', 0::bigint, 'the unbound tx_u reads the maintenance log');
RESET ROLE;

-- ---------------------------------------------------------------------------
-- 2. Unbound roles keep their indexes: the condition reaches the table as an
--    index condition (seq scans off, so that the tiny tables do not hide
--    it), and the bound role's branch does not run.  A bound role's
--    condition never reaches the table: it filters what orch.caller_tasks()
--    returns, its tenants' rows.
-- ---------------------------------------------------------------------------
-- (statistics taken now: autovacuum analyzing the small tables at a random
-- moment made the planner's choice between two indexes vary from run to run)
ANALYZE orch.tasks, orch.events, orch.attempts, orch.commands, orch.runs, orch.run_steps, orch.queues;
CREATE FUNCTION pg_temp.plan_noseq(r name, q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE p json;
BEGIN
    SET LOCAL enable_seqscan = off;
    EXECUTE format('SET LOCAL ROLE %I', r);
    EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, FORMAT JSON) ' || q INTO p;
    RESET ROLE;
    SET LOCAL enable_seqscan = on;
    RETURN p::text;
END $$;
-- (index: a pattern; runs and their steps are partitioned, each partition
-- with its own key index: runs_default_pkey, runs_p<first id>_pkey)
CREATE TEMP TABLE idx (ord serial, q text, index text);
INSERT INTO idx (q, index) VALUES
    (format('SELECT * FROM orch_tasks WHERE task_id = %s', (SELECT id FROM fx WHERE name = 'ta_task')), 'tasks_pkey'),
    ('SELECT * FROM orch_tasks WHERE correlation_id = ''ta-corr-5''', 'tasks_correlation_idx'),
    (format('SELECT * FROM orch_events WHERE task_id = %s', (SELECT id FROM fx WHERE name = 'ta_dead')), 'events_task_idx'),
    (format('SELECT * FROM orch_attempts WHERE task_id = %s', (SELECT id FROM fx WHERE name = 'ta_dead')), 'attempts_task_idx'),
    (format('SELECT * FROM orch_commands WHERE command_id = %s', (SELECT id FROM fx WHERE name = 'ta_cmd')), 'commands_pkey'),
    (format('SELECT * FROM orch_runs WHERE run_id = %s', (SELECT id FROM fx WHERE name = 'ta_run')), 'runs_\w+_pkey'),
    (format('SELECT * FROM orch_run_steps WHERE run_id = %s', (SELECT id FROM fx WHERE name = 'ta_run')), 'run_steps_\w+_pkey'),
    (format('SELECT * FROM orch_dead_letters WHERE task_id = %s', (SELECT id FROM fx WHERE name = 'ta_dead')), 'tasks_pkey'),
    ('SELECT * FROM orch_queues WHERE queue = ''tx_q''', 'queues_pkey');
SELECT ok(pg_temp.plan_noseq('tx_u', i.q) ~ ('"Index Name": "' || i.index || '"'),
          format('tx_u (unbound): %s uses %s', i.q, i.index))
  FROM idx i ORDER BY i.ord;
SELECT ok(pg_temp.plan_noseq('tx_u', i.q) ~ '"Function Name": "caller_tasks",[^{}]*"Actual Loops": 0',
          format('tx_u: the bound branch of %s never runs', i.q))
  FROM idx i WHERE i.ord = 1;
SELECT ok(pg_temp.plan_noseq('tx_b', i.q) !~ ('"Actual Loops": [1-9][0-9]*,\s*"Index Cond": "[^"]*' || x.cond),
          format('tx_b (bound): %s runs no index scan with the caller''s condition', i.q))
  FROM idx i JOIN (VALUES (1, '\(id = '), (2, 'correlation_id')) x(ord, cond) USING (ord) ORDER BY i.ord;
SELECT ok(pg_temp.plan_noseq('tx_b', i.q) ~ ('"Function Name": "caller_tasks",[^{}]*"Filter": "\(' || x.cond),
          format('tx_b (bound): the condition of %s filters what orch.caller_tasks() returns', i.q))
  FROM idx i JOIN (VALUES (1, 'id = '), (2, 'correlation_id = ')) x(ord, cond) USING (ord) ORDER BY i.ord;

-- ---------------------------------------------------------------------------
-- 3. Estimates.  The planner's statistics cover every tenant; the columns
--    holding a tenant's values have none (statistics target 0), so an
--    estimate does not tell whether ta's value is common.  The other
--    columns keep theirs: an estimate for tenant_id = 'ta' shows how many
--    rows ta has (residue, docs/security.md).
-- ---------------------------------------------------------------------------
INSERT INTO orch.tasks (tenant_id, queue, state, payload, last_error, idempotency_key)
SELECT 'ta', 'tx_q', 'queued', '{}', 'ta-common-error', 'ta-common-' || g FROM generate_series(1, 300) g;
ANALYZE orch.tasks;
SELECT is((SELECT count(*) FROM pg_stats WHERE schemaname = 'orch' AND tablename = 'tasks'
            AND attname IN ('payload', 'last_error', 'idempotency_key', 'correlation_id', 'result')), 0::bigint,
          'ANALYZE keeps no statistics of the content columns of orch.tasks');
SELECT is((SELECT count(*) FROM pg_attribute WHERE attrelid = 'orch.tasks'::regclass AND attnum > 0 AND attstattarget = 0), 12::bigint,
          'twelve columns of orch.tasks have statistics target 0 (progress among them, 0.8.0)');
SELECT is(o[1], o[2], 'tx_b: the estimates of orch_tasks WHERE last_error = ... are the same for ta''s common value and another')
  FROM (SELECT pg_temp.oracle('tx_b', 'orch_tasks', 'last_error = %s', 'ta-common-error', 'ta-common-errox', false) AS o) x;
SELECT is(o[1], o[2], 'tx_b: the estimates of orch_tasks WHERE idempotency_key < ... do not follow ta''s keys')
  FROM (SELECT pg_temp.oracle('tx_b', 'orch_tasks', 'idempotency_key < %s', 'ta-common-5', 'ta-common-0', false) AS o) x;
-- The ids that link rows to a task or a run: ta's dead letter has several
-- events and attempts, its run several steps; an estimate by one of those
-- ids is the estimate for an id nobody uses.
INSERT INTO orch.events (tenant_id, task_id, entity, from_state, to_state, reason_code, actor)
SELECT 'ta', (SELECT id FROM fx WHERE name = 'ta_dead'), 'task', 'failed', 'failed', 'tx_noise', 'tx'
  FROM generate_series(1, 300);
ANALYZE orch.events;
ANALYZE orch.attempts;
ANALYZE orch.run_steps;
SELECT is(o[1], o[2], format('tx_b: the estimates of %s WHERE %s = ... are the same for ta''s id and an unused one', x.v, split_part(x.pred, ' ', 1)))
  FROM (VALUES (1, 'orch_events', 'task_id = %s::bigint', 'ta_dead'),
               (2, 'orch_attempts', 'task_id = %s::bigint', 'ta_dead'),
               (3, 'orch_events', 'run_id = %s::bigint', 'ta_run'),
               (4, 'orch_run_steps', 'run_id = %s::bigint', 'ta_run'),
               (5, 'orch_tasks', 'run_id = %s::bigint', 'ta_run')) x(ord, v, pred, fx_name),
       LATERAL (SELECT pg_temp.oracle('tx_b', x.v, x.pred, (SELECT id FROM fx WHERE name = x.fx_name)::text,
                                      '999999999', false) AS o) y
 ORDER BY x.ord;
SELECT isnt(o[1], o[2], 'residue: the estimates of orch_tasks WHERE tenant_id = ... show how many rows ta has')
  FROM (SELECT pg_temp.oracle('tx_b', 'orch_tasks', 'tenant_id = %s', 'ta', 'tz', false) AS o) x;

-- The readers by key: a call with ta's id and one with an id nobody uses
-- run the same plan (a function scan: its arguments are not shown) and
-- return as many rows (none).
SELECT is(pg_temp.plan_as('tx_b', format(x.q, (SELECT id FROM fx WHERE name = x.fx_name))),
          pg_temp.plan_as('tx_b', format(x.q, 999999999)),
          format('tx_b: EXPLAIN ANALYZE of %s is the same for ta''s id and an unused one', format(x.q, '...')))
  FROM (VALUES (1, 'SELECT * FROM orch_task_rows(task_ids => ARRAY[%s]::bigint[])', 'ta_task'),
               (2, 'SELECT * FROM orch_task_rows(run_id => %s)', 'ta_run'),
               (3, 'SELECT * FROM orch_task_rows(retry_of => %s)', 'ta_task'),
               (4, 'SELECT * FROM orch_run_rows(run_ids => ARRAY[%s]::bigint[])', 'ta_run'),
               (5, 'SELECT * FROM orch_run_step_rows(%s)', 'ta_run')) x(ord, q, fx_name)
 ORDER BY x.ord;

-- ---------------------------------------------------------------------------
-- 4. Residue: a bound role that a DBA grants SELECT on a table reads
--    through row-level security, which PostgreSQL lets a leakproof
--    condition pass: the oracle works there.  Read through the views.
-- ---------------------------------------------------------------------------
GRANT SELECT ON orch.tasks TO tx_b;
SET LOCAL enable_seqscan = off;   -- the small table would hide the index
SELECT isnt(o[1], o[2], 'residue: on orch.tasks itself (SELECT granted, row-level security) the oracle tells ta''s correlation id apart')
  FROM (SELECT pg_temp.oracle('tx_b', 'orch.tasks', 'correlation_id = %s', 'ta-corr-5', 'ta-corr-6') AS o) x;
SELECT ok(plan ~ '"Index Cond": "\(correlation_id = ''ta-corr-5''::text\)"'
          AND plan ~ '"Filter": "orch.tenant_visible\(tenant_id\)",\s*"Rows Removed by Filter": 1',
          '... there the condition is an index condition, and the policy removes ta''s row after it (Rows Removed by Filter: 1)')
  FROM (SELECT pg_temp.plan_as('tx_b', 'SELECT * FROM orch.tasks WHERE correlation_id = ''ta-corr-5''') AS plan) x;
SET LOCAL ROLE tx_b;
SELECT is((SELECT count(*) FROM orch.tasks WHERE correlation_id = 'ta-corr-5'), 0::bigint,
          '... though it returns no row of ta');
RESET ROLE;
RESET enable_seqscan;
REVOKE SELECT ON orch.tasks FROM tx_b;

SELECT * FROM finish();
ROLLBACK;
