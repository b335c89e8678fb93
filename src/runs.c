/*
 * runs.c
 *	  Workflow runs (SPEC section 7): orch_start pins a published definition
 *	  version and runs its steps as ordinary tasks; step progression happens
 *	  in the transaction that finishes a step's task (the lifecycle trigger
 *	  notes the run, the statement trigger advances it), under the run's row
 *	  lock.  Joins, decisions, human approvals, waits, map fan-out, pause and
 *	  resume with a drift check, cancellation, compensation in reverse
 *	  completion order, deadlines and re-runs of failed runs.
 *
 *	  Lock order: a step task's row, then its run's row.  Calls that start
 *	  from the run (cancel, deadline) lock the run's open tasks first, then
 *	  the run; progression never waits for another task's lock (SKIP LOCKED).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_run_lifecycle);
PG_FUNCTION_INFO_V1(orch_start);
PG_FUNCTION_INFO_V1(orch_approve);
PG_FUNCTION_INFO_V1(orch_reject);
PG_FUNCTION_INFO_V1(orch_pause_run);
PG_FUNCTION_INFO_V1(orch_resume_run);
PG_FUNCTION_INFO_V1(orch_cancel_run);
PG_FUNCTION_INFO_V1(orch_retry_run);
PG_FUNCTION_INFO_V1(orch_run_status);

#define ERRCODE_ORCH_APPROVAL_INVALID	MAKE_SQLSTATE('O','R','0','0','9')
#define ERRCODE_ORCH_DRIFT_DETECTED		MAKE_SQLSTATE('O','R','0','1','0')

/* ----------------------------------------------------------------------
 * The run lifecycle (seed 001 section 3.1), enforced by a C trigger for
 * every writer, one event per accepted transition.
 * ---------------------------------------------------------------------- */
typedef enum RunState
{
	RS_RUNNING = 0,
	RS_WAITING_APPROVAL,
	RS_PAUSED,
	RS_SUCCEEDED,
	RS_FAILED,
	RS_CANCELED,
	RS_COUNT,
	RS_INVALID = -1
} RunState;

static const char *const run_state_names[RS_COUNT] = {
	"running", "waiting_approval", "paused", "succeeded", "failed", "canceled"
};

static const bool run_matrix[RS_COUNT][RS_COUNT] = {
	/* run    wait   pause  succ   fail   canc */
	{true, true, true, true, true, true},	/* running */
	{true, true, false, false, false, true},	/* waiting_approval */
	{true, false, true, false, false, true},	/* paused */
	{false, false, false, true, false, false},	/* succeeded */
	{false, false, false, false, true, false},	/* failed */
	{false, false, false, false, false, true},	/* canceled */
};

static RunState
run_state_from_name(const char *s)
{
	if (s == NULL)
		return RS_INVALID;
	for (int i = 0; i < RS_COUNT; i++)
		if (strcmp(s, run_state_names[i]) == 0)
			return (RunState) i;
	return RS_INVALID;
}

static bool
run_terminal(RunState s)
{
	return s == RS_SUCCEEDED || s == RS_FAILED || s == RS_CANCELED;
}

static char *
tuple_text(HeapTuple tup, TupleDesc td, const char *col)
{
	int			n = SPI_fnumber(td, col);

	if (n <= 0)
		elog(ERROR, "orchestrator: column \"%s\" missing from orch.runs", col);
	return SPI_getvalue(tup, td, n);
}

/* BEFORE INSERT OR UPDATE FOR EACH ROW on orch.runs */
Datum
orch_run_lifecycle(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	bool		is_insert;
	HeapTuple	oldtup,
				newtup;
	char	   *from_name = NULL;
	char	   *to_name;
	RunState	from = RS_INVALID,
				to;
	bool		isnull;
	int64		run_id;
	char	   *tenant;
	char	   *reason;
	int			cols[2];
	Datum		vals[2];
	bool		nulls[2] = {false, false};
	int			ncols = 0;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!TRIGGER_FIRED_BEFORE(td->tg_event) || TRIGGER_FIRED_BY_DELETE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_run_lifecycle must be a BEFORE INSERT OR UPDATE row trigger")));
	desc = RelationGetDescr(td->tg_relation);
	is_insert = TRIGGER_FIRED_BY_INSERT(td->tg_event);
	oldtup = is_insert ? NULL : td->tg_trigtuple;
	newtup = is_insert ? td->tg_trigtuple : td->tg_newtuple;

	/* a restore reloads rows as they were (see the task trigger) */
	if (is_insert && orch_restoring())
		return PointerGetDatum(newtup);

	run_id = DatumGetInt64(heap_getattr(newtup, SPI_fnumber(desc, "id"), desc, &isnull));
	tenant = tuple_text(newtup, desc, "tenant_id");
	to_name = tuple_text(newtup, desc, "state");
	to = run_state_from_name(to_name);
	if (is_insert)
	{
		if (to != RS_RUNNING)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
					 errmsg("invalid transition of run " INT64_FORMAT " from \"(new)\" to \"%s\"",
							run_id, to_name ? to_name : "NULL")));
	}
	else
	{
		from_name = tuple_text(oldtup, desc, "state");
		from = run_state_from_name(from_name);
		if (from == RS_INVALID)
			elog(ERROR, "orchestrator: run " INT64_FORMAT " has unknown state \"%s\"",
				 run_id, from_name);
		if (run_terminal(from) && !(to == from && orch_tuples_identical(oldtup, newtup, desc)))
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_TERMINAL_STATE),
					 errmsg("run " INT64_FORMAT " is in terminal state \"%s\" and cannot change (to \"%s\")",
							run_id, from_name, to_name ? to_name : "NULL"),
					 errdetail("Terminal states are immutable.")));
		if (to == RS_INVALID || !run_matrix[from][to])
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
					 errmsg("invalid transition of run " INT64_FORMAT " from \"%s\" to \"%s\"",
							run_id, from_name, to_name ? to_name : "NULL")));
		if (to == from && run_terminal(to))
			return PointerGetDatum(newtup);
		cols[ncols] = SPI_fnumber(desc, "updated_at");
		vals[ncols++] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		if (run_terminal(to) && to != from)
		{
			cols[ncols] = SPI_fnumber(desc, "finished_at");
			vals[ncols++] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		}
		newtup = heap_modify_tuple_by_cols(newtup, desc, ncols, cols, vals, nulls);
		if (to == from)
			return PointerGetDatum(newtup);
	}
	reason = tuple_text(newtup, desc, "reason_code");
	orch_write_run_event(tenant, run_id, "run", is_insert ? NULL : from_name, to_name,
						 reason ? reason : (is_insert ? "started" : "updated"), NULL);
	return PointerGetDatum(newtup);
}

/* ----------------------------------------------------------------------
 * Notes from the task trigger: runs whose step tasks finished in this
 * statement (per (sub)transaction level), advanced at statement end.
 * ---------------------------------------------------------------------- */
typedef struct RunNote
{
	int			level;
	int64		run_id;
	char	   *tenant;
} RunNote;

static List *run_notes = NIL;
static bool runs_flushing = false;
static bool runs_callbacks = false;

static void
runs_xact_callback(XactEvent event, void *arg)
{
	run_notes = NIL;
	runs_flushing = false;
}

static void
runs_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		foreach(lc, run_notes)
		{
			RunNote    *n = (RunNote *) lfirst(lc);

			if (n->level >= level)
				run_notes = foreach_delete_current(run_notes, lc);
		}
		runs_flushing = false;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		foreach(lc, run_notes)
		{
			RunNote    *n = (RunNote *) lfirst(lc);

			if (n->level >= level)
				n->level = level - 1;
		}
	}
}

void
orch_runs_note(int64 run_id, const char *tenant)
{
	MemoryContext old;
	RunNote    *n;
	ListCell   *lc;

	if (!runs_callbacks)
	{
		RegisterXactCallback(runs_xact_callback, NULL);
		RegisterSubXactCallback(runs_subxact_callback, NULL);
		runs_callbacks = true;
	}
	foreach(lc, run_notes)
	{
		RunNote    *e = (RunNote *) lfirst(lc);

		if (e->run_id == run_id && strcmp(e->tenant, tenant) == 0)
			return;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	n = palloc(sizeof(RunNote));
	n->level = GetCurrentTransactionNestLevel();
	n->run_id = run_id;
	n->tenant = pstrdup(tenant);
	run_notes = lappend(run_notes, n);
	MemoryContextSwitchTo(old);
}

/* Does the installed schema have workflow runs (0.4.0 and later)? */
bool
orch_has_runs(void)
{
	Oid			nsp = get_namespace_oid("orch", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("runs", nsp));
}

/* ----------------------------------------------------------------------
 * SQL helpers (caller connected to SPI)
 * ---------------------------------------------------------------------- */
static int
run_sql(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	int			rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);

	if (rc != expect)
		elog(ERROR, "orchestrator: run statement failed (%s): %s", SPI_result_code_string(rc), sql);
	return (int) SPI_processed;
}

/* Run id and tenant as the first two parameters of most statements */
#define RUN_ARGS(v, run_id, tenant) \
	do { (v)[0] = Int64GetDatum(run_id); (v)[1] = orch_text_datum(tenant); } while (0)

static Oid	rt_types[6] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID};

typedef struct RunRow
{
	int64		id;
	char	   *tenant;
	RunState	state;
	char	   *phase;
	char	   *reason;
	bool		past_deadline;
} RunRow;

/* Lock the run's row; false when it does not exist (or is another tenant's). */
static bool
lock_run(int64 run_id, const char *tenant, RunRow *r)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTARRAYOID};
	Datum		v[3];
	char		n[3] = {' ', ' ', ' '};
	bool		all_tenants;
	HeapTuple	tup;
	TupleDesc	td;
	bool		isnull;

	v[0] = Int64GetDatum(run_id);
	v[1] = tenant ? orch_text_datum(tenant) : (Datum) 0;
	if (!tenant)
		n[1] = 'n';
	v[2] = orch_caller_tenants_datum(&all_tenants);
	if (all_tenants)
		n[2] = 'n';
	if (SPI_execute_with_args("SELECT id, tenant_id, state, phase, reason_code,"
							  " coalesce(deadline_at <= now(), false)"
							  " FROM orch.runs WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)"
							  "   AND ($3::text[] IS NULL OR tenant_id = ANY ($3)) FOR UPDATE",
							  3, types, v, n, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "orchestrator: run lookup failed");
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	r->id = run_id;
	r->tenant = SPI_getvalue(tup, td, 2);
	r->state = run_state_from_name(SPI_getvalue(tup, td, 3));
	r->phase = SPI_getvalue(tup, td, 4);
	r->reason = SPI_getvalue(tup, td, 5);
	r->past_deadline = DatumGetBool(SPI_getbinval(tup, td, 6, &isnull));
	return true;
}

static void
lock_run_or_not_found(int64 run_id, RunRow *r)
{
	if (!lock_run(run_id, NULL, r))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("run " INT64_FORMAT " does not exist", run_id)));
}

/* Move the run to a state (through the trigger), with a reason. */
static void
set_run_state(RunRow *r, RunState to, const char *reason, Jsonb *output)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, JSONBOID};
	Datum		v[5];
	char		n[5] = {' ', ' ', ' ', ' ', ' '};

	if (r->state == to)
		return;
	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(run_state_names[to]);
	v[3] = reason ? orch_text_datum(reason) : (Datum) 0;
	if (!reason)
		n[3] = 'n';
	v[4] = output ? JsonbPGetDatum(output) : (Datum) 0;
	if (!output)
		n[4] = 'n';
	run_sql("UPDATE orch.runs SET state = $3, reason_code = coalesce($4, reason_code),"
			" output = coalesce($5, output)"
			" WHERE id = $1 AND tenant_id = $2", 5, types, v, n, SPI_OK_UPDATE);
	r->state = to;
	if (reason)
		r->reason = pstrdup(reason);
}

static void
step_event(RunRow *r, const char *step, const char *from, const char *to, const char *reason)
{
	orch_write_run_event(r->tenant, r->id, "run_step", from, to, reason, step);
}

/* ----------------------------------------------------------------------
 * Starting steps
 * ---------------------------------------------------------------------- */

/* The context paths and rules read: {"input": ..., "steps": {id: {"output": ...}}} */
#define RUN_CONTEXT_SQL \
	"jsonb_build_object('input', (SELECT r.input FROM orch.runs r WHERE r.id = $1 AND r.tenant_id = $2)," \
	" 'steps', coalesce((SELECT jsonb_object_agg(s.step_id, jsonb_build_object('output', s.output))" \
	"   FROM orch.run_steps s WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'succeeded'), '{}'))"

/* Enqueue one task of a step (item >= 0: one item of a map step). */
static int64
enqueue_step_task(RunRow *r, const char *step, const char *step_key, Jsonb *spec_unused,
				  int item, bool compensation)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, INT4OID};
	Datum		v[5];
	bool		isnull;
	char	   *queue;
	QueueSettings qs;

	(void) spec_unused;
	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	v[3] = orch_text_datum(step_key);
	v[4] = Int32GetDatum(item);
	/* the queue: the step's (or its compensation's), else the run policy's */
	run_sql(compensation
			? "SELECT coalesce(s.spec -> 'compensation' ->> 'queue', s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')"
			"  FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
			"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"
			: "SELECT coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')"
			"  FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
			"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3",
			3, types, v, NULL, SPI_OK_SELECT);
	queue = SPI_processed ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) : NULL;
	if (queue == NULL)
		elog(ERROR, "orchestrator: step \"%s\" of run " INT64_FORMAT " has no queue", step, r->id);
	if (!orch_load_queue(queue, &qs, NULL))
		orch_ensure_queue(queue);
	run_sql(compensation
			? "INSERT INTO orch.tasks (tenant_id, queue, state, payload, run_at, ready_at, retry_policy,"
			"  timeout, run_id, step_key, reason_code)"
			" SELECT $2, q.name, 'queued',"
			"  jsonb_build_object('run_id', $1, 'step_id', $3, 'compensation', s.spec -> 'compensation' ->> 'handler',"
			"    'input', r.input, 'output', s.output),"
			"  now(), now(), coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || coalesce(s.spec -> 'retry_policy', '{}'),"
			"  NULL, $1, $4, 'compensation_ready'"
			" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
			"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
			"  CROSS JOIN LATERAL (SELECT coalesce(s.spec -> 'compensation' ->> 'queue', s.spec ->> 'queue',"
			"       d.spec -> 'policies' ->> 'queue') AS name) q"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND $5 >= -1"
			" RETURNING id"
			: "INSERT INTO orch.tasks (tenant_id, queue, state, payload, run_at, ready_at, retry_policy,"
			"  timeout, run_id, step_key, reason_code, priority)"
			" SELECT $2, q.name, 'queued',"
			"  jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3, 'handler', s.spec ->> 'handler',"
			"    'input', r.input,"
			"    'deps', (SELECT coalesce(jsonb_object_agg(x.step_id, x.output), '{}') FROM orch.run_steps x"
			"             WHERE x.run_id = $1 AND x.tenant_id = $2 AND x.step_id = ANY (s.deps)),"
			"    'item', CASE WHEN $5 >= 0 THEN s.items -> $5 END,"
			"    'index', CASE WHEN $5 >= 0 THEN $5 END)),"
			"  now(), now(),"
			"  coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || coalesce(s.spec -> 'retry_policy', '{}')"
			"   || jsonb_strip_nulls(jsonb_build_object('retry_safety',"
			"        coalesce(s.spec ->> 'retry_safety', d.spec -> 'policies' ->> 'retry_safety'))),"
			"  CASE WHEN s.spec ? 'timeout' THEN (CASE jsonb_typeof(s.spec -> 'timeout')"
			"       WHEN 'number' THEN make_interval(secs => (s.spec ->> 'timeout')::float8)"
			"       ELSE (s.spec ->> 'timeout')::interval END) END,"
			"  $1, $4, 'step_ready', coalesce((q.settings ->> 'priority')::int, 0)"
			" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
			"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
			"  CROSS JOIN LATERAL (SELECT qq.name, qq.settings FROM orch.queues qq"
			"       WHERE qq.name = coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')) q"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"
			" RETURNING id",
			5, types, v, NULL, SPI_OK_INSERT_RETURNING);
	if (SPI_processed != 1)
		elog(ERROR, "orchestrator: step task insert failed");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

static void handle_step_failure(RunRow *r, const char *step, const char *state,
								const char *error, bool compensation_required);

/* {"k1": "v1"} or {"k1": "v1", "k2": <raw JSON v2>} */
static Jsonb *
json_object1(const char *k1, const char *v1, const char *k2, const char *raw2)
{
	StringInfoData b;

	initStringInfo(&b);
	appendStringInfoChar(&b, '{');
	escape_json(&b, k1);
	appendStringInfoString(&b, ": ");
	escape_json(&b, v1);
	if (k2)
	{
		appendStringInfoString(&b, ", ");
		escape_json(&b, k2);
		appendStringInfo(&b, ": %s", raw2);
	}
	appendStringInfoChar(&b, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(b.data)));
}

/* Mark the targets of a finished step's edge for the given outcome. */
static void
take_edges(RunRow *r, const char *step, const char *outcome)
{
	Datum		v[3];

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	/* outcome is one of on_success / on_failure / on_timeout (a literal) */
	run_sql(psprintf("UPDATE orch.run_steps t SET edge_taken = true"
					 " FROM orch.run_steps s"
					 " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"
					 "   AND t.run_id = $1 AND t.tenant_id = $2"
					 "   AND t.step_id IN (SELECT jsonb_array_elements_text(CASE jsonb_typeof(s.spec -> '%s')"
					 "        WHEN 'array' THEN s.spec -> '%s' WHEN 'string' THEN jsonb_build_array(s.spec -> '%s')"
					 "        ELSE '[]' END))",
					 outcome, outcome, outcome),
			3, rt_types, v, NULL, SPI_OK_UPDATE);
}

/* Does the step have an edge for this outcome? */
static bool
has_edge(RunRow *r, const char *step, const char *outcome)
{
	Datum		v[3];
	bool		isnull;

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	run_sql(psprintf("SELECT jsonb_typeof(spec -> '%s') IN ('string', 'array') FROM orch.run_steps"
					 " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", outcome),
			3, rt_types, v, NULL, SPI_OK_SELECT);
	return SPI_processed == 1 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
		!isnull;
}

/* A step succeeded with an output: record, take its on_success edges. */
static void
step_succeeded(RunRow *r, const char *step, const char *from, Jsonb *output, const char *chosen)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, JSONBOID, TEXTOID};
	Datum		v[5];
	char		n[5] = {' ', ' ', ' ', ' ', ' '};

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	v[3] = output ? JsonbPGetDatum(output) : (Datum) 0;
	if (!output)
		n[3] = 'n';
	v[4] = chosen ? orch_text_datum(chosen) : (Datum) 0;
	if (!chosen)
		n[4] = 'n';
	run_sql("UPDATE orch.run_steps SET state = 'succeeded', output = $4, finished_at = clock_timestamp(),"
			" done_seq = nextval('orch.run_steps_done_seq'),"
			" comp_state = CASE WHEN spec ? 'compensation' THEN 'armed' END"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
			5, types, v, n, SPI_OK_UPDATE);
	step_event(r, step, from, "succeeded", "step_succeeded");
	if (chosen)
	{
		/* a decision activates exactly the target it chose */
		run_sql("UPDATE orch.run_steps SET edge_taken = true"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $5",
				5, types, v, n, SPI_OK_UPDATE);
	}
	else
		take_edges(r, step, "on_success");
}

/* Evaluate a decision's rules (and default) on the run context. */
static char *
decide_by_rules(RunRow *r, const char *step)
{
	Datum		v[3];

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	run_sql("WITH s AS (SELECT spec FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3),"
			" c AS (SELECT " RUN_CONTEXT_SQL " AS ctx)"
			" SELECT coalesce((SELECT x.rule ->> 'then'"
			"   FROM s, c, jsonb_array_elements(coalesce(s.spec -> 'rules', '[]')) WITH ORDINALITY AS x(rule, n),"
			"   LATERAL (SELECT jsonb_path_query_first(c.ctx, (x.rule -> 'when' ->> 'path')::jsonpath) AS val) q"
			"  WHERE CASE x.rule -> 'when' ->> 'op'"
			"    WHEN 'exists' THEN q.val IS NOT NULL"
			"    WHEN 'eq' THEN q.val = x.rule -> 'when' -> 'value'"
			"    WHEN 'ne' THEN q.val IS DISTINCT FROM x.rule -> 'when' -> 'value'"
			"    WHEN 'gt' THEN q.val > x.rule -> 'when' -> 'value'"
			"    WHEN 'ge' THEN q.val >= x.rule -> 'when' -> 'value'"
			"    WHEN 'lt' THEN q.val < x.rule -> 'when' -> 'value'"
			"    WHEN 'le' THEN q.val <= x.rule -> 'when' -> 'value'"
			"    WHEN 'in' THEN q.val IS NOT NULL AND x.rule -> 'when' -> 'value' @> jsonb_build_array(q.val)"
			"    ELSE false END"
			"  ORDER BY x.n LIMIT 1), (SELECT s.spec ->> 'default' FROM s))",
			3, rt_types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return NULL;
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* Hand a ready step to its executor (a task, a rule, a human, a timer). */
static void
start_step(RunRow *r, const char *step, const char *type)
{
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, INT8OID};
	Datum		v[4];
	bool		isnull;

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	if (strcmp(type, "human_approval") == 0)
	{
		run_sql("UPDATE orch.run_steps SET state = 'awaiting_approval', started_at = clock_timestamp(),"
				" wake_at = CASE WHEN spec ? 'timeout' THEN clock_timestamp() + (CASE jsonb_typeof(spec -> 'timeout')"
				"       WHEN 'number' THEN make_interval(secs => (spec ->> 'timeout')::float8)"
				"       ELSE (spec ->> 'timeout')::interval END) END"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				3, types, v, NULL, SPI_OK_UPDATE);
		step_event(r, step, "ready", "awaiting_approval", "approval_requested");
		return;
	}
	if (strcmp(type, "wait") == 0)
	{
		run_sql("WITH c AS (SELECT " RUN_CONTEXT_SQL " AS ctx)"
				" UPDATE orch.run_steps SET state = 'waiting', started_at = clock_timestamp(),"
				" wake_at = CASE WHEN spec ? 'duration' THEN clock_timestamp() + (CASE jsonb_typeof(spec -> 'duration')"
				"       WHEN 'number' THEN make_interval(secs => (spec ->> 'duration')::float8)"
				"       ELSE (spec ->> 'duration')::interval END)"
				"   ELSE ((SELECT jsonb_path_query_first(c.ctx, (spec ->> 'until_path')::jsonpath) FROM c) #>> '{}')::timestamptz END"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				3, types, v, NULL, SPI_OK_UPDATE);
		step_event(r, step, "ready", "waiting", "wait_started");
		return;
	}
	if (strcmp(type, "decision") == 0)
	{
		run_sql("SELECT spec ? 'handler' FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				3, types, v, NULL, SPI_OK_SELECT);
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		{
			char	   *chosen = decide_by_rules(r, step);

			run_sql("UPDATE orch.run_steps SET state = 'running', started_at = clock_timestamp()"
					" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
					3, types, v, NULL, SPI_OK_UPDATE);
			if (chosen == NULL)
				handle_step_failure(r, step, "failed", "no rule matched and the decision has no default", false);
			else
				step_succeeded(r, step, "running", json_object1("next", chosen, NULL, NULL), chosen);
			return;
		}
		/* a decision with a handler: its task's result names the target */
	}

	/* a map step fans out over an array: one task per item, results joined in order */
	run_sql("WITH c AS (SELECT " RUN_CONTEXT_SQL " AS ctx)"
			" UPDATE orch.run_steps s SET items = (SELECT jsonb_path_query_first(c.ctx, (s.spec -> 'map' ->> 'over')::jsonpath) FROM c)"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND s.spec ? 'map'"
			" RETURNING jsonb_typeof(s.items), jsonb_array_length(CASE jsonb_typeof(s.items) WHEN 'array' THEN s.items ELSE '[]' END)",
			3, types, v, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 1)
	{
		char	   *kind = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		int			n = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));

		run_sql("UPDATE orch.run_steps SET state = 'running', started_at = clock_timestamp()"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				3, types, v, NULL, SPI_OK_UPDATE);
		step_event(r, step, "ready", "running", "step_started");
		if (kind == NULL || strcmp(kind, "array") != 0)
		{
			handle_step_failure(r, step, "failed", "the map's \"over\" path is not an array", false);
			return;
		}
		if (n == 0)
		{
			step_succeeded(r, step, "running",
						   DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("[]"))), NULL);
			return;
		}
		for (int i = 0; i < n; i++)
			enqueue_step_task(r, step, psprintf("%s#%d", step, i), NULL, i, false);
		return;
	}
	v[3] = Int64GetDatum(enqueue_step_task(r, step, step, NULL, -1, false));
	run_sql("UPDATE orch.run_steps SET state = 'running', started_at = clock_timestamp(), task_id = $4"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
			4, types, v, NULL, SPI_OK_UPDATE);
	step_event(r, step, "ready", "running", "step_started");
}

/* ----------------------------------------------------------------------
 * Failing, compensating, finishing
 * ---------------------------------------------------------------------- */

/* Cancel the run's open forward step tasks, never waiting for a locked one. */
static void
cancel_open_step_tasks(RunRow *r, const char *reason)
{
	Oid			types[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		v[3];

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(reason);
	orch_set_event_context(NULL, reason);
	run_sql("UPDATE orch.tasks t SET state = 'cancelled', reason_code = $3"
			" WHERE t.id = ANY (ARRAY(SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
			"   AND state NOT IN ('completed', 'failed', 'cancelled') AND step_key NOT LIKE '%:compensate'"
			"   ORDER BY id FOR UPDATE SKIP LOCKED))",
			3, types, v, NULL, SPI_OK_UPDATE);
	orch_clear_event_context();
}

static void advance_compensation(RunRow *r);

/*
 * The run fails (a step failed with nothing to handle it, a deadline, a
 * rejection): open steps stop; steps that succeeded with a compensation
 * handler are compensated in reverse completion order (the run stays
 * running, phase compensating, until they are done); then it is failed.
 */
static void
fail_run(RunRow *r, const char *reason, const char *step, const char *error)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		v[5];
	char		n[5] = {' ', ' ', ' ', ' ', ' '};

	if (run_terminal(r->state) || strcmp(r->phase, "compensating") == 0)
		return;
	cancel_open_step_tasks(r, reason);
	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(reason);
	v[3] = step ? orch_text_datum(step) : (Datum) 0;
	if (!step)
		n[3] = 'n';
	v[4] = error ? orch_text_datum(error) : (Datum) 0;
	if (!error)
		n[4] = 'n';
	run_sql("UPDATE orch.run_steps SET state = CASE WHEN state IN ('pending', 'ready') THEN 'skipped'"
			"   ELSE 'canceled' END, finished_at = clock_timestamp()"
			" WHERE run_id = $1 AND tenant_id = $2"
			"   AND state IN ('pending', 'ready', 'running', 'awaiting_approval', 'waiting')",
			2, types, v, n, SPI_OK_UPDATE);
	run_sql("UPDATE orch.run_steps SET comp_state = 'pending'"
			" WHERE run_id = $1 AND tenant_id = $2 AND state = 'succeeded' AND comp_state = 'armed'",
			2, types, v, n, SPI_OK_UPDATE);
	if (SPI_processed > 0)
	{
		/* running (from waiting or paused) while compensations run */
		if (r->state != RS_RUNNING)
			set_run_state(r, RS_RUNNING, reason, NULL);
		run_sql("UPDATE orch.runs SET phase = 'compensating', reason_code = $3,"
				" failed_step = $4, error = $5 WHERE id = $1 AND tenant_id = $2",
				5, types, v, n, SPI_OK_UPDATE);
		r->phase = "compensating";
		r->reason = pstrdup(reason);
		orch_write_run_event(r->tenant, r->id, "run", "running", "running", "compensation_started", reason);
		advance_compensation(r);
		return;
	}
	run_sql("UPDATE orch.runs SET failed_step = $4, error = $5 WHERE id = $1 AND tenant_id = $2",
			5, types, v, n, SPI_OK_UPDATE);
	if (r->state == RS_PAUSED || r->state == RS_WAITING_APPROVAL)
		set_run_state(r, RS_RUNNING, reason, NULL);
	set_run_state(r, RS_FAILED, reason, NULL);
}

/* One compensation at a time, latest completed step first. */
static void
advance_compensation(RunRow *r)
{
	Datum		v[4];
	Oid			types[4] = {INT8OID, TEXTOID, TEXTOID, INT8OID};
	char	   *step;
	char	   *mode;

	RUN_ARGS(v, r->id, r->tenant);
	run_sql("SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			" AND comp_state IN ('running', 'awaiting_approval')",
			2, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		return;
	run_sql("SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND comp_state = 'failed'",
			2, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		/* a compensation failed for good: manual review */
		set_run_state(r, RS_FAILED, "compensation_failed", NULL);
		return;
	}
	run_sql("SELECT step_id, coalesce(spec -> 'compensation' ->> 'mode', 'auto') FROM orch.run_steps"
			" WHERE run_id = $1 AND tenant_id = $2 AND comp_state = 'pending'"
			" ORDER BY done_seq DESC LIMIT 1",
			2, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		set_run_state(r, RS_FAILED, r->reason, NULL);
		return;
	}
	step = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	mode = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	v[2] = orch_text_datum(step);
	if (strcmp(mode, "approval") == 0)
	{
		run_sql("UPDATE orch.run_steps SET comp_state = 'awaiting_approval'"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				3, types, v, NULL, SPI_OK_UPDATE);
		step_event(r, step, "succeeded", "succeeded", "compensation_approval_requested");
		set_run_state(r, RS_WAITING_APPROVAL, NULL, NULL);
		return;
	}
	v[3] = Int64GetDatum(enqueue_step_task(r, step, psprintf("%s:compensate", step), NULL, -1, true));
	run_sql("UPDATE orch.run_steps SET comp_state = 'running', comp_task_id = $4"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
			4, types, v, NULL, SPI_OK_UPDATE);
	step_event(r, step, "succeeded", "succeeded", "compensation_started");
}

/*
 * A step failed (or timed out) for good.  COMPENSATION_REQUIRED fails the
 * run at once; otherwise an on_timeout / on_failure edge, or a dependant
 * joining with all_finished / any, handles it; else the run fails.
 */
static void
handle_step_failure(RunRow *r, const char *step, const char *state, const char *error,
					bool compensation_required)
{
	Oid			types[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		v[5];
	char		n[5] = {' ', ' ', ' ', ' ', ' '};
	bool		handled = false;
	bool		isnull;

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	v[3] = orch_text_datum(state);
	v[4] = error ? orch_text_datum(error) : (Datum) 0;
	if (!error)
		n[4] = 'n';
	run_sql("UPDATE orch.run_steps SET state = $4, error = $5, finished_at = clock_timestamp()"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
			5, types, v, n, SPI_OK_UPDATE);
	step_event(r, step, "running", state, strcmp(state, "timed_out") == 0 ? "step_timed_out" : "step_failed");
	if (compensation_required)
	{
		fail_run(r, "compensation_required", step, error);
		return;
	}
	if (strcmp(state, "timed_out") == 0 && has_edge(r, step, "on_timeout"))
	{
		take_edges(r, step, "on_timeout");
		handled = true;
	}
	else if (has_edge(r, step, "on_failure"))
	{
		take_edges(r, step, "on_failure");
		handled = true;
	}
	else
	{
		run_sql("SELECT EXISTS (SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
				" AND $3 = ANY (deps) AND join_policy IN ('all_finished', 'any'))",
				3, types, v, NULL, SPI_OK_SELECT);
		handled = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (!handled)
		fail_run(r, strcmp(state, "timed_out") == 0 ? "step_timed_out" : "step_failed", step, error);
}

/* ----------------------------------------------------------------------
 * Progression
 * ---------------------------------------------------------------------- */
#define TERMINAL_STEP "('succeeded', 'failed', 'timed_out', 'skipped', 'canceled')"

/* A pending step that can run now */
#define CAN_RUN \
	"(NOT s.needs_edge OR s.edge_taken) AND CASE s.join_policy" \
	"  WHEN 'all_finished' THEN NOT EXISTS (SELECT 1 FROM unnest(s.deps) d(id) LEFT JOIN orch.run_steps x" \
	"     ON x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND x.step_id = d.id" \
	"     WHERE x.state IS NULL OR x.state NOT IN " TERMINAL_STEP ")" \
	"  WHEN 'any' THEN cardinality(s.deps) = 0 OR EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND x.step_id = ANY (s.deps) AND x.state = 'succeeded')" \
	"  ELSE NOT EXISTS (SELECT 1 FROM unnest(s.deps) d(id) LEFT JOIN orch.run_steps x" \
	"     ON x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND x.step_id = d.id" \
	"     WHERE x.state IS DISTINCT FROM 'succeeded') END"

/* A pending step that never will: its edge was not taken, or its join cannot hold */
#define CANNOT_RUN \
	"(s.needs_edge AND NOT s.edge_taken AND NOT EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND s.step_id = ANY (x.out_edges)" \
	"       AND x.state NOT IN " TERMINAL_STEP "))" \
	" OR CASE s.join_policy" \
	"  WHEN 'all_finished' THEN false" \
	"  WHEN 'any' THEN cardinality(s.deps) > 0 AND NOT EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND x.step_id = ANY (s.deps)" \
	"       AND x.state NOT IN ('failed', 'timed_out', 'skipped', 'canceled'))" \
	"  ELSE EXISTS (SELECT 1 FROM orch.run_steps x WHERE x.run_id = s.run_id AND x.tenant_id = s.tenant_id" \
	"     AND x.step_id = ANY (s.deps) AND x.state IN ('failed', 'timed_out', 'skipped', 'canceled')) END"

/* The run's open work is done: it succeeds (or, compensating, moves on). */
static void
maybe_finish(RunRow *r)
{
	Datum		v[2];
	bool		isnull;
	Jsonb	   *out;

	if (run_terminal(r->state) || strcmp(r->phase, "compensating") == 0)
		return;
	RUN_ARGS(v, r->id, r->tenant);
	run_sql("SELECT count(*) FILTER (WHERE state NOT IN " TERMINAL_STEP "),"
			" count(*) FILTER (WHERE state = 'awaiting_approval'),"
			" coalesce(jsonb_object_agg(step_id, output) FILTER (WHERE state = 'succeeded'), '{}')"
			" FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2",
			2, rt_types, v, NULL, SPI_OK_SELECT);
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) == 0)
	{
		out = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		if (r->state != RS_RUNNING)
			set_run_state(r, RS_RUNNING, NULL, NULL);
		set_run_state(r, RS_SUCCEEDED, "completed", out);
		return;
	}
	/* waiting for a human while nothing else moves, or back to running */
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)) > 0)
	{
		if (r->state == RS_RUNNING)
			set_run_state(r, RS_WAITING_APPROVAL, NULL, NULL);
	}
	else if (r->state == RS_WAITING_APPROVAL)
		set_run_state(r, RS_RUNNING, NULL, NULL);
}

/* Settle steps whose tasks, timers or approvals have finished. */
static void
collect_outcomes(RunRow *r)
{
	Datum		v[3];
	int			nrows;
	char	  **steps;
	char	  **states;
	char	  **errors;
	char	  **classes;
	Jsonb	  **outputs;
	bool		isnull;

	RUN_ARGS(v, r->id, r->tenant);
	/* running task steps: all tasks completed, or one failed / cancelled */
	run_sql("SELECT s.step_id, CASE"
			"   WHEN bool_or(t.state IN ('failed', 'cancelled')) THEN"
			"     CASE WHEN bool_or(t.state = 'failed' AND EXISTS (SELECT 1 FROM orch.attempts a"
			"         WHERE a.task_id = t.id AND a.outcome = 'timed_out' AND a.attempt = t.attempts)) THEN 'timed_out'"
			"     ELSE 'failed' END"
			"   WHEN count(*) = count(*) FILTER (WHERE t.state = 'completed')"
			"        AND count(*) = coalesce(jsonb_array_length(CASE jsonb_typeof(s.items) WHEN 'array' THEN s.items END), 1)"
			"     THEN 'succeeded' END,"
			" CASE WHEN s.spec ? 'map' THEN jsonb_agg(t.result ORDER BY nullif(split_part(t.step_key, '#', 2), '')::int)"
			"      ELSE (array_agg(t.result))[1] END,"
			" string_agg(DISTINCT coalesce(t.last_error, CASE WHEN t.state = 'cancelled' THEN 'cancelled' END), '; '),"
			" string_agg(DISTINCT t.last_error_class, ',')"
			" FROM orch.run_steps s JOIN orch.tasks t ON t.run_id = s.run_id AND t.tenant_id = s.tenant_id"
			"   AND (t.step_key = s.step_id OR left(t.step_key, length(s.step_id) + 1) = s.step_id || '#')"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'running'"
			" GROUP BY s.step_id, s.spec, s.items, s.ord ORDER BY s.ord",
			2, rt_types, v, NULL, SPI_OK_SELECT);
	nrows = (int) SPI_processed;
	steps = palloc(sizeof(char *) * (nrows + 1));
	states = palloc(sizeof(char *) * (nrows + 1));
	errors = palloc(sizeof(char *) * (nrows + 1));
	classes = palloc(sizeof(char *) * (nrows + 1));
	outputs = palloc(sizeof(Jsonb *) * (nrows + 1));
	for (int i = 0; i < nrows; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		Datum		d;

		steps[i] = SPI_getvalue(tup, td, 1);
		states[i] = SPI_getvalue(tup, td, 2);
		d = SPI_getbinval(tup, td, 3, &isnull);
		outputs[i] = isnull ? NULL : DatumGetJsonbPCopy(d);
		errors[i] = SPI_getvalue(tup, td, 4);
		classes[i] = SPI_getvalue(tup, td, 5);
	}
	for (int i = 0; i < nrows; i++)
	{
		if (states[i] == NULL)
			continue;			/* still running */
		if (run_terminal(r->state))
			break;
		if (strcmp(states[i], "succeeded") == 0)
		{
			char	   *chosen = NULL;

			/* a decision with a handler: its result names one declared target */
			v[2] = orch_text_datum(steps[i]);
			run_sql("SELECT type = 'decision', spec -> 'targets' FROM orch.run_steps"
					" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
					3, rt_types, v, NULL, SPI_OK_SELECT);
			if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			{
				Oid			ctypes[5] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, JSONBOID};
				Datum		cv[5];
				char		cn[5] = {' ', ' ', ' ', ' ', ' '};

				cv[0] = v[0];
				cv[1] = v[1];
				cv[2] = v[2];
				cv[3] = (Datum) 0;
				cn[3] = 'n';
				cv[4] = outputs[i] ? JsonbPGetDatum(outputs[i]) : (Datum) 0;
				if (!outputs[i])
					cn[4] = 'n';
				run_sql("SELECT $5 ->> 'next' FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
						" AND step_id = $3 AND jsonb_typeof($5 -> 'next') = 'string'"
						" AND spec -> 'targets' @> jsonb_build_array($5 -> 'next')",
						5, ctypes, cv, cn, SPI_OK_SELECT);
				if (SPI_processed == 0)
				{
					handle_step_failure(r, steps[i], "failed",
										"the decision's result does not name one of its declared targets (\"next\")",
										false);
					continue;
				}
				chosen = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			}
			step_succeeded(r, steps[i], "running", outputs[i], chosen);
		}
		else
		{
			/* one item failed: the others of a map step stop */
			v[2] = orch_text_datum(psprintf("%s#", steps[i]));
			orch_set_event_context(NULL, "map_item_failed");
			run_sql("UPDATE orch.tasks t SET state = 'cancelled', reason_code = 'map_item_failed'"
					" WHERE t.id = ANY (ARRAY(SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
					"   AND left(step_key, length($3)) = $3 AND state NOT IN ('completed', 'failed', 'cancelled')"
					"   ORDER BY id FOR UPDATE SKIP LOCKED))",
					3, rt_types, v, NULL, SPI_OK_UPDATE);
			orch_clear_event_context();
			handle_step_failure(r, steps[i], states[i], errors[i],
								classes[i] != NULL && strstr(classes[i], "COMPENSATION_REQUIRED") != NULL);
		}
	}

	/* timers and approval expiries that are due */
	run_sql("SELECT step_id, state FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			" AND state IN ('waiting', 'awaiting_approval') AND wake_at <= clock_timestamp() ORDER BY ord",
			2, rt_types, v, NULL, SPI_OK_SELECT);
	nrows = (int) SPI_processed;
	for (int i = 0; i < nrows; i++)
	{
		steps[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		states[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	for (int i = 0; i < nrows && !run_terminal(r->state); i++)
	{
		if (strcmp(states[i], "waiting") == 0)
			step_succeeded(r, steps[i], "waiting", NULL, NULL);
		else
			handle_step_failure(r, steps[i], "timed_out", "the approval expired", false);
	}

	/* compensation tasks */
	if (strcmp(r->phase, "compensating") == 0 && !run_terminal(r->state))
	{
		run_sql("UPDATE orch.run_steps s SET comp_state = CASE t.state WHEN 'completed' THEN 'done' ELSE 'failed' END"
				" FROM orch.tasks t WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.comp_state = 'running'"
				"   AND t.id = s.comp_task_id AND t.tenant_id = s.tenant_id"
				"   AND t.state IN ('completed', 'failed', 'cancelled')"
				" RETURNING s.step_id, s.comp_state",
				2, rt_types, v, NULL, SPI_OK_UPDATE_RETURNING);
		nrows = (int) SPI_processed;
		for (int i = 0; i < nrows; i++)
		{
			steps[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
			states[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		}
		for (int i = 0; i < nrows; i++)
			step_event(r, steps[i], "succeeded", "succeeded",
					   strcmp(states[i], "done") == 0 ? "compensated" : "compensation_failed");
		advance_compensation(r);
	}
}

/* Move pending steps to ready or skipped, start ready ones, finish. */
static void
advance(RunRow *r)
{
	Datum		v[2];

	RUN_ARGS(v, r->id, r->tenant);
	for (int round = 0; round < 10000; round++)
	{
		int			changed = 0;
		int			nready;
		char	  **steps;
		char	  **types;

		if (run_terminal(r->state) || strcmp(r->phase, "compensating") == 0)
			return;
		changed += run_sql("UPDATE orch.run_steps s SET state = 'skipped', finished_at = clock_timestamp()"
						   " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'pending' AND (" CANNOT_RUN ")",
						   2, rt_types, v, NULL, SPI_OK_UPDATE);
		changed += run_sql("UPDATE orch.run_steps s SET state = 'ready'"
						   " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'pending' AND (" CAN_RUN ")",
						   2, rt_types, v, NULL, SPI_OK_UPDATE);
		if (r->state != RS_PAUSED)
		{
			run_sql("SELECT step_id, type FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
					" AND state = 'ready' ORDER BY ord",
					2, rt_types, v, NULL, SPI_OK_SELECT);
			nready = (int) SPI_processed;
			steps = palloc(sizeof(char *) * (nready + 1));
			types = palloc(sizeof(char *) * (nready + 1));
			for (int i = 0; i < nready; i++)
			{
				steps[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
				types[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
			}
			for (int i = 0; i < nready && !run_terminal(r->state) &&
				 strcmp(r->phase, "compensating") != 0; i++)
			{
				start_step(r, steps[i], types[i]);
				changed++;
			}
		}
		if (changed == 0)
			break;
	}
	maybe_finish(r);
}

/* Everything a run needs after one of its tasks, timers or approvals moved. */
static void
progress(RunRow *r)
{
	if (run_terminal(r->state))
		return;
	if (r->past_deadline && strcmp(r->phase, "compensating") != 0)
	{
		fail_run(r, "deadline_exceeded", NULL, "the run's deadline passed");
		return;
	}
	collect_outcomes(r);
	advance(r);
}

/* At statement end (orch_gate_trigger): progress the noted runs. */
void
orch_runs_flush(void)
{
	if (runs_flushing || run_notes == NIL)
		return;
	runs_flushing = true;
	PG_TRY();
	{
		while (run_notes != NIL)
		{
			RunNote    *n = (RunNote *) linitial(run_notes);
			int64		run_id = n->run_id;
			char	   *tenant = pstrdup(n->tenant);
			RunRow		r;

			run_notes = list_delete_first(run_notes);
			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "orchestrator: SPI_connect failed");
			if (lock_run(run_id, tenant, &r))
				progress(&r);
			SPI_finish();
		}
	}
	PG_FINALLY();
	{
		runs_flushing = false;
	}
	PG_END_TRY();
}

/*
 * orch_maintain's part: deadlines, due timers and approval expiries, and
 * step tasks left open in finished runs.  Returns the number of runs moved.
 */
int
orch_runs_maintain(int limit)
{
	Oid			types[1] = {INT4OID};
	Datum		v[1];
	int			n;
	int64	   *ids;
	char	  **tenants;
	int			moved = 0;
	bool		isnull;

	if (!orch_has_runs())
		return 0;
	v[0] = Int32GetDatum(limit);
	run_sql("SELECT r.id, r.tenant_id FROM orch.runs r"
			" WHERE r.state IN ('running', 'waiting_approval', 'paused')"
			"   AND ((r.deadline_at <= now() AND r.phase = 'forward')"
			"     OR EXISTS (SELECT 1 FROM orch.run_steps s WHERE s.run_id = r.id AND s.tenant_id = r.tenant_id"
			"        AND s.state IN ('waiting', 'awaiting_approval') AND s.wake_at <= clock_timestamp()))"
			" ORDER BY r.id LIMIT $1",
			1, types, v, NULL, SPI_OK_SELECT);
	n = (int) SPI_processed;
	ids = palloc(sizeof(int64) * (n + 1));
	tenants = palloc(sizeof(char *) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		tenants[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	for (int i = 0; i < n; i++)
	{
		Datum		lv[2];
		RunRow		r;

		/* the run's open tasks first, then the run (the lock order) */
		RUN_ARGS(lv, ids[i], tenants[i]);
		run_sql("SELECT 1 FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
				" AND state NOT IN ('completed', 'failed', 'cancelled') ORDER BY id FOR UPDATE",
				2, rt_types, lv, NULL, SPI_OK_SELECT);
		if (!lock_run(ids[i], tenants[i], &r))
			continue;
		orch_set_event_context("orchestrator", NULL);
		progress(&r);
		orch_clear_event_context();
		moved++;
	}
	/* step tasks still open in finished runs (a claim raced the run's end) */
	orch_set_event_context("orchestrator", "run_finished");
	run_sql("UPDATE orch.tasks t SET state = 'cancelled', reason_code = 'run_finished'"
			" WHERE t.id = ANY (ARRAY(SELECT t2.id FROM orch.tasks t2 JOIN orch.runs r"
			"     ON r.id = t2.run_id AND r.tenant_id = t2.tenant_id"
			"   WHERE t2.run_id IS NOT NULL AND t2.state NOT IN ('completed', 'failed', 'cancelled')"
			"     AND (r.state IN ('succeeded', 'failed', 'canceled')"
			"       OR (r.phase = 'compensating' AND t2.step_key NOT LIKE '%:compensate'))"
			"   ORDER BY t2.id LIMIT $1 FOR UPDATE OF t2 SKIP LOCKED))",
			1, types, v, NULL, SPI_OK_UPDATE);
	orch_clear_event_context();
	return moved + (int) SPI_processed;
}

/* ----------------------------------------------------------------------
 * orch_start(name, input, version, idempotency_key, tenant, pins) -> run id
 * ---------------------------------------------------------------------- */
static void
check_input(Jsonb *schema_holder_unused, Datum spec, Datum input)
{
	Oid			types[2] = {JSONBOID, JSONBOID};
	Datum		v[2];

	(void) schema_holder_unused;
	v[0] = spec;
	v[1] = input;
	run_sql("SELECT CASE"
			"  WHEN NOT ($1 ? 'input_schema') THEN NULL"
			"  WHEN jsonb_typeof($2) <> 'object' THEN '$.input must be a JSON object'"
			"  ELSE coalesce("
			"   (SELECT format('$.input.%s is required', k)"
			"      FROM jsonb_array_elements_text(coalesce($1 -> 'input_schema' -> 'required', '[]')) k"
			"     WHERE NOT ($2 ? k) LIMIT 1),"
			"   (SELECT format('$.input.%s must be of type %s (it is %s)', p.key, p.value ->> 'type',"
			"           jsonb_typeof($2 -> p.key))"
			"      FROM jsonb_each(coalesce($1 -> 'input_schema' -> 'properties', '{}')) p"
			"     WHERE $2 ? p.key AND p.value ? 'type' AND NOT CASE p.value ->> 'type'"
			"       WHEN 'integer' THEN jsonb_typeof($2 -> p.key) = 'number'"
			"            AND ($2 ->> p.key)::numeric = trunc(($2 ->> p.key)::numeric)"
			"       ELSE jsonb_typeof($2 -> p.key) = p.value ->> 'type' END"
			"     ORDER BY p.key LIMIT 1)) END",
			2, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		char	   *problem = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (problem != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("input does not match the workflow's input_schema"),
					 errdetail("At %s.", problem)));
	}
}

/* Create the run's steps from its definition and start what can start. */
static void
create_steps(RunRow *r)
{
	Datum		v[2];

	RUN_ARGS(v, r->id, r->tenant);
	run_sql("WITH d AS (SELECT d.spec FROM orch.runs r JOIN orch.definitions d"
			"   ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
			"   WHERE r.id = $1 AND r.tenant_id = $2),"
			" st AS (SELECT x.step, x.n FROM d, jsonb_array_elements(d.spec -> 'steps') WITH ORDINALITY AS x(step, n)),"
			" e AS (SELECT st.step ->> 'step_id' AS src, t.target"
			"   FROM st, LATERAL (SELECT jsonb_array_elements_text(CASE jsonb_typeof(st.step -> k)"
			"        WHEN 'array' THEN st.step -> k WHEN 'string' THEN jsonb_build_array(st.step -> k) ELSE '[]' END)"
			"        FROM unnest(ARRAY['on_success', 'on_failure', 'on_timeout', 'targets']) k) t(target))"
			" INSERT INTO orch.run_steps (run_id, tenant_id, step_id, ord, type, spec, deps, join_policy,"
			"   needs_edge, out_edges)"
			" SELECT $1, $2, st.step ->> 'step_id', st.n, coalesce(st.step ->> 'type', 'task'), st.step,"
			"   coalesce(ARRAY(SELECT jsonb_array_elements_text(st.step -> 'depends_on')), '{}'),"
			"   coalesce(st.step ->> 'join', 'all_succeeded'),"
			"   EXISTS (SELECT 1 FROM e WHERE e.target = st.step ->> 'step_id'),"
			"   coalesce(ARRAY(SELECT e.target FROM e WHERE e.src = st.step ->> 'step_id'), '{}')"
			" FROM st",
			2, rt_types, v, NULL, SPI_OK_INSERT);
}

static SPIPlanPtr start_find_plan = NULL;

Datum
orch_start(PG_FUNCTION_ARGS)
{
	char	   *name;
	Jsonb	   *input;
	char	   *key = orch_text_arg(fcinfo, 3);
	char	   *tenant;
	Jsonb	   *pins = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	Oid			ftypes[2] = {TEXTOID, INT4OID};
	Datum		fv[2];
	char		fn[2] = {' ', ' '};
	Oid			types[9] = {TEXTOID, TEXTOID, INT4OID, TEXTOID, JSONBOID, JSONBOID, TEXTOID,
	TEXTOID, TEXTOID};
	Datum		v[9];
	char		n[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int32		version;
	Datum		spec;
	char	   *hash;
	bool		isnull;
	RunRow		r;
	MemoryContext outer = CurrentMemoryContext;

	orch_require_arg(fcinfo, 0, "name");
	orch_require_arg(fcinfo, 1, "input");
	name = orch_text_arg(fcinfo, 0);
	input = PG_GETARG_JSONB_P(1);
	orch_check_payload_size(input, "input");
	if (key != NULL && (key[0] == '\0' || strlen(key) > 512))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idempotency key must have 1 to 512 characters")));
	if (pins != NULL && !JB_ROOT_IS_OBJECT(pins))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pins must be a JSON object")));
	tenant = orch_resolve_tenant(orch_text_arg(fcinfo, 4));

	SPI_connect();
	fv[0] = orch_text_datum(name);
	fv[1] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	if (PG_ARGISNULL(2))
		fn[1] = 'n';
	if (SPI_execute_plan(orch_prepare(&start_find_plan,
									  "SELECT version, spec, content_hash FROM orch.definitions"
									  " WHERE name = $1 AND tenant_id = 'default' AND status = 'published'"
									  "   AND ($2::int IS NULL OR version = $2)"
									  " ORDER BY version DESC LIMIT 1",
									  2, ftypes),
						 fv, fn, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "orchestrator: definition lookup failed");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 PG_ARGISNULL(2)
				 ? errmsg("workflow \"%s\" has no published version", name)
				 : errmsg("workflow \"%s\" has no published version %d", name, PG_GETARG_INT32(2)),
				 errhint("Publish a version with orch_publish; deprecated versions cannot start runs.")));
	version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	spec = PointerGetDatum(DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)));
	hash = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	check_input(NULL, spec, JsonbPGetDatum(input));

	v[0] = orch_text_datum(tenant);
	v[1] = orch_text_datum(name);
	v[2] = Int32GetDatum(version);
	v[3] = orch_text_datum(hash);
	v[4] = JsonbPGetDatum(input);
	v[5] = pins ? JsonbPGetDatum(pins) : (Datum) 0;
	if (!pins)
		n[5] = 'n';
	v[6] = key ? orch_text_datum(key) : (Datum) 0;
	if (!key)
		n[6] = 'n';
	v[7] = orch_text_datum(orch_current_actor());
	v[8] = (Datum) 0;
	n[8] = 'n';
	orch_set_event_context(NULL, NULL);
	/* one run per key: a concurrent start with the key waits here, then sees it */
	run_sql("INSERT INTO orch.runs (tenant_id, definition, version, content_hash, state, input, pins,"
			"   idempotency_key, created_by, deadline_at, reason_code)"
			" SELECT $1, $2, $3, $4, 'running', $5,"
			"   jsonb_build_object('definition', $2, 'version', $3, 'content_hash', $4) || coalesce($6, '{}'),"
			"   $7, $8,"
			"   now() + CASE jsonb_typeof(d.spec -> 'policies' -> 'deadline')"
			"     WHEN 'number' THEN make_interval(secs => (d.spec -> 'policies' ->> 'deadline')::float8)"
			"     WHEN 'string' THEN (d.spec -> 'policies' ->> 'deadline')::interval END,"
			"   'started'"
			" FROM orch.definitions d WHERE d.name = $2 AND d.version = $3 AND d.tenant_id = 'default'"
			" ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
			" RETURNING id",
			9, types, v, n, SPI_OK_INSERT_RETURNING);
	if (SPI_processed == 0)
	{
		/* the key names an existing run: the same request returns it */
		int64		existing;

		run_sql("SELECT id, definition = $2 AND ($9::int IS NULL OR version = $3) AND input = $5"
				" AND (pins - 'definition' - 'version' - 'content_hash') = coalesce($6, '{}')"
				" FROM orch.runs WHERE tenant_id = $1 AND idempotency_key = $7",
				9, types, v, n, SPI_OK_SELECT);
		if (SPI_processed == 0)
			elog(ERROR, "orchestrator: run with idempotency key \"%s\" vanished", key);
		existing = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_IDEMPOTENCY_CONFLICT),
					 errmsg("idempotency key \"%s\" was already used to start another run", key),
					 errdetail("Run " INT64_FORMAT " was started with this key for another workflow or input.",
							   existing)));
		orch_clear_event_context();
		SPI_finish();
		PG_RETURN_INT64(existing);
	}
	r.id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	r.tenant = tenant;
	r.state = RS_RUNNING;
	r.phase = "forward";
	r.reason = NULL;
	r.past_deadline = false;
	create_steps(&r);
	advance(&r);
	orch_clear_event_context();
	SPI_finish();
	MemoryContextSwitchTo(outer);
	PG_RETURN_INT64(r.id);
}

/* ----------------------------------------------------------------------
 * Approvals: orch_approve / orch_reject(run, step, approval_ref, actor, note)
 * ---------------------------------------------------------------------- */
static Datum
decide(FunctionCallInfo fcinfo, bool approve)
{
	int64		run_id;
	char	   *step;
	char	   *ref;
	char	   *label = orch_text_arg(fcinfo, 3);
	char	   *note = orch_text_arg(fcinfo, 4);
	RunRow		r;
	Oid			types[8] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, BOOLOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		v[8];
	char		n[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	bool		compensation;
	char	   *state;
	const char *result;

	orch_require_arg(fcinfo, 0, "run_id");
	orch_require_arg(fcinfo, 1, "step_id");
	orch_require_arg(fcinfo, 2, "approval_ref");
	run_id = PG_GETARG_INT64(0);
	step = orch_text_arg(fcinfo, 1);
	ref = orch_text_arg(fcinfo, 2);
	if (ref[0] == '\0' || strlen(ref) > 256)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("approval_ref must have 1 to 256 characters")));

	SPI_connect();
	lock_run_or_not_found(run_id, &r);
	RUN_ARGS(v, r.id, r.tenant);
	v[2] = orch_text_datum(step);
	v[3] = orch_text_datum(ref);
	v[4] = BoolGetDatum(approve);
	v[5] = orch_text_datum(orch_current_actor());
	v[6] = label ? orch_text_datum(label) : (Datum) 0;
	if (!label)
		n[6] = 'n';
	v[7] = note ? orch_text_datum(note) : (Datum) 0;
	if (!note)
		n[7] = 'n';

	/* a reference is used once, for one run and step and one decision */
	run_sql("SELECT run_id = $1 AND step_id = $3 AND approved = $5 FROM orch.approvals"
			" WHERE approval_ref = $4 AND tenant_id = $2",
			8, types, v, n, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		{
			/* the same decision again: nothing changes */
			result = run_state_names[r.state];
			SPI_finish();
			PG_RETURN_TEXT_P(cstring_to_text(result));
		}
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("approval reference \"%s\" was already used", ref),
				 errdetail("An approval reference is single-use and bound to one run and step.")));
	}
	if (run_terminal(r.state))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " is \"%s\": nothing awaits approval", run_id,
						run_state_names[r.state])));
	run_sql("SELECT type, state, comp_state = 'awaiting_approval' FROM orch.run_steps"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
			3, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " has no step \"%s\"", run_id, step)));
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	compensation = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)) && !isnull;
	if (!compensation && strcmp(state, "awaiting_approval") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("step \"%s\" of run " INT64_FORMAT " is not awaiting approval (it is \"%s\")",
						step, run_id, state)));
	run_sql("INSERT INTO orch.approvals (approval_ref, tenant_id, run_id, step_id, approved, actor, label, note)"
			" VALUES ($4, $2, $1, $3, $5, $6, $7, $8)",
			8, types, v, n, SPI_OK_INSERT);
	orch_set_event_context(label, note);
	if (compensation)
	{
		/* a compensation that needed a human: approved runs it, rejected leaves it for review */
		if (!approve)
			run_sql("UPDATE orch.run_steps SET comp_state = 'failed' WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
					3, types, v, NULL, SPI_OK_UPDATE);
		step_event(&r, step, "succeeded", "succeeded",
				   approve ? "compensation_approved" : "compensation_rejected");
		if (r.state == RS_WAITING_APPROVAL && approve)
			set_run_state(&r, RS_RUNNING, NULL, NULL);
		if (approve)
		{
			v[3] = Int64GetDatum(enqueue_step_task(&r, step, psprintf("%s:compensate", step), NULL, -1, true));
			{
				Oid			ctypes[4] = {INT8OID, TEXTOID, TEXTOID, INT8OID};

				run_sql("UPDATE orch.run_steps SET comp_state = 'running', comp_task_id = $4"
						" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
						4, ctypes, v, NULL, SPI_OK_UPDATE);
			}
		}
		else
			advance_compensation(&r);
	}
	else if (approve)
	{
		step_succeeded(&r, step, "awaiting_approval",
					   json_object1("approval_ref", ref, "approved", "true"), NULL);
		progress(&r);
	}
	else
	{
		run_sql("UPDATE orch.run_steps SET state = 'running' WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				3, types, v, NULL, SPI_OK_UPDATE);
		handle_step_failure(&r, step, "failed", note ? note : "rejected", false);
		progress(&r);
	}
	orch_clear_event_context();
	result = run_state_names[r.state];
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

Datum
orch_approve(PG_FUNCTION_ARGS)
{
	return decide(fcinfo, true);
}

Datum
orch_reject(PG_FUNCTION_ARGS)
{
	return decide(fcinfo, false);
}

/* ----------------------------------------------------------------------
 * Pause, resume (with the drift check), cancel
 * ---------------------------------------------------------------------- */
static void
raise_run_state(RunRow *r, const char *action)
{
	ereport(ERROR,
			(errcode(run_terminal(r->state) ? ERRCODE_ORCH_TERMINAL_STATE : ERRCODE_ORCH_INVALID_TRANSITION),
			 errmsg("run " INT64_FORMAT " is \"%s\"; cannot %s it", r->id, run_state_names[r->state], action)));
}

Datum
orch_pause_run(PG_FUNCTION_ARGS)
{
	RunRow		r;
	const char *result;

	orch_require_arg(fcinfo, 0, "run_id");
	SPI_connect();
	lock_run_or_not_found(PG_GETARG_INT64(0), &r);
	if (r.state != RS_PAUSED)
	{
		if (r.state != RS_RUNNING)
			raise_run_state(&r, "pause");
		orch_set_event_context(NULL, NULL);
		set_run_state(&r, RS_PAUSED, "paused", NULL);
		orch_clear_event_context();
	}
	result = run_state_names[r.state];
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

Datum
orch_resume_run(PG_FUNCTION_ARGS)
{
	RunRow		r;
	Jsonb	   *pins = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	const char *result;

	orch_require_arg(fcinfo, 0, "run_id");
	if (pins != NULL && !JB_ROOT_IS_OBJECT(pins))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pins must be a JSON object")));
	SPI_connect();
	lock_run_or_not_found(PG_GETARG_INT64(0), &r);
	if (pins != NULL)
	{
		Oid			types[3] = {INT8OID, TEXTOID, JSONBOID};
		Datum		v[3];

		RUN_ARGS(v, r.id, r.tenant);
		v[2] = JsonbPGetDatum(pins);
		run_sql("SELECT string_agg(format('%s: the run has %s, the caller %s', p.key,"
				"   coalesce(r.pins -> p.key, 'null'), p.value), '; ' ORDER BY p.key)"
				" FROM orch.runs r, jsonb_each($3) p"
				" WHERE r.id = $1 AND r.tenant_id = $2 AND r.pins -> p.key IS DISTINCT FROM p.value",
				3, types, v, NULL, SPI_OK_SELECT);
		if (SPI_processed == 1 && SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_DRIFT_DETECTED),
					 errmsg("pinned context of run " INT64_FORMAT " differs from the caller's", r.id),
					 errdetail("%s.", SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
					 errhint("Nothing was changed; start a new run for the new context.")));
	}
	if (r.state == RS_PAUSED)
	{
		orch_set_event_context(NULL, NULL);
		set_run_state(&r, RS_RUNNING, "resumed", NULL);
		progress(&r);
		orch_clear_event_context();
	}
	else if (run_terminal(r.state))
		raise_run_state(&r, "resume");
	result = run_state_names[r.state];
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

Datum
orch_cancel_run(PG_FUNCTION_ARGS)
{
	RunRow		r;
	int64		run_id;
	char	   *reason = orch_text_arg(fcinfo, 1);
	Datum		v[3];
	bool		all_tenants;
	Oid			types[3] = {INT8OID, TEXTOID, TEXTARRAYOID};
	char		n[3] = {' ', 'n', ' '};

	orch_require_arg(fcinfo, 0, "run_id");
	run_id = PG_GETARG_INT64(0);
	SPI_connect();
	/* the run's open tasks first (the lock order), then the run */
	v[0] = Int64GetDatum(run_id);
	v[1] = (Datum) 0;
	v[2] = orch_caller_tenants_datum(&all_tenants);
	if (all_tenants)
		n[2] = 'n';
	run_sql("SELECT 1 FROM orch.tasks WHERE run_id = $1 AND ($3::text[] IS NULL OR tenant_id = ANY ($3))"
			" AND state NOT IN ('completed', 'failed', 'cancelled') ORDER BY id FOR UPDATE",
			3, types, v, n, SPI_OK_SELECT);
	lock_run_or_not_found(run_id, &r);
	if (r.state == RS_CANCELED)
	{
		SPI_finish();
		PG_RETURN_TEXT_P(cstring_to_text("canceled"));
	}
	if (run_terminal(r.state))
		raise_run_state(&r, "cancel");
	orch_set_event_context(NULL, reason);
	RUN_ARGS(v, r.id, r.tenant);
	run_sql("UPDATE orch.tasks SET state = 'cancelled', reason_code = 'run_canceled'"
			" WHERE run_id = $1 AND tenant_id = $2 AND state NOT IN ('completed', 'failed', 'cancelled')",
			2, rt_types, v, NULL, SPI_OK_UPDATE);
	run_sql("UPDATE orch.run_steps SET state = CASE WHEN state IN ('pending', 'ready') THEN 'skipped'"
			"   ELSE 'canceled' END, finished_at = clock_timestamp(),"
			" comp_state = CASE WHEN comp_state IN ('running', 'awaiting_approval', 'pending') THEN 'canceled' ELSE comp_state END"
			" WHERE run_id = $1 AND tenant_id = $2"
			"   AND (state IN ('pending', 'ready', 'running', 'awaiting_approval', 'waiting')"
			"     OR comp_state IN ('running', 'awaiting_approval', 'pending'))",
			2, rt_types, v, NULL, SPI_OK_UPDATE);
	set_run_state(&r, RS_CANCELED, "canceled", NULL);
	orch_clear_event_context();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text("canceled"));
}

/* ----------------------------------------------------------------------
 * orch_retry_run(run_id) -> new run id: a failed run again from its failed
 * steps, keeping completed outputs (lineage: retry_of).
 * ---------------------------------------------------------------------- */
Datum
orch_retry_run(PG_FUNCTION_ARGS)
{
	RunRow		r;
	RunRow		nr;
	Datum		v[3];
	Oid			types[3] = {INT8OID, TEXTOID, INT8OID};
	bool		isnull;

	orch_require_arg(fcinfo, 0, "run_id");
	SPI_connect();
	lock_run_or_not_found(PG_GETARG_INT64(0), &r);
	RUN_ARGS(v, r.id, r.tenant);
	if (r.state != RS_FAILED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run " INT64_FORMAT " is \"%s\": only a failed run can be retried", r.id,
						run_state_names[r.state])));
	run_sql("SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			" AND comp_state IN ('done', 'failed', 'running')",
			2, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run " INT64_FORMAT " was compensated and cannot be retried", r.id),
				 errhint("Start a new run.")));
	run_sql("SELECT 1 FROM orch.runs WHERE retry_of = $1 AND tenant_id = $2", 2, types, v, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run " INT64_FORMAT " was already retried", r.id)));
	orch_set_event_context(NULL, NULL);
	run_sql("INSERT INTO orch.runs (tenant_id, definition, version, content_hash, state, input, pins,"
			"   created_by, deadline_at, reason_code, retry_of)"
			" SELECT tenant_id, definition, version, content_hash, 'running', input, pins, $3::text,"
			"   now() + (deadline_at - created_at), 'retried', id"
			" FROM orch.runs WHERE id = $1 AND tenant_id = $2 RETURNING id",
			3, (Oid[]) {INT8OID, TEXTOID, TEXTOID},
			(Datum[]) {v[0], v[1], orch_text_datum(orch_current_actor())}, NULL, SPI_OK_INSERT_RETURNING);
	nr.id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	nr.tenant = r.tenant;
	nr.state = RS_RUNNING;
	nr.phase = "forward";
	nr.reason = NULL;
	nr.past_deadline = false;
	v[2] = Int64GetDatum(nr.id);
	/* completed steps keep their outputs; everything else runs again */
	run_sql("INSERT INTO orch.run_steps (run_id, tenant_id, step_id, ord, type, spec, deps, join_policy,"
			"   needs_edge, edge_taken, out_edges, state, output, items, done_seq, comp_state, started_at, finished_at)"
			" SELECT $3, tenant_id, step_id, ord, type, spec, deps, join_policy, needs_edge,"
			"   CASE WHEN state = 'succeeded' THEN edge_taken ELSE edge_taken AND state NOT IN ('skipped', 'canceled') END,"
			"   out_edges, CASE WHEN state = 'succeeded' THEN 'succeeded' ELSE 'pending' END,"
			"   CASE WHEN state = 'succeeded' THEN output END, CASE WHEN state = 'succeeded' THEN items END,"
			"   CASE WHEN state = 'succeeded' THEN done_seq END,"
			"   CASE WHEN state = 'succeeded' THEN comp_state END,"
			"   CASE WHEN state = 'succeeded' THEN started_at END, CASE WHEN state = 'succeeded' THEN finished_at END"
			" FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2",
			3, types, v, NULL, SPI_OK_INSERT);
	orch_write_run_event(r.tenant, r.id, "run", "failed", "failed", "retried",
						 psprintf("retried as run " INT64_FORMAT, nr.id));
	orch_write_run_event(nr.tenant, nr.id, "run", "running", "running", "retry_of",
						 psprintf("retry of run " INT64_FORMAT, r.id));
	/* the edges taken by steps that succeeded hold again; the rest is re-decided */
	advance(&nr);
	orch_clear_event_context();
	SPI_finish();
	PG_RETURN_INT64(nr.id);
}

/* ----------------------------------------------------------------------
 * orch_run_status(run_id) -> jsonb: the run, its steps, attempts, events
 * ---------------------------------------------------------------------- */
Datum
orch_run_status(PG_FUNCTION_ARGS)
{
	Oid			types[2] = {INT8OID, TEXTARRAYOID};
	Datum		v[2];
	char		n[2] = {' ', ' '};
	bool		all_tenants;
	bool		isnull;
	Jsonb	   *out;
	MemoryContext outer = CurrentMemoryContext;

	orch_require_arg(fcinfo, 0, "run_id");
	v[0] = PG_GETARG_DATUM(0);
	v[1] = orch_caller_tenants_datum(&all_tenants);
	if (all_tenants)
		n[1] = 'n';
	SPI_connect();
	run_sql("SELECT jsonb_build_object("
			"  'run', to_jsonb(r) - 'tenant_id' || jsonb_build_object('tenant_id', r.tenant_id),"
			"  'steps', coalesce((SELECT jsonb_agg(jsonb_build_object('step_id', s.step_id, 'type', s.type,"
			"       'state', s.state, 'output', s.output, 'error', s.error, 'started_at', s.started_at,"
			"       'finished_at', s.finished_at, 'compensation', s.comp_state,"
			"       'tasks', (SELECT coalesce(jsonb_agg(jsonb_build_object('task_id', t.id, 'step_key', t.step_key,"
			"            'state', t.state, 'attempts', t.attempts, 'reason_code', t.reason_code,"
			"            'attempt_history', (SELECT coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt,"
			"                 'worker', a.worker, 'outcome', a.outcome, 'error_class', a.error_class,"
			"                 'error', a.error, 'started_at', a.started_at, 'finished_at', a.finished_at)"
			"                 ORDER BY a.id), '[]') FROM orch.attempts a WHERE a.task_id = t.id))"
			"            ORDER BY t.id), '[]') FROM orch.tasks t WHERE t.run_id = r.id AND t.tenant_id = r.tenant_id"
			"            AND (t.step_key = s.step_id OR left(t.step_key, length(s.step_id) + 1) = s.step_id || '#'"
			"                 OR t.step_key = s.step_id || ':compensate')))"
			"     ORDER BY s.ord) FROM orch.run_steps s WHERE s.run_id = r.id AND s.tenant_id = r.tenant_id), '[]'),"
			"  'approvals', coalesce((SELECT jsonb_agg(to_jsonb(p) ORDER BY p.decided_at) FROM orch.approvals p"
			"       WHERE p.run_id = r.id AND p.tenant_id = r.tenant_id), '[]'),"
			"  'events', coalesce((SELECT jsonb_agg(jsonb_build_object('at', e.at, 'entity', e.entity, 'task_id', e.task_id,"
			"       'from_state', e.from_state, 'to_state', e.to_state, 'reason_code', e.reason_code,"
			"       'actor', e.actor, 'label', e.label, 'note', e.note) ORDER BY e.id)"
			"       FROM orch.events e WHERE e.run_id = r.id AND e.tenant_id = r.tenant_id), '[]'))"
			" FROM orch.runs r WHERE r.id = $1 AND ($2::text[] IS NULL OR r.tenant_id = ANY ($2))",
			2, types, v, n, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("run " INT64_FORMAT " does not exist", DatumGetInt64(v[0]))));
	{
		MemoryContext spi = MemoryContextSwitchTo(outer);

		out = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	PG_RETURN_JSONB_P(out);
}
