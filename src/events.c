/*
 * events.c
 *	  The audit writer: who acts (the event context of an API call), one
 *	  event per transition buffered per statement and written at its end
 *	  with one insert (or appended without SQL, append.c).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
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
#include "nodes/bitmapset.h"
#include "catalog/namespace.h"
#include "catalog/pg_sequence.h"
#include "utils/syscache.h"

#include "orchestrator.h"


/* ----------------------------------------------------------------------
 * Event context: who acts and why, set by an API call for the duration of
 * its writes; a raw UPDATE has none and is recorded as the session user's
 * direct_update.
 *
 * The contexts of the calls in progress form a stack (the innermost last),
 * so that a call made inside another (a user's trigger on orch.tasks that
 * enqueues, say) hands the outer call its own context back when it ends.
 * Its items remember the (sub)transaction level that set them: an aborted
 * subtransaction takes back the contexts it set and did not end (an error
 * caught by a PL/pgSQL exception block), and the outer context is the
 * current one again.
 * ---------------------------------------------------------------------- */
typedef struct ContextItem
{
	OrchLeveled leveled;
	OrchEventContext c;
} ContextItem;

static List *ctx_stack = NIL;	/* ContextItem, in TopTransactionContext */
static List *event_buffer = NIL;	/* BufferedEvent, in TopTransactionContext */
static int	events_deferred = 0;	/* > 0: statement ends do not flush (see orch_events_defer) */
static const OrchEventContext no_context = {0};

static void
ctx_state_reset(bool xact_end)
{
	if (xact_end)
		events_deferred = 0;
}

static OrchXactLists ctx_state = {{&ctx_stack, &event_buffer}, ctx_state_reset};

static OrchEventContext *
ctx_current(void)
{
	return ctx_stack == NIL ? NULL : &((ContextItem *) llast(ctx_stack))->c;
}

/*
 * Set the event context of an API call: worker_actor records the task's
 * lease owner as the actor (worker calls).  Returns the token that
 * orch_clear_event_context takes to end it.
 */
int
orch_set_event_context_ext(const char *actor, const char *note, bool worker_actor)
{
	MemoryContext old;
	ContextItem *item;
	int			token;

	orch_xact_lists_use(&ctx_state);
	token = list_length(ctx_stack);
	old = MemoryContextSwitchTo(TopTransactionContext);
	item = palloc0(sizeof(ContextItem));
	item->leveled.level = GetCurrentTransactionNestLevel();
	item->c.active = true;
	item->c.worker_actor = worker_actor;
	item->c.actor = actor ? pstrdup(actor) : NULL;
	item->c.note = note ? pstrdup(note) : NULL;
	ctx_stack = lappend(ctx_stack, item);
	MemoryContextSwitchTo(old);
	return token;
}

int
orch_set_event_context(const char *actor, const char *note)
{
	return orch_set_event_context_ext(actor, note, false);
}

/*
 * End the context that the call returning token set, and any set after it
 * and not ended: the context before it is the current one again.
 */
void
orch_clear_event_context(int token)
{
	while (list_length(ctx_stack) > token)
	{
		ContextItem *item = (ContextItem *) llast(ctx_stack);

		if (item->c.actor)
			pfree(item->c.actor);
		if (item->c.note)
			pfree(item->c.note);
		pfree(item);
		ctx_stack = list_delete_last(ctx_stack);
	}
}

/*
 * The call's completions (executing -> completed) are recorded by the task
 * rows themselves (complete_event_id and the columns with it, read through
 * orch.history and orch.attempt_history): the task trigger sets those and
 * buffers no event, and the call writes no attempt row.  A flag of the
 * call's own context: a context set inside the call has its own.
 */
void
orch_event_context_completion_in_task(void)
{
	OrchEventContext *c = ctx_current();

	Assert(c != NULL);
	if (c)
		c->completion_in_task = true;
}

/*
 * The call's enqueues (received -> queued, reason enqueued) are recorded by
 * the task rows themselves (enqueue_event_id, created_by, created_xact; no
 * event row): orch_enqueue and orch_enqueue_batch, from 0.8.0 on and off
 * Citus (where the trigger runs on the shard's node, which does not see
 * this context).  The transaction's id is assigned here, before the call
 * draws any task id: orch.metrics_fold finds the enqueues it has not
 * counted by task id above the last id drawn before the transaction ids it
 * has not counted were assigned (orch.metrics_mark), which holds only for
 * ids drawn after their transaction's id.  Not in a read-only transaction
 * or on a standby, where the insert fails with its own error.
 */
void
orch_event_context_enqueue_in_task(void)
{
	OrchEventContext *c;

	if (!orch_schema_rows_record_history() || orch_citus() || XactReadOnly || RecoveryInProgress())
		return;
	(void) GetTopTransactionId();
	c = ctx_current();
	Assert(c != NULL);
	if (c)
		c->enqueue_in_task = true;
}

/* ----------------------------------------------------------------------
 * Event writer
 * ---------------------------------------------------------------------- */

#define EVENT_COLS 15
#define EVENT_COLS_WITH_IDS 17	/* and the id and transaction a task row recorded */

/*
 * Write n events: appended without SQL when append.c can (a plain table,
 * no RLS to apply), else with one INSERT (VALUES for one event, cheaper to
 * start; SELECT FROM unnest(...) for several).
 */
void
orch_events_write(OrchEvent *const *events, int n)
{
	static const Oid elemtypes[EVENT_COLS_WITH_IDS] = {TEXTOID, INT8OID, INT8OID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, INT4OID, UUIDOID, TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID, INTERVALOID, TEXTOID,
	INT8OID, INT8OID};
	static const Oid arrtypes[EVENT_COLS_WITH_IDS] = {TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID,
		TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT4ARRAYOID, UUIDARRAYOID,
		TEXTARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INTERVALARRAYOID, TEXTARRAYOID,
	INT8ARRAYOID, INT8ARRAYOID};
	Datum	   *cols[EVENT_COLS_WITH_IDS];
	bool	   *nulls[EVENT_COLS_WITH_IDS];
	OrchArgs	a = {0};
	bool		ids;
	int			ncols;

	if (n <= 0 || orch_events_store(events, n))
		return;
	ids = events[0]->id != 0;
	ncols = ids ? EVENT_COLS_WITH_IDS : EVENT_COLS;
	for (int c = 0; c < ncols; c++)
	{
		cols[c] = palloc0(sizeof(Datum) * n);
		nulls[c] = palloc0(sizeof(bool) * n);
	}
	for (int i = 0; i < n; i++)
	{
		const OrchEvent *e = events[i];

#define SETTXT(c, s) do { if (s) cols[c][i] = orch_text_datum(s); else nulls[c][i] = true; } while (0)
		SETTXT(0, e->tenant);
		cols[1][i] = Int64GetDatum(e->task_id);
		nulls[1][i] = !e->has_task;
		cols[2][i] = Int64GetDatum(e->run_id);
		nulls[2][i] = !e->has_run;
		SETTXT(3, e->from_state);
		SETTXT(4, e->to_state);
		SETTXT(5, e->reason_code);
		SETTXT(6, e->actor);
		cols[7][i] = Int32GetDatum(e->attempt);
		nulls[7][i] = e->attempt <= 0;
		cols[8][i] = UUIDPGetDatum(&e->token);
		nulls[8][i] = !e->has_token;
		SETTXT(9, e->note);
		cols[10][i] = TimestampTzGetDatum(e->at);
		cols[11][i] = Int32GetDatum(i);
		SETTXT(12, e->label);
#undef SETTXT
		if (e->waited_us >= 0)
			cols[13][i] = IntervalPGetDatum(orch_usecs_interval(e->waited_us));
		else
			nulls[13][i] = true;
		cols[14][i] = orch_text_datum(e->entity ? e->entity : "task");
		if (ids)
		{
			cols[15][i] = Int64GetDatum(e->id);
			cols[16][i] = Int64GetDatum(e->xact);
			nulls[16][i] = !e->has_xact;
		}
	}
	for (int c = 0; c < ncols; c++)
	{
		if (n == 1 && !ids)
			orch_arg(&a, elemtypes[c], cols[c][0], nulls[c][0]);
		else
		{
			int16		typlen;
			bool		typbyval;
			char		typalign;
			int			dims[1] = {n};
			int			lbs[1] = {1};

			get_typlenbyvalalign(elemtypes[c], &typlen, &typbyval, &typalign);
			orch_arg(&a, arrtypes[c],
					 PointerGetDatum(construct_md_array(cols[c], nulls[c], 1, dims, lbs,
														elemtypes[c], typlen, typbyval, typalign)),
					 false);
		}
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (ids)
		orch_args_sql(&a, "INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
					  " to_state, reason_code, actor, attempt, lease_token, note, at, label, waited, id, xact)"
					  " SELECT e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state,"
					  " e.reason_code, e.actor, e.attempt, e.lease_token, e.note, e.at, e.label, e.waited,"
					  " e.id, e.xact"
					  " FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
					  "   AS e(tenant_id, task_id, run_id, from_state, to_state, reason_code,"
					  "        actor, attempt, lease_token, note, at, ord, label, waited, entity, id, xact)"
					  " ORDER BY e.ord",
					  false, 0, SPI_OK_INSERT);
	else if (n == 1)
		orch_args_sql(&a, "INSERT INTO orch.events (tenant_id, task_id, run_id, from_state, to_state,"
					  " reason_code, actor, attempt, lease_token, note, at, label, waited, entity)"
					  " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $13, $14, $15)"
					  " /* $12: the order of several */",
					  false, 0, SPI_OK_INSERT);
	else
		orch_args_sql(&a, "INSERT INTO orch.events (tenant_id, task_id, run_id, entity, from_state,"
					  " to_state, reason_code, actor, attempt, lease_token, note, at, label, waited)"
					  " SELECT e.tenant_id, e.task_id, e.run_id, e.entity, e.from_state, e.to_state,"
					  " e.reason_code, e.actor, e.attempt, e.lease_token, e.note, e.at, e.label, e.waited"
					  " FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
					  "   AS e(tenant_id, task_id, run_id, from_state, to_state, reason_code,"
					  "        actor, attempt, lease_token, note, at, ord, label, waited, entity)"
					  " ORDER BY e.ord",
					  false, 0, SPI_OK_INSERT);
	SPI_finish();
}

/*
 * Insert one event now.  actor is always the role the call acts for
 * (orch_current_actor); label is the name the caller supplied (worker,
 * approver), recorded beside it and never in its place.
 */
void
orch_write_event_full(const char *tenant, int64 task_id, bool has_task,
				 int64 run_id, bool has_run, const char *entity,
				 const char *from_state, const char *to_state,
				 const char *reason_code, const char *label, int32 attempt,
				 pg_uuid_t *lease_token, const char *note, int64 waited_us)
{
	OrchEvent	ev = {0};
	OrchEvent  *evp = &ev;

	ev.level = 0;
	ev.tenant = (char *) (tenant ? tenant : ORCH_DEFAULT_TENANT);
	ev.entity = entity;
	ev.has_task = has_task;
	ev.task_id = task_id;
	ev.has_run = has_run;
	ev.run_id = run_id;
	ev.from_state = (char *) from_state;
	ev.to_state = (char *) to_state;
	ev.reason_code = (char *) reason_code;
	ev.actor = (char *) orch_current_actor();
	ev.label = (char *) label;
	ev.attempt = attempt;
	ev.has_token = lease_token != NULL;
	if (lease_token)
		memcpy(&ev.token, lease_token, sizeof(pg_uuid_t));
	ev.note = (char *) note;
	ev.at = GetCurrentTimestamp();
	ev.waited_us = waited_us;
	orch_events_write(&evp, 1);
}

/*
 * The event of the claim a task row records, as a row of its own (the row
 * is about to record another claim, or its completion went unrecorded): v
 * and isnull hold the row's ORCH_CLAIM_FIELDS (task id, tenant, run id,
 * claim_event_id, claimed_by, attempts, lease_token, claimed_at,
 * lease_owner, claim_xact, claim_waited in microseconds).  Palloc'd; write
 * it with orch_events_write.
 */
OrchEvent *
orch_claim_event(const Datum *v, const bool *isnull)
{
	OrchEvent  *e = palloc0(sizeof(OrchEvent));

	e->task_id = DatumGetInt64(v[0]);
	e->has_task = true;
	e->tenant = TextDatumGetCString(v[1]);
	e->has_run = !isnull[2];
	e->run_id = isnull[2] ? 0 : DatumGetInt64(v[2]);
	e->id = DatumGetInt64(v[3]);
	e->entity = "task";
	e->from_state = "queued";
	e->to_state = "executing";
	e->reason_code = "claimed";
	e->actor = isnull[4] ? NULL : TextDatumGetCString(v[4]);
	e->attempt = isnull[5] ? 0 : DatumGetInt32(v[5]);
	e->has_token = !isnull[6];
	if (!isnull[6])
		memcpy(&e->token, DatumGetUUIDP(v[6]), sizeof(pg_uuid_t));
	e->at = isnull[7] ? GetCurrentTransactionStartTimestamp() : DatumGetTimestampTz(v[7]);
	e->label = isnull[8] ? NULL : TextDatumGetCString(v[8]);
	e->has_xact = !isnull[9];
	e->xact = isnull[9] ? 0 : DatumGetInt64(v[9]);
	e->waited_us = isnull[10] ? -1 : DatumGetInt64(v[10]);
	return e;
}

/* ----------------------------------------------------------------------
 * Per-statement event buffer.  The row trigger on orch.tasks buffers its
 * events and the statement-end trigger writes them with one INSERT: a batch
 * claim or enqueue of N tasks then costs one insert, not N.
 * ---------------------------------------------------------------------- */
typedef OrchEvent BufferedEvent;


static char *
tx_strdup(const char *s)
{
	return s ? MemoryContextStrdup(TopTransactionContext, s) : NULL;
}

void
orch_buffer_event(const char *entity, const char *tenant, bool has_task, int64 task_id,
			 bool has_run, int64 run_id,
			 const char *from_state, const char *to_state, const char *reason_code,
			 const char *label, int32 attempt, pg_uuid_t *token, const char *note,
			 int64 waited_us)
{
	MemoryContext old;
	BufferedEvent *e;

	orch_xact_lists_use(&ctx_state);
	old = MemoryContextSwitchTo(TopTransactionContext);
	e = palloc0(sizeof(BufferedEvent));

	e->level = GetCurrentTransactionNestLevel();
	e->tenant = tx_strdup(tenant ? tenant : ORCH_DEFAULT_TENANT);
	e->entity = entity;
	e->has_task = has_task;
	e->task_id = task_id;
	e->has_run = has_run;
	e->run_id = run_id;
	e->from_state = tx_strdup(from_state);
	e->to_state = tx_strdup(to_state);
	e->reason_code = tx_strdup(reason_code);
	e->actor = tx_strdup(orch_current_actor());
	e->label = tx_strdup(label);
	e->attempt = attempt;
	e->has_token = token != NULL;
	if (token)
		memcpy(&e->token, token, sizeof(pg_uuid_t));
	e->note = tx_strdup(note);
	e->at = GetCurrentTimestamp();
	e->waited_us = waited_us;
	event_buffer = lappend(event_buffer, e);
	MemoryContextSwitchTo(old);
}

/* Write every buffered event (one INSERT; see orch_events_write). */
static void
events_flush(void)
{
	List	   *work = event_buffer;
	int			n = list_length(work);
	OrchEvent **arr;
	ListCell   *lc;

	if (n == 0)
		return;
	event_buffer = NIL;
	arr = palloc(sizeof(OrchEvent *) * n);
	foreach(lc, work)
		arr[foreach_current_index(lc)] = (OrchEvent *) lfirst(lc);
	orch_events_write(arr, n);
	pfree(arr);
	list_free_deep(work);
}

/*
 * The audit writer's part of a statement's end (statement_end.c): write the
 * events the statement buffered, unless a run's progression defers them.
 */
void
orch_events_statement_end(void)
{
	if (events_deferred == 0)
		events_flush();
}

/* Does this relation flush buffered events at statement end? */
bool
orch_has_flush_trigger(Relation rel)
{
	TriggerDesc *td = rel->trigdesc;

	if (td == NULL || !td->trig_update_after_statement || !td->trig_insert_after_statement)
		return false;
	for (int i = 0; i < td->numtriggers; i++)
		if ((strcmp(td->triggers[i].tgname, "tasks_statement_end") == 0 ||
			 strcmp(td->triggers[i].tgname, "tasks_events") == 0) &&
			td->triggers[i].tgenabled != TRIGGER_DISABLED)
			return true;
	return false;
}

/*
 * Record a manual action or transition that the trigger does not see (for
 * example a resume, which keeps the task's state).  Uses the event context's
 * actor and note when the caller passes none.
 */
void
orch_write_event(const char *tenant, int64 task_id, bool has_task,
				 const char *entity, const char *from_state,
				 const char *to_state, const char *reason_code,
				 int32 attempt, pg_uuid_t *lease_token, const char *note)
{
	orch_write_event_full(tenant, task_id, has_task, 0, false, entity, from_state,
					 to_state, reason_code, orch_event_context()->actor, attempt, lease_token,
					 note ? note : orch_event_context()->note, -1);
}

/* An event of a workflow run or of one of its steps (entity 'run', 'run_step'). */
void
orch_write_run_event(const char *tenant, int64 run_id, const char *entity,
					 const char *from_state, const char *to_state,
					 const char *reason_code, const char *note)
{
	if (events_deferred > 0)
		orch_buffer_event(strcmp(entity, "run") == 0 ? "run" : "run_step", tenant, false, 0,
					 true, run_id, from_state, to_state, reason_code, orch_event_context()->actor, 0, NULL,
					 note ? note : orch_event_context()->note, -1);
	else
		orch_write_event_full(tenant, 0, false, run_id, true, entity, from_state, to_state,
						 reason_code, orch_event_context()->actor, 0, NULL, note ? note : orch_event_context()->note, -1);
}

/*
 * While a run progresses at the end of a statement (orch_runs_flush), the
 * events of its steps, of the step tasks it enqueues and of the run are
 * buffered and written with one INSERT when it is done (orch_events_undefer)
 * instead of one per event.
 */
void
orch_events_defer(void)
{
	orch_xact_lists_use(&ctx_state);
	events_deferred++;
}

/* End a deferral; the outermost one writes what was buffered. */
void
orch_events_undefer(bool flush)
{
	if (events_deferred > 0)
		events_deferred--;
	if (events_deferred == 0 && flush)
		events_flush();
}

/* The event context of the API call in progress (active false: none). */
const OrchEventContext *
orch_event_context(void)
{
	OrchEventContext *c = ctx_current();

	return c ? c : &no_context;
}

/* ----------------------------------------------------------------------
 * Ids of what a task row records itself (orch.history, orch.attempt_history)
 * ---------------------------------------------------------------------- */
static Oid	event_seq = InvalidOid;
static Oid	attempt_seq = InvalidOid;
static Oid	clock_seq = InvalidOid;
static bool seqs_registered = false;

static void
seqs_reset(void)
{
	event_seq = attempt_seq = clock_seq = InvalidOid;
}

/* orch.<name>, a sequence looked up once (again after the schema changes) */
static Oid
seq_oid(Oid *seq, const char *name)
{
	if (!seqs_registered)
	{
		orch_schema_on_reset(seqs_reset);
		seqs_registered = true;
	}
	if (!OidIsValid(*seq))
	{
		*seq = orch_relid(name);
		if (!OidIsValid(*seq))
			elog(ERROR, "orchestrator: sequence orch.%s is missing", name);
	}
	return *seq;
}

/* nextval of orch.<name> */
static int64
next_id(Oid *seq, const char *name)
{
	return nextval_internal(seq_oid(seq, name), false);
}

/*
 * The last value orch.<name> gave out (0 if none yet), the sequence looked
 * up once as next_id's; read as pg_sequence_last_value() reads it (the
 * caller's privilege on the sequence checked there).
 */
static int64
sequence_last(Oid *seq, const char *name)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		d;

	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = ObjectIdGetDatum(seq_oid(seq, name));
	fcinfo->args[0].isnull = false;
	d = pg_sequence_last_value(fcinfo);
	return fcinfo->isnull ? 0 : DatumGetInt64(d);
}

/*
 * The last id orch.events_id_seq gave out (tasks and events are numbered by
 * it; every task id drawn later is higher): 0 if none yet, or if an id
 * drawn later may be lower than it (the sequence altered to count down, to
 * cycle, or to hand out ids from a per-session cache, drawn from it
 * earlier), so that orch.metrics_fold reads every task row then.
 */
int64
orch_last_task_id(void)
{
	Oid			seq = seq_oid(&event_seq, "events_id_seq");
	HeapTuple	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seq));
	bool		ascends = false;

	if (HeapTupleIsValid(tup))
	{
		Form_pg_sequence s = (Form_pg_sequence) GETSTRUCT(tup);

		ascends = s->seqincrement > 0 && s->seqcache == 1 && !s->seqcycle;
		ReleaseSysCache(tup);
	}
	return ascends ? sequence_last(&event_seq, "events_id_seq") : 0;
}

/* how far a completion's stamp may follow orch.metrics_clock past the clock */
#define CLOCK_LEAD ((TimestampTz) 60 * USECS_PER_SEC)
/* orch.metrics_clock after a completion found the clock set back further */
#define CLOCK_RESET ((TimestampTz) 1)

/* The last moment orch.metrics_mark() published (0 if none yet) */
static TimestampTz
clock_published(void)
{
	return (TimestampTz) sequence_last(&clock_seq, "metrics_clock");
}

/* now reads further before the published moment than a stamp may follow */
static bool
clock_set_back(TimestampTz published, TimestampTz now)
{
	return published > now + CLOCK_LEAD;
}

/*
 * The moment a completion the task row records is stamped with: the clock,
 * or the last moment orch.metrics_mark() published (orch.metrics_clock) if
 * the clock reads earlier (it was set back) by at most CLOCK_LEAD.
 * orch.metrics_fold finds the completions it has not counted by
 * finished_at from the moment published before the transaction ids it has
 * not counted were assigned; the transaction's id is assigned before the
 * published moment is read (the completion's UPDATE locked the row), so
 * that holds whatever the clock does.  It is read once per transaction: a
 * moment published later belongs to a mark taken after the transaction's
 * id was assigned, which does not count on its completions being stamped
 * after it.  Set back by more (a clock that ran
 * ahead, corrected), the clock stamps the completion and orch.metrics_clock
 * is reset to CLOCK_RESET, under the lock orch_metrics_clock_publish takes:
 * the next fold sees it, reads every finished row once and starts its marks
 * afresh.
 */
TimestampTz
orch_metrics_clock(void)
{
	static LocalTransactionId read_lxid = InvalidLocalTransactionId;
	static TimestampTz published = 0;
	TimestampTz now;
	Oid			seq;

	(void) GetTopTransactionId();
	now = GetCurrentTimestamp();
	/* read once per transaction, after its id was assigned (see above) */
	if (read_lxid != MyProc->lxid)
	{
		published = clock_published();
		read_lxid = MyProc->lxid;
	}
	if (!clock_set_back(published, now))
		return Max(now, published);
	seq = seq_oid(&clock_seq, "metrics_clock");
	LockRelationOid(seq, ShareUpdateExclusiveLock);
	published = clock_published();
	if (clock_set_back(published, now))
	{
		DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seq), Int64GetDatum(CLOCK_RESET));
		published = CLOCK_RESET;
	}
	UnlockRelationOid(seq, ShareUpdateExclusiveLock);
	return Max(now, published);
}

/*
 * orch.metrics_mark() publishes now in orch.metrics_clock, unless it holds a
 * later moment the clock may still catch up with; serialized on the
 * sequence with the completions that reset it.  Returns whether the clock
 * was set back further than a stamp follows since the last publication (a
 * completion reset it, or now reads that much earlier): the moment is then
 * published afresh, lower.
 */
bool
orch_metrics_clock_publish(TimestampTz now)
{
	Oid			seq = seq_oid(&clock_seq, "metrics_clock");
	TimestampTz published;
	bool		reset;

	LockRelationOid(seq, ShareUpdateExclusiveLock);
	published = clock_published();
	reset = published == CLOCK_RESET || clock_set_back(published, now);
	if (now > CLOCK_RESET && (reset || now > published))
		DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seq), Int64GetDatum((int64) now));
	UnlockRelationOid(seq, ShareUpdateExclusiveLock);
	return reset;
}

/*
 * The next id of orch.events_id_seq: the id of an event that a task row
 * records instead of an orch.events row, in the same order as an event
 * row's.
 */
int64
orch_next_event_id(void)
{
	return next_id(&event_seq, "events_id_seq");
}

/*
 * The next id of orch.attempts_id_seq: the id of the completed attempt a
 * task row records instead of an orch.attempts row.
 */
int64
orch_next_attempt_id(void)
{
	return next_id(&attempt_seq, "attempts_id_seq");
}
