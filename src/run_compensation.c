/*
 * run_compensation.c
 *	  Beside step progression: compensation.  When a run fails after steps
 *	  with a compensation succeeded, their compensation tasks run in reverse
 *	  completion order (one at a time), each started like a step's task.
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
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "run_internal.h"

/*
 * One compensation at a time, latest completed step first.  A paused run
 * compensates on when it is resumed.
 */
void
orch_run_advance_compensation(RunRow *r)
{
	OrchArgs	a = {0};
	char	   *step;
	char	   *mode;

	if (r->state == RS_PAUSED)
		return;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	if (orch_args_sql(&a, "SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
			" AND comp_state IN ('running', 'awaiting_approval')", false, 0, SPI_OK_SELECT) > 0)
		return;
	if (orch_args_sql(&a, "SELECT 1 FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2 AND comp_state = 'failed'", false, 0, SPI_OK_SELECT) > 0)
	{
		/* a compensation failed for good: manual review */
		orch_run_end_failed(r, "compensation_failed");
		return;
	}
	if (orch_args_sql(&a, "SELECT step_id, coalesce(spec -> 'compensation' ->> 'mode', 'auto') FROM orch.run_steps"
			" WHERE run_id = $1 AND tenant_id = $2 AND comp_state = 'pending'"
			" ORDER BY done_seq DESC LIMIT 1", false, 0, SPI_OK_SELECT) == 0)
	{
		orch_run_end_failed(r, r->reason);
		return;
	}
	step = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	mode = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	orch_arg_text(&a, step);
	if (strcmp(mode, "approval") == 0)
	{
		/* it waits for a human in its task (awaiting_user_confirmation) until it starts */
		bool		previous = !orch_schema_approval_tasks();

		orch_arg(&a, INT8OID, previous ? (Datum) 0 : Int64GetDatum(orch_run_open_approval(r, step, true)),
				 previous);
		orch_args_sql(&a, "UPDATE orch.run_steps SET comp_state = 'awaiting_approval', comp_task_id = $4"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
		orch_step_event(r, step, "succeeded", "succeeded", "compensation_approval_requested");
		orch_set_run_state(r, RS_WAITING_APPROVAL, NULL, NULL);	/* keeps the failure reason */
		return;
	}
	orch_run_start_compensation(r, step);
}

/* A step's compensation task; when it cannot be queued, the compensation fails. */
void
orch_run_start_compensation(RunRow *r, const char *step)
{
	OrchArgs	a = {0};
	int64		id = orch_run_enqueue_step_task(r, step, true);

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	if (id < 0)
	{
		orch_args_sql(&a, "UPDATE orch.run_steps SET comp_state = 'failed'"
				" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
		orch_step_event(r, step, "succeeded", "succeeded", "compensation_failed");
		orch_run_advance_compensation(r);
		return;
	}
	orch_arg_int8(&a, id);
	orch_args_sql(&a, "UPDATE orch.run_steps SET comp_state = 'running', comp_task_id = $4"
			" WHERE run_id = $1 AND tenant_id = $2 AND step_id = $3", false, 0, SPI_OK_UPDATE);
	orch_step_event(r, step, "succeeded", "succeeded", "compensation_started");
}
