-- bad_input: every user mistake gets its SQLSTATE (SPEC §1 conventions, §12;
-- docs/semantics.md) and changes nothing stored.  Nothing user-caused is XX000.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- A fingerprint of everything the extension stores.
CREATE FUNCTION pg_temp.snapshot() RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.tasks x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.history x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY id) FROM orch.attempts x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY name) FROM orch.queues x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY tenant_id, key) FROM orch.idempotency_keys x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY name) FROM orch.state_machines x),
        (SELECT string_agg(to_jsonb(x)::text, ',' ORDER BY machine, from_state, to_state) FROM orch.state_transitions x)))
$$;

-- Context: an executing task (TE, its token TOK) and a completed one (TD).
SELECT orch_create_queue('bad_q') IS NOT NULL AS created;
SELECT orch_enqueue('bad_q', '{"n": 1}') AS te \gset
SELECT orch_enqueue('bad_q', '{"n": 2}') AS td \gset
CREATE TEMP TABLE ctx AS SELECT task_id, lease_token FROM orch_dequeue('bad_q', 'bad-worker', 2);
SELECT orch_complete(task_id, lease_token) FROM ctx WHERE task_id = :td;
CREATE TEMP TABLE ids AS SELECT :te::bigint AS te, :td::bigint AS td;
SELECT (SELECT state FROM orch.tasks WHERE id = te) AS te_state,
       (SELECT state FROM orch.tasks WHERE id = td) AS td_state FROM ids;

-- run(sql): 'ok' or the SQLSTATE, and whether the stored state is unchanged.
-- {TE}, {TD} and {TOK} in sql are replaced by the context values.
CREATE FUNCTION pg_temp.run(q text, OUT result text, OUT unchanged boolean) LANGUAGE plpgsql AS $$
DECLARE s0 text := pg_temp.snapshot();
BEGIN
    q := replace(q, '{TE}', (SELECT te::text FROM ids));
    q := replace(q, '{TD}', (SELECT td::text FROM ids));
    q := replace(q, '{TOK}', quote_literal((SELECT lease_token::text FROM ctx JOIN ids ON ctx.task_id = ids.te)) || '::uuid');
    BEGIN
        EXECUTE q;
        result := 'ok';
    EXCEPTION WHEN OTHERS THEN
        result := SQLSTATE;
    END;
    unchanged := pg_temp.snapshot() = s0;
END $$;

CREATE TEMP TABLE cases (ord serial, call text, expected text);
INSERT INTO cases (call, expected) VALUES
-- orch_enqueue
    ($$SELECT orch_enqueue(NULL, '{}')$$, '22004'),
    ($$SELECT orch_enqueue('bad_q', NULL)$$, '22004'),
    ($$SELECT orch_enqueue(NULL, NULL)$$, '22004'),
    ($$SELECT orch_enqueue('', '{}')$$, '22023'),
    ($$SELECT orch_enqueue('bad q', '{}')$$, '22023'),
    ($$SELECT orch_enqueue('bad;q', '{}')$$, '22023'),
    ($$SELECT orch_enqueue('bad''q', '{}')$$, '22023'),
    ($$SELECT orch_enqueue('bad/q', '{}')$$, '22023'),
    ($$SELECT orch_enqueue(E'bad\tq', '{}')$$, '22023'),
    ($$SELECT orch_enqueue('очередь', '{}')$$, '22023'),
    ($$SELECT orch_enqueue(repeat('a', 129), '{}')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', jsonb_build_object('x', repeat('x', 10 * 1024 * 1024)))$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', jsonb_build_object('x', repeat('x', 1100 * 1024)))$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', max_attempts => 0)$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', max_attempts => -1)$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', max_failures => 0)$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', retry_policy => '{"bogus": 1}')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', retry_policy => '{"backoff": "linear"}')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', retry_policy => '[]')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', retry_policy => '{"retry_on": ["NOPE"]}')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', retry_policy => '{"max_attempts": -3}')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', retry_policy => '{"priority": 1}')$$, '22023'),
    ($$SELECT orch_enqueue('bad_q', '{}', timeout => '-1 second')$$, '22023'),
-- orch_enqueue_batch
    ($$SELECT orch_enqueue_batch(NULL, ARRAY['{}']::jsonb[])$$, '22004'),
    ($$SELECT orch_enqueue_batch('bad_q', NULL)$$, '22004'),
    ($$SELECT orch_enqueue_batch('bad_q', ARRAY['{}', NULL]::jsonb[])$$, '22004'),
    ($$SELECT orch_enqueue_batch('bad_q', ARRAY['{}', '{}']::jsonb[], idempotency_keys => ARRAY['k'])$$, '22023'),
    ($$SELECT orch_enqueue_batch('', ARRAY['{}']::jsonb[])$$, '22023'),
    ($$SELECT orch_enqueue_batch('bad_q', ARRAY['{}', jsonb_build_object('x', repeat('x', 1100 * 1024))])$$, '22023'),
-- orch_dequeue
    ($$SELECT * FROM orch_dequeue(NULL, 'w')$$, '22004'),
    ($$SELECT * FROM orch_dequeue('bad_q', NULL)$$, '22004'),
    ($$SELECT * FROM orch_dequeue('bad_q', 'w', 0)$$, '22023'),
    ($$SELECT * FROM orch_dequeue('bad_q', 'w', -1)$$, '22023'),
    ($$SELECT * FROM orch_dequeue('bad_q', 'w', 10001)$$, '22023'),
    ($$SELECT * FROM orch_dequeue('bad_q', 'w', 1, '-1 second')$$, '22023'),
    ($$SELECT * FROM orch_dequeue('bad_q', 'w', 1, '0 seconds')$$, '22023'),
    ($$SELECT * FROM orch_dequeue('', 'w')$$, '22023'),
-- orch_complete
    ($$SELECT orch_complete(NULL, {TOK})$$, '22004'),
    ($$SELECT orch_complete({TE}, NULL)$$, '22004'),
    ($$SELECT orch_complete(-1, gen_random_uuid())$$, 'OR005'),
    ($$SELECT orch_complete({TE}, gen_random_uuid())$$, 'OR003'),
    ($$SELECT orch_complete({TE}, {TOK}, jsonb_build_object('x', repeat('x', 10 * 1024 * 1024)))$$, '22023'),
    ($$SELECT orch_complete({TD}, gen_random_uuid())$$, 'OR002'),
-- orch_fail
    ($$SELECT * FROM orch_fail(NULL, {TOK}, 'TRANSIENT')$$, '22004'),
    ($$SELECT * FROM orch_fail({TE}, NULL, 'TRANSIENT')$$, '22004'),
    ($$SELECT * FROM orch_fail({TE}, {TOK}, NULL)$$, '22004'),
    ($$SELECT * FROM orch_fail({TE}, {TOK}, 'BOGUS')$$, '22023'),
    ($$SELECT * FROM orch_fail({TE}, {TOK}, '')$$, '22023'),
    ($$SELECT * FROM orch_fail({TE}, {TOK}, 'TRANSIENT', 'e', '-1 second')$$, '22023'),
    ($$SELECT * FROM orch_fail(-1, gen_random_uuid(), 'TRANSIENT')$$, 'OR005'),
    ($$SELECT * FROM orch_fail({TE}, gen_random_uuid(), 'TRANSIENT')$$, 'OR003'),
-- orch_heartbeat
    ($$SELECT orch_heartbeat(NULL, {TOK})$$, '22004'),
    ($$SELECT orch_heartbeat({TE}, NULL)$$, '22004'),
    ($$SELECT orch_heartbeat({TE}, {TOK}, '-1 second')$$, '22023'),
    ($$SELECT orch_heartbeat(-1, gen_random_uuid())$$, 'OR005'),
-- orch_await_tool / orch_await_confirmation
    ($$SELECT orch_await_tool(NULL, {TOK})$$, '22004'),
    ($$SELECT orch_await_tool({TE}, NULL)$$, '22004'),
    ($$SELECT orch_await_tool(-1, gen_random_uuid())$$, 'OR005'),
    ($$SELECT orch_await_confirmation(NULL, {TOK})$$, '22004'),
    ($$SELECT orch_await_confirmation({TE}, NULL)$$, '22004'),
    ($$SELECT orch_await_confirmation(-1, gen_random_uuid())$$, 'OR005'),
-- orch_resume / orch_confirm / orch_cancel
    ($$SELECT orch_resume(NULL)$$, '22004'),
    ($$SELECT orch_resume(-1, '{}')$$, 'OR005'),
    ($$SELECT orch_confirm(NULL, true)$$, '22004'),
    ($$SELECT orch_confirm({TE}, NULL)$$, '22004'),
    ($$SELECT orch_confirm(-1, true)$$, 'OR005'),
    ($$SELECT orch_cancel(NULL)$$, '22004'),
    ($$SELECT orch_cancel(-1)$$, 'OR005'),
-- orch_status / orch_history
    ($$SELECT * FROM orch_status(NULL)$$, '22004'),
    ($$SELECT * FROM orch_status(-1)$$, 'OR005'),
    ($$SELECT * FROM orch_history(NULL)$$, '22004'),
    ($$SELECT * FROM orch_history(-1)$$, 'OR005'),
-- orch_retry_decision
    ($$SELECT * FROM orch_retry_decision(NULL, 1, 1)$$, '22004'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', NULL, 1)$$, '22004'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, NULL)$$, '22004'),
    ($$SELECT * FROM orch_retry_decision('NOPE', 1, 1)$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('', 1, 1)$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 0, 1)$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 0)$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, -1)$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1, '{"bogus": true}')$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1, '{"backoff": "linear"}')$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1, '{"max_attempts": "many"}')$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1, '[]')$$, '22023'),
    ($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1, '{}', '-5 seconds')$$, '22023'),
-- orch_create_queue: names and settings
    ($$SELECT orch_create_queue(NULL)$$, '22004'),
    ($$SELECT orch_create_queue('')$$, '22023'),
    ($$SELECT orch_create_queue('bad name')$$, '22023'),
    ($$SELECT orch_create_queue(repeat('q', 129))$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"bogus": 1}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '[]')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '"lease"')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"priority": "high"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"lease": "-5 seconds"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"lease": "banana"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"lease": 0}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"lease": true}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"max_attempts": 0}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"max_attempts": "five"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"max_attempts": 2.5}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"max_failures": -1}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"backoff": "linear"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"initial_delay": -5}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"max_delay": "-1 second"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"schedule": []}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"schedule": ["soon"]}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"schedule": "5 seconds"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"retry_on": ["NOPE"]}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"retry_on": "TRANSIENT"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"on_exhausted": "explode"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"retry_safety": "MAYBE"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"concurrency_key_limit": -1}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"owner_limit": "lots"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"rate_limit": 5}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"rate_limit": {"count": 0, "per": "1 minute"}}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"rate_limit": {"count": 5, "per": "1 minute", "on_exceed": "panic"}}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"rate_limit": {"count": 5, "per": "often"}}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"idempotency_ttl": "-1 hour"}')$$, '22023'),
    ($$SELECT orch_create_queue('bad_s', '{"timeout": "-1 second"}')$$, '22023'),
-- orch_configure_queue and the other queue calls
    ($$SELECT orch_configure_queue(NULL, '{}')$$, '22004'),
    ($$SELECT orch_configure_queue('bad_q', NULL)$$, '22004'),
    ($$SELECT orch_configure_queue('no_such_queue', '{"priority": 1}')$$, 'OR005'),
    ($$SELECT orch_configure_queue('bad_q', '{"bogus": 1}')$$, '22023'),
    ($$SELECT orch_configure_queue('bad_q', '{"lease": "-1 second"}')$$, '22023'),
    ($$SELECT orch_configure_queue('bad_q', '{"priority": 3, "backoff": "sometimes"}')$$, '22023'),
    ($$SELECT orch_pause_queue(NULL)$$, '22004'),
    ($$SELECT orch_pause_queue('no_such_queue')$$, 'OR005'),
    ($$SELECT orch_resume_queue(NULL)$$, '22004'),
    ($$SELECT orch_resume_queue('no_such_queue')$$, 'OR005'),
    ($$SELECT orch_drop_queue(NULL)$$, '22004'),
    ($$SELECT orch_drop_queue('no_such_queue')$$, 'OR005'),
    ($$SELECT orch_queue_settings(NULL)$$, '22004'),
    ($$SELECT orch_queue_settings('no_such_queue')$$, 'OR005'),
-- state machines
    ($$SELECT orch_create_state_machine(NULL, '{"a": ["b"]}')$$, '22004'),
    ($$SELECT orch_create_state_machine('bad_m', NULL)$$, '22004'),
    ($$SELECT orch_create_state_machine('bad_m1', '[]')$$, '22023'),
    ($$SELECT orch_create_state_machine('bad_m2', '{"a": "b"}')$$, '22023'),
    ($$SELECT orch_create_state_machine('bad_m3', '{"a": [1]}')$$, '22023'),
    ($$SELECT orch_create_state_machine('bad_m4', '{"a": ["b"]}', ARRAY['zzz'])$$, '22023');

CREATE TEMP TABLE outcome AS
SELECT c.ord, c.call, c.expected, r.result, r.unchanged
  FROM cases c, LATERAL pg_temp.run(c.call) r
 ORDER BY c.ord;
SELECT call, expected, result, result = expected AS ok, unchanged FROM outcome ORDER BY ord;
SELECT count(*) AS cases, count(*) FILTER (WHERE result = expected) AS as_expected,
       count(*) FILTER (WHERE NOT unchanged) AS changed_something,
       count(*) FILTER (WHERE result = 'XX000') AS internal_errors
  FROM outcome;

-- With orchestrator.auto_create_queues off, an unknown queue is OR005.
SET orchestrator.auto_create_queues = off;
SELECT * FROM pg_temp.run($$SELECT orch_enqueue('bad_unknown_queue', '{}')$$);
SELECT * FROM pg_temp.run($$SELECT orch_enqueue_batch('bad_unknown_queue', ARRAY['{}']::jsonb[])$$);
RESET orchestrator.auto_create_queues;

-- The boundaries are accepted: 128 characters, every allowed character, any
-- JSON value as payload (a JSON null included), just under 1 MB, batch 10000.
SELECT (pg_temp.run($$SELECT orch_enqueue(repeat('b', 128), '{}')$$)).result;
SELECT (pg_temp.run($$SELECT orch_enqueue('bad_AZaz09_.:-', '{}')$$)).result;
SELECT (pg_temp.run($$SELECT orch_enqueue('bad_values', v) FROM (VALUES ('{}'::jsonb), ('[]'), ('0'), ('"text"'), ('null'), ('true')) x(v)$$)).result;
SELECT (pg_temp.run($$SELECT orch_enqueue('bad_values', jsonb_build_object('x', repeat('x', 900 * 1024)))$$)).result;
SELECT (pg_temp.run($$SELECT * FROM orch_dequeue('bad_empty_queue', 'w', 10000)$$)).result;
SELECT (pg_temp.run($$SELECT * FROM orch_enqueue_batch('bad_values', ARRAY[]::jsonb[])$$)).result;
SELECT count(*) AS empty_batch_rows FROM orch_enqueue_batch('bad_values', ARRAY[]::jsonb[]);
SELECT payload FROM orch.tasks WHERE queue = 'bad_values' AND octet_length(payload::text) < 100 ORDER BY id;

-- Cleanup.
DO $$
BEGIN
    DELETE FROM orch.events WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'bad\_%' OR queue = repeat('b', 128));
    DELETE FROM orch.attempts WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'bad\_%' OR queue = repeat('b', 128));
    DELETE FROM orch.tasks WHERE queue LIKE 'bad\_%' OR queue = repeat('b', 128);
    DELETE FROM orch.queues WHERE name LIKE 'bad\_%' OR name = repeat('b', 128);
    DELETE FROM orch.state_machines WHERE name LIKE 'bad\_m%';
END $$;
