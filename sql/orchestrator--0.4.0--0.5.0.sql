/* orchestrator 0.4.0 -> 0.5.0: metrics, Prometheus export, review queue, maintenance log, correlation ids. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.5.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Correlation ids: an optional caller-supplied id on a task or a
-- run, inherited by every step task of the run, shown by orch_history,
-- orch_run_status and the views.
-- ---------------------------------------------------------------------------
ALTER TABLE orch.tasks ADD COLUMN correlation_id text;
ALTER TABLE orch.runs ADD COLUMN correlation_id text;
CREATE INDEX tasks_correlation_idx ON orch.tasks (correlation_id) WHERE correlation_id IS NOT NULL;
CREATE INDEX runs_correlation_idx ON orch.runs (correlation_id) WHERE correlation_id IS NOT NULL;

-- ---------------------------------------------------------------------------
-- Rolling metrics.  Events and attempts are append-only; every row records
-- the top-level transaction that wrote it (xact).  orch.metrics_fold() adds
-- the rows that became visible since its last snapshot to per-minute and
-- all-time counters, so that no scrape reads finished history.  Comparing
-- transaction ids with the last snapshot (not row ids) is what makes this
-- exact: a row whose transaction commits late is counted once, later.
-- Existing rows have no xact: they predate the counters (seeded below).
-- ---------------------------------------------------------------------------
ALTER TABLE orch.events ADD COLUMN xact bigint;
ALTER TABLE orch.events ALTER COLUMN xact SET DEFAULT (pg_catalog.pg_current_xact_id()::text)::bigint;
ALTER TABLE orch.events ADD COLUMN waited interval;
COMMENT ON COLUMN orch.events.xact IS
  'The top-level transaction that wrote the event (for orch.metrics_fold).';
COMMENT ON COLUMN orch.events.waited IS
  'On a claim (to_state executing): how long the task had been claimable.';
ALTER TABLE orch.attempts ADD COLUMN xact bigint;
ALTER TABLE orch.attempts ALTER COLUMN xact SET DEFAULT (pg_catalog.pg_current_xact_id()::text)::bigint;
-- Block-range indexes: nearly free to maintain on append-only tables, and
-- the fold reads only the recent ranges.
CREATE INDEX events_xact_idx ON orch.events USING brin (xact) WITH (autosummarize = on);
CREATE INDEX attempts_xact_idx ON orch.attempts USING brin (xact) WITH (autosummarize = on);

-- A run's own events (run and step transitions) by run, for orch_run_status
-- and retention (task events are found through their tasks); the events of
-- user tables' state machines by time, for retention; finished runs by
-- time, for retention.  Task events are in none of them.
CREATE INDEX events_run_idx ON orch.events (run_id, tenant_id) WHERE task_id IS NULL;
CREATE INDEX events_other_idx ON orch.events (at) WHERE entity OPERATOR(pg_catalog.<>) ALL (ARRAY['task', 'run', 'run_step']);
CREATE INDEX runs_finished_idx ON orch.runs (finished_at) WHERE finished_at IS NOT NULL;

-- Dead letters and failed runs are listed without scanning finished history.
CREATE INDEX tasks_dead_idx ON orch.tasks (queue, finished_at) WHERE state OPERATOR(pg_catalog.=) 'failed';
CREATE INDEX runs_failed_idx ON orch.runs (finished_at) WHERE state OPERATOR(pg_catalog.=) 'failed';

CREATE TABLE orch.metric_state (
    id             integer PRIMARY KEY DEFAULT 1 CHECK (id OPERATOR(pg_catalog.=) 1),
    tenant_id      text NOT NULL DEFAULT 'default',
    snap_xmin      bigint NOT NULL,
    snap_xmax      bigint NOT NULL,
    snap_xip       bigint[] NOT NULL DEFAULT '{}',
    event_floor    bigint NOT NULL DEFAULT 0,
    attempt_floor  bigint NOT NULL DEFAULT 0,
    refreshed_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    folded_total   bigint NOT NULL DEFAULT 0
);
COMMENT ON TABLE orch.metric_state IS
  'Where orch.metrics_fold stopped: the snapshot (xmin, xmax, in-progress ids) of its last pass, and the event/attempt ids below which rows predate the counters.';

CREATE TABLE orch.metric_totals (
    tenant_id  text NOT NULL DEFAULT 'default',
    queue      text NOT NULL,
    metric     text NOT NULL,
    l1         text NOT NULL DEFAULT '',
    l2         text NOT NULL DEFAULT '',
    value      bigint NOT NULL,
    PRIMARY KEY (tenant_id, queue, metric, l1, l2)
);
COMMENT ON TABLE orch.metric_totals IS
  'All-time counters by tenant and queue (queue is the definition name for run metrics): monotonic, the source of the Prometheus counters.';

CREATE TABLE orch.metric_minutes (
    minute     timestamptz NOT NULL,
    tenant_id  text NOT NULL DEFAULT 'default',
    queue      text NOT NULL,
    metric     text NOT NULL,
    l1         text NOT NULL DEFAULT '',
    l2         text NOT NULL DEFAULT '',
    value      bigint NOT NULL,
    PRIMARY KEY (minute, tenant_id, queue, metric, l1, l2)
);
COMMENT ON TABLE orch.metric_minutes IS
  'The same counters per minute of the event time, kept two days: throughput windows and duration percentiles.';

CREATE SEQUENCE orch.maintenance_log_id_seq;
CREATE TABLE orch.maintenance_log (
    id           bigint PRIMARY KEY DEFAULT pg_catalog.nextval('orch.maintenance_log_id_seq'),
    tenant_id    text NOT NULL DEFAULT 'default',
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    actor        text NOT NULL,
    actions      jsonb NOT NULL,
    xact         bigint DEFAULT (pg_catalog.pg_current_xact_id()::text)::bigint
);
CREATE INDEX maintenance_log_started_idx ON orch.maintenance_log (started_at);
COMMENT ON TABLE orch.maintenance_log IS
  'One row per orch_maintain() pass with what it did; kept seven days.';

REVOKE ALL ON orch.metric_state, orch.metric_totals, orch.metric_minutes, orch.maintenance_log FROM PUBLIC;
REVOKE ALL ON SEQUENCE orch.maintenance_log_id_seq FROM PUBLIC;

-- Seed: tasks that exist now count as enqueued and (when finished) as
-- finished; rows written from now on are folded (rows already present have
-- no xact and are never folded).  The fold creates its state row on first
-- use, so that a fresh CREATE EXTENSION (empty tables) followed by a
-- restore loads the dumped state row without a conflict.
INSERT INTO orch.metric_totals (tenant_id, queue, metric, l1, value)
SELECT tenant_id, queue, 'finished', state, pg_catalog.count(*)
  FROM orch.tasks WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['completed', 'failed', 'cancelled'])
 GROUP BY tenant_id, queue, state;
INSERT INTO orch.metric_totals (tenant_id, queue, metric, value)
SELECT tenant_id, queue, 'enqueued', pg_catalog.count(*) FROM orch.tasks GROUP BY tenant_id, queue;

SELECT pg_catalog.pg_extension_config_dump('orch.metric_state', '');
SELECT pg_catalog.pg_extension_config_dump('orch.metric_totals', '');
SELECT pg_catalog.pg_extension_config_dump('orch.metric_minutes', '');
SELECT pg_catalog.pg_extension_config_dump('orch.maintenance_log', '');
SELECT pg_catalog.pg_extension_config_dump('orch.maintenance_log_id_seq', '');

-- Histogram buckets (seconds; the last is +Inf), as Prometheus renders them.
CREATE FUNCTION orch.histogram_le(seconds double precision)
RETURNS text
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_histogram_le';
COMMENT ON FUNCTION orch.histogram_le(double precision) IS
  'The histogram bucket (its upper bound as text, "+Inf" for the last) a duration in seconds falls in.';

CREATE FUNCTION orch.histogram_quantile(q double precision, les text[], counts bigint[])
RETURNS double precision
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_histogram_quantile';
COMMENT ON FUNCTION orch.histogram_quantile(double precision, text[], bigint[]) IS
  'The q-quantile of a histogram given as bucket upper bounds and counts, interpolated linearly within its bucket (as PromQL histogram_quantile).';

-- The step type a task's metrics are labelled with.
CREATE FUNCTION orch.task_step_type(run_id bigint, tenant text, step_key text)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
    SELECT CASE
        WHEN $1 IS NULL THEN 'task'
        WHEN $3 LIKE '%:compensate' THEN 'compensation'
        ELSE coalesce((SELECT s.type FROM orch.run_steps s
                        WHERE s.run_id = $1 AND s.tenant_id = $2
                          AND s.step_id = split_part($3, '#', 1)), 'task')
    END
$fn$;

-- The fold reads the recent part of events and attempts only, through
-- their block-range indexes (xact >= the last snapshot's xmin).  The
-- planner cannot cost a BRIN scan well (without correlation statistics, as
-- after an upgrade, when old rows have no xact, it assumes every range
-- matches), so sequential scans are ruled out for the fold; its other
-- reads are primary-key lookups.  Custom plans: the range is planned with
-- its value.  No parallel workers and no JIT: the scans are short (and the
-- cost of a ruled-out scan would look worth compiling).
CREATE FUNCTION orch.metrics_fold()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
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
               orch.task_step_type(t.run_id, t.tenant_id, t.step_key) AS step_type,
               a.error_class, a.retry_at IS NOT NULL AS retried
          FROM ev e
          JOIN orch.tasks t ON t.id = e.task_id AND t.tenant_id = e.tenant_id
          LEFT JOIN orch.attempts a ON a.task_id = e.task_id AND a.tenant_id = e.tenant_id
                                   AND a.attempt = e.attempt AND e.from_state = 'executing'
         WHERE e.entity = 'task'
    ),
    tat AS (
        SELECT a.tenant_id, t.queue, a.finished_at AS at, a.outcome,
               extract(epoch FROM a.finished_at - a.started_at)::float8 AS seconds,
               orch.task_step_type(t.run_id, t.tenant_id, t.step_key) AS step_type
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
    per_minute AS (
        INSERT INTO orch.metric_minutes AS m (minute, tenant_id, queue, metric, l1, l2, value)
        SELECT date_trunc('minute', at), tenant_id, queue, metric, l1, l2, sum(value)
          FROM d GROUP BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (minute, tenant_id, queue, metric, l1, l2)
        DO UPDATE SET value = m.value + excluded.value
        RETURNING 1
    ),
    totals AS (
        INSERT INTO orch.metric_totals AS m (tenant_id, queue, metric, l1, l2, value)
        SELECT tenant_id, queue, metric, l1, l2, sum(value)
          FROM d GROUP BY 1, 2, 3, 4, 5
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

CREATE FUNCTION orch_metrics_refresh()
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_metrics_refresh';
COMMENT ON FUNCTION orch_metrics_refresh() IS
  'Brings the rolling counters up to date now (orch_maintain does it on every pass); returns the number of events and attempts folded in, 0 when another session is folding. It folds every tenant''s rows: 42501 for a role bound to tenants.';

-- ---------------------------------------------------------------------------
-- Live figures.  Every branch matches a partial index of open work, so their
-- cost follows the open work, never the finished history.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch.open_tasks()
RETURNS TABLE (tenant_id text, queue text, received bigint, queued bigint, executing bigint,
               awaiting_tool bigint, awaiting_user_confirmation bigint, ready bigint,
               delayed bigint, retry_waiting bigint, gated bigint, oldest_ready timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
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
     WHERE orch.tenant_visible(o.tenant_id)
     GROUP BY o.tenant_id, o.queue
$fn$;

CREATE FUNCTION orch.dead_letter_counts()
RETURNS TABLE (tenant_id text, queue text, dead_letters bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
    -- a workflow step's task that failed is the run's failure (run_failed
    -- in the review queue), not a dead letter of its own
    SELECT t.tenant_id, t.queue, count(*)
      FROM orch.tasks t
     WHERE t.state = 'failed' AND t.run_id IS NULL
       AND t.reason_code IN ('max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                             'compensation_required', 'not_safe_to_retry')
       AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of = t.id AND r.tenant_id = t.tenant_id)
       AND orch.tenant_visible(t.tenant_id)
     GROUP BY t.tenant_id, t.queue
$fn$;

CREATE VIEW orch_queue_stats WITH (security_barrier) AS
WITH live AS (SELECT * FROM orch.open_tasks()),
     dead AS (SELECT * FROM orch.dead_letter_counts()),
     tot AS (
        SELECT m.tenant_id, m.queue,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'enqueued') AS enqueued,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'started') AS started,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'completed') AS completed,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'failed') AS failed,
               pg_catalog.sum(m.value) FILTER (WHERE m.metric OPERATOR(pg_catalog.=) 'finished' AND m.l1 OPERATOR(pg_catalog.=) 'cancelled') AS cancelled
          FROM orch.metric_totals m
         WHERE m.metric OPERATOR(pg_catalog.=) ANY (ARRAY['enqueued', 'started', 'finished']) AND orch.tenant_visible(m.tenant_id)
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
           AND orch.tenant_visible(m.tenant_id)
         GROUP BY m.tenant_id, m.queue),
     k AS (
        SELECT tenant_id, queue FROM live
        UNION SELECT tenant_id, queue FROM dead
        UNION SELECT tenant_id, queue FROM tot
        UNION SELECT q.tenant_id, q.name FROM orch.queues q WHERE orch.tenant_visible(q.tenant_id))
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
COMMENT ON VIEW orch_queue_stats IS
  'Per queue and tenant: open tasks by state and readiness (live), dead letters (live), totals and recent throughput (rolling counters, as of metrics_as_of).';

CREATE VIEW orch_error_stats WITH (security_barrier) AS
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
 WHERE m.metric OPERATOR(pg_catalog.=) ANY (ARRAY['retry', 'failed']) AND orch.tenant_visible(m.tenant_id)
 GROUP BY m.tenant_id, m.queue, m.l1, m.l2;
COMMENT ON VIEW orch_error_stats IS
  'Retries and final failures by queue, error class and reason code: all-time and the last hour (rolling counters).';

CREATE FUNCTION orch_duration_stats(since interval DEFAULT '1 hour')
RETURNS TABLE (tenant_id text, queue text, step_type text, kind text, samples bigint,
               mean_seconds double precision, p50_seconds double precision,
               p95_seconds double precision, p99_seconds double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
#variable_conflict use_column
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
           AND orch.tenant_visible(m.tenant_id)
         GROUP BY 1, 2, 3, 4, 5),
    s AS (
        SELECT m.tenant_id, m.queue, m.l1 AS step_type,
               CASE m.metric WHEN 'attempt_seconds_sum' THEN 'attempt' ELSE 'queue_wait' END AS kind,
               sum(m.value) / 1e6 AS seconds
          FROM orch.metric_minutes m
         WHERE m.minute > now() - since AND m.metric IN ('attempt_seconds_sum', 'wait_seconds_sum')
           AND orch.tenant_visible(m.tenant_id)
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
COMMENT ON FUNCTION orch_duration_stats(interval) IS
  'Attempt duration and queue wait (count, mean, p50/p95/p99 in seconds) by queue and step type over the last "since" (at most two days), from the per-minute histograms.';

CREATE VIEW orch_durations AS
SELECT * FROM orch_duration_stats(interval '1 hour');
COMMENT ON VIEW orch_durations IS
  'orch_duration_stats over the last hour.';

-- ---------------------------------------------------------------------------
-- The manual review queue: everything waiting for a person, with the call
-- that acts on it.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch.review_items()
RETURNS TABLE (kind text, tenant_id text, queue text, task_id bigint, run_id bigint, step_id text,
               state text, reason_code text, error text, since timestamptz, action text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
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
           s.tenant_id, r.definition, s.task_id, s.run_id, s.step_id, s.state, NULL, NULL,
           coalesce(s.started_at, r.updated_at),
           format('SELECT orch_approve(%s, %L, <approval_ref>) or orch_reject(...)', s.run_id, s.step_id)
      FROM orch.runs r
      JOIN orch.run_steps s ON s.run_id = r.id AND s.tenant_id = r.tenant_id
     WHERE r.state IN ('running', 'waiting_approval', 'paused')
       AND (s.state = 'awaiting_approval' OR s.comp_state = 'awaiting_approval')
    UNION ALL
    SELECT 'awaiting_confirmation', t.tenant_id, t.queue, t.id, t.run_id, NULL, t.state,
           t.reason_code, t.last_error, t.updated_at,
           format('SELECT orch_confirm(%s, true) or orch_confirm(%s, false)', t.id, t.id)
      FROM orch.tasks t
     WHERE t.state = 'awaiting_user_confirmation' AND t.ready_at IS NULL
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
 WHERE orch.tenant_visible(q.tenant_id)
$fn$;

CREATE VIEW orch_review_queue AS
SELECT * FROM orch.review_items();
COMMENT ON VIEW orch_review_queue IS
  'Everything that needs a person: dead letters, failed runs, failed or approval-gated compensation, approvals, confirmations, stuck tasks, leases overdue for recovery; with the call that applies.';

CREATE VIEW orch_maintenance_log AS
SELECT id, started_at, finished_at, finished_at OPERATOR(pg_catalog.-) started_at AS duration, actor, actions
  FROM orch.maintenance_log;
COMMENT ON VIEW orch_maintenance_log IS 'One row per orch_maintain() pass: when, how long, by whom, and what it did.';

CREATE FUNCTION orch_metrics_prometheus()
RETURNS text
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_metrics_prometheus';
COMMENT ON FUNCTION orch_metrics_prometheus() IS
  'All metrics in the Prometheus text exposition format (0.0.4): counters as of the last fold, gauges live; a bound role sees its tenants.';

-- ---------------------------------------------------------------------------
-- Correlation ids in the API.
-- ---------------------------------------------------------------------------
DROP FUNCTION orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text);
CREATE FUNCTION orch_enqueue(queue text, payload jsonb,
                             priority integer DEFAULT NULL,
                             idempotency_key text DEFAULT NULL,
                             run_at timestamptz DEFAULT NULL,
                             tenant text DEFAULT NULL,
                             owner text DEFAULT NULL,
                             concurrency_key text DEFAULT NULL,
                             max_attempts integer DEFAULT NULL,
                             max_failures integer DEFAULT NULL,
                             retry_policy jsonb DEFAULT NULL,
                             timeout interval DEFAULT NULL,
                             on_rate_limit text DEFAULT NULL,
                             correlation_id text DEFAULT NULL)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_enqueue';
COMMENT ON FUNCTION orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text, text) IS
  'Enqueues one task and returns its id; the same idempotency key and payload return the same id, another payload raises OR004; over the rate limit: a failed task (rate_limited) or OR006.';

DROP FUNCTION orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text);
CREATE FUNCTION orch_enqueue_batch(queue text, payloads jsonb[],
                                   priority integer DEFAULT NULL,
                                   idempotency_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL,
                                   tenant text DEFAULT NULL,
                                   owner text DEFAULT NULL,
                                   concurrency_key text DEFAULT NULL,
                                   max_attempts integer DEFAULT NULL,
                                   max_failures integer DEFAULT NULL,
                                   retry_policy jsonb DEFAULT NULL,
                                   timeout interval DEFAULT NULL,
                                   on_rate_limit text DEFAULT NULL,
                                   correlation_id text DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_enqueue_batch';
COMMENT ON FUNCTION orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text, text) IS
  'Enqueues many tasks in one call; returns their ids in the order of payloads.';

DROP FUNCTION orch_start(text, jsonb, integer, text, text, jsonb);
CREATE FUNCTION orch_start(name text, input jsonb, version integer DEFAULT NULL,
                           idempotency_key text DEFAULT NULL, tenant text DEFAULT NULL,
                           pins jsonb DEFAULT NULL, correlation_id text DEFAULT NULL)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_start';
COMMENT ON FUNCTION orch_start(text, jsonb, integer, text, text, jsonb, text) IS
  'Starts a run of a published workflow version (default: the latest) and returns its id; the same idempotency key and request return the same run, another request raises OR004.';

DROP FUNCTION orch_history(bigint);
CREATE FUNCTION orch_history(task_id bigint)
RETURNS TABLE (at timestamptz, kind text, attempt integer, from_state text, to_state text,
               reason_code text, actor text, lease_token uuid, outcome text,
               error_class text, error text, note text, label text, correlation_id text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
DECLARE
    admin boolean := orch.caller_is_admin();
    corr text;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'task_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id OPERATOR(pg_catalog.=) $1
                      AND orch.tenant_visible(t.tenant_id))
       AND NOT EXISTS (SELECT 1 FROM orch.events e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                          AND orch.tenant_visible(e.tenant_id)) THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
    SELECT t.correlation_id INTO corr FROM orch.tasks t
     WHERE t.id OPERATOR(pg_catalog.=) $1 AND orch.tenant_visible(t.tenant_id);
    RETURN QUERY
        SELECT h.at, h.kind, h.attempt, h.from_state, h.to_state, h.reason_code, h.actor,
               CASE WHEN admin THEN h.lease_token END, h.outcome, h.error_class, h.error, h.note,
               h.label, corr
          FROM (SELECT e.at, 'event'::text AS kind, e.attempt, e.from_state, e.to_state,
                       e.reason_code, e.actor, e.lease_token, NULL::text AS outcome,
                       NULL::text AS error_class, NULL::text AS error, e.note, e.label,
                       e.id AS seq, 1 AS src
                  FROM orch.events e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                   AND orch.tenant_visible(e.tenant_id)
                UNION ALL
                SELECT a.finished_at, 'attempt', a.attempt, NULL, NULL, NULL, NULL,
                       a.lease_token, a.outcome, a.error_class, a.error, NULL, a.worker,
                       a.id, 0
                  FROM orch.attempts a WHERE a.task_id OPERATOR(pg_catalog.=) $1
                   AND orch.tenant_visible(a.tenant_id)) h
         ORDER BY h.at, h.src, h.seq;
END
$fn$;
COMMENT ON FUNCTION orch_history(bigint) IS
  'A task''s attempts and events in order, each with the task''s correlation id (lease tokens for orch_admin only); OR005 for an unknown id or another tenant''s task.';

-- Views gain the correlation id (appended: dependent views and grants stay).
CREATE OR REPLACE VIEW orch_tasks WITH (security_barrier) AS
SELECT id AS task_id, tenant_id, queue, state, priority, payload, result, run_at,
       retry_at, attempts, failures, max_attempts, max_failures, reason_code,
       last_error, last_error_class, lease_owner, lease_expires_at, claimed_at,
       wait_data, resume_data, idempotency_key, owner, concurrency_key, run_id,
       step_key, created_at, updated_at, finished_at, retry_of, gated, correlation_id
  FROM orch.tasks
 WHERE (SELECT orch_caller_tenants()) IS NULL OR tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);

CREATE OR REPLACE VIEW orch_events WITH (security_barrier) AS
SELECT e.id AS event_id, e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state,
       e.reason_code, e.actor, e.attempt,
       CASE WHEN (SELECT orch.caller_is_admin()) THEN e.lease_token END AS lease_token,
       e.note, e.at, e.label,
       coalesce((SELECT t.correlation_id FROM orch.tasks t
                  WHERE t.id OPERATOR(pg_catalog.=) e.task_id AND t.tenant_id OPERATOR(pg_catalog.=) e.tenant_id),
                (SELECT r.correlation_id FROM orch.runs r
                  WHERE r.id OPERATOR(pg_catalog.=) e.run_id AND r.tenant_id OPERATOR(pg_catalog.=) e.tenant_id)) AS correlation_id,
       e.waited
  FROM orch.events e
 WHERE (SELECT orch_caller_tenants()) IS NULL OR e.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);

CREATE OR REPLACE VIEW orch_attempts WITH (security_barrier) AS
SELECT a.id AS attempt_id, a.tenant_id, a.task_id, a.attempt, a.worker,
       CASE WHEN (SELECT orch.caller_is_admin()) THEN a.lease_token END AS lease_token,
       a.started_at, a.finished_at, a.outcome, a.error_class, a.error, a.retry_at,
       (SELECT t.correlation_id FROM orch.tasks t
         WHERE t.id OPERATOR(pg_catalog.=) a.task_id AND t.tenant_id OPERATOR(pg_catalog.=) a.tenant_id) AS correlation_id
  FROM orch.attempts a
 WHERE (SELECT orch_caller_tenants()) IS NULL OR a.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);

CREATE OR REPLACE VIEW orch_runs WITH (security_barrier) AS
SELECT r.id AS run_id, r.tenant_id, r.definition, r.version, r.content_hash, r.state, r.phase,
       r.input, r.output, r.pins, r.idempotency_key, r.reason_code, r.failed_step, r.error,
       r.deadline_at, r.retry_of, r.created_by, r.created_at, r.updated_at, r.finished_at,
       r.correlation_id
  FROM orch.runs r
 WHERE (SELECT orch_caller_tenants()) IS NULL OR r.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);

-- ---------------------------------------------------------------------------
-- Privileges.
-- ---------------------------------------------------------------------------
REVOKE ALL ON FUNCTION orch.histogram_le(double precision),
    orch.histogram_quantile(double precision, text[], bigint[]),
    orch.task_step_type(bigint, text, text), orch.metrics_fold(), orch.open_tasks(),
    orch.dead_letter_counts(), orch.review_items(), orch_metrics_refresh(), orch_duration_stats(interval),
    orch_metrics_prometheus(),
    orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text, text),
    orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text, text),
    orch_start(text, jsonb, integer, text, text, jsonb, text), orch_history(bigint)
  FROM PUBLIC;
REVOKE ALL ON orch_queue_stats, orch_error_stats, orch_durations, orch_review_queue,
    orch_maintenance_log FROM PUBLIC;
GRANT SELECT ON orch_queue_stats, orch_error_stats, orch_durations, orch_review_queue,
    orch_maintenance_log TO orch_reader;
-- The views call these (EXECUTE is checked against the caller, not the
-- view's owner); they filter by the caller's tenants themselves.
GRANT EXECUTE ON FUNCTION orch_metrics_refresh(), orch_duration_stats(interval),
    orch_metrics_prometheus(), orch_history(bigint), orch.open_tasks(),
    orch.dead_letter_counts(), orch.review_items() TO orch_reader;
GRANT EXECUTE ON FUNCTION
    orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text, text),
    orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text, text),
    orch_start(text, jsonb, integer, text, text, jsonb, text)
  TO orch_producer;
