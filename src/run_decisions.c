/*
 * run_decisions.c
 *	  Beside step progression: what a run's decisions read and choose.  The
 *	  context of a run (its input and its steps' outputs), paths into it, a
 *	  decision step's rules evaluated to the chosen target, and the
 *	  timestamps a wait-until step reads from the context.
 */
#include "postgres.h"

#include <ctype.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "run_internal.h"

/* The context paths and rules read: {"input": ..., "steps": {id: {"output": ...}}} */
#define RUN_CONTEXT_SQL \
	"jsonb_build_object('input', (SELECT r.input FROM orch.runs r WHERE r.id = $1 AND r.tenant_id = $2)," \
	" 'steps', coalesce((SELECT jsonb_object_agg(s.step_id, jsonb_build_object('output', s.output))" \
	"   FROM orch.run_steps s WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.state = 'succeeded'), '{}'))"

/*
 * A context path ("$.input.a.b", "$.steps.<step_id>.output.k", "$.result.x")
 * as the key array of the #> operator.  A step id may contain dots: the
 * longest step id of the run that the path names is the one meant (as the
 * validator resolves it).
 */
Datum
orch_run_path_keys(RunRow *r, const char *path)
{
	List	   *keys = NIL;
	const char *rest;
	Datum	   *elems;
	int			n;
	ListCell   *lc;

	if (strncmp(path, "$.", 2) != 0)
		elog(ERROR, "orchestrator: path \"%s\" does not start with \"$.\"", path);
	rest = path + 2;
	if (strncmp(rest, "steps.", 6) == 0)
	{
		OrchArgs	a = {0};
		char	   *step;

		orch_arg_int8(&a, r->id);
		orch_arg_text(&a, r->tenant);
		orch_arg_text(&a, rest + 6);
		if (orch_args_sql(&a, "SELECT step_id FROM orch.run_steps WHERE run_id = $1 AND tenant_id = $2"
				" AND ($3 = step_id || '.output' OR left($3, length(step_id) + 8) = step_id || '.output.')"
				" ORDER BY length(step_id) DESC LIMIT 1", false, 0, SPI_OK_SELECT) == 0)
			return (Datum) 0;	/* names nothing */
		step = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		keys = lappend(keys, "steps");
		keys = lappend(keys, step);
		keys = lappend(keys, "output");
		rest = rest + 6 + strlen(step) + strlen(".output");
		if (*rest == '.')
			rest++;
	}
	while (*rest)
	{
		const char *dot = strchr(rest, '.');
		int			len = dot ? (int) (dot - rest) : (int) strlen(rest);

		keys = lappend(keys, pnstrdup(rest, len));
		rest += len;
		if (*rest == '.')
			rest++;
	}
	n = list_length(keys);
	elems = palloc(sizeof(Datum) * Max(n, 1));
	n = 0;
	foreach(lc, keys)
		elems[n++] = orch_text_datum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* The run's context: {"input", "steps": {id: {"output"}}} plus a decision's "result". */
Jsonb *
orch_run_context(RunRow *r, Jsonb *result)
{
	OrchArgs	a = {0};
	bool		isnull;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_jsonb(&a, result);
	orch_args_sql(&a, "SELECT " RUN_CONTEXT_SQL " || CASE WHEN $3 IS NULL THEN '{}' ELSE jsonb_build_object('result', $3) END", false, 0, SPI_OK_SELECT);
	return DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* The value a path names in a context, or NULL. */
Jsonb *
orch_run_context_value(RunRow *r, Jsonb *ctx, const char *path)
{
	OrchArgs	a = {0};
	Datum		keys = orch_run_path_keys(r, path);
	bool		isnull;
	Datum		d;

	if (keys == (Datum) 0)
		return NULL;
	orch_arg_jsonb(&a, ctx);
	orch_arg(&a, TEXTARRAYOID, keys, false);
	orch_args_sql(&a, "SELECT $1 #> $2", false, 0, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : DatumGetJsonbPCopy(d);
}

/*
 * A decision's target: the first rule whose "when" holds on the context
 * (the run's, with the handler's result as $.result), else its default;
 * NULL when neither.  Without rules and default, a handler's result names
 * the target itself as {"next": ...} (checked by the caller).
 */
char *
orch_run_decide(RunRow *r, const char *step, Jsonb *result)
{
	OrchArgs	a = {0};
	int			nrules;
	Jsonb	  **rules;
	char	   *deflt;
	Jsonb	   *ctx;
	bool		isnull;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	orch_arg_text(&a, step);
	nrules = (int) orch_args_sql(&a, "SELECT x.rule, s.spec ->> 'default' FROM orch.run_steps s"
			" LEFT JOIN LATERAL jsonb_array_elements(coalesce(s.spec -> 'rules', '[]')) WITH ORDINALITY AS x(rule, n) ON true"
			" WHERE s.run_id = $1 AND s.tenant_id = $2 AND s.step_id = $3 ORDER BY x.n", false, 0, SPI_OK_SELECT);
	rules = palloc(sizeof(Jsonb *) * (nrules + 1));
	deflt = nrules > 0 ? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2) : NULL;
	for (int i = 0; i < nrules; i++)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		rules[i] = isnull ? NULL : DatumGetJsonbPCopy(d);
	}
	ctx = orch_run_context(r, result);
	for (int i = 0; i < nrules; i++)
	{
		OrchArgs	rule = {0};
		char	   *path;
		Jsonb	   *val;

		if (rules[i] == NULL)
			continue;
		orch_arg_jsonb(&rule, rules[i]);
		orch_args_sql(&rule, "SELECT $1 -> 'when' ->> 'path'", false, 0, SPI_OK_SELECT);
		path = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		val = path ? orch_run_context_value(r, ctx, path) : NULL;
		orch_arg_jsonb(&rule, val);
		orch_args_sql(&rule, "SELECT CASE $1 -> 'when' ->> 'op'"
				"  WHEN 'exists' THEN $2 IS NOT NULL"
				"  WHEN 'eq' THEN coalesce($2 = $1 -> 'when' -> 'value', false)"
				"  WHEN 'ne' THEN $2 IS NOT NULL AND $2 <> $1 -> 'when' -> 'value'"
				"  WHEN 'gt' THEN coalesce(jsonb_typeof($2) = jsonb_typeof($1 -> 'when' -> 'value') AND $2 > $1 -> 'when' -> 'value', false)"
				"  WHEN 'ge' THEN coalesce(jsonb_typeof($2) = jsonb_typeof($1 -> 'when' -> 'value') AND $2 >= $1 -> 'when' -> 'value', false)"
				"  WHEN 'lt' THEN coalesce(jsonb_typeof($2) = jsonb_typeof($1 -> 'when' -> 'value') AND $2 < $1 -> 'when' -> 'value', false)"
				"  WHEN 'le' THEN coalesce(jsonb_typeof($2) = jsonb_typeof($1 -> 'when' -> 'value') AND $2 <= $1 -> 'when' -> 'value', false)"
				"  WHEN 'in' THEN coalesce($1 -> 'when' -> 'value' @> jsonb_build_array($2), false)"
				"  ELSE false END, $1 ->> 'then'", false, 0, SPI_OK_SELECT);
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) && !isnull)
			return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	}
	return deflt;
}

/* n digits at *p (advanced past them) */
static bool
iso_digits(const char **p, int n)
{
	for (int i = 0; i < n; i++, (*p)++)
		if (!isdigit((unsigned char) **p))
			return false;
	return true;
}

/*
 * Is s an ISO 8601 date or date-time?  YYYY-MM-DD, then optionally [T ]hh:mm
 * [:ss[.fraction]], then optionally Z or +hh[[:]mm] / -hh[[:]mm].  Only these
 * are read, so that a timestamp means the same whatever the session's
 * DateStyle ("01/02/2030" would not) and never a word ("tomorrow" would move).
 */
static bool
iso8601_shape(const char *s)
{
	const char *p = s;

	if (!iso_digits(&p, 4) || *p++ != '-' || !iso_digits(&p, 2) || *p++ != '-' || !iso_digits(&p, 2))
		return false;
	if (*p == '\0')
		return true;
	if (*p != 'T' && *p != 't' && *p != ' ')
		return false;
	p++;
	if (!iso_digits(&p, 2) || *p++ != ':' || !iso_digits(&p, 2))
		return false;
	if (*p == ':')
	{
		p++;
		if (!iso_digits(&p, 2))
			return false;
		if (*p == '.' || *p == ',')
		{
			p++;
			if (!isdigit((unsigned char) *p))
				return false;
			while (isdigit((unsigned char) *p))
				p++;
		}
	}
	if (*p == 'Z' || *p == 'z')
		p++;
	else if (*p == '+' || *p == '-')
	{
		p++;
		if (!iso_digits(&p, 2))
			return false;
		if (*p == ':')
			p++;
		if (isdigit((unsigned char) *p) && !iso_digits(&p, 2))
			return false;
	}
	return *p == '\0';
}

/* timestamptz_in of a string (orch_parse_timestamp_safely) */
typedef struct TimestampText
{
	const char *text;
	TimestampTz value;
} TimestampText;

static void
timestamp_text_value(void *arg)
{
	TimestampText *p = (TimestampText *) arg;

	p->value = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(p->text),
													   ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
}

/*
 * A JSON string holding an ISO 8601 timestamp (iso8601_shape) as a finite
 * timestamp, or false: a bad value in a run's input fails the step, never
 * the worker's call that made it due.  Without a zone it is read in the
 * session's TimeZone.
 */
bool
orch_parse_timestamp_safely(Jsonb *j, TimestampTz *out)
{
	JsonbValue	jv;
	TimestampText p;

	if (!JsonbExtractScalar(&j->root, &jv) || jv.type != jbvString)
		return false;
	p.text = pnstrdup(jv.val.string.val, jv.val.string.len);
	p.value = 0;
	if (!iso8601_shape(p.text))
		return false;
	/* a value timestamptz_in refuses (a data exception) is not one; a cancel goes on */
	if (orch_try_data_exception(timestamp_text_value, &p) != NULL)
		return false;
	*out = p.value;
	return !TIMESTAMP_NOT_FINITE(p.value);
}
