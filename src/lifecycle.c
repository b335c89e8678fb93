/*
 * lifecycle.c
 *	  The lifecycle matrix and the C trigger that enforces it for every writer,
 *	  the audit event writer, and user-defined state machines stored as data
 *	  (orch_create_state_machine, orch_attach_state_machine).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/array.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "nodes/bitmapset.h"
#include "catalog/namespace.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_state_machine_trigger);
PG_FUNCTION_INFO_V1(orch_create_state_machine);
PG_FUNCTION_INFO_V1(orch_attach_state_machine);
PG_FUNCTION_INFO_V1(orch_events_flush);

const char *const orch_state_names[TS_COUNT] = {
	"received", "queued", "executing", "awaiting_tool",
	"awaiting_user_confirmation", "completed", "failed", "cancelled"
};

/* SPEC section 2, row = from, column = to (self-transitions included) */
static const bool task_matrix[TS_COUNT][TS_COUNT] = {
	/* rec    que    exe    tool   conf   comp   fail   canc */
	{true, true, false, false, false, false, true, true},	/* received */
	{false, true, true, false, false, false, true, true},	/* queued */
	{false, false, true, true, true, true, true, true},	/* executing */
	{false, false, true, true, false, false, true, true},	/* awaiting_tool */
	{false, false, true, false, true, false, true, true},	/* awaiting_user_confirmation */
	{false, false, false, false, false, true, false, false},	/* completed */
	{false, false, false, false, false, false, true, false},	/* failed */
	{false, false, false, false, false, false, false, true},	/* cancelled */
};

TaskState
orch_state_from_name(const char *name)
{
	for (int i = 0; i < TS_COUNT; i++)
		if (strcmp(name, orch_state_names[i]) == 0)
			return (TaskState) i;
	return TS_INVALID;
}

bool
orch_state_is_terminal(TaskState s)
{
	return s == TS_COMPLETED || s == TS_FAILED || s == TS_CANCELLED;
}

bool
orch_task_transition_allowed(TaskState from, TaskState to)
{
	return task_matrix[from][to];
}

/* ----------------------------------------------------------------------
 * Event context: who acts and why, set by an API call for the duration of
 * its writes; a raw UPDATE has none and is recorded as the session user's
 * direct_update.
 * ---------------------------------------------------------------------- */
static bool ctx_active = false;
static bool ctx_worker_actor = false;	/* actor = the task's lease owner */
static char *ctx_actor = NULL;
static char *ctx_note = NULL;
static bool ctx_callbacks_registered = false;
static List *event_buffer = NIL;	/* BufferedEvent, in TopTransactionContext */
static int	events_deferred = 0;	/* > 0: statement ends do not flush (see orch_events_defer) */

static void
ctx_reset(void)
{
	if (ctx_actor)
		pfree(ctx_actor);
	if (ctx_note)
		pfree(ctx_note);
	ctx_actor = ctx_note = NULL;
	ctx_active = ctx_worker_actor = false;
}

static void
ctx_xact_callback(XactEvent event, void *arg)
{
	ctx_reset();
	event_buffer = NIL;			/* its memory goes with the transaction */
	events_deferred = 0;
}

static void events_forget(int from_level);

static void
ctx_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		ctx_reset();
		events_forget(GetCurrentTransactionNestLevel());
	}
}

static void
ensure_callbacks(void)
{
	if (!ctx_callbacks_registered)
	{
		RegisterXactCallback(ctx_xact_callback, NULL);
		RegisterSubXactCallback(ctx_subxact_callback, NULL);
		ctx_callbacks_registered = true;
	}
}

void
orch_set_event_context(const char *actor, const char *note)
{
	orch_set_event_context_ext(actor, note, false);
}

/* worker_actor: record the task's lease owner as the actor (worker calls) */
void
orch_set_event_context_ext(const char *actor, const char *note, bool worker_actor)
{
	ensure_callbacks();
	ctx_reset();
	ctx_active = true;
	ctx_worker_actor = worker_actor;
	if (actor)
		ctx_actor = MemoryContextStrdup(TopMemoryContext, actor);
	if (note)
		ctx_note = MemoryContextStrdup(TopMemoryContext, note);
}

void
orch_clear_event_context(void)
{
	ctx_reset();
}

/* The current event context, to be put back with orch_restore_event_context. */
OrchEventContext
orch_save_event_context(void)
{
	OrchEventContext c;

	c.active = ctx_active;
	c.worker_actor = ctx_worker_actor;
	c.actor = ctx_actor ? pstrdup(ctx_actor) : NULL;
	c.note = ctx_note ? pstrdup(ctx_note) : NULL;
	return c;
}

void
orch_restore_event_context(OrchEventContext c)
{
	if (!c.active)
	{
		ctx_reset();
		return;
	}
	orch_set_event_context_ext(c.actor, c.note, c.worker_actor);
}

/* ----------------------------------------------------------------------
 * Event writer
 * ---------------------------------------------------------------------- */

/*
 * Which columns does orch.events have?  0: before 0.4.0; 1: label (0.4.0);
 * 2: label and waited (0.5.0).  Looked up per transaction: the library may
 * run against an older schema until ALTER EXTENSION UPDATE.
 */
static LocalTransactionId level_lxid = InvalidLocalTransactionId;
static int	level_known = 0;

int
orch_events_level(void)
{
	if (level_lxid != MyProc->lxid || level_lxid == InvalidLocalTransactionId)
	{
		Oid			nsp = get_namespace_oid("orch", true);
		Oid			rel = OidIsValid(nsp) ? get_relname_relid("events", nsp) : InvalidOid;

		level_known = 0;
		if (OidIsValid(rel) && get_attnum(rel, "label") != InvalidAttrNumber)
			level_known = get_attnum(rel, "waited") != InvalidAttrNumber ? 2 : 1;
		level_lxid = MyProc->lxid;
	}
	return level_known;
}

/*
 * Insert one event.  actor is always the role the call acts for
 * (orch_current_actor); label is the name the caller supplied (worker,
 * approver), recorded beside it and never in its place.
 */
static void
write_event_full(const char *tenant, int64 task_id, bool has_task,
				 int64 run_id, bool has_run, const char *entity,
				 const char *from_state, const char *to_state,
				 const char *reason_code, const char *label, int32 attempt,
				 pg_uuid_t *lease_token, const char *note, int64 waited_us)
{
	Oid			types[13] = {TEXTOID, INT8OID, INT8OID, TEXTOID, TEXTOID,
		TEXTOID, TEXTOID, TEXTOID, INT4OID, UUIDOID, TEXTOID, TEXTOID, INTERVALOID};
	Datum		values[13];
	char		nulls[13];
	SPIPlanPtr	plan;
	int			level;
	bool		with_label;
	OrchEvent	ev;
	OrchEvent  *evp = &ev;

	ev.level = 0;
	ev.tenant = (char *) (tenant ? tenant : ORCH_DEFAULT_TENANT);
	ev.entity = entity;
	ev.has_task = has_task;
	ev.task_id = task_id;
	ev.has_run = has_run;
	ev.run_id = run_id;
	ev.from_state = (char *) from_state;
	ev.to_state = (char *) to_state;
	ev.reason_code = (char *) reason_code;
	ev.actor = (char *) orch_current_actor();
	ev.label = (char *) label;
	ev.attempt = attempt;
	ev.has_token = lease_token != NULL;
	if (lease_token)
		memcpy(&ev.token, lease_token, sizeof(pg_uuid_t));
	ev.note = (char *) note;
	ev.at = GetCurrentTimestamp();
	ev.waited_us = waited_us;
	if (orch_events_store(&evp, 1))
		return;

	level = orch_events_level();
	with_label = level >= 1;
	memset(nulls, ' ', sizeof(nulls));
	values[0] = orch_text_datum(tenant ? tenant : ORCH_DEFAULT_TENANT);
	values[1] = Int64GetDatum(task_id);
	if (!has_task)
		nulls[1] = 'n';
	values[2] = Int64GetDatum(run_id);
	if (!has_run)
		nulls[2] = 'n';
	values[3] = orch_text_datum(entity);
#define OPT_TEXT(i, s) do { if (s) values[i] = orch_text_datum(s); else nulls[i] = 'n'; } while (0)
	OPT_TEXT(4, from_state);
	OPT_TEXT(5, to_state);
	OPT_TEXT(6, reason_code);
	if (with_label)
		values[7] = orch_text_datum(orch_current_actor());
	else
		values[7] = orch_text_datum(label ? label : orch_current_actor());
	values[8] = Int32GetDatum(attempt);
	if (attempt <= 0)
		nulls[8] = 'n';
	values[9] = UUIDPGetDatum(lease_token);
	if (lease_token == NULL)
		nulls[9] = 'n';
	OPT_TEXT(10, note);
	OPT_TEXT(11, label);
#undef OPT_TEXT
	if (waited_us >= 0)
		values[12] = IntervalPGetDatum(orch_usecs_interval(waited_us));
	else
		nulls[12] = 'n';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (level >= 2)
		plan = orch_plan("INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
							" to_state, reason_code, actor, attempt, lease_token, note, label, waited)"
							" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
							13, types);
	else if (with_label)
		plan = orch_plan("INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
							" to_state, reason_code, actor, attempt, lease_token, note, label)"
							" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
							12, types);
	else
		plan = orch_plan("INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
							" to_state, reason_code, actor, attempt, lease_token, note)"
							" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
							11, types);
	orch_exec(plan, values, nulls, false, 0, SPI_OK_INSERT);
	SPI_finish();
}

/* ----------------------------------------------------------------------
 * Per-statement event buffer.  When orch.tasks has the statement trigger
 * tasks_events (0.3.0 and later), the row trigger buffers its events and
 * orch_events_flush writes them with one INSERT at the end of the statement:
 * a batch claim or enqueue of N tasks then costs one insert, not N.
 * ---------------------------------------------------------------------- */
typedef OrchEvent BufferedEvent;


static char *
tx_strdup(const char *s)
{
	return s ? MemoryContextStrdup(TopTransactionContext, s) : NULL;
}

static void
buffer_event(const char *entity, const char *tenant, bool has_task, int64 task_id,
			 bool has_run, int64 run_id,
			 const char *from_state, const char *to_state, const char *reason_code,
			 const char *label, int32 attempt, pg_uuid_t *token, const char *note,
			 int64 waited_us)
{
	MemoryContext old;
	BufferedEvent *e;

	ensure_callbacks();
	old = MemoryContextSwitchTo(TopTransactionContext);
	e = palloc0(sizeof(BufferedEvent));

	e->level = GetCurrentTransactionNestLevel();
	e->tenant = tx_strdup(tenant ? tenant : ORCH_DEFAULT_TENANT);
	e->entity = entity;
	e->has_task = has_task;
	e->task_id = task_id;
	e->has_run = has_run;
	e->run_id = run_id;
	e->from_state = tx_strdup(from_state);
	e->to_state = tx_strdup(to_state);
	e->reason_code = tx_strdup(reason_code);
	e->actor = tx_strdup(orch_current_actor());
	e->label = tx_strdup(label);
	e->attempt = attempt;
	e->has_token = token != NULL;
	if (token)
		memcpy(&e->token, token, sizeof(pg_uuid_t));
	e->note = tx_strdup(note);
	e->at = GetCurrentTimestamp();
	e->waited_us = waited_us;
	event_buffer = lappend(event_buffer, e);
	MemoryContextSwitchTo(old);
}

static void
events_forget(int from_level)
{
	ListCell   *lc;

	foreach(lc, event_buffer)
	{
		BufferedEvent *e = (BufferedEvent *) lfirst(lc);

		if (e->level >= from_level)
			event_buffer = foreach_delete_current(event_buffer, lc);
	}
}



#define FLUSH_COLS 15

/* Write every buffered event with one INSERT ... SELECT FROM unnest(...). */
static void
events_flush(void)
{
	List	   *work = event_buffer;
	int			n = list_length(work);
	Datum	   *cols[FLUSH_COLS];
	bool	   *nulls[FLUSH_COLS];
	Oid			elemtypes[FLUSH_COLS] = {TEXTOID, INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, INT4OID, UUIDOID, TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INTERVALOID, TEXTOID};
	Oid			arrtypes[FLUSH_COLS] = {TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
		TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT4ARRAYOID, UUIDARRAYOID,
	TEXTARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INTERVALARRAYOID, TEXTARRAYOID};
	Datum		args[FLUSH_COLS];
	int			i = 0;
	ListCell   *lc;
	int			level;
	bool		with_label;
	SPIPlanPtr	plan;

	if (n == 0)
		return;
	event_buffer = NIL;
	if (n == 1)
	{
		/* one row: the plain VALUES insert is cheaper to start than unnest */
		BufferedEvent *e = (BufferedEvent *) linitial(work);

		write_event_full(e->tenant, e->task_id, e->has_task, e->run_id, e->has_run, e->entity,
						 e->from_state, e->to_state, e->reason_code, e->label,
						 e->attempt, e->has_token ? &e->token : NULL, e->note, e->waited_us);
		list_free_deep(work);
		return;
	}
	{
		OrchEvent **arr = palloc(sizeof(OrchEvent *) * n);

		foreach(lc, work)
			arr[foreach_current_index(lc)] = (OrchEvent *) lfirst(lc);
		if (orch_events_store(arr, n))
		{
			pfree(arr);
			list_free_deep(work);
			return;
		}
		pfree(arr);
	}
	level = orch_events_level();
	with_label = level >= 1;
	for (int c = 0; c < FLUSH_COLS; c++)
	{
		cols[c] = palloc0(sizeof(Datum) * n);
		nulls[c] = palloc0(sizeof(bool) * n);
	}
	foreach(lc, work)
	{
		BufferedEvent *e = (BufferedEvent *) lfirst(lc);

#define SETTXT(c, s) do { if (s) cols[c][i] = orch_text_datum(s); else nulls[c][i] = true; } while (0)
		SETTXT(0, e->tenant);
		cols[1][i] = Int64GetDatum(e->task_id);
		nulls[1][i] = !e->has_task;
		cols[2][i] = Int64GetDatum(e->run_id);
		nulls[2][i] = !e->has_run;
		SETTXT(3, e->from_state);
		SETTXT(4, e->to_state);
		SETTXT(5, e->reason_code);
		if (with_label || e->label == NULL)
			SETTXT(6, e->actor);
		else
			SETTXT(6, e->label);
		cols[7][i] = Int32GetDatum(e->attempt);
		nulls[7][i] = e->attempt <= 0;
		cols[8][i] = UUIDPGetDatum(&e->token);
		nulls[8][i] = !e->has_token;
		SETTXT(9, e->note);
		cols[10][i] = TimestampTzGetDatum(e->at);
		cols[11][i] = Int32GetDatum(i);
		SETTXT(12, e->label);
#undef SETTXT
		if (e->waited_us >= 0)
			cols[13][i] = IntervalPGetDatum(orch_usecs_interval(e->waited_us));
		else
			nulls[13][i] = true;
		cols[14][i] = orch_text_datum(e->entity ? e->entity : "task");
		i++;
	}
	for (int c = 0; c < FLUSH_COLS; c++)
	{
		int16		typlen;
		bool		typbyval;
		char		typalign;
		int			dims[1] = {n};
		int			lbs[1] = {1};

		get_typlenbyvalalign(elemtypes[c], &typlen, &typbyval, &typalign);
		args[c] = PointerGetDatum(construct_md_array(cols[c], nulls[c], 1, dims, lbs,
													 elemtypes[c], typlen, typbyval, typalign));
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (level >= 2)
		plan = orch_plan("INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
							" to_state, reason_code, actor, attempt, lease_token, note, at, label, waited)"
							" SELECT e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state,"
							" e.reason_code, e.actor, e.attempt, e.lease_token, e.note, e.at, e.label, e.waited"
							" FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
							"   AS e(tenant_id, task_id, run_id, from_state, to_state, reason_code,"
							"        actor, attempt, lease_token, note, at, ord, label, waited, entity)"
							" ORDER BY e.ord",
							FLUSH_COLS, arrtypes);
	else if (with_label)
		plan = orch_plan("INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
							" to_state, reason_code, actor, attempt, lease_token, note, at, label)"
							" SELECT e.tenant_id, e.task_id, e.run_id, 'task', e.from_state, e.to_state,"
							" e.reason_code, e.actor, e.attempt, e.lease_token, e.note, e.at, e.label"
							" FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
							"   AS e(tenant_id, task_id, run_id, from_state, to_state, reason_code,"
							"        actor, attempt, lease_token, note, at, ord, label)"
							" ORDER BY e.ord",
							FLUSH_COLS - 2, arrtypes);
	else
		plan = orch_plan("INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
							" to_state, reason_code, actor, attempt, lease_token, note, at)"
							" SELECT e.tenant_id, e.task_id, e.run_id, 'task', e.from_state, e.to_state,"
							" e.reason_code, e.actor, e.attempt, e.lease_token, e.note, e.at"
							" FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
							"   AS e(tenant_id, task_id, run_id, from_state, to_state, reason_code,"
							"        actor, attempt, lease_token, note, at, ord)"
							" ORDER BY e.ord",
							FLUSH_COLS - 3, arrtypes);
	orch_exec(plan, args, NULL, false, 0, SPI_OK_INSERT);
	SPI_finish();
	list_free_deep(work);
}

/* AFTER INSERT OR UPDATE FOR EACH STATEMENT on orch.tasks */
Datum
orch_events_flush(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_events_flush: not called by trigger manager")));
	if (events_deferred == 0)
		events_flush();
	return PointerGetDatum(NULL);
}

/* Does this relation flush buffered events at statement end? */
static bool
has_flush_trigger(Relation rel)
{
	TriggerDesc *td = rel->trigdesc;

	if (td == NULL || !td->trig_update_after_statement || !td->trig_insert_after_statement)
		return false;
	for (int i = 0; i < td->numtriggers; i++)
		if (strcmp(td->triggers[i].tgname, "tasks_events") == 0 && td->triggers[i].tgenabled != TRIGGER_DISABLED)
			return true;
	return false;
}

/*
 * Record a manual action or transition that the trigger does not see (for
 * example a resume, which keeps the task's state).  Uses the event context's
 * actor and note when the caller passes none.
 */
void
orch_write_event(const char *tenant, int64 task_id, bool has_task,
				 const char *entity, const char *from_state,
				 const char *to_state, const char *reason_code,
				 int32 attempt, pg_uuid_t *lease_token, const char *note)
{
	write_event_full(tenant, task_id, has_task, 0, false, entity, from_state,
					 to_state, reason_code, ctx_actor, attempt, lease_token,
					 note ? note : ctx_note, -1);
}

/* An event of a workflow run or of one of its steps (entity 'run', 'run_step'). */
void
orch_write_run_event(const char *tenant, int64 run_id, const char *entity,
					 const char *from_state, const char *to_state,
					 const char *reason_code, const char *note)
{
	if (events_deferred > 0)
		buffer_event(strcmp(entity, "run") == 0 ? "run" : "run_step", tenant, false, 0,
					 true, run_id, from_state, to_state, reason_code, ctx_actor, 0, NULL,
					 note ? note : ctx_note, -1);
	else
		write_event_full(tenant, 0, false, run_id, true, entity, from_state, to_state,
						 reason_code, ctx_actor, 0, NULL, note ? note : ctx_note, -1);
}

/*
 * While a run progresses at the end of a statement (orch_runs_flush), the
 * events of its steps, of the step tasks it enqueues and of the run are
 * buffered and written with one INSERT when it is done (orch_events_undefer)
 * instead of one per event.  Only with the 0.5.0 schema (the flush writes
 * the entity of each row); returns whether deferral began.
 */
bool
orch_events_defer(void)
{
	if (orch_events_level() < 2)
		return false;
	ensure_callbacks();
	events_deferred++;
	return true;
}

/* End a deferral; the outermost one writes what was buffered. */
void
orch_events_undefer(bool flush)
{
	if (events_deferred > 0)
		events_deferred--;
	if (events_deferred == 0 && flush)
		events_flush();
}

/* ----------------------------------------------------------------------
 * The trigger
 * ---------------------------------------------------------------------- */

/* Column numbers of orch.tasks, looked up once per relation */
typedef struct TaskCols
{
	Oid			relid;
	int			id,
				tenant_id,
				state,
				run_at,
				ready_at,
				reason_code,
				attempts,
				lease_token,
				lease_owner,
				run_id,
				step_key,
				queue,
				concurrency_key,
				gated,			/* 0 before 0.3.0 */
				updated_at,
				finished_at,
				priority,
				created_at,
				retry_at,
				resume_data,
				lease_expires_at;
} TaskCols;

static TaskCols task_cols = {InvalidOid};
static bool task_cols_callback = false;

/*
 * The column numbers go stale when the table changes (ALTER EXTENSION UPDATE
 * adds columns): forget them on any relcache invalidation of the table.
 */
static void
task_cols_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == task_cols.relid)
		task_cols.relid = InvalidOid;
}

static int
must_fnumber(TupleDesc td, const char *name)
{
	int			n = SPI_fnumber(td, name);

	if (n <= 0)
		elog(ERROR, "orchestrator: column \"%s\" missing from orch.tasks", name);
	return n;
}

static void
load_task_cols(Relation rel)
{
	TupleDesc	td = RelationGetDescr(rel);

	if (!task_cols_callback)
	{
		CacheRegisterRelcacheCallback(task_cols_invalidate, (Datum) 0);
		task_cols_callback = true;
	}
	if (task_cols.relid == RelationGetRelid(rel))
		return;
	task_cols.id = must_fnumber(td, "id");
	task_cols.tenant_id = must_fnumber(td, "tenant_id");
	task_cols.state = must_fnumber(td, "state");
	task_cols.run_at = must_fnumber(td, "run_at");
	task_cols.ready_at = must_fnumber(td, "ready_at");
	task_cols.reason_code = must_fnumber(td, "reason_code");
	task_cols.attempts = must_fnumber(td, "attempts");
	task_cols.lease_token = must_fnumber(td, "lease_token");
	task_cols.lease_owner = must_fnumber(td, "lease_owner");
	task_cols.run_id = must_fnumber(td, "run_id");
	task_cols.step_key = must_fnumber(td, "step_key");
	task_cols.queue = must_fnumber(td, "queue");
	task_cols.concurrency_key = must_fnumber(td, "concurrency_key");
	task_cols.gated = SPI_fnumber(td, "gated");
	if (task_cols.gated < 0)
		task_cols.gated = 0;
	task_cols.updated_at = must_fnumber(td, "updated_at");
	task_cols.finished_at = must_fnumber(td, "finished_at");
	task_cols.priority = must_fnumber(td, "priority");
	task_cols.created_at = must_fnumber(td, "created_at");
	task_cols.retry_at = must_fnumber(td, "retry_at");
	task_cols.resume_data = must_fnumber(td, "resume_data");
	task_cols.lease_expires_at = must_fnumber(td, "lease_expires_at");
	task_cols.relid = RelationGetRelid(rel);
}

/*
 * Is this the extension's task table?  Its trigger ('state', 'task') on a
 * table of schema orch, where only the extension's owner creates tables:
 * orch.tasks, or on Citus one of its shards (orch.tasks_102008, ...), to
 * which Citus copies the trigger and whose names differ.  A user table
 * with the same machine lives in another schema.
 */
static bool
is_task_table(Relation rel)
{
	char	   *nsp = get_namespace_name(RelationGetNamespace(rel));

	return nsp != NULL && strcmp(nsp, "orch") == 0;
}

static char *
get_text_col(HeapTuple tup, TupleDesc td, int attno)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, attno, td, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* An insert outside any API call in a restore session (row_security = off). */
bool
orch_restoring(void)
{
	return !ctx_active && !row_security;
}

/* True when every column of the two tuples is byte-identical. */
bool
orch_tuples_identical(HeapTuple a, HeapTuple b, TupleDesc td)
{
	for (int i = 1; i <= td->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(td, i - 1);
		bool		na,
					nb;
		Datum		da,
					db;

		if (att->attisdropped)
			continue;
		da = heap_getattr(a, i, td, &na);
		db = heap_getattr(b, i, td, &nb);
		if (na != nb)
			return false;
		if (!na && !datum_image_eq(da, db, att->attbyval, att->attlen))
			return false;
	}
	return true;
}

static void
raise_invalid_transition(const char *what, const char *from, const char *to)
{
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
			 errmsg("invalid transition of %s from \"%s\" to \"%s\"", what,
					from ? from : "(new)", to ? to : "NULL")));
}

static void
raise_terminal(const char *what, const char *from, const char *to)
{
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_TERMINAL_STATE),
			 errmsg("%s is in terminal state \"%s\" and cannot change (to \"%s\")",
					what, from, to ? to : "NULL"),
			 errdetail("Terminal states are immutable.")));
}

/*
 * Concurrency keys (admission.c): a keyed task entering its key's slot set
 * (executing or claimable) must find a free slot, else it waits gated; one
 * leaving it releases a slot, filled at the end of the statement.
 */
static HeapTuple
task_gate(HeapTuple newtup, HeapTuple oldtup, TupleDesc td, TaskState from,
		  TaskState to, int64 task_id)
{
	bool		isnull;
	Datum		kd = heap_getattr(newtup, task_cols.concurrency_key, td, &isnull);
	char	   *key;
	char	   *queue;
	char	   *tenant;
	bool		in_old = false;
	bool		in_new;
	bool		gated;
	int			col = task_cols.gated;
	Datum		val = BoolGetDatum(false);
	bool		null = false;

	if (isnull)
		return newtup;
	key = TextDatumGetCString(kd);
	queue = get_text_col(newtup, td, task_cols.queue);
	tenant = get_text_col(newtup, td, task_cols.tenant_id);
	if (oldtup != NULL)
	{
		heap_getattr(oldtup, task_cols.ready_at, td, &isnull);
		in_old = (from == TS_EXECUTING) || !isnull;
	}
	heap_getattr(newtup, task_cols.ready_at, td, &isnull);
	in_new = (to == TS_EXECUTING) || !isnull;
	gated = DatumGetBool(heap_getattr(newtup, task_cols.gated, td, &isnull));

	/*
	 * An attempt that ends in a state that is claimable at once (a retry due
	 * now) no longer holds its slot either: it waits like any other task and
	 * the promotion at the end of the statement serves the key in order (it
	 * comes straight back when nothing better waits).
	 */
	if (from == TS_EXECUTING && in_new && to != TS_EXECUTING && !orch_gate_promoting)
	{
		int			cs[2] = {task_cols.ready_at, task_cols.gated};
		Datum		vs[2] = {(Datum) 0, BoolGetDatum(true)};
		bool		ns[2] = {true, false};

		orch_gate_note_release(queue, key, tenant);
		return heap_modify_tuple_by_cols(newtup, td, 2, cs, vs, ns);
	}
	if (in_new && !in_old && to != TS_EXECUTING && !orch_gate_promoting &&
		!orch_gate_admit(queue, key, tenant, task_id,
						 DatumGetInt32(heap_getattr(newtup, task_cols.priority, td, &isnull)),
						 DatumGetTimestampTz(heap_getattr(newtup, task_cols.created_at, td, &isnull)),
						 ctx_active))
	{
		/* wait for a slot, outside the claim index */
		int			cs[2] = {task_cols.ready_at, task_cols.gated};
		Datum		vs[2] = {(Datum) 0, BoolGetDatum(true)};
		bool		ns[2] = {true, false};

		return heap_modify_tuple_by_cols(newtup, td, 2, cs, vs, ns);
	}
	if (in_old && !in_new && !orch_gate_handover)
		orch_gate_note_release(queue, key, tenant);
	if (gated && (to == TS_EXECUTING || orch_state_is_terminal(to)))
		return heap_modify_tuple_by_cols(newtup, td, 1, &col, &val, &null);
	return newtup;
}

/* The built-in task lifecycle on orch.tasks. */
static HeapTuple
task_trigger(TriggerData *trigdata)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	td = RelationGetDescr(rel);
	bool		is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	HeapTuple	oldtup = is_insert ? NULL : trigdata->tg_trigtuple;
	HeapTuple	newtup = is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple;
	char	   *from_name = NULL;
	char	   *to_name;
	TaskState	from = TS_INVALID,
				to;
	int64		task_id;
	bool		isnull;
	int			ncols = 0;
	int			cols[8];
	Datum		vals[8];
	bool		nulls[8];
	char		what[64];
	char	   *reason;
	char	   *tenant;
	char	   *actor;
	int32		attempt;
	Datum		d;
	pg_uuid_t  *token = NULL;
	int64		run_id = 0;
	bool		has_run;
	int64		waited_us;

	/*
	 * A restore: pg_dump's scripts and pg_restore run with row_security =
	 * off (so that no row is silently filtered), and load finished and
	 * in-flight tasks with COPY.  Such a session declares that it reloads
	 * rows exactly as they were: an insert outside any API call is taken
	 * as it is, with no transition check, no derived column and no event
	 * (the events are restored from the dump too).  Only roles that bypass
	 * row-level security (superusers, the extension's owner) can write the
	 * table with row_security off.
	 */
	if (is_insert && !ctx_active && !row_security)
		return newtup;

	load_task_cols(rel);
	task_id = DatumGetInt64(heap_getattr(newtup, task_cols.id, td, &isnull));
	snprintf(what, sizeof(what), "task " INT64_FORMAT, task_id);

	to_name = get_text_col(newtup, td, task_cols.state);
	to = to_name ? orch_state_from_name(to_name) : TS_INVALID;

	if (!is_insert)
	{
		from_name = get_text_col(oldtup, td, task_cols.state);
		from = orch_state_from_name(from_name);
		if (from == TS_INVALID)
			elog(ERROR, "orchestrator: task " INT64_FORMAT " has unknown state \"%s\"",
				 task_id, from_name);
		if (orch_state_is_terminal(from))
		{
			if (to == from && orch_tuples_identical(oldtup, newtup, td))
				return newtup;
			raise_terminal(what, from_name, to_name);
		}
		if (to == TS_INVALID || !task_matrix[from][to])
			raise_invalid_transition(what, from_name, to_name);
	}
	else if (to != TS_RECEIVED && to != TS_QUEUED && to != TS_FAILED)
		raise_invalid_transition(what, NULL, to_name);

	/* Derived columns: claimability, timestamps */
	if (to == TS_EXECUTING || orch_state_is_terminal(to) || to == TS_RECEIVED)
	{
		cols[ncols] = task_cols.ready_at;
		vals[ncols] = (Datum) 0;
		nulls[ncols++] = true;
	}
	else if (to == TS_QUEUED && from != TS_QUEUED)
	{
		heap_getattr(newtup, task_cols.ready_at, td, &isnull);
		if (isnull)
		{
			cols[ncols] = task_cols.ready_at;
			vals[ncols] = heap_getattr(newtup, task_cols.run_at, td, &nulls[ncols]);
			ncols++;
		}
	}
	if (!is_insert)
	{
		cols[ncols] = task_cols.updated_at;
		vals[ncols] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		nulls[ncols++] = false;
	}
	if (orch_state_is_terminal(to) && to != from)
	{
		cols[ncols] = task_cols.finished_at;
		vals[ncols] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		nulls[ncols++] = false;
	}
	/*
	 * An attempt ends: its lease is gone, and what was handed to it (a tool
	 * result, a confirmation) was consumed and is not handed to the next.
	 */
	if (from == TS_EXECUTING && to != TS_EXECUTING)
	{
		cols[ncols] = task_cols.lease_expires_at;
		vals[ncols] = (Datum) 0;
		nulls[ncols++] = true;
		cols[ncols] = task_cols.resume_data;
		vals[ncols] = (Datum) 0;
		nulls[ncols++] = true;
	}
	if (ncols > 0)
		newtup = heap_modify_tuple_by_cols(newtup, td, ncols, cols, vals, nulls);

	/*
	 * Not due yet (queued for later, or waiting to retry): not claimable
	 * until orch_wake_delayed lets it in, so claims never step over it and a
	 * keyed task holds no slot while it waits.
	 */
	if (to == TS_QUEUED || to == TS_AWAITING_TOOL)
	{
		Datum		r = heap_getattr(newtup, task_cols.ready_at, td, &isnull);

		if (!isnull && DatumGetTimestampTz(r) > GetCurrentTransactionStartTimestamp())
		{
			int			c = task_cols.ready_at;
			Datum		nv = (Datum) 0;
			bool		nn = true;

			newtup = heap_modify_tuple_by_cols(newtup, td, 1, &c, &nv, &nn);
		}
	}

	if (task_cols.gated > 0)
	{
		bool		keyless;

		heap_getattr(newtup, task_cols.concurrency_key, td, &keyless);
		if (keyless)
			newtup = task_gate(newtup, oldtup, td, from, to, task_id);
		else
		{
			/* a keyed task: the gate runs SQL (the function pins no search_path) */
			int			nest = orch_pin_search_path();

			newtup = task_gate(newtup, oldtup, td, from, to, task_id);
			AtEOXact_GUC(true, nest);
		}
	}

	/* A self-transition writes no event */
	if (!is_insert && from == to)
		return newtup;

	reason = get_text_col(newtup, td, task_cols.reason_code);
	if (!is_insert)
	{
		char	   *old_reason = get_text_col(oldtup, td, task_cols.reason_code);

		/* a raw UPDATE that set no reason of its own */
		if (!ctx_active &&
			(reason == NULL || (old_reason != NULL && strcmp(reason, old_reason) == 0)))
			reason = "direct_update";
	}
	else if (reason == NULL)
		reason = "enqueued";
	tenant = get_text_col(newtup, td, task_cols.tenant_id);
	attempt = DatumGetInt32(heap_getattr(newtup, task_cols.attempts, td, &isnull));
	d = heap_getattr(newtup, task_cols.lease_token, td, &isnull);
	if (!isnull)
		token = DatumGetUUIDP(d);
	d = heap_getattr(newtup, task_cols.run_id, td, &isnull);
	has_run = !isnull;
	if (has_run)
		run_id = DatumGetInt64(d);

	/*
	 * A workflow step's task finished: its run progresses at statement end
	 * (told which task completed, the usual case has a shorter path).
	 */
	if (has_run && orch_state_is_terminal(to) && to != from)
		orch_runs_note(run_id, tenant, task_id, get_text_col(newtup, td, task_cols.step_key),
					   to == TS_COMPLETED);

	actor = ctx_actor;
	if (actor == NULL && ctx_worker_actor)
		actor = get_text_col(newtup, td, task_cols.lease_owner);

	/* a claim: how long the task had been claimable (queue wait metrics) */
	waited_us = -1;
	if (!is_insert && to == TS_EXECUTING)
	{
		d = heap_getattr(oldtup, task_cols.ready_at, td, &isnull);
		if (!isnull)
			waited_us = Max(0, GetCurrentTimestamp() - DatumGetTimestampTz(d));
	}
	if (has_flush_trigger(rel))
		buffer_event("task", tenant, true, task_id, has_run, run_id,
					 is_insert ? (to == TS_RECEIVED ? NULL : "received") : from_name,
					 to_name, reason, actor, attempt, token, ctx_note, waited_us);
	else
	{
		int			nest = orch_pin_search_path();

		write_event_full(tenant, task_id, true, run_id, has_run, "task",
						 is_insert ? (to == TS_RECEIVED ? NULL : "received") : from_name,
						 to_name, reason, actor, attempt, token, ctx_note, waited_us);
		AtEOXact_GUC(true, nest);
	}
	return newtup;
}

/* ----------------------------------------------------------------------
 * User-defined machines on user tables
 * ---------------------------------------------------------------------- */

typedef struct MachineVerdict
{
	bool		machine_exists;
	bool		allowed;		/* (from, to) listed */
	bool		from_terminal;	/* from has no exit to another state */
	bool		to_known;		/* to appears in the machine */
	bool		initial_allowed;	/* insert with state to is allowed */
} MachineVerdict;

static MachineVerdict
machine_check(const char *machine, const char *from, const char *to)
{
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	MachineVerdict v;
	SPIPlanPtr	plan;
	bool		isnull;

	values[0] = orch_text_datum(machine);
	orch_spi_text(values, nulls, 1, from);
	orch_spi_text(values, nulls, 2, to);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	plan = orch_plan("SELECT"
						" EXISTS (SELECT 1 FROM orch.state_machines m WHERE m.name = $1),"
						" EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state = $2 AND t.to_state = $3),"
						" NOT EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state = $2 AND t.to_state <> $2),"
						" EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND (t.from_state = $3 OR t.to_state = $3)),"
						" EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state IS NULL AND t.to_state = $3)"
						" OR NOT EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state IS NULL)",
						3, types);
	if (orch_exec(plan, values, nulls, true, 1, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: state machine lookup failed");
#define GETB(n) DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, n, &isnull))
	v.machine_exists = GETB(1);
	v.allowed = GETB(2);
	v.from_terminal = GETB(3);
	v.to_known = GETB(4);
	v.initial_allowed = GETB(5);
#undef GETB
	SPI_finish();
	return v;
}

/*
 * The row's primary key as a JSON object of its columns' text forms, e.g.
 * {"id": "42"}: what identifies the row, and nothing else of it (the event
 * is readable by roles that may not read the table).  Built from the types'
 * output functions only: row_to_json would also run casts to json, which any
 * user may define, and this trigger runs as the extension owner.  NULL when
 * the table has no primary key.
 */
static char *
row_key_json_text(Relation rel, HeapTuple tup, TupleDesc td)
{
	Bitmapset  *pk = RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_PRIMARY_KEY);
	StringInfoData buf;
	bool		first = true;
	int			x = -1;

	if (pk == NULL)
		return NULL;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	while ((x = bms_next_member(pk, x)) >= 0)
	{
		AttrNumber	attno = x + FirstLowInvalidHeapAttributeNumber;
		char	   *val;

		if (attno <= 0)
			continue;
		if (!first)
			appendStringInfoString(&buf, ", ");
		first = false;
		escape_json(&buf, NameStr(TupleDescAttr(td, attno - 1)->attname));
		appendStringInfoString(&buf, ": ");
		val = SPI_getvalue(tup, td, attno);
		if (val == NULL)
			appendStringInfoString(&buf, "null");
		else
			escape_json(&buf, val);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static HeapTuple
generic_trigger(TriggerData *trigdata, const char *column, const char *machine)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	td = RelationGetDescr(rel);
	bool		is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	HeapTuple	oldtup = is_insert ? NULL : trigdata->tg_trigtuple;
	HeapTuple	newtup = is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple;
	int			attno = SPI_fnumber(td, column);
	char	   *from = NULL;
	char	   *to;
	char		what[NAMEDATALEN * 2 + 32];
	MachineVerdict v;
	char	   *relname;
	char	   *rowjson;

	if (attno <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of the state machine trigger does not exist in \"%s\"",
						column, RelationGetRelationName(rel))));
	relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
										 RelationGetRelationName(rel));
	snprintf(what, sizeof(what), "row of %s", relname);

	to = SPI_getvalue(newtup, td, attno);
	if (!is_insert)
		from = SPI_getvalue(oldtup, td, attno);
	v = machine_check(machine, from, to);
	if (!v.machine_exists)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("state machine \"%s\" does not exist", machine)));

	if (is_insert)
	{
		if (to == NULL || !v.to_known || !v.initial_allowed)
			raise_invalid_transition(what, NULL, to);
	}
	else
	{
		if (from != NULL && v.from_terminal)
		{
			if (to != NULL && strcmp(from, to) == 0 && orch_tuples_identical(oldtup, newtup, td))
				return newtup;
			raise_terminal(what, from, to);
		}
		if (to == NULL || from == NULL || !v.allowed)
		{
			/* a NULL old state may take any known state */
			if (!(from == NULL && to != NULL && v.to_known))
				raise_invalid_transition(what, from, to);
		}
		if (from != NULL && strcmp(from, to) == 0)
			return newtup;
	}

	rowjson = row_key_json_text(rel, newtup, td);
	write_event_full(ORCH_DEFAULT_TENANT, 0, false, 0, false, relname,
					 from, to, is_insert ? "inserted" : "updated", ctx_actor, 0,
					 NULL, rowjson, -1);
	return newtup;
}

Datum
orch_state_machine_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Trigger    *trigger;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_state_machine_trigger: not called by trigger manager")));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_state_machine_trigger must be a BEFORE INSERT OR UPDATE row trigger")));
	trigger = trigdata->tg_trigger;
	if (trigger->tgnargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_state_machine_trigger takes two arguments: column, machine")));

	if (strcmp(trigger->tgargs[1], "task") == 0 &&
		strcmp(trigger->tgargs[0], "state") == 0 &&
		is_task_table(trigdata->tg_relation))
		return PointerGetDatum(task_trigger(trigdata));
	else
	{
		/*
		 * A user table: its writer's search_path is not ours, and the
		 * machine lookups and the event insert run SQL as the extension's
		 * owner.  The function itself pins no search_path (0.6.0: it is
		 * fired once per row, where a function-level SET costs a GUC save
		 * and restore per row); every path that runs SQL pins it here: user
		 * tables, keyed tasks (the gate), and the event insert of schemas
		 * without the flush trigger.
		 */
		int			nest = orch_pin_search_path();
		HeapTuple	result = generic_trigger(trigdata, trigger->tgargs[0], trigger->tgargs[1]);

		AtEOXact_GUC(true, nest);
		return PointerGetDatum(result);
	}
}

/* ----------------------------------------------------------------------
 * orch_create_state_machine(name text, transitions jsonb, initial text[])
 * ---------------------------------------------------------------------- */
Datum
orch_create_state_machine(PG_FUNCTION_ARGS)
{
	char	   *name;
	Jsonb	   *transitions;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *cur_from = NULL;
	int			depth = 0;
	Oid			types3[3] = {TEXTOID, TEXTOID, TEXTOID};
	Oid			types1[1] = {TEXTOID};
	Datum		vals[3];
	int			nstates = 0;

	orch_require_unrestricted("orch_create_state_machine");
	orch_require_arg(fcinfo, 0, "name");
	orch_require_arg(fcinfo, 1, "transitions");
	name = orch_text_arg(fcinfo, 0);
	transitions = PG_GETARG_JSONB_P(1);
	if (name[0] == '\0' || strlen(name) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("state machine name must have 1 to 128 characters")));
	if (!JB_ROOT_IS_OBJECT(transitions) || JB_ROOT_COUNT(transitions) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("transitions must be a non-empty JSON object"),
				 errhint("Example: {\"draft\": [\"review\"], \"review\": [\"published\", \"draft\"], \"published\": []}")));

	SPI_connect();
	vals[0] = orch_text_datum(name);
	orch_sql_once("INSERT INTO orch.state_machines (name) VALUES ($1) ON CONFLICT DO NOTHING", 1, types1, vals, NULL, false, 0, SPI_OK_INSERT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("state machine \"%s\" already exists", name)));

	it = JsonbIteratorInit(&transitions->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_OBJECT || tok == WJB_BEGIN_ARRAY)
		{
			depth++;
			if (depth > 2 || (depth == 2 && tok != WJB_BEGIN_ARRAY))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("transitions must map each state to an array of target states")));
		}
		else if (tok == WJB_END_OBJECT || tok == WJB_END_ARRAY)
			depth--;
		else if (tok == WJB_KEY)
		{
			cur_from = pnstrdup(v.val.string.val, v.val.string.len);
			if (cur_from[0] == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("state names must not be empty")));
			vals[1] = orch_text_datum(cur_from);
			vals[2] = vals[1];
			orch_sql_once("INSERT INTO orch.state_transitions (machine, from_state, to_state)"
						" VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", 3, types3, vals, NULL, false, 0, SPI_OK_INSERT);
			nstates++;
		}
		else if (tok == WJB_ELEM || tok == WJB_VALUE)
		{
			char	   *to;

			if (v.type != jbvString || v.val.string.len == 0 || depth != 2)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("transitions must map each state to an array of target state names")));
			to = pnstrdup(v.val.string.val, v.val.string.len);
			vals[1] = orch_text_datum(cur_from);
			vals[2] = orch_text_datum(to);
			orch_sql_once("INSERT INTO orch.state_transitions (machine, from_state, to_state)"
						" VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", 3, types3, vals, NULL, false, 0, SPI_OK_INSERT);
			/* every target is a state of its own, with at least its self-transition */
			vals[1] = vals[2];
			orch_sql_once("INSERT INTO orch.state_transitions (machine, from_state, to_state)"
						" VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", 3, types3, vals, NULL, false, 0, SPI_OK_INSERT);
		}
	}

	if (!PG_ARGISNULL(2))
	{
		ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(2);
		Datum	   *elems;
		bool	   *enulls;
		int			nelems;

		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &enulls, &nelems);
		for (int i = 0; i < nelems; i++)
		{
			char	   *s;

			if (enulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("initial states must not be null")));
			s = TextDatumGetCString(elems[i]);
			vals[1] = elems[i];
			orch_sql_once("SELECT 1 FROM orch.state_transitions WHERE machine = $1"
									  " AND from_state = $2", 2, types3, vals, NULL, false, 1, SPI_OK_SELECT);
			if (SPI_processed == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("initial state \"%s\" is not a state of the machine", s)));
			vals[1] = (Datum) 0;
			vals[2] = elems[i];
			orch_sql_once("INSERT INTO orch.state_transitions (machine, from_state, to_state)"
									  " VALUES ($1, NULL, $3) ON CONFLICT DO NOTHING", 3, types3, vals, " n ", false, 0, SPI_OK_INSERT);
		}
	}
	SPI_finish();
	(void) nstates;
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------------
 * orch_attach_state_machine(tbl regclass, column name, machine text)
 * Runs as the caller: CREATE TRIGGER checks that the caller owns the table.
 * ---------------------------------------------------------------------- */
Datum
orch_attach_state_machine(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *column;
	char	   *machine;
	char	   *relname;
	char	   *nspname;
	AttrNumber	attno;
	StringInfoData sql;
	char		trgname[NAMEDATALEN];
	Oid			types1[1] = {TEXTOID};
	Datum		vals[1];

	orch_require_arg(fcinfo, 0, "tbl");
	orch_require_arg(fcinfo, 1, "column");
	orch_require_arg(fcinfo, 2, "machine");
	relid = PG_GETARG_OID(0);
	column = NameStr(*PG_GETARG_NAME(1));
	machine = orch_text_arg(fcinfo, 2);

	relname = get_rel_name(relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	nspname = get_namespace_name(get_rel_namespace(relid));
	attno = get_attnum(relid, column);
	if (attno == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist", column, relname)));

	SPI_connect();
	vals[0] = orch_text_datum(machine);
	orch_sql_once("SELECT 1 FROM orch.state_machines WHERE name = $1", 1, types1, vals, NULL, true, 1, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("state machine \"%s\" does not exist", machine),
				 errhint("Create it with orch_create_state_machine.")));

	snprintf(trgname, sizeof(trgname), "orch_state_machine_%s", column);
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "CREATE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW"
					 " EXECUTE FUNCTION %s.orch_state_machine_trigger(%s, %s)",
					 quote_identifier(trgname),
					 quote_qualified_identifier(nspname, relname),
					 quote_identifier(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid))),
					 quote_literal_cstr(column), quote_literal_cstr(machine));
	orch_sql_once(sql.data, 0, NULL, NULL, NULL, false, 0, SPI_OK_UTILITY);
	SPI_finish();
	PG_RETURN_VOID();
}
