/*
 * state_machines.c
 *	  User-defined state machines stored as data, enforced on user tables by
 *	  the same C trigger as the task lifecycle (orch_create_state_machine,
 *	  orch_attach_state_machine).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/array.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "nodes/bitmapset.h"
#include "catalog/namespace.h"

#include "orchestrator.h"


PG_FUNCTION_INFO_V1(orch_create_state_machine);
PG_FUNCTION_INFO_V1(orch_attach_state_machine);

/* ----------------------------------------------------------------------
 * User-defined machines on user tables
 * ---------------------------------------------------------------------- */

typedef struct MachineVerdict
{
	bool		machine_exists;
	bool		allowed;		/* (from, to) listed */
	bool		from_terminal;	/* from has no exit to another state */
	bool		to_known;		/* to appears in the machine */
	bool		initial_allowed;	/* insert with state to is allowed */
} MachineVerdict;

static MachineVerdict
machine_check(const char *machine, const char *from, const char *to)
{
	OrchArgs	a = {0};
	MachineVerdict v;
	bool		isnull;

	orch_arg_text(&a, machine);
	orch_arg_text(&a, from);
	orch_arg_text(&a, to);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "orchestrator: SPI_connect failed");
	if (orch_args_sql(&a, "SELECT"
						" EXISTS (SELECT 1 FROM orch.state_machines m WHERE m.name = $1),"
						" EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state = $2 AND t.to_state = $3),"
						" NOT EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state = $2 AND t.to_state <> $2),"
						" EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND (t.from_state = $3 OR t.to_state = $3)),"
						" EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state IS NULL AND t.to_state = $3)"
						" OR NOT EXISTS (SELECT 1 FROM orch.state_transitions t WHERE t.machine = $1"
						"         AND t.from_state IS NULL)",
					  true, 1, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: state machine lookup failed");
#define GETB(n) DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, n, &isnull))
	v.machine_exists = GETB(1);
	v.allowed = GETB(2);
	v.from_terminal = GETB(3);
	v.to_known = GETB(4);
	v.initial_allowed = GETB(5);
#undef GETB
	SPI_finish();
	return v;
}

/*
 * The row's primary key as a JSON object of its columns' text forms, e.g.
 * {"id": "42"}: what identifies the row, and nothing else of it (the event
 * is readable by roles that may not read the table).  Built from the types'
 * output functions only: row_to_json would also run casts to json, which any
 * user may define, and this trigger runs as the extension owner.  NULL when
 * the table has no primary key.
 */
static char *
row_key_json_text(Relation rel, HeapTuple tup, TupleDesc td)
{
	Bitmapset  *pk = RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_PRIMARY_KEY);
	StringInfoData buf;
	bool		first = true;
	int			x = -1;

	if (pk == NULL)
		return NULL;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	while ((x = bms_next_member(pk, x)) >= 0)
	{
		AttrNumber	attno = x + FirstLowInvalidHeapAttributeNumber;
		char	   *val;

		if (attno <= 0)
			continue;
		if (!first)
			appendStringInfoString(&buf, ", ");
		first = false;
		escape_json(&buf, NameStr(TupleDescAttr(td, attno - 1)->attname));
		appendStringInfoString(&buf, ": ");
		val = SPI_getvalue(tup, td, attno);
		if (val == NULL)
			appendStringInfoString(&buf, "null");
		else
			escape_json(&buf, val);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

HeapTuple
orch_user_table_trigger(TriggerData *trigdata, const char *column, const char *machine)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	td = RelationGetDescr(rel);
	bool		is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	HeapTuple	oldtup = is_insert ? NULL : trigdata->tg_trigtuple;
	HeapTuple	newtup = is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple;
	int			attno = SPI_fnumber(td, column);
	char	   *from = NULL;
	char	   *to;
	char		what[NAMEDATALEN * 2 + 32];
	MachineVerdict v;
	char	   *relname;
	char	   *rowjson;

	if (attno <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of the state machine trigger does not exist in \"%s\"",
						column, RelationGetRelationName(rel))));
	relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
										 RelationGetRelationName(rel));
	snprintf(what, sizeof(what), "row of %s", relname);

	to = SPI_getvalue(newtup, td, attno);
	if (!is_insert)
		from = SPI_getvalue(oldtup, td, attno);
	v = machine_check(machine, from, to);
	if (!v.machine_exists)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("state machine \"%s\" does not exist", machine)));

	if (is_insert)
	{
		if (to == NULL || !v.to_known || !v.initial_allowed)
			orch_raise_invalid_transition(what, NULL, to);
	}
	else
	{
		if (from != NULL && v.from_terminal)
		{
			if (to != NULL && strcmp(from, to) == 0 && orch_tuples_identical(oldtup, newtup, td))
				return newtup;
			orch_raise_terminal(what, from, to);
		}
		if (to == NULL || from == NULL || !v.allowed)
		{
			/* a NULL old state may take any known state */
			if (!(from == NULL && to != NULL && v.to_known))
				orch_raise_invalid_transition(what, from, to);
		}
		if (from != NULL && strcmp(from, to) == 0)
			return newtup;
	}

	rowjson = row_key_json_text(rel, newtup, td);
	orch_write_event_full(ORCH_DEFAULT_TENANT, 0, false, 0, false, relname,
					 from, to, is_insert ? "inserted" : "updated", orch_event_context()->actor, 0,
					 NULL, rowjson, -1);
	return newtup;
}

/* ----------------------------------------------------------------------
 * orch_create_state_machine(name text, transitions jsonb, initial text[])
 * ---------------------------------------------------------------------- */

/* One transition of a machine, from one state to another (or the same) */
static void
add_transition(const char *machine, const char *from, const char *to)
{
	OrchArgs	a = {0};

	orch_arg_text(&a, machine);
	orch_arg_text(&a, from);
	orch_arg_text(&a, to);
	orch_args_sql_once(&a, "INSERT INTO orch.state_transitions (machine, from_state, to_state)"
					   " VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", false, 0, SPI_OK_INSERT);
}

Datum
orch_create_state_machine(PG_FUNCTION_ARGS)
{
	char	   *name;
	Jsonb	   *transitions;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *cur_from = NULL;
	int			depth = 0;
	OrchArgs	a = {0};
	int			nstates = 0;

	orch_require_unrestricted("orch_create_state_machine");
	orch_require_arg(fcinfo, 0, "name");
	orch_require_arg(fcinfo, 1, "transitions");
	name = orch_text_arg(fcinfo, 0);
	transitions = orch_jsonb_arg(fcinfo, 1, "transitions");
	if (name[0] == '\0' || strlen(name) > 128)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("state machine name must have 1 to 128 characters")));
	if (!JB_ROOT_IS_OBJECT(transitions) || JB_ROOT_COUNT(transitions) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("transitions must be a non-empty JSON object"),
				 errhint("Example: {\"draft\": [\"review\"], \"review\": [\"published\", \"draft\"], \"published\": []}")));

	SPI_connect();
	orch_arg_text(&a, name);
	if (orch_args_sql_once(&a, "INSERT INTO orch.state_machines (name) VALUES ($1) ON CONFLICT DO NOTHING", false, 0, SPI_OK_INSERT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("state machine \"%s\" already exists", name)));

	it = JsonbIteratorInit(&transitions->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		if (tok == WJB_BEGIN_OBJECT || tok == WJB_BEGIN_ARRAY)
		{
			depth++;
			if (depth > 2 || (depth == 2 && tok != WJB_BEGIN_ARRAY))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("transitions must map each state to an array of target states")));
		}
		else if (tok == WJB_END_OBJECT || tok == WJB_END_ARRAY)
			depth--;
		else if (tok == WJB_KEY)
		{
			cur_from = pnstrdup(v.val.string.val, v.val.string.len);
			if (cur_from[0] == '\0')
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("state names must not be empty")));
			add_transition(name, cur_from, cur_from);
			nstates++;
		}
		else if (tok == WJB_ELEM || tok == WJB_VALUE)
		{
			char	   *to;

			if (v.type != jbvString || v.val.string.len == 0 || depth != 2)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("transitions must map each state to an array of target state names")));
			to = pnstrdup(v.val.string.val, v.val.string.len);
			add_transition(name, cur_from, to);
			/* every target is a state of its own, with at least its self-transition */
			add_transition(name, to, to);
		}
	}

	if (!PG_ARGISNULL(2))
	{
		ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(2);
		Datum	   *elems;
		bool	   *enulls;
		int			nelems;

		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &enulls, &nelems);
		for (int i = 0; i < nelems; i++)
		{
			OrchArgs	state = {0};
			OrchArgs	initial = {0};
			char	   *s;

			if (enulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("initial states must not be null")));
			s = TextDatumGetCString(elems[i]);
			orch_arg_text(&state, name);
			orch_arg(&state, TEXTOID, elems[i], false);
			if (orch_args_sql_once(&state, "SELECT 1 FROM orch.state_transitions WHERE machine = $1"
								   " AND from_state = $2", false, 1, SPI_OK_SELECT) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("initial state \"%s\" is not a state of the machine", s)));
			/* $2 (NULL) is not used */
			orch_arg_text(&initial, name);
			orch_arg_text(&initial, NULL);
			orch_arg(&initial, TEXTOID, elems[i], false);
			orch_args_sql_once(&initial, "INSERT INTO orch.state_transitions (machine, from_state, to_state)"
							   " VALUES ($1, NULL, $3) ON CONFLICT DO NOTHING", false, 0, SPI_OK_INSERT);
		}
	}
	SPI_finish();
	(void) nstates;
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------------
 * orch_attach_state_machine(tbl regclass, column name, machine text)
 * Runs as the caller: CREATE TRIGGER checks that the caller owns the table.
 * ---------------------------------------------------------------------- */
Datum
orch_attach_state_machine(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *column;
	char	   *machine;
	char	   *relname;
	char	   *nspname;
	AttrNumber	attno;
	StringInfoData sql;
	char		trgname[NAMEDATALEN];
	OrchArgs	a = {0};

	/* the events of an attached table go to tenant default: not for a bound role */
	orch_require_unrestricted("orch_attach_state_machine");
	orch_require_arg(fcinfo, 0, "tbl");
	orch_require_arg(fcinfo, 1, "column");
	orch_require_arg(fcinfo, 2, "machine");
	relid = PG_GETARG_OID(0);
	column = NameStr(*PG_GETARG_NAME(1));
	machine = orch_text_arg(fcinfo, 2);

	relname = get_rel_name(relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	nspname = get_namespace_name(get_rel_namespace(relid));
	attno = get_attnum(relid, column);
	if (attno == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist", column, relname)));

	SPI_connect();
	orch_arg_text(&a, machine);
	if (orch_args_sql_once(&a, "SELECT 1 FROM orch.state_machines WHERE name = $1", true, 1, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_NOT_FOUND),
				 errmsg("state machine \"%s\" does not exist", machine),
				 errhint("Create it with orch_create_state_machine.")));

	snprintf(trgname, sizeof(trgname), "orch_state_machine_%s", column);
	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "CREATE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW"
					 " EXECUTE FUNCTION %s.orch_state_machine_trigger(%s, %s)",
					 quote_identifier(trgname),
					 quote_qualified_identifier(nspname, relname),
					 quote_identifier(get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid))),
					 quote_literal_cstr(column), quote_literal_cstr(machine));
	orch_sql_command(sql.data);
	SPI_finish();
	PG_RETURN_VOID();
}
