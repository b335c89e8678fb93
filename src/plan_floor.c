/*
 * plan_floor.c
 *	  Plans of the extension's tables that hold whatever size they are
 *	  planned at: the planner sees a table of schema orch as at least
 *	  ORCH_PLAN_MIN_PAGES pages and ORCH_PLAN_MIN_TUPLES rows.
 *
 *	  The extension's statements are prepared once per backend and run as
 *	  cached generic plans.  A queue table is often empty when they are
 *	  first planned (a new installation, a truncated or drained queue; a
 *	  VACUUM ANALYZE of the empty table records 0 pages and 0 rows, which
 *	  switches off PostgreSQL's own 10-page guess for never-vacuumed tables).
 *	  The cheapest plan of an empty table is a sequential scan, and a
 *	  generic plan is only replanned when the table's statistics change: a
 *	  claim, a completion or a look for expired leases then read the whole
 *	  table at every call, longer as work comes in, until autovacuum or
 *	  ANALYZE happens to send an invalidation.  Behind a steady load that
 *	  never came (autovacuum off, or its thresholds not reached) workers fell
 *	  seconds behind.  Seen as a table of this size the planner picks the
 *	  indexes these statements were written for, and for a table that really
 *	  is small an index plan costs next to nothing more.  Larger tables are
 *	  planned from their own statistics, untouched.  docs/semantics.md,
 *	  *Plans and statistics*.
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "optimizer/plancat.h"
#include "parser/parsetree.h"
#include "utils/lsyscache.h"

#include "orchestrator.h"

#define ORCH_PLAN_MIN_PAGES		10000
#define ORCH_PLAN_MIN_TUPLES	100000.0

static get_relation_info_hook_type prev_get_relation_info = NULL;

/*
 * get_relation_info_hook: raise the size of a small relation of schema orch
 * to the floor.  Only a relation under the floor pays the catalog look-up
 * of its schema (cached by the syscache).
 */
static void
plan_floor_relation_info(PlannerInfo *root, Oid relid, bool inhparent, RelOptInfo *rel)
{
	if (prev_get_relation_info)
		prev_get_relation_info(root, relid, inhparent, rel);

	if (inhparent || rel->pages >= ORCH_PLAN_MIN_PAGES || !orch_spi_executing_kept())
		return;
	if (planner_rt_fetch(rel->relid, root)->relkind != RELKIND_RELATION)
		return;
	if (get_rel_namespace(relid) != orch_namespace_oid())
		return;

	rel->pages = ORCH_PLAN_MIN_PAGES;
	if (rel->tuples < ORCH_PLAN_MIN_TUPLES)
		rel->tuples = ORCH_PLAN_MIN_TUPLES;
}

void
orch_plan_floor_init(void)
{
	prev_get_relation_info = get_relation_info_hook;
	get_relation_info_hook = plan_floor_relation_info;
}
