/*
 * bulk.c
 *	  Acting on the tasks or runs a filter matches: orch_cancel_where,
 *	  orch_retry_where, orch_cancel_runs_where.  A filter is a jsonb object
 *	  of known keys, each a condition (all must hold); an empty filter or an
 *	  unknown key is an error, never "everything".  The matches are read
 *	  first (the caller's tenants only, oldest first, at most max), then
 *	  each is acted on as the single call would (orch_cancel, orch_retry,
 *	  orch_cancel_run): locked, checked again, audited with the actor.  One
 *	  that changed meanwhile (a task completed, a dead letter re-driven) is
 *	  reported as it is, or left out, never acted on twice.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_cancel_where);
PG_FUNCTION_INFO_V1(orch_retry_where);
PG_FUNCTION_INFO_V1(orch_cancel_runs_where);

/* What a filter key's value must be */
typedef enum FilterKind
{
	FK_TEXT,					/* a string */
	FK_STATES,					/* an array of state names */
	FK_TIME,					/* a timestamptz as a string */
	FK_IDS,						/* an array of ids */
	FK_INT						/* an integer */
} FilterKind;

/* A filter key: its value's kind and its condition ($%d: the value) */
typedef struct FilterKey
{
	const char *key;
	FilterKind	kind;
	const char *cond;
} FilterKey;

static const FilterKey task_keys[] = {
	{"queue", FK_TEXT, "t.queue = $%d"},
	{"state", FK_STATES, "t.state = ANY ($%d)"},
	{"error_class", FK_TEXT, "t.last_error_class = $%d"},
	{"reason_code", FK_TEXT, "t.reason_code = $%d"},
	{"tenant", FK_TEXT, "t.tenant_id = $%d"},
	{"created_before", FK_TIME, "t.created_at < $%d"},
	{"created_after", FK_TIME, "t.created_at > $%d"},
	{"failed_before", FK_TIME, "t.state = 'failed' AND t.finished_at < $%d"},
	{"failed_after", FK_TIME, "t.state = 'failed' AND t.finished_at > $%d"},
	{"definition", FK_TEXT, "t.run_id IN (SELECT r.id FROM orch.runs r"
	 " WHERE r.definition = $%d AND r.tenant_id = t.tenant_id)"},
	{"task_ids", FK_IDS, "t.id = ANY ($%d)"},
	{NULL}
};

static const FilterKey run_keys[] = {
	{"definition", FK_TEXT, "r.definition = $%d"},
	{"version", FK_INT, "r.version = $%d"},
	{"state", FK_STATES, "r.state = ANY ($%d)"},
	{"tenant", FK_TEXT, "r.tenant_id = $%d"},
	{"created_before", FK_TIME, "r.created_at < $%d"},
	{"created_after", FK_TIME, "r.created_at > $%d"},
	{"run_ids", FK_IDS, "r.id = ANY ($%d)"},
	{NULL}
};

static pg_attribute_noreturn() void
bad_value(const char *key, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("filter key \"%s\" must be %s", key, what)));
}

/* The elements of a filter value that must be a non-empty array */
static List *
array_elements(JsonbValue *v, const char *key, const char *what)
{
	JsonbIterator *it;
	JsonbValue	e;
	JsonbIteratorToken tok;
	List	   *out = NIL;

	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data))
		bad_value(key, what);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &e, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (e.type == jbvBinary)
			bad_value(key, what);
		out = lappend(out, memcpy(palloc(sizeof(JsonbValue)), &e, sizeof(JsonbValue)));
	}
	if (out == NIL)
		bad_value(key, what);
	orch_check_batch_size(list_length(out), key);
	return out;
}

static Datum
states_value(JsonbValue *v, const char *key, bool runs)
{
	List	   *els = array_elements(v, key, "an array of state names");
	Datum	   *d = palloc(sizeof(Datum) * list_length(els));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, els)
	{
		JsonbValue *e = lfirst(lc);
		char	   *s;

		if (e->type != jbvString)
			bad_value(key, "an array of state names");
		s = pnstrdup(e->val.string.val, e->val.string.len);
		if (runs ? !orch_run_state_known(s) : orch_state_from_name(s) == TS_INVALID)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("filter key \"%s\": \"%s\" is not a %s state", key, s,
							runs ? "run" : "task")));
		d[n++] = CStringGetTextDatum(s);
	}
	return PointerGetDatum(construct_array(d, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* numeric_int8 on a filter's number, for orch_try_data_exception */
typedef struct NumericInt8
{
	Numeric		n;
	int64		value;
} NumericInt8;

static void
numeric_to_int8(void *arg)
{
	NumericInt8 *p = (NumericInt8 *) arg;

	p->value = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(p->n)));
}

/*
 * A filter's number as an integer of its type (int8 or int4), else 22023:
 * a fraction, or out of the type's range, is not an id or a version.
 */
static int64
integer_value(JsonbValue *v, const char *key, const char *what, bool int4)
{
	NumericInt8 p;

	if (v->type != jbvNumeric)
		bad_value(key, what);
	p.n = v->val.numeric;
	if (numeric_is_nan(p.n) || numeric_is_inf(p.n) ||
		!DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(p.n),
										  DirectFunctionCall2(numeric_trunc, NumericGetDatum(p.n),
															  Int32GetDatum(0)))) ||
		orch_try_data_exception(numeric_to_int8, &p) != NULL ||
		(int4 && (p.value < PG_INT32_MIN || p.value > PG_INT32_MAX)))
		bad_value(key, what);
	return p.value;
}

static Datum
ids_value(JsonbValue *v, const char *key)
{
	List	   *els = array_elements(v, key, "an array of ids");
	Datum	   *d = palloc(sizeof(Datum) * list_length(els));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, els)
	{
		JsonbValue *e = lfirst(lc);

		d[n++] = Int64GetDatum(integer_value(e, key, "an array of ids", false));
	}
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, true, TYPALIGN_DOUBLE));
}

/* timestamptz_in on a string, for orch_try_data_exception */
typedef struct TimeText
{
	const char *text;
	Datum		value;
} TimeText;

static void
time_text_in(void *arg)
{
	TimeText   *p = (TimeText *) arg;

	p->value = DirectFunctionCall3(timestamptz_in, CStringGetDatum(p->text),
								   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
}

/* One key's value, checked, as a parameter of the statement */
static void
add_value(OrchArgs *a, const FilterKey *k, JsonbValue *v, bool runs)
{
	char	   *s = v->type == jbvString ? pnstrdup(v->val.string.val, v->val.string.len) : NULL;

	switch (k->kind)
	{
		case FK_TEXT:
			if (s == NULL)
				bad_value(k->key, "a string");
			if (strcmp(k->key, "error_class") == 0)
				(void) orch_error_class_from_name(s);
			orch_arg_text(a, s);
			break;
		case FK_STATES:
			orch_arg(a, TEXTARRAYOID, states_value(v, k->key, runs), false);
			break;
		case FK_IDS:
			orch_arg(a, INT8ARRAYOID, ids_value(v, k->key), false);
			break;
		case FK_INT:
			orch_arg_int4(a, (int32) integer_value(v, k->key, "an integer", true));
			break;
		case FK_TIME:
			{
				TimeText	p = {s, 0};
				ErrorData  *ed;

				if (s == NULL)
					bad_value(k->key, "a timestamp (a string)");
				ed = orch_try_data_exception(time_text_in, &p);
				if (ed != NULL)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("filter key \"%s\" is not a timestamp: %s", k->key, ed->message)));
				orch_arg(a, TIMESTAMPTZOID, p.value, false);
				break;
			}
	}
}

static pg_attribute_noreturn() void
unknown_key(const char *key, const FilterKey *keys)
{
	StringInfoData known;

	initStringInfo(&known);
	for (const FilterKey *k = keys; k->key; k++)
		appendStringInfo(&known, "%s%s", k == keys ? "" : ", ", k->key);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown filter key \"%s\"", key),
			 errhint("The keys are %s.", known.data)));
}

/*
 * The filter (argument 0) as conditions joined by AND, appended to where,
 * with their values as parameters of a.
 */
static void
filter_conditions(FunctionCallInfo fcinfo, const FilterKey *keys, bool runs,
				  OrchArgs *a, StringInfo where)
{
	Jsonb	   *filter;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			conds = 0;

	orch_require_arg(fcinfo, 0, "filter");
	filter = PG_GETARG_JSONB_P(0);
	if (!JB_ROOT_IS_OBJECT(filter))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("filter must be a JSON object")));
	it = JsonbIteratorInit(&filter->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;
		const FilterKey *k;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, v.val.string.len);
		for (k = keys; k->key && strcmp(k->key, key) != 0; k++)
			;
		if (k->key == NULL)
			unknown_key(key, keys);
		tok = JsonbIteratorNext(&it, &v, true);
		add_value(a, k, &v, runs);
		appendStringInfoString(where, " AND ");
		appendStringInfo(where, k->cond, a->n);
		conds++;
	}
	if (conds == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("filter must name at least one condition"),
				 errhint("An empty filter is refused rather than taken as every row.")));
}

/*
 * The ids of the rows matched (what: a SELECT of one id column, FROM and
 * WHERE with the fixed conditions, the caller's tenants among them as $1;
 * order: its ORDER BY): the filter's conditions too, at most max (argument
 * argmax), locked as lock says.
 */
static int64 *
matched(FunctionCallInfo fcinfo, const FilterKey *keys, bool runs, const char *what,
		const char *order, int argmax, int dflt, const char *lock, int *count)
{
	OrchArgs	a = {0};
	StringInfoData sql;
	/* bounded by both: max, and orchestrator.max_batch_size */
	int32		max = Min(orch_int4_arg(fcinfo, argmax, "max", 1, PG_INT32_MAX, dflt),
						  orch_max_batch_size);
	int64	   *ids;
	bool		isnull;

	initStringInfo(&sql);
	appendStringInfoString(&sql, what);
	orch_arg_caller_tenants(&a);	/* $1, which what uses */
	filter_conditions(fcinfo, keys, runs, &a, &sql);
	orch_arg_int4(&a, max);
	appendStringInfo(&sql, " ORDER BY %s LIMIT $%d%s", order, a.n, lock);
	*count = (int) orch_args_sql_once(&a, sql.data, false, 0, SPI_OK_SELECT);
	ids = palloc(sizeof(int64) * (*count + 1));
	for (int i = 0; i < *count; i++)
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	return ids;
}

/* One output row: an id and a text or an id */
static void
put_row(FunctionCallInfo fcinfo, int64 id, const char *state, int64 other)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		v[2] = {Int64GetDatum(id), state ? CStringGetTextDatum(state) : Int64GetDatum(other)};
	bool		n[2] = {false, false};

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
}

/*
 * orch_cancel_where(filter jsonb, reason text, max int DEFAULT 1000)
 *	  -> TABLE(task_id bigint, state text)
 *
 * The open tasks matched (not the task of a workflow approval, which is
 * decided through its run), oldest first.  Each row: the task and the
 * state it is in after the call (cancelled, or the state it finished in
 * meanwhile).
 */
Datum
orch_cancel_where(PG_FUNCTION_ARGS)
{
	char	   *reason = orch_text_arg(fcinfo, 1);
	int64	   *ids;
	int			count;
	int			ev;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	ids = matched(fcinfo, task_keys, false,
				  "SELECT t.id FROM orch.tasks t"
				  " WHERE " ORCH_TENANT_IN("t.tenant_id", "$1")
				  "   AND t.state NOT IN ('completed', 'failed', 'cancelled')"
				  "   AND (t.step_key IS NULL OR t.step_key NOT LIKE '%" ORCH_APPROVAL_SUFFIX "')",
				  "t.id", 2, 1000, "", &count);
	ev = orch_set_event_context(NULL, reason);
	for (int i = 0; i < count; i++)
	{
		OrchTask	t;

		/* gone (purged) meanwhile: nothing to report */
		if (!orch_lock_task(ids[i], &t) && !(orch_scope_lookup_again(ids[i]) && orch_lock_task(ids[i], &t)))
		{
			orch_scope_clear();
			continue;
		}
		if (!orch_state_is_terminal(t.state) && orch_cancel_allowed(&t))
		{
			orch_cancel_locked(&t, reason);
			t.state = TS_CANCELLED;
		}
		put_row(fcinfo, t.id, orch_state_names[t.state], 0);
		orch_scope_clear();
	}
	orch_clear_event_context(ev);
	SPI_finish();
	return (Datum) 0;
}

/*
 * orch_retry_where(filter jsonb, max int DEFAULT 1000)
 *	  -> TABLE(task_id bigint, new_task_id bigint)
 *
 * The dead letters matched that were not re-driven yet, oldest failure
 * first, each re-driven as orch_retry does.  Off Citus the scan locks them
 * (SKIP LOCKED: a concurrent re-drive takes the others); on Citus each
 * re-drive locks and checks its dead letter.
 */
Datum
orch_retry_where(PG_FUNCTION_ARGS)
{
	int64	   *ids;
	int			count;
	int			ev;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	ids = matched(fcinfo, task_keys, false,
				  "SELECT t.id FROM orch.tasks t"
				  " WHERE " ORCH_TENANT_IN("t.tenant_id", "$1")
				  "   AND t.state = 'failed' AND t.reason_code IN " ORCH_DEAD_LETTER_REASONS
				  "   AND NOT EXISTS (SELECT 1 FROM orch.tasks n WHERE n.retry_of = t.id"
				  "                   AND n.tenant_id = t.tenant_id)",
				  "t.finished_at, t.id", 1, 1000,
				  orch_citus() ? "" : " FOR UPDATE OF t SKIP LOCKED", &count);
	ev = orch_set_event_context(NULL, NULL);
	for (int i = 0; i < count; i++)
	{
		int64		new_id = orch_redrive(ids[i], true);

		if (new_id >= 0)
			put_row(fcinfo, ids[i], NULL, new_id);
		orch_scope_clear();
	}
	orch_clear_event_context(ev);
	SPI_finish();
	return (Datum) 0;
}

/*
 * The runs to cancel in the order of their families (a sub-workflow's
 * family is its top run's, any other run's its own), each family's runs by
 * id: a cancel locks a run's family, so that two such calls take the
 * families' locks in one order.
 */
static void
family_order(int64 *ids, int count)
{
	OrchArgs	a = {0};
	Datum	   *d;
	bool		isnull;

	if (count < 2 || !orch_schema_subflows() || orch_citus())
		return;
	d = palloc(sizeof(Datum) * count);
	for (int i = 0; i < count; i++)
		d[i] = Int64GetDatum(ids[i]);
	orch_arg(&a, INT8ARRAYOID, PointerGetDatum(construct_array(d, count, INT8OID, 8, true, TYPALIGN_DOUBLE)), false);
	if (orch_args_sql(&a, "SELECT u.id FROM unnest($1::bigint[]) u(id)"
					  " ORDER BY coalesce((SELECT r.root_run_id FROM orch.runs r WHERE r.id = u.id), u.id), u.id",
					  false, 0, SPI_OK_SELECT) != (uint64) count)
		return;
	for (int i = 0; i < count; i++)
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * orch_cancel_runs_where(filter jsonb, reason text, max int DEFAULT 100)
 *	  -> TABLE(run_id bigint, state text)
 *
 * The open runs matched, oldest first, each cancelled as orch_cancel_run
 * does (its open tasks and approvals with it).  Each row: the run and its
 * state after the call (canceled, or the state it ended in meanwhile).
 */
Datum
orch_cancel_runs_where(PG_FUNCTION_ARGS)
{
	char	   *reason = orch_text_arg(fcinfo, 1);
	int64	   *ids;
	int			count;

	InitMaterializedSRF(fcinfo, 0);
	SPI_connect();
	ids = matched(fcinfo, run_keys, true,
				  "SELECT r.id FROM orch.runs r"
				  " WHERE " ORCH_TENANT_IN("r.tenant_id", "$1")
				  "   AND r.state NOT IN ('succeeded', 'failed', 'canceled')",
				  "r.id", 2, 100, "", &count);
	family_order(ids, count);
	for (int i = 0; i < count; i++)
	{
		put_row(fcinfo, ids[i], orch_run_cancel(ids[i], reason, true), 0);
		orch_scope_clear();
	}
	SPI_finish();
	return (Datum) 0;
}
