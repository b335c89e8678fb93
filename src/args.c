/*
 * args.c
 *	  Argument checks and value conversions every SQL-callable function
 *	  shares: required arguments, text and correlation ids, intervals,
 *	  payload size, uuids, text datums, the not-found error.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "orchestrator.h"

/* Raise 22004 when a required argument is NULL. */
void
orch_require_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/* A text argument as a C string, or NULL when the argument is NULL. */
char *
orch_text_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * A correlation id argument: NULL when absent; otherwise 1 to 200
 * characters with no control characters, else 22023.
 */
char *
orch_correlation_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *c = orch_text_arg(fcinfo, argno);

	if (c == NULL)
		return NULL;
	if (c[0] == '\0' || pg_mbstrlen(c) > 200)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("correlation_id must be 1 to 200 characters")));
	for (const char *p = c; *p; p++)
		if ((unsigned char) *p < 0x20 || *p == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("correlation_id must not contain control characters")));
	return c;
}

/*
 * Interval to microseconds.  Months count as 30 days, days as 24 hours, as
 * interval comparison does.
 */
int64
orch_interval_usecs(Interval *iv)
{
	int128		us = (int128) iv->time
		+ (int128) iv->day * USECS_PER_DAY
		+ (int128) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;

	if (us > PG_INT64_MAX || us < PG_INT64_MIN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("interval out of range")));
	return (int64) us;
}

Interval *
orch_usecs_interval(int64 usecs)
{
	Interval   *iv = (Interval *) palloc0(sizeof(Interval));

	iv->time = usecs;
	return iv;
}

void
orch_check_payload_size(Jsonb *j, const char *what)
{
	if (VARSIZE(j) > (Size) orch_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too large", what),
				 errdetail("It takes %zu bytes; orchestrator.max_payload_size is %d.",
						   (size_t) VARSIZE(j), orch_max_payload_size),
				 errhint("Store large data elsewhere and pass a reference.")));
}

/* A random (version 4) UUID, as gen_random_uuid() makes. */
pg_uuid_t *
orch_new_uuid(void)
{
	pg_uuid_t  *u = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));

	if (!pg_strong_random(u->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	u->data[6] = (u->data[6] & 0x0f) | 0x40;
	u->data[8] = (u->data[8] & 0x3f) | 0x80;
	return u;
}

Datum
orch_text_datum(const char *s)
{
	return PointerGetDatum(cstring_to_text(s));
}

/* A text[] of one element. */
Datum
orch_text_array1(const char *s)
{
	Datum		one = orch_text_datum(s);

	return PointerGetDatum(construct_array(&one, 1, TEXTOID, -1, false, TYPALIGN_INT));
}

/* OR005: what ("task", "command") id does not exist (for this caller). */
void
orch_not_found(const char *what, int64 id)
{
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_NOT_FOUND),
			 errmsg("%s " INT64_FORMAT " does not exist", what, id)));
}
