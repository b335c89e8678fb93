/*
 * orchestrator.h
 *	  Shared declarations of the orchestrator extension: SQLSTATEs, states,
 *	  retry policy, and the helpers the per-concern C files share.
 */
#ifndef ORCHESTRATOR_H
#define ORCHESTRATOR_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/tupdesc.h"
#include "commands/trigger.h"
#include "utils/rel.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

/* SQLSTATEs of the extension (OR001 ...) */
#define ERRCODE_ORCH_INVALID_TRANSITION		MAKE_SQLSTATE('O','R','0','0','1')
#define ERRCODE_ORCH_TERMINAL_STATE			MAKE_SQLSTATE('O','R','0','0','2')
#define ERRCODE_ORCH_STALE_LEASE			MAKE_SQLSTATE('O','R','0','0','3')
#define ERRCODE_ORCH_IDEMPOTENCY_CONFLICT	MAKE_SQLSTATE('O','R','0','0','4')
#define ERRCODE_ORCH_NOT_FOUND				MAKE_SQLSTATE('O','R','0','0','5')
#define ERRCODE_ORCH_ADMISSION_REJECTED		MAKE_SQLSTATE('O','R','0','0','6')

/*
 * The step key of the task behind a human_approval step: the step's id and
 * this (run_approvals.c).  orch_confirm and orch_cancel refuse such a task.
 */
#define ORCH_APPROVAL_SUFFIX ":approval"
#define ERRCODE_ORCH_APPROVAL_INVALID	MAKE_SQLSTATE('O','R','0','0','9')

/* Task states */
typedef enum TaskState
{
	TS_RECEIVED = 0,
	TS_QUEUED,
	TS_EXECUTING,
	TS_AWAITING_TOOL,
	TS_AWAITING_CONFIRMATION,
	TS_COMPLETED,
	TS_FAILED,
	TS_CANCELLED,
	TS_COUNT,
	TS_INVALID = -1
} TaskState;

/* task_states.c: the states and the matrix of their transitions */
extern const char *const orch_state_names[TS_COUNT];
extern TaskState orch_state_from_name(const char *name);
extern TaskState orch_state_from_text(Datum t);
extern bool orch_state_is_terminal(TaskState s);
extern bool orch_task_transition_allowed(TaskState from, TaskState to);

/* Error classes */
typedef enum ErrorClass
{
	EC_TRANSIENT = 0,
	EC_RETRYABLE,
	EC_RATE_LIMITED,
	EC_DEPENDENCY_FAILED,
	EC_NON_RETRYABLE,
	EC_COMPENSATION_REQUIRED,
	EC_COUNT
} ErrorClass;

extern const char *const orch_error_class_names[EC_COUNT];
extern ErrorClass orch_error_class_from_name(const char *name); /* 22023 */

typedef enum BackoffKind
{
	BACKOFF_FIXED,
	BACKOFF_EXPONENTIAL,
	BACKOFF_JITTERED,
	BACKOFF_SCHEDULE
} BackoffKind;

/* The retry policy: queue settings merged with per-task overrides */
typedef struct RetryPolicy
{
	int			max_attempts;
	int			max_failures;
	BackoffKind backoff;
	int64		initial_delay;	/* microseconds */
	int64		max_delay;		/* microseconds */
	int			nschedule;
	int64	   *schedule;		/* microseconds, nschedule entries */
	uint32		retry_on;		/* bit per ErrorClass */
	bool		escalate;		/* on_exhausted = escalate */
	bool		not_safe_to_retry;
} RetryPolicy;

/* Everything a queue's settings say, defaults applied */
typedef struct QueueSettings
{
	int			priority;
	int64		lease;			/* microseconds */
	int64		idempotency_ttl;	/* microseconds */
	int64		timeout;		/* microseconds, 0 = none */
	int			concurrency_key_limit;
	int			owner_limit;	/* 0 = none */
	int			queue_limit;	/* 0 = none */
	int			rate_count;		/* 0 = no rate limit */
	int64		rate_per;		/* microseconds */
	bool		rate_error;		/* on_exceed = error */
	bool		fair;			/* fairness round_robin (else none) */
	bool		fair_by_key;	/* fairness_key concurrency_key (else tenant) */
	RetryPolicy policy;
} QueueSettings;

typedef struct RetryDecision
{
	bool		retry;
	TaskState	next_state;		/* TS_INVALID: unchanged (terminal) */
	const char *reason_code;
	int64		delay;			/* microseconds; valid when retry */
} RetryDecision;

/* A task row locked FOR UPDATE by orch_lock_task (task_ops.c) */
typedef struct OrchTask
{
	int64		id;
	char	   *tenant;
	char	   *queue;
	TaskState	state;
	int32		attempts;
	int32		failures;
	bool		has_max_attempts;
	int32		max_attempts;
	bool		has_max_failures;
	int32		max_failures;
	Jsonb	   *retry_policy;	/* NULL: none */
	bool		has_token;
	pg_uuid_t	token;
	char	   *lease_owner;
	bool		has_claimed_at;
	TimestampTz claimed_at;
	bool		lease_expired;	/* lease_expires_at <= statement_timestamp() */
	bool		timed_out;		/* claimed_at + timeout <= statement_timestamp() */
	bool		retry_wait;		/* awaiting_tool with retry_at */
	bool		ready;			/* claimable (ready_at set) */
	char	   *approval_of;	/* the task behind a human_approval step: its
								 * step key; else NULL */
	int64		run_id;			/* its run, when approval_of is set */
} OrchTask;

/* task_ops.c */
extern bool orch_lock_task(int64 id, OrchTask *t);
extern void orch_lock_task_or_not_found(int64 id, OrchTask *t);
extern void orch_check_lease(OrchTask *t, pg_uuid_t *token, const char *action);
extern void orch_record_attempt(OrchTask *t, const char *outcome, const char *error_class,
								const char *error, bool has_retry_at, TimestampTz retry_at);
extern int64 orch_task_id_arg(FunctionCallInfo fcinfo);
extern pg_uuid_t *orch_lease_token_arg(FunctionCallInfo fcinfo);
extern Datum orch_task_call_end(const char *state);
extern void orch_cancel_locked(OrchTask *t, const char *reason);
extern bool orch_cancel_allowed(OrchTask *t);
extern RetryDecision orch_fail_locked(OrchTask *t, ErrorClass ec, const char *error,
									  bool has_retry_after, int64 retry_after,
									  const char *outcome, TimestampTz *retry_at);

/* claim_fair.c: the candidates of a claim of a queue with fairness round_robin */
typedef struct FairClaim FairClaim;
extern FairClaim *orch_fair_pick(const char *queue, const QueueSettings *qs, int allowed,
								 Datum tenants);
extern int	orch_fair_candidates(FairClaim *fc, int64 **ids, char ***owners, char ***tenants);
extern void orch_fair_served(FairClaim *fc, const bool *claimed);

/* locks.c: transaction-scoped advisory locks on names */
extern void orch_xact_lock(const char *kind, const char *a, const char *b);
extern void orch_xact_lock_shared(const char *kind, const char *a, const char *b);
extern bool orch_xact_try_lock(const char *kind, const char *a, const char *b);

/* admission.c */
extern bool orch_gate_promoting;
extern bool orch_gate_handover;
extern bool orch_gate_admit(const char *queue, const char *key, const char *tenant,
							int64 self_id, int32 priority, TimestampTz created_at,
							bool may_hand_over);
extern void orch_gate_set_try_only(bool on);
extern void orch_require_read_committed(void);
extern void orch_gate_note_release(const char *queue, const char *key, const char *tenant);
extern int	orch_gate_promote(const char *queue, const char *key, const char *tenant);
extern int	orch_gate_enforce(const char *queue, const char *key, const char *tenant);
extern int	orch_gate_reconcile(const char *queue, int max_keys);
extern int	orch_gate_repair(const char *queue, int limit);
extern void orch_gate_statement_end(void);

/*
 * The time due work is measured against: now(), which advances with each
 * transaction a procedure commits, or the statement's time, which a claim
 * that waits advances with each look (claim_wait.c), whichever is later.
 */
#define ORCH_NOW "greatest(now(), statement_timestamp())"
/*
 * A queue's claimable tasks, as tasks_claim_idx finds them: the index leads
 * with a 64-bit hash of the queue's name (a key of fixed width, which the
 * btree compares and reads without walking a text), so a statement that
 * reads it says the hash (ORCH_AT_QUEUE_KEY: of table alias T's queue and
 * of the queue P) beside the name's own condition, which sorts apart two
 * names of one hash.
 */
#define ORCH_QUEUE_KEY(E) "pg_catalog.hashtextextended(" E ", 0)"
#define ORCH_AT_QUEUE_KEY(T, P) " AND " ORCH_QUEUE_KEY(T ".queue") " = " ORCH_QUEUE_KEY(P)
/*
 * May a claim hand out the task T: a plain one always, a workflow step's
 * only as orch.step_claimable says (dequeue.c).
 */
#define ORCH_RUN_FILTER_ON(T) \
	" AND (" T ".run_id IS NULL OR orch.step_claimable(" T ".run_id, " T ".tenant_id, " T ".step_key))"

/*
 * housekeeping.c: what a claim and maintenance do first.  What they look for
 * ($2 queue, $3 tenants or NULL): leases that expired (orch_recover_expired)
 * and delayed tasks that became due (orch_wake_delayed).  One text each for
 * the work and the probe.
 */
#define ORCH_EXPIRED_WHERE \
	" WHERE queue = $2 AND state = 'executing' AND lease_expires_at <= statement_timestamp()" \
	"   AND " ORCH_TENANT_IN("tenant_id", "$3")
#define ORCH_DELAYED_WHERE \
	" WHERE queue = $2 AND ready_at IS NULL AND NOT gated" \
	"   AND (state = 'queued' OR (state = 'awaiting_tool' AND retry_at IS NOT NULL))" \
	"   AND coalesce(retry_at, run_at) <= " ORCH_NOW \
	"   AND " ORCH_TENANT_IN("tenant_id", "$3")
extern int	orch_wake_delayed(const char *queue, int limit, Datum tenants);
extern int	orch_recover_expired(const char *queue, int limit, Datum tenants);
extern void orch_claim_housekeeping(const char *queue, Datum tenants);
extern void orch_claim_housekeeping_leased(const char *queue, TimestampTz out);
extern TimestampTz orch_next_due(const char *queue, Datum tenants);

/* claim_wait.c: waking the claims that wait */
extern void orch_claim_wait_init(void);
extern bool orch_claim_wait_shared(void);
extern void orch_claim_wake_note(const char *queue);
extern void orch_claim_slot_note(const char *queue);
extern void orch_claim_wake_all(void);
extern void orch_claim_taken(const char *queue, bool kept_locks);
extern bool orch_claim_generation(const char *queue, bool due, uint64 *gen);
extern void orch_claim_due_note(const char *queue);
extern void orch_claim_wait_begin(bool shared_ok);
extern void orch_claim_wait_prepare(const char *queue);
extern void orch_claim_wait_sleep(TimestampTz next, TimestampTz deadline);
extern void orch_claim_wait_done(void);

/*
 * task_store.c: the one writer of task rows.  What a row is given; a field
 * left zero or NULL is not given (the column's default; state 'queued',
 * reason 'enqueued', run_at now).
 */
typedef struct OrchTaskRow
{
	int64		id;				/* 0: the sequence's next */
	const char *tenant;
	const char *queue;
	const char *state;
	const char *reason_code;
	int32		priority;
	bool		has_run_at;
	TimestampTz run_at;
	bool		has_max_attempts;
	int32		max_attempts;
	bool		has_max_failures;
	int32		max_failures;
	Jsonb	   *retry_policy;
	Interval   *timeout;
	const char *idempotency_key;
	const char *owner;
	const char *concurrency_key;
	int64		run_id;			/* 0: none */
	int64		retry_of;		/* 0: none */
	const char *correlation_id;
} OrchTaskRow;
extern int64 orch_task_insert(const OrchTaskRow *t, Jsonb *payload, const char *step_key);
extern void orch_tasks_insert(const OrchTaskRow *t, Datum payloads, Datum step_keys, int n,
							  int64 *ids);
/* a row trigger's work on one row's values (every column, set in place) */
typedef void (*OrchRowHook) (Relation rel, Datum *values, bool *nulls);
extern bool orch_tasks_write(const OrchTaskRow *t, Datum payloads, int n, int64 *ids,
							 OrchRowHook row_hook);
/* ... and of attempt rows: tenant_id, task_id, attempt, worker, lease_token, started_at, outcome, error_class, error, retry_at */
#define ORCH_ATTEMPT_COLS 10
extern void orch_attempts_insert(int n, const Datum *v, const bool *nulls);
extern TimestampTz orch_attempt_end(bool has_claim, TimestampTz claimed_at);
extern void orch_attempts_insert_rows(SPITupleTable *tt, uint64 rows, int first, int only_col,
									  const char *outcome, const char *error);

/* deadletter.c: the reasons of a dead letter, and its re-drive */
#define ORCH_DEAD_LETTER_REASONS \
	"('max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable'," \
	" 'compensation_required', 'not_safe_to_retry')"
extern int64 orch_redrive(int64 id, bool skip_redriven);

/* enqueue.c */
extern int64 orch_enqueue_internal(const char *queue, Jsonb *payload,
								   const char *tenant, const char *owner);

/* settings.c: parsing and defaults; queues.c: the queue row and its API */
extern void orch_settings_defaults(QueueSettings *qs);
extern void orch_settings_apply(QueueSettings *qs, Jsonb *settings, bool retry_only);
extern Jsonb *orch_settings_to_jsonb(const QueueSettings *qs);
extern bool orch_load_queue(const char *queue, QueueSettings *qs, bool *paused);
extern void orch_ensure_queue(const char *queue);

/* retry.c */
extern bool orch_retry_after_arg(FunctionCallInfo fcinfo, int argno, int64 *usecs);
extern RetryDecision orch_decide(const RetryPolicy *p, ErrorClass ec,
								 int attempts, int failures, bool terminal,
								 bool has_retry_after, int64 retry_after,
								 int64 task_id);

/* state_machines.c: the same trigger on a user table (search_path pinned) */
extern HeapTuple orch_user_table_trigger(TriggerData *trigdata, const char *column,
										 const char *machine);

/* events.c: the audit writer */
extern void orch_write_event_full(const char *tenant, int64 task_id, bool has_task,
								  int64 run_id, bool has_run, const char *entity,
								  const char *from_state, const char *to_state,
								  const char *reason_code, const char *label, int32 attempt,
								  pg_uuid_t *lease_token, const char *note, int64 waited_us);
extern void orch_buffer_event(const char *entity, const char *tenant, bool has_task, int64 task_id,
							  bool has_run, int64 run_id,
							  const char *from_state, const char *to_state, const char *reason_code,
							  const char *label, int32 attempt, pg_uuid_t *token, const char *note,
							  int64 waited_us);
extern bool orch_has_flush_trigger(Relation rel);
extern void orch_events_statement_end(void);
/* lifecycle.c: the row trigger's work on a task row inserted without the executor */
extern void orch_task_inserting(Relation rel, Datum *values, bool *nulls);
/* ... and on one updated without it (oldtup: the row before) */
extern void orch_task_updating(Relation rel, HeapTuple oldtup, const Datum *ov, const bool *on,
							   Datum *values, bool *nulls);
/* statement_end.c: the statement-end trigger's work after such inserts, and updates */
extern void orch_tasks_inserted(void);
extern void orch_tasks_updated(void);
extern void orch_write_event(const char *tenant, int64 task_id, bool has_task,
							 const char *entity, const char *from_state,
							 const char *to_state, const char *reason_code,
							 int32 attempt, pg_uuid_t *lease_token,
							 const char *note);
extern int	orch_set_event_context(const char *actor, const char *note);
extern int	orch_set_event_context_ext(const char *actor, const char *note,
									   bool worker_actor);
extern void orch_clear_event_context(int token);
extern void orch_event_context_completion_in_task(void);
extern void orch_event_context_enqueue_in_task(void);
extern int64 orch_next_event_id(void);
extern int64 orch_next_attempt_id(void);
extern int64 orch_last_task_id(void);
extern TimestampTz orch_metrics_clock(void);
extern bool orch_metrics_clock_publish(TimestampTz now);

typedef struct OrchEventContext
{
	bool		active;
	bool		worker_actor;
	bool		completion_in_task;	/* orch_event_context_completion_in_task */
	bool		enqueue_in_task;	/* orch_event_context_enqueue_in_task */
	char	   *actor;
	char	   *note;
} OrchEventContext;

extern const OrchEventContext *orch_event_context(void);
extern void orch_events_defer(void);
extern void orch_events_undefer(bool flush);
extern void orch_write_run_event(const char *tenant, int64 run_id, const char *entity,
								 const char *from_state, const char *to_state,
								 const char *reason_code, const char *note);

/* row_triggers.c: what the row triggers share */
extern void orch_raise_invalid_transition(const char *what, const char *from, const char *to) pg_attribute_noreturn();
extern void orch_raise_terminal(const char *what, const char *from, const char *to) pg_attribute_noreturn();
extern bool orch_restoring(void);
extern bool orch_tuples_identical(HeapTuple a, HeapTuple b, TupleDesc td);

/* run_state.c: a run's step task finished (noted for statement end) */
extern void orch_runs_note(int64 run_id, const char *tenant, int64 task_id, const char *step_key,
						   bool completed);
/* ... or a step's task entered or left a retry wait (the step reads retrying) */
extern void orch_runs_note_retry(int64 run_id, const char *tenant);

/* runs.c: workflow runs; run_control.c: a run cancelled */
extern void orch_runs_flush(void);
extern const char *orch_run_cancel(int64 run_id, const char *reason, bool quiet);
/* run_state.c: a run state's name */
extern bool orch_run_state_known(const char *s);
extern int	orch_runs_maintain(int limit);

/* tenant.c: the tenants a call may touch (bindings, and the Citus scope) */
extern Oid	orch_caller_role(void);
extern char *orch_current_actor(void);
extern bool orch_caller_restricted(void);
extern bool orch_tenant_allowed(const char *tenant);
extern bool orch_found_visible(int col);
extern Datum orch_caller_tenants_datum(bool *isnull);
extern void orch_spi_caller_tenants(Datum *values, char *nulls, int i);
extern char *orch_resolve_tenant(const char *requested);
extern char *orch_caller_only_tenant(void);
extern void orch_require_tenant(const char *tenant);
extern void orch_require_unrestricted(const char *what);
extern bool orch_caller_is_admin_role(void);
extern void orch_tenant_cache_forget(void);
/* on Citus: the tenant a call is scoped to */
extern const char *orch_scoped_tenant(void);
extern void orch_scope_tenant(const char *tenant);
extern void orch_scope_clear(void);
extern void orch_spi_scope_tenants(Datum *values, char *nulls, int i);
extern bool orch_scope_task(int64 id);
extern bool orch_scope_tasks(Datum ids);
extern bool orch_scope_command(int64 id);
extern bool orch_scope_run(int64 id);
extern bool orch_scope_lookup_again(int64 id);
extern void orch_require_one_tenant(const char *tenant, const char *what);

/* task_routing.c: on Citus, the tenant of an id as this backend learnt it */
typedef enum OrchRouteKind
{
	ORCH_ROUTE_NONE = 0,
	ORCH_ROUTE_TASK,			/* orch.tasks */
	ORCH_ROUTE_COMMAND,			/* orch.commands */
	ORCH_ROUTE_RUN				/* orch.runs */
} OrchRouteKind;
extern void orch_route_note(OrchRouteKind kind, int64 id, const char *tenant);
extern void orch_route_note_rows(OrchRouteKind kind, SPITupleTable *tt, uint64 n,
								 int col, const char *tenant);
extern char *orch_route_find(OrchRouteKind kind, int64 id);
extern void orch_route_forget(OrchRouteKind kind, int64 id);

/* orchestrator.c: the GUCs */
extern bool orch_auto_create_queues;
extern int	orch_max_payload_size;
extern int	orch_max_batch_size;
extern int	orch_max_step_input_size;
extern bool orch_notify;
extern int	orch_retention;
extern int	orch_history_partition;
extern int	orch_stuck_after;
extern char *orch_command_queue;
extern int	orch_max_claim_wait;
extern int	orch_claim_cache_max_age;
extern int	orch_max_subflow_depth;

/* args.c: argument checks and value conversions */
extern void orch_require_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern char *orch_text_arg(FunctionCallInfo fcinfo, int argno);
/* Longest key-like text argument (worker, owner, concurrency key, actor, ...) */
#define ORCH_MAX_KEY_BYTES 512
extern char *orch_key_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern void orch_check_batch_size(int64 n, const char *what);
extern int32 orch_int4_arg(FunctionCallInfo fcinfo, int argno, const char *name,
						   int32 min, int32 max, int32 dflt);
extern int64 orch_interval_arg(FunctionCallInfo fcinfo, int argno, const char *name, int64 dflt);
extern void orch_check_name(const char *name, const char *what);
extern char *orch_correlation_arg(FunctionCallInfo fcinfo, int argno);
extern char *orch_approval_ref_arg(FunctionCallInfo fcinfo, int argno);
extern int64 orch_interval_usecs(Interval *iv);
extern ErrorData *orch_try_data_exception(void (*fn) (void *arg), void *arg);
extern ErrorData *orch_try_interval_text(const char *text, int64 *usecs);
extern Interval *orch_usecs_interval(int64 usecs);
extern void orch_check_payload_size(Jsonb *j, const char *what);
extern Jsonb *orch_jsonb_arg(FunctionCallInfo fcinfo, int argno, const char *what);
extern pg_uuid_t *orch_new_uuid(void);
extern Datum orch_text_datum(const char *s);
extern Datum orch_text_array1(const char *s);
extern void orch_not_found(const char *what, int64 id) pg_attribute_noreturn();

/* xact_lists.c: per-transaction lists, items noted per subtransaction level */
typedef struct OrchLeveled
{
	int			level;			/* the first member of every item */
} OrchLeveled;
/*
 * A module's transaction state: up to two lists of OrchLeveled items (in
 * TopTransactionContext), emptied when the transaction ends, their items
 * taken back by an aborted subtransaction and handed to the parent by a
 * committed one; and reset, called for the module's other fields when the
 * transaction ends (xact_end) or a subtransaction aborts.
 */
typedef struct OrchXactLists
{
	List	  **lists[2];
	void		(*reset) (bool xact_end);
	bool		registered;
} OrchXactLists;
extern void orch_xact_lists_use(OrchXactLists *s);

/* plan_floor.c: the planner sees the tables of schema orch as never empty */
extern void orch_plan_floor_init(void);

/* schema.c: the installed schema version (55000 when not served), orch.<name> */
extern int	orch_schema_version(void);
/* what the schema in use has (the previous one lacks each) */
extern bool orch_schema_rows_record_history(void);
extern bool orch_schema_keyed_bindings(void);
extern bool orch_schema_step_claimable(void);
extern bool orch_schema_approval_tasks(void);
extern bool orch_schema_run_keys(void);
extern bool orch_schema_distributed_fold(void);
extern bool orch_schema_bounded_fold(void);
extern bool orch_schema_fair_claims(void);
extern bool orch_schema_signals(void);
extern bool orch_schema_schedules(void);
extern bool orch_schema_subflows(void);
extern Oid	orch_namespace_oid(void);
extern Oid	orch_relid(const char *name);
extern void orch_schema_on_reset(void (*fn) (void));
extern void orch_schema_on_relcache(void (*fn) (Datum arg, Oid relid));

/* spi.c: SPI parameters and search_path (with orch_plan/orch_exec below) */
extern bool orch_spi_executing_kept(void);
extern void orch_spi_text(Datum *values, char *nulls, int i, const char *s);
extern int	orch_pin_search_path(void);	/* AtEOXact_GUC(true, result) undoes it */

#define ORCH_DEFAULT_TENANT "default"

/*
 * spi.c: the one way to run SQL.  orch_plan keeps a statement's generic
 * plan for the backend's life (one cache, keyed by the statement);
 * orch_plan_once plans with the values and keeps nothing; orch_exec runs a
 * plan and checks its SPI_OK_* result (ORCH_SPI_ANY: any success), naming
 * the statement if it is not the one expected; it returns SPI_processed.
 */
#define ORCH_SPI_ANY 0
extern SPIPlanPtr orch_plan(const char *sql, int nargs, const Oid *types);
extern SPIPlanPtr orch_plan_once(const char *sql, int nargs, const Oid *types);
extern uint64 orch_exec(SPIPlanPtr plan, Datum *values, const char *nulls,
						bool read_only, long count, int expect);

/* A statement from the plan cache / planned with its values, executed and checked */
extern uint64 orch_sql(const char *sql, int nargs, const Oid *types, Datum *values,
					   const char *nulls, bool read_only, long count, int expect);
extern uint64 orch_sql_once(const char *sql, int nargs, const Oid *types, Datum *values,
							const char *nulls, bool read_only, long count, int expect);
/* A statement without parameters whose result is not read (DDL, a command) */
extern void orch_sql_command(const char *sql);

/*
 * A statement's parameters, added in order ($1, $2, ...): a NULL string is
 * SQL NULL.  OrchArgs a = {0}; orch_arg_int8(&a, id); orch_arg_text(&a, s);
 * orch_args_sql(&a, "... $1 ... $2", ...).
 */
#define ORCH_MAX_ARGS 24
typedef struct OrchArgs
{
	int			n;
	Oid			types[ORCH_MAX_ARGS];
	Datum		values[ORCH_MAX_ARGS];
	char		nulls[ORCH_MAX_ARGS];
} OrchArgs;

extern void orch_arg(OrchArgs *a, Oid type, Datum value, bool isnull);
extern void orch_arg_text(OrchArgs *a, const char *s);
extern void orch_arg_int8(OrchArgs *a, int64 v);
extern void orch_arg_int4(OrchArgs *a, int32 v);
extern void orch_arg_bool(OrchArgs *a, bool v);
extern void orch_arg_jsonb(OrchArgs *a, Jsonb *j);	/* NULL: SQL NULL */
extern void orch_arg_timestamptz(OrchArgs *a, TimestampTz t);	/* a timestamptz */
extern void orch_arg_interval(OrchArgs *a, int64 usecs);	/* an interval of usecs microseconds */
/* the clock now (clock_timestamp()) as a timestamptz value; returns it */
extern TimestampTz orch_arg_clock(OrchArgs *a);
/* orch_sql / orch_sql_once with the parameters of a */
extern void orch_spi_values(SPITupleTable *tt, uint64 row, int first, int n,
							Datum *values, bool *nulls);
extern char **orch_spi_column(int col);	/* a text column of the last result */
extern uint64 orch_args_sql(OrchArgs *a, const char *sql, bool read_only, long count, int expect);
/* fn(arg) in a subtransaction: NULL, or the error it raised (rolled back) */
extern ErrorData *orch_subxact_try(void (*fn) (void *arg), void *arg);
extern ErrorData *orch_subxact_try_waiting(void (*fn) (void *arg), void *arg,
										   const char *lock_timeout);
extern uint64 orch_args_sql_once(OrchArgs *a, const char *sql, bool read_only, long count, int expect);
/* tenant.c: the caller's tenants, the scoped tenant as the next parameter */
extern void orch_arg_caller_tenants(OrchArgs *a);	/* text[], NULL: every tenant */
extern void orch_arg_scope_tenants(OrchArgs *a);	/* text[]: the scoped tenant */

/*
 * The tenant filter of every statement: PARAM is a text[] of the tenants
 * the caller may see, NULL for every tenant (orch_spi_caller_tenants).
 */
#define ORCH_TENANT_IN(COL, PARAM) "(" PARAM "::text[] IS NULL OR " COL " = ANY (" PARAM "))"

/*
 * One audit event, as the writers buffer it (lifecycle.c) and the event
 * store appends it (append.c).
 */
typedef struct OrchEvent
{
	int			level;			/* (sub)transaction nesting level it was buffered at */
	char	   *tenant;
	const char *entity;			/* "task", "run", "run_step", a user table's name */
	bool		has_task;
	int64		task_id;
	bool		has_run;
	int64		run_id;
	char	   *from_state;
	char	   *to_state;
	char	   *reason_code;
	char	   *actor;			/* the role */
	char	   *label;			/* the name the caller supplied, or NULL */
	int32		attempt;		/* <= 0: none */
	bool		has_token;
	pg_uuid_t	token;
	char	   *note;
	TimestampTz at;
	int64		waited_us;		/* claims: how long it was claimable; else -1 */
	/*
	 * An event a task row recorded, written out as a row of its own: the id
	 * and transaction the row recorded (id 0: a new event, the sequence's
	 * id and this transaction).  One write has all or none of them.
	 */
	int64		id;
	bool		has_xact;
	int64		xact;
} OrchEvent;

/* queue_cache.c: per-backend queue settings, dropped when orch.queues changes */
extern bool orch_queue_cache_get(const char *queue, QueueSettings *qs, bool *paused);
extern void orch_queue_cache_put(const char *queue, const QueueSettings *qs, bool paused);

/* append.c: false when the table needs the SQL INSERT (nothing written) */
extern bool orch_table_append(const char *relname, int ncols, const char *const *cols,
							  int nrows, const Datum *values, const bool *nulls);
extern bool orch_events_store(OrchEvent *const *events, int n);
extern bool orch_tasks_append(OrchRowHook row_hook, int ncols, const char *const *cols,
							  const Oid *types, int nrows, const Datum *values, const bool *nulls,
							  int64 *ids);

/* task_cache.c: what writes of orch.tasks without SQL need of it, kept per backend */
typedef struct OrchTaskCache OrchTaskCache;
typedef struct OrchTaskEntries OrchTaskEntries;
extern OrchTaskCache *orch_task_cache(Relation rel);
extern const AttrNumber *orch_task_cache_columns(OrchTaskCache *c, Relation rel, int n,
												 const char *const *names, const Oid *types);
extern bool orch_task_cache_writable(const OrchTaskCache *c, bool update);
extern bool orch_task_cache_entries_ok(const OrchTaskCache *c);
extern Oid	orch_task_cache_pk(const OrchTaskCache *c, AttrNumber *first);
extern Oid	orch_task_cache_claim_index(const OrchTaskCache *c, bool tenant, bool *hashed);
extern struct ExprState *orch_task_cache_default(const OrchTaskCache *c, int a, bool *is_volatile);
extern OrchTaskEntries *orch_task_entries_begin(OrchTaskCache *c, Relation rel, struct EState *estate);
extern void orch_task_entries_insert(OrchTaskEntries *e, struct TupleTableSlot *slot,
									 const Datum *ov, const bool *on);
extern void orch_task_entries_end(OrchTaskEntries *e);

/* task_update.c: completions written without SQL */
typedef void (*OrchUpdateHook) (Relation rel, HeapTuple oldtup, const Datum *ov, const bool *on,
								Datum *values, bool *nulls);
typedef struct OrchCompletion
{
	int64		id;
	pg_uuid_t  *token;
	Datum		result;			/* jsonb */
	bool		result_null;
} OrchCompletion;
typedef enum OrchDirect
{
	ORCH_DIRECT_DONE,			/* written */
	ORCH_DIRECT_NO_MATCH,		/* the task does not meet the conditions */
	ORCH_DIRECT_SQL				/* the UPDATE must write it */
} OrchDirect;
extern int	orch_tasks_complete_direct(OrchUpdateHook hook, const OrchCompletion *want, int n,
									   Datum tenants, OrchDirect *stop);
/* ... a run of them, shared with the claims written without SQL */
typedef struct OrchTaskWrites
{
	Relation	rel;
	OrchTaskCache *cache;
	const AttrNumber *cols;		/* the caller's columns */
	Snapshot	snap;
	CommandId	cid;			/* the writes' command (the snapshot's, as an UPDATE's output) */
	struct EState *estate;
	OrchTaskEntries *entries;
	struct TupleTableSlot *found;	/* a version read (the table's slot) */
	struct TupleTableSlot *nslot;	/* the new version */
	HeapTuple	oldtup;			/* the version taken */
	ItemPointerData tid;
	bool		locked;			/* ... and locked (orch_task_writes_lock): its update must succeed */
	Datum	   *ov;				/* ... its values */
	bool	   *on;
	MemoryContext work;
	MemoryContext caller;
} OrchTaskWrites;
extern bool orch_task_writes_begin(OrchTaskWrites *w, int ncols,
								   const char *const *names, const Oid *types);
extern void orch_task_writes_take(OrchTaskWrites *w);
extern void orch_task_writes_derive(OrchTaskWrites *w, OrchUpdateHook hook);
extern TM_Result orch_task_writes_update(OrchTaskWrites *w, bool wait);
extern TM_Result orch_task_writes_lock(OrchTaskWrites *w, LockTupleMode mode, LockWaitPolicy wait);
extern void orch_task_writes_next(OrchTaskWrites *w);
extern void orch_task_writes_end(OrchTaskWrites *w, bool wrote);

/* task_claim.c: claims written without SQL */
typedef bool (*OrchStepCheck) (Datum run_id, Datum tenant, Datum step_key, bool step_null);
/* a place in the claim order: (priority, created_at, id); valid false: the beginning */
typedef struct OrchClaimPos
{
	bool		valid;
	int32		priority;
	TimestampTz created_at;
	int64		id;
} OrchClaimPos;
typedef struct OrchClaimWant
{
	const char *queue;
	const char *tenant;			/* NULL: every tenant */
	const char *worker;
	int32		batch;
	int64		lease;			/* microseconds */
	TimestampTz due;			/* claimable from ready_at at most this */
	OrchClaimPos from;			/* start at (priority, created_at, id) >= this */
	OrchStepCheck step_claimable;	/* may a step's task run now (NULL: the statement claims) */
	/*
	 * Set by the claim: where the next claim starts, the first task it took
	 * or passed over while held by another transaction or not yet due,
	 * whichever came first
	 */
	OrchClaimPos next;
} OrchClaimWant;
/* a claimed row: id, lease_token, attempts, payload, queue, priority, step_key,
 * tenant_id, run_id, lease_expires_at, resume_data, created_at */
#define ORCH_CLAIMED_COLS 12
extern int	orch_tasks_claim_direct(OrchUpdateHook hook, OrchClaimWant *want, Datum *out,
									bool *out_nulls);
/* events.c: the event writer (appended directly, else through SQL) */
extern void orch_events_write(OrchEvent *const *events, int n);
#define ORCH_CLAIM_FIELDS 11
extern OrchEvent *orch_claim_event(const Datum *v, const bool *isnull);

/*
 * TS + IV computed in UTC (a day is 24 hours), from immutable functions
 * only: Citus refuses a stable function of a column (timestamptz +
 * interval) in an UPDATE of a distributed table.
 */
#define ORCH_UTC_ADD(TS, IV) "timezone('UTC', timezone('UTC', " TS ") + " IV ")"

/* spi.c: are the tables distributed with Citus (once per transaction)? */
extern bool orch_citus(void);

/*
 * metrics.c: fold the history into the counters (on Citus, on every shard),
 * at most about max_rows rows (on Citus, per shard); ORCH_FOLD_MAX_ROWS is
 * the bound of orch_metrics_refresh by default and of each orch_maintain pass
 */
#define ORCH_FOLD_MAX_ROWS 250000
extern int64 orch_metrics_fold_now(int32 max_rows);

/* history_partitions.c: history in time-range partitions, retired whole */
extern bool orch_history_partitioned(void);
extern bool orch_runs_partitioned(void);
extern void orch_history_partitions_maintain(int64 *created, int64 *dropped, int64 *compacted,
											 int64 *runs_retired);
extern void orch_citus_forget(void);

/* Longest delay or interval setting accepted: 100 years, in microseconds */
#define ORCH_MAX_INTERVAL (INT64CONST(100) * 365 * USECS_PER_DAY)

/* cron.c: five-field cron expressions and their next fire times in a time zone */
typedef struct OrchCron
{
	uint64		minutes;		/* bit per minute 0-59 */
	uint32		hours;			/* 0-23 */
	uint32		days;			/* 1-31 */
	uint16		months;			/* 1-12 */
	uint8		dows;			/* 0-6, Sunday 0 */
	bool		dom_star;		/* day-of-month starts with '*' */
	bool		dow_star;		/* day-of-week starts with '*' */
} OrchCron;
extern void orch_cron_parse(const char *expr, OrchCron *c);	/* 22023 naming the field */
extern pg_tz *orch_cron_timezone(const char *name);	/* 22023 when unknown */
extern bool orch_cron_slot_after(const OrchCron *c, pg_tz *tz, TimestampTz after, TimestampTz *next);

/* schedules.c: fire the schedules due (orch_maintain) */
extern int	orch_schedules_tick(TimestampTz as_of, int limit);

/* definitions.c, definition_validate.c: workflow definitions */
#define ERRCODE_ORCH_DEFINITION_IMMUTABLE	MAKE_SQLSTATE('O','R','0','0','7')
#define ERRCODE_ORCH_INVALID_DEFINITION		MAKE_SQLSTATE('O','R','0','0','8')

/* definition_validate.c */
extern void orch_definition_validate(Jsonb *spec);	/* OR008 naming the path */

/* run_probes.c: a definition's drift probes (name -> function) */
#define ORCH_MAX_PROBES			32	/* probes in one definition */
extern Oid	orch_probe_lookup(const char *text, int len, char **problem);
extern void orch_probes_check_publisher(Jsonb *spec);	/* 42501 */

/*
 * json_schema.c: the JSON Schema subset of input_schema and output_schema.
 * A problem is reported, not raised: a path and a sentence (no trailing
 * period), and for an unsupported keyword a hint.
 */
#define ORCH_JSON_SCHEMA_MAX_DEPTH	32	/* schemas nested in a schema */
typedef struct JsonSchemaProblem
{
	char	   *path;
	char	   *message;
	const char *hint;
} JsonSchemaProblem;
extern bool orch_json_schema_check(JsonbValue *schema, const char *path, JsonSchemaProblem *p);
extern bool orch_json_schema_validate(Jsonb *schema, Jsonb *value, const char *root,
									  JsonSchemaProblem *p);

#endif							/* ORCHESTRATOR_H */
