#!/usr/bin/env bash
# scripts/setup.sh: install what is missing, build and install orchestrator,
# start a local PostgreSQL 15 cluster with it, and run the demo.
#
#   bash scripts/setup.sh          set up (idempotent: reuses a running cluster)
#   bash scripts/setup.sh stop     stop that cluster
#
# The cluster lives in .cluster/ of the repository (or in
# /tmp/orchestrator-setup-<hash> when the postgres OS user cannot reach the
# repository), listens on port 5499 ($ORCH_PORT) and has database
# orchestrator with pg_cron and orchestrator installed.  It never touches the
# system cluster on 5432.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PORT=${ORCH_PORT:-5499}
DB=orchestrator
require_root
id postgres >/dev/null 2>&1 || ensure_packages
DIR=$(cluster_home "$ORCH_REPO/.cluster" setup)

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

if [ "$DIR" != "$ORCH_REPO/.cluster" ]; then
    log "note: the postgres user cannot reach $ORCH_REPO, so the cluster lives in $DIR"
fi
cluster_start "$DIR" "$PORT" "$DB"
PORT=$PGPORT

if [ "$(qv postgres "SELECT count(*) FROM pg_database WHERE datname = '$DB'")" = 0 ]; then
    log "database: creating $DB"
    q -d postgres -c "CREATE DATABASE $DB"
fi
# A fresh copy of the extension, from the SQL just installed.
log "extensions: pg_cron, orchestrator (re-created)"
q -d "$DB" -c "SET client_min_messages = warning" \
           -c "CREATE EXTENSION IF NOT EXISTS pg_cron" \
           -c "DROP EXTENSION IF EXISTS orchestrator CASCADE" \
           -c "CREATE EXTENSION orchestrator"
echo "    $(qv "$DB" "SELECT string_agg(extname || ' ' || extversion, ', ' ORDER BY extname) FROM pg_extension WHERE extname IN ('pg_cron', 'orchestrator')")"

demo_rc=0
echo
bash "$ORCH_REPO/scripts/demo.sh" || demo_rc=$?

cat <<EOF

======================================================================
orchestrator is running: PostgreSQL 15 on port $PORT, database $DB
  data directory:  $DIR/data   (log: $DIR/postgres.log)

Connect (as root or any OS user; the cluster trusts local connections):
  psql -h $PGHOST -p $PORT -U postgres $DB
  psql "host=localhost port=$PORT user=postgres dbname=$DB"

Try:
  SELECT orch_enqueue('hello', '{"say": "hi"}');
  SELECT * FROM orch_dequeue('hello', 'me');
  SELECT * FROM orch_tasks ORDER BY task_id DESC LIMIT 5;

Rerun the demo:   bash scripts/demo.sh
Stop it:          bash scripts/setup.sh stop
   (the same as:  runuser -u postgres -- $PG_BINDIR/pg_ctl stop -D $DIR/data)
Remove it:        bash scripts/setup.sh stop && rm -rf $DIR
======================================================================
EOF
if [ "$demo_rc" != 0 ]; then
    echo "setup: the cluster is up, but the demo FAILED (exit $demo_rc)"
    exit "$demo_rc"
fi
echo "setup: OK"
