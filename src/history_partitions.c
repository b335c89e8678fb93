/*
 * history_partitions.c
 *	  The history tables (orch.events, orch.attempts) are partitioned by time
 *	  (range on at / finished_at), the workflow tables (orch.runs,
 *	  orch.run_steps, orch.approvals, orch.signals) by run id (range on id / run_id); each
 *	  has a DEFAULT partition too.  orch_maintain creates the partitions
 *	  ahead (of now; of the run ids allocated, as many ids each as runs
 *	  started in a partition width of time lately) and retires them whole
 *	  once past orchestrator.retention: a partition none of whose rows is
 *	  still needed is dropped; one that still holds rows that are kept (the
 *	  history of tasks or runs that are kept; runs open or finished within
 *	  the retention, with their steps and approvals) is compacted, its kept
 *	  rows copied aside, the partition truncated and the rows put back.  No
 *	  row is ever deleted one by one, but for the narrow rows that keep a
 *	  run's idempotency key and its approval references unique across
 *	  partitions (orch.run_keys, orch.approval_refs), which leave with it.
 *
 *	  A partition is created as a table of its own and then attached, which
 *	  locks the parent only against other DDL, never against the inserts of
 *	  the hot path.  Retiring locks the old partition only; the emptied
 *	  partitions are dropped last, all at once under one exclusive lock of
 *	  the parent (which a drop needs) held until the pass commits.  Every
 *	  lock is tried for 200 ms and the step left for the next pass when it
 *	  stays busy; the pass never waits in a lock queue (lock_now tries again
 *	  while the lock is busy): no writer queues behind its requests, and a
 *	  writer waiting for what it holds never closes a deadlock with it.  A
 *	  range already empty is left unlocked until its drop.
 *	  docs/storage.md.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "partitioning/partdesc.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

/* orchestrator.history_partition: seconds per partition, 0 derives it */
int			orch_history_partition = 0;

/* partitions kept ready ahead of now */
#define PARTITIONS_AHEAD 4
/* how long a step tries for a lock before it is left for later (ms) */
#define LOCK_TRY_MS 200
#define RETIRE_LOCK_TIMEOUT CppAsString2(LOCK_TRY_MS) "ms"

/* partitions of run ids kept ready ahead of the ids allocated */
#define RUN_PARTITIONS_AHEAD 2
/* the fewest run ids a partition covers */
#define RUN_PARTITION_MIN_IDS 1000
/* ids left between those allocated and a new partition after a gap */
#define RUN_PARTITION_MARGIN 100

/* A row of orch.run_steps or orch.approvals is needed while its run is kept */
#define RUN_KEPT \
	"EXISTS (SELECT 1 FROM orch.runs r WHERE r.id = h.run_id AND r.tenant_id = h.tenant_id)"
/* A partition of them is looked at once its newest run started before the cutoff */
#define RUN_READY \
	"SELECT coalesce((SELECT r.created_at < %1$s FROM orch.runs r" \
	"   WHERE r.id = (SELECT max(h.run_id) FROM %2$s h) LIMIT 1), true)"

/*
 * A partitioned table: its partition key (by_id: a run id, else a time);
 * which of its rows are still needed ("h" is the row, %1$s the retention's
 * cutoff as a literal): the history of a task that still exists (live, or
 * finished but not yet purged), of a run that still exists, a run open or
 * finished within the retention, the steps and approvals of a run that
 * still exists (events of user tables' state machines are needed for the
 * retention only); for a range of run ids, when to look at it at all (%1$s
 * the cutoff, %2$s the partition); and the narrow rows that keep something
 * unique across partitions and leave with the rows retired (%1$s the
 * partition, %2$s the rows kept).  Runs come first: their steps, approvals
 * and events are needed for as long as they are kept.
 */
typedef struct HistoryTable
{
	const char *table;
	const char *key;
	bool		by_id;
	const char *kept;
	const char *ready;
	const char *unique_rows;
	bool		triggers;		/* has row triggers (orch.runs: the run lifecycle) */
} HistoryTable;

static const HistoryTable history_tables[] = {
	{"runs", "id", true,
		"(h.finished_at IS NULL OR h.finished_at >= %1$s)",
		"SELECT coalesce((SELECT h.created_at < %1$s FROM %2$s h ORDER BY h.id DESC LIMIT 1), true)",
		"DELETE FROM orch.run_keys k USING %1$s h WHERE h.idempotency_key IS NOT NULL"
		"   AND k.tenant_id = h.tenant_id AND k.idempotency_key = h.idempotency_key AND k.run_id = h.id"
		"   AND NOT %2$s", true},
	{"run_steps", "run_id", true, RUN_KEPT, RUN_READY, NULL, false},
	{"approvals", "run_id", true, RUN_KEPT, RUN_READY,
		"DELETE FROM orch.approval_refs f USING %1$s h"
		"   WHERE f.approval_ref = h.approval_ref AND f.tenant_id = h.tenant_id AND f.run_id = h.run_id"
		"   AND NOT %2$s", false},
	{"signals", "run_id", true, RUN_KEPT, RUN_READY, NULL, false},
	{"events", "at", false,
		"((h.task_id IS NOT NULL AND EXISTS (SELECT 1 FROM orch.tasks t"
		"    WHERE t.id = h.task_id AND t.tenant_id = h.tenant_id))"
		" OR (h.task_id IS NULL AND h.run_id IS NOT NULL AND EXISTS (SELECT 1 FROM orch.runs r"
		"    WHERE r.id = h.run_id AND r.tenant_id = h.tenant_id)))",
		NULL, NULL, false},
	{"attempts", "finished_at", false,
		"(EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = h.task_id AND t.tenant_id = h.tenant_id))",
		NULL, NULL, false},
};

/* Bounds: times, or run ids; PG_INT64_MIN / MAX (DT_NOBEGIN / DT_NOEND) are MINVALUE / MAXVALUE */
typedef struct Partition
{
	char	   *name;			/* schema-qualified, quoted */
	bool		is_default;
	int64		lo;
	int64		hi;
} Partition;

/* Is this schema's history partitioned (0.8.0 on)? */
bool
orch_history_partitioned(void)
{
	Oid			relid = orch_relid("events");

	return OidIsValid(relid) && get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE;
}

/* Are this schema's runs, steps and approvals partitioned (0.8.0 on, after the update's first step)? */
bool
orch_runs_partitioned(void)
{
	Oid			relid = orch_relid("runs");

	return OidIsValid(relid) && get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE;
}

/* The width of a new partition: the setting, else a quarter of the retention in [1 min, 1 day]. */
static int64
partition_width(void)
{
	int64		secs = orch_history_partition;

	if (secs <= 0)
	{
		secs = orch_retention > 0 ? orch_retention / 4 : SECS_PER_DAY;
		secs = Max(SECS_PER_MINUTE, Min(SECS_PER_DAY, secs));
	}
	return secs * USECS_PER_SEC;
}

static int64
bound_value(PartitionRangeDatum *d)
{
	if (d->kind == PARTITION_RANGE_DATUM_MINVALUE)
		return PG_INT64_MIN;
	if (d->kind == PARTITION_RANGE_DATUM_MAXVALUE)
		return PG_INT64_MAX;
	/* (a timestamptz and a bigint are both an int64 datum) */
	return DatumGetInt64(castNode(Const, d->value)->constvalue);
}

/* The partitions of orch.<table>, with their bounds, from the catalog. */
static int
read_partitions(const char *table, Partition **out)
{
	Relation	rel = table_open(orch_relid(table), AccessShareLock);
	PartitionDesc pd = RelationGetPartitionDesc(rel, true);
	Partition  *p = palloc0(sizeof(Partition) * Max(pd->nparts, 1));
	int			n = pd->nparts;

	for (int i = 0; i < n; i++)
	{
		HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(pd->oids[i]));
		Datum		d;
		bool		isnull;
		PartitionBoundSpec *spec;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "orchestrator: cache lookup failed for relation %u", pd->oids[i]);
		p[i].name = quote_qualified_identifier(get_namespace_name(((Form_pg_class) GETSTRUCT(tup))->relnamespace),
											   NameStr(((Form_pg_class) GETSTRUCT(tup))->relname));
		d = SysCacheGetAttr(RELOID, tup, Anum_pg_class_relpartbound, &isnull);
		if (isnull)
			elog(ERROR, "orchestrator: partition %s has no bound", p[i].name);
		spec = castNode(PartitionBoundSpec, stringToNode(TextDatumGetCString(d)));
		ReleaseSysCache(tup);
		p[i].is_default = spec->is_default;
		if (!spec->is_default)
		{
			p[i].lo = bound_value(linitial_node(PartitionRangeDatum, spec->lowerdatums));
			p[i].hi = bound_value(linitial_node(PartitionRangeDatum, spec->upperdatums));
		}
	}
	table_close(rel, NoLock);
	*out = p;
	return n;
}

/* t broken down in UTC */
static void
utc_parts(TimestampTz t, struct pg_tm *tm, fsec_t *fsec)
{
	if (timestamp2tm(t, NULL, tm, fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
}

/* A time as an SQL literal, in UTC (whatever the session's TimeZone and DateStyle). */
static char *
time_literal(TimestampTz t)
{
	struct pg_tm tm;
	fsec_t		fsec;

	utc_parts(t, &tm, &fsec);
	return psprintf("'%04d-%02d-%02d %02d:%02d:%02d.%06d+00'",
					tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
					(int) fsec);
}

/* A bound of h as an SQL literal */
static char *
bound_literal(const HistoryTable *h, int64 v)
{
	return h->by_id ? psprintf(INT64_FORMAT, v) : time_literal(v);
}

/* orch.<table>_pYYYYMMDD_HHMMSS (its start, in UTC), orch.<table>_p<first id> */
static char *
partition_name(const HistoryTable *h, int64 lo)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (h->by_id)
		return psprintf("%s_p" INT64_FORMAT, h->table, lo);
	utc_parts(lo, &tm, &fsec);
	return psprintf("%s_p%04d%02d%02d_%02d%02d%02d", h->table,
					tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* One value of a one-row query (caller connected to SPI); isnull when none. */
static Datum
query_value(const char *sql, bool *isnull)
{
	if (orch_sql_once(sql, 0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT) == 0)
	{
		*isnull = true;
		return (Datum) 0;
	}
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
}

/*
 * What the parent has that a new partition must have too: no statistics on
 * the columns holding a tenant's own values, row-level security with the
 * tenant policy (for a role a DBA grants the partition to).
 */
static void
copy_parent_settings(const char *table, const char *part)
{
	OrchArgs	a = {0};
	uint64		n;
	char	  **cols;

	orch_arg_text(&a, table);
	n = orch_args_sql_once(&a, "SELECT a.attname::text FROM pg_catalog.pg_attribute a"
						   " WHERE a.attrelid = pg_catalog.format('orch.%I', $1)::regclass"
						   "   AND a.attnum > 0 AND NOT a.attisdropped AND a.attstattarget = 0",
						   true, 0, SPI_OK_SELECT);
	cols = orch_spi_column(1);
	for (uint64 i = 0; i < n; i++)
		orch_sql_command(psprintf("ALTER TABLE orch.%s ALTER COLUMN %s SET STATISTICS 0",
								  quote_identifier(part), quote_identifier(cols[i])));
	if (orch_citus())
		return;					/* Citus keeps its shards' policies itself */
	orch_sql_command(psprintf("ALTER TABLE orch.%s ENABLE ROW LEVEL SECURITY", quote_identifier(part)));
	orch_sql_command(psprintf("CREATE POLICY tenant_isolation ON orch.%s USING (orch.tenant_visible(tenant_id))"
							  " WITH CHECK (orch.tenant_visible(tenant_id))", quote_identifier(part)));
}

/*
 * Create the partition [lo, hi) of orch.<table>: a table of its own first,
 * with the keys, indexes, checks and storage settings of the DEFAULT
 * partition (the parent has no indexes: a dump restores a partition with
 * its own indexes, as any table) and its bound already a CHECK constraint,
 * then attached.  The attach locks the parent only against DDL (SHARE
 * UPDATE EXCLUSIVE), need not scan the new table, and gives it the
 * parent's row triggers (orch.runs: the run lifecycle).
 */
static void
create_partition(const HistoryTable *h, int64 lo, int64 hi)
{
	char	   *name = partition_name(h, lo);
	const char *qname = quote_identifier(name);
	char	   *from = bound_literal(h, lo);
	char	   *to = bound_literal(h, hi);
	bool		isnull;
	Datum		options;

	options = query_value(psprintf("SELECT pg_catalog.array_to_string(c.reloptions, ', ') FROM pg_catalog.pg_class c"
								   " WHERE c.oid = 'orch.%s_default'::regclass", h->table), &isnull);
	orch_sql_command(psprintf("CREATE TABLE orch.%s (LIKE orch.%s_default INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
							  " INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMPRESSION)%s%s%s", qname, h->table,
							  isnull ? "" : " WITH (", isnull ? "" : TextDatumGetCString(options), isnull ? "" : ")"));
	/* (before the attach: Citus distributes the table then, with these) */
	copy_parent_settings(h->table, name);
	orch_sql_command(psprintf("ALTER TABLE orch.%s ADD CONSTRAINT orch_bound CHECK (%s >= %s AND %s < %s)",
							  qname, h->key, from, h->key, to));
	orch_sql_command(psprintf("ALTER TABLE orch.%s ATTACH PARTITION orch.%s FOR VALUES FROM (%s) TO (%s)",
							  h->table, qname, from, to));
	orch_sql_command(psprintf("ALTER TABLE orch.%s DROP CONSTRAINT orch_bound", qname));
}

/* What one partition step did */
typedef enum
{
	STEP_NONE, STEP_CREATED, STEP_EMPTIED, STEP_COMPACTED, STEP_DROPPED
} StepResult;

typedef StepResult (*StepFn) (const HistoryTable *h, const Partition *p, int64 a, int64 b);

/*
 * Run one step in a subtransaction with a short lock_timeout: a lock it
 * cannot get soon (a long reader of the history) leaves the step for the
 * next pass, and any failure is reported as a WARNING without stopping the
 * pass.  Returns STEP_NONE then.  Caller is connected to SPI.
 */
typedef struct GuardedStep
{
	StepFn		fn;
	const HistoryTable *h;
	const Partition *p;
	int64		a,
				b;
	StepResult	result;
} GuardedStep;

static void
run_step(void *arg)
{
	GuardedStep *g = (GuardedStep *) arg;

	g->result = g->fn(g->h, g->p, g->a, g->b);
}

static StepResult
guarded_step(StepFn fn, const HistoryTable *h, const Partition *p, int64 a, int64 b,
			 const char *what)
{
	GuardedStep g = {fn, h, p, a, b, STEP_NONE};
	ErrorData  *e = orch_subxact_try_waiting(run_step, &g, RETIRE_LOCK_TIMEOUT);

	if (e == NULL)
		return g.result;
	ereport(e->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ? LOG : WARNING,
			(errmsg("orchestrator: %s %s was left for the next pass: %s",
					what, p ? p->name : psprintf("orch.%s", h->table), e->message)));
	FreeErrorData(e);
	return STEP_NONE;
}

/*
 * Take lockmode on the table named (schema-qualified, as quoted) for the
 * rest of the pass, without ever queueing for it: tried again every
 * millisecond while it is busy, for up to LOCK_TRY_MS, then the
 * step fails as a lock_timeout does (it is left for the next pass).  A
 * pass holds what its earlier steps locked (and the rows the rest of
 * orch_maintain wrote) until it commits, and a writer may be waiting for
 * those: a pass queued for a lock such a writer holds would close a cycle
 * that the writer's deadlock check finds, failing the writer's
 * transaction.  A pass that never queues is never in such a cycle.  (On
 * Citus, the LOCK statement, which Citus passes on to the shards, queued
 * for up to the step's lock_timeout.)
 */
static void
lock_now(const char *qualified, LOCKMODE lockmode, const char *mode)
{
	Oid			relid;
	TimestampTz give_up;

	if (orch_citus())
	{
		if (mode != NULL)
			orch_sql_command(psprintf("LOCK TABLE %s IN %s MODE", qualified, mode));
		return;
	}
	relid = RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(qualified)), NoLock, true);
	if (!OidIsValid(relid))
		return;					/* (the statement that follows reports it) */
	give_up = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LOCK_TRY_MS);
	while (!ConditionalLockRelationOid(relid, lockmode))
	{
		if (GetCurrentTimestamp() >= give_up)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not obtain lock on relation %s", qualified)));
		CHECK_FOR_INTERRUPTS();
		pg_usleep(1000L);
	}
}

/* Has partition p no row (as far as this snapshot sees)? */
static bool
partition_empty(const Partition *p)
{
	return orch_sql_once(psprintf("SELECT 1 FROM %s LIMIT 1", p->name),
						 0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT) == 0;
}

static StepResult
step_create(const HistoryTable *h, const Partition *p, int64 lo, int64 hi)
{
	/* the attach's locks (the parent's against DDL, the DEFAULT partition's) */
	lock_now(psprintf("orch.%s", h->table), ShareUpdateExclusiveLock, NULL);
	lock_now(psprintf("orch.%s_default", h->table), AccessExclusiveLock, NULL);
	create_partition(h, lo, hi);
	return STEP_CREATED;
}

/* The rows the last successful retire step removed */
static int64 step_removed;

/*
 * Retire partition p of h (a range past the retention, or the DEFAULT
 * partition), locking the partition only, never its parent.  Writers are
 * held off first (SHARE), so that no row lands in it between the count and
 * the truncate: a recorded claim written out later keeps its old time.  A
 * range none of whose rows is needed is emptied (TRUNCATE), and dropped at
 * the end of the pass; one with needed rows is compacted when at least half
 * of it is not needed (the DEFAULT partition, meant to stay small, and a
 * range of run ids still receiving new runs, which is never dropped,
 * whenever a row is not; the latter only once no run started in it within
 * the retention).  The rows that keep a retired run's key and approval
 * references unique go first.  A run put back is loaded as it was: no
 * lifecycle check, no event (its partition's row triggers are off for the
 * moment, which Citus applies to the shards too).
 */
static StepResult
step_retire(const HistoryTable *h, const Partition *p, int64 cutoff, int64 receiving)
{
	char	   *lit = time_literal(cutoff);
	char	   *kept = psprintf(h->kept, lit);
	char	   *keep;
	int64		total,
				nkept;
	bool		isnull;

	/* a sub-workflow is kept while its parent is open: the parent reads its output */
	if (strcmp(h->table, "runs") == 0 && orch_schema_subflows() && !orch_citus())
		kept = psprintf("(%s OR (h.parent_run_id IS NOT NULL AND EXISTS (SELECT 1 FROM orch.runs p"
						" WHERE p.id = h.parent_run_id AND p.tenant_id = h.tenant_id AND p.finished_at IS NULL)))",
						kept);

	/* the DEFAULT partition: nothing to do unless a row in it is past the retention */
	if (p->is_default &&
		orch_sql_once(h->by_id
					  ? psprintf("SELECT 1 FROM %s h WHERE NOT %s LIMIT 1", p->name, kept)
					  : psprintf("SELECT 1 FROM %s h WHERE h.%s < %s LIMIT 1", p->name, h->key, lit),
					  0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT) == 0)
		return STEP_NONE;
	/* a range of run ids: not before its newest run started before the cutoff */
	if (!p->is_default && h->ready != NULL &&
		!DatumGetBool(query_value(psprintf(h->ready, lit, p->name), &isnull)))
		return STEP_NONE;
	/* a range already empty: left for the drop (which checks it again), unlocked */
	if (!p->is_default && partition_empty(p))
		return receiving ? STEP_NONE : STEP_EMPTIED;
	lock_now(p->name, ShareLock, "SHARE");
	keep = p->is_default && !h->by_id
		? psprintf("(%s OR h.%s >= %s)", kept, h->key, lit)
		: kept;
	/* (not read-only: it must see the tasks and runs this pass retired) */
	orch_sql_once(psprintf("SELECT count(*), count(*) FILTER (WHERE %s) FROM %s h", keep, p->name),
				  0, NULL, NULL, NULL, false, 0, SPI_OK_SELECT);
	total = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	nkept = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	step_removed = total - nkept;
	if (total == 0)
		return p->is_default || receiving ? STEP_NONE : STEP_EMPTIED;
	if (nkept == total || (!p->is_default && !receiving && nkept > 0 && nkept * 2 >= total))
		return STEP_NONE;		/* nothing (or not enough) past the retention yet */
	if (h->unique_rows != NULL)
		orch_sql_command(psprintf(h->unique_rows, p->name, keep));
	/* the truncate's lock */
	lock_now(p->name, AccessExclusiveLock, NULL);
	if (nkept == 0)
	{
		orch_sql_command(psprintf("TRUNCATE %s", p->name));
		return p->is_default || receiving ? STEP_COMPACTED : STEP_EMPTIED;
	}
	/* the kept rows aside, the partition emptied whole, the rows back */
	orch_sql_command(psprintf("CREATE TEMP TABLE orch_history_kept ON COMMIT DROP AS SELECT * FROM %s h WHERE %s",
							  p->name, keep));
	orch_sql_command(psprintf("TRUNCATE %s", p->name));
	/* (Citus: needed to change a trigger; saved, so that the step's end restores it) */
	if (h->triggers && orch_citus())
		(void) set_config_option("citus.enable_unsafe_triggers", "on",
								 superuser() ? PGC_SUSET : PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	if (h->triggers)
		orch_sql_command(psprintf("ALTER TABLE %s DISABLE TRIGGER USER", p->name));
	orch_sql_command(psprintf("INSERT INTO %s SELECT * FROM pg_temp.orch_history_kept", p->name));
	if (h->triggers)
		orch_sql_command(psprintf("ALTER TABLE %s ENABLE TRIGGER USER", p->name));
	orch_sql_command("DROP TABLE pg_temp.orch_history_kept");
	return STEP_COMPACTED;
}

/*
 * Drop the emptied partitions of h (a, b unused; p: the first of n in the
 * array the caller passes through the step's Partition pointer).  The
 * parent is locked first (ACCESS EXCLUSIVE, as DROP needs it; the order the
 * writers take), each partition checked still empty under it, and dropped.
 */
static const Partition *drop_list;
static int	drop_count;
static const char *drop_table;

static void
drop_one(void *arg)
{
	const Partition *p = (const Partition *) arg;

	/* the drop's locks: the partition's, then (for its check) the DEFAULT partition's */
	lock_now(p->name, AccessExclusiveLock, NULL);
	lock_now(psprintf("orch.%s_default", drop_table), AccessExclusiveLock, NULL);
	if (!partition_empty(p))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("written to since it was emptied")));
	orch_sql_command(psprintf("DROP TABLE %s", p->name));
}

static StepResult
step_drop(const HistoryTable *h, const Partition *p, int64 a, int64 b)
{
	int			n = 0;

	lock_now(psprintf("orch.%s", h->table), AccessExclusiveLock, "ACCESS EXCLUSIVE");
	drop_table = h->table;
	/* each on its own: one that cannot go (an object of the user's on it) stops no other */
	for (int i = 0; i < drop_count; i++)
	{
		ErrorData  *e = orch_subxact_try(drop_one, (void *) &drop_list[i]);

		if (e == NULL)
		{
			n++;
			continue;
		}
		ereport(e->sqlerrcode == ERRCODE_OBJECT_IN_USE || e->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ? LOG : WARNING,
				(errmsg("orchestrator: dropping %s was left for the next pass: %s",
						drop_list[i].name, e->message)));
		FreeErrorData(e);
	}
	drop_count = n;
	return n > 0 ? STEP_DROPPED : STEP_NONE;
}

/* The run ids allocated so far (0: none) */
static int64
run_ids_allocated(void)
{
	bool		isnull;
	Datum		v = query_value("SELECT pg_catalog.pg_sequence_last_value('orch.runs_id_seq'::pg_catalog.regclass)",
								&isnull);

	return isnull ? 0 : DatumGetInt64(v);
}

/*
 * How many run ids a new partition covers: as many as runs started in one
 * partition width of time lately, measured from the first run of the range
 * that holds the newest ids (or of the last thousand ids) to the newest id,
 * at least RUN_PARTITION_MIN_IDS.
 */
static int64
run_partition_ids(const Partition *parts, int n, int64 allocated, TimestampTz now, int64 width)
{
	int64		from = Max(allocated - RUN_PARTITION_MIN_IDS, 0);
	int64		first;
	TimestampTz started;
	double		ids;

	for (int i = 0; i < n; i++)
		if (!parts[i].is_default && parts[i].lo <= allocated && allocated < parts[i].hi &&
			parts[i].lo > PG_INT64_MIN)
			from = parts[i].lo;
	if (orch_sql_once(psprintf("SELECT h.id, h.created_at FROM orch.runs h WHERE h.id >= " INT64_FORMAT
							   " AND h.id <= " INT64_FORMAT " ORDER BY h.id LIMIT 1", from, allocated),
					  0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT) == 0)
		return RUN_PARTITION_MIN_IDS;
	{
		bool		isnull;

		first = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		started = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	}
	if (now - started < USECS_PER_SEC)
		return RUN_PARTITION_MIN_IDS;
	ids = (double) (allocated - first) * (double) width / (double) (now - started);
	if (ids >= (double) (INT64CONST(1) << 40))
		return INT64CONST(1) << 40;
	return Max((int64) ids, RUN_PARTITION_MIN_IDS);
}

/*
 * Create the partitions of h ahead: of now by time, of the ids allocated by
 * run id.  Goes on from the last partition; after a gap (no partitions yet,
 * or maintenance stopped for long) from the next window: the current one
 * may already have rows in the DEFAULT partition.
 */
static int64
create_ahead(const HistoryTable *h, const Partition *parts, int n, TimestampTz now, int64 width,
			 int64 allocated, int64 ids)
{
	int64		last = PG_INT64_MIN;
	int64		start,
				until;
	int64		created = 0;

	for (int i = 0; i < n; i++)
		if (!parts[i].is_default && parts[i].hi != PG_INT64_MAX && parts[i].hi > last)
			last = parts[i].hi;
	if (h->by_id)
	{
		/*
		 * On from the last range, but above the ids allocated with a
		 * margin: the runs started since the read (or, after a gap, since
		 * the ranges ran out) are in the DEFAULT partition, which a new
		 * range must not cover (the attach would fail).
		 */
		start = Max(last, allocated + 1 + (allocated > 0 ? Max(RUN_PARTITION_MARGIN, ids / 4) : 0));
		until = allocated + RUN_PARTITIONS_AHEAD * ids;
	}
	else
	{
		start = last > now ? last : (now / width + 1) * width;
		until = now + PARTITIONS_AHEAD * width;
	}
	while (start < until)
	{
		int64		end = h->by_id ? start + ids : (start / width + 1) * width;

		if (guarded_step(step_create, h, NULL, start, end, "creating a partition of") != STEP_CREATED)
			break;
		created++;
		start = end;
	}
	return created;
}

/*
 * One pass over the partitioned tables: with a retention, the partitions
 * past it retired (emptied or compacted, each locking only itself; a range
 * of run ids once every id in it is allocated); then the partitions ahead
 * created; last, the emptied ones dropped, for each table at once under one
 * short lock of its parent, held until the pass commits.  Counts go to
 * created, dropped and compacted, the runs retired to runs_retired.  Caller
 * is connected to SPI.
 */
void
orch_history_partitions_maintain(int64 *created, int64 *dropped, int64 *compacted, int64 *runs_retired)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz cutoff = now - (int64) orch_retention * USECS_PER_SEC;
	int64		w = partition_width();
	int64		allocated;
	int64		ids = RUN_PARTITION_MIN_IDS;
	Partition  *parts[lengthof(history_tables)];
	int			nparts[lengthof(history_tables)];
	Partition  *empty[lengthof(history_tables)];
	int			nempty[lengthof(history_tables)];

	*created = *dropped = *compacted = *runs_retired = 0;
	if (!orch_history_partitioned())
		return;
	/* one pass at a time keeps the partitions; another pass skips them */
	if (!orch_xact_try_lock("history_partitions", "", NULL))
		return;
	allocated = run_ids_allocated();

	for (int t = 0; t < lengthof(history_tables); t++)
	{
		const HistoryTable *h = &history_tables[t];

		nparts[t] = 0;
		empty[t] = NULL;
		nempty[t] = 0;
		if (h->by_id && !orch_runs_partitioned())
			continue;
		/* signals: from 0.8.0 on, never distributed (orch_signal is refused on Citus) */
		if (strcmp(h->table, "signals") == 0 && (!orch_schema_signals() || orch_citus()))
			continue;
		nparts[t] = read_partitions(h->table, &parts[t]);
		empty[t] = palloc(sizeof(Partition) * Max(nparts[t], 1));
		if (orch_retention <= 0)
			continue;
		for (int i = 0; i < nparts[t]; i++)
		{
			Partition  *p = &parts[t][i];
			StepResult	r;

			bool		receiving;

			if (!p->is_default &&
				(h->by_id ? p->lo > allocated : p->hi == PG_INT64_MAX || p->hi > cutoff))
				continue;
			/* a range of run ids not all allocated yet is compacted, never dropped */
			receiving = !p->is_default && h->by_id && (p->hi == PG_INT64_MAX || p->hi > allocated + 1);
			step_removed = 0;
			r = guarded_step(step_retire, h, p, cutoff, receiving, "retiring");
			if (r == STEP_EMPTIED)
				empty[t][nempty[t]++] = *p;
			else if (r == STEP_COMPACTED)
				(*compacted)++;
			if ((r == STEP_EMPTIED || r == STEP_COMPACTED) && strcmp(h->table, "runs") == 0)
				*runs_retired += step_removed;
		}
	}

	for (int t = 0; t < lengthof(history_tables); t++)
	{
		const HistoryTable *h = &history_tables[t];

		if (empty[t] == NULL)
			continue;
		if (h->by_id && t == 0)
		{
			/* (read again: runs started during the retirement) */
			allocated = run_ids_allocated();
			ids = run_partition_ids(parts[t], nparts[t], allocated, now, w);
		}
		*created += create_ahead(h, parts[t], nparts[t], now, w, allocated, ids);
	}

	for (int t = 0; t < lengthof(history_tables); t++)
	{
		if (nempty[t] == 0)
			continue;
		drop_list = empty[t];
		drop_count = nempty[t];
		if (guarded_step(step_drop, &history_tables[t], NULL, 0, 0, "dropping the emptied partitions of") == STEP_DROPPED)
			*dropped += drop_count;
		drop_list = NULL;
	}
}
