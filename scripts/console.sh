#!/usr/bin/env bash
# scripts/console.sh: start the operator web console (console/) on
# http://127.0.0.1:8089.
#
#   bash scripts/console.sh [--host H] [--port N] [--db URL] [--readonly] [--allowed-host H:P]
#
# Flags and their variables (a flag wins): --host / ORCH_CONSOLE_HOST
# (127.0.0.1: loopback only), --port / ORCH_CONSOLE_PORT (8089), --db /
# ORCH_CONSOLE_DB (a connection string), --readonly / ORCH_CONSOLE_READONLY=1,
# --allowed-host / ORCH_CONSOLE_ALLOWED_HOSTS.  See console/README.md.
#
# Without --db or ORCH_CONSOLE_DB it connects to the cluster scripts/setup.sh
# started (in $ORCH_CLUSTER_DIR when set, as scripts/demo.sh finds it),
# database orchestrator, as user postgres.  Installs node/npm with apt when
# missing (as root) and runs `npm ci --omit=dev` in console/ when its
# node_modules does not come from console/package-lock.json.  Runs in the
# foreground; stop it with Ctrl-C.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONSOLE=$ORCH_REPO/console

usage() {
    sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

have_db=0
[ -n "${ORCH_CONSOLE_DB:-}" ] && have_db=1
for a in "$@"; do
    case "$a" in
        --db|--db=*) have_db=1 ;;
        -h|--help) usage; exit 0 ;;
    esac
done

# node and npm
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    APT_WHAT="node" apt_install_missing nodejs npm || die "node and npm are needed (apt-get install nodejs npm)"
fi

# Dependencies: npm ci when node_modules does not come from package-lock.json
# (a full install of the tests, with dev dependencies, also does).
lock_sum=$(sha256sum "$CONSOLE/package-lock.json" | cut -d' ' -f1)
stamp=$CONSOLE/node_modules/.orch-lock-sha256
if [ ! -f "$stamp" ] || [ "$(cut -d' ' -f1 "$stamp")" != "$lock_sum" ]; then
    log "npm ci --omit=dev in console/"
    (cd "$CONSOLE" && npm ci --omit=dev --no-audit --no-fund --loglevel=error) || die "npm ci failed in $CONSOLE"
    echo "$lock_sum prod" >"$stamp"
fi

# The setup cluster, unless a connection string was given.
if [ $have_db = 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        dir=$(setup_cluster_dir)
        cluster_running "$dir" \
            || die "no cluster running in $dir: run 'bash scripts/setup.sh' first, or pass --db postgresql://..."
    else
        dir=${ORCH_CLUSTER_DIR:-$ORCH_REPO/.cluster}
        [ -r "$dir/data/postmaster.pid" ] \
            || die "cannot find the setup cluster as $(id -un) (run as root, or pass --db postgresql://...)"
    fi
    sock=$(cluster_socket_dir "$dir")
    port=$(cluster_port "$dir")
    [ -n "$port" ] || die "cannot read the port of the cluster in $dir"
    # host = the socket directory, percent-encoded into the URL
    enc=$(node -e 'process.stdout.write(encodeURIComponent(process.argv[1]))' "$sock")
    export ORCH_CONSOLE_DB="postgresql://postgres@${enc}:${port}/orchestrator"
    log "database: the setup cluster in $dir (port $port), database orchestrator, user postgres"
fi

cd "$CONSOLE"
exec node src/server.js "$@"
