/*
 * run_internal.h
 *	  What the workflow-run files share (runs.c: the run lifecycle, notes,
 *	  start, status, maintenance; run_steps.c: step progression;
 *	  run_control.c: approvals, pause/resume, cancel, retry).
 */
#ifndef RUN_INTERNAL_H
#define RUN_INTERNAL_H

#include "orchestrator.h"

#define ERRCODE_ORCH_APPROVAL_INVALID	MAKE_SQLSTATE('O','R','0','0','9')
#define ERRCODE_ORCH_DRIFT_DETECTED		MAKE_SQLSTATE('O','R','0','1','0')

typedef enum RunState
{
	RS_RUNNING = 0,
	RS_WAITING_APPROVAL,
	RS_PAUSED,
	RS_SUCCEEDED,
	RS_FAILED,
	RS_CANCELED,
	RS_COUNT,
	RS_INVALID = -1
} RunState;

extern const char *const run_state_names[RS_COUNT];
extern RunState run_state_from_name(const char *s);
extern bool run_terminal(RunState s);

/* A run locked FOR UPDATE */
typedef struct RunRow
{
	int64		id;
	char	   *tenant;
	RunState	state;
	char	   *phase;			/* forward | compensating */
	char	   *reason;
	bool		past_deadline;
} RunRow;

/* Run id and tenant as the first two parameters of most statements */
#define RUN_ARGS(v, run_id, tenant) \
	do { (v)[0] = Int64GetDatum(run_id); (v)[1] = orch_text_datum(tenant); } while (0)

extern Oid	rt_types[6];

/* runs.c */
extern bool lock_run(int64 run_id, const char *tenant, RunRow *r);
extern void lock_run_or_not_found(int64 run_id, RunRow *r);
extern void set_run_state(RunRow *r, RunState to, const char *reason, Jsonb *output);
extern void step_event(RunRow *r, const char *step, const char *from, const char *to,
					   const char *reason);
extern char **run_column(int col);
extern int	run_cancel_tasks(const char *ids_sql, int nargs, Oid *types, Datum *values,
							 const char *nulls, const char *reason);
extern int64 run_busy_begin(int64 run_id);
extern void run_busy_end(int64 prev);
extern Jsonb *json_object1(const char *k1, const char *v1, const char *k2, const char *raw2);

/* run_steps.c */
extern void run_progress(RunRow *r);
extern void run_progress_completed(RunRow *r, int64 task_id, const char *step);
extern void run_advance(RunRow *r);
extern void run_create_steps(RunRow *r);
extern void run_step_succeeded(RunRow *r, const char *step, const char *from, Jsonb *output,
							   const char *chosen);
extern void run_step_failed(RunRow *r, const char *step, const char *state, const char *error,
							bool compensation_required);
extern void run_advance_compensation(RunRow *r);
extern void run_close_open_steps(RunRow *r, const char *reason, bool cancel_compensations);
extern void run_start_compensation(RunRow *r, const char *step);

#endif							/* RUN_INTERNAL_H */
