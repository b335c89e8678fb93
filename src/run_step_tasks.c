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

#include "run_internal.h"

/*
 * The task of a step (or of one item of a map step: $5 >= 0); $1 run,
 * $2 tenant, $3 step, $4 step key.  Its queue must exist (else no row).
 */
#define STEP_TASK_INSERT \
	"INSERT INTO orch.tasks (tenant_id, queue, state, payload, run_at, ready_at, retry_policy," \
	"  timeout, run_id, step_key, reason_code, priority, correlation_id)" \
	" SELECT $2, q.name, 'queued'," \
	"  jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3, 'handler', s.spec ->> 'handler'," \
	"    'input', r.input," \
	"    'deps', (SELECT coalesce(jsonb_object_agg(x.step_id, x.output), '{}') FROM orch.run_steps x" \
	"             WHERE x.run_id = $1 AND x.tenant_id = $2 AND x.step_id = ANY (s.deps))," \
	"    'item', CASE WHEN $5 >= 0 THEN s.items -> $5 END," \
	"    'index', CASE WHEN $5 >= 0 THEN $5 END))," \
	"  now(), now()," \
	"  coalesce(d.spec -> 'policies' -> 'retry_policy', '{}') || jsonb_strip_nulls(coalesce(s.spec -> 'retry_policy', '{}'))" \
	"   || jsonb_strip_nulls(jsonb_build_object('retry_safety'," \
	"        coalesce(s.spec ->> 'retry_safety', d.spec -> 'policies' ->> 'retry_safety')))," \
	"  NULL::interval," \
	"  $1, $4, 'step_ready', coalesce((q.settings ->> 'priority')::int, 0), r.correlation_id" \
	" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id" \
	"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'" \
	"  CROSS JOIN LATERAL (SELECT qq.name, qq.settings FROM orch.queues qq" \
	"       WHERE qq.name = coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')) q" \
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

/* Enqueue one task of a step (item >= 0: one item of a map step). */
int64
orch_run_enqueue_step_task(RunRow *r, const char *step, const char *step_key, Jsonb *spec_unused,
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
	/*
	 * The queue: the step's (or its compensation's), else the run policy's.
	 * A task step's insert finds the queue itself and inserts nothing when it
	 * does not exist yet: only then is it looked up and created.
	 */
	for (int pass = 0; pass < 2; pass++)
	{
		if (compensation || pass == 1)
		{
			orch_sql(compensation
					? "SELECT coalesce(s.spec -> 'compensation' ->> 'queue', s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')"
					"  FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
					"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
					" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"
					: "SELECT coalesce(s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue')"
					"  FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id"
					"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'"
					" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3", 3, types, v, NULL, false, 0, SPI_OK_SELECT);
			queue = SPI_processed ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) : NULL;
			if (queue == NULL)
				elog(ERROR, "orchestrator: step \"%s\" of run " INT64_FORMAT " has no queue", step, r->id);
			if (!orch_load_queue(queue, &qs, NULL))
			{
				if (!orch_auto_create_queues)
					return -1;	/* the caller fails the step */
				orch_ensure_queue(queue);
			}
		}
		if (orch_sql(compensation
				? COMP_TASK_INSERT : STEP_TASK_INSERT " RETURNING id", 5, types, v, NULL, false, 0, SPI_OK_INSERT_RETURNING) == 1)
			return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	elog(ERROR, "orchestrator: step task insert failed");
	return 0;					/* keep compiler quiet */
}

/*
 * Start a task step: its task and the step running with it, in one
 * statement.  When the step's queue does not exist yet it is created on the
 * way (orchestrator.auto_create_queues); else nothing is started and it
 * returns true: the caller fails the step (STEP_NO_QUEUE).
 */
bool
orch_run_start_step_task(RunRow *r, const char *step)
{
	OrchArgs	a = {0};
	int64		id;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg_text(&a, step);	/* the step key */
	orch_arg_int4(&a, -1);		/* no map item */
	if (orch_args_sql(&a, "WITH t AS (" STEP_TASK_INSERT " RETURNING id)"
					  " UPDATE orch.run_steps SET state = 'running', started_at = clock_timestamp(),"
					  "   task_id = (SELECT id FROM t), cap_at = " RUN_STEP_CAP_SQL
					  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3 AND EXISTS (SELECT 1 FROM t)",
					  false, 0, SPI_OK_UPDATE) > 0)
		return false;
	/* its queue does not exist yet */
	id = orch_run_enqueue_step_task(r, step, step, NULL, -1, false);
	if (id < 0)
		return true;			/* the caller fails the step */
	a.n = 3;
	orch_arg_int8(&a, id);
	orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'running', started_at = clock_timestamp(), task_id = $4,"
				  " cap_at = " RUN_STEP_CAP_SQL
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	return false;
}
