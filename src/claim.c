/*
 * claim.c
 *	  Handing out work: orch_dequeue claims eligible tasks in priority/FIFO
 *	  order with FOR UPDATE SKIP LOCKED and a fresh fencing token per claim,
 *	  after lazily recovering expired leases of the same queue (maintain.c).
 *	  A task's timeout caps its lease: lease_expires_at never passes
 *	  claimed_at + timeout.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "access/xact.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_dequeue);

#define ORCH_MAX_BATCH 10000
#define ORCH_RECOVER_PER_CLAIM 16

/*
 * What a claim does to a task ($3 worker, $4 lease; the task's timeout caps
 * the lease) and what it hands back (emit_claimed reads these columns).
 */
#define CLAIM_SET \
	"state = 'executing', attempts = t.attempts + 1," \
	" lease_token = gen_random_uuid(), lease_owner = $3," \
	" lease_expires_at = LEAST(now() + $4, now() + t.timeout), claimed_at = now()," \
	" retry_at = NULL, reason_code = 'claimed'"
#define CLAIM_RETURNING \
	"t.id, t.lease_token, t.attempts, t.payload, t.queue, t.priority," \
	" t.step_key, t.tenant_id, t.run_id, t.lease_expires_at, t.resume_data"

static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr claim_tenant_plan = NULL;

/*
 * The claim.  The ids are picked in an ARRAY() sub-select so that the cached
 * generic plan stays an index scan (a join against a LIMIT $n sub-query
 * would be planned for 10% of the table).
 */
#define CLAIM_SQL(TENANT_FILTER, OUTER_TENANT_FILTER) \
	"WITH u AS (" \
	"  UPDATE orch.tasks t SET " CLAIM_SET \
	"  WHERE t.id = ANY (ARRAY(SELECT id FROM orch.tasks" \
	"     WHERE queue = $1 AND ready_at <= now()" TENANT_FILTER \
	"     ORDER BY priority, created_at, id" \
	"     LIMIT $2 FOR UPDATE SKIP LOCKED))" OUTER_TENANT_FILTER \
	"  RETURNING " CLAIM_RETURNING ", t.created_at)" \
	" SELECT id, lease_token, attempts, payload, queue, priority, step_key, tenant_id," \
	"  run_id, lease_expires_at, resume_data FROM u ORDER BY priority, created_at, id"

static void emit_claimed(ReturnSetInfo *rsinfo, MemoryContext outer);

#define CLAIM_ONE_SQL \
	"UPDATE orch.tasks t SET " CLAIM_SET \
	" WHERE t.id = $1 AND t.tenant_id = $2 AND t.ready_at <= now()" \
	" RETURNING " CLAIM_RETURNING

static SPIPlanPtr limited_cand_plan = NULL;
static SPIPlanPtr claim_one_plan = NULL;
static SPIPlanPtr running_owner_plan = NULL;
static SPIPlanPtr running_queue_plan = NULL;

static int64
count1(SPIPlanPtr plan, Datum *v)
{
	bool		isnull;

	if (SPI_execute_plan(plan, v, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "orchestrator: count failed");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Claim under owner_limit / queue_limit, one task at a time: the best
 * eligible task whose owner is below its limit (counted with this call's own
 * claims) is locked (SKIP LOCKED), re-checked under the owner's
 * transaction-scoped advisory lock, and claimed.  Owners at their limit are
 * skipped, never waited for.  Claimed rows go straight into the result.
 */
static void
claim_limited(const char *queue, const char *worker, int32 batch, int64 lease,
			  const char *tenant, QueueSettings *qs, ReturnSetInfo *rsinfo,
			  MemoryContext outer)
{
	Oid			ctypes[4] = {TEXTOID, INT4OID, TEXTOID, INT8ARRAYOID};
	Datum		cv[4];
	char		cn[4] = {' ', ' ', ' ', ' '};
	Oid			otypes[2] = {TEXTOID, TEXTOID};
	Datum		ov[2];
	Oid			utypes[4] = {INT8OID, TEXTOID, TEXTOID, INTERVALOID};
	Datum		uv[4];
	Datum	   *seen;
	int			nseen = 0;
	int			claimed = 0;
	int32		allowed = batch;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("concurrency limits require READ COMMITTED isolation")));
	if (qs->queue_limit > 0)
	{
		int64		running;

		orch_xact_lock("queue", queue, NULL);
		ov[0] = orch_text_datum(queue);
		running = count1(orch_prepare(&running_queue_plan,
									  "SELECT count(*) FROM orch.tasks WHERE queue = $1 AND state = 'executing'",
									  1, otypes), ov);
		if (running >= qs->queue_limit)
			return;
		if (allowed > qs->queue_limit - running)
			allowed = (int32) (qs->queue_limit - running);
	}

	seen = palloc(sizeof(Datum) * (allowed * 8 + 64));
	cv[0] = orch_text_datum(queue);
	cv[1] = Int32GetDatum(qs->owner_limit > 0 ? qs->owner_limit : PG_INT32_MAX);
	cv[2] = tenant ? orch_text_datum(tenant) : (Datum) 0;
	if (!tenant)
		cn[2] = 'n';
	uv[2] = orch_text_datum(worker);
	uv[3] = IntervalPGetDatum(orch_usecs_interval(lease));

	/* bounded: every round claims or skips one task */
	while (claimed < allowed && nseen < allowed * 8 + 64)
	{
		int64		id;
		char	   *ten;
		char	   *owner;
		bool		isnull;

		cv[3] = PointerGetDatum(construct_array(seen, nseen, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		if (SPI_execute_plan(orch_prepare(&limited_cand_plan,
										  "SELECT t.id, t.tenant_id, t.owner FROM orch.tasks t"
										  " WHERE t.queue = $1 AND t.ready_at <= now()"
										  "   AND ($3::text IS NULL OR t.tenant_id = $3)"
										  "   AND t.id <> ALL ($4)"
										  "   AND (t.owner IS NULL OR (SELECT count(*) FROM orch.tasks e"
										  "        WHERE e.queue = $1 AND e.owner = t.owner"
										  "          AND e.state = 'executing') < $2)"
										  " ORDER BY t.priority, t.created_at, t.id"
										  " LIMIT 1 FOR UPDATE SKIP LOCKED",
										  4, ctypes),
							 cv, cn, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "orchestrator: candidate scan failed");
		if (SPI_processed == 0)
			break;
		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		ten = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		owner = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
		seen[nseen++] = Int64GetDatum(id);

		if (owner != NULL && qs->owner_limit > 0)
		{
			/* never wait for an owner's lock: that could deadlock two workers */
			if (!orch_xact_try_lock("owner", queue, owner))
				continue;
			ov[0] = orch_text_datum(queue);
			ov[1] = orch_text_datum(owner);
			if (count1(orch_prepare(&running_owner_plan,
									"SELECT count(*) FROM orch.tasks WHERE queue = $1 AND owner = $2"
									" AND state = 'executing'", 2, otypes), ov) >= qs->owner_limit)
				continue;		/* a concurrent claim took the owner's last slot */
		}
		uv[0] = Int64GetDatum(id);
		uv[1] = orch_text_datum(ten);
		if (SPI_execute_plan(orch_prepare(&claim_one_plan, CLAIM_ONE_SQL, 4, utypes),
							 uv, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "orchestrator: claim failed");
		if (SPI_processed == 1)
		{
			emit_claimed(rsinfo, outer);
			claimed++;
		}
	}
}

/* The stable step idempotency key: hash(tenant, run, step) or (tenant, task) */
static char *
guard_key(const char *tenant, bool has_run, int64 run_id, const char *step, int64 task_id)
{
	StringInfoData s;
	uint64		h;

	initStringInfo(&s);
	if (has_run)
		appendStringInfo(&s, "%s|run|" INT64_FORMAT "|%s", tenant, run_id, step ? step : "");
	else
		appendStringInfo(&s, "%s|task|" INT64_FORMAT, tenant, task_id);
	h = hash_bytes_extended((const unsigned char *) s.data, s.len, 0x67756172);
	return psprintf("%016llx", (unsigned long long) h);
}

/* Put the claimed rows of SPI_tuptable into the result, with their guard. */
static void
emit_claimed(ReturnSetInfo *rsinfo, MemoryContext outer)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	td = SPI_tuptable->tupdesc;
		Datum		out[10];
		bool		nulls[10];
		bool		isnull;
		Datum		run;
		bool		has_run;
		char	   *step;
		char	   *ten;
		MemoryContext spicxt;

		for (int c = 0; c < 7; c++)
			out[c] = SPI_getbinval(tup, td, c + 1, &nulls[c]);
		ten = SPI_getvalue(tup, td, 8);
		run = SPI_getbinval(tup, td, 9, &isnull);
		has_run = !isnull;
		step = SPI_getvalue(tup, td, 7);
		spicxt = MemoryContextSwitchTo(outer);
		out[7] = orch_text_datum(guard_key(ten, has_run, has_run ? DatumGetInt64(run) : 0,
										   step, DatumGetInt64(out[0])));
		nulls[7] = false;
		MemoryContextSwitchTo(spicxt);
		out[8] = SPI_getbinval(tup, td, 10, &nulls[8]);
		out[9] = SPI_getbinval(tup, td, 11, &nulls[9]);
		/* tuplestore copies the values into its own context */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
}

/*
 * orch_dequeue(queue, worker, batch, lease, tenant)
 *	  -> (task_id, lease_token, attempt, payload, queue, priority, step_key,
 *		  guard, lease_expires_at, resume_data)
 */
Datum
orch_dequeue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *queue;
	char	   *worker;
	int32		batch = 1;
	int64		lease = -1;
	char	   *tenant;
	QueueSettings qs;
	bool		paused;
	Oid			types[5] = {TEXTOID, INT4OID, TEXTOID, INTERVALOID, TEXTOID};
	Datum		v[5];
	MemoryContext outer = CurrentMemoryContext;

	orch_require_arg(fcinfo, 0, "queue");
	orch_require_arg(fcinfo, 1, "worker");
	queue = orch_text_arg(fcinfo, 0);
	orch_validate_queue_name(queue);
	worker = orch_text_arg(fcinfo, 1);
	if (worker[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("worker must not be empty")));
	if (!PG_ARGISNULL(2))
	{
		batch = PG_GETARG_INT32(2);
		if (batch < 1 || batch > ORCH_MAX_BATCH)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("batch must be between 1 and %d", ORCH_MAX_BATCH)));
	}
	if (!PG_ARGISNULL(3))
	{
		lease = orch_interval_usecs(PG_GETARG_INTERVAL_P(3));
		if (lease <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("lease must be a positive interval")));
	}
	tenant = orch_text_arg(fcinfo, 4);

	InitMaterializedSRF(fcinfo, 0);

	SPI_connect();
	if (!orch_load_queue(queue, &qs, &paused) || paused)
	{
		SPI_finish();
		return (Datum) 0;		/* unknown or paused queue: no work */
	}
	if (lease < 0)
		lease = qs.lease;

	orch_recover_expired(queue, ORCH_RECOVER_PER_CLAIM);
	if (orch_has_gate())
		orch_wake_delayed(queue, ORCH_RECOVER_PER_CLAIM * 4);

	v[0] = orch_text_datum(queue);
	v[1] = Int32GetDatum(batch);
	v[2] = orch_text_datum(worker);
	v[3] = IntervalPGetDatum(orch_usecs_interval(lease));
	v[4] = tenant ? orch_text_datum(tenant) : (Datum) 0;
	orch_set_event_context(worker, NULL);
	if (qs.owner_limit > 0 || qs.queue_limit > 0)
	{
		claim_limited(queue, worker, batch, lease, tenant, &qs, rsinfo, outer);
		orch_clear_event_context();
		SPI_finish();
		return (Datum) 0;
	}
	if (tenant)
	{
		if (SPI_execute_plan(orch_prepare(&claim_tenant_plan, CLAIM_SQL(" AND tenant_id = $5", " AND t.tenant_id = $5"), 5, types),
							 v, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "orchestrator: claim failed");
	}
	else if (SPI_execute_plan(orch_prepare(&claim_plan, CLAIM_SQL("", ""), 4, types),
							  v, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "orchestrator: claim failed");
	orch_clear_event_context();

	emit_claimed(rsinfo, outer);
	SPI_finish();
	return (Datum) 0;
}
