/*
 * run_control.c
 *	  Acting on a workflow run from outside: orch_approve / orch_reject
 *	  (single-use approval references, OR009), orch_pause_run,
 *	  orch_resume_run (drift check against the run's pins and its drift
 *	  probes, OR010; run_probes.c),
 *	  orch_cancel_run and orch_retry_run.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "run_internal.h"

PG_FUNCTION_INFO_V1(orch_approve);
PG_FUNCTION_INFO_V1(orch_reject);
PG_FUNCTION_INFO_V1(orch_pause_run);
PG_FUNCTION_INFO_V1(orch_resume_run);
PG_FUNCTION_INFO_V1(orch_cancel_run);
PG_FUNCTION_INFO_V1(orch_retry_run);

/* End a run call (its busy mark, its tenant scope, SPI) and return the run's state name. */
static Datum
run_call_result(const char *state)
{
	orch_run_busy_end(0);
	/* the parents of the sub-workflows that ended here progress now */
	orch_run_flush_notes();
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/* ----------------------------------------------------------------------
 * Approvals: orch_approve / orch_reject(run, step, approval_ref, actor, note)
 * ---------------------------------------------------------------------- */

/* The decision as the step's task records it (its result, or its rejection) */
static Jsonb *
decision(const char *ref, bool approved, const char *label, const char *note)
{
	OrchArgs	a = {0};
	bool		isnull;

	orch_arg_text(&a, ref);
	orch_arg(&a, BOOLOID, BoolGetDatum(approved), false);
	orch_arg_text(&a, orch_current_actor());
	orch_arg_text(&a, label);
	orch_arg_text(&a, note);
	orch_args_sql(&a, "SELECT jsonb_strip_nulls(jsonb_build_object('approval_ref', $1, 'approved', $2,"
				  " 'actor', $3, 'label', $4, 'note', $5))", true, 1, SPI_OK_SELECT);
	return DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}
/*
 * A recorded decision, applied: a compensation that needed a human runs
 * (approved) or is left for review (rejected); a gate's step succeeds or
 * fails, and the run goes on.
 */
static void
apply_decision(RunRow *r, const char *step, const char *ref, bool approve, const char *label,
			   const char *note, bool compensation)
{
	OrchArgs	a = {0};

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	if (compensation)
	{
		/* a compensation that needed a human: approved runs it, rejected leaves it for review */
		orch_run_settle_approval(r, step, true, approve ? APPROVAL_APPROVED : APPROVAL_REJECTED,
								 decision(ref, approve, label, note));
		if (!approve)
			orch_args_sql(&a, "UPDATE orch.run_steps SET comp_state = 'failed' WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
		orch_step_event(r, step, "succeeded", "succeeded",
				   approve ? "compensation_approved" : "compensation_rejected");
		if (r->state == RS_WAITING_APPROVAL && approve)
			orch_set_run_state(r, RS_RUNNING, NULL, NULL);
		if (approve)
		{
			orch_run_start_compensation(r, step);
		}
		else
			orch_run_advance_compensation(r);
	}
	else if (approve)
	{
		orch_run_settle_approval(r, step, false, APPROVAL_APPROVED, decision(ref, true, label, note));
		orch_run_step_succeeded(r, step, "awaiting_approval",
					   orch_json_object1("approval_ref", ref, "approved", "true"), NULL);
		orch_run_progress(r);
	}
	else
	{
		orch_run_settle_approval(r, step, false, APPROVAL_REJECTED, decision(ref, false, label, note));
		orch_run_step_failed(r, step, "failed", note ? note : "rejected", false);
		orch_run_progress(r);
	}
}

static Datum
decide(FunctionCallInfo fcinfo, bool approve)
{
	int			ev;
	int64		run_id;
	char	   *step;
	char	   *ref;
	char	   *label = orch_key_arg(fcinfo, 3, "label");
	char	   *note = orch_text_arg(fcinfo, 4);
	RunRow		r;
	OrchArgs	a = {0};
	OrchArgs	key;
	bool		isnull;
	bool		compensation;
	char	   *state;

	orch_require_arg(fcinfo, 0, "run_id");
	orch_require_arg(fcinfo, 1, "step_id");
	run_id = PG_GETARG_INT64(0);
	step = orch_key_arg(fcinfo, 1, "step");
	ref = orch_approval_ref_arg(fcinfo, 2);

	SPI_connect();
	orch_lock_run_or_not_found(run_id, &r);
	orch_arg_int8(&a, r.id);
	orch_arg_text(&a, r.tenant);
	orch_arg_text(&a, step);
	key = a;					/* $1 to $3 */
	orch_arg_text(&a, ref);
	orch_arg_bool(&a, approve);
	orch_arg_text(&a, orch_current_actor());
	orch_arg_text(&a, label);
	orch_arg_text(&a, note);

	/* a reference is used once, for one run and step and one decision */
	if (orch_args_sql(&a, "SELECT run_id = $1 AND step_id = $3 AND approved = $5 FROM orch.approvals"
			" WHERE approval_ref = $4 AND tenant_id = $2", false, 0, SPI_OK_SELECT) > 0)
	{
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		{
			/* the same decision again: nothing changes */
			return run_call_result(orch_run_state_names[r.state]);
		}
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("approval reference \"%s\" was already used", ref),
				 errdetail("An approval reference is single-use and bound to one run and step.")));
	}
	if (orch_run_terminal(r.state))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " is \"%s\": nothing awaits approval", run_id,
						orch_run_state_names[r.state])));
	/* no gate is passed while the run is stopped for drift (OR010) */
	orch_run_require_no_drift(&r, approve ? "approve a step of" : "reject a step of");
	if (orch_args_sql(&key, "SELECT type, state, comp_state = 'awaiting_approval',"
			"   state = 'timed_out' AND type = 'human_approval'"
			"     OR (state = 'awaiting_approval' AND cap_at <= clock_timestamp())"
			" FROM orch.run_steps"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " has no step \"%s\"", run_id, step)));
	state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	compensation = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull)) && !isnull;
	/*
	 * Too late to decide: the approval request expired (its timeout passed,
	 * whether or not maintenance has timed the step out yet), or the run is
	 * past its deadline (a compensation's approval is still taken: they run
	 * after the deadline).  Refused, and nothing is recorded: the expiry is
	 * left to the maintenance pass, audited as an expiry.
	 */
	if (!compensation &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull)) && !isnull)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("the approval request of step \"%s\" of run " INT64_FORMAT " expired", step, run_id),
				 errdetail("Its timeout passed; the step times out (reason approval_expired) and follows on_timeout."),
				 errhint("Nothing was recorded.")));
	if (!compensation && r.past_deadline && strcmp(r.phase, "forward") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " is past its deadline: step \"%s\" can no longer be decided",
						run_id, step),
				 errdetail("The run fails with deadline_exceeded."),
				 errhint("Nothing was recorded.")));
	if (!compensation && strcmp(state, "awaiting_approval") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("step \"%s\" of run " INT64_FORMAT " is not awaiting approval (it is \"%s\")",
						step, run_id, state)));
	/* a concurrent use of the reference for another run wins or loses here */
	if (!orch_run_record_approval(&r, ref, step, approve, label, note))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("approval reference \"%s\" was already used", ref),
				 errdetail("An approval reference is single-use and bound to one run and step.")));
	ev = orch_set_event_context(label, note);
	apply_decision(&r, step, ref, approve, label, note, compensation);
	orch_clear_event_context(ev);
	return run_call_result(orch_run_state_names[r.state]);
}

Datum
orch_approve(PG_FUNCTION_ARGS)
{
	return decide(fcinfo, true);
}

Datum
orch_reject(PG_FUNCTION_ARGS)
{
	return decide(fcinfo, false);
}

/* ----------------------------------------------------------------------
 * Pause, resume (with the drift check), cancel
 * ---------------------------------------------------------------------- */
static void
raise_run_state(RunRow *r, const char *action)
{
	ereport(ERROR,
			(errcode(orch_run_terminal(r->state) ? ERRCODE_ORCH_TERMINAL_STATE : ERRCODE_ORCH_INVALID_TRANSITION),
			 errmsg("run " INT64_FORMAT " is \"%s\"; cannot %s it", r->id, orch_run_state_names[r->state], action)));
}

/*
 * A paused run's running sub-workflows pause with it (reason
 * parent_paused), and theirs; one that compensates finishes its
 * compensation.  A resumed run's resume those it paused (a child paused on
 * its own stays paused), each checking its drift probes as orch_resume_run
 * does.  The family's lock is held.
 */
static void
pause_children(RunRow *r)
{
	int			n;
	int64	   *ids = orch_run_open_children(r, NULL, &n);

	for (int i = 0; i < n; i++)
	{
		RunRow		c;

		/* (a child that compensates finishes its compensation) */
		if (!orch_lock_run(ids[i], r->tenant, &c) || c.state != RS_RUNNING ||
			strcmp(c.phase, "forward") != 0)
			continue;
		orch_set_run_state(&c, RS_PAUSED, "parent_paused", NULL);
		pause_children(&c);
	}
}

static void
resume_children(RunRow *r)
{
	int			n;
	int64	   *ids = orch_run_open_children(r, NULL, &n);

	for (int i = 0; i < n; i++)
	{
		RunRow		c;
		int64		prev;

		if (!orch_lock_run(ids[i], r->tenant, &c) || c.state != RS_PAUSED ||
			c.reason == NULL || strcmp(c.reason, "parent_paused") != 0)
			continue;
		if (!orch_run_probes_resume(&c))
			continue;
		prev = orch_run_busy_begin(c.id);
		orch_set_run_state(&c, RS_RUNNING, "resumed", NULL);
		resume_children(&c);
		orch_run_progress(&c);
		orch_run_busy_end(prev);
	}
}

Datum
orch_pause_run(PG_FUNCTION_ARGS)
{
	int			ev;
	RunRow		r;

	orch_require_arg(fcinfo, 0, "run_id");
	SPI_connect();
	orch_lock_run_or_not_found(PG_GETARG_INT64(0), &r);
	if (r.state != RS_PAUSED)
	{
		if (r.state != RS_RUNNING)
			raise_run_state(&r, "pause");
		ev = orch_set_event_context(NULL, NULL);
		/* a compensating run keeps the reason it fails for */
		orch_set_run_state(&r, RS_PAUSED, strcmp(r.phase, "compensating") == 0 ? NULL : "paused", NULL);
		pause_children(&r);
		orch_clear_event_context(ev);
	}
	return run_call_result(orch_run_state_names[r.state]);
}

Datum
orch_resume_run(PG_FUNCTION_ARGS)
{
	int			ev;
	RunRow		r;
	Jsonb	   *pins = orch_jsonb_arg(fcinfo, 1, "pins");

	orch_require_arg(fcinfo, 0, "run_id");
	if (pins != NULL && !JB_ROOT_IS_OBJECT(pins))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pins must be a JSON object")));
	SPI_connect();
	orch_lock_run_or_not_found(PG_GETARG_INT64(0), &r);
	if (pins != NULL)
	{
		OrchArgs	a = {0};

		orch_arg_int8(&a, r.id);
		orch_arg_text(&a, r.tenant);
		orch_arg_jsonb(&a, pins);
		/* the differences, each value cut to 100 characters, at most 2000 in all */
		orch_args_sql(&a, "SELECT left(string_agg(format('%s: the run has %s, the caller %s', left(p.key, 100),"
				"   left(coalesce(r.pins -> p.key, 'null')::text, 100), left(p.value::text, 100)),"
				"   '; ' ORDER BY p.key), 2000)"
				" FROM orch.runs r, jsonb_each($3) p"
				" WHERE r.id = $1 AND r.tenant_id = $2 AND r.pins -> p.key IS DISTINCT FROM p.value", false, 0, SPI_OK_SELECT);
		if (SPI_processed == 1 && SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_DRIFT_DETECTED),
					 errmsg("pinned context of run " INT64_FORMAT " differs from the caller's", r.id),
					 errdetail("%s.", SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
					 errhint("Nothing was changed; start a new run for the new context.")));
	}
	/* drift probes (forward runs): refused while drift is unacknowledged, checked again */
	if (r.state == RS_PAUSED && strcmp(r.phase, "forward") == 0 && !orch_run_probes_resume(&r))
		return run_call_result(orch_run_state_names[r.state]);
	if (r.state == RS_PAUSED)
	{
		ev = orch_set_event_context(NULL, NULL);
		orch_set_run_state(&r, RS_RUNNING, strcmp(r.phase, "compensating") == 0 ? NULL : "resumed", NULL);
		resume_children(&r);
		orch_run_progress(&r);
		orch_clear_event_context(ev);
	}
	else if (orch_run_terminal(r.state))
		raise_run_state(&r, "resume");
	return run_call_result(orch_run_state_names[r.state]);
}

/*
 * Cancel a run: its open tasks first (the lock order), then the run; its
 * approval task after the run (run_approvals.c).  On Citus, on the run's
 * shard.  Returns "canceled", also for a run canceled before; a run that
 * ended otherwise is an error, or (quiet) returns its state.  The run's
 * busy mark ends here; the caller is connected to SPI and clears the tenant
 * scope.
 */
const char *
orch_run_cancel(int64 run_id, const char *reason, bool quiet)
{
	RunRow		r;
	OrchArgs	a = {0};

	if (!orch_scope_run(run_id))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("run " INT64_FORMAT " does not exist", run_id)));
	orch_arg_int8(&a, run_id);
	orch_arg_text(&a, NULL);	/* $2: not used */
	orch_arg_caller_tenants(&a);
	/* with its open sub-workflows' tasks, which its cancel reaches too */
	orch_args_sql(&a, orch_run_subflows_enabled()
			? "WITH RECURSIVE f (id) AS (SELECT $1::bigint"
			"   UNION ALL SELECT c.id FROM f JOIN orch.runs c ON c.parent_run_id = f.id AND c.id > f.id"
			"     AND c.state IN ('running', 'waiting_approval', 'paused'))"
			" SELECT 1 FROM orch.tasks WHERE run_id IN (SELECT id FROM f) AND " ORCH_TENANT_IN("tenant_id", "$3")
			" AND state NOT IN ('completed', 'failed', 'cancelled')"
			" AND step_key NOT LIKE '%" ORCH_APPROVAL_SUFFIX "' ORDER BY id FOR UPDATE"
			: "SELECT 1 FROM orch.tasks WHERE run_id = $1 AND " ORCH_TENANT_IN("tenant_id", "$3")
			" AND state NOT IN ('completed', 'failed', 'cancelled')"
			" AND step_key NOT LIKE '%" ORCH_APPROVAL_SUFFIX "' ORDER BY id FOR UPDATE", false, 0, SPI_OK_SELECT);
	orch_lock_run_or_not_found(run_id, &r);
	if (orch_run_terminal(r.state))
	{
		if (r.state != RS_CANCELED && !quiet)
			raise_run_state(&r, "cancel");
		orch_run_busy_end(0);
		return orch_run_state_names[r.state];
	}
	/* the tasks are locked already (above): none is skipped */
	orch_run_cancel_locked(&r, "run_canceled", reason);
	orch_run_busy_end(0);
	/* a sub-workflow canceled: its parent's step fails now */
	orch_run_flush_notes();
	return "canceled";
}

Datum
orch_cancel_run(PG_FUNCTION_ARGS)
{
	char	   *reason = orch_text_arg(fcinfo, 1);
	const char *state;

	orch_require_arg(fcinfo, 0, "run_id");
	SPI_connect();
	state = orch_run_cancel(PG_GETARG_INT64(0), reason, false);
	return run_call_result(state);
}

/* ----------------------------------------------------------------------
 * orch_retry_run(run_id) -> new run id: a failed run again from its failed
 * steps, keeping completed outputs (lineage: retry_of).
 * ---------------------------------------------------------------------- */
Datum
orch_retry_run(PG_FUNCTION_ARGS)
{
	int			ev;
	RunRow		r;
	RunRow		nr;
	OrchArgs	run = {0};
	OrchArgs	a;
	bool		isnull;

	orch_require_arg(fcinfo, 0, "run_id");
	SPI_connect();
	orch_lock_run_or_not_found(PG_GETARG_INT64(0), &r);
	orch_arg_int8(&run, r.id);
	orch_arg_text(&run, r.tenant);
	if (r.state != RS_FAILED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run " INT64_FORMAT " is \"%s\": only a failed run can be retried", r.id,
						orch_run_state_names[r.state])));
	if (orch_args_sql(&run, "SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			" AND comp_state IN ('done', 'failed', 'running')", false, 0, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run " INT64_FORMAT " was compensated and cannot be retried", r.id),
				 errhint("Start a new run.")));
	if (orch_args_sql(&run, "SELECT 1 FROM orch.runs WHERE retry_of = $1 AND tenant_id = $2", false, 0, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("run " INT64_FORMAT " was already retried", r.id)));

	/*
	 * One retry per run: no index is unique across the partitions of
	 * orch.runs, so the original run's row says it.  Its row lock orders
	 * concurrent retries; this update (the row unchanged: the run stays
	 * terminal) makes a retry whose snapshot is older than another's fail
	 * to serialize (REPEATABLE READ, SERIALIZABLE) instead of missing it.
	 */
	orch_args_sql(&run, "UPDATE orch.runs SET state = state WHERE id = $1 AND tenant_id = $2", false, 0,
				  SPI_OK_UPDATE);
	ev = orch_set_event_context(NULL, NULL);
	/* the new run keeps the correlation id */
	/* the probes keep the original run's pins: drift since then stops the next gate */
	a = run;
	orch_arg_text(&a, orch_current_actor());
	orch_args_sql(&a, "INSERT INTO orch.runs (tenant_id, definition, version, content_hash, state, input, pins,"
			 "   created_by, deadline_at, reason_code, retry_of, correlation_id, probe_pins)"
			 " SELECT tenant_id, definition, version, content_hash, 'running', input, pins, $3::text,"
			 "   now() + (deadline_at - created_at), 'retried', id, correlation_id, probe_pins"
			 " FROM orch.runs WHERE id = $1 AND tenant_id = $2 RETURNING id", false, 0, SPI_OK_INSERT_RETURNING);
	nr.id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	nr.tenant = r.tenant;
	nr.state = RS_RUNNING;
	nr.phase = "forward";
	nr.reason = NULL;
	nr.past_deadline = false;
	nr.signals_due = false;
	/* a retry heads a family of its own (a retried child is a run of its own) */
	nr.parent_run_id = 0;
	nr.parent_step = NULL;
	nr.root_run_id = r.root_run_id != 0 ? nr.id : 0;
	if (nr.root_run_id != 0)
	{
		OrchArgs	f = {0};

		orch_arg_int8(&f, nr.id);
		orch_args_sql(&f, "UPDATE orch.runs SET root_run_id = id WHERE id = $1", false, 0, SPI_OK_UPDATE);
	}
	if (orch_citus())
	{
		/* the queues the retry needs (its definition: a reference table) */
		if (orch_args_sql(&run, "SELECT d.spec FROM orch.definitions d WHERE d.tenant_id = 'default'"
					 "   AND (d.name, d.version) = (SELECT definition, version FROM orch.runs"
					 "                               WHERE id = $1 AND tenant_id = $2)",
					 false, 0, SPI_OK_SELECT) == 1)
			orch_run_ensure_step_queues(DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0],
																		 SPI_tuptable->tupdesc, 1, &isnull)));
	}
	a = run;
	orch_arg_int8(&a, nr.id);
	/* completed steps keep their outputs; everything else runs again */
	orch_args_sql(&a, "INSERT INTO orch.run_steps (run_id, tenant_id, step_id, ord, type, spec, deps, join_policy,"
			"   needs_edge, edge_taken, out_edges, state, output, items, done_seq, comp_state, started_at, finished_at)"
			" SELECT $3, tenant_id, step_id, ord, type, spec, deps, join_policy, needs_edge,"
			/* an edge holds again only when a kept success took it */
			"   CASE WHEN state = 'succeeded' THEN edge_taken ELSE EXISTS (SELECT 1 FROM orch.run_steps x"
			"     WHERE x.run_id = $1 AND x.tenant_id = $2 AND x.state = 'succeeded'"
			"       AND (CASE WHEN x.type = 'decision' THEN x.output ->> 'next' = o.step_id"
			"            ELSE x.spec -> 'on_success' ? o.step_id END)) END,"
			"   out_edges, CASE WHEN state = 'succeeded' THEN 'succeeded' ELSE 'pending' END,"
			"   CASE WHEN state = 'succeeded' THEN output END, CASE WHEN state = 'succeeded' THEN items END,"
			"   CASE WHEN state = 'succeeded' THEN done_seq END,"
			"   CASE WHEN state = 'succeeded' THEN comp_state END,"
			"   CASE WHEN state = 'succeeded' THEN started_at END, CASE WHEN state = 'succeeded' THEN finished_at END"
			" FROM orch.run_steps o WHERE o.run_id = $1 AND o.tenant_id = $2", false, 0, SPI_OK_INSERT);
	orch_write_run_event(r.tenant, r.id, "run", "failed", "failed", "retried",
						 psprintf("retried as run " INT64_FORMAT, nr.id));
	orch_write_run_event(nr.tenant, nr.id, "run", "running", "running", "retry_of",
						 psprintf("retry of run " INT64_FORMAT, r.id));
	/* the edges taken by steps that succeeded hold again; the rest is re-decided */
	orch_run_advance(&nr);
	orch_clear_event_context(ev);
	orch_run_busy_end(0);
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_INT64(nr.id);
}

