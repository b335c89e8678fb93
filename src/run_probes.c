/*
 * run_probes.c
 *	  Drift probes (seed 002 section 8): the functions a definition names
 *	  under "probes", looked up (for the validator and the publisher
 *	  check), evaluated as the definition's publisher with search_path
 *	  pinned in a read-only subtransaction, pinned at orch_start, checked
 *	  again before every gate (run_steps.c) and on resume (run_control.c);
 *	  a mismatch pauses the run (reason drift_detected) with a diff until
 *	  orch_acknowledge_drift re-pins the live values.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "parser/parse_func.h"
#include "parser/scansup.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "run_internal.h"

PG_FUNCTION_INFO_V1(orch_acknowledge_drift);

/* The step id of the approvals that acknowledge drift (orch.approvals) */
#define DRIFT_STEP "$drift"

/* A probe's value cut in messages and event notes: its first characters */
#define PROBE_SHOW_CHARS 100

/*
 * The diff cut for messages and event notes: each value's first
 * PROBE_SHOW_CHARS characters (a JSON object of at most ORCH_MAX_PROBES
 * small members).  $1 is the diff.
 */
#define PROBE_CUT(x) \
	"CASE WHEN jsonb_typeof(" x ") = 'string' AND length(" x " #>> '{}') > 100" \
	" THEN to_jsonb(left(" x " #>> '{}', 100) || '...') ELSE " x " END"
#define DIFF_CUT(x) \
	"(SELECT jsonb_object_agg(d.key, jsonb_build_object('pinned', " PROBE_CUT("(d.value -> 'pinned')") "," \
	"   'live', " PROBE_CUT("(d.value -> 'live')") ")) FROM jsonb_each(" x ") d)::text"

/* ----------------------------------------------------------------------
 * Looking up a probe's function
 * ---------------------------------------------------------------------- */

/*
 * The function a probe names, written "schema.name()" ("name()" alone is
 * pg_catalog's: the name is resolved as the probe runs, with search_path
 * pg_catalog, pg_temp).  It must exist with no arguments, be a plain
 * function (no procedure, aggregate or window function), return one value
 * of a type that is not a pseudo-type, not a set.  InvalidOid and *problem
 * (a sentence without its period) when it is not such a function.  Reads
 * the catalogs (schema USAGE is checked for the current user).
 */
Oid
orch_probe_lookup(const char *text, int len, char **problem)
{
	char	   *s = pnstrdup(text, len);
	char	   *open = strrchr(s, '(');
	char	   *p;
	List	   *parts;
	List	   *names;
	Oid			fn;
	Oid			noargs[1] = {InvalidOid};
	HeapTuple	tup;
	Form_pg_proc proc;

	*problem = NULL;
	if (open == NULL)
	{
		*problem = "a probe names a function with its empty argument list, e.g. \"app.count_rows()\"";
		return InvalidOid;
	}
	p = open + 1;
	while (*p && scanner_isspace(*p))
		p++;
	if (*p != ')')
	{
		*problem = strchr(p, ')') ? "a probe function takes no arguments: write an empty argument list, e.g. \"app.count_rows()\""
			: "a probe names a function with its empty argument list, e.g. \"app.count_rows()\"";
		return InvalidOid;
	}
	for (p++; *p; p++)
		if (!scanner_isspace(*p))
		{
			*problem = "nothing may follow the argument list";
			return InvalidOid;
		}
	*open = '\0';
	if (!SplitIdentifierString(s, '.', &parts) || list_length(parts) < 1 || list_length(parts) > 2)
	{
		*problem = "not a function name (write schema.name())";
		return InvalidOid;
	}
	if (list_length(parts) == 1)
		names = list_make2(makeString("pg_catalog"), makeString(linitial(parts)));
	else
		names = list_make2(makeString(linitial(parts)), makeString(lsecond(parts)));
	fn = LookupFuncName(names, 0, noargs, true);
	if (!OidIsValid(fn))
	{
		*problem = "no such function with no arguments";
		return InvalidOid;
	}
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "orchestrator: cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (proc->prokind != PROKIND_FUNCTION)
		*problem = proc->prokind == PROKIND_PROCEDURE ? "a procedure is not a probe: a probe is a plain function"
			: "an aggregate or window function is not a probe: a probe is a plain function";
	else if (proc->proretset)
		*problem = "the function returns a set: a probe returns one value";
	else if (get_typtype(proc->prorettype) == TYPTYPE_PSEUDO)
		*problem = psprintf("the function returns %s: a probe returns a value of a real type",
							format_type_be(proc->prorettype));
	ReleaseSysCache(tup);
	return *problem ? InvalidOid : fn;
}

/* The function text of the probe value v: a string, or {"function": ...} */
static char *
probe_function_text(JsonbValue *v)
{
	if (v->type == jbvString)
		return pnstrdup(v->val.string.val, v->val.string.len);
	if (v->type == jbvBinary)
	{
		JsonbValue *f = getKeyJsonValueFromContainer(v->val.binary.data, "function", 8, NULL);

		if (f != NULL && f->type == jbvString)
			return pnstrdup(f->val.string.val, f->val.string.len);
	}
	elog(ERROR, "orchestrator: a published probe has no function");
	return NULL;				/* keep the compiler quiet */
}

/*
 * May role run fn as a probe with its own rights?  The function must not be
 * in a temporary schema (that would be the schema of whichever session
 * reaches a gate) and its owner must be a superuser or a role whose
 * privileges role has: whoever can replace the function (its owner) must be
 * someone the publisher already trusts, or a replaced function would run
 * with the publisher's rights.  NULL when it may, else why not.
 */
static const char *
probe_untrusted(Oid fn, Oid role)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Form_pg_proc proc;
	const char *why = NULL;

	if (!HeapTupleIsValid(tup))
		elog(ERROR, "orchestrator: cache lookup failed for function %u", fn);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (isAnyTempNamespace(proc->pronamespace))
		why = "the function is in a temporary schema";
	else if (!superuser_arg(proc->proowner) && !has_privs_of_role(role, proc->proowner))
		why = "the function's owner is neither a superuser nor a role whose privileges the publisher has";
	else if (pg_namespace_aclcheck(proc->pronamespace, role, ACL_USAGE) != ACLCHECK_OK)
		why = "the publisher has no USAGE on the function's schema";
	ReleaseSysCache(tup);
	return why;
}

/*
 * orch_publish of a spec with probes: the caller must be a member of
 * orch_admin (or a superuser), and able to execute every probe function,
 * since the probes run with its rights for every run.  42501 otherwise.
 */
void
orch_probes_check_publisher(Jsonb *spec)
{
	JsonbValue *probes = getKeyJsonValueFromContainer(&spec->root, "probes", 6, NULL);
	JsonbIterator *it;
	JsonbValue	k;
	JsonbIteratorToken tok;
	Oid			role = orch_caller_role();

	if (probes == NULL || probes->type != jbvBinary)
		return;
	if (!orch_caller_is_admin_role())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only a member of orch_admin may publish a workflow definition with drift probes"),
				 errdetail("Probes run with the publisher's rights for every run of the definition; role \"%s\" is not a member of orch_admin.",
						   orch_current_actor()),
				 errhint("Have an orch_admin member publish it, or remove \"probes\".")));
	it = JsonbIteratorInit(probes->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *problem;
		char	   *name;
		JsonbValue	v;
		Oid			fn;

		if (tok != WJB_KEY)
			continue;
		name = pnstrdup(k.val.string.val, k.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		fn = orch_probe_lookup(probe_function_text(&v), strlen(probe_function_text(&v)), &problem);
		if (!OidIsValid(fn))
			elog(ERROR, "orchestrator: probe \"%s\" passed validation but %s", name, problem);
		if (pg_proc_aclcheck(fn, role, ACL_EXECUTE) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("role \"%s\" may not execute the function of probe \"%s\"",
							orch_current_actor(), name),
					 errdetail("Probes run with the publisher's rights.")));
		{
			const char *why = probe_untrusted(fn, role);

			if (why)
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("probe \"%s\" may not run with the rights of role \"%s\": %s",
								name, orch_current_actor(), why),
						 errdetail("Probes run with the publisher's rights for every run of the definition.")));
		}
	}
}

/* ----------------------------------------------------------------------
 * Evaluating probes
 * ---------------------------------------------------------------------- */

/*
 * A value's text must not depend on the session that reaches the gate (nor
 * on what the probe itself set): UTC, ISO dates, the default interval and
 * float output, hex bytea.  In the current GUC nest level.
 */
static void
pin_output_format(void)
{
	static const char *const settings[][2] = {
		{"TimeZone", "UTC"}, {"DateStyle", "ISO, YMD"}, {"IntervalStyle", "postgres"},
		{"extra_float_digits", "1"}, {"bytea_output", "hex"}};

	for (int i = 0; i < lengthof(settings); i++)
		(void) set_config_option(settings[i][0], settings[i][1],
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* One probe's outcome */
typedef struct ProbeOutcome
{
	bool		ok;
	bool		isnull;
	char	   *value;			/* its text (output function), when ok */
	char	   *sqlstate;		/* when not ok */
	char	   *message;
} ProbeOutcome;

/*
 * The probe's function, looked up and checked for the publisher: it exists,
 * the publisher may execute it, and it may run with the publisher's rights.
 */
static Oid
probe_function(const char *fntext, Oid role)
{
	char	   *problem;
	const char *why;
	Oid			fn = orch_probe_lookup(fntext, strlen(fntext), &problem);

	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("probe function %s: %s", fntext, problem)));
	if (pg_proc_aclcheck(fn, role, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", fntext)));
	why = probe_untrusted(fn, role);
	if (why)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("probe function %s may not run with the publisher's rights: %s", fntext, why)));
	return fn;
}

/* Call the probe's function; its value as text (bounded like a payload) */
static void
probe_call(const char *name, Oid fn, ProbeOutcome *out)
{
	FmgrInfo	flinfo;
	Datum		d;
	Oid			typout;
	bool		varlena;
	LOCAL_FCINFO(fc, 0);

	fmgr_info(fn, &flinfo);
	InitFunctionCallInfoData(*fc, &flinfo, 0, InvalidOid, NULL, NULL);
	d = FunctionCallInvoke(fc);
	out->isnull = fc->isnull;
	if (out->isnull)
		return;
	getTypeOutputInfo(get_func_rettype(fn), &typout, &varlena);
	pin_output_format();		/* again: the probe may have changed them */
	out->value = OidOutputFunctionCall(typout, d);
	if (strlen(out->value) > (Size) orch_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the value of probe \"%s\" is over orchestrator.max_payload_size", name),
				 errdetail("It takes %zu bytes; the limit is %d.", strlen(out->value),
						   orch_max_payload_size)));
}

/*
 * Does a probe's error say something of its value (drift to acknowledge)?
 * Not a cancel, a serialization failure, a deadlock, a lock not available,
 * nor a resource, operator or system error: those are raised again.
 */
static bool
probe_error_is_value(int sqlerrcode)
{
	return !(sqlerrcode == ERRCODE_QUERY_CANCELED ||
			 sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE ||
			 sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED ||
			 sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
			 ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_INSUFFICIENT_RESOURCES ||
			 ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_OPERATOR_INTERVENTION ||
			 ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_SYSTEM_ERROR ||
			 ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_INTERNAL_ERROR);
}

/*
 * Run one probe function as role (the publisher): search_path pinned to
 * pg_catalog, pg_temp, the transaction read-only, the user id switched with
 * SECURITY_RESTRICTED_OPERATION, all in a subtransaction, so that an error
 * of the probe is its outcome and leaves nothing behind.  A query cancel is
 * raised again.
 */
static ProbeOutcome
probe_run(const char *name, const char *fntext, const char *publisher)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			save_user;
	int			save_sec;
	ProbeOutcome out;

	memset(&out, 0, sizeof(out));
	GetUserIdAndSecContext(&save_user, &save_sec);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		Oid			role = publisher ? get_role_oid(publisher, true) : InvalidOid;
		int			nest;

		if (!OidIsValid(role))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("the role that published the definition (\"%s\") no longer exists",
							publisher ? publisher : "")));
		SetUserIdAndSecContext(role, save_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_RESTRICTED_OPERATION);
		nest = NewGUCNestLevel();
		(void) set_config_option("search_path", "pg_catalog, pg_temp",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("transaction_read_only", "on",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		pin_output_format();
		probe_call(name, probe_function(fntext, role), &out);
		/*
		 * The value is copied (in cxt); everything the probe did is undone:
		 * settings it changed, even with a plain SET (which would otherwise
		 * outlive the probe and reach the extension's own statements and
		 * the caller's session), and any other effect of its subtransaction.
		 */
		AtEOXact_GUC(false, nest);
		SetUserIdAndSecContext(save_user, save_sec);
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		out.ok = true;
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		SetUserIdAndSecContext(save_user, save_sec);
		/* what says nothing of the probe's value is raised again */
		if (!probe_error_is_value(e->sqlerrcode))
			ReThrowError(e);
		out.ok = false;
		out.value = NULL;
		out.sqlstate = pstrdup(unpack_sql_state(e->sqlerrcode));
		out.message = e->message
			? pnstrdup(e->message, pg_mbcliplen(e->message, strlen(e->message), 200)) : "";
		FreeErrorData(e);
	}
	PG_END_TRY();
	return out;
}

/*
 * Evaluate the probes of a definition (its spec's "probes" object) as its
 * publisher: {name: "text" | null}, in the object's key order.  A probe
 * that fails is {"error": "<SQLSTATE>"} when !strict (a gate: it counts as
 * drift), else raises 38000 naming it (nothing is pinned).
 */
static Jsonb *
probes_evaluate(Jsonb *probes, const char *publisher, const char *definition, bool strict)
{
	JsonbIterator *it = JsonbIteratorInit(&probes->root);
	JsonbValue	k;
	JsonbIteratorToken tok;
	StringInfoData b;
	bool		first = true;

	initStringInfo(&b);
	appendStringInfoChar(&b, '{');
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *name;
		JsonbValue	v;
		ProbeOutcome o;

		if (tok != WJB_KEY)
			continue;
		name = pnstrdup(k.val.string.val, k.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		CHECK_FOR_INTERRUPTS();
		o = probe_run(name, probe_function_text(&v), publisher);
		if (!o.ok && strict)
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("drift probe \"%s\" of workflow \"%s\" failed", name, definition),
					 errdetail("It raised SQLSTATE %s: %s", o.sqlstate, o.message),
					 errhint("Nothing was changed; a probe must return its value to be pinned.")));
		if (!first)
			appendStringInfoString(&b, ", ");
		first = false;
		escape_json(&b, name);
		appendStringInfoString(&b, ": ");
		if (!o.ok)
		{
			appendStringInfoString(&b, "{\"error\": ");
			escape_json(&b, o.sqlstate);
			appendStringInfoChar(&b, '}');
		}
		else if (o.isnull)
			appendStringInfoString(&b, "null");
		else
			escape_json(&b, o.value);
	}
	appendStringInfoChar(&b, '}');
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(b.data)));
}

/*
 * orch_start: the probes of the spec pinned (NULL when it has none).  A
 * probe that fails refuses the start (38000).
 */
Jsonb *
orch_probes_pin(Jsonb *spec, const char *publisher, const char *definition)
{
	JsonbValue *probes = getKeyJsonValueFromContainer(&spec->root, "probes", 6, NULL);

	if (probes == NULL)
		return NULL;
	return probes_evaluate(JsonbValueToJsonb(probes), publisher, definition, true);
}

/*
 * The run's probes evaluated now against its pins: the diff
 * {probe: {"pinned": ..., "live": ...}} of those that differ, or NULL (no
 * probes, or no drift).  With *live, the live values.
 */
static Jsonb *
run_probe_diff(RunRow *r, bool strict, Jsonb **live_out)
{
	OrchArgs	a = {0};
	OrchArgs	cmp = {0};
	bool		isnull;
	Jsonb	   *pins;
	Jsonb	   *probes;
	char	   *publisher;
	char	   *definition;
	Jsonb	   *live;
	Datum		d;

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	if (orch_args_sql(&a, "SELECT r.probe_pins, d.spec -> 'probes', d.published_by, d.name"
				 " FROM orch.runs r JOIN orch.definitions d"
				 "   ON d.tenant_id = 'default' AND d.name = r.definition AND d.version = r.version"
				 " WHERE r.id = $1 AND r.tenant_id = $2 AND r.probe_pins IS NOT NULL",
				 false, 0, SPI_OK_SELECT) == 0)
		return NULL;
	pins = DatumGetJsonbPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (isnull)
		elog(ERROR, "orchestrator: run " INT64_FORMAT " has probe pins but its definition no probes", r->id);
	probes = DatumGetJsonbPCopy(d);
	publisher = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
	definition = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4);
	live = probes_evaluate(probes, publisher, definition, strict);
	if (live_out)
		*live_out = live;
	orch_arg_jsonb(&cmp, pins);
	orch_arg_jsonb(&cmp, live);
	if (orch_args_sql(&cmp, "SELECT jsonb_object_agg(p.key, jsonb_build_object('pinned', p.value, 'live', $2 -> p.key))"
				 " FROM jsonb_each($1) p WHERE p.value IS DISTINCT FROM $2 -> p.key",
				 false, 0, SPI_OK_SELECT) != 1)
		elog(ERROR, "orchestrator: probe comparison failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : DatumGetJsonbPCopy(d);
}

/*
 * Drift found: the run stops (paused, reason drift_detected, its diff in
 * orch.runs.drift), its event carrying the diff cut; a gate step (step not
 * NULL) that was about to start stays ready, its event drift_detected.
 */
static void
record_drift(RunRow *r, Jsonb *diff, const char *step)
{
	int			ev;
	OrchArgs	cut = {0};
	OrchArgs	run = {0};
	OrchArgs	a;
	char	   *note;

	orch_arg_jsonb(&cut, diff);
	orch_args_sql(&cut, "SELECT " DIFF_CUT("$1"), false, 0, SPI_OK_SELECT);
	note = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	orch_arg_int8(&run, r->id);
	orch_arg_text(&run, r->tenant);
	a = run;
	orch_arg_jsonb(&a, diff);
	orch_args_sql(&a, "UPDATE orch.runs SET drift = $3 WHERE id = $1 AND tenant_id = $2",
				  false, 0, SPI_OK_UPDATE);
	ev = orch_set_event_context(orch_event_context()->actor, note);
	if (r->state == RS_PAUSED)
	{
		/* found by orch_resume_run: the run stays paused, for drift now */
		orch_args_sql(&run, "UPDATE orch.runs SET reason_code = 'drift_detected' WHERE id = $1 AND tenant_id = $2",
					  false, 0, SPI_OK_UPDATE);
		r->reason = "drift_detected";
		orch_write_run_event(r->tenant, r->id, "run", "paused", "paused", "drift_detected", note);
	}
	else
	{
		/* waiting_approval cannot pause directly: through running */
		if (r->state == RS_WAITING_APPROVAL)
			orch_set_run_state(r, RS_RUNNING, "drift_detected", NULL);
		orch_set_run_state(r, RS_PAUSED, "drift_detected", NULL);
	}
	if (step != NULL)
	{
		a = run;
		orch_arg_text(&a, step);
		if (orch_args_sql(&a, "UPDATE orch.run_steps SET state = 'ready' WHERE run_id = $1 AND tenant_id = $2"
						  " AND step_id = $3 AND state = 'pending'",
						  false, 0, SPI_OK_UPDATE) > 0)
			orch_step_event(r, step, "pending", "ready", "drift_detected");
	}
	orch_clear_event_context(ev);
}

/*
 * Before a gate (a human_approval step starting to wait, a decision step
 * starting): the run's probes again.  True when they hold (or it has none);
 * false when the run stopped for drift (the step stays ready).
 */
bool
orch_run_probes_hold(RunRow *r, const char *step)
{
	Jsonb	   *diff = run_probe_diff(r, false, NULL);

	if (diff == NULL)
		return true;
	record_drift(r, diff, step);
	return false;
}

/*
 * OR010 while the run is stopped for drift that is not acknowledged (the
 * diff, cut, in the detail).  action: what is refused.
 */
void
orch_run_require_no_drift(RunRow *r, const char *action)
{
	OrchArgs	a = {0};

	orch_arg_int8(&a, r->id);
	orch_arg_text(&a, r->tenant);
	if (orch_args_sql(&a, "SELECT left(" DIFF_CUT("drift") ", 2000) FROM orch.runs"
				 " WHERE id = $1 AND tenant_id = $2 AND drift IS NOT NULL AND phase = 'forward'",
				 false, 0, SPI_OK_SELECT) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_DRIFT_DETECTED),
				 errmsg("run " INT64_FORMAT " is stopped by drift of its probes; cannot %s it", r->id, action),
				 errdetail("Drift: %s.", SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
				 errhint("Acknowledge it with orch_acknowledge_drift(run_id, approval_ref), then resume the run.")));
}

/*
 * orch_resume_run of a paused run (forward phase): refused (OR010) while
 * drift is not acknowledged; else the probes again: false when they drifted
 * (recorded: the run stays paused), true when the run may resume.
 */
bool
orch_run_probes_resume(RunRow *r)
{
	Jsonb	   *diff;

	orch_run_require_no_drift(r, "resume");
	diff = run_probe_diff(r, false, NULL);
	if (diff == NULL)
		return true;
	record_drift(r, diff, NULL);
	return false;
}

/* ----------------------------------------------------------------------
 * orch_acknowledge_drift(run_id, approval_ref, actor, note) -> run state:
 * a human accepts the live values; the probes are pinned to them again.
 * ---------------------------------------------------------------------- */
Datum
orch_acknowledge_drift(PG_FUNCTION_ARGS)
{
	int			ev;
	int64		run_id;
	char	   *ref;
	char	   *label = orch_key_arg(fcinfo, 2, "actor");
	char	   *note = orch_text_arg(fcinfo, 3);
	RunRow		r;
	OrchArgs	a = {0};
	OrchArgs	run;
	OrchArgs	ack;
	bool		isnull;
	Jsonb	   *live = NULL;
	const char *state;

	orch_require_arg(fcinfo, 0, "run_id");
	run_id = PG_GETARG_INT64(0);
	ref = orch_approval_ref_arg(fcinfo, 1);

	SPI_connect();
	orch_lock_run_or_not_found(run_id, &r);
	orch_arg_int8(&a, r.id);
	orch_arg_text(&a, r.tenant);
	run = a;					/* $1 and $2 */
	orch_arg_text(&a, ref);
	ack = a;					/* $1 to $6 here, $7 (the live values) below */
	orch_arg_text(&ack, orch_current_actor());
	orch_arg_text(&ack, label);
	orch_arg_text(&ack, note);

	/* a reference is used once: for one acknowledgement of one run */
	if (orch_args_sql(&a, "SELECT a.run_id = $1 AND a.step_id = '" DRIFT_STEP "',"
				 "   (SELECT r.drift IS NULL FROM orch.runs r WHERE r.id = $1 AND r.tenant_id = $2)"
				 " FROM orch.approvals a WHERE a.approval_ref = $3 AND a.tenant_id = $2",
				 false, 0, SPI_OK_SELECT) > 0)
	{
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
			DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		{
			/* the same acknowledgement again, nothing new to acknowledge: no change */
			state = orch_run_state_names[r.state];
			orch_run_busy_end(0);
			orch_scope_clear();
			SPI_finish();
			PG_RETURN_TEXT_P(cstring_to_text(state));
		}
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("approval reference \"%s\" was already used", ref),
				 errdetail("An approval reference is single-use and bound to one run and step (or one acknowledgement of drift).")));
	}
	if (orch_run_terminal(r.state))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " is \"%s\": no drift to acknowledge", run_id,
						orch_run_state_names[r.state])));
	if (orch_args_sql(&run, "SELECT 1 FROM orch.runs WHERE id = $1 AND tenant_id = $2 AND drift IS NOT NULL",
					  false, 0, SPI_OK_SELECT) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("run " INT64_FORMAT " has no drift to acknowledge", run_id),
				 errdetail("Its probes held when they were last checked, or the drift was acknowledged.")));
	/* the live values, pinned; a probe that fails now refuses the acknowledgement */
	(void) run_probe_diff(&r, true, &live);
	if (live == NULL)
		elog(ERROR, "orchestrator: run " INT64_FORMAT " has drift but no probes", run_id);
	orch_arg_jsonb(&ack, live);
	/* a concurrent use of the reference wins or loses here */
	if (!orch_run_record_approval(&r, ref, DRIFT_STEP, true, label, note))
		ereport(ERROR,
				(errcode(ERRCODE_ORCH_APPROVAL_INVALID),
				 errmsg("approval reference \"%s\" was already used", ref),
				 errdetail("An approval reference is single-use and bound to one run and step (or one acknowledgement of drift).")));
	orch_args_sql(&ack, "UPDATE orch.runs SET probe_pins = $7, drift = NULL, reason_code = 'drift_acknowledged'"
				  " WHERE id = $1 AND tenant_id = $2", false, 0, SPI_OK_UPDATE);
	r.reason = "drift_acknowledged";
	ev = orch_set_event_context(label, note);
	state = orch_run_state_names[r.state];
	orch_write_run_event(r.tenant, r.id, "run", state, state, "drift_acknowledged", NULL);
	orch_clear_event_context(ev);
	orch_run_busy_end(0);
	orch_scope_clear();
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}
