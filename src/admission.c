/*
 * admission.c
 *	  Concurrency keys without head-of-line blocking.  Per (tenant, queue, key)
 *	  (0.4.0: keys are a tenant's own) at most
 *	  `limit` tasks are in the key's slot set: executing, or claimable
 *	  (ready_at set).  A task that would exceed it waits "gated" (ready_at NULL,
 *	  outside the claim index) and is promoted in priority/FIFO order when a
 *	  member leaves the set.  The lifecycle trigger calls the gate for every
 *	  writer; releases are collected per statement and promoted by an AFTER
 *	  STATEMENT trigger.  Every decision holds a transaction-scoped advisory
 *	  lock on (queue, key); no session-level advisory lock is ever taken.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "nodes/pg_list.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "orchestrator.h"


bool		orch_gate_promoting = false;
bool		orch_gate_handover = false;	/* a member is handing its slot over */

/* A key of a queue and tenant, noted at a (sub)transaction nesting level. */
typedef struct GateKey
{
	int			level;
	char	   *queue;
	char	   *key;
	char	   *tenant;
} GateKey;

/* keys whose slots were released, to promote at statement end (GateKey) */
static List *pending = NIL;

/*
 * Key locks this transaction holds (GateKey, in TopTransactionContext).  A
 * transaction that already holds one key lock never waits for another: two
 * transactions taking two keys in opposite orders (complete a task of key A,
 * then enqueue one of key B, and the reverse) would deadlock.  It tries the
 * lock instead, and when another transaction holds it, decides
 * conservatively (the task waits gated; no promotion) and records the key in
 * orch.gate_repairs, which the next claim of the queue, or orch_maintain,
 * settles under the lock once this transaction has committed.
 */
/* Set while a claim lets work in: key locks are then only tried, never waited for. */
static bool gate_try_only = false;

static List *held_keys = NIL;

/* What else a transaction's end or an aborted subtransaction resets */
static void
gate_reset(bool xact_end)
{
	if (xact_end)
	{
		gate_try_only = false;
		orch_gate_handover = false;
	}
	orch_gate_promoting = false;
}

/* An aborted subtransaction takes back what it noted (its key locks go with it). */
static OrchXactLists gate_state = {{&pending, &held_keys}, gate_reset};

/* The advisory lock name of a tenant's key. */
static char *
key_lock_name(const char *key, const char *tenant)
{
	return psprintf("%s\x1f%s", tenant, key);
}

/*
 * Take the key's transaction-scoped lock: waiting for it when this
 * transaction holds no other key lock, else only trying (see held_keys).
 * False when the lock is held elsewhere and was not taken.
 */
/* Is the key in the list? */
static bool
has_key(List *keys, const char *queue, const char *key, const char *tenant)
{
	ListCell   *lc;

	foreach(lc, keys)
	{
		GateKey    *e = (GateKey *) lfirst(lc);

		if (strcmp(e->queue, queue) == 0 && strcmp(e->key, key) == 0 &&
			strcmp(e->tenant, tenant) == 0)
			return true;
	}
	return false;
}

/* The list with the key added, in TopTransactionContext. */
static List *
add_key(List *keys, const char *queue, const char *key, const char *tenant)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	GateKey    *k = palloc(sizeof(GateKey));

	k->level = GetCurrentTransactionNestLevel();
	k->queue = pstrdup(queue);
	k->key = pstrdup(key);
	k->tenant = pstrdup(tenant);
	keys = lappend(keys, k);
	MemoryContextSwitchTo(old);
	return keys;
}

static bool
key_lock(const char *queue, const char *key, const char *tenant)
{
	orch_xact_lists_use(&gate_state);
	if (has_key(held_keys, queue, key, tenant))
		return true;
	if (held_keys == NIL && !gate_try_only)
		orch_xact_lock("key", queue, key_lock_name(key, tenant));
	else if (!orch_xact_try_lock("key", queue, key_lock_name(key, tenant)))
		return false;
	held_keys = add_key(held_keys, queue, key, tenant);
	return true;
}


/* A decision on the key was deferred: settle it after this transaction. */
static void
note_repair(const char *queue, const char *key, const char *tenant)
{
	OrchArgs	a = {0};

	orch_arg_text(&a, queue);
	orch_arg_text(&a, key);
	orch_arg_text(&a, tenant);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	orch_args_sql(&a, "INSERT INTO orch.gate_repairs (queue, key, tenant_id) VALUES ($1, $2, $3)"
				  " ON CONFLICT (queue, key, tenant_id) DO UPDATE SET noted_at = excluded.noted_at",
				  false, 0, SPI_OK_INSERT);
	SPI_finish();
	/* the queue's next claim looks for it (housekeeping.c) */
	orch_claim_due_note(queue);
}


/* (queue, key, tenant) rows of the last SPI result, as three arrays */
/*
 * The keys a statement selects as (queue, key, tenant) rows; its parameters
 * are $1 the queue (NULL: all), $2 a limit and $3 the tenants (all; on
 * Citus the one the call is scoped to).  A probe, when given, runs first:
 * no row from it, no keys.  once: plan sql with the values (a rare scan).
 */
static int
select_keys(const char *probe, const char *sql, bool once, const char *queue, int limit,
			char ***queues, char ***keys, char ***tenants)
{
	OrchArgs	a = {0};

	orch_arg_text(&a, queue);
	orch_arg_int4(&a, limit);
	orch_arg_scope_tenants(&a);
	/* read_only false: the probe sees the notes of this statement */
	if (probe && orch_args_sql(&a, probe, false, 1, SPI_OK_SELECT) == 0)
		return 0;
	if (once)
		orch_args_sql_once(&a, sql, false, 0, SPI_OK_SELECT);
	else
		orch_args_sql(&a, sql, false, 0, SPI_OK_SELECT);
	*queues = orch_spi_column(1);
	*keys = orch_spi_column(2);
	*tenants = orch_spi_column(3);
	return (int) SPI_processed;
}


/* While on, key locks are only tried (a claim letting work in never waits). */
void
orch_gate_set_try_only(bool on)
{
	gate_try_only = on;
}

/*
 * Settle deferred key decisions of one queue (NULL: all): under each key's
 * lock, demote beyond the limit and promote into free slots, then forget the
 * note.  Called by every claim of the queue before it claims, and by
 * orch_maintain.  Returns the number of keys settled.  Caller is connected
 * to SPI.
 */
int
orch_gate_repair(const char *queue, int limit)
{
	char	  **queues;
	char	  **keys;
	char	  **tenants;
	int			settled = 0;
	int			nkeys;

	/* a probe first: the table is almost always empty */
	nkeys = select_keys("SELECT 1 FROM orch.gate_repairs WHERE ($1::text IS NULL OR queue = $1)"
						"   AND " ORCH_TENANT_IN("tenant_id", "$3") " LIMIT $2",
						"SELECT queue, key, tenant_id FROM orch.gate_repairs"
						" WHERE ($1::text IS NULL OR queue = $1)"
						"   AND " ORCH_TENANT_IN("tenant_id", "$3")
						" ORDER BY queue, key, tenant_id LIMIT $2 FOR UPDATE SKIP LOCKED",
						false, queue, limit, &queues, &keys, &tenants);
	for (int i = 0; i < nkeys; i++)
	{
		OrchArgs	a = {0};

		if (!key_lock(queues[i], keys[i], tenants[i]))
			continue;			/* still busy: the next claim settles it */
		orch_gate_enforce(queues[i], keys[i], tenants[i]);
		orch_gate_promote(queues[i], keys[i], tenants[i]);
		orch_arg_text(&a, queues[i]);
		orch_arg_text(&a, keys[i]);
		orch_arg_text(&a, tenants[i]);
		orch_args_sql(&a, "DELETE FROM orch.gate_repairs WHERE queue = $1 AND key = $2 AND tenant_id = $3",
					  false, 0, SPI_OK_DELETE);
		settled++;
	}
	return settled;
}

void
orch_require_read_committed(void)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("concurrency and rate limits require READ COMMITTED isolation"),
				 errdetail("Slot and rate accounting must see other sessions' committed work."),
				 errhint("Run orchestrator calls in READ COMMITTED transactions.")));
}


/*
 * The key's limit and the size of its slot set, not counting task self_id.
 * Caller holds the key's advisory lock.
 */
static void
key_slots(const char *queue, const char *key, const char *tenant, int64 self_id,
		  int *limit, int64 *used)
{
	OrchArgs	a = {0};
	bool		isnull;

	orch_arg_text(&a, queue);
	orch_arg_text(&a, key);
	orch_arg_int8(&a, self_id);
	orch_arg_text(&a, tenant);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	orch_args_sql(&a, "SELECT coalesce((SELECT l.max_running FROM orch.concurrency_limits l"
				  "                 WHERE l.queue = $1 AND l.key = $2),"
				  "                (SELECT (q.settings ->> 'concurrency_key_limit')::numeric::int"
				  "                 FROM orch.queues q WHERE q.name = $1), 1),"
				  " (SELECT count(*) FROM orch.tasks t WHERE t.queue = $1"
				  "  AND t.concurrency_key = $2 AND t.tenant_id = $4 AND t.id <> $3"
				  "  AND (t.state = 'executing' OR t.ready_at IS NOT NULL))",
				  false, 1, SPI_OK_SELECT);
	*limit = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*used = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SPI_finish();
}


/*
 * May task self_id (priority, created_at) enter its key's slot set?  Called
 * by the lifecycle trigger before the row is written; rows written earlier in
 * the same statement are already counted.  Only executing tasks really hold
 * a slot: when the set is full but one of its members is merely claimable
 * and comes after this task in priority/FIFO order, that member goes back to
 * waiting (gated) and this task takes its place, so waiters are served in
 * order.
 */
bool
orch_gate_admit(const char *queue, const char *key, const char *tenant, int64 self_id,
				int32 priority, TimestampTz created_at, bool may_hand_over)
{
	int			limit;
	int64		used;
	OrchArgs	a = {0};
	OrchArgs	b = {0};
	bool		isnull;

	orch_require_read_committed();
	if (!key_lock(queue, key, tenant))
	{
		/* decided later, under the lock: wait gated meanwhile */
		note_repair(queue, key, tenant);
		return false;
	}
	key_slots(queue, key, tenant, self_id, &limit, &used);
	if (used < limit)
		return true;
	if (!may_hand_over)
	{
		/*
		 * A raw multi-row write: demoting another row here could touch one
		 * the statement has yet to reach.  Wait gated; the repair puts the
		 * key in order after the statement.
		 */
		note_repair(queue, key, tenant);
		return false;
	}

	orch_arg_text(&a, queue);
	orch_arg_text(&a, key);
	orch_arg_int8(&a, self_id);
	orch_arg_int4(&a, priority);
	orch_arg_timestamptz(&a, created_at);
	orch_arg_text(&a, tenant);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (orch_args_sql(&a, "SELECT id, tenant_id FROM orch.tasks"
					  " WHERE queue = $1 AND concurrency_key = $2 AND tenant_id = $6 AND id <> $3"
					  "   AND state <> 'executing' AND ready_at IS NOT NULL"
					  "   AND (priority, created_at, id) > ($4, $5, $3)"
					  " ORDER BY priority DESC, created_at DESC, id DESC"
					  " LIMIT 1 FOR UPDATE SKIP LOCKED",
					  false, 1, SPI_OK_SELECT) == 0)
	{
		SPI_finish();
		return false;
	}
	orch_arg(&b, INT8OID, SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), false);
	orch_arg_text(&b, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2));
	/* the slot passes to this task: no release for the gate to fill */
	orch_gate_handover = true;
	PG_TRY();
	{
		orch_args_sql(&b, "UPDATE orch.tasks SET gated = true, ready_at = NULL"
					  " WHERE id = $1 AND tenant_id = $2",
					  false, 0, SPI_OK_UPDATE);
	}
	PG_FINALLY();
	{
		orch_gate_handover = false;
	}
	PG_END_TRY();
	SPI_finish();
	return true;
}

/* A member left the key's slot set: promote at the end of the statement. */
void
orch_gate_note_release(const char *queue, const char *key, const char *tenant)
{
	orch_xact_lists_use(&gate_state);
	if (!has_key(pending, queue, key, tenant))
		pending = add_key(pending, queue, key, tenant);
}


/* Fill the key's free slots with its gated tasks, best first. */
int
orch_gate_promote(const char *queue, const char *key, const char *tenant)
{
	int			limit;
	int64		used;
	OrchArgs	a = {0};
	int			promoted;

	orch_require_read_committed();
	if (!key_lock(queue, key, tenant))
	{
		note_repair(queue, key, tenant);
		return 0;
	}
	key_slots(queue, key, tenant, 0, &limit, &used);
	if (used >= limit)
		return 0;
	orch_arg_text(&a, queue);
	orch_arg_text(&a, key);
	orch_arg_int4(&a, (int32) (limit - used));
	orch_arg_text(&a, tenant);
	/* now(), as a value: Citus refuses a stable function in a CASE of an UPDATE */
	orch_arg_timestamptz(&a, GetCurrentTransactionStartTimestamp());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	orch_gate_promoting = true;
	PG_TRY();
	{
		orch_args_sql(&a, "UPDATE orch.tasks t SET gated = false,"
					  " ready_at = CASE WHEN t.state = 'queued' THEN greatest(t.run_at, $5)"
					  "                 ELSE $5 END"
					  " WHERE t.id = ANY (ARRAY(SELECT id FROM orch.tasks"
					  "       WHERE queue = $1 AND concurrency_key = $2 AND tenant_id = $4 AND gated"
					  "         AND state IN ('queued', 'awaiting_tool', 'awaiting_user_confirmation')"
					  "       ORDER BY priority, created_at, id LIMIT $3 FOR UPDATE))"
					  "   AND t.tenant_id = $4",
					  false, 0, SPI_OK_UPDATE);
	}
	PG_FINALLY();
	{
		orch_gate_promoting = false;
	}
	PG_END_TRY();
	promoted = (int) SPI_processed;
	SPI_finish();
	return promoted;
}



/*
 * Put a key's slot set back in order.  A lowered limit: claimable members
 * beyond it (queued, resumed, approved or due to retry) go back to waiting,
 * the worst (by priority, then newest) first; executing ones finish
 * undisturbed.  And a claimable member that a waiting task should come
 * before (left so when the hand-over skipped it because a claim that was
 * later rolled back held it) goes back to waiting too, so that the
 * promotion that follows serves the key in priority/FIFO order.
 */
int
orch_gate_enforce(const char *queue, const char *key, const char *tenant)
{
	int			limit;
	int64		used;
	OrchArgs	a = {0};
	int			demoted = 0;

	orch_require_read_committed();
	if (!key_lock(queue, key, tenant))
	{
		note_repair(queue, key, tenant);
		return 0;
	}
	key_slots(queue, key, tenant, 0, &limit, &used);
	orch_arg_text(&a, queue);
	orch_arg_text(&a, key);
	orch_arg_int4(&a, (int32) Max(used - limit, 0));
	orch_arg_text(&a, tenant);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (used > limit)
	{
		orch_args_sql(&a, "UPDATE orch.tasks t SET gated = true, ready_at = NULL"
					  " WHERE t.id = ANY (ARRAY(SELECT id FROM orch.tasks"
					  "       WHERE queue = $1 AND concurrency_key = $2 AND tenant_id = $4"
					  "         AND state <> 'executing' AND ready_at IS NOT NULL"
					  "       ORDER BY priority DESC, created_at DESC, id DESC LIMIT $3 FOR UPDATE))"
					  "   AND t.tenant_id = $4",
					  false, 0, SPI_OK_UPDATE);
		demoted += (int) SPI_processed;
	}
	orch_args_sql(&a, "UPDATE orch.tasks t SET gated = true, ready_at = NULL"
				  " WHERE t.id = ANY (ARRAY(SELECT m.id FROM orch.tasks m"
				  "       WHERE m.queue = $1 AND m.concurrency_key = $2 AND m.tenant_id = $4"
				  "         AND m.state <> 'executing' AND m.ready_at IS NOT NULL"
				  "         AND EXISTS (SELECT 1 FROM orch.tasks g"
				  "               WHERE g.queue = $1 AND g.concurrency_key = $2 AND g.tenant_id = $4"
				  "                 AND g.gated"
				  "                 AND g.state IN ('queued', 'awaiting_tool', 'awaiting_user_confirmation')"
				  "                 AND (g.priority, g.created_at, g.id) < (m.priority, m.created_at, m.id))"
				  "       FOR UPDATE SKIP LOCKED))"
				  "   AND t.tenant_id = $4",
				  false, 0, SPI_OK_UPDATE);
	demoted += (int) SPI_processed;
	SPI_finish();
	return demoted;
}

/*
 * Bring keys in line with their current limits, for one queue or all: a
 * lowered limit sends queued members back to waiting, free slots are filled.
 * Called when limits change and by orch_maintain as a safety net.  Returns
 * the number of tasks promoted.  Caller is connected to SPI.
 */
int
orch_gate_reconcile(const char *queue, int max_keys)
{
	char	  **queues;
	char	  **keys;
	char	  **tenants;
	int			promoted = 0;
	int			nkeys;

	nkeys = select_keys(NULL,
						"SELECT DISTINCT queue, concurrency_key, tenant_id FROM orch.tasks"
						" WHERE concurrency_key IS NOT NULL"
						"   AND (gated OR state = 'executing' OR ready_at IS NOT NULL)"
						"   AND ($1::text IS NULL OR queue = $1)"
						"   AND " ORCH_TENANT_IN("tenant_id", "$3") " LIMIT $2",
						true, queue, max_keys, &queues, &keys, &tenants);
	for (int i = 0; i < nkeys; i++)
	{
		orch_gate_enforce(queues[i], keys[i], tenants[i]);
		promoted += orch_gate_promote(queues[i], keys[i], tenants[i]);
	}
	return promoted;
}


static int
pending_cmp(const ListCell *a, const ListCell *b)
{
	GateKey *x = (GateKey *) lfirst(a);
	GateKey *y = (GateKey *) lfirst(b);
	int			c = strcmp(x->queue, y->queue);

	if (c == 0)
		c = strcmp(x->key, y->key);
	return c != 0 ? c : strcmp(x->tenant, y->tenant);
}

/*
 * Admission's part of a statement's end (statement_end.c): promote waiting
 * tasks into the slots that tasks leaving executing freed in the statement.
 */
void
orch_gate_statement_end(void)
{
	while (pending != NIL)
	{
		List	   *work = pending;
		ListCell   *lc;

		pending = NIL;
		/* keys in one order for every session: no lock-order deadlocks */
		list_sort(work, pending_cmp);
		foreach(lc, work)
		{
			GateKey *r = (GateKey *) lfirst(lc);

			orch_gate_promote(r->queue, r->key, r->tenant);
		}
	}
}
