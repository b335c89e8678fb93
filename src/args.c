/*
 * args.c
 *	  Argument checks and value conversions every SQL-callable function
 *	  shares: required arguments, text and correlation ids, intervals,
 *	  payload size, uuids, text datums, the not-found error, and the catch
 *	  of the data exception a value's conversion raises.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

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

/*
 * A text argument as a C string, or NULL when the argument is NULL.  No
 * text argument may be larger than orchestrator.max_payload_size (54000,
 * naming the function and the argument's position, never its value).
 */
char *
orch_text_arg(FunctionCallInfo fcinfo, int argno)
{
	text	   *t;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	t = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(t) > (Size) orch_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("argument %d of %s is too large", argno + 1,
						fcinfo->flinfo ? get_func_name(fcinfo->flinfo->fn_oid) : "the call"),
				 errdetail("It takes %zu bytes; orchestrator.max_payload_size is %d.",
						   (size_t) VARSIZE_ANY_EXHDR(t), orch_max_payload_size)));
	return text_to_cstring(t);
}

/*
 * A key-like text argument (a worker, an owner, a concurrency key, an
 * actor): at most ORCH_MAX_KEY_BYTES, else 22023 without echoing it; NULL
 * when the argument is NULL.
 */
char *
orch_key_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	text	   *t;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	t = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(t) > ORCH_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must have at most %d bytes", name, ORCH_MAX_KEY_BYTES),
				 errdetail("It has %zu.", (size_t) VARSIZE_ANY_EXHDR(t))));
	return text_to_cstring(t);
}

/*
 * How many items one call creates or acts on (what: "tasks", "map items"):
 * at most orchestrator.max_batch_size, else 54000.
 */
void
orch_check_batch_size(int64 n, const char *what)
{
	if (n > orch_max_batch_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many %s in one call: " INT64_FORMAT, what, n),
				 errdetail("orchestrator.max_batch_size is %d.", orch_max_batch_size),
				 errhint("Split the work into smaller calls, or have a superuser raise orchestrator.max_batch_size.")));
}

/*
 * An int argument within [min, max], or dflt when it is NULL; 22023
 * outside, naming the argument.
 */
int32
orch_int4_arg(FunctionCallInfo fcinfo, int argno, const char *name,
			  int32 min, int32 max, int32 dflt)
{
	int32		v;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return dflt;
	v = PG_GETARG_INT32(argno);
	if (v < min || v > max)
	{
		if (max == PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must be at least %d", name, min)));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d", name, min, max)));
	}
	return v;
}

/*
 * An interval argument (a lease, a timeout) in microseconds: positive and
 * at most 100 years, else 22023; dflt when it is NULL.
 */
int64
orch_interval_arg(FunctionCallInfo fcinfo, int argno, const char *name, int64 dflt)
{
	int64		us;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return dflt;
	us = orch_interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (us <= 0 || us > ORCH_MAX_INTERVAL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a positive interval of at most 100 years", name)));
	return us;
}

/*
 * A name of a queue or a workflow definition (what): 1 to 128 bytes of
 * letters, digits, '_', '-', '.' and ':', else 22023.
 */
void
orch_check_name(const char *name, const char *what)
{
	size_t		len = strlen(name);

	if (len == 0 || len > 128)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name must have 1 to 128 characters", what)));
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			  (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' || *c == '.' || *c == ':'))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid %s name \"%s\"", what, name),
					 errdetail("%c%s names use letters, digits, '_', '-', '.' and ':'.",
							   pg_toupper((unsigned char) what[0]), what + 1)));
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
 * An approval reference argument (orch_approve, orch_reject,
 * orch_acknowledge_drift): required (22004), 1 to 256 bytes, else 22023.
 */
char *
orch_approval_ref_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *ref;

	orch_require_arg(fcinfo, argno, "approval_ref");
	ref = orch_text_arg(fcinfo, argno);
	if (ref[0] == '\0' || strlen(ref) > 256)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("approval_ref must have 1 to 256 characters")));
	return ref;
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

/*
 * Run fn(arg), a pure computation (no locks, buffers, catalog or SPI work)
 * that reports a bad value by raising a data exception (SQLSTATE class 22):
 * NULL when the value passed, else that error, copied, with the error state
 * cleared.  Such work needs no subtransaction; any other error (a cancel,
 * out of memory) propagates unchanged.
 */
ErrorData *
orch_try_data_exception(void (*fn) (void *arg), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ErrorData  *volatile caught = NULL;

	PG_TRY();
	{
		fn(arg);
	}
	PG_CATCH();
	{
		ErrorData  *ed;

		MemoryContextSwitchTo(cxt);
		ed = CopyErrorData();
		if (ERRCODE_TO_CATEGORY(ed->sqlerrcode) != ERRCODE_DATA_EXCEPTION)
		{
			FreeErrorData(ed);
			PG_RE_THROW();
		}
		FlushErrorState();
		caught = ed;
	}
	PG_END_TRY();
	return caught;
}

/* The text of an interval, to microseconds (orch_try_interval_text) */
typedef struct IntervalText
{
	const char *text;
	int64		usecs;
} IntervalText;

static void
interval_text_usecs(void *arg)
{
	IntervalText *p = (IntervalText *) arg;
	Interval   *iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(p->text),
														   ObjectIdGetDatum(InvalidOid),
														   Int32GetDatum(-1)));

	p->usecs = orch_interval_usecs(iv);
}

/*
 * The text of an interval ('5 seconds') read from a JSON value (a queue's
 * settings, a workflow definition) as microseconds: NULL and *usecs set when
 * it is one, else the data exception interval_in or orch_interval_usecs
 * raised, for the caller to report where the value was.  A cancel or any
 * other error propagates.
 */
ErrorData *
orch_try_interval_text(const char *text, int64 *usecs)
{
	IntervalText p = {text, 0};
	ErrorData  *ed = orch_try_data_exception(interval_text_usecs, &p);

	*usecs = p.usecs;
	return ed;
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

/* A jsonb argument no larger than orchestrator.max_payload_size, or NULL. */
Jsonb *
orch_jsonb_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	Jsonb	   *j;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	j = PG_GETARG_JSONB_P(argno);
	orch_check_payload_size(j, what);
	return j;
}

/*
 * Strong random bytes for UUIDs, drawn UUID_POOL at a time: a claim of 100
 * tasks makes 100 lease tokens, and each call to pg_strong_random costs a
 * microsecond of fixed overhead in OpenSSL, over 5% of such a claim.  The
 * bytes are the same cryptographic random bytes gen_random_uuid() uses;
 * each is handed out once and wiped as it is.  A pool is its process's own
 * (one filled before a fork is discarded by the child).
 */
#define UUID_POOL 64

static uint8 uuid_pool[UUID_POOL * UUID_LEN];
static int	uuid_pool_left = 0;
static int	uuid_pool_pid = 0;

static void
uuid_random_bytes(uint8 *out)
{
	uint8	   *b;

	if (uuid_pool_left == 0 || uuid_pool_pid != MyProcPid)
	{
		if (!pg_strong_random(uuid_pool, sizeof(uuid_pool)))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate random values")));
		uuid_pool_left = UUID_POOL;
		uuid_pool_pid = MyProcPid;
	}
	b = uuid_pool + (size_t) (--uuid_pool_left) * UUID_LEN;
	memcpy(out, b, UUID_LEN);
	explicit_bzero(b, UUID_LEN);
}

/* A random (version 4) UUID, as gen_random_uuid() makes. */
pg_uuid_t *
orch_new_uuid(void)
{
	pg_uuid_t  *u = (pg_uuid_t *) palloc(sizeof(pg_uuid_t));

	uuid_random_bytes(u->data);
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
