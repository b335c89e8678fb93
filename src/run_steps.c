/*
 * run_steps.c
 *	  Step progression of workflow runs: which pending steps can start (joins,
 *	  edges), starting them (a task, a map fan-out, a decision's rules, a
 *	  human approval, a timer), collecting outcomes of their tasks, timers and
 *	  soft caps, handling failures (edges, or the run fails), compensation in
 *	  reverse completion order, and the run's end.  Every function here runs
 *	  with the run's row locked and is connected to SPI.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "run_internal.h"

/* ----------------------------------------------------------------------
 * Starting steps
 * ---------------------------------------------------------------------- */

static void step_failed(RunRow *r, const char *step, const char *state, const char *error,
						bool compensation_required, const char *event_reason);

/* The run and its tenant as $1 and $2, and the step (unless NULL) as $3 */
static void
step_args(OrchArgs *a, const RunRow *r, const char *step)
{
	orch_arg_int8(a, r->id);
	orch_arg_text(a, r->tenant);
	if (step != NULL)
		orch_arg_text(a, step);
}

/* Mark the targets of a finished step's edge for the given outcome. */
static void
take_edges(RunRow *r, const char *step, const char *outcome)
{
	OrchArgs	a = {0};

	step_args(&a, r, step);
	/* outcome is one of on_success / on_failure / on_timeout (a literal) */
	orch_args_sql(&a, psprintf("UPDATE orch.run_steps t SET edge_taken = true"
					 " FROM orch.run_steps s"
					 " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"
					 "   AND t.run_id = $1 AND t.tenant_id = $2"
					 /* a searched CASE: Citus deparses a simple one wrongly here */
					 "   AND t.step_id IN (SELECT jsonb_array_elements_text(CASE"
					 "        WHEN jsonb_typeof(s.spec -> '%s') = 'array' THEN s.spec -> '%s'"
					 "        WHEN jsonb_typeof(s.spec -> '%s') = 'string' THEN jsonb_build_array(s.spec -> '%s')"
					 "        ELSE '[]' END))",
					 outcome, outcome, outcome, outcome), false, 0, SPI_OK_UPDATE);
}

/* Does the step have an edge for this outcome? */
static bool
has_edge(RunRow *r, const char *step, const char *outcome)
{
	OrchArgs	a = {0};
	bool		isnull;

	step_args(&a, r, step);
	orch_args_sql(&a, psprintf("SELECT jsonb_typeof(spec -> '%s') IN ('string', 'array') FROM orch.run_steps"
					 " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", outcome), false, 0, SPI_OK_SELECT);
	return SPI_processed == 1 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
		!isnull;
}

/*
 * What a step's success writes (output: its SQL; NOW: a parameter with the
 * clock), and whether it has on_success edges to take (RETURNING); for a
 * statement whose $1 and $2 are the run and its tenant.  done_seq, the
 * step's place in the run's completion order (which compensation
 * reverses), counts in the run (the run is locked): one sequence would
 * number steps by the node that settled them on Citus, where each node
 * draws ids from its own range.
 */
#define STEP_SUCCEEDED_SET(OUTPUT, NOW) \
	"state = 'succeeded', output = " OUTPUT ", finished_at = " NOW "," \
	" wake_at = NULL, cap_at = NULL," \
	" done_seq = (SELECT coalesce(max(d.done_seq), 0) + 1 FROM orch.run_steps d" \
	"             WHERE d.run_id = $1 AND d.tenant_id = $2)," \
	" comp_state = CASE WHEN spec ? 'compensation' THEN 'armed' END"
#define STEP_SUCCEEDED_RETURNING \
	" RETURNING jsonb_typeof(spec -> 'on_success') IN ('string', 'array')"

/*
 * A step's output against its output_schema (json_schema.c): NULL when it
 * matches or there is no schema, else the step's error, naming the JSON
 * path of the first mismatch ($ is the output).  A mismatch fails the step
 * for good (reason output_schema_mismatch): its task completed, so there
 * is nothing to retry, and the same handler would return the same output.
 */
static char *
output_mismatch(Jsonb *schema, Jsonb *output)
{
	JsonSchemaProblem p;

	if (schema == NULL || orch_json_schema_validate(schema, output, "$", &p))
		return NULL;
	return psprintf("output does not match output_schema at %s: %s", p.path, p.message);
}

static void step_succeeded(RunRow *r, const char *step, const char *from, Jsonb *output,
						   const char *chosen, const char *event_reason);

/* A step succeeded with an output: record, take its on_success edges. */
void
orch_run_step_succeeded(RunRow *r, const char *step, const char *from, Jsonb *output, const char *chosen)
{
	step_succeeded(r, step, from, output, chosen, "step_succeeded");
}

/* The same, with the reason of the step's event */
static void
step_succeeded(RunRow *r, const char *step, const char *from, Jsonb *output, const char *chosen,
			   const char *event_reason)
{
	OrchArgs	a = {0};
	OrchArgs	edge;
	bool		has_success_edges;
	bool		isnull;

	step_args(&a, r, step);
	orch_arg_jsonb(&a, output);
	orch_arg_text(&a, chosen);
	orch_arg_text(&a, from);
	edge = a;					/* $1 to $6, for the decision's edge */
	orch_arg_clock(&a);
	/* only from the state it was in: a step closed meanwhile stays closed */
	if (orch_args_sql(&a, "UPDATE orch.run_steps SET " STEP_SUCCEEDED_SET("$4", "$7")
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3 AND state = $6"
			STEP_SUCCEEDED_RETURNING, false, 0, SPI_OK_UPDATE_RETURNING) == 0)
		return;
	has_success_edges = SPI_processed == 1 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) && !isnull;
	orch_step_event(r, step, from, "succeeded", event_reason);
	if (chosen)
	{
		/* a decision activates exactly the target it chose */
		orch_args_sql(&edge, "UPDATE orch.run_steps SET edge_taken = true"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $5", false, 0, SPI_OK_UPDATE);
	}
	else if (has_success_edges)
		take_edges(r, step, "on_success");
}

/* The items a map step may start now: next .. upto - 1 of items */
typedef struct MapWindow
{
	int			next;
	int			upto;
	Jsonb	   *items;
	char	   *definition;		/* a map of sub-workflows: what it starts */
	int			version;
} MapWindow;

/*
 * The window of a running map step (subflow: of sub-workflows): the items
 * not started yet that max_parallel lets in now; false when there is none.
 */
static bool
map_window(RunRow *r, const char *step, bool subflow, MapWindow *w)
{
	OrchArgs	a = {0};
	bool		isnull;
	int			total,
				done,
				maxp;
	HeapTuple	tup;
	TupleDesc	td;

	step_args(&a, r, step);
	if (orch_args_sql(&a, "SELECT items_total, items_next, items_done,"
			" coalesce((spec -> 'map' ->> 'max_parallel')::int, 2147483647), items,"
			" spec ->> 'definition', (spec ->> 'version')::int"
			" FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3"
			"   AND items_total IS NOT NULL", false, 0, SPI_OK_SELECT) != 1)
		return false;
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	total = DatumGetInt32(SPI_getbinval(tup, td, 1, &isnull));
	w->next = DatumGetInt32(SPI_getbinval(tup, td, 2, &isnull));
	done = DatumGetInt32(SPI_getbinval(tup, td, 3, &isnull));
	maxp = DatumGetInt32(SPI_getbinval(tup, td, 4, &isnull));
	/* open items: started and not finished (a failed one ends the step) */
	w->upto = (maxp >= total - done) ? total : done + maxp;
	if (w->upto <= w->next)
		return false;
	w->items = DatumGetJsonbPCopy(SPI_getbinval(tup, td, 5, &isnull));
	w->definition = subflow ? SPI_getvalue(tup, td, 6) : NULL;
	w->version = subflow ? DatumGetInt32(SPI_getbinval(tup, td, 7, &isnull)) : 0;
	return true;
}

/*
 * Enqueue the next items of a map step, at most max_parallel open at once.
 * Its counters say how many items have a task and how many completed
 * (recount: count them from the tasks first, as the general path does,
 * which may have settled several at once); the items array is read only
 * when there is something to enqueue.
 */
static void
map_fill(RunRow *r, const char *step, bool recount)
{
	OrchArgs	a = {0};
	MapWindow	w;

	step_args(&a, r, step);
	if (recount)
		orch_args_sql(&a, "UPDATE orch.run_steps s SET (items_next, items_done) ="
				" (SELECT count(*), count(*) FILTER (WHERE t.state = 'completed') FROM orch.tasks t"
				"   WHERE t.run_id = s.run_id AND t.tenant_id = $2"
				"     AND left(t.step_key, length(s.step_id) + 1) = s.step_id || '#')"
				" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3", false, 0, SPI_OK_UPDATE);
	if (!map_window(r, step, false, &w))
		return;
	if (orch_run_enqueue_map_items(r, step, w.next, w.upto, w.items) < 0)
		orch_run_step_failed(r, step, "failed", orch_run_step_no_queue(), false);
}

/*
 * Starting a step, one function per kind.  Each returns true when the step
 * settled at once (succeeded or failed: the caller looks for more steps).
 */

/* A human_approval step waits for a person in its task (awaiting_user_confirmation; 0.8.0 on) */
static bool
start_approval_step(RunRow *r, const char *step, const Interval *timeout)
{
	OrchArgs	a = {0};
	TimestampTz now;
	int64		task = orch_schema_approval_tasks() ? orch_run_open_approval(r, step, false) : 0;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg(&a, INT8OID, Int64GetDatum(task), task == 0);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'awaiting_approval', started_at = $5,"
				  " cap_at = $6, task_id = $4"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	orch_step_event(r, step, "ready", "awaiting_approval", "approval_requested");
	return false;
}

/* A row of a step into SPI_tuptable (sql: $1 the run, $2 its tenant, $3 the step) */
static void
read_step_row(RunRow *r, const char *step, const char *sql)
{
	OrchArgs	a = {0};

	step_args(&a, r, step);
	orch_args_sql(&a, sql, false, 0, SPI_OK_SELECT);
}

/*
 * A signal consumed by the step that waited for it: its payload is the
 * step's output, checked against the step's output_schema (a mismatch
 * fails the step, reason output_schema_mismatch, the signal consumed all
 * the same).  The step's event is labelled with the signal's id.
 */
static void
signal_step_settle(RunRow *r, const char *step, int64 signal, Jsonb *payload)
{
	bool		isnull;
	Datum		d;
	Jsonb	   *schema = NULL;
	char	   *mismatch;
	int			ev;

	read_step_row(r, step, "SELECT spec -> 'output_schema' FROM orch.run_steps"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		schema = DatumGetJsonbPCopy(d);
	ev = orch_set_event_context(psprintf("signal " INT64_FORMAT, signal), NULL);
	mismatch = output_mismatch(schema, payload);
	if (mismatch != NULL)
		step_failed(r, step, "failed", mismatch, false, "output_schema_mismatch");
	else
		step_succeeded(r, step, "waiting", payload, NULL, "signal_received");
	orch_clear_event_context(ev);
}

/*
 * A wait step for a signal: it waits (bounded by its timeout) unless a
 * signal of its name is kept already, which it consumes at once.  True
 * when it settled.
 */
static bool
start_signal_wait_step(RunRow *r, const char *step, const Interval *timeout)
{
	OrchArgs	a = {0};
	TimestampTz now;
	int64		signal;
	Jsonb	   *payload;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'waiting', started_at = $4, cap_at = $5, wake_at = NULL"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	orch_step_event(r, step, "ready", "waiting", "wait_started");
	if (!orch_run_take_signal(r, step, &signal, &payload))
		return false;
	signal_step_settle(r, step, signal, payload);
	return true;
}

/* A wait step: for a duration from now, or until a time the input names */
static bool
start_wait_step(RunRow *r, const char *step, const Interval *timeout)
{
	bool		isnull;
	OrchArgs	a = {0};
	TimestampTz now;
	char	   *until;
	Jsonb	   *at = NULL;
	Interval   *duration = NULL;
	TimestampTz wake = 0;
	bool		wake_ok = true;
	Datum		d;

	read_step_row(r, step, "SELECT spec ->> 'until_path', " RUN_SPEC_INTERVAL("spec", "duration") ", spec ? 'signal'"
				  " FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3");
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)))
		return start_signal_wait_step(r, step, timeout);
	until = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (!isnull)
	{
		duration = palloc(sizeof(Interval));
		*duration = *DatumGetIntervalP(d);
	}
	if (until)
		at = orch_run_context_value(r, orch_run_context(r, NULL), until);
	/* the input names the time: a finite timestamp, or the step fails */
	if (until)
		wake_ok = at != NULL && orch_parse_timestamp_safely(at, &wake);
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	/* a duration from now, else the input's time (NULL: it names none) */
	if (duration)
		orch_arg_step_cap(&a, now, duration);
	else
		orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(wake), !(until && wake_ok));
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'waiting', started_at = $4, cap_at = $5, wake_at = $6"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	orch_step_event(r, step, "ready", "waiting", "wait_started");
	if (until && !wake_ok)
	{
		orch_run_step_failed(r, step, "failed",
							 psprintf("%s does not name a timestamp in the input", until), false);
		return true;
	}
	return false;
}

/* A decision without a handler: its rules choose the next steps now */
static bool
start_decision_step(RunRow *r, const char *step)
{
	OrchArgs	a = {0};
	char	   *chosen = orch_run_decide(r, step, NULL);

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg_clock(&a);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'running', started_at = $4"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	if (chosen == NULL)
		orch_run_step_failed(r, step, "failed", "no rule matched and the decision has no default", false);
	else
		orch_run_step_succeeded(r, step, "running", orch_json_object1("next", chosen, NULL, NULL), chosen);
	return true;
}

/*
 * A map step's items, once they are known: settled at once when they are
 * not an array, too many, or none.  True when settled.
 */
static bool
map_items_settle(RunRow *r, const char *step, const char *over, bool is_array, int count, Jsonb *schema)
{
	if (!is_array)
	{
		orch_run_step_failed(r, step, "failed", psprintf("%s is not an array", over), false);
		return true;
	}
	if (count > orch_max_batch_size)
	{
		orch_run_step_failed(r, step, "failed",
							 psprintf("%s has %d items; orchestrator.max_batch_size is %d",
									  over, count, orch_max_batch_size), false);
		return true;
	}
	if (count == 0)
	{
		Jsonb	   *empty = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("[]")));
		char	   *mismatch = output_mismatch(schema, empty);

		if (mismatch != NULL)
			step_failed(r, step, "failed", mismatch, false, "output_schema_mismatch");
		else
			orch_run_step_succeeded(r, step, "running", empty, NULL);
		return true;
	}
	return false;
}

static int	subflow_fill(RunRow *r, const char *step);
static bool subflow_look(RunRow *r, const char *step);

/*
 * A map step fans out over an array: one task per item (subflow: one
 * sub-workflow per item), results joined in order
 */
static bool
start_map_step(RunRow *r, const char *step, const Interval *timeout, bool subflow)
{
	bool		isnull;
	OrchArgs	a = {0};
	TimestampTz now;
	char	   *over;
	Jsonb	   *items;
	Jsonb	   *schema;
	bool		is_array;
	int			count;
	Datum		d;

	read_step_row(r, step, "SELECT spec -> 'map' ->> 'over', spec -> 'output_schema' FROM orch.run_steps"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3");
	over = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	schema = isnull ? NULL : DatumGetJsonbPCopy(d);
	items = orch_run_context_value(r, orch_run_context(r, NULL), over);

	/* an array of items (counted here: one text on one node and on Citus) */
	is_array = items != NULL && JB_ROOT_IS_ARRAY(items) && !JB_ROOT_IS_SCALAR(items);
	count = is_array ? (int) JB_ROOT_COUNT(items) : 0;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg(&a, JSONBOID, items ? JsonbPGetDatum(items) : (Datum) 0, items == NULL);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	orch_arg(&a, INT4OID, Int32GetDatum(count), !is_array);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'running', started_at = $5, cap_at = $6,"
				  " items = $4, items_total = $7"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3",
				  false, 0, SPI_OK_UPDATE);
	orch_step_event(r, step, "ready", "running", "step_started");
	if (map_items_settle(r, step, over, is_array, count, schema))
		return true;
	if (!subflow)
	{
		map_fill(r, step, false);
		return false;
	}
	/* a child that cannot start fails the step: settled */
	if (subflow_fill(r, step) < 0)
		return true;
	return subflow_look(r, step);
}

/* A task step (and a decision with a handler): its task is enqueued */
static bool
start_task_step(RunRow *r, const char *step, const Interval *timeout)
{
	char	   *error = orch_run_start_step_task(r, step, timeout);

	if (error)
	{
		orch_run_step_failed(r, step, "failed", error, false);
		return true;
	}
	orch_step_event(r, step, "ready", "running", "step_started");
	return false;
}

/*
 * The input of a single subflow step's child: the run's input, or what the
 * step's "input" names (a path into the run's context, or an object of
 * such paths, each key given the value its path names, or null).  NULL
 * with *error when a lone path names nothing.
 */
static Jsonb *
subflow_input(RunRow *r, Jsonb *mapping, char **error)
{
	Jsonb	   *ctx = orch_run_context(r, NULL);
	JsonbValue	v;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	StringInfoData b;
	bool		first = true;

	if (mapping == NULL)
		return orch_run_context_value(r, ctx, "$.input");
	if (JsonbExtractScalar(&mapping->root, &v))
	{
		char	   *path = pnstrdup(v.val.string.val, v.val.string.len);
		Jsonb	   *value = orch_run_context_value(r, ctx, path);

		if (value == NULL)
			*error = psprintf("input %s names nothing in the run", path);
		return value;
	}
	/* {"key": "<path>", ...}: keys in the object's order */
	initStringInfo(&b);
	appendStringInfoChar(&b, '{');
	it = JsonbIteratorInit(&mapping->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;
		Jsonb	   *value;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		(void) JsonbIteratorNext(&it, &v, true);
		value = orch_run_context_value(r, ctx, pnstrdup(v.val.string.val, v.val.string.len));
		if (!first)
			appendStringInfoString(&b, ", ");
		first = false;
		escape_json(&b, key);
		appendStringInfo(&b, ": %s", value ? JsonbToCString(NULL, &value->root, VARSIZE(value)) : "null");
	}
	appendStringInfoChar(&b, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(b.data)));
}

/*
 * A subflow step starts its sub-workflow (map: one per item, below) and
 * waits for it without a task: the child's end settles it (subflow_look).
 */
static bool
start_subflow_step(RunRow *r, const char *step, bool is_map, const Interval *timeout)
{
	OrchArgs	a = {0};
	TimestampTz now;
	bool		isnull;
	Datum		d;
	char	   *definition;
	int			version;
	Jsonb	   *mapping;
	Jsonb	   *input;
	char	   *error = NULL;

	if (!orch_run_subflows_enabled())
	{
		orch_run_step_failed(r, step, "failed", "sub-workflows need the 0.8.0 schema and are not available on Citus", false);
		return true;
	}
	if (is_map)
		return start_map_step(r, step, timeout, true);
	read_step_row(r, step, "SELECT spec ->> 'definition', (spec ->> 'version')::int, spec -> 'input'"
				  " FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3");
	definition = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	mapping = isnull ? NULL : DatumGetJsonbPCopy(d);
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'running', started_at = $4, cap_at = $5"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	orch_step_event(r, step, "ready", "running", "step_started");
	input = subflow_input(r, mapping, &error);
	if (error == NULL)
		(void) orch_run_start_children(r, step, -1, 0, NULL, input, definition, version, &error);
	if (error != NULL)
	{
		orch_run_step_failed(r, step, "failed", error, false);
		return true;
	}
	return subflow_look(r, step);
}

/*
 * The next items of a running map of sub-workflows started, at most
 * max_parallel open at once: 1 when it started some, 0 when there were
 * none to start, -1 when one could not start (the step failed).
 */
static int
subflow_fill(RunRow *r, const char *step)
{
	MapWindow	w;
	OrchArgs	a = {0};
	char	   *error;

	if (!map_window(r, step, true, &w))
		return 0;
	if (!orch_run_start_children(r, step, w.next, w.upto, w.items, NULL, w.definition, w.version, &error))
	{
		orch_run_step_failed(r, step, "failed", error, false);
		return -1;
	}
	step_args(&a, r, step);
	orch_arg_int4(&a, w.upto);
	orch_args_sql(&a, "UPDATE orch.run_steps SET items_next = $4"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	return 1;
}

typedef enum StepKind
{
	STEP_TASK,					/* a task step, or a decision with a handler */
	STEP_MAP,
	STEP_SUBFLOW,
	STEP_APPROVAL,
	STEP_WAIT,
	STEP_DECISION				/* decided by its rules alone */
} StepKind;

static StepKind
step_kind(const char *type, bool is_map, bool has_handler)
{
	if (strcmp(type, "human_approval") == 0)
		return STEP_APPROVAL;
	if (strcmp(type, "wait") == 0)
		return STEP_WAIT;
	if (strcmp(type, "decision") == 0 && !has_handler)
		return STEP_DECISION;
	if (strcmp(type, "subflow") == 0)
		return STEP_SUBFLOW;
	return is_map ? STEP_MAP : STEP_TASK;
}

/*
 * Hand a ready step to its executor (a task, a rule, a human, a timer).
 * True when the step finished at once (a decision by rules, an empty or
 * invalid map, a wait with no timestamp): then other steps may be ready.
 * A gate (an approval, a decision) first checks the drift probes: on drift
 * the run stops and the step stays ready.
 */
static bool
start_step(RunRow *r, const char *step, const char *type, bool is_map, bool has_handler,
		   const Interval *timeout)
{
	if ((strcmp(type, "human_approval") == 0 || strcmp(type, "decision") == 0) &&
		!orch_run_probes_hold(r, step))
		return false;
	switch (step_kind(type, is_map, has_handler))
	{
		case STEP_APPROVAL:
			return start_approval_step(r, step, timeout);
		case STEP_WAIT:
			return start_wait_step(r, step, timeout);
		case STEP_DECISION:
			return start_decision_step(r, step);
		case STEP_MAP:
			return start_map_step(r, step, timeout, false);
		case STEP_SUBFLOW:
			return start_subflow_step(r, step, is_map, timeout);
		case STEP_TASK:
			break;
	}
	return start_task_step(r, step, timeout);
}

/* ----------------------------------------------------------------------
 * Failing, compensating, finishing
 * ---------------------------------------------------------------------- */

/* Cancel the run's open forward step tasks, never waiting for a locked one. */
static void
cancel_open_step_tasks(RunRow *r, const char *reason)
{
	OrchArgs	a = {0};

	step_args(&a, r, NULL);
	orch_run_cancel_approvals(r, reason);
	orch_run_cancel_tasks("SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
					 "   AND state NOT IN ('completed', 'failed', 'cancelled') AND step_key NOT LIKE '%:compensate'"
					 "   ORDER BY id FOR UPDATE SKIP LOCKED",
					 &a, r->tenant, reason);
}


/*
 * Cancel run r, locked: its approvals and open tasks (never waiting for a
 * locked one), its open steps with their sub-workflows, then the run
 * (reason: the reason of its steps' and tasks' events; note: of its own
 * and its steps' events).
 */
void
orch_run_cancel_locked(RunRow *r, const char *reason, const char *note)
{
	int			ev;
	OrchArgs	run = {0};

	step_args(&run, r, NULL);
	orch_run_cancel_approvals(r, reason);
	orch_run_cancel_tasks("SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
					 "   AND state NOT IN ('completed', 'failed', 'cancelled') ORDER BY id FOR UPDATE SKIP LOCKED",
					 &run, r->tenant, reason);
	ev = orch_set_event_context(NULL, note);
	orch_run_close_open_steps(r, reason, true);
	orch_set_run_state(r, RS_CANCELED, "canceled", NULL);
	orch_clear_event_context(ev);
}

/*
 * The open sub-workflows of run r (of its step, unless NULL) are canceled
 * with r's reason, each audited as canceled because its parent ended (and
 * so on down).  The family's lock is held: they are locked at once.
 */
static void
cancel_children(RunRow *r, const char *step, const char *reason)
{
	int			n;
	int64	   *ids = orch_run_open_children(r, step, &n);

	for (int i = 0; i < n; i++)
	{
		RunRow		c;
		int64		prev;

		if (!orch_lock_run(ids[i], r->tenant, &c) || orch_run_terminal(c.state))
			continue;
		prev = orch_run_busy_begin(c.id);
		orch_run_cancel_locked(&c, reason,
							   psprintf("parent run " INT64_FORMAT " %s: %s", r->id,
										step ? psprintf("step %s", step) : "ended", reason));
		orch_run_busy_end(prev);
	}
}

/*
 * The run ends (fails or is canceled): its open steps stop — pending and
 * ready ones are skipped, running, waiting and awaiting ones canceled (with
 * cancel_compensations, compensations in progress too) — each with its
 * step event.
 */
void
orch_run_close_open_steps(RunRow *r, const char *reason, bool cancel_compensations)
{
	OrchArgs	a = {0};
	int			n;
	char	  **steps;
	char	  **from;
	char	  **to;

	step_args(&a, r, NULL);
	orch_arg_bool(&a, cancel_compensations);
	orch_arg_clock(&a);
	n = (int) orch_args_sql(&a, "WITH o AS (SELECT step_id, state FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			"   AND (state IN ('pending', 'ready', 'running', 'retrying', 'awaiting_approval', 'waiting')"
			"     OR ($3 AND comp_state IN ('running', 'awaiting_approval', 'pending'))) FOR UPDATE),"
			" u AS (UPDATE orch.run_steps s SET"
			"   state = CASE WHEN s.state IN ('pending', 'ready') THEN 'skipped'"
			"                WHEN s.state IN ('running', 'retrying', 'awaiting_approval', 'waiting') THEN 'canceled'"
			"                ELSE s.state END,"
			"   finished_at = CASE WHEN s.state IN ('pending', 'ready', 'running', 'retrying', 'awaiting_approval', 'waiting')"
			"                 THEN $4 ELSE s.finished_at END,"
			"   wake_at = NULL, cap_at = NULL,"
			"   comp_state = CASE WHEN $3 AND s.comp_state IN ('running', 'awaiting_approval', 'pending')"
			"                THEN 'canceled' ELSE s.comp_state END"
			" FROM o WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = o.step_id"
			" RETURNING s.step_id, o.state AS from_state, s.state, s.ord)"
			" SELECT step_id, from_state, state FROM u ORDER BY ord", false, 0, SPI_OK_SELECT);
	steps = orch_spi_column(1);
	from = orch_spi_column(2);
	to = orch_spi_column(3);
	/*
	 * The reason of their events: the run's when it names the cause
	 * (run_canceled, deadline_exceeded); run_failed when another step's
	 * failure failed the run (its own events name it).  One insert for all.
	 */
	if (strcmp(reason, "step_failed") == 0 || strcmp(reason, "step_timed_out") == 0 ||
		strcmp(reason, "compensation_required") == 0)
		reason = "run_failed";
	orch_events_defer();
	for (int i = 0; i < n; i++)
		if (strcmp(from[i], to[i]) != 0)
			orch_step_event(r, steps[i], from[i], to[i], reason);
	orch_events_undefer(true);
	/* and the sub-workflows of the steps that stopped */
	cancel_children(r, NULL, reason);
}

/*
 * The run fails (a step failed with nothing to handle it, a deadline, a
 * rejection): open steps stop; steps that succeeded with a compensation
 * handler are compensated in reverse completion order (the run stays
 * running, phase compensating, until they are done); then it is failed.
 */
static void
fail_run(RunRow *r, const char *reason, const char *step, const char *error)
{
	OrchArgs	a = {0};
	OrchArgs	run;

	if (orch_run_terminal(r->state) || strcmp(r->phase, "compensating") == 0)
		return;
	cancel_open_step_tasks(r, reason);
	step_args(&a, r, NULL);
	run = a;					/* $1 and $2 */
	orch_arg_text(&a, reason);
	orch_arg_text(&a, step);
	orch_arg_text(&a, error);
	orch_run_close_open_steps(r, reason, false);
	if (orch_args_sql(&run, "UPDATE orch.run_steps SET comp_state = 'pending'"
			" WHERE run_id = $1 AND tenant_id = $2 AND state = 'succeeded' AND comp_state = 'armed'", false, 0, SPI_OK_UPDATE) > 0)
	{
		/* running (from waiting or paused) while compensations run */
		if (r->state != RS_RUNNING)
			orch_set_run_state(r, RS_RUNNING, reason, NULL);
		orch_args_sql(&a, "UPDATE orch.runs SET phase = 'compensating', reason_code = $3,"
				" failed_step = $4, error = $5 WHERE id = $1 AND tenant_id = $2", false, 0, SPI_OK_UPDATE);
		r->phase = "compensating";
		r->reason = pstrdup(reason);
		orch_write_run_event(r->tenant, r->id, "run", "running", "running", "compensation_started", reason);
		orch_run_advance_compensation(r);
		return;
	}
	orch_args_sql(&a, "UPDATE orch.runs SET failed_step = $4, error = $5 WHERE id = $1 AND tenant_id = $2", false, 0, SPI_OK_UPDATE);
	orch_run_end_failed(r, reason);
}


/*
 * A step failed (or timed out) for good.  COMPENSATION_REQUIRED fails the
 * run at once; otherwise an on_timeout / on_failure edge, or a dependant
 * joining with all_finished / any, handles it; else the run fails.
 */
void
orch_run_step_failed(RunRow *r, const char *step, const char *state, const char *error,
					bool compensation_required)
{
	step_failed(r, step, state, error, compensation_required, NULL);
}

/* The same, with the reason of the step's event (NULL: step_failed / step_timed_out) */
static void
step_failed(RunRow *r, const char *step, const char *state, const char *error,
			bool compensation_required, const char *event_reason)
{
	OrchArgs	a = {0};
	OrchArgs	key;
	bool		handled = false;
	bool		isnull;
	bool		subflow;

	step_args(&a, r, step);
	key = a;					/* $1 to $3 */
	orch_arg_text(&a, state);
	orch_arg_text(&a, error);
	orch_arg_clock(&a);
	orch_args_sql(&a, "WITH o AS (SELECT state FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3"
			"   FOR UPDATE)"
			" UPDATE orch.run_steps s SET state = $4, error = $5, finished_at = $6,"
			"   wake_at = NULL, cap_at = NULL FROM o"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 RETURNING o.state, s.type = 'subflow'",
			false, 0, SPI_OK_UPDATE_RETURNING);
	subflow = SPI_processed == 1 && DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	orch_step_event(r, step, SPI_processed ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) : NULL,
			   state, event_reason ? event_reason :
			   strcmp(state, "timed_out") == 0 ? "step_timed_out" : "step_failed");
	/* a subflow step's open sub-workflows stop with it */
	if (subflow)
		cancel_children(r, step, strcmp(state, "timed_out") == 0 ? "step_timed_out" : "step_failed");
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
		orch_args_sql(&key, "SELECT EXISTS (SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
				" AND $3 = ANY (deps) AND join_policy IN ('all_finished', 'any'))", false, 0, SPI_OK_SELECT);
		handled = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (!handled)
		fail_run(r, strcmp(state, "timed_out") == 0 ? "step_timed_out" : "step_failed", step, error);
}

/* ----------------------------------------------------------------------
 * Progression
 * ---------------------------------------------------------------------- */
#define TERMINAL_STEP "('succeeded', 'failed', 'timed_out', 'skipped', 'canceled')"

/*
 * A pending step that can run now: its dependencies are among the run's
 * steps in the join's states (array containment rather than a join with
 * unnest(deps), which Citus cannot deparse for a shard).  These conditions
 * are for statements whose $1 and $2 are the run and its tenant: every
 * sub-select names the tenant as that value, which lets Citus route the
 * whole statement to the tenant's shard (a correlation on s.tenant_id
 * would not).  Every CASE is a searched one: Citus deparses a simple CASE
 * (CASE x WHEN ...) in an UPDATE it sends to a shard as a comparison of the
 * wrong types.
 */
#define DEPS_IN(STATES) \
	"s.deps <@ (SELECT coalesce(array_agg(x.step_id), '{}') FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = $2 AND x.step_id = ANY (s.deps)" \
	"       AND x.state IN " STATES ")"
#define CAN_RUN \
	"(NOT s.needs_edge OR s.edge_taken) AND CASE" \
	"  WHEN s.join_policy = 'all_finished' THEN " DEPS_IN(TERMINAL_STEP) \
	"  WHEN s.join_policy = 'any' THEN cardinality(s.deps) = 0 OR EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = $2 AND x.step_id = ANY (s.deps) AND x.state = 'succeeded')" \
	"  ELSE " DEPS_IN("('succeeded')") " END"

/* A pending step's edge was not taken and cannot be any more */
#define EDGE_NOT_TAKEN \
	"(s.needs_edge AND NOT s.edge_taken AND NOT EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = $2 AND s.step_id = ANY (x.out_edges)" \
	"       AND x.state NOT IN " TERMINAL_STEP "))"

/*
 * Why a pending step that cannot run is skipped (its event's reason): a
 * decision chose another target (branch_not_taken), an on_success /
 * on_failure / on_timeout edge to it did not fire (route_not_taken), a
 * dependency failed, timed out or was canceled (dependency_failed), or one
 * was skipped (dependency_skipped).
 */
#define SKIP_REASON \
	"CASE WHEN " EDGE_NOT_TAKEN " THEN CASE WHEN EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = $2 AND x.type = 'decision'" \
	"       AND x.spec -> 'targets' ? s.step_id) THEN 'branch_not_taken' ELSE 'route_not_taken' END" \
	"  WHEN EXISTS (SELECT 1 FROM orch.run_steps x WHERE x.run_id = s.run_id AND x.tenant_id = $2" \
	"     AND x.step_id = ANY (s.deps) AND x.state IN ('failed', 'timed_out', 'canceled'))" \
	"    THEN 'dependency_failed' ELSE 'dependency_skipped' END"

/* A listed step's soft cap: its timeout (an interval, or NULL) */
#define STEP_TIMEOUT RUN_SPEC_INTERVAL("s.spec", "timeout")

/* A pending step that never will: its edge was not taken, or its join cannot hold */
#define CANNOT_RUN \
	EDGE_NOT_TAKEN \
	" OR CASE" \
	"  WHEN s.join_policy = 'all_finished' THEN false" \
	"  WHEN s.join_policy = 'any' THEN cardinality(s.deps) > 0 AND NOT EXISTS (SELECT 1 FROM orch.run_steps x" \
	"     WHERE x.run_id = s.run_id AND x.tenant_id = $2 AND x.step_id = ANY (s.deps)" \
	"       AND x.state NOT IN ('failed', 'timed_out', 'skipped', 'canceled'))" \
	"  ELSE EXISTS (SELECT 1 FROM orch.run_steps x WHERE x.run_id = s.run_id AND x.tenant_id = $2" \
	"     AND x.step_id = ANY (s.deps) AND x.state IN ('failed', 'timed_out', 'skipped', 'canceled')) END"

/* The run's open work is done: it succeeds (or, compensating, moves on). */
static void
run_maybe_finish(RunRow *r)
{
	OrchArgs	a = {0};
	bool		isnull;
	Jsonb	   *out;

	if (orch_run_terminal(r->state) || strcmp(r->phase, "compensating") == 0)
		return;
	step_args(&a, r, NULL);
	orch_args_sql(&a, "SELECT count(*) FILTER (WHERE state NOT IN " TERMINAL_STEP "),"
			" count(*) FILTER (WHERE state = 'awaiting_approval'),"
			" coalesce(jsonb_object_agg(step_id, output) FILTER (WHERE state = 'succeeded'), '{}'),"
			" count(*) FILTER (WHERE state IN ('running', 'retrying', 'ready', 'waiting')),"
			/* a failure whose every handler was skipped was not handled after all */
			" (SELECT min(f.step_id) FROM orch.run_steps f WHERE f.run_id = $1 AND f.tenant_id = $2"
			"   AND f.state IN ('failed', 'timed_out') AND NOT EXISTS (SELECT 1 FROM orch.run_steps h"
			"     WHERE h.run_id = $1 AND h.tenant_id = $2 AND h.state <> 'skipped'"
			"       AND (f.spec -> 'on_failure' ? h.step_id"
			"         OR (f.state = 'timed_out' AND f.spec -> 'on_timeout' ? h.step_id)"
			"         OR (f.step_id = ANY (h.deps) AND h.join_policy IN ('all_finished', 'any')))))"
			" FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2", false, 0, SPI_OK_SELECT);
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) == 0)
	{
		char	   *unhandled = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 5);

		if (unhandled != NULL)
		{
			fail_run(r, "step_failed", unhandled, "every step that would have handled its failure was skipped");
			return;
		}
		out = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		if (r->state != RS_RUNNING)
			orch_set_run_state(r, RS_RUNNING, NULL, NULL);
		orch_set_run_state(r, RS_SUCCEEDED, "completed", out);
		return;
	}
	/*
	 * Waiting for a human when nothing else moves (no step executes, is
	 * ready or waits for a timer: parallel branches keep the run running
	 * and their tasks claimable), else running.
	 */
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)) > 0 &&
		DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull)) == 0)
	{
		if (r->state == RS_RUNNING)
			orch_set_run_state(r, RS_WAITING_APPROVAL, "approval_requested", NULL);
	}
	else if (r->state == RS_WAITING_APPROVAL)
		orch_set_run_state(r, RS_RUNNING, "approval_decided", NULL);
}

/*
 * A human_approval step whose timeout passed: the request expires.  That is
 * no decision: the step times out (it follows on_timeout, else the run
 * fails) with the reason approval_expired, and whoever's call noticed it
 * (maintenance, or a worker or approver progressing the run), the label of
 * its events is the maintenance pass's, "orchestrator", never a person's.
 * A run that waited for it runs again (approval_expired, not
 * approval_decided) before the step's outcome is followed.
 */
static void
approval_expired(RunRow *r, const char *step)
{
	int			ev;

	ev = orch_set_event_context("orchestrator", "the approval request expired");
	orch_run_settle_approval(r, step, false, APPROVAL_EXPIRED, NULL);
	if (r->state == RS_WAITING_APPROVAL)
		orch_set_run_state(r, RS_RUNNING, "approval_expired", NULL);
	step_failed(r, step, "timed_out", "the approval request expired (its timeout passed)", false,
				"approval_expired");
	orch_clear_event_context(ev);
}

/* A running task step whose tasks settled, as collect_task_steps reads it */
typedef struct StepOutcome
{
	char	   *step;
	char	   *state;			/* succeeded, failed, timed_out; NULL: still running */
	Jsonb	   *output;
	char	   *error;
	char	   *classes;		/* the error classes of its tasks */
	bool		is_decision;
	bool		by_rules;		/* a decision with rules or a default */
	char	   *from;			/* the step's state: running or retrying */
	Jsonb	   *schema;			/* its output_schema */
} StepOutcome;

/*
 * The step a decision with a handler chooses: by its rules (or default) on
 * its result ($.result), else the one declared target its result names as
 * {"next": ...}.  NULL when it chooses none (the step failed: said here).
 */
static char *
handled_decision_choice(RunRow *r, StepOutcome *o)
{
	OrchArgs	a = {0};
	char	   *chosen;

	if (o->by_rules)
	{
		chosen = orch_run_decide(r, o->step, o->output);
		if (chosen == NULL)
			orch_run_step_failed(r, o->step, "failed",
								 "no rule matched and the decision has no default", false);
		return chosen;
	}
	step_args(&a, r, o->step);
	orch_arg_text(&a, NULL);	/* $4: not used */
	orch_arg_jsonb(&a, o->output);
	if (orch_args_sql(&a, "SELECT $5 ->> 'next' FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
				 " AND step_id = $3 AND jsonb_typeof($5 -> 'next') = 'string'"
				 " AND spec -> 'targets' @> jsonb_build_array($5 -> 'next')", false, 0, SPI_OK_SELECT) == 0)
	{
		orch_run_step_failed(r, o->step, "failed",
							 "the decision's result does not name one of its declared targets (\"next\")",
							 false);
		return NULL;
	}
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/* One settled task step: succeeded (its output checked first) or failed */
static void
settle_task_step(RunRow *r, StepOutcome *o)
{
	OrchArgs	a = {0};

	if (strcmp(o->state, "succeeded") == 0)
	{
		char	   *chosen = NULL;
		char	   *mismatch = output_mismatch(o->schema, o->output);

		/* the output first: a decision decides on a result that matches */
		if (mismatch != NULL)
		{
			step_failed(r, o->step, "failed", mismatch, false, "output_schema_mismatch");
			return;
		}
		if (o->is_decision && (chosen = handled_decision_choice(r, o)) == NULL)
			return;
		orch_run_step_succeeded(r, o->step, o->from, o->output, chosen);
		return;
	}
	/* one item failed: the others of a map step stop */
	step_args(&a, r, psprintf("%s#", o->step));
	orch_run_cancel_tasks("SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
						  "   AND left(step_key, length($3)) = $3 AND state NOT IN ('completed', 'failed', 'cancelled')"
						  "   ORDER BY id FOR UPDATE SKIP LOCKED",
						  &a, r->tenant, "map_item_failed");
	orch_run_step_failed(r, o->step, o->state, o->error,
						 o->classes != NULL && strstr(o->classes, "COMPENSATION_REQUIRED") != NULL);
}

/* Running (or retrying) task steps: all their tasks completed, or one failed / cancelled */
static void
collect_task_steps(RunRow *r)
{
	OrchArgs	a = {0};
	int			nrows;
	StepOutcome *outcomes;
	bool		isnull;

	step_args(&a, r, NULL);
	nrows = (int) orch_args_sql(&a, "SELECT s.step_id, CASE"
			"   WHEN bool_or(t.state IN ('failed', 'cancelled')) THEN"
			"     CASE WHEN bool_or(t.state = 'failed' AND EXISTS (SELECT 1 FROM orch.attempts a"
			"         WHERE a.task_id = t.id AND a.tenant_id = $2 AND a.outcome = 'timed_out' AND a.attempt = t.attempts)) THEN 'timed_out'"
			"     ELSE 'failed' END"
			"   WHEN count(*) = count(*) FILTER (WHERE t.state = 'completed')"
			"        AND count(*) = coalesce(s.items_total, 1)"
			"     THEN 'succeeded' END,"
			" CASE WHEN s.spec ? 'map' THEN jsonb_agg(t.result ORDER BY nullif(split_part(t.step_key, '#', 2), '')::int)"
			"      ELSE (array_agg(t.result))[1] END,"
			" string_agg(DISTINCT coalesce(t.last_error, CASE WHEN t.state = 'cancelled' THEN 'cancelled' END), '; '),"
			" string_agg(DISTINCT t.last_error_class, ','),"
			" s.type = 'decision', s.spec ? 'rules' OR s.spec ? 'default', s.state, s.spec -> 'output_schema'"
			" FROM orch.run_steps s JOIN orch.tasks t ON t.run_id = s.run_id AND t.tenant_id = s.tenant_id"
			"   AND (t.step_key = s.step_id OR left(t.step_key, length(s.step_id) + 1) = s.step_id || '#')"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state IN ('running', 'retrying')"
			" GROUP BY s.step_id, s.spec, s.items_total, s.ord, s.type, s.state ORDER BY s.ord", false, 0, SPI_OK_SELECT);
	outcomes = palloc(sizeof(StepOutcome) * (nrows + 1));
	for (int i = 0; i < nrows; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		StepOutcome *o = &outcomes[i];
		Datum		d;

		o->step = SPI_getvalue(tup, td, 1);
		o->state = SPI_getvalue(tup, td, 2);
		d = SPI_getbinval(tup, td, 3, &isnull);
		o->output = isnull ? NULL : DatumGetJsonbPCopy(d);
		o->error = SPI_getvalue(tup, td, 4);
		o->classes = SPI_getvalue(tup, td, 5);
		o->is_decision = DatumGetBool(SPI_getbinval(tup, td, 6, &isnull));
		o->by_rules = DatumGetBool(SPI_getbinval(tup, td, 7, &isnull));
		o->from = SPI_getvalue(tup, td, 8);
		d = SPI_getbinval(tup, td, 9, &isnull);
		o->schema = isnull ? NULL : DatumGetJsonbPCopy(d);
	}
	for (int i = 0; i < nrows; i++)
	{
		if (outcomes[i].state == NULL)
			continue;			/* still running */
		if (orch_run_terminal(r->state))
			break;
		settle_task_step(r, &outcomes[i]);
	}
}

/*
 * Map steps that can hand out more items, soft caps passed (a step's
 * timeout), due timers: one look for all three.
 */
static void
collect_timers(RunRow *r)
{
	OrchArgs	a = {0};
	int			nrows;
	char	  **steps;
	char	  **states;

	step_args(&a, r, NULL);
	nrows = (int) orch_args_sql(&a, "SELECT step_id, CASE WHEN cap_at <= clock_timestamp()"
			"     AND state = 'awaiting_approval' THEN 'expired'"
			"   WHEN cap_at <= clock_timestamp()"
			"     AND state IN ('running', 'retrying', 'waiting') THEN 'cap'"
			"   WHEN state = 'waiting' AND wake_at <= clock_timestamp() THEN 'waiting'"
			"   ELSE 'map' END"
			" FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			" AND ((state IN ('running', 'retrying', 'waiting', 'awaiting_approval') AND cap_at <= clock_timestamp())"
			"   OR (state = 'waiting' AND wake_at <= clock_timestamp())"
			"   OR (state = 'running' AND items_total IS NOT NULL AND type <> 'subflow')) ORDER BY ord",
			false, 0, SPI_OK_SELECT);
	steps = orch_spi_column(1);
	states = orch_spi_column(2);
	for (int i = 0; i < nrows && !orch_run_terminal(r->state) && strcmp(r->phase, "compensating") != 0; i++)
		if (strcmp(states[i], "map") == 0)
			map_fill(r, steps[i], true);
	for (int i = 0; i < nrows && !orch_run_terminal(r->state); i++)
	{
		if (strcmp(states[i], "map") == 0)
			continue;
		if (strcmp(states[i], "waiting") == 0)
			orch_run_step_succeeded(r, steps[i], "waiting", NULL, NULL);
		else if (strcmp(states[i], "expired") == 0)
			approval_expired(r, steps[i]);
		else
		{
			/* the step's timeout passed: its open tasks stop, it follows on_timeout */
			OrchArgs	s = {0};

			step_args(&s, r, steps[i]);
			orch_run_cancel_tasks("SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
								  "   AND (step_key = $3 OR left(step_key, length($3) + 1) = $3 || '#')"
								  "   AND state NOT IN ('completed', 'failed', 'cancelled') ORDER BY id FOR UPDATE SKIP LOCKED",
								  &s, r->tenant, "step_timed_out");
			orch_run_step_failed(r, steps[i], "timed_out", "the step's timeout passed", false);
		}
	}
}

/* Compensation tasks that finished, while the run compensates */
static void
collect_compensations(RunRow *r)
{
	OrchArgs	a = {0};
	int			nrows;
	char	  **steps;
	char	  **states;

	if (strcmp(r->phase, "compensating") != 0 || orch_run_terminal(r->state))
		return;
	step_args(&a, r, NULL);
	nrows = (int) orch_args_sql(&a, "UPDATE orch.run_steps s SET comp_state = CASE WHEN t.state = 'completed' THEN 'done' ELSE 'failed' END"
				" FROM orch.tasks t WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.comp_state = 'running'"
				"   AND t.id = s.comp_task_id AND t.tenant_id = s.tenant_id"
				"   AND t.state IN ('completed', 'failed', 'cancelled')"
				" RETURNING s.step_id, s.comp_state", false, 0, SPI_OK_UPDATE_RETURNING);
	steps = orch_spi_column(1);
	states = orch_spi_column(2);
	for (int i = 0; i < nrows; i++)
		orch_step_event(r, steps[i], "succeeded", "succeeded",
						strcmp(states[i], "done") == 0 ? "compensated" : "compensation_failed");
	orch_run_advance_compensation(r);
}

/*
 * Steps waiting for a signal that one was sent for: each consumes the
 * oldest of its name, the steps in the order they began to wait.  Only
 * when a signal was sent or the run resumed (signals_due: a step that
 * begins to wait takes a kept signal itself), not while the run is paused
 * (its signals wait for the resume), nor once it compensates.  After the
 * timers: a wait whose timeout passed times out and leaves the signal to a
 * later wait.
 */
static void
collect_signals(RunRow *r)
{
	int			n;
	char	  **steps;

	if (!r->signals_due || r->state == RS_PAUSED || orch_run_terminal(r->state) ||
		strcmp(r->phase, "forward") != 0)
		return;
	r->signals_due = false;
	if ((n = orch_run_signal_waits(r)) == 0)
		return;
	steps = orch_spi_column(1);
	for (int i = 0; i < n && !orch_run_terminal(r->state) && strcmp(r->phase, "forward") == 0; i++)
	{
		int64		signal;
		Jsonb	   *payload;

		if (orch_run_take_signal(r, steps[i], &signal, &payload))
			signal_step_settle(r, steps[i], signal, payload);
	}
}

/* What subflow_settle did with a step */
enum
{
	SUBFLOW_WAITS,				/* nothing: it waits for its children */
	SUBFLOW_STARTED,			/* it started more children (a map) */
	SUBFLOW_SETTLED				/* it ended */
};

/*
 * One subflow step whose children moved: one failed or was canceled (the
 * step fails; its other children are canceled with it), all succeeded (the
 * step succeeds with the child's output, or a map's in item order, checked
 * against its output_schema), or a map has items left to start.
 */
static int
subflow_settle(RunRow *r, const char *step, int64 failed, bool done, bool is_map, Jsonb *schema)
{
	OrchArgs	a = {0};
	bool		isnull;
	Datum		d;
	Jsonb	   *out;
	char	   *mismatch;

	step_args(&a, r, step);
	if (failed != 0)
	{
		orch_arg_int8(&a, failed);
		orch_args_sql(&a, "SELECT state, coalesce(error, reason_code) FROM orch.runs WHERE id = $4 AND tenant_id = $2",
					  false, 0, SPI_OK_SELECT);
		orch_run_step_failed(r, step, "failed",
							 psprintf("sub-workflow run " INT64_FORMAT " %s: %s", failed,
									  SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
									  SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)), false);
		return SUBFLOW_SETTLED;
	}
	if (!done)
	{
		if (r->state == RS_PAUSED || strcmp(r->phase, "forward") != 0)
			return SUBFLOW_WAITS;
		switch (subflow_fill(r, step))
		{
			case -1:
				return SUBFLOW_SETTLED;
			case 1:
				return SUBFLOW_STARTED;
			default:
				return SUBFLOW_WAITS;
		}
	}
	orch_arg_bool(&a, is_map);
	orch_args_sql(&a, "SELECT CASE WHEN $4 THEN coalesce(jsonb_agg(output ORDER BY parent_index), '[]')"
				  "   ELSE (array_agg(output))[1] END"
				  " FROM orch.runs WHERE parent_run_id = $1 AND tenant_id = $2 AND parent_step = $3"
				  "   AND id > $1 AND state = 'succeeded'", false, 0, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	out = isnull ? NULL : DatumGetJsonbPCopy(d);
	mismatch = output_mismatch(schema, out);
	if (mismatch != NULL)
		step_failed(r, step, "failed", mismatch, false, "output_schema_mismatch");
	else
		step_succeeded(r, step, "running", out, NULL, "step_succeeded");
	return SUBFLOW_SETTLED;
}

/*
 * The running subflow steps of run r (only step, unless NULL) whose children
 * moved, settled (subflow_settle).  True when one settled.
 */
static bool
subflow_look(RunRow *r, const char *step)
{
	OrchArgs	a = {0};
	bool		settled = false;
	bool		moved = true;

	if (r->root_run_id == 0)
		return false;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	/* again while a map started more children (they may have ended at once) */
	while (moved && !orch_run_terminal(r->state))
	{
		int			n;
		char	  **steps;
		int64	   *failed;
		bool	   *done;
		bool	   *is_map;
		Jsonb	  **schemas;
		bool		isnull;

		moved = false;
		n = (int) orch_args_sql(&a, "SELECT step_id, coalesce(child_failed, 0), items_done >= coalesce(items_total, 1),"
				" items_total IS NOT NULL, spec -> 'output_schema'"
				" FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND ($3::text IS NULL OR step_id = $3)"
				"   AND state = 'running' AND type = 'subflow'"
				"   AND (child_failed IS NOT NULL OR items_done >= coalesce(items_total, 1)"
				"     OR items_next < items_total)"
				" ORDER BY ord", false, 0, SPI_OK_SELECT);
		steps = orch_spi_column(1);
		failed = palloc(sizeof(int64) * (n + 1));
		done = palloc(sizeof(bool) * (n + 1));
		is_map = palloc(sizeof(bool) * (n + 1));
		schemas = palloc(sizeof(Jsonb *) * (n + 1));
		for (int i = 0; i < n; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	td = SPI_tuptable->tupdesc;
			Datum		d;

			failed[i] = DatumGetInt64(SPI_getbinval(tup, td, 2, &isnull));
			done[i] = DatumGetBool(SPI_getbinval(tup, td, 3, &isnull));
			is_map[i] = DatumGetBool(SPI_getbinval(tup, td, 4, &isnull));
			d = SPI_getbinval(tup, td, 5, &isnull);
			schemas[i] = isnull ? NULL : DatumGetJsonbPCopy(d);
		}
		for (int i = 0; i < n && !orch_run_terminal(r->state); i++)
			switch (subflow_settle(r, steps[i], failed[i], done[i], is_map[i], schemas[i]))
			{
				case SUBFLOW_SETTLED:
					settled = true;
					break;
				case SUBFLOW_STARTED:
					moved = true;
					break;
				default:
					break;
			}
	}
	return settled;
}

/* Settle steps whose tasks, timers, signals or approvals have finished. */
static void
collect_outcomes(RunRow *r)
{
	collect_task_steps(r);
	collect_timers(r);
	collect_signals(r);
	(void) subflow_look(r, NULL);
	collect_compensations(r);
}

/*
 * A step's task entered or left a retry wait (noted by the task trigger):
 * the step reads retrying while its task waits for its next attempt
 * (awaiting_tool with retry_at), running again once it is claimed; one
 * statement for the run, one step event per change (retry_scheduled /
 * retry_started).  Steps with one task only: a map step reads running
 * while any of its items runs or waits.
 */
#define RETRY_STEP_STATE \
	"CASE WHEN t.state = 'awaiting_tool' AND t.retry_at IS NOT NULL THEN 'retrying' ELSE 'running' END"

void
orch_run_sync_retrying(RunRow *r)
{
	OrchArgs	a = {0};
	int			n;
	char	  **steps;
	char	  **to;

	if (orch_run_terminal(r->state))
		return;
	step_args(&a, r, NULL);
	n = (int) orch_args_sql(&a, "UPDATE orch.run_steps s SET state = " RETRY_STEP_STATE
			" FROM orch.tasks t"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state IN ('running', 'retrying')"
			"   AND s.items_total IS NULL AND t.id = s.task_id AND t.tenant_id = s.tenant_id"
			"   AND t.run_id = s.run_id AND t.state IN ('executing', 'awaiting_tool')"
			"   AND s.state <> " RETRY_STEP_STATE
			" RETURNING s.step_id, s.state", false, 0, SPI_OK_UPDATE_RETURNING);
	steps = orch_spi_column(1);
	to = orch_spi_column(2);
	for (int i = 0; i < n; i++)
	{
		bool		retrying = strcmp(to[i], "retrying") == 0;

		orch_step_event(r, steps[i], retrying ? "running" : "retrying", to[i],
						retrying ? "retry_scheduled" : "retry_started");
	}
}

/* Move pending steps to ready or skipped, start ready ones, finish. */
static void advance_steps(RunRow *r);

void
orch_run_advance(RunRow *r)
{
	int64		prev = orch_run_busy_begin(r->id);

	orch_run_busy_on_shard_begin(r);
	advance_steps(r);
	orch_run_busy_end(prev);
}

/*
 * Pending steps that never will run become skipped; those that can run are
 * listed to be started now (they go from pending to their started state in
 * one write; in a paused run they are marked ready instead, and started on
 * resume); with them the steps that were ready before (the second SELECT
 * sees the rows as they were before the UPDATE), in step order.
 */
#define PENDING_CANDIDATE \
	"s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'pending'" \
	/* cheap first: a step none of whose dependencies has finished cannot change */ \
	" AND (cardinality(s.deps) = 0 OR s.needs_edge" \
	"      OR s.deps && (SELECT coalesce(array_agg(f.step_id), '{}') FROM orch.run_steps f" \
	"                     WHERE f.run_id = $1 AND f.tenant_id = $2 AND f.state IN " TERMINAL_STEP "))"

/*
 * List the steps to start (in SPI_tuptable), skipping those that never will
 * run.  A running run first looks without writing (a plan a third as large
 * to start): when no pending step is to be skipped, what it lists is
 * exactly what the full statement would return.  True when the statement
 * that writes ran (its rows carry the reason of the steps it moved).
 */
static bool
list_steps_to_start(RunRow *r, OrchArgs *run)
{
	OrchArgs	a;
	bool		isnull;

	if (r->state != RS_PAUSED)
	{
		bool		must_skip = false;

		orch_args_sql(run, "SELECT s.step_id, 'ready', s.type, s.spec ? 'map', s.spec ? 'handler', s.ord,"
				"   (" CANNOT_RUN "), " STEP_TIMEOUT " FROM orch.run_steps s"
				"  WHERE " PENDING_CANDIDATE " AND ((" CANNOT_RUN ") OR (" CAN_RUN "))"
				" UNION ALL"
				" SELECT s.step_id, s.state, s.type, s.spec ? 'map', s.spec ? 'handler', s.ord, false, " STEP_TIMEOUT
				"  FROM orch.run_steps s WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'ready'"
				" ORDER BY ord", false, 0, SPI_OK_SELECT);
		for (uint64 k = 0; k < SPI_processed && !must_skip; k++)
			must_skip = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, 7, &isnull));
		if (!must_skip)
			return false;
	}
	a = *run;					/* the run and its tenant, then $3 and $4 */
	orch_arg_bool(&a, r->state == RS_PAUSED);
	orch_arg_clock(&a);
	orch_args_sql(&a, "WITH u AS (UPDATE orch.run_steps s SET"
			"   state = CASE WHEN (" CANNOT_RUN ") THEN 'skipped' ELSE 'ready' END,"
			"   finished_at = CASE WHEN (" CANNOT_RUN ") THEN $4 END"
			"  WHERE " PENDING_CANDIDATE
			"    AND ((" CANNOT_RUN ") OR ($3 AND (" CAN_RUN ")))"
			"  RETURNING s.step_id, s.state, s.type, s.spec ? 'map' AS is_map,"
			"    s.spec ? 'handler' AS has_handler, s.ord,"
			/* the reason of its event: why skipped, or ready in a paused run */
			"    CASE WHEN s.state = 'skipped' THEN " SKIP_REASON " ELSE 'step_ready' END AS reason,"
			/* read as an interval out here: Citus refuses a stable function in RETURNING */
			"    s.spec -> 'timeout' AS timeout)"
			" SELECT step_id, state, type, is_map, has_handler, ord, reason, " RUN_JSON_INTERVAL("timeout") " FROM u"
			" UNION ALL"
			" SELECT s.step_id, 'ready', s.type, s.spec ? 'map', s.spec ? 'handler', s.ord, NULL, " STEP_TIMEOUT
			"  FROM orch.run_steps s WHERE NOT $3 AND " PENDING_CANDIDATE
			"    AND NOT (" CANNOT_RUN ") AND (" CAN_RUN ")"
			" UNION ALL"
			" SELECT s.step_id, s.state, s.type, s.spec ? 'map', s.spec ? 'handler', s.ord, NULL, " STEP_TIMEOUT
			"  FROM orch.run_steps s WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'ready'"
			" ORDER BY ord", false, 0, SPI_OK_SELECT);
	return true;
}

/* A step listed to be started */
typedef struct ReadyStep
{
	char	   *step;
	char	   *type;
	bool		is_map;
	bool		has_handler;
	Interval   *timeout;
} ReadyStep;

/*
 * Read the steps list_steps_to_start listed: the ones to start into ready
 * (returns how many), the skipped ones counted in *skipped; the events of
 * the steps the writing statement moved (skipped, or ready in a paused run)
 * written with one insert.
 */
static int
read_listed_steps(RunRow *r, bool wrote, ReadyStep **ready, int *skipped)
{
	SPITupleTable *tt = SPI_tuptable;
	uint64		n = SPI_processed;
	int			nready = 0;
	int			nmoved = 0;
	char	  **moved = palloc(sizeof(char *) * (n + 1));
	char	  **moved_to = palloc(sizeof(char *) * (n + 1));
	char	  **moved_why = palloc(sizeof(char *) * (n + 1));
	bool		isnull;

	*ready = palloc(sizeof(ReadyStep) * (n + 1));
	*skipped = 0;
	for (uint64 k = 0; k < n; k++)
	{
		HeapTuple	tup = tt->vals[k];
		TupleDesc	td = tt->tupdesc;
		char	   *st = SPI_getvalue(tup, td, 2);
		char	   *why = wrote ? SPI_getvalue(tup, td, 7) : NULL;
		ReadyStep  *rs;
		Datum		d;

		if (why != NULL)
		{
			moved[nmoved] = SPI_getvalue(tup, td, 1);
			moved_to[nmoved] = st;
			moved_why[nmoved++] = why;
		}
		if (strcmp(st, "skipped") == 0)
		{
			(*skipped)++;
			continue;
		}
		rs = &(*ready)[nready++];
		rs->step = SPI_getvalue(tup, td, 1);
		rs->type = SPI_getvalue(tup, td, 3);
		rs->is_map = DatumGetBool(SPI_getbinval(tup, td, 4, &isnull));
		rs->has_handler = DatumGetBool(SPI_getbinval(tup, td, 5, &isnull));
		d = SPI_getbinval(tup, td, 8, &isnull);
		rs->timeout = NULL;
		if (!isnull)
		{
			rs->timeout = palloc(sizeof(Interval));
			*rs->timeout = *DatumGetIntervalP(d);
		}
	}
	if (nmoved > 0)
	{
		orch_events_defer();
		for (int i = 0; i < nmoved; i++)
			orch_step_event(r, moved[i], "pending", moved_to[i], moved_why[i]);
		orch_events_undefer(true);
	}
	return nready;
}

static void
advance_steps(RunRow *r)
{
	OrchArgs	run = {0};
	bool		started_task = false;
	bool		started_other = false;

	step_args(&run, r, NULL);
	for (int round = 0; round < 10000; round++)
	{
		int			changed;
		int			skipped;
		int			nready;
		ReadyStep  *ready;
		bool		wrote;

		if (orch_run_terminal(r->state) || strcmp(r->phase, "compensating") == 0)
			return;
		wrote = list_steps_to_start(r, &run);
		/* a skipped step may let its dependants be settled in another round */
		nready = read_listed_steps(r, wrote, &ready, &skipped);
		if (r->state == RS_PAUSED)
		{
			if (skipped == 0)
				break;
			continue;
		}
		/*
		 * Another round only when something may have unlocked more steps:
		 * a step skipped, or one that finished as soon as it started.
		 */
		changed = skipped;
		for (int i = 0; i < nready && !orch_run_terminal(r->state) && r->state != RS_PAUSED &&
			 strcmp(r->phase, "compensating") != 0; i++)
		{
			ReadyStep  *rs = &ready[i];

			if (start_step(r, rs->step, rs->type, rs->is_map, rs->has_handler, rs->timeout))
				changed++;
			else if (strcmp(rs->type, "human_approval") == 0 || strcmp(rs->type, "wait") == 0)
				started_other = true;
			else
				started_task = true;
		}
		if (changed == 0)
			break;
	}

	/*
	 * A running run that just handed out a task is not finished and waits
	 * for no human: nothing to look at.  Otherwise: finished, waiting for
	 * approval, or back to running.
	 */
	if (started_task && !started_other && r->state == RS_RUNNING)
		return;
	run_maybe_finish(r);
}

/* Everything a run needs after one of its tasks, timers or approvals moved. */
void
orch_run_progress(RunRow *r)
{
	int64		prev;

	if (orch_run_terminal(r->state))
		return;
	/* the tasks it changes itself need no second pass */
	prev = orch_run_busy_begin(r->id);
	orch_run_busy_on_shard_begin(r);
	if (r->past_deadline && strcmp(r->phase, "compensating") != 0)
		fail_run(r, "deadline_exceeded", NULL, "the run's deadline passed");
	else
	{
		collect_outcomes(r);
		orch_run_advance(r);
	}
	orch_run_busy_end(prev);
}


/* Nothing for the general path's second look: no timer or soft cap due by NOW */
#define NO_TIMER_DUE(NOW) \
	" NOT EXISTS (SELECT 1 FROM orch.run_steps o WHERE o.run_id = $1 AND o.tenant_id = $2" \
	"     AND ((o.state IN ('running', 'retrying', 'waiting', 'awaiting_approval') AND o.cap_at <= " NOW ")" \
	"       OR (o.state = 'waiting' AND o.wake_at <= " NOW ")))"

/*
 * One completed item of a running map step: counted; the step succeeds when
 * it was the last (its output: the items' results in item order), else the
 * slot it freed goes to the next item.  False when this is not the case
 * (the general path then runs).
 */
static bool
map_item_completed(RunRow *r, int64 task_id, const char *step_key)
{
	const char *hash = strchr(step_key, '#');
	char	   *step = pnstrdup(step_key, hash - step_key);
	OrchArgs	a = {0};
	OrchArgs	last = {0};
	bool		isnull;
	bool		has_edges;

	step_args(&a, r, step);
	orch_arg_int8(&a, task_id);
	orch_arg_text(&a, step_key);
	orch_arg_clock(&a);
	if (orch_args_sql(&a, "UPDATE orch.run_steps s SET items_done = s.items_done + 1"
			" FROM orch.tasks t"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND s.state = 'running'"
			"   AND s.items_total IS NOT NULL AND s.type <> 'decision'"
			"   AND t.id = $4 AND t.tenant_id = $2 AND t.run_id = $1 AND t.step_key = $5"
			"   AND t.state = 'completed' AND" NO_TIMER_DUE("$6")
			" RETURNING s.items_done >= s.items_total, s.spec ? 'output_schema'", false, 0, SPI_OK_UPDATE_RETURNING) != 1)
		return false;
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
	{
		map_fill(r, step, false);
		return true;
	}
	/* the last one of a step with an output_schema: the general path checks the output */
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		return false;
	/* the last one: the results, in item order, read once */
	step_args(&last, r, step);
	orch_arg_clock(&last);
	orch_args_sql(&last, "UPDATE orch.run_steps s SET " STEP_SUCCEEDED_SET(
			"(SELECT jsonb_agg(t.result ORDER BY split_part(t.step_key, '#', 2)::int) FROM orch.tasks t"
			"  WHERE t.run_id = $1 AND t.tenant_id = $2 AND left(t.step_key, length($3) + 1) = $3 || '#')",
			"$4")
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND s.state = 'running'"
			STEP_SUCCEEDED_RETURNING, false, 0, SPI_OK_UPDATE_RETURNING);
	has_edges = SPI_processed == 1 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) && !isnull;
	orch_step_event(r, step, "running", "succeeded", "step_succeeded");
	if (has_edges)
		take_edges(r, step, "on_success");
	orch_run_advance(r);
	return true;
}

/*
 * orch_run_progress after a task of the run completed: when it is the task
 * of a running plain step (not a decision) or an item of a running map step,
 * and no step of the run has a timer or soft cap due, the step is settled
 * in a statement or two without collecting every running step's tasks; the
 * run then advances (the caller has marked it busy).  Anything else takes
 * the general path, orch_run_progress, which would do exactly this in that
 * case, and then false is returned (it looked at everything).
 */
bool
orch_run_progress_completed(RunRow *r, int64 task_id, const char *step_key)
{
	OrchArgs	a = {0};
	bool		has_edges;
	bool		isnull;

	if (orch_run_terminal(r->state) || r->past_deadline || strcmp(r->phase, "forward") != 0)
	{
		orch_run_progress(r);
		return false;
	}
	if (strchr(step_key, '#') != NULL)
	{
		if (map_item_completed(r, task_id, step_key))
			return true;
		orch_run_progress(r);
		return false;
	}
	step_args(&a, r, step_key);
	orch_arg_int8(&a, task_id);
	orch_arg_clock(&a);
	if (orch_args_sql(&a, "UPDATE orch.run_steps s SET " STEP_SUCCEEDED_SET("t.result", "$5")
			" FROM orch.tasks t"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND s.state = 'running'"
			"   AND s.task_id = $4 AND s.type <> 'decision' AND NOT s.spec ? 'map'"
			"   AND NOT s.spec ? 'output_schema'"
			"   AND t.id = $4 AND t.tenant_id = $2 AND t.state = 'completed' AND" NO_TIMER_DUE("$5")
			STEP_SUCCEEDED_RETURNING, false, 0, SPI_OK_UPDATE_RETURNING) != 1)
	{
		orch_run_progress(r);
		return false;
	}
	has_edges = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
		!isnull;
	orch_step_event(r, step_key, "running", "succeeded", "step_succeeded");
	if (has_edges)
		take_edges(r, step_key, "on_success");
	orch_run_advance(r);
	return true;
}

/*
 * The run's steps from its definition ($1 the run, $2 its tenant), each
 * with the spec SPEC makes of its definition's step x.step
 */
#define CREATE_STEPS(SPEC) \
	"INSERT INTO orch.run_steps (run_id, tenant_id, step_id, ord, type, spec, deps, join_policy, out_edges)" \
	" SELECT $1, $2, x.step ->> 'step_id', x.n, coalesce(x.step ->> 'type', 'task'), " SPEC "," \
	"   coalesce(ARRAY(SELECT jsonb_array_elements_text(x.step -> 'depends_on')), '{}')," \
	"   coalesce(x.step ->> 'join', 'all_succeeded')," \
	"   ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof(x.step -> k.key) = 'array' THEN x.step -> k.key" \
	"          WHEN jsonb_typeof(x.step -> k.key) = 'string' THEN jsonb_build_array(x.step -> k.key)" \
	"          ELSE '[]' END)" \
	"         FROM (VALUES ('on_success'), ('on_failure'), ('on_timeout'), ('targets')) k(key))" \
	" FROM orch.runs r JOIN orch.definitions d" \
	"   ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'," \
	"   jsonb_array_elements(d.spec -> 'steps') WITH ORDINALITY AS x(step, n)" \
	" WHERE r.id = $1 AND r.tenant_id = $2"

/* A subflow step's version: the one it names, else the latest published now */
#define SUBFLOW_STEP_SPEC \
	"CASE WHEN x.step ->> 'type' = 'subflow' AND NOT x.step ? 'version'" \
	"  THEN x.step || jsonb_build_object('version', (SELECT max(v.version) FROM orch.definitions v" \
	"    WHERE v.name = x.step ->> 'definition' AND v.tenant_id = 'default' AND v.status = 'published'))" \
	"  ELSE x.step END"

/*
 * Create the run's steps from its definition.  A run of a family (its
 * definition has subflow steps, or it is a sub-workflow) pins its subflow
 * steps' versions: one with no published version refuses the start (OR005).
 */
void
orch_run_create_steps(RunRow *r)
{
	OrchArgs	a = {0};

	step_args(&a, r, NULL);
	/*
	 * Plain statements with small row estimates: one cross product of the
	 * steps' JSON here would be costed high enough to be JIT-compiled.
	 */
	if (r->root_run_id == 0)
		orch_args_sql(&a, CREATE_STEPS("x.step"), false, 0, SPI_OK_INSERT);
	else if (orch_args_sql(&a, "WITH i AS (" CREATE_STEPS(SUBFLOW_STEP_SPEC) " RETURNING step_id, type, spec)"
						   " SELECT step_id, spec ->> 'definition', coalesce(' ' || (spec ->> 'version'), '') FROM i"
						   " WHERE type = 'subflow' AND (spec -> 'version' = 'null' OR NOT EXISTS (SELECT 1"
						   "   FROM orch.definitions v WHERE v.name = i.spec ->> 'definition' AND v.tenant_id = 'default'"
						   "     AND v.version = (i.spec ->> 'version')::int AND v.status = 'published'))"
						   " ORDER BY step_id LIMIT 1", false, 0, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("workflow \"%s\" of step \"%s\" has no published version%s",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)),
				 errhint("Publish it with orch_publish first: a subflow step starts the version it names, else the latest published when its run starts.")));
	orch_args_sql(&a, "UPDATE orch.run_steps s SET needs_edge = true"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND EXISTS (SELECT 1 FROM orch.run_steps x"
			"   WHERE x.run_id = $1 AND x.tenant_id = $2 AND s.step_id = ANY (x.out_edges))", false, 0, SPI_OK_UPDATE);
}

/*
 * Progress the noted runs: at statement end (runs.c), and at the end of
 * the calls that act on a run (a sub-workflow that ended there noted its
 * parent).
 */
void
orch_run_flush_notes(void)
{
	volatile bool deferred;
	RunNote		note;

	/* not again from the statements of the progression itself, nor inside another run's */
	if (!orch_run_notes_pending() || orch_run_busy_now() || !orch_run_flush_enter())
		return;
	/* the events of the progression go in with one INSERT at its end */
	orch_events_defer();
	deferred = true;
	PG_TRY();
	{
		/*
		 * runs locked in one order by every session: no lock-order deadlock
		 * (the order asks which families the runs are in: a query of its own)
		 */
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "orchestrator: SPI_connect failed");
		orch_run_notes_sort();
		SPI_finish();
		while (orch_run_notes_next(&note))
		{
			RunRow		r;

			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "orchestrator: SPI_connect failed");
			if (orch_lock_run(note.run_id, note.tenant, &r))
			{
				int64		prev = orch_run_busy_begin(note.run_id);

				/* a retry wait began or ended: the step's state follows */
				if (note.retry)
					orch_run_sync_retrying(&r);
				if (note.general)
					orch_run_progress(&r);
				else if (note.done != NIL)
				{
					/* one completion at a time, until one needs the general path */
					ListCell   *lc;

					foreach(lc, note.done)
					{
						RunDone    *d = (RunDone *) lfirst(lc);

						if (!orch_run_progress_completed(&r, d->task_id, d->step_key))
							break;
					}
				}
				orch_run_busy_end(prev);
			}
			SPI_finish();
		}
		if (deferred)
		{
			deferred = false;
			orch_events_undefer(true);
		}
	}
	PG_FINALLY();
	{
		orch_run_flush_leave();
		if (deferred)
			orch_events_undefer(false);
	}
	PG_END_TRY();
}
