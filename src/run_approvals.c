/*
 * run_approvals.c
 *	  The task behind a human_approval step (a human_approval
 *	  step waits in awaiting_user_confirmation), and behind a compensation
 *	  that waits for an approval (compensation.mode = approval).  When the step starts, the
 *	  run layer enqueues the task and claims it itself, as worker
 *	  "orchestrator" (queued -> executing -> awaiting_user_confirmation, one
 *	  attempt handed to a human), so that the task lifecycle is the one every
 *	  task has.  The step's outcome settles it:
 *
 *	    approved  -> executing (claimed by the approver) -> completed, with
 *	                 the decision as its result (a second attempt);
 *	    rejected  -> failed, reason confirmation_rejected;
 *	    expired   -> cancelled, reason approval_expired.
 *
 *	  Every other end of the gate (the run canceled, failed, past its
 *	  deadline) cancels it (orch_run_cancel_approvals) before the run's
 *	  other open tasks.
 *
 *	  Lock order: the task is locked after its run, never before, by every
 *	  call that locks both (orch_approve, orch_reject, the run's end,
 *	  orch_cancel_run, maintenance); so the run's end waits for its lock (it
 *	  is never skipped and never left open in a finished run) without a
 *	  deadlock.  orch_drop_queue leaves it alone (it ends with its gate).
 *	  A 0.7.0 schema (the library serves it until ALTER EXTENSION UPDATE)
 *	  gets no such task: its review queue would list it as a confirmation.
 *	  Its step key is the step's with ORCH_APPROVAL_SUFFIX ("gate:approval";
 *	  a compensation's: "step:compensate:approval"); it is never
 *	  claimable (claimed in the statement after its insert, before anything
 *	  commits), orch_confirm and orch_cancel refuse
 *	  it (OR009: orch_approve / orch_reject decide it), and run progression
 *	  never reads it as a step's work.  Callers hold the run's row lock (the
 *	  run is busy: the task's transitions note nothing) and are connected to
 *	  SPI.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "run_internal.h"

/*
 * What the task is made of ($1 run, $2 tenant, $3 step, $4 whether it is a
 * compensation's approval): its payload (what is decided and how), its
 * queue and the run's correlation id.
 */
#define APPROVAL_TASK_VALUES \
	"SELECT jsonb_strip_nulls(jsonb_build_object('run_id', $1, 'step_id', $3, 'approval', true," \
	"    'compensation', CASE WHEN $4 THEN true END," \
	"    'definition', r.definition, 'version', r.version, 'description', s.spec ->> 'description'))," \
	"  coalesce(CASE WHEN $4 THEN s.spec -> 'compensation' ->> 'queue' END," \
	"       s.spec ->> 'queue', d.spec -> 'policies' ->> 'queue', '" APPROVAL_DEFAULT_QUEUE "')," \
	"  r.correlation_id" \
	" FROM orch.run_steps s JOIN orch.runs r ON r.id = s.run_id AND r.tenant_id = s.tenant_id" \
	"  JOIN orch.definitions d ON d.name = r.definition AND d.version = r.version AND d.tenant_id = 'default'" \
	" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3"

/*
 * Claimed by worker "orchestrator" (queued -> executing) and its attempt
 * handed to a human at once (its attempt row follows; executing ->
 * awaiting_user_confirmation follows).  $1 task, $2 tenant, $4 its lease
 * token (drawn by the caller: Citus refuses gen_random_uuid() in an UPDATE
 * it routes).
 */
#define APPROVAL_TASK_CLAIM \
	"UPDATE orch.tasks t SET state = 'executing', attempts = t.attempts + 1," \
	"   lease_token = $4, lease_owner = 'orchestrator'," \
	"   lease_expires_at = statement_timestamp(), claimed_at = statement_timestamp()," \
	"   reason_code = 'claimed'" \
	" WHERE t.id = $1 AND t.tenant_id = $2 AND t.state = 'queued'" \
	" RETURNING " TASK_ATTEMPT_COLUMNS

/* The columns of a task's attempt row (orch_attempts_insert_rows) */
#define TASK_ATTEMPT_COLUMNS "t.tenant_id, t.id, t.attempts, t.lease_owner, t.lease_token, t.claimed_at"

#define APPROVAL_TASK_PARK \
	"UPDATE orch.tasks t SET state = 'awaiting_user_confirmation', reason_code = 'approval_requested'," \
	"  ready_at = NULL, retry_at = NULL, resume_data = NULL," \
	"  wait_data = jsonb_build_object('run_id', $5::bigint, 'step_id', $3," \
	"    'decide', format('SELECT orch_approve(%s, %L, <approval_ref>) or orch_reject(...)', $5::bigint, $3))" \
	" WHERE t.id = $1 AND t.tenant_id = $2"

/* The task's step key: the step's, or its compensation's, with the suffix */
static char *
approval_key(const char *step, bool compensation)
{
	return psprintf("%s%s" ORCH_APPROVAL_SUFFIX, step, compensation ? ":compensate" : "");
}

/*
 * Open the task of human_approval step `step` of run r (compensation: of
 * the approval its compensation waits for) and return its id;
 * the caller records it as the step's task.  Its queue is created on the
 * way when missing and orchestrator.auto_create_queues is on; when it is
 * off the task is stored all the same (it is never claimed).
 */
int64
orch_run_open_approval(RunRow *r, const char *step, bool compensation)
{
	int			ev;
	OrchArgs	a = {0};
	int64		id;
	OrchTaskRow t;
	Jsonb	   *payload;
	QueueSettings qs;
	bool		isnull;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg(&a, BOOLOID, BoolGetDatum(compensation), false);
	if (orch_args_sql(&a, APPROVAL_TASK_VALUES, false, 0, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: step \"%s\" of run " INT64_FORMAT " was not found", step, r->id);
	payload = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	memset(&t, 0, sizeof(t));
	t.tenant = r->tenant;
	t.queue = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	t.correlation_id = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	t.reason_code = "approval_requested";
	t.run_id = r->id;
	/* the run layer does this: its transitions are audited as the orchestrator's */
	ev = orch_set_event_context("orchestrator", NULL);
	/* its queue's priority; the queue created on the way (on Citus orch_start did) */
	if (orch_load_queue(t.queue, &qs, NULL))
		t.priority = qs.priority;
	else if (orch_auto_create_queues && !orch_citus())
		orch_ensure_queue(t.queue);
	id = orch_task_insert(&t, payload, approval_key(step, compensation));

	a.n = 0;
	orch_arg_int8(&a, id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg(&a, UUIDOID, UUIDPGetDatum(orch_new_uuid()), false);
	orch_arg_int8(&a, r->id);	/* $5: the park's (values, not columns, for Citus) */
	if (orch_args_sql(&a, APPROVAL_TASK_CLAIM, false, 0, SPI_OK_UPDATE_RETURNING) != 1)
		elog(ERROR, "orchestrator: the approval task " INT64_FORMAT " could not be claimed", id);
	orch_attempts_insert_rows(SPI_tuptable, 1, 1, 0, "awaiting_user_confirmation", NULL);
	if (orch_args_sql(&a, APPROVAL_TASK_PARK, false, 0, SPI_OK_UPDATE) != 1)
		elog(ERROR, "orchestrator: the approval task " INT64_FORMAT " could not be handed to a person", id);
	orch_clear_event_context(ev);
	return id;
}

/*
 * Settle the open task of human_approval step `step` of run r
 * (compensation: of its compensation's approval) by the outcome; decision (approved and rejected) is what orch_approve /
 * orch_reject recorded: the task's result, or what its rejection carries.
 * A step without an open task (a run started before 0.8.0) settles
 * nothing.  The event context is the caller's (the approver, or the
 * maintenance pass for an expiry).
 */
void
orch_run_settle_approval(RunRow *r, const char *step, bool compensation, ApprovalOutcome outcome,
						 Jsonb *decision)
{
	OrchArgs	a = {0};
	int64		id;
	bool		isnull;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, approval_key(step, compensation));
	if (orch_args_sql(&a, "SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2 AND step_key = $3"
					  "   AND state = 'awaiting_user_confirmation' FOR UPDATE", false, 0, SPI_OK_SELECT) == 0)
		return;
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	a.n = 0;
	orch_arg_int8(&a, id);
	orch_arg_text(&a, r->tenant);
	orch_arg(&a, JSONBOID, decision ? JsonbPGetDatum(decision) : (Datum) 0, decision == NULL);
	orch_arg_text(&a, orch_current_actor());
	orch_arg(&a, UUIDOID, UUIDPGetDatum(orch_new_uuid()), false);	/* the approver's lease token */
	switch (outcome)
	{
		case APPROVAL_APPROVED:
			/* the approver takes the task (a second attempt) and completes it */
			orch_args_sql(&a, "UPDATE orch.tasks t SET state = 'executing', attempts = t.attempts + 1,"
						  "   lease_token = $5, lease_owner = $4,"
						  "   lease_expires_at = statement_timestamp(), claimed_at = statement_timestamp(),"
						  "   reason_code = 'confirmation_approved', resume_data = $3"
						  " WHERE t.id = $1 AND t.tenant_id = $2", false, 0, SPI_OK_UPDATE);
			orch_args_sql(&a, "UPDATE orch.tasks t SET state = 'completed', result = $3,"
						  "   reason_code = 'completed'"
						  " WHERE t.id = $1 AND t.tenant_id = $2"
						  " RETURNING " TASK_ATTEMPT_COLUMNS, false, 0, SPI_OK_UPDATE_RETURNING);
			orch_attempts_insert_rows(SPI_tuptable, SPI_processed, 1, 0, "completed", NULL);
			break;
		case APPROVAL_REJECTED:
			/* as orch_confirm rejects a confirmation */
			orch_args_sql(&a, "UPDATE orch.tasks t SET state = 'failed', reason_code = 'confirmation_rejected',"
						  "   resume_data = $3, last_error = coalesce($3 ->> 'note', 'rejected')"
						  " WHERE t.id = $1 AND t.tenant_id = $2", false, 0, SPI_OK_UPDATE);
			break;
		case APPROVAL_EXPIRED:
			orch_args_sql(&a, "UPDATE orch.tasks t SET state = 'cancelled', reason_code = 'approval_expired',"
						  "   last_error = 'the approval request expired (its timeout passed)'"
						  " WHERE t.id = $1 AND t.tenant_id = $2", false, 0, SPI_OK_UPDATE);
			break;
	}
}

/*
 * The run ends (canceled, failed, past its deadline): its open approval
 * task is cancelled with the run's reason.  Not SKIP LOCKED like the run's
 * other tasks: only calls that hold no lock on the run lock it meanwhile
 * (orch_confirm or orch_cancel refusing it), briefly.
 */
void
orch_run_cancel_approvals(RunRow *r, const char *reason)
{
	OrchArgs	a = {0};

	/* as the steps' events read: another step's failure failed the run */
	if (strcmp(reason, "step_failed") == 0 || strcmp(reason, "step_timed_out") == 0 ||
		strcmp(reason, "compensation_required") == 0)
		reason = "run_failed";
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_run_cancel_tasks("SELECT id FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
						  "   AND step_key LIKE '%" ORCH_APPROVAL_SUFFIX "'"
						  "   AND state NOT IN ('completed', 'failed', 'cancelled') ORDER BY id FOR UPDATE",
						  &a, r->tenant, reason);
}

/*
 * Record a decision given under an approval reference (orch_approve,
 * orch_reject, orch_acknowledge_drift; the step is DRIFT_STEP then): false,
 * recording nothing, when the reference is in use already.  A reference is
 * single-use across every partition of orch.approvals through its row in
 * orch.approval_refs, which a concurrent use of it waits for and then wins
 * or loses on; both leave with the run (a 0.7.0 schema: the key of
 * orch.approvals itself).  Caller is connected to SPI and holds the run.
 */
bool
orch_run_record_approval(const RunRow *r, const char *ref, const char *step, bool approved,
						 const char *label, const char *note)
{
	OrchArgs	a = {0};

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, ref);
	if (orch_schema_approval_tasks() &&
		orch_args_sql(&a, "INSERT INTO orch.approval_refs (approval_ref, tenant_id, run_id)"
					  " VALUES ($3, $2, $1) ON CONFLICT DO NOTHING", false, 0, SPI_OK_INSERT) == 0)
		return false;
	orch_arg_text(&a, step);
	orch_arg(&a, BOOLOID, BoolGetDatum(approved), false);
	orch_arg_text(&a, orch_current_actor());
	orch_arg_text(&a, label);
	orch_arg_text(&a, note);
	return orch_args_sql(&a, "INSERT INTO orch.approvals (approval_ref, tenant_id, run_id, step_id, approved,"
						 "   actor, label, note)"
						 " VALUES ($3, $2, $1, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
						 false, 0, SPI_OK_INSERT) > 0;
}
