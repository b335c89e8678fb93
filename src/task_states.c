/*
 * task_states.c
 *	  The task states and the matrix of the transitions between them: which
 *	  state may follow which (self-transitions included), for the lifecycle
 *	  trigger and the API's checks.
 */
#include "postgres.h"

#include "orchestrator.h"

const char *const orch_state_names[TS_COUNT] = {
	"received", "queued", "executing", "awaiting_tool",
	"awaiting_user_confirmation", "completed", "failed", "cancelled"
};

/* row = from, column = to (self-transitions included) */
static const bool task_matrix[TS_COUNT][TS_COUNT] = {
	/* rec    que    exe    tool   conf   comp   fail   canc */
	{true, true, false, false, false, false, true, true},	/* received */
	{false, true, true, false, false, false, true, true},	/* queued */
	{false, false, true, true, true, true, true, true},	/* executing */
	{false, false, true, true, false, false, true, true},	/* awaiting_tool */
	{false, false, true, false, true, false, true, true},	/* awaiting_user_confirmation */
	{false, false, false, false, false, true, false, false},	/* completed */
	{false, false, false, false, false, false, true, false},	/* failed */
	{false, false, false, false, false, false, false, true},	/* cancelled */
};

/* The state the len bytes at name spell (TS_INVALID: none) */
static TaskState
state_from_bytes(const char *name, size_t len)
{
	for (int i = 0; i < TS_COUNT; i++)
		if (strlen(orch_state_names[i]) == len && memcmp(name, orch_state_names[i], len) == 0)
			return (TaskState) i;
	return TS_INVALID;
}

/* The state a text value names, read in place */
TaskState
orch_state_from_text(Datum t)
{
	text	   *v = DatumGetTextPP(t);

	return state_from_bytes(VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
}

TaskState
orch_state_from_name(const char *name)
{
	return state_from_bytes(name, strlen(name));
}

bool
orch_state_is_terminal(TaskState s)
{
	return s == TS_COMPLETED || s == TS_FAILED || s == TS_CANCELLED;
}

bool
orch_task_transition_allowed(TaskState from, TaskState to)
{
	return task_matrix[from][to];
}
