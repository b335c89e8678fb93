/*
 * commands.c
 *	  The idempotent command boundary: a side-effect request
 *	  (deployment create/stop, order place/cancel, any kind) is recorded before
 *	  an adapter performs it, as a task in the command queue; a replay returns
 *	  the recorded command and result, another kind or payload raises OR004.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/json.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_command);
PG_FUNCTION_INFO_V1(orch_command_result);


/*
 * Row `row` of the last result, (id, task_id, status, result), into the
 * function's result as (command_id, task_id, replayed, status, result).
 */
static void
put_command_row(ReturnSetInfo *rsinfo, uint64 row, bool replayed)
{
	Datum		out[5];
	bool		nulls[5];

	orch_spi_values(SPI_tuptable, row, 1, 2, out, nulls);
	out[2] = BoolGetDatum(replayed);
	nulls[2] = false;
	orch_spi_values(SPI_tuptable, row, 3, 2, out + 3, nulls + 3);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
}

/*
 * A new command (its row just inserted, in SPI_tuptable): its origin task
 * checked, its work task enqueued in orchestrator.command_queue and linked
 * (the command's row again in SPI_tuptable).
 */
static void
issue_command(const char *kind, const char *key, Jsonb *payload, const char *tenant,
			  bool no_origin, int64 origin_id)
{
	int			ev;
	bool		isnull;
	int64		command_id;
	int64		task_id;
	Jsonb	   *work;
	StringInfoData buf;
	OrchArgs	link = {0};

	command_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	/* on Citus: orch_command_result goes straight to its shard */
	orch_route_note(ORCH_ROUTE_COMMAND, command_id, tenant);
	/* the task on whose behalf the command is issued must exist */
	if (!no_origin)
	{
		OrchArgs	origin = {0};

		/* and be visible to the caller (another tenant's does not exist for it) */
		orch_arg_int8(&origin, origin_id);
		orch_arg_caller_tenants(&origin);
		if (orch_args_sql_once(&origin, "SELECT 1 FROM orch.tasks WHERE id = $1"
							   " AND " ORCH_TENANT_IN("tenant_id", "$2"), false, 1, SPI_OK_SELECT) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_NOT_FOUND),
					 errmsg("task " INT64_FORMAT " does not exist", origin_id),
					 errdetail("task_id names the task on whose behalf the command is issued.")));
	}
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"command_id\": " INT64_FORMAT ", \"kind\": ", command_id);
	escape_json(&buf, kind);
	appendStringInfoString(&buf, ", \"idempotency_key\": ");
	escape_json(&buf, key);
	appendStringInfoString(&buf, ", \"payload\": ");
	appendStringInfoString(&buf, JsonbToCString(NULL, &payload->root, VARSIZE(payload)));
	appendStringInfoChar(&buf, '}');
	work = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
	ev = orch_set_event_context(NULL, NULL);
	task_id = orch_enqueue_internal(orch_command_queue, work, tenant, NULL);
	orch_clear_event_context(ev);
	orch_arg_int8(&link, command_id);
	orch_arg_text(&link, tenant);
	orch_arg_int8(&link, task_id);
	if (orch_args_sql(&link, "UPDATE orch.commands SET task_id = $3"
					  " WHERE id = $1 AND tenant_id = $2"
					  " RETURNING id, task_id, status, result",
					  false, 0, SPI_OK_UPDATE_RETURNING) != 1)
		elog(ERROR, "orchestrator: command link failed");
}

/*
 * orch_command(kind text, idempotency_key text, payload jsonb,
 *				task_id bigint DEFAULT NULL, tenant text DEFAULT NULL)
 *	  -> TABLE(command_id bigint, task_id bigint, replayed boolean,
 *			   status text, result jsonb)
 */
Datum
orch_command(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *kind;
	char	   *key;
	Jsonb	   *payload;
	char	   *tenant;
	OrchArgs	a = {0};
	bool		isnull;

	orch_require_arg(fcinfo, 0, "kind");
	orch_require_arg(fcinfo, 1, "idempotency_key");
	orch_require_arg(fcinfo, 2, "payload");
	kind = orch_text_arg(fcinfo, 0);
	key = orch_text_arg(fcinfo, 1);
	payload = PG_GETARG_JSONB_P(2);
	tenant = orch_resolve_tenant(orch_text_arg(fcinfo, 4));
	if (kind[0] == '\0' || strlen(kind) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("command kind must have 1 to 128 characters")));
	if (key[0] == '\0' || strlen(key) > 512)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idempotency key must have 1 to 512 characters")));
	if (tenant[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant must not be empty")));
	orch_check_payload_size(payload, "payload");

	orch_arg_text(&a, tenant);
	orch_arg_text(&a, kind);
	orch_arg_text(&a, key);
	orch_arg(&a, JSONBOID, JsonbPGetDatum(payload), false);
	orch_arg(&a, INT8OID, PG_ARGISNULL(3) ? (Datum) 0 : PG_GETARG_DATUM(3), PG_ARGISNULL(3));

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	for (int tries = 0; tries < 5; tries++)
	{
		HeapTuple	tup;
		TupleDesc	td;

		/* ON CONFLICT waits for a concurrent holder of the key: one command */
		if (orch_args_sql(&a, "INSERT INTO orch.commands (tenant_id, kind, idempotency_key, payload,"
						  " origin_task_id, status) VALUES ($1, $2, $3, $4, $5, 'pending')"
						  " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
						  " RETURNING id, task_id, status, result",
						  false, 0, SPI_OK_INSERT_RETURNING) == 1)
		{
			issue_command(kind, key, payload, tenant, PG_ARGISNULL(3), PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3));
			put_command_row(rsinfo, 0, false);
			SPI_finish();
			return (Datum) 0;
		}

		/* The key exists: a replay of the same request, or a conflict */
		if (orch_args_sql(&a, "SELECT id, task_id, status, result, kind = $2 AND payload = $4,"
						  " kind FROM orch.commands"
						  " WHERE tenant_id = $1 AND idempotency_key = $3",
						  false, 1, SPI_OK_SELECT) == 0)
			continue;
		tup = SPI_tuptable->vals[0];
		td = SPI_tuptable->tupdesc;
		if (!DatumGetBool(SPI_getbinval(tup, td, 5, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_IDEMPOTENCY_CONFLICT),
					 errmsg("idempotency key \"%s\" was already used for another command", key),
					 errdetail("Command %s holds this key as kind \"%s\" with another payload.",
							   SPI_getvalue(tup, td, 1), SPI_getvalue(tup, td, 6)),
					 errhint("Use a new key for a new command, or resend the original kind and payload.")));
		orch_route_note(ORCH_ROUTE_COMMAND,
						DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull)), tenant);
		put_command_row(rsinfo, 0, true);
		SPI_finish();
		return (Datum) 0;
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not settle command key \"%s\" under concurrent use", key),
			 errhint("Retry the transaction.")));
	return (Datum) 0;
}

/*
 * orch_command_result(command_id bigint, ok boolean, result jsonb DEFAULT NULL)
 *	  -> text ('succeeded' | 'failed')
 *	  Records the adapter's outcome once; recording the same outcome again is
 *	  a no-op, a different one raises OR002.
 */
Datum
orch_command_result(PG_FUNCTION_ARGS)
{
	int64		id;
	bool		ok;
	Jsonb	   *result = NULL;
	OrchArgs	a = {0};
	OrchArgs	set = {0};
	HeapTuple	tup;
	TupleDesc	td;
	char	   *status;
	const char *want;
	bool		isnull;
	Datum		old;

	orch_require_arg(fcinfo, 0, "command_id");
	orch_require_arg(fcinfo, 1, "ok");
	id = PG_GETARG_INT64(0);
	ok = PG_GETARG_BOOL(1);
	if (!PG_ARGISNULL(2))
	{
		result = PG_GETARG_JSONB_P(2);
		orch_check_payload_size(result, "result");
	}
	want = ok ? "succeeded" : "failed";

	SPI_connect();
	/* on Citus: the statements below go to the command's shard */
	if (!orch_scope_command(id))
		orch_not_found("command", id);
	orch_arg_int8(&a, id);
	orch_arg_caller_tenants(&a);
	/* another tenant's row is neither locked nor seen; it does not exist for the caller */
	while (orch_args_sql_once(&a, "SELECT status, result, tenant_id FROM orch.commands WHERE id = $1"
							  "   AND " ORCH_TENANT_IN("tenant_id", "$2") " FOR UPDATE", false, 1, SPI_OK_SELECT) == 0 &&
		   orch_scope_lookup_again(id))
	{
		/* on Citus: the tenant remembered found nothing, the lookup did */
		a.n = 1;
		orch_arg_caller_tenants(&a);
	}
	if (!orch_found_visible(3))
		orch_not_found("command", id);
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	status = SPI_getvalue(tup, td, 1);
	if (strcmp(status, "pending") != 0)
	{
		bool		same;

		old = SPI_getbinval(tup, td, 2, &isnull);
		same = strcmp(status, want) == 0 &&
			((isnull && result == NULL) ||
			 (!isnull && result != NULL &&
			  DatumGetBool(DirectFunctionCall2(jsonb_eq, old, JsonbPGetDatum(result)))));
		if (!same)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_TERMINAL_STATE),
					 errmsg("command " INT64_FORMAT " already recorded as \"%s\"", id, status),
					 errdetail("A command's outcome is recorded once.")));
		orch_scope_clear();
		SPI_finish();
		PG_RETURN_TEXT_P(cstring_to_text(want));
	}
	orch_arg_int8(&set, id);
	orch_arg_text(&set, want);
	orch_arg(&set, JSONBOID, PointerGetDatum(result), result == NULL);
	orch_arg_text(&set, SPI_getvalue(tup, td, 3));
	orch_args_sql_once(&set, "UPDATE orch.commands SET status = $2, result = $3, completed_at = now()"
					   " WHERE id = $1 AND tenant_id = $4", false, 0, SPI_OK_UPDATE);
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(want));
}
