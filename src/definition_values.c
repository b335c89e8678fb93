/*
 * definition_values.c
 *	  The checks of single values in a workflow definition spec: OR008 with
 *	  the JSON path of the problem, paths, keys, choices, names, integers,
 *	  intervals, queue names and retry policies (checked by the code that
 *	  checks them for queues and tasks).
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "orchestrator.h"
#include "definition_internal.h"

static const char *const safety_names[] = {
	"SAFE_TO_RETRY", "NOT_SAFE_TO_RETRY", "SAFE_TO_RETRY_WITH_GUARD", NULL
};

/* ----------------------------------------------------------------------
 * Reporting
 * ---------------------------------------------------------------------- */


/* OR008 with the JSON path of the problem in the detail */
void
orch_def_fail(const char *path, const char *hint, const char *fmt,...)
{
	StringInfoData msg;

	initStringInfo(&msg);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&msg, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&msg, needed);
	}
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_INVALID_DEFINITION),
			 errmsg("invalid workflow definition"),
			 errdetail("At %s: %s.", path, msg.data),
			 hint ? errhint("%s", hint) : 0));
	pg_unreachable();
}

/* OR008 for a bad value another module's check reported as a data exception */

static void
orch_def_fail_from(const char *path, ErrorData *ed)
{
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_INVALID_DEFINITION),
			 errmsg("invalid workflow definition"),
			 errdetail("At %s: %s.%s%s", path, ed->message,
					   ed->detail ? " " : "", ed->detail ? ed->detail : ""),
			 ed->hint ? errhint("%s", ed->hint) : 0));
	pg_unreachable();
}

/* A user string quoted for a message, cut at DEF_SHOW_LEN bytes */
char *
orch_def_show(const char *s, int len)
{
	StringInfoData b;
	char	   *t;

	if (len > DEF_SHOW_LEN)
		t = psprintf("%s...", pnstrdup(s, pg_mbcliplen(s, len, DEF_SHOW_LEN)));
	else
		t = pnstrdup(s, len);
	initStringInfo(&b);
	escape_json(&b, t);
	return b.data;
}

char *
orch_def_show_value(JsonbValue *v)
{
	return orch_def_show(v->val.string.val, v->val.string.len);
}

/* "a string", "an object", ... for "must be X, not Y" */
const char *
orch_def_kind(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "a string";
		case jbvNumeric:
			return "a number";
		case jbvBool:
			return "a boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "an array" : "an object";
		default:
			return "a JSON value";
	}
}

/* "a, b or c" (conj "or"), "a, b and c" (conj "and") */
static char *
orch_def_list(const char *const *items, const char *conj)
{
	StringInfoData b;

	initStringInfo(&b);
	for (int i = 0; items[i]; i++)
	{
		if (i > 0 && items[i + 1])
			appendStringInfoString(&b, ", ");
		else if (i > 0)
			appendStringInfo(&b, " %s ", conj);
		appendStringInfoString(&b, items[i]);
	}
	return b.data;
}

static char *
orch_def_choices(const char *const *choices)
{
	return orch_def_list(choices, "or");
}

/* ----------------------------------------------------------------------
 * Paths: $.steps[2].depends_on[0], $.input_schema.properties["a b"]
 * ---------------------------------------------------------------------- */

char *
orch_def_path_key_len(const char *parent, const char *key, int len)
{
	bool		plain = len > 0 && !(key[0] >= '0' && key[0] <= '9');
	StringInfoData b;

	for (int i = 0; i < len && plain; i++)
		plain = (key[i] >= 'a' && key[i] <= 'z') || (key[i] >= 'A' && key[i] <= 'Z') ||
			(key[i] >= '0' && key[i] <= '9') || key[i] == '_';
	if (plain)
		return psprintf("%s.%.*s", parent, len, key);
	initStringInfo(&b);
	appendStringInfo(&b, "%s[", parent);
	escape_json(&b, pnstrdup(key, len));
	appendStringInfoChar(&b, ']');
	return b.data;
}

char *
orch_def_path_key(const char *parent, const char *key)
{
	return orch_def_path_key_len(parent, key, strlen(key));
}

char *
orch_def_path_idx(const char *parent, int i)
{
	return psprintf("%s[%d]", parent, i);
}

/* ----------------------------------------------------------------------
 * Values
 * ---------------------------------------------------------------------- */

JsonbValue *
orch_def_get(JsonbContainer *obj, const char *key)
{
	return getKeyJsonValueFromContainer(obj, key, strlen(key), NULL);
}

bool
orch_def_is_object(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

bool
orch_def_is_array(JsonbValue *v)
{
	return v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

static bool
orch_def_str_is(JsonbValue *v, const char *s)
{
	return v->type == jbvString && v->val.string.len == (int) strlen(s) &&
		memcmp(v->val.string.val, s, v->val.string.len) == 0;
}

/* Report the first key of obj (in jsonb's key order) that is not allowed */
void
orch_def_check_keys(JsonbContainer *obj, const char *path, const char *const *allowed,
		   const char *what)
{
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbValue	v;
	JsonbIteratorToken tok;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		bool		known = false;

		if (tok != WJB_KEY)
			continue;
		for (const char *const *a = allowed; *a && !known; a++)
			known = orch_def_str_is(&v, *a);
		if (!known)
			orch_def_fail(path, psprintf("%s accepts the keys %s.", what, orch_def_list(allowed, "and")),
					 "unknown key %s", orch_def_show_value(&v));
	}
}

/* A string that must be one of choices; returns its index */
int
orch_def_check_choice(JsonbValue *v, const char *path, const char *key,
			 const char *const *choices)
{
	if (v->type != jbvString)
		orch_def_fail(path, NULL, "%s must be %s, not %s", key, orch_def_choices(choices), orch_def_kind(v));
	for (int i = 0; choices[i]; i++)
		if (orch_def_str_is(v, choices[i]))
			return i;
	orch_def_fail(path, NULL, "%s must be %s, not %s", key, orch_def_choices(choices), orch_def_show_value(v));
}

void
orch_def_check_text(JsonbValue *v, const char *path, const char *key)
{
	if (v->type != jbvString)
		orch_def_fail(path, NULL, "%s must be a string, not %s", key, orch_def_kind(v));
}

/* A non-empty string of at most maxlen bytes */
char *
orch_def_check_name(JsonbValue *v, const char *path, const char *key, int maxlen)
{
	orch_def_check_text(v, path, key);
	if (v->val.string.len == 0)
		orch_def_fail(path, NULL, "%s must not be empty", key);
	if (v->val.string.len > maxlen)
		orch_def_fail(path, NULL, "%s must have at most %d bytes", key, maxlen);
	return pnstrdup(v->val.string.val, v->val.string.len);
}

static int
orch_def_numeric_cmp_int(Numeric n, int64 i)
{
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(n),
											 NumericGetDatum(int64_to_numeric(i))));
}

/* An integer from min to 2147483647 */
int32
orch_def_check_int(JsonbValue *v, const char *path, const char *key, int32 min)
{
	Numeric		n,
				f;

	if (v->type != jbvNumeric)
		orch_def_fail(path, NULL, "%s must be an integer, not %s", key, orch_def_kind(v));
	n = v->val.numeric;
	if (numeric_is_nan(n) || numeric_is_inf(n))
		orch_def_fail(path, NULL, "%s must be an integer", key);
	f = DatumGetNumeric(DirectFunctionCall1(numeric_floor, NumericGetDatum(n)));
	if (!DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(n), NumericGetDatum(f))))
		orch_def_fail(path, NULL, "%s must be an integer", key);
	if (orch_def_numeric_cmp_int(n, min) < 0 || orch_def_numeric_cmp_int(n, PG_INT32_MAX) > 0)
		orch_def_fail(path, NULL, "%s must be an integer from %d to %d", key, min, PG_INT32_MAX);
	return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(n)));
}

/*
 * An interval: a string PostgreSQL reads as an interval ('90 seconds',
 * '1 day 02:00', 'PT5M') or a number of seconds; positive and at most 100
 * years (a month counts as 30 days).
 */
int64
orch_def_check_interval(JsonbValue *v, const char *path, const char *key)
{
	int64		us;

	if (v->type == jbvNumeric)
	{
		Numeric		n = v->val.numeric;

		if (numeric_is_nan(n) || numeric_is_inf(n))
			orch_def_fail(path, NULL, "%s must be a positive number of seconds", key);
		if (orch_def_numeric_cmp_int(n, 0) <= 0)
			orch_def_fail(path, NULL, "%s must be positive", key);
		if (orch_def_numeric_cmp_int(n, ORCH_MAX_INTERVAL / USECS_PER_SEC) > 0)
			orch_def_fail(path, NULL, "%s must be at most 100 years (36500 days)", key);
		us = (int64) (DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow, NumericGetDatum(n)))
					  * USECS_PER_SEC);
	}
	else if (v->type == jbvString)
	{
		ErrorData  *ed = orch_try_interval_text(pnstrdup(v->val.string.val, v->val.string.len), &us);

		if (ed != NULL)
			orch_def_fail_from(path, ed);
		if (us > ORCH_MAX_INTERVAL)
			orch_def_fail(path, NULL, "%s must be at most 100 years (36500 days)", key);
	}
	else
		orch_def_fail(path, NULL, "%s must be an interval (a string such as \"30 seconds\") or a number of seconds, not %s",
				 key, orch_def_kind(v));
	if (us <= 0)
		orch_def_fail(path, NULL, "%s must be positive", key);
	return us;
}

static void
orch_def_probe_queue(void *arg)
{
	orch_check_name((const char *) arg, "queue");
}

static void
orch_def_probe_signal(void *arg)
{
	orch_check_name((const char *) arg, "signal");
}

/* A wait step's signal: a name as orch_signal takes it */
void
orch_def_check_signal(JsonbValue *v, const char *path)
{
	ErrorData  *ed;

	if (v->type != jbvString)
		orch_def_fail(path, NULL, "signal must be a signal name (a string), not %s", orch_def_kind(v));
	if ((ed = orch_try_data_exception(orch_def_probe_signal,
									  pnstrdup(v->val.string.val, v->val.string.len))) != NULL)
		orch_def_fail_from(path, ed);
}

/* A queue name as orch_check_name accepts it */
void
orch_def_check_queue(JsonbValue *v, const char *path, const char *key)
{
	char	   *q;
	ErrorData  *ed;

	if (v->type != jbvString)
		orch_def_fail(path, NULL, "%s must be a queue name (a string), not %s", key, orch_def_kind(v));
	q = pnstrdup(v->val.string.val, v->val.string.len);
	if ((ed = orch_try_data_exception(orch_def_probe_queue, q)) != NULL)
		orch_def_fail_from(path, ed);
}

static void
orch_def_probe_retry_policy(void *arg)
{
	QueueSettings qs;

	orch_settings_defaults(&qs);
	orch_settings_apply(&qs, (Jsonb *) arg, true);
}

/*
 * A retry policy: the retry keys of the queue settings, validated by the
 * same code as a task's retry_policy.  Returns its retry_safety, if any.
 */
JsonbValue *
orch_def_check_retry_policy(JsonbValue *v, const char *path)
{
	ErrorData  *ed;
	JsonbValue *safety;

	if (!orch_def_is_object(v))
		orch_def_fail(path, NULL, "retry_policy must be an object, not %s", orch_def_kind(v));
	if ((ed = orch_try_data_exception(orch_def_probe_retry_policy, JsonbValueToJsonb(v))) != NULL)
		orch_def_fail_from(path, ed);
	safety = orch_def_get(v->val.binary.data, "retry_safety");
	if (safety != NULL && safety->type != jbvString)
		return NULL;			/* null: the default */
	return safety;
}

/* retry_safety beside a retry_policy: the two must agree */
void
orch_def_check_safety(JsonbValue *v, const char *path, JsonbValue *policy_safety)
{
	orch_def_check_choice(v, path, "retry_safety", safety_names);
	if (policy_safety != NULL &&
		(policy_safety->val.string.len != v->val.string.len ||
		 memcmp(policy_safety->val.string.val, v->val.string.val, v->val.string.len) != 0))
		orch_def_fail(path, NULL, "retry_safety %s conflicts with retry_policy.retry_safety %s",
				 orch_def_show_value(v), orch_def_show_value(policy_safety));
}

/*
 * For each of n strings, the index of the first string equal to it (itself
 * when it is the first); -1 where strs[i] is NULL.  O(n log n), so that a
 * long array cannot make the check quadratic.
 */
typedef struct StrPos
{
	const char *s;
	int			len;
	int			index;
} StrPos;

static int
orch_def_strpos_cmp(const void *a, const void *b)
{
	const StrPos *x = (const StrPos *) a;
	const StrPos *y = (const StrPos *) b;
	int			r = memcmp(x->s, y->s, Min(x->len, y->len));

	if (r != 0)
		return r;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

int *
orch_def_first_occurrences(const char **strs, const int *lens, int n)
{
	StrPos	   *sorted = palloc(sizeof(StrPos) * Max(n, 1));
	int		   *first = palloc(sizeof(int) * Max(n, 1));
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		first[i] = -1;
		if (strs[i] != NULL)
		{
			sorted[m].s = strs[i];
			sorted[m].len = lens[i];
			sorted[m].index = i;
			m++;
		}
	}
	qsort(sorted, m, sizeof(StrPos), orch_def_strpos_cmp);
	for (int k = 0; k < m; k++)
	{
		if (k > 0 && sorted[k].len == sorted[k - 1].len &&
			memcmp(sorted[k].s, sorted[k - 1].s, sorted[k].len) == 0)
			first[sorted[k].index] = first[sorted[k - 1].index];
		else
			first[sorted[k].index] = sorted[k].index;
	}
	return first;
}

