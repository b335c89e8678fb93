/*
 * deadletter.c
 *	  Manual re-drive of dead letters (tasks that ended failed by exhaustion,
 *	  NON_RETRYABLE, COMPENSATION_REQUIRED or NOT_SAFE_TO_RETRY): a failed task
 *	  is immutable, so a re-drive enqueues a fresh copy linked by retry_of and
 *	  audits the action on both tasks with the actor.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_retry);
PG_FUNCTION_INFO_V1(orch_reprocess);



/*
 * The copy of dead letter id that re-drives it, from its row (tup: the
 * columns of redrive's look, the task's from 6 on), queued now.
 */
static OrchTaskRow *
redrive_row(HeapTuple tup, TupleDesc td, int64 id)
{
	OrchTaskRow *t = palloc0(sizeof(OrchTaskRow));
	bool		isnull;
	Datum		d;

	t->tenant = SPI_getvalue(tup, td, 4);
	t->queue = SPI_getvalue(tup, td, 6);
	t->reason_code = "redriven";
	t->priority = DatumGetInt32(SPI_getbinval(tup, td, 7, &isnull));
	t->has_run_at = true;
	t->run_at = GetCurrentTransactionStartTimestamp();
	d = SPI_getbinval(tup, td, 9, &t->has_max_attempts);
	t->has_max_attempts = !t->has_max_attempts;
	t->max_attempts = t->has_max_attempts ? DatumGetInt32(d) : 0;
	d = SPI_getbinval(tup, td, 10, &t->has_max_failures);
	t->has_max_failures = !t->has_max_failures;
	t->max_failures = t->has_max_failures ? DatumGetInt32(d) : 0;
	d = SPI_getbinval(tup, td, 11, &isnull);
	t->retry_policy = isnull ? NULL : DatumGetJsonbP(d);
	d = SPI_getbinval(tup, td, 12, &isnull);
	t->timeout = isnull ? NULL : DatumGetIntervalP(d);
	t->owner = SPI_getvalue(tup, td, 13);
	t->concurrency_key = SPI_getvalue(tup, td, 14);
	d = SPI_getbinval(tup, td, 15, &isnull);
	t->run_id = isnull ? 0 : DatumGetInt64(d);
	t->retry_of = id;
	t->correlation_id = SPI_getvalue(tup, td, 17);
	return t;
}

/*
 * Re-drive one dead letter (locked here).  Returns the new task id; -1 when
 * skip_redriven and another session re-drove it meanwhile (else that is an
 * error, as a task that is not a dead letter is).  Caller is connected to
 * SPI and set the event context.
 */
int64
orch_redrive(int64 id, bool skip_redriven)
{
	OrchArgs	a = {0};
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	td;
	char	   *state;
	char	   *tenant;
	int64		new_id;
	char	   *note;

	orch_arg_int8(&a, id);
	/* on Citus: the statements below go to the task's shard */
	if (!orch_scope_task(id))
		orch_not_found("task", id);
	/* another tenant's row is neither locked nor seen */
	orch_arg_caller_tenants(&a);
	/* lock the dead letter: concurrent re-drives of it queue up here ... */
	while (orch_args_sql(&a, "SELECT 1 FROM orch.tasks WHERE id = $1"
						 "   AND " ORCH_TENANT_IN("tenant_id", "$2") " FOR UPDATE", false, 1, SPI_OK_SELECT) == 0 &&
		   orch_scope_lookup_again(id))
	{
		/* on Citus: the tenant remembered found nothing, the lookup did */
		a.n = 1;
		orch_arg_caller_tenants(&a);
	}
	/* ... and look again with a fresh snapshot, which sees a re-drive that won */
	orch_args_sql(&a, "SELECT t.state, t.reason_code IN " ORCH_DEAD_LETTER_REASONS ","
									  " (SELECT min(n.id) FROM orch.tasks n WHERE n.retry_of = t.id"
									  "    AND n.tenant_id = t.tenant_id AND " ORCH_TENANT_IN("n.tenant_id", "$2") "),"
									  " t.tenant_id, t.reason_code,"
									  " t.queue, t.priority, t.payload, t.max_attempts, t.max_failures,"
									  " t.retry_policy, t.timeout, t.owner, t.concurrency_key, t.run_id, t.step_key,"
									  " t.correlation_id"
									  " FROM orch.tasks t WHERE t.id = $1"
									  "   AND " ORCH_TENANT_IN("t.tenant_id", "$2"), false, 1, SPI_OK_SELECT);
	/* another tenant's task does not exist for a role bound to tenants */
	if (!orch_found_visible(4))
		orch_not_found("task", id);
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	state = SPI_getvalue(tup, td, 1);
	tenant = SPI_getvalue(tup, td, 4);
	if (strcmp(state, "failed") != 0 || !DatumGetBool(SPI_getbinval(tup, td, 2, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("task " INT64_FORMAT " is not a dead letter", id),
				 errdetail("It is \"%s\" with reason \"%s\"; only tasks that failed by exhaustion, NON_RETRYABLE, COMPENSATION_REQUIRED or NOT_SAFE_TO_RETRY can be re-driven.",
						   state, SPI_getvalue(tup, td, 5) ? SPI_getvalue(tup, td, 5) : "")));
	SPI_getbinval(tup, td, 3, &isnull);
	if (!isnull && skip_redriven)
		return -1;				/* re-driven meanwhile by another session */
	if (!isnull)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("task " INT64_FORMAT " was already re-driven as task %s", id,
						SPI_getvalue(tup, td, 3))));

	/* the copy keeps the correlation id */
	new_id = orch_task_insert(redrive_row(tup, td, id), DatumGetJsonbP(SPI_getbinval(tup, td, 8, &isnull)),
							  SPI_getvalue(tup, td, 16));
	orch_route_note(ORCH_ROUTE_TASK, new_id, tenant);
	note = psprintf("re-driven as task " INT64_FORMAT, new_id);
	orch_write_event(tenant, id, true, "task", "failed", "failed", "redriven", 0, NULL, note);
	return new_id;
}

/* orch_retry(task_id bigint) -> bigint (the new task) */
Datum
orch_retry(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		new_id;

	orch_require_arg(fcinfo, 0, "task_id");
	SPI_connect();
	ev = orch_set_event_context(NULL, NULL);
	new_id = orch_redrive(PG_GETARG_INT64(0), false);
	orch_clear_event_context(ev);
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_INT64(new_id);
}

/*
 * orch_reprocess(queue text, reason_code text, failed_after timestamptz,
 *				  max int DEFAULT 100) -> TABLE(task_id bigint, new_task_id bigint)
 *	  Re-drives the oldest dead letters matching every given filter.
 */
Datum
orch_reprocess(PG_FUNCTION_ARGS)
{
	int			ev;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	OrchArgs	a = {0};
	int32		max = orch_int4_arg(fcinfo, 3, "max", 1, 100000, 100);
	int64	   *ids;
	int			count;
	bool		isnull;

	if (!PG_ARGISNULL(1))
	{
		char	   *r = orch_text_arg(fcinfo, 1);

		if (strstr(ORCH_DEAD_LETTER_REASONS, psprintf("'%s'", r)) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"%s\" is not a dead-letter reason code", r),
					 errhint("Use max_attempts_exhausted, max_failures_exhausted, non_retryable, compensation_required or not_safe_to_retry.")));
	}
	/* the three filters as they came (NULL: any) */
	orch_arg(&a, TEXTOID, PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0), PG_ARGISNULL(0));
	orch_arg(&a, TEXTOID, PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	orch_arg(&a, TIMESTAMPTZOID, PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2), PG_ARGISNULL(2));
	orch_arg_int4(&a, max);
	orch_arg_caller_tenants(&a);

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
#define REPROCESS_SCAN \
	"SELECT t.id FROM orch.tasks t" \
	" WHERE t.state = 'failed' AND t.reason_code IN " ORCH_DEAD_LETTER_REASONS \
	" AND ($1::text IS NULL OR t.queue = $1)" \
	" AND ($2::text IS NULL OR t.reason_code = $2)" \
	" AND ($3::timestamptz IS NULL OR t.finished_at >= $3)" \
	" AND " ORCH_TENANT_IN("t.tenant_id", "$5") \
	" AND NOT EXISTS (SELECT 1 FROM orch.tasks r WHERE r.retry_of = t.id" \
	"   AND r.tenant_id = t.tenant_id)" \
	" ORDER BY t.finished_at, t.id LIMIT $4"
	/*
	 * Citus locks rows of one shard only: there the scan does not lock, and
	 * each re-drive locks and checks its dead letter (a concurrent re-drive
	 * of it is then skipped).
	 */
	count = (int) orch_args_sql_once(&a, orch_citus() ? REPROCESS_SCAN : REPROCESS_SCAN " FOR UPDATE SKIP LOCKED",
									 false, 0, SPI_OK_SELECT);
	ids = palloc(sizeof(int64) * (count + 1));
	for (int i = 0; i < count; i++)
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	ev = orch_set_event_context(NULL, NULL);
	for (int i = 0; i < count; i++)
	{
		Datum		out[2];
		bool		nulls[2] = {false, false};

		int64		new_id = orch_redrive(ids[i], true);

		if (new_id < 0)
			continue;
		out[0] = Int64GetDatum(ids[i]);
		out[1] = Int64GetDatum(new_id);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	orch_clear_event_context(ev);
	orch_scope_clear();
	SPI_finish();
	return (Datum) 0;
}
