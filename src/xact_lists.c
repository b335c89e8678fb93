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

/*
 * A list after a subtransaction ended (event): its items are structs that
 * begin with OrchLeveled.  Other events leave it as it is.
 */
static List *
leveled_subxact(List *items, SubXactEvent event)
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

static void
xact_callback(XactEvent event, void *arg)
{
	OrchXactLists *s = (OrchXactLists *) arg;

	for (int i = 0; i < lengthof(s->lists) && s->lists[i]; i++)
		*s->lists[i] = NIL;		/* their memory goes with the transaction */
	if (s->reset)
		s->reset(true);
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	OrchXactLists *s = (OrchXactLists *) arg;

	for (int i = 0; i < lengthof(s->lists) && s->lists[i]; i++)
		*s->lists[i] = leveled_subxact(*s->lists[i], event);
	if (event == SUBXACT_EVENT_ABORT_SUB && s->reset)
		s->reset(false);
}

/*
 * Make a module's transaction state follow the transaction: once per
 * backend, before the module first notes anything in it.
 */
void
orch_xact_lists_use(OrchXactLists *s)
{
	if (s->registered)
		return;
	RegisterXactCallback(xact_callback, s);
	RegisterSubXactCallback(subxact_callback, s);
	s->registered = true;
}
