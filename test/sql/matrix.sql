-- matrix: the task lifecycle matrix of SPEC §2, enforced by the C trigger on
-- orch.tasks for every writer (here: raw UPDATEs by the table owner).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

CREATE TEMP TABLE mx_states (ord int PRIMARY KEY, st text NOT NULL);
INSERT INTO mx_states VALUES
    (1, 'received'), (2, 'queued'), (3, 'executing'), (4, 'awaiting_tool'),
    (5, 'awaiting_user_confirmation'), (6, 'completed'), (7, 'failed'), (8, 'cancelled');

-- mx_make(state, queue): a task in the given state, reached through the API
-- (received: raw INSERT, the API never leaves a task there).  Each task gets
-- its own queue so that a claim can only pick that task.
CREATE FUNCTION pg_temp.mx_make(st text, q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE tid bigint; c record; got text;
BEGIN
    IF st = 'received' THEN
        INSERT INTO orch.tasks (queue, state, payload) VALUES (q, 'received', '{}')
        RETURNING orch.tasks.id INTO tid;
    ELSE
        tid := orch_enqueue(q, '{"mx": true}'::jsonb);
        IF st = 'cancelled' THEN
            PERFORM orch_cancel(tid, 'matrix setup');
        ELSIF st <> 'queued' THEN
            SELECT d.task_id, d.lease_token INTO c FROM orch_dequeue(q, 'mx-worker') d;
            IF c.task_id IS DISTINCT FROM tid THEN
                RAISE EXCEPTION 'setup: claimed % instead of %', c.task_id, tid;
            END IF;
            CASE st
                WHEN 'executing' THEN NULL;
                WHEN 'awaiting_tool' THEN PERFORM orch_await_tool(tid, c.lease_token, 'tool', '{}');
                WHEN 'awaiting_user_confirmation' THEN PERFORM orch_await_confirmation(tid, c.lease_token, '{}');
                WHEN 'completed' THEN PERFORM orch_complete(tid, c.lease_token, '{}');
                WHEN 'failed' THEN PERFORM orch_fail(tid, c.lease_token, 'NON_RETRYABLE', 'matrix setup');
            END CASE;
        END IF;
    END IF;
    SELECT t.state INTO got FROM orch.tasks t WHERE t.id = tid;
    IF got IS DISTINCT FROM st THEN
        RAISE EXCEPTION 'setup: task is % instead of %', got, st;
    END IF;
    RETURN tid;
END $$;

-- For every (from, to): a fresh task in `from`, then a raw UPDATE to `to`.
-- result: ok (exactly one row updated) or the SQLSTATE; state_after: the
-- row's state afterwards; events: events written by the UPDATE; events_ok:
-- they are all task events from -> to; intact: the whole row is unchanged.
CREATE FUNCTION pg_temp.mx_run()
RETURNS TABLE (from_state text, to_state text, result text, state_after text,
               events bigint, events_ok boolean, intact boolean)
LANGUAGE plpgsql AS $$
DECLARE f record; t record; tid bigint; before jsonb; after jsonb; maxev bigint;
BEGIN
    FOR f IN SELECT * FROM mx_states ORDER BY ord LOOP
        FOR t IN SELECT * FROM mx_states ORDER BY ord LOOP
            tid := pg_temp.mx_make(f.st, format('mx_%s_%s', f.ord, t.ord));
            SELECT to_jsonb(x) INTO before FROM orch.tasks x WHERE x.id = tid;
            SELECT coalesce(max(e.id), 0) INTO maxev FROM orch.history e;
            result := pg_temp.try(format(
                'WITH u AS (UPDATE orch.tasks SET state = %L WHERE id = %s RETURNING 1) '
                'SELECT CASE count(*) WHEN 1 THEN ''ok'' ELSE count(*) || '' rows'' END FROM u',
                t.st, tid));
            SELECT to_jsonb(x), x.state INTO after, state_after FROM orch.tasks x WHERE x.id = tid;
            SELECT count(*), coalesce(bool_and(e.task_id = tid AND e.entity = 'task'
                                               AND e.from_state = f.st AND e.to_state = t.st), true)
              INTO events, events_ok
              FROM orch.history e WHERE e.id > maxev;
            intact := before = after;
            from_state := f.st;
            to_state := t.st;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END $$;

CREATE TEMP TABLE mx AS SELECT * FROM pg_temp.mx_run();

-- The full matrix.  Expected: the 25 pairs of SPEC §2 succeed (one event
-- each, none for a self-transition); from a non-terminal state every other
-- target raises OR001, from a terminal one OR002; a refused UPDATE leaves the
-- row intact.  (intact is shown where it is defined: refusals and terminal
-- self-transitions.)
SELECT from_state, to_state, result, state_after, events, events_ok,
       CASE WHEN result <> 'ok' OR from_state IN ('completed', 'failed', 'cancelled')
            THEN intact END AS intact
  FROM mx
  JOIN mx_states f ON f.st = mx.from_state
  JOIN mx_states t ON t.st = mx.to_state
 ORDER BY f.ord, t.ord;

SELECT result, count(*) FROM mx GROUP BY result ORDER BY result;

-- Every accepted pair is in the built-in machine stored as data, and vice versa.
SELECT count(*) AS accepted_not_in_machine
  FROM mx
 WHERE result = 'ok'
   AND NOT EXISTS (SELECT 1 FROM orch.state_transitions s
                    WHERE s.machine = 'task' AND s.from_state = mx.from_state AND s.to_state = mx.to_state);
SELECT count(*) AS machine_pairs_refused
  FROM orch.state_transitions s
 WHERE s.machine = 'task' AND s.from_state IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM mx WHERE mx.result = 'ok'
                      AND mx.from_state = s.from_state AND mx.to_state = s.to_state);

-- ---------------------------------------------------------------------------
-- Self-transitions and other column changes.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE mx_t AS
SELECT st, pg_temp.mx_make(st, 'mx_self_' || ord) AS id FROM mx_states;

CREATE FUNCTION pg_temp.mx_upd(st text, set_clause text) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.try(format(
        'WITH u AS (UPDATE orch.tasks SET %s WHERE id = %s RETURNING 1) SELECT count(*) || '' row(s)'' FROM u',
        set_clause, (SELECT id FROM mx_t WHERE mx_t.st = $1)))
$$;

SELECT coalesce(max(id), 0) AS ev0 FROM orch.history \gset

-- Non-terminal: a self-transition may change other columns; no event.
SELECT pg_temp.mx_upd('queued', 'state = ''queued'', priority = 7') AS queued_self_prio,
       pg_temp.mx_upd('executing', 'priority = 3') AS executing_prio,
       pg_temp.mx_upd('awaiting_tool', 'state = ''awaiting_tool'', last_error = ''note''') AS awaiting_tool_self,
       pg_temp.mx_upd('received', 'payload = ''{"changed": 1}''') AS received_payload;
SELECT st, priority, last_error, payload FROM mx_t JOIN orch.tasks t USING (id)
 WHERE st IN ('queued', 'executing', 'awaiting_tool', 'received') ORDER BY st;
SELECT count(*) AS events_written FROM orch.history WHERE id > :ev0;

-- Terminal: accepted only when no column changes; anything else is OR002.
SELECT st,
       pg_temp.mx_upd(st, format('state = %L', st)) AS same_state,
       pg_temp.mx_upd(st, 'priority = priority') AS no_op,
       pg_temp.mx_upd(st, format('state = %L, priority = priority + 1', st)) AS self_with_change,
       pg_temp.mx_upd(st, 'result = ''{"tampered": true}''') AS result_change,
       pg_temp.mx_upd(st, 'last_error = ''tampered''') AS error_change,
       pg_temp.mx_upd(st, 'run_at = run_at + interval ''1 day''') AS run_at_change
  FROM mx_t WHERE st IN ('completed', 'failed', 'cancelled') ORDER BY st;
SELECT count(*) AS events_written FROM orch.history WHERE id > :ev0;
SELECT st, t.priority, t.result IS NULL OR t.result <> '{"tampered": true}' AS result_kept,
       t.last_error IS DISTINCT FROM 'tampered' AS error_kept
  FROM mx_t JOIN orch.tasks t USING (id)
 WHERE st IN ('completed', 'failed', 'cancelled') ORDER BY st;

-- A multi-row UPDATE with one forbidden row changes no row.
SELECT pg_temp.try(format(
    'WITH u AS (UPDATE orch.tasks SET state = ''cancelled'' WHERE id IN (%s, %s) RETURNING 1) SELECT count(*) FROM u',
    (SELECT id FROM mx_t WHERE st = 'queued'), (SELECT id FROM mx_t WHERE st = 'completed'))) AS multi_row;
SELECT st, t.state FROM mx_t JOIN orch.tasks t USING (id) WHERE st IN ('queued', 'completed') ORDER BY st;

-- An unknown state is not in the matrix either.
SELECT pg_temp.mx_upd('queued', 'state = ''bogus''') AS to_unknown_state;

-- Retention may still delete a terminal task.
SELECT pg_temp.try(format('WITH d AS (DELETE FROM orch.tasks WHERE id = %s RETURNING 1) SELECT count(*) FROM d',
                          (SELECT id FROM mx_t WHERE st = 'completed'))) AS delete_terminal;

-- ---------------------------------------------------------------------------
-- Initial states on INSERT: received, queued, failed only.
-- ---------------------------------------------------------------------------
SELECT coalesce(max(id), 0) AS ev0 FROM orch.history \gset
SELECT st AS initial_state,
       pg_temp.try(format(
           'WITH i AS (INSERT INTO orch.tasks (queue, state, payload) VALUES (''mx_insert'', %L, ''{}'') RETURNING 1) '
           'SELECT count(*) FROM i', st)) AS result
  FROM mx_states ORDER BY ord;
SELECT state, count(*) FROM orch.tasks WHERE queue = 'mx_insert' GROUP BY state ORDER BY state;

-- ---------------------------------------------------------------------------
-- The API refuses what the matrix forbids, with the same codes.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE mx_api AS
SELECT st, pg_temp.mx_make(st, 'mx_api_' || ord) AS id FROM mx_states;
CREATE FUNCTION pg_temp.mx_call(st text, call text) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.try(replace(replace(call, '$T', (SELECT id::text FROM mx_api WHERE mx_api.st = $1)),
        '$L', quote_literal(coalesce((SELECT t.lease_token::text FROM mx_api JOIN orch.tasks t USING (id)
                                       WHERE mx_api.st = $1), gen_random_uuid()::text)) || '::uuid'))
$$;
-- Only refusals are called here, so no call changes the task; cells where the
-- call would be legal are left empty.
SELECT st,
       CASE WHEN st <> 'awaiting_tool' THEN pg_temp.mx_call(st, 'SELECT orch_resume($T, ''{}'')') END AS resume,
       CASE WHEN st <> 'awaiting_user_confirmation' THEN pg_temp.mx_call(st, 'SELECT orch_confirm($T, true)') END AS confirm,
       CASE WHEN st <> 'executing' THEN pg_temp.mx_call(st, 'SELECT orch_complete($T, $L)') END AS complete,
       CASE WHEN st <> 'executing' THEN pg_temp.mx_call(st, 'SELECT state FROM orch_fail($T, $L, ''NON_RETRYABLE'')') END AS fail,
       CASE WHEN st <> 'executing' THEN pg_temp.mx_call(st, 'SELECT orch_await_tool($T, $L)') END AS await_tool,
       CASE WHEN st <> 'executing' THEN pg_temp.mx_call(st, 'SELECT orch_await_confirmation($T, $L)') END AS await_conf,
       CASE WHEN st IN ('completed', 'failed', 'cancelled') THEN pg_temp.mx_call(st, 'SELECT orch_cancel($T)') END AS cancel
  FROM mx_api JOIN mx_states USING (st) ORDER BY ord;
SELECT st, t.state AS state_after FROM mx_api JOIN orch.tasks t USING (id) JOIN mx_states USING (st) ORDER BY ord;

-- Cleanup.
DO $$
BEGIN
    DELETE FROM orch.events WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'mx\_%');
    DELETE FROM orch.attempts WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'mx\_%');
    DELETE FROM orch.tasks WHERE queue LIKE 'mx\_%';
    DELETE FROM orch.queues WHERE name LIKE 'mx\_%';
END $$;
