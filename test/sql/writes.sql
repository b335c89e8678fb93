-- writes: a batch of tasks (orch_enqueue_batch without keys, a rate limit
-- or a concurrency key) is written without SQL: the heap's multi-insert
-- (one WAL record per page), the lifecycle trigger's checks and derived
-- columns done in C on each row by the trigger's own code, the index
-- entries made by the index access methods, the statement-end trigger's
-- work after the last row.  The rows and index entries are those an INSERT
-- writes; a table the direct write cannot serve as an INSERT would (here:
-- a trigger of yours on it) gets the SQL INSERT.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
CREATE EXTENSION IF NOT EXISTS pg_walinspect;
CREATE EXTENSION IF NOT EXISTS amcheck;
RESET client_min_messages;
-- every commit flushes its WAL, whatever the cluster's setting, so that
-- the WAL of each call can be read once it returns
SET synchronous_commit = on;

-- wr_batches(queue): the batches of the comparison, each a call of its own:
-- due now with settings (every other payload flagged: an index of yours
-- below takes those only), not due yet (off the claim index, in the due
-- index), of a tenant (its own claim index), and two refused ones.  Each
-- call's ids are checked against its rows, in order; returns how many.
CREATE TEMP TABLE wr_ids (queue text, ids bigint[]);
CREATE FUNCTION pg_temp.wr_batches(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    got bigint[];
    n bigint := 0;
BEGIN
    got := ARRAY(SELECT orch_enqueue_batch(q, ARRAY['{"n": 1, "flag": true}', '{"n": 2}', '{"n": 3, "flag": true}',
                                                     '{"n": 4}']::jsonb[],
        priority => 2, owner => 'wr-owner', max_attempts => 3, max_failures => 2,
        retry_policy => '{"backoff": "fixed", "initial_delay": "1 second"}', timeout => '1 minute',
        correlation_id => 'wr-' || q));
    INSERT INTO wr_ids VALUES (q, got);
    got := ARRAY(SELECT orch_enqueue_batch(q, ARRAY['{"later": 1}', '{"later": 2}']::jsonb[],
        run_at => now() + interval '1 hour'));
    INSERT INTO wr_ids VALUES (q, got);
    got := ARRAY(SELECT orch_enqueue_batch(q, ARRAY['{"t": 1}', '{"t": 2}']::jsonb[], tenant => 'wr-tenant'));
    INSERT INTO wr_ids VALUES (q, got);
    BEGIN
        PERFORM orch_enqueue_batch(q, ARRAY['{"bad": 1}', NULL]::jsonb[]);
    EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'a null payload: %', SQLSTATE;
    END;
    BEGIN
        PERFORM orch_enqueue_batch(q, ARRAY['{"bad": 2}', '{"bad": 3}']::jsonb[], max_attempts => 0);
    EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'max_attempts 0: %', SQLSTATE;
    END;
    SELECT sum(cardinality(ids)) INTO n FROM wr_ids WHERE queue = q;
    RETURN n;
END $$;
-- an index of yours whose predicate reads the payload, which differs from
-- row to row of a batch
CREATE INDEX wr_flag_idx ON orch.tasks (id) WHERE payload ? 'flag';
-- the columns of a task row, but those that differ from call to call
CREATE FUNCTION pg_temp.wr_row(t orch.tasks) RETURNS jsonb LANGUAGE sql AS $$
    SELECT to_jsonb(t) - ARRAY['id', 'queue', 'created_at', 'updated_at', 'run_at', 'ready_at',
                                'created_xact', 'enqueue_event_id', 'correlation_id']
        || jsonb_build_object('ready', t.ready_at IS NOT NULL, 'ready_is_run_at', t.ready_at = t.run_at,
                              'xact', t.created_xact IS NOT NULL, 'event', t.enqueue_event_id IS NOT NULL,
                              'correlation', t.correlation_id IS NOT NULL)
$$;

-- ... and of a completed one, but those that differ from call to call
CREATE FUNCTION pg_temp.wr_done(t orch.tasks) RETURNS jsonb LANGUAGE sql AS $$
    SELECT pg_temp.wr_row(t) - ARRAY['lease_token', 'claimed_at', 'claim_event_id', 'claim_xact', 'claim_waited',
                                      'finished_at', 'complete_event_id', 'complete_attempt_id', 'complete_xact', 'result']
        || jsonb_build_object('claim', t.claim_event_id IS NOT NULL AND t.claim_xact IS NOT NULL,
                              'completion', t.complete_event_id IS NOT NULL AND t.complete_attempt_id IS NOT NULL
                                            AND t.complete_xact IS NOT NULL AND t.finished_at >= t.claimed_at,
                              'result', t.result IS NOT NULL)
$$;
-- the rows of queue a that are not those of queue b, and the other way
-- round (the n-th task of one against the n-th of the other; done: as
-- completed rows)
CREATE FUNCTION pg_temp.wr_differ(a text, b text, done boolean) RETURNS bigint LANGUAGE sql AS $$
    WITH r AS (SELECT t.queue, row_number() OVER (PARTITION BY t.queue ORDER BY t.id) AS n,
                      CASE WHEN done THEN pg_temp.wr_done(t) ELSE pg_temp.wr_row(t) END AS row
                 FROM orch.tasks t WHERE t.queue IN (a, b))
    SELECT count(*) FROM ((SELECT n, row FROM r WHERE queue = a EXCEPT ALL SELECT n, row FROM r WHERE queue = b)
                          UNION ALL
                          (SELECT n, row FROM r WHERE queue = b EXCEPT ALL SELECT n, row FROM r WHERE queue = a)) d
$$;
-- a trigger of yours (created on orch.tasks where a section needs one):
-- it records the rows it sees
CREATE TABLE wr_seen (task_id bigint, state text);
CREATE FUNCTION wr_seen_task() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.wr_seen VALUES (NEW.id, NEW.state);
    RETURN NEW;
END $$;

-- 1. The direct write: the heap of the task table gets multi-insert
--    records, not one insert record per row.
SELECT pg_current_wal_flush_lsn() AS before_direct \gset
SELECT pg_temp.wr_batches('wr_direct') AS direct_tasks;
SELECT count(*) FILTER (WHERE record_type LIKE 'MULTI_INSERT%') > 0 AS multi_insert,
       count(*) FILTER (WHERE record_type LIKE 'INSERT%') AS row_inserts
  FROM pg_get_wal_records_info(:'before_direct', pg_current_wal_flush_lsn())
 WHERE resource_manager IN ('Heap', 'Heap2')
   AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks');

-- 2. The same through SQL: a trigger of yours on orch.tasks (it counts the
--    rows it sees); every row goes through the INSERT.
CREATE TRIGGER wr_seen AFTER INSERT ON orch.tasks FOR EACH ROW EXECUTE FUNCTION wr_seen_task();
SELECT pg_current_wal_flush_lsn() AS before_sql \gset
SELECT pg_temp.wr_batches('wr_sql') AS sql_tasks;
SELECT count(*) FILTER (WHERE record_type LIKE 'MULTI_INSERT%') AS multi_inserts,
       count(*) FILTER (WHERE record_type LIKE 'INSERT%') AS row_inserts
  FROM pg_get_wal_records_info(:'before_sql', pg_current_wal_flush_lsn())
 WHERE resource_manager IN ('Heap', 'Heap2')
   AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks');
SELECT count(*) AS rows_your_trigger_saw, min(state) AS state FROM wr_seen;
DROP TRIGGER wr_seen ON orch.tasks;
TRUNCATE wr_seen;

-- 3. Both wrote the same rows, in the same order (the n-th task of one
--    queue is the n-th of the other), with ids in the order of the
--    payloads, and nothing of the refused calls.
CREATE TEMP VIEW wr_rows AS
SELECT t.queue, row_number() OVER (PARTITION BY t.queue ORDER BY t.id) AS n, pg_temp.wr_row(t) AS row
  FROM orch.tasks t WHERE t.queue IN ('wr_direct', 'wr_sql');
SELECT count(*) FILTER (WHERE queue = 'wr_direct') AS direct,
       count(*) FILTER (WHERE queue = 'wr_sql') AS via_sql FROM wr_rows;
SELECT pg_temp.wr_differ('wr_direct', 'wr_sql', false) AS rows_that_differ;
-- the ids each call returned are its rows', in the payloads' order
SELECT w.queue, bool_and(w.ids = ARRAY(SELECT t.id FROM orch.tasks t WHERE t.id = ANY (w.ids) ORDER BY t.id)
                         AND cardinality(w.ids) = (SELECT count(*) FROM orch.tasks t WHERE t.id = ANY (w.ids))) AS ids_are_the_rows
  FROM wr_ids w GROUP BY w.queue ORDER BY w.queue;
SELECT w.queue, (SELECT array_agg(t.payload ->> 'n' ORDER BY u.ord)
                   FROM unnest(w.ids) WITH ORDINALITY u(id, ord) JOIN orch.tasks t ON t.id = u.id) AS payloads_in_the_order_of_the_ids
  FROM (SELECT DISTINCT ON (queue) * FROM wr_ids ORDER BY queue, ids[1]) w ORDER BY w.queue;
SELECT n, row ->> 'payload' AS payload, row ->> 'state' AS state, row ->> 'tenant_id' AS tenant,
       row ->> 'ready' AS ready, row ->> 'event' AS recorded_enqueue
  FROM wr_rows WHERE queue = 'wr_direct' ORDER BY n;
-- the enqueue of a row, read from the row (no event row)
SELECT kind, from_state, to_state, reason_code
  FROM orch_history((SELECT min(id) FROM orch.tasks WHERE queue = 'wr_direct'));
SELECT count(*) AS event_rows FROM orch.events e JOIN orch.tasks t ON t.id = e.task_id
 WHERE t.queue IN ('wr_direct', 'wr_sql');

-- 4. Every index has the entries an INSERT makes (amcheck's heapallindexed:
--    each heap row that an index's predicate takes is found in it), and
--    the claims, readers and lookups find the rows.
SELECT count(bt_index_check(i.indexrelid, true)) AS indexes_checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'orch.tasks'::regclass AND a.amname = 'btree';
SET enable_seqscan = off;
SELECT q, (SELECT count(*) FROM orch.tasks WHERE queue = q AND ready_at IS NOT NULL) AS claimable,
       (SELECT count(*) FROM orch.tasks WHERE queue = q AND tenant_id = 'wr-tenant' AND ready_at IS NOT NULL) AS tenant_claimable,
       (SELECT count(*) FROM orch.tasks WHERE correlation_id = 'wr-' || q) AS by_correlation,
       (SELECT count(*) FROM orch.tasks WHERE payload ? 'flag' AND queue = q) AS flagged
  FROM unnest(ARRAY['wr_direct', 'wr_sql']) q;
-- the flagged rows through your index: only those (no entry too many)
SET enable_bitmapscan = off;
SET enable_indexonlyscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM orch.tasks WHERE payload ? 'flag';
SELECT count(*) AS flagged_by_your_index FROM orch.tasks WHERE payload ? 'flag';
RESET enable_bitmapscan;
RESET enable_indexonlyscan;
RESET enable_seqscan;
SELECT count(*) AS claimed, min(attempt) AS attempt FROM orch_dequeue('wr_direct', 'wr-worker', 10);
SELECT count(*) AS claimed_by_tenant FROM orch_dequeue('wr_direct', 'wr-worker', 10, tenant => 'wr-tenant');

-- 5. A batch with idempotency keys and a keyed batch go through SQL as
--    before (the keyed tasks' admission reads the rows the statement
--    inserted before); all are found.
SELECT count(*) AS keyed FROM orch_enqueue_batch('wr_direct', ARRAY['{"k": 1}', '{"k": 2}']::jsonb[],
                                                 idempotency_keys => ARRAY['wr-1', 'wr-2']);
SELECT orch_set_concurrency_limit('wr_direct', 'wr-key', 1);
SELECT count(*) AS gated_batch FROM orch_enqueue_batch('wr_direct', ARRAY['{"g": 1}', '{"g": 2}']::jsonb[],
                                                       concurrency_key => 'wr-key');
SELECT payload ->> 'g' AS g, gated, ready_at IS NOT NULL AS claimable
  FROM orch.tasks WHERE queue = 'wr_direct' AND concurrency_key = 'wr-key' ORDER BY id;

-- 6. A batch rolled back leaves no row and no index entry behind that a
--    reader sees.
BEGIN;
SELECT count(*) AS in_the_rolled_back_batch FROM orch_enqueue_batch('wr_gone', ARRAY['{"x": 1}', '{"x": 2}']::jsonb[]);
ROLLBACK;
SELECT count(*) AS rows_after_rollback FROM orch.tasks WHERE queue = 'wr_gone';
SELECT count(bt_index_check(i.indexrelid, true)) AS indexes_checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'orch.tasks'::regclass AND a.amname = 'btree';

-- 7. With session_replication_role = replica (a logical replica's apply,
--    pg_restore --disable-triggers) an INSERT fires none of the table's
--    triggers; a batch then takes the INSERT, and its rows record nothing
--    the lifecycle trigger would have derived.
SET session_replication_role = replica;
SELECT count(*) AS replica_batch FROM orch_enqueue_batch('wr_replica', ARRAY['{"r": 1}', '{"r": 2}']::jsonb[]);
RESET session_replication_role;
SELECT count(*) AS rows, count(enqueue_event_id) AS recorded_enqueues, count(created_xact) AS with_xact
  FROM orch.tasks WHERE queue = 'wr_replica';

-- 8. Without the table's own triggers (dropped here, in a transaction
--    rolled back) an INSERT records nothing they would; nor does a batch,
--    which takes the INSERT.
BEGIN;
DROP TRIGGER tasks_lifecycle ON orch.tasks;
DROP TRIGGER tasks_statement_end ON orch.tasks;
SELECT count(*) AS batch_without_triggers FROM orch_enqueue_batch('wr_bare', ARRAY['{"b": 1}', '{"b": 2}']::jsonb[]);
SELECT count(*) AS rows, count(enqueue_event_id) AS recorded_enqueues FROM orch.tasks WHERE queue = 'wr_bare';
ROLLBACK;
-- 9. A completion (orch_complete, orch_complete_batch) of a plain task is
--    written without SQL too: the row found by its id, checked as the
--    UPDATE's WHERE clause checks it, through the lifecycle trigger's code,
--    written by the table's update, which locks the row as it writes it:
--    no row lock record of its own (the UPDATE's BEFORE trigger takes
--    one).  Completed directly here, and through SQL with a trigger of
--    yours on UPDATE; the rows, the index entries and the history agree.
CREATE FUNCTION pg_temp.wr_complete(q text) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    one record;
    n int;
BEGIN
    PERFORM orch_enqueue_batch(q, ARRAY['{"c": 1}', '{"c": 2}', '{"c": 3}']::jsonb[]);
    PERFORM orch_enqueue_batch(q, ARRAY['{"c": 4}', '{"c": 5}']::jsonb[], tenant => 'wr-tenant');
    CREATE TEMP TABLE wr_claims AS SELECT * FROM orch_dequeue(q, 'wr-worker', 10);
    SELECT task_id, lease_token INTO one FROM wr_claims ORDER BY task_id LIMIT 1;
    PERFORM orch_complete(one.task_id, one.lease_token, '{"done": 1}');
    SELECT orch_complete_batch(array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id),
                               array_agg(jsonb_build_object('done', task_id) ORDER BY task_id))
      INTO n FROM wr_claims WHERE task_id <> one.task_id;
    DROP TABLE wr_claims;
    RETURN n + 1;
END $$;
SELECT pg_current_wal_flush_lsn() AS before_direct_completions \gset
SELECT pg_temp.wr_complete('wr_cd') AS completed_directly;
-- (row lock records: none, the claims written at once too, task_claim.c;
-- through SQL the claim statement's, one per task, and one more per
-- completion)
SELECT count(*) FILTER (WHERE record_type = 'LOCK') AS row_locks,
       count(*) FILTER (WHERE record_type LIKE '%UPDATE%') > 0 AS updates
  FROM pg_get_wal_records_info(:'before_direct_completions', pg_current_wal_flush_lsn())
 WHERE resource_manager = 'Heap'
   AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks');
CREATE TRIGGER wr_seen AFTER UPDATE ON orch.tasks FOR EACH ROW EXECUTE FUNCTION wr_seen_task();
SELECT pg_current_wal_flush_lsn() AS before_sql_completions \gset
SELECT pg_temp.wr_complete('wr_cs') AS completed_through_sql;
SELECT count(*) FILTER (WHERE record_type = 'LOCK') AS row_locks
  FROM pg_get_wal_records_info(:'before_sql_completions', pg_current_wal_flush_lsn())
 WHERE resource_manager = 'Heap'
   AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks');
SELECT state, count(*) AS rows_your_trigger_saw FROM wr_seen GROUP BY state ORDER BY state;
DROP TRIGGER wr_seen ON orch.tasks;
TRUNCATE wr_seen;
CREATE TEMP VIEW wr_done_rows AS
SELECT t.queue, row_number() OVER (PARTITION BY t.queue ORDER BY t.id) AS n, pg_temp.wr_done(t) AS row
  FROM orch.tasks t WHERE t.queue IN ('wr_cd', 'wr_cs');
SELECT count(*) FILTER (WHERE queue = 'wr_cd') AS direct,
       count(*) FILTER (WHERE queue = 'wr_cs') AS via_sql FROM wr_done_rows;
SELECT pg_temp.wr_differ('wr_cd', 'wr_cs', true) AS rows_that_differ;
SELECT n, row ->> 'state' AS state, row ->> 'reason_code' AS reason, row ->> 'tenant_id' AS tenant,
       row ->> 'claim' AS recorded_claim, row ->> 'completion' AS recorded_completion, row ->> 'result' AS has_result
  FROM wr_done_rows WHERE queue = 'wr_cd' ORDER BY n;
-- the history: each task's enqueue, claim and completion read from its row
-- (no event row, no attempt row); the results as given
SELECT t.queue, count(*) FILTER (WHERE h.to_state = 'completed') AS completions,
       count(*) FILTER (WHERE h.to_state = 'executing') AS claims,
       (SELECT count(*) FROM orch.events e JOIN orch.tasks u ON u.id = e.task_id WHERE u.queue = t.queue) AS event_rows,
       (SELECT count(*) FROM orch.attempts a JOIN orch.tasks u ON u.id = a.task_id WHERE u.queue = t.queue) AS attempt_rows,
       (SELECT count(*) FROM orch.attempt_history a JOIN orch.tasks u ON u.id = a.task_id
         WHERE u.queue = t.queue AND a.outcome = 'completed' AND a.worker = 'wr-worker') AS completed_attempts
  FROM orch.tasks t CROSS JOIN LATERAL orch_history(t.id) h
 WHERE t.queue IN ('wr_cd', 'wr_cs') GROUP BY t.queue ORDER BY t.queue;
SELECT bool_and(result = CASE WHEN id = (SELECT min(id) FROM orch.tasks WHERE queue = 'wr_cd') THEN '{"done": 1}'::jsonb
                              ELSE jsonb_build_object('done', id) END) AS results_as_given
  FROM orch.tasks WHERE queue = 'wr_cd';
SELECT count(bt_index_check(i.indexrelid, true)) AS indexes_checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'orch.tasks'::regclass AND a.amname = 'btree';
SET enable_seqscan = off;
SELECT (SELECT count(*) FROM orch.tasks WHERE queue = 'wr_cd' AND state = 'executing') AS executing_by_lease_index,
       (SELECT count(*) FROM orch.tasks WHERE finished_at IS NOT NULL AND queue = 'wr_cd') AS by_finished_index;
RESET enable_seqscan;

-- 10. A completion that does not hold changes nothing and says why, as
--     before (the SQLSTATE here; the messages name task ids): a stale
--     token (OR003), an unknown task (OR005), a finished one (OR002); a
--     batch is all or nothing.
CREATE FUNCTION pg_temp.wr_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    EXECUTE sql INTO r;
    RETURN r;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;
SELECT count(*) AS enqueued FROM orch_enqueue_batch('wr_cx', ARRAY['{"x": 1}', '{"x": 2}']::jsonb[]);
CREATE TEMP TABLE wr_cx_claims AS SELECT * FROM orch_dequeue('wr_cx', 'wr-worker', 2);
SELECT pg_temp.wr_try(format('SELECT orch_complete(%s, gen_random_uuid(), NULL)', min(task_id))) AS stale_token
  FROM wr_cx_claims;
SELECT pg_temp.wr_try(format('SELECT orch_complete_batch(%L::bigint[], %L::uuid[])',
                             array_agg(task_id ORDER BY task_id),
                             array_agg(CASE WHEN task_id = (SELECT max(task_id) FROM wr_cx_claims)
                                            THEN gen_random_uuid() ELSE lease_token END ORDER BY task_id))) AS batch_with_a_stale_token
  FROM wr_cx_claims;
SELECT pg_temp.wr_try('SELECT orch_complete(-1, gen_random_uuid(), NULL)') AS unknown_task;
SELECT state, count(*) FROM orch.tasks WHERE queue = 'wr_cx' GROUP BY state;
SELECT orch_complete_batch(array_agg(task_id), array_agg(lease_token)) AS completed FROM wr_cx_claims;
SELECT pg_temp.wr_try(format('SELECT orch_complete(%s, %L, NULL)', min(task_id), min(lease_token::text))) AS finished_task
  FROM wr_cx_claims;
-- 11. A single enqueue is written at once too (an insert record of its own,
--     the kept description of the table: task_cache.c); with a trigger of
--     yours on INSERT, through SQL; the rows agree.  An index created
--     after this session wrote tasks is entered by its next writes (the
--     kept description is built again): checked with amcheck, and through
--     the index.
SELECT pg_current_wal_flush_lsn() AS before_one \gset
SELECT count(orch_enqueue('wr_one_d', jsonb_build_object('o', g), priority => 1, owner => 'wr-owner')) AS enqueued_directly
  FROM generate_series(1, 3) g;
SELECT count(*) FILTER (WHERE record_type LIKE 'INSERT%') AS insert_records,
       count(*) FILTER (WHERE record_type LIKE 'MULTI_INSERT%') AS multi_inserts
  FROM pg_get_wal_records_info(:'before_one', pg_current_wal_flush_lsn())
 WHERE resource_manager IN ('Heap', 'Heap2')
   AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks');
CREATE TRIGGER wr_seen AFTER INSERT ON orch.tasks FOR EACH ROW EXECUTE FUNCTION wr_seen_task();
SELECT count(orch_enqueue('wr_one_s', jsonb_build_object('o', g), priority => 1, owner => 'wr-owner')) AS enqueued_through_sql
  FROM generate_series(1, 3) g;
SELECT count(*) AS rows_your_trigger_saw FROM wr_seen;
DROP TRIGGER wr_seen ON orch.tasks;
TRUNCATE wr_seen;
CREATE TEMP VIEW wr_one_rows AS
SELECT t.queue, row_number() OVER (PARTITION BY t.queue ORDER BY t.id) AS n, pg_temp.wr_row(t) AS row
  FROM orch.tasks t WHERE t.queue IN ('wr_one_d', 'wr_one_s');
SELECT pg_temp.wr_differ('wr_one_d', 'wr_one_s', false) AS rows_that_differ;
SELECT n, row ->> 'state' AS state, row ->> 'priority' AS priority, row ->> 'event' AS recorded_enqueue
  FROM wr_one_rows WHERE queue = 'wr_one_d' ORDER BY n;
CREATE INDEX wr_late_idx ON orch.tasks (priority, id) WHERE queue = 'wr_late';
SELECT orch_enqueue('wr_late', '{"late": 1}') IS NOT NULL AS enqueued_after_the_index;
CREATE TEMP TABLE wr_late_claim AS SELECT * FROM orch_dequeue('wr_late', 'wr-worker', 1);
SELECT orch_complete(task_id, lease_token, '{"late": true}') AS completed FROM wr_late_claim;
SELECT count(bt_index_check(i.indexrelid, true)) AS indexes_checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'orch.tasks'::regclass AND a.amname = 'btree';
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexonlyscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM orch.tasks WHERE queue = 'wr_late' AND priority = 0;
SELECT count(*) AS through_your_late_index, min(state) AS state FROM orch.tasks WHERE queue = 'wr_late' AND priority = 0;
RESET enable_indexonlyscan;
RESET enable_bitmapscan;
RESET enable_seqscan;
-- 12. A claim of one tenant or of every tenant is written at once too
--     (task_claim.c): in claim order from the queue's claim index, each
--     row given the claim statement's values (the lease capped by the
--     task's timeout), no row lock record.  A task whose trigger work
--     writes more (here: a concurrency key; below: a retry come due) is
--     locked first, as the claim statement locks it: one lock record.  A
--     tenant's claim reads its own range.  Under REPEATABLE READ, or
--     without a claim index (dropped, then made again), the claim
--     statement claims.
CREATE FUNCTION pg_temp.wr_locks(since pg_lsn) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM pg_get_wal_records_info(since, pg_current_wal_flush_lsn())
     WHERE resource_manager = 'Heap' AND record_type = 'LOCK'
       AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks');
$$;
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue('wr_cl', '{"n": 1}', timeout => '10 seconds')
    UNION ALL SELECT orch_enqueue('wr_cl', '{"n": 2}')
    UNION ALL SELECT orch_enqueue('wr_cl', '{"n": 3}', concurrency_key => 'wr-key')
    UNION ALL SELECT orch_enqueue('wr_cl', '{"n": 4}')
    UNION ALL SELECT orch_enqueue('wr_cl', '{"n": 0}', priority => -1)) s;
SELECT pg_current_wal_flush_lsn() AS before_claims \gset
CREATE TEMP TABLE wr_cl_claims AS SELECT * FROM orch_dequeue('wr_cl', 'wr-worker', 2, lease => '1 hour');
SELECT string_agg(payload ->> 'n', ',' ORDER BY ctid) AS claimed_in_order FROM wr_cl_claims;
SELECT pg_temp.wr_locks(:'before_claims') AS lock_records_of_two_claims;
INSERT INTO wr_cl_claims SELECT * FROM orch_dequeue('wr_cl', 'wr-worker', 10, lease => '1 hour');
SELECT string_agg(payload ->> 'n', ',' ORDER BY ctid) AS claimed_in_order FROM wr_cl_claims;
SELECT pg_temp.wr_locks(:'before_claims') AS lock_records_after_the_keyed_task;
SELECT c.payload ->> 'n' AS n, c.attempt, t.state, t.reason_code, t.lease_owner, t.retry_at,
       t.lease_expires_at - t.claimed_at AS lease, t.claim_event_id IS NOT NULL AS recorded_claim,
       t.ready_at, c.lease_token = t.lease_token AS token_returned,
       c.lease_expires_at = t.lease_expires_at AS expiry_returned,
       c.guard IS NOT NULL AS guarded
  FROM wr_cl_claims c JOIN orch.tasks t ON t.id = c.task_id ORDER BY t.id;
SELECT count(*) AS claims_in_history FROM orch.tasks t CROSS JOIN LATERAL orch_history(t.id) h
 WHERE t.queue = 'wr_cl' AND h.to_state = 'executing' AND h.reason_code = 'claimed' AND h.label = 'wr-worker';
-- a retry come due: locked first, its claim written as an event row
SELECT orch_enqueue('wr_clx', '{"x": 1}', max_attempts => 3,
                    retry_policy => '{"backoff": "fixed", "initial_delay": "0 seconds"}') AS wr_clx_id \gset
SELECT count(*) AS claimed FROM (
    SELECT orch_fail(task_id, lease_token, 'TRANSIENT', 'wr-boom') FROM orch_dequeue('wr_clx', 'wr-worker', 1)) s;
SELECT state, ready_at IS NOT NULL AS claimable FROM orch.tasks WHERE id = :wr_clx_id;
SELECT pg_current_wal_flush_lsn() AS before_retry_claim \gset
SELECT attempt FROM orch_dequeue('wr_clx', 'wr-worker-2', 1);
SELECT pg_temp.wr_locks(:'before_retry_claim') AS lock_records;
SELECT from_state, to_state, reason_code, label, attempt FROM orch_history(:wr_clx_id)
 WHERE to_state = 'executing' ORDER BY attempt;
SELECT count(*) AS claim_event_rows FROM orch.events WHERE task_id = :wr_clx_id AND to_state = 'executing';
-- workflow steps' tasks: a paused run's passed over (its run may not go
-- on), a running run's locked first and claimed, the paused one's claimed
-- once its run is resumed
SELECT orch_define('wr_wf', '{"steps": [{"step_id": "only", "queue": "wr_clw", "handler": "h"}]}') AS version;
SELECT orch_publish('wr_wf', 1) IS NOT NULL AS published;
SELECT orch_start('wr_wf', '{"n": 1}') AS wr_paused \gset
SELECT orch_start('wr_wf', '{"n": 2}') AS wr_running \gset
SELECT orch_pause_run(:wr_paused) IS NOT NULL AS paused;
SELECT pg_current_wal_flush_lsn() AS before_step_claims \gset
SELECT t.run_id = :wr_running AS of_the_running_run, c.step_key, c.attempt
  FROM orch_dequeue('wr_clw', 'wr-worker', 10) c JOIN orch.tasks t ON t.id = c.task_id;
SELECT pg_temp.wr_locks(:'before_step_claims') AS lock_records;
SELECT orch_resume_run(:wr_paused) IS NOT NULL AS resumed;
SELECT t.run_id = :wr_paused AS of_the_resumed_run, c.step_key
  FROM orch_dequeue('wr_clw', 'wr-worker', 10) c JOIN orch.tasks t ON t.id = c.task_id;
-- a tenant's claim, and the default tenant's, each read their own
SELECT count(*) AS enqueued FROM (
    SELECT orch_enqueue_batch('wr_clt', ARRAY['{"t": 1}', '{"t": 2}']::jsonb[], tenant => 'wr-tenant')
    UNION ALL SELECT orch_enqueue_batch('wr_clt', ARRAY['{"d": 1}', '{"d": 2}']::jsonb[])) s;
SELECT pg_current_wal_flush_lsn() AS before_tenant_claims \gset
SELECT 'wr-tenant' AS asked, string_agg(DISTINCT t.tenant_id, ',') AS tenants, count(*) AS claimed
  FROM orch_dequeue('wr_clt', 'wr-worker', 10, tenant => 'wr-tenant') c JOIN orch.tasks t ON t.id = c.task_id
UNION ALL
SELECT 'default', string_agg(DISTINCT t.tenant_id, ',') AS tenants, count(*)
  FROM orch_dequeue('wr_clt', 'wr-worker', 10, tenant => 'default') c JOIN orch.tasks t ON t.id = c.task_id;
SELECT pg_temp.wr_locks(:'before_tenant_claims') AS lock_records;
-- REPEATABLE READ: the claim statement
SELECT count(*) AS enqueued FROM orch_enqueue_batch('wr_clr', ARRAY['{"r": 1}', '{"r": 2}']::jsonb[]);
SELECT pg_current_wal_flush_lsn() AS before_rr_claims \gset
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS claimed FROM orch_dequeue('wr_clr', 'wr-worker', 10);
COMMIT;
SELECT pg_temp.wr_locks(:'before_rr_claims') AS lock_records;
-- no claim index: the claim statement; made again: at once again
SELECT count(*) AS enqueued FROM orch_enqueue_batch('wr_cli', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}', '{"i": 4}']::jsonb[]);
DROP INDEX orch.tasks_claim_idx;
SELECT pg_current_wal_flush_lsn() AS before_unindexed_claims \gset
SELECT string_agg(payload ->> 'i', ',' ORDER BY task_id) AS claimed FROM orch_dequeue('wr_cli', 'wr-worker', 2);
SELECT pg_temp.wr_locks(:'before_unindexed_claims') AS lock_records;
CREATE INDEX tasks_claim_idx ON orch.tasks (queue, priority, created_at, id) WHERE ready_at IS NOT NULL;
SELECT pg_current_wal_flush_lsn() AS before_reindexed_claims \gset
SELECT string_agg(payload ->> 'i', ',' ORDER BY task_id) AS claimed FROM orch_dequeue('wr_cli', 'wr-worker', 2);
SELECT pg_temp.wr_locks(:'before_reindexed_claims') AS lock_records;
SELECT count(bt_index_check(i.indexrelid, true)) AS indexes_checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'orch.tasks'::regclass AND a.amname = 'btree';
SET enable_seqscan = off;
SELECT count(*) AS executing_by_lease_index FROM orch.tasks
 WHERE queue IN ('wr_cl', 'wr_clx', 'wr_clw', 'wr_clt', 'wr_clr', 'wr_cli') AND state = 'executing';
RESET enable_seqscan;
DROP INDEX orch.wr_late_idx;
DROP INDEX orch.wr_flag_idx;

-- 13. The completion of a workflow step's task and of a keyed task is
--     written at once too: the row locked first, as the UPDATE's trigger
--     locks it (one lock record a completion), then through the trigger's
--     work, whose notes only then can be taken: the run goes on to its next
--     step, the key's slot goes to the task waiting for it.  Completed
--     directly, then through SQL (a trigger of yours on UPDATE): the same
--     outcome, the same lock records, the indexes intact.
SELECT orch_publish('wr_wf_' || p, orch_define('wr_wf_' || p, jsonb_build_object('steps', jsonb_build_array(
           jsonb_build_object('step_id', 'a', 'queue', 'wr_wfq_' || p, 'handler', 'a'),
           jsonb_build_object('step_id', 'b', 'queue', 'wr_wfq_' || p, 'handler', 'b', 'depends_on', '["a"]'::jsonb)))))
       IS NOT NULL AS published
  FROM unnest(ARRAY['direct', 'sql']) AS p;
-- wr_step_and_key(path): a run's first step, the first of two tasks of
-- one key and a plain task claimed, then completed in one batch, in that
-- order (the WAL positions around the completion into wr_lsn); returns
-- the run
CREATE TEMP TABLE wr_lsn (path text, lsn pg_lsn, done pg_lsn);
CREATE FUNCTION pg_temp.wr_step_and_key(path text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    run bigint := orch_start('wr_wf_' || path, '{}');
    n int;
BEGIN
    PERFORM orch_enqueue('wr_keyq_' || path, jsonb_build_object('k', g), concurrency_key => 'wr-k')
       FROM generate_series(1, 2) g;
    PERFORM orch_enqueue('wr_plainq_' || path, '{"plain": true}');
    CREATE TEMP TABLE wr_sk AS
        SELECT * FROM orch_dequeue('wr_wfq_' || path, 'wr-worker', 5)
        UNION ALL SELECT * FROM orch_dequeue('wr_keyq_' || path, 'wr-worker', 5)
        UNION ALL SELECT * FROM orch_dequeue('wr_plainq_' || path, 'wr-worker', 5);
    INSERT INTO wr_lsn VALUES (path, pg_current_wal_insert_lsn());
    SELECT orch_complete_batch(array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id))
      INTO n FROM wr_sk;
    UPDATE wr_lsn SET done = pg_current_wal_insert_lsn() WHERE wr_lsn.path = wr_step_and_key.path;
    DROP TABLE wr_sk;
    RETURN run;
END $$;
-- the row lock records on orch.tasks of path's completion
CREATE FUNCTION pg_temp.wr_completion_locks(path text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FILTER (WHERE record_type = 'LOCK')
      FROM wr_lsn w, pg_get_wal_records_info(w.lsn, w.done)
     WHERE resource_manager = 'Heap'
       AND (regexp_match(block_ref, 'rel \d+/\d+/(\d+)'))[1]::oid = pg_relation_filenode('orch.tasks')
       AND w.path = wr_completion_locks.path
$$;
SELECT pg_temp.wr_step_and_key('direct') AS run_direct \gset
-- the step's and the keyed task's completions locked first, the plain
-- task's not; the key's next task let in by the statement-end work
-- through SQL (its UPDATE's lock).  Had the step's gone to the UPDATE,
-- the rest would have followed it: 4, as through SQL below
SELECT pg_temp.wr_completion_locks('direct') AS row_locks;
SELECT step_key, state FROM orch.tasks WHERE run_id = :run_direct ORDER BY id;
SELECT s.step_id, s.state FROM orch.run_steps s WHERE s.run_id = :run_direct ORDER BY s.step_id;
SELECT payload ->> 'k' AS k, state, ready_at IS NOT NULL AS claimable, gated
  FROM orch.tasks WHERE queue = 'wr_keyq_direct' ORDER BY id;
TRUNCATE wr_seen;
CREATE TRIGGER wr_seen AFTER UPDATE ON orch.tasks FOR EACH ROW EXECUTE FUNCTION wr_seen_task();
SELECT pg_temp.wr_step_and_key('sql') AS run_sql \gset
DROP TRIGGER wr_seen ON orch.tasks;
SELECT pg_temp.wr_completion_locks('sql') AS row_locks;
SELECT state, count(*) AS rows_your_trigger_saw FROM wr_seen GROUP BY state ORDER BY state;
-- both ways alike: the runs' tasks and steps, the key's tasks, the history
SELECT (SELECT array_agg(step_key || '=' || state ORDER BY id) FROM orch.tasks WHERE run_id = :run_direct)
     = (SELECT array_agg(step_key || '=' || state ORDER BY id) FROM orch.tasks WHERE run_id = :run_sql) AS same_run_tasks,
       (SELECT array_agg(step_id || '=' || state ORDER BY step_id) FROM orch.run_steps WHERE run_id = :run_direct)
     = (SELECT array_agg(step_id || '=' || state ORDER BY step_id) FROM orch.run_steps WHERE run_id = :run_sql) AS same_steps,
       (SELECT array_agg(state || '/' || gated || '/' || (ready_at IS NOT NULL) ORDER BY id) FROM orch.tasks
         WHERE queue = 'wr_keyq_direct')
     = (SELECT array_agg(state || '/' || gated || '/' || (ready_at IS NOT NULL) ORDER BY id) FROM orch.tasks
         WHERE queue = 'wr_keyq_sql') AS same_key_tasks;
SELECT p.path, h.to_state, h.reason_code, count(*)
  FROM (VALUES ('direct', :run_direct), ('sql', :run_sql)) AS p(path, run)
  JOIN orch.tasks t ON t.run_id = p.run OR t.queue = 'wr_keyq_' || p.path CROSS JOIN LATERAL orch_history(t.id) h
 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;
SELECT count(bt_index_check(i.indexrelid, true)) AS indexes_checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'orch.tasks'::regclass AND a.amname = 'btree';
DROP TABLE wr_seen;
DROP FUNCTION wr_seen_task();
