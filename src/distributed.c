/*
 * distributed.c
 *	  orch_distribute(), which distributes the extension's tables with
 *	  Citus by tenant_id and makes their ids unique across the nodes, and
 *	  the trigger that stamps history rows with the node they are written
 *	  on (orch.stamp_on_node).
 *	  Whether they are distributed is known to spi.c (orch_citus); the
 *	  tenant a call is scoped to there, to tenant.c.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_distribute);
PG_FUNCTION_INFO_V1(orch_stamp_on_node);

/* ----------------------------------------------------------------------
 * orch_distribute(shard_count integer DEFAULT NULL) -> TABLE(object, action)
 * ---------------------------------------------------------------------- */

/* Tables distributed by tenant_id, co-located with orch.tasks (first). */
static const char *const distributed_tables[] = {
	"tasks", "attempts", "events", "idempotency_keys", "commands",
	"rate_window", "gate_repairs", "runs", "run_steps", "approvals",
	"metric_totals", "metric_minutes", "run_keys", "approval_refs"
};

/* Small tables every node reads: Citus reference tables. */
static const char *const reference_tables[] = {
	"queues", "state_machines", "state_transitions", "concurrency_limits",
	"tenant_bindings", "definitions", "metric_state", "maintenance_log"
};

/*
 * What the views over these tables read (orch.<name>_rows): on one node the
 * table itself for an unbound caller, read with the view owner's rights;
 * Citus reads a shard with the caller's rights, so on Citus they read
 * orch.caller_<name>(), which runs as the owner and filters by the
 * caller's tenants itself (every row for an unbound caller).
 */
static const char *const reader_views[] = {
	"tenant_bindings", "queues", "tasks", "attempts", "commands", "dead_letters",
	"runs", "run_steps", "events", "definitions", "maintenance_log"
};

/* Sequences whose values become ids: a disjoint range per node. */
static const char *const id_sequences[] = {
	"attempts_id_seq", "events_id_seq", "commands_id_seq",
	"runs_id_seq", "run_steps_done_seq", "maintenance_log_id_seq"
};

/* History tables stamped by orch.stamp_on_node, with their id sequence. */
static const char *const stamped_tables[][2] = {
	{"events", "events_id_seq"}, {"attempts", "attempts_id_seq"}
};

static void
emit(ReturnSetInfo *rsinfo, const char *object, const char *action)
{
	Datum		out[2];
	bool		nulls[2] = {false, false};

	out[0] = CStringGetTextDatum(object);
	out[1] = CStringGetTextDatum(action);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
}

/* Run cmd on every worker (run_command_on_workers); any failure is an error. */
static void
run_on_workers(const char *cmd)
{
	OrchArgs	a = {0};

	orch_arg_text(&a, cmd);
	if (orch_args_sql_once(&a, "SELECT nodename || ':' || nodeport, result"
						   " FROM run_command_on_workers($1) WHERE NOT success", false, 0, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("a command failed on worker %s: %s",
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
						SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2)),
				 errdetail("Command: %s", cmd)));
}

/* The Citus partition method of orch.<name>: 'h', 'n', or '\0' when local. */
static char
citus_method(const char *name)
{
	OrchArgs	a = {0};
	char		buf[NAMEDATALEN * 2];
	bool		isnull;

	snprintf(buf, sizeof(buf), "orch.%s", name);
	orch_arg_text(&a, buf);
	if (orch_args_sql_once(&a, "SELECT partmethod::text FROM pg_dist_partition"
						   " WHERE logicalrelid = $1::regclass", true, 1, SPI_OK_SELECT) == 0)
		return '\0';
	return TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull))[0];
}

/* orch.tasks and orch.runs: their row triggers are the lifecycles */
static bool
has_row_triggers(const char *t)
{
	return strcmp(t, "tasks") == 0 || strcmp(t, "runs") == 0;
}

/*
 * Make orch.<t> a Citus table with create_call (a create_*_table call),
 * then drop the local copy the conversion leaves behind.  A table that is
 * already a Citus table, or does not exist in this schema version, is
 * left as it is.
 */
static void
make_citus_table(ReturnSetInfo *rsinfo, const char *t, const char *create_call, const char *done)
{
	if (!OidIsValid(orch_relid(t)))
		return;
	if (citus_method(t) != '\0')
	{
		emit(rsinfo, psprintf("orch.%s", t), "already a Citus table");
		return;
	}
	/*
	 * The rows already stored are copied into the shards as they are: the
	 * lifecycle triggers (copied to the shards with the table) are off
	 * during the copy, so that they neither check nor derive anything, nor
	 * write events, for rows that only move.
	 */
	if (has_row_triggers(t))
		orch_sql_command(psprintf("ALTER TABLE orch.%s DISABLE TRIGGER USER", t));
	orch_sql_command(create_call);
	if (has_row_triggers(t))
		orch_sql_command(psprintf("ALTER TABLE orch.%s ENABLE TRIGGER USER", t));
	orch_sql_command(psprintf("SELECT truncate_local_data_after_distributing_table('orch.%s')", t));
	emit(rsinfo, psprintf("orch.%s", t), done);
}

static void
distribute_sequences(ReturnSetInfo *rsinfo)
{
	StringInfoData sql;

	/*
	 * Ids unique across nodes: the extension's sequences exist on every
	 * node (CREATE EXTENSION ran there) and Citus leaves an extension's
	 * sequences alone, so each worker would count from 1.  Each node other
	 * than the coordinator counts in its own range: group id << 48, as
	 * Citus does for the sequences of the tables it creates.  First: the
	 * copy of the rows below holds the workers' sequences in this
	 * transaction, which these commands (sent outside it) would wait for.
	 */
	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "DO $do$ DECLARE g bigint; s text; BEGIN"
						   " SELECT groupid INTO g FROM pg_dist_local_group;"
						   " FOREACH s IN ARRAY ARRAY[");
	for (int i = 0, k = 0; i < lengthof(id_sequences); i++)
	{
		if (!OidIsValid(orch_relid(id_sequences[i])))
			continue;
		appendStringInfo(&sql, "%s'orch.%s'", k++ > 0 ? ", " : "", id_sequences[i]);
	}
	appendStringInfoString(&sql,
						   "]::text[] LOOP"
						   " IF pg_catalog.pg_sequence_last_value(s::regclass) >= (g << 48) THEN CONTINUE; END IF;"
						   " EXECUTE format('ALTER SEQUENCE %s MINVALUE %s MAXVALUE %s START %s RESTART %s', s,"
						   "   (g << 48) + 1, ((g + 1) << 48) - 1, (g << 48) + 1, (g << 48) + 1);"
						   " END LOOP; END $do$");
	run_on_workers(sql.data);
	/* the coordinator (group 0) counts below the first worker's range */
	for (int i = 0; i < lengthof(id_sequences); i++)
	{
		if (!OidIsValid(orch_relid(id_sequences[i])))
			continue;
		resetStringInfo(&sql);
		appendStringInfo(&sql, "ALTER SEQUENCE orch.%s MAXVALUE %lld", id_sequences[i],
						 (long long) ((INT64CONST(1) << 48) - 1));
		orch_sql_command(sql.data);
	}
	emit(rsinfo, "sequences", "a disjoint id range on each worker (group id << 48)");

}

static void
distribute_drop_machine_fkey(ReturnSetInfo *rsinfo)
{
	/*
	 * The state-machine tables reference each other: Citus converts a table
	 * with a foreign key to a reference table through a path that collides
	 * with the extension's copy on the workers.  The key only guards
	 * orch_create_state_machine's own inserts (it writes the machine first),
	 * so it goes, here and on the workers.
	 */
	if (citus_method("state_transitions") == '\0')
	{
		orch_sql_command("ALTER TABLE orch.state_transitions DROP CONSTRAINT IF EXISTS state_transitions_machine_fkey");
		run_on_workers("ALTER TABLE orch.state_transitions"
					   " DROP CONSTRAINT IF EXISTS state_transitions_machine_fkey");
		emit(rsinfo, "orch.state_transitions", "foreign key to orch.state_machines dropped");
	}

}

static void
distribute_fold_first(void)
{
	/*
	 * What committed before is folded here, on one node: on Citus each node
	 * folds only the rows written on it (in its id range), and on the
	 * coordinator starts where this fold stops.
	 */
	if (citus_method("tasks") == '\0')
	{
		/*
		 * Nothing is written between this fold and the copy (a row
		 * committed in between would reach a worker with an id of the
		 * coordinator's range, which no node counts), and a fold running
		 * now is waited for rather than skipped.
		 */
		orch_sql_command("LOCK TABLE orch.tasks, orch.events, orch.attempts, orch.runs IN SHARE MODE");
		orch_sql_command("LOCK TABLE orch.metric_state IN EXCLUSIVE MODE");
		orch_sql_command("SELECT orch.metrics_fold()");
	}

}

static void
distribute_tables(ReturnSetInfo *rsinfo, int shard_count)
{
	StringInfoData sql;

	initStringInfo(&sql);
	for (int i = 0; i < lengthof(reference_tables); i++)
		make_citus_table(rsinfo, reference_tables[i],
						 psprintf("SELECT create_reference_table('orch.%s')", reference_tables[i]),
						 "reference table");
	for (int i = 0; i < lengthof(distributed_tables); i++)
	{
		const char *t = distributed_tables[i];

		resetStringInfo(&sql);
		appendStringInfo(&sql, "SELECT create_distributed_table('orch.%s', 'tenant_id'", t);
		if (i > 0)
			appendStringInfoString(&sql, ", colocate_with => 'orch.tasks'");
		else if (shard_count > 0)
			appendStringInfo(&sql, ", shard_count => %d", shard_count);
		appendStringInfoChar(&sql, ')');
		make_citus_table(rsinfo, t, sql.data, "distributed by tenant_id");
	}

}

static void
distribute_views(ReturnSetInfo *rsinfo)
{
	/*
	 * The views, on every node: each has its own copy of the extension's,
	 * which Citus leaves alone (on a worker, with its DDL propagation off
	 * for the one transaction, as Citus applies its own DDL there).
	 */
	for (int i = 0; i < lengthof(reader_views); i++)
	{
		const char *v = reader_views[i];
		char	   *cmd;

		if (!OidIsValid(orch_relid(psprintf("%s_rows", v))))
			continue;			/* a 0.7.0 schema */
		cmd = psprintf("CREATE OR REPLACE VIEW orch.%s_rows AS SELECT * FROM orch.caller_%s()", v, v);
		orch_sql_command(cmd);
		run_on_workers(psprintf("BEGIN; SET LOCAL citus.enable_ddl_propagation TO off; %s; COMMIT", cmd));
		emit(rsinfo, psprintf("orch.%s_rows", v), psprintf("reads through orch.caller_%s()", v));
	}

}

static void
distribute_stamps(ReturnSetInfo *rsinfo)
{
	/*
	 * History rows written through the coordinator would carry its
	 * transaction id and an id of its range (Citus computes an INSERT's
	 * defaults there): xact loses its default, and each shard stamps the
	 * rows written without one with its own node's, as the rows the shards'
	 * triggers write are, so that each node's metrics fold can count what
	 * committed there (orch.metrics_fold_shard).  (A schema before 0.8.0
	 * has neither.)
	 */
	for (int i = 0; i < lengthof(stamped_tables) && orch_schema_distributed_fold(); i++)
	{
		const char *t = stamped_tables[i][0];

		if (orch_sql_once(psprintf("SELECT 1 FROM pg_trigger WHERE tgrelid = 'orch.%s'::regclass"
								   " AND tgname = 'stamp_on_node'", t),
						  0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT) > 0)
			continue;
		orch_sql_command(psprintf("ALTER TABLE orch.%s ALTER COLUMN xact DROP DEFAULT", t));
		orch_sql_command(psprintf("CREATE TRIGGER stamp_on_node BEFORE INSERT ON orch.%s"
								  " FOR EACH ROW EXECUTE FUNCTION orch.stamp_on_node('%s')", t, stamped_tables[i][1]));
		emit(rsinfo, psprintf("orch.%s", t), "rows stamped with the node they are written on");
	}

}

Datum
orch_distribute(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			shard_count = orch_int4_arg(fcinfo, 0, "shard_count", 1, 64000, 0);

	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only a superuser may distribute the orchestrator's tables")));
	if (!OidIsValid(get_extension_oid("citus", true)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("Citus is not installed in this database"),
				 errhint("Load citus (shared_preload_libraries) on every node, run CREATE EXTENSION citus on the coordinator and add the workers, then call orch_distribute() there.")));
	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();

	/*
	 * orch.tasks and orch.runs carry row triggers (the lifecycle), which
	 * Citus copies to the shards only with this setting.  Ours are safe in
	 * its sense: the rows they write (events) are the same tenant's, on a
	 * co-located shard.  For this transaction only.
	 */
	orch_sql_command("SET LOCAL citus.enable_unsafe_triggers = on");

	if (orch_sql_once("SELECT 1 FROM pg_dist_local_group WHERE groupid = 0", 0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("orch_distribute must run on the Citus coordinator")));

	distribute_sequences(rsinfo);
	distribute_drop_machine_fkey(rsinfo);
	distribute_fold_first();
	distribute_tables(rsinfo, shard_count);
	distribute_views(rsinfo);
	distribute_stamps(rsinfo);

	/*
	 * Not delegated with create_distributed_function: Citus 13.2.2 crashes
	 * the backend (TryToDelegateFunctionCall -> FindShardInterval ->
	 * hashtext on a NULL) when a delegated function's distribution argument
	 * is NULL, as tenant is when a call leaves it out.
	 */

	SPI_finish();
	/* the rest of this transaction works on distributed tables */
	orch_citus_forget();
	return (Datum) 0;
}

/* ----------------------------------------------------------------------
 * orch.stamp_on_node(sequence) trigger, BEFORE INSERT FOR EACH ROW
 *	  On Citus, on the shards of orch.events and orch.attempts: a row
 *	  written without a transaction id gets this node's, and an id outside
 *	  this node's range (group id << 48, orch_distribute) is replaced by the
 *	  next of orch.<sequence> here.  The ids are of history rows nothing
 *	  else refers to by them; the ones task rows record are taken on the
 *	  shard already.
 * ---------------------------------------------------------------------- */

/*
 * This node's Citus group (pg_dist_local_group), read once per transaction
 * (a node removed and added again gets a new group; Citus keeps its
 * connections' backends).
 */
static int64 local_group = -1;
static LocalTransactionId local_group_lxid = InvalidLocalTransactionId;

Datum
orch_stamp_on_node(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	td;
	int			cols[2];
	Datum		v[2];
	bool		n[2] = {false, false};
	bool		isnull;
	int64		id,
				lo,
				hi;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) || !TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		trigdata->tg_trigger->tgnargs != 1)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch.stamp_on_node must run as a BEFORE INSERT row trigger with the id sequence as its argument")));
	td = RelationGetDescr(trigdata->tg_relation);
	cols[0] = SPI_fnumber(td, "id");
	cols[1] = SPI_fnumber(td, "xact");
	if (cols[0] <= 0 || cols[1] <= 0)
		elog(ERROR, "orchestrator: %s has no id or xact column", RelationGetRelationName(trigdata->tg_relation));

	if (local_group < 0 || local_group_lxid != MyProc->lxid)
	{
		if (!OidIsValid(get_extension_oid("citus", true)))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("orch.stamp_on_node needs Citus on this node")));
		SPI_connect();
		if (orch_sql_once("SELECT groupid::bigint FROM pg_catalog.pg_dist_local_group", 0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("orch.stamp_on_node needs Citus on this node")));
		local_group = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		local_group_lxid = MyProc->lxid;
		SPI_finish();
	}
	lo = local_group << 48;
	hi = ((local_group + 1) << 48) - 1;

	/*
	 * A row that names its transaction (the claim a task row recorded,
	 * written out at the next claim; a row history compaction moves) keeps
	 * it, with its id: it was written, and counted, where that transaction
	 * ran.  On Citus xact has no default (orch_distribute drops it), so a
	 * NULL is a row a statement writes now, here or through the coordinator.
	 */
	(void) heap_getattr(trigdata->tg_trigtuple, cols[1], td, &isnull);
	if (!isnull)
		return PointerGetDatum(trigdata->tg_trigtuple);

	id = DatumGetInt64(heap_getattr(trigdata->tg_trigtuple, cols[0], td, &isnull));
	if (isnull || id <= lo || id > hi)
	{
		Oid			seq = orch_relid(trigdata->tg_trigger->tgargs[0]);

		if (!OidIsValid(seq))
			elog(ERROR, "orchestrator: sequence orch.%s is missing", trigdata->tg_trigger->tgargs[0]);
		id = nextval_internal(seq, false);
		if (id <= lo || id > hi)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("orch.%s gives ids outside this node's range", trigdata->tg_trigger->tgargs[0]),
					 errhint("Run orch_distribute() on the coordinator after adding a node.")));
	}
	v[0] = Int64GetDatum(id);
	v[1] = Int64GetDatum((int64) U64FromFullTransactionId(GetTopFullTransactionId()));
	return PointerGetDatum(heap_modify_tuple_by_cols(trigdata->tg_trigtuple, td, 2, cols, v, n));
}
