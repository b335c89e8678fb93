/*
 * run_subflows.c
 *	  The sub-workflows a run's subflow steps start: a child run of a
 *	  published definition in the run's tenant, found again when it was
 *	  started before (one child per parent run, step and map item), refused
 *	  past orchestrator.max_subflow_depth, started through
 *	  orch.start_subflow (runs.c) in a subtransaction so that a child that
 *	  cannot start fails the step, never the caller's call.  And the open
 *	  children of a run or of one of its steps, for their cancel, pause and
 *	  resume.  Called by step progression with the run's row (and so its
 *	  family's lock, run_state.c) held.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "run_internal.h"

/* Set while a subflow step starts its child: orch.start_subflow is refused otherwise */
static bool starting_child = false;

/* Are sub-workflows available (a 0.8.0 schema, not distributed with Citus)? */
bool
orch_run_subflows_enabled(void)
{
	return orch_schema_subflows() && !orch_citus();
}

/* Is a subflow step starting its child now (orch.start_subflow's guard)? */
bool
orch_run_starting_child(void)
{
	return starting_child;
}

/* The depth of run r below its top run (0: started by orch_start) */
static int
run_depth(RunRow *r)
{
	OrchArgs	a = {0};
	bool		isnull;

	if (r->parent_run_id == 0)
		return 0;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_int4(&a, orch_max_subflow_depth + 1);
	orch_args_sql(&a, "WITH RECURSIVE up (id, parent, depth) AS ("
				  "   SELECT id, parent_run_id, 0 FROM orch.runs WHERE id = $1 AND tenant_id = $2"
				  "   UNION ALL"
				  "   SELECT p.id, p.parent_run_id, up.depth + 1 FROM up JOIN orch.runs p"
				  "     ON p.id = up.parent AND p.tenant_id = $2 WHERE up.depth < $3)"
				  " SELECT max(depth) FROM up", false, 0, SPI_OK_SELECT);
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * The children of a subflow step to start: one (index -1, its input), or
 * items from .. to - 1 of a map (each item its input)
 */
typedef struct ChildStarts
{
	RunRow	   *parent;
	const char *step;
	int			from;
	int			to;
	Jsonb	   *items;			/* a map's items; NULL: one child of input */
	Jsonb	   *input;
	const char *definition;
	int			version;		/* 0: the latest published */
	int			current;		/* the index being started */
} ChildStarts;

/* The child of the step and index, started before: its id, else 0 */
static int64
existing_child(ChildStarts *c, int index)
{
	OrchArgs	a = {0};
	bool		isnull;

	orch_arg_int8(&a, c->parent->id);
	orch_arg_text(&a, c->parent->tenant);
	orch_arg_text(&a, c->step);
	orch_arg_int4(&a, index);
	/* a child's id is above its parent's: the partitions below are not read */
	if (orch_args_sql(&a, index < 0
					  ? "SELECT id FROM orch.runs WHERE parent_run_id = $1 AND tenant_id = $2"
					  " AND parent_step = $3 AND parent_index IS NULL AND id > $1 AND $4 < 0"
					  : "SELECT id FROM orch.runs WHERE parent_run_id = $1 AND tenant_id = $2"
					  " AND parent_step = $3 AND parent_index = $4 AND id > $1",
					  false, 1, SPI_OK_SELECT) == 0)
		return 0;
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Start the children not started yet, each with its memory freed after it */
static void
start_children(void *arg)
{
	ChildStarts *c = (ChildStarts *) arg;
	MemoryContext each = AllocSetContextCreate(CurrentMemoryContext, "orchestrator sub-workflow start",
											   ALLOCSET_DEFAULT_SIZES);
	MemoryContext outer = MemoryContextSwitchTo(each);

	starting_child = true;
	PG_TRY();
	{
		for (c->current = c->from; c->current < c->to; c->current++)
		{
			OrchArgs	a = {0};
			int			i = c->current;

			if (existing_child(c, i) == 0)
			{
				orch_arg_int8(&a, c->parent->id);
				orch_arg_text(&a, c->step);
				orch_arg(&a, INT4OID, Int32GetDatum(i), i < 0);
				orch_arg_text(&a, c->definition);
				orch_arg(&a, INT4OID, Int32GetDatum(c->version), c->version <= 0);
				orch_arg_jsonb(&a, c->items
							   ? JsonbValueToJsonb(getIthJsonbValueFromContainer(&c->items->root, i))
							   : c->input);
				orch_args_sql(&a, "SELECT orch.start_subflow($1, $2, $3, $4, $5, $6)", false, 0, SPI_OK_SELECT);
			}
			MemoryContextReset(each);
		}
	}
	PG_FINALLY();
	{
		starting_child = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(outer);
	MemoryContextDelete(each);
}

/* An error that says nothing of the child: the transaction's or the server's */
static bool
transient(int code)
{
	int			class = ERRCODE_TO_CATEGORY(code);

	return class == ERRCODE_TRANSACTION_ROLLBACK ||			/* 40: deadlock, serialization */
		class == ERRCODE_INSUFFICIENT_RESOURCES ||			/* 53 */
		code == ERRCODE_LOCK_NOT_AVAILABLE ||				/* 55P03 */
		class == ERRCODE_OPERATOR_INTERVENTION ||			/* 57 */
		class == ERRCODE_SYSTEM_ERROR ||					/* 58 */
		class == ERRCODE_INTERNAL_ERROR;					/* XX */
}

/*
 * Start the children of run r's step: one from input (from -1), or items
 * from .. to - 1 of a map's items, from definition (version 0: the latest
 * published).  A child started before is found again, not started twice.
 * All of them start in one subtransaction: when one cannot (no such
 * published version, an input its input_schema refuses, the depth limit),
 * none of them is started, and *error says why, for the step to fail.
 */
bool
orch_run_start_children(RunRow *r, const char *step, int from, int to, Jsonb *items, Jsonb *input,
						const char *definition, int version, char **error)
{
	ChildStarts c = {r, step, from, to, items, input, definition, version, from};
	ErrorData  *e;
	int			depth;
	char	   *which;

	*error = NULL;
	depth = run_depth(r) + 1;
	if (depth > orch_max_subflow_depth)
	{
		*error = psprintf("a sub-workflow of %s would run at depth %d; orchestrator.max_subflow_depth is %d",
						  definition, depth, orch_max_subflow_depth);
		return false;
	}
	e = orch_subxact_try(start_children, &c);
	/*
	 * The parent is the run being acted on again, marked at this level: a
	 * child's start marked itself inside the subtransaction, whose end (an
	 * abort above all) would otherwise leave the parent unmarked.
	 */
	(void) orch_run_busy_begin(r->id);
	if (e == NULL)
		return true;
	/*
	 * Not the child's doing (a deadlock, a serialization failure, a lock or
	 * resource limit, an internal error): the caller's transaction fails,
	 * to be retried, rather than the step for good.
	 */
	if (transient(e->sqlerrcode))
		ReThrowError(e);
	which = c.current >= 0 ? psprintf("%s (item %d)", definition, c.current) : pstrdup(definition);
	*error = e->detail
		? psprintf("sub-workflow %s did not start: %s (%s)", which, e->message, e->detail)
		: psprintf("sub-workflow %s did not start: %s", which, e->message);
	return false;
}

/*
 * The open children of run r (of its step, unless NULL), oldest first: their
 * ids (*n of them).
 */
int64 *
orch_run_open_children(RunRow *r, const char *step, int *n)
{
	OrchArgs	a = {0};
	int64	   *ids;
	bool		isnull;

	*n = 0;
	if (r->root_run_id == 0 || !orch_run_subflows_enabled())
		return NULL;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	*n = (int) orch_args_sql(&a, "SELECT id FROM orch.runs WHERE parent_run_id = $1 AND tenant_id = $2"
							 " AND ($3::text IS NULL OR parent_step = $3) AND id > $1"
							 " AND state IN ('running', 'waiting_approval', 'paused') ORDER BY id",
							 false, 0, SPI_OK_SELECT);
	ids = palloc(sizeof(int64) * (*n + 1));
	for (int i = 0; i < *n; i++)
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	return ids;
}
