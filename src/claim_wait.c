/*
 * claim_wait.c
 *	  Waking the claims that wait (orch_dequeue with wait).  With the library
 *	  in shared_preload_libraries, shared memory holds one condition variable
 *	  per bucket of queue names: a transaction that made a task claimable
 *	  (enqueued, released, resumed, a queue resumed) notes its queue's
 *	  bucket, and when it commits it wakes every claim sleeping on that
 *	  bucket, which then looks again at once.  A claim also wakes, unasked,
 *	  when its queue's next delayed task comes due or its next lease runs
 *	  out (the caller passes that time), and at the end of its wait.  An
 *	  idle waiting claim costs nothing until then.
 *
 *	  Without the preload there is no shared memory: a waiting claim looks
 *	  again after 1 ms, then twice as long each time up to
 *	  CLAIM_POLL_MAX_MS (the fallback, documented in the README); so does a
 *	  claim whose queue has work due that it cannot take yet.
 *
 *	  Wakes can be spurious (two queues share a bucket, a claim another
 *	  worker won): a woken claim only looks again.  None is lost: a claim
 *	  is on its bucket's list before it looks, and a producer wakes it only
 *	  after its commit is visible, so a task committed before the look is
 *	  seen by it and one committed after wakes it.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "utils/resowner.h"

#include "orchestrator.h"

#define CLAIM_BUCKETS 64		/* a bit each in a transaction's note */
#define CLAIM_POLL_MAX_MS 100

typedef struct ClaimWaitShared
{
	ConditionVariable cv[CLAIM_BUCKETS];
} ClaimWaitShared;

static ClaimWaitShared *shared = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

static uint64 xact_buckets = 0;	/* the buckets this transaction woke */
static bool xact_registered = false;
static int	sleeping_bucket = -1;	/* the bucket a claim is on, or -1 */
static bool use_shared = false;	/* this claim is woken by commits */
static int	poll_ms = 1;

static int
bucket_of(const char *queue)
{
	return (int) (hash_bytes((const unsigned char *) queue, (int) strlen(queue)) % CLAIM_BUCKETS);
}

static void
claim_wait_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	RequestAddinShmemSpace(MAXALIGN(sizeof(ClaimWaitShared)));
}

static void
claim_wait_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup)
		prev_shmem_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("orchestrator claim wait", sizeof(ClaimWaitShared), &found);
	if (!found)
		for (int i = 0; i < CLAIM_BUCKETS; i++)
			ConditionVariableInit(&shared->cv[i]);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * From _PG_init: the shared memory, when the library is being preloaded
 * (else waiting claims use the fallback).
 */
void
orch_claim_wait_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = claim_wait_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = claim_wait_shmem_startup;
}

/* Do waiting claims wake at commits here (the library was preloaded)? */
bool
orch_claim_wait_shared(void)
{
	return shared != NULL;
}

/*
 * At the end of the top-level transaction: its notes cleared, and on a
 * commit the claims waiting on its queues woken.  After the locks are
 * released, so after the commit's cache invalidations were sent (a queue
 * resumed: the woken claim reads the queue's new settings) and once the
 * commit is visible to every snapshot taken from now on.
 */
static void
claim_wait_release_callback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	uint64		buckets = xact_buckets;

	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	xact_buckets = 0;
	if (!isCommit || buckets == 0 || shared == NULL)
		return;
	for (int i = 0; i < CLAIM_BUCKETS; i++)
		if (buckets & (UINT64CONST(1) << i))
			ConditionVariableBroadcast(&shared->cv[i]);
}

/*
 * This transaction made a task of queue claimable: the claims waiting on
 * the queue are woken when it commits.  A bit in a word: as cheap as it can
 * be on every enqueue.
 */
void
orch_claim_wake_note(const char *queue)
{
	if (shared == NULL || queue == NULL)
		return;
	if (!xact_registered)
	{
		RegisterResourceReleaseCallback(claim_wait_release_callback, NULL);
		xact_registered = true;
	}
	xact_buckets |= UINT64CONST(1) << bucket_of(queue);
}

/*
 * A claim begins to wait; shared: it may be woken by commits (on Citus the
 * commits happen on the nodes that hold the tasks: it polls there).
 */
void
orch_claim_wait_begin(bool shared_ok)
{
	use_shared = shared_ok && shared != NULL;
	sleeping_bucket = -1;
	poll_ms = 1;
}

/*
 * A claim that may wait, before it looks: on its queue's list, so that a
 * commit after the look wakes it.
 */
void
orch_claim_wait_prepare(const char *queue)
{
	if (!use_shared)
		return;
	sleeping_bucket = bucket_of(queue);
	ConditionVariablePrepareToSleep(&shared->cv[sleeping_bucket]);
}

/*
 * Sleep until woken, until next (when the queue may have work without a
 * commit; 0: none known), or until deadline, whichever comes first; without
 * the shared memory at most the fallback's next interval.  When next has
 * passed already (a lease out that another transaction still holds, a
 * delayed task waiting for its key) the claim backs off as the fallback
 * does rather than look again at once.  A cancel or statement_timeout ends
 * it with an error (nothing claimed: the claim looked and found nothing).
 */
void
orch_claim_wait_sleep(TimestampTz next, TimestampTz deadline)
{
	TimestampTz now = GetCurrentTimestamp();
	long		cap = TimestampDifferenceMilliseconds(now, deadline);
	long		ms;

	CHECK_FOR_INTERRUPTS();
	if (next != 0 && next <= now)
		ms = poll_ms;			/* due, yet nothing to claim: back off */
	else if (next != 0)
		ms = TimestampDifferenceMilliseconds(now, next);
	else
		ms = cap;
	if (!use_shared || (next != 0 && next <= now))
	{
		ms = Min(ms, poll_ms);
		poll_ms = Min(poll_ms * 2, CLAIM_POLL_MAX_MS);
	}
	ms = Max(Min(ms, cap), 1);
	if (use_shared && sleeping_bucket >= 0)
		(void) ConditionVariableTimedSleep(&shared->cv[sleeping_bucket], ms, PG_WAIT_EXTENSION);
	else
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	CHECK_FOR_INTERRUPTS();
}

/* The claim is done waiting (it claimed, or its wait ended). */
void
orch_claim_wait_done(void)
{
	poll_ms = 1;
	if (sleeping_bucket >= 0)
		ConditionVariableCancelSleep();
	sleeping_bucket = -1;
}
