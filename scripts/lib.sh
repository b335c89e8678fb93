# scripts/lib.sh: shared helpers for setup.sh, demo.sh and test.sh.
#
# Source it from bash (`. scripts/lib.sh`).  Everything runs as root; the
# PostgreSQL server runs as the `postgres` OS user in a throwaway data
# directory on a non-default port.  The system cluster (port 5432) is never
# touched.

PG_BINDIR=/usr/lib/postgresql/15/bin
PG_CONFIG=$PG_BINDIR/pg_config
PGXS_DIR=/usr/lib/postgresql/15/lib/pgxs
PG_REGRESS=$PGXS_DIR/src/test/regress/pg_regress
PG_ISOLATION_REGRESS=$PGXS_DIR/src/test/isolation/pg_isolation_regress
PG_TEST_PERL=$PGXS_DIR/src/test/perl

ORCH_PACKAGES=(postgresql-15 postgresql-server-dev-15 postgresql-15-cron
               postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
               libipc-run-perl build-essential python3-prometheus-client)

# The repository root (this file lives in scripts/).
ORCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log()  { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die()  { printf 'error: %s\n' "$*" >&2; exit 1; }

# Run a command as the postgres OS user (with the PG 15 binaries first in
# PATH).  Works from a cwd postgres cannot read.
as_postgres() {
    (cd / && runuser -u postgres -- env PATH="$PG_BINDIR:$PATH" "$@")
}

require_root() {
    [ "$(id -u)" = 0 ] || die "run this as root (it installs packages and switches to the postgres user)"
}

# ensure_packages: install whatever of ORCH_PACKAGES is missing (one
# `apt-get update` first).  Debian's postgresql package may create and start
# a cluster on 5432; it is left alone.
ensure_packages() {
    local missing=() p status
    for p in "${ORCH_PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        case "$status" in
            *"install ok installed"*) ;;
            *) missing+=("$p") ;;
        esac
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages: all present"
        return 0
    fi
    require_root
    log "packages: installing ${missing[*]}"
    apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" </dev/null || die "apt-get install failed"
    for p in "${missing[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || die "package $p is still not installed"
    done
    id postgres >/dev/null 2>&1 || die "the postgres OS user does not exist after installing postgresql-15"
}

# build_install: compile the extension and install it into PostgreSQL 15.
# In CI (CI=true) warnings are errors.
build_install() {
    local copt=()
    if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then
        copt=(COPT=-Werror)
    fi
    log "build: make ${copt[*]} && make install (PG_CONFIG=$PG_CONFIG)"
    make -C "$ORCH_REPO" -s PG_CONFIG="$PG_CONFIG" "${copt[@]}" \
        || die "build failed (make)"
    make -C "$ORCH_REPO" -s PG_CONFIG="$PG_CONFIG" "${copt[@]}" install \
        || die "install failed (make install)"
}

# make_var NAME: the value of a variable of the repository's Makefile (after
# PGXS is included), e.g. REGRESS or ISOLATION_OPTS.
make_var() {
    make -s -C "$ORCH_REPO" --no-print-directory PG_CONFIG="$PG_CONFIG" \
        -f Makefile -f - "print-$1" <<'EOF'
print-%:
	@printf '%s\n' '$($*)'
EOF
}

# postgres_can_reach DIR: can the postgres OS user traverse DIR (and all of
# its parents)?
postgres_can_reach() {
    runuser -u postgres -- test -x "$1" 2>/dev/null
}

# cluster_home PREFERRED NAME: print PREFERRED when postgres can reach its
# parent, else a stable fallback /tmp/orchestrator-NAME-<hash of PREFERRED>.
cluster_home() {
    local preferred=$1 name=$2 parent hash
    parent=$(dirname "$preferred")
    if postgres_can_reach "$parent"; then
        printf '%s\n' "$preferred"
    else
        hash=$(printf '%s' "$preferred" | cksum | cut -d' ' -f1)
        printf '/tmp/orchestrator-%s-%s\n' "$name" "$hash"
    fi
}

# setup_cluster_dir: the cluster directory of setup.sh and demo.sh:
# $ORCH_CLUSTER_DIR when set (tests use a throwaway one), else .cluster/ of
# the repository (or its /tmp fallback, see cluster_home).
setup_cluster_dir() {
    if [ -n "${ORCH_CLUSTER_DIR:-}" ]; then
        case "$ORCH_CLUSTER_DIR" in
            /*) printf '%s\n' "${ORCH_CLUSTER_DIR%/}" ;;
            *)  die "ORCH_CLUSTER_DIR must be an absolute path, not '$ORCH_CLUSTER_DIR'" ;;
        esac
    else
        cluster_home "$ORCH_REPO/.cluster" setup
    fi
}

# Layout of a cluster directory DIR:
#   DIR/data          PGDATA
#   DIR/postgres.log  server log
#   DIR/socket        unix socket directory (or /tmp/orch-sock-<hash> when
#                     DIR is too long for a socket path)
cluster_socket_dir() {
    local dir=$1 hash
    # sun_path holds 107 bytes; ".s.PGSQL.NNNNN" plus "/socket/" is 22.
    if [ $(( ${#dir} + 30 )) -lt 100 ]; then
        printf '%s/socket\n' "$dir"
    else
        hash=$(printf '%s' "$dir" | cksum | cut -d' ' -f1)
        printf '/tmp/orch-sock-%s\n' "$hash"
    fi
}

cluster_running() {
    [ -f "$1/data/PG_VERSION" ] && as_postgres pg_ctl status -D "$1/data" >/dev/null 2>&1
}

# The port of a running cluster, from postmaster.pid (line 4).
cluster_port() {
    sed -n 4p "$1/data/postmaster.pid" 2>/dev/null
}

port_in_use() {
    local port=$1
    if command -v ss >/dev/null 2>&1; then
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
    fi
    # Also catch a unix socket of another cluster in a common place.
    [ -S "/var/run/postgresql/.s.PGSQL.$port" ] && return 0
    [ -S "/tmp/.s.PGSQL.$port" ] && return 0
    # Last resort: try to connect over TCP.
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    return 1
}

# cluster_start DIR PORT [CRON_DB] [fast]: initdb (once) and start a cluster
# as the postgres OS user ("fast": fsync off, for throwaway test clusters).
# Exports PGHOST, PGPORT, PGUSER for the caller.  When the cluster is already
# running it is reused (on the port it runs on).
cluster_start() {
    local dir=$1 port=$2 cron_db=${3:-orchestrator} fast=${4:-} sock durability=''
    if [ "$fast" = fast ]; then
        durability=$'fsync = off\nsynchronous_commit = off\nfull_page_writes = off'
    fi
    require_root
    sock=$(cluster_socket_dir "$dir")
    mkdir -p "$dir" "$sock"
    chown postgres:postgres "$dir" "$sock"
    chmod 711 "$dir"   # others may reach the socket, not list or read
    chmod 755 "$sock"
    if cluster_running "$dir"; then
        port=$(cluster_port "$dir")
        log "cluster: already running in $dir (port $port), reusing it"
    else
        if port_in_use "$port"; then
            die "port $port is already in use by another server; choose another port"
        fi
        if [ ! -f "$dir/data/PG_VERSION" ]; then
            log "cluster: initdb in $dir/data"
            rm -rf "$dir/data"
            as_postgres initdb -D "$dir/data" --auth=trust -U postgres \
                --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
                || { cat "$dir/initdb.log" >&2; die "initdb failed in $dir/data"; }
        fi
        # Settings of this script go in an included file, rewritten each
        # start so that the port and socket directory are always current.
        as_postgres sh -c "cat > '$dir/data/orchestrator.conf'" <<EOF
# written by scripts/lib.sh cluster_start; rewritten at every start
port = $port
listen_addresses = 'localhost'
unix_socket_directories = '$sock'
shared_preload_libraries = 'pg_cron'
cron.database_name = '$cron_db'
max_connections = 100
$durability
log_min_messages = warning
log_line_prefix = '%m [%p] %q%a '
EOF
        grep -q "^include_if_exists = 'orchestrator.conf'" "$dir/data/postgresql.conf" \
            || echo "include_if_exists = 'orchestrator.conf'" \
               | as_postgres sh -c "cat >> '$dir/data/postgresql.conf'"
        log "cluster: starting in $dir on port $port (log: $dir/postgres.log)"
        as_postgres pg_ctl start -w -t 60 -D "$dir/data" -l "$dir/postgres.log" >/dev/null \
            || { tail -n 30 "$dir/postgres.log" >&2 || true; die "pg_ctl start failed"; }
    fi
    export PGHOST=$sock PGPORT=$port PGUSER=postgres
    ORCH_CLUSTER_DIR=$dir
    # Wait until it accepts connections.
    local i
    for i in $(seq 1 60); do
        "$PG_BINDIR/pg_isready" -q -h "$PGHOST" -p "$PGPORT" && return 0
        sleep 0.5
    done
    die "cluster in $dir does not accept connections"
}

# cluster_stop DIR: fast shutdown, if running.
cluster_stop() {
    local dir=$1
    if cluster_running "$dir"; then
        log "cluster: stopping $dir"
        as_postgres pg_ctl stop -w -t 60 -m fast -D "$dir/data" >/dev/null \
            || as_postgres pg_ctl stop -w -m immediate -D "$dir/data" >/dev/null \
            || warn "could not stop the cluster in $dir"
    fi
}

# psql against the cluster of PGHOST/PGPORT: no psqlrc, stop on error.
q() {
    "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# qv DB SQL: the unaligned, tuples-only value of a query.
qv() {
    local db=$1; shift
    "$PG_BINDIR/psql" -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" -c "$*"
}
