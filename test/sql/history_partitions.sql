-- History in time-range partitions (0.8.0, docs/storage.md): orch.events and
-- orch.attempts are partitioned by time; orch_maintain creates partitions
-- ahead and retires them whole past the retention, dropping a partition
-- none of whose rows is still needed and compacting one that still holds
-- the history of a kept task or run.  No history row is deleted one by one.
-- In a database of its own, so that the partitions are this test's alone.
SET client_min_messages = warning;
\set suite_db :DBNAME
DROP DATABASE IF EXISTS orch_hp;
CREATE DATABASE orch_hp;
\c orch_hp
SET client_min_messages = warning;
CREATE EXTENSION orchestrator;
RESET client_min_messages;
\set VERBOSITY terse
CREATE FUNCTION pg_temp.parts(parent text)
RETURNS TABLE (part text, is_default boolean, lo timestamptz, hi timestamptz) LANGUAGE sql AS $$
  SELECT c.relname::text, b.bound = 'DEFAULT',
         CASE WHEN b.bound <> 'DEFAULT' AND b.bound NOT LIKE '%MINVALUE%'
              THEN substring(b.bound FROM $r$FROM \('([^']*)'\)$r$)::timestamptz END,
         CASE WHEN b.bound <> 'DEFAULT' THEN substring(b.bound FROM $r$TO \('([^']*)'\)$r$)::timestamptz END
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
   WHERE i.inhparent = format('orch.%I', parent)::regclass
$$;

-- 1. A new install: both tables partitioned, only their DEFAULT partitions;
--    a row written before the first pass goes there.
SELECT c.relname, c.relkind, pg_get_partkeydef(c.oid) AS key
  FROM pg_class c WHERE c.oid IN ('orch.events'::regclass, 'orch.attempts'::regclass) ORDER BY 1;
SELECT parent, part, is_default FROM (VALUES ('events'), ('attempts')) v(parent), pg_temp.parts(parent) ORDER BY 1, 2;
SELECT orch_enqueue('hp', '{"n": 0}') AS early \gset
SELECT d.task_id, d.lease_token FROM orch_dequeue('hp', 'w') d \gset early_
SELECT state, reason_code FROM orch_fail(:early_task_id, :'early_lease_token', 'NON_RETRYABLE', 'first try failed');
SELECT tableoid::regclass AS went_to, count(*) FROM orch.events WHERE task_id = :early GROUP BY 1;
SELECT tableoid::regclass AS went_to, count(*) FROM orch.attempts WHERE task_id = :early GROUP BY 1;

-- 2. orch_maintain creates partitions ahead: the next windows of
--    orchestrator.history_partition (here 2 s) after now, aligned, without
--    gaps, the same for both tables; a second pass creates none while they
--    still reach ahead.
-- (three tasks claimed now, before any range partition exists: their
-- claims, written out when they fail below, belong to the DEFAULT one)
SELECT orch_enqueue('hp', jsonb_build_object('n', g)) > 0 AS enqueued FROM generate_series(1, 3) g;
CREATE TEMP TABLE hp_claimed AS SELECT * FROM orch_dequeue('hp', 'w', 3);
SET orchestrator.history_partition = 2;
SELECT clock_timestamp() AS t0 \gset
SELECT count > 0 AS created FROM orch_maintain() WHERE action = 'history_partitions_created';
SELECT clock_timestamp() AS t1 \gset
SELECT parent,
       bool_and(hi - lo = interval '2 seconds') AS two_seconds_each,
       bool_and(extract(epoch FROM lo)::numeric % 2 = 0) AS aligned,
       min(lo) > :'t0' AND min(lo) <= :'t1'::timestamptz + interval '2 seconds' AS from_next_window,
       max(hi) >= :'t0'::timestamptz + interval '8 seconds' AS four_ahead,
       count(*) = extract(epoch FROM max(hi) - min(lo)) / 2 AS no_gaps
  FROM (VALUES ('events'), ('attempts')) v(parent), pg_temp.parts(parent)
 WHERE NOT is_default GROUP BY parent ORDER BY parent;
-- a second pass goes on from the last one: still aligned, no gap, no overlap
SELECT count(*) AS passes FROM orch_maintain() WHERE action = 'history_partitions_created';
SELECT parent, bool_and(hi - lo = interval '2 seconds') AS two_seconds_each,
       count(*) = extract(epoch FROM max(hi) - min(lo)) / 2 AS no_gaps
  FROM (VALUES ('events'), ('attempts')) v(parent), pg_temp.parts(parent)
 WHERE NOT is_default GROUP BY parent ORDER BY parent;
-- a new partition has what its parent has: no statistics on the columns
-- holding a tenant's own values, row-level security with the tenant policy
SELECT min(part) AS a_partition FROM pg_temp.parts('events') WHERE NOT is_default \gset
SELECT c.relrowsecurity,
       (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_isolation') AS policies,
       (SELECT array_agg(a.attname ORDER BY a.attname) FROM pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND a.attstattarget = 0) AS no_statistics,
       has_table_privilege('orch_reader', c.oid, 'SELECT') AS reader_may_select
  FROM pg_class c WHERE c.oid = format('orch.%I', :'a_partition')::regclass;
-- rows go to the partition of their time, written directly or through SQL
-- (the three tasks were claimed before the first range began: above)
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
-- (paced by state: the first range partition has begun)
DO $$ BEGIN
  WHILE clock_timestamp() < (SELECT min(lo) FROM pg_temp.parts('events') WHERE NOT is_default) LOOP
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT pg_current_wal_insert_lsn() AS wal0 \gset
-- three failures, each with a retry: an event row and an attempt row each
-- (a completion by orch_complete writes neither: its task row records it)
SELECT count(*) AS failed FROM hp_claimed h, LATERAL orch_fail(h.task_id, h.lease_token, 'TRANSIENT', 'flaky') f
 WHERE f.state = 'awaiting_tool';
SELECT pg_current_wal_insert_lsn() AS wal1 \gset
CHECKPOINT;
-- the event rows are written directly into their partition: multi-insert
-- records, no row-by-row INSERT of the SQL path
SELECT count(*) FILTER (WHERE record_type LIKE 'MULTI_INSERT%') AS multi_inserts,
       count(*) FILTER (WHERE w.block_ref ~ ('/' || pg_relation_filenode(p.oid::regclass) || ' ')) > 0 AS into_a_range_partition
  FROM pg_get_wal_records_info(:'wal0', :'wal1') w,
       LATERAL (SELECT c.oid FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                 WHERE i.inhparent = 'orch.events'::regclass AND c.relname <> 'events_default'
                   AND EXISTS (SELECT 1 FROM orch.events e WHERE e.tableoid = c.oid)) p
 WHERE w.resource_manager = 'Heap2';
SELECT (SELECT count(*) FROM orch.events WHERE tableoid <> 'orch.events_default'::regclass) AS events_in_range_partitions,
       (SELECT count(*) FROM orch.attempts WHERE tableoid <> 'orch.attempts_default'::regclass) AS attempts_in_range_partitions;
SELECT count(*) = 0 AS nothing_misplaced FROM (
  SELECT a.finished_at, p.lo, p.hi FROM orch.attempts a
    JOIN pg_temp.parts('attempts') p ON p.part = a.tableoid::regclass::text
   WHERE NOT p.is_default AND NOT (a.finished_at >= p.lo AND a.finished_at < p.hi)
  UNION ALL
  SELECT e.at, p.lo, p.hi FROM orch.events e
    JOIN pg_temp.parts('events') p ON p.part = e.tableoid::regclass::text
   WHERE NOT p.is_default AND NOT (e.at >= p.lo AND e.at < p.hi)) x;
-- no block-range index of the history summarizes ranges on its own (no
-- autosummarize: its autovacuum work item takes the partition's SHARE
-- UPDATE EXCLUSIVE lock and cancels a VACUUM of it in progress); the range
-- partitions orch_maintain made copy the DEFAULT partitions' options
SELECT count(*) FILTER (WHERE t.relname NOT LIKE '%\_default') > 0 AS range_partitions_seen,
       count(*) FILTER (WHERE c.reloptions IS NOT NULL) AS brins_with_options
  FROM pg_inherits i
  JOIN pg_class t ON t.oid = i.inhrelid
  JOIN pg_index x ON x.indrelid = t.oid
  JOIN pg_class c ON c.oid = x.indexrelid
 WHERE i.inhparent IN ('orch.events'::regclass, 'orch.attempts'::regclass)
   AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'brin');
RESET orchestrator.history_partition;

-- 3. Retirement.  Old ranges are made here (as orch_maintain made them, the
--    time they cover long past): one holding only rows of tasks that no
--    longer exist is dropped whole; one holding a live task's rows too is
--    compacted to that task's rows once at least half of it is no longer
--    needed; one whose rows are all still needed is left as it is.  Rows are
--    written as the extension wrote them.
CREATE TABLE orch.events_p20200101_000000 PARTITION OF orch.events
    FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
CREATE TABLE orch.events_p20200102_000000 PARTITION OF orch.events
    FOR VALUES FROM ('2020-01-02 00:00+00') TO ('2020-01-03 00:00+00');
CREATE TABLE orch.events_p20200103_000000 PARTITION OF orch.events
    FOR VALUES FROM ('2020-01-03 00:00+00') TO ('2020-01-04 00:00+00');
CREATE TABLE orch.attempts_p20200101_000000 PARTITION OF orch.attempts
    FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
SELECT orch_enqueue('hp', '{"n": "live"}') AS live \gset
-- gone: a task purged long ago (id 999999); live: the task above
INSERT INTO orch.events (task_id, from_state, to_state, reason_code, actor, at)
SELECT t, 'queued', 'executing', 'claimed', 'postgres', '2020-01-01 12:00+00'::timestamptz + g * interval '1 minute'
  FROM (VALUES (999999)) v(t), generate_series(1, 5) g;
INSERT INTO orch.events (task_id, from_state, to_state, reason_code, actor, at)
SELECT t, 'queued', 'executing', 'claimed', 'postgres', '2020-01-02 12:00+00'::timestamptz + g * interval '1 minute'
  FROM (VALUES (999999), (999998), (:live)) v(t), generate_series(1, 5) g;
INSERT INTO orch.events (task_id, from_state, to_state, reason_code, actor, at)
SELECT :live, 'queued', 'executing', 'claimed', 'postgres', '2020-01-03 12:00+00'::timestamptz + g * interval '1 minute'
  FROM generate_series(1, 3) g;
INSERT INTO orch.attempts (task_id, attempt, outcome, finished_at)
VALUES (999999, 1, 'completed', '2020-01-01 12:00+00'), (999998, 1, 'completed', '2020-01-01 13:00+00');
-- the events of a run that still exists stay; of one that no longer
-- exists, and of a user table, go
SELECT orch_publish('hp_wf', orch_define('hp_wf',
  '{"steps": [{"step_id": "gate", "type": "human_approval", "timeout": "1 hour"}]}')) IS NOT NULL AS published;
SELECT orch_start('hp_wf', '{}') AS run \gset
INSERT INTO orch.events (run_id, entity, from_state, to_state, reason_code, actor, at)
VALUES (:run, 'run', 'pending', 'running', 'started', 'postgres', '2020-01-01 12:29+00'),
       (424242, 'run', 'pending', 'running', 'started', 'postgres', '2020-01-01 12:30+00'),
       (NULL, 'order', 'new', 'paid', 'paid', 'postgres', '2020-01-01 12:31+00');
SELECT count(*) AS live_history_before FROM orch_history(:live) \gset
SELECT :live_history_before AS live_history_before;
SET orchestrator.retention = '30d';
SELECT action, count FROM orch_maintain() WHERE action LIKE 'history_partitions_%' AND action <> 'history_partitions_created' ORDER BY 1;
SELECT part FROM pg_temp.parts('events') WHERE part LIKE '%\_p2020%'
UNION ALL SELECT part FROM pg_temp.parts('attempts') WHERE part LIKE '%\_p2020%' ORDER BY 1;
SELECT tableoid::regclass AS part, task_id = :live AS live, run_id = :run AS run, count(*)
  FROM orch.events WHERE at < '2021-01-01' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;
SELECT count(*) = :live_history_before AS live_history_whole FROM orch_history(:live);
-- nothing to do again: the compacted partition holds only needed rows
SELECT action, count FROM orch_maintain() WHERE action LIKE 'history_partitions_%' AND action <> 'history_partitions_created' ORDER BY 1;
-- once the live task is gone (finished and purged), its partitions go too
SELECT d.task_id = :live AS claimed_live, orch_complete(d.task_id, d.lease_token) AS done
  FROM orch_dequeue('hp', 'w') d;
SELECT orch_cancel_run(:run, 'no longer needed') AS run_cancelled;
SET orchestrator.retention = 1;
SELECT pg_sleep(1.1);
SELECT clock_timestamp() AS before_pass \gset
SELECT action, count > 0 AS some FROM orch_maintain()
 WHERE action IN ('tasks_purged', 'runs_purged', 'history_partitions_dropped', 'history_partitions_compacted') ORDER BY 1;
SELECT count(*) AS old_partitions_left FROM (
  SELECT part FROM pg_temp.parts('events') UNION ALL SELECT part FROM pg_temp.parts('attempts')) p
 WHERE part LIKE '%\_p2020%';
-- the DEFAULT partitions kept none of the purged tasks' rows (what is left
-- there is the claims of the tasks still waiting to retry, written out as
-- they left executing, at the time of their claim: before the first range)
SELECT (SELECT count(*) FROM orch.events_default e
         WHERE NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = e.task_id)) AS events_default_rows,
       (SELECT count(*) FROM orch.attempts_default a
         WHERE NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = a.task_id)) AS attempts_default_rows,
       (SELECT count(*) FROM orch.events_default e JOIN orch.tasks t ON t.id = e.task_id
         WHERE t.state = 'awaiting_tool' AND e.to_state = 'executing') AS waiting_tasks_claims;
-- the history of a purged task is retired with its partition: what is
-- left of it is in a range partition not yet past the retention
SELECT count(*) AS orphans_in_retired_time FROM (
  SELECT h.tableoid FROM orch.events h
   WHERE NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = h.task_id)
  UNION ALL
  SELECT h.tableoid FROM orch.attempts h
   WHERE NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = h.task_id)) o
  JOIN (SELECT * FROM pg_temp.parts('events') UNION ALL SELECT * FROM pg_temp.parts('attempts')) p
    ON p.part = o.tableoid::regclass::text
 WHERE p.is_default OR p.hi <= :'before_pass'::timestamptz - interval '1 second';
RESET orchestrator.retention;

-- 4. Without a retention nothing is retired; bad settings are refused.
CREATE TABLE orch.events_p20190101_000000 PARTITION OF orch.events
    FOR VALUES FROM ('2019-01-01 00:00+00') TO ('2019-01-02 00:00+00');
SET orchestrator.retention = 0;
SELECT action, count FROM orch_maintain() WHERE action IN ('history_partitions_dropped', 'history_partitions_compacted') ORDER BY 1;
SELECT count(*) AS kept_without_retention FROM pg_temp.parts('events') WHERE part = 'events_p20190101_000000';
RESET orchestrator.retention;
\set VERBOSITY sqlstate
SET orchestrator.history_partition = -1;
SET orchestrator.history_partition = '32d';
\set VERBOSITY terse
-- only a superuser sets it
CREATE ROLE orch_hp_user;
SET ROLE orch_hp_user;
\set VERBOSITY sqlstate
SET orchestrator.history_partition = 60;
\set VERBOSITY terse
RESET ROLE;
DROP ROLE orch_hp_user;

-- 5. Runs, their steps and approvals (0.8.0) are partitioned by run id.
--    orch_maintain keeps two ranges ahead of the ids allocated, the same
--    for the three tables; each has the DEFAULT partition's keys, indexes,
--    checks and settings, and the run lifecycle trigger.  A range is looked
--    at once its newest run started before the retention's cutoff; every
--    id in it allocated, it is dropped when no run in it is kept (open, or
--    finished within the retention), else compacted once at least half of
--    it is not; with it go the runs' idempotency keys and approval
--    references (orch.run_keys, orch.approval_refs), free again.
CREATE FUNCTION pg_temp.id_parts(parent text)
RETURNS TABLE (part text, is_default boolean, lo bigint, hi bigint) LANGUAGE sql AS $$
  SELECT c.relname::text, b.bound = 'DEFAULT',
         CASE WHEN b.bound <> 'DEFAULT' AND b.bound NOT LIKE '%MINVALUE%'
              THEN substring(b.bound FROM $r$FROM \('([^']*)'\)$r$)::bigint END,
         CASE WHEN b.bound <> 'DEFAULT' THEN substring(b.bound FROM $r$TO \('([^']*)'\)$r$)::bigint END
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
   WHERE i.inhparent = format('orch.%I', parent)::regclass
$$;
SELECT c.relname, pg_get_partkeydef(c.oid) AS key
  FROM pg_class c WHERE c.oid IN ('orch.runs'::regclass, 'orch.run_steps'::regclass, 'orch.approvals'::regclass)
 ORDER BY 1;
SELECT last_value AS allocated FROM orch.runs_id_seq \gset
SELECT parent, count(*) >= 2 AS ahead, max(hi) >= :allocated + 2000 AS two_ranges_ahead,
       count(*) = count(DISTINCT (lo, hi)) AS distinct_ranges,
       bool_and(hi - lo >= 1000) AS at_least_1000_ids
  FROM (VALUES ('runs'), ('run_steps'), ('approvals')) v(parent), pg_temp.id_parts(parent)
 WHERE NOT is_default GROUP BY parent ORDER BY parent;
SELECT count(DISTINCT array[lo, hi]) = (SELECT count(*) FROM pg_temp.id_parts('runs') WHERE NOT is_default)
       AS same_ranges_for_all_three
  FROM (VALUES ('runs'), ('run_steps'), ('approvals')) v(parent), pg_temp.id_parts(parent) WHERE NOT is_default;
SELECT p.part LIKE 'run\_steps\_p%' AS steps, c.reloptions,
       (SELECT count(*) FROM pg_index x WHERE x.indrelid = c.oid) AS indexes,
       (SELECT count(*) FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'c') AS checks,
       c.relrowsecurity AS rls
  FROM (SELECT part FROM pg_temp.id_parts('runs') WHERE NOT is_default ORDER BY lo LIMIT 1) r,
       LATERAL (VALUES (r.part), (replace(r.part, 'runs_', 'run_steps_'))) p(part)
  JOIN pg_class c ON c.oid = ('orch.' || p.part)::regclass ORDER BY 1;
SELECT count(*) AS lifecycle_triggers FROM pg_trigger t JOIN pg_temp.id_parts('runs') p
    ON t.tgrelid = ('orch.' || p.part)::regclass WHERE t.tgname = 'runs_lifecycle';
-- two ranges made here, as orch_maintain would have made them, filled with
-- runs: A finished, B open, C finished with an approval and a key in the
-- first; D open in the second
SELECT setval('orch.runs_id_seq', 900000) IS NOT NULL AS moved;
CREATE TABLE orch.runs_p900001 PARTITION OF orch.runs FOR VALUES FROM (900001) TO (900011);
CREATE TABLE orch.run_steps_p900001 PARTITION OF orch.run_steps FOR VALUES FROM (900001) TO (900011);
CREATE TABLE orch.approvals_p900001 PARTITION OF orch.approvals FOR VALUES FROM (900001) TO (900011);
CREATE TABLE orch.runs_p900011 PARTITION OF orch.runs FOR VALUES FROM (900011) TO (900021);
CREATE TABLE orch.run_steps_p900011 PARTITION OF orch.run_steps FOR VALUES FROM (900011) TO (900021);
CREATE TABLE orch.approvals_p900011 PARTITION OF orch.approvals FOR VALUES FROM (900011) TO (900021);
SELECT orch_start('hp_wf', '{"r": "A"}') AS run_a \gset
SELECT orch_start('hp_wf', '{"r": "B"}') AS run_b \gset
SELECT orch_start('hp_wf', '{"r": "C"}', idempotency_key => 'hp-key') AS run_c \gset
SELECT orch_cancel_run(:run_a, 'not needed') AS a;
SELECT orch_approve(:run_c, 'gate', 'HP-REF', 'alice') AS c;
SELECT setval('orch.runs_id_seq', 900010) IS NOT NULL AS first_range_allocated;
SELECT orch_start('hp_wf', '{"r": "D"}') AS run_d \gset
SELECT tableoid::regclass AS part, count(*) FROM orch.runs WHERE id IN (:run_a, :run_b, :run_c, :run_d)
 GROUP BY 1 ORDER BY 1;
-- while kept, the key names run C and the reference is used
SELECT orch_start('hp_wf', '{"r": "C"}', idempotency_key => 'hp-key') = :run_c AS key_replays;
DO $$ BEGIN
    PERFORM orch_approve(currval('orch.runs_id_seq') - 1, 'gate', 'HP-REF', 'bob');
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'reference in use: %', SQLSTATE;
END $$;
SELECT count(*) AS b_run_events FROM orch.events WHERE run_id = :run_b AND task_id IS NULL \gset
SET orchestrator.retention = '1s';
SELECT pg_sleep(1.1);
-- A and C (2 of 3) are past the retention: the first range is compacted to
-- B; the second (D open) is left as it is (the runs' and the steps' ranges
-- compacted; a time partition of the events may be compacted in the same
-- pass, when one written here has ended before the cutoff by then)
SELECT string_agg(action || ' ' || CASE WHEN action = 'runs_purged' THEN count::text
                                        ELSE (count >= 2)::text END, ', ' ORDER BY action) AS pass
  FROM orch_maintain() WHERE action IN ('runs_purged', 'history_partitions_compacted');
SELECT (SELECT count(*) FROM orch.runs WHERE id IN (:run_a, :run_c)) AS a_c_left,
       (SELECT count(*) FROM orch.run_steps WHERE run_id IN (:run_a, :run_c)) AS their_steps,
       (SELECT count(*) FROM orch.approvals WHERE run_id = :run_c) AS c_approvals,
       (SELECT count(*) FROM orch.run_keys WHERE run_id = :run_c) AS c_key,
       (SELECT count(*) FROM orch.approval_refs WHERE run_id = :run_c) AS c_reference;
-- B is whole, as it was: its row, steps and task, no event added by the move
SELECT r.state, (SELECT count(*) FROM orch.run_steps s WHERE s.run_id = r.id) AS steps,
       (SELECT count(*) FROM orch.events e WHERE e.run_id = r.id AND e.task_id IS NULL) = :b_run_events AS same_events,
       (SELECT s -> 'run' ->> 'state' FROM orch_run_status(r.id) AS f(s)) AS status
  FROM orch.runs r WHERE r.id = :run_b;
-- the key and the reference are free again
SELECT orch_start('hp_wf', '{"r": "C2"}', idempotency_key => 'hp-key') <> :run_c AS key_starts_a_new_run;
SELECT orch_approve(:run_b, 'gate', 'HP-REF', 'bob') AS b_approved;
-- B and D finished: the first range (all allocated) is dropped, the second
-- (still receiving ids) emptied and kept
SELECT orch_cancel_run(:run_d, 'not needed') AS d;
SELECT orch_cancel_run(r.id, 'not needed') AS c2 FROM orch.runs r WHERE r.idempotency_key = 'hp-key';
SELECT pg_sleep(1.1);
SELECT count > 0 AS purged FROM orch_maintain() WHERE action = 'runs_purged';
SELECT parent, string_agg(part, ', ' ORDER BY part) AS left
  FROM (VALUES ('runs'), ('run_steps'), ('approvals')) v(parent), pg_temp.id_parts(parent)
 WHERE part LIKE ANY (ARRAY['%\_p900001', '%\_p900011']) GROUP BY parent ORDER BY parent;
SELECT (SELECT count(*) FROM orch.runs WHERE id >= 900001) AS runs_left,
       (SELECT count(*) FROM orch.run_steps WHERE run_id >= 900001) AS steps_left,
       (SELECT count(*) FROM orch.approvals WHERE run_id >= 900001) AS approvals_left,
       (SELECT count(*) FROM orch.approval_refs WHERE run_id >= 900001) AS references_left,
       (SELECT count(*) FROM orch.run_keys WHERE run_id >= 900001) AS keys_left;
RESET orchestrator.retention;

\c :suite_db
DROP DATABASE orch_hp;
