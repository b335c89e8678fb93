-- Sub-workflows: a subflow step starts a child run (one, or one per item of
-- a map) and waits for it without a task; the child's end settles the
-- step.  Versions pinned at the parent's start, input mappings, output
-- schemas, failure and its edges, a map's window, the cancel / failure /
-- deadline / timeout of the parent reaching open children (and theirs),
-- pause and resume, the depth limit, errors with nothing stored, tenants
-- and rollback.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- kids(run): the run's children, by item (ids as their offset from the parent)
CREATE FUNCTION pg_temp.kids(run bigint) RETURNS TABLE (child bigint, step text, idx integer, def text,
                                                       state text, reason text, output jsonb)
LANGUAGE sql AS $$
    SELECT id - run, parent_step, parent_index, definition || '@' || version, state, reason_code, output
      FROM orch.runs WHERE parent_run_id = run ORDER BY parent_step, parent_index NULLS FIRST, id
$$;
-- work(queue, n): claim up to n tasks and complete each with {"done": <its input's n>}
CREATE FUNCTION pg_temp.work(q text, n integer DEFAULT 100) RETURNS integer LANGUAGE sql AS $$
    SELECT count(orch_complete(c.task_id, c.lease_token,
                               jsonb_build_object('done', coalesce(c.payload -> 'input' -> 'n', 'null'))))::integer
      FROM orch_dequeue(q, 'sf-worker', n) c
$$;
-- drain(queue): work until nothing is left to claim; how many were completed
CREATE FUNCTION pg_temp.drain(q text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE n integer; total integer := 0;
BEGIN
    LOOP
        n := pg_temp.work(q);
        EXIT WHEN n = 0;
        total := total + n;
    END LOOP;
    RETURN total;
END $$;
-- stored(): what a failed call must leave as it was
CREATE FUNCTION pg_temp.stored() RETURNS text LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM orch.runs) || ' runs, ' || (SELECT count(*) FROM orch.run_steps) || ' steps, ' ||
           (SELECT count(*) FROM orch.tasks) || ' tasks, ' || (SELECT count(*) FROM orch.history) || ' events'
$$;

-- ---------------------------------------------------------------------------
-- 1. The validator
-- ---------------------------------------------------------------------------
SELECT k, pg_temp.v(jsonb_build_object('steps', jsonb_build_array(s))) AS result
  FROM (VALUES
    ('subflow',               '{"step_id": "s", "type": "subflow", "definition": "d"}'::jsonb),
    ('version, input path',   '{"step_id": "s", "type": "subflow", "definition": "d", "version": 2, "input": "$.input.order"}'),
    ('input object',          '{"step_id": "s", "type": "subflow", "definition": "d", "input": {"a": "$.input.a", "all": "$.input"}}'),
    ('map',                   '{"step_id": "s", "type": "subflow", "definition": "d", "map": {"over": "$.input.items", "max_parallel": 3}}'),
    ('output_schema',         '{"step_id": "s", "type": "subflow", "definition": "d", "output_schema": {"type": "object"}}'),
    ('no definition',         '{"step_id": "s", "type": "subflow"}'),
    ('empty definition',      '{"step_id": "s", "type": "subflow", "definition": ""}'),
    ('version 0',             '{"step_id": "s", "type": "subflow", "definition": "d", "version": 0}'),
    ('version text',          '{"step_id": "s", "type": "subflow", "definition": "d", "version": "1"}'),
    ('bad input path',        '{"step_id": "s", "type": "subflow", "definition": "d", "input": "input.a"}'),
    ('unknown step in input', '{"step_id": "s", "type": "subflow", "definition": "d", "input": {"a": "$.steps.nope.output"}}'),
    ('input with map',        '{"step_id": "s", "type": "subflow", "definition": "d", "input": "$.input", "map": {"over": "$.input.items"}}'),
    ('handler',               '{"step_id": "s", "type": "subflow", "definition": "d", "handler": "h"}'),
    ('queue',                 '{"step_id": "s", "type": "subflow", "definition": "d", "queue": "q"}'),
    ('retry_policy',          '{"step_id": "s", "type": "subflow", "definition": "d", "retry_policy": {"max_attempts": 2}}'),
    ('definition on a task',  '{"step_id": "s", "queue": "q", "handler": "h", "definition": "d"}'),
    ('input on a task',       '{"step_id": "s", "queue": "q", "handler": "h", "input": "$.input"}')
  ) t(k, s);

-- ---------------------------------------------------------------------------
-- 2. Fixtures
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('sf_q') IS NOT NULL AS queue;
-- sf_child: one task; its input must have n
SELECT orch_define('sf_child', '{"input_schema": {"type": "object", "required": ["n"]},
    "steps": [{"step_id": "work", "queue": "sf_q", "handler": "work"}]}') AS v;
SELECT orch_publish('sf_child', 1) IS NOT NULL AS published;
-- sf_one: a subflow step with a mapped input, then a task that reads its output
SELECT orch_define('sf_one', '{"steps": [
    {"step_id": "prep", "queue": "sf_q", "handler": "prep"},
    {"step_id": "sub", "type": "subflow", "definition": "sf_child", "depends_on": ["prep"],
     "input": {"n": "$.input.n", "prep": "$.steps.prep.output"}},
    {"step_id": "after", "queue": "sf_q", "handler": "after", "depends_on": ["sub"]}]}') AS v;
SELECT orch_publish('sf_one', 1) IS NOT NULL AS published;
-- sf_fan: a map of sub-workflows, two open at once
SELECT orch_define('sf_fan', '{"steps": [
    {"step_id": "fan", "type": "subflow", "definition": "sf_child",
     "map": {"over": "$.input.items", "max_parallel": 2}}]}') AS v;
SELECT orch_publish('sf_fan', 1) IS NOT NULL AS published;

-- ---------------------------------------------------------------------------
-- 3. One sub-workflow: started with the mapped input, in the parent's
--    family; the parent waits without a task; the child's output settles
--    the step and feeds the next one
-- ---------------------------------------------------------------------------
SELECT orch_start('sf_one', '{"n": 7}', correlation_id => 'order-7') AS p1 \gset
SELECT pg_temp.work('sf_q');
SELECT pg_temp.run_st(:p1);
SELECT * FROM pg_temp.kids(:p1);
SELECT c.input, c.correlation_id, c.root_run_id = :p1 AS same_family, c.tenant_id
  FROM orch.runs c WHERE c.parent_run_id = :p1;
-- no task stands for the waiting step
SELECT count(*) AS parent_tasks_open FROM orch.tasks WHERE run_id = :p1 AND state <> 'completed';
-- orch_run_status: the child of the step, the children, the parent of the child
SELECT x ->> 'step_id' AS step, x ->> 'state' AS state, (x ->> 'child_run_id')::bigint - :p1 AS child
  FROM jsonb_array_elements(orch_run_status(:p1) -> 'steps') x;
SELECT jsonb_array_length(orch_run_status(:p1) -> 'children') AS children,
       orch_run_status(:p1) -> 'children' -> 0 ->> 'state' AS child_state;
SELECT (orch_run_status(:p1 + 1) -> 'run' ->> 'parent_run_id')::bigint = :p1 AS child_names_parent,
       orch_run_status(:p1 + 1) -> 'run' ->> 'parent_step' AS parent_step,
       (SELECT parent_run_id = :p1 FROM orch_runs WHERE run_id = :p1 + 1) AS view_names_parent;
-- the child's task is done: the step succeeds with the child's output
SELECT pg_temp.work('sf_q');
SELECT pg_temp.run_st(:p1), pg_temp.run_st(:p1 + 1);
SELECT output FROM orch.run_steps WHERE run_id = :p1 AND step_id = 'sub';
SELECT t.payload -> 'deps' -> 'sub' AS after_reads FROM orch.tasks t WHERE t.run_id = :p1 AND t.step_key = 'after';
SELECT pg_temp.work('sf_q');
SELECT pg_temp.run_st(:p1);
-- the step's events
SELECT note AS step, from_state, to_state, reason_code FROM orch_events
 WHERE run_id = :p1 AND entity = 'run_step' AND note = 'sub' ORDER BY event_id;

-- ---------------------------------------------------------------------------
-- 4. The version is the one published when the parent started
-- ---------------------------------------------------------------------------
SELECT orch_start('sf_one', '{"n": 1}') AS p2 \gset
SELECT orch_define('sf_child', '{"steps": [{"step_id": "work2", "queue": "sf_q", "handler": "work2"}]}') AS v;
SELECT orch_publish('sf_child', 2) IS NOT NULL AS published;
SELECT pg_temp.work('sf_q');
SELECT child, def FROM pg_temp.kids(:p2);
SELECT step_id FROM orch.run_steps WHERE run_id = (SELECT id FROM orch.runs WHERE parent_run_id = :p2);
SELECT orch_deprecate('sf_child', 2) IS NOT NULL AS deprecated;
SELECT pg_temp.work('sf_q'), pg_temp.work('sf_q');
SELECT pg_temp.run_st(:p2);

-- ---------------------------------------------------------------------------
-- 5. A map of sub-workflows: max_parallel open at once, outputs in item
--    order; an empty array succeeds at once with []; not an array fails
-- ---------------------------------------------------------------------------
SELECT orch_start('sf_fan', '{"items": [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}]}') AS f1 \gset
SELECT child, idx, state FROM pg_temp.kids(:f1);
SELECT items_total, items_next, items_done FROM orch.run_steps WHERE run_id = :f1;
SELECT pg_temp.work('sf_q', 1);
SELECT child, idx, state FROM pg_temp.kids(:f1);
SELECT pg_temp.work('sf_q'), pg_temp.work('sf_q'), pg_temp.work('sf_q');
SELECT pg_temp.run_st(:f1);
SELECT output FROM orch.runs WHERE id = :f1;
SELECT orch_start('sf_fan', '{"items": []}') AS f2 \gset
SELECT pg_temp.run_st(:f2), (SELECT output FROM orch.runs WHERE id = :f2);
SELECT orch_start('sf_fan', '{"items": {"n": 1}}') AS f3 \gset
SELECT pg_temp.run_st(:f3), (SELECT error FROM orch.runs WHERE id = :f3);

-- ---------------------------------------------------------------------------
-- 6. Failure: a child that cannot start, a child that fails, a child
--    canceled; a map's other children stop; on_failure routes it
-- ---------------------------------------------------------------------------
-- an item its input_schema refuses: the step fails; the children of its
-- window start together or not at all, so none is left behind
SELECT orch_start('sf_fan', '{"items": [{"n": 1}, {"m": 2}]}') AS f4 \gset
SELECT pg_temp.run_st(:f4);
SELECT error FROM orch.runs WHERE id = :f4;
SELECT count(*) AS children FROM orch.runs WHERE parent_run_id = :f4;
-- a child of a map fails: the step fails and the other child is canceled with its task
SELECT orch_start('sf_fan', '{"items": [{"n": 1}, {"n": 2}]}') AS f4b \gset
SELECT (orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', 'item broke')).state
  FROM orch_dequeue('sf_q', 'sf-worker') c WHERE c.payload -> 'input' ->> 'n' = '1';
SELECT pg_temp.run_st(:f4b);
SELECT child, idx, state, reason FROM pg_temp.kids(:f4b);
SELECT t.state, t.reason_code FROM orch.tasks t JOIN orch.runs r ON r.id = t.run_id
 WHERE r.parent_run_id = :f4b ORDER BY r.parent_index;
SELECT pg_temp.drain('sf_q') >= 0 AS drained;
-- a child that fails: the step fails, on_failure takes over
SELECT orch_define('sf_route', '{"steps": [
    {"step_id": "sub", "type": "subflow", "definition": "sf_child", "version": 1, "input": "$.input",
     "on_failure": "fallback"},
    {"step_id": "fallback", "queue": "sf_q", "handler": "fallback"}]}') AS v;
SELECT orch_publish('sf_route', 1) IS NOT NULL AS published;
SELECT orch_start('sf_route', '{"n": 3}') AS f5 \gset
SELECT (orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', 'boom')).state FROM orch_dequeue('sf_q', 'sf-worker') c;
SELECT pg_temp.run_st(:f5 + 1), pg_temp.run_st(:f5);
SELECT regexp_replace(error, 'run \d+', 'run N') AS error FROM orch.run_steps WHERE run_id = :f5 AND step_id = 'sub';
-- a child canceled by its own call: the parent's step fails the same way
SELECT orch_start('sf_route', '{"n": 4}') AS f6 \gset
SELECT orch_cancel_run(:f6 + 1, 'not needed');
SELECT pg_temp.run_st(:f6);
SELECT regexp_replace(error, 'run \d+', 'run N') AS error FROM orch.run_steps WHERE run_id = :f6 AND step_id = 'sub';
SELECT pg_temp.work('sf_q'), pg_temp.work('sf_q');

-- ---------------------------------------------------------------------------
-- 7. The parent's end reaches its open children, and theirs
-- ---------------------------------------------------------------------------
-- sf_nest: a subflow step whose child (sf_one) has a subflow step of its own
SELECT orch_define('sf_nest', '{"steps": [
    {"step_id": "inner", "type": "subflow", "definition": "sf_one", "input": "$.input"},
    {"step_id": "side", "queue": "sf_side", "handler": "side"}]}') AS v;
SELECT orch_publish('sf_nest', 1) IS NOT NULL AS published;
SELECT orch_start('sf_nest', '{"n": 9}') AS n1 \gset
SELECT pg_temp.work('sf_q');
SELECT id - :n1 AS run, parent_run_id - :n1 AS parent, state FROM orch.runs WHERE root_run_id = :n1 ORDER BY id;
-- cancel the top run: both levels below stop, audited with the parent's reason
SELECT orch_cancel_run(:n1, 'customer left');
SELECT id - :n1 AS run, state, reason_code FROM orch.runs WHERE root_run_id = :n1 ORDER BY id;
SELECT count(*) AS open_tasks FROM orch.tasks t JOIN orch.runs r ON r.id = t.run_id
 WHERE r.root_run_id = :n1 AND t.state NOT IN ('completed', 'failed', 'cancelled');
SELECT e.run_id - :n1 AS run, e.to_state, e.reason_code, regexp_replace(e.note, '\d+', 'N') AS note
  FROM orch_events e WHERE e.run_id IN (:n1 + 1, :n1 + 2) AND e.entity = 'run' AND e.to_state = 'canceled'
 ORDER BY e.run_id;
-- the parent fails (another step fails): its open child is canceled
SELECT orch_start('sf_nest', '{"n": 10}') AS n2 \gset
SELECT (orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', 'side broke')).state FROM orch_dequeue('sf_side', 'sf-worker') c;
SELECT id - :n2 AS run, state, reason_code FROM orch.runs WHERE root_run_id = :n2 ORDER BY id;
-- the parent's deadline passes: maintenance fails it and its children stop
SELECT orch_start('sf_nest', '{"n": 11}') AS n3 \gset
UPDATE orch.runs SET deadline_at = now() - interval '1 second' WHERE id = :n3;
SELECT count > 0 AS maintained FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT id - :n3 AS run, state, reason_code FROM orch.runs WHERE root_run_id = :n3 ORDER BY id;
-- the subflow step's own timeout: the step times out and its child stops
SELECT orch_define('sf_capped', '{"steps": [
    {"step_id": "sub", "type": "subflow", "definition": "sf_child", "version": 1, "input": "$.input",
     "timeout": "1 hour", "on_timeout": "late"},
    {"step_id": "late", "queue": "sf_q", "handler": "late"}]}') AS v;
SELECT orch_publish('sf_capped', 1) IS NOT NULL AS published;
SELECT orch_start('sf_capped', '{"n": 12}') AS c1 \gset
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :c1 AND step_id = 'sub';
SELECT count > 0 AS maintained FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:c1), pg_temp.run_st(:c1 + 1);
SELECT pg_temp.drain('sf_q') > 0 AS drained, pg_temp.drain('sf_side') > 0 AS drained_side;

-- ---------------------------------------------------------------------------
-- 8. Pause and resume reach the children; a child paused on its own stays
-- ---------------------------------------------------------------------------
SELECT orch_start('sf_fan', '{"items": [{"n": 1}, {"n": 2}]}') AS f7 \gset
SELECT orch_pause_run(:f7 + 2);
SELECT orch_pause_run(:f7);
SELECT child, state, reason FROM pg_temp.kids(:f7);
-- a paused child's task is not handed out
SELECT pg_temp.work('sf_q') AS claimed_while_paused;
SELECT orch_resume_run(:f7);
SELECT child, state, reason FROM pg_temp.kids(:f7);
SELECT orch_resume_run(:f7 + 2);
SELECT pg_temp.work('sf_q');
SELECT pg_temp.run_st(:f7);

-- ---------------------------------------------------------------------------
-- 9. The depth limit
-- ---------------------------------------------------------------------------
SELECT orch_define('sf_rec', '{"steps": [{"step_id": "again", "type": "subflow", "definition": "sf_rec",
                                           "version": 1}]}') AS v;
SELECT orch_publish('sf_rec', 1) IS NOT NULL AS published;
SHOW orchestrator.max_subflow_depth;
SET orchestrator.max_subflow_depth = 2;
SELECT orch_start('sf_rec', '{}') AS r1 \gset
SELECT id - :r1 AS run, parent_run_id - :r1 AS parent, state FROM orch.runs WHERE root_run_id = :r1 ORDER BY id;
SELECT error FROM orch.runs WHERE id = :r1 + 2;
RESET orchestrator.max_subflow_depth;
SELECT pg_temp.try('SET orchestrator.max_subflow_depth = 0');

-- ---------------------------------------------------------------------------
-- 10. Errors leave nothing behind
-- ---------------------------------------------------------------------------
-- a subflow of a workflow with no published version: the parent does not start
SELECT orch_define('sf_orphan', '{"steps": [{"step_id": "s", "type": "subflow", "definition": "sf_nothing"}]}') AS v;
SELECT orch_publish('sf_orphan', 1) IS NOT NULL AS published;
SELECT pg_temp.stored() AS before \gset
SELECT pg_temp.try($$SELECT orch_start('sf_orphan', '{}')$$);
-- orch.start_subflow is the extension's own
SELECT pg_temp.try($$SELECT orch.start_subflow(1, 'x', NULL, 'sf_child', 1, '{"n": 1}')$$);
SELECT pg_temp.stored() = :'before' AS nothing_stored;
-- a rolled-back start leaves no child
BEGIN;
SELECT orch_start('sf_one', '{"n": 1}') IS NOT NULL AS started;
ROLLBACK;
SELECT pg_temp.stored() = :'before' AS nothing_stored;

-- ---------------------------------------------------------------------------
-- 11. Tenants: the child runs in its parent's tenant; a bound role sees its own
-- ---------------------------------------------------------------------------
CALL pg_temp.create_roles('sf_bound_a', 'sf_bound_b');
SET client_min_messages = warning;
GRANT orch_producer, orch_reader, orch_worker TO sf_bound_a, sf_bound_b;
RESET client_min_messages;
SELECT orch_bind_tenant('sf_bound_a', 'sf_a') AS bound_a, orch_bind_tenant('sf_bound_b', 'sf_b') AS bound_b;
SET ROLE sf_bound_a;
SELECT orch_start('sf_one', '{"n": 5}') AS t1 \gset
SELECT count(orch_complete(c.task_id, c.lease_token, '{}')) FROM orch_dequeue('sf_q', 'a-worker') c;
SELECT run_id - :t1 AS run, tenant_id, parent_run_id - :t1 AS parent, state FROM orch_runs
 WHERE run_id >= :t1 ORDER BY run_id;
SELECT jsonb_array_length(orch_run_status(:t1) -> 'children') AS children;
SET ROLE sf_bound_b;
SELECT count(*) AS seen_by_b FROM orch_runs WHERE run_id >= :t1;
SELECT pg_temp.try(format('SELECT orch_run_status(%s)', :t1 + 1));
SELECT pg_temp.try(format('SELECT orch_cancel_run(%s)', :t1));
RESET ROLE;
SELECT id - :t1 AS run, tenant_id, state FROM orch.runs WHERE root_run_id = :t1 ORDER BY id;
SET ROLE sf_bound_a;
SELECT count(orch_complete(c.task_id, c.lease_token, '{}')) FROM orch_dequeue('sf_q', 'a-worker') c;
SELECT count(orch_complete(c.task_id, c.lease_token, '{}')) FROM orch_dequeue('sf_q', 'a-worker') c;
RESET ROLE;
SELECT pg_temp.run_st(:t1);

-- ---------------------------------------------------------------------------
-- 12. One statement that finishes the tasks of several runs progresses each
--     of them (runs of families and plain runs alike)
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('sf_b') IS NOT NULL AS queue;
SELECT orch_define('sf_plain', '{"steps": [{"step_id": "one", "queue": "sf_b", "handler": "one"},
    {"step_id": "two", "queue": "sf_b", "handler": "two", "depends_on": ["one"],
     "retry_policy": {"max_attempts": 3, "backoff": "fixed", "initial_delay": 0}}]}') AS v;
SELECT orch_publish('sf_plain', 1) IS NOT NULL AS published;
SELECT orch_start('sf_plain', '{}') AS b1 \gset
SELECT orch_start('sf_plain', '{}') AS b2 \gset
SELECT orch_start('sf_fan', '{"items": [{"n": 1}, {"n": 2}]}') AS b3 \gset
-- two plain runs' tasks and two children's tasks, completed in one call
SELECT orch_complete_batch(array_agg(c.task_id), array_agg(c.lease_token)) AS completed
  FROM (SELECT * FROM orch_dequeue('sf_b', 'sf-worker', 10) UNION ALL SELECT * FROM orch_dequeue('sf_q', 'sf-worker', 10)) c;
SELECT pg_temp.run_st(:b1), pg_temp.run_st(:b2), pg_temp.run_st(:b3);
-- their next steps' tasks fail an attempt, and are claimed again in one call
SELECT count(*) AS failed_attempts FROM orch_dequeue('sf_b', 'sf-worker', 10) c,
       LATERAL orch_fail(c.task_id, c.lease_token, 'TRANSIENT', 'flaky') f;
SELECT count(*) AS claimed_again FROM orch_dequeue('sf_b', 'sf-worker', 10);
SELECT pg_temp.run_st(:b1), pg_temp.run_st(:b2);

-- ---------------------------------------------------------------------------
-- 13. A map of sub-workflows whose child cannot start follows on_failure
-- ---------------------------------------------------------------------------
SELECT orch_define('sf_fan_route', '{"steps": [
    {"step_id": "fan", "type": "subflow", "definition": "sf_child", "version": 1,
     "map": {"over": "$.input.items"}, "on_failure": "recover"},
    {"step_id": "recover", "queue": "sf_q", "handler": "recover"}]}') AS v;
SELECT orch_publish('sf_fan_route', 1) IS NOT NULL AS published;
SELECT orch_start('sf_fan_route', '{"items": [{"n": 1}, {"bad": true}]}') AS m1 \gset
SELECT pg_temp.run_st(:m1);
SELECT pg_temp.drain('sf_q');
SELECT pg_temp.run_st(:m1);

-- ---------------------------------------------------------------------------
-- 14. Versions: a child's pinned version deprecated meanwhile still starts;
--     a named version that is not published refuses the parent's start
-- ---------------------------------------------------------------------------
SELECT orch_define('sf_serial', '{"steps": [
    {"step_id": "fan", "type": "subflow", "definition": "sf_child", "map": {"over": "$.input.items", "max_parallel": 1}}]}') AS v;
SELECT orch_publish('sf_serial', 1) IS NOT NULL AS published;
SELECT orch_define('sf_child', '{"steps": [{"step_id": "work3", "queue": "sf_q", "handler": "work3"}]}') AS v3;
SELECT orch_publish('sf_child', 3) IS NOT NULL AS published;
SELECT orch_start('sf_serial', '{"items": [{"n": 1}, {"n": 2}]}') AS v1 \gset
SELECT child, def FROM pg_temp.kids(:v1);
SELECT orch_deprecate('sf_child', 3) IS NOT NULL AS deprecated;
SELECT pg_temp.drain('sf_q');
SELECT child, def, state FROM pg_temp.kids(:v1);
SELECT pg_temp.run_st(:v1);
SELECT orch_define('sf_named', '{"steps": [{"step_id": "s", "type": "subflow", "definition": "sf_child", "version": 3}]}') AS v;
SELECT orch_publish('sf_named', 1) IS NOT NULL AS published;
SELECT pg_temp.stored() AS before \gset
SELECT pg_temp.try($$SELECT orch_start('sf_named', '{"n": 1}')$$);
SELECT pg_temp.stored() = :'before' AS nothing_stored;

-- ---------------------------------------------------------------------------
-- 15. A child that compensates when its parent pauses finishes its
--     compensation; the parent's resume leaves nothing paused
-- ---------------------------------------------------------------------------
SELECT orch_define('sf_saga', '{"steps": [
    {"step_id": "reserve", "queue": "sf_q", "handler": "reserve", "compensation": {"handler": "unreserve"}},
    {"step_id": "charge", "queue": "sf_q", "handler": "charge", "depends_on": ["reserve"]}]}') AS v;
SELECT orch_publish('sf_saga', 1) IS NOT NULL AS published;
SELECT orch_define('sf_saga_parent', '{"steps": [
    {"step_id": "sub", "type": "subflow", "definition": "sf_saga", "input": "$.input"}]}') AS v;
SELECT orch_publish('sf_saga_parent', 1) IS NOT NULL AS published;
SELECT orch_start('sf_saga_parent', '{}') AS g1 \gset
SELECT pg_temp.work('sf_q', 1);
SELECT (orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', 'declined')).state FROM orch_dequeue('sf_q', 'sf-worker') c;
SELECT state, phase FROM orch.runs WHERE id = :g1 + 1;
SELECT orch_pause_run(:g1);
SELECT state, phase FROM orch.runs WHERE id = :g1 + 1;
SELECT orch_resume_run(:g1);
SELECT pg_temp.drain('sf_q');
SELECT pg_temp.run_st(:g1), (SELECT state || '/' || reason_code FROM orch.runs WHERE id = :g1 + 1) AS child;
