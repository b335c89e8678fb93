/*
 * json_schema.c
 *	  The JSON Schema subset of a workflow's input_schema and of a step's
 *	  output_schema (docs/workflows.md, "Schemas"): orch_json_schema_check
 *	  checks a schema document when a definition is validated (every keyword
 *	  known, every value well formed, nesting bounded), and
 *	  orch_json_schema_validate checks a value against a checked schema,
 *	  reporting the JSON path of the first mismatch.  Both report a problem
 *	  to the caller (a path and a sentence) instead of raising, so that each
 *	  caller raises its own error; neither echoes more than a short prefix
 *	  of a user value.  Pure computation: no SPI, no catalog access.
 */
#include "postgres.h"

#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "orchestrator.h"
#include "definition_internal.h"	/* the JSON value helpers of definitions */

#define SCHEMA_SHOW_LEN		64		/* bytes of a key or string quoted */
#define SCHEMA_SHOW_NUM		32		/* bytes of a number shown */

/*
 * The keywords, in the order they are checked within one schema (and
 * listed in the hint of an unsupported keyword).  Annotations are accepted
 * and have no effect.
 */
static const char *const schema_keywords[] = {
	"type", "enum", "const",
	"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
	"minLength", "maxLength",
	"required", "properties", "additionalProperties",
	"items", "minItems", "maxItems",
	"title", "description", "$comment", "examples", NULL
};

static const char *const type_names[] = {
	"object", "array", "string", "number", "integer", "boolean", "null", NULL
};

typedef enum SchemaType
{
	STY_OBJECT = 1 << 0,
	STY_ARRAY = 1 << 1,
	STY_STRING = 1 << 2,
	STY_NUMBER = 1 << 3,
	STY_INTEGER = 1 << 4,
	STY_BOOLEAN = 1 << 5,
	STY_NULL = 1 << 6
} SchemaType;

/* ----------------------------------------------------------------------
 * Paths and shown values
 * ---------------------------------------------------------------------- */

/* A user string quoted as JSON, cut at SCHEMA_SHOW_LEN bytes */
static char *
show_str(const char *s, int len)
{
	StringInfoData b;
	char	   *t;

	if (len > SCHEMA_SHOW_LEN)
		t = psprintf("%s...", pnstrdup(s, pg_mbcliplen(s, len, SCHEMA_SHOW_LEN)));
	else
		t = pnstrdup(s, len);
	initStringInfo(&b);
	escape_json(&b, t);
	return b.data;
}

/* A number as text, cut at SCHEMA_SHOW_NUM bytes */
static char *
show_num(Numeric n)
{
	char	   *s = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(n)));

	if (strlen(s) > SCHEMA_SHOW_NUM)
		return psprintf("%.*s...", SCHEMA_SHOW_NUM, s);
	return s;
}

/* parent.key, or parent["key"] when the key is not a plain identifier */
static char *
path_key(const char *parent, const char *key, int len)
{
	bool		plain = len > 0 && len <= SCHEMA_SHOW_LEN && !(key[0] >= '0' && key[0] <= '9');

	for (int i = 0; i < len && plain; i++)
		plain = (key[i] >= 'a' && key[i] <= 'z') || (key[i] >= 'A' && key[i] <= 'Z') ||
			(key[i] >= '0' && key[i] <= '9') || key[i] == '_';
	if (plain)
		return psprintf("%s.%.*s", parent, len, key);
	return psprintf("%s[%s]", parent, show_str(key, len));
}

static char *
path_idx(const char *parent, int i)
{
	return psprintf("%s[%d]", parent, i);
}

static bool
report(JsonSchemaProblem *p, const char *path, const char *hint, const char *fmt,...)
pg_attribute_printf(4, 5);

static bool
report(JsonSchemaProblem *p, const char *path, const char *hint, const char *fmt,...)
{
	StringInfoData msg;

	initStringInfo(&msg);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&msg, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&msg, needed);
	}
	p->path = pstrdup(path);
	p->message = msg.data;
	p->hint = hint;
	return false;
}

/* ----------------------------------------------------------------------
 * Values
 * ---------------------------------------------------------------------- */

static bool
str_is(JsonbValue *v, const char *s)
{
	return v->type == jbvString && v->val.string.len == (int) strlen(s) &&
		memcmp(v->val.string.val, s, v->val.string.len) == 0;
}





/* The JSON type name of a value: object, array, string, number, boolean, null */
static const char *
type_of(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "array" : "object";
		default:
			return "unknown";
	}
}

static int
num_cmp(Numeric a, Numeric b)
{
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a), NumericGetDatum(b)));
}

static bool
num_is_integral(Numeric n)
{
	Numeric		f;

	if (numeric_is_nan(n) || numeric_is_inf(n))
		return false;
	f = DatumGetNumeric(DirectFunctionCall1(numeric_floor, NumericGetDatum(n)));
	return num_cmp(n, f) == 0;
}

/* A non-negative integer of at most 2147483647, or -1 */
static int32
nonneg_int(JsonbValue *v)
{
	Numeric		n;

	if (v->type != jbvNumeric)
		return -1;
	n = v->val.numeric;
	if (!num_is_integral(n) || num_cmp(n, int64_to_numeric(0)) < 0 ||
		num_cmp(n, int64_to_numeric(PG_INT32_MAX)) > 0)
		return -1;
	return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(n)));
}

/* Deep equality of two JSON values (numbers by value: 1 equals 1.0) */
static bool
json_equal(JsonbValue *a, JsonbValue *b)
{
	Jsonb	   *ja;
	Jsonb	   *jb;

	if (a->type != b->type)
		return false;
	switch (a->type)
	{
		case jbvNull:
			return true;
		case jbvBool:
			return a->val.boolean == b->val.boolean;
		case jbvString:
			return a->val.string.len == b->val.string.len &&
				memcmp(a->val.string.val, b->val.string.val, a->val.string.len) == 0;
		case jbvNumeric:
			return num_cmp(a->val.numeric, b->val.numeric) == 0;
		case jbvBinary:
			if (JsonContainerIsArray(a->val.binary.data) != JsonContainerIsArray(b->val.binary.data))
				return false;
			ja = JsonbValueToJsonb(a);
			jb = JsonbValueToJsonb(b);
			return compareJsonbContainers(&ja->root, &jb->root) == 0;
		default:
			elog(ERROR, "orchestrator: unexpected jsonb value type %d", (int) a->type);
	}
	return false;
}

/* The type mask a checked "type" names */
static int
type_mask(JsonbValue *t)
{
	int			mask = 0;

	if (t->type == jbvString)
	{
		for (int i = 0; type_names[i]; i++)
			if (str_is(t, type_names[i]))
				return 1 << i;
		return 0;
	}
	if (orch_def_is_array(t))
	{
		int			n = JsonContainerSize(t->val.binary.data);

		for (int j = 0; j < n; j++)
			mask |= type_mask(getIthJsonbValueFromContainer(t->val.binary.data, j));
	}
	return mask;
}

static int
value_mask(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return STY_NULL;
		case jbvString:
			return STY_STRING;
		case jbvNumeric:
			return num_is_integral(v->val.numeric) ? (STY_NUMBER | STY_INTEGER) : STY_NUMBER;
		case jbvBool:
			return STY_BOOLEAN;
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? STY_ARRAY : STY_OBJECT;
		default:
			return 0;
	}
}

/* "integer", "string or null", "object, array or null" */
static char *
type_list(JsonbValue *t)
{
	StringInfoData b;
	int			n;

	if (t->type == jbvString)
		return pnstrdup(t->val.string.val, t->val.string.len);
	initStringInfo(&b);
	n = JsonContainerSize(t->val.binary.data);
	for (int j = 0; j < n; j++)
	{
		JsonbValue *e = getIthJsonbValueFromContainer(t->val.binary.data, j);

		if (j > 0)
			appendStringInfoString(&b, j == n - 1 ? " or " : ", ");
		appendBinaryStringInfo(&b, e->val.string.val, e->val.string.len);
	}
	return b.data;
}

/* ----------------------------------------------------------------------
 * Checking a schema (define time)
 * ---------------------------------------------------------------------- */

static char *
keyword_list(void)
{
	StringInfoData b;

	initStringInfo(&b);
	for (int i = 0; schema_keywords[i]; i++)
	{
		if (i > 0)
			appendStringInfoString(&b, schema_keywords[i + 1] ? ", " : " and ");
		appendStringInfoString(&b, schema_keywords[i]);
	}
	return b.data;
}

static bool check_schema(JsonbValue *s, const char *path, int depth, JsonSchemaProblem *p);

static bool
check_type(JsonbValue *t, const char *path, JsonSchemaProblem *p)
{
	const char *hint = "A type is object, array, string, number, integer, boolean or null, or a non-empty array of distinct type names.";

	if (t->type == jbvString)
	{
		if (type_mask(t) == 0)
			return report(p, path, hint, "unknown type %s", show_str(t->val.string.val, t->val.string.len));
		return true;
	}
	if (orch_def_is_array(t))
	{
		JsonbContainer *arr = t->val.binary.data;
		int			n = JsonContainerSize(arr);
		int			seen = 0;

		if (n == 0)
			return report(p, path, hint, "type must not be an empty array");
		for (int j = 0; j < n; j++)
		{
			JsonbValue *e = getIthJsonbValueFromContainer(arr, j);
			int			m;

			if (e->type != jbvString)
				return report(p, path_idx(path, j), hint, "a type name must be a string, not %s", orch_def_kind(e));
			m = type_mask(e);
			if (m == 0)
				return report(p, path_idx(path, j), hint, "unknown type %s",
							  show_str(e->val.string.val, e->val.string.len));
			if (seen & m)
				return report(p, path_idx(path, j), NULL, "duplicate type %s",
							  show_str(e->val.string.val, e->val.string.len));
			seen |= m;
		}
		return true;
	}
	return report(p, path, hint, "type must be a type name or an array of type names, not %s", orch_def_kind(t));
}

typedef struct RequiredKey
{
	const char *s;
	int			len;
	int			idx;
} RequiredKey;

static int
required_key_cmp(const void *a, const void *b)
{
	const RequiredKey *x = (const RequiredKey *) a;
	const RequiredKey *y = (const RequiredKey *) b;
	int			r = memcmp(x->s, y->s, Min(x->len, y->len));

	if (r != 0)
		return r;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->idx - y->idx;
}

/* An array of distinct non-empty strings; duplicates found by sorting */
static bool
check_required(JsonbValue *r, const char *path, JsonSchemaProblem *p)
{
	JsonbContainer *arr;
	RequiredKey *keys;
	int			n;
	int			dup = -1;

	if (!orch_def_is_array(r))
		return report(p, path, NULL, "required must be an array of key names, not %s", orch_def_kind(r));
	arr = r->val.binary.data;
	n = JsonContainerSize(arr);
	keys = palloc(sizeof(RequiredKey) * Max(n, 1));
	for (int j = 0; j < n; j++)
	{
		JsonbValue *k = getIthJsonbValueFromContainer(arr, j);

		CHECK_FOR_INTERRUPTS();
		if (k->type != jbvString)
			return report(p, path_idx(path, j), NULL, "a required key must be a string, not %s", orch_def_kind(k));
		if (k->val.string.len == 0)
			return report(p, path_idx(path, j), NULL, "a required key must not be empty");
		keys[j].s = k->val.string.val;
		keys[j].len = k->val.string.len;
		keys[j].idx = j;
	}
	qsort(keys, n, sizeof(RequiredKey), required_key_cmp);
	/* the first element, in array order, that repeats an earlier one */
	for (int j = 1; j < n; j++)
		if (keys[j].len == keys[j - 1].len && memcmp(keys[j].s, keys[j - 1].s, keys[j].len) == 0 &&
			(dup < 0 || keys[j].idx < keys[dup].idx))
			dup = j;
	if (dup >= 0)
		return report(p, path_idx(path, keys[dup].idx), NULL, "duplicate required key %s",
					  show_str(keys[dup].s, keys[dup].len));
	return true;
}

static bool
check_properties(JsonbValue *props, const char *path, int depth, JsonSchemaProblem *p)
{
	JsonbIterator *it;
	JsonbValue	k,
				v;
	JsonbIteratorToken tok;

	if (!orch_def_is_object(props))
		return report(p, path, NULL, "properties must be an object of schemas, not %s", orch_def_kind(props));
	it = JsonbIteratorInit(props->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		char	   *kpath;

		if (tok != WJB_KEY)
			continue;
		kpath = path_key(path, k.val.string.val, k.val.string.len);
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);
		if (!check_schema(&v, kpath, depth + 1, p))
			return false;
	}
	return true;
}

/* One keyword's value (known keyword) */
static bool
check_keyword(JsonbValue *kw, JsonbValue *v, const char *path, int depth, JsonSchemaProblem *p)
{
	if (str_is(kw, "type"))
		return check_type(v, path, p);
	if (str_is(kw, "enum"))
	{
		if (!orch_def_is_array(v) || JsonContainerSize(v->val.binary.data) == 0)
			return report(p, path, NULL, "enum must be a non-empty array, not %s",
						  orch_def_is_array(v) ? "an empty array" : orch_def_kind(v));
		return true;
	}
	if (str_is(kw, "const") || (str_is(kw, "examples") && orch_def_is_array(v)))
		return true;
	if (str_is(kw, "examples"))
		return report(p, path, NULL, "examples must be an array, not %s", orch_def_kind(v));
	if (str_is(kw, "minimum") || str_is(kw, "maximum") ||
		str_is(kw, "exclusiveMinimum") || str_is(kw, "exclusiveMaximum"))
	{
		if (v->type != jbvNumeric)
			return report(p, path, NULL, "%.*s must be a number, not %s",
						  kw->val.string.len, kw->val.string.val, orch_def_kind(v));
		return true;
	}
	if (str_is(kw, "minLength") || str_is(kw, "maxLength") ||
		str_is(kw, "minItems") || str_is(kw, "maxItems"))
	{
		if (nonneg_int(v) < 0)
			return report(p, path, NULL, "%.*s must be an integer from 0 to %d, not %s",
						  kw->val.string.len, kw->val.string.val, PG_INT32_MAX,
						  v->type == jbvNumeric ? show_num(v->val.numeric) : orch_def_kind(v));
		return true;
	}
	if (str_is(kw, "required"))
		return check_required(v, path, p);
	if (str_is(kw, "properties"))
		return check_properties(v, path, depth, p);
	if (str_is(kw, "additionalProperties"))
	{
		if (v->type == jbvBool)
			return true;
		if (!orch_def_is_object(v))
			return report(p, path, NULL, "additionalProperties must be a boolean or a schema (an object), not %s", orch_def_kind(v));
		return check_schema(v, path, depth + 1, p);
	}
	if (str_is(kw, "items"))
	{
		if (orch_def_is_array(v))
			return report(p, path, "items takes one schema for every element; the array (tuple) form is not supported.",
						  "items must be a schema (an object), not an array");
		return check_schema(v, path, depth + 1, p);
	}
	if (str_is(kw, "title") || str_is(kw, "description") || str_is(kw, "$comment"))
	{
		if (v->type != jbvString)
			return report(p, path, NULL, "%.*s must be a string, not %s",
						  kw->val.string.len, kw->val.string.val, orch_def_kind(v));
		return true;
	}
	elog(ERROR, "orchestrator: schema keyword without a check");
	return false;
}

static bool
check_schema(JsonbValue *s, const char *path, int depth, JsonSchemaProblem *p)
{
	JsonbContainer *o;
	JsonbIterator *it;
	JsonbValue	k;
	JsonbIteratorToken tok;
	JsonbValue *lo;
	JsonbValue *hi;

	check_stack_depth();
	CHECK_FOR_INTERRUPTS();
	if (!orch_def_is_object(s))
		return report(p, path, NULL, "a schema must be an object, not %s", orch_def_kind(s));
	if (depth > ORCH_JSON_SCHEMA_MAX_DEPTH)
		return report(p, path, NULL, "schemas nest at most %d levels deep", ORCH_JSON_SCHEMA_MAX_DEPTH);
	o = s->val.binary.data;

	/* unsupported keywords first, in jsonb's key order */
	it = JsonbIteratorInit(o);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		bool		known = false;

		if (tok != WJB_KEY)
			continue;
		for (const char *const *a = schema_keywords; *a && !known; a++)
			known = str_is(&k, *a);
		if (!known)
			return report(p, path,
						  psprintf("The supported JSON Schema keywords are %s (docs/workflows.md, \"Schemas\").", keyword_list()),
						  "unsupported JSON Schema keyword %s", show_str(k.val.string.val, k.val.string.len));
	}

	/* then each keyword's value, in the order of schema_keywords */
	for (const char *const *a = schema_keywords; *a; a++)
	{
		JsonbValue	kw;
		JsonbValue *e = orch_def_get(o, *a);

		if (e == NULL)
			continue;
		kw.type = jbvString;
		kw.val.string.val = (char *) *a;
		kw.val.string.len = strlen(*a);
		if (!check_keyword(&kw, e, path_key(path, *a, strlen(*a)), depth, p))
			return false;
	}

	/* bounds that can never hold together */
	lo = orch_def_get(o, "minLength");
	hi = orch_def_get(o, "maxLength");
	if (lo && hi && nonneg_int(lo) > nonneg_int(hi))
		return report(p, path_key(path, "minLength", 9), NULL, "minLength is greater than maxLength");
	lo = orch_def_get(o, "minItems");
	hi = orch_def_get(o, "maxItems");
	if (lo && hi && nonneg_int(lo) > nonneg_int(hi))
		return report(p, path_key(path, "minItems", 8), NULL, "minItems is greater than maxItems");
	lo = orch_def_get(o, "minimum");
	hi = orch_def_get(o, "maximum");
	if (lo && hi && num_cmp(lo->val.numeric, hi->val.numeric) > 0)
		return report(p, path_key(path, "minimum", 7), NULL, "minimum is greater than maximum");
	return true;
}

/*
 * Check a schema document (at path in the definition, e.g.
 * "$.steps[0].output_schema").  False with the first problem in *p.
 */
bool
orch_json_schema_check(JsonbValue *schema, const char *path, JsonSchemaProblem *p)
{
	return check_schema(schema, path, 1, p);
}

/* ----------------------------------------------------------------------
 * Validating a value (run time)
 * ---------------------------------------------------------------------- */

static bool validate(JsonbContainer *s, JsonbValue *v, const char *path, JsonSchemaProblem *p);

static bool
validate_sub(JsonbValue *sub, JsonbValue *v, const char *path, JsonSchemaProblem *p)
{
	if (!orch_def_is_object(sub))
		elog(ERROR, "orchestrator: a checked schema holds a schema that is not an object");
	return validate(sub->val.binary.data, v, path, p);
}

static bool
validate_object(JsonbContainer *s, JsonbContainer *obj, const char *path, JsonSchemaProblem *p)
{
	JsonbValue *e;
	JsonbValue *props = orch_def_get(s, "properties");
	JsonbValue *addl = orch_def_get(s, "additionalProperties");

	if ((e = orch_def_get(s, "required")) != NULL)
	{
		int			n = JsonContainerSize(e->val.binary.data);

		for (int j = 0; j < n; j++)
		{
			JsonbValue *k = getIthJsonbValueFromContainer(e->val.binary.data, j);

			if (getKeyJsonValueFromContainer(obj, k->val.string.val, k->val.string.len, NULL) == NULL)
				return report(p, path_key(path, k->val.string.val, k->val.string.len), NULL,
							  "required key is missing");
		}
	}
	if (props != NULL || addl != NULL)
	{
		JsonbIterator *it = JsonbIteratorInit(obj);
		JsonbValue	k,
					v;
		JsonbIteratorToken tok;

		while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
		{
			JsonbValue *sub = NULL;
			char	   *kpath;

			if (tok != WJB_KEY)
				continue;
			kpath = path_key(path, k.val.string.val, k.val.string.len);
			tok = JsonbIteratorNext(&it, &v, true);
			Assert(tok == WJB_VALUE);
			if (props != NULL)
				sub = getKeyJsonValueFromContainer(props->val.binary.data, k.val.string.val,
												   k.val.string.len, NULL);
			if (sub == NULL && addl != NULL)
			{
				if (addl->type == jbvBool)
				{
					if (!addl->val.boolean)
						return report(p, kpath, NULL, "key not allowed (additionalProperties is false)");
					continue;
				}
				sub = addl;
			}
			if (sub != NULL && !validate_sub(sub, &v, kpath, p))
				return false;
		}
	}
	return true;
}

static bool
validate_array(JsonbContainer *s, JsonbContainer *arr, const char *path, JsonSchemaProblem *p)
{
	JsonbValue *e;
	int			n = JsonContainerSize(arr);

	if ((e = orch_def_get(s, "minItems")) != NULL && n < nonneg_int(e))
		return report(p, path, NULL, "array has %d items, fewer than minItems %d", n, nonneg_int(e));
	if ((e = orch_def_get(s, "maxItems")) != NULL && n > nonneg_int(e))
		return report(p, path, NULL, "array has %d items, more than maxItems %d", n, nonneg_int(e));
	if ((e = orch_def_get(s, "items")) != NULL)
	{
		JsonbIterator *it = JsonbIteratorInit(arr);
		JsonbValue	v;
		JsonbIteratorToken tok;
		int			j = 0;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok != WJB_ELEM)
				continue;
			if (!validate_sub(e, &v, path_idx(path, j), p))
				return false;
			j++;
		}
	}
	return true;
}

/*
 * The order of the checks: type, enum, const; then by the value's type:
 * numbers (minimum, maximum, exclusiveMinimum, exclusiveMaximum), strings
 * (minLength, maxLength), objects (required in array order, then members in
 * jsonb's key order against properties / additionalProperties), arrays
 * (minItems, maxItems, then items element by element).
 */
static bool
validate(JsonbContainer *s, JsonbValue *v, const char *path, JsonSchemaProblem *p)
{
	JsonbValue *e;

	check_stack_depth();
	CHECK_FOR_INTERRUPTS();
	if ((e = orch_def_get(s, "type")) != NULL && (type_mask(e) & value_mask(v)) == 0)
		return report(p, path, NULL, "expected %s, got %s", type_list(e),
					  v->type == jbvNumeric && (type_mask(e) & STY_INTEGER) ? "a number that is not an integer" : type_of(v));
	if ((e = orch_def_get(s, "enum")) != NULL)
	{
		JsonbContainer *arr = e->val.binary.data;
		int			n = JsonContainerSize(arr);
		bool		found = false;

		for (int j = 0; j < n && !found; j++)
			found = json_equal(getIthJsonbValueFromContainer(arr, j), v);
		if (!found)
			return report(p, path, NULL, "value is not one of the values of enum");
	}
	if ((e = orch_def_get(s, "const")) != NULL && !json_equal(e, v))
		return report(p, path, NULL, "value is not the const value");

	if (v->type == jbvNumeric)
	{
		Numeric		n = v->val.numeric;

		if ((e = orch_def_get(s, "minimum")) != NULL && num_cmp(n, e->val.numeric) < 0)
			return report(p, path, NULL, "%s is less than minimum %s", show_num(n), show_num(e->val.numeric));
		if ((e = orch_def_get(s, "maximum")) != NULL && num_cmp(n, e->val.numeric) > 0)
			return report(p, path, NULL, "%s is greater than maximum %s", show_num(n), show_num(e->val.numeric));
		if ((e = orch_def_get(s, "exclusiveMinimum")) != NULL && num_cmp(n, e->val.numeric) <= 0)
			return report(p, path, NULL, "%s is not greater than exclusiveMinimum %s", show_num(n), show_num(e->val.numeric));
		if ((e = orch_def_get(s, "exclusiveMaximum")) != NULL && num_cmp(n, e->val.numeric) >= 0)
			return report(p, path, NULL, "%s is not less than exclusiveMaximum %s", show_num(n), show_num(e->val.numeric));
	}
	else if (v->type == jbvString)
	{
		JsonbValue *lo = orch_def_get(s, "minLength");
		JsonbValue *hi = orch_def_get(s, "maxLength");

		if (lo != NULL || hi != NULL)
		{
			int			chars = pg_mbstrlen_with_len(v->val.string.val, v->val.string.len);

			if (lo != NULL && chars < nonneg_int(lo))
				return report(p, path, NULL, "string has %d characters, fewer than minLength %d", chars, nonneg_int(lo));
			if (hi != NULL && chars > nonneg_int(hi))
				return report(p, path, NULL, "string has %d characters, more than maxLength %d", chars, nonneg_int(hi));
		}
	}
	else if (orch_def_is_object(v))
		return validate_object(s, v->val.binary.data, path, p);
	else if (orch_def_is_array(v))
		return validate_array(s, v->val.binary.data, path, p);
	return true;
}

/*
 * Validate a value against a schema that orch_json_schema_check accepted;
 * value NULL is JSON null.  root names the value in paths ("$.input",
 * "$").  False with the first mismatch in *p.  The work is bounded by the
 * value's size (capped by orchestrator.max_payload_size) times the
 * schema's depth (at most ORCH_JSON_SCHEMA_MAX_DEPTH).
 */
bool
orch_json_schema_validate(Jsonb *schema, Jsonb *value, const char *root, JsonSchemaProblem *p)
{
	JsonbValue	v;

	if (JB_ROOT_IS_SCALAR(schema) || !JB_ROOT_IS_OBJECT(schema))
		elog(ERROR, "orchestrator: a checked schema is not an object");
	if (value == NULL)
		v.type = jbvNull;
	else if (JB_ROOT_IS_SCALAR(value))
	{
		if (!JsonbExtractScalar(&value->root, &v))
			elog(ERROR, "orchestrator: a scalar jsonb without its scalar");
	}
	else
	{
		v.type = jbvBinary;
		v.val.binary.data = &value->root;
		v.val.binary.len = VARSIZE(value) - VARHDRSZ;
	}
	return validate(&schema->root, &v, root, p);
}
