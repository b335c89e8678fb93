/*
 * tenant.c
 *	  Tenant isolation: which tenants the calling role may
 *	  see and act on, from the bindings in orch.tenant_bindings
 *	  (orch_bind_tenant / orch_unbind_tenant), and the effective actor that
 *	  events record.  A role bound to no tenant (directly or through a role it
 *	  has the privileges of) is unrestricted; a bound role sees exactly the
 *	  union of its bindings.  Superusers are never restricted.  On Citus, a
 *	  call is also scoped to the one tenant it acts in, so that every
 *	  statement it runs is a single-shard query.  The binding calls
 *	  themselves are in bindings.c.
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_tenant_visible);
PG_FUNCTION_INFO_V1(orch_caller_tenants);
PG_FUNCTION_INFO_V1(orch_caller_is_admin);

/*
 * The caller's tenants, cached for one transaction (bindings and role
 * membership are read once per transaction and pair of roles).
 */
static LocalTransactionId cache_lxid = InvalidLocalTransactionId;
static Oid	cache_role = InvalidOid;
static Oid	cache_session = InvalidOid;
static bool cache_restricted = false;
static int	cache_ntenants = 0;
static char **cache_tenants = NULL;
static MemoryContext cache_cxt = NULL;

/*
 * The role on whose behalf an API call acts: the current role outside the
 * extension's SECURITY DEFINER functions (the login role, or the role chosen
 * with SET ROLE).
 */
Oid
orch_caller_role(void)
{
	return GetOuterUserId();
}

/* Its name, looked up once per transaction and role. */
char *
orch_current_actor(void)
{
	static LocalTransactionId lxid = InvalidLocalTransactionId;
	static Oid	role = InvalidOid;
	static char name[NAMEDATALEN];
	Oid			r = orch_caller_role();

	if (lxid != MyProc->lxid || role != r || lxid == InvalidLocalTransactionId)
	{
		strlcpy(name, GetUserNameFromId(r, false), NAMEDATALEN);
		role = r;
		lxid = MyProc->lxid;
	}
	return pstrdup(name);
}



/*
 * The tenants one role is bound to (its own bindings and those of every role
 * whose privileges it has), sorted; -1 when it is bound to none.
 *
 * A binding (0.8.0) names its role by OID in the cluster that bound it
 * (cluster_id: that cluster's system identifier), which follows a rename,
 * and by name, which is what a dump restored into another cluster keeps:
 * there the OIDs mean nothing (they may be another role's), so a binding of
 * another cluster applies to the role of that name, if there is one yet (a
 * role created later with the name is bound: restoring without the roles
 * fails closed).  0.7.0 kept a regrole.
 */
static int
role_tenants(Oid role, char ***out)
{
	OrchArgs	a = {0};
	int			n;

	*out = NULL;
	if (superuser_arg(role))
		return -1;
	orch_arg(&a, OIDOID, ObjectIdGetDatum(role), false);
	if (orch_schema_keyed_bindings())
	{
		orch_arg_int8(&a, (int64) GetSystemIdentifier());
		n = (int) orch_args_sql(&a, "SELECT DISTINCT b.tenant_id FROM orch.tenant_bindings b"
								" JOIN pg_catalog.pg_roles r"
								"   ON (b.cluster_id = $2 AND r.oid = b.role_oid)"
								"   OR (b.cluster_id <> $2 AND r.rolname = b.role)"
								" WHERE pg_catalog.pg_has_role($1, r.oid, 'USAGE')"
								" ORDER BY 1",
								true, 0, SPI_OK_SELECT);
	}
	else
		n = (int) orch_args_sql(&a, "SELECT DISTINCT b.tenant_id FROM orch.tenant_bindings b"
								" JOIN pg_catalog.pg_roles r ON r.oid = b.role"
								" WHERE pg_catalog.pg_has_role($1, r.oid, 'USAGE')"
								" ORDER BY 1",
								true, 0, SPI_OK_SELECT);
	if (n == 0)
		return -1;
	*out = palloc(sizeof(char *) * n);
	for (int i = 0; i < n; i++)
		(*out)[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
	return n;
}

/* The owner of orch.tenant_bindings (the extension's owner). */
static Oid
bindings_owner(void)
{
	Oid			relid = orch_relid("tenant_bindings");
	HeapTuple	tup;
	Oid			owner;

	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "orchestrator: orch.tenant_bindings not found");
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Load the caller's tenants.  Both the current role and the session (login)
 * role count: a login role bound to a tenant stays bound after SET ROLE to a
 * group role it belongs to (orch_worker, say), and a superuser session that
 * sets a bound role is bound.  When both are bound, the caller may act on
 * the tenants common to both.  The cache is marked invalid before the lookup
 * and valid only after it, so an error during the lookup never leaves a
 * stale "unrestricted" entry behind.
 */
static void
load_caller_tenants(void)
{
	Oid			role = orch_caller_role();
	Oid			session = GetSessionUserId();
	MemoryContext old;
	char	  **a = NULL;
	char	  **b = NULL;
	int			na = -1;
	int			nb = -1;

	if (cache_lxid == MyProc->lxid && cache_role == role && cache_session == session &&
		cache_lxid != InvalidLocalTransactionId)
		return;
	cache_lxid = InvalidLocalTransactionId;
	if (cache_cxt == NULL)
		cache_cxt = AllocSetContextCreate(TopMemoryContext, "orchestrator tenant cache",
										  ALLOCSET_SMALL_SIZES);
	MemoryContextReset(cache_cxt);
	cache_tenants = NULL;
	cache_ntenants = 0;
	cache_restricted = false;

	if (!superuser_arg(role))
	{
		Oid			save_user;
		int			save_sec;

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "orchestrator: SPI_connect failed");
		/*
		 * Read as the owner of the bindings: a caller of a SECURITY INVOKER
		 * function (orch_attach_state_machine) has no privilege on them.
		 */
		GetUserIdAndSecContext(&save_user, &save_sec);
		SetUserIdAndSecContext(bindings_owner(), save_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		PG_TRY();
		{
			na = role_tenants(role, &a);
			if (session != role)
				nb = role_tenants(session, &b);
		}
		PG_FINALLY();
		{
			SetUserIdAndSecContext(save_user, save_sec);
		}
		PG_END_TRY();
		old = MemoryContextSwitchTo(cache_cxt);
		if (na >= 0 || nb >= 0)
		{
			cache_restricted = true;
			cache_tenants = palloc(sizeof(char *) * Max(Max(na, nb), 1));
			if (na >= 0 && nb >= 0)
			{
				/* both sorted: their intersection */
				int			i = 0,
							j = 0;

				while (i < na && j < nb)
				{
					int			c = strcmp(a[i], b[j]);

					if (c == 0)
					{
						cache_tenants[cache_ntenants++] = pstrdup(a[i]);
						i++, j++;
					}
					else if (c < 0)
						i++;
					else
						j++;
				}
			}
			else
			{
				char	  **src = na >= 0 ? a : b;
				int			n = na >= 0 ? na : nb;

				for (int i = 0; i < n; i++)
					cache_tenants[cache_ntenants++] = pstrdup(src[i]);
			}
		}
		MemoryContextSwitchTo(old);
		SPI_finish();
	}
	cache_role = role;
	cache_session = session;
	cache_lxid = MyProc->lxid;
}

/* Is the caller bound to tenants (and so restricted to them)? */
bool
orch_caller_restricted(void)
{
	load_caller_tenants();
	return cache_restricted;
}

/* May the caller see and act on this tenant's data? */
bool
orch_tenant_allowed(const char *tenant)
{
	load_caller_tenants();
	if (!cache_restricted)
		return true;
	if (tenant == NULL)
		return false;
	for (int i = 0; i < cache_ntenants; i++)
		if (strcmp(cache_tenants[i], tenant) == 0)
			return true;
	return false;
}

/*
 * Did the last statement find a row the caller may see?  Its first row's
 * column col holds the tenant.  Statements filter on the caller's tenants
 * already; this holds where a filter cannot (Citus pushes it to a shard).
 */
bool
orch_found_visible(int col)
{
	return SPI_processed > 0 &&
		orch_tenant_allowed(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col));
}

/*
 * The caller's tenants as a text[] Datum for statements that filter on
 * tenant_id = ANY(...); NULL (isnull) when the caller is unrestricted.
 */
Datum
orch_caller_tenants_datum(bool *isnull)
{
	Datum	   *elems;
	const char *scoped = orch_scoped_tenant();

	load_caller_tenants();
	/*
	 * On Citus, a call scoped to one tenant filters on it (distributed.c);
	 * never one the caller may not see (then nothing: an empty array).
	 */
	if (scoped != NULL && !orch_tenant_allowed(scoped))
	{
		*isnull = false;
		return PointerGetDatum(construct_empty_array(TEXTOID));
	}
	if (scoped != NULL)
	{
		*isnull = false;
		return orch_text_array1(scoped);
	}
	*isnull = !cache_restricted;
	if (!cache_restricted)
		return (Datum) 0;
	elems = palloc(sizeof(Datum) * cache_ntenants);
	for (int i = 0; i < cache_ntenants; i++)
		elems[i] = orch_text_datum(cache_tenants[i]);
	return PointerGetDatum(construct_array(elems, cache_ntenants, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/* The caller's tenant when it is bound to exactly one, else NULL. */
char *
orch_caller_only_tenant(void)
{
	load_caller_tenants();
	if (cache_restricted && cache_ntenants == 1)
		return pstrdup(cache_tenants[0]);
	return NULL;
}

/* Set SPI argument i to the caller's tenants (SQL NULL when unrestricted). */
void
orch_spi_caller_tenants(Datum *values, char *nulls, int i)
{
	bool		unrestricted;

	values[i] = orch_caller_tenants_datum(&unrestricted);
	nulls[i] = unrestricted ? 'n' : ' ';
}

/*
 * The tenant a producer call writes to: the one it names (which it must be
 * allowed), else its only binding, else 'default'.  42501 for a tenant the
 * caller is not bound to.
 */
char *
orch_resolve_tenant(const char *requested)
{
	if (requested != NULL && requested[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant must not be empty")));
	if (requested != NULL && strlen(requested) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant must have 1 to 128 characters")));
	load_caller_tenants();
	if (requested == NULL)
	{
		if (cache_restricted && cache_ntenants == 1)
			return pstrdup(cache_tenants[0]);
		requested = ORCH_DEFAULT_TENANT;
		if (cache_restricted && !orch_tenant_allowed(requested))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("role \"%s\" is bound to several tenants and must name one",
							orch_current_actor()),
					 errhint("Pass tenant => one of the role's tenants.")));
	}
	orch_require_tenant(requested);
	return pstrdup(requested);
}

/* 42501 unless the caller may act on this tenant. */
void
orch_require_tenant(const char *tenant)
{
	if (!orch_tenant_allowed(tenant))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" may not act on tenant \"%s\"",
						orch_current_actor(), tenant),
				 errdetail("The role is bound to other tenants (orch_bind_tenant).")));
}

/* 42501 for a bound caller: the call acts on every tenant. */
void
orch_require_unrestricted(const char *what)
{
	if (orch_caller_restricted())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s acts on every tenant; role \"%s\" is bound to tenants",
						what, orch_current_actor()),
				 errhint("Call it as a role that is not bound to tenants.")));
}

/* Is the caller a member of orch_admin (or a superuser)? */
bool
orch_caller_is_admin_role(void)
{
	Oid			admin = get_role_oid("orch_admin", true);
	Oid			role = orch_caller_role();

	if (superuser_arg(role))
		return true;
	return OidIsValid(admin) && has_privs_of_role(role, admin);
}

/* ----------------------------------------------------------------------
 * SQL-callable
 * ---------------------------------------------------------------------- */

/* orch.tenant_visible(tenant text) -> boolean: for views and RLS policies */
Datum
orch_tenant_visible(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(orch_tenant_allowed(text_to_cstring(PG_GETARG_TEXT_PP(0))));
}

/* orch_caller_tenants() -> text[]: NULL when the caller is unrestricted */
Datum
orch_caller_tenants(PG_FUNCTION_ARGS)
{
	bool		isnull;
	Datum		d = orch_caller_tenants_datum(&isnull);

	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(d);
}

/* orch.caller_is_admin() -> boolean: may the caller read lease tokens? */
Datum
orch_caller_is_admin(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(orch_caller_is_admin_role());
}

/* Forget the cached bindings (they just changed). */
void
orch_tenant_cache_forget(void)
{
	cache_lxid = InvalidLocalTransactionId;
}

/* OrchArgs: the caller's tenants (text[], NULL: every tenant) */
void
orch_arg_caller_tenants(OrchArgs *a)
{
	orch_arg(a, TEXTARRAYOID, (Datum) 0, true);
	orch_spi_caller_tenants(a->values, a->nulls, a->n - 1);
}

/* OrchArgs: the scoped tenant (text[], NULL: unscoped) */
void
orch_arg_scope_tenants(OrchArgs *a)
{
	orch_arg(a, TEXTARRAYOID, (Datum) 0, true);
	orch_spi_scope_tenants(a->values, a->nulls, a->n - 1);
}

/* ----------------------------------------------------------------------
 * On Citus: the tenant one call is scoped to
 * ---------------------------------------------------------------------- */
/*
 * The tenant the current call acts in, on Citus only.  A call that acts on
 * one task (or maintenance, tenant by tenant) sets it; the statements it
 * runs then filter on that tenant (orch_spi_caller_tenants), which makes
 * each a single-shard router query: Citus refuses FOR UPDATE across shards.
 * Cleared when the call ends, at transaction end, and by the abort of the
 * subtransaction that set it, so an error in one call never scopes the next.
 */
static char *scope_tenant = NULL;
static SubTransactionId scope_subid = InvalidSubTransactionId;	/* where it was set */
/* the kind of rows whose remembered tenant the scope is (NONE: a sure scope) */
static OrchRouteKind scope_hint = ORCH_ROUTE_NONE;

const char *
orch_scoped_tenant(void)
{
	return scope_tenant;
}

static Datum one_id(int64 id);
static void scope_xact_callback(XactEvent event, void *arg);
static void scope_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
								   SubTransactionId parentSubid, void *arg);

void
orch_scope_tenant(const char *tenant)
{
	static bool registered = false;

	if (!registered)
	{
		RegisterXactCallback(scope_xact_callback, NULL);
		RegisterSubXactCallback(scope_subxact_callback, NULL);
		registered = true;
	}
	if (scope_tenant != NULL)
		pfree(scope_tenant);
	scope_hint = ORCH_ROUTE_NONE;
	scope_tenant = tenant ? MemoryContextStrdup(TopMemoryContext, tenant) : NULL;
	scope_subid = tenant ? GetCurrentSubTransactionId() : InvalidSubTransactionId;
}

/* Set SPI argument i (text[]) to the scoped tenant, SQL NULL when unscoped. */
void
orch_spi_scope_tenants(Datum *values, char *nulls, int i)
{
	if (scope_tenant == NULL)
	{
		values[i] = (Datum) 0;
		nulls[i] = 'n';
	}
	else
	{
		values[i] = orch_text_array1(scope_tenant);
		nulls[i] = ' ';
	}
}

void
orch_scope_clear(void)
{
	orch_scope_tenant(NULL);
}

static void
scope_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		orch_scope_clear();
}

static void
scope_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	/* only a scope set inside the aborted subtransaction goes with it */
	if (event == SUBXACT_EVENT_ABORT_SUB && scope_tenant != NULL && scope_subid >= mySubid)
		orch_scope_clear();
}

/*
 * On Citus, scope the call to the tenant of the rows ids (a bigint[]) of
 * kind's table (orch.tasks, orch.commands or orch.runs): one lookup across the shards,
 * without a lock, filtered by the caller's own tenants.  Rows of several
 * tenants are refused (0A000): a call that fences and finishes them must
 * lock them on one shard.  Rows not found leave the call unscoped; its own
 * lookup then reports them missing.  The tenant of one id (one) found is
 * remembered for the next call on it (task_routing.c).  Caller is connected
 * to SPI.
 */
static bool
scope_by_ids(OrchRouteKind kind, Datum ids, const int64 *one)
{
	OrchArgs	a = {0};
	bool		isnull;
	Datum		d;
	char	   *tenant;

	orch_scope_clear();
	orch_arg(&a, INT8ARRAYOID, ids, false);
	orch_arg_caller_tenants(&a);
	if (orch_args_sql_once(&a, psprintf("SELECT DISTINCT tenant_id FROM %s WHERE id = ANY ($1)"
										" AND " ORCH_TENANT_IN("tenant_id", "$2") " LIMIT 2",
										kind == ORCH_ROUTE_TASK ? "orch.tasks" :
										kind == ORCH_ROUTE_RUN ? "orch.runs" : "orch.commands"),
						   true, 2, SPI_OK_SELECT) == 0)
		return false;
	if (SPI_processed > 1)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the tasks belong to more than one tenant"),
				 errdetail("With the tables distributed by Citus, one call acts on one tenant's tasks."),
				 errhint("Complete each tenant's tasks in a call of their own (a claim hands out one tenant's tasks).")));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	tenant = TextDatumGetCString(d);
	/* of several ids, which were found is not known */
	if (one != NULL)
		orch_route_note(kind, *one, tenant);
	orch_scope_tenant(tenant);
	return true;
}

/*
 * The tenant this backend remembers for every one of ids (task_routing.c),
 * when it is the same for all; else NULL.
 */
static char *
remembered_tenant(OrchRouteKind kind, Datum ids)
{
	ArrayType  *a = DatumGetArrayTypeP(ids);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	   *tenant = NULL;

	deconstruct_array(a, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *t = nulls[i] ? NULL : orch_route_find(kind, DatumGetInt64(elems[i]));

		if (t == NULL || (tenant != NULL && strcmp(t, tenant) != 0))
			return NULL;
		tenant = t;
	}
	return tenant;
}

/*
 * On Citus, scope a call on the rows ids (a bigint[]; one: its only id, or
 * NULL) of kind to their tenant, by the cheapest means that is sure:
 *   - a caller bound to exactly one tenant sees no other: that tenant, with
 *     no lookup (a row of another tenant is then not found, as it must be);
 *   - ids this backend remembers under one tenant the caller may see (it
 *     claimed or enqueued them, or looked them up before): that tenant, as a
 *     hint (a hint that finds nothing is looked up: orch_scope_lookup_again);
 *   - else the lookup across the shards (scope_by_ids).
 * The statements then filter on the caller's tenants and the scope, so a
 * hint never shows a row the caller may not see.
 */
static bool
scope_rows(OrchRouteKind kind, Datum ids, const int64 *one)
{
	char	   *tenant;

	orch_scope_clear();
	tenant = orch_caller_only_tenant();
	if (tenant != NULL)
	{
		orch_scope_tenant(tenant);
		return true;
	}
	tenant = remembered_tenant(kind, ids);
	if (tenant != NULL && orch_tenant_allowed(tenant))
	{
		orch_scope_tenant(tenant);
		scope_hint = kind;
		return true;
	}
	return scope_by_ids(kind, ids, one);
}

/*
 * A statement of the call found nothing under its scope: when that scope
 * was only a remembered tenant (scope_rows), forget it for row id and look
 * the row up across the shards.  True when it was found there (the call is
 * scoped to its tenant: run the statement again), false when the row is
 * missing for the caller.  A remembered tenant is never wrong about a row
 * that exists (ids are not reused, and Citus refuses to change a row's
 * tenant), so this finds a row only when something went wrong; a purged or
 * never committed row is looked up once and reported missing.
 */
bool
orch_scope_lookup_again(int64 id)
{
	OrchRouteKind kind = scope_hint;

	if (kind == ORCH_ROUTE_NONE || scope_tenant == NULL)
		return false;
	orch_route_forget(kind, id);
	return scope_by_ids(kind, one_id(id), &id);
}

static Datum
one_id(int64 id)
{
	Datum		one = Int64GetDatum(id);

	return PointerGetDatum(construct_array(&one, 1, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * On Citus: scope to the tenant of the tasks ids (bigint[]) and return
 * whether any may exist (false: the caller reports them missing, without
 * running its statements across the shards).  Off Citus: nothing, true.
 */
bool
orch_scope_tasks(Datum ids)
{
	return !orch_citus() || scope_rows(ORCH_ROUTE_TASK, ids, NULL);
}

/* orch_scope_tasks for one task */
bool
orch_scope_task(int64 id)
{
	return !orch_citus() || scope_rows(ORCH_ROUTE_TASK, one_id(id), &id);
}

/* orch_scope_tasks for one command */
bool
orch_scope_command(int64 id)
{
	return !orch_citus() || scope_rows(ORCH_ROUTE_COMMAND, one_id(id), &id);
}

/* orch_scope_tasks for one workflow run */
bool
orch_scope_run(int64 id)
{
	return !orch_citus() || scope_rows(ORCH_ROUTE_RUN, one_id(id), &id);
}

/*
 * On Citus, the one tenant a cross-tenant call (a claim, a listing) must
 * name; 0A000 when it names none.  what: the call, for the message.
 */
void
orch_require_one_tenant(const char *tenant, const char *what)
{
	if (tenant == NULL && orch_citus())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s must name one tenant when the tables are distributed with Citus", what),
				 errdetail("Citus runs FOR UPDATE only on one shard, and a tenant's rows are on one shard."),
				 errhint("Pass tenant => '...', or bind the calling role to one tenant with orch_bind_tenant.")));
}
