/*
 * bindings.c
 *	  orch_bind_tenant / orch_unbind_tenant: the rows of orch.tenant_bindings
 *	  that restrict a role to tenants (tenant.c reads them), each change
 *	  audited.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_bind_tenant);
PG_FUNCTION_INFO_V1(orch_unbind_tenant);

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
	orch_tenant_cache_forget();
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
