-- commands: the idempotent command boundary.
-- Every seed command kind end to end: orch_command records the request and
-- queues a work task in the command queue; an adapter claims it, performs
-- the side effect, records the outcome with orch_command_result and completes
-- the task; a replay returns the recorded command and result; another kind or
-- payload under the same key raises OR004 and creates nothing.
-- Its commands live in tenants cmdt / cmdt2 (plus one in the default tenant)
-- and its keys start with cmdt-.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- Commands are named by labels; ids never reach the output.
CREATE TEMP TABLE cmd (label text PRIMARY KEY, command_id bigint NOT NULL, task_id bigint);

-- send(label, kind, key, payload, tenant, origin): calls orch_command; the
-- first call of a label remembers the ids, later calls report whether they
-- got the same command and task back.
CREATE FUNCTION pg_temp.send(l text, k text, key text, p jsonb, ten text DEFAULT 'cmdt',
                             origin bigint DEFAULT NULL)
RETURNS TABLE (label text, replayed boolean, status text, result jsonb, ids text)
LANGUAGE plpgsql AS $$
DECLARE r record; c cmd;
BEGIN
    SELECT * INTO r FROM orch_command(k, key, p, task_id => origin, tenant => ten);
    SELECT * INTO c FROM cmd WHERE cmd.label = l;
    IF NOT FOUND THEN
        INSERT INTO cmd VALUES (l, r.command_id, r.task_id);
        ids := CASE WHEN r.command_id IS NOT NULL AND r.task_id IS NOT NULL THEN 'new' ELSE 'MISSING IDS' END;
    ELSE
        ids := CASE WHEN r.command_id = c.command_id AND r.task_id = c.task_id THEN 'same'
                    ELSE 'DIFFERENT' END;
    END IF;
    label := l; replayed := r.replayed; status := r.status; result := r.result;
    RETURN NEXT;
END $$;

-- adapter(tenant, n): claims up to n command tasks (of one tenant, or of all
-- when tenant is NULL) from the command queue, performs
-- each command (deterministically, by kind), records its outcome and
-- completes the task.  Returns one line per command handled.
CREATE FUNCTION pg_temp.adapter(ten text DEFAULT NULL, n int DEFAULT 10)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE w record; ok boolean; res jsonb; recorded text; completed text; l text;
BEGIN
    FOR w IN SELECT d.task_id, d.lease_token, d.payload, d.queue, d.attempt
               FROM orch_dequeue(current_setting('orchestrator.command_queue'), 'cmd-adapter', n,
                                 tenant => ten) d
              ORDER BY d.task_id LOOP
        SELECT c.label INTO l FROM cmd c WHERE c.command_id = (w.payload ->> 'command_id')::bigint;
        ok := true;
        CASE w.payload ->> 'kind'
        WHEN 'deployment.create' THEN
            res := jsonb_build_object('deployment', 'dep-' || (w.payload #>> '{payload,app}'), 'state', 'running');
        WHEN 'deployment.stop' THEN
            res := jsonb_build_object('deployment', w.payload #>> '{payload,deployment}', 'state', 'stopped');
        WHEN 'order.place' THEN
            res := jsonb_build_object('order', 'ord-' || (w.payload #>> '{payload,sku}'), 'qty', w.payload #> '{payload,qty}');
        WHEN 'order.cancel' THEN
            IF w.payload #>> '{payload,order}' LIKE 'ord-%' THEN
                res := jsonb_build_object('order', w.payload #>> '{payload,order}', 'cancelled', true);
            ELSE
                ok := false;
                res := jsonb_build_object('error', 'unknown order');
            END IF;
        ELSE
            ok := false;
            res := jsonb_build_object('error', 'unsupported kind');
        END CASE;
        BEGIN
            recorded := orch_command_result((w.payload ->> 'command_id')::bigint, ok, res);
        EXCEPTION WHEN OTHERS THEN
            recorded := SQLSTATE;
        END;
        completed := orch_complete(w.task_id, w.lease_token, res);
        RETURN NEXT format('%s: %s %s attempt=%s task_is_the_commands=%s -> %s, task %s',
                           coalesce(l, 'UNKNOWN'), w.payload ->> 'kind', w.payload ->> 'idempotency_key',
                           w.attempt,
                           w.task_id = (SELECT c.task_id FROM cmd c WHERE c.label = l),
                           recorded, completed);
    END LOOP;
END $$;

-- What exists for this file: commands, command tasks, their events.
CREATE FUNCTION pg_temp.stored() RETURNS text LANGUAGE sql AS $$
    SELECT format('commands=%s pending=%s tasks=%s events=%s',
        (SELECT count(*) FROM orch.commands WHERE tenant_id LIKE 'cmdt%' OR idempotency_key LIKE 'cmdt-%'),
        (SELECT count(*) FROM orch.commands WHERE (tenant_id LIKE 'cmdt%' OR idempotency_key LIKE 'cmdt-%')
                                               AND status = 'pending'),
        (SELECT count(*) FROM orch.tasks WHERE queue = current_setting('orchestrator.command_queue')
                                           AND payload ->> 'idempotency_key' LIKE 'cmdt-%'),
        (SELECT count(*) FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id
          WHERE t.queue = current_setting('orchestrator.command_queue')
            AND t.payload ->> 'idempotency_key' LIKE 'cmdt-%'))
$$;

-- ---------------------------------------------------------------------------
-- 1. deployment.create: recorded pending with a queued work task.
-- ---------------------------------------------------------------------------
SELECT * FROM pg_temp.send('dep-create', 'deployment.create', 'cmdt-dep-create-1', '{"app": "web", "replicas": 2}');
-- (the library is loaded now: its settings exist)
SELECT current_setting('orchestrator.command_queue') AS command_queue;
SELECT pg_temp.stored();
-- the work task: queued in the command queue, in the command's tenant, its
-- payload carries the command
SELECT t.queue, t.tenant_id, t.state,
       (t.payload ->> 'command_id')::bigint = c.command_id AS names_command,
       t.payload - 'command_id' AS payload
  FROM orch.tasks t JOIN cmd c ON c.task_id = t.id WHERE c.label = 'dep-create';
SELECT v.kind, v.idempotency_key, v.payload, v.status, v.result, v.tenant_id,
       v.origin_task_id IS NULL AS no_origin, v.completed_at IS NULL AS not_completed
  FROM orch_commands v JOIN cmd c USING (command_id) WHERE c.label = 'dep-create';
-- replayed before the adapter ran: the same pending command, no new task
SELECT * FROM pg_temp.send('dep-create', 'deployment.create', 'cmdt-dep-create-1', '{"replicas": 2, "app": "web"}');
SELECT pg_temp.stored();
-- conflicts: another payload, another kind -> OR004, nothing created
SELECT pg_temp.try($$SELECT command_id FROM orch_command('deployment.create', 'cmdt-dep-create-1', '{"app": "web", "replicas": 3}', tenant => 'cmdt')$$) AS other_payload,
       pg_temp.try($$SELECT command_id FROM orch_command('deployment.stop', 'cmdt-dep-create-1', '{"app": "web", "replicas": 2}', tenant => 'cmdt')$$) AS other_kind,
       pg_temp.try($$SELECT command_id FROM orch_command('order.place', 'cmdt-dep-create-1', '{}', tenant => 'cmdt')$$) AS other_both;
SELECT pg_temp.stored();
-- the adapter performs it
SELECT * FROM pg_temp.adapter();
SELECT pg_temp.stored();
-- a replay now returns the recorded outcome
SELECT * FROM pg_temp.send('dep-create', 'deployment.create', 'cmdt-dep-create-1', '{"app": "web", "replicas": 2}');
SELECT pg_temp.try($$SELECT command_id FROM orch_command('deployment.create', 'cmdt-dep-create-1', '{"app": "api", "replicas": 2}', tenant => 'cmdt')$$) AS other_payload_after_result;
SELECT pg_temp.stored();
-- nothing is left for the adapter
SELECT count(*) AS adapter_handled FROM pg_temp.adapter();

-- ---------------------------------------------------------------------------
-- 2. deployment.stop, order.place, order.cancel (one succeeds, one fails).
-- ---------------------------------------------------------------------------
SELECT * FROM pg_temp.send('dep-stop', 'deployment.stop', 'cmdt-dep-stop-1', '{"deployment": "dep-web"}');
SELECT * FROM pg_temp.send('ord-place', 'order.place', 'cmdt-ord-place-1', '{"sku": "A-100", "qty": 3}');
SELECT * FROM pg_temp.send('ord-cancel', 'order.cancel', 'cmdt-ord-cancel-1', '{"order": "ord-A-100"}');
SELECT * FROM pg_temp.send('ord-cancel-bad', 'order.cancel', 'cmdt-ord-cancel-2', '{"order": "nope"}');
SELECT pg_temp.stored();
-- replays and conflicts before the adapter ran
SELECT * FROM pg_temp.send('ord-place', 'order.place', 'cmdt-ord-place-1', '{"qty": 3, "sku": "A-100"}');
SELECT pg_temp.try($$SELECT command_id FROM orch_command('order.place', 'cmdt-ord-place-1', '{"sku": "A-100", "qty": 4}', tenant => 'cmdt')$$) AS place_other_qty,
       pg_temp.try($$SELECT command_id FROM orch_command('order.cancel', 'cmdt-ord-place-1', '{"sku": "A-100", "qty": 3}', tenant => 'cmdt')$$) AS place_as_cancel,
       pg_temp.try($$SELECT command_id FROM orch_command('deployment.create', 'cmdt-dep-stop-1', '{"deployment": "dep-web"}', tenant => 'cmdt')$$) AS stop_as_create,
       pg_temp.try($$SELECT command_id FROM orch_command('order.cancel', 'cmdt-ord-cancel-1', '{"order": "ord-B-200"}', tenant => 'cmdt')$$) AS cancel_other_order;
SELECT pg_temp.stored();
SELECT * FROM pg_temp.adapter();
SELECT pg_temp.stored();
SELECT c.label, v.kind, v.status, v.result, v.completed_at IS NOT NULL AS completed
  FROM orch_commands v JOIN cmd c USING (command_id) ORDER BY c.label;
-- the work tasks are completed with the adapter's result; each has its
-- lifecycle events and one attempt
SELECT c.label, t.state, t.result = v.result AS same_result, t.attempts,
       (SELECT string_agg(e.from_state || '>' || e.to_state, ' ' ORDER BY e.id)
          FROM orch.history e WHERE e.task_id = t.id) AS events
  FROM cmd c JOIN orch.tasks t ON t.id = c.task_id JOIN orch_commands v USING (command_id)
 ORDER BY c.label;
-- replays return the recorded outcome, failed ones included
SELECT * FROM pg_temp.send('dep-stop', 'deployment.stop', 'cmdt-dep-stop-1', '{"deployment": "dep-web"}');
SELECT * FROM pg_temp.send('ord-place', 'order.place', 'cmdt-ord-place-1', '{"sku": "A-100", "qty": 3}');
SELECT * FROM pg_temp.send('ord-cancel', 'order.cancel', 'cmdt-ord-cancel-1', '{"order": "ord-A-100"}');
SELECT * FROM pg_temp.send('ord-cancel-bad', 'order.cancel', 'cmdt-ord-cancel-2', '{"order": "nope"}');
SELECT pg_temp.try($$SELECT command_id FROM orch_command('order.cancel', 'cmdt-ord-cancel-2', '{"order": "ord-A-100"}', tenant => 'cmdt')$$) AS retry_failed_with_other_payload;
SELECT pg_temp.stored();

-- ---------------------------------------------------------------------------
-- 3. The outcome is recorded once.
-- ---------------------------------------------------------------------------
SELECT command_id AS dep_create FROM cmd WHERE label = 'dep-create' \gset
SELECT command_id AS cancel_bad FROM cmd WHERE label = 'ord-cancel-bad' \gset
-- the same outcome again: a no-op
SELECT orch_command_result(:dep_create, true, '{"deployment": "dep-web", "state": "running"}') AS same_again,
       orch_command_result(:cancel_bad, false, '{"error": "unknown order"}') AS same_failure_again;
-- another outcome: OR002, nothing changes
SELECT pg_temp.try(format($$SELECT orch_command_result(%s, false, '{"error": "x"}')$$, :dep_create)) AS flip_to_failed,
       pg_temp.try(format($$SELECT orch_command_result(%s, true, '{"deployment": "dep-other"}')$$, :dep_create)) AS other_result,
       pg_temp.try(format($$SELECT orch_command_result(%s, true)$$, :dep_create)) AS null_result,
       pg_temp.try(format($$SELECT orch_command_result(%s, true, '{"error": "unknown order"}')$$, :cancel_bad)) AS flip_to_succeeded;
SELECT c.label, v.status, v.result FROM orch_commands v JOIN cmd c USING (command_id)
 WHERE c.label IN ('dep-create', 'ord-cancel-bad') ORDER BY c.label;
-- an outcome without a result (NULL) is recorded, and is the same outcome again
SELECT * FROM pg_temp.send('dep-stop-2', 'deployment.stop', 'cmdt-dep-stop-2', '{"deployment": "dep-api"}');
SELECT command_id AS stop2 FROM cmd WHERE label = 'dep-stop-2' \gset
SELECT orch_command_result(:stop2, true) AS first, orch_command_result(:stop2, true, NULL) AS again,
       pg_temp.try(format($$SELECT orch_command_result(%s, true, '{}')$$, :stop2)) AS now_with_result;
SELECT * FROM pg_temp.send('dep-stop-2', 'deployment.stop', 'cmdt-dep-stop-2', '{"deployment": "dep-api"}');
-- its work task is still queued (the outcome came from elsewhere); the
-- adapter still gets it once
SELECT * FROM pg_temp.adapter();
SELECT c.label, v.status, v.result FROM orch_commands v JOIN cmd c USING (command_id) WHERE c.label = 'dep-stop-2';

-- ---------------------------------------------------------------------------
-- 4. The default tenant; the origin task is recorded.
-- ---------------------------------------------------------------------------
-- one command in the default tenant (tenant NULL)
SELECT * FROM pg_temp.send('default-place', 'order.place', 'cmdt-default-place-1', '{"sku": "D-1", "qty": 1}', NULL);
SELECT * FROM pg_temp.send('default-place', 'order.place', 'cmdt-default-place-1', '{"sku": "D-1", "qty": 1}', NULL);
SELECT v.tenant_id, t.tenant_id AS task_tenant, t.state FROM orch_commands v JOIN cmd c USING (command_id)
  JOIN orch.tasks t ON t.id = c.task_id WHERE c.label = 'default-place';
SELECT * FROM pg_temp.adapter();
SELECT * FROM pg_temp.send('default-place', 'order.place', 'cmdt-default-place-1', '{"sku": "D-1", "qty": 1}', NULL);
-- origin task: a workflow task that asked for the command
SELECT orch_enqueue('cmdt_origin', '{"step": "place"}', tenant => 'cmdt') AS origin \gset
SELECT * FROM pg_temp.send('ord-place-origin', 'order.place', 'cmdt-ord-place-2', '{"sku": "B-7", "qty": 1}', 'cmdt', :origin);
SELECT v.origin_task_id = :origin AS origin_recorded, v.task_id <> :origin AS work_task_is_new
  FROM orch_commands v JOIN cmd c USING (command_id) WHERE c.label = 'ord-place-origin';
SELECT * FROM pg_temp.adapter();
-- an origin task that does not exist: OR005, nothing created
SELECT pg_temp.try($$SELECT 'created' FROM orch_command('order.place', 'cmdt-ord-place-3', '{"sku": "C"}', task_id => -1, tenant => 'cmdt')$$) AS unknown_origin;
SELECT count(*) AS created FROM orch.commands WHERE idempotency_key = 'cmdt-ord-place-3';

-- ---------------------------------------------------------------------------
-- 5. Bad calls.
-- ---------------------------------------------------------------------------
SELECT pg_temp.stored() AS before_bad_calls;
SELECT pg_temp.try($$SELECT command_id FROM orch_command(NULL, 'cmdt-bad-1', '{}', tenant => 'cmdt')$$) AS null_kind,
       pg_temp.try($$SELECT command_id FROM orch_command('order.place', NULL, '{}', tenant => 'cmdt')$$) AS null_key,
       pg_temp.try($$SELECT command_id FROM orch_command('order.place', 'cmdt-bad-1', NULL, tenant => 'cmdt')$$) AS null_payload,
       pg_temp.try($$SELECT command_id FROM orch_command('', 'cmdt-bad-1', '{}', tenant => 'cmdt')$$) AS empty_kind,
       pg_temp.try($$SELECT command_id FROM orch_command('order.place', '', '{}', tenant => 'cmdt')$$) AS empty_key,
       pg_temp.try($$SELECT command_id FROM orch_command('order.place', 'cmdt-bad-1', '{}', tenant => '')$$) AS empty_tenant;
SELECT pg_temp.try($$SELECT orch_command_result(NULL, true, '{}')$$) AS null_id,
       pg_temp.try(format($$SELECT orch_command_result(%s, NULL, '{}')$$, :dep_create)) AS null_ok,
       pg_temp.try($$SELECT orch_command_result(-1, true, '{}')$$) AS unknown_id,
       pg_temp.try($$SELECT orch_command_result(9223372036854775807, false)$$) AS unknown_id_2;
SELECT pg_temp.stored() AS after_bad_calls;

-- ---------------------------------------------------------------------------
-- 6. Keys are per tenant; an adapter bound to a tenant claims only its work.
-- ---------------------------------------------------------------------------
SELECT * FROM pg_temp.send('t2-dep-create', 'deployment.create', 'cmdt-dep-create-1', '{"app": "web", "replicas": 9}', 'cmdt2');
SELECT (SELECT command_id FROM cmd WHERE label = 't2-dep-create') <> (SELECT command_id FROM cmd WHERE label = 'dep-create') AS other_command;
SELECT t.tenant_id, t.state FROM orch.tasks t JOIN cmd c ON c.task_id = t.id WHERE c.label = 't2-dep-create';
SELECT count(*) AS cmdt_adapter FROM pg_temp.adapter('cmdt');
SELECT * FROM pg_temp.adapter('cmdt2');
SELECT count(*) AS cmdt2_adapter_again FROM pg_temp.adapter('cmdt2');
SELECT c.label, v.tenant_id, v.status, v.result FROM orch_commands v JOIN cmd c USING (command_id)
 WHERE v.idempotency_key = 'cmdt-dep-create-1' ORDER BY c.label;

-- ---------------------------------------------------------------------------
-- 7. End state: every command recorded once, every work task completed.
-- ---------------------------------------------------------------------------
SELECT v.tenant_id, v.kind, v.status, count(*)
  FROM orch_commands v JOIN cmd c USING (command_id)
 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;
SELECT t.state, count(*) FROM orch.tasks t JOIN cmd c ON c.task_id = t.id GROUP BY t.state ORDER BY t.state;
SELECT count(*) AS commands, count(DISTINCT task_id) AS distinct_tasks FROM cmd;
SELECT pg_temp.stored();

-- clean up: this file's own queue
SELECT 'dropped' AS cmdt_origin FROM orch_drop_queue('cmdt_origin', force => true);
