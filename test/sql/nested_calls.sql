-- nested_calls: an API call made while another runs (a trigger of yours on
-- orch.tasks that enqueues follow-up work as a task completes) records its
-- own transitions as its own, and hands the outer call its context back:
-- the outer call's transitions keep their actor and reason, however the
-- inner call ends (returns, or fails inside an exception block of yours).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
SELECT orch_create_queue('nc_main') IS NOT NULL AS main_queue,
       orch_create_queue('nc_follow') IS NOT NULL AS follow_queue;

-- Fires before the lifecycle trigger (triggers fire in name order): the
-- lifecycle trigger of the same row runs after the nested call ended.  It
-- runs with the search_path of the outer call, hence the schema.
CREATE FUNCTION pg_temp.nc_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.queue = 'nc_main' AND OLD.state = 'executing' AND NEW.state = 'completed' THEN
        PERFORM public.orch_enqueue('nc_follow', jsonb_build_object('after', NEW.id));
        IF NEW.payload ? 'fail_inner' THEN
            BEGIN
                PERFORM public.orch_enqueue('nc_keys', '{"k": 2}', idempotency_key => 'nc-key');
            EXCEPTION WHEN OTHERS THEN
                RAISE NOTICE 'inner call failed: %', SQLSTATE;
            END;
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER a_nc_follow BEFORE UPDATE ON orch.tasks
    FOR EACH ROW EXECUTE FUNCTION pg_temp.nc_follow();

-- the key the failing inner call reuses with another payload
SELECT orch_enqueue('nc_keys', '{"k": 1}', idempotency_key => 'nc-key') > 0 AS keyed;
SELECT count(*) AS enqueued
  FROM orch_enqueue_batch('nc_main', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}',
                                           '{"n": 4, "fail_inner": true}']::jsonb[]);
CREATE TEMP TABLE nc_claims AS
    SELECT task_id, lease_token FROM orch_dequeue('nc_main', 'nc-worker', 4);
SELECT count(*) AS claimed FROM nc_claims;

-- two in one batch, one alone, one whose inner call fails and is caught
SELECT orch_complete_batch(array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id)) AS batch
  FROM (SELECT * FROM nc_claims ORDER BY task_id LIMIT 2) c;
SELECT orch_complete(task_id, lease_token, '{"ok": true}') AS single
  FROM (SELECT * FROM nc_claims ORDER BY task_id OFFSET 2 LIMIT 1) c;
SELECT orch_complete(task_id, lease_token, '{"ok": true}') AS after_failed_inner
  FROM (SELECT * FROM nc_claims ORDER BY task_id OFFSET 3) c;

-- Every completion is the worker's, reason completed; none is recorded as a
-- direct update, and each task has exactly one completion.
SELECT h.task_id - (SELECT min(task_id) FROM nc_claims) AS task, h.to_state, h.reason_code,
       h.actor = 'nc-worker' OR h.label = 'nc-worker' AS by_worker
  FROM orch.history h
 WHERE h.task_id IN (SELECT task_id FROM nc_claims) AND h.to_state = 'completed'
 ORDER BY 1;
SELECT count(*) AS direct_updates
  FROM orch.history h
 WHERE h.task_id IN (SELECT task_id FROM nc_claims) AND h.reason_code = 'direct_update';

-- The follow-up tasks: one per completion, each enqueued (the nested call's
-- own transition), none of the failed inner call's (its queue holds only the
-- task that first used the key).
SELECT count(*) AS follow_ups,
       count(*) FILTER (WHERE t.state = 'queued') AS queued
  FROM orch.tasks t WHERE t.queue = 'nc_follow';
SELECT count(*) AS keyed_tasks FROM orch.tasks WHERE queue = 'nc_keys';
SELECT count(*) AS follow_up_enqueues
  FROM orch.history h JOIN orch.tasks t ON t.id = h.task_id
 WHERE t.queue = 'nc_follow' AND h.reason_code = 'enqueued';

-- After the calls, a raw update in the same session is a direct update again
-- (no context is left behind by the nested calls).
BEGIN;
SELECT orch_enqueue('nc_main', '{"n": 5}') > 0 AS enqueued_fifth;
UPDATE orch.tasks SET state = 'cancelled'
 WHERE queue = 'nc_main' AND state = 'queued';
SELECT h.reason_code
  FROM orch.history h JOIN orch.tasks t ON t.id = h.task_id
 WHERE t.queue = 'nc_main' AND h.to_state = 'cancelled';
ROLLBACK;

DROP TRIGGER a_nc_follow ON orch.tasks;
