/*
 * xact_lists.c
 *	  State a backend keeps for the transaction in progress: lists whose
 *	  items remember the (sub)transaction nesting level that noted them (the
 *	  buffered events, the pending key releases and held key locks, the notes
 *	  of finished step tasks).  An aborted subtransaction takes back what it
 *	  noted; a committed one hands it to its parent.
 */
#include "postgres.h"

#include "access/xact.h"

#include "orchestrator.h"

/* Register a module's end-of-transaction callbacks once per backend. */
void
orch_register_xact_callbacks(bool *registered, XactCallback xact, SubXactCallback subxact)
{
	if (*registered)
		return;
	RegisterXactCallback(xact, NULL);
	RegisterSubXactCallback(subxact, NULL);
	*registered = true;
}

/*
 * The list after a subtransaction ended (event): its items are structs that
 * begin with OrchLeveled.  Other events leave it as it is.
 */
List *
orch_leveled_subxact(List *items, SubXactEvent event)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return items;
	foreach(lc, items)
	{
		OrchLeveled *item = (OrchLeveled *) lfirst(lc);

		if (item->level < level)
			continue;
		if (event == SUBXACT_EVENT_ABORT_SUB)
			items = foreach_delete_current(items, lc);
		else
			item->level = level - 1;
	}
	return items;
}
