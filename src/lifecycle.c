/*
 * lifecycle.c
 *	  The task lifecycle: the C row trigger that enforces the matrix of task
 *	  states (task_states.c) on orch.tasks for every writer, derives the
 *	  row's columns and records its transitions (also the entry point of the
 *	  same trigger on user tables, handed to state_machines.c).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/array.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "nodes/bitmapset.h"
#include "catalog/namespace.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_state_machine_trigger);

/* ----------------------------------------------------------------------
 * The trigger
 * ---------------------------------------------------------------------- */

/* Column numbers of orch.tasks, looked up once per relation */
typedef struct TaskCols
{
	Oid			relid;
	int			id,
				tenant_id,
				state,
				run_at,
				ready_at,
				reason_code,
				attempts,
				lease_token,
				lease_owner,
				run_id,
				step_key,
				queue,
				concurrency_key,
				gated,
				updated_at,
				finished_at,
				priority,
				created_at,
				retry_at,
				resume_data,
				lease_expires_at,
				enqueue_event_id,	/* 0.8.0 on; 0 before */
				created_by,
				created_xact,
				claim_event_id,	/* 0.8.0 on; 0 before */
				claimed_by,
				claim_xact,
				claim_waited,
				complete_event_id,	/* 0.8.0 on; 0 before */
				complete_attempt_id,
				completed_by,
				complete_xact,
				claimed_at;
} TaskCols;

static TaskCols task_cols = {InvalidOid};
static Oid	task_table_relid = InvalidOid;	/* is_task_table's last yes */
static bool task_cols_callback = false;

/*
 * The column numbers go stale when the table changes (ALTER EXTENSION UPDATE
 * adds columns): forget them on any relcache invalidation of the table.
 * So does is_task_table's answer, and when a schema is renamed.
 */
static void
task_cols_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == task_cols.relid)
		task_cols.relid = InvalidOid;
	if (relid == InvalidOid || relid == task_table_relid)
		task_table_relid = InvalidOid;
}

static void
task_schema_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	task_table_relid = InvalidOid;
}

static void
task_cols_register(void)
{
	if (task_cols_callback)
		return;
	orch_schema_on_relcache(task_cols_invalidate);
	CacheRegisterSyscacheCallback(NAMESPACEOID, task_schema_invalidate, (Datum) 0);
	task_cols_callback = true;
}

static int
must_fnumber(TupleDesc td, const char *name)
{
	int			n = SPI_fnumber(td, name);

	if (n <= 0)
		elog(ERROR, "orchestrator: column \"%s\" missing from orch.tasks", name);
	return n;
}

static void
load_task_cols(Relation rel)
{
	TupleDesc	td = RelationGetDescr(rel);

	task_cols_register();
	if (task_cols.relid == RelationGetRelid(rel))
		return;
	task_cols.id = must_fnumber(td, "id");
	task_cols.tenant_id = must_fnumber(td, "tenant_id");
	task_cols.state = must_fnumber(td, "state");
	task_cols.run_at = must_fnumber(td, "run_at");
	task_cols.ready_at = must_fnumber(td, "ready_at");
	task_cols.reason_code = must_fnumber(td, "reason_code");
	task_cols.attempts = must_fnumber(td, "attempts");
	task_cols.lease_token = must_fnumber(td, "lease_token");
	task_cols.lease_owner = must_fnumber(td, "lease_owner");
	task_cols.run_id = must_fnumber(td, "run_id");
	task_cols.step_key = must_fnumber(td, "step_key");
	task_cols.queue = must_fnumber(td, "queue");
	task_cols.concurrency_key = must_fnumber(td, "concurrency_key");
	task_cols.gated = must_fnumber(td, "gated");
	task_cols.updated_at = must_fnumber(td, "updated_at");
	task_cols.finished_at = must_fnumber(td, "finished_at");
	task_cols.priority = must_fnumber(td, "priority");
	task_cols.created_at = must_fnumber(td, "created_at");
	task_cols.retry_at = must_fnumber(td, "retry_at");
	task_cols.resume_data = must_fnumber(td, "resume_data");
	task_cols.lease_expires_at = must_fnumber(td, "lease_expires_at");
	/* a 0.7.0 schema has none of these: its enqueues write their event rows */
	task_cols.enqueue_event_id = Max(SPI_fnumber(td, "enqueue_event_id"), 0);
	task_cols.created_by = Max(SPI_fnumber(td, "created_by"), 0);
	task_cols.created_xact = Max(SPI_fnumber(td, "created_xact"), 0);
	if (task_cols.created_by == 0 || task_cols.created_xact == 0)
		task_cols.enqueue_event_id = 0;
	task_cols.claim_event_id = Max(SPI_fnumber(td, "claim_event_id"), 0);
	task_cols.claimed_by = Max(SPI_fnumber(td, "claimed_by"), 0);
	task_cols.claim_xact = Max(SPI_fnumber(td, "claim_xact"), 0);
	task_cols.claim_waited = Max(SPI_fnumber(td, "claim_waited"), 0);
	task_cols.claimed_at = must_fnumber(td, "claimed_at");
	if (task_cols.claimed_by == 0 || task_cols.claim_xact == 0 || task_cols.claim_waited == 0)
		task_cols.claim_event_id = 0;
	task_cols.complete_event_id = Max(SPI_fnumber(td, "complete_event_id"), 0);
	task_cols.complete_attempt_id = Max(SPI_fnumber(td, "complete_attempt_id"), 0);
	task_cols.completed_by = Max(SPI_fnumber(td, "completed_by"), 0);
	task_cols.complete_xact = Max(SPI_fnumber(td, "complete_xact"), 0);
	if (task_cols.complete_attempt_id == 0 || task_cols.completed_by == 0 || task_cols.complete_xact == 0)
		task_cols.complete_event_id = 0;
	task_cols.relid = RelationGetRelid(rel);
}

/*
 * Is this the extension's task table?  Its trigger ('state', 'task') on a
 * table of schema orch, where only the extension's owner creates tables:
 * orch.tasks, or on Citus one of its shards (orch.tasks_102008, ...), to
 * which Citus copies the trigger and whose names differ.  A user table
 * with the same machine lives in another schema.
 */
static bool
is_task_table(Relation rel)
{
	char	   *nsp;

	/* the answer for the table of the last rows, kept until it changes */
	if (OidIsValid(task_table_relid) && RelationGetRelid(rel) == task_table_relid)
		return true;
	nsp = get_namespace_name(RelationGetNamespace(rel));
	if (nsp == NULL || strcmp(nsp, "orch") != 0)
		return false;
	task_cols_register();
	task_table_relid = RelationGetRelid(rel);
	return true;
}

/* "task <id>", for the errors of a transition refused */
static char *
task_what(int64 task_id)
{
	return psprintf("task " INT64_FORMAT, task_id);
}

/*
 * The new row as the trigger reads and sets it: its columns taken apart
 * once (a late column of the wide row read with heap_getattr walks every
 * column before it), set in place, and the row formed again once, when
 * something was set.
 */
typedef struct NewRow
{
	HeapTuple	tup;			/* the row as received, or as last formed */
	TupleDesc	td;
	Datum	   *values;
	bool	   *nulls;
	bool		changed;		/* values differ from tup */
} NewRow;

static void
row_read(NewRow *r, HeapTuple tup, TupleDesc td)
{
	r->tup = tup;
	r->td = td;
	if (r->values == NULL)
	{
		r->values = palloc(td->natts * sizeof(Datum));
		r->nulls = palloc(td->natts * sizeof(bool));
	}
	heap_deform_tuple(tup, td, r->values, r->nulls);
	r->changed = false;
}

static inline Datum
row_get(NewRow *r, int col, bool *isnull)
{
	Assert(col >= 1 && col <= r->td->natts);
	*isnull = r->nulls[col - 1];
	return r->values[col - 1];
}

static inline bool
row_isnull(NewRow *r, int col)
{
	Assert(col >= 1 && col <= r->td->natts);
	return r->nulls[col - 1];
}

static char *
row_text(NewRow *r, int col)
{
	Assert(col >= 1 && col <= r->td->natts);
	return r->nulls[col - 1] ? NULL : TextDatumGetCString(r->values[col - 1]);
}

static inline void
row_set(NewRow *r, int col, Datum value, bool isnull)
{
	if (col < 1 || col > r->td->natts)
		elog(ERROR, "orchestrator: task trigger set column %d of %d", col, r->td->natts);
	r->values[col - 1] = value;
	r->nulls[col - 1] = isnull;
	r->changed = true;
}

/* The row with what was set, formed once (its identity kept). */
static HeapTuple
row_form(NewRow *r)
{
	HeapTuple	tup;

	if (!r->changed)
		return r->tup;
	tup = heap_form_tuple(r->td, r->values, r->nulls);
	tup->t_data->t_ctid = r->tup->t_data->t_ctid;
	tup->t_self = r->tup->t_self;
	tup->t_tableOid = r->tup->t_tableOid;
	/* the values still point into the row last read, which stays */
	r->tup = tup;
	r->changed = false;
	return tup;
}

/*
 * Concurrency keys (admission.c): a keyed task entering its key's slot set
 * (executing or claimable) must find a free slot, else it waits gated; one
 * leaving it releases a slot, filled at the end of the statement.
 */
static void
task_gate(NewRow *row, HeapTuple oldtup, TupleDesc td, TaskState from,
		  TaskState to, int64 task_id)
{
	bool		isnull;
	char	   *key = row_text(row, task_cols.concurrency_key);
	char	   *queue;
	char	   *tenant;
	bool		in_old = false;
	bool		in_new;
	bool		gated;

	if (key == NULL)
		return;
	queue = row_text(row, task_cols.queue);
	tenant = row_text(row, task_cols.tenant_id);
	if (oldtup != NULL)
	{
		heap_getattr(oldtup, task_cols.ready_at, td, &isnull);
		in_old = (from == TS_EXECUTING) || !isnull;
	}
	in_new = (to == TS_EXECUTING) || !row_isnull(row, task_cols.ready_at);
	gated = DatumGetBool(row_get(row, task_cols.gated, &isnull));

	/*
	 * An attempt that ends in a state that is claimable at once (a retry due
	 * now) no longer holds its slot either: it waits like any other task and
	 * the promotion at the end of the statement serves the key in order (it
	 * comes straight back when nothing better waits).
	 */
	if (from == TS_EXECUTING && in_new && to != TS_EXECUTING && !orch_gate_promoting)
	{
		orch_gate_note_release(queue, key, tenant);
		row_set(row, task_cols.ready_at, (Datum) 0, true);
		row_set(row, task_cols.gated, BoolGetDatum(true), false);
		return;
	}
	if (in_new && !in_old && to != TS_EXECUTING && !orch_gate_promoting &&
		!orch_gate_admit(queue, key, tenant, task_id,
						 DatumGetInt32(row_get(row, task_cols.priority, &isnull)),
						 DatumGetTimestampTz(row_get(row, task_cols.created_at, &isnull)),
						 orch_event_context()->active))
	{
		/* wait for a slot, outside the claim index */
		row_set(row, task_cols.ready_at, (Datum) 0, true);
		row_set(row, task_cols.gated, BoolGetDatum(true), false);
		return;
	}
	if (in_old && !in_new && !orch_gate_handover)
		orch_gate_note_release(queue, key, tenant);
	if (gated && (to == TS_EXECUTING || orch_state_is_terminal(to)))
		row_set(row, task_cols.gated, BoolGetDatum(false), false);
}

/*
 * The event of the claim the task row records (a row with claim_event_id),
 * written out as an event row before the row records another claim: its
 * id, time, role, label, attempt, token, wait and transaction as derived.
 */
static void
write_claim_event(HeapTuple oldtup, TupleDesc td, const char *tenant, int64 task_id,
				  bool has_run, int64 run_id)
{
	Datum		v[ORCH_CLAIM_FIELDS];
	bool		isnull[ORCH_CLAIM_FIELDS];
	OrchEvent  *e;
	int			nest;

	v[3] = heap_getattr(oldtup, task_cols.claim_event_id, td, &isnull[3]);
	if (isnull[3])
		return;
	v[0] = Int64GetDatum(task_id);
	isnull[0] = false;
	v[1] = CStringGetTextDatum(tenant);
	isnull[1] = false;
	v[2] = Int64GetDatum(run_id);
	isnull[2] = !has_run;
	v[4] = heap_getattr(oldtup, task_cols.claimed_by, td, &isnull[4]);
	v[5] = heap_getattr(oldtup, task_cols.attempts, td, &isnull[5]);
	v[6] = heap_getattr(oldtup, task_cols.lease_token, td, &isnull[6]);
	v[7] = heap_getattr(oldtup, task_cols.claimed_at, td, &isnull[7]);
	v[8] = heap_getattr(oldtup, task_cols.lease_owner, td, &isnull[8]);
	v[9] = heap_getattr(oldtup, task_cols.claim_xact, td, &isnull[9]);
	v[10] = heap_getattr(oldtup, task_cols.claim_waited, td, &isnull[10]);
	e = orch_claim_event(v, isnull);
	nest = orch_pin_search_path();
	orch_events_write(&e, 1);
	AtEOXact_GUC(true, nest);
}

/* The row records no claim (claim_event_id and the columns with it) */
static void
record_no_claim(NewRow *row)
{
	row_set(row, task_cols.claim_event_id, (Datum) 0, true);
	row_set(row, task_cols.claimed_by, (Datum) 0, true);
	row_set(row, task_cols.claim_xact, (Datum) 0, true);
	row_set(row, task_cols.claim_waited, (Datum) 0, true);
}

/*
 * One row's transition as the task trigger sees it, filled phase by phase:
 * read and checked (change_check), its derived columns set (change_derive),
 * the admission gate (change_gate), the facts of its event
 * (change_event_facts), its run noted (change_note_run), then recorded by the
 * row itself (a claim, an enqueue, a completion) or as an event row
 * (change_write_event).
 */
typedef struct TaskChange
{
	TupleDesc	td;
	bool		is_insert;
	HeapTuple	oldtup;			/* NULL for an insert */
	const Datum *ov;			/* its values, when the writer took them apart */
	const bool *on;
	NewRow		row;
	int64		task_id;
	const char *from_name;		/* NULL for an insert */
	const char *to_name;
	TaskState	from;			/* TS_INVALID for an insert */
	TaskState	to;
	bool		records_completion; /* a completion the row records (below) */
	/* the facts of its event */
	char	   *reason;
	char	   *tenant;			/* read when first asked: change_tenant */
	char	   *actor;
	int32		attempt;
	pg_uuid_t  *token;
	bool		has_run;
	int64		run_id;
	int64		waited_us;		/* a claim: how long it had been claimable; -1 */
} TaskChange;

/*
 * A column of the row before the change: from its values when the writer
 * has them (task_update.c took the row apart once), else read from the
 * tuple (the trigger's).
 */
static Datum
old_get(TaskChange *c, int col, bool *isnull)
{
	if (c->ov == NULL)
		return heap_getattr(c->oldtup, col, c->td, isnull);
	*isnull = c->on[col - 1];
	return c->ov[col - 1];
}

static bool
old_isnull(TaskChange *c, int col)
{
	bool		isnull;

	(void) old_get(c, col, &isnull);
	return isnull;
}

static char *
old_text(TaskChange *c, int col)
{
	bool		isnull;
	Datum		d = old_get(c, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* The columns of a completion the row records (finished_at last) */
static void
complete_columns(int cols[5])
{
	cols[0] = task_cols.complete_event_id;
	cols[1] = task_cols.complete_attempt_id;
	cols[2] = task_cols.completed_by;
	cols[3] = task_cols.complete_xact;
	cols[4] = task_cols.finished_at;
}

/*
 * The state a row's state column names, its name as the matrix spells it
 * into *name (another value as it is, for the error; NULL: none).
 */
static TaskState
state_read(Datum d, bool isnull, const char **name)
{
	TaskState	s = isnull ? TS_INVALID : orch_state_from_text(d);

	*name = s != TS_INVALID ? orch_state_names[s] : isnull ? NULL : TextDatumGetCString(d);
	return s;
}

/*
 * Check the row's transition against the matrix (refused: error), its new
 * values read into c->row.  False for an update of a terminal row that
 * changes nothing, which is let through as it is.
 */
static bool
change_check(TaskChange *c)
{
	bool		isnull;
	Datum		d;

	c->from = TS_INVALID;
	c->task_id = DatumGetInt64(row_get(&c->row, task_cols.id, &isnull));
	d = row_get(&c->row, task_cols.state, &isnull);
	c->to = state_read(d, isnull, &c->to_name);

	if (c->is_insert)
	{
		if (c->to != TS_RECEIVED && c->to != TS_QUEUED && c->to != TS_FAILED)
			orch_raise_invalid_transition(task_what(c->task_id), NULL, c->to_name);
		return true;
	}
	d = old_get(c, task_cols.state, &isnull);
	c->from = state_read(d, isnull, &c->from_name);
	if (c->from == TS_INVALID)
		elog(ERROR, "orchestrator: task " INT64_FORMAT " has unknown state \"%s\"",
			 c->task_id, c->from_name);
	if (orch_state_is_terminal(c->from))
	{
		if (c->to == c->from && c->row.tup != NULL &&
			orch_tuples_identical(c->oldtup, c->row.tup, c->td))
			return false;
		orch_raise_terminal(task_what(c->task_id), c->from_name, c->to_name);
	}
	if (c->to == TS_INVALID || !orch_task_transition_allowed(c->from, c->to))
		orch_raise_invalid_transition(task_what(c->task_id), c->from_name, c->to_name);
	return true;
}

/* The columns the trigger derives: claimability, timestamps, the lease */
static void
change_derive(TaskChange *c)
{
	NewRow	   *row = &c->row;
	TimestampTz xact_start = GetCurrentTransactionStartTimestamp();
	bool		isnull;
	Datum		d;

	/*
	 * What only a completion by orch_complete records (change_record_completion):
	 * nothing else sets it, so that a raw INSERT or UPDATE cannot forge a
	 * completion (a terminal row, the only kind that has it, cannot change).
	 */
	c->records_completion = c->from == TS_EXECUTING && c->to == TS_COMPLETED &&
		orch_event_context()->completion_in_task;
	if (task_cols.complete_event_id > 0 && !c->records_completion)
	{
		int			cols[5];

		complete_columns(cols);
		for (int i = 0; i < 4; i++)
			if (!row_isnull(row, cols[i]))
				row_set(row, cols[i], (Datum) 0, true);
	}

	if (c->to == TS_EXECUTING || orch_state_is_terminal(c->to) || c->to == TS_RECEIVED)
		row_set(row, task_cols.ready_at, (Datum) 0, true);
	else if (c->to == TS_QUEUED && c->from != TS_QUEUED && row_isnull(row, task_cols.ready_at))
	{
		d = row_get(row, task_cols.run_at, &isnull);
		row_set(row, task_cols.ready_at, d, isnull);
	}
	if (!c->is_insert)
		row_set(row, task_cols.updated_at, TimestampTzGetDatum(xact_start), false);
	if (orch_state_is_terminal(c->to) && c->to != c->from)
	{
		/* when its last attempt ends (a completion the row records is restamped below) */
		d = row_get(row, task_cols.claimed_at, &isnull);
		row_set(row, task_cols.finished_at,
				TimestampTzGetDatum(orch_attempt_end(!isnull, isnull ? 0 : DatumGetTimestampTz(d))), false);
	}

	/*
	 * An attempt ends: its lease is gone, and what was handed to it (a tool
	 * result, a confirmation) was consumed and is not handed to the next.
	 */
	if (c->from == TS_EXECUTING && c->to != TS_EXECUTING)
	{
		row_set(row, task_cols.lease_expires_at, (Datum) 0, true);
		row_set(row, task_cols.resume_data, (Datum) 0, true);
	}

	/*
	 * Not due yet (queued for later, or waiting to retry): not claimable
	 * until orch_wake_delayed lets it in, so claims never step over it and a
	 * keyed task holds no slot while it waits.  Due by ORCH_NOW: the later
	 * of the transaction's time and the statement's (a claim that waits
	 * moves the statement's to each look).
	 */
	if (c->to == TS_QUEUED || c->to == TS_AWAITING_TOOL)
	{
		d = row_get(row, task_cols.ready_at, &isnull);
		if (!isnull && DatumGetTimestampTz(d) > Max(xact_start, GetCurrentStatementStartTimestamp()))
			row_set(row, task_cols.ready_at, (Datum) 0, true);
	}
}

/*
 * A claimable task's place in the claim order moved (its priority, its
 * creation time, its queue or tenant changed): it may now come before
 * where the next claims start (dequeue.c).
 */
static bool
claim_key_moved(TaskChange *c)
{
	int			cols[4] = {task_cols.priority, task_cols.created_at, task_cols.queue, task_cols.tenant_id};

	for (int i = 0; i < 4; i++)
	{
		Form_pg_attribute att = TupleDescAttr(c->td, cols[i] - 1);
		bool		old_null;
		bool		new_null;
		Datum		o = old_get(c, cols[i], &old_null);
		Datum		n = row_get(&c->row, cols[i], &new_null);

		if (old_null != new_null ||
			(!old_null && !datumIsEqual(o, n, att->attbyval, att->attlen)))
			return true;
	}
	return false;
}

/*
 * Is the task delayed (not claimable until it is due: queued for later, or
 * waiting to retry; see change_derive), and when is it due?  Of the new
 * row (old false) or of the row before the change.
 */
static bool
change_delayed(TaskChange *c, bool old, TimestampTz *due)
{
	TaskState	st = old ? c->from : c->to;
	int			cols[4] = {task_cols.ready_at, task_cols.gated, task_cols.retry_at, task_cols.run_at};
	Datum		v[4];
	bool		n[4];

	if (old && c->is_insert)
		return false;
	for (int i = 0; i < 4; i++)
		v[i] = old ? old_get(c, cols[i], &n[i]) : row_get(&c->row, cols[i], &n[i]);
	if (!n[0] || (!n[1] && DatumGetBool(v[1])) ||
		!(st == TS_QUEUED || (st == TS_AWAITING_TOOL && !n[2])))
		return false;
	*due = !n[2] ? DatumGetTimestampTz(v[2]) : n[3] ? 0 : DatumGetTimestampTz(v[3]);
	return true;
}

/*
 * A task made claimable (ready_at set now), a delayed task written or its
 * due moment moved, or a slot freed (it leaves executing: a queue's owner
 * or queue limit may let another in): the claims waiting on its queue look
 * again once this transaction commits; the claims of the queue no longer
 * start where the previous one did (a task made claimable: dequeue.c), nor
 * skip their look for due work (a delayed task: housekeeping.c).
 */
static void
change_wake(TaskChange *c)
{
	bool		ready;
	bool		was_ready = false;
	TimestampTz due;
	TimestampTz was_due;

	if (!orch_claim_wait_shared())
		return;
	(void) row_get(&c->row, task_cols.ready_at, &ready);
	ready = !ready;
	if (!c->is_insert)
		was_ready = !old_isnull(c, task_cols.ready_at);
	if ((ready && !was_ready) || (ready && was_ready && claim_key_moved(c)))
		orch_claim_wake_note(row_text(&c->row, task_cols.queue));
	else if (change_delayed(c, false, &due) && (!change_delayed(c, true, &was_due) || was_due != due))
		orch_claim_due_note(row_text(&c->row, task_cols.queue));
	if (c->from == TS_EXECUTING && c->to != TS_EXECUTING)
		orch_claim_slot_note(row_text(&c->row, task_cols.queue));
}

/*
 * A task row restored as it was (no transition, no event): when it is
 * claimable, the claims of its queue look from the beginning once this
 * transaction commits, and those waiting wake (tup, or values and nulls).
 */
static void
restored_wake(Relation rel, HeapTuple tup, const Datum *values, const bool *nulls)
{
	TupleDesc	td = RelationGetDescr(rel);
	bool		isnull;
	Datum		queue;

	if (!orch_claim_wait_shared())
		return;
	load_task_cols(rel);
	if (tup != NULL ? heap_attisnull(tup, task_cols.ready_at, td) : nulls[task_cols.ready_at - 1])
		return;
	if (tup != NULL)
		queue = heap_getattr(tup, task_cols.queue, td, &isnull);
	else
	{
		queue = values[task_cols.queue - 1];
		isnull = nulls[task_cols.queue - 1];
	}
	if (!isnull)
		orch_claim_wake_note(TextDatumGetCString(queue));
}

/* The admission gate, for a keyed task (one without a key passes it) */
static void
change_gate(TaskChange *c)
{
	int			nest;

	if (row_isnull(&c->row, task_cols.concurrency_key))
		return;
	/* the gate runs SQL (the function pins no search_path) */
	nest = orch_pin_search_path();
	task_gate(&c->row, c->oldtup, c->td, c->from, c->to, c->task_id);
	AtEOXact_GUC(true, nest);
}

/* The task's tenant, as its event names it (read when first asked) */
static const char *
change_tenant(TaskChange *c)
{
	if (c->tenant == NULL)
		c->tenant = row_text(&c->row, task_cols.tenant_id);
	return c->tenant;
}

/* What the transition's event says: reason, actor, attempt, run */
static void
change_event_facts(TaskChange *c)
{
	NewRow	   *row = &c->row;
	bool		isnull;
	Datum		d;

	c->reason = row_text(row, task_cols.reason_code);
	if (!c->is_insert)
	{
		char	   *old_reason = old_text(c, task_cols.reason_code);

		/* a raw UPDATE that set no reason of its own */
		if (!orch_event_context()->active &&
			(c->reason == NULL || (old_reason != NULL && strcmp(c->reason, old_reason) == 0)))
			c->reason = "direct_update";
	}
	else if (c->reason == NULL)
		c->reason = "enqueued";
	/* an attempt that ends is named as it was (a release gives its number back) */
	if (!c->is_insert && c->from == TS_EXECUTING)
		c->attempt = DatumGetInt32(old_get(c, task_cols.attempts, &isnull));
	else
		c->attempt = DatumGetInt32(row_get(row, task_cols.attempts, &isnull));
	d = row_get(row, task_cols.lease_token, &isnull);
	c->token = isnull ? NULL : DatumGetUUIDP(d);
	d = row_get(row, task_cols.run_id, &isnull);
	c->has_run = !isnull;
	c->run_id = c->has_run ? DatumGetInt64(d) : 0;

	c->actor = orch_event_context()->actor;
	if (c->actor == NULL && orch_event_context()->worker_actor)
		c->actor = row_text(row, task_cols.lease_owner);

	/* a claim: how long the task had been claimable (queue wait metrics) */
	c->waited_us = -1;
	if (!c->is_insert && c->to == TS_EXECUTING)
	{
		d = old_get(c, task_cols.ready_at, &isnull);
		if (!isnull)
			c->waited_us = Max(0, GetCurrentTimestamp() - DatumGetTimestampTz(d));
	}
}

/*
 * A workflow step's task finished: its run progresses at statement end
 * (told which task completed, the usual case has a shorter path).  A step's
 * task going to wait for a retry (awaiting_tool with retry_at), or claimed
 * again after one: its step reads retrying, then running again.  Plain
 * tasks, first claims, tool waits, map items and compensations are not
 * noted.
 */
static void
change_note_run(TaskChange *c)
{
	NewRow	   *row = &c->row;

	if (!c->has_run)
		return;
	if (orch_state_is_terminal(c->to) && c->to != c->from)
		orch_runs_note(c->run_id, change_tenant(c), c->task_id, row_text(row, task_cols.step_key),
					   c->to == TS_COMPLETED);
	else if ((c->from == TS_EXECUTING && c->to == TS_AWAITING_TOOL &&
			  !row_isnull(row, task_cols.retry_at)) ||
			 (c->from == TS_AWAITING_TOOL && c->to == TS_EXECUTING &&
			  !old_isnull(c, task_cols.retry_at)))
	{
		char	   *key = row_text(row, task_cols.step_key);

		if (key != NULL && strchr(key, '#') == NULL && strchr(key, ':') == NULL)
			orch_runs_note_retry(c->run_id, change_tenant(c));
	}
}

/*
 * Claims the row records.  True when the row records this transition's
 * claim (no event row is written).
 */
static bool
change_record_claim(TaskChange *c)
{
	NewRow	   *row = &c->row;
	char	   *owner;
	bool		derive;

	if (task_cols.claim_event_id <= 0)
		return false;

	/*
	 * The claim the row records is written out as an event row (its id,
	 * time, role and transaction kept), and the row records none, when the
	 * task leaves executing other than by a completion it records (a retry
	 * wait, a tool, a confirmation, a failure, a cancel, a lease recovery),
	 * so that a recorded claim is only ever on an executing row or on a row
	 * that records its completion: where orch.metrics_fold looks for them;
	 * and, should one be left from a transition the trigger did not see,
	 * when the task is claimed again.
	 */
	if (!c->is_insert &&
		((c->from == TS_EXECUTING && !c->records_completion) || c->to == TS_EXECUTING) &&
		!old_isnull(c, task_cols.claim_event_id))
	{
		write_claim_event(c->oldtup, c->td, change_tenant(c), c->task_id, c->has_run, c->run_id);
		record_no_claim(row);
	}

	/*
	 * A claim.  The row records the event of its claim from the queue
	 * (queued -> executing, reason claimed, labelled with the lease owner):
	 * claim_event_id, claimed_by, claim_xact, claim_waited, read with the
	 * columns only a claim sets (claimed_at, lease_owner, lease_token,
	 * attempts); orch.history derives it.  Claimed otherwise (after a retry
	 * wait, a tool, a confirmation), the claim writes its event row and
	 * records none; nor does an insert, whatever either put there.
	 */
	if (!c->is_insert && !(c->to == TS_EXECUTING && c->from != TS_EXECUTING))
		return false;
	owner = row_text(row, task_cols.lease_owner);
	/* its label is the lease owner (orch_dequeue labels the claim with the worker) */
	derive = !c->is_insert && c->from == TS_QUEUED && strcmp(c->reason, "claimed") == 0 &&
		orch_event_context()->note == NULL && c->token != NULL &&
		(c->actor == NULL ? owner == NULL : (owner != NULL && strcmp(c->actor, owner) == 0));
	if (!derive)
	{
		record_no_claim(row);
		return false;
	}
	row_set(row, task_cols.claim_event_id, Int64GetDatum(orch_next_event_id()), false);
	row_set(row, task_cols.claimed_by, CStringGetTextDatum(orch_current_actor()), false);
	row_set(row, task_cols.claim_xact,
			Int64GetDatum((int64) U64FromFullTransactionId(GetTopFullTransactionId())), false);
	row_set(row, task_cols.claim_waited, Int64GetDatum(c->waited_us), c->waited_us < 0);
	return true;
}

/*
 * A plain enqueue by orch_enqueue or orch_enqueue_batch (received ->
 * queued, reason enqueued, no label or note): the task row records its
 * event (orch.history derives it from enqueue_event_id, created_by,
 * created_at and created_xact), and no event row is written: true.  The
 * event's id is the task's: both functions draw it from orch.events_id_seq,
 * the sequence every event id comes from, before any other event of the
 * task.  Any other insert (a raw INSERT among them, whatever id it gives)
 * records nothing there and writes its event row, so that no event is
 * derived for it, nor forged.
 */
static bool
change_record_enqueue(TaskChange *c)
{
	int			cols[3] = {task_cols.enqueue_event_id, task_cols.created_by, task_cols.created_xact};
	Datum		v[3] = {0, 0, 0};
	bool		n[3] = {true, true, true};
	bool		derive;

	if (!c->is_insert || task_cols.enqueue_event_id <= 0)
		return false;
	derive = c->to == TS_QUEUED && strcmp(c->reason, "enqueued") == 0 &&
		c->actor == NULL && orch_event_context()->note == NULL &&
		orch_event_context()->enqueue_in_task;
	if (derive)
	{
		v[0] = Int64GetDatum(c->task_id);
		v[1] = CStringGetTextDatum(orch_current_actor());
		v[2] = Int64GetDatum((int64) U64FromFullTransactionId(GetTopFullTransactionId()));
		n[0] = n[1] = n[2] = false;
	}
	for (int i = 0; i < 3; i++)
		row_set(&c->row, cols[i], v[i], n[i]);
	return derive;
}

/*
 * A completion by orch_complete or orch_complete_batch: the row records
 * its event (complete_event_id, completed_by, complete_xact) and its
 * completed attempt (complete_attempt_id, with the attempt number, lease
 * owner and token and claim time the row keeps, and finished_at, set here
 * to the moment of completion: a claim in the same transaction is later
 * than its start).  orch.history and orch.attempt_history derive them; no
 * event or attempt row is written: true.  Nothing else sets these columns,
 * so no completion is derived for (nor forged by) a raw UPDATE.
 */
static bool
change_record_completion(TaskChange *c)
{
	int			cols[5];
	Datum		v[5];

	if (!c->records_completion)
		return false;
	if (task_cols.complete_event_id == 0)
		elog(ERROR, "orchestrator: orch.tasks has no complete_event_id column");
	complete_columns(cols);
	v[0] = Int64GetDatum(orch_next_event_id());
	v[1] = Int64GetDatum(orch_next_attempt_id());
	v[2] = CStringGetTextDatum(orch_current_actor());
	v[3] = Int64GetDatum((int64) U64FromFullTransactionId(GetTopFullTransactionId()));
	v[4] = TimestampTzGetDatum(orch_metrics_clock());
	for (int i = 0; i < 5; i++)
		row_set(&c->row, cols[i], v[i], false);
	return true;
}

/* The transition's event row: buffered for the statement's end, or written */
static void
change_write_event(TaskChange *c, Relation rel)
{
	const char *from = c->is_insert ? (c->to == TS_RECEIVED ? NULL : "received") : c->from_name;
	int			nest;

	if (orch_has_flush_trigger(rel))
	{
		orch_buffer_event("task", change_tenant(c), true, c->task_id, c->has_run, c->run_id,
						  from, c->to_name, c->reason, c->actor, c->attempt, c->token,
						  orch_event_context()->note, c->waited_us);
		return;
	}
	nest = orch_pin_search_path();
	orch_write_event_full(change_tenant(c), c->task_id, true, c->run_id, c->has_run, "task",
						  from, c->to_name, c->reason, c->actor, c->attempt, c->token,
						  orch_event_context()->note, c->waited_us);
	AtEOXact_GUC(true, nest);
}

/*
 * What a checked transition does: its derived columns, the admission gate,
 * the claims' wake-up, and its event (recorded by the row, or written).
 */
static void
change_apply(TaskChange *c, Relation rel)
{
	change_derive(c);
	change_gate(c);
	change_wake(c);
	/* a self-transition writes no event */
	if (!c->is_insert && c->from == c->to)
		return;
	change_event_facts(c);
	change_note_run(c);
	if (!change_record_claim(c) && !change_record_enqueue(c) && !change_record_completion(c))
		change_write_event(c, rel);
}

/* The built-in task lifecycle on orch.tasks. */
static HeapTuple
task_trigger(TriggerData *trigdata)
{
	TaskChange	c = {0};
	Relation	rel = trigdata->tg_relation;

	c.is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);

	/*
	 * A restore: pg_dump's scripts and pg_restore run with row_security =
	 * off (so that no row is silently filtered), and load finished and
	 * in-flight tasks with COPY.  Such a session declares that it reloads
	 * rows exactly as they were: an insert outside any API call is taken
	 * as it is, with no transition check, no derived column and no event
	 * (the events are restored from the dump too).  Only roles that bypass
	 * row-level security (superusers, the extension's owner) can write the
	 * table with row_security off.
	 */
	if (c.is_insert && orch_restoring())
	{
		restored_wake(rel, trigdata->tg_trigtuple, NULL, NULL);
		return trigdata->tg_trigtuple;
	}
	c.td = RelationGetDescr(rel);
	c.oldtup = c.is_insert ? NULL : trigdata->tg_trigtuple;
	load_task_cols(rel);
	row_read(&c.row, c.is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple, c.td);
	if (!change_check(&c))
		return trigdata->tg_newtuple;
	change_apply(&c, rel);
	return row_form(&c.row);
}

/*
 * A task row inserted without the executor (append.c): its values (one per
 * column of rel, set in place) checked and derived exactly as the row
 * trigger does for an INSERT, its event buffered for the statement's end
 * (orch_tasks_inserted).
 */
void
orch_task_inserting(Relation rel, Datum *values, bool *nulls)
{
	TaskChange	c = {0};

	if (orch_restoring())
	{
		restored_wake(rel, NULL, values, nulls);
		return;
	}
	c.is_insert = true;
	c.td = RelationGetDescr(rel);
	load_task_cols(rel);
	c.row.td = c.td;
	c.row.values = values;
	c.row.nulls = nulls;
	(void) change_check(&c);
	change_apply(&c, rel);
}

/*
 * A task row updated without the executor (task_update.c): the new values
 * (one per column of rel, set in place) checked and derived exactly as the
 * row trigger does for an UPDATE of oldtup, whose values (ov, on) the
 * writer took apart already.
 */
void
orch_task_updating(Relation rel, HeapTuple oldtup, const Datum *ov, const bool *on,
				   Datum *values, bool *nulls)
{
	TaskChange	c = {0};

	c.is_insert = false;
	c.td = RelationGetDescr(rel);
	c.oldtup = oldtup;
	c.ov = ov;
	c.on = on;
	load_task_cols(rel);
	c.row.td = c.td;
	c.row.values = values;
	c.row.nulls = nulls;
	if (!change_check(&c))
		return;
	change_apply(&c, rel);
}

Datum
orch_state_machine_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Trigger    *trigger;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_state_machine_trigger: not called by trigger manager")));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_state_machine_trigger must be a BEFORE INSERT OR UPDATE row trigger")));
	trigger = trigdata->tg_trigger;
	if (trigger->tgnargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_state_machine_trigger takes two arguments: column, machine")));
	orch_schema_version();

	if (strcmp(trigger->tgargs[1], "task") == 0 &&
		strcmp(trigger->tgargs[0], "state") == 0 &&
		is_task_table(trigdata->tg_relation))
		return PointerGetDatum(task_trigger(trigdata));
	else
	{
		/*
		 * A user table: its writer's search_path is not ours, and the
		 * machine lookups and the event insert run SQL as the extension's
		 * owner.  The function itself pins no search_path (0.6.0: it is
		 * fired once per row, where a function-level SET costs a GUC save
		 * and restore per row); every path that runs SQL pins it here: user
		 * tables, keyed tasks (the gate), and the event insert of schemas
		 * without the flush trigger.
		 */
		int			nest = orch_pin_search_path();
		HeapTuple	result = orch_user_table_trigger(trigdata, trigger->tgargs[0], trigger->tgargs[1]);

		AtEOXact_GUC(true, nest);
		return PointerGetDatum(result);
	}
}
