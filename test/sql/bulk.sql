-- bulk: acting on the tasks or runs a filter matches (src/bulk.c; SPEC §7
-- "Bulk actions"): orch_cancel_where, orch_retry_where,
-- orch_cancel_runs_where.  Every filter key, every mistake (22023, and the
-- stored state unchanged), the max bound, oldest first, the tasks of
-- approval steps left alone, the audit (actor and reason), and a
-- tenant-bound role that never touches another tenant's rows, whatever
-- its filter names.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- A fingerprint of the rows the bulk calls may change.
CREATE FUNCTION pg_temp.snapshot() RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.tasks x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.history x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.attempts x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.runs x)))
$$;
-- label(task): the label of a task of this test (tk), or its id
CREATE TEMP TABLE tk (label text PRIMARY KEY, id bigint);
CREATE FUNCTION pg_temp.label(t bigint) RETURNS text LANGUAGE sql AS
  $$ SELECT coalesce((SELECT label FROM tk WHERE id = t), 'task ' || t) $$;
CREATE FUNCTION pg_temp.id(l text) RETURNS bigint LANGUAGE sql AS
  $$ SELECT id FROM tk WHERE label = l $$;
-- states(label, ...): each labelled task's state
CREATE FUNCTION pg_temp.states(VARIADIC ls text[]) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(l || '=' || coalesce(t.state, '?'), ' ' ORDER BY o)
      FROM unnest(ls) WITH ORDINALITY AS u(l, o) LEFT JOIN tk ON tk.label = u.l
      LEFT JOIN orch.tasks t ON t.id = tk.id $$;
-- mk(label, queue, what, tenant): a task in the given situation, labelled
-- (one to be claimed has priority -1: the claim takes it before the queued
-- tasks of the queue)
CREATE FUNCTION pg_temp.mk(l text, q text, what text, tenant text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE tid bigint; tok uuid;
BEGIN
    tid := orch_enqueue(q, jsonb_build_object('label', l), tenant => tenant,
                        priority => CASE WHEN what = 'queued' THEN 0 ELSE -1 END);
    INSERT INTO tk VALUES (l, tid);
    IF what <> 'queued' THEN
        SELECT d.lease_token INTO tok FROM orch_dequeue(q, 'bulk-worker', 1, tenant => tenant) d;
        IF tok IS NULL OR (SELECT lease_token FROM orch.tasks WHERE id = tid) IS DISTINCT FROM tok THEN
            RAISE EXCEPTION 'setup claimed the wrong task for %', l;
        END IF;
        CASE what
            WHEN 'executing' THEN NULL;
            WHEN 'rate_limited' THEN PERFORM orch_fail(tid, tok, 'RATE_LIMITED', 'HTTP 429', '1 hour');
            WHEN 'tool' THEN PERFORM orch_await_tool(tid, tok, 'geocoder', '{}');
            WHEN 'completed' THEN PERFORM orch_complete(tid, tok);
            WHEN 'dead' THEN PERFORM orch_fail(tid, tok, 'NON_RETRYABLE', 'broken');
            WHEN 'rejected' THEN
                PERFORM orch_await_confirmation(tid, tok, '{}');
                PERFORM orch_confirm(tid, false, 'bob', 'no');
        END CASE;
    END IF;
    RETURN l || ': ' || (SELECT state FROM orch.tasks WHERE id = tid);
END $$;

-- ---------------------------------------------------------------------------
-- 1. orch_cancel_where: each filter key, the open tasks it matches.
-- ---------------------------------------------------------------------------
SELECT pg_temp.mk('a1', 'bq_a', 'queued'), pg_temp.mk('a2', 'bq_a', 'executing'),
       pg_temp.mk('a3', 'bq_a', 'rate_limited'), pg_temp.mk('a4', 'bq_a', 'tool'),
       pg_temp.mk('a5', 'bq_a', 'completed'), pg_temp.mk('a6', 'bq_a', 'dead');
SELECT pg_temp.mk('b1', 'bq_b', 'queued'), pg_temp.mk('b2', 'bq_b', 'queued');
-- queue + state: only the queued and waiting tasks of bq_a
SELECT pg_temp.label(task_id), state
  FROM orch_cancel_where('{"queue": "bq_a", "state": ["queued", "awaiting_tool"]}', 'state filter');
SELECT pg_temp.states('a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'b1', 'b2');
-- the reason is each task's cancellation note; the actor is the caller
SELECT l.label, h.from_state, h.to_state, h.reason_code, h.actor, h.note
  FROM tk l, LATERAL orch_history(l.id) h
 WHERE l.label IN ('a1', 'a3', 'a4') AND h.kind = 'event' AND h.to_state = 'cancelled'
 ORDER BY l.label;
-- queue alone: the open task left (executing: its worker learns it at its
-- next call); terminal tasks are not matched at all
SELECT pg_temp.label(task_id), state FROM orch_cancel_where('{"queue": "bq_a"}');
SELECT pg_temp.states('a2', 'a5', 'a6');
SELECT state FROM orch_heartbeat(pg_temp.id('a2'), (SELECT lease_token FROM orch.tasks WHERE id = pg_temp.id('a2')), NULL, NULL);
-- nothing open matches any more: no rows, no error
SELECT count(*) AS again FROM orch_cancel_where('{"queue": "bq_a"}');
-- task_ids (the terminal ones among them are left out)
SELECT pg_temp.label(task_id), state
  FROM orch_cancel_where(jsonb_build_object('task_ids', jsonb_build_array(pg_temp.id('b2'), pg_temp.id('a5'))), 'by id');
SELECT pg_temp.states('b1', 'b2', 'a5');

-- error_class and reason_code
SELECT pg_temp.mk('c1', 'bq_c', 'rate_limited'), pg_temp.mk('c2', 'bq_c', 'tool'),
       pg_temp.mk('c3', 'bq_c', 'queued');
SELECT pg_temp.label(task_id), state FROM orch_cancel_where('{"error_class": "RATE_LIMITED", "queue": "bq_c"}');
-- a reason code no task has: nothing matched, no error
SELECT count(*) AS no_such_reason FROM orch_cancel_where('{"reason_code": "no_such_reason"}');
SELECT pg_temp.states('c1', 'c2', 'c3');
SELECT reason_code FROM orch.tasks WHERE id = pg_temp.id('c2');
SELECT pg_temp.label(task_id), state FROM orch_cancel_where(
    jsonb_build_object('reason_code', (SELECT reason_code FROM orch.tasks WHERE id = pg_temp.id('c2')), 'queue', 'bq_c'));
SELECT pg_temp.states('c1', 'c2', 'c3');

-- created_before / created_after (created_at moved back by a plain update)
SELECT pg_temp.mk('d1', 'bq_d', 'queued'), pg_temp.mk('d2', 'bq_d', 'queued'), pg_temp.mk('d3', 'bq_d', 'queued');
UPDATE orch.tasks SET created_at = now() - interval '3 days' WHERE id = pg_temp.id('d1');
UPDATE orch.tasks SET created_at = now() - interval '2 days' WHERE id = pg_temp.id('d2');
SELECT pg_temp.label(task_id), state
  FROM orch_cancel_where(jsonb_build_object('queue', 'bq_d', 'created_before', (now() - interval '1 day')::text,
                                            'created_after', (now() - interval '60 hours')::text));
SELECT pg_temp.label(task_id), state
  FROM orch_cancel_where(jsonb_build_object('queue', 'bq_d', 'created_before', '2000-01-01'));
SELECT pg_temp.label(task_id), state
  FROM orch_cancel_where(jsonb_build_object('queue', 'bq_d', 'created_before', (now() - interval '1 day')::text));
SELECT pg_temp.states('d1', 'd2', 'd3');
-- failed_before / failed_after match failed tasks only, which are never open:
-- nothing to cancel
SELECT count(*) AS failed_filter FROM orch_cancel_where(jsonb_build_object('queue', 'bq_d', 'failed_after', '2000-01-01'));
SELECT pg_temp.states('d3');

-- tenant
SELECT pg_temp.mk('e1', 'bq_e', 'queued', 'bt1'), pg_temp.mk('e2', 'bq_e', 'queued', 'bt2');
SELECT pg_temp.label(task_id), state FROM orch_cancel_where('{"queue": "bq_e", "tenant": "bt2"}');
SELECT pg_temp.states('e1', 'e2');

-- max: the oldest first (by id), at most max; the default is 1000
SELECT count(*) AS enqueued FROM orch_enqueue_batch('bq_max', array_fill('{}'::jsonb, ARRAY[5]));
SELECT min(id) AS max_first FROM orch.tasks WHERE queue = 'bq_max' \gset
SELECT task_id - :max_first AS nth, state FROM orch_cancel_where('{"queue": "bq_max"}', 'two', 2);
SELECT task_id - :max_first AS nth, state FROM orch_cancel_where('{"queue": "bq_max"}', max => 1);
SELECT task_id - :max_first AS nth, state FROM orch_cancel_where('{"queue": "bq_max"}');

-- definition, and the tasks of human_approval steps left alone (an approval
-- is decided through its run)
SELECT orch_define('bulk_wf', '{"steps": [
    {"step_id": "gate", "type": "human_approval", "timeout": "1 hour"},
    {"step_id": "work", "queue": "bq_wf", "handler": "work"}]}') AS version;
SELECT orch_publish('bulk_wf', 1) IS NOT NULL AS published;
SELECT orch_define('bulk_other', '{"steps": [{"step_id": "work", "queue": "bq_wf", "handler": "work"}]}') AS version;
SELECT orch_publish('bulk_other', 1) IS NOT NULL AS published;
SELECT orch_start('bulk_wf', '{}') AS wf1 \gset
SELECT orch_start('bulk_other', '{}') AS wf2 \gset
SELECT step_key, state FROM orch.tasks WHERE run_id = :wf1 ORDER BY id;
-- the approval's task is not matched, even named by id or by its state
SELECT count(*) AS approval_by_id
  FROM orch_cancel_where(jsonb_build_object('task_ids', (SELECT jsonb_agg(id) FROM orch.tasks WHERE run_id = :wf1 AND step_key LIKE '%:approval')));
SELECT count(*) AS approval_by_state
  FROM orch_cancel_where('{"definition": "bulk_wf", "state": ["awaiting_user_confirmation"]}');
SELECT step_key, state FROM orch.tasks WHERE run_id = :wf1 ORDER BY id;
-- the definition's other open task is cancelled (its run then fails as a
-- run whose step's task was cancelled does, and closes its approval);
-- the other definition's run is not touched
SELECT (SELECT step_key FROM orch.tasks WHERE id = c.task_id), c.state
  FROM orch_cancel_where('{"definition": "bulk_wf"}', 'by definition') c;
SELECT step_key, state, reason_code FROM orch.tasks WHERE run_id = :wf1 ORDER BY id;
SELECT step_key, state FROM orch.tasks WHERE run_id = :wf2 ORDER BY id;
SELECT orch_run_status(:wf1) -> 'run' ->> 'state' AS wf1, orch_run_status(:wf2) -> 'run' ->> 'state' AS wf2;

-- ---------------------------------------------------------------------------
-- 2. Mistakes: 22023 (22004 for a NULL filter), nothing stored changes.
-- ---------------------------------------------------------------------------
SELECT pg_temp.mk('z1', 'bq_z', 'queued'), pg_temp.mk('z2', 'bq_z', 'dead');
SELECT pg_temp.snapshot() AS s0 \gset
SELECT c.fn, c.filter, pg_temp.sqlstate_of(format(c.q, c.filter)) AS result
  FROM (VALUES
    (1,  'cancel_where',      'NULL',                                        'SELECT * FROM orch_cancel_where(%s)'),
    (2,  'cancel_where',      '''{}''',                                      'SELECT * FROM orch_cancel_where(%s)'),
    (3,  'cancel_where',      '''[]''',                                      'SELECT * FROM orch_cancel_where(%s)'),
    (4,  'cancel_where',      '''"bq_z"''',                                  'SELECT * FROM orch_cancel_where(%s)'),
    (5,  'cancel_where',      '''{"nope": 1}''',                             'SELECT * FROM orch_cancel_where(%s)'),
    (6,  'cancel_where',      '''{"queue": "bq_z", "Queue": "bq_z"}''',      'SELECT * FROM orch_cancel_where(%s)'),
    (7,  'cancel_where',      '''{"queue": 1}''',                            'SELECT * FROM orch_cancel_where(%s)'),
    (8,  'cancel_where',      '''{"queue": null}''',                         'SELECT * FROM orch_cancel_where(%s)'),
    (9,  'cancel_where',      '''{"queue": ["bq_z"]}''',                     'SELECT * FROM orch_cancel_where(%s)'),
    (10, 'cancel_where',      '''{"state": "queued"}''',                     'SELECT * FROM orch_cancel_where(%s)'),
    (11, 'cancel_where',      '''{"state": []}''',                           'SELECT * FROM orch_cancel_where(%s)'),
    (12, 'cancel_where',      '''{"state": ["waiting"]}''',                  'SELECT * FROM orch_cancel_where(%s)'),
    (13, 'cancel_where',      '''{"state": ["running"]}''',                  'SELECT * FROM orch_cancel_where(%s)'),
    (14, 'cancel_where',      '''{"state": [1]}''',                          'SELECT * FROM orch_cancel_where(%s)'),
    (15, 'cancel_where',      '''{"state": [["queued"]]}''',                 'SELECT * FROM orch_cancel_where(%s)'),
    (16, 'cancel_where',      '''{"error_class": "BOGUS"}''',                'SELECT * FROM orch_cancel_where(%s)'),
    (17, 'cancel_where',      '''{"error_class": 3}''',                      'SELECT * FROM orch_cancel_where(%s)'),
    (18, 'cancel_where',      '''{"reason_code": true}''',                   'SELECT * FROM orch_cancel_where(%s)'),
    (19, 'cancel_where',      '''{"tenant": 7}''',                           'SELECT * FROM orch_cancel_where(%s)'),
    (20, 'cancel_where',      '''{"created_before": "yesterday-ish"}''',     'SELECT * FROM orch_cancel_where(%s)'),
    (21, 'cancel_where',      '''{"created_after": 1700000000}''',           'SELECT * FROM orch_cancel_where(%s)'),
    (22, 'cancel_where',      '''{"failed_before": "2026-13-01"}''',         'SELECT * FROM orch_cancel_where(%s)'),
    (23, 'cancel_where',      '''{"failed_after": ""}''',                    'SELECT * FROM orch_cancel_where(%s)'),
    (24, 'cancel_where',      '''{"definition": 1}''',                       'SELECT * FROM orch_cancel_where(%s)'),
    (25, 'cancel_where',      '''{"task_ids": 1}''',                         'SELECT * FROM orch_cancel_where(%s)'),
    (26, 'cancel_where',      '''{"task_ids": []}''',                        'SELECT * FROM orch_cancel_where(%s)'),
    (27, 'cancel_where',      '''{"task_ids": ["1"]}''',                     'SELECT * FROM orch_cancel_where(%s)'),
    (28, 'cancel_where',      '''{"run_ids": [1]}''',                        'SELECT * FROM orch_cancel_where(%s)'),
    (29, 'cancel_where',      '''{"version": 1}''',                          'SELECT * FROM orch_cancel_where(%s)'),
    (30, 'cancel_where',      '''{"queue": "bq_z"}'', max => 0',             'SELECT * FROM orch_cancel_where(%s)'),
    (31, 'cancel_where',      '''{"queue": "bq_z"}'', max => -1',            'SELECT * FROM orch_cancel_where(%s)'),
    (32, 'cancel_where',      '''{"task_ids": [1.5]}''',                     'SELECT * FROM orch_cancel_where(%s)'),
    (33, 'retry_where',       'NULL',                                        'SELECT * FROM orch_retry_where(%s)'),
    (34, 'retry_where',       '''{}''',                                      'SELECT * FROM orch_retry_where(%s)'),
    (35, 'retry_where',       '''{"nope": 1}''',                             'SELECT * FROM orch_retry_where(%s)'),
    (36, 'retry_where',       '''{"state": ["dead"]}''',                     'SELECT * FROM orch_retry_where(%s)'),
    (37, 'retry_where',       '''{"error_class": "BOGUS"}''',                'SELECT * FROM orch_retry_where(%s)'),
    (38, 'retry_where',       '''{"failed_after": "soon"}''',                'SELECT * FROM orch_retry_where(%s)'),
    (39, 'retry_where',       '''{"queue": "bq_z"}'', 0',                    'SELECT * FROM orch_retry_where(%s)'),
    (40, 'retry_where',       '''{"task_ids": [1e30]}''',                    'SELECT * FROM orch_retry_where(%s)'),
    (41, 'cancel_runs_where', 'NULL',                                        'SELECT * FROM orch_cancel_runs_where(%s)'),
    (42, 'cancel_runs_where', '''{}''',                                      'SELECT * FROM orch_cancel_runs_where(%s)'),
    (43, 'cancel_runs_where', '''[{"definition": "bulk_wf"}]''',             'SELECT * FROM orch_cancel_runs_where(%s)'),
    (44, 'cancel_runs_where', '''{"queue": "bq_wf"}''',                      'SELECT * FROM orch_cancel_runs_where(%s)'),
    (45, 'cancel_runs_where', '''{"task_ids": [1]}''',                       'SELECT * FROM orch_cancel_runs_where(%s)'),
    (46, 'cancel_runs_where', '''{"definition": ["bulk_wf"]}''',             'SELECT * FROM orch_cancel_runs_where(%s)'),
    (47, 'cancel_runs_where', '''{"version": "1"}''',                        'SELECT * FROM orch_cancel_runs_where(%s)'),
    (48, 'cancel_runs_where', '''{"state": ["queued"]}''',                   'SELECT * FROM orch_cancel_runs_where(%s)'),
    (49, 'cancel_runs_where', '''{"state": ["cancelled"]}''',                'SELECT * FROM orch_cancel_runs_where(%s)'),
    (50, 'cancel_runs_where', '''{"created_before": "x"}''',                 'SELECT * FROM orch_cancel_runs_where(%s)'),
    (51, 'cancel_runs_where', '''{"run_ids": [true]}''',                     'SELECT * FROM orch_cancel_runs_where(%s)'),
    (52, 'cancel_runs_where', '''{"tenant": null}''',                        'SELECT * FROM orch_cancel_runs_where(%s)'),
    (53, 'cancel_runs_where', '''{"definition": "bulk_wf"}'', max => 0',     'SELECT * FROM orch_cancel_runs_where(%s)'),
    (54, 'cancel_runs_where', '''{"version": 1.5}''',                        'SELECT * FROM orch_cancel_runs_where(%s)'),
    (55, 'cancel_runs_where', '''{"version": 3000000000}''',                 'SELECT * FROM orch_cancel_runs_where(%s)')
  ) AS c(ord, fn, filter, q)
 ORDER BY c.ord;
SELECT pg_temp.snapshot() = :'s0' AS nothing_changed;
-- max is bounded by orchestrator.max_batch_size too (a larger max, or the
-- default, takes at most that many); an id list longer than it: 54000
SET orchestrator.max_batch_size = 10;
SELECT pg_temp.sqlstate_of($$SELECT * FROM orch_cancel_where('{"queue": "bq_none"}', max => 11)$$) AS max_over_batch_size,
       pg_temp.sqlstate_of($$SELECT * FROM orch_cancel_where('{"queue": "bq_none"}')$$) AS default_max,
       pg_temp.sqlstate_of($$SELECT * FROM orch_cancel_where(jsonb_build_object('task_ids', (SELECT jsonb_agg(g) FROM generate_series(1, 11) g)))$$) AS ids_over_batch_size;
RESET orchestrator.max_batch_size;
SELECT pg_temp.states('z1', 'z2');

-- ---------------------------------------------------------------------------
-- 3. orch_retry_where: dead letters not re-driven yet, oldest failure first.
-- ---------------------------------------------------------------------------
-- r1, r2, r3 enqueued in that order, dead letters in the order r3, r1, r2
-- (claimed by priority); r4 in another queue; r5 rejected (a failure, not
-- a dead letter); r6 open
INSERT INTO tk SELECT 'r' || n, orch_enqueue('bq_r', jsonb_build_object('label', 'r' || n), priority => p)
  FROM (VALUES (1, 2), (2, 3), (3, 1)) AS v(n, p) ORDER BY n;
SELECT pg_temp.label(d.task_id), f.state FROM orch_dequeue('bq_r', 'w') d, LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'broken') f;
SELECT pg_temp.label(d.task_id), f.state FROM orch_dequeue('bq_r', 'w') d, LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'broken') f;
SELECT pg_temp.label(d.task_id), f.state FROM orch_dequeue('bq_r', 'w') d, LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'broken') f;
SELECT pg_temp.mk('r4', 'bq_r2', 'dead');
SELECT pg_temp.mk('r5', 'bq_r', 'rejected'), pg_temp.mk('r6', 'bq_r', 'queued');
SELECT t.reason_code FROM orch.tasks t WHERE t.id = pg_temp.id('r5');
SELECT finished_at AS r1_failed FROM orch.tasks WHERE id = pg_temp.id('r1') \gset
SELECT finished_at AS r2_failed FROM orch.tasks WHERE id = pg_temp.id('r2') \gset
-- failed_after: only r2 (r1 itself failed at, not after, that time)
SELECT pg_temp.label(task_id), pg_temp.label(new_task_id) IS NOT NULL AS new_task
  FROM orch_retry_where(jsonb_build_object('queue', 'bq_r', 'failed_after', :'r1_failed'));
-- max 1: the oldest failure (r3, although its id is the highest)
SELECT pg_temp.label(task_id) FROM orch_retry_where('{"queue": "bq_r", "state": ["failed"]}', 1);
-- failed_before r2's failure: r3 and r1, of which r3 was re-driven already
SELECT pg_temp.label(task_id) FROM orch_retry_where(jsonb_build_object('failed_before', :'r2_failed', 'queue', 'bq_r'));
-- the original's event (actor, new id) and the new task, as orch_retry does
SELECT h.from_state, h.to_state, h.reason_code, h.actor, h.note IS NOT NULL AS has_note
  FROM orch_history(pg_temp.id('r3')) h WHERE h.kind = 'event' ORDER BY h.at DESC LIMIT 1;
SELECT n.state, n.reason_code, n.payload ->> 'label' AS payload_of, n.attempts, n.failures
  FROM orch.tasks n WHERE n.retry_of = pg_temp.id('r3');
-- the rest of bq_r: nothing (the re-driven ones are not taken again, the
-- rejected task and the open one are not dead letters)
SELECT count(*) AS again FROM orch_retry_where('{"queue": "bq_r"}');
SELECT pg_temp.states('r5', 'r6'), (SELECT count(*) FROM orch.tasks WHERE retry_of = pg_temp.id('r5')) AS r5_redriven;
-- error_class, reason_code, task_ids, definition
SELECT pg_temp.label(task_id) FROM orch_retry_where('{"error_class": "NON_RETRYABLE", "reason_code": "non_retryable", "queue": "bq_r2"}');
SELECT count(*) AS by_ids FROM orch_retry_where(jsonb_build_object('task_ids', jsonb_build_array(pg_temp.id('r1'), pg_temp.id('r5'), pg_temp.id('r6'))));
-- definition: the dead letter of a workflow run's step (the run failed)
SELECT orch_define('bulk_dead', '{"steps": [{"step_id": "s", "queue": "bq_rw", "handler": "s"}]}') AS version;
SELECT orch_publish('bulk_dead', 1) IS NOT NULL AS published;
SELECT orch_start('bulk_dead', '{}') AS rw \gset
SELECT f.state FROM orch_dequeue('bq_rw', 'w') d, LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'no') f;
SELECT t.step_key, (SELECT count(*) FROM orch.tasks n WHERE n.retry_of = t.id) AS before_redrive
  FROM orch.tasks t WHERE t.run_id = :rw;
SELECT (SELECT step_key FROM orch.tasks WHERE id = task_id) FROM orch_retry_where('{"definition": "bulk_dead"}');
SELECT count(*) AS dead_letters_left FROM orch_dead_letters d
 WHERE NOT EXISTS (SELECT 1 FROM orch.tasks n WHERE n.retry_of = d.task_id) AND d.queue LIKE 'bq_r%';

-- ---------------------------------------------------------------------------
-- 4. orch_cancel_runs_where: open runs and their open tasks.
-- ---------------------------------------------------------------------------
SELECT orch_define('bulk_runs', '{"steps": [
    {"step_id": "a", "queue": "bq_runs", "handler": "a"},
    {"step_id": "gate", "type": "human_approval", "depends_on": ["a"], "timeout": "1 hour"}]}') AS version;
SELECT orch_publish('bulk_runs', 1) IS NOT NULL AS published;
SELECT orch_define('bulk_runs', '{"steps": [
    {"step_id": "a", "queue": "bq_runs", "handler": "a2"}]}') AS version;
SELECT orch_publish('bulk_runs', 2) IS NOT NULL AS published;
SELECT orch_start('bulk_runs', '{"n": 1}', version => 1) AS u1 \gset
SELECT orch_start('bulk_runs', '{"n": 2}', version => 1) AS u2 \gset
SELECT orch_start('bulk_runs', '{"n": 3}', version => 2) AS u3 \gset
SELECT orch_start('bulk_runs', '{"n": 4}', version => 2, tenant => 'bt2') AS u4 \gset
SELECT orch_start('bulk_runs', '{"n": 5}', version => 2) AS u5 \gset
SELECT orch_start('bulk_runs', '{"n": 6}', version => 2) AS u6 \gset
SELECT orch_start('bulk_runs', '{"n": 7}', version => 2) AS u7 \gset
SELECT orch_pause_run(:u7);
CREATE TEMP TABLE ru (label text, id bigint);
INSERT INTO ru VALUES ('u1', :u1), ('u2', :u2), ('u3', :u3), ('u4', :u4), ('u5', :u5), ('u6', :u6), ('u7', :u7);
CREATE FUNCTION pg_temp.run_states() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(ru.label || '=' || r.state, ' ' ORDER BY ru.label) FROM ru JOIN orch.runs r ON r.id = ru.id $$;
-- u1's first step done: it waits at its gate; u5 succeeded; the others'
-- tasks are executing
CREATE TEMP TABLE ru_claims AS SELECT d.task_id, d.lease_token FROM orch_dequeue('bq_runs', 'w', 10) d;
SELECT orch_complete(c.task_id, c.lease_token) FROM ru_claims c JOIN orch.tasks t ON t.id = c.task_id
 WHERE t.run_id IN (:u1, :u5) ORDER BY t.run_id;
UPDATE orch.runs SET created_at = now() - interval '2 days' WHERE id IN (:u1, :u2);
SELECT pg_temp.run_states();
-- version 1, created before yesterday: u1 (waiting at its gate) and u2
SELECT ru.label, c.state FROM orch_cancel_runs_where(
    jsonb_build_object('definition', 'bulk_runs', 'version', 1, 'created_before', (now() - interval '1 day')::text),
    'retired') c JOIN ru ON ru.id = c.run_id ORDER BY c.run_id;
SELECT pg_temp.run_states();
-- their open tasks and approvals went with them, audited with the reason
SELECT t.run_id = :u1 AS of_u1, t.step_key, t.state FROM orch.tasks t WHERE t.run_id IN (:u1, :u2) ORDER BY t.id;
SELECT ru.label, e ->> 'entity' AS entity, e ->> 'to_state' AS to_state, e ->> 'actor' AS actor, e ->> 'note' AS note
  FROM ru, LATERAL jsonb_array_elements(orch_run_status(ru.id) -> 'events') WITH ORDINALITY AS x(e, n)
 WHERE ru.label IN ('u1', 'u2') AND e ->> 'to_state' IN ('canceled', 'cancelled') ORDER BY ru.label, n;
-- run_ids + state: only the open runs named that are in the given states
SELECT ru.label, c.state FROM orch_cancel_runs_where(jsonb_build_object('run_ids', jsonb_build_array(:u1, :u6, :u7), 'state', jsonb_build_array('paused')))
  c JOIN ru ON ru.id = c.run_id;
-- max: the oldest first (u3, then u6)
SELECT ru.label, c.state FROM orch_cancel_runs_where('{"definition": "bulk_runs", "tenant": "default"}', max => 1) c JOIN ru ON ru.id = c.run_id;
-- tenant, created_after (a run created after now() - 1 hour)
SELECT ru.label, c.state FROM orch_cancel_runs_where(jsonb_build_object('tenant', 'bt2', 'created_after', (now() - interval '1 hour')::text))
  c JOIN ru ON ru.id = c.run_id;
SELECT pg_temp.run_states();
SELECT ru.label, c.state FROM orch_cancel_runs_where('{"definition": "bulk_runs"}') c JOIN ru ON ru.id = c.run_id;
SELECT count(*) AS nothing_open FROM orch_cancel_runs_where('{"definition": "bulk_runs"}');
SELECT count(*) AS open_tasks FROM orch.tasks t JOIN ru ON ru.id = t.run_id
 WHERE t.state NOT IN ('completed', 'failed', 'cancelled');

-- ---------------------------------------------------------------------------
-- 5. Tenants: a bound role acts on its tenants' rows only, whatever the
--    filter names (another tenant, its task ids, its run ids).
-- ---------------------------------------------------------------------------
CALL pg_temp.create_roles('bulk_producer', 'bulk_admin', 'bulk_worker');
SET client_min_messages = warning;
GRANT orch_producer TO bulk_producer;
GRANT orch_admin TO bulk_admin;
GRANT orch_worker TO bulk_worker;
RESET client_min_messages;
SELECT orch_bind_tenant('bulk_producer', 'bt1') IS NOT NULL AS bound,
       orch_bind_tenant('bulk_admin', 'bt1') IS NOT NULL AS bound;
SELECT pg_temp.mk('t1a', 'bq_t', 'queued', 'bt1'), pg_temp.mk('t1b', 'bq_t', 'queued', 'bt1'),
       pg_temp.mk('t2a', 'bq_t', 'queued', 'bt2'), pg_temp.mk('t2b', 'bq_t', 'queued', 'bt2');
SELECT pg_temp.mk('t1d', 'bq_t', 'dead', 'bt1'), pg_temp.mk('t2d', 'bq_t', 'dead', 'bt2');
SELECT orch_start('bulk_runs', '{"n": 6}', version => 2, tenant => 'bt2') AS v2 \gset
SELECT orch_start('bulk_runs', '{"n": 7}', version => 2, tenant => 'bt1') AS v1 \gset
GRANT SELECT ON tk TO PUBLIC;
GRANT EXECUTE ON FUNCTION pg_temp.label(bigint) TO PUBLIC;
SET ROLE bulk_producer;
-- naming the other tenant, or its tasks by id: nothing
SELECT count(*) AS other_tenant FROM orch_cancel_where('{"queue": "bq_t", "tenant": "bt2"}');
SELECT count(*) AS other_ids FROM orch_cancel_where(
    jsonb_build_object('task_ids', (SELECT jsonb_agg(id) FROM tk WHERE label IN ('t2a', 't2b'))));
SELECT count(*) AS other_runs FROM orch_cancel_runs_where(jsonb_build_object('run_ids', jsonb_build_array(:v2)));
SELECT count(*) AS other_runs FROM orch_cancel_runs_where('{"tenant": "bt2"}');
-- the queue: its own tenant's tasks only; the runs of the definition: its own
SELECT pg_temp.label(task_id), state FROM orch_cancel_where(
    jsonb_build_object('queue', 'bq_t', 'task_ids', (SELECT jsonb_agg(id) FROM tk WHERE label LIKE 't%')), 'tenant cleanup');
SELECT run_id = :v1 AS own_run, state FROM orch_cancel_runs_where('{"definition": "bulk_runs"}');
-- a producer may not re-drive
SELECT pg_temp.sqlstate_of($$SELECT * FROM orch_retry_where('{"queue": "bq_t"}')$$) AS producer_retry_where;
RESET ROLE;
SET ROLE bulk_admin;
SELECT count(*) AS other_dead FROM orch_retry_where('{"tenant": "bt2"}');
SELECT pg_temp.label(task_id) FROM orch_retry_where('{"queue": "bq_t"}');
RESET ROLE;
SET ROLE bulk_worker;
SELECT pg_temp.sqlstate_of($$SELECT * FROM orch_cancel_where('{"queue": "bq_t"}')$$) AS worker_cancel_where,
       pg_temp.sqlstate_of($$SELECT * FROM orch_retry_where('{"queue": "bq_t"}')$$) AS worker_retry_where,
       pg_temp.sqlstate_of($$SELECT * FROM orch_cancel_runs_where('{"definition": "bulk_runs"}')$$) AS worker_cancel_runs_where;
RESET ROLE;
SELECT pg_temp.states('t1a', 't1b', 't2a', 't2b', 't1d', 't2d');
SELECT (SELECT count(*) FROM orch.tasks WHERE retry_of = pg_temp.id('t2d')) AS t2d_redriven,
       (SELECT state FROM orch.runs WHERE id = :v2) AS v2, (SELECT state FROM orch.runs WHERE id = :v1) AS v1;
-- the actor of the bound role's cancellations is that role
SELECT DISTINCT h.actor, h.note FROM tk, LATERAL orch_history(tk.id) h
 WHERE tk.label IN ('t1a', 't1b') AND h.kind = 'event' AND h.to_state = 'cancelled';
SELECT h.actor FROM orch_history(pg_temp.id('t1d')) h WHERE h.kind = 'event' AND h.reason_code = 'redriven';
