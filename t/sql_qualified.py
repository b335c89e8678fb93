#!/usr/bin/env python3
"""sql_qualified.py: every function and operator an install or upgrade
script of orchestrator reaches is schema-qualified.

Usage: sql_qualified.py SCRIPT...          one line per finding; exit 1 if any
       sql_qualified.py --names SCRIPT...  the functions and operators the
                                           scripts reach (for a hijack test)
       sql_qualified.py --fix SCRIPT...    developer aid: qualify what can be
                                           qualified mechanically, in place

CREATE EXTENSION and ALTER EXTENSION UPDATE run a script as the superuser
with search_path = <extension schema>, pg_temp.  An unqualified name there is
resolved through that path, and a better-matching function or operator that
the schema's owner planted (public.unnest(text[]) against
pg_catalog.unnest(anyarray), =(oid, regclass) against oideq after a cast)
would run as superuser, or be bound for good into a view, default, check or
index.  So in everything a script executes or binds at install time (top-level
statements, DO blocks, argument defaults, and the bodies of SQL and PL/pgSQL
functions that do not pin search_path) this checks:

  * a name called as a function is qualified (pg_catalog.f, orch.f), or is
    one of the extension's own API functions (see own_functions);
  * an operator is written OPERATOR(schema.op);
  * no construct resolves an operator by name behind the script's back:
    IN (...), LIKE, ILIKE, SIMILAR TO, BETWEEN, IS [NOT] DISTINCT FROM,
    NULLIF, simple CASE x WHEN, JOIN ... USING (...).

Bodies of functions with SET search_path run under the pinned path (which
holds no schema a user can create in) and are not checked here.
"""
import re
import sys

OPCHARS = set("+-*/<>=~!@#%^&|`?")

# words that may be followed by "(" without being a function call
NOT_CALLS = set("""
in any all some exists values coalesce greatest least array row cast extract
substring position trim overlay over filter within check key unique include
where and or not as using on select returning table by set with when then
else if elsif while return perform execute from join lateral grouping
variadic distinct is case query foreach loop into default references
primary foreign partition null raise exception reset
notice info warning strict case elsif union intersect except limit offset
order group having window range rows groups preceding following exclude
conflict do nothing update delete insert create alter drop grant revoke to
comment constraint trigger view index function procedure aggregate sequence
schema type domain operator language returns setof inout out immutable
stable volatile security definer invoker leakproof parallel safe unsafe
restricted cost called input declare begin end elseif collate nulls first
last asc desc concurrently only both leading trailing for of each statement
execute before after instead like ilike similar between symmetric
""".split())

# words that end an operand chain (lower precedence than any operator)
SEPARATORS = set("""
and or not when then else end select from where on as having returning by
set limit offset is in like ilike between any all some case
""".split())

# words after which an identifier followed by "(" is a name being defined or
# a relation / column list, not a call
DEFINES = set("""
table view index references into function procedure aggregate type
trigger sequence exists as constraint domain operator key unique
materialized returns only
""".split())

# type names that take a modifier: numeric(10, 2) is a type, timestamptz(x)
# in an expression is a function call resolved through search_path
TYPMOD_TYPES = set("""
numeric decimal varchar char character varying timestamp timestamptz time
interval bit varbit float
""".split())

# the schemas a qualified name may name: the catalog, and the extension's
# own schema that no other role can create in (the extension's target
# schema, @extschema@ or public, may belong to anyone)
SAFE_SCHEMAS = ("pg_catalog", "orch")


def tokenize(s):
    """Yield (kind, text, pos).  kinds: ident, qident, str, dollar, num, op,
    punct.  Comments and whitespace dropped."""
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
            continue
        if c == "\\" and (i == 0 or s[i - 1] == "\n"):
            j = s.find("\n", i)      # a psql meta-command line (\echo ... \quit): not SQL
            i = n if j < 0 else j + 1
            continue
        if s.startswith("--", i):
            j = s.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if s.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if s.startswith("/*", j):
                    depth += 1
                    j += 2
                elif s.startswith("*/", j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            i = j
            continue
        escaped = c in "eE" and i + 1 < n and s[i + 1] == "'"     # E'..\'..'
        if escaped or c == "'":
            j = i + (2 if escaped else 1)
            while j < n:
                if escaped and s[j] == "\\":
                    j += 2
                    continue
                if s[j] == "'":
                    if j + 1 < n and s[j + 1] == "'":
                        j += 2
                        continue
                    break
                j += 1
            yield ("str", s[i:j + 1], i)
            i = j + 1
            continue
        if c == '"':
            j = s.find('"', i + 1)
            while j + 1 < n and s[j + 1] == '"':
                j = s.find('"', j + 2)
            yield ("qident", s[i:j + 1], i)
            i = j + 1
            continue
        if c == "$":
            m = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$", s[i:])
            if m:
                tag = m.group(0)
                j = s.find(tag, i + len(tag))
                if j < 0:
                    raise SystemExit("unterminated %s at %d" % (tag, i))
                yield ("dollar", s[i:j + len(tag)], i)
                i = j + len(tag)
                continue
            m = re.match(r"\$[0-9]+", s[i:])
            if m:
                yield ("ident", m.group(0), i)
                i += len(m.group(0))
                continue
        if c == "@" and s.startswith("@extschema@", i):
            yield ("ident", "@extschema@", i)
            i += len("@extschema@")
            continue
        if c.isalpha() or c == "_":
            m = re.match(r"[A-Za-z_][A-Za-z0-9_$]*", s[i:])
            yield ("ident", m.group(0), i)
            i += len(m.group(0))
            continue
        if c.isdigit():
            m = re.match(r"[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", s[i:])
            yield ("num", m.group(0), i)
            i += len(m.group(0))
            continue
        if c == ":" and s.startswith("::", i):
            yield ("punct", "::", i)
            i += 2
            continue
        if c == ":" and s.startswith(":=", i):
            yield ("punct", ":=", i)
            i += 2
            continue
        if c in OPCHARS:
            j = i
            while j < n and s[j] in OPCHARS and not s.startswith("--", j) \
                    and not s.startswith("/*", j):
                j += 1
            op = s[i:j]
            yield ("op", op, i)
            i = j
            continue
        yield ("punct", c, i)
        i += 1


def statements(toks):
    cur, depth = [], 0
    for t in toks:
        if t[1] == "(":
            depth += 1
        elif t[1] == ")":
            depth -= 1
        if t[1] == ";" and depth == 0 and t[0] == "punct":
            if cur:
                yield cur
            cur = []
            continue
        cur.append(t)
    if cur:
        yield cur


def low(t):
    return t[1].lower() if t[0] == "ident" else t[1]


class Checker:
    def __init__(self, path, text, own=frozenset(), c_funcs=frozenset()):
        self.own = own
        self.c_funcs = c_funcs
        self.path, self.text, self.found, self.fixes = path, text, [], []
        self.calls, self.ops = set(), set()

    def line(self, pos):
        return self.text.count("\n", 0, pos) + 1

    def flag(self, base, t, why, fix=None):
        self.found.append("%s:%d: %s" % (self.path, self.line(base + t[2]), why))
        if fix is not None:
            self.fixes.append((base + t[2], len(t[1]), fix))

    def expr(self, toks, base, plpgsql=False):
        """Check a token list as executable SQL / PL/pgSQL."""
        n = len(toks)
        set_depths = set()
        param_depths = set()      # WITH (name = value, ...), SET (...)
        chain = {}                # depth -> OPERATOR() symbols since the last separator
        depth = 0
        for k, t in enumerate(toks):
            prev = toks[k - 1] if k > 0 else ("", "", 0)
            prev2 = toks[k - 2] if k > 1 else ("", "", 0)
            nxt = toks[k + 1] if k + 1 < n else ("", "", 0)
            w = low(t)
            if t[1] == "," or (t[0] == "ident" and w in SEPARATORS):
                chain.pop(depth, None)
            if t[0] == "op" and prev[1] == "." and low(prev2) == "pg_catalog" and k > 3 \
                    and low(toks[k - 4]) == "operator":
                seen = chain.setdefault(depth - 1, [])
                if seen and any(x != t[1] for x in seen):
                    self.flag(base, t, "OPERATOR(%s) after OPERATOR(%s) at one level: every OPERATOR() "
                              "binds alike (left to right), so parenthesize" % (t[1], seen[-1]))
                seen.append(t[1])
            if t[1] == "(":
                depth += 1
                if low(prev) in ("with", "set") and nxt[0] == "ident" and k + 2 < n and toks[k + 2][1] == "=":
                    param_depths.add(depth)
                continue
            if t[1] == ")":
                chain.pop(depth, None)
                set_depths.discard(depth)
                param_depths.discard(depth)
                depth -= 1
                continue
            if t[0] == "ident" and nxt[1] == "(" and prev[1] == "." and prev2[0] == "ident" \
                    and low(prev2) in SAFE_SCHEMAS:
                self.calls.add(w)
            if t[0] in ("ident", "qident") and nxt[1] == "(" and prev[1] == "." and \
                    not (prev2[0] == "ident" and low(prev2) in SAFE_SCHEMAS) and \
                    not (k > 3 and low(toks[k - 3]) in DEFINES):
                self.flag(base, t, "%s() qualified with a schema other than pg_catalog or orch" % t[1])
            if t[0] == "op" and prev[1] == "." and k > 3 and low(toks[k - 4]) == "operator":
                if low(prev2) == "pg_catalog":
                    self.ops.add(t[1])
                else:
                    self.flag(base, t, "OPERATOR(%s.%s): only pg_catalog operators are safe" % (prev2[1], t[1]))
            if t[0] == "qident" and nxt[1] == "(" and prev[1] != "." and low(prev) not in DEFINES \
                    and prev[1] != ")":
                self.flag(base, t, "quoted function name %s()" % t[1])
            if t[0] == "ident":
                if w == "set" and low(prev) not in ("on", "alter"):
                    set_depths.add(depth)
                elif w in ("where", "from", "returning") and depth in set_depths:
                    set_depths.discard(depth)
                if nxt[1] == "(" and prev[1] != "." and not w.startswith("$"):
                    if w == "nullif":
                        self.flag(base, t, "NULLIF resolves = through search_path")
                    elif w == "using" and not (len(toks) > 1 and low(toks[1]) == "policy"):
                        self.flag(base, t, "JOIN ... USING (...) resolves = through search_path")
                    elif low(prev) == "using" and w in ("btree", "gin", "gist", "hash", "brin", "spgist"):
                        pass      # an index access method
                    elif w in TYPMOD_TYPES and k + 2 < n and toks[k + 2][0] == "num":
                        pass      # a type with a modifier
                    elif w in NOT_CALLS:
                        pass
                    elif low(prev) in DEFINES or prev[1] == ")" or \
                            (prev[0] == "ident" and k > 1 and low(prev2) in ("table", "type")):
                        pass   # a name being defined, an alias with columns, a column's type
                    elif w == "operator":
                        pass
                    elif w in self.own:
                        self.calls.add(w)   # the extension's own function: see OWN below
                    else:
                        self.flag(base, t, "unqualified function %s()" % t[1], "pg_catalog.%s" % t[1])
                if w == "like" and prev[1] == "(" and self.like_clause(toks, k):
                    pass      # CREATE TABLE t (LIKE source INCLUDING ...): no operator
                elif w in ("like", "ilike", "similar", "between"):
                    self.flag(base, t, "%s resolves an operator through search_path" % t[1].upper())
                if w == "distinct" and nxt[0] == "ident" and low(nxt) == "from":
                    self.flag(base, t, "IS DISTINCT FROM resolves = through search_path")
                if w == "in" and not (low(prev2) in ("for", "foreach") or low(nxt) in ("schema", "array")
                                      or low(prev) in ("for",)):
                    if not plpgsql or nxt[1] == "(":
                        self.flag(base, t, "IN (...) resolves = through search_path")
                if w == "case" and low(nxt) != "when" and low(prev) != "end":
                    self.flag(base, t, "simple CASE x WHEN resolves = through search_path")
                continue
            if t[0] == "op":
                op = t[1]
                # OPERATOR(schema.op)
                if prev[1] == "." and prev2[0] == "ident" and k > 3 and low(toks[k - 4]) == "operator":
                    continue
                if op == "=>":
                    continue          # named argument
                if op == "*" and (prev[1] in ("(", ".", ",") or low(prev) == "select"):
                    continue
                if op == "-" and nxt[0] == "num" and (prev[0] in ("op", "punct") and prev[1] not in (")", "]")
                                                     or low(prev) in ("select", "then", "else", "return", "default")):
                    continue          # a negative constant
                if op == "=" and depth in set_depths and prev[0] in ("ident", "qident") and \
                        (prev2[1] == "," or low(prev2) == "set"):
                    continue          # SET col = ... (assignment, not an operator)
                if op == "=" and depth in param_depths and prev[0] == "ident" and prev2[1] in ("(", ","):
                    continue          # WITH (storage_param = ...)
                self.flag(base, t, "operator %s not written OPERATOR(pg_catalog.%s)" % (op, op),
                          "OPERATOR(pg_catalog.%s)" % op)

    @staticmethod
    def like_clause(toks, k):
        """Is the LIKE at toks[k] (after "(") CREATE TABLE's table-like clause:
        a table name, then INCLUDING/EXCLUDING options or the closing ")"?"""
        j = k + 1
        while j < len(toks) and (toks[j][0] == "ident" or toks[j][1] in (".", "%")):
            j += 1
            if j < len(toks) and low(toks[j]) in ("including", "excluding"):
                return True
        return j < len(toks) and toks[j][1] == ")" and j > k + 1

    def body_of(self, st):
        for k, t in enumerate(st):
            if low(t) == "as" and k + 1 < len(st) and st[k + 1][0] in ("dollar", "str"):
                return k + 1
        return None

    def dollar_inner(self, t):
        tag = re.match(r"\$[A-Za-z0-9_]*\$", t[1]).group(0)
        return t[1][len(tag):-len(tag)], t[2] + len(tag)

    def literal_inner(self, t):
        """The text of a dollar-quoted or quoted literal, and its offset."""
        if t[0] == "dollar":
            return self.dollar_inner(t)
        body = t[1][2:-1] if t[1][:1] in "eE" else t[1][1:-1]
        return body.replace("''", "'"), t[2] + 1

    def plpgsql(self, toks, base):
        """A PL/pgSQL body: its statements, and the SQL its EXECUTEs build
        from literals (format() placeholders read as a name)."""
        self.expr(toks, base, plpgsql=True)
        in_execute = False
        for k, t in enumerate(toks):
            if t[0] == "ident" and low(t) == "execute":
                in_execute = True
            elif t[1] == ";":
                in_execute = False
            elif in_execute and t[0] in ("str", "dollar"):
                inner, off = self.literal_inner(t)
                inner = re.sub(r"%[IsL%]", "x", inner)
                self.expr(list(tokenize(inner)), base + off)

    @staticmethod
    def pins(st):
        """SET search_path = pg_catalog, ... (or TO pg_catalog): the value
        starts with pg_catalog.  FROM CURRENT, DEFAULT, RESET do not pin."""
        for k in range(len(st) - 2):
            if low(st[k]) == "set" and low(st[k + 1]) == "search_path":
                return st[k + 2][1] in ("=",) and low(st[k + 3]) == "pg_catalog" if k + 3 < len(st) \
                    else False
        for k in range(len(st) - 3):
            if low(st[k]) == "set" and low(st[k + 1]) == "search_path" and low(st[k + 2]) == "to":
                return low(st[k + 3]) == "pg_catalog"
        return False

    def run(self):
        for st in statements(tokenize(self.text)):
            words = [low(t) for t in st[:4]]
            if words[:1] == ["create"] and ("function" in words or "procedure" in words):
                self.function(st)
            elif words[:1] == ["do"]:
                for t in st:
                    if t[0] in ("dollar", "str"):
                        inner, off = self.literal_inner(t)
                        self.plpgsql(list(tokenize(inner)), off)
            elif words[:2] in (["create", "aggregate"], ["create", "operator"], ["create", "cast"]):
                self.flag(0, st[0], "CREATE %s is not checked here: review its support functions by hand"
                          % words[1].upper())
            elif words[:2] in (["alter", "function"], ["alter", "procedure"]):
                # a C function binds nothing by name: its search_path is the C code's business
                if not self.pins(st) and any(low(t) == "search_path" for t in st) \
                        and low(st[2]) not in self.c_funcs:
                    self.flag(0, st[0], "ALTER FUNCTION changes search_path to something other than pg_catalog first")
            elif words[:1] in (["comment"], ["grant"], ["revoke"], ["drop"]) \
                    or words[:2] == ["alter", "extension"]:
                continue          # object references by exact signature, no expressions
            else:
                self.expr(st, 0)

    def function(self, st):
        b = self.body_of(st)
        names = [low(t) for t in st]
        lang = names[names.index("language") + 1] if "language" in names else ""
        pinned = self.pins(st)
        # argument defaults
        k = 0
        while k < len(st) and st[k][1] != "(":
            k += 1
        depth, collecting, cur = 0, False, []
        for t in st[k:]:
            if t[1] == "(":
                depth += 1
            elif t[1] == ")":
                depth -= 1
                if depth == 0:
                    if cur:
                        self.expr(cur, 0)
                    break
            if depth == 1 and t[1] == ",":
                if cur:
                    self.expr(cur, 0)
                cur, collecting = [], False
                continue
            if collecting:
                cur.append(t)
            elif depth == 1 and (low(t) == "default" or t[1] == "="):
                collecting = True
        if lang in ("c", "internal"):
            return
        if b is None:
            # an SQL-standard body is bound when the function is created
            if "atomic" in names:
                self.flag(0, st[0], "BEGIN ATOMIC body is not checked here: write AS $$...$$ with SET search_path")
            elif "return" in names:
                self.expr(st[names.index("return") + 1:], 0)
            return
        if pinned:
            return
        t = st[b]
        if t[0] == "dollar":
            inner, off = self.dollar_inner(t)
        else:
            inner, off = t[1][1:-1].replace("''", "'"), t[2] + 1
        self.found.append("%s:%d: %s function without SET search_path: its body is checked"
                          % (self.path, self.line(t[2]), lang))
        if lang == "plpgsql":
            self.plpgsql(list(tokenize(inner)), off)
        else:
            self.expr(list(tokenize(inner)), off)


def c_functions(texts):
    """The names of the functions the scripts create in LANGUAGE C."""
    out = set()
    for text in texts:
        for st in statements(tokenize(text)):
            w = [low(t) for t in st]
            if w[:1] == ["create"] and "function" in w[:4] and "language" in w \
                    and w[w.index("language") + 1] == "c":
                k = w.index("function")
                out.add(low(st[k + 1]))
    return frozenset(out)


def own_functions(texts):
    """OWN: the names the scripts create unqualified, in the extension's
    schema (orch_caller_tenants, orch_queue_settings, ...).  A call to one of
    them stays unqualified: @extschema@ would refuse a schema name with a
    quote or a backslash (PostgreSQL 15.4 and later), and no shadow can win
    it, because the calls pass the exact argument types and a look-alike
    planted before the script makes its CREATE FUNCTION fail (a function of
    another owner is never replaced in an extension script)."""
    own = set()
    for text in texts:
        for st in statements(tokenize(text)):
            w = [low(t) for t in st[:6]]
            if w[:1] == ["create"] and "function" in w:
                k = w.index("function")
                if k + 2 < len(st) and st[k + 1][0] == "ident" and st[k + 2][1] == "(":
                    own.add(low(st[k + 1]))
    return frozenset(own)


def main(paths):
    total = 0
    fix = paths[:1] == ["--fix"]     # developer aid: rewrite what can be rewritten mechanically
    names = paths[:1] == ["--names"]  # the names reached: what a hijack test plants
    if fix or names:
        paths = paths[1:]
    calls, ops = set(), set()
    texts = {}
    for p in paths:
        with open(p) as f:
            texts[p] = f.read()
    own = own_functions(texts.values())
    cfuncs = c_functions(texts.values())
    for p in paths:
        c = Checker(p, texts[p], own, cfuncs)
        c.run()
        calls |= c.calls
        ops |= c.ops
        if fix and c.fixes:
            text = c.text
            for pos, ln, rep in sorted(set(c.fixes), reverse=True):
                text = text[:pos] + rep + text[pos + ln:]
            with open(p, "w") as f:
                f.write(text)
        if not names:
            for line in c.found:
                print(line)
        total += len(c.found)
    if names:
        for name in sorted(calls):
            print("function", name)
        for op in sorted(ops):
            print("operator", op)
        return 0
    print("# %d finding(s) in %d script(s)" % (total, len(paths)))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
