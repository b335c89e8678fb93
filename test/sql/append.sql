-- append (0.6.0): events and attempts are appended without SQL (heap
-- multi-insert, the executor's index routine).  From 0.8.0 a plain
-- enqueue, a claim from the queue and a completion by orch_complete /
-- orch_complete_batch write no event row, and a completion no attempt row:
-- the task row records them (read through orch.history and
-- orch.attempt_history; attempt rows are appended directly on Citus, where
-- the task row cannot record its completion).  The rows are the same as
-- an INSERT writes; a table the direct write cannot serve exactly as an
-- INSERT would (here: a trigger of yours on it) gets the SQL INSERT, so
-- your trigger fires for every row.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
SELECT orch_create_queue('ap_direct') IS NOT NULL AS direct_queue,
       orch_create_queue('ap_sql') IS NOT NULL AS sql_queue;

-- ap_run(queue): four tasks through enqueue (batch and single), claim,
-- complete (batch and single) and a retried failure; the claims are kept
-- in ap_claims.
CREATE TEMP TABLE ap_claims (queue text, task_id bigint, lease_token uuid);
CREATE FUNCTION pg_temp.ap_run(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    done int;
    single text;
    failed text;
BEGIN
    PERFORM orch_enqueue_batch(q, ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
    PERFORM orch_enqueue(q, '{"n": 4}', correlation_id => 'ap-4');
    INSERT INTO ap_claims SELECT q, d.task_id, d.lease_token FROM orch_dequeue(q, 'ap-worker', 4) d;
    SELECT orch_complete_batch(array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id))
      INTO done FROM (SELECT * FROM ap_claims WHERE queue = q ORDER BY task_id LIMIT 2) c;
    SELECT orch_complete(c.task_id, c.lease_token, '{"ok": true}') INTO single
      FROM (SELECT * FROM ap_claims WHERE queue = q ORDER BY task_id OFFSET 2 LIMIT 1) c;
    SELECT f.state || '/' || f.reason_code INTO failed
      FROM (SELECT * FROM ap_claims WHERE queue = q ORDER BY task_id OFFSET 3) c,
           LATERAL orch_fail(c.task_id, c.lease_token, 'TRANSIENT', 'down') f;
    RETURN format('%s completed in a batch, one %s, one failed: %s', done, single, failed);
END $$;

-- 1. The direct path.
SELECT pg_temp.ap_run('ap_direct');

-- 2. The same through SQL: a trigger of yours on orch.events and on
--    orch.attempts (it mirrors what it sees).
CREATE TABLE ap_mirror (tbl text, task_id bigint, what text);
CREATE FUNCTION ap_mirror_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- (fired inside the extension's functions: their search_path, so
    -- qualified; on the partition the row went to: named by its parent)
    INSERT INTO public.ap_mirror VALUES (pg_catalog.split_part(TG_TABLE_NAME, '_', 1), NEW.task_id,
        coalesce(to_jsonb(NEW) ->> 'to_state', to_jsonb(NEW) ->> 'outcome'));
    RETURN NEW;
END $$;
CREATE TRIGGER ap_mirror AFTER INSERT ON orch.events FOR EACH ROW EXECUTE FUNCTION ap_mirror_event();
CREATE TRIGGER ap_mirror AFTER INSERT ON orch.attempts FOR EACH ROW EXECUTE FUNCTION ap_mirror_event();
SELECT pg_temp.ap_run('ap_sql');
-- the trigger saw every event and every attempt row of the queue (the
-- completions are their task rows'; the claim of the failed attempt was
-- written out as its task left executing)
SELECT tbl, what, count(*) FROM ap_mirror m JOIN orch.tasks t ON t.id = m.task_id
 WHERE t.queue = 'ap_sql' GROUP BY 1, 2 ORDER BY 1, 2;
DROP TRIGGER ap_mirror ON orch.events;
DROP TRIGGER ap_mirror ON orch.attempts;

-- 3. Both paths wrote the same rows (ids, times and tokens aside): the
--    n-th task of one queue has the events and attempts of the other's.
CREATE TEMP VIEW ap_rows AS
SELECT t.queue, row_number() OVER (PARTITION BY t.queue ORDER BY t.id) AS n, x.kind, x.row
  FROM orch.tasks t,
       LATERAL (SELECT 'event' AS kind,
                       jsonb_build_object('tenant', e.tenant_id, 'entity', e.entity, 'from', e.from_state,
                                          'to', e.to_state, 'reason', e.reason_code, 'actor', e.actor,
                                          'attempt', e.attempt, 'token', e.lease_token IS NOT NULL,
                                          'note', e.note, 'label', e.label, 'waited', e.waited IS NOT NULL,
                                          'xact', e.xact IS NOT NULL, 'at', e.at IS NOT NULL,
                                          'run', e.run_id) AS row
                  FROM orch.events e WHERE e.task_id = t.id
                UNION ALL
                SELECT 'attempt',
                       jsonb_build_object('tenant', a.tenant_id, 'attempt', a.attempt, 'worker', a.worker,
                                          'token', a.lease_token IS NOT NULL,
                                          'started', a.started_at IS NOT NULL, 'finished', a.finished_at IS NOT NULL,
                                          'outcome', a.outcome, 'class', a.error_class, 'error', a.error,
                                          'retry_at', a.retry_at IS NOT NULL, 'xact', a.xact IS NOT NULL)
                  FROM orch.attempt_history a WHERE a.task_id = t.id) x
 WHERE t.queue IN ('ap_direct', 'ap_sql');
SELECT kind, count(*) FILTER (WHERE queue = 'ap_direct') AS direct,
       count(*) FILTER (WHERE queue = 'ap_sql') AS via_sql
  FROM ap_rows GROUP BY kind ORDER BY kind;
SELECT count(*) AS rows_that_differ
  FROM ((SELECT n, kind, row FROM ap_rows WHERE queue = 'ap_direct'
         EXCEPT ALL SELECT n, kind, row FROM ap_rows WHERE queue = 'ap_sql')
        UNION ALL
        (SELECT n, kind, row FROM ap_rows WHERE queue = 'ap_sql'
         EXCEPT ALL SELECT n, kind, row FROM ap_rows WHERE queue = 'ap_direct')) d;
-- one event row as written by the direct path
SELECT entity, from_state, to_state, reason_code, attempt, label, waited IS NOT NULL AS waited
  FROM orch.events WHERE task_id = (SELECT min(task_id) FROM ap_claims WHERE queue = 'ap_direct') ORDER BY id;
-- event ids follow the order of the transitions
SELECT bool_and(ok) AS ids_in_order FROM (
    SELECT id > lag(id) OVER (PARTITION BY task_id ORDER BY at, id) OR lag(id) OVER (PARTITION BY task_id ORDER BY at, id) IS NULL AS ok
      FROM orch.events WHERE task_id IN (SELECT task_id FROM ap_claims)) s;
-- history reads both the same way
SELECT kind, to_state, outcome FROM orch_history((SELECT min(task_id) FROM ap_claims WHERE queue = 'ap_direct')) ORDER BY at, kind;

-- 4. A failed call leaves nothing: completing with a stale token appends no
--    attempt and no event.
SELECT orch_enqueue('ap_direct', '{"n": 5}') > 0 AS enqueued_fifth;
CREATE TEMP TABLE ap_fifth AS SELECT * FROM orch_dequeue('ap_direct', 'ap-worker');
SELECT count(*) AS events_before FROM orch.events WHERE task_id = (SELECT task_id FROM ap_fifth);
DO $$
BEGIN
    PERFORM orch_complete_batch(ARRAY[(SELECT task_id FROM ap_fifth)], ARRAY[gen_random_uuid()]);
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'orch_complete_batch refused: %', SQLSTATE;
END $$;
DO $$
BEGIN
    PERFORM orch_complete((SELECT task_id FROM ap_fifth), gen_random_uuid());
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'orch_complete refused: %', SQLSTATE;
END $$;
SELECT count(*) AS events_after FROM orch.events WHERE task_id = (SELECT task_id FROM ap_fifth);
SELECT count(*) AS attempts_after FROM orch.attempt_history WHERE task_id = (SELECT task_id FROM ap_fifth);

DROP TABLE ap_mirror;
DROP FUNCTION ap_mirror_event();

-- 5. A stored generated column added to orch.events: the direct write steps
--    aside (the SQL INSERT computes it).  (A cancel writes an event row; an
--    enqueue's and a claim's are recorded by the task row.)
ALTER TABLE orch.events ADD COLUMN ap_shout text GENERATED ALWAYS AS (upper(to_state)) STORED;
SELECT orch_enqueue('ap_direct', '{"n": 6}') AS sixth \gset
SELECT orch_cancel(:sixth) AS cancelled_sixth;
SELECT ap_shout FROM orch.events WHERE id = (SELECT max(id) FROM orch.events);
ALTER TABLE orch.events DROP COLUMN ap_shout;
SELECT orch_enqueue('ap_direct', '{"n": 7}') AS seventh \gset
SELECT orch_cancel(:seventh) AS cancelled_seventh;
SELECT to_state FROM orch.events WHERE id = (SELECT max(id) FROM orch.events);

-- 6. The rows that record their own transitions (orch.history,
--    docs/storage.md).  A retried task: enqueue and first claim recorded by
--    the task row, the claim written out as an event row (same id, time,
--    role, label) when the task leaves executing for its retry wait; the
--    completion and its attempt recorded by the task row too.  What
--    orch_history reads does not change when the claim moves from the row
--    to orch.events.
SELECT orch_create_queue('ap_hist', '{"backoff": "fixed", "initial_delay": "0 seconds"}') IS NOT NULL AS created;
SELECT orch_enqueue('ap_hist', '{"n": 1}') AS h1 \gset
SELECT enqueue_event_id IS NOT NULL AS enqueue_recorded, created_by = current_user AS by_caller,
       created_xact IS NOT NULL AS xact_recorded FROM orch.tasks WHERE id = :h1;
-- the enqueue's event id is the task's own (one sequence numbers both), for
-- every row of a batch too, and no event row has it
SELECT enqueue_event_id = id AS event_id_is_task_id FROM orch.tasks WHERE id = :h1;
CREATE TEMP TABLE ap_hb AS
SELECT orch_enqueue_batch('ap_hist_batch', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]) AS id;
SELECT count(*) AS batch, count(*) FILTER (WHERE t.enqueue_event_id = t.id) AS event_id_is_task_id,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM orch.events e WHERE e.id = t.id)) AS taken_by_an_event_row
  FROM orch.tasks t WHERE t.id IN (SELECT id FROM ap_hb);
CREATE TEMP TABLE ap_h1 AS SELECT * FROM orch_dequeue('ap_hist', 'ap-h-worker');
SELECT claim_event_id IS NOT NULL AS claim_recorded, claim_waited >= 0 AS waited,
       (SELECT count(*) FROM orch.events WHERE task_id = :h1) AS event_rows FROM orch.tasks WHERE id = :h1;
CREATE TEMP TABLE ap_h1_before AS
SELECT id, from_state, to_state, reason_code, actor, label, attempt, lease_token, at, xact, waited
  FROM orch.history WHERE task_id = :h1;
SELECT state FROM orch_fail((SELECT task_id FROM ap_h1), (SELECT lease_token FROM ap_h1), 'TRANSIENT', 'flaky');
-- written out as the task left executing: the row records no claim now
SELECT claim_event_id IS NULL AND claimed_by IS NULL AND claim_xact IS NULL AND claim_waited IS NULL AS no_claim,
       (SELECT count(*) FROM orch.events e JOIN ap_h1_before b ON b.to_state = 'executing' AND e.id = b.id)
         AS claim_rows
  FROM orch.tasks WHERE id = :h1;
CREATE TEMP TABLE ap_h1b AS SELECT * FROM orch_dequeue('ap_hist', 'ap-h-worker');
-- the first claim is an event row now, exactly as it read before
SELECT count(*) AS first_claim_rows, bool_and(e.id = b.id AND e.at = b.at AND e.actor = b.actor
         AND e.label = b.label AND e.attempt = b.attempt AND e.lease_token = b.lease_token
         AND e.xact = b.xact AND e.waited IS NOT DISTINCT FROM b.waited) AS same
  FROM orch.events e JOIN ap_h1_before b ON b.to_state = 'executing' AND e.id = b.id;
SELECT orch_complete((SELECT task_id FROM ap_h1b), (SELECT lease_token FROM ap_h1b), '{}');
SELECT from_state, to_state, reason_code, attempt, label,
       CASE WHEN id IN (SELECT id FROM orch.events) THEN 'event row' ELSE 'recorded' END AS stored
  FROM orch.history WHERE task_id = :h1 ORDER BY id;
-- the ids increase with the transitions, as event ids always did
SELECT bool_and(ok) AS ordered FROM (
  SELECT id > lag(id) OVER (ORDER BY at, id) OR lag(id) OVER (ORDER BY at, id) IS NULL AS ok
    FROM orch.history WHERE task_id = :h1) s;
-- a raw INSERT cannot forge what a row records: only orch_enqueue and
-- orch_enqueue_batch have their enqueue recorded by the row; a raw INSERT's
-- is an event row (with the role that inserted), and what it put in those
-- columns is cleared
INSERT INTO orch.tasks (queue, state, payload, enqueue_event_id, created_by, claim_event_id, claimed_by)
VALUES ('ap_hist', 'queued', '{"raw": true}', -5, 'mallory', -6, 'mallory') RETURNING id AS raw \gset
SELECT enqueue_event_id IS NULL AND created_by IS NULL AS nothing_recorded,
       claim_event_id IS NULL AND claimed_by IS NULL AS no_claim,
       (SELECT count(*) FROM orch.events WHERE task_id = :raw AND reason_code = 'enqueued'
           AND actor = current_user) AS event_rows
  FROM orch.tasks WHERE id = :raw;
INSERT INTO orch.tasks (queue, state, payload, reason_code, enqueue_event_id, created_by)
VALUES ('ap_hist', 'queued', '{"raw": 2}', 'imported', -7, 'mallory') RETURNING id AS raw2 \gset
SELECT enqueue_event_id IS NULL AND created_by IS NULL AS nothing_recorded,
       (SELECT count(*) FROM orch.events WHERE task_id = :raw2) AS event_rows
  FROM orch.tasks WHERE id = :raw2;
-- nor a completion: a raw INSERT or UPDATE of the columns only orch_complete sets
INSERT INTO orch.tasks (queue, state, payload, complete_event_id, complete_attempt_id, completed_by, complete_xact)
VALUES ('ap_hist', 'queued', '{"raw": 3}', -8, -9, 'mallory', 1) RETURNING id AS raw3 \gset
SELECT complete_event_id IS NULL AND complete_attempt_id IS NULL AND completed_by IS NULL
       AND complete_xact IS NULL AS no_completion FROM orch.tasks WHERE id = :raw3;
UPDATE orch.tasks SET state = 'cancelled', complete_event_id = -8, complete_attempt_id = -9,
       completed_by = 'mallory', complete_xact = 1 WHERE id = :raw3;
SELECT state, complete_event_id IS NULL AND complete_attempt_id IS NULL AND completed_by IS NULL
       AND complete_xact IS NULL AS no_completion,
       (SELECT count(*) FROM orch.attempt_history WHERE task_id = :raw3) AS attempts
  FROM orch.tasks WHERE id = :raw3;
-- a completion by orch_complete: recorded by the task row, read as an event and an attempt
SELECT complete_event_id > enqueue_event_id AS event_after_enqueue, completed_by = current_user AS by_caller,
       complete_attempt_id > 0 AS attempt_id_drawn, complete_xact IS NOT NULL AS xact_recorded,
       finished_at >= claimed_at AS finished_after_claim
  FROM orch.tasks WHERE id = :h1;
SELECT attempt, worker, outcome, started_at IS NOT NULL AS started, lease_token IS NOT NULL AS token
  FROM orch.attempt_history WHERE task_id = :h1 ORDER BY id;
-- the trigger did not run (session_replication_role = replica): the call
-- writes the attempt row itself, and it is read once
SELECT orch_create_queue('ap_rep') IS NOT NULL AS created;
SELECT orch_enqueue('ap_rep', '{"n": 1}') > 0 AS enqueued;
CREATE TEMP TABLE ap_rep AS SELECT * FROM orch_dequeue('ap_rep', 'ap-rep-worker');
SET session_replication_role = replica;
SELECT orch_complete(task_id, lease_token) AS completed FROM ap_rep;
RESET session_replication_role;
SELECT a.outcome, a.worker, (SELECT count(*) FROM orch.attempt_history h WHERE h.task_id = r.task_id) AS attempts_read
  FROM orch.attempts a JOIN ap_rep r ON r.task_id = a.task_id;
-- and the claim the row recorded is written out (the metrics fold looks for
-- recorded claims on executing rows and on rows that record a completion
-- only): one claimed transition, read from orch.events
SELECT t.claim_event_id IS NULL AND t.claim_xact IS NULL AS row_records_no_claim,
       (SELECT count(*) FROM orch.events e WHERE e.task_id = r.task_id AND e.to_state = 'executing'
           AND e.label = 'ap-rep-worker' AND e.xact IS NOT NULL) AS claim_event_rows,
       (SELECT count(*) FROM orch.history h WHERE h.task_id = r.task_id AND h.to_state = 'executing') AS claims_read
  FROM orch.tasks t JOIN ap_rep r ON r.task_id = t.id;
-- an attempt ends no earlier than it began: claimed after the transaction
-- that ends it began (whose time now() an attempt's end otherwise is).
-- One attempt row written alone (a failure, then the cancellations of two
-- claims, each as orch_cancel), and two written at once (a batch
-- completion the task rows do not record: their triggers off)
SELECT orch_create_queue('ap_same', '{"max_attempts": 5, "initial_delay": 0}') IS NOT NULL AS created;
SELECT count(*) AS enqueued FROM (SELECT orch_enqueue('ap_same', jsonb_build_object('n', g)) FROM generate_series(1, 5) g) s;
BEGIN;
SELECT count(*) AS failed FROM (
    SELECT orch_fail(task_id, lease_token, 'TRANSIENT', 'ap-same') FROM orch_dequeue('ap_same', 'ap-same-worker', 1)) s;
SELECT count(*) AS claimed FROM (SELECT * FROM orch_dequeue('ap_same', 'ap-same-worker', 2)) s;
SELECT count(*) AS cancelled FROM orch_cancel_where('{"queue": "ap_same", "state": ["executing"]}', 'ap-same');
COMMIT;
BEGIN;
CREATE TEMP TABLE ap_same_claims AS SELECT * FROM orch_dequeue('ap_same', 'ap-same-worker', 2);
SET LOCAL session_replication_role = replica;
SELECT orch_complete_batch(array_agg(task_id), array_agg(lease_token)) AS completed FROM ap_same_claims;
COMMIT;
SELECT a.outcome, count(*) AS attempts, bool_and(a.finished_at >= a.started_at) AS ended_after_start
  FROM orch.attempts a JOIN orch.tasks t ON t.id = a.task_id
 WHERE t.queue = 'ap_same' GROUP BY a.outcome ORDER BY a.outcome;
-- and the tasks cancelled finish, on their rows, when their attempts end
-- (the completed ones' rows were written with their trigger off)
SELECT t.state, count(*) AS tasks, bool_and(t.finished_at >= t.claimed_at) AS finished_after_claim,
       bool_and(t.finished_at = a.finished_at) AS finished_with_attempt
  FROM orch.tasks t JOIN orch.attempts a ON a.task_id = t.id AND a.attempt = t.attempts
 WHERE t.queue = 'ap_same' AND t.state = 'cancelled' GROUP BY t.state;
-- a batch written at once enters each partial index its rows satisfy, row
-- by row: an index whose predicate reads the payload (which the rows of a
-- batch do not share) holds the even rows and only them
CREATE INDEX ap_even_idx ON orch.tasks (((payload->>'ap_even')::int))
 WHERE payload ? 'ap_even' AND (payload->>'ap_even')::int % 2 = 0;
SELECT count(*) AS enqueued
  FROM orch_enqueue_batch('ap_even', ARRAY(SELECT jsonb_build_object('ap_even', g) FROM generate_series(1, 6) g));
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT (payload->>'ap_even')::int FROM orch.tasks
 WHERE payload ? 'ap_even' AND (payload->>'ap_even')::int % 2 = 0 ORDER BY 1;
SELECT array_agg((payload->>'ap_even')::int ORDER BY (payload->>'ap_even')::int) AS indexed FROM (
    SELECT payload FROM orch.tasks WHERE payload ? 'ap_even' AND (payload->>'ap_even')::int % 2 = 0
     ORDER BY (payload->>'ap_even')::int) s;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP INDEX orch.ap_even_idx;
