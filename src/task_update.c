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
 *	  A task whose trigger work does more (a workflow step's notes its run,
 *	  a keyed task's frees its key's slot) is first locked, waiting as the
 *	  UPDATE waits, as the UPDATE's trigger locks it (a lock record), and
 *	  only then passed through that work.
 *
 *	  The UPDATE is used instead whenever it would behave differently: a
 *	  trigger of yours on UPDATE, the table's own two triggers missing,
 *	  disabled or not firing in this session, row security that applies, a
 *	  rule, a CHECK constraint, a stored generated column, a child table, an
 *	  index that is not a btree, one with a deferred unique or exclusion
 *	  constraint, a changed column type or primary key, a read-only
 *	  transaction, an extension that checks privileges (sepgsql, pgaudit),
 *	  Citus; two rows with the id; and a row that another
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

/* The task is found by its id, the primary key's first column */
static bool
found_by_id(OrchTaskWrites *w)
{
	AttrNumber	pk_first;

	(void) orch_task_cache_pk(w->cache, &pk_first);
	return pk_first == w->cols[UC_ID];
}

/*
 * Would an UPDATE of rel behave as this file does: triggers fired by this
 * session (its own two and no other: task_cache.c), no rule, no CHECK
 * constraint or stored generated column, no child table, no row security
 * that applies, the rights to read and update, no hook of an extension
 * that checks them (sepgsql, pgaudit), not read-only, not Citus?
 */
static bool
update_possible(Relation rel)
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
complete_one(OrchTaskWrites *w, IndexScanDesc scan, TupleTableSlot *spare, OrchUpdateHook hook,
			 const OrchCompletion *want, Datum tenants)
{
	const AttrNumber *cols = w->cols;
	Datum	   *v = w->nslot->tts_values;
	bool	   *n = w->nslot->tts_isnull;
	OrchDirect	r;

	/* the scan's own memory lives as long as the scan; the row's, one row */
	MemoryContext rowcxt = MemoryContextSwitchTo(w->work);
	int			versions = find_task(scan, want->id, w->found, spare);

	MemoryContextSwitchTo(rowcxt);
	switch (versions)
	{
		case 0:
			return ORCH_DIRECT_NO_MATCH;
		case 1:
			break;
		default:
			ExecClearTuple(w->found);
			return ORCH_DIRECT_SQL;
	}
	orch_task_writes_take(w);
	r = completion_matches(cols, w->ov, w->on, want, tenants);
	if (r != ORCH_DIRECT_DONE)
		return r;

	/*
	 * A workflow step's or a keyed task's trigger work notes its run or
	 * frees its key's slot: the row is locked first, waiting as the UPDATE
	 * waits (the lock record its trigger's row lock writes), so that the
	 * update after that work cannot fail.
	 */
	if ((!w->on[cols[UC_RUN] - 1] || !w->on[cols[UC_KEY] - 1]) &&
		orch_task_writes_lock(w, LockTupleNoKeyExclusive, LockWaitBlock) != TM_Ok)
		return ORCH_DIRECT_SQL; /* changed since the snapshot: the UPDATE reads it again */

	/* the new row: the old one completed, through the row trigger's work */
	v[cols[UC_STATE] - 1] = CStringGetTextDatum("completed");
	v[cols[UC_REASON] - 1] = CStringGetTextDatum("completed");
	n[cols[UC_REASON] - 1] = false;
	v[cols[UC_RESULT] - 1] = want->result;
	n[cols[UC_RESULT] - 1] = want->result_null;
	orch_task_writes_derive(w, hook);
	if (orch_task_writes_update(w, true) != TM_Ok)
		return ORCH_DIRECT_SQL; /* changed since the snapshot: the UPDATE reads it again */
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
	OrchTaskWrites w;
	Relation	pk;
	AttrNumber	pk_first;
	IndexScanDesc scan;
	TupleTableSlot *spare;
	int			done = 0;

	*stop = ORCH_DIRECT_SQL;
	if (n <= 0 || !orch_task_writes_begin(&w, UC_COUNT, update_cols, update_types))
		return 0;
	if (!found_by_id(&w))
	{
		orch_task_writes_end(&w, false);
		return 0;
	}
	pk = index_open(orch_task_cache_pk(w.cache, &pk_first), RowExclusiveLock);
	scan = index_beginscan(w.rel, pk, w.snap, 1, 0);
	spare = table_slot_create(w.rel, NULL);

	for (; done < n; done++)
	{
		MemoryContext row = MemoryContextSwitchTo(GetPerTupleMemoryContext(w.estate));
		OrchDirect	r = complete_one(&w, scan, spare, hook, &want[done], tenants);

		MemoryContextSwitchTo(row);
		orch_task_writes_next(&w);
		if (r != ORCH_DIRECT_DONE)
		{
			*stop = r;
			break;
		}
	}
	if (done == n)
		*stop = ORCH_DIRECT_DONE;

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(spare);
	index_close(pk, NoLock);
	orch_task_writes_end(&w, done > 0);
	return done;
}

/* ----------------------------------------------------------------------
 * A run of task-row updates without SQL, shared by the completions here
 * and the claims (task_claim.c): the table opened when an UPDATE would
 * behave as these writes do (and the caller's columns are there, of their
 * types), a new snapshot as the statement would take, the row versions
 * read and written, their index entries.
 * ---------------------------------------------------------------------- */

/*
 * Begin: false, with nothing open, when the UPDATE must write.  The ncols
 * columns named, of the types given, are in w->cols.
 */
bool
orch_task_writes_begin(OrchTaskWrites *w, int ncols, const char *const *names,
					   const Oid *types)
{
	Oid			relid = orch_relid("tasks");
	TupleDesc	desc;

	memset(w, 0, sizeof(*w));
	if (!OidIsValid(relid))
		return false;
	w->rel = table_open(relid, RowExclusiveLock);
	if (!update_possible(w->rel) || !orch_task_cache_writable((w->cache = orch_task_cache(w->rel)), true) ||
		!orch_task_cache_entries_ok(w->cache))
	{
		table_close(w->rel, NoLock);
		return false;
	}
	w->cols = orch_task_cache_columns(w->cache, w->rel, ncols, names, types);
	for (int k = 0; k < ncols; k++)
		if (w->cols[k] == InvalidAttrNumber)
		{
			table_close(w->rel, NoLock);
			return false;		/* an older or changed schema */
		}
	desc = RelationGetDescr(w->rel);
	w->caller = CurrentMemoryContext;
	w->work = AllocSetContextCreate(w->caller, "orchestrator task writes", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(w->work);
	/* as the UPDATE would: what this transaction did so far, seen */
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	w->snap = GetActiveSnapshot();
	/*
	 * One command for every write, as an UPDATE's output: a later row that
	 * a hook's SQL changed meanwhile is then "self-modified", not invisible
	 */
	w->cid = GetCurrentCommandId(true);
	w->estate = CreateExecutorState();
	w->entries = orch_task_entries_begin(w->cache, w->rel, w->estate);
	w->found = table_slot_create(w->rel, NULL);
	w->nslot = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);
	w->ov = palloc(sizeof(Datum) * desc->natts);
	w->on = palloc(sizeof(bool) * desc->natts);
	return true;
}

/*
 * The version in w->found taken (copied to w->oldtup, its place in
 * w->tid, its values in w->ov / w->on, in the row's memory) and the new
 * version begun as a copy of it in w->nslot, for the caller to change.
 */
void
orch_task_writes_take(OrchTaskWrites *w)
{
	int			natts = RelationGetDescr(w->rel)->natts;

	w->oldtup = ExecCopySlotHeapTuple(w->found);
	w->tid = w->found->tts_tid;
	w->locked = false;
	heap_deform_tuple(w->oldtup, RelationGetDescr(w->rel), w->ov, w->on);
	ExecClearTuple(w->found);
	ExecClearTuple(w->nslot);
	memcpy(w->nslot->tts_values, w->ov, sizeof(Datum) * natts);
	memcpy(w->nslot->tts_isnull, w->on, sizeof(bool) * natts);
}

/* The new version through the row trigger's work (hook) and NOT NULL */
void
orch_task_writes_derive(OrchTaskWrites *w, OrchUpdateHook hook)
{
	hook(w->rel, w->oldtup, w->ov, w->on, w->nslot->tts_values, w->nslot->tts_isnull);
	check_not_null(w->rel, w->nslot->tts_isnull);
	ExecStoreVirtualTuple(w->nslot);
}

/*
 * The new version written over the one taken (wait: for a transaction
 * that holds the row, as an UPDATE waits; else TM_BeingModified), its
 * index entries made when it was.  A row taken and then locked here
 * (orch_task_writes_lock) is written whatever wait says, or it is an
 * error: the trigger's work on it is done.
 */
TM_Result
orch_task_writes_update(OrchTaskWrites *w, bool wait)
{
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	TM_Result	r;

	r = table_tuple_update(w->rel, &w->tid, w->nslot, w->cid, w->snap, InvalidSnapshot,
						   wait || w->locked, &tmfd, &lockmode, &update_indexes);
	/* a row this transaction locked is updated (the trigger's work is done) */
	if (r == TM_SelfModified && w->locked)
		ereport(ERROR,
				(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
				 errmsg("task was already changed by an operation its own change triggered"),
				 errhint("A trigger on the orchestrator's tables must not change the task whose change fired it.")));
	if (r != TM_Ok && w->locked)
		elog(ERROR, "orchestrator: a task locked for its update could not be updated (%d)", (int) r);
	if (r == TM_Ok && update_indexes)
		orch_task_entries_insert(w->entries, w->nslot, w->ov, w->on);
	return r;
}

/*
 * The row taken (w->tid) locked in mode, waiting for another transaction
 * that holds it or not (wait), as the statement would lock it before its
 * trigger's work: TM_Ok when this transaction holds it now (it held it
 * already, or nobody did), else it is held elsewhere (not waiting) or
 * changed since the snapshot.  The update that follows then writes it.
 */
TM_Result
orch_task_writes_lock(OrchTaskWrites *w, LockTupleMode mode, LockWaitPolicy wait)
{
	TM_FailureData tmfd;
	TM_Result	r;

	/* (the version locked lands in w->found, free since the take) */
	r = table_tuple_lock(w->rel, &w->tid, w->snap, w->found, w->cid,
						 mode, wait, 0, &tmfd);
	ExecClearTuple(w->found);
	w->locked = r == TM_Ok;
	return r;
}

/* After one row: its memory freed */
void
orch_task_writes_next(OrchTaskWrites *w)
{
	ExecClearTuple(w->nslot);
	ResetPerTupleExprContext(w->estate);
}

/* The end (wrote: any row written, which what follows then sees) */
void
orch_task_writes_end(OrchTaskWrites *w, bool wrote)
{
	orch_task_entries_end(w->entries);
	ExecDropSingleTupleTableSlot(w->found);
	ExecDropSingleTupleTableSlot(w->nslot);
	FreeExecutorState(w->estate);
	PopActiveSnapshot();
	MemoryContextSwitchTo(w->caller);
	MemoryContextDelete(w->work);
	table_close(w->rel, NoLock);
	if (wrote)
		CommandCounterIncrement();
}
