#!/usr/bin/env python3
"""scripts/check_layers.py: the files of src/ call only files below them.

    python3 scripts/check_layers.py            (from anywhere in the repository)
    python3 scripts/check_layers.py --graph    (also print every call between files)
    python3 scripts/check_layers.py --doc FILE --src DIR    (another table or tree)

docs/architecture.md, section "The rooms, by layer", lists every src/*.c in
a table, from the top layer down (the file names in backticks in the second
column, in order).  This check reads src/*.c and fails (exit 1) when

  - a file calls a function of a file listed above it
    (printed as caller.c:function -> callee.c:function),
  - a src/*.c file is missing from the table, or listed twice,
  - the table lists a file that does not exist.

It prints one summary line when it passes (a function called from another
file counts once per calling file).

How it reads C (simple, on purpose): comments, string and character
literals and preprocessor lines other than #define are blanked first.  A
function is defined where a name is followed by "(" and, after its
parameter list, by "{", on a line that starts at column 0 (PostgreSQL
style: the name at column 0, its return type on the line before, "static"
there for a file's own function; a one-line head is read too).  A call is
a name followed by "(" (not after "." or "->") in another file, and counts when
the name is a non-static function defined in exactly one file (a name also
defined elsewhere, static or not, is left out: it may be the caller's own).
Calls inside a function-like macro of a header count for the .c files that
use the macro.  Standard library only.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
DOC = os.path.join(ROOT, "docs", "architecture.md")
SECTION = "## The rooms, by layer"

IDENT_CALL = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*\(")
DEF_START = re.compile(r"^([A-Za-z_]\w*)\s*\(", re.M)
ONE_LINE_DEF = re.compile(r"^(?!#)[A-Za-z_][\w\s\*]*?[\s\*]([A-Za-z_]\w*)\s*\(", re.M)
C_KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "do", "else",
              "case", "goto", "defined", "typedef", "struct", "union", "enum"}


def strip_c(text):
    """Blank comments, string and char literals (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def logical_lines(text):
    """Join backslash-continued lines, keeping the line count."""
    return text.replace("\\\n", "  \n")


def drop_preprocessor(text):
    """Blank #include, #if, ... lines; keep #define bodies (their calls count)."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        s = line.lstrip()
        if s.startswith("#") and not re.match(r"#\s*define\b", s):
            lines[k] = ""
    return "\n".join(lines)


def close_paren(text, i):
    """Index just past the ")" matching the "(" at text[i]."""
    depth = 0
    n = len(text)
    while i < n:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def definitions(text):
    """{name: (static, line)} of the functions defined in a stripped file."""
    defs = {}
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def lineno(pos):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    for rx in (DEF_START, ONE_LINE_DEF):
        for m in rx.finditer(text):
            name = m.group(1)
            if name in C_KEYWORDS or name in defs:
                continue
            line_start = starts[lineno(m.start())]
            if text[line_start:line_start + 1].isspace():
                continue
            if text[line_start:m.start(1)].lstrip().startswith("#"):
                continue
            paren = text.index("(", m.end(1))
            after = close_paren(text, paren)
            rest = text[after:after + 200].lstrip()
            if not rest.startswith("{"):
                continue
            ln = lineno(m.start(1))
            # the return type: this line's head, or the line(s) above
            head = text[line_start:m.start(1)]
            k = ln - 1
            while not head.strip() and k >= 0:
                head = lines[k]
                k -= 1
            static = re.search(r"\bstatic\b", head) is not None
            defs[name] = (static, ln + 1)
    return defs


def header_macros(paths):
    """{macro: set of names called in its body} of the headers' function-like macros."""
    macros = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = logical_lines(strip_c(f.read()))
        for m in re.finditer(r"^\s*#\s*define\s+([A-Za-z_]\w*)\(([^)]*)\)(.*)$", text, re.M):
            macros[m.group(1)] = {c for c in IDENT_CALL.findall(m.group(3))}
    return macros


def calls(text, own_defs):
    """{name: first line} of the names followed by "(" outside definitions' heads."""
    found = {}
    for m in IDENT_CALL.finditer(text):
        name = m.group(1)
        if name in C_KEYWORDS:
            continue
        line = text.count("\n", 0, m.start()) + 1
        if name in own_defs and own_defs[name][1] == line:
            continue            # the definition itself
        found.setdefault(name, line)
    return found


def read_table(doc):
    """The file names of the layer table, in order, with their line numbers."""
    with open(doc, encoding="utf-8") as f:
        lines = f.read().split("\n")
    try:
        start = next(k for k, l in enumerate(lines) if l.strip() == SECTION)
    except StopIteration:
        return None
    files = []
    for k in range(start + 1, len(lines)):
        line = lines[k]
        if line.startswith("## "):
            break
        if not line.lstrip().startswith("|"):
            continue
        cells = line.strip().strip("|").split("|")
        if len(cells) < 2:
            continue
        for name in re.findall(r"`([^`]+)`", cells[1]):
            files.append((name.strip(), k + 1))
    return files


def main(argv):
    parser = argparse.ArgumentParser(
        description="src/*.c call only files listed below them in docs/architecture.md")
    parser.add_argument("--graph", action="store_true", help="print every call between files")
    parser.add_argument("--doc", default=DOC, help="the table (default: docs/architecture.md)")
    parser.add_argument("--src", default=SRC, help="the C files (default: src/)")
    args = parser.parse_args(argv)
    show_graph, doc, src = args.graph, os.path.abspath(args.doc), os.path.abspath(args.src)
    problems = []

    doc_name = os.path.relpath(doc, ROOT) if doc.startswith(ROOT + os.sep) else doc
    table = read_table(doc)
    if table is None:
        print("check_layers: %s has no section %r" % (doc_name, SECTION))
        return 1

    c_files = sorted(f for f in os.listdir(src) if f.endswith(".c"))
    headers = sorted(os.path.join(src, f) for f in os.listdir(src) if f.endswith(".h"))

    order = {}
    for name, line in table:
        if name in order:
            problems.append("%s:%d: %s is listed twice" % (doc_name, line, name))
            continue
        order[name] = len(order)
        if name not in c_files:
            problems.append("%s:%d: %s is listed but src/%s does not exist"
                            % (doc_name, line, name, name))
    for f in c_files:
        if f not in order:
            problems.append("src/%s is not in the table of %s" % (f, doc_name))

    texts, defs = {}, {}
    for f in c_files:
        with open(os.path.join(src, f), encoding="utf-8", errors="replace") as fh:
            text = drop_preprocessor(logical_lines(strip_c(fh.read())))
        texts[f] = text
        defs[f] = definitions(text)

    defined_in = {}
    for f, d in defs.items():
        for name in d:
            defined_in.setdefault(name, []).append(f)
    public = {name: fs[0] for name, fs in defined_in.items()
              if len(fs) == 1 and not defs[fs[0]][name][0]}

    macros = header_macros(headers)

    edges = {}                  # (caller, callee) -> [(caller line, function)]
    for f in c_files:
        used = calls(texts[f], defs[f])
        for name, line in list(used.items()):
            for inner in macros.get(name, ()):
                used.setdefault(inner, line)
        for name, line in sorted(used.items(), key=lambda x: x[1]):
            callee = public.get(name)
            if callee is None or callee == f or name in defs[f]:
                continue
            edges.setdefault((f, callee), []).append((line, name))

    for (caller, callee), uses in sorted(edges.items()):
        if caller in order and callee in order and order[callee] < order[caller]:
            for line, name in uses:
                problems.append("%s:%s -> %s:%s  (src/%s:%d calls a file listed above it)"
                                % (caller, caller_function(texts[caller], defs[caller], line),
                                   callee, name, caller, line))

    if show_graph:
        for (caller, callee), uses in sorted(edges.items()):
            print("%s -> %s: %s" % (caller, callee,
                                    ", ".join(sorted({n for _, n in uses}))))

    if problems:
        for p in problems:
            print(p)
        print("check_layers: FAILED, %d problem(s) (%s, \"%s\")"
              % (len(problems), doc_name, SECTION[3:]))
        return 1
    print("check_layers: ok: %d files of src/ in the order of %s, %d calls between files "
          "(%d pairs of files), none upward"
          % (len(c_files), doc_name, sum(len(u) for u in edges.values()), len(edges)))
    return 0


def caller_function(text, own_defs, line):
    """The function of the caller's file that holds LINE (or "(file scope)")."""
    best, best_line = "(file scope)", 0
    for name, (_, ln) in own_defs.items():
        if best_line < ln <= line:
            best, best_line = name, ln
    return best


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
