#!/usr/bin/env bash
# test/setup_rerun.sh: scripts/setup.sh can be run again without losing data.
#
#   bash test/setup_rerun.sh        (as root; prints ok / not ok lines)
#
# Runs scripts/setup.sh against a throwaway cluster (ORCH_CLUSTER_DIR in a
# temp dir, ORCH_PORT a free port from 56499 or $ORCH_SETUP_RERUN_PORT; the
# repository's .cluster is never used):
#   1. first run: creates the cluster, the extension at default_version and
#      the pg_cron maintenance job; the demo passes;
#   2. a marker task is enqueued with psql; second run (same version: the
#      extension is left alone): the marker is still there with the same id,
#      payload and state, every earlier task too, the demo passes again
#      against the existing data, and there is still exactly one maintenance
#      job;
#   3. the extension is re-created at 0.1.0 with another marker; third run:
#      the extension is updated to default_version and the marker survives.
# Then the cluster is stopped (bash scripts/setup.sh stop) and its directory
# removed.  Exits non-zero when any check failed.
set -uo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"

require_root

N=0
FAILS=0
ok()     { N=$((N + 1)); printf 'ok %d - %s\n' "$N" "$1"; }
not_ok() { N=$((N + 1)); FAILS=$((FAILS + 1)); printf 'not ok %d - %s\n' "$N" "$1"; }
# is GOT WANT DESCRIPTION
is() {
    if [ "$1" = "$2" ]; then
        ok "$3"
    else
        not_ok "$3"
        printf '#   got:      %s\n#   expected: %s\n' "$1" "$2"
    fi
}

WORK=$(mktemp -d /tmp/orch-setup-rerun.XXXXXX)
chmod 755 "$WORK"
export ORCH_CLUSTER_DIR=$WORK/cluster
PORT=${ORCH_SETUP_RERUN_PORT:-56499}
while port_in_use "$PORT"; do PORT=$((PORT + 1)); done
export ORCH_PORT=$PORT
# setup.sh finds its own connection settings; none may leak in.
unset PGHOST PGPORT PGUSER PGDATABASE PGSERVICE ORCH_DB

cleanup() {
    bash "$ORCH_REPO/scripts/setup.sh" stop >"$WORK/stop.log" 2>&1 \
        || { echo "# setup.sh stop failed:"; sed 's/^/#   /' "$WORK/stop.log"; }
    cluster_stop "$ORCH_CLUSTER_DIR" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "# interrupted"; exit 130' INT TERM

# Never let setup.sh near another cluster: it must honour ORCH_CLUSTER_DIR.
if [ "$(setup_cluster_dir)" != "$ORCH_CLUSTER_DIR" ]; then
    not_ok "scripts/lib.sh setup_cluster_dir honours ORCH_CLUSTER_DIR"
    exit 1
fi
echo "# cluster $ORCH_CLUSTER_DIR, port $PORT"

WANT=$(sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" \
           "$ORCH_REPO/orchestrator.control")
JOB="orchestrator-maintenance:orchestrator"

# run_setup N: bash scripts/setup.sh, its log kept in $WORK/setupN.log.
run_setup() {
    local n=$1 rc=0 log=$WORK/setup$1.log
    bash "$ORCH_REPO/scripts/setup.sh" </dev/null >"$log" 2>&1 || rc=$?
    if [ $rc = 0 ] && grep -q '^setup: OK' "$log" && grep -q '^demo: OK' "$log"; then
        ok "setup.sh run $n exits 0, its demo passed"
    else
        not_ok "setup.sh run $n exits 0, its demo passed (exit $rc)"
        tail -n 60 "$log" | sed 's/^/#   /'
    fi
}

# Queries against the setup cluster (once it has started).
sqlv() {
    "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
        -h "$(cluster_socket_dir "$ORCH_CLUSTER_DIR")" -p "$PORT" -U postgres -d orchestrator -c "$1" 2>&1
}

# --- 1. first run ------------------------------------------------------------
run_setup 1
is "$(sqlv "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")" "$WANT" \
   "run 1 created the extension at default_version $WANT"
is "$(sqlv "SELECT count(*) FROM cron.job WHERE jobname = '$JOB' AND database = 'orchestrator'
              AND command LIKE '%.orch_maintain(1000)' AND active")" 1 \
   "run 1 scheduled maintenance: pg_cron job $JOB in database orchestrator"

# --- 2. a marker, then the same version again ---------------------------------
MARK="setup-rerun-$$-$RANDOM"
ID=$(sqlv "SELECT orch_enqueue('setup-rerun', jsonb_build_object('marker', '$MARK'))")
PAYLOAD=$(sqlv "SELECT payload::text FROM orch_tasks WHERE task_id = '$ID'")
is "$PAYLOAD" "{\"marker\": \"$MARK\"}" "marker task #$ID enqueued with psql"
BEFORE=$(sqlv "SELECT count(*) || ' ' || max(id) FROM orch.tasks")
read -r COUNT_BEFORE MAX_BEFORE <<<"$BEFORE"
JOBID=$(sqlv "SELECT jobid FROM cron.job WHERE jobname = '$JOB'")

run_setup 2
is "$(sqlv "SELECT task_id || ' ' || payload::text || ' ' || state FROM orch_tasks WHERE task_id = '$ID'")" \
   "$ID {\"marker\": \"$MARK\"} queued" \
   "run 2 kept the marker task (same id, same payload, still queued)"
is "$(sqlv "SELECT count(*) FROM orch.tasks WHERE id <= '$MAX_BEFORE'")" "$COUNT_BEFORE" \
   "run 2 kept all $COUNT_BEFORE earlier tasks (the first demo's included)"
is "$(sqlv "SELECT count(*) > '$COUNT_BEFORE' FROM orch.tasks")" t \
   "run 2's demo added its tasks to the existing data"
is "$(sqlv "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")" "$WANT" \
   "run 2 left the extension at $WANT"
is "$(sqlv "SELECT count(*) || ' ' || min(jobid) FROM cron.job WHERE command LIKE '%orch_maintain%'")" \
   "1 $JOBID" "run 2 kept exactly one maintenance job (the same job $JOBID)"

# --- 3. an older version is updated, not re-created ---------------------------
sqlv "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = '$JOB'" >/dev/null
OLD=$(sqlv "DROP EXTENSION orchestrator CASCADE; CREATE EXTENSION orchestrator VERSION '0.1.0';
            SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")
is "$OLD" 0.1.0 "extension re-created at 0.1.0 for the update path"
# the 0.1.0 schema's task, written as its library did (today's library refuses
# that schema until the update: 55000)
is "$(sqlv "SELECT orch_enqueue('setup-rerun', '{}')" | head -n 1)" \
   "ERROR:  the installed orchestrator schema (version 0.1.0) is older than this library serves" \
   "the library refuses the 0.1.0 schema before the update"
ID2=$(sqlv "SET session_replication_role = replica;
            INSERT INTO orch.tasks (queue, state, payload, ready_at, reason_code)
            VALUES ('setup-rerun', 'queued', jsonb_build_object('marker', '$MARK-old'), now(), 'enqueued')
            RETURNING id")
run_setup 3
is "$(sqlv "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")" "$WANT" \
   "run 3 updated the extension 0.1.0 -> $WANT"
is "$(sqlv "SELECT task_id || ' ' || payload::text || ' ' || state FROM orch_tasks WHERE task_id = '$ID2'")" \
   "$ID2 {\"marker\": \"$MARK-old\"} queued" \
   "run 3 kept the marker task enqueued under 0.1.0"
is "$(sqlv "SELECT count(*) FROM cron.job WHERE jobname = '$JOB' AND database = 'orchestrator'")" 1 \
   "run 3 scheduled maintenance again"

# --- stop and remove -----------------------------------------------------------
if bash "$ORCH_REPO/scripts/setup.sh" stop >"$WORK/stop.log" 2>&1 && ! cluster_running "$ORCH_CLUSTER_DIR"; then
    ok "setup.sh stop stopped the cluster"
else
    not_ok "setup.sh stop stopped the cluster"
    sed 's/^/#   /' "$WORK/stop.log"
fi

echo "1..$N"
if [ "$FAILS" -gt 0 ]; then
    echo "# $FAILS of $N failed"
    exit 1
fi
echo "# all $N passed"
exit 0
