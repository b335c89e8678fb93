-- Fair claims: a queue with "fairness": "round_robin" hands out the heads
-- of its keys (tenants, or concurrency keys) in turn, in the order of their
-- names, each key weight tasks per turn, whatever the backlog behind
-- another key; a key held back by a limit gives up its turn; a claim that
-- rolls back gives its turns back.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc

-- settings: shown with the others, checked
SELECT s ->> 'fairness' AS fairness, s ->> 'fairness_key' AS fairness_key
  FROM orch_create_queue('fr') s;
SELECT s ->> 'fairness' AS fairness, s ->> 'fairness_key' AS fairness_key
  FROM orch_configure_queue('fr', '{"fairness": "round_robin"}') s;
SELECT pg_temp.sqlstate_of($$SELECT orch_configure_queue('fr', '{"fairness": "fifo"}')$$) AS bad_fairness,
       pg_temp.sqlstate_of($$SELECT orch_configure_queue('fr', '{"fairness_key": "owner"}')$$) AS bad_key,
       pg_temp.sqlstate_of($$SELECT orch_configure_queue('fr', '{"fairness": 1}')$$) AS not_text;
SELECT orch_queue_settings('fr') ->> 'fairness' AS unchanged;

-- one tenant's burst of 2,000 tasks, then three small tenants' 3 each
SELECT count(*) AS big FROM orch_enqueue_batch('fr', array_fill('{}'::jsonb, ARRAY[2000]), tenant => 'fr_big');
SELECT count(*) AS small FROM (SELECT orch_enqueue('fr', jsonb_build_object('n', n), tenant => 'fr_s' || s)
                                 FROM generate_series(1, 3) s, generate_series(1, 3) n) x;
ANALYZE orch.tasks;

-- what one claim of 10 reads of the tenant claim index, in its own transaction
CREATE FUNCTION pg_temp.claim10(OUT tenants text, OUT index_entries bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT string_agg(t.tenant_id || '×' || t.n, ' ' ORDER BY t.tenant_id) INTO tenants
      FROM (SELECT x.tenant_id, count(*) AS n FROM orch_dequeue('fr', 'fr-w', 10) d
              JOIN orch_tasks x USING (task_id) GROUP BY 1) t;
    index_entries := pg_stat_get_xact_tuples_returned('orch.tasks_tenant_claim_idx'::regclass);
END $$;
-- the small tenants are served in the first claim: each key's head in
-- turn, round after round, the 2,000 tasks behind the big one not read (a
-- loose index scan reads one entry per key, then the heads it takes)
SELECT pg_stat_force_next_flush()::text = '' AS flushed;
BEGIN;
SELECT tenants, index_entries < 50 AS reads_keys_not_backlog FROM pg_temp.claim10();
COMMIT;
-- where the next claim starts: after the key the last turn went to
SELECT fkey, credit FROM orch.fair_cursors WHERE queue = 'fr';

-- claims of one, one call each: the keys in turn, the cycle starting over
SELECT string_agg(t.tenant_id, ' ' ORDER BY g) AS in_turn
  FROM generate_series(1, 8) g, LATERAL orch_dequeue('fr', 'fr-w' || g, 1) d
  JOIN orch_tasks t ON t.task_id = d.task_id;

-- a claim that rolls back gives its turn back: the same key comes next
BEGIN;
SELECT t.tenant_id AS rolled_back FROM orch_dequeue('fr', 'fr-w', 1) d JOIN orch_tasks t USING (task_id);
ROLLBACK;
SELECT t.tenant_id AS next FROM orch_dequeue('fr', 'fr-w', 1) d JOIN orch_tasks t USING (task_id);

-- weights: a key takes that many tasks per turn, a turn may span claims
SELECT orch_set_fairness_weight('fr', 'fr_big', 3)::text AS weighted;
SELECT orch_enqueue('fr', '{}', tenant => 'fr_s1') > 0 AS s1_more, orch_enqueue('fr', '{}', tenant => 'fr_s2') > 0 AS s2_more;
SELECT string_agg(t.tenant_id, ' ' ORDER BY g) AS weighted_turns
  FROM generate_series(1, 6) g, LATERAL orch_dequeue('fr', 'fr-v' || g, 1) d
  JOIN orch_tasks t ON t.task_id = d.task_id;
SELECT pg_temp.sqlstate_of($$SELECT orch_set_fairness_weight('fr', 'fr_big', 0)$$) AS zero,
       pg_temp.sqlstate_of($$SELECT orch_set_fairness_weight('fr', 'fr_big', 1001)$$) AS too_big,
       pg_temp.sqlstate_of($$SELECT orch_set_fairness_weight('fr_none', 'x', 2)$$) AS no_queue,
       pg_temp.sqlstate_of($$SELECT orch_set_fairness_weight('fr', NULL, 2)$$) AS no_key;
SELECT fkey, weight FROM orch.fair_weights WHERE queue = 'fr';
-- NULL: back to 1
SELECT orch_set_fairness_weight('fr', 'fr_big', NULL)::text AS reset;
SELECT count(*) AS weights FROM orch.fair_weights WHERE queue = 'fr';

-- a caller bound to tenants: only its tenants' keys
CREATE ROLE fr_bound;
GRANT orch_worker TO fr_bound;
SELECT orch_bind_tenant('fr_bound', 'fr_s3') AS bound;
SELECT orch_enqueue('fr', '{}', tenant => 'fr_s3') > 0 AS s3_more;
SET ROLE fr_bound;
SELECT string_agg(DISTINCT t.tenant_id, ' ') AS bound_claims
  FROM orch_dequeue('fr', 'fr-b', 5) d JOIN orch_tasks t USING (task_id);
RESET ROLE;

-- the default tenant is a key too (looked for among the queue's first
-- 1,000 claimable tasks)
SELECT orch_create_queue('frd', '{"fairness": "round_robin"}') IS NOT NULL AS created;
SELECT count(*) AS big FROM orch_enqueue_batch('frd', array_fill('{}'::jsonb, ARRAY[20]), tenant => 'frd_big');
SELECT orch_enqueue('frd', '{}') > 0 AS dflt;
SELECT string_agg(t.tenant_id, ' ' ORDER BY t.tenant_id) AS with_default
  FROM orch_dequeue('frd', 'frd-w', 2) d JOIN orch_tasks t USING (task_id);

-- fairness by concurrency key: a key at its concurrency limit gives up its
-- turn (its tasks wait gated), the tasks without a key are one more key
SELECT orch_create_queue('frk', '{"fairness": "round_robin", "fairness_key": "concurrency_key",
                                  "concurrency_key_limit": 2}') ->> 'fairness_key' AS by_key;
SELECT count(*) AS hot FROM (SELECT orch_enqueue('frk', '{}', concurrency_key => 'hot') FROM generate_series(1, 20)) x;
SELECT count(*) AS cold FROM (SELECT orch_enqueue('frk', '{}', concurrency_key => 'c' || g) FROM generate_series(1, 3) g) x;
SELECT count(*) AS unkeyed FROM (SELECT orch_enqueue('frk', '{}') FROM generate_series(1, 3)) x;
SELECT coalesce(t.concurrency_key, '(none)') AS key, count(*)
  FROM orch_dequeue('frk', 'frk-w', 10) d JOIN orch_tasks t USING (task_id) GROUP BY 1 ORDER BY 1;
-- every key at its limit or empty: nothing more, and the cursor stays
SELECT fkey, credit FROM orch.fair_cursors WHERE queue = 'frk';
SELECT count(*) AS nothing_more FROM orch_dequeue('frk', 'frk-w', 10);
SELECT fkey, credit FROM orch.fair_cursors WHERE queue = 'frk';

-- with owner_limit: an owner at its limit gives up its key's turn
SELECT orch_create_queue('fro', '{"fairness": "round_robin", "owner_limit": 1}') IS NOT NULL AS created;
SELECT count(*) FROM (SELECT orch_enqueue('fro', '{}', tenant => 'fro_a', owner => 'o1') FROM generate_series(1, 5)) x;
SELECT count(*) FROM (SELECT orch_enqueue('fro', '{}', tenant => 'fro_b', owner => 'o' || g) FROM generate_series(1, 5) g) x;
SELECT string_agg(t.tenant_id || ':' || t.owner, ' ' ORDER BY t.tenant_id, t.owner) AS owners_claimed
  FROM orch_dequeue('fro', 'fro-w', 4) d JOIN orch_tasks t USING (task_id);

-- with queue_limit: at most the limit, still in turn
SELECT orch_create_queue('frq', '{"fairness": "round_robin", "queue_limit": 2}') IS NOT NULL AS created;
SELECT count(*) FROM orch_enqueue_batch('frq', array_fill('{}'::jsonb, ARRAY[10]), tenant => 'frq_a');
SELECT count(*) FROM orch_enqueue_batch('frq', array_fill('{}'::jsonb, ARRAY[10]), tenant => 'frq_b');
SELECT string_agg(t.tenant_id, ' ' ORDER BY t.tenant_id) AS limited
  FROM orch_dequeue('frq', 'frq-w', 10) d JOIN orch_tasks t USING (task_id);
SELECT count(*) AS at_limit FROM orch_dequeue('frq', 'frq-w', 10);

-- the function is the administrators': others are refused
CREATE ROLE fr_producer;
GRANT orch_producer TO fr_producer;
SET ROLE fr_producer;
SELECT pg_temp.sqlstate_of($$SELECT orch_set_fairness_weight('fr', 'fr_big', 2)$$) AS producer;
RESET ROLE;
SET ROLE fr_bound;
SELECT pg_temp.sqlstate_of($$SELECT orch_set_fairness_weight('fr', 'fr_big', 2)$$) AS bound_worker;
RESET ROLE;

-- a queue dropped takes its weights and cursor with it
SELECT count(orch_drop_queue(q, true)) AS dropped FROM unnest(ARRAY['fr', 'frd', 'frk', 'fro', 'frq']) q;
SELECT (SELECT count(*) FROM orch.fair_weights WHERE queue LIKE 'fr%') AS weights,
       (SELECT count(*) FROM orch.fair_cursors WHERE queue LIKE 'fr%') AS cursors;
SELECT orch_unbind_tenant('fr_bound', 'fr_s3') AS unbound;
DROP ROLE fr_bound;
DROP ROLE fr_producer;
