-- state_machine: user-defined machines stored as data and enforced by the
-- same C trigger on a user table (SPEC §2: orch_create_state_machine,
-- orch_attach_state_machine).  A state with no targets but itself is terminal.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
-- dml(sql): 'ok (n)' with the number of rows changed, or the SQLSTATE.
CREATE FUNCTION pg_temp.dml(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE q;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN 'ok (' || n || ')';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

SELECT coalesce(max(id), 0) AS ev0 FROM orch.history \gset

-- ---------------------------------------------------------------------------
-- 1. A door: closed <-> open, closed <-> locked, closed -> scrapped (terminal).
--    New doors start closed.
-- ---------------------------------------------------------------------------
CREATE TABLE sm_doors (id int PRIMARY KEY, status text NOT NULL, note text);
SELECT orch_create_state_machine('sm_door',
    '{"closed": ["open", "locked", "scrapped"], "open": ["closed"], "locked": ["closed"], "scrapped": []}',
    ARRAY['closed']);
SELECT name, builtin FROM orch.state_machines WHERE name = 'sm_door';
SELECT orch_attach_state_machine('sm_doors', 'status', 'sm_door');

-- Initial states.
SELECT pg_temp.dml($$INSERT INTO sm_doors VALUES (1, 'closed')$$) AS insert_closed,
       pg_temp.dml($$INSERT INTO sm_doors VALUES (2, 'open')$$) AS insert_open,
       pg_temp.dml($$INSERT INTO sm_doors VALUES (3, 'ajar')$$) AS insert_unknown;
SELECT id, status FROM sm_doors ORDER BY id;

-- A walk through the machine, step by step, on door 1.
CREATE TEMP TABLE walk (n int, stmt text);
INSERT INTO walk VALUES
    (1,  $$UPDATE sm_doors SET status = 'open' WHERE id = 1$$),
    (2,  $$UPDATE sm_doors SET status = 'locked' WHERE id = 1$$),
    (3,  $$UPDATE sm_doors SET status = 'closed' WHERE id = 1$$),
    (4,  $$UPDATE sm_doors SET status = 'locked' WHERE id = 1$$),
    (5,  $$UPDATE sm_doors SET status = 'open' WHERE id = 1$$),
    (6,  $$UPDATE sm_doors SET status = 'locked', note = 'still locked' WHERE id = 1$$),
    (7,  $$UPDATE sm_doors SET note = 'oiled' WHERE id = 1$$),
    (8,  $$UPDATE sm_doors SET status = 'closed' WHERE id = 1$$),
    (9,  $$UPDATE sm_doors SET status = 'ajar' WHERE id = 1$$),
    (10, $$UPDATE sm_doors SET status = 'scrapped' WHERE id = 1$$),
    (11, $$UPDATE sm_doors SET status = 'closed' WHERE id = 1$$),
    (12, $$UPDATE sm_doors SET note = 'rust' WHERE id = 1$$),
    (13, $$UPDATE sm_doors SET status = 'scrapped', note = 'rust' WHERE id = 1$$),
    (14, $$UPDATE sm_doors SET status = 'scrapped' WHERE id = 1$$),
    (15, $$UPDATE sm_doors SET note = note WHERE id = 1$$),
    (16, $$DELETE FROM sm_doors WHERE id = 1$$);
CREATE FUNCTION pg_temp.walk()
RETURNS TABLE (step int, sql text, result text, status text, note text, events bigint)
LANGUAGE plpgsql AS $$
DECLARE w record; e0 bigint;
BEGIN
    FOR w IN SELECT * FROM walk ORDER BY walk.n LOOP
        SELECT coalesce(max(e.id), 0) INTO e0 FROM orch.history e;
        step := w.n;
        sql := w.stmt;
        result := pg_temp.dml(w.stmt);
        SELECT d.status, d.note INTO status, note FROM sm_doors d WHERE d.id = 1;
        IF NOT FOUND THEN status := '<deleted>'; note := NULL; END IF;
        SELECT count(*) INTO events FROM orch.history e WHERE e.id > e0;
        RETURN NEXT;
    END LOOP;
END $$;
SELECT * FROM pg_temp.walk();

-- The events: one per accepted transition, naming the table (plain or
-- schema-qualified).
SELECT to_regclass(entity) = 'sm_doors'::regclass AS entity_is_table, from_state, to_state,
       task_id IS NULL AS no_task, actor = current_user AS actor_ok
  FROM orch.history WHERE id > :ev0 AND from_state IS NOT NULL ORDER BY id;

-- ---------------------------------------------------------------------------
-- 2. Multi-row statements: every row is checked; one refusal undoes all.
-- ---------------------------------------------------------------------------
INSERT INTO sm_doors VALUES (10, 'closed'), (11, 'closed'), (12, 'closed');
SELECT coalesce(max(id), 0) AS ev1 FROM orch.history \gset
SELECT pg_temp.dml($$UPDATE sm_doors SET status = 'open' WHERE id IN (10, 11)$$) AS open_two;
SELECT pg_temp.dml($$UPDATE sm_doors SET status = 'locked' WHERE id IN (10, 11)$$) AS lock_open_ones;
SELECT pg_temp.dml($$UPDATE sm_doors SET status = 'locked' WHERE id IN (11, 12)$$) AS lock_mixed;
SELECT pg_temp.dml($$UPDATE sm_doors SET status = 'closed' WHERE id IN (10, 12)$$) AS close_one_keep_one;
SELECT id, status FROM sm_doors WHERE id >= 10 ORDER BY id;
SELECT from_state, to_state, count(*) FROM orch.history WHERE id > :ev1
 GROUP BY from_state, to_state ORDER BY from_state, to_state;

-- ---------------------------------------------------------------------------
-- 3. A second machine, no initial list (any state of the machine may start),
--    on a mixed-case column.
-- ---------------------------------------------------------------------------
CREATE TABLE sm_tickets (id int PRIMARY KEY, "Phase" text);
SELECT orch_create_state_machine('sm_ticket', '{"new": ["doing"], "doing": ["done", "new"], "done": []}');
SELECT orch_attach_state_machine('sm_tickets', 'Phase', 'sm_ticket');
SELECT coalesce(max(id), 0) AS ev2 FROM orch.history \gset
SELECT pg_temp.dml($$INSERT INTO sm_tickets VALUES (1, 'new')$$) AS insert_new,
       pg_temp.dml($$INSERT INTO sm_tickets VALUES (2, 'doing')$$) AS insert_doing,
       pg_temp.dml($$INSERT INTO sm_tickets VALUES (3, 'done')$$) AS insert_done,
       pg_temp.dml($$INSERT INTO sm_tickets VALUES (4, 'bogus')$$) AS insert_bogus;
SELECT pg_temp.dml($$UPDATE sm_tickets SET "Phase" = 'done' WHERE id = 1$$) AS new_to_done,
       pg_temp.dml($$UPDATE sm_tickets SET "Phase" = 'done' WHERE id = 2$$) AS doing_to_done,
       pg_temp.dml($$UPDATE sm_tickets SET "Phase" = 'new' WHERE id = 3$$) AS done_to_new;
SELECT id, "Phase" FROM sm_tickets ORDER BY id;
SELECT to_regclass(entity) = 'sm_tickets'::regclass AS entity_is_table, from_state, to_state
  FROM orch.history WHERE id > :ev2 AND from_state IS NOT NULL ORDER BY id;
-- The door machine is not affected by the ticket machine and vice versa.
SELECT pg_temp.dml($$UPDATE sm_doors SET status = 'doing' WHERE id = 10$$) AS door_to_ticket_state;

-- ---------------------------------------------------------------------------
-- 4. Errors.
-- ---------------------------------------------------------------------------
CREATE TABLE sm_other (id int, status text);
SELECT pg_temp.try($$SELECT orch_attach_state_machine('sm_other', 'status', 'sm_no_such_machine')$$) AS unknown_machine,
       pg_temp.try($$SELECT orch_attach_state_machine('sm_other', 'no_such_column', 'sm_door')$$) AS unknown_column,
       pg_temp.try($$SELECT orch_attach_state_machine(NULL, 'status', 'sm_door')$$) AS null_table,
       pg_temp.try($$SELECT orch_attach_state_machine('sm_other', NULL, 'sm_door')$$) AS null_column,
       pg_temp.try($$SELECT orch_attach_state_machine('sm_other', 'status', NULL)$$) AS null_machine;
SELECT count(*) AS triggers_on_sm_other FROM pg_trigger WHERE tgrelid = 'sm_other'::regclass AND NOT tgisinternal;
-- The built-in task machine cannot be replaced.
SELECT pg_temp.dml($$SELECT orch_create_state_machine('task', '{"queued": ["completed"]}')$$) NOT LIKE 'ok%' AS task_redefinition_refused;
SELECT count(*) AS task_pairs FROM orch.state_transitions WHERE machine = 'task';

-- An admin that is not a superuser attaches a machine to a table it owns,
-- as the first call of its transaction (the bindings are read on its
-- behalf); a bound admin is refused with the extension's own message.
CALL pg_temp.create_roles('sm_admin', 'sm_bound_admin');
SET client_min_messages = warning;
GRANT orch_admin TO sm_admin, sm_bound_admin;
RESET client_min_messages;
SELECT orch_bind_tenant('sm_bound_admin', 'sm-tenant') IS NOT NULL AS bound;
CREATE TABLE sm_admins_doors (id int PRIMARY KEY, status text);
ALTER TABLE sm_admins_doors OWNER TO sm_admin;
CREATE TABLE sm_bound_doors (id int PRIMARY KEY, status text);
ALTER TABLE sm_bound_doors OWNER TO sm_bound_admin;
SET ROLE sm_admin;
SELECT orch_attach_state_machine('sm_admins_doors', 'status', 'sm_door');
INSERT INTO sm_admins_doors VALUES (1, 'closed');
SELECT pg_temp.dml($$UPDATE sm_admins_doors SET status = 'ajar' WHERE id = 1$$) AS refused_by_the_machine;
RESET ROLE;
SET ROLE sm_bound_admin;
\set VERBOSITY default
SELECT orch_attach_state_machine('sm_bound_doors', 'status', 'sm_door');
\set VERBOSITY terse
RESET ROLE;
SELECT count(*) AS triggers_on_sm_bound_doors FROM pg_trigger WHERE tgrelid = 'sm_bound_doors'::regclass AND NOT tgisinternal;
SELECT orch_unbind_tenant('sm_bound_admin', 'sm-tenant') IS NOT NULL AS unbound;
DROP TABLE sm_admins_doors, sm_bound_doors;

-- Cleanup.
DROP TABLE sm_doors, sm_tickets, sm_other;
DO $$
BEGIN
    DELETE FROM orch.events WHERE entity IN ('sm_doors', 'sm_tickets', 'sm_admins_doors', 'public.sm_doors', 'public.sm_tickets', 'public.sm_admins_doors');
    DELETE FROM orch.state_machines WHERE name IN ('sm_door', 'sm_ticket');
END $$;
