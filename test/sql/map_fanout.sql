-- Map steps fan out at a cost linear in their items:
-- items inserted in one statement, a map item's task carries its item and
-- index (not the run's input and upstream outputs), the step counts its
-- items (items_total / items_next / items_done) instead of re-reading every
-- item task per completion, max_parallel holds on every path, and the
-- joined output keeps item order however the items were completed.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

SELECT orch_create_queue('mf_q') IS NOT NULL AS created;
SELECT orch_define('mf_fan', '{"steps": [
    {"step_id": "prep", "queue": "mf_q", "handler": "prep"},
    {"step_id": "each", "queue": "mf_q", "handler": "each", "depends_on": ["prep"],
     "map": {"over": "$.input.items"}},
    {"step_id": "sum", "queue": "mf_q", "handler": "sum", "depends_on": ["each"]}]}') AS version;
SELECT orch_publish('mf_fan', 1) IS NOT NULL AS published;

-- 1. 300 items with a large input: one statement creates every item; an
--    item's payload is the same size whatever the input's size.
SELECT orch_start('mf_fan', jsonb_build_object('blob', repeat('x', 200000),
         'items', (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(0, 299) g))) AS run1 \gset
SELECT count(*) AS claimed FROM orch_dequeue('mf_q', 'w') d, LATERAL orch_complete(d.task_id, d.lease_token, '{"prepared": true}') c;
SELECT items_total, items_next, items_done FROM orch.run_steps WHERE run_id = :run1 AND step_id = 'each';
SELECT count(*) AS items, max(pg_column_size(payload)) < 200 AS small_payloads,
       bool_and(payload ? 'item' AND payload ? 'index' AND NOT payload ? 'input' AND NOT payload ? 'deps') AS item_and_index_only,
       bool_and((payload -> 'item' ->> 'n')::int = (payload ->> 'index')::int) AS item_matches_index
  FROM orch.tasks WHERE run_id = :run1 AND step_key LIKE 'each#%';
-- a plain step's task still carries the input and its dependencies' outputs
SELECT payload ? 'input' AS prep_has_input FROM orch.tasks WHERE run_id = :run1 AND step_key = 'prep';

-- completed out of order: one at a time (the counted path), then the rest
-- in batches (several items of one run in one statement)
DO $$
DECLARE c record;
BEGIN
    FOR i IN 1..50 LOOP
        SELECT * INTO c FROM orch_dequeue('mf_q', 'w');
        PERFORM orch_complete(c.task_id, c.lease_token, jsonb_build_object('i', (c.payload ->> 'index')::int));
    END LOOP;
END $$;
SELECT items_next, items_done, state FROM orch.run_steps WHERE run_id = :run1 AND step_id = 'each';
SELECT orch_complete_batch(array_agg(d.task_id ORDER BY d.task_id DESC), array_agg(d.lease_token ORDER BY d.task_id DESC),
                           array_agg(jsonb_build_object('i', (d.payload ->> 'index')::int) ORDER BY d.task_id DESC)) AS batch1
  FROM orch_dequeue('mf_q', 'w', 100) d;
SELECT items_next, items_done, state FROM orch.run_steps WHERE run_id = :run1 AND step_id = 'each';
SELECT orch_complete_batch(array_agg(d.task_id), array_agg(d.lease_token),
                           array_agg(jsonb_build_object('i', (d.payload ->> 'index')::int))) AS batch2
  FROM orch_dequeue('mf_q', 'w', 1000) d;
-- the step succeeded once, its output in item order; the next step started
SELECT state, items_done, jsonb_array_length(output) AS n,
       (SELECT bool_and((e.value ->> 'i')::int = e.ord - 1) FROM jsonb_array_elements(output) WITH ORDINALITY e(value, ord)) AS in_order
  FROM orch.run_steps WHERE run_id = :run1 AND step_id = 'each';
SELECT count(*) FILTER (WHERE to_state = 'succeeded') AS each_succeeded_events
  FROM orch.history WHERE run_id = :run1 AND entity = 'run_step' AND note LIKE '%each%';
SELECT step_key FROM orch.tasks WHERE run_id = :run1 AND state = 'queued';

-- 2. max_parallel: never more open items than that, on the counted path
--    and in batches.
SELECT orch_define('mf_par', '{"steps": [
    {"step_id": "each", "queue": "mf_p", "handler": "each", "map": {"over": "$.input.items", "max_parallel": 3}}]}') AS version;
SELECT orch_publish('mf_par', 1) IS NOT NULL AS published;
SELECT orch_start('mf_par', jsonb_build_object('items', (SELECT jsonb_agg(g) FROM generate_series(1, 20) g))) AS run2 \gset
CREATE TEMP TABLE open_seen (n int);
DO $$
DECLARE c record; run bigint := currval('orch.runs_id_seq');
BEGIN
    LOOP
        INSERT INTO open_seen SELECT count(*) FROM orch.tasks
         WHERE run_id = run AND state NOT IN ('completed', 'failed', 'cancelled');
        SELECT * INTO c FROM orch_dequeue('mf_p', 'w');
        EXIT WHEN c.task_id IS NULL;
        PERFORM orch_complete(c.task_id, c.lease_token, c.payload -> 'item');
    END LOOP;
END $$;
SELECT max(n) AS most_open, count(*) AS looks FROM open_seen;
SELECT state, items_total, items_next, items_done, output FROM orch.run_steps WHERE run_id = :run2;
SELECT orch_start('mf_par', jsonb_build_object('items', (SELECT jsonb_agg(g) FROM generate_series(1, 10) g))) AS run3 \gset
SELECT orch_complete_batch(array_agg(d.task_id), array_agg(d.lease_token), array_agg(d.payload -> 'item')) AS batch
  FROM orch_dequeue('mf_p', 'w', 10) d;
SELECT count(*) AS open_after_batch FROM orch.tasks WHERE run_id = :run3 AND state = 'queued';
SELECT orch_complete_batch(array_agg(d.task_id), array_agg(d.lease_token), array_agg(d.payload -> 'item')) AS batch
  FROM orch_dequeue('mf_p', 'w', 10) d;
SELECT orch_complete_batch(array_agg(d.task_id), array_agg(d.lease_token), array_agg(d.payload -> 'item')) AS batch
  FROM orch_dequeue('mf_p', 'w', 10) d;
SELECT orch_complete_batch(array_agg(d.task_id), array_agg(d.lease_token), array_agg(d.payload -> 'item')) AS batch
  FROM orch_dequeue('mf_p', 'w', 10) d;
SELECT state, items_next, items_done, output FROM orch.run_steps WHERE run_id = :run3;

-- 3. One failed item stops the others and fails the step (general path).
SELECT orch_start('mf_par', jsonb_build_object('items', '[1, 2, 3, 4, 5]'::jsonb)) AS run4 \gset
SELECT f.state FROM orch_dequeue('mf_p', 'w') d, LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'bad item') f;
SELECT state FROM orch.run_steps WHERE run_id = :run4;
SELECT state, count(*) FROM orch.tasks WHERE run_id = :run4 GROUP BY 1 ORDER BY 1;
SELECT state FROM orch.runs WHERE id = :run4;

-- 4. A map step whose queue does not exist yet: created on the way, every item enqueued.
SELECT orch_define('mf_newq', '{"steps": [
    {"step_id": "each", "queue": "mf_new_queue", "handler": "each", "map": {"over": "$.input.items", "max_parallel": 2}}]}') AS version;
SELECT orch_publish('mf_newq', 1) IS NOT NULL AS published;
SELECT orch_start('mf_newq', '{"items": ["a", "b", "c"]}') AS run5 \gset
SELECT step_key, payload -> 'item' AS item FROM orch.tasks WHERE run_id = :run5 ORDER BY id;
SELECT count(*) AS done FROM orch_dequeue('mf_new_queue', 'w', 5) d, LATERAL orch_complete(d.task_id, d.lease_token, d.payload -> 'item') c;
SELECT count(*) AS done FROM orch_dequeue('mf_new_queue', 'w', 5) d, LATERAL orch_complete(d.task_id, d.lease_token, d.payload -> 'item') c;
SELECT state, output FROM orch.run_steps WHERE run_id = :run5;
