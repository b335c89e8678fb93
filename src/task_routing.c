/*
 * task_routing.c
 *	  On Citus: the tenant of a task or command id, as far as this backend
 *	  has learnt it (from a claim, an enqueue, or a lookup across the shards),
 *	  so that a later call by that id goes straight to the tenant's shard.
 *	  A routing hint only: the statements still filter on the caller's
 *	  tenants, and a hint whose statement finds nothing gives way to the
 *	  lookup (tenant.c: orch_scope_lookup_again).
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "orchestrator.h"

/*
 * Ids remembered; when the table is full, everything is dropped (a worker
 * only needs the ids it holds leases on, a few at a time).
 */
#define ROUTE_MAX_IDS		32768

/* A tenant name longer than this is not remembered (they have 1 to 128) */
#define ROUTE_TENANT_LEN	128

typedef struct RouteKey
{
	int64		id;
	int32		kind;			/* OrchRouteKind */
	int32		pad;			/* zero: the key is hashed as bytes */
} RouteKey;

typedef struct RouteEntry
{
	RouteKey	key;
	const char *tenant;			/* the key of its entry in route_tenants */
} RouteEntry;

typedef struct RouteTenant
{
	char		name[ROUTE_TENANT_LEN + 1];
} RouteTenant;

static MemoryContext route_cxt = NULL;
static HTAB *route_ids = NULL;
static HTAB *route_tenants = NULL;	/* each tenant name stored once */
static bool route_stale = false;
static bool route_registered = false;

/*
 * orch.tasks was invalidated (the extension dropped and created again, its
 * ids counting anew; the tables distributed or truncated): drop everything
 * at the next use.  Called during invalidation processing, so nothing is
 * freed here.
 */
static void
route_invalidate(void)
{
	route_stale = true;
}

/* The tables, created (again) in their own context when needed. */
static void
route_open(void)
{
	HASHCTL		ctl;

	if (!route_registered)
	{
		orch_schema_on_reset(route_invalidate);
		route_registered = true;
	}
	if (route_cxt == NULL)
		route_cxt = AllocSetContextCreate(TopMemoryContext, "orchestrator task routing",
										  ALLOCSET_DEFAULT_SIZES);
	if (route_stale ||
		(route_ids != NULL && (hash_get_num_entries(route_ids) >= ROUTE_MAX_IDS ||
							   hash_get_num_entries(route_tenants) >= ROUTE_MAX_IDS)))
	{
		MemoryContextReset(route_cxt);
		route_ids = NULL;
		route_tenants = NULL;
		route_stale = false;
	}
	if (route_ids != NULL)
		return;
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(RouteKey);
	ctl.entrysize = sizeof(RouteEntry);
	ctl.hcxt = route_cxt;
	route_ids = hash_create("orchestrator task routing", 1024, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = ROUTE_TENANT_LEN + 1;
	ctl.entrysize = sizeof(RouteTenant);
	ctl.hcxt = route_cxt;
	route_tenants = hash_create("orchestrator task routing tenants", 64, &ctl,
								HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

static void
route_key(RouteKey *k, OrchRouteKind kind, int64 id)
{
	memset(k, 0, sizeof(*k));
	k->id = id;
	k->kind = (int32) kind;
}

/*
 * Remember that row id of kind belongs to tenant.  Only for a tenant known
 * for sure (the row was written or read with it), and only on Citus: off
 * Citus there is nothing to route.
 */
void
orch_route_note(OrchRouteKind kind, int64 id, const char *tenant)
{
	RouteKey	k;
	RouteEntry *e;
	RouteTenant *t;
	char		name[ROUTE_TENANT_LEN + 1];

	if (tenant == NULL || strlen(tenant) > ROUTE_TENANT_LEN || !orch_citus())
		return;
	route_open();
	/* the key of a string table is a zero-padded buffer of its key size */
	memset(name, 0, sizeof(name));
	strlcpy(name, tenant, sizeof(name));
	t = hash_search(route_tenants, name, HASH_ENTER, NULL);
	route_key(&k, kind, id);
	e = hash_search(route_ids, &k, HASH_ENTER, NULL);
	e->tenant = t->name;
}

/* Remember the rows of the last result (their ids in column col) as tenant's. */
void
orch_route_note_rows(OrchRouteKind kind, SPITupleTable *tt, uint64 n, int col,
					 const char *tenant)
{
	if (!orch_citus())
		return;
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(tt->vals[i], tt->tupdesc, col, &isnull);

		if (!isnull)
			orch_route_note(kind, DatumGetInt64(d), tenant);
	}
}

/* The tenant remembered for row id of kind (palloc'd), or NULL. */
char *
orch_route_find(OrchRouteKind kind, int64 id)
{
	RouteKey	k;
	RouteEntry *e;

	route_open();
	route_key(&k, kind, id);
	e = hash_search(route_ids, &k, HASH_FIND, NULL);
	return e ? pstrdup(e->tenant) : NULL;
}

/* Forget row id of kind (its hint found nothing). */
void
orch_route_forget(OrchRouteKind kind, int64 id)
{
	RouteKey	k;

	route_open();
	route_key(&k, kind, id);
	(void) hash_search(route_ids, &k, HASH_REMOVE, NULL);
}
