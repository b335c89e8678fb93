/*
 * bindings.c
 *	  orch_bind_tenant / orch_unbind_tenant: the rows of orch.tenant_bindings
 *	  that restrict a role to tenants (tenant.c reads them), each change
 *	  audited.  Each call first brings the bindings up to date with the
 *	  cluster's roles (restored bindings, renamed roles).
 */
#include "postgres.h"

#include "access/xlog.h"
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
 * Bring the bindings up to date with the roles of this cluster (0.8.0
 * schema; under the table lock): the bindings of a dropped role go (each
 * audited as unbound: they would otherwise pass, by name, to a role of that
 * name in a cluster the dump is restored into); a binding restored from
 * another cluster (cluster_id not this one's, 0 for a dump of 0.7.0)
 * becomes this cluster's binding of the role of its name, once that role
 * exists; a binding of a renamed role takes the new name (so that a dump
 * names it as it is called now), unless another binding of the tenant holds
 * that name.  Duplicates of one role and tenant that a rename left are
 * merged first.
 */
static void
refresh_bindings(int64 cluster)
{
	OrchArgs	a = {0};
	uint64		n;
	char	  **roles;
	char	  **tenants;

	orch_arg_int8(&a, cluster);
	orch_sql_command("LOCK TABLE orch.tenant_bindings IN SHARE ROW EXCLUSIVE MODE");
	n = orch_args_sql_once(&a, "DELETE FROM orch.tenant_bindings b"
						   " WHERE b.cluster_id = $1"
						   "   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = b.role_oid)"
						   " RETURNING b.role::text, b.tenant_id",
						   false, 0, SPI_OK_DELETE_RETURNING);
	roles = orch_spi_column(1);
	tenants = orch_spi_column(2);
	for (uint64 i = 0; i < n; i++)
		orch_write_event(tenants[i], 0, false, "tenant_binding", roles[i], NULL,
						 "tenant_unbound", 0, NULL, "role dropped");
	orch_args_sql_once(&a, "UPDATE orch.tenant_bindings b SET role_oid = r.oid, cluster_id = $1"
					   " FROM pg_catalog.pg_roles r"
					   " WHERE b.cluster_id <> $1 AND r.rolname = b.role",
					   false, 0, SPI_OK_UPDATE);
	orch_args_sql_once(&a, "DELETE FROM orch.tenant_bindings b"
					   " USING orch.tenant_bindings k, pg_catalog.pg_roles r"
					   " WHERE b.cluster_id = $1 AND k.cluster_id = $1 AND b.role_oid = k.role_oid"
					   "   AND b.tenant_id = k.tenant_id AND b.role <> k.role AND r.oid = b.role_oid"
					   "   AND (k.role = r.rolname OR (b.role <> r.rolname AND k.role < b.role))",
					   false, 0, SPI_OK_DELETE);
	orch_args_sql_once(&a, "UPDATE orch.tenant_bindings b SET role = r.rolname"
					   " FROM pg_catalog.pg_roles r"
					   " WHERE b.cluster_id = $1 AND r.oid = b.role_oid AND b.role <> r.rolname"
					   "   AND NOT EXISTS (SELECT 1 FROM orch.tenant_bindings x"
					   "                    WHERE x.role = r.rolname AND x.tenant_id = b.tenant_id)",
					   false, 0, SPI_OK_UPDATE);
}

/*
 * Bind (bind = true) or unbind a role and a tenant: one row of
 * orch.tenant_bindings added or removed, an event when it was, and the
 * session's binding cache dropped.  True when something changed.  A binding
 * is the role's by OID in this cluster; its row also keeps the role's name
 * (tenant.c: role_tenants), and a stale row under that name (a dropped
 * role's) is taken over.
 */
static bool
change_binding(FunctionCallInfo fcinfo, bool bind)
{
	char	   *role;
	char	   *tenant;
	OrchArgs	a = {0};
	bool		changed;
	Oid			roleid;

	binding_args(fcinfo, &role, &tenant);
	roleid = get_role_oid(role, false);
	if (bind && superuser_arg(roleid))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("superuser \"%s\" cannot be bound to a tenant", role),
				 errdetail("Superusers bypass every check, tenant bindings included.")));
	orch_arg(&a, OIDOID, ObjectIdGetDatum(roleid), false);
	orch_arg_text(&a, tenant);
	SPI_connect();
	if (orch_schema_keyed_bindings())
	{
		int64		cluster = (int64) GetSystemIdentifier();

		refresh_bindings(cluster);
		orch_arg_int8(&a, cluster);
		orch_arg_text(&a, role);
		if (!bind)
			changed = orch_args_sql_once(&a, "DELETE FROM orch.tenant_bindings"
										 " WHERE cluster_id = $3 AND role_oid = $1 AND tenant_id = $2",
										 false, 0, SPI_OK_DELETE) > 0;
		else if (orch_args_sql_once(&a, "SELECT 1 FROM orch.tenant_bindings"
									" WHERE cluster_id = $3 AND role_oid = $1 AND tenant_id = $2",
									false, 1, SPI_OK_SELECT) > 0)
			changed = false;
		else
			changed = orch_args_sql_once(&a, "INSERT INTO orch.tenant_bindings AS b"
										 "   (role, tenant_id, role_oid, cluster_id)"
										 " VALUES ($4::name, $2, $1, $3)"
										 " ON CONFLICT (role, tenant_id) DO UPDATE"
										 "   SET role_oid = excluded.role_oid, cluster_id = excluded.cluster_id,"
										 "       created_at = excluded.created_at",
										 false, 0, SPI_OK_INSERT) == 1;
	}
	else if (bind)
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
