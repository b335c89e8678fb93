-- input_schema and output_schema:
-- the JSON Schema subset of src/json_schema.c.  Define time: every
-- keyword's well-formed and malformed values, unsupported keywords (OR008
-- naming the path).  orch_start: the input against input_schema, every
-- keyword passing and failing, nested paths (22023, nothing created).  Run
-- time: a step's output against its output_schema (the step fails for good,
-- output_schema_mismatch; on_failure and compensation apply; map steps
-- check the joined output).
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- d(schema): v() of a one-step definition whose step carries the output_schema
CREATE FUNCTION pg_temp.d(s jsonb) RETURNS text LANGUAGE sql AS $$
    SELECT pg_temp.v(jsonb_build_object('steps', jsonb_build_array(
        jsonb_build_object('step_id', 'a', 'queue', 'ws_q', 'handler', 'h', 'output_schema', s))))
$$;
-- i(schema, value): 'ok', or the SQLSTATE and detail of orch_start with input {"v": value}
-- against input_schema {"type": "object", "properties": {"v": schema}} (one version each)
CREATE FUNCTION pg_temp.i(s jsonb, x jsonb) RETURNS text LANGUAGE plpgsql AS $$
DECLARE ver int; st text; dt text;
BEGIN
    ver := orch_define('ws_in', jsonb_build_object(
        'input_schema', jsonb_build_object('type', 'object', 'properties', jsonb_build_object('v', s)),
        'steps', '[{"step_id": "w", "type": "wait", "duration": "1 hour"}]'::jsonb));
    PERFORM orch_publish('ws_in', ver);
    PERFORM orch_start('ws_in', jsonb_build_object('v', x), ver);
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, dt = PG_EXCEPTION_DETAIL;
    RETURN st || ' ' || coalesce(dt, '<no detail>');
END $$;
-- work(queue, result): claim one task of the queue and complete it; its step key
CREATE FUNCTION pg_temp.work(q text, res jsonb) RETURNS text LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'ws-worker');
    IF c.task_id IS NULL THEN RETURN '(nothing)'; END IF;
    PERFORM orch_complete(c.task_id, c.lease_token, res);
    RETURN c.step_key;
END $$;
-- st(run): the run's state and its steps' states
CREATE FUNCTION pg_temp.st(run bigint) RETURNS text LANGUAGE sql AS $$
    SELECT (SELECT state || CASE WHEN phase = 'compensating' THEN '(compensating)' ELSE '' END
                   || coalesce('/' || reason_code, '') FROM orch.runs WHERE id = run) || ': ' ||
           string_agg(step_id || '=' || state || coalesce('+' || comp_state, ''), ' ' ORDER BY ord)
      FROM orch.run_steps WHERE run_id = run
$$;
-- ev(run): the step events of the run
CREATE FUNCTION pg_temp.ev(run bigint) RETURNS TABLE (step text, from_state text, to_state text, reason_code text)
LANGUAGE sql AS $$
    SELECT note, from_state, to_state, reason_code
      FROM orch_events WHERE run_id = run AND entity = 'run_step' ORDER BY event_id
$$;

-- ---------------------------------------------------------------------------
-- 1. Define time: every supported keyword well formed; annotations.
-- ---------------------------------------------------------------------------
SELECT pg_temp.d('{
  "title": "An invoice", "description": "What the step returns", "$comment": "c", "examples": [{}],
  "type": "object", "required": ["total", "lines"], "additionalProperties": false,
  "properties": {
    "total": {"type": "number", "minimum": 0, "maximum": 1e9, "exclusiveMinimum": -1, "exclusiveMaximum": 1000000001},
    "currency": {"type": "string", "enum": ["EUR", "USD"], "minLength": 3, "maxLength": 3},
    "status": {"const": "open"},
    "note": {"type": ["string", "null"]},
    "meta": {"type": "object", "additionalProperties": {"type": "integer"}},
    "lines": {"type": "array", "minItems": 1, "maxItems": 100,
              "items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}}}}}}') AS all_keywords,
       pg_temp.d('{}') AS empty_schema;

-- ---------------------------------------------------------------------------
-- 2. Define time: unsupported keywords and malformed values are OR008 with
--    the path within the schema.
-- ---------------------------------------------------------------------------
SELECT label, pg_temp.d(s) AS result FROM (VALUES
    ('not an object',            '"object"'::jsonb),
    ('boolean schema',           'true'),
    ('format',                   '{"type": "string", "format": "email"}'),
    ('$ref',                     '{"$ref": "#/defs/x"}'),
    ('oneOf',                    '{"oneOf": [{"type": "string"}]}'),
    ('pattern',                  '{"pattern": "^a"}'),
    ('default',                  '{"default": 1}'),
    ('nested unsupported',       '{"properties": {"total": {"items": {"format": "x"}}}}'),
    ('type unknown',             '{"type": "text"}'),
    ('type number',              '{"type": 5}'),
    ('type empty array',         '{"type": []}'),
    ('type array non-string',    '{"type": ["string", 1]}'),
    ('type array unknown',       '{"type": ["string", "uuid"]}'),
    ('type array duplicate',     '{"type": ["string", "null", "string"]}'),
    ('nested type',              '{"properties": {"total": {"type": "money"}}}'),
    ('enum empty',               '{"enum": []}'),
    ('enum not array',           '{"enum": "a"}'),
    ('minimum string',           '{"minimum": "1"}'),
    ('maximum null',             '{"maximum": null}'),
    ('exclusiveMinimum bool',    '{"exclusiveMinimum": true}'),
    ('exclusiveMaximum object',  '{"exclusiveMaximum": {}}'),
    ('minLength negative',       '{"minLength": -1}'),
    ('maxLength fraction',       '{"maxLength": 1.5}'),
    ('maxLength too big',        '{"maxLength": 3000000000}'),
    ('minItems string',          '{"minItems": "2"}'),
    ('maxItems negative',        '{"maxItems": -2}'),
    ('minLength > maxLength',    '{"minLength": 4, "maxLength": 3}'),
    ('minItems > maxItems',      '{"minItems": 4, "maxItems": 3}'),
    ('minimum > maximum',        '{"minimum": 10, "maximum": 9.5}'),
    ('required string',          '{"required": "id"}'),
    ('required number',          '{"required": ["id", 5]}'),
    ('required empty',           '{"required": [""]}'),
    ('required duplicate',       '{"required": ["id", "id"]}'),
    ('properties array',         '{"properties": []}'),
    ('property not a schema',    '{"properties": {"id": "string"}}'),
    ('quoted property key',      '{"properties": {"doc id": {"type": "uuid"}}}'),
    ('additionalProperties 1',   '{"additionalProperties": 1}'),
    ('additionalProperties bad', '{"additionalProperties": {"type": "uuid"}}'),
    ('items tuple',              '{"items": [{"type": "string"}]}'),
    ('items string',             '{"items": "string"}'),
    ('title number',             '{"title": 5}'),
    ('description array',        '{"description": []}'),
    ('examples object',          '{"examples": {}}')
) t(label, s);

-- the hint lists the supported keywords; a long unknown keyword is cut
\set VERBOSITY default
SELECT orch_validate_definition('{"steps": [{"step_id": "a", "queue": "ws_q", "handler": "h",
    "output_schema": {"properties": {"x": {"format": "date"}}}}]}');
\set VERBOSITY terse
SELECT pg_temp.d(jsonb_build_object(repeat('k', 5000), 1)) AS long_keyword;

-- nesting is bounded: 32 levels pass, 33 do not
SELECT pg_temp.d((SELECT string_agg('{"items": ', '') || '{}' || repeat('}', 31) FROM generate_series(1, 31))::jsonb) AS depth_32,
       regexp_replace(pg_temp.d((SELECT string_agg('{"items": ', '') || '{}' || repeat('}', 32) FROM generate_series(1, 32))::jsonb),
                      '(\.items){32}', '.items (x32)') AS depth_33;

-- output_schema only where a handler runs; input_schema checked the same way
SELECT label, pg_temp.v(spec) AS result FROM (VALUES
    ('on a wait step',        '{"steps": [{"step_id": "w", "type": "wait", "duration": 5, "output_schema": {}}]}'::jsonb),
    ('decision, no handler',  '{"steps": [{"step_id": "d", "type": "decision", "targets": ["a"], "default": "a", "output_schema": {}},
                                          {"step_id": "a", "queue": "ws_q", "handler": "h"}]}'),
    ('decision with handler', '{"steps": [{"step_id": "d", "type": "decision", "queue": "ws_q", "handler": "h", "targets": ["a"],
                                           "output_schema": {"type": "object"}},
                                          {"step_id": "a", "queue": "ws_q", "handler": "h"}]}'),
    ('input_schema keyword',  '{"input_schema": {"properties": {"id": {"type": "string", "pattern": "x"}}},
                                "steps": [{"step_id": "a", "queue": "ws_q", "handler": "h"}]}'),
    ('second step',           '{"steps": [{"step_id": "a", "queue": "ws_q", "handler": "h"},
                                          {"step_id": "b", "queue": "ws_q", "handler": "h", "depends_on": ["a"],
                                           "output_schema": {"required": [1]}}]}')
) t(label, spec);

-- ---------------------------------------------------------------------------
-- 3. orch_start: the input against input_schema, every keyword passing and
--    failing (22023 with the path; the failing calls create nothing).
-- ---------------------------------------------------------------------------
SELECT count(*) AS runs_before FROM orch.runs WHERE definition = 'ws_in' \gset
SELECT label, pg_temp.i(s, x) AS result FROM (VALUES
    ('type string ok',         '{"type": "string"}'::jsonb, '"a"'::jsonb),
    ('type string bad',        '{"type": "string"}',      '1'),
    ('type integer ok 2.0',    '{"type": "integer"}',     '2.0'),
    ('type integer bad',       '{"type": "integer"}',     '2.5'),
    ('type number ok',         '{"type": "number"}',      '2.5'),
    ('type number bad',        '{"type": "number"}',      '"2.5"'),
    ('type boolean ok',        '{"type": "boolean"}',     'false'),
    ('type boolean bad',       '{"type": "boolean"}',     '0'),
    ('type null ok',           '{"type": "null"}',        'null'),
    ('type null bad',          '{"type": "null"}',        '{}'),
    ('type object bad',        '{"type": "object"}',      '[]'),
    ('type array bad',         '{"type": "array"}',       '{}'),
    ('type list ok',           '{"type": ["string", "null"]}', 'null'),
    ('type list bad',          '{"type": ["string", "integer", "null"]}', '1.5'),
    ('no type: any',           '{}',                      '[1, {"a": null}]'),
    ('enum ok',                '{"enum": ["a", 1, {"k": [1]}]}', '{"k": [1.0]}'),
    ('enum bad',               '{"enum": ["a", 1, {"k": [1]}]}', '{"k": [2]}'),
    ('enum no coercion',       '{"enum": ["1"]}',         '1'),
    ('const ok',               '{"const": [1, "x"]}',     '[1, "x"]'),
    ('const bad',              '{"const": [1, "x"]}',     '["x", 1]'),
    ('minimum ok (equal)',     '{"minimum": 5}',          '5'),
    ('minimum bad',            '{"minimum": 5}',          '4.99'),
    ('maximum ok (equal)',     '{"maximum": 5}',          '5.0'),
    ('maximum bad',            '{"maximum": 5}',          '5.01'),
    ('exclusiveMinimum bad',   '{"exclusiveMinimum": 5}', '5'),
    ('exclusiveMinimum ok',    '{"exclusiveMinimum": 5}', '5.001'),
    ('exclusiveMaximum bad',   '{"exclusiveMaximum": 5}', '5'),
    ('exclusiveMaximum ok',    '{"exclusiveMaximum": 5}', '-1e10'),
    ('bounds ignore strings',  '{"minimum": 5}',          '"1"'),
    ('minLength ok (chars)',   '{"minLength": 3}',        '"äöü"'),
    ('minLength bad',          '{"minLength": 3}',        '"ab"'),
    ('maxLength ok (chars)',   '{"maxLength": 2}',        '"日本"'),
    ('maxLength bad',          '{"maxLength": 2}',        '"日本語"'),
    ('lengths ignore numbers', '{"maxLength": 1}',        '12345'),
    ('required ok',            '{"required": ["a", "b"]}', '{"a": null, "b": 0}'),
    ('required bad',           '{"required": ["a", "b"]}', '{"a": 1}'),
    ('required quoted key',    '{"required": ["a b"]}',   '{}'),
    ('properties ok',          '{"properties": {"a": {"type": "string"}}}', '{"a": "x", "z": 1}'),
    ('properties bad',         '{"properties": {"a": {"type": "string"}}}', '{"a": 1}'),
    ('additional false ok',    '{"properties": {"a": {}}, "additionalProperties": false}', '{"a": 1}'),
    ('additional false bad',   '{"properties": {"a": {}}, "additionalProperties": false}', '{"a": 1, "b": 2}'),
    ('additional schema ok',   '{"additionalProperties": {"type": "integer"}}', '{"x": 1, "y": 2}'),
    ('additional schema bad',  '{"additionalProperties": {"type": "integer"}}', '{"x": 1, "y": "2"}'),
    ('additional true',        '{"properties": {"a": {}}, "additionalProperties": true}', '{"b": 1}'),
    ('items ok',               '{"items": {"type": "integer"}}', '[1, 2, 3]'),
    ('items bad',              '{"items": {"type": "integer"}}', '[1, 2, "3"]'),
    ('minItems bad',           '{"minItems": 2}',         '[1]'),
    ('maxItems bad',           '{"maxItems": 2}',         '[1, 2, 3]'),
    ('maxItems ok',            '{"maxItems": 2}',         '[]'),
    ('nested path',            '{"type": "object", "properties": {"lines": {"type": "array", "items":
                                 {"type": "object", "required": ["sku"], "properties": {"qty": {"type": "integer", "minimum": 1}}}}}}',
                               '{"lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 0}]}'),
    ('nested required',        '{"properties": {"lines": {"items": {"required": ["sku"]}}}}',
                               '{"lines": [{"sku": "a"}, {}, {"sku": "c"}]}'),
    ('long key is cut',        '{"additionalProperties": false}', jsonb_build_object(repeat('x', 100), 1)),
    ('long number is cut',     '{"maximum": 1}',          ('1' || repeat('0', 80))::jsonb),
    ('first mismatch: type',   '{"type": "string", "minLength": 5, "enum": ["abc"]}', '7')
) t(label, s, x);
-- one run for each ok row (24), none for the others
SELECT count(*) - :runs_before AS runs_created FROM orch.runs WHERE definition = 'ws_in';

-- the errors in full; the root: an object unless the schema's type says otherwise
SELECT orch_define('ws_order', '{"input_schema": {"required": ["order_id"],
    "properties": {"order_id": {"type": "integer", "minimum": 1}, "email": {"type": "string", "maxLength": 254}}},
    "steps": [{"step_id": "w", "type": "wait", "duration": "1 hour"}]}') AS v1;
SELECT orch_publish('ws_order', 1) IS NOT NULL AS published;
SELECT count(*) AS runs_before FROM orch.runs \gset
SELECT count(*) AS tasks_before FROM orch.tasks \gset
SELECT count(*) AS events_before FROM orch.history \gset
\set VERBOSITY default
SELECT orch_start('ws_order', '{"order_id": 0}');
SELECT orch_start('ws_order', '{"email": "a@b"}', idempotency_key => 'ws-1');
SELECT orch_start('ws_order', '[{"order_id": 1}]');
\set VERBOSITY terse
SELECT count(*) - :runs_before AS runs, (SELECT count(*) FROM orch.tasks) - :tasks_before AS tasks,
       (SELECT count(*) FROM orch.history) - :events_before AS events FROM orch.runs;
-- the key was not taken by the refused call
SELECT orch_start('ws_order', '{"order_id": 1, "email": "a@b"}', idempotency_key => 'ws-1') > 0 AS started;
SELECT orch_define('ws_list', '{"input_schema": {"type": "array", "items": {"type": "string"}},
    "steps": [{"step_id": "w", "type": "wait", "duration": "1 hour"}]}') AS v1;
SELECT orch_publish('ws_list', 1) IS NOT NULL AS published;
SELECT orch_start('ws_list', '["a", "b"]') > 0 AS array_input;
\set VERBOSITY default
SELECT orch_start('ws_list', '["a", 2]');
\set VERBOSITY terse

-- ---------------------------------------------------------------------------
-- 4. Run time: a step's output against its output_schema.  A mismatch fails
--    the step for good (one attempt, reason output_schema_mismatch, the path
--    in its error); the worker's orch_complete succeeds (the task completed).
-- ---------------------------------------------------------------------------
SELECT orch_define('ws_out', '{"steps": [
    {"step_id": "price", "queue": "ws_q", "handler": "price",
     "retry_policy": {"max_attempts": 5},
     "output_schema": {"type": "object", "required": ["total"],
                       "properties": {"total": {"type": "number", "minimum": 0},
                                      "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}}}}},
    {"step_id": "bill", "queue": "ws_q", "handler": "bill", "depends_on": ["price"]}]}') AS v1;
SELECT orch_publish('ws_out', 1) IS NOT NULL AS published;

-- a matching output: the step succeeds as without a schema
SELECT orch_start('ws_out', '{}') AS ok_run \gset
SELECT pg_temp.work('ws_q', '{"total": 12.5, "lines": [{"sku": "a"}]}') AS worked;
SELECT pg_temp.work('ws_q', '{}') AS worked;
SELECT pg_temp.st(:ok_run);

-- a mismatch deep in the output
SELECT orch_start('ws_out', '{}') AS bad_run \gset
SELECT pg_temp.work('ws_q', '{"total": 3, "lines": [{"sku": "a"}, {"sku": 7}]}') AS worked;
SELECT pg_temp.st(:bad_run);
SELECT step_id, state, error FROM orch_run_steps WHERE run_id = :bad_run ORDER BY step_id;
SELECT state, failed_step, error FROM orch_runs WHERE run_id = :bad_run;
SELECT t.state, t.attempts, t.result FROM orch.tasks t WHERE t.run_id = :bad_run;
SELECT * FROM pg_temp.ev(:bad_run);
-- nothing was left to claim or retry
SELECT pg_temp.work('ws_q', '{}') AS worked;

-- a null result is checked as JSON null
SELECT orch_start('ws_out', '{}') AS null_run \gset
SELECT pg_temp.work('ws_q', NULL) AS worked;
SELECT (SELECT error FROM orch_run_steps WHERE run_id = :null_run AND step_id = 'price') AS error, pg_temp.st(:null_run);

-- ---------------------------------------------------------------------------
-- 5. The failure policy applies: on_failure routes, compensation runs.
-- ---------------------------------------------------------------------------
SELECT orch_define('ws_route', '{"steps": [
    {"step_id": "reserve", "queue": "ws_q", "handler": "reserve",
     "compensation": {"handler": "release"}},
    {"step_id": "check", "queue": "ws_q", "handler": "check", "depends_on": ["reserve"],
     "output_schema": {"type": "object", "required": ["ok"], "properties": {"ok": {"const": true}}},
     "on_failure": "report"},
    {"step_id": "report", "queue": "ws_q", "handler": "report"}]}') AS v1;
SELECT orch_publish('ws_route', 1) IS NOT NULL AS published;
SELECT orch_start('ws_route', '{}') AS route_run \gset
SELECT pg_temp.work('ws_q', '{}') AS worked;
SELECT pg_temp.work('ws_q', '{"ok": false}') AS worked;
SELECT pg_temp.st(:route_run);
SELECT error FROM orch_run_steps WHERE run_id = :route_run AND step_id = 'check';
SELECT pg_temp.work('ws_q', '{}') AS worked;
SELECT pg_temp.st(:route_run);

-- without on_failure, the run fails and the succeeded step is compensated
SELECT orch_define('ws_comp', '{"steps": [
    {"step_id": "reserve", "queue": "ws_q", "handler": "reserve",
     "compensation": {"handler": "release"}},
    {"step_id": "check", "queue": "ws_q", "handler": "check", "depends_on": ["reserve"],
     "output_schema": {"type": "object", "additionalProperties": false}}]}') AS v1;
SELECT orch_publish('ws_comp', 1) IS NOT NULL AS published;
SELECT orch_start('ws_comp', '{}') AS comp_run \gset
SELECT pg_temp.work('ws_q', '{}') AS worked;
SELECT pg_temp.work('ws_q', '{"extra": 1}') AS worked;
SELECT pg_temp.st(:comp_run);
SELECT pg_temp.work('ws_q', '{}') AS worked;
SELECT pg_temp.st(:comp_run);
SELECT state, reason_code, failed_step, error FROM orch_runs WHERE run_id = :comp_run;

-- ---------------------------------------------------------------------------
-- 6. Map steps: the schema describes the step's output, the array of the
--    items' results in input order; checked when the last item completes.
-- ---------------------------------------------------------------------------
SELECT orch_define('ws_map', '{"steps": [
    {"step_id": "each", "queue": "ws_q", "handler": "each", "map": {"over": "$.input.items"},
     "output_schema": {"type": "array", "maxItems": 3, "items": {"type": "object", "required": ["n"]}}}]}') AS v1;
SELECT orch_publish('ws_map', 1) IS NOT NULL AS published;
SELECT orch_start('ws_map', '{"items": [1, 2]}') AS map_ok \gset
SELECT pg_temp.work('ws_q', '{"n": 1}') AS worked;
SELECT pg_temp.st(:map_ok);
SELECT pg_temp.work('ws_q', '{"n": 2}') AS worked;
SELECT pg_temp.st(:map_ok), (SELECT output FROM orch_run_steps WHERE run_id = :map_ok) AS output;
SELECT orch_start('ws_map', '{"items": [1, 2, 3]}') AS map_bad \gset
SELECT pg_temp.work('ws_q', '{"n": 1}') AS worked;
SELECT pg_temp.work('ws_q', '{"m": 2}') AS worked;
SELECT pg_temp.st(:map_bad);
SELECT pg_temp.work('ws_q', '{"n": 3}') AS worked;
SELECT pg_temp.st(:map_bad), (SELECT error FROM orch_run_steps WHERE run_id = :map_bad) AS error;
SELECT orch_start('ws_map', '{"items": [1, 2, 3, 4]}') AS map_many \gset
SELECT pg_temp.work('ws_q', '{"n": 1}') || pg_temp.work('ws_q', '{"n": 2}') ||
       pg_temp.work('ws_q', '{"n": 3}') || pg_temp.work('ws_q', '{"n": 4}') AS worked;
SELECT pg_temp.st(:map_many), (SELECT error FROM orch_run_steps WHERE run_id = :map_many) AS error;
-- no items: [] is checked too
SELECT orch_define('ws_map1', '{"steps": [
    {"step_id": "each", "queue": "ws_q", "handler": "each", "map": {"over": "$.input.items"},
     "output_schema": {"type": "array", "minItems": 1}}]}') AS v1;
SELECT orch_publish('ws_map1', 1) IS NOT NULL AS published;
SELECT orch_start('ws_map1', '{"items": []}') AS map_empty \gset
SELECT pg_temp.st(:map_empty), (SELECT error FROM orch_run_steps WHERE run_id = :map_empty) AS error;

-- ---------------------------------------------------------------------------
-- 7. A decision with a handler: its result is checked before its rules.
-- ---------------------------------------------------------------------------
SELECT orch_define('ws_dec', '{"steps": [
    {"step_id": "route", "type": "decision", "queue": "ws_q", "handler": "route", "targets": ["a", "b"],
     "output_schema": {"type": "object", "required": ["next"], "properties": {"next": {"enum": ["a", "b"]}}}},
    {"step_id": "a", "queue": "ws_q", "handler": "a"},
    {"step_id": "b", "queue": "ws_q", "handler": "b"}]}') AS v1;
SELECT orch_publish('ws_dec', 1) IS NOT NULL AS published;
SELECT orch_start('ws_dec', '{}') AS dec_run \gset
SELECT pg_temp.work('ws_q', '{"next": "c"}') AS worked;
SELECT pg_temp.st(:dec_run), (SELECT error FROM orch_run_steps WHERE run_id = :dec_run AND step_id = 'route') AS error;
SELECT orch_start('ws_dec', '{}') AS dec_ok \gset
SELECT pg_temp.work('ws_q', '{"next": "b"}') AS worked;
SELECT pg_temp.st(:dec_ok);

-- ---------------------------------------------------------------------------
-- 8. A definition without schemas is unchanged: no check, any input.
-- ---------------------------------------------------------------------------
SELECT orch_define('ws_plain', '{"steps": [{"step_id": "a", "queue": "ws_pq", "handler": "a"}]}') AS v1;
SELECT orch_publish('ws_plain', 1) IS NOT NULL AS published;
SELECT orch_start('ws_plain', '"just a string"') AS plain_run \gset
SELECT pg_temp.work('ws_pq', '[1, "anything"]') AS worked;
SELECT pg_temp.st(:plain_run), (SELECT output FROM orch_run_steps WHERE run_id = :plain_run) AS output;
