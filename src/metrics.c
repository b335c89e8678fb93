/*
 * metrics.c
 *	  The metrics layer's C pieces: the histogram bucket of a duration, the
 *	  quantile of a bucketed histogram, and orch_metrics_prometheus(), which
 *	  renders the rolling counters (orch.metric_totals, folded from events and
 *	  attempts by orch.metrics_fold) and the live gauges in the Prometheus
 *	  text exposition format.  Nothing here reads finished history: counters
 *	  come from the folded totals, gauges from the partial indexes of open
 *	  work.
 */
#include "postgres.h"

#include <math.h>

#include "access/transam.h"
#include "access/xact.h"
#include "funcapi.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_histogram_le);
PG_FUNCTION_INFO_V1(orch_histogram_quantile);
PG_FUNCTION_INFO_V1(orch_metrics_prometheus);
PG_FUNCTION_INFO_V1(orch_metrics_refresh);
PG_FUNCTION_INFO_V1(orch_metrics_mark);

/* Bucket upper bounds in seconds; a last bucket, +Inf, takes the rest. */
static const double bucket_bounds[] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
	300, 600, 1800, 3600
};
static const char *const bucket_names[] = {
	"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5",
	"10", "30", "60", "120", "300", "600", "1800", "3600", "+Inf"
};

#define NBOUNDS lengthof(bucket_bounds)

/*
 * orch.histogram_le(seconds float8) -> text
 *	  The first bucket whose bound is >= seconds (Prometheus "le"), "+Inf"
 *	  past the last bound; NaN goes to +Inf, negatives to the first bucket.
 */
Datum
orch_histogram_le(PG_FUNCTION_ARGS)
{
	double		x = PG_GETARG_FLOAT8(0);
	int			lo = 0,
				hi = NBOUNDS;

	if (isnan(x))
		PG_RETURN_TEXT_P(cstring_to_text(bucket_names[NBOUNDS]));
	/* first index with bound >= x */
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;

		if (bucket_bounds[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	PG_RETURN_TEXT_P(cstring_to_text(bucket_names[lo]));
}

/* The index of a bucket name (NBOUNDS for "+Inf"); -1 for a name not ours. */
static int
bucket_index(const char *name)
{
	for (int i = 0; i <= (int) NBOUNDS; i++)
		if (strcmp(bucket_names[i], name) == 0)
			return i;
	return -1;
}

/*
 * orch.histogram_quantile(q float8, les text[], counts bigint[]) -> float8
 *	  The q-quantile of a histogram given as (non-cumulative) counts per
 *	  bucket, in any order: find the bucket where the cumulative count
 *	  reaches q * total and interpolate linearly between its lower and upper
 *	  bound (0 below the first).  In the +Inf bucket the answer is the
 *	  largest finite bound.  NULL for an empty histogram.
 */
Datum
orch_histogram_quantile(PG_FUNCTION_ARGS)
{
	double		q = PG_GETARG_FLOAT8(0);
	ArrayType  *les = PG_GETARG_ARRAYTYPE_P(1);
	ArrayType  *counts = PG_GETARG_ARRAYTYPE_P(2);
	Datum	   *ld,
			   *cd;
	bool	   *ln,
			   *cn;
	int			nl,
				nc;
	int64		per[NBOUNDS + 1] = {0};
	int64		total = 0;
	double		rank,
				cum = 0;

	if (q < 0 || q > 1 || isnan(q))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("quantile must be between 0 and 1")));
	deconstruct_array(les, TEXTOID, -1, false, TYPALIGN_INT, &ld, &ln, &nl);
	deconstruct_array(counts, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &cd, &cn, &nc);
	if (nl != nc)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("bounds and counts must have the same length")));
	for (int i = 0; i < nl; i++)
	{
		char	   *name;
		int			b;

		if (ln[i] || cn[i])
			continue;
		name = TextDatumGetCString(ld[i]);
		b = bucket_index(name);
		if (b < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("\"%s\" is not a histogram bucket", name)));
		per[b] += DatumGetInt64(cd[i]);
		total += DatumGetInt64(cd[i]);
	}
	if (total <= 0)
		PG_RETURN_NULL();
	rank = q * (double) total;
	for (int b = 0; b <= (int) NBOUNDS; b++)
	{
		double		lower = b == 0 ? 0 : bucket_bounds[b - 1];

		if (per[b] == 0 || cum + (double) per[b] < rank)
		{
			cum += (double) per[b];
			continue;
		}
		if (b == (int) NBOUNDS)
			PG_RETURN_FLOAT8(bucket_bounds[NBOUNDS - 1]);
		PG_RETURN_FLOAT8(lower + (bucket_bounds[b] - lower) * ((rank - cum) / (double) per[b]));
	}
	PG_RETURN_FLOAT8(bucket_bounds[NBOUNDS - 1]);
}

/*
 * Fold what committed since the last fold into the counters; returns how
 * many history rows were read.  A fold reads at most about max_rows rows:
 * the transactions not counted yet in the order of their ids, up to the
 * one whose rows bring the count to max_rows (orch.metrics_fold_on), so a
 * call that returns less than max_rows has folded everything committed
 * before it began.  On one node orch.metrics_fold() does it (a 0.7.0
 * schema, during an update, folds everything at once).  On Citus every
 * shard group of orch.tasks is folded on the node that holds it
 * (orch.metrics_fold_shard, each in its own transaction there, through
 * run_command_on_shards), each at most about max_rows rows: a shard whose
 * node does not answer is left for the next fold (a WARNING says so), the
 * others are folded.  When every shard was folded up to its snapshot, the
 * coordinator notes when (orch.metric_state's refreshed_at, which
 * orch_queue_stats shows as metrics_as_of; on one node the fold does).  A
 * schema distributed before 0.8.0 has no shard fold: 0A000.  Caller is
 * connected to SPI.
 */
int64
orch_metrics_fold_now(int32 max_rows)
{
	bool		isnull;
	Datum		d;
	int64		folded;
	int64		failed;
	int64		short_of;
	OrchArgs	a = {0};

	Assert(max_rows >= 1);
	if (!orch_citus())
	{
		if (!orch_schema_bounded_fold())
			orch_sql_once("SELECT orch.metrics_fold()", 0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT);
		else
		{
			orch_arg_int8(&a, max_rows);
			orch_args_sql_once(&a, "SELECT orch.metrics_fold($1)", false, 1, SPI_OK_SELECT);
		}
		if (SPI_processed != 1)
			elog(ERROR, "orchestrator: metrics fold failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		return isnull ? 0 : DatumGetInt64(d);
	}
	if (!orch_schema_distributed_fold())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("metrics on Citus need the 0.8.0 schema"),
				 errdetail("This installation's tables were distributed at an earlier version, which folds no metrics there."),
				 errhint("Update it with docs/citus-upgrade-0.7.0-0.8.0.sql (docs/citus.md, Upgrading a distributed installation).")));
	/* (a shard that read max_rows rows or more may have stopped short) */
	orch_sql_once(psprintf("SELECT coalesce(sum(result::bigint) FILTER (WHERE success), 0)::bigint,"
						   " count(*) FILTER (WHERE NOT success), min(result) FILTER (WHERE NOT success),"
						   " count(*) FILTER (WHERE success AND result::bigint >= %d)"
						   " FROM run_command_on_shards('orch.tasks',"
						   " 'SELECT orch.metrics_fold_shard(''%%s'', false, %d)')", max_rows, max_rows),
				  0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT);
	folded = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	failed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	short_of = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
	if (failed > 0)
	{
		/*
		 * The counters are not complete as of now: metrics_as_of stays at
		 * the last fold that reached every shard (and orch.metric_state, a
		 * reference table, could not be written with a node down anyway).
		 */
		ereport(WARNING,
				(errmsg("orchestrator: the metrics of " INT64_FORMAT " shards of orch.tasks were not folded", failed),
				 errdetail("%s", SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3)),
				 errhint("Their nodes' rows are folded by the next fold that reaches them.")));
		return folded;
	}
	/*
	 * (values, not functions: Citus's rule for an upsert's SET; a fold
	 * that stopped short of the present leaves metrics_as_of where it was)
	 */
	orch_arg_int8(&a, folded);
	orch_arg(&a, TIMESTAMPTZOID, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()), false);
	orch_args_sql_once(&a, short_of > 0 ?
					   "INSERT INTO orch.metric_state AS m (snap_xmin, snap_xmax, refreshed_at) VALUES (0, 0, $2)"
					   " ON CONFLICT (id) DO UPDATE SET folded_total = m.folded_total + $1" :
					   "INSERT INTO orch.metric_state AS m (snap_xmin, snap_xmax, refreshed_at) VALUES (0, 0, $2)"
					   " ON CONFLICT (id) DO UPDATE SET refreshed_at = $2, folded_total = m.folded_total + $1",
					   false, 0, SPI_OK_INSERT);
	return folded;
}

/*
 * orch_metrics_refresh(max_rows int DEFAULT 250000) -> bigint
 *	  Runs the fold now, at most about max_rows rows (NULL: the default;
 *	  22023 below 1): the rows of every tenant, so a role bound to tenants
 *	  may not (42501; the count would tell it how busy the others are).  A
 *	  0.7.0 schema's orch_metrics_refresh() has no argument.
 */
Datum
orch_metrics_refresh(PG_FUNCTION_ARGS)
{
	int32		max_rows = orch_int4_arg(fcinfo, 0, "max_rows", 1, PG_INT32_MAX, ORCH_FOLD_MAX_ROWS);
	int64		n;

	orch_require_unrestricted("orch_metrics_refresh");
	SPI_connect();
	n = orch_metrics_fold_now(max_rows);
	SPI_finish();
	PG_RETURN_INT64(n);
}

/* ----------------------------------------------------------------------
 * Prometheus text exposition (format 0.0.4)
 * ---------------------------------------------------------------------- */

/* A label value: backslash, double quote and newline escaped. */
static void
append_label_value(StringInfo buf, const char *s)
{
	appendStringInfoChar(buf, '"');
	for (; *s; s++)
	{
		if (*s == '\\')
			appendStringInfoString(buf, "\\\\");
		else if (*s == '"')
			appendStringInfoString(buf, "\\\"");
		else if (*s == '\n')
			appendStringInfoString(buf, "\\n");
		else
			appendStringInfoChar(buf, *s);
	}
	appendStringInfoChar(buf, '"');
}

static void
append_header(StringInfo buf, const char *name, const char *type, const char *help)
{
	appendStringInfo(buf, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/*
 * One sample: name{labels} value.  names/values are the label pairs; a NULL
 * or empty value is written as "none" for error_class and as "" otherwise.
 */
static void
append_sample(StringInfo buf, const char *name, int nlabels, const char *const *names,
			  char **values, const char *value)
{
	appendStringInfoString(buf, name);
	if (nlabels > 0)
	{
		appendStringInfoChar(buf, '{');
		for (int i = 0; i < nlabels; i++)
		{
			const char *v = values[i];

			if (i > 0)
				appendStringInfoChar(buf, ',');
			if ((v == NULL || v[0] == '\0') && strcmp(names[i], "error_class") == 0)
				v = "none";
			appendStringInfo(buf, "%s=", names[i]);
			append_label_value(buf, v ? v : "");
		}
		appendStringInfoChar(buf, '}');
	}
	appendStringInfo(buf, " %s\n", value);
}

/*
 * A family from one query whose columns are the label values in order, then
 * the value (any type; printed by its output function).
 */
/* The caller's tenants (NULL: every tenant), for caller_sql. */
static Datum caller_tenants;
static bool caller_unrestricted;

/* A metrics query, its $1 the caller's tenants (some do not read it). */
static uint64
caller_sql(const char *sql)
{
	OrchArgs	a = {0};

	orch_arg(&a, TEXTARRAYOID, caller_tenants, caller_unrestricted);
	return orch_args_sql_once(&a, sql, true, 0, SPI_OK_SELECT);
}

static void
family(StringInfo buf, const char *name, const char *type, const char *help,
	   int nlabels, const char *const *labels, const char *sql)
{
	append_header(buf, name, type, help);
	caller_sql(sql);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	td = SPI_tuptable->tupdesc;
		char	   *vals[8];
		char	   *value;

		for (int i = 0; i < nlabels; i++)
			vals[i] = SPI_getvalue(tup, td, i + 1);
		value = SPI_getvalue(tup, td, nlabels + 1);
		append_sample(buf, name, nlabels, labels, vals, value ? value : "0");
	}
}

/*
 * A histogram family from orch.metric_totals: metric holds per-bucket
 * counts (l1 step type, l2 bucket), metric_sum the sum in microseconds.
 * Buckets are written cumulatively, every bound present, then _sum and
 * _count.
 */
static void
histogram(StringInfo buf, const char *name, const char *help, const char *metric)
{
	static const char *const labels[] = {"tenant", "queue", "step_type", "le"};
	char	   *sql;
	uint64		n;
	SPITupleTable *tt;
	char	   *bname = psprintf("%s_bucket", name);
	char	   *sname = psprintf("%s_sum", name);
	char	   *cname = psprintf("%s_count", name);

	append_header(buf, name, "histogram", help);
	sql = psprintf("SELECT m.tenant_id, m.queue, m.l1, m.metric, m.l2, m.value"
				   "  FROM orch.metric_totals m"
				   " WHERE m.metric IN (%s, %s) AND " ORCH_TENANT_IN("m.tenant_id", "$1")
				   " ORDER BY m.tenant_id, m.queue, m.l1, m.metric",
				   quote_literal_cstr(metric), quote_literal_cstr(psprintf("%s_sum", metric)));
	n = caller_sql(sql);
	tt = SPI_tuptable;
	for (uint64 r = 0; r < n;)
	{
		char	   *tenant = SPI_getvalue(tt->vals[r], tt->tupdesc, 1);
		char	   *queue = SPI_getvalue(tt->vals[r], tt->tupdesc, 2);
		char	   *step = SPI_getvalue(tt->vals[r], tt->tupdesc, 3);
		int64		per[NBOUNDS + 1] = {0};
		int64		sum_us = 0,
					cum = 0;
		char	   *vals[4];

		/* the rows of one (tenant, queue, step type) */
		for (; r < n; r++)
		{
			char	   *t = SPI_getvalue(tt->vals[r], tt->tupdesc, 1);
			char	   *q = SPI_getvalue(tt->vals[r], tt->tupdesc, 2);
			char	   *s = SPI_getvalue(tt->vals[r], tt->tupdesc, 3);
			char	   *m = SPI_getvalue(tt->vals[r], tt->tupdesc, 4);
			char	   *le = SPI_getvalue(tt->vals[r], tt->tupdesc, 5);
			bool		isnull;
			int64		v = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 6, &isnull));

			if (strcmp(t, tenant) != 0 || strcmp(q, queue) != 0 || strcmp(s, step) != 0)
				break;
			if (strcmp(m, metric) == 0)
			{
				int			b = bucket_index(le);

				if (b >= 0)
					per[b] += v;
			}
			else
				sum_us += v;
		}
		vals[0] = tenant;
		vals[1] = queue;
		vals[2] = step;
		for (int b = 0; b <= (int) NBOUNDS; b++)
		{
			cum += per[b];
			vals[3] = (char *) bucket_names[b];
			append_sample(buf, bname, 4, labels, vals, psprintf(INT64_FORMAT, cum));
		}
		append_sample(buf, sname, 3, labels, vals, psprintf("%.6f", (double) sum_us / 1e6));
		append_sample(buf, cname, 3, labels, vals, psprintf(INT64_FORMAT, cum));
	}
}

/*
 * The open-work gauges from one scan of orch.open_tasks(): columns tenant,
 * queue, the five open states, ready, delayed, retry_waiting, oldest age.
 */
static void
open_gauges(StringInfo buf, SPITupleTable *tt, uint64 n)
{
	static const char *const tq[] = {"tenant", "queue"};
	static const char *const tqs[] = {"tenant", "queue", "state"};
	static const char *const states[] = {"received", "queued", "executing", "awaiting_tool",
	"awaiting_user_confirmation"};
	static const struct
	{
		const char *name;
		const char *help;
	}			per_queue[] = {
		{"orch_tasks_ready", "Tasks claimable now."},
		{"orch_tasks_delayed", "Queued tasks scheduled for later."},
		{"orch_tasks_retry_waiting", "Tasks waiting for their retry time."},
		{"orch_oldest_ready_age_seconds", "How long the oldest claimable task has been claimable."},
	};

	append_header(buf, "orch_tasks", "gauge", "Open tasks by state.");
	for (uint64 r = 0; r < n; r++)
		for (int s = 0; s < (int) lengthof(states); s++)
		{
			char	   *vals[3];

			vals[0] = SPI_getvalue(tt->vals[r], tt->tupdesc, 1);
			vals[1] = SPI_getvalue(tt->vals[r], tt->tupdesc, 2);
			vals[2] = (char *) states[s];
			append_sample(buf, "orch_tasks", 3, tqs, vals,
						  SPI_getvalue(tt->vals[r], tt->tupdesc, 3 + s));
		}
	for (int g = 0; g < (int) lengthof(per_queue); g++)
	{
		append_header(buf, per_queue[g].name, "gauge", per_queue[g].help);
		for (uint64 r = 0; r < n; r++)
		{
			char	   *vals[2];

			vals[0] = SPI_getvalue(tt->vals[r], tt->tupdesc, 1);
			vals[1] = SPI_getvalue(tt->vals[r], tt->tupdesc, 2);
			append_sample(buf, per_queue[g].name, 2, tq, vals,
						  SPI_getvalue(tt->vals[r], tt->tupdesc, 8 + g));
		}
	}
}

#define TOTALS(metric_cond, label_cols) \
	"SELECT " label_cols ", sum(m.value) FROM orch.metric_totals m" \
	" WHERE " metric_cond " AND " ORCH_TENANT_IN("m.tenant_id", "$1") \
	" GROUP BY " label_cols " ORDER BY " label_cols

/* One metric family: its labels are the first columns of its query. */
typedef struct Family
{
	const char *name;
	const char *type;
	const char *help;
	const char *labels[4];		/* NULL-terminated */
	const char *sql;
} Family;

static const Family families[] = {
	/* live gauges beside the open-work ones */
	{"orch_dead_letters", "gauge", "Dead letters awaiting review.", {"tenant", "queue"},
	"SELECT tenant_id, queue, dead_letters FROM orch.dead_letter_counts() ORDER BY 1, 2"},
	{"orch_runs", "gauge", "Open workflow runs by state.", {"tenant", "definition", "state"},
		"SELECT r.tenant_id, r.definition, r.state, count(*) FROM orch.runs r"
		" WHERE r.state IN ('running', 'waiting_approval', 'paused')"
	"   AND " ORCH_TENANT_IN("r.tenant_id", "$1") " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"},
	{"orch_review_items", "gauge", "Items in the manual review queue by kind.", {"tenant", "kind"},
	"SELECT tenant_id, kind, count(*) FROM orch.review_items() GROUP BY 1, 2 ORDER BY 1, 2"},
	{"orch_approvals_waiting", "gauge", "Workflow steps waiting for an approval.", {"tenant"},
		"SELECT tenant_id, count(*) FROM orch.review_items() WHERE kind = 'approval_waiting'"
	" GROUP BY 1 ORDER BY 1"},
	{"orch_metrics_refreshed_timestamp_seconds", "gauge",
		"When the counters were last brought up to date (orch_maintain, orch_metrics_refresh).", {NULL},
	"SELECT extract(epoch FROM refreshed_at)::float8 FROM orch.metric_state"},
	/* counters: the folded totals */
	{"orch_tasks_enqueued_total", "counter", "Tasks enqueued.", {"tenant", "queue"},
	TOTALS("m.metric = 'enqueued'", "m.tenant_id, m.queue")},
	{"orch_executions_started_total", "counter", "Attempts started (claims).", {"tenant", "queue"},
	TOTALS("m.metric = 'started'", "m.tenant_id, m.queue")},
	{"orch_executions_finished_total", "counter", "Attempts finished, by outcome.", {"tenant", "queue", "outcome"},
	TOTALS("m.metric = 'attempt'", "m.tenant_id, m.queue, m.l1")},
	{"orch_tasks_finished_total", "counter", "Tasks that reached a terminal state.", {"tenant", "queue", "state"},
	TOTALS("m.metric = 'finished'", "m.tenant_id, m.queue, m.l1")},
	{"orch_retries_total", "counter", "Retries scheduled, by error class.", {"tenant", "queue", "error_class"},
	TOTALS("m.metric = 'retry'", "m.tenant_id, m.queue, m.l1")},
	{"orch_failures_total", "counter", "Tasks failed for good, by error class and reason code.",
		{"tenant", "queue", "error_class", "reason_code"},
	TOTALS("m.metric = 'failed'", "m.tenant_id, m.queue, m.l1, m.l2")},
	{"orch_lease_expiries_total", "counter", "Attempts whose lease expired.", {"tenant", "queue"},
	TOTALS("m.metric = 'attempt' AND m.l1 = 'lease_expired'", "m.tenant_id, m.queue")},
	{"orch_runs_finished_total", "counter", "Workflow runs finished, by state.", {"tenant", "definition", "state"},
	TOTALS("m.metric = 'run_finished'", "m.tenant_id, m.queue, m.l1")},
	{"orch_maintenance_runs_total", "counter", "orch_maintain passes (folded from orch.maintenance_log).", {NULL},
	"SELECT coalesce(sum(value), 0) FROM orch.metric_totals WHERE metric = 'maintenance_runs'"},
};

/*
 * orch_metrics_prometheus() -> text
 *	  Every metric in the text exposition format.  A bound role sees its
 *	  tenants: every query is given the caller's tenants as $1, read once
 *	  here (on Citus a check in the query would run on the shards, as the
 *	  function's owner, and see every tenant).
 */
Datum
orch_metrics_prometheus(PG_FUNCTION_ARGS)
{
	StringInfoData buf;
	text	   *result;

	initStringInfo(&buf);
	SPI_connect();
	caller_tenants = orch_caller_tenants_datum(&caller_unrestricted);

	/* live gauges: open work, from the partial indexes (one pass) */
	orch_sql_once("SELECT tenant_id, queue, received, queued, executing, awaiting_tool,"
					" awaiting_user_confirmation, ready, delayed, retry_waiting,"
					" coalesce(extract(epoch FROM now() - oldest_ready), 0)::float8"
					" FROM orch.open_tasks() ORDER BY 1, 2", 0, NULL, NULL, NULL, true, 0, SPI_OK_SELECT);
	open_gauges(&buf, SPI_tuptable, SPI_processed);
	for (int i = 0; i < lengthof(families); i++)
	{
		const Family *f = &families[i];
		int			nlabels = 0;

		while (nlabels < lengthof(f->labels) && f->labels[nlabels])
			nlabels++;
		family(&buf, f->name, f->type, f->help, nlabels, f->labels, f->sql);
	}
	histogram(&buf, "orch_attempt_duration_seconds", "Attempt duration (claim to finish).", "attempt_seconds");
	histogram(&buf, "orch_queue_wait_seconds", "Time from claimable to claimed.", "wait_seconds");

	SPI_finish();
	result = cstring_to_text_with_len(buf.data, buf.len);
	PG_RETURN_TEXT_P(result);
}

/*
 * orch.metrics_mark() -> (mark_xact bigint, mark_task bigint, mark_time timestamptz,
 *						   clock_reset boolean)
 *	  Where orch.metrics_fold may start looking for the transitions task rows
 *	  record (docs/storage.md, *The metrics fold*).  Reads the last task id
 *	  drawn (mark_task) and the clock (mark_time), publishes the clock in
 *	  orch.metrics_clock unless it holds a later moment, and then reads the
 *	  next transaction id to be assigned (mark_xact).  A transaction whose id
 *	  is at least mark_xact got it after all of that, so:
 *	  - its enqueues by orch_enqueue and orch_enqueue_batch have task ids
 *	    above mark_task (they assign the transaction's id before they draw
 *	    task ids);
 *	  - its completions by orch_complete and orch_complete_batch, and those
 *	    of the tasks it claimed, have a finished_at of at least mark_time
 *	    (a completion stamps the later of the clock and orch.metrics_clock,
 *	    read after its transaction's id was assigned: orch_metrics_clock).
 *	  The publication is serialized on the sequence.  clock_reset: a
 *	  completion found the clock set back by more than a stamp may follow
 *	  the published moment (orch_metrics_clock reset it), or the clock now
 *	  reads that much earlier than the published moment; the moment is
 *	  published afresh, and the fold reads every task row once and keeps no
 *	  earlier mark.  Internal to the fold: no role is granted it.
 */
Datum
orch_metrics_mark(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		v[4];
	bool		n[4] = {false, false, false, false};
	TimestampTz now = GetCurrentTimestamp();
	int64		last_task = orch_last_task_id();
	bool		reset;
	FullTransactionId next;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "orchestrator: metrics_mark must return a record");
	reset = orch_metrics_clock_publish(now);
	next = ReadNextFullTransactionId();

	v[0] = Int64GetDatum((int64) U64FromFullTransactionId(next));
	v[1] = Int64GetDatum(last_task);
	v[2] = TimestampTzGetDatum(now);
	v[3] = BoolGetDatum(reset);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), v, n)));
}
