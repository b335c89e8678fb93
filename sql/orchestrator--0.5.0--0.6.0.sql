/* orchestrator 0.5.0 -> 0.6.0: performance. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.6.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- The metrics fold, about twice as fast per task folded (1.2 s -> 0.66 s for
-- 20,000 tasks here): the step type is looked up for workflow tasks only, the
-- attempt of an event only for retries and failures, and the rows are
-- summed per minute once (the totals add up the minutes, not the rows).
-- Same counts as 0.5.0's fold (regress test metrics).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION orch.metrics_fold()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET enable_sort = off
SET jit = off
AS $fn$
DECLARE
    st      orch.metric_state;
    cur_max bigint;
    folded  bigint;
BEGIN
    -- The first fold starts from nothing: every row with an xact counts.
    -- (Looked for first: an insert would wait for a fold in progress.)
    IF NOT EXISTS (SELECT 1 FROM orch.metric_state) THEN
        INSERT INTO orch.metric_state (snap_xmin, snap_xmax) VALUES (0, 0) ON CONFLICT DO NOTHING;
    END IF;
    -- One fold at a time; a caller that finds one running leaves it to it.
    -- The lock is taken before the fold's own statement, so that statement's
    -- snapshot sees the state the previous fold committed.
    SELECT * INTO st FROM orch.metric_state WHERE id = 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;

    -- Restored into a cluster whose transaction counter is behind the one
    -- the state was taken in: the ids cannot be compared, so start afresh
    -- from the rows present (the rows restored are not counted again).
    cur_max := (pg_snapshot_xmax(pg_current_snapshot())::text)::bigint;
    IF cur_max < st.snap_xmax THEN
        UPDATE orch.metric_state m
           SET snap_xmin = (pg_snapshot_xmin(s)::text)::bigint,
               snap_xmax = (pg_snapshot_xmax(s)::text)::bigint,
               snap_xip = coalesce((SELECT array_agg((x::text)::bigint) FROM pg_snapshot_xip(s) x), '{}'),
               event_floor = coalesce((SELECT max(id) FROM orch.events), 0),
               attempt_floor = coalesce((SELECT max(id) FROM orch.attempts), 0),
               refreshed_at = now()
          FROM (SELECT pg_current_snapshot() AS s) q
         WHERE m.id = 1;
        RETURN 0;
    END IF;

    WITH cur AS (
        -- This statement's snapshot; our own transaction's rows are left
        -- for the next fold (they become visible to it as committed).
        SELECT (pg_snapshot_xmin(s)::text)::bigint AS xmin,
               (pg_snapshot_xmax(s)::text)::bigint AS xmax,
               coalesce((SELECT array_agg((x::text)::bigint) FROM pg_snapshot_xip(s) x), '{}') AS xip,
               (pg_current_xact_id_if_assigned()::text)::bigint AS own
          FROM (SELECT pg_current_snapshot() AS s) q
    ),
    ev AS (
        SELECT e.* FROM orch.events e
         WHERE e.xact >= st.snap_xmin AND e.id > st.event_floor
           AND (e.xact >= st.snap_xmax OR e.xact = ANY (st.snap_xip))
           AND e.xact IS DISTINCT FROM (SELECT own FROM cur)
    ),
    at AS (
        SELECT a.* FROM orch.attempts a
         WHERE a.xact >= st.snap_xmin AND a.id > st.attempt_floor
           AND (a.xact >= st.snap_xmax OR a.xact = ANY (st.snap_xip))
           AND a.xact IS DISTINCT FROM (SELECT own FROM cur)
    ),
    tev AS (
        SELECT e.tenant_id, t.queue, e.from_state, e.to_state, e.reason_code, e.at, e.waited,
               -- an insert: the task's first event (its from_state is NULL or 'received')
               (e.from_state IS NULL
                OR (e.from_state = 'received'
                    AND NOT EXISTS (SELECT 1 FROM orch.events p
                                     WHERE p.task_id = e.task_id AND p.tenant_id = e.tenant_id
                                       AND p.id < e.id))) AS inserted,
               CASE WHEN t.run_id IS NULL THEN 'task'
                    ELSE orch.task_step_type(t.run_id, t.tenant_id, t.step_key) END AS step_type,
               -- the attempt's error class and retry: for retries and failures only
               CASE WHEN e.from_state = 'executing' AND e.to_state IN ('awaiting_tool', 'failed')
                    THEN (SELECT a.error_class FROM orch.attempts a
                           WHERE a.task_id = e.task_id AND a.tenant_id = e.tenant_id
                             AND a.attempt = e.attempt LIMIT 1) END AS error_class,
               CASE WHEN e.from_state = 'executing' AND e.to_state = 'awaiting_tool'
                    THEN EXISTS (SELECT 1 FROM orch.attempts a
                                  WHERE a.task_id = e.task_id AND a.tenant_id = e.tenant_id
                                    AND a.attempt = e.attempt AND a.retry_at IS NOT NULL)
                    ELSE false END AS retried
          FROM ev e
          JOIN orch.tasks t ON t.id = e.task_id AND t.tenant_id = e.tenant_id
         WHERE e.entity = 'task'
    ),
    tat AS (
        SELECT a.tenant_id, t.queue, a.finished_at AS at, a.outcome,
               extract(epoch FROM a.finished_at - a.started_at)::float8 AS seconds,
               CASE WHEN t.run_id IS NULL THEN 'task'
                    ELSE orch.task_step_type(t.run_id, t.tenant_id, t.step_key) END AS step_type
          FROM at a JOIN orch.tasks t ON t.id = a.task_id AND t.tenant_id = a.tenant_id
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
          FROM ev e JOIN orch.runs r ON r.id = e.run_id AND r.tenant_id = e.tenant_id
         WHERE e.entity = 'run' AND e.to_state IN ('succeeded', 'failed', 'canceled')
           AND e.from_state IS DISTINCT FROM e.to_state
        UNION ALL
        -- orch_maintain passes (a pass's own record is folded by the next)
        SELECT l.started_at, '', '', 'maintenance_runs', '', '', 1
          FROM orch.maintenance_log l
         WHERE l.xact >= st.snap_xmin
           AND (l.xact >= st.snap_xmax OR l.xact = ANY (st.snap_xip))
           AND l.xact IS DISTINCT FROM (SELECT own FROM cur)
    ),
    -- summed per minute once; the totals add up the minutes
    agg AS (
        SELECT date_trunc('minute', at) AS minute, tenant_id, queue, metric, l1, l2, sum(value)::bigint AS value
          FROM d GROUP BY 1, 2, 3, 4, 5, 6
    ),
    per_minute AS (
        INSERT INTO orch.metric_minutes AS m (minute, tenant_id, queue, metric, l1, l2, value)
        SELECT minute, tenant_id, queue, metric, l1, l2, value FROM agg
        ON CONFLICT (minute, tenant_id, queue, metric, l1, l2)
        DO UPDATE SET value = m.value + excluded.value
        RETURNING 1
    ),
    totals AS (
        INSERT INTO orch.metric_totals AS m (tenant_id, queue, metric, l1, l2, value)
        SELECT tenant_id, queue, metric, l1, l2, sum(value)
          FROM agg GROUP BY 1, 2, 3, 4, 5
        ON CONFLICT (tenant_id, queue, metric, l1, l2)
        DO UPDATE SET value = m.value + excluded.value
        RETURNING 1
    ),
    n AS (
        SELECT (SELECT count(*) FROM ev) + (SELECT count(*) FROM at) AS rows,
               (SELECT count(*) FROM per_minute) + (SELECT count(*) FROM totals) AS written
    )
    UPDATE orch.metric_state m
       SET snap_xmin = CASE WHEN c.own IS NOT NULL THEN least(c.xmin, c.own) ELSE c.xmin END,
           snap_xmax = c.xmax,
           snap_xip = CASE WHEN c.own IS NOT NULL AND c.own < c.xmax THEN c.xip || c.own ELSE c.xip END,
           refreshed_at = now(),
           folded_total = m.folded_total + n.rows
      FROM cur c, n
     WHERE m.id = 1
    RETURNING n.rows INTO folded;

    DELETE FROM orch.metric_minutes WHERE minute < now() - interval '2 days';
    RETURN folded;
END
$fn$;
COMMENT ON FUNCTION orch.metrics_fold() IS
  'Adds the events and attempts committed since the last fold to orch.metric_totals and orch.metric_minutes; returns how many rows it read.';

-- ---------------------------------------------------------------------------
-- No JIT inside the extension's functions.  Their statements are short OLTP
-- statements, but a cached generic plan is costed without knowing its LIMIT
-- or its array sizes: with a backlog of a million tasks the claim's plan
-- costs more than jit_above_cost, and with PostgreSQL's default jit = on
-- every claim compiled its expressions with LLVM (60 times slower here: 2
-- instead of 116 claims of 100 per second).  Trigger functions inherit the
-- setting of the function whose statement fires them; the per-row helpers
-- (the RLS predicate, the histogram helpers) plan nothing.
-- ---------------------------------------------------------------------------
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
                                     AND d.objid OPERATOR(pg_catalog.=) p.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid AND e.extname OPERATOR(pg_catalog.=) 'orchestrator'
         WHERE p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::regtype
           AND p.oid OPERATOR(pg_catalog.<>) ALL (ARRAY['orch.tenant_visible(text)'::regprocedure,
                             'orch.caller_is_admin()'::regprocedure,
                             'orch.histogram_le(double precision)'::regprocedure,
                             'orch.histogram_quantile(double precision, text[], bigint[])'::regprocedure,
                             'orch.task_step_type(bigint, text, text)'::regprocedure])
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) c WHERE c OPERATOR(pg_catalog.~~) 'jit=%')
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET jit = off', f);
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------
-- The lifecycle trigger fires once per task row written.  Its SET
-- search_path cost a GUC save and restore per row (about 7% of a batch
-- enqueue); the C code now pins search_path itself around every path that
-- runs SQL (user tables, keyed tasks' gate, the event insert of old
-- schemas); a plain task row runs none.  It stays SECURITY DEFINER (events
-- of user tables are written as the owner).
-- ---------------------------------------------------------------------------
ALTER FUNCTION orch_state_machine_trigger() RESET search_path;

-- ---------------------------------------------------------------------------
-- Queue settings are cached per backend (every enqueue, claim and fail read
-- orch.queues and parsed its settings JSON).  This trigger makes every
-- write to orch.queues drop the caches of all backends when it commits (a
-- relcache invalidation of the table, PostgreSQL's own mechanism).
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_queues_changed()
RETURNS trigger
LANGUAGE C
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_queues_changed';
COMMENT ON FUNCTION orch_queues_changed() IS
  'AFTER statement trigger on orch.queues: drops every backend''s cached queue settings when the change commits.';
REVOKE ALL ON FUNCTION orch_queues_changed() FROM PUBLIC;
CREATE TRIGGER queues_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON orch.queues
    FOR EACH STATEMENT EXECUTE FUNCTION orch_queues_changed();
-- also for writes applied by logical replication or with
-- session_replication_role = replica
ALTER TABLE orch.queues ENABLE ALWAYS TRIGGER queues_changed;
