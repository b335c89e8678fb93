-- search_path: no object of the extension is reachable by a search_path
-- hijack (SPEC §10).  An unprivileged role with CREATE on schema public
-- plants functions, aggregates, operators and relations named like what the
-- extension uses (now(), gen_random_uuid(), jsonb_build_object, count(*),
-- = on text/bigint, pg_has_role, hash_bytes, jsonb_typeof, sha256,
-- jsonb_agg, tasks/events/queues/definitions/runs, ...);
-- each records that it was called (a log row, and a sequence that a
-- rollback cannot undo).  Then the whole API runs with search_path =
-- 'public, pg_catalog' (public FIRST), as each role, as an admin for
-- everything, and as the superuser (workflows included: define, publish,
-- start, step tasks, approvals, pause, resume, cancel, compensation, re-run,
-- run status): every result is checked, and no planted
-- object may ever have been called.  Finally every SECURITY DEFINER function
-- must pin search_path = pg_catalog, orch, pg_temp.
-- Run: pg_prove -d DB test/pgtap/search_path.sql
\set QUIET 1
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS orchestrator;

BEGIN;
SELECT plan(487);

-- ---------------------------------------------------------------------------
-- Roles (NOLOGIN; created in this transaction, reused when they exist).
-- ---------------------------------------------------------------------------
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['s_attacker', 's_admin', 's_worker', 's_producer', 's_approver', 's_reader', 's_worker_a'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END $$;
GRANT orch_admin TO s_admin;
GRANT orch_worker TO s_worker, s_worker_a;
GRANT orch_producer TO s_producer;
GRANT orch_approver TO s_approver;
GRANT orch_reader TO s_reader;
GRANT CREATE ON SCHEMA public TO s_attacker;

-- ---------------------------------------------------------------------------
-- The trap's recorder (test infrastructure, owned by the superuser).
-- ---------------------------------------------------------------------------
CREATE SEQUENCE public.hijack_seq;
CREATE TABLE public.hijack_log (n bigint, what text, by_role name, at timestamptz DEFAULT pg_catalog.clock_timestamp());
CREATE FUNCTION public.hj_log(what text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO public.hijack_log (n, what, by_role)
    VALUES (pg_catalog.nextval('public.hijack_seq'), what, current_user);
END $$;
CREATE FUNCTION public.hj_hit(what text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    PERFORM public.hj_log(what);
    RETURN true;
END $$;
GRANT EXECUTE ON FUNCTION public.hj_log(text), public.hj_hit(text) TO PUBLIC;

-- ---------------------------------------------------------------------------
-- The plants, made by the unprivileged role.  Functions and operators answer
-- correctly (or, for clocks and uuids, plausibly) after recording the call,
-- so that a hijack shows in the log even where it would not break a result.
-- ---------------------------------------------------------------------------
SET ROLE s_attacker;
-- functions
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('now()'); RETURN timestamptz '1999-01-01'; END $$;
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('clock_timestamp()'); RETURN timestamptz '1999-01-01'; END $$;
CREATE FUNCTION public.statement_timestamp() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('statement_timestamp()'); RETURN timestamptz '1999-01-01'; END $$;
CREATE FUNCTION public.transaction_timestamp() RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('transaction_timestamp()'); RETURN timestamptz '1999-01-01'; END $$;
CREATE FUNCTION public.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('gen_random_uuid()'); RETURN uuid '00000000-0000-4000-8000-000000000000'; END $$;
CREATE FUNCTION public.nextval(regclass) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('nextval(regclass)'); RETURN pg_catalog.nextval($1); END $$;
CREATE FUNCTION public.jsonb_build_object(text, text) RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_build_object(text,text)'); RETURN pg_catalog.jsonb_build_object($1, $2); END $$;
CREATE FUNCTION public.jsonb_build_object(text, text, text, text) RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_build_object(text x4)'); RETURN pg_catalog.jsonb_build_object($1, $2, $3, $4); END $$;
CREATE FUNCTION public.jsonb_build_object(text, boolean, text, text, text, text, text, text) RETURNS jsonb
    LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_build_object(text,boolean,text x6)');
             RETURN pg_catalog.jsonb_build_object($1, $2, $3, $4, $5, $6, $7, $8); END $$;
CREATE FUNCTION public.jsonb_strip_nulls(jsonb) RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_strip_nulls(jsonb)'); RETURN pg_catalog.jsonb_strip_nulls($1); END $$;
CREATE FUNCTION public.cardinality(anyarray) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('cardinality(anyarray)'); RETURN pg_catalog.cardinality($1); END $$;
CREATE FUNCTION public.array_fill(anyelement, integer[]) RETURNS anyarray LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('array_fill'); RETURN pg_catalog.array_fill($1, $2); END $$;
CREATE FUNCTION public.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('unnest(anyarray)'); RETURN QUERY SELECT pg_catalog.unnest($1); END $$;
CREATE FUNCTION public.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('pg_has_role(oid,oid,text)'); RETURN true; END $$;
CREATE FUNCTION public.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('pg_has_role(name,oid,text)'); RETURN true; END $$;
CREATE FUNCTION public.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('pg_advisory_xact_lock(bigint)'); END $$;
CREATE FUNCTION public.pg_advisory_xact_lock(integer, integer) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('pg_advisory_xact_lock(int,int)'); END $$;
CREATE FUNCTION public.pg_try_advisory_xact_lock(bigint) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('pg_try_advisory_xact_lock(bigint)'); RETURN true; END $$;
CREATE FUNCTION public.hash_bytes(bytea) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('hash_bytes(bytea)'); RETURN 0; END $$;
CREATE FUNCTION public.hashtext(text) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('hashtext(text)'); RETURN 0; END $$;
CREATE FUNCTION public.md5(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('md5(text)'); RETURN pg_catalog.md5($1); END $$;
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('format(text,text)'); RETURN pg_catalog.format($1, $2); END $$;
CREATE FUNCTION public.lower(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('lower(text)'); RETURN pg_catalog.lower($1); END $$;
CREATE FUNCTION public.length(text) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('length(text)'); RETURN pg_catalog.length($1); END $$;
CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('current_setting(text)'); RETURN pg_catalog.current_setting($1); END $$;
CREATE FUNCTION public.current_setting(text, boolean) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('current_setting(text,boolean)'); RETURN pg_catalog.current_setting($1, $2); END $$;
CREATE FUNCTION public.pg_notify(text, text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('pg_notify(text,text)'); END $$;
CREATE FUNCTION public.to_jsonb(anyelement) RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('to_jsonb(anyelement)'); RETURN pg_catalog.to_jsonb($1); END $$;
-- what workflow definitions and runs use (0.4.0)
CREATE FUNCTION public.jsonb_typeof(jsonb) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_typeof(jsonb)'); RETURN pg_catalog.jsonb_typeof($1); END $$;
CREATE FUNCTION public.jsonb_array_length(jsonb) RETURNS integer LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_array_length(jsonb)'); RETURN pg_catalog.jsonb_array_length($1); END $$;
CREATE FUNCTION public.jsonb_array_elements(jsonb) RETURNS SETOF jsonb LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_array_elements(jsonb)'); RETURN QUERY SELECT pg_catalog.jsonb_array_elements($1); END $$;
CREATE FUNCTION public.jsonb_array_elements_text(jsonb) RETURNS SETOF text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_array_elements_text(jsonb)'); RETURN QUERY SELECT pg_catalog.jsonb_array_elements_text($1); END $$;
CREATE FUNCTION public."left"(text, integer) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('left(text,integer)'); RETURN pg_catalog."left"($1, $2); END $$;
CREATE FUNCTION public.make_interval(secs double precision) RETURNS interval LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('make_interval(secs)'); RETURN pg_catalog.make_interval(secs => secs); END $$;
CREATE FUNCTION public.sha256(bytea) RETURNS bytea LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('sha256(bytea)'); RETURN pg_catalog.sha256($1); END $$;
CREATE FUNCTION public.encode(bytea, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('encode(bytea,text)'); RETURN pg_catalog.encode($1, $2); END $$;
CREATE FUNCTION public.convert_to(text, name) RETURNS bytea LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('convert_to(text,name)'); RETURN pg_catalog.convert_to($1, $2); END $$;
-- COALESCE, GREATEST, NULLIF are SQL constructs, not functions: a function of
-- that name is never what COALESCE(...) calls; planted anyway.
CREATE FUNCTION public."coalesce"(text, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('coalesce(text,text)'); RETURN 'hijacked'; END $$;
CREATE FUNCTION public."coalesce"(bigint, bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('coalesce(bigint,bigint)'); RETURN -1; END $$;
CREATE FUNCTION public."greatest"(timestamptz, timestamptz) RETURNS timestamptz LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('greatest(timestamptz,timestamptz)'); RETURN timestamptz '1999-01-01'; END $$;
-- aggregates
CREATE FUNCTION public.hj_count_sf(bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('count(*)'); RETURN $1 + 1; END $$;
CREATE AGGREGATE public.count(*) (SFUNC = public.hj_count_sf, STYPE = bigint, INITCOND = '0');
CREATE FUNCTION public.hj_max_sf(bigint, bigint) RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('max/min(bigint)'); RETURN pg_catalog.greatest($1, $2); END $$;
CREATE AGGREGATE public.max(bigint) (SFUNC = public.hj_max_sf, STYPE = bigint);
CREATE AGGREGATE public.min(bigint) (SFUNC = public.hj_max_sf, STYPE = bigint);
CREATE FUNCTION public.hj_jsonb_agg_sf(jsonb, anyelement) RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('jsonb_agg(anyelement)');
             RETURN pg_catalog.coalesce($1, '[]'::jsonb) OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array($2); END $$;
CREATE AGGREGATE public.jsonb_agg(anyelement) (SFUNC = public.hj_jsonb_agg_sf, STYPE = jsonb);
CREATE FUNCTION public.hj_string_agg_sf(text, text, text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('string_agg(text,text)');
             RETURN CASE WHEN $1 IS NULL THEN $2 ELSE $1 OPERATOR(pg_catalog.||) $3 OPERATOR(pg_catalog.||) $2 END; END $$;
CREATE AGGREGATE public.string_agg(text, text) (SFUNC = public.hj_string_agg_sf, STYPE = text);
-- operators: name(left, right) -> the pg_catalog operator's answer, recorded
DO $$
DECLARE o record; fn text;
BEGIN
    FOR o IN SELECT * FROM (VALUES
            ('=', 'text', 'text', 'boolean'), ('=', 'bigint', 'bigint', 'boolean'),
            ('=', 'integer', 'integer', 'boolean'), ('=', 'uuid', 'uuid', 'boolean'),
            ('=', 'name', 'name', 'boolean'), ('=', 'oid', 'oid', 'boolean'),
            ('=', 'jsonb', 'jsonb', 'boolean'), ('<>', 'text', 'text', 'boolean'),
            ('<', 'timestamptz', 'timestamptz', 'boolean'), ('<=', 'timestamptz', 'timestamptz', 'boolean'),
            ('>', 'bigint', 'bigint', 'boolean'), ('+', 'timestamptz', 'interval', 'timestamptz'),
            ('-', 'timestamptz', 'interval', 'timestamptz'), ('||', 'text', 'text', 'text'),
            ('||', 'jsonb', 'jsonb', 'jsonb'), ('@>', 'jsonb', 'jsonb', 'boolean')) v(op, l, r, res) LOOP
        fn := 'hj_op_' || md5(o.op || o.l || o.r);
        EXECUTE format('CREATE FUNCTION public.%I(a %s, b %s) RETURNS %s LANGUAGE plpgsql SET search_path = pg_catalog AS '
                       '$f$ BEGIN PERFORM public.hj_log(%L); RETURN a OPERATOR(pg_catalog.%s) b; END $f$',
                       fn, o.l, o.r, o.res, o.op || '(' || o.l || ',' || o.r || ')', o.op);
        EXECUTE format('CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.%I)',
                       o.op, o.l, o.r, fn);
    END LOOP;
END $$;
-- relations named like the extension's tables: views that record every read,
-- with INSTEAD OF triggers that record every write
CREATE FUNCTION public.hj_write() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS
    $$ BEGIN PERFORM public.hj_log('write ' || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME); RETURN NULL; END $$;
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['tasks', 'events', 'queues', 'attempts', 'commands', 'idempotency_keys',
                             'tenant_bindings', 'state_machines', 'state_transitions', 'concurrency_limits',
                             'rate_window', 'gate_repairs', 'task_status', 'definitions', 'runs', 'run_steps',
                             'approvals', 'signals'] LOOP
        EXECUTE format('CREATE VIEW public.%I AS SELECT 1::bigint AS id, ''default''::text AS tenant_id, '
                       '''x''::text AS queue, ''x''::text AS name, ''x''::text AS role, ''queued''::text AS state '
                       'WHERE public.hj_hit(%L)', t, 'read public.' || t);
        EXECUTE format('CREATE TRIGGER hj_write INSTEAD OF INSERT OR UPDATE OR DELETE ON public.%I '
                       'FOR EACH ROW EXECUTE FUNCTION public.hj_write()', t);
        EXECUTE format('GRANT ALL ON public.%I TO PUBLIC', t);
    END LOOP;
END $$;
RESET ROLE;
-- the same relations in this session's temporary schema
DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['tasks', 'events', 'queues', 'attempts', 'commands', 'tenant_bindings', 'state_machines',
                             'definitions', 'runs', 'run_steps', 'approvals', 'signals'] LOOP
        EXECUTE format('CREATE TEMP VIEW %I AS SELECT 1::bigint AS id, ''default''::text AS tenant_id, '
                       '''x''::text AS queue, ''x''::text AS name, ''queued''::text AS state '
                       'WHERE public.hj_hit(%L)', t, 'read pg_temp.' || t);
        EXECUTE format('GRANT ALL ON %I TO PUBLIC', t);
    END LOOP;
END $$;
SELECT is((SELECT count(*) FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
            WHERE p.pronamespace = 'public'::regnamespace AND r.rolname = 's_attacker'),
          66::bigint, 'the 66 planted functions, aggregates and operator functions are owned by the unprivileged role');
SELECT is((SELECT count(*) FROM pg_operator WHERE oprnamespace = 'public'::regnamespace), 16::bigint, '16 operators planted in public');

-- ---------------------------------------------------------------------------
-- sp(role, sql): runs sql as the role (NULL: the superuser) with
-- search_path = public, pg_catalog; {id:x} / {tok:x} are replaced by saved
-- ids / lease tokens; when save is given, the row's task_id and lease_token
-- are saved under that name.  Returns the column r of the first row, else
-- the row as json, or 'SQLSTATE: message'.  Its own code runs with a pinned
-- search_path, so it never reaches a plant itself.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE sp_ids (name text PRIMARY KEY, id bigint, tok uuid);
GRANT ALL ON sp_ids TO PUBLIC;
CREATE FUNCTION pg_temp.sp_subst(q text) RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE m text[]; v text;
BEGIN
    LOOP
        m := regexp_match(q, '\{(id|tok):([a-z0-9_]+)\}');
        EXIT WHEN m IS NULL;
        IF m[1] = 'id' THEN
            SELECT s.id::text INTO v FROM pg_temp.sp_ids s WHERE s.name = m[2];
        ELSE
            SELECT quote_literal(s.tok::text) INTO v FROM pg_temp.sp_ids s WHERE s.name = m[2];
        END IF;
        q := replace(q, '{' || m[1] || ':' || m[2] || '}', coalesce(v, 'NULL'));
    END LOOP;
    RETURN q;
END $$;
CREATE FUNCTION pg_temp.sp(r name, q text, save text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE rec record; j jsonb; sql text := pg_temp.sp_subst(q);
BEGIN
    IF r IS NOT NULL THEN
        EXECUTE format('SET LOCAL ROLE %I', r);
    END IF;
    SET LOCAL search_path = public, pg_catalog;
    EXECUTE sql INTO rec;
    SET LOCAL search_path = pg_catalog, pg_temp;
    RESET ROLE;
    j := to_jsonb(rec);
    IF save IS NOT NULL THEN
        INSERT INTO pg_temp.sp_ids VALUES (save, (j->>'task_id')::bigint, (j->>'lease_token')::uuid)
        ON CONFLICT (name) DO UPDATE SET id = excluded.id, tok = excluded.tok;
    END IF;
    IF j IS NULL THEN
        RETURN '<no row>';
    ELSIF j ? 'r' THEN
        RETURN coalesce(j->>'r', '<null>');
    END IF;
    RETURN j::text;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- ---------------------------------------------------------------------------
-- 1. The trap works: without schema qualification, under this search_path,
--    a plain query does reach the plants.
-- ---------------------------------------------------------------------------
SELECT is(pg_temp.sp('s_producer', 'SELECT now()::date::text AS r'), '1999-01-01', 'control: now() reaches public.now()');
SELECT is(pg_temp.sp('s_producer', $$SELECT ('a'::text = 'a'::text) AS r$$), 'true', 'control: = on text reaches the planted operator');
SELECT is(pg_temp.sp('s_producer', 'SELECT count(*) AS r FROM generate_series(1, 3)'), '3', 'control: count(*) reaches the planted aggregate');
SELECT is(pg_temp.sp('s_producer', 'SELECT pg_catalog.count(*) AS r FROM tasks'), '1', 'control: tasks resolves to a plant');
SELECT is(pg_temp.sp('s_reader', 'SELECT pg_catalog.count(*) AS r FROM public.queues'), '1', 'control: public.queues is a plant');
SELECT is(pg_temp.sp('s_producer', $$SELECT jsonb_typeof('[1]') AS r$$), 'array', 'control: jsonb_typeof reaches public.jsonb_typeof');
SELECT is(pg_temp.sp('s_reader', 'SELECT pg_catalog.count(*) AS r FROM runs'), '1', 'control: runs resolves to a plant');
SELECT set_has($$SELECT what FROM public.hijack_log$$,
               $$VALUES ('now()'), ('=(text,text)'), ('count(*)'), ('read pg_temp.tasks'), ('read public.queues'),
                        ('jsonb_typeof(jsonb)'), ('read pg_temp.runs')$$,
               'control: the plants recorded every call');
SELECT last_value AS hj_base FROM public.hijack_seq \gset
DELETE FROM public.hijack_log;

-- ---------------------------------------------------------------------------
-- 2. The whole API, three times: run 1 as the specific roles, run 2 all as
--    the admin, run 3 all as the superuser; always with public first.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE sp_steps (ord serial, who text, label text, sql text, save text, want text);
INSERT INTO sp_steps (who, label, sql, save, want) VALUES
    ('admin', 'create a queue', $$SELECT orch_create_queue('sp{n}_q', '{"max_attempts": 3, "lease": "5 minutes"}') IS NOT NULL AS r$$, NULL, 'true'),
    ('admin', 'configure a queue', $$SELECT (orch_configure_queue('sp{n}_q', '{"priority": 1}') OPERATOR(pg_catalog.->>) 'priority') AS r$$, NULL, '1'),
    ('admin', 'pause a queue', $$SELECT orch_pause_queue('sp{n}_q')::text AS r$$, NULL, ''),
    ('worker', 'a paused queue hands out nothing', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_q', 'sp-worker')$$, NULL, '0'),
    ('admin', 'resume a queue', $$SELECT orch_resume_queue('sp{n}_q')::text AS r$$, NULL, ''),
    ('reader', 'queue settings', $$SELECT (orch_queue_settings('sp{n}_q') OPERATOR(pg_catalog.->>) 'max_attempts') AS r$$, NULL, '3'),
    ('producer', 'enqueue with an idempotency key', $$SELECT orch_enqueue('sp{n}_q', '{"n": 1}', idempotency_key => 'sp{n}-k1') AS task_id$$, 'e1', '{"task_id": %}'),
    ('producer', 'enqueue with the same key: the same task', $$SELECT orch_enqueue('sp{n}_q', '{"n": 1}', idempotency_key => 'sp{n}-k1') AS r$$, NULL, '{id:e1}'),
    ('producer', 'the same key, another payload: OR004', $$SELECT orch_enqueue('sp{n}_q', '{"n": 2}', idempotency_key => 'sp{n}-k1') AS r$$, NULL, 'OR004:%'),
    ('producer', 'enqueue with every option', $$SELECT orch_enqueue('sp{n}_o', '{"n": 3}', priority => 2, run_at => '2000-01-01', owner => 'sp-owner', concurrency_key => 'sp-ck', max_attempts => 2, max_failures => 2, retry_policy => '{"backoff": "fixed", "initial_delay": "1 second"}', timeout => '1 hour') IS NOT NULL AS r$$, NULL, 'true'),
    ('producer', 'enqueue_batch', $$SELECT pg_catalog.count(*) AS r FROM orch_enqueue_batch('sp{n}_b', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[], idempotency_keys => ARRAY['sp{n}-b1', 'sp{n}-b2', 'sp{n}-b3'])$$, NULL, '3'),
    ('worker', 'dequeue the keyed task', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_q', 'sp-worker', 1)$$, 'c1', '{"task_id": {id:e1}, "lease_token": "%"}'),
    ('worker', 'heartbeat', $$SELECT orch_heartbeat({id:c1}, {tok:c1}, '1 minute') AS r$$, NULL, 'executing'),
    ('worker', 'heartbeat with a wrong token: OR003', $$SELECT orch_heartbeat({id:c1}, '00000000-0000-4000-8000-000000000001', '1 minute') AS r$$, NULL, 'OR003:%'),
    ('worker', 'heartbeat with progress', $$SELECT state OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) (lease_expires_at IS NOT NULL)::text AS r FROM orch_heartbeat({id:c1}, {tok:c1}, '1 minute', '{"pct": 10}')$$, NULL, 'executing/true'),
    ('worker', 'progress', $$SELECT orch_progress({id:c1}, {tok:c1}, '{"pct": 50}')::text AS r$$, NULL, ''),
    ('reader', 'the progress', $$SELECT progress::text AS r FROM orch_status({id:c1})$$, NULL, '{"pct": 50}'),
    ('worker', 'complete', $$SELECT orch_complete({id:c1}, {tok:c1}, '{"ok": true}') AS r$$, NULL, 'completed'),
    ('worker', 'complete again: OR002', $$SELECT orch_complete({id:c1}, {tok:c1}, '{"ok": true}') AS r$$, NULL, 'OR002:%'),
    ('reader', 'status', $$SELECT state OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) result::text AS r FROM orch_status({id:c1})$$, NULL, 'completed/{"ok": true}'),
    ('reader', 'status of an unknown task: OR005', $$SELECT state AS r FROM orch_status(-1)$$, NULL, 'OR005:%'),
    ('reader', 'history', $$SELECT pg_catalog.count(*) AS r FROM orch_history({id:c1})$$, NULL, '4'),
    ('worker', 'dequeue a batch', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_b', 'sp-worker', 2)$$, NULL, '2'),
    ('worker', 'dequeue and complete_batch', $$SELECT orch_complete_batch(pg_catalog.array_agg(task_id), pg_catalog.array_agg(lease_token)) AS r FROM orch_dequeue('sp{n}_b', 'sp-worker', 5)$$, NULL, '1'),
    ('producer', 'enqueue for a retry', $$SELECT orch_enqueue('sp{n}_f', '{"f": 1}') AS task_id$$, 'e2', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_f', 'sp-worker')$$, 'c2', '{"task_id": {id:e2}, "lease_token": "%"}'),
    ('worker', 'fail RETRYABLE: retry scheduled', $$SELECT state OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) reason_code AS r FROM orch_fail({id:c2}, {tok:c2}, 'RETRYABLE', 'try again', '1 hour')$$, NULL, 'awaiting_tool/retry_scheduled'),
    ('worker', 'the retry is not due yet', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_f', 'sp-worker')$$, NULL, '0'),
    ('producer', 'enqueue for a tool', $$SELECT orch_enqueue('sp{n}_t', '{"t": 1}') AS task_id$$, 'e3', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_t', 'sp-worker')$$, 'c3', '{"task_id": {id:e3}, "lease_token": "%"}'),
    ('worker', 'await a tool', $$SELECT orch_await_tool({id:c3}, {tok:c3}, 'sp-tool', '{"q": 1}') AS r$$, NULL, 'awaiting_tool'),
    ('worker', 'resume with the tool result', $$SELECT orch_resume({id:c3}, '{"tool": "ok"}') AS r$$, NULL, 'awaiting_tool'),
    ('worker', 'dequeue the resumed task', $$SELECT task_id, lease_token, resume_data FROM orch_dequeue('sp{n}_t', 'sp-worker')$$, 'c3b', '{"task_id": {id:e3}, "lease_token": "%", "resume_data": {"tool": "ok"}}'),
    ('worker', 'complete it', $$SELECT orch_complete({id:c3b}, {tok:c3b}) AS r$$, NULL, 'completed'),
    ('producer', 'enqueue to release', $$SELECT orch_enqueue('sp{n}_rl', '{"r": 1}') AS task_id$$, 'e9', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_rl', 'sp-worker')$$, 'c9', '{"task_id": {id:e9}, "lease_token": "%"}'),
    ('worker', 'release it', $$SELECT orch_release({id:c9}, {tok:c9}) AS r$$, NULL, 'awaiting_tool'),
    ('worker', 'dequeue the released task: the same attempt', $$SELECT task_id, lease_token, attempt FROM orch_dequeue('sp{n}_rl', 'sp-worker')$$, 'c9b', '{"attempt": 1, "task_id": {id:e9}, "lease_token": "%"}'),
    ('worker', 'release it for an hour', $$SELECT orch_release({id:c9b}, {tok:c9b}, '1 hour') AS r$$, NULL, 'awaiting_tool'),
    ('worker', 'the released task is not due yet', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_rl', 'sp-worker')$$, NULL, '0'),
    ('producer', 'enqueue for a confirmation', $$SELECT orch_enqueue('sp{n}_c', '{"c": 1}') AS task_id$$, 'e4', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_c', 'sp-worker')$$, 'c4', '{"task_id": {id:e4}, "lease_token": "%"}'),
    ('worker', 'await a confirmation', $$SELECT orch_await_confirmation({id:c4}, {tok:c4}, '{"q": "ok?"}') AS r$$, NULL, 'awaiting_user_confirmation'),
    ('approver', 'approve', $$SELECT orch_confirm({id:c4}, true, 'bob', 'fine') AS r$$, NULL, 'awaiting_user_confirmation'),
    ('worker', 'dequeue the approved task', $$SELECT task_id, lease_token, (resume_data OPERATOR(pg_catalog.->>) 'label') AS label FROM orch_dequeue('sp{n}_c', 'sp-worker')$$, 'c4b', '{"label": "bob", "task_id": {id:e4}, "lease_token": "%"}'),
    ('worker', 'complete it', $$SELECT orch_complete({id:c4b}, {tok:c4b}) AS r$$, NULL, 'completed'),
    ('producer', 'enqueue to reject', $$SELECT orch_enqueue('sp{n}_c', '{"c": 2}') AS task_id$$, 'e5', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_c', 'sp-worker')$$, 'c5', '{"task_id": {id:e5}, "lease_token": "%"}'),
    ('worker', 'await a confirmation', $$SELECT orch_await_confirmation({id:c5}, {tok:c5}) AS r$$, NULL, 'awaiting_user_confirmation'),
    ('approver', 'reject', $$SELECT orch_confirm({id:c5}, false, 'bob', 'no') AS r$$, NULL, 'failed'),
    ('producer', 'enqueue to cancel', $$SELECT orch_enqueue('sp{n}_x', '{"x": 1}') AS task_id$$, 'e6', '{"task_id": %}'),
    ('producer', 'cancel', $$SELECT orch_cancel({id:e6}, 'not needed') AS r$$, NULL, 'cancelled'),
    ('producer', 'cancel again: OR002', $$SELECT orch_cancel({id:e6}, 'not needed') AS r$$, NULL, 'OR002:%'),
    ('producer', 'enqueue to cancel by a filter', $$SELECT pg_catalog.count(*) AS r FROM orch_enqueue_batch('sp{n}_cw', ARRAY['{"w": 1}', '{"w": 2}']::jsonb[])$$, NULL, '2'),
    ('producer', 'cancel them by a filter', $$SELECT pg_catalog.string_agg(state, ',') AS r FROM orch_cancel_where('{"queue": "sp{n}_cw", "state": ["queued"]}', 'bulk')$$, NULL, 'cancelled,cancelled'),
    ('producer', 'an empty filter: 22023', $$SELECT pg_catalog.count(*) AS r FROM orch_cancel_where('{}')$$, NULL, '22023:%'),
    ('producer', 'enqueue a dead letter', $$SELECT orch_enqueue('sp{n}_d', '{"d": 1}') AS task_id$$, 'e7', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_d', 'sp-worker')$$, 'c7', '{"task_id": {id:e7}, "lease_token": "%"}'),
    ('worker', 'fail NON_RETRYABLE', $$SELECT state OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) reason_code AS r FROM orch_fail({id:c7}, {tok:c7}, 'NON_RETRYABLE', 'broken')$$, NULL, 'failed/non_retryable'),
    ('reader', 'the dead letter is listed', $$SELECT pg_catalog.count(*) AS r FROM orch_dead_letters WHERE task_id OPERATOR(pg_catalog.=) {id:c7}$$, NULL, '1'),
    ('admin', 're-drive it (orch_retry)', $$SELECT orch_retry({id:c7}) AS task_id$$, 'r7', '{"task_id": %}'),
    ('worker', 'dequeue the re-driven task', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_d', 'sp-worker')$$, 'c8', '{"task_id": {id:r7}, "lease_token": "%"}'),
    ('worker', 'fail it NON_RETRYABLE', $$SELECT state AS r FROM orch_fail({id:c8}, {tok:c8}, 'NON_RETRYABLE', 'broken again')$$, NULL, 'failed'),
    ('admin', 'reprocess the queue', $$SELECT pg_catalog.count(*) AS r FROM orch_reprocess(queue => 'sp{n}_d')$$, NULL, '1'),
    ('producer', 'enqueue a dead letter for a filter', $$SELECT orch_enqueue('sp{n}_dw', '{"d": 2}') AS task_id$$, 'e10', '{"task_id": %}'),
    ('worker', 'dequeue it', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_dw', 'sp-worker')$$, 'c10', '{"task_id": {id:e10}, "lease_token": "%"}'),
    ('worker', 'fail it NON_RETRYABLE', $$SELECT state AS r FROM orch_fail({id:c10}, {tok:c10}, 'NON_RETRYABLE', 'broken')$$, NULL, 'failed'),
    ('admin', 're-drive it by a filter', $$SELECT (new_task_id IS NOT NULL)::text AS r FROM orch_retry_where('{"queue": "sp{n}_dw", "error_class": "NON_RETRYABLE"}')$$, NULL, 'true'),
    ('producer', 'a command', $$SELECT command_id AS task_id, replayed, status FROM orch_command('sp.kind', 'sp{n}-cmd', '{"a": 1}')$$, 'k1', '{"status": "pending", "task_id": %, "replayed": false}'),
    ('producer', 'the command replayed', $$SELECT replayed AS r FROM orch_command('sp.kind', 'sp{n}-cmd', '{"a": 1}')$$, NULL, 'true'),
    ('producer', 'the key with another payload: OR004', $$SELECT replayed AS r FROM orch_command('sp.kind', 'sp{n}-cmd', '{"a": 2}')$$, NULL, 'OR004:%'),
    ('worker', 'record the command''s result', $$SELECT orch_command_result({id:k1}, true, '{"done": true}') AS r$$, NULL, 'succeeded'),
    ('reader', 'the command as recorded', $$SELECT status OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) result::text AS r FROM orch_commands WHERE command_id OPERATOR(pg_catalog.=) {id:k1}$$, NULL, 'succeeded/{"done": true}'),
    ('admin', 'a queue for a concurrency key', $$SELECT orch_create_queue('sp{n}_k') IS NOT NULL AS r$$, NULL, 'true'),
    ('admin', 'a concurrency limit', $$SELECT orch_set_concurrency_limit('sp{n}_k', 'key1', 1)::text AS r$$, NULL, ''),
    ('producer', 'two tasks of one key', $$SELECT pg_catalog.count(*) AS r FROM orch_enqueue_batch('sp{n}_k', ARRAY['{"k": 1}', '{"k": 2}']::jsonb[], concurrency_key => 'key1')$$, NULL, '2'),
    ('worker', 'only one of them runs', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_k', 'sp-worker', 5)$$, NULL, '1'),
    ('admin', 'a rate-limited queue', $$SELECT orch_create_queue('sp{n}_r', '{"rate_limit": {"count": 1, "per": "1 hour", "on_exceed": "error"}}') IS NOT NULL AS r$$, NULL, 'true'),
    ('producer', 'within the rate', $$SELECT orch_enqueue('sp{n}_r', '{}', owner => 'sp-owner') IS NOT NULL AS r$$, NULL, 'true'),
    ('producer', 'over the rate: OR006', $$SELECT orch_enqueue('sp{n}_r', '{}', owner => 'sp-owner') IS NOT NULL AS r$$, NULL, 'OR006:%'),
    ('producer', 'delayed work', $$SELECT orch_enqueue('sp{n}_l', '{}', run_at => '2999-01-01') IS NOT NULL AS r$$, NULL, 'true'),
    ('worker', 'delayed work is not handed out', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_l', 'sp-worker')$$, NULL, '0'),
    ('admin', 'maintain', $$SELECT pg_catalog.count(*) AS r FROM orch_maintain(100)$$, NULL, '1_'),
    ('admin', 'a state machine', $$SELECT orch_create_state_machine('sp{n}_door', '{"closed": ["open"], "open": ["closed"]}')::text AS r$$, NULL, ''),
    ('admin', 'attach it', $$SELECT orch_attach_state_machine('sp_doors_{n}', 'status', 'sp{n}_door')::text AS r$$, NULL, ''),
    ('admin', 'insert a door', $$INSERT INTO sp_doors_{n} VALUES (1, 'closed') RETURNING status AS r$$, NULL, 'closed'),
    ('admin', 'a legal transition', $$UPDATE sp_doors_{n} SET status = 'open' WHERE id OPERATOR(pg_catalog.=) 1 RETURNING status AS r$$, NULL, 'open'),
    ('admin', 'an illegal transition: OR001', $$UPDATE sp_doors_{n} SET status = 'ajar' WHERE id OPERATOR(pg_catalog.=) 1 RETURNING status AS r$$, NULL, 'OR001:%'),
    ('reader', 'retry decision', $$SELECT decision OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) reason_code AS r FROM orch_retry_decision('TRANSIENT', 1, 1)$$, NULL, 'retry/retry_scheduled'),
    ('reader', 'caller tenants (unrestricted)', $$SELECT orch_caller_tenants() AS r$$, NULL, '<null>'),
    ('reader', 'orch_tasks', $$SELECT pg_catalog.count(*) AS r FROM orch_tasks WHERE queue OPERATOR(pg_catalog.=) 'sp{n}_c'$$, NULL, '2'),
    ('reader', 'orch_events', $$SELECT pg_catalog.count(*) AS r FROM orch_events WHERE task_id OPERATOR(pg_catalog.=) {id:c1}$$, NULL, '3'),
    ('reader', 'orch_attempts', $$SELECT pg_catalog.count(*) AS r FROM orch_attempts WHERE task_id OPERATOR(pg_catalog.=) {id:c1}$$, NULL, '1'),
    ('reader', 'orch_queues', $$SELECT pg_catalog.count(*) AS r FROM orch_queues WHERE queue OPERATOR(pg_catalog.=) 'sp{n}_q'$$, NULL, '1'),
    ('reader', 'orch_dead_letters: none left after the re-drives', $$SELECT pg_catalog.count(*) AS r FROM orch_dead_letters WHERE queue OPERATOR(pg_catalog.=) 'sp{n}_d'$$, NULL, '0'),
    ('reader', 'orch_tasks: the re-driven tasks', $$SELECT pg_catalog.count(*) AS r FROM orch_tasks WHERE queue OPERATOR(pg_catalog.=) 'sp{n}_d' AND retry_of IS NOT NULL$$, NULL, '2'),
    ('admin', 'bind a worker to a tenant', $$SELECT orch_bind_tenant('s_worker_a', 'sa{n}') AS r$$, NULL, 'true'),
    ('admin', 'orch_tenant_bindings', $$SELECT pg_catalog.count(*) AS r FROM orch_tenant_bindings WHERE role OPERATOR(pg_catalog.=) 's_worker_a'::name$$, NULL, '1'),
    ('producer', 'work of the bound tenant', $$SELECT orch_enqueue('sp{n}_tn', '{"t": "mine"}', priority => 5, tenant => 'sa{n}') IS NOT NULL AS r$$, NULL, 'true'),
    ('producer', 'work of another tenant, first in line', $$SELECT orch_enqueue('sp{n}_tn', '{"t": "other"}', priority => -5, tenant => 'sb{n}') IS NOT NULL AS r$$, NULL, 'true'),
    ('bound', 'the bound worker''s tenants', $$SELECT orch_caller_tenants()::text AS r$$, NULL, '{sa{n}}'),
    ('bound', 'the bound worker claims its tenant''s work only', $$SELECT pg_catalog.string_agg(payload OPERATOR(pg_catalog.->>) 't', ',') AS r FROM orch_dequeue('sp{n}_tn', 'sp-bound', 10)$$, NULL, 'mine'),
    ('bound', 'the bound worker names another tenant: 42501', $$SELECT pg_catalog.count(*) AS r FROM orch_dequeue('sp{n}_tn', 'sp-bound', 10, tenant => 'sb{n}')$$, NULL, '42501:%'),
    ('bound', 'the bound worker sees its tenant only', $$SELECT pg_catalog.count(*) AS r FROM orch_tasks WHERE queue OPERATOR(pg_catalog.=) 'sp{n}_tn'$$, NULL, '1'),
    ('admin', 'unbind it', $$SELECT orch_unbind_tenant('s_worker_a', 'sa{n}') AS r$$, NULL, 'true'),
    ('bound', 'unbound again', $$SELECT orch_caller_tenants() AS r$$, NULL, '<null>'),
    ('admin', 'define a workflow', $$SELECT orch_define('sp{n}_wf', '{"steps": [{"step_id": "work", "queue": "sp{n}_wq", "handler": "sp.work", "timeout": 3600, "compensation": {"handler": "sp.undo"}}, {"step_id": "gate", "type": "human_approval", "depends_on": ["work"], "timeout": "1 day"}], "policies": {"deadline": "2 days", "retry_policy": {"max_attempts": 2}}, "input_schema": {"required": ["doc"], "properties": {"doc": {"type": "integer"}}}}') AS r$$, NULL, '1'),
    ('admin', 'define it again: the draft is replaced', $$SELECT orch_define('sp{n}_wf', '{"steps": [{"step_id": "work", "queue": "sp{n}_wq", "handler": "sp.work", "timeout": 3600, "compensation": {"handler": "sp.undo"}}, {"step_id": "gate", "type": "human_approval", "depends_on": ["work"], "timeout": "1 day"}], "policies": {"deadline": "2 days", "retry_policy": {"max_attempts": 2}}, "input_schema": {"required": ["doc"], "properties": {"doc": {"type": "integer"}}}}') AS r$$, NULL, '1'),
    ('reader', 'validate a spec', $$SELECT 'valid' AS r FROM orch_validate_definition('{"steps": [{"step_id": "a", "queue": "q", "handler": "h", "on_success": "b"}, {"step_id": "b", "type": "decision", "targets": ["c", "d"], "rules": [{"when": {"path": "$.steps.a.output.n", "op": "ge", "value": 1}, "then": "c"}], "default": "d"}, {"step_id": "c", "type": "wait", "duration": "5 min"}, {"step_id": "d", "type": "task", "queue": "q", "handler": "n", "map": {"over": "$.input.items", "max_parallel": 2}}]}') v$$, NULL, 'valid'),
    ('reader', 'validate an invalid spec: OR008', $$SELECT 'valid' AS r FROM orch_validate_definition('{"steps": [{"step_id": "a", "queue": "q", "handler": "h", "depends_on": ["a"]}]}') v$$, NULL, 'OR008:%'),
    ('admin', 'publish it', $$SELECT pg_catalog.length(orch_publish('sp{n}_wf', 1)) AS r$$, NULL, '64'),
    ('admin', 'publish it again: the same hash', $$SELECT (orch_publish('sp{n}_wf', 1) OPERATOR(pg_catalog.=) content_hash) AS r FROM orch_definitions WHERE name OPERATOR(pg_catalog.=) 'sp{n}_wf'$$, NULL, 'true'),
    ('reader', 'the published definition', $$SELECT version OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) status AS r FROM orch_definition('sp{n}_wf')$$, NULL, '1/published'),
    ('reader', 'orch_definitions', $$SELECT status AS r FROM orch_definitions WHERE name OPERATOR(pg_catalog.=) 'sp{n}_wf'$$, NULL, 'published'),
    ('producer', 'start a run', $$SELECT orch_start('sp{n}_wf', '{"doc": 1}', idempotency_key => 'sp{n}-run') AS task_id$$, 'w1', '{"task_id": %}'),
    ('producer', 'start it again: the same run', $$SELECT orch_start('sp{n}_wf', '{"doc": 1}', idempotency_key => 'sp{n}-run') AS r$$, NULL, '{id:w1}'),
    ('producer', 'the same key, another input: OR004', $$SELECT orch_start('sp{n}_wf', '{"doc": 2}', idempotency_key => 'sp{n}-run') AS r$$, NULL, 'OR004:%'),
    ('producer', 'an input against the schema: 22023', $$SELECT orch_start('sp{n}_wf', '{"doc": "x"}') AS r$$, NULL, '22023:%'),
    ('worker', 'claim the step task', $$SELECT task_id, lease_token, (payload OPERATOR(pg_catalog.->>) 'step_id') AS step FROM orch_dequeue('sp{n}_wq', 'sp-worker')$$, 'ws1', '{"step": "work", "task_id": %, "lease_token": "%"}'),
    ('worker', 'complete it', $$SELECT orch_complete({id:ws1}, {tok:ws1}, '{"done": true}') AS r$$, NULL, 'completed'),
    ('reader', 'the run waits for approval', $$SELECT state AS r FROM orch_runs WHERE run_id OPERATOR(pg_catalog.=) {id:w1}$$, NULL, 'waiting_approval'),
    ('approver', 'approve', $$SELECT orch_approve({id:w1}, 'gate', 'sp{n}-ref1', 'carol', 'ok') AS r$$, NULL, 'succeeded'),
    ('approver', 'approve again with the same reference: no change', $$SELECT orch_approve({id:w1}, 'gate', 'sp{n}-ref1', 'carol', 'ok') AS r$$, NULL, 'succeeded'),
    ('reader', 'run status', $$SELECT (orch_run_status({id:w1}) OPERATOR(pg_catalog.->) 'run' OPERATOR(pg_catalog.->>) 'state') AS r$$, NULL, 'succeeded'),
    ('reader', 'orch_run_steps', $$SELECT pg_catalog.string_agg(step_id OPERATOR(pg_catalog.||) '=' OPERATOR(pg_catalog.||) state, ',' ORDER BY ord) AS r FROM orch_run_steps WHERE run_id OPERATOR(pg_catalog.=) {id:w1}$$, NULL, 'work=succeeded,gate=succeeded'),
    ('producer', 'start a second run', $$SELECT orch_start('sp{n}_wf', '{"doc": 2}') AS task_id$$, 'w2', '{"task_id": %}'),
    ('producer', 'pause it', $$SELECT orch_pause_run({id:w2}) AS r$$, NULL, 'paused'),
    ('producer', 'signal the paused run: kept', $$SELECT (orch_signal({id:w2}, 'sp.signal', '{"s": 1}') OPERATOR(pg_catalog.>) 0) AS r$$, NULL, 'true'),
    ('reader', 'orch_signals', $$SELECT (name OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) (consumed_at IS NULL)) AS r FROM orch_signals WHERE run_id OPERATOR(pg_catalog.=) {id:w2}$$, NULL, 'sp.signal/true'),
    ('producer', 'resume it (its pins hold)', $$SELECT orch_resume_run({id:w2}, '{"definition": "sp{n}_wf", "version": 1}') AS r$$, NULL, 'running'),
    ('producer', 'pause it again', $$SELECT orch_pause_run({id:w2}) AS r$$, NULL, 'paused'),
    ('producer', 'resume with drifted pins: OR010', $$SELECT orch_resume_run({id:w2}, '{"version": 2}') AS r$$, NULL, 'OR010:%'),
    ('producer', 'resume it', $$SELECT orch_resume_run({id:w2}) AS r$$, NULL, 'running'),
    ('worker', 'claim its step task', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_wq', 'sp-worker')$$, 'ws2', '{"task_id": %, "lease_token": "%"}'),
    ('producer', 'cancel the run (its step task is executing)', $$SELECT orch_cancel_run({id:w2}, 'not needed') AS r$$, NULL, 'canceled'),
    ('producer', 'cancel it again: no change', $$SELECT orch_cancel_run({id:w2}, 'not needed') AS r$$, NULL, 'canceled'),
    ('worker', 'the worker learns it from a heartbeat', $$SELECT orch_heartbeat({id:ws2}, {tok:ws2}) AS r$$, NULL, 'cancelled'),
    ('producer', 'start a run to cancel by a filter', $$SELECT orch_start('sp{n}_wf', '{"doc": 7}') AS task_id$$, 'w6', '{"task_id": %}'),
    ('producer', 'cancel the running runs by a filter', $$SELECT pg_catalog.string_agg(state, ',') AS r FROM orch_cancel_runs_where('{"definition": "sp{n}_wf", "state": ["running"]}', 'bulk')$$, NULL, 'canceled'),
    ('reader', 'run status of the canceled run', $$SELECT (orch_run_status({id:w2}) OPERATOR(pg_catalog.->) 'run' OPERATOR(pg_catalog.->>) 'state') AS r$$, NULL, 'canceled'),
    ('producer', 'start a third run', $$SELECT orch_start('sp{n}_wf', '{"doc": 3}') AS task_id$$, 'w3', '{"task_id": %}'),
    ('worker', 'claim its step task', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_wq', 'sp-worker')$$, 'ws3', '{"task_id": %, "lease_token": "%"}'),
    ('worker', 'complete it', $$SELECT orch_complete({id:ws3}, {tok:ws3}, '{"done": 3}') AS r$$, NULL, 'completed'),
    ('approver', 'reject: the run compensates', $$SELECT orch_reject({id:w3}, 'gate', 'sp{n}-ref3', 'carol', 'no') AS r$$, NULL, 'running'),
    ('worker', 'claim the compensation task', $$SELECT task_id, lease_token, (payload OPERATOR(pg_catalog.->>) 'compensation') AS comp FROM orch_dequeue('sp{n}_wq', 'sp-worker')$$, 'wc3', '{"comp": "sp.undo", "task_id": %, "lease_token": "%"}'),
    ('worker', 'complete it', $$SELECT orch_complete({id:wc3}, {tok:wc3}) AS r$$, NULL, 'completed'),
    ('reader', 'the run failed, compensated', $$SELECT state OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) phase AS r FROM orch_runs WHERE run_id OPERATOR(pg_catalog.=) {id:w3}$$, NULL, 'failed/compensating'),
    ('producer', 'start a fourth run', $$SELECT orch_start('sp{n}_wf', '{"doc": 4}') AS task_id$$, 'w4', '{"task_id": %}'),
    ('worker', 'claim its step task', $$SELECT task_id, lease_token FROM orch_dequeue('sp{n}_wq', 'sp-worker')$$, 'ws4', '{"task_id": %, "lease_token": "%"}'),
    ('worker', 'fail it NON_RETRYABLE: the run fails', $$SELECT state AS r FROM orch_fail({id:ws4}, {tok:ws4}, 'NON_RETRYABLE', 'broken')$$, NULL, 'failed'),
    ('admin', 're-run the failed run', $$SELECT orch_retry_run({id:w4}) AS task_id$$, 'w5', '{"task_id": %}'),
    ('reader', 'the re-run', $$SELECT state OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) retry_of::text AS r FROM orch_runs WHERE run_id OPERATOR(pg_catalog.=) {id:w5}$$, NULL, 'running/{id:w4}'),
    ('admin', 'deprecate the workflow', $$SELECT orch_deprecate('sp{n}_wf', 1)::text AS r$$, NULL, ''),
    ('producer', 'no published version left: OR005', $$SELECT orch_start('sp{n}_wf', '{"doc": 6}') AS r$$, NULL, 'OR005:%'),
    ('admin', 'drop a queue (forced)', $$SELECT orch_drop_queue('sp{n}_l', true)::text AS r$$, NULL, ''),
    ('admin', 'schedule maintenance (pg_cron absent here): 55000', $$SELECT orch_schedule_maintenance() AS r$$, NULL, '55000:%'),
    ('admin', 'unschedule maintenance (pg_cron absent here): 55000', $$SELECT orch_unschedule_maintenance() AS r$$, NULL, '55000:%');

CREATE TEMP TABLE sp_runs (n int, who text, role name);
INSERT INTO sp_runs
SELECT 1, w, CASE w WHEN 'bound' THEN 's_worker_a' ELSE 's_' || w END
  FROM unnest(ARRAY['admin', 'worker', 'producer', 'approver', 'reader', 'bound']) w
UNION ALL
SELECT 2, w, CASE w WHEN 'bound' THEN 's_worker_a' ELSE 's_admin' END
  FROM unnest(ARRAY['admin', 'worker', 'producer', 'approver', 'reader', 'bound']) w
UNION ALL
SELECT 3, w, CASE w WHEN 'bound' THEN 's_worker_a' END
  FROM unnest(ARRAY['admin', 'worker', 'producer', 'approver', 'reader', 'bound']) w;
-- user tables for the attached state machine, owned by the run's admin
CREATE TABLE sp_doors_1 (id int PRIMARY KEY, status text);
CREATE TABLE sp_doors_2 (id int PRIMARY KEY, status text);
CREATE TABLE sp_doors_3 (id int PRIMARY KEY, status text);
ALTER TABLE sp_doors_1 OWNER TO s_admin;
ALTER TABLE sp_doors_2 OWNER TO s_admin;

-- sp_run(n): the steps of run n; the results are checked only after the
-- recorder has been read, so that no assertion code runs in between.
CREATE TEMP TABLE sp_results (n int, ord int, who text, role name, label text, got text, want text);
CREATE FUNCTION pg_temp.sp_run(n int) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE s record; r name;
BEGIN
    DELETE FROM pg_temp.sp_ids;
    FOR s IN SELECT * FROM pg_temp.sp_steps ORDER BY ord LOOP
        SELECT u.role INTO r FROM pg_temp.sp_runs u WHERE u.n = sp_run.n AND u.who = s.who;
        INSERT INTO pg_temp.sp_results
        VALUES (n, s.ord, s.who, r, s.label,
                pg_temp.sp(r, replace(s.sql, '{n}', n::text), s.save),
                pg_temp.sp_subst(replace(s.want, '{n}', n::text)));
    END LOOP;
END $$;

SELECT pg_temp.sp_run(1);
SELECT pg_temp.sp_run(2);
SELECT pg_temp.sp_run(3);
SELECT last_value AS hj_after FROM public.hijack_seq \gset
CREATE TEMP TABLE sp_log AS SELECT * FROM public.hijack_log;

SELECT alike(got, want, format('run %s, %s as %s: %s', n, who, coalesce(role, 'the superuser'), label))
  FROM sp_results ORDER BY n, ord;

-- ---------------------------------------------------------------------------
-- 3. No plant was ever reached (the sequence survives any rollback).
-- ---------------------------------------------------------------------------
SELECT is(:hj_after::bigint, :hj_base::bigint,
          'no planted function, operator, aggregate or relation was called by the API');
SELECT is((SELECT coalesce(array_agg(DISTINCT what ORDER BY what), '{}') FROM sp_log), '{}'::text[],
          'the hijack log is empty');

-- ---------------------------------------------------------------------------
-- 4. Every SECURITY DEFINER function pins search_path; so does every other
--    function of the extension.
-- ---------------------------------------------------------------------------
CREATE TEMP VIEW sp_functions AS
SELECT p.oid::regprocedure::text AS sig, p.prosecdef, p.proconfig
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator';
SELECT cmp_ok((SELECT count(*) FROM sp_functions WHERE prosecdef), '>=', 30::bigint,
              'the extension has its SECURITY DEFINER functions');
SELECT is(
    (SELECT coalesce(array_agg(sig ORDER BY sig), '{}') FROM sp_functions
      WHERE prosecdef AND sig <> 'orch_state_machine_trigger()' AND NOT (proconfig IS NOT NULL AND 'search_path=pg_catalog, orch, pg_temp' = ANY (proconfig))),
    '{}'::text[], 'every SECURITY DEFINER function but the row trigger (which pins it in C) has SET search_path = pg_catalog, orch, pg_temp');
SELECT is(
    (SELECT coalesce(array_agg(sig ORDER BY sig), '{}') FROM sp_functions
      WHERE prosecdef AND sig <> 'orch_state_machine_trigger()' AND (SELECT count(*) FROM unnest(proconfig) c WHERE c LIKE 'search\_path=%') <> 1),
    '{}'::text[], 'every SECURITY DEFINER function sets search_path exactly once');
SELECT is(
    (SELECT coalesce(array_agg(sig ORDER BY sig), '{}') FROM sp_functions
      WHERE NOT prosecdef AND NOT (proconfig IS NOT NULL AND 'search_path=pg_catalog, orch, pg_temp' = ANY (proconfig))),
    '{}'::text[], 'the functions that are not SECURITY DEFINER pin search_path too');

SELECT * FROM finish();
ROLLBACK;
