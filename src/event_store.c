/*
 * event_store.c
 *	  Appends audit events to orch.events without going through SQL: the rows
 *	  are built here, written with the table access method's multi-insert
 *	  (one WAL record per heap page instead of one per row), and their index
 *	  entries added by the executor's own routine, as COPY FROM does.
 *
 *	  Columns are matched by name, so any schema version works: columns this
 *	  writer does not fill (id, xact, and those added later) take their
 *	  defaults, evaluated as an INSERT would.  When orch.events is not a
 *	  plain heap table that a direct write can serve (a trigger, a rule,
 *	  forced row security, another table access method, Citus loaded), the
 *	  caller falls back to its SQL INSERT.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/uuid.h"

#include "orchestrator.h"

/* rows per multi-insert call; the slots are reused from chunk to chunk */
#define STORE_CHUNK 128

/* the columns this writer fills, by name */
enum
{
	SC_TENANT, SC_TASK, SC_RUN, SC_ENTITY, SC_FROM, SC_TO, SC_REASON, SC_ACTOR,
	SC_ATTEMPT, SC_TOKEN, SC_NOTE, SC_AT, SC_LABEL, SC_WAITED, SC_COUNT
};

static const char *const store_columns[SC_COUNT] = {
	"tenant_id", "task_id", "run_id", "entity", "from_state", "to_state",
	"reason_code", "actor", "attempt", "lease_token", "note", "at", "label",
	"waited"
};

/* Can a direct write serve this relation exactly as an INSERT would? */
static bool
direct_write_possible(Relation rel)
{
	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->trigdesc != NULL ||
		rel->rd_rel->relhasrules ||
		rel->rd_rel->relforcerowsecurity ||
		rel->rd_rel->relispartition)
		return false;
	/* a distributed table is a shell on the coordinator: leave it to SQL */
	if (OidIsValid(get_extension_oid("citus", true)))
		return false;
	return true;
}

static Oid
events_relid(void)
{
	Oid			nsp = get_namespace_oid("orch", true);

	return OidIsValid(nsp) ? get_relname_relid("events", nsp) : InvalidOid;
}

/*
 * Write n events.  Returns false, having written nothing, when the relation
 * needs the SQL path.  The events appear in the order given (ids from the
 * column's sequence, in that order).
 */
bool
orch_events_store(OrchEvent *const *events, int n)
{
	Oid			relid;
	Relation	rel;
	TupleDesc	desc;
	AttrNumber	attno[SC_COUNT];
	EState	   *estate;
	ResultRelInfo *rri;
	ExprState **defaults;
	TupleTableSlot **slots;
	CommandId	cid;
	MemoryContext work,
				old;

	if (n <= 0)
		return true;
	relid = events_relid();
	if (!OidIsValid(relid))
		return false;
	rel = table_open(relid, RowExclusiveLock);
	if (!direct_write_possible(rel))
	{
		table_close(rel, RowExclusiveLock);
		return false;
	}
	desc = RelationGetDescr(rel);
	for (int c = 0; c < SC_COUNT; c++)
	{
		attno[c] = InvalidAttrNumber;
		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			if (!att->attisdropped && strcmp(NameStr(att->attname), store_columns[c]) == 0)
			{
				attno[c] = att->attnum;
				break;
			}
		}
	}

	work = AllocSetContextCreate(CurrentMemoryContext, "orchestrator event store",
								 ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(work);

	estate = CreateExecutorState();
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);

	/* the defaults of the columns not filled here (id, xact, ...) */
	defaults = palloc0(sizeof(ExprState *) * desc->natts);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		bool		filled = false;
		Node	   *def;

		if (att->attisdropped)
			continue;
		for (int c = 0; c < SC_COUNT && !filled; c++)
			filled = attno[c] == att->attnum;
		if (filled)
			continue;
		def = build_column_default(rel, att->attnum);
		if (def)
			defaults[a] = ExecPrepareExpr((Expr *) def, estate);
	}

	cid = GetCurrentCommandId(true);
	slots = palloc(sizeof(TupleTableSlot *) * Min(n, STORE_CHUNK));
	for (int i = 0; i < Min(n, STORE_CHUNK); i++)
		slots[i] = table_slot_create(rel, NULL);

	for (int done = 0; done < n;)
	{
		int			m = Min(n - done, STORE_CHUNK);
		ExprContext *econtext = GetPerTupleExprContext(estate);

		for (int i = 0; i < m; i++)
		{
			const OrchEvent *e = events[done + i];
			TupleTableSlot *slot = slots[i];
			Datum	   *v = slot->tts_values;
			bool	   *nl = slot->tts_isnull;
			const char *actor = e->actor;

			ExecClearTuple(slot);
			for (int a = 0; a < desc->natts; a++)
			{
				nl[a] = true;
				v[a] = (Datum) 0;
				if (defaults[a])
					v[a] = ExecEvalExpr(defaults[a], econtext, &nl[a]);
			}
			/* before the label column (0.4.0) the label went in place of the actor */
			if (attno[SC_LABEL] == InvalidAttrNumber && e->label)
				actor = e->label;
#define PUT(c, d) do { if (attno[c] != InvalidAttrNumber) { v[attno[c] - 1] = (d); nl[attno[c] - 1] = false; } } while (0)
#define PUT_TEXT(c, s) do { if (s) PUT(c, CStringGetTextDatum(s)); } while (0)
			PUT_TEXT(SC_TENANT, e->tenant ? e->tenant : ORCH_DEFAULT_TENANT);
			if (e->has_task)
				PUT(SC_TASK, Int64GetDatum(e->task_id));
			if (e->has_run)
				PUT(SC_RUN, Int64GetDatum(e->run_id));
			PUT_TEXT(SC_ENTITY, e->entity ? e->entity : "task");
			PUT_TEXT(SC_FROM, e->from_state);
			PUT_TEXT(SC_TO, e->to_state);
			PUT_TEXT(SC_REASON, e->reason_code);
			PUT_TEXT(SC_ACTOR, actor);
			if (e->attempt > 0)
				PUT(SC_ATTEMPT, Int32GetDatum(e->attempt));
			if (e->has_token)
				PUT(SC_TOKEN, UUIDPGetDatum(&e->token));
			PUT_TEXT(SC_NOTE, e->note);
			PUT(SC_AT, TimestampTzGetDatum(e->at));
			PUT_TEXT(SC_LABEL, e->label);
			if (e->waited_us >= 0)
				PUT(SC_WAITED, IntervalPGetDatum(orch_usecs_interval(e->waited_us)));
#undef PUT_TEXT
#undef PUT
			ExecStoreVirtualTuple(slot);
			if (rel->rd_att->constr)
				ExecConstraints(rri, slot, estate);
		}
		table_multi_insert(rel, slots, m, cid, 0, NULL);
		for (int i = 0; i < m; i++)
		{
			List	   *recheck;

			econtext->ecxt_scantuple = slots[i];
			recheck = ExecInsertIndexTuples(rri, slots[i], estate, false, false, NULL, NIL);
			list_free(recheck);
		}
		ResetPerTupleExprContext(estate);
		done += m;
	}

	for (int i = 0; i < Min(n, STORE_CHUNK); i++)
		ExecDropSingleTupleTableSlot(slots[i]);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(work);
	table_close(rel, NoLock);
	return true;
}
