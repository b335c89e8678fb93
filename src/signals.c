/*
 * signals.c
 *	  orch_signal: a signal sent to a workflow run from outside, stored
 *	  under the run's row lock (so that it meets the wait for it exactly
 *	  once) and consumed at once when a step of the run waits for it
 *	  (run_steps.c, run_signals.c); else kept for the first wait of its
 *	  name.  Idempotency keys per run (OR004 for another signal), a cap on
 *	  the signals a run keeps unconsumed.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "run_internal.h"

PG_FUNCTION_INFO_V1(orch_signal);

/* The most signals a run keeps unconsumed */
#define MAX_PENDING_SIGNALS 1000

/*
 * The signal an idempotency key names in the run ($1 run, $2 tenant, $3
 * name, $4 payload, $5 key): its id when it is the same signal (OR004 for
 * another name or payload), 0 when the key is new.
 */
static int64
replayed_signal(OrchArgs *a, const char *key, int64 run_id)
{
	bool		isnull;
	int64		id;

	if (orch_args_sql(a, "SELECT id, name = $3 AND payload = $4 FROM orch.signals"
					  " WHERE run_id = $1 AND tenant_id = $2 AND idempotency_key = $5",
					  false, 0, SPI_OK_SELECT) == 0)
		return 0;
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_IDEMPOTENCY_CONFLICT),
				 errmsg("idempotency key \"%s\" was already used for another signal to run " INT64_FORMAT,
						key, run_id),
				 errdetail("Signal " INT64_FORMAT " was sent with this key with another name or payload.", id)));
	return id;
}

/* A run that keeps MAX_PENDING_SIGNALS unconsumed takes no more */
static void
check_pending_cap(OrchArgs *a, int64 run_id)
{
	bool		isnull;

	orch_args_sql(a, "SELECT count(*) FROM (SELECT 1 FROM orch.signals"
				  " WHERE run_id = $1 AND tenant_id = $2 AND consumed_at IS NULL LIMIT "
				  CppAsString2(MAX_PENDING_SIGNALS) ") p", false, 0, SPI_OK_SELECT);
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) >= MAX_PENDING_SIGNALS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("run " INT64_FORMAT " has %d signals not yet consumed", run_id, MAX_PENDING_SIGNALS),
				 errdetail("A run keeps at most %d signals that no wait step has consumed.", MAX_PENDING_SIGNALS),
				 errhint("Nothing was stored; send it once a wait step of the run has consumed one.")));
}

/* ----------------------------------------------------------------------
 * orch_signal(run_id, name, payload DEFAULT '{}', idempotency_key DEFAULT
 * NULL) -> the signal's id
 * ---------------------------------------------------------------------- */
Datum
orch_signal(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		run_id;
	char	   *name;
	Jsonb	   *payload;
	char	   *key = orch_text_arg(fcinfo, 3);
	RunRow		r;
	OrchArgs	a = {0};
	OrchArgs	run;
	int64		id;
	bool		isnull;

	orch_require_arg(fcinfo, 0, "run_id");
	orch_require_arg(fcinfo, 1, "name");
	orch_require_arg(fcinfo, 2, "payload");
	run_id = PG_GETARG_INT64(0);
	name = orch_text_arg(fcinfo, 1);
	orch_check_name(name, "signal");
	payload = orch_jsonb_arg(fcinfo, 2, "signal payload");
	if (key != NULL && (key[0] == '\0' || strlen(key) > 512))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idempotency key must have 1 to 512 characters")));
	if (orch_citus())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("signals are not supported on Citus"),
				 errdetail("orch.signals is not distributed; a wait step for a signal can only time out there."),
				 errhint("Use a human_approval step or a task step that a worker completes instead.")));

	SPI_connect();
	/* the run's row lock: the wait for the signal is settled under it too */
	orch_lock_run_or_not_found(run_id, &r);
	orch_arg_int8(&a, r.id);
	orch_arg_text(&a, r.tenant);
	run = a;					/* $1, $2 */
	orch_arg_text(&a, name);
	orch_arg_jsonb(&a, payload);
	orch_arg_text(&a, key);
	orch_arg_text(&a, orch_current_actor());
	if (key != NULL && (id = replayed_signal(&a, key, run_id)) != 0)
	{
		orch_run_busy_end(0);
		orch_scope_clear();
		SPI_finish();
		PG_RETURN_INT64(id);
	}
	if (orch_run_terminal(r.state))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_TERMINAL_STATE),
				 errmsg("run " INT64_FORMAT " is \"%s\"; cannot signal it", run_id,
						orch_run_state_names[r.state]),
				 errdetail("A finished run consumes no signal."),
				 errhint("Nothing was stored.")));
	check_pending_cap(&run, run_id);
	orch_args_sql(&a, "INSERT INTO orch.signals (run_id, tenant_id, name, payload, idempotency_key, sent_by)"
				  " VALUES ($1, $2, $3, $4, $5, $6) RETURNING id", false, 0, SPI_OK_INSERT_RETURNING);
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	/* a step waiting for it consumes it now (not while the run is paused) */
	ev = orch_set_event_context(NULL, NULL);
	r.signals_due = true;
	orch_run_progress(&r);
	orch_clear_event_context(ev);
	orch_run_busy_end(0);
	/* a sub-workflow that ended here: its parent progresses */
	orch_run_flush_notes();
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_INT64(id);
}
