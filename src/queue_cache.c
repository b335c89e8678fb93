/*
 * queue_cache.c
 *	  A per-backend cache of queue settings, so that enqueue, claim, fail and
 *	  the other per-task calls do not read orch.queues and parse its settings
 *	  JSON on every call.
 *
 *	  Invalidation is PostgreSQL's own: the statement trigger queues_changed
 *	  on orch.queues (0.6.0) sends a relcache invalidation for the table on
 *	  every write, so that every backend drops its cache when the writing
 *	  transaction commits (and the writer's own backend at its next command,
 *	  and again if it rolls back); dropping or altering the table does the
 *	  same.  A lookup first accepts pending invalidations, so a call sees a
 *	  committed change as a fresh statement snapshot would.  Without the
 *	  trigger (a schema older than the library) nothing is cached.
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "storage/lmgr.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_queues_changed);

#define QUEUE_NAME_MAX 128		/* orch_check_name */

typedef struct QueueCacheEntry
{
	char		name[QUEUE_NAME_MAX + 1];	/* hash key */
	bool		paused;
	QueueSettings qs;			/* schedule: in queue_cache_cxt */
} QueueCacheEntry;

static MemoryContext queue_cache_cxt = NULL;
static HTAB *queue_cache = NULL;
static Oid	queue_cache_relid = InvalidOid;
static bool callback_registered = false;

/*
 * Bumped by every invalidation of the cache.  A miss notes it before reading
 * orch.queues; the settings read are kept only if no invalidation came in
 * meanwhile (else a change committed during the read could be masked).
 */
static uint64 inval_generation = 0;
static uint64 miss_generation = 0;

static void
queue_cache_reset(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == queue_cache_relid || !OidIsValid(queue_cache_relid))
		inval_generation++;
	if (queue_cache_cxt && (relid == InvalidOid || relid == queue_cache_relid))
	{
		MemoryContextDelete(queue_cache_cxt);
		queue_cache_cxt = NULL;
		queue_cache = NULL;
		queue_cache_relid = InvalidOid;
	}
}

/* Copy the settings out (the schedule into the caller's memory context). */
static void
copy_out(const QueueSettings *from, QueueSettings *to)
{
	*to = *from;
	if (from->policy.nschedule > 0)
	{
		to->policy.schedule = palloc(sizeof(int64) * from->policy.nschedule);
		memcpy(to->policy.schedule, from->policy.schedule, sizeof(int64) * from->policy.nschedule);
	}
	else
		to->policy.schedule = NULL;
}

/* The cached settings of a queue, if any. */
bool
orch_queue_cache_get(const char *queue, QueueSettings *qs, bool *paused)
{
	QueueCacheEntry *e;

	if (!callback_registered)
	{
		orch_schema_on_relcache(queue_cache_reset);
		callback_registered = true;
	}
	/* see what other sessions committed since this transaction last looked */
	AcceptInvalidationMessages();
	miss_generation = inval_generation;
	if (queue_cache == NULL || strlen(queue) > QUEUE_NAME_MAX)
		return false;
	e = (QueueCacheEntry *) hash_search(queue_cache, queue, HASH_FIND, NULL);
	if (e == NULL)
		return false;
	copy_out(&e->qs, qs);
	if (paused)
		*paused = e->paused;
	return true;
}

/*
 * orch.queues, when its invalidating trigger is there and enabled (else no
 * caching: a cached queue would not see a change).
 */
static Oid
invalidating_relid(void)
{
	Oid			relid = orch_relid("queues");
	Relation	rel;
	bool		found = false;

	if (!OidIsValid(relid))
		return InvalidOid;
	rel = table_open(relid, AccessShareLock);
	if (rel->trigdesc)
		for (int i = 0; i < rel->trigdesc->numtriggers && !found; i++)
			found = strcmp(rel->trigdesc->triggers[i].tgname, "queues_changed") == 0 &&
				rel->trigdesc->triggers[i].tgenabled != TRIGGER_DISABLED;
	table_close(rel, AccessShareLock);
	return found ? relid : InvalidOid;
}

/* Remember a queue's settings as just read from orch.queues. */
void
orch_queue_cache_put(const char *queue, const QueueSettings *qs, bool paused)
{
	QueueCacheEntry *e;
	bool		found;
	Oid			relid;

	/*
	 * Under REPEATABLE READ or SERIALIZABLE the row was read with the
	 * transaction's snapshot, which may predate a change whose invalidation
	 * this backend has already processed: not kept.
	 */
	if (strlen(queue) > QUEUE_NAME_MAX || miss_generation != inval_generation ||
		IsolationUsesXactSnapshot())
		return;
	if (queue_cache == NULL)
	{
		HASHCTL		ctl;

		relid = invalidating_relid();
		/* opening the table may have processed invalidations */
		if (!OidIsValid(relid) || miss_generation != inval_generation)
			return;
		queue_cache_cxt = AllocSetContextCreate(CacheMemoryContext, "orchestrator queue settings",
												ALLOCSET_SMALL_SIZES);
		ctl.keysize = QUEUE_NAME_MAX + 1;
		ctl.entrysize = sizeof(QueueCacheEntry);
		ctl.hcxt = queue_cache_cxt;
		queue_cache = hash_create("orchestrator queue settings", 64, &ctl,
								  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		queue_cache_relid = relid;
	}
	e = (QueueCacheEntry *) hash_search(queue_cache, queue, HASH_ENTER, &found);
	e->paused = paused;
	e->qs = *qs;
	e->qs.policy.schedule = NULL;
	if (qs->policy.nschedule > 0)
	{
		e->qs.policy.schedule = MemoryContextAlloc(queue_cache_cxt, sizeof(int64) * qs->policy.nschedule);
		memcpy(e->qs.policy.schedule, qs->policy.schedule, sizeof(int64) * qs->policy.nschedule);
	}
}

/*
 * AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE FOR EACH STATEMENT on
 * orch.queues: every backend's cache of queue settings is dropped when the
 * change commits.
 */
Datum
orch_queues_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_queues_changed: not called by trigger manager")));
	CacheInvalidateRelcacheByRelid(RelationGetRelid(trigdata->tg_relation));
	/*
	 * On Citus the trigger fires on the shard of the reference table
	 * (orch.queues_102008 on every node), while the caches follow
	 * orch.queues itself: that relation is invalidated too.
	 */
	{
		Oid			queues = orch_relid("queues");

		if (OidIsValid(queues) && queues != RelationGetRelid(trigdata->tg_relation))
			CacheInvalidateRelcacheByRelid(queues);
	}
	return PointerGetDatum(NULL);
}
