/* orchestrator 0.2.0 -> 0.3.0: concurrency keys, owner/queue limits, rate limits, commands. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.3.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Concurrency keys: a task waits "gated" (outside the claim index) while its
-- key's slot set (executing or claimable tasks) is full.
-- ---------------------------------------------------------------------------
ALTER TABLE orch.tasks ADD COLUMN gated boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN orch.tasks.gated IS
  'Waiting for a free slot of its concurrency key; promoted in priority/FIFO order when one frees.';
CREATE INDEX tasks_key_slots_idx ON orch.tasks (queue, concurrency_key)
    WHERE concurrency_key IS NOT NULL AND (state OPERATOR(pg_catalog.=) 'executing' OR ready_at IS NOT NULL);
CREATE INDEX tasks_gated_idx ON orch.tasks (queue, concurrency_key, priority, created_at, id)
    WHERE gated;
-- Keyed tasks enqueued for later wait outside the slot set until due.
CREATE INDEX tasks_delayed_idx ON orch.tasks (queue, run_at)
    WHERE state OPERATOR(pg_catalog.=) 'queued' AND ready_at IS NULL AND NOT gated AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_owner_running_idx ON orch.tasks (queue, owner)
    WHERE state OPERATOR(pg_catalog.=) 'executing' AND owner IS NOT NULL;
-- Hot-path trim: the lifecycle trigger already refuses unknown states (OR001),
-- so the CHECK constraint only cost a re-parse per statement; workflow lookups
-- by (run, step) get their index with workflows.
ALTER TABLE orch.tasks DROP CONSTRAINT tasks_state_check;
DROP INDEX orch.tasks_run_idx;

-- A dead letter is re-driven at most once, whatever races.
DROP INDEX orch.tasks_retry_of_idx;
CREATE UNIQUE INDEX tasks_retry_of_idx ON orch.tasks (retry_of, tenant_id) WHERE retry_of IS NOT NULL;

-- At most one execution per (run, step), whatever the writer.
CREATE UNIQUE INDEX tasks_run_step_running_idx ON orch.tasks (tenant_id, run_id, step_key)
    WHERE state OPERATOR(pg_catalog.=) 'executing' AND run_id IS NOT NULL;

CREATE TABLE orch.concurrency_limits (
    queue        text NOT NULL,
    key          text NOT NULL,
    max_running  integer NOT NULL CHECK (max_running OPERATOR(pg_catalog.>=) 1),
    tenant_id    text NOT NULL DEFAULT 'default',
    PRIMARY KEY (queue, key)
);
COMMENT ON TABLE orch.concurrency_limits IS
  'Per-key overrides of a queue''s concurrency_key_limit (orch_set_concurrency_limit). Small; a reference table.';

-- Events of a statement are written together at its end (one INSERT for a
-- batch claim or enqueue); the row trigger buffers them.
CREATE FUNCTION orch_events_flush()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_events_flush';
COMMENT ON FUNCTION orch_events_flush() IS
  'AFTER INSERT OR UPDATE statement trigger on orch.tasks: writes the events the lifecycle trigger buffered.';
CREATE TRIGGER tasks_events
    AFTER INSERT OR UPDATE ON orch.tasks
    FOR EACH STATEMENT EXECUTE FUNCTION orch_events_flush();

CREATE FUNCTION orch_gate_trigger()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_gate_trigger';
COMMENT ON FUNCTION orch_gate_trigger() IS
  'AFTER UPDATE statement trigger on orch.tasks: fills concurrency-key slots freed by the statement.';
CREATE TRIGGER tasks_gate
    AFTER UPDATE ON orch.tasks
    FOR EACH STATEMENT EXECUTE FUNCTION orch_gate_trigger();

CREATE FUNCTION orch_set_concurrency_limit(queue text, key text, max_running integer)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_set_concurrency_limit';
COMMENT ON FUNCTION orch_set_concurrency_limit(text, text, integer) IS
  'Overrides the queue''s concurrency_key_limit for one key (NULL removes the override).';

-- ---------------------------------------------------------------------------
-- Rate limits: a sliding window of admitted enqueues per (queue, owner).
-- ---------------------------------------------------------------------------
CREATE TABLE orch.rate_window (
    tenant_id   text NOT NULL DEFAULT 'default',
    queue       text NOT NULL,
    owner       text NOT NULL,
    at          timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX rate_window_idx ON orch.rate_window (queue, owner, at);
CREATE INDEX rate_window_expiry_idx ON orch.rate_window (expires_at);
COMMENT ON TABLE orch.rate_window IS
  'Admitted enqueues of rate-limited queues, kept for one window; purged by orch_maintain.';

DROP FUNCTION orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval);
CREATE FUNCTION orch_enqueue(queue text, payload jsonb,
                             priority integer DEFAULT NULL,
                             idempotency_key text DEFAULT NULL,
                             run_at timestamptz DEFAULT NULL,
                             tenant text DEFAULT NULL,
                             owner text DEFAULT NULL,
                             concurrency_key text DEFAULT NULL,
                             max_attempts integer DEFAULT NULL,
                             max_failures integer DEFAULT NULL,
                             retry_policy jsonb DEFAULT NULL,
                             timeout interval DEFAULT NULL,
                             on_rate_limit text DEFAULT NULL)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_enqueue';
COMMENT ON FUNCTION orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text) IS
  'Enqueues one task and returns its id; the same idempotency key and payload return the same id, another payload raises OR004; over the rate limit: a failed task (rate_limited) or OR006.';

DROP FUNCTION orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval);
CREATE FUNCTION orch_enqueue_batch(queue text, payloads jsonb[],
                                   priority integer DEFAULT NULL,
                                   idempotency_keys text[] DEFAULT NULL,
                                   run_at timestamptz DEFAULT NULL,
                                   tenant text DEFAULT NULL,
                                   owner text DEFAULT NULL,
                                   concurrency_key text DEFAULT NULL,
                                   max_attempts integer DEFAULT NULL,
                                   max_failures integer DEFAULT NULL,
                                   retry_policy jsonb DEFAULT NULL,
                                   timeout interval DEFAULT NULL,
                                   on_rate_limit text DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_enqueue_batch';
COMMENT ON FUNCTION orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text) IS
  'Enqueues many tasks in one call; returns their ids in the order of payloads.';

-- ---------------------------------------------------------------------------
-- Batch completion: the counterpart of a batch claim.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_complete_batch(task_ids bigint[], lease_tokens uuid[], results jsonb[] DEFAULT NULL)
RETURNS integer
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_complete_batch';
COMMENT ON FUNCTION orch_complete_batch(bigint[], uuid[], jsonb[]) IS
  'Completes many claimed tasks in one statement, all or nothing (the first failing task''s OR002/OR003/OR005); returns how many.';
REVOKE ALL ON FUNCTION orch_complete_batch(bigint[], uuid[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_complete_batch(bigint[], uuid[], jsonb[]) TO orch_worker;

-- ---------------------------------------------------------------------------
-- Commands: idempotent side-effect requests, performed by adapters that claim
-- them from the command queue.
-- ---------------------------------------------------------------------------
CREATE SEQUENCE orch.commands_id_seq;
CREATE TABLE orch.commands (
    id               bigint NOT NULL DEFAULT pg_catalog.nextval('orch.commands_id_seq'),
    tenant_id        text NOT NULL DEFAULT 'default',
    kind             text NOT NULL,
    idempotency_key  text NOT NULL,
    payload          jsonb NOT NULL,
    origin_task_id   bigint,
    task_id          bigint,
    status           text NOT NULL CHECK (status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'succeeded', 'failed'])),
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    completed_at     timestamptz,
    PRIMARY KEY (id, tenant_id),
    UNIQUE (tenant_id, idempotency_key)
);
COMMENT ON TABLE orch.commands IS
  'Side-effect requests recorded before an adapter performs them (SPEC section 5).';

CREATE FUNCTION orch_command(kind text, idempotency_key text, payload jsonb,
                             task_id bigint DEFAULT NULL, tenant text DEFAULT NULL)
RETURNS TABLE (command_id bigint, task_id bigint, replayed boolean, status text, result jsonb)
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_command';
COMMENT ON FUNCTION orch_command(text, text, jsonb, bigint, text) IS
  'Records a side-effect request once per key (replay returns it with replayed = true; another kind or payload raises OR004) and queues it for an adapter.';

CREATE FUNCTION orch_command_result(command_id bigint, ok boolean, result jsonb DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_command_result';
COMMENT ON FUNCTION orch_command_result(bigint, boolean, jsonb) IS
  'Records an adapter''s outcome of a command once (same outcome again: no-op; another: OR002).';

CREATE VIEW orch_commands AS
SELECT id AS command_id, tenant_id, kind, idempotency_key, payload, origin_task_id,
       task_id, status, result, created_at, completed_at
  FROM orch.commands;
COMMENT ON VIEW orch_commands IS 'Recorded commands and their outcomes.';

CREATE OR REPLACE VIEW orch_tasks WITH (security_barrier) AS
SELECT id AS task_id, tenant_id, queue, state, priority, payload, result, run_at,
       retry_at, attempts, failures, max_attempts, max_failures, reason_code,
       last_error, last_error_class, lease_owner, lease_expires_at, claimed_at,
       wait_data, resume_data, idempotency_key, owner, concurrency_key, run_id,
       step_key, created_at, updated_at, finished_at, retry_of, gated
  FROM orch.tasks;

SELECT pg_catalog.pg_extension_config_dump('orch.concurrency_limits', '');
SELECT pg_catalog.pg_extension_config_dump('orch.rate_window', '');
SELECT pg_catalog.pg_extension_config_dump('orch.commands', '');
SELECT pg_catalog.pg_extension_config_dump('orch.commands_id_seq', '');

REVOKE ALL ON orch.concurrency_limits, orch.rate_window, orch.commands FROM PUBLIC;
REVOKE ALL ON SEQUENCE orch.commands_id_seq FROM PUBLIC;
REVOKE ALL ON orch_commands FROM PUBLIC;
REVOKE ALL ON FUNCTION orch_gate_trigger(), orch_events_flush(), orch_set_concurrency_limit(text, text, integer),
    orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text),
    orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text),
    orch_command(text, text, jsonb, bigint, text), orch_command_result(bigint, boolean, jsonb)
  FROM PUBLIC;
GRANT SELECT ON orch_commands TO orch_reader;
GRANT EXECUTE ON FUNCTION
    orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval, text),
    orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval, text),
    orch_command(text, text, jsonb, bigint, text)
  TO orch_producer;
GRANT EXECUTE ON FUNCTION orch_command_result(bigint, boolean, jsonb) TO orch_worker;
GRANT EXECUTE ON FUNCTION orch_set_concurrency_limit(text, text, integer) TO orch_admin;

-- State machines: every table carries tenant_id; orch_attach_state_machine
-- runs as its caller (who must own the table) and looks the machine up.
ALTER TABLE orch.state_transitions ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
GRANT SELECT ON orch.state_machines, orch.state_transitions TO orch_admin;
