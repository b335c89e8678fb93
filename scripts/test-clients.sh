#!/usr/bin/env bash
# scripts/test-clients.sh: run the tests of the worker clients in clients/
# (Python on psycopg 3, Node on pg) against a throwaway cluster.
#
#   bash scripts/test-clients.sh        (as root)
#
# Assumes the extension is already built and installed (`make install`).
# Installs what is missing: python3-psycopg and postgresql-15-cron (the
# cluster of lib.sh preloads pg_cron) with apt, node/npm with apt when there
# is no node, and `npm ci` in clients/node when its node_modules does not
# match package-lock.json.  Starts its own cluster as the postgres OS user in
# a mktemp directory on a free port (55700 or the next free one;
# ORCH_CLIENTS_PORT to choose), creates database orch_clients with
# CREATE EXTENSION orchestrator, then runs each test file on its own:
#   clients/python/tests/test_*.py   python3 -m unittest (system python)
#   clients/node/test/*.test.js      node --test
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
if ! APT_WHAT="client test packages" apt_install_missing postgresql-15 postgresql-15-cron python3-psycopg; then
    fail "setup (apt: python3-psycopg, postgresql-15-cron)"
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
# Python (system python3, python3-psycopg)
# --------------------------------------------------------------------------
shopt -s nullglob
for f in clients/python/tests/test_*.py; do
    name=$(basename "$f" .py)
    PYTHONDONTWRITEBYTECODE=1 run_file "python/$name" "$TESTROOT/python_$name.out" \
        clients/python/tests /usr/bin/python3 -m unittest -v "$name"
done

# --------------------------------------------------------------------------
# Node (node --test)
# --------------------------------------------------------------------------
for f in clients/node/test/*.test.js; do
    name=$(basename "$f" .test.js)
    run_file "node/$name" "$TESTROOT/node_$name.out" clients/node node --test "test/$name.test.js"
done

finish
