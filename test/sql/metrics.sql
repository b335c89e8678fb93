-- metrics (0.5.0): rolling counters folded from events and attempts
-- (orch.metrics_fold / orch_metrics_refresh), orch_queue_stats,
-- orch_error_stats, orch_durations, orch_review_queue, the Prometheus text,
-- the histogram helpers, the maintenance log, correlation ids, tenant
-- isolation and privileges of the new views.
--
-- The numbers are exact, so the test runs in a database of its own: the
-- other tests of the suite leave tasks and events in theirs.
\set VERBOSITY terse
\set suite_db :DBNAME
SET client_min_messages = warning;
DROP DATABASE IF EXISTS orch_metrics_test;
CREATE DATABASE orch_metrics_test;
\c orch_metrics_test
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- Every claim is recorded under a tag; lease tokens never reach the output.
CREATE TEMP TABLE claims (tag text PRIMARY KEY, task_id bigint, tok uuid);
-- claim(tag, queue, tenant): claims one task; its id (NULL: nothing claimable).
CREATE FUNCTION pg_temp.claim(p_tag text, p_q text, p_tenant text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT d.task_id, d.lease_token INTO c FROM orch_dequeue(p_q, 'm-worker', 1, NULL, p_tenant) d;
    IF c.task_id IS NULL THEN RETURN NULL; END IF;
    INSERT INTO claims VALUES (p_tag, c.task_id, c.lease_token)
    ON CONFLICT (tag) DO UPDATE SET task_id = excluded.task_id, tok = excluded.tok;
    RETURN c.task_id;
END $$;
CREATE FUNCTION pg_temp.done(p_tag text) RETURNS text LANGUAGE sql AS
    $$ SELECT orch_complete(task_id, tok, '{"ok": true}') FROM claims WHERE tag = p_tag $$;
CREATE FUNCTION pg_temp.fail(p_tag text, p_class text) RETURNS text LANGUAGE sql AS
    $$ SELECT f.state || '/' || f.reason_code
         FROM claims c, orch_fail(c.task_id, c.tok, p_class, 'error: ' || p_class) f
        WHERE c.tag = p_tag $$;
-- prom(regexp): the lines of the Prometheus text that match, in order.
CREATE FUNCTION pg_temp.prom(p_re text) RETURNS SETOF text LANGUAGE sql AS
    $$ SELECT l FROM regexp_split_to_table(orch_metrics_prometheus(), E'\n') WITH ORDINALITY AS x(l, n)
        WHERE l ~ p_re ORDER BY n $$;
GRANT EXECUTE ON FUNCTION pg_temp.prom(text) TO PUBLIC;

-- ---------------------------------------------------------------------------
-- 1. A scripted history with known counts.  Queue m_a: two attempts, fixed
--    backoff of 0 s (a TRANSIENT failure is claimable again at once), a
--    lease of an hour (a7 stays executing, however slow the machine).
--    Tenant default, in order:
--      a1, a2   claimed, completed
--      a3       claimed, failed TRANSIENT (retry), claimed again, completed
--      a4       claimed, failed NON_RETRYABLE           -> dead letter
--      a5       cancelled while queued
--      a6       max_attempts 1, claimed, lease expired, recovered by
--               orch_maintain as TRANSIENT/lease_expired -> dead letter
--               (max_attempts_exhausted)
--      a7       claimed, still executing
--      a8       queued, ready
--      a9       queued for tomorrow (delayed)
--    Tenant t2 (same queue name): b1 claimed and completed, b2 queued.
--    Queue m_rl (rate limit 1 per hour per owner, excess recorded): r1
--    queued, r2 inserted as failed/rate_limited (no attempt, no error class).
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('m_a', '{"max_attempts": 2, "backoff": "fixed", "initial_delay": "0s", "lease": "1 hour"}') ->> 'max_attempts' AS max_attempts;
SELECT orch_enqueue('m_a', '{"n": "a1"}') AS a1 \gset
SELECT pg_temp.claim('a1', 'm_a', 'default') = :a1 AS claimed, pg_temp.done('a1');
SELECT orch_enqueue('m_a', '{"n": "a2"}') AS a2 \gset
SELECT pg_temp.claim('a2', 'm_a', 'default') = :a2 AS claimed, pg_temp.done('a2');
SELECT orch_enqueue('m_a', '{"n": "a3"}') AS a3 \gset
SELECT pg_temp.claim('a3', 'm_a', 'default') = :a3 AS claimed, pg_temp.fail('a3', 'TRANSIENT');
SELECT pg_temp.claim('a3', 'm_a', 'default') = :a3 AS claimed_again, pg_temp.done('a3');
SELECT orch_enqueue('m_a', '{"n": "a4"}') AS a4 \gset
SELECT pg_temp.claim('a4', 'm_a', 'default') = :a4 AS claimed, pg_temp.fail('a4', 'NON_RETRYABLE');
SELECT orch_enqueue('m_a', '{"n": "a5"}') AS a5 \gset
SELECT orch_cancel(:a5, 'not needed');
SELECT orch_enqueue('m_a', '{"n": "a6"}', max_attempts => 1) AS a6 \gset
SELECT pg_temp.claim('a6', 'm_a', 'default') = :a6 AS claimed;
-- the lease ran out a minute ago (an executing -> executing update is allowed)
UPDATE orch.tasks SET lease_expires_at = now() - interval '1 minute' WHERE id = :a6;
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';
SELECT state, reason_code, last_error_class FROM orch_tasks WHERE task_id = :a6;
SELECT orch_enqueue('m_a', '{"n": "a7"}') AS a7 \gset
SELECT pg_temp.claim('a7', 'm_a', 'default') = :a7 AS claimed;
SELECT orch_enqueue('m_a', '{"n": "a8"}') AS a8 \gset
SELECT orch_enqueue('m_a', '{"n": "a9"}', run_at => now() + interval '1 day') AS a9 \gset
SELECT orch_enqueue('m_a', '{"n": "b1"}', tenant => 't2') AS b1 \gset
SELECT pg_temp.claim('b1', 'm_a', 't2') = :b1 AS claimed, pg_temp.done('b1');
SELECT orch_enqueue('m_a', '{"n": "b2"}', tenant => 't2') AS b2 \gset
SELECT orch_create_queue('m_rl', '{"rate_limit": {"count": 1, "per": "1 hour", "on_exceed": "record"}}') IS NOT NULL AS created;
SELECT orch_enqueue('m_rl', '{"n": "r1"}', owner => 'o1') AS r1 \gset
SELECT orch_enqueue('m_rl', '{"n": "r2"}', owner => 'o1') AS r2 \gset
SELECT t.task_id, t.tenant_id, t.queue, t.payload ->> 'n' AS n, t.state, t.reason_code, t.attempts, t.failures
  FROM orch_tasks t ORDER BY t.task_id;
-- Fold.  orch_maintain above folded the first 23 rows (events + attempts:
-- a1, a2: enqueue, claim, complete + attempt = 4 each; a3: 7; a4: 4; a5: 2;
-- a6: 2); this picks up the rest: a6's recovery (event + attempt; written
-- after maintain's own fold, in its transaction), a7 (2), a8, a9 (1 each),
-- b1 (4), b2 (1), r1, r2 (1 each) = 13.
SELECT orch_metrics_refresh() AS folded;
SELECT (SELECT count(*) FROM orch.history) + (SELECT count(*) FROM orch.attempt_history) AS rows_written,
       folded_total FROM orch.metric_state;
-- Live: default/m_a has a8 and a9 queued (a8 ready, a9 delayed), a7
-- executing, a4 and a6 dead letters.  Totals: 9 enqueued; 7 claims (a1, a2,
-- a3 twice, a4, a6, a7); completed a1-a3, failed a4 and a6, cancelled a5;
-- one lease expiry.  t2/m_a: 2 enqueued, 1 claim, 1 completed, b2 ready.
-- m_rl: 2 enqueued, r2 failed, r1 ready; not a dead letter (rate_limited).
-- The *_5m and *_1h windows hold everything (the test takes seconds); the
-- *_1m windows are the current minute only, so they are bounded, not exact.
SELECT tenant_id, queue, received, queued, executing, awaiting_tool, awaiting_user_confirmation,
       ready, delayed, retry_waiting, gated, dead_letters
  FROM orch_queue_stats ORDER BY tenant_id, queue;
SELECT tenant_id, queue, enqueued_total, started_total, completed_total, failed_total,
       cancelled_total, lease_expiries_1h, completed_5m, failed_5m, completed_1h, failed_1h
  FROM orch_queue_stats ORDER BY tenant_id, queue;
SELECT tenant_id, queue,
       (oldest_ready_age >= interval '0') AS oldest_ready_age_set,
       enqueued_1m BETWEEN 0 AND enqueued_total AS enqueued_1m_ok,
       completed_1m BETWEEN 0 AND completed_total AS completed_1m_ok,
       failed_1m BETWEEN 0 AND failed_total AS failed_1m_ok,
       metrics_as_of = (SELECT refreshed_at FROM orch.metric_state) AS as_of_last_fold
  FROM orch_queue_stats ORDER BY tenant_id, queue;
-- Retries and final failures by class and reason: a3's TRANSIENT retry,
-- a4 NON_RETRYABLE, a6's lease expiry (TRANSIENT, budget exhausted), r2
-- (no attempt: no error class).
SELECT * FROM orch_error_stats ORDER BY tenant_id, queue, error_class NULLS FIRST, reason_code;
-- The review queue: the two dead letters with the call that re-drives them.
SELECT kind, tenant_id, queue, task_id, run_id, step_id, state, reason_code, error,
       since IS NOT NULL AS since_set, action
  FROM orch_review_queue ORDER BY kind, task_id;
-- Prometheus: counters from the folded totals, gauges live.  Attempts
-- finished: completed 3 (a1, a2, a3's second), failed 2 (a3's first, a4),
-- lease_expired 1 (a6); t2: completed 1 (b1).
SELECT * FROM pg_temp.prom('^orch_tasks_enqueued_total');
SELECT * FROM pg_temp.prom('^orch_executions_(started|finished)_total');
SELECT * FROM pg_temp.prom('^orch_tasks_finished_total');
SELECT * FROM pg_temp.prom('^orch_(retries|failures|lease_expiries)_total');
SELECT * FROM pg_temp.prom('^orch_tasks(_ready|_delayed|_retry_waiting)?\{tenant="default",queue="m_a"');
SELECT * FROM pg_temp.prom('^orch_(dead_letters|review_items)\{');
SELECT * FROM pg_temp.prom('^orch_maintenance_runs_total');
-- every family has its HELP and TYPE; each histogram has 19 buckets per series
SELECT count(*) FILTER (WHERE l ~ '^# HELP ') AS help_lines, count(*) FILTER (WHERE l ~ '^# TYPE ') AS type_lines,
       count(*) FILTER (WHERE l ~ '^# TYPE \S+ counter$') AS counters,
       count(*) FILTER (WHERE l ~ '^# TYPE \S+ gauge$') AS gauges,
       count(*) FILTER (WHERE l ~ '^# TYPE \S+ histogram$') AS histograms
  FROM pg_temp.prom('^#') l;
SELECT substring(l from '^(\w+)\{') AS series, count(*)
  FROM pg_temp.prom('^orch_\w+_seconds_bucket\{tenant="default",queue="m_a"') l GROUP BY 1 ORDER BY 1;
-- wait and attempt histograms count every claim / every finished attempt
SELECT * FROM pg_temp.prom('^orch_(attempt_duration|queue_wait)_seconds_count\{');
SELECT * FROM pg_temp.prom('^orch_(attempt_duration|queue_wait)_seconds_bucket\{.*le="\+Inf"');

-- ---------------------------------------------------------------------------
-- 2. Known durations.  Queue m_d: 100 tasks claimed and completed in one
--    statement.  Before the fold, as superuser, the attempts are rewritten to
--    last 1, 2, ..., 100 seconds (task i: i seconds) and the claims' queue
--    waits to 0 s (i <= 50), 10 s (51..90) and 3601 s (91..100: past the
--    last bound, the +Inf bucket).  An UPDATE keeps a row's xact, so the
--    fold counts each rewritten row once, with its rewritten values.
--    Attempt buckets (le, count): 1:1 (1 s), 2.5:1 (2), 5:3 (3-5), 10:5
--    (6-10), 30:20, 60:30, 120:40 (61-100); cumulative 1, 2, 5, 10, 30, 60,
--    100.  Linear interpolation in the bucket holding rank q*100:
--      p50: rank 50 in (30, 60] (30 below, 30 in it): 30 + 30 * 20/30 = 50
--      p95: rank 95 in (60, 120] (60 below, 40 in it): 60 + 60 * 35/40 = 112.5
--      p99: rank 99 in (60, 120]:                      60 + 60 * 39/40 = 118.5
--    mean 5050 / 100 = 50.5.
--    Wait buckets: 0.005: 50, 10: 40, +Inf: 10.
--      p50: rank 50 in (0, 0.005] (50 in it): 0 + 0.005 * 50/50 = 0.005
--      p95, p99: in +Inf: the largest finite bound, 3600
--    mean (40 * 10 + 10 * 3601) / 100 = 36410 / 100 = 364.1.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('m_d') IS NOT NULL AS created;
SELECT count(*) AS enqueued
  FROM orch_enqueue_batch('m_d', (SELECT array_agg(jsonb_build_object('i', g) ORDER BY g)
                                    FROM generate_series(1, 100) g));
CREATE TEMP TABLE m_d_claims AS SELECT * FROM orch_dequeue('m_d', 'm-worker', 100);
-- a claim's wait is recorded by its task row (orch.history): rewritten while
-- the tasks execute (a finished task cannot change)
UPDATE orch.tasks t
   SET claim_waited = CASE WHEN (t.payload ->> 'i')::int <= 50 THEN 0
                           WHEN (t.payload ->> 'i')::int <= 90 THEN 10000000
                           ELSE 3601000000 END
 WHERE t.queue = 'm_d';
SELECT orch_complete_batch(array_agg(task_id), array_agg(lease_token)) AS completed FROM m_d_claims;
CREATE TEMP TABLE d_rows AS
SELECT 'attempt' AS kind, a.id, a.xact FROM orch.attempt_history a JOIN orch.tasks t ON t.id = a.task_id WHERE t.queue = 'm_d'
UNION ALL
SELECT 'event', e.id, e.xact FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id WHERE t.queue = 'm_d';
-- the completed attempts are recorded by the (finished, unchangeable) task
-- rows: their start rewritten past the trigger
SET session_replication_role = replica;
UPDATE orch.tasks t SET claimed_at = t.finished_at - make_interval(secs => (t.payload ->> 'i')::int)
 WHERE t.queue = 'm_d';
RESET session_replication_role;
-- the rewrite kept every row's xact
SELECT count(*) AS rows, count(*) FILTER (WHERE x.xact IS DISTINCT FROM d.xact) AS xact_changed
  FROM d_rows d
  JOIN (SELECT 'attempt' AS kind, id, xact FROM orch.attempt_history UNION ALL
        SELECT 'event', id, xact FROM orch.history) x USING (kind, id);
-- 100 enqueue events + 100 claim events + 100 completion events + 100 attempts
SELECT orch_metrics_refresh() AS folded;
SELECT queue, step_type, kind, samples, round(mean_seconds::numeric, 3) AS mean,
       round(p50_seconds::numeric, 3) AS p50, round(p95_seconds::numeric, 3) AS p95,
       round(p99_seconds::numeric, 3) AS p99
  FROM orch_durations WHERE queue = 'm_d' ORDER BY kind;
-- the same by hand through orch.histogram_quantile on the bucket counts
SELECT l1 AS step_type, metric, array_agg(l2 ORDER BY l2::float8) AS les, array_agg(value ORDER BY l2::float8) AS counts,
       round(orch.histogram_quantile(0.5, array_agg(l2), array_agg(value))::numeric, 3) AS p50,
       round(orch.histogram_quantile(0.95, array_agg(l2), array_agg(value))::numeric, 3) AS p95
  FROM orch.metric_totals WHERE queue = 'm_d' AND metric IN ('attempt_seconds', 'wait_seconds')
 GROUP BY l1, metric ORDER BY metric;
-- Prometheus: cumulative buckets (every bound present), _sum, _count
SELECT * FROM pg_temp.prom('^orch_attempt_duration_seconds_(bucket|sum|count)\{tenant="default",queue="m_d"');
SELECT * FROM pg_temp.prom('^orch_queue_wait_seconds_(bucket|sum|count)\{tenant="default",queue="m_d"');
SELECT * FROM pg_temp.prom('^orch_(tasks_enqueued|executions_started|tasks_finished)_total\{tenant="default",queue="m_d"');

-- ---------------------------------------------------------------------------
-- 3. Exactly once.  A fold reads only rows committed since its snapshot:
--    again at once it reads nothing and changes nothing; after more work it
--    adds exactly the new rows; counters never go down.  Rows written in the
--    fold's own transaction are left for the next fold.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE totals0 AS SELECT * FROM orch.metric_totals;
SELECT orch_metrics_refresh() AS folded_again;
SELECT count(*) AS changed_rows
  FROM (SELECT * FROM orch.metric_totals EXCEPT SELECT * FROM totals0) x;
-- the per-minute counters add up to the totals (everything is minutes old;
-- maintenance_runs is counted by orch_maintain, not folded).  (How many
-- rows there are depends on the buckets the millisecond waits fell in.)
SELECT count(*) > 0 AS has_totals, count(*) FILTER (WHERE m.s IS DISTINCT FROM t.value) AS minutes_disagree
  FROM orch.metric_totals t
  LEFT JOIN (SELECT tenant_id, queue, metric, l1, l2, sum(value) AS s FROM orch.metric_minutes
              GROUP BY 1, 2, 3, 4, 5) m USING (tenant_id, queue, metric, l1, l2)
 WHERE t.metric <> 'maintenance_runs';
-- More work: c1 claimed and completed (enqueue, claim, complete + attempt:
-- 4 rows), c2 enqueued (1 row): 5 rows.  Only their counters move.
SELECT orch_enqueue('m_a', '{"n": "c1"}', tenant => 't3') AS c1 \gset
SELECT pg_temp.claim('c1', 'm_a', 't3') = :c1 AS claimed, pg_temp.done('c1');
SELECT orch_enqueue('m_a', '{"n": "c2"}', tenant => 't3') AS c2 \gset
SELECT orch_metrics_refresh() AS folded;
-- (c1's queue wait is a few milliseconds: its bucket is not shown; its
-- attempt was claimed and completed in one transaction: 0 s, bucket 0.005)
SELECT t.tenant_id, t.queue, t.metric, t.l1,
       CASE WHEN t.metric = 'wait_seconds' THEN '(ms)' ELSE t.l2 END AS l2,
       CASE WHEN t.metric LIKE '%\_sum' THEN '(µs)' ELSE (t.value - coalesce(o.value, 0))::text END AS added
  FROM orch.metric_totals t LEFT JOIN totals0 o USING (tenant_id, queue, metric, l1, l2)
 WHERE t.value IS DISTINCT FROM o.value
 ORDER BY 1, 2, 3, 4, 5;
SELECT count(*) AS decreased
  FROM totals0 o LEFT JOIN orch.metric_totals t USING (tenant_id, queue, metric, l1, l2)
 WHERE t.value IS NULL OR t.value < o.value;
-- A fold in the transaction that wrote a row does not count that row (it
-- is not committed yet); the next fold does, once.
BEGIN;
SELECT orch_enqueue('m_a', '{"n": "c3"}', tenant => 't3') AS c3 \gset
SELECT orch_metrics_refresh() AS folded_in_same_xact;
SELECT orch_metrics_refresh() AS folded_again_in_same_xact;
COMMIT;
SELECT orch_metrics_refresh() AS folded_after_commit;
SELECT orch_metrics_refresh() AS folded_again;
-- and a row written after the fold in the same transaction likewise
BEGIN;
SELECT orch_metrics_refresh() AS folded_first;
SELECT orch_enqueue('m_a', '{"n": "c4"}', tenant => 't3') AS c4 \gset
COMMIT;
SELECT orch_metrics_refresh() AS folded_after_commit;
-- a rolled-back transaction's rows are never counted
BEGIN;
SELECT orch_enqueue('m_a', '{"n": "gone"}', tenant => 't3') IS NOT NULL AS enqueued;
ROLLBACK;
SELECT orch_metrics_refresh() AS folded_after_rollback;
-- rewriting rows already folded does not count them again (xact unchanged)
UPDATE orch.events SET note = coalesce(note, '') WHERE tenant_id = 't3';
SELECT orch_metrics_refresh() AS folded_after_update;
SELECT * FROM pg_temp.prom('^orch_(tasks_enqueued|executions_started)_total\{tenant="t3"');
SELECT (SELECT count(*) FROM orch.history) + (SELECT count(*) FROM orch.attempt_history) AS rows_written,
       folded_total FROM orch.metric_state;

-- ---------------------------------------------------------------------------
-- 4. orch.histogram_le: the first bound >= the value (bounds are inclusive,
--    as Prometheus "le"); past 3600 and NaN: +Inf; negatives: the first.
--    orch.histogram_quantile: linear interpolation within the bucket where
--    the cumulative count reaches q * total (0 below the first bound); the
--    +Inf bucket answers the largest finite bound; NULL when empty.
-- ---------------------------------------------------------------------------
SELECT x, orch.histogram_le(x) AS le
  FROM unnest(ARRAY[0, 0.005, 0.0051, 0.01, 1, 1.0000001, 59.999, 60, 60.5, 3600, 3600.001, 3601,
                    -1, 'NaN', 'Infinity', '-Infinity']::float8[]) WITH ORDINALITY AS u(x, n)
 ORDER BY n;
SELECT orch.histogram_le(NULL) IS NULL AS null_in_null_out;
-- empty histograms
SELECT orch.histogram_quantile(0.5, '{}', '{}') IS NULL AS no_buckets,
       orch.histogram_quantile(0.5, '{1,10}', '{0,0}') IS NULL AS all_zero,
       orch.histogram_quantile(0.5, NULL, '{1}') IS NULL AS null_bounds;
-- one bucket (5, 10] holding 4: q 0 -> 5, 0.5 -> 7.5, 1 -> 10; the first
-- bucket (0, 0.005] interpolates from 0
SELECT orch.histogram_quantile(0, '{10}', '{4}') AS q0,
       orch.histogram_quantile(0.5, '{10}', '{4}') AS q50,
       orch.histogram_quantile(0.25, '{10}', '{4}') AS q25,
       orch.histogram_quantile(1, '{10}', '{4}') AS q100,
       orch.histogram_quantile(0.5, '{0.005}', '{2}') AS first_bucket;
-- +Inf: the largest finite bound
SELECT orch.histogram_quantile(0.5, '{+Inf}', '{3}') AS only_inf,
       orch.histogram_quantile(0.99, '{1,+Inf}', '{98,2}') AS p99_in_inf,
       orch.histogram_quantile(0.98, '{1,+Inf}', '{98,2}') AS p98_at_1;
-- order does not matter; a bucket named twice adds up; NULL elements are skipped
SELECT orch.histogram_quantile(0.5, '{60,30}', '{30,20}') AS unordered,      -- rank 25: 30 + 30 * 5/30 = 35
       orch.histogram_quantile(0.5, '{30,60,30}', '{10,30,10}') AS repeated,  -- the same histogram
       orch.histogram_quantile(0.5, ARRAY['30', NULL, '60'], '{20,99,30}') AS null_bound,  -- 35 again
       -- (10, 30]: 20, (60, 120]: 30; rank 25: 60 + 60 * 5/30 = 70
       orch.histogram_quantile(0.5, '{30,60,120}', ARRAY[20, NULL, 30]::bigint[]) AS null_count;
-- errors: q outside [0, 1] or NaN (22023), arrays of different lengths
-- (2202E), a bucket name not ours (22023; "1.0" is not "1")
SELECT pg_temp.try($$SELECT orch.histogram_quantile(-0.01, '{1}', '{1}')$$) AS q_negative,
       pg_temp.try($$SELECT orch.histogram_quantile(1.01, '{1}', '{1}')$$) AS q_over_one,
       pg_temp.try($$SELECT orch.histogram_quantile('NaN', '{1}', '{1}')$$) AS q_nan,
       pg_temp.try($$SELECT orch.histogram_quantile(0.5, '{1,2.5}', '{1}')$$) AS lengths_differ,
       pg_temp.try($$SELECT orch.histogram_quantile(0.5, '{7}', '{1}')$$) AS unknown_bucket,
       pg_temp.try($$SELECT orch.histogram_quantile(0.5, '{1.0}', '{1}')$$) AS not_canonical,
       pg_temp.try($$SELECT orch.histogram_quantile(0.5, '{inf}', '{1}')$$) AS inf_spelling;

-- ---------------------------------------------------------------------------
-- 5. orch_maintain's log: one row per pass whose actions are exactly what
--    the pass returned; orch_maintenance_runs_total counts the passes
--    folded so far (a pass's own record is folded by the next fold).
-- ---------------------------------------------------------------------------
-- The pass of section 1: it folded the 23 rows written before it and
-- recovered a6's lease.
SELECT id, actor, actions ->> 'metrics_folded' AS metrics_folded,
       actions ->> 'leases_recovered' AS leases_recovered,
       finished_at >= started_at AS ordered, duration = finished_at - started_at AS duration_ok
  FROM orch_maintenance_log ORDER BY id;
SELECT * FROM pg_temp.prom('^orch_maintenance_runs_total');
-- Two more passes.  Before the first, c5 (queue m_m: 2 attempts, no
-- backoff delay) is enqueued and claimed (2 rows) and its lease runs out:
-- pass 1 folds those 2 and recovers the lease (a TRANSIENT failure, retried
-- at once); pass 2 folds what pass 1 wrote after its own fold (c5's failure
-- event and attempt: 2).
SELECT orch_create_queue('m_m', '{"max_attempts": 2, "backoff": "fixed", "initial_delay": "0s"}') IS NOT NULL AS created;
SELECT orch_enqueue('m_m', '{"n": "c5"}') AS c5 \gset
SELECT pg_temp.claim('c5', 'm_m') = :c5 AS claimed;
UPDATE orch.tasks SET lease_expires_at = now() - interval '1 minute' WHERE id = :c5;
CREATE TEMP TABLE pass1 AS SELECT * FROM orch_maintain();
CREATE TEMP TABLE pass2 AS SELECT * FROM orch_maintain();
SELECT p1.action, p1.count AS pass1, p2.count AS pass2
  FROM pass1 p1 JOIN pass2 p2 USING (action) ORDER BY action;
SELECT state, reason_code, attempts, failures FROM orch_tasks WHERE task_id = :c5;
SELECT l.id, l.actions = (SELECT jsonb_object_agg(action, count) FROM pass1) AS same_as_pass1,
       (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(l.actions) k)
         = (SELECT array_agg(action ORDER BY action) FROM pass1) AS same_keys
  FROM orch_maintenance_log l WHERE l.id = 2;
SELECT l.id, l.actions = (SELECT jsonb_object_agg(action, count) FROM pass2) AS same_as_pass2
  FROM orch_maintenance_log l WHERE l.id = 3;
-- three passes logged; two folded (pass 1 folded the first, pass 2 pass 1's)
SELECT count(*) AS log_rows FROM orch_maintenance_log;
SELECT * FROM pg_temp.prom('^orch_maintenance_runs_total');
SELECT value AS maintenance_runs FROM orch.metric_totals WHERE metric = 'maintenance_runs';
-- a pass rolled back leaves no log row and no count (one transaction)
BEGIN;
SELECT count(*) > 0 AS ran FROM orch_maintain();
ROLLBACK;
SELECT count(*) AS log_rows FROM orch_maintenance_log;
SELECT * FROM pg_temp.prom('^orch_maintenance_runs_total');

-- ---------------------------------------------------------------------------
-- 6. Correlation ids: kept on the task (or run), shown by orch_tasks,
--    orch_events, orch_attempts, orch_runs, orch_history and
--    orch_run_status; inherited by a run's step tasks and by the run
--    orch_retry_run makes; 1 to 200 characters without control characters,
--    else 22023 and nothing is stored.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('m_c', '{"max_attempts": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('m_c', '{"n": "k1"}', correlation_id => 'req-42') AS k1 \gset
SELECT pg_temp.claim('k1', 'm_c') = :k1 AS claimed;
SELECT pg_temp.done('k1');
SELECT correlation_id FROM orch_tasks WHERE task_id = :k1;
SELECT kind, from_state, to_state, outcome, correlation_id FROM orch_history(:k1);
SELECT from_state, to_state, correlation_id FROM orch_events WHERE task_id = :k1 ORDER BY event_id;
SELECT attempt, outcome, correlation_id FROM orch_attempts WHERE task_id = :k1;
-- without one: NULL everywhere
SELECT orch_enqueue('m_c', '{"n": "k0"}') AS k0 \gset
SELECT (SELECT correlation_id FROM orch_tasks WHERE task_id = :k0) AS task,
       (SELECT count(*) FROM orch_history(:k0) WHERE correlation_id IS NOT NULL) AS history,
       (SELECT count(*) FROM orch_events WHERE task_id = :k0 AND correlation_id IS NOT NULL) AS events;
SELECT orch_cancel(:k0);
-- a batch: every task carries it; multibyte: 200 characters (400 bytes) fit
CREATE TEMP TABLE kb AS
SELECT b.id FROM orch_enqueue_batch('m_c', ARRAY['{"n": "kb1"}', '{"n": "kb2"}', '{"n": "kb3"}']::jsonb[],
                                    correlation_id => 'batch-7') b(id);
SELECT t.payload ->> 'n' AS n, t.correlation_id FROM kb JOIN orch_tasks t ON t.task_id = kb.id ORDER BY t.task_id;
SELECT orch_enqueue('m_c', '{"n": "kw"}', correlation_id => repeat('é', 200)) AS kw \gset
SELECT length(correlation_id) AS chars, octet_length(correlation_id) AS bytes FROM orch_tasks WHERE task_id = :kw;
-- A one-step workflow run started with a correlation id: its step task
-- carries it, and so do the run's views and status.
SELECT orch_define('m_wf', '{"steps": [{"step_id": "only", "queue": "m_wfq", "handler": "h"}]}') AS version;
SELECT orch_publish('m_wf', 1) IS NOT NULL AS published;
SELECT orch_start('m_wf', '{"x": 1}', correlation_id => 'run-9') AS w1 \gset
SELECT step_key, state, correlation_id FROM orch_tasks WHERE run_id = :w1;
SELECT pg_temp.claim('w1', 'm_wfq') IS NOT NULL AS claimed;
SELECT pg_temp.done('w1');
SELECT state, correlation_id FROM orch_runs WHERE run_id = :w1;
SELECT s -> 'run' ->> 'state' AS state, s -> 'run' ->> 'correlation_id' AS correlation_id
  FROM orch_run_status(:w1) s;
SELECT entity, to_state, correlation_id FROM orch_events WHERE run_id = :w1 AND entity = 'run' ORDER BY event_id;
SELECT DISTINCT kind, correlation_id FROM orch_history((SELECT task_id FROM orch_tasks WHERE run_id = :w1));
-- a failed run re-run by orch_retry_run keeps it, and so does its new step task
SELECT orch_start('m_wf', '{"x": 2}', correlation_id => 'run-10') AS w2 \gset
SELECT pg_temp.claim('w2', 'm_wfq') IS NOT NULL AS claimed, pg_temp.fail('w2', 'NON_RETRYABLE');
SELECT state, correlation_id FROM orch_runs WHERE run_id = :w2;
SELECT orch_retry_run(:w2) AS w3 \gset
SELECT retry_of = :w2 AS retry_of_w2, correlation_id FROM orch_runs WHERE run_id = :w3;
SELECT step_key, state, correlation_id FROM orch_tasks WHERE run_id = :w3;
SELECT pg_temp.claim('w3', 'm_wfq') IS NOT NULL AS claimed, pg_temp.done('w3');
SELECT run_id = :w3 AS is_w3, state, correlation_id FROM orch_runs WHERE run_id IN (:w2, :w3) ORDER BY run_id;
-- bad values: 22023, nothing stored
CREATE TEMP TABLE counts0 AS
SELECT (SELECT count(*) FROM orch.tasks) AS tasks, (SELECT count(*) FROM orch.runs) AS runs,
       (SELECT count(*) FROM orch.history) AS events;
SELECT pg_temp.try($$SELECT orch_enqueue('m_c', '{}', correlation_id => '')$$) AS empty,
       pg_temp.try($$SELECT orch_enqueue('m_c', '{}', correlation_id => repeat('x', 201))$$) AS too_long,
       pg_temp.try($$SELECT orch_enqueue('m_c', '{}', correlation_id => E'a\nb')$$) AS newline,
       pg_temp.try($$SELECT orch_enqueue('m_c', '{}', correlation_id => E'a\tb')$$) AS tab,
       pg_temp.try($$SELECT orch_enqueue('m_c', '{}', correlation_id => E'a\x7fb')$$) AS del;
SELECT pg_temp.try($$SELECT count(*) FROM orch_enqueue_batch('m_c', ARRAY['{}']::jsonb[], correlation_id => '')$$) AS batch_empty,
       pg_temp.try($$SELECT count(*) FROM orch_enqueue_batch('m_c', ARRAY['{}', '{}']::jsonb[], correlation_id => repeat('x', 201))$$) AS batch_too_long,
       pg_temp.try($$SELECT orch_start('m_wf', '{}', correlation_id => '')$$) AS start_empty,
       pg_temp.try($$SELECT orch_start('m_wf', '{}', correlation_id => E'\r')$$) AS start_control;
SELECT (SELECT count(*) FROM orch.tasks) - tasks AS new_tasks, (SELECT count(*) FROM orch.runs) - runs AS new_runs,
       (SELECT count(*) FROM orch.history) - events AS new_events
  FROM counts0;
-- exactly 200 characters is fine
SELECT orch_enqueue('m_c', '{"n": "k200"}', correlation_id => repeat('x', 200)) AS k200 \gset
SELECT length(correlation_id) AS chars FROM orch_tasks WHERE task_id = :k200;
-- The runs' metrics: runs finished by definition and state (w1 and w3
-- succeeded, w2 failed once); their step tasks are labelled with the step
-- type.
-- orch_retry_run's audit event on the old run (failed -> failed, reason
-- "retried") is not a finish: w2 counts as failed once.
SELECT orch_metrics_refresh() > 0 AS folded;
SELECT (SELECT count(*) FROM orch.history) + (SELECT count(*) FROM orch.attempt_history) = folded_total AS all_rows_folded
  FROM orch.metric_state;
SELECT * FROM pg_temp.prom('^orch_runs_finished_total');
SELECT * FROM pg_temp.prom('^orch_(attempt_duration|queue_wait)_seconds_count\{tenant="default",queue="m_wfq"');

-- ---------------------------------------------------------------------------
-- 7. Tenant isolation and privileges.  A reader bound to tenant t1 sees
--    only t1 in every new view and in the Prometheus text (series without a
--    tenant label are global: refresh time, maintenance passes); a role
--    without orch_reader gets 42501 from the views and functions.
--    t1 in queue m_a: e1 completed, e2 failed NON_RETRYABLE (dead letter),
--    e3 queued.
-- ---------------------------------------------------------------------------
CALL pg_temp.create_roles('metrics_reader_t1', 'metrics_nobody');
SET client_min_messages = error;  -- roles outlive the database: no "already/not a member" messages
GRANT orch_reader TO metrics_reader_t1;
REVOKE orch_reader, orch_producer, orch_worker, orch_approver, orch_admin FROM metrics_nobody;
RESET client_min_messages;
SELECT orch_bind_tenant('metrics_reader_t1', 't1') AS bound;
SELECT orch_enqueue('m_a', '{"n": "e1"}', tenant => 't1') AS e1 \gset
SELECT pg_temp.claim('e1', 'm_a', 't1') = :e1 AS claimed, pg_temp.done('e1');
SELECT orch_enqueue('m_a', '{"n": "e2"}', tenant => 't1') AS e2 \gset
SELECT pg_temp.claim('e2', 'm_a', 't1') = :e2 AS claimed, pg_temp.fail('e2', 'NON_RETRYABLE');
SELECT orch_enqueue('m_a', '{"n": "e3"}', tenant => 't1') AS e3 \gset
-- the binding (an event of its own), e1: 4 rows, e2: 4 rows, e3: 1 row = 10
SELECT orch_metrics_refresh() AS folded;
SET ROLE metrics_reader_t1;
SELECT orch_caller_tenants();
-- orch_queue_stats and orch_review_queue call orch.open_tasks(),
-- orch.dead_letter_counts() and orch.review_items(); EXECUTE in a view is
-- checked against the caller, so orch_reader needs (and has) EXECUTE on
-- them; they filter by the caller's tenants themselves.
SELECT tenant_id, queue, queued, ready, dead_letters, enqueued_total, started_total,
       completed_total, failed_total, cancelled_total
  FROM orch_queue_stats ORDER BY tenant_id, queue;
SELECT * FROM orch_error_stats ORDER BY tenant_id, queue, error_class, reason_code;
SELECT tenant_id, queue, step_type, kind, samples FROM orch_durations ORDER BY 1, 2, 3, 4;
SELECT tenant_id, queue, step_type, kind, samples FROM orch_duration_stats('2 days') ORDER BY 1, 2, 3, 4;
SELECT kind, tenant_id, queue, task_id = :e2 AS is_e2, reason_code, action = 'SELECT orch_retry(' || :e2 || ')' AS action_ok
  FROM orch_review_queue ORDER BY kind, task_id;
-- every tenant label in the text is t1
SELECT count(*) FILTER (WHERE l ~ 'tenant="t1"') AS t1_samples,
       count(*) FILTER (WHERE l ~ 'tenant="' AND l !~ 'tenant="t1"') AS other_tenant_samples,
       count(*) FILTER (WHERE l !~ '^#' AND l !~ 'tenant="') AS untenanted_samples
  FROM pg_temp.prom('.') l;
SELECT * FROM pg_temp.prom('^orch_(tasks_enqueued_total|executions_started_total|tasks_finished_total|failures_total|dead_letters|review_items)\{');
SELECT * FROM pg_temp.prom('^orch_(maintenance_runs_total|metrics_refreshed_timestamp_seconds) ') l WHERE l ~ 'maintenance';
-- a bound reader may not fold (every tenant's rows; the count would tell
-- it how busy the others are), nor fold directly or read the tables
SELECT pg_temp.try('SELECT orch_metrics_refresh()') AS reader_refresh,
       pg_temp.try('SELECT orch.metrics_fold()') AS fold_directly,
       pg_temp.try('SELECT count(*) FROM orch.metric_totals') AS totals_table,
       pg_temp.try('SELECT count(*) FROM orch.metric_minutes') AS minutes_table,
       pg_temp.try('SELECT count(*) FROM orch.maintenance_log') AS log_table;
-- nor read the maintenance log: its counts are every tenant's (0.8.0)
SELECT count(*) AS log_rows FROM orch_maintenance_log;
SELECT pg_temp.try('SELECT count(*) FROM orch_maintain()') AS maintain;
RESET ROLE;
SET ROLE metrics_nobody;
SELECT pg_temp.try('SELECT count(*) FROM orch_queue_stats') AS queue_stats,
       pg_temp.try('SELECT count(*) FROM orch_error_stats') AS error_stats,
       pg_temp.try('SELECT count(*) FROM orch_durations') AS durations,
       pg_temp.try($$SELECT count(*) FROM orch_duration_stats('1 hour')$$) AS duration_stats,
       pg_temp.try('SELECT count(*) FROM orch_review_queue') AS review_queue,
       pg_temp.try('SELECT count(*) FROM orch_maintenance_log') AS maintenance_log;
SELECT pg_temp.try('SELECT orch_metrics_prometheus()') AS prometheus,
       pg_temp.try('SELECT orch_metrics_refresh()') AS refresh,
       pg_temp.try('SELECT orch.histogram_le(1)') AS histogram_le,
       pg_temp.try($$SELECT orch_enqueue('m_a', '{}', correlation_id => 'x')$$) AS enqueue;
RESET ROLE;

-- ---------------------------------------------------------------------------
-- 8. The review queue's kinds, each made deterministically, with the call
--    that acts on it; then each acted on, and it leaves the queue.
--      awaiting_confirmation  f1 parked by orch_await_confirmation
--      stuck_task             f2 parked by orch_await_tool, untouched for 2 h
--                             (past orchestrator.stuck_after, default 1 h)
--      lease_overdue          f3's lease expired 10 min ago (more than 5)
--                             and no maintenance ran; f4's only 1 min ago:
--                             not listed
--      dead_letter            f5 failed NON_RETRYABLE
--      run_failed             run w4 of m_wf: its step failed NON_RETRYABLE
--                             (w2 failed too but was re-run: not listed)
--      approval_waiting       run w5 of m_wfa waits at human_approval "ok"
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('m_r', '{"max_attempts": 1}') IS NOT NULL AS created;
SELECT count(orch_enqueue('m_r', jsonb_build_object('n', 'f' || g))) AS enqueued FROM generate_series(1, 5) g;
SELECT count(pg_temp.claim('f' || g, 'm_r')) AS claimed FROM generate_series(1, 5) g;
SELECT c.tag, t.payload ->> 'n' AS n FROM claims c JOIN orch_tasks t USING (task_id) WHERE c.tag LIKE 'f_' ORDER BY c.tag;
SELECT orch_await_confirmation(task_id, tok, '{"q": "refund?"}') FROM claims WHERE tag = 'f1';
SELECT orch_await_tool(task_id, tok, 'geocoder', '{}') FROM claims WHERE tag = 'f2';
SELECT pg_temp.fail('f5', 'NON_RETRYABLE');
-- The lifecycle trigger stamps updated_at on every update, so the backdating
-- bypasses it (superuser, replica mode: no triggers, no event).
SET session_replication_role = replica;
UPDATE orch.tasks SET updated_at = now() - interval '2 hours'
 WHERE id = (SELECT task_id FROM claims WHERE tag = 'f2');
RESET session_replication_role;
UPDATE orch.tasks SET lease_expires_at = now() - interval '10 minutes'
 WHERE id = (SELECT task_id FROM claims WHERE tag = 'f3');
UPDATE orch.tasks SET lease_expires_at = now() - interval '1 minute'
 WHERE id = (SELECT task_id FROM claims WHERE tag = 'f4');
SELECT orch_start('m_wf', '{"x": 4}') AS w4 \gset
CREATE TEMP TABLE runs_of (tag text, run_id bigint);
INSERT INTO runs_of VALUES ('w4', :w4);
SELECT pg_temp.claim('w4', 'm_wfq') IS NOT NULL AS claimed, pg_temp.fail('w4', 'NON_RETRYABLE');
SELECT orch_define('m_wfa', '{"steps": [{"step_id": "ok", "type": "human_approval"},
    {"step_id": "after", "queue": "m_wfq", "handler": "h", "depends_on": ["ok"]}]}') AS version;
SELECT orch_publish('m_wfa', 1) IS NOT NULL AS published;
SELECT orch_start('m_wfa', '{}') AS w5 \gset
INSERT INTO runs_of VALUES ('w5', :w5);
SELECT run_id, state FROM orch_runs WHERE run_id IN (:w4, :w5) ORDER BY run_id;
-- The queue (tenant default; a4 and a6 of section 1 are still there), ids
-- shown as the tags they were made under, and in the action as <task>/<run>.
CREATE FUNCTION pg_temp.who(t bigint, r bigint) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce((SELECT tag FROM claims WHERE task_id = t ORDER BY tag LIMIT 1),
                    (SELECT tag FROM runs_of WHERE run_id = r), 'task ' || t, 'run ' || r)
$$;
CREATE FUNCTION pg_temp.act(t bigint, r bigint, a text) RETURNS text LANGUAGE sql AS $$
    SELECT regexp_replace(regexp_replace(a, '\m' || coalesce(t::text, '-') || '\M', '<task>', 'g'),
                          '\m' || coalesce(r::text, '-') || '\M', '<run>', 'g')
$$;
SELECT kind, tenant_id, queue, pg_temp.who(task_id, run_id) AS item, step_id, state, reason_code,
       error, since IS NOT NULL AS since_set, pg_temp.act(task_id, run_id, action) AS action
  FROM orch_review_queue
 WHERE tenant_id = 'default'
 ORDER BY kind, task_id, run_id;
SELECT * FROM pg_temp.prom('^orch_(review_items|approvals_waiting|runs)\{tenant="default"');
-- stuck_after is read by the view: 3 h is more than f2 waited
SET orchestrator.stuck_after = '3h';
SELECT count(*) FILTER (WHERE kind = 'stuck_task') AS stuck FROM orch_review_queue;
RESET orchestrator.stuck_after;
SELECT count(*) FILTER (WHERE kind = 'stuck_task') AS stuck FROM orch_review_queue;
-- Act on each.
SELECT orch_confirm(task_id, true, 'ops', 'fine') FROM claims WHERE tag = 'f1';
SELECT orch_resume(task_id, '{"lat": 1}') FROM claims WHERE tag = 'f2';
SELECT orch_retry(task_id) > 0 AS redriven FROM claims WHERE tag = 'f5';
SELECT orch_retry_run(:w4) > 0 AS rerun;
SELECT orch_approve(:w5, 'ok', 'M-REF-1');
-- maintenance recovers f3's and f4's leases (both: expired is expired; only
-- the review queue waits 5 minutes before calling it overdue)
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';
-- left: dead letters only; a4, a6, and now f3, f4 (lease expired with a
-- budget of 1); f5 was re-driven
SELECT kind, pg_temp.who(task_id, run_id) AS item, state, reason_code FROM orch_review_queue
 WHERE tenant_id = 'default' ORDER BY kind, task_id;
-- m_r: f1 (approved) and f2 (resumed) wait for their next claim, f5's
-- re-drive is queued (a new task: 6 enqueued), 5 claims, 3 failed (f3, f4,
-- f5), 2 lease expiries.  w4 and w5 are running again.
SELECT orch_metrics_refresh() > 0 AS folded;
SELECT tenant_id, queue, queued, executing, awaiting_tool, awaiting_user_confirmation, dead_letters,
       enqueued_total, started_total, completed_total, failed_total, lease_expiries_1h
  FROM orch_queue_stats WHERE queue = 'm_r';
SELECT * FROM orch_error_stats WHERE queue = 'm_r' ORDER BY error_class, reason_code;
-- dead_letters (orch_queue_stats) and the orch_dead_letters gauge count
-- what the review queue lists as dead letters: a failed workflow step task
-- is its run's failure (run_failed until re-run), not a dead letter of its
-- own, so m_wfq (the steps of w2 and w4) has none, though the
-- orch_dead_letters view lists every failed task.
SELECT s.tenant_id, s.queue, s.dead_letters,
       (SELECT count(*) FROM orch_review_queue r WHERE r.kind = 'dead_letter'
           AND r.tenant_id = s.tenant_id AND r.queue = s.queue) AS listed
  FROM orch_queue_stats s WHERE s.dead_letters > 0 ORDER BY 1, 2;
SELECT count(*) AS m_wfq_failed_step_tasks FROM orch_dead_letters WHERE queue = 'm_wfq';
SELECT * FROM pg_temp.prom('^orch_dead_letters\{');
SELECT * FROM pg_temp.prom('^orch_(review_items|approvals_waiting|runs)\{tenant="default"');
-- runs finished: m_wf w1, w3 succeeded, w2, w4 failed (their re-runs add
-- no finish: the "retried" event on a failed run is failed -> failed)
SELECT * FROM pg_temp.prom('^orch_runs_finished_total');
SELECT (SELECT count(*) FROM orch.history) + (SELECT count(*) FROM orch.attempt_history) = folded_total AS all_rows_folded_once
  FROM orch.metric_state;
-- 9. orch_duration_stats refuses a window it cannot answer.
SELECT pg_temp.try($$SELECT count(*) FROM orch_duration_stats(NULL)$$) AS null_since,
       pg_temp.try($$SELECT count(*) FROM orch_duration_stats('0 seconds')$$) AS zero_since,
       pg_temp.try($$SELECT count(*) FROM orch_duration_stats('-1 hour')$$) AS negative_since,
       pg_temp.try($$SELECT count(*) FROM orch_duration_stats('3 days')$$) AS past_the_kept_minutes,
       pg_temp.try($$SELECT count(*) >= 0 FROM orch_duration_stats('2 days')$$) AS two_days;

-- 9b. orch_throughput: the same folded counters per minute, by tenant and
-- queue (what the console's sparklines draw); summed over the minutes they
-- are the totals of orch_queue_stats (nothing here is older than a day).
SELECT t.tenant_id, t.queue, sum(t.enqueued) = s.enqueued_total AS enqueued_matches,
       sum(t.completed) = s.completed_total AS completed_matches,
       sum(t.failed) = s.failed_total AS failed_matches
  FROM orch_throughput('2 days') t
  JOIN orch_queue_stats s ON s.tenant_id = t.tenant_id AND s.queue = t.queue
 GROUP BY t.tenant_id, t.queue, s.enqueued_total, s.completed_total, s.failed_total
 ORDER BY 1, 2;
SELECT pg_temp.try($$SELECT count(*) FROM orch_throughput(NULL)$$) AS null_since,
       pg_temp.try($$SELECT count(*) FROM orch_throughput('0 seconds')$$) AS zero_since,
       pg_temp.try($$SELECT count(*) FROM orch_throughput('3 days')$$) AS past_the_kept_minutes;

-- 10. A re-driven dead letter (orch_retry) keeps its correlation id.
SELECT orch_create_queue('m_rd', '{"max_attempts": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('m_rd', '{"n": 1}', correlation_id => 'order-77') AS rd \gset
SELECT pg_temp.claim('rd1', 'm_rd') = :rd AS claimed, pg_temp.fail('rd1', 'NON_RETRYABLE');
SELECT orch_retry(:rd) AS rd2 \gset
SELECT task_id = :rd2 AS is_copy, retry_of = :rd AS of_dead_letter, correlation_id
  FROM orch_tasks WHERE task_id = :rd2;

-- 11. The fold finds the transitions task rows record without an index of
-- their own (docs/storage.md, *The metrics fold*): from the mark of an
-- earlier fold (orch.metrics_mark), enqueues by task id through the primary
-- key, completions and the claims of completed rows by finished_at through
-- the finished index, the other claims among the executing rows through the
-- lease index.
SELECT to_regclass('orch.tasks_xact_idx') IS NULL AS no_xact_index;
CREATE FUNCTION pg_temp.plan_text(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r text;
    s text := '';
BEGIN
    FOR r IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        s := s || r || E'\n';
    END LOOP;
    RETURN s;
END
$$;
SET enable_seqscan = off;
SELECT x.part, x.p ~ ('(Index Scan using ' || x.idx || ' on tasks|Bitmap Index Scan on ' || x.idx || ')') AS through_its_index,
       x.p ~ 'Seq Scan' AS reads_all FROM (VALUES
    ('enqueues', 'tasks_pkey', 'SELECT 1 FROM orch.tasks t WHERE t.id > 1000 AND t.created_xact >= 1000 AND t.enqueue_event_id IS NOT NULL'),
    ('completions', 'tasks_finished_idx', 'SELECT 1 FROM orch.tasks t WHERE t.finished_at >= now() AND t.complete_xact >= 1000 AND t.complete_attempt_id IS NOT NULL'),
    ('executing claims', 'tasks_lease_idx', 'SELECT 1 FROM orch.tasks t WHERE t.state = ''executing'' AND t.claim_xact >= 1000 AND t.claim_event_id IS NOT NULL')
  ) v(part, idx, q), LATERAL (SELECT v.part, v.idx, pg_temp.plan_text(v.q) AS p) x ORDER BY 1;
RESET enable_seqscan;
-- the fold keeps the marks the next folds may start from (the last one at
-- or below its stored xmin, and the later ones), and the last mark's
-- clock is what orch.metrics_clock holds
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT cardinality(mark_xact) BETWEEN 1 AND 3 AS marks_kept,
       cardinality(mark_xact) = cardinality(mark_task) AND cardinality(mark_xact) = cardinality(mark_time) AS aligned,
       mark_xact[1] <= snap_xmin AS first_at_or_below_xmin,
       mark_task[cardinality(mark_task)] = (SELECT last_value FROM orch.events_id_seq) AS last_task_id,
       extract(epoch FROM mark_time[cardinality(mark_time)] - '2000-01-01 00:00:00+00')::numeric * 1000000
         = (SELECT last_value FROM orch.metrics_clock) AS clock_published
  FROM orch.metric_state;
-- The task id of a mark is a floor only while ids drawn later are higher:
-- with orch.events_id_seq altered to hand out ids from a per-session cache
-- (or to count down, or to cycle) it is 0, and a fold reads every task row
ALTER SEQUENCE orch.events_id_seq CACHE 10;
SELECT mark_task AS task_floor_with_a_cache FROM orch.metrics_mark();
ALTER SEQUENCE orch.events_id_seq CACHE 1;
SELECT mark_task > 0 AS task_floor_again FROM orch.metrics_mark();
-- A completion is stamped no earlier than the last moment published, as
-- long as the clock reads at most a minute earlier: with the moment
-- published 30 s ahead (as if the system clock had been set back 30 s
-- since), the completion's finished_at is that moment, and the next fold
-- counts it once.
SELECT orch_create_queue('m_clock') IS NOT NULL AS created;
SELECT orch_enqueue('m_clock', '{}') AS mc \gset
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT setval('orch.metrics_clock',
              (extract(epoch FROM clock_timestamp() + interval '30 seconds' - '2000-01-01 00:00:00+00') * 1000000)::bigint)
         AS ahead \gset
SELECT d.task_id = :mc AS claimed, orch_complete(d.task_id, d.lease_token) AS completed
  FROM orch_dequeue('m_clock', 'w') d;
SELECT finished_at = '2000-01-01 00:00:00+00'::timestamptz + :ahead * interval '1 microsecond' AS stamped_with_the_moment
  FROM orch.tasks WHERE id = :mc;
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT metric, l1, value FROM orch.metric_totals WHERE queue = 'm_clock' AND metric NOT LIKE '%\_seconds%' ORDER BY 1, 2;
-- a fold does not publish a moment earlier than the one published
SELECT (SELECT last_value FROM orch.metrics_clock) >= :ahead AS not_back;
-- Set back by more than a minute (a clock that ran an hour ahead during a
-- fold, corrected since): the completion is stamped by the clock, not an
-- hour ahead; it resets orch.metrics_clock to 1, and the next fold reads
-- every task row once, counts the completion once, publishes the clock
-- again and keeps only its own mark.
SELECT orch_enqueue('m_clock', '{}') AS mc2 \gset
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT setval('orch.metrics_clock',
              (extract(epoch FROM clock_timestamp() + interval '1 hour' - '2000-01-01 00:00:00+00') * 1000000)::bigint) > 0
         AS an_hour_ahead;
SELECT d.task_id = :mc2 AS claimed, orch_complete(d.task_id, d.lease_token) AS completed
  FROM orch_dequeue('m_clock', 'w') d;
SELECT finished_at <= clock_timestamp() AS stamped_by_the_clock FROM orch.tasks WHERE id = :mc2;
SELECT last_value AS clock_reset_to FROM orch.metrics_clock;
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT cardinality(mark_xact) AS marks_after_the_reset,
       (SELECT last_value FROM orch.metrics_clock) > 1 AS published_again
  FROM orch.metric_state;
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT metric, l1, value FROM orch.metric_totals WHERE queue = 'm_clock' AND metric NOT LIKE '%\_seconds%' ORDER BY 1, 2;
-- the fold itself finds the clock an hour behind what it published: the
-- same (it publishes its clock and keeps only its own mark)
SELECT setval('orch.metrics_clock',
              (extract(epoch FROM clock_timestamp() + interval '1 hour' - '2000-01-01 00:00:00+00') * 1000000)::bigint) > 0
         AS an_hour_ahead;
SELECT clock_reset, mark_time <= clock_timestamp() AS at_the_clock FROM orch.metrics_mark();
SELECT (SELECT last_value FROM orch.metrics_clock) <= (extract(epoch FROM clock_timestamp() - '2000-01-01 00:00:00+00') * 1000000)::bigint
         AS published_back;

-- ---------------------------------------------------------------------------
-- 12. A fold reads at most about max_rows rows a call (orch_metrics_refresh's
--     max_rows, by default 250,000; orch_maintain's pass likewise): the
--     transactions it has not counted, in the order of their ids, each
--     whole, up to the one that brings the rows read to max_rows.  A call
--     that reads less than max_rows has reached the present; until then
--     metrics_as_of stays where it was.  Counted by rows read and calls.
-- ---------------------------------------------------------------------------
SELECT orch_metrics_refresh() >= 0 AS folded;
SELECT orch_create_queue('m_bound') IS NOT NULL AS created;
-- ten transactions of three enqueues each: 30 rows
CREATE PROCEDURE pg_temp.enqueue_in_transactions(n int, per int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM orch_enqueue_batch('m_bound', array_fill('{}'::jsonb, ARRAY[per]));
        COMMIT;
    END LOOP;
END
$$;
CALL pg_temp.enqueue_in_transactions(10, 3);
UPDATE orch.metric_state SET refreshed_at = '2000-01-01 00:00:00+00';
-- max_rows 7: three transactions (9 rows) a call, then the last three rows
SELECT orch_metrics_refresh(7) AS call_1;
SELECT value AS enqueued_so_far FROM orch.metric_totals WHERE queue = 'm_bound' AND metric = 'enqueued';
SELECT refreshed_at = '2000-01-01 00:00:00+00' AS as_of_unchanged FROM orch.metric_state;
SELECT orch_metrics_refresh(7) AS call_2;
SELECT orch_metrics_refresh(7) AS call_3;
SELECT refreshed_at = '2000-01-01 00:00:00+00' AS as_of_unchanged FROM orch.metric_state;
SELECT orch_metrics_refresh(7) AS call_4;
SELECT refreshed_at > now() - interval '1 hour' AS as_of_now FROM orch.metric_state;
SELECT orch_metrics_refresh(7) AS call_5;
SELECT value AS enqueued FROM orch.metric_totals WHERE queue = 'm_bound' AND metric = 'enqueued';
-- a transaction with more rows than max_rows is folded whole
CALL pg_temp.enqueue_in_transactions(1, 5);
SELECT orch_metrics_refresh(2) AS one_transaction_of_five;
SELECT orch_metrics_refresh(2) AS then_nothing;
-- Enqueues, claims and completions the task rows record, and the events
-- and attempts written as rows, each folded once however the calls cut
-- the transactions: four tasks enqueued in one transaction (4 rows),
-- claimed in one (4), three completed in one (an event and an attempt
-- each: 6), the fourth failed (an event and an attempt: 2; its claim is
-- then written out as an event of the claiming transaction).  With
-- max_rows 3 each transaction is a call: 4, 4, 6, then 2 (less than 3:
-- done).
CALL pg_temp.enqueue_in_transactions(1, 4);
SELECT pg_temp.claim('b' || i, 'm_bound') IS NOT NULL AS claimed FROM generate_series(1, 4) i;
SELECT pg_temp.done('b' || i) FROM generate_series(1, 3) i;
SELECT pg_temp.fail('b4', 'NON_RETRYABLE');
-- the loop that brings the counters up to date, a call at a time
CREATE FUNCTION pg_temp.drain(max_rows int) RETURNS TABLE (calls int, rows_read bigint) LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    calls := 0;
    rows_read := 0;
    LOOP
        n := orch_metrics_refresh(max_rows);
        calls := calls + 1;
        rows_read := rows_read + n;
        EXIT WHEN n < max_rows;
    END LOOP;
    RETURN NEXT;
END
$$;
SELECT * FROM pg_temp.drain(3);
SELECT metric, l1, value FROM orch.metric_totals
 WHERE queue = 'm_bound' AND metric IN ('enqueued', 'started', 'finished', 'attempt') ORDER BY 1, 2;
-- (every row of the queue's history read once: 39 + 4 + 6 + 2)
SELECT (SELECT count(*) FROM orch.history h JOIN orch.tasks t ON t.id = h.task_id WHERE t.queue = 'm_bound')
     + (SELECT count(*) FROM orch.attempt_history a JOIN orch.tasks t ON t.id = a.task_id WHERE t.queue = 'm_bound')
       AS rows_written;
-- max_rows: NULL is the default; below 1 is refused
SELECT orch_metrics_refresh(NULL) AS folded_with_the_default;
SELECT pg_temp.sqlstate_of('SELECT orch_metrics_refresh(0)') AS zero;
SELECT pg_temp.sqlstate_of('SELECT orch.metrics_fold(0)') AS zero_internal;

-- back to the suite's database; the test's own goes
\c :suite_db
SET client_min_messages = warning;
DROP DATABASE orch_metrics_test;
