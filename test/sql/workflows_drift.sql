-- Drift probes: a definition's probes
-- (functions with no arguments) are validated at orch_define (OR008), only
-- an orch_admin member publishes them (42501), they are pinned at orch_start
-- as the publisher with search_path pinned (a failing probe refuses the
-- start, 38000, nothing created), checked again before every gate (a
-- human_approval step, a decision) and on orch_resume_run; drift pauses the
-- run (reason drift_detected, the diff in orch.runs.drift) until
-- orch_acknowledge_drift re-pins the live values (single-use reference,
-- OR009); orch_resume_run refuses meanwhile (OR010).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- p(probes): v() of a one-step definition with these probes
CREATE FUNCTION pg_temp.p(probes jsonb) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.v(jsonb_build_object('probes', probes,
        'steps', '[{"step_id": "a", "queue": "wd_q", "handler": "h"}]'::jsonb))
$$;
-- err(sql): the SQLSTATE, message, detail and hint the statement raised, or
-- 'ok'; run ids read "run N" (they depend on the tests run before)
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; m text; dt text; h text;
BEGIN
    EXECUTE q;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, m = MESSAGE_TEXT, dt = PG_EXCEPTION_DETAIL,
                            h = PG_EXCEPTION_HINT;
    RETURN regexp_replace(st || ' ' || m || coalesce(' / ' || nullif(dt, ''), '')
                          || coalesce(' / ' || nullif(h, ''), ''), 'run [0-9]+', 'run N', 'g');
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.err(text) TO PUBLIC;
-- claim_complete(step): claim the run's task of that step in wd_q and complete it
CREATE FUNCTION pg_temp.claim_complete(run bigint, step text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue('wd_q', 'wd-worker', 10) d
     WHERE d.task_id = (SELECT t.id FROM orch.tasks t WHERE t.run_id = run AND t.step_key = step);
    RETURN orch_complete(c.task_id, c.lease_token, '{"ok": true}');
END $$;

-- The probed objects: a table only orch_admin's member wd_admin may read,
-- a function whose source is fingerprinted, a flag that makes a probe fail.
CREATE SCHEMA wd_app;
CREATE TABLE wd_app.items (id int);
INSERT INTO wd_app.items VALUES (1), (2);
CREATE TABLE wd_app.flags (fail boolean);
INSERT INTO wd_app.flags VALUES (false);
CREATE FUNCTION wd_app.enact() RETURNS int LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION wd_app.count_items() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM wd_app.items';
CREATE FUNCTION wd_app.enact_md5() RETURNS text LANGUAGE sql STABLE
    AS $$SELECT md5(prosrc) FROM pg_proc WHERE oid = 'wd_app.enact()'::regprocedure$$;
CREATE FUNCTION wd_app.nothing() RETURNS text LANGUAGE sql STABLE AS 'SELECT NULL::text';
CREATE FUNCTION wd_app.who() RETURNS name LANGUAGE sql STABLE AS 'SELECT current_user';
CREATE FUNCTION wd_app.flaky() RETURNS int LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF (SELECT fail FROM wd_app.flags) THEN RAISE EXCEPTION 'wd flaky probe'; END IF;
    RETURN 1;
END $$;
CREATE FUNCTION wd_app.boom() RETURNS int LANGUAGE plpgsql STABLE AS $$BEGIN RAISE EXCEPTION 'wd boom'; END$$;
CREATE FUNCTION wd_app.writes() RETURNS int LANGUAGE plpgsql VOLATILE AS $$
BEGIN INSERT INTO wd_app.items VALUES (99); RETURN 1; END $$;
CREATE FUNCTION wd_app.big() RETURNS text LANGUAGE sql STABLE AS $$SELECT repeat('x', 5000)$$;
-- names items unqualified: found through the creator's search_path only
SET search_path = wd_app, public;
CREATE FUNCTION wd_app.unqualified() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT count(*) FROM items';
RESET search_path;
CREATE FUNCTION wd_app.secret() RETURNS int LANGUAGE sql STABLE AS 'SELECT 42';
REVOKE EXECUTE ON FUNCTION wd_app.secret() FROM PUBLIC;
CREATE FUNCTION wd_app.rows() RETURNS SETOF int LANGUAGE sql STABLE AS 'SELECT id FROM wd_app.items';
CREATE FUNCTION wd_app.nop() RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE wd_app.proc() LANGUAGE sql AS '';
CREATE FUNCTION wd_app.arg(x int) RETURNS int LANGUAGE sql AS 'SELECT x';

CALL pg_temp.create_roles('wd_admin', 'wd_author', 'wd_producer', 'wd_approver');
-- (roles outlive the test database: a rerun finds them granted already)
SET client_min_messages = warning;
GRANT orch_admin TO wd_admin;
GRANT orch_producer TO wd_producer;
GRANT orch_approver TO wd_approver;
RESET client_min_messages;
GRANT USAGE ON SCHEMA wd_app TO wd_admin;
GRANT SELECT ON wd_app.items, wd_app.flags TO wd_admin;
-- wd_author may define and publish (granted directly) but is not orch_admin
GRANT EXECUTE ON FUNCTION orch_define(text, jsonb), orch_publish(text, integer) TO wd_author;

-- ---------------------------------------------------------------------------
-- 1. Validation at orch_define: OR008 naming the path.
-- ---------------------------------------------------------------------------
SELECT pg_temp.p('{"rows": "wd_app.count_items()"}') AS string_form,
       pg_temp.p('{"rows": {"function": "wd_app.count_items()", "description": "rows"}}') AS object_form,
       pg_temp.p('{"now": "now()", "spaced": " wd_app.count_items ( ) "}') AS pg_catalog_and_spaces;
SELECT x AS probes, pg_temp.p(x::jsonb) AS result FROM (VALUES
    ('[]'),
    ('{}'),
    ('{"bad name": "now()"}'),
    ('{"rows": 1}'),
    ('{"rows": {"description": "no function"}}'),
    ('{"rows": {"function": "now()", "unit": "s"}}'),
    ('{"rows": {"function": 7}}'),
    ('{"rows": "wd_app.nope()"}'),
    ('{"rows": "nosuchschema.f()"}'),
    ('{"rows": "wd_app.arg()"}'),
    ('{"rows": "wd_app.arg(int)"}'),
    ('{"rows": "wd_app.count_items"}'),
    ('{"rows": "wd_app.count_items() x"}'),
    ('{"rows": "a.b.c()"}'),
    ('{"rows": "wd_app.rows()"}'),
    ('{"rows": "wd_app.proc()"}'),
    ('{"rows": "count()"}'),
    ('{"rows": "wd_app.nop()"}'),
    ('{"rows": "count_items()"}')) t(x);
-- at most 32 probes
SELECT pg_temp.p((SELECT jsonb_object_agg('p' || g, 'now()') FROM generate_series(1, 32) g)) AS thirty_two,
       pg_temp.p((SELECT jsonb_object_agg('p' || g, 'now()') FROM generate_series(1, 33) g)) AS thirty_three;

-- ---------------------------------------------------------------------------
-- 2. Publishing: only an orch_admin member (42501 otherwise, nothing
-- changes); the publisher is recorded and must be able to execute them.
-- ---------------------------------------------------------------------------
SET ROLE wd_author;
SELECT orch_define('wd_authored', '{"probes": {"rows": "wd_app.count_items()"}, "steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT pg_temp.err($$SELECT orch_publish('wd_authored', 1)$$);
-- without probes, the directly granted role publishes
SELECT orch_define('wd_authored_plain', '{"steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT length(orch_publish('wd_authored_plain', 1));
RESET ROLE;
SELECT name, status, published_by FROM orch_definitions WHERE name LIKE 'wd_authored%' ORDER BY name;
SET ROLE wd_admin;
SELECT orch_define('wd_secret', '{"probes": {"s": "wd_app.secret()"}, "steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT pg_temp.err($$SELECT orch_publish('wd_secret', 1)$$);
RESET ROLE;

-- ---------------------------------------------------------------------------
-- 3. A human_approval gate: pinned at start (as the publisher), drift before
-- the gate stops the run; resume and approval are refused until acknowledged.
-- ---------------------------------------------------------------------------
SET ROLE wd_admin;
SELECT orch_define('wd_gate', '{
  "probes": {"rows": "wd_app.count_items()", "enact": {"function": "wd_app.enact_md5()", "description": "fingerprint of enact"},
             "nothing": "wd_app.nothing()", "who": "wd_app.who()", "flaky": "wd_app.flaky()"},
  "steps": [
    {"step_id": "prep", "queue": "wd_q", "handler": "prep"},
    {"step_id": "gate", "type": "human_approval", "depends_on": ["prep"]},
    {"step_id": "enact", "queue": "wd_q", "handler": "enact", "depends_on": ["gate"]}]}');
SELECT length(orch_publish('wd_gate', 1));
RESET ROLE;
SELECT published_by FROM orch_definitions WHERE name = 'wd_gate';
-- wd_producer can neither read the table nor use the schema, yet starts runs:
-- the probes run as wd_admin (who() says so)
SELECT has_table_privilege('wd_producer', 'wd_app.items', 'SELECT') AS producer_reads_items,
       has_schema_privilege('wd_producer', 'wd_app', 'USAGE') AS producer_uses_schema;
SET ROLE wd_producer;
SELECT orch_start('wd_gate', '{}') AS run1 \gset
RESET ROLE;
SELECT state, reason_code, probe_pins, drift FROM orch_runs WHERE run_id = :run1;
-- the table changes while prep runs: the gate is not started
INSERT INTO wd_app.items VALUES (3);
SELECT pg_temp.claim_complete(:run1, 'prep');
SELECT state, reason_code, drift FROM orch_runs WHERE run_id = :run1;
SELECT step_id, state FROM orch_run_steps WHERE run_id = :run1 ORDER BY ord;
SELECT entity, note, from_state, to_state, reason_code FROM orch_events
 WHERE run_id = :run1 AND entity IN ('run', 'run_step') ORDER BY at, event_id;
-- refused until acknowledged, nothing changes
SET ROLE wd_producer;
SELECT pg_temp.err(format($$SELECT orch_resume_run(%s)$$, :run1));
RESET ROLE;
SET ROLE wd_approver;
SELECT pg_temp.err(format($$SELECT orch_approve(%s, 'gate', 'wd-gate-early')$$, :run1));
RESET ROLE;
SELECT state, reason_code FROM orch_runs WHERE run_id = :run1;
SELECT count(*) AS approvals FROM orch.approvals WHERE run_id = :run1;
-- a probe that fails while the acknowledgement re-pins refuses it (nothing recorded)
UPDATE wd_app.flags SET fail = true;
SET ROLE wd_approver;
SELECT pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, 'wd-ack-1', 'alice', 'rows grew')$$, :run1));
RESET ROLE;
SELECT count(*) AS approvals FROM orch.approvals WHERE run_id = :run1;
UPDATE wd_app.flags SET fail = false;
-- acknowledged: re-pinned to the live values, the diff cleared, the run still paused
SET ROLE wd_approver;
SELECT orch_acknowledge_drift(:run1, 'wd-ack-1', 'alice', 'rows grew');
-- the same acknowledgement again: no change
SELECT orch_acknowledge_drift(:run1, 'wd-ack-1', 'alice', 'rows grew');
RESET ROLE;
SELECT state, reason_code, probe_pins ->> 'rows' AS rows_pin, drift FROM orch_runs WHERE run_id = :run1;
SELECT step_id, approved, actor, label, note FROM orch.approvals WHERE run_id = :run1;
SET ROLE wd_producer;
SELECT orch_resume_run(:run1);
RESET ROLE;
SELECT step_id, state FROM orch_run_steps WHERE run_id = :run1 ORDER BY ord;
SET ROLE wd_approver;
SELECT orch_approve(:run1, 'gate', 'wd-gate-1', 'alice');
RESET ROLE;
SELECT pg_temp.claim_complete(:run1, 'enact');
SELECT state, reason_code FROM orch_runs WHERE run_id = :run1;
SELECT entity, note, from_state, to_state, reason_code, label FROM orch_events
 WHERE run_id = :run1 AND entity IN ('run', 'run_step') ORDER BY at, event_id;

-- ---------------------------------------------------------------------------
-- 4. A decision gate: a function's source changes before the decision.
-- ---------------------------------------------------------------------------
SELECT orch_define('wd_decide', '{
  "probes": {"enact": "wd_app.enact_md5()"},
  "steps": [
    {"step_id": "prep", "queue": "wd_q", "handler": "prep"},
    {"step_id": "pick", "type": "decision", "depends_on": ["prep"], "targets": ["left", "right"], "default": "left"},
    {"step_id": "left", "queue": "wd_q", "handler": "left"},
    {"step_id": "right", "queue": "wd_q", "handler": "right"}]}');
SELECT length(orch_publish('wd_decide', 1));
SELECT orch_start('wd_decide', '{}') AS run2 \gset
CREATE OR REPLACE FUNCTION wd_app.enact() RETURNS int LANGUAGE sql AS 'SELECT 2';
SELECT pg_temp.claim_complete(:run2, 'prep');
SELECT state, reason_code, jsonb_object_keys(drift) AS drifted,
       drift -> 'enact' -> 'pinned' <> drift -> 'enact' -> 'live' AS differs
  FROM orch_runs WHERE run_id = :run2;
SELECT step_id, state FROM orch_run_steps WHERE run_id = :run2 ORDER BY ord;
SELECT pg_temp.err(format($$SELECT orch_resume_run(%s)$$, :run2));
SELECT orch_acknowledge_drift(:run2, 'wd-ack-2');
SELECT orch_resume_run(:run2);
SELECT step_id, state FROM orch_run_steps WHERE run_id = :run2 ORDER BY ord;

-- ---------------------------------------------------------------------------
-- 5. Drift found by orch_resume_run of a paused run: recorded, the run stays
-- paused (the call returns paused); resume again is OR010 until acknowledged.
-- A probe that fails at a gate is drift, its live value the SQLSTATE.
-- ---------------------------------------------------------------------------
SELECT orch_start('wd_gate', '{}') AS run3 \gset
SELECT orch_pause_run(:run3);
UPDATE wd_app.flags SET fail = true;
SELECT orch_resume_run(:run3);
SELECT state, reason_code, drift FROM orch_runs WHERE run_id = :run3;
SELECT from_state, to_state, reason_code, note FROM orch_events
 WHERE run_id = :run3 AND entity = 'run' ORDER BY at, event_id;
SELECT pg_temp.err(format($$SELECT orch_resume_run(%s)$$, :run3));
UPDATE wd_app.flags SET fail = false;
SELECT orch_acknowledge_drift(:run3, 'wd-ack-3');
SELECT orch_resume_run(:run3);
-- caller pins (OR010) are still compared first
SELECT orch_pause_run(:run3);
SELECT pg_temp.err(format($$SELECT orch_resume_run(%s, '{"definition": "other"}')$$, :run3));
SELECT orch_resume_run(:run3, '{"definition": "wd_gate"}');

-- ---------------------------------------------------------------------------
-- 6. Approval references: single-use across approvals and acknowledgements
-- (OR009); nothing to acknowledge is OR009.
-- ---------------------------------------------------------------------------
SELECT pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, 'wd-ack-1')$$, :run3));
SELECT pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, 'wd-gate-1')$$, :run3));
SELECT pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, 'wd-ack-new')$$, :run3));
SELECT pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, 'wd-ack-new')$$, :run1));
SELECT pg_temp.err($$SELECT orch_acknowledge_drift(NULL, 'x')$$),
       pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, '')$$, :run3)),
       pg_temp.err($$SELECT orch_acknowledge_drift(-1, 'x')$$);
-- only orch_approver (and orch_admin) may acknowledge
SET ROLE wd_producer;
SELECT pg_temp.err(format($$SELECT orch_acknowledge_drift(%s, 'wd-ack-x')$$, :run3));
RESET ROLE;
SELECT orch_cancel_run(:run3);

-- ---------------------------------------------------------------------------
-- 7. A probe that fails at start refuses the start and creates nothing:
-- an error, a write (probes run read-only), a name found only through the
-- caller's search_path (probes run with search_path pg_catalog, pg_temp),
-- a value over orchestrator.max_payload_size (never echoed).
-- ---------------------------------------------------------------------------
SELECT orch_define('wd_boom', '{"probes": {"boom": "wd_app.boom()"}, "steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT length(orch_publish('wd_boom', 1));
SELECT orch_define('wd_writes', '{"probes": {"w": "wd_app.writes()"}, "steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT length(orch_publish('wd_writes', 1));
SELECT orch_define('wd_unqualified', '{"probes": {"u": "wd_app.unqualified()"}, "steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT length(orch_publish('wd_unqualified', 1));
SELECT orch_define('wd_big', '{"probes": {"big": "wd_app.big()"}, "steps": [{"step_id": "a", "queue": "wd_q", "handler": "h"}]}');
SELECT length(orch_publish('wd_big', 1));
SELECT count(*) AS tasks_before FROM orch.tasks WHERE queue = 'wd_q' \gset
SELECT pg_temp.err($$SELECT orch_start('wd_boom', '{}')$$);
SELECT pg_temp.err($$SELECT orch_start('wd_writes', '{}', idempotency_key => 'wd-key')$$);
SET search_path = wd_app, public;
SELECT count(*) AS visible_to_caller FROM items;
SELECT pg_temp.err($$SELECT orch_start('wd_unqualified', '{}')$$);
RESET search_path;
SET orchestrator.max_payload_size = 1000;
SELECT pg_temp.err($$SELECT orch_start('wd_big', '{}')$$);
RESET orchestrator.max_payload_size;
SELECT (SELECT count(*) FROM orch_runs WHERE definition IN ('wd_boom', 'wd_writes', 'wd_unqualified', 'wd_big')) AS runs,
       (SELECT count(*) FROM orch.tasks WHERE queue = 'wd_q') - :tasks_before AS new_tasks,
       (SELECT count(*) FROM wd_app.items WHERE id = 99) AS written;

-- ---------------------------------------------------------------------------
-- 8. orch_retry_run keeps the failed run's pins: drift since its start stops
-- the retried run at its next gate.
-- ---------------------------------------------------------------------------
SELECT orch_start('wd_gate', '{}') AS run4 \gset
SELECT set_config('wd.run4', :'run4', false) IS NOT NULL AS set;
DO $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue('wd_q', 'wd-worker', 10) d
     WHERE d.task_id = (SELECT t.id FROM orch.tasks t WHERE t.run_id = current_setting('wd.run4')::bigint AND t.step_key = 'prep');
    PERFORM orch_fail(c.task_id, c.lease_token, 'NON_RETRYABLE', 'wd prep failed');
END $$;
SELECT state FROM orch_runs WHERE run_id = :run4;
DELETE FROM wd_app.items WHERE id = 3;
SELECT orch_retry_run(:run4) AS run5 \gset
SELECT (SELECT probe_pins FROM orch_runs WHERE run_id = :run5) = (SELECT probe_pins FROM orch_runs WHERE run_id = :run4) AS same_pins;
SELECT pg_temp.claim_complete(:run5, 'prep');
SELECT state, reason_code, drift FROM orch_runs WHERE run_id = :run5;
SELECT orch_cancel_run(:run5);

-- ---------------------------------------------------------------------------
-- 9. The gated pipeline of docs/workflows.md, verbatim, with
-- stand-ins for its four probe functions: validated, published, pinned.
-- ---------------------------------------------------------------------------
CREATE SCHEMA cutter;
CREATE FUNCTION cutter.address_row_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT 12';
CREATE FUNCTION cutter.writer_functions_md5() RETURNS text LANGUAGE sql STABLE AS $$SELECT md5('fn_iu_create fn_iu_enact fn_iu_apply_edit_draft')$$;
CREATE FUNCTION cutter.review_decision_count() RETURNS bigint LANGUAGE sql STABLE AS 'SELECT 0';
CREATE FUNCTION cutter.grants_fingerprint() RETURNS text LANGUAGE sql STABLE AS $$SELECT 'cutter_exec:EXECUTE'$$;
SELECT orch_define('wd_cut_pipeline', $spec${
  "description": "Gated cut pipeline: internal gates run automatically, two sovereign gates wait for a human, any failure stops and reports.",
  "input_schema": {
    "required": ["document_id", "mode"],
    "properties": {
      "document_id": {"type": "string", "minLength": 1},
      "mode": {"enum": ["dryrun", "live"]},
      "max_candidates": {"type": "integer", "minimum": 1, "maximum": 1000}
    }
  },
  "probes": {
    "address_rows": {"function": "cutter.address_row_count()", "description": "live rows of canonical_address under the document's prefix"},
    "writer_md5": {"function": "cutter.writer_functions_md5()", "description": "md5(prosrc) of fn_iu_create, fn_iu_enact, fn_iu_apply_edit_draft"},
    "review_decisions": {"function": "cutter.review_decision_count()", "description": "cardinality of cutter_governance.review_decision"},
    "grants": "cutter.grants_fingerprint()"
  },
  "policies": {
    "deadline": "1 day",
    "queue": "cutter",
    "retry_policy": {"max_attempts": 3, "schedule": ["5 s", "15 s", "30 s"], "retry_on": ["TRANSIENT", "RATE_LIMITED"]},
    "retry_safety": "SAFE_TO_RETRY"
  },
  "steps": [
    {"step_id": "source_pin", "handler": "cutter.source_pin", "timeout": "2 minutes", "on_failure": "stop_report",
     "output_schema": {"required": ["manifest_digest", "region_sha"],
                       "properties": {"manifest_digest": {"type": "string", "minLength": 64, "maxLength": 64},
                                      "region_sha": {"type": "string", "minLength": 64, "maxLength": 64}}}},
    {"step_id": "mark", "handler": "cutter.mark", "depends_on": ["source_pin"], "timeout": "5 minutes", "on_failure": "stop_report",
     "output_schema": {"required": ["candidates"], "properties": {"candidates": {"type": "integer", "minimum": 1, "maximum": 1000}}}},
    {"step_id": "cutplan", "handler": "cutter.cutplan", "depends_on": ["mark"], "timeout": "10 minutes", "on_failure": "stop_report",
     "output_schema": {"required": ["writer_digest", "rows"],
                       "properties": {"writer_digest": {"type": "string"}, "rows": {"type": "array", "minItems": 1}}}},
    {"step_id": "backup", "handler": "cutter.backup", "depends_on": ["cutplan"], "timeout": "5 minutes", "on_failure": "stop_report",
     "output_schema": {"required": ["backup_sha", "size_bytes"],
                       "properties": {"backup_sha": {"type": "string"}, "size_bytes": {"type": "integer", "minimum": 1}}}},
    {"step_id": "grant_probe", "handler": "cutter.grant_probe", "depends_on": ["backup"], "timeout": "1 minute", "on_failure": "stop_report"},
    {"step_id": "authorize_cut", "type": "human_approval", "description": "SG_1: sovereign cut authorization",
     "depends_on": ["grant_probe"], "timeout": "8 hours", "on_timeout": "stop_report", "on_failure": "stop_report"},
    {"step_id": "cut_leg_a", "type": "external_call", "handler": "cutter.cut_leg_a", "depends_on": ["authorize_cut"],
     "timeout": "10 minutes", "retry_safety": "NOT_SAFE_TO_RETRY",
     "compensation": {"handler": "cutter.void_leg_a", "mode": "approval"}, "on_failure": "stop_report"},
    {"step_id": "structural_verify", "handler": "cutter.structural_verify", "depends_on": ["cut_leg_a"], "timeout": "2 minutes", "on_failure": "stop_report",
     "output_schema": {"required": ["passed", "intrusions"],
                       "properties": {"passed": {"const": true}, "intrusions": {"const": 0}}}},
    {"step_id": "leg_b_record", "handler": "cutter.leg_b_record", "depends_on": ["structural_verify"],
     "timeout": "5 minutes", "retry_safety": "SAFE_TO_RETRY_WITH_GUARD",
     "compensation": {"handler": "cutter.void_leg_b", "queue": "cutter.compensation"}, "on_failure": "stop_report"},
    {"step_id": "write_verify", "handler": "cutter.write_verify", "depends_on": ["leg_b_record"], "timeout": "5 minutes", "on_failure": "stop_report"},
    {"step_id": "authorize_lifecycle", "type": "human_approval", "description": "SG_2: sovereign lifecycle authorization",
     "depends_on": ["write_verify"], "timeout": "8 hours", "on_timeout": "stop_report", "on_failure": "stop_report"},
    {"step_id": "lifecycle_enact", "handler": "cutter.lifecycle_enact", "depends_on": ["authorize_lifecycle"],
     "timeout": "15 minutes", "retry_safety": "NOT_SAFE_TO_RETRY", "on_failure": "stop_report"},
    {"step_id": "closeout", "handler": "cutter.closeout", "depends_on": ["lifecycle_enact"], "timeout": "5 minutes"},
    {"step_id": "stop_report", "type": "notify", "handler": "cutter.stop_route_report",
     "description": "SG_3: failure escalation with the full run state; never a silent retry"}
  ]
}$spec$);
SELECT length(orch_publish('wd_cut_pipeline', 1));
SELECT orch_start('wd_cut_pipeline', '{"document_id": "ICX-LAW-2026-001", "mode": "dryrun"}') AS run6 \gset
SELECT probe_pins FROM orch_runs WHERE run_id = :run6;
SELECT orch_cancel_run(:run6);

-- A probe leaves nothing behind: a setting it changes with a plain SET
-- (set_config(..., false)) is undone, in the extension's statements and in
-- the caller's session; its value's text does not depend on the caller's
-- TimeZone or DateStyle (the probe runs with UTC and ISO).
CREATE FUNCTION wd_app.meddle() RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM set_config('search_path', 'wd_app, pg_catalog', false);
    PERFORM set_config('TimeZone', 'Asia/Tokyo', false);
    RETURN '2030-01-01 00:00:00+00'::timestamptz;
END $$;
SET ROLE wd_admin;
SELECT orch_define('wd_meddle', '{"probes": {"at": "wd_app.meddle()"}, "steps": [
    {"step_id": "gate", "type": "human_approval"}]}') AS version;
SELECT length(orch_publish('wd_meddle', 1)) > 0 AS published;
RESET ROLE;
SET TimeZone = 'America/New_York';
SET DateStyle = 'SQL, DMY';
SELECT orch_start('wd_meddle', '{}') AS meddle \gset
SELECT probe_pins ->> 'at' AS pinned_in_utc_iso FROM orch.runs WHERE id = :meddle;
SHOW search_path;
SHOW TimeZone;
SELECT state, reason_code FROM orch.runs WHERE id = :meddle;
RESET TimeZone;
RESET DateStyle;
SELECT orch_cancel_run(:meddle);

-- A probe function whose owner the publisher does not trust (neither a
-- superuser nor a role whose privileges it has: whoever owns the function
-- can replace it) is refused at publish (42501), and at a gate if its owner
-- changed after (then it counts as drift, as a failing probe).
CREATE FUNCTION wd_app.foreign_owned() RETURNS int LANGUAGE sql STABLE AS 'SELECT 1';
ALTER FUNCTION wd_app.foreign_owned() OWNER TO wd_producer;
GRANT USAGE ON SCHEMA wd_app TO wd_producer;
SET ROLE wd_admin;
SELECT orch_define('wd_foreign', '{"probes": {"one": "wd_app.foreign_owned()"}, "steps": [
    {"step_id": "gate", "type": "human_approval"}]}') AS version;
SELECT pg_temp.err($$SELECT orch_publish('wd_foreign', 1)$$);
RESET ROLE;
CREATE FUNCTION wd_app.later_foreign() RETURNS int LANGUAGE sql STABLE AS 'SELECT 1';
SET ROLE wd_admin;
SELECT orch_define('wd_later', '{"probes": {"one": "wd_app.later_foreign()"}, "steps": [
    {"step_id": "a", "queue": "wd_later_q", "handler": "h"},
    {"step_id": "gate", "type": "human_approval", "depends_on": ["a"]}]}') AS version;
SELECT length(orch_publish('wd_later', 1)) > 0 AS published;
RESET ROLE;
SELECT orch_start('wd_later', '{}') AS later \gset
ALTER FUNCTION wd_app.later_foreign() OWNER TO wd_producer;
SELECT count(orch_complete(d.task_id, d.lease_token)) AS completed
  FROM orch_dequeue('wd_later_q', 'w') d;
SELECT state, reason_code, drift -> 'one' ->> 'live' AS live FROM orch.runs WHERE id = :later;
-- a drift-stopped run waits for a person: it is in the review queue
SELECT kind, queue, state, reason_code, error,
       action = format('SELECT orch_acknowledge_drift(%s, <approval_ref>), then orch_resume_run(%s)', :later, :later) AS action_names_the_run
  FROM orch_review_queue WHERE run_id = :later;
SELECT orch_cancel_run(:later);
SELECT count(*) AS left_in_review FROM orch_review_queue WHERE run_id = :later;
