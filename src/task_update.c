/*
 * task_update.c
 *	  Completions written without SQL.  orch_complete and orch_complete_batch
 *	  find each task by its id through the primary key, check it as their
 *	  UPDATE's WHERE clause does (executing, under the token given, its lease
 *	  not run out at the statement's start, of a tenant the caller may act
 *	  on), pass the new row through the row trigger's work (a hook, the
 *	  lifecycle trigger's own code) and write it with the table access
 *	  method's update, which locks the row as it writes it: the BEFORE
 *	  trigger's separate row lock (one WAL record per completion) is not
 *	  taken.  The index entries of the new row version are made for the
 *	  indexes whose predicate it meets, and only those are opened; the
 *	  predicates are compiled once per backend (until orch.tasks or one of
 *	  its indexes changes).  The caller then does the statement-end
 *	  trigger's work.
 *
 *	  The UPDATE is used instead whenever it would behave differently: a
 *	  trigger of yours on UPDATE, the table's own two triggers missing,
 *	  disabled or not firing in this session, row security that applies, a
 *	  rule, a CHECK constraint, a stored generated column, an index that is
 *	  not a btree, one with a deferred unique or exclusion constraint,
 *	  Citus; a task of a workflow run or with a concurrency key (their
 *	  trigger work runs SQL); two rows with the id; and a row that another
 *	  transaction changed since the statement's snapshot (the UPDATE reads
 *	  its newest version again, or reports the conflict).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "optimizer/optimizer.h"
#include "storage/bufmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"
#include "utils/acl.h"

#include "orchestrator.h"

/* The columns a completion reads or sets */
enum
{
	UC_ID, UC_TENANT, UC_STATE, UC_TOKEN, UC_EXPIRES, UC_RUN, UC_KEY, UC_RESULT, UC_REASON,
	UC_COUNT
};

static const char *const update_cols[UC_COUNT] = {
	"id", "tenant_id", "state", "lease_token", "lease_expires_at", "run_id",
	"concurrency_key", "result", "reason_code"
};

/*
 * What a completion needs of orch.tasks, kept per backend: its indexes
 * (each one's IndexInfo and compiled predicate) and column numbers.
 * Rebuilt when the table or one of its indexes is invalidated.
 */
typedef struct TaskIndexes
{
	MemoryContext cxt;
	Oid			relid;
	bool		stale;
	bool		usable;			/* its own two triggers and no other on UPDATE; every
								 * index a btree, none deferred or exclusion */
	int			n;
	Oid		   *oids;
	IndexInfo **infos;
	ExprState **preds;			/* NULL: no predicate */
	bool	   *unique;
	int			pk;				/* position of the primary key, -1: none */
	AttrNumber	cols[UC_COUNT];
	ExprContext *econtext;		/* the predicates' evaluation, kept */
} TaskIndexes;

static TaskIndexes *cache = NULL;
static bool callback_registered = false;

static void
cache_invalidate(Datum arg, Oid relid)
{
	if (cache == NULL)
		return;
	if (relid == InvalidOid || relid == cache->relid)
		cache->stale = true;
	for (int i = 0; i < cache->n && !cache->stale; i++)
		if (cache->oids[i] == relid)
			cache->stale = true;
}

/* The index entries a completion may make: each index taken in once */
static void
cache_add_index(TaskIndexes *c, int i, Oid indexoid, Oid pkoid)
{
	Relation	ir = index_open(indexoid, RowExclusiveLock);
	IndexInfo  *ii = BuildIndexInfo(ir);

	c->oids[i] = indexoid;
	c->infos[i] = ii;
	c->unique[i] = ir->rd_index->indisunique;
	if (ir->rd_rel->relam != BTREE_AM_OID || ii->ii_ExclusionOps != NULL ||
		(ir->rd_index->indisunique && !ir->rd_index->indimmediate))
		c->usable = false;
	if (indexoid == pkoid)
		c->pk = i;
	c->preds[i] = NULL;
	if (ii->ii_Predicate != NIL)
		c->preds[i] = ExecInitQual((List *) expression_planner((Expr *) ii->ii_Predicate), NULL);
	index_close(ir, NoLock);
}

static TaskIndexes *
cache_build(Relation rel)
{
	MemoryContext cxt = AllocSetContextCreate(CacheMemoryContext, "orchestrator task indexes",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	TaskIndexes *c = palloc0(sizeof(TaskIndexes));
	List	   *indexes = RelationGetIndexList(rel);
	TupleDesc	desc = RelationGetDescr(rel);
	ListCell   *lc;
	int			i = 0;

	c->cxt = cxt;
	c->relid = RelationGetRelid(rel);
	/* (a trigger created, dropped, enabled or disabled invalidates rel) */
	c->usable = orch_task_triggers_ours(rel, true);
	c->pk = -1;
	c->n = list_length(indexes);
	c->oids = palloc0(sizeof(Oid) * Max(c->n, 1));
	c->infos = palloc0(sizeof(IndexInfo *) * Max(c->n, 1));
	c->preds = palloc0(sizeof(ExprState *) * Max(c->n, 1));
	c->unique = palloc0(sizeof(bool) * Max(c->n, 1));
	foreach(lc, indexes)
		cache_add_index(c, i++, lfirst_oid(lc), rel->rd_pkindex);
	for (int k = 0; k < UC_COUNT; k++)
	{
		c->cols[k] = InvalidAttrNumber;
		for (int a = 0; a < desc->natts; a++)
			if (!TupleDescAttr(desc, a)->attisdropped &&
				strcmp(NameStr(TupleDescAttr(desc, a)->attname), update_cols[k]) == 0)
				c->cols[k] = a + 1;
		if (c->cols[k] == InvalidAttrNumber)
			c->usable = false;	/* an older schema: the UPDATE */
	}
	if (c->pk < 0)
		c->usable = false;
	c->econtext = CreateStandaloneExprContext();
	MemoryContextSwitchTo(old);
	list_free(indexes);
	return c;
}

/* The kept description of rel, built again when it changed */
static TaskIndexes *
task_indexes(Relation rel)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(cache_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (cache != NULL && (cache->stale || cache->relid != RelationGetRelid(rel)))
	{
		MemoryContextDelete(cache->cxt);
		cache = NULL;
	}
	if (cache == NULL)
		cache = cache_build(rel);
	return cache;
}

/*
 * Would an UPDATE of rel behave as this file does: triggers fired by this
 * session (its own two and no other: task_indexes), no rule, no CHECK
 * constraint or stored generated column, no row security that applies,
 * the right to update, not Citus?
 */
static bool
update_possible(Relation rel)
{
	TupleConstr *constr = rel->rd_att->constr;

	if (constr && (constr->num_check > 0 || constr->has_generated_stored))
		return false;
	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->rd_rel->relhasrules || rel->rd_rel->relforcerowsecurity ||
		SessionReplicationRole != SESSION_REPLICATION_ROLE_ORIGIN)
		return false;
	if (check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED ||
		pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_UPDATE | ACL_SELECT) != ACLCHECK_OK)
		return false;
	return !orch_citus();
}

/* Is tenant among tenants (a text[]; (Datum) 0: every tenant)? */
static bool
tenant_among(Datum tenant, Datum tenants)
{
	Datum	   *elems;
	bool	   *enulls;
	int			n;

	if (tenants == (Datum) 0)
		return true;
	deconstruct_array(DatumGetArrayTypeP(tenants), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &enulls, &n);
	for (int i = 0; i < n; i++)
		if (!enulls[i] && DatumGetBool(DirectFunctionCall2Coll(texteq, DEFAULT_COLLATION_OID,
																elems[i], tenant)))
			return true;
	return false;
}

/* The completion's WHERE clause, on the row version found */
static OrchDirect
completion_matches(TaskIndexes *c, Datum *v, bool *nl, const OrchCompletion *want, Datum tenants)
{
	char	   *state;

	if (nl[c->cols[UC_STATE] - 1] || nl[c->cols[UC_TOKEN] - 1] || nl[c->cols[UC_EXPIRES] - 1])
		return ORCH_DIRECT_NO_MATCH;
	state = TextDatumGetCString(v[c->cols[UC_STATE] - 1]);
	if (strcmp(state, "executing") != 0 ||
		memcmp(DatumGetUUIDP(v[c->cols[UC_TOKEN] - 1])->data, want->token->data, UUID_LEN) != 0 ||
		DatumGetTimestampTz(v[c->cols[UC_EXPIRES] - 1]) <= GetCurrentStatementStartTimestamp() ||
		!tenant_among(v[c->cols[UC_TENANT] - 1], tenants))
		return ORCH_DIRECT_NO_MATCH;
	/* their trigger work runs SQL: the UPDATE */
	if (!nl[c->cols[UC_RUN] - 1] || !nl[c->cols[UC_KEY] - 1])
		return ORCH_DIRECT_SQL;
	return ORCH_DIRECT_DONE;
}

/* The not-null constraints, as the executor checks them */
static void
check_not_null(Relation rel, const bool *nl)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int a = 0; a < desc->natts; a++)
		if (TupleDescAttr(desc, a)->attnotnull && nl[a])
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("null value in column \"%s\" of relation \"%s\" violates not-null constraint",
							NameStr(TupleDescAttr(desc, a)->attname), RelationGetRelationName(rel)),
					 errtablecol(rel, a + 1)));
}

/* Is the key of index i the same in both row versions (a hint for btree)? */
static bool
index_key_unchanged(IndexInfo *ii, TupleDesc desc, const Datum *ov, const bool *on,
					const Datum *nv, const bool *nn)
{
	for (int k = 0; k < ii->ii_NumIndexKeyAttrs; k++)
	{
		int			a = ii->ii_IndexAttrNumbers[k] - 1;
		Form_pg_attribute att;

		if (a < 0)
			return false;		/* an expression */
		att = TupleDescAttr(desc, a);
		if (on[a] != nn[a] || (!on[a] && !datum_image_eq(ov[a], nv[a], att->attbyval, att->attlen)))
			return false;
	}
	return true;
}

/*
 * The index entries of the new row version (in slot, its tid set), made as
 * the executor makes them after an update that is not HOT.
 */
static void
insert_entries(Relation rel, TaskIndexes *c, Relation pk, TupleTableSlot *slot, EState *estate,
			   const Datum *ov, const bool *on)
{
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];
	TupleDesc	desc = RelationGetDescr(rel);

	c->econtext->ecxt_scantuple = slot;
	GetPerTupleExprContext(estate)->ecxt_scantuple = slot;
	for (int i = 0; i < c->n; i++)
	{
		IndexInfo  *ii = c->infos[i];
		Relation	ir;
		bool		wanted = true;

		if (!ii->ii_ReadyForInserts)
			continue;
		if (c->preds[i] != NULL)
		{
			wanted = ExecQual(c->preds[i], c->econtext);
			ResetExprContext(c->econtext);
		}
		if (!wanted)
			continue;
		ir = i == c->pk ? pk : index_open(c->oids[i], RowExclusiveLock);
		/* an expression's state belongs to this call's executor state */
		ii->ii_ExpressionsState = NIL;
		FormIndexDatum(ii, slot, estate, values, isnull);
		ii->ii_ExpressionsState = NIL;
		(void) index_insert(ir, values, isnull, &slot->tts_tid, rel,
							c->unique[i] ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
							index_key_unchanged(ii, desc, ov, on, slot->tts_values, slot->tts_isnull),
							ii);
		if (ir != pk)
			index_close(ir, NoLock);
	}
}

/*
 * The versions of the task with that id the snapshot sees: 0, 1 (in slot)
 * or 2 (more than one: two tenants' tasks with one id, which the UPDATE
 * takes on).
 */
static int
find_task(IndexScanDesc scan, int64 id, TupleTableSlot *slot, TupleTableSlot *spare)
{
	ScanKeyData key;
	bool		more;

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(id));
	index_rescan(scan, &key, 1, NULL, 0);
	if (!index_getnext_slot(scan, ForwardScanDirection, slot))
		return 0;
	more = index_getnext_slot(scan, ForwardScanDirection, spare);
	ExecClearTuple(spare);
	return more ? 2 : 1;
}

/*
 * One completion: the row found, checked, passed through hook, updated and
 * its index entries made.  ORCH_DIRECT_SQL, having written nothing, when
 * the UPDATE must do it.
 */
static OrchDirect
complete_one(Relation rel, TaskIndexes *c, Relation pk, IndexScanDesc scan, TupleTableSlot *found,
			 TupleTableSlot *spare, TupleTableSlot *nslot, EState *estate, Snapshot snap,
			 MemoryContext scan_cxt, OrchUpdateHook hook, const OrchCompletion *want, Datum tenants)
{
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	oldtup;
	ItemPointerData tid;
	Datum	   *ov;
	bool	   *on;
	OrchDirect	r;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;

	/* the scan's own memory lives as long as the scan; the row's, one row */
	MemoryContext rowcxt = MemoryContextSwitchTo(scan_cxt);
	int			versions = find_task(scan, want->id, found, spare);

	MemoryContextSwitchTo(rowcxt);
	switch (versions)
	{
		case 0:
			return ORCH_DIRECT_NO_MATCH;
		case 1:
			break;
		default:
			ExecClearTuple(found);
			return ORCH_DIRECT_SQL;
	}
	oldtup = ExecCopySlotHeapTuple(found);
	tid = found->tts_tid;
	ov = palloc(sizeof(Datum) * desc->natts);
	on = palloc(sizeof(bool) * desc->natts);
	heap_deform_tuple(oldtup, desc, ov, on);
	ExecClearTuple(found);
	r = completion_matches(c, ov, on, want, tenants);
	if (r != ORCH_DIRECT_DONE)
		return r;

	/* the new row: the old one completed, through the row trigger's work */
	ExecClearTuple(nslot);
	memcpy(nslot->tts_values, ov, sizeof(Datum) * desc->natts);
	memcpy(nslot->tts_isnull, on, sizeof(bool) * desc->natts);
	nslot->tts_values[c->cols[UC_STATE] - 1] = CStringGetTextDatum("completed");
	nslot->tts_values[c->cols[UC_REASON] - 1] = CStringGetTextDatum("completed");
	nslot->tts_isnull[c->cols[UC_REASON] - 1] = false;
	nslot->tts_values[c->cols[UC_RESULT] - 1] = want->result;
	nslot->tts_isnull[c->cols[UC_RESULT] - 1] = want->result_null;
	hook(rel, oldtup, nslot->tts_values, nslot->tts_isnull);
	check_not_null(rel, nslot->tts_isnull);
	ExecStoreVirtualTuple(nslot);

	if (table_tuple_update(rel, &tid, nslot, GetCurrentCommandId(true), snap, InvalidSnapshot,
						   true, &tmfd, &lockmode, &update_indexes) != TM_Ok)
		return ORCH_DIRECT_SQL; /* changed since the snapshot: the UPDATE reads it again */
	if (update_indexes)
		insert_entries(rel, c, pk, nslot, estate, ov, on);
	return ORCH_DIRECT_DONE;
}

/*
 * Complete tasks without SQL, in the order given (tenants: the caller's,
 * a text[], or (Datum) 0 for every tenant; hook: the row trigger's work
 * on an update).  Returns how many were completed, the first ones of
 * want; *stop says why it stopped before the end: ORCH_DIRECT_NO_MATCH,
 * the next task does not meet the completion's conditions (the caller
 * says why), or ORCH_DIRECT_SQL, the UPDATE must complete the rest.
 * The caller does the statement-end trigger's work when any was.
 */
int
orch_tasks_complete_direct(OrchUpdateHook hook, const OrchCompletion *want, int n, Datum tenants,
						   OrchDirect *stop)
{
	Oid			relid = orch_relid("tasks");
	Relation	rel;
	Relation	pk;
	TaskIndexes *c;
	Snapshot	snap;
	IndexScanDesc scan;
	TupleTableSlot *found,
			   *spare,
			   *nslot;
	EState	   *estate;
	MemoryContext work,
				old;
	int			done = 0;

	*stop = ORCH_DIRECT_SQL;
	if (!OidIsValid(relid) || n <= 0)
		return 0;
	rel = table_open(relid, RowExclusiveLock);
	if (!update_possible(rel) || !(c = task_indexes(rel))->usable)
	{
		table_close(rel, NoLock);
		return 0;
	}
	work = AllocSetContextCreate(CurrentMemoryContext, "orchestrator completion", ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(work);
	/* as the UPDATE would: what this transaction did so far, seen */
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	snap = GetActiveSnapshot();
	estate = CreateExecutorState();
	pk = index_open(c->oids[c->pk], RowExclusiveLock);
	scan = index_beginscan(rel, pk, snap, 1, 0);
	found = table_slot_create(rel, NULL);
	spare = table_slot_create(rel, NULL);
	nslot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsVirtual);

	for (; done < n; done++)
	{
		MemoryContext row = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
		OrchDirect	r = complete_one(rel, c, pk, scan, found, spare, nslot, estate, snap,
									 work, hook, &want[done], tenants);

		MemoryContextSwitchTo(row);
		ExecClearTuple(nslot);
		ResetPerTupleExprContext(estate);
		if (r != ORCH_DIRECT_DONE)
		{
			*stop = r;
			break;
		}
	}
	if (done == n)
		*stop = ORCH_DIRECT_DONE;

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(found);
	ExecDropSingleTupleTableSlot(spare);
	ExecDropSingleTupleTableSlot(nslot);
	index_close(pk, NoLock);
	FreeExecutorState(estate);
	PopActiveSnapshot();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(work);
	table_close(rel, NoLock);
	/* what follows (the statement's end, the caller's next statement) sees it */
	if (done > 0)
		CommandCounterIncrement();
	return done;
}
