/* orchestrator 0.7.0 -> 0.8.0: one statement-end dispatcher on orch.tasks. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.8.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- One AFTER ... FOR EACH STATEMENT trigger on orch.tasks calls, in order, the
-- audit writer, admission and workflow progress (it replaces tasks_events
-- and tasks_gate, which did the same in two halves).  The library keeps
-- serving the two old trigger functions while a 0.7.0 schema is in use.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_tasks_statement_end()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_tasks_statement_end';
COMMENT ON FUNCTION orch_tasks_statement_end() IS
  'AFTER INSERT OR UPDATE statement trigger on orch.tasks: writes the events the lifecycle trigger buffered, then (after an UPDATE) fills the concurrency-key slots the statement freed and moves the workflow runs whose step tasks finished.';
REVOKE ALL ON FUNCTION orch_tasks_statement_end() FROM PUBLIC;

DROP TRIGGER tasks_gate ON orch.tasks;
DROP TRIGGER tasks_events ON orch.tasks;
CREATE TRIGGER tasks_statement_end
    AFTER INSERT OR UPDATE ON orch.tasks
    FOR EACH STATEMENT EXECUTE FUNCTION orch_tasks_statement_end();
DROP FUNCTION orch_gate_trigger();
DROP FUNCTION orch_events_flush();
