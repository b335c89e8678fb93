/*
 * run_signals.c
 *	  The signals a run's wait steps consume (orch_signal stores them,
 *	  signals.c): for a step waiting for a signal, the oldest one of its
 *	  name not yet consumed, marked consumed by that step.  Called by step
 *	  progression with the run's row locked; the sender locks the run too,
 *	  so that a signal and the wait for it meet exactly once.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "run_internal.h"

/* Are signals kept (a 0.8.0 schema, not distributed with Citus)? */
bool
orch_run_signals_enabled(void)
{
	return orch_schema_signals() && !orch_citus();
}

/*
 * The oldest signal not yet consumed that the waiting step waits for,
 * consumed by it now: its id and payload.  False when there is none (or
 * the step no longer waits).
 */
bool
orch_run_take_signal(RunRow *r, const char *step, int64 *id, Jsonb **payload)
{
	OrchArgs	a = {0};
	bool		isnull;

	if (!orch_run_signals_enabled())
		return false;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	orch_arg_clock(&a);
	if (orch_args_sql(&a, "UPDATE orch.signals g SET consumed_at = $4, consumed_by = $3"
			" WHERE g.run_id = $1 AND g.tenant_id = $2 AND g.consumed_at IS NULL AND g.id ="
			"   (SELECT p.id FROM orch.run_steps s JOIN orch.signals p"
			"      ON p.run_id = s.run_id AND p.tenant_id = s.tenant_id AND p.name = s.spec ->> 'signal'"
			"    WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 AND s.state = 'waiting'"
			"      AND p.consumed_at IS NULL ORDER BY p.id LIMIT 1)"
			" RETURNING g.id, g.payload", false, 0, SPI_OK_UPDATE_RETURNING) != 1)
		return false;
	*id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	*payload = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

/* The run's steps that wait for a signal, in the order they began to wait (SPI_tuptable: step_id) */
int
orch_run_signal_waits(RunRow *r)
{
	OrchArgs	a = {0};

	if (!orch_run_signals_enabled())
		return 0;
	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	return (int) orch_args_sql(&a, "SELECT step_id FROM orch.run_steps"
			" WHERE run_id = $1 AND tenant_id = $2 AND state = 'waiting' AND spec ? 'signal'"
			" ORDER BY started_at, ord", false, 0, SPI_OK_SELECT);
}
