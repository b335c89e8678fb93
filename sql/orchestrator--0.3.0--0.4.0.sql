/* orchestrator 0.3.0 -> 0.4.0: tenant isolation, secret lease tokens, restore-safe lifecycle, delayed work off the claim path. */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.4.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- Tenant bindings.  A role bound to tenants (directly, or
-- through a role whose privileges it has) sees and acts on those tenants
-- only; a role bound to none is unrestricted; superusers are never bound.
-- ---------------------------------------------------------------------------
CREATE TABLE orch.tenant_bindings (
    role        regrole NOT NULL,
    tenant_id   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (role, tenant_id)
);
COMMENT ON TABLE orch.tenant_bindings IS
  'Which tenants a role is restricted to (orch_bind_tenant / orch_unbind_tenant). A role with no binding, directly or through the roles it has the privileges of, is unrestricted. regrole: a renamed role keeps its bindings.';
SELECT pg_catalog.pg_extension_config_dump('orch.tenant_bindings', '');
REVOKE ALL ON orch.tenant_bindings FROM PUBLIC;

CREATE FUNCTION orch.tenant_visible(tenant text)
RETURNS boolean
LANGUAGE C STABLE STRICT SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_tenant_visible';
COMMENT ON FUNCTION orch.tenant_visible(text) IS
  'May the calling role see this tenant''s rows? Used by the views and the row-level security policies.';

CREATE FUNCTION orch_caller_tenants()
RETURNS text[]
LANGUAGE C STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_caller_tenants';
COMMENT ON FUNCTION orch_caller_tenants() IS
  'The tenants the calling role is bound to; NULL when it is unrestricted.';

CREATE FUNCTION orch.caller_is_admin()
RETURNS boolean
LANGUAGE C STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_caller_is_admin';
COMMENT ON FUNCTION orch.caller_is_admin() IS
  'Is the calling role a member of orch_admin (or a superuser)? Only such roles read lease tokens in the audit views.';

CREATE FUNCTION orch_bind_tenant(role name, tenant text)
RETURNS boolean
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_bind_tenant';
COMMENT ON FUNCTION orch_bind_tenant(name, text) IS
  'Restricts a role (and the roles that have its privileges) to its bound tenants; true when the binding is new. Audited.';

CREATE FUNCTION orch_unbind_tenant(role name, tenant text)
RETURNS boolean
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_unbind_tenant';
COMMENT ON FUNCTION orch_unbind_tenant(name, text) IS
  'Removes one binding; true when it existed. A role left with no binding is unrestricted. Audited.';

CREATE VIEW orch_tenant_bindings AS
SELECT b.role::text AS role, b.tenant_id, b.created_at FROM orch.tenant_bindings b;
COMMENT ON VIEW orch_tenant_bindings IS 'Roles and the tenants they are restricted to.';

-- ---------------------------------------------------------------------------
-- Events: the actor is always the database role the call acted for; a name
-- the caller supplied (worker, approver) is kept beside it as a label.
-- ---------------------------------------------------------------------------
ALTER TABLE orch.events ADD COLUMN label text;
COMMENT ON COLUMN orch.events.actor IS
  'The database role the action was taken for (current role outside the extension''s functions).';
COMMENT ON COLUMN orch.events.label IS
  'A name the caller supplied (worker id, approver name); never in place of actor.';

-- ---------------------------------------------------------------------------
-- Row-level security on every table with tenant data.  The extension's
-- functions and views run as its owner (which bypasses RLS) and filter by
-- the caller's tenants themselves; these policies guard direct access by any
-- role a DBA grants table privileges to.
-- ---------------------------------------------------------------------------
DO $rls$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['tasks', 'attempts', 'events', 'idempotency_keys',
                             'commands', 'rate_window', 'concurrency_limits']
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format(
            'CREATE POLICY tenant_isolation ON orch.%I USING (orch.tenant_visible(tenant_id))'
            ' WITH CHECK (orch.tenant_visible(tenant_id))', t);
    END LOOP;
END
$rls$;

-- ---------------------------------------------------------------------------
-- Views: a bound role sees its tenants only; lease tokens are secrets that
-- only orch_admin reads (a worker gets its own from the claim).
-- ---------------------------------------------------------------------------
CREATE OR REPLACE VIEW orch_tasks WITH (security_barrier) AS
SELECT id AS task_id, tenant_id, queue, state, priority, payload, result, run_at,
       retry_at, attempts, failures, max_attempts, max_failures, reason_code,
       last_error, last_error_class, lease_owner, lease_expires_at, claimed_at,
       wait_data, resume_data, idempotency_key, owner, concurrency_key, run_id,
       step_key, created_at, updated_at, finished_at, retry_of, gated
  FROM orch.tasks
 WHERE (SELECT orch_caller_tenants()) IS NULL OR tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);

-- CREATE OR REPLACE (same columns, label appended): views of users that
-- depend on these keep working, and their grants stay.
CREATE OR REPLACE VIEW orch_events WITH (security_barrier) AS
SELECT id AS event_id, tenant_id, task_id, run_id, entity, from_state, to_state,
       reason_code, actor, attempt,
       CASE WHEN (SELECT orch.caller_is_admin()) THEN lease_token END AS lease_token,
       note, at, label
  FROM orch.events
 WHERE (SELECT orch_caller_tenants()) IS NULL OR tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);
COMMENT ON VIEW orch_events IS
  'The append-only audit trail (lease tokens shown to orch_admin only; a bound role sees its tenants).';

CREATE OR REPLACE VIEW orch_attempts WITH (security_barrier) AS
SELECT id AS attempt_id, tenant_id, task_id, attempt, worker,
       CASE WHEN (SELECT orch.caller_is_admin()) THEN lease_token END AS lease_token,
       started_at, finished_at, outcome, error_class, error, retry_at
  FROM orch.attempts
 WHERE (SELECT orch_caller_tenants()) IS NULL OR tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);
COMMENT ON VIEW orch_attempts IS
  'The append-only history of finished executions (lease tokens shown to orch_admin only).';

CREATE OR REPLACE VIEW orch_dead_letters WITH (security_barrier) AS
SELECT t.id AS task_id, t.tenant_id, t.queue, t.reason_code AS reason, t.finished_at AS failed_at,
       t.last_error, t.last_error_class, t.attempts, t.failures, t.payload, t.priority,
       t.owner, t.created_at
  FROM orch.tasks t
 WHERE t.state OPERATOR(pg_catalog.=) 'failed'
   AND t.reason_code OPERATOR(pg_catalog.=) ANY (ARRAY['max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
                         'compensation_required', 'not_safe_to_retry'])
   AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of OPERATOR(pg_catalog.=) t.id AND r.tenant_id OPERATOR(pg_catalog.=) t.tenant_id)
   AND ((SELECT orch_caller_tenants()) IS NULL OR t.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]));

CREATE OR REPLACE VIEW orch_commands WITH (security_barrier) AS
SELECT id AS command_id, tenant_id, kind, idempotency_key, payload, origin_task_id,
       task_id, status, result, created_at, completed_at
  FROM orch.commands
 WHERE (SELECT orch_caller_tenants()) IS NULL OR tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);

CREATE OR REPLACE FUNCTION orch_status(task_id bigint)
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
          FROM orch.tasks t
         WHERE t.id OPERATOR(pg_catalog.=) $1 AND orch.tenant_visible(t.tenant_id);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
END
$fn$;

DROP FUNCTION orch_history(bigint);
CREATE FUNCTION orch_history(task_id bigint)
RETURNS TABLE (at timestamptz, kind text, attempt integer, from_state text, to_state text,
               reason_code text, actor text, lease_token uuid, outcome text,
               error_class text, error text, note text, label text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS $fn$
DECLARE
    admin boolean := orch.caller_is_admin();
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'task_id must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id OPERATOR(pg_catalog.=) $1
                      AND orch.tenant_visible(t.tenant_id))
       AND NOT EXISTS (SELECT 1 FROM orch.events e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                          AND orch.tenant_visible(e.tenant_id)) THEN
        RAISE EXCEPTION 'task % does not exist', $1 USING ERRCODE = 'OR005';
    END IF;
    RETURN QUERY
        SELECT h.at, h.kind, h.attempt, h.from_state, h.to_state, h.reason_code, h.actor,
               CASE WHEN admin THEN h.lease_token END, h.outcome, h.error_class, h.error, h.note,
               h.label
          FROM (SELECT e.at, 'event'::text AS kind, e.attempt, e.from_state, e.to_state,
                       e.reason_code, e.actor, e.lease_token, NULL::text AS outcome,
                       NULL::text AS error_class, NULL::text AS error, e.note, e.label,
                       e.id AS seq, 1 AS src
                  FROM orch.events e WHERE e.task_id OPERATOR(pg_catalog.=) $1
                   AND orch.tenant_visible(e.tenant_id)
                UNION ALL
                SELECT a.finished_at, 'attempt', a.attempt, NULL, NULL, NULL, NULL,
                       a.lease_token, a.outcome, a.error_class, a.error, NULL, a.worker,
                       a.id, 0
                  FROM orch.attempts a WHERE a.task_id OPERATOR(pg_catalog.=) $1
                   AND orch.tenant_visible(a.tenant_id)) h
         ORDER BY h.at, h.src, h.seq;
END
$fn$;
COMMENT ON FUNCTION orch_history(bigint) IS
  'A task''s attempts and events in order (lease tokens for orch_admin only); OR005 for an unknown id or another tenant''s task.';

-- ---------------------------------------------------------------------------
-- Delayed work off the claim path: tasks not due yet (queued for later, or
-- waiting to retry) are not claimable (ready_at NULL) and wait in their own
-- index until a claim of the queue or orch_maintain lets them in.
-- ---------------------------------------------------------------------------
DROP INDEX orch.tasks_delayed_idx;
CREATE INDEX tasks_due_idx ON orch.tasks (queue, (coalesce(retry_at, run_at)))
    WHERE ready_at IS NULL AND NOT gated
      AND (state OPERATOR(pg_catalog.=) 'queued' OR (state OPERATOR(pg_catalog.=) 'awaiting_tool' AND retry_at IS NOT NULL));
-- Existing future work leaves the claim index (a self-transition: no event).
UPDATE orch.tasks SET ready_at = NULL
 WHERE ready_at OPERATOR(pg_catalog.>) pg_catalog.now() AND state OPERATOR(pg_catalog.=) ANY (ARRAY['queued', 'awaiting_tool']);

-- Key decisions deferred to avoid lock-order deadlocks: a transaction that
-- holds one concurrency-key lock only tries another; when it is busy, the
-- task waits gated and the key is noted here, to be settled by the next
-- claim of the queue or by orch_maintain.
CREATE TABLE orch.gate_repairs (
    queue       text NOT NULL,
    key         text NOT NULL,
    tenant_id   text NOT NULL DEFAULT 'default',
    noted_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, key, tenant_id)
);
COMMENT ON TABLE orch.gate_repairs IS
  'Concurrency keys whose admission or promotion was deferred (the key lock was busy while the transaction held another key lock); settled by the next claim of the queue or orch_maintain.';
SELECT pg_catalog.pg_extension_config_dump('orch.gate_repairs', '');
REVOKE ALL ON orch.gate_repairs FROM PUBLIC;

-- Rate windows are per tenant.
DROP INDEX orch.rate_window_idx;
CREATE INDEX rate_window_idx ON orch.rate_window (queue, owner, tenant_id, at);

-- ---------------------------------------------------------------------------
-- Privileges
-- ---------------------------------------------------------------------------
REVOKE ALL ON FUNCTION orch.tenant_visible(text), orch_caller_tenants(), orch.caller_is_admin(),
    orch_bind_tenant(name, text), orch_unbind_tenant(name, text), orch_history(bigint)
  FROM PUBLIC;
REVOKE ALL ON orch_events, orch_attempts, orch_tenant_bindings FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch.tenant_visible(text), orch_caller_tenants(), orch.caller_is_admin(),
    orch_history(bigint)
  TO orch_reader;
GRANT SELECT ON orch_events, orch_attempts TO orch_reader;
GRANT EXECUTE ON FUNCTION orch_bind_tenant(name, text), orch_unbind_tenant(name, text) TO orch_admin;
GRANT SELECT ON orch_tenant_bindings TO orch_admin;

-- ---------------------------------------------------------------------------
-- Workflow definitions
-- Versioned workflow templates (format: docs/workflows.md).
-- A name's versions are drafts (mutable: orch_define replaces the highest
-- version while it is a draft), then published (immutable, OR007, enforced
-- for every writer by a C trigger), then deprecated.  Definitions are shared
-- by all tenants: they are stored under tenant 'default' and authored only
-- by roles not bound to tenants.
-- ---------------------------------------------------------------------------
CREATE TABLE orch.definitions (
    tenant_id     text NOT NULL DEFAULT 'default',
    name          text NOT NULL,
    version       integer NOT NULL CHECK (version OPERATOR(pg_catalog.>=) 1),
    status        text NOT NULL DEFAULT 'draft'
                  CHECK (status OPERATOR(pg_catalog.=) ANY (ARRAY['draft', 'published', 'deprecated'])),
    spec          jsonb NOT NULL,
    content_hash  text NOT NULL CHECK (content_hash OPERATOR(pg_catalog.~) '^[0-9a-f]{64}$'),
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    created_by    text NOT NULL DEFAULT CURRENT_USER,
    published_at  timestamptz,
    deprecated_at timestamptz,
    PRIMARY KEY (name, version, tenant_id),
    CHECK ((status OPERATOR(pg_catalog.=) 'draft') OPERATOR(pg_catalog.=) (published_at IS NULL)),
    CHECK ((status OPERATOR(pg_catalog.=) 'deprecated') OPERATOR(pg_catalog.=) (deprecated_at IS NOT NULL))
);
COMMENT ON TABLE orch.definitions IS
  'Workflow definitions: name + version + content hash (hex sha256 of spec::text). Drafts are mutable; published and deprecated versions are immutable (OR007, trigger definitions_guard).';
SELECT pg_catalog.pg_extension_config_dump('orch.definitions', '');
REVOKE ALL ON orch.definitions FROM PUBLIC;

CREATE FUNCTION orch_definitions_guard()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_definitions_guard';
COMMENT ON FUNCTION orch_definitions_guard() IS
  'Keeps published workflow definitions immutable (OR007): status moves draft -> published -> deprecated only; no other column of a published or deprecated version changes; such versions are never deleted or truncated.';
CREATE TRIGGER definitions_guard
    BEFORE UPDATE OR DELETE ON orch.definitions
    FOR EACH ROW EXECUTE FUNCTION orch_definitions_guard();
CREATE TRIGGER definitions_guard_truncate
    BEFORE TRUNCATE ON orch.definitions
    FOR EACH STATEMENT EXECUTE FUNCTION orch_definitions_guard();

CREATE FUNCTION orch_define(name text, spec jsonb)
RETURNS integer
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_define';
COMMENT ON FUNCTION orch_define(text, jsonb) IS
  'Validates a workflow spec (OR008 naming the JSON path) and stores it as a draft: replaces the name''s highest version while that is a draft, else adds the next version. Returns the version. Audited.';

CREATE FUNCTION orch_publish(name text, version integer)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_publish';
COMMENT ON FUNCTION orch_publish(text, integer) IS
  'Publishes a draft version after validating it again and returns its content hash; idempotent for a published version; OR007 for a deprecated one; OR005 when unknown. Audited.';

CREATE FUNCTION orch_deprecate(name text, version integer)
RETURNS void
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_deprecate';
COMMENT ON FUNCTION orch_deprecate(text, integer) IS
  'Deprecates a published version (idempotent); OR007 for a draft; OR005 when unknown. Audited.';

CREATE FUNCTION orch_definition(name text, version integer DEFAULT NULL)
RETURNS TABLE (name text, version integer, status text, spec jsonb, content_hash text,
               created_at timestamptz, published_at timestamptz, deprecated_at timestamptz)
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_definition';
COMMENT ON FUNCTION orch_definition(text, integer) IS
  'One version of a workflow definition in any status; version NULL means the highest published (not deprecated) version. OR005 when there is none.';

CREATE FUNCTION orch_validate_definition(spec jsonb)
RETURNS void
LANGUAGE C STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_validate_definition';
COMMENT ON FUNCTION orch_validate_definition(jsonb) IS
  'Validates a workflow spec without storing it: returns nothing, or raises OR008 with the JSON path of the first problem in the detail.';

CREATE VIEW orch_definitions AS
SELECT d.name, d.version, d.status, d.content_hash, d.spec, d.created_at, d.created_by,
       d.published_at, d.deprecated_at, d.tenant_id
  FROM orch.definitions d;
COMMENT ON VIEW orch_definitions IS
  'Every version of every workflow definition (shared by all tenants).';

REVOKE ALL ON FUNCTION orch_definitions_guard(), orch_define(text, jsonb),
    orch_publish(text, integer), orch_deprecate(text, integer),
    orch_definition(text, integer), orch_validate_definition(jsonb)
  FROM PUBLIC;
REVOKE ALL ON orch_definitions FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orch_define(text, jsonb), orch_publish(text, integer),
    orch_deprecate(text, integer)
  TO orch_admin;
GRANT EXECUTE ON FUNCTION orch_definition(text, integer), orch_validate_definition(jsonb)
  TO orch_reader;
GRANT SELECT ON orch_definitions TO orch_reader;

-- ---------------------------------------------------------------------------
-- Workflow runs: one execution of a published definition version.
-- Its steps become ordinary tasks (run_id, step_key); progression happens in
-- the transaction that finishes a step's task, under the run's row lock.
-- ---------------------------------------------------------------------------
CREATE SEQUENCE orch.runs_id_seq;
CREATE TABLE orch.runs (
    id              bigint NOT NULL DEFAULT pg_catalog.nextval('orch.runs_id_seq'),
    tenant_id       text NOT NULL DEFAULT 'default',
    definition      text NOT NULL,
    version         integer NOT NULL,
    content_hash    text NOT NULL,
    state           text NOT NULL,
    phase           text NOT NULL DEFAULT 'forward' CHECK (phase OPERATOR(pg_catalog.=) ANY (ARRAY['forward', 'compensating'])),
    input           jsonb NOT NULL,
    output          jsonb,
    pins            jsonb NOT NULL,
    idempotency_key text,
    reason_code     text,
    failed_step     text,
    error           text,
    deadline_at     timestamptz,
    retry_of        bigint,
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at     timestamptz,
    PRIMARY KEY (id, tenant_id)
);
CREATE UNIQUE INDEX runs_idempotency_idx ON orch.runs (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_open_idx ON orch.runs (deadline_at)
    WHERE state OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'waiting_approval', 'paused']);
CREATE UNIQUE INDEX runs_retry_of_idx ON orch.runs (retry_of, tenant_id) WHERE retry_of IS NOT NULL;
COMMENT ON TABLE orch.runs IS
  'Workflow runs: a pinned definition version (name, version, content hash), the input, pins, state (running, waiting_approval, paused, succeeded, failed, canceled; C trigger run_lifecycle) and phase (forward, compensating).';

CREATE TABLE orch.run_steps (
    run_id       bigint NOT NULL,
    tenant_id    text NOT NULL DEFAULT 'default',
    step_id      text NOT NULL,
    ord          integer NOT NULL,
    type         text NOT NULL,
    spec         jsonb NOT NULL,
    deps         text[] NOT NULL DEFAULT '{}',
    join_policy  text NOT NULL DEFAULT 'all_succeeded',
    needs_edge   boolean NOT NULL DEFAULT false,
    edge_taken   boolean NOT NULL DEFAULT false,
    out_edges    text[] NOT NULL DEFAULT '{}',
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'ready', 'running', 'awaiting_approval', 'waiting',
                                  'succeeded', 'failed', 'timed_out', 'skipped', 'canceled'])),
    task_id      bigint,
    items        jsonb,
    output       jsonb,
    error        text,
    wake_at      timestamptz,
    cap_at       timestamptz,
    started_at   timestamptz,
    finished_at  timestamptz,
    done_seq     bigint,
    comp_state   text CHECK (comp_state OPERATOR(pg_catalog.=) ANY (ARRAY['armed', 'pending', 'awaiting_approval', 'running',
                                            'done', 'failed', 'canceled'])),
    comp_task_id bigint,
    PRIMARY KEY (run_id, step_id, tenant_id)
) WITH (fillfactor = 70);
-- Timers and soft caps; no state in the predicate, so that a step's state
-- changes are HOT updates (fillfactor 70 leaves them room).
CREATE INDEX run_steps_timer_idx ON orch.run_steps (least(wake_at, cap_at))
    WHERE wake_at IS NOT NULL OR cap_at IS NOT NULL;
CREATE SEQUENCE orch.run_steps_done_seq;
COMMENT ON TABLE orch.run_steps IS
  'The steps of a run: their state, the task(s) executing them, outputs, timers and compensation state.';
CREATE INDEX tasks_run_idx ON orch.tasks (run_id, tenant_id) WHERE run_id IS NOT NULL;

CREATE TABLE orch.approvals (
    approval_ref text NOT NULL,
    tenant_id    text NOT NULL DEFAULT 'default',
    run_id       bigint NOT NULL,
    step_id      text NOT NULL,
    approved     boolean NOT NULL,
    actor        text NOT NULL,
    label        text,
    note         text,
    decided_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    PRIMARY KEY (approval_ref, tenant_id)
);
COMMENT ON TABLE orch.approvals IS
  'Human decisions on approval steps: an approval reference is single-use and bound to one run and step (OR009).';

SELECT pg_catalog.pg_extension_config_dump('orch.runs', '');
SELECT pg_catalog.pg_extension_config_dump('orch.runs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('orch.run_steps', '');
SELECT pg_catalog.pg_extension_config_dump('orch.run_steps_done_seq', '');
SELECT pg_catalog.pg_extension_config_dump('orch.approvals', '');
REVOKE ALL ON orch.runs, orch.run_steps, orch.approvals FROM PUBLIC;
REVOKE ALL ON SEQUENCE orch.runs_id_seq, orch.run_steps_done_seq FROM PUBLIC;
DO $rls$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['runs', 'run_steps', 'approvals']
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE orch.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE pg_catalog.format(
            'CREATE POLICY tenant_isolation ON orch.%I USING (orch.tenant_visible(tenant_id))'
            ' WITH CHECK (orch.tenant_visible(tenant_id))', t);
    END LOOP;
END
$rls$;

CREATE FUNCTION orch_run_lifecycle()
RETURNS trigger
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_run_lifecycle';
COMMENT ON FUNCTION orch_run_lifecycle() IS
  'Enforces the run lifecycle of seed 001 section 3.1 on orch.runs for every writer (OR001, OR002) and writes one event per accepted transition.';
CREATE TRIGGER runs_lifecycle
    BEFORE INSERT OR UPDATE ON orch.runs
    FOR EACH ROW EXECUTE FUNCTION orch_run_lifecycle();

CREATE FUNCTION orch_start(name text, input jsonb, version integer DEFAULT NULL,
                           idempotency_key text DEFAULT NULL, tenant text DEFAULT NULL,
                           pins jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_start';
COMMENT ON FUNCTION orch_start(text, jsonb, integer, text, text, jsonb) IS
  'Starts a run of a published workflow version (default: the latest) and returns its id; the same idempotency key and request return the same run, another request raises OR004.';

CREATE FUNCTION orch_approve(run_id bigint, step_id text, approval_ref text,
                             actor text DEFAULT NULL, note text DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_approve';
COMMENT ON FUNCTION orch_approve(bigint, text, text, text, text) IS
  'Approves a step awaiting approval (or a compensation awaiting approval) with a single-use reference; returns the run state. OR009 for a reused reference or a step not awaiting approval.';

CREATE FUNCTION orch_reject(run_id bigint, step_id text, approval_ref text,
                            actor text DEFAULT NULL, note text DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_reject';
COMMENT ON FUNCTION orch_reject(bigint, text, text, text, text) IS
  'Rejects a step awaiting approval: it fails (on_failure edge, else the run fails and compensates); returns the run state.';

CREATE FUNCTION orch_pause_run(run_id bigint)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_pause_run';
COMMENT ON FUNCTION orch_pause_run(bigint) IS
  'Pauses a running run (idempotent): no new step is handed out; running steps finish.';

CREATE FUNCTION orch_resume_run(run_id bigint, pins jsonb DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_resume_run';
COMMENT ON FUNCTION orch_resume_run(bigint, jsonb) IS
  'Resumes a paused run (idempotent); with pins, every pin must equal the run''s pinned context, else OR010 and nothing changes.';

CREATE FUNCTION orch_cancel_run(run_id bigint, reason text DEFAULT NULL)
RETURNS text
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_cancel_run';
COMMENT ON FUNCTION orch_cancel_run(bigint, text) IS
  'Cancels a run and every open task of its steps in one transaction (idempotent); workers learn it from orch_heartbeat.';

CREATE FUNCTION orch_retry_run(run_id bigint)
RETURNS bigint
LANGUAGE C VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_retry_run';
COMMENT ON FUNCTION orch_retry_run(bigint) IS
  'Runs a failed run again from its failed steps as a new run (retry_of = the original), keeping completed outputs; audited on both.';

CREATE FUNCTION orch_run_status(run_id bigint)
RETURNS jsonb
LANGUAGE C STABLE SECURITY DEFINER
SET search_path = pg_catalog, orch, pg_temp
AS 'MODULE_PATHNAME', 'orch_run_status';
COMMENT ON FUNCTION orch_run_status(bigint) IS
  'A run with its steps, their tasks and attempts, approvals and events, as one JSON document; OR005 when unknown.';

CREATE VIEW orch_runs WITH (security_barrier) AS
SELECT r.id AS run_id, r.tenant_id, r.definition, r.version, r.content_hash, r.state, r.phase,
       r.input, r.output, r.pins, r.idempotency_key, r.reason_code, r.failed_step, r.error,
       r.deadline_at, r.retry_of, r.created_by, r.created_at, r.updated_at, r.finished_at
  FROM orch.runs r
 WHERE (SELECT orch_caller_tenants()) IS NULL OR r.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);
COMMENT ON VIEW orch_runs IS 'Workflow runs (a bound role sees its tenants).';

CREATE VIEW orch_run_steps WITH (security_barrier) AS
SELECT s.run_id, s.tenant_id, s.step_id, s.ord, s.type, s.state, s.task_id, s.output, s.error,
       s.wake_at, s.cap_at AS timeout_at, s.started_at, s.finished_at, s.comp_state AS compensation
  FROM orch.run_steps s
 WHERE (SELECT orch_caller_tenants()) IS NULL OR s.tenant_id OPERATOR(pg_catalog.=) ANY ((SELECT orch_caller_tenants())::text[]);
COMMENT ON VIEW orch_run_steps IS 'The steps of workflow runs (a bound role sees its tenants).';

REVOKE ALL ON FUNCTION orch_run_lifecycle(), orch_start(text, jsonb, integer, text, text, jsonb),
    orch_approve(bigint, text, text, text, text), orch_reject(bigint, text, text, text, text),
    orch_pause_run(bigint), orch_resume_run(bigint, jsonb), orch_cancel_run(bigint, text),
    orch_retry_run(bigint), orch_run_status(bigint)
  FROM PUBLIC;
REVOKE ALL ON orch_runs, orch_run_steps FROM PUBLIC;
GRANT SELECT ON orch_runs, orch_run_steps TO orch_reader;
GRANT EXECUTE ON FUNCTION orch_run_status(bigint) TO orch_reader;
GRANT EXECUTE ON FUNCTION orch_start(text, jsonb, integer, text, text, jsonb),
    orch_pause_run(bigint), orch_resume_run(bigint, jsonb), orch_cancel_run(bigint, text)
  TO orch_producer;
GRANT EXECUTE ON FUNCTION orch_approve(bigint, text, text, text, text),
    orch_reject(bigint, text, text, text, text) TO orch_approver;
GRANT EXECUTE ON FUNCTION orch_retry_run(bigint) TO orch_admin;
