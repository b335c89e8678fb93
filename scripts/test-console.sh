#!/usr/bin/env bash
# scripts/test-console.sh: test the operator console (console/) in a real
# browser against a throwaway cluster.
#
#   bash scripts/test-console.sh        (as root)
#
# Assumes the extension is already built and installed (`make install`).
# Installs what is missing: chromium and postgresql-15-cron (the cluster of
# lib.sh preloads pg_cron) with apt, node/npm with apt when there is no node,
# and `npm ci` in console/ (with the dev dependency puppeteer-core) when its
# node_modules does not come from package-lock.json with dev dependencies.
# Starts its own cluster as the postgres OS user in a mktemp directory on a
# free port (55800 or the next free one; ORCH_CONSOLE_TEST_PORT to choose),
# creates database orch_console with CREATE EXTENSION orchestrator, loads
# console/test/fixture.sql (roles, queues, tasks in every state, dead
# letters, a workflow with runs waiting at approvals; all through the SQL
# API), starts four consoles on free ports (as console_admin; the same
# read-only; as console_reader; as console_acme, bound to tenant acme), and
# runs console/test/browser.js: headless Chromium through puppeteer-core.
# It takes a screenshot of each page (1280x800) into its temp directory;
# ORCH_CONSOLE_SHOTS=docs/console (any directory) keeps them there instead,
# which is how the README's pictures are refreshed.
#
# One line per test, "PASS name" or "FAIL name" (a failure prints why), then
# "N passed, N failed"; exits non-zero when anything failed or nothing ran.
# The consoles and the cluster are stopped at exit; the directory is removed
# unless something failed or ORCH_TEST_KEEP=1.
set -uo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PASSED=0
FAILED=0
BROWSER_TIMEOUT=${ORCH_CONSOLE_TEST_TIMEOUT:-300}   # seconds for the browser tests

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
log "console tests in $ORCH_REPO/console"

# --------------------------------------------------------------------------
# What the tests need
# --------------------------------------------------------------------------
if ! APT_WHAT="console test packages" apt_install_missing postgresql-15 postgresql-15-cron chromium; then
    fail "setup (apt: chromium, postgresql-15-cron)"
    finish
fi
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
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
# npm ci (with the dev dependencies) when node_modules does not come from
# this package-lock.json; scripts/console.sh installs without them.
lock_sum=$(sha256sum console/package-lock.json | cut -d' ' -f1)
stamp=console/node_modules/.orch-lock-sha256
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum full" ]; then
    log "npm ci in console/"
    if ! (cd console && npm ci --no-audit --no-fund --loglevel=error); then
        fail "setup (npm ci in console/)"
        finish
    fi
    echo "$lock_sum full" >"$stamp"
fi

# --------------------------------------------------------------------------
# Throwaway cluster
# --------------------------------------------------------------------------
TESTROOT=$(mktemp -d /tmp/orch-console.XXXXXX)
chmod 755 "$TESTROOT"
CLUSTER=$TESTROOT/pg
PORT=${ORCH_CONSOLE_TEST_PORT:-55800}
if [ -z "${ORCH_CONSOLE_TEST_PORT:-}" ]; then
    while port_in_use "$PORT"; do
        PORT=$((PORT + 1))
    done
fi
CONSOLE_PIDS=()

cleanup() {
    local rc=$? p
    for p in "${CONSOLE_PIDS[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${CONSOLE_PIDS[@]}"; do
        wait "$p" 2>/dev/null
    done
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
[ -n "${ORCH_CONSOLE_TEST_PORT:-}" ] && fixed=1
if ! test_cluster_start "$CLUSTER" "$PORT" "$fixed" orch_console "$TESTROOT/cluster.log"; then
    fail "setup (cluster and database orch_console)"
    finish
fi
SOCK=$PGHOST
SHOTS_DIR=${ORCH_CONSOLE_SHOTS:-$TESTROOT/shots}
case $SHOTS_DIR in /*) ;; *) SHOTS_DIR=$ORCH_REPO/$SHOTS_DIR ;; esac
log "cluster on port $PORT, database orch_console, orchestrator $(qv orch_console "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")"
if ! q -d orch_console -f console/test/fixture.sql >"$TESTROOT/fixture.log" 2>&1; then
    sed 's/^/    | /' "$TESTROOT/fixture.log" | tail -n 40
    fail "setup (console/test/fixture.sql)"
    finish
fi
log "fixture loaded: $(qv orch_console "SELECT count(*) FROM orch_tasks") tasks, $(qv orch_console "SELECT count(*) FROM orch_runs") runs"

# --------------------------------------------------------------------------
# Consoles, each on a free port
# --------------------------------------------------------------------------
next_port=${ORCH_CONSOLE_TEST_HTTP_PORT:-18089}
# free_port: sets FREE_PORT to the next port nobody listens on
free_port() {
    while port_in_use "$next_port"; do next_port=$((next_port + 1)); done
    FREE_PORT=$next_port
    next_port=$((next_port + 1))
}
ENC_SOCK=$(node -e 'process.stdout.write(encodeURIComponent(process.argv[1]))' "$SOCK")
dburl() { echo "postgresql://$1@${ENC_SOCK}:${PORT}/orch_console"; }

# start_console NAME ROLE [FLAGS...]: start one in the background; sets
# CONSOLE_PORT.  The default host (loopback) is left alone on purpose.
start_console() {
    local name=$1 role=$2 port
    shift 2
    free_port
    port=$FREE_PORT
    (cd console && exec env -u ORCH_CONSOLE_HOST -u ORCH_CONSOLE_READONLY \
        ORCH_CONSOLE_DB="$(dburl "$role")" ORCH_CONSOLE_PORT="$port" node src/server.js "$@") \
        >"$TESTROOT/console-$name.log" 2>&1 &
    CONSOLE_PIDS+=($!)
    CONSOLE_PORT=$port
}
# wait_console NAME PORT: poll (for up to 60 s) until it answers
wait_console() {
    local i
    for ((i = 0; i < 300; i++)); do
        grep -q 'listening on' "$TESTROOT/console-$1.log" 2>/dev/null \
            && (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
        sleep 0.2
    done
    sed 's/^/    | /' "$TESTROOT/console-$1.log"
    return 1
}

start_console admin console_admin;               P_ADMIN=$CONSOLE_PORT
start_console readonly console_admin --readonly; P_RO=$CONSOLE_PORT
start_console reader console_reader;             P_READER=$CONSOLE_PORT
start_console acme console_acme;                 P_ACME=$CONSOLE_PORT
for c in "admin $P_ADMIN" "readonly $P_RO" "reader $P_READER" "acme $P_ACME"; do
    set -- $c
    if ! wait_console "$1" "$2"; then
        fail "setup (console $1 on port $2 does not answer)"
        finish
    fi
done
log "consoles: admin :$P_ADMIN, read-only :$P_RO, reader :$P_READER, acme :$P_ACME"

# Loopback by default: the console started without --host listens on
# 127.0.0.1 only.
listen=$(ss -Hltn "sport = :$P_ADMIN" 2>/dev/null | awk '{print $4}' | sort -u | tr '\n' ' ')
if [ "$listen" = "127.0.0.1:$P_ADMIN " ]; then
    pass "binds-loopback-by-default"
else
    echo "    | listening on: ${listen:-nothing found by ss}"
    fail "binds-loopback-by-default"
fi

# --------------------------------------------------------------------------
# The browser tests
# --------------------------------------------------------------------------
out=$TESTROOT/browser.out
(cd console && CONSOLE_URL="http://127.0.0.1:$P_ADMIN" CONSOLE_RO_URL="http://127.0.0.1:$P_RO" \
    CONSOLE_READER_URL="http://127.0.0.1:$P_READER" CONSOLE_ACME_URL="http://127.0.0.1:$P_ACME" \
    CHROMIUM="$CHROMIUM" SHOTS="$SHOTS_DIR" \
    timeout --kill-after=10 "$BROWSER_TIMEOUT" node test/browser.js) </dev/null >"$out" 2>&1
rc=$?
cat "$out"
PASSED=$((PASSED + $(grep -c '^PASS ' "$out")))
FAILED=$((FAILED + $(grep -c '^FAIL ' "$out")))
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
    [ $rc -eq 124 ] && echo "    (timed out after ${BROWSER_TIMEOUT}s)"
    fail "browser tests (console/test/browser.js exited $rc)"
fi

finish
