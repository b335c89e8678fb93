/*
 * queues.c
 *	  Queue administration: names, the queue row and its cached settings,
 *	  orch_create_queue / configure / pause / resume / drop, the effective
 *	  settings, and per-key concurrency limits.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include <math.h>

#include "utils/builtins.h"
#include "miscadmin.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/numeric.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_create_queue);
PG_FUNCTION_INFO_V1(orch_configure_queue);
PG_FUNCTION_INFO_V1(orch_pause_queue);
PG_FUNCTION_INFO_V1(orch_resume_queue);
PG_FUNCTION_INFO_V1(orch_drop_queue);
PG_FUNCTION_INFO_V1(orch_queue_settings);
PG_FUNCTION_INFO_V1(orch_set_concurrency_limit);
PG_FUNCTION_INFO_V1(orch_set_fairness_weight);

/*
 * Load a queue's effective settings; false if it does not exist.  Caller is
 * connected to SPI; results are allocated in the caller's context.
 */
bool
orch_load_queue(const char *queue, QueueSettings *qs, bool *paused)
{
	OrchArgs	a = {0};
	bool		isnull;
	Jsonb	   *settings;
	bool		is_paused;
	MemoryContext spicxt = CurrentMemoryContext;

	if (orch_queue_cache_get(queue, qs, paused))
		return true;
	orch_arg_text(&a, queue);
	orch_args_sql(&a, "SELECT settings, paused FROM orch.queues WHERE name = $1", false, 1, SPI_OK_SELECT);
	orch_settings_defaults(qs);
	if (SPI_processed == 0)
	{
		if (paused)
			*paused = false;
		return false;
	}
	settings = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	is_paused = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (paused)
		*paused = is_paused;
	MemoryContextSwitchTo(spicxt);
	orch_settings_apply(qs, settings, false);
	orch_queue_cache_put(queue, qs, is_paused);
	return true;
}


/* Create a queue with defaults when it is missing (auto_create_queues). */
void
orch_ensure_queue(const char *queue)
{
	OrchArgs	a = {0};

	orch_check_name(queue, "queue");
	if (!orch_auto_create_queues)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", queue),
				 errhint("Create it with orch_create_queue, or set orchestrator.auto_create_queues = on.")));
	orch_arg_text(&a, queue);
	orch_args_sql(&a, "INSERT INTO orch.queues (name) VALUES ($1) ON CONFLICT DO NOTHING",
				  false, 0, SPI_OK_INSERT);
}

/* ----------------------------------------------------------------------
 * SQL-callable queue administration
 * ---------------------------------------------------------------------- */

static Jsonb *
effective(Jsonb *settings)
{
	QueueSettings qs;

	orch_settings_defaults(&qs);
	orch_settings_apply(&qs, settings, false);
	return orch_settings_to_jsonb(&qs);
}

/* The queue administration calls: an unrestricted caller, a queue name. */
static char *
admin_queue_arg(FunctionCallInfo fcinfo)
{
	orch_require_unrestricted("queue administration");
	orch_require_arg(fcinfo, 0, "name");
	return orch_text_arg(fcinfo, 0);
}

Datum
orch_create_queue(PG_FUNCTION_ARGS)
{
	char	   *name;
	Jsonb	   *settings;
	Jsonb	   *result;
	OrchArgs	a = {0};

	name = admin_queue_arg(fcinfo);
	orch_check_name(name, "queue");
	settings = orch_jsonb_arg(fcinfo, 1, "settings");
	result = effective(settings);

	SPI_connect();
	orch_arg_text(&a, name);
	orch_arg(&a, JSONBOID, PointerGetDatum(settings), settings == NULL);
	if (orch_args_sql_once(&a, "INSERT INTO orch.queues (name, settings)"
						   " VALUES ($1, jsonb_strip_nulls(coalesce($2, '{}'))) ON CONFLICT DO NOTHING",
						   false, 0, SPI_OK_INSERT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("queue \"%s\" already exists", name),
				 errhint("Change its settings with orch_configure_queue.")));
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

Datum
orch_configure_queue(PG_FUNCTION_ARGS)
{
	char	   *name;
	Jsonb	   *merged;
	Jsonb	   *result;
	OrchArgs	q = {0};
	OrchArgs	a;
	bool		isnull;
	MemoryContext outer = CurrentMemoryContext;

	name = admin_queue_arg(fcinfo);
	orch_require_arg(fcinfo, 1, "settings");
	(void) orch_jsonb_arg(fcinfo, 1, "settings");
	if (!JB_ROOT_IS_OBJECT(PG_GETARG_JSONB_P(1)) || JB_ROOT_IS_SCALAR(PG_GETARG_JSONB_P(1)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("settings must be a JSON object")));

	SPI_connect();
	orch_arg_text(&q, name);
	a = q;						/* $1, and the settings given as $2 */
	orch_arg(&a, JSONBOID, PG_GETARG_DATUM(1), false);
	if (orch_args_sql_once(&a, "SELECT jsonb_strip_nulls(settings || $2) FROM orch.queues"
						   " WHERE name = $1 FOR UPDATE", false, 1, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", name)));
	merged = DatumGetJsonbP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	MemoryContextSwitchTo(outer);
	result = effective(merged);	/* validates before anything is written */
	a = q;						/* $1, and the merged settings as $2 */
	orch_arg_jsonb(&a, merged);
	orch_args_sql_once(&a, "UPDATE orch.queues SET settings = $2, updated_at = now()"
					   " WHERE name = $1", false, 0, SPI_OK_UPDATE);
	/* a changed concurrency_key_limit applies at once */
	orch_gate_reconcile(name, 10000);
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

static void
set_paused(FunctionCallInfo fcinfo, bool paused)
{
	char	   *name = admin_queue_arg(fcinfo);
	OrchArgs	a = {0};

	SPI_connect();
	orch_arg_text(&a, name);
	orch_arg(&a, BOOLOID, BoolGetDatum(paused), false);
	if (orch_args_sql_once(&a, "UPDATE orch.queues SET paused = $2, updated_at = now()"
						   " WHERE name = $1", false, 0, SPI_OK_UPDATE) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", name)));
	SPI_finish();
}

Datum
orch_pause_queue(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, true);
	PG_RETURN_VOID();
}

Datum
orch_resume_queue(PG_FUNCTION_ARGS)
{
	set_paused(fcinfo, false);
	/* the claims waiting on it look again once this commits */
	orch_claim_wake_note(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_VOID();
}

Datum
orch_drop_queue(PG_FUNCTION_ARGS)
{
	int			ev;
	char	   *name;
	bool		force;
	OrchArgs	q = {0};		/* $1 the queue, of every statement below */
	int64		live;
	bool		isnull;

	name = admin_queue_arg(fcinfo);
	force = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);

	SPI_connect();
	/* wait for enqueues in flight; later ones wait for this drop */
	orch_xact_lock("queue-exists", name, NULL);
	orch_arg_text(&q, name);
	if (orch_args_sql_once(&q, "SELECT 1 FROM orch.queues WHERE name = $1 FOR UPDATE", false, 1, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", name)));
	/*
	 * The tasks behind workflow approvals wait in a queue but are never
	 * claimed from it: they end with their gate (run_approvals.c), not with
	 * the queue, and are neither counted nor cancelled here (cancelling one
	 * would lock it before its run).
	 */
	orch_args_sql_once(&q, "SELECT count(*) FROM orch.tasks WHERE queue = $1"
					   " AND state NOT IN ('completed', 'failed', 'cancelled')"
					   " AND NOT (run_id IS NOT NULL AND step_key LIKE '%" ORCH_APPROVAL_SUFFIX "')",
					   false, 1, SPI_OK_SELECT);
	live = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (live > 0 && !force)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("queue \"%s\" holds " INT64_FORMAT " unfinished tasks", name, live),
				 errhint("Let them finish, or call orch_drop_queue(name, force => true) to cancel them.")));
	if (live > 0)
	{
		int			ntenants = 1;
		char	  **tenants = NULL;

		/* on Citus tenant by tenant: each statement then locks on one shard */
		if (orch_citus())
		{
			ntenants = (int) orch_args_sql_once(&q, "SELECT tenant_id FROM orch.tasks WHERE queue = $1"
												" AND state NOT IN ('completed', 'failed', 'cancelled') GROUP BY 1",
												false, 0, SPI_OK_SELECT);
			tenants = palloc(sizeof(char *) * (ntenants + 1));
			for (int i = 0; i < ntenants; i++)
				tenants[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		}
		ev = orch_set_event_context(NULL, "queue dropped");
		for (int i = 0; i < ntenants; i++)
		{
			OrchArgs	c = q;	/* $1, and the tenant as $2 (NULL: every one) */

			orch_arg(&c, TEXTARRAYOID, tenants ? orch_text_array1(tenants[i]) : (Datum) 0, tenants == NULL);
			/* running attempts end as cancelled, as with orch_cancel */
			orch_args_sql_once(&c, "WITH l AS (SELECT id, tenant_id, state, attempts, lease_owner,"
							   "   lease_token, claimed_at FROM orch.tasks"
							   "   WHERE queue = $1 AND state NOT IN ('completed', 'failed', 'cancelled')"
							   "     AND NOT (run_id IS NOT NULL AND step_key LIKE '%" ORCH_APPROVAL_SUFFIX "')"
							   "     AND " ORCH_TENANT_IN("tenant_id", "$2")
							   "   FOR UPDATE)"
							   " UPDATE orch.tasks t SET state = 'cancelled', reason_code = 'queue_dropped'"
							   " FROM l WHERE t.id = l.id AND t.tenant_id = l.tenant_id"
							   "   AND " ORCH_TENANT_IN("t.tenant_id", "$2")
							   " RETURNING l.tenant_id, l.id, l.attempts, l.lease_owner, l.lease_token, l.claimed_at,"
							   "   l.state = 'executing'",
							   false, 0, SPI_OK_UPDATE_RETURNING);
			orch_attempts_insert_rows(SPI_tuptable, SPI_processed, 1, 7, "cancelled", "queue dropped");
		}
		orch_clear_event_context(ev);
	}
	orch_args_sql_once(&q, "DELETE FROM orch.queues WHERE name = $1", false, 0, SPI_OK_DELETE);
	/* the queue's own limits, rate windows and fairness go with it */
	orch_args_sql_once(&q, "DELETE FROM orch.concurrency_limits WHERE queue = $1",
					   false, 0, SPI_OK_DELETE);
	orch_args_sql_once(&q, "DELETE FROM orch.rate_window WHERE queue = $1",
					   false, 0, SPI_OK_DELETE);
	if (orch_schema_fair_claims())
	{
		orch_args_sql_once(&q, "DELETE FROM orch.fair_weights WHERE queue = $1",
						   false, 0, SPI_OK_DELETE);
		orch_args_sql_once(&q, "DELETE FROM orch.fair_cursors WHERE queue = $1",
						   false, 0, SPI_OK_DELETE);
	}
	SPI_finish();
	PG_RETURN_VOID();
}

Datum
orch_queue_settings(PG_FUNCTION_ARGS)
{
	char	   *name;
	QueueSettings qs;
	Jsonb	   *result;
	MemoryContext outer = CurrentMemoryContext;

	orch_require_arg(fcinfo, 0, "name");
	name = orch_text_arg(fcinfo, 0);
	SPI_connect();
	if (!orch_load_queue(name, &qs, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", name)));
	MemoryContextSwitchTo(outer);
	result = orch_settings_to_jsonb(&qs);
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

/*
 * orch_set_concurrency_limit(queue text, key text, max_running int) -> void
 *	  Overrides the queue's concurrency_key_limit for one key (NULL: back to
 *	  the queue's); a raised limit promotes waiting tasks at once.
 */
Datum
orch_set_concurrency_limit(PG_FUNCTION_ARGS)
{
	char	   *queue;
	char	   *key;
	OrchArgs	k = {0};		/* $1 the queue, $2 the key */
	QueueSettings qs;

	orch_require_unrestricted("orch_set_concurrency_limit");
	orch_require_arg(fcinfo, 0, "queue");
	orch_require_arg(fcinfo, 1, "key");
	queue = orch_text_arg(fcinfo, 0);
	key = orch_text_arg(fcinfo, 1);
	(void) orch_int4_arg(fcinfo, 2, "max_running", 1, PG_INT32_MAX, 0);
	SPI_connect();
	if (!orch_load_queue(queue, &qs, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", queue)));
	orch_arg_text(&k, queue);
	orch_arg_text(&k, key);
	if (PG_ARGISNULL(2))
	{
		orch_args_sql_once(&k, "DELETE FROM orch.concurrency_limits WHERE queue = $1 AND key = $2",
						   false, 0, SPI_OK_DELETE);
	}
	else
	{
		OrchArgs	a = k;		/* and the limit as $3 */

		orch_arg_int4(&a, PG_GETARG_INT32(2));
		orch_args_sql_once(&a, "INSERT INTO orch.concurrency_limits (queue, key, max_running)"
						   " VALUES ($1, $2, $3) ON CONFLICT (queue, key)"
						   " DO UPDATE SET max_running = excluded.max_running", false, 0, SPI_OK_INSERT);
	}
	/* the override holds for the key in every tenant: bring each in line */
	orch_args_sql_once(&k, "SELECT DISTINCT tenant_id FROM orch.tasks"
					   " WHERE queue = $1 AND concurrency_key = $2"
					   "   AND (gated OR state = 'executing' OR ready_at IS NOT NULL)"
					   " ORDER BY 1", false, 0, SPI_OK_SELECT);
	{
		int			nt = (int) SPI_processed;
		char	  **ts = palloc(sizeof(char *) * (nt + 1));

		for (int i = 0; i < nt; i++)
			ts[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		for (int i = 0; i < nt; i++)
		{
			orch_gate_enforce(queue, key, ts[i]);
			orch_gate_promote(queue, key, ts[i]);
		}
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * orch_set_fairness_weight(queue text, key text, weight int) -> void
 *	  How many tasks a key (a tenant, or a concurrency key: the queue's
 *	  fairness_key) takes per turn in the queue's fair claims; NULL: back to
 *	  1.
 */
Datum
orch_set_fairness_weight(PG_FUNCTION_ARGS)
{
	char	   *queue;
	OrchArgs	a = {0};
	QueueSettings qs;

	orch_require_unrestricted("orch_set_fairness_weight");
	orch_require_arg(fcinfo, 0, "queue");
	orch_require_arg(fcinfo, 1, "key");
	queue = orch_text_arg(fcinfo, 0);
	orch_arg_text(&a, queue);
	orch_arg_text(&a, orch_key_arg(fcinfo, 1, "key"));
	SPI_connect();
	if (!orch_load_queue(queue, &qs, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("queue \"%s\" does not exist", queue)));
	if (PG_ARGISNULL(2))
		orch_args_sql_once(&a, "DELETE FROM orch.fair_weights WHERE queue = $1 AND fkey = $2",
						   false, 0, SPI_OK_DELETE);
	else
	{
		orch_arg_int4(&a, orch_int4_arg(fcinfo, 2, "weight", 1, 1000, 1));
		orch_args_sql_once(&a, "INSERT INTO orch.fair_weights (queue, fkey, weight) VALUES ($1, $2, $3)"
						   " ON CONFLICT (queue, fkey) DO UPDATE SET weight = excluded.weight",
						   false, 0, SPI_OK_INSERT);
	}
	SPI_finish();
	PG_RETURN_VOID();
}
