#!/usr/bin/env bash
# scripts/test-clients.sh: run the tests of the worker clients in clients/
# (Python on psycopg 3, Node on pg) against a throwaway cluster.
#
#   bash scripts/test-clients.sh        (as root)
#
# Assumes the extension is already built and installed (`make install`).
# Installs what is missing: python3-psycopg, python3-venv, python3-build and
# postgresql-15-cron (the cluster of lib.sh preloads pg_cron) with apt,
# node/npm with apt when there is no node, and `npm ci` in clients/node when
# its node_modules does not match package-lock.json.  Starts its own cluster
# as the postgres OS user in a mktemp directory on a free port (55700 or the
# next free one; ORCH_CLIENTS_PORT to choose), creates database orch_clients
# with CREATE EXTENSION orchestrator, then:
#   packages   runs the install blocks of clients/*/README.md as written, in a
#              copy of clients/ with HOME in the temp directory: the Python
#              client built as a wheel and an sdist (python3 -m build
#              --no-isolation) and installed into a fresh venv, the Node
#              client packed (npm pack) and installed into a fresh app from
#              the tarball (npm fetches pg); the Python package's types
#              checked with Debian's mypy against the venv (py.typed), the
#              Node package's declarations with tsc (npm fetches typescript
#              into the app): a typed use passes, a mistyped one does not
#   clients/python/tests/test_*.py   python3 -m unittest, with the venv's
#                                    python and the installed package
#   clients/node/test/*.test.js      node --test, against the installed
#                                    package (ORCH_CLIENT_MODULE)
#   readme     the README examples as written (producer, worker, asyncio
#              worker), against this database, each worker stopped by SIGTERM
# One line per file, "PASS name" or "FAIL name" (a failure prints the file's
# output), then "N passed, N failed"; exits non-zero when anything failed or
# nothing ran.  The cluster is stopped at exit; its directory is removed
# unless something failed or ORCH_TEST_KEEP=1.
set -uo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PASSED=0
FAILED=0
FILE_TIMEOUT=${ORCH_CLIENTS_FILE_TIMEOUT:-150}   # seconds per test file

pass() { PASSED=$((PASSED + 1)); echo "PASS $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $1"; }

finish() {
    if [ $((PASSED + FAILED)) -eq 0 ]; then
        echo "no test ran: that is a failure"
    fi
    echo "$PASSED passed, $FAILED failed"
    if [ "$FAILED" -gt 0 ] || [ $((PASSED + FAILED)) -eq 0 ]; then
        exit 1
    fi
    exit 0
}

require_root
cd "$ORCH_REPO" || exit 1
log "client tests in $ORCH_REPO/clients"

# --------------------------------------------------------------------------
# What the tests need
# --------------------------------------------------------------------------
if ! APT_WHAT="client test packages" apt_install_missing postgresql-15 postgresql-15-cron python3-psycopg \
        python3-venv python3-build mypy; then
    fail "setup (apt: python3-psycopg, python3-venv, python3-build, mypy, postgresql-15-cron)"
    finish
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if ! APT_WHAT="node" apt_install_missing nodejs npm; then
        fail "setup (apt: nodejs npm)"
        finish
    fi
fi
control="$("$PG_CONFIG" --sharedir)/extension/orchestrator.control"
if [ ! -f "$control" ]; then
    fail "setup (the extension is not installed: no $control; run make install first)"
    finish
fi
# npm ci when node_modules does not come from this package-lock.json
lock_sum=$(sha256sum clients/node/package-lock.json | cut -d' ' -f1)
stamp=clients/node/node_modules/.orch-lock-sha256
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
    log "npm ci in clients/node"
    if ! (cd clients/node && npm ci --no-audit --no-fund --loglevel=error); then
        fail "setup (npm ci in clients/node)"
        finish
    fi
    echo "$lock_sum" >"$stamp"
fi

# --------------------------------------------------------------------------
# Throwaway cluster
# --------------------------------------------------------------------------
TESTROOT=$(mktemp -d /tmp/orch-clients.XXXXXX)
chmod 755 "$TESTROOT"
CLUSTER=$TESTROOT/pg
PORT=${ORCH_CLIENTS_PORT:-55700}
if [ -z "${ORCH_CLIENTS_PORT:-}" ]; then
    while port_in_use "$PORT"; do
        PORT=$((PORT + 1))
    done
fi

cleanup() {
    local rc=$?
    cluster_stop "$CLUSTER" >/dev/null
    if [ "${ORCH_TEST_KEEP:-0}" = 1 ] || [ "$FAILED" -gt 0 ]; then
        echo "(logs kept in $TESTROOT)"
    else
        rm -rf "$TESTROOT"
    fi
    return $rc
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM

fixed=0
[ -n "${ORCH_CLIENTS_PORT:-}" ] && fixed=1
if ! test_cluster_start "$CLUSTER" "$PORT" "$fixed" orch_clients "$TESTROOT/cluster.log"; then
    fail "setup (cluster and database orch_clients)"
    finish
fi
log "cluster on port $PORT, database orch_clients, orchestrator $(qv orch_clients "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")"

# run_file NAME LOG DIR COMMAND...: run one test file, PASS/FAIL it
run_file() {
    local name=$1 out=$2 dir=$3 rc
    shift 3
    (cd "$dir" && timeout --kill-after=10 "$FILE_TIMEOUT" "$@") </dev/null >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        pass "$name"
    else
        [ $rc -eq 124 ] && echo "    (timed out after ${FILE_TIMEOUT}s)"
        sed 's/^/    | /' "$out" | tail -n 120
        fail "$name"
    fi
}

# --------------------------------------------------------------------------
# The packages, built and installed as the READMEs say
# --------------------------------------------------------------------------
# example FILE NAME: the code block after "<!-- example: NAME -->" in FILE
example() {
    awk -v tag="<!-- example: $2 -->" '
        $0 == tag { found = 1; next }
        found && /^```/ { if (inside) exit; inside = 1; next }
        found && inside { print }' "$1"
}
export ORCH_CLIENT_INSTALLED=1
PKGROOT=$TESTROOT/pkg
HOMEDIR=$TESTROOT/home
mkdir -p "$PKGROOT/clients" "$HOMEDIR"
tar -C clients --exclude=node_modules --exclude=dist --exclude=build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude='*.tgz' -cf - python node | tar -C "$PKGROOT/clients" -xf -
# run_block NAME LOG SCRIPT: run a README block with bash in the copy, as
# root with Debian's python3 first in PATH and HOME in the temp directory
run_block() {
    local name=$1 out=$2
    (cd "${BLOCK_DIR:-$PKGROOT}" && HOME=${BLOCK_HOME:-$HOMEDIR} PATH=/usr/bin:/bin:/usr/sbin:/sbin:$(dirname "$(command -v node)") \
        timeout --kill-after=10 600 bash -euo pipefail -c "$3") </dev/null >"$out" 2>&1
}
VENV_PY=$HOMEDIR/venvs/app/bin/python
APP=$HOMEDIR/app
if run_block python-install "$TESTROOT/python_install.out" "$(example clients/python/README.md install)" \
    && ls "$PKGROOT"/clients/python/dist/orchestrator-client-*.tar.gz >/dev/null \
    && "$VENV_PY" - "$PKGROOT"/clients/python/dist/orchestrator_client-*.whl >>"$TESTROOT/python_install.out" 2>&1 <<'PY'
import os, sys, zipfile
import orchestrator_client
names = zipfile.ZipFile(sys.argv[1]).namelist()
for f in ("orchestrator_client/py.typed", "orchestrator_client/aio.py", "orchestrator_client/core.py"):
    assert f in names, f"{f} not in the wheel: {names}"
where = os.path.dirname(orchestrator_client.__file__)
assert where.startswith(sys.prefix), f"imported from {where}, not the venv {sys.prefix}"
assert os.path.exists(os.path.join(where, "py.typed"))
print("installed in", where)
PY
then
    pass "python/package-install"
    PY=$VENV_PY
else
    sed 's/^/    | /' "$TESTROOT/python_install.out" | tail -n 60
    fail "python/package-install"
    PY=
fi

# py.typed: mypy reads the package installed in the venv
if [ -n "$PY" ]; then
    mkdir -p "$TESTROOT/typed"
    cat >"$TESTROOT/typed/use.py" <<'PY'
import asyncio
from typing import Any, Dict

from orchestrator_client import AsyncWorker, Client, NonRetryableError, Task, Worker, WorkerStats


def handler(task: Task) -> Dict[str, Any]:
    if not task.payload:
        raise NonRetryableError("empty", retry_after=5)
    task.on_complete(lambda cur: cur.execute("SELECT 1"))
    return {"id": task.id}


async def ahandler(task: Task) -> Dict[str, Any]:
    return {"attempt": task.attempt}


def main() -> None:
    stats: WorkerStats = Worker("dbname=app", "q", handler, concurrency=2, lease="30 seconds").run()
    with Client("dbname=app") as c:
        tid: int = c.enqueue("q", {"a": 1}, priority=1)
        c.cancel(tid, "why")
    astats: WorkerStats = asyncio.run(AsyncWorker("dbname=app", "q", ahandler, concurrency=10).run())
    print(stats, astats)
PY
    printf 'from orchestrator_client import Worker
Worker("dbname=app", "q", lambda t: None, concurrency="four")
' \
        >"$TESTROOT/typed/mistyped.py"
    if (cd "$TESTROOT/typed" && mypy --python-executable "$PY" --no-incremental use.py) >"$TESTROOT/python_types.out" 2>&1 \
        && ! (cd "$TESTROOT/typed" && mypy --python-executable "$PY" --no-incremental mistyped.py) >>"$TESTROOT/python_types.out" 2>&1 \
        && grep -q 'mistyped.py:2: error: Argument "concurrency"' "$TESTROOT/python_types.out"; then
        pass "python/typed"
    else
        sed 's/^/    | /' "$TESTROOT/python_types.out" | tail -n 40
        fail "python/typed"
    fi
fi

NODE_MODULE=
if run_block node-install "$TESTROOT/node_install.out" "$(example clients/node/README.md install)" \
    && [ -f "$APP/node_modules/orchestrator-client/index.d.ts" ] \
    && (cd "$APP" && node -e "require.resolve('pg', { paths: [require.resolve('orchestrator-client')] })") \
        >>"$TESTROOT/node_install.out" 2>&1; then
    pass "node/package-install"
    NODE_MODULE=$APP/node_modules/orchestrator-client
else
    sed 's/^/    | /' "$TESTROOT/node_install.out" | tail -n 60
    fail "node/package-install"
fi

# The README's own block (section Worker clients), in a copy of its own.
mkdir -p "$TESTROOT/pkg2/clients" "$TESTROOT/home2"
tar -C "$PKGROOT/clients" --exclude=node_modules --exclude=dist --exclude=build --exclude='*.egg-info' \
    --exclude='*.tgz' -cf - python node | tar -C "$TESTROOT/pkg2/clients" -xf -
if BLOCK_DIR=$TESTROOT/pkg2 BLOCK_HOME=$TESTROOT/home2 run_block readme-install "$TESTROOT/readme_install.out" \
        "$(example README.md clients-install)" \
    && "$TESTROOT/home2/venvs/app/bin/python" -c 'import orchestrator_client, sys; assert orchestrator_client.__file__.startswith(sys.prefix)' \
        >>"$TESTROOT/readme_install.out" 2>&1 \
    && [ -f "$TESTROOT/pkg2/clients/node/orchestrator-client-0.2.0.tgz" ]; then
    pass "readme/clients-install"
else
    sed 's/^/    | /' "$TESTROOT/readme_install.out" | tail -n 40
    fail "readme/clients-install"
fi

# The declarations: a typed use compiles, a mistyped one does not.
if [ -n "$NODE_MODULE" ]; then
    cat >"$APP/typed.ts" <<'TS'
import { Worker, Client, Task, NonRetryableError, WorkerStats } from 'orchestrator-client';
const w = new Worker<{ to: string }>({
  queues: { emails: 2, sms: 1 }, lease: '30 seconds', wait: 5000,
  handler: async (task: Task<{ to: string }>) => {
    if (!task.payload.to) throw new NonRetryableError('no to', { retryAfter: 10 });
    task.onComplete(async (c) => { await c.query('SELECT 1'); });
    return { sent: task.payload.to.length };
  },
});
const c = new Client('postgres://localhost/app');
async function main(): Promise<WorkerStats> {
  const id: string = await c.enqueue('emails', { to: 'a@x' }, { priority: 1, correlationId: 'c' });
  await c.cancel(id, 'why');
  return w.run({ handleSignals: false });
}
void main;
TS
    cat >"$APP/mistyped.ts" <<'TS'
import { Worker } from 'orchestrator-client';
new Worker({ queue: 'emails', concurrency: 'four', handler: async () => null });
TS
    if (cd "$APP" && HOME=$HOMEDIR npm install --no-save --no-audit --no-fund --loglevel=error typescript@5 \
            && ./node_modules/.bin/tsc --noEmit --strict --lib es2022,dom typed.ts) >"$TESTROOT/node_types.out" 2>&1 \
        && ! (cd "$APP" && ./node_modules/.bin/tsc --noEmit --strict --lib es2022,dom mistyped.ts) >>"$TESTROOT/node_types.out" 2>&1 \
        && grep -q "mistyped.ts(2," "$TESTROOT/node_types.out"; then
        pass "node/typescript-declarations"
    else
        sed 's/^/    | /' "$TESTROOT/node_types.out" | tail -n 40
        fail "node/typescript-declarations"
    fi
fi

# --------------------------------------------------------------------------
# Python (the venv's python and the installed package)
# --------------------------------------------------------------------------
shopt -s nullglob
if [ -n "$PY" ]; then
    for f in clients/python/tests/test_*.py; do
        name=$(basename "$f" .py)
        PYTHONDONTWRITEBYTECODE=1 run_file "python/$name" "$TESTROOT/python_$name.out" \
            clients/python/tests "$PY" -m unittest -v "$name"
    done
fi

# --------------------------------------------------------------------------
# Node (node --test, against the installed package)
# --------------------------------------------------------------------------
if [ -n "$NODE_MODULE" ]; then
    for f in clients/node/test/*.test.js; do
        name=$(basename "$f" .test.js)
        ORCH_CLIENT_MODULE=$NODE_MODULE run_file "node/$name" "$TESTROOT/node_$name.out" \
            clients/node node --test "test/$name.test.js"
    done
fi

# --------------------------------------------------------------------------
# The README examples, as written
# --------------------------------------------------------------------------
# A published workflow 'release' for the producers' orch_start.
q -d orch_clients -c "SELECT orch_publish('release', orch_define('release',
    '{\"policies\": {\"queue\": \"release_q\"}, \"steps\": [{\"step_id\": \"ship\", \"handler\": \"ship\"}]}'))" \
    >/dev/null
# a URL (pg reads URLs, not libpq's key=value strings); the socket directory percent-encoded
DATABASE_URL="postgresql://postgres@$(node -e 'process.stdout.write(encodeURIComponent(process.argv[1]))' "$PGHOST"):$PORT/orch_clients"
export DATABASE_URL
# wait_sql SQL: until the query returns t (60 s)
wait_sql() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ "$(qv orch_clients "$1")" = t ] && return 0
        sleep 0.2
    done
    return 1
}
# example_worker NAME LOG QUEUE NEEDLE COMMAND...: run a README worker in
# the background until every open task of QUEUE is done, then SIGTERM it;
# passes when it exits 0 and logged NEEDLE
example_worker() {
    local name=$1 out=$2 queue=$3 needle=$4 pid rc
    shift 4
    ("$@") </dev/null >"$out" 2>&1 &
    pid=$!
    if wait_sql "SELECT count(*) = 0 FROM orch_tasks WHERE queue = '$queue' AND state IN ('queued', 'executing')"; then
        kill -TERM "$pid"
        wait "$pid"
        rc=$?
    else
        echo "    (tasks of $queue still open after 60 s)"
        kill -KILL "$pid"
        wait "$pid"
        rc=99
    fi
    if [ $rc -eq 0 ] && grep -q -- "$needle" "$out"; then
        pass "$name"
    else
        echo "    (exit $rc; wanted a line with: $needle)"
        sed 's/^/    | /' "$out" | tail -n 40
        fail "$name"
    fi
}
EX=$TESTROOT/examples
mkdir -p "$EX"
if [ -n "$PY" ]; then
    example clients/python/README.md producer >"$EX/producer.py"
    example clients/python/README.md worker >"$EX/worker.py"
    example clients/python/README.md async-worker >"$EX/async_worker.py"
    if (cd "$EX" && timeout 60 "$PY" producer.py) >"$TESTROOT/readme_py_producer.out" 2>&1 \
        && [ "$(qv orch_clients "SELECT count(*) FROM orch_tasks WHERE queue = 'emails' AND idempotency_key = 'welcome-42'")" = 1 ] \
        && [ "$(qv orch_clients "SELECT count(*) FROM orch_runs WHERE idempotency_key = 'release-web-1.4.2'")" = 1 ]; then
        pass "readme/python-producer"
    else
        sed 's/^/    | /' "$TESTROOT/readme_py_producer.out" | tail -n 40
        fail "readme/python-producer"
    fi
    example_worker readme/python-worker "$TESTROOT/readme_py_worker.out" emails \
        "queue emails, concurrency 4, lease the queue's, claims wait 5 s" bash -c "cd '$EX' && exec '$PY' worker.py"
    qv orch_clients "SELECT orch_enqueue('reports', '{\"report\": \"weekly\"}')" >/dev/null
    example_worker readme/python-async-worker "$TESTROOT/readme_py_async.out" reports \
        "queue reports, concurrency 20" bash -c "cd '$EX' && exec '$PY' async_worker.py"
    if [ "$(qv orch_clients "SELECT result ->> 'rows' FROM orch_tasks WHERE queue = 'reports' AND state = 'completed' LIMIT 1")" != 42 ]; then
        fail "readme/python-async-worker (no result)"
    fi
fi
if [ -n "$NODE_MODULE" ]; then
    example clients/node/README.md producer >"$APP/producer.js"
    example clients/node/README.md worker >"$APP/worker.js"
    if (cd "$APP" && timeout 60 node producer.js) >"$TESTROOT/readme_node_producer.out" 2>&1; then
        pass "readme/node-producer"
    else
        sed 's/^/    | /' "$TESTROOT/readme_node_producer.out" | tail -n 40
        fail "readme/node-producer"
    fi
    qv orch_clients "SELECT orch_enqueue('emails', '{\"to\": \"node@example.com\"}')" >/dev/null
    example_worker readme/node-worker "$TESTROOT/readme_node_worker.out" emails \
        "queue emails, concurrency 4, lease the queue's, claims wait 5000 ms" bash -c "cd '$APP' && exec node worker.js"
fi

finish
