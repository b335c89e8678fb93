/*
 * settings.c
 *	  Queue settings: defaults, validation of the settings JSON (also used
 *	  for per-task retry policies), and the settings as JSON.
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


const char *const orch_error_class_names[EC_COUNT] = {
	"TRANSIENT", "RETRYABLE", "RATE_LIMITED", "DEPENDENCY_FAILED",
	"NON_RETRYABLE", "COMPENSATION_REQUIRED"
};

static const char *const backoff_names[] = {"fixed", "exponential", "jittered", "schedule"};

#define RETRYABLE_MASK ((1u << EC_TRANSIENT) | (1u << EC_RETRYABLE) | \
						(1u << EC_RATE_LIMITED) | (1u << EC_DEPENDENCY_FAILED))

ErrorClass
orch_error_class_from_name(const char *name)
{
	for (int i = 0; i < EC_COUNT; i++)
		if (strcmp(name, orch_error_class_names[i]) == 0)
			return (ErrorClass) i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown error class \"%s\"", name),
			 errhint("Use TRANSIENT, RETRYABLE, RATE_LIMITED, DEPENDENCY_FAILED, NON_RETRYABLE or COMPENSATION_REQUIRED.")));
	return EC_COUNT;			/* keep compiler quiet */
}

void
orch_settings_defaults(QueueSettings *qs)
{
	memset(qs, 0, sizeof(*qs));
	qs->priority = 0;
	qs->lease = 30 * USECS_PER_SEC;
	qs->idempotency_ttl = 24 * USECS_PER_HOUR;
	qs->timeout = 0;
	qs->concurrency_key_limit = 1;
	qs->policy.max_attempts = 5;
	qs->policy.max_failures = 5;
	qs->policy.backoff = BACKOFF_EXPONENTIAL;
	qs->policy.initial_delay = 5 * USECS_PER_SEC;
	qs->policy.max_delay = 5 * USECS_PER_MINUTE;
	qs->policy.retry_on = RETRYABLE_MASK;
	qs->policy.escalate = false;
	qs->policy.not_safe_to_retry = false;
}

/* ---------------------------------------------------------------------- */

static bool
is_integral(Numeric n)
{
	Numeric		r;

	if (numeric_is_nan(n) || numeric_is_inf(n))
		return false;
	r = DatumGetNumeric(DirectFunctionCall1(numeric_floor, NumericGetDatum(n)));
	return DatumGetBool(DirectFunctionCall2(numeric_eq, NumericGetDatum(n), NumericGetDatum(r)));
}

static void
bad_setting(const char *key, const char *expect)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for setting \"%s\"", key),
			 errdetail("It must be %s.", expect)));
}

static int
setting_int(const char *key, JsonbValue *v, int min)
{
	int64		i;

	if (v->type != jbvNumeric)
		bad_setting(key, "an integer");
	if (!is_integral(v->val.numeric) ||
		fabs(DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow, NumericGetDatum(v->val.numeric)))) > 2e9)
		bad_setting(key, "an integer");
	i = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
	if (i < min || i > PG_INT32_MAX)
	{
		char		buf[64];

		snprintf(buf, sizeof(buf), "an integer of at least %d", min);
		bad_setting(key, buf);
	}
	return (int) i;
}


/* An interval given as a string ('5 seconds') or a number of seconds. */
static int64
setting_interval(const char *key, JsonbValue *v, bool allow_zero)
{
	int64		us = 0;

	if (v->type == jbvNumeric)
	{
		double		secs;

		if (numeric_is_nan(v->val.numeric) || numeric_is_inf(v->val.numeric))
			bad_setting(key, "an interval or a number of seconds");
		secs = DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow, NumericGetDatum(v->val.numeric)));
		if (secs > 1e12 || secs < -1e12)
			bad_setting(key, "an interval of reasonable size");
		us = (int64) (secs * USECS_PER_SEC);
	}
	else if (v->type == jbvString)
	{
		ErrorData  *ed = orch_try_interval_text(pnstrdup(v->val.string.val, v->val.string.len), &us);

		if (ed != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for setting \"%s\"", key),
					 errdetail("%s", ed->message)));
	}
	else
		bad_setting(key, "an interval or a number of seconds");

	if (us < 0 || (!allow_zero && us == 0))
		bad_setting(key, allow_zero ? "a non-negative interval" : "a positive interval");
	if (us > ORCH_MAX_INTERVAL)
		bad_setting(key, "an interval of at most 100 years");
	return us;
}

static char *
setting_string(const char *key, JsonbValue *v, const char *const *choices, int nchoices,
			   const char *expect)
{
	char	   *s;

	if (v->type != jbvString)
		bad_setting(key, expect);
	s = pnstrdup(v->val.string.val, v->val.string.len);
	for (int i = 0; i < nchoices; i++)
		if (strcmp(s, choices[i]) == 0)
			return s;
	bad_setting(key, expect);
	return NULL;
}

/* Iterate the elements of an array value given as jbvBinary */
static void
setting_array(const char *key, JsonbValue *v, JsonbValue **elems, int *nelems)
{
	JsonbIterator *it;
	JsonbValue	ev;
	JsonbIteratorToken tok;
	int			n = 0,
				cap = 8;

	if (v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data))
		bad_setting(key, "an array");
	*elems = palloc(sizeof(JsonbValue) * cap);
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &ev, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (n == cap)
		{
			cap *= 2;
			*elems = repalloc(*elems, sizeof(JsonbValue) * cap);
		}
		(*elems)[n++] = ev;
	}
	*nelems = n;
}

static void
apply_rate_limit(QueueSettings *qs, JsonbValue *v)
{
	JsonbIterator *it;
	JsonbValue	k,
				val;
	JsonbIteratorToken tok;
	static const char *const on_exceed[] = {"record", "error"};

	if (v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		bad_setting("rate_limit", "an object {\"count\": N, \"per\": interval, \"on_exceed\": \"record\" | \"error\"}");
	qs->rate_count = 0;
	qs->rate_per = 0;
	qs->rate_error = false;
	it = JsonbIteratorInit(v->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(k.val.string.val, k.val.string.len);
		tok = JsonbIteratorNext(&it, &val, true);
		if (strcmp(key, "count") == 0)
			qs->rate_count = setting_int("rate_limit.count", &val, 1);
		else if (strcmp(key, "per") == 0)
			qs->rate_per = setting_interval("rate_limit.per", &val, false);
		else if (strcmp(key, "on_exceed") == 0)
			qs->rate_error = strcmp(setting_string("rate_limit.on_exceed", &val, on_exceed, 2,
												   "\"record\" or \"error\""), "error") == 0;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in setting \"rate_limit\"", key)));
	}
	if (qs->rate_count == 0 || qs->rate_per == 0)
		bad_setting("rate_limit", "an object with both \"count\" and \"per\"");
}

/* retry_on: error classes that are retried (never the ones never retried) */
static uint32
setting_retry_on(const char *key, JsonbValue *v)
{
	JsonbValue *elems;
	int			n;
	uint32		mask = 0;

	setting_array(key, v, &elems, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *c;
		ErrorClass	ec;

		if (elems[i].type != jbvString)
			bad_setting(key, "an array of error class names");
		c = pnstrdup(elems[i].val.string.val, elems[i].val.string.len);
		ec = orch_error_class_from_name(c);
		if (((1u << ec) & RETRYABLE_MASK) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for setting \"retry_on\""),
					 errdetail("%s is never retried.", c)));
		mask |= (1u << ec);
	}
	return mask;
}

/* schedule: a non-empty array of intervals */
static void
setting_schedule(const char *key, JsonbValue *v, RetryPolicy *p)
{
	JsonbValue *elems;
	int			n;

	setting_array(key, v, &elems, &n);
	if (n == 0)
		bad_setting(key, "a non-empty array of intervals");
	p->schedule = palloc(sizeof(int64) * n);
	for (int i = 0; i < n; i++)
		p->schedule[i] = setting_interval(key, &elems[i], true);
	p->nschedule = n;
}

/*
 * A key of the retry policy (a queue's settings, or a task's retry_policy);
 * false when key is not one.
 */
static bool
apply_retry_key(RetryPolicy *p, const char *key, JsonbValue *v, bool *backoff_given, bool *schedule_given)
{
	if (strcmp(key, "max_attempts") == 0)
		p->max_attempts = setting_int(key, v, 1);
	else if (strcmp(key, "max_failures") == 0)
		p->max_failures = setting_int(key, v, 1);
	else if (strcmp(key, "backoff") == 0)
	{
		char	   *b = setting_string(key, v, backoff_names, 4,
									   "one of fixed, exponential, jittered, schedule");

		for (int i = 0; i < 4; i++)
			if (strcmp(b, backoff_names[i]) == 0)
				p->backoff = (BackoffKind) i;
		*backoff_given = true;
	}
	else if (strcmp(key, "initial_delay") == 0)
		p->initial_delay = setting_interval(key, v, true);
	else if (strcmp(key, "max_delay") == 0)
		p->max_delay = setting_interval(key, v, true);
	else if (strcmp(key, "schedule") == 0)
	{
		setting_schedule(key, v, p);
		*schedule_given = true;
	}
	else if (strcmp(key, "retry_on") == 0)
		p->retry_on = setting_retry_on(key, v);
	else if (strcmp(key, "on_exhausted") == 0)
	{
		static const char *const ch[] = {"fail", "escalate"};

		p->escalate = strcmp(setting_string(key, v, ch, 2, "\"fail\" or \"escalate\""),
							 "escalate") == 0;
	}
	else if (strcmp(key, "retry_safety") == 0)
	{
		static const char *const ch[] = {"SAFE_TO_RETRY", "NOT_SAFE_TO_RETRY",
		"SAFE_TO_RETRY_WITH_GUARD"};

		p->not_safe_to_retry =
			strcmp(setting_string(key, v, ch, 3,
								  "SAFE_TO_RETRY, NOT_SAFE_TO_RETRY or SAFE_TO_RETRY_WITH_GUARD"),
				   "NOT_SAFE_TO_RETRY") == 0;
	}
	else
		return false;
	return true;
}

/* A key of a queue's own settings; false when key is not one */
static bool
apply_queue_key(QueueSettings *qs, const char *key, JsonbValue *v)
{
	if (strcmp(key, "priority") == 0)
	{
		if (v->type != jbvNumeric || !is_integral(v->val.numeric) ||
			fabs(DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
													NumericGetDatum(v->val.numeric)))) > PG_INT32_MAX)
			bad_setting(key, "an integer between -2147483648 and 2147483647");
		qs->priority = DatumGetInt32(DirectFunctionCall1(numeric_int4,
														 NumericGetDatum(v->val.numeric)));
	}
	else if (strcmp(key, "lease") == 0)
		qs->lease = setting_interval(key, v, false);
	else if (strcmp(key, "idempotency_ttl") == 0)
		qs->idempotency_ttl = setting_interval(key, v, false);
	else if (strcmp(key, "timeout") == 0)
		qs->timeout = setting_interval(key, v, false);
	else if (strcmp(key, "concurrency_key_limit") == 0)
		qs->concurrency_key_limit = setting_int(key, v, 1);
	else if (strcmp(key, "owner_limit") == 0)
		qs->owner_limit = setting_int(key, v, 1);
	else if (strcmp(key, "queue_limit") == 0)
		qs->queue_limit = setting_int(key, v, 1);
	else if (strcmp(key, "rate_limit") == 0)
		apply_rate_limit(qs, v);
	else if (strcmp(key, "fairness") == 0)
	{
		static const char *const ch[] = {"none", "round_robin"};

		qs->fair = strcmp(setting_string(key, v, ch, 2, "\"none\" or \"round_robin\""),
						  "round_robin") == 0;
	}
	else if (strcmp(key, "fairness_key") == 0)
	{
		static const char *const ch[] = {"tenant", "concurrency_key"};

		qs->fair_by_key = strcmp(setting_string(key, v, ch, 2, "\"tenant\" or \"concurrency_key\""),
								 "concurrency_key") == 0;
	}
	else
		return false;
	return true;
}

/*
 * Apply a settings object over qs, validating every key.  With retry_only,
 * only the retry-policy keys are accepted (per-task retry_policy).
 */
void
orch_settings_apply(QueueSettings *qs, Jsonb *settings, bool retry_only)
{
	JsonbIterator *it;
	JsonbValue	k,
				v;
	JsonbIteratorToken tok;
	bool		backoff_given = false;
	bool		schedule_given = false;
	const char *what = retry_only ? "retry_policy" : "settings";

	if (settings == NULL)
		return;
	if (!JB_ROOT_IS_OBJECT(settings) || JB_ROOT_IS_SCALAR(settings))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", what)));

	it = JsonbIteratorInit(&settings->root);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(k.val.string.val, k.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		if (v.type == jbvNull)
			continue;			/* null means "the default" */
		if (apply_retry_key(&qs->policy, key, &v, &backoff_given, &schedule_given))
			continue;
		if (retry_only)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in %s", key, what),
					 errhint("A task's retry_policy accepts max_attempts, max_failures, backoff, initial_delay, max_delay, schedule, retry_on, on_exhausted and retry_safety.")));
		if (!apply_queue_key(qs, key, &v))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unknown key \"%s\" in %s", key, what)));
	}
	if (schedule_given && !backoff_given)
		qs->policy.backoff = BACKOFF_SCHEDULE;
	if (qs->policy.backoff == BACKOFF_SCHEDULE && qs->policy.nschedule == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("backoff \"schedule\" needs a \"schedule\" array of intervals")));
}

/* ---------------------------------------------------------------------- */

/*
 * An interval as text in the "postgres" style ('00:00:30', '1 day 02:00:00')
 * whatever the session's IntervalStyle, so stored and shown settings are
 * stable.
 */
static void
append_interval_text(StringInfo buf, int64 us)
{
	struct pg_itm itm;
	char		str[MAXDATELEN + 1];

	interval2itm(*orch_usecs_interval(us), &itm);
	EncodeInterval(&itm, INTSTYLE_POSTGRES, str);
	escape_json(buf, str);
}

static void
append_interval(StringInfo buf, const char *key, int64 us)
{
	appendStringInfo(buf, ", \"%s\": ", key);
	append_interval_text(buf, us);
}

/* The effective settings as a JSON object with every key */
Jsonb *
orch_settings_to_jsonb(const QueueSettings *qs)
{
	StringInfoData b;
	const RetryPolicy *p = &qs->policy;
	bool		first = true;

	initStringInfo(&b);
	appendStringInfo(&b, "{\"priority\": %d", qs->priority);
	append_interval(&b, "lease", qs->lease);
	appendStringInfo(&b, ", \"max_attempts\": %d, \"max_failures\": %d, \"backoff\": \"%s\"",
					 p->max_attempts, p->max_failures, backoff_names[p->backoff]);
	append_interval(&b, "initial_delay", p->initial_delay);
	append_interval(&b, "max_delay", p->max_delay);
	appendStringInfoString(&b, ", \"schedule\": ");
	if (p->nschedule == 0)
		appendStringInfoString(&b, "null");
	else
	{
		appendStringInfoChar(&b, '[');
		for (int i = 0; i < p->nschedule; i++)
		{
			if (i > 0)
				appendStringInfoString(&b, ", ");
			append_interval_text(&b, p->schedule[i]);
		}
		appendStringInfoChar(&b, ']');
	}
	appendStringInfoString(&b, ", \"retry_on\": [");
	for (int i = 0; i < EC_COUNT; i++)
		if (p->retry_on & (1u << i))
		{
			appendStringInfo(&b, "%s\"%s\"", first ? "" : ", ", orch_error_class_names[i]);
			first = false;
		}
	appendStringInfo(&b, "], \"on_exhausted\": \"%s\", \"retry_safety\": \"%s\"",
					 p->escalate ? "escalate" : "fail",
					 p->not_safe_to_retry ? "NOT_SAFE_TO_RETRY" : "SAFE_TO_RETRY");
	appendStringInfo(&b, ", \"concurrency_key_limit\": %d", qs->concurrency_key_limit);
	if (qs->owner_limit > 0)
		appendStringInfo(&b, ", \"owner_limit\": %d", qs->owner_limit);
	else
		appendStringInfoString(&b, ", \"owner_limit\": null");
	if (qs->queue_limit > 0)
		appendStringInfo(&b, ", \"queue_limit\": %d", qs->queue_limit);
	else
		appendStringInfoString(&b, ", \"queue_limit\": null");
	if (qs->rate_count > 0)
	{
		appendStringInfo(&b, ", \"rate_limit\": {\"count\": %d", qs->rate_count);
		append_interval(&b, "per", qs->rate_per);
		appendStringInfo(&b, ", \"on_exceed\": \"%s\"}", qs->rate_error ? "error" : "record");
	}
	else
		appendStringInfoString(&b, ", \"rate_limit\": null");
	appendStringInfo(&b, ", \"fairness\": \"%s\", \"fairness_key\": \"%s\"",
					 qs->fair ? "round_robin" : "none",
					 qs->fair_by_key ? "concurrency_key" : "tenant");
	append_interval(&b, "idempotency_ttl", qs->idempotency_ttl);
	if (qs->timeout > 0)
		append_interval(&b, "timeout", qs->timeout);
	else
		appendStringInfoString(&b, ", \"timeout\": null");
	appendStringInfoChar(&b, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(b.data)));
}
