-- Hardening: settings ranges, delay caps, races' SQLSTATEs, and the state
-- machine trigger (which runs as the extension owner) running no user code.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- integral numbers written as 2.0 are integers, and keep working in slot accounting
SELECT orch_create_queue('hard_k', '{"concurrency_key_limit": 2.0}') ->> 'concurrency_key_limit' AS key_limit;
SELECT count(orch_enqueue('hard_k', '{}', concurrency_key => 'K')) AS enqueued FROM generate_series(1, 3);
SELECT count(*) FILTER (WHERE gated) AS gated, count(*) FILTER (WHERE ready_at IS NOT NULL) AS claimable
  FROM orch.tasks WHERE queue = 'hard_k';

-- out-of-range numbers and delays are bad values (22023), never 22003 or an overflow
SELECT s AS setting, pg_temp.sqlstate_of(format('SELECT orch_create_queue(%L, %L)', 'hard_bad', s)) AS result
  FROM unnest(ARRAY['{"priority": 3000000000}', '{"max_attempts": 1e30}', '{"concurrency_key_limit": 1e30}',
                    '{"initial_delay": "200 years"}', '{"schedule": ["1s", "1000 years"]}',
                    '{"lease": 1e13}']) s;
SELECT count(*) AS hard_bad_created FROM orch.queues WHERE name = 'hard_bad';
SELECT pg_temp.sqlstate_of($$SELECT * FROM orch_retry_decision('TRANSIENT', 1, 1, '{}', interval '200 years')$$) AS decision_retry_after;
SELECT orch_enqueue('hard_f', '{}') AS f \gset
SELECT lease_token AS ftok FROM orch_dequeue('hard_f', 'hw') \gset
SELECT pg_temp.sqlstate_of(format($$SELECT * FROM orch_fail(%s, %L, 'RATE_LIMITED', 'x', interval '200 years')$$, :f, :'ftok')) AS fail_retry_after;
SELECT state FROM orch_status(:f);

-- creating a machine twice is 42710
SELECT orch_create_state_machine('hard_m', '{"open": ["closed"], "closed": []}');
SELECT pg_temp.sqlstate_of($$SELECT orch_create_state_machine('hard_m', '{"a": []}')$$) AS again;

-- the trigger runs as the extension owner: it must not run a user's cast to json
CREATE TYPE hard_color AS ENUM ('red', 'blue');
CREATE FUNCTION hard_color_json(hard_color) RETURNS json LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'user code ran as %', current_user;
END $$;
CREATE CAST (hard_color AS json) WITH FUNCTION hard_color_json(hard_color);
CREATE TABLE hard_doors (id int PRIMARY KEY, status text NOT NULL, color hard_color);
SELECT orch_attach_state_machine('hard_doors', 'status', 'hard_m');
INSERT INTO hard_doors VALUES (1, 'open', 'red');
UPDATE hard_doors SET status = 'closed' WHERE id = 1;
-- the event records the row's key and the transition only: no other column
-- of a table the event's readers may not be allowed to read
SELECT from_state, to_state, note::jsonb AS note, note::jsonb ->> 'color' AS color_in_note
  FROM orch_events WHERE entity = 'public.hard_doors' ORDER BY event_id;

DROP TABLE hard_doors;
DROP CAST (hard_color AS json);
DROP FUNCTION hard_color_json(hard_color);
DROP TYPE hard_color;
SELECT orch_drop_queue(q, force => true) FROM unnest(ARRAY['hard_k', 'hard_f']) q;
