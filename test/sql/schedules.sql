-- Cron schedules: parsing and next slots (daylight saving in
-- America/New_York and Europe/Berlin), a task target and a run target, the
-- overlap and catch-up policies, pause / resume / unschedule, one task per
-- slot, bad input (nothing stored changes), tenants and grants.  Slots are
-- driven by orch_schedule_tick(as_of) with times taken from the
-- transaction that made the schedule, so the output never depends on the
-- clock.
\set VERBOSITY terse
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS orchestrator;
RESET client_min_messages;

-- helpers shared by the tests (try, sqlstate_of, create_roles): test/sql/setup.inc
\getenv abs_srcdir PG_ABS_SRCDIR
\i :abs_srcdir/sql/setup.inc
SET timezone = 'UTC';
-- slots(cron, after, zone, n): the next n slots as local times with their UTC offset
CREATE FUNCTION pg_temp.slots(c text, after timestamptz, zone text, n int) RETURNS text[]
LANGUAGE sql AS $$
    SELECT array_agg(to_char(timezone(zone, t), 'YYYY-MM-DD HH24:MI Dy') || ' '
                     || to_char(t, 'HH24:MI') || 'Z' ORDER BY t)
      FROM orch_cron_next(c, after, zone, n) t
$$;
-- claim_complete(queue): claim the queue's next task and complete it; its id
CREATE FUNCTION pg_temp.claim_complete(q text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
    SELECT * INTO c FROM orch_dequeue(q, 'sc-worker');
    PERFORM orch_complete(c.task_id, c.lease_token, '{}');
    RETURN c.task_id;
END $$;

-- ---------------------------------------------------------------------------
-- 1. Parsing: lists, ranges, steps, names, shorthands; day-of-month and
--    day-of-week both restricted match either (standard cron).
-- ---------------------------------------------------------------------------
SELECT c, pg_temp.slots(c, '2026-12-30 23:59+00', 'UTC', 3) AS next
  FROM unnest(ARRAY['* * * * *', '*/15 * * * *', '10/20 * * * *', '5,10-12 3 * * *',
                    '0 9-17/4 * * mon-fri', '0 0 1 jan,JUL *', '0 12 * * 7', '0 12 * * SUN',
                    '0 0 13 * fri', '30 6 1-3 * 1', '0 0 */10 * *', '0 0 29 2 *',
                    '@hourly', '@daily', '@weekly', '@monthly', '@yearly']) c;

-- every field refuses what it cannot hold: 22023, the message names the field
SELECT c, pg_temp.try(format('SELECT count(*) FROM orch_cron_next(%L)', c)) AS sqlstate
  FROM unnest(ARRAY['60 * * * *', '*/0 * * * *', '5-1 * * * *', '1,,2 * * * *', '*/x * * * *',
                    '* 24 * * *', '* -1 * * *', '* * 0 * *', '* * 32 * *', '* * * 13 *',
                    '* * * foo *', '* * * * 8', '* * * * mo', '* * * *', '* * * * * *', '',
                    '@often']) c;
SELECT orch_cron_next('60 * * * *');
SELECT orch_cron_next('* 24 * * *');
SELECT orch_cron_next('* * 32 * *');
SELECT orch_cron_next('* * * foo *');
SELECT orch_cron_next('* * * * 8');
SELECT orch_cron_next('5-1 * * * *');
SELECT orch_cron_next('* * * *');
SELECT orch_cron_next('* * * * *', now(), 'Mars/Olympus');
-- 30 February never comes: no slot
SELECT count(*) AS slots FROM orch_cron_next('0 0 30 2 *', '2026-11-29', 'UTC', 5);

-- ---------------------------------------------------------------------------
-- 2. Daylight saving.  New York: 2027-03-14 02:00 EST jumps to 03:00 EDT,
--    2026-11-01 02:00 EDT falls back to 01:00 EST.  Berlin: 2027-03-28
--    02:00 CET jumps to 03:00 CEST, 2026-10-25 03:00 CEST falls back to
--    02:00 CET.  A slot in the gap fires once, when the clock jumps past it
--    (02:30 -> 03:30 summer time); a slot the repeat shows twice fires once,
--    at its first occurrence (summer time).
-- ---------------------------------------------------------------------------
SELECT pg_temp.slots('30 2 * * *', '2027-03-13 12:00+00', 'America/New_York', 3) AS ny_spring_0230;
SELECT pg_temp.slots('30 1 * * *', '2026-10-31 12:00+00', 'America/New_York', 3) AS ny_fall_0130;
-- every slot of the gap fires, each pushed by the gap's hour
SELECT pg_temp.slots('10,50 2 * * *', '2027-03-13 12:00+00', 'America/New_York', 3) AS ny_spring_two_in_gap;
SELECT pg_temp.slots('*/30 * * * *', '2027-03-14 06:00+00', 'America/New_York', 5) AS ny_spring_half_hours;
SELECT pg_temp.slots('*/30 * * * *', '2026-11-01 04:00+00', 'America/New_York', 6) AS ny_fall_half_hours;
SELECT pg_temp.slots('30 2 * * *', '2027-03-27 12:00+00', 'Europe/Berlin', 3) AS berlin_spring_0230;
SELECT pg_temp.slots('30 2 * * *', '2026-10-24 12:00+00', 'Europe/Berlin', 3) AS berlin_fall_0230;
SELECT pg_temp.slots('0 * * * *', '2026-10-24 23:30+00', 'Europe/Berlin', 5) AS berlin_fall_hours;
-- a schedule created inside the repeated hour goes on from there
SELECT pg_temp.slots('*/20 * * * *', '2026-11-01 06:10+00', 'America/New_York', 3) AS ny_inside_repeat;

-- ---------------------------------------------------------------------------
-- 3. A task target: the task of a slot has scheduled_for (the slot, UTC) in
--    its payload, the key schedule:<name>:<slot epoch>, and an event naming
--    the schedule and the slot in its history.
-- ---------------------------------------------------------------------------
SELECT orch_create_queue('sc_q') IS NOT NULL AS created;
BEGIN;
SELECT orch_schedule('sc_hourly', '0 * * * *',
                     '{"queue": "sc_q", "payload": {"report": "sales"}, "priority": 7}');
SELECT date_trunc('hour', now()) + interval '1 hour' AS h1 \gset
COMMIT;
SELECT name, tenant_id, cron, timezone, target, overlap, catch_up, catch_up_window, paused,
       next_fire_at = :'h1' AS next_is_h1, last_fired_slot, fired, skipped, created_by = current_user AS by_me
  FROM orch_schedules WHERE name = 'sc_hourly';
SELECT orch_schedule_tick(:'h1'::timestamptz - interval '1 second') AS fired_before_the_slot;
SELECT orch_schedule_tick(:'h1') AS fired;
SELECT orch_schedule_tick(:'h1') AS fired_again;
SELECT queue, priority, payload - 'scheduled_for' AS payload,
       (payload ->> 'scheduled_for')::timestamptz = :'h1' AS scheduled_for_the_slot,
       payload ->> 'scheduled_for' LIKE '____-__-__T__:00:00Z' AS iso_utc,
       idempotency_key = 'schedule:sc_hourly:' || extract(epoch FROM :'h1'::timestamptz)::bigint AS keyed,
       state
  FROM orch_tasks WHERE queue = 'sc_q';
SELECT kind, from_state, to_state, reason_code, actor = current_user AS by_ticker,
       note = 'schedule "sc_hourly" slot ' || to_char(:'h1'::timestamptz, 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS note_names_slot
  FROM orch_history((SELECT last_task_id FROM orch_schedules WHERE name = 'sc_hourly'));
SELECT next_fire_at = :'h1'::timestamptz + interval '1 hour' AS next_is_h2,
       last_fired_slot = :'h1' AS last_is_h1, fired, skipped
  FROM orch_schedules WHERE name = 'sc_hourly';

-- ---------------------------------------------------------------------------
-- 4. A run target: the run's input has scheduled_for; the run's history
--    names the schedule and the slot.
-- ---------------------------------------------------------------------------
SELECT orch_define('sc_wf', '{"steps": [{"step_id": "build", "queue": "sc_wf_q", "handler": "build"}],
                              "input_schema": {"type": "object", "required": ["scheduled_for"]}}') AS version;
SELECT orch_publish('sc_wf', 1) IS NOT NULL AS published;
BEGIN;
SELECT orch_schedule('sc_nightly', '0 3 * * *',
                     '{"definition": "sc_wf", "input": {"env": "prod"}, "version": 1}',
                     '{"timezone": "Europe/Berlin"}');
SELECT t AS d1 FROM orch_cron_next('0 3 * * *', now(), 'Europe/Berlin') t \gset
COMMIT;
SELECT timezone, next_fire_at = :'d1' AS next_is_d1,
       to_char(timezone('Europe/Berlin', next_fire_at), 'HH24:MI') AS local_time
  FROM orch_schedules WHERE name = 'sc_nightly';
SELECT orch_schedule_tick(:'d1') AS fired;
SELECT definition, version, input - 'scheduled_for' AS input,
       (input ->> 'scheduled_for')::timestamptz = :'d1' AS scheduled_for_the_slot,
       idempotency_key = 'schedule:sc_nightly:' || extract(epoch FROM :'d1'::timestamptz)::bigint AS keyed,
       state
  FROM orch_runs WHERE run_id = (SELECT last_run_id FROM orch_schedules WHERE name = 'sc_nightly');
SELECT e ->> 'entity' AS entity, e ->> 'from_state' AS from_state, e ->> 'to_state' AS to_state,
       e ->> 'note' LIKE 'schedule "sc_nightly" slot %' AS names_schedule
  FROM jsonb_array_elements(orch_run_status((SELECT last_run_id FROM orch_schedules WHERE name = 'sc_nightly')) -> 'events') e
 WHERE e ->> 'reason_code' = 'scheduled';
SELECT count(*) AS step_tasks FROM orch_tasks WHERE queue = 'sc_wf_q';
-- overlap skip with a run: the next day's slot finds the run still running
SELECT orch_schedule_tick(:'d1'::timestamptz + interval '1 day') >= 0 AS ticked;
SELECT fired, skipped, (SELECT count(*) FROM orch_runs WHERE definition = 'sc_wf') AS runs
  FROM orch_schedules WHERE name = 'sc_nightly';

-- ---------------------------------------------------------------------------
-- 5. Overlap, judged against the task of the last fire while it is open:
--    skip (the default) skips the slot, allow fires it, queue_one holds one
--    slot back and fires it once that task is finished (later slots are
--    skipped meanwhile).
-- ---------------------------------------------------------------------------
BEGIN;
SELECT orch_schedule('sc_ov_skip', '0 * * * *', '{"queue": "sc_ov_skip"}');
SELECT orch_schedule('sc_ov_allow', '0 * * * *', '{"queue": "sc_ov_allow"}', '{"overlap": "allow"}');
SELECT orch_schedule('sc_ov_one', '0 * * * *', '{"queue": "sc_ov_one"}', '{"overlap": "queue_one"}');
SELECT date_trunc('hour', now()) + interval '1 hour' AS o1,
       date_trunc('hour', now()) + interval '2 hours' AS o2,
       date_trunc('hour', now()) + interval '3 hours' AS o3 \gset
COMMIT;
-- (the tick fires other tenants' schedules too: count these three)
CREATE TEMP VIEW sc_ov AS
SELECT name, fired, skipped, pending_slot IS NOT NULL AS holding,
       (SELECT count(*) FROM orch_tasks t WHERE t.queue = s.name) AS tasks
  FROM orch_schedules s WHERE name LIKE 'sc_ov_%' ORDER BY name;
SELECT orch_schedule_tick(:'o1') > 0 AS fired_o1;
SELECT * FROM sc_ov;
-- o2: each first task is still queued
SELECT orch_schedule_tick(:'o2') > 0 AS fired_o2;
SELECT * FROM sc_ov;
-- o3: still open; queue_one holds o2 already, so o3 is skipped
SELECT orch_schedule_tick(:'o3') > 0 AS fired_o3;
SELECT * FROM sc_ov;
-- the first task of queue_one finishes: the held slot (o2) fires
SELECT pg_temp.claim_complete('sc_ov_one') IS NOT NULL AS completed;
SELECT orch_schedule_tick(:'o3') AS fired_held;
SELECT * FROM sc_ov;
SELECT (payload ->> 'scheduled_for')::timestamptz = :'o2' AS held_slot_o2
  FROM orch_tasks WHERE task_id = (SELECT last_task_id FROM orch_schedules WHERE name = 'sc_ov_one');

-- one task per slot: a schedule set back to a slot it fired (overlap allow:
-- it fires again) finds that slot's task by its key, recorded once
UPDATE orch.schedules SET next_fire_at = :'o1' WHERE name = 'sc_ov_allow';
SELECT orch_schedule_tick(:'o1') AS refired;
SELECT (SELECT count(*) FROM orch_tasks WHERE queue = 'sc_ov_allow') AS tasks,
       (SELECT (payload ->> 'scheduled_for')::timestamptz = :'o1' FROM orch_tasks
         WHERE task_id = (SELECT last_task_id FROM orch_schedules WHERE name = 'sc_ov_allow')) AS the_o1_task,
       (SELECT count(*) FROM orch_events WHERE reason_code = 'scheduled'
         AND task_id = (SELECT last_task_id FROM orch_schedules WHERE name = 'sc_ov_allow')) AS fire_events;

-- ---------------------------------------------------------------------------
-- 6. Catch-up after slots were missed (no tick for three hours of a
--    schedule every 10 minutes): skip fires the latest only, all fires
--    those within catch_up_window (default 1 hour), each skipped slot is
--    counted.
-- ---------------------------------------------------------------------------
BEGIN;
SELECT orch_schedule('sc_cu_skip', '*/10 * * * *', '{"queue": "sc_cu_skip"}', '{"overlap": "allow"}');
SELECT orch_schedule('sc_cu_all', '*/10 * * * *', '{"queue": "sc_cu_all"}',
                     '{"overlap": "allow", "catch_up": "all"}');
SELECT orch_schedule('sc_cu_25m', '*/10 * * * *', '{"queue": "sc_cu_25m"}',
                     '{"overlap": "allow", "catch_up": "all", "catch_up_window": "25 minutes"}');
SELECT t AS m1 FROM orch_cron_next('*/10 * * * *', now()) t \gset
COMMIT;
SELECT orch_schedule_tick(:'m1'::timestamptz + interval '3 hours') > 0 AS fired;
SELECT s.name, s.catch_up, s.catch_up_window, s.fired, s.skipped,
       s.next_fire_at = :'m1'::timestamptz + interval '190 minutes' AS next_after_as_of,
       array_agg(((t.payload ->> 'scheduled_for')::timestamptz - :'m1'::timestamptz)::text ORDER BY t.task_id) AS slots_fired
  FROM orch_schedules s JOIN orch_tasks t ON t.queue = s.name
 WHERE s.name LIKE 'sc_cu_%' GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1;

-- ---------------------------------------------------------------------------
-- 7. Pause, resume, unschedule.  A paused schedule fires nothing; resumed,
--    it goes on from its first slot after now: the paused slots never fire.
-- ---------------------------------------------------------------------------
BEGIN;
SELECT orch_schedule('sc_pause', '*/5 * * * *', '{"queue": "sc_pause"}');
SELECT t AS p1 FROM orch_cron_next('*/5 * * * *', now()) t \gset
COMMIT;
SELECT orch_pause_schedule('sc_pause');
SELECT orch_pause_schedule('sc_pause');   -- idempotent
SELECT paused FROM orch_schedules WHERE name = 'sc_pause';
SELECT orch_schedule_tick(:'p1'::timestamptz + interval '1 hour') >= 0 AS ticked;
SELECT (SELECT fired + skipped FROM orch_schedules WHERE name = 'sc_pause') AS handled,
       (SELECT count(*) FROM orch_tasks WHERE queue = 'sc_pause') AS tasks;
SELECT orch_resume_schedule('sc_pause');
SELECT orch_resume_schedule('sc_pause');  -- idempotent
SELECT paused, next_fire_at > now() AND next_fire_at <= now() + interval '5 minutes' AS next_after_now
  FROM orch_schedules WHERE name = 'sc_pause';
SELECT orch_unschedule('sc_pause') AS removed, orch_unschedule('sc_pause') AS removed_again;
SELECT count(*) AS left FROM orch_schedules WHERE name = 'sc_pause';
SELECT pg_temp.try($$SELECT orch_pause_schedule('sc_none')$$) AS pause_unknown,
       pg_temp.try($$SELECT orch_resume_schedule('sc_none')$$) AS resume_unknown;
SELECT orch_pause_schedule('sc_none');

-- replacing keeps the counts and the last fired slot and never fires a slot
-- again: the replacement goes on after the last slot sc_hourly fired
SELECT orch_schedule('sc_hourly', '*/30 * * * *', '{"queue": "sc_q", "payload": {"report": "sales"}}');
SELECT cron, fired >= 1 AS fired, last_fired_slot >= :'h1' AS kept_last, next_fire_at > last_fired_slot AS next_after_last
  FROM orch_schedules WHERE name = 'sc_hourly';

-- a null option or target key is its default
SELECT orch_schedule('sc_nulls', '0 0 1 1 *', '{"queue": "sc_q", "priority": null, "payload": null}',
                     '{"overlap": null, "timezone": null, "catch_up_window": null}');
SELECT overlap, timezone, catch_up_window, orch_unschedule('sc_nulls') AS removed
  FROM orch_schedules WHERE name = 'sc_nulls';

-- ---------------------------------------------------------------------------
-- 8. Bad input: 22004 for a missing argument, 22023 for a bad cron, target
--    or option, the errors of orch_enqueue / orch_start for what they
--    refuse; a failed call changes nothing stored.
-- ---------------------------------------------------------------------------
CREATE TEMP TABLE sc_before AS SELECT * FROM orch.schedules;
SELECT q, pg_temp.sqlstate_of(q) AS sqlstate FROM unnest(ARRAY[
    $$SELECT orch_schedule(NULL, '* * * * *', '{"queue": "sc_q"}')$$,
    $$SELECT orch_schedule('sc_hourly', NULL, '{"queue": "sc_q"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', NULL)$$,
    $$SELECT orch_schedule('', '* * * * *', '{"queue": "sc_q"}')$$,
    $$SELECT orch_schedule('sc hourly', '* * * * *', '{"queue": "sc_q"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * 13 *', '{"queue": "sc_q"}')$$,
    $$SELECT orch_schedule('sc_hourly', '0 0 30 2 *', '{"queue": "sc_q"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '[1]')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "definition": "sc_wf"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "input": {}}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "idempotency_key": "k"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "run_at": "2027-01-01"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "priority": "high"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "priority": 1.5}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "priority": 9999999999}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": null}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "payload": [1]}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "timeout": "soon"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "max_attempts": 0}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "on_rate_limit": "drop"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "bad queue"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"definition": "sc_none"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"definition": "sc_wf", "version": 9}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"definition": "sc_wf", "input": {"x": 1}, "queue": "q"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '[]')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"every": "day"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"timezone": "Mars/Olympus"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"timezone": 1}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"overlap": "wait"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"catch_up": "some"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"catch_up_window": "0 s"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"catch_up_window": "8 days"}')$$,
    $$SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"tenant": ""}')$$,
    $$SELECT orch_unschedule(NULL)$$,
    $$SELECT orch_pause_schedule(NULL)$$,
    $$SELECT orch_resume_schedule('')$$,
    $$SELECT orch_schedule_tick('infinity')$$,
    $$SELECT count(*) FROM orch_cron_next('* * * * *', now(), 'UTC', 0)$$,
    $$SELECT count(*) FROM orch_cron_next('* * * * *', now(), 'UTC', 1001)$$,
    $$SELECT count(*) FROM orch_cron_next(NULL)$$]) q;
-- the messages of some
SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "when": 1}');
SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q", "priority": "high"}');
SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_q"}', '{"every": "day"}');
SELECT orch_schedule('sc_hourly', '* * * * *', '{"definition": "sc_none"}');
SELECT orch_schedule('sc_hourly', '0 0 30 2 *', '{"queue": "sc_q"}');
-- a queue that does not exist, with auto_create_queues off: OR005 as orch_enqueue
SET orchestrator.auto_create_queues = off;
SELECT orch_schedule('sc_hourly', '* * * * *', '{"queue": "sc_no_such_queue"}');
RESET orchestrator.auto_create_queues;
SELECT (SELECT count(*) FROM (SELECT * FROM orch.schedules EXCEPT SELECT * FROM sc_before) d) AS changed,
       (SELECT count(*) FROM (SELECT * FROM sc_before EXCEPT SELECT * FROM orch.schedules) d) AS lost,
       (SELECT count(*) FROM orch_queues WHERE queue IN ('sc_no_such_queue', 'bad queue')) AS queues_made;

-- a slot whose fire fails (its queue dropped, no auto-creation) is skipped
-- and counted, with the error kept; the tick goes on
BEGIN;
SELECT orch_schedule('sc_fails', '0 * * * *', '{"queue": "sc_fails"}');
SELECT date_trunc('hour', now()) + interval '1 hour' AS f1 \gset
COMMIT;
SELECT orch_drop_queue('sc_fails');
SET orchestrator.auto_create_queues = off;
SET client_min_messages = error;
SELECT orch_schedule_tick(:'f1') >= 0 AS ticked;
RESET client_min_messages;
RESET orchestrator.auto_create_queues;
SELECT fired, skipped, last_error, next_fire_at > :'f1'::timestamptz AS went_on
  FROM orch_schedules WHERE name = 'sc_fails';

-- ---------------------------------------------------------------------------
-- 9. Tenants and grants.  A schedule has the tenant of options.tenant or of
--    the caller's binding; a bound producer sees and manages only its
--    tenant's schedules (one name per tenant); ticking is orch_admin's, and
--    a bound admin fires only its tenants' schedules; a role without the
--    grants is refused (42501).
-- ---------------------------------------------------------------------------
-- (roles outlive the database: a rerun finds them, and their grants)
SET client_min_messages = warning;
CALL pg_temp.create_roles('sc_prod_a', 'sc_prod_b', 'sc_admin_a', 'sc_nobody');
GRANT orch_producer TO sc_prod_a, sc_prod_b;
GRANT orch_admin TO sc_admin_a;
RESET client_min_messages;
SELECT orch_bind_tenant('sc_prod_a', 'sc_ta') AS a, orch_bind_tenant('sc_prod_b', 'sc_tb') AS b,
       orch_bind_tenant('sc_admin_a', 'sc_ta') AS admin_a;
SELECT orch_schedule('sc_admins', '0 * * * *', '{"queue": "sc_tq"}', '{"tenant": "sc_tb"}');
SET ROLE sc_prod_a;
BEGIN;
SELECT orch_schedule('sc_t', '0 * * * *', '{"queue": "sc_tq", "payload": {"of": "a"}}');
SELECT date_trunc('hour', now()) + interval '1 hour' AS t1 \gset
COMMIT;
SELECT name, tenant_id FROM orch_schedules ORDER BY 1;
SELECT pg_temp.try($$SELECT orch_schedule('sc_t2', '0 * * * *', '{"queue": "sc_tq"}', '{"tenant": "sc_tb"}')$$) AS other_tenant,
       pg_temp.try($$SELECT orch_unschedule('sc_admins', 'sc_tb')$$) AS unschedule_other,
       pg_temp.try($$SELECT orch_pause_schedule('sc_admins', 'sc_tb')$$) AS pause_other,
       pg_temp.try($$SELECT orch_unschedule('sc_admins')$$) AS unschedule_unseen,
       pg_temp.try($$SELECT orch_pause_schedule('sc_admins')$$) AS pause_unseen,
       pg_temp.try($$SELECT orch_schedule_tick()$$) AS tick;
RESET ROLE;
SET ROLE sc_prod_b;
SELECT orch_schedule('sc_t', '0 0 1 1 *', '{"queue": "sc_tq", "payload": {"of": "b"}}');
SELECT name, tenant_id, cron FROM orch_schedules ORDER BY 1;
RESET ROLE;
SET ROLE sc_nobody;
SELECT pg_temp.try($$SELECT orch_schedule('sc_n', '0 * * * *', '{"queue": "sc_tq"}')$$) AS schedule,
       pg_temp.try($$SELECT orch_unschedule('sc_t')$$) AS unschedule,
       pg_temp.try($$SELECT orch_pause_schedule('sc_t')$$) AS pause,
       pg_temp.try($$SELECT orch_resume_schedule('sc_t')$$) AS resume,
       pg_temp.try($$SELECT orch_schedule_tick()$$) AS tick,
       pg_temp.try($$SELECT count(*) FROM orch_schedules$$) AS view,
       pg_temp.try($$SELECT count(*) FROM orch_cron_next('* * * * *')$$) AS cron_next;
RESET ROLE;
-- the bound admin's tick fires sc_ta's schedule only
SET ROLE sc_admin_a;
SELECT orch_schedule_tick(:'t1'::timestamptz + interval '1 hour') AS fired_by_bound_admin;
RESET ROLE;
SELECT tenant_id, payload ->> 'of' AS of, count(*) FROM orch_tasks WHERE queue = 'sc_tq' GROUP BY 1, 2 ORDER BY 1;
SELECT name, tenant_id, fired FROM orch_schedules WHERE name IN ('sc_t', 'sc_admins') ORDER BY 1, 2;

-- ---------------------------------------------------------------------------
-- 10. orch_maintain fires what is due (action schedules_fired); then every
--     schedule of this test is removed.
-- ---------------------------------------------------------------------------
UPDATE orch.schedules SET next_fire_at = now() - interval '1 minute' WHERE name = 'sc_admins';
SELECT count FROM orch_maintain() WHERE action = 'schedules_fired';
SELECT fired FROM orch_schedules WHERE name = 'sc_admins';
SELECT count(*) FILTER (WHERE orch_unschedule(name, tenant_id)) AS removed
  FROM orch_schedules WHERE name LIKE 'sc\_%';
SELECT count(*) AS left FROM orch_schedules;
SELECT orch_unbind_tenant('sc_prod_a', 'sc_ta') AS a, orch_unbind_tenant('sc_prod_b', 'sc_tb') AS b,
       orch_unbind_tenant('sc_admin_a', 'sc_ta') AS admin_a;
