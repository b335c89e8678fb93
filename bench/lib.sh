# bench/lib.sh: what the bench scripts (run.sh, instructions.sh, scrape.sh)
# share (sourced, with BENCH_DIR set to bench/).

REPO=$(cd "$BENCH_DIR/.." && pwd)
PGBIN=${ORCH_PG_BINDIR:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config

log()  { printf '==> %s\n' "$*" >&2; }
die()  { printf 'bench: error: %s\n' "$*" >&2; exit 1; }
as_pg() { (cd / && runuser -u postgres -- "$@"); }

# ensure_packages [COMMAND PACKAGE]...: PostgreSQL 15 with pgbench and the
# server headers, a compiler, and each COMMAND missing from PATH by its
# Debian PACKAGE; installed with apt-get when missing.
ensure_packages() {
    local missing=() p
    # postgresql-contrib-15 is a virtual package provided by postgresql-15 on
    # Debian; pgbench and pg_stat_statements ship in postgresql-15.
    [ -x "$PGBIN/postgres" ] || missing+=(postgresql-15)
    [ -x "$PGBIN/pgbench" ] && [ -f "$(dirname "$PGBIN")/lib/pg_stat_statements.so" ] \
        || missing+=(postgresql-contrib-15)
    [ -x "$PG_CONFIG" ] && [ -f "$($PG_CONFIG --pgxs 2>/dev/null || echo /nonexistent)" ] \
        || missing+=(postgresql-server-dev-15)
    command -v make >/dev/null && command -v gcc >/dev/null || missing+=(build-essential)
    while [ $# -ge 2 ]; do
        command -v "$1" >/dev/null || missing+=("$2")
        shift 2
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" </dev/null
    for p in postgres pgbench pg_config; do
        [ -x "$PGBIN/$p" ] || die "$PGBIN/$p missing after apt-get install"
    done
}

build_extension() {
    [ "${BENCH_SKIP_BUILD:-0}" = 1 ] && { log "build skipped (BENCH_SKIP_BUILD=1)"; return 0; }
    log "make && make install ($REPO)"
    make -C "$REPO" -s PG_CONFIG="$PG_CONFIG" >&2 || die "extension build failed (make)"
    make -C "$REPO" -s PG_CONFIG="$PG_CONFIG" install >&2 || die "make install failed"
}

# pgmq_install TARBALL: pgmq from its release tarball (pure SQL): its control
# file without the module_pathname line and sql/pgmq.sql as
# pgmq--VERSION.sql in the server's extension directory.  Prints the
# version; fails (nothing installed) when the tarball is absent.
pgmq_install() {
    local dir ver ext
    [ -f "$1" ] || return 1
    dir=$(mktemp -d /tmp/bench-pgmq.XXXXXX)
    tar xzf "$1" -C "$dir"
    ext=$(ls -d "$dir"/*/pgmq-extension | head -1)
    ver=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$ext/pgmq.control")
    [ -n "$ver" ] && [ -f "$ext/sql/pgmq.sql" ] || die "pgmq: $1 is not a pgmq release (no control file or sql/pgmq.sql)"
    grep -v '^module_pathname' "$ext/pgmq.control" >"$($PG_CONFIG --sharedir)/extension/pgmq.control"
    cp "$ext/sql/pgmq.sql" "$($PG_CONFIG --sharedir)/extension/pgmq--$ver.sql"
    rm -rf "$dir"
    echo "$ver"
}

# script_for SIDE NAME -> path of the pgbench script
script_for() {
    case $1 in
        orchestrator) echo "$BENCH_DIR/orch_$2.sql" ;;
        pgmq)         echo "$BENCH_DIR/pgmq_$2.sql" ;;
        *)            echo "$BENCH_DIR/base_$2.sql" ;;
    esac
}

# work_dir NAME: a new scratch directory /tmp/NAME.XXXXXX that the postgres
# OS user owns and every user can enter (printed)
work_dir() {
    local dir
    dir=$(mktemp -d "/tmp/$1.XXXXXX")
    chown postgres: "$dir"
    chmod 755 "$dir"
    echo "$dir"
}

# init_cluster DATA SOCKDIR PORT: a throwaway cluster in DATA, reached only
# by the Unix socket in SOCKDIR on PORT, with the settings every bench
# cluster shares; the caller appends its own to DATA/postgresql.conf.
init_cluster() {
    as_pg "$PGBIN/initdb" -D "$1" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null \
        || die "initdb $1 failed"
    cat >>"$1/postgresql.conf" <<EOF

# ---- bench/lib.sh: every bench cluster ----
port = $3
listen_addresses = ''                 # Unix socket only, in $2
unix_socket_directories = '$2'
shared_buffers = 1GB
max_wal_size = 8GB                    # no size-triggered checkpoint mid-run
jit = off                             # no JIT compile noise in short queries
log_min_messages = warning
EOF
}

# start_cluster DATA LOG: the cluster started with pg_ctl (its log shown
# when it does not start)
start_cluster() {
    as_pg "$PGBIN/pg_ctl" -D "$1" -l "$2" -w -t 60 start >/dev/null \
        || { cat "$2" >&2; die "server did not start"; }
}
