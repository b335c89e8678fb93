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

/* A child to start, and what came of it */
typedef struct ChildStart
{
	RunRow	   *parent;
	const char *step;
	int			index;			/* the map item; -1 for a single subflow */
	const char *definition;
	int			version;		/* 0: the latest published */
	Jsonb	   *input;
	int64		child;
} ChildStart;

static void
start_child(void *arg)
{
	ChildStart *c = (ChildStart *) arg;
	OrchArgs	a = {0};
	bool		isnull;

	orch_arg_int8(&a, c->parent->id);
	orch_arg_text(&a, c->step);
	orch_arg(&a, INT4OID, Int32GetDatum(c->index), c->index < 0);
	orch_arg_text(&a, c->definition);
	orch_arg(&a, INT4OID, Int32GetDatum(c->version), c->version <= 0);
	orch_arg_jsonb(&a, c->input);
	starting_child = true;
	PG_TRY();
	{
		orch_args_sql(&a, "SELECT orch.start_subflow($1, $2, $3, $4, $5, $6)", false, 0, SPI_OK_SELECT);
		c->child = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	PG_FINALLY();
	{
		starting_child = false;
	}
	PG_END_TRY();
}

/*
 * The child of run r's step (and map item index, -1 for none): the one
 * started before, else started now from definition (version 0: the latest
 * published) with input.  0 when it cannot start: *error says why (no such
 * published version, an input its input_schema refuses, the depth limit).
 */
int64
orch_run_start_child(RunRow *r, const char *step, int index, const char *definition, int version,
					 Jsonb *input, char **error)
{
	OrchArgs	a = {0};
	ChildStart	c = {r, step, index, definition, version, input, 0};
	ErrorData  *e;
	int			depth;

	*error = NULL;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg(&a, INT4OID, Int32GetDatum(index), index < 0);
	/* a child's id is above its parent's: the partitions below are not read */
	if (orch_args_sql(&a, "SELECT id FROM orch.runs WHERE parent_run_id = $1 AND tenant_id = $2"
					  " AND parent_step = $3 AND parent_index IS NOT DISTINCT FROM $4 AND id > $1",
					  false, 1, SPI_OK_SELECT) == 1)
	{
		bool		isnull;

		return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	depth = run_depth(r) + 1;
	if (depth > orch_max_subflow_depth)
	{
		*error = psprintf("a sub-workflow of %s would run at depth %d; orchestrator.max_subflow_depth is %d",
						  definition, depth, orch_max_subflow_depth);
		return 0;
	}
	e = orch_subxact_try(start_child, &c);
	/*
	 * The parent is the run being acted on again, marked at this level: the
	 * child's start marked itself inside the subtransaction, whose end (an
	 * abort above all) would otherwise leave the parent unmarked.
	 */
	(void) orch_run_busy_begin(r->id);
	if (e != NULL)
	{
		*error = e->detail
			? psprintf("sub-workflow %s did not start: %s (%s)", definition, e->message, e->detail)
			: psprintf("sub-workflow %s did not start: %s", definition, e->message);
		return 0;
	}
	return c.child;
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
