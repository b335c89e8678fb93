/*
 * tenant.c
 *	  Tenant isolation: which tenants the calling role may
 *	  see and act on, from the bindings in orch.tenant_bindings
 *	  (orch_bind_tenant / orch_unbind_tenant), and the effective actor that
 *	  events record.  A role bound to no tenant (directly or through a role it
 *	  has the privileges of) is unrestricted; a bound role sees exactly the
 *	  union of its bindings.  Superusers are never restricted.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_bind_tenant);
PG_FUNCTION_INFO_V1(orch_unbind_tenant);
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
 */
static int
role_tenants(Oid role, char ***out)
{
	Oid			types[1] = {OIDOID};
	Datum		v[1];
	int			n;

	*out = NULL;
	if (superuser_arg(role))
		return -1;
	v[0] = ObjectIdGetDatum(role);
	n = (int) orch_exec(orch_plan("SELECT DISTINCT b.tenant_id FROM orch.tenant_bindings b"
									  " JOIN pg_catalog.pg_roles r ON r.oid = b.role"
									  " WHERE pg_catalog.pg_has_role($1, r.oid, 'USAGE')"
									  " ORDER BY 1",
									  1, types), v, NULL, true, 0, SPI_OK_SELECT);
	if (n == 0)
		return -1;
	*out = palloc(sizeof(char *) * n);
	for (int i = 0; i < n; i++)
		(*out)[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
	return n;
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
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "orchestrator: SPI_connect failed");
		na = role_tenants(role, &a);
		if (session != role)
			nb = role_tenants(session, &b);
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

static void
binding_args(FunctionCallInfo fcinfo, char **role, char **tenant)
{
	orch_require_arg(fcinfo, 0, "role");
	orch_require_arg(fcinfo, 1, "tenant");
	*role = NameStr(*PG_GETARG_NAME(0));
	*tenant = orch_text_arg(fcinfo, 1);
	if ((*tenant)[0] == '\0' || strlen(*tenant) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tenant must have 1 to 128 characters")));
	if (!OidIsValid(get_role_oid(*role, true)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role \"%s\" does not exist", *role)));
	orch_require_unrestricted("binding tenants");
}

/*
 * Bind (bind = true) or unbind a role and a tenant: one row of
 * orch.tenant_bindings added or removed, an event when it was, and the
 * session's binding cache dropped.  True when something changed.
 */
static bool
change_binding(FunctionCallInfo fcinfo, bool bind)
{
	char	   *role;
	char	   *tenant;
	OrchArgs	a = {0};
	bool		changed;

	binding_args(fcinfo, &role, &tenant);
	if (bind && superuser_arg(get_role_oid(role, false)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("superuser \"%s\" cannot be bound to a tenant", role),
				 errdetail("Superusers bypass every check, tenant bindings included.")));
	orch_arg(&a, OIDOID, ObjectIdGetDatum(get_role_oid(role, false)), false);
	orch_arg_text(&a, tenant);
	SPI_connect();
	if (bind)
		changed = orch_args_sql_once(&a, "INSERT INTO orch.tenant_bindings (role, tenant_id)"
									 " VALUES ($1::oid::regrole, $2) ON CONFLICT DO NOTHING",
									 false, 0, SPI_OK_INSERT) == 1;
	else
		changed = orch_args_sql_once(&a, "DELETE FROM orch.tenant_bindings"
									 " WHERE role = $1::oid::regrole AND tenant_id = $2",
									 false, 0, SPI_OK_DELETE) == 1;
	if (changed)
		orch_write_event(tenant, 0, false, "tenant_binding", bind ? NULL : role, bind ? role : NULL,
						 bind ? "tenant_bound" : "tenant_unbound", 0, NULL, NULL);
	SPI_finish();
	cache_lxid = InvalidLocalTransactionId;
	return changed;
}

/*
 * orch_bind_tenant(role name, tenant text) -> boolean
 *	  Restricts the role (and every role that has its privileges) to its
 *	  bound tenants; true when the binding is new.
 */
Datum
orch_bind_tenant(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(change_binding(fcinfo, true));
}

/* orch_unbind_tenant(role name, tenant text) -> boolean: true when removed */
Datum
orch_unbind_tenant(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(change_binding(fcinfo, false));
}
