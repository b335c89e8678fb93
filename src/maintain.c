/*
 * maintain.c
 *	  Upkeep: expired leases and timeouts become failed attempts and delayed
 *	  tasks that came due are let in (housekeeping.c, which a claim shares),
 *	  stuck work is reported, counters are verified against the rows,
 *	  finished work is purged after the retention, and
 *	  orch_schedule_maintenance registers it with pg_cron.
 *	  Every pass is bounded and uses SKIP LOCKED, and re-checks each row under
 *	  its lock, so it never overwrites what a worker finished meanwhile.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/timestamp.h"
#include "utils/resowner.h"

#include "orchestrator.h"

/*
 * Maintenance check 3: tasks finished recently (their terminal transition
 * among the last events, or the latest finished tasks whose row records
 * the completion) whose attempt or failure counters disagree with their
 * attempt rows (a released attempt was given back: it counts for neither).  A sample of the newest: four times the pass's batch, at
 * most COUNTER_CHECK_MAX (a pass with a large batch, meant to purge much,
 * must not check hundreds of thousands of tasks, each against every
 * partition of the history).
 */
#define COUNTER_CHECK_MAX "4000"
#define COUNTER_CHECK_SAMPLE "LEAST($1 * 4, " COUNTER_CHECK_MAX ")"
#define COUNTER_CHECK_RECENT \
	" WHERE (t.id, t.tenant_id) IN (SELECT e.task_id, e.tenant_id FROM orch.events e" \
	"   WHERE e.id > (SELECT coalesce(max(id), 0) FROM orch.events" \
	"                 WHERE " ORCH_TENANT_IN("tenant_id", "$4") ") - " COUNTER_CHECK_SAMPLE \
	"     AND e.to_state IN ('completed', 'failed', 'cancelled') AND e.task_id IS NOT NULL" \
	"     AND " ORCH_TENANT_IN("e.tenant_id", "$4")
#define COUNTER_CHECK(ATTEMPTS) \
	" AND t.state IN ('completed', 'failed', 'cancelled') AND " ORCH_TENANT_IN("t.tenant_id", "$4") \
	" AND (t.attempts <> (SELECT count(*) FROM " ATTEMPTS " a" \
	"        WHERE a.task_id = t.id AND a.tenant_id = t.tenant_id AND " ORCH_TENANT_IN("a.tenant_id", "$4") \
	"        AND a.outcome <> 'released')" \
	"   OR t.failures <> (SELECT count(*) FROM orch.attempts a" \
	"        WHERE a.task_id = t.id AND a.tenant_id = t.tenant_id AND " ORCH_TENANT_IN("a.tenant_id", "$4") \
	"        AND a.outcome IN ('failed', 'lease_expired', 'timed_out')))"

PG_FUNCTION_INFO_V1(orch_maintain);
PG_FUNCTION_INFO_V1(orch_schedule_maintenance);
PG_FUNCTION_INFO_V1(orch_unschedule_maintenance);

#define MAINTENANCE_JOB "orchestrator-maintenance"


/* $4 (text[]): the tenants a statement acts on, NULL for all */

/*
 * Purging the finished tasks p: their keys with them, and (history not
 * partitioned: a 0.7.0 schema) their attempts and events.  Partitioned
 * history is retired a partition at a time (history_partitions.c).
 */
#define PURGE_HISTORY \
	" a AS (DELETE FROM orch.attempts a USING p WHERE a.task_id = p.id" \
	"   AND a.tenant_id = p.tenant_id AND " ORCH_TENANT_IN("a.tenant_id", "$4") ")," \
	" e AS (DELETE FROM orch.events e USING p WHERE e.task_id = p.id" \
	"   AND e.tenant_id = p.tenant_id AND " ORCH_TENANT_IN("e.tenant_id", "$4") "),"
#define PURGE_TAIL \
	" k AS (DELETE FROM orch.idempotency_keys k USING p" \
	"   WHERE k.task_id = p.id AND k.tenant_id = p.tenant_id AND " ORCH_TENANT_IN("k.tenant_id", "$4") ")" \
	" DELETE FROM orch.tasks t USING p WHERE t.id = p.id AND t.tenant_id = p.tenant_id" \
	"   AND " ORCH_TENANT_IN("t.tenant_id", "$4")

/*
 * Finished tasks past the retention ($3), in batches ($1), history as given;
 * LOCK: how they are picked (unlocked, or skipping those another
 * transaction holds)
 */
#define PURGE_TASKS(history, LOCK) \
	"WITH p AS (SELECT id, tenant_id FROM orch.tasks t" \
	"   WHERE finished_at < now() - $3" \
	"     AND state IN ('completed', 'failed', 'cancelled') AND " ORCH_TENANT_IN("t.tenant_id", "$4") \
	/* a run still open needs its steps' tasks (map results, counts) */ \
	"     AND (t.run_id IS NULL OR NOT EXISTS (SELECT 1 FROM orch.runs r" \
	"          WHERE r.id = t.run_id AND r.tenant_id = t.tenant_id AND " ORCH_TENANT_IN("r.tenant_id", "$4") \
	"            AND r.state IN ('running', 'waiting_approval', 'paused')))" \
	"   ORDER BY finished_at LIMIT $1" LOCK ")," \
	history \
	PURGE_TAIL
#define PURGE_SKIP_LOCKED " FOR UPDATE SKIP LOCKED"
/* the purge for this schema: history not partitioned (0.7.0) goes with its tasks */
#define PURGE_TASKS_FOR(partitioned, LOCK) \
	((partitioned) ? PURGE_TASKS("", LOCK) : PURGE_TASKS(PURGE_HISTORY, LOCK))
/* how long the unlocked purge waits for a row another transaction holds */
#define PURGE_LOCK_TIMEOUT "500ms"

/*
 * Finished workflow runs past the retention, with their steps and the
 * approvals given to them, and (history not partitioned) the run's own
 * events: an approval reference is single-use for as long as the run that
 * used it is kept.  Row by row for a 0.7.0 schema only (during the
 * update): from 0.8.0 on they are retired with their partitions
 * (history_partitions.c).
 */
#define PURGE_RUN_EVENTS \
	" e AS (DELETE FROM orch.events e USING p" \
	"   WHERE e.run_id = p.id AND e.tenant_id = p.tenant_id AND e.task_id IS NULL" \
	"     AND " ORCH_TENANT_IN("e.tenant_id", "$4") "),"
#define PURGE_RUNS(history) \
	"WITH p AS (SELECT id, tenant_id FROM orch.runs" \
	"   WHERE finished_at < now() - $3 AND state IN ('succeeded', 'failed', 'canceled')" \
	"     AND " ORCH_TENANT_IN("tenant_id", "$4") \
	"   ORDER BY finished_at LIMIT $1 FOR UPDATE SKIP LOCKED)," \
	" s AS (DELETE FROM orch.run_steps s USING p" \
	"   WHERE s.run_id = p.id AND s.tenant_id = p.tenant_id AND " ORCH_TENANT_IN("s.tenant_id", "$4") ")," \
	history \
	" a AS (DELETE FROM orch.approvals a USING p" \
	"   WHERE a.run_id = p.id AND a.tenant_id = p.tenant_id" \
	"     AND " ORCH_TENANT_IN("a.tenant_id", "$4") ")" \
	" DELETE FROM orch.runs r USING p WHERE r.id = p.id AND r.tenant_id = p.tenant_id" \
	"   AND " ORCH_TENANT_IN("r.tenant_id", "$4")

static int64
count_query(const char *sql, OrchArgs *a)
{
	bool		isnull;
	uint64		processed = orch_args_sql_once(a, sql, false, 0, ORCH_SPI_ANY);

	/*
	 * A statement that returns rows (a SELECT of a count) returns the count
	 * in its first column; one that changes rows (none has RETURNING) how
	 * many it changed.
	 */
	if (SPI_tuptable != NULL)
	{
		Datum		d;

		if (SPI_processed == 0)
			return 0;
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		return isnull ? 0 : DatumGetInt64(d);
	}
	return (int64) processed;
}

/* The unlocked purge (run with a short lock_timeout) */
typedef struct PurgeStep
{
	const char *sql;
	OrchArgs   *a;
	int64		count;
} PurgeStep;

static void
purge_unlocked(void *arg)
{
	PurgeStep  *p = (PurgeStep *) arg;

	p->count = count_query(p->sql, p->a);
}

/*
 * Purge finished tasks past the retention.  A finished task never changes
 * again, so they are deleted without locking them first (a lock is one more
 * WAL record and page write per row).  Only a transaction that holds one
 * locked (a re-drive of a dead letter, still open) makes the delete wait:
 * then, after a short wait, the batch is picked again skipping the rows
 * held, as a purge that locks, so that maintenance never waits for a
 * user's transaction.  The caller holds the pass's purge lock (one pass
 * purges at a time: another, which would wait for its deletes, leaves the
 * purge to it).  Caller is connected to SPI.
 */
static int64
purge_tasks(bool partitioned, OrchArgs *a)
{
	PurgeStep	p = {PURGE_TASKS_FOR(partitioned, ""), a, 0};
	ErrorData  *e = orch_subxact_try_waiting(purge_unlocked, &p, PURGE_LOCK_TIMEOUT);

	if (e == NULL)
		return p.count;
	if (e->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		ReThrowError(e);
	FreeErrorData(e);
	return count_query(PURGE_TASKS_FOR(partitioned, PURGE_SKIP_LOCKED), a);
}

typedef struct Action
{
	const char *name;
	int64		count;
} Action;

/*
 * Fold the metrics in a subtransaction: a failure there (reported as a
 * WARNING) must never stop the recovery work of the pass.  A pass folds at
 * most about ORCH_FOLD_MAX_ROWS rows, as orch_metrics_refresh() does by
 * default; a larger backlog is left to the next passes.  Caller is
 * connected to SPI.
 */
static void
fold_metrics_step(void *arg)
{
	*(int64 *) arg = orch_metrics_fold_now(ORCH_FOLD_MAX_ROWS);
}

static int64
fold_metrics(void)
{
	int64		n = 0;
	ErrorData  *e = orch_subxact_try(fold_metrics_step, &n);

	if (e == NULL)
		return n;
	ereport(WARNING,
			(errmsg("orchestrator: folding the metrics failed, the rest of the pass goes on: %s",
					e->message)));
	FreeErrorData(e);
	return 0;
}

/*
 * Fire the schedules due (schedules.c) in a subtransaction: a failure there
 * (reported as a WARNING) must not stop the rest of the pass.  None on
 * Citus, where schedules are refused, nor on a 0.7.0 schema (an update in
 * flight), which has none.
 */
typedef struct TickArg
{
	int32		batch;
	int64		fired;
} TickArg;

static void
tick_schedules_step(void *arg)
{
	TickArg    *t = (TickArg *) arg;

	t->fired = orch_schedules_tick(GetCurrentTransactionStartTimestamp(), t->batch);
}

static int64
tick_schedules(int32 batch)
{
	TickArg		t = {batch, 0};
	ErrorData  *e = orch_citus() || !orch_schema_schedules() ? NULL
		: orch_subxact_try(tick_schedules_step, &t);

	if (e == NULL)
		return t.fired;
	ereport(WARNING,
			(errmsg("orchestrator: firing the schedules failed, the rest of the pass goes on: %s",
					e->message)));
	FreeErrorData(e);
	return 0;
}

/*
 * Record one pass in orch.maintenance_log (its actions as a JSON object of
 * counts) and drop the records older than seven days.
 */
static void
log_pass(TimestampTz started, Action *acts, int nacts)
{
	StringInfoData buf;
	OrchArgs	a = {0};
	OrchArgs	none = {0};

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int i = 0; i < nacts; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, acts[i].name);
		appendStringInfo(&buf, ": " INT64_FORMAT, acts[i].count);
	}
	appendStringInfoChar(&buf, '}');
	orch_arg_timestamptz(&a, started);
	orch_arg_text(&a, orch_current_actor());
	orch_arg_text(&a, buf.data);
	count_query("INSERT INTO orch.maintenance_log (started_at, finished_at, actor, actions)"
				" VALUES ($1, clock_timestamp(), $2, $3::jsonb)", &a);
	count_query("DELETE FROM orch.maintenance_log WHERE started_at < now() - interval '7 days'",
				&none);

	/*
	 * On Citus the fold runs on the shards, not over orch.maintenance_log (a
	 * reference table written here): the pass counts itself, with its
	 * record.
	 */
	if (orch_citus())
	{
		OrchArgs	at = {0};

		orch_arg_timestamptz(&at, started);
		count_query("INSERT INTO orch.metric_totals AS m (tenant_id, queue, metric, value)"
					" VALUES ('', '', 'maintenance_runs', 1)"
					" ON CONFLICT (tenant_id, queue, metric, l1, l2) DO UPDATE SET value = m.value + 1",
					&none);
		count_query("INSERT INTO orch.metric_minutes AS m (minute, tenant_id, queue, metric, value)"
					" VALUES (date_trunc('minute', $1), '', '', 'maintenance_runs', 1)"
					" ON CONFLICT (minute, tenant_id, queue, metric, l1, l2) DO UPDATE SET value = m.value + 1",
					&at);
	}
}

/*
 * The work of one pass over the tasks of tenants (a text[]; (Datum) 0: of
 * every tenant).  Fills acts (always the same actions in the same order)
 * and returns how many.  Every statement filters on tenant_id and joins
 * on it, so that on Citus, run tenant by tenant, each is a single-shard
 * query.  Caller is connected to SPI.
 */
static int
maintain_tenants(int32 batch, Datum tenants, Action *acts)
{
	int			nacts = 0;
	OrchArgs	a = {0};		/* the same four for every statement: never changed */
	bool		partitioned = orch_history_partitioned();

	orch_arg_int4(&a, batch);
	orch_arg_interval(&a, (int64) orch_stuck_after * USECS_PER_SEC);
	orch_arg_interval(&a, (int64) orch_retention * USECS_PER_SEC);
	orch_arg(&a, TEXTARRAYOID, tenants, tenants == (Datum) 0);

	/* 1. expired leases and timeouts */
	acts[nacts].name = "leases_recovered";
	acts[nacts++].count = orch_recover_expired(NULL, batch, tenants);

	/* 2. stuck work: waiting (not retrying, not released) past the bound */
	acts[nacts].name = "stuck_tasks";
	acts[nacts++].count =
		count_query("SELECT count(*) FROM (SELECT 1 FROM orch.tasks"
					" WHERE state IN ('received', 'awaiting_tool', 'awaiting_user_confirmation')"
					"   AND ready_at IS NULL AND retry_at IS NULL AND updated_at < now() - $2"
					/* a workflow approval waits for a person by design (its own timeout) */
					"   AND NOT (run_id IS NOT NULL AND step_key LIKE '%" ORCH_APPROVAL_SUFFIX "')"
					"   AND " ORCH_TENANT_IN("tenant_id", "$4") " LIMIT $1) s",
					&a);

	/* 3. counters against rows, for tasks finished recently */
	acts[nacts].name = "counter_mismatches";
	acts[nacts++].count =
		count_query(orch_schema_rows_record_history()
					? "SELECT count(*) FROM orch.tasks t"
					COUNTER_CHECK_RECENT
					/*
					 * completions the task rows record (orch.history): of the
					 * latest finished tasks (bounded whatever they are: on
					 * Citus none records its completion)
					 */
					"   UNION ALL SELECT c.id, c.tenant_id FROM (SELECT f.id, f.tenant_id, f.complete_event_id"
					"     FROM orch.tasks f WHERE f.finished_at IS NOT NULL"
					"       AND " ORCH_TENANT_IN("f.tenant_id", "$4")
					"     ORDER BY f.finished_at DESC LIMIT " COUNTER_CHECK_SAMPLE ") c WHERE c.complete_event_id IS NOT NULL)"
					COUNTER_CHECK("orch.attempt_history")
					: "SELECT count(*) FROM orch.tasks t"
					COUNTER_CHECK_RECENT ")"
					COUNTER_CHECK("orch.attempts"),
					&a);
	if (acts[nacts - 1].count > 0)
		ereport(WARNING,
				(errmsg("orchestrator: " INT64_FORMAT " recently finished tasks have attempt or failure counters that disagree with orch.attempts",
						acts[nacts - 1].count)));

	/* 4. retention: finished tasks (with their attempts and events, unpartitioned) */
	acts[nacts].name = "tasks_purged";
	acts[nacts++].count = orch_retention <= 0 || !orch_xact_try_lock("purge", "tasks", NULL) ? 0 :
		purge_tasks(partitioned, &a);

	/* finished workflow runs (PURGE_RUNS) */
	acts[nacts].name = "runs_purged";
	/* (partitioned: retired with their partitions, counted after the pass's partition step) */
	acts[nacts++].count = orch_retention <= 0 || orch_runs_partitioned() ? 0 :
		count_query(partitioned ? PURGE_RUNS("") : PURGE_RUNS(PURGE_RUN_EVENTS), &a);

	/* events of the user tables' state machines past the retention */
	acts[nacts].name = "events_purged";
	acts[nacts++].count = orch_retention <= 0 || partitioned ? 0 :
		count_query("DELETE FROM orch.events e USING"
					" (SELECT id, tenant_id FROM orch.events WHERE entity NOT IN ('task', 'run', 'run_step')"
					"    AND at < now() - $3 AND " ORCH_TENANT_IN("tenant_id", "$4") " ORDER BY at LIMIT $1) o"
					" WHERE e.id = o.id AND e.tenant_id = o.tenant_id AND " ORCH_TENANT_IN("e.tenant_id", "$4"),
					&a);

	/* slots and rate windows */
	acts[nacts].name = "delayed_woken";
	acts[nacts++].count = orch_wake_delayed(NULL, batch, tenants);
	acts[nacts].name = "runs_progressed";
	acts[nacts++].count = orch_runs_maintain(batch);
	acts[nacts].name = "key_decisions_settled";
	acts[nacts++].count = orch_gate_repair(NULL, batch);
	acts[nacts].name = "slots_reconciled";
	acts[nacts++].count = orch_gate_reconcile(NULL, batch);
	acts[nacts].name = "rate_window_purged";
	acts[nacts++].count =
		count_query("DELETE FROM orch.rate_window w USING"
					" (SELECT ctid FROM orch.rate_window WHERE expires_at < now()"
					"  AND " ORCH_TENANT_IN("tenant_id", "$4") " LIMIT $1) o"
					" WHERE w.ctid = o.ctid AND " ORCH_TENANT_IN("w.tenant_id", "$4"),
					&a);

	acts[nacts].name = "idempotency_keys_purged";
	acts[nacts++].count =
		count_query("DELETE FROM orch.idempotency_keys k USING"
					" (SELECT tenant_id, key FROM orch.idempotency_keys WHERE expires_at <= now()"
					"  AND " ORCH_TENANT_IN("tenant_id", "$4")
					"  ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) o"
					" WHERE k.tenant_id = o.tenant_id AND k.key = o.key AND " ORCH_TENANT_IN("k.tenant_id", "$4"),
					&a);

	return nacts;
}

/*
 * orch_maintain(batch int DEFAULT 1000) -> TABLE(action text, count bigint)
 *	  On Citus the pass runs tenant by tenant (each statement then goes to
 *	  the tenant's shard), batch applying to each tenant.
 */
Datum
orch_maintain(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int32		batch = orch_int4_arg(fcinfo, 0, "batch", 1, 1000000, 1000);
	Action		acts[24];
	int			nacts = 0;
	TimestampTz started = GetCurrentTimestamp();

	orch_require_unrestricted("orch_maintain");
	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();

	/* 0. metrics: fold what committed since the last pass (before any purge) */
	acts[nacts].name = "metrics_folded";
	/* (none on Citus for a schema distributed before 0.8.0: it has no shard fold) */
	acts[nacts++].count = orch_citus() && !orch_schema_distributed_fold() ? 0 : fold_metrics();

	if (!orch_citus())
		nacts += maintain_tenants(batch, (Datum) 0, acts + nacts);
	else
	{
		int			ntenants;
		char	  **tenant_names;
		Action		part[24];
		int			first = nacts;

		/*
		 * The tenants with rows to maintain (a scan of each table's shards;
		 * 'default' always: user tables' events are there).
		 */
		ntenants = (int) orch_sql_once("SELECT tenant_id FROM orch.tasks GROUP BY 1"
						" UNION SELECT tenant_id FROM orch.idempotency_keys GROUP BY 1"
						" UNION SELECT tenant_id FROM orch.rate_window GROUP BY 1"
						" UNION SELECT tenant_id FROM orch.gate_repairs GROUP BY 1"
						/* runs: waits, caps and deadlines due, and the retention of finished ones */
						" UNION SELECT tenant_id FROM orch.runs GROUP BY 1"
						" UNION SELECT 'default'"
						" ORDER BY 1", 0, NULL, NULL, NULL, true, 0, SPI_OK_SELECT);
		tenant_names = palloc(sizeof(char *) * (ntenants + 1));
		for (int i = 0; i < ntenants; i++)
			tenant_names[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		for (int i = 0; i < ntenants; i++)
		{
			int			k;

			orch_scope_tenant(tenant_names[i]);
			k = maintain_tenants(batch, orch_text_array1(tenant_names[i]), part);
			orch_scope_clear();
			for (int j = 0; j < k; j++)
			{
				if (i == 0)
					acts[first + j] = part[j];
				else
					acts[first + j].count += part[j].count;
			}
			if (i == 0)
				nacts += k;
		}
	}

	/* cron schedules: the slots due fire (their tasks and runs are new work) */
	acts[nacts].name = "schedules_fired";
	acts[nacts++].count = tick_schedules(Min(batch, orch_max_batch_size));

	/*
	 * History partitions: created ahead, retired whole past the retention.
	 * Last, so that the moment's exclusive lock a retirement takes is held
	 * only until the pass commits.
	 */
	if (orch_history_partitioned())
	{
		int64		created,
					dropped,
					compacted,
					runs_retired;

		orch_history_partitions_maintain(&created, &dropped, &compacted, &runs_retired);
		for (int i = 0; i < nacts; i++)
			if (strcmp(acts[i].name, "runs_purged") == 0)
				acts[i].count += runs_retired;
		acts[nacts].name = "history_partitions_created";
		acts[nacts++].count = created;
		acts[nacts].name = "history_partitions_dropped";
		acts[nacts++].count = dropped;
		acts[nacts].name = "history_partitions_compacted";
		acts[nacts++].count = compacted;
	}

	/* the pass's record: pg_cron's history then says what it did */
	log_pass(started, acts, nacts);
	SPI_finish();

	for (int i = 0; i < nacts; i++)
	{
		Datum		out[2];
		bool		nulls[2] = {false, false};

		out[0] = orch_text_datum(acts[i].name);
		out[1] = Int64GetDatum(acts[i].count);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	return (Datum) 0;
}

/* ---------------------------------------------------------------------- */

/*
 * The pg_cron job of this database is "orchestrator-maintenance:<database>"
 * (pg_cron upserts jobs by name, so one name for all databases would make
 * them overwrite each other's job).  cron.job.jobname is a name: when the
 * result would not fit, the database name is cut and followed by a hash of
 * all of it, so that two long names sharing a prefix still differ.
 */
static char *
maintenance_job_name(const char *db)
{
	char	   *name = psprintf("%s:%s", MAINTENANCE_JOB, db);
	char		suffix[16];
	int			room;

	if (strlen(name) < NAMEDATALEN)
		return name;
	snprintf(suffix, sizeof(suffix), "~%08x",
			 hash_bytes((const unsigned char *) db, (int) strlen(db)));
	room = NAMEDATALEN - 1 - (int) strlen(MAINTENANCE_JOB) - 1 - (int) strlen(suffix);
	return psprintf("%s:%.*s%s", MAINTENANCE_JOB,
					pg_mbcliplen(db, (int) strlen(db), room), db, suffix);
}

/* The scheduled command: schema-qualified, immune to the job's search_path. */
static char *
maintenance_command(FunctionCallInfo fcinfo)
{
	char	   *nsp = get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid));

	return psprintf("SELECT * FROM %s.orch_maintain(1000)", quote_identifier(nsp));
}

/*
 * Error out (55000) unless pg_cron is installed in database db, the current
 * one.  pg_cron lives in one database (cron.database_name) and runs the jobs
 * of every database from there, so when that is another database the error
 * names it and the hint is cron_sql, the statement to run there instead.
 */
static void
require_pg_cron(const char *db, const char *cron_sql)
{
	const char *cron_db;

	if (orch_sql_once("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron'", 0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT) > 0)
		return;

	/* NULL unless pg_cron is loaded (a placeholder is only a setting) */
	cron_db = GetConfigOption("cron.database_name", true, false);
	if (cron_db != NULL &&
		(GetConfigOptionFlags("cron.database_name", true) & GUC_CUSTOM_PLACEHOLDER) != 0)
		cron_db = NULL;

	if (cron_db == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_cron is not installed in database \"%s\"", db),
				 errdetail("pg_cron is not loaded in this server, so maintenance is not scheduled. Leases are still recovered when workers claim."),
				 errhint("Load pg_cron (shared_preload_libraries = 'pg_cron') and run CREATE EXTENSION pg_cron in the database named by cron.database_name, or call SELECT orch_maintain() from any scheduler.")));
	if (strcmp(cron_db, db) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_cron is not installed in database \"%s\"", db),
				 errdetail("pg_cron is loaded and runs its jobs from this database (cron.database_name), but the extension has not been created here."),
				 errhint("Run CREATE EXTENSION pg_cron in this database, then call this function again.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("pg_cron is not installed in database \"%s\"", db),
			 errdetail("pg_cron lives in database \"%s\" (cron.database_name) and runs the jobs of every database from there.",
					   cron_db),
			 errhint("In database \"%s\", run: %s", cron_db, cron_sql)));
}

/*
 * orch_schedule_maintenance(schedule text DEFAULT '* * * * *') -> bigint
 *	  Registers (or re-registers) the pg_cron job that runs orch_maintain()
 *	  in this database; returns the job id.  The job of an older version,
 *	  named plainly "orchestrator-maintenance", is replaced when it runs in
 *	  this database.  Needs pg_cron installed here; in any other database the
 *	  error hints the cron.schedule_in_database call to run where it is.
 */
Datum
orch_schedule_maintenance(PG_FUNCTION_ARGS)
{
	char	   *schedule = PG_ARGISNULL(0) ? "* * * * *" : orch_text_arg(fcinfo, 0);
	char	   *db = get_database_name(MyDatabaseId);
	char	   *job = maintenance_job_name(db);
	char	   *command = maintenance_command(fcinfo);
	OrchArgs	old = {0};
	OrchArgs	a = {0};
	bool		isnull;
	int64		jobid;

	orch_require_unrestricted("maintenance scheduling");
	SPI_connect();
	require_pg_cron(db, psprintf("SELECT cron.schedule_in_database(%s, %s, %s, %s);",
								 quote_literal_cstr(job), quote_literal_cstr(schedule),
								 quote_literal_cstr(command), quote_literal_cstr(db)));

	/* the job of an older version for this database */
	orch_arg_text(&old, MAINTENANCE_JOB);
	orch_arg_text(&old, db);
	orch_args_sql_once(&old, "SELECT cron.unschedule(jobid) FROM cron.job"
					   " WHERE jobname = $1 AND database = $2", false, 0, SPI_OK_SELECT);

	orch_arg_text(&a, job);
	orch_arg_text(&a, schedule);
	orch_arg_text(&a, command);
	orch_arg_text(&a, db);
	orch_args_sql_once(&a, "SELECT cron.schedule_in_database($1, $2, $3, $4)", false, 1, SPI_OK_SELECT);
	jobid = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	PG_RETURN_INT64(jobid);
}

/*
 * orch_unschedule_maintenance() -> boolean
 *	  Removes this database's job, and the plainly named job of an older
 *	  version when it runs in this database; true when a job was removed.
 */
Datum
orch_unschedule_maintenance(PG_FUNCTION_ARGS)
{
	char	   *db = get_database_name(MyDatabaseId);
	char	   *job = maintenance_job_name(db);
	OrchArgs	a = {0};
	bool		isnull;
	bool		removed;

	orch_require_unrestricted("maintenance scheduling");
	SPI_connect();
	require_pg_cron(db, psprintf("SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = %s;",
								 quote_literal_cstr(job)));
	orch_arg_text(&a, job);
	orch_arg_text(&a, MAINTENANCE_JOB);
	orch_arg_text(&a, db);
	orch_args_sql_once(&a, "SELECT count(cron.unschedule(jobid)) FROM cron.job"
					   " WHERE jobname = $1 OR (jobname = $2 AND database = $3)", false, 1, SPI_OK_SELECT);
	removed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) > 0;
	SPI_finish();
	PG_RETURN_BOOL(removed);
}
