/*
 * task_ops.c
 *	  Acting on one task: complete, fail (through the retry decision),
 *	  cancel, await_tool/resume, await_confirmation/confirm; locking a task,
 *	  fencing a call by its lease token and recording a finished attempt,
 *	  which the calls that keep a lease (task_lease.c) share.  Every
 *	  call that takes a lease token checks it as a fencing token.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_complete);
PG_FUNCTION_INFO_V1(orch_complete_batch);
PG_FUNCTION_INFO_V1(orch_fail);
PG_FUNCTION_INFO_V1(orch_cancel);
PG_FUNCTION_INFO_V1(orch_await_tool);
PG_FUNCTION_INFO_V1(orch_resume);
PG_FUNCTION_INFO_V1(orch_await_confirmation);
PG_FUNCTION_INFO_V1(orch_confirm);


/* Lock a task FOR UPDATE and read what the calls below need. */
bool
orch_lock_task(int64 id, OrchTask *t)
{
	OrchArgs	a = {0};
	HeapTuple	tup;
	TupleDesc	td;
	bool		isnull;
	Datum		d;

	orch_arg_int8(&a, id);
	/*
	 * On Citus: the statements of this call go to the task's shard.  A call
	 * already scoped to a tenant (a claim recovering its tenant's leases,
	 * maintenance) looks only there.
	 */
	if (orch_scoped_tenant() == NULL && !orch_scope_task(id))
		return false;			/* no such task (on Citus) */
	/* another tenant's row is neither locked nor seen (no timing oracle) */
	orch_arg_caller_tenants(&a);
/*
 * Leases and timeouts are compared with the statement's time, not the
 * transaction's: inside a long transaction an expired lease is expired.
 */
#define LOCK_TASK_SQL(TIMEOUT_END) \
	"SELECT id, tenant_id, queue, state, attempts, failures," \
	" max_attempts, max_failures, retry_policy, lease_token, lease_owner," \
	" claimed_at, coalesce(lease_expires_at <= statement_timestamp(), true)," \
	" state = 'awaiting_tool' AND retry_at IS NOT NULL," \
	" ready_at IS NOT NULL," \
	" coalesce(" TIMEOUT_END " <= statement_timestamp(), false)," \
	" CASE WHEN run_id IS NOT NULL AND step_key LIKE '%" ORCH_APPROVAL_SUFFIX "' THEN step_key END, run_id" \
	" FROM orch.tasks WHERE id = $1" \
	"   AND " ORCH_TENANT_IN("tenant_id", "$2") " FOR UPDATE"
	/* on Citus the timeout is added in UTC, as the claim caps the lease there */
	if (orch_args_sql(&a, orch_citus() ? LOCK_TASK_SQL(ORCH_UTC_ADD("claimed_at", "timeout"))
					  : LOCK_TASK_SQL("claimed_at + timeout"), false, 1, SPI_OK_SELECT) == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	memset(t, 0, sizeof(*t));
	t->id = id;
	t->tenant = SPI_getvalue(tup, td, 2);
	t->queue = SPI_getvalue(tup, td, 3);
	t->state = orch_state_from_name(SPI_getvalue(tup, td, 4));
	t->attempts = DatumGetInt32(SPI_getbinval(tup, td, 5, &isnull));
	t->failures = DatumGetInt32(SPI_getbinval(tup, td, 6, &isnull));
	d = SPI_getbinval(tup, td, 7, &isnull);
	t->has_max_attempts = !isnull;
	t->max_attempts = isnull ? 0 : DatumGetInt32(d);
	d = SPI_getbinval(tup, td, 8, &isnull);
	t->has_max_failures = !isnull;
	t->max_failures = isnull ? 0 : DatumGetInt32(d);
	d = SPI_getbinval(tup, td, 9, &isnull);
	t->retry_policy = isnull ? NULL : DatumGetJsonbPCopy(d);
	d = SPI_getbinval(tup, td, 10, &isnull);
	t->has_token = !isnull;
	if (!isnull)
		memcpy(&t->token, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	t->lease_owner = SPI_getvalue(tup, td, 11);
	d = SPI_getbinval(tup, td, 12, &isnull);
	t->has_claimed_at = !isnull;
	t->claimed_at = isnull ? 0 : DatumGetTimestampTz(d);
	t->lease_expired = DatumGetBool(SPI_getbinval(tup, td, 13, &isnull));
	t->retry_wait = DatumGetBool(SPI_getbinval(tup, td, 14, &isnull));
	t->ready = DatumGetBool(SPI_getbinval(tup, td, 15, &isnull));
	t->timed_out = DatumGetBool(SPI_getbinval(tup, td, 16, &isnull));
	t->approval_of = SPI_getvalue(tup, td, 17);
	d = SPI_getbinval(tup, td, 18, &isnull);
	t->run_id = isnull ? 0 : DatumGetInt64(d);
	if (t->state == TS_INVALID)
		elog(ERROR, "orchestrator: task " INT64_FORMAT " has an unknown state", id);
	/* another tenant's task does not exist for a role bound to tenants */
	if (!orch_tenant_allowed(t->tenant))
		return false;
	return true;
}

/* On Citus, a scope this backend only remembered is looked up once first. */
void
orch_lock_task_or_not_found(int64 id, OrchTask *t)
{
	if (!orch_lock_task(id, t) && !(orch_scope_lookup_again(id) && orch_lock_task(id, t)))
		orch_not_found("task", id);
}

static void
raise_if_terminal(OrchTask *t, const char *action)
{
	if (orch_state_is_terminal(t->state))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_TERMINAL_STATE),
				 errmsg("task " INT64_FORMAT " is in terminal state \"%s\"; cannot %s it",
						t->id, orch_state_names[t->state], action),
				 errdetail("Terminal states are immutable.")));
}

/*
 * The task behind a human_approval step is decided through its run
 * (orch_approve / orch_reject: a single-use approval reference), never
 * confirmed or cancelled on its own (OR009).
 */
static void
refuse_approval_task(OrchTask *t, const char *action)
{
	char	   *step;

	if (t->approval_of == NULL)
		return;
	step = pnstrdup(t->approval_of, strlen(t->approval_of) - strlen(ORCH_APPROVAL_SUFFIX));
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
			 errmsg("task " INT64_FORMAT " is the approval of step \"%s\" of run " INT64_FORMAT "; cannot %s it on its own",
					t->id, step, t->run_id, action),
			 errdetail("A workflow approval is decided with an approval reference, which is single-use."),
			 errhint("Use orch_approve(" INT64_FORMAT ", %s, approval_ref) or orch_reject(...); orch_cancel_run(" INT64_FORMAT ") ends the run.",
					 t->run_id, quote_literal_cstr(step), t->run_id)));
}

/* OR002 before OR003; then the token must be current and the lease live. */
void
orch_check_lease(OrchTask *t, pg_uuid_t *token, const char *action)
{
	raise_if_terminal(t, action);
	if (!t->has_token || memcmp(t->token.data, token->data, UUID_LEN) != 0 ||
		t->state != TS_EXECUTING)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_STALE_LEASE),
				 errmsg("lease token does not hold task " INT64_FORMAT, t->id),
				 errdetail("The task is \"%s\"%s.", orch_state_names[t->state],
						   t->state == TS_EXECUTING ? " under another lease" : ""),
				 errhint("A worker that lost its lease must stop; the task's current owner decides its outcome.")));
	if (t->lease_expired)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_STALE_LEASE),
				 errmsg("lease on task " INT64_FORMAT " has expired%s", t->id,
						t->timed_out ? " (the task's timeout has passed)" : ""),
				 errhint("Heartbeat more often than the lease, or claim with a longer lease.")));
}


/* Append the finished execution to orch.attempts. */
void
orch_record_attempt(OrchTask *t, const char *outcome, const char *error_class,
			   const char *error, bool has_retry_at, TimestampTz retry_at)
{
	Datum		v[ORCH_ATTEMPT_COLS] = {
		orch_text_datum(t->tenant), Int64GetDatum(t->id), Int32GetDatum(t->attempts),
		t->lease_owner ? orch_text_datum(t->lease_owner) : (Datum) 0, UUIDPGetDatum(&t->token),
		TimestampTzGetDatum(t->claimed_at), orch_text_datum(outcome),
		error_class ? orch_text_datum(error_class) : (Datum) 0,
		error ? orch_text_datum(error) : (Datum) 0, TimestampTzGetDatum(retry_at)};
	bool		n[ORCH_ATTEMPT_COLS] = {false, false, false, t->lease_owner == NULL, !t->has_token,
	!t->has_claimed_at, false, error_class == NULL, error == NULL, !has_retry_at};

	orch_attempts_insert(1, v, n);
}

/*
 * Are a call's completions recorded by the task rows themselves (the
 * trigger sets complete_event_id and the columns with it; no event row, no
 * attempt row)?  From 0.8.0 on, off Citus: on Citus the task trigger runs on
 * the shard's node, which does not see this call's event context; it writes
 * the event row there, and the call the attempt row.
 */
static bool
completion_in_task(void)
{
	return orch_schema_rows_record_history() && !orch_citus();
}

/*
 * The completion statements (the task's own, then a batch's): RETURNING
 * (tenant_id, id, attempts, lease_owner, lease_token, claimed_at), and with
 * completion_in_task the complete_attempt_id the trigger set.
 */
#define COMPLETE_SQL(MORE) \
	"UPDATE orch.tasks SET state = 'completed', result = $3, reason_code = 'completed'" \
	" WHERE id = $1 AND lease_token = $2 AND state = $4" \
	"   AND lease_expires_at > statement_timestamp()" \
	"   AND " ORCH_TENANT_IN("tenant_id", "$5") \
	" RETURNING tenant_id, id, attempts, lease_owner, lease_token, claimed_at" MORE
#define COMPLETE_BATCH_SQL(MORE) \
	"UPDATE orch.tasks t SET state = 'completed', result = r.result, reason_code = 'completed'" \
	" FROM unnest($1, $2, coalesce($3, array_fill(NULL::jsonb, ARRAY[cardinality($1)])))" \
	"   AS r(id, tok, result)" \
	" WHERE t.id = r.id AND t.lease_token = r.tok AND t.state = $4" \
	"   AND t.lease_expires_at > statement_timestamp()" \
	"   AND " ORCH_TENANT_IN("t.tenant_id", "$5") \
	" RETURNING t.tenant_id, t.id, t.attempts, t.lease_owner, t.lease_token, t.claimed_at" MORE

#define SPI_attisnull_row(TT, ROW, COL) \
	heap_attisnull((TT)->vals[ROW], (COL), (TT)->tupdesc)

/*
 * The completed tasks (tt, rows of the completion's RETURNING: the task id
 * second, complete_attempt_id seventh) whose lifecycle trigger did not run:
 * the claim each row records is written out as an event row and cleared,
 * as the trigger does when a task leaves executing other than by a
 * completion it records, so that the metrics fold, which looks for
 * recorded claims on executing rows and on rows that record their
 * completion, still finds it.  (The update is not checked by the trigger
 * either: it is off for this session.)
 */
static void
write_out_claims(SPITupleTable *tt, int rows)
{
	Datum	   *ids = palloc(sizeof(Datum) * Max(rows, 1));
	int			n = 0;
	OrchArgs	a = {0};
	OrchEvent **events;
	uint64		found;

	for (int i = 0; i < rows; i++)
	{
		bool		isnull;

		if (!SPI_attisnull_row(tt, i, 7))
			continue;			/* its trigger ran: the row records its completion */
		ids[n++] = SPI_getbinval(tt->vals[i], tt->tupdesc, 2, &isnull);
	}
	if (n == 0)
		return;
	orch_arg(&a, INT8ARRAYOID,
			 PointerGetDatum(construct_array(ids, n, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE)), false);
	/* cleared, and the claims they recorded returned (ORCH_CLAIM_FIELDS) */
	found = orch_args_sql(&a, "WITH c AS ("
						  "  SELECT t.id, t.tenant_id, t.run_id, t.claim_event_id, t.claimed_by, t.attempts,"
						  "         t.lease_token, t.claimed_at, t.lease_owner, t.claim_xact, t.claim_waited"
						  "    FROM orch.tasks t WHERE t.id = ANY ($1) AND t.claim_event_id IS NOT NULL"
						  "     AND t.state = 'completed' AND t.complete_event_id IS NULL)"
						  " UPDATE orch.tasks t SET claim_event_id = NULL, claimed_by = NULL, claim_xact = NULL,"
						  "        claim_waited = NULL"
						  "   FROM c WHERE t.id = c.id AND t.tenant_id = c.tenant_id"
						  " RETURNING c.*", false, 0, SPI_OK_UPDATE_RETURNING);
	if (found == 0)
		return;
	events = palloc(sizeof(OrchEvent *) * found);
	for (uint64 i = 0; i < found; i++)
	{
		Datum		cv[ORCH_CLAIM_FIELDS];
		bool		cn[ORCH_CLAIM_FIELDS];

		orch_spi_values(SPI_tuptable, i, 1, ORCH_CLAIM_FIELDS, cv, cn);
		events[i] = orch_claim_event(cv, cn);
	}
	orch_events_write(events, (int) found);
	pfree(ids);
}

/*
 * The attempt rows of the tasks a completion statement just completed that
 * their rows do not record: all of them without completion_in_task (on
 * Citus, on a 0.7.0 schema); with it, only those whose complete_attempt_id
 * came back empty (the lifecycle trigger did not run: triggers disabled,
 * session_replication_role = replica), so that no completion goes
 * unrecorded.  Appended directly (append.c); through SQL when orch.attempts
 * needs it.
 */
static void
record_completed_attempts(SPITupleTable *tt, int rows, bool in_task)
{
	if (in_task)
		write_out_claims(tt, rows);
	/* (more than one row: appended directly when orch.attempts allows it) */
	orch_attempts_insert_rows(tt, rows, 1, in_task ? -7 : 0, "completed", NULL);
}


/*
 * A failed execution of a locked, executing task: decide by the task's
 * policy (queue settings, then the task's own budgets and retry_policy),
 * record the attempt, and move the task.  Used by orch_fail and by lease
 * recovery (outcome "lease_expired").
 */
RetryDecision
orch_fail_locked(OrchTask *t, ErrorClass ec, const char *error,
				 bool has_retry_after, int64 retry_after, const char *outcome,
				 TimestampTz *retry_at)
{
	QueueSettings qs;
	RetryDecision d;
	TimestampTz at = 0;
	OrchArgs	a = {0};
	Datum		wait_data = (Datum) 0;
	bool		has_wait_data = false;
	const char *reason;
	bool		recovery = strcmp(outcome, "lease_expired") == 0 ||
		strcmp(outcome, "timed_out") == 0;

	orch_load_queue(t->queue, &qs, NULL);
	if (t->has_max_attempts)
		qs.policy.max_attempts = t->max_attempts;
	if (t->has_max_failures)
		qs.policy.max_failures = t->max_failures;
	if (t->retry_policy)
		orch_settings_apply(&qs, t->retry_policy, true);

	d = orch_decide(&qs.policy, ec, t->attempts, t->failures + 1, false,
					has_retry_after, retry_after, t->id);
	if (d.retry)
		at = GetCurrentTransactionStartTimestamp() + d.delay;
	reason = (d.retry && recovery) ? outcome : d.reason_code;

	orch_record_attempt(t, outcome, orch_error_class_names[ec], error, d.retry, at);

	orch_arg_int8(&a, t->id);
	orch_arg_text(&a, t->tenant);
	orch_arg_text(&a, orch_state_names[d.next_state]);
	orch_arg_int4(&a, t->failures + 1);
	orch_arg_text(&a, reason);
	orch_arg_text(&a, error);
	orch_arg_text(&a, orch_error_class_names[ec]);
	orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(at), !d.retry);
	/* an escalation records why, for whoever confirms (else no wait data) */
	if (d.next_state == TS_AWAITING_CONFIRMATION)
	{
		OrchArgs	e = {0};
		bool		isnull;

		/* $5 and $6 of the update: the reason and the error, as they are */
		orch_arg(&e, TEXTOID, a.values[4], false);
		orch_arg(&e, TEXTOID, a.values[5], a.nulls[5] == 'n');
		orch_args_sql_once(&e, "SELECT jsonb_build_object('escalated', $1, 'error', $2)", true, 1, SPI_OK_SELECT);
		wait_data = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		has_wait_data = true;
	}
	orch_arg(&a, JSONBOID, wait_data, !has_wait_data);
	if (orch_args_sql(&a, "UPDATE orch.tasks SET state = $3, failures = $4, reason_code = $5,"
					  " last_error = $6, last_error_class = $7, retry_at = $8, ready_at = $8,"
					  " wait_data = $9"
					  " WHERE id = $1 AND tenant_id = $2",
					  false, 0, SPI_OK_UPDATE) != 1)
		elog(ERROR, "orchestrator: task update failed");
	if (retry_at)
		*retry_at = at;
	return d;
}

/* ----------------------------------------------------------------------
 * Argument helpers
 * ---------------------------------------------------------------------- */
int64
orch_task_id_arg(FunctionCallInfo fcinfo)
{
	orch_require_arg(fcinfo, 0, "task_id");
	return PG_GETARG_INT64(0);
}

pg_uuid_t *
orch_lease_token_arg(FunctionCallInfo fcinfo)
{
	orch_require_arg(fcinfo, 1, "lease_token");
	return PG_GETARG_UUID_P(1);
}

/* One task update (of exactly one row). */
static void
exec_update(const char *sql, OrchArgs *a)
{
	if (orch_args_sql(a, sql, false, 0, SPI_OK_UPDATE) != 1)
		elog(ERROR, "orchestrator: task update failed");
}

/*
 * The end of a task call that returns the state it left the task in: the
 * task scope cleared, SPI closed, the state as text.
 */
Datum
orch_task_call_end(const char *state)
{
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/* The caller's tenants, the completion's $5: a text[], or (Datum) 0 for all */
static Datum
caller_tenants(const OrchArgs *a)
{
	return a->nulls[4] == 'n' ? (Datum) 0 : a->values[4];
}

/* ----------------------------------------------------------------------
 * orch_complete(task_id, lease_token, result) -> 'completed'
 * ---------------------------------------------------------------------- */

Datum
orch_complete(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		id = orch_task_id_arg(fcinfo);
	pg_uuid_t  *token = orch_lease_token_arg(fcinfo);
	Jsonb	   *result = orch_jsonb_arg(fcinfo, 2, "result");
	OrchArgs	a = {0};
	bool		in_task;
	OrchCompletion want = {id, token, PointerGetDatum(result), result == NULL};
	OrchDirect	stop = ORCH_DIRECT_SQL;

	orch_arg_int8(&a, id);
	orch_arg(&a, UUIDOID, UUIDPGetDatum(token), false);
	orch_arg_jsonb(&a, result);
	/* a parameter, not a literal: keeps the generic plan on the primary key */
	orch_arg_text(&a, "executing");

	SPI_connect();
	in_task = completion_in_task();
	if (!orch_scope_task(id))
		orch_not_found("task", id);
	orch_arg_caller_tenants(&a);
	ev = orch_set_event_context_ext(NULL, NULL, true);
	if (in_task)
	{
		orch_event_context_completion_in_task();
		/* written without SQL where the UPDATE would do the same */
		if (orch_tasks_complete_direct(orch_task_updating, &want, 1, caller_tenants(&a), &stop) == 1)
			orch_tasks_updated();
	}
	/* One statement fences and completes (and, off Citus, records it all) */
	if (stop == ORCH_DIRECT_NO_MATCH ||
		(stop == ORCH_DIRECT_SQL &&
		 orch_args_sql(&a, in_task ? COMPLETE_SQL(", complete_attempt_id") : COMPLETE_SQL(""),
					   false, 0, SPI_OK_UPDATE_RETURNING) == 0))
	{
		OrchTask	t;

		/* Say why: unknown, terminal (OR002), or stale lease (OR003) */
		orch_lock_task_or_not_found(id, &t);
		orch_check_lease(&t, token, "complete");
		elog(ERROR, "orchestrator: task " INT64_FORMAT " could not be completed", id);
	}
	if (stop == ORCH_DIRECT_SQL)
		record_completed_attempts(SPI_tuptable, (int) SPI_processed, in_task);
	orch_clear_event_context(ev);
	return orch_task_call_end("completed");
}

/* ascending bigints, for qsort */
static int
int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/* ----------------------------------------------------------------------
 * orch_complete_batch(task_ids bigint[], lease_tokens uuid[], results jsonb[])
 *	  -> integer
 *	  Completes many claimed tasks in one statement, all or nothing: when any
 *	  (task, token) pair does not hold, the error of orch_complete for that
 *	  task is raised and nothing changes.
 * ---------------------------------------------------------------------- */

/* What orch_complete_batch was given, checked */
typedef struct CompleteBatch
{
	ArrayType  *ids_a;
	ArrayType  *toks_a;
	ArrayType  *res_a;			/* NULL: no results */
	int			n;
	Datum	   *ids;
	Datum	   *toks;
	Datum	   *res;			/* NULL without res_a */
	bool	   *res_nulls;
} CompleteBatch;

/* task_ids and lease_tokens of one length, no nulls, no task twice; results one per task */
static void
complete_batch_args(FunctionCallInfo fcinfo, CompleteBatch *b)
{
	bool	   *id_nulls;
	bool	   *tok_nulls;
	int			ntok;
	int64	   *sorted;

	orch_require_arg(fcinfo, 0, "task_ids");
	orch_require_arg(fcinfo, 1, "lease_tokens");
	b->ids_a = PG_GETARG_ARRAYTYPE_P(0);
	b->toks_a = PG_GETARG_ARRAYTYPE_P(1);
	orch_check_batch_size(ArrayGetNItems(ARR_NDIM(b->ids_a), ARR_DIMS(b->ids_a)), "tasks");
	deconstruct_array(b->ids_a, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &b->ids, &id_nulls, &b->n);
	deconstruct_array(b->toks_a, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR, &b->toks, &tok_nulls, &ntok);
	if (b->n != ntok)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("task_ids and lease_tokens must have the same length"),
				 errdetail("There are %d task ids and %d lease tokens.", b->n, ntok)));
	/* a task twice: found in sorted order, in n log n (n is up to the cap) */
	sorted = palloc(sizeof(int64) * Max(b->n, 1));
	for (int i = 0; i < b->n; i++)
	{
		if (id_nulls[i] || tok_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("task_ids and lease_tokens must not contain nulls"),
					 errdetail("Element %d is null.", i + 1)));
		sorted[i] = DatumGetInt64(b->ids[i]);
	}
	qsort(sorted, b->n, sizeof(int64), int64_cmp);
	for (int i = 1; i < b->n; i++)
		if (sorted[i] == sorted[i - 1])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("task " INT64_FORMAT " appears twice in task_ids", sorted[i])));
	pfree(sorted);
	b->res_a = NULL;
	b->res = NULL;
	b->res_nulls = NULL;
	if (!PG_ARGISNULL(2))
	{
		int			nres;

		b->res_a = PG_GETARG_ARRAYTYPE_P(2);
		deconstruct_array(b->res_a, JSONBOID, -1, false, TYPALIGN_INT, &b->res, &b->res_nulls, &nres);
		if (nres != b->n)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("results must have one element per task"),
					 errdetail("There are %d task ids and %d results.", b->n, nres)));
		for (int i = 0; i < nres; i++)
			if (!b->res_nulls[i])
				orch_check_payload_size(DatumGetJsonbP(b->res[i]), "result");
	}
}

/*
 * The first tasks of the batch completed without SQL (as many as could be,
 * in order; *stop: why it stopped), and their statement ended.
 */
static int
complete_batch_direct(const CompleteBatch *b, Datum tenants, OrchDirect *stop)
{
	OrchCompletion *want = palloc(sizeof(OrchCompletion) * b->n);
	int			done;

	for (int i = 0; i < b->n; i++)
	{
		want[i].id = DatumGetInt64(b->ids[i]);
		want[i].token = DatumGetUUIDP(b->toks[i]);
		want[i].result = b->res ? b->res[i] : (Datum) 0;
		want[i].result_null = b->res == NULL || b->res_nulls[i];
	}
	done = orch_tasks_complete_direct(orch_task_updating, want, b->n, tenants, stop);
	if (done > 0)
		orch_tasks_updated();
	pfree(want);
	return done;
}

/* An array of the elements from..n-1 of elems (the whole array when from is 0) */
static Datum
array_tail(ArrayType *whole, Datum *elems, int from, int n, Oid type, int len, bool byval, char align)
{
	if (from == 0)
		return PointerGetDatum(whole);
	return PointerGetDatum(construct_array(elems + from, n - from, type, len, byval, align));
}

/*
 * The tasks of the batch from the from-th on completed by one UPDATE; the
 * ids it completed added to done (*ndone).  Its rows are SPI_tuptable's.
 */
static int
complete_batch_sql(const CompleteBatch *b, int from, bool in_task, Datum tenants, bool all_tenants,
				   int64 *done, int *ndone)
{
	OrchArgs	a = {0};
	int			completed;

	orch_arg(&a, INT8ARRAYOID,
			 array_tail(b->ids_a, b->ids, from, b->n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE), false);
	orch_arg(&a, UUIDARRAYOID,
			 array_tail(b->toks_a, b->toks, from, b->n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR), false);
	if (b->res_a == NULL)
		orch_arg(&a, JSONBARRAYOID, (Datum) 0, true);
	else if (from == 0)
		orch_arg(&a, JSONBARRAYOID, PointerGetDatum(b->res_a), false);
	else
	{
		int			dims[1] = {b->n - from};
		int			lbs[1] = {1};

		orch_arg(&a, JSONBARRAYOID,
				 PointerGetDatum(construct_md_array(b->res + from, b->res_nulls + from, 1, dims, lbs,
													JSONBOID, -1, false, TYPALIGN_INT)), false);
	}
	orch_arg_text(&a, "executing");
	orch_arg(&a, TEXTARRAYOID, tenants, all_tenants);
	completed = (int) orch_args_sql(&a, in_task ? COMPLETE_BATCH_SQL(", t.complete_attempt_id")
									: COMPLETE_BATCH_SQL(""),
									false, 0, SPI_OK_UPDATE_RETURNING);
	for (int i = 0; i < completed; i++)
	{
		bool		isnull;

		done[(*ndone)++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2,
													   &isnull));
	}
	return completed;
}

/* The error of the first task of the batch not among done; all is undone */
static void
complete_batch_refused(const CompleteBatch *b, const int64 *done, int ndone)
{
	for (int i = 0; i < b->n; i++)
	{
		OrchTask	t;
		bool		by_this_call = false;

		for (int j = 0; j < ndone && !by_this_call; j++)
			by_this_call = done[j] == DatumGetInt64(b->ids[i]);
		if (by_this_call)
			continue;
		orch_lock_task_or_not_found(DatumGetInt64(b->ids[i]), &t);
		orch_check_lease(&t, DatumGetUUIDP(b->toks[i]), "complete");
	}
	elog(ERROR, "orchestrator: batch complete lost track of a task");
}

Datum
orch_complete_batch(PG_FUNCTION_ARGS)
{
	int			ev;
	CompleteBatch b;
	OrchArgs	tenants = {0};
	bool		in_task;
	int			direct = 0;
	int64	   *done;
	int			ndone = 0;
	OrchDirect	stop = ORCH_DIRECT_SQL;

	complete_batch_args(fcinfo, &b);
	if (b.n == 0)
		PG_RETURN_INT32(0);

	SPI_connect();
	/* none found (on Citus): the first id is reported missing below */
	(void) orch_scope_tasks(PointerGetDatum(b.ids_a));
	orch_arg_caller_tenants(&tenants);
	ev = orch_set_event_context_ext(NULL, NULL, true);
	in_task = completion_in_task();
	done = palloc(sizeof(int64) * b.n);
	if (in_task)
	{
		orch_event_context_completion_in_task();
		/* written without SQL where the UPDATE would do the same */
		direct = complete_batch_direct(&b, tenants.nulls[0] == 'n' ? (Datum) 0 : tenants.values[0],
									   &stop);
		for (int i = 0; i < direct; i++)
			done[ndone++] = DatumGetInt64(b.ids[i]);
	}
	if (stop == ORCH_DIRECT_NO_MATCH ||
		(stop == ORCH_DIRECT_SQL &&
		 complete_batch_sql(&b, direct, in_task, tenants.values[0], tenants.nulls[0] == 'n',
							done, &ndone) != b.n - direct))
		complete_batch_refused(&b, done, ndone);
	if (stop == ORCH_DIRECT_SQL)
		record_completed_attempts(SPI_tuptable, b.n - direct, in_task);
	orch_clear_event_context(ev);
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_INT32(b.n);
}

/* ----------------------------------------------------------------------
 * orch_fail(task_id, lease_token, error_class, error, retry_after)
 *	  -> (state, reason_code, retry_at)
 * ---------------------------------------------------------------------- */
Datum
orch_fail(PG_FUNCTION_ARGS)
{
	int			ev;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		id = orch_task_id_arg(fcinfo);
	pg_uuid_t  *token = orch_lease_token_arg(fcinfo);
	ErrorClass	ec;
	char	   *error;
	int64		retry_after;
	bool		has_retry_after;
	OrchTask	t;
	RetryDecision d;
	TimestampTz retry_at;
	Datum		values[3];
	bool		nulls[3] = {false, false, false};

	orch_require_arg(fcinfo, 2, "error_class");
	ec = orch_error_class_from_name(orch_text_arg(fcinfo, 2));
	error = orch_text_arg(fcinfo, 3);
	if (error && strlen(error) > (size_t) orch_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("error text is too large"),
				 errdetail("orchestrator.max_payload_size is %d bytes.", orch_max_payload_size)));

	has_retry_after = orch_retry_after_arg(fcinfo, 4, &retry_after);
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	orch_check_lease(&t, token, "fail");
	ev = orch_set_event_context(t.lease_owner, error);
	d = orch_fail_locked(&t, ec, error, has_retry_after, retry_after, "failed", &retry_at);
	orch_clear_event_context(ev);
	orch_scope_clear();
	SPI_finish();

	values[0] = orch_text_datum(orch_state_names[d.next_state]);
	values[1] = orch_text_datum(d.retry ? "retry_scheduled" : d.reason_code);
	values[2] = TimestampTzGetDatum(retry_at);
	nulls[2] = !d.retry;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* ----------------------------------------------------------------------
 * orch_cancel(task_id, reason) -> 'cancelled'
 * ---------------------------------------------------------------------- */
/*
 * Cancel a locked task that is not terminal (an executing one ends its
 * attempt, outcome cancelled).  The caller set the event context (its
 * reason) and refused what may not be cancelled on its own.
 */
void
orch_cancel_locked(OrchTask *t, const char *reason)
{
	OrchArgs	a = {0};

	if (t->state == TS_EXECUTING)
		orch_record_attempt(t, "cancelled", NULL, reason, false, 0);
	orch_arg_int8(&a, t->id);
	orch_arg_text(&a, t->tenant);
	exec_update("UPDATE orch.tasks SET state = 'cancelled', reason_code = 'cancelled'"
				" WHERE id = $1 AND tenant_id = $2", &a);
}

/* May the task be cancelled on its own (not the approval of a step)? */
bool
orch_cancel_allowed(OrchTask *t)
{
	return t->approval_of == NULL;
}

Datum
orch_cancel(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		id = orch_task_id_arg(fcinfo);
	char	   *reason = orch_text_arg(fcinfo, 1);
	OrchTask	t;

	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	raise_if_terminal(&t, "cancel");
	refuse_approval_task(&t, "cancel");
	ev = orch_set_event_context(NULL, reason);
	orch_cancel_locked(&t, reason);
	orch_clear_event_context(ev);
	return orch_task_call_end("cancelled");
}

/* ----------------------------------------------------------------------
 * Waiting: orch_await_tool / orch_await_confirmation park a claimed task,
 * ending its attempt and releasing its lease.
 * ---------------------------------------------------------------------- */
static void
park(FunctionCallInfo fcinfo, TaskState to, Jsonb *wait_data)
{
	int			ev;
	int64		id = orch_task_id_arg(fcinfo);
	pg_uuid_t  *token = orch_lease_token_arg(fcinfo);
	OrchTask	t;
	OrchArgs	a = {0};
	const char *state = orch_state_names[to];

	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	orch_check_lease(&t, token, "park");
	ev = orch_set_event_context(t.lease_owner, NULL);
	orch_record_attempt(&t, state, NULL, NULL, false, 0);
	orch_arg_int8(&a, id);
	orch_arg_text(&a, t.tenant);
	orch_arg_text(&a, state);
	orch_arg_jsonb(&a, wait_data);
	exec_update("UPDATE orch.tasks SET state = $3, reason_code = $3, ready_at = NULL,"
				" retry_at = NULL, wait_data = $4, resume_data = NULL"
				" WHERE id = $1 AND tenant_id = $2", &a);
	orch_clear_event_context(ev);
	orch_scope_clear();
	SPI_finish();
}

Datum
orch_await_tool(PG_FUNCTION_ARGS)
{
	char	   *tool = orch_key_arg(fcinfo, 2, "tool");
	Jsonb	   *request = orch_jsonb_arg(fcinfo, 3, "request");
	JsonbParseState *ps = NULL;
	JsonbValue	k,
				val;
	JsonbValue *res;

	/* wait_data = {"tool": ..., "request": ...} */
	pushJsonbValue(&ps, WJB_BEGIN_OBJECT, NULL);
	k.type = jbvString;
	k.val.string.val = "tool";
	k.val.string.len = 4;
	pushJsonbValue(&ps, WJB_KEY, &k);
	if (tool)
	{
		val.type = jbvString;
		val.val.string.val = tool;
		val.val.string.len = strlen(tool);
	}
	else
		val.type = jbvNull;
	pushJsonbValue(&ps, WJB_VALUE, &val);
	k.val.string.val = "request";
	k.val.string.len = 7;
	pushJsonbValue(&ps, WJB_KEY, &k);
	if (request)
	{
		val.type = jbvBinary;
		val.val.binary.data = &request->root;
		val.val.binary.len = VARSIZE(request) - VARHDRSZ;
	}
	else
		val.type = jbvNull;
	pushJsonbValue(&ps, WJB_VALUE, &val);
	res = pushJsonbValue(&ps, WJB_END_OBJECT, NULL);

	park(fcinfo, TS_AWAITING_TOOL, JsonbValueToJsonb(res));
	PG_RETURN_TEXT_P(cstring_to_text("awaiting_tool"));
}

Datum
orch_await_confirmation(PG_FUNCTION_ARGS)
{
	park(fcinfo, TS_AWAITING_CONFIRMATION, orch_jsonb_arg(fcinfo, 2, "prompt"));
	PG_RETURN_TEXT_P(cstring_to_text("awaiting_user_confirmation"));
}

/* A parked task must be in the given waiting state and not yet released. */
static void
require_waiting(OrchTask *t, TaskState waiting, const char *action)
{
	raise_if_terminal(t, action);
	if (t->state != waiting || t->retry_wait)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
				 errmsg("task " INT64_FORMAT " is \"%s\"%s, not waiting for %s",
						t->id, orch_state_names[t->state],
						t->retry_wait ? " (waiting to retry)" : "",
						waiting == TS_AWAITING_TOOL ? "a tool" : "confirmation")));
	if (!t->ready)
	{
		/* resumed or approved, but waiting for a slot of its concurrency key */
		OrchArgs	a = {0};
		bool		isnull;

		orch_arg_int8(&a, t->id);
		if (orch_args_sql_once(&a, "SELECT gated FROM orch.tasks WHERE id = $1", false, 1, SPI_OK_SELECT) != 1)
			elog(ERROR, "orchestrator: task lookup failed");
		t->ready = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (t->ready)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
				 errmsg("task " INT64_FORMAT " was already %s", t->id,
						waiting == TS_AWAITING_TOOL ? "resumed" : "approved"),
				 errdetail("It waits to be claimed again.")));
}

/* orch_resume(task_id, result) -> 'awaiting_tool' (claimable at once) */
Datum
orch_resume(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		id = orch_task_id_arg(fcinfo);
	Jsonb	   *result = orch_jsonb_arg(fcinfo, 1, "result");
	OrchTask	t;
	OrchArgs	a = {0};

	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	require_waiting(&t, TS_AWAITING_TOOL, "resume");
	orch_arg_int8(&a, id);
	orch_arg_text(&a, t.tenant);
	orch_arg_jsonb(&a, result);
	ev = orch_set_event_context(NULL, NULL);
	exec_update("UPDATE orch.tasks SET resume_data = $3, ready_at = now(), reason_code = 'tool_resumed'"
				" WHERE id = $1 AND tenant_id = $2", &a);
	orch_write_event(t.tenant, id, true, "task", "awaiting_tool", "awaiting_tool",
					 "tool_resumed", t.attempts, NULL, NULL);
	orch_clear_event_context(ev);
	return orch_task_call_end("awaiting_tool");
}

/* orch_confirm(task_id, approve, actor, note) */
Datum
orch_confirm(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		id = orch_task_id_arg(fcinfo);
	bool		approve;
	char	   *actor = orch_key_arg(fcinfo, 2, "actor");
	char	   *note = orch_text_arg(fcinfo, 3);
	OrchTask	t;
	OrchArgs	a = {0};
	const char *result;

	orch_require_arg(fcinfo, 1, "approve");
	approve = PG_GETARG_BOOL(1);

	SPI_connect();
	orch_lock_task_or_not_found(id, &t);
	if (!orch_state_is_terminal(t.state))
		refuse_approval_task(&t, approve ? "approve" : "reject");
	require_waiting(&t, TS_AWAITING_CONFIRMATION, approve ? "approve" : "reject");
	ev = orch_set_event_context(actor, note);
	orch_arg_int8(&a, id);
	orch_arg_text(&a, t.tenant);
	/* the decision is the role's; a name it gives is kept beside it */
	orch_arg_text(&a, orch_current_actor());
	orch_arg_text(&a, note);
	orch_arg_text(&a, actor);
	if (approve)
	{
		exec_update("UPDATE orch.tasks SET ready_at = now(), reason_code = 'confirmation_approved',"
					" resume_data = jsonb_strip_nulls(jsonb_build_object('approved', true, 'actor', $3,"
					"   'label', $5, 'note', $4))"
					" WHERE id = $1 AND tenant_id = $2", &a);
		orch_write_event(t.tenant, id, true, "task", "awaiting_user_confirmation",
						 "awaiting_user_confirmation", "confirmation_approved",
						 t.attempts, NULL, NULL);
		result = "awaiting_user_confirmation";
	}
	else
	{
		exec_update("UPDATE orch.tasks SET state = 'failed', reason_code = 'confirmation_rejected',"
					" resume_data = jsonb_strip_nulls(jsonb_build_object('approved', false, 'actor', $3,"
					"   'label', $5, 'note', $4))"
					" WHERE id = $1 AND tenant_id = $2", &a);
		result = "failed";
	}
	orch_clear_event_context(ev);
	return orch_task_call_end(result);
}
