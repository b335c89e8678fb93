/*
 * schema.c
 *	  The schema this library serves, and the relations in it.
 *
 *	  The library runs against the schema of its own version and of the one
 *	  before, so that a database keeps working between installing a new
 *	  library and ALTER EXTENSION orchestrator UPDATE.  Against anything
 *	  older (or newer) every call raises 55000 with the hint to update.  The
 *	  installed version is read once per transaction, here only.  While
 *	  CREATE or ALTER EXTENSION runs this extension's own scripts nothing is
 *	  checked: a script's statement may fire the task triggers half-way
 *	  through an update.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "orchestrator.h"

/* Versions as major * 10000 + minor * 100 + patch. */
#define ORCH_SCHEMA_OLDEST	700		/* 0.7.0 */
#define ORCH_SCHEMA_NEWEST	800		/* 0.8.0 */

static LocalTransactionId checked_lxid = InvalidLocalTransactionId;
static int	checked_version = 0;

/* "0.7.0" -> 700; -1 when it is not three numbers. */
static int
parse_version(const char *s)
{
	int			major,
				minor,
				patch;
	char		tail;

	if (sscanf(s, "%d.%d.%d%c", &major, &minor, &patch, &tail) != 3 ||
		major < 0 || minor < 0 || minor > 99 || patch < 0 || patch > 99)
		return -1;
	return major * 10000 + minor * 100 + patch;
}

/* The extversion of the installed extension (palloc'd); NULL when absent. */
static char *
installed_version(Oid extoid)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	char	   *result = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			result = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return result;
}

/*
 * The version of the installed schema (as above); raises 55000 when this
 * library does not serve it.  Called at the entry of every path that reads
 * or writes the extension's tables (the SPI layer, the triggers).
 */
int
orch_schema_version(void)
{
	Oid			extoid;
	char	   *version;
	int			v;

	if (checked_lxid == MyProc->lxid && checked_lxid != InvalidLocalTransactionId)
		return checked_version;
	extoid = get_extension_oid("orchestrator", true);
	if (creating_extension && CurrentExtensionObject == extoid)
		return ORCH_SCHEMA_NEWEST;
	if (!OidIsValid(extoid))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"orchestrator\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION orchestrator.")));
	version = installed_version(extoid);
	v = version ? parse_version(version) : -1;
	if (v < ORCH_SCHEMA_OLDEST)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed orchestrator schema (version %s) is older than this library serves",
						version ? version : "?"),
				 errdetail("This library serves schema versions 0.7.0 and 0.8.0."),
				 errhint("Run ALTER EXTENSION orchestrator UPDATE.")));
	if (v > ORCH_SCHEMA_NEWEST)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the installed orchestrator schema (version %s) is newer than this library",
						version),
				 errdetail("This library serves schema versions 0.7.0 and 0.8.0."),
				 errhint("Install the orchestrator library of version %s and reconnect.", version)));
	checked_version = v;
	checked_lxid = MyProc->lxid;
	return v;
}

/* The relation orch.<name>; InvalidOid when there is none. */
Oid
orch_relid(const char *name)
{
	Oid			nsp = get_namespace_oid("orch", true);

	return OidIsValid(nsp) ? get_relname_relid(name, nsp) : InvalidOid;
}
