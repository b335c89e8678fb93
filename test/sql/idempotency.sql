-- idempotency: execution-level idempotency keys (SPEC §5, docs/semantics.md
-- "Enqueue"): same key and payload -> same task; anything else -> OR004 and
-- nothing created; per tenant; TTL; batches.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- What this file has stored: tasks, their events and keys, its queues.
CREATE FUNCTION pg_temp.stored() RETURNS text LANGUAGE sql AS $$
    SELECT format('tasks=%s events=%s keys=%s queues=%s',
        (SELECT count(*) FROM orch.tasks WHERE queue LIKE 'i\_%'),
        (SELECT count(*) FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id WHERE t.queue LIKE 'i\_%'),
        (SELECT count(*) FROM orch.idempotency_keys k JOIN orch.tasks t ON t.id = k.task_id WHERE t.queue LIKE 'i\_%'),
        (SELECT count(*) FROM orch.queues WHERE name LIKE 'i\_%'))
$$;

-- ---------------------------------------------------------------------------
-- 1. Same key, same payload: the same task, created once, no new event.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('i_q', '{"a": 1, "b": [1, 2]}', idempotency_key => 'k1') AS id1 \gset
SELECT pg_temp.stored();
SELECT orch_enqueue('i_q', '{"a": 1, "b": [1, 2]}', idempotency_key => 'k1') = :id1 AS same_id,
       orch_enqueue('i_q', '{"b": [1, 2],   "a": 1}', idempotency_key => 'k1') = :id1 AS same_id_other_spelling;
SELECT pg_temp.stored();
SELECT state, idempotency_key FROM orch_tasks WHERE task_id = :id1;

-- ---------------------------------------------------------------------------
-- 2. Same key, anything else: OR004, and nothing is created.
-- ---------------------------------------------------------------------------
SELECT pg_temp.try($$SELECT orch_enqueue('i_q', '{"a": 2, "b": [1, 2]}', idempotency_key => 'k1')$$) AS other_payload,
       pg_temp.try($$SELECT orch_enqueue('i_q', '{"a": 1, "b": [2, 1]}', idempotency_key => 'k1')$$) AS other_order_in_array,
       pg_temp.try($$SELECT orch_enqueue('i_q', '{}', idempotency_key => 'k1')$$) AS empty_payload,
       pg_temp.try($$SELECT orch_enqueue('i_other', '{"a": 1, "b": [1, 2]}', idempotency_key => 'k1')$$) AS other_queue;
SELECT pg_temp.stored();
SELECT count(*) AS other_queue_created FROM orch.queues WHERE name = 'i_other';
SELECT pg_temp.try($$SELECT orch_enqueue('i_q', '[1, 2, 3]', idempotency_key => 'k1', priority => 9)$$) AS array_payload;
SELECT pg_temp.stored();

-- ---------------------------------------------------------------------------
-- 3. A replay after the task ran returns it unchanged.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE c AS SELECT * FROM orch_dequeue('i_q', 'idem-worker');
SELECT task_id = :id1 AS claimed_it FROM c;
SELECT orch_complete(task_id, lease_token, '{"done": true}') FROM c;
SELECT orch_enqueue('i_q', '{"a": 1, "b": [1, 2]}', idempotency_key => 'k1') = :id1 AS same_id_after_completion;
SELECT state, attempts, result FROM orch_tasks WHERE task_id = :id1;
SELECT pg_temp.stored();

-- ---------------------------------------------------------------------------
-- 4. Keys are per tenant.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('i_q', '{"a": 1, "b": [1, 2]}', idempotency_key => 'k1', tenant => 'tenant_two') AS id2 \gset
SELECT :id2 <> :id1 AS new_task_for_other_tenant;
SELECT orch_enqueue('i_q', '{"a": 1, "b": [1, 2]}', idempotency_key => 'k1', tenant => 'tenant_two') = :id2 AS same_id_in_tenant;
SELECT pg_temp.try($$SELECT orch_enqueue('i_q', '{"x": 1}', idempotency_key => 'k1', tenant => 'tenant_two')$$) AS conflict_in_tenant;
SELECT tenant_id, count(*) FROM orch.tasks WHERE idempotency_key = 'k1' AND queue LIKE 'i\_%' GROUP BY tenant_id ORDER BY tenant_id;

-- ---------------------------------------------------------------------------
-- 5. Without a key there is no deduplication.
-- ---------------------------------------------------------------------------
SELECT orch_enqueue('i_nokey', '{"same": true}') <> orch_enqueue('i_nokey', '{"same": true}') AS distinct_ids;
SELECT orch_enqueue('i_nokey', '{"same": true}', idempotency_key => NULL) IS NOT NULL AS null_key_is_no_key;
SELECT count(*) FROM orch.tasks WHERE queue = 'i_nokey';

-- ---------------------------------------------------------------------------
-- 6. Keys expire after the queue's idempotency_ttl; an expired key names the
--    new task.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('i_ttl', '{"idempotency_ttl": "10 milliseconds"}') IS NOT NULL AS created;
SELECT orch_enqueue('i_ttl', '{"v": 1}', idempotency_key => 'k_ttl') AS ttl1 \gset
SELECT pg_sleep(0.05);
SELECT orch_configure_queue('i_ttl', '{"idempotency_ttl": "1 hour"}') IS NOT NULL AS configured;
SELECT orch_enqueue('i_ttl', '{"v": 2}', idempotency_key => 'k_ttl') AS ttl2 \gset
SELECT :ttl2 <> :ttl1 AS new_task_after_expiry;
SELECT orch_enqueue('i_ttl', '{"v": 2}', idempotency_key => 'k_ttl') = :ttl2 AS key_names_new_task,
       pg_temp.try($$SELECT orch_enqueue('i_ttl', '{"v": 1}', idempotency_key => 'k_ttl')$$) AS old_payload_now_conflicts;
SELECT count(*) AS tasks_with_key FROM orch.tasks WHERE idempotency_key = 'k_ttl';

-- ---------------------------------------------------------------------------
-- 7. Batches with keys.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE b1 AS
SELECT ord, id FROM orch_enqueue_batch('i_b', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                                       idempotency_keys => ARRAY['b1', 'b2', 'b3']) WITH ORDINALITY AS b(id, ord);
-- ids in payload order
SELECT b1.ord, t.payload, t.idempotency_key FROM b1 JOIN orch.tasks t USING (id) ORDER BY b1.ord;
SELECT pg_temp.stored();
-- replay: the same ids, in the same order, nothing new
SELECT count(*) FILTER (WHERE r.id = b1.id) AS same_ids, count(*) AS returned
  FROM orch_enqueue_batch('i_b', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                          idempotency_keys => ARRAY['b1', 'b2', 'b3']) WITH ORDINALITY AS r(id, ord)
  JOIN b1 USING (ord);
SELECT pg_temp.stored();
-- overlap: the known key returns its task, the new key creates one
CREATE TEMP TABLE b2 AS
SELECT ord, id FROM orch_enqueue_batch('i_b', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[],
                                       idempotency_keys => ARRAY['b3', 'b4']) WITH ORDINALITY AS b(id, ord);
SELECT b2.ord, b2.id = (SELECT id FROM b1 WHERE ord = 3) AS is_b3, t.payload
  FROM b2 JOIN orch.tasks t USING (id) ORDER BY b2.ord;
SELECT pg_temp.stored();
-- a single enqueue sees a batch's key
SELECT orch_enqueue('i_b', '{"n": 2}', idempotency_key => 'b2') = (SELECT id FROM b1 WHERE ord = 2) AS single_sees_batch_key;
-- one conflicting element: OR004 and none of the batch is created
SELECT pg_temp.try($$SELECT count(*) FROM orch_enqueue_batch('i_b', ARRAY['{"n": 5}', '{"n": 99}']::jsonb[],
                                                               idempotency_keys => ARRAY['b5', 'b1'])$$) AS conflicting_batch;
SELECT count(*) AS b5_created FROM orch.tasks WHERE idempotency_key = 'b5';
SELECT pg_temp.stored();
-- the same key twice in one batch with the same payload: one task
SELECT count(DISTINCT id) AS distinct_ids, count(*) AS returned
  FROM orch_enqueue_batch('i_b', ARRAY['{"n": 6}', '{"n": 6}']::jsonb[], idempotency_keys => ARRAY['b6', 'b6']) AS b(id);
SELECT count(*) AS b6_tasks FROM orch.tasks WHERE idempotency_key = 'b6';
-- ... with different payloads: OR004, nothing created
SELECT pg_temp.try($$SELECT count(*) FROM orch_enqueue_batch('i_b', ARRAY['{"n": 7}', '{"n": 8}']::jsonb[],
                                                               idempotency_keys => ARRAY['b7', 'b7'])$$) AS conflicting_within_batch;
SELECT count(*) AS b7_tasks FROM orch.tasks WHERE idempotency_key = 'b7';
-- NULL keys in the array mean no key for that element
SELECT count(DISTINCT id) AS distinct_ids
  FROM orch_enqueue_batch('i_b', ARRAY['{"n": 9}', '{"n": 9}']::jsonb[], idempotency_keys => ARRAY[NULL, NULL]::text[]) AS b(id);
SELECT pg_temp.stored();

-- Cleanup.
DO $$
BEGIN
    DELETE FROM orch.idempotency_keys WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'i\_%');
    DELETE FROM orch.events WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'i\_%');
    DELETE FROM orch.attempts WHERE task_id IN (SELECT id FROM orch.tasks WHERE queue LIKE 'i\_%');
    DELETE FROM orch.tasks WHERE queue LIKE 'i\_%';
    DELETE FROM orch.queues WHERE name LIKE 'i\_%';
END $$;
