-- orch_complete_batch: many completions in one statement, all or nothing.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
SELECT orch_create_queue('bat', '{"max_attempts": 3}') IS NOT NULL AS created;
SELECT count(*) AS enqueued FROM orch_enqueue_batch('bat', array_fill('{"n": 1}'::jsonb, ARRAY[6]));
CREATE TEMP TABLE claimed AS SELECT task_id, lease_token FROM orch_dequeue('bat', 'bw', 5);
SELECT count(*) AS claimed FROM claimed;
CREATE TEMP VIEW snapshot AS
SELECT (SELECT count(*) FROM orch.tasks WHERE queue = 'bat' AND state = 'completed') AS completed,
       (SELECT count(*) FROM orch.attempt_history a JOIN orch.tasks t ON t.id = a.task_id WHERE t.queue = 'bat') AS attempts,
       (SELECT count(*) FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id WHERE t.queue = 'bat') AS events;
SELECT * FROM snapshot;

-- one stale token among valid ones: OR003, and nothing changes
SELECT pg_temp.sqlstate_of(format('SELECT orch_complete_batch(%L::bigint[], %L::uuid[])',
    (SELECT array_agg(task_id ORDER BY task_id) FROM claimed),
    (SELECT array_agg(CASE WHEN task_id = (SELECT max(task_id) FROM claimed) THEN gen_random_uuid() ELSE lease_token END ORDER BY task_id) FROM claimed)))
  AS one_stale_token;
SELECT * FROM snapshot;
-- an unknown task: OR005; a task cancelled meanwhile: OR002 (precedence over OR003)
SELECT pg_temp.sqlstate_of(format('SELECT orch_complete_batch(%L::bigint[], %L::uuid[])',
    (SELECT array_agg(task_id ORDER BY task_id) || ARRAY[-7::bigint] FROM claimed),
    (SELECT array_agg(lease_token ORDER BY task_id) || gen_random_uuid() FROM claimed))) AS unknown_task;
SELECT orch_cancel((SELECT min(task_id) FROM claimed), 'changed my mind');
SELECT pg_temp.sqlstate_of(format('SELECT orch_complete_batch(%L::bigint[], %L::uuid[])',
    (SELECT array_agg(task_id ORDER BY task_id) FROM claimed),
    (SELECT array_agg(lease_token ORDER BY task_id) FROM claimed))) AS cancelled_member;
SELECT * FROM snapshot;
-- bad arrays
SELECT pg_temp.sqlstate_of($$SELECT orch_complete_batch(ARRAY[1,2]::bigint[], ARRAY[gen_random_uuid()])$$) AS length_mismatch,
       pg_temp.sqlstate_of($$SELECT orch_complete_batch(ARRAY[1,1]::bigint[], ARRAY[gen_random_uuid(), gen_random_uuid()])$$) AS duplicate_id,
       pg_temp.sqlstate_of($$SELECT orch_complete_batch(ARRAY[1,NULL]::bigint[], ARRAY[gen_random_uuid(), gen_random_uuid()])$$) AS null_id,
       pg_temp.sqlstate_of($$SELECT orch_complete_batch(NULL, ARRAY[gen_random_uuid()])$$) AS null_ids,
       pg_temp.sqlstate_of($$SELECT orch_complete_batch(ARRAY[1]::bigint[], ARRAY[gen_random_uuid()], ARRAY['{}', '{}']::jsonb[])$$) AS results_mismatch;
SELECT orch_complete_batch('{}', '{}') AS empty_batch;

-- the rest completes together, with results, one attempt and one event each
DELETE FROM claimed WHERE task_id = (SELECT min(task_id) FROM claimed);
SELECT orch_complete_batch((SELECT array_agg(task_id ORDER BY task_id) FROM claimed),
                           (SELECT array_agg(lease_token ORDER BY task_id) FROM claimed),
                           (SELECT array_agg(jsonb_build_object('i', task_id) ORDER BY task_id) FROM claimed)) AS completed;
SELECT count(*) FILTER (WHERE t.result = jsonb_build_object('i', t.id)) AS results_stored
  FROM orch.tasks t JOIN claimed c ON c.task_id = t.id;
SELECT * FROM snapshot;
SELECT count(*) AS completion_events FROM orch.history e JOIN claimed c ON c.task_id = e.task_id
 WHERE e.from_state = 'executing' AND e.to_state = 'completed' AND e.label = 'bw' AND e.actor = current_user;
-- a replay of the same batch: every task is terminal now
SELECT pg_temp.sqlstate_of(format('SELECT orch_complete_batch(%L::bigint[], %L::uuid[])',
    (SELECT array_agg(task_id ORDER BY task_id) FROM claimed),
    (SELECT array_agg(lease_token ORDER BY task_id) FROM claimed))) AS replay;
SELECT orch_drop_queue('bat', force => true);
