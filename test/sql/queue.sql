-- queue: claim order and eligibility, cancellation, fencing by lease token,
-- heartbeats, tool and confirmation waits, paused queues, status/history
-- (SPEC §3, docs/semantics.md "Claim", "Fencing", "Calls and their results").
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- Every claim is recorded here under a tag; lease tokens never reach the output.
CREATE TEMP TABLE claims (seq serial, tag text, batch int, task_id bigint, lease_token uuid,
                          attempt int, payload jsonb, queue text, priority int, guard text,
                          lease_expires_at timestamptz, resume_data jsonb, worker text);
CREATE FUNCTION pg_temp.claim(p_tag text, p_q text, p_w text, p_n int DEFAULT 1,
                              p_lease interval DEFAULT NULL, p_batch int DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    INSERT INTO claims (tag, batch, task_id, lease_token, attempt, payload, queue, priority, guard,
                        lease_expires_at, resume_data, worker)
    SELECT p_tag, p_batch, d.task_id, d.lease_token, d.attempt, d.payload, d.queue, d.priority, d.guard,
           d.lease_expires_at, d.resume_data, p_w
      FROM orch_dequeue(p_q, p_w, p_n, p_lease) d;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
-- claim_wait: claims one task, retrying in fresh transactions (now() advances)
-- for up to 5 seconds; for tasks that become eligible a few milliseconds later.
CREATE PROCEDURE pg_temp.claim_wait(p_tag text, p_q text, p_w text, p_lease interval DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    FOR i IN 1 .. 250 LOOP
        n := pg_temp.claim(p_tag, p_q, p_w, 1, p_lease);
        COMMIT;
        EXIT WHEN n > 0;
        PERFORM pg_sleep(0.02);
    END LOOP;
    IF n = 0 THEN
        RAISE EXCEPTION 'claim_wait: nothing became claimable in queue %', p_q;
    END IF;
END $$;
CREATE FUNCTION pg_temp.tok(p_tag text) RETURNS uuid LANGUAGE sql AS
    $$ SELECT lease_token FROM claims WHERE tag = p_tag ORDER BY seq DESC LIMIT 1 $$;
CREATE FUNCTION pg_temp.tid(p_tag text) RETURNS bigint LANGUAGE sql AS
    $$ SELECT task_id FROM claims WHERE tag = p_tag ORDER BY seq DESC LIMIT 1 $$;
-- call(fmt, task, token): runs an API call with the task id and a lease token
-- (uuid literal) substituted for %1$s and %2$s; returns its result or SQLSTATE.
CREATE FUNCTION pg_temp.call(fmt text, t bigint, tok uuid DEFAULT NULL) RETURNS text LANGUAGE sql AS
    $$ SELECT pg_temp.try(format(fmt, t, quote_literal(coalesce(tok, gen_random_uuid())) || '::uuid')) $$;

-- ---------------------------------------------------------------------------
-- 1. Order: priority ascending, then created_at, then id, over 1,200 tasks.
-- ---------------------------------------------------------------------------
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue('q_order', jsonb_build_object('i', g), priority => (g * 7919) % 5 - 2)
      FROM generate_series(1, 1000) g) s;
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue('q_order', jsonb_build_object('i', g), priority => (g * 31) % 7 - 3)
      FROM generate_series(1001, 1200) g) s;
-- created_at, not id, decides among equal priorities: move every tenth task
-- (a non-terminal self-update, allowed) an hour back.
UPDATE orch.tasks SET created_at = created_at - interval '1 hour'
 WHERE queue = 'q_order' AND (payload ->> 'i')::int % 10 = 0;
CREATE TEMP TABLE order_expected AS
SELECT id, row_number() OVER (ORDER BY priority, created_at, id) AS rnk
  FROM orch.tasks WHERE queue = 'q_order';

-- Claim everything in batches of 1..10 (cycling) and remember each batch.
DO $$
DECLARE b int := 0; n bigint;
BEGIN
    LOOP
        b := b + 1;
        n := pg_temp.claim('order', 'q_order', 'order-worker', 1 + b % 10, NULL, b);
        EXIT WHEN n = 0;
    END LOOP;
END $$;
SELECT count(*) AS claimed, count(DISTINCT task_id) AS distinct_tasks,
       count(*) FILTER (WHERE attempt <> 1) AS not_first_attempt,
       count(*) FILTER (WHERE queue <> 'q_order') AS wrong_queue
  FROM claims WHERE tag = 'order';
-- Each batch must be exactly the next ranks of the expected order.
SELECT count(*) AS batches,
       count(*) FILTER (WHERE max_rnk <> cum OR min_rnk <> cum - n + 1) AS out_of_order_batches
  FROM (SELECT c.batch, min(e.rnk) AS min_rnk, max(e.rnk) AS max_rnk, count(*) AS n,
               sum(count(*)) OVER (ORDER BY c.batch) AS cum
          FROM claims c JOIN order_expected e ON e.id = c.task_id
         WHERE c.tag = 'order' GROUP BY c.batch) x;
-- The claim echoes the task: priority and payload as stored.
SELECT count(*) AS echo_mismatches
  FROM claims c JOIN orch.tasks t ON t.id = c.task_id
 WHERE c.tag = 'order' AND (c.priority <> t.priority OR c.payload <> t.payload);
-- The head of the order, for the eye.
SELECT e.rnk, c.priority, c.payload ->> 'i' AS i
  FROM claims c JOIN order_expected e ON e.id = c.task_id
 WHERE c.tag = 'order' ORDER BY e.rnk LIMIT 8;
SELECT state, count(*) FROM orch.tasks WHERE queue = 'q_order' GROUP BY state;

-- ---------------------------------------------------------------------------
-- 2. A future run_at is not eligible, whatever its priority.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('q_future', '{"n": "later"}', priority => -100, run_at => now() + interval '1 hour') AS later_id \gset
SELECT orch_enqueue('q_future', '{"n": "past"}', run_at => now() - interval '1 minute') IS NOT NULL AS enqueued;
SELECT orch_enqueue('q_future', '{"n": "now"}') IS NOT NULL AS enqueued;
SELECT pg_temp.claim('future', 'q_future', 'w', 10) AS claimed;
SELECT payload ->> 'n' AS n FROM claims WHERE tag = 'future' ORDER BY seq;
SELECT pg_temp.claim('future2', 'q_future', 'w', 10) AS claimed_again;
SELECT state, attempts FROM orch_status(:later_id);

-- ---------------------------------------------------------------------------
-- 3. Cancel in every state.
-- ---------------------------------------------------------------------------
-- make(kind, queue): a task in the given situation, each in its own queue.
CREATE FUNCTION pg_temp.make(kind text, q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE tid bigint; tk uuid;
BEGIN
    IF kind = 'received' THEN
        INSERT INTO orch.tasks (queue, state, payload) VALUES (q, 'received', '{}')
        RETURNING orch.tasks.id INTO tid;
        RETURN tid;
    END IF;
    tid := orch_enqueue(q, jsonb_build_object('kind', kind));
    IF kind = 'queued' THEN RETURN tid; END IF;
    IF kind = 'cancelled' THEN PERFORM orch_cancel(tid, 'setup'); RETURN tid; END IF;
    PERFORM pg_temp.claim(kind, q, 'worker-' || kind);
    tk := pg_temp.tok(kind);
    IF pg_temp.tid(kind) IS DISTINCT FROM tid THEN RAISE EXCEPTION 'setup claimed the wrong task'; END IF;
    CASE kind
        WHEN 'executing' THEN NULL;
        WHEN 'awaiting_tool' THEN PERFORM orch_await_tool(tid, tk, 'tool', '{}');
        WHEN 'retry_wait' THEN PERFORM orch_fail(tid, tk, 'TRANSIENT', 'try later');
        WHEN 'awaiting_user_confirmation' THEN PERFORM orch_await_confirmation(tid, tk, '{}');
        WHEN 'completed' THEN PERFORM orch_complete(tid, tk, '{"done": true}');
        WHEN 'failed' THEN PERFORM orch_fail(tid, tk, 'NON_RETRYABLE', 'broken');
    END CASE;
    RETURN tid;
END $$;
CREATE TEMP TABLE cx (ord int, kind text, id bigint);
INSERT INTO cx
SELECT ord, kind, pg_temp.make(kind, 'q_cancel_' || ord)
  FROM unnest(ARRAY['received', 'queued', 'executing', 'awaiting_tool', 'retry_wait',
                    'awaiting_user_confirmation', 'completed', 'failed', 'cancelled'])
       WITH ORDINALITY AS k(kind, ord);
SELECT kind, t.state, t.retry_at IS NOT NULL AS has_retry_at
  FROM cx JOIN orch.tasks t USING (id) ORDER BY ord;
SELECT coalesce(max(id), 0) AS ev0 FROM orch.history \gset
CREATE TEMP TABLE cx_before AS SELECT t.* FROM orch.tasks t WHERE id IN (SELECT id FROM cx);
CREATE TEMP TABLE cx_result AS
SELECT ord, kind, pg_temp.try(format('SELECT orch_cancel(%s, %L)', id, 'cancelled while ' || kind)) AS result
  FROM cx ORDER BY ord;
SELECT r.kind, r.result, t.state, CASE WHEN r.result = 'cancelled' THEN t.reason_code END AS reason_code,
       (SELECT string_agg(e.from_state || '>' || e.to_state || ' note=' || coalesce(e.note, '<null>'), '; ')
          FROM orch.history e WHERE e.task_id = t.id AND e.id > :ev0) AS new_events,
       CASE WHEN r.result <> 'cancelled'
            THEN to_jsonb(t) = (SELECT to_jsonb(b) FROM cx_before b WHERE b.id = t.id) END AS unchanged
  FROM cx_result r JOIN cx USING (ord) JOIN orch.tasks t ON t.id = cx.id
 ORDER BY ord;
-- A cancelled task never executes.
SELECT sum(pg_temp.claim('after_cancel', 'q_cancel_' || ord, 'w')) AS claimed_after_cancel FROM cx;
-- The worker of the cancelled executing task learns of it on its next call.
SELECT pg_temp.call('SELECT orch_heartbeat(%s, %s)', pg_temp.tid('executing'), pg_temp.tok('executing')) AS heartbeat,
       pg_temp.call('SELECT orch_complete(%s, %s)', pg_temp.tid('executing'), pg_temp.tok('executing')) AS complete,
       pg_temp.call('SELECT state FROM orch_fail(%s, %s, ''TRANSIENT'')', pg_temp.tid('executing'), pg_temp.tok('executing')) AS fail,
       pg_temp.call('SELECT orch_await_tool(%s, %s)', pg_temp.tid('executing'), pg_temp.tok('executing')) AS await_tool,
       pg_temp.call('SELECT orch_heartbeat(%s, %s)', pg_temp.tid('executing'), NULL) AS heartbeat_other_token;
SELECT state FROM orch_status(pg_temp.tid('executing'));

-- ---------------------------------------------------------------------------
-- 4. Terminal tasks are immutable through the API (the raw-UPDATE side is in
--    the matrix test).
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE term_before AS
SELECT t.* FROM orch.tasks t WHERE id IN (SELECT id FROM cx WHERE kind IN ('completed', 'failed', 'cancelled'));
SELECT coalesce(max(id), 0) AS ev0 FROM orch.history \gset
SELECT kind,
       pg_temp.call('SELECT orch_complete(%s, %s, ''{"again": true}'')', id, t.lease_token) AS complete,
       pg_temp.call('SELECT state FROM orch_fail(%s, %s, ''TRANSIENT'')', id, t.lease_token) AS fail,
       pg_temp.call('SELECT orch_await_confirmation(%s, %s)', id, t.lease_token) AS await_conf,
       pg_temp.call('SELECT orch_resume(%s, ''{}'')', id) AS resume,
       pg_temp.call('SELECT orch_confirm(%s, false)', id) AS confirm,
       pg_temp.call('SELECT orch_cancel(%s)', id) AS cancel
  FROM cx JOIN orch.tasks t USING (id) WHERE kind IN ('completed', 'failed') ORDER BY ord;
SELECT count(*) AS changed_rows
  FROM term_before b JOIN orch.tasks t USING (id) WHERE to_jsonb(b) <> to_jsonb(t);
SELECT count(*) AS new_events FROM orch.history WHERE id > :ev0;
SELECT result FROM orch_status((SELECT id FROM cx WHERE kind = 'completed'));

-- ---------------------------------------------------------------------------
-- 5. Fencing: a stale lease token is rejected after a re-claim.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('q_lease', '{"backoff": "fixed", "initial_delay": "10 milliseconds"}') IS NOT NULL AS created;
SELECT orch_enqueue('q_lease', '{"job": "lease"}') AS lease_task \gset
SELECT pg_temp.claim('lease1', 'q_lease', 'worker-1', 1, '1 millisecond') AS claimed;
SELECT pg_sleep(0.05);
-- The expired lease is recovered by the next claim on the queue (a TRANSIENT
-- failure, retried after 10 ms), then worker-2 gets attempt 2.
CALL pg_temp.claim_wait('lease2', 'q_lease', 'worker-2', '5 minutes');
SELECT tag, task_id = :lease_task AS same_task, attempt, worker
  FROM claims WHERE tag IN ('lease1', 'lease2') ORDER BY seq;
SELECT count(DISTINCT guard) AS distinct_guards, count(DISTINCT lease_token) AS distinct_tokens
  FROM claims WHERE tag IN ('lease1', 'lease2');
SELECT coalesce(max(id), 0) AS ev0 FROM orch.history \gset
CREATE TEMP TABLE lease_before AS SELECT * FROM orch.tasks WHERE id = :lease_task;
SELECT pg_temp.call('SELECT orch_complete(%s, %s)', :lease_task, pg_temp.tok('lease1')) AS complete_stale,
       pg_temp.call('SELECT state FROM orch_fail(%s, %s, ''TRANSIENT'')', :lease_task, pg_temp.tok('lease1')) AS fail_stale,
       pg_temp.call('SELECT orch_heartbeat(%s, %s)', :lease_task, pg_temp.tok('lease1')) AS heartbeat_stale,
       pg_temp.call('SELECT orch_await_tool(%s, %s)', :lease_task, pg_temp.tok('lease1')) AS await_tool_stale,
       pg_temp.call('SELECT orch_await_confirmation(%s, %s)', :lease_task, pg_temp.tok('lease1')) AS await_conf_stale,
       pg_temp.call('SELECT orch_complete(%s, %s)', :lease_task, NULL) AS complete_random;
SELECT to_jsonb(b) = to_jsonb(t) AS unchanged, (SELECT count(*) FROM orch.history WHERE id > :ev0) AS new_events
  FROM lease_before b JOIN orch.tasks t USING (id);
SELECT state, attempts, failures, lease_owner FROM orch_status(:lease_task);
SELECT pg_temp.call('SELECT orch_complete(%s, %s, ''{"by": "worker-2"}'')', :lease_task, pg_temp.tok('lease2')) AS complete_current;
SELECT attempt, outcome, error_class, worker FROM orch_attempts WHERE task_id = :lease_task ORDER BY attempt;
SELECT state, attempts, failures, result FROM orch_status(:lease_task);

-- ---------------------------------------------------------------------------
-- 6. Heartbeats.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('q_hb', '{"job": "hb"}') AS hb_task \gset
SELECT pg_temp.claim('hb', 'q_hb', 'hb-worker', 1, '10 seconds') AS claimed;
SELECT lease_expires_at AS le0 FROM orch_status(:hb_task) \gset
SELECT c.lease_expires_at = :'le0'::timestamptz AS claim_reports_lease_expiry FROM claims c WHERE tag = 'hb';
SELECT pg_temp.call('SELECT orch_heartbeat(%s, %s)', :hb_task, pg_temp.tok('hb')) AS heartbeat;
SELECT lease_expires_at > :'le0'::timestamptz AS extended_by_queue_lease FROM orch_status(:hb_task);
SELECT pg_temp.call('SELECT orch_heartbeat(%s, %s, ''1 hour'')', :hb_task, pg_temp.tok('hb')) AS heartbeat_1h;
SELECT lease_expires_at > now() + interval '59 minutes' AS extended_1h,
       lease_expires_at <= now() + interval '61 minutes' AS not_more, state, lease_owner
  FROM orch_status(:hb_task);
SELECT pg_temp.call('SELECT orch_heartbeat(%s, %s)', :hb_task, NULL) AS heartbeat_wrong_token;
SELECT orch_cancel(:hb_task, 'operator stop');
SELECT pg_temp.call('SELECT orch_heartbeat(%s, %s)', :hb_task, pg_temp.tok('hb')) AS heartbeat_after_cancel,
       pg_temp.call('SELECT orch_heartbeat(%s, %s)', :hb_task, NULL) AS other_token_after_cancel;
-- A completed task: OR002 for its last token too.
SELECT orch_enqueue('q_hb', '{"job": "hb2"}') AS hb2_task \gset
SELECT pg_temp.claim('hb2', 'q_hb', 'hb-worker') AS claimed;
SELECT pg_temp.call('SELECT orch_complete(%s, %s)', :hb2_task, pg_temp.tok('hb2')) AS complete,
       pg_temp.call('SELECT orch_heartbeat(%s, %s)', :hb2_task, pg_temp.tok('hb2')) AS heartbeat_after_complete;
-- An expired lease can no longer be extended or used.
SELECT orch_enqueue('q_hb_exp', '{"job": "hb3"}') AS hb3_task \gset
SELECT pg_temp.claim('hb3', 'q_hb_exp', 'hb-worker', 1, '1 millisecond') AS claimed;
SELECT pg_sleep(0.05);
SELECT pg_temp.call('SELECT orch_heartbeat(%s, %s)', :hb3_task, pg_temp.tok('hb3')) AS heartbeat_expired,
       pg_temp.call('SELECT orch_complete(%s, %s)', :hb3_task, pg_temp.tok('hb3')) AS complete_expired;
SELECT state, attempts FROM orch_status(:hb3_task);

-- ---------------------------------------------------------------------------
-- 7. Waiting for a tool: await_tool / resume; the next claim gets the result.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('q_tool', '{"job": "tool"}') AS tool_task \gset
SELECT pg_temp.claim('tool1', 'q_tool', 'tool-worker') AS claimed;
SELECT pg_temp.call('SELECT orch_await_tool(%s, %s, ''search'', ''{"q": "x"}'')', :tool_task, pg_temp.tok('tool1')) AS await_tool;
SELECT state, retry_at IS NULL AS no_retry_at, attempts FROM orch_status(:tool_task);
SELECT pg_temp.claim('tool_early', 'q_tool', 'tool-worker') AS claimable_while_waiting;
SELECT pg_temp.call('SELECT orch_complete(%s, %s)', :tool_task, pg_temp.tok('tool1')) AS complete_while_waiting,
       pg_temp.call('SELECT orch_heartbeat(%s, %s)', :tool_task, pg_temp.tok('tool1')) AS heartbeat_while_waiting;
SELECT orch_resume(:tool_task, '{"answer": 42}');
SELECT state FROM orch_status(:tool_task);
SELECT pg_temp.claim('tool2', 'q_tool', 'tool-worker') AS claimed;
SELECT task_id = :tool_task AS same_task, attempt, resume_data FROM claims WHERE tag = 'tool2';
SELECT pg_temp.call('SELECT orch_complete(%s, %s, ''{"final": 1}'')', :tool_task, pg_temp.tok('tool2')) AS complete;
SELECT count(*) AS tool_resumed_events FROM orch.history WHERE task_id = :tool_task AND reason_code = 'tool_resumed';
SELECT attempt, outcome FROM orch_attempts WHERE task_id = :tool_task ORDER BY attempt;
-- A retry-waiting task is not waiting for a tool.
SELECT pg_temp.call('SELECT orch_resume(%s, ''{}'')', (SELECT id FROM cx WHERE kind = 'retry_wait')) AS resume_cancelled_retry_wait;
SELECT orch_enqueue('q_tool_rw', '{"job": "rw"}') AS rw_task \gset
SELECT pg_temp.claim('rw', 'q_tool_rw', 'w') AS claimed;
SELECT state, reason_code FROM orch_fail(:rw_task, pg_temp.tok('rw'), 'TRANSIENT', 'later');
SELECT pg_temp.call('SELECT orch_resume(%s, ''{}'')', :rw_task) AS resume_retry_wait;
SELECT state, retry_at IS NOT NULL AS has_retry_at FROM orch_status(:rw_task);

-- ---------------------------------------------------------------------------
-- 8. Waiting for a human: await_confirmation / confirm (approve, reject).
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('q_conf', '{"job": "approve me"}') AS ok_task \gset
SELECT pg_temp.claim('conf1', 'q_conf', 'conf-worker') AS claimed;
SELECT pg_temp.call('SELECT orch_await_confirmation(%s, %s, ''{"question": "ship?"}'')', :ok_task, pg_temp.tok('conf1')) AS await_conf;
SELECT state, attempts FROM orch_status(:ok_task);
SELECT pg_temp.claim('conf_early', 'q_conf', 'conf-worker') AS claimable_while_waiting;
SELECT orch_confirm(:ok_task, true, 'alice', 'looks good');
SELECT pg_temp.claim('conf2', 'q_conf', 'conf-worker') AS claimed;
SELECT task_id = :ok_task AS same_task, attempt, resume_data FROM claims WHERE tag = 'conf2';
SELECT pg_temp.call('SELECT orch_complete(%s, %s)', :ok_task, pg_temp.tok('conf2')) AS complete;
SELECT count(*) AS approved_events FROM orch.history WHERE task_id = :ok_task AND reason_code = 'confirmation_approved';

SELECT orch_enqueue('q_conf', '{"job": "reject me"}') AS no_task \gset
SELECT pg_temp.claim('conf3', 'q_conf', 'conf-worker') AS claimed;
SELECT pg_temp.call('SELECT orch_await_confirmation(%s, %s)', :no_task, pg_temp.tok('conf3')) AS await_conf;
SELECT orch_confirm(:no_task, false, 'bob', 'not now');
SELECT state, reason_code FROM orch_status(:no_task);
SELECT from_state, to_state, reason_code FROM orch.history
 WHERE task_id = :no_task AND to_state = 'failed';
SELECT pg_temp.claim('conf4', 'q_conf', 'conf-worker') AS claimable_after_reject;
SELECT pg_temp.call('SELECT orch_confirm(%s, true)', :no_task) AS confirm_again;

-- ---------------------------------------------------------------------------
-- 9. A paused queue accepts work but hands none out.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('q_pause') IS NOT NULL AS created;
SELECT count(*) AS enqueued FROM (SELECT orch_enqueue('q_pause', jsonb_build_object('n', g)) FROM generate_series(1, 2) g) s;
SELECT orch_pause_queue('q_pause');
SELECT pg_temp.claim('paused', 'q_pause', 'w', 10) AS claimed_while_paused;
SELECT orch_enqueue('q_pause', '{"n": 3}') IS NOT NULL AS accepted_while_paused;
SELECT paused FROM orch_queues WHERE queue = 'q_pause';
SELECT orch_resume_queue('q_pause');
SELECT pg_temp.claim('unpaused', 'q_pause', 'w', 10) AS claimed_after_resume;

-- ---------------------------------------------------------------------------
-- 10. orch_status / orch_history.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('q_hist', '{"job": "history"}', priority => 4) AS h_task \gset
SELECT task_id = :h_task AS same_id, queue, tenant_id, state, priority, attempts, failures,
       lease_owner, result, last_error, last_error_class, retry_at, run_at <= now() AS due
  FROM orch_status(:h_task);
SELECT pg_temp.claim('h1', 'q_hist', 'hist-worker') AS claimed;
SELECT state, attempts, lease_owner, lease_expires_at > now() AS leased FROM orch_status(:h_task);
SELECT pg_temp.call('SELECT orch_await_tool(%s, %s)', :h_task, pg_temp.tok('h1')) AS await_tool;
SELECT orch_resume(:h_task, '{"tool": "done"}');
SELECT pg_temp.claim('h2', 'q_hist', 'hist-worker') AS claimed;
SELECT pg_temp.call('SELECT orch_complete(%s, %s, ''{"answer": 42}'')', :h_task, pg_temp.tok('h2')) AS complete;
SELECT state, attempts, failures, result, updated_at >= created_at AS times_ok FROM orch_status(:h_task);
-- Transitions in order (an event per accepted transition), then the attempts.
SELECT from_state, to_state FROM orch_history(:h_task)
 WHERE kind = 'event' AND from_state IS DISTINCT FROM to_state;
SELECT attempt, outcome, label AS worker, actor IS NULL AS no_role_on_attempts FROM orch_history(:h_task) WHERE kind = 'attempt';
SELECT count(*) AS rows_out_of_time_order
  FROM (SELECT at, lag(at) OVER () AS prev FROM orch_history(:h_task)) h WHERE at < prev;
SELECT count(*) = (SELECT count(*) FROM orch.history WHERE task_id = :h_task)
                + (SELECT count(*) FROM orch.attempt_history WHERE task_id = :h_task) AS history_is_complete
  FROM orch_history(:h_task);
SELECT pg_temp.try('SELECT state FROM orch_status(-42)') AS status_unknown,
       pg_temp.try('SELECT count(*) FROM orch_history(-42)') AS history_unknown;

-- ---------------------------------------------------------------------------
-- 11. Queue settings: merged by orch_configure_queue (a JSON null removes a
--     key), defaults applied to new tasks.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('q_conf_settings', '{"max_attempts": 3, "priority": 2}') ->> 'max_attempts' AS max_attempts;
SELECT s ->> 'max_attempts' AS max_attempts, s ->> 'priority' AS priority, s ->> 'max_failures' AS max_failures,
       s ->> 'backoff' AS backoff, s ->> 'on_exhausted' AS on_exhausted
  FROM orch_queue_settings('q_conf_settings') s;
SELECT s ->> 'max_attempts' AS max_attempts, s ->> 'priority' AS priority, s ->> 'max_failures' AS max_failures
  FROM orch_configure_queue('q_conf_settings', '{"max_failures": 4}') s;
SELECT s ->> 'max_attempts' AS max_attempts, s ->> 'priority' AS priority, s ->> 'max_failures' AS max_failures
  FROM orch_configure_queue('q_conf_settings', '{"max_attempts": null}') s;
SELECT orch_enqueue('q_conf_settings', '{}') AS p1,
       orch_enqueue('q_conf_settings', '{}', priority => -1) AS p2,
       orch_enqueue('q_conf_settings', '{}', priority => NULL) AS p3 \gset
SELECT (SELECT priority FROM orch_tasks WHERE task_id = :p1) AS queue_default,
       (SELECT priority FROM orch_tasks WHERE task_id = :p2) AS explicit,
       (SELECT priority FROM orch_tasks WHERE task_id = :p3) AS explicit_null;
SELECT queue, paused, settings ->> 'max_failures' AS max_failures FROM orch_queues WHERE queue = 'q_conf_settings';

-- ---------------------------------------------------------------------------
-- 12. Claims bound to a tenant see only that tenant's tasks.
-- ---------------------------------------------------------------------------
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue('q_tenant', jsonb_build_object('t', t), tenant => t)
      FROM unnest(ARRAY['tenant_a', 'tenant_b', 'tenant_a', 'tenant_b']) t) s;
SELECT t.tenant_id, count(*) AS claimed
  FROM orch_dequeue('q_tenant', 'w', 10, NULL, 'tenant_a') d JOIN orch.tasks t ON t.id = d.task_id
 GROUP BY t.tenant_id;
SELECT tenant_id, state, count(*) FROM orch.tasks WHERE queue = 'q_tenant' GROUP BY tenant_id, state ORDER BY tenant_id;

-- ---------------------------------------------------------------------------
-- 13. Dropping a queue: refused while it holds unfinished tasks, unless forced
--     (then they are cancelled with reason queue_dropped).
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('q_drop', '{"n": 1}') AS drop_task \gset
SELECT pg_temp.try($$SELECT orch_drop_queue('q_drop')$$) NOT IN ('', 'ok') AS refused;
SELECT count(*) AS queue_kept FROM orch.queues WHERE name = 'q_drop';
SELECT state FROM orch_status(:drop_task);
SELECT orch_drop_queue('q_drop', force => true);
SELECT count(*) AS queue_left FROM orch.queues WHERE name = 'q_drop';
SELECT state, reason_code FROM orch_status(:drop_task);
SELECT orch_create_queue('q_drop_empty') IS NOT NULL AS created;
SELECT orch_drop_queue('q_drop_empty');
SELECT count(*) AS queue_left FROM orch.queues WHERE name = 'q_drop_empty';

-- Cleanup.
DO $$
BEGIN
    DELETE FROM orch.events WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'q\_%');
    DELETE FROM orch.attempts WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'q\_%');
    DELETE FROM orch.tasks WHERE queue LIKE 'q\_%';
    DELETE FROM orch.queues WHERE name LIKE 'q\_%';
END $$;
