#!/usr/bin/env bash
# bench/instructions.sh: the CPU instructions one job costs the server, per
# system, counted by valgrind's callgrind: the same pgbench scripts as
# bench/run.sh's throughput groups, run by one client against a throwaway
# cluster whose every backend runs under callgrind.  See bench/README.md.
#
#   bash bench/instructions.sh        # ~10 minutes on 2 cores
#
# A count of instructions does not move with what else the machine is
# doing, as jobs/s does (seen here: a side's batch enqueue between 114 and
# 202 batches/s within minutes): a change of a few percent shows in it.  It
# is not a time: it counts no wait (a lock, a disk write, a commit's flush),
# and weighs a cache miss as any other instruction.  The jobs/s of
# bench/run.sh remain the figures that count.
#
# Each figure is (instructions of the run of 2K transactions - those of the
# run of K) / K / jobs per transaction: the backend's start, the first
# look-ups of a connection and what the runs share cancel out.  Every run
# starts from a fresh copy of one template database (the three systems
# installed, each with its queue) and, for the claims, its pre-loaded jobs.
#
# Environment:
#   BENCH_PORT=55434        port of the throwaway cluster (never 5432)
#   BENCH_SYSTEMS="orchestrator baseline pgmq"   which sides to count (pgmq
#                           from BENCH_PGMQ or ../shared/vendor/pgmq-1.5.1.tar.gz;
#                           skipped with a line when it is absent)
#   BENCH_COUNT="enqueue enqueue_batch process process_batch"   which paths
#   BENCH_SKIP_BUILD=1      do not run make / make install
#   ORCH_PG_BINDIR=DIR      bin directory of the PostgreSQL 15 to use
#   BENCH_KEEP=1            keep the data directory and callgrind files in /tmp
#   BENCH_OUT=FILE          also write the report to FILE
set -euo pipefail
shopt -s inherit_errexit

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PORT=${BENCH_PORT:-55434}
SYSTEMS=${BENCH_SYSTEMS:-orchestrator baseline pgmq}
PATHS=${BENCH_COUNT:-enqueue enqueue_batch process process_batch}
PGMQ_TAR=${BENCH_PGMQ:-$REPO/../shared/vendor/pgmq-1.5.1.tar.gz}
KEEP=${BENCH_KEEP:-0}
OUT=${BENCH_OUT:-}

[ "$(id -u)" = 0 ] || die "run as root (installs packages, runs PostgreSQL as the postgres OS user)"
[ "$PORT" != 5432 ] || die "BENCH_PORT must not be 5432 (the system cluster)"
id postgres >/dev/null 2>&1 || die "no postgres OS user"

# path -> "label|K transactions|jobs per transaction|jobs pre-loaded per transaction"
declare -A PATH_OF=(
    [enqueue]="enqueue, 1 client|200|1|0"
    [enqueue_batch]="enqueue, batches of 1,000|10|1000|0"
    [process]="claim + complete, 1 worker|200|1|1"
    [process_batch]="claims of 100 + batch complete, 1 worker|10|100|100"
)
for p in $PATHS; do [ -n "${PATH_OF[$p]:-}" ] || die "BENCH_COUNT: no path \"$p\" (${!PATH_OF[*]})"; done

ensure_packages valgrind valgrind
build_extension
PGMQ_NOTE=
case " $SYSTEMS " in
    *" pgmq "*)
        if ver=$(pgmq_install "$PGMQ_TAR"); then
            PGMQ_NOTE="pgmq $ver (pure SQL, from $(basename "$PGMQ_TAR"))"
        else
            PGMQ_NOTE="pgmq: skipped ($PGMQ_TAR not found; BENCH_PGMQ names the release tarball)"
            SYSTEMS=$(echo "$SYSTEMS" | tr ' ' '\n' | grep -v '^pgmq$' | tr '\n' ' ')
        fi
        log "$PGMQ_NOTE" ;;
esac

WORK=$(work_dir orch-instr)
DATA=$WORK/data
CG=$WORK/callgrind
cleanup() {
    local rc=$?
    local pm
    if [ -f "$DATA/postmaster.pid" ]; then
        pm=$(head -1 "$DATA/postmaster.pid")
        as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w -t 300 stop >/dev/null 2>&1 || true
        # valgrind writes the postmaster's file once the pid file is gone
        for _ in $(seq 1 120); do kill -0 "$pm" 2>/dev/null || break; sleep 0.5; done
    fi
    if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

init_cluster "$DATA" "$WORK" "$PORT"
as_pg mkdir "$CG"
cat >>"$DATA/postgresql.conf" <<EOF

# ---- bench/instructions.sh (bench/run.sh's settings that change what a job executes) ----
wal_buffers = 16MB
synchronous_commit = on
checkpoint_timeout = 30min
autovacuum = off                      # no worker between a run's transactions
shared_preload_libraries = 'orchestrator'
# What a worker's claims go by for a while is bounded in time: 50 ms by
# default, which callgrind's slowdown (about 50 times) would make about 50
# times fewer claims.  Scaled with it, the bound covers as many claims as
# at full speed.
orchestrator.claim_cache_max_age = 2500
EOF
log "starting the cluster under callgrind (every backend is counted, in $CG)"
# The postmaster forks its backends without exec: each is counted, into a
# file of its own named by its pid, complete once it has exited.
(cd / && runuser -u postgres -- valgrind --tool=callgrind --trace-children=yes \
    --callgrind-out-file="$CG/cg.%p" "$PGBIN/postgres" -D "$DATA" >"$WORK/server.log" 2>&1 &)
for _ in $(seq 1 300); do
    "$PGBIN/pg_isready" -q -h "$WORK" -p "$PORT" && break
    sleep 1
done
"$PGBIN/pg_isready" -q -h "$WORK" -p "$PORT" || { cat "$WORK/server.log" >&2; die "server did not start under valgrind"; }
# the files of the processes that live as long as the cluster
sleep 2
BASE=$(ls "$CG")

PSQL=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -U postgres)
export PGOPTIONS="-c client_min_messages=warning"
sql() { "${PSQL[@]}" -d "$1" -At -c "$2"; }

# One template: every system installed, each with its queue "bench".
sql postgres "CREATE DATABASE tmpl" >/dev/null
"${PSQL[@]}" -d tmpl -f "$BENCH_DIR/baseline_schema.sql" >/dev/null
sql tmpl "CREATE EXTENSION orchestrator; SELECT orch_create_queue('bench')" >/dev/null
case " $SYSTEMS " in *" pgmq "*) sql tmpl "CREATE EXTENSION pgmq; SELECT pgmq.create('bench')" >/dev/null ;; esac

# preload DB SIDE N: N jobs waiting in queue bench, 1,000 per transaction
preload() {
    local db=$1 side=$2 n=$3 done=0 k
    while [ "$done" -lt "$n" ]; do
        k=$(( n - done < 1000 ? n - done : 1000 ))
        case $side in
            orchestrator) sql "$db" "SELECT count(*) FROM orch_enqueue_batch('bench',
                              ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g) FROM generate_series(1, $k) g))" ;;
            pgmq) sql "$db" "SELECT count(*) FROM pgmq.send_batch('bench',
                      ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g) FROM generate_series(1, $k) g))" ;;
            *) sql "$db" "INSERT INTO jobs (queue, priority, payload)
                   SELECT 'bench', 0, jsonb_build_object('kind', 'email', 'n', g) FROM generate_series(1, $k) g" ;;
        esac >/dev/null
        done=$(( done + k ))
    done
}

# count SIDE PATH T: instructions of one pgbench connection running the
# side's script for PATH T times, on a fresh database
count() {
    local side=$1 path=$2 t=$3 pre before f n
    IFS='|' read -r _ _ _ pre <<<"${PATH_OF[$path]}"
    sql postgres "DROP DATABASE IF EXISTS run" >/dev/null
    sql postgres "CREATE DATABASE run TEMPLATE tmpl" >/dev/null
    preload run "$side" $(( pre * t ))
    sql run "VACUUM ANALYZE" >/dev/null
    sql run "CHECKPOINT" >/dev/null
    quiet
    before=$(ls "$CG")
    "$PGBIN/pgbench" -h "$WORK" -p "$PORT" -U postgres -n -M prepared -c 1 -t "$t" \
        -D queue=bench -f "$(script_for "$side" "$path")" run >"$WORK/pgbench.log" 2>&1 \
        || { cat "$WORK/pgbench.log" >&2; die "pgbench failed ($side, $path)"; }
    grep -q "number of failed transactions: 0" "$WORK/pgbench.log" \
        || { cat "$WORK/pgbench.log" >&2; die "pgbench: failed transactions ($side, $path)"; }
    # the backends started since (pgbench's own first connection, this
    # script's looks) have all exited: the pgbench client's is the one that
    # executed the most
    quiet
    f=$(for f in $(comm -13 <(echo "$before") <(ls "$CG")); do
            echo "$(sed -n 's/^summary: //p' "$CG/$f") $f"
        done | sort -n | tail -1)
    [ -n "$f" ] || die "no callgrind count of the pgbench backend ($side, $path)"
    log "  $t transactions: ${f% *} instructions (${f#* })"
    echo "${f% *}"
}

# quiet: no other client connected, and every backend that was has exited
# and written its file (this look's own too: a file is written at exit)
quiet() {
    local r others pid f pending
    for _ in $(seq 1 600); do
        r=$(sql postgres "SELECT count(*) FILTER (WHERE pid <> pg_backend_pid()), pg_backend_pid()
                            FROM pg_stat_activity WHERE backend_type = 'client backend'")
        others=${r%|*}
        pid=${r#*|}
        for _ in $(seq 1 600); do grep -qs '^summary: ' "$CG/cg.$pid" && break; sleep 0.2; done
        pending=0
        for f in $(comm -13 <(echo "$BASE") <(ls "$CG")); do
            grep -q '^summary: ' "$CG/$f" || pending=1
        done
        [ "$others" = 0 ] && [ "$pending" = 0 ] && return 0
        sleep 0.5
    done
    die "backends of the set-up still running, or their callgrind files not written"
}

declare -A PER_JOB
for path in $PATHS; do
    IFS='|' read -r label k jobs _ <<<"${PATH_OF[$path]}"
    for side in $SYSTEMS; do
        log "$label: $side"
        a=$(count "$side" "$path" "$k")
        b=$(count "$side" "$path" $(( 2 * k )))
        PER_JOB[$path,$side]=$(( (b - a) / k / jobs ))
    done
done

has() { case " $SYSTEMS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
report() {
    local path label side o b q
    echo "Instructions per job (callgrind, one client; (2K transactions - K) / K)"
    [ -n "$PGMQ_NOTE" ] && echo "$PGMQ_NOTE"
    echo
    printf '| %-42s |' path
    for side in $SYSTEMS; do printf ' %12s |' "$side"; done
    has orchestrator && has baseline && printf ' %10s |' "plain/orch"
    has orchestrator && has pgmq && printf ' %9s |' "pgmq/orch"
    echo
    for path in $PATHS; do
        IFS='|' read -r label _ _ _ <<<"${PATH_OF[$path]}"
        printf '| %-42s |' "$label"
        for side in $SYSTEMS; do printf ' %12s |' "${PER_JOB[$path,$side]}"; done
        o=${PER_JOB[$path,orchestrator]:-}
        b=${PER_JOB[$path,baseline]:-}
        q=${PER_JOB[$path,pgmq]:-}
        [ -n "$o" ] && [ -n "$b" ] && printf ' %10s |' "$(awk -v x="$b" -v y="$o" 'BEGIN { printf "%.2f", x / y }')"
        [ -n "$o" ] && [ -n "$q" ] && printf ' %9s |' "$(awk -v x="$q" -v y="$o" 'BEGIN { printf "%.2f", x / y }')"
        echo
    done
    echo
    echo "(x/orch: the other's instructions per job over the orchestrator's; above 1, the orchestrator executes fewer)"
}
if [ -n "$OUT" ]; then report | tee "$OUT"; else report; fi
