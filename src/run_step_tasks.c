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

/* $1 run, $2 tenant, $3 step: the step, its run and the run's definition */
#define STEP_FROM \
	" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id" \
	"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
#define STEP_WHERE " WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"

/* A step's retry policy: the definition's, the step's over it, and its retry safety */
#define STEP_RETRY_POLICY \
	"coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || jsonb_strip_nulls(coalesce(s.spec -> 'retry_policy', '{}'))" \
	" || jsonb_strip_nulls(jsonb_build_object('retry_safety'," \
	"      coalesce(s.spec ->> 'retry_safety', d.spec -> 'policies' ->> 'retry_safety')))"

/*
 * A task step's payload (pl.p): the run's input and its dependencies'
 * outputs, in a lateral sub-select over the dependencies (one row: an
 * aggregate), correlated on the step's run and tenant and naming the
 * tenant ($2), so that Citus routes it to the tenant's shard.
 */
#define STEP_TASK_PAYLOAD \
	"  CROSS JOIN LATERAL (SELECT jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3," \
	"    'handler', s.spec ->> 'handler', 'input', r.input," \
	"    'deps', coalesce(jsonb_object_agg(x.step_id, x.output), '{}'))) AS p" \
	"   FROM orch.run_steps x WHERE x.run_id = s.run_id AND x.tenant_id = s.tenant_id AND x.tenant_id = $2" \
	"     AND x.step_id = ANY (s.deps)) pl"

/*
 * What the task of a step is made of: its queue, payload, retry policy,
 * the run's correlation id and the payload's size.
 */
#define STEP_TASK_VALUES \
	"SELECT coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue'), pl.p, " STEP_RETRY_POLICY "," \
	"  r.correlation_id, pg_catalog.pg_column_size(pl.p)" \
	STEP_FROM STEP_TASK_PAYLOAD STEP_WHERE

/* ... of a step's compensation task (its payload: the step's input and output) */
#define COMP_TASK_VALUES \
	"SELECT coalesce(s.spec -> 'compensation' ->> 'queue', s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')," \
	"  jsonb_build_object('run_id', $1, 'step_id', $3, 'compensation', s.spec -> 'compensation' ->> 'handler'," \
	"    'input', r.input, 'output', s.output)," \
	"  coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || jsonb_strip_nulls(coalesce(s.spec -> 'retry_policy', '{}'))," \
	"  r.correlation_id, 0" \
	STEP_FROM STEP_WHERE

/*
 * ... of items $4 .. $5 - 1 of a map step, from the step's items ($6, read
 * once by the caller): a map item carries its item and index, not the
 * run's input and dependencies' outputs (which would be copied once per
 * item: fan-out cost would grow with the square of the items).  Its
 * payloads and step keys as arrays, in item order.
 */
#define MAP_TASKS_VALUES \
	"SELECT coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue'), " STEP_RETRY_POLICY "," \
	"  r.correlation_id," \
	"  (SELECT array_agg(jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3," \
	"          'handler', s.spec ->> 'handler')) || jsonb_build_object('item', $6::jsonb -> g.i, 'index', g.i)" \
	"          ORDER BY g.i) FROM generate_series($4, $5 - 1) AS g(i))," \
	"  (SELECT array_agg($3 || '#' || g.i ORDER BY g.i) FROM generate_series($4, $5 - 1) AS g(i))" \
	STEP_FROM STEP_WHERE

/*
 * Is the queue of a step's task there, created on the way
 * (orchestrator.auto_create_queues) when missing?  Its settings into qs.
 */
static bool
step_queue_ready(const char *queue, QueueSettings *qs)
{
	if (queue == NULL)
		return false;
	if (orch_load_queue(queue, qs, NULL))
		return true;
	/* on Citus orch_start created it (a reference table is not written on a shard) */
	if (!orch_auto_create_queues || orch_citus())
		return false;
	orch_ensure_queue(queue);
	return orch_load_queue(queue, qs, NULL);
}

/*
 * The row of a step's task from the values read (vals: its retry policy and
 * correlation id at columns col_policy and col_corr), in queue with its
 * priority (qs).
 */
static void
step_task_row(OrchTaskRow *t, RunRow *r, SPITupleTable *vals, int col_policy, int col_corr,
			  const char *queue, const QueueSettings *qs)
{
	bool		isnull;
	Datum		d = SPI_getbinval(vals->vals[0], vals->tupdesc, col_policy, &isnull);

	memset(t, 0, sizeof(*t));
	t->tenant = r->tenant;
	t->queue = queue;
	t->priority = qs->priority;
	t->retry_policy = isnull ? NULL : DatumGetJsonbP(d);
	t->correlation_id = SPI_getvalue(vals->vals[0], vals->tupdesc, col_corr);
	t->run_id = r->id;
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
 * the step's input is over orchestrator.max_step_input_size (*size: how
 * large it is).
 */
static int64
enqueue_step_task(RunRow *r, const char *step, bool compensation, int64 *size)
{
	OrchArgs	a = {0};
	OrchTaskRow t;
	QueueSettings qs;
	char	   *queue;
	SPITupleTable *values;
	bool		isnull;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	if (orch_args_sql(&a, compensation ? COMP_TASK_VALUES : STEP_TASK_VALUES,
					  false, 0, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: step \"%s\" of run " INT64_FORMAT " was not found", step, r->id);
	values = SPI_tuptable;		/* kept until SPI_finish, whatever runs next */
	queue = SPI_getvalue(values->vals[0], values->tupdesc, 1);
	*size = DatumGetInt32(SPI_getbinval(values->vals[0], values->tupdesc, 5, &isnull));
	if (!compensation && *size > orch_max_step_input_size)
		return -2;
	if (!step_queue_ready(queue, &qs))
		return -1;				/* the caller fails the step */
	step_task_row(&t, r, values, 3, 4, queue, &qs);
	t.reason_code = compensation ? "compensation_ready" : "step_ready";
	return orch_task_insert(&t, DatumGetJsonbP(SPI_getbinval(values->vals[0], values->tupdesc, 2, &isnull)),
							compensation ? psprintf("%s:compensate", step) : step);
}

/* The compensation task of a step; -1 when its queue does not exist. */
int64
orch_run_enqueue_step_task(RunRow *r, const char *step, bool compensation)
{
	int64		size;

	return enqueue_step_task(r, step, compensation, &size);
}

/*
 * Enqueue items from .. to - 1 of a map step (items: the step's items) in
 * one statement, and count them as created (items_next).  Returns how many,
 * or -1 when the step's queue does not exist and may not be created.
 */
int
orch_run_enqueue_map_items(RunRow *r, const char *step, int from, int to, Jsonb *items)
{
	OrchArgs	a = {0};
	OrchTaskRow t;
	QueueSettings qs;
	char	   *queue;
	SPITupleTable *values;
	bool		isnull;

	if (to <= from)
		return 0;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg_int4(&a, from);
	orch_arg_int4(&a, to);
	orch_arg(&a, JSONBOID, JsonbPGetDatum(items), false);
	if (orch_args_sql(&a, MAP_TASKS_VALUES, false, 0, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: map step \"%s\" of run " INT64_FORMAT " was not found", step, r->id);
	values = SPI_tuptable;
	queue = SPI_getvalue(values->vals[0], values->tupdesc, 1);
	if (!step_queue_ready(queue, &qs))
		return -1;
	step_task_row(&t, r, values, 2, 3, queue, &qs);
	t.reason_code = "step_ready";
	orch_tasks_insert(&t, SPI_getbinval(values->vals[0], values->tupdesc, 4, &isnull),
					  SPI_getbinval(values->vals[0], values->tupdesc, 5, &isnull), to - from, NULL);
	a.n = 3;
	orch_arg_int4(&a, to);
	orch_args_sql(&a, "UPDATE orch.run_steps SET items_next = $4"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	return to - from;
}

/*
 * The error of a step whose input is over orchestrator.max_step_input_size:
 * its size, never its content.
 */
static char *
step_too_large(int64 size)
{
	return psprintf(STEP_TOO_LARGE " (it takes " INT64_FORMAT " bytes; the limit is %d)",
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
 * Start a task step: its task, and the step running with it, its soft cap
 * timeout from now (NULL: none).  When the step's queue does not exist it
 * is created on the way (orchestrator.auto_create_queues); else nothing is
 * started and it returns the error the caller fails the step with
 * (STEP_NO_QUEUE, or STEP_TOO_LARGE when the step's input is over
 * orchestrator.max_step_input_size); NULL when it started.
 */
char *
orch_run_start_step_task(RunRow *r, const char *step, const Interval *timeout)
{
	OrchArgs	a = {0};
	TimestampTz now;
	int64		size;
	int64		id = enqueue_step_task(r, step, false, &size);

	if (id == -1)
		return orch_run_step_no_queue();
	if (id == -2)
		return step_too_large(size);
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg_int8(&a, id);
	now = orch_arg_clock(&a);
	orch_arg_step_cap(&a, now, timeout);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'running', started_at = $5, task_id = $4, cap_at = $6"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	return NULL;
}
