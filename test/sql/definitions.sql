-- definitions: versioned, validated, immutable-once-published workflow
-- definitions (format reference: docs/workflows.md).
-- Every validation rule with a failing case (SQLSTATE and the JSON path in
-- the detail), valid specs of every shape, the draft / published /
-- deprecated lifecycle, OR007 for every way of changing a published version
-- (raw UPDATE, DELETE and TRUNCATE as superuser included), content hashes,
-- privileges and audit events.  Its definitions are named defs_*.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
CALL pg_temp.create_roles('defs_admin', 'defs_reader', 'defs_bound', 'defs_nobody');
SET client_min_messages = warning;  -- roles outlive the database: no "already a member" notices
GRANT orch_admin TO defs_admin, defs_bound;
GRANT orch_reader TO defs_reader;
RESET client_min_messages;

-- base(): a valid three-step pipeline fetch -> check -> store.
CREATE FUNCTION pg_temp.base() RETURNS jsonb LANGUAGE sql AS $$
SELECT '{"steps": [
    {"step_id": "fetch", "queue": "defs_q", "handler": "fetch"},
    {"step_id": "check", "queue": "defs_q", "handler": "check", "depends_on": ["fetch"]},
    {"step_id": "store", "queue": "defs_q", "handler": "store", "depends_on": ["check"]}]}'::jsonb
$$;
-- st(i, patch, drop): base() with patch merged into step i and the keys in drop removed.
CREATE FUNCTION pg_temp.st(i int, patch jsonb, drop text[] DEFAULT '{}') RETURNS jsonb LANGUAGE sql AS $$
SELECT jsonb_set(b, ARRAY['steps', i::text], ((b -> 'steps' -> i) || patch) - drop)
  FROM (SELECT pg_temp.base() AS b) x
$$;
-- top(patch): base() with patch merged into the top level.
CREATE FUNCTION pg_temp.top(patch jsonb) RETURNS jsonb LANGUAGE sql AS $$
SELECT pg_temp.base() || patch
$$;

SELECT pg_temp.v(pg_temp.base()) AS base_spec;

-- ---------------------------------------------------------------------------
-- 1. The error itself: OR008, errmsg "invalid workflow definition", the path
--    in the detail (the example of the issue), a hint where one helps.
-- ---------------------------------------------------------------------------
\set VERBOSITY default
SELECT orch_validate_definition('{"steps": [
    {"step_id": "start", "queue": "defs_q", "handler": "h"},
    {"step_id": "check", "queue": "defs_q", "handler": "h", "depends_on": ["start"]},
    {"step_id": "store", "queue": "defs_q", "handler": "h", "depends_on": ["fetch"]}]}');
SELECT orch_validate_definition(pg_temp.st(1, '{"hndler": "check"}'));
SELECT orch_validate_definition('{"steps": [
    {"step_id": "start", "queue": "defs_q", "handler": "h"},
    {"step_id": "fetch", "queue": "defs_q", "handler": "h", "depends_on": ["start", "check"]},
    {"step_id": "check", "queue": "defs_q", "handler": "h", "depends_on": ["fetch"]}]}');
\set VERBOSITY terse
SELECT pg_temp.try($$SELECT orch_validate_definition('{"steps": 1}')$$) AS sqlstate;

-- ---------------------------------------------------------------------------
-- 2. Top level: an object of steps (required, non-empty array, at most 1000),
--    description, policies, input_schema; nothing else.
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('array root',          '[]'::jsonb),
    ('scalar root',         '"steps"'),
    ('unknown key',         pg_temp.top('{"name": "x"}')),
    ('no steps',            '{"description": "nothing"}'),
    ('steps not an array',  '{"steps": {"step_id": "a"}}'),
    ('steps empty',         '{"steps": []}'),
    ('description number',  pg_temp.top('{"description": 1}'))
) t(label, spec);
SELECT pg_temp.v(jsonb_build_object('steps', jsonb_agg(jsonb_build_object(
           'step_id', 's' || i, 'queue', 'defs_q', 'handler', 'h')))) AS steps_1001
  FROM generate_series(1, 1001) i;
SELECT pg_temp.v(jsonb_build_object('steps', jsonb_agg(jsonb_build_object(
           'step_id', 's' || i, 'queue', 'defs_q', 'handler', 'h')))) AS steps_1000
  FROM generate_series(1, 1000) i;

-- ---------------------------------------------------------------------------
-- 3. policies: deadline, retry_policy, queue, retry_safety.
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(pg_temp.top(jsonb_build_object('policies', p))) AS result FROM (VALUES
    ('not an object',        '[]'::jsonb),
    ('unknown key',          '{"timeout": "1 hour"}'),
    ('deadline zero',        '{"deadline": "0 seconds"}'),
    ('deadline 36501 days',  '{"deadline": "36501 days"}'),
    ('deadline negative',    '{"deadline": -1}'),
    ('deadline bad text',    '{"deadline": "tomorrow-ish"}'),
    ('deadline boolean',     '{"deadline": true}'),
    ('retry_policy value',   '{"retry_policy": {"backoff": "sometimes"}}'),
    ('retry_policy key',     '{"retry_policy": {"lease": "1 minute"}}'),
    ('retry_policy array',   '{"retry_policy": []}'),
    ('queue name',           '{"queue": "no spaces"}'),
    ('queue number',         '{"queue": 7}'),
    ('retry_safety',         '{"retry_safety": "MAYBE"}'),
    ('retry_safety clash',   '{"retry_policy": {"retry_safety": "NOT_SAFE_TO_RETRY"}, "retry_safety": "SAFE_TO_RETRY"}'),
    ('all valid',            '{"deadline": "1 hour", "retry_policy": {"max_attempts": 3, "backoff": "fixed"}, "queue": "defs_q", "retry_safety": "SAFE_TO_RETRY_WITH_GUARD"}'),
    ('deadline 100 years',   '{"deadline": "100 years"}'),
    ('deadline 36500 days',  '{"deadline": "36500 days"}'),
    ('deadline seconds',     '{"deadline": 3600.5}')
) t(label, p);

-- ---------------------------------------------------------------------------
-- 4. input_schema: the JSON Schema subset (every keyword: workflows_schemas).
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(pg_temp.top(jsonb_build_object('input_schema', s))) AS result FROM (VALUES
    ('not an object',         '"object"'::jsonb),
    ('unsupported keyword',   '{"type": "object", "format": "x"}'),
    ('required not array',    '{"required": "id"}'),
    ('required number',       '{"required": ["id", 5]}'),
    ('required empty key',    '{"required": ["id", ""]}'),
    ('required duplicate',    '{"required": ["id", "doc", "id"]}'),
    ('properties array',      '{"properties": []}'),
    ('property not object',   '{"properties": {"id": "string"}}'),
    ('property unknown key',  '{"properties": {"id": {"type": "string", "format": "uuid"}}}'),
    ('property without type', '{"properties": {"id": {}}}'),  -- any value
    ('property bad type',     '{"properties": {"id": {"type": "text"}}}'),
    ('quoted key in path',    '{"properties": {"doc id": {"type": "uuid"}}}'),
    ('all valid',             '{"required": ["id", "amount"], "properties": {"id": {"type": "string"}, "amount": {"type": "number"}, "n": {"type": "integer"}, "ok": {"type": "boolean"}, "meta": {"type": "object"}, "items": {"type": "array"}, "none": {"type": "null"}}}')
) t(label, s);

-- ---------------------------------------------------------------------------
-- 5. Steps: step_id, type, description, queue, handler.
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('step not an object',     jsonb_set(pg_temp.base(), '{steps,1}', '5')),
    ('unknown key',            pg_temp.st(1, '{"name": "Check"}')),
    ('no step_id',             pg_temp.st(0, '{}', '{step_id}')),
    ('step_id number',         pg_temp.st(0, '{"step_id": 1}')),
    ('step_id characters',     pg_temp.st(2, '{"step_id": "store it"}')),
    ('step_id 65 bytes',       pg_temp.st(2, jsonb_build_object('step_id', repeat('s', 65)))),
    ('step_id 64 bytes',       pg_temp.st(2, jsonb_build_object('step_id', repeat('s', 64)))),
    ('duplicate step_id',      pg_temp.st(2, '{"step_id": "fetch"}')),
    ('unknown type',           pg_temp.st(1, '{"type": "script"}')),
    ('type number',            pg_temp.st(1, '{"type": 1}')),
    ('description object',     pg_temp.st(1, '{"description": {}}')),
    ('task without queue',     pg_temp.st(1, '{}', '{queue}')),
    ('task without handler',   pg_temp.st(1, '{}', '{handler}')),
    ('bad queue name',         pg_temp.st(1, '{"queue": "a/b"}')),
    ('empty queue name',       pg_temp.st(1, '{"queue": ""}')),
    ('queue not a string',     pg_temp.st(1, '{"queue": ["defs_q"]}')),
    ('empty handler',          pg_temp.st(1, '{"handler": ""}')),
    ('handler 257 bytes',      pg_temp.st(1, jsonb_build_object('handler', repeat('h', 257)))),
    ('handler number',         pg_temp.st(1, '{"handler": 3}')),
    ('external_call no queue', pg_temp.st(1, '{"type": "external_call"}', '{queue}')),
    ('notify no handler',      pg_temp.st(1, '{"type": "notify"}', '{handler}')),
    ('queue on approval (ok)', pg_temp.st(1, '{"type": "human_approval"}', '{handler}')),
    ('handler on approval',    pg_temp.st(1, '{"type": "human_approval"}', '{queue}')),
    ('queue on wait',          pg_temp.st(1, '{"type": "wait", "duration": "1 minute"}', '{handler}')),
    ('handler on wait',        pg_temp.st(1, '{"type": "wait", "duration": "1 minute"}', '{queue}'))
) t(label, spec);
-- policies.queue stands in for a missing step queue
SELECT pg_temp.v(pg_temp.st(1, '{}', '{queue}') || '{"policies": {"queue": "defs_default"}}') AS default_queue;
-- the first problem in document order wins: step 0 before step 2, and an
-- unknown key before anything else in its object
SELECT pg_temp.v(jsonb_set(pg_temp.st(2, '{"depends_on": ["nope"]}'), '{steps,0,queue}', '"a b"')) AS first_step_first,
       pg_temp.v(pg_temp.st(1, '{"extra": 1}', '{step_id,handler}')) AS unknown_key_first;
-- forward references are fine; a reference to a duplicated id is reported at the duplicate
SELECT pg_temp.v('{"steps": [
    {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["a"]},
    {"step_id": "a", "queue": "defs_q", "handler": "h"}]}') AS forward_reference,
       pg_temp.v('{"steps": [
    {"step_id": "a", "queue": "defs_q", "handler": "h"},
    {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["a"]},
    {"step_id": "a", "queue": "defs_q", "handler": "h"}]}') AS duplicate_after_use;

-- ---------------------------------------------------------------------------
-- 6. depends_on and join; on_success / on_failure / on_timeout.
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('depends_on string',     pg_temp.st(2, '{"depends_on": "check"}')),
    ('depends_on number',     pg_temp.st(2, '{"depends_on": ["check", 1]}')),
    ('depends_on unknown',    pg_temp.st(2, '{"depends_on": ["fetch", "chek"]}')),
    ('depends_on itself',     pg_temp.st(2, '{"depends_on": ["check", "store"]}')),
    ('depends_on duplicate',  pg_temp.st(2, '{"depends_on": ["check", "fetch", "check"]}')),
    ('join unknown',          pg_temp.st(2, '{"join": "all"}')),
    ('on_success unknown',    pg_temp.st(0, '{"on_success": "nowhere"}')),
    ('on_failure unknown',    pg_temp.st(0, '{"on_failure": ["store", "cleanup"]}')),
    ('on_timeout number',     pg_temp.st(0, '{"on_timeout": 5}')),
    ('on_success object',     pg_temp.st(0, '{"on_success": {"step": "check"}}')),
    ('on_success duplicate',  pg_temp.st(0, '{"on_success": ["check", "check"]}')),
    ('join valid',            pg_temp.st(2, '{"join": "all_finished"}')),
    ('on_* valid',            pg_temp.st(0, '{"on_success": null, "on_failure": "store", "on_timeout": ["store"]}')),
    ('on_success empty',      pg_temp.st(0, '{"on_success": []}'))
) t(label, spec);

-- ---------------------------------------------------------------------------
-- 7. retry_policy, retry_safety, timeout (only steps that run a handler take
--    a retry policy or a retry safety).
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('retry_policy string',    pg_temp.st(1, '{"retry_policy": "default"}')),
    ('retry_policy value',     pg_temp.st(1, '{"retry_policy": {"max_attempts": 0}}')),
    ('retry_policy class',     pg_temp.st(1, '{"retry_policy": {"retry_on": ["NON_RETRYABLE"]}}')),
    ('retry_policy key',       pg_temp.st(1, '{"retry_policy": {"priority": 1}}')),
    ('retry_policy schedule',  pg_temp.st(1, '{"retry_policy": {"backoff": "schedule"}}')),
    ('retry_policy approval',  pg_temp.st(1, '{"type": "human_approval", "retry_policy": {}}', '{queue,handler}')),
    ('retry_safety unknown',   pg_temp.st(1, '{"retry_safety": "SAFE"}')),
    ('retry_safety wait',      pg_temp.st(1, '{"type": "wait", "duration": 60, "retry_safety": "SAFE_TO_RETRY"}', '{queue,handler}')),
    ('retry_safety clash',     pg_temp.st(1, '{"retry_policy": {"retry_safety": "SAFE_TO_RETRY"}, "retry_safety": "NOT_SAFE_TO_RETRY"}')),
    ('timeout text',           pg_temp.st(1, '{"timeout": "a while"}')),
    ('timeout zero',           pg_temp.st(1, '{"timeout": 0}')),
    ('timeout negative',       pg_temp.st(1, '{"timeout": "-5 minutes"}')),
    ('timeout 36501 days',     pg_temp.st(1, '{"timeout": "36501 days"}')),
    ('timeout 3153600001 s',   pg_temp.st(1, '{"timeout": 3153600001}')),
    ('timeout 1e10 seconds',   pg_temp.st(1, '{"timeout": 1e10}')),
    ('timeout 1e-9 seconds',   pg_temp.st(1, '{"timeout": 1e-9}')),
    ('timeout boolean',        pg_temp.st(1, '{"timeout": false}')),
    ('timeout overflow',       pg_temp.st(1, '{"timeout": "9999999999 years"}')),
    ('all valid',              pg_temp.st(1, '{"retry_policy": {"max_attempts": 3, "schedule": ["5 s", "15 s", "30 s"], "retry_on": ["TRANSIENT"], "on_exhausted": "escalate", "retry_safety": "NOT_SAFE_TO_RETRY"}, "retry_safety": "NOT_SAFE_TO_RETRY", "timeout": "PT5M"}')),
    ('timeout seconds',        pg_temp.st(1, '{"timeout": 0.5}')),
    ('timeout 36500 days',     pg_temp.st(1, '{"timeout": "36500 days"}')),
    ('timeout 3153600000 s',   pg_temp.st(1, '{"timeout": 3153600000}'))
) t(label, spec);

-- ---------------------------------------------------------------------------
-- 8. compensation: {handler, queue, mode}, on task / external_call / notify.
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('on approval',      pg_temp.st(1, '{"type": "human_approval", "compensation": {"handler": "undo"}}', '{queue,handler}')),
    ('on decision',      pg_temp.st(1, '{"type": "decision", "targets": ["store"], "default": "store", "compensation": {"handler": "undo"}}', '{queue,handler}')),
    ('not an object',    pg_temp.st(1, '{"compensation": "undo"}')),
    ('unknown key',      pg_temp.st(1, '{"compensation": {"handler": "undo", "when": "always"}}')),
    ('no handler',       pg_temp.st(1, '{"compensation": {"queue": "defs_q"}}')),
    ('empty handler',    pg_temp.st(1, '{"compensation": {"handler": ""}}')),
    ('bad queue',        pg_temp.st(1, '{"compensation": {"handler": "undo", "queue": "q q"}}')),
    ('bad mode',         pg_temp.st(1, '{"compensation": {"handler": "undo", "mode": "manual"}}')),
    ('valid',            pg_temp.st(1, '{"compensation": {"handler": "undo", "queue": "defs_undo", "mode": "approval"}}')),
    ('valid external',   pg_temp.st(1, '{"type": "external_call", "compensation": {"handler": "undo"}}')),
    ('valid notify',     pg_temp.st(1, '{"type": "notify", "compensation": {"handler": "undo", "mode": "auto"}}'))
) t(label, spec);

-- ---------------------------------------------------------------------------
-- 9. decision steps: targets, rules, default; their successors are their
--    targets.  dec(patch): fetch -> route (decision over check, store).
-- ---------------------------------------------------------------------------
CREATE FUNCTION pg_temp.dec(patch jsonb, drop text[] DEFAULT '{}') RETURNS jsonb LANGUAGE sql AS $$
SELECT jsonb_build_object('steps', jsonb_build_array(
    '{"step_id": "fetch", "queue": "defs_q", "handler": "fetch"}'::jsonb,
    ('{"step_id": "route", "type": "decision", "depends_on": ["fetch"], "targets": ["check", "store"],
       "rules": [{"when": {"path": "$.steps.fetch.output.kind", "op": "eq", "value": "pdf"}, "then": "check"}],
       "default": "store"}'::jsonb || patch) - drop,
    '{"step_id": "check", "queue": "defs_q", "handler": "check"}'::jsonb,
    '{"step_id": "store", "queue": "defs_q", "handler": "store"}'::jsonb))
$$;
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('valid decision',        pg_temp.dec('{}')),
    ('targets on a task',     pg_temp.st(1, '{"targets": ["store"]}')),
    ('rules on a task',       pg_temp.st(1, '{"rules": []}')),
    ('default on a task',     pg_temp.st(1, '{"default": "store"}')),
    ('no targets',            pg_temp.dec('{}', '{targets}')),
    ('targets empty',         pg_temp.dec('{"targets": []}')),
    ('targets string',        pg_temp.dec('{"targets": "check"}')),
    ('targets unknown',       pg_temp.dec('{"targets": ["check", "archive"]}')),
    ('targets duplicate',     pg_temp.dec('{"targets": ["check", "check"]}')),
    ('on_success',            pg_temp.dec('{"on_success": "check"}')),
    ('queue, no handler',     pg_temp.dec('{"queue": "defs_q"}')),
    ('handler, no queue',     pg_temp.dec('{"handler": "route"}')),
    ('nothing to choose',     pg_temp.dec('{}', '{rules,default}')),
    ('empty rules only',      pg_temp.dec('{"rules": []}', '{default}')),
    ('rules object',          pg_temp.dec('{"rules": {}}')),
    ('rule not object',       pg_temp.dec('{"rules": ["check"]}')),
    ('rule unknown key',      pg_temp.dec('{"rules": [{"if": {}, "then": "check"}]}')),
    ('rule without when',     pg_temp.dec('{"rules": [{"then": "check"}]}')),
    ('when not object',       pg_temp.dec('{"rules": [{"when": "always", "then": "check"}]}')),
    ('when unknown key',      pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "eq", "value": 1, "not": true}, "then": "check"}]}')),
    ('when without path',     pg_temp.dec('{"rules": [{"when": {"op": "eq", "value": 1}, "then": "check"}]}')),
    ('path number',           pg_temp.dec('{"rules": [{"when": {"path": 1, "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path without $.',       pg_temp.dec('{"rules": [{"when": {"path": "input.a", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path empty segment',    pg_temp.dec('{"rules": [{"when": {"path": "$.input..a", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path trailing dot',     pg_temp.dec('{"rules": [{"when": {"path": "$.input.", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path unknown root',     pg_temp.dec('{"rules": [{"when": {"path": "$.payload.a", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path $.result',         pg_temp.dec('{"rules": [{"when": {"path": "$.result.kind", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path $.steps',          pg_temp.dec('{"rules": [{"when": {"path": "$.steps", "op": "exists"}, "then": "check"}]}')),
    ('path unknown step',     pg_temp.dec('{"rules": [{"when": {"path": "$.steps.fetcher.output.kind", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('path without .output',  pg_temp.dec('{"rules": [{"when": {"path": "$.steps.fetch.result", "op": "eq", "value": 1}, "then": "check"}]}')),
    ('when without op',       pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "value": 1}, "then": "check"}]}')),
    ('unknown op',            pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "like", "value": 1}, "then": "check"}]}')),
    ('eq without value',      pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "eq"}, "then": "check"}]}')),
    ('exists with value',     pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "exists", "value": true}, "then": "check"}]}')),
    ('in with a scalar',      pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "in", "value": "pdf"}, "then": "check"}]}')),
    ('gt with an object',     pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "gt", "value": {}}, "then": "check"}]}')),
    ('rule without then',     pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "exists"}}]}')),
    ('then unknown',          pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "exists"}, "then": "archive"}]}')),
    ('then not a target',     pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "exists"}, "then": "fetch"}]}')),
    ('default not a target',  pg_temp.dec('{"default": "fetch"}')),
    ('default unknown',       pg_temp.dec('{"default": "archive"}')),
    ('second rule bad',       pg_temp.dec('{"rules": [{"when": {"path": "$.input.a", "op": "exists"}, "then": "check"}, {"when": {"path": "$.input.b", "op": "le", "value": null}, "then": "store"}]}')),
    ('every op valid',        pg_temp.dec('{"rules": [
        {"when": {"path": "$.input.a", "op": "eq", "value": {"x": [1]}}, "then": "check"},
        {"when": {"path": "$.input.a", "op": "ne", "value": null}, "then": "check"},
        {"when": {"path": "$.input.n", "op": "gt", "value": 1}, "then": "check"},
        {"when": {"path": "$.input.n", "op": "ge", "value": "2026-01-01"}, "then": "check"},
        {"when": {"path": "$.input.n", "op": "lt", "value": 1.5}, "then": "store"},
        {"when": {"path": "$.input.n", "op": "le", "value": -1}, "then": "store"},
        {"when": {"path": "$.steps.fetch.output", "op": "exists"}, "then": "store"},
        {"when": {"path": "$.input", "op": "in", "value": [1, "a"]}, "then": "store"}]}')),
    ('handler and $.result',  pg_temp.dec('{"handler": "route", "queue": "defs_q", "rules": [{"when": {"path": "$.result.kind", "op": "eq", "value": "pdf"}, "then": "check"}]}', '{default}')),
    ('handler only',          pg_temp.dec('{"handler": "route", "queue": "defs_q"}', '{rules,default}')),
    ('default only',          pg_temp.dec('{}', '{rules}'))
) t(label, spec);
-- step ids may contain dots: the longest step_id the path names wins
SELECT pg_temp.v('{"steps": [
    {"step_id": "a", "queue": "defs_q", "handler": "h"},
    {"step_id": "a.b", "queue": "defs_q", "handler": "h", "depends_on": ["a"]},
    {"step_id": "route", "type": "decision", "depends_on": ["a.b"], "targets": ["end"],
     "rules": [{"when": {"path": "$.steps.a.b.output.ok", "op": "eq", "value": true}, "then": "end"}]},
    {"step_id": "end", "queue": "defs_q", "handler": "h"}]}') AS dotted_step_path;

-- ---------------------------------------------------------------------------
-- 10. wait steps (duration xor until_path) and map (task steps only).
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('duration on a task',     pg_temp.st(1, '{"duration": "1 hour"}')),
    ('until_path on a task',   pg_temp.st(1, '{"until_path": "$.input.at"}')),
    ('wait with both',         pg_temp.st(1, '{"type": "wait", "duration": "1 hour", "until_path": "$.input.at"}', '{queue,handler}')),
    ('wait with neither',      pg_temp.st(1, '{"type": "wait"}', '{queue,handler}')),
    ('duration text',          pg_temp.st(1, '{"type": "wait", "duration": "later"}', '{queue,handler}')),
    ('duration zero',          pg_temp.st(1, '{"type": "wait", "duration": "0"}', '{queue,handler}')),
    ('until_path not input',   pg_temp.st(1, '{"type": "wait", "until_path": "$.steps.fetch.output.at"}', '{queue,handler}')),
    ('until_path $.input',     pg_temp.st(1, '{"type": "wait", "until_path": "$.input"}', '{queue,handler}')),
    ('until_path empty seg',   pg_temp.st(1, '{"type": "wait", "until_path": "$.input.a..b"}', '{queue,handler}')),
    ('until_path number',      pg_temp.st(1, '{"type": "wait", "until_path": 1}', '{queue,handler}')),
    ('wait duration valid',    pg_temp.st(1, '{"type": "wait", "duration": 90, "timeout": "2 minutes", "on_timeout": "store"}', '{queue,handler}')),
    ('wait until valid',       pg_temp.st(1, '{"type": "wait", "until_path": "$.input.release.at"}', '{queue,handler}')),
    ('map on external_call',   pg_temp.st(1, '{"type": "external_call", "map": {"over": "$.input.items"}}')),
    ('map not an object',      pg_temp.st(1, '{"map": "$.input.items"}')),
    ('map unknown key',        pg_temp.st(1, '{"map": {"over": "$.input.items", "order": "input"}}')),
    ('map without over',       pg_temp.st(1, '{"map": {"max_parallel": 2}}')),
    ('over number',            pg_temp.st(1, '{"map": {"over": 1}}')),
    ('over nested input key',  pg_temp.st(1, '{"map": {"over": "$.input.a.b"}}')),
    ('over $.input.',          pg_temp.st(1, '{"map": {"over": "$.input."}}')),
    ('over other root',        pg_temp.st(1, '{"map": {"over": "$.items"}}')),
    ('over no output',         pg_temp.st(1, '{"map": {"over": "$.steps.fetch.items"}}')),
    ('over no key',            pg_temp.st(1, '{"map": {"over": "$.steps.fetch.output"}}')),
    ('over unknown step',      pg_temp.st(1, '{"map": {"over": "$.steps.fetcher.output.items"}}')),
    ('over not an ancestor',   pg_temp.st(1, '{"map": {"over": "$.steps.store.output.items"}}')),
    ('max_parallel zero',      pg_temp.st(1, '{"map": {"over": "$.input.items", "max_parallel": 0}}')),
    ('max_parallel fraction',  pg_temp.st(1, '{"map": {"over": "$.input.items", "max_parallel": 1.5}}')),
    ('max_parallel text',      pg_temp.st(1, '{"map": {"over": "$.input.items", "max_parallel": "4"}}')),
    ('max_parallel too big',   pg_temp.st(1, '{"map": {"over": "$.input.items", "max_parallel": 3000000000}}')),
    ('map over input',         pg_temp.st(1, '{"map": {"over": "$.input.items", "max_parallel": 4}}')),
    ('map over output',        pg_temp.st(2, '{"map": {"over": "$.steps.fetch.output.items"}}'))
) t(label, spec);
-- map over the output of a step reached by an edge only (no depends_on): refused
SELECT pg_temp.v('{"steps": [
    {"step_id": "fetch", "queue": "defs_q", "handler": "h", "on_success": "each"},
    {"step_id": "each", "queue": "defs_q", "handler": "h", "map": {"over": "$.steps.fetch.output.items"}}]}') AS map_edge_only;

-- ---------------------------------------------------------------------------
-- 11. The graph: an entry step, every step reachable, no cycle (through
--     depends_on, on_* edges and decision targets).
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('no entry step', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h", "depends_on": ["b"]},
        {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["a"]}]}'::jsonb),
    ('unreachable', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h"},
        {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["c"]},
        {"step_id": "c", "queue": "defs_q", "handler": "h", "depends_on": ["b"]}]}'),
    ('cycle depends_on', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h"},
        {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["a", "d"]},
        {"step_id": "c", "queue": "defs_q", "handler": "h", "depends_on": ["b"]},
        {"step_id": "d", "queue": "defs_q", "handler": "h", "depends_on": ["c"]}]}'),
    ('cycle starts at first step', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h"},
        {"step_id": "c", "queue": "defs_q", "handler": "h", "depends_on": ["d"]},
        {"step_id": "d", "queue": "defs_q", "handler": "h", "depends_on": ["a", "c"]}]}'),
    ('cycle on_success self', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h", "on_success": "b"},
        {"step_id": "b", "queue": "defs_q", "handler": "h", "on_success": ["b"]}]}'),
    ('cycle on_failure', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h"},
        {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["a"], "on_failure": "c"},
        {"step_id": "c", "queue": "defs_q", "handler": "h", "on_timeout": "b"}]}'),
    ('cycle through a decision', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h"},
        {"step_id": "retry", "queue": "defs_q", "handler": "h", "depends_on": ["a"]},
        {"step_id": "route", "type": "decision", "depends_on": ["retry"], "targets": ["retry", "done"], "default": "done"},
        {"step_id": "done", "queue": "defs_q", "handler": "h"}]}'),
    ('two entries, diamond', '{"steps": [
        {"step_id": "a", "queue": "defs_q", "handler": "h"},
        {"step_id": "z", "queue": "defs_q", "handler": "h"},
        {"step_id": "b", "queue": "defs_q", "handler": "h", "depends_on": ["a", "z"]},
        {"step_id": "c", "queue": "defs_q", "handler": "h", "depends_on": ["a"], "on_failure": "d"},
        {"step_id": "d", "queue": "defs_q", "handler": "h", "depends_on": ["b", "c"], "join": "any"}]}')
) t(label, spec);
-- a long cycle is shortened in the message
SELECT pg_temp.v(jsonb_build_object('steps',
         jsonb_build_array('{"step_id": "start", "queue": "defs_q", "handler": "h"}'::jsonb)
         || jsonb_agg(jsonb_build_object('step_id', 's' || i, 'queue', 'defs_q', 'handler', 'h',
                      'depends_on', CASE WHEN i = 1 THEN jsonb_build_array('start', 's30')
                                         ELSE jsonb_build_array('s' || (i - 1)) END) ORDER BY i))) AS long_cycle
  FROM generate_series(1, 30) i;

-- ---------------------------------------------------------------------------
-- 12. Valid definitions of every shape (each is stored in section 13).
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE specs (name text PRIMARY KEY, spec jsonb NOT NULL);
INSERT INTO specs VALUES
('defs_linear', '{"description": "five steps in a line",
  "policies": {"queue": "defs_q", "deadline": "1 hour", "retry_policy": {"max_attempts": 3}},
  "steps": [
    {"step_id": "source_pin", "handler": "pin"},
    {"step_id": "mark", "handler": "mark", "depends_on": ["source_pin"], "timeout": "5 minutes"},
    {"step_id": "cutplan", "handler": "plan", "depends_on": ["mark"], "retry_safety": "SAFE_TO_RETRY_WITH_GUARD"},
    {"step_id": "backup", "handler": "backup", "depends_on": ["cutplan"], "retry_policy": {"backoff": "fixed", "initial_delay": "10 s"}},
    {"step_id": "closeout", "handler": "report", "depends_on": ["backup"]}]}'),
('defs_fanout', '{"steps": [
    {"step_id": "split", "queue": "defs_q", "handler": "split"},
    {"step_id": "left", "queue": "defs_q", "handler": "work", "depends_on": ["split"]},
    {"step_id": "middle", "queue": "defs_q", "handler": "work", "depends_on": ["split"]},
    {"step_id": "right", "queue": "defs_q", "handler": "work", "depends_on": ["split"]},
    {"step_id": "join", "queue": "defs_q", "handler": "merge", "depends_on": ["left", "middle", "right"], "join": "all_succeeded"},
    {"step_id": "first", "queue": "defs_q", "handler": "merge", "depends_on": ["left", "right"], "join": "any"}]}'),
('defs_decision', '{"steps": [
    {"step_id": "score", "queue": "defs_q", "handler": "score"},
    {"step_id": "route", "type": "decision", "depends_on": ["score"], "targets": ["approve", "reject", "review"],
     "rules": [{"when": {"path": "$.steps.score.output.value", "op": "ge", "value": 80}, "then": "approve"},
               {"when": {"path": "$.steps.score.output.value", "op": "lt", "value": 20}, "then": "reject"},
               {"when": {"path": "$.input.country", "op": "in", "value": ["NZ", "FR"]}, "then": "review"}],
     "default": "review"},
    {"step_id": "approve", "type": "notify", "queue": "defs_q", "handler": "mail"},
    {"step_id": "reject", "type": "notify", "queue": "defs_q", "handler": "mail"},
    {"step_id": "review", "type": "human_approval", "timeout": "2 days", "on_timeout": "reject"}]}'),
('defs_approval', '{"steps": [
    {"step_id": "prepare", "queue": "defs_q", "handler": "prepare"},
    {"step_id": "authorize", "type": "human_approval", "description": "sovereign gate", "depends_on": ["prepare"],
     "timeout": "1 day", "on_timeout": "expired", "on_failure": "expired"},
    {"step_id": "execute", "queue": "defs_q", "handler": "execute", "depends_on": ["authorize"]},
    {"step_id": "expired", "type": "notify", "queue": "defs_q", "handler": "mail"}]}'),
('defs_compensation', '{"steps": [
    {"step_id": "reserve", "type": "external_call", "queue": "defs_q", "handler": "reserve",
     "retry_safety": "NOT_SAFE_TO_RETRY", "compensation": {"handler": "release"}},
    {"step_id": "charge", "queue": "defs_q", "handler": "charge", "depends_on": ["reserve"],
     "compensation": {"handler": "refund", "queue": "defs_refunds", "mode": "approval"}},
    {"step_id": "ship", "queue": "defs_q", "handler": "ship", "depends_on": ["charge"]}]}'),
('defs_map', '{"steps": [
    {"step_id": "list", "queue": "defs_q", "handler": "list"},
    {"step_id": "resize", "queue": "defs_q", "handler": "resize", "depends_on": ["list"],
     "map": {"over": "$.steps.list.output.images", "max_parallel": 8}},
    {"step_id": "tag", "queue": "defs_q", "handler": "tag", "map": {"over": "$.input.tags"}},
    {"step_id": "publish", "queue": "defs_q", "handler": "publish", "depends_on": ["resize", "tag"]}]}'),
('defs_schema', '{"input_schema": {"required": ["document_id", "mode"],
                  "properties": {"document_id": {"type": "string"}, "mode": {"type": "string"},
                                 "limit": {"type": "integer"}, "dry": {"type": "boolean"}}},
  "steps": [
    {"step_id": "hold", "type": "wait", "until_path": "$.input.release_at", "timeout": "1 day"},
    {"step_id": "run", "queue": "defs_q", "handler": "run", "depends_on": ["hold"]}]}');
-- the gated pipeline of docs/workflows.md without its probes and output schemas (workflows_drift has it verbatim)
INSERT INTO specs VALUES ('defs_gated_pipeline', $spec${
  "description": "Gated cut pipeline: internal gates run automatically, two sovereign gates wait for a human, any failure stops and reports.",
  "input_schema": {
    "required": ["document_id", "mode"],
    "properties": {
      "document_id": {"type": "string"},
      "mode": {"type": "string"},
      "max_candidates": {"type": "integer"}
    }
  },
  "policies": {
    "deadline": "1 day",
    "queue": "cutter",
    "retry_policy": {"max_attempts": 3, "schedule": ["5 s", "15 s", "30 s"], "retry_on": ["TRANSIENT", "RATE_LIMITED"]},
    "retry_safety": "SAFE_TO_RETRY"
  },
  "steps": [
    {"step_id": "source_pin", "handler": "cutter.source_pin", "timeout": "2 minutes", "on_failure": "stop_report"},
    {"step_id": "mark", "handler": "cutter.mark", "depends_on": ["source_pin"], "timeout": "5 minutes", "on_failure": "stop_report"},
    {"step_id": "cutplan", "handler": "cutter.cutplan", "depends_on": ["mark"], "timeout": "10 minutes", "on_failure": "stop_report"},
    {"step_id": "backup", "handler": "cutter.backup", "depends_on": ["cutplan"], "timeout": "5 minutes", "on_failure": "stop_report"},
    {"step_id": "grant_probe", "handler": "cutter.grant_probe", "depends_on": ["backup"], "timeout": "1 minute", "on_failure": "stop_report"},
    {"step_id": "authorize_cut", "type": "human_approval", "description": "SG_1: sovereign cut authorization",
     "depends_on": ["grant_probe"], "timeout": "8 hours", "on_timeout": "stop_report", "on_failure": "stop_report"},
    {"step_id": "cut_leg_a", "type": "external_call", "handler": "cutter.cut_leg_a", "depends_on": ["authorize_cut"],
     "timeout": "10 minutes", "retry_safety": "NOT_SAFE_TO_RETRY",
     "compensation": {"handler": "cutter.void_leg_a", "mode": "approval"}, "on_failure": "stop_report"},
    {"step_id": "structural_verify", "handler": "cutter.structural_verify", "depends_on": ["cut_leg_a"], "timeout": "2 minutes", "on_failure": "stop_report"},
    {"step_id": "leg_b_record", "handler": "cutter.leg_b_record", "depends_on": ["structural_verify"],
     "timeout": "5 minutes", "retry_safety": "SAFE_TO_RETRY_WITH_GUARD",
     "compensation": {"handler": "cutter.void_leg_b", "queue": "cutter.compensation"}, "on_failure": "stop_report"},
    {"step_id": "write_verify", "handler": "cutter.write_verify", "depends_on": ["leg_b_record"], "timeout": "5 minutes", "on_failure": "stop_report"},
    {"step_id": "authorize_lifecycle", "type": "human_approval", "description": "SG_2: sovereign lifecycle authorization",
     "depends_on": ["write_verify"], "timeout": "8 hours", "on_timeout": "stop_report", "on_failure": "stop_report"},
    {"step_id": "lifecycle_enact", "handler": "cutter.lifecycle_enact", "depends_on": ["authorize_lifecycle"],
     "timeout": "15 minutes", "retry_safety": "NOT_SAFE_TO_RETRY", "on_failure": "stop_report"},
    {"step_id": "closeout", "handler": "cutter.closeout", "depends_on": ["lifecycle_enact"], "timeout": "5 minutes"},
    {"step_id": "stop_report", "type": "notify", "handler": "cutter.stop_route_report",
     "description": "SG_3: failure escalation with the full run state; never a silent retry"}
  ]
}$spec$);
SELECT name, pg_temp.v(spec) AS result FROM specs ORDER BY name;

-- ---------------------------------------------------------------------------
-- 13. Lifecycle: draft (mutable) -> published (immutable) -> deprecated.
-- ---------------------------------------------------------------------------
SELECT name, orch_define(name, spec) AS version FROM specs ORDER BY name;
SELECT name, orch_publish(name, 1) = encode(sha256(convert_to(spec::text, 'UTF8')), 'hex') AS hash_of_spec
  FROM specs ORDER BY name;

-- a draft is replaced while it is the highest version
SELECT orch_define('defs_life', pg_temp.base()) AS v1;
SELECT orch_define('defs_life', pg_temp.st(2, '{"handler": "store2"}')) AS v1_replaced;
SELECT orch_define('defs_life', pg_temp.st(2, '{"handler": "store2"}')) AS v1_same_spec;
SELECT version, status, spec #>> '{steps,2,handler}' AS store_handler, created_by,
       published_at IS NULL AS unpublished, content_hash = encode(sha256(convert_to(spec::text, 'UTF8')), 'hex') AS hash_ok
  FROM orch_definitions WHERE name = 'defs_life';
-- an invalid spec changes nothing
SELECT pg_temp.try($$SELECT orch_define('defs_life', '{"steps": []}')$$) AS invalid_define;
SELECT spec #>> '{steps,2,handler}' AS store_handler FROM orch_definitions WHERE name = 'defs_life';
-- no published version yet
SELECT pg_temp.try($$SELECT version FROM orch_definition('defs_life')$$) AS latest_published;
SELECT version, status FROM orch_definition('defs_life', 1);
-- publish: the hash; again: the same hash, nothing changes
SELECT orch_publish('defs_life', 1) AS hash \gset
SELECT :'hash' = encode(sha256(convert_to(pg_temp.st(2, '{"handler": "store2"}')::text, 'UTF8')), 'hex') AS hash_is_sha256;
SELECT orch_publish('defs_life', 1) = :'hash' AS idempotent_publish;
SELECT version, status, published_at IS NOT NULL AS published_at_set, content_hash = :'hash' AS hash
  FROM orch_definition('defs_life');
-- the next define starts version 2 as a draft; the latest published stays 1
SELECT orch_define('defs_life', pg_temp.st(2, '{"handler": "store3"}')) AS v2;
SELECT orch_define('defs_life', pg_temp.st(2, '{"handler": "store4"}')) AS v2_replaced;
SELECT version, status FROM orch_definition('defs_life');
SELECT version, status, spec #>> '{steps,2,handler}' AS store_handler FROM orch_definition('defs_life', 2);
SELECT orch_publish('defs_life', 2) <> :'hash' AS v2_published;
SELECT version, status FROM orch_definition('defs_life');
-- deprecate: the latest published is the highest version not deprecated
SELECT orch_deprecate('defs_life', 2);
SELECT orch_deprecate('defs_life', 2) AS deprecate_again;
SELECT version, status FROM orch_definition('defs_life');
SELECT version, status, published_at IS NOT NULL AS published_at, deprecated_at IS NOT NULL AS deprecated_at
  FROM orch_definition('defs_life', 2);
SELECT pg_temp.try($$SELECT orch_publish('defs_life', 2)$$) AS publish_deprecated;
SELECT orch_define('defs_life', pg_temp.base()) AS v3;
SELECT pg_temp.try($$SELECT orch_deprecate('defs_life', 3)$$) AS deprecate_draft;
SELECT orch_deprecate('defs_life', 1);
SELECT pg_temp.try($$SELECT version FROM orch_definition('defs_life')$$) AS none_published;
SELECT version, status FROM orch_definitions WHERE name = 'defs_life' ORDER BY version;
-- unknown names and versions: OR005
SELECT pg_temp.try($$SELECT orch_publish('defs_life', 9)$$) AS publish_unknown_version,
       pg_temp.try($$SELECT orch_publish('defs_none', 1)$$) AS publish_unknown_name,
       pg_temp.try($$SELECT orch_deprecate('defs_life', 0)$$) AS deprecate_unknown,
       pg_temp.try($$SELECT version FROM orch_definition('defs_none')$$) AS definition_unknown,
       pg_temp.try($$SELECT version FROM orch_definition('defs_life', 9)$$) AS definition_unknown_version;
\set VERBOSITY default
SELECT orch_publish('defs_life', 2);
SELECT orch_deprecate('defs_life', 3);
SELECT * FROM orch_definition('defs_none');
\set VERBOSITY terse
-- a draft made invalid behind the API's back is validated again on publish
UPDATE orch.definitions SET spec = '{"steps": [{"step_id": "x", "queue": "defs_q"}]}'
 WHERE name = 'defs_life' AND version = 3;
SELECT pg_temp.v(spec) FROM orch_definitions WHERE name = 'defs_life' AND version = 3;
SELECT pg_temp.try($$SELECT orch_publish('defs_life', 3)$$) AS publish_invalid_draft;
SELECT status FROM orch_definitions WHERE name = 'defs_life' AND version = 3;

-- names: 1 to 128 of [A-Za-z0-9_.:-] (22023); NULL arguments: 22004
SELECT pg_temp.try(format('SELECT orch_define(%L, %L)', n, pg_temp.base())) AS result, length(n) AS len
  FROM unnest(ARRAY['', 'defs has space', 'defs;semicolon', 'defs_ünïcode', 'defs_' || repeat('n', 124),
                    'defs_' || repeat('n', 123), 'defs.ok:name-1_x']) n;
SELECT pg_temp.try($$SELECT orch_define(NULL, '{}')$$) AS define_null_name,
       pg_temp.try($$SELECT orch_define('defs_x', NULL)$$) AS define_null_spec,
       pg_temp.try($$SELECT orch_publish(NULL, 1)$$) AS publish_null_name,
       pg_temp.try($$SELECT orch_publish('defs_life', NULL)$$) AS publish_null_version,
       pg_temp.try($$SELECT orch_deprecate(NULL, 1)$$) AS deprecate_null_name,
       pg_temp.try($$SELECT orch_deprecate('defs_life', NULL)$$) AS deprecate_null_version,
       pg_temp.try($$SELECT version FROM orch_definition(NULL)$$) AS definition_null,
       pg_temp.try($$SELECT orch_validate_definition(NULL)$$) AS validate_null;

-- ---------------------------------------------------------------------------
-- 14. Published versions are immutable for every writer (OR007): the C
--     trigger guards raw UPDATE, DELETE and TRUNCATE, even by a superuser.
-- ---------------------------------------------------------------------------
SELECT current_setting('is_superuser') AS superuser;
SELECT content_hash AS linear_hash FROM orch_definitions WHERE name = 'defs_linear' AND version = 1 \gset
SELECT label, pg_temp.sqlstate_of(q) AS result FROM (VALUES
    ('spec',           $$UPDATE orch.definitions SET spec = '{"steps": []}' WHERE name = 'defs_linear'$$),
    ('spec via jsonb', $$UPDATE orch.definitions SET spec = spec || '{"description": "x"}' WHERE name = 'defs_linear'$$),
    ('content_hash',   $$UPDATE orch.definitions SET content_hash = repeat('0', 64) WHERE name = 'defs_linear'$$),
    ('name',           $$UPDATE orch.definitions SET name = 'defs_renamed' WHERE name = 'defs_linear'$$),
    ('version',        $$UPDATE orch.definitions SET version = 7 WHERE name = 'defs_linear'$$),
    ('tenant_id',      $$UPDATE orch.definitions SET tenant_id = 'other' WHERE name = 'defs_linear'$$),
    ('created_by',     $$UPDATE orch.definitions SET created_by = 'someone' WHERE name = 'defs_linear'$$),
    ('published_at',   $$UPDATE orch.definitions SET published_at = now() - interval '1 day' WHERE name = 'defs_linear'$$),
    ('back to draft',  $$UPDATE orch.definitions SET status = 'draft', published_at = NULL WHERE name = 'defs_linear'$$),
    ('deprecated_at',  $$UPDATE orch.definitions SET deprecated_at = now() WHERE name = 'defs_linear'$$),
    ('deprecate+spec', $$UPDATE orch.definitions SET status = 'deprecated', deprecated_at = now(), spec = '{}' WHERE name = 'defs_linear'$$),
    ('delete',         $$DELETE FROM orch.definitions WHERE name = 'defs_linear'$$),
    ('truncate',       $$TRUNCATE orch.definitions$$),
    ('deprecated spec',       $$UPDATE orch.definitions SET spec = '{}' WHERE name = 'defs_life' AND version = 2$$),
    ('deprecated republish',  $$UPDATE orch.definitions SET status = 'published', deprecated_at = NULL WHERE name = 'defs_life' AND version = 2$$),
    ('deprecated delete',     $$DELETE FROM orch.definitions WHERE name = 'defs_life' AND version = 2$$),
    ('draft to deprecated',   $$UPDATE orch.definitions SET status = 'deprecated', deprecated_at = now() WHERE name = 'defs_life' AND version = 3$$),
    ('redefine published',    $$SELECT orch_define('defs_linear', '{"steps": [{"step_id": "x", "queue": "q", "handler": "h"}]}')$$)
) t(label, q);
\set VERBOSITY default
UPDATE orch.definitions SET spec = '{"steps": []}' WHERE name = 'defs_linear';
UPDATE orch.definitions SET status = 'draft', published_at = NULL WHERE name = 'defs_linear';
DELETE FROM orch.definitions WHERE name = 'defs_life' AND version = 2;
TRUNCATE orch.definitions;
\set VERBOSITY terse
-- nothing changed; redefining a published name made version 2
SELECT version, status, content_hash = :'linear_hash' AS same_hash, spec = (SELECT spec FROM specs WHERE name = 'defs_linear') AS same_spec
  FROM orch_definitions WHERE name = 'defs_linear' ORDER BY version;
-- a no-op update of a published row passes (the trigger compares values)
UPDATE orch.definitions SET status = status, spec = spec WHERE name = 'defs_linear' AND version = 1;
-- drafts stay mutable, even by hand, and may be deleted
UPDATE orch.definitions SET spec = pg_temp.base() WHERE name = 'defs_linear' AND version = 2;
DELETE FROM orch.definitions WHERE name = 'defs_linear' AND version = 2;
SELECT count(*) AS linear_versions FROM orch_definitions WHERE name = 'defs_linear';

-- ---------------------------------------------------------------------------
-- 15. Content hash: the canonical jsonb text, so key order and whitespace do
--     not matter; any change of a value does.
-- ---------------------------------------------------------------------------
SELECT orch_define('defs_hash_a', '{"steps":[{"step_id":"a","queue":"defs_q","handler":"h","timeout":"1 minute"}],"description":"hash"}') AS a,
       orch_define('defs_hash_b', '{ "description" : "hash",
                                      "steps" : [ { "timeout" : "1 minute", "handler" : "h",
                                                    "queue" : "defs_q", "step_id" : "a" } ] }') AS b,
       orch_define('defs_hash_c', '{"steps":[{"step_id":"a","queue":"defs_q","handler":"h","timeout":"2 minutes"}],"description":"hash"}') AS c;
SELECT orch_publish('defs_hash_a', 1) = orch_publish('defs_hash_b', 1) AS key_order_and_whitespace_same,
       orch_publish('defs_hash_a', 1) <> orch_publish('defs_hash_c', 1) AS value_change_differs;
SELECT count(DISTINCT content_hash) AS distinct_hashes FROM orch_definitions WHERE name LIKE 'defs\_hash\__';

-- ---------------------------------------------------------------------------
-- 16. Privileges: orch_admin defines, publishes, deprecates; orch_reader
--     reads and validates only; a role bound to tenants may not author the
--     shared definitions; PUBLIC nothing.
-- ---------------------------------------------------------------------------
SET ROLE defs_reader;
SELECT pg_temp.try($$SELECT orch_define('defs_priv', '{"steps": [{"step_id": "a", "queue": "q", "handler": "h"}]}')$$) AS reader_define,
       pg_temp.try($$SELECT orch_publish('defs_life', 3)$$) AS reader_publish,
       pg_temp.try($$SELECT orch_deprecate('defs_linear', 1)$$) AS reader_deprecate,
       pg_temp.try($$SELECT version::text FROM orch_definition('defs_linear')$$) AS reader_definition,
       pg_temp.sqlstate_of($$SELECT orch_validate_definition('{"steps": [{"step_id": "a", "queue": "q", "handler": "h"}]}')$$) AS reader_validate,
       pg_temp.try($$SELECT count(*)::text FROM orch_definitions WHERE name = 'defs_linear'$$) AS reader_view,
       pg_temp.try($$SELECT count(*)::text FROM orch.definitions$$) AS reader_table;
RESET ROLE;
SET ROLE defs_nobody;
SELECT pg_temp.try($$SELECT version::text FROM orch_definition('defs_linear')$$) AS public_definition,
       pg_temp.sqlstate_of($$SELECT orch_validate_definition('{}')$$) AS public_validate,
       pg_temp.try($$SELECT count(*)::text FROM orch_definitions$$) AS public_view;
RESET ROLE;
SET ROLE defs_admin;
SELECT orch_define('defs_priv', '{"steps": [{"step_id": "a", "queue": "q", "handler": "h"}]}') AS admin_define;
SELECT length(orch_publish('defs_priv', 1)) AS admin_publish;
SELECT orch_deprecate('defs_priv', 1) AS admin_deprecate;
SELECT pg_temp.sqlstate_of($$UPDATE orch.definitions SET spec = '{}' WHERE name = 'defs_priv'$$) AS admin_raw_update;
RESET ROLE;
SELECT orch_bind_tenant('defs_bound', 'defs_t') AS bound;
SET ROLE defs_bound;
SELECT pg_temp.try($$SELECT orch_define('defs_bound_def', '{"steps": [{"step_id": "a", "queue": "q", "handler": "h"}]}')$$) AS bound_define,
       pg_temp.try($$SELECT orch_publish('defs_life', 3)$$) AS bound_publish,
       pg_temp.try($$SELECT orch_deprecate('defs_linear', 1)$$) AS bound_deprecate,
       pg_temp.try($$SELECT version::text FROM orch_definition('defs_linear')$$) AS bound_reads;
RESET ROLE;
SELECT orch_unbind_tenant('defs_bound', 'defs_t') AS unbound;
SELECT created_by FROM orch_definitions WHERE name = 'defs_priv';

-- ---------------------------------------------------------------------------
-- 17. Audit: one event per change (entity 'definition', from/to status,
--     reason, actor, note name@version); a call that changes nothing (same
--     draft spec, publish of a published version, deprecate of a deprecated
--     one) and a refused call write none.
-- ---------------------------------------------------------------------------
SELECT from_state, to_state, reason_code, actor, note, task_id, run_id, tenant_id
  FROM orch_events
 WHERE entity = 'definition' AND (note LIKE 'defs\_life@%' OR note LIKE 'defs\_priv@%')
 ORDER BY event_id;
SELECT count(*) AS hash_events FROM orch_events WHERE entity = 'definition' AND note LIKE 'defs\_hash\__@%';
