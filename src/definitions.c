/*
 * definitions.c
 *	  Workflow definitions: the SQL-callable
 *	  functions (orch_define, orch_publish, orch_deprecate, orch_definition,
 *	  orch_validate_definition), their storage in orch.definitions (versioned
 *	  drafts, publication with the content hash, deprecation, one event per
 *	  change) and the trigger orch_definitions_guard that keeps published
 *	  and deprecated versions immutable for every writer (OR007).
 *
 *	  The spec validator (OR008 naming the offending JSON path) is in
 *	  definition_validate.c; docs/workflows.md is the reference of both.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "orchestrator.h"

PG_FUNCTION_INFO_V1(orch_define);
PG_FUNCTION_INFO_V1(orch_publish);
PG_FUNCTION_INFO_V1(orch_deprecate);
PG_FUNCTION_INFO_V1(orch_definition);
PG_FUNCTION_INFO_V1(orch_validate_definition);
PG_FUNCTION_INFO_V1(orch_definitions_guard);


/* Definitions live in the default tenant: templates shared by all tenants */
#define DEF_TENANT			ORCH_DEFAULT_TENANT

/* ----------------------------------------------------------------------
 * SQL-callable
 * ---------------------------------------------------------------------- */

#define DEF_HASH(p) "pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(" p "::text, 'UTF8')), 'hex')"

static char *
def_note(const char *name, int32 version)
{
	return psprintf("%s@%d", name, version);
}

/* The tenant of definitions and a definition's name as $1 and $2 */
static void
def_key_args(OrchArgs *a, const char *name)
{
	orch_arg_text(a, DEF_TENANT);
	orch_arg_text(a, name);
}

/*
 * orch_define(name text, spec jsonb) -> integer
 *	  Validates the spec; replaces the draft when the name's highest version
 *	  is one, else adds the next version as a draft.  Returns the version.
 */
Datum
orch_define(PG_FUNCTION_ARGS)
{
	char	   *name;
	Jsonb	   *spec;
	OrchArgs	a = {0};
	OrchArgs	w = {0};
	int32		version;
	bool		isnull;

	orch_require_unrestricted("workflow definitions");
	orch_require_arg(fcinfo, 0, "name");
	orch_require_arg(fcinfo, 1, "spec");
	name = orch_text_arg(fcinfo, 0);
	orch_check_name(name, "workflow definition");
	spec = orch_jsonb_arg(fcinfo, 1, "spec");
	orch_definition_validate(spec);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	/* one define, publish or deprecate of a name at a time */
	orch_xact_lock("definition", DEF_TENANT, name);
	def_key_args(&a, name);
	orch_arg_jsonb(&a, spec);
	orch_args_sql(&a, "SELECT version, status = 'draft', spec = $3 FROM orch.definitions"
				  " WHERE tenant_id = $1 AND name = $2"
				  " ORDER BY version DESC LIMIT 1 FOR UPDATE",
				  false, 1, SPI_OK_SELECT);
	/* the parameters of the write: $1, $2, the version, the spec (and the actor) */
	def_key_args(&w, name);
	if (SPI_processed == 1 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
	{
		/* drafts are mutable: replace the spec of the highest version */
		bool		same = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc, 3, &isnull));

		version = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (!same)
		{
			orch_arg_int4(&w, version);
			orch_arg_jsonb(&w, spec);
			if (orch_args_sql(&w, "UPDATE orch.definitions SET spec = $4,"
							  " content_hash = " DEF_HASH("$4")
							  " WHERE tenant_id = $1 AND name = $2 AND version = $3",
							  false, 0, SPI_OK_UPDATE) != 1)
				elog(ERROR, "orchestrator: draft update failed");
			orch_write_event(DEF_TENANT, 0, false, "definition", "draft", "draft", "defined",
							 0, NULL, def_note(name, version));
		}
	}
	else
	{
		int32		latest = 0;

		if (SPI_processed == 1)
			latest = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (latest == PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("workflow definition \"%s\" has no version number left", name)));
		version = latest + 1;
		orch_arg_int4(&w, version);
		orch_arg_jsonb(&w, spec);
		orch_arg_text(&w, orch_current_actor());
		if (orch_args_sql(&w, "INSERT INTO orch.definitions (tenant_id, name, version, status,"
						  " spec, content_hash, created_by)"
						  " VALUES ($1, $2, $3, 'draft', $4, " DEF_HASH("$4") ", $5)"
						  " ON CONFLICT DO NOTHING",
						  false, 0, SPI_OK_INSERT) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent orch_define of \"%s\"", name),
					 errhint("Retry the transaction.")));
		orch_write_event(DEF_TENANT, 0, false, "definition", NULL, "draft", "defined",
						 0, NULL, def_note(name, version));
	}
	SPI_finish();
	PG_RETURN_INT32(version);
}

/*
 * Lock a definition version (after the name's advisory lock) and read its
 * status; OR005 when it does not exist.  Connected to SPI; the row stays in
 * SPI_tuptable: status, spec, content_hash.
 */
static char *
lock_version(const char *name, int32 version)
{
	OrchArgs	a = {0};

	orch_xact_lock("definition", DEF_TENANT, name);
	def_key_args(&a, name);
	orch_arg_int4(&a, version);
	if (orch_args_sql(&a, "SELECT status, spec, content_hash FROM orch.definitions"
					  " WHERE tenant_id = $1 AND name = $2 AND version = $3 FOR UPDATE",
					  false, 1, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("workflow definition \"%s\" version %d does not exist", name, version)));
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

static void
version_args(FunctionCallInfo fcinfo, char **name, int32 *version)
{
	orch_require_unrestricted("workflow definitions");
	orch_require_arg(fcinfo, 0, "name");
	orch_require_arg(fcinfo, 1, "version");
	*name = orch_text_arg(fcinfo, 0);
	*version = PG_GETARG_INT32(1);
}

/*
 * orch_publish(name text, version integer) -> text
 *	  draft -> published after validating the spec again; returns the content
 *	  hash.  Publishing a published version returns its hash and changes
 *	  nothing; a deprecated version raises OR007.
 */
Datum
orch_publish(PG_FUNCTION_ARGS)
{
	MemoryContext outer = CurrentMemoryContext;
	char	   *name;
	int32		version;
	char	   *status;
	char	   *hash;
	bool		isnull;

	version_args(fcinfo, &name, &version);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	status = lock_version(name, version);
	if (strcmp(status, "deprecated") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_DEFINITION_IMMUTABLE),
				 errmsg("workflow definition \"%s\" version %d is deprecated", name, version),
				 errdetail("A deprecated version cannot be published again."),
				 errhint("Define a new version with orch_define and publish that.")));
	if (strcmp(status, "draft") == 0)
	{
		OrchArgs	h = {0};
		OrchArgs	a = {0};
		Datum		spec = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);

		/* validated again: a draft may predate a stricter validator */
		orch_definition_validate(DatumGetJsonbP(spec));
		/* drift probes run with the publisher's rights: orch_admin only (42501) */
		orch_probes_check_publisher(DatumGetJsonbP(spec));
		/*
		 * The hash of the locked spec, computed first: Citus refuses a stable
		 * function of a column (convert_to) in an UPDATE of a reference table.
		 */
		orch_arg(&h, JSONBOID, spec, false);
		if (orch_args_sql_once(&h, "SELECT " DEF_HASH("$1"), true, 1, SPI_OK_SELECT) != 1)
			elog(ERROR, "orchestrator: content hash failed");
		def_key_args(&a, name);
		orch_arg_int4(&a, version);
		orch_arg(&a, TEXTOID, SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), false);
		orch_arg_text(&a, orch_current_actor());
		if (orch_args_sql(&a, "UPDATE orch.definitions SET status = 'published',"
						  " published_at = pg_catalog.now(), content_hash = $4, published_by = $5"
						  " WHERE tenant_id = $1 AND name = $2 AND version = $3"
						  " RETURNING content_hash",
						  false, 0, SPI_OK_UPDATE_RETURNING) != 1)
			elog(ERROR, "orchestrator: publish failed");
		hash = MemoryContextStrdup(outer, SPI_getvalue(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 1));
		orch_write_event(DEF_TENANT, 0, false, "definition", "draft", "published", "published",
						 0, NULL, def_note(name, version));
	}
	else
		hash = MemoryContextStrdup(outer, SPI_getvalue(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 3));
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(hash));
}

/*
 * orch_deprecate(name text, version integer) -> void
 *	  published -> deprecated; a deprecated version is left as it is; a draft
 *	  raises OR007.
 */
Datum
orch_deprecate(PG_FUNCTION_ARGS)
{
	char	   *name;
	int32		version;
	char	   *status;

	version_args(fcinfo, &name, &version);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	status = lock_version(name, version);
	if (strcmp(status, "draft") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_DEFINITION_IMMUTABLE),
				 errmsg("workflow definition \"%s\" version %d is a draft", name, version),
				 errdetail("Only a published version can be deprecated."),
				 errhint("Publish it first, or replace the draft with orch_define.")));
	if (strcmp(status, "published") == 0)
	{
		OrchArgs	a = {0};

		def_key_args(&a, name);
		orch_arg_int4(&a, version);
		if (orch_args_sql(&a, "UPDATE orch.definitions SET status = 'deprecated',"
						  " deprecated_at = pg_catalog.now()"
						  " WHERE tenant_id = $1 AND name = $2 AND version = $3",
						  false, 0, SPI_OK_UPDATE) != 1)
			elog(ERROR, "orchestrator: deprecate failed");
		orch_write_event(DEF_TENANT, 0, false, "definition", "published", "deprecated",
						 "deprecated", 0, NULL, def_note(name, version));
	}
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * orch_definition(name text, version integer DEFAULT NULL)
 *	  -> TABLE (name, version, status, spec, content_hash, created_at,
 *				published_at, deprecated_at)
 *	  One version in any status; version NULL: the highest published (not
 *	  deprecated) version.  OR005 when there is none.
 */
Datum
orch_definition(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *name;
	bool		latest;
	OrchArgs	a = {0};
	Datum		out[8];
	bool		outnull[8];

	orch_require_arg(fcinfo, 0, "name");
	name = orch_text_arg(fcinfo, 0);
	latest = PG_ARGISNULL(1);
	InitMaterializedSRF(fcinfo, 0);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	def_key_args(&a, name);
	orch_arg(&a, INT4OID, latest ? (Datum) 0 : PG_GETARG_DATUM(1), latest);
	if (orch_args_sql(&a, "SELECT name, version, status, spec, content_hash, created_at,"
					  " published_at, deprecated_at FROM orch.definitions"
					  " WHERE tenant_id = $1 AND name = $2"
					  " AND CASE WHEN $3 IS NULL THEN status = 'published'"
					  " ELSE version = $3 END"
					  " ORDER BY version DESC LIMIT 1",
					  true, 1, SPI_OK_SELECT) == 0)
	{
		if (latest)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_NOT_FOUND),
					 errmsg("workflow definition \"%s\" has no published version", name)));
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("workflow definition \"%s\" version %d does not exist",
						name, PG_GETARG_INT32(1))));
	}
	orch_spi_values(SPI_tuptable, 0, 1, 8, out, outnull);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnull);
	SPI_finish();
	return (Datum) 0;
}

/* orch_validate_definition(spec jsonb) -> void: OR008 when invalid */
Datum
orch_validate_definition(PG_FUNCTION_ARGS)
{
	orch_require_arg(fcinfo, 0, "spec");
	orch_definition_validate(orch_jsonb_arg(fcinfo, 0, "spec"));
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------------
 * The guard: BEFORE UPDATE OR DELETE row trigger and BEFORE TRUNCATE
 * statement trigger on orch.definitions
 * ---------------------------------------------------------------------- */

static char *
column_text(HeapTuple tuple, TupleDesc desc, const char *column)
{
	int			att = SPI_fnumber(desc, column);

	if (att <= 0)
		elog(ERROR, "orchestrator: column \"%s\" missing from the definitions table", column);
	return SPI_getvalue(tuple, desc, att);	/* NULL for a null */
}

static void
guard_truncate(Relation rel)
{
	char	   *table = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												   RelationGetRelationName(rel));
	char	   *sql = psprintf("SELECT 1 FROM %s WHERE status <> 'draft' LIMIT 1", table);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (orch_sql_once(sql, 0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_DEFINITION_IMMUTABLE),
				 errmsg("published workflow definitions cannot be truncated"),
				 errdetail("%s holds published or deprecated versions, which are immutable.",
						   table)));
	SPI_finish();
}

Datum
orch_definitions_guard(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	oldtup;
	HeapTuple	newtup;
	char	   *name;
	char	   *version;
	char	   *from;
	char	   *to;
	bool		allowed;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_definitions_guard: not called by trigger manager")));
	if (TRIGGER_FIRED_BY_TRUNCATE(td->tg_event) && TRIGGER_FIRED_BEFORE(td->tg_event))
	{
		guard_truncate(td->tg_relation);
		return PointerGetDatum(NULL);
	}
	if (!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		TRIGGER_FIRED_BY_INSERT(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("orch_definitions_guard must be a BEFORE UPDATE OR DELETE row trigger or a BEFORE TRUNCATE statement trigger")));

	desc = RelationGetDescr(td->tg_relation);
	oldtup = td->tg_trigtuple;
	name = column_text(oldtup, desc, "name");
	version = column_text(oldtup, desc, "version");
	from = column_text(oldtup, desc, "status");
	if (from == NULL)
		from = "null";

	if (TRIGGER_FIRED_BY_DELETE(td->tg_event))
	{
		if (strcmp(from, "draft") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_DEFINITION_IMMUTABLE),
					 errmsg("%s workflow definition \"%s\" version %s cannot be deleted",
							from, name ? name : "", version ? version : ""),
					 errdetail("Published and deprecated definitions are immutable; only drafts may be deleted.")));
		return PointerGetDatum(oldtup);
	}

	newtup = td->tg_newtuple;
	to = column_text(newtup, desc, "status");
	if (to == NULL)
		to = "null";
	if (strcmp(from, "draft") == 0)
		allowed = strcmp(to, "draft") == 0 || strcmp(to, "published") == 0;
	else if (strcmp(from, "published") == 0)
		allowed = strcmp(to, "published") == 0 || strcmp(to, "deprecated") == 0;
	else
		allowed = strcmp(to, from) == 0;
	if (!allowed)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_DEFINITION_IMMUTABLE),
				 errmsg("workflow definition \"%s\" version %s cannot go from %s to %s",
						name ? name : "", version ? version : "", from, to),
				 errdetail("A definition goes from draft to published to deprecated, never back.")));
	if (strcmp(from, "draft") == 0)
		return PointerGetDatum(newtup);

	/* published or deprecated: only the status (and deprecated_at with it) moves */
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		const char *col = NameStr(att->attname);
		bool		n1,
					n2;
		Datum		d1,
					d2;

		if (att->attisdropped || strcmp(col, "status") == 0)
			continue;
		if (strcmp(col, "deprecated_at") == 0 && strcmp(from, "published") == 0 &&
			strcmp(to, "deprecated") == 0)
			continue;
		d1 = heap_getattr(oldtup, i + 1, desc, &n1);
		d2 = heap_getattr(newtup, i + 1, desc, &n2);
		if (n1 != n2 || (!n1 && !datum_image_eq(d1, d2, att->attbyval, att->attlen)))
			ereport(ERROR,
					(errcode(ERRCODE_ORCH_DEFINITION_IMMUTABLE),
					 errmsg("%s workflow definition \"%s\" version %s cannot change",
							from, name ? name : "", version ? version : ""),
					 errdetail("Column %s of a %s definition is immutable.", col, from),
					 errhint("Define a new version with orch_define.")));
	}
	return PointerGetDatum(newtup);
}
