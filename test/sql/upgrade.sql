-- Install the oldest release and update along the upgrade path.
\set VERBOSITY terse
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.1.0';
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
-- The library serves the schemas of 0.7.0 and 0.8.0 only: an older one is
-- refused (55000, the hint names ALTER EXTENSION UPDATE) until it is updated.
\set VERBOSITY default
SELECT orch_enqueue('upgrade_q', '{"n": 1}');
\set VERBOSITY terse
SELECT to_regprocedure('orch_maintain(integer)') IS NULL AS no_maintain_yet;
-- live data from 0.1.0 survives the whole chain and is served after it
\set future_ready 'now() + interval \'1 hour\''
\getenv abs_srcdir PG_ABS_SRCDIR
-- (the library refuses the old schema until it is updated: 55000)
\set VERBOSITY sqlstate
SELECT count(*) FROM orch_dequeue('live', 'w-new', 10);
\set VERBOSITY terse
\i :abs_srcdir/sql/upgrade_live.inc
-- 0.4.0 -> 0.5.0 seeded the counters from the tasks that existed
SELECT metric, l1, value FROM orch.metric_totals WHERE queue = 'live' ORDER BY 1, 2;
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
-- the same live data from 0.6.0 (delayed work already off the claim index)
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.6.0';
\set future_ready NULL
-- (the library refuses the old schema until it is updated: 55000)
\set VERBOSITY sqlstate
SELECT count(*) FROM orch_dequeue('live', 'w-new', 10);
\set VERBOSITY terse
\i :abs_srcdir/sql/upgrade_live.inc
-- a fresh install of the default version has the same objects as the updated one
-- (and orch.tasks, made again by 0.7.0 -> 0.8.0 with its columns in the
-- order the row's writes want, is the same table column by column, with
-- the same indexes, triggers, policies, settings, privileges and comments)
CREATE FUNCTION pg_temp.tasks_shape() RETURNS TABLE (k text, v text) LANGUAGE sql AS $$
SELECT 'column ' || a.attnum, concat_ws(' ', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                                        pg_get_expr(d.adbin, d.adrelid), a.attstattarget,
                                        col_description(a.attrelid, a.attnum))
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = 'orch.tasks'::regclass AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL SELECT 'index', pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'orch.tasks'::regclass
UNION ALL SELECT 'constraint', conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE conrelid = 'orch.tasks'::regclass
UNION ALL SELECT 'trigger', pg_get_triggerdef(oid) || ' ' || tgenabled::text
  FROM pg_trigger WHERE tgrelid = 'orch.tasks'::regclass AND NOT tgisinternal
UNION ALL SELECT 'policy', concat_ws(' ', polname, polcmd, polpermissive, polroles, pg_get_expr(polqual, polrelid),
                                     pg_get_expr(polwithcheck, polrelid))
  FROM pg_policy WHERE polrelid = 'orch.tasks'::regclass
UNION ALL SELECT 'table', concat_ws(' ', relrowsecurity, relforcerowsecurity, reloptions, relacl, relreplident,
                                    obj_description(oid, 'pg_class'))
  FROM pg_class WHERE oid = 'orch.tasks'::regclass
UNION ALL SELECT 'dumped', count(*)::text
  FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'orchestrator' AND c = 'orch.tasks'::regclass
UNION ALL SELECT 'dumped tables gone', count(*)::text
  FROM pg_extension e, unnest(e.extconfig) c
 WHERE e.extname = 'orchestrator' AND NOT EXISTS (SELECT 1 FROM pg_class r WHERE r.oid = c)
$$;
CREATE TEMP TABLE updated_tasks AS SELECT * FROM pg_temp.tasks_shape();
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
SELECT count(*) AS tasks_shape_rows FROM updated_tasks;
SELECT k, v AS only_in_one FROM (
  (SELECT * FROM updated_tasks EXCEPT SELECT * FROM pg_temp.tasks_shape())
  UNION ALL
  (SELECT * FROM pg_temp.tasks_shape() EXCEPT SELECT * FROM updated_tasks)) d ORDER BY 1, 2;
-- roles survive DROP EXTENSION and are reused
SELECT count(*) AS orch_roles FROM pg_roles
 WHERE rolname IN ('orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader');
-- A session that used the task table before ALTER EXTENSION UPDATE keeps
-- working in the same session after it: the concurrency gate and the
-- statement-end dispatcher (two triggers in 0.7.0, one in 0.8.0).
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.7.0';
SELECT tgname FROM pg_trigger WHERE tgrelid = 'orch.tasks'::regclass AND NOT tgisinternal ORDER BY 1;
SELECT orch_create_queue('stale_keys', '{"concurrency_key_limit": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('stale_keys', '{"n": 1}', concurrency_key => 'k') > 0 AS first;
-- (0.7.0's task ids ahead of its event ids: 0.8.0 numbers tasks by the
-- events' sequence, which the update sets past both)
SELECT setval('orch.tasks_id_seq', 5000) AS task_ids_ahead;
-- a claim made under 0.7.0 completes under 0.8.0
CREATE TEMP TABLE up8_claim AS SELECT task_id, lease_token FROM orch_dequeue('stale_keys', 'w', 1);
-- orch.tasks is made again by the update: a view of one's own on the table
-- itself stops it before anything changes (2BP01, named) ...
CREATE VIEW up8_raw AS SELECT id, state FROM orch.tasks;
\set VERBOSITY default
\set SHOW_CONTEXT never
ALTER EXTENSION orchestrator UPDATE;
\set SHOW_CONTEXT errors
\set VERBOSITY terse
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT count(*) AS raw_rows FROM up8_raw;
DROP VIEW up8_raw;
-- ... while a view on orch_tasks, an index and a disabled trigger of one's
-- own on orch.tasks, a column's statistics target, a publication and a
-- fillfactor of one's own are kept (0.7.0's own fillfactor of 80 is not: the
-- shape comparison above holds the updated table to 0.8.0's 50)
CREATE VIEW up8_mine AS SELECT task_id, state, gated FROM orch_tasks;
CREATE INDEX up8_payload_idx ON orch.tasks ((payload ->> 'n'));
CREATE FUNCTION up8_noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER up8_noop BEFORE UPDATE ON orch.tasks FOR EACH ROW EXECUTE FUNCTION up8_noop();
ALTER TABLE orch.tasks DISABLE TRIGGER up8_noop;
ALTER TABLE orch.tasks ALTER COLUMN queue SET STATISTICS 500;
ALTER TABLE orch.tasks SET (fillfactor = 90);
SET client_min_messages = error;
CREATE PUBLICATION up8_pub FOR TABLE orch.tasks;
SET client_min_messages = warning;
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
-- (the row's columns in their 0.8.0 order: the enqueue's fixed-width
-- columns first, the transitions' in the middle, its variable-width ones last)
SELECT (SELECT attnum FROM pg_attribute WHERE attrelid = 'orch.tasks'::regclass AND attname = 'run_at')
     < (SELECT attnum FROM pg_attribute WHERE attrelid = 'orch.tasks'::regclass AND attname = 'state')
   AND (SELECT attnum FROM pg_attribute WHERE attrelid = 'orch.tasks'::regclass AND attname = 'state')
     < (SELECT attnum FROM pg_attribute WHERE attrelid = 'orch.tasks'::regclass AND attname = 'payload') AS reordered;
SELECT task_id, state, gated FROM up8_mine ORDER BY 1;
SELECT indexrelid::regclass AS own_index FROM pg_index
 WHERE indrelid = 'orch.tasks'::regclass AND indexrelid = 'orch.up8_payload_idx'::regclass;
SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = 'orch.tasks'::regclass AND tgname = 'up8_noop';
SELECT attstattarget FROM pg_attribute WHERE attrelid = 'orch.tasks'::regclass AND attname = 'queue';
SELECT pubname, schemaname, tablename FROM pg_publication_tables WHERE pubname = 'up8_pub';
SELECT reloptions FROM pg_class WHERE oid = 'orch.tasks'::regclass;
-- the indexes whose key ends in the task's id skip deduplication
SELECT c.relname, c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'orch.tasks'::regclass AND c.reloptions IS NOT NULL ORDER BY 1;
DROP PUBLICATION up8_pub;
DROP TRIGGER up8_noop ON orch.tasks;
DROP FUNCTION up8_noop();
DROP INDEX orch.up8_payload_idx;
ALTER TABLE orch.tasks ALTER COLUMN queue SET STATISTICS -1;
ALTER TABLE orch.tasks SET (fillfactor = 50);
SELECT tgname FROM pg_trigger WHERE tgrelid = 'orch.tasks'::regclass AND NOT tgisinternal ORDER BY 1;
SELECT orch_enqueue('stale_keys', '{"n": 2}', concurrency_key => 'k') > 0 AS second;
-- tasks and events numbered by one sequence, past every id either gave out;
-- a task's recorded enqueue takes the task's id
SELECT to_regclass('orch.tasks_id_seq') IS NULL AS tasks_sequence_gone,
       (SELECT min(id) FROM orch.tasks WHERE queue = 'stale_keys' AND payload ->> 'n' = '2') > 5000 AS past_both;
SELECT orch_enqueue('up8_plain', '{"n": 1}') AS up8_plain \gset
SELECT id > 5000 AS past_both, enqueue_event_id = id AS enqueue_event_is_task
  FROM orch.tasks WHERE id = :up8_plain;
SELECT payload ->> 'n' AS n, state, gated, ready_at IS NOT NULL AS claimable
  FROM orch.tasks WHERE queue = 'stale_keys' ORDER BY id;
SELECT orch_complete(task_id, lease_token) FROM up8_claim;
-- the freed slot admitted the second task in the same statement
SELECT payload ->> 'n' AS n, state, gated, ready_at IS NOT NULL AS claimable
  FROM orch.tasks WHERE queue = 'stale_keys' ORDER BY id;
SELECT from_state, to_state, reason_code FROM orch.history
 WHERE task_id = (SELECT task_id FROM up8_claim) ORDER BY id;
SELECT count(*) AS claimed FROM orch_dequeue('stale_keys', 'w', 10);
-- 0.7.0 -> 0.8.0 with runs: the run tables become partitioned by
-- run id, each old table the first range (every id the sequence gave out),
-- attached whole; a run of a higher id (on Citus: one started on a worker,
-- in that node's range) moves to the DEFAULT partition with its steps and
-- approvals; the keys and references are copied into their own tables and
-- keep working.
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.7.0';
INSERT INTO orch.runs (definition, version, content_hash, state, input, pins, idempotency_key, created_by)
VALUES ('up8_wf', 1, 'h', 'running', '{}', '{}', 'up8-key', 'postgres'),
       ('up8_wf', 1, 'h', 'running', '{}', '{}', NULL, 'postgres');
INSERT INTO orch.runs (id, definition, version, content_hash, state, input, pins, created_by)
VALUES (281474976710657, 'up8_wf', 1, 'h', 'running', '{}', '{}', 'postgres');
INSERT INTO orch.run_steps (run_id, step_id, ord, type, spec)
SELECT id, 'gate', 0, 'human_approval', '{}' FROM orch.runs;
INSERT INTO orch.approvals (approval_ref, run_id, step_id, approved, actor)
VALUES ('up8-ref', 1, 'gate', true, 'alice'), ('up8-ref-w', 281474976710657, 'gate', true, 'bob');
ALTER EXTENSION orchestrator UPDATE;
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound,
       (SELECT count(*) FROM orch.runs r WHERE r.tableoid = c.oid) AS runs
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'orch.runs'::regclass ORDER BY 1;
SELECT tableoid::regclass AS part, count(*) FROM orch.run_steps GROUP BY 1 ORDER BY 1;
SELECT tableoid::regclass AS part, approval_ref FROM orch.approvals ORDER BY 2;
SELECT tenant_id, idempotency_key, run_id FROM orch.run_keys;
SELECT approval_ref, run_id FROM orch.approval_refs ORDER BY 1;
SELECT tgrelid::regclass AS has_lifecycle FROM pg_trigger WHERE tgname = 'runs_lifecycle' ORDER BY 1;
-- the old history tables, now the first partitions, keep their block-range
-- indexes on the writing transaction, without 0.7.0's autosummarize
SELECT c.relname, c.reloptions FROM pg_class c
 WHERE c.relnamespace = 'orch'::regnamespace
   AND c.relname IN ('events_before_080_xact_idx', 'attempts_before_080_xact_idx') ORDER BY 1;
-- the views read the new tables, every run
SELECT count(*) AS runs_listed FROM orch_runs;
SELECT count(*) AS steps_listed FROM orch_run_steps;
-- 0.5.0 -> 0.6.0: the functions run without JIT (a generic plan costed
-- without its LIMIT crossed jit_above_cost with a large backlog).
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.5.0';
SELECT coalesce('jit=off' = ANY (proconfig), false) AS jit_off_before
  FROM pg_proc WHERE oid = 'orch_dequeue(text,text,integer,interval,text)'::regprocedure;
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT 'jit=off' = ANY (proconfig) AS jit_off_after
  FROM pg_proc WHERE oid = 'orch_dequeue(text,text,integer,interval,text,interval)'::regprocedure;
SELECT orch_create_queue('up6') IS NOT NULL AS created;
SELECT orch_enqueue('up6', '{"n": 1}') > 0 AS enqueued;
SET jit = on;
SET jit_above_cost = 0;
SELECT count(*) AS claimed FROM orch_dequeue('up6', 'w', 10);
RESET jit_above_cost;
RESET jit;
SELECT to_regprocedure('orch_distribute(integer)') IS NOT NULL AS has_distribute;
SELECT * FROM orch_distribute();
