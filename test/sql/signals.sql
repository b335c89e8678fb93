-- Signals: a wait step for a signal, orch_signal and orch_signals.
-- A signal is consumed at most once, by the first wait for its name, in the
-- order sent; one sent early is kept for the wait; a wait times out as a
-- timeout (the late signal is kept); a paused run keeps its signals until
-- it resumes; idempotency keys, caps, errors with nothing stored, tenants,
-- roles, rollback, and retention with the run.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- sig(run): the run's signals, in the order sent (ids as their rank)
CREATE FUNCTION pg_temp.sig(run bigint) RETURNS TABLE (n bigint, name text, payload jsonb, consumed boolean,
                                                       consumed_by text)
LANGUAGE sql AS $$
    SELECT rank() OVER (ORDER BY signal_id), name, payload, consumed_at IS NOT NULL, consumed_by
      FROM orch_signals WHERE run_id = run ORDER BY signal_id
$$;
-- ev(run): the run's step events (ids of signals masked)
CREATE FUNCTION pg_temp.ev(run bigint) RETURNS TABLE (step text, from_state text, to_state text,
                                                     reason_code text, label text)
LANGUAGE sql AS $$
    SELECT note, from_state, to_state, reason_code, regexp_replace(label, '^signal \d+$', 'signal <id>')
      FROM orch_events WHERE run_id = run AND entity = 'run_step' ORDER BY event_id
$$;
-- err(sql): SQLSTATE and message (run ids masked)
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; m text;
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, m = MESSAGE_TEXT;
    RETURN st || ' ' || regexp_replace(m, 'run -?\d+', 'run N', 'g');
END $$;
-- stored(): what a failed call must leave as it was
CREATE FUNCTION pg_temp.stored() RETURNS text LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM orch.signals) || ' signals, ' ||
           (SELECT count(*) FROM orch.history) || ' events, ' ||
           (SELECT string_agg(state, ',' ORDER BY run_id, ord) FROM orch.run_steps)
$$;
-- complete1(queue): claim one task and complete it
CREATE FUNCTION pg_temp.complete1(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'sg-worker');
    IF c.task_id IS NULL THEN RETURN '(nothing)'; END IF;
    PERFORM orch_complete(c.task_id, c.lease_token, '{"ok": true}');
    RETURN c.step_key;
END $$;

-- ---------------------------------------------------------------------------
-- 1. The validator: signal is a name, exclusive with duration / until_path;
--    an output_schema is allowed on a wait for a signal
-- ---------------------------------------------------------------------------
SELECT k, pg_temp.v(jsonb_build_object('steps', jsonb_build_array(s))) AS result
  FROM (VALUES
    ('signal',                '{"step_id": "w", "type": "wait", "signal": "approved"}'::jsonb),
    ('signal, timeout',       '{"step_id": "w", "type": "wait", "signal": "ok.v1:x-y", "timeout": "1 hour"}'),
    ('signal, output_schema', '{"step_id": "w", "type": "wait", "signal": "s", "output_schema": {"type": "object"}}'),
    ('signal and duration',   '{"step_id": "w", "type": "wait", "signal": "s", "duration": "1 hour"}'),
    ('signal and until_path', '{"step_id": "w", "type": "wait", "signal": "s", "until_path": "$.input.at"}'),
    ('none',                  '{"step_id": "w", "type": "wait"}'),
    ('not a string',          '{"step_id": "w", "type": "wait", "signal": 7}'),
    ('empty',                 '{"step_id": "w", "type": "wait", "signal": ""}'),
    ('bad name',              '{"step_id": "w", "type": "wait", "signal": "no spaces"}'),
    ('on a task',             '{"step_id": "w", "queue": "q", "handler": "h", "signal": "s"}'),
    ('schema, duration wait', '{"step_id": "w", "type": "wait", "duration": 5, "output_schema": {"type": "object"}}')
  ) t(k, s);

-- ---------------------------------------------------------------------------
-- 2. Fixtures: roles and definitions
-- ---------------------------------------------------------------------------
CALL pg_temp.create_roles('sg_producer', 'sg_reader', 'sg_bound_a', 'sg_bound_b');
-- (quietly: the roles outlive the database, and a rerun finds them granted)
SET client_min_messages = warning;
GRANT orch_producer, orch_reader TO sg_producer;
GRANT orch_reader TO sg_reader;
GRANT orch_producer, orch_reader TO sg_bound_a, sg_bound_b;
RESET client_min_messages;
SELECT orch_bind_tenant('sg_bound_a', 'sg_a') AS bound_a, orch_bind_tenant('sg_bound_b', 'sg_b') AS bound_b;
SELECT orch_create_queue('sg_q') IS NOT NULL AS queue, orch_create_queue('sg_q2') IS NOT NULL AS queue2;

-- sg_wait: w waits for "go" (1 hour, on_timeout: late); after runs on success
SELECT orch_define('sg_wait', '{"steps": [
    {"step_id": "w", "type": "wait", "signal": "go", "timeout": "1 hour", "on_timeout": "late"},
    {"step_id": "after", "depends_on": ["w"], "queue": "sg_q", "handler": "after"},
    {"step_id": "late", "queue": "sg_q", "handler": "late"}]}') AS v;
SELECT orch_publish('sg_wait', 1) IS NOT NULL AS published;
-- sg_two: a task first, then two waits for "go" one after the other
SELECT orch_define('sg_two', '{"steps": [
    {"step_id": "first", "queue": "sg_q2", "handler": "first"},
    {"step_id": "w1", "type": "wait", "signal": "go", "depends_on": ["first"]},
    {"step_id": "w2", "type": "wait", "signal": "go", "depends_on": ["w1"]}]}') AS v;
SELECT orch_publish('sg_two', 1) IS NOT NULL AS published;
-- sg_schema: the signal's payload must match the step's output_schema
SELECT orch_define('sg_schema', '{"steps": [
    {"step_id": "w", "type": "wait", "signal": "verdict",
     "output_schema": {"type": "object", "required": ["approved"],
                       "properties": {"approved": {"type": "boolean"}}}}]}') AS v;
SELECT orch_publish('sg_schema', 1) IS NOT NULL AS published;

-- ---------------------------------------------------------------------------
-- 3. A signal to a waiting step: its payload is the step's output
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_wait', '{}') AS r1 \gset
SELECT pg_temp.run_st(:r1);
-- orch_run_status names the signal the step waits for
SELECT x ->> 'step_id' AS step, x ->> 'state' AS state, x ->> 'signal' AS signal
  FROM jsonb_array_elements((SELECT orch_run_status(:r1)) -> 'steps') x;
SELECT orch_run_status(:r1) ? 'signals' AS lists_signals;
SELECT orch_signal(:r1, 'go', '{"by": "alice"}') AS s1 \gset
SELECT pg_temp.run_st(:r1);
SELECT output FROM orch.run_steps WHERE run_id = :r1 AND step_id = 'w';
SELECT * FROM pg_temp.sig(:r1);
-- the step's event names the signal (label), reason signal_received
SELECT * FROM pg_temp.ev(:r1);
SELECT label = 'signal ' || :s1 AS label_is_the_signal_id
  FROM orch_events WHERE run_id = :r1 AND reason_code = 'signal_received';
SELECT s -> 'signals' -> 0 ->> 'name' AS name, s -> 'signals' -> 0 ->> 'consumed_by' AS consumed_by,
       (s -> 'signals' -> 0 ->> 'signal_id')::bigint = :s1 AS same_id
  FROM orch_run_status(:r1) s;
-- the view's columns
SELECT run_id = :r1 AS run, tenant_id, signal_id = :s1 AS id, name, payload, sent_at IS NOT NULL AS sent,
       consumed_at >= sent_at AS consumed_after_sent, consumed_by
  FROM orch_signals WHERE run_id = :r1;
-- a second signal of that name: no wait left for it, kept pending
SELECT orch_signal(:r1, 'go') > :s1 AS kept;
SELECT * FROM pg_temp.sig(:r1);
-- the run ends: the signal no wait consumed stays visible with it
SELECT pg_temp.complete1('sg_q') AS completed;
SELECT pg_temp.run_st(:r1);
SELECT * FROM pg_temp.sig(:r1);

-- ---------------------------------------------------------------------------
-- 4. Sent before the wait is reached: kept, then consumed in the order sent,
--    each signal once, each wait by one
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_two', '{}') AS r2 \gset
SELECT orch_signal(:r2, 'go', '{"n": 1}') IS NOT NULL AS s1,
       orch_signal(:r2, 'other', '{"n": 2}') IS NOT NULL AS s2,
       orch_signal(:r2, 'go', '{"n": 3}') IS NOT NULL AS s3,
       orch_signal(:r2, 'go', '{"n": 4}') IS NOT NULL AS s4;
SELECT pg_temp.run_st(:r2);
SELECT * FROM pg_temp.sig(:r2);
-- pending signals show in orch_run_status
SELECT jsonb_array_length(s -> 'signals') AS signals,
       (SELECT count(*) FROM jsonb_array_elements(s -> 'signals') g WHERE g ->> 'consumed_at' IS NULL) AS pending
  FROM orch_run_status(:r2) s;
SELECT pg_temp.complete1('sg_q2') AS completed;
SELECT pg_temp.run_st(:r2);
SELECT step_id, output FROM orch.run_steps WHERE run_id = :r2 AND type = 'wait' ORDER BY ord;
SELECT * FROM pg_temp.sig(:r2);

-- ---------------------------------------------------------------------------
-- 5. Idempotency keys: the same signal returns its id; another is OR004
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_wait', '{"k": 1}') AS r3 \gset
SELECT orch_signal(:r3, 'nope', '{"a": 1}', 'key-1') AS k1 \gset
SELECT orch_signal(:r3, 'nope', '{"a": 1}', 'key-1') = :k1 AS same_id;
SELECT pg_temp.stored() AS before \gset
SELECT pg_temp.err(format($$SELECT orch_signal(%s, 'nope', '{"a": 2}', 'key-1')$$, :r3)) AS other_payload;
SELECT pg_temp.err(format($$SELECT orch_signal(%s, 'go', '{"a": 1}', 'key-1')$$, :r3)) AS other_name;
SELECT pg_temp.stored() = :'before' AS nothing_changed;
-- the key is per run: another run takes it
SELECT orch_start('sg_wait', '{"k": 2}') AS r3b \gset
SELECT orch_signal(:r3b, 'nope', '{"a": 1}', 'key-1') <> :k1 AS other_run_new_id;
SELECT count(*) AS signals_with_key FROM orch_signals WHERE run_id = :r3;

-- ---------------------------------------------------------------------------
-- 6. Errors, each storing nothing
-- ---------------------------------------------------------------------------
SELECT pg_temp.stored() AS before \gset
SELECT k, pg_temp.err(q) AS result FROM (VALUES
    ('null run',        'SELECT orch_signal(NULL, ''go'')'),
    ('null name',       format('SELECT orch_signal(%s, NULL)', :r3)),
    ('null payload',    format('SELECT orch_signal(%s, ''go'', NULL)', :r3)),
    ('bad name',        format('SELECT orch_signal(%s, ''no spaces'')', :r3)),
    ('empty name',      format('SELECT orch_signal(%s, '''')', :r3)),
    ('long name',       format('SELECT orch_signal(%s, repeat(''x'', 129))', :r3)),
    ('empty key',       format('SELECT orch_signal(%s, ''go'', ''{}'', '''')', :r3)),
    ('unknown run',     'SELECT orch_signal(-1, ''go'')'),
    ('finished run',    format('SELECT orch_signal(%s, ''go'')', :r1))
  ) t(k, q) ORDER BY k;
SET orchestrator.max_payload_size = 100;
SELECT pg_temp.err(format($$SELECT orch_signal(%s, 'go', jsonb_build_object('x', repeat('y', 200)))$$, :r3))
    AS too_large;
RESET orchestrator.max_payload_size;
SELECT pg_temp.stored() = :'before' AS nothing_changed;

-- ---------------------------------------------------------------------------
-- 7. The timeout: the wait times out (audited as a timeout, never as a
--    signal) and on_timeout applies; a signal after it is kept unconsumed
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_wait', '{"t": 1}') AS r4 \gset
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :r4 AND step_id = 'w';
-- a signal sent once the timeout passed (before maintenance noticed it)
SELECT orch_signal(:r4, 'go', '{"late": true}') IS NOT NULL AS sent_late;
SELECT pg_temp.run_st(:r4);
SELECT * FROM pg_temp.ev(:r4);
SELECT * FROM pg_temp.sig(:r4);
-- and with maintenance first
SELECT orch_start('sg_wait', '{"t": 2}') AS r5 \gset
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :r5 AND step_id = 'w';
SELECT action, count FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:r5);
SELECT orch_signal(:r5, 'go') IS NOT NULL AS sent_after;
SELECT * FROM pg_temp.sig(:r5);
SELECT count(*) AS signal_events FROM orch_events WHERE run_id IN (:r4, :r5) AND reason_code = 'signal_received';

-- ---------------------------------------------------------------------------
-- 8. The output_schema: a payload that does not match fails the step
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_schema', '{}') AS r6 \gset
SELECT orch_signal(:r6, 'verdict', '{"approved": "yes"}') IS NOT NULL AS sent;
SELECT pg_temp.run_st(:r6);
SELECT error FROM orch.run_steps WHERE run_id = :r6;
SELECT * FROM pg_temp.ev(:r6);
SELECT * FROM pg_temp.sig(:r6);
SELECT pg_temp.err(format($$SELECT orch_signal(%s, 'verdict', '{"approved": true}')$$, :r6)) AS run_failed;
SELECT orch_start('sg_schema', '{}') AS r7 \gset
SELECT orch_signal(:r7, 'verdict', '{"approved": true}') IS NOT NULL AS sent;
SELECT pg_temp.run_st(:r7);

-- ---------------------------------------------------------------------------
-- 9. Pause: a paused run takes signals and keeps them; the wait is
--    satisfied on resume, not while paused
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_wait', '{"p": 1}') AS r8 \gset
SELECT orch_pause_run(:r8) AS paused;
SELECT orch_signal(:r8, 'go', '{"p": true}') IS NOT NULL AS sent;
SELECT pg_temp.run_st(:r8);
SELECT * FROM pg_temp.sig(:r8);
SELECT orch_resume_run(:r8) AS resumed;
SELECT pg_temp.run_st(:r8);
SELECT * FROM pg_temp.sig(:r8);

-- ---------------------------------------------------------------------------
-- 10. Transactional: a signal in a transaction that rolls back leaves nothing
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_wait', '{"x": 1}') AS r9 \gset
SELECT pg_temp.stored() AS before \gset
BEGIN;
SELECT orch_signal(:r9, 'go') IS NOT NULL AS sent;
SELECT pg_temp.run_st(:r9);
ROLLBACK;
SELECT pg_temp.stored() = :'before' AS nothing_left, pg_temp.run_st(:r9);

-- ---------------------------------------------------------------------------
-- 11. The cap: a run keeps at most 1000 signals unconsumed
-- ---------------------------------------------------------------------------
INSERT INTO orch.signals (run_id, tenant_id, name, payload, sent_by)
SELECT :r9, 'default', 'pile', '{}', 'test' FROM generate_series(1, 998);
-- a consumed signal does not count
SELECT orch_signal(:r9, 'go') IS NOT NULL AS consumed_at_once;
SELECT pg_temp.run_st(:r9);
SELECT orch_signal(:r9, 'pile') IS NOT NULL AS the_999th, orch_signal(:r9, 'pile') IS NOT NULL AS the_1000th;
SELECT pg_temp.stored() AS before \gset
SELECT pg_temp.err(format('SELECT orch_signal(%s, ''pile'')', :r9)) AS the_1001st;
SELECT pg_temp.stored() = :'before' AS nothing_changed;
DELETE FROM orch.signals WHERE run_id = :r9 AND name = 'pile';

-- ---------------------------------------------------------------------------
-- 12. Tenants and roles: a bound role signals only its tenants' runs (else
--     OR005, as for a run that does not exist) and sees only their signals;
--     orch_signal is orch_producer's
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_wait', '{}', tenant => 'sg_a') AS ra \gset
SELECT orch_start('sg_wait', '{}', tenant => 'sg_b') AS rb \gset
SELECT pg_temp.stored() AS before \gset
SET ROLE sg_bound_b;
SELECT pg_temp.err(format('SELECT orch_signal(%s, ''go'')', :ra)) AS other_tenant;
SELECT pg_temp.err(format('SELECT orch_signal(%s, ''go'', ''{}'', ''k'')', :ra)) AS other_tenant_with_key;
RESET ROLE;
SELECT pg_temp.stored() = :'before' AS nothing_changed;
SET ROLE sg_bound_a;
SELECT orch_signal(:ra, 'go', '{"t": "a"}') IS NOT NULL AS own_tenant;
SELECT tenant_id, name, consumed_by FROM orch_signals ORDER BY signal_id;
RESET ROLE;
SET ROLE sg_bound_b;
SELECT count(*) AS b_sees FROM orch_signals;
RESET ROLE;
SELECT pg_temp.run_st(:ra) AS a, pg_temp.run_st(:rb) AS b;
SET ROLE sg_reader;
SELECT pg_temp.err(format('SELECT orch_signal(%s, ''go'')', :rb)) AS reader_may_not;
SELECT count(*) > 0 AS reader_reads FROM orch_signals;
RESET ROLE;
SET ROLE sg_producer;
SELECT orch_signal(:rb, 'go') IS NOT NULL AS producer_may;
RESET ROLE;
SELECT pg_temp.run_st(:rb) AS b;
-- the table itself is not for the roles
SET ROLE sg_producer;
SELECT pg_temp.err('SELECT count(*) FROM orch.signals') AS table_read;
RESET ROLE;

-- ---------------------------------------------------------------------------
-- 13. A canceled run keeps its signals (visible) and takes no more
-- ---------------------------------------------------------------------------
SELECT orch_start('sg_two', '{}') AS rc \gset
SELECT orch_signal(:rc, 'go') IS NOT NULL AS sent;
SELECT orch_cancel_run(:rc, 'not needed') AS canceled;
SELECT pg_temp.err(format('SELECT orch_signal(%s, ''go'')', :rc)) AS after_cancel;
SELECT * FROM pg_temp.sig(:rc);

-- ---------------------------------------------------------------------------
-- 14. Retention: a run's signals leave with the run
-- ---------------------------------------------------------------------------
SELECT count(*) > 0 AS signals_kept FROM orch.signals WHERE run_id = :rc;
SET orchestrator.retention = '1s';
SELECT pg_sleep(1.1);
SELECT count > 0 AS runs_purged FROM orch_maintain() WHERE action = 'runs_purged';
RESET orchestrator.retention;
SELECT (SELECT count(*) FROM orch.runs WHERE id = :rc) AS run_left,
       (SELECT count(*) FROM orch.signals WHERE run_id = :rc) AS signals_left,
       (SELECT count(*) FROM orch.signals s WHERE NOT EXISTS (SELECT 1 FROM orch.runs r
          WHERE r.id = s.run_id AND r.tenant_id = s.tenant_id)) AS orphans;
-- the open runs keep theirs
SELECT count(*) > 0 AS open_runs_keep_theirs FROM orch.signals WHERE run_id = :r9;
