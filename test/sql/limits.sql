-- Limits: every text and jsonb argument, every batch and fan-out is bounded,
-- and an oversized value is refused without being echoed back; leases are
-- judged by the statement's time; the notify switch and attaching a state
-- machine are not a bound role's to use.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- msg(sql): the SQLSTATE and the message of the error the statement raised
CREATE FUNCTION pg_temp.msg(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE m text; d text;
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ' ' || m || coalesce(' / ' || nullif(d, ''), '');
END $$;

-- every text argument is capped by orchestrator.max_payload_size (54000),
-- named by its position, never echoed
SET orchestrator.max_payload_size = 1000;
SELECT orch_enqueue('lim_q', '{}') AS t1 \gset
SELECT task_id AS c1, lease_token AS ctok FROM orch_dequeue('lim_q', 'w') \gset
SELECT orch_await_confirmation(:c1, :'ctok', '{"ask": "ok?"}');
SELECT pg_temp.msg(format('SELECT orch_confirm(%s, true, %L, %L)', :c1, 'me', repeat('n', 5000))) AS huge_note;
SELECT state FROM orch_status(:c1);
SELECT pg_temp.msg(format('SELECT orch_cancel(%s, %L)', :t1, repeat('r', 5000))) AS huge_reason;
SELECT pg_temp.msg(format('SELECT orch_enqueue(%L, %L)', repeat('q', 5000), '{}')) AS huge_queue;
-- jsonb arguments too (22023, as payloads always were)
SELECT pg_temp.sqlstate_of(format('SELECT orch_create_queue(%L, %L)', 'lim_big',
       json_build_object('priority', 1, 'x', repeat('s', 5000)))) AS huge_settings;
SELECT pg_temp.sqlstate_of(format('SELECT orch_validate_definition(%L)',
       json_build_object('steps', json_build_array(json_build_object('step_id', repeat('s', 5000)))))) AS huge_spec;
RESET orchestrator.max_payload_size;

-- key-like arguments: at most 512 bytes (22023), not echoed
SELECT pg_temp.msg(format('SELECT * FROM orch_dequeue(%L, %L)', 'lim_q', repeat('w', 100000))) AS huge_worker;
SELECT pg_temp.msg(format('SELECT orch_enqueue(%L, %L, concurrency_key => %L)', 'lim_q', '{}', repeat('k', 600))) AS huge_key;
SELECT pg_temp.msg(format('SELECT orch_enqueue(%L, %L, owner => %L)', 'lim_q', '{}', repeat('o', 600))) AS huge_owner;
SELECT pg_temp.msg(format('SELECT orch_enqueue(%L, %L, tenant => %L)', 'lim_q', '{}', repeat('t', 600))) AS huge_tenant;
SELECT count(*) AS lim_q_tasks FROM orch.tasks WHERE queue = 'lim_q';

-- batches and claims: at most orchestrator.max_batch_size (superuser only)
SET orchestrator.max_batch_size = 10;
SELECT pg_temp.msg($$SELECT count(*) FROM orch_enqueue_batch('lim_b', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 11)))$$) AS batch_11;
SELECT count(*) AS batch_10 FROM orch_enqueue_batch('lim_b', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 10)));
SELECT pg_temp.msg($$SELECT count(*) FROM orch_dequeue('lim_b', 'w', 11)$$) AS claim_11;
CREATE TEMP TABLE lim_claims AS SELECT task_id, lease_token FROM orch_dequeue('lim_b', 'w', 10);
SELECT pg_temp.msg($$SELECT orch_complete_batch(array_agg(task_id) || ARRAY[1::bigint], array_agg(lease_token) || gen_random_uuid()) FROM lim_claims$$) AS complete_11;
SELECT orch_complete_batch(array_agg(task_id), array_agg(lease_token)) AS complete_10 FROM lim_claims;
-- the cap is the setting's, not a fixed 10,000: raised, a completion of
-- 10,001 tasks is taken (and fails only on its first unknown task, OR005);
-- a task twice is found among them (22023, naming it)
SET orchestrator.max_batch_size = 20000;
SELECT pg_temp.msg($$SELECT orch_complete_batch(array_agg(-g::bigint), array_agg(gen_random_uuid())) FROM generate_series(1, 10001) g$$) AS complete_10001;
SELECT pg_temp.msg($$SELECT orch_complete_batch(array_agg(CASE WHEN g = 20000 THEN 7 ELSE g END::bigint), array_agg(gen_random_uuid())) FROM generate_series(1, 20000) g$$) AS complete_twice;
SET orchestrator.max_batch_size = 10;
-- a map step over more items fails the step, with the count in its error
SELECT orch_define('lim_map', '{"steps": [
    {"step_id": "each", "queue": "lim_m", "handler": "h", "map": {"over": "$.input.items"}}]}') IS NOT NULL AS defined;
SELECT orch_publish('lim_map', 1) IS NOT NULL AS published;
SELECT orch_start('lim_map', json_build_object('items', (SELECT json_agg(i) FROM generate_series(1, 11) i))::jsonb) AS m \gset
SELECT state, error FROM orch_run_steps WHERE run_id = :m;
SELECT count(*) AS map_tasks FROM orch.tasks WHERE run_id = :m;
RESET orchestrator.max_batch_size;
CALL pg_temp.create_roles('lim_user');
SET client_min_messages = warning;
GRANT orch_producer TO lim_user;
RESET client_min_messages;
SET ROLE lim_user;
SELECT pg_temp.sqlstate_of('SET orchestrator.max_batch_size = 1000000') AS raise_batch_cap;
SELECT pg_temp.sqlstate_of('SET orchestrator.notify = on') AS notify_switch;
RESET ROLE;

-- intervals: leases and extensions of more than 100 years are 22023 (not
-- accepted, not 22008); settings values beyond float range are 22023
SELECT pg_temp.msg($$SELECT * FROM orch_dequeue('lim_q', 'w', 1, interval '200 years')$$) AS lease_200y;
SELECT orch_enqueue('lim_h', '{}') AS h \gset
SELECT task_id AS h1, lease_token AS htok FROM orch_dequeue('lim_h', 'w') \gset
SELECT pg_temp.msg(format($$SELECT orch_heartbeat(%s, %L, interval '200 years')$$, :h1, :'htok')) AS extend_200y;
SELECT pg_temp.msg($$SELECT orch_create_queue('lim_s', '{"max_attempts": 1e400}')$$) AS huge_number;
SELECT pg_temp.sqlstate_of($$SELECT orch_create_queue('lim_s', '{"lease": 1e400}')$$) AS huge_lease_setting;
-- an interval as text: one interval_in refuses, and one it takes but too
-- large for microseconds, are each the setting's 22023 (only data
-- exceptions are caught while the text is read: orch_try_interval_text)
SELECT pg_temp.msg($$SELECT orch_create_queue('lim_s', '{"lease": "soon"}')$$) AS lease_text_bad;
SELECT pg_temp.msg($$SELECT orch_create_queue('lim_s', '{"lease": "1000000 years"}')$$) AS lease_text_huge;

-- a lease is judged by the statement's time: inside a transaction that
-- began before the lease ran out, an expired lease cannot complete
BEGIN;
SET LOCAL session_replication_role = replica;
UPDATE orch.tasks SET lease_expires_at = now() + interval '1 microsecond' WHERE id = :h1;
SET LOCAL session_replication_role = origin;
SELECT pg_temp.try(format($$SELECT orch_complete(%s, %L, '{}')$$, :h1, :'htok')) AS complete_expired;
SELECT pg_temp.try(format($$SELECT orch_heartbeat(%s, %L)$$, :h1, :'htok')) AS heartbeat_expired;
ROLLBACK;
-- and a lease runs from the statement's time too: a claim made late in a
-- long transaction gets its whole lease (it can complete and heartbeat)
SELECT orch_enqueue('lim_long', '{}') IS NOT NULL AS enqueued;
BEGIN;
SELECT pg_sleep(1.2);
SELECT task_id AS lt, lease_token AS ltok FROM orch_dequeue('lim_long', 'w', 1, interval '1 second') \gset
SELECT lease_expires_at > statement_timestamp() AS lease_ahead FROM orch.tasks WHERE id = :lt;
SELECT orch_heartbeat(:lt, :'ltok', interval '1 second') IS NOT NULL AS heartbeat_late_in_xact;
SELECT orch_complete(:lt, :'ltok', '{}') AS complete_late_in_xact;
COMMIT;

-- a pins mismatch is reported with each value cut short
SELECT orch_define('lim_p', '{"steps": [{"step_id": "a", "queue": "lim_pq", "handler": "h"}]}') IS NOT NULL AS defined;
SELECT orch_publish('lim_p', 1) IS NOT NULL AS published;
SELECT orch_start('lim_p', '{}', pins => json_build_object('commit', repeat('a', 50000))::jsonb) AS p \gset
SELECT orch_pause_run(:p);
SELECT length(pg_temp.msg(format('SELECT orch_resume_run(%s, %L)', :p,
       json_build_object('commit', repeat('b', 50000))))) < 600 AS short_detail,
       left(pg_temp.msg(format('SELECT orch_resume_run(%s, %L)', :p,
       json_build_object('commit', repeat('b', 50000)))), 5) AS sqlstate;

-- a bound role may not attach a state machine (its events would land in
-- tenant default)
CALL pg_temp.create_roles('lim_admin');
SET client_min_messages = warning;
GRANT orch_admin TO lim_admin;
RESET client_min_messages;
SELECT orch_bind_tenant('lim_admin', 'lim_t');
CREATE TABLE lim_doors (id int PRIMARY KEY, status text NOT NULL);
GRANT ALL ON lim_doors TO lim_admin;
SELECT orch_create_state_machine('lim_door', '{"open": ["closed"], "closed": []}');
SET ROLE lim_admin;
SELECT pg_temp.sqlstate_of($$SELECT orch_attach_state_machine('lim_doors', 'status', 'lim_door')$$) AS bound_attach;
RESET ROLE;
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'lim_doors'::regclass;
SELECT orch_unbind_tenant('lim_admin', 'lim_t');

-- A keyed batch of 10,000 (each row its own key) costs the backend the
-- memory a plain one does, not 15 kB a row: its peak resident memory
-- (VmHWM of /proc/self/status, this backend's own) grows by less than
-- 64 MB (about 170 MB before each row's results were freed).
SELECT orch_create_queue('lim_keys') IS NOT NULL AS created;
SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s+(\d+) kB')::bigint AS hwm_before \gset
SELECT count(*) AS keyed FROM orch_enqueue_batch('lim_keys',
    (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 10000) g),
    idempotency_keys => (SELECT array_agg('lim-key-' || g) FROM generate_series(1, 10000) g));
SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s+(\d+) kB')::bigint - :hwm_before < 64 * 1024
       AS keyed_batch_under_64_mb;
SELECT count(*) AS replayed FROM orch_enqueue_batch('lim_keys',
    (SELECT array_agg(jsonb_build_object('n', g)) FROM generate_series(1, 10000) g),
    idempotency_keys => (SELECT array_agg('lim-key-' || g) FROM generate_series(1, 10000) g)) b(id)
  JOIN orch.tasks t ON t.id = b.id AND t.queue = 'lim_keys';
SELECT count(*) AS tasks_once FROM orch.tasks WHERE queue = 'lim_keys';
