/*
 * retry.c
 *	  The deterministic retry decision and its backoff
 *	  arithmetic, shared by orch_fail, lease recovery and the pure SQL function
 *	  orch_retry_decision.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "funcapi.h"
#include "utils/builtins.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_retry_decision);

static int64
cap(int64 d, int64 max)
{
	return d > max ? max : d;
}

/* Exponential: min(initial * 2^(n-1), max), overflow-safe. */
static int64
exponential_delay(const RetryPolicy *p, int n)
{
	int			shift = n - 1;

	if (shift < 0)
		shift = 0;
	if (p->initial_delay == 0)
		return 0;
	if (shift >= 62 || p->initial_delay > (p->max_delay >> shift))
		return p->max_delay;
	return cap(p->initial_delay << shift, p->max_delay);
}

/* The policy's delay before retry number n (n = failures so far, >= 1). */
static int64
policy_delay(const RetryPolicy *p, int n, int attempts, int64 task_id)
{
	switch (p->backoff)
	{
		case BACKOFF_FIXED:
			return cap(p->initial_delay, p->max_delay);
		case BACKOFF_EXPONENTIAL:
			return exponential_delay(p, n);
		case BACKOFF_SCHEDULE:
			return p->schedule[(n < p->nschedule ? n : p->nschedule) - 1];
		case BACKOFF_JITTERED:
			{
				/* "equal jitter", derived from (task id, attempt) only */
				int64		d = exponential_delay(p, n);
				int64		key[2] = {task_id, attempts};
				uint64		h = hash_bytes_extended((const unsigned char *) key,
													sizeof(key), 0x6f726368);

				return d / 2 + (int64) (h % (uint64) (d / 2 + 1));
			}
	}
	return 0;
}

RetryDecision
orch_decide(const RetryPolicy *p, ErrorClass ec, int attempts, int failures,
			bool terminal, bool has_retry_after, int64 retry_after, int64 task_id)
{
	RetryDecision d = {false, TS_FAILED, NULL, 0};
	TaskState	exhausted = p->escalate ? TS_AWAITING_CONFIRMATION : TS_FAILED;

	if (terminal)
	{
		d.next_state = TS_INVALID;
		d.reason_code = "terminal_immutable";
	}
	else if (p->not_safe_to_retry)
		d.reason_code = "not_safe_to_retry";
	else if (ec == EC_COMPENSATION_REQUIRED)
		d.reason_code = "compensation_required";
	else if (ec == EC_NON_RETRYABLE || (p->retry_on & (1u << ec)) == 0)
		d.reason_code = "non_retryable";
	else if (attempts >= p->max_attempts)
	{
		d.next_state = exhausted;
		d.reason_code = "max_attempts_exhausted";
	}
	else if (failures >= p->max_failures)
	{
		d.next_state = exhausted;
		d.reason_code = "max_failures_exhausted";
	}
	else
	{
		d.retry = true;
		d.next_state = TS_AWAITING_TOOL;
		d.reason_code = "retry_scheduled";
		/* only RATE_LIMITED honours the caller's retry_after */
		if (has_retry_after && ec == EC_RATE_LIMITED)
			d.delay = retry_after;
		else
		{
			d.delay = policy_delay(p, failures, attempts, task_id);
			if (ec == EC_DEPENDENCY_FAILED)
			{
				int64		doubled = d.delay > PG_INT64_MAX / 2 ? PG_INT64_MAX : d.delay * 2;

				doubled = cap(doubled, p->max_delay);
				if (doubled > d.delay)
					d.delay = doubled;
			}
		}
	}
	return d;
}

/*
 * The retry_after argument of orch_fail and orch_retry_decision: false when
 * it is NULL, else its length in microseconds (0 to 100 years) in *usecs.
 */
bool
orch_retry_after_arg(FunctionCallInfo fcinfo, int argno, int64 *usecs)
{
	*usecs = 0;
	if (PG_ARGISNULL(argno))
		return false;
	*usecs = orch_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (*usecs < 0 || *usecs > ORCH_MAX_INTERVAL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_after must be between 0 and 100 years")));
	return true;
}

/*
 * orch_retry_decision(error_class, attempts, failures, policy, retry_after,
 *                     task_id, terminal)
 *	  -> (decision, next_state, reason_code, delay)
 */
Datum
orch_retry_decision(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ErrorClass	ec;
	int			attempts,
				failures;
	QueueSettings qs;
	int64		retry_after;
	bool		has_retry_after;
	RetryDecision d;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	orch_require_arg(fcinfo, 0, "error_class");
	orch_require_arg(fcinfo, 1, "attempts");
	orch_require_arg(fcinfo, 2, "failures");
	ec = orch_error_class_from_name(orch_text_arg(fcinfo, 0));
	attempts = PG_GETARG_INT32(1);
	failures = PG_GETARG_INT32(2);
	if (attempts < 1 || failures < 1 || failures > attempts)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("attempts and failures must be at least 1, and failures at most attempts"),
				 errdetail("They count the executions and failed executions so far, including this one.")));
	orch_settings_defaults(&qs);
	if (!PG_ARGISNULL(3))
		orch_settings_apply(&qs, orch_jsonb_arg(fcinfo, 3, "policy"), false);

	has_retry_after = orch_retry_after_arg(fcinfo, 4, &retry_after);

	d = orch_decide(&qs.policy, ec, attempts, failures,
					PG_ARGISNULL(6) ? false : PG_GETARG_BOOL(6),
					has_retry_after, retry_after,
					PG_ARGISNULL(5) ? 0 : PG_GETARG_INT64(5));

	InitMaterializedSRF(fcinfo, 0);
	values[0] = orch_text_datum(d.retry ? "retry" : "deny");
	if (d.next_state == TS_INVALID)
		nulls[1] = true;
	else
		values[1] = orch_text_datum(orch_state_names[d.next_state]);
	values[2] = orch_text_datum(d.reason_code);
	if (d.retry)
		values[3] = IntervalPGetDatum(orch_usecs_interval(d.delay));
	else
		nulls[3] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
