/*
 * row_triggers.c
 *	  What the row triggers share (the task lifecycle, the run lifecycle,
 *	  user-table state machines): whether a row comes from a restore,
 *	  whether an UPDATE changed anything, and the errors of a refused
 *	  transition.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "utils/datum.h"
#include "utils/rls.h"

#include "orchestrator.h"

/* An insert outside any API call in a restore session (row_security = off). */
bool
orch_restoring(void)
{
	return !orch_event_context()->active && !row_security;
}

/* True when every column of the two tuples is byte-identical. */
bool
orch_tuples_identical(HeapTuple a, HeapTuple b, TupleDesc td)
{
	for (int i = 1; i <= td->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(td, i - 1);
		bool		na,
					nb;
		Datum		da,
					db;

		if (att->attisdropped)
			continue;
		da = heap_getattr(a, i, td, &na);
		db = heap_getattr(b, i, td, &nb);
		if (na != nb)
			return false;
		if (!na && !datum_image_eq(da, db, att->attbyval, att->attlen))
			return false;
	}
	return true;
}

void
orch_raise_invalid_transition(const char *what, const char *from, const char *to)
{
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_INVALID_TRANSITION),
			 errmsg("invalid transition of %s from \"%s\" to \"%s\"", what,
					from ? from : "(new)", to ? to : "NULL")));
}

void
orch_raise_terminal(const char *what, const char *from, const char *to)
{
	ereport(ERROR,
			(errcode(ERRCODE_ORCH_TERMINAL_STATE),
			 errmsg("%s is in terminal state \"%s\" and cannot change (to \"%s\")",
					what, from, to ? to : "NULL"),
			 errdetail("Terminal states are immutable.")));
}
