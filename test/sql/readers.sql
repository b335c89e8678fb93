-- readers: orch_task_rows, orch_run_rows and orch_run_step_rows, the
-- readers by key.  A role bound to a small tenant reads its rows by id, by
-- run, by the task they re-drive and the newest through an index, however
-- many rows another tenant has (and however new they are); it never sees
-- another tenant's; an unbound reader sees every tenant's.  Counted without
-- a clock: the rows the statistics views record as read from orch.tasks.
\set VERBOSITY terse
SELECT current_database() AS regress_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS orch_readers;
CREATE DATABASE orch_readers;
\c orch_readers
SET client_min_messages = warning;
CREATE EXTENSION orchestrator;
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
CALL pg_temp.create_roles('rd_small', 'rd_big', 'rd_unbound');
GRANT orch_reader TO rd_small, rd_big, rd_unbound;
RESET client_min_messages;
SET stats_fetch_consistency = none;
SELECT orch_bind_tenant('rd_small', 'small') IS NOT NULL AS bound_small,
       orch_bind_tenant('rd_big', 'big') IS NOT NULL AS bound_big;
SELECT orch_create_queue('rd') IS NOT NULL AS created;

-- The small tenant's tasks first: one re-driven, two of a run; then 20,000
-- of the big tenant, all newer.
SELECT orch_enqueue('rd', '{"n": 1}', tenant => 'small') AS s1 \gset
SELECT orch_enqueue('rd', '{"n": 2}', tenant => 'small') AS s2 \gset
SELECT orch_enqueue('rd', '{"n": 3}', tenant => 'small') AS s3 \gset
UPDATE orch.tasks SET run_id = 777001 WHERE id IN (:s2, :s3);
SELECT orch_enqueue('rd', '{"n": 4}', tenant => 'big') AS b1 \gset
UPDATE orch.tasks SET run_id = 777002 WHERE id = :b1;
SELECT task_id AS d1, lease_token AS l1 FROM orch_dequeue('rd', 'w', tenant => 'small') \gset
SELECT orch_fail(:d1, :'l1', 'NON_RETRYABLE', 'bad input') AS failed;
SELECT orch_retry(:d1) AS r1 \gset
SELECT count(*) AS big_tasks FROM (
    SELECT orch_enqueue_batch('rd', array_agg('{}'::jsonb), tenant => 'big') FROM generate_series(1, 10000)
    UNION ALL
    SELECT orch_enqueue_batch('rd', array_agg('{}'::jsonb), tenant => 'big') FROM generate_series(1, 10000)) e;
ANALYZE orch.tasks;

-- rows_read(): rows of orch.tasks this transaction read since the last
-- call (sequentially and through indexes), as the statistics count them.
CREATE TABLE pg_temp.reads (n bigint);
INSERT INTO pg_temp.reads VALUES (0);
CREATE FUNCTION pg_temp.rows_read() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    now_read bigint;
    delta bigint;
BEGIN
    SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) INTO now_read
      FROM pg_stat_xact_user_tables WHERE relid = 'orch.tasks'::regclass;
    SELECT now_read - n INTO delta FROM pg_temp.reads;
    UPDATE pg_temp.reads SET n = now_read;
    RETURN delta;
END $$;
BEGIN;
SELECT pg_temp.rows_read() >= 0 AS started;

-- As the small tenant: each key, then the newest.
SET ROLE rd_small;
SELECT task_id = :s1 AS own_by_id, state, tenant_id FROM orch_task_rows(task_ids => ARRAY[:s1]::bigint[]);
SELECT count(*) AS others_by_id FROM orch_task_rows(task_ids => ARRAY[:b1]::bigint[]);
SELECT array_agg(task_id ORDER BY task_id) = ARRAY[:s2, :s3]::bigint[] AS own_run FROM orch_task_rows(run_id => 777001);
SELECT count(*) AS others_run FROM orch_task_rows(run_id => 777002);
SELECT task_id = :r1 AS redriven_as, retry_of = :d1 AS of_dead_letter FROM orch_task_rows(retry_of => :d1);
SELECT array_agg(task_id ORDER BY task_id DESC) = ARRAY[:r1, :s3, :s2]::bigint[] AS newest_three
  FROM orch_task_rows("limit" => 3);
SELECT array_agg(task_id ORDER BY task_id DESC) = ARRAY[:s2, :s1]::bigint[] AS page_before_s3
  FROM orch_task_rows(before => :s3, "limit" => 5);
-- every key given must match
SELECT count(*) AS id_and_other_run FROM orch_task_rows(task_ids => ARRAY[:s1]::bigint[], run_id => 777001);
RESET ROLE;
-- what those calls read: a few rows, not the big tenant's 20,000
SELECT pg_temp.rows_read() < 100 AS read_few_rows;
-- the view reads every row of the caller's tenants first (the whole table, here)
SET ROLE rd_small;
SELECT count(*) AS newest_by_view FROM (SELECT task_id FROM orch_tasks ORDER BY task_id DESC LIMIT 3) x;
RESET ROLE;
SELECT pg_temp.rows_read() >= 20000 AS view_reads_the_table;

-- As the big tenant: its newest, none of the small tenant's.
SET ROLE rd_big;
SELECT count(*) AS big_newest, bool_and(tenant_id = 'big') AS all_big FROM orch_task_rows("limit" => 50);
SELECT count(*) AS small_by_id FROM orch_task_rows(task_ids => ARRAY[:s1, :s2, :s3]::bigint[]);
RESET ROLE;
SELECT pg_temp.rows_read() < 200 AS big_read_few_rows;
COMMIT;

-- Unbound: every tenant's.
SET ROLE rd_unbound;
SELECT count(*) AS unbound_by_id FROM orch_task_rows(task_ids => ARRAY[:s1, :b1]::bigint[]);
SELECT count(*) AS unbound_newest FROM orch_task_rows("limit" => 10);
RESET ROLE;

-- Bad input
SELECT pg_temp.try('SELECT * FROM orch_task_rows("limit" => 0)') AS limit_zero,
       pg_temp.try('SELECT * FROM orch_task_rows("limit" => 10001)') AS limit_over,
       pg_temp.try('SELECT * FROM orch_task_rows("limit" => NULL)') AS limit_null,
       pg_temp.try('SELECT * FROM orch_task_rows(task_ids => (SELECT array_agg(g::bigint) FROM generate_series(1, 10001) g))') AS too_many_ids,
       pg_temp.try('SELECT * FROM orch_run_step_rows(NULL)') AS steps_null_run,
       pg_temp.try('SELECT * FROM orch_run_rows("limit" => -1)') AS run_limit;

-- Runs and their steps.
SELECT orch_define('rd_flow', '{"steps": [{"step_id": "a", "queue": "rd_wf", "handler": "a"},
                                          {"step_id": "b", "queue": "rd_wf", "handler": "b", "depends_on": ["a"]}]}') IS NOT NULL AS defined;
SELECT orch_publish('rd_flow', 1) IS NOT NULL AS published;
SELECT orch_start('rd_flow', '{}', tenant => 'small') AS run_small \gset
SELECT orch_start('rd_flow', '{}', tenant => 'big') AS run_big \gset
SET ROLE rd_small;
SELECT run_id = :run_small AS own_run, state FROM orch_run_rows(run_ids => ARRAY[:run_small]::bigint[]);
SELECT count(*) AS others_run FROM orch_run_rows(run_ids => ARRAY[:run_big]::bigint[]);
SELECT array_agg(run_id) = ARRAY[:run_small]::bigint[] AS newest_runs FROM orch_run_rows();
SELECT string_agg(step_id || '=' || state, ' ' ORDER BY ord) AS own_steps FROM orch_run_step_rows(:run_small);
SELECT count(*) AS others_steps FROM orch_run_step_rows(:run_big);
RESET ROLE;

\c :regress_db
DROP DATABASE orch_readers;
