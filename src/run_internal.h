/*
 * run_internal.h
 *	  What the workflow-run files share.  By layer, from the top: the SQL API
 *	  and the entries (runs.c: orch_start, orch_run_status, the flush at
 *	  statement end of the runs whose step tasks finished, orch_maintain's
 *	  part; run_control.c: approvals, pause/resume, cancel, retry); step
 *	  progression (run_steps.c) and the tasks of steps (run_step_tasks.c),
 *	  with decisions (run_decisions.c) and compensation (run_compensation.c)
 *	  beside it; the run's state at the bottom (run_state.c: its lifecycle
 *	  trigger, lock, state changes, step events, cancelling its tasks, the
 *	  notes of finished step tasks).
 */
#ifndef RUN_INTERNAL_H
#define RUN_INTERNAL_H

#include "orchestrator.h"

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

extern const char *const orch_run_state_names[RS_COUNT];
extern RunState orch_run_state_from_name(const char *s);
extern bool orch_run_terminal(RunState s);

/* A run locked FOR UPDATE */
typedef struct RunRow
{
	int64		id;
	char	   *tenant;
	RunState	state;
	char	   *phase;			/* forward | compensating */
	char	   *reason;
	bool		past_deadline;
	bool		signals_due;	/* a signal was sent, or the run resumed: its
								 * waits may consume kept signals now */
	int64		parent_run_id;	/* a sub-workflow's parent (0: none) */
	char	   *parent_step;	/* the parent's step that started it */
	int64		root_run_id;	/* the top of its family (0: not in one) */
} RunRow;

/* run_state.c: the bottom */
extern bool orch_lock_run(int64 run_id, const char *tenant, RunRow *r);
extern bool orch_run_family_try_lock(int64 run_id, const char *tenant);
extern void orch_lock_run_or_not_found(int64 run_id, RunRow *r);
extern void orch_set_run_state(RunRow *r, RunState to, const char *reason, Jsonb *output);
extern void orch_step_event(RunRow *r, const char *step, const char *from, const char *to,
					   const char *reason);
extern int	orch_run_cancel_tasks(const char *ids_sql, const OrchArgs *ids, const char *tenant,
								  const char *reason);
extern void orch_run_end_failed(RunRow *r, const char *reason);

/*
 * Notes from the task trigger (orch_runs_note): runs whose step tasks
 * finished, progressed at statement end (orch_runs_flush); the run being
 * acted on (busy) takes none.
 */
typedef struct RunNote
{
	int			level;
	int64		run_id;
	char	   *tenant;
	/*
	 * The run's tasks that completed, in order (RunDone), when that is all
	 * (else general: something else ended, the general path looks at all).
	 */
	bool		general;
	List	   *done;
	/* a step's task entered or left a retry wait (orch_run_sync_retrying) */
	bool		retry;
	/* where it is locked in the flush: its family's top run, else itself */
	int64		order;
} RunNote;

/* One completed task of a run: its id and step key */
typedef struct RunDone
{
	int64		task_id;
	char	   *step_key;
} RunDone;
extern int64 orch_run_busy_begin(int64 run_id);
extern void orch_run_busy_end(int64 prev);
extern void orch_run_busy_on_shard_begin(RunRow *r);
extern bool orch_run_busy_now(void);
extern bool orch_run_flush_enter(void);
extern void orch_run_flush_leave(void);
extern bool orch_run_notes_pending(void);
extern void orch_run_notes_sort(void);
extern bool orch_run_notes_next(RunNote *out);
extern Jsonb *orch_json_object1(const char *k1, const char *v1, const char *k2, const char *raw2);

/* run_probes.c: drift probes pinned at start, checked before gates and on resume */
extern Jsonb *orch_probes_pin(Jsonb *spec, const char *publisher, const char *definition);
extern bool orch_run_probes_hold(RunRow *r, const char *step);
extern bool orch_run_probes_resume(RunRow *r);
extern void orch_run_require_no_drift(RunRow *r, const char *action);

/* run_approvals.c: the task behind a human_approval step */
typedef enum ApprovalOutcome
{
	APPROVAL_APPROVED,
	APPROVAL_REJECTED,
	APPROVAL_EXPIRED
} ApprovalOutcome;
extern int64 orch_run_open_approval(RunRow *r, const char *step, bool compensation);
extern void orch_run_settle_approval(RunRow *r, const char *step, bool compensation,
									 ApprovalOutcome outcome, Jsonb *decision);
extern void orch_run_cancel_approvals(RunRow *r, const char *reason);
extern bool orch_run_record_approval(const RunRow *r, const char *ref, const char *step, bool approved,
									 const char *label, const char *note);
/* run_signals.c: the signals a run's wait steps consume */
extern bool orch_run_signals_enabled(void);
extern bool orch_run_take_signal(RunRow *r, const char *step, int64 *id, Jsonb **payload);
extern int	orch_run_signal_waits(RunRow *r);
/* run_subflows.c: the sub-workflows of subflow steps */
extern bool orch_run_subflows_enabled(void);
extern bool orch_run_starting_child(void);
extern bool orch_run_start_children(RunRow *r, const char *step, int from, int to, Jsonb *items,
									Jsonb *input, const char *definition, int version, char **error);
extern int64 *orch_run_open_children(RunRow *r, const char *step, int *n);
/* run_decisions.c: beside progression */
extern Datum orch_run_path_keys(RunRow *r, const char *path);
extern Jsonb *orch_run_context(RunRow *r, Jsonb *result);
extern Jsonb *orch_run_context_value(RunRow *r, Jsonb *ctx, const char *path);
extern char *orch_run_decide(RunRow *r, const char *step, Jsonb *result);
extern bool orch_parse_timestamp_safely(Jsonb *j, TimestampTz *out);

/* run_steps.c */
/*
 * An interval a step's spec gives under KEY (a number of seconds or an
 * interval string, as validated), or NULL: read where the step is listed,
 * because Citus refuses a stable function of a column (the text's cast to
 * interval) in an UPDATE it routes to a shard.
 */
#define RUN_SPEC_INTERVAL(SPEC, KEY) RUN_JSON_INTERVAL("(" SPEC " -> '" KEY "')")
/* The same of a jsonb value J (a number of seconds or a string), or NULL */
#define RUN_JSON_INTERVAL(J) \
	"CASE WHEN jsonb_typeof(" J ") = 'number' THEN make_interval(secs => (" J " #>> '{}')::float8)" \
	"  WHEN jsonb_typeof(" J ") = 'string' THEN (" J " #>> '{}')::interval END"

/* run_step_tasks.c: the tasks of steps */
/* Where an approval's task goes: the step's queue, else the run policy's, else this */
#define APPROVAL_DEFAULT_QUEUE "approvals"
extern void orch_run_ensure_step_queues(Jsonb *spec);
extern char *orch_run_step_no_queue(void);
/* now + after (NULL: no cap) as the next parameter: a step's soft cap */
extern void orch_arg_step_cap(OrchArgs *a, TimestampTz now, const Interval *after);
/* The error of a step whose queue does not exist (and is not created) */
#define STEP_NO_QUEUE "its queue does not exist and orchestrator.auto_create_queues is off"
/* the same on Citus, where a step's queue is created only by orch_start (and orch_retry_run) */
#define STEP_NO_QUEUE_CITUS "its queue does not exist (on Citus a run's queues are created when it starts; create it with orch_create_queue)"
#define STEP_TOO_LARGE "its input (the run's input and its dependencies' outputs) is over orchestrator.max_step_input_size"
extern char *orch_run_start_step_task(RunRow *r, const char *step, const Interval *timeout);
extern int64 orch_run_enqueue_step_task(RunRow *r, const char *step, bool compensation);
extern int orch_run_enqueue_map_items(RunRow *r, const char *step, int from, int to, Jsonb *items);
extern void orch_run_progress(RunRow *r);
extern bool orch_run_progress_completed(RunRow *r, int64 task_id, const char *step_key);
extern void orch_run_advance(RunRow *r);
extern void orch_run_sync_retrying(RunRow *r);
extern void orch_run_create_steps(RunRow *r);
extern void orch_run_step_succeeded(RunRow *r, const char *step, const char *from, Jsonb *output,
							   const char *chosen);
extern void orch_run_step_failed(RunRow *r, const char *step, const char *state, const char *error,
							bool compensation_required);
extern void orch_run_advance_compensation(RunRow *r);
extern void orch_run_close_open_steps(RunRow *r, const char *reason, bool cancel_compensations);
extern void orch_run_cancel_locked(RunRow *r, const char *reason, const char *note);
extern void orch_run_flush_notes(void);
extern void orch_run_start_compensation(RunRow *r, const char *step);

#endif							/* RUN_INTERNAL_H */
