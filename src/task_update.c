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
 *	  indexes whose predicate it meets, and only those are opened
 *	  (task_cache.c).  The caller then does the statement-end trigger's
 *	  work.
 *
 *	  The row trigger's work is done before the update, which may then wait
 *	  for another transaction that holds the row: the completion's moment is
 *	  taken before that wait, and when the row turns out changed, the ids
 *	  it drew from the sequences are left unused (the UPDATE draws its own)
 *	  and the claims waiting on the queue are woken once more than needed.
 *	  Only tasks whose trigger work does no more than that are written here.
 *
 *	  The UPDATE is used instead whenever it would behave differently: a
 *	  trigger of yours on UPDATE, the table's own two triggers missing,
 *	  disabled or not firing in this session, row security that applies, a
 *	  rule, a CHECK constraint, a stored generated column, a child table, an
 *	  index that is not a btree, one with a deferred unique or exclusion
 *	  constraint, a changed column type or primary key, a read-only
 *	  transaction, an extension that checks privileges (sepgsql, pgaudit),
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

/* ... of these types (another: the UPDATE) */
static const Oid update_types[UC_COUNT] = {
	INT8OID, TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, INT8OID, TEXTOID, JSONBOID, TEXTOID
};

/*
 * The columns a completion reads or sets, of their types (NULL: one is
 * missing or of another type, an older or changed schema), the task found
 * by its id, the primary key's first column.
 */
static const AttrNumber *
find_columns(Relation rel, OrchTaskCache *c)
{
	const AttrNumber *cols = orch_task_cache_columns(c, rel, UC_COUNT, update_cols, update_types);
	AttrNumber	pk_first;

	for (int k = 0; k < UC_COUNT; k++)
		if (cols[k] == InvalidAttrNumber)
			return NULL;
	(void) orch_task_cache_pk(c, &pk_first);
	return pk_first == cols[UC_ID] ? cols : NULL;
}

/*
 * Would an UPDATE of rel behave as this file does: triggers fired by this
 * session (its own two and no other: task_cache.c), no rule, no CHECK
 * constraint or stored generated column, no child table, no row security
 * that applies, the rights to read and update, no hook of an extension
 * that checks them (sepgsql, pgaudit), not read-only, not Citus?
 */
bool
orch_task_update_possible(Relation rel)
{
	TupleConstr *constr = rel->rd_att->constr;
	AclMode		need = ACL_UPDATE | ACL_SELECT;

	if (constr && (constr->num_check > 0 || constr->has_generated_stored))
		return false;
	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		rel->rd_rel->relhasrules || rel->rd_rel->relforcerowsecurity ||
		rel->rd_rel->relhassubclass || rel->rd_rel->relispartition ||
		SessionReplicationRole != SESSION_REPLICATION_ROLE_ORIGIN ||
		XactReadOnly || ExecutorCheckPerms_hook != NULL)
		return false;
	if (check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED ||
		pg_class_aclmask(RelationGetRelid(rel), GetUserId(), need, ACLMASK_ALL) != need)
		return false;
	if (orch_citus())
		return false;
	/* a publication that cannot replicate the update: its error, as the UPDATE raises it */
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);
	return true;
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
completion_matches(const AttrNumber *cols, Datum *v, bool *nl, const OrchCompletion *want, Datum tenants)
{
	char	   *state;

	if (nl[cols[UC_STATE] - 1] || nl[cols[UC_TOKEN] - 1] || nl[cols[UC_EXPIRES] - 1])
		return ORCH_DIRECT_NO_MATCH;
	state = TextDatumGetCString(v[cols[UC_STATE] - 1]);
	if (strcmp(state, "executing") != 0 ||
		memcmp(DatumGetUUIDP(v[cols[UC_TOKEN] - 1])->data, want->token->data, UUID_LEN) != 0 ||
		DatumGetTimestampTz(v[cols[UC_EXPIRES] - 1]) <= GetCurrentStatementStartTimestamp() ||
		!tenant_among(v[cols[UC_TENANT] - 1], tenants))
		return ORCH_DIRECT_NO_MATCH;
	/* their trigger work runs SQL: the UPDATE */
	if (!nl[cols[UC_RUN] - 1] || !nl[cols[UC_KEY] - 1])
		return ORCH_DIRECT_SQL;
	return ORCH_DIRECT_DONE;
}

/* The not-null constraints, as the executor checks them */
void
orch_task_check_not_null(Relation rel, const bool *nl)
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
complete_one(Relation rel, const AttrNumber *cols, OrchTaskEntries *entries, IndexScanDesc scan,
			 TupleTableSlot *found,
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
	r = completion_matches(cols, ov, on, want, tenants);
	if (r != ORCH_DIRECT_DONE)
		return r;

	/* the new row: the old one completed, through the row trigger's work */
	ExecClearTuple(nslot);
	memcpy(nslot->tts_values, ov, sizeof(Datum) * desc->natts);
	memcpy(nslot->tts_isnull, on, sizeof(bool) * desc->natts);
	nslot->tts_values[cols[UC_STATE] - 1] = CStringGetTextDatum("completed");
	nslot->tts_values[cols[UC_REASON] - 1] = CStringGetTextDatum("completed");
	nslot->tts_isnull[cols[UC_REASON] - 1] = false;
	nslot->tts_values[cols[UC_RESULT] - 1] = want->result;
	nslot->tts_isnull[cols[UC_RESULT] - 1] = want->result_null;
	hook(rel, oldtup, nslot->tts_values, nslot->tts_isnull);
	orch_task_check_not_null(rel, nslot->tts_isnull);
	ExecStoreVirtualTuple(nslot);

	if (table_tuple_update(rel, &tid, nslot, GetCurrentCommandId(true), snap, InvalidSnapshot,
						   true, &tmfd, &lockmode, &update_indexes) != TM_Ok)
		return ORCH_DIRECT_SQL; /* changed since the snapshot: the UPDATE reads it again */
	if (update_indexes)
		orch_task_entries_insert(entries, nslot, ov, on);
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
	OrchTaskCache *c;
	const AttrNumber *cols;
	OrchTaskEntries *entries;
	AttrNumber	pk_first;
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
	if (!orch_task_update_possible(rel) || !orch_task_cache_writable((c = orch_task_cache(rel)), true) ||
		!orch_task_cache_entries_ok(c) || (cols = find_columns(rel, c)) == NULL)
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
	pk = index_open(orch_task_cache_pk(c, &pk_first), RowExclusiveLock);
	scan = index_beginscan(rel, pk, snap, 1, 0);
	entries = orch_task_entries_begin(c, rel, estate);
	found = table_slot_create(rel, NULL);
	spare = table_slot_create(rel, NULL);
	nslot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsVirtual);

	for (; done < n; done++)
	{
		MemoryContext row = MemoryContextSwitchTo(GetPerTupleMemoryContext(estate));
		OrchDirect	r = complete_one(rel, cols, entries, scan, found, spare, nslot, estate, snap,
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

	orch_task_entries_end(entries);
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
