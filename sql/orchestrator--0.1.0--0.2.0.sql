/* orchestrator 0.1.0 -> 0.2.0: maintenance, retention, dead letters, re-drive. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.2.0'" to load this file. \quit

-- A re-driven dead letter is a fresh task linked to the original.
ALTER TABLE orch.tasks ADD COLUMN retry_of bigint;
COMMENT ON COLUMN orch.tasks.retry_of IS 'The dead letter this task re-drives (orch_retry / orch_reprocess).';
CREATE INDEX tasks_retry_of_idx ON orch.tasks (retry_of) WHERE retry_of IS NOT NULL;

-- Retention scans finished work by age; stuck detection scans parked work.
CREATE INDEX tasks_finished_idx ON orch.tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_waiting_idx ON orch.tasks (updated_at)
    WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['received', 'awaiting_tool', 'awaiting_user_confirmation']) AND ready_at IS NULL;
CREATE INDEX idempotency_keys_expiry_idx ON orch.idempotency_keys (expires_at);

-- Views gain the link.
CREATE OR REPLACE VIEW orch_tasks WITH (security_barrier) AS
SELECT id AS task_id, tenant_id, queue, state, priority, payload, result, run_at,
       retry_at, attempts, failures, max_attempts, max_failures, reason_code,
       last_error, last_error_class, lease_owner, lease_expires_at, claimed_at,
       wait_data, resume_data, idempotency_key, owner, concurrency_key, run_id,
       step_key, created_at, updated_at, finished_at, retry_of
  FROM orch.tasks;

CREATE VIEW orch_dead_letters AS
SELECT t.id AS task_id, t.tenant_id, t.queue, t.reason_code AS reason, t.finished_at AS failed_at,
       t.last_error, t.last_error_class, t.attempts, t.failures, t.payload, t.priority,
       t.owner, t.created_at
  FROM orch.tasks t
 WHERE t.state OPERATOR(pg_catalog.=) 'failed'
   AND t.reason_code OPERATOR(pg_catalog.=) ANY (ARRAY['max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                         'compensation_required', 'not_safe_to_retry'])
   AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of OPERATOR(pg_catalog.=) t.id);
COMMENT ON VIEW orch_dead_letters IS
  'Tasks that failed by exhaustion, NON_RETRYABLE, COMPENSATION_REQUIRED or NOT_SAFE_TO_RETRY and were not re-driven yet.';

CREATE FUNCTION orch_maintain(batch integer DEFAULT 1000)
RETURNS TABLE (action text, count bigint)
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_maintain';
COMMENT ON FUNCTION orch_maintain(integer) IS
  'One bounded maintenance pass: recover expired leases and timeouts, report stuck work, verify counters, purge by retention.';

CREATE FUNCTION orch_schedule_maintenance(schedule text DEFAULT '* * * * *')
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_schedule_maintenance';
COMMENT ON FUNCTION orch_schedule_maintenance(text) IS
  'Registers orch_maintain() with pg_cron in this database; returns the job id. Errors (55000) when pg_cron is not installed.';

CREATE FUNCTION orch_unschedule_maintenance()
RETURNS boolean
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_unschedule_maintenance';
COMMENT ON FUNCTION orch_unschedule_maintenance() IS
  'Removes the pg_cron maintenance job; true when one was removed.';

CREATE FUNCTION orch_retry(task_id bigint)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_retry';
COMMENT ON FUNCTION orch_retry(bigint) IS
  'Re-drives one dead letter as a new queued task (retry_of = the original); audited on both tasks.';

CREATE FUNCTION orch_reprocess(queue text DEFAULT NULL, reason_code text DEFAULT NULL,
                               failed_after timestamptz DEFAULT NULL, max integer DEFAULT 100)
RETURNS TABLE (task_id bigint, new_task_id bigint)
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_reprocess';
COMMENT ON FUNCTION orch_reprocess(text, text, timestamptz, integer) IS
  'Re-drives up to max dead letters matching every given filter, oldest first.';

REVOKE ALL ON FUNCTION orch_maintain(integer), orch_schedule_maintenance(text),
    orch_unschedule_maintenance(), orch_retry(bigint),
    orch_reprocess(text, text, timestamptz, integer) FROM PUBLIC;
REVOKE ALL ON orch_dead_letters FROM PUBLIC;
GRANT SELECT ON orch_dead_letters TO orch_reader;
GRANT EXECUTE ON FUNCTION orch_maintain(integer), orch_schedule_maintenance(text),
    orch_unschedule_maintenance(), orch_retry(bigint),
    orch_reprocess(text, text, timestamptz, integer) TO orch_admin;
