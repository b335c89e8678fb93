#!/usr/bin/python3
"""test/prometheus_check.py: orch_metrics_prometheus() end to end.

    /usr/bin/python3 test/prometheus_check.py DATABASE    (PGHOST, PGPORT, PGUSER: a superuser)
    /usr/bin/python3 test/prometheus_check.py --selftest  (no database: the checks on embedded text)

DATABASE already has the extension (CREATE EXTENSION orchestrator).  The
test creates two queues of its own (names carry a random tag, so it can run
again in the same database), works tasks in two tenants -- one whose name
holds a double quote, a backslash and a newline, which the exposition must
escape -- and scrapes orch_metrics_prometheus() three times:

  #1 after orch_metrics_refresh(): the text parses with prometheus_client's
     parser and passes a strict line check (HELP and TYPE before the samples
     of every family, escaping, no duplicates, families contiguous); every
     family of the contract is there with its type and label names;
     histograms are consistent (the documented buckets, non-decreasing
     counts, _count equal to the +Inf bucket); counters, gauges and
     histogram counts have the exact values the work implies; the odd
     tenant comes back exactly; orch_queue_stats agrees.
  #2 after more work and another refresh: every counter and histogram
     sample of #1 is still there with a value at least as large, some grew,
     and the exact values follow the new work.
  #3 after more work but no refresh: counters and histograms equal #2
     (they are as of the last refresh) while the gauges follow the work.

Output is TAP-like: "ok N - ..." / "not ok N - ..." with "#" diagnostics,
then "# P passed, F failed".  Exits 1 when anything failed or nothing ran.
The test assumes nothing else refreshes the metrics while it runs (no
pg_cron maintenance in DATABASE); if the refresh timestamp moves between
scrapes #2 and #3 the equality check is reported as skipped.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
import sys
import uuid

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # reported as a failed test in main()
    text_string_to_metric_families = None


# ---------------------------------------------------------------------------
# The contract: families, their types and label names.
# ---------------------------------------------------------------------------

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
           300, 600, 1800, 3600, math.inf)

TQ = ("tenant", "queue")
CONTRACT = {
    # gauges
    "orch_tasks": ("gauge", TQ + ("state",)),
    "orch_tasks_ready": ("gauge", TQ),
    "orch_tasks_delayed": ("gauge", TQ),
    "orch_tasks_retry_waiting": ("gauge", TQ),
    "orch_oldest_ready_age_seconds": ("gauge", TQ),
    "orch_dead_letters": ("gauge", TQ),
    "orch_runs": ("gauge", ("tenant", "definition", "state")),
    "orch_approvals_waiting": ("gauge", ("tenant",)),
    "orch_review_items": ("gauge", ("tenant", "kind")),
    "orch_metrics_refreshed_timestamp_seconds": ("gauge", ()),
    # counters
    "orch_tasks_enqueued_total": ("counter", TQ),
    "orch_executions_started_total": ("counter", TQ),
    "orch_executions_finished_total": ("counter", TQ + ("outcome",)),
    "orch_tasks_finished_total": ("counter", TQ + ("state",)),
    "orch_retries_total": ("counter", TQ + ("error_class",)),
    "orch_failures_total": ("counter", TQ + ("error_class", "reason_code")),
    "orch_lease_expiries_total": ("counter", TQ),
    "orch_runs_finished_total": ("counter", ("tenant", "definition", "state")),
    "orch_maintenance_runs_total": ("counter", ()),
    # histograms
    "orch_attempt_duration_seconds": ("histogram", TQ + ("step_type",)),
    "orch_queue_wait_seconds": ("histogram", TQ + ("step_type",)),
}

ERROR_CLASSES = {"TRANSIENT", "RETRYABLE", "RATE_LIMITED", "DEPENDENCY_FAILED",
                 "NON_RETRYABLE", "COMPENSATION_REQUIRED", "none"}
OPEN_TASK_STATES = ("received", "queued", "executing", "awaiting_tool",
                    "awaiting_user_confirmation")
# (family, label) -> the values the contract allows
LABEL_DOMAINS = {
    ("orch_tasks", "state"): set(OPEN_TASK_STATES),
    ("orch_runs", "state"): {"running", "waiting_approval", "paused"},
    ("orch_review_items", "kind"): {
        "dead_letter", "run_failed", "compensation_failed", "compensation_approval",
        "approval_waiting", "awaiting_confirmation", "stuck_task", "lease_overdue"},
    ("orch_tasks_finished_total", "state"): {"completed", "failed", "cancelled"},
    ("orch_retries_total", "error_class"): ERROR_CLASSES,
    ("orch_failures_total", "error_class"): ERROR_CLASSES,
}

CUMULATIVE_TYPES = ("counter", "histogram")


# ---------------------------------------------------------------------------
# TAP output
# ---------------------------------------------------------------------------

class Tap:
    """Numbered ok / not ok lines and the closing summary."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, good: bool, description: str, diagnostics=()) -> bool:
        number = self.passed + self.failed + 1
        if good:
            self.passed += 1
            print(f"ok {number} - {description}")
        else:
            self.failed += 1
            print(f"not ok {number} - {description}")
            for line in list(diagnostics)[:40]:
                self.diag(line)
        sys.stdout.flush()
        return good

    def problems(self, problems: list[str], description: str) -> bool:
        """ok when the list of problems is empty; the problems are the diagnostics."""
        return self.check(not problems, description, problems)

    def skip(self, description: str, reason: str) -> None:
        self.passed += 1
        print(f"ok {self.passed + self.failed} - {description} # SKIP {reason}")

    @staticmethod
    def diag(text: str) -> None:
        for line in str(text).splitlines() or [""]:
            print(f"#   {line}")

    def finish(self) -> int:
        total = self.passed + self.failed
        print(f"1..{total}")
        print(f"# {self.passed} passed, {self.failed} failed")
        return 0 if total > 0 and self.failed == 0 else 1


# ---------------------------------------------------------------------------
# Reading an exposition: a strict line check of our own, and the real parser.
# ---------------------------------------------------------------------------

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
HELP_RE = re.compile(rf"#[ \t]+HELP[ \t]+({METRIC_NAME})(?:[ \t]+(.*))?")
TYPE_RE = re.compile(rf"#[ \t]+TYPE[ \t]+({METRIC_NAME})[ \t]+"
                     r"(counter|gauge|histogram|summary|untyped)[ \t]*")
SAMPLE_RE = re.compile(rf"({METRIC_NAME})(?:\{{(.*)\}})?[ \t]+(\S+)(?:[ \t]+(-?[0-9]+))?[ \t]*")
LABEL_PAIR_RE = re.compile(rf'[ \t]*({LABEL_NAME})[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*')
VALUE_RE = re.compile(r"[+-]?(?:Inf|NaN|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
LABEL_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
HELP_ESCAPES = {"\\": "\\", "n": "\n"}
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}

Labels = tuple[tuple[str, str], ...]   # sorted (name, value) pairs
SampleKey = tuple[str, Labels]          # (sample name, labels)


def labels_key(labels: dict[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def show_key(key: SampleKey) -> str:
    name, labels = key
    inner = ",".join(f"{k}={v!r}" for k, v in labels)
    return f"{name}{{{inner}}}"


def unescape(text: str, escapes: dict[str, str]) -> str:
    """Resolves backslash escapes; raises ValueError on one not in escapes."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in escapes:
                raise ValueError(f"invalid escape {text[i:i + 2]!r}")
            out.append(escapes[text[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_label_list(text: str) -> dict[str, str]:
    """The inside of {...}; raises ValueError on anything malformed."""
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text) and text[pos:].strip():
        m = LABEL_PAIR_RE.match(text, pos)
        if not m:
            raise ValueError(f"malformed labels at {text[pos:pos + 30]!r}")
        name, raw = m.group(1), m.group(2)
        if name in labels:
            raise ValueError(f"label {name} twice")
        labels[name] = unescape(raw, LABEL_ESCAPES)
        pos = m.end()
        if pos < len(text):
            if text[pos] != ",":
                raise ValueError(f"expected ',' at {text[pos:pos + 30]!r}")
            pos += 1
    return labels


@dataclasses.dataclass
class Lint:
    """What the strict line check found."""
    problems: list[str]
    types: dict[str, str]              # family name (as on its TYPE line) -> type
    helps: set[str]                    # family names with a HELP line
    samples: dict[SampleKey, float]
    family_of: dict[str, str]          # sample name -> family name


def family_for(sample: str, types: dict[str, str]) -> str | None:
    """The declared family a sample name belongs to, if any."""
    if types.get(sample) in ("counter", "gauge", "untyped", "summary"):
        return sample
    for typ, suffixes in SUFFIXES.items():
        for suffix in suffixes:
            base = sample[:-len(suffix)]
            if sample.endswith(suffix) and types.get(base) == typ:
                return base
    return None


def lint_exposition(text: str) -> Lint:
    """Checks text format 0.0.4 line by line, more strictly than the Python
    parser: syntax and escaping, HELP and TYPE once per family and before its
    samples, a family's samples together, no sample twice, `le` exactly on
    histogram buckets."""
    problems: list[str] = []
    types: dict[str, str] = {}
    helps: set[str] = set()
    samples: dict[SampleKey, float] = {}
    family_of: dict[str, str] = {}
    with_samples: set[str] = set()
    current = None

    if text and not text.endswith("\n"):
        problems.append("the text does not end with a line feed")
    for number, line in enumerate(text.split("\n"), start=1):
        where = f"line {number}: {line[:120]!r}"
        if not line.strip():
            continue
        if line.startswith("#"):
            words = line.split(None, 2)
            keyword = words[1] if len(words) > 1 else ""
            if keyword == "HELP":
                m = HELP_RE.fullmatch(line)
                if not m:
                    problems.append(f"malformed HELP, {where}")
                    continue
                name = m.group(1)
                if name in helps:
                    problems.append(f"second HELP for {name}, {where}")
                if name in with_samples:
                    problems.append(f"HELP for {name} after its samples, {where}")
                helps.add(name)
                try:
                    unescape(m.group(2) or "", HELP_ESCAPES)
                except ValueError as e:
                    problems.append(f"HELP text: {e}, {where}")
            elif keyword == "TYPE":
                m = TYPE_RE.fullmatch(line)
                if not m:
                    problems.append(f"malformed TYPE, {where}")
                    continue
                name = m.group(1)
                if name in types:
                    problems.append(f"second TYPE for {name}, {where}")
                if name in with_samples:
                    problems.append(f"TYPE for {name} after its samples, {where}")
                types[name] = m.group(2)
            continue  # any other comment is allowed

        m = SAMPLE_RE.fullmatch(line)
        if not m:
            problems.append(f"malformed sample, {where}")
            continue
        name, label_text, value_text = m.group(1), m.group(2), m.group(3)
        try:
            labels = parse_label_list(label_text or "")
        except ValueError as e:
            problems.append(f"{e}, {where}")
            continue
        if not VALUE_RE.fullmatch(value_text):
            problems.append(f"bad value {value_text!r}, {where}")
            continue
        family = family_for(name, types)
        if family is None:
            problems.append(f"sample {name} has no TYPE line before it, {where}")
            continue
        if family not in helps:
            problems.append(f"sample {name} has no HELP line before it, {where}")
        if family != current and family in with_samples:
            problems.append(f"samples of {family} are not together, {where}")
        current = family
        with_samples.add(family)
        family_of[name] = family
        is_bucket = types[family] == "histogram" and name == family + "_bucket"
        if is_bucket != ("le" in labels):
            problems.append(f"'le' label {'missing' if is_bucket else 'not allowed'}, {where}")
        key = (name, labels_key(labels))
        if key in samples:
            problems.append(f"sample {show_key(key)} twice, {where}")
        samples[key] = float(value_text)
    for name in sorted(helps - types.keys()):
        problems.append(f"HELP for {name} without a TYPE line")
    for name in sorted(types.keys() - helps):
        problems.append(f"TYPE for {name} without a HELP line")
    return Lint(problems, types, helps, samples, family_of)


@dataclasses.dataclass
class Scrape:
    """One exposition as prometheus_client's parser reads it."""
    text: str
    samples: dict[SampleKey, float]
    sample_types: dict[str, str]       # sample name -> its family's type

    def get(self, name: str, labels: dict[str, str]) -> float | None:
        return self.samples.get((name, labels_key(labels)))

    def series(self, name: str) -> dict[Labels, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def cumulative(self) -> dict[SampleKey, float]:
        """Counter and histogram samples: the ones that never go down."""
        return {k: v for k, v in self.samples.items()
                if self.sample_types.get(k[0]) in CUMULATIVE_TYPES}


def parse_exposition(text: str) -> Scrape:
    """Reads the text with the real parser; raises on a parse error."""
    samples: dict[SampleKey, float] = {}
    sample_types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, labels_key(sample.labels))] = sample.value
            sample_types[sample.name] = family.type
    return Scrape(text, samples, sample_types)


def same_value(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def agreement_problems(lint: Lint, scrape: Scrape) -> list[str]:
    """The parser and the line check must read the same samples."""
    problems = []
    for key in sorted(lint.samples.keys() | scrape.samples.keys()):
        a, b = lint.samples.get(key), scrape.samples.get(key)
        if not same_value(a, b):
            problems.append(f"{show_key(key)}: line check {a}, parser {b}")
    untyped = sorted(n for n, t in scrape.sample_types.items() if t == "untyped")
    if untyped:
        problems.append(f"the parser read these samples as untyped: {', '.join(untyped)}")
    return problems


def contract_problems(lint: Lint) -> list[str]:
    """Every family of the contract is declared with its type and HELP, its
    samples carry exactly its label names, and documented label values."""
    problems = []
    for family, (typ, _) in CONTRACT.items():
        if family not in lint.types:
            problems.append(f"no '# TYPE {family} {typ}' line")
        elif lint.types[family] != typ:
            problems.append(f"{family} is declared {lint.types[family]}, the contract says {typ}")
        if family not in lint.helps:
            problems.append(f"no '# HELP {family}' line")
    for key in lint.samples:
        name, labels = key
        family = lint.family_of.get(name)
        if family not in CONTRACT:
            continue
        want = set(CONTRACT[family][1]) | ({"le"} if name.endswith("_bucket") else set())
        have = {k for k, _ in labels}
        if have != want:
            problems.append(f"{show_key(key)}: labels {sorted(have)}, the contract says {sorted(want)}")
        for label, value in labels:
            domain = LABEL_DOMAINS.get((family, label))
            if domain is not None and value not in domain:
                problems.append(f"{show_key(key)}: {label}={value!r} is not one of {sorted(domain)}")
    return problems


def histogram_problems(lint: Lint, scrape: Scrape) -> list[str]:
    """Per histogram series: the documented buckets, counts non-decreasing in
    le, the +Inf bucket equal to _count, and a _sum."""
    problems = []
    for family, typ in lint.types.items():
        if typ != "histogram":
            continue
        buckets: dict[Labels, dict[float, float]] = collections.defaultdict(dict)
        for labels, value in scrape.series(family + "_bucket").items():
            rest = tuple(p for p in labels if p[0] != "le")
            le = dict(labels)["le"]
            try:
                buckets[rest][float(le)] = value
            except ValueError:
                problems.append(f"{family}{dict(rest)}: le={le!r} is not a number")
        counts = scrape.series(family + "_count")
        sums = scrape.series(family + "_sum")
        for labels in sorted(buckets.keys() | counts.keys() | sums.keys()):
            series = f"{family}{dict(labels)}"
            got = buckets.get(labels, {})
            if family in CONTRACT and sorted(got) != sorted(BUCKETS):
                problems.append(f"{series}: buckets {sorted(got)}, the contract says {list(BUCKETS)}")
            ordered = [got[le] for le in sorted(got)]
            if any(b < a for a, b in zip(ordered, ordered[1:])):
                problems.append(f"{series}: bucket counts decrease: {ordered}")
            if math.inf not in got:
                problems.append(f"{series}: no le=\"+Inf\" bucket")
            elif labels not in counts:
                problems.append(f"{series}: no _count")
            elif counts[labels] != got[math.inf]:
                problems.append(f"{series}: _count {counts[labels]} != +Inf bucket {got[math.inf]}")
            if labels not in sums:
                problems.append(f"{series}: no _sum")
            elif sums[labels] < 0:
                problems.append(f"{series}: negative _sum {sums[labels]}")
    return problems


def monotonic_problems(before: Scrape, after: Scrape) -> tuple[list[str], list[SampleKey]]:
    """Cumulative samples of `before` must be in `after`, not smaller.
    Returns the problems and the samples that grew."""
    problems, grew = [], []
    later = after.samples
    for key, value in sorted(before.cumulative().items()):
        if key not in later:
            problems.append(f"{show_key(key)} is gone (was {value})")
        elif later[key] < value:
            problems.append(f"{show_key(key)} went down: {value} -> {later[key]}")
        elif later[key] > value:
            grew.append(key)
    return problems, grew


def unchanged_problems(before: Scrape, after: Scrape) -> list[str]:
    """The cumulative samples of both scrapes are the same, value for value."""
    a, b = before.cumulative(), after.cumulative()
    problems = []
    for key in sorted(a.keys() | b.keys()):
        if not same_value(a.get(key), b.get(key)):
            problems.append(f"{show_key(key)}: {a.get(key)} -> {b.get(key)}")
    return problems


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def check_well_formed(tap: Tap, name: str, text: str) -> Scrape | None:
    """The format checks every scrape gets; returns what the parser read."""
    lint = lint_exposition(text)
    try:
        scrape = parse_exposition(text)
        tap.check(True, f"{name}: prometheus_client parses the exposition")
    except Exception as e:  # the parser raises ValueError, IndexError, ...
        scrape = None
        tap.check(False, f"{name}: prometheus_client parses the exposition",
                  [f"{type(e).__name__}: {e}"])
    tap.problems(lint.problems, f"{name}: line check (syntax, escaping, HELP and TYPE "
                                f"before each family's samples, no duplicates)")
    tap.problems(contract_problems(lint), f"{name}: every contract family has HELP, its TYPE "
                                          f"and its label names")
    if scrape is not None:
        tap.problems(agreement_problems(lint, scrape),
                     f"{name}: the parser and the line check read the same samples")
        tap.problems(histogram_problems(lint, scrape),
                     f"{name}: histograms: documented buckets, non-decreasing, _count = +Inf bucket")
    return scrape


# ---------------------------------------------------------------------------
# The database, through psql
# ---------------------------------------------------------------------------

class DatabaseError(Exception):
    pass


def sql_literal(value: str) -> str:
    """An escape-string literal: right whatever standard_conforming_strings says."""
    if "\0" in value:
        raise ValueError("NUL in an SQL literal")
    return "E'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def find_psql() -> str:
    for candidate in (os.environ.get("PSQL"), "/usr/lib/postgresql/15/bin/psql", shutil.which("psql")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise DatabaseError("psql not found (set PSQL)")


class Database:
    """One psql call per statement, each its own transaction."""

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        self.psql = find_psql()
        self.env = dict(os.environ, PGCLIENTENCODING="UTF8", PGAPPNAME="prometheus_check")

    def run(self, sql: str) -> str:
        proc = subprocess.run(
            [self.psql, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
             "-d", self.dbname, "-c", sql],
            capture_output=True, text=True, encoding="utf-8", env=self.env, timeout=120)
        if proc.returncode != 0:
            raise DatabaseError(f"psql failed ({proc.returncode}) on: {sql}\n{proc.stderr.strip()}")
        return proc.stdout

    def rows(self, sql: str) -> list[list[str]]:
        return [line.split("|") for line in self.run(sql).splitlines() if line]

    def value(self, sql: str) -> str:
        rows = self.rows(sql)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise DatabaseError(f"expected one value from: {sql}\ngot: {rows!r}")
        return rows[0][0]

    def scrape(self) -> str:
        """orch_metrics_prometheus(), byte for byte (base64 keeps psql's
        output formatting out of it)."""
        encoded = self.run("SELECT encode(convert_to(orch_metrics_prometheus(), 'UTF8'), 'base64')")
        return base64.b64decode("".join(encoded.split())).decode("utf-8")

    def refresh(self) -> int:
        return int(self.value("SELECT orch_metrics_refresh()"))

    def now_epoch(self) -> float:
        return float(self.value("SELECT extract(epoch FROM now())"))


# ---------------------------------------------------------------------------
# The work, and a ledger of what the metrics must say about it
# ---------------------------------------------------------------------------

class ScenarioError(Exception):
    pass


@dataclasses.dataclass
class Task:
    tenant: str
    queue: str
    state: str               # queued, executing, awaiting_tool, completed, failed
    delayed: bool = False    # queued with a future run_at
    token: str = ""


class Ledger:
    """What has been done, in the terms of the metrics."""

    def __init__(self) -> None:
        self.tasks: dict[int, Task] = {}
        self.enqueued = collections.Counter()   # (tenant, queue)
        self.started = collections.Counter()    # (tenant, queue)
        self.attempts = collections.Counter()   # (tenant, queue, outcome)
        self.finished = collections.Counter()   # (tenant, queue, state)
        self.retries = collections.Counter()    # (tenant, queue, error_class)
        self.failures = collections.Counter()   # (tenant, queue, error_class, reason_code)

    def series(self) -> list[tuple[str, str]]:
        return sorted(self.enqueued)

    def count(self, tenant: str, queue: str, predicate) -> int:
        return sum(1 for t in self.tasks.values()
                   if t.tenant == tenant and t.queue == queue and predicate(t))


class Worker:
    """Does work through the SQL API and books it in the ledger."""

    WORKER = "prometheus_check"

    def __init__(self, db: Database, ledger: Ledger) -> None:
        self.db = db
        self.ledger = ledger

    def create_queue(self, name: str, settings: dict) -> None:
        self.db.run(f"SELECT orch_create_queue({sql_literal(name)}, "
                    f"{sql_literal(json.dumps(settings))}::jsonb)")

    def enqueue(self, queue: str, tenant: str, n: int, delayed: bool = False) -> list[int]:
        run_at = "now() + interval '1 day'" if delayed else "NULL"
        ids = [int(r[0]) for r in self.db.rows(
            f"SELECT orch_enqueue({sql_literal(queue)}, jsonb_build_object('n', i), "
            f"run_at => {run_at}, tenant => {sql_literal(tenant)}) "
            f"FROM generate_series(1, {n}) AS i")]
        if len(ids) != n or len(set(ids)) != n:
            raise ScenarioError(f"enqueue of {n} tasks returned {ids}")
        for task_id in ids:
            self.ledger.tasks[task_id] = Task(tenant, queue, "queued", delayed)
        self.ledger.enqueued[(tenant, queue)] += n
        return ids

    def claim(self, queue: str, tenant: str, n: int) -> list[int]:
        rows = self.db.rows(
            f"SELECT task_id, lease_token FROM orch_dequeue({sql_literal(queue)}, "
            f"{sql_literal(self.WORKER)}, {n}, interval '1 hour', {sql_literal(tenant)})")
        if len(rows) != n:
            raise ScenarioError(f"claimed {len(rows)} tasks of {queue}/{tenant!r}, wanted {n}")
        ids = []
        for task_id_text, token in rows:
            task = self.ledger.tasks.get(int(task_id_text))
            if task is None or (task.tenant, task.queue) != (tenant, queue) \
                    or task.state != "queued" or task.delayed:
                raise ScenarioError(f"claimed task {task_id_text}, not a ready task of "
                                    f"{queue}/{tenant!r}: {task}")
            task.state, task.token = "executing", token
            ids.append(int(task_id_text))
        self.ledger.started[(tenant, queue)] += n
        return ids

    def complete(self, task_id: int) -> None:
        task = self.ledger.tasks[task_id]
        state = self.db.value(f"SELECT orch_complete({task_id}, '{task.token}')")
        if state != "completed":
            raise ScenarioError(f"orch_complete({task_id}) returned {state!r}")
        task.state = "completed"
        self.ledger.attempts[(task.tenant, task.queue, "completed")] += 1
        self.ledger.finished[(task.tenant, task.queue, "completed")] += 1

    def fail(self, task_id: int, error_class: str) -> tuple[str, str]:
        """orch_fail; returns (state, reason_code) and books a retry or a final failure."""
        task = self.ledger.tasks[task_id]
        state, reason = self.db.rows(
            f"SELECT state, reason_code FROM orch_fail({task_id}, '{task.token}', "
            f"{sql_literal(error_class)}, 'prometheus_check: {error_class.lower()}')")[0]
        key = (task.tenant, task.queue)
        self.ledger.attempts[key + ("failed",)] += 1
        if state == "failed":
            task.state = "failed"
            self.ledger.finished[key + ("failed",)] += 1
            self.ledger.failures[key + (error_class, reason)] += 1
        elif state == "awaiting_tool" and reason == "retry_scheduled":
            task.state = "awaiting_tool"
            self.ledger.retries[key + (error_class,)] += 1
        else:
            raise ScenarioError(f"orch_fail({task_id}, {error_class}) -> {state}, {reason}")
        return state, reason

    def work(self, queue: str, tenant: str, n: int) -> None:
        """Claims n tasks and completes them."""
        for task_id in self.claim(queue, tenant, n):
            self.complete(task_id)


@dataclasses.dataclass
class Names:
    work_queue: str     # retries wait an hour here
    dead_queue: str     # max_attempts 1
    plain_tenant: str
    odd_tenant: str     # needs every escape of a label value

    @classmethod
    def fresh(cls) -> "Names":
        tag = uuid.uuid4().hex[:10]
        return cls(work_queue=f"promcheck-{tag}.work", dead_queue=f"promcheck-{tag}.dlq",
                   plain_tenant=f"acme-{tag}", odd_tenant=f't"1\\x\n{tag}')


# ---------------------------------------------------------------------------
# Expectations
# ---------------------------------------------------------------------------

def value_problems(scrape: Scrape, expected: list[tuple[str, dict[str, str], float]],
                   absent_is_zero: bool) -> list[str]:
    problems = []
    for name, labels, want in expected:
        got = scrape.get(name, labels)
        if got is None and absent_is_zero:
            got = 0.0
        if got != want:
            problems.append(f"{show_key((name, labels_key(labels)))}: expected {want}, got {got}")
    return problems


def check_counters(tap: Tap, name: str, scrape: Scrape, ledger: Ledger) -> None:
    """Exact values of the counters and histogram counts the work implies."""
    def tq(tenant, queue, **more):
        return {"tenant": tenant, "queue": queue, **more}

    series = ledger.series()
    tap.problems(value_problems(scrape, [
        ("orch_tasks_enqueued_total", tq(t, q), ledger.enqueued[(t, q)]) for t, q in series
    ], absent_is_zero=False), f"{name}: orch_tasks_enqueued_total per tenant and queue")
    tap.problems(value_problems(scrape, [
        ("orch_executions_started_total", tq(t, q), ledger.started[(t, q)]) for t, q in series
    ], absent_is_zero=True), f"{name}: orch_executions_started_total per tenant and queue")
    tap.problems(value_problems(scrape, [
        ("orch_tasks_finished_total", tq(t, q, state=s), ledger.finished[(t, q, s)])
        for t, q in series for s in ("completed", "failed", "cancelled")
    ], absent_is_zero=True), f"{name}: orch_tasks_finished_total by state")
    tap.problems(value_problems(scrape, [
        ("orch_executions_finished_total", tq(t, q, outcome="completed"),
         ledger.attempts[(t, q, "completed")]) for t, q in series
    ], absent_is_zero=True), f"{name}: orch_executions_finished_total{{outcome=\"completed\"}}")
    tap.problems(value_problems(scrape, [
        ("orch_retries_total", tq(t, q, error_class=c), n)
        for (t, q, c), n in sorted(ledger.retries.items())
    ] + [
        ("orch_retries_total", tq(t, q, error_class="NON_RETRYABLE"), 0) for t, q in series
    ], absent_is_zero=True), f"{name}: orch_retries_total by error class (one TRANSIENT retry)")
    tap.problems(value_problems(scrape, [
        ("orch_failures_total", tq(t, q, error_class=c, reason_code=r), n)
        for (t, q, c, r), n in sorted(ledger.failures.items())
    ], absent_is_zero=False), f"{name}: orch_failures_total for the NON_RETRYABLE dead letter")
    histogram_counts = []
    for t, q in series:
        attempts = sum(n for (t2, q2, _), n in ledger.attempts.items() if (t2, q2) == (t, q))
        histogram_counts += [
            ("orch_attempt_duration_seconds_count", tq(t, q, step_type="task"), attempts),
            ("orch_queue_wait_seconds_count", tq(t, q, step_type="task"), ledger.started[(t, q)]),
        ]
    tap.problems(value_problems(scrape, histogram_counts, absent_is_zero=True),
                 f"{name}: histogram _count = finished attempts (duration) and claims (queue wait)")


def check_gauges(tap: Tap, name: str, scrape: Scrape, ledger: Ledger) -> None:
    """Live gauges against the ledger's open tasks."""
    expected = []
    for t, q in ledger.series():
        labels = {"tenant": t, "queue": q}
        for state in OPEN_TASK_STATES:
            n = ledger.count(t, q, lambda task, s=state: task.state == s)
            expected.append(("orch_tasks", dict(labels, state=state), n))
        expected += [
            ("orch_tasks_ready", labels, ledger.count(t, q, lambda k: k.state == "queued" and not k.delayed)),
            ("orch_tasks_delayed", labels, ledger.count(t, q, lambda k: k.state == "queued" and k.delayed)),
            ("orch_tasks_retry_waiting", labels, ledger.count(t, q, lambda k: k.state == "awaiting_tool")),
            ("orch_dead_letters", labels, ledger.count(t, q, lambda k: k.state == "failed")),
        ]
    tap.problems(value_problems(scrape, expected, absent_is_zero=True),
                 f"{name}: live gauges orch_tasks by state, ready, delayed, retry_waiting, dead_letters")


def check_oldest_age(tap: Tap, name: str, scrape: Scrape, ledger: Ledger) -> None:
    problems = []
    for t, q in ledger.series():
        ready = ledger.count(t, q, lambda k: k.state == "queued" and not k.delayed)
        age = scrape.get("orch_oldest_ready_age_seconds", {"tenant": t, "queue": q})
        if ready and (age is None or not 0 <= age < 3600):
            problems.append(f"{t!r}/{q}: {ready} ready, oldest_ready_age_seconds {age}")
    tap.problems(problems, f"{name}: orch_oldest_ready_age_seconds for queues with ready tasks")


def check_freshness(tap: Tap, name: str, scrape: Scrape, db_now: float) -> None:
    got = scrape.get("orch_metrics_refreshed_timestamp_seconds", {})
    tap.check(got is not None and db_now - 300 <= got <= db_now + 1,
              f"{name}: orch_metrics_refreshed_timestamp_seconds is the refresh just made",
              [f"refreshed {got}, database time {db_now}"])


def check_round_trip(tap: Tap, name: str, scrape: Scrape, names: Names) -> None:
    """The odd tenant is escaped in the text and comes back as itself."""
    tenants = {dict(labels).get("tenant")
               for labels in scrape.series("orch_tasks_enqueued_total")}
    escaped = f'tenant="{escape_label_value(names.odd_tenant)}"'
    tap.check(names.odd_tenant in tenants and escaped in scrape.text,
              f"{name}: a tenant with a quote, a backslash and a newline round-trips",
              [f"looked for {names.odd_tenant!r} among {sorted(map(repr, tenants))[:10]}",
               f"escaped form {escaped!r} in the text: {escaped in scrape.text}"])


def check_queue_stats(tap: Tap, name: str, db: Database, scrape: Scrape, ledger: Ledger) -> None:
    """orch_queue_stats reads the same counters and gauges."""
    columns = {  # view column -> (metric, extra labels)
        "enqueued_total": ("orch_tasks_enqueued_total", {}),
        "started_total": ("orch_executions_started_total", {}),
        "completed_total": ("orch_tasks_finished_total", {"state": "completed"}),
        "failed_total": ("orch_tasks_finished_total", {"state": "failed"}),
        "ready": ("orch_tasks_ready", {}),
        "delayed": ("orch_tasks_delayed", {}),
        "retry_waiting": ("orch_tasks_retry_waiting", {}),
        "dead_letters": ("orch_dead_letters", {}),
    }
    problems = []
    for t, q in ledger.series():
        rows = db.rows(f"SELECT {', '.join(columns)} FROM orch_queue_stats "
                       f"WHERE tenant_id = {sql_literal(t)} AND queue = {sql_literal(q)}")
        if len(rows) != 1:
            problems.append(f"{t!r}/{q}: {len(rows)} rows in orch_queue_stats")
            continue
        for (column, (metric, extra)), text in zip(columns.items(), rows[0]):
            got = scrape.get(metric, {"tenant": t, "queue": q, **extra}) or 0.0
            if float(text) != got:
                problems.append(f"{t!r}/{q}: orch_queue_stats.{column} = {text}, {metric} = {got}")
    tap.problems(problems, f"{name}: orch_queue_stats agrees with the exposition")


def check_reader_access(tap: Tap, db: Database) -> None:
    """A scraper needs only orch_reader: orch_metrics_prometheus() and the
    views contrib/postgres_exporter/queries.yaml reads."""
    reads = ["SELECT length(orch_metrics_prometheus())"] + [
        f"SELECT count(*) FROM {view}" for view in
        ("orch_queue_stats", "orch_error_stats", "orch_durations", "orch_review_queue", "orch_runs")]
    problems = []
    for sql in reads:
        try:
            db.run(f"SET ROLE orch_reader; {sql}")
        except DatabaseError as e:
            lines = str(e).splitlines()
            error = next((l for l in lines if l.startswith("ERROR:")), lines[-1])
            problems.append(f"{error} ({sql})")
    tap.problems(problems, "orch_reader can read orch_metrics_prometheus() and the stats views")


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------

def scenario(tap: Tap, db: Database, names: Names) -> None:
    ledger = Ledger()
    worker = Worker(db, ledger)
    work_q, dead_q = names.work_queue, names.dead_queue
    plain, odd = names.plain_tenant, names.odd_tenant

    # Queues: retries on work_q wait an hour (so they stay retry-waiting);
    # dead_q gives one attempt.
    worker.create_queue(work_q, {"backoff": "fixed", "initial_delay": "1 hour",
                                 "max_delay": "1 hour", "lease": "1 hour"})
    worker.create_queue(dead_q, {"max_attempts": 1, "lease": "1 hour"})

    # Phase 1: two tenants, completions, a retry, a dead letter, one task
    # left executing, one delayed.
    worker.enqueue(work_q, plain, 4)
    worker.enqueue(work_q, plain, 1, delayed=True)
    worker.enqueue(work_q, odd, 3)
    worker.enqueue(dead_q, odd, 2)
    worker.work(work_q, plain, 2)
    worker.work(work_q, odd, 1)
    [retried] = worker.claim(work_q, odd, 1)
    tap.check(worker.fail(retried, "TRANSIENT") == ("awaiting_tool", "retry_scheduled"),
              "setup: a TRANSIENT failure schedules a retry")
    worker.claim(work_q, odd, 1)                       # stays executing
    [dead] = worker.claim(dead_q, odd, 1)
    tap.check(worker.fail(dead, "NON_RETRYABLE") == ("failed", "non_retryable"),
              "setup: a NON_RETRYABLE failure is a dead letter")

    folded = db.refresh()
    tap.check(folded > 0, "orch_metrics_refresh() folds the new events and attempts",
              [f"returned {folded}"])
    db_now = db.now_epoch()
    scrape1 = check_well_formed(tap, "scrape #1", db.scrape())
    if scrape1 is None:
        tap.diag("scrape #1 does not parse: the remaining checks need it")
        return
    check_round_trip(tap, "scrape #1", scrape1, names)
    check_counters(tap, "scrape #1", scrape1, ledger)
    check_gauges(tap, "scrape #1", scrape1, ledger)
    check_oldest_age(tap, "scrape #1", scrape1, ledger)
    check_freshness(tap, "scrape #1", scrape1, db_now)
    check_queue_stats(tap, "scrape #1", db, scrape1, ledger)
    check_reader_access(tap, db)

    # Phase 2: more completions and more work, a new series; refresh.
    worker.work(work_q, plain, 2)
    worker.enqueue(work_q, plain, 2)
    worker.work(dead_q, odd, 1)
    worker.enqueue(dead_q, plain, 1)
    db.refresh()
    db_now = db.now_epoch()
    scrape2 = check_well_formed(tap, "scrape #2", db.scrape())
    if scrape2 is None:
        tap.diag("scrape #2 does not parse: the remaining checks need it")
        return
    problems, grew = monotonic_problems(scrape1, scrape2)
    tap.problems(problems, "scrape #2: every counter and histogram sample of #1 is there, not smaller")
    tap.check(bool(grew), "scrape #2: counters grew with the work",
              ["no counter or histogram sample grew"])
    check_counters(tap, "scrape #2", scrape2, ledger)
    check_gauges(tap, "scrape #2", scrape2, ledger)
    check_freshness(tap, "scrape #2", scrape2, db_now)

    # Phase 3: more work, no refresh: counters stay, gauges move.
    worker.work(work_q, plain, 1)
    worker.enqueue(work_q, odd, 1)
    try:
        scrape3 = parse_exposition(db.scrape())
    except Exception as e:
        tap.check(False, "scrape #3: prometheus_client parses the exposition", [str(e)])
        return
    stamp = "orch_metrics_refreshed_timestamp_seconds"
    if scrape3.get(stamp, {}) != scrape2.get(stamp, {}):
        tap.skip("scrape #3: counters and histograms equal #2 without a refresh",
                 "something else refreshed the metrics meanwhile (pg_cron maintenance?)")
    else:
        tap.problems(unchanged_problems(scrape2, scrape3),
                     "scrape #3: counters and histograms equal #2 without a refresh")
    check_gauges(tap, "scrape #3", scrape3, ledger)


def cleanup(db: Database, names: Names) -> None:
    """Drops the test's queues (cancelling what is open); best effort."""
    for queue in (names.work_queue, names.dead_queue):
        try:
            db.run(f"SELECT orch_drop_queue({sql_literal(queue)}, force => true)")
        except DatabaseError as e:
            Tap.diag(f"cleanup: {e}")


def run_against(dbname: str) -> int:
    tap = Tap()
    if text_string_to_metric_families is None:
        tap.check(False, "prometheus_client is importable",
                  ["apt-get install python3-prometheus-client"])
        return tap.finish()
    names = Names.fresh()
    db = None
    try:
        db = Database(dbname)
        scenario(tap, db, names)
    except (DatabaseError, ScenarioError, subprocess.TimeoutExpired) as e:
        tap.check(False, "the scenario ran to its end", [f"{type(e).__name__}: {e}"])
    finally:
        if db is not None:
            try:
                cleanup(db, names)
            except Exception as e:  # never let cleanup hide the result
                Tap.diag(f"cleanup: {e}")
    return tap.finish()


# ---------------------------------------------------------------------------
# --selftest: the checks against embedded text, no database
# ---------------------------------------------------------------------------

SELFTEST_TENANT = 't"1\\x\nz'

SAMPLE_EXPOSITION = r'''# HELP orch_tasks Open tasks by state.
# TYPE orch_tasks gauge
orch_tasks{tenant="acme",queue="emails",state="queued"} 3
orch_tasks{tenant="t\"1\\x\nz",queue="emails",state="executing"} 1
# HELP orch_tasks_ready Tasks claimable now.
# TYPE orch_tasks_ready gauge
orch_tasks_ready{tenant="acme",queue="emails"} 2
# HELP orch_tasks_delayed Queued tasks whose run_at has not come.
# TYPE orch_tasks_delayed gauge
orch_tasks_delayed{tenant="acme",queue="emails"} 1
# HELP orch_tasks_retry_waiting Tasks waiting for a retry.
# TYPE orch_tasks_retry_waiting gauge
orch_tasks_retry_waiting{tenant="t\"1\\x\nz",queue="emails"} 1
# HELP orch_oldest_ready_age_seconds Age of the oldest ready task.
# TYPE orch_oldest_ready_age_seconds gauge
orch_oldest_ready_age_seconds{tenant="acme",queue="emails"} 0.25
# HELP orch_dead_letters Failed tasks not re-driven.
# TYPE orch_dead_letters gauge
orch_dead_letters{tenant="t\"1\\x\nz",queue="dlq"} 1
# HELP orch_runs Open runs.
# TYPE orch_runs gauge
orch_runs{tenant="acme",definition="release",state="waiting_approval"} 1
# HELP orch_approvals_waiting Approval steps waiting.
# TYPE orch_approvals_waiting gauge
orch_approvals_waiting{tenant="acme"} 1
# HELP orch_review_items Items in orch_review_queue.
# TYPE orch_review_items gauge
orch_review_items{tenant="t\"1\\x\nz",kind="dead_letter"} 1
# HELP orch_metrics_refreshed_timestamp_seconds When the counters were last refreshed.
# TYPE orch_metrics_refreshed_timestamp_seconds gauge
orch_metrics_refreshed_timestamp_seconds 1718000000.5
# HELP orch_tasks_enqueued_total Tasks enqueued.
# TYPE orch_tasks_enqueued_total counter
orch_tasks_enqueued_total{tenant="acme",queue="emails"} 5
orch_tasks_enqueued_total{tenant="t\"1\\x\nz",queue="emails"} 3
# HELP orch_executions_started_total Executions started (claims).
# TYPE orch_executions_started_total counter
orch_executions_started_total{tenant="acme",queue="emails"} 2
# HELP orch_executions_finished_total Executions finished by outcome.
# TYPE orch_executions_finished_total counter
orch_executions_finished_total{tenant="acme",queue="emails",outcome="completed"} 2
# HELP orch_tasks_finished_total Tasks finished by final state.
# TYPE orch_tasks_finished_total counter
orch_tasks_finished_total{tenant="acme",queue="emails",state="completed"} 2
# HELP orch_retries_total Retries scheduled by error class.
# TYPE orch_retries_total counter
orch_retries_total{tenant="t\"1\\x\nz",queue="emails",error_class="TRANSIENT"} 1
# HELP orch_failures_total Final failures by error class and reason.
# TYPE orch_failures_total counter
orch_failures_total{tenant="t\"1\\x\nz",queue="dlq",error_class="NON_RETRYABLE",reason_code="non_retryable"} 1
# HELP orch_lease_expiries_total Leases that expired.
# TYPE orch_lease_expiries_total counter
# HELP orch_runs_finished_total Runs finished by state.
# TYPE orch_runs_finished_total counter
# HELP orch_maintenance_runs_total orch_maintain passes.
# TYPE orch_maintenance_runs_total counter
orch_maintenance_runs_total 0
# HELP orch_attempt_duration_seconds Execution time of attempts.
# TYPE orch_attempt_duration_seconds histogram
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.005"} 1
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.01"} 1
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.025"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.05"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.1"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.25"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.5"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="1"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="2.5"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="5"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="10"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="30"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="60"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="120"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="300"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="600"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="1800"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="3600"} 2
orch_attempt_duration_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="+Inf"} 2
orch_attempt_duration_seconds_sum{tenant="acme",queue="emails",step_type="task"} 0.0231
orch_attempt_duration_seconds_count{tenant="acme",queue="emails",step_type="task"} 2
# HELP orch_queue_wait_seconds Time from claimable to claimed.
# TYPE orch_queue_wait_seconds histogram
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.005"} 0
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.01"} 0
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.025"} 0
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.05"} 0
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.1"} 1
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.25"} 1
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="0.5"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="1"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="2.5"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="5"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="10"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="30"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="60"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="120"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="300"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="600"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="1800"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="3600"} 2
orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="+Inf"} 2
orch_queue_wait_seconds_sum{tenant="acme",queue="emails",step_type="task"} 0.61
orch_queue_wait_seconds_count{tenant="acme",queue="emails",step_type="task"} 2
'''

# name -> (old text, new text): each breaks the sample in one way the checks must see
BROKEN_SAMPLES = {
    "a family without HELP": ("# HELP orch_tasks_ready Tasks claimable now.\n", ""),
    "TYPE after the samples": (
        "# TYPE orch_dead_letters gauge\norch_dead_letters{tenant=\"t\\\"1\\\\x\\nz\",queue=\"dlq\"} 1\n",
        "orch_dead_letters{tenant=\"t\\\"1\\\\x\\nz\",queue=\"dlq\"} 1\n# TYPE orch_dead_letters gauge\n"),
    "a counter typed without _total": (
        "# TYPE orch_tasks_enqueued_total counter", "# TYPE orch_tasks_enqueued counter"),
    "an unescaped quote in a label value": (
        'orch_tasks_ready{tenant="acme",', 'orch_tasks_ready{tenant="ac"me",'),
    "a bad escape in a label value": (
        'orch_tasks_ready{tenant="acme",', 'orch_tasks_ready{tenant="ac\\me",'),
    "a gauge typed as counter": ("# TYPE orch_runs gauge", "# TYPE orch_runs counter"),
    "a missing label": ('orch_approvals_waiting{tenant="acme"}', "orch_approvals_waiting{}"),
    "an undocumented state": ('state="waiting_approval"', 'state="sleeping"'),
    "a decreasing bucket": ('step_type="task",le="0.5"} 2', 'step_type="task",le="0.5"} 0'),
    "_count unlike +Inf": ('orch_queue_wait_seconds_count{tenant="acme",queue="emails",step_type="task"} 2',
                           'orch_queue_wait_seconds_count{tenant="acme",queue="emails",step_type="task"} 3'),
    "a missing bucket": ('orch_queue_wait_seconds_bucket{tenant="acme",queue="emails",step_type="task",le="120"} 2\n', ""),
    "a sample twice": ("orch_maintenance_runs_total 0\n",
                       "orch_maintenance_runs_total 0\norch_maintenance_runs_total 0\n"),
    "a family split in two": (
        "# HELP orch_tasks_delayed ",
        'orch_tasks{tenant="acme",queue="x",state="queued"} 1\n# HELP orch_tasks_delayed '),
    "a bad value": ("orch_maintenance_runs_total 0", "orch_maintenance_runs_total zero"),
}


def all_problems(text: str) -> list[str]:
    lint = lint_exposition(text)
    problems = lint.problems + contract_problems(lint)
    try:
        scrape = parse_exposition(text)
    except Exception as e:
        return problems + [f"parse error: {e}"]
    return problems + agreement_problems(lint, scrape) + histogram_problems(lint, scrape)


def selftest() -> int:
    tap = Tap()
    if text_string_to_metric_families is None:
        tap.check(False, "prometheus_client is importable")
        return tap.finish()
    tap.problems(all_problems(SAMPLE_EXPOSITION), "selftest: the sample passes every check")
    tap.check(any("line feed" in p for p in all_problems(SAMPLE_EXPOSITION.rstrip("\n"))),
              "selftest: a missing final line feed is seen")
    for name, (old, new) in BROKEN_SAMPLES.items():
        if old not in SAMPLE_EXPOSITION:
            tap.check(False, f"selftest: {name} (the fixture no longer holds {old!r})")
            continue
        problems = all_problems(SAMPLE_EXPOSITION.replace(old, new, 1))
        tap.check(bool(problems), f"selftest: {name} is seen",
                  ["no problem reported"])
        if problems:
            tap.diag(f"({problems[0]})")

    scrape = parse_exposition(SAMPLE_EXPOSITION)
    tenants = {dict(l).get("tenant") for l in scrape.series("orch_tasks_enqueued_total")}
    tap.check(SELFTEST_TENANT in tenants, "selftest: the escaped tenant reads back as itself",
              [repr(tenants)])
    tap.check(f'tenant="{escape_label_value(SELFTEST_TENANT)}"' in SAMPLE_EXPOSITION,
              "selftest: escape_label_value writes what the sample holds")

    more = parse_exposition(SAMPLE_EXPOSITION.replace(
        'orch_tasks_enqueued_total{tenant="acme",queue="emails"} 5',
        'orch_tasks_enqueued_total{tenant="acme",queue="emails"} 7'))
    problems, grew = monotonic_problems(scrape, more)
    tap.check(not problems and len(grew) == 1, "selftest: monotonic: growth is seen",
              problems + [repr(grew)])
    problems, _ = monotonic_problems(more, scrape)
    tap.check(len(problems) == 1, "selftest: monotonic: a counter going down is seen", problems)
    fewer = parse_exposition(SAMPLE_EXPOSITION.replace("orch_maintenance_runs_total 0\n", ""))
    problems, _ = monotonic_problems(scrape, fewer)
    tap.check(len(problems) == 1, "selftest: monotonic: a vanished counter is seen", problems)
    tap.check(not unchanged_problems(scrape, parse_exposition(SAMPLE_EXPOSITION.replace(
        "orch_tasks_ready{tenant=\"acme\",queue=\"emails\"} 2",
        "orch_tasks_ready{tenant=\"acme\",queue=\"emails\"} 9"))),
        "selftest: unchanged: gauges may move")
    tap.check(len(unchanged_problems(scrape, more)) == 1, "selftest: unchanged: a counter moving is seen")

    tap.check(sql_literal("it's a \\ \"test\"\n") == "E'it\\'s a \\\\ \"test\"\n'",
              "selftest: sql_literal escapes quotes and backslashes")
    return tap.finish()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("\n\n".join(__doc__.strip().split("\n\n")[:2]), file=sys.stderr)
        return 2
    if argv[1] == "--selftest":
        return selftest()
    return run_against(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
