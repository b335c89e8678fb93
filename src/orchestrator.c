/*
 * orchestrator.c
 *	  Module entry point: _PG_init and the GUCs (orchestrator.*).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "orchestrator.h"

PG_MODULE_MAGIC;

bool		orch_auto_create_queues = true;
int			orch_max_payload_size = 1024 * 1024;
int			orch_max_batch_size = 10000;
bool		orch_notify = false;
int			orch_retention = 7 * 24 * 3600;
int			orch_stuck_after = 3600;
int			orch_max_step_input_size = 16 * 1024 * 1024;
char	   *orch_command_queue = NULL;
int			orch_max_claim_wait = 300;
int			orch_claim_cache_max_age = 50;
int			orch_max_subflow_depth = 8;

void		_PG_init(void);

void
_PG_init(void)
{
	DefineCustomBoolVariable("orchestrator.auto_create_queues",
							 "Create a queue with default settings on first enqueue.",
							 "Only a superuser (or ALTER SYSTEM / ALTER DATABASE by one) may change it: a producer must not bypass an administrator's choice.",
							 &orch_auto_create_queues,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.max_payload_size",
							"Largest accepted payload or result, in bytes.",
							NULL,
							&orch_max_payload_size,
							1024 * 1024, 1, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.max_batch_size",
							"Most items one call may create or act on: tasks enqueued, claimed or completed in a batch, items of a map step.",
							NULL,
							&orch_max_batch_size,
							10000, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.max_subflow_depth",
							"Deepest a sub-workflow may start below its top run (a run started by orch_start is at depth 0).",
							"A subflow step that would start one deeper fails with an error that says so.",
							&orch_max_subflow_depth,
							8, 1, 100,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.max_step_input_size",
							"Largest input a workflow step's task is given (the run's input and its dependencies' outputs), in bytes.",
							"A step whose input is larger fails (the run's failure policy applies).",
							&orch_max_step_input_size,
							16 * 1024 * 1024, 1, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("orchestrator.notify",
							 "Send NOTIFY orch_enqueue, with the queue name as payload, when work is enqueued (a wake-up hint).",
							 "Off by default: NOTIFY serialises committing transactions cluster-wide.  "
							 "Only a superuser may turn it on: any role that can connect may LISTEN, "
							 "and the payload names the queue.",
							 &orch_notify,
							 false,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.retention",
							"How long finished tasks, their attempts and events are kept before orch_maintain purges them (history: whole partitions, once every row of one is past it).",
							"0 keeps everything.",
							&orch_retention,
							7 * 24 * 3600, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.history_partition",
							"The time each new partition of the history (orch.events, orch.attempts) covers.",
							"0 derives it from the retention: a quarter of it, at least a minute and at most a day.  "
							"orch_maintain creates partitions ahead and retires them whole once past the retention.",
							&orch_history_partition,
							0, 0, 31 * 24 * 3600,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.stuck_after",
							"How long a task may wait (received, or for a tool or a confirmation) before orch_maintain reports it stuck.",
							NULL,
							&orch_stuck_after,
							3600, 1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomStringVariable("orchestrator.command_queue",
							   "Queue into which orch_command puts the work for command adapters.",
							   NULL,
							   &orch_command_queue,
							   "commands",
							   PGC_SUSET, 0,
							   NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.max_claim_wait",
							"Longest wait an orch_dequeue call may ask for.",
							"A waiting claim holds a connection and its statement's snapshot while it waits.",
							&orch_max_claim_wait,
							300, 1, 24 * 3600,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("orchestrator.claim_cache_max_age",
							"How long a worker's claims of a queue go by what its earlier claim of the queue learnt.",
							"While no commit changed the queue (counted in shared memory), a claim skips the look for expired leases, due delayed tasks and key decisions that found none, and starts where the previous one said; this bounds how long a lease another worker gave out can run out unseen and, after a claim made by its statement, how long a task held by another transaction and let go of unchanged can be passed over (a claim written at once sees those: its start holds up to 1 s, or this when longer, the bound on a task made claimable with the triggers off). 0: every claim looks from the beginning, and looks for them.",
							&orch_claim_cache_max_age,
							50, 0, 60000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	MarkGUCPrefixReserved("orchestrator");
	orch_plan_floor_init();
	orch_claim_wait_init();
}
