-- Workflow runs: start, progression, joins, edges,
-- decisions, approvals, waits, map, pause/resume with drift check, cancel,
-- compensation, deadlines, retry_run, run status, the run lifecycle.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- work(queue, result): claim one task of the queue and complete it; its step key
CREATE FUNCTION pg_temp.work(q text, res jsonb DEFAULT '{}') RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'wf-worker');
    IF c.task_id IS NULL THEN RETURN '(nothing)'; END IF;
    PERFORM orch_complete(c.task_id, c.lease_token, res);
    RETURN c.step_key;
END $$;
-- work_all(queue): complete every claimable task, one at a time; their step keys
CREATE FUNCTION pg_temp.work_all(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record; done text[] := '{}';
BEGIN
    LOOP
        SELECT * INTO c FROM orch_dequeue(q, 'wf-worker');
        EXIT WHEN c.task_id IS NULL;
        PERFORM orch_complete(c.task_id, c.lease_token,
                              jsonb_build_object('by', c.step_key, 'item', c.payload -> 'item'));
        done := done || c.step_key;
    END LOOP;
    RETURN array_to_string(done, ' ');
END $$;
-- fail1(queue, class): claim one task and fail it with the class
CREATE FUNCTION pg_temp.fail1(q text, cls text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record; s text;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'wf-worker');
    IF c.task_id IS NULL THEN RETURN '(nothing)'; END IF;
    SELECT f.state INTO s FROM orch_fail(c.task_id, c.lease_token, cls, 'failed: ' || cls) f;
    RETURN c.step_key || ':' || s;
END $$;
-- st(run): the run's state and its steps' states
CREATE FUNCTION pg_temp.st(run bigint) RETURNS text LANGUAGE sql AS $$
    SELECT (SELECT state || CASE WHEN phase = 'compensating' THEN '(compensating)' ELSE '' END
                   || coalesce('/' || reason_code, '') FROM orch.runs WHERE id = run) || ': ' ||
           string_agg(step_id || '=' || state || coalesce('+' || comp_state, ''), ' ' ORDER BY ord)
      FROM orch.run_steps WHERE run_id = run
$$;

-- ---------------------------------------------------------------------------
-- 1. A linear run: each step's task is enqueued in the transaction that
--    completes the previous one; the run succeeds with every output.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_linear', '{"steps": [
    {"step_id": "fetch", "queue": "wf_q", "handler": "fetch"},
    {"step_id": "parse", "queue": "wf_q", "handler": "parse", "depends_on": ["fetch"]},
    {"step_id": "store", "queue": "wf_q", "handler": "store", "depends_on": ["parse"]}]}') AS version;
SELECT orch_publish('wf_linear', 1) IS NOT NULL AS published;
SELECT orch_start('wf_linear', '{"url": "https://example.com"}') AS lin \gset
SELECT pg_temp.st(:lin);
SELECT payload FROM orch_tasks WHERE run_id = :lin;
SELECT pg_temp.work('wf_q', '{"bytes": 10}');
-- the next step was enqueued by that same completion, with the outputs it depends on
SELECT pg_temp.st(:lin), (SELECT payload -> 'deps' FROM orch_tasks WHERE run_id = :lin AND step_key = 'parse') AS deps;
SELECT pg_temp.work('wf_q', '{"rows": 3}'), pg_temp.work('wf_q', '{"stored": true}');
SELECT pg_temp.st(:lin), output FROM orch_runs WHERE run_id = :lin;
-- the run's events: its own transitions and its steps'
SELECT entity, from_state, to_state, reason_code, note FROM orch_events
 WHERE run_id = :lin AND entity IN ('run', 'run_step') ORDER BY event_id;
-- a publish never changes a run in flight: it pinned version 1 and its hash
SELECT orch_define('wf_linear', '{"steps": [{"step_id": "only", "queue": "wf_q", "handler": "x"}]}') AS v2;
SELECT orch_publish('wf_linear', 2) IS NOT NULL AS published;
SELECT version, pins ->> 'version' AS pinned_version,
       content_hash = (SELECT content_hash FROM orch_definition('wf_linear', 1)) AS pinned_hash
  FROM orch_runs WHERE run_id = :lin;
SELECT orch_start('wf_linear', '{}') AS latest \gset
SELECT orch_start('wf_linear', '{}', version => 1) AS pinned1 \gset
SELECT run_id = :latest AS latest_run, version FROM orch_runs WHERE run_id IN (:latest, :pinned1) ORDER BY run_id;
SELECT pg_temp.work_all('wf_q') IS NOT NULL AS drained;

-- ---------------------------------------------------------------------------
-- 2. orch_start: errors, idempotency, input schema.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_schema', '{"steps": [{"step_id": "a", "queue": "wf_q", "handler": "a"}],
    "input_schema": {"required": ["order_id"], "properties": {"order_id": {"type": "integer"}, "note": {"type": "string"}}}}');
SELECT pg_temp.try($$SELECT orch_start('wf_schema', '{}')$$) AS unpublished;
SELECT orch_publish('wf_schema', 1) IS NOT NULL AS published;
SELECT pg_temp.try($$SELECT orch_start('wf_nope', '{}')$$) AS unknown,
       pg_temp.try($$SELECT orch_start('wf_schema', '{"order_id": 1}', version => 9)$$) AS unknown_version,
       pg_temp.try($$SELECT orch_start(NULL, '{}')$$) AS null_name,
       pg_temp.try($$SELECT orch_start('wf_schema', NULL)$$) AS null_input;
\set VERBOSITY default
SELECT orch_start('wf_schema', '{"note": "x"}');
SELECT orch_start('wf_schema', '{"order_id": 1.5}');
SELECT orch_start('wf_schema', '[1]');
\set VERBOSITY terse
SELECT orch_start('wf_schema', '{"order_id": 7}', idempotency_key => 'order-7') AS idem \gset
SELECT orch_start('wf_schema', '{"order_id": 7}', idempotency_key => 'order-7') = :idem AS same_run;
SELECT pg_temp.try($$SELECT orch_start('wf_schema', '{"order_id": 8}', idempotency_key => 'order-7')$$) AS other_input;
SELECT count(*) AS runs_with_key FROM orch_runs WHERE idempotency_key = 'order-7';
SELECT pg_temp.work_all('wf_q') IS NOT NULL AS drained;

-- ---------------------------------------------------------------------------
-- 3. Fan-out and joins: all_succeeded (default), all_finished, any.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_fan', '{"steps": [
    {"step_id": "start", "queue": "wf_fan", "handler": "s"},
    {"step_id": "b1", "queue": "wf_fan", "handler": "b", "depends_on": ["start"]},
    {"step_id": "b2", "queue": "wf_fan", "handler": "b", "depends_on": ["start"]},
    {"step_id": "b3", "queue": "wf_fan", "handler": "b", "depends_on": ["start"],
     "retry_policy": {"max_attempts": 1}},
    {"step_id": "all_ok", "queue": "wf_fan", "handler": "j", "depends_on": ["b1", "b2", "b3"]},
    {"step_id": "all_done", "queue": "wf_fan", "handler": "j", "depends_on": ["b1", "b2", "b3"], "join": "all_finished"},
    {"step_id": "first", "queue": "wf_fan", "handler": "j", "depends_on": ["b1", "b2", "b3"], "join": "any"}]}');
SELECT orch_publish('wf_fan', 1) IS NOT NULL AS published;
SELECT orch_start('wf_fan', '{}') AS fan \gset
SELECT pg_temp.work('wf_fan');
SELECT pg_temp.st(:fan);
-- one branch fails for good: "all_ok" (all_succeeded) is skipped, the others wait
SELECT pg_temp.fail1('wf_fan', 'NON_RETRYABLE') LIKE 'b%:failed' AS one_branch_failed;
SELECT pg_temp.st(:fan);
SELECT pg_temp.work_all('wf_fan') AS completed;
SELECT pg_temp.st(:fan);
SELECT pg_temp.work_all('wf_fan') AS completed;
-- the failed branch was handled by the joins that accept it: the run succeeds
SELECT pg_temp.st(:fan);

-- ---------------------------------------------------------------------------
-- 4. Edges: on_success / on_failure; a failure without a handler fails the run.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_edges', '{"steps": [
    {"step_id": "charge", "queue": "wf_e", "handler": "charge", "on_failure": "refund_note",
     "retry_policy": {"max_attempts": 1}},
    {"step_id": "ship", "queue": "wf_e", "handler": "ship", "depends_on": ["charge"]},
    {"step_id": "refund_note", "queue": "wf_e", "handler": "note"}]}');
SELECT orch_publish('wf_edges', 1) IS NOT NULL AS published;
SELECT orch_start('wf_edges', '{}') AS e1 \gset
SELECT pg_temp.st(:e1);
SELECT pg_temp.fail1('wf_e', 'TRANSIENT') AS failed;
SELECT pg_temp.st(:e1);
SELECT pg_temp.work('wf_e');
SELECT pg_temp.st(:e1);
SELECT orch_start('wf_edges', '{}') AS e2 \gset
SELECT pg_temp.work('wf_e'), pg_temp.work('wf_e');
SELECT pg_temp.st(:e2);
SELECT orch_define('wf_unhandled', '{"steps": [
    {"step_id": "a", "queue": "wf_u", "handler": "a", "retry_policy": {"max_attempts": 1}},
    {"step_id": "b", "queue": "wf_u", "handler": "b", "depends_on": ["a"]}]}');
SELECT orch_publish('wf_unhandled', 1) IS NOT NULL AS published;
SELECT orch_start('wf_unhandled', '{}') AS u1 \gset
SELECT pg_temp.fail1('wf_u', 'TRANSIENT');
SELECT pg_temp.st(:u1), failed_step, error FROM orch_runs WHERE run_id = :u1;

-- ---------------------------------------------------------------------------
-- 5. Decisions: rules on the run's context, a handler's result, declared
--    targets only.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_decide', '{"steps": [
    {"step_id": "score", "queue": "wf_d", "handler": "score"},
    {"step_id": "route", "type": "decision", "depends_on": ["score"], "targets": ["approve", "review"],
     "rules": [{"when": {"path": "$.steps.score.output.value", "op": "ge", "value": 80}, "then": "approve"}],
     "default": "review"},
    {"step_id": "approve", "queue": "wf_d", "handler": "approve"},
    {"step_id": "review", "queue": "wf_d", "handler": "review"}]}');
SELECT orch_publish('wf_decide', 1) IS NOT NULL AS published;
SELECT orch_start('wf_decide', '{}') AS d1 \gset
SELECT pg_temp.work('wf_d', '{"value": 91}');
SELECT pg_temp.st(:d1), (SELECT output FROM orch_run_steps WHERE run_id = :d1 AND step_id = 'route') AS route;
SELECT pg_temp.work('wf_d') AS chosen_step;
SELECT orch_start('wf_decide', '{}') AS d2 \gset
SELECT pg_temp.work('wf_d', '{"value": 12}') AS score_step;
SELECT pg_temp.st(:d2);
SELECT pg_temp.work_all('wf_d') AS completed;
SELECT pg_temp.st(:d1) AS d1, pg_temp.st(:d2) AS d2;
-- a decision with a handler: rules on $.result; handler only: {"next": target}
SELECT orch_define('wf_decide_h', '{"steps": [
    {"step_id": "route", "type": "decision", "queue": "wf_dh", "handler": "classify", "targets": ["big", "small"],
     "rules": [{"when": {"path": "$.result.size", "op": "in", "value": ["L", "XL"]}, "then": "big"}],
     "default": "small"},
    {"step_id": "big", "queue": "wf_dh", "handler": "big"},
    {"step_id": "small", "queue": "wf_dh", "handler": "small"}]}');
SELECT orch_publish('wf_decide_h', 1) IS NOT NULL AS published;
SELECT orch_start('wf_decide_h', '{}') AS dh \gset
SELECT pg_temp.work('wf_dh', '{"size": "XL"}');
SELECT pg_temp.st(:dh);
SELECT orch_define('wf_decide_n', '{"steps": [
    {"step_id": "route", "type": "decision", "queue": "wf_dn", "handler": "pick", "targets": ["x", "y"]},
    {"step_id": "x", "queue": "wf_dn", "handler": "x"},
    {"step_id": "y", "queue": "wf_dn", "handler": "y"}]}');
SELECT orch_publish('wf_decide_n', 1) IS NOT NULL AS published;
SELECT orch_start('wf_decide_n', '{}') AS dn1 \gset
SELECT pg_temp.work('wf_dn', '{"next": "y"}');
SELECT pg_temp.st(:dn1);
SELECT pg_temp.work('wf_dn') AS chosen_step;
-- a target that was not declared: the decision fails (and with it the run)
SELECT orch_start('wf_decide_n', '{}') AS dn2 \gset
SELECT pg_temp.work('wf_dn', '{"next": "nowhere"}') AS route;
SELECT pg_temp.st(:dn2), s.error FROM orch_run_steps s WHERE s.run_id = :dn2 AND s.step_id = 'route';

-- ---------------------------------------------------------------------------
-- 6. Human approval: waiting_approval, single-use references (OR009),
--    rejection follows on_failure, expiry follows on_timeout.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_gate', '{"steps": [
    {"step_id": "build", "queue": "wf_g", "handler": "build"},
    {"step_id": "sign_off", "type": "human_approval", "depends_on": ["build"],
     "on_failure": "rework", "on_timeout": "escalate", "timeout": "1 hour"},
    {"step_id": "deploy", "queue": "wf_g", "handler": "deploy", "depends_on": ["sign_off"]},
    {"step_id": "rework", "queue": "wf_g", "handler": "rework"},
    {"step_id": "escalate", "queue": "wf_g", "handler": "escalate"}]}');
SELECT orch_publish('wf_gate', 1) IS NOT NULL AS published;
SELECT orch_start('wf_gate', '{}') AS g1 \gset
SELECT orch_start('wf_gate', '{}') AS g2 \gset
SELECT orch_start('wf_gate', '{}') AS g3 \gset
SELECT pg_temp.work_all('wf_g') AS built;
SELECT pg_temp.st(:g1);
SELECT pg_temp.try(format($$SELECT orch_approve(%s, 'build', 'ref-x')$$, :g1)) AS not_awaiting,
       pg_temp.try(format($$SELECT orch_approve(%s, 'nope', 'ref-x')$$, :g1)) AS unknown_step,
       pg_temp.try($$SELECT orch_approve(-1, 'sign_off', 'ref-x')$$) AS unknown_run,
       pg_temp.try(format($$SELECT orch_approve(%s, 'sign_off', NULL)$$, :g1)) AS null_ref;
CALL pg_temp.create_roles('wf_approver', 'wf_reader');
SET client_min_messages = warning;
GRANT orch_approver TO wf_approver;
GRANT orch_reader TO wf_reader;
RESET client_min_messages;
SET ROLE wf_approver;
SELECT orch_approve(:g1, 'sign_off', 'CAB-1', 'alice', 'looks good') AS g1_state;
-- the same decision again is a no-op; the reference elsewhere is refused
SELECT orch_approve(:g1, 'sign_off', 'CAB-1', 'alice', 'looks good') AS replay;
SELECT pg_temp.try(format($$SELECT orch_approve(%s, 'sign_off', 'CAB-1')$$, :g2)) AS other_run,
       pg_temp.try(format($$SELECT orch_reject(%s, 'sign_off', 'CAB-1')$$, :g1)) AS other_decision;
SELECT orch_reject(:g2, 'sign_off', 'CAB-2', 'bob', 'missing tests') AS g2_state;
RESET ROLE;
SELECT pg_temp.st(:g1) AS g1, pg_temp.st(:g2) AS g2;
SELECT approval_ref, run_id = :g1 AS g1, step_id, approved, actor, label, note FROM orch.approvals ORDER BY decided_at;
SELECT actor, label, note, reason_code FROM orch_events
 WHERE run_id = :g1 AND entity = 'run_step' AND to_state = 'succeeded' AND note = 'sign_off';
-- expiry (the step's timeout): on_timeout
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :g3 AND step_id = 'sign_off';
SELECT count > 0 AS moved FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.st(:g3);
SELECT pg_temp.try(format($$SELECT orch_approve(%s, 'sign_off', 'CAB-3')$$, :g3)) AS too_late;
SELECT pg_temp.work_all('wf_g') IS NOT NULL AS drained;
SELECT pg_temp.st(:g1) AS g1, pg_temp.st(:g2) AS g2, pg_temp.st(:g3) AS g3;

-- several approvals expire in one pass (parallel gates, one on_timeout each)
SELECT orch_define('wf_gates3', '{"steps": [
    {"step_id": "g1", "type": "human_approval", "timeout": "1 hour", "on_timeout": "t1"},
    {"step_id": "g2", "type": "human_approval", "timeout": "1 hour", "on_timeout": "t2"},
    {"step_id": "g3", "type": "human_approval", "timeout": "1 hour", "on_timeout": "t3"},
    {"step_id": "t1", "queue": "wf_g3", "handler": "t"},
    {"step_id": "t2", "queue": "wf_g3", "handler": "t"},
    {"step_id": "t3", "queue": "wf_g3", "handler": "t"}]}');
SELECT orch_publish('wf_gates3', 1) IS NOT NULL AS published;
SELECT orch_start('wf_gates3', '{}') AS g4 \gset
UPDATE orch.run_steps SET cap_at = now() - interval '1 second' WHERE run_id = :g4;
SELECT count > 0 AS moved FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.st(:g4);
SELECT pg_temp.work_all('wf_g3') AS escalations;
SELECT pg_temp.st(:g4);

-- ---------------------------------------------------------------------------
-- 7. Pause / resume with the drift check / cancel.
-- ---------------------------------------------------------------------------
SELECT orch_start('wf_linear', '{}', version => 1, pins => '{"commit": "abc123"}') AS p1 \gset
SELECT orch_pause_run(:p1), orch_pause_run(:p1) AS again;
-- paused: its queued step task is not handed out
SELECT count(*) AS claimed_while_paused FROM orch_dequeue('wf_q', 'w', 10);
SELECT pins FROM orch_runs WHERE run_id = :p1;
\set VERBOSITY default
SELECT orch_resume_run(:p1, '{"commit": "def456"}');
\set VERBOSITY terse
SELECT state FROM orch_runs WHERE run_id = :p1;
SELECT orch_resume_run(:p1, '{"commit": "abc123", "version": 1}') AS resumed,
       orch_resume_run(:p1) AS again;
SELECT pg_temp.work('wf_q');
SELECT orch_pause_run(:p1);
SELECT pg_temp.st(:p1);
SELECT orch_resume_run(:p1);
SELECT pg_temp.st(:p1);
-- cancel: every open step task is cancelled in the same transaction; the
-- worker holding one learns it from orch_heartbeat
SELECT task_id AS ctask, lease_token AS ctok FROM orch_dequeue('wf_q', 'w') \gset
SELECT orch_cancel_run(:p1, 'customer withdrew'), orch_cancel_run(:p1) AS again;
SELECT orch_heartbeat(:ctask, :'ctok') AS heartbeat;
SELECT pg_temp.st(:p1), (SELECT state FROM orch_tasks WHERE task_id = :ctask) AS task;
SELECT pg_temp.try(format('SELECT orch_pause_run(%s)', :p1)) AS pause_canceled,
       pg_temp.try(format('SELECT orch_resume_run(%s)', :p1)) AS resume_canceled,
       pg_temp.try(format('SELECT orch_pause_run(%s)', :lin)) AS pause_succeeded,
       pg_temp.try('SELECT orch_pause_run(-5)') AS pause_unknown;

-- ---------------------------------------------------------------------------
-- 8. Compensation: reverse completion order, each with its own retries;
--    approval mode; a compensation that fails for good: compensation_failed.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_saga', '{"steps": [
    {"step_id": "reserve", "queue": "wf_s", "handler": "reserve", "compensation": {"handler": "release", "queue": "wf_undo"}},
    {"step_id": "charge", "queue": "wf_s", "handler": "charge", "depends_on": ["reserve"],
     "compensation": {"handler": "refund", "queue": "wf_undo"}},
    {"step_id": "ship", "queue": "wf_s", "handler": "ship", "depends_on": ["charge"], "retry_policy": {"max_attempts": 1}}]}');
SELECT orch_publish('wf_saga', 1) IS NOT NULL AS published;
-- a step's and a compensation's task take their queue's priority
SELECT orch_create_queue('wf_s', '{"priority": 2}') IS NOT NULL AS step_queue,
       orch_create_queue('wf_undo', '{"priority": 3}') IS NOT NULL AS undo_queue;
SELECT orch_start('wf_saga', '{"order": 1}') AS s1 \gset
SELECT step_key, priority FROM orch_tasks WHERE run_id = :s1;
SELECT pg_temp.work('wf_s'), pg_temp.work('wf_s');
SELECT pg_temp.fail1('wf_s', 'NON_RETRYABLE') AS ship;
SELECT pg_temp.st(:s1);
-- one compensation at a time, the last completed step first
SELECT payload ->> 'compensation' AS first, payload -> 'output' AS of_output, priority FROM orch_tasks
 WHERE run_id = :s1 AND step_key LIKE '%:compensate';
SELECT pg_temp.fail1('wf_undo', 'TRANSIENT') AS refund_retries;
UPDATE orch.tasks SET retry_at = now() - interval '1 second' WHERE run_id = :s1 AND state = 'awaiting_tool';
SELECT pg_temp.work('wf_undo') AS refund, pg_temp.work('wf_undo') AS release;
SELECT pg_temp.st(:s1), failed_step FROM orch_runs WHERE run_id = :s1;
-- COMPENSATION_REQUIRED routes to compensation even with an on_failure edge
SELECT orch_define('wf_saga2', '{"steps": [
    {"step_id": "book", "queue": "wf_s2", "handler": "book", "compensation": {"handler": "unbook", "mode": "approval"}},
    {"step_id": "pay", "queue": "wf_s2", "handler": "pay", "depends_on": ["book"], "on_failure": "notify"},
    {"step_id": "notify", "queue": "wf_s2", "handler": "notify"}]}');
SELECT orch_publish('wf_saga2', 1) IS NOT NULL AS published;
SELECT orch_start('wf_saga2', '{}') AS s2 \gset
SELECT pg_temp.work('wf_s2');
SELECT pg_temp.fail1('wf_s2', 'COMPENSATION_REQUIRED');
SELECT pg_temp.st(:s2);
SELECT count(*) AS compensation_waits_for_approval FROM orch_tasks WHERE run_id = :s2 AND step_key = 'book:compensate';
SELECT orch_approve(:s2, 'book', 'UNDO-1', 'ops');
SELECT pg_temp.st(:s2);
SELECT pg_temp.fail1('wf_s2', 'NON_RETRYABLE') AS unbook;
SELECT pg_temp.st(:s2);
-- a failed, compensated run cannot be retried
SELECT pg_temp.try(format('SELECT orch_retry_run(%s)', :s2)) AS retry_compensated;

-- ---------------------------------------------------------------------------
-- 9. Deadlines: past the hard cap the run fails (deadline_exceeded), its
--    open steps are cancelled, compensation runs.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_deadline', '{"policies": {"deadline": "1 hour"}, "steps": [
    {"step_id": "a", "queue": "wf_dl", "handler": "a", "compensation": {"handler": "undo_a"}},
    {"step_id": "b", "queue": "wf_dl", "handler": "b", "depends_on": ["a"]}]}');
SELECT orch_publish('wf_deadline', 1) IS NOT NULL AS published;
SELECT orch_start('wf_deadline', '{}') AS dl \gset
SELECT deadline_at > now() + interval '59 minutes' AS deadline_set FROM orch_runs WHERE run_id = :dl;
SELECT pg_temp.work('wf_dl');
UPDATE orch.runs SET deadline_at = now() - interval '1 second' WHERE id = :dl;
-- lazily on claim: a step task of a run past its deadline is not handed out
SELECT count(*) AS claimed_past_deadline FROM orch_dequeue('wf_dl', 'w', 10);
SELECT count > 0 AS moved FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.st(:dl);
SELECT pg_temp.work('wf_dl') AS compensation;
SELECT pg_temp.st(:dl);

-- ---------------------------------------------------------------------------
-- 10. orch_retry_run: a failed run again from its failed steps, completed
--     outputs kept, lineage recorded.
-- ---------------------------------------------------------------------------
SELECT pg_temp.st(:u1);
SELECT orch_retry_run(:u1) AS u2 \gset
SELECT retry_of = :u1 AS lineage, pg_temp.st(:u2) FROM orch_runs WHERE run_id = :u2;
SELECT pg_temp.try(format('SELECT orch_retry_run(%s)', :u1)) AS retried_twice,
       pg_temp.try(format('SELECT orch_retry_run(%s)', :lin)) AS retry_succeeded;
SELECT pg_temp.work('wf_u'), pg_temp.work('wf_u');
SELECT pg_temp.st(:u2);
SELECT reason_code, note FROM orch_events WHERE run_id IN (:u1, :u2) AND reason_code IN ('retried', 'retry_of') ORDER BY event_id;
-- keeping completed outputs: a run failed at its second step reruns only that one
SELECT orch_start('wf_unhandled', '{}') AS u3 \gset
SELECT pg_temp.work('wf_u', '{"kept": true}');
SELECT pg_temp.fail1('wf_u', 'NON_RETRYABLE');
SELECT orch_retry_run(:u3) AS u4 \gset
SELECT pg_temp.st(:u4), (SELECT output FROM orch_run_steps WHERE run_id = :u4 AND step_id = 'a') AS kept_output;
SELECT pg_temp.work('wf_u') AS only_b_runs;
SELECT pg_temp.st(:u4);

-- ---------------------------------------------------------------------------
-- 11. Map: one task per item, results joined in input order, max_parallel.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_map', '{"steps": [
    {"step_id": "each", "queue": "wf_m", "handler": "resize", "map": {"over": "$.input.images", "max_parallel": 2}},
    {"step_id": "done", "queue": "wf_m", "handler": "zip", "depends_on": ["each"]}]}');
SELECT orch_publish('wf_map', 1) IS NOT NULL AS published;
SELECT orch_start('wf_map', '{"images": ["a.png", "b.png", "c.png"]}') AS m1 \gset
SELECT string_agg(step_key, ' ' ORDER BY task_id) AS open_items FROM orch_tasks WHERE run_id = :m1;
-- complete the second item first: results still come back in input order
CREATE TEMP TABLE wf_mclaims AS SELECT task_id, lease_token, step_key FROM orch_dequeue('wf_m', 'w', 2);
SELECT orch_complete(task_id, lease_token, '{"r": "B"}') FROM wf_mclaims WHERE step_key = 'each#1';
SELECT string_agg(step_key, ' ' ORDER BY task_id) AS items_so_far FROM orch_tasks WHERE run_id = :m1;
SELECT orch_complete(task_id, lease_token, '{"r": "A"}') FROM wf_mclaims WHERE step_key = 'each#0';
SELECT pg_temp.work_all('wf_m') AS completed;
SELECT output FROM orch_run_steps WHERE run_id = :m1 AND step_id = 'each';
SELECT pg_temp.st(:m1);
SELECT orch_start('wf_map', '{"images": []}') AS m2 \gset
SELECT pg_temp.st(:m2);
SELECT orch_start('wf_map', '{"images": "not-a-list"}') AS m3 \gset
SELECT pg_temp.st(:m3);
SELECT pg_temp.work_all('wf_m') IS NOT NULL AS drained;

-- ---------------------------------------------------------------------------
-- 12. Retry safety: NOT_SAFE_TO_RETRY is never retried; steps carry the
--     stable step idempotency key.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_unsafe', '{"steps": [
    {"step_id": "wire", "queue": "wf_x", "handler": "wire", "retry_safety": "NOT_SAFE_TO_RETRY"},
    {"step_id": "guarded", "queue": "wf_y", "handler": "g", "retry_safety": "SAFE_TO_RETRY_WITH_GUARD",
     "depends_on": ["wire"], "join": "all_finished"}]}');
SELECT orch_publish('wf_unsafe', 1) IS NOT NULL AS published;
SELECT orch_start('wf_unsafe', '{}') AS x1 \gset
SELECT pg_temp.fail1('wf_x', 'TRANSIENT') AS wire;
SELECT reason_code FROM orch_tasks WHERE run_id = :x1 AND step_key = 'wire';
SELECT guard AS g1, attempt FROM orch_dequeue('wf_y', 'w') \gset
SELECT task_id AS gt FROM orch_tasks WHERE run_id = :x1 AND step_key = 'guarded' \gset
UPDATE orch.tasks SET lease_expires_at = now() - interval '1 second' WHERE id = :gt;
SELECT count(*) FROM orch_maintain() WHERE action = 'leases_recovered' AND count > 0;
UPDATE orch.tasks SET retry_at = now() - interval '1 second' WHERE id = :gt;
SELECT guard = :'g1' AS same_guard_across_attempts, attempt FROM orch_dequeue('wf_y', 'w');

-- ---------------------------------------------------------------------------
-- 13. Wait steps; the run lifecycle holds for every writer; run status.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_wait', '{"steps": [
    {"step_id": "cool_down", "type": "wait", "duration": "1 hour"},
    {"step_id": "after", "queue": "wf_w", "handler": "after", "depends_on": ["cool_down"]}]}');
SELECT orch_publish('wf_wait', 1) IS NOT NULL AS published;
SELECT orch_start('wf_wait', '{}') AS w1 \gset
SELECT pg_temp.st(:w1);
UPDATE orch.run_steps SET wake_at = now() - interval '1 second' WHERE run_id = :w1;
SELECT count > 0 AS moved FROM orch_maintain() WHERE action = 'runs_progressed';
SELECT pg_temp.st(:w1);
SELECT orch_pause_run(:w1);
SELECT pg_temp.try(format('UPDATE orch.runs SET state = %L WHERE id = %s RETURNING state', 'succeeded', :w1)) AS paused_to_succeeded;
SELECT orch_resume_run(:w1);
SELECT pg_temp.try(format('UPDATE orch.runs SET state = %L WHERE id = %s RETURNING state', 'paused', :lin)) AS change_finished;
SELECT pg_temp.try($$INSERT INTO orch.runs (definition, version, content_hash, state, input, pins, created_by)
                     VALUES ('x', 1, 'h', 'succeeded', '{}', '{}', 'me')$$) AS insert_finished;
SELECT s -> 'run' ->> 'state' AS state, jsonb_array_length(s -> 'steps') AS steps,
       (SELECT count(*) FROM jsonb_array_elements(s -> 'steps') x WHERE jsonb_array_length(x -> 'tasks') > 0) AS steps_with_tasks,
       s -> 'steps' -> 0 -> 'tasks' -> 0 -> 'attempt_history' -> 0 ->> 'outcome' AS first_attempt,
       jsonb_array_length(s -> 'events') > 5 AS has_events
  FROM orch_run_status(:lin) s;
SELECT pg_temp.try('SELECT orch_run_status(-1)') AS unknown,
       pg_temp.try('SELECT orch_run_status(NULL)') AS null_id;

-- ---------------------------------------------------------------------------
-- 14. Roles: producers start and control runs, approvers decide, readers read.
-- ---------------------------------------------------------------------------
SET ROLE wf_reader;
SELECT pg_temp.try($$SELECT orch_start('wf_linear', '{}')$$) AS reader_start,
       pg_temp.try(format('SELECT orch_cancel_run(%s)', :w1)) AS reader_cancel,
       pg_temp.try(format('SELECT orch_retry_run(%s)', :u3)) AS reader_retry,
       (SELECT count(*) > 0 FROM orch_runs) AS reader_sees_runs;
RESET ROLE;
SET ROLE wf_approver;
SELECT pg_temp.try($$SELECT orch_start('wf_linear', '{}')$$) AS approver_start;
RESET ROLE;

-- ---------------------------------------------------------------------------
-- 15. Review cases: bad input fails a step, never the worker's call; a
--     compensating run paused or waiting ends properly; a step failing at
--     start fails the run once; retry_run re-decides edges; unhandled
--     failures; parallel branches while an approval waits; versions on
--     replay.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_until', '{"steps": [
    {"step_id": "a", "queue": "wf_r", "handler": "a"},
    {"step_id": "w", "type": "wait", "until_path": "$.input.at", "depends_on": ["a"]}]}');
SELECT orch_publish('wf_until', 1) IS NOT NULL AS published;
SELECT orch_start('wf_until', '{"at": "next tuesday"}') AS r1 \gset
SELECT orch_start('wf_until', '{"at": 12}') AS r2 \gset
SELECT pg_temp.work('wf_r') AS completed_despite_bad_input, pg_temp.work('wf_r') AS again;
SELECT pg_temp.st(:r1) AS bad_string, pg_temp.st(:r2) AS not_a_string;
SELECT error FROM orch_run_steps WHERE run_id = :r1 AND step_id = 'w';
-- until_path is ISO 8601 whatever the DateStyle: the same instant under
-- 'SQL, DMY' and 'ISO, MDY'; a day-month order, or a word, fails the step
SET DateStyle = 'SQL, DMY';
SELECT orch_start('wf_until', '{"at": "2030-01-02T03:04:05Z"}') AS r3 \gset
SELECT orch_start('wf_until', '{"at": "01/02/2030"}') AS r4 \gset
SELECT orch_start('wf_until', '{"at": "2030-01-02 03:04:05.5+02:00"}') AS r5 \gset
SELECT pg_temp.work('wf_r'), pg_temp.work('wf_r'), pg_temp.work('wf_r');
RESET DateStyle;
SELECT run_id = :r3 AS r3, state, wake_at AT TIME ZONE 'UTC' AS wake_utc, error
  FROM orch.run_steps WHERE run_id IN (:r3, :r4, :r5) AND step_id = 'w' ORDER BY run_id;
-- a compensation in a paused run, and a rejected compensation
SELECT orch_define('wf_comp_pause', '{"steps": [
    {"step_id": "book", "queue": "wf_cp", "handler": "book", "compensation": {"handler": "unbook"}},
    {"step_id": "pay", "queue": "wf_cp", "handler": "pay", "depends_on": ["book"], "retry_policy": {"max_attempts": 1}}]}');
SELECT orch_publish('wf_comp_pause', 1) IS NOT NULL AS published;
SELECT orch_start('wf_comp_pause', '{}') AS cp \gset
SELECT pg_temp.work('wf_cp'), pg_temp.fail1('wf_cp', 'NON_RETRYABLE');
SELECT task_id AS cpt, lease_token AS cptok FROM orch_dequeue('wf_cp', 'w') \gset
SELECT orch_pause_run(:cp);
SELECT orch_complete(:cpt, :'cptok') AS compensation_completes_while_paused;
SELECT pg_temp.st(:cp);
SELECT orch_resume_run(:cp);
SELECT pg_temp.st(:cp);
SELECT orch_start('wf_saga2', '{}') AS s3 \gset
SELECT pg_temp.work('wf_s2'), pg_temp.fail1('wf_s2', 'COMPENSATION_REQUIRED');
SELECT orch_reject(:s3, 'book', 'NO-UNDO-1', 'ops', 'do not unbook') AS rejected_compensation;
SELECT pg_temp.st(:s3);
-- a decision failing at start while a sibling task is open: the run fails once
SELECT orch_define('wf_nest', '{"steps": [
    {"step_id": "a", "queue": "wf_n", "handler": "a"},
    {"step_id": "d", "type": "decision", "targets": ["x"],
     "rules": [{"when": {"path": "$.input.k", "op": "exists"}, "then": "x"}]},
    {"step_id": "x", "queue": "wf_n", "handler": "x"}]}');
SELECT orch_publish('wf_nest', 1) IS NOT NULL AS published;
SELECT orch_start('wf_nest', '{}') AS n1 \gset
SELECT pg_temp.st(:n1), (SELECT state FROM orch_tasks WHERE run_id = :n1 AND step_key = 'a') AS sibling_task;
-- retry_run: failure edges are not taken again, success edges are
SELECT orch_define('wf_retry_edges', '{"steps": [
    {"step_id": "f", "queue": "wf_re", "handler": "f", "on_failure": "h", "retry_policy": {"max_attempts": 1}},
    {"step_id": "h", "queue": "wf_re", "handler": "h", "retry_policy": {"max_attempts": 1}}]}');
SELECT orch_publish('wf_retry_edges', 1) IS NOT NULL AS published;
SELECT orch_start('wf_retry_edges', '{}') AS re1 \gset
SELECT pg_temp.fail1('wf_re', 'NON_RETRYABLE'), pg_temp.fail1('wf_re', 'NON_RETRYABLE');
SELECT pg_temp.st(:re1);
SELECT orch_retry_run(:re1) AS re2 \gset
SELECT pg_temp.st(:re2), (SELECT string_agg(step_key, ' ') FROM orch_tasks WHERE run_id = :re2 AND state = 'queued') AS queued;
-- a failure whose only handler is skipped is not handled
SELECT orch_define('wf_unhandled2', '{"steps": [
    {"step_id": "a", "queue": "wf_u2", "handler": "a", "on_failure": "b", "retry_policy": {"max_attempts": 1}},
    {"step_id": "b", "queue": "wf_u2", "handler": "b", "depends_on": ["a"]}]}');
SELECT orch_publish('wf_unhandled2', 1) IS NOT NULL AS published;
SELECT orch_start('wf_unhandled2', '{}') AS uh \gset
SELECT pg_temp.fail1('wf_u2', 'NON_RETRYABLE');
SELECT pg_temp.st(:uh), failed_step FROM orch_runs WHERE run_id = :uh;
-- an approval waiting next to a parallel branch: the branch's task is claimable
SELECT orch_define('wf_par', '{"steps": [
    {"step_id": "ok", "type": "human_approval"},
    {"step_id": "build", "queue": "wf_par", "handler": "b"}]}');
SELECT orch_publish('wf_par', 1) IS NOT NULL AS published;
SELECT orch_start('wf_par', '{}') AS par \gset
SELECT pg_temp.st(:par);
SELECT pg_temp.work('wf_par') AS claimed_while_approval_waits;
SELECT pg_temp.st(:par);
SELECT orch_approve(:par, 'ok', 'PAR-1'), pg_temp.st(:par);
-- a replay naming another version is another request
SELECT orch_start('wf_linear', '{}', 1, 'ver-key') AS v1 \gset
SELECT pg_temp.try($$SELECT orch_start('wf_linear', '{}', 2, 'ver-key')$$) AS other_version,
       orch_start('wf_linear', '{}', 1, 'ver-key') = :v1 AS same_version,
       orch_start('wf_linear', '{}', NULL, 'ver-key') = :v1 AS any_version;
SELECT pg_temp.work_all('wf_q') IS NOT NULL AS drained;
-- a step whose queue does not exist while auto-creation is off fails (the call that made it due does not)
SELECT orch_define('wf_noqueue', '{"steps": [{"step_id": "a", "queue": "wf_never_created", "handler": "a"}]}');
SELECT orch_publish('wf_noqueue', 1) IS NOT NULL AS published;
SET orchestrator.auto_create_queues = off;
SELECT orch_start('wf_noqueue', '{}') AS nq \gset
RESET orchestrator.auto_create_queues;
SELECT pg_temp.st(:nq), (SELECT error FROM orch_run_steps WHERE run_id = :nq) AS error;

-- ---------------------------------------------------------------------------
-- A completion settles the run's due timers too (0.7.0 settles the usual
-- completion in one statement, but not while another step's timer is due):
-- a parallel step whose timeout passed times out in the same pass, the run
-- fails, and the completed step's successor is never handed out.
-- ---------------------------------------------------------------------------
SELECT orch_define('wf_race', '{"steps": [
    {"step_id": "a", "queue": "wf_r", "handler": "a"},
    {"step_id": "b", "queue": "wf_r2", "handler": "b", "timeout": "1 second"},
    {"step_id": "after_a", "queue": "wf_r", "handler": "after_a", "depends_on": ["a"]}]}');
SELECT orch_publish('wf_race', 1) IS NOT NULL AS published;
SELECT orch_start('wf_race', '{}') AS rc \gset
SELECT pg_sleep(1.1);
SELECT pg_temp.work('wf_r') AS completed;
SELECT pg_temp.st(:rc);
SELECT count(*) AS successor_tasks FROM orch_tasks WHERE run_id = :rc AND step_key = 'after_a';
-- without a due timer, the same completion hands the successor out
SELECT orch_start('wf_race', '{}') AS rc2 \gset
SELECT pg_temp.work('wf_r') AS completed;
SELECT pg_temp.st(:rc2);
SELECT count(*) AS successor_tasks FROM orch_tasks WHERE run_id = :rc2 AND step_key = 'after_a';
