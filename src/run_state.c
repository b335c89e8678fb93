/*
 * run_state.c
 *	  The bottom layer of workflows: the run's state (the lifecycle matrix,
 *	  enforced by a C trigger on orch.runs for every writer, one event per
 *	  accepted transition), locking a run's row, changing its state, a step's
 *	  events, cancelling a run's tasks, and the notes by which the task
 *	  trigger marks the runs whose step tasks finished.  Step progression (run_steps.c),
 *	  decisions and compensation sit above it; the SQL API (runs.c,
 *	  run_control.c) on top.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "run_internal.h"

PG_FUNCTION_INFO_V1(orch_run_lifecycle);
PG_FUNCTION_INFO_V1(orch_run_busy_on_shard);

/* ----------------------------------------------------------------------
 * The run lifecycle, enforced by a C trigger for
 * every writer, one event per accepted transition.
 * ---------------------------------------------------------------------- */
const char *const orch_run_state_names[RS_COUNT] = {
	"running", "waiting_approval", "paused", "succeeded", "failed", "canceled"
};

static const bool run_matrix[RS_COUNT][RS_COUNT] = {
	/* run    wait   pause  succ   fail   canc */
	{true, true, true, true, true, true},	/* running */
	{true, true, false, false, false, true},	/* waiting_approval */
	{true, false, true, false, false, true},	/* paused */
	{false, false, false, true, false, false},	/* succeeded */
	{false, false, false, false, true, false},	/* failed */
	{false, false, false, false, false, true},	/* canceled */
};

RunState
orch_run_state_from_name(const char *s)
{
	if (s == NULL)
		return RS_INVALID;
	for (int i = 0; i < RS_COUNT; i++)
		if (strcmp(s, orch_run_state_names[i]) == 0)
			return (RunState) i;
	return RS_INVALID;
}

/* A run state's name (for callers outside the workflow files) */
bool
orch_run_state_known(const char *s)
{
	return orch_run_state_from_name(s) != RS_INVALID;
}

bool
orch_run_terminal(RunState s)
{
	return s == RS_SUCCEEDED || s == RS_FAILED || s == RS_CANCELED;
}

static char *
tuple_text(HeapTuple tup, TupleDesc td, const char *col)
{
	int			n = SPI_fnumber(td, col);

	if (n <= 0)
		elog(ERROR, "orchestrator: column \"%s\" missing from orch.runs", col);
	return SPI_getvalue(tup, td, n);
}

/* BEFORE INSERT OR UPDATE FOR EACH ROW on orch.runs */
Datum
orch_run_lifecycle(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	bool		is_insert;
	HeapTuple	oldtup,
				newtup;
	char	   *from_name = NULL;
	char	   *to_name;
	RunState	from = RS_INVALID,
				to;
	bool		isnull;
	int64		run_id;
	char	   *tenant;
	char	   *reason;
	int			cols[2];
	Datum		vals[2];
	bool		nulls[2] = {false, false};
	int			ncols = 0;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!TRIGGER_FIRED_BEFORE(td->tg_event) || TRIGGER_FIRED_BY_DELETE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_run_lifecycle must be a BEFORE INSERT OR UPDATE row trigger")));
	desc = RelationGetDescr(td->tg_relation);
	is_insert = TRIGGER_FIRED_BY_INSERT(td->tg_event);
	oldtup = is_insert ? NULL : td->tg_trigtuple;
	newtup = is_insert ? td->tg_trigtuple : td->tg_newtuple;

	/* a restore reloads rows as they were (see the task trigger) */
	if (is_insert && orch_restoring())
		return PointerGetDatum(newtup);

	run_id = DatumGetInt64(heap_getattr(newtup, SPI_fnumber(desc, "id"), desc, &isnull));
	tenant = tuple_text(newtup, desc, "tenant_id");
	to_name = tuple_text(newtup, desc, "state");
	to = orch_run_state_from_name(to_name);
	if (is_insert)
	{
		if (to != RS_RUNNING)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
					 errmsg("invalid transition of run " INT64_FORMAT " from \"(new)\" to \"%s\"",
							run_id, to_name ? to_name : "NULL")));
	}
	else
	{
		from_name = tuple_text(oldtup, desc, "state");
		from = orch_run_state_from_name(from_name);
		if (from == RS_INVALID)
			elog(ERROR, "orchestrator: run " INT64_FORMAT " has unknown state \"%s\"",
				 run_id, from_name);
		if (orch_run_terminal(from) && !(to == from && orch_tuples_identical(oldtup, newtup, desc)))
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_TERMINAL_STATE),
					 errmsg("run " INT64_FORMAT " is in terminal state \"%s\" and cannot change (to \"%s\")",
							run_id, from_name, to_name ? to_name : "NULL"),
					 errdetail("Terminal states are immutable.")));
		if (to == RS_INVALID || !run_matrix[from][to])
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
					 errmsg("invalid transition of run " INT64_FORMAT " from \"%s\" to \"%s\"",
							run_id, from_name, to_name ? to_name : "NULL")));
		if (to == from && orch_run_terminal(to))
			return PointerGetDatum(newtup);
		cols[ncols] = SPI_fnumber(desc, "updated_at");
		vals[ncols++] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		if (orch_run_terminal(to) && to != from)
		{
			cols[ncols] = SPI_fnumber(desc, "finished_at");
			vals[ncols++] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		}
		newtup = heap_modify_tuple_by_cols(newtup, desc, ncols, cols, vals, nulls);
		if (to == from)
			return PointerGetDatum(newtup);
	}
	/* its step tasks may be claimed again: the claims look from the beginning */
	if (!is_insert && to == RS_RUNNING)
		orch_claim_wake_all();
	reason = tuple_text(newtup, desc, "reason_code");
	orch_write_run_event(tenant, run_id, "run", is_insert ? NULL : from_name, to_name,
						 reason ? reason : (is_insert ? "started" : "updated"), NULL);
	return PointerGetDatum(newtup);
}

/* ----------------------------------------------------------------------
 * SQL helpers (caller connected to SPI)
 * ---------------------------------------------------------------------- */
/*
 * Families of runs: a run with sub-workflows and its descendants.  Every
 * call that locks one of a family's runs first takes the family's advisory
 * lock (keyed by its top run, root_run_id), so that a parent and its
 * children are changed by one transaction at a time: a parent's cancel
 * reaches every open child, and a child's end its parent's step, without
 * two transactions ever waiting for each other's rows.  Runs outside a
 * family (root_run_id NULL) take no lock of the kind.  Not on Citus, where
 * sub-workflows are refused.
 */
static bool
run_families(void)
{
	return orch_schema_subflows() && !orch_citus();
}

/* The family (its top run's id) of a run; 0 when it is in none */
static int64
run_family(int64 run_id, const char *tenant)
{
	OrchArgs	a = {0};
	bool		isnull;
	Datum		d;

	orch_arg_int8(&a, run_id);
	orch_arg_text(&a, tenant);
	if (orch_args_sql(&a, "SELECT root_run_id FROM orch.runs WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)",
					  false, 1, SPI_OK_SELECT) == 0)
		return 0;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetInt64(d);
}

/* The family's lock (held to the transaction's end); try: once, false when taken */
static bool
family_lock(int64 root, bool try)
{
	char		key[32];

	if (root == 0)
		return true;
	snprintf(key, sizeof(key), INT64_FORMAT, root);
	if (try)
		return orch_xact_try_lock("run-family", key, NULL);
	orch_xact_lock("run-family", key, NULL);
	return true;
}

/* Lock the run's row; false when it does not exist (or is another tenant's). */
bool
orch_lock_run(int64 run_id, const char *tenant, RunRow *r)
{
	OrchArgs	a = {0};
	HeapTuple	tup;
	TupleDesc	td;
	bool		isnull;
	bool		families = run_families();

	if (families)
		family_lock(run_family(run_id, tenant), false);
	orch_arg_int8(&a, run_id);
	orch_arg_text(&a, tenant);
	orch_arg_caller_tenants(&a);
	if (orch_args_sql(&a, families
					  ? "SELECT id, tenant_id, state, phase, reason_code,"
					  " coalesce(deadline_at <= now(), false),"
					  " coalesce(parent_run_id, 0), parent_step, coalesce(root_run_id, 0)"
					  " FROM orch.runs WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)"
					  "   AND " ORCH_TENANT_IN("tenant_id", "$3") " FOR UPDATE"
					  : "SELECT id, tenant_id, state, phase, reason_code,"
					  " coalesce(deadline_at <= now(), false)"
					  " FROM orch.runs WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)"
					  "   AND " ORCH_TENANT_IN("tenant_id", "$3") " FOR UPDATE",
					  false, 1, SPI_OK_SELECT) == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	r->id = run_id;
	r->tenant = SPI_getvalue(tup, td, 2);
	r->state = orch_run_state_from_name(SPI_getvalue(tup, td, 3));
	r->phase = SPI_getvalue(tup, td, 4);
	r->reason = SPI_getvalue(tup, td, 5);
	r->past_deadline = DatumGetBool(SPI_getbinval(tup, td, 6, &isnull));
	r->signals_due = false;
	r->parent_run_id = families ? DatumGetInt64(SPI_getbinval(tup, td, 7, &isnull)) : 0;
	r->parent_step = families ? SPI_getvalue(tup, td, 8) : NULL;
	r->root_run_id = families ? DatumGetInt64(SPI_getbinval(tup, td, 9, &isnull)) : 0;
	return true;
}

/*
 * The same for maintenance, which passes over a run another transaction
 * holds: its family's lock tried once (false when another holds it), before
 * its row is tried.
 */
bool
orch_run_family_try_lock(int64 run_id, const char *tenant)
{
	return !run_families() || family_lock(run_family(run_id, tenant), true);
}

/*
 * For the calls that act on one run (run_control.c): lock it, and mark it
 * busy until the call ends (orch_run_busy_end) so that the tasks it changes
 * itself do not progress it a second time.
 */
void
orch_lock_run_or_not_found(int64 run_id, RunRow *r)
{
	orch_run_busy_begin(run_id);
	/* on Citus: scoped to the run's tenant first (its shard) */
	if (!orch_scope_run(run_id) || !orch_lock_run(run_id, orch_scoped_tenant(), r))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("run " INT64_FORMAT " does not exist", run_id)));
	orch_run_busy_on_shard_begin(r);
}

/* ----------------------------------------------------------------------
 * Notes from the task trigger: runs whose step tasks finished in this
 * statement (per (sub)transaction level), advanced at statement end.
 * ---------------------------------------------------------------------- */
static List *run_notes = NIL;

/*
 * The run being acted on (its row locked by this backend): the tasks it
 * changes itself (cancellations) need no second pass of progression.
 */
static int64 busy_run = 0;
static int	busy_level = 0;			/* the (sub)transaction level it was set at */

static void run_busy_on_shard(int64 run_id, const char *tenant, bool busy);

/*
 * On Citus, the run also marked busy in the backend that holds its shard
 * (orch_run_busy_on_shard_begin), and its tenant; until the mark is lifted.
 */
static int64 shard_busy_run = 0;
static char *shard_busy_tenant = NULL;
static int	shard_busy_level = 0;

/* the mark it replaced (a run call that acts on a second run: orch_retry_run) */
static int64 shard_outer_run = 0;
static char *shard_outer_tenant = NULL;

/*
 * Set while the statement-end flush (runs.c) progresses the noted runs: the
 * flush does not run again from its own statements, and tells no shard of
 * its busy marks (the runs it progresses were noted by the triggers of this
 * backend's own statements: on Citus, on the tenant's shard, so this
 * backend is the one to mark).
 */
static bool in_flush = false;

/* Begin the flush; false when one is running already */
bool
orch_run_flush_enter(void)
{
	if (in_flush)
		return false;
	in_flush = true;
	return true;
}

void
orch_run_flush_leave(void)
{
	in_flush = false;
}

/*
 * At the transaction's end every mark goes; when a subtransaction aborts,
 * the marks set inside it (the shard's backend rolls back the same
 * subtransaction and forgets its mark the same way).
 */
static void
notes_reset(bool xact_end)
{
	int			level = GetCurrentTransactionNestLevel();

	if (xact_end)
		in_flush = false;
	if (xact_end || busy_level >= level)
		busy_run = 0;
	if (xact_end || shard_busy_level >= level)
		shard_busy_run = shard_outer_run = 0;
}

static OrchXactLists notes_state = {{&run_notes}, notes_reset};

/*
 * Is a run being acted on in this backend now?  The noted runs then wait
 * for the outer call's flush: a sub-workflow's parent may be further up
 * the same call, in the middle of its own progression.  (On Citus the mark
 * also stands in a shard's backend, whose flush is left as it was.)
 */
bool
orch_run_busy_now(void)
{
	return busy_run != 0 && !orch_citus();
}

/* Begin / end acting on a run (nested calls keep the outer one). */
int64
orch_run_busy_begin(int64 run_id)
{
	int64		prev = busy_run;

	orch_xact_lists_use(&notes_state);

	busy_run = run_id;
	busy_level = GetCurrentTransactionNestLevel();
	return prev;
}

void
orch_run_busy_end(int64 prev)
{
	if (shard_busy_run != 0 && shard_busy_run != prev)
	{
		run_busy_on_shard(shard_busy_run, shard_busy_tenant, false);
		shard_busy_run = 0;
		/* back to the run it replaced: marked there again */
		if (shard_outer_run != 0 && shard_outer_run == prev)
		{
			run_busy_on_shard(shard_outer_run, shard_outer_tenant, true);
			shard_busy_run = shard_outer_run;
			shard_busy_tenant = shard_outer_tenant;
			shard_busy_level = GetCurrentTransactionNestLevel();
		}
		shard_outer_run = 0;
	}
	busy_run = prev;
	busy_level = GetCurrentTransactionNestLevel();
}

/*
 * On Citus, a run's tasks are changed on its shard, where their trigger
 * notes the run for progression at statement end, in the backend Citus
 * uses for that shard in this transaction: the busy mark of this backend
 * does not reach it.  Mark the run there too (orch.run_busy_on_shard, in a
 * query routed to the run's shard, which Citus runs on the connection that
 * locked the run); orch_run_busy_end lifts it.  The run r is locked.
 */
static void
run_busy_on_shard(int64 run_id, const char *tenant, bool busy)
{
	OrchArgs	a = {0};

	orch_arg_int8(&a, run_id);
	orch_arg_text(&a, tenant);
	orch_arg(&a, BOOLOID, BoolGetDatum(busy), false);
	orch_args_sql(&a, "SELECT orch.run_busy_on_shard(id, $3) FROM orch.runs WHERE id = $1 AND tenant_id = $2",
				  false, 0, SPI_OK_SELECT);
}

void
orch_run_busy_on_shard_begin(RunRow *r)
{
	if (in_flush || shard_busy_run == r->id || !orch_citus() || !orch_schema_distributed_fold())
		return;
	if (shard_busy_run != 0)
	{
		run_busy_on_shard(shard_busy_run, shard_busy_tenant, false);
		shard_outer_run = shard_busy_run;
		shard_outer_tenant = shard_busy_tenant;
	}
	run_busy_on_shard(r->id, r->tenant, true);
	shard_busy_run = r->id;
	shard_busy_tenant = MemoryContextStrdup(TopTransactionContext, r->tenant);
	shard_busy_level = GetCurrentTransactionNestLevel();
}

/* orch.run_busy_on_shard(run_id, busy): the mark, in this backend */
Datum
orch_run_busy_on_shard(PG_FUNCTION_ARGS)
{
	int64		run_id = PG_GETARG_INT64(0);

	if (PG_GETARG_BOOL(1))
		orch_run_busy_begin(run_id);
	else if (busy_run == run_id)
		busy_run = 0;
	PG_RETURN_BOOL(true);
}

/*
 * A task of run_id finished (task_id, its step key, completed or not): the
 * run progresses at the end of the statement.  While all its finished tasks
 * completed (up to RUN_NOTE_MAX of them), the run is told which: each
 * completion can be settled without looking at the others
 * (orch_run_progress_completed), so that a map step's items cost the same
 * each however many there are.
 */
#define RUN_NOTE_MAX 1000

/* The note of run_id (made if there is none), in TopTransactionContext */
static RunNote *
note_of(int64 run_id, const char *tenant)
{
	MemoryContext old;
	RunNote    *n;
	ListCell   *lc;

	orch_xact_lists_use(&notes_state);
	foreach(lc, run_notes)
	{
		RunNote    *e = (RunNote *) lfirst(lc);

		if (e->run_id == run_id && strcmp(e->tenant, tenant) == 0)
			return e;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	n = palloc(sizeof(RunNote));
	n->level = GetCurrentTransactionNestLevel();
	n->run_id = run_id;
	n->tenant = pstrdup(tenant);
	n->general = false;
	n->done = NIL;
	n->retry = false;
	n->order = run_id;
	run_notes = lappend(run_notes, n);
	MemoryContextSwitchTo(old);
	return n;
}

void
orch_runs_note(int64 run_id, const char *tenant, int64 task_id, const char *step_key,
			   bool completed)
{
	MemoryContext old;
	RunNote    *n;

	if (run_id == busy_run)
		return;					/* its own doing: already accounted for */
	n = note_of(run_id, tenant);
	old = MemoryContextSwitchTo(TopTransactionContext);
	/* a step's or a map item's task ("step#i"; compensations are "step:compensate") */
	if (!n->general && completed && step_key != NULL && strchr(step_key, ':') == NULL &&
		list_length(n->done) < RUN_NOTE_MAX)
	{
		RunDone    *d = palloc(sizeof(RunDone));

		d->task_id = task_id;
		d->step_key = pstrdup(step_key);
		n->done = lappend(n->done, d);
	}
	else
	{
		n->general = true;
		n->done = NIL;
	}
	MemoryContextSwitchTo(old);
}

/*
 * A step task of run_id entered or left a retry wait: at statement end its
 * step's state follows (retrying / running), without the run's progression.
 */
void
orch_runs_note_retry(int64 run_id, const char *tenant)
{
	if (run_id == busy_run)
		return;
	note_of(run_id, tenant)->retry = true;
}

/* Each note's order: its run's family (its top run), else the run itself */
static void
notes_order_by_family(void)
{
	OrchArgs	a = {0};
	ListCell   *lc;
	Datum	   *ids = palloc(sizeof(Datum) * list_length(run_notes));
	int			n = 0;
	bool		isnull;

	foreach(lc, run_notes)
		ids[n++] = Int64GetDatum(((RunNote *) lfirst(lc))->run_id);
	orch_arg(&a, INT8ARRAYOID, PointerGetDatum(construct_array(ids, n, INT8OID, 8, true, TYPALIGN_DOUBLE)), false);
	/* one row per note, in the notes' order */
	if (orch_args_sql(&a, "SELECT coalesce((SELECT r.root_run_id FROM orch.runs r WHERE r.id = u.id), u.id)"
					  " FROM unnest($1::bigint[]) WITH ORDINALITY u(id, k) ORDER BY u.k",
					  false, 0, SPI_OK_SELECT) != (uint64) n)
		return;
	n = 0;
	foreach(lc, run_notes)
		((RunNote *) lfirst(lc))->order =
			DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[n++], SPI_tuptable->tupdesc, 1, &isnull));
}

static int
run_note_cmp(const ListCell *a, const ListCell *b)
{
	RunNote    *x = (RunNote *) lfirst(a);
	RunNote    *y = (RunNote *) lfirst(b);
	int			c = strcmp(x->tenant, y->tenant);

	if (c != 0)
		return c;
	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return x->run_id < y->run_id ? -1 : (x->run_id > y->run_id ? 1 : 0);
}

bool
orch_run_notes_pending(void)
{
	return run_notes != NIL;
}

/* Runs in one order (tenant, id), the order every session locks them in. */
void
orch_run_notes_sort(void)
{
	/*
	 * A family's runs are locked under its lock, taken at the first of
	 * them: the families in the order of their top runs, so that two
	 * sessions never take two families' locks in opposite orders.
	 */
	if (list_length(run_notes) > 1 && run_families())
		notes_order_by_family();
	list_sort(run_notes, run_note_cmp);
}

/*
 * Take the first note into *out (copied into the current memory context);
 * false when there is none.  Notes made meanwhile are taken too.
 */
bool
orch_run_notes_next(RunNote *out)
{
	RunNote    *n;
	ListCell   *lc;

	if (run_notes == NIL)
		return false;
	n = (RunNote *) linitial(run_notes);
	out->level = n->level;
	out->run_id = n->run_id;
	out->tenant = pstrdup(n->tenant);
	out->general = n->general;
	out->retry = n->retry;
	out->done = NIL;
	foreach(lc, n->done)
	{
		RunDone    *d = (RunDone *) lfirst(lc);
		RunDone    *c = palloc(sizeof(RunDone));

		c->task_id = d->task_id;
		c->step_key = pstrdup(d->step_key);
		out->done = lappend(out->done, c);
	}
	run_notes = list_delete_first(run_notes);
	return true;
}

/*
 * A sub-workflow ended: its parent's step counts it (a success, or the
 * first child that failed or was canceled) and the parent progresses at
 * statement end, where its step settles.  The family's lock is held (the
 * child is locked), so the parent's step row is this transaction's to write.
 */
static void
child_ended(RunRow *r)
{
	OrchArgs	a = {0};

	orch_arg_int8(&a, r->parent_run_id);
	orch_arg_text(&a, r->tenant);
	orch_arg_int8(&a, r->id);
	orch_arg_bool(&a, r->state == RS_SUCCEEDED);
	orch_arg_text(&a, r->parent_step);
	orch_args_sql(&a, "UPDATE orch.run_steps SET items_done = items_done + CASE WHEN $4 THEN 1 ELSE 0 END,"
				  " child_failed = CASE WHEN $4 THEN child_failed ELSE coalesce(child_failed, $3) END"
				  " WHERE run_id = $1 AND tenant_id = $2 AND step_id = $5 AND state = 'running'"
				  "   AND type = 'subflow'", false, 0, SPI_OK_UPDATE);
	orch_runs_note(r->parent_run_id, r->tenant, 0, NULL, false);
}

/* Move the run to a state (through the trigger), with a reason. */
void
orch_set_run_state(RunRow *r, RunState to, const char *reason, Jsonb *output)
{
	OrchArgs	a = {0};

	if (r->state == to)
		return;
	/* a resumed run's waits take the signals sent while it was paused */
	if (r->state == RS_PAUSED && to == RS_RUNNING)
		r->signals_due = true;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, orch_run_state_names[to]);
	orch_arg_text(&a, reason);
	orch_arg_jsonb(&a, output);
	orch_args_sql(&a, "UPDATE orch.runs SET state = $3, reason_code = coalesce($4, reason_code),"
				  " output = coalesce($5, output)"
				  " WHERE id = $1 AND tenant_id = $2", false, 0, SPI_OK_UPDATE);
	r->state = to;
	if (reason)
		r->reason = pstrdup(reason);
	if (r->parent_run_id != 0 && orch_run_terminal(to))
		child_ended(r);
}

void
orch_step_event(RunRow *r, const char *step, const char *from, const char *to, const char *reason)
{
	orch_write_run_event(r->tenant, r->id, "run_step", from, to, reason, step);
}

/* {"k1": "v1"} or {"k1": "v1", "k2": <raw JSON v2>} */
Jsonb *
orch_json_object1(const char *k1, const char *v1, const char *k2, const char *raw2)
{
	StringInfoData b;

	initStringInfo(&b);
	appendStringInfoChar(&b, '{');
	escape_json(&b, k1);
	appendStringInfoString(&b, ": ");
	escape_json(&b, v1);
	if (k2)
	{
		appendStringInfoString(&b, ", ");
		escape_json(&b, k2);
		appendStringInfo(&b, ": %s", raw2);
	}
	appendStringInfoChar(&b, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(b.data)));
}

/*
 * Cancel the tasks whose ids ids_sql selects (and locks) with the reason;
 * an executing one ends its attempt as "cancelled", as orch_cancel records
 * it.  ids_sql's parameters are those of ids (left as they are); the reason
 * follows them.  The tasks are the tenant's (a run's), or with tenant NULL
 * those of every tenant, on Citus of the one the call is scoped to
 * (maintenance).
 */
int
orch_run_cancel_tasks(const char *ids_sql, const OrchArgs *ids, const char *tenant, const char *reason)
{
	int			ev;
	OrchArgs	a = *ids;
	int			r = ids->n + 1;	/* the reason's parameter; the tenants' is next */
	int			cancelled;

	orch_arg_text(&a, reason);
	if (tenant != NULL)
		orch_arg(&a, TEXTARRAYOID, orch_text_array1(tenant), false);
	else
		orch_arg_scope_tenants(&a);
	ev = orch_set_event_context(NULL, reason);
	/* running attempts end as cancelled, as with orch_cancel */
	orch_args_sql(&a, psprintf("WITH c AS (SELECT t.id, t.tenant_id, t.state, t.attempts, t.lease_owner, t.lease_token,"
							   "   t.claimed_at FROM orch.tasks t WHERE t.id = ANY (ARRAY(%s))"
							   "   AND ($%d::text[] IS NULL OR t.tenant_id = ANY ($%d)))"
							   " UPDATE orch.tasks t SET state = 'cancelled', reason_code = $%d FROM c"
							   " WHERE t.id = c.id AND t.tenant_id = c.tenant_id"
							   "   AND ($%d::text[] IS NULL OR t.tenant_id = ANY ($%d))"
							   " RETURNING c.tenant_id, c.id, c.attempts, c.lease_owner, c.lease_token, c.claimed_at,"
							   "   c.state = 'executing'",
							   ids_sql, r + 1, r + 1, r, r + 1, r + 1), false, 0, SPI_OK_UPDATE_RETURNING);
	cancelled = (int) SPI_processed;
	orch_attempts_insert_rows(SPI_tuptable, SPI_processed, 1, 7, "cancelled", reason);
	orch_clear_event_context(ev);	/* the caller's label and note go on */
	return cancelled;
}

/* The run ends failed, through running when it waits or is paused. */
void
orch_run_end_failed(RunRow *r, const char *reason)
{
	if (r->state == RS_WAITING_APPROVAL || r->state == RS_PAUSED)
		orch_set_run_state(r, RS_RUNNING, reason, NULL);
	orch_set_run_state(r, RS_FAILED, reason, NULL);
}
