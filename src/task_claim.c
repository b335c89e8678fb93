/*
 * task_claim.c
 *	  Claims written without SQL.  orch_dequeue's claim of one tenant or of
 *	  every tenant reads the queue's claimable tasks in claim order from its
 *	  claim index (task_cache.c finds it: a btree on the claim keys holding
 *	  every claimable row), from where the worker's previous claim started,
 *	  with a fresh snapshot; checks each as the claim statement does (due,
 *	  of the tenant asked for); gives it the claim's values, passes the new
 *	  row through the row trigger's work (a hook, the lifecycle trigger's
 *	  code) and writes it with the access method's update, which neither
 *	  waits nor locks the row apart: a row another transaction holds is
 *	  passed over, as FOR UPDATE SKIP LOCKED passes it (one this
 *	  transaction holds is locked and taken, as SKIP LOCKED takes it), and
 *	  the lock record the claim statement writes for each row before its
 *	  update is not written.  The index entries of the new version are made
 *	  for the indexes whose predicate it meets (task_cache.c).  The caller
 *	  does the statement-end trigger's work, and starts the worker's next
 *	  claim where this one says: at the first task it took or passed over
 *	  held or not yet due (dequeue.c).
 *
 *	  The row trigger's work is done before the update, which may then find
 *	  the row held: a task whose trigger work does no more than draw an
 *	  event id (left unused then) is updated at once: queued, of no
 *	  workflow run, with no concurrency key, recording no earlier claim.
 *	  Any other (a step's task, a keyed one, a retry or a resumed task) is
 *	  first locked without waiting, as the claim statement locks it (a
 *	  lock record), and only then passed through the trigger's work; a
 *	  step's task only while its run may go on (the caller's question,
 *	  orch.step_claimable, asked in the claim's snapshot).  It is not used
 *	  where the claim statement would behave otherwise (task_update.c's
 *	  conditions: a trigger of yours, row security that applies, Citus,
 *	  ...), nor under REPEATABLE READ or SERIALIZABLE (the claim
 *	  statement's serialization errors), nor without a claim index or the
 *	  step question (a schema before 0.8.0).
 *
 *	  A row another transaction changed and committed since the snapshot
 *	  is passed over by this claim (the next takes it), as the claim
 *	  statement's update by ctid does.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "orchestrator.h"

/* The columns a claim reads or sets */
enum
{
	CC_ID, CC_TENANT, CC_QUEUE, CC_PRIORITY, CC_CREATED, CC_READY, CC_STATE, CC_RUN, CC_KEY,
	CC_CLAIM_EVENT, CC_ATTEMPTS, CC_TOKEN, CC_OWNER, CC_EXPIRES, CC_CLAIMED_AT, CC_RETRY_AT,
	CC_REASON, CC_TIMEOUT, CC_PAYLOAD, CC_STEP, CC_RESUME,
	CC_COUNT
};

static const char *const claim_cols[CC_COUNT] = {
	"id", "tenant_id", "queue", "priority", "created_at", "ready_at", "state", "run_id",
	"concurrency_key", "claim_event_id", "attempts", "lease_token", "lease_owner",
	"lease_expires_at", "claimed_at", "retry_at", "reason_code", "timeout", "payload",
	"step_key", "resume_data"
};

/* ... of these types (another: the claim statement) */
static const Oid claim_types[CC_COUNT] = {
	INT8OID, TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT8OID,
	TEXTOID, INT8OID, INT4OID, UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TEXTOID, INTERVALOID, JSONBOID, TEXTOID, JSONBOID
};

/* What a claimed row hands back (ORCH_CLAIMED_COLS), in order */
static const int claimed_out[ORCH_CLAIMED_COLS] = {
	CC_ID, CC_TOKEN, CC_ATTEMPTS, CC_PAYLOAD, CC_QUEUE, CC_PRIORITY, CC_STEP, CC_TENANT,
	CC_RUN, CC_EXPIRES, CC_RESUME, CC_CREATED
};

/* One claim's scan and what it writes with */
typedef struct ClaimScan
{
	OrchTaskWrites w;			/* the table, snapshot, row versions (task_update.c) */
	OrchClaimWant *want;
	OrchUpdateHook hook;
	IndexScanDesc scan;
	Datum		queue;			/* want->queue as text */
	bool		hashed;			/* the index leads with the queue's hash: rows of another queue too */
	TimestampTz now;			/* the claim's time: after its snapshot */
	struct
	{
		bool		known;
		int64		run_id;
		Datum		tenant;		/* (in the scan's memory) */
		bool		compensation;
		bool		answer;
	}			step;			/* the last step question's answer, for the next of its run */
} ClaimScan;

typedef enum
{
	CANDIDATE_TAKE,				/* claim it here */
	CANDIDATE_LOCK,				/* claim it here, locked first (its trigger work writes more) */
	CANDIDATE_LATER,			/* not due yet: passed over, the next claim starts no later */
	CANDIDATE_PASS				/* not claimable by this claim: the next */
} Candidate;

#define COL(s, k) ((s)->w.cols[k] - 1)

/*
 * The scan keys of the claim index (index columns: queue or its hash,
 * [tenant_id,] priority, created_at, id): the queue (hashed: its hash,
 * in the default collation), the tenant, and where the claim starts as a
 * row comparison (the index's own comparison functions and collations, as
 * the planner's index scan has them).
 */
static int
claim_keys(Relation ir, const OrchClaimWant *w, bool by_tenant, Datum queue, bool hashed,
		   ScanKey keys, ScanKey row)
{
	int			n = 0;
	AttrNumber	a = 1;
	Datum		from[3] = {Int32GetDatum(w->from.priority), TimestampTzGetDatum(w->from.created_at),
	Int64GetDatum(w->from.id)};
	Oid			types[3] = {INT4OID, TIMESTAMPTZOID, INT8OID};

	if (hashed)
		ScanKeyEntryInitialize(&keys[n++], 0, a, BTEqualStrategyNumber, InvalidOid, InvalidOid,
							   F_INT8EQ, DirectFunctionCall2Coll(hashtextextended, DEFAULT_COLLATION_OID,
																 queue, Int64GetDatum(0)));
	else
		ScanKeyEntryInitialize(&keys[n++], 0, a, BTEqualStrategyNumber, InvalidOid,
							   ir->rd_indcollation[a - 1], F_TEXTEQ, queue);
	a++;
	if (by_tenant)
	{
		ScanKeyEntryInitialize(&keys[n++], 0, a, BTEqualStrategyNumber, InvalidOid,
							   ir->rd_indcollation[a - 1], F_TEXTEQ, CStringGetTextDatum(w->tenant));
		a++;
	}
	if (!w->from.valid)
		return n;
	for (int k = 0; k < 3; k++)
		ScanKeyEntryInitialize(&row[k], SK_ROW_MEMBER | (k == 2 ? SK_ROW_END : 0), a + k,
							   BTGreaterEqualStrategyNumber, types[k], ir->rd_indcollation[a + k - 1],
							   index_getprocid(ir, a + k, BTORDER_PROC), from[k]);
	MemSet(&keys[n], 0, sizeof(ScanKeyData));
	keys[n].sk_flags = SK_ROW_HEADER;
	keys[n].sk_attno = a;
	keys[n].sk_strategy = BTGreaterEqualStrategyNumber;
	keys[n].sk_argument = PointerGetDatum(row);
	return n + 1;
}

/*
 * May the step's task of the row found (its values ov, on) run now
 * (want->step_claimable)?  The answer depends on the run and on whether
 * the step is a compensation ("<step>:compensate"): it is kept for the
 * rest of the claim, asked again of another run (a map step's items come
 * one after another).
 */
static bool
step_may_run(ClaimScan *s, const Datum *ov, const bool *on)
{
	Datum		run_id = ov[COL(s, CC_RUN)];
	Datum		tenant = ov[COL(s, CC_TENANT)];
	bool		step_null = on[COL(s, CC_STEP)];
	text	   *key = step_null ? NULL : DatumGetTextPP(ov[COL(s, CC_STEP)]);
	size_t		kl = key ? VARSIZE_ANY_EXHDR(key) : 0;
	bool		compensation = kl >= 11 && memcmp(VARDATA_ANY(key) + kl - 11, ":compensate", 11) == 0;
	MemoryContext old;

	if (s->step.known && s->step.run_id == DatumGetInt64(run_id) &&
		s->step.compensation == compensation && datumIsEqual(s->step.tenant, tenant, false, -1))
		return s->step.answer;
	s->step.answer = s->want->step_claimable(run_id, tenant, ov[COL(s, CC_STEP)], step_null);
	if (s->step.known)
		pfree(DatumGetPointer(s->step.tenant));
	old = MemoryContextSwitchTo(s->w.work);
	s->step.tenant = datumCopy(tenant, false, -1);
	MemoryContextSwitchTo(old);
	s->step.run_id = DatumGetInt64(run_id);
	s->step.compensation = compensation;
	s->step.known = true;
	return s->step.answer;
}

/* Is the text value this string (compared in place, no copy per row)? */
static bool
text_is(Datum value, const char *str)
{
	text	   *t = DatumGetTextPP(value);
	size_t		len = VARSIZE_ANY_EXHDR(t);

	return len == strlen(str) && memcmp(VARDATA_ANY(t), str, len) == 0;
}

/*
 * Is a row of this queue (text) of the claim's?  Only an index led by the
 * queue's hash holds another's, of the same hash.
 */
static bool
of_queue(ClaimScan *s, Datum queue)
{
	return !s->hashed || text_is(queue, s->want->queue);
}

/* Is a row of this tenant (text) one of the tenant the claim is for (every tenant: any)? */
static bool
of_tenant(ClaimScan *s, Datum tenant)
{
	return s->want->tenant == NULL || text_is(tenant, s->want->tenant);
}

/*
 * Is the row found (its values ov, on: read in place, in the scan's
 * buffer) one this claim takes here?
 */
static Candidate
candidate(ClaimScan *s, const Datum *ov, const bool *on)
{
	if (on[COL(s, CC_READY)] || !of_queue(s, ov[COL(s, CC_QUEUE)]))
		return CANDIDATE_PASS;
	/* another tenant's row does not hold the next start, due or not */
	if (!of_tenant(s, ov[COL(s, CC_TENANT)]))
		return CANDIDATE_PASS;
	if (DatumGetTimestampTz(ov[COL(s, CC_READY)]) > s->want->due)
		return CANDIDATE_LATER; /* not due (the claim statement's ready_at <= due) */
	if (on[COL(s, CC_STATE)])
		return CANDIDATE_PASS;	/* (state is NOT NULL) */
	if (!on[COL(s, CC_RUN)] && !step_may_run(s, ov, on))
		return CANDIDATE_PASS;	/* its run may not go on now */
	/* their trigger work writes more than an event id: locked first */
	if (!text_is(ov[COL(s, CC_STATE)], "queued") ||
		!on[COL(s, CC_RUN)] || !on[COL(s, CC_KEY)] || !on[COL(s, CC_CLAIM_EVENT)])
		return CANDIDATE_LOCK;
	return CANDIDATE_TAKE;
}

/*
 * Is the row version found held by another transaction still running
 * (another claim's, say)?  Read before any work is done on the row: the
 * update itself decides, this only spares the work for a row that would
 * be passed over (as FOR UPDATE SKIP LOCKED tries the lock first).
 */
static bool
held_elsewhere(TupleTableSlot *slot)
{
	BufferHeapTupleTableSlot *b = (BufferHeapTupleTableSlot *) slot;
	uint16		mask;
	TransactionId xmax;

	if (!TTS_IS_BUFFERTUPLE(slot) || !BufferIsValid(b->buffer))
		return false;
	LockBuffer(b->buffer, BUFFER_LOCK_SHARE);
	mask = b->base.tuple->t_data->t_infomask;
	xmax = HeapTupleHeaderGetRawXmax(b->base.tuple->t_data);
	LockBuffer(b->buffer, BUFFER_LOCK_UNLOCK);
	if ((mask & (HEAP_XMAX_INVALID | HEAP_XMAX_IS_MULTI)) || !TransactionIdIsNormal(xmax))
		return false;
	return !TransactionIdIsCurrentTransactionId(xmax) && TransactionIdIsInProgress(xmax);
}

/*
 * The next claim starts at this task (priority, created_at, id) unless at
 * an earlier one: the first task the claim took or passed over for being
 * held elsewhere or not due yet (its scan reads in claim order).  What it
 * passed over before may become claimable again only by a commit the
 * queue's count sees (dequeue.c); these may without one.
 */
static void
next_from(ClaimScan *s, Datum priority, Datum created_at, Datum id)
{
	if (s->want->next.valid)
		return;
	s->want->next.valid = true;
	s->want->next.priority = DatumGetInt32(priority);
	s->want->next.created_at = DatumGetTimestampTz(created_at);
	s->want->next.id = DatumGetInt64(id);
}

/* ... at the row found (its values v, read in place) */
static void
next_from_row(ClaimScan *s, const Datum *v)
{
	next_from(s, v[COL(s, CC_PRIORITY)], v[COL(s, CC_CREATED)], v[COL(s, CC_ID)]);
}

/*
 * ... at the row found, not taken, unless another queue's or another
 * tenant's (the default tenant's claim reads the queue's index of every
 * tenant); the claim index's columns are NOT NULL
 */
static void
next_from_found(ClaimScan *s)
{
	bool		isnull;

	if (s->want->next.valid ||
		!of_queue(s, slot_getattr(s->w.found, COL(s, CC_QUEUE) + 1, &isnull)) ||
		!of_tenant(s, slot_getattr(s->w.found, COL(s, CC_TENANT) + 1, &isnull)))
		return;
	next_from(s, slot_getattr(s->w.found, COL(s, CC_PRIORITY) + 1, &isnull),
			  slot_getattr(s->w.found, COL(s, CC_CREATED) + 1, &isnull),
			  slot_getattr(s->w.found, COL(s, CC_ID) + 1, &isnull));
}

/* The claim's values on the row taken, in its new version (CLAIM_SET in dequeue.c) */
static void
claim_values(ClaimScan *s)
{
	Datum	   *v = s->w.nslot->tts_values;
	bool	   *n = s->w.nslot->tts_isnull;
	int32		attempts;
	TimestampTz expires;

	if (pg_add_s32_overflow(DatumGetInt32(s->w.ov[COL(s, CC_ATTEMPTS)]), 1, &attempts))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("integer out of range")));
	expires = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(s->now),
													  IntervalPGetDatum(orch_usecs_interval(s->want->lease))));
	if (!s->w.on[COL(s, CC_TIMEOUT)])
		expires = Min(expires,
					  DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(s->now),
															  s->w.ov[COL(s, CC_TIMEOUT)])));
#define SET(k, d) do { v[COL(s, k)] = (d); n[COL(s, k)] = false; } while (0)
	SET(CC_STATE, CStringGetTextDatum("executing"));
	SET(CC_ATTEMPTS, Int32GetDatum(attempts));
	SET(CC_TOKEN, UUIDPGetDatum(orch_new_uuid()));
	SET(CC_OWNER, CStringGetTextDatum(s->want->worker));
	SET(CC_EXPIRES, TimestampTzGetDatum(expires));
	SET(CC_CLAIMED_AT, TimestampTzGetDatum(s->now));
	SET(CC_REASON, CStringGetTextDatum("claimed"));
#undef SET
	v[COL(s, CC_RETRY_AT)] = (Datum) 0;
	n[COL(s, CC_RETRY_AT)] = true;
}

/*
 * The row locked without waiting: TM_Ok when this transaction holds it
 * now (it held it already, or nobody did), else it is held elsewhere or
 * changed since the snapshot.
 */
static TM_Result
claim_lock(ClaimScan *s)
{
	return orch_task_writes_lock(&s->w, LockTupleExclusive, LockWaitSkip);
}

/* Does the running server check assertions (whatever the headers this was built with said)? */
static bool
server_asserts(void)
{
	static int	asserts = -1;

	if (asserts < 0)
	{
		const char *v = GetConfigOption("debug_assertions", true, false);

		asserts = v != NULL && strcmp(v, "on") == 0;
	}
	return asserts == 1;
}

/*
 * Write the claimed row; false when another transaction holds it (or
 * changed it since the snapshot): passed over.  The update does not wait
 * (the table AM's "wait" false): a row held by anyone comes back as
 * TM_BeingModified, and is then locked without waiting (a row this
 * transaction holds is taken, one held elsewhere passed over) and
 * updated; a row locked already (s->w.locked) is updated.  PostgreSQL's
 * heap asserts that no caller updates without waiting (while returning
 * TM_BeingModified as the table AM says it should): a server that checks
 * assertions locks every row first, as the claim statement does (a lock
 * record per row).
 */
static bool
claim_write(ClaimScan *s)
{
	TM_Result	r;

	if (!s->w.locked && server_asserts() && claim_lock(s) != TM_Ok)
		return false;
	r = orch_task_writes_update(&s->w, false);
	if (r == TM_BeingModified && claim_lock(s) == TM_Ok)
		r = orch_task_writes_update(&s->w, false);
	return r == TM_Ok;
}

/* The claimed row's values handed back, copied into cxt */
static void
claimed_row(ClaimScan *s, MemoryContext cxt, Datum *out, bool *out_nulls)
{
	TupleDesc	desc = RelationGetDescr(s->w.rel);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	for (int k = 0; k < ORCH_CLAIMED_COLS; k++)
	{
		int			a = COL(s, claimed_out[k]);
		Form_pg_attribute att = TupleDescAttr(desc, a);

		out_nulls[k] = s->w.nslot->tts_isnull[a];
		out[k] = (Datum) 0;
		if (out_nulls[k])
			continue;
		if (att->attlen == -1)
			out[k] = PointerGetDatum(PG_DETOAST_DATUM_COPY(s->w.nslot->tts_values[a]));
		else
			out[k] = datumCopy(s->w.nslot->tts_values[a], att->attbyval, att->attlen);
	}
	MemoryContextSwitchTo(old);
}

/*
 * The next candidate of the scan claimed; 1 when claimed (its row into
 * out), 0 when passed over, -1 when the scan ended.
 */
static int
claim_next(ClaimScan *s, MemoryContext cxt, Datum *out, bool *out_nulls)
{
	Candidate	c;
	/* the scan's own memory lives as long as the scan; the row's, one row */
	MemoryContext rowcxt = MemoryContextSwitchTo(s->w.work);
	bool		more = index_getnext_slot(s->scan, ForwardScanDirection, s->w.found);

	MemoryContextSwitchTo(rowcxt);
	if (!more)
		return -1;
	if (held_elsewhere(s->w.found))
	{
		next_from_found(s);
		ExecClearTuple(s->w.found);
		return 0;
	}
	/* decided on the row in place, in the buffer: only a row taken is copied */
	slot_getallattrs(s->w.found);
	c = candidate(s, s->w.found->tts_values, s->w.found->tts_isnull);
	if (c != CANDIDATE_PASS)
		next_from_row(s, s->w.found->tts_values);
	if (c == CANDIDATE_PASS || c == CANDIDATE_LATER)
	{
		ExecClearTuple(s->w.found);
		return 0;
	}
	orch_task_writes_take(&s->w);
	if (c == CANDIDATE_LOCK && claim_lock(s) != TM_Ok)
		return 0;				/* held elsewhere, or changed since the snapshot */
	claim_values(s);
	orch_task_writes_derive(&s->w, s->hook);
	if (!claim_write(s))
		return 0;
	claimed_row(s, cxt, out, out_nulls);
	return 1;
}

/*
 * Claim up to want->batch tasks of want->queue without SQL, in claim
 * order (hook: the row trigger's work on an update).  Their rows go into
 * out and out_nulls (ORCH_CLAIMED_COLS values each, allocated in the
 * caller's memory context), and where the next claim starts into
 * want->next.  Returns how many, or -1, having claimed nothing, when the
 * claim statement must claim.  The caller does the statement-end
 * trigger's work when any was claimed.
 */
int
orch_tasks_claim_direct(OrchUpdateHook hook, OrchClaimWant *want, Datum *out, bool *out_nulls)
{
	MemoryContext caller = CurrentMemoryContext;
	bool		by_tenant = want->tenant != NULL && strcmp(want->tenant, ORCH_DEFAULT_TENANT) != 0;
	Oid			index;
	bool		hashed;
	Relation	ir;
	ClaimScan	s = {0};
	ScanKeyData keys[3];
	ScanKeyData row[3];
	int			nkeys;
	int			done = 0;

	want->next.valid = false;
	if (want->batch <= 0 || want->step_claimable == NULL || IsolationUsesXactSnapshot() ||
		!orch_task_writes_begin(&s.w, CC_COUNT, claim_cols, claim_types))
		return -1;
	if (!OidIsValid(index = orch_task_cache_claim_index(s.w.cache, by_tenant, &hashed)))
	{
		orch_task_writes_end(&s.w, false);
		return -1;
	}
	s.want = want;
	s.hook = hook;
	/*
	 * The claim's time (claimed_at; its lease runs from it) is read after
	 * the snapshot: a task the claim finds was let go (its lease recovered,
	 * its attempt failed) before it, whenever the statement began.
	 */
	s.now = GetCurrentTimestamp();
	s.queue = CStringGetTextDatum(want->queue);
	s.hashed = hashed;
	ir = index_open(index, RowExclusiveLock);
	nkeys = claim_keys(ir, want, by_tenant, s.queue, hashed, keys, row);
	s.scan = index_beginscan(s.w.rel, ir, s.w.snap, nkeys, 0);
	index_rescan(s.scan, keys, nkeys, NULL, 0);

	while (done < want->batch)
	{
		MemoryContext rowcxt;
		int			r;

		CHECK_FOR_INTERRUPTS();
		rowcxt = MemoryContextSwitchTo(GetPerTupleMemoryContext(s.w.estate));
		r = claim_next(&s, caller, out + (size_t) done * ORCH_CLAIMED_COLS,
					   out_nulls + (size_t) done * ORCH_CLAIMED_COLS);
		MemoryContextSwitchTo(rowcxt);
		orch_task_writes_next(&s.w);
		if (r < 0)
			break;
		done += r;
	}

	index_endscan(s.scan);
	index_close(ir, NoLock);
	orch_task_writes_end(&s.w, done > 0);
	return done;
}
