/*
 * locks.c
 *	  Transaction-scoped advisory locks on names (a queue, a key, a run):
 *	  the one place that turns a name into PostgreSQL's advisory lock keys.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"

#include "orchestrator.h"

/* advisory lock class of the orchestrator: 'or' (the hash seed of every key) */
#define ORCH_LOCK_CLASS 0x6f72

/*
 * The advisory lock key of a name: a 64-bit hash of (kind, a, b), used as
 * both int4 halves of the two-key form, so that a producer choosing names
 * cannot make two keys collide by searching a 32-bit space.
 */
static void
lock_key(const char *kind, const char *a, const char *b, int32 *k1, int32 *k2)
{
	StringInfoData s;
	uint64		h;

	initStringInfo(&s);
	appendStringInfoString(&s, kind);
	appendStringInfoChar(&s, '\x1f');
	appendStringInfoString(&s, a);
	appendStringInfoChar(&s, '\x1f');
	if (b)
		appendStringInfoString(&s, b);
	h = hash_bytes_extended((const unsigned char *) s.data, s.len, ORCH_LOCK_CLASS);
	pfree(s.data);
	*k1 = (int32) (uint32) (h >> 32);
	*k2 = (int32) (uint32) h;
}

/* Call an advisory-lock function of core on the name's two-int4 key. */
static Datum
call_on_key(PGFunction fn, const char *kind, const char *a, const char *b)
{
	int32		k1,
				k2;

	lock_key(kind, a, b, &k1, &k2);
	return DirectFunctionCall2(fn, Int32GetDatum(k1), Int32GetDatum(k2));
}

/* Shared transaction-scoped advisory lock: held by enqueues against a drop. */
void
orch_xact_lock_shared(const char *kind, const char *a, const char *b)
{
	call_on_key(pg_advisory_xact_lock_shared_int4, kind, a, b);
}

/* Try the exclusive lock; false when another transaction holds it. */
bool
orch_xact_try_lock(const char *kind, const char *a, const char *b)
{
	return DatumGetBool(call_on_key(pg_try_advisory_xact_lock_int4, kind, a, b));
}

/* Transaction-scoped advisory lock on a name (never a session lock). */
void
orch_xact_lock(const char *kind, const char *a, const char *b)
{
	call_on_key(pg_advisory_xact_lock_int4, kind, a, b);
}
