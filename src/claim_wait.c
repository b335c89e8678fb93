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
 *
 *	  The same shared memory counts, per bucket, the commits that made a
 *	  task claimable, the claims undone (a rollback, a subtransaction's)
 *	  and the ends of transactions that held tasks they did not claim:
 *	  where a worker's next claim may start (dequeue.c) holds only while
 *	  its bucket's count is unchanged.  A claim undone wakes the waiting
 *	  claims too: its tasks are claimable again.  A second count, of the
 *	  commits that wrote delayed tasks or left key decisions for later,
 *	  says whether a claim's look for such work (housekeeping.c) may go by
 *	  an earlier one.
 */
#include "postgres.h"

#include "access/twophase.h"
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
	pg_atomic_uint64 gen[CLAIM_BUCKETS];	/* tasks made claimable, claims undone */
	pg_atomic_uint64 due[CLAIM_BUCKETS];	/* delayed tasks written, key decisions left */
} ClaimWaitShared;

static ClaimWaitShared *shared = NULL;
static shmem_request_hook_type prev_shmem_request = NULL;
static shmem_startup_hook_type prev_shmem_startup = NULL;

static uint64 xact_buckets = 0;	/* the buckets this transaction woke */
static uint64 xact_moved = 0;	/* ... of which it made a task claimable */
static uint64 xact_claimed = 0;	/* the buckets it claimed from */
static uint64 xact_kept = 0;	/* ... holding tasks it did not claim */
static uint64 xact_due = 0;		/* the buckets it wrote delayed tasks of */
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
		{
			ConditionVariableInit(&shared->cv[i]);
			pg_atomic_init_u64(&shared->gen[i], 0);
			pg_atomic_init_u64(&shared->due[i], 0);
		}
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
 * At the end of the top-level transaction: its notes cleared; on a commit
 * the claims waiting on its queues woken, and on a rollback those waiting
 * on the queues it claimed from (the tasks are claimable again), each
 * bucket's count moved on.  After the locks are released, so after the
 * commit's cache invalidations were sent (a queue resumed: the woken claim
 * reads the queue's new settings) and once the commit is visible to every
 * snapshot taken from now on.
 */
static void
claim_wait_move(uint64 moved, uint64 due, uint64 wake)
{
	if (shared == NULL)
		return;
	for (int i = 0; i < CLAIM_BUCKETS; i++)
	{
		if (moved & (UINT64CONST(1) << i))
			pg_atomic_fetch_add_u64(&shared->gen[i], 1);
		if (due & (UINT64CONST(1) << i))
			pg_atomic_fetch_add_u64(&shared->due[i], 1);
		if (wake & (UINT64CONST(1) << i))
			ConditionVariableBroadcast(&shared->cv[i]);
	}
}

static void
claim_wait_release_callback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	uint64		wake;
	uint64		moved;
	uint64		due;

	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	wake = (isCommit ? xact_buckets : xact_claimed) | xact_kept;
	moved = (isCommit ? xact_moved : xact_claimed) | xact_kept;
	due = isCommit ? xact_due : 0;
	xact_buckets = xact_moved = xact_claimed = xact_kept = xact_due = 0;
	claim_wait_move(moved, due, wake);
}

/*
 * A subtransaction rolled back (its abort recorded): the claims of the
 * transaction may be undone, their tasks claimable again now.
 */
static void
claim_wait_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		claim_wait_move(xact_claimed | xact_kept, 0, xact_claimed | xact_kept);
}

static void
claim_wait_register(void)
{
	if (xact_registered)
		return;
	RegisterResourceReleaseCallback(claim_wait_release_callback, NULL);
	RegisterSubXactCallback(claim_wait_subxact_callback, NULL);
	xact_registered = true;
}

/*
 * This transaction's note of queue's bucket: its waiting claims woken at
 * the commit, and the bucket's bit set in also (NULL: none), a count it
 * moves.
 */
static void
note(const char *queue, uint64 *also)
{
	uint64		bit;

	if (shared == NULL || queue == NULL)
		return;
	claim_wait_register();
	bit = UINT64CONST(1) << bucket_of(queue);
	xact_buckets |= bit;
	if (also)
		*also |= bit;
}

/*
 * This transaction made a task of queue claimable: the claims waiting on
 * the queue are woken when it commits, and the claims of the queue look
 * from its beginning again.  A bit in a word: as cheap as it can be on
 * every enqueue.
 */
void
orch_claim_wake_note(const char *queue)
{
	note(queue, &xact_moved);
}

/*
 * This transaction wrote a delayed task of queue (or moved its due moment),
 * or left a key decision of it for later: the claims waiting on the queue
 * look again when it commits (their next due moment may be sooner), and
 * the claims' looks for such work (housekeeping.c) no longer go by what an
 * earlier look found.  Where the claims start stays.
 */
void
orch_claim_due_note(const char *queue)
{
	note(queue, &xact_due);
}

/*
 * This transaction freed a slot of queue (a task left executing): a claim
 * waiting at an owner's or the queue's limit may take one now.  Nothing
 * became claimable: where the claims start stays.
 */
void
orch_claim_slot_note(const char *queue)
{
	note(queue, NULL);
}

/*
 * This transaction made tasks of queues it does not know claimable (a run
 * resumed: its step tasks may be claimed again): every queue's.
 */
void
orch_claim_wake_all(void)
{
	if (shared == NULL)
		return;
	claim_wait_register();
	xact_buckets = xact_moved = ~UINT64CONST(0);
}

/*
 * This transaction is about to claim tasks of queue: should the claim be
 * undone (its statement fails, a rollback), they are claimable again; and,
 * kept_locks, it will hold tasks it does not claim (a claim that looks at
 * more than it takes), free again when it ends.
 */
void
orch_claim_taken(const char *queue, bool kept_locks)
{
	uint64		bit;

	if (shared == NULL)
		return;
	claim_wait_register();
	bit = UINT64CONST(1) << bucket_of(queue);
	xact_claimed |= bit;
	if (kept_locks)
		xact_kept |= bit;
}

/*
 * A count of queue's bucket (*gen): for a claim that would start where the
 * previous one did, of the commits that made a task claimable and the
 * claims undone; with due, for a claim's look that would go by an earlier
 * one, of the commits that wrote delayed tasks or left key decisions.
 * False when there is none to go by (no shared memory; prepared
 * transactions allowed, whose commit or rollback would not count) or when
 * this transaction itself did such a thing in the bucket (not counted
 * before it commits).
 */
bool
orch_claim_generation(const char *queue, bool due, uint64 *gen)
{
	int			b;

	if (shared == NULL || max_prepared_xacts > 0)
		return false;
	b = bucket_of(queue);
	if ((due ? xact_due : xact_moved) & (UINT64CONST(1) << b))
		return false;
	*gen = pg_atomic_read_u64(due ? &shared->due[b] : &shared->gen[b]);
	return true;
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
