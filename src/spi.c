/*
 * spi.c
 *	  The one way the extension runs SQL: a plan cache keyed by the
 *	  statement (as core's ri_triggers.c keys its saved plans) and one
 *	  checked execute that raises with the statement's text.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

/*
 * What identifies a kept plan: the statement's text (by hash; the entry
 * keeps the text and a lookup compares it) and its parameter types.
 */
#define ORCH_PLAN_MAX_ARGS ORCH_MAX_ARGS

typedef struct OrchPlanKey
{
	uint64		sql_hash;
	int			nargs;
	Oid			types[ORCH_PLAN_MAX_ARGS];
} OrchPlanKey;

typedef struct OrchPlanEntry
{
	OrchPlanKey key;			/* hash key: must be first */
	char	   *sql;			/* in TopMemoryContext */
	SPIPlanPtr	plan;			/* kept (SPI_keepplan) */
} OrchPlanEntry;

static HTAB *orch_plans = NULL;

static SPIPlanPtr
prepare(const char *sql, int nargs, const Oid *types, int cursor_options)
{
	SPIPlanPtr	plan = SPI_prepare_cursor(sql, nargs, (Oid *) types, cursor_options);

	if (plan == NULL)
		elog(ERROR, "orchestrator: SPI_prepare failed (%s) for: %s",
			 SPI_result_code_string(SPI_result), sql);
	return plan;
}

/*
 * A statement planned with its values at each execution and not kept: it
 * lives until SPI_finish.  For statements run once (administration,
 * maintenance scans whose best plan depends on the values, text built
 * around identifiers), and for every statement on Citus, which routes a
 * statement to one shard by its tenant value and refuses most generic plans
 * of distributed statements.
 */
SPIPlanPtr
orch_plan_once(const char *sql, int nargs, const Oid *types)
{
	orch_schema_version();
	return prepare(sql, nargs, types, CURSOR_OPT_CUSTOM_PLAN);
}

/*
 * The plan of a statement from the one cache (*kept true), or, on Citus and
 * for a text whose hash another text took, one planned with its values and
 * not kept (*kept false: the caller frees it after its one execution).
 */
static SPIPlanPtr
plan_lookup(const char *sql, int nargs, const Oid *types, bool *kept)
{
	OrchPlanKey key;
	OrchPlanEntry *e;
	bool		found;
	SPIPlanPtr	plan;

	orch_schema_version();	/* every statement runs against a served schema */

	*kept = false;
	if (orch_citus())
		return orch_plan_once(sql, nargs, types);
	if (nargs > ORCH_PLAN_MAX_ARGS)
		elog(ERROR, "orchestrator: statement with %d parameters cannot be cached", nargs);

	if (orch_plans == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(OrchPlanKey);
		ctl.entrysize = sizeof(OrchPlanEntry);
		ctl.hcxt = TopMemoryContext;
		orch_plans = hash_create("orchestrator plans", 256, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}

	memset(&key, 0, sizeof(key));
	key.sql_hash = hash_bytes_extended((const unsigned char *) sql, strlen(sql), 0);
	key.nargs = nargs;
	if (nargs > 0)
		memcpy(key.types, types, nargs * sizeof(Oid));

	e = hash_search(orch_plans, &key, HASH_ENTER, &found);
	if (!found)
	{
		e->sql = NULL;
		e->plan = NULL;
	}
	if (e->plan != NULL)
	{
		if (strcmp(e->sql, sql) == 0)
		{
			*kept = true;
			return e->plan;
		}
		/* another text with the same hash: plan this one every time */
		return orch_plan_once(sql, nargs, types);
	}
	/* a new entry, or one whose earlier prepare failed: text and plan together */
	plan = prepare(sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "orchestrator: SPI_keepplan failed");
	if (e->sql != NULL)
		pfree(e->sql);
	e->sql = MemoryContextStrdup(TopMemoryContext, sql);
	e->plan = plan;
	*kept = true;
	return plan;
}

/*
 * The plan of a statement, prepared once per backend and kept.  The plan is
 * generic: the statements on the hot paths are short index lookups whose
 * shape does not depend on the values, and re-planning per call costs more
 * than the statement itself.  On Citus (see orch_plan_once) the plan is not
 * kept and lives until SPI_finish: a caller that runs a statement once
 * should use orch_sql, which frees it.  Must be called while connected to
 * SPI.
 */
SPIPlanPtr
orch_plan(const char *sql, int nargs, const Oid *types)
{
	bool		kept;

	return plan_lookup(sql, nargs, types, &kept);
}

/* The text of a plan's (first) statement, for error messages. */
static const char *
plan_text(SPIPlanPtr plan)
{
	List	   *sources = SPI_plan_get_plan_sources(plan);

	if (sources == NIL)
		return "?";
	return ((CachedPlanSource *) linitial(sources))->query_string;
}

/* The one check of a result code (see orch_exec). */
static void
check_rc(int rc, int expect, const char *sql)
{
	if (expect == ORCH_SPI_ANY ? rc < 0 : rc != expect)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("orchestrator: statement returned %s, expected %s",
						SPI_result_code_string(rc),
						expect == ORCH_SPI_ANY ? "success" : SPI_result_code_string(expect)),
				 errcontext("orchestrator statement: %s", sql)));
}

/*
 * Execute a plan and check its result code: expect is the SPI_OK_* code
 * the statement returns (ORCH_SPI_ANY: any success, for utility commands).
 * Returns the number of rows processed.  A statement that fails raises its
 * own error; a different result code cannot happen and raises XX000 naming
 * the statement.
 */
/*
 * On Citus, a call made where Citus forbids a distributed query (per row of
 * a query that runs on a shard, e.g. SELECT orch_complete(id, ...) FROM
 * orch.tasks, or in a backend Citus uses for a shard query) fails in Citus
 * with "cannot execute a distributed query from a query on a shard" and
 * SQLSTATE XX000.  Raised again as 0A000 with what to do instead; any other
 * error goes on as it is.  Called in PG_CATCH, in the caller's context.
 */
static void
rethrow_nested_distributed(MemoryContext cxt)
{
	ErrorData  *ed;

	MemoryContextSwitchTo(cxt);
	ed = CopyErrorData();
	if (ed->sqlerrcode == ERRCODE_INTERNAL_ERROR && ed->message != NULL &&
		strstr(ed->message, "distributed query from a query on a shard") != NULL)
	{
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("orchestrator functions cannot run inside a query on a shard"),
				 errdetail("The call was pushed down to a Citus node as part of a query on a distributed table, where Citus allows no further distributed query."),
				 errhint("Call the function as a statement of its own: read the rows first (SELECT id, lease_token FROM ...), then call it once per row, or pass them to a batch function such as orch_complete_batch.")));
	}
	FreeErrorData(ed);
	PG_RE_THROW();
}

/*
 * Is a statement of this library's plan cache running?  Its plans (a
 * generic plan is kept across calls) see the tables of schema orch as never
 * empty (plan_floor.c).  Set around SPI_execute_plan, where a kept
 * statement is planned.
 */
static bool executing_kept = false;

bool
orch_spi_executing_kept(void)
{
	return executing_kept;
}

/* SPI_execute_plan, with Citus's nested-execution error made clear */
static int
execute_plan(SPIPlanPtr plan, Datum *values, const char *nulls, bool read_only, long count)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		outer = executing_kept;
	bool		citus = orch_citus();
	int			rc = 0;

	executing_kept = true;
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, nulls, read_only, count);
	}
	PG_CATCH();
	{
		executing_kept = outer;
		if (citus)
			rethrow_nested_distributed(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	executing_kept = outer;
	return rc;
}

uint64
orch_exec(SPIPlanPtr plan, Datum *values, const char *nulls, bool read_only,
		  long count, int expect)
{
	int			rc = execute_plan(plan, values, nulls, read_only, count);

	if (expect == ORCH_SPI_ANY ? rc < 0 : rc != expect)
		check_rc(rc, expect, plan_text(plan));
	return SPI_processed;
}

/* A statement from the plan cache, executed and checked. */
uint64
orch_sql(const char *sql, int nargs, const Oid *types, Datum *values,
		 const char *nulls, bool read_only, long count, int expect)
{
	bool		kept;
	SPIPlanPtr	plan = plan_lookup(sql, nargs, types, &kept);
	uint64		processed = orch_exec(plan, values, nulls, read_only, count, expect);

	if (!kept)
		SPI_freeplan(plan);		/* SPI_tuptable is not the plan's */
	return processed;
}

/*
 * A statement planned with its values, executed and checked: a one-shot plan
 * (SPI_execute_with_args), so that nothing of it outlives the call, however
 * many a caller runs before SPI_finish.
 */
uint64
orch_sql_once(const char *sql, int nargs, const Oid *types, Datum *values,
			  const char *nulls, bool read_only, long count, int expect)
{
	int			rc;

	orch_schema_version();
	if (!orch_citus())
		rc = SPI_execute_with_args(sql, nargs, (Oid *) types, values, nulls, read_only, count);
	else
	{
		MemoryContext cxt = CurrentMemoryContext;

		PG_TRY();
		{
			rc = SPI_execute_with_args(sql, nargs, (Oid *) types, values, nulls, read_only, count);
		}
		PG_CATCH();
		{
			rethrow_nested_distributed(cxt);
		}
		PG_END_TRY();
	}
	check_rc(rc, expect, sql);
	return SPI_processed;
}

/* A statement without parameters whose result is not read: DDL, a command. */
void
orch_sql_command(const char *sql)
{
	(void) orch_sql_once(sql, 0, NULL, NULL, NULL, false, 0, ORCH_SPI_ANY);
}

/* Set SPI argument i to the text s, or to SQL NULL when s is NULL. */
void
orch_spi_text(Datum *values, char *nulls, int i, const char *s)
{
	values[i] = s ? orch_text_datum(s) : (Datum) 0;
	nulls[i] = s ? ' ' : 'n';
}

/*
 * Pin search_path to the extension's (as SET on a function would) for code
 * that runs SQL in a function that has no SET of its own.  Returns the GUC
 * nesting level to pass to AtEOXact_GUC(true, level); an error unwinds it
 * with the (sub)transaction.
 */
int
orch_pin_search_path(void)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, orch, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	return level;
}

/* One text column of the last SPI result, as a fresh array of SPI_processed values. */
char **
orch_spi_column(int col)
{
	char	  **out = palloc(sizeof(char *) * (SPI_processed + 1));

	for (uint64 i = 0; i < SPI_processed; i++)
		out[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, col);
	return out;
}

/*
 * Columns first .. first + n - 1 of row `row` of an SPI result into
 * values/nulls, varlena values detoasted into the current memory context,
 * so that they may outlive the result (a tuplestore row, a row appended).
 */
void
orch_spi_values(SPITupleTable *tt, uint64 row, int first, int n, Datum *values, bool *nulls)
{
	for (int c = 0; c < n; c++)
	{
		values[c] = SPI_getbinval(tt->vals[row], tt->tupdesc, first + c, &nulls[c]);
		if (!nulls[c] && TupleDescAttr(tt->tupdesc, first + c - 1)->attlen == -1)
			values[c] = PointerGetDatum(PG_DETOAST_DATUM(values[c]));
	}
}

/*
 * Are the orchestrator's tables distributed with Citus (orch.tasks is a
 * Citus table)?  Looked up once, then kept until orch.tasks is invalidated
 * (distributing it or undistributing it does, as does dropping it; see
 * orch_schema_on_reset); orch_distribute forgets the answer at once.  With
 * Citus installed but the tables left local, everything runs as on a
 * single node.
 */
static bool citus_known = false;
static bool citus_distributed = false;
static bool citus_registered = false;

bool
orch_citus(void)
{
	if (!citus_registered)
	{
		orch_schema_on_reset(orch_citus_forget);
		citus_registered = true;
	}
	if (!citus_known)
	{
		Oid			tasks;
		bool		distributed = false;

		tasks = orch_relid("tasks");
		if (OidIsValid(tasks) && OidIsValid(get_extension_oid("citus", true)))
		{
			Oid			types[1] = {OIDOID};
			Datum		v[1];

			v[0] = ObjectIdGetDatum(tasks);
			if (SPI_connect() != SPI_OK_CONNECT)
				elog(ERROR, "orchestrator: SPI_connect failed");
			/* not orch_sql_once: it asks orch_citus() */
			if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1",
									  1, types, v, NULL, true, 1) != SPI_OK_SELECT)
				elog(ERROR, "orchestrator: pg_dist_partition lookup failed");
			distributed = SPI_processed > 0;
			SPI_finish();
		}
		/*
		 * Remembered only once known (an error above caches nothing) and
		 * while orch.tasks exists (its invalidation is what forgets it).
		 */
		citus_distributed = distributed;
		if (OidIsValid(tasks) && !creating_extension)
			citus_known = true;
	}
	return citus_distributed;
}

/* Forget the answer (the tables were just distributed, or invalidated). */
void
orch_citus_forget(void)
{
	citus_known = false;
}

/* ----------------------------------------------------------------------
 * Parameters built in order (OrchArgs)
 * ---------------------------------------------------------------------- */
void
orch_arg(OrchArgs *a, Oid type, Datum value, bool isnull)
{
	if (a->n >= ORCH_MAX_ARGS)
		elog(ERROR, "orchestrator: more than %d statement parameters", ORCH_MAX_ARGS);
	a->types[a->n] = type;
	a->values[a->n] = isnull ? (Datum) 0 : value;
	a->nulls[a->n] = isnull ? 'n' : ' ';
	a->n++;
}

void
orch_arg_text(OrchArgs *a, const char *s)
{
	orch_arg(a, TEXTOID, s ? orch_text_datum(s) : (Datum) 0, s == NULL);
}

void
orch_arg_int8(OrchArgs *a, int64 v)
{
	orch_arg(a, INT8OID, Int64GetDatum(v), false);
}

void
orch_arg_int4(OrchArgs *a, int32 v)
{
	orch_arg(a, INT4OID, Int32GetDatum(v), false);
}

/* A boolean parameter. */
void
orch_arg_bool(OrchArgs *a, bool v)
{
	orch_arg(a, BOOLOID, BoolGetDatum(v), false);
}

/* A jsonb parameter; a NULL pointer is SQL NULL. */
void
orch_arg_jsonb(OrchArgs *a, Jsonb *j)
{
	orch_arg(a, JSONBOID, j ? JsonbPGetDatum(j) : (Datum) 0, j == NULL);
}

/* A timestamptz parameter. */
void
orch_arg_timestamptz(OrchArgs *a, TimestampTz t)
{
	orch_arg(a, TIMESTAMPTZOID, TimestampTzGetDatum(t), false);
}

/* An interval parameter of usecs microseconds. */
void
orch_arg_interval(OrchArgs *a, int64 usecs)
{
	orch_arg(a, INTERVALOID, IntervalPGetDatum(orch_usecs_interval(usecs)), false);
}

/*
 * The clock now, as clock_timestamp() would give it in the statement: a
 * value, because Citus refuses a volatile function in most UPDATEs it
 * routes to a shard (the same text then serves one node and Citus).
 * Returns it, for values computed from it.
 */
TimestampTz
orch_arg_clock(OrchArgs *a)
{
	TimestampTz now = GetCurrentTimestamp();

	orch_arg(a, TIMESTAMPTZOID, TimestampTzGetDatum(now), false);
	return now;
}

uint64
orch_args_sql(OrchArgs *a, const char *sql, bool read_only, long count, int expect)
{
	return orch_sql(sql, a->n, a->types, a->values, a->nulls, read_only, count, expect);
}

uint64
orch_args_sql_once(OrchArgs *a, const char *sql, bool read_only, long count, int expect)
{
	return orch_sql_once(sql, a->n, a->types, a->values, a->nulls, read_only, count, expect);
}

/*
 * Run fn(arg) in an internal subtransaction: NULL when it succeeded (the
 * subtransaction committed), else the error it raised, copied, with the
 * subtransaction rolled back and the error state cleared.  For steps whose
 * failure must not stop the rest of the work (a maintenance pass); a cancel
 * is raised again.  Caller is connected to SPI when fn uses it.
 */
ErrorData *
orch_subxact_try(void (*fn) (void *arg), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *e = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		/*
		 * A cancel (the user's, pg_cancel_backend, statement_timeout) stops
		 * the caller too, as it does through PL/pgSQL's WHEN OTHERS.
		 */
		if (e->sqlerrcode == ERRCODE_QUERY_CANCELED)
			ReThrowError(e);
	}
	PG_END_TRY();
	return e;
}

/* fn with lock_timeout set (and any setting fn changes restored after) */
typedef struct WaitingCall
{
	void		(*fn) (void *arg);
	void	   *arg;
	const char *lock_timeout;
} WaitingCall;

static void
call_waiting(void *arg)
{
	WaitingCall *c = (WaitingCall *) arg;
	int			nest = NewGUCNestLevel();

	(void) set_config_option("lock_timeout", c->lock_timeout,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	c->fn(c->arg);
	/* (on an error the subtransaction's abort unwinds the settings) */
	AtEOXact_GUC(true, nest);
}

/*
 * orch_subxact_try with a short lock_timeout: a lock fn cannot get within
 * it ends fn with ERRCODE_LOCK_NOT_AVAILABLE, for the caller to leave the
 * work for later or do it another way, so that maintenance never queues
 * behind a user's transaction.  Settings fn changes with GUC_ACTION_SAVE
 * are restored when it returns.
 */
ErrorData *
orch_subxact_try_waiting(void (*fn) (void *arg), void *arg, const char *lock_timeout)
{
	WaitingCall c = {fn, arg, lock_timeout};

	return orch_subxact_try(call_waiting, &c);
}
