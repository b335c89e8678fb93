/*
 * task_cache.c
 *	  What writing task rows without SQL (append.c: an enqueue, a batch;
 *	  task_update.c: a completion) needs to know of orch.tasks, kept per
 *	  backend: whether the triggers an INSERT and an UPDATE fire are the
 *	  table's own two and no other, its indexes (each one's description and
 *	  compiled predicate), its columns' compiled defaults.  Built again once
 *	  the table or one of its indexes is invalidated (a trigger, an index, a
 *	  default, a column changed) or a function is (one a default or a
 *	  predicate may have inlined).  And the index entries of one row
 *	  version, made as the executor makes them, for the indexes whose
 *	  predicate the version meets, which alone are opened.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/index.h"
#include "catalog/dependency.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "utils/lsyscache.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_oper.h"
#include "rewrite/rewriteHandler.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "orchestrator.h"

#define TASK_COLUMN_LISTS 4

struct OrchTaskCache
{
	MemoryContext cxt;
	Oid			relid;
	bool		stale;
	bool		inserts_ours;	/* the table's own two triggers and no other on INSERT */
	bool		updates_ours;	/* ... on UPDATE */
	bool		btree_only;		/* every index a btree, none deferred or exclusion */
	int			nindexes;
	Oid		   *index_oids;
	IndexInfo **index_infos;
	ExprState **index_preds;	/* NULL: no predicate */
	bool	   *index_unique;
	int			pk;				/* position of the primary key, -1: none */
	int			claim[2];		/* the claim indexes (queue order; per tenant), -1: none */
	int			natts;
	ExprState **defaults;		/* per column: its default, compiled; NULL: none */
	bool	   *default_volatile;
	ExprContext *econtext;		/* the predicates' evaluation, kept */
	int			nlists;			/* column lists looked up (orch_task_cache_columns) */
	const char *const *list_names[TASK_COLUMN_LISTS];
	AttrNumber *list_attnos[TASK_COLUMN_LISTS];
};

struct OrchTaskEntries
{
	OrchTaskCache *cache;
	Relation	rel;
	Relation   *open;			/* per index: opened once an entry goes in */
	EState	   *estate;
};

static OrchTaskCache *cache = NULL;
static bool callbacks_registered = false;

/* While a description is built: the table, its indexes, and whether they or a function changed */
static Oid	building = InvalidOid;
static List *building_indexes = NIL;
static bool building_changed = false;

static void
relcache_changed(Datum arg, Oid relid)
{
	if (OidIsValid(building) &&
		(relid == InvalidOid || relid == building || list_member_oid(building_indexes, relid)))
		building_changed = true;
	if (cache == NULL)
		return;
	if (relid == InvalidOid || relid == cache->relid)
		cache->stale = true;
	for (int i = 0; i < cache->nindexes && !cache->stale; i++)
		if (cache->index_oids[i] == relid)
			cache->stale = true;
}

static void
function_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	building_changed = true;
	if (cache != NULL)
		cache->stale = true;
}

/*
 * Is the trigger the extension's own (its function a member of the
 * extension) of that name, fired before or after each row or statement,
 * as this session fires it (enabled, not for replicas only, no WHEN
 * clause, no column list)?
 */
static bool
own_trigger(Trigger *t, Oid extoid, const char *name, const char *fn, bool row, bool before)
{
	char	   *tfn = get_func_name(t->tgfoid);

	return strcmp(t->tgname, name) == 0 && tfn != NULL && strcmp(tfn, fn) == 0 &&
		getExtensionOfObject(ProcedureRelationId, t->tgfoid) == extoid &&
		TRIGGER_FOR_ROW(t->tgtype) == row && TRIGGER_FOR_BEFORE(t->tgtype) == before &&
		(t->tgenabled == TRIGGER_FIRES_ON_ORIGIN || t->tgenabled == TRIGGER_FIRES_ALWAYS) &&
		t->tgqual == NULL && t->tgnattr == 0;
}

/*
 * Are the triggers an INSERT (update: an UPDATE) of rel fires exactly the
 * extension's own two on orch.tasks: the lifecycle row trigger (whose work
 * the caller's row hook does) and the statement-end trigger (whose work
 * the caller does after the rows)?  Triggers that fire on no such
 * statement (a foreign key's, yours on another event) do not count.
 * Either missing, disabled or firing on replicas only, a WHEN clause, a
 * column list, or any other trigger on the event: no.  (The caller checks
 * that this session fires triggers: session_replication_role.)
 */
static bool
triggers_ours(Relation rel, bool update)
{
	/* a copy: the lookups below may rebuild rel's entry, and its triggers */
	TriggerDesc *td = CopyTriggerDesc(rel->trigdesc);
	Oid			extoid = get_extension_oid("orchestrator", true);
	bool		lifecycle = false;
	bool		statement_end = false;

	if (td == NULL || !OidIsValid(extoid))
		return false;
	for (int i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];

		if (update ? !TRIGGER_FOR_UPDATE(t->tgtype) : !TRIGGER_FOR_INSERT(t->tgtype))
			continue;
		if (!lifecycle &&
			own_trigger(t, extoid, "tasks_lifecycle", "orch_state_machine_trigger", true, true) &&
			t->tgnargs == 2 && strcmp(t->tgargs[0], "state") == 0 && strcmp(t->tgargs[1], "task") == 0)
			lifecycle = true;
		else if (!statement_end &&
				 own_trigger(t, extoid, "tasks_statement_end", "orch_tasks_statement_end", false, false))
			statement_end = true;
		else
			return false;
	}
	return lifecycle && statement_end;
}

/* One index taken in: its description, compiled predicate and expressions, kind */
static void
add_index(OrchTaskCache *c, int i, Oid indexoid, Oid pkoid)
{
	Relation	ir = index_open(indexoid, RowExclusiveLock);
	IndexInfo  *ii = BuildIndexInfo(ir);

	c->index_oids[i] = indexoid;
	c->index_infos[i] = ii;
	c->index_unique[i] = ir->rd_index->indisunique;
	if (ir->rd_rel->relam != BTREE_AM_OID || ii->ii_ExclusionOps != NULL ||
		(ir->rd_index->indisunique && !ir->rd_index->indimmediate))
		c->btree_only = false;
	if (indexoid == pkoid)
		c->pk = i;
	c->index_preds[i] = NULL;
	if (ii->ii_Predicate != NIL)
		c->index_preds[i] = ExecInitQual((List *) expression_planner((Expr *) ii->ii_Predicate), NULL);
	/* (FormIndexDatum evaluates them in the caller's per-row context) */
	if (ii->ii_Expressions != NIL)
		ii->ii_ExpressionsState = ExecInitExprList((List *) expression_planner((Expr *) ii->ii_Expressions),
												   NULL);
	index_close(ir, NoLock);
}

/* Each column's default, compiled as an INSERT compiles it */
static void
add_defaults(OrchTaskCache *c, Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	c->natts = desc->natts;
	c->defaults = palloc0(sizeof(ExprState *) * Max(c->natts, 1));
	c->default_volatile = palloc0(sizeof(bool) * Max(c->natts, 1));
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		Node	   *def;

		if (att->attisdropped || att->attgenerated)
			continue;
		def = build_column_default(rel, att->attnum);
		if (def == NULL)
			continue;
		def = (Node *) expression_planner((Expr *) def);
		c->defaults[a] = ExecInitExpr((Expr *) def, NULL);
		c->default_volatile[a] = contain_volatile_functions(def);
	}
}

/* The claim indexes' key columns, in order (tenant_id only in the second) */
static const char *const claim_keys[2][5] = {
	{"queue", "priority", "created_at", "id", NULL},
	{"queue", "tenant_id", "priority", "created_at", "id"}
};

/* Column name's attribute number in rel (InvalidAttrNumber: none) */
static AttrNumber
column_attno(Relation rel, const char *name)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int a = 0; a < desc->natts; a++)
		if (!TupleDescAttr(desc, a)->attisdropped &&
			strcmp(NameStr(TupleDescAttr(desc, a)->attname), name) == 0)
			return a + 1;
	return InvalidAttrNumber;
}

/*
 * What a claim's scan of index i knows of each row it wants: claimable
 * (ready_at IS NOT NULL) and, per tenant, not of the default tenant.
 */
static List *
claim_clauses(Relation rel, bool tenant)
{
	AttrNumber	ready = column_attno(rel, "ready_at");
	AttrNumber	ten = column_attno(rel, "tenant_id");
	NullTest   *nt = makeNode(NullTest);
	List	   *clauses;

	nt->arg = (Expr *) makeVar(1, ready, TIMESTAMPTZOID, -1, InvalidOid, 0);
	nt->nulltesttype = IS_NOT_NULL;
	nt->location = -1;
	clauses = list_make1(nt);
	if (tenant)
	{
		Oid			ne = LookupOperName(NULL, list_make2(makeString("pg_catalog"), makeString("<>")),
										TEXTOID, TEXTOID, true, -1);

		if (!OidIsValid(ne))
			return NIL;
		clauses = lappend(clauses,
						  make_opclause(ne, BOOLOID, false,
										(Expr *) makeVar(1, ten, TEXTOID, -1, DEFAULT_COLLATION_OID, 0),
										(Expr *) makeConst(TEXTOID, -1, DEFAULT_COLLATION_OID, -1,
														   CStringGetTextDatum(ORCH_DEFAULT_TENANT),
														   false, false),
										InvalidOid, DEFAULT_COLLATION_OID));
	}
	return clauses;
}

/*
 * Is the index expression e the queue's hash, hashtextextended(queue, 0)
 * (ORCH_QUEUE_KEY), in the default collation (the claims' parameter's, and
 * deterministic: the hash is of the name's bytes)?
 */
static bool
is_queue_hash(Node *e, Relation rel)
{
	FuncExpr   *f = (FuncExpr *) e;
	Var		   *v;
	Const	   *seed;

	if (!IsA(e, FuncExpr) || f->funcid != F_HASHTEXTEXTENDED || list_length(f->args) != 2 ||
		!IsA(linitial(f->args), Var) || !IsA(lsecond(f->args), Const))
		return false;
	v = linitial_node(Var, f->args);
	seed = lsecond_node(Const, f->args);
	return v->varattno == column_attno(rel, "queue") && f->inputcollid == DEFAULT_COLLATION_OID &&
		v->varcollid == f->inputcollid && seed->consttype == INT8OID && !seed->constisnull &&
		DatumGetInt64(seed->constvalue) == 0;
}

/*
 * Does index i hold every claimable row of a queue (per tenant: of a tenant
 * not the default one) in claim order: a valid btree on exactly the claim
 * keys (the first one the queue or its hash), plain columns ascending, each
 * of its type's default operator class and of the column's collation, its
 * predicate implied by the rows wanted?
 */
static bool
claim_index_fits(OrchTaskCache *c, Relation rel, int i, bool tenant)
{
	IndexInfo  *ii = c->index_infos[i];
	int			nkeys = tenant ? 5 : 4;
	Relation	ir;
	bool		fits;
	List	   *clauses;
	bool		hashed = ii->ii_Expressions != NIL;

	if (ii->ii_NumIndexKeyAttrs != nkeys)
		return false;
	if (hashed &&
		(list_length(ii->ii_Expressions) != 1 || ii->ii_IndexAttrNumbers[0] != InvalidAttrNumber ||
		 !is_queue_hash(linitial(ii->ii_Expressions), rel)))
		return false;
	for (int k = hashed ? 1 : 0; k < nkeys; k++)
		if (ii->ii_IndexAttrNumbers[k] == InvalidAttrNumber ||
			ii->ii_IndexAttrNumbers[k] != column_attno(rel, claim_keys[tenant][k]))
			return false;
	clauses = claim_clauses(rel, tenant);
	if (clauses == NIL || !predicate_implied_by(ii->ii_Predicate, clauses, false))
		return false;
	ir = index_open(c->index_oids[i], AccessShareLock);
	fits = ir->rd_rel->relam == BTREE_AM_OID && ir->rd_index->indisvalid &&
		ir->rd_index->indisready;
	for (int k = 0; fits && k < nkeys; k++)
	{
		bool		key_hash = k == 0 && hashed;
		Form_pg_attribute att = key_hash ? NULL :
			TupleDescAttr(RelationGetDescr(rel), ii->ii_IndexAttrNumbers[k] - 1);
		Oid			opclass = GetDefaultOpClass(key_hash ? INT8OID : att->atttypid, BTREE_AM_OID);

		fits = ir->rd_indoption[k] == 0 && OidIsValid(opclass) &&
			ir->rd_opfamily[k] == get_opclass_family(opclass) &&
			ir->rd_indcollation[k] == (key_hash ? InvalidOid : att->attcollation);
	}
	index_close(ir, NoLock);
	return fits;
}

static void
find_claim_indexes(OrchTaskCache *c, Relation rel)
{
	for (int t = 0; t < 2; t++)
	{
		c->claim[t] = -1;
		for (int i = 0; i < c->nindexes && c->claim[t] < 0; i++)
			if (claim_index_fits(c, rel, i, t == 1))
				c->claim[t] = i;
	}
}

static void
build_into(OrchTaskCache *c, Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	int			i = 0;

	c->relid = RelationGetRelid(rel);
	/* (a trigger created, dropped, enabled or disabled invalidates rel) */
	c->inserts_ours = triggers_ours(rel, false);
	c->updates_ours = triggers_ours(rel, true);
	c->btree_only = true;
	c->pk = -1;
	c->nindexes = list_length(indexes);
	c->index_oids = palloc0(sizeof(Oid) * Max(c->nindexes, 1));
	c->index_infos = palloc0(sizeof(IndexInfo *) * Max(c->nindexes, 1));
	c->index_preds = palloc0(sizeof(ExprState *) * Max(c->nindexes, 1));
	c->index_unique = palloc0(sizeof(bool) * Max(c->nindexes, 1));
	foreach(lc, indexes)
		add_index(c, i++, lfirst_oid(lc), rel->rd_pkindex);
	add_defaults(c, rel);
	find_claim_indexes(c, rel);
	c->econtext = CreateStandaloneExprContext();
	list_free(indexes);
}

/*
 * A new description of rel.  What it reads takes locks, which take in the
 * invalidations sent meanwhile: one of the table, of one of its indexes or
 * of a function (an index created concurrently just then) leaves the new
 * description stale, built again at the next call.  An error leaves
 * nothing behind.
 */
static OrchTaskCache *
build(Relation rel)
{
	MemoryContext cxt = AllocSetContextCreate(CacheMemoryContext, "orchestrator task table",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	OrchTaskCache *c = palloc0(sizeof(OrchTaskCache));

	c->cxt = cxt;
	building = RelationGetRelid(rel);
	building_indexes = RelationGetIndexList(rel);
	building_changed = false;
	PG_TRY();
	{
		build_into(c, rel);
	}
	PG_CATCH();
	{
		building = InvalidOid;
		building_indexes = NIL;
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	building = InvalidOid;
	building_indexes = NIL;		/* (in cxt) */
	MemoryContextSwitchTo(old);
	c->stale = building_changed;
	return c;
}

/*
 * The kept description of rel (orch.tasks, opened by the caller), built
 * again when it changed.  Valid until the caller's next call here.
 */
OrchTaskCache *
orch_task_cache(Relation rel)
{
	if (!callbacks_registered)
	{
		orch_schema_on_relcache(relcache_changed);
		CacheRegisterSyscacheCallback(PROCOID, function_changed, (Datum) 0);
		callbacks_registered = true;
	}
	if (cache != NULL && (cache->stale || cache->relid != RelationGetRelid(rel) ||
						  cache->natts != RelationGetDescr(rel)->natts))
	{
		MemoryContextDelete(cache->cxt);
		cache = NULL;
	}
	if (cache == NULL)
		cache = build(rel);
	return cache;
}

/*
 * The attribute numbers of the n columns named (a static list of the
 * caller's, looked up once per description), InvalidAttrNumber for one
 * the table lacks, or (types not NULL) that is not of the type given.
 */
const AttrNumber *
orch_task_cache_columns(OrchTaskCache *c, Relation rel, int n, const char *const *names,
						const Oid *types)
{
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber *attnos;

	for (int l = 0; l < c->nlists; l++)
		if (c->list_names[l] == names)
			return c->list_attnos[l];
	attnos = MemoryContextAllocZero(c->cxt, sizeof(AttrNumber) * Max(n, 1));
	for (int k = 0; k < n; k++)
		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			if (!att->attisdropped && strcmp(NameStr(att->attname), names[k]) == 0 &&
				(types == NULL || att->atttypid == types[k]))
				attnos[k] = att->attnum;
		}
	if (c->nlists < TASK_COLUMN_LISTS)
	{
		c->list_names[c->nlists] = names;
		c->list_attnos[c->nlists++] = attnos;
	}
	return attnos;
}

/*
 * Are the triggers an INSERT (update false) or an UPDATE of the table
 * fires its own two and no other (and, for an UPDATE, is there a primary
 * key to find a row by)?
 */
bool
orch_task_cache_writable(const OrchTaskCache *c, bool update)
{
	return update ? c->updates_ours && c->pk >= 0 : c->inserts_ours;
}

/* Is every index one whose entries orch_task_entries_insert makes? */
bool
orch_task_cache_entries_ok(const OrchTaskCache *c)
{
	return c->btree_only;
}

/* The primary key's index, and the column its first key is (0: none) */
Oid
orch_task_cache_pk(const OrchTaskCache *c, AttrNumber *first)
{
	*first = c->pk >= 0 ? c->index_infos[c->pk]->ii_IndexAttrNumbers[0] : InvalidAttrNumber;
	return c->pk >= 0 ? c->index_oids[c->pk] : InvalidOid;
}

/*
 * The index a claim of a queue reads its claimable rows from, in claim
 * order (tenant: a tenant's own range, for a tenant not the default one),
 * InvalidOid when the table has none such; *hashed: whether it leads with
 * the queue's hash (ORCH_QUEUE_KEY, in the default collation).
 */
Oid
orch_task_cache_claim_index(const OrchTaskCache *c, bool tenant, bool *hashed)
{
	int			i = c->claim[tenant];

	/* a claim index's one expression is the queue's hash (claim_index_fits) */
	*hashed = i >= 0 && c->index_infos[i]->ii_Expressions != NIL;
	return i >= 0 ? c->index_oids[i] : InvalidOid;
}

/* Column a's (0-based) default, compiled (NULL: none), and whether it is volatile */
ExprState *
orch_task_cache_default(const OrchTaskCache *c, int a, bool *is_volatile)
{
	*is_volatile = c->default_volatile[a];
	return c->defaults[a];
}

/* The index entries of row versions of rel, begun (estate: the caller's) */
OrchTaskEntries *
orch_task_entries_begin(OrchTaskCache *c, Relation rel, EState *estate)
{
	OrchTaskEntries *e = palloc(sizeof(OrchTaskEntries));

	e->cache = c;
	e->rel = rel;
	e->estate = estate;
	e->open = palloc0(sizeof(Relation) * Max(c->nindexes, 1));
	return e;
}

/* Is the key of index ii the same in both row versions (a hint for btree)? */
static bool
key_unchanged(IndexInfo *ii, TupleDesc desc, const Datum *ov, const bool *on, TupleTableSlot *slot)
{
	for (int k = 0; k < ii->ii_NumIndexKeyAttrs; k++)
	{
		int			a = ii->ii_IndexAttrNumbers[k] - 1;
		Form_pg_attribute att;

		if (a < 0)
			return false;		/* an expression */
		att = TupleDescAttr(desc, a);
		if (on[a] != slot->tts_isnull[a] ||
			(!on[a] && !datum_image_eq(ov[a], slot->tts_values[a], att->attbyval, att->attlen)))
			return false;
	}
	return true;
}

/*
 * The index entries of the row version in slot (its tid set; every
 * column's value in tts_values), as the executor makes them after an
 * insert (ov NULL) or an update that is not HOT (ov, on: the row before).
 */
void
orch_task_entries_insert(OrchTaskEntries *e, TupleTableSlot *slot, const Datum *ov, const bool *on)
{
	OrchTaskCache *c = e->cache;
	TupleDesc	desc = RelationGetDescr(e->rel);
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];

	c->econtext->ecxt_scantuple = slot;
	GetPerTupleExprContext(e->estate)->ecxt_scantuple = slot;
	for (int i = 0; i < c->nindexes; i++)
	{
		IndexInfo  *ii = c->index_infos[i];
		bool		wanted = true;

		if (!ii->ii_ReadyForInserts)
			continue;
		if (c->index_preds[i] != NULL)
		{
			wanted = ExecQual(c->index_preds[i], c->econtext);
			ResetExprContext(c->econtext);
		}
		if (!wanted)
			continue;
		if (e->open[i] == NULL)
			e->open[i] = index_open(c->index_oids[i], RowExclusiveLock);
		FormIndexDatum(ii, slot, e->estate, values, isnull);
		(void) index_insert(e->open[i], values, isnull, &slot->tts_tid, e->rel,
							c->index_unique[i] ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO,
							ov != NULL && key_unchanged(ii, desc, ov, on, slot), ii);
	}
}

/* The indexes opened closed (their locks kept until the transaction ends) */
void
orch_task_entries_end(OrchTaskEntries *e)
{
	for (int i = 0; i < e->cache->nindexes; i++)
		if (e->open[i] != NULL)
			index_close(e->open[i], NoLock);
	pfree(e->open);
	pfree(e);
}
