/*
 * runs.c
 *	  The top of workflows, where a run is entered: orch_start (pins a
 *	  published definition version), orch_run_status, the flush at the end
 *	  of a statement that advances the runs whose step tasks finished
 *	  (under each run's row lock; run_state.c keeps the notes), and
 *	  orch_maintain's part
 *	  (deadlines, timers, expiries).  The control calls (approvals,
 *	  pause/resume, cancel, retry) are in run_control.c; progression in
 *	  run_steps.c; the run's state in run_state.c.
 *
 *	  Lock order: a step task's row, then its run's family (a parent and
 *	  its sub-workflows: an advisory lock, run_state.c), then its run's row.
 *	  Calls that start from the run (cancel, deadline) lock the run's open
 *	  tasks first, then the run; progression never waits for another
 *	  task's lock (SKIP LOCKED).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "common/hashfn.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "run_internal.h"

PG_FUNCTION_INFO_V1(orch_start);
PG_FUNCTION_INFO_V1(orch_start_subflow);
PG_FUNCTION_INFO_V1(orch_run_status);

/* At statement end (statement_end.c): progress the noted runs. */
void
orch_runs_flush(void)
{
	orch_run_flush_notes();
}

/*
 * orch_maintain's part: deadlines, due timers and approval expiries, and
 * step tasks left open in finished runs.  Returns the number of runs moved.
 */
int
orch_runs_maintain(int limit)
{
	int			ev;
	OrchArgs	a = {0};
	int			n;
	int64	   *ids;
	char	  **tenants;
	int			moved = 0;
	bool		isnull;

	orch_arg_int4(&a, limit);
	/* all tenants; on Citus the tenant orch_maintain is at (distributed.c) */
	orch_arg_scope_tenants(&a);
	/*
	 * Read from the due side only (run_steps_timer_idx, runs_open_idx), so
	 * that a pass costs what is due, not what is open.
	 */
	n = (int) orch_args_sql(&a, "SELECT r.id, r.tenant_id FROM orch.runs r"
			" WHERE r.state IN ('running', 'waiting_approval', 'paused')"
			"   AND " ORCH_TENANT_IN("r.tenant_id", "$2")
			"   AND (r.id, r.tenant_id) IN ("
			"     SELECT s.run_id, s.tenant_id FROM orch.run_steps s"
			"      WHERE least(s.wake_at, s.cap_at) <= statement_timestamp() AND (s.wake_at IS NOT NULL OR s.cap_at IS NOT NULL)"
			"        AND " ORCH_TENANT_IN("s.tenant_id", "$2")
			"        AND ((s.state = 'waiting' AND s.wake_at <= clock_timestamp())"
			"          OR (s.state IN ('running', 'retrying', 'waiting', 'awaiting_approval') AND s.cap_at <= clock_timestamp()))"
			"     UNION ALL"
			"     SELECT d.id, d.tenant_id FROM orch.runs d"
			"      WHERE d.deadline_at <= now() AND d.state IN ('running', 'waiting_approval', 'paused')"
			"        AND d.phase = 'forward' AND " ORCH_TENANT_IN("d.tenant_id", "$2") ")"
			" ORDER BY r.id LIMIT $1", false, 0, SPI_OK_SELECT);
	ids = palloc(sizeof(int64) * (n + 1));
	tenants = palloc(sizeof(char *) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		tenants[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	for (int i = 0; i < n; i++)
	{
		OrchArgs	run = {0};
		RunRow		r;

		/*
		 * The run's open tasks first, then the run (the lock order); its
		 * approval tasks after the run (run_approvals.c)
		 */
		orch_arg_int8(&run, ids[i]);
		orch_arg_text(&run, tenants[i]);
		/* a family another transaction acts on is left to it too (its lock comes before rows) */
		if (!orch_run_family_try_lock(ids[i], tenants[i]))
			continue;
		orch_args_sql(&run, "SELECT 1 FROM orch.tasks WHERE run_id = $1 AND tenant_id = $2"
				" AND state NOT IN ('completed', 'failed', 'cancelled')"
				" AND step_key NOT LIKE '%" ORCH_APPROVAL_SUFFIX "' ORDER BY id FOR UPDATE SKIP LOCKED", false, 0, SPI_OK_SELECT);
		/* a run a worker is progressing is left to it (and the next pass) */
		orch_args_sql(&run, "SELECT 1 FROM orch.runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE SKIP LOCKED", false, 0, SPI_OK_SELECT);
		if (SPI_processed == 0 || !orch_lock_run(ids[i], tenants[i], &r))
			continue;
		ev = orch_set_event_context("orchestrator", NULL);
		{
			int64		prev = orch_run_busy_begin(r.id);

			orch_run_busy_on_shard_begin(&r);
			orch_run_progress(&r);
			orch_run_busy_end(prev);
		}
		orch_clear_event_context(ev);
		moved++;
	}
	/* the parents of the sub-workflows that ended */
	orch_run_flush_notes();
	/*
	 * Step tasks still open in finished runs (a claim raced the run's end);
	 * never an approval task: the run's end waits for it (run_approvals.c).
	 */
	return moved +
		orch_run_cancel_tasks("SELECT t2.id FROM orch.tasks t2 JOIN orch.runs r"
						 "     ON r.id = t2.run_id AND r.tenant_id = t2.tenant_id"
						 "   WHERE t2.run_id IS NOT NULL AND t2.state NOT IN ('completed', 'failed', 'cancelled')"
						 "     AND t2.step_key NOT LIKE '%" ORCH_APPROVAL_SUFFIX "'"
						 "     AND (r.state IN ('succeeded', 'failed', 'canceled')"
						 "       OR (r.phase = 'compensating' AND t2.step_key NOT LIKE '%:compensate'))"
						 "     AND ($2::text[] IS NULL OR (t2.tenant_id = ANY ($2) AND r.tenant_id = ANY ($2)))"
						 "   ORDER BY t2.id LIMIT $1 FOR UPDATE OF t2 SKIP LOCKED",
						 &a, NULL, "run_finished");
}

/* ----------------------------------------------------------------------
 * orch_start(name, input, version, idempotency_key, tenant, pins) -> run id
 * ---------------------------------------------------------------------- */
/*
 * The run's input against the definition's input_schema (json_schema.c):
 * 22023 naming the path of the first mismatch.  Without a "type" of its
 * own, input_schema describes an object (as before 0.8.0).
 */
static void
check_input(Jsonb *spec, Jsonb *input)
{
	JsonbValue *sv = getKeyJsonValueFromContainer(&spec->root, "input_schema", 12, NULL);
	Jsonb	   *schema;
	JsonSchemaProblem p;

	if (sv == NULL)
		return;
	schema = JsonbValueToJsonb(sv);
	if (getKeyJsonValueFromContainer(&schema->root, "type", 4, NULL) == NULL &&
		(JB_ROOT_IS_SCALAR(input) || !JB_ROOT_IS_OBJECT(input)))
	{
		p.path = "$.input";
		p.message = "the input must be a JSON object";
	}
	else if (orch_json_schema_validate(schema, input, "$.input", &p))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("input does not match the workflow's input_schema"),
			 errdetail("At %s: %s.", p.path, p.message)));
}

/* The published version of a definition a run starts from */
typedef struct PublishedDef
{
	int32		version;
	Jsonb	   *spec;
	char	   *hash;
	char	   *publisher;
	Datum		deadline;		/* an Interval, from its policies */
	bool		no_deadline;
} PublishedDef;

/*
 * The published version to start: the one named (version_null false), else
 * the latest.  OR005 when there is none.
 */
static void
load_published(const char *name, Datum version_arg, bool version_null, bool deprecated_too, PublishedDef *d)
{
	OrchArgs	a = {0};
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	td;

	orch_arg_text(&a, name);
	orch_arg(&a, INT4OID, version_arg, version_null);
	orch_arg_bool(&a, deprecated_too);
	if (orch_args_sql(&a, "SELECT version, spec, content_hash, published_by,"
					  "  " RUN_SPEC_INTERVAL("spec -> 'policies'", "deadline")
					  " FROM orch.definitions"
					  " WHERE name = $1 AND tenant_id = 'default'"
					  "   AND (status = 'published' OR ($3 AND $2::int IS NOT NULL AND status = 'deprecated'))"
					  "   AND ($2::int IS NULL OR version = $2)"
					  " ORDER BY version DESC LIMIT 1",
					  false, 1, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 version_null
				 ? errmsg("workflow \"%s\" has no published version", name)
				 : errmsg("workflow \"%s\" has no published version %d", name, DatumGetInt32(version_arg)),
				 errhint("Publish a version with orch_publish; deprecated versions cannot start runs.")));
	tup = SPI_tuptable->vals[0];
	td = SPI_tuptable->tupdesc;
	d->version = DatumGetInt32(SPI_getbinval(tup, td, 1, &isnull));
	d->spec = DatumGetJsonbPCopy(SPI_getbinval(tup, td, 2, &isnull));
	d->hash = SPI_getvalue(tup, td, 3);
	d->publisher = SPI_getvalue(tup, td, 4);
	d->deadline = SPI_getbinval(tup, td, 5, &d->no_deadline);
	if (!d->no_deadline)
	{
		Interval   *iv = palloc(sizeof(Interval));

		*iv = *DatumGetIntervalP(d->deadline);
		d->deadline = IntervalPGetDatum(iv);
	}
}

/*
 * Insert the run (its id in SPI_tuptable); false when its idempotency key
 * names an existing run.  One run per key: the key's row (orch.run_keys:
 * runs are partitioned, so no index of theirs is unique across partitions)
 * takes the run's id first; a concurrent start with the key waits here,
 * then sees it.  (A 0.7.0 schema keeps the key unique in orch.runs itself.)
 * a: the run's parameters $1 to $12 (orch_start).
 */
static bool
insert_run(const char *key, bool keys_table, const OrchArgs *a)
{
	OrchArgs	run = *a;
	Datum		id = (Datum) 0;
	bool		no_id = true;
	bool		isnull;

	if (key != NULL && keys_table)
	{
		OrchArgs	k = *a;

		k.n = 7;				/* $1 to $7 */
		if (orch_args_sql(&k, "INSERT INTO orch.run_keys (tenant_id, idempotency_key, run_id)"
						  " VALUES ($1, $7, nextval('orch.runs_id_seq')) ON CONFLICT DO NOTHING RETURNING run_id",
						  false, 0, SPI_OK_INSERT_RETURNING) == 0)
			return false;
		id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		no_id = false;
	}
	/* $13: the id the key took (NULL: none) */
	if (keys_table)
		orch_arg(&run, INT8OID, id, no_id);
	return orch_args_sql(&run, keys_table
			 ? "INSERT INTO orch.runs (id, tenant_id, definition, version, content_hash, state, input, pins,"
			 "   idempotency_key, created_by, deadline_at, reason_code, correlation_id, probe_pins)"
			 " VALUES (coalesce($13, nextval('orch.runs_id_seq')), $1, $2, $3, $4, 'running', $5,"
			 "   jsonb_build_object('definition', $2, 'version', $3, 'content_hash', $4) || coalesce($6, '{}'),"
			 "   $7, $8, now() + $12, 'started', $10, $11)"
			 " RETURNING id"
			 : "INSERT INTO orch.runs (tenant_id, definition, version, content_hash, state, input, pins,"
			 "   idempotency_key, created_by, deadline_at, reason_code, correlation_id, probe_pins)"
			 " VALUES ($1, $2, $3, $4, 'running', $5,"
			 "   jsonb_build_object('definition', $2, 'version', $3, 'content_hash', $4) || coalesce($6, '{}'),"
			 "   $7, $8, now() + $12, 'started', $10, $11)"
			 " ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
			 " RETURNING id", false, 0, SPI_OK_INSERT_RETURNING) > 0;
}

/*
 * The run an idempotency key names, when it was started with the same
 * request (OR004 otherwise); a as for insert_run.
 */
static int64
replayed_run(const char *key, bool keys_table, const OrchArgs *a)
{
	OrchArgs	k = *a;
	bool		isnull;
	int64		existing;

	k.n = 9;					/* $1 to $9 */
	if (orch_args_sql(&k, keys_table
				 ? "SELECT id, definition = $2 AND ($9::int IS NULL OR version = $3) AND input = $5"
				 " AND (pins - 'definition' - 'version' - 'content_hash') = coalesce($6, '{}')"
				 " FROM orch.runs WHERE tenant_id = $1"
				 "   AND id = (SELECT k.run_id FROM orch.run_keys k WHERE k.tenant_id = $1 AND k.idempotency_key = $7)"
				 : "SELECT id, definition = $2 AND ($9::int IS NULL OR version = $3) AND input = $5"
				 " AND (pins - 'definition' - 'version' - 'content_hash') = coalesce($6, '{}')"
				 " FROM orch.runs WHERE tenant_id = $1 AND idempotency_key = $7",
				 false, 0, SPI_OK_SELECT) == 0)
		elog(ERROR, "orchestrator: run with idempotency key \"%s\" vanished", key);
	existing = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_IDEMPOTENCY_CONFLICT),
				 errmsg("idempotency key \"%s\" was already used to start another run", key),
				 errdetail("Run " INT64_FORMAT " was started with this key for another workflow or input.",
						   existing)));
	return existing;
}

/*
 * The drift probes pinned, as the publisher, for a new run only (a replay
 * of its key returns without running them); one that fails refuses the
 * start (38000) and the error takes the run back.
 */
static void
pin_run_probes(int64 run_id, const char *tenant, PublishedDef *d, const char *name)
{
	OrchArgs	a = {0};
	Jsonb	   *probe_pins = orch_probes_pin(d->spec, d->publisher, name);

	if (probe_pins == NULL)
		return;
	orch_arg_int8(&a, run_id);
	orch_arg_text(&a, tenant);
	orch_arg_jsonb(&a, probe_pins);
	orch_args_sql(&a, "UPDATE orch.runs SET probe_pins = $3 WHERE id = $1 AND tenant_id = $2",
				  false, 0, SPI_OK_UPDATE);
}

/*
 * A new run's place in its family: the top run's id, and a sub-workflow's
 * parent, the parent's step and map item (index; -1: none).
 */
static void
set_family(RunRow *r, int index)
{
	OrchArgs	a = {0};

	orch_arg_int8(&a, r->id);
	orch_arg_int8(&a, r->root_run_id);
	orch_arg(&a, INT8OID, Int64GetDatum(r->parent_run_id), r->parent_run_id == 0);
	orch_arg_text(&a, r->parent_step);
	orch_arg(&a, INT4OID, Int32GetDatum(index), index < 0);
	orch_args_sql(&a, "UPDATE orch.runs SET root_run_id = $2, parent_run_id = $3, parent_step = $4,"
				  " parent_index = $5 WHERE id = $1", false, 0, SPI_OK_UPDATE);
}

/* What a run starts from: orch_start's arguments, or a subflow step's */
typedef struct StartRequest
{
	const char *name;
	Datum		version;
	bool		version_null;
	Jsonb	   *input;
	const char *key;
	const char *tenant;
	Jsonb	   *pins;
	const char *corr;
	/* a sub-workflow: its parent, the parent's step and map item, its family */
	int64		parent;
	const char *parent_step;
	int			parent_index;	/* -1: none */
	int64		root;
} StartRequest;

/* Does a definition have subflow steps (its runs head a family)? */
static bool
has_subflow_steps(Jsonb *spec)
{
	JsonbValue *steps = getKeyJsonValueFromContainer(&spec->root, "steps", 5, NULL);
	int			n;

	if (steps == NULL || steps->type != jbvBinary || !JsonContainerIsArray(steps->val.binary.data))
		return false;
	n = JsonContainerSize(steps->val.binary.data);
	for (int i = 0; i < n; i++)
	{
		JsonbValue *step = getIthJsonbValueFromContainer(steps->val.binary.data, i);
		JsonbValue *type;

		if (step == NULL || step->type != jbvBinary || !JsonContainerIsObject(step->val.binary.data))
			continue;
		type = getKeyJsonValueFromContainer(step->val.binary.data, "type", 4, NULL);
		if (type != NULL && type->type == jbvString && type->val.string.len == 7 &&
			memcmp(type->val.string.val, "subflow", 7) == 0)
			return true;
	}
	return false;
}

/* Start a run (connected to SPI): its id, or an existing one its key names */
static int64
start_run(StartRequest *q)
{
	int			ev;
	OrchArgs	a = {0};
	bool		keys_table = orch_schema_run_keys();
	PublishedDef def;
	bool		isnull;
	bool		family;
	RunRow		r;

	/* a sub-workflow starts its pinned version, deprecated since or not */
	load_published(q->name, q->version, q->version_null, q->parent != 0, &def);
	check_input(def.spec, q->input);
	family = orch_schema_subflows() && has_subflow_steps(def.spec);
	if (family && orch_citus())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("workflow \"%s\" has subflow steps; sub-workflows are not available on Citus", q->name)));

	orch_arg_text(&a, q->tenant);
	orch_arg_text(&a, q->name);
	orch_arg_int4(&a, def.version);
	orch_arg_text(&a, def.hash);
	orch_arg_jsonb(&a, q->input);
	orch_arg_jsonb(&a, q->pins);
	orch_arg_text(&a, q->key);
	orch_arg_text(&a, orch_current_actor());
	/* a replay that names a version must name the run's */
	orch_arg(&a, INT4OID, Int32GetDatum(def.version), q->version_null);
	orch_arg_text(&a, q->corr);
	orch_arg_jsonb(&a, NULL);	/* probe_pins: below, once the run is new */
	orch_arg(&a, INTERVALOID, def.deadline, def.no_deadline);
	ev = orch_set_event_context(NULL, NULL);

	if (!insert_run(q->key, keys_table, &a))
	{
		/* the key names an existing run: the same request returns it */
		int64		existing = replayed_run(q->key, keys_table, &a);

		orch_clear_event_context(ev);
		return existing;
	}
	r.id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	orch_route_note(ORCH_ROUTE_RUN, r.id, q->tenant);	/* on Citus: its calls by id go to its shard */
	r.parent_run_id = q->parent;
	r.parent_step = (char *) q->parent_step;
	r.root_run_id = q->parent != 0 ? q->root : family ? r.id : 0;
	if (r.root_run_id != 0)
		set_family(&r, q->parent_index);
	pin_run_probes(r.id, q->tenant, &def, q->name);
	orch_run_ensure_step_queues(def.spec);
	r.tenant = (char *) q->tenant;
	r.state = RS_RUNNING;
	r.phase = "forward";
	r.reason = NULL;
	r.past_deadline = false;
	r.signals_due = false;
	orch_run_create_steps(&r);
	orch_run_advance(&r);
	orch_clear_event_context(ev);
	return r.id;
}

Datum
orch_start(PG_FUNCTION_ARGS)
{
	StartRequest q = {0};
	int64		id;
	MemoryContext outer = CurrentMemoryContext;

	orch_require_arg(fcinfo, 0, "name");
	orch_require_arg(fcinfo, 1, "input");
	if (orch_citus() && !orch_schema_distributed_fold())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("workflow runs on Citus need the 0.8.0 schema"),
				 errdetail("This installation's tables were distributed at an earlier version."),
				 errhint("Update it with docs/citus-upgrade-0.7.0-0.8.0.sql (docs/citus.md, Upgrading a distributed installation).")));
	q.name = orch_text_arg(fcinfo, 0);
	q.input = orch_jsonb_arg(fcinfo, 1, "input");
	q.version = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	q.version_null = PG_ARGISNULL(2);
	q.key = orch_text_arg(fcinfo, 3);
	q.pins = orch_jsonb_arg(fcinfo, 5, "pins");
	q.corr = PG_NARGS() > 6 ? orch_correlation_arg(fcinfo, 6) : NULL;
	q.parent_index = -1;
	if (q.key != NULL && (q.key[0] == '\0' || strlen(q.key) > 512))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idempotency key must have 1 to 512 characters")));
	if (q.pins != NULL && !JB_ROOT_IS_OBJECT(q.pins))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("pins must be a JSON object")));
	q.tenant = orch_resolve_tenant(orch_text_arg(fcinfo, 4));

	SPI_connect();
	id = start_run(&q);
	orch_run_flush_notes();
	SPI_finish();
	MemoryContextSwitchTo(outer);
	PG_RETURN_INT64(id);
}

/* ----------------------------------------------------------------------
 * orch.start_subflow(parent_run_id, parent_step, parent_index, name,
 * version, input) -> run id: a subflow step's child (run_subflows.c), in
 * its parent's tenant and family, with the parent's correlation id
 * ---------------------------------------------------------------------- */
Datum
orch_start_subflow(PG_FUNCTION_ARGS)
{
	StartRequest q = {0};
	OrchArgs	a = {0};
	bool		isnull;
	int64		id;
	MemoryContext outer = CurrentMemoryContext;

	if (!orch_run_starting_child())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("orch.start_subflow is called by a run's subflow step only")));
	q.parent = PG_GETARG_INT64(0);
	q.parent_step = text_to_cstring(PG_GETARG_TEXT_PP(1));
	q.parent_index = PG_ARGISNULL(2) ? -1 : PG_GETARG_INT32(2);
	q.name = text_to_cstring(PG_GETARG_TEXT_PP(3));
	q.version = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
	q.version_null = PG_ARGISNULL(4);
	q.input = PG_ARGISNULL(5) ? NULL : PG_GETARG_JSONB_P(5);
	if (q.input == NULL)
		q.input = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	orch_check_payload_size(q.input, "input");
	SPI_connect();
	orch_arg_int8(&a, q.parent);
	orch_args_sql(&a, "SELECT tenant_id, coalesce(root_run_id, id), correlation_id FROM orch.runs WHERE id = $1",
				  false, 1, SPI_OK_SELECT);
	if (SPI_processed != 1)
		elog(ERROR, "orchestrator: the parent run " INT64_FORMAT " of a sub-workflow vanished", q.parent);
	q.tenant = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	q.root = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	q.corr = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	id = start_run(&q);
	SPI_finish();
	MemoryContextSwitchTo(outer);
	PG_RETURN_INT64(id);
}

/*
 * The run, its steps with their tasks and attempts, its approvals and events
 * ($1 run, $2 the caller's tenants); TASK_EVENTS: where its tasks' events
 * are (orch.history from 0.8.0 on); ATTEMPTS: its attempts (orch.attempt_history).
 */
#define RUN_STATUS_SQL(TASK_EVENTS, ATTEMPTS, SIGNALS, STEP_EXTRA) \
	"SELECT jsonb_build_object(" \
	"  'run', to_jsonb(r) - 'tenant_id' || jsonb_build_object('tenant_id', r.tenant_id)," \
	"  'steps', coalesce((SELECT jsonb_agg(jsonb_build_object('step_id', s.step_id, 'type', s.type," \
	"       'state', s.state, 'output', s.output, 'error', s.error, 'started_at', s.started_at," \
	"       'finished_at', s.finished_at, 'compensation', s.comp_state," \
	"       'tasks', (SELECT coalesce(jsonb_agg(jsonb_build_object('task_id', t.id, 'step_key', t.step_key," \
	"            'state', t.state, 'attempts', t.attempts, 'reason_code', t.reason_code," \
	"            'attempt_history', (SELECT coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt," \
	"                 'worker', a.worker, 'outcome', a.outcome, 'error_class', a.error_class," \
	"                 'error', a.error, 'started_at', a.started_at, 'finished_at', a.finished_at)" \
	"                 ORDER BY a.id), '[]') FROM " ATTEMPTS " a" \
	"                 WHERE a.task_id = t.id AND a.tenant_id = t.tenant_id))" \
	"            ORDER BY t.id), '[]') FROM orch.tasks t WHERE t.run_id = r.id AND t.tenant_id = r.tenant_id" \
	"            AND (t.step_key = s.step_id OR left(t.step_key, length(s.step_id) + 1) = s.step_id || '#'" \
	"                 OR t.step_key = s.step_id || ':compensate'" \
	"                 OR t.step_key = s.step_id || '" ORCH_APPROVAL_SUFFIX "'" \
	"                 OR t.step_key = s.step_id || ':compensate" ORCH_APPROVAL_SUFFIX "')))" \
	/* a wait for a signal: the signal's name */ \
	"     || CASE WHEN s.spec ? 'signal' THEN jsonb_build_object('signal', s.spec -> 'signal') ELSE '{}' END" \
	STEP_EXTRA \
	"     ORDER BY s.ord) FROM orch.run_steps s WHERE s.run_id = r.id AND s.tenant_id = r.tenant_id), '[]')," \
	"  'approvals', coalesce((SELECT jsonb_agg(to_jsonb(p) ORDER BY p.decided_at) FROM orch.approvals p" \
	"       WHERE p.run_id = r.id AND p.tenant_id = r.tenant_id), '[]')," \
	"  'events', coalesce((SELECT jsonb_agg(jsonb_build_object('at', e.at, 'entity', e.entity, 'task_id', e.task_id," \
	"       'from_state', e.from_state, 'to_state', e.to_state, 'reason_code', e.reason_code," \
	"       'actor', e.actor, 'label', e.label, 'note', e.note) ORDER BY e.id)" \
	/* the run's own events (events_run_idx), then its tasks' */ \
	"       FROM (SELECT x.* FROM orch.events x" \
	"              WHERE x.run_id = r.id AND x.tenant_id = r.tenant_id AND x.task_id IS NULL" \
	"             UNION ALL" \
	"             SELECT x.* FROM orch.tasks t JOIN " TASK_EVENTS " x ON x.task_id = t.id" \
	"              WHERE t.run_id = r.id AND t.tenant_id = r.tenant_id" \
	"                AND x.run_id = r.id AND x.tenant_id = r.tenant_id) e), '[]'))" \
	SIGNALS \
	" FROM orch.runs r WHERE r.id = $1 AND " ORCH_TENANT_IN("r.tenant_id", "$2")

/*
 * A run's sub-workflows (0.8.0 on): a single subflow step's child, and the
 * key "children" when it has any (its parent is in its row)
 */
#define RUN_STATUS_STEP_CHILD \
	"     || CASE WHEN s.type = 'subflow' AND s.items_total IS NULL THEN coalesce((SELECT" \
	"          jsonb_build_object('child_run_id', c.id) FROM orch.runs c WHERE c.parent_run_id = r.id" \
	"          AND c.tenant_id = r.tenant_id AND c.parent_step = s.step_id AND c.id > r.id), '{}') ELSE '{}' END"
#define RUN_STATUS_CHILDREN \
	" || coalesce((SELECT jsonb_build_object('children', jsonb_agg(jsonb_build_object('run_id', c.id," \
	"       'step_id', c.parent_step, 'index', c.parent_index, 'definition', c.definition," \
	"       'version', c.version, 'state', c.state) ORDER BY c.id)) FROM orch.runs c" \
	"     WHERE c.parent_run_id = r.id AND c.tenant_id = r.tenant_id AND c.id > r.id HAVING count(*) > 0), '{}')"

/* A run's signals (0.8.0 on), in the order sent: a key of its status when it has any */
#define RUN_STATUS_SIGNALS \
	" || coalesce((SELECT jsonb_build_object('signals', jsonb_agg(jsonb_build_object('signal_id', g.id," \
	"       'name', g.name, 'payload', g.payload, 'sent_at', g.sent_at, 'consumed_at', g.consumed_at," \
	"       'consumed_by', g.consumed_by) ORDER BY g.id)) FROM orch.signals g" \
	"     WHERE g.run_id = r.id AND g.tenant_id = r.tenant_id HAVING count(*) > 0), '{}')"

/* ----------------------------------------------------------------------
 * orch_run_status(run_id) -> jsonb: the run, its steps, attempts, events
 * ---------------------------------------------------------------------- */
Datum
orch_run_status(PG_FUNCTION_ARGS)
{
	OrchArgs	a = {0};
	int64		run_id;
	bool		isnull;
	Jsonb	   *out;
	MemoryContext outer = CurrentMemoryContext;

	orch_require_arg(fcinfo, 0, "run_id");
	run_id = PG_GETARG_INT64(0);
	orch_arg_int8(&a, run_id);
	SPI_connect();
	/* on Citus: the run's shard (a run that is not found is reported below) */
	(void) orch_scope_run(run_id);
	orch_arg_caller_tenants(&a);
	/* (signals are not kept on Citus: orch.signals stays a local table there) */
	if (orch_args_sql(&a, orch_schema_signals() && !orch_citus()
				 ? RUN_STATUS_SQL("orch.history", "orch.attempt_history", RUN_STATUS_SIGNALS RUN_STATUS_CHILDREN,
								  RUN_STATUS_STEP_CHILD)
				 : orch_schema_rows_record_history() ? RUN_STATUS_SQL("orch.history", "orch.attempt_history", "", "")
				 : RUN_STATUS_SQL("orch.events", "orch.attempts", "", ""),
			false, 0, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("run " INT64_FORMAT " does not exist", run_id)));
	{
		MemoryContext spi = MemoryContextSwitchTo(outer);

		out = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		MemoryContextSwitchTo(spi);
	}
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_JSONB_P(out);
}
