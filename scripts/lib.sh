# scripts/lib.sh: shared helpers for setup.sh, demo.sh and test.sh.
#
# Source it from bash (`. scripts/lib.sh`).  Everything runs as root; the
# PostgreSQL server runs as the `postgres` OS user in a throwaway data
# directory on a non-default port.  The system cluster (port 5432) is never
# touched.

# ORCH_PG_BINDIR may name the bin directory of a relocated copy of the
# PostgreSQL 15 installation (its pg_config reports paths beside it), so that
# two checkouts can build, install and test side by side.
PG_BINDIR=${ORCH_PG_BINDIR:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PG_BINDIR/pg_config
PGXS_DIR=$(cd "$PG_BINDIR/../lib/pgxs" 2>/dev/null && pwd || echo /usr/lib/postgresql/15/lib/pgxs)
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

# apt_install_missing PKG...: install those of PKG... that are not installed
# (one `apt-get update` first, only when something is missing).  Returns
# non-zero, with a message, when that fails.
apt_install_missing() {
    local missing=() p status what=${APT_WHAT:-packages}
    for p in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        case "$status" in
            *"install ok installed"*) ;;
            *) missing+=("$p") ;;
        esac
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "$what: all present"
        return 0
    fi
    [ "$(id -u)" = 0 ] || { warn "installing ${missing[*]} needs root: run this as root"; return 1; }
    log "$what: installing ${missing[*]}"
    apt-get update -qq || { warn "apt-get update failed"; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" </dev/null || { warn "apt-get install failed"; return 1; }
    for p in "${missing[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || { warn "package $p is still not installed"; return 1; }
    done
}

# ensure_packages: install whatever of ORCH_PACKAGES is missing (one
# `apt-get update` first).  Debian's postgresql package may create and start
# a cluster on 5432; it is left alone.
ensure_packages() {
    apt_install_missing "${ORCH_PACKAGES[@]}" || die "could not install the packages"
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

# --------------------------------------------------------------------------
# Citus, built from the vendored source release (docs/citus.md)
# --------------------------------------------------------------------------
# Debian does not package Citus; CI has its source release beside the clone
# ($ORCH_REPO/../shared/vendor/, see its README.md).  A user's machine does
# not: t/050_citus.pl then skips with its reason.
ORCH_CITUS_VERSION=13.2.2
ORCH_CITUS_EXTVERSION=13.2-1
ORCH_CITUS_SHA256=dd2453caec20a830e5e63f1def5c5a98cb6f57ae510407cdcd800916fcdab430
ORCH_CITUS_BUILD_DEPS=(libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev patch)
ORCH_CITUS_PATCH=$ORCH_REPO/scripts/citus-13.2.2-pg15-have_createdb_privilege.patch

# citus_tarball: the path of the vendored Citus source release (it may not
# exist): $ORCH_CITUS_TARBALL, else ../shared/vendor/ beside the repository.
citus_tarball() {
    printf '%s\n' "${ORCH_CITUS_TARBALL:-$ORCH_REPO/../shared/vendor/citus-$ORCH_CITUS_VERSION.tar.gz}"
}

# citus_installed: is Citus $ORCH_CITUS_VERSION installed for this server
# (citus.control with default_version $ORCH_CITUS_EXTVERSION and citus.so,
# or a citus.so that reports $ORCH_CITUS_VERSION)?
citus_installed() {
    local control so
    control=$("$PG_CONFIG" --sharedir)/extension/citus.control
    so=$("$PG_CONFIG" --pkglibdir)/citus.so
    [ -f "$so" ] || return 1
    if [ -f "$control" ] \
       && grep -Eq "^[[:space:]]*default_version[[:space:]]*=[[:space:]]*'$ORCH_CITUS_EXTVERSION'" "$control"; then
        return 0
    fi
    grep -aq "Citus $ORCH_CITUS_VERSION" "$so" 2>/dev/null && [ -f "$control" ]
}

# ensure_citus: make Citus $ORCH_CITUS_VERSION available to this server.
#   return 0  already installed, or built and installed now
#   return 1  the build (or its checks) failed: the message and the tail of
#             the build log are printed
#   return 2  not installed and no vendored source: Citus is skipped (one
#             line says why)
# The build: check the tarball's sha256, install the missing apt build deps,
# extract to $ORCH_CITUS_BUILD_DIR (default /var/tmp/orch-citus-build, outside
# the repository), apply scripts/citus-13.2.2-pg15-have_createdb_privilege.patch
# when the server headers declare have_createdb_privilege() extern, then
# configure, make -j2 and make install under nice, logged to build.log there.
ensure_citus() {
    local tarball builddir src logf sum start rc hdr
    if citus_installed; then
        log "citus: $ORCH_CITUS_VERSION ($ORCH_CITUS_EXTVERSION) already installed for this server"
        return 0
    fi
    tarball=$(citus_tarball)
    if [ ! -f "$tarball" ]; then
        log "citus: not installed and no vendored source at $tarball: Citus is not built, t/050_citus.pl will be skipped"
        return 2
    fi
    sum=$(sha256sum "$tarball" | cut -d' ' -f1)
    if [ "$sum" != "$ORCH_CITUS_SHA256" ]; then
        warn "citus: $tarball has sha256 $sum, expected $ORCH_CITUS_SHA256 (vendor README): not built"
        return 1
    fi
    APT_WHAT="citus build deps" apt_install_missing "${ORCH_CITUS_BUILD_DEPS[@]}" || {
        warn "citus: could not install the build dependencies ${ORCH_CITUS_BUILD_DEPS[*]}"
        return 1
    }
    builddir=${ORCH_CITUS_BUILD_DIR:-/var/tmp/orch-citus-build}
    src=$builddir/citus-$ORCH_CITUS_VERSION
    logf=$builddir/build.log
    case "$builddir" in
        "$ORCH_REPO"|"$ORCH_REPO"/*) warn "citus: the build dir $builddir must be outside the repository"; return 1 ;;
    esac
    rm -rf "$src"
    mkdir -p "$builddir" || { warn "citus: cannot create $builddir"; return 1; }
    : >"$logf"
    log "citus: building $ORCH_CITUS_VERSION from $tarball in $src (log: $logf; a few minutes)"
    start=$(date +%s)
    (
        set -e
        tar -xzf "$tarball" -C "$builddir"
        cd "$src"
        hdr=$("$PG_CONFIG" --includedir-server)/commands/dbcommands.h
        if grep -Eq 'extern[[:space:]]+bool[[:space:]]+have_createdb_privilege' "$hdr"; then
            echo "== $hdr declares have_createdb_privilege(): applying $(basename "$ORCH_CITUS_PATCH")"
            patch -p1 --forward --batch <"$ORCH_CITUS_PATCH"
        else
            echo "== $hdr does not declare have_createdb_privilege(): no patch"
        fi
        echo "== configure"
        nice -n 10 ./configure PG_CONFIG="$PG_CONFIG"
        echo "== make -j2"
        nice -n 10 make -j2
        echo "== make install"
        nice -n 10 make install
    ) >>"$logf" 2>&1 </dev/null
    rc=$?
    if [ $rc -ne 0 ]; then
        warn "citus: the build failed (exit $rc) after $(( $(date +%s) - start ))s; the end of $logf:"
        tail -n 60 "$logf" | sed 's/^/    | /' >&2
        return 1
    fi
    if ! citus_installed; then
        warn "citus: make install succeeded, but Citus $ORCH_CITUS_VERSION is not found for this server ($PG_CONFIG)"
        return 1
    fi
    log "citus: $ORCH_CITUS_VERSION built and installed in $(( $(date +%s) - start ))s"
    rm -rf "$src"
    return 0
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
shared_preload_libraries = 'pg_cron,orchestrator'
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
# test_cluster_start DIR PORT FIXED DB LOG: start a throwaway cluster in DIR
# on PORT, or on the next free port when another run takes it meanwhile
# (unless FIXED is 1: the port was asked for), then create database DB with
# the extension.  Sets PORT and exports PGHOST PGPORT PGUSER PGDATABASE;
# returns 1 (with the logs printed) when either step failed.
test_cluster_start() {
    local dir=$1 fixed=$3 db=$4 logf=$5 started=0
    PORT=$2
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        if (cluster_start "$dir" "$PORT" postgres fast >>"$logf" 2>&1); then
            started=1
            break
        fi
        [ "$fixed" != 1 ] && port_in_use "$PORT" || break
        PORT=$((PORT + 1))
        while port_in_use "$PORT"; do PORT=$((PORT + 1)); done
    done
    if [ $started = 0 ]; then
        cat "$logf"
        echo "cluster start on port $PORT failed"
        return 1
    fi
    export PGHOST=$(cluster_socket_dir "$dir") PGPORT=$PORT PGUSER=postgres PGDATABASE=$db
    if ! q -d postgres -c "CREATE DATABASE $db" >>"$logf" 2>&1 \
       || ! q -d "$db" -c "CREATE EXTENSION orchestrator" >>"$logf" 2>&1; then
        cat "$logf"
        echo "database $db with the extension could not be created"
        return 1
    fi
}

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
