-- bench/subflow_definitions.sql: the workflows of the subflows group (see
-- bench/README.md), defined and published after every reset, and their
-- queue 'sub' (leases of an hour: nothing is recovered during a run).
-- The parent's map step starts one child run per item of $.input.items
-- (the item is the child's input); each child is one task step in queue
-- 'sub'.  The plain map is the reference: the same items as the tasks of
-- one map step, with no child runs.
SELECT orch_create_queue('sub', '{"lease": "1 hour"}');

SELECT orch_publish('bench_sub_child', orch_define('bench_sub_child', '{
  "description": "bench: the child, one task step",
  "steps": [{"step_id": "work", "queue": "sub", "handler": "bench.work"}]}'));

SELECT orch_publish('bench_sub_parent', orch_define('bench_sub_parent', '{
  "description": "bench: one child run per item",
  "steps": [{"step_id": "fan", "type": "subflow", "definition": "bench_sub_child",
             "map": {"over": "$.input.items"}}]}'));

SELECT orch_publish('bench_sub_plainmap', orch_define('bench_sub_plainmap', '{
  "description": "bench: one task per item (the reference)",
  "steps": [{"step_id": "fan", "queue": "sub", "handler": "bench.work",
             "map": {"over": "$.input.items"}}]}'));
