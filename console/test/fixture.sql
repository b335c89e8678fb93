-- console/test/fixture.sql: the data scripts/test-console.sh shows in the
-- console, made only through the extension's SQL API (psql, as a superuser,
-- in a fresh database with the extension).
--
-- Roles: console_admin (orch_admin), console_reader (orch_reader only),
-- console_acme (orch_reader, bound to tenant acme).
-- Queues: emails, billing, reports (tasks in every state, dead letters, two
-- tenants, payloads with markup), payments (a dead letter not safe to
-- retry), imports (dead letters to re-drive in bulk), bulkq (130 queued
-- tasks), release and diamond (workflow steps), digests (schedules).
-- Workflow 'release': plan -> design_review (gate) -> build -> unit_tests +
-- integration_tests -> release_approval (gate) -> deploy, and
-- notify_rejected on a rejected design review.  Runs (idempotency keys):
-- fx-ok succeeded, fx-fail failed at deploy (build compensated), fx-wait1
-- and fx-wait2 waiting at design_review, fx-wait3 waiting at release_approval.
-- Workflow 'diamond': start -> left -> left2 -> join and start -> right ->
-- join (an edge that skips a layer); run fx-diamond.
-- Schedules: nightly-report (fired once, into queue digests), release-train
-- (runs of release), hourly-sync (paused), acme-digest (tenant acme).
-- With sub-workflows in the extension: run fx-family and its child runs
-- (queue family).
\set ON_ERROR_STOP 1
SET client_min_messages = warning;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'console_admin') THEN CREATE ROLE console_admin LOGIN; END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'console_reader') THEN CREATE ROLE console_reader LOGIN; END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'console_acme') THEN CREATE ROLE console_acme LOGIN; END IF;
END $$;
GRANT orch_admin TO console_admin;
GRANT orch_reader TO console_reader;
GRANT orch_reader TO console_acme;
SELECT orch_bind_tenant('console_acme', 'acme');

SELECT orch_create_queue('emails', '{"max_attempts": 3}');
SELECT orch_create_queue('billing', '{}');
SELECT orch_create_queue('reports', '{"initial_delay": "1 hour", "max_delay": "2 hours"}');
SELECT orch_create_queue('release', '{"lease": "1 hour"}');

-- task(queue, payload, action, tenant, err, corr): enqueue one task, claim it at once
-- and act on it: 'complete', an error class to fail with, 'tool',
-- 'confirm', or 'claim' (left executing).
CREATE FUNCTION pg_temp.task(q text, p jsonb, action text, tenant text DEFAULT NULL,
                             err text DEFAULT 'simulated failure', corr text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
    t record;
BEGIN
    id := orch_enqueue(q, p, tenant => tenant, correlation_id => corr);
    SELECT * INTO t FROM orch_dequeue(q, 'fixture-worker', lease => '1 hour', tenant => tenant);
    IF t.task_id IS DISTINCT FROM id THEN
        RAISE EXCEPTION 'claimed % instead of %', t.task_id, id;
    END IF;
    CASE action
        WHEN 'complete' THEN PERFORM orch_complete(id, t.lease_token, jsonb_build_object('ok', true));
        WHEN 'tool' THEN PERFORM orch_await_tool(id, t.lease_token, 'geocoder', '{"address": "Rua Augusta 1"}');
        WHEN 'confirm' THEN PERFORM orch_await_confirmation(id, t.lease_token, '{"question": "Refund 120 EUR?"}');
        WHEN 'claim' THEN NULL;
        ELSE PERFORM orch_fail(id, t.lease_token, action, err);
    END CASE;
    RETURN id;
END $$;

-- emails: completed, dead letters (one with markup in its payload, error and
-- correlation id), tenant acme
SELECT pg_temp.task('emails', jsonb_build_object('to', 'user' || i || '@example.com'), 'complete') FROM generate_series(1, 4) i;
SELECT pg_temp.task('emails', '{"to": "mallory@example.com", "note": "<script>alert(1)</script>", "html": "<img src=x onerror=alert(2)>"}',
                    'NON_RETRYABLE', err => '</pre><script>alert(3)</script>', corr => '<b>corr-xss</b>') AS xss_task \gset
SELECT pg_temp.task('emails', jsonb_build_object('to', 'bounce' || i || '@example.com'), 'NON_RETRYABLE', err => 'SMTP 550 mailbox unavailable')
  FROM generate_series(1, 2) i;
SELECT pg_temp.task('emails', '{"to": "ops@acme.example"}', 'complete', tenant => 'acme');
SELECT pg_temp.task('emails', '{"to": "cfo@acme.example"}', 'NON_RETRYABLE', tenant => 'acme', err => 'SMTP 550 (acme)');
SELECT orch_enqueue('emails', '{"to": "sales@acme.example"}', tenant => 'acme');

-- billing: three COMPENSATION_REQUIRED dead letters
SELECT pg_temp.task('billing', jsonb_build_object('invoice', 'INV-' || i, 'amount', 100 * i), 'COMPENSATION_REQUIRED',
                    err => 'charge captured twice: refund needed') FROM generate_series(1, 3) i;

-- reports: every open state, a retry wait, a cancelled task
SELECT pg_temp.task('reports', '{"report": "weekly"}', 'TRANSIENT', err => 'warehouse timeout');     -- retry wait (1 hour)
SELECT pg_temp.task('reports', '{"report": "geo"}', 'tool');
SELECT pg_temp.task('reports', '{"report": "refunds"}', 'confirm');
SELECT pg_temp.task('reports', '{"report": "daily"}', 'claim');                                      -- executing
SELECT orch_cancel(orch_enqueue('reports', '{"report": "obsolete"}'), 'no longer needed');
SELECT orch_enqueue('reports', '{"report": "monthly"}', run_at => now() + interval '1 day');           -- delayed
SELECT orch_enqueue('reports', jsonb_build_object('report', 'adhoc-' || i)) FROM generate_series(1, 3) i;  -- ready

-- payments: work not safe to retry; a failure is a dead letter that asks
-- for a second look before it is re-driven
SELECT orch_create_queue('payments', '{"retry_safety": "NOT_SAFE_TO_RETRY"}');
SELECT pg_temp.task('payments', '{"charge": "CH-1", "amount": 120}', 'TRANSIENT', err => 'gateway timeout after capture');

-- imports: dead letters for the bulk re-drive; bulkq: 130 queued tasks
-- (paging, payload search, bulk cancel)
SELECT orch_create_queue('imports', '{}');
SELECT pg_temp.task('imports', jsonb_build_object('file', 'f' || i || '.csv'), 'NON_RETRYABLE', err => 'bad header')
  FROM generate_series(1, 4) i;
SELECT orch_create_queue('bulkq', '{}');
SELECT count(*) FROM orch_enqueue_batch('bulkq',
  ARRAY(SELECT jsonb_build_object('n', i, 'grp', CASE WHEN i % 10 = 0 THEN 'a' ELSE 'b' END) FROM generate_series(1, 130) i));

-- the workflow
SELECT orch_define('release', $spec$
{
  "description": "Console fixture: a release with two gates and parallel tests",
  "policies": {"queue": "release", "deadline": "1 day"},
  "steps": [
    {"step_id": "plan", "handler": "release.plan"},
    {"step_id": "design_review", "type": "human_approval", "depends_on": ["plan"], "timeout": "8 hours",
     "on_failure": "notify_rejected"},
    {"step_id": "build", "handler": "release.build", "depends_on": ["design_review"],
     "compensation": {"handler": "release.discard_build"}},
    {"step_id": "unit_tests", "handler": "release.unit_tests", "depends_on": ["build"]},
    {"step_id": "integration_tests", "handler": "release.integration_tests", "depends_on": ["build"]},
    {"step_id": "release_approval", "type": "human_approval", "depends_on": ["unit_tests", "integration_tests"],
     "timeout": "1 day"},
    {"step_id": "deploy", "type": "external_call", "handler": "release.deploy", "depends_on": ["release_approval"],
     "retry_safety": "NOT_SAFE_TO_RETRY", "compensation": {"handler": "release.rollback"}},
    {"step_id": "notify_rejected", "type": "notify", "handler": "release.notify"}
  ]
}$spec$) AS v \gset
SELECT orch_publish('release', :v);

-- drive(): a worker that runs every claimable step task of queue release
-- (deploy fails NON_RETRYABLE in the scenario "failure").
CREATE FUNCTION pg_temp.drive() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    t record;
    n int := 0;
BEGIN
    LOOP
        SELECT * INTO t FROM orch_dequeue('release', 'fixture-worker');
        EXIT WHEN NOT FOUND OR n > 100;
        n := n + 1;
        IF t.step_key = 'deploy' AND t.payload -> 'input' ->> 'scenario' = 'failure' THEN
            PERFORM orch_fail(t.task_id, t.lease_token, 'NON_RETRYABLE', 'deploy: canary health check failed');
        ELSE
            PERFORM orch_complete(t.task_id, t.lease_token,
                                  jsonb_build_object('by', 'fixture-worker', 'step', t.step_key, 'artifact', 'build-' || t.task_id));
        END IF;
    END LOOP;
    RETURN n;
END $$;

SELECT orch_start('release', '{"change": "CHG-100", "scenario": "ok"}', idempotency_key => 'fx-ok') AS r_ok \gset
SELECT orch_start('release', '{"change": "CHG-101", "scenario": "failure"}', idempotency_key => 'fx-fail') AS r_fail \gset
SELECT orch_start('release', '{"change": "CHG-102 <script>alert(4)</script>", "scenario": "wait"}',
                  idempotency_key => 'fx-wait1', correlation_id => 'req-102') AS r_wait1 \gset
SELECT orch_start('release', '{"change": "CHG-103", "scenario": "wait"}', idempotency_key => 'fx-wait2') AS r_wait2 \gset
SELECT orch_start('release', '{"change": "CHG-104", "scenario": "wait"}', idempotency_key => 'fx-wait3') AS r_wait3 \gset
SELECT pg_temp.drive();
SELECT orch_approve(:r_ok, 'design_review', 'FX-DR-1', 'alice', 'plan reviewed');
SELECT orch_approve(:r_fail, 'design_review', 'FX-DR-2', 'alice', 'plan reviewed');
SELECT orch_approve(:r_wait3, 'design_review', 'FX-DR-3', 'alice', 'plan reviewed');
SELECT pg_temp.drive();
SELECT orch_approve(:r_ok, 'release_approval', 'FX-REL-1', 'bob', 'window open');
SELECT orch_approve(:r_fail, 'release_approval', 'FX-REL-2', 'bob', 'window open');
SELECT pg_temp.drive();
SELECT pg_temp.drive();   -- the failed run's compensation

-- a diamond whose one side is longer: the edge right -> join skips a layer
SELECT orch_define('diamond', $spec$
{
  "description": "Console fixture: a diamond with a long edge",
  "policies": {"queue": "diamond"},
  "steps": [
    {"step_id": "start", "handler": "d.start"},
    {"step_id": "left", "handler": "d.left", "depends_on": ["start"]},
    {"step_id": "left2", "handler": "d.left2", "depends_on": ["left"]},
    {"step_id": "right", "handler": "d.right", "depends_on": ["start"]},
    {"step_id": "join", "handler": "d.join", "depends_on": ["left2", "right"]}
  ]
}$spec$) AS v \gset
SELECT orch_publish('diamond', :v);
SELECT orch_start('diamond', '{"shape": "diamond"}', idempotency_key => 'fx-diamond');

-- a run whose first step waits for a signal, with a signal of another name
-- kept for a later wait
SELECT orch_define('payment', '{"description": "Console fixture: a wait for a signal", "steps": [
    {"step_id": "paid", "type": "wait", "signal": "payment_received", "timeout": "3 days"},
    {"step_id": "ship", "queue": "shipping", "handler": "ship", "depends_on": ["paid"]}]}') AS pv \gset
SELECT orch_publish('payment', :pv);
SELECT orch_start('payment', '{"order": "ORD-7"}', idempotency_key => 'fx-signal') AS r_signal \gset
SELECT orch_signal(:r_signal, 'refund_requested', '{"reason": "duplicate"}', 'fx-signal-1');

-- schedules (nothing ticks them but this file: no maintenance job runs):
-- nightly-report fired one slot into queue digests (a tick a day ahead),
-- release-train starts runs of release, hourly-sync is paused, acme-digest
-- belongs to tenant acme; the target payload carries markup
SELECT orch_create_queue('digests', '{}');
SELECT orch_schedule('nightly-report', '30 2 * * *',
                     '{"queue": "digests", "payload": {"report": "sales", "note": "<script>alert(5)</script>"}}',
                     '{"timezone": "Europe/Berlin"}');
SELECT orch_schedule_tick(as_of => now() + interval '1 day');
SELECT orch_schedule('release-train', '0 9 * * mon-fri',
                     '{"definition": "release", "input": {"change": "CHG-TRAIN", "scenario": "wait"}}',
                     '{"timezone": "America/New_York", "overlap": "queue_one", "catch_up": "all", "catch_up_window": "2 hours"}');
SELECT orch_schedule('hourly-sync', '@hourly', '{"queue": "digests", "payload": {"sync": true}}');
SELECT orch_pause_schedule('hourly-sync');
SELECT orch_schedule('acme-digest', '*/15 * * * *', '{"queue": "digests", "payload": {"digest": "acme"}}',
                     '{"tenant": "acme"}');

-- sub-workflows, when the extension has them (orch_runs.parent_run_id): run
-- fx-family, a task and then two subflow steps, one child run (one) and a
-- map of two (each); the first child to be worked on has finished
SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'orch_runs'::regclass
                AND attname = 'parent_run_id' AND NOT attisdropped) AS has_subflows \gset
\if :has_subflows
SELECT orch_create_queue('family', '{}');
SELECT orch_define('fx_item', '{"description": "Console fixture: a child run",
    "steps": [{"step_id": "work", "queue": "family", "handler": "work"}]}') AS iv \gset
SELECT orch_publish('fx_item', :iv);
SELECT orch_define('fx_family', '{"description": "Console fixture: a run with child runs", "steps": [
    {"step_id": "prepare", "queue": "family", "handler": "prepare"},
    {"step_id": "one", "type": "subflow", "definition": "fx_item", "depends_on": ["prepare"], "input": "$.input"},
    {"step_id": "each", "type": "subflow", "definition": "fx_item", "depends_on": ["prepare"],
     "map": {"over": "$.input.items"}}]}') AS fv \gset
SELECT orch_publish('fx_family', :fv);
SELECT orch_start('fx_family', '{"items": [{"n": 1}, {"n": 2}]}', idempotency_key => 'fx-family');
SELECT count(orch_complete(c.task_id, c.lease_token, '{"prepared": true}'))
  FROM orch_dequeue('family', 'fixture-worker', 1) c;   -- prepare: the children start
SELECT count(orch_complete(c.task_id, c.lease_token, '{"done": true}'))
  FROM orch_dequeue('family', 'fixture-worker', 1) c;   -- one child's task
\endif

-- the counters, as orch_maintain folds them
SELECT orch_metrics_refresh();

SELECT definition, run_id, idempotency_key, state FROM orch_runs ORDER BY run_id;
SELECT queue, state, count(*) FROM orch_tasks GROUP BY 1, 2 ORDER BY 1, 2;
