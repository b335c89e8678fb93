/*
 * definition_validate.c
 *	  The validator of workflow definition specs:
 *	  orch_definition_validate checks a spec completely and deterministically
 *	  and raises OR008 for the first problem, naming its JSON path in the
 *	  detail ("At $.steps[2].depends_on[0]: unknown step \"fetch\"."), in the
 *	  order docs/workflows.md ("Validation order") gives: the top-level keys,
 *	  policies and input_schema, each step completely in array order, then
 *	  the graph (entry steps, reachability, cycles).  Queue names, retry
 *	  policies and intervals are checked by the code that checks them for
 *	  queues and tasks.  It reads the spec, and the catalogs only to look up
 *	  the functions of drift probes (run_probes.c); no SPI.
 *
 *	  docs/workflows.md is the reference of the format enforced here; keep
 *	  the two in step.  The SQL-callable functions, storage and the guard
 *	  trigger are in definitions.c.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "orchestrator.h"
#include "definition_internal.h"

#define DEF_MAX_STEPS		1000	/* steps in one definition */
#define DEF_MAX_ID_LEN		64		/* bytes of a step_id */
#define DEF_MAX_HANDLER_LEN 256		/* bytes of a handler reference */
#define DEF_SHOW_CYCLE		20		/* steps of a cycle spelled out */

typedef enum StepType
{
	ST_TASK = 0,
	ST_DECISION,
	ST_WAIT,
	ST_EXTERNAL_CALL,
	ST_NOTIFY,
	ST_HUMAN_APPROVAL,
	ST_SUBFLOW
} StepType;

static const char *const step_types[] = {
	"task", "decision", "wait", "external_call", "notify", "human_approval", "subflow", NULL
};

/*
 * The keys each object accepts.  Unknown keys are reported before anything
 * else in the object (a misspelt key is the likeliest mistake).
 */
static const char *const top_keys[] = {
	"steps", "policies", "input_schema", "probes", "description", NULL
};
static const char *const probe_keys[] = {
	"function", "description", NULL
};
static const char *const policy_keys[] = {
	"deadline", "retry_policy", "queue", "retry_safety", NULL
};
static const char *const step_keys[] = {
	"step_id", "type", "description", "queue", "handler", "depends_on", "join",
	"on_success", "on_failure", "on_timeout", "retry_policy", "retry_safety",
	"timeout", "compensation", "targets", "rules", "default", "duration",
	"until_path", "signal", "map", "output_schema", "definition", "version", "input", NULL
};
static const char *const compensation_keys[] = {"handler", "queue", "mode", NULL};
static const char *const rule_keys[] = {"when", "then", NULL};
static const char *const when_keys[] = {"path", "op", "value", NULL};
static const char *const map_keys[] = {"over", "max_parallel", NULL};

static const char *const join_names[] = {"all_succeeded", "all_finished", "any", NULL};
static const char *const mode_names[] = {"auto", "approval", NULL};
static const char *const op_names[] = {
	"eq", "ne", "gt", "ge", "lt", "le", "exists", "in", NULL
};

/* One step as the checks see it */
typedef struct DefStep
{
	JsonbContainer *obj;		/* the step object; NULL when not an object */
	char	   *id;				/* its step_id when a string, else NULL */
	StepType	type;
	List	   *raw_deps;		/* first pass: depends_on entries naming a step */
	List	   *deps;			/* checked depends_on (step indexes) */
	List	   *outs;			/* checked on_* edges and decision targets */
} DefStep;

/* A step_id and the index of the first step that has it */
typedef struct DefId
{
	const char *id;
	int			len;
	int			index;
} DefId;

typedef struct DefCheck
{
	int			nsteps;
	DefStep    *steps;
	DefId	   *ids;			/* sorted by id, then index */
	int			nids;
	bool		default_queue;	/* policies.queue is given */
} DefCheck;

/* ----------------------------------------------------------------------
 * Step references
 * ---------------------------------------------------------------------- */

/* The index of the first step with this step_id, or -1 */
static int
find_step(DefCheck *c, const char *id, int len)
{
	int			lo = 0,
				hi = c->nids;

	/* lower bound of (id, len) in the sorted ids */
	while (lo < hi)
	{
		int			mid = (lo + hi) / 2;
		DefId	   *e = &c->ids[mid];
		int			r = memcmp(e->id, id, Min(e->len, len));

		if (r == 0 && e->len != len)
			r = e->len < len ? -1 : 1;
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < c->nids && c->ids[lo].len == len && memcmp(c->ids[lo].id, id, len) == 0)
		return c->ids[lo].index;
	return -1;
}

static int
check_ref(DefCheck *c, JsonbValue *v, const char *path)
{
	int			idx;

	if (v->type != jbvString)
		orch_def_fail(path, NULL, "a step reference must be a step_id (a string), not %s", orch_def_kind(v));
	idx = find_step(c, v->val.string.val, v->val.string.len);
	if (idx < 0)
		orch_def_fail(path, NULL, "unknown step %s", orch_def_show_value(v));
	return idx;
}

/*
 * A list of distinct step references: an array of step ids, or (with
 * scalar_ok) one step id or null.  not_self forbids the step itself.
 */
static List *
check_refs(DefCheck *c, JsonbValue *v, const char *path, const char *key,
		   bool scalar_ok, int self, bool not_self)
{
	JsonbContainer *arr;
	bool	   *seen;
	List	   *out = NIL;
	int			n;

	if (scalar_ok && v->type == jbvNull)
		return NIL;
	if (scalar_ok && v->type == jbvString)
		return list_make1_int(check_ref(c, v, path));
	if (!orch_def_is_array(v))
		orch_def_fail(path, NULL, scalar_ok ? "%s must be a step_id, an array of step ids or null, not %s"
				 : "%s must be an array of step ids, not %s", key, orch_def_kind(v));
	arr = v->val.binary.data;
	n = JsonContainerSize(arr);
	seen = palloc0(sizeof(bool) * c->nsteps);
	for (int j = 0; j < n; j++)
	{
		JsonbValue *e = getIthJsonbValueFromContainer(arr, j);
		char	   *epath = orch_def_path_idx(path, j);
		int			idx = check_ref(c, e, epath);

		if (not_self && idx == self)
			orch_def_fail(epath, NULL, "a step cannot depend on itself");
		if (seen[idx])
			orch_def_fail(epath, NULL, "duplicate step %s", orch_def_show_value(e));
		seen[idx] = true;
		out = lappend_int(out, idx);
	}
	return out;
}

/* Is anc an ancestor of self through depends_on (as first read)? */
static bool
is_dep_ancestor(DefCheck *c, int self, int anc)
{
	bool	   *seen = palloc0(sizeof(bool) * c->nsteps);
	int		   *todo = palloc(sizeof(int) * c->nsteps);
	int			n = 0;
	bool		found = false;

	todo[n++] = self;
	seen[self] = true;
	while (n > 0 && !found)
	{
		ListCell   *lc;
		int			s = todo[--n];

		foreach(lc, c->steps[s].raw_deps)
		{
			int			d = lfirst_int(lc);

			if (d == anc)
				found = true;
			if (!seen[d])
			{
				seen[d] = true;
				todo[n++] = d;
			}
		}
	}
	pfree(seen);
	pfree(todo);
	return found;
}

/*
 * A path of a decision rule into the decision's context:
 * $.input[.key...], $.steps.<step_id>.output[.key...], or (for a decision
 * with a handler) $.result[.key...].  Segments are not empty.
 */
static void
check_context_path(DefCheck *c, JsonbValue *v, const char *path, bool has_handler)
{
	const char *hint = "A rule path is $.input[.key...], $.steps.<step_id>.output[.key...] or, on a decision with a handler, $.result[.key...].";
	const char *s;
	int			len;

	if (v->type != jbvString)
		orch_def_fail(path, hint, "path must be a string, not %s", orch_def_kind(v));
	s = v->val.string.val;
	len = v->val.string.len;
	if (len < 3 || s[0] != '$' || s[1] != '.')
		orch_def_fail(path, hint, "path %s must start with \"$.\"", orch_def_show_value(v));
	for (int k = 1; k < len; k++)
		if (s[k] == '.' && (k + 1 == len || s[k + 1] == '.'))
			orch_def_fail(path, hint, "path %s has an empty segment", orch_def_show_value(v));
	s += 2;
	len -= 2;
#define SEG_IS(word) (len >= (int) strlen(word) && memcmp(s, word, strlen(word)) == 0 && \
					  (len == (int) strlen(word) || s[strlen(word)] == '.'))
	if (SEG_IS("input"))
		return;
	if (SEG_IS("result"))
	{
		if (!has_handler)
			orch_def_fail(path, hint, "path %s uses $.result, which only a decision step with a handler has",
					 orch_def_show_value(v));
		return;
	}
	if (SEG_IS("steps"))
	{
		int			best = -1;
		bool		named = false;
		const char *r = s + 6;
		int			rlen = len - 6;

		if (rlen <= 0)
			orch_def_fail(path, hint, "path %s must name a step: $.steps.<step_id>.output[.key...]",
					 orch_def_show_value(v));

		/*
		 * The longest step_id the path names (ids may contain '.'): try each
		 * prefix that ends at a '.' or at the end, shortest first.
		 */
		for (int p = 1; p <= rlen; p++)
		{
			const char *tail = r + p;
			int			tlen = rlen - p;

			if (p < rlen && r[p] != '.')
				continue;
			if (find_step(c, r, p) < 0)
				continue;
			named = true;
			if (tlen >= 7 && memcmp(tail, ".output", 7) == 0 && (tlen == 7 || tail[7] == '.'))
				best = p;
		}
		if (best >= 0)
			return;
		if (named)
			orch_def_fail(path, hint, "path %s must continue with \".output\" after the step_id",
					 orch_def_show_value(v));
		orch_def_fail(path, hint, "unknown step in path %s", orch_def_show_value(v));
	}
#undef SEG_IS
	orch_def_fail(path, hint, "path %s must start with $.input, $.steps or $.result", orch_def_show_value(v));
}

/*
 * map.over: "$.input.<key>" or "$.steps.<step_id>.output.<key>" (one key,
 * without '.'), the step being an ancestor through depends_on.
 */
static void
check_map_over(DefCheck *c, int self, JsonbValue *v, const char *path)
{
	const char *hint = "map.over is \"$.input.<key>\" or \"$.steps.<step_id>.output.<key>\".";
	const char *s;
	int			len;

	if (v->type != jbvString)
		orch_def_fail(path, hint, "over must be a string, not %s", orch_def_kind(v));
	s = v->val.string.val;
	len = v->val.string.len;
	if (len > 8 && memcmp(s, "$.input.", 8) == 0 && memchr(s + 8, '.', len - 8) == NULL)
		return;
	if (len > 8 && memcmp(s, "$.steps.", 8) == 0)
	{
		const char *dot = NULL;
		int			idlen;
		int			idx;

		for (int k = len - 1; k >= 8 && dot == NULL; k--)
			if (s[k] == '.')
				dot = s + k;
		/* "$.steps." <id> ".output" "." <key> */
		idlen = dot ? (int) (dot - s) - 8 - 7 : -1;
		if (dot != NULL && dot < s + len - 1 && idlen > 0 && memcmp(dot - 7, ".output", 7) == 0)
		{
			idx = find_step(c, s + 8, idlen);
			if (idx < 0)
				orch_def_fail(path, NULL, "unknown step %s", orch_def_show(s + 8, idlen));
			if (!is_dep_ancestor(c, self, idx))
				orch_def_fail(path, NULL, "step %s is not an ancestor of this step through depends_on",
						 orch_def_show(s + 8, idlen));
			return;
		}
	}
	orch_def_fail(path, hint, "over must be \"$.input.<key>\" or \"$.steps.<step_id>.output.<key>\", not %s",
			 orch_def_show_value(v));
}

/* wait.until_path: $.input.<key>[.<key>...] */
static void
check_input_path(JsonbValue *v, const char *path)
{
	const char *s;
	int			len;

	if (v->type != jbvString)
		orch_def_fail(path, NULL, "until_path must be a string, not %s", orch_def_kind(v));
	s = v->val.string.val;
	len = v->val.string.len;
	if (len <= 8 || memcmp(s, "$.input.", 8) != 0)
		orch_def_fail(path, NULL, "until_path %s must be a path into the input, \"$.input.<key>[.<key>...]\"",
				 orch_def_show_value(v));
	for (int k = 7; k < len; k++)
		if (s[k] == '.' && (k + 1 == len || s[k + 1] == '.'))
			orch_def_fail(path, NULL, "until_path %s has an empty segment", orch_def_show_value(v));
}

/* ----------------------------------------------------------------------
 * The parts of a definition
 * ---------------------------------------------------------------------- */

static void
check_policies(DefCheck *c, JsonbValue *v, const char *path)
{
	JsonbContainer *o;
	JsonbValue *e;
	JsonbValue *policy_safety = NULL;

	if (!orch_def_is_object(v))
		orch_def_fail(path, NULL, "policies must be an object, not %s", orch_def_kind(v));
	o = v->val.binary.data;
	orch_def_check_keys(o, path, policy_keys, "policies");
	if ((e = orch_def_get(o, "deadline")) != NULL)
		orch_def_check_interval(e, orch_def_path_key(path, "deadline"), "deadline");
	if ((e = orch_def_get(o, "retry_policy")) != NULL)
		policy_safety = orch_def_check_retry_policy(e, orch_def_path_key(path, "retry_policy"));
	if ((e = orch_def_get(o, "queue")) != NULL)
	{
		orch_def_check_queue(e, orch_def_path_key(path, "queue"), "queue");
		c->default_queue = true;
	}
	if ((e = orch_def_get(o, "retry_safety")) != NULL)
		orch_def_check_safety(e, orch_def_path_key(path, "retry_safety"), policy_safety);
}

/*
 * input_schema and output_schema: the JSON Schema subset of json_schema.c.
 * input_schema describes the run's input, which (as before 0.8.0) must be
 * an object unless the schema's own "type" says otherwise.
 */
static void
check_schema(JsonbValue *v, const char *path)
{
	JsonSchemaProblem p;

	if (!orch_json_schema_check(v, path, &p))
		orch_def_fail(p.path, p.hint, "%s", p.message);
}

static void
check_rules(DefCheck *c, JsonbValue *v, const char *path, List *targets, bool has_handler)
{
	JsonbContainer *arr;
	int			n;

	if (!orch_def_is_array(v))
		orch_def_fail(path, NULL, "rules must be an array of rules, not %s", orch_def_kind(v));
	arr = v->val.binary.data;
	n = JsonContainerSize(arr);
	for (int j = 0; j < n; j++)
	{
		JsonbValue *r = getIthJsonbValueFromContainer(arr, j);
		char	   *rpath = orch_def_path_idx(path, j);
		char	   *wpath;
		JsonbContainer *w;
		JsonbValue *e;
		JsonbValue *val;
		int			op;
		int			then;

		CHECK_FOR_INTERRUPTS();
		if (!orch_def_is_object(r))
			orch_def_fail(rpath, NULL, "a rule must be an object {\"when\": ..., \"then\": ...}, not %s",
					 orch_def_kind(r));
		orch_def_check_keys(r->val.binary.data, rpath, rule_keys, "A rule");
		if ((e = orch_def_get(r->val.binary.data, "when")) == NULL)
			orch_def_fail(rpath, NULL, "when is required");
		wpath = orch_def_path_key(rpath, "when");
		if (!orch_def_is_object(e))
			orch_def_fail(wpath, NULL, "when must be an object {\"path\": ..., \"op\": ..., \"value\": ...}, not %s",
					 orch_def_kind(e));
		w = e->val.binary.data;
		orch_def_check_keys(w, wpath, when_keys, "A condition");
		if ((e = orch_def_get(w, "path")) == NULL)
			orch_def_fail(wpath, NULL, "path is required");
		check_context_path(c, e, orch_def_path_key(wpath, "path"), has_handler);
		if ((e = orch_def_get(w, "op")) == NULL)
			orch_def_fail(wpath, NULL, "op is required");
		op = orch_def_check_choice(e, orch_def_path_key(wpath, "op"), "op", op_names);
		val = orch_def_get(w, "value");
		if (strcmp(op_names[op], "exists") == 0)
		{
			if (val != NULL)
				orch_def_fail(orch_def_path_key(wpath, "value"), NULL, "value is not allowed with op exists");
		}
		else if (val == NULL)
			orch_def_fail(wpath, NULL, "value is required with op %s", op_names[op]);
		else if (strcmp(op_names[op], "in") == 0 && !orch_def_is_array(val))
			orch_def_fail(orch_def_path_key(wpath, "value"), NULL, "value must be an array with op in, not %s",
					 orch_def_kind(val));
		else if (op >= 2 && op <= 5 && val->type != jbvNumeric && val->type != jbvString)
			orch_def_fail(orch_def_path_key(wpath, "value"), NULL, "value must be a number or a string with op %s, not %s",
					 op_names[op], orch_def_kind(val));
		if ((e = orch_def_get(r->val.binary.data, "then")) == NULL)
			orch_def_fail(rpath, NULL, "then is required");
		then = check_ref(c, e, orch_def_path_key(rpath, "then"));
		if (!list_member_int(targets, then))
			orch_def_fail(orch_def_path_key(rpath, "then"), NULL, "then %s is not one of the targets", orch_def_show_value(e));
	}
}

static void
check_compensation(JsonbValue *v, const char *path)
{
	JsonbContainer *o;
	JsonbValue *e;

	if (!orch_def_is_object(v))
		orch_def_fail(path, NULL, "compensation must be an object {\"handler\": ...}, not %s", orch_def_kind(v));
	o = v->val.binary.data;
	orch_def_check_keys(o, path, compensation_keys, "compensation");
	if ((e = orch_def_get(o, "handler")) == NULL)
		orch_def_fail(path, NULL, "handler is required");
	orch_def_check_name(e, orch_def_path_key(path, "handler"), "handler", DEF_MAX_HANDLER_LEN);
	if ((e = orch_def_get(o, "queue")) != NULL)
		orch_def_check_queue(e, orch_def_path_key(path, "queue"), "queue");
	if ((e = orch_def_get(o, "mode")) != NULL)
		orch_def_check_choice(e, orch_def_path_key(path, "mode"), "mode", mode_names);
}

static bool
valid_step_id(const char *s, int len)
{
	if (len < 1 || len > DEF_MAX_ID_LEN)
		return false;
	for (int i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
			  (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-'))
			return false;
	return true;
}

/*
 * probes: a non-empty object of at most ORCH_MAX_PROBES members, name (as
 * a step_id) -> a function written "schema.name()", or {"function": ...,
 * "description": ...}.  The function must exist, take no arguments, be a
 * plain function returning one value (run_probes.c looks it up).
 */
static void
check_probes(JsonbValue *v, const char *path)
{
	JsonbContainer *o;
	JsonbIterator *it;
	JsonbValue	k;
	JsonbIteratorToken tok;
	int			count;

	if (!orch_def_is_object(v))
		orch_def_fail(path, NULL, "probes must be an object, not %s", orch_def_kind(v));
	o = v->val.binary.data;
	count = JsonContainerSize(o);
	if (count == 0)
		orch_def_fail(path, NULL, "probes must not be empty");
	if (count > ORCH_MAX_PROBES)
		orch_def_fail(path, NULL, "a workflow has at most %d probes, not %d", ORCH_MAX_PROBES, count);
	it = JsonbIteratorInit(o);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *ppath;
		JsonbValue	e;
		JsonbValue *f;
		char	   *fpath;
		char	   *problem;

		if (tok != WJB_KEY)
			continue;
		ppath = orch_def_path_key_len(path, k.val.string.val, k.val.string.len);
		if (!valid_step_id(k.val.string.val, k.val.string.len))
			orch_def_fail(ppath, "A probe name has 1 to 64 characters: letters, digits, '_', '.' and '-'.",
						  "invalid probe name %s", orch_def_show_value(&k));
		tok = JsonbIteratorNext(&it, &e, true);
		f = &e;
		fpath = ppath;
		if (orch_def_is_object(&e))
		{
			JsonbValue *d;

			orch_def_check_keys(e.val.binary.data, ppath, probe_keys, "A probe");
			if ((f = orch_def_get(e.val.binary.data, "function")) == NULL)
				orch_def_fail(ppath, NULL, "function is required");
			fpath = orch_def_path_key(ppath, "function");
			if ((d = orch_def_get(e.val.binary.data, "description")) != NULL)
				orch_def_check_text(d, orch_def_path_key(ppath, "description"), "description");
		}
		else if (e.type != jbvString)
			orch_def_fail(ppath, NULL, "a probe must be a function name or an object, not %s", orch_def_kind(&e));
		if (f->type != jbvString)
			orch_def_fail(fpath, NULL, "function must be a string, not %s", orch_def_kind(f));
		if (f->val.string.len > 2 * NAMEDATALEN + 16)
			orch_def_fail(fpath, NULL, "function must have at most %d bytes", 2 * NAMEDATALEN + 16);
		if (!OidIsValid(orch_probe_lookup(f->val.string.val, f->val.string.len, &problem)))
			orch_def_fail(fpath, NULL, "function %s: %s", orch_def_show_value(f), problem);
	}
}

/* A step's step_id: valid, and not used by an earlier step */
static void
check_step_id(DefCheck *c, int i, JsonbContainer *o, const char *spath)
{
	JsonbValue *e;
	int			first;

	if ((e = orch_def_get(o, "step_id")) == NULL)
		orch_def_fail(spath, NULL, "step_id is required");
	if (e->type != jbvString)
		orch_def_fail(orch_def_path_key(spath, "step_id"), NULL, "step_id must be a string, not %s", orch_def_kind(e));
	if (!valid_step_id(e->val.string.val, e->val.string.len))
		orch_def_fail(orch_def_path_key(spath, "step_id"),
				 "A step_id has 1 to 64 characters: letters, digits, '_', '.' and '-'.",
				 "invalid step_id %s", orch_def_show_value(e));
	first = find_step(c, e->val.string.val, e->val.string.len);
	if (first != i)
		orch_def_fail(orch_def_path_key(spath, "step_id"), NULL, "duplicate step_id %s (also at $.steps[%d])",
				 orch_def_show_value(e), first);

}

/* A step's queue and handler: where each is required, allowed or refused */
static void
check_step_worker(DefCheck *c, DefStep *s, JsonbContainer *o, const char *spath, JsonbValue *handler)
{
	JsonbValue *e;
	const char *tname = step_types[s->type];
	bool		worker_type = s->type == ST_TASK || s->type == ST_EXTERNAL_CALL || s->type == ST_NOTIFY;
	bool		no_handler = s->type == ST_WAIT || s->type == ST_HUMAN_APPROVAL || s->type == ST_SUBFLOW;

	if ((e = orch_def_get(o, "queue")) != NULL)
	{
		/* a human_approval step's queue is where its task waits (run_approvals.c) */
		if (s->type == ST_WAIT || s->type == ST_SUBFLOW)
			orch_def_fail(orch_def_path_key(spath, "queue"), NULL, "queue is not allowed on %s steps", tname);
		if (s->type == ST_DECISION && handler == NULL)
			orch_def_fail(orch_def_path_key(spath, "queue"), NULL,
					 "queue is only allowed on a decision step that has a handler");
		orch_def_check_queue(e, orch_def_path_key(spath, "queue"), "queue");
	}
	else if ((worker_type || (s->type == ST_DECISION && handler != NULL)) && !c->default_queue)
		orch_def_fail(spath, "Name a queue on the step, or a default queue in policies.queue.",
				 "queue is required for %s steps%s", tname,
				 s->type == ST_DECISION ? " with a handler" : "");
	if (handler != NULL)
	{
		if (no_handler)
			orch_def_fail(orch_def_path_key(spath, "handler"), NULL, "handler is not allowed on %s steps", tname);
		orch_def_check_name(handler, orch_def_path_key(spath, "handler"), "handler", DEF_MAX_HANDLER_LEN);
	}
	else if (worker_type)
		orch_def_fail(spath, NULL, "handler is required for %s steps", tname);

}

/* A step's edges: depends_on, join, on_success, on_failure, on_timeout */
static void
check_step_edges(DefCheck *c, int i, DefStep *s, JsonbContainer *o, const char *spath)
{
	JsonbValue *e;

	if ((e = orch_def_get(o, "depends_on")) != NULL)
		s->deps = check_refs(c, e, orch_def_path_key(spath, "depends_on"), "depends_on", false, i, true);
	if ((e = orch_def_get(o, "join")) != NULL)
		orch_def_check_choice(e, orch_def_path_key(spath, "join"), "join", join_names);

	/* on_success, on_failure, on_timeout */
	if ((e = orch_def_get(o, "on_success")) != NULL)
	{
		if (s->type == ST_DECISION)
			orch_def_fail(orch_def_path_key(spath, "on_success"), NULL,
					 "on_success is not allowed on decision steps: a decision's successors are its targets");
		s->outs = list_concat(s->outs, check_refs(c, e, orch_def_path_key(spath, "on_success"),
												  "on_success", true, i, false));
	}
	if ((e = orch_def_get(o, "on_failure")) != NULL)
		s->outs = list_concat(s->outs, check_refs(c, e, orch_def_path_key(spath, "on_failure"),
												  "on_failure", true, i, false));
	if ((e = orch_def_get(o, "on_timeout")) != NULL)
		s->outs = list_concat(s->outs, check_refs(c, e, orch_def_path_key(spath, "on_timeout"),
												  "on_timeout", true, i, false));

}

/* retry_policy and retry_safety: only where a handler runs */
static void
check_step_retry(JsonbContainer *o, const char *spath, JsonbValue *handler)
{
	JsonbValue *e;
	JsonbValue *policy_safety = NULL;

	if ((e = orch_def_get(o, "retry_policy")) != NULL)
	{
		if (handler == NULL)
			orch_def_fail(orch_def_path_key(spath, "retry_policy"), NULL,
					 "retry_policy is only allowed on steps that run a handler");
		policy_safety = orch_def_check_retry_policy(e, orch_def_path_key(spath, "retry_policy"));
	}
	if ((e = orch_def_get(o, "retry_safety")) != NULL)
	{
		if (handler == NULL)
			orch_def_fail(orch_def_path_key(spath, "retry_safety"), NULL,
					 "retry_safety is only allowed on steps that run a handler");
		orch_def_check_safety(e, orch_def_path_key(spath, "retry_safety"), policy_safety);
	}

}

/* A decision's targets, rules and default (refused on other steps) */
static void
check_step_decision(DefCheck *c, int i, DefStep *s, JsonbContainer *o, const char *spath, JsonbValue *handler)
{
	JsonbValue *e;

	if (s->type != ST_DECISION)
	{
		static const char *const keys[] = {"targets", "rules", "default", NULL};

		for (const char *const *k = keys; *k; k++)
			if (orch_def_get(o, *k) != NULL)
				orch_def_fail(orch_def_path_key(spath, *k), NULL, "%s is only allowed on decision steps", *k);
	}
	else
	{
		List	   *targets;
		JsonbValue *rules;
		JsonbValue *dflt;

		if ((e = orch_def_get(o, "targets")) == NULL)
			orch_def_fail(spath, NULL, "targets is required for decision steps");
		targets = check_refs(c, e, orch_def_path_key(spath, "targets"), "targets", false, i, false);
		if (targets == NIL)
			orch_def_fail(orch_def_path_key(spath, "targets"), NULL, "targets must not be empty");
		if ((rules = orch_def_get(o, "rules")) != NULL)
			check_rules(c, rules, orch_def_path_key(spath, "rules"), targets, handler != NULL);
		if ((dflt = orch_def_get(o, "default")) != NULL)
		{
			int			d = check_ref(c, dflt, orch_def_path_key(spath, "default"));

			if (!list_member_int(targets, d))
				orch_def_fail(orch_def_path_key(spath, "default"), NULL, "default %s is not one of the targets",
						 orch_def_show_value(dflt));
		}
		if (handler == NULL && dflt == NULL &&
			(rules == NULL || JsonContainerSize(rules->val.binary.data) == 0))
			orch_def_fail(spath, NULL, "a decision step needs a handler, rules or a default to choose its target");
		s->outs = list_concat(s->outs, targets);
	}

}

/* A wait step's duration, until_path or signal (refused on other steps) */
static void
check_step_wait(DefStep *s, JsonbContainer *o, const char *spath)
{
	if (s->type != ST_WAIT)
	{
		static const char *const keys[] = {"duration", "until_path", "signal", NULL};

		for (const char *const *k = keys; *k; k++)
			if (orch_def_get(o, *k) != NULL)
				orch_def_fail(orch_def_path_key(spath, *k), NULL, "%s is only allowed on wait steps", *k);
	}
	else
	{
		JsonbValue *duration = orch_def_get(o, "duration");
		JsonbValue *until = orch_def_get(o, "until_path");
		JsonbValue *signal = orch_def_get(o, "signal");

		if (duration != NULL && until != NULL)
			orch_def_fail(spath, NULL, "a wait step takes duration or until_path, not both");
		if (signal != NULL && (duration != NULL || until != NULL))
			orch_def_fail(spath, NULL, "a wait step for a signal takes no %s",
						  duration != NULL ? "duration" : "until_path");
		if (duration == NULL && until == NULL && signal == NULL)
			orch_def_fail(spath, NULL, "a wait step needs duration, until_path or signal");
		if (signal != NULL)
			orch_def_check_signal(signal, orch_def_path_key(spath, "signal"));
		else if (duration != NULL)
			orch_def_check_interval(duration, orch_def_path_key(spath, "duration"), "duration");
		else
			check_input_path(until, orch_def_path_key(spath, "until_path"));
	}

}

/* A task step's map (refused on other steps) */
static void
check_step_map(DefCheck *c, int i, DefStep *s, JsonbContainer *o, const char *spath)
{
	JsonbValue *e;

	if ((e = orch_def_get(o, "map")) != NULL)
	{
		char	   *mpath = orch_def_path_key(spath, "map");
		JsonbValue *m;

		if (s->type != ST_TASK && s->type != ST_SUBFLOW)
			orch_def_fail(mpath, NULL, "map is only allowed on task and subflow steps");
		if (!orch_def_is_object(e))
			orch_def_fail(mpath, NULL, "map must be an object {\"over\": ...}, not %s", orch_def_kind(e));
		orch_def_check_keys(e->val.binary.data, mpath, map_keys, "map");
		if ((m = orch_def_get(e->val.binary.data, "over")) == NULL)
			orch_def_fail(mpath, NULL, "over is required");
		check_map_over(c, i, m, orch_def_path_key(mpath, "over"));
		if ((m = orch_def_get(e->val.binary.data, "max_parallel")) != NULL)
			orch_def_check_int(m, orch_def_path_key(mpath, "max_parallel"), "max_parallel", 1);
	}

}

/* A subflow step's definition, version and input (refused on other steps) */
static void
check_step_subflow(DefCheck *c, DefStep *s, JsonbContainer *o, const char *spath)
{
	JsonbValue *e;

	if (s->type != ST_SUBFLOW)
	{
		static const char *const keys[] = {"definition", "version", "input", NULL};

		for (const char *const *k = keys; *k; k++)
			if (orch_def_get(o, *k) != NULL)
				orch_def_fail(orch_def_path_key(spath, *k), NULL, "%s is only allowed on subflow steps", *k);
		return;
	}
	if ((e = orch_def_get(o, "definition")) == NULL)
		orch_def_fail(spath, NULL, "definition is required for subflow steps");
	orch_def_check_name(e, orch_def_path_key(spath, "definition"), "definition", NAMEDATALEN * 4);
	if ((e = orch_def_get(o, "version")) != NULL)
		orch_def_check_int(e, orch_def_path_key(spath, "version"), "version", 1);
	if ((e = orch_def_get(o, "input")) != NULL)
	{
		char	   *ipath = orch_def_path_key(spath, "input");

		if (orch_def_get(o, "map") != NULL)
			orch_def_fail(ipath, NULL, "a map of sub-workflows gives each its item as input; input is not allowed with map");
		if (orch_def_is_object(e))
		{
			JsonbIterator *it = JsonbIteratorInit(e->val.binary.data);
			JsonbValue	v;
			JsonbIteratorToken tok;
			char	   *key = NULL;

			while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
			{
				if (tok == WJB_KEY)
					key = pnstrdup(v.val.string.val, v.val.string.len);
				else if (tok == WJB_VALUE)
					check_context_path(c, &v, orch_def_path_key(ipath, key), false);
			}
		}
		else
			check_context_path(c, e, ipath, false);
	}
}

/* Every check of one step, in the documented order */
static void
check_step(DefCheck *c, int i)
{
	DefStep    *s = &c->steps[i];
	char	   *spath = orch_def_path_idx("$.steps", i);
	JsonbContainer *o;
	JsonbValue *e;
	JsonbValue *handler;
	bool		worker_type;	/* task, external_call, notify */

	Assert(s->obj != NULL);		/* the caller reports a step that is not an object */
	o = s->obj;
	orch_def_check_keys(o, spath, step_keys, "A step");
	check_step_id(c, i, o, spath);

	/* type */
	s->type = ST_TASK;
	if ((e = orch_def_get(o, "type")) != NULL)
		s->type = (StepType) orch_def_check_choice(e, orch_def_path_key(spath, "type"), "type", step_types);
	worker_type = s->type == ST_TASK || s->type == ST_EXTERNAL_CALL || s->type == ST_NOTIFY;

	/* description */
	if ((e = orch_def_get(o, "description")) != NULL)
		orch_def_check_text(e, orch_def_path_key(spath, "description"), "description");

	handler = orch_def_get(o, "handler");
	check_step_worker(c, s, o, spath, handler);
	check_step_edges(c, i, s, o, spath);
	check_step_retry(o, spath, handler);

	/* timeout */
	if ((e = orch_def_get(o, "timeout")) != NULL)
		orch_def_check_interval(e, orch_def_path_key(spath, "timeout"), "timeout");

	/* compensation */
	if ((e = orch_def_get(o, "compensation")) != NULL)
	{
		if (!worker_type)
			orch_def_fail(orch_def_path_key(spath, "compensation"), NULL,
						  "compensation is only allowed on task, external_call and notify steps");
		check_compensation(e, orch_def_path_key(spath, "compensation"));
	}

	check_step_decision(c, i, s, o, spath, handler);
	check_step_wait(s, o, spath);
	check_step_map(c, i, s, o, spath);
	check_step_subflow(c, s, o, spath);

	/* output_schema: where a handler's result, a signal's payload or a sub-workflow's output is the output */
	if ((e = orch_def_get(o, "output_schema")) != NULL)
	{
		if (handler == NULL && s->type != ST_SUBFLOW && !(s->type == ST_WAIT && orch_def_get(o, "signal") != NULL))
			orch_def_fail(orch_def_path_key(spath, "output_schema"), NULL,
						  "output_schema is only allowed on steps that run a handler, wait for a signal or start a sub-workflow");
		check_schema(e, orch_def_path_key(spath, "output_schema"));
	}
}

static void
report_cycle(DefCheck *c, int *nodes, int k)
{
	StringInfoData b;
	int			m = 0;

	/* start at the step that comes first in the document */
	for (int j = 1; j < k; j++)
		if (nodes[j] < nodes[m])
			m = j;
	initStringInfo(&b);
	for (int j = 0; j < k && j < DEF_SHOW_CYCLE; j++)
		appendStringInfo(&b, "%s -> ", c->steps[nodes[(m + j) % k]].id);
	if (k > DEF_SHOW_CYCLE)
		appendStringInfo(&b, "... (%d steps) -> ", k);
	appendStringInfoString(&b, c->steps[nodes[m]].id);
	orch_def_fail(orch_def_path_idx("$.steps", nodes[m]), NULL, "cycle %s", b.data);
}

/*
 * The graph: edges dep -> step (depends_on), step -> target (on_success,
 * on_failure, on_timeout, decision targets).  There must be an entry step
 * (no incoming edge); every step must be reachable from the entry steps; and
 * the graph must be acyclic.
 */
static void
check_graph(DefCheck *c)
{
	int			n = c->nsteps;
	List	  **succ = palloc0(sizeof(List *) * n);
	int		   *indeg = palloc0(sizeof(int) * n);
	bool	   *reached = palloc0(sizeof(bool) * n);
	int		   *todo = palloc(sizeof(int) * n);
	int			ntodo = 0;
	int		   *color = palloc0(sizeof(int) * n);	/* 0 new, 1 on stack, 2 done */
	int		   *next = palloc0(sizeof(int) * n);
	int		   *stackpos = palloc0(sizeof(int) * n);
	ListCell   *lc;

	for (int i = 0; i < n; i++)
	{
		foreach(lc, c->steps[i].deps)
		{
			succ[lfirst_int(lc)] = lappend_int(succ[lfirst_int(lc)], i);
			indeg[i]++;
		}
		foreach(lc, c->steps[i].outs)
		{
			succ[i] = lappend_int(succ[i], lfirst_int(lc));
			indeg[lfirst_int(lc)]++;
		}
	}

	for (int i = 0; i < n; i++)
		if (indeg[i] == 0)
		{
			reached[i] = true;
			todo[ntodo++] = i;
		}
	if (ntodo == 0)
		orch_def_fail("$.steps", NULL,
				 "no entry step: every step depends on another step or is the target of an edge, so the steps form a cycle");
	for (int h = 0; h < ntodo; h++)
	{
		CHECK_FOR_INTERRUPTS();
		foreach(lc, succ[todo[h]])
			if (!reached[lfirst_int(lc)])
			{
				reached[lfirst_int(lc)] = true;
				todo[ntodo++] = lfirst_int(lc);
			}
	}
	for (int i = 0; i < n; i++)
		if (!reached[i])
			orch_def_fail(orch_def_path_idx("$.steps", i), NULL, "unreachable step %s: no entry step leads to it",
					 orch_def_show(c->steps[i].id, strlen(c->steps[i].id)));

	/* depth-first, iteratively; todo is the stack */
	for (int root = 0; root < n; root++)
	{
		int			sp = 0;

		if (color[root] != 0)
			continue;
		color[root] = 1;
		stackpos[root] = 0;
		todo[sp++] = root;
		while (sp > 0)
		{
			int			u = todo[sp - 1];

			CHECK_FOR_INTERRUPTS();
			if (next[u] < list_length(succ[u]))
			{
				int			v = list_nth_int(succ[u], next[u]++);

				if (color[v] == 1)
					report_cycle(c, todo + stackpos[v], sp - stackpos[v]);
				if (color[v] == 0)
				{
					color[v] = 1;
					stackpos[v] = sp;
					todo[sp++] = v;
				}
			}
			else
			{
				color[u] = 2;
				sp--;
			}
		}
	}
}

static int
defid_cmp(const void *a, const void *b)
{
	const DefId *x = (const DefId *) a;
	const DefId *y = (const DefId *) b;
	int			r = memcmp(x->id, y->id, Min(x->len, y->len));

	if (r != 0)
		return r;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

static void
check_definition(Jsonb *spec)
{
	DefCheck	c;
	JsonbContainer *root = &spec->root;
	JsonbValue *e;
	JsonbContainer *steps;

	memset(&c, 0, sizeof(c));
	if (!JB_ROOT_IS_OBJECT(spec) || JB_ROOT_IS_SCALAR(spec))
		orch_def_fail("$", NULL, "a workflow definition must be a JSON object");
	orch_def_check_keys(root, "$", top_keys, "A workflow definition");

	if ((e = orch_def_get(root, "steps")) == NULL)
		orch_def_fail("$", NULL, "steps is required");
	if (!orch_def_is_array(e))
		orch_def_fail("$.steps", NULL, "steps must be an array, not %s", orch_def_kind(e));
	steps = e->val.binary.data;
	c.nsteps = JsonContainerSize(steps);
	if (c.nsteps == 0)
		orch_def_fail("$.steps", NULL, "steps must not be empty");
	if (c.nsteps > DEF_MAX_STEPS)
		orch_def_fail("$.steps", NULL, "a workflow has at most %d steps, not %d", DEF_MAX_STEPS, c.nsteps);

	if ((e = orch_def_get(root, "description")) != NULL)
		orch_def_check_text(e, "$.description", "description");
	if ((e = orch_def_get(root, "policies")) != NULL)
		check_policies(&c, e, "$.policies");
	if ((e = orch_def_get(root, "input_schema")) != NULL)
		check_schema(e, "$.input_schema");
	if ((e = orch_def_get(root, "probes")) != NULL)
		check_probes(e, "$.probes");

	/* first pass: the step ids, then the depends_on entries naming a step */
	c.steps = palloc0(sizeof(DefStep) * c.nsteps);
	c.ids = palloc0(sizeof(DefId) * c.nsteps);
	for (int i = 0; i < c.nsteps; i++)
	{
		JsonbValue *st = getIthJsonbValueFromContainer(steps, i);

		if (!orch_def_is_object(st))
			continue;
		c.steps[i].obj = st->val.binary.data;
		e = orch_def_get(c.steps[i].obj, "step_id");
		if (e != NULL && e->type == jbvString)
		{
			c.steps[i].id = pnstrdup(e->val.string.val, e->val.string.len);
			c.ids[c.nids].id = c.steps[i].id;
			c.ids[c.nids].len = e->val.string.len;
			c.ids[c.nids].index = i;
			c.nids++;
		}
	}
	qsort(c.ids, c.nids, sizeof(DefId), defid_cmp);
	for (int i = 0; i < c.nsteps; i++)
	{
		JsonbContainer *deps;

		if (c.steps[i].obj == NULL ||
			(e = orch_def_get(c.steps[i].obj, "depends_on")) == NULL || !orch_def_is_array(e))
			continue;
		deps = e->val.binary.data;
		for (int j = 0; j < (int) JsonContainerSize(deps); j++)
		{
			JsonbValue *d = getIthJsonbValueFromContainer(deps, j);
			int			idx;

			if (d->type == jbvString &&
				(idx = find_step(&c, d->val.string.val, d->val.string.len)) >= 0)
				c.steps[i].raw_deps = lappend_int(c.steps[i].raw_deps, idx);
		}
	}

	/* second pass: every step in order, then the graph */
	for (int i = 0; i < c.nsteps; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (c.steps[i].obj == NULL)
			orch_def_fail(orch_def_path_idx("$.steps", i), NULL, "a step must be an object, not %s",
					 orch_def_kind(getIthJsonbValueFromContainer(steps, i)));
		check_step(&c, i);
	}
	check_graph(&c);
}

/*
 * Validate a workflow definition spec; OR008 naming the first problem.
 * Allocates in a context of its own, released on success.
 */
void
orch_definition_validate(Jsonb *spec)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "orchestrator definition check",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	check_definition(spec);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}
