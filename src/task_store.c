/*
 * task_store.c
 *	  The one writer of task rows.  Every task is inserted here, whoever
 *	  makes it: an enqueue (one or a batch), a dead letter's re-drive, a
 *	  workflow step's task (one, or one per map item), a compensation task,
 *	  the task of a human approval.  The caller decides the row's values
 *	  (queue settings through settings.c, a step's from its definition); the
 *	  task trigger (lifecycle.c) then checks and records the insert like any
 *	  other transition.  One row is inserted with a VALUES statement, a batch
 *	  with one statement over the arrays of what differs between its rows.
 *	  And the one writer of attempt rows: a task's finished execution
 *	  (failed, cancelled, completed, handed to a person).  Caller is
 *	  connected to SPI.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

#define TASK_INSERT_COLUMNS \
	"INSERT INTO orch.tasks (id, tenant_id, queue, state, reason_code, priority, run_at, ready_at," \
	" max_attempts, max_failures, retry_policy, timeout, idempotency_key, owner, concurrency_key," \
	" run_id, retry_of, correlation_id, payload, step_key)"

/* $1 .. $17: what every row of one insert shares (see task_args) */
#define TASK_SHARED_VALUES \
	"$2, $3, $4, $5, $6, COALESCE($7, now()), COALESCE($7, now()), $8, $9, $10, $11, $12, $13, $14," \
	" $15, $16, $17"

static void
arg_opt_int8(OrchArgs *a, int64 v)
{
	orch_arg(a, INT8OID, Int64GetDatum(v), v == 0);
}

/* $1 id (NULL: the sequence's next) .. $17 correlation id */
static void
task_args(OrchArgs *a, const OrchTaskRow *t)
{
	arg_opt_int8(a, t->id);
	orch_arg_text(a, t->tenant);
	orch_arg_text(a, t->queue);
	orch_arg_text(a, t->state ? t->state : "queued");
	orch_arg_text(a, t->reason_code ? t->reason_code : "enqueued");
	orch_arg_int4(a, t->priority);
	orch_arg(a, TIMESTAMPTZOID, TimestampTzGetDatum(t->run_at), !t->has_run_at);
	orch_arg(a, INT4OID, Int32GetDatum(t->max_attempts), !t->has_max_attempts);
	orch_arg(a, INT4OID, Int32GetDatum(t->max_failures), !t->has_max_failures);
	orch_arg_jsonb(a, t->retry_policy);
	orch_arg(a, INTERVALOID, IntervalPGetDatum(t->timeout), t->timeout == NULL);
	orch_arg_text(a, t->idempotency_key);
	orch_arg_text(a, t->owner);
	orch_arg_text(a, t->concurrency_key);
	arg_opt_int8(a, t->run_id);
	arg_opt_int8(a, t->retry_of);
	orch_arg_text(a, t->correlation_id);
}

/* Insert one task (payload; step_key NULL: none); returns its id. */
int64
orch_task_insert(const OrchTaskRow *t, Jsonb *payload, const char *step_key)
{
	OrchArgs	a = {0};
	bool		isnull;
	int64		id;

	task_args(&a, t);
	orch_arg_jsonb(&a, payload);
	orch_arg_text(&a, step_key);
	if (orch_args_sql(&a, TASK_INSERT_COLUMNS
					  " VALUES (COALESCE($1, nextval('orch.events_id_seq')), " TASK_SHARED_VALUES ", $18, $19)"
					  " RETURNING id", false, 0, SPI_OK_INSERT_RETURNING) != 1)
		elog(ERROR, "orchestrator: task insert failed");
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	/* a batch may enqueue row by row through here: keep nothing per row */
	SPI_freetuptable(SPI_tuptable);
	return id;
}

/* The columns a batch of tasks is written with (orch_tasks_write) */
enum
{
	TC_ID, TC_TENANT, TC_QUEUE, TC_STATE, TC_REASON, TC_PRIORITY, TC_RUN_AT, TC_READY_AT,
	TC_MAX_ATTEMPTS, TC_MAX_FAILURES, TC_RETRY_POLICY, TC_TIMEOUT, TC_KEY, TC_OWNER,
	TC_CONCURRENCY_KEY, TC_RUN_ID, TC_RETRY_OF, TC_CORRELATION, TC_PAYLOAD,
	TC_COUNT
};

static const char *const task_append_cols[TC_COUNT] = {
	"id", "tenant_id", "queue", "state", "reason_code", "priority", "run_at", "ready_at",
	"max_attempts", "max_failures", "retry_policy", "timeout", "idempotency_key", "owner",
	"concurrency_key", "run_id", "retry_of", "correlation_id", "payload"
};

/* ... and their types (a column of another type: the INSERT, which coerces) */
static const Oid task_append_types[TC_COUNT] = {
	INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	INT4OID, INT4OID, JSONBOID, INTERVALOID, TEXTOID, TEXTOID,
	TEXTOID, INT8OID, INT8OID, TEXTOID, JSONBOID
};

/* What every row of a batch shares: the values of the INSERT's $2 .. $17 */
static void
append_shared(const OrchTaskRow *t, Datum *v, bool *nl)
{
	TimestampTz run_at = t->has_run_at ? t->run_at : GetCurrentTransactionStartTimestamp();

#define PUT(c, d, isnull) do { v[c] = (d); nl[c] = (isnull); } while (0)
#define PUT_TEXT(c, s) PUT(c, (s) ? CStringGetTextDatum(s) : (Datum) 0, (s) == NULL)
	PUT_TEXT(TC_TENANT, t->tenant);
	PUT_TEXT(TC_QUEUE, t->queue);
	PUT_TEXT(TC_STATE, t->state ? t->state : "queued");
	PUT_TEXT(TC_REASON, t->reason_code ? t->reason_code : "enqueued");
	PUT(TC_PRIORITY, Int32GetDatum(t->priority), false);
	PUT(TC_RUN_AT, TimestampTzGetDatum(run_at), false);
	PUT(TC_READY_AT, TimestampTzGetDatum(run_at), false);
	PUT(TC_MAX_ATTEMPTS, Int32GetDatum(t->max_attempts), !t->has_max_attempts);
	PUT(TC_MAX_FAILURES, Int32GetDatum(t->max_failures), !t->has_max_failures);
	PUT(TC_RETRY_POLICY, JsonbPGetDatum(t->retry_policy), t->retry_policy == NULL);
	PUT(TC_TIMEOUT, IntervalPGetDatum(t->timeout), t->timeout == NULL);
	PUT_TEXT(TC_KEY, t->idempotency_key);
	PUT_TEXT(TC_OWNER, t->owner);
	PUT_TEXT(TC_CONCURRENCY_KEY, t->concurrency_key);
	PUT(TC_RUN_ID, Int64GetDatum(t->run_id), t->run_id == 0);
	PUT(TC_RETRY_OF, Int64GetDatum(t->retry_of), t->retry_of == 0);
	PUT_TEXT(TC_CORRELATION, t->correlation_id);
#undef PUT_TEXT
#undef PUT
}

/*
 * Write n tasks alike but for their payloads (a jsonb[] of n) without SQL,
 * when the table allows it (append.c): row_hook does the row trigger's
 * work on each row before it is written; the caller then does the
 * statement-end trigger's.  Their ids (from orch.events_id_seq, as the
 * INSERT draws them) into ids, in the payloads' order.  False, having
 * written nothing: insert them with orch_tasks_insert.
 */
bool
orch_tasks_write(const OrchTaskRow *t, Datum payloads, int n, int64 *ids, OrchRowHook row_hook)
{
	Datum	   *pv;
	int			np;
	Datum	   *v;
	bool	   *nl;
	bool		ok;

	Assert(t->id == 0);
	deconstruct_array(DatumGetArrayTypeP(payloads), JSONBOID, -1, false, TYPALIGN_INT, &pv, NULL, &np);
	if (np != n)
		elog(ERROR, "orchestrator: %d payloads for a batch of %d tasks", np, n);
	v = palloc(sizeof(Datum) * TC_COUNT * n);
	nl = palloc(sizeof(bool) * TC_COUNT * n);
	append_shared(t, v, nl);
	for (int i = 0; i < n; i++)
	{
		Datum	   *rv = v + (size_t) i * TC_COUNT;
		bool	   *rn = nl + (size_t) i * TC_COUNT;

		if (i > 0)
		{
			memcpy(rv, v, sizeof(Datum) * TC_COUNT);
			memcpy(rn, nl, sizeof(bool) * TC_COUNT);
		}
		rv[TC_ID] = (Datum) 0;	/* drawn by the append */
		rn[TC_ID] = true;
		rv[TC_PAYLOAD] = pv[i];
		rn[TC_PAYLOAD] = false;
	}
	ok = orch_tasks_append(row_hook, TC_COUNT, task_append_cols, task_append_types, n, v, nl, ids);
	pfree(v);
	pfree(nl);
	return ok;
}

/*
 * Insert n tasks alike but for their payloads (a jsonb[] of n) and step
 * keys (a text[] of n, or (Datum) 0: none) with one statement, in the
 * arrays' order; their ids into ids (n of them, in order), unless NULL.
 * t->id must be 0.  The result (the ids, in order) is left in SPI_tuptable.
 */
void
orch_tasks_insert(const OrchTaskRow *t, Datum payloads, Datum step_keys, int n, int64 *ids)
{
	OrchArgs	a = {0};

	Assert(t->id == 0);
	task_args(&a, t);			/* ($1, the id, is NULL and unused) */
	orch_arg(&a, JSONBARRAYOID, payloads, false);
	orch_arg(&a, TEXTARRAYOID, step_keys, step_keys == (Datum) 0);
	if (orch_args_sql(&a, TASK_INSERT_COLUMNS
					  " SELECT nextval('orch.events_id_seq'), " TASK_SHARED_VALUES ", p.payload, p.step_key"
					  " FROM unnest($18, $19) WITH ORDINALITY AS p(payload, step_key, ord)"
					  " ORDER BY p.ord RETURNING id", false, 0, SPI_OK_INSERT_RETURNING) != (uint64) n)
		elog(ERROR, "orchestrator: task batch insert failed");
	for (int i = 0; ids != NULL && i < n; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}
}

/* ----------------------------------------------------------------------
 * Attempt rows
 * ---------------------------------------------------------------------- */

/* the caller's columns, then finished_at (set here) */
#define ATTEMPT_ROW_COLS (ORCH_ATTEMPT_COLS + 1)
static const char *const attempt_cols[ATTEMPT_ROW_COLS] = {"tenant_id", "task_id", "attempt", "worker",
"lease_token", "started_at", "outcome", "error_class", "error", "retry_at", "finished_at"};
static const Oid attempt_types[ATTEMPT_ROW_COLS] = {TEXTOID, INT8OID, INT4OID, TEXTOID, UUIDOID,
TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};

/* One attempt row: the VALUES statement, a kept plan */
static void
attempt_insert_one(const Datum *v, const bool *nulls)
{
	OrchArgs	a = {0};

	for (int c = 0; c < ATTEMPT_ROW_COLS; c++)
		orch_arg(&a, attempt_types[c], v[c], nulls[c]);
	orch_args_sql(&a, "INSERT INTO orch.attempts (tenant_id, task_id, attempt, worker,"
				  " lease_token, started_at, outcome, error_class, error, retry_at, finished_at)"
				  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", false, 0, SPI_OK_INSERT);
}

/* Rows through SQL: one statement over one array per column */
static void
attempts_insert_sql(int n, const Datum *v, const bool *nulls)
{
	OrchArgs	a = {0};

	for (int c = 0; c < ATTEMPT_ROW_COLS; c++)
	{
		Datum	   *cv = palloc(sizeof(Datum) * n);
		bool	   *cn = palloc(sizeof(bool) * n);
		int16		typlen;
		bool		typbyval;
		char		typalign;
		int			dims[1] = {n};
		int			lbs[1] = {1};

		for (int i = 0; i < n; i++)
		{
			cv[i] = v[i * ATTEMPT_ROW_COLS + c];
			cn[i] = nulls[i * ATTEMPT_ROW_COLS + c];
		}
		get_typlenbyvalalign(attempt_types[c], &typlen, &typbyval, &typalign);
		orch_arg(&a, get_array_type(attempt_types[c]),
				 PointerGetDatum(construct_md_array(cv, cn, 1, dims, lbs, attempt_types[c],
													typlen, typbyval, typalign)), false);
	}
	orch_args_sql(&a, "INSERT INTO orch.attempts (tenant_id, task_id, attempt, worker,"
				  "   lease_token, started_at, outcome, error_class, error, retry_at, finished_at)"
				  " SELECT u.t, u.i, u.a, u.w, u.l, u.s, u.oc, u.ec, u.e, u.r, u.f"
				  "   FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
				  "        WITH ORDINALITY AS u(t, i, a, w, l, s, oc, ec, e, r, f, o)"
				  "  ORDER BY u.o", false, 0, SPI_OK_INSERT);
}

/*
 * When an attempt claimed at claimed_at (none: has_claim false) ends now:
 * at the transaction's time (now()), but never before it began, so one
 * claimed after the transaction began (in it, or by another session
 * meanwhile) ends at its claim time, capped by the clock (a claim time
 * past it, written by hand, is not trusted).  Its task, when this ends it,
 * finishes then too (lifecycle.c).
 */
TimestampTz
orch_attempt_end(bool has_claim, TimestampTz claimed_at)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	if (!has_claim || claimed_at <= now)
		return now;
	return Max(now, Min(claimed_at, GetCurrentTimestamp()));
}

/*
 * Insert n attempt rows: values and nulls row after row, ORCH_ATTEMPT_COLS
 * each (tenant_id, task_id, attempt, worker, lease_token, started_at,
 * outcome, error_class, error, retry_at), each ending as orch_attempt_end
 * says.  One row with a kept VALUES statement; more appended directly
 * (append.c: one WAL record per page), or through SQL when orch.attempts
 * needs it.
 */
void
orch_attempts_insert(int n, const Datum *v, const bool *nulls)
{
	Datum	   *w;
	bool	   *wn;

	if (n <= 0)
		return;
	w = palloc(sizeof(Datum) * ATTEMPT_ROW_COLS * n);
	wn = palloc(sizeof(bool) * ATTEMPT_ROW_COLS * n);
	for (int i = 0; i < n; i++)
	{
		const Datum *r = v + (size_t) i * ORCH_ATTEMPT_COLS;
		const bool *rn = nulls + (size_t) i * ORCH_ATTEMPT_COLS;
		Datum	   *to = w + (size_t) i * ATTEMPT_ROW_COLS;
		bool	   *ton = wn + (size_t) i * ATTEMPT_ROW_COLS;

		memcpy(to, r, sizeof(Datum) * ORCH_ATTEMPT_COLS);
		memcpy(ton, rn, sizeof(bool) * ORCH_ATTEMPT_COLS);
		to[ORCH_ATTEMPT_COLS] =
			TimestampTzGetDatum(orch_attempt_end(!rn[5], rn[5] ? 0 : DatumGetTimestampTz(r[5])));
		ton[ORCH_ATTEMPT_COLS] = false;
	}
	if (n == 1)
		attempt_insert_one(w, wn);
	else if (!orch_table_append("attempts", ATTEMPT_ROW_COLS, attempt_cols, n, w, wn))
		attempts_insert_sql(n, w, wn);
	pfree(w);
	pfree(wn);
}

/*
 * The attempts of the tasks a statement just changed (tt, rows of it:
 * tenant_id, task_id, attempt, worker, lease_token, started_at at columns
 * first .. first + 5), ending with outcome and error (NULL: none); only the
 * rows whose column only_col is true, or (only_col < 0) whose column
 * -only_col is NULL; 0: every row.
 */
void
orch_attempts_insert_rows(SPITupleTable *tt, uint64 rows, int first, int only_col,
						  const char *outcome, const char *error)
{
	Datum	   *v = palloc(sizeof(Datum) * ORCH_ATTEMPT_COLS * Max(rows, 1));
	bool	   *nl = palloc(sizeof(bool) * ORCH_ATTEMPT_COLS * Max(rows, 1));
	int			n = 0;

	for (uint64 i = 0; i < rows; i++)
	{
		Datum	   *r = v + n * ORCH_ATTEMPT_COLS;
		bool	   *rn = nl + n * ORCH_ATTEMPT_COLS;
		bool		isnull;

		if (only_col > 0 && !DatumGetBool(SPI_getbinval(tt->vals[i], tt->tupdesc, only_col, &isnull)))
			continue;
		if (only_col < 0 && !heap_attisnull(tt->vals[i], -only_col, tt->tupdesc))
			continue;
		orch_spi_values(tt, i, first, 6, r, rn);
		r[6] = CStringGetTextDatum(outcome);
		rn[6] = false;
		r[7] = (Datum) 0;
		rn[7] = true;
		r[8] = error ? CStringGetTextDatum(error) : (Datum) 0;
		rn[8] = error == NULL;
		r[9] = (Datum) 0;
		rn[9] = true;
		n++;
	}
	orch_attempts_insert(n, v, nl);
	pfree(v);
	pfree(nl);
}
