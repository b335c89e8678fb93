-- plans: the extension's statements keep the plans they were written for,
-- whatever statistics the tables had when a backend first planned them.
-- A backend plans its statements once and keeps them; a queue table that
-- was empty then (a new installation, a truncated queue: VACUUM ANALYZE
-- records 0 pages and 0 rows) must not leave it with plans that read the
-- whole table once work comes in.  Counted without a clock: the scans and
-- rows the statistics views record for orch.tasks.
\set VERBOSITY terse
SELECT current_database() AS regress_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS orch_plans;
CREATE DATABASE orch_plans;
\c orch_plans
SET client_min_messages = warning;
CREATE EXTENSION orchestrator;
RESET client_min_messages;
SET stats_fetch_consistency = none;
-- No autovacuum or autoanalyze: no invalidation may replan behind the test.
ALTER TABLE orch.tasks SET (autovacuum_enabled = off);
SELECT orch_create_queue('pl') IS NOT NULL AS created,
       orch_create_queue('pl_tenant') IS NOT NULL AS created_tenant_queue;
VACUUM ANALYZE orch.tasks;
SELECT relpages, reltuples FROM pg_class WHERE oid = 'orch.tasks'::regclass;

-- One round as a worker and a producer do it: enqueue one task, claim it,
-- complete it; the same for a tenant's task.
CREATE FUNCTION pg_temp.rounds(n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM orch_enqueue('pl', '{}');
        SELECT * INTO d FROM orch_dequeue('pl', 'w');
        PERFORM orch_complete(d.task_id, d.lease_token);
        PERFORM orch_enqueue('pl_tenant', '{}', tenant => 't1');
        SELECT * INTO d FROM orch_dequeue('pl_tenant', 'w', tenant => 't1');
        PERFORM orch_complete(d.task_id, d.lease_token);
    END LOOP;
END $$;

-- This backend plans every statement of the rounds while the table is as
-- good as empty: each is run ten times (past the five custom plans after
-- which PostgreSQL may keep a generic plan).
SELECT pg_temp.rounds(10);

-- Then 20,000 tasks come in, 10,000 of them claimed and completed, and no
-- statistics are taken.
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue_batch('pl', array_agg('{}'::jsonb)) FROM generate_series(1, 10000)
    UNION ALL
    SELECT orch_enqueue_batch('pl', array_agg('{}'::jsonb)) FROM generate_series(1, 10000)) e;
SELECT count(orch_complete(task_id, lease_token)) AS completed FROM orch_dequeue('pl', 'loader', 10000);
SELECT relpages, reltuples FROM pg_class WHERE oid = 'orch.tasks'::regclass;

-- The same backend's rounds now: no sequential scan of orch.tasks, every
-- claim through a claim index.
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE before AS
SELECT (SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'orch.tasks'::regclass) AS seq_scan,
       (SELECT seq_tup_read FROM pg_stat_user_tables WHERE relid = 'orch.tasks'::regclass) AS seq_tup_read,
       (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_claim_idx'::regclass) AS claim_idx,
       (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_tenant_claim_idx'::regclass) AS tenant_claim_idx;
SELECT pg_temp.rounds(20);
SELECT pg_stat_force_next_flush();
SELECT (SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'orch.tasks'::regclass) - b.seq_scan AS seq_scans,
       (SELECT seq_tup_read FROM pg_stat_user_tables WHERE relid = 'orch.tasks'::regclass) - b.seq_tup_read AS rows_read_by_seq_scans,
       (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_claim_idx'::regclass) - b.claim_idx >= 20 AS claims_through_claim_idx,
       (SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_tenant_claim_idx'::regclass) - b.tenant_claim_idx >= 20 AS tenant_claims_through_tenant_claim_idx
  FROM before b;

-- (A new database: the next statistics must see one tenant only.)
\c :regress_db
SET client_min_messages = warning;
DROP DATABASE orch_plans;
CREATE DATABASE orch_plans;
\c orch_plans
SET client_min_messages = warning;
CREATE EXTENSION orchestrator;
RESET client_min_messages;
SET stats_fetch_consistency = none;
ALTER TABLE orch.tasks SET (autovacuum_enabled = off);

-- A tenant's claim reads its own tenant's claimable tasks, whatever ANALYZE
-- saw: tenant pl_big has 50,000 tasks waiting in a queue, ANALYZE samples
-- them, then tenant pl_small's tasks arrive (unknown to the statistics,
-- which say pl_big is the whole table).  pl_small's claims, named or by a
-- role bound to it, each past the five custom plans, never read pl_big's
-- entries of the queue-wide claim index.
SELECT orch_create_queue('pl_shared') IS NOT NULL AS created;
SELECT count(*) AS big_backlog FROM (
    SELECT orch_enqueue_batch('pl_shared', array_agg('{}'::jsonb), tenant => 'pl_big')
      FROM generate_series(1, 10000) g, generate_series(1, 5) k GROUP BY k) s;
ANALYZE orch.tasks;
SELECT most_common_vals::text AS sampled_tenants FROM pg_stats
 WHERE schemaname = 'orch' AND tablename = 'tasks' AND attname = 'tenant_id';
SELECT count(*) AS small_tasks FROM orch_enqueue_batch('pl_shared', array_fill('{}'::jsonb, ARRAY[40]), tenant => 'pl_small');
SET client_min_messages = warning;
DROP ROLE IF EXISTS pl_small_worker;
CREATE ROLE pl_small_worker;
RESET client_min_messages;
GRANT orch_worker TO pl_small_worker;
SELECT orch_bind_tenant('pl_small_worker', 'pl_small') IS NOT NULL AS bound;
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE before_tenant AS
SELECT (SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_claim_idx'::regclass) AS claim_idx_read,
       (SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_tenant_claim_idx'::regclass) AS tenant_claim_idx_read;
GRANT SELECT ON before_tenant TO PUBLIC;
CREATE FUNCTION pg_temp.small_claims(n int, named boolean) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    d record;
    got int := 0;
BEGIN
    FOR i IN 1 .. n LOOP
        IF named THEN
            SELECT * INTO d FROM orch_dequeue('pl_shared', 'w', tenant => 'pl_small');
        ELSE
            SELECT * INTO d FROM orch_dequeue('pl_shared', 'w');
        END IF;
        IF d.task_id IS NOT NULL THEN
            PERFORM orch_complete(d.task_id, d.lease_token);
            got := got + 1;
        END IF;
    END LOOP;
    RETURN got;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.small_claims(int, boolean) TO pl_small_worker;
SELECT pg_temp.small_claims(15, true) AS claimed_by_name;
SET ROLE pl_small_worker;
SELECT pg_temp.small_claims(15, false) AS claimed_by_bound_role;
RESET ROLE;
SELECT pg_stat_force_next_flush();
SELECT (SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_claim_idx'::regclass) - b.claim_idx_read AS big_entries_read,
       (SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelid = 'orch.tasks_tenant_claim_idx'::regclass) - b.tenant_claim_idx_read
         BETWEEN 30 AND 30 * 40 AS read_its_own_range
  FROM before_tenant b;
SELECT count(*) FILTER (WHERE tenant_id = 'pl_small' AND state = 'completed') AS small_completed,
       count(*) FILTER (WHERE tenant_id = 'pl_big' AND state = 'queued') AS big_waiting
  FROM orch.tasks WHERE queue = 'pl_shared';
SELECT orch_unbind_tenant('pl_small_worker', 'pl_small') IS NOT NULL AS unbound;

\c :regress_db
SET client_min_messages = warning;
DROP DATABASE orch_plans;
DROP ROLE pl_small_worker;
