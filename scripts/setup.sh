#!/usr/bin/env bash
# scripts/setup.sh: install what is missing, build and install orchestrator,
# start a local PostgreSQL 15 cluster with it, and run the demo.
#
#   bash scripts/setup.sh          set up (idempotent: reuses a running cluster)
#   bash scripts/setup.sh stop     stop that cluster
#
# The cluster lives in .cluster/ of the repository (or in
# /tmp/orchestrator-setup-<hash> when the postgres OS user cannot reach the
# repository; $ORCH_CLUSTER_DIR, an absolute path, overrides both), listens
# on port 5499 ($ORCH_PORT) and has database orchestrator with pg_cron and
# orchestrator installed, and orch_maintain() scheduled with pg_cron.  It
# never touches the system cluster on 5432.
#
# Running it again never destroys data: the extension is created when
# missing, updated (ALTER EXTENSION ... UPDATE) when older than the
# default_version of orchestrator.control, and otherwise left alone.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT=${ORCH_PORT:-5499}
DB=orchestrator
require_root
id postgres >/dev/null 2>&1 || ensure_packages
DIR=$(setup_cluster_dir)

if [ "${1:-}" = stop ]; then
    if cluster_running "$DIR"; then
        cluster_stop "$DIR"
    else
        echo "no cluster running in $DIR"
    fi
    exit 0
fi
[ $# -eq 0 ] || die "usage: bash scripts/setup.sh [stop]"

ensure_packages
build_install

if [ "$DIR" != "$ORCH_REPO/.cluster" ] && [ -z "${ORCH_CLUSTER_DIR:-}" ]; then
    log "note: the postgres user cannot reach $ORCH_REPO, so the cluster lives in $DIR"
fi
cluster_start "$DIR" "$PORT" "$DB"
PORT=$PGPORT

if [ "$(qv postgres "SELECT count(*) FROM pg_database WHERE datname = '$DB'")" = 0 ]; then
    log "database: creating $DB"
    q -d postgres -c "CREATE DATABASE $DB"
fi
# Keep what is there: create the extension when missing, update it when
# older than the version just built, never drop it (that would delete every
# task).
want=$(sed -n "s/^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" \
           "$ORCH_REPO/orchestrator.control")
[ -n "$want" ] || die "no default_version in $ORCH_REPO/orchestrator.control"
q -d "$DB" -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_cron"
have=$(qv "$DB" "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'")
if [ -z "$have" ]; then
    log "extension orchestrator: creating version $want"
    q -d "$DB" -c "CREATE EXTENSION orchestrator"
elif [ "$have" = "$want" ]; then
    log "extension orchestrator: version $have is installed, left as it is (data kept)"
elif [ "$(printf '%s\n%s\n' "$have" "$want" | sort -V | head -n 1)" = "$have" ]; then
    log "extension orchestrator: updating $have -> $want (data kept)"
    q -d "$DB" -c "ALTER EXTENSION orchestrator UPDATE"
else
    warn "extension orchestrator: version $have is newer than $want of orchestrator.control; left as it is"
fi
echo "    $(qv "$DB" "SELECT string_agg(extname || ' ' || extversion, ', ' ORDER BY extname) FROM pg_extension WHERE extname IN ('pg_cron', 'orchestrator')")"

# Maintenance (lease recovery, retention) every minute with pg_cron; the job
# is re-registered, not duplicated, on every run.
log "maintenance: SELECT orch_schedule_maintenance()"
job=$(qv "$DB" "SELECT orch_schedule_maintenance()")
q -d "$DB" -P footer=off \
  -c "SELECT jobid, jobname, schedule, database, command, active FROM cron.job WHERE jobid = $job"

# The commands printed below need the override too when one was given.
ENVP=
[ -z "${ORCH_CLUSTER_DIR:-}" ] || ENVP="ORCH_CLUSTER_DIR=$DIR "

demo_rc=0
echo
bash "$ORCH_REPO/scripts/demo.sh" || demo_rc=$?

cat <<EOF

======================================================================
orchestrator is running: PostgreSQL 15 on port $PORT, database $DB
  data directory:  $DIR/data   (log: $DIR/postgres.log)

Maintenance: pg_cron job $job ($(qv "$DB" "SELECT jobname FROM cron.job WHERE jobid = $job")) runs orch_maintain() every minute.
Running setup.sh again keeps every task (the extension is only updated).

Connect (as root or any OS user; the cluster trusts local connections):
  psql -h $PGHOST -p $PORT -U postgres $DB
  psql "host=localhost port=$PORT user=postgres dbname=$DB"

Try:
  SELECT orch_enqueue('hello', '{"say": "hi"}');
  SELECT * FROM orch_dequeue('hello', 'me');
  SELECT * FROM orch_tasks ORDER BY task_id DESC LIMIT 5;

Rerun the demo:   ${ENVP}bash scripts/demo.sh
Stop it:          ${ENVP}bash scripts/setup.sh stop
   (the same as:  runuser -u postgres -- $PG_BINDIR/pg_ctl stop -D $DIR/data)
Remove it:        ${ENVP}bash scripts/setup.sh stop && rm -rf $DIR
======================================================================
EOF
if [ "$demo_rc" != 0 ]; then
    echo "setup: the cluster is up, but the demo FAILED (exit $demo_rc)"
    exit "$demo_rc"
fi
echo "setup: OK"
