/* orchestrator 0.6.0 -> 0.7.0: scale-out on Citus. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.7.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- orch_distribute: the tables distributed by tenant_id (co-located with
-- orch.tasks), the small ones reference tables, a disjoint id range per node.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_distribute(shard_count integer DEFAULT NULL)
RETURNS TABLE (object text, action text)
LANGUAGE C VOLATILE
SET search_path = pg_catalog, orch, pg_temp
SET jit = off
AS 'MODULE_PATHNAME', 'orch_distribute';
COMMENT ON FUNCTION orch_distribute(integer) IS
  'On a Citus coordinator: distributes the orchestrator''s tables by tenant_id (co-located with orch.tasks), makes the small ones reference tables and gives each worker its own id range. Superuser; idempotent (run it again after adding a node).';
REVOKE ALL ON FUNCTION orch_distribute(integer) FROM PUBLIC;
