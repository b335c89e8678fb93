-- Install the oldest release and update along the upgrade path.
\set VERBOSITY terse
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
-- 0.1.0 data survives the update
SELECT orch_enqueue('upgrade_q', '{"n": 1}') > 0 AS enqueued;
SELECT to_regprocedure('orch_maintain(integer)') IS NULL AS no_maintain_yet;
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT to_regprocedure('orch_maintain(integer)') IS NOT NULL AS has_maintain,
       to_regprocedure('orch_retry(bigint)') IS NOT NULL AS has_retry,
       to_regclass('orch_dead_letters') IS NOT NULL AS has_dead_letters,
       to_regprocedure('orch_command(text, text, jsonb, bigint, text)') IS NOT NULL AS has_command,
       count(*) AS orch_enqueue_versions
  FROM pg_proc WHERE proname = 'orch_enqueue';
-- the updated enqueue keeps its privileges: producers only
SELECT has_function_privilege('orch_producer', p.oid, 'EXECUTE') AS producer_may_enqueue,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_enqueue
  FROM pg_proc p WHERE p.proname = 'orch_enqueue';
SELECT count(*) AS tasks_kept FROM orch.tasks WHERE queue = 'upgrade_q';
SELECT state FROM orch_status((SELECT id FROM orch.tasks WHERE queue = 'upgrade_q'));
-- a fresh install of the default version has the same objects as the updated one
CREATE TEMP TABLE updated_objs AS
SELECT pg_describe_object(classid, objid, objsubid) AS obj
  FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'orchestrator');
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT obj AS only_in_one FROM (
  (SELECT obj FROM updated_objs
   EXCEPT
   SELECT pg_describe_object(classid, objid, objsubid)
     FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
      AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'orchestrator'))
  UNION ALL
  (SELECT pg_describe_object(classid, objid, objsubid)
     FROM pg_depend WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
      AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'orchestrator')
   EXCEPT
   SELECT obj FROM updated_objs)) d ORDER BY 1;
-- roles survive DROP EXTENSION and are reused
SELECT count(*) AS orch_roles FROM pg_roles
 WHERE rolname IN ('orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader');
-- A session that used the task table before ALTER EXTENSION UPDATE added
-- columns must not keep a stale column map: the concurrency gate (a column
-- added in 0.3.0) works in the same session right after the update.
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.2.0';
SELECT orch_enqueue('stale_q', '{"before": "update"}') > 0 AS trigger_used_before_update;
ALTER EXTENSION orchestrator UPDATE;
SELECT orch_create_queue('stale_keys', '{"concurrency_key_limit": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('stale_keys', '{"n": 1}', concurrency_key => 'k') > 0 AS first,
       orch_enqueue('stale_keys', '{"n": 2}', concurrency_key => 'k') > 0 AS second;
SELECT payload ->> 'n' AS n, gated, ready_at IS NOT NULL AS claimable
  FROM orch.tasks WHERE queue = 'stale_keys' ORDER BY id;
SELECT count(*) AS claimed FROM orch_dequeue('stale_keys', 'w', 10);
-- 0.4.0 -> 0.5.0: the new library serves a 0.4.0 schema until the update
-- (no metrics, no correlation ids), then the counters start from the tasks
-- that exist (seeded) and fold only what is written afterwards.
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.4.0';
SELECT orch_create_queue('up5', '{"max_attempts": 1}') IS NOT NULL AS created;
SELECT count(orch_enqueue('up5', jsonb_build_object('n', g))) AS enqueued_before
  FROM generate_series(1, 4) g;
SELECT count(orch_complete(d.task_id, d.lease_token)) AS completed_before
  FROM orch_dequeue('up5', 'w', 2) d;
SELECT count(*) AS maintain_before FROM orch_maintain();
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT metric, l1, value FROM orch.metric_totals WHERE queue = 'up5' ORDER BY 1, 2;
SELECT orch_metrics_refresh() AS folded_nothing_old;
SELECT orch_enqueue('up5', '{"n": 5}', correlation_id => 'after') > 0 AS enqueued_after;
SELECT count(orch_complete(d.task_id, d.lease_token)) AS completed_after
  FROM orch_dequeue('up5', 'w', 1) d;
SELECT orch_metrics_refresh() > 0 AS folded_new;
SELECT enqueued_total, started_total, completed_total, queued
  FROM orch_queue_stats WHERE queue = 'up5';
SELECT correlation_id FROM orch_tasks WHERE queue = 'up5' AND correlation_id IS NOT NULL;
-- 0.5.0 -> 0.6.0: the functions run without JIT (a generic plan costed
-- without its LIMIT crossed jit_above_cost with a large backlog).
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.5.0';
SELECT orch_create_queue('up6') IS NOT NULL AS created;
SELECT orch_enqueue('up6', '{"n": 1}') > 0 AS enqueued_before;
SELECT coalesce('jit=off' = ANY (proconfig), false) AS jit_off_before
  FROM pg_proc WHERE oid = 'orch_dequeue(text,text,integer,interval,text)'::regprocedure;
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT 'jit=off' = ANY (proconfig) AS jit_off_after
  FROM pg_proc WHERE oid = 'orch_dequeue(text,text,integer,interval,text)'::regprocedure;
SET jit = on;
SET jit_above_cost = 0;
SELECT count(*) AS claimed FROM orch_dequeue('up6', 'w', 10);
RESET jit_above_cost;
RESET jit;
-- 0.6.0 -> 0.7.0: orch_distribute appears; the task table's trigger is
-- unchanged (a backend still running the 0.6.0 library keeps working).
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.6.0';
SELECT orch_create_queue('up7') IS NOT NULL AS created;
SELECT orch_enqueue('up7', '{"n": 1}') > 0 AS enqueued_before;
CREATE TEMP TABLE up7_claim AS SELECT task_id, lease_token FROM orch_dequeue('up7', 'w', 1);
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT orch_complete(task_id, lease_token) FROM up7_claim;
SELECT from_state, to_state, reason_code FROM orch.events
 WHERE task_id = (SELECT task_id FROM up7_claim) ORDER BY id;
SELECT to_regprocedure('orch_distribute(integer)') IS NOT NULL AS has_distribute;
SELECT * FROM orch_distribute();
