-- Tenant claims: a claim for one tenant reads
-- only that tenant's claimable rows, from tasks_tenant_claim_idx, however
-- long another tenant's backlog in the same queue; the default tenant (an
-- installation without tenants) is not in that index (its enqueues pay for
-- one claim index, not two) and its claims read tasks_claim_idx.  What a
-- claim read is counted with the current transaction's statistics of each
-- index.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
SELECT orch_create_queue('tc') IS NOT NULL AS created;
-- 2,000 tasks of tenant tc_big, then one of tc_small, one of default, all ready
SELECT count(*) AS big FROM orch_enqueue_batch('tc', array_fill('{"t": "big"}'::jsonb, ARRAY[2000]), tenant => 'tc_big');
SELECT orch_enqueue('tc', '{"t": "small"}', tenant => 'tc_small') > 0 AS small;
SELECT orch_enqueue('tc', '{"t": "default"}') > 0 AS dflt;
ANALYZE orch.tasks;
-- what the default tenant's tasks cost: an entry in one claim index
SELECT (SELECT count(*) FROM orch.tasks WHERE queue = 'tc' AND tenant_id = 'default') AS default_tasks,
       pg_relation_size('orch.tasks_tenant_claim_idx') > 0 AS tenant_index_used;

-- index entries read by one claim, in its own transaction (the counts
-- pending from earlier transactions flushed first)
CREATE FUNCTION pg_temp.claim_reads(t text, OUT claimed text, OUT tenant_index bigint, OUT queue_index bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT string_agg(d.payload ->> 't', ',') INTO claimed FROM orch_dequeue('tc', 'tc-w', 1, tenant => t) d;
    tenant_index := pg_stat_get_xact_tuples_returned('orch.tasks_tenant_claim_idx'::regclass);
    queue_index := pg_stat_get_xact_tuples_returned('orch.tasks_claim_idx'::regclass);
END $$;
-- the small tenant's claim reads its own range: one entry, none of the 2,000
SELECT pg_stat_force_next_flush()::text = '' AS flushed;
BEGIN;
SELECT * FROM pg_temp.claim_reads('tc_small');
ROLLBACK;
-- the default tenant's claim reads none of the tenant index (its tasks are
-- not in it; it reads the queue's index, past the other tenants' tasks
-- ahead of its own: docs/storage.md)
SELECT pg_stat_force_next_flush()::text = '' AS flushed;
BEGIN;
SELECT claimed, tenant_index FROM pg_temp.claim_reads('default');
ROLLBACK;
-- the big tenant's: its own task
SELECT pg_stat_force_next_flush()::text = '' AS flushed;
BEGIN;
SELECT claimed FROM pg_temp.claim_reads('tc_big');
ROLLBACK;
-- a role bound to two tenants (the default one among them) claims the best
-- task of either: of the tenant index, only tc_small's range
SELECT orch_create_queue('tc2') IS NOT NULL AS created;
SELECT orch_enqueue('tc2', '{"t": "small-late"}', tenant => 'tc_small', priority => 5) > 0 AS small_late,
       orch_enqueue('tc2', '{"t": "default-first"}', priority => 1) > 0 AS default_first;
SELECT count(*) AS big2 FROM orch_enqueue_batch('tc2', array_fill('{"t": "big"}'::jsonb, ARRAY[2000]), tenant => 'tc_big');
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tc_bound') THEN CREATE ROLE tc_bound; END IF;
END $$;
GRANT orch_worker TO tc_bound;
SELECT orch_bind_tenant('tc_bound', 'tc_small') IS NOT NULL AS bound_small,
       orch_bind_tenant('tc_bound', 'default') IS NOT NULL AS bound_default;
SELECT pg_stat_force_next_flush()::text = '' AS flushed;
BEGIN;
SET LOCAL ROLE tc_bound;
SELECT string_agg(payload ->> 't', ',' ORDER BY priority) AS claimed FROM orch_dequeue('tc2', 'tc-w', 5);
RESET ROLE;
SELECT pg_stat_get_xact_tuples_returned('orch.tasks_tenant_claim_idx'::regclass) AS tenant_index;
ROLLBACK;
SELECT orch_unbind_tenant('tc_bound', 'tc_small') IS NOT NULL AS unbound_small,
       orch_unbind_tenant('tc_bound', 'default') IS NOT NULL AS unbound_default;
REVOKE orch_worker FROM tc_bound;
DROP ROLE tc_bound;
