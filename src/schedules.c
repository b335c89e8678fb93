/*
 * schedules.c
 *	  Durable cron schedules: orch_schedule (create or replace),
 *	  orch_unschedule, orch_pause_schedule, orch_resume_schedule,
 *	  orch_cron_next, and orch_schedule_tick, which fires the slots due
 *	  (orch_maintain calls it).  A slot fires through the SQL API
 *	  (orch_enqueue or orch_start) under the idempotency key
 *	  schedule:<name>:<slot epoch>, with the schedule's row locked (SKIP
 *	  LOCKED): each (schedule, slot) fires at most once, whoever ticks.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_schedule);
PG_FUNCTION_INFO_V1(orch_unschedule);
PG_FUNCTION_INFO_V1(orch_pause_schedule);
PG_FUNCTION_INFO_V1(orch_resume_schedule);
PG_FUNCTION_INFO_V1(orch_schedule_tick);
PG_FUNCTION_INFO_V1(orch_cron_next);

/* Most slots one tick looks at for one schedule (the rest: the next tick) */
#define SCAN_MAX 10000
/* Longest catch_up_window: 7 days */
#define WINDOW_MAX (INT64CONST(7) * USECS_PER_DAY)

/* A schedule as the tick reads it (its row locked) */
typedef struct Sched
{
	char	   *tenant;
	char	   *name;
	char	   *cron;
	char	   *timezone;
	Jsonb	   *target;
	bool		run;			/* target starts a run (else enqueues a task) */
	char	   *overlap;		/* skip | allow | queue_one */
	bool		catch_up_all;
	int64		window;			/* usecs */
	bool		has_next;
	TimestampTz next;
	bool		has_pending;	/* a slot queue_one holds back */
	TimestampTz pending;
	int64		last_task_id;	/* 0: none */
	int64		last_run_id;	/* 0: none */
	/* what the tick did */
	bool		moved;			/* its next slot or held-back slot changed */
	int64		fired;
	int64		skipped;
	bool		has_fired_slot;
	TimestampTz fired_slot;
	char	   *error;
} Sched;

/* The options of orch_schedule */
typedef struct SchedOpts
{
	char	   *timezone;
	char	   *overlap;
	char	   *catch_up;
	int64		window;
	char	   *tenant;
} SchedOpts;

/* ----------------------------------------------------------------------
 * Values of the arguments
 * ---------------------------------------------------------------------- */

static void pg_attribute_noreturn()
bad_value(const char *what, const char *key, const char *must)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s key \"%s\" must be %s", what, key, must)));
}

static char *
string_value(JsonbValue *v, const char *what, const char *key)
{
	if (v->type != jbvString)
		bad_value(what, key, "a string");
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/* A JSON number that is an integer of the int4 range, else 22023 */
static void
check_integer(JsonbValue *v, const char *what, const char *key)
{
	char	   *s;
	const char *digits;

	if (v->type != jbvNumeric)
		bad_value(what, key, "an integer");
	s = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	digits = s + (s[0] == '-');
	if (digits[0] == '\0' || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 10 ||
		strtoll(s, NULL, 10) < PG_INT32_MIN || strtoll(s, NULL, 10) > PG_INT32_MAX)
		bad_value(what, key, "an integer");
}

static void
check_object(JsonbValue *v, const char *what, const char *key)
{
	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		bad_value(what, key, "a JSON object");
}

static int64
interval_value(JsonbValue *v, const char *what, const char *key)
{
	int64		usecs;
	char	   *s = string_value(v, what, key);
	ErrorData  *e = orch_try_interval_text(s, &usecs);

	if (e != NULL)
		bad_value(what, key, "an interval such as \"1 hour\"");
	return usecs;
}

static bool
one_of(const char *s, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (strcmp(s, *allowed) == 0)
			return true;
	return false;
}

/*
 * The target: {"queue": ..., "payload": ..., <orch_enqueue options>} or
 * {"definition": ..., "input": ..., "version": ..., "pins": ...}; 22023
 * for a key it does not take or a value of the wrong type.  Returns
 * whether it starts a run.
 */
static bool
check_target(Jsonb *target, char **queue)
{
	static const char *const texts[] = {"queue", "definition", "owner", "concurrency_key",
	"on_rate_limit", "correlation_id", NULL};
	static const char *const ints[] = {"priority", "max_attempts", "max_failures", "version", NULL};
	static const char *const objects[] = {"payload", "input", "retry_policy", "pins", NULL};
	static const char *const task_only[] = {"queue", "payload", "priority", "owner", "concurrency_key",
	"max_attempts", "max_failures", "retry_policy", "timeout", "on_rate_limit", NULL};
	static const char *const run_only[] = {"definition", "input", "version", "pins", NULL};
	JsonbIterator *it;
	JsonbValue	k;
	JsonbIteratorToken tok;
	bool		task = false,
				run = false,
				has_definition = false;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(target))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("target must be a JSON object")));
	it = JsonbIteratorInit(&target->root);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = pnstrdup(k.val.string.val, k.val.string.len);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		if (k.type == jbvNull && strcmp(key, "queue") != 0 && strcmp(key, "definition") != 0 &&
			(one_of(key, texts) || one_of(key, ints) || one_of(key, objects) || strcmp(key, "timeout") == 0))
			continue;			/* (a null option is its default) */
		if (one_of(key, texts))
			(void) string_value(&k, "target", key);
		else if (one_of(key, ints))
			check_integer(&k, "target", key);
		else if (one_of(key, objects))
			check_object(&k, "target", key);
		else if (strcmp(key, "timeout") == 0)
			(void) interval_value(&k, "target", key);
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown target key \"%s\"", key),
					 errhint("A task target takes queue, payload and the options of orch_enqueue except idempotency_key, run_at and tenant; a run target takes definition, input, version, pins and correlation_id.")));
		task |= one_of(key, task_only);
		run |= one_of(key, run_only);
		if (strcmp(key, "queue") == 0)
			*queue = string_value(&k, "target", key);
		has_definition |= strcmp(key, "definition") == 0;
	}
	if ((*queue != NULL) == has_definition || task == run)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("target must name either a queue or a definition"),
				 errdetail("A task target has \"queue\" (and the options of orch_enqueue); a run target has \"definition\" (and input, version, pins); the two do not mix.")));
	return run;
}

/* A string option that must be one of allowed (must: how the error says them) */
static char *
option_choice(JsonbValue *v, const char *key, const char *const *allowed, const char *must)
{
	char	   *s = string_value(v, "options", key);

	if (!one_of(s, allowed))
		bad_value("options", key, must);
	return s;
}

/* The options: timezone, overlap, catch_up, catch_up_window, tenant */
static void
read_options(Jsonb *options, SchedOpts *o)
{
	static const char *const overlaps[] = {"skip", "allow", "queue_one", NULL};
	static const char *const catch_ups[] = {"skip", "all", NULL};
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;
	char	   *tenant = NULL;

	o->timezone = "UTC";
	o->overlap = "skip";
	o->catch_up = "skip";
	o->window = USECS_PER_HOUR;
	if (options != NULL && !JB_ROOT_IS_OBJECT(options))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("options must be a JSON object")));
	it = options ? JsonbIteratorInit(&options->root) : NULL;
	while (it && (tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok != WJB_VALUE || v.type == jbvNull)
			continue;			/* (a null option is its default) */
		else if (strcmp(key, "timezone") == 0)
			o->timezone = string_value(&v, "options", key);
		else if (strcmp(key, "overlap") == 0)
			o->overlap = option_choice(&v, key, overlaps, "\"skip\", \"allow\" or \"queue_one\"");
		else if (strcmp(key, "catch_up") == 0)
			o->catch_up = option_choice(&v, key, catch_ups, "\"skip\" or \"all\"");
		else if (strcmp(key, "catch_up_window") == 0)
		{
			o->window = interval_value(&v, "options", key);
			if (o->window <= 0 || o->window > WINDOW_MAX)
				bad_value("options", key, "an interval above zero and at most 7 days");
		}
		else if (strcmp(key, "tenant") == 0)
			tenant = string_value(&v, "options", key);
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown option \"%s\"", key),
					 errhint("The options are timezone, overlap, catch_up, catch_up_window and tenant.")));
	}
	(void) orch_cron_timezone(o->timezone);
	o->tenant = orch_resolve_tenant(tenant);
}

/* 0A000 with the tables distributed by Citus */
static void
refuse_citus(void)
{
	if (orch_citus())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("schedules are not supported with the tables distributed by Citus"),
				 errhint("Drive recurring work from pg_cron jobs that call orch_enqueue or orch_start with a tenant.")));
}

/* The schedule's name (22004, 22023) */
static char *
name_arg(FunctionCallInfo fcinfo)
{
	char	   *name;

	orch_require_arg(fcinfo, 0, "name");
	name = orch_text_arg(fcinfo, 0);
	orch_check_name(name, "schedule");
	return name;
}

/* A slot as the payload and the history show it: ISO 8601 in UTC */
static char *
slot_text(TimestampTz slot)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (timestamp2tm(slot, NULL, &tm, &fsec, NULL, NULL) != 0)
		elog(ERROR, "orchestrator: slot out of range");
	return psprintf("%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year, tm.tm_mon, tm.tm_mday,
					tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* ----------------------------------------------------------------------
 * Firing one slot
 * ---------------------------------------------------------------------- */

typedef struct Fire
{
	Sched	   *s;
	TimestampTz slot;
	bool		dry_run;		/* validate: make it, then roll it back */
	int64		id;				/* the task or run */
} Fire;

static bool dry_run_done = false;

/* The SQL API call of a target, in the extension's schema */
static char *
fire_sql(bool run)
{
	const char *schema;

	if (orch_sql("SELECT n.nspname FROM pg_catalog.pg_extension e"
				 " JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace"
				 " WHERE e.extname = 'orchestrator'", 0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: the extension's schema not found");
	schema = quote_identifier(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));

	if (run)
		return psprintf("SELECT %s.orch_start(name => $1->>'definition',"
						" input => coalesce($1->'input', '{}') || jsonb_build_object('scheduled_for', $2::text),"
						" version => ($1->>'version')::int, idempotency_key => $3, tenant => $4,"
						" pins => $1->'pins', correlation_id => $1->>'correlation_id')", schema);
	return psprintf("SELECT %s.orch_enqueue(queue => $1->>'queue',"
					" payload => coalesce($1->'payload', '{}') || jsonb_build_object('scheduled_for', $2::text),"
					" priority => ($1->>'priority')::int, idempotency_key => $3, tenant => $4,"
					" owner => $1->>'owner', concurrency_key => $1->>'concurrency_key',"
					" max_attempts => ($1->>'max_attempts')::int, max_failures => ($1->>'max_failures')::int,"
					" retry_policy => $1->'retry_policy', timeout => ($1->>'timeout')::interval,"
					" on_rate_limit => $1->>'on_rate_limit', correlation_id => $1->>'correlation_id')", schema);
}

/*
 * The fire in the history of what it made: one event (reason scheduled,
 * the state unchanged) naming the schedule and the slot, once.
 */
static void
audit_fire(Fire *f, const char *when)
{
	OrchArgs	a = {0};
	char	   *note = psprintf("schedule \"%s\" slot %s", f->s->name, when);
	char	   *state;
	bool		isnull;

	orch_arg_int8(&a, f->id);
	orch_arg_text(&a, f->s->tenant);
	if (orch_args_sql(&a, f->s->run
					  ? "SELECT r.state, EXISTS (SELECT 1 FROM orch.events e WHERE e.run_id = r.id"
					  "   AND e.tenant_id = r.tenant_id AND e.task_id IS NULL AND e.reason_code = 'scheduled')"
					  " FROM orch.runs r WHERE r.id = $1 AND r.tenant_id = $2"
					  : "SELECT t.state, EXISTS (SELECT 1 FROM orch.events e WHERE e.task_id = t.id"
					  "   AND e.tenant_id = t.tenant_id AND e.reason_code = 'scheduled')"
					  " FROM orch.tasks t WHERE t.id = $1 AND t.tenant_id = $2",
					  false, 1, SPI_OK_SELECT) == 0 ||
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		return;
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (f->s->run)
		orch_write_run_event(f->s->tenant, f->id, "run", state, state, "scheduled", note);
	else
		orch_write_event(f->s->tenant, f->id, true, "task", state, state, "scheduled", 0, NULL, note);
}

/* Make the slot's task or run (in a subtransaction: orch_subxact_try) */
static void
fire_step(void *arg)
{
	Fire	   *f = (Fire *) arg;
	OrchArgs	a = {0};
	char	   *when = slot_text(f->slot);
	int64		epoch = f->slot / USECS_PER_SEC +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;
	bool		isnull;

	orch_arg_jsonb(&a, f->s->target);
	orch_arg_text(&a, when);
	orch_arg_text(&a, f->dry_run ? NULL :
				  psprintf("schedule:%s:" INT64_FORMAT, f->s->name, epoch));
	orch_arg_text(&a, f->s->tenant);
	orch_args_sql(&a, fire_sql(f->s->run), false, 1, SPI_OK_SELECT);
	f->id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (f->dry_run)
	{
		dry_run_done = true;
		elog(ERROR, "orchestrator: dry run of a schedule's target rolled back");
	}
	audit_fire(f, when);
}

/*
 * Check a target by making its task or run and rolling it back: the errors
 * of orch_enqueue / orch_start, raised by orch_schedule.
 */
static void
dry_run(Sched *s)
{
	Fire		f = {s, GetCurrentTransactionStartTimestamp(), true, 0};
	ErrorData  *e;

	dry_run_done = false;
	e = orch_subxact_try(fire_step, &f);
	if (e != NULL && !dry_run_done)
	{
		e->context = NULL;		/* the error of the call, not of its statement */
		ReThrowError(e);
	}
	if (e != NULL)
		FreeErrorData(e);
}

/* Fire one slot: true when it made (or found) its task or run */
static bool
fire(Sched *s, TimestampTz slot)
{
	Fire		f = {s, slot, false, 0};
	ErrorData  *e = orch_subxact_try(fire_step, &f);

	if (e != NULL)
	{
		ereport(WARNING,
				(errmsg("orchestrator: schedule \"%s\" of tenant \"%s\" could not fire its slot %s: %s",
						s->name, s->tenant, slot_text(slot), e->message)));
		s->error = pstrdup(e->message);
		FreeErrorData(e);
		return false;
	}
	if (s->run)
		s->last_run_id = f.id;
	else
		s->last_task_id = f.id;
	s->has_fired_slot = true;
	s->fired_slot = slot;
	s->error = NULL;
	s->fired++;
	return true;
}

/* Is the task or run of the last fire still open (not terminal)? */
static bool
previous_open(Sched *s)
{
	OrchArgs	a = {0};

	if ((s->run ? s->last_run_id : s->last_task_id) == 0)
		return false;
	orch_arg_int8(&a, s->run ? s->last_run_id : s->last_task_id);
	orch_arg_text(&a, s->tenant);
	return orch_args_sql(&a, s->run
						 ? "SELECT 1 FROM orch.runs WHERE id = $1 AND tenant_id = $2"
						 "   AND state NOT IN ('succeeded', 'failed', 'canceled')"
						 : "SELECT 1 FROM orch.tasks WHERE id = $1 AND tenant_id = $2"
						 "   AND state NOT IN ('completed', 'failed', 'cancelled')",
						 false, 1, SPI_OK_SELECT) > 0;
}

/* A slot due: fired, held back (queue_one) or skipped by the overlap policy */
static void
consider(Sched *s, TimestampTz slot, int *budget)
{
	bool		open = strcmp(s->overlap, "allow") != 0 && previous_open(s);

	if (!open)
	{
		if (fire(s, slot))
			(*budget)--;
		else
			s->skipped++;
	}
	else if (strcmp(s->overlap, "queue_one") == 0 && !s->has_pending)
	{
		s->has_pending = s->moved = true;
		s->pending = slot;
	}
	else
		s->skipped++;
}

/* The slot after slot, or none (has_next false) */
static TimestampTz
after_slot(Sched *s, const OrchCron *c, pg_tz *tz, TimestampTz slot)
{
	TimestampTz next = DT_NOEND;

	s->has_next = orch_cron_slot_after(c, tz, slot, &next);
	return s->has_next ? next : DT_NOEND;
}

/*
 * The slots of one schedule due by as_of: catch_up skip fires the latest
 * and skips the others, all fires those within the window and skips the
 * older; a slot queue_one held back fires first once the last fire's work
 * is finished.  At most *budget fires.
 */
static void
tick_schedule(Sched *s, TimestampTz as_of, int *budget)
{
	OrchCron	c;
	pg_tz	   *tz = orch_cron_timezone(s->timezone);
	TimestampTz slot = s->next;
	int			scanned = 0;

	orch_cron_parse(s->cron, &c);
	if (s->has_pending && *budget > 0 && !previous_open(s))
	{
		s->has_pending = false;
		s->moved = true;
		if (fire(s, s->pending))
			(*budget)--;
		else
			s->skipped++;
	}
	while (s->has_next && slot <= as_of && scanned++ < SCAN_MAX && *budget > 0)
	{
		TimestampTz next = after_slot(s, &c, tz, slot);

		if (!s->catch_up_all && next <= as_of)
			s->skipped++;		/* not the latest */
		else if (s->catch_up_all && slot < as_of - s->window)
			s->skipped++;		/* before the window */
		else
			consider(s, slot, budget);
		slot = next;
	}
	s->moved |= slot != s->next;
	s->next = slot;
}

/* ----------------------------------------------------------------------
 * The tick
 * ---------------------------------------------------------------------- */

#define SCHED_COLS "tenant_id, name, cron, timezone, target, overlap, catch_up, catch_up_window," \
	" next_fire_at, pending_slot, coalesce(last_task_id, 0), coalesce(last_run_id, 0)"

/* Row i of the last result (SCHED_COLS) */
static Sched *
read_sched(int i)
{
	HeapTuple	tup = SPI_tuptable->vals[i];
	TupleDesc	td = SPI_tuptable->tupdesc;
	Sched	   *s = palloc0(sizeof(Sched));
	bool		isnull;
	Datum		d;

	s->tenant = SPI_getvalue(tup, td, 1);
	s->name = SPI_getvalue(tup, td, 2);
	s->cron = SPI_getvalue(tup, td, 3);
	s->timezone = SPI_getvalue(tup, td, 4);
	s->target = DatumGetJsonbPCopy(SPI_getbinval(tup, td, 5, &isnull));
	s->run = findJsonbValueFromContainer(&s->target->root, JB_FOBJECT,
										 &(JsonbValue) {.type = jbvString, .val.string = {10, "definition"}}) != NULL;
	s->overlap = SPI_getvalue(tup, td, 6);
	s->catch_up_all = strcmp(SPI_getvalue(tup, td, 7), "all") == 0;
	s->window = orch_interval_usecs(DatumGetIntervalP(SPI_getbinval(tup, td, 8, &isnull)));
	d = SPI_getbinval(tup, td, 9, &isnull);
	s->has_next = !isnull;
	s->next = isnull ? DT_NOEND : DatumGetTimestampTz(d);
	d = SPI_getbinval(tup, td, 10, &isnull);
	s->has_pending = !isnull;
	s->pending = isnull ? 0 : DatumGetTimestampTz(d);
	s->last_task_id = DatumGetInt64(SPI_getbinval(tup, td, 11, &isnull));
	s->last_run_id = DatumGetInt64(SPI_getbinval(tup, td, 12, &isnull));
	return s;
}

/* Write back what the tick did to one schedule */
static void
save_sched(Sched *s)
{
	OrchArgs	a = {0};

	orch_arg_text(&a, s->tenant);
	orch_arg_text(&a, s->name);
	orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(s->next), !s->has_next);
	orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(s->pending), !s->has_pending);
	orch_arg(&a, INT8OID, Int64GetDatum(s->last_task_id), s->last_task_id == 0);
	orch_arg(&a, INT8OID, Int64GetDatum(s->last_run_id), s->last_run_id == 0);
	orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(s->fired_slot), !s->has_fired_slot);
	orch_arg_int8(&a, s->fired);
	orch_arg_int8(&a, s->skipped);
	orch_arg_text(&a, s->error);
	orch_args_sql(&a, "UPDATE orch.schedules SET next_fire_at = $3, pending_slot = $4,"
				  " last_task_id = $5, last_run_id = $6,"
				  " last_fired_slot = coalesce($7, last_fired_slot),"
				  " fired = fired + $8, skipped = skipped + $9,"
				  " last_error = CASE WHEN $10::text IS NOT NULL THEN $10 WHEN $8 > 0 THEN NULL ELSE last_error END"
				  " WHERE tenant_id = $1 AND name = $2",
				  false, 0, SPI_OK_UPDATE);
}

/*
 * Fire what is due by as_of, at most limit fires: the schedules of the
 * caller's tenants whose next slot (or held-back slot) is due, each locked
 * (SKIP LOCKED: a schedule another tick holds is its).  Returns how many
 * fired.  Caller is connected to SPI.
 */
int
orch_schedules_tick(TimestampTz as_of, int limit)
{
	OrchArgs	a = {0};
	int			budget = limit;
	int			n;
	Sched	  **due;

	if (orch_citus())
		return 0;
	orch_arg_timestamptz(&a, as_of);
	orch_arg_int4(&a, limit);
	orch_arg_caller_tenants(&a);
	n = (int) orch_args_sql(&a, "SELECT " SCHED_COLS " FROM orch.schedules"
							" WHERE NOT paused AND (next_fire_at <= $1 OR pending_slot IS NOT NULL)"
							"   AND " ORCH_TENANT_IN("tenant_id", "$3")
							" ORDER BY next_fire_at, tenant_id, name LIMIT $2 FOR UPDATE SKIP LOCKED",
							false, 0, SPI_OK_SELECT);
	due = palloc(sizeof(Sched *) * (n + 1));
	for (int i = 0; i < n; i++)
		due[i] = read_sched(i);
	for (int i = 0; i < n && budget > 0; i++)
	{
		tick_schedule(due[i], as_of, &budget);
		/* (a slot held back while the last fire's work runs: nothing to write) */
		if (due[i]->moved || due[i]->fired > 0 || due[i]->skipped > 0)
			save_sched(due[i]);
	}
	return limit - budget;
}

/* ----------------------------------------------------------------------
 * SQL-callable
 * ---------------------------------------------------------------------- */

/*
 * Where a schedule's slots start: its first slot after from; 22023 when
 * there is none.
 */
static TimestampTz
first_slot(const char *cron, const char *timezone, TimestampTz from)
{
	OrchCron	c;
	TimestampTz next;

	orch_cron_parse(cron, &c);
	if (!orch_cron_slot_after(&c, orch_cron_timezone(timezone), from, &next))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cron expression \"%s\" matches no time in the next ten years", cron),
				 errhint("Check the day-of-month and month fields (30 February never comes).")));
	return next;
}

/* What a schedule's row says of its slots (lock_schedule) */
typedef struct SchedCursor
{
	bool		has_next;
	TimestampTz next;			/* the first slot not handled yet */
	bool		has_fired;
	TimestampTz fired;			/* the last slot fired */
} SchedCursor;

/*
 * Lock a schedule's row and read its cursor (and, in the last result, its
 * cron and time zone as columns 3 and 4); false when there is none.
 */
static bool
lock_schedule(const char *tenant, const char *name, SchedCursor *cur)
{
	OrchArgs	a = {0};
	bool		isnull;
	Datum		d;

	memset(cur, 0, sizeof(*cur));
	orch_arg_text(&a, tenant);
	orch_arg_text(&a, name);
	if (orch_args_sql(&a, "SELECT next_fire_at, last_fired_slot, cron, timezone FROM orch.schedules"
					  " WHERE tenant_id = $1 AND name = $2 FOR UPDATE",
					  false, 0, SPI_OK_SELECT) == 0)
		return false;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	cur->has_next = !isnull;
	cur->next = isnull ? 0 : DatumGetTimestampTz(d);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	cur->has_fired = !isnull;
	cur->fired = isnull ? 0 : DatumGetTimestampTz(d);
	return true;
}

/*
 * Where a replaced schedule goes on: the slots it had not handled yet that
 * are due (for the catch-up policy), else the slots after now; never one
 * at or before its last fired slot.
 */
static TimestampTz
replaced_from(const SchedCursor *cur)
{
	TimestampTz from = GetCurrentTransactionStartTimestamp();

	if (cur->has_next && cur->next - 1 < from)
		from = cur->next - 1;
	if (cur->has_fired && cur->fired > from)
		from = cur->fired;
	return from;
}

/*
 * orch_schedule(name, cron, target, options) -> void: create or replace.
 * A replaced schedule keeps its counts, last fired slot and paused state,
 * and goes on from the slots it had not handled (replaced_from).
 */
Datum
orch_schedule(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	char	   *cron;
	OrchCron	c;
	Jsonb	   *target;
	char	   *queue = NULL;
	SchedOpts	o;
	Sched		s = {0};
	OrchArgs	a = {0};
	SchedCursor cur;

	orch_require_arg(fcinfo, 1, "cron");
	orch_require_arg(fcinfo, 2, "target");
	cron = orch_text_arg(fcinfo, 1);
	orch_cron_parse(cron, &c);
	target = orch_jsonb_arg(fcinfo, 2, "target");
	s.run = check_target(target, &queue);
	read_options(orch_jsonb_arg(fcinfo, 3, "options"), &o);
	refuse_citus();

	SPI_connect();
	s.tenant = o.tenant;
	s.name = name;
	s.target = target;
	if (queue != NULL)
	{
		QueueSettings qs;

		/* a missing queue: created now, or OR005 as orch_enqueue says */
		orch_check_name(queue, "queue");
		orch_xact_lock_shared("queue-exists", queue, NULL);
		if (!orch_load_queue(queue, &qs, NULL))
			orch_ensure_queue(queue);
	}
	dry_run(&s);
	(void) lock_schedule(o.tenant, name, &cur);
	orch_arg_text(&a, o.tenant);
	orch_arg_text(&a, name);
	orch_arg_text(&a, cron);
	orch_arg_text(&a, o.timezone);
	orch_arg_jsonb(&a, target);
	orch_arg_text(&a, o.overlap);
	orch_arg_text(&a, o.catch_up);
	orch_arg_interval(&a, o.window);
	orch_arg_timestamptz(&a, first_slot(cron, o.timezone, replaced_from(&cur)));
	orch_arg_text(&a, orch_current_actor());
	orch_args_sql(&a, "INSERT INTO orch.schedules AS s (tenant_id, name, cron, timezone, target, overlap,"
				  "   catch_up, catch_up_window, next_fire_at, created_by)"
				  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
				  " ON CONFLICT (tenant_id, name) DO UPDATE SET cron = $3, timezone = $4, target = $5,"
				  "   overlap = $6, catch_up = $7, catch_up_window = $8, next_fire_at = $9,"
				  "   pending_slot = NULL, updated_at = now()",
				  false, 0, SPI_OK_INSERT);
	SPI_finish();
	PG_RETURN_VOID();
}

/* orch_unschedule(name, tenant) -> boolean: true when it removed one */
Datum
orch_unschedule(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	OrchArgs	a = {0};
	bool		removed;

	orch_arg_text(&a, orch_resolve_tenant(orch_text_arg(fcinfo, 1)));
	orch_arg_text(&a, name);
	SPI_connect();
	removed = orch_args_sql(&a, "DELETE FROM orch.schedules WHERE tenant_id = $1 AND name = $2",
							false, 0, SPI_OK_DELETE) > 0;
	SPI_finish();
	PG_RETURN_BOOL(removed);
}

/*
 * Pause or resume (idempotent).  A resumed schedule's next slot is the
 * first after now (and after its last fired slot): the slots of the pause
 * never fire.  OR005 for an unknown schedule.
 */
static void
set_paused(FunctionCallInfo fcinfo, bool paused)
{
	char	   *name = name_arg(fcinfo);
	char	   *tenant = orch_resolve_tenant(orch_text_arg(fcinfo, 1));
	OrchArgs	a = {0};
	SchedCursor cur;
	TimestampTz from = GetCurrentTransactionStartTimestamp();
	char	   *cron;
	char	   *timezone;

	SPI_connect();
	if (!lock_schedule(tenant, name, &cur))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("schedule \"%s\" does not exist", name),
				 errdetail("Tenant \"%s\" has no schedule of this name.", tenant)));
	cron = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	timezone = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
	if (cur.has_fired && cur.fired > from)
		from = cur.fired;
	orch_arg_text(&a, tenant);
	orch_arg_text(&a, name);
	orch_arg_bool(&a, paused);
	orch_arg_timestamptz(&a, first_slot(cron, timezone, from));
	orch_args_sql(&a, "UPDATE orch.schedules SET paused = $3, updated_at = now(),"
				  "   next_fire_at = CASE WHEN paused AND NOT $3 THEN $4 ELSE next_fire_at END,"
				  "   pending_slot = CASE WHEN paused AND NOT $3 THEN NULL ELSE pending_slot END"
				  " WHERE tenant_id = $1 AND name = $2 AND paused <> $3",
				  false, 0, SPI_OK_UPDATE);
	SPI_finish();
}

Datum
orch_pause_schedule(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, true);
	PG_RETURN_VOID();
}

Datum
orch_resume_schedule(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, false);
	PG_RETURN_VOID();
}

/* orch_schedule_tick(as_of timestamptz DEFAULT now()) -> integer */
Datum
orch_schedule_tick(PG_FUNCTION_ARGS)
{
	TimestampTz as_of = PG_ARGISNULL(0) ? GetCurrentTransactionStartTimestamp()
		: PG_GETARG_TIMESTAMPTZ(0);
	int			fired;

	if (TIMESTAMP_NOT_FINITE(as_of))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("as_of must be a finite timestamp")));
	refuse_citus();
	SPI_connect();
	fired = orch_schedules_tick(as_of, orch_max_batch_size);
	SPI_finish();
	PG_RETURN_INT32(fired);
}

/*
 * orch_cron_next(cron, after timestamptz DEFAULT now(), timezone text
 * DEFAULT 'UTC', count integer DEFAULT 1) -> SETOF timestamptz: the next
 * slots of a cron expression, as a schedule would fire them.
 */
Datum
orch_cron_next(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OrchCron	c;
	pg_tz	   *tz;
	TimestampTz at;
	int32		count = orch_int4_arg(fcinfo, 3, "count", 1, 1000, 1);

	orch_require_arg(fcinfo, 0, "cron");
	orch_cron_parse(orch_text_arg(fcinfo, 0), &c);
	tz = orch_cron_timezone(PG_ARGISNULL(2) ? "UTC" : orch_text_arg(fcinfo, 2));
	at = PG_ARGISNULL(1) ? GetCurrentTransactionStartTimestamp() : PG_GETARG_TIMESTAMPTZ(1);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	for (int i = 0; i < count && orch_cron_slot_after(&c, tz, at, &at); i++)
	{
		Datum		d = TimestampTzGetDatum(at);
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &d, &isnull);
	}
	return (Datum) 0;
}
