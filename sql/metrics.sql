-- metrics (0.5.0): rolling counters folded from events and attempts
-- (orch.metrics_fold / orch_metrics_refresh), orch_queue_stats,
-- orch_error_stats, orch_durations, orch_review_queue, the Prometheus text,
-- the histogram helpers, the maintenance log, correlation ids, tenant
-- isolation and privileges of the new views.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- try(sql): the first column of the statement's first row, or the SQLSTATE it raised.
CREATE FUNCTION pg_temp.try(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    EXECUTE q INTO r;
    RETURN coalesce(r, '<null>');
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;

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
--    backoff of 0 s (a TRANSIENT failure is claimable again at once).
--    Tenant default, in order:
--      a1, a2   claimed, completed
--      a3       claimed, failed TRANSIENT (retry), claimed again, completed
--      a4       claimed, failed NON_RETRYABLE           -> dead letter
--      a5       cancelled while queued
--      a6       max_attempts 1, claimed, lease expired, recovered by
--               orch_maintain as TRANSIENT/lease_expired -> dead letter
--               (max_attempts_exhausted)
--      a7       queued, ready
--      a8       claimed, still executing
--      a9       queued for tomorrow (delayed)
--    Tenant t2 (same queue name): b1 claimed and completed, b2 queued.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('m_a', '{"max_attempts": 2, "backoff": "fixed", "initial_delay": "0s"}') ->> 'max_attempts' AS max_attempts;
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
SELECT task_id, tenant_id, payload ->> 'n' AS n, state, reason_code, attempts, failures
  FROM orch_tasks WHERE queue = 'm_a' ORDER BY task_id;
SELECT orch_metrics_refresh() AS folded;
SELECT * FROM orch_queue_stats ORDER BY tenant_id, queue;
SELECT * FROM orch_error_stats ORDER BY tenant_id, queue, error_class, reason_code;
SELECT * FROM orch_review_queue ORDER BY kind, task_id;
SELECT * FROM pg_temp.prom('^orch_');
