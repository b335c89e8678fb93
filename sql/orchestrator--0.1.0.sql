/* orchestrator 0.1.0: tables, lifecycle trigger, SQL API, roles. */

\echo Use "CREATE EXTENSION orchestrator" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Roles (cluster-wide; created once, reused by every database, left in place
-- by DROP EXTENSION).
-- ---------------------------------------------------------------------------
DO $roles$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['orch_admin', 'orch_worker', 'orch_producer',
                             'orch_approver', 'orch_reader']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) r) THEN
            EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$roles$;

GRANT orch_reader TO orch_producer, orch_worker, orch_approver;
GRANT orch_producer, orch_worker, orch_approver, orch_reader TO orch_admin;

-- Internal objects live in schema orch; the SQL API lives in the schema the
-- extension is created in (public by default), so `SELECT orch_enqueue(...)`
-- works without qualification.
CREATE SCHEMA orch;
REVOKE ALL ON SCHEMA orch FROM PUBLIC;
GRANT USAGE ON SCHEMA orch TO orch_reader;

-- ---------------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------------
CREATE TABLE orch.queues (
    name        text PRIMARY KEY,
    tenant_id   text NOT NULL DEFAULT 'default',
    settings    jsonb NOT NULL DEFAULT '{}',
    paused      boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE orch.queues IS
  'Named streams of work and their settings (validated by orch_create_queue / orch_configure_queue). Small; a Citus reference table when distributed.';

CREATE SEQUENCE orch.tasks_id_seq;
CREATE TABLE orch.tasks (
    id               bigint NOT NULL DEFAULT pg_catalog.nextval('orch.tasks_id_seq'),
    tenant_id        text NOT NULL DEFAULT 'default',
    queue            text NOT NULL,
    state            text NOT NULL,
    priority         integer NOT NULL DEFAULT 0,
    payload          jsonb NOT NULL,
    result           jsonb,
    run_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
    ready_at         timestamptz,
    retry_at         timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    failures         integer NOT NULL DEFAULT 0,
    max_attempts     integer,
    max_failures     integer,
    retry_policy     jsonb,
    timeout          interval,
    reason_code      text,
    last_error       text,
    last_error_class text,
    lease_token      uuid,
    lease_owner      text,
    lease_expires_at timestamptz,
    claimed_at       timestamptz,
    wait_data        jsonb,
    resume_data      jsonb,
    idempotency_key  text,
    owner            text,
    concurrency_key  text,
    run_id           bigint,
    step_key         text,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at      timestamptz,
    PRIMARY KEY (id, tenant_id),
    CONSTRAINT tasks_state_check CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['received', 'queued', 'executing',
        'awaiting_tool', 'awaiting_user_confirmation', 'completed', 'failed', 'cancelled']))
) WITH (fillfactor = 80);
COMMENT ON TABLE orch.tasks IS
  'One row per task. state is guarded by the C lifecycle trigger; ready_at is set only while the task is claimable.';
COMMENT ON COLUMN orch.tasks.ready_at IS
  'When the task becomes claimable (run_at, retry_at, or the moment of resume/approval); NULL while not claimable. Maintained by the API; cleared by the trigger for executing and terminal states.';

-- Claim path: only claimable rows are indexed, so terminal work leaves it.
CREATE INDEX tasks_claim_idx ON orch.tasks (queue, priority, created_at, id)
    WHERE ready_at IS NOT NULL;
-- Lease recovery path: only executing rows.
CREATE INDEX tasks_lease_idx ON orch.tasks (queue, lease_expires_at)
    WHERE state OPERATOR(pg_catalog.=) 'executing';
CREATE INDEX tasks_run_idx ON orch.tasks (run_id, step_key) WHERE run_id IS NOT NULL;

CREATE SEQUENCE orch.attempts_id_seq;
CREATE TABLE orch.attempts (
    id           bigint NOT NULL DEFAULT pg_catalog.nextval('orch.attempts_id_seq'),
    tenant_id    text NOT NULL DEFAULT 'default',
    task_id      bigint NOT NULL,
    attempt      integer NOT NULL,
    worker       text,
    lease_token  uuid,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    outcome      text NOT NULL,
    error_class  text,
    error        text,
    retry_at     timestamptz,
    PRIMARY KEY (id, tenant_id)
);
CREATE INDEX attempts_task_idx ON orch.attempts (task_id);
COMMENT ON TABLE orch.attempts IS
  'Append-only: one row per finished execution of a task (completed, failed, retry, lease_expired, cancelled, awaiting_tool, awaiting_user_confirmation).';

CREATE SEQUENCE orch.events_id_seq;
CREATE TABLE orch.events (
    id           bigint NOT NULL DEFAULT pg_catalog.nextval('orch.events_id_seq'),
    tenant_id    text NOT NULL DEFAULT 'default',
    task_id      bigint,
    run_id       bigint,
    entity       text NOT NULL DEFAULT 'task',
    from_state   text,
    to_state     text,
    reason_code  text,
    actor        text NOT NULL,
    attempt      integer,
    lease_token  uuid,
    note         text,
    at           timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (id, tenant_id)
);
CREATE INDEX events_task_idx ON orch.events (task_id) WHERE task_id IS NOT NULL;
COMMENT ON TABLE orch.events IS
  'Append-only audit: one row per accepted state transition and per manual action. Only the extension owner may update or delete.';

CREATE TABLE orch.idempotency_keys (
    tenant_id   text NOT NULL DEFAULT 'default',
    key         text NOT NULL,
    task_id     bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, key)
);
COMMENT ON TABLE orch.idempotency_keys IS
  'Execution-level idempotency keys (per tenant) with their expiry (queue setting idempotency_ttl).';

CREATE TABLE orch.state_machines (
    name        text PRIMARY KEY,
    tenant_id   text NOT NULL DEFAULT 'default',
    builtin     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);
CREATE TABLE orch.state_transitions (
    machine     text NOT NULL REFERENCES orch.state_machines (name) ON DELETE CASCADE,
    from_state  text,
    to_state    text NOT NULL,
    CONSTRAINT state_transitions_uniq UNIQUE NULLS NOT DISTINCT (machine, from_state, to_state)
);
COMMENT ON TABLE orch.state_machines IS
  'State machines stored as data; "task" is the built-in lifecycle of SPEC section 2.';
COMMENT ON TABLE orch.state_transitions IS
  'Allowed (from_state, to_state) pairs per machine; from_state NULL lists an allowed initial state. Self-transitions are always allowed.';

INSERT INTO orch.state_machines (name, builtin) VALUES ('task', true);
INSERT INTO orch.state_transitions (machine, from_state, to_state)
SELECT 'task', f, t FROM (VALUES
    (NULL, 'received'), (NULL, 'queued'), (NULL, 'failed'),
    ('received', 'received'), ('received', 'queued'), ('received', 'failed'), ('received', 'cancelled'),
    ('queued', 'queued'), ('queued', 'executing'), ('queued', 'failed'), ('queued', 'cancelled'),
    ('executing', 'executing'), ('executing', 'awaiting_tool'), ('executing', 'awaiting_user_confirmation'),
    ('executing', 'completed'), ('executing', 'failed'), ('executing', 'cancelled'),
    ('awaiting_tool', 'awaiting_tool'), ('awaiting_tool', 'executing'), ('awaiting_tool', 'failed'),
    ('awaiting_tool', 'cancelled'),
    ('awaiting_user_confirmation', 'awaiting_user_confirmation'), ('awaiting_user_confirmation', 'executing'),
    ('awaiting_user_confirmation', 'failed'), ('awaiting_user_confirmation', 'cancelled'),
    ('completed', 'completed'), ('failed', 'failed'), ('cancelled', 'cancelled')
) AS m(f, t);

-- pg_dump keeps user data of extension tables.
SELECT pg_catalog.pg_extension_config_dump('orch.queues', '');
SELECT pg_catalog.pg_extension_config_dump('orch.tasks', '');
SELECT pg_catalog.pg_extension_config_dump('orch.tasks_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('orch.attempts', '');
SELECT pg_catalog.pg_extension_config_dump('orch.attempts_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('orch.events', '');
SELECT pg_catalog.pg_extension_config_dump('orch.events_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('orch.idempotency_keys', '');
SELECT pg_catalog.pg_extension_config_dump('orch.state_machines', 'WHERE NOT builtin');
SELECT pg_catalog.pg_extension_config_dump('orch.state_transitions', $$WHERE machine <> 'task'$$);

-- Churn settings: tasks are updated several times in their life; leave room
-- for HOT updates and vacuum often.  attempts/events are insert-only.
ALTER TABLE orch.tasks SET (autovacuum_vacuum_scale_factor = 0.02,
                            autovacuum_vacuum_insert_scale_factor = 0.05,
                            autovacuum_analyze_scale_factor = 0.02);

-- ---------------------------------------------------------------------------
-- Lifecycle trigger (C).  One function serves the task table and any user
-- table attached with orch_attach_state_machine; arguments: column, machine.
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_state_machine_trigger()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_state_machine_trigger';
COMMENT ON FUNCTION orch_state_machine_trigger() IS
  'Enforces a state machine on a status column (TG_ARGV: column, machine) and writes one event per accepted transition.';

CREATE TRIGGER tasks_lifecycle
    BEFORE INSERT OR UPDATE ON orch.tasks
    FOR EACH ROW EXECUTE FUNCTION orch_state_machine_trigger('state', 'task');

CREATE FUNCTION orch_create_state_machine(name text, transitions jsonb, initial text[] DEFAULT NULL)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_create_state_machine';
COMMENT ON FUNCTION orch_create_state_machine(text, jsonb, text[]) IS
  'Stores a user-defined state machine: transitions is {"state": ["target", ...], ...}; initial lists the states a new row may start in (default: all).';

CREATE FUNCTION orch_attach_state_machine(tbl regclass, "column" name, machine text)
RETURNS void
LANGUAGE C SECURITY INVOKER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_attach_state_machine';
COMMENT ON FUNCTION orch_attach_state_machine(regclass, name, text) IS
  'Attaches the C lifecycle trigger to a user table''s status column, enforcing the named machine.';

-- ---------------------------------------------------------------------------
-- Queues
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_create_queue(name text, settings jsonb DEFAULT '{}')
RETURNS jsonb
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_create_queue';
COMMENT ON FUNCTION orch_create_queue(text, jsonb) IS
  'Creates a queue with validated settings; returns its effective settings.';

CREATE FUNCTION orch_configure_queue(name text, settings jsonb)
RETURNS jsonb
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_configure_queue';
COMMENT ON FUNCTION orch_configure_queue(text, jsonb) IS
  'Merges settings into a queue''s settings (a JSON null removes a key); returns the effective settings.';

CREATE FUNCTION orch_pause_queue(name text)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_pause_queue';
COMMENT ON FUNCTION orch_pause_queue(text) IS 'Paused queues accept work but hand none out.';

CREATE FUNCTION orch_resume_queue(name text)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_resume_queue';
COMMENT ON FUNCTION orch_resume_queue(text) IS 'Resumes handing out work from a paused queue.';

CREATE FUNCTION orch_drop_queue(name text, force boolean DEFAULT false)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_drop_queue';
COMMENT ON FUNCTION orch_drop_queue(text, boolean) IS
  'Drops a queue; refused while it holds non-terminal tasks unless force, which cancels them (reason queue_dropped).';

CREATE FUNCTION orch_queue_settings(name text)
RETURNS jsonb
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_queue_settings';
COMMENT ON FUNCTION orch_queue_settings(text) IS
  'A queue''s effective settings: its own merged over the defaults.';

-- ---------------------------------------------------------------------------
-- Producing work
-- ---------------------------------------------------------------------------
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
                             timeout interval DEFAULT NULL)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_enqueue';
COMMENT ON FUNCTION orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval) IS
  'Enqueues one task and returns its id; the same idempotency key and payload return the same id, another payload raises OR004.';

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
                                   timeout interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_enqueue_batch';
COMMENT ON FUNCTION orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval) IS
  'Enqueues many tasks in one call; returns their ids in the order of payloads.';

-- ---------------------------------------------------------------------------
-- Running work
-- ---------------------------------------------------------------------------
CREATE FUNCTION orch_dequeue(queue text, worker text,
                             batch integer DEFAULT 1,
                             lease interval DEFAULT NULL,
                             tenant text DEFAULT NULL)
RETURNS TABLE (task_id bigint, lease_token uuid, attempt integer, payload jsonb,
               queue text, priority integer, step_key text, guard text,
               lease_expires_at timestamptz, resume_data jsonb)
LANGUAGE C VOLATILE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_dequeue';
COMMENT ON FUNCTION orch_dequeue(text, text, integer, interval, text) IS
  'Claims up to batch eligible tasks (priority, then FIFO) with a lease; never hands one task to two workers.';

CREATE FUNCTION orch_complete(task_id bigint, lease_token uuid, result jsonb DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_complete';
COMMENT ON FUNCTION orch_complete(bigint, uuid, jsonb) IS
  'Completes a claimed task (fenced by its lease token); returns ''completed''.';

CREATE FUNCTION orch_fail(task_id bigint, lease_token uuid, error_class text,
                          error text DEFAULT NULL, retry_after interval DEFAULT NULL)
RETURNS TABLE (state text, reason_code text, retry_at timestamptz)
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_fail';
COMMENT ON FUNCTION orch_fail(bigint, uuid, text, text, interval) IS
  'Records a failed attempt and applies the retry decision; returns the new state, reason code and retry time.';

CREATE FUNCTION orch_heartbeat(task_id bigint, lease_token uuid, extend interval DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_heartbeat';
COMMENT ON FUNCTION orch_heartbeat(bigint, uuid, interval) IS
  'Extends a lease and returns the task''s state; returns ''cancelled'' when the task was cancelled meanwhile.';

CREATE FUNCTION orch_await_tool(task_id bigint, lease_token uuid,
                                tool text DEFAULT NULL, request jsonb DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_await_tool';
COMMENT ON FUNCTION orch_await_tool(bigint, uuid, text, jsonb) IS
  'Parks a claimed task in awaiting_tool until orch_resume; releases the lease.';

CREATE FUNCTION orch_resume(task_id bigint, result jsonb DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_resume';
COMMENT ON FUNCTION orch_resume(bigint, jsonb) IS
  'Delivers a tool result to a task awaiting a tool; the task becomes claimable and its next claim returns the result.';

CREATE FUNCTION orch_await_confirmation(task_id bigint, lease_token uuid, prompt jsonb DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_await_confirmation';
COMMENT ON FUNCTION orch_await_confirmation(bigint, uuid, jsonb) IS
  'Parks a claimed task in awaiting_user_confirmation until orch_confirm; releases the lease.';

CREATE FUNCTION orch_confirm(task_id bigint, approve boolean, actor text DEFAULT NULL, note text DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_confirm';
COMMENT ON FUNCTION orch_confirm(bigint, boolean, text, text) IS
  'Approves (claimable again) or rejects (failed, confirmation_rejected) a task awaiting confirmation.';

CREATE FUNCTION orch_cancel(task_id bigint, reason text DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_cancel';
COMMENT ON FUNCTION orch_cancel(bigint, text) IS
  'Cancels a non-terminal task and records the reason; a terminal task raises OR002.';

CREATE FUNCTION orch_retry_decision(error_class text, attempts integer, failures integer,
                                    policy jsonb DEFAULT '{}',
                                    retry_after interval DEFAULT NULL,
                                    task_id bigint DEFAULT 0,
                                    terminal boolean DEFAULT false)
RETURNS TABLE (decision text, next_state text, reason_code text, delay interval)
LANGUAGE C IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_retry_decision';
COMMENT ON FUNCTION orch_retry_decision(text, integer, integer, jsonb, interval, bigint, boolean) IS
  'The pure retry decision of SPEC section 4: for an error class, attempts and failures so far (including this one) and a policy.';

-- ---------------------------------------------------------------------------
-- Reading
-- ---------------------------------------------------------------------------
CREATE VIEW orch_tasks WITH (security_barrier) AS
SELECT id AS task_id, tenant_id, queue, state, priority, payload, result, run_at,
       retry_at, attempts, failures, max_attempts, max_failures, reason_code,
       last_error, last_error_class, lease_owner, lease_expires_at, claimed_at,
       wait_data, resume_data, idempotency_key, owner, concurrency_key, run_id,
       step_key, created_at, updated_at, finished_at
  FROM orch.tasks;
COMMENT ON VIEW orch_tasks IS 'Tasks for ad-hoc queries (lease tokens are not shown).';

CREATE VIEW orch_events AS
SELECT id AS event_id, tenant_id, task_id, run_id, entity, from_state, to_state,
       reason_code, actor, attempt, lease_token, note, at
  FROM orch.events;
COMMENT ON VIEW orch_events IS 'The append-only audit trail.';

CREATE VIEW orch_attempts AS
SELECT id AS attempt_id, tenant_id, task_id, attempt, worker, lease_token, started_at,
       finished_at, outcome, error_class, error, retry_at
  FROM orch.attempts;
COMMENT ON VIEW orch_attempts IS 'The append-only history of finished executions.';

CREATE VIEW orch_queues AS
SELECT q.name AS queue, q.tenant_id, q.paused, orch_queue_settings(q.name) AS settings,
       q.created_at, q.updated_at
  FROM orch.queues q;
COMMENT ON VIEW orch_queues IS 'Queues with their effective settings.';

CREATE TYPE orch.task_status AS (
    task_id bigint, queue text, tenant_id text, state text, priority integer,
    attempts integer, failures integer, reason_code text, run_at timestamptz,
    retry_at timestamptz, lease_owner text, lease_expires_at timestamptz,
    result jsonb, last_error text, last_error_class text,
    created_at timestamptz, updated_at timestamptz);

CREATE FUNCTION orch_status(task_id bigint)
RETURNS SETOF orch.task_status
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'task_id must not be null' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
        SELECT t.id, t.queue, t.tenant_id, t.state, t.priority, t.attempts, t.failures,
               t.reason_code, t.run_at, t.retry_at, t.lease_owner, t.lease_expires_at,
               t.result, t.last_error, t.last_error_class, t.created_at, t.updated_at
          FROM orch.tasks t WHERE t.id OPERATOR(pg_catalog.=) $1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
END
$fn$;
COMMENT ON FUNCTION orch_status(bigint) IS 'One task''s current state; OR005 for an unknown id.';

CREATE FUNCTION orch_history(task_id bigint)
RETURNS TABLE (at timestamptz, kind text, attempt integer, from_state text, to_state text,
               reason_code text, actor text, lease_token uuid, outcome text,
               error_class text, error text, note text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'task_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id OPERATOR(pg_catalog.=) $1)
       AND NOT EXISTS (SELECT 1 FROM orch.events e WHERE e.task_id OPERATOR(pg_catalog.=) $1) THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
    RETURN QUERY
        SELECT h.at, h.kind, h.attempt, h.from_state, h.to_state, h.reason_code, h.actor,
               h.lease_token, h.outcome, h.error_class, h.error, h.note
          FROM (SELECT e.at, 'event'::text AS kind, e.attempt, e.from_state, e.to_state,
                       e.reason_code, e.actor, e.lease_token, NULL::text AS outcome,
                       NULL::text AS error_class, NULL::text AS error, e.note,
                       e.id AS seq, 1 AS src
                  FROM orch.events e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                UNION ALL
                SELECT a.finished_at, 'attempt', a.attempt, NULL, NULL, NULL, a.worker,
                       a.lease_token, a.outcome, a.error_class, a.error, NULL,
                       a.id, 0
                  FROM orch.attempts a WHERE a.task_id OPERATOR(pg_catalog.=) $1) h
         ORDER BY h.at, h.src, h.seq;
END
$fn$;
COMMENT ON FUNCTION orch_history(bigint) IS
  'A task''s attempts and events in order; OR005 for an unknown id.';

-- ---------------------------------------------------------------------------
-- Privileges: nothing to PUBLIC; each role gets exactly its calls.
-- ---------------------------------------------------------------------------
DO $grants$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT d.objid::regprocedure
          FROM pg_catalog.pg_depend d
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::regclass
           AND d.refobjid OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_extension
                                                  WHERE extname OPERATOR(pg_catalog.=) 'orchestrator')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$grants$;
REVOKE ALL ON ALL TABLES IN SCHEMA orch FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA orch FROM PUBLIC;
REVOKE ALL ON orch_tasks, orch_events, orch_attempts, orch_queues FROM PUBLIC;

GRANT SELECT ON orch_tasks, orch_events, orch_attempts, orch_queues TO orch_reader;
GRANT EXECUTE ON FUNCTION
    orch_status(bigint),
    orch_history(bigint),
    orch_queue_settings(text),
    orch_retry_decision(text, integer, integer, jsonb, interval, bigint, boolean)
  TO orch_reader;

GRANT EXECUTE ON FUNCTION
    orch_enqueue(text, jsonb, integer, text, timestamptz, text, text, text, integer, integer, jsonb, interval),
    orch_enqueue_batch(text, jsonb[], integer, text[], timestamptz, text, text, text, integer, integer, jsonb, interval),
    orch_cancel(bigint, text)
  TO orch_producer;

GRANT EXECUTE ON FUNCTION
    orch_dequeue(text, text, integer, interval, text),
    orch_complete(bigint, uuid, jsonb),
    orch_fail(bigint, uuid, text, text, interval),
    orch_heartbeat(bigint, uuid, interval),
    orch_await_tool(bigint, uuid, text, jsonb),
    orch_await_confirmation(bigint, uuid, jsonb),
    orch_resume(bigint, jsonb)
  TO orch_worker;

GRANT EXECUTE ON FUNCTION orch_confirm(bigint, boolean, text, text) TO orch_approver;

GRANT EXECUTE ON FUNCTION
    orch_create_queue(text, jsonb),
    orch_configure_queue(text, jsonb),
    orch_pause_queue(text),
    orch_resume_queue(text),
    orch_drop_queue(text, boolean),
    orch_create_state_machine(text, jsonb, text[]),
    orch_attach_state_machine(regclass, name, text),
    orch_state_machine_trigger()
  TO orch_admin;
