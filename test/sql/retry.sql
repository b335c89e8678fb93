-- retry: the retry decision of SPEC §4 / docs/semantics.md "Retry decision",
-- through the pure orch_retry_decision and through orch_fail on real tasks;
-- backoff delays, exhaustion, escalation, lease expiry, reason codes.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- ---------------------------------------------------------------------------
-- 1. The decision table, row by row (and the order of its checks).
-- ---------------------------------------------------------------------------
SELECT v.ord, v.label, d.decision, d.next_state, d.reason_code, d.delay
  FROM (VALUES
    (1,  'TRANSIENT within budget',            'TRANSIENT',             1, 1, '{}'::jsonb,                                               NULL::interval, false),
    (2,  'RETRYABLE within budget',            'RETRYABLE',             2, 2, '{}',                                                      NULL, false),
    (3,  'RATE_LIMITED within budget',         'RATE_LIMITED',          1, 1, '{}',                                                      NULL, false),
    (4,  'DEPENDENCY_FAILED within budget',    'DEPENDENCY_FAILED',     1, 1, '{}',                                                      NULL, false),
    (5,  'SAFE_TO_RETRY_WITH_GUARD',           'TRANSIENT',             1, 1, '{"retry_safety": "SAFE_TO_RETRY_WITH_GUARD"}',            NULL, false),
    (6,  'one attempt left',                   'TRANSIENT',             4, 4, '{}',                                                      NULL, false),
    (7,  'max_attempts (default 5) reached',   'TRANSIENT',             5, 1, '{}',                                                      NULL, false),
    (8,  'max_attempts 2 reached',             'RETRYABLE',             2, 1, '{"max_attempts": 2}',                                     NULL, false),
    (9,  'max_attempts reached, escalate',     'TRANSIENT',             2, 1, '{"max_attempts": 2, "on_exhausted": "escalate"}',         NULL, false),
    (10, 'max_attempts exceeded',              'TRANSIENT',             9, 1, '{"max_attempts": 2}',                                     NULL, false),
    (11, 'max_failures (default 5) reached',   'TRANSIENT',             6, 5, '{"max_attempts": 10}',                                    NULL, false),
    (12, 'max_failures 2 reached',             'RATE_LIMITED',          3, 2, '{"max_failures": 2}',                                     NULL, false),
    (13, 'max_failures reached, escalate',     'TRANSIENT',             3, 2, '{"max_failures": 2, "on_exhausted": "escalate"}',         NULL, false),
    (14, 'both budgets reached',               'TRANSIENT',             2, 2, '{"max_attempts": 2, "max_failures": 2}',                  NULL, false),
    (15, 'NON_RETRYABLE',                      'NON_RETRYABLE',         1, 1, '{}',                                                      NULL, false),
    (16, 'NON_RETRYABLE, budgets reached',     'NON_RETRYABLE',         5, 5, '{"on_exhausted": "escalate"}',                            NULL, false),
    (17, 'class not in retry_on',              'TRANSIENT',             1, 1, '{"retry_on": ["RATE_LIMITED"]}',                          NULL, false),
    (18, 'class in retry_on',                  'RATE_LIMITED',          1, 1, '{"retry_on": ["RATE_LIMITED"]}',                          NULL, false),
    (19, 'not in retry_on, budgets reached',   'RETRYABLE',             5, 5, '{"retry_on": ["TRANSIENT"], "on_exhausted": "escalate"}', NULL, false),
    (20, 'COMPENSATION_REQUIRED',              'COMPENSATION_REQUIRED', 1, 1, '{}',                                                      NULL, false),
    (21, 'COMPENSATION_REQUIRED, exhausted',   'COMPENSATION_REQUIRED', 5, 5, '{"on_exhausted": "escalate"}',                            NULL, false),
    (22, 'NOT_SAFE_TO_RETRY',                  'TRANSIENT',             1, 1, '{"retry_safety": "NOT_SAFE_TO_RETRY"}',                   NULL, false),
    (23, 'NOT_SAFE_TO_RETRY, compensation',    'COMPENSATION_REQUIRED', 1, 1, '{"retry_safety": "NOT_SAFE_TO_RETRY"}',                   NULL, false),
    (24, 'NOT_SAFE_TO_RETRY, non-retryable',   'NON_RETRYABLE',         1, 1, '{"retry_safety": "NOT_SAFE_TO_RETRY"}',                   NULL, false),
    (25, 'NOT_SAFE_TO_RETRY, exhausted',       'TRANSIENT',             5, 5, '{"retry_safety": "NOT_SAFE_TO_RETRY"}',                   NULL, false),
    (26, 'terminal',                           'TRANSIENT',             1, 1, '{}',                                                      NULL, true),
    (27, 'terminal, NOT_SAFE_TO_RETRY',        'TRANSIENT',             1, 1, '{"retry_safety": "NOT_SAFE_TO_RETRY"}',                   NULL, true),
    (28, 'terminal, NON_RETRYABLE, exhausted', 'NON_RETRYABLE',         9, 9, '{}',                                                      NULL, true),
    (29, 'terminal, with retry_after',         'RATE_LIMITED',          1, 1, '{}',                                                      '1 minute', true)
  ) AS v(ord, label, cls, att, fl, pol, ra, term),
  LATERAL orch_retry_decision(v.cls, v.att, v.fl, v.pol, v.ra, 0, v.term) d
 ORDER BY v.ord;

-- Defaults for omitted arguments, and explicit NULLs meaning the default.
SELECT decision, next_state, reason_code, delay FROM orch_retry_decision('TRANSIENT', 1, 1);
SELECT decision, next_state, reason_code, delay FROM orch_retry_decision('TRANSIENT', 1, 1, NULL, NULL, NULL, NULL);

-- ---------------------------------------------------------------------------
-- 2. Backoff delays (attempts = failures = n; budgets large enough).
-- ---------------------------------------------------------------------------
SELECT v.kind, v.cls, v.n, d.delay, v.expected, d.delay = v.expected AS ok
  FROM (VALUES
    (1,  'exponential (default 5s, max 5min)', 'TRANSIENT', 1,  '{}'::jsonb, NULL::interval, interval '5 seconds'),
    (2,  'exponential (default 5s, max 5min)', 'TRANSIENT', 2,  '{}', NULL, interval '10 seconds'),
    (3,  'exponential (default 5s, max 5min)', 'TRANSIENT', 3,  '{}', NULL, interval '20 seconds'),
    (4,  'exponential (default 5s, max 5min)', 'TRANSIENT', 4,  '{}', NULL, interval '40 seconds'),
    (5,  'exponential (default 5s, max 5min)', 'TRANSIENT', 6,  '{}', NULL, interval '160 seconds'),
    (6,  'exponential (default 5s, max 5min)', 'TRANSIENT', 7,  '{}', NULL, interval '5 minutes'),
    (7,  'exponential (default 5s, max 5min)', 'TRANSIENT', 12, '{}', NULL, interval '5 minutes'),
    (8,  'exponential 1s, max 10s',            'RETRYABLE', 1,  '{"initial_delay": "1 second", "max_delay": "10 seconds"}', NULL, interval '1 second'),
    (9,  'exponential 1s, max 10s',            'RETRYABLE', 2,  '{"initial_delay": "1 second", "max_delay": "10 seconds"}', NULL, interval '2 seconds'),
    (10, 'exponential 1s, max 10s',            'RETRYABLE', 3,  '{"initial_delay": "1 second", "max_delay": "10 seconds"}', NULL, interval '4 seconds'),
    (11, 'exponential 1s, max 10s',            'RETRYABLE', 4,  '{"initial_delay": "1 second", "max_delay": "10 seconds"}', NULL, interval '8 seconds'),
    (12, 'exponential 1s, max 10s',            'RETRYABLE', 5,  '{"initial_delay": "1 second", "max_delay": "10 seconds"}', NULL, interval '10 seconds'),
    (13, 'exponential 1s, max 10s',            'RETRYABLE', 6,  '{"initial_delay": "1 second", "max_delay": "10 seconds"}', NULL, interval '10 seconds'),
    (14, 'exponential, seconds as numbers',    'TRANSIENT', 3,  '{"backoff": "exponential", "initial_delay": 2, "max_delay": 60}', NULL, interval '8 seconds'),
    (15, 'fixed 7s',                           'TRANSIENT', 1,  '{"backoff": "fixed", "initial_delay": "7 seconds"}', NULL, interval '7 seconds'),
    (16, 'fixed 7s',                           'TRANSIENT', 2,  '{"backoff": "fixed", "initial_delay": "7 seconds"}', NULL, interval '7 seconds'),
    (17, 'fixed 7s',                           'TRANSIENT', 5,  '{"backoff": "fixed", "initial_delay": "7 seconds"}', NULL, interval '7 seconds'),
    (18, 'fixed 10min, max 5min',              'TRANSIENT', 1,  '{"backoff": "fixed", "initial_delay": "10 minutes"}', NULL, interval '5 minutes'),
    (19, 'schedule {5s,15s,30s}',              'TRANSIENT', 1,  '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}', NULL, interval '5 seconds'),
    (20, 'schedule {5s,15s,30s}',              'TRANSIENT', 2,  '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}', NULL, interval '15 seconds'),
    (21, 'schedule {5s,15s,30s}',              'TRANSIENT', 3,  '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}', NULL, interval '30 seconds'),
    (22, 'schedule {5s,15s,30s}',              'TRANSIENT', 4,  '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}', NULL, interval '30 seconds'),
    (23, 'schedule {5s,15s,30s}',              'TRANSIENT', 9,  '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}', NULL, interval '30 seconds'),
    (24, 'backoff schedule, numbers',          'RETRYABLE', 2,  '{"backoff": "schedule", "schedule": [5, 15, 30]}', NULL, interval '15 seconds'),
    (25, 'RATE_LIMITED, retry_after 42s',      'RATE_LIMITED', 1, '{}', interval '42 seconds', interval '42 seconds'),
    (26, 'RATE_LIMITED, retry_after 42s',      'RATE_LIMITED', 3, '{}', interval '42 seconds', interval '42 seconds'),
    (27, 'RATE_LIMITED, no retry_after',       'RATE_LIMITED', 2, '{}', NULL, interval '10 seconds'),
    (28, 'RATE_LIMITED, retry_after 10min',    'RATE_LIMITED', 1, '{}', interval '10 minutes', interval '10 minutes'),
    -- only RATE_LIMITED honours retry_after; other classes keep the policy's delay
    (29, 'TRANSIENT ignores retry_after',      'TRANSIENT', 2,  '{}', interval '3 seconds', interval '10 seconds'),
    (30, 'RETRYABLE ignores retry_after',      'RETRYABLE', 1,  '{"schedule": ["1 hour"]}', interval '4 seconds', interval '1 hour'),
    (31, 'DEPENDENCY_FAILED exponential',      'DEPENDENCY_FAILED', 1, '{}', NULL, interval '10 seconds'),
    (32, 'DEPENDENCY_FAILED exponential',      'DEPENDENCY_FAILED', 2, '{}', NULL, interval '20 seconds'),
    (33, 'DEPENDENCY_FAILED exponential',      'DEPENDENCY_FAILED', 5, '{}', NULL, interval '160 seconds'),
    (34, 'DEPENDENCY_FAILED exponential',      'DEPENDENCY_FAILED', 6, '{}', NULL, interval '5 minutes'),
    (35, 'DEPENDENCY_FAILED fixed 7s',         'DEPENDENCY_FAILED', 1, '{"backoff": "fixed", "initial_delay": "7 seconds"}', NULL, interval '14 seconds'),
    (36, 'DEPENDENCY_FAILED schedule',         'DEPENDENCY_FAILED', 3, '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}', NULL, interval '60 seconds'),
    (37, 'DEPENDENCY_FAILED fixed, capped',    'DEPENDENCY_FAILED', 1, '{"backoff": "fixed", "initial_delay": "3 minutes"}', NULL, interval '5 minutes')
  ) AS v(ord, kind, cls, n, pol, ra, expected),
  LATERAL orch_retry_decision(v.cls, v.n, v.n,
                              jsonb_build_object('max_attempts', 100, 'max_failures', 100) || v.pol,
                              v.ra, 0, false) d
 ORDER BY v.ord;

-- Jittered: exponential value d, then a delay in [d/2, d] derived from
-- (task id, attempts) only: the same inputs always give the same delay.
CREATE TEMP TABLE jit AS
SELECT tid, att, n,
       least(interval '5 seconds' * 2 ^ (n - 1), interval '5 minutes') AS d,
       (SELECT delay FROM orch_retry_decision('TRANSIENT', att, n, '{"backoff": "jittered", "max_attempts": 100, "max_failures": 100}', NULL, tid)) AS delay
  FROM generate_series(1, 200) tid, generate_series(1, 4) att, generate_series(1, 4) n
 WHERE n <= att
UNION ALL
SELECT tid, 12, 12, interval '5 minutes',
       (SELECT delay FROM orch_retry_decision('RETRYABLE', 12, 12, '{"backoff": "jittered", "max_attempts": 100, "max_failures": 100}', NULL, tid))
  FROM generate_series(1, 200) tid;
SELECT count(*) AS samples,
       count(*) FILTER (WHERE delay IS NULL) AS no_delay,
       count(*) FILTER (WHERE delay < d / 2 OR delay > d) AS out_of_bounds
  FROM jit;
-- Recomputed in another statement: identical.
SELECT count(*) AS differs_on_recompute
  FROM jit
 WHERE delay IS DISTINCT FROM
       (SELECT delay FROM orch_retry_decision(CASE WHEN att = 12 THEN 'RETRYABLE' ELSE 'TRANSIENT' END, att, n,
                                              '{"backoff": "jittered", "max_attempts": 100, "max_failures": 100}', NULL, tid));
-- It does jitter: over task ids (same attempt), and over attempts (same task, same n).
SELECT n, count(DISTINCT delay) > 150 AS varies_by_task FROM jit WHERE att = 4 GROUP BY n ORDER BY n;
SELECT count(*) AS tasks_with_repeated_delay
  FROM (SELECT tid FROM jit WHERE n = 1 GROUP BY tid HAVING count(DISTINCT delay) < 4) x;
-- DEPENDENCY_FAILED doubles the jittered value too (capped at max_delay).
SELECT count(*) FILTER (WHERE dep.delay <> least(j.delay * 2, interval '5 minutes')) AS dependency_not_doubled
  FROM jit j,
       LATERAL orch_retry_decision('DEPENDENCY_FAILED', j.att, j.n,
                                   '{"backoff": "jittered", "max_attempts": 100, "max_failures": 100}', NULL, j.tid) dep
 WHERE j.att = 4 AND j.tid <= 50;

-- ---------------------------------------------------------------------------
-- 3. The same decisions through orch_fail on real tasks.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE claims (seq serial, tag text, task_id bigint, lease_token uuid, attempt int);
CREATE FUNCTION pg_temp.claim(p_tag text, p_q text, p_lease interval DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    INSERT INTO claims (tag, task_id, lease_token, attempt)
    SELECT p_tag, d.task_id, d.lease_token, d.attempt FROM orch_dequeue(p_q, 'retry-worker', 1, p_lease) d;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
-- claim_wait: claim one task, retrying in fresh transactions for up to 5 s.
CREATE PROCEDURE pg_temp.claim_wait(p_tag text, p_q text, p_lease interval DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    FOR i IN 1 .. 250 LOOP
        n := pg_temp.claim(p_tag, p_q, p_lease);
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
-- quick_failures: n claim + RATE_LIMITED failure with retry_after 1 ms (only
-- that class honours retry_after), so that the task's failure count grows
-- without waiting for the policy's backoff.
CREATE PROCEDURE pg_temp.quick_failures(p_tag text, p_q text, p_n int)
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. p_n LOOP
        CALL pg_temp.claim_wait(p_tag, p_q);
        PERFORM orch_fail(pg_temp.tid(p_tag), pg_temp.tok(p_tag), 'RATE_LIMITED', 'quick failure ' || i,
                          interval '1 millisecond');
        COMMIT;
    END LOOP;
END $$;
-- fail(tag, class, retry_after): orch_fail on the tag's last claim; the delay
-- is retry_at - now() truncated to whole seconds.
CREATE FUNCTION pg_temp.fail(p_tag text, p_cls text, p_ra interval DEFAULT NULL)
RETURNS TABLE (attempt int, state text, reason_code text, delay interval) LANGUAGE sql AS $$
    SELECT (SELECT c.attempt FROM claims c WHERE c.tag = p_tag ORDER BY seq DESC LIMIT 1),
           f.state, f.reason_code, date_trunc('second', f.retry_at - now())
      FROM orch_fail(pg_temp.tid(p_tag), pg_temp.tok(p_tag), p_cls, 'failed with ' || p_cls, p_ra) f
$$;
CREATE TEMP TABLE rt (ord serial, label text, id bigint);

-- 3a. Exponential with cap (queue policy): n = 1, 2, 3 -> 1, 2, 3 (not 4) minutes.
SELECT orch_create_queue('r_exp', '{"max_attempts": 10, "max_failures": 10, "initial_delay": "1 minute", "max_delay": "3 minutes"}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'exp n=1', orch_enqueue('r_exp', '{"n": 1}');
CALL pg_temp.claim_wait('exp1', 'r_exp');
SELECT * FROM pg_temp.fail('exp1', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'exp n=2', orch_enqueue('r_exp', '{"n": 2}');
CALL pg_temp.quick_failures('exp2', 'r_exp', 1);
CALL pg_temp.claim_wait('exp2', 'r_exp');
SELECT * FROM pg_temp.fail('exp2', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'exp n=3 (cap)', orch_enqueue('r_exp', '{"n": 3}');
CALL pg_temp.quick_failures('exp3', 'r_exp', 2);
CALL pg_temp.claim_wait('exp3', 'r_exp');
SELECT * FROM pg_temp.fail('exp3', 'RETRYABLE');
SELECT rt.label, count(DISTINCT c.task_id) = 1 AS one_task, t.attempts, t.failures, t.state
  FROM rt JOIN orch.tasks t USING (id) JOIN claims c ON c.task_id = rt.id
 WHERE rt.label LIKE 'exp%' GROUP BY rt.ord, rt.label, t.attempts, t.failures, t.state ORDER BY rt.ord;

-- 3b. Fixed, as a per-task policy over the queue's default.
INSERT INTO rt (label, id) SELECT 'fixed 45s n=2',
    orch_enqueue('r_fixed', '{}', retry_policy => '{"backoff": "fixed", "initial_delay": "45 seconds"}');
CALL pg_temp.quick_failures('fixed', 'r_fixed', 1);
CALL pg_temp.claim_wait('fixed', 'r_fixed');
SELECT * FROM pg_temp.fail('fixed', 'TRANSIENT');

-- 3c. Schedule {5s,15s,30s}, repeating the last entry.
SELECT orch_create_queue('r_sched', '{"schedule": ["5 seconds", "15 seconds", "30 seconds"]}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'schedule n=1', orch_enqueue('r_sched', '{"n": 1}');
CALL pg_temp.claim_wait('sched1', 'r_sched');
SELECT * FROM pg_temp.fail('sched1', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'schedule n=3', orch_enqueue('r_sched', '{"n": 3}');
CALL pg_temp.quick_failures('sched3', 'r_sched', 2);
CALL pg_temp.claim_wait('sched3', 'r_sched');
SELECT * FROM pg_temp.fail('sched3', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'schedule n=4', orch_enqueue('r_sched', '{"n": 4}');
CALL pg_temp.quick_failures('sched4', 'r_sched', 3);
CALL pg_temp.claim_wait('sched4', 'r_sched');
SELECT * FROM pg_temp.fail('sched4', 'RETRYABLE');

-- 3d. RATE_LIMITED honours retry_after; DEPENDENCY_FAILED doubles the backoff.
INSERT INTO rt (label, id) SELECT 'rate limited', orch_enqueue('r_rl', '{}');
CALL pg_temp.claim_wait('rl', 'r_rl');
SELECT * FROM pg_temp.fail('rl', 'RATE_LIMITED', '42 seconds');
INSERT INTO rt (label, id) SELECT 'dependency n=1', orch_enqueue('r_dep1', '{}');
CALL pg_temp.claim_wait('dep1', 'r_dep1');
SELECT * FROM pg_temp.fail('dep1', 'DEPENDENCY_FAILED');
INSERT INTO rt (label, id) SELECT 'dependency n=2', orch_enqueue('r_dep2', '{}');
CALL pg_temp.quick_failures('dep2', 'r_dep2', 1);
CALL pg_temp.claim_wait('dep2', 'r_dep2');
SELECT * FROM pg_temp.fail('dep2', 'DEPENDENCY_FAILED');

-- 3e. Jittered: the delay is the pure decision's for (task id, attempt).
SELECT orch_create_queue('r_jit', '{"backoff": "jittered", "initial_delay": "10 seconds"}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'jittered', orch_enqueue('r_jit', '{}');
CALL pg_temp.claim_wait('jit', 'r_jit');
WITH f AS (SELECT * FROM orch_fail(pg_temp.tid('jit'), pg_temp.tok('jit'), 'TRANSIENT'))
SELECT f.state, f.reason_code,
       f.retry_at - now() BETWEEN d.delay AND d.delay + interval '100 milliseconds' AS delay_as_decided,
       d.delay BETWEEN interval '5 seconds' AND interval '10 seconds' AS within_bounds
  FROM f, orch_retry_decision('TRANSIENT', 1, 1, '{"backoff": "jittered", "initial_delay": "10 seconds"}',
                              NULL, pg_temp.tid('jit')) d;

-- 3f. max_attempts exhausted (queue max_attempts 3).
SELECT orch_create_queue('r_max', '{"max_attempts": 3}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'max_attempts 3', orch_enqueue('r_max', '{}');
CALL pg_temp.quick_failures('max', 'r_max', 2);
CALL pg_temp.claim_wait('max', 'r_max');
SELECT * FROM pg_temp.fail('max', 'TRANSIENT');
SELECT state, attempts, failures, reason_code, retry_at, last_error_class, last_error
  FROM orch_status(pg_temp.tid('max'));
SELECT pg_temp.claim('max_after', 'r_max') AS claimable_after;
SELECT pg_temp.try(format('SELECT state FROM orch_fail(%s, %L::uuid, ''TRANSIENT'')',
                          pg_temp.tid('max'), pg_temp.tok('max'))) AS fail_terminal;

-- 3g. max_failures exhausted while attempts are left: an attempt that ended
-- in a tool wait is an attempt, not a failure.
SELECT orch_create_queue('r_maxf', '{"max_failures": 2, "max_attempts": 10}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'max_failures 2', orch_enqueue('r_maxf', '{}');
CALL pg_temp.claim_wait('maxf', 'r_maxf');
SELECT orch_await_tool(pg_temp.tid('maxf'), pg_temp.tok('maxf'));
SELECT orch_resume(pg_temp.tid('maxf'), '{}');
CALL pg_temp.quick_failures('maxf', 'r_maxf', 1);
CALL pg_temp.claim_wait('maxf', 'r_maxf');
SELECT * FROM pg_temp.fail('maxf', 'TRANSIENT');
SELECT state, attempts, failures, reason_code FROM orch_status(pg_temp.tid('maxf'));

-- 3h. max_attempts counts attempts, not failures.
SELECT orch_create_queue('r_maxa', '{"max_attempts": 3}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'max_attempts 3 via tool wait', orch_enqueue('r_maxa', '{}');
CALL pg_temp.claim_wait('maxa', 'r_maxa');
SELECT orch_await_tool(pg_temp.tid('maxa'), pg_temp.tok('maxa'));
SELECT orch_resume(pg_temp.tid('maxa'), '{}');
CALL pg_temp.quick_failures('maxa', 'r_maxa', 1);
CALL pg_temp.claim_wait('maxa', 'r_maxa');
SELECT * FROM pg_temp.fail('maxa', 'TRANSIENT');
SELECT state, attempts, failures, reason_code FROM orch_status(pg_temp.tid('maxa'));

-- 3i. on_exhausted = escalate: a human decides.
SELECT orch_create_queue('r_esc', '{"max_attempts": 2, "on_exhausted": "escalate"}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'escalate', orch_enqueue('r_esc', '{}');
CALL pg_temp.quick_failures('esc', 'r_esc', 1);
CALL pg_temp.claim_wait('esc', 'r_esc');
SELECT * FROM pg_temp.fail('esc', 'TRANSIENT');
SELECT state, attempts, failures, reason_code FROM orch_status(pg_temp.tid('esc'));
SELECT pg_temp.claim('esc_after', 'r_esc') AS claimable_while_escalated;
SELECT orch_confirm(pg_temp.tid('esc'), false, 'ops', 'give up');
SELECT state, reason_code FROM orch_status(pg_temp.tid('esc'));

-- 3j. Immediate denials.
INSERT INTO rt (label, id) SELECT 'non-retryable', orch_enqueue('r_nr', '{}');
CALL pg_temp.claim_wait('nr', 'r_nr');
SELECT * FROM pg_temp.fail('nr', 'NON_RETRYABLE');
INSERT INTO rt (label, id) SELECT 'compensation', orch_enqueue('r_comp', '{}');
CALL pg_temp.claim_wait('comp', 'r_comp');
SELECT * FROM pg_temp.fail('comp', 'COMPENSATION_REQUIRED');
SELECT orch_create_queue('r_only_rl', '{"retry_on": ["RATE_LIMITED"]}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'not in retry_on', orch_enqueue('r_only_rl', '{}');
CALL pg_temp.claim_wait('onlyrl', 'r_only_rl');
SELECT * FROM pg_temp.fail('onlyrl', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'not safe to retry',
    orch_enqueue('r_unsafe', '{}', retry_policy => '{"retry_safety": "NOT_SAFE_TO_RETRY"}');
CALL pg_temp.claim_wait('unsafe', 'r_unsafe');
SELECT * FROM pg_temp.fail('unsafe', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'task max_attempts 1', orch_enqueue('r_one', '{}', max_attempts => 1);
CALL pg_temp.claim_wait('one', 'r_one');
SELECT * FROM pg_temp.fail('one', 'TRANSIENT');
INSERT INTO rt (label, id) SELECT 'task max_failures 1', orch_enqueue('r_onef', '{}', max_failures => 1);
CALL pg_temp.claim_wait('onef', 'r_onef');
SELECT * FROM pg_temp.fail('onef', 'RETRYABLE');

-- 3k. Budgets count lease expiries: each is a failed attempt (TRANSIENT,
-- lease_expired), recovered by the next claim on the queue.
SELECT orch_create_queue('r_lease', '{"max_attempts": 2, "backoff": "fixed", "initial_delay": "10 milliseconds"}') IS NOT NULL AS created;
INSERT INTO rt (label, id) SELECT 'lease expiries', orch_enqueue('r_lease', '{}');
SELECT pg_temp.claim('lease', 'r_lease', '1 millisecond') AS claimed;
SELECT pg_sleep(0.05);
CALL pg_temp.claim_wait('lease', 'r_lease', '1 millisecond');
SELECT pg_sleep(0.05);
SELECT pg_temp.claim('lease_after', 'r_lease') AS claimed_after_second_expiry;
SELECT attempt FROM claims WHERE tag = 'lease' ORDER BY seq;
SELECT state, attempts, failures, reason_code, last_error_class FROM orch_status(pg_temp.tid('lease'));
SELECT attempt, outcome, error_class FROM orch_attempts WHERE task_id = pg_temp.tid('lease') ORDER BY attempt;

-- ---------------------------------------------------------------------------
-- 4. Reason codes recorded in orch.events.  Transitions to executing (claims)
-- are left out; reason codes the contract does not name show as *.
-- ---------------------------------------------------------------------------
SELECT rt.label,
       string_agg(e.from_state || '>' || e.to_state || ':' ||
                  CASE WHEN e.reason_code IN ('enqueued', 'retry_scheduled', 'lease_expired', 'max_attempts_exhausted',
                                              'max_failures_exhausted', 'non_retryable', 'compensation_required',
                                              'not_safe_to_retry', 'confirmation_rejected', 'confirmation_approved',
                                              'tool_resumed', 'cancelled', 'terminal_immutable')
                       THEN e.reason_code ELSE '*' END, ' ' ORDER BY e.id) AS events
  FROM rt JOIN orch.history e ON e.task_id = rt.id
 WHERE e.to_state IS DISTINCT FROM 'executing' AND e.from_state IS DISTINCT FROM e.to_state
 GROUP BY rt.ord, rt.label ORDER BY rt.ord;
SELECT rt.label, t.state, t.reason_code, t.attempts, t.failures
  FROM rt JOIN orch.tasks t USING (id) ORDER BY rt.ord;

-- Cleanup.
DO $$
BEGIN
    DELETE FROM orch.events WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'r\_%');
    DELETE FROM orch.attempts WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'r\_%');
    DELETE FROM orch.tasks WHERE queue LIKE 'r\_%';
    DELETE FROM orch.queues WHERE name LIKE 'r\_%';
END $$;
