/*
 * enqueue.c
 *	  Producing work: orch_enqueue and orch_enqueue_batch, with argument
 *	  validation, queue defaults and execution-level idempotency keys (same key
 *	  and payload -> same task; another payload -> OR004; no unique violation
 *	  ever reaches a caller).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_enqueue);
PG_FUNCTION_INFO_V1(orch_enqueue_batch);

/* Everything but the payload and key, shared by a batch */
typedef struct EnqueueOpts
{
	char	   *queue;
	bool		has_priority;
	int32		priority;
	bool		has_run_at;
	TimestampTz run_at;
	char	   *tenant;
	char	   *owner;
	char	   *concurrency_key;
	bool		has_max_attempts;
	int32		max_attempts;
	bool		has_max_failures;
	int32		max_failures;
	Jsonb	   *retry_policy;
	bool		has_timeout;
	Interval   *timeout;
	int			on_rate_limit;	/* -1: the queue's on_exceed, 0: record, 1: error */
	char	   *correlation_id; /* NULL: none */
	QueueSettings qs;
} EnqueueOpts;

/*
 * Read the shared arguments.  Both SQL functions have the same argument
 * positions except payload(s) (1) and key(s) (3).
 */
static void
read_opts(FunctionCallInfo fcinfo, EnqueueOpts *o)
{
	memset(o, 0, sizeof(*o));
	orch_require_arg(fcinfo, 0, "queue");
	o->queue = orch_text_arg(fcinfo, 0);
	orch_check_name(o->queue, "queue");
	if (!PG_ARGISNULL(2))
	{
		o->has_priority = true;
		o->priority = PG_GETARG_INT32(2);
	}
	if (!PG_ARGISNULL(4))
	{
		o->has_run_at = true;
		o->run_at = PG_GETARG_TIMESTAMPTZ(4);
		if (TIMESTAMP_NOT_FINITE(o->run_at))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("run_at must be a finite timestamp")));
	}
	/* the caller's tenant: named, or its only binding, or 'default' */
	o->tenant = orch_resolve_tenant(orch_text_arg(fcinfo, 5));
	o->owner = orch_key_arg(fcinfo, 6, "owner");
	o->concurrency_key = orch_key_arg(fcinfo, 7, "concurrency_key");
	o->has_max_attempts = !PG_ARGISNULL(8);
	o->max_attempts = orch_int4_arg(fcinfo, 8, "max_attempts", 1, PG_INT32_MAX, 0);
	o->has_max_failures = !PG_ARGISNULL(9);
	o->max_failures = orch_int4_arg(fcinfo, 9, "max_failures", 1, PG_INT32_MAX, 0);
	if (!PG_ARGISNULL(10))
	{
		QueueSettings scratch;

		o->retry_policy = orch_jsonb_arg(fcinfo, 10, "retry_policy");
		orch_settings_defaults(&scratch);
		orch_settings_apply(&scratch, o->retry_policy, true);	/* validates */
	}
	o->on_rate_limit = -1;
	if (PG_NARGS() > 12 && !PG_ARGISNULL(12))
	{
		char	   *r = orch_text_arg(fcinfo, 12);

		if (strcmp(r, "record") == 0)
			o->on_rate_limit = 0;
		else if (strcmp(r, "error") == 0)
			o->on_rate_limit = 1;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("on_rate_limit must be \"record\" or \"error\"")));
	}
	if (PG_NARGS() > 13 && !PG_ARGISNULL(13))
		o->correlation_id = orch_correlation_arg(fcinfo, 13);
	if (!PG_ARGISNULL(11))
	{
		o->has_timeout = true;
		(void) orch_interval_arg(fcinfo, 11, "timeout", 0);
		o->timeout = PG_GETARG_INTERVAL_P(11);
	}
}

/* Caller is connected to SPI. */
static void
prepare_queue(EnqueueOpts *o)
{
	/* a concurrent orch_drop_queue waits for this enqueue, and vice versa */
	orch_xact_lock_shared("queue-exists", o->queue, NULL);
	if (!orch_load_queue(o->queue, &o->qs, NULL))
		orch_ensure_queue(o->queue);
	if (!o->has_priority)
		o->priority = o->qs.priority;
}


/*
 * Sliding-window rate limit per (queue, owner): at most rate_count admitted
 * enqueues in any window of rate_per ending now.  Returns true when this
 * enqueue is admitted (and counts it); false when it must be recorded as
 * rejected; raises OR006 when the caller asked for an error.
 */
static bool
rate_admit(EnqueueOpts *o)
{
	OrchArgs	a = {0};		/* the same four for the count and the insert */
	bool		isnull;
	int64		used;
	const char *owner = o->owner ? o->owner : "";

	if (o->qs.rate_count <= 0)
		return true;

	/*
	 * The count must see every admission committed before the lock was
	 * granted (a transaction snapshot would not), and the window is measured
	 * on the clock, not from the start of a long transaction.
	 */
	orch_require_read_committed();
	orch_xact_lock("rate", o->queue, psprintf("%s\x1f%s", o->tenant, owner));
	orch_arg_text(&a, o->queue);
	orch_arg_text(&a, owner);
	orch_arg_interval(&a, o->qs.rate_per);
	orch_arg_text(&a, o->tenant);
	orch_args_sql(&a, "SELECT count(*) FROM orch.rate_window"
				  " WHERE queue = $1 AND owner = $2 AND tenant_id = $4"
				  "   AND at > clock_timestamp() - $3",
				  false, 1, SPI_OK_SELECT);
	used = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_freetuptable(SPI_tuptable);
	if (used >= o->qs.rate_count)
	{
		bool		raise = o->on_rate_limit == 1 || (o->on_rate_limit < 0 && o->qs.rate_error);

		if (raise)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_ADMISSION_REJECTED),
					 errmsg("rate limit of queue \"%s\" exceeded for owner \"%s\"", o->queue, owner),
					 errdetail("At most %d enqueues are admitted per " INT64_FORMAT " seconds.",
							   o->qs.rate_count, o->qs.rate_per / USECS_PER_SEC),
					 errhint("Retry later; nothing was recorded.")));
		return false;
	}
	orch_args_sql(&a, "INSERT INTO orch.rate_window (queue, owner, at, expires_at, tenant_id)"
				  " VALUES ($1, $2, clock_timestamp(), clock_timestamp() + $3, $4)",
				  false, 0, SPI_OK_INSERT);
	return true;
}


/*
 * The row every task of an enqueue is inserted with (task_store.c): the
 * caller's options, the queue's settings for what it leaves out (priority,
 * the timeout when the task has none).  key: the task's idempotency key;
 * id: its id (0: the sequence's next); admitted: false for a rejection by
 * the rate limit, recorded failed.
 */
static void
task_row(EnqueueOpts *o, OrchTaskRow *t, const char *key, int64 id, bool admitted)
{
	memset(t, 0, sizeof(*t));
	t->id = id;
	t->tenant = o->tenant;
	t->queue = o->queue;
	t->state = admitted ? "queued" : "failed";
	t->reason_code = admitted ? "enqueued" : "rate_limited";
	t->priority = o->priority;
	t->has_run_at = o->has_run_at;
	t->run_at = o->run_at;
	t->has_max_attempts = o->has_max_attempts;
	t->max_attempts = o->max_attempts;
	t->has_max_failures = o->has_max_failures;
	t->max_failures = o->max_failures;
	t->retry_policy = o->retry_policy;
	if (o->has_timeout)
		t->timeout = o->timeout;
	else if (o->qs.timeout > 0)
		t->timeout = orch_usecs_interval(o->qs.timeout);
	t->idempotency_key = key;
	t->owner = o->owner;
	t->concurrency_key = o->concurrency_key;
	t->correlation_id = o->correlation_id;
}

/*
 * One task: written at once (append.c) when it has no idempotency key (its
 * id was drawn with the key's row) and no concurrency key (the admission
 * gate runs SQL), else by the INSERT.
 */
static int64
insert_task(EnqueueOpts *o, Jsonb *payload, const char *key, int64 id)
{
	OrchTaskRow t;
	Datum		one = PointerGetDatum(payload);

	task_row(o, &t, key, id, rate_admit(o));
	if (key == NULL && id == 0 && t.concurrency_key == NULL &&
		orch_tasks_write(&t, PointerGetDatum(construct_array(&one, 1, JSONBOID, -1, false, TYPALIGN_INT)),
						 1, &id, orch_task_inserting))
	{
		orch_tasks_inserted();
		return id;
	}
	return orch_task_insert(&t, payload, NULL);
}


/*
 * Enqueue under an idempotency key.  INSERT ... ON CONFLICT DO NOTHING waits
 * for a concurrent holder of the key to commit or abort, so concurrent calls
 * create one task and no caller sees a unique violation.
 */
static int64
enqueue_with_key(EnqueueOpts *o, Jsonb *payload, const char *key)
{
	OrchArgs	k = {0};		/* $1 the tenant, $2 the key */
	Datum		ttl = IntervalPGetDatum(orch_usecs_interval(o->qs.idempotency_ttl));
	bool		isnull;

	orch_arg_text(&k, o->tenant);
	orch_arg_text(&k, key);

	for (int tries = 0; tries < 5; tries++)
	{
		int64		id;
		OrchArgs	ins = k;	/* and the task id, the time to live */
		HeapTuple	tup;
		TupleDesc	td;
		bool		expired;
		char	   *queue;
		Jsonb	   *existing;

		orch_exec(orch_plan("SELECT nextval('orch.events_id_seq')", 0, NULL), NULL, NULL, false, 1, SPI_OK_SELECT);
		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		SPI_freetuptable(SPI_tuptable);
		orch_arg_int8(&ins, id);
		orch_arg(&ins, INTERVALOID, ttl, false);
		if (orch_args_sql(&ins, "INSERT INTO orch.idempotency_keys (tenant_id, key, task_id, expires_at)"
						  " VALUES ($1, $2, $3, now() + $4) ON CONFLICT DO NOTHING",
						  false, 0, SPI_OK_INSERT) == 1)
			return insert_task(o, payload, key, id);

		/* The key exists: same request, conflict, or expired */
		if (orch_args_sql(&k, "SELECT k.task_id, k.expires_at <= now() OR t.id IS NULL,"
						  " t.queue, t.payload"
						  " FROM orch.idempotency_keys k"
						  " LEFT JOIN orch.tasks t ON t.id = k.task_id AND t.tenant_id = k.tenant_id"
						  " WHERE k.tenant_id = $1 AND k.key = $2 FOR UPDATE OF k",
						  false, 1, SPI_OK_SELECT) == 0)
			continue;			/* deleted meanwhile: try again */
		tup = SPI_tuptable->vals[0];
		td = SPI_tuptable->tupdesc;
		id = DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull));
		expired = DatumGetBool(SPI_getbinval(tup, td, 2, &isnull));
		if (expired)
		{
			orch_args_sql(&k, "DELETE FROM orch.idempotency_keys WHERE tenant_id = $1 AND key = $2",
						  false, 0, SPI_OK_DELETE);
			continue;
		}
		queue = SPI_getvalue(tup, td, 3);
		existing = DatumGetJsonbP(SPI_getbinval(tup, td, 4, &isnull));
		if (strcmp(queue, o->queue) != 0 ||
			!DatumGetBool(DirectFunctionCall2(jsonb_eq, JsonbPGetDatum(existing),
											  JsonbPGetDatum(payload))))
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_IDEMPOTENCY_CONFLICT),
					 errmsg("idempotency key \"%s\" was already used with a different request", key),
					 errdetail("Task " INT64_FORMAT " holds this key for queue \"%s\" with another payload.",
							   id, queue),
					 errhint("Use a new key for a new request, or resend the original payload to get the original task.")));
		return id;
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not settle idempotency key \"%s\" under concurrent use", key),
			 errhint("Retry the transaction.")));
	return 0;
}

static int64
enqueue_one(EnqueueOpts *o, Jsonb *payload, const char *key)
{
	int64		id;

	orch_check_payload_size(payload, "payload");
	if (key != NULL)
	{
		if (key[0] == '\0' || strlen(key) > 512)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("idempotency key must have 1 to 512 characters")));
		id = enqueue_with_key(o, payload, key);
	}
	else
		id = insert_task(o, payload, NULL, 0);
	/* on Citus: the task's calls by id go straight to its shard */
	orch_route_note(ORCH_ROUTE_TASK, id, o->tenant);
	return id;
}

/*
 * Enqueue from C (commands): a task with defaults in a queue.  Caller is
 * connected to SPI.
 */
int64
orch_enqueue_internal(const char *queue, Jsonb *payload, const char *tenant,
					  const char *owner)
{
	EnqueueOpts o;

	memset(&o, 0, sizeof(o));
	o.queue = pstrdup(queue);
	orch_check_name(o.queue, "queue");
	o.tenant = pstrdup(tenant ? tenant : ORCH_DEFAULT_TENANT);
	o.owner = owner ? pstrdup(owner) : NULL;
	o.on_rate_limit = 0;
	orch_xact_lock_shared("queue-exists", o.queue, NULL);
	if (!orch_load_queue(o.queue, &o.qs, NULL))
		orch_ensure_queue(o.queue);
	o.priority = o.qs.priority;
	orch_check_payload_size(payload, "payload");
	return insert_task(&o, payload, NULL, 0);
}

static void
maybe_notify(EnqueueOpts *o)
{
	if (orch_notify)
		Async_Notify("orch_enqueue", o->queue);
}

Datum
orch_enqueue(PG_FUNCTION_ARGS)
{
	int			ev;
	EnqueueOpts o;
	Jsonb	   *payload;
	char	   *key;
	int64		id;

	read_opts(fcinfo, &o);
	orch_require_arg(fcinfo, 1, "payload");
	payload = PG_GETARG_JSONB_P(1);
	key = orch_text_arg(fcinfo, 3);

	SPI_connect();
	ev = orch_set_event_context(NULL, NULL);
	orch_event_context_enqueue_in_task();
	prepare_queue(&o);
	id = enqueue_one(&o, payload, key);
	orch_clear_event_context(ev);
	SPI_finish();
	maybe_notify(&o);
	PG_RETURN_INT64(id);
}


/*
 * A batch row by row (keys, or a rate limit to count): each row's memory
 * freed before the next.
 */
static void
enqueue_rows(EnqueueOpts *o, Datum *payloads, Datum *keys, bool *key_nulls, int np, int64 *ids)
{
	MemoryContext rowcxt = AllocSetContextCreate(CurrentMemoryContext, "orch_enqueue_batch row",
												 ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(rowcxt);

	for (int i = 0; i < np; i++)
	{
		ids[i] = enqueue_one(o, DatumGetJsonbP(payloads[i]),
							 (keys == NULL || key_nulls[i]) ? NULL : TextDatumGetCString(keys[i]));
		MemoryContextReset(rowcxt);
	}
	MemoryContextSwitchTo(old);
	MemoryContextDelete(rowcxt);
}

/*
 * A batch without keys: written at once when the table allows it, the row
 * trigger's work done by lifecycle.c on each row and the statement-end
 * trigger's after the last, as for an INSERT; else one set-based INSERT.
 * Keyed tasks always take the INSERT: their admission gate reads the rows
 * the statement inserted before them.  Ids follow the payloads' order.
 */
static void
insert_batch(EnqueueOpts *o, ArrayType *payloads, int np, int64 *ids)
{
	OrchTaskRow t;

	task_row(o, &t, NULL, 0, true);
	if (t.concurrency_key == NULL &&
		orch_tasks_write(&t, PointerGetDatum(payloads), np, ids, orch_task_inserting))
		orch_tasks_inserted();
	else
		orch_tasks_insert(&t, PointerGetDatum(payloads), (Datum) 0, np, ids);
	for (int i = 0; i < np && orch_citus(); i++)
		orch_route_note(ORCH_ROUTE_TASK, ids[i], o->tenant);
}

Datum
orch_enqueue_batch(PG_FUNCTION_ARGS)
{
	int			ev;
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	EnqueueOpts o;
	ArrayType  *payloads;
	Datum	   *pelems;
	bool	   *pnulls;
	int			np;
	Datum	   *kelems = NULL;
	bool	   *knulls = NULL;
	int			nk = 0;
	int64	   *ids;

	read_opts(fcinfo, &o);
	orch_require_arg(fcinfo, 1, "payloads");
	payloads = PG_GETARG_ARRAYTYPE_P(1);
	if (ARR_NDIM(payloads) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("payloads must be a one-dimensional array")));
	orch_check_batch_size(ArrayGetNItems(ARR_NDIM(payloads), ARR_DIMS(payloads)), "tasks");
	deconstruct_array(payloads, JSONBOID, -1, false, TYPALIGN_INT, &pelems, &pnulls, &np);
	for (int i = 0; i < np; i++)
	{
		if (pnulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("payloads must not contain nulls"),
					 errdetail("Element %d is null.", i + 1)));
		orch_check_payload_size(DatumGetJsonbP(pelems[i]), "payload");
	}
	if (!PG_ARGISNULL(3))
	{
		deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), TEXTOID, -1, false, TYPALIGN_INT,
						  &kelems, &knulls, &nk);
		if (nk != np)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("idempotency_keys must have one element per payload"),
					 errdetail("There are %d payloads and %d keys.", np, nk)));
	}

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (np == 0)
		return (Datum) 0;
	ids = palloc(sizeof(int64) * np);

	SPI_connect();
	ev = orch_set_event_context(NULL, NULL);
	orch_event_context_enqueue_in_task();
	prepare_queue(&o);
	if (kelems != NULL || o.qs.rate_count > 0)
		enqueue_rows(&o, pelems, kelems, knulls, np, ids);
	else
		insert_batch(&o, payloads, np, ids);
	orch_clear_event_context(ev);
	SPI_finish();

	for (int i = 0; i < np; i++)
	{
		Datum		d = Int64GetDatum(ids[i]);
		bool		isnull = false;

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &d, &isnull);
	}
	maybe_notify(&o);
	return (Datum) 0;
}
