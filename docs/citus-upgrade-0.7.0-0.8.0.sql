-- docs/citus-upgrade-0.7.0-0.8.0.sql
--
-- Updates an orchestrator installation distributed with Citus at 0.7.0 to
-- 0.8.0, keeping every row.  ALTER EXTENSION UPDATE cannot do it in place
-- on distributed tables (docs/citus.md, "Upgrading a distributed installation"),
-- so this script takes the rows to the coordinator, reinstalls 0.7.0 as
-- local tables, loads the rows back as they were, updates those tables on
-- one node (the tested 0.7.0 -> 0.8.0 path) and distributes them again.
--
-- Run it on the coordinator, as a superuser, with the 0.8.0 files installed
-- on every node, while nothing else uses the orchestrator (stop producers
-- and workers; SELECT orch_unschedule_maintenance() first, and schedule it
-- again after):
--
--   psql -v ON_ERROR_STOP=1 -d yourdb -f docs/citus-upgrade-0.7.0-0.8.0.sql
--
-- It runs in three transactions.  If the first or second fails, the
-- installation is as it was (still distributed, at 0.7.0).  If the third
-- fails, the installation is at 0.8.0 on the coordinator, every row there,
-- not yet distributed: run SELECT * FROM orch_distribute(<shard count>)
-- again.  The copy of the rows stays in schema orch_upgrade until the end;
-- drop it yourself if the script stopped after the second transaction.
--
-- The coordinator must have room for every row of the orchestrator's
-- tables (twice, briefly).  Objects of your own that depend on the
-- extension (views on orch_tasks, state machines attached to your tables)
-- must be dropped first and created again after: the first transaction
-- stops, naming them, and changes nothing, when there are any.  The counters (orch.metric_totals) were never folded on Citus at
-- 0.7.0: they count from the update on (the history itself is all kept).

\set ON_ERROR_STOP 1

-- ---------------------------------------------------------------------------
-- 1. The rows, copied into local tables of schema orch_upgrade.
-- ---------------------------------------------------------------------------
BEGIN;
DO $check$
DECLARE
    own text;
BEGIN
    IF (SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'orchestrator')
       IS DISTINCT FROM '0.7.0' THEN
        RAISE EXCEPTION 'this script updates orchestrator 0.7.0; this database has %',
            coalesce((SELECT extversion FROM pg_catalog.pg_extension
                       WHERE extname OPERATOR(pg_catalog.=) 'orchestrator'), 'no orchestrator');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                    WHERE logicalrelid OPERATOR(pg_catalog.=) 'orch.tasks'::pg_catalog.regclass) THEN
        RAISE EXCEPTION 'orch.tasks is not distributed: update with ALTER EXTENSION orchestrator UPDATE';
    END IF;
    -- objects of your own that depend on the extension's (the Citus shards
    -- in schema orch, and what belongs to them, go with the extension)
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.pg_describe_object(o.classid, o.objid, o.objsubid), '; ')
      INTO own
      FROM (SELECT d.classid, d.objid, d.objsubid,
                   -- the table a default, policy, trigger, rule or constraint belongs to
                   CASE d.classid
                       WHEN 'pg_catalog.pg_attrdef'::pg_catalog.regclass THEN
                           (SELECT adrelid FROM pg_catalog.pg_attrdef WHERE oid OPERATOR(pg_catalog.=) d.objid)
                       WHEN 'pg_catalog.pg_policy'::pg_catalog.regclass THEN
                           (SELECT polrelid FROM pg_catalog.pg_policy WHERE oid OPERATOR(pg_catalog.=) d.objid)
                       WHEN 'pg_catalog.pg_trigger'::pg_catalog.regclass THEN
                           (SELECT tgrelid FROM pg_catalog.pg_trigger WHERE oid OPERATOR(pg_catalog.=) d.objid)
                       WHEN 'pg_catalog.pg_rewrite'::pg_catalog.regclass THEN
                           (SELECT ev_class FROM pg_catalog.pg_rewrite WHERE oid OPERATOR(pg_catalog.=) d.objid)
                       WHEN 'pg_catalog.pg_constraint'::pg_catalog.regclass THEN
                           (SELECT conrelid FROM pg_catalog.pg_constraint WHERE oid OPERATOR(pg_catalog.=) d.objid)
                       WHEN 'pg_catalog.pg_class'::pg_catalog.regclass THEN d.objid
                   END AS rel
              FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_depend m ON m.classid OPERATOR(pg_catalog.=) d.refclassid
               AND m.objid OPERATOR(pg_catalog.=) d.refobjid AND m.deptype OPERATOR(pg_catalog.=) 'e'
              JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) m.refobjid
               AND e.extname OPERATOR(pg_catalog.=) 'orchestrator'
             WHERE d.deptype OPERATOR(pg_catalog.=) ANY (ARRAY['n', 'a']::"char"[])
               AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend x
                                WHERE x.classid OPERATOR(pg_catalog.=) d.classid
                                  AND x.objid OPERATOR(pg_catalog.=) d.objid
                                  AND x.deptype OPERATOR(pg_catalog.=) 'e')) o
     WHERE CASE WHEN o.rel IS NOT NULL
                THEN (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) o.rel)
                     OPERATOR(pg_catalog.<>) 'orch'::pg_catalog.regnamespace
                 AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend x
                                  WHERE x.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                                    AND x.objid OPERATOR(pg_catalog.=) o.rel AND x.deptype OPERATOR(pg_catalog.=) 'e')
                ELSE (pg_catalog.pg_identify_object(o.classid, o.objid, o.objsubid)).schema IS DISTINCT FROM 'orch'
           END;
    IF own IS NOT NULL THEN
        RAISE EXCEPTION 'objects of your own depend on the orchestrator: %', own
            USING HINT = 'Drop them first and create them again after the update.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'orch_upgrade') THEN
        RAISE EXCEPTION 'schema orch_upgrade exists (left by an earlier run?): look at it, drop it, run again';
    END IF;
END
$check$;
CREATE SCHEMA orch_upgrade;
DO $copy$
DECLARE
    t text;
BEGIN
    FOR t IN
        SELECT c.relname FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND d.objid OPERATOR(pg_catalog.=) c.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
           AND e.extname OPERATOR(pg_catalog.=) 'orchestrator'
         WHERE c.relkind OPERATOR(pg_catalog.=) 'r'
    LOOP
        EXECUTE pg_catalog.format('CREATE TABLE orch_upgrade.%I AS SELECT * FROM orch.%I', t, t);
    END LOOP;
END
$copy$;
-- the coordinator's sequences, and the shard count to distribute with again
CREATE TABLE orch_upgrade."(sequences)" AS
SELECT c.relname AS name, pg_catalog.pg_sequence_last_value(c.oid) AS last_value
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'orch'::pg_catalog.regnamespace
   AND c.relkind OPERATOR(pg_catalog.=) 'S';
CREATE TABLE orch_upgrade."(shards)" AS
SELECT pg_catalog.count(*)::integer AS shard_count FROM pg_catalog.pg_dist_shard
 WHERE logicalrelid OPERATOR(pg_catalog.=) 'orch.tasks'::pg_catalog.regclass;
COMMIT;

-- ---------------------------------------------------------------------------
-- 2. 0.7.0 again, as local tables, with the rows as they were (no trigger
--    runs: they are loaded, not made), then updated to 0.8.0 on one node.
-- ---------------------------------------------------------------------------
BEGIN;
-- (CASCADE: the Citus shards placed on this node are in schema orch; the
-- first transaction made sure nothing of yours depends on the extension)
DROP EXTENSION orchestrator CASCADE;
CREATE EXTENSION orchestrator VERSION '0.7.0';
SET LOCAL session_replication_role = replica;
DO $load$
DECLARE
    tables text;
    t text;
    cols text;
BEGIN
    -- what CREATE EXTENSION put in (the built-in task machine) is in the copy too
    SELECT pg_catalog.string_agg(pg_catalog.format('orch.%I', c.relname), ', ') INTO tables
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace OPERATOR(pg_catalog.=) 'orch_upgrade'::pg_catalog.regnamespace
       AND c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relname::text !~ '^\(';
    EXECUTE 'TRUNCATE ' OPERATOR(pg_catalog.||) tables;
    FOR t IN SELECT c.relname FROM pg_catalog.pg_class c
              WHERE c.relnamespace OPERATOR(pg_catalog.=) 'orch_upgrade'::pg_catalog.regnamespace
                AND c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relname::text !~ '^\('
    LOOP
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.format('orch_upgrade.%I', t)::pg_catalog.regclass
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
        EXECUTE pg_catalog.format('INSERT INTO orch.%I (%s) SELECT %s FROM orch_upgrade.%I', t, cols, cols, t);
    END LOOP;
    -- the coordinator's sequences go on from where they were (every id of
    -- the coordinator's range stored came from them)
    FOR t IN SELECT s.name FROM orch_upgrade."(sequences)" s WHERE s.last_value IS NOT NULL
    LOOP
        PERFORM pg_catalog.setval(pg_catalog.format('orch.%I', t)::pg_catalog.regclass,
                                  (SELECT s.last_value FROM orch_upgrade."(sequences)" s
                                    WHERE s.name OPERATOR(pg_catalog.=) t));
    END LOOP;
END
$load$;
RESET session_replication_role;
ALTER EXTENSION orchestrator UPDATE TO '0.8.0';
-- The counters start from here: 0.7.0 folded none on Citus, and the rows'
-- transaction ids come from several nodes.  A fold state "ahead" of this
-- node is reset to the present by the next fold, which counts nothing.
INSERT INTO orch.metric_state (snap_xmin, snap_xmax) VALUES (0, 9223372036854775807)
    ON CONFLICT (id) DO UPDATE SET snap_xmax = excluded.snap_xmax;
SELECT orch.metrics_fold() AS rows_counted;
COMMIT;

-- ---------------------------------------------------------------------------
-- 3. Distributed again, with the same shard count; each worker's sequences
--    past the ids of its range that the rows hold (ids are never reused).
-- ---------------------------------------------------------------------------
-- The update made the old history, run, step and approval tables partitions
-- of the new ones (orch.events_before_080, orch.attempts_before_080,
-- orch.runs_before_080, orch.run_steps_before_080,
-- orch.approvals_before_080); on the workers, where
-- the extension's tables are empty copies, those are empty too, and would
-- collide with the partitions Citus creates there: they go.
SELECT pg_catalog.bool_and(success) AS worker_copies_dropped
  FROM pg_catalog.run_command_on_workers(
       'DROP TABLE IF EXISTS orch.events_before_080, orch.attempts_before_080, orch.runs_before_080,'
       ' orch.run_steps_before_080, orch.approvals_before_080');
BEGIN;
SELECT pg_catalog.count(*) AS objects FROM orch_distribute((SELECT shard_count FROM orch_upgrade."(shards)"));
SELECT pg_catalog.bool_and(success) AS worker_sequences_set
  FROM pg_catalog.run_command_on_workers(pg_catalog.format($do$
DO $w$
DECLARE
    top jsonb := %L;
    g bigint := (SELECT groupid FROM pg_catalog.pg_dist_local_group);
    s record;
BEGIN
    FOR s IN SELECT key, value::bigint AS v FROM pg_catalog.jsonb_each_text(top->(g::text)) LOOP
        IF coalesce(pg_catalog.pg_sequence_last_value(('orch.' || s.key)::regclass), 0) < s.v THEN
            PERFORM pg_catalog.setval(('orch.' || s.key)::regclass, s.v);
        END IF;
    END LOOP;
END
$w$
$do$, (
    -- the highest id stored in each node's range (group id << 48), per sequence
    SELECT pg_catalog.jsonb_object_agg(g, per)
      FROM (SELECT g, pg_catalog.jsonb_object_agg(seq, m) AS per
              FROM (SELECT x.seq, x.id OPERATOR(pg_catalog.>>) 48 AS g, pg_catalog.max(x.id) AS m
                      FROM (SELECT 'events_id_seq' AS seq, id FROM orch.tasks
                            UNION ALL SELECT 'attempts_id_seq', id FROM orch.attempts
                            UNION ALL SELECT 'attempts_id_seq', complete_attempt_id FROM orch.tasks
                            UNION ALL SELECT 'events_id_seq', id FROM orch.events
                            UNION ALL SELECT 'events_id_seq', enqueue_event_id FROM orch.tasks
                            UNION ALL SELECT 'events_id_seq', claim_event_id FROM orch.tasks
                            UNION ALL SELECT 'events_id_seq', complete_event_id FROM orch.tasks
                            UNION ALL SELECT 'commands_id_seq', id FROM orch.commands
                            UNION ALL SELECT 'runs_id_seq', id FROM orch.runs) x
                     WHERE x.id IS NOT NULL
                     GROUP BY 1, 2) y
             GROUP BY g) z)::text));
COMMIT;
-- each shard's fold starts from the rows present, on the node that holds
-- it (after the commit: the nodes see the new shards from then on)
SELECT pg_catalog.bool_and(success) AS shard_folds_started
  FROM pg_catalog.run_command_on_shards('orch.tasks', 'SELECT orch.metrics_fold_shard(''%s'', true)');

DROP SCHEMA orch_upgrade CASCADE;
SELECT extversion AS orchestrator_version FROM pg_catalog.pg_extension
 WHERE extname OPERATOR(pg_catalog.=) 'orchestrator';
