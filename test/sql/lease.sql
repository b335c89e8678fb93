-- lease: what a worker holding a lease does besides finishing its task
-- (src/task_lease.c; SPEC §7 "Worker conveniences"; docs/semantics.md
-- "Release and progress"): orch_heartbeat with progress and the new expiry,
-- orch_progress (no event, kept across attempts), orch_release (the attempt
-- given back, the retry-wait state, a delay, a key's slot).  Each is fenced
-- by the lease token as orch_complete is.  Time is moved by updating the
-- row (a due retry_at, an expired lease), never by sleeping.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- claim(tag, queue, lease): claims one task of the queue, kept under tag
-- (the latest claim of a tag is the one tok() and tid() read); returns the
-- attempt number, or 0 when nothing was claimed.
CREATE TEMP TABLE claims (seq serial, tag text, task_id bigint, lease_token uuid, attempt int,
                          lease_expires_at timestamptz);
CREATE FUNCTION pg_temp.claim(tg text, q text, lease interval DEFAULT NULL) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    INSERT INTO claims (tag, task_id, lease_token, attempt, lease_expires_at)
    SELECT tg, d.task_id, d.lease_token, d.attempt, d.lease_expires_at
      FROM orch_dequeue(q, 'worker-' || tg, 1, lease) d;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN RETURN 0; END IF;
    RETURN (SELECT attempt FROM claims WHERE tag = tg ORDER BY seq DESC LIMIT 1);
END $$;
CREATE FUNCTION pg_temp.tok(tg text) RETURNS uuid LANGUAGE sql AS
  $$ SELECT lease_token FROM claims WHERE tag = tg ORDER BY seq DESC LIMIT 1 $$;
CREATE FUNCTION pg_temp.tid(tg text) RETURNS bigint LANGUAGE sql AS
  $$ SELECT task_id FROM claims WHERE tag = tg ORDER BY seq DESC LIMIT 1 $$;
-- events(task): the task's history as from>to (reason, attempt N)
CREATE FUNCTION pg_temp.events(t bigint) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(coalesce(h.from_state, '-') || '>' || h.to_state || ' (' || coalesce(h.reason_code, '-')
                      || ', attempt ' || coalesce(h.attempt::text, '-') || ')', '; ' ORDER BY h.at, h.to_state)
      FROM orch_history(t) h WHERE h.kind = 'event' $$;
-- attempts(task): the task's attempt rows as N:outcome
CREATE FUNCTION pg_temp.attempts(t bigint) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(a.attempt || ':' || a.outcome, ', ' ORDER BY a.attempt_id)
      FROM orch_attempts a WHERE a.task_id = t $$;
-- due(task): its retry_at and run_at moved into the past (a plain update,
-- as admission.sql does: the next claim of its queue lets it in)
CREATE FUNCTION pg_temp.due(t bigint) RETURNS text LANGUAGE sql AS $$
    UPDATE orch.tasks SET run_at = least(run_at, now() - interval '1 second'),
                          retry_at = least(retry_at, now() - interval '1 second')
     WHERE id = t;
    SELECT 'due' $$;
-- expire(task): its lease run out (an allowed self-transition of executing)
CREATE FUNCTION pg_temp.expire(t bigint) RETURNS text LANGUAGE sql AS $$
    UPDATE orch.tasks SET lease_expires_at = now() - interval '1 second' WHERE id = t;
    SELECT 'expired' $$;

SELECT orch_create_queue('lq', '{"lease": "5 minutes"}') IS NOT NULL AS created;

-- ---------------------------------------------------------------------------
-- 1. orch_heartbeat(task_id, lease_token, extend, progress): the lease
--    extended, the progress set, the state and the new expiry returned.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('lq', '{"n": 1}') AS h1 \gset
SELECT pg_temp.claim('h1', 'lq') AS attempt;
SELECT count(*) AS events_before FROM orch_history(:h1) \gset
SELECT state, lease_expires_at - now() AS extended_by, lease_expires_at AS hb_expiry
  FROM orch_heartbeat(:h1, pg_temp.tok('h1'), '1 hour', '{"done": 10}') \gset
SELECT :'state' AS state, :'extended_by' AS extended_by;
-- the expiry returned is the one stored; the progress is set
SELECT lease_expires_at = :'hb_expiry' AS as_returned, progress FROM orch_tasks WHERE task_id = :h1;
-- extend NULL: the queue's lease (5 minutes); progress NULL: left as it is
SELECT state, lease_expires_at - now() AS extended_by
  FROM orch_heartbeat(:h1, pg_temp.tok('h1'), NULL, NULL);
SELECT progress FROM orch_tasks WHERE task_id = :h1;
-- the three-argument orch_heartbeat is there as it was (returns text)
SELECT orch_heartbeat(:h1, pg_temp.tok('h1'), '2 minutes') AS old_form,
       pg_typeof(orch_heartbeat(:h1, pg_temp.tok('h1'))) AS old_type;
-- no event and no attempt for any of it
SELECT count(*) - :events_before AS new_events, pg_temp.attempts(:h1) AS attempts FROM orch_history(:h1);
-- the lease never goes past the task's timeout (claimed_at + timeout)
SELECT orch_enqueue('lq', '{"n": 2}', timeout => '10 minutes') AS h2 \gset
SELECT pg_temp.claim('h2', 'lq') AS attempt;
SELECT h.state, h.lease_expires_at = t.claimed_at + t.timeout AS capped_by_timeout
  FROM orch_heartbeat(:h2, pg_temp.tok('h2'), '1 day', '{"step": "a"}') h,
       LATERAL (SELECT claimed_at, timeout FROM orch.tasks WHERE id = :h2) t;
-- cancelled under this lease: ('cancelled', NULL), no error; nothing changes
SELECT orch_cancel(:h2, 'stop it');
SELECT to_jsonb(t) AS before FROM orch.tasks t WHERE id = :h2 \gset
SELECT * FROM orch_heartbeat(:h2, pg_temp.tok('h2'), '1 minute', '{"step": "b"}');
SELECT to_jsonb(t) = :'before'::jsonb AS unchanged, progress FROM orch.tasks t WHERE id = :h2;
-- the fence and the arguments (SQLSTATE, and the task unchanged)
SELECT orch_enqueue('lq', '{"n": 3}') AS h3 \gset
SELECT pg_temp.claim('h3', 'lq') AS attempt;
SELECT to_jsonb(t) AS before FROM orch.tasks t WHERE id = :h3 \gset
SELECT c.label, pg_temp.try(format(c.q, :h3, quote_literal(pg_temp.tok('h3')))) AS result
  FROM (VALUES
    (1, 'a stale token: OR003', $$SELECT state FROM orch_heartbeat(%s, '00000000-0000-4000-8000-000000000001', '1 minute', '{}')$$),
    (3, 'an unknown task: OR005', $$SELECT state FROM orch_heartbeat(-1, %2$s, '1 minute', '{}')$$),
    (4, 'task_id NULL: 22004', $$SELECT state FROM orch_heartbeat(NULL, %2$s, '1 minute', '{}')$$),
    (5, 'lease_token NULL: 22004', $$SELECT state FROM orch_heartbeat(%s, NULL, '1 minute', '{}')$$),
    (6, 'extend 0: 22023', $$SELECT state FROM orch_heartbeat(%s, %s, '0', '{}')$$),
    (7, 'extend negative: 22023', $$SELECT state FROM orch_heartbeat(%s, %s, '-1 minute', '{}')$$),
    (8, 'extend over 100 years: 22023', $$SELECT state FROM orch_heartbeat(%s, %s, '200 years', '{}')$$)
  ) AS c(ord, label, q)
 ORDER BY c.ord;
SELECT to_jsonb(t) = :'before'::jsonb AS unchanged FROM orch.tasks t WHERE id = :h3;
-- (the token of h1 on a cancelled task h2 is a stale token too)
SELECT pg_temp.try(format($$SELECT state FROM orch_heartbeat(%s, %L, '1 minute', '{}')$$, :h2, pg_temp.tok('h1'))) AS other_token_on_cancelled;
-- a progress over orchestrator.max_payload_size: 22023, nothing changed
SET orchestrator.max_payload_size = 1000;
SELECT pg_temp.try(format($$SELECT state FROM orch_heartbeat(%s, %L, '1 minute', jsonb_build_object('x', repeat('x', 2000)))$$,
                          :h3, pg_temp.tok('h3'))) AS too_large;
RESET orchestrator.max_payload_size;
SELECT to_jsonb(t) = :'before'::jsonb AS unchanged FROM orch.tasks t WHERE id = :h3;
-- an expired lease: OR003 (even before a recovery took the task back)
SELECT pg_temp.expire(:h3);
SELECT pg_temp.try(format($$SELECT state FROM orch_heartbeat(%s, %L, '1 minute', '{}')$$, :h3, pg_temp.tok('h3'))) AS expired_lease;
-- a completed task: OR002
SELECT orch_enqueue('lq', '{"n": 4}') AS h4 \gset
SELECT pg_temp.claim('h4', 'lq') AS attempt;
SELECT orch_complete(:h4, pg_temp.tok('h4'));
SELECT pg_temp.try(format($$SELECT state FROM orch_heartbeat(%s, %L, '1 minute', '{}')$$, :h4, pg_temp.tok('h4'))) AS completed_task;

-- ---------------------------------------------------------------------------
-- 2. orch_progress: the latest value on the task, no event, fenced.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('lq_p') IS NOT NULL AS created;
SELECT orch_enqueue('lq_p', '{"n": 1}', max_attempts => 3) AS p1 \gset
SELECT pg_temp.claim('p1', 'lq_p') AS attempt;
SELECT count(*) AS events_before FROM orch_history(:p1) \gset
SELECT updated_at AS updated_before FROM orch.tasks WHERE id = :p1 \gset
SELECT orch_progress(:p1, pg_temp.tok('p1'), '{"pct": 10}');
SELECT orch_progress(:p1, pg_temp.tok('p1'), '{"pct": 50}');
SELECT orch_progress(:p1, pg_temp.tok('p1'), '{"pct": 90, "note": "almost"}');
-- the latest value, in orch_tasks, orch_status and orch_task_rows
SELECT (SELECT progress FROM orch_tasks WHERE task_id = :p1) AS in_orch_tasks,
       (SELECT progress FROM orch_status(:p1)) AS in_orch_status,
       (SELECT progress FROM orch_task_rows(ARRAY[:p1]::bigint[])) AS in_orch_task_rows;
-- no event, no attempt: the history does not grow with the calls
SELECT count(*) - :events_before AS new_events, pg_temp.attempts(:p1) AS attempts,
       (SELECT state FROM orch.tasks WHERE id = :p1) AS state
  FROM orch_history(:p1);
-- kept across attempts: a failure, the retry claimed, the value still there
SELECT state, reason_code FROM orch_fail(:p1, pg_temp.tok('p1'), 'TRANSIENT', 'try again');
SELECT progress AS while_waiting FROM orch_tasks WHERE task_id = :p1;
SELECT pg_temp.due(:p1);
SELECT pg_temp.claim('p1', 'lq_p') AS attempt;
SELECT progress AS next_attempt_reads FROM orch_status(:p1);
SELECT orch_progress(:p1, pg_temp.tok('p1'), '{"pct": 95}');
SELECT orch_complete(:p1, pg_temp.tok('p1'), '{"ok": true}');
SELECT state, progress AS after_completion FROM orch_tasks WHERE task_id = :p1;
-- the fence and the arguments (SQLSTATE), the task unchanged each time
SELECT orch_enqueue('lq_p', '{"n": 2}') AS p2 \gset
SELECT pg_temp.claim('p2', 'lq_p') AS attempt;
SELECT orch_progress(:p2, pg_temp.tok('p2'), '{"pct": 1}');
SELECT to_jsonb(t) AS before FROM orch.tasks t WHERE id = :p2 \gset
SELECT c.label, pg_temp.sqlstate_of(format(c.q, :p2, quote_literal(pg_temp.tok('p2')), :p1)) AS result
  FROM (VALUES
    (1, 'a stale token: OR003', $$SELECT orch_progress(%s, '00000000-0000-4000-8000-000000000001', '{"pct": 2}')$$),
    (3, 'a completed task, its token: OR002', $$SELECT orch_progress(%3$s, (SELECT lease_token FROM claims WHERE tag = 'p1' ORDER BY seq DESC LIMIT 1), '{"pct": 2}')$$),
    (4, 'an unknown task: OR005', $$SELECT orch_progress(-1, %2$s, '{"pct": 2}')$$),
    (5, 'task_id NULL: 22004', $$SELECT orch_progress(NULL, %2$s, '{"pct": 2}')$$),
    (6, 'lease_token NULL: 22004', $$SELECT orch_progress(%s, NULL, '{"pct": 2}')$$),
    (7, 'progress NULL: 22004', $$SELECT orch_progress(%s, %s, NULL)$$)
  ) AS c(ord, label, q)
 ORDER BY c.ord;
SELECT to_jsonb(t) = :'before'::jsonb AS unchanged FROM orch.tasks t WHERE id = :p2;
-- larger than orchestrator.max_payload_size: 22023
SET orchestrator.max_payload_size = 1000;
SELECT pg_temp.sqlstate_of(format($$SELECT orch_progress(%s, %L, jsonb_build_object('x', repeat('x', 2000)))$$,
                                  :p2, pg_temp.tok('p2'))) AS too_large,
       pg_temp.sqlstate_of(format($$SELECT orch_progress(%s, %L, jsonb_build_object('x', repeat('x', 500)))$$,
                                  :p2, pg_temp.tok('p2'))) AS under_the_cap;
RESET orchestrator.max_payload_size;
SELECT length(progress ->> 'x') AS kept FROM orch.tasks WHERE id = :p2;
-- an expired lease: OR003; a task cancelled under the lease: OR002 (terminal)
SELECT pg_temp.expire(:p2);
SELECT pg_temp.sqlstate_of(format($$SELECT orch_progress(%s, %L, '{"pct": 3}')$$, :p2, pg_temp.tok('p2'))) AS expired_lease;
SELECT orch_enqueue('lq_p', '{"n": 3}') AS p3 \gset
SELECT pg_temp.claim('p3', 'lq_p') AS attempt;
SELECT orch_cancel(:p3);
SELECT pg_temp.sqlstate_of(format($$SELECT orch_progress(%s, %L, '{"pct": 3}')$$, :p3, pg_temp.tok('p3'))) AS cancelled_task;
-- a queued task (never claimed, no lease): OR003
SELECT orch_enqueue('lq_p', '{"n": 4}', run_at => now() + interval '1 hour') AS p4 \gset
SELECT pg_temp.sqlstate_of(format($$SELECT orch_progress(%s, %L, '{"pct": 3}')$$, :p4, pg_temp.tok('p2'))) AS queued_task;

-- ---------------------------------------------------------------------------
-- 3. orch_release: the attempt ends as released and is given back; the task
--    waits like a retry (awaiting_tool, retry_at, reason released).
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('lq_r') IS NOT NULL AS created;
SELECT orch_enqueue('lq_r', '{"n": 1}') AS r1 \gset
SELECT pg_temp.claim('r1', 'lq_r') AS attempt;
SELECT orch_progress(:r1, pg_temp.tok('r1'), '{"page": 7}');
SELECT orch_release(:r1, pg_temp.tok('r1'));
SELECT state, reason_code, attempts, failures, retry_at <= now() AS due_at_once,
       lease_owner, lease_expires_at, progress
  FROM orch_tasks WHERE task_id = :r1;
SELECT pg_temp.attempts(:r1) AS attempts, pg_temp.events(:r1) AS events;
-- the release event names the attempt it ended, and the worker
SELECT h.attempt, h.from_state, h.to_state, h.reason_code, h.outcome,
       h.lease_token = pg_temp.tok('r1') AS its_token
  FROM orch_history(:r1) h WHERE h.reason_code = 'released';
-- the released token holds nothing any more (OR003 while the task waits)
SELECT pg_temp.try(format($$SELECT state FROM orch_heartbeat(%s, %L, '1 minute', '{}')$$, :r1, pg_temp.tok('r1'))) AS heartbeat,
       pg_temp.sqlstate_of(format($$SELECT orch_progress(%s, %L, '{}')$$, :r1, pg_temp.tok('r1'))) AS progress,
       pg_temp.try(format('SELECT orch_release(%s, %L)', :r1, pg_temp.tok('r1'))) AS release_again;
-- claimable at once; the next claim has the same attempt number
SELECT pg_temp.claim('r1b', 'lq_r') AS attempt, pg_temp.tid('r1b') = :r1 AS same_task;
-- the released token is stale now
SELECT pg_temp.try(format('SELECT orch_release(%s, %L)', :r1, pg_temp.tok('r1'))) AS old_token_release,
       pg_temp.try(format('SELECT orch_complete(%s, %L)', :r1, pg_temp.tok('r1'))) AS old_token_complete;
SELECT orch_release(:r1, pg_temp.tok('r1b'));
SELECT pg_temp.claim('r1c', 'lq_r') AS attempt;
SELECT orch_complete(:r1, pg_temp.tok('r1c'), '{"done": true}');
SELECT state, attempts, failures, progress FROM orch_tasks WHERE task_id = :r1;
SELECT pg_temp.attempts(:r1) AS attempts;
SELECT pg_temp.events(:r1) AS events;

-- a release does not count against max_attempts: with max_attempts 1, two
-- releases, then a failure dead-letters only then
SELECT orch_enqueue('lq_r', '{"n": 2}', max_attempts => 1) AS r2 \gset
SELECT pg_temp.claim('r2', 'lq_r') AS a1;
SELECT orch_release(:r2, pg_temp.tok('r2'));
SELECT pg_temp.claim('r2', 'lq_r') AS a1_again;
SELECT orch_release(:r2, pg_temp.tok('r2'));
SELECT pg_temp.claim('r2', 'lq_r') AS a1_once_more;
SELECT state, reason_code FROM orch_fail(:r2, pg_temp.tok('r2'), 'TRANSIENT', 'gave up');
SELECT state, reason_code, attempts, failures FROM orch_tasks WHERE task_id = :r2;
SELECT pg_temp.attempts(:r2) AS attempts;
-- with max_attempts 2: release, failure (a retry, not a dead letter), the
-- second attempt fails: dead letter
SELECT orch_enqueue('lq_r', '{"n": 3}', max_attempts => 2) AS r3 \gset
SELECT pg_temp.claim('r3', 'lq_r') AS a1;
SELECT orch_release(:r3, pg_temp.tok('r3'));
SELECT pg_temp.claim('r3', 'lq_r') AS a1_again;
SELECT state, reason_code FROM orch_fail(:r3, pg_temp.tok('r3'), 'TRANSIENT', 'first failure');
SELECT pg_temp.due(:r3);
SELECT pg_temp.claim('r3', 'lq_r') AS a2;
-- a release after a failure keeps the failure count
SELECT orch_release(:r3, pg_temp.tok('r3'));
SELECT attempts, failures, reason_code FROM orch_tasks WHERE task_id = :r3;
SELECT pg_temp.claim('r3', 'lq_r') AS a2_again;
SELECT state, reason_code FROM orch_fail(:r3, pg_temp.tok('r3'), 'TRANSIENT', 'second failure');
SELECT state, reason_code, attempts, failures FROM orch_tasks WHERE task_id = :r3;
SELECT pg_temp.attempts(:r3) AS attempts;

-- a delay: not claimable before it has passed
SELECT orch_enqueue('lq_r', '{"n": 4}') AS r4 \gset
SELECT pg_temp.claim('r4', 'lq_r') AS attempt;
SELECT orch_release(:r4, pg_temp.tok('r4'), '1 hour');
SELECT state, reason_code, retry_at > now() + interval '59 minutes' AS waits_an_hour FROM orch_tasks WHERE task_id = :r4;
SELECT pg_temp.claim('r4_early', 'lq_r') AS claimed_early;
SELECT count(*) > 0 AS maintained FROM orch_maintain();
SELECT pg_temp.claim('r4_early', 'lq_r') AS claimed_after_maintain;
SELECT pg_temp.due(:r4);
SELECT pg_temp.claim('r4', 'lq_r') AS attempt, pg_temp.tid('r4') = :r4 AS same_task;
SELECT orch_complete(:r4, pg_temp.tok('r4'));
-- the fence and the arguments (SQLSTATE), nothing changed
SELECT orch_enqueue('lq_r', '{"n": 5}') AS r5 \gset
SELECT pg_temp.claim('r5', 'lq_r') AS attempt;
SELECT to_jsonb(t) AS before FROM orch.tasks t WHERE id = :r5 \gset
SELECT count(*) AS attempts_before FROM orch.attempts \gset
SELECT c.label, pg_temp.try(format(c.q, :r5, quote_literal(pg_temp.tok('r5')), :r4)) AS result
  FROM (VALUES
    (1, 'a negative delay: 22023', $$SELECT orch_release(%s, %s, '-1 second')$$),
    (2, 'a delay over 100 years: 22023', $$SELECT orch_release(%s, %s, '200 years')$$),
    (3, 'a stale token: OR003', $$SELECT orch_release(%s, '00000000-0000-4000-8000-000000000001')$$),
    (4, 'a completed task, its token: OR002', $$SELECT orch_release(%3$s, (SELECT lease_token FROM claims WHERE tag = 'r4' ORDER BY seq DESC LIMIT 1))$$),
    (5, 'an unknown task: OR005', $$SELECT orch_release(-1, %2$s)$$),
    (6, 'task_id NULL: 22004', $$SELECT orch_release(NULL, %2$s)$$),
    (7, 'lease_token NULL: 22004', $$SELECT orch_release(%s, NULL)$$)
  ) AS c(ord, label, q)
 ORDER BY c.ord;
SELECT to_jsonb(t) = :'before'::jsonb AS unchanged, (SELECT count(*) FROM orch.attempts) = :attempts_before AS no_attempt
  FROM orch.tasks t WHERE id = :r5;
-- an expired lease: OR003
SELECT pg_temp.expire(:r5);
SELECT pg_temp.try(format('SELECT orch_release(%s, %L)', :r5, pg_temp.tok('r5'))) AS expired_lease;
-- a dead letter, its last token: OR002
SELECT pg_temp.try(format('SELECT orch_release(%s, %L)', :r3, pg_temp.tok('r3'))) AS failed_task;
-- cancelled under this lease: 'cancelled', no attempt recorded, nothing changed
SELECT orch_enqueue('lq_r', '{"n": 6}') AS r6 \gset
SELECT pg_temp.claim('r6', 'lq_r') AS attempt;
SELECT orch_cancel(:r6, 'no longer needed');
SELECT to_jsonb(t) AS before FROM orch.tasks t WHERE id = :r6 \gset
SELECT orch_release(:r6, pg_temp.tok('r6')) AS release_cancelled;
SELECT to_jsonb(t) = :'before'::jsonb AS unchanged, pg_temp.attempts(:r6) AS attempts FROM orch.tasks t WHERE id = :r6;

-- a keyed task frees its slot: with one slot per key, the other task of
-- the key is claimable once the first is released (for an hour)
SELECT orch_create_queue('lq_key', '{"concurrency_key_limit": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('lq_key', '{"n": 1}', concurrency_key => 'k') AS k1 \gset
SELECT orch_enqueue('lq_key', '{"n": 2}', concurrency_key => 'k') AS k2 \gset
SELECT pg_temp.claim('k1', 'lq_key') AS attempt, pg_temp.tid('k1') = :k1 AS first;
SELECT pg_temp.claim('k_busy', 'lq_key') AS claimed_while_held;
SELECT orch_release(:k1, pg_temp.tok('k1'), '1 hour');
SELECT pg_temp.claim('k2', 'lq_key') AS attempt, pg_temp.tid('k2') = :k2 AS second;
SELECT task_id = :k1 AS k1, state, gated FROM orch_tasks WHERE queue = 'lq_key' ORDER BY task_id;
SELECT orch_complete(:k2, pg_temp.tok('k2'));
-- released without a delay, the task takes its slot back at once
SELECT pg_temp.due(:k1);
SELECT pg_temp.claim('k1', 'lq_key') AS attempt, pg_temp.tid('k1') = :k1 AS first;
SELECT orch_enqueue('lq_key', '{"n": 3}', concurrency_key => 'k') AS k3 \gset
SELECT orch_release(:k1, pg_temp.tok('k1'));
SELECT pg_temp.claim('k1', 'lq_key') AS attempt, pg_temp.tid('k1') = :k1 AS released_one_first;
SELECT orch_complete(:k1, pg_temp.tok('k1'));
SELECT pg_temp.claim('k3', 'lq_key') AS attempt, pg_temp.tid('k3') = :k3 AS third;
SELECT orch_complete(:k3, pg_temp.tok('k3'));
SELECT task_id = :k1 AS k1, state, attempts FROM orch_tasks WHERE queue = 'lq_key' ORDER BY task_id;

-- ---------------------------------------------------------------------------
-- 4. A workflow step's task released and completed still finishes its run.
-- ---------------------------------------------------------------------------
SELECT orch_define('lease_wf', '{"steps": [
    {"step_id": "fetch", "queue": "lq_wf", "handler": "fetch"},
    {"step_id": "store", "queue": "lq_wf", "handler": "store", "depends_on": ["fetch"]}]}') AS version;
SELECT orch_publish('lease_wf', 1) IS NOT NULL AS published;
SELECT orch_start('lease_wf', '{}') AS wf \gset
SELECT pg_temp.claim('wf1', 'lq_wf') AS attempt;
SELECT step_key FROM orch.tasks WHERE id = pg_temp.tid('wf1');
SELECT orch_release(pg_temp.tid('wf1'), pg_temp.tok('wf1'));
SELECT orch_run_status(:wf) -> 'run' ->> 'state' AS run_state;
SELECT pg_temp.claim('wf1', 'lq_wf') AS attempt;
SELECT orch_complete(pg_temp.tid('wf1'), pg_temp.tok('wf1'), '{"fetched": 3}');
SELECT pg_temp.claim('wf2', 'lq_wf') AS attempt;
SELECT step_key FROM orch.tasks WHERE id = pg_temp.tid('wf2');
SELECT orch_release(pg_temp.tid('wf2'), pg_temp.tok('wf2'), '1 hour');
SELECT pg_temp.due(pg_temp.tid('wf2'));
SELECT pg_temp.claim('wf2', 'lq_wf') AS attempt;
SELECT orch_complete(pg_temp.tid('wf2'), pg_temp.tok('wf2'), '{"stored": 3}');
SELECT orch_run_status(:wf) -> 'run' ->> 'state' AS run_state;
SELECT step_key, state, attempts FROM orch.tasks WHERE run_id = :wf ORDER BY id;
-- the step waits while its task does (retrying), and runs again on the claim
SELECT e ->> 'note' AS step, e ->> 'from_state' AS from_state, e ->> 'to_state' AS to_state,
       e ->> 'reason_code' AS reason_code
  FROM jsonb_array_elements(orch_run_status(:wf) -> 'events') WITH ORDINALITY AS x(e, n)
 WHERE e ->> 'entity' = 'run_step' ORDER BY n;

-- ---------------------------------------------------------------------------
-- 5. The maintenance pass's counter check: released attempts count for
--    neither counter, so no mismatch.
-- ---------------------------------------------------------------------------
SELECT count(*) AS released_attempts FROM orch.attempts WHERE outcome = 'released';
SELECT action, count FROM orch_maintain() WHERE action = 'counter_mismatches';

-- ---------------------------------------------------------------------------
-- 6. Lease tokens: version-4 UUIDs, each drawn once, from random bytes
--    drawn for 64 tokens at a time: 150 claimed at once and 70 one by one
--    cross several draws, and no token repeats.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('tokens') IS NOT NULL AS created;
SELECT count(*) AS enqueued FROM orch_enqueue_batch('tokens', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 220) g));
CREATE TEMP TABLE tokens AS SELECT lease_token FROM orch_dequeue('tokens', 'w-tokens', 150);
INSERT INTO tokens SELECT d.lease_token FROM generate_series(1, 70) g, LATERAL orch_dequeue('tokens', 'w-tokens-' || g, 1) d;
SELECT count(*) AS tokens, count(DISTINCT lease_token) AS distinct_tokens,
       count(*) FILTER (WHERE lease_token::text ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$') AS version_4
  FROM tokens;
SELECT count(DISTINCT lease_token) AS distinct_on_rows FROM orch.tasks WHERE queue = 'tokens';
