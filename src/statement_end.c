/*
 * statement_end.c
 *	  The one dispatcher at the end of a statement on orch.tasks.  In order:
 *	  the audit writer (events.c) writes the events the row trigger
 *	  buffered; admission (admission.c) fills the slots that tasks leaving
 *	  executing freed; workflow progress (runs.c) moves the runs whose step
 *	  tasks finished.  Admission never calls into workflows.
 */
#include "postgres.h"

#include "commands/trigger.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_tasks_statement_end);
PG_FUNCTION_INFO_V1(orch_events_flush);
PG_FUNCTION_INFO_V1(orch_gate_trigger);

static void
check_called_as_trigger(FunctionCallInfo fcinfo, const char *name)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s: not called by trigger manager", name)));
}

/*
 * After an UPDATE the three run in the order above; after an INSERT (which
 * frees no slot and finishes no step) only the audit writer runs.
 */
static void
statement_end(bool audit, bool admission_and_workflows)
{
	orch_schema_version();
	if (audit)
		orch_events_statement_end();
	if (admission_and_workflows)
	{
		orch_gate_statement_end();
		orch_runs_flush();
	}
}

/* tasks_statement_end: AFTER INSERT OR UPDATE FOR EACH STATEMENT */
Datum
orch_tasks_statement_end(PG_FUNCTION_ARGS)
{
	bool		update;

	check_called_as_trigger(fcinfo, "orch_tasks_statement_end");
	update = TRIGGER_FIRED_BY_UPDATE(((TriggerData *) fcinfo->context)->tg_event);
	statement_end(true, update);
	return PointerGetDatum(NULL);
}

/*
 * Task rows appended without the executor (append.c) end their statement
 * as an INSERT's trigger would.
 */
void
orch_tasks_inserted(void)
{
	statement_end(true, false);
}

/* ... and task rows updated without it, as an UPDATE's */
void
orch_tasks_updated(void)
{
	statement_end(true, true);
}

/*
 * A 0.7.0 schema has two triggers instead, fired in name order:
 * tasks_events (INSERT and UPDATE) and tasks_gate (UPDATE), each calling
 * the dispatcher for its part.
 */

/* tasks_events: AFTER INSERT OR UPDATE FOR EACH STATEMENT */
Datum
orch_events_flush(PG_FUNCTION_ARGS)
{
	check_called_as_trigger(fcinfo, "orch_events_flush");
	statement_end(true, false);
	return PointerGetDatum(NULL);
}

/* tasks_gate: AFTER UPDATE FOR EACH STATEMENT */
Datum
orch_gate_trigger(PG_FUNCTION_ARGS)
{
	check_called_as_trigger(fcinfo, "orch_gate_trigger");
	statement_end(false, true);
	return PointerGetDatum(NULL);
}
