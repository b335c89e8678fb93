-- Data safety and security defects of 0.3.0, each reproduced and fixed:
-- secret lease tokens, effective actor, tenant isolation basics, interval
-- caps, the auto-create setting, rate-limit accounting, resume data and
-- lease columns after an attempt, 64-bit advisory lock keys, delayed work
-- outside the claim index, bounded owner-limited batch claims.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
CALL pg_temp.create_roles('sf_worker', 'sf_worker2', 'sf_producer', 'sf_reader', 'sf_admin',
                          'sf_worker_a', 'sf_producer_a', 'sf_approver');
SET client_min_messages = warning;  -- roles outlive the database: no "already a member" notices
GRANT orch_worker TO sf_worker, sf_worker2, sf_worker_a;
GRANT orch_producer TO sf_producer, sf_producer_a;
GRANT orch_reader TO sf_reader;
GRANT orch_admin TO sf_admin;
GRANT orch_approver TO sf_approver;
RESET client_min_messages;

-- ---------------------------------------------------------------------------
-- 2. Lease tokens are secrets: a worker gets its own from the claim; the
--    audit views and orch_history show them to orch_admin only.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('sf_tok', '{"n": 1}') AS tok_task \gset
SET ROLE sf_worker;
SELECT task_id = :tok_task AS claimed, lease_token AS tok FROM orch_dequeue('sf_tok', 'w1') \gset
SELECT :'claimed' AS claimed;
RESET ROLE;
SET ROLE sf_worker2;
-- another worker finds no token anywhere
SELECT count(*) FILTER (WHERE lease_token IS NOT NULL) AS tokens_in_events FROM orch_events WHERE task_id = :tok_task;
SELECT count(*) FILTER (WHERE lease_token IS NOT NULL) AS tokens_in_history FROM orch_history(:tok_task);
SELECT pg_temp.try(format('SELECT orch_complete(%s, %L)', :tok_task, gen_random_uuid())) AS complete_with_a_guess;
RESET ROLE;
SET ROLE sf_reader;
SELECT count(*) FILTER (WHERE lease_token IS NOT NULL) AS reader_tokens FROM orch_events WHERE task_id = :tok_task;
RESET ROLE;
SET ROLE sf_admin;
SELECT count(*) FILTER (WHERE lease_token = :'tok') AS admin_sees_token FROM orch_events WHERE task_id = :tok_task;
RESET ROLE;
SET ROLE sf_worker;
SELECT orch_complete(:tok_task, :'tok') AS completed;
SELECT count(*) FILTER (WHERE lease_token IS NOT NULL) AS own_attempt_tokens FROM orch_attempts WHERE task_id = :tok_task;
RESET ROLE;

-- Events record the effective role as actor; the worker name is a label.
SELECT from_state, to_state, actor, label FROM orch_events WHERE task_id = :tok_task ORDER BY event_id;

-- orch_confirm: the decision is the role's; the name it gives is a label.
SELECT orch_enqueue('sf_conf', '{}') AS conf_task \gset
SELECT lease_token AS ctok FROM orch_dequeue('sf_conf', 'w1') \gset
SELECT orch_await_confirmation(:conf_task, :'ctok', '{"q": "ok?"}');
SET ROLE sf_approver;
SELECT orch_confirm(:conf_task, true, 'the CEO', 'fine');
RESET ROLE;
SELECT actor, label, note FROM orch_events WHERE task_id = :conf_task AND reason_code = 'confirmation_approved';
SELECT resume_data FROM orch_dequeue('sf_conf', 'w1');

-- ---------------------------------------------------------------------------
-- Tenant isolation basics (test/pgtap/tenants.sql has the full matrix).
-- ---------------------------------------------------------------------------
SELECT orch_bind_tenant('sf_worker_a', 'sfa') AS bound, orch_bind_tenant('sf_worker_a', 'sfa') AS again;
SELECT orch_bind_tenant('sf_producer_a', 'sfa');
SELECT orch_enqueue('sf_ten', '{"t": "b"}', tenant => 'sfb') AS b_task \gset
SET ROLE sf_producer_a;
SELECT orch_caller_tenants();
SELECT orch_enqueue('sf_ten', '{"t": "a"}') AS a_task \gset
SELECT tenant_id AS default_tenant_is_binding FROM orch_tasks WHERE task_id = :a_task;
SELECT pg_temp.try($$SELECT orch_enqueue('sf_ten', '{}', tenant => 'sfb')$$) AS enqueue_other_tenant;
SELECT count(*) AS visible, count(*) FILTER (WHERE tenant_id <> 'sfa') AS other_tenants FROM orch_tasks;
SELECT pg_temp.try(format('SELECT state FROM orch_status(%s)', :b_task)) AS status_other_tenant;
SELECT pg_temp.try(format('SELECT orch_cancel(%s)', :b_task)) AS cancel_other_tenant;
RESET ROLE;
SET ROLE sf_worker_a;
SELECT pg_temp.try($$SELECT count(*) FROM orch_dequeue('sf_ten', 'wa', 10, tenant => 'sfb')$$) AS claim_other_tenant;
SELECT payload ->> 't' AS claimed_tenant FROM orch_dequeue('sf_ten', 'wa', 10);
SELECT pg_temp.try('SELECT count(*) FROM orch_maintain()') AS maintain_bound;
RESET ROLE;
SELECT state FROM orch_status(:b_task);
SELECT orch_unbind_tenant('sf_worker_a', 'sfa') AS unbound, orch_unbind_tenant('sf_worker_a', 'sfa') AS again;
SELECT pg_temp.try($$SELECT orch_bind_tenant('postgres', 'sfa')$$) AS bind_superuser,
       pg_temp.try($$SELECT orch_bind_tenant('no_such_role', 'sfa')$$) AS bind_unknown,
       pg_temp.try($$SELECT orch_bind_tenant('sf_worker', '')$$) AS bind_empty;
SELECT entity, tenant_id, from_state, to_state, reason_code, actor FROM orch_events
 WHERE entity = 'tenant_binding' AND coalesce(to_state, from_state) LIKE 'sf\_%' ORDER BY event_id;

-- ---------------------------------------------------------------------------
-- 7. A producer cannot block a queue with an absurd timeout.
-- ---------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT orch_enqueue('sf_cap', '{}', timeout => '292300 years')$$) AS huge_timeout;
SELECT pg_temp.try($$SELECT orch_enqueue('sf_cap', '{}', timeout => '200 years')$$) AS over_cap;
SELECT orch_enqueue('sf_cap', '{}', timeout => '100 years') > 0 AS at_cap;
SELECT count(*) AS claimable FROM orch_dequeue('sf_cap', 'w1');

-- ---------------------------------------------------------------------------
-- 10. Only a superuser may change orchestrator.auto_create_queues.
-- ---------------------------------------------------------------------------
SET ROLE sf_producer;
SELECT pg_temp.try($$SELECT set_config('orchestrator.auto_create_queues', 'on', false)$$) AS producer_sets_it;
RESET ROLE;
SET orchestrator.auto_create_queues = off;
SET ROLE sf_producer;
SELECT pg_temp.try($$SELECT orch_enqueue('sf_nowhere', '{}')$$) AS enqueue_missing_queue;
RESET ROLE;
RESET orchestrator.auto_create_queues;

-- ---------------------------------------------------------------------------
-- 4. Rate limits: READ COMMITTED only, windows on the clock.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('sf_rate', '{"rate_limit": {"count": 1, "per": "1 second", "on_exceed": "error"}}') IS NOT NULL AS created;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.try($$SELECT orch_enqueue('sf_rate', '{}', owner => 'o')$$) AS repeatable_read;
ROLLBACK;
BEGIN;
SELECT orch_enqueue('sf_rate', '{"n": 1}', owner => 'o') > 0 AS first;
SELECT pg_temp.try($$SELECT orch_enqueue('sf_rate', '{"n": 2}', owner => 'o')$$) AS second_at_once;
SELECT pg_sleep(1.2);
-- the window is measured on the clock, not from the transaction's start
SELECT orch_enqueue('sf_rate', '{"n": 3}', owner => 'o') > 0 AS third_after_a_window;
COMMIT;
-- rate windows are per tenant
SELECT orch_enqueue('sf_rate', '{"n": 4}', owner => 'o', tenant => 'other') > 0 AS other_tenant_own_budget;

-- ---------------------------------------------------------------------------
-- 14. What an attempt was handed is not handed to the next; the lease ends
--     with the attempt.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('sf_resume', '{}') AS rs_task \gset
SELECT lease_token AS rtok FROM orch_dequeue('sf_resume', 'w1') \gset
SELECT orch_await_tool(:rs_task, :'rtok', 'geo', '{}');
SELECT orch_resume(:rs_task, '{"lat": 1}');
SELECT lease_token AS rtok, resume_data FROM orch_dequeue('sf_resume', 'w1') \gset
SELECT :'resume_data' AS first_claim_resume_data;
SELECT state FROM orch_fail(:rs_task, :'rtok', 'RATE_LIMITED', 'later', '0 seconds');
SELECT lease_expires_at IS NULL AS lease_gone, resume_data IS NULL AS resume_data_gone
  FROM orch.tasks WHERE id = :rs_task;
SELECT lease_token AS rtok, resume_data IS NULL AS retry_claim_has_no_old_result FROM orch_dequeue('sf_resume', 'w1') \gset
SELECT :'retry_claim_has_no_old_result' AS retry_claim_has_no_old_result;
SELECT orch_complete(:rs_task, :'rtok');
SELECT lease_expires_at IS NULL AS no_lease_after_completion FROM orch_status(:rs_task);

-- ---------------------------------------------------------------------------
-- 16. Advisory lock keys are 64-bit hashes: both int4 halves.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('sf_lock', '{"concurrency_key_limit": 1}') IS NOT NULL AS created;
BEGIN;
SELECT orch_enqueue('sf_lock', '{}', concurrency_key => 'k1') > 0 AS enqueued;
WITH h AS (SELECT hashtextextended(E'key\x1fsf_lock\x1fdefault\x1fk1', 28530) AS h)
SELECT count(*) AS key_lock_held
  FROM pg_locks l, h
 WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.objsubid = 2
   AND l.classid = ((h.h >> 32) & 4294967295)::oid AND l.objid = (h.h & 4294967295)::oid;
COMMIT;

-- ---------------------------------------------------------------------------
-- 9. Work that is not due stays out of the claim index.
-- ---------------------------------------------------------------------------
SELECT count(*) AS enqueued FROM orch_enqueue_batch('sf_future',
    array_fill('{"later": true}'::jsonb, ARRAY[500]), run_at => now() + interval '1 day');
SELECT orch_enqueue('sf_future', '{"soon": true}', run_at => clock_timestamp() + interval '300 milliseconds') AS soon_task \gset
SELECT orch_enqueue('sf_future', '{"now": true}') AS now_task \gset
SELECT count(*) FILTER (WHERE ready_at IS NOT NULL) AS in_claim_index,
       count(*) FILTER (WHERE ready_at IS NULL) AS delayed
  FROM orch.tasks WHERE queue = 'sf_future';
SELECT payload FROM orch_dequeue('sf_future', 'w1', 10);
SELECT pg_sleep(0.4);
-- due now: the next claim lets it in and takes it
SELECT payload FROM orch_dequeue('sf_future', 'w1', 10);
-- a retry wait leaves the claim index too, and is eligible once due
SELECT orch_enqueue('sf_retry_wait', '{}', retry_policy => '{"backoff": "fixed", "initial_delay": "1 second"}') AS rw_task \gset
SELECT lease_token AS rwtok FROM orch_dequeue('sf_retry_wait', 'w1') \gset
SELECT state, reason_code FROM orch_fail(:rw_task, :'rwtok', 'TRANSIENT', 'flaky');
SELECT ready_at IS NULL AS out_of_claim_index, retry_at IS NOT NULL AS has_retry_at FROM orch.tasks WHERE id = :rw_task;
SELECT count(*) AS claimed_early FROM orch_dequeue('sf_retry_wait', 'w1');
SELECT pg_sleep(1.1);
SELECT task_id = :rw_task AS claimed_when_due, attempt FROM orch_dequeue('sf_retry_wait', 'w1');
-- orch_maintain lets due work in too, without a claim
SELECT orch_enqueue('sf_maint_wake', '{}', run_at => clock_timestamp() + interval '200 milliseconds') AS mw_task \gset
SELECT pg_sleep(0.3);
SELECT count > 0 AS woken FROM orch_maintain() WHERE action = 'delayed_woken';
SELECT ready_at IS NOT NULL AS claimable FROM orch.tasks WHERE id = :mw_task;

-- ---------------------------------------------------------------------------
-- 8. Owner-limited batch claims: one pass, limits respected, work bounded.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('sf_owners', '{"owner_limit": 2}') IS NOT NULL AS created;
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue('sf_owners', jsonb_build_object('i', i), owner => 'owner-' || (i % 300))
      FROM generate_series(1, 900) i) s;
SET statement_timeout = '60s';
SELECT count(*) AS claimed, count(DISTINCT t.owner) AS owners, max(n) AS most_per_owner
  FROM (SELECT c.task_id, count(*) OVER (PARTITION BY t.owner) AS n
          FROM orch_dequeue('sf_owners', 'w1', 10000) c JOIN orch.tasks t ON t.id = c.task_id) c
  JOIN orch.tasks t ON t.id = c.task_id;
RESET statement_timeout;
SELECT count(*) AS claimed_after_limit FROM orch_dequeue('sf_owners', 'w1', 10000);

-- ---------------------------------------------------------------------------
-- 6. Concurrency slots: only executing tasks hold one.
-- ---------------------------------------------------------------------------
-- a lowered limit sends back every claimable member, resumed ones included
SELECT orch_create_queue('sf_lower', '{"concurrency_key_limit": 2}') IS NOT NULL AS created;
SELECT orch_enqueue('sf_lower', '{"n": 1}', concurrency_key => 'k') AS low1 \gset
SELECT orch_enqueue('sf_lower', '{"n": 2}', concurrency_key => 'k') AS low2 \gset
CREATE TEMP TABLE sf_held AS SELECT task_id, lease_token FROM orch_dequeue('sf_lower', 'w', 10);
SELECT count(*) AS parked FROM sf_held h, LATERAL orch_await_tool(h.task_id, h.lease_token, 't', '{}') a;
SELECT orch_resume(:low1, '{}'), orch_resume(:low2, '{}');
SELECT orch_configure_queue('sf_lower', '{"concurrency_key_limit": 1}') IS NOT NULL AS lowered;
SELECT count(*) FILTER (WHERE ready_at IS NOT NULL) AS claimable, count(*) FILTER (WHERE gated) AS waiting
  FROM orch.tasks WHERE queue = 'sf_lower';
SELECT count(*) AS executing_at_once FROM orch_dequeue('sf_lower', 'w', 10);
-- a retry due at once competes for its slot: a better waiting task goes first
SELECT orch_create_queue('sf_again', '{"concurrency_key_limit": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('sf_again', '{"n": "a"}', concurrency_key => 'k') AS ag_a \gset
SELECT lease_token AS agtok FROM orch_dequeue('sf_again', 'w') \gset
SELECT orch_enqueue('sf_again', '{"n": "b"}', concurrency_key => 'k', priority => -1) AS ag_b \gset
SELECT gated AS b_waits FROM orch.tasks WHERE id = :ag_b;
SELECT state FROM orch_fail(:ag_a, :'agtok', 'RATE_LIMITED', 'busy', '0 seconds');
SELECT payload ->> 'n' AS next_claim FROM orch_dequeue('sf_again', 'w');
SELECT payload ->> 'n' AS gated_task, gated FROM orch.tasks WHERE queue = 'sf_again' AND state <> 'executing';

-- ---------------------------------------------------------------------------
-- Tenant isolation holds through SET ROLE to a group role and role renames;
-- concurrency keys and commands' origin tasks are a tenant's own.
-- ---------------------------------------------------------------------------
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sf_login_a') THEN
        CREATE ROLE sf_login_a LOGIN;
    END IF;
END $$;
SET client_min_messages = warning;
GRANT orch_worker, orch_producer TO sf_login_a;
RESET client_min_messages;
SELECT orch_bind_tenant('sf_login_a', 'sfa');
SELECT orch_enqueue('sf_grp', '{"t": "b"}', tenant => 'sfb') AS grp_b \gset
SET SESSION AUTHORIZATION sf_login_a;
SELECT orch_caller_tenants() AS as_login;
SET ROLE orch_worker;
-- the login role's binding still holds after SET ROLE to an unbound group
SELECT orch_caller_tenants() AS after_set_role_group;
SELECT count(*) AS claimed_other_tenant FROM orch_dequeue('sf_grp', 'w', 10);
SELECT count(*) FILTER (WHERE tenant_id <> 'sfa') AS other_tenant_rows FROM orch_tasks;
RESET ROLE;
-- an origin task of another tenant does not exist for the command
SET ROLE orch_producer;
SELECT pg_temp.try(format($$SELECT command_id FROM orch_command('k', 'sf-cmd-1', '{}', %s)$$, :grp_b)) AS command_on_other_tenants_task;
RESET ROLE;
RESET SESSION AUTHORIZATION;
ALTER ROLE sf_login_a RENAME TO sf_login_a2;
SET SESSION AUTHORIZATION sf_login_a2;
SELECT orch_caller_tenants() AS after_rename;
RESET SESSION AUTHORIZATION;
ALTER ROLE sf_login_a2 RENAME TO sf_login_a;
SELECT role, tenant_id FROM orch_tenant_bindings WHERE role = 'sf_login_a';
-- keys: tenant sfa's key "k" and tenant sfb's key "k" are two keys
SELECT orch_create_queue('sf_tkeys', '{"concurrency_key_limit": 1}') IS NOT NULL AS created;
SELECT orch_enqueue('sf_tkeys', '{"t": "b"}', concurrency_key => 'k', tenant => 'sfb') > 0 AS b_first;
SELECT orch_enqueue('sf_tkeys', '{"t": "a"}', concurrency_key => 'k', tenant => 'sfa', priority => -1000) > 0 AS a_better;
SELECT tenant_id, gated, ready_at IS NOT NULL AS claimable FROM orch.tasks WHERE queue = 'sf_tkeys' ORDER BY tenant_id;

-- 0.6.0: the lifecycle row trigger has no function-level SET search_path;
-- it pins search_path itself where it runs SQL.  A keyed task written
-- directly (as a role with INSERT on orch.tasks would) under a search_path
-- that puts a planted "=" for text before pg_catalog: the gate's SQL does
-- not reach the plant.
CREATE SCHEMA sf_evil;
CREATE FUNCTION sf_evil.texteq_hijack(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'hijacked'; END $$;
CREATE OPERATOR sf_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = sf_evil.texteq_hijack);
SELECT orch_create_queue('sf_keyed') IS NOT NULL AS created;
SET search_path = sf_evil, pg_catalog, public;
INSERT INTO orch.tasks (queue, state, payload, concurrency_key, reason_code)
VALUES ('sf_keyed', 'queued', '{}', 'k1', 'enqueued'), ('sf_keyed', 'queued', '{}', 'k1', 'enqueued');
RESET search_path;
SELECT count(*) FILTER (WHERE ready_at IS NOT NULL) AS claimable, count(*) FILTER (WHERE gated) AS gated
  FROM orch.tasks WHERE queue = 'sf_keyed';
DROP SCHEMA sf_evil CASCADE;
