/*
 * task_lease.c
 *	  What a worker holding a lease does besides finishing its task: keep
 *	  the lease (orch_heartbeat, which may carry a progress value), report
 *	  progress (orch_progress) and give the task back without a failure
 *	  (orch_release).  Each is fenced by the lease token, as a completion is;
 *	  none of them writes an event or an attempt while the task stays
 *	  claimed, so a job reporting every second does not grow its history.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_heartbeat);
PG_FUNCTION_INFO_V1(orch_progress);
PG_FUNCTION_INFO_V1(orch_release);

/*
 * The lease extended from now, never past the task's timeout (on Citus the
 * timeout is added in UTC: no stable function on a column in a distributed
 * UPDATE); the progress set too when $4 is given.
 */
#define EXTEND_SQL(TIMEOUT_END, PROGRESS) \
	"UPDATE orch.tasks SET lease_expires_at = LEAST(statement_timestamp() + $3, " \
	TIMEOUT_END ")" PROGRESS " WHERE id = $1 AND tenant_id = $2 RETURNING lease_expires_at"
#define WITH_PROGRESS ", progress = $4"

/* Was the task cancelled under this very lease (its worker should stop)? */
static bool
cancelled_under(OrchTask *t, pg_uuid_t *token)
{
	return t->state == TS_CANCELLED && t->has_token &&
		memcmp(t->token.data, token->data, UUID_LEN) == 0;
}

/*
 * Extend the lease the token holds by extend (the queue's lease when NULL),
 * and set the task's progress when progress is not NULL.  Returns the state
 * the task is in: "executing" with the new expiry in *expires, or
 * "cancelled" (*expires 0) when it was cancelled under this lease.  The
 * caller ends the SPI connection (orch_task_call_end).
 */
static const char *
heartbeat(FunctionCallInfo fcinfo, Jsonb *progress, TimestampTz *expires)
{
	int64		id = orch_task_id_arg(fcinfo);
	pg_uuid_t  *token = orch_lease_token_arg(fcinfo);
	int64		extend = orch_interval_arg(fcinfo, 2, "extend", -1);
	OrchTask	t;
	OrchArgs	a = {0};
	bool		isnull;
	const char *timeout_end = orch_citus() ? ORCH_UTC_ADD("claimed_at", "timeout")
		: "claimed_at + timeout";

	*expires = 0;
	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	if (cancelled_under(&t, token))
		return "cancelled";
	orch_check_lease(&t, token, "heartbeat");
	if (extend < 0)
	{
		QueueSettings qs;

		orch_load_queue(t.queue, &qs, NULL);
		extend = qs.lease;
	}
	orch_arg_int8(&a, id);
	orch_arg_text(&a, t.tenant);
	orch_arg_interval(&a, extend);
	if (progress)
		orch_arg_jsonb(&a, progress);
	if (orch_args_sql(&a, psprintf(EXTEND_SQL("%s", "%s"), timeout_end,
								   progress ? WITH_PROGRESS : ""),
					  false, 0, SPI_OK_UPDATE_RETURNING) != 1)
		elog(ERROR, "orchestrator: task update failed");
	*expires = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 1, &isnull));
	return "executing";
}

/*
 * orch_heartbeat(task_id, lease_token, extend) -> state
 * orch_heartbeat(task_id, lease_token, extend, progress)
 *	  -> (state, lease_expires_at)
 */
Datum
orch_heartbeat(PG_FUNCTION_ARGS)
{
	Jsonb	   *progress;
	TimestampTz expires;
	const char *state;
	TupleDesc	td;
	Datum		v[2];
	bool		n[2] = {false, false};

	if (PG_NARGS() < 4)
		return orch_task_call_end(heartbeat(fcinfo, NULL, &expires));
	progress = orch_jsonb_arg(fcinfo, 3, "progress");
	if (get_call_result_type(fcinfo, NULL, &td) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "orchestrator: orch_heartbeat must return a row");
	state = heartbeat(fcinfo, progress, &expires);
	orch_scope_clear();
	SPI_finish();
	v[0] = CStringGetTextDatum(state);
	v[1] = TimestampTzGetDatum(expires);
	n[1] = expires == 0;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(td), v, n)));
}

/*
 * orch_progress(task_id, lease_token, progress) -> void
 *
 * One statement sets it when the token holds a live lease; otherwise the
 * task is locked and read to say why (unknown, terminal, stale lease).
 */
Datum
orch_progress(PG_FUNCTION_ARGS)
{
	int64		id = orch_task_id_arg(fcinfo);
	pg_uuid_t  *token = orch_lease_token_arg(fcinfo);
	Jsonb	   *progress;
	OrchArgs	a = {0};

	orch_require_arg(fcinfo, 2, "progress");
	progress = orch_jsonb_arg(fcinfo, 2, "progress");
	orch_arg_int8(&a, id);
	orch_arg(&a, UUIDOID, UUIDPGetDatum(token), false);
	orch_arg_jsonb(&a, progress);
	orch_arg_text(&a, "executing");

	SPI_connect();
	if (!orch_scope_task(id))
		orch_not_found("task", id);
	orch_arg_caller_tenants(&a);
	if (orch_args_sql(&a, "UPDATE orch.tasks SET progress = $3"
					  " WHERE id = $1 AND lease_token = $2 AND state = $4"
					  "   AND lease_expires_at > statement_timestamp()"
					  "   AND " ORCH_TENANT_IN("tenant_id", "$5"),
					  false, 0, SPI_OK_UPDATE) == 0)
	{
		OrchTask	t;

		orch_lock_task_or_not_found(id, &t);
		orch_check_lease(&t, token, "report progress of");
		elog(ERROR, "orchestrator: the progress of task " INT64_FORMAT " could not be set", id);
	}
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * orch_release(task_id, lease_token, delay) -> state
 *
 * The attempt ends, recorded with outcome "released", and is given back:
 * neither attempts nor failures count it, so the next claim has the same
 * attempt number.  The task waits like a retry (awaiting_tool with
 * retry_at, reason released) for delay (none: claimable at once), which
 * the matrix allows from executing; a keyed task gives up its slot.
 */
Datum
orch_release(PG_FUNCTION_ARGS)
{
	int64		id = orch_task_id_arg(fcinfo);
	pg_uuid_t  *token = orch_lease_token_arg(fcinfo);
	int64		delay;
	TimestampTz at;
	OrchTask	t;
	OrchArgs	a = {0};
	int			ev;

	delay = PG_ARGISNULL(2) ? 0 : orch_interval_usecs(PG_GETARG_INTERVAL_P(2));
	if (delay < 0 || delay > ORCH_MAX_INTERVAL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("delay must be between 0 and 100 years")));
	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	if (cancelled_under(&t, token))
		return orch_task_call_end("cancelled");
	orch_check_lease(&t, token, "release");
	at = GetCurrentTransactionStartTimestamp() + delay;
	ev = orch_set_event_context(t.lease_owner, NULL);
	orch_record_attempt(&t, "released", NULL, NULL, true, at);
	orch_arg_int8(&a, id);
	orch_arg_text(&a, t.tenant);
	orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(at), false);
	if (orch_args_sql(&a, "UPDATE orch.tasks SET state = 'awaiting_tool', reason_code = 'released',"
					  " attempts = attempts - 1, retry_at = $3, ready_at = $3, wait_data = NULL"
					  " WHERE id = $1 AND tenant_id = $2",
					  false, 0, SPI_OK_UPDATE) != 1)
		elog(ERROR, "orchestrator: task update failed");
	orch_clear_event_context(ev);
	return orch_task_call_end("awaiting_tool");
}
