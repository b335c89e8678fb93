-- The audit of workflow steps:
-- an approval's expiry reads as expiry, not as a decision, and a decision
-- after it (or past the run's deadline) is refused and records nothing; a
-- step whose task waits for its next attempt reads retrying; every step
-- transition, a skip included, has an event with its reason and actor.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- ev(run): the run's and its steps' events, in order (step events name the step)
CREATE FUNCTION pg_temp.ev(run bigint) RETURNS TABLE (what text, from_state text, to_state text,
                                                     reason_code text, label text)
LANGUAGE sql AS $$
    SELECT CASE entity WHEN 'run' THEN 'run' ELSE note END, from_state, to_state, reason_code, label
      FROM orch_events WHERE run_id = run AND entity IN ('run', 'run_step') ORDER BY event_id
$$;
-- n_audit(run): how many events and approvals the run has
CREATE FUNCTION pg_temp.n_audit(run bigint) RETURNS text LANGUAGE sql AS $$
    SELECT (SELECT count(*) FROM orch.history WHERE run_id = run) || ' events, ' ||
           (SELECT count(*) FROM orch.approvals WHERE run_id = run) || ' approvals'
$$;
-- err(sql): the error it raised: SQLSTATE, message (run ids masked), detail, hint
CREATE FUNCTION pg_temp.err(q text) RETURNS TABLE (sqlstate text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
DECLARE st text; m text; d text; h text;
BEGIN
    EXECUTE q;
    RETURN QUERY SELECT 'ok', NULL::text, NULL::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    RETURN QUERY SELECT st, regexp_replace(m, 'run \d+', 'run N'), d, h;
END $$;
-- complete1(queue): claim one task and complete it; fail1(queue, class): fail it
CREATE FUNCTION pg_temp.complete1(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'audit-worker');
    IF c.task_id IS NULL THEN RETURN '(nothing)'; END IF;
    PERFORM orch_complete(c.task_id, c.lease_token, '{"ok": true}');
    RETURN c.step_key;
END $$;
CREATE FUNCTION pg_temp.fail1(q text, cls text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record; s text;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'audit-worker');
    IF c.task_id IS NULL THEN RETURN '(nothing)'; END IF;
    SELECT f.state INTO s FROM orch_fail(c.task_id, c.lease_token, cls, 'failed: ' || cls) f;
    RETURN coalesce(c.step_key, 'task') || ':' || s;
END $$;

-- ---------------------------------------------------------------------------
-- 1. Item 3: an approval that expires is audited as an expiry.
--    build -> gate (human_approval, 1 hour, on_timeout: escalate) -> deploy
-- ---------------------------------------------------------------------------
SELECT orch_define('au_gate', '{"steps": [
    {"step_id": "build", "queue": "au_q", "handler": "build"},
    {"step_id": "gate", "type": "human_approval", "depends_on": ["build"], "timeout": "1 hour",
     "on_timeout": "escalate"},
    {"step_id": "deploy", "queue": "au_q", "handler": "deploy", "depends_on": ["gate"]},
    {"step_id": "escalate", "queue": "au_q", "handler": "escalate"}]}') AS version;
SELECT orch_publish('au_gate', 1) IS NOT NULL AS published;

-- a: expired by the maintenance pass
SELECT orch_start('au_gate', '{}') AS e1 \gset
SELECT pg_temp.complete1('au_q');
SELECT pg_temp.run_st(:e1);
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :e1 AND step_id = 'gate';
-- before the pass: the approval's time is up, so it is refused (OR009) and
-- records nothing (the same for a rejection)
SELECT pg_temp.n_audit(:e1) AS before;
SELECT pg_temp.try(format($$SELECT orch_approve(%s, 'gate', 'AU-1', 'alice', 'late')$$, :e1)) AS approve_expired;
SELECT pg_temp.try(format($$SELECT orch_reject(%s, 'gate', 'AU-2', 'alice', 'late')$$, :e1)) AS reject_expired;
SELECT pg_temp.n_audit(:e1) AS after, pg_temp.run_st(:e1);
SELECT * FROM pg_temp.err(format($$SELECT orch_approve(%s, 'gate', 'AU-1', 'alice')$$, :e1));
SELECT action, count FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:e1);
-- the gate timed out with reason approval_expired, labelled with the
-- maintenance pass (orchestrator); the run left waiting_approval for the
-- same reason (not approval_decided); deploy was skipped as a dependant
SELECT * FROM pg_temp.ev(:e1);
SELECT error FROM orch_run_steps WHERE run_id = :e1 AND step_id = 'gate';
-- after the pass: still refused, still nothing recorded
SELECT pg_temp.n_audit(:e1) AS before;
SELECT pg_temp.try(format($$SELECT orch_approve(%s, 'gate', 'AU-3', 'alice')$$, :e1)) AS approve_after_pass;
SELECT pg_temp.n_audit(:e1) AS after;
-- the approval request: expiry and its events in orch_run_status too
SELECT e ->> 'to_state' AS to_state, e ->> 'reason_code' AS reason_code, e ->> 'label' AS label
  FROM jsonb_array_elements(orch_run_status(:e1) -> 'events') e
 WHERE e ->> 'entity' = 'run_step' AND e ->> 'note' = 'gate';
SELECT jsonb_array_length(orch_run_status(:e1) -> 'approvals') AS approvals;

-- b: two gates in parallel; a human approves one while the other's time is
--    up: the other's expiry is the maintenance pass's, not alice's
SELECT orch_define('au_two', '{"steps": [
    {"step_id": "g1", "type": "human_approval", "timeout": "1 hour", "on_timeout": "late"},
    {"step_id": "g2", "type": "human_approval", "timeout": "1 hour", "on_timeout": "late"},
    {"step_id": "late", "queue": "au_q", "handler": "late", "join": "any"}]}') AS version;
SELECT orch_publish('au_two', 1) IS NOT NULL AS published;
SELECT orch_start('au_two', '{}') AS e2 \gset
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :e2 AND step_id = 'g2';
SELECT orch_approve(:e2, 'g1', 'AU-10', 'alice', 'fine');
SELECT pg_temp.run_st(:e2);
SELECT * FROM pg_temp.ev(:e2);

-- c: past the run's deadline an approval is refused (OR009) and records
--    nothing, even before maintenance fails the run
SELECT orch_define('au_deadline', '{"policies": {"deadline": "1 hour"}, "steps": [
    {"step_id": "gate", "type": "human_approval"},
    {"step_id": "after", "queue": "au_q", "handler": "after", "depends_on": ["gate"]}]}') AS version;
SELECT orch_publish('au_deadline', 1) IS NOT NULL AS published;
SELECT orch_start('au_deadline', '{}') AS e3 \gset
UPDATE orch.runs SET deadline_at = now() - interval '1 second' WHERE id = :e3;
SELECT pg_temp.n_audit(:e3) AS before;
SELECT pg_temp.try(format($$SELECT orch_approve(%s, 'gate', 'AU-20', 'bob')$$, :e3)) AS approve_past_deadline;
SELECT pg_temp.try(format($$SELECT orch_reject(%s, 'gate', 'AU-21', 'bob')$$, :e3)) AS reject_past_deadline;
SELECT pg_temp.n_audit(:e3) AS after, pg_temp.run_st(:e3);
SELECT * FROM pg_temp.err(format($$SELECT orch_approve(%s, 'gate', 'AU-20', 'bob')$$, :e3));
-- the reference was not consumed: another run may still use it
SELECT count(*) AS approvals_with_ref FROM orch.approvals WHERE approval_ref = 'AU-20';
SELECT action, count FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:e3);
SELECT * FROM pg_temp.ev(:e3);

-- ---------------------------------------------------------------------------
-- 2. Item 6: retrying while the step's task waits for its next attempt;
--    running again when it is claimed; timed_out when its timeout fires.
-- ---------------------------------------------------------------------------
SELECT orch_define('au_retry', '{"steps": [
    {"step_id": "call", "queue": "au_r", "handler": "call",
     "retry_policy": {"max_attempts": 3, "backoff": "fixed", "initial_delay": "1 hour"}},
    {"step_id": "after", "queue": "au_r", "handler": "after", "depends_on": ["call"]}]}') AS version;
SELECT orch_publish('au_retry', 1) IS NOT NULL AS published;
SELECT orch_start('au_retry', '{}') AS r1 \gset
SELECT pg_temp.fail1('au_r', 'TRANSIENT');
SELECT pg_temp.run_st(:r1);
SELECT state, retry_at IS NOT NULL AS retry_wait FROM orch_tasks WHERE run_id = :r1;
-- due: the claim takes it again and the step runs again
UPDATE orch.tasks SET retry_at = now() - interval '1 second' WHERE run_id = :r1 AND state = 'awaiting_tool';
CREATE TEMP TABLE au_claim AS SELECT task_id, lease_token, step_key FROM orch_dequeue('au_r', 'audit-worker');
SELECT step_key FROM au_claim;
SELECT pg_temp.run_st(:r1);
-- its lease expires: maintenance recovers it into a retry wait (retrying, by orchestrator)
UPDATE orch.tasks SET lease_expires_at = now() - interval '1 second' WHERE id = (SELECT task_id FROM au_claim);
SELECT action, count FROM orch_maintain() WHERE action = 'leases_recovered';
SELECT pg_temp.run_st(:r1);
UPDATE orch.tasks SET retry_at = now() - interval '1 second' WHERE run_id = :r1 AND state = 'awaiting_tool';
SELECT pg_temp.complete1('au_r') AS completed, pg_temp.run_st(:r1);
SELECT * FROM pg_temp.ev(:r1);
-- in orch_run_status
SELECT e ->> 'to_state' AS to_state, e ->> 'reason_code' AS reason_code
  FROM jsonb_array_elements(orch_run_status(:r1) -> 'events') e
 WHERE e ->> 'entity' = 'run_step' AND e ->> 'note' = 'call';
-- a tool wait (awaiting_tool without retry_at) is not a retry: still running
SELECT orch_define('au_tool', '{"steps": [
    {"step_id": "call", "queue": "au_t", "handler": "call",
     "retry_policy": {"max_attempts": 3, "backoff": "fixed", "initial_delay": "1 hour"}}]}') AS version;
SELECT orch_publish('au_tool', 1) IS NOT NULL AS published;
SELECT orch_start('au_tool', '{}') AS r2 \gset
DELETE FROM au_claim;
INSERT INTO au_claim SELECT task_id, lease_token, step_key FROM orch_dequeue('au_t', 'audit-worker');
SELECT orch_await_tool(task_id, lease_token, 'tool', '{}') FROM au_claim;
SELECT pg_temp.run_st(:r2);
SELECT orch_resume(task_id, '{}') FROM au_claim;
SELECT pg_temp.fail1('au_t', 'TRANSIENT');
SELECT pg_temp.run_st(:r2);
-- from retrying the step fails for good (its task is cancelled while it
-- waits) and, with nothing to handle it, the run fails
SELECT orch_cancel((SELECT task_id FROM au_claim), 'given up');
SELECT pg_temp.run_st(:r2);
SELECT * FROM pg_temp.ev(:r2);
-- a retrying step whose timeout passes times out and follows on_timeout
SELECT orch_define('au_retry_to', '{"steps": [
    {"step_id": "call", "queue": "au_rt", "handler": "call", "timeout": "1 hour", "on_timeout": "fallback",
     "retry_policy": {"max_attempts": 3, "backoff": "fixed", "initial_delay": "1 hour"}},
    {"step_id": "fallback", "queue": "au_rt", "handler": "fallback"}]}') AS version;
SELECT orch_publish('au_retry_to', 1) IS NOT NULL AS published;
SELECT orch_start('au_retry_to', '{}') AS r3 \gset
SELECT pg_temp.fail1('au_rt', 'TRANSIENT');
SELECT pg_temp.run_st(:r3);
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :r3 AND step_id = 'call';
SELECT action, count FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:r3);
SELECT * FROM pg_temp.ev(:r3);
SELECT step_key, state, reason_code FROM orch_tasks WHERE run_id = :r3 ORDER BY task_id;
-- a plain task (no run) retries as before
SELECT orch_enqueue('au_p', '{"plain": true}', retry_policy => '{"initial_delay": "1 hour"}') AS p1 \gset
SELECT pg_temp.fail1('au_p', 'TRANSIENT');
SELECT state, reason_code, retry_at IS NOT NULL AS retry_wait FROM orch_tasks WHERE task_id = :p1;

-- ---------------------------------------------------------------------------
-- 3. Item 2: a step that ends without running leaves an event saying why.
-- ---------------------------------------------------------------------------
-- a decision chooses one target: the other is skipped, branch_not_taken;
-- a route (on_failure) not taken: route_not_taken; its dependant:
-- dependency_skipped
SELECT orch_define('au_skip', '{"steps": [
    {"step_id": "pick", "type": "decision", "targets": ["left", "right"], "default": "left"},
    {"step_id": "left", "queue": "au_s", "handler": "left", "on_failure": "repair"},
    {"step_id": "right", "queue": "au_s", "handler": "right"},
    {"step_id": "after_right", "queue": "au_s", "handler": "after_right", "depends_on": ["right"]},
    {"step_id": "repair", "queue": "au_s", "handler": "repair"}]}') AS version;
SELECT orch_publish('au_skip', 1) IS NOT NULL AS published;
SELECT orch_start('au_skip', '{}') AS s1 \gset
SELECT pg_temp.complete1('au_s');
SELECT pg_temp.run_st(:s1);
SELECT * FROM pg_temp.ev(:s1);
-- a dependency failed: dependency_failed (its failure handled by on_failure)
SELECT orch_define('au_dep', '{"steps": [
    {"step_id": "a", "queue": "au_s", "handler": "a", "retry_policy": {"max_attempts": 1},
     "on_failure": "report"},
    {"step_id": "b", "queue": "au_s", "handler": "b", "depends_on": ["a"]},
    {"step_id": "report", "queue": "au_s", "handler": "report"}]}') AS version;
SELECT orch_publish('au_dep', 1) IS NOT NULL AS published;
SELECT orch_start('au_dep', '{}') AS s2 \gset
SELECT pg_temp.fail1('au_s', 'NON_RETRYABLE');
SELECT pg_temp.complete1('au_s');
SELECT pg_temp.run_st(:s2);
SELECT what, from_state, to_state, reason_code FROM pg_temp.ev(:s2) WHERE what <> 'run';
-- the run is canceled: pending steps skipped, running ones canceled, each
-- with run_canceled and the caller's reason as note
SELECT orch_define('au_cancel', '{"steps": [
    {"step_id": "one", "queue": "au_c", "handler": "one"},
    {"step_id": "two", "queue": "au_c", "handler": "two", "depends_on": ["one"]},
    {"step_id": "three", "queue": "au_c", "handler": "three", "depends_on": ["two"]}]}') AS version;
SELECT orch_publish('au_cancel', 1) IS NOT NULL AS published;
SELECT orch_start('au_cancel', '{}') AS s3 \gset
SELECT orch_cancel_run(:s3, 'customer withdrew');
SELECT pg_temp.run_st(:s3);
SELECT note, from_state, to_state, reason_code, actor = current_user AS by_caller
  FROM orch_events WHERE run_id = :s3 AND entity = 'run_step' ORDER BY event_id;
-- the run fails (a step failed with nothing to handle it): open steps stop
-- with run_failed (the failed step's own event says step_failed)
SELECT orch_start('au_cancel', '{}') AS s4 \gset
SELECT pg_temp.fail1('au_c', 'NON_RETRYABLE');
SELECT pg_temp.run_st(:s4);
SELECT what, from_state, to_state, reason_code FROM pg_temp.ev(:s4) WHERE what <> 'run';
-- a paused run: a step that became ready has its event (step_ready); it
-- starts on resume
SELECT orch_start('au_cancel', '{}') AS s5 \gset
DELETE FROM au_claim;
INSERT INTO au_claim SELECT task_id, lease_token, step_key FROM orch_dequeue('au_c', 'audit-worker');
SELECT orch_pause_run(:s5);
SELECT orch_complete(task_id, lease_token, '{}') FROM au_claim;
SELECT pg_temp.run_st(:s5);
SELECT orch_resume_run(:s5);
SELECT pg_temp.run_st(:s5);
SELECT what, from_state, to_state, reason_code FROM pg_temp.ev(:s5) WHERE what = 'two';

-- ---------------------------------------------------------------------------
-- 4. Item 1: a human_approval step is backed by a task in
--    awaiting_user_confirmation, which the step's outcome
--    settles; orch_confirm and orch_cancel refuse it (OR009).
-- ---------------------------------------------------------------------------
-- at(task): the task's state, reason, attempts and label of its last event
CREATE FUNCTION pg_temp.at(task bigint) RETURNS text LANGUAGE sql AS $$
    SELECT t.queue || ' ' || t.state || '/' || t.reason_code || ' attempts=' || t.attempts ||
           ' key=' || t.step_key
      FROM orch.tasks t WHERE t.id = task
$$;
-- tev(task): the task's events in order
CREATE FUNCTION pg_temp.tev(task bigint) RETURNS TABLE (from_state text, to_state text, reason_code text,
                                                       label text, attempt int)
LANGUAGE sql AS $$
    SELECT from_state, to_state, reason_code, label, attempt FROM orch_events
     WHERE task_id = task ORDER BY event_id
$$;
SELECT orch_define('au_appr', '{"policies": {"queue": "au_ap"}, "steps": [
    {"step_id": "gate", "type": "human_approval", "description": "ship it?", "timeout": "1 hour"},
    {"step_id": "after", "handler": "after", "depends_on": ["gate"]}]}') AS version;
SELECT orch_publish('au_appr', 1) IS NOT NULL AS published;

-- a: the step waits in its task: in the run policy's queue, claimed by the
--    orchestrator and handed to a human (one attempt), never claimable
SELECT orch_start('au_appr', '{}', tenant => 'au_ten') AS a1 \gset
SELECT id AS a1t FROM orch.tasks WHERE run_id = :a1 AND step_key = 'gate:approval' \gset
SELECT pg_temp.run_st(:a1), pg_temp.at(:a1t);
SELECT tenant_id, payload - 'run_id' AS payload, (payload ->> 'run_id')::bigint = :a1 AS payload_run,
       wait_data ->> 'decide' = format('SELECT orch_approve(%s, ''gate'', <approval_ref>) or orch_reject(...)', :a1) AS prompt,
       lease_owner
  FROM orch.tasks WHERE id = :a1t;
SELECT task_id = :a1t AS step_names_its_task FROM orch.run_steps WHERE run_id = :a1 AND step_id = 'gate';
SELECT * FROM pg_temp.tev(:a1t);
SELECT attempt, worker, outcome FROM orch.attempts WHERE task_id = :a1t ORDER BY id;
SELECT count(*) AS claimed FROM orch_dequeue('au_ap', 'audit-worker', tenant => 'au_ten');
-- where people find work waiting for a human: the queue's awaiting figure,
-- and the review queue, once (as the approval, naming its task)
SELECT tenant_id, queue, awaiting_user_confirmation FROM orch_queue_stats WHERE queue = 'au_ap' AND tenant_id = 'au_ten';
SELECT kind, task_id = :a1t AS its_task, step_id, regexp_replace(action, '\d+', 'N') AS action
  FROM orch_review_queue WHERE run_id = :a1;
-- orch_run_status lists it under its step
SELECT t ->> 'step_key' AS step_key, t ->> 'state' AS state
  FROM jsonb_array_elements(orch_run_status(:a1) -> 'steps') s, jsonb_array_elements(s -> 'tasks') t
 WHERE s ->> 'step_id' = 'gate';

-- b: confirming or cancelling the task itself is refused (OR009) and
--    changes nothing; the hint names the calls that decide it
SELECT sqlstate, regexp_replace(message, 'task \d+', 'task N') AS message, regexp_replace(hint, '\d+', 'N', 'g') AS hint
  FROM pg_temp.err(format('SELECT orch_confirm(%s, true)', :a1t));
SELECT sqlstate FROM pg_temp.err(format('SELECT orch_confirm(%s, false, ''bob'')', :a1t));
SELECT sqlstate, regexp_replace(message, 'task \d+', 'task N') AS message
  FROM pg_temp.err(format('SELECT orch_cancel(%s)', :a1t));
SELECT pg_temp.at(:a1t), (SELECT count(*) FROM orch.history WHERE task_id = :a1t) AS events;

-- c: approved: the approver takes the task (a second attempt) and completes
--    it with the decision as its result; the run goes on
SELECT orch_approve(:a1, 'gate', 'AU-40', 'alice', 'ship');
SELECT pg_temp.run_st(:a1), pg_temp.at(:a1t);
SELECT result - 'actor' AS result, result ->> 'actor' = current_user AS by_caller FROM orch.tasks WHERE id = :a1t;
SELECT * FROM pg_temp.tev(:a1t);
SELECT attempt, worker = 'orchestrator' AS by_orchestrator, outcome FROM orch.attempts WHERE task_id = :a1t ORDER BY id;
SELECT count(*) AS in_review FROM orch_review_queue WHERE run_id = :a1;
-- the same decision again changes nothing; the task is terminal
SELECT orch_approve(:a1, 'gate', 'AU-40', 'alice', 'ship');
SELECT sqlstate FROM pg_temp.err(format('SELECT orch_confirm(%s, true)', :a1t));
-- its history reads like any task's
SELECT state, attempts, reason_code FROM orch_status(:a1t);
SELECT count(*) AS history_rows FROM orch_history(:a1t);

-- d: rejected: the task fails as a rejected confirmation; a rejection is
--    neither a dead letter nor re-drivable
SELECT orch_start('au_appr', '{}') AS a2 \gset
SELECT id AS a2t FROM orch.tasks WHERE run_id = :a2 AND step_key = 'gate:approval' \gset
SELECT orch_reject(:a2, 'gate', 'AU-41', 'bob', 'not today');
SELECT pg_temp.run_st(:a2), pg_temp.at(:a2t);
SELECT last_error, resume_data ->> 'approval_ref' AS ref FROM orch.tasks WHERE id = :a2t;
SELECT from_state, to_state, reason_code, label FROM pg_temp.tev(:a2t) WHERE to_state = 'failed';
SELECT count(*) AS dead_letters FROM orch_dead_letters WHERE task_id = :a2t;
SELECT sqlstate FROM pg_temp.err(format('SELECT orch_retry(%s)', :a2t));

-- e: expired: the task is cancelled with approval_expired, by the
--    maintenance pass
SELECT orch_start('au_appr', '{}') AS a3 \gset
SELECT id AS a3t FROM orch.tasks WHERE run_id = :a3 AND step_key = 'gate:approval' \gset
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :a3 AND step_id = 'gate';
SELECT action, count FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:a3), pg_temp.at(:a3t);
SELECT from_state, to_state, reason_code, label FROM pg_temp.tev(:a3t) WHERE to_state = 'cancelled';

-- f: the run canceled, or failed past its deadline: the task is cancelled
--    with the run's reason
SELECT orch_start('au_appr', '{}') AS a4 \gset
SELECT orch_cancel_run(:a4, 'withdrawn');
SELECT pg_temp.at(id) FROM orch.tasks WHERE run_id = :a4;
SELECT orch_start('au_appr', '{}') AS a5 \gset
UPDATE orch.runs SET deadline_at = now() - interval '1 second' WHERE id = :a5;
SELECT action, count FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.run_st(:a5), pg_temp.at(id) FROM orch.tasks WHERE run_id = :a5;
-- nothing of these runs is left open, nor in the review queue as a task
SELECT count(*) AS open_tasks FROM orch.tasks
 WHERE run_id IN (:a1, :a2, :a3, :a4, :a5) AND state NOT IN ('completed', 'failed', 'cancelled')
   AND step_key LIKE '%:approval';
SELECT count(*) AS confirmations FROM orch_review_queue WHERE kind = 'awaiting_confirmation' AND queue = 'au_ap';

-- g: the step's own queue comes first; with no queue named anywhere the
--    task goes to queue "approvals"
SELECT orch_define('au_noq', '{"steps": [{"step_id": "gate", "type": "human_approval"},
    {"step_id": "gate2", "type": "human_approval", "queue": "au_finance"}]}') AS version;
SELECT orch_publish('au_noq', 1) IS NOT NULL AS published;
SELECT orch_start('au_noq', '{}') AS a6 \gset
SELECT pg_temp.at(id) FROM orch.tasks WHERE run_id = :a6 ORDER BY id;
SELECT orch_cancel_run(:a6);

-- h: a compensation that waits for an approval (compensation.mode =
--    "approval") is backed by a task too ("step:compensate:approval"),
--    settled the same way
SELECT orch_define('au_comp', '{"policies": {"queue": "au_cp"}, "steps": [
    {"step_id": "book", "handler": "book", "compensation": {"handler": "unbook", "mode": "approval"}},
    {"step_id": "pay", "handler": "pay", "depends_on": ["book"]}]}') AS version;
SELECT orch_publish('au_comp', 1) IS NOT NULL AS published;
SELECT orch_start('au_comp', '{}') AS a7 \gset
SELECT pg_temp.complete1('au_cp');
SELECT pg_temp.fail1('au_cp', 'NON_RETRYABLE');
SELECT pg_temp.run_st(:a7);
SELECT id AS a7t FROM orch.tasks WHERE run_id = :a7 AND step_key = 'book:compensate:approval' \gset
SELECT pg_temp.at(:a7t);
SELECT kind, task_id = :a7t AS its_task, step_id FROM orch_review_queue WHERE run_id = :a7;
SELECT sqlstate FROM pg_temp.err(format('SELECT orch_confirm(%s, true)', :a7t));
SELECT orch_approve(:a7, 'book', 'AU-50', 'carol', 'undo it');
SELECT pg_temp.at(id) FROM orch.tasks WHERE run_id = :a7 AND step_key LIKE 'book:%' ORDER BY id;
SELECT pg_temp.complete1('au_cp') AS compensated;
SELECT pg_temp.run_st(:a7);
-- rejected: the compensation is not run, the run fails for review
SELECT orch_start('au_comp', '{}') AS a8 \gset
SELECT pg_temp.complete1('au_cp');
SELECT pg_temp.fail1('au_cp', 'NON_RETRYABLE');
SELECT orch_reject(:a8, 'book', 'AU-51', 'carol', 'leave it');
SELECT pg_temp.run_st(:a8), pg_temp.at(id) FROM orch.tasks WHERE run_id = :a8 AND step_key LIKE 'book:%';

-- i: another step's failure fails the run: the waiting gate's task is
--    cancelled with run_failed, as the gate's own event reads
SELECT orch_define('au_rf', '{"policies": {"queue": "au_rf"}, "steps": [
    {"step_id": "gate", "type": "human_approval"},
    {"step_id": "work", "handler": "work"}]}') AS version;
SELECT orch_publish('au_rf', 1) IS NOT NULL AS published;
SELECT orch_start('au_rf', '{}') AS a9 \gset
SELECT pg_temp.fail1('au_rf', 'NON_RETRYABLE');
SELECT pg_temp.run_st(:a9), pg_temp.at(id) FROM orch.tasks WHERE run_id = :a9 AND step_key = 'gate:approval';
SELECT what, to_state, reason_code FROM pg_temp.ev(:a9) WHERE what = 'gate';

-- j: dropping the queue an approval waits in neither counts nor cancels its
--    task (it is never claimed from there; it ends with its gate)
SELECT orch_define('au_dq', '{"policies": {"queue": "au_dq"}, "steps": [
    {"step_id": "gate", "type": "human_approval"}]}') AS version;
SELECT orch_publish('au_dq', 1) IS NOT NULL AS published;
SELECT orch_start('au_dq', '{}') AS a10 \gset
SELECT orch_drop_queue('au_dq');
SELECT count(*) AS queue_left FROM orch.queues WHERE name = 'au_dq';
SELECT pg_temp.at(id) FROM orch.tasks WHERE run_id = :a10;
SELECT orch_approve(:a10, 'gate', 'AU-60', 'dana');
SELECT pg_temp.run_st(:a10), pg_temp.at(id) FROM orch.tasks WHERE run_id = :a10;
