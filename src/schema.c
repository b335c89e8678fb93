/*
 * schema.c
 *	  The schema this library serves, and the relations in it.
 *
 *	  The library runs against the schema of its own version and of the one
 *	  before, so that a database keeps working between installing a new
 *	  library and ALTER EXTENSION orchestrator UPDATE.  Against anything
 *	  older (or newer) every call raises 55000 with the hint to update.  The
 *	  installed version is read once per transaction, here only.  While
 *	  CREATE or ALTER EXTENSION runs this extension's own scripts nothing is
 *	  checked: a script's statement may fire the task triggers half-way
 *	  through an update.
 *
 *	  The version found is kept across transactions until a relcache
 *	  invalidation of orch.tasks (or of every relation) arrives: dropping the
 *	  extension drops the table, and every upgrade script ends by altering
 *	  it (see the end of each sql/orchestrator--A--B.sql), so a backend
 *	  reads pg_extension again at its next transaction after either
 *	  committed.  A per-call catalog scan was about 5% of a single enqueue.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "orchestrator.h"

/* Versions as major * 10000 + minor * 100 + patch. */
#define ORCH_SCHEMA_OLDEST	700		/* 0.7.0 */
#define ORCH_SCHEMA_NEWEST	800		/* 0.8.0 */

static LocalTransactionId checked_lxid = InvalidLocalTransactionId;
static int	checked_version = 0;

/* Across transactions: checked_version holds while kept_valid. */
static bool kept_valid = false;
static bool kept_callback = false;
static Oid	kept_tasks = InvalidOid;
#define KEPT_FORGETS_MAX 4
static void (*kept_forgets[KEPT_FORGETS_MAX]) (void);	/* told when it is reset */
static int	kept_nforgets = 0;

static uint64 kept_generation = 0;	/* bumped by every reset */

/*
 * The library's caches told of every relcache invalidation through this
 * file's one callback: PostgreSQL has ten such callbacks per backend for
 * every library loaded together (Citus takes several).
 */
#define RELCACHE_LISTENERS_MAX 4
static void (*relcache_listeners[RELCACHE_LISTENERS_MAX]) (Datum arg, Oid relid);
static int	relcache_nlisteners = 0;

/*
 * Forget what is kept.  While nothing is kept against a relation (kept_tasks
 * unset), every invalidation forgets: orch_citus() may have kept its answer
 * before orch.tasks was looked up.
 */
static void
kept_invalidate(Datum arg, Oid relid)
{
	for (int i = 0; i < relcache_nlisteners; i++)
		relcache_listeners[i] ((Datum) 0, relid);
	if (relid != InvalidOid && OidIsValid(kept_tasks) && relid != kept_tasks)
		return;
	kept_valid = false;
	kept_tasks = InvalidOid;
	kept_generation++;
	for (int i = 0; i < kept_nforgets; i++)
		kept_forgets[i] ();
}

/* The library's one relcache callback, registered once per backend */
static void
kept_register(void)
{
	if (kept_callback)
		return;
	CacheRegisterRelcacheCallback(kept_invalidate, (Datum) 0);
	kept_callback = true;
}

/*
 * Call fn whenever what is kept across transactions about the schema is
 * forgotten (orch.tasks altered, dropped or distributed; every relation's
 * cache reset).  Registered once per backend by each caller.
 */
void
orch_schema_on_reset(void (*fn) (void))
{
	if (kept_nforgets >= KEPT_FORGETS_MAX)
		elog(ERROR, "orchestrator: too many schema reset callbacks");
	kept_forgets[kept_nforgets++] = fn;
	kept_register();
}

/*
 * Call fn (as a relcache callback: fn(0, relid)) on every relcache
 * invalidation.  Registered once per backend by each caller.
 */
void
orch_schema_on_relcache(void (*fn) (Datum arg, Oid relid))
{
	if (relcache_nlisteners >= RELCACHE_LISTENERS_MAX)
		elog(ERROR, "orchestrator: too many relcache listeners");
	relcache_listeners[relcache_nlisteners++] = fn;
	kept_register();
}

/* "0.7.0" -> 700; -1 when it is not three numbers. */
static int
parse_version(const char *s)
{
	int			major,
				minor,
				patch;
	char		tail;

	if (sscanf(s, "%d.%d.%d%c", &major, &minor, &patch, &tail) != 3 ||
		major < 0 || minor < 0 || minor > 99 || patch < 0 || patch > 99)
		return -1;
	return major * 10000 + minor * 100 + patch;
}

/* The extversion of the installed extension (palloc'd); NULL when absent. */
static char *
installed_version(Oid extoid)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	char	   *result = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			result = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * The version of the installed schema (as above); raises 55000 when this
 * library does not serve it.  Called at the entry of every path that reads
 * or writes the extension's tables (the SPI layer, the triggers).
 */
int
orch_schema_version(void)
{
	Oid			extoid;
	char	   *version;
	int			v;
	uint64		generation;

	if (checked_lxid == MyProc->lxid && checked_lxid != InvalidLocalTransactionId)
		return checked_version;
	if (kept_valid && !creating_extension)
	{
		checked_lxid = MyProc->lxid;
		return checked_version;
	}
	kept_register();
	generation = kept_generation;
	extoid = get_extension_oid("orchestrator", true);
	if (creating_extension && CurrentExtensionObject == extoid)
		return ORCH_SCHEMA_NEWEST;
	if (!OidIsValid(extoid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"orchestrator\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION orchestrator.")));
	version = installed_version(extoid);
	v = version ? parse_version(version) : -1;
	if (v < ORCH_SCHEMA_OLDEST)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed orchestrator schema (version %s) is older than this library serves",
						version ? version : "?"),
				 errdetail("This library serves schema versions 0.7.0 and 0.8.0."),
				 errhint("Run ALTER EXTENSION orchestrator UPDATE.")));
	if (v > ORCH_SCHEMA_NEWEST)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed orchestrator schema (version %s) is newer than this library",
						version),
				 errdetail("This library serves schema versions 0.7.0 and 0.8.0."),
				 errhint("Install the orchestrator library of version %s and reconnect.", version)));
	checked_version = v;
	checked_lxid = MyProc->lxid;
	if (!creating_extension)
	{
		Oid			tasks = orch_relid("tasks");

		/*
		 * Kept only when no invalidation arrived while it was read (an
		 * update committed meanwhile would otherwise be consumed unseen).
		 */
		if (generation == kept_generation && OidIsValid(tasks))
		{
			kept_tasks = tasks;
			kept_valid = true;
		}
	}
	return v;
}

/*
 * Is the installed schema the previous one (0.7.0), served while ALTER
 * EXTENSION orchestrator UPDATE is pending?  Asked only by the predicates
 * below, one for each thing the previous schema lacks: every caller asks
 * for the thing it needs, and dropping the previous schema's support makes
 * each of them true.
 */
static bool
schema_previous(void)
{
	return orch_schema_version() < ORCH_SCHEMA_NEWEST;
}

/*
 * The history as the task rows record it: a task's enqueue, latest claim
 * and completion are columns of its row (orch.history and
 * orch.attempt_history read them with orch.events and orch.attempts), and
 * the history tables are partitioned by time.
 */
bool
orch_schema_rows_record_history(void)
{
	return !schema_previous();
}

/* Tenant bindings keyed by cluster and role name (orch.tenant_bindings). */
bool
orch_schema_keyed_bindings(void)
{
	return !schema_previous();
}

/* orch.step_claimable, which a claim asks of a step's task. */
bool
orch_schema_step_claimable(void)
{
	return !schema_previous();
}

/* The task of a human_approval step, and orch.approval_refs. */
bool
orch_schema_approval_tasks(void)
{
	return !schema_previous();
}

/* orch.run_keys: idempotency keys of runs in a table of their own. */
bool
orch_schema_run_keys(void)
{
	return !schema_previous();
}

/*
 * On Citus: rows stamped on their node (orch.stamp_on_node), the metrics
 * fold shard by shard, and workflow runs (orch.run_busy_on_shard).
 */
bool
orch_schema_distributed_fold(void)
{
	return !schema_previous();
}

/* The metrics fold bounded per call: orch.metrics_fold(max_rows). */
bool
orch_schema_bounded_fold(void)
{
	return !schema_previous();
}

/* orch.fair_weights and orch.fair_cursors: fair claims (fairness round_robin). */
bool
orch_schema_fair_claims(void)
{
	return !schema_previous();
}

/* orch.signals: signals sent to runs (orch_signal) and the wait steps for them. */
bool
orch_schema_signals(void)
{
	return !schema_previous();
}

/* Cron schedules (orch.schedules) */
bool
orch_schema_schedules(void)
{
	return !schema_previous();
}

/* Sub-workflows: orch.runs.parent_run_id and root_run_id, orch.start_subflow */
bool
orch_schema_subflows(void)
{
	return !schema_previous();
}

/* The schema orch; InvalidOid when there is none. */
Oid
orch_namespace_oid(void)
{
	return get_namespace_oid("orch", true);
}

/* The relation orch.<name>; InvalidOid when there is none. */
Oid
orch_relid(const char *name)
{
	Oid			nsp = orch_namespace_oid();

	return OidIsValid(nsp) ? get_relname_relid(name, nsp) : InvalidOid;
}
