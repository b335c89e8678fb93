/*
 * history_partitions.c
 *	  The history tables (orch.events, orch.attempts) are partitioned by time
 *	  (range on at / finished_at, plus a DEFAULT partition).  orch_maintain
 *	  creates the partitions ahead of time and retires them whole once they
 *	  are past orchestrator.retention: a partition none of whose rows is
 *	  still needed is dropped; one that still holds the history of tasks or
 *	  runs that are kept (live, or finished within the retention) is
 *	  compacted, its kept rows copied aside, the partition truncated and the
 *	  rows put back.  No history row is ever deleted one by one.
 *
 *	  A partition is created as a table of its own and then attached, which
 *	  locks the parent only against other DDL, never against the inserts of
 *	  the hot path.  Retiring locks the old partition only; the emptied
 *	  partitions are dropped last, all at once under one exclusive lock of
 *	  the parent (which a drop needs) held until the pass commits.  Every
 *	  lock is tried with a short lock_timeout and left for the next pass when
 *	  busy, so that maintenance never queues writers behind it for long.
 *	  docs/storage.md.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "partitioning/partdesc.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

/* orchestrator.history_partition: seconds per partition, 0 derives it */
int			orch_history_partition = 0;

/* partitions kept ready ahead of now */
#define PARTITIONS_AHEAD 4
/* how long a drop or truncate waits for its lock before it is left for later */
#define RETIRE_LOCK_TIMEOUT "200ms"

/*
 * A history table: its partition key, and which of its rows are still
 * needed ("h" is the row): the history of a task that still exists (live,
 * or finished but not yet purged), of a run that still exists.  Events of
 * user tables' state machines are needed for the retention only.
 */
typedef struct HistoryTable
{
	const char *table;
	const char *key;
	const char *kept;
} HistoryTable;

static const HistoryTable history_tables[] = {
	{"events", "at",
		"((h.task_id IS NOT NULL AND EXISTS (SELECT 1 FROM orch.tasks t"
		"    WHERE t.id = h.task_id AND t.tenant_id = h.tenant_id))"
		" OR (h.task_id IS NULL AND h.run_id IS NOT NULL AND EXISTS (SELECT 1 FROM orch.runs r"
		"    WHERE r.id = h.run_id AND r.tenant_id = h.tenant_id)))"},
	{"attempts", "finished_at",
		"(EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = h.task_id AND t.tenant_id = h.tenant_id))"},
};

typedef struct Partition
{
	char	   *name;			/* schema-qualified, quoted */
	bool		is_default;
	TimestampTz lo;				/* DT_NOBEGIN: MINVALUE */
	TimestampTz hi;				/* DT_NOEND: MAXVALUE */
} Partition;

/* Is this schema's history partitioned (0.8.0 on)? */
bool
orch_history_partitioned(void)
{
	Oid			relid = orch_relid("events");

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

static TimestampTz
bound_value(PartitionRangeDatum *d)
{
	if (d->kind == PARTITION_RANGE_DATUM_MINVALUE)
		return DT_NOBEGIN;
	if (d->kind == PARTITION_RANGE_DATUM_MAXVALUE)
		return DT_NOEND;
	return DatumGetTimestampTz(castNode(Const, d->value)->constvalue);
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

/* A bound as an SQL literal, in UTC (whatever the session's TimeZone and DateStyle). */
static char *
bound_literal(TimestampTz t)
{
	struct pg_tm tm;
	fsec_t		fsec;

	utc_parts(t, &tm, &fsec);
	return psprintf("'%04d-%02d-%02d %02d:%02d:%02d.%06d+00'",
					tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
					(int) fsec);
}

/* orch.<table>_pYYYYMMDD_HHMMSS: named after its start, in UTC */
static char *
partition_name(const char *table, TimestampTz lo)
{
	struct pg_tm tm;
	fsec_t		fsec;

	utc_parts(lo, &tm, &fsec);
	return psprintf("%s_p%04d%02d%02d_%02d%02d%02d", table,
					tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static void
ddl(const char *sql)
{
	orch_sql_once(sql, 0, NULL, NULL, NULL, false, 0, ORCH_SPI_ANY);
}

/*
 * What the parent has that a new partition must have too: no statistics on
 * the columns holding a tenant's own values, row-level security with the
 * tenant policy (for a role a DBA grants the partition to).
 */
static void
copy_parent_settings(const char *table, const char *part)
{
	Oid			types[1] = {TEXTOID};
	Datum		v[1];
	uint64		n;
	char	  **cols;

	v[0] = CStringGetTextDatum(table);
	n = orch_sql_once("SELECT a.attname::text FROM pg_catalog.pg_attribute a"
					  " WHERE a.attrelid = pg_catalog.format('orch.%I', $1)::regclass"
					  "   AND a.attnum > 0 AND NOT a.attisdropped AND a.attstattarget = 0",
					  1, types, v, NULL, true, 0, SPI_OK_SELECT);
	cols = orch_spi_column(1);
	for (uint64 i = 0; i < n; i++)
		ddl(psprintf("ALTER TABLE orch.%s ALTER COLUMN %s SET STATISTICS 0",
					 quote_identifier(part), quote_identifier(cols[i])));
	if (orch_citus())
		return;					/* Citus keeps its shards' policies itself */
	ddl(psprintf("ALTER TABLE orch.%s ENABLE ROW LEVEL SECURITY", quote_identifier(part)));
	ddl(psprintf("CREATE POLICY tenant_isolation ON orch.%s USING (orch.tenant_visible(tenant_id))"
				 " WITH CHECK (orch.tenant_visible(tenant_id))", quote_identifier(part)));
}

/*
 * Create the partition [lo, hi) of orch.<table>: a table of its own first,
 * with the keys and indexes of the DEFAULT partition (the parent has none:
 * a dump restores a partition with its own indexes, as any table) and its
 * bound already a CHECK constraint, then attached.  The attach locks the
 * parent only against DDL (SHARE UPDATE EXCLUSIVE) and need not scan the
 * new table.
 */
static void
create_partition(const HistoryTable *h, TimestampTz lo, TimestampTz hi)
{
	char	   *name = partition_name(h->table, lo);
	const char *qname = quote_identifier(name);
	char	   *from = bound_literal(lo);
	char	   *to = bound_literal(hi);

	ddl(psprintf("CREATE TABLE orch.%s (LIKE orch.%s_default INCLUDING DEFAULTS INCLUDING INDEXES"
				 " INCLUDING STORAGE INCLUDING COMPRESSION)", qname, h->table));
	/* (before the attach: Citus distributes the table then, with these) */
	copy_parent_settings(h->table, name);
	ddl(psprintf("ALTER TABLE orch.%s ADD CONSTRAINT orch_bound CHECK (%s >= %s AND %s < %s)",
				 qname, h->key, from, h->key, to));
	ddl(psprintf("ALTER TABLE orch.%s ATTACH PARTITION orch.%s FOR VALUES FROM (%s) TO (%s)",
				 h->table, qname, from, to));
	ddl(psprintf("ALTER TABLE orch.%s DROP CONSTRAINT orch_bound", qname));
}

/* What one partition step did */
typedef enum
{
	STEP_NONE, STEP_CREATED, STEP_EMPTIED, STEP_COMPACTED, STEP_DROPPED
} StepResult;

typedef StepResult (*StepFn) (const HistoryTable *h, const Partition *p, TimestampTz a, TimestampTz b);

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
	TimestampTz a,
				b;
	StepResult	result;
} GuardedStep;

static void
run_step(void *arg)
{
	GuardedStep *g = (GuardedStep *) arg;
	int			nest = NewGUCNestLevel();

	(void) set_config_option("lock_timeout", RETIRE_LOCK_TIMEOUT,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	g->result = g->fn(g->h, g->p, g->a, g->b);
	/* (on an error the subtransaction's abort unwinds the setting) */
	AtEOXact_GUC(true, nest);
}

static StepResult
guarded_step(StepFn fn, const HistoryTable *h, const Partition *p, TimestampTz a, TimestampTz b,
			 const char *what)
{
	GuardedStep g = {fn, h, p, a, b, STEP_NONE};
	ErrorData  *e = orch_subxact_try(run_step, &g);

	if (e == NULL)
		return g.result;
	ereport(e->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ? LOG : WARNING,
			(errmsg("orchestrator: %s %s was left for the next pass: %s",
					what, p ? p->name : psprintf("orch.%s", h->table), e->message)));
	FreeErrorData(e);
	return STEP_NONE;
}

static StepResult
step_create(const HistoryTable *h, const Partition *p, TimestampTz lo, TimestampTz hi)
{
	create_partition(h, lo, hi);
	return STEP_CREATED;
}

/*
 * Retire partition p of h (a range past the retention, or the DEFAULT
 * partition, whose rows older than cutoff are past it), locking the
 * partition only, never its parent.  Writers are held off first (SHARE), so
 * that no row lands in it between the count and the truncate: a recorded
 * claim written out later keeps its old time.  A range none of whose rows
 * is needed is emptied (TRUNCATE), and dropped at the end of the pass; one
 * with needed rows is compacted when at least half of it is not needed (the
 * DEFAULT partition, meant to stay small, whenever a row is not).
 */
static StepResult
step_retire(const HistoryTable *h, const Partition *p, TimestampTz cutoff, TimestampTz unused)
{
	char	   *keep;
	int64		total,
				kept;
	bool		isnull;

	/* the DEFAULT partition: nothing to do unless a row in it is past the retention */
	if (p->is_default &&
		orch_sql_once(psprintf("SELECT 1 FROM %s h WHERE h.%s < %s LIMIT 1",
							   p->name, h->key, bound_literal(cutoff)),
					  0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT) == 0)
		return STEP_NONE;
	ddl(psprintf("LOCK TABLE %s IN SHARE MODE", p->name));
	keep = p->is_default
		? psprintf("(%s OR h.%s >= %s)", h->kept, h->key, bound_literal(cutoff))
		: pstrdup(h->kept);
	/* (not read-only: it must see the tasks this pass purged) */
	orch_sql_once(psprintf("SELECT count(*), count(*) FILTER (WHERE %s) FROM %s h", keep, p->name),
				  0, NULL, NULL, NULL, false, 0, SPI_OK_SELECT);
	total = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	kept = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (total == 0)
		return p->is_default ? STEP_NONE : STEP_EMPTIED;
	if (kept == total || (!p->is_default && kept > 0 && kept * 2 >= total))
		return STEP_NONE;		/* nothing (or not enough) past the retention yet */
	if (kept == 0)
	{
		ddl(psprintf("TRUNCATE %s", p->name));
		return p->is_default ? STEP_COMPACTED : STEP_EMPTIED;
	}
	/* the kept rows aside, the partition emptied whole, the rows back */
	ddl(psprintf("CREATE TEMP TABLE orch_history_kept ON COMMIT DROP AS SELECT * FROM %s h WHERE %s",
				 p->name, keep));
	ddl(psprintf("TRUNCATE %s", p->name));
	ddl(psprintf("INSERT INTO %s SELECT * FROM pg_temp.orch_history_kept", p->name));
	ddl("DROP TABLE pg_temp.orch_history_kept");
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

static StepResult
step_drop(const HistoryTable *h, const Partition *p, TimestampTz a, TimestampTz b)
{
	int			n = 0;

	ddl(psprintf("LOCK TABLE orch.%s IN ACCESS EXCLUSIVE MODE", h->table));
	for (int i = 0; i < drop_count; i++)
	{
		if (orch_sql_once(psprintf("SELECT 1 FROM %s LIMIT 1", drop_list[i].name),
						  0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT) > 0)
			continue;			/* written to since it was emptied: next pass */
		ddl(psprintf("DROP TABLE %s", drop_list[i].name));
		n++;
	}
	drop_count = n;
	return n > 0 ? STEP_DROPPED : STEP_NONE;
}

/*
 * One pass over the history tables: with a retention, the partitions past
 * it retired (emptied or compacted, each locking only itself); then the
 * partitions ahead created; last, the emptied ones dropped, for each table
 * at once under one short lock of its parent, held until the pass commits.
 * Counts go to created, dropped and compacted.  Caller is connected to SPI.
 */
void
orch_history_partitions_maintain(int64 *created, int64 *dropped, int64 *compacted)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz cutoff = now - (int64) orch_retention * USECS_PER_SEC;
	int64		w = partition_width();
	Partition  *parts[lengthof(history_tables)];
	int			nparts[lengthof(history_tables)];
	Partition  *empty[lengthof(history_tables)];
	int			nempty[lengthof(history_tables)];

	*created = *dropped = *compacted = 0;
	if (!orch_history_partitioned())
		return;
	/* one pass at a time keeps the partitions; another pass skips them */
	if (!orch_xact_try_lock("history_partitions", "", NULL))
		return;

	for (int t = 0; t < lengthof(history_tables); t++)
	{
		const HistoryTable *h = &history_tables[t];

		nparts[t] = read_partitions(h->table, &parts[t]);
		empty[t] = palloc(sizeof(Partition) * Max(nparts[t], 1));
		nempty[t] = 0;
		if (orch_retention <= 0)
			continue;
		for (int i = 0; i < nparts[t]; i++)
		{
			Partition  *p = &parts[t][i];
			StepResult	r;

			if (!p->is_default && (p->hi == DT_NOEND || p->hi > cutoff))
				continue;
			r = guarded_step(step_retire, h, p, cutoff, 0, "retiring");
			if (r == STEP_EMPTIED)
				empty[t][nempty[t]++] = *p;
			else if (r == STEP_COMPACTED)
				(*compacted)++;
		}
	}

	for (int t = 0; t < lengthof(history_tables); t++)
	{
		const HistoryTable *h = &history_tables[t];
		TimestampTz last = DT_NOBEGIN;
		TimestampTz start,
					until = now + PARTITIONS_AHEAD * w;

		for (int i = 0; i < nparts[t]; i++)
			if (!parts[t][i].is_default && parts[t][i].hi != DT_NOEND && parts[t][i].hi > last)
				last = parts[t][i].hi;
		/*
		 * Go on from the last partition; after a gap (no partitions yet, or
		 * maintenance stopped for long) from the next window: the current
		 * one may already have rows in the DEFAULT partition.
		 */
		start = last > now ? last : (now / w + 1) * w;
		while (start < until)
		{
			TimestampTz end = (start / w + 1) * w;

			if (guarded_step(step_create, h, NULL, start, end, "creating a partition of") != STEP_CREATED)
				break;
			(*created)++;
			start = end;
		}
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
