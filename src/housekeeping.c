/*
 * housekeeping.c
 *	  What a claim and a maintenance pass both do before their own work:
 *	  expired leases recovered as failed attempts, delayed tasks that came due
 *	  made claimable, and the deferred key decisions this leaves settled.
 *	  A claim does it for its queue and tenants, a little at a time, and only
 *	  what one probe found (orch_claim_housekeeping); orch_maintain does it for
 *	  every queue in batches.  Every statement uses SKIP LOCKED and re-checks
 *	  each row under its lock, so it never overwrites what a worker finished
 *	  meanwhile.  The caller is connected to SPI.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

/* how much one claim recovers (and four times that it wakes) */
#define RECOVER_PER_CLAIM 16

/* the claim's tenants as a text[] parameter: (Datum) 0 is every tenant */
static void
arg_tenants(OrchArgs *a, Datum tenants)
{
	orch_arg(a, TEXTARRAYOID, tenants, tenants == (Datum) 0);
}

/*
 * Recover up to limit executing tasks whose lease (capped by the task's
 * timeout) has passed, of one queue or (queue NULL) of all.  Each is a failed
 * attempt, class TRANSIENT, outcome lease_expired or timed_out, decided by
 * the task's policy.  Rows another session holds are skipped; a row a worker
 * finished meanwhile no longer matches.
 */
int
orch_recover_expired(const char *queue, int limit, Datum tenants)
{
	OrchArgs	a = {0};
	int			n;
	int64	   *ids;
	int			recovered = 0;

	orch_arg_int4(&a, limit);
	if (queue)
	{
		orch_arg_text(&a, queue);
		arg_tenants(&a, tenants);
		n = (int) orch_args_sql(&a, "SELECT id FROM orch.tasks" ORCH_EXPIRED_WHERE
								" ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED",
								false, 0, SPI_OK_SELECT);
	}
	else
	{
		arg_tenants(&a, tenants);
		n = (int) orch_args_sql(&a, "SELECT id FROM orch.tasks"
								" WHERE state = 'executing' AND lease_expires_at <= statement_timestamp()"
								"   AND " ORCH_TENANT_IN("tenant_id", "$2")
								" ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED",
								false, 0, SPI_OK_SELECT);
	}
	if (n == 0)
		return 0;
	ids = palloc(sizeof(int64) * n);
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}

	for (int i = 0; i < n; i++)
	{
		OrchTask	t;
		const char *why;
		int			ev;

		/* re-check under our lock: still executing with an expired lease */
		if (!orch_lock_task(ids[i], &t) || t.state != TS_EXECUTING || !t.lease_expired)
			continue;
		why = t.timed_out ? "timeout passed" : "lease expired";
		ev = orch_set_event_context("orchestrator", why);
		orch_fail_locked(&t, EC_TRANSIENT, why, false, 0,
						 t.timed_out ? "timed_out" : "lease_expired", NULL);
		orch_clear_event_context(ev);
		recovered++;
	}
	return recovered;
}

/*
 * Tasks that are not due yet (queued with a future run_at, or waiting to
 * retry) are "delayed": not claimable and outside the claim index (the
 * lifecycle trigger takes them out), so that claims never step over them and
 * a keyed one holds no slot.  Once due, they are made claimable here, keyed
 * ones through the gate (the task trigger).  Of one queue, or (queue NULL)
 * of every queue.
 */
int
orch_wake_delayed(const char *queue, int limit, Datum tenants)
{
	OrchArgs	a = {0};

	if (queue == NULL)
	{
		int			nq;
		char	  **names;
		int			woken = 0;

		nq = (int) orch_sql("SELECT name FROM orch.queues ORDER BY name", 0, NULL, NULL, NULL,
							true, 0, SPI_OK_SELECT);
		names = orch_spi_column(1);
		for (int i = 0; i < nq && woken < limit; i++)
			woken += orch_wake_delayed(names[i], limit - woken, tenants);
		return woken;
	}

	orch_arg_int4(&a, limit);
	orch_arg_text(&a, queue);
	arg_tenants(&a, tenants);
	/* a read-only probe first: the UPDATE's set-up costs more than the look */
	if (orch_args_sql(&a, "SELECT 1 FROM orch.tasks" ORCH_DELAYED_WHERE " LIMIT $1",
					  false, 1, SPI_OK_SELECT) == 0)
		return 0;
	return (int) orch_args_sql(&a, "UPDATE orch.tasks t SET ready_at = coalesce(t.retry_at, t.run_at)"
							   " WHERE t.id = ANY (ARRAY(SELECT id FROM orch.tasks" ORCH_DELAYED_WHERE
							   "       ORDER BY coalesce(retry_at, run_at) LIMIT $1"
							   "       FOR UPDATE SKIP LOCKED))"
							   "   AND " ORCH_TENANT_IN("t.tenant_id", "$3"),
							   false, 0, SPI_OK_UPDATE);
}

/*
 * Before a claim: is there an expired lease to recover, a delayed task now
 * due, a deferred key decision to settle?  One statement looks for all
 * three (each is usually absent); only what it finds is then worked on.
 * It reads the queue's next lease to run out and next delayed task to come
 * due within horizon microseconds, which say how long nothing will be
 * found (*until; 0: nothing within the horizon).
 * The task looks are ordered scalar sub-queries, not EXISTS: EXISTS drops
 * the ORDER BY, and a plan that expects to find a row soon may then read
 * the whole table to find none.
 */
static void
probe(const char *queue, Datum tenants, int64 horizon, bool *expired, bool *due, bool *repairs,
	  TimestampTz *until)
{
	OrchArgs	a = {0};
	Datum		v[5];
	bool		n[5];

	orch_arg(&a, INT4OID, (Datum) 0, true);	/* $1 unused: the texts share their numbering */
	orch_arg_text(&a, queue);
	arg_tenants(&a, tenants);
	/* key decisions: of every tenant (on Citus, of the claim's) */
	orch_arg_scope_tenants(&a);
	orch_arg_interval(&a, horizon);
	/* bounded looks, as before the horizon: their index ranges end at it */
	if (orch_args_sql(&a, "SELECT s.lease_out <= statement_timestamp(), s.next_due <= " ORCH_NOW ", s.repairs,"
					  "       s.lease_out, s.next_due"
					  "  FROM (SELECT (SELECT lease_expires_at FROM orch.tasks"
					  "                 WHERE queue = $2 AND state = 'executing'"
					  "                   AND lease_expires_at <= statement_timestamp() + $5"
					  "                   AND " ORCH_TENANT_IN("tenant_id", "$3")
					  "                 ORDER BY lease_expires_at LIMIT 1) AS lease_out,"
					  "               (SELECT coalesce(retry_at, run_at) FROM orch.tasks"
					  "                 WHERE queue = $2 AND ready_at IS NULL AND NOT gated"
					  "                   AND (state = 'queued' OR (state = 'awaiting_tool' AND retry_at IS NOT NULL))"
					  "                   AND coalesce(retry_at, run_at) <= " ORCH_NOW " + $5"
					  "                   AND " ORCH_TENANT_IN("tenant_id", "$3")
					  "                 ORDER BY coalesce(retry_at, run_at) LIMIT 1) AS next_due,"
					  "               EXISTS (SELECT 1 FROM orch.gate_repairs WHERE queue = $2"
					  "                       AND " ORCH_TENANT_IN("tenant_id", "$4") ") AS repairs) s",
					  false, 1, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: claim probe failed");
	orch_spi_values(SPI_tuptable, 0, 1, 5, v, n);
	*expired = !n[0] && DatumGetBool(v[0]);
	*due = !n[1] && DatumGetBool(v[1]);
	*repairs = DatumGetBool(v[2]);
	*until = 0;
	for (int i = 3; i < 5; i++)
		if (!n[i] && (*until == 0 || DatumGetTimestampTz(v[i]) < *until))
			*until = DatumGetTimestampTz(v[i]);
}

/*
 * What a claim's probe found nothing of, kept for the backend's next
 * claims of the same queue and tenants: they skip the probe while the
 * queue's count of such work (claim_wait.c) is unchanged -- no commit wrote
 * a delayed task, moved one's due moment or noted a key decision -- for at most
 * orchestrator.claim_cache_max_age, and not past the next lease or due
 * moment the probe saw, nor a lease this backend's claims gave out since.
 * A lease another backend gave out since runs out unseen by them for at
 * most that long (as maintenance sees it only at its next pass).
 */
typedef struct ProbeSkip
{
	bool		valid;
	char	   *queue;			/* in TopMemoryContext */
	char	   *tenants;		/* the claim's tenants, joined; NULL: all */
	uint64		gen;
	TimestampTz kept_at;
	TimestampTz until;
} ProbeSkip;

static ProbeSkip skip = {false};

/* The tenants of a claim as one string (NULL: every tenant) */
static char *
tenants_key(Datum tenants)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	StringInfoData buf;

	if (tenants == (Datum) 0)
		return NULL;
	deconstruct_array(DatumGetArrayTypeP(tenants), TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	initStringInfo(&buf);
	for (int i = 0; i < n; i++)
	{
		appendStringInfoChar(&buf, '\x1f');
		if (!nulls[i])
			appendStringInfoString(&buf, TextDatumGetCString(elems[i]));
	}
	return buf.data;
}

static bool
skip_same(const char *queue, const char *tenants)
{
	return skip.valid && strcmp(skip.queue, queue) == 0 &&
		(skip.tenants == NULL ? tenants == NULL : tenants != NULL && strcmp(skip.tenants, tenants) == 0);
}

/* May this claim skip the probe (*gen: the queue's count, read first)? */
static bool
skip_holds(const char *queue, const char *tenants, uint64 *gen, bool *counted)
{
	TimestampTz now;

	*counted = orch_claim_cache_max_age > 0 && !IsolationUsesXactSnapshot() && !orch_citus() &&
		orch_claim_generation(queue, true, gen);
	now = GetCurrentTimestamp();	/* after the count was read */
	return *counted && skip_same(queue, tenants) && skip.gen == *gen && now < skip.until &&
		!TimestampDifferenceExceeds(skip.kept_at, now, orch_claim_cache_max_age);
}

static void
skip_keep(const char *queue, const char *tenants, uint64 gen, TimestampTz until)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz bound = TimestampTzPlusMilliseconds(now, orch_claim_cache_max_age);
	char	   *q = MemoryContextStrdup(TopMemoryContext, queue);
	char	   *t = tenants ? MemoryContextStrdup(TopMemoryContext, tenants) : NULL;

	if (skip.queue)
		pfree(skip.queue);
	if (skip.tenants)
		pfree(skip.tenants);
	skip.queue = q;
	skip.tenants = t;
	skip.gen = gen;
	skip.kept_at = now;
	skip.until = (until != 0 && until < bound) ? until : bound;
	skip.valid = true;
}

/*
 * This backend's claim of queue gave out a lease that runs out at out: the
 * claims that skip the probe do so only until then.
 */
void
orch_claim_housekeeping_leased(const char *queue, TimestampTz out)
{
	if (skip.valid && strcmp(skip.queue, queue) == 0 && out < skip.until)
		skip.until = out;
}

/*
 * Before a claim: recover the queue's expired leases, let due work in and
 * settle deferred key decisions, each only when the probe found some (or
 * skipped while an earlier probe's finding holds: above).
 * tenants: the claim's tenants, or (Datum) 0 for all.
 */
void
orch_claim_housekeeping(const char *queue, Datum tenants)
{
	bool		expired,
				due,
				repairs;
	TimestampTz until;
	char	   *key = tenants_key(tenants);
	uint64		gen = 0;
	bool		counted;

	if (skip_holds(queue, key, &gen, &counted))
		return;
	skip.valid = false;
	probe(queue, tenants, counted ? (int64) orch_claim_cache_max_age * 1000 : 0,
		  &expired, &due, &repairs, &until);
	if (!expired && !due && !repairs)
	{
		if (counted)
			skip_keep(queue, key, gen, until);
		return;
	}
	/* a recovered task may be due again at once, and may have freed a key */
	if (expired && orch_recover_expired(queue, RECOVER_PER_CLAIM, tenants) > 0)
		due = repairs = true;
	if (!due && !repairs)
		return;

	/*
	 * Letting due work in and settling deferred key decisions only tries key
	 * locks: a claim never waits for a producer's open transaction (what it
	 * cannot decide now is noted and settled later).
	 */
	orch_gate_set_try_only(true);
	PG_TRY();
	{
		/* waking keyed tasks may defer key decisions: settle them now */
		if (due && orch_wake_delayed(queue, RECOVER_PER_CLAIM * 4, tenants) > 0)
			repairs = true;
		if (repairs)
			orch_gate_repair(queue, RECOVER_PER_CLAIM);
	}
	PG_FINALLY();
	{
		orch_gate_set_try_only(false);
	}
	PG_END_TRY();
}

/*
 * When queue may have work without a commit: its next delayed task comes
 * due or its next lease runs out (tenants: the claim's, or (Datum) 0 for
 * all); 0 when neither is known.  For a claim that waits.
 */
TimestampTz
orch_next_due(const char *queue, Datum tenants)
{
	OrchArgs	a = {0};
	bool		isnull;
	Datum		d;

	orch_arg(&a, INT4OID, (Datum) 0, true);	/* $1 unused: the texts share their numbering */
	orch_arg_text(&a, queue);
	arg_tenants(&a, tenants);
	if (orch_args_sql(&a, "SELECT least((SELECT coalesce(retry_at, run_at) FROM orch.tasks"
					  "                WHERE queue = $2 AND ready_at IS NULL AND NOT gated"
					  "                  AND (state = 'queued' OR (state = 'awaiting_tool' AND retry_at IS NOT NULL))"
					  "                  AND " ORCH_TENANT_IN("tenant_id", "$3")
					  "                ORDER BY coalesce(retry_at, run_at) LIMIT 1),"
					  "             (SELECT lease_expires_at FROM orch.tasks"
					  "                WHERE queue = $2 AND state = 'executing'"
					  "                  AND " ORCH_TENANT_IN("tenant_id", "$3")
					  "                ORDER BY lease_expires_at LIMIT 1))",
					  true, 1, SPI_OK_SELECT) != 1)
		return 0;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetTimestampTz(d);
}
