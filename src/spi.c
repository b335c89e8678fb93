/*
 * spi.c
 *	  The one way the extension runs SQL: a plan cache keyed by the
 *	  statement (as core's ri_triggers.c keys its saved plans) and one
 *	  checked execute that raises with the statement's text.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "executor/spi.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/plancache.h"

#include "orchestrator.h"

/*
 * What identifies a kept plan: the statement's text (by hash; the entry
 * keeps the text and a lookup compares it) and its parameter types.
 */
#define ORCH_PLAN_MAX_ARGS 16

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
	return prepare(sql, nargs, types, CURSOR_OPT_CUSTOM_PLAN);
}

/*
 * The plan of a statement, prepared once per backend and kept.  The plan is
 * generic: the statements on the hot paths are short index lookups whose
 * shape does not depend on the values, and re-planning per call costs more
 * than the statement itself.  Must be called while connected to SPI.
 */
SPIPlanPtr
orch_plan(const char *sql, int nargs, const Oid *types)
{
	OrchPlanKey key;
	OrchPlanEntry *e;
	bool		found;
	SPIPlanPtr	plan;

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
	if (found && e->plan != NULL)
	{
		if (strcmp(e->sql, sql) == 0)
			return e->plan;
		/* another text with the same hash: plan this one every time */
		return prepare(sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);
	}
	if (!found)
	{
		e->sql = NULL;
		e->plan = NULL;
	}
	/* a new entry, or one whose earlier prepare failed */
	plan = prepare(sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);
	if (e->sql == NULL)
		e->sql = MemoryContextStrdup(TopMemoryContext, sql);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "orchestrator: SPI_keepplan failed");
	e->plan = plan;
	return plan;
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

/*
 * Execute a plan and check its result code: expect is the SPI_OK_* code
 * the statement returns (ORCH_SPI_ANY: any success, for utility commands).
 * Returns the number of rows processed.  A statement that fails raises its
 * own error; a different result code cannot happen and raises XX000 naming
 * the statement.
 */
uint64
orch_exec(SPIPlanPtr plan, Datum *values, const char *nulls, bool read_only,
		  long count, int expect)
{
	int			rc = SPI_execute_plan(plan, values, nulls, read_only, count);

	if (expect == ORCH_SPI_ANY ? rc < 0 : rc != expect)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("orchestrator: statement returned %s, expected %s",
						SPI_result_code_string(rc),
						expect == ORCH_SPI_ANY ? "success" : SPI_result_code_string(expect)),
				 errcontext("orchestrator statement: %s", plan_text(plan))));
	return SPI_processed;
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
