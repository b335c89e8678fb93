/*
 * append.c
 *	  Appends rows to the extension's insert-only tables (orch.events,
 *	  orch.attempts) without going through SQL: the rows are built here,
 *	  written with the table access method's multi-insert (one WAL record per
 *	  heap page instead of one per row), and their index entries added by the
 *	  executor's own routine, as COPY FROM does.
 *
 *	  Columns are matched by name, so any schema version works: columns the
 *	  caller does not fill (id, xact, and those added later) take
 *	  their defaults, evaluated as an INSERT would; columns the caller names
 *	  that the table lacks (an older schema) are left out.  When the table is
 *	  not a plain heap table that a direct write can serve (a trigger, a rule,
 *	  forced row security, a stored generated column, another table access
 *	  method, Citus installed), the caller falls back to its SQL INSERT.  A
 *	  partitioned table (the history, by time) is written directly when all
 *	  the rows go to one range partition of its own row layout, found as
 *	  tuple routing finds it; otherwise (the DEFAULT partition included)
 *	  through SQL too.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_proc.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "access/attmap.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "utils/partcache.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/uuid.h"

#include "orchestrator.h"

/* rows per multi-insert call; the slots are reused from chunk to chunk */
#define STORE_CHUNK 128

/*
 * The partition of the partitioned table root that takes every one of the
 * rows, by the value each gives its partition key (a single range key,
 * which the caller must fill: orch.events.at, orch.attempts.finished_at),
 * found as PostgreSQL's tuple routing finds it.  InvalidOid when the rows
 * need more than one partition, the DEFAULT one, or the key is not given:
 * the SQL INSERT routes those.
 */
static Oid
single_partition(Relation root, int ncols, const char *const *cols,
				 int nrows, const Datum *values, const bool *nulls)
{
	PartitionKey key = RelationGetPartitionKey(root);
	PartitionDesc pd = RelationGetPartitionDesc(root, true);
	PartitionBoundInfo bounds = pd->boundinfo;
	const char *keyname;
	int			keycol = -1;
	int			part = -2;

	if (key->strategy != PARTITION_STRATEGY_RANGE || key->partnatts != 1 ||
		key->partattrs[0] == 0 || bounds == NULL)
		return InvalidOid;
	keyname = NameStr(TupleDescAttr(RelationGetDescr(root), key->partattrs[0] - 1)->attname);
	for (int c = 0; c < ncols; c++)
		if (strcmp(cols[c], keyname) == 0)
			keycol = c;
	if (keycol < 0)
		return InvalidOid;
	for (int i = 0; i < nrows; i++)
	{
		Datum		v = values[(size_t) i * ncols + keycol];
		bool		equal;
		int			offset,
					p;

		if (nulls[(size_t) i * ncols + keycol])
			return InvalidOid;
		offset = partition_range_datum_bsearch(key->partsupfunc, key->partcollation,
											   bounds, 1, &v, &equal);
		p = bounds->indexes[offset + 1];
		/*
		 * No range takes the row: the DEFAULT partition, whose bound a
		 * concurrent ATTACH can narrow under us (tuple routing checks the
		 * row against it again, the SQL INSERT does it).
		 */
		if (p < 0 || (part != -2 && p != part))
			return InvalidOid;
		part = p;
	}
	return pd->oids[part];
}

/*
 * Can the direct write of a partition serve an INSERT into its parent?
 * What the parent adds to the partition's own rules: its triggers (cloned
 * to the partitions, but a statement trigger stays on the parent), rules,
 * forced row security.
 */
static bool
direct_parent_possible(Relation parent)
{
	return parent->trigdesc == NULL && !parent->rd_rel->relhasrules &&
		!parent->rd_rel->relforcerowsecurity && !orch_citus();
}

/*
 * Can a direct write serve this relation exactly as an INSERT would?
 * tasks: the rows are task rows, whose two triggers the caller runs (and
 * which must be there).
 */
static bool
direct_write_possible(Relation rel, bool tasks)
{
	/* a distributed table is a shell on the coordinator: leave it to SQL */
	if (orch_citus())
		return false;
	if (rel->rd_att->constr && rel->rd_att->constr->has_generated_stored)
		return false;			/* stored generated columns: the SQL INSERT computes them */
	/* an extension that checks privileges (sepgsql, pgaudit); read-only: as SQL says */
	if (tasks && (ExecutorCheckPerms_hook != NULL || XactReadOnly))
		return false;
	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relam != HEAP_TABLE_AM_OID ||
		(tasks ? (SessionReplicationRole != SESSION_REPLICATION_ROLE_ORIGIN ||
				  !orch_task_cache_writable(orch_task_cache(rel), false)) : rel->trigdesc != NULL) ||
		rel->rd_rel->relhasrules ||
		rel->rd_rel->relforcerowsecurity)
		return false;
	/* row security that applies to this role, or no right to insert: as SQL says */
	if (tasks && (check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED ||
				  pg_class_aclcheck(RelationGetRelid(rel), GetUserId(), ACL_INSERT) != ACLCHECK_OK))
		return false;
	return true;
}

/*
 * The relation append_rows writes: the table, or for a partitioned one the
 * rows' one partition (of the parent's own row layout), opened; NULL
 * (nothing left open) when the rows cannot be appended without SQL.
 */
static Relation
open_append_target(Oid relid, Relation *root_out, bool tasks, int ncols, const char *const *cols,
				   int nrows, const Datum *values, const bool *nulls)
{
	Relation	root = table_open(relid, RowExclusiveLock);
	Relation	rel = root;

	*root_out = root;
	if (root->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
	{
		Oid			leaf = single_partition(root, ncols, cols, nrows, values, nulls);

		if (!OidIsValid(leaf))
		{
			table_close(root, NoLock);
			return NULL;
		}
		rel = table_open(leaf, RowExclusiveLock);
		if (build_attrmap_by_name_if_req(RelationGetDescr(root), RelationGetDescr(rel)) != NULL)
		{
			table_close(rel, NoLock);
			table_close(root, NoLock);
			return NULL;
		}
	}
	else if (root->rd_rel->relispartition)
	{
		table_close(root, NoLock);
		return NULL;			/* a partition is written through its parent */
	}
	if (!direct_write_possible(rel, tasks) || (rel != root && !direct_parent_possible(root)))
	{
		if (rel != root)
			table_close(rel, NoLock);
		table_close(root, NoLock);
		return NULL;
	}
	return rel;
}

/* The attribute number of each column named (InvalidAttrNumber: none) */
static AttrNumber *
append_attnos(TupleDesc desc, int ncols, const char *const *cols)
{
	AttrNumber *attno = palloc(sizeof(AttrNumber) * ncols);

	for (int c = 0; c < ncols; c++)
	{
		attno[c] = InvalidAttrNumber;
		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			if (!att->attisdropped && strcmp(NameStr(att->attname), cols[c]) == 0)
			{
				attno[c] = att->attnum;
				break;
			}
		}
	}
	return attno;
}

/*
 * The defaults of the columns not filled (id, xact, ...): an INSERT's, the
 * parent's.  One that calls no volatile function (a constant, now()) has
 * the same value for every row of the statement, computed here once; a
 * volatile one (nextval) is computed for each row.
 */
typedef struct AppendDefaults
{
	Datum	   *values;			/* per column: its default's one value, or null */
	bool	   *nulls;
	int		   *per_row;		/* the columns whose default is computed per row */
	ExprState **per_row_expr;	/* and their defaults */
	int			nper_row;
} AppendDefaults;

static void
append_defaults(AppendDefaults *d, Relation root, TupleDesc desc, int ncols, const AttrNumber *attno,
				EState *estate, OrchTaskCache *tc)
{
	ExprContext *econtext = GetPerTupleExprContext(estate);

	d->values = palloc0(sizeof(Datum) * desc->natts);
	d->nulls = palloc(sizeof(bool) * desc->natts);
	memset(d->nulls, true, sizeof(bool) * desc->natts);
	d->per_row = palloc(sizeof(int) * desc->natts);
	d->per_row_expr = palloc(sizeof(ExprState *) * desc->natts);
	d->nper_row = 0;
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		bool		filled = false;
		Node	   *def;
		ExprState  *es;
		bool		is_volatile;

		if (att->attisdropped || att->attgenerated)
			continue;
		for (int c = 0; c < ncols && !filled; c++)
			filled = attno[c] == att->attnum;
		if (filled)
			continue;
		if (tc != NULL)
		{
			/* the task table's, compiled once (task_cache.c) */
			es = orch_task_cache_default(tc, a, &is_volatile);
			if (es == NULL)
				continue;
		}
		else
		{
			def = build_column_default(root, att->attnum);
			if (def == NULL)
				continue;
			es = ExecPrepareExpr((Expr *) def, estate);
			is_volatile = contain_volatile_functions(def);
		}
		if (is_volatile)
		{
			d->per_row[d->nper_row] = a;
			d->per_row_expr[d->nper_row++] = es;
			continue;
		}
		d->values[a] = ExecEvalExprSwitchContext(es, econtext, &d->nulls[a]);
		if (!d->nulls[a])
			d->values[a] = datumCopy(d->values[a], att->attbyval, att->attlen);
	}
	ResetExprContext(econtext);
}

/* Fill a slot with one row: the defaults, then the values given */
static void
append_fill_slot(TupleTableSlot *slot, TupleDesc desc, const AppendDefaults *d, ExprContext *econtext,
				 int ncols, const AttrNumber *attno, const Datum *rv, const bool *rn)
{
	ExecClearTuple(slot);
	memcpy(slot->tts_values, d->values, sizeof(Datum) * desc->natts);
	memcpy(slot->tts_isnull, d->nulls, sizeof(bool) * desc->natts);
	for (int i = 0; i < d->nper_row; i++)
		slot->tts_values[d->per_row[i]] =
			ExecEvalExprSwitchContext(d->per_row_expr[i], econtext, &slot->tts_isnull[d->per_row[i]]);
	for (int c = 0; c < ncols; c++)
		if (attno[c] != InvalidAttrNumber)
		{
			slot->tts_values[attno[c] - 1] = rv[c];
			slot->tts_isnull[attno[c] - 1] = rn[c];
		}
	ExecStoreVirtualTuple(slot);
}

/* ----------------------------------------------------------------------
 * Index entries.  A partial index's predicate reads columns that the rows
 * of one append mostly share (a task's state, queue, run): its result for
 * a row whose predicate columns equal the first row's is the first row's,
 * and is computed again only for a row that differs.  Each row is compared
 * with the first once, on every column any predicate reads; only a row
 * that differs there is compared index by index.
 * ---------------------------------------------------------------------- */
typedef struct IndexEntries
{
	ResultRelInfo *rri;
	bool		direct;			/* no exclusion or deferred unique index: entries made here */
	int		  **pred_cols;		/* per index: the columns its predicate reads (row offsets) */
	int		   *npred_cols;
	int8	   *pred_ref;		/* per index: the first row's result; -1: none yet; -2: never */
	int		   *all_cols;		/* every column some predicate reads (row offsets) */
	int			nall_cols;
	bool		have_ref;		/* the first row's columns are in ref_values */
	Datum	   *ref_values;		/* the first row's predicate columns (copied) */
	bool	   *ref_nulls;
	int		   *same_idx;		/* the indexes a row equal to the first goes into */
	int			nsame;			/* -1: not known yet; -2: none (rows tested) */
} IndexEntries;

/* The user columns a predicate reads, as row offsets, into cols (-1: a system column) */
static int
entries_pred_cols(Node *pred, int *cols)
{
	Bitmapset  *attrs = NULL;
	int			k = -1;
	int			n = 0;

	pull_varattnos(pred, 1, &attrs);
	while ((k = bms_next_member(attrs, k)) >= 0)
		if (k + FirstLowInvalidHeapAttributeNumber <= 0)
			return -1;
		else
			cols[n++] = k + FirstLowInvalidHeapAttributeNumber - 1;
	return n;
}

static void
entries_init(IndexEntries *ie, ResultRelInfo *rri)
{
	int			n = Max(rri->ri_NumIndices, 1);
	int			natts = RelationGetDescr(rri->ri_RelationDesc)->natts;
	bool	   *in_all = palloc0(sizeof(bool) * natts);

	ie->rri = rri;
	ie->direct = true;
	ie->pred_cols = palloc0(sizeof(int *) * n);
	ie->npred_cols = palloc0(sizeof(int) * n);
	ie->pred_ref = palloc(sizeof(int8) * n);
	ie->all_cols = palloc(sizeof(int) * natts);
	ie->nall_cols = 0;
	ie->have_ref = false;
	ie->ref_values = palloc0(sizeof(Datum) * natts);
	ie->ref_nulls = palloc0(sizeof(bool) * natts);
	ie->same_idx = palloc(sizeof(int) * n);
	ie->nsame = -1;
	for (int i = 0; i < rri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = rri->ri_IndexRelationInfo[i];
		Relation	ir = rri->ri_IndexRelationDescs[i];
		int			m;

		if (ii->ii_ExclusionOps != NULL || (ir->rd_index->indisunique && !ir->rd_index->indimmediate))
			ie->direct = false;
		ie->pred_cols[i] = palloc(sizeof(int) * natts);
		m = entries_pred_cols((Node *) ii->ii_Predicate, ie->pred_cols[i]);
		/* a predicate on a system column is tested on every row */
		ie->pred_ref[i] = m < 0 ? -2 : -1;
		ie->npred_cols[i] = Max(m, 0);
		for (int c = 0; c < ie->npred_cols[i]; c++)
			if (!in_all[ie->pred_cols[i][c]])
			{
				in_all[ie->pred_cols[i][c]] = true;
				ie->all_cols[ie->nall_cols++] = ie->pred_cols[i][c];
			}
	}
}

/* Do the row's columns cols[0 .. n-1] equal the first row's? */
static bool
entries_same(IndexEntries *ie, TupleTableSlot *slot, const int *cols, int n)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;

	for (int c = 0; c < n; c++)
	{
		int			a = cols[c];
		Form_pg_attribute att = TupleDescAttr(desc, a);
		bool		isnull;
		Datum		d = slot_getattr(slot, a + 1, &isnull);

		if (isnull != ie->ref_nulls[a] ||
			(!isnull && !datum_image_eq(d, ie->ref_values[a], att->attbyval, att->attlen)))
			return false;
	}
	return true;
}

/* The first row's predicate columns, kept as the reference */
static void
entries_keep_ref(IndexEntries *ie, TupleTableSlot *slot)
{
	TupleDesc	desc = slot->tts_tupleDescriptor;

	for (int c = 0; c < ie->nall_cols; c++)
	{
		int			a = ie->all_cols[c];
		Form_pg_attribute att = TupleDescAttr(desc, a);
		Datum		d = slot_getattr(slot, a + 1, &ie->ref_nulls[a]);

		if (!ie->ref_nulls[a])
			ie->ref_values[a] = datumCopy(d, att->attbyval, att->attlen);
	}
	ie->have_ref = true;
}

/*
 * Does the row go into index i: its predicate, tested or known (same: the
 * row equals the first on every predicate column).
 */
static bool
entries_wanted(IndexEntries *ie, int i, TupleTableSlot *slot, EState *estate, bool same)
{
	IndexInfo  *ii = ie->rri->ri_IndexRelationInfo[i];
	bool		ok;

	if (ii->ii_Predicate == NIL)
		return true;
	if (ie->pred_ref[i] >= 0 &&
		(same || entries_same(ie, slot, ie->pred_cols[i], ie->npred_cols[i])))
		return ie->pred_ref[i] == 1;
	if (ii->ii_PredicateState == NULL)
		ii->ii_PredicateState = ExecPrepareQual(ii->ii_Predicate, estate);
	ok = ExecQual(ii->ii_PredicateState, GetPerTupleExprContext(estate));
	/* the result for the first row's predicate columns (tested on a row that has them) */
	if (ie->pred_ref[i] == -1 && same)
		ie->pred_ref[i] = ok ? 1 : 0;
	return ok;
}

/*
 * The indexes a row equal to the first on every predicate column goes
 * into, once each index's result for the first row is known (none tests a
 * system column): ie->same_idx; else nsame is -2.
 */
static void
entries_same_list(IndexEntries *ie)
{
	ResultRelInfo *rri = ie->rri;
	int			n = 0;

	for (int i = 0; i < rri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = rri->ri_IndexRelationInfo[i];

		if (rri->ri_IndexRelationDescs[i] == NULL || !ii->ii_ReadyForInserts)
			continue;
		if (ii->ii_Predicate != NIL && ie->pred_ref[i] < 0)
		{
			/* a predicate on a system column: tested on every row */
			ie->nsame = -2;
			return;
		}
		if (ii->ii_Predicate == NIL || ie->pred_ref[i] == 1)
			ie->same_idx[n++] = i;
	}
	ie->nsame = n;
}

/* Row's entry in index i */
static void
entries_insert_one(IndexEntries *ie, int i, TupleTableSlot *slot, EState *estate)
{
	ResultRelInfo *rri = ie->rri;
	Relation	ir = rri->ri_IndexRelationDescs[i];
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];

	FormIndexDatum(rri->ri_IndexRelationInfo[i], slot, estate, values, isnull);
	(void) index_insert(ir, values, isnull, &slot->tts_tid, rri->ri_RelationDesc,
						ir->rd_index->indisunique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
						false, rri->ri_IndexRelationInfo[i]);
}

/* The index entries of one row just written (its tid in the slot) */
static void
entries_insert(IndexEntries *ie, TupleTableSlot *slot, EState *estate)
{
	ResultRelInfo *rri = ie->rri;
	bool		same;

	Assert(ie->direct);
	GetPerTupleExprContext(estate)->ecxt_scantuple = slot;
	if (!ie->have_ref)
		entries_keep_ref(ie, slot);
	same = entries_same(ie, slot, ie->all_cols, ie->nall_cols);
	if (same && ie->nsame >= 0)
	{
		/* the indexes known from the first row: no predicate to look at */
		for (int k = 0; k < ie->nsame; k++)
			entries_insert_one(ie, ie->same_idx[k], slot, estate);
		return;
	}
	for (int i = 0; i < rri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = rri->ri_IndexRelationInfo[i];

		if (rri->ri_IndexRelationDescs[i] == NULL || !ii->ii_ReadyForInserts ||
			!entries_wanted(ie, i, slot, estate, same))
			continue;
		entries_insert_one(ie, i, slot, estate);
	}
	if (same && ie->nsame == -1)
		entries_same_list(ie);
}

/* Are the columns named of the types given (no typmod, no domain)? */
static bool
append_types_match(TupleDesc desc, int ncols, const AttrNumber *attno, const Oid *types)
{
	for (int c = 0; types != NULL && c < ncols; c++)
	{
		Form_pg_attribute att;

		if (attno[c] == InvalidAttrNumber)
			return false;
		att = TupleDescAttr(desc, attno[c] - 1);
		if (att->atttypid != types[c] || att->atttypmod >= 0)
			return false;
	}
	return true;
}

/*
 * The end of an append, written or not: its indexes, executor state and
 * memory freed, the table (and the partitioned root) closed, their locks
 * kept until the transaction ends.
 */
static void
append_close(ResultRelInfo *rri, EState *estate, MemoryContext old, MemoryContext work, Relation root)
{
	Relation	rel = rri->ri_RelationDesc;

	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(work);
	if (rel != root)
		table_close(rel, NoLock);
	table_close(root, NoLock);
}

/* One append under way: what append_begin sets up for the chunks */
typedef struct Appending
{
	Relation	root;
	Relation	rel;
	TupleDesc	desc;
	AttrNumber *attno;			/* per column named: its number in rel */
	int			ncols;
	EState	   *estate;
	ResultRelInfo *rri;
	IndexEntries ie;			/* a batch's index entries */
	OrchTaskEntries *te;		/* or one task row's */
	AppendDefaults defaults;
	TupleTableSlot **slots;		/* the rows' values (virtual) */
	TupleTableSlot **rows;		/* and the heap tuples formed from them */
	int			nslots;
	CommandId	cid;
	OrchRowHook row_hook;
	int		   *not_null;		/* the columns declared NOT NULL (offsets) */
	int			nnot_null;
	bool		checks;			/* the table has CHECK constraints */
	Oid			id_seq;
	AttrNumber	idcol;
	MemoryContext work;
	MemoryContext old;
} Appending;

/*
 * Open the target and set up the rows' slots, defaults and index entries
 * (in a memory context of the append's, current until append_end).  False,
 * with everything closed again, when the table needs the SQL path.
 */
static bool
append_begin(Appending *a, Oid relid, OrchRowHook row_hook, const Oid *types, Oid id_seq,
			 int ncols, const char *const *cols, int nrows, const Datum *values, const bool *nulls)
{
	OrchTaskCache *tc;
	TupleDesc	slot_desc;

	memset(a, 0, sizeof(*a));
	a->rel = open_append_target(relid, &a->root, row_hook != NULL, ncols, cols, nrows, values, nulls);
	if (a->rel == NULL)
		return false;
	a->work = AllocSetContextCreate(CurrentMemoryContext, "orchestrator append",
									ALLOCSET_DEFAULT_SIZES);
	a->old = MemoryContextSwitchTo(a->work);
	a->desc = RelationGetDescr(a->rel);
	a->ncols = ncols;
	a->row_hook = row_hook;
	a->id_seq = id_seq;
	/* the task table's description is kept (task_cache.c) */
	tc = row_hook != NULL ? orch_task_cache(a->rel) : NULL;
	a->attno = tc != NULL ? (AttrNumber *) orch_task_cache_columns(tc, a->rel, ncols, cols, NULL)
		: append_attnos(a->desc, ncols, cols);
	a->estate = CreateExecutorState();
	a->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(a->rri, a->rel, 0, NULL, 0);
	/*
	 * One task row: the kept indexes, only those opened that take it; a
	 * batch: every index, its predicates tested against a reference row.
	 */
	if (tc != NULL && nrows == 1 && orch_task_cache_entries_ok(tc))
		a->te = orch_task_entries_begin(tc, a->rel, a->estate);
	else
	{
		ExecOpenIndices(a->rri, false);
		entries_init(&a->ie, a->rri);
	}
	if ((a->te == NULL && !a->ie.direct) || !append_types_match(a->desc, ncols, a->attno, types))
	{
		append_close(a->rri, a->estate, a->old, a->work, a->root);
		return false;
	}
	append_defaults(&a->defaults, a->root, a->desc, ncols, a->attno, a->estate, tc);
	a->checks = a->desc->constr != NULL && a->desc->constr->num_check > 0;
	a->not_null = palloc(sizeof(int) * a->desc->natts);
	for (int i = 0; i < a->desc->natts; i++)
		if (TupleDescAttr(a->desc, i)->attnotnull)
			a->not_null[a->nnot_null++] = i;
	for (int c = 0; OidIsValid(id_seq) && c < ncols; c++)
		if (strcmp(cols[c], "id") == 0)
			a->idcol = a->attno[c];
	if (OidIsValid(id_seq) && a->idcol == InvalidAttrNumber)
		elog(ERROR, "orchestrator: orch.%s has no column \"id\"", RelationGetRelationName(a->rel));

	a->cid = GetCurrentCommandId(true);
	a->nslots = Min(nrows, STORE_CHUNK);
	a->slots = palloc(sizeof(TupleTableSlot *) * a->nslots);
	a->rows = palloc(sizeof(TupleTableSlot *) * a->nslots);
	/*
	 * Two slots per row.  A virtual one keeps the row's values, so that the
	 * index entries read them as they are (a heap slot would forget them
	 * once the row is formed, and the task's row would be taken apart again,
	 * every column, for its entries).  A heap one holds the row formed from
	 * them, once, for the table's insert: given the virtual slot, the insert
	 * would first copy its values into the slot's own memory, then form the
	 * row from the copy.  Their description is a copy of the table's, which
	 * no slot pins: each slot would pin the table's own in the resource
	 * owner, and remembering and forgetting 256 pins of one description
	 * cost more than the slots themselves.
	 */
	slot_desc = CreateTupleDescCopy(a->desc);
	for (int i = 0; i < a->nslots; i++)
	{
		a->slots[i] = MakeSingleTupleTableSlot(slot_desc, &TTSOpsVirtual);
		/* a CHECK or a predicate that reads tableoid reads it from the first row on */
		a->slots[i]->tts_tableOid = RelationGetRelid(a->rel);
		a->rows[i] = MakeSingleTupleTableSlot(slot_desc, &TTSOpsHeapTuple);
	}
	return true;
}

/*
 * Does the row need the table's constraints checked: a CHECK constraint to
 * evaluate, or a NULL in a NOT NULL column (ExecConstraints raises the
 * error an INSERT does)?  A row that meets every NOT NULL of a table
 * without CHECKs passes them as it is.
 */
static bool
append_check_needed(const Appending *a, TupleTableSlot *slot)
{
	if (a->checks)
		return true;
	for (int i = 0; i < a->nnot_null; i++)
		if (slot->tts_isnull[a->not_null[i]])
			return true;
	return false;
}

/*
 * Rows first .. first + m - 1 into the slots: the defaults, the values
 * given, the id drawn, the row trigger's work, the table's constraints.
 */
static void
append_fill_chunk(Appending *a, int first, int m, const Datum *values, const bool *nulls, int64 *ids)
{
	ExprContext *econtext = GetPerTupleExprContext(a->estate);

	for (int i = 0; i < m; i++)
	{
		TupleTableSlot *slot = a->slots[i];
		size_t		row = (size_t) (first + i) * a->ncols;

		append_fill_slot(slot, a->desc, &a->defaults, econtext, a->ncols, a->attno,
						 values + row, nulls + row);
		if (a->idcol != InvalidAttrNumber)
		{
			/* the caller's right to the sequence, checked on the first */
			ids[first + i] = nextval_internal(a->id_seq, first + i == 0);
			slot->tts_values[a->idcol - 1] = Int64GetDatum(ids[first + i]);
			slot->tts_isnull[a->idcol - 1] = false;
		}
		if (a->row_hook)
		{
			/* what it sets lives until the chunk is written */
			MemoryContext rowcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(a->estate));

			a->row_hook(a->rel, slot->tts_values, slot->tts_isnull);
			MemoryContextSwitchTo(rowcxt);
		}
		if (append_check_needed(a, slot))
			ExecConstraints(a->rri, slot, a->estate);
	}
}

/*
 * The m rows formed from their values into their heap slots (each slot
 * frees its row when it takes the next one), then written; their tids
 * given back to the slots of their values, which their index entries read
 * (the table's oid is theirs from append_begin on).
 */
static void
append_insert_rows(Appending *a, int m)
{
	MemoryContext old = MemoryContextSwitchTo(a->work);

	for (int i = 0; i < m; i++)
		ExecStoreHeapTuple(heap_form_tuple(a->desc, a->slots[i]->tts_values, a->slots[i]->tts_isnull),
						   a->rows[i], true);
	/* what the insert allocates (a row's toasted form) lives until the chunk is written */
	MemoryContextSwitchTo(GetPerTupleMemoryContext(a->estate));
	if (a->te != NULL)
		table_tuple_insert(a->rel, a->rows[0], a->cid, 0, NULL); /* an insert record of its own */
	else
		table_multi_insert(a->rel, a->rows, m, a->cid, 0, NULL);
	MemoryContextSwitchTo(old);
	for (int i = 0; i < m; i++)
		a->slots[i]->tts_tid = a->rows[i]->tts_tid;
}

/* The m rows in the slots written: the heap, then their index entries */
static void
append_write_chunk(Appending *a, int m)
{
	append_insert_rows(a, m);
	if (a->te != NULL)
		orch_task_entries_insert(a->te, a->slots[0], NULL, NULL);
	else
		for (int i = 0; i < m; i++)
			entries_insert(&a->ie, a->slots[i], a->estate);
	ResetPerTupleExprContext(a->estate);
}

static void
append_end(Appending *a)
{
	for (int i = 0; i < a->nslots; i++)
	{
		ExecDropSingleTupleTableSlot(a->slots[i]);
		ExecDropSingleTupleTableSlot(a->rows[i]);
	}
	if (a->te != NULL)
		orch_task_entries_end(a->te);
	append_close(a->rri, a->estate, a->old, a->work, a->root);
}

/*
 * Append nrows rows to orch.<relname>: values and nulls hold ncols entries
 * per row, for the columns named in cols.  Returns false, having written
 * nothing, when the table needs the SQL path.  Rows appear in the order
 * given (ids from the column's sequence, in that order).  row_hook: NULL
 * for a table without triggers; for the task table, its row trigger's
 * work, run on each row's values (every column, set in place) before the
 * row is written.  types: NULL, or the type of each column named (a
 * column of another type, a typmod or a domain: the SQL path coerces).
 * id_seq: InvalidOid, or the sequence each row's column "id" (which cols
 * must name) is drawn from once the rows are known to be written here,
 * into ids (in order).
 */
static bool
append_rows(Oid relid, OrchRowHook row_hook, const Oid *types, Oid id_seq, int64 *ids,
			int ncols, const char *const *cols, int nrows, const Datum *values, const bool *nulls)
{
	Appending	a;

	if (nrows <= 0)
		return true;
	if (!append_begin(&a, relid, row_hook, types, id_seq, ncols, cols, nrows, values, nulls))
		return false;
	for (int done = 0; done < nrows;)
	{
		int			m = Min(nrows - done, STORE_CHUNK);

		append_fill_chunk(&a, done, m, values, nulls, ids);
		append_write_chunk(&a, m);
		done += m;
	}
	append_end(&a);
	return true;
}

bool
orch_table_append(const char *relname, int ncols, const char *const *cols,
				  int nrows, const Datum *values, const bool *nulls)
{
	Oid			relid = orch_relid(relname);

	return OidIsValid(relid) && append_rows(relid, NULL, NULL, InvalidOid, NULL, ncols, cols, nrows, values, nulls);
}

/*
 * Append nrows task rows (orch.tasks; values and nulls as orch_table_append
 * takes them, of the types given, the column "id" among them, filled here
 * from orch.events_id_seq as the INSERT draws it: the ids into ids, in
 * order), row_hook doing the row trigger's work on each before it is
 * written.  False, having written nothing and drawn no id, when the table
 * needs the SQL INSERT: a trigger of another's on it (or either of its own
 * missing or off), row security that applies, a column of another type,
 * Citus.
 */
bool
orch_tasks_append(OrchRowHook row_hook, int ncols, const char *const *cols, const Oid *types,
				  int nrows, const Datum *values, const bool *nulls, int64 *ids)
{
	Oid			relid = orch_relid("tasks");
	Oid			seq = orch_relid("events_id_seq");

	return OidIsValid(relid) && OidIsValid(seq) &&
		append_rows(relid, row_hook, types, seq, ids, ncols, cols, nrows, values, nulls);
}

/* ----------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */
enum
{
	SC_TENANT, SC_TASK, SC_RUN, SC_ENTITY, SC_FROM, SC_TO, SC_REASON, SC_ACTOR,
	SC_ATTEMPT, SC_TOKEN, SC_NOTE, SC_AT, SC_LABEL, SC_WAITED,
	SC_ID, SC_XACT,				/* only for events a task row recorded */
	SC_COUNT
};

static const char *const event_columns[SC_COUNT] = {
	"tenant_id", "task_id", "run_id", "entity", "from_state", "to_state",
	"reason_code", "actor", "attempt", "lease_token", "note", "at", "label",
	"waited", "id", "xact"
};

/*
 * Write n events.  Returns false, having written nothing, when orch.events
 * needs the SQL path.
 */
bool
orch_events_store(OrchEvent *const *events, int n)
{
	Datum	   *v;
	bool	   *nl;
	Oid			relid;
	bool		ok;
	int			ncols = (n > 0 && events[0]->id != 0) ? SC_COUNT : SC_ID;

	if (n <= 0)
		return true;
	relid = orch_relid("events");
	if (!OidIsValid(relid))
		return false;
	v = palloc(sizeof(Datum) * ncols * n);
	nl = palloc(sizeof(bool) * ncols * n);
	for (int i = 0; i < n; i++)
	{
		const OrchEvent *e = events[i];
		Datum	   *rv = v + (size_t) i * ncols;
		bool	   *rn = nl + (size_t) i * ncols;
		const char *actor = e->actor;

#define PUT(c, d) do { rv[c] = (d); rn[c] = false; } while (0)
#define PUT_TEXT(c, s) do { if (s) PUT(c, CStringGetTextDatum(s)); else { rv[c] = (Datum) 0; rn[c] = true; } } while (0)
#define PUT_NULL(c) do { rv[c] = (Datum) 0; rn[c] = true; } while (0)
		PUT_TEXT(SC_TENANT, e->tenant ? e->tenant : ORCH_DEFAULT_TENANT);
		if (e->has_task)
			PUT(SC_TASK, Int64GetDatum(e->task_id));
		else
			PUT_NULL(SC_TASK);
		if (e->has_run)
			PUT(SC_RUN, Int64GetDatum(e->run_id));
		else
			PUT_NULL(SC_RUN);
		PUT_TEXT(SC_ENTITY, e->entity ? e->entity : "task");
		PUT_TEXT(SC_FROM, e->from_state);
		PUT_TEXT(SC_TO, e->to_state);
		PUT_TEXT(SC_REASON, e->reason_code);
		PUT_TEXT(SC_ACTOR, actor);
		if (e->attempt > 0)
			PUT(SC_ATTEMPT, Int32GetDatum(e->attempt));
		else
			PUT_NULL(SC_ATTEMPT);
		if (e->has_token)
			PUT(SC_TOKEN, UUIDPGetDatum(&e->token));
		else
			PUT_NULL(SC_TOKEN);
		PUT_TEXT(SC_NOTE, e->note);
		PUT(SC_AT, TimestampTzGetDatum(e->at));
		PUT_TEXT(SC_LABEL, e->label);
		if (e->waited_us >= 0)
			PUT(SC_WAITED, IntervalPGetDatum(orch_usecs_interval(e->waited_us)));
		else
			PUT_NULL(SC_WAITED);
		if (ncols == SC_COUNT)
		{
			PUT(SC_ID, Int64GetDatum(e->id));
			if (e->has_xact)
				PUT(SC_XACT, Int64GetDatum(e->xact));
			else
				PUT_NULL(SC_XACT);
		}
#undef PUT_NULL
#undef PUT_TEXT
#undef PUT
	}
	ok = append_rows(relid, NULL, NULL, InvalidOid, NULL, ncols, event_columns, n, v, nl);
	pfree(v);
	pfree(nl);
	return ok;
}
