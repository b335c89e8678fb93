/*
 * dequeue.c
 *	  Handing out work: orch_dequeue claims eligible tasks in priority/FIFO
 *	  order with FOR UPDATE SKIP LOCKED and a fresh fencing token per claim,
 *	  after the queue's housekeeping (housekeeping.c: expired leases recovered,
 *	  delayed tasks that came due let in).
 *	  A task's timeout caps its lease: lease_expires_at never passes
 *	  claimed_at + timeout.  A claim with wait looks again while it finds
 *	  nothing, woken as claim_wait.c says.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_dequeue);
PG_FUNCTION_INFO_V1(orch_step_claimable);

/*
 * What a claim does to a task ($3 worker, $4 lease; the task's timeout caps
 * the lease) and what it hands back (emit_claimed reads these columns).
 * The claim's time (claimed_at, from which the lease runs) is the clock
 * when the row is claimed, after the statement's snapshot and the row's
 * lock: a task it finds was let go (its lease recovered, its attempt
 * failed) before it, however long ago the statement began, and a claim
 * late in a long transaction gets its whole lease.
 */
#define CLAIM_SET_WITH(TOKEN, TIMES) \
	"state = 'executing', attempts = t.attempts + 1," \
	" lease_token = " TOKEN ", lease_owner = $3, " TIMES "," \
	" retry_at = NULL, reason_code = 'claimed'"
#define CLAIM_SET CLAIM_SET_WITH("gen_random_uuid()", \
	"(claimed_at, lease_expires_at) = (SELECT k.at, LEAST(k.at + $4, k.at + t.timeout)" \
	" FROM (SELECT pg_catalog.clock_timestamp() AS at) k)")

/*
 * On Citus an UPDATE of a distributed table may call no volatile function
 * and no stable one on a column: the token is md5 of the task id and a
 * random nonce of this claim ($6, never stored: a token tells nothing of
 * another), the claim's time is the statement's start, and the timeout cap
 * is computed in UTC (ORCH_UTC_ADD).
 */
#define CLAIM_SET_CITUS \
	CLAIM_SET_WITH("md5(t.id::text || $6)::uuid", \
				   "claimed_at = statement_timestamp(), lease_expires_at = LEAST(statement_timestamp() + $4, " \
				   ORCH_UTC_ADD("statement_timestamp()", "t.timeout") ")")
#define CLAIM_RETURNING \
	"t.id, t.lease_token, t.attempts, t.payload, t.queue, t.priority," \
	" t.step_key, t.tenant_id, t.run_id, t.lease_expires_at, t.resume_data"

/*
 * A workflow step's task is handed out only while its run is running (not
 * paused, waiting, finished) and within its deadline; compensation tasks run
 * after the deadline too (STEP_CLAIMABLE_SQL).
 *
 * Plain tasks (run_id NULL) pay nothing: the claim asks the question through
 * orch.step_claimable(), only of a step task.  Written as a sub-query of the
 * claim, it cost every claim statement the set-up of a scan of each partition
 * of orch.runs (partitioned by id, so no partition can be ruled out before a
 * row is read), whether or not a step task came by: about 3 us per partition
 * and claim, 15% of a single claim's time with 13 partitions.
 */
#define RUN_CLAIMABLE(RUN_ID, RUN_TENANT, STEP_KEY) \
	"r.id = " RUN_ID " AND r.tenant_id = " RUN_TENANT " AND r.state = 'running'" \
	" AND ((r.phase = 'forward' AND (r.deadline_at IS NULL OR r.deadline_at > " ORCH_NOW "))" \
	"      OR " STEP_KEY " LIKE '%:compensate')"
#define STEP_CLAIMABLE_SQL \
	"SELECT 1 FROM orch.runs r WHERE " RUN_CLAIMABLE("$1", "$2", "$3")

/*
 * The question as a sub-query: on Citus, where the claim runs on the
 * tenant's shard and a function there may start no distributed query
 * (every table of the single-tenant claim filtered by the value $5), and
 * against a 0.7.0 schema (no orch.step_claimable; orch.runs not
 * partitioned).
 */
#define RUN_SUBQUERY_ON(T, RUN_TENANT) \
	" AND (" T ".run_id IS NULL OR EXISTS (SELECT 1 FROM orch.runs r WHERE " \
	RUN_CLAIMABLE(T ".run_id", RUN_TENANT, T ".step_key") "))"
#define RUN_FILTER_CITUS RUN_SUBQUERY_ON("c", "$5")

#define RUN_FILTER_070(T) RUN_SUBQUERY_ON(T, T ".tenant_id")

/*
 * tasks_tenant_claim_idx holds the claimable tasks of every tenant but the
 * default one (the tenant of an installation without tenants, whose claims
 * read tasks_claim_idx): a claim for another tenant says so in its text,
 * for the planner to use that index with a parameter for the tenant.
 */
#define NOT_DEFAULT(COL) " AND " COL " <> '" ORCH_DEFAULT_TENANT "'"
/* ... and tasks_claim_idx (the default tenant's, every tenant's) its key */
#define KEYED ORCH_AT_QUEUE_KEY("c", "$1")
#define T_KEYED ORCH_AT_QUEUE_KEY("t", "$1")
#define is_default_tenant(T) (strcmp((T), ORCH_DEFAULT_TENANT) == 0)

/*
 * The claim.  The ids are picked in an ARRAY() sub-select so that the cached
 * generic plan stays an index scan (a join against a LIMIT $n sub-query
 * would be planned for 10% of the table).
 */
/*
 * The rows the sub-query locked are updated where they are (by ctid: no
 * index descent per row; a row locked cannot move); on Citus, by id (a
 * shard's row is not addressed by ctid through the coordinator).  A row
 * another transaction changed and committed after the statement's
 * snapshot and that is still claimable is locked in its new version,
 * which the snapshot does not see: that one claim leaves it (the next
 * takes it), where the update by id would have followed it.
 */
#define CLAIM_SQL(TENANT_FILTER, OUTER_TENANT_FILTER, RUNF) \
	CLAIM_SQL_DUE("ctid", CLAIM_SET, CLAIM_DUE, TENANT_FILTER CLAIM_FROM, OUTER_TENANT_FILTER, RUNF)
#define CLAIM_SQL_SET(SET, TENANT_FILTER, OUTER_TENANT_FILTER, RUNF) \
	CLAIM_SQL_DUE("id", SET, ORCH_NOW, TENANT_FILTER, OUTER_TENANT_FILTER, RUNF)
#define CLAIM_SQL_DUE(KEY, SET, DUE, TENANT_FILTER, OUTER_TENANT_FILTER, RUNF) \
	"WITH u AS (" \
	"  UPDATE orch.tasks t SET " SET \
	"  WHERE t." KEY " = ANY (ARRAY(SELECT c." KEY " FROM orch.tasks c" \
	"     WHERE c.queue = $1 AND c.ready_at <= " DUE TENANT_FILTER RUNF \
	"     ORDER BY priority, created_at, id" \
	"     LIMIT $2 FOR UPDATE SKIP LOCKED))" OUTER_TENANT_FILTER \
	"  RETURNING " CLAIM_RETURNING ", t.created_at)" \
	" SELECT id, lease_token, attempts, payload, queue, priority, step_key, tenant_id," \
	"  run_id, lease_expires_at, resume_data, created_at FROM u ORDER BY priority, created_at, id"

/*
 * Where the claim starts ($6, $7, $8: priority, created_at, id): the first
 * task the worker's previous claim of the queue took, while nothing was
 * made claimable since (claim_start below); else the beginning.  What is
 * due: by the claim's now, or by the moment ($9) it read the count of
 * what was made claimable (a task due by then, committed before, is not
 * passed over for being due later than the call's start).
 */
#define CLAIM_FROM " AND (c.priority, c.created_at, c.id) >= ($6, $7, $8)"
#define CLAIM_DUE "GREATEST(" ORCH_NOW ", $9)"

/*
 * The claim of a caller bound to several tenants: each tenant's best rows
 * are read from its own range of tasks_tenant_claim_idx (at most $2 each,
 * locked; the default tenant's, when it is one of them, from
 * tasks_claim_idx), and the best $2 of those claimed, so that no tenant's
 * backlog is read by another's claim.  Rows locked and not chosen are free
 * again when the claim's transaction ends.  The rows chosen are updated
 * by ctid, as CLAIM_SQL's.
 */
#define CLAIM_TENANTS_SQL(RUNF) \
	"WITH u AS (" \
	"  UPDATE orch.tasks t SET " CLAIM_SET \
	"  WHERE t.ctid = ANY (ARRAY(SELECT x.tid FROM (" \
	"     SELECT y.tid, y.id, y.priority, y.created_at FROM pg_catalog.unnest($5::text[]) AS w(tenant)," \
	"      LATERAL (SELECT c.ctid AS tid, c.id, c.priority, c.created_at FROM orch.tasks c" \
	"       WHERE c.queue = $1 AND c.tenant_id = w.tenant" NOT_DEFAULT("c.tenant_id") \
	"         AND c.ready_at <= " ORCH_NOW RUNF \
	"       ORDER BY c.priority, c.created_at, c.id" \
	"       LIMIT $2 FOR UPDATE OF c SKIP LOCKED) y" \
	"     UNION ALL" \
	"     SELECT z.tid, z.id, z.priority, z.created_at FROM (SELECT c.ctid AS tid, c.id, c.priority, c.created_at FROM orch.tasks c" \
	"       WHERE '" ORCH_DEFAULT_TENANT "' = ANY ($5) AND c.queue = $1" KEYED \
	"         AND c.tenant_id = '" ORCH_DEFAULT_TENANT "' AND c.ready_at <= " ORCH_NOW RUNF \
	"       ORDER BY c.priority, c.created_at, c.id" \
	"       LIMIT $2 FOR UPDATE OF c SKIP LOCKED) z) x" \
	"     ORDER BY x.priority, x.created_at, x.id LIMIT $2)) AND t.tenant_id = ANY ($5)" \
	"  RETURNING " CLAIM_RETURNING ", t.created_at)" \
	" SELECT id, lease_token, attempts, payload, queue, priority, step_key, tenant_id," \
	"  run_id, lease_expires_at, resume_data FROM u ORDER BY priority, created_at, id"

static void emit_claimed(ReturnSetInfo *rsinfo);


#define CLAIM_IDS_SQL \
	"UPDATE orch.tasks t SET " CLAIM_SET \
	" WHERE t.id = ANY ($1) AND t.ready_at <= " ORCH_NOW \
	" RETURNING " CLAIM_RETURNING


/*
 * One window of a limited claim's candidates, in claim order after the last
 * one ($4, $5, $6; $7 for the first).  One tenant's claim reads its own range
 * of tasks_tenant_claim_idx (the default tenant's: tasks_claim_idx).
 */
#define LIMITED_WINDOW_SQL(TENANT_COND, RUNF) \
	"SELECT t.id, t.owner, t.priority, t.created_at, t.tenant_id FROM orch.tasks t" \
	" WHERE t.queue = $1 AND t.ready_at <= " ORCH_NOW " AND " TENANT_COND \
	"   AND ($7 OR (t.priority, t.created_at, t.id) > ($4, $5, $6))" \
	RUNF \
	" ORDER BY t.priority, t.created_at, t.id" \
	" LIMIT $2 FOR UPDATE SKIP LOCKED"

/* Candidates looked at per window, and in all, by one limited claim */
#define LIMITED_WINDOW_MIN	16
#define LIMITED_WINDOW_MAX	2048
#define LIMITED_SCAN_MAX	20000

static int64
count1(OrchArgs *a, const char *sql)
{
	bool		isnull;

	orch_args_sql(a, sql, false, 1, SPI_OK_SELECT);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* What one limited claim knows of an owner: may it take more, and how many */
typedef struct OwnerSlot
{
	uint64		hash;			/* hash key */
	char	   *owner;
	bool		blocked;		/* lock held elsewhere, or at its limit */
	int64		running;		/* executing, counting this call's claims */
} OwnerSlot;

/* What one limited claim has chosen so far, and what it knows of owners */
typedef struct LimitedClaim
{
	const char *queue;
	QueueSettings *qs;
	HTAB	   *owners;			/* OwnerSlot by hash of (tenant, owner); NULL without owner_limit */
	Datum	   *chosen;			/* task ids */
	int			nchosen;
	int32		allowed;		/* at most this many */
} LimitedClaim;

/*
 * How many tasks a limited claim may take: the batch, less what the
 * queue_limit leaves (0: none).  The queue's lock is taken for the rest of
 * the transaction.
 */
static int32
limited_allowed(const char *queue, QueueSettings *qs, int32 batch)
{
	OrchArgs	a = {0};
	int64		running;

	if (qs->queue_limit <= 0)
		return batch;
	orch_xact_lock("queue", queue, NULL);
	orch_arg_text(&a, queue);
	running = count1(&a, "SELECT count(*) FROM orch.tasks WHERE queue = $1 AND state = 'executing'");
	if (running >= qs->queue_limit)
		return 0;
	return (int32) Min(batch, qs->queue_limit - running);
}

/*
 * The window statement: one tenant's range (the default tenant's in
 * tasks_claim_idx), or the claim's tenants (all of them: $3 NULL).
 */
static SPIPlanPtr
limited_window_plan(Datum tenants, bool all_tenants)
{
	Oid			ctypes[7] = {TEXTOID, INT4OID, TEXTARRAYOID, INT4OID, TIMESTAMPTZOID,
	INT8OID, BOOLOID};
	bool		steps_fn = orch_schema_step_claimable();
	bool		default_only = false;

	if (!all_tenants &&
		ArrayGetNItems(ARR_NDIM(DatumGetArrayTypeP(tenants)), ARR_DIMS(DatumGetArrayTypeP(tenants))) == 1)
	{
		Datum	   *elems;
		bool	   *enulls;
		int			ne;

		deconstruct_array(DatumGetArrayTypeP(tenants), TEXTOID, -1, false, TYPALIGN_INT,
						  &elems, &enulls, &ne);
		default_only = ne == 1 && !enulls[0] && is_default_tenant(TextDatumGetCString(elems[0]));
		if (steps_fn)
			return orch_plan(default_only
							 ? LIMITED_WINDOW_SQL("t.tenant_id = ($3::text[])[1]" T_KEYED, ORCH_RUN_FILTER_ON("t"))
							 : LIMITED_WINDOW_SQL("t.tenant_id = ($3::text[])[1]" NOT_DEFAULT("t.tenant_id"),
												  ORCH_RUN_FILTER_ON("t")),
							 7, ctypes);
		return orch_plan(default_only
						 ? LIMITED_WINDOW_SQL("t.tenant_id = ($3::text[])[1]" T_KEYED, RUN_FILTER_070("t"))
						 : LIMITED_WINDOW_SQL("t.tenant_id = ($3::text[])[1]" NOT_DEFAULT("t.tenant_id"),
											  RUN_FILTER_070("t")),
						 7, ctypes);
	}
	return orch_plan(steps_fn
					 ? LIMITED_WINDOW_SQL(ORCH_TENANT_IN("t.tenant_id", "$3") T_KEYED, ORCH_RUN_FILTER_ON("t"))
					 : LIMITED_WINDOW_SQL(ORCH_TENANT_IN("t.tenant_id", "$3") T_KEYED, RUN_FILTER_070("t")),
					 7, ctypes);
}

/*
 * May this claim take one more task of this owner (a tenant's own: the
 * pair)?  Its lock is tried once per call, never waited for (two workers
 * could deadlock), its executing tasks counted once, then counted up.
 */
static bool
limited_owner_takes(LimitedClaim *lc, const char *owner, const char *tenant)
{
	char	   *who;
	uint64		h;
	bool		found;
	OwnerSlot  *o;

	if (owner == NULL || lc->owners == NULL)
		return true;
	who = psprintf("%s\x1f%s", tenant, owner);
	h = hash_bytes_extended((const unsigned char *) who, strlen(who), 0);
	o = hash_search(lc->owners, &h, HASH_ENTER, &found);
	if (!found)
	{
		o->owner = who;
		o->running = 0;
		o->blocked = !orch_xact_try_lock("owner", lc->queue, who);
		if (!o->blocked)
		{
			OrchArgs	a = {0};

			orch_arg_text(&a, lc->queue);
			orch_arg_text(&a, owner);
			orch_arg_text(&a, tenant);
			o->running = count1(&a, "SELECT count(*) FROM orch.tasks WHERE queue = $1"
								" AND owner = $2 AND tenant_id = $3"
								" AND state = 'executing'");
		}
	}
	else if (strcmp(o->owner, who) != 0)
		return false;			/* a hash collision: leave it for the next claim */
	if (o->blocked || o->running >= lc->qs->owner_limit)
		return false;
	o->running++;
	return true;
}

/*
 * The candidates of one window (in SPI_tuptable): choose those whose owner
 * may take one more; the window's last row is where the next one starts
 * (cv[3..5]).
 */
static void
limited_take_window(LimitedClaim *lc, Datum *cv)
{
	/* (the owners' counts run statements of their own) */
	SPITupleTable *tt = SPI_tuptable;
	uint64		got = SPI_processed;
	bool		isnull;

	for (uint64 r = 0; r < got; r++)
	{
		HeapTuple	tup = tt->vals[r];
		int64		id = DatumGetInt64(SPI_getbinval(tup, tt->tupdesc, 1, &isnull));

		cv[3] = SPI_getbinval(tup, tt->tupdesc, 3, &isnull);
		cv[4] = SPI_getbinval(tup, tt->tupdesc, 4, &isnull);
		cv[5] = Int64GetDatum(id);
		if (lc->nchosen >= lc->allowed)
			continue;
		if (!limited_owner_takes(lc, SPI_getvalue(tup, tt->tupdesc, 2), SPI_getvalue(tup, tt->tupdesc, 5)))
			continue;
		lc->chosen[lc->nchosen++] = Int64GetDatum(id);
	}
}

/* A limited claim of up to allowed tasks; its owners' table with owner_limit */
static void
limited_init(LimitedClaim *lc, const char *queue, QueueSettings *qs, int32 allowed)
{
	memset(lc, 0, sizeof(*lc));
	lc->queue = queue;
	lc->qs = qs;
	lc->allowed = allowed;
	if (allowed <= 0)
		return;
	lc->chosen = palloc(sizeof(Datum) * allowed);
	if (qs->owner_limit > 0)
	{
		HASHCTL		hctl;

		memset(&hctl, 0, sizeof(hctl));
		hctl.keysize = sizeof(uint64);
		hctl.entrysize = sizeof(OwnerSlot);
		hctl.hcxt = CurrentMemoryContext;
		lc->owners = hash_create("orchestrator claim owners", 64, &hctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
}

/* Claim the tasks a limited or fair claim chose (locked by it); emitted. */
static int
claim_chosen(LimitedClaim *lc, const char *worker, int64 lease, ReturnSetInfo *rsinfo)
{
	OrchArgs	u = {0};
	int			claimed;

	if (lc->nchosen == 0)
		return 0;
	orch_arg(&u, INT8ARRAYOID,
			 PointerGetDatum(construct_array(lc->chosen, lc->nchosen, INT8OID, 8, FLOAT8PASSBYVAL,
											 TYPALIGN_DOUBLE)), false);
	orch_arg_int4(&u, lc->nchosen);
	orch_arg_text(&u, worker);
	orch_arg_interval(&u, lease);
	orch_args_sql(&u, "WITH u AS (" CLAIM_IDS_SQL ", t.created_at)"
				  " SELECT id, lease_token, attempts, payload, queue, priority, step_key,"
				  "  tenant_id, run_id, lease_expires_at, resume_data FROM u"
				  " WHERE $2 > 0 ORDER BY priority, created_at, id",
				  false, 0, SPI_OK_SELECT);
	claimed = (int) SPI_processed;
	emit_claimed(rsinfo);
	return claimed;
}

/*
 * Claim under owner_limit / queue_limit.  Candidates are read in claim order
 * (priority, created_at, id) in windows, locked with SKIP LOCKED; an owner's
 * transaction-scoped advisory lock is tried once per call (never waited for:
 * two workers could deadlock), its executing tasks counted once, and then
 * counted up as this call claims; owners at their limit are skipped, never
 * waited for.  The chosen tasks are claimed with one UPDATE.  The work per
 * call is bounded: at most LIMITED_SCAN_MAX candidates are looked at,
 * whatever the batch and however many owners are busy elsewhere.
 */
static int
claim_limited(const char *queue, const char *worker, int32 batch, int64 lease,
			  Datum tenants, bool all_tenants, QueueSettings *qs, ReturnSetInfo *rsinfo)
{
	Datum		cv[7];
	char		cn[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			scanned = 0;
	int			window;
	LimitedClaim lc;
	SPIPlanPtr	plan;

	orch_require_read_committed();
	limited_init(&lc, queue, qs, limited_allowed(queue, qs, batch));
	if (lc.allowed <= 0)
		return 0;

	window = Max(LIMITED_WINDOW_MIN, Min(lc.allowed * 2, LIMITED_WINDOW_MAX));
	cv[0] = orch_text_datum(queue);
	cv[2] = tenants;
	if (all_tenants)
		cn[2] = 'n';
	cv[3] = Int32GetDatum(0);
	cv[4] = TimestampTzGetDatum(0);
	cv[5] = Int64GetDatum(0);
	cv[6] = BoolGetDatum(true);
	/*
	 * Keyset pagination: each window starts after the last one.  One plan
	 * for every window, its parameters an array whose $2, $7 and cursor
	 * ($4 to $6, set by limited_take_window) change in place between
	 * executions.
	 */
	plan = limited_window_plan(tenants, all_tenants);
	while (lc.nchosen < lc.allowed && scanned < LIMITED_SCAN_MAX)
	{
		uint64		got;

		cv[1] = Int32GetDatum(Min(window, LIMITED_SCAN_MAX - scanned));
		got = orch_exec(plan, cv, cn, false, 0, SPI_OK_SELECT);
		if (got == 0)
			break;
		scanned += (int) got;
		cv[6] = BoolGetDatum(false);
		limited_take_window(&lc, cv);
	}
	return claim_chosen(&lc, worker, lease, rsinfo);
}

/*
 * Claim from a queue with fairness round_robin: the candidates claim_fair.c
 * picks (the keys' heads in turn), each taken when its owner may take one
 * more (owner_limit), up to what queue_limit leaves; then the turns used
 * are recorded.  A key whose candidates were all held back gives up its
 * turn and keeps its place.
 */
static int
claim_fair(const char *queue, const char *worker, int32 batch, int64 lease,
		   Datum tenants, QueueSettings *qs, ReturnSetInfo *rsinfo)
{
	LimitedClaim lc;
	FairClaim  *fc;
	int64	   *ids;
	char	  **owners;
	char	  **tens;
	int			n;
	bool	   *taken;
	int			claimed;

	if (qs->owner_limit > 0 || qs->queue_limit > 0)
		orch_require_read_committed();
	limited_init(&lc, queue, qs, limited_allowed(queue, qs, batch));
	if (lc.allowed <= 0)
		return 0;
	fc = orch_fair_pick(queue, qs, lc.allowed, tenants);
	n = orch_fair_candidates(fc, &ids, &owners, &tens);
	taken = palloc0(sizeof(bool) * (n + 1));
	for (int i = 0; i < n && lc.nchosen < lc.allowed; i++)
		if (limited_owner_takes(&lc, owners[i], tens[i]))
		{
			lc.chosen[lc.nchosen++] = Int64GetDatum(ids[i]);
			taken[i] = true;
		}
	claimed = claim_chosen(&lc, worker, lease, rsinfo);
	orch_fair_served(fc, taken);
	return claimed;
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

/*
 * One claimed row into the result, with its guard: its values in the
 * order of ORCH_CLAIMED_COLS (the eleven first read).
 */
static void
emit_row(ReturnSetInfo *rsinfo, const Datum *v, const bool *n)
{
	Datum		out[10];
	bool		nulls[10];

	memcpy(out, v, sizeof(Datum) * 7);
	memcpy(nulls, n, sizeof(bool) * 7);
	out[7] = orch_text_datum(guard_key(TextDatumGetCString(v[7]), !n[8], n[8] ? 0 : DatumGetInt64(v[8]),
									   n[6] ? NULL : TextDatumGetCString(v[6]), DatumGetInt64(v[0])));
	nulls[7] = false;
	out[8] = v[9];
	nulls[8] = n[9];
	out[9] = v[10];
	nulls[9] = n[10];
	/* the next claims skip no look for expired leases past this one's end */
	if (!nulls[8] && !nulls[4])
		orch_claim_housekeeping_leased(TextDatumGetCString(out[4]), DatumGetTimestampTz(out[8]));
	/* tuplestore copies the values into its own context */
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
}

/* Put the claimed rows of SPI_tuptable into the result */
static void
emit_claimed(ReturnSetInfo *rsinfo)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		v[ORCH_CLAIMED_COLS];
		bool		n[ORCH_CLAIMED_COLS];

		orch_spi_values(SPI_tuptable, i, 1, 11, v, n);
		emit_row(rsinfo, v, n);
	}
}

/*
 * The claim on Citus, on the one tenant's shard ($1..$5 in a as the plain
 * claim's; the token's nonce is $6).  Caller is connected to SPI.
 */
static void
claim_citus(const char *queue, const char *tenant, QueueSettings *qs, const OrchArgs *a)
{
	OrchArgs	c = *a;
	pg_uuid_t  *nonce = orch_new_uuid();

	if (qs->owner_limit > 0 || qs->queue_limit > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("queue \"%s\" has an owner_limit or queue_limit, which is not supported on Citus", queue),
				 errdetail("Those limits count running tasks across tenants, and Citus locks rows on one shard at a time."),
				 errhint("Use concurrency keys, or rate limits, on distributed tables.")));
	if (qs->fair && qs->fair_by_key)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("queue \"%s\" is fair by concurrency key, which is not supported on Citus", queue),
				 errdetail("A claim on Citus serves one tenant; fairness by tenant needs nothing more."),
				 errhint("Set the queue's \"fairness\" to \"none\", or its \"fairness_key\" to \"tenant\".")));
	orch_arg_text(&c, DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(nonce))));
	orch_args_sql(&c, is_default_tenant(tenant)
				  ? CLAIM_SQL_SET(CLAIM_SET_CITUS, KEYED " AND c.tenant_id = $5",
								  " AND t.tenant_id = $5", RUN_FILTER_CITUS)
				  : CLAIM_SQL_SET(CLAIM_SET_CITUS, " AND c.tenant_id = $5" NOT_DEFAULT("c.tenant_id"),
								  " AND t.tenant_id = $5", RUN_FILTER_CITUS),
				  false, 0, SPI_OK_SELECT);
	/* the claimed tasks' calls by id go straight to the tenant's shard */
	orch_route_note_rows(ORCH_ROUTE_TASK, SPI_tuptable, SPI_processed, 1, tenant);
}

/*
 * The claim statement for one tenant (the default tenant's reads
 * tasks_claim_idx, another's tasks_tenant_claim_idx; $5 the tenant), for
 * several (each tenant's range; $5 the tenants), or for all (no $5).
 */
static const char *
claim_sql(const char *tenant, bool all_tenants)
{
	bool		steps_fn = orch_schema_step_claimable();

	if (tenant && is_default_tenant(tenant))
		return steps_fn
			? CLAIM_SQL(KEYED " AND c.tenant_id = $5", " AND t.tenant_id = $5", ORCH_RUN_FILTER_ON("c"))
			: CLAIM_SQL(KEYED " AND c.tenant_id = $5", " AND t.tenant_id = $5", RUN_FILTER_070("c"));
	if (tenant)
		return steps_fn
			? CLAIM_SQL(" AND c.tenant_id = $5" NOT_DEFAULT("c.tenant_id"),
						" AND t.tenant_id = $5", ORCH_RUN_FILTER_ON("c"))
			: CLAIM_SQL(" AND c.tenant_id = $5" NOT_DEFAULT("c.tenant_id"),
						" AND t.tenant_id = $5", RUN_FILTER_070("c"));
	if (!all_tenants)
		return steps_fn ? CLAIM_TENANTS_SQL(ORCH_RUN_FILTER_ON("c")) : CLAIM_TENANTS_SQL(RUN_FILTER_070("c"));
	return steps_fn ? CLAIM_SQL(KEYED, "", ORCH_RUN_FILTER_ON("c")) : CLAIM_SQL(KEYED, "", RUN_FILTER_070("c"));
}

/* ----------------------------------------------------------------------
 * Where a claim starts.  A queue's claim index holds, before the claimable
 * tasks, the entries of the tasks claimed since the last VACUUM: dead, but
 * on pages a scan from the queue's beginning must read, a prefix that grows
 * while a backlog drains.  A worker's next claim of the queue starts at the
 * first task its previous claim took, when nothing can have become
 * claimable before that task since: what was before it then was dead, or
 * held by another transaction (a claim, whose rollback would give its
 * tasks back).  That holds while the queue's count in shared memory
 * (claim_wait.c) is unchanged: it moves with every commit that made one of
 * its tasks claimable (an enqueue, a retry or a release come due, a lease
 * recovered, a priority changed, a run resumed) and every claim undone.
 * What it cannot see is a task held by another kind of transaction (a row
 * lock, an update) that lets go of it unchanged.  A claim written at once
 * (task_claim.c) sees each task it passes over so (and each not due yet):
 * the next starts at the first of those or at the first task it took,
 * whichever comes first.  After the claim statement, which cannot tell,
 * such a task waits at most orchestrator.claim_cache_max_age after the
 * last claim that looked from the beginning: the next looks from there
 * again.  After claims written at once, only a task made claimable with
 * the triggers off (a logical replica's apply, a session whose
 * session_replication_role is replica) can be passed over so: the
 * start holds CLAIM_EXACT_MAX_AGE, or claim_cache_max_age when longer,
 * which bounds that.  Per backend; only for the claims of one tenant or
 * of all (the statements that read one range of a claim index), in READ
 * COMMITTED, and not while prepared transactions are allowed
 * (claim_wait.c).  The
 * count is read before the claim statement takes its snapshot: a commit
 * that becomes visible in between may be passed over by that one claim
 * (the next takes it), as if the claim had run a moment earlier.
 * ---------------------------------------------------------------------- */
#define CLAIM_FROM_SLOTS 4
#define CLAIM_EXACT_MAX_AGE 1000	/* ms a start written at once holds at least */

typedef struct ClaimFrom
{
	char	   *queue;			/* NULL: a free slot */
	char	   *tenant;			/* NULL: all tenants */
	uint64		gen;			/* the queue's count at the last look from the beginning */
	TimestampTz at;				/* ... and its time */
	OrchClaimPos pos;			/* where the next claim starts */
	bool		exact;			/* set by claims written at once: CLAIM_EXACT_MAX_AGE */
} ClaimFrom;

static ClaimFrom claim_from[CLAIM_FROM_SLOTS];
static int	claim_from_next = 0;

static bool
same_name(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* The slot of (queue, tenant), taken over when there is none */
static ClaimFrom *
claim_from_slot(const char *queue, const char *tenant)
{
	ClaimFrom  *f;

	for (int i = 0; i < CLAIM_FROM_SLOTS; i++)
		if (claim_from[i].queue && strcmp(claim_from[i].queue, queue) == 0 &&
			same_name(claim_from[i].tenant, tenant))
			return &claim_from[i];
	f = &claim_from[claim_from_next];
	claim_from_next = (claim_from_next + 1) % CLAIM_FROM_SLOTS;
	if (f->queue)
		pfree(f->queue);
	if (f->tenant)
		pfree(f->tenant);
	memset(f, 0, sizeof(*f));
	f->queue = MemoryContextStrdup(TopMemoryContext, queue);
	f->tenant = tenant ? MemoryContextStrdup(TopMemoryContext, tenant) : NULL;
	return f;
}

/* Where one claim starts, and what it records for the next */
typedef struct ClaimStart
{
	ClaimFrom  *slot;			/* where to record its first task; NULL: nowhere */
	OrchClaimPos from;			/* where it starts */
	TimestampTz counted_at;		/* when it read the queue's count */
} ClaimStart;

/* Where a claim of queue for tenant (NULL: all) starts */
static void
claim_start(ClaimStart *st, const char *queue, const char *tenant)
{
	ClaimFrom  *f = NULL;
	uint64		gen = 0;
	bool		counted = orch_claim_cache_max_age > 0 && !IsolationUsesXactSnapshot() &&
		orch_claim_generation(queue, false, &gen);
	TimestampTz now = GetCurrentTimestamp();	/* after the count was read */

	memset(st, 0, sizeof(*st));
	st->counted_at = now;
	if (!counted)
		return;
	f = claim_from_slot(queue, tenant);
	st->slot = f;
	if (f->pos.valid && f->gen == gen &&
		!TimestampDifferenceExceeds(f->at, now, f->exact ? Max(orch_claim_cache_max_age, CLAIM_EXACT_MAX_AGE)
									: orch_claim_cache_max_age))
	{
		st->from = f->pos;
		return;
	}
	f->pos.valid = false;
	f->gen = gen;
	f->at = now;
}

/* $6 .. $9 of the claim statement: where it starts, when it read the count */
static void
claim_start_args(OrchArgs *a, const ClaimStart *st)
{
	orch_arg_int4(a, st->from.valid ? st->from.priority : PG_INT32_MIN);
	orch_arg(a, TIMESTAMPTZOID, TimestampTzGetDatum(st->from.valid ? st->from.created_at : DT_NOBEGIN), false);
	orch_arg_int8(a, st->from.valid ? st->from.id : PG_INT64_MIN);
	orch_arg(a, TIMESTAMPTZOID, TimestampTzGetDatum(st->counted_at), false);
}

/*
 * After the claim of queue for tenant: the next one starts at pos (not
 * valid: at the beginning), the first task the claim statement took, or
 * where a claim written at once said.  Such a claim passed over nothing
 * before there that may become claimable unseen by the count but with
 * the triggers off (exact), so the start holds the longer
 * CLAIM_EXACT_MAX_AGE when this claim's own start did (it read from the
 * beginning, or from such a start).  (A claim made inside this one, by a
 * trigger, may have taken the slot over.)
 */
static void
claim_started(const ClaimStart *st, const char *queue, const char *tenant, const OrchClaimPos *pos,
			  bool exact)
{
	ClaimFrom  *f = st->slot;

	if (f == NULL || f->queue == NULL || strcmp(f->queue, queue) != 0 || !same_name(f->tenant, tenant))
		return;
	f->exact = exact && pos->valid && (!st->from.valid || f->exact);
	f->pos = *pos;
}

/* What one claim asks for (orch_dequeue's arguments, checked) */
typedef struct ClaimRequest
{
	char	   *queue;
	char	   *worker;
	int32		batch;
	int64		lease;			/* -1: the queue's */
	char	   *tenant;			/* NULL: the caller's tenants */
} ClaimRequest;

/*
 * May a claim hand out this step's task now?  The question of
 * orch.step_claimable(), asked through a connection of its own (its
 * result freed at once), in the caller's snapshot: by that function for
 * the claim statement, and by the claim written without SQL
 * (task_claim.c, which keeps the answer for the rest of its claim).
 */
static bool
step_claimable(Datum run_id, Datum tenant, Datum step_key, bool step_null)
{
	OrchArgs	a = {0};
	bool		found;

	/* the arguments as they came: no copy per step task a claim comes by */
	orch_arg(&a, INT8OID, run_id, false);
	orch_arg(&a, TEXTOID, tenant, false);
	orch_arg(&a, TEXTOID, step_null ? (Datum) 0 : step_key, step_null);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	found = orch_args_sql(&a, STEP_CLAIMABLE_SQL, true, 1, SPI_OK_SELECT) > 0;
	SPI_finish();
	return found;
}

/*
 * The claim of one tenant (tenant) or of all (NULL), which reads one range
 * of a claim index: written without SQL where it can be (task_claim.c),
 * else by the claim statement ($1 .. $5 in a).  The event context the
 * caller set (the worker as actor, no note) is what lets the rows claimed
 * without SQL record their claim (lifecycle.c), as the statement's do.
 * Returns how many were claimed, emitted into rsinfo in claim order.
 */
static int
claim_one_range(ClaimRequest *r, const char *tenant, int64 lease, OrchArgs *a, ReturnSetInfo *rsinfo)
{
	ClaimStart	st;
	OrchClaimWant w = {0};
	Datum	   *v = palloc(sizeof(Datum) * ORCH_CLAIMED_COLS * r->batch);
	bool	   *n = palloc(sizeof(bool) * ORCH_CLAIMED_COLS * r->batch);
	int			claimed;

	claim_start(&st, r->queue, tenant);
	orch_claim_taken(r->queue, false);
	w.queue = r->queue;
	w.tenant = tenant;
	w.worker = r->worker;
	w.batch = r->batch;
	w.lease = lease;
	w.due = Max(Max(GetCurrentTransactionStartTimestamp(), GetCurrentStatementStartTimestamp()),
				st.counted_at);
	w.from = st.from;
	w.step_claimable = orch_schema_step_claimable() ? step_claimable : NULL;
	claimed = orch_tasks_claim_direct(orch_task_updating, &w, v, n);
	if (claimed < 0)
	{
		/* the claim statement; the next claim starts at its first task */
		OrchClaimPos first = {0};

		claim_start_args(a, &st);
		orch_args_sql(a, claim_sql(tenant, tenant == NULL), false, 0, SPI_OK_SELECT);
		claimed = (int) SPI_processed;
		if (claimed > 0)
		{
			orch_spi_values(SPI_tuptable, 0, 1, ORCH_CLAIMED_COLS, v, n);
			first.valid = true;
			first.id = DatumGetInt64(v[0]);
			first.priority = DatumGetInt32(v[5]);
			first.created_at = DatumGetTimestampTz(v[11]);
		}
		emit_claimed(rsinfo);
		claim_started(&st, r->queue, tenant, &first, false);
		return claimed;
	}
	if (claimed > 0)
		orch_tasks_updated();
	for (int i = 0; i < claimed; i++)
		emit_row(rsinfo, v + (size_t) i * ORCH_CLAIMED_COLS, n + (size_t) i * ORCH_CLAIMED_COLS);
	claim_started(&st, r->queue, tenant, &w.next, true);
	return claimed;
}

/*
 * One look for work: claims up to r->batch tasks into rsinfo's tuplestore;
 * returns how many.  For a claim that waits (next not NULL), when it claims
 * none, *next is when the queue may have work without a commit (its next
 * delayed task due, its next lease out; 0: none known).
 */
static int
claim_once(ClaimRequest *r, ReturnSetInfo *rsinfo, TimestampTz *next)
{
	int			ev;
	QueueSettings qs;
	bool		paused;
	OrchArgs	a = {0};
	Datum		tenants;
	bool		all_tenants;
	char	   *tenant = r->tenant;
	int64		lease = r->lease;
	int			claimed;

	if (next)
		*next = 0;
	SPI_connect();
	if (!orch_load_queue(r->queue, &qs, &paused) || paused)
	{
		SPI_finish();
		return 0;				/* unknown or paused queue: no work */
	}
	if (lease < 0)
		lease = qs.lease;

	/*
	 * Which tenants: the one asked for (the caller must be allowed it), else
	 * a bound caller's own, else all.
	 */
	if (tenant == NULL)
		tenant = orch_caller_only_tenant();	/* bound to one: its own index range */
	if (tenant)
	{
		orch_require_tenant(tenant);
		tenants = orch_text_array1(tenant);
		all_tenants = false;
		if (orch_citus())
			orch_scope_tenant(tenant);
	}
	else
		tenants = orch_caller_tenants_datum(&all_tenants);

	orch_claim_housekeeping(r->queue, all_tenants ? (Datum) 0 : tenants);

	orch_arg_text(&a, r->queue);
	orch_arg_int4(&a, r->batch);
	orch_arg_text(&a, r->worker);
	orch_arg_interval(&a, lease);
	/* $5 as claim_sql takes it: the tenant, the claim's tenants, or none (all) */
	if (tenant)
		orch_arg_text(&a, tenant);
	else if (!all_tenants)
		orch_arg(&a, TEXTARRAYOID, tenants, false);
	ev = orch_set_event_context(r->worker, NULL);
	if (orch_citus())
	{
		orch_claim_taken(r->queue, false);
		claim_citus(r->queue, tenant, &qs, &a);
		orch_scope_clear();
		claimed = (int) SPI_processed;
		emit_claimed(rsinfo);
	}
	else if (qs.fair && (qs.fair_by_key || tenant == NULL) && orch_schema_fair_claims())
	{
		orch_claim_taken(r->queue, true);
		claimed = claim_fair(r->queue, r->worker, r->batch, lease,
							 all_tenants ? (Datum) 0 : tenants, &qs, rsinfo);
		orch_clear_event_context(ev);
		if (claimed == 0 && next)
			*next = orch_next_due(r->queue, all_tenants ? (Datum) 0 : tenants);
		SPI_finish();
		return claimed;
	}
	else if (qs.owner_limit > 0 || qs.queue_limit > 0)
	{
		orch_claim_taken(r->queue, true);
		claimed = claim_limited(r->queue, r->worker, r->batch, lease, tenants, all_tenants, &qs,
								rsinfo);
		orch_clear_event_context(ev);
		if (claimed == 0 && next && !orch_citus())
			*next = orch_next_due(r->queue, all_tenants ? (Datum) 0 : tenants);
		SPI_finish();
		return claimed;
	}
	else if (tenant || all_tenants)
	{
		if (!tenant)
			orch_arg_text(&a, NULL);	/* ($5: no tenant) */
		claimed = claim_one_range(r, tenant, lease, &a, rsinfo);
	}
	else
	{
		/* each tenant's best rows locked, the best of them claimed */
		orch_claim_taken(r->queue, true);
		orch_args_sql(&a, claim_sql(tenant, all_tenants), false, 0, SPI_OK_SELECT);
		claimed = (int) SPI_processed;
		emit_claimed(rsinfo);
	}
	orch_clear_event_context(ev);
	if (claimed == 0 && next && !orch_citus())
		*next = orch_next_due(r->queue, all_tenants ? (Datum) 0 : tenants);
	SPI_finish();
	return claimed;
}

/*
 * A claim that waits (wait > 0): looks, and while it finds nothing sleeps
 * until woken by a commit that made a task of its queue claimable, until
 * the queue's next delayed task or expired lease, or until the wait ends;
 * then looks again (claim_wait.c).
 */
static void
claim_waiting(ClaimRequest *r, int64 wait, ReturnSetInfo *rsinfo)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait / 1000);

	orch_claim_wait_begin(!orch_citus());
	for (int look = 0;; look++)
	{
		TimestampTz next;

		/*
		 * The claim's statements measure due times (and on Citus leases)
		 * from statement_timestamp(): a later look's is the time of the
		 * look, so that it sees what came due meanwhile.
		 */
		if (look > 0)
			SetCurrentStatementStartTimestamp();
		orch_claim_wait_prepare(r->queue);
		/* a queue paused or resumed, its settings changed, meanwhile */
		AcceptInvalidationMessages();
		if (claim_once(r, rsinfo, &next) > 0 || GetCurrentTimestamp() >= deadline)
			break;
		orch_claim_wait_sleep(next, deadline);
	}
	orch_claim_wait_done();
}

/*
 * orch_dequeue(queue, worker, batch, lease, tenant, wait)
 *	  -> (task_id, lease_token, attempt, payload, queue, priority, step_key,
 *		  guard, lease_expires_at, resume_data)
 */
Datum
orch_dequeue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ClaimRequest r;
	int64		wait;

	orch_require_arg(fcinfo, 0, "queue");
	orch_require_arg(fcinfo, 1, "worker");
	r.queue = orch_text_arg(fcinfo, 0);
	orch_check_name(r.queue, "queue");
	r.worker = orch_key_arg(fcinfo, 1, "worker");
	if (r.worker[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("worker must not be empty")));
	r.batch = orch_int4_arg(fcinfo, 2, "batch", 1, orch_max_batch_size, 1);
	r.lease = orch_interval_arg(fcinfo, 3, "lease", -1);
	r.tenant = orch_text_arg(fcinfo, 4);
	wait = orch_interval_arg(fcinfo, 5, "wait", 0);
	if (wait > (int64) orch_max_claim_wait * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must be at most orchestrator.max_claim_wait (%d s)", orch_max_claim_wait)));
	if (wait > 0 && IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a claim that waits needs READ COMMITTED"),
				 errdetail("Under REPEATABLE READ or SERIALIZABLE it would never see the tasks committed while it waits.")));
	if (orch_citus())
	{
		/* one tenant, so that every statement below is single-shard */
		if (r.tenant == NULL)
			r.tenant = orch_caller_only_tenant();
		orch_require_one_tenant(r.tenant, "orch_dequeue");
	}

	/* the rows' description as the caller expects it (not built again from pg_proc) */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (wait > 0)
		claim_waiting(&r, wait, rsinfo);
	else
		(void) claim_once(&r, rsinfo, NULL);
	return (Datum) 0;
}

/*
 * orch.step_claimable(run_id, tenant, step_key) -> boolean
 *	  May a claim hand out this task now?  True for a plain task (run_id
 *	  NULL); for a workflow step's task, when its run is running (not paused,
 *	  waiting, finished) within its deadline, or the task is a compensation.
 *	  Called by the claim statements, inside orch_dequeue, once per step task
 *	  they come by; read-only, with the claim statement's snapshot (as the
 *	  sub-query it replaces: the statement sees the runs as it saw the tasks).
 */
Datum
orch_step_claimable(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(true);
	if (PG_ARGISNULL(1))
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(step_claimable(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), PG_GETARG_DATUM(2),
								  PG_ARGISNULL(2)));
}
