/* orchestrator 0.7.0 -> 0.8.0: one statement-end dispatcher on orch.tasks;
   the tenant fence of the views, bindings that survive a restore. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.8.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- The tables that become partitioned (docs/storage.md): the
-- history by time (orch.events, orch.attempts, below), the runs, their
-- steps and their approvals by run id (here), each retired whole by
-- orch_maintain.  First, before anything else of this update touches them,
-- so that what follows applies to the new tables.  Each existing table is
-- kept whole, with its keys and indexes, as the first partition (attached,
-- not copied: the attach reads it once to check the bound); it is renamed
-- *_before_080 with its indexes and leaves the extension's members (a dump
-- keeps it as a table of its own, attached on restore).  The run tables'
-- new parents are made like them here (the history's, with 0.8.0's
-- columns, below); the old runs table's trigger goes (the new parent's is
-- cloned onto it).  What must be unique across partitions moves to tables
-- of its own: the idempotency keys of runs (orch.run_keys) and the approval
-- references (orch.approval_refs).
-- ---------------------------------------------------------------------------
DO $before_080$
DECLARE
    h record;
    i record;
BEGIN
    FOR h IN SELECT * FROM (VALUES ('events', NULL), ('attempts', NULL), ('runs', 'id'), ('run_steps', 'run_id'),
                                   ('approvals', 'run_id')) AS x(tbl, key) LOOP
        FOR i IN SELECT c.relname FROM pg_catalog.pg_index x
                   JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) x.indexrelid
                  WHERE x.indrelid OPERATOR(pg_catalog.=) pg_catalog.format('orch.%I', h.tbl)::regclass LOOP
            EXECUTE pg_catalog.format('ALTER INDEX orch.%I RENAME TO %I', i.relname,
                                      pg_catalog.replace(i.relname, h.tbl OPERATOR(pg_catalog.||) '_',
                                                         h.tbl OPERATOR(pg_catalog.||) '_before_080_'));
        END LOOP;
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I RENAME TO %I', h.tbl, h.tbl OPERATOR(pg_catalog.||) '_before_080');
        EXECUTE pg_catalog.format('ALTER EXTENSION orchestrator DROP TABLE orch.%I', h.tbl OPERATOR(pg_catalog.||) '_before_080');
        IF h.key IS NOT NULL THEN
            EXECUTE pg_catalog.format('CREATE TABLE orch.%I (LIKE orch.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS'
                                      ' INCLUDING STORAGE INCLUDING COMPRESSION) PARTITION BY RANGE (%I)',
                                      h.tbl, h.tbl OPERATOR(pg_catalog.||) '_before_080', h.key);
        END IF;
    END LOOP;
END
$before_080$;
DROP TRIGGER runs_lifecycle ON orch.runs_before_080;
CREATE TABLE orch.runs_default PARTITION OF orch.runs (PRIMARY KEY (id, tenant_id)) DEFAULT;
CREATE INDEX runs_open_idx ON orch.runs_default (deadline_at)
    WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'waiting_approval', 'paused']);
CREATE INDEX runs_retry_of_idx ON orch.runs_default (retry_of, tenant_id) WHERE retry_of IS NOT NULL;
CREATE INDEX runs_correlation_idx ON orch.runs_default (correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX runs_failed_idx ON orch.runs_default (finished_at) WHERE state OPERATOR(pg_catalog.=) 'failed';
CREATE TABLE orch.run_steps_default PARTITION OF orch.run_steps (PRIMARY KEY (run_id, step_id, tenant_id))
    DEFAULT WITH (fillfactor = 70);
CREATE INDEX run_steps_timer_idx ON orch.run_steps_default (least(wake_at, cap_at))
    WHERE wake_at IS NOT NULL OR cap_at IS NOT NULL;
CREATE TABLE orch.approvals_default PARTITION OF orch.approvals (PRIMARY KEY (approval_ref, tenant_id)) DEFAULT;
-- the old tables attached: every run id this node's sequence gave out.
-- Rows of higher ids (on Citus, docs/citus-upgrade-0.7.0-0.8.0.sql, the
-- runs started on a worker node, in that node's id range) move to the
-- DEFAULT partitions, where later runs of their range go too: the first
-- range must not reach into ids still to come.
DO $attach_runs$
DECLARE
    h record;
    bound bigint;
    cols text;
BEGIN
    bound := coalesce(pg_catalog.pg_sequence_last_value('orch.runs_id_seq'::pg_catalog.regclass), 0)
             OPERATOR(pg_catalog.+) 1;
    FOR h IN SELECT * FROM (VALUES ('runs', 'id'), ('run_steps', 'run_id'), ('approvals', 'run_id')) AS x(tbl, key) LOOP
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
          FROM pg_catalog.pg_attribute a
         WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.format('orch.%I', h.tbl)::pg_catalog.regclass
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
        EXECUTE pg_catalog.format('WITH moved AS (DELETE FROM orch.%I WHERE %I OPERATOR(pg_catalog.>=) %s RETURNING %s)'
                                  ' INSERT INTO orch.%I (%s) SELECT %s FROM moved',
                                  h.tbl OPERATOR(pg_catalog.||) '_before_080', h.key, bound, cols,
                                  h.tbl OPERATOR(pg_catalog.||) '_default', cols, cols);
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ATTACH PARTITION orch.%I FOR VALUES FROM (MINVALUE) TO (%s)',
                                  h.tbl, h.tbl OPERATOR(pg_catalog.||) '_before_080', bound);
    END LOOP;
END
$attach_runs$;
CREATE TRIGGER runs_lifecycle
    BEFORE INSERT OR UPDATE ON orch.runs
    FOR EACH ROW EXECUTE FUNCTION orch_run_lifecycle();
CREATE TABLE orch.run_keys (
    tenant_id       text NOT NULL DEFAULT 'default',
    idempotency_key text NOT NULL,
    run_id          bigint NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key)
);
COMMENT ON TABLE orch.run_keys IS
  'The idempotency keys of the kept runs (orch_start): one run per key and tenant; retired with its run.';
INSERT INTO orch.run_keys (tenant_id, idempotency_key, run_id)
SELECT r.tenant_id, r.idempotency_key, r.id FROM orch.runs r WHERE r.idempotency_key IS NOT NULL;
CREATE TABLE orch.approval_refs (
    approval_ref text NOT NULL,
    tenant_id    text NOT NULL DEFAULT 'default',
    run_id       bigint NOT NULL,
    PRIMARY KEY (approval_ref, tenant_id)
);
COMMENT ON TABLE orch.approval_refs IS
  'The approval references in use (orch_approve, orch_reject, orch_acknowledge_drift): single-use across every partition of orch.approvals; retired with the run they were given to.';
INSERT INTO orch.approval_refs (approval_ref, tenant_id, run_id)
SELECT a.approval_ref, a.tenant_id, a.run_id FROM orch.approvals a;
COMMENT ON TABLE orch.runs IS
  'Workflow runs: a pinned definition version (name, version, content hash), the input, pins, state (running, waiting_approval, paused, succeeded, failed, canceled; C trigger run_lifecycle) and phase (forward, compensating).';
COMMENT ON TABLE orch.run_steps IS
  'The steps of a run: their state, the task(s) executing them, outputs, timers and compensation state.';
SELECT pg_catalog.pg_extension_config_dump('orch.runs_default', '');
SELECT pg_catalog.pg_extension_config_dump('orch.run_keys', '');
SELECT pg_catalog.pg_extension_config_dump('orch.run_steps_default', '');
SELECT pg_catalog.pg_extension_config_dump('orch.approvals_default', '');
SELECT pg_catalog.pg_extension_config_dump('orch.approval_refs', '');

-- ---------------------------------------------------------------------------
-- The task row in the order its writes want (docs/storage.md, *The
-- task row*): a claim and a completion each rewrite the row, and the WAL
-- record of a row updated in place holds only the bytes between the prefix
-- and the suffix the two versions share, so what never changes after the
-- enqueue comes first.  PostgreSQL cannot reorder the columns of a table, so
-- orch.tasks is made again with 0.8.0's columns in that order and its rows
-- copied (one pass over the table, which this update holds exclusively
-- meanwhile).  Everything the old table carried is made again as it was:
-- its indexes, constraints, triggers (and whether each is enabled), row
-- security and policies, settings, privileges, comments, column statistics
-- targets and options, replica identity, publications and statistics
-- objects; the extension's views that read it are pointed at the new table
-- with CREATE OR REPLACE, so they keep their identity (and a view of yours
-- on orch_tasks is kept).  An object of yours that depends on orch.tasks
-- itself (a view, a foreign key, a function of its row type) stops the
-- update before anything changes, named: drop it and create it again after.
-- ---------------------------------------------------------------------------
DO $tasks_080$
DECLARE
    old     pg_catalog.oid := 'orch.tasks'::pg_catalog.regclass;
    ext     pg_catalog.oid := (SELECT e.oid FROM pg_catalog.pg_extension e
                                WHERE e.extname OPERATOR(pg_catalog.=) 'orchestrator');
    own     text;
    cols    text;
    later   text[] := '{}';
    views   text[];
    stmt    text;
BEGIN
    -- objects not of the extension that depend on the table or its row type,
    -- other than the table's own parts (a policy, trigger, index, constraint
    -- or default of orch.tasks is made again below)
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.pg_describe_object(o.classid, o.objid, 0), '; ')
      INTO own
      FROM (SELECT CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                        THEN 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid ELSE d.classid END AS classid,
                   CASE WHEN d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                        THEN (SELECT r.ev_class FROM pg_catalog.pg_rewrite r WHERE r.oid OPERATOR(pg_catalog.=) d.objid)
                        ELSE d.objid END AS objid
              FROM pg_catalog.pg_depend d
             WHERE d.deptype OPERATOR(pg_catalog.=) 'n'
               AND ((d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                     AND d.refobjid OPERATOR(pg_catalog.=) old)
                    OR (d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_type'::pg_catalog.regclass
                        AND d.refobjid OPERATOR(pg_catalog.=)
                            (SELECT c.reltype FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) old)))
               AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_policy'::pg_catalog.regclass
                        AND (SELECT p.polrelid FROM pg_catalog.pg_policy p
                              WHERE p.oid OPERATOR(pg_catalog.=) d.objid) OPERATOR(pg_catalog.=) old)
               AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass
                        AND (SELECT t.tgrelid FROM pg_catalog.pg_trigger t
                              WHERE t.oid OPERATOR(pg_catalog.=) d.objid) OPERATOR(pg_catalog.=) old)
               AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass
                        AND (SELECT c.conrelid FROM pg_catalog.pg_constraint c
                              WHERE c.oid OPERATOR(pg_catalog.=) d.objid) OPERATOR(pg_catalog.=) old)
               AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass
                        AND (SELECT s.stxrelid FROM pg_catalog.pg_statistic_ext s
                              WHERE s.oid OPERATOR(pg_catalog.=) d.objid) OPERATOR(pg_catalog.=) old)
               AND NOT (d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                        AND EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                                     WHERE i.indexrelid OPERATOR(pg_catalog.=) d.objid
                                       AND i.indrelid OPERATOR(pg_catalog.=) old))) o
     WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend e
                        WHERE e.classid OPERATOR(pg_catalog.=) o.classid AND e.objid OPERATOR(pg_catalog.=) o.objid
                          AND e.deptype OPERATOR(pg_catalog.=) 'e' AND e.refobjid OPERATOR(pg_catalog.=) ext)
       AND NOT (o.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                AND o.objid OPERATOR(pg_catalog.=) old);
    IF own IS NOT NULL THEN
        RAISE EXCEPTION 'orchestrator 0.8.0 makes orch.tasks again, and objects not of the extension depend on it: %', own
            USING ERRCODE := 'dependent_objects_still_exist',
                  HINT := 'Drop them, update, and create them again (orch_tasks, the view, is kept).';
    END IF;

    -- What the old table carries, as statements to run on the new one once
    -- the old is gone (its index and constraint names are free then); the
    -- claim index is made anew below, on the queue's hash.
    SELECT pg_catalog.array_agg(pg_catalog.pg_get_indexdef(i.indexrelid) ORDER BY i.indexrelid) INTO later
      FROM pg_catalog.pg_index i
     WHERE i.indrelid OPERATOR(pg_catalog.=) old
       AND i.indexrelid OPERATOR(pg_catalog.<>)
           coalesce(pg_catalog.to_regclass('orch.tasks_claim_idx')::pg_catalog.oid, 0::pg_catalog.oid)
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c
                        WHERE c.conindid OPERATOR(pg_catalog.=) i.indexrelid
                          AND c.conrelid OPERATOR(pg_catalog.=) old);
    later := coalesce(later, '{}');
    -- constraints other than the primary key (NOT NULL and defaults are the
    -- new table's own)
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(
               pg_catalog.format('ALTER TABLE orch.tasks ADD CONSTRAINT %I %s', c.conname,
                                 pg_catalog.pg_get_constraintdef(c.oid)) ORDER BY c.oid), '{}')
      INTO later
      FROM pg_catalog.pg_constraint c
     WHERE c.conrelid OPERATOR(pg_catalog.=) old AND c.contype OPERATOR(pg_catalog.<>) 'p';
    -- triggers, and the state of those not simply enabled
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(s ORDER BY o, n), '{}') INTO later
      FROM (SELECT t.oid AS o, 1 AS n, pg_catalog.pg_get_triggerdef(t.oid) AS s
              FROM pg_catalog.pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) old AND NOT t.tgisinternal
            UNION ALL
            SELECT t.oid, 2, pg_catalog.format('ALTER TABLE orch.tasks %s TRIGGER %I',
                             CASE WHEN t.tgenabled OPERATOR(pg_catalog.=) 'D' THEN 'DISABLE'
                                  WHEN t.tgenabled OPERATOR(pg_catalog.=) 'R' THEN 'ENABLE REPLICA'
                                  ELSE 'ENABLE ALWAYS' END, t.tgname)
              FROM pg_catalog.pg_trigger t
             WHERE t.tgrelid OPERATOR(pg_catalog.=) old AND NOT t.tgisinternal
               AND t.tgenabled OPERATOR(pg_catalog.<>) 'O') x;
    -- row security and its policies (a NULL: nothing to change on the new
    -- table, whose settings are the defaults and 0.8.0's)
    SELECT later OPERATOR(pg_catalog.||) ARRAY[
               CASE WHEN c.relrowsecurity THEN 'ALTER TABLE orch.tasks ENABLE ROW LEVEL SECURITY' END,
               CASE WHEN c.relforcerowsecurity THEN 'ALTER TABLE orch.tasks FORCE ROW LEVEL SECURITY' END,
               -- (the storage settings the user set: 0.7.0's own are not
               -- carried, the new table has 0.8.0's; a NULL when none)
               (SELECT 'ALTER TABLE orch.tasks SET (' OPERATOR(pg_catalog.||)
                       pg_catalog.string_agg(r.o, ', ' ORDER BY r.n) OPERATOR(pg_catalog.||) ')'
                  FROM pg_catalog.unnest(c.reloptions) WITH ORDINALITY AS r(o, n)
                 WHERE r.o OPERATOR(pg_catalog.<>) ALL (ARRAY['fillfactor=80', 'autovacuum_vacuum_scale_factor=0.02',
                                                              'autovacuum_vacuum_insert_scale_factor=0.05',
                                                              'autovacuum_analyze_scale_factor=0.02'])),
               CASE WHEN c.relreplident OPERATOR(pg_catalog.=) 'f' THEN 'ALTER TABLE orch.tasks REPLICA IDENTITY FULL'
                    WHEN c.relreplident OPERATOR(pg_catalog.=) 'n' THEN 'ALTER TABLE orch.tasks REPLICA IDENTITY NOTHING'
                    WHEN c.relreplident OPERATOR(pg_catalog.=) 'i' THEN pg_catalog.format('ALTER TABLE orch.tasks REPLICA IDENTITY USING INDEX %I',
                                   (SELECT r.relname FROM pg_catalog.pg_index i
                                      JOIN pg_catalog.pg_class r ON r.oid OPERATOR(pg_catalog.=) i.indexrelid
                                     WHERE i.indrelid OPERATOR(pg_catalog.=) old AND i.indisreplident)) END,
               pg_catalog.format('COMMENT ON TABLE orch.tasks IS %L', pg_catalog.obj_description(old, 'pg_class'))]
      INTO later
      FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) old;
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(pg_catalog.format(
               'CREATE POLICY %I ON orch.tasks AS %s FOR %s TO %s%s%s', p.polname,
               CASE WHEN p.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
               CASE WHEN p.polcmd OPERATOR(pg_catalog.=) 'r' THEN 'SELECT'
                    WHEN p.polcmd OPERATOR(pg_catalog.=) 'a' THEN 'INSERT'
                    WHEN p.polcmd OPERATOR(pg_catalog.=) 'w' THEN 'UPDATE'
                    WHEN p.polcmd OPERATOR(pg_catalog.=) 'd' THEN 'DELETE' ELSE 'ALL' END,
               (SELECT pg_catalog.string_agg(CASE WHEN r OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                                                  ELSE pg_catalog.quote_ident(r::pg_catalog.regrole::text) END, ', ')
                  FROM pg_catalog.unnest(p.polroles) r),
               ' USING (' OPERATOR(pg_catalog.||) pg_catalog.pg_get_expr(p.polqual, p.polrelid)
                          OPERATOR(pg_catalog.||) ')',
               ' WITH CHECK (' OPERATOR(pg_catalog.||) pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid)
                               OPERATOR(pg_catalog.||) ')') ORDER BY p.oid), '{}')
      INTO later
      FROM pg_catalog.pg_policy p WHERE p.polrelid OPERATOR(pg_catalog.=) old;
    -- privileges granted on the table (the owner's are the new table's own;
    -- PUBLIC's are revoked first, as the install does)
    later := pg_catalog.array_append(later, 'REVOKE ALL ON orch.tasks FROM PUBLIC');
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(pg_catalog.format(
               'GRANT %s ON orch.tasks TO %s%s', a.privilege_type,
               CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(a.grantee::pg_catalog.regrole::text) END,
               CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)), '{}')
      INTO later
      FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
     WHERE c.oid OPERATOR(pg_catalog.=) old AND a.grantee OPERATOR(pg_catalog.<>) c.relowner;
    -- each column's comment, statistics target and options, by name
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(s ORDER BY n, k), '{}') INTO later
      FROM (SELECT a.attnum AS n, 1 AS k, pg_catalog.format('COMMENT ON COLUMN orch.tasks.%I IS %L', a.attname,
                          pg_catalog.col_description(old, a.attnum)) AS s
              FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) old AND a.attnum OPERATOR(pg_catalog.>) 0
               AND NOT a.attisdropped AND pg_catalog.col_description(old, a.attnum) IS NOT NULL
            UNION ALL
            SELECT a.attnum, 2, pg_catalog.format('ALTER TABLE orch.tasks ALTER COLUMN %I SET STATISTICS %s',
                                                  a.attname, a.attstattarget)
              FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) old AND a.attnum OPERATOR(pg_catalog.>) 0
               AND NOT a.attisdropped AND a.attstattarget OPERATOR(pg_catalog.>=) 0
            UNION ALL
            SELECT a.attnum, 3, pg_catalog.format('ALTER TABLE orch.tasks ALTER COLUMN %I SET (%s)',
                                                  a.attname, pg_catalog.array_to_string(a.attoptions, ', '))
              FROM pg_catalog.pg_attribute a
             WHERE a.attrelid OPERATOR(pg_catalog.=) old AND a.attnum OPERATOR(pg_catalog.>) 0
               AND NOT a.attisdropped AND a.attoptions IS NOT NULL) x;
    -- publications (with a publication's row filter and column list) and
    -- extended statistics
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(pg_catalog.format(
               'ALTER PUBLICATION %I ADD TABLE orch.tasks%s%s', p.pubname,
               ' (' OPERATOR(pg_catalog.||) (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ')
                                               FROM pg_catalog.pg_attribute a
                                              WHERE a.attrelid OPERATOR(pg_catalog.=) old
                                                AND a.attnum OPERATOR(pg_catalog.=) ANY (r.prattrs))
                    OPERATOR(pg_catalog.||) ')',
               ' WHERE (' OPERATOR(pg_catalog.||) pg_catalog.pg_get_expr(r.prqual, r.prrelid)
                          OPERATOR(pg_catalog.||) ')')), '{}')
      INTO later
      FROM pg_catalog.pg_publication_rel r
      JOIN pg_catalog.pg_publication p ON p.oid OPERATOR(pg_catalog.=) r.prpubid
     WHERE r.prrelid OPERATOR(pg_catalog.=) old;
    SELECT later OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(
               pg_catalog.pg_get_statisticsobjdef(s.oid) ORDER BY s.oid), '{}')
      INTO later
      FROM pg_catalog.pg_statistic_ext s WHERE s.stxrelid OPERATOR(pg_catalog.=) old;

    -- The views that read the table (the check above found the extension's
    -- only), as they are now: made again on the new table by name.
    SELECT pg_catalog.array_agg(pg_catalog.format('CREATE OR REPLACE VIEW %s%s AS %s', c.oid::pg_catalog.regclass,
               ' WITH (' OPERATOR(pg_catalog.||) pg_catalog.array_to_string(c.reloptions, ', ') OPERATOR(pg_catalog.||) ')',
               pg_catalog.pg_get_viewdef(c.oid)) ORDER BY c.oid)
      INTO views
      FROM pg_catalog.pg_class c
     WHERE c.relkind OPERATOR(pg_catalog.=) 'v'
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                     JOIN pg_catalog.pg_rewrite r ON r.oid OPERATOR(pg_catalog.=) d.objid
                    WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                      AND r.ev_class OPERATOR(pg_catalog.=) c.oid
                      AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
                      AND d.refobjid OPERATOR(pg_catalog.=) old);

    -- the old table, and its primary key's name, out of the way
    EXECUTE pg_catalog.format('ALTER INDEX orch.%I RENAME TO tasks_before_080_pkey',
                              (SELECT r.relname FROM pg_catalog.pg_constraint c
                                 JOIN pg_catalog.pg_class r ON r.oid OPERATOR(pg_catalog.=) c.conindid
                                WHERE c.conrelid OPERATOR(pg_catalog.=) old
                                  AND c.contype OPERATOR(pg_catalog.=) 'p'));
    ALTER TABLE orch.tasks RENAME TO tasks_before_080;
    CREATE TABLE orch.tasks (
        -- what a task is, written once when it is enqueued (the claim and the
        -- completion log none of it: the unchanged prefix of the row); fixed
        -- widths, 8-byte aligned first, so that no padding falls between them
        id               bigint NOT NULL DEFAULT pg_catalog.nextval('orch.events_id_seq'),
        run_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
        created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
        created_xact     bigint,
        enqueue_event_id bigint,
        run_id           bigint,
        retry_of         bigint,
        timeout          interval,
        priority         integer NOT NULL DEFAULT 0,
        max_attempts     integer,
        max_failures     integer,
        gated            boolean NOT NULL DEFAULT false,
        -- what a claim writes and a completion leaves as it is
        ready_at         timestamptz,
        claimed_at       timestamptz,
        claim_event_id   bigint,
        claim_xact       bigint,
        claim_waited     bigint,
        attempts         integer NOT NULL DEFAULT 0,
        lease_token      uuid,
        lease_owner      text,
        claimed_by       text,
        -- what every transition writes
        updated_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
        lease_expires_at timestamptz,
        state            text NOT NULL,
        reason_code      text,
        -- what a completion writes
        finished_at      timestamptz,
        complete_event_id bigint,
        complete_attempt_id bigint,
        complete_xact    bigint,
        result           jsonb,
        completed_by     text,
        -- what only retries, failures and waits write
        retry_at         timestamptz,
        failures         integer NOT NULL DEFAULT 0,
        last_error       text,
        last_error_class text,
        wait_data        jsonb,
        resume_data      jsonb,
        -- what a worker reports while it holds the task
        progress         jsonb,
        -- what a task is, of variable width: written once when it is enqueued,
        -- the unchanged suffix of the row (so no padding follows them either)
        tenant_id        text NOT NULL DEFAULT 'default',
        queue            text NOT NULL,
        created_by       text,
        payload          jsonb NOT NULL,
        retry_policy     jsonb,
        idempotency_key  text,
        owner            text,
        concurrency_key  text,
        step_key         text,
        correlation_id   text,
        PRIMARY KEY (id, tenant_id)
    ) WITH (fillfactor = 50,
            autovacuum_vacuum_scale_factor = 0.02,
            autovacuum_vacuum_insert_scale_factor = 0.05,
            autovacuum_analyze_scale_factor = 0.02);
    -- the rows, every column the old table has (the new columns start empty)
    SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) old AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    EXECUTE pg_catalog.format('INSERT INTO orch.tasks (%s) SELECT %s FROM orch.tasks_before_080', cols, cols);
    -- the views, pointed at the new table (same columns: CREATE OR REPLACE
    -- keeps each view's identity, and what depends on it)
    FOREACH stmt IN ARRAY coalesce(views, '{}') LOOP
        EXECUTE stmt;
    END LOOP;
    -- (out of the extension first: that also takes it off the tables a dump
    -- keeps the rows of, where the new table goes below)
    ALTER EXTENSION orchestrator DROP TABLE orch.tasks_before_080;
    DROP TABLE orch.tasks_before_080;
    FOREACH stmt IN ARRAY pg_catalog.array_remove(later, NULL) LOOP
        EXECUTE stmt;
    END LOOP;
END
$tasks_080$;
SELECT pg_catalog.pg_extension_config_dump('orch.tasks', '');
-- Tasks are numbered by the events' sequence from here on (a task's enqueue
-- takes the task's id as its event id): it goes on past every id either
-- sequence gave out, and the tasks' own sequence goes.  (Not past the
-- highest id stored: on Citus the rows hold other nodes' ranges too.)
SELECT pg_catalog.setval('orch.events_id_seq', GREATEST(
           (SELECT s.last_value FROM orch.events_id_seq s),
           (SELECT s.last_value FROM orch.tasks_id_seq s)));
ALTER EXTENSION orchestrator DROP SEQUENCE orch.tasks_id_seq;
DROP SEQUENCE orch.tasks_id_seq;
-- An index whose key ends in the task's id has no two keys alike to
-- deduplicate: deduplicate_items = off spares each page split a pass that
-- could only fail (tasks_gated_idx of 0.7.0; the new ones are made so below).
ALTER INDEX IF EXISTS orch.tasks_gated_idx SET (deduplicate_items = off);
-- The claim index leads with a 64-bit hash of the queue's name: a key of
-- fixed width, which an insert compares and reads without walking a text.
DROP INDEX IF EXISTS orch.tasks_claim_idx;
CREATE INDEX tasks_claim_idx ON orch.tasks ((pg_catalog.hashtextextended(queue, 0)), priority, created_at, id)
    WITH (deduplicate_items = off) WHERE ready_at IS NOT NULL;

-- ---------------------------------------------------------------------------
-- One AFTER ... FOR EACH STATEMENT trigger on orch.tasks calls, in order, the
-- audit writer, admission and workflow progress (it replaces tasks_events
-- and tasks_gate, which did the same in two halves).  The library keeps
-- serving the two old trigger functions while a 0.7.0 schema is in use.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_tasks_statement_end()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_tasks_statement_end';
COMMENT ON FUNCTION orch_tasks_statement_end() IS
  'AFTER INSERT OR UPDATE statement trigger on orch.tasks: writes the events the lifecycle trigger buffered, then (after an UPDATE) fills the concurrency-key slots the statement freed and moves the workflow runs whose step tasks finished.';
REVOKE ALL ON FUNCTION orch_tasks_statement_end() FROM PUBLIC;

DROP TRIGGER tasks_gate ON orch.tasks;
DROP TRIGGER tasks_events ON orch.tasks;
CREATE TRIGGER tasks_statement_end
    AFTER INSERT OR UPDATE ON orch.tasks
    FOR EACH STATEMENT EXECUTE FUNCTION orch_tasks_statement_end();
DROP FUNCTION orch_gate_trigger();
DROP FUNCTION orch_events_flush();

-- ---------------------------------------------------------------------------
-- A map step counts its items (fan-out cost linear in the
-- items): how many have a task, how many completed; counted once here for
-- the steps running now.
-- ---------------------------------------------------------------------------
ALTER TABLE orch.run_steps
    ADD COLUMN items_total integer,
    ADD COLUMN items_next integer NOT NULL DEFAULT 0,
    ADD COLUMN items_done integer NOT NULL DEFAULT 0,
    -- a subflow step: the first of its sub-workflows that failed or was canceled
    ADD COLUMN child_failed bigint;
UPDATE orch.run_steps
   SET items_total = pg_catalog.jsonb_array_length(items)
 WHERE pg_catalog.jsonb_typeof(items) OPERATOR(pg_catalog.=) 'array';
UPDATE orch.run_steps s
   SET items_next = c.n, items_done = c.done
  FROM (SELECT t.run_id, t.tenant_id, pg_catalog.split_part(t.step_key, '#', 1) AS step_id,
               pg_catalog.count(*) AS n,
               pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'completed') AS done
          FROM orch.tasks t
         WHERE t.run_id IS NOT NULL AND pg_catalog.strpos(t.step_key, '#') OPERATOR(pg_catalog.>) 0
         GROUP BY 1, 2, 3) c
 WHERE s.run_id OPERATOR(pg_catalog.=) c.run_id AND s.tenant_id OPERATOR(pg_catalog.=) c.tenant_id
   AND s.step_id OPERATOR(pg_catalog.=) c.step_id AND s.state OPERATOR(pg_catalog.=) 'running';

-- ---------------------------------------------------------------------------
-- Storage: a plain enqueue, a claim from the queue and a
-- completion by orch_complete are recorded by the task row (no orch.events
-- or orch.attempts row);
-- orch.history is what every reader of history reads.  Existing events stay
-- as they are.
-- ---------------------------------------------------------------------------
-- (the task row's columns for them were made with the table, at the top of
-- this update)

-- History in time-range partitions (docs/storage.md): orch.events
-- and orch.attempts become partitioned tables.  Each existing table (renamed
-- *_before_080 at the top of this update) is kept whole, with its keys and
-- indexes, as the partition of everything before this update and is retired
-- by orch_maintain like any other partition once past the retention; new
-- rows go to the partitions orch_maintain creates ahead, or until its first
-- pass to the DEFAULT partition.

CREATE TABLE orch.attempts (
    id           bigint NOT NULL DEFAULT pg_catalog.nextval('orch.attempts_id_seq'),
    tenant_id    text NOT NULL DEFAULT 'default',
    task_id      bigint NOT NULL,
    attempt      integer NOT NULL,
    worker       text,
    lease_token  uuid,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    outcome      text NOT NULL,
    error_class  text,
    error        text,
    retry_at     timestamptz,
    xact         bigint DEFAULT (pg_catalog.pg_current_xact_id()::text)::bigint
) PARTITION BY RANGE (finished_at);
CREATE TABLE orch.attempts_default PARTITION OF orch.attempts (PRIMARY KEY (id, tenant_id)) DEFAULT;
COMMENT ON TABLE orch.attempts IS
  'Append-only: one row per finished execution of a task (completed, failed, retry, lease_expired, cancelled, awaiting_tool, awaiting_user_confirmation), except a completion by orch_complete, which its task row records (orch.attempt_history reads both).';

CREATE TABLE orch.events (
    id           bigint NOT NULL DEFAULT pg_catalog.nextval('orch.events_id_seq'),
    tenant_id    text NOT NULL DEFAULT 'default',
    task_id      bigint,
    run_id       bigint,
    entity       text NOT NULL DEFAULT 'task',
    from_state   text,
    to_state     text,
    reason_code  text,
    actor        text NOT NULL,
    attempt      integer,
    lease_token  uuid,
    note         text,
    at           timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    label        text,
    xact         bigint DEFAULT (pg_catalog.pg_current_xact_id()::text)::bigint,
    waited       interval
) PARTITION BY RANGE (at);
CREATE TABLE orch.events_default PARTITION OF orch.events (PRIMARY KEY (id, tenant_id)) DEFAULT;
COMMENT ON TABLE orch.events IS
  'Append-only audit: one row per accepted state transition and per manual action. Only the extension owner may update or delete.';
COMMENT ON COLUMN orch.events.actor IS
  'The database role the action was taken for (current role outside the extension''s functions).';
COMMENT ON COLUMN orch.events.label IS
  'A name the caller supplied (worker id, approver name); never in place of actor.';
COMMENT ON COLUMN orch.events.xact IS
  'The top-level transaction that wrote the event (for orch.metrics_fold).';
COMMENT ON COLUMN orch.events.waited IS
  'On a claim (to_state executing): how long the task had been claimable.';

-- the old tables attached (their rows are checked against the bound, which
-- is past the newest of them); the DEFAULT partitions' indexes, which every
-- new partition copies
DO $attach$
DECLARE
    h record;
    bound timestamptz;
BEGIN
    FOR h IN SELECT * FROM (VALUES ('events', 'at'), ('attempts', 'finished_at')) AS x(tbl, key) LOOP
        EXECUTE pg_catalog.format('SELECT pg_catalog.max(%I) FROM orch.%I', h.key, h.tbl OPERATOR(pg_catalog.||) '_before_080')
           INTO bound;
        bound := pg_catalog.date_trunc('second', GREATEST(bound, pg_catalog.clock_timestamp()))
                 OPERATOR(pg_catalog.+) interval '1 second';
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ATTACH PARTITION orch.%I FOR VALUES FROM (MINVALUE) TO (%L)',
                                  h.tbl, h.tbl OPERATOR(pg_catalog.||) '_before_080', bound);
    END LOOP;
END
$attach$;
CREATE INDEX attempts_task_idx ON orch.attempts_default (task_id);
CREATE INDEX events_task_idx ON orch.events_default (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX events_run_idx ON orch.events_default (run_id, tenant_id) WHERE task_id IS NULL;
CREATE INDEX events_other_idx ON orch.events_default (at) WHERE entity OPERATOR(pg_catalog.<>) ALL (ARRAY['task', 'run', 'run_step']);
-- No autosummarize on the history's block-range indexes (the install
-- script says why): the DEFAULT partitions' are made without it, and the
-- old tables' (now their first partitions) lose it.
CREATE INDEX events_xact_idx ON orch.events_default USING brin (xact);
CREATE INDEX attempts_xact_idx ON orch.attempts_default USING brin (xact);
ALTER INDEX IF EXISTS orch.events_before_080_xact_idx RESET (autosummarize);
ALTER INDEX IF EXISTS orch.attempts_before_080_xact_idx RESET (autosummarize);
SELECT pg_catalog.pg_extension_config_dump('orch.attempts_default', '');
SELECT pg_catalog.pg_extension_config_dump('orch.events_default', '');
DO $rls$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['attempts', 'events', 'attempts_default', 'events_default',
                             'runs', 'run_steps', 'approvals', 'runs_default', 'run_steps_default',
                             'approvals_default', 'run_keys', 'approval_refs'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format(
            'CREATE POLICY tenant_isolation ON orch.%I USING (orch.tenant_visible(tenant_id))'
            ' WITH CHECK (orch.tenant_visible(tenant_id))', t);
    END LOOP;
END
$rls$;
ALTER TABLE orch.attempts ALTER COLUMN worker SET STATISTICS 0, ALTER COLUMN error_class SET STATISTICS 0,
    ALTER COLUMN error SET STATISTICS 0;
ALTER TABLE orch.events ALTER COLUMN note SET STATISTICS 0, ALTER COLUMN label SET STATISTICS 0;
REVOKE ALL ON orch.attempts, orch.events, orch.attempts_default, orch.events_default,
    orch.runs, orch.run_steps, orch.approvals, orch.runs_default, orch.run_steps_default,
    orch.approvals_default, orch.run_keys, orch.approval_refs FROM PUBLIC;
COMMENT ON COLUMN orch.tasks.enqueue_event_id IS
  'Set by the lifecycle trigger when the row records its own enqueue (received -> queued, reason enqueued, by orch_enqueue or orch_enqueue_batch): the id of that event in orch.history, which is the task''s own id (tasks and events are numbered by one sequence, orch.events_id_seq); no orch.events row is written for it. With created_by (the role) and created_xact (the inserting transaction, for orch.metrics_fold).';
COMMENT ON COLUMN orch.tasks.claim_event_id IS
  'Set by the lifecycle trigger when the row records its latest claim from the queue (queued -> executing, reason claimed): the id of that event in orch.history; with claimed_by (the role), claim_xact (the claiming transaction) and claim_waited (microseconds it had been claimable). Kept while the task is executing and when it records its completion; a task leaving executing otherwise writes it out as an orch.events row.';
COMMENT ON COLUMN orch.tasks.complete_event_id IS
  'Set by the lifecycle trigger when the row records its completion by orch_complete or orch_complete_batch (executing -> completed, reason completed): the id of that event in orch.history; with complete_attempt_id (the id of the completed attempt in orch.attempt_history, from orch.attempts_id_seq), completed_by (the role) and complete_xact (the completing transaction, for orch.metrics_fold). No orch.events or orch.attempts row is written for it.';

-- The whole history of transitions and actions as users read it: the rows of
-- orch.events, and the transitions recorded by another row instead of an
-- event row of their own (a plain enqueue, a claim from the queue and a
-- completion by orch_complete are the task row's).  Same columns as orch.events; every reader of history (the
-- orch_events view, orch_history, orch_run_status, the metrics fold, the
-- maintenance checks) reads it, never orch.events alone.  docs/storage.md.
CREATE VIEW orch.history AS
SELECT e.id, e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state, e.reason_code,
       e.actor, e.attempt, e.lease_token, e.note, e.at, e.label, e.xact, e.waited
  FROM orch.events e
UNION ALL
SELECT t.complete_event_id, t.tenant_id, t.id, t.run_id, 'task'::text, 'executing'::text, 'completed'::text,
       'completed'::text, t.completed_by, t.attempts, t.lease_token, NULL::text, t.finished_at, t.lease_owner,
       t.complete_xact, NULL::interval
  FROM orch.tasks t
 WHERE t.complete_event_id IS NOT NULL
UNION ALL
SELECT t.enqueue_event_id, t.tenant_id, t.id, t.run_id, 'task'::text, 'received'::text, 'queued'::text,
       'enqueued'::text, t.created_by, NULL::integer, NULL::uuid, NULL::text, t.created_at, NULL::text,
       t.created_xact, NULL::interval
  FROM orch.tasks t
 WHERE t.enqueue_event_id IS NOT NULL
UNION ALL
SELECT t.claim_event_id, t.tenant_id, t.id, t.run_id, 'task'::text, 'queued'::text, 'executing'::text,
       'claimed'::text, t.claimed_by, t.attempts, t.lease_token, NULL::text, t.claimed_at, t.lease_owner,
       t.claim_xact, pg_catalog.make_interval(secs => t.claim_waited OPERATOR(pg_catalog./) 1000000.0)
  FROM orch.tasks t
 WHERE t.claim_event_id IS NOT NULL;
COMMENT ON VIEW orch.history IS
  'Every transition and action (orch.events and the transitions a task row records: its enqueue, its latest claim from the queue, its completion by orch_complete), with the columns of orch.events.';
REVOKE ALL ON orch.history FROM PUBLIC;

-- Every finished execution as users read it: the rows of orch.attempts, and
-- the completed attempt a task row records instead of an attempt row of its
-- own (orch_complete, orch_complete_batch: the task keeps its attempt
-- number, lease owner and token, claim and finish times).  Same columns as
-- orch.attempts; every reader of attempts reads it.  docs/storage.md.
CREATE VIEW orch.attempt_history AS
SELECT a.id, a.tenant_id, a.task_id, a.attempt, a.worker, a.lease_token, a.started_at, a.finished_at,
       a.outcome, a.error_class, a.error, a.retry_at, a.xact
  FROM orch.attempts a
UNION ALL
SELECT t.complete_attempt_id, t.tenant_id, t.id, t.attempts, t.lease_owner, t.lease_token, t.claimed_at,
       t.finished_at, 'completed'::text, NULL::text, NULL::text, NULL::timestamptz, t.complete_xact
  FROM orch.tasks t
 WHERE t.complete_attempt_id IS NOT NULL;
COMMENT ON VIEW orch.attempt_history IS
  'Every finished execution (orch.attempts and the completed attempt a task row records), with the columns of orch.attempts.';
REVOKE ALL ON orch.attempt_history FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Tenant bindings survive a restore into another cluster:
-- the role by name, and by OID in the cluster that bound it (a rename keeps
-- the binding).  The regrole column of 0.7.0 made a restore without the
-- roles fail for the whole table, leaving every role unrestricted.
-- ---------------------------------------------------------------------------
DROP VIEW orch_tenant_bindings;   -- created again below
ALTER TABLE orch.tenant_bindings
    ADD COLUMN role_oid oid NOT NULL DEFAULT 0,
    ADD COLUMN cluster_id bigint NOT NULL DEFAULT 0;
UPDATE orch.tenant_bindings
   SET role_oid = role::oid,
       cluster_id = (SELECT s.system_identifier FROM pg_catalog.pg_control_system() s);
ALTER TABLE orch.tenant_bindings
    ALTER COLUMN role TYPE name USING pg_catalog.pg_get_userbyid(role::oid);
COMMENT ON TABLE orch.tenant_bindings IS
  'Which tenants a role is restricted to (orch_bind_tenant / orch_unbind_tenant). A role with no binding, directly or through the roles it has the privileges of, is unrestricted. A binding applies to the role role_oid when cluster_id is this cluster''s system identifier (a renamed role keeps it), else to the role named role (a restore into another cluster).';
COMMENT ON COLUMN orch.tenant_bindings.role IS
  'The role''s name (refreshed by every bind or unbind call): what identifies it after a restore into another cluster.';
COMMENT ON COLUMN orch.tenant_bindings.cluster_id IS
  'The system identifier of the cluster whose role role_oid is meant; 0 (or another cluster''s): match by name.';

-- ---------------------------------------------------------------------------
-- The tenant fence: every view a bound role can read
-- takes its rows from two branches of a UNION ALL gated by whether the
-- caller is bound: the table itself for an unbound caller, a SECURITY
-- DEFINER function returning the caller's tenants' rows for a bound one, so
-- that a bound caller's conditions are never evaluated on another tenant's
-- row (full comment in orchestrator--0.8.0.sql at orch_tenant_bindings).
-- The views are no longer security_barrier (CREATE OR REPLACE VIEW drops
-- the option).
-- ---------------------------------------------------------------------------
-- The bound branch of each view: a SECURITY DEFINER function returning the
-- caller's tenants' rows.
-- The caller's tenants for the extension's own SQL functions, whose pinned
-- search_path does not hold the schema of orch_caller_tenants (the same C
-- function).
CREATE FUNCTION orch.caller_tenants()
RETURNS text[]
LANGUAGE C STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_caller_tenants';
COMMENT ON FUNCTION orch.caller_tenants() IS
  'orch_caller_tenants() in schema orch, for the functions of the tenant fence.';
REVOKE ALL ON FUNCTION orch.caller_tenants() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch.caller_tenants() TO orch_reader;

CREATE FUNCTION orch.caller_tenant_bindings()
RETURNS SETOF orch.tenant_bindings
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.tenant_bindings x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_tenant_bindings() IS
  'The bindings of the caller''s tenants (every row for an unbound caller): the bound branch of orch_tenant_bindings, and all of it on Citus.';
CREATE FUNCTION orch.caller_queues()
RETURNS SETOF orch.queues
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.queues x
     WHERE (SELECT orch.caller_tenants()) IS NULL
        OR x.tenant_id OPERATOR(pg_catalog.=) 'default'
        OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[])
$fn$;
COMMENT ON FUNCTION orch.caller_queues() IS
  'The queues a bound caller sees: the shared ones (tenant default) and those its tenants'' enqueues created; every queue for an unbound caller. The bound branch of orch_queues, and all of it on Citus.';
CREATE FUNCTION orch.caller_tasks()
RETURNS SETOF orch.tasks
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.id, x.run_at, x.created_at, x.created_xact, x.enqueue_event_id, x.run_id, x.retry_of,
           x.timeout, x.priority, x.max_attempts, x.max_failures, x.gated, x.ready_at, x.claimed_at,
           x.claim_event_id, x.claim_xact, x.claim_waited, x.attempts,
           CASE WHEN (SELECT orch.caller_is_admin()) THEN x.lease_token END, x.lease_owner,
           x.claimed_by, x.updated_at, x.lease_expires_at, x.state, x.reason_code, x.finished_at,
           x.complete_event_id, x.complete_attempt_id, x.complete_xact, x.result, x.completed_by,
           x.retry_at, x.failures, x.last_error, x.last_error_class, x.wait_data, x.resume_data,
           x.progress, x.tenant_id, x.queue, x.created_by, x.payload, x.retry_policy,
           x.idempotency_key, x.owner, x.concurrency_key, x.step_key, x.correlation_id
      FROM orch.tasks x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_tasks() IS
  'The tasks of the caller''s tenants (every row for an unbound caller): the bound branch of orch_tasks, and all of it on Citus. Lease tokens only for orch_admin.';
CREATE FUNCTION orch.caller_attempts()
RETURNS TABLE (id bigint, tenant_id text, task_id bigint, attempt integer, worker text, lease_token uuid,
               started_at timestamptz, finished_at timestamptz, outcome text, error_class text,
               error text, retry_at timestamptz, xact bigint, correlation_id text)
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.id, x.tenant_id, x.task_id, x.attempt, x.worker,
           CASE WHEN (SELECT orch.caller_is_admin()) THEN x.lease_token END, x.started_at, x.finished_at,
           x.outcome, x.error_class, x.error, x.retry_at, x.xact,
           (SELECT t.correlation_id FROM orch.tasks t
                  WHERE t.id OPERATOR(pg_catalog.=) x.task_id AND t.tenant_id OPERATOR(pg_catalog.=) x.tenant_id)
      FROM orch.attempt_history x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_attempts() IS
  'The attempts of the caller''s tenants, with their tasks'' correlation ids (every row for an unbound caller): the bound branch of orch_attempts, and all of it on Citus.';
CREATE FUNCTION orch.caller_commands()
RETURNS SETOF orch.commands
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.commands x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_commands() IS
  'The commands of the caller''s tenants (every row for an unbound caller): the bound branch of orch_commands, and all of it on Citus.';
CREATE FUNCTION orch.caller_dead_letters()
RETURNS SETOF orch.tasks
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.id, x.run_at, x.created_at, x.created_xact, x.enqueue_event_id, x.run_id, x.retry_of,
           x.timeout, x.priority, x.max_attempts, x.max_failures, x.gated, x.ready_at, x.claimed_at,
           x.claim_event_id, x.claim_xact, x.claim_waited, x.attempts,
           CASE WHEN (SELECT orch.caller_is_admin()) THEN x.lease_token END, x.lease_owner,
           x.claimed_by, x.updated_at, x.lease_expires_at, x.state, x.reason_code, x.finished_at,
           x.complete_event_id, x.complete_attempt_id, x.complete_xact, x.result, x.completed_by,
           x.retry_at, x.failures, x.last_error, x.last_error_class, x.wait_data, x.resume_data,
           x.progress, x.tenant_id, x.queue, x.created_by, x.payload, x.retry_policy,
           x.idempotency_key, x.owner, x.concurrency_key, x.step_key, x.correlation_id
      FROM orch.tasks x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
       AND x.state OPERATOR(pg_catalog.=) 'failed'
       AND x.reason_code OPERATOR(pg_catalog.=) ANY (ARRAY['max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                                                      'compensation_required', 'not_safe_to_retry'])
       AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of OPERATOR(pg_catalog.=) x.id AND r.tenant_id OPERATOR(pg_catalog.=) x.tenant_id)
$fn$;
COMMENT ON FUNCTION orch.caller_dead_letters() IS
  'The dead letters of the caller''s tenants (every row for an unbound caller): the bound branch of orch_dead_letters, and all of it on Citus.';
CREATE FUNCTION orch.caller_runs()
RETURNS SETOF orch.runs
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.runs x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_runs() IS
  'The workflow runs of the caller''s tenants (every row for an unbound caller): the bound branch of orch_runs, and all of it on Citus.';
CREATE FUNCTION orch.caller_run_steps()
RETURNS SETOF orch.run_steps
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.run_steps x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_run_steps() IS
  'The run steps of the caller''s tenants (every row for an unbound caller): the bound branch of orch_run_steps, and all of it on Citus.';
CREATE FUNCTION orch.caller_events()
RETURNS TABLE (id bigint, tenant_id text, task_id bigint, run_id bigint, entity text, from_state text,
               to_state text, reason_code text, actor text, attempt integer, lease_token uuid,
               note text, at timestamptz, label text, xact bigint, waited interval,
               correlation_id text)
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.id, x.tenant_id, x.task_id, x.run_id, x.entity, x.from_state, x.to_state, x.reason_code,
           x.actor, x.attempt, CASE WHEN (SELECT orch.caller_is_admin()) THEN x.lease_token END,
           x.note, x.at, x.label, x.xact, x.waited,
           coalesce((SELECT t.correlation_id FROM orch.tasks t
                    WHERE t.id OPERATOR(pg_catalog.=) x.task_id AND t.tenant_id OPERATOR(pg_catalog.=) x.tenant_id),
                   (SELECT r.correlation_id FROM orch.runs r
                    WHERE r.id OPERATOR(pg_catalog.=) x.run_id AND r.tenant_id OPERATOR(pg_catalog.=) x.tenant_id))
      FROM orch.history x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_events() IS
  'The events of the caller''s tenants, with their tasks'' or runs'' correlation ids (every row for an unbound caller): the bound branch of orch_events, and all of it on Citus.';
REVOKE ALL ON FUNCTION orch.caller_tenant_bindings(), orch.caller_queues(), orch.caller_tasks(), orch.caller_attempts(), orch.caller_commands(), orch.caller_dead_letters(), orch.caller_runs(), orch.caller_run_steps(), orch.caller_events() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch.caller_queues(), orch.caller_tasks(), orch.caller_attempts(), orch.caller_commands(), orch.caller_dead_letters(), orch.caller_runs(), orch.caller_run_steps(), orch.caller_events() TO orch_reader;
GRANT EXECUTE ON FUNCTION orch.caller_tenant_bindings() TO orch_admin;

-- What orch_tenant_bindings reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_tenant_bindings()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.tenant_bindings_rows AS
SELECT x.* FROM orch.tenant_bindings x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_tenant_bindings()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE VIEW orch_tenant_bindings AS
SELECT coalesce(r.rolname::text, b.role::text) AS role, b.tenant_id, b.created_at
  FROM orch.tenant_bindings_rows b
  LEFT JOIN pg_catalog.pg_roles r
    ON r.oid OPERATOR(pg_catalog.=) b.role_oid
   AND b.cluster_id OPERATOR(pg_catalog.=) (SELECT s.system_identifier FROM pg_catalog.pg_control_system() s);
COMMENT ON VIEW orch_tenant_bindings IS
  'Roles and the tenants they are restricted to (a bound administrator sees its tenants'' bindings); role is the role''s current name, or the name it was bound under when it is not a role of this cluster (restored from another).';
GRANT SELECT ON orch_tenant_bindings TO orch_admin;

-- A queue records who created it: 'default' (shared) for an unbound role,
-- else the creating role's first tenant.  Queues of 0.7.0 stay shared.
ALTER TABLE orch.queues ALTER COLUMN tenant_id SET DEFAULT coalesce((orch_caller_tenants())[1], 'default');
COMMENT ON COLUMN orch.queues.tenant_id IS
  'Who created the queue: ''default'' for an unbound role (administration; shared by every tenant), else the creating role''s (first) tenant, when a bound producer''s enqueue created it; only that tenant''s roles see it in orch_queues.';
-- What orch_queues reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_queues()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.queues_rows AS
SELECT x.* FROM orch.queues x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_queues()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_queues AS
SELECT q.name AS queue, q.tenant_id, q.paused, orch_queue_settings(q.name) AS settings,
       q.created_at, q.updated_at
  FROM orch.queues_rows q;
-- What orch_tasks reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_tasks()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.tasks_rows AS
SELECT x.* FROM orch.tasks x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_tasks()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_tasks AS
SELECT t.id AS task_id, t.tenant_id, t.queue, t.state, t.priority, t.payload, t.result, t.run_at,
       t.retry_at, t.attempts, t.failures, t.max_attempts, t.max_failures, t.reason_code,
       t.last_error, t.last_error_class, t.lease_owner, t.lease_expires_at, t.claimed_at,
       t.wait_data, t.resume_data, t.idempotency_key, t.owner, t.concurrency_key, t.run_id,
       t.step_key, t.created_at, t.updated_at, t.finished_at, t.retry_of, t.gated, t.correlation_id,
       t.progress
  FROM orch.tasks_rows t;
-- What orch_attempts reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_attempts()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.attempts_rows AS
SELECT x.id, x.tenant_id, x.task_id, x.attempt, x.worker, x.lease_token, x.started_at, x.finished_at,
        x.outcome, x.error_class, x.error, x.retry_at, x.xact,
         (SELECT t.correlation_id FROM orch.tasks t
              WHERE t.id OPERATOR(pg_catalog.=) x.task_id AND t.tenant_id OPERATOR(pg_catalog.=) x.tenant_id) AS correlation_id
  FROM orch.attempt_history x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_attempts()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_attempts AS
SELECT a.id AS attempt_id, a.tenant_id, a.task_id, a.attempt, a.worker,
       CASE WHEN (SELECT orch.caller_is_admin()) THEN a.lease_token END AS lease_token,
       a.started_at, a.finished_at, a.outcome, a.error_class, a.error, a.retry_at, a.correlation_id
  FROM orch.attempts_rows a;
-- What orch_commands reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_commands()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.commands_rows AS
SELECT x.* FROM orch.commands x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_commands()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_commands AS
SELECT c.id AS command_id, c.tenant_id, c.kind, c.idempotency_key, c.payload, c.origin_task_id,
       c.task_id, c.status, c.result, c.created_at, c.completed_at
  FROM orch.commands_rows c;
-- What orch_dead_letters reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_dead_letters()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.dead_letters_rows AS
SELECT * FROM (SELECT x.* FROM orch.tasks x
                WHERE x.state OPERATOR(pg_catalog.=) 'failed'
                  AND x.reason_code OPERATOR(pg_catalog.=) ANY (ARRAY['max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                                                                 'compensation_required', 'not_safe_to_retry'])
                  AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of OPERATOR(pg_catalog.=) x.id AND r.tenant_id OPERATOR(pg_catalog.=) x.tenant_id)) d
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_dead_letters()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_dead_letters AS
SELECT t.id AS task_id, t.tenant_id, t.queue, t.reason_code AS reason, t.finished_at AS failed_at,
       t.last_error, t.last_error_class, t.attempts, t.failures, t.payload, t.priority,
       t.owner, t.created_at
  FROM orch.dead_letters_rows t;
-- What orch_runs reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_runs()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.runs_rows AS
SELECT x.* FROM orch.runs x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_runs()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_runs AS
SELECT r.id AS run_id, r.tenant_id, r.definition, r.version, r.content_hash, r.state, r.phase,
       r.input, r.output, r.pins, r.idempotency_key, r.reason_code, r.failed_step, r.error,
       r.deadline_at, r.retry_of, r.created_by, r.created_at, r.updated_at, r.finished_at,
       r.correlation_id
  FROM orch.runs_rows r;
-- What orch_run_steps reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_run_steps()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.run_steps_rows AS
SELECT x.* FROM orch.run_steps x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_run_steps()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_run_steps AS
SELECT s.run_id, s.tenant_id, s.step_id, s.ord, s.type, s.state, s.task_id, s.output, s.error,
       s.wake_at, s.cap_at AS timeout_at, s.started_at, s.finished_at, s.comp_state AS compensation
  FROM orch.run_steps_rows s;
-- What orch_events reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_events()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE VIEW orch.events_rows AS
SELECT x.*, coalesce((SELECT t.correlation_id FROM orch.tasks t
                       WHERE t.id OPERATOR(pg_catalog.=) x.task_id AND t.tenant_id OPERATOR(pg_catalog.=) x.tenant_id),
                      (SELECT r.correlation_id FROM orch.runs r
                       WHERE r.id OPERATOR(pg_catalog.=) x.run_id AND r.tenant_id OPERATOR(pg_catalog.=) x.tenant_id)) AS correlation_id
  FROM orch.history x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_events()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_events AS
SELECT e.id AS event_id, e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state,
       e.reason_code, e.actor, e.attempt,
       CASE WHEN (SELECT orch.caller_is_admin()) THEN e.lease_token END AS lease_token,
       e.note, e.at, e.label, e.correlation_id, e.waited
  FROM orch.events_rows e;
COMMENT ON VIEW orch_queues IS
  'Queues with their effective settings (a bound role sees the shared queues and those its tenants created).';

CREATE FUNCTION orch.queue_stats()
RETURNS TABLE (tenant_id text, queue text, received bigint, queued bigint, executing bigint,
               awaiting_tool bigint, awaiting_user_confirmation bigint, ready bigint,
               delayed bigint, retry_waiting bigint, gated bigint, oldest_ready_age interval,
               dead_letters bigint, enqueued_total bigint, started_total bigint,
               completed_total bigint, failed_total bigint, cancelled_total bigint,
               lease_expiries_1h bigint, enqueued_1m bigint, completed_1m bigint,
               failed_1m bigint, completed_5m bigint, failed_5m bigint, completed_1h bigint,
               failed_1h bigint, metrics_as_of timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    -- the caller's tenants, read here (on Citus: on the node the call was made
    -- on) and passed to the query as a value, never evaluated on a shard
    vis text[] := orch.caller_tenants();
    -- the live figures and the dead letters, read first by calls of their
    -- own: inside the query below Citus could send those calls to a shard
    -- (the query is routed to one when the caller is bound to one tenant)
    live_j jsonb := (SELECT pg_catalog.jsonb_agg(o) FROM orch.open_tasks() o);
    dead_j jsonb := (SELECT pg_catalog.jsonb_agg(d) FROM orch.dead_letter_counts() d);
BEGIN
    RETURN QUERY
WITH live AS (SELECT * FROM pg_catalog.jsonb_to_recordset(coalesce(live_j, '[]'))
                AS x(tenant_id text, queue text, received bigint, queued bigint, executing bigint,
                     awaiting_tool bigint, awaiting_user_confirmation bigint, ready bigint,
                     delayed bigint, retry_waiting bigint, gated bigint, oldest_ready timestamptz)),
     dead AS (SELECT * FROM pg_catalog.jsonb_to_recordset(coalesce(dead_j, '[]'))
                AS x(tenant_id text, queue text, dead_letters bigint)),
     tot AS (
        SELECT m.tenant_id, m.queue,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'enqueued') AS enqueued,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'started') AS started,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'completed') AS completed,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'failed') AS failed,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'cancelled') AS cancelled
          FROM orch.metric_totals m
         WHERE m.metric OPERATOR(pg_catalog.=) ANY (ARRAY['enqueued', 'started', 'finished']) AND (vis IS NULL OR m.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
         GROUP BY m.tenant_id, m.queue),
     win AS (
        SELECT m.tenant_id, m.queue,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'attempt' AND m.l1 OPERATOR(pg_catalog.=) 'lease_expired') AS lease_expiries_1h,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'enqueued' AND m.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute')) AS enqueued_1m,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'completed' AND m.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute')) AS completed_1m,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'failed' AND m.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute')) AS failed_1m,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'completed' AND m.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '5 minutes')) AS completed_5m,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'failed' AND m.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '5 minutes')) AS failed_5m,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'completed') AS completed_1h,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'failed') AS failed_1h
          FROM orch.metric_minutes m
         WHERE m.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 hour') AND m.metric OPERATOR(pg_catalog.=) ANY (ARRAY['attempt', 'enqueued', 'finished'])
           AND (vis IS NULL OR m.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
         GROUP BY m.tenant_id, m.queue),
     k AS (
        SELECT tenant_id, queue FROM live
        UNION SELECT tenant_id, queue FROM dead
        UNION SELECT tenant_id, queue FROM tot
        UNION SELECT q.tenant_id, q.name FROM orch.queues q WHERE (vis IS NULL OR q.tenant_id OPERATOR(pg_catalog.=) ANY (vis)))
SELECT k.tenant_id, k.queue,
       coalesce(l.received, 0) AS received, coalesce(l.queued, 0) AS queued,
       coalesce(l.executing, 0) AS executing, coalesce(l.awaiting_tool, 0) AS awaiting_tool,
       coalesce(l.awaiting_user_confirmation, 0) AS awaiting_user_confirmation,
       coalesce(l.ready, 0) AS ready, coalesce(l.delayed, 0) AS delayed,
       coalesce(l.retry_waiting, 0) AS retry_waiting, coalesce(l.gated, 0) AS gated,
       pg_catalog.now() OPERATOR(pg_catalog.-) l.oldest_ready AS oldest_ready_age,
       coalesce(d.dead_letters, 0) AS dead_letters,
       coalesce(t.enqueued, 0)::bigint AS enqueued_total, coalesce(t.started, 0)::bigint AS started_total,
       coalesce(t.completed, 0)::bigint AS completed_total, coalesce(t.failed, 0)::bigint AS failed_total,
       coalesce(t.cancelled, 0)::bigint AS cancelled_total,
       coalesce(w.lease_expiries_1h, 0)::bigint AS lease_expiries_1h,
       coalesce(w.enqueued_1m, 0)::bigint AS enqueued_1m,
       coalesce(w.completed_1m, 0)::bigint AS completed_1m, coalesce(w.failed_1m, 0)::bigint AS failed_1m,
       coalesce(w.completed_5m, 0)::bigint AS completed_5m, coalesce(w.failed_5m, 0)::bigint AS failed_5m,
       coalesce(w.completed_1h, 0)::bigint AS completed_1h, coalesce(w.failed_1h, 0)::bigint AS failed_1h,
       (SELECT s.refreshed_at FROM orch.metric_state s) AS metrics_as_of
  FROM k
  LEFT JOIN live l ON l.tenant_id OPERATOR(pg_catalog.=) k.tenant_id AND l.queue OPERATOR(pg_catalog.=) k.queue
  LEFT JOIN dead d ON d.tenant_id OPERATOR(pg_catalog.=) k.tenant_id AND d.queue OPERATOR(pg_catalog.=) k.queue
  LEFT JOIN tot t ON t.tenant_id OPERATOR(pg_catalog.=) k.tenant_id AND t.queue OPERATOR(pg_catalog.=) k.queue
  LEFT JOIN win w ON w.tenant_id OPERATOR(pg_catalog.=) k.tenant_id AND w.queue OPERATOR(pg_catalog.=) k.queue;
END
$fn$;
COMMENT ON FUNCTION orch.queue_stats() IS
  'The rows of orch_queue_stats that the caller may see.';
REVOKE ALL ON FUNCTION orch.queue_stats() FROM PUBLIC;
CREATE OR REPLACE VIEW orch_queue_stats AS
SELECT * FROM orch.queue_stats();

CREATE FUNCTION orch.error_stats()
RETURNS TABLE (tenant_id text, queue text, error_class text, reason_code text,
               retries_total bigint, failures_total bigint, retries_1h bigint, failures_1h bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    -- the caller's tenants, read here (on Citus: on the node the call was made
    -- on) and passed to the query as a value, never evaluated on a shard
    vis text[] := orch.caller_tenants();
BEGIN
    RETURN QUERY
SELECT m.tenant_id, m.queue,
       CASE WHEN m.l1 OPERATOR(pg_catalog.=) '' THEN NULL ELSE m.l1 END AS error_class,
       CASE WHEN m.l2 OPERATOR(pg_catalog.=) '' THEN NULL ELSE m.l2 END AS reason_code,
       coalesce(pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'retry'), 0)::bigint AS retries_total,
       coalesce(pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'failed'), 0)::bigint AS failures_total,
       coalesce((SELECT pg_catalog.sum(h.value) FROM orch.metric_minutes h
                  WHERE h.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 hour') AND h.metric OPERATOR(pg_catalog.=) 'retry'
                    AND h.tenant_id OPERATOR(pg_catalog.=) m.tenant_id AND h.queue OPERATOR(pg_catalog.=) m.queue
                    AND h.l1 OPERATOR(pg_catalog.=) m.l1 AND h.l2 OPERATOR(pg_catalog.=) m.l2), 0)::bigint AS retries_1h,
       coalesce((SELECT pg_catalog.sum(h.value) FROM orch.metric_minutes h
                  WHERE h.minute OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 hour') AND h.metric OPERATOR(pg_catalog.=) 'failed'
                    AND h.tenant_id OPERATOR(pg_catalog.=) m.tenant_id AND h.queue OPERATOR(pg_catalog.=) m.queue
                    AND h.l1 OPERATOR(pg_catalog.=) m.l1 AND h.l2 OPERATOR(pg_catalog.=) m.l2), 0)::bigint AS failures_1h
  FROM orch.metric_totals m
 WHERE m.metric OPERATOR(pg_catalog.=) ANY (ARRAY['retry', 'failed']) AND (vis IS NULL OR m.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
 GROUP BY m.tenant_id, m.queue, m.l1, m.l2;
END
$fn$;
COMMENT ON FUNCTION orch.error_stats() IS
  'The rows of orch_error_stats that the caller may see.';
REVOKE ALL ON FUNCTION orch.error_stats() FROM PUBLIC;
CREATE OR REPLACE VIEW orch_error_stats AS
SELECT * FROM orch.error_stats();
GRANT EXECUTE ON FUNCTION orch.queue_stats(), orch.error_stats() TO orch_reader;

-- Maintenance counts every tenant: a bound role reads no row of its log.
-- What orch_maintenance_log reads (orch.maintenance_log_rows): every pass
-- for an unbound caller, none for a bound one; on Citus through the
-- function (a shard is read with the caller's rights).
CREATE FUNCTION orch.caller_maintenance_log()
RETURNS SETOF orch.maintenance_log
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.maintenance_log x
     WHERE (SELECT orch.caller_tenants()) IS NULL
$fn$;
COMMENT ON FUNCTION orch.caller_maintenance_log() IS
  'Every maintenance pass for an unbound caller, none for a bound one: what orch_maintenance_log reads on Citus.';
CREATE VIEW orch.maintenance_log_rows AS
SELECT x.* FROM orch.maintenance_log x
 WHERE (SELECT orch_caller_tenants()) IS NULL;
CREATE OR REPLACE VIEW orch_maintenance_log AS
SELECT id, started_at, finished_at, finished_at OPERATOR(pg_catalog.-) started_at AS duration, actor, actions
  FROM orch.maintenance_log_rows;
COMMENT ON VIEW orch_maintenance_log IS
  'One row per orch_maintain() pass: when, how long, by whom, and what it did (counts over every tenant: empty for a role bound to tenants).';

-- Row-level security also on the counters and the deferred key decisions,
-- and on queues (a shared queue is visible to every role).
DO $rls$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['gate_repairs', 'metric_totals', 'metric_minutes']
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format(
            'CREATE POLICY tenant_isolation ON orch.%I USING (orch.tenant_visible(tenant_id))'
            ' WITH CHECK (orch.tenant_visible(tenant_id))', t);
    END LOOP;
END
$rls$;
ALTER TABLE orch.queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON orch.queues
    USING (tenant_id OPERATOR(pg_catalog.=) 'default' OR orch.tenant_visible(tenant_id))
    WITH CHECK (tenant_id OPERATOR(pg_catalog.=) 'default' OR orch.tenant_visible(tenant_id));

-- No planner statistics on the columns that hold a tenant's own values
-- (payloads, results, errors, keys, notes): the estimates in any EXPLAIN
-- come from the statistics of the whole table, and a histogram or a list of
-- most common values holds other tenants' values.  The extension's own
-- statements filter on these columns only through unique keys or, for the
-- task and run ids, their indexes (planned without the statistics:
-- docs/semantics.md, *Plans and statistics*).
DO $stats$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT x.tbl, x.col FROM (VALUES
            ('tasks', 'payload'), ('tasks', 'result'), ('tasks', 'last_error'),
            ('tasks', 'last_error_class'), ('tasks', 'lease_owner'), ('tasks', 'wait_data'),
            ('tasks', 'resume_data'), ('tasks', 'idempotency_key'), ('tasks', 'correlation_id'),
            ('tasks', 'progress'),
            ('attempts', 'worker'), ('attempts', 'error_class'), ('attempts', 'error'),
            ('events', 'note'), ('events', 'label'),
            ('idempotency_keys', 'key'),
            ('commands', 'kind'), ('commands', 'idempotency_key'), ('commands', 'payload'),
            ('commands', 'result'),
            ('runs', 'input'), ('runs', 'output'), ('runs', 'idempotency_key'), ('runs', 'error'),
            ('runs', 'correlation_id'),
            ('run_steps', 'items'), ('run_steps', 'output'), ('run_steps', 'error'),
            ('approvals', 'approval_ref'), ('approvals', 'label'), ('approvals', 'note'),
            ('run_keys', 'idempotency_key'), ('approval_refs', 'approval_ref'),
            ('metric_totals', 'l1'), ('metric_totals', 'l2'),
            ('metric_minutes', 'l1'), ('metric_minutes', 'l2'),
            -- the keys that link rows to a task or a run: an estimate by
            -- one would tell whether another tenant's task or run exists
            ('tasks', 'run_id'), ('tasks', 'retry_of'), ('attempts', 'task_id'),
            ('events', 'task_id'), ('events', 'run_id'), ('runs', 'retry_of'),
            ('run_steps', 'run_id'), ('run_steps', 'task_id'), ('approvals', 'run_id'),
            ('commands', 'task_id'), ('commands', 'origin_task_id')) AS x(tbl, col)
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ALTER COLUMN %I SET STATISTICS 0', c.tbl, c.col);
        -- and forget what ANALYZE collected under 0.7.0
        -- (of the table and each of its partitions)
        DELETE FROM pg_catalog.pg_statistic s
         USING pg_catalog.pg_partition_tree(pg_catalog.format('orch.%I', c.tbl)::regclass) p,
               pg_catalog.pg_attribute a
         WHERE s.starelid OPERATOR(pg_catalog.=) p.relid
           AND a.attrelid OPERATOR(pg_catalog.=) p.relid
           AND a.attname OPERATOR(pg_catalog.=) c.col
           AND s.staattnum OPERATOR(pg_catalog.=) a.attnum;
    END LOOP;
END
$stats$;

-- A tenant's claims read only its own claimable rows;
-- the default tenant's read tasks_claim_idx.
CREATE INDEX tasks_tenant_claim_idx ON orch.tasks (queue, tenant_id, priority, created_at, id)
    WITH (deduplicate_items = off) WHERE ready_at IS NOT NULL AND tenant_id OPERATOR(pg_catalog.<>) 'default';

-- A step whose task waits for its next attempt reads
-- retrying.
ALTER TABLE orch.run_steps DROP CONSTRAINT run_steps_state_check;
ALTER TABLE orch.run_steps ADD CONSTRAINT run_steps_state_check
    CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'ready', 'running', 'retrying', 'awaiting_approval',
                                  'waiting', 'succeeded', 'failed', 'timed_out', 'skipped', 'canceled']));

-- Retention purges a finished run's approvals with it:
-- an approval reference is single-use as long as its run is kept.
COMMENT ON TABLE orch.approvals IS
  'Human decisions on approval steps: an approval reference is single-use (OR009, through orch.approval_refs) and bound to one run and step, for as long as that run is kept (retired with its run).';
-- (on each partition: the parent has no indexes)
CREATE INDEX approvals_run_idx ON orch.approvals_default (run_id, tenant_id);
CREATE INDEX approvals_before_080_run_idx ON orch.approvals_before_080 (run_id, tenant_id);

-- Tenant isolation on Citus: the functions behind the
-- task views, the statistics and the metrics read the caller's tenants
-- once, where the call was made, and pass them to their query as a value;
-- orch.tenant_visible(tenant_id) in a query on distributed tables ran on
-- the shard, as the function's owner, and let every row through.
CREATE OR REPLACE FUNCTION orch.open_tasks()
RETURNS TABLE (tenant_id text, queue text, received bigint, queued bigint, executing bigint,
               awaiting_tool bigint, awaiting_user_confirmation bigint, ready bigint,
               delayed bigint, retry_waiting bigint, gated bigint, oldest_ready timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    -- the caller's tenants, read here (on Citus: on the node the call was made
    -- on) and passed to the query as a value, never evaluated on a shard
    vis text[] := orch.caller_tenants();
BEGIN
    RETURN QUERY
    SELECT o.tenant_id, o.queue,
           count(*) FILTER (WHERE o.state = 'received'),
           count(*) FILTER (WHERE o.state = 'queued'),
           count(*) FILTER (WHERE o.state = 'executing'),
           count(*) FILTER (WHERE o.state = 'awaiting_tool'),
           count(*) FILTER (WHERE o.state = 'awaiting_user_confirmation'),
           count(*) FILTER (WHERE o.part = 'ready' AND o.ready_at <= now()),
           count(*) FILTER (WHERE (o.part = 'due' AND o.retry_at IS NULL)
                               OR (o.part = 'ready' AND o.ready_at > now())),
           count(*) FILTER (WHERE o.part = 'due' AND o.retry_at IS NOT NULL),
           count(*) FILTER (WHERE o.part = 'gated'),
           min(o.ready_at) FILTER (WHERE o.part = 'ready' AND o.ready_at <= now())
      FROM (SELECT t.tenant_id, t.queue, t.state, t.ready_at, t.retry_at, 'ready' AS part
              FROM orch.tasks t WHERE t.ready_at IS NOT NULL
            UNION ALL
            SELECT t.tenant_id, t.queue, t.state, t.ready_at, t.retry_at, 'due'
              FROM orch.tasks t
             WHERE t.ready_at IS NULL AND NOT t.gated
               AND (t.state = 'queued' OR (t.state = 'awaiting_tool' AND t.retry_at IS NOT NULL))
            UNION ALL
            SELECT t.tenant_id, t.queue, t.state, t.ready_at, t.retry_at, 'gated'
              FROM orch.tasks t WHERE t.gated AND t.ready_at IS NULL
            UNION ALL
            SELECT t.tenant_id, t.queue, t.state, t.ready_at, t.retry_at, 'executing'
              FROM orch.tasks t WHERE t.state = 'executing'
            UNION ALL
            SELECT t.tenant_id, t.queue, t.state, t.ready_at, t.retry_at, 'waiting'
              FROM orch.tasks t
             WHERE t.state IN ('received', 'awaiting_tool', 'awaiting_user_confirmation')
               AND t.ready_at IS NULL
               AND NOT (t.state = 'awaiting_tool' AND t.retry_at IS NOT NULL)) o
     WHERE (vis IS NULL OR o.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
     GROUP BY o.tenant_id, o.queue;
END
$fn$;

CREATE OR REPLACE FUNCTION orch.dead_letter_counts()
RETURNS TABLE (tenant_id text, queue text, dead_letters bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    -- the caller's tenants, read here (on Citus: on the node the call was made
    -- on) and passed to the query as a value, never evaluated on a shard
    vis text[] := orch.caller_tenants();
BEGIN
    RETURN QUERY
    -- a workflow step's task that failed is the run's failure (run_failed
    -- in the review queue), not a dead letter of its own
    SELECT t.tenant_id, t.queue, count(*)
      FROM orch.tasks t
     WHERE t.state = 'failed' AND t.run_id IS NULL
       AND t.reason_code IN ('max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                             'compensation_required', 'not_safe_to_retry')
       AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of = t.id AND r.tenant_id = t.tenant_id)
       AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
     GROUP BY t.tenant_id, t.queue;
END
$fn$;

CREATE OR REPLACE FUNCTION orch.review_items()
RETURNS TABLE (kind text, tenant_id text, queue text, task_id bigint, run_id bigint, step_id text,
               state text, reason_code text, error text, since timestamptz, action text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    -- the caller's tenants, read here (on Citus: on the node the call was made
    -- on) and passed to the query as a value, never evaluated on a shard
    vis text[] := orch.caller_tenants();
BEGIN
    RETURN QUERY
SELECT * FROM (
    SELECT 'dead_letter'::text AS kind, t.tenant_id, t.queue, t.id AS task_id, t.run_id,
           NULL::text AS step_id, t.state, t.reason_code, t.last_error AS error,
           t.finished_at AS since,
           format('SELECT orch_retry(%s)', t.id) AS action
      FROM orch.tasks t
     WHERE t.state = 'failed'
       AND t.reason_code IN ('max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                             'compensation_required', 'not_safe_to_retry')
       AND t.run_id IS NULL
       AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of = t.id AND r.tenant_id = t.tenant_id)
    UNION ALL
    SELECT CASE WHEN r.reason_code = 'compensation_failed' THEN 'compensation_failed' ELSE 'run_failed' END,
           r.tenant_id, r.definition, NULL, r.id, r.failed_step, r.state, r.reason_code, r.error,
           r.finished_at,
           CASE WHEN r.reason_code = 'compensation_failed'
                THEN 'compensate by hand, then record it (the run stays failed)'
                ELSE format('SELECT orch_retry_run(%s)', r.id) END
      FROM orch.runs r
     WHERE r.state = 'failed'
       AND NOT EXISTS (SELECT 1 FROM orch.runs n WHERE n.retry_of = r.id AND n.tenant_id = r.tenant_id)
    UNION ALL
    SELECT CASE WHEN s.comp_state = 'awaiting_approval' THEN 'compensation_approval' ELSE 'approval_waiting' END,
           s.tenant_id, r.definition,
           -- the approval's task (a compensation's waits in comp_task_id until it starts)
           CASE WHEN s.comp_state = 'awaiting_approval' THEN s.comp_task_id ELSE s.task_id END,
           s.run_id, s.step_id, s.state, NULL, NULL,
           coalesce(s.started_at, r.updated_at),
           format('SELECT orch_approve(%s, %L, <approval_ref>) or orch_reject(...)', s.run_id, s.step_id)
      FROM orch.runs r
      JOIN orch.run_steps s ON s.run_id = r.id AND s.tenant_id = r.tenant_id
     WHERE r.state IN ('running', 'waiting_approval', 'paused')
       AND (s.state = 'awaiting_approval' OR s.comp_state = 'awaiting_approval')
    UNION ALL
    SELECT 'drift_detected', r.tenant_id, r.definition, NULL, r.id, NULL, r.state, r.reason_code,
           pg_catalog.left(r.drift::text, 1000), r.updated_at,
           format('SELECT orch_acknowledge_drift(%s, <approval_ref>), then orch_resume_run(%s)', r.id, r.id)
      FROM orch.runs r
     WHERE r.state = 'paused' AND r.drift IS NOT NULL
    UNION ALL
    SELECT 'awaiting_confirmation', t.tenant_id, t.queue, t.id, t.run_id, NULL, t.state,
           t.reason_code, t.last_error, t.updated_at,
           format('SELECT orch_confirm(%s, true) or orch_confirm(%s, false)', t.id, t.id)
      FROM orch.tasks t
     WHERE t.state = 'awaiting_user_confirmation' AND t.ready_at IS NULL
       -- a workflow approval's task is listed once, as approval_waiting
       AND NOT (t.run_id IS NOT NULL AND t.step_key LIKE '%:approval')
    UNION ALL
    SELECT 'stuck_task', t.tenant_id, t.queue, t.id, t.run_id, NULL, t.state, t.reason_code,
           t.last_error, t.updated_at,
           format('SELECT orch_resume(%s) or orch_cancel(%s)', t.id, t.id)
      FROM orch.tasks t
     WHERE t.state IN ('received', 'awaiting_tool') AND t.ready_at IS NULL AND t.retry_at IS NULL
       AND t.updated_at < now() - coalesce(current_setting('orchestrator.stuck_after', true), '3600')::interval
    UNION ALL
    SELECT 'lease_overdue', t.tenant_id, t.queue, t.id, t.run_id, NULL, t.state, t.reason_code,
           t.last_error, t.lease_expires_at,
           'SELECT orch_maintain() (is maintenance scheduled?)'
      FROM orch.tasks t
     WHERE t.state = 'executing' AND t.lease_expires_at < now() - interval '5 minutes'
) q
 WHERE (vis IS NULL OR q.tenant_id OPERATOR(pg_catalog.=) ANY (vis));
END
$fn$;

ALTER TYPE orch.task_status ADD ATTRIBUTE progress jsonb;
CREATE OR REPLACE FUNCTION orch_status(task_id bigint)
RETURNS SETOF orch.task_status
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
DECLARE
    vis text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'task_id must not be null' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        SELECT t.id, t.queue, t.tenant_id, t.state, t.priority, t.attempts, t.failures,
               t.reason_code, t.run_at, t.retry_at, t.lease_owner, t.lease_expires_at,
               t.result, t.last_error, t.last_error_class, t.created_at, t.updated_at, t.progress
          FROM orch.tasks t
         WHERE t.id OPERATOR(pg_catalog.=) $1 AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis));
    IF NOT FOUND THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION orch_history(task_id bigint)
RETURNS TABLE (at timestamptz, kind text, attempt integer, from_state text, to_state text,
               reason_code text, actor text, lease_token uuid, outcome text,
               error_class text, error text, note text, label text, correlation_id text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
DECLARE
    vis text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
    admin boolean := orch.caller_is_admin();
    corr text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'task_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id OPERATOR(pg_catalog.=) $1
                      AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis)))
       AND NOT EXISTS (SELECT 1 FROM orch.history e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                          AND (vis IS NULL OR e.tenant_id OPERATOR(pg_catalog.=) ANY (vis))) THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
    SELECT t.correlation_id INTO corr FROM orch.tasks t
     WHERE t.id OPERATOR(pg_catalog.=) $1 AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis));
    RETURN QUERY
        SELECT h.at, h.kind, h.attempt, h.from_state, h.to_state, h.reason_code, h.actor,
               CASE WHEN admin THEN h.lease_token END, h.outcome, h.error_class, h.error, h.note,
               h.label, corr
          FROM (SELECT e.at, 'event'::text AS kind, e.attempt, e.from_state, e.to_state,
                       e.reason_code, e.actor, e.lease_token, NULL::text AS outcome,
                       NULL::text AS error_class, NULL::text AS error, e.note, e.label,
                       e.id AS seq, 1 AS src
                  FROM orch.history e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                   AND (vis IS NULL OR e.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
                UNION ALL
                SELECT a.finished_at, 'attempt', a.attempt, NULL, NULL, NULL, NULL,
                       a.lease_token, a.outcome, a.error_class, a.error, NULL, a.worker,
                       a.id, 0
                  FROM orch.attempt_history a WHERE a.task_id OPERATOR(pg_catalog.=) $1
                   AND (vis IS NULL OR a.tenant_id OPERATOR(pg_catalog.=) ANY (vis))) h
         ORDER BY h.at, h.src, h.seq;
END
$fn$;

CREATE OR REPLACE FUNCTION orch_duration_stats(since interval DEFAULT '1 hour')
RETURNS TABLE (tenant_id text, queue text, step_type text, kind text, samples bigint,
               mean_seconds double precision, p50_seconds double precision,
               p95_seconds double precision, p99_seconds double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    vis text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
BEGIN
    IF since IS NULL THEN
        RAISE EXCEPTION 'since must not be null' USING ERRCODE = '22004';
    END IF;
    IF since <= interval '0' OR since > interval '2 days' THEN
        RAISE EXCEPTION 'since must be a positive interval of at most 2 days (the per-minute counters are kept two days)'
              USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH b AS (
        SELECT m.tenant_id, m.queue, m.l1 AS step_type,
               CASE m.metric WHEN 'attempt_seconds' THEN 'attempt' ELSE 'queue_wait' END AS kind,
               m.l2 AS le, sum(m.value)::bigint AS n
          FROM orch.metric_minutes m
         WHERE m.minute > now() - since AND m.metric IN ('attempt_seconds', 'wait_seconds')
           AND (vis IS NULL OR m.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
         GROUP BY 1, 2, 3, 4, 5),
    s AS (
        SELECT m.tenant_id, m.queue, m.l1 AS step_type,
               CASE m.metric WHEN 'attempt_seconds_sum' THEN 'attempt' ELSE 'queue_wait' END AS kind,
               sum(m.value) / 1e6 AS seconds
          FROM orch.metric_minutes m
         WHERE m.minute > now() - since AND m.metric IN ('attempt_seconds_sum', 'wait_seconds_sum')
           AND (vis IS NULL OR m.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
         GROUP BY 1, 2, 3, 4),
    h AS (
        SELECT tenant_id, queue, step_type, kind, array_agg(le) AS les, array_agg(n) AS ns, sum(n)::bigint AS samples
          FROM b GROUP BY 1, 2, 3, 4)
    SELECT h.tenant_id, h.queue, h.step_type, h.kind, h.samples,
           (s.seconds / nullif(h.samples, 0))::float8,
           orch.histogram_quantile(0.5, h.les, h.ns),
           orch.histogram_quantile(0.95, h.les, h.ns),
           orch.histogram_quantile(0.99, h.les, h.ns)
      FROM h LEFT JOIN s USING (tenant_id, queue, step_type, kind)
     ORDER BY 1, 2, 3, 4;
END
$fn$;

-- Drift probes: who published a
-- definition (its probes run with that role's rights), the probe values a
-- run pinned and the drift that stopped it; orch_acknowledge_drift.
ALTER TABLE orch.definitions ADD COLUMN published_by text;
ALTER TABLE orch.runs ADD COLUMN probe_pins jsonb;
ALTER TABLE orch.runs ADD COLUMN drift jsonb;
-- Sub-workflows: a run's parent run, the parent's step and the map item it
-- runs; the top of the family of runs (its lock).
ALTER TABLE orch.runs ADD COLUMN parent_run_id bigint;
ALTER TABLE orch.runs ADD COLUMN parent_step text;
ALTER TABLE orch.runs ADD COLUMN parent_index integer;
ALTER TABLE orch.runs ADD COLUMN root_run_id bigint;
CREATE INDEX runs_parent_idx ON orch.runs_default (parent_run_id, parent_step, parent_index)
    WHERE parent_run_id IS NOT NULL;
-- (the runs from before 0.8.0 have no parent: an empty index, so that a
-- look for a run's children never reads them)
CREATE INDEX runs_before_080_parent_idx ON orch.runs_before_080 (parent_run_id, parent_step, parent_index)
    WHERE parent_run_id IS NOT NULL;
COMMENT ON COLUMN orch.definitions.published_by IS
  'The role that published the version: its drift probes run with this role''s rights.';
COMMENT ON COLUMN orch.runs.probe_pins IS
  'The values of the definition''s drift probes pinned at start (or at the last acknowledged drift): probe name -> text or null.';
COMMENT ON COLUMN orch.runs.drift IS
  'The unacknowledged drift that stopped the run: probe name -> {"pinned": ..., "live": ...}; NULL when none.';
-- What orch_definitions reads (orch.definitions_rows): the table on one
-- node; on Citus, orch_distribute makes it read this function, which runs
-- as the owner (a shard is read with the caller's rights).
CREATE FUNCTION orch.caller_definitions()
RETURNS SETOF orch.definitions
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.definitions x
$fn$;
COMMENT ON FUNCTION orch.caller_definitions() IS
  'Every version of every workflow definition (shared by all tenants): what orch_definitions reads on Citus.';
CREATE VIEW orch.definitions_rows AS
SELECT x.* FROM orch.definitions x;
CREATE OR REPLACE VIEW orch_definitions AS
SELECT d.name, d.version, d.status, d.content_hash, d.spec, d.created_at, d.created_by,
       d.published_at, d.deprecated_at, d.tenant_id, d.published_by
  FROM orch.definitions_rows d;
-- What orch_runs reads: every row for an unbound caller, the caller's tenants'
-- otherwise.  On Citus, orch_distribute makes it read orch.caller_runs()
-- alone (a shard is read with the caller's rights, not the view owner's).
CREATE OR REPLACE VIEW orch.runs_rows AS
SELECT x.* FROM orch.runs x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_runs()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE OR REPLACE VIEW orch_runs AS
SELECT r.id AS run_id, r.tenant_id, r.definition, r.version, r.content_hash, r.state, r.phase,
       r.input, r.output, r.pins, r.idempotency_key, r.reason_code, r.failed_step, r.error,
       r.deadline_at, r.retry_of, r.created_by, r.created_at, r.updated_at, r.finished_at,
       r.correlation_id, r.probe_pins, r.drift, r.parent_run_id
  FROM orch.runs_rows r;
COMMENT ON FUNCTION orch_resume_run(bigint, jsonb) IS
  'Resumes a paused run (idempotent); with pins, every pin must equal the run''s pinned context, else OR010 and nothing changes. Its drift probes are checked first: unacknowledged drift is OR010; new drift stops the run again (returns paused).';

CREATE FUNCTION orch_acknowledge_drift(run_id bigint, approval_ref text,
                                       actor text DEFAULT NULL, note text DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_acknowledge_drift';
COMMENT ON FUNCTION orch_acknowledge_drift(bigint, text, text, text) IS
  'Acknowledges the drift that stopped a run (paused, reason drift_detected) with a single-use approval reference (OR009 on reuse): pins its probes to their live values and clears the drift, so that orch_resume_run resumes it; returns the run state. Audited (drift_acknowledged).';
REVOKE ALL ON FUNCTION orch_acknowledge_drift(bigint, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_acknowledge_drift(bigint, text, text, text) TO orch_approver;

-- Maintenance's look for step tasks left open in finished runs reads the open
-- ones only, never a human_approval step's task (its run's end waits for it).
CREATE INDEX tasks_run_open_idx ON orch.tasks (run_id, tenant_id)
    WHERE run_id IS NOT NULL AND state OPERATOR(pg_catalog.<>) ALL (ARRAY['completed', 'failed', 'cancelled'])
      AND step_key OPERATOR(pg_catalog.!~~) '%:approval';

-- On Citus: marks a run as acted on by the calling transaction in the
-- backend that holds the run's shard (where its tasks' triggers note runs to
-- progress), so that the tasks a run call changes itself do not progress
-- the run a second time there.  Internal: the run calls run it through a
-- query routed to the run's shard; no role is granted it.
CREATE FUNCTION orch.run_busy_on_shard(run_id bigint, busy boolean)
RETURNS boolean
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_run_busy_on_shard';
REVOKE ALL ON FUNCTION orch.run_busy_on_shard(bigint, boolean) FROM PUBLIC;

-- The metrics fold labels step types itself (it reads the run steps of
-- the shard it folds on Citus): orch.task_step_type goes.
DROP FUNCTION orch.task_step_type(bigint, text, text);

ALTER TABLE orch.metric_state ADD COLUMN mark_xact bigint[] NOT NULL DEFAULT '{}',
    ADD COLUMN mark_task bigint[] NOT NULL DEFAULT '{}',
    ADD COLUMN mark_time timestamptz[] NOT NULL DEFAULT '{}';
COMMENT ON TABLE orch.metric_state IS
  'Where orch.metrics_fold stopped: the snapshot (xmin, xmax, in-progress ids) of its last pass, the event/attempt ids below which rows predate the counters, and the marks of its recent passes (orch.metrics_mark: transaction id, task id, time) from which the next pass reads task rows.';

-- Marks of where the metrics fold may start reading task rows (see
-- orch.metrics_fold_on): the clock a fold published last, which a completion
-- a task row records is never stamped before unless the clock reads more
-- than a minute earlier (a time in microseconds since 2000-01-01, as a
-- timestamptz; not set: none yet; 1: a completion found the clock set back
-- by more than that, and the next fold reads every task row).
CREATE SEQUENCE orch.metrics_clock;
REVOKE ALL ON SEQUENCE orch.metrics_clock FROM PUBLIC;
-- (dumped: a restored installation stamps no completion before the last
-- moment its folds published)
SELECT pg_catalog.pg_extension_config_dump('orch.metrics_clock', '');
COMMENT ON SEQUENCE orch.metrics_clock IS
  'The last moment orch.metrics_mark() published (microseconds since 2000-01-01 UTC): a completion a task row records is stamped no earlier.';

CREATE FUNCTION orch.metrics_mark(OUT mark_xact bigint, OUT mark_task bigint, OUT mark_time timestamptz,
                                  OUT clock_reset boolean)
RETURNS record
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_metrics_mark';
COMMENT ON FUNCTION orch.metrics_mark() IS
  'For orch.metrics_fold: the last task id drawn and the clock (published in orch.metrics_clock), read before mark_xact, the next transaction id: a transaction with an id of at least mark_xact enqueues tasks with higher ids and completes them no earlier. clock_reset: the clock was set back by more than a minute since the last mark (the fold then reads every task row once and keeps no earlier mark).';
REVOKE ALL ON FUNCTION orch.metrics_mark() FROM PUBLIC;

-- The metrics fold (0.6.0: about twice as fast per task folded as 0.5.0's,
-- same counts): the step type is looked up for workflow tasks only, the
-- attempt of an event only for retries and failures, and the rows are
-- summed per minute once (the totals add up the minutes, not the rows).
-- The fold reads the recent part of events and attempts only, through
-- their block-range indexes (xact >= the last snapshot's xmin).  The
-- planner cannot cost a BRIN scan well (without correlation statistics, as
-- after an upgrade, when old rows have no xact, it assumes every range
-- matches), so sequential scans are ruled out for the fold; its other
-- reads are primary-key lookups.  Its statement is planned with its values
-- (EXECUTE).  No parallel workers and no JIT: the scans are short (and the
-- cost of a ruled-out scan would look worth compiling).
--
-- orch.metrics_fold_on folds one set of tables, in this order: tasks,
-- events, attempts, runs, run_steps, metric_totals, metric_minutes and
-- (or NULL) maintenance_log; its state is the row state_id of the table
-- state.  On one node orch.metrics_fold() folds the tables themselves, its
-- state in orch.metric_state.  On Citus orch.metrics_fold_shard() folds one
-- group of co-located shards on the node that holds them (0.8.0), its state
-- in that node's orch.metric_shard_state: transaction ids are only
-- comparable on one node, so the fold runs where the rows are, and counts
-- only rows whose ids are in that node's range (rows a shard move brought
-- from another node were counted there).  Rows whose id is at most id_hi
-- and above the state's floors are counted.
--
-- With max_rows (NULL: no bound) a fold reads about that many rows at most:
-- it folds the transactions it has not counted in the order of their ids,
-- up to and including the one that brings its rows to max_rows (the rows
-- of a transaction are folded together), and stores as its snapshot the
-- one this leaves: xmax the first transaction id not folded, the ids below
-- it still in progress in xip.  The next fold goes on from there.  Which
-- transaction that is is found first, from the transaction ids alone of
-- the rows waiting (the lowest max_rows of them), read through the same
-- indexes: a small part of the cost of folding them (docs/storage.md).
CREATE FUNCTION orch.metrics_fold_on(tables regclass[], state regclass, state_id bigint, id_hi bigint,
                                     max_rows bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, orch, pg_temp
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET enable_sort = off
SET jit = off
AS $fn$
DECLARE
    st      record;
    s       pg_snapshot;
    own     bigint;
    folded  bigint;
    locked  bigint;
    -- a row counts when its transaction committed after the last fold's
    -- snapshot and before this one's (not this transaction: its rows are
    -- the next fold's), and its id is above the floor and in the range
    cond    constant text := '%1$s >= $1 AND (%1$s >= $2 OR %1$s = ANY ($3))'
                             ' AND %1$s < $4 AND %1$s <> ALL ($5) AND %1$s IS DISTINCT FROM $6'
                             ' AND %2$s > %3$s AND %2$s <= $9';
    -- the enqueues and completions task rows record: on one node only (on
    -- Citus the trigger, on the shard's node, writes their event rows)
    derived constant boolean := state = 'orch.metric_state'::regclass;
    -- this fold's mark (orch.metrics_mark), and the earlier ones it keeps
    mark_x      bigint;
    mark_k      bigint;
    mark_t      timestamptz;
    reset       boolean := false;
    keep        integer[];
    m           integer;
    new_xmin    bigint;
    new_xmax    bigint;
    new_xip     bigint[];
    -- where the task rows this fold has to read start
    task_floor  bigint := 0;
    time_floor  timestamptz := '-infinity';
    -- which rows of each kind it reads (cond, with the columns of the kind)
    c_attempt   text;
    c_event     text;
    c_complete  text;
    c_enqueue   text;
    c_claim     text;
    c_completed text;
    -- the snapshot, and the transaction id up to which this fold counts:
    -- its xmax, or the first id past the max_rows-th row waiting
    cur_xmax    bigint;
    cur_xip     bigint[];
    horizon     bigint;
    waiting     bigint;
    last_xact   bigint;
BEGIN
    -- One fold at a time; a caller that finds one running leaves it to it.
    -- The snapshot is taken after the lock, so that it sees the state the
    -- previous fold committed; the fold's statement counts exactly the rows
    -- this snapshot sees as committed.
    EXECUTE format('SELECT * FROM %s WHERE id = $1 FOR UPDATE SKIP LOCKED', state) INTO st USING state_id;
    GET DIAGNOSTICS locked = ROW_COUNT;
    IF locked = 0 THEN
        RETURN 0;
    END IF;
    s := pg_current_snapshot();
    own := (pg_current_xact_id_if_assigned()::text)::bigint;

    -- Restored into a cluster whose transaction counter is behind the one
    -- the state was taken in: the ids cannot be compared, so start afresh
    -- from the rows present (the rows restored are not counted again).
    IF (pg_snapshot_xmax(s)::text)::bigint < st.snap_xmax THEN
        -- (the snapshot taken by this statement, with the floors it sees)
        EXECUTE format(
            'UPDATE %9$s m SET snap_xmin = (pg_snapshot_xmin(q.s)::text)::bigint,'
            '   snap_xmax = (pg_snapshot_xmax(q.s)::text)::bigint,'
            '   snap_xip = coalesce((SELECT array_agg((x::text)::bigint) FROM pg_snapshot_xip(q.s) x), ''{}''),'
            '   refreshed_at = now(),%10$s'
            -- (the history's ids: events, and the ids task rows record)
            '   event_floor = greatest(m.event_floor,'
            '     (SELECT max(id) FROM %2$s WHERE id <= $1),'
            '     (SELECT max(complete_event_id) FROM %1$s WHERE complete_event_id <= $1),'
            '     (SELECT max(enqueue_event_id) FROM %1$s WHERE enqueue_event_id <= $1),'
            '     (SELECT max(claim_event_id) FROM %1$s WHERE claim_event_id <= $1)),'
            '   attempt_floor = greatest(m.attempt_floor,'
            '     (SELECT max(id) FROM %3$s WHERE id <= $1),'
            '     (SELECT max(complete_attempt_id) FROM %1$s WHERE complete_attempt_id <= $1))'
            ' FROM (SELECT pg_current_snapshot() AS s) q WHERE m.id = $2',
            tables[1], tables[2], tables[3], NULL, NULL, NULL, NULL, NULL, state,
            CASE WHEN derived THEN '   mark_xact = ''{}'', mark_task = ''{}'', mark_time = ''{}'',' ELSE '' END)
        USING id_hi, state_id;
        RETURN 0;
    END IF;

    -- The task rows to read for the enqueues and completions they record:
    -- those of the transactions not counted yet (at least the last
    -- snapshot's xmin) have task ids above, and completion times at or
    -- after, the last mark taken before those transactions' ids were
    -- assigned (no mark: all of them).  Then this fold's mark, for the
    -- next folds.
    -- (The clock set back by more than a completion's stamp follows: the
    -- task rows are read from the start, and no earlier mark is kept.)
    IF derived THEN
        SELECT k.mark_xact, k.mark_task, k.mark_time, k.clock_reset INTO mark_x, mark_k, mark_t, reset
          FROM orch.metrics_mark() k;
        m := (SELECT max(i) FROM generate_subscripts(st.mark_xact, 1) i WHERE st.mark_xact[i] <= st.snap_xmin);
        IF m IS NOT NULL AND NOT reset THEN
            task_floor := st.mark_task[m];
            time_floor := st.mark_time[m];
        END IF;
    END IF;

    -- The rows of each kind (completions: by the finished index, enqueues:
    -- by the primary key; none on Citus, see above).
    c_attempt := format(cond, 'a.xact', 'a.id', '$8');
    c_event := format(cond, 'e.xact', 'e.id', '$7');
    c_complete := CASE WHEN derived THEN 't.finished_at >= $10 AND '
                                         || format(cond, 't.complete_xact', 't.complete_attempt_id', '$8')
                       ELSE 'false' END;
    c_enqueue := CASE WHEN derived THEN 't.id > $11 AND ' || format(cond, 't.created_xact', 't.enqueue_event_id', '$7')
                      ELSE 'false' END;
    c_claim := format(cond, 't.claim_xact', 't.claim_event_id', '$7');
    c_completed := CASE WHEN derived THEN 't.finished_at >= $10' ELSE 'false' END;
    cur_xmax := (pg_snapshot_xmax(s)::text)::bigint;
    cur_xip := coalesce((SELECT array_agg((x::text)::bigint) FROM pg_snapshot_xip(s) x), '{}'::bigint[]);

    -- How far this fold goes: with more than max_rows rows waiting, up to
    -- the transaction of the max_rows-th in transaction order (the rows
    -- counted as the fold's statement counts them: a completion a task row
    -- records is an event and an attempt).
    horizon := cur_xmax;
    IF max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_rows IS NOT NULL THEN
        EXECUTE format($q$
        SELECT count(*), max(w.x) FROM (
            SELECT r.x FROM (
                SELECT a.xact AS x FROM %3$s a WHERE %4$s
                UNION ALL
                SELECT e.xact FROM %2$s e WHERE %5$s
                UNION ALL
                SELECT t.complete_xact FROM %1$s t WHERE %6$s AND t.complete_attempt_id IS NOT NULL
                UNION ALL
                SELECT t.complete_xact FROM %1$s t
                 WHERE %6$s AND t.complete_attempt_id IS NOT NULL AND t.complete_event_id IS NOT NULL
                UNION ALL
                SELECT t.claim_xact FROM %1$s t
                 WHERE %9$s AND t.complete_event_id IS NOT NULL AND %8$s AND t.claim_event_id IS NOT NULL
                UNION ALL
                SELECT t.created_xact FROM %1$s t WHERE %7$s AND t.enqueue_event_id IS NOT NULL
                UNION ALL
                SELECT t.claim_xact FROM %1$s t
                 WHERE t.state = 'executing' AND %8$s AND t.claim_event_id IS NOT NULL
            ) r
            ORDER BY r.x LIMIT $12
        ) w
        $q$, tables[1], tables[2], tables[3], c_attempt, c_event, c_complete, c_enqueue, c_claim, c_completed)
        INTO waiting, last_xact
        USING st.snap_xmin, st.snap_xmax, st.snap_xip, cur_xmax, cur_xip,
              own, st.event_floor, st.attempt_floor, id_hi, time_floor, task_floor, max_rows;
        IF waiting >= max_rows THEN
            horizon := last_xact + 1;
        END IF;
    END IF;

    EXECUTE format($q$
    WITH
    -- the attempts, and the completed attempts task rows record (orch.attempt_history)
    at AS (
        SELECT a.id, a.tenant_id, a.task_id, a.attempt, a.started_at, a.finished_at, a.outcome,
               NULL::bigint AS event_id, NULL::bigint AS run_id
          FROM %3$s a
         WHERE %9$s
        UNION ALL
        SELECT t.complete_attempt_id, t.tenant_id, t.id, t.attempts, t.claimed_at, t.finished_at, 'completed',
               t.complete_event_id, t.run_id
          FROM %1$s t
         WHERE %10$s AND t.complete_attempt_id IS NOT NULL
    ),
    -- the events, and the transitions task rows record (orch.history)
    ev AS (
        SELECT e.id, e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state,
               e.reason_code, e.attempt, e.at, e.waited
          FROM %2$s e
         WHERE %11$s
        UNION ALL
        SELECT a.event_id, a.tenant_id, a.task_id, a.run_id, 'task', 'executing', 'completed',
               'completed', a.attempt, a.finished_at, NULL::interval
          FROM at a WHERE a.event_id IS NOT NULL
        UNION ALL
        SELECT t.enqueue_event_id, t.tenant_id, t.id, t.run_id, 'task', 'received', 'queued',
               'enqueued', NULL::integer, t.created_at, NULL::interval
          FROM %1$s t
         WHERE %12$s AND t.enqueue_event_id IS NOT NULL
        UNION ALL
        -- a claim is recorded by an executing row, or by a row that records
        -- its completion (the task leaving executing otherwise writes it out)
        SELECT t.claim_event_id, t.tenant_id, t.id, t.run_id, 'task', 'queued', 'executing',
               'claimed', t.attempts, t.claimed_at, make_interval(secs => t.claim_waited / 1000000.0)
          FROM %1$s t
         WHERE t.state = 'executing' AND %13$s AND t.claim_event_id IS NOT NULL
        UNION ALL
        SELECT t.claim_event_id, t.tenant_id, t.id, t.run_id, 'task', 'queued', 'executing',
               'claimed', t.attempts, t.claimed_at, make_interval(secs => t.claim_waited / 1000000.0)
          FROM %1$s t
         WHERE %15$s AND t.complete_event_id IS NOT NULL AND %13$s AND t.claim_event_id IS NOT NULL
    ),
    tev AS (
        SELECT e.tenant_id, t.queue, e.from_state, e.to_state, e.reason_code, e.at, e.waited,
               -- an insert: the task's first event (its from_state is NULL or 'received')
               (e.from_state IS NULL
                OR (e.from_state = 'received'
                    AND NOT EXISTS (SELECT 1 FROM %2$s p
                                     WHERE p.task_id = e.task_id AND p.tenant_id = e.tenant_id
                                       AND p.id < e.id))) AS inserted,
               %14$s AS step_type,
               -- the attempt's error class and retry: for retries and failures only
               CASE WHEN e.from_state = 'executing' AND e.to_state IN ('awaiting_tool', 'failed')
                    THEN (SELECT a.error_class FROM %3$s a
                           WHERE a.task_id = e.task_id AND a.tenant_id = e.tenant_id
                             AND a.attempt = e.attempt LIMIT 1) END AS error_class,
               CASE WHEN e.from_state = 'executing' AND e.to_state = 'awaiting_tool'
                    THEN EXISTS (SELECT 1 FROM %3$s a
                                  WHERE a.task_id = e.task_id AND a.tenant_id = e.tenant_id
                                    AND a.attempt = e.attempt AND a.retry_at IS NOT NULL)
                    ELSE false END AS retried
          FROM ev e
          JOIN %1$s t ON t.id = e.task_id AND t.tenant_id = e.tenant_id
         WHERE e.entity = 'task'
    ),
    tat AS (
        SELECT a.tenant_id, t.queue, a.finished_at AS at, a.outcome,
               extract(epoch FROM a.finished_at - a.started_at)::float8 AS seconds,
               %14$s AS step_type
          FROM at a JOIN %1$s t ON t.id = a.task_id AND t.tenant_id = a.tenant_id
    ),
    d (at, tenant_id, queue, metric, l1, l2, value) AS (
        SELECT at, tenant_id, queue, 'enqueued', '', '', 1::bigint FROM tev WHERE inserted
        UNION ALL
        SELECT at, tenant_id, queue, 'started', '', '', 1 FROM tev WHERE to_state = 'executing'
        UNION ALL
        SELECT at, tenant_id, queue, 'finished', to_state, '', 1 FROM tev
         WHERE to_state IN ('completed', 'failed', 'cancelled') AND from_state IS DISTINCT FROM to_state
        UNION ALL
        SELECT at, tenant_id, queue, 'retry', coalesce(error_class, ''), coalesce(reason_code, ''), 1
          FROM tev WHERE to_state = 'awaiting_tool' AND retried
        UNION ALL
        SELECT at, tenant_id, queue, 'failed', coalesce(error_class, ''), coalesce(reason_code, ''), 1
          FROM tev WHERE to_state = 'failed' AND from_state IS DISTINCT FROM 'failed'
        UNION ALL
        SELECT at, tenant_id, queue, 'wait_seconds', step_type,
               orch.histogram_le(extract(epoch FROM waited)::float8), 1
          FROM tev WHERE to_state = 'executing' AND waited IS NOT NULL
        UNION ALL
        SELECT at, tenant_id, queue, 'wait_seconds_sum', step_type, '',
               (extract(epoch FROM waited) * 1000000)::bigint
          FROM tev WHERE to_state = 'executing' AND waited IS NOT NULL
        UNION ALL
        SELECT at, tenant_id, queue, 'attempt', outcome, '', 1 FROM tat
        UNION ALL
        SELECT at, tenant_id, queue, 'attempt_seconds', step_type, orch.histogram_le(seconds), 1
          FROM tat WHERE seconds IS NOT NULL
        UNION ALL
        SELECT at, tenant_id, queue, 'attempt_seconds_sum', step_type, '', (seconds * 1000000)::bigint
          FROM tat WHERE seconds IS NOT NULL
        UNION ALL
        SELECT e.at, e.tenant_id, r.definition, 'run_finished', e.to_state, '', 1
          FROM ev e JOIN %4$s r ON r.id = e.run_id AND r.tenant_id = e.tenant_id
         WHERE e.entity = 'run' AND e.to_state IN ('succeeded', 'failed', 'canceled')
           AND e.from_state IS DISTINCT FROM e.to_state
        %8$s
    ),
    -- summed per minute once; the totals add up the minutes
    agg AS (
        SELECT date_trunc('minute', at) AS minute, tenant_id, queue, metric, l1, l2, sum(value)::bigint AS value
          FROM d GROUP BY 1, 2, 3, 4, 5, 6
    ),
    per_minute AS (
        INSERT INTO %7$s AS m (minute, tenant_id, queue, metric, l1, l2, value)
        SELECT minute, tenant_id, queue, metric, l1, l2, value FROM agg
        ON CONFLICT (minute, tenant_id, queue, metric, l1, l2)
        DO UPDATE SET value = m.value + excluded.value
        RETURNING 1
    ),
    totals AS (
        INSERT INTO %6$s AS m (tenant_id, queue, metric, l1, l2, value)
        SELECT tenant_id, queue, metric, l1, l2, sum(value)
          FROM agg GROUP BY 1, 2, 3, 4, 5
        ON CONFLICT (tenant_id, queue, metric, l1, l2)
        DO UPDATE SET value = m.value + excluded.value
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM ev) + (SELECT count(*) FROM at)
           + 0 * ((SELECT count(*) FROM per_minute) + (SELECT count(*) FROM totals))
    $q$,
        tables[1], tables[2], tables[3], tables[4], tables[5], tables[6], tables[7],
        -- orch_maintain passes (a pass's own record is folded by the next)
        CASE WHEN tables[8] IS NOT NULL THEN
            format('UNION ALL SELECT l.started_at, %L, %L, %L, %L, %L, 1 FROM %s l WHERE ',
                   '', '', 'maintenance_runs', '', '', tables[8])
            || format(cond, 'l.xact', '0', '-1') END,
        c_attempt, c_complete, c_event, c_enqueue, c_claim,
        -- the step type a task t's metrics are labelled with
        format($s$CASE WHEN t.run_id IS NULL THEN 'task'
                    -- a compensation's task, and the task of the approval it waits for
                    WHEN t.step_key LIKE '%%:compensate' OR t.step_key LIKE '%%:compensate:approval' THEN 'compensation'
                    -- a map item ("step#i") and a human_approval step's task
                    -- ("step:approval") are labelled with their step's type
                    ELSE coalesce((SELECT s.type FROM %s s
                                    WHERE s.run_id = t.run_id AND s.tenant_id = t.tenant_id
                                      AND s.step_id = split_part(split_part(t.step_key, '#', 1), ':', 1)), 'task')
               END$s$, tables[5]),
        c_completed)
    INTO folded
    USING st.snap_xmin, st.snap_xmax, st.snap_xip, horizon, cur_xip,
          own, st.event_floor, st.attempt_floor, id_hi, time_floor, task_floor;

    -- The snapshot stored: what is left not counted.  Below the horizon,
    -- the transactions still in progress and this one (its rows are the
    -- next fold's); from the horizon on, all, and below the last snapshot's
    -- xmax only those that were in progress then (a horizon can be below
    -- it when transactions in progress then committed many rows since).
    new_xmax := greatest(horizon, st.snap_xmax);
    new_xip := ARRAY(SELECT x FROM unnest(cur_xip) x WHERE x < horizon
                     UNION SELECT own WHERE own < horizon
                     UNION SELECT x FROM unnest(st.snap_xip) x WHERE x >= horizon AND x < new_xmax
                     ORDER BY 1);
    new_xmin := least(new_xmax, new_xip[1]);
    -- The marks the next folds may start from: the last one at or below
    -- the xmin stored now (which only grows), the later ones, this one; 64
    -- at most (a transaction held open for long keeps the xmin back: the
    -- first and the last 63 are kept, a fold starting from the first is
    -- only longer); none of the earlier ones after a clock reset.
    IF derived AND NOT reset THEN
        m := (SELECT max(i) FROM generate_subscripts(st.mark_xact, 1) i WHERE st.mark_xact[i] <= new_xmin);
        keep := ARRAY(SELECT i FROM generate_subscripts(st.mark_xact, 1) i WHERE i >= coalesce(m, 1) ORDER BY i);
        IF cardinality(keep) > 63 THEN
            keep := keep[1:1] || keep[cardinality(keep) - 61:];
        END IF;
    END IF;
    -- (refreshed_at: when the counters were last brought up to date; a fold
    -- that stopped short of its snapshot leaves it)
    EXECUTE format('UPDATE %s m SET snap_xmin = $1, snap_xmax = $2, snap_xip = $3,'
                   ' refreshed_at = CASE WHEN $10 THEN now() ELSE m.refreshed_at END,'
                   ' folded_total = m.folded_total + $4%s WHERE m.id = $5', state,
                   CASE WHEN derived THEN
                     ', mark_xact = (SELECT array_agg(m.mark_xact[k] ORDER BY k) FROM unnest($6) k) || $7,'
                     ' mark_task = (SELECT array_agg(m.mark_task[k] ORDER BY k) FROM unnest($6) k) || $8,'
                     ' mark_time = (SELECT array_agg(m.mark_time[k] ORDER BY k) FROM unnest($6) k) || $9' ELSE '' END)
    USING new_xmin, new_xmax, new_xip, folded, state_id, keep, mark_x, mark_k, mark_t, horizon = cur_xmax;

    EXECUTE format('DELETE FROM %s WHERE minute < now() - interval ''2 days''', tables[7]);
    RETURN folded;
END
$fn$;
COMMENT ON FUNCTION orch.metrics_fold_on(regclass[], regclass, bigint, bigint, bigint) IS
  'Adds the events and attempts of one set of tables committed since the fold''s last snapshot (kept in a state table) to their counter tables, with max_rows about that many rows at most (the transactions in id order, each whole); returns how many rows it read.';

-- (max_rows: 0.8.0)
DROP FUNCTION orch.metrics_fold();
CREATE FUNCTION orch.metrics_fold(max_rows bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
BEGIN
    -- The first fold starts from nothing: every row with an xact counts.
    -- (Looked for first: an insert would wait for a fold in progress.)
    IF NOT EXISTS (SELECT 1 FROM orch.metric_state) THEN
        INSERT INTO orch.metric_state (snap_xmin, snap_xmax) VALUES (0, 0) ON CONFLICT DO NOTHING;
    END IF;
    RETURN orch.metrics_fold_on('{orch.tasks, orch.events, orch.attempts, orch.runs, orch.run_steps,'
                                ' orch.metric_totals, orch.metric_minutes, orch.maintenance_log}',
                                'orch.metric_state', 1, 9223372036854775807, max_rows);
END
$fn$;
COMMENT ON FUNCTION orch.metrics_fold(bigint) IS
  'Adds the events and attempts committed since the last fold to orch.metric_totals and orch.metric_minutes, with max_rows about that many at most (NULL: all); returns how many rows it read.';
REVOKE ALL ON FUNCTION orch.metrics_fold(bigint) FROM PUBLIC;

-- On Citus, where each node folds the shards it holds (see above): one row
-- per shard group of orch.tasks, on that node only (never distributed).
CREATE TABLE orch.metric_shard_state (
    id             bigint PRIMARY KEY,
    tenant_id      text NOT NULL DEFAULT 'default',
    snap_xmin      bigint NOT NULL,
    snap_xmax      bigint NOT NULL,
    snap_xip       bigint[] NOT NULL DEFAULT '{}',
    event_floor    bigint NOT NULL DEFAULT 0,
    attempt_floor  bigint NOT NULL DEFAULT 0,
    refreshed_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    folded_total   bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE orch.metric_shard_state IS
  'On Citus: where orch.metrics_fold_shard stopped for each orch.tasks shard on this node (id: the shard id); the same columns as orch.metric_state.';

-- On Citus: stamps a history row written through the coordinator with the
-- transaction and an id of the node that holds its shard (orch_distribute
-- puts it on orch.events and orch.attempts; see orch.metrics_fold_on).
CREATE FUNCTION orch.stamp_on_node()
RETURNS trigger
LANGUAGE C
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_stamp_on_node';
COMMENT ON FUNCTION orch.stamp_on_node() IS
  'On Citus, BEFORE INSERT on the history tables (TG_ARGV: the id sequence): the row''s xact and id become this node''s.';

-- On Citus: the fold of one shard group, run on the node that holds it
-- (orch_maintain and orch_metrics_refresh call it on every shard of
-- orch.tasks through run_command_on_shards).  Its first fold counts the
-- rows in this node's id range from the start, except on the coordinator,
-- whose rows from before orch_distribute were folded on one node: there it
-- starts from where that fold stopped.  With from_now, a first fold starts
-- from the rows present instead, counting none of them (the update of a
-- distributed installation: docs/citus-upgrade-0.7.0-0.8.0.sql).
CREATE FUNCTION orch.metrics_fold_shard(tasks_shard text, from_now boolean DEFAULT false,
                                        max_rows bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
DECLARE
    sid    bigint := (regexp_match(tasks_shard, '_([0-9]+)$'))[1]::bigint;
    g      bigint;
    names  regclass[];
BEGIN
    SELECT groupid INTO g FROM pg_dist_local_group;
    IF sid IS NULL OR NOT EXISTS (SELECT 1 FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
                                   WHERE s.shardid = sid AND s.logicalrelid = 'orch.tasks'::regclass
                                     AND p.groupid = g) THEN
        RAISE EXCEPTION '"%" is not a shard of orch.tasks on this node', tasks_shard
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- its co-located shards, in the order of orch.metrics_fold_on
    SELECT array_agg(shard_name(m.logicalrelid, m.shardid)::regclass ORDER BY k.ord) INTO names
      FROM pg_dist_shard t
      JOIN pg_dist_shard m ON m.shardminvalue = t.shardminvalue
      JOIN unnest('{orch.tasks, orch.events, orch.attempts, orch.runs, orch.run_steps,'
                  ' orch.metric_totals, orch.metric_minutes}'::regclass[]) WITH ORDINALITY k (rel, ord)
        ON k.rel = m.logicalrelid
     WHERE t.shardid = sid;
    IF NOT EXISTS (SELECT 1 FROM orch.metric_shard_state WHERE id = sid) THEN
        -- (from_now: a state "ahead of this node", which orch.metrics_fold_on
        -- resets to the present, as after a restore)
        INSERT INTO orch.metric_shard_state (id, snap_xmin, snap_xmax, snap_xip, event_floor, attempt_floor)
        SELECT sid, coalesce(m.snap_xmin, 0),
               CASE WHEN from_now THEN 9223372036854775807 ELSE coalesce(m.snap_xmax, 0) END,
               coalesce(m.snap_xip, '{}'),
               greatest(m.event_floor, g << 48), greatest(m.attempt_floor, g << 48)
          FROM (SELECT 1) x LEFT JOIN orch.metric_state m ON g = 0 AND NOT from_now
        ON CONFLICT DO NOTHING;
    END IF;
    -- the shards are written here, not through their distributed tables
    PERFORM set_config('citus.enable_manual_changes_to_shards', 'on', true);
    RETURN orch.metrics_fold_on(names || NULL::regclass, 'orch.metric_shard_state', sid, ((g + 1) << 48) - 1,
                                max_rows);
END
$fn$;
COMMENT ON FUNCTION orch.metrics_fold_shard(text, boolean, bigint) IS
  'On Citus: folds the events and attempts of one orch.tasks shard group on the node that holds it into its co-located metric shards, with max_rows about that many at most (NULL: all); returns how many rows it read.';
REVOKE ALL ON FUNCTION orch.metrics_fold_on(regclass[], regclass, bigint, bigint, bigint),
    orch.metrics_fold_shard(text, boolean, bigint), orch.stamp_on_node() FROM PUBLIC;

-- orch_metrics_refresh folds at most about max_rows rows a call.
DROP FUNCTION orch_metrics_refresh();
CREATE FUNCTION orch_metrics_refresh(max_rows integer DEFAULT 250000)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_metrics_refresh';
COMMENT ON FUNCTION orch_metrics_refresh(integer) IS
  'Brings the rolling counters up to date now (orch_maintain does it on every pass), folding at most about max_rows events and attempts (the transactions in order, each whole); returns how many it folded, 0 when another session is folding: less than max_rows means up to date, else call it again. It folds every tenant''s rows: 42501 for a role bound to tenants.';
REVOKE ALL ON FUNCTION orch_metrics_refresh(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_metrics_refresh(integer) TO orch_reader;
REVOKE ALL ON orch.metric_shard_state FROM PUBLIC;

REVOKE ALL ON orch.tenant_bindings_rows, orch.queues_rows, orch.tasks_rows, orch.attempts_rows,
    orch.commands_rows, orch.dead_letters_rows, orch.runs_rows, orch.run_steps_rows, orch.events_rows,
    orch.definitions_rows, orch.maintenance_log_rows
  FROM PUBLIC;
REVOKE ALL ON FUNCTION orch.caller_definitions(), orch.caller_maintenance_log() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch.caller_definitions(), orch.caller_maintenance_log() TO orch_reader;

-- Whether a claim may hand out a workflow step's task now (its run running,
-- within its deadline, or a compensation): asked by the claim statements of
-- orch_dequeue of the step tasks they come by only (src/dequeue.c).
CREATE FUNCTION orch.step_claimable(run_id bigint, tenant text, step_key text)
RETURNS boolean
LANGUAGE C STABLE
-- a query of its own: costed so that the claims' cheaper conditions (due
-- yet? the tenant, the window) are tested first
COST 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_step_claimable';
COMMENT ON FUNCTION orch.step_claimable(bigint, text, text) IS
  'Internal, for orch_dequeue: may a claim hand out this task now (true for a plain task; for a workflow step''s task, while its run is running within its deadline, or for a compensation)?';
REVOKE ALL ON FUNCTION orch.step_claimable(bigint, text, text) FROM PUBLIC;

-- One tenant's share of the task table is planned as one in a hundred,
-- whatever ANALYZE sampled (a tenant claim stays on its own index).
ALTER TABLE orch.tasks ALTER COLUMN tenant_id SET (n_distinct = 100);

-- Comments that named documents users do not have.
COMMENT ON TABLE orch.state_machines IS
  'State machines stored as data; "task" is the built-in task lifecycle.';
COMMENT ON FUNCTION orch_retry_decision(text, integer, integer, jsonb, interval, bigint, boolean) IS
  'The pure retry decision: for an error class, attempts and failures so far (including this one) and a policy.';
COMMENT ON TABLE orch.commands IS
  'Side-effect requests recorded before an adapter performs them.';
COMMENT ON FUNCTION orch_run_lifecycle() IS
  'Enforces the run lifecycle on orch.runs for every writer (OR001, OR002) and writes one event per accepted transition.';

-- ---------------------------------------------------------------------------
-- Readers by key: what a bound role reads at index speed.  The views read
-- every row of the caller's tenants before the caller's own filter (so that
-- a plan never tells another tenant's rows apart); these take the key, and
-- read the caller's rows for it through an index: tasks by id, by run, by
-- the task they re-drive, or the newest (a tenant's own range of
-- tasks_tenant_idx); runs likewise; a run's steps.  Ordered newest first.
-- ---------------------------------------------------------------------------
CREATE INDEX tasks_tenant_idx ON orch.tasks (tenant_id, id)
    WITH (deduplicate_items = off) WHERE tenant_id OPERATOR(pg_catalog.<>) 'default';
CREATE INDEX runs_tenant_idx ON orch.runs_default (tenant_id, id)
    WHERE tenant_id OPERATOR(pg_catalog.<>) 'default';

-- The bounds every reader checks: limit in 1 .. 10000, ids at most that many.
CREATE FUNCTION orch.check_reader_args(ids bigint[], lim integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
BEGIN
    IF lim IS NULL OR lim OPERATOR(pg_catalog.<) 1 OR lim OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 10000, not %', coalesce(lim::text, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.cardinality(ids) OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION 'at most 10000 ids, not %', pg_catalog.cardinality(ids)
              USING ERRCODE = '54000';
    END IF;
END
$fn$;
REVOKE ALL ON FUNCTION orch.check_reader_args(bigint[], integer) FROM PUBLIC;

CREATE FUNCTION orch_task_rows(task_ids bigint[] DEFAULT NULL, run_id bigint DEFAULT NULL,
                               retry_of bigint DEFAULT NULL, before bigint DEFAULT NULL,
                               "limit" integer DEFAULT 100)
RETURNS SETOF orch_tasks
LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
DECLARE
    vis   text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
    upto  bigint := coalesce($4, 9223372036854775807);
    ids   bigint[];
BEGIN
    PERFORM orch.check_reader_args($1, $5);
    -- the ids first, each key through its own index
    IF $1 IS NOT NULL THEN
        ids := $1;
    ELSIF $2 IS NOT NULL THEN
        ids := ARRAY(SELECT t.id FROM orch.tasks t
                      WHERE t.run_id OPERATOR(pg_catalog.=) $2
                        AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis)));
    ELSIF $3 IS NOT NULL THEN
        ids := ARRAY(SELECT t.id FROM orch.tasks t
                      WHERE t.retry_of OPERATOR(pg_catalog.=) $3
                        AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis)));
    ELSIF vis IS NULL THEN
        ids := ARRAY(SELECT t.id FROM orch.tasks t WHERE t.id OPERATOR(pg_catalog.<) upto
                      ORDER BY t.id DESC LIMIT $5);
    ELSE
        -- the newest of each tenant (its range of tasks_tenant_idx), then of all
        ids := ARRAY(SELECT x.id FROM pg_catalog.unnest(vis) v(tenant)
                     CROSS JOIN LATERAL (SELECT t.id FROM orch.tasks t
                                          WHERE t.tenant_id OPERATOR(pg_catalog.=) v.tenant
                                            AND t.tenant_id OPERATOR(pg_catalog.<>) 'default'
                                            AND t.id OPERATOR(pg_catalog.<) upto
                                          ORDER BY t.id DESC LIMIT $5) x
                     UNION ALL
                     SELECT t.id FROM orch.tasks t
                      WHERE 'default' OPERATOR(pg_catalog.=) ANY (vis)
                        AND t.tenant_id OPERATOR(pg_catalog.=) 'default'
                        AND t.id OPERATOR(pg_catalog.<) upto
                     ORDER BY 1 DESC LIMIT $5);
    END IF;
    RETURN QUERY
        SELECT t.id, t.tenant_id, t.queue, t.state, t.priority, t.payload, t.result, t.run_at,
               t.retry_at, t.attempts, t.failures, t.max_attempts, t.max_failures, t.reason_code,
               t.last_error, t.last_error_class, t.lease_owner, t.lease_expires_at, t.claimed_at,
               t.wait_data, t.resume_data, t.idempotency_key, t.owner, t.concurrency_key, t.run_id,
               t.step_key, t.created_at, t.updated_at, t.finished_at, t.retry_of, t.gated,
               t.correlation_id, t.progress
          FROM orch.tasks t
         WHERE t.id OPERATOR(pg_catalog.=) ANY (ids)
           AND (vis IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
           AND t.id OPERATOR(pg_catalog.<) upto
           AND ($2 IS NULL OR t.run_id OPERATOR(pg_catalog.=) $2)
           AND ($3 IS NULL OR t.retry_of OPERATOR(pg_catalog.=) $3)
         ORDER BY t.id DESC
         LIMIT $5;
END
$fn$;
COMMENT ON FUNCTION orch_task_rows(bigint[], bigint, bigint, bigint, integer) IS
  'Tasks of the caller''s tenants by key (ids, run, the task they re-drive; every key given must match), else the newest; below before, newest first, at most limit. Read through an index whatever the tenant''s size.';

CREATE FUNCTION orch_run_rows(run_ids bigint[] DEFAULT NULL, retry_of bigint DEFAULT NULL,
                              before bigint DEFAULT NULL, "limit" integer DEFAULT 100)
RETURNS SETOF orch_runs
LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
DECLARE
    vis   text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
    upto  bigint := coalesce($3, 9223372036854775807);
    ids   bigint[];
BEGIN
    PERFORM orch.check_reader_args($1, $4);
    IF $1 IS NOT NULL THEN
        ids := $1;
    ELSIF $2 IS NOT NULL THEN
        ids := ARRAY(SELECT r.id FROM orch.runs r
                      WHERE r.retry_of OPERATOR(pg_catalog.=) $2
                        AND (vis IS NULL OR r.tenant_id OPERATOR(pg_catalog.=) ANY (vis)));
    ELSIF vis IS NULL THEN
        ids := ARRAY(SELECT r.id FROM orch.runs r WHERE r.id OPERATOR(pg_catalog.<) upto
                      ORDER BY r.id DESC LIMIT $4);
    ELSE
        ids := ARRAY(SELECT x.id FROM pg_catalog.unnest(vis) v(tenant)
                     CROSS JOIN LATERAL (SELECT r.id FROM orch.runs r
                                          WHERE r.tenant_id OPERATOR(pg_catalog.=) v.tenant
                                            AND r.tenant_id OPERATOR(pg_catalog.<>) 'default'
                                            AND r.id OPERATOR(pg_catalog.<) upto
                                          ORDER BY r.id DESC LIMIT $4) x
                     UNION ALL
                     SELECT r.id FROM orch.runs r
                      WHERE 'default' OPERATOR(pg_catalog.=) ANY (vis)
                        AND r.tenant_id OPERATOR(pg_catalog.=) 'default'
                        AND r.id OPERATOR(pg_catalog.<) upto
                     ORDER BY 1 DESC LIMIT $4);
    END IF;
    RETURN QUERY
        SELECT r.id, r.tenant_id, r.definition, r.version, r.content_hash, r.state, r.phase,
               r.input, r.output, r.pins, r.idempotency_key, r.reason_code, r.failed_step, r.error,
               r.deadline_at, r.retry_of, r.created_by, r.created_at, r.updated_at, r.finished_at,
               r.correlation_id, r.probe_pins, r.drift, r.parent_run_id
          FROM orch.runs r
         WHERE r.id OPERATOR(pg_catalog.=) ANY (ids)
           AND (vis IS NULL OR r.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
           AND r.id OPERATOR(pg_catalog.<) upto
           AND ($2 IS NULL OR r.retry_of OPERATOR(pg_catalog.=) $2)
         ORDER BY r.id DESC
         LIMIT $4;
END
$fn$;
COMMENT ON FUNCTION orch_run_rows(bigint[], bigint, bigint, integer) IS
  'Workflow runs of the caller''s tenants by key (ids, the run they retry; both must match when given), else the newest; below before, newest first, at most limit. Read through an index whatever the tenant''s size.';

CREATE FUNCTION orch_run_step_rows(run_id bigint)
RETURNS SETOF orch_run_steps
LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 20
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
DECLARE
    vis   text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'run_id must not be null' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        SELECT s.run_id, s.tenant_id, s.step_id, s.ord, s.type, s.state, s.task_id, s.output, s.error,
               s.wake_at, s.cap_at, s.started_at, s.finished_at, s.comp_state
          FROM orch.run_steps s
         WHERE s.run_id OPERATOR(pg_catalog.=) $1
           AND (vis IS NULL OR s.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
         ORDER BY s.ord;
END
$fn$;
COMMENT ON FUNCTION orch_run_step_rows(bigint) IS
  'The steps of one workflow run of the caller''s tenants, in definition order (none for an unknown run or another tenant''s). Read through an index whatever the tenant''s size.';
REVOKE ALL ON FUNCTION orch_task_rows(bigint[], bigint, bigint, bigint, integer),
    orch_run_rows(bigint[], bigint, bigint, integer), orch_run_step_rows(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_task_rows(bigint[], bigint, bigint, bigint, integer),
    orch_run_rows(bigint[], bigint, bigint, integer), orch_run_step_rows(bigint)
  TO orch_reader;

-- Claims that wait: orch_dequeue gains wait (src/claim_wait.c).
DROP FUNCTION orch_dequeue(text, text, integer, interval, text);
CREATE FUNCTION orch_dequeue(queue text, worker text,
                             batch integer DEFAULT 1,
                             lease interval DEFAULT NULL,
                             tenant text DEFAULT NULL,
                             wait interval DEFAULT NULL)
RETURNS TABLE (task_id bigint, lease_token uuid, attempt integer, payload jsonb,
               queue text, priority integer, step_key text, guard text,
               lease_expires_at timestamptz, resume_data jsonb)
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_dequeue';
COMMENT ON FUNCTION orch_dequeue(text, text, integer, interval, text, interval) IS
  'Claims up to batch eligible tasks (priority, then FIFO) with a lease; never hands one task to two workers; with wait, waits for one when there is none.';
REVOKE ALL ON FUNCTION orch_dequeue(text, text, integer, interval, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_dequeue(text, text, integer, interval, text, interval) TO orch_worker;

-- A worker's calls that keep or give back its task (src/task_lease.c).
COMMENT ON COLUMN orch.tasks.progress IS
  'The last progress value the task''s worker reported (orch_progress, orch_heartbeat); kept across attempts, so that a retry can read where the previous attempt got to.';

CREATE FUNCTION orch_heartbeat(task_id bigint, lease_token uuid, extend interval, progress jsonb)
RETURNS TABLE (state text, lease_expires_at timestamptz)
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_heartbeat';
COMMENT ON FUNCTION orch_heartbeat(bigint, uuid, interval, jsonb) IS
  'Extends a lease (and, when progress is not null, sets the task''s progress); returns the task''s state and the new lease expiry (''cancelled'' and null when the task was cancelled meanwhile).';

CREATE FUNCTION orch_progress(task_id bigint, lease_token uuid, progress jsonb)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_progress';
COMMENT ON FUNCTION orch_progress(bigint, uuid, jsonb) IS
  'Sets the progress of a task the lease token holds (no event: the task''s history does not grow); fenced like orch_complete.';

CREATE FUNCTION orch_release(task_id bigint, lease_token uuid, delay interval DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_release';
COMMENT ON FUNCTION orch_release(bigint, uuid, interval) IS
  'Gives a claimed task back without counting an attempt or a failure; it is claimable again after delay (at once by default). Fenced like orch_complete.';

REVOKE ALL ON FUNCTION orch_heartbeat(bigint, uuid, interval, jsonb),
    orch_progress(bigint, uuid, jsonb), orch_release(bigint, uuid, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_heartbeat(bigint, uuid, interval, jsonb),
    orch_progress(bigint, uuid, jsonb), orch_release(bigint, uuid, interval)
  TO orch_worker;

-- Acting on the tasks or runs a filter matches (src/bulk.c).
CREATE FUNCTION orch_cancel_where(filter jsonb, reason text DEFAULT NULL, max integer DEFAULT 1000)
RETURNS TABLE (task_id bigint, state text)
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_cancel_where';
COMMENT ON FUNCTION orch_cancel_where(jsonb, text, integer) IS
  'Cancels the open tasks of the caller''s tenants that the filter matches (oldest first, at most max), each as orch_cancel does; returns each with the state it is in after the call.';

CREATE FUNCTION orch_retry_where(filter jsonb, max integer DEFAULT 1000)
RETURNS TABLE (task_id bigint, new_task_id bigint)
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_retry_where';
COMMENT ON FUNCTION orch_retry_where(jsonb, integer) IS
  'Re-drives the dead letters of the caller''s tenants that the filter matches and that were not re-driven yet (oldest failure first, at most max), each as orch_retry does.';

CREATE FUNCTION orch_cancel_runs_where(filter jsonb, reason text DEFAULT NULL, max integer DEFAULT 100)
RETURNS TABLE (run_id bigint, state text)
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_cancel_runs_where';
COMMENT ON FUNCTION orch_cancel_runs_where(jsonb, text, integer) IS
  'Cancels the open workflow runs of the caller''s tenants that the filter matches (oldest first, at most max), each as orch_cancel_run does; returns each with the state it is in after the call.';

REVOKE ALL ON FUNCTION orch_cancel_where(jsonb, text, integer), orch_retry_where(jsonb, integer),
    orch_cancel_runs_where(jsonb, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_cancel_where(jsonb, text, integer),
    orch_cancel_runs_where(jsonb, text, integer)
  TO orch_producer;
GRANT EXECUTE ON FUNCTION orch_retry_where(jsonb, integer) TO orch_admin;

-- Fair claims across tenants or concurrency keys (src/claim_fair.c).
CREATE TABLE orch.fair_weights (
    queue  text NOT NULL,
    fkey   text NOT NULL,
    weight integer NOT NULL CHECK (weight OPERATOR(pg_catalog.>=) 1 AND weight OPERATOR(pg_catalog.<=) 1000),
    tenant_id text NOT NULL DEFAULT 'default',
    PRIMARY KEY (queue, fkey)
);
COMMENT ON TABLE orch.fair_weights IS
  'How many tasks a key (a tenant, or a concurrency key, as the queue''s fairness_key says) takes per turn in the fair claims of a queue (orch_set_fairness_weight; 1 without a row). Installation-wide, as the concurrency limits: tenant_id is always ''default''.';
CREATE TABLE orch.fair_cursors (
    queue  text PRIMARY KEY,
    fkey   text,
    credit integer NOT NULL DEFAULT 0,
    tenant_id text NOT NULL DEFAULT 'default'
);
COMMENT ON TABLE orch.fair_cursors IS
  'Where the next fair claim of a queue starts: after the key the last one ended on (null: the tasks without a key of their own), or on it while credit tasks of its turn are left. One row per queue; tenant_id is always ''default''.';
SELECT pg_catalog.pg_extension_config_dump('orch.fair_weights', '');
SELECT pg_catalog.pg_extension_config_dump('orch.fair_cursors', '');

CREATE FUNCTION orch_set_fairness_weight(queue text, key text, weight integer)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_set_fairness_weight';
COMMENT ON FUNCTION orch_set_fairness_weight(text, text, integer) IS
  'How many tasks a key (a tenant, or a concurrency key, as the queue''s fairness_key says) takes per turn in the queue''s fair claims (1 to 1000; null: back to 1).';
REVOKE ALL ON FUNCTION orch_set_fairness_weight(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_set_fairness_weight(text, text, integer) TO orch_admin;

-- Signals (src/signals.c, src/run_signals.c): messages sent to a run
-- (orch_signal) that the run's wait steps for their name consume, in the
-- order they were sent.  Kept in partitions by run id like the run's steps
-- and retired with the run (history_partitions.c).
CREATE SEQUENCE orch.signals_id_seq;
CREATE TABLE orch.signals (
    id              bigint NOT NULL DEFAULT pg_catalog.nextval('orch.signals_id_seq'),
    run_id          bigint NOT NULL,
    tenant_id       text NOT NULL DEFAULT 'default',
    name            text NOT NULL,
    payload         jsonb NOT NULL,
    idempotency_key text,
    sent_by         text NOT NULL,
    sent_at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    consumed_at     timestamptz,
    consumed_by     text
) PARTITION BY RANGE (run_id);
CREATE TABLE orch.signals_default PARTITION OF orch.signals (PRIMARY KEY (run_id, id, tenant_id)) DEFAULT;
-- The run's signals not yet consumed, by name in the order sent.
CREATE INDEX signals_pending_idx ON orch.signals_default (run_id, tenant_id, name, id)
    WHERE consumed_at IS NULL;
-- One signal per idempotency key and run.
CREATE UNIQUE INDEX signals_key_idx ON orch.signals_default (run_id, tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
COMMENT ON TABLE orch.signals IS
  'Signals sent to workflow runs (orch_signal): consumed at most once, by the first wait step for their name, in the order sent; retired with their run.';
SELECT pg_catalog.pg_extension_config_dump('orch.signals_default', '');
SELECT pg_catalog.pg_extension_config_dump('orch.signals_id_seq', '');
ALTER TABLE orch.signals ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON orch.signals USING (orch.tenant_visible(tenant_id))
    WITH CHECK (orch.tenant_visible(tenant_id));
ALTER TABLE orch.signals_default ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON orch.signals_default USING (orch.tenant_visible(tenant_id))
    WITH CHECK (orch.tenant_visible(tenant_id));
ALTER TABLE orch.signals ALTER COLUMN run_id SET STATISTICS 0;
ALTER TABLE orch.signals ALTER COLUMN name SET STATISTICS 0;
ALTER TABLE orch.signals ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE orch.signals ALTER COLUMN idempotency_key SET STATISTICS 0;
ALTER TABLE orch.signals ALTER COLUMN sent_by SET STATISTICS 0;
ALTER TABLE orch.signals ALTER COLUMN consumed_by SET STATISTICS 0;
REVOKE ALL ON orch.signals, orch.signals_default, orch.signals_id_seq FROM PUBLIC;

CREATE FUNCTION orch_signal(run_id bigint, name text, payload jsonb DEFAULT '{}',
                            idempotency_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_signal';
COMMENT ON FUNCTION orch_signal(bigint, text, jsonb, text) IS
  'Sends a signal to a run: the first wait step for its name consumes it (now, or when one is reached or the paused run resumes); returns the signal''s id (the same for a repeated idempotency key).';

CREATE FUNCTION orch.caller_signals()
RETURNS SETOF orch.signals
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 1000
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.signals x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_signals() IS
  'The signals of the caller''s tenants'' runs (every row for an unbound caller): the bound branch of orch_signals.';

-- What orch_signals reads: every row for an unbound caller, the caller's
-- tenants' otherwise.
CREATE VIEW orch.signals_rows AS
SELECT x.* FROM orch.signals x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_signals()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE VIEW orch_signals AS
SELECT g.run_id, g.tenant_id, g.id AS signal_id, g.name, g.payload, g.sent_at, g.consumed_at,
       g.consumed_by
  FROM orch.signals_rows g;
COMMENT ON VIEW orch_signals IS
  'Signals sent to workflow runs: pending (consumed_at null) or consumed by a wait step (consumed_by); a bound role sees its tenants''.';

REVOKE ALL ON FUNCTION orch_signal(bigint, text, jsonb, text), orch.caller_signals() FROM PUBLIC;
REVOKE ALL ON orch.signals_rows, orch_signals FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_signal(bigint, text, jsonb, text) TO orch_producer;
GRANT EXECUTE ON FUNCTION orch.caller_signals() TO orch_reader;
GRANT SELECT ON orch_signals TO orch_reader;

-- ---------------------------------------------------------------------------
-- Schedules: cron slots that enqueue a task or start a run (src/schedules.c,
-- src/cron.c).  orch_schedule_tick fires what is due; orch_maintain calls it.
-- ---------------------------------------------------------------------------
CREATE TABLE orch.schedules (
    tenant_id        text NOT NULL DEFAULT 'default',
    name             text NOT NULL,
    cron             text NOT NULL,
    timezone         text NOT NULL DEFAULT 'UTC',
    target           jsonb NOT NULL,
    overlap          text NOT NULL DEFAULT 'skip'
                     CHECK (overlap OPERATOR(pg_catalog.=) ANY (ARRAY['skip', 'allow', 'queue_one'])),
    catch_up         text NOT NULL DEFAULT 'skip'
                     CHECK (catch_up OPERATOR(pg_catalog.=) ANY (ARRAY['skip', 'all'])),
    catch_up_window  interval NOT NULL DEFAULT '1 hour',
    paused           boolean NOT NULL DEFAULT false,
    next_fire_at     timestamptz,
    pending_slot     timestamptz,
    last_fired_slot  timestamptz,
    last_task_id     bigint,
    last_run_id      bigint,
    fired            bigint NOT NULL DEFAULT 0,
    skipped          bigint NOT NULL DEFAULT 0,
    last_error       text,
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (tenant_id, name)
);
COMMENT ON TABLE orch.schedules IS
  'Cron schedules (orch_schedule): what each fires, its policies, its next slot and what it fired and skipped.';
COMMENT ON COLUMN orch.schedules.pending_slot IS
  'overlap queue_one: the slot held back until the work of the last fire is finished.';
CREATE INDEX schedules_due_idx ON orch.schedules (next_fire_at) WHERE NOT paused;
-- Row-level security for roles granted direct access, and no planner
-- statistics on the columns that hold a tenant's values (as for the tasks).
ALTER TABLE orch.schedules ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON orch.schedules USING (orch.tenant_visible(tenant_id))
    WITH CHECK (orch.tenant_visible(tenant_id));
ALTER TABLE orch.schedules ALTER COLUMN name SET STATISTICS 0, ALTER COLUMN target SET STATISTICS 0,
    ALTER COLUMN last_error SET STATISTICS 0, ALTER COLUMN last_task_id SET STATISTICS 0,
    ALTER COLUMN last_run_id SET STATISTICS 0;
SELECT pg_catalog.pg_extension_config_dump('orch.schedules', '');

CREATE FUNCTION orch_schedule(name text, cron text, target jsonb, options jsonb DEFAULT '{}')
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_schedule';
COMMENT ON FUNCTION orch_schedule(text, text, jsonb, jsonb) IS
  'Creates or replaces a cron schedule of the caller''s tenant that enqueues a task or starts a run at each slot (target checked now; options timezone, overlap, catch_up, catch_up_window, tenant).';

CREATE FUNCTION orch_unschedule(name text, tenant text DEFAULT NULL)
RETURNS boolean
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_unschedule';
COMMENT ON FUNCTION orch_unschedule(text, text) IS
  'Removes a schedule; true when there was one. What it fired stays.';

CREATE FUNCTION orch_pause_schedule(name text, tenant text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_pause_schedule';
COMMENT ON FUNCTION orch_pause_schedule(text, text) IS
  'Pauses a schedule (idempotent): no slot fires until it is resumed.';

CREATE FUNCTION orch_resume_schedule(name text, tenant text DEFAULT NULL)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_resume_schedule';
COMMENT ON FUNCTION orch_resume_schedule(text, text) IS
  'Resumes a paused schedule (idempotent) from its first slot after now; the slots of the pause never fire.';

CREATE FUNCTION orch_schedule_tick(as_of timestamptz DEFAULT pg_catalog.now())
RETURNS integer
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_schedule_tick';
COMMENT ON FUNCTION orch_schedule_tick(timestamptz) IS
  'Fires the slots of the caller''s tenants'' schedules due by as_of (each slot at most once, at most orchestrator.max_batch_size fires); returns how many fired. orch_maintain calls it.';

CREATE FUNCTION orch_cron_next(cron text, after timestamptz DEFAULT pg_catalog.now(),
                               timezone text DEFAULT 'UTC', count integer DEFAULT 1)
RETURNS SETOF timestamptz
LANGUAGE C STABLE PARALLEL SAFE ROWS 10
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_cron_next';
COMMENT ON FUNCTION orch_cron_next(text, timestamptz, text, integer) IS
  'The next count slots of a cron expression after an instant in a time zone, as a schedule fires them.';

CREATE FUNCTION orch.caller_schedules()
RETURNS SETOF orch.schedules
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED ROWS 100
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
    SELECT x.* FROM orch.schedules x
     WHERE ((SELECT orch.caller_tenants()) IS NULL
            OR x.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch.caller_tenants())::text[]))
$fn$;
COMMENT ON FUNCTION orch.caller_schedules() IS
  'The schedules of the caller''s tenants (every row for an unbound caller): the bound branch of orch_schedules.';

CREATE VIEW orch.schedules_rows AS
SELECT x.* FROM orch.schedules x
 WHERE (SELECT orch_caller_tenants()) IS NULL
UNION ALL
SELECT * FROM orch.caller_schedules()
 WHERE (SELECT orch_caller_tenants()) IS NOT NULL;
CREATE VIEW orch_schedules AS
SELECT s.name, s.tenant_id, s.cron, s.timezone, s.target, s.overlap, s.catch_up, s.catch_up_window,
       s.paused, s.next_fire_at, s.last_fired_slot, s.pending_slot, s.last_task_id, s.last_run_id,
       s.fired, s.skipped, s.last_error, s.created_by, s.created_at, s.updated_at
  FROM orch.schedules_rows s;
COMMENT ON VIEW orch_schedules IS
  'Cron schedules: what each fires, its next slot, its last fired slot, how many slots fired and were skipped.';

REVOKE ALL ON FUNCTION orch_schedule(text, text, jsonb, jsonb), orch_unschedule(text, text),
    orch_pause_schedule(text, text), orch_resume_schedule(text, text),
    orch_schedule_tick(timestamptz), orch_cron_next(text, timestamptz, text, integer),
    orch.caller_schedules() FROM PUBLIC;
REVOKE ALL ON orch.schedules, orch.schedules_rows, orch_schedules FROM PUBLIC;
GRANT SELECT ON orch_schedules TO orch_reader;
GRANT EXECUTE ON FUNCTION orch_cron_next(text, timestamptz, text, integer), orch.caller_schedules()
  TO orch_reader;
GRANT EXECUTE ON FUNCTION orch_schedule(text, text, jsonb, jsonb), orch_unschedule(text, text),
    orch_pause_schedule(text, text), orch_resume_schedule(text, text)
  TO orch_producer;
GRANT EXECUTE ON FUNCTION orch_schedule_tick(timestamptz) TO orch_admin;

-- Per-minute throughput of each queue, from the folded counters.
CREATE FUNCTION orch_throughput(since interval DEFAULT '1 hour')
RETURNS TABLE (minute timestamptz, tenant_id text, queue text, enqueued bigint, completed bigint, failed bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    vis text[] := orch.caller_tenants();   -- read here, passed as a value (Citus)
BEGIN
    IF since IS NULL THEN
        RAISE EXCEPTION 'since must not be null' USING ERRCODE = '22004';
    END IF;
    IF since <= interval '0' OR since > interval '2 days' THEN
        RAISE EXCEPTION 'since must be a positive interval of at most 2 days (the per-minute counters are kept two days)'
              USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT m.minute, m.tenant_id, m.queue,
               coalesce(sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'enqueued'), 0)::bigint,
               coalesce(sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished'
                                               AND m.l1 OPERATOR(pg_catalog.=) 'completed'), 0)::bigint,
               coalesce(sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'failed'), 0)::bigint
          FROM orch.metric_minutes m
         WHERE m.minute OPERATOR(pg_catalog.>) (now() OPERATOR(pg_catalog.-) since)
           AND m.metric OPERATOR(pg_catalog.=) ANY (ARRAY['enqueued', 'finished', 'failed'])
           AND (vis IS NULL OR m.tenant_id OPERATOR(pg_catalog.=) ANY (vis))
         GROUP BY 1, 2, 3
         ORDER BY 1, 2, 3;
END
$fn$;
COMMENT ON FUNCTION orch_throughput(interval) IS
  'Tasks enqueued, completed and failed per minute, by tenant and queue, over the last "since" (at most two days), from the counters orch_maintain and orch_metrics_refresh fold: minutes without any are left out.';
REVOKE ALL ON FUNCTION orch_throughput(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_throughput(interval) TO orch_reader;

-- Internal: the sub-workflow a run's subflow step starts (src/run_subflows.c);
-- refused outside a step's progression.
CREATE FUNCTION orch.start_subflow(parent_run_id bigint, parent_step text, parent_index integer,
                                   name text, version integer, input jsonb)
RETURNS bigint
LANGUAGE C VOLATILE
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_start_subflow';
COMMENT ON FUNCTION orch.start_subflow(bigint, text, integer, text, integer, jsonb) IS
  'Internal, for a run''s subflow step: starts its sub-workflow in the parent''s tenant (42501 when called otherwise).';
REVOKE ALL ON FUNCTION orch.start_subflow(bigint, text, integer, text, integer, jsonb) FROM PUBLIC;

-- Last: a relcache invalidation of orch.tasks tells every backend that the
-- schema changed (the library keeps the installed version across
-- transactions until then; src/schema.c).  Every upgrade script ends so.
ALTER TABLE orch.tasks SET (autovacuum_analyze_scale_factor = 0.02);
