-- bench/wf_definitions.sql: the two workflows of the wf group (see
-- bench/README.md), defined and published after every reset, and their
-- queue 'wf' (default settings, like 'bench').  Every step is a task step
-- in queue 'wf', so one claim + complete (bench/orch_process.sql) runs one
-- step; the next step's task is enqueued by that same orch_complete.
SELECT orch_create_queue('wf');

-- (a) 5 steps in a line: s1 -> s2 -> s3 -> s4 -> s5
SELECT orch_publish('bench_linear5', orch_define('bench_linear5', '{
  "description": "bench: 5 task steps in a line",
  "policies": {"queue": "wf"},
  "steps": [
    {"step_id": "s1", "handler": "bench.step"},
    {"step_id": "s2", "handler": "bench.step", "depends_on": ["s1"]},
    {"step_id": "s3", "handler": "bench.step", "depends_on": ["s2"]},
    {"step_id": "s4", "handler": "bench.step", "depends_on": ["s3"]},
    {"step_id": "s5", "handler": "bench.step", "depends_on": ["s4"]}
  ]}'));

-- (b) fan-out 10 + join: start -> p01..p10 (in parallel) -> join
-- (join: all_succeeded, the default), 12 task steps per run
SELECT orch_publish('bench_fan10', orch_define('bench_fan10', '{
  "description": "bench: start, 10 parallel steps, a join",
  "policies": {"queue": "wf"},
  "steps": [
    {"step_id": "start", "handler": "bench.start"},
    {"step_id": "p01", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p02", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p03", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p04", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p05", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p06", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p07", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p08", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p09", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "p10", "handler": "bench.part", "depends_on": ["start"]},
    {"step_id": "join", "handler": "bench.join",
     "depends_on": ["p01", "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09", "p10"]}
  ]}'));
