-- admission: concurrency keys (gated slots, only executing tasks really hold
-- a slot: hand-over to a better arrival, service in priority/FIFO order, no
-- head-of-line blocking, per-key overrides, limit changes, which calls hold
-- and release a slot, tasks not due yet hold none), owner_limit /
-- queue_limit at claim time, rate limits per (queue, owner), idempotency-key
-- TTL, admission settings validation (SPEC §5-§6, 0.4.0).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- Tasks are named by labels; ids and lease tokens never reach the output.
CREATE TEMP TABLE tk (label text PRIMARY KEY, id bigint NOT NULL UNIQUE, token uuid);

-- enq(label, queue, key, priority, owner, run_at): enqueue one task.
CREATE FUNCTION pg_temp.enq(l text, q text, ckey text DEFAULT NULL, prio int DEFAULT NULL,
                            own text DEFAULT NULL, at timestamptz DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tk (label, id)
    VALUES (l, orch_enqueue(q, jsonb_build_object('label', l), priority => prio, owner => own,
                            concurrency_key => ckey, run_at => at));
    RETURN l;
END $$;

-- st(queue): every task of the queue as label=state (retry: awaiting_tool
-- waiting to retry), with "+gated" for a task waiting for a slot of its key,
-- "+ready" for a claimable waiting task and "+later" for a task that is not
-- due yet (future run_at or retry_at: not claimable, holding no slot).
CREATE FUNCTION pg_temp.st(q text) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(k.label || '=' ||
             CASE t.state WHEN 'queued' THEN 'q' WHEN 'executing' THEN 'exec'
                          WHEN 'awaiting_tool' THEN CASE WHEN t.retry_at IS NULL THEN 'tool' ELSE 'retry' END
                          WHEN 'awaiting_user_confirmation' THEN 'conf'
                          WHEN 'completed' THEN 'done' ELSE t.state END ||
             CASE WHEN t.gated AND t.ready_at IS NOT NULL THEN '+BROKEN(gated and ready)'
                  WHEN t.gated THEN '+gated'
                  WHEN t.ready_at IS NOT NULL THEN '+ready'
                  WHEN t.state = 'queued' OR (t.state = 'awaiting_tool' AND t.retry_at IS NOT NULL)
                  THEN '+later' ELSE '' END,
             ' ' ORDER BY k.label)
      FROM orch.tasks t JOIN tk k ON k.id = t.id
     WHERE t.queue = q
$$;

-- inv(queue): 'ok', or every broken slot invariant of the queue's keys:
-- "over" (more executing + claimable tasks than the limit), "lost" (a task
-- waits gated while its key has room), "order" (a gated task comes before a
-- claimable, not executing, task of its key in (priority, created_at, id)
-- order: waiters must be served best first).
CREATE FUNCTION pg_temp.inv(q text) RETURNS text LANGUAGE sql AS $$
    WITH k AS (
        SELECT t.concurrency_key AS key,
               coalesce((SELECT l.max_running FROM orch.concurrency_limits l
                          WHERE l.queue = q AND l.key = t.concurrency_key),
                        (SELECT (s.settings ->> 'concurrency_key_limit')::int FROM orch.queues s
                          WHERE s.name = q), 1) AS lim,
               count(*) FILTER (WHERE t.state = 'executing' OR t.ready_at IS NOT NULL) AS held,
               count(*) FILTER (WHERE t.gated) AS gated
          FROM orch.tasks t WHERE t.queue = q AND t.concurrency_key IS NOT NULL
         GROUP BY t.concurrency_key),
    bad AS (
        SELECT key || ':over' AS v FROM k WHERE held > lim
        UNION ALL
        SELECT key || ':lost' FROM k WHERE gated > 0 AND held < lim
        UNION ALL
        SELECT DISTINCT g.concurrency_key || ':order'
          FROM orch.tasks g JOIN orch.tasks r
            ON r.queue = g.queue AND r.concurrency_key = g.concurrency_key
         WHERE g.queue = q AND g.gated AND r.ready_at IS NOT NULL AND r.state <> 'executing'
           AND (g.priority, g.created_at, g.id) < (r.priority, r.created_at, r.id))
    SELECT coalesce(string_agg(v, ' ' ORDER BY v), 'ok') FROM bad
$$;

-- due(label): time passes for a task that is not due yet: its run_at (and
-- retry_at) move into the past.  A plain update: no event, no state change;
-- the task stays out of the claim index until a claim of its queue (or
-- orch_maintain) wakes it.
CREATE FUNCTION pg_temp.due(l text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    UPDATE orch.tasks SET run_at = least(run_at, now() - interval '1 second'),
                          retry_at = least(retry_at, now() - interval '1 second')
     WHERE id = (SELECT id FROM tk WHERE label = l);
    RETURN l || ' due';
END $$;

-- claim(queue, batch, lease): the labels a dequeue hands out, in order, then
-- the queue's state.
CREATE FUNCTION pg_temp.claim(q text, n int DEFAULT 10, lease interval DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE r record; got text[] := '{}';
BEGIN
    FOR r IN SELECT d.task_id, d.lease_token FROM orch_dequeue(q, 'adm-worker', n, lease) d LOOP
        UPDATE tk SET token = r.lease_token WHERE id = r.task_id;
        got := got || coalesce((SELECT label FROM tk WHERE id = r.task_id), 'UNKNOWN');
    END LOOP;
    RETURN 'claimed [' || array_to_string(got, ' ') || '] => ' || coalesce(pg_temp.st(q), '');
END $$;

-- act(label, what, arg): one API call on a task, its result (or SQLSTATE),
-- then the state of the task's queue.
CREATE FUNCTION pg_temp.act(l text, what text, arg text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE r tk; q text; res text;
BEGIN
    SELECT * INTO r FROM tk WHERE label = l;
    SELECT queue INTO q FROM orch.tasks WHERE id = r.id;
    BEGIN
        CASE what
        WHEN 'complete' THEN
            res := orch_complete(r.id, r.token, '{"ok": true}');
        WHEN 'fail' THEN    -- arg: CLASS or CLASS@retry_after
            SELECT f.state || '/' || f.reason_code INTO res
              FROM orch_fail(r.id, r.token, split_part(arg, '@', 1), 'boom',
                             nullif(split_part(arg, '@', 2), '')::interval) f;
        WHEN 'cancel' THEN
            res := orch_cancel(r.id, 'admission test');
        WHEN 'await_tool' THEN
            res := orch_await_tool(r.id, r.token, 'tool', '{"ask": 1}');
        WHEN 'resume' THEN
            res := orch_resume(r.id, '{"tool": "done"}');
        WHEN 'await_confirmation' THEN
            res := orch_await_confirmation(r.id, r.token, '{"question": "ok?"}');
        WHEN 'approve' THEN
            res := orch_confirm(r.id, true, 'adm-approver', 'fine');
        WHEN 'reject' THEN
            res := orch_confirm(r.id, false, 'adm-approver', 'no');
        END CASE;
    EXCEPTION WHEN OTHERS THEN
        res := SQLSTATE;
    END;
    RETURN what || ' ' || l || ': ' || coalesce(res, '<null>') || ' => ' || pg_temp.st(q);
END $$;

-- starts(label pattern): the labels of the matching tasks in the order their
-- executions started (the claiming transaction, xact), a task once per
-- attempt; the tasks one batch claim (one transaction) started at once in
-- its hand-out order: priority, FIFO.
CREATE FUNCTION pg_temp.starts(pat text) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(k.label, ' ' ORDER BY e.xact, t.priority, t.created_at, t.id)
      FROM orch.history e JOIN tk k ON k.id = e.task_id JOIN orch.tasks t ON t.id = e.task_id
     WHERE e.to_state = 'executing' AND k.label LIKE pat
$$;

-- ---------------------------------------------------------------------------
-- 1. Gating and promotion order: limit 1 (the default); the excess waits
--    queued and gated; a freed slot goes to the best waiting task of the key
--    (priority, then FIFO).
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_order') ->> 'concurrency_key_limit' AS default_key_limit;
SELECT pg_temp.enq('a1', 'adm_order', 'A'), pg_temp.enq('a2', 'adm_order', 'A'),
       pg_temp.enq('a3', 'adm_order', 'A'), pg_temp.enq('a4', 'adm_order', 'A', -1),
       pg_temp.enq('a5', 'adm_order', 'A');
-- a1 took the slot first, but only executing tasks really hold one: a4
-- (priority -1) took it from the merely claimable a1, which waits again
SELECT pg_temp.st('adm_order'), pg_temp.inv('adm_order');
-- gated tasks are queued and outside the claim index
SELECT count(*) FILTER (WHERE gated) AS gated, count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE ready_at IS NOT NULL) AS in_claim_index
  FROM orch.tasks WHERE queue = 'adm_order';
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('a4', 'complete');
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('a1', 'complete');
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('a2', 'complete');
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('a3', 'complete');
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('a5', 'complete');
SELECT pg_temp.claim('adm_order');
-- start order = a4 (priority -1), then a1, a2, a3, a5 (FIFO)
SELECT pg_temp.starts('a_') AS start_order;
-- waiting gated, being handed back and being promoted write no events of
-- their own
SELECT k.label, string_agg(e.from_state || '>' || e.to_state, ' ' ORDER BY e.id) AS events
  FROM orch.history e JOIN tk k ON k.id = e.task_id
 WHERE k.label LIKE 'a_' GROUP BY k.label ORDER BY k.label;

-- A batch enqueue with one key: the first task takes the slot, the rest wait
-- and are promoted in payload order (equal priority and created_at: by id).
SELECT count(*) AS batch_enqueued FROM (
    SELECT orch_enqueue_batch('adm_order', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[],
                              concurrency_key => 'AB')) s;
INSERT INTO tk (label, id)
SELECT 'ab' || (payload ->> 'b'), id FROM orch.tasks WHERE queue = 'adm_order' AND concurrency_key = 'AB';
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('ab1', 'complete');
SELECT pg_temp.claim('adm_order');
SELECT pg_temp.act('ab2', 'complete');

-- ---------------------------------------------------------------------------
-- 2. Hand-over (0.4.0): a task arriving at a full key takes the slot of a
--    member that is merely claimable (not executing) and comes after it in
--    (priority, created_at, id) order; that member waits gated again.  An
--    executing member is never displaced.  Any arrival hands over: an
--    enqueue, a resumed or approved task, a retry that came due.
-- ---------------------------------------------------------------------------
SELECT pg_temp.enq('h1', 'adm_hand', 'H');
-- equal priority, later: h2 waits behind the claimable h1
SELECT pg_temp.enq('h2', 'adm_hand', 'H');
SELECT pg_temp.st('adm_hand');
-- better priority: h1 is handed back, h3 takes the slot
SELECT pg_temp.enq('h3', 'adm_hand', 'H', -1);
SELECT pg_temp.st('adm_hand'), pg_temp.inv('adm_hand');
-- equal to h3 and later: h4 waits
SELECT pg_temp.enq('h4', 'adm_hand', 'H', -1);
SELECT pg_temp.st('adm_hand'), pg_temp.inv('adm_hand');
SELECT pg_temp.claim('adm_hand');
-- the best priority of all, but h3 executes: h5 waits, h3 is not displaced
SELECT pg_temp.enq('h5', 'adm_hand', 'H', -9);
SELECT pg_temp.st('adm_hand'), pg_temp.inv('adm_hand');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h3', 'complete');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h5', 'complete');
-- h4 (priority -1) claimable; h1 and h2 wait.  A claimable task handed
-- over twice keeps its place: h6 (-5) takes h4's slot, h7 (-6) takes h6's
SELECT pg_temp.enq('h6', 'adm_hand', 'H', -5);
SELECT pg_temp.enq('h7', 'adm_hand', 'H', -6);
SELECT pg_temp.st('adm_hand'), pg_temp.inv('adm_hand');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h7', 'complete');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h6', 'complete');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h4', 'complete');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h1', 'complete');
SELECT pg_temp.claim('adm_hand');
SELECT pg_temp.act('h2', 'complete');
SELECT pg_temp.starts('h_') AS start_order;
-- handed back and promoted again: no events of its own, one execution
SELECT k.label, string_agg(e.from_state || '>' || e.to_state, ' ' ORDER BY e.id) AS events
  FROM orch.history e JOIN tk k ON k.id = e.task_id
 WHERE k.label IN ('h1', 'h4') GROUP BY k.label ORDER BY k.label;

-- A resumed task re-enters in created_at order: g1 (older) takes the slot
-- back from the claimable g2 ...
SELECT pg_temp.enq('g1', 'adm_hand_tool', 'G'), pg_temp.enq('g2', 'adm_hand_tool', 'G');
SELECT pg_temp.claim('adm_hand_tool');
SELECT pg_temp.act('g1', 'await_tool');
SELECT pg_temp.act('g1', 'resume');
SELECT pg_temp.claim('adm_hand_tool');
-- ... but not from an executing one: resumed while g2 executes, g1 waits
SELECT pg_temp.act('g1', 'await_tool');
SELECT pg_temp.claim('adm_hand_tool');
SELECT pg_temp.act('g1', 'resume');
SELECT pg_temp.act('g2', 'complete');
SELECT pg_temp.claim('adm_hand_tool');
SELECT pg_temp.act('g1', 'complete');
-- an approved task the same way: f1 (older) takes the slot back from the
-- claimable f2
SELECT pg_temp.enq('f1', 'adm_hand_conf', 'F'), pg_temp.enq('f2', 'adm_hand_conf', 'F');
SELECT pg_temp.claim('adm_hand_conf');
SELECT pg_temp.act('f1', 'await_confirmation');
SELECT pg_temp.act('f1', 'approve');
SELECT pg_temp.claim('adm_hand_conf');
SELECT pg_temp.act('f1', 'complete');
SELECT pg_temp.claim('adm_hand_conf');
SELECT pg_temp.act('f2', 'complete');
-- a retry due at once is claimable, and handed back like any claimable task
SELECT pg_temp.enq('e1', 'adm_hand_retry', 'E'), pg_temp.enq('e2', 'adm_hand_retry', 'E');
SELECT pg_temp.claim('adm_hand_retry');
SELECT pg_temp.act('e1', 'fail', 'RATE_LIMITED@0 seconds');
SELECT pg_temp.enq('e3', 'adm_hand_retry', 'E', -1);
SELECT pg_temp.st('adm_hand_retry'), pg_temp.inv('adm_hand_retry');
SELECT pg_temp.claim('adm_hand_retry');
SELECT pg_temp.act('e3', 'complete');
-- promoted again: the retry is claimable at once, before e2
SELECT pg_temp.claim('adm_hand_retry');
SELECT pg_temp.act('e1', 'complete');
SELECT pg_temp.claim('adm_hand_retry');
SELECT pg_temp.act('e2', 'complete');
SELECT pg_temp.starts('e_') AS start_order;
-- the hand-over stays within its key: a better task of another key takes
-- a slot of its own key, never this key's
SELECT pg_temp.enq('i1', 'adm_hand_keys', 'I'), pg_temp.enq('i2', 'adm_hand_keys', 'I');
SELECT pg_temp.enq('n1', 'adm_hand_keys', 'N', -9);
SELECT pg_temp.st('adm_hand_keys'), pg_temp.inv('adm_hand_keys');
SELECT pg_temp.claim('adm_hand_keys');
SELECT pg_temp.act('i1', 'complete');
SELECT pg_temp.act('n1', 'complete');
SELECT pg_temp.claim('adm_hand_keys');
SELECT pg_temp.act('i2', 'complete');

-- ---------------------------------------------------------------------------
-- 3. No head-of-line blocking: the waiting tasks of a busy key are older and
--    of better priority than the other tasks, yet never block them.
-- ---------------------------------------------------------------------------
SELECT pg_temp.enq('b1', 'adm_hol', 'B'), pg_temp.enq('b2', 'adm_hol', 'B', -10),
       pg_temp.enq('b3', 'adm_hol', 'B', -10), pg_temp.enq('c1', 'adm_hol', 'C'),
       pg_temp.enq('c2', 'adm_hol', 'C'), pg_temp.enq('d1', 'adm_hol'), pg_temp.enq('d2', 'adm_hol', NULL, 5);
-- b2 (priority -10) took B's slot from b1; b1 and b3 wait
SELECT pg_temp.st('adm_hol');
SELECT pg_temp.claim('adm_hol', 1);
SELECT pg_temp.claim('adm_hol', 1);
SELECT pg_temp.claim('adm_hol', 1);
SELECT pg_temp.claim('adm_hol', 10);
SELECT pg_temp.claim('adm_hol', 10);
-- B's slot goes to b3 (priority -10), not to the older b1
SELECT pg_temp.act('b2', 'complete');
SELECT pg_temp.act('c1', 'complete');
-- a batch claim takes at most one task per key (limit 1)
SELECT pg_temp.claim('adm_hol', 10);

-- ---------------------------------------------------------------------------
-- 4. Per-key override (orch_set_concurrency_limit) and limit changes.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_over') ->> 'concurrency_key_limit' AS queue_key_limit;
SELECT orch_set_concurrency_limit('adm_over', 'K', 3);
SELECT queue, key, max_running FROM orch.concurrency_limits WHERE queue = 'adm_over';
SELECT pg_temp.enq('k1', 'adm_over', 'K'), pg_temp.enq('k2', 'adm_over', 'K'),
       pg_temp.enq('k3', 'adm_over', 'K'), pg_temp.enq('k4', 'adm_over', 'K'),
       pg_temp.enq('k5', 'adm_over', 'K'), pg_temp.enq('k6', 'adm_over', 'K'),
       pg_temp.enq('j1', 'adm_over', 'J'), pg_temp.enq('j2', 'adm_over', 'J');
SELECT pg_temp.st('adm_over');
SELECT pg_temp.claim('adm_over');
-- back to the queue's limit (1): running tasks are not preempted, and no
-- slot is refilled while the key is still at or over its limit
SELECT orch_set_concurrency_limit('adm_over', 'K', NULL);
SELECT count(*) AS overrides_left FROM orch.concurrency_limits WHERE queue = 'adm_over';
SELECT pg_temp.act('k1', 'complete');
SELECT pg_temp.act('k2', 'complete');
SELECT pg_temp.act('k3', 'complete');
-- raising a limit promotes at once: per key ...
SELECT orch_set_concurrency_limit('adm_over', 'K', 2);
SELECT pg_temp.st('adm_over');
SELECT orch_set_concurrency_limit('adm_over', 'J', 2);
SELECT pg_temp.st('adm_over');
-- ... and per queue (orch_configure_queue concurrency_key_limit)
SELECT pg_temp.enq('p1', 'adm_raise', 'P'), pg_temp.enq('p2', 'adm_raise', 'P'),
       pg_temp.enq('p3', 'adm_raise', 'P'), pg_temp.enq('p4', 'adm_raise', 'P'),
       pg_temp.enq('q1', 'adm_raise', 'Q'), pg_temp.enq('q2', 'adm_raise', 'Q');
SELECT pg_temp.st('adm_raise');
SELECT orch_configure_queue('adm_raise', '{"concurrency_key_limit": 2}') ->> 'concurrency_key_limit' AS key_limit;
SELECT pg_temp.st('adm_raise');
SELECT orch_configure_queue('adm_raise', '{"concurrency_key_limit": 3}') ->> 'concurrency_key_limit' AS key_limit;
SELECT pg_temp.st('adm_raise');
-- an override below the queue's limit wins for its key: claimable tasks
-- beyond it go back to waiting, and P runs strictly one at a time
SELECT orch_set_concurrency_limit('adm_raise', 'P', 1);
SELECT pg_temp.st('adm_raise'), pg_temp.inv('adm_raise');
SELECT pg_temp.claim('adm_raise');
SELECT pg_temp.act('p1', 'complete');
SELECT pg_temp.claim('adm_raise');
SELECT pg_temp.act('p2', 'complete');
SELECT pg_temp.claim('adm_raise');
SELECT pg_temp.act('p3', 'complete');
SELECT pg_temp.claim('adm_raise');
-- bad calls
SELECT pg_temp.try($$SELECT orch_set_concurrency_limit('adm_over', 'K', 0)$$) AS zero,
       pg_temp.try($$SELECT orch_set_concurrency_limit('adm_over', 'K', -2)$$) AS negative,
       pg_temp.try($$SELECT orch_set_concurrency_limit('adm_nope', 'K', 2)$$) AS unknown_queue,
       pg_temp.try($$SELECT orch_set_concurrency_limit(NULL, 'K', 2)$$) AS null_queue,
       pg_temp.try($$SELECT orch_set_concurrency_limit('adm_over', NULL, 2)$$) AS null_key;
SELECT count(*) AS adm_nope_created FROM orch.queues WHERE name = 'adm_nope';

-- ---------------------------------------------------------------------------
-- 5. Retry waits (0.4.0): a keyed task waiting to retry holds no slot.  It
--    frees its slot when it enters the wait, and the next waiting task of the
--    key is promoted at once; when the retry comes due, the next claim of the
--    queue (or orch_maintain) wakes it and it enters through the gate like
--    any arrival: gated behind an executing task, served in priority/FIFO
--    order.  A retry due at once stays claimable and keeps its place.  A
--    lease lost to expiry: the same, whether the task retries or fails.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_retry', '{"initial_delay": "1 hour", "max_delay": "1 hour"}') IS NOT NULL AS created;
SELECT pg_temp.enq('r1', 'adm_retry', 'R'), pg_temp.enq('r2', 'adm_retry', 'R'),
       pg_temp.enq('r3', 'adm_retry', 'R');
SELECT pg_temp.claim('adm_retry');
-- retry due at once (RATE_LIMITED, retry_after 0): r1 stays claimable and
-- keeps the slot; r2 and r3 still wait
SELECT pg_temp.act('r1', 'fail', 'RATE_LIMITED@0 seconds');
SELECT pg_temp.claim('adm_retry');
-- only RATE_LIMITED honours retry_after: TRANSIENT waits the policy delay
-- (up to an hour).  r1 frees its slot as it enters the wait: r2 is promoted
SELECT pg_temp.act('r1', 'fail', 'TRANSIENT@0 seconds');
SELECT retry_at > now() + interval '10 minutes' AS waits_policy_delay, ready_at IS NULL AS not_claimable,
       gated FROM orch.tasks WHERE id = (SELECT id FROM tk WHERE label = 'r1');
SELECT pg_temp.claim('adm_retry');
-- the retry comes due while r2 executes: nothing happens until a claim ...
SELECT pg_temp.due('r1');
SELECT pg_temp.st('adm_retry');
-- ... which wakes r1; its key is taken by the executing r2: r1 waits gated
SELECT pg_temp.claim('adm_retry');
-- a better task arriving now waits too, and is served first
SELECT pg_temp.enq('r4', 'adm_retry', 'R', -1);
SELECT pg_temp.st('adm_retry'), pg_temp.inv('adm_retry');
SELECT pg_temp.act('r2', 'complete');
SELECT pg_temp.claim('adm_retry');
-- then the retry r1 (older than r3), claimable at once
SELECT pg_temp.act('r4', 'complete');
SELECT pg_temp.claim('adm_retry');
SELECT pg_temp.act('r1', 'complete');
SELECT pg_temp.claim('adm_retry');
SELECT pg_temp.act('r3', 'complete');
SELECT pg_temp.starts('r_') AS start_order;
-- a retry due when its key has room is woken and claimed by the same dequeue;
-- cancelling a retry-wait frees nothing (it held no slot)
SELECT pg_temp.enq('r5', 'adm_retry', 'R');
SELECT pg_temp.claim('adm_retry');
SELECT pg_temp.act('r5', 'fail', 'DEPENDENCY_FAILED@0 seconds');
SELECT pg_temp.due('r5');
SELECT pg_temp.claim('adm_retry');
SELECT pg_temp.enq('r6', 'adm_retry', 'R');
SELECT pg_temp.act('r5', 'fail', 'RETRYABLE');
SELECT pg_temp.claim('adm_retry');
SELECT pg_temp.act('r5', 'cancel');
SELECT pg_temp.claim('adm_retry');
SELECT pg_temp.act('r6', 'complete');

SELECT orch_create_queue('adm_lease1', '{"max_attempts": 1}') IS NOT NULL AS created;
SELECT pg_temp.enq('l1', 'adm_lease1', 'L'), pg_temp.enq('l2', 'adm_lease1', 'L');
SELECT pg_temp.claim('adm_lease1', 1, '1 millisecond');
SELECT pg_sleep(0.05);
-- the next dequeue recovers l1 (its only attempt: failed), which frees the
-- slot for l2 in the same call
SELECT pg_temp.claim('adm_lease1');
SELECT reason_code FROM orch.tasks WHERE id = (SELECT id FROM tk WHERE label = 'l1');
SELECT pg_temp.act('l2', 'complete');

SELECT orch_create_queue('adm_lease2', '{"max_attempts": 3, "initial_delay": "1 hour"}') IS NOT NULL AS created;
SELECT pg_temp.enq('m1', 'adm_lease2', 'M'), pg_temp.enq('m2', 'adm_lease2', 'M');
SELECT pg_temp.claim('adm_lease2', 1, '1 millisecond');
SELECT pg_sleep(0.05);
-- recovered into a retry-wait: m1 frees the slot, and the same dequeue
-- hands it to m2
SELECT pg_temp.claim('adm_lease2');
SELECT reason_code FROM orch.tasks WHERE id = (SELECT id FROM tk WHERE label = 'm1');
SELECT pg_temp.enq('m3', 'adm_lease2', 'M');
SELECT pg_temp.act('m2', 'complete');
-- m1 comes due while m3 is merely claimable: m1 (older) takes the slot back
-- and the same dequeue claims it; m3 waits again
SELECT pg_temp.due('m1');
SELECT pg_temp.claim('adm_lease2');
SELECT pg_temp.act('m1', 'complete');
SELECT pg_temp.claim('adm_lease2');
SELECT pg_temp.act('m3', 'complete');
SELECT pg_temp.starts('m_') AS start_order;

-- ---------------------------------------------------------------------------
-- 6. Leaving the slot set: complete, fail -> failed, cancel (executing,
--    claimable), await_tool, await_confirmation; a resumed or approved task
--    must find a free slot again (an executing holder keeps it); cancelling
--    a waiting task frees nothing.
-- ---------------------------------------------------------------------------
SELECT pg_temp.enq('x' || g, 'adm_rel', 'X') FROM generate_series(1, 8) g;
SELECT pg_temp.st('adm_rel');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('x1', 'complete');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('x2', 'fail', 'NON_RETRYABLE');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('x3', 'cancel');
-- x4 is claimable, never executed: cancelling it frees its slot
SELECT pg_temp.act('x4', 'cancel');
-- x6 waits gated: cancelling it frees nothing, x5 keeps the slot
SELECT pg_temp.act('x6', 'cancel');
SELECT gated FROM orch.tasks WHERE id = (SELECT id FROM tk WHERE label = 'x6');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('x5', 'await_tool');
SELECT pg_temp.claim('adm_rel');
-- the tool answers while x7 executes: x5 waits for the slot, not claimable
SELECT pg_temp.act('x5', 'resume');
-- x7 parks: the slot goes to x5 (older than x8)
SELECT pg_temp.act('x7', 'await_confirmation');
SELECT pg_temp.claim('adm_rel');
SELECT resume_data FROM orch_tasks WHERE task_id = (SELECT id FROM tk WHERE label = 'x5');
SELECT pg_temp.act('x5', 'complete');
SELECT pg_temp.claim('adm_rel');
-- approved while x8 executes: x7 waits
SELECT pg_temp.act('x7', 'approve');
SELECT pg_temp.act('x8', 'complete');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('x7', 'complete');
-- a rejected confirmation ends the task; it held no slot, so nothing moves
SELECT pg_temp.enq('y1', 'adm_rel', 'Y'), pg_temp.enq('y2', 'adm_rel', 'Y'), pg_temp.enq('y3', 'adm_rel', 'Y');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('y1', 'await_confirmation');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('y1', 'reject');
SELECT pg_temp.act('y2', 'complete');
SELECT pg_temp.claim('adm_rel');
SELECT pg_temp.act('y3', 'complete');
-- nothing left gated or holding a slot in adm_rel
SELECT count(*) FILTER (WHERE gated) AS gated, count(*) FILTER (WHERE ready_at IS NOT NULL) AS claimable
  FROM orch.tasks WHERE queue = 'adm_rel';

-- ---------------------------------------------------------------------------
-- 7. Not due yet (0.4.0): a keyed task enqueued with a future run_at holds
--    no slot and is not claimable; it neither blocks nor displaces a due
--    task of its key, whatever its priority.  When due, the next claim of
--    the queue (or orch_maintain) wakes it and it enters through the gate.
--    A lowered limit applies to claims made after the change.
-- ---------------------------------------------------------------------------
SELECT pg_temp.enq('v1', 'adm_delay', 'V', -5, NULL, now() + interval '1 hour');
SELECT pg_temp.enq('v2', 'adm_delay', 'V');
SELECT pg_temp.st('adm_delay'), pg_temp.inv('adm_delay');
SELECT pg_temp.claim('adm_delay');
SELECT pg_temp.enq('v3', 'adm_delay', 'V');
-- cancelling a task that is not due frees nothing: v3 still waits
SELECT pg_temp.enq('v4', 'adm_delay', 'V', -5, NULL, now() + interval '1 hour');
SELECT pg_temp.act('v4', 'cancel');
-- v1 comes due: it stays out until a claim wakes it, then waits gated
-- behind the executing v2
SELECT pg_temp.due('v1');
SELECT pg_temp.st('adm_delay');
SELECT pg_temp.claim('adm_delay');
-- v2 done: v1 (priority -5) goes before the older v3
SELECT pg_temp.act('v2', 'complete');
SELECT pg_temp.claim('adm_delay');
SELECT pg_temp.act('v1', 'complete');
SELECT pg_temp.claim('adm_delay');
SELECT pg_temp.act('v3', 'complete');
SELECT pg_temp.starts('v_') AS start_order;
-- due while its key is free: woken and claimed by the same dequeue
SELECT pg_temp.enq('v5', 'adm_delay', 'V', NULL, NULL, now() + interval '1 hour');
SELECT pg_temp.claim('adm_delay');
SELECT pg_temp.due('v5');
SELECT pg_temp.claim('adm_delay');
-- orch_maintain wakes due tasks too: v6 waits gated behind v5, v7 is free
SELECT pg_temp.enq('v6', 'adm_delay', 'V', NULL, NULL, now() + interval '1 hour'),
       pg_temp.enq('v7', 'adm_delay', 'V7', NULL, NULL, now() + interval '1 hour');
SELECT pg_temp.due('v6'), pg_temp.due('v7');
SELECT action, count > 0 AS woke FROM orch_maintain() WHERE action = 'delayed_woken';
SELECT pg_temp.st('adm_delay'), pg_temp.inv('adm_delay');
SELECT pg_temp.act('v5', 'complete');
SELECT pg_temp.claim('adm_delay');
SELECT pg_temp.act('v6', 'complete');
SELECT pg_temp.act('v7', 'complete');

SELECT orch_create_queue('adm_lower', '{"concurrency_key_limit": 3}') IS NOT NULL AS created;
SELECT pg_temp.enq('w1', 'adm_lower', 'W'), pg_temp.enq('w2', 'adm_lower', 'W'), pg_temp.enq('w3', 'adm_lower', 'W');
SELECT orch_configure_queue('adm_lower', '{"concurrency_key_limit": 1}') ->> 'concurrency_key_limit' AS key_limit;
SELECT count(*) AS claimed FROM orch_dequeue('adm_lower', 'adm-worker', 10);
SELECT count(*) AS executing FROM orch.tasks WHERE queue = 'adm_lower' AND state = 'executing';

-- ---------------------------------------------------------------------------
-- 8. Limit 2: at any time the claimable tasks of the key are the best
--    waiting ones (as many as the executing ones leave room for), by
--    priority then FIFO; executing tasks keep their slots.  inv() checks it
--    after every step.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_two', '{"concurrency_key_limit": 2}') IS NOT NULL AS created;
SELECT pg_temp.enq('t1', 'adm_two', 'T');
SELECT pg_temp.enq('t2', 'adm_two', 'T');
SELECT pg_temp.st('adm_two'), pg_temp.inv('adm_two');
-- t3 (-1) takes the slot of the worst member, t2
SELECT pg_temp.enq('t3', 'adm_two', 'T', -1);
SELECT pg_temp.st('adm_two'), pg_temp.inv('adm_two');
-- t4 (-2) takes t1's
SELECT pg_temp.enq('t4', 'adm_two', 'T', -2);
SELECT pg_temp.st('adm_two'), pg_temp.inv('adm_two');
-- t5 (5) is worse than both: waits
SELECT pg_temp.enq('t5', 'adm_two', 'T', 5);
SELECT pg_temp.st('adm_two'), pg_temp.inv('adm_two');
-- one claim takes the best, t4
SELECT pg_temp.claim('adm_two', 1);
SELECT pg_temp.inv('adm_two');
-- t6 (-3) takes the slot of the claimable t3, not of the executing t4
SELECT pg_temp.enq('t6', 'adm_two', 'T', -3);
SELECT pg_temp.st('adm_two'), pg_temp.inv('adm_two');
SELECT pg_temp.claim('adm_two');
SELECT pg_temp.inv('adm_two');
-- both slots execute: t7 (-9) waits
SELECT pg_temp.enq('t7', 'adm_two', 'T', -9);
SELECT pg_temp.st('adm_two'), pg_temp.inv('adm_two');
-- freed slots go to t7, then t3
SELECT pg_temp.act('t4', 'complete');
SELECT pg_temp.inv('adm_two');
SELECT pg_temp.act('t6', 'complete');
SELECT pg_temp.inv('adm_two');
SELECT pg_temp.claim('adm_two');
SELECT pg_temp.act('t7', 'complete');
SELECT pg_temp.inv('adm_two');
SELECT pg_temp.act('t3', 'complete');
SELECT pg_temp.inv('adm_two');
SELECT pg_temp.claim('adm_two');
SELECT pg_temp.act('t1', 'complete');
SELECT pg_temp.act('t2', 'complete');
SELECT pg_temp.claim('adm_two');
SELECT pg_temp.act('t5', 'complete');
SELECT pg_temp.starts('t_') AS start_order;
-- a batch enqueue of four better tasks: the two first take both claimable
-- slots (in payload order), the others wait
SELECT orch_create_queue('adm_two_batch', '{"concurrency_key_limit": 2}') IS NOT NULL AS created;
SELECT pg_temp.enq('u1', 'adm_two_batch', 'U'), pg_temp.enq('u2', 'adm_two_batch', 'U');
SELECT count(*) AS batch_enqueued FROM (
    SELECT orch_enqueue_batch('adm_two_batch', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[],
                              priority => -1, concurrency_key => 'U')) s;
INSERT INTO tk (label, id)
SELECT 'ub' || (payload ->> 'n'), id FROM orch.tasks WHERE queue = 'adm_two_batch' AND concurrency_key = 'U'
   AND payload ? 'n';
SELECT pg_temp.st('adm_two_batch'), pg_temp.inv('adm_two_batch');
SELECT pg_temp.claim('adm_two_batch');
SELECT pg_temp.act('ub1', 'complete');
SELECT pg_temp.act('ub2', 'complete');
SELECT pg_temp.claim('adm_two_batch');
SELECT pg_temp.act('ub3', 'complete');
SELECT pg_temp.act('ub4', 'complete');
SELECT pg_temp.claim('adm_two_batch');
SELECT pg_temp.act('u1', 'complete');
SELECT pg_temp.act('u2', 'complete');
SELECT pg_temp.starts('u%') AS start_order;

-- ---------------------------------------------------------------------------
-- 9. owner_limit and queue_limit at claim time: executing tasks only; an
--    owner at its limit is skipped, never blocks the others.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_owner', '{"owner_limit": 2}') ->> 'owner_limit' AS owner_limit;
SELECT pg_temp.enq('o_a1', 'adm_owner', NULL, NULL, 'alice'), pg_temp.enq('o_a2', 'adm_owner', NULL, NULL, 'alice'),
       pg_temp.enq('o_a3', 'adm_owner', NULL, NULL, 'alice'), pg_temp.enq('o_b1', 'adm_owner', NULL, NULL, 'bob'),
       pg_temp.enq('o_a4', 'adm_owner', NULL, -5, 'alice'), pg_temp.enq('o_b2', 'adm_owner', NULL, NULL, 'bob'),
       pg_temp.enq('o_b3', 'adm_owner', NULL, NULL, 'bob'), pg_temp.enq('o_n1', 'adm_owner');
-- one by one: alice's a4 (priority -5) and a1 first, then her older a2/a3
-- are passed over for bob's and the ownerless task
SELECT pg_temp.claim('adm_owner', 1);
SELECT pg_temp.claim('adm_owner', 1);
SELECT pg_temp.claim('adm_owner', 1);
SELECT pg_temp.claim('adm_owner', 1);
SELECT pg_temp.claim('adm_owner', 1);
SELECT pg_temp.claim('adm_owner', 10);
SELECT pg_temp.act('o_a1', 'complete');
SELECT pg_temp.claim('adm_owner', 10);
-- a task parked for a tool does not count as running
SELECT pg_temp.act('o_b1', 'await_tool');
SELECT pg_temp.claim('adm_owner', 10);
SELECT pg_temp.claim('adm_owner', 10);
SELECT count(*) AS alice_running FROM orch.tasks WHERE queue = 'adm_owner' AND owner = 'alice' AND state = 'executing';

SELECT orch_create_queue('adm_qlim', '{"queue_limit": 2}') ->> 'queue_limit' AS queue_limit;
SELECT pg_temp.enq('ql' || g, 'adm_qlim') FROM generate_series(1, 5) g;
SELECT pg_temp.claim('adm_qlim', 10);
SELECT pg_temp.claim('adm_qlim', 10);
SELECT pg_temp.act('ql1', 'complete');
SELECT pg_temp.claim('adm_qlim', 10);
SELECT pg_temp.act('ql2', 'await_confirmation');
SELECT pg_temp.claim('adm_qlim', 10);
-- raising the limit lets more run at the next claim
SELECT orch_configure_queue('adm_qlim', '{"queue_limit": 4}') ->> 'queue_limit' AS queue_limit;
SELECT pg_temp.claim('adm_qlim', 10);
SELECT count(*) AS running FROM orch.tasks WHERE queue = 'adm_qlim' AND state = 'executing';

-- owner_limit, queue_limit and a concurrency key together
SELECT orch_create_queue('adm_mix', '{"owner_limit": 1, "queue_limit": 3}') IS NOT NULL AS created;
SELECT pg_temp.enq('z1', 'adm_mix', 'Z', NULL, 'ann'), pg_temp.enq('z2', 'adm_mix', 'Z', NULL, 'ben'),
       pg_temp.enq('z3', 'adm_mix', NULL, NULL, 'ann'), pg_temp.enq('z4', 'adm_mix', NULL, NULL, 'cid'),
       pg_temp.enq('z5', 'adm_mix', NULL, NULL, 'dan'), pg_temp.enq('z6', 'adm_mix', NULL, NULL, 'eve');
SELECT pg_temp.claim('adm_mix', 10);
SELECT pg_temp.act('z1', 'complete');
SELECT pg_temp.claim('adm_mix', 10);

-- ---------------------------------------------------------------------------
-- 10. Rate limits: at most N admitted enqueues per (queue, owner) in any
--     sliding window; the excess is recorded as a failed task (rate_limited)
--     whose id is returned, or raises OR006 and records nothing.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_rate', '{"rate_limit": {"count": 5, "per": "1 hour"}}') -> 'rate_limit' AS rate_limit;
CREATE TEMP TABLE rate_ids (n serial, who text, id bigint);
CREATE FUNCTION pg_temp.rstored() RETURNS text LANGUAGE sql AS $$
    SELECT format('tasks=%s queued=%s rate_limited=%s events=%s window=%s',
        (SELECT count(*) FROM orch.tasks WHERE queue = 'adm_rate'),
        (SELECT count(*) FROM orch.tasks WHERE queue = 'adm_rate' AND state = 'queued'),
        (SELECT count(*) FROM orch.tasks WHERE queue = 'adm_rate' AND state = 'failed' AND reason_code = 'rate_limited'),
        (SELECT count(*) FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id WHERE t.queue = 'adm_rate'),
        (SELECT count(*) FROM orch.rate_window WHERE queue = 'adm_rate'))
$$;
-- enq_states(queue, owner, n, on_rate_limit): n enqueues, one statement each;
-- the states of the tasks they return, in order (or the SQLSTATE raised).
CREATE FUNCTION pg_temp.enq_states(q text, own text, n int, mode text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE tid bigint; res text[] := '{}'; s text;
BEGIN
    FOR i IN 1 .. n LOOP
        BEGIN
            tid := orch_enqueue(q, jsonb_build_object('i', i), owner => own, on_rate_limit => mode);
            SELECT t.state INTO s FROM orch.tasks t WHERE t.id = tid;
            res := res || coalesce(s, 'MISSING');
        EXCEPTION WHEN OTHERS THEN
            res := res || SQLSTATE::text;
        END;
    END LOOP;
    RETURN array_to_string(res, ' ');
END $$;
-- a burst of 8 by alice: 5 admitted, 3 recorded as rate_limited
INSERT INTO rate_ids (who, id)
SELECT 'alice', orch_enqueue('adm_rate', jsonb_build_object('i', g), owner => 'alice')
  FROM generate_series(1, 8) g;
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids, count(id) AS not_null FROM rate_ids;
SELECT r.n, t.state, t.reason_code, t.finished_at IS NOT NULL AS finished, t.ready_at IS NULL AS not_claimable
  FROM rate_ids r JOIN orch.tasks t ON t.id = r.id ORDER BY r.n;
SELECT r.n, e.from_state, e.to_state, e.reason_code
  FROM rate_ids r JOIN orch.history e ON e.task_id = r.id ORDER BY r.n, e.id;
SELECT state, reason_code FROM orch_status((SELECT id FROM rate_ids WHERE n = 8));
SELECT count(*) AS rate_limited_dead_letters
  FROM orch_dead_letters WHERE task_id IN (SELECT id FROM rate_ids);
SELECT pg_temp.rstored();
-- bob has his own window
INSERT INTO rate_ids (who, id)
SELECT 'bob', orch_enqueue('adm_rate', jsonb_build_object('i', g), owner => 'bob')
  FROM generate_series(1, 3) g;
SELECT who, string_agg(t.state, ' ' ORDER BY r.n) FROM rate_ids r JOIN orch.tasks t ON t.id = r.id
 GROUP BY who ORDER BY who;
SELECT pg_temp.rstored();
-- on_rate_limit => 'error': OR006, nothing recorded; admitted calls are unaffected
SELECT pg_temp.try($$SELECT orch_enqueue('adm_rate', '{"x": 1}', owner => 'alice', on_rate_limit => 'error')$$) AS alice_error;
SELECT pg_temp.rstored();
SELECT pg_temp.try($$SELECT orch_enqueue('adm_rate', '{"x": 1}', owner => 'bob', on_rate_limit => 'error') > 0$$) AS bob_error_mode_admitted;
SELECT pg_temp.enq_states('adm_rate', 'alice', 1, 'record') AS alice_record;
SELECT pg_temp.try($$SELECT orch_enqueue('adm_rate', '{"x": 1}', owner => 'alice', on_rate_limit => 'drop')$$) AS bad_on_rate_limit;
SELECT pg_temp.rstored();
-- on_exceed "error" for the queue: the default becomes OR006, 'record' still records
SELECT orch_configure_queue('adm_rate', '{"rate_limit": {"count": 5, "per": "1 hour", "on_exceed": "error"}}') -> 'rate_limit' AS rate_limit;
SELECT pg_temp.try($$SELECT orch_enqueue('adm_rate', '{"x": 3}', owner => 'alice')$$) AS alice_default;
SELECT pg_temp.rstored();
SELECT pg_temp.enq_states('adm_rate', 'alice', 1, 'record') AS alice_record;
SELECT pg_temp.rstored();
-- bob has 1 admission left: a batch of 3 raises OR006 and records nothing ...
SELECT pg_temp.try($$SELECT count(*) FROM orch_enqueue_batch('adm_rate', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[], owner => 'bob')$$) AS bob_batch;
SELECT pg_temp.rstored();
-- ... or, recording, admits one and records two
CREATE TEMP TABLE rate_batch AS
SELECT b.id, b.ord
  FROM orch_enqueue_batch('adm_rate', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[], owner => 'bob',
                          on_rate_limit => 'record') WITH ORDINALITY AS b(id, ord);
SELECT b.ord, t.state, t.reason_code, t.payload FROM rate_batch b JOIN orch.tasks t ON t.id = b.id ORDER BY b.ord;
SELECT pg_temp.rstored();
-- rejected tasks are never handed out: a claim gets the 10 admitted ones
SELECT count(*) AS claimed FROM orch_dequeue('adm_rate', 'adm-worker', 100);

-- replays of an idempotency key are not new enqueues: they use no admission
SELECT orch_create_queue('adm_rate_key', '{"rate_limit": {"count": 3, "per": "1 hour"}}') IS NOT NULL AS created;
SELECT orch_enqueue('adm_rate_key', '{"k": 1}', owner => 'dave', idempotency_key => 'adm-rate-key') AS rk \gset
SELECT count(*) FILTER (WHERE orch_enqueue('adm_rate_key', '{"k": 1}', owner => 'dave',
                                           idempotency_key => 'adm-rate-key') = :rk) AS same_id_replays
  FROM generate_series(1, 6);
SELECT pg_temp.enq_states('adm_rate_key', 'dave', 3) AS dave_plain;
SELECT count(*) AS tasks FROM orch.tasks WHERE queue = 'adm_rate_key';

-- the window slides: 2 per 2 seconds; carol's first admission leaves the
-- window before her second one does
SELECT orch_create_queue('adm_rate_win', '{"rate_limit": {"count": 2, "per": "2 seconds"}}') -> 'rate_limit' AS rate_limit;
SELECT pg_temp.enq_states('adm_rate_win', 'carol', 1) AS carol_at_0s;
SELECT pg_sleep(1.0);
SELECT pg_temp.enq_states('adm_rate_win', 'carol', 2) AS carol_at_1s;
SELECT pg_sleep(1.1);
SELECT pg_temp.enq_states('adm_rate_win', 'carol', 2) AS carol_at_2s;
-- per queue: alice's burst in adm_rate does not count here
SELECT pg_temp.enq_states('adm_rate_win', 'alice', 1) AS alice;

-- ---------------------------------------------------------------------------
-- 11. Idempotency keys expire after the queue's idempotency_ttl; an expired
--     key may be reused and then names the new task.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_ttl', '{"idempotency_ttl": "1 second"}') ->> 'idempotency_ttl' AS ttl;
SELECT orch_enqueue('adm_ttl', '{"v": 1}', idempotency_key => 'adm-ttl-key') AS t1 \gset
SELECT orch_enqueue('adm_ttl', '{"v": 1}', idempotency_key => 'adm-ttl-key') = :t1 AS replay_same_id,
       pg_temp.try($$SELECT orch_enqueue('adm_ttl', '{"v": 2}', idempotency_key => 'adm-ttl-key')$$) AS other_payload;
SELECT count(*) AS tasks FROM orch.tasks WHERE queue = 'adm_ttl';
SELECT pg_sleep(1.1);
SELECT orch_enqueue('adm_ttl', '{"v": 2}', idempotency_key => 'adm-ttl-key') AS t2 \gset
SELECT :t2 <> :t1 AS new_task,
       orch_enqueue('adm_ttl', '{"v": 2}', idempotency_key => 'adm-ttl-key') = :t2 AS replay_names_new_task,
       pg_temp.try($$SELECT orch_enqueue('adm_ttl', '{"v": 1}', idempotency_key => 'adm-ttl-key')$$) AS old_payload_now_conflicts;
SELECT count(*) AS tasks, count(*) FILTER (WHERE state = 'queued') AS queued FROM orch.tasks WHERE queue = 'adm_ttl';
SELECT count(*) AS key_rows, bool_and(task_id = :t2) AS key_names_new_task
  FROM orch.idempotency_keys WHERE key = 'adm-ttl-key';
-- an expired key may also be reused with the same payload: a new task
SELECT pg_sleep(1.1);
SELECT orch_enqueue('adm_ttl', '{"v": 2}', idempotency_key => 'adm-ttl-key') NOT IN (:t1, :t2) AS same_payload_new_task;
SELECT count(*) AS tasks FROM orch.tasks WHERE queue = 'adm_ttl';

-- ---------------------------------------------------------------------------
-- 12. Bad admission settings: 22023, and nothing changes.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('adm_set') ->> 'concurrency_key_limit' AS key_limit;
SELECT s AS setting, pg_temp.try(format('SELECT orch_configure_queue(%L, %L)', 'adm_set', s)) AS configure,
       pg_temp.try(format('SELECT orch_create_queue(%L, %L)', 'adm_set_new', s)) AS create_new
  FROM unnest(ARRAY[
    '{"concurrency_key_limit": 0}', '{"concurrency_key_limit": -1}', '{"concurrency_key_limit": 1.5}',
    '{"concurrency_key_limit": "two"}', '{"concurrency_key_limit": true}',
    '{"owner_limit": 0}', '{"owner_limit": -3}', '{"owner_limit": "x"}',
    '{"queue_limit": 0}', '{"queue_limit": 2.5}',
    '{"rate_limit": 5}', '{"rate_limit": {"count": 5}}', '{"rate_limit": {"per": "1 hour"}}',
    '{"rate_limit": {"count": 0, "per": "1 hour"}}', '{"rate_limit": {"count": -1, "per": "1 hour"}}',
    '{"rate_limit": {"count": 5, "per": "-1 hour"}}', '{"rate_limit": {"count": 5, "per": "0 seconds"}}',
    '{"rate_limit": {"count": 5, "per": "soon"}}', '{"rate_limit": {"count": 5, "per": "1 hour", "on_exceed": "drop"}}',
    '{"rate_limit": {"count": 5, "per": "1 hour", "burst": 2}}',
    '{"idempotency_ttl": "-1 hour"}', '{"idempotency_ttl": "0 seconds"}', '{"idempotency_ttl": "later"}',
    '{"concurrency_limit": 2}'
  ]) s;
SELECT count(*) AS adm_set_new_created FROM orch.queues WHERE name = 'adm_set_new';
SELECT orch_queue_settings('adm_set') = orch_create_queue('adm_set_ref') AS adm_set_unchanged;
-- good values, intervals as numbers of seconds, and null back to the default
SELECT s -> 'concurrency_key_limit' AS key_limit, s -> 'owner_limit' AS owner_limit,
       s -> 'queue_limit' AS queue_limit, s -> 'rate_limit' AS rate_limit, s -> 'idempotency_ttl' AS ttl
  FROM orch_configure_queue('adm_set', '{"concurrency_key_limit": 4, "owner_limit": 2, "queue_limit": 9,
        "rate_limit": {"count": 10, "per": 60, "on_exceed": "error"}, "idempotency_ttl": 3600}') s;
SELECT s -> 'concurrency_key_limit' AS key_limit, s -> 'owner_limit' AS owner_limit,
       s -> 'queue_limit' AS queue_limit, s -> 'rate_limit' AS rate_limit, s -> 'idempotency_ttl' AS ttl
  FROM orch_configure_queue('adm_set', '{"concurrency_key_limit": null, "owner_limit": null, "queue_limit": null,
        "rate_limit": null, "idempotency_ttl": null}') s;

-- ---------------------------------------------------------------------------
-- 13. Slot accounting needs READ COMMITTED: 0A000 otherwise.
-- ---------------------------------------------------------------------------
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.try($$SELECT orch_enqueue('adm_iso', '{}', concurrency_key => 'I')$$) AS keyed_enqueue_rr;
SELECT pg_temp.try($$SELECT orch_enqueue('adm_iso', '{}') > 0$$) AS plain_enqueue_rr;
SELECT pg_temp.try($$SELECT count(*) FROM orch_dequeue('adm_owner', 'adm-worker')$$) AS limited_claim_rr;
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.try($$SELECT orch_enqueue('adm_iso', '{}', concurrency_key => 'I')$$) AS keyed_enqueue_serializable;
ROLLBACK;
SELECT count(*) AS adm_iso_tasks FROM orch.tasks WHERE queue = 'adm_iso';

-- ---------------------------------------------------------------------------
-- 14. A task approved while its key is busy waits gated; approving it again
--     is refused (OR001) and the first approval's note reaches the claim.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('adm_appr', '{"n": 1}', concurrency_key => 'A') AS appr_a \gset
SELECT lease_token AS appr_ta FROM orch_dequeue('adm_appr', 'adm-worker') \gset
SELECT orch_await_confirmation(:appr_a, :'appr_ta');
SELECT orch_enqueue('adm_appr', '{"n": 2}', concurrency_key => 'A') AS appr_b \gset
SELECT lease_token AS appr_tb FROM orch_dequeue('adm_appr', 'adm-worker') \gset
SELECT orch_confirm(:appr_a, true, 'alice', 'first');
SELECT gated AS approved_but_gated FROM orch.tasks WHERE id = :appr_a;
SELECT pg_temp.try(format($$SELECT orch_confirm(%s, true, 'bob', 'second')$$, :appr_a)) AS approve_again;
SELECT orch_complete(:appr_b, :'appr_tb');
SELECT task_id = :appr_a AS approved_task_claimed, resume_data ->> 'note' AS note
  FROM orch_dequeue('adm_appr', 'adm-worker');

-- ---------------------------------------------------------------------------
-- Clean up: drop this file's queues (their unfinished tasks are cancelled).
-- ---------------------------------------------------------------------------
SELECT name, pg_temp.try(format('SELECT ''dropped'' FROM orch_drop_queue(%L, force => true)', name)) AS dropped
  FROM orch.queues WHERE name LIKE 'adm\_%' ORDER BY name;
SELECT count(*) AS queues_left FROM orch.queues WHERE name LIKE 'adm\_%';
SELECT count(*) AS unfinished_left FROM orch.tasks
 WHERE queue LIKE 'adm\_%' AND state NOT IN ('completed', 'failed', 'cancelled');
SELECT count(*) FILTER (WHERE gated) AS gated_left, count(*) FILTER (WHERE ready_at IS NOT NULL) AS claimable_left
  FROM orch.tasks WHERE queue LIKE 'adm\_%';
-- a dropped queue takes its per-key overrides with it
SELECT count(*) AS overrides_left FROM orch.concurrency_limits WHERE queue LIKE 'adm\_%';
