/*
 * run_step_tasks.c
 *	  The tasks of workflow steps: a task step's task (or one per item of a
 *	  map step) and a step's compensation task, inserted with what the step
 *	  needs (its input, its dependencies' outputs, the retry policy, the
 *	  run's correlation id).  Callers hold the run's row lock and are
 *	  connected to SPI.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "run_internal.h"

/*
 * The task of a step; $1 run, $2 tenant, $3 step, $4 step key ($5 unused:
 * -1).  Its queue must exist (else no row).
 */
#define STEP_TASK_COLUMNS \
	"INSERT INTO orch.tasks (tenant_id, queue, state, payload, run_at, ready_at, retry_policy," \
	"  timeout, run_id, step_key, reason_code, priority, correlation_id)"
#define STEP_TASK_SELECT(PAYLOAD, KEY) \
	" SELECT $2, q.name, 'queued', " PAYLOAD "," \
	"  now(), now()," \
	"  coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || jsonb_strip_nulls(coalesce(s.spec -> 'retry_policy', '{}'))" \
	"   || jsonb_strip_nulls(jsonb_build_object('retry_safety'," \
	"        coalesce(s.spec ->> 'retry_safety', d.spec -> 'policies' ->> 'retry_safety')))," \
	"  NULL::interval," \
	"  $1, " KEY ", 'step_ready', coalesce((q.settings ->> 'priority')::int, 0), r.correlation_id" \
	" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id" \
	"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'" \
	"  CROSS JOIN LATERAL (SELECT qq.name, qq.settings FROM orch.queues qq" \
	"       WHERE qq.name = coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')) q"
/*
 * A task step's payload (pl.p): the run's input and its dependencies'
 * outputs, in a lateral sub-select over the dependencies (one row: an
 * aggregate), correlated on the step's run and tenant and naming the
 * tenant ($2): Citus pushes an INSERT ... SELECT down when its tables join
 * on the tenant, and routes the SELECT alone to one shard when each names
 * it.  Inserted only when it is at most $6 bytes
 * (orchestrator.max_step_input_size): else nothing is inserted and the
 * caller fails the step (STEP_TOO_LARGE).
 */
#define STEP_TASK_PAYLOAD \
	"  CROSS JOIN LATERAL (SELECT jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3," \
	"    'handler', s.spec ->> 'handler', 'input', r.input," \
	"    'deps', coalesce(jsonb_object_agg(x.step_id, x.output), '{}'))) AS p" \
	"   FROM orch.run_steps x WHERE x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND x.tenant_id = $2" \
	"     AND x.step_id = ANY (s.deps)) pl"
#define STEP_TASK_INSERT \
	STEP_TASK_COLUMNS \
	STEP_TASK_SELECT("pl.p", "$4") \
	STEP_TASK_PAYLOAD \
	" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND $5 < 0" \
	"   AND pg_catalog.pg_column_size(pl.p) <= $6"

/*
 * Items $5 .. $6 - 1 of a map step, one task each, from the step's items
 * ($7, read once by the caller): a map item carries its item and index, not
 * the run's input and dependencies' outputs (which would be copied once per
 * item: fan-out cost would grow with the square of the items).
 */
#define MAP_TASKS_INSERT \
	STEP_TASK_COLUMNS \
	STEP_TASK_SELECT("jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3, 'handler', s.spec ->> 'handler'))" \
					 " || jsonb_build_object('item', $7::jsonb -> g.i, 'index', g.i)", "$3 || '#' || g.i") \
	"  CROSS JOIN generate_series($5, $6 - 1) AS g(i)" \
	" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"

/* The compensation task of a step */
#define COMP_TASK_INSERT \
	"INSERT INTO orch.tasks (tenant_id, queue, state, payload, run_at, ready_at, retry_policy," \
	"  timeout, run_id, step_key, reason_code, correlation_id)" \
	" SELECT $2, q.name, 'queued'," \
	"  jsonb_build_object('run_id', $1, 'step_id', $3, 'compensation', s.spec -> 'compensation' ->> 'handler'," \
	"    'input', r.input, 'output', s.output)," \
	"  now(), now(), coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || jsonb_strip_nulls(coalesce(s.spec -> 'retry_policy', '{}'))," \
	"  NULL, $1, $4, 'compensation_ready', r.correlation_id" \
	" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id" \
	"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'" \
	"  CROSS JOIN LATERAL (SELECT coalesce(s.spec -> 'compensation' ->> 'queue', s.spec ->> 'queue'," \
	"       d.spec -> 'policies' ->> 'queue') AS name) q" \
	" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND $5 >= -1" \
	" RETURNING id"

/*
 * The queue of a step (or of its compensation), else the run policy's,
 * created on the way (orchestrator.auto_create_queues); false when it does
 * not exist and may not be created.
 */
static bool
step_queue_ready(RunRow *r, const char *step, bool compensation)
{
	OrchArgs	a = {0};
	char	   *queue;
	QueueSettings qs;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	if (orch_args_sql(&a, compensation
					  ? "SELECT coalesce(s.spec -> 'compensation' ->> 'queue', s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')"
					  "  FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
					  "  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
					  " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"
					  : "SELECT coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')"
					  "  FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
					  "  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
					  " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3", false, 0, SPI_OK_SELECT) == 0 ||
		(queue = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)) == NULL)
		elog(ERROR, "orchestrator: step \"%s\" of run " INT64_FORMAT " has no queue", step, r->id);
	if (!orch_load_queue(queue, &qs, NULL))
	{
		/* on Citus orch_start created it (a reference table is not written on a shard) */
		if (!orch_auto_create_queues || orch_citus())
			return false;
		orch_ensure_queue(queue);
	}
	return true;
}

/*
 * On Citus, the queues the steps of a run of definition spec will use,
 * created now when missing (orchestrator.auto_create_queues), by orch_start
 * and orch_retry_run: a step starts in the trigger of the statement that
 * finished the step before it, on the tenant's shard, where the queues (a
 * reference table, written on every node) cannot be written.  A task
 * step's or a map's queue, a human approval's (APPROVAL_DEFAULT_QUEUE
 * last), a compensation's, and a compensation approval's.  Read from the
 * spec and the queues (a reference table: read where the call runs).
 */
void
orch_run_ensure_step_queues(Jsonb *spec)
{
	OrchArgs	a = {0};
	char	  **queues;
	uint64		n;

	if (!orch_citus() || !orch_auto_create_queues)
		return;
	orch_arg(&a, JSONBOID, JsonbPGetDatum(spec), false);
	n = orch_args_sql(&a, "SELECT DISTINCT v.q FROM jsonb_array_elements($1 -> 'steps') st(s),"
					  "  LATERAL (VALUES"
					  "    (CASE WHEN s ? 'handler' OR s ? 'map' OR s ->> 'type' = 'human_approval'"
					  "       THEN coalesce(s ->> 'queue', $1 -> 'policies' ->> 'queue',"
					  "                     CASE WHEN s ->> 'type' = 'human_approval' THEN '" APPROVAL_DEFAULT_QUEUE "' END) END),"
					  "    (CASE WHEN s ? 'compensation' THEN coalesce(s -> 'compensation' ->> 'queue', s ->> 'queue',"
					  "       $1 -> 'policies' ->> 'queue',"
					  "       CASE WHEN s -> 'compensation' ->> 'mode' = 'approval' THEN '" APPROVAL_DEFAULT_QUEUE "' END) END)) v(q)"
					  " WHERE v.q IS NOT NULL AND NOT EXISTS (SELECT 1 FROM orch.queues qq WHERE qq.name = v.q)",
					  false, 0, SPI_OK_SELECT);
	queues = orch_spi_column(1);
	for (uint64 i = 0; i < n; i++)
		orch_ensure_queue(queues[i]);
}

/*
 * Enqueue the task of a step, or its compensation task; -1: no queue; -2:
 * the step's input is over orchestrator.max_step_input_size.
 */
int64
orch_run_enqueue_step_task(RunRow *r, const char *step, bool compensation)
{
	Oid			types[6] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, INT4OID, INT4OID};
	Datum		v[6];
	bool		isnull;

	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	v[3] = orch_text_datum(compensation ? psprintf("%s:compensate", step) : step);
	v[4] = Int32GetDatum(-1);
	v[5] = Int32GetDatum(orch_max_step_input_size);
	/*
	 * A task step's insert finds the queue itself and inserts nothing when it
	 * does not exist yet: only then is it looked up and created.
	 */
	for (int pass = 0; pass < 2; pass++)
	{
		if ((compensation || pass == 1) && !step_queue_ready(r, step, compensation))
			return -1;			/* the caller fails the step */
		if (orch_sql(compensation
				? COMP_TASK_INSERT : STEP_TASK_INSERT " RETURNING id", 6, types, v, NULL, false, 0, SPI_OK_INSERT_RETURNING) == 1)
			return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	/* the queue is there: a task step's input was too large */
	if (!compensation)
		return -2;
	elog(ERROR, "orchestrator: step task insert failed");
	return 0;					/* keep compiler quiet */
}

/*
 * Enqueue items from .. to - 1 of a map step (items: the step's items) in
 * one statement, and count them as created (items_next).  Returns how many,
 * or -1 when the step's queue does not exist and may not be created.
 */
int
orch_run_enqueue_map_items(RunRow *r, const char *step, int from, int to, Jsonb *items)
{
	Oid			types[7] = {INT8OID, TEXTOID, TEXTOID, TEXTOID, INT4OID, INT4OID, JSONBOID};
	Datum		v[7];
	char		n[7] = {' ', ' ', ' ', 'n', ' ', ' ', ' '};
	int			made = 0;

	if (to <= from)
		return 0;
	RUN_ARGS(v, r->id, r->tenant);
	v[2] = orch_text_datum(step);
	v[3] = (Datum) 0;
	v[4] = Int32GetDatum(from);
	v[5] = Int32GetDatum(to);
	v[6] = JsonbPGetDatum(items);
	for (int pass = 0; pass < 2 && made == 0; pass++)
	{
		if (pass == 1 && !step_queue_ready(r, step, false))
			return -1;
		made = (int) orch_sql("WITH t AS (" MAP_TASKS_INSERT " RETURNING 1)"
							  " UPDATE orch.run_steps SET items_next = $6"
							  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3 AND $4 IS NULL"
							  "   AND (SELECT count(*) FROM t) = $6 - $5"
							  " RETURNING $6 - $5", 7, types, v, n, false, 0, SPI_OK_UPDATE_RETURNING);
	}
	if (made == 0)
		elog(ERROR, "orchestrator: map item insert failed");
	return to - from;
}

/*
 * The error of a step whose input is over orchestrator.max_step_input_size:
 * its size, never its content.
 */
static char *
step_too_large(RunRow *r, const char *step)
{
	OrchArgs	a = {0};
	char	   *size;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_args_sql(&a, "SELECT pg_catalog.pg_column_size(pl.p)"
				  " FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
				  STEP_TASK_PAYLOAD
				  " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3", false, 1, SPI_OK_SELECT);
	size = SPI_processed ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) : NULL;
	/* nothing was inserted for another reason: that cannot happen */
	if (size == NULL || strtoll(size, NULL, 10) <= orch_max_step_input_size)
		elog(ERROR, "orchestrator: the task of step \"%s\" of run " INT64_FORMAT " could not be inserted",
			 step, r->id);
	return psprintf(STEP_TOO_LARGE " (it takes %s bytes; the limit is %d)",
					size, orch_max_step_input_size);
}

/* The error of a step whose queue does not exist (and is not created here) */
char *
orch_run_step_no_queue(void)
{
	return orch_citus() && orch_auto_create_queues ? STEP_NO_QUEUE_CITUS : STEP_NO_QUEUE;
}

/* now + after (NULL: no cap) as the next parameter: a step's soft cap */
void
orch_arg_step_cap(OrchArgs *a, TimestampTz now, const Interval *after)
{
	orch_arg(a, TIMESTAMPTZOID,
			 after ? DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
										 IntervalPGetDatum(after)) : (Datum) 0,
			 after == NULL);
}

/*
 * Start a task step: its task and the step running with it, in one
 * statement, its soft cap timeout from now (NULL: none).  When the step's
 * queue does not exist yet it is created on the way
 * (orchestrator.auto_create_queues); else nothing is started and it
 * returns the error the caller fails the step with (STEP_NO_QUEUE, or
 * STEP_TOO_LARGE when the step's input is over
 * orchestrator.max_step_input_size); NULL when it started.
 */
char *
orch_run_start_step_task(RunRow *r, const char *step, const Interval *timeout)
{
	OrchArgs	a = {0};
	TimestampTz now;
	int64		id;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg_text(&a, step);	/* the step key */
	orch_arg_int4(&a, -1);		/* no map item */
	orch_arg_int4(&a, orch_max_step_input_size);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	if (orch_args_sql(&a, "WITH t AS (" STEP_TASK_INSERT " RETURNING id)"
					  " UPDATE orch.run_steps SET state = 'running', started_at = $7,"
					  "   task_id = (SELECT id FROM t), cap_at = $8"
					  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3 AND EXISTS (SELECT 1 FROM t)",
					  false, 0, SPI_OK_UPDATE) > 0)
		return NULL;
	/* its queue does not exist yet, or its input is too large */
	id = orch_run_enqueue_step_task(r, step, false);
	if (id == -1)
		return orch_run_step_no_queue();
	if (id == -2)
		return step_too_large(r, step);
	a.n = 3;
	orch_arg_int8(&a, id);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'running', started_at = $5, task_id = $4, cap_at = $6"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	return NULL;
}
