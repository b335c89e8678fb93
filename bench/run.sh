#!/usr/bin/env bash
# bench/run.sh: orchestrator against a hand-written FOR UPDATE SKIP LOCKED
# queue (bench/baseline_schema.sql), both measured in one run, on one
# throwaway cluster with one postgresql.conf.  See bench/README.md.
#
#   bash bench/run.sh                 # full run (~20 min on 2 cores)
#   BENCH_QUICK=1 bash bench/run.sh   # smoke run (~3 min), smaller sizes
#
# Environment:
#   BENCH_PORT=55433        port of the throwaway cluster (never 5432)
#   BENCH_QUICK=1           smaller sizes and shorter runs
#   BENCH_SYSTEMS="orchestrator baseline pgmq"   which sides to measure (pgmq:
#                           the throughput groups only, from the pgmq release
#                           tarball, BENCH_PGMQ or ../shared/vendor/pgmq-1.5.1.tar.gz;
#                           skipped with a line when it is absent)
#   BENCH_WORKLOADS="enqueue process batch latency steady waiting backlog tenants readers fair retention keys wf subflows signals decay"   which groups to run
#   BENCH_WF_RUNS=N         runs started per workflow run (default 2000, quick 300)
#   BENCH_SUB_SIZES="100 1000"  children of the parent run of each subflows run
#   BENCH_SIG_RUNS=N        round trips of each signals run (default 500, quick 200)
#   ORCH_PG_BINDIR=DIR      bin directory of the PostgreSQL 15 to use (default
#                           /usr/lib/postgresql/15/bin; a relocated copy works)
#   BENCH_REPS=N            repetitions of each throughput workload (default 3,
#                           quick 1), the sides alternating; the table shows
#                           the median of the repetitions
#   BENCH_SKIP_BUILD=1      do not run make / make install
#   BENCH_PROC_CAP=SECONDS  cap of each processing run (default 60, quick 12)
#   BENCH_RET_RATE=N        jobs/s the retention runs' backlog is sized for
#                           (pre-load = N x the run's seconds; default 6000)
#   BENCH_PROFILE=1         load pg_stat_statements (track=all) and print the
#                           top statements after each run (changes the
#                           settings for both sides; not for headline numbers)
#   BENCH_KEEP=1            keep the data directory and pgbench logs in /tmp
#   BENCH_OUT=FILE          also write the report to FILE
#
# Runs as root: installs missing packages with apt-get, builds and installs
# the extension, and runs PostgreSQL as the postgres OS user.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

PORT=${BENCH_PORT:-55433}
QUICK=${BENCH_QUICK:-0}
SYSTEMS=${BENCH_SYSTEMS:-orchestrator baseline pgmq}
PGMQ_TAR=${BENCH_PGMQ:-$REPO/../shared/vendor/pgmq-1.5.1.tar.gz}
# pgmq takes part in the throughput groups (enqueue, process, batch) only:
# TP_SYSTEMS; SYSTEMS is the orchestrator and the plain queue everywhere else.
TP_SYSTEMS=$SYSTEMS
SYSTEMS=$(echo "$SYSTEMS" | tr ' ' '\n' | grep -v '^pgmq$' | tr '\n' ' ' | sed 's/ *$//')
PGMQ_NOTE=
GROUPS_=${BENCH_WORKLOADS:-enqueue process batch latency steady waiting backlog tenants readers fair retention keys wf subflows signals decay}
PROFILE=${BENCH_PROFILE:-0}
KEEP=${BENCH_KEEP:-0}
OUT=${BENCH_OUT:-}

# Sizes.  Full: ~20 minutes on 2 cores; quick: ~3 minutes.
if [ "$QUICK" = 1 ]; then
    ENQ_SECS=3          # each enqueue run (pgbench -T)
    PROC_JOBS=10000     # jobs pre-loaded for each processing run
    BATCH_JOBS=50000    # jobs pre-loaded for the claim-100 run
    PROC_CAP=12         # a processing run stops after this many seconds at most
    BATCH_WORKERS=4     # workers of the claim-100 run
    LAT_BIG=100000      # "large backlog" for the latency runs
    LAT_SMALL=1000      # "small backlog"
    LAT_SECS=3          # each claim+complete latency run
    CLAIM_SECS=2        # each claim-only latency run
    KEY_JOBS=10000      # jobs of the concurrency-key runs
    BLOCKED_BIG=2000    # blocked keys of the "many blocked keys" latency run
    WF_RUNS=300         # workflow runs started (before the workers) per wf run
    SIG_RUNS=200        # signal round trips per signals run
    DELAYED=20000       # future-dated + retry-waiting tasks of the backlog latency run
    DECAY_CHUNK=100000  # tasks per round of the no-decay run
    DECAY_ROUNDS=5      # rounds of the no-decay run
    NOISY=100000        # another tenant's waiting tasks in the noisy-neighbour run
    FAIR_KEYS=100       # tenants with one task each in the fair-claims run
    REPS=1              # repetitions of each throughput workload
    RET_SECS=40         # each retention run (with and without)
    RET_KEEP=10         # seconds: orchestrator.retention during the retention run
    RET_EVERY=5         # seconds between orch_maintain passes
    RET_PART=5          # seconds: orchestrator.history_partition during the retention run
    STEADY_SECS=15      # each steady-load run
    STEADY_LONG=60      # the steady-load drift run
    STEADY_WIN=10       # seconds compared at its start and end
else
    ENQ_SECS=10
    PROC_JOBS=100000
    BATCH_JOBS=500000
    PROC_CAP=60
    BATCH_WORKERS=4
    LAT_BIG=1000000
    LAT_SMALL=1000
    LAT_SECS=10
    CLAIM_SECS=5
    KEY_JOBS=100000
    BLOCKED_BIG=10000
    WF_RUNS=2000
    SIG_RUNS=500
    DELAYED=200000
    DECAY_CHUNK=1000000
    DECAY_ROUNDS=10
    NOISY=1200000
    FAIR_KEYS=1000
    REPS=3
    RET_SECS=180
    RET_KEEP=60
    RET_EVERY=10
    RET_PART=15         # seconds: orchestrator.history_partition during the retention run
    STEADY_SECS=30
    STEADY_LONG=600
    STEADY_WIN=60
fi
REPS=${BENCH_REPS:-$REPS}
RET_WORKERS=4
RET_RATE=${BENCH_RET_RATE:-6000}   # jobs/s: the retention runs pre-load RET_SECS times this
DECAY_RETENTION=5       # seconds: orchestrator.retention during the no-decay run (short: purging runs in every round, the first too)
DECAY_WORKERS=4
KEYS=1000               # distinct concurrency keys (limit 1 each)
BLOCKED_SMALL=10
LOAD_CHUNK=10000        # rows per pre-load transaction
PROC_CAP=${BENCH_PROC_CAP:-$PROC_CAP}
WF_RUNS=${BENCH_WF_RUNS:-$WF_RUNS}
SIG_RUNS=${BENCH_SIG_RUNS:-$SIG_RUNS}
SIG_WARM=20             # round trips first made on the same connection and left out of the figures
SUB_SIZES=${BENCH_SUB_SIZES:-100 1000}
SUB_LIMIT=10            # seconds: no call of the subflows group may take longer
WF_WORKERS=4            # workers of the workflow runs (as "process, 4 workers")
WF_TARGET=1.5           # step overhead target: bare-task jobs/s / linear steps/s

[ "$(id -u)" = 0 ] || die "run as root (installs packages, runs PostgreSQL as the postgres OS user)"
[ "$PORT" != 5432 ] || die "BENCH_PORT must not be 5432 (the system cluster)"
want() { case " $TP_SYSTEMS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
group() { case " $GROUPS_ " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
want orchestrator || want baseline || die "BENCH_SYSTEMS names neither orchestrator nor baseline"

# pgmq from its release tarball (bench/lib.sh).  Absent: pgmq is left out,
# with a line in the report.
install_pgmq() {
    local ver
    want pgmq || return 0
    if ! ver=$(pgmq_install "$PGMQ_TAR"); then
        PGMQ_NOTE="pgmq: skipped ($PGMQ_TAR not found; BENCH_PGMQ names the release tarball)"
        log "$PGMQ_NOTE"
        TP_SYSTEMS=$SYSTEMS
        return 0
    fi
    PGMQ_NOTE="pgmq $ver (pure SQL, from $(basename "$PGMQ_TAR")): send / send_batch / read + delete / read 100 + delete of the ids"
    log "installed pgmq $ver"
}

# ---------------------------------------------------------------------------
# Packages and build
# ---------------------------------------------------------------------------
ensure_packages
id postgres >/dev/null 2>&1 || die "no postgres OS user"
if want orchestrator; then build_extension; fi
install_pgmq

# ---------------------------------------------------------------------------
# Throwaway cluster
# ---------------------------------------------------------------------------
WORK=$(work_dir orch-bench)
DATA=$WORK/data
SOCK=$WORK
PGBENCH_PID=

cleanup() {
    local rc=$?
    if [ -n "$PGBENCH_PID" ] && kill -0 "$PGBENCH_PID" 2>/dev/null; then
        kill -TERM "$PGBENCH_PID" 2>/dev/null || true
    fi
    if [ -n "${MAINT_PID:-}" ]; then kill "$MAINT_PID" 2>/dev/null || true; fi
    if [ -f "$DATA/postmaster.pid" ]; then
        as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
    fi
    if [ "$KEEP" = 1 ]; then
        log "kept $WORK (data directory, server log, pgbench logs)"
    else
        rm -rf "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "initdb $DATA (port $PORT, socket $SOCK)"
init_cluster "$DATA" "$SOCK" "$PORT"

# orchestrator: the wake-up of waiting claims (nothing for the baseline's queries)
PRELOAD="orchestrator"
[ "$PROFILE" = 1 ] && PRELOAD="orchestrator,pg_stat_statements"
cat >>"$DATA/postgresql.conf" <<EOF

# ---- bench/run.sh: identical for the orchestrator and the baseline ----
max_connections = 100
work_mem = 16MB
maintenance_work_mem = 256MB
wal_buffers = 16MB
synchronous_commit = on               # the default: every commit is durable
fsync = on
full_page_writes = on
wal_level = replica
min_wal_size = 1GB
checkpoint_timeout = 30min            # checkpoints only where the harness asks
checkpoint_completion_target = 0.9
autovacuum = on                       # default thresholds (tables may set their own)
autovacuum_naptime = 10s              # what docs/storage.md advises for a busy queue: autovacuum
                                      # reaches a table once per naptime, and until it does
                                      # new rows go to new pages (a minute at 20,000 jobs/s
                                      # is over a gigabyte of task table)
random_page_cost = 1.1
logging_collector = off
shared_preload_libraries = '$PRELOAD'
pg_stat_statements.track = all
pg_stat_statements.max = 2000
EOF
start_cluster "$DATA" "$WORK/server.log"

export PGOPTIONS="-c client_min_messages=warning"
PSQL=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE bench" >/dev/null
sql()  { "${PSQL[@]}" -d bench -At -c "$1"; }
sqlf() { "${PSQL[@]}" -d bench -At -f "$1" >/dev/null; }

if [ "$PROFILE" = 1 ]; then sql "CREATE EXTENSION pg_stat_statements" >/dev/null; fi
if want orchestrator; then
    sql "CREATE EXTENSION orchestrator" >/dev/null || die "CREATE EXTENSION orchestrator failed"
fi

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
# reset: both sides start empty (fresh tables, fresh indexes, fresh sequences).
reset_all() {
    sqlf "$BENCH_DIR/baseline_schema.sql"
    if want orchestrator; then
        sql "DROP EXTENSION orchestrator CASCADE" >/dev/null
        sql "CREATE EXTENSION orchestrator" >/dev/null
        sql "SELECT orch_create_queue('bench'), orch_create_queue('lat')" >/dev/null
    fi
    # (pgmq: in the throughput groups only)
    if want pgmq && { group enqueue || group process || group batch; }; then
        sql "DROP EXTENSION IF EXISTS pgmq CASCADE" >/dev/null
        sql "CREATE EXTENSION pgmq" >/dev/null
        sql "SELECT pgmq.create('bench')" >/dev/null
    fi
}

settle() { sql "VACUUM ANALYZE" >/dev/null; sql "CHECKPOINT" >/dev/null; }

now_epoch() { sql "SELECT extract(epoch FROM clock_timestamp())"; }

# preload SIDE QUEUE N: N waiting jobs through the public API (orchestrator:
# orch_enqueue_batch) or a multi-row INSERT (baseline), LOAD_CHUNK per
# transaction.  Prints rows/s of the load on stderr.
preload() {
    local side=$1 queue=$2 n=$3 tenant=${4:-default} done=0 k t0 t1
    t0=$(date +%s.%N)
    while [ "$done" -lt "$n" ]; do
        k=$(( n - done < LOAD_CHUNK ? n - done : LOAD_CHUNK ))
        if [ "$side" = orchestrator ]; then
            sql "SELECT count(*) FROM orch_enqueue_batch('$queue',
                   ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g)
                           FROM generate_series($done + 1, $done + $k) g), tenant => '$tenant')" >/dev/null \
                || die "orch_enqueue_batch failed during pre-load"
        elif [ "$side" = pgmq ]; then
            sql "SELECT count(*) FROM pgmq.send_batch('$queue',
                   ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g)
                           FROM generate_series($done + 1, $done + $k) g))" >/dev/null \
                || die "pgmq.send_batch failed during pre-load"
        else
            sql "INSERT INTO jobs (queue, priority, payload)
                 SELECT '$queue', 0, jsonb_build_object('kind', 'email', 'n', g)
                   FROM generate_series($done + 1, $done + $k) g" >/dev/null
        fi
        done=$(( done + k ))
    done
    t1=$(date +%s.%N)
    log "  pre-loaded $n ($side) in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f s, %.0f rows/s", b-a, '"$n"'/(b-a)}')"
}

# count SIDE QUEUE KIND T0 -> "jobs seconds": jobs counted from the tables
# (enqueued: all rows of the queue; processed: finished rows) and the window
# from T0 (just before pgbench started) to the last one's timestamp.
count_jobs() {
    local side=$1 queue=$2 kind=$3 t0=$4
    if [ "$side" = pgmq ]; then
        # (a message processed is deleted: run_process times the last one)
        sql "SELECT count(*), coalesce(extract(epoch FROM max(enqueued_at)) - $t0, 0) FROM pgmq.q_$queue"
    elif [ "$side" = orchestrator ]; then
        if [ "$kind" = enqueued ]; then
            sql "SELECT count(*), coalesce(extract(epoch FROM max(created_at)) - $t0, 0)
                   FROM orch_tasks WHERE queue = '$queue'"
        else
            sql "SELECT count(*), coalesce(extract(epoch FROM max(coalesce(finished_at, updated_at))) - $t0, 0)
                   FROM orch_tasks WHERE queue = '$queue' AND state = 'completed'"
        fi
    else
        if [ "$kind" = enqueued ]; then
            sql "SELECT count(*), coalesce(extract(epoch FROM max(created_at)) - $t0, 0)
                   FROM jobs WHERE queue = '$queue'"
        else
            sql "SELECT count(*), coalesce(extract(epoch FROM max(done_at)) - $t0, 0)
                   FROM jobs WHERE queue = '$queue' AND state = 'done'"
        fi
    fi
}

# all_done SIDE: 1 when queue bench has nothing left to claim or finish,
# else 0.  Polled every second while a processing run goes, so index probes
# only: a count of the finished rows read the whole table inside the
# measured window, a cost that grew with each side's table (290 ms a poll
# on the orchestrator's 500,000 tasks, 73 ms on the plain queue's jobs).
all_done() {
    case $1 in
    pgmq) sql "SELECT (NOT EXISTS (SELECT 1 FROM pgmq.q_bench))::int" ;;
    orchestrator)
        # claimable, executing, held back by a key, delayed: each by its index
        sql "SELECT (NOT EXISTS (SELECT 1 FROM orch.tasks WHERE queue = 'bench' AND ready_at IS NOT NULL)
                     AND NOT EXISTS (SELECT 1 FROM orch.tasks WHERE queue = 'bench' AND state = 'executing')
                     AND NOT EXISTS (SELECT 1 FROM orch.tasks WHERE queue = 'bench' AND gated)
                     AND NOT EXISTS (SELECT 1 FROM orch.tasks WHERE queue = 'bench' AND ready_at IS NULL
                                       AND NOT gated AND state = 'queued'))::int" ;;
    *)
        sql "SELECT (NOT EXISTS (SELECT 1 FROM jobs WHERE queue = 'bench' AND state = 'pending')
                     AND NOT EXISTS (SELECT 1 FROM jobs WHERE queue = 'bench' AND state = 'running'))::int" ;;
    esac
}

finished_count() {
    if [ "$1" = pgmq ]; then
        sql "SELECT $2 - count(*) FROM pgmq.q_bench"
    elif [ "$1" = orchestrator ]; then
        sql "SELECT count(*) FROM orch_tasks WHERE queue = 'bench' AND state = 'completed'"
    else
        sql "SELECT count(*) FROM jobs WHERE queue = 'bench' AND state = 'done'"
    fi
}

states() { # SIDE -> "state=count ..." of queue bench
    if [ "$1" = pgmq ]; then
        sql "SELECT 'waiting=' || count(*) FILTER (WHERE vt <= now()) || ' invisible=' || count(*) FILTER (WHERE vt > now()) FROM pgmq.q_bench"
    elif [ "$1" = orchestrator ]; then
        sql "SELECT string_agg(state || '=' || n, ' ' ORDER BY state)
               FROM (SELECT state, count(*) AS n FROM orch_tasks WHERE queue = 'bench' GROUP BY state) s"
    else
        sql "SELECT string_agg(state || '=' || n, ' ' ORDER BY state)
               FROM (SELECT state, count(*) AS n FROM jobs WHERE queue = 'bench' GROUP BY state) s"
    fi
}


threads_for() { local c=$1 n; n=$(nproc); echo $(( c < n ? c : n )); }

profile_reset() { [ "$PROFILE" = 1 ] && sql "SELECT pg_stat_statements_reset()" >/dev/null || true; }
profile_dump() {
    [ "$PROFILE" = 1 ] || return 0
    {
        echo "--- pg_stat_statements, $1 (top ${BENCH_PROFILE_TOP:-12} by total time; ms) ---"
        "${PSQL[@]}" -d bench -P pager=off -c "
          SELECT calls, round(total_exec_time::numeric, 0) AS total_ms,
                 round(mean_exec_time::numeric, 3) AS mean_ms,
                 CASE WHEN toplevel THEN 'top' ELSE 'nested' END AS level,
                 regexp_replace(left(query, ${BENCH_PROFILE_WIDTH:-110}), '\s+', ' ', 'g') AS query
            FROM pg_stat_statements
           WHERE query !~* 'pg_stat_statements|extract\(epoch|VACUUM|CHECKPOINT'
           ORDER BY total_exec_time DESC LIMIT ${BENCH_PROFILE_TOP:-12}"
    } | tee -a "$WORK/profile.txt" >&2
}

# pgbench_check LOG: fail loudly when a client aborted or a statement failed
# (an API error must be seen, never worked around).
pgbench_check() {
    if grep -Eq 'ERROR|error:|aborted' "$1"; then
        grep -E 'ERROR|error:|aborted' "$1" | sort | uniq -c | head -20 >&2
        die "pgbench reported errors (log: $1)"
    fi
}

# Results: rows of the final table.
declare -A RES          # RES[workload,side] = jobs/s
declare -A NOTE         # NOTE[workload,side] = "jobs in seconds"
WORKLOADS=()
declare -A TARGET       # TARGET[workload] = minimum ratio, or empty
add_workload() { WORKLOADS+=("$1"); TARGET[$1]=$2; }

wal_lsn() { sql "SELECT pg_current_wal_insert_lsn()"; }

declare -A RATES       # RATES[workload,side] = "jobs/s of each repetition"
declare -A WALS         # WALS[workload,side] = "WAL bytes per job of each repetition"
declare -A WAL          # WAL[workload,side] = median WAL bytes per job
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }

record() { # WORKLOAD SIDE JOBS SECS WAL-LSN-BEFORE
    local rate wal n
    rate=$(awk -v j="$3" -v s="$4" 'BEGIN{ if (s > 0) printf "%.0f", j/s; else print 0 }')
    wal=$(sql "SELECT CASE WHEN $3 > 0 THEN round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$5') / $3) END")
    RATES[$1,$2]="${RATES[$1,$2]:-} $rate"
    WALS[$1,$2]="${WALS[$1,$2]:-} ${wal:-}"
    RES[$1,$2]=$(echo "${RATES[$1,$2]}" | median)
    WAL[$1,$2]=$(echo "${WALS[$1,$2]}" | median)
    n=$(echo "${RATES[$1,$2]}" | wc -w)
    if [ "$n" -gt 1 ]; then
        NOTE[$1,$2]="median of $n:${RATES[$1,$2]} jobs/s, ${WAL[$1,$2]:-?} B WAL/job"
    else
        NOTE[$1,$2]="$3 jobs in $(printf '%.1f' "$4") s, ${wal:-?} B WAL/job"
    fi
    log "  $2: $3 jobs in $(printf '%.2f' "$4") s = $rate jobs/s, ${wal:-?} bytes of WAL per job"
}

# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------
# the sides of repetition REP, alternating: A B, B A, A B, ...
# (sides_tp: the same over the throughput groups' sides, pgmq among them)
sides_for() { if [ $(( $1 % 2 )) = 1 ]; then echo "$SYSTEMS"; else echo "$SYSTEMS" | awk '{ for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "\n") }'; fi; }
sides_tp() { if [ $(( $1 % 2 )) = 1 ]; then echo "$TP_SYSTEMS"; else echo "$TP_SYSTEMS" | awk '{ for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "\n") }'; fi; }

# warm_up WORKLOAD SCRIPT CLIENTS: one run of the side that leads the
# first repetition, not counted.  Without it that side's first repetition
# was its lowest, run after run: a workload's first run on the cluster
# meets it cold (the batch enqueue writes about 1 GB of WAL in ENQ_SECS,
# in segments the later runs recycle).
warm_up() {
    local wl=$1 script=$2 clients=$3 side
    side=$(sides_tp 1 | awk '{ print $1 }')
    reset_all; settle
    log "$wl: warm-up, $side (not counted)"
    enqueue_pgbench "$side" "$script" "$clients" "$WORK/warm-up.log"
}

# enqueue_pgbench SIDE SCRIPT CLIENTS OUT: the side's script for ENQ_SECS
enqueue_pgbench() {
    "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
        -c "$3" -j "$(threads_for "$3")" -T "$ENQ_SECS" \
        -D queue=bench -f "$(script_for "$1" "$2")" bench >"$4" 2>&1 || true
}

# enqueue WORKLOAD SCRIPT CLIENTS: pgbench -T ENQ_SECS, jobs counted from the
# table, after a run not counted (warm_up).
run_enqueue() {
    local wl=$1 script=$2 clients=$3 side t0 out res lsn rep
    warm_up "$wl" "$script" "$clients"
    for rep in $(seq 1 "$REPS"); do
    for side in $(sides_tp "$rep"); do
        reset_all; settle; profile_reset
        log "$wl: $side"
        out=$WORK/pgbench-${wl//[^A-Za-z0-9]/_}-$side.log
        lsn=$(wal_lsn)
        t0=$(now_epoch)
        enqueue_pgbench "$side" "$script" "$clients" "$out"
        pgbench_check "$out"
        res=$(count_jobs "$side" bench enqueued "$t0")
        record "$wl" "$side" "${res%|*}" "${res#*|}" "$lsn"
        profile_dump "$wl, $side"
    done
    done
}

# pgmq_empty_at FILE: the epoch at which pgmq.q_bench became empty, into
# FILE; nothing when it is not empty within PROC_CAP + 5 s, or when it is
# cancelled (run_process does once pgbench ended).
pgmq_empty_at() {
    PGAPPNAME=bench-empty-at "${PSQL[@]}" -d bench -At -c "
        CREATE FUNCTION pg_temp.empty_at() RETURNS double precision LANGUAGE plpgsql AS \$f\$
        DECLARE t0 timestamptz := clock_timestamp();
        BEGIN
            LOOP
                IF NOT EXISTS (SELECT 1 FROM pgmq.q_bench ORDER BY msg_id LIMIT 1) THEN
                    RETURN extract(epoch FROM clock_timestamp());
                END IF;
                IF clock_timestamp() > t0 + make_interval(secs => $PROC_CAP + 5) THEN RETURN NULL; END IF;
                PERFORM pg_sleep(0.02);
            END LOOP;
        END \$f\$;
        SELECT pg_temp.empty_at();" >"$1" 2>/dev/null || true
}

# process WORKLOAD SCRIPT WORKERS JOBS: JOBS pre-loaded; pgbench runs until all
# are finished (checked every second, then pgbench is terminated) or
# PROC_CAP seconds; jobs/s = finished jobs / (last finish - start).
# (SIGTERM: a background job of a non-interactive shell ignores SIGINT.)
run_process() {
    local wl=$1 script=$2 workers=$3 jobs=$4 side t0 out res fin lsn rep tend
    for rep in $(seq 1 "$REPS"); do
    for side in $(sides_tp "$rep"); do
        reset_all
        log "$wl: $side"
        preload "$side" bench "$jobs"
        settle; profile_reset
        out=$WORK/pgbench-${wl//[^A-Za-z0-9]/_}-$side.log
        lsn=$(wal_lsn)
        t0=$(now_epoch)
        # pgmq deletes what it processed: a server-side look every 20 ms for
        # the queue's first message times the last one (one index probe)
        if [ "$side" = pgmq ]; then rm -f "$out.empty"; pgmq_empty_at "$out.empty" & fi
        "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c "$workers" -j "$(threads_for "$workers")" -T "$PROC_CAP" \
            -D queue=bench -f "$(script_for "$side" "$script")" bench >"$out" 2>&1 &
        PGBENCH_PID=$!
        while kill -0 "$PGBENCH_PID" 2>/dev/null; do
            sleep 1
            if [ "$(all_done "$side")" = 1 ]; then
                kill -TERM "$PGBENCH_PID" 2>/dev/null || true
                break
            fi
        done
        wait "$PGBENCH_PID" 2>/dev/null || true
        PGBENCH_PID=
        pgbench_check "$out"
        if [ "$side" = pgmq ]; then
            # not all processed: the window ends with pgbench, and the look stops
            tend=$(now_epoch)
            sql "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE application_name = 'bench-empty-at'" >/dev/null
            wait
            fin=$(finished_count pgmq "$jobs")
            res="$fin|$(awk -v e="$(cat "$out.empty" 2>/dev/null)" -v t="$t0" -v n="$tend" \
                         'BEGIN { printf "%.3f", ((e != "") ? e : n) - t }')"
        else
            res=$(count_jobs "$side" bench processed "$t0")
        fi
        record "$wl" "$side" "${res%|*}" "${res#*|}" "$lsn"
        if [ "${res%|*}" -lt "$jobs" ]; then
            # Not all finished within PROC_CAP: say where the rest are.
            NOTE[$wl,$side]+=" (left: $(states "$side"))"
            log "  not all finished; by state: $(states "$side")"
        fi
        profile_dump "$wl, $side"
    done
    done
}

# Latency: LAT rows waiting in queue 'lat'; 1 client runs the measured script
# (weight 1) and orch_enqueue / INSERT of one job (weight 1), so the backlog
# stays near its size; per-transaction latencies come from pgbench -l
# (script 0 only).
declare -A LAT          # LAT[kind,side,size] = "p50 p90 p99 max n" (ms)
lat_stats() { # files... -> "p50 p90 p99 max n"
    awk '$4 == 0 && $3 ~ /^[0-9]+$/ { print $3 / 1000.0 }' "$@" | sort -n | awk '
        function q(p,   i) { i = int(NR * p); if (i < NR * p) i++; if (i < 1) i = 1; return a[i] }
        { a[NR] = $1 }
        END { if (NR == 0) { print "- - - - 0"; exit }
              printf "%.3f %.3f %.3f %.3f %d\n", q(0.5), q(0.9), q(0.99), a[NR], NR }'
}

run_latency() {
    local side size secs kind script prefix
    for size in "$LAT_SMALL" "$LAT_BIG"; do
        for side in $SYSTEMS; do
            reset_all
            log "latency, $size waiting: $side"
            preload "$side" lat "$size"
            for kind in process claim; do
                settle; profile_reset
                if [ "$kind" = process ]; then secs=$LAT_SECS; else secs=$CLAIM_SECS; fi
                prefix=$WORK/lat-$kind-$side-$size
                (cd "$WORK" && "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
                    -c 1 -j 1 -T "$secs" -D queue=lat \
                    -f "$(script_for "$side" "$kind")@1" -f "$(script_for "$side" enqueue)@1" \
                    -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1) || true
                pgbench_check "$prefix.out"
                LAT[$kind,$side,$size]=$(lat_stats "$prefix".*[0-9])
                log "  $kind: p50/p90/p99/max/n = ${LAT[$kind,$side,$size]}"
                profile_dump "latency $kind, $size waiting, $side"
            done
        done
    done
}

# ---------------------------------------------------------------------------
# Backlog of work that is not due: claim latency with LAT_SMALL
# ready jobs alone, and with DELAYED more that are not due — orchestrator:
# half future-dated (run_at tomorrow), half waiting to retry (claimed and
# failed as RATE_LIMITED with retry_after 1 day); baseline: all future-dated (run_at
# tomorrow; it has no retry state).  The delayed jobs are loaded first, so
# in creation order they stand before the ready ones.  Same 1-client mix as
# the latency runs (claim+complete, and a one-job enqueue).
# ---------------------------------------------------------------------------
preload_delayed() { # SIDE N
    local side=$1 n=$2 done=0 k half
    if [ "$side" = orchestrator ]; then
        half=$(( n / 2 ))
        while [ "$done" -lt "$half" ]; do
            k=$(( half - done < LOAD_CHUNK ? half - done : LOAD_CHUNK ))
            sql "SELECT count(*) FROM orch_enqueue_batch('lat',
                   ARRAY(SELECT jsonb_build_object('kind', 'retry', 'n', g) FROM generate_series(1, $k) g))" >/dev/null
            sql "SELECT count(f.state) FROM orch_dequeue('lat', 'loader', $k) d,
                   LATERAL orch_fail(d.task_id, d.lease_token, 'RATE_LIMITED', 'throttled', interval '1 day') f" >/dev/null
            done=$(( done + k ))
        done
        done=0
        while [ "$done" -lt "$(( n - half ))" ]; do
            k=$(( n - half - done < LOAD_CHUNK ? n - half - done : LOAD_CHUNK ))
            sql "SELECT count(*) FROM orch_enqueue_batch('lat',
                   ARRAY(SELECT jsonb_build_object('kind', 'later', 'n', g) FROM generate_series(1, $k) g),
                   run_at => now() + interval '1 day')" >/dev/null
            done=$(( done + k ))
        done
        # not due means not due during the run: no retry_at or run_at within the hour
        [ "$(sql "SELECT count(*) FROM orch.tasks WHERE queue = 'lat' AND ready_at IS NULL
                    AND coalesce(retry_at, run_at) < now() + interval '1 hour'")" = 0 ] \
            || die "backlog: some delayed tasks come due within the hour"
        log "  delayed (orchestrator): $(sql "SELECT string_agg(state || CASE WHEN retry_at IS NOT NULL THEN '/retry' ELSE '/future' END || '=' || n, ' ')
                                            FROM (SELECT state, retry_at IS NOT NULL AS r, min(retry_at) AS retry_at, count(*) AS n
                                                    FROM orch.tasks WHERE queue = 'lat' GROUP BY 1, 2) s")"
    else
        while [ "$done" -lt "$n" ]; do
            k=$(( n - done < LOAD_CHUNK ? n - done : LOAD_CHUNK ))
            sql "INSERT INTO jobs (queue, priority, payload, run_at)
                 SELECT 'lat', 0, jsonb_build_object('kind', 'later', 'n', g), now() + interval '1 day'
                   FROM generate_series(1, $k) g" >/dev/null
            done=$(( done + k ))
        done
    fi
}

run_backlog() {
    local side delayed prefix
    for side in $SYSTEMS; do
        for delayed in 0 "$DELAYED"; do
            reset_all
            log "backlog: $LAT_SMALL ready + $delayed not due: $side"
            [ "$delayed" -gt 0 ] && preload_delayed "$side" "$delayed"
            preload "$side" lat "$LAT_SMALL"
            settle; profile_reset
            prefix=$WORK/backlog-$side-$delayed
            (cd "$WORK" && "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
                -c 1 -j 1 -T "$LAT_SECS" -D queue=lat \
                -f "$(script_for "$side" process)@1" -f "$(script_for "$side" enqueue)@1" \
                -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1) || true
            pgbench_check "$prefix.out"
            LAT[backlog,$side,$delayed]=$(lat_stats "$prefix".*[0-9])
            log "  claim+complete: p50/p90/p99/max/n = ${LAT[backlog,$side,$delayed]}"
            profile_dump "backlog, $delayed not due, $side"
        done
    done
}

# ---------------------------------------------------------------------------
# Noisy neighbour (orchestrator only): tenant "quiet" has
# LAT_SMALL ready jobs in queue 'lat', alone and behind NOISY older ready
# jobs of tenant "noisy"; the same 1-client mix as the latency runs (claim +
# complete, and a one-job enqueue), all with tenant => 'quiet'.  Target:
# quiet's claim+complete p99 with the neighbour's backlog <= 2x of alone.
# ---------------------------------------------------------------------------
run_tenants() {
    local noisy prefix
    want orchestrator || return 0
    # "stale": the statistics were taken before tenant quiet had a task
    # (ANALYZE after the noisy backlog, autovacuum off for the run)
    for noisy in 0 "$NOISY" stale; do
        reset_all
        log "tenants: $LAT_SMALL of tenant quiet + $noisy of tenant noisy waiting"
        if [ "$noisy" = stale ]; then
            sql "ALTER TABLE orch.tasks SET (autovacuum_enabled = off)" >/dev/null
            preload orchestrator lat "$NOISY" noisy
            settle
            preload orchestrator lat "$LAT_SMALL" quiet
            sql "CHECKPOINT" >/dev/null; profile_reset
        else
            [ "$noisy" -gt 0 ] && preload orchestrator lat "$noisy" noisy
            preload orchestrator lat "$LAT_SMALL" quiet
            settle; profile_reset
        fi
        prefix=$WORK/tenants-$noisy
        (cd "$WORK" && "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c 1 -j 1 -T "$LAT_SECS" -D queue=lat -D tenant=quiet \
            -f "$BENCH_DIR/orch_process_tenant.sql@1" -f "$BENCH_DIR/orch_enqueue_tenant.sql@1" \
            -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1) || true
        pgbench_check "$prefix.out"
        [ "$(sql "SELECT count(*) FROM orch.tasks WHERE tenant_id = 'noisy' AND state <> 'queued'")" = 0 ] \
            || die "tenants: a claim of tenant quiet took a task of tenant noisy"
        LAT[tenants,orchestrator,$noisy]=$(lat_stats "$prefix".*[0-9])
        log "  claim+complete: p50/p90/p99/max/n = ${LAT[tenants,orchestrator,$noisy]}"
        profile_dump "tenants, $noisy of another tenant waiting"
    done
}

# ---------------------------------------------------------------------------
# Readers (orchestrator only): a role bound to tenant "quiet" (LAT_SMALL
# tasks) reads its tasks while tenant "noisy" has NOISY newer ones: one task
# by id and its newest 50 through orch_task_rows, and one task by id through
# the view orch_tasks (which reads every row of the caller's tenants first);
# then a role bound to tenant "noisy" reads its own the same way.  Target:
# the readers' p99 <= 5 ms at any size of either tenant.
# ---------------------------------------------------------------------------
declare -A READ         # READ[shape] = "p50 p90 p99 max n"
run_readers() {
    local shape id prefix script role
    want orchestrator || return 0
    reset_all
    log "readers: a role bound to tenant quiet ($LAT_SMALL tasks) beside $NOISY newer tasks of tenant noisy"
    preload orchestrator rd "$LAT_SMALL" quiet
    preload orchestrator rd "$NOISY" noisy
    settle
    for role in bench_quiet bench_noisy; do
        sql "DO \$\$ BEGIN CREATE ROLE $role LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$" >/dev/null
        sql "GRANT orch_reader TO $role" >/dev/null
        sql "SELECT orch_bind_tenant('$role', '${role#bench_}')" >/dev/null
    done
    for shape in by_id newest view_by_id by_id_big newest_big; do
        script=$WORK/readers-$shape.sql
        case $shape in
            by_id*)     echo 'SELECT * FROM orch_task_rows(task_ids => ARRAY[:id]::bigint[]);' ;;
            newest*)    echo 'SELECT * FROM orch_task_rows("limit" => 50);' ;;
            view_by_id) echo 'SELECT * FROM orch_tasks WHERE task_id = :id;' ;;
        esac >"$script"
        # the quiet tenant's oldest task; the noisy tenant's (as large a tenant as there is) oldest
        case $shape in
            *_big) role=bench_noisy; id=$(sql "SELECT min(id) FROM orch.tasks WHERE tenant_id = 'noisy'") ;;
            *)     role=bench_quiet; id=$(sql "SELECT min(id) FROM orch.tasks WHERE tenant_id = 'quiet'") ;;
        esac
        prefix=$WORK/readers-$shape
        (cd "$WORK" && "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U "$role" -n -M prepared \
            -c 1 -j 1 -T "$LAT_SECS" -D id="$id" -f "$script" \
            -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1) || true
        pgbench_check "$prefix.out"
        READ[$shape]=$(lat_stats "$prefix".*[0-9])
        log "  $shape: p50/p90/p99/max/n = ${READ[$shape]}"
    done
}

# ---------------------------------------------------------------------------
# Fair claims (orchestrator only): NOISY claimable tasks of tenant "noisy",
# then one task each of FAIR_KEYS other tenants, in queue "fair" (fairness
# round_robin) and the same in queue "lat" (fairness none); one client
# claims 10 and rolls back, for LAT_SECS each.  What a fair claim costs
# beside the plain claim (which takes the noisy tenant's 10 oldest).
# ---------------------------------------------------------------------------
declare -A FAIR         # FAIR[queue] = "p50 p90 p99 max n"
run_fair() {
    local q prefix
    want orchestrator || return 0
    reset_all
    log "fair: $NOISY tasks of tenant noisy, then one each of $FAIR_KEYS tenants"
    sql "SELECT orch_create_queue('fair', '{\"fairness\": \"round_robin\"}')" >/dev/null
    for q in fair lat; do
        preload orchestrator "$q" "$NOISY" noisy
        sql "SELECT count(orch_enqueue('$q', '{}', tenant => 'k' || g)) FROM generate_series(1, $FAIR_KEYS) g" >/dev/null
    done
    settle
    for q in fair lat; do
        prefix=$WORK/fair-$q
        (cd "$WORK" && "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c 1 -j 1 -T "$LAT_SECS" -D queue="$q" -f "$BENCH_DIR/orch_claim10_rollback.sql" \
            -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1) || true
        pgbench_check "$prefix.out"
        FAIR[$q]=$(lat_stats "$prefix".*[0-9])
        log "  $q: p50/p90/p99/max/n = ${FAIR[$q]}"
    done
    [ "$(sql "SELECT count(DISTINCT t.tenant_id) FROM orch_dequeue('fair', 'check', 10) d JOIN orch_tasks t USING (task_id)")" = 10 ] \
        || die "fair: a claim of 10 did not serve 10 tenants"
}

# ---------------------------------------------------------------------------
# Retention (orchestrator only): RET_WORKERS workers claim one and
# complete it for RET_SECS from a pre-loaded backlog (more than they can
# finish), once without retention and once with orchestrator.retention =
# RET_KEEP s and orch_maintain every RET_EVERY s (history purged as the run
# goes).  Processed jobs are those no longer waiting or executing (retention
# removes finished rows, so they are counted as pre-loaded minus left).
# Target: with retention >= 0.9x of without.
# ---------------------------------------------------------------------------
declare -A RET          # RET[mode] = "jobs/s purged"
run_retention() {
    local mode n out t0 t1 left purged maint_pid jobs
    want orchestrator || return 0
    # enough that the workers never run dry: a generous multiple of the rate
    # of 4 workers (BENCH_RET_RATE jobs/s; at 2500, the default until
    # 2dc1380, a machine with fast commits processed the backlog before the
    # window ended, and the ratio said nothing)
    jobs=$(( RET_SECS * RET_RATE ))
    for mode in off on; do
        reset_all
        log "retention $mode: $RET_WORKERS workers, ${RET_SECS}s"
        preload orchestrator bench "$jobs"
        settle; profile_reset
        out=$WORK/pgbench-retention-$mode.log
        maint_pid=
        if [ "$mode" = on ]; then
            sql "ALTER DATABASE bench SET orchestrator.retention = '${RET_KEEP}s'" >/dev/null
            # the history in partitions of RET_PART s: several retired (dropped
            # whole) during the run, as a day-wide one is in a week's retention
            sql "ALTER DATABASE bench SET orchestrator.history_partition = '${RET_PART}s'" >/dev/null
            ( while :; do sleep "$RET_EVERY"; "${PSQL[@]}" -d bench -At -c "SELECT orch_maintain(1000000)" >/dev/null 2>&1 || true; done ) &
            maint_pid=$!
            MAINT_PID=$maint_pid
        fi
        t0=$(date +%s.%N)
        "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c "$RET_WORKERS" -j "$(threads_for "$RET_WORKERS")" -T "$RET_SECS" \
            -D queue=bench -f "$(script_for orchestrator process)" bench >"$out" 2>&1 || true
        t1=$(date +%s.%N)
        if [ -n "$maint_pid" ]; then kill "$maint_pid" 2>/dev/null || true; wait "$maint_pid" 2>/dev/null || true; MAINT_PID=; fi
        sql "ALTER DATABASE bench RESET orchestrator.retention" >/dev/null
        sql "ALTER DATABASE bench RESET orchestrator.history_partition" >/dev/null
        pgbench_check "$out"
        left=$(sql "SELECT count(*) FROM orch.tasks WHERE state IN ('queued', 'executing')")
        purged=$(sql "SELECT $jobs - count(*) FROM orch.tasks")
        [ "$left" -gt 0 ] || log "  WARNING: the backlog ran dry; the rate is a lower bound"
        n=$(( jobs - left ))
        RET[$mode]="$(awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", n / (b - a)}') $purged"
        log "  $n processed in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s = ${RET[$mode]%% *} jobs/s; $purged purged"
        profile_dump "retention $mode"
    done
}

# ---------------------------------------------------------------------------
# No decay (orchestrator only): DECAY_ROUNDS rounds of DECAY_CHUNK
# tasks, each enqueued in batches of 1,000 (1 client) and then processed by
# DECAY_WORKERS workers claiming 100 and completing them with
# orch_complete_batch, while orch_maintain runs every second with
# orchestrator.retention = DECAY_RETENTION s (so finished tasks, their
# events and attempts are purged as the run goes, and autovacuum works as it
# would in production).  Per round: enqueue and processing jobs/s, and the
# size of the tables with their indexes.
# ---------------------------------------------------------------------------
DECAY_ROWS=()            # "round enq/s proc/s tasks_MB events_MB attempts_MB rows"
MAINT_PID=
decay_sizes() {
    sql "SELECT round(pg_total_relation_size('orch.tasks') / 1048576.0) || ' ' ||
                round(pg_total_relation_size('orch.events') / 1048576.0) || ' ' ||
                round(pg_total_relation_size('orch.attempts') / 1048576.0) || ' ' ||
                (SELECT count(*) FROM orch.tasks)"
}
run_decay() {
    local round t0 t1 tp out enq proc open last purged
    want orchestrator || return 0
    reset_all
    sql "ALTER DATABASE bench SET orchestrator.retention = $DECAY_RETENTION" >/dev/null
    settle
    log "no decay: $DECAY_ROUNDS rounds of $DECAY_CHUNK tasks (retention ${DECAY_RETENTION}s, orch_maintain every second)"
    ( while :; do
          "${PSQL[@]}" -d bench -At -c "SELECT coalesce(sum(count), 0) FROM orch_maintain(200000) WHERE action = 'tasks_purged'" \
              >>"$WORK/decay-maintain.log" 2>&1 || true
          sleep 1
      done ) &
    MAINT_PID=$!
    for round in $(seq 1 "$DECAY_ROUNDS"); do
        out=$WORK/decay-enqueue-$round.log
        t0=$(date +%s.%N)
        "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared -c 1 -j 1 \
            -t $(( DECAY_CHUNK / 1000 )) -D queue=bench -f "$BENCH_DIR/orch_enqueue_batch.sql" bench >"$out" 2>&1 || true
        pgbench_check "$out"
        t1=$(date +%s.%N)
        enq=$(awk -v a="$t0" -v b="$t1" -v n="$DECAY_CHUNK" 'BEGIN{printf "%.0f", n/(b-a)}')
        out=$WORK/decay-process-$round.log
        tp=$(now_epoch)
        "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c "$DECAY_WORKERS" -j "$(threads_for "$DECAY_WORKERS")" -T 3600 \
            -D queue=bench -f "$BENCH_DIR/orch_process_batch.sql" bench >"$out" 2>&1 &
        PGBENCH_PID=$!
        while kill -0 "$PGBENCH_PID" 2>/dev/null; do
            sleep 0.5
            open=$(sql "SELECT count(*) FROM orch.tasks WHERE queue = 'bench' AND (ready_at IS NOT NULL OR state = 'executing')")
            if [ "$open" -eq 0 ]; then kill -TERM "$PGBENCH_PID" 2>/dev/null || true; break; fi
        done
        wait "$PGBENCH_PID" 2>/dev/null || true
        PGBENCH_PID=
        pgbench_check "$out"
        last=$(sql "SELECT extract(epoch FROM max(finished_at)) FROM orch.tasks")
        proc=$(awk -v a="$tp" -v b="$last" -v n="$DECAY_CHUNK" 'BEGIN{printf "%.0f", n/(b-a)}')
        DECAY_ROWS+=("$round $enq $proc $(decay_sizes)")
        log "  round $round: enqueue $enq jobs/s, process $proc jobs/s; MB tasks/events/attempts, task rows: $(decay_sizes)"
    done
    kill "$MAINT_PID" 2>/dev/null || true; wait "$MAINT_PID" 2>/dev/null || true; MAINT_PID=
    purged=$(awk '{s += $1} END {print s + 0}' "$WORK/decay-maintain.log" 2>/dev/null)
    DECAY_PURGED=$purged
    sql "ALTER DATABASE bench RESET orchestrator.retention" >/dev/null
}

# ---------------------------------------------------------------------------
# Concurrency keys (orchestrator only): the same 16-worker processing run
# with every task under one of KEYS keys (limit 1 each) and without keys, and
# claim latency with few versus many blocked keys.
# ---------------------------------------------------------------------------
declare -A KRES          # KRES[label] = jobs/s
declare -A KNOTE
preload_keyed() { # N: N tasks over KEYS keys, round-robin, through orch_enqueue
    local n=$1 done=0 k t0 t1
    t0=$(date +%s.%N)
    while [ "$done" -lt "$n" ]; do
        k=$(( n - done < LOAD_CHUNK ? n - done : LOAD_CHUNK ))
        sql "SELECT count(orch_enqueue('bench', jsonb_build_object('kind', 'email', 'n', g),
                                       concurrency_key => 'key-' || (g % $KEYS)))
               FROM generate_series($done + 1, $done + $k) g" >/dev/null \
            || die "keyed pre-load failed"
        done=$(( done + k ))
    done
    t1=$(date +%s.%N)
    log "  pre-loaded $n keyed tasks in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f s", b-a}')"
}

run_keys() {
    local label t0 out res lsn keyed
    want orchestrator || return 0
    for keyed in 0 1; do
        reset_all
        if [ "$keyed" = 1 ]; then
            label="16 workers, $KEYS keys (limit 1)"; preload_keyed "$KEY_JOBS"
        else
            label="16 workers, no keys"; preload orchestrator bench "$KEY_JOBS"
        fi
        log "keys: $label"
        settle
        out=$WORK/pgbench-keys-$keyed.log
        lsn=$(wal_lsn)
        t0=$(now_epoch)
        "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c 16 -j "$(threads_for 16)" -T "$PROC_CAP" \
            -D queue=bench -f "$BENCH_DIR/orch_process.sql" bench >"$out" 2>&1 &
        PGBENCH_PID=$!
        while kill -0 "$PGBENCH_PID" 2>/dev/null; do
            sleep 1
            if [ "$(all_done orchestrator)" = 1 ]; then
                kill -TERM "$PGBENCH_PID" 2>/dev/null || true
                break
            fi
        done
        wait "$PGBENCH_PID" 2>/dev/null || true
        PGBENCH_PID=
        pgbench_check "$out"
        res=$(count_jobs orchestrator bench processed "$t0")
        KRES[$label]=$(awk -v j="${res%|*}" -v s="${res#*|}" 'BEGIN{ if (s > 0) printf "%.0f", j/s; else print 0 }')
        KNOTE[$label]="${res%|*} jobs in $(printf '%.1f' "${res#*|}") s"
        log "  ${KNOTE[$label]} = ${KRES[$label]} jobs/s"
    done

    # Claim latency with B blocked keys: B keys each hold their one slot with
    # a claimed task (1 hour lease) and have 5 more tasks waiting gated; 1,000
    # tasks without keys are claimable; 1 client claims+completes (mixed 1:1
    # with enqueues, so the backlog stays).
    local b prefix
    for b in "$BLOCKED_SMALL" "$BLOCKED_BIG"; do
        reset_all
        log "keys: claim latency with $b blocked keys"
        sql "SELECT count(orch_enqueue('lat', '{}', concurrency_key => 'blocked-' || g))
               FROM generate_series(1, $b) g" >/dev/null
        sql "SELECT count(*) FROM orch_dequeue('lat', 'holder', $b, '1 hour')" >/dev/null
        sql "SELECT count(orch_enqueue('lat', '{}', concurrency_key => 'blocked-' || g))
               FROM generate_series(1, $b) g, generate_series(1, 5) r" >/dev/null
        preload orchestrator lat 1000
        settle
        prefix=$WORK/lat-keys-$b
        (cd "$WORK" && "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
            -c 1 -j 1 -T "$LAT_SECS" -D queue=lat \
            -f "$BENCH_DIR/orch_process.sql@1" -f "$BENCH_DIR/orch_enqueue.sql@1" \
            -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1) || true
        pgbench_check "$prefix.out"
        LAT[keys,orchestrator,$b]=$(lat_stats "$prefix".*[0-9])
        log "  p50/p90/p99/max/n = ${LAT[keys,orchestrator,$b]}  (gated: $(sql "SELECT count(*) FROM orch.tasks WHERE gated"))"
    done
}

# ---------------------------------------------------------------------------
# Workflows (orchestrator only): WF_RUNS runs of a published definition
# (bench/wf_definitions.sql) are started before the workers begin; 4 workers
# run bench/orch_process.sql -- the bare-task loop: claim one task
# (orch_dequeue), complete it (orch_complete) -- on queue 'wf', where every
# task is a step; each completion enqueues the next step(s) in its own
# transaction.  Runs are counted from orch.runs (state succeeded), steps
# from the step tasks completed; the window runs from pgbench's start to
# the last finish.
# ---------------------------------------------------------------------------
declare -A WRES          # WRES[label,runs|steps] = per second
declare -A WNOTE
WF_LINEAR="wf: linear, 5 steps"
WF_FAN="wf: fan-out 10 + join"
WF_BARE="wf: bare tasks, $WF_WORKERS workers"
WF_CHAIN="wf: bare task chains of 5"

start_runs() { # DEFINITION N: N runs, 500 orch_start per transaction
    local def=$1 n=$2 done=0 k t0 t1
    t0=$(date +%s.%N)
    while [ "$done" -lt "$n" ]; do
        k=$(( n - done < 500 ? n - done : 500 ))
        sql "SELECT count(orch_start('$def', jsonb_build_object('n', g)))
               FROM generate_series($done + 1, $done + $k) g" >/dev/null \
            || die "orch_start failed while starting the $def runs"
        done=$(( done + k ))
    done
    t1=$(date +%s.%N)
    log "  started $n runs of $def in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f s, %.0f runs/s", b-a, '"$n"'/(b-a)}')"
}

# wf_workers SCRIPT LOG DONE-SQL TARGET: WF_WORKERS pgbench workers run
# SCRIPT on queue wf until DONE-SQL (checked every second) reaches TARGET
# or PROC_CAP passes.
wf_workers() {
    local script=$1 out=$2 done_sql=$3 target=$4
    "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
        -c "$WF_WORKERS" -j "$(threads_for "$WF_WORKERS")" -T "$PROC_CAP" \
        -D queue=wf -f "$script" bench >"$out" 2>&1 &
    PGBENCH_PID=$!
    while kill -0 "$PGBENCH_PID" 2>/dev/null; do
        sleep 1
        if [ "$(sql "$done_sql")" -ge "$target" ]; then
            kill -TERM "$PGBENCH_PID" 2>/dev/null || true
            break
        fi
    done
    wait "$PGBENCH_PID" 2>/dev/null || true
    PGBENCH_PID=
    pgbench_check "$out"
}

run_wf() { # LABEL DEFINITION STEPS-PER-RUN
    local label=$1 def=$2 per=$3 t0 out res runs steps secs wal lsn
    want orchestrator || return 0
    reset_all
    sqlf "$BENCH_DIR/wf_definitions.sql"
    log "$label: $WF_RUNS runs ($per steps each), $WF_WORKERS workers"
    start_runs "$def" "$WF_RUNS"
    settle; profile_reset
    out=$WORK/pgbench-${label//[^A-Za-z0-9]/_}.log
    lsn=$(wal_lsn)
    t0=$(now_epoch)
    wf_workers "$BENCH_DIR/orch_process.sql" "$out" "SELECT count(*) FROM orch.runs WHERE state = 'succeeded'" "$WF_RUNS"
    res=$(sql "SELECT (SELECT count(*) FROM orch.runs WHERE state = 'succeeded'),
                      (SELECT count(*) FROM orch_tasks WHERE queue = 'wf' AND run_id IS NOT NULL
                                                         AND state = 'completed'),
                      coalesce(greatest(
                          (SELECT extract(epoch FROM max(finished_at)) FROM orch.runs WHERE state = 'succeeded'),
                          (SELECT extract(epoch FROM max(finished_at)) FROM orch_tasks
                            WHERE queue = 'wf' AND state = 'completed')) - $t0, 0)")
    IFS='|' read -r runs steps secs <<<"$res"
    wal=$(sql "SELECT CASE WHEN $steps > 0 THEN round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn') / $steps) END")
    WRES[$label,runs]=$(awk -v j="$runs" -v s="$secs" 'BEGIN{ if (s > 0) printf "%.0f", j/s; else print 0 }')
    WRES[$label,steps]=$(awk -v j="$steps" -v s="$secs" 'BEGIN{ if (s > 0) printf "%.0f", j/s; else print 0 }')
    WRES[$label,wal]=${wal:-}
    WNOTE[$label]="$runs runs succeeded, $steps steps in $(printf '%.1f' "$secs") s, ${wal:-?} B WAL/step"
    if [ "$runs" -lt "$WF_RUNS" ]; then
        WNOTE[$label]+=" (runs left: $(sql "SELECT string_agg(state || '=' || n, ' ' ORDER BY state)
                                             FROM (SELECT state, count(*) AS n FROM orch.runs
                                                    WHERE state <> 'succeeded' GROUP BY state) s"))"
    fi
    log "  ${WNOTE[$label]}: ${WRES[$label,runs]} runs/s, ${WRES[$label,steps]} steps/s"
    profile_dump "$label"
}

# The hand-made equivalent of the linear workflow: WF_RUNS chains of 5
# bare tasks, each completion enqueueing the next in its own transaction
# (bench/orch_chain.sql).  A step's cost includes enqueueing its task;
# this reference includes it too (the "process" figures do not: their
# tasks are enqueued before the clock starts).
run_chain() {
    local label=$1 n t0 out res steps secs wal lsn
    reset_all
    sqlf "$BENCH_DIR/wf_definitions.sql"
    n=$(( WF_RUNS * 5 ))
    sql "SELECT count(*) FROM orch_enqueue_batch('wf',
           (SELECT array_agg(jsonb_build_object('left', 5)) FROM generate_series(1, $WF_RUNS)))" >/dev/null
    log "$label: $WF_RUNS chains of 5 tasks, $WF_WORKERS workers"
    settle; profile_reset
    out=$WORK/pgbench-${label//[^A-Za-z0-9]/_}.log
    lsn=$(wal_lsn)
    t0=$(now_epoch)
    wf_workers "$BENCH_DIR/orch_chain.sql" "$out" \
        "SELECT count(*) FROM orch.tasks WHERE queue = 'wf' AND state = 'completed'" "$n"
    res=$(sql "SELECT count(*), coalesce(extract(epoch FROM max(finished_at)) - $t0, 0)
                 FROM orch.tasks WHERE queue = 'wf' AND state = 'completed'")
    IFS='|' read -r steps secs <<<"$res"
    wal=$(sql "SELECT CASE WHEN $steps > 0 THEN round(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn') / $steps) END")
    WRES[$label,steps]=$(awk -v j="$steps" -v s="$secs" 'BEGIN{ if (s > 0) printf "%.0f", j/s; else print 0 }')
    WRES[$label,wal]=${wal:-}
    WNOTE[$label]="$steps tasks in $(printf '%.1f' "$secs") s, ${wal:-?} B WAL/task"
    log "  ${WNOTE[$label]}: ${WRES[$label,steps]} tasks/s"
    profile_dump "$label"
}

run_workflows() {
    want orchestrator || return 0
    run_wf "$WF_LINEAR" bench_linear5 5
    run_chain "$WF_CHAIN"
    run_wf "$WF_FAN"    bench_fan10   12
    # The bare-task reference is the "process, 4 workers" orchestrator figure
    # of this run; without the process group, the same run is made here.
    if [ -z "${RES[process, 4 workers,orchestrator]:-}" ]; then
        SYSTEMS=orchestrator TP_SYSTEMS=orchestrator run_process "$WF_BARE" process "$WF_WORKERS" "$PROC_JOBS"
    fi
}

# ---------------------------------------------------------------------------
# Sub-workflows (orchestrator only): one parent run whose map step starts
# one child run per item (bench/subflow_definitions.sql: each child is one
# task step in queue 'sub'), for each N of SUB_SIZES.  Measured: the
# orch_start of the parent, which starts the N children and enqueues their
# tasks in its transaction, and the growth of its backend's peak resident
# memory (VmHWM of /proc/self/status, read by the backend itself, before
# and after); then WF_WORKERS workers run bench/orch_process.sql (claim one,
# complete it) on queue 'sub', together as many claims as there are tasks
# and a few more, until the parent succeeds (window: pgbench start .. the
# parent's finish), and the longest of their claim + complete pairs
# (pgbench -l).  The reference: the same N items as the tasks of a plain
# map step (no child runs).  Target: no call over SUB_LIMIT seconds.
# ---------------------------------------------------------------------------
declare -A SUB          # SUB[kind,N] = "start_s hwm_kb done_s longest_ms"

# sub_start DEFINITION N -> "run_id|seconds|kB": one session; the input is
# built before the clock starts
sub_start() {
    "${PSQL[@]}" -d bench -At <<EOF
SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s+(\d+) kB')::bigint AS h0,
       jsonb_build_object('items', (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, $2) g)) AS input
\gset
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT orch_start('$1', :'input') AS run \gset
SELECT :run, round(extract(epoch FROM clock_timestamp()) - :t0, 3),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s+(\d+) kB')::bigint - :h0;
EOF
}

run_subflows() {
    local n kind def res run start_s hwm t0 prefix per done_s longest state
    want orchestrator || return 0
    for n in $SUB_SIZES; do
        for kind in subflow map; do
            if [ "$kind" = subflow ]; then def=bench_sub_parent; else def=bench_sub_plainmap; fi
            reset_all
            sqlf "$BENCH_DIR/subflow_definitions.sql"
            settle
            log "subflows: $def with $n items"
            res=$(sub_start "$def" "$n") || die "subflows: orch_start of $def failed"
            IFS='|' read -r run start_s hwm <<<"$res"
            [ "$(sql "SELECT count(*) FROM orch.tasks WHERE queue = 'sub' AND state = 'queued'")" = "$n" ] \
                || die "subflows: $def did not enqueue $n tasks"
            if [ "$kind" = subflow ]; then
                [ "$(sql "SELECT count(*) FROM orch.runs WHERE parent_run_id = $run AND state = 'running'")" = "$n" ] \
                    || die "subflows: $def did not start $n children"
            fi
            sql "CHECKPOINT" >/dev/null
            prefix=$WORK/subflows-$kind-$n
            per=$(( (n + WF_WORKERS - 1) / WF_WORKERS + 2 ))
            t0=$(now_epoch)
            "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
                -c "$WF_WORKERS" -j "$(threads_for "$WF_WORKERS")" -t "$per" \
                -D queue=sub -f "$BENCH_DIR/orch_process.sql" \
                -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1 || true
            pgbench_check "$prefix.out"
            state=$(sql "SELECT state FROM orch.runs WHERE id = $run")
            [ "$state" = succeeded ] \
                || die "subflows: the parent is $state after the workers ($(sql "SELECT string_agg(state || '=' || n, ' ')
                         FROM (SELECT state, count(*) AS n FROM orch.tasks WHERE queue = 'sub' GROUP BY state) s"))"
            done_s=$(sql "SELECT round(extract(epoch FROM finished_at) - $t0, 3) FROM orch.runs WHERE id = $run")
            longest=$(lat_stats "$prefix".*[0-9] | awk '{ print $4 }')
            SUB[$kind,$n]="$start_s $hwm $done_s $longest"
            log "  start ${start_s} s, VmHWM +${hwm} kB; all done in ${done_s} s; longest claim+complete ${longest} ms"
        done
    done
}

report_subflows() {
    local n kind v label worst=0
    echo "sub-workflows (orchestrator; one parent run, its map step starts one child run per item, each child one task step;"
    echo "               $WF_WORKERS workers claim one + complete; reference: the same items as a plain map step's tasks)"
    printf '  %-22s | %6s | %9s | %11s | %9s | %9s | %10s | %8s | %s\n' \
        "" items "start s" "ms per item" "VmHWM +MB" "kB/item" "all done s" "items/s" "longest claim+complete ms"
    for n in $SUB_SIZES; do
        for kind in subflow map; do
            v=${SUB[$kind,$n]:-}
            [ -n "$v" ] || continue
            if [ "$kind" = subflow ]; then label="subflow map (children)"; else label="plain map (tasks)"; fi
            # shellcheck disable=SC2086
            set -- $v
            awk -v l="$label" -v n="$n" -v s="$1" -v h="$2" -v d="$3" -v m="$4" 'BEGIN {
                printf "  %-22s | %6d | %9.3f | %11.3f | %9.1f | %9.1f | %10.2f | %8.0f | %.1f\n",
                       l, n, s, 1000 * s / n, h / 1024, h / n, d, (d > 0) ? n / d : 0, m }'
            worst=$(awk -v w="$worst" -v s="$1" -v m="$4" 'BEGIN { x = (s > m / 1000) ? s : m / 1000; print (x > w) ? x : w }')
        done
    done
    awk -v w="$worst" -v lim="$SUB_LIMIT" 'BEGIN {
        printf "  longest call (orch_start, or a claim + complete pair): %.3f s   target no call over %d s: %s\n",
               w, lim, (w <= lim) ? "met" : "NOT met" }'
}

# ---------------------------------------------------------------------------
# Signals (orchestrator only): SIG_WARM + SIG_RUNS runs of bench_signal
# (bench/signal_definitions.sql) wait at step "w" for signal "go", with
# step "next" (a task in queue 'sig') after it.  One client signals them one
# after another and claims at once (bench/orch_signal_claim.sql): the
# round trip from orch_signal (its transaction: the wait consumes the
# signal, next's task is enqueued, the commit) to the claim of that task
# returning (a second transaction).  Beside it the reference: a plain
# task's orch_enqueue and its claim (bench/orch_enqueue_claim.sql).
# Latencies from pgbench -l, the first SIG_WARM of each left out (the
# connection's plans being made).
# ---------------------------------------------------------------------------
declare -A SIG          # SIG[signal|plain] = "p50 p90 p99 max n"
run_signals() {
    local kind prefix total claimed
    want orchestrator || return 0
    total=$(( SIG_WARM + SIG_RUNS ))
    for kind in signal plain; do
        reset_all
        sqlf "$BENCH_DIR/signal_definitions.sql"
        if [ "$kind" = signal ]; then
            sql "INSERT INTO bench_signal_runs
                 SELECT g, orch_start('bench_signal', jsonb_build_object('n', g)) FROM generate_series(1, $total) g" >/dev/null
            [ "$(sql "SELECT count(*) FROM orch_run_steps WHERE step_id = 'w' AND state = 'waiting'")" = "$total" ] \
                || die "signals: the runs do not all wait for their signal"
        fi
        settle
        log "signals: $kind, $total round trips"
        prefix=$WORK/signals-$kind
        if [ "$kind" = signal ]; then
            "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared -c 1 -j 1 -t "$total" \
                -D queue=sig -D i=0 -f "$BENCH_DIR/orch_signal_claim.sql" \
                -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1 || true
            claimed=$(sql "SELECT count(*) FROM orch_tasks WHERE queue = 'sig' AND state = 'executing'")
        else
            "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared -c 1 -j 1 -t "$total" \
                -D queue=sigbase -f "$BENCH_DIR/orch_enqueue_claim.sql" \
                -l --log-prefix="$prefix" bench >"$prefix.out" 2>&1 || true
            claimed=$(sql "SELECT count(*) FROM orch_tasks WHERE queue = 'sigbase' AND state = 'executing'")
        fi
        pgbench_check "$prefix.out"
        [ "$claimed" = "$total" ] || die "signals: $kind: $claimed of $total tasks were claimed"
        awk -v w="$SIG_WARM" '$2 > w' "$prefix".*[0-9] >"$prefix.measured"
        SIG[$kind]=$(lat_stats "$prefix.measured")
        log "  p50/p90/p99/max/n = ${SIG[$kind]}"
    done
}

report_signals() {
    local kind
    echo "signals (orchestrator; 1 client, one run after another; ms from the call's start to the claim's return; first $SIG_WARM left out):"
    for kind in signal plain; do
        [ -n "${SIG[$kind]:-}" ] || continue
        awk -v s="${SIG[$kind]}" -v k="$kind" 'BEGIN {
            split(s, a, " ");
            printf "  %-52s p50 %.3f p90 %.3f p99 %.3f max %.3f (n %d)\n",
                   (k == "signal") ? "orch_signal, then the claim of the next step'"'"'s task" : "orch_enqueue of a plain task, then its claim",
                   a[1], a[2], a[3], a[4], a[5] }'
    done
    if [ -n "${SIG[signal]:-}" ] && [ -n "${SIG[plain]:-}" ]; then
        awk -v s="${SIG[signal]}" -v p="${SIG[plain]}" 'BEGIN {
            split(s, a, " "); split(p, b, " ");
            printf "  signal / plain: p50 %.2fx, p99 %.2fx\n", (b[1] > 0) ? a[1] / b[1] : 0, (b[3] > 0) ? a[3] / b[3] : 0 }'
    fi
}

# ---------------------------------------------------------------------------
# Steady load: one producer enqueues one job per transaction at a fixed rate
# (pgbench -R), W workers claim up to B jobs, complete them, and sleep 5 ms
# when nothing was claimable.  Each run starts from empty tables whose
# statistics were just taken (VACUUM ANALYZE: a new installation, a
# truncated queue).  Latency is read from the rows: claimed_at (baseline:
# started_at) - created_at; a job still waiting at the end counts with the
# time it had waited then.  "started" is the share of the jobs the producer
# enqueued that were started within the run.
# ---------------------------------------------------------------------------
declare -A STEADY       # STEADY[config,side] = "started% p50 p95 p99" of each repetition, ';'-separated
STEADY_CONFIGS=()

steady_stats() { # SIDE [FROM_SECS TO_SECS] -> "started% p50 p95 p99" (ms)
    local side=$1 win="" tbl started created
    if [ "$side" = orchestrator ]; then tbl="orch.tasks"; started=claimed_at; else tbl=jobs; started=started_at; fi
    created=created_at
    if [ $# -ge 3 ]; then
        win="AND $created >= (SELECT min($created) FROM $tbl WHERE queue = 'steady') + interval '$2 seconds'
             AND $created <  (SELECT min($created) FROM $tbl WHERE queue = 'steady') + interval '$3 seconds'"
    fi
    sql "SELECT round(100.0 * count($started) / greatest(count(*), 1), 1),
                round(1000 * percentile_cont(0.5)  WITHIN GROUP (ORDER BY w)::numeric, 2),
                round(1000 * percentile_cont(0.95) WITHIN GROUP (ORDER BY w)::numeric, 2),
                round(1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY w)::numeric, 2)
           FROM (SELECT $started,
                        extract(epoch FROM coalesce($started, clock_timestamp()) - $created) AS w
                   FROM $tbl WHERE queue = 'steady' $win) s" | tr '|' ' '
}

# steady_run SIDE RATE WORKERS BATCH SECS [WORKER_SCRIPT]: one run; leaves
# the rows in place.  The workers poll every 5 ms (steady_worker), or wait
# in the claim (waiting_worker, orchestrator only).
steady_run() {
    local side=$1 rate=$2 workers=$3 batch=$4 secs=$5 kind=${6:-steady_worker} wpid out
    reset_all
    if [ "$side" = orchestrator ]; then sql "SELECT orch_create_queue('steady')" >/dev/null; fi
    settle
    out=$WORK/steady-$side-$rate-$workers-$batch
    "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
        -c "$workers" -j "$(threads_for "$workers")" -T $(( secs + 2 )) \
        -D queue=steady -D batch="$batch" -f "$(script_for "$side" "$kind")" bench >"$out.workers" 2>&1 &
    wpid=$!
    "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
        -c 1 -j 1 -R "$rate" -T "$secs" \
        -D queue=steady -f "$(script_for "$side" enqueue)" bench >"$out.producer" 2>&1 || true
    wait "$wpid" 2>/dev/null || true
    pgbench_check "$out.workers"
    pgbench_check "$out.producer"
}

run_steady() {
    local cfg rate workers batch side rep v
    for cfg in "500 4 1" "250 4 1" "500 16 1" "500 4 10"; do
        # shellcheck disable=SC2086
        set -- $cfg; rate=$1; workers=$2; batch=$3
        STEADY_CONFIGS+=("$cfg")
        for rep in $(seq 1 "$REPS"); do
        for side in $(sides_for "$rep"); do
            log "steady: $rate jobs/s, $workers workers claiming $batch: $side"
            steady_run "$side" "$rate" "$workers" "$batch" "$STEADY_SECS"
            v=$(steady_stats "$side")
            STEADY[$cfg,$side]="${STEADY[$cfg,$side]:-}${STEADY[$cfg,$side]:+;}$v"
            log "  started % / p50 / p95 / p99 ms: $v"
        done
        done
    done
    # Drift: one long run per side; the first minute's p99 against the last's.
    for side in $SYSTEMS; do
        log "steady, ${STEADY_LONG}s: $side"
        steady_run "$side" 500 4 1 "$STEADY_LONG"
        STEADY[drift,$side]="$(steady_stats "$side" 0 "$STEADY_WIN");$(steady_stats "$side" $(( STEADY_LONG - STEADY_WIN )) "$STEADY_LONG")"
        log "  first / last ${STEADY_WIN}s: ${STEADY[drift,$side]}"
    done
}

# ---------------------------------------------------------------------------
# Waiting claims (orch_dequeue with wait): the steady load of 500 jobs/s with
# 4 workers whose claims wait in the server (a commit wakes them), beside
# the orchestrator's and the baseline's workers polling every 5 ms, in the
# same repetitions.  Then the cost of idle workers: 16 workers waiting (or
# polling every 5 ms) on an empty queue for WAIT_IDLE_SECS, as the CPU time
# of their backends.  Targets: every task started, p99 <= 10 ms; 16 idle
# waiting workers under 2% of one core.
# ---------------------------------------------------------------------------
declare -A WAITING      # WAITING[kind] = "started% p50 p95 p99" of each repetition, ';'-separated
declare -A IDLE         # IDLE[kind] = % of one core
WAIT_IDLE_SECS=${BENCH_WAIT_IDLE_SECS:-10}
run_waiting() {
    local rep kind side v
    want orchestrator || return 0
    for rep in $(seq 1 "$REPS"); do
        for kind in waiting polling baseline; do
            case $kind in
                waiting)  side=orchestrator; steady_run orchestrator 500 4 1 "$STEADY_SECS" waiting_worker ;;
                polling)  side=orchestrator; steady_run orchestrator 500 4 1 "$STEADY_SECS" ;;
                baseline) want baseline || continue; side=baseline; steady_run baseline 500 4 1 "$STEADY_SECS" ;;
            esac
            v=$(steady_stats "$side")
            WAITING[$kind]="${WAITING[$kind]:-}${WAITING[$kind]:+;}$v"
            log "waiting claims, 500/s, 4 workers, $kind: started % / p50 / p95 / p99 ms: $v"
        done
    done
    for kind in waiting polling; do
        IDLE[$kind]=$(idle_cost "$kind")
        log "16 idle workers, $kind: ${IDLE[$kind]}% of one core"
    done
}

# idle_cost KIND: the CPU time of 16 workers' backends on an empty queue,
# as % of one core, over WAIT_IDLE_SECS.
idle_cost() {
    local kind=$1 wpid pids t0 t1 ticks hz script
    reset_all
    sql "SELECT orch_create_queue('steady')" >/dev/null
    settle
    if [ "$kind" = waiting ]; then script=waiting_worker; else script=steady_worker; fi
    "$PGBIN/pgbench" -h "$SOCK" -p "$PORT" -U postgres -n -M prepared \
        -c 16 -j "$(threads_for 16)" -T $(( WAIT_IDLE_SECS + 4 )) \
        -D queue=steady -D batch=1 -f "$(script_for orchestrator "$script")" bench >"$WORK/idle-$kind.out" 2>&1 &
    wpid=$!
    sleep 2
    pids=$(sql "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE application_name = 'pgbench'")
    hz=$(getconf CLK_TCK)
    t0=$(for p in $pids; do awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null; done | awk '{ s += $1 } END { print s + 0 }')
    sleep "$WAIT_IDLE_SECS"
    t1=$(for p in $pids; do awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null; done | awk '{ s += $1 } END { print s + 0 }')
    wait "$wpid" 2>/dev/null || true
    awk -v a="$t0" -v b="$t1" -v hz="$hz" -v s="$WAIT_IDLE_SECS" 'BEGIN { printf "%.2f", 100 * (b - a) / hz / s }'
}

report_waiting() {
    local kind label
    echo "waiting claims (500 jobs/s from one producer, 4 workers, claim 1; each run ${STEADY_SECS}s; latency = claimed - created):"
    printf '  %-44s | %9s | %9s | %9s | %9s | %s\n' workers "started %" "p50 ms" "p95 ms" "p99 ms" target
    for kind in waiting polling baseline; do
        [ -n "${WAITING[$kind]:-}" ] || continue
        case $kind in
            waiting)  label="orchestrator, claims that wait (1 s)" ;;
            polling)  label="orchestrator, polling every 5 ms" ;;
            baseline) label="baseline, polling every 5 ms" ;;
        esac
        # shellcheck disable=SC2046
        set -- $(steady_median "${WAITING[$kind]}")
        local met=""
        [ "$kind" = waiting ] && met=$(awk -v s="$1" -v p="$4" 'BEGIN { print "all started, p99 <= 10 ms: " ((s >= 99.5 && p <= 10) ? "met" : "NOT met") }')
        printf '  %-44s | %9s | %9s | %9s | %9s | %s\n' "$label" "$1" "$2" "$3" "$4" "$met"
    done
    if [ -n "${IDLE[waiting]:-}" ]; then
        awk -v w="${IDLE[waiting]}" -v p="${IDLE[polling]:-0}" -v s="$WAIT_IDLE_SECS" 'BEGIN {
            printf "  16 idle workers for %ss (CPU of their backends, %% of one core): waiting %.2f%%, polling every 5 ms %.2f%%   target waiting < 2%%: %s\n",
                   s, w, p, (w < 2) ? "met" : "NOT met" }'
    fi
}

# steady_median "a b c d;a b c d;..." -> the median of each field
steady_median() {
    local f out=""
    for f in 1 2 3 4; do
        out+="$(echo "$1" | tr ';' '\n' | awk -v f="$f" '{ print $f }' | median) "
    done
    echo "$out"
}

report_steady() {
    local cfg side v
    echo "steady load (one producer at a fixed rate, one job per transaction; workers poll every 5 ms when idle;"
    echo "              each run ${STEADY_SECS}s from empty tables just analyzed; latency = claimed - created, from the rows)"
    printf '%-26s | %-14s | %9s | %9s | %9s | %9s | %s\n' "rate, workers, claim" side "started %" "p50 ms" "p95 ms" "p99 ms" "target"
    printf '%s\n' "---------------------------+----------------+-----------+-----------+-----------+-----------+-----------------"
    for cfg in "${STEADY_CONFIGS[@]}"; do
        # shellcheck disable=SC2086
        set -- $cfg
        local label="$1/s, $2 workers, claim $3" tgt
        if [ "$1" = 250 ]; then tgt="p99 <= 15 ms"; else tgt="p99 <= 25 ms"; fi
        for side in $SYSTEMS; do
            [ -n "${STEADY[$cfg,$side]:-}" ] || continue
            # shellcheck disable=SC2046
            set -- $(steady_median "${STEADY[$cfg,$side]}")
            local met=""
            if [ "$side" = orchestrator ]; then
                met=$(awk -v s="$1" -v p="$4" -v t="${tgt##* <= }" 'BEGIN { t += 0; print (s >= 98 && p <= t) ? "met" : "NOT met" }')
                met="$tgt, >= 98% started: $met"
            fi
            printf '%-26s | %-14s | %9s | %9s | %9s | %9s | %s\n' "$label" "$side" "$1" "$2" "$3" "$4" "$met"
            label=""
        done
    done
    if [ "$REPS" -gt 1 ]; then echo "each row: the median of each column over $REPS repetitions, the sides alternating; repetitions: started% p50 p95 p99"; fi
    for cfg in "${STEADY_CONFIGS[@]}"; do
        for side in $SYSTEMS; do
            [ -n "${STEADY[$cfg,$side]:-}" ] && printf '  %-24s %-13s %s\n' "$cfg" "$side" "${STEADY[$cfg,$side]}"
        done
    done
    for side in $SYSTEMS; do
        v=${STEADY[drift,$side]:-}
        [ -n "$v" ] || continue
        awk -v a="${v%;*}" -v b="${v#*;}" -v side="$side" -v long="$STEADY_LONG" -v win="$STEADY_WIN" \
            -v tgt="$( [ "$side" = orchestrator ] && echo 1 || echo 0)" 'BEGIN {
            split(a, x, " "); split(b, y, " "); r = (x[4] > 0) ? y[4] / x[4] : 0;
            printf "drift, %ss at 500/s, 4 workers, %s: first %ss p99 %.2f ms (%s%% started), last %ss p99 %.2f ms (%s%% started) = %.2fx",
                   long, side, win, x[4], x[1], win, y[4], y[1], r;
            if (tgt) printf "   target <= 1.50x: %s", (r <= 1.5) ? "met" : "NOT met";
            printf "\n" }'
    done
}

T_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# targets: 0.85x of the hand-written queue, every row
add_workload "enqueue, 1 client"                 0.85
add_workload "enqueue, 8 clients"                0.85
add_workload "enqueue, batches of 1000"          0.85
add_workload "process, 1 worker"                 0.85
add_workload "process, 4 workers"                0.85
add_workload "process, 16 workers"               0.85
add_workload "process, claim 100, $BATCH_WORKERS workers" 0.85

if group enqueue; then
    run_enqueue "enqueue, 1 client"        enqueue       1
    run_enqueue "enqueue, 8 clients"       enqueue       8
    run_enqueue "enqueue, batches of 1000" enqueue_batch 1
fi
if group process; then
    run_process "process, 1 worker"        process       1  "$PROC_JOBS"
    run_process "process, 4 workers"       process       4  "$PROC_JOBS"
    run_process "process, 16 workers"      process       16 "$PROC_JOBS"
fi
if group batch; then
    run_process "process, claim 100, $BATCH_WORKERS workers" process_batch "$BATCH_WORKERS" "$BATCH_JOBS"
fi
if group wf; then run_workflows; fi
if group subflows; then run_subflows; fi
if group signals; then run_signals; fi
if group latency; then run_latency; fi
if group steady; then run_steady; fi
if group backlog; then run_backlog; fi
if group tenants; then run_tenants; fi
if group readers; then run_readers; fi
if group fair; then run_fair; fi
if group waiting; then run_waiting; fi
if group retention; then run_retention; fi
if group keys; then run_keys; fi
if group decay; then run_decay; fi
T_END=$(date +%s)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------
setting() { sql "SELECT current_setting('$1')"; }
fmt_int() { # 1234567 -> 1,234,567
    if [ -n "${1:-}" ]; then echo "$1" | sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta'; else echo n/a; fi
}

# The workflow figures, in the style of the task table (orchestrator only).
report_wf() {
    local wl bare bare_from bare_note steps ratio=n/a met=- walr=n/a bare_wal
    echo "workflows (orchestrator; $(fmt_int "$WF_RUNS") runs each, all started before $WF_WORKERS workers begin; one step task per claim + complete)"
    printf '%-36s | %19s | %15s | %6s | %6s | %s\n' \
        workload "runs/s" "steps/s" ratio target met
    printf '%s\n' "-------------------------------------+---------------------+-----------------+--------+--------+-----"
    for wl in "$WF_LINEAR" "$WF_FAN"; do
        printf '%-36s | %19s | %15s | %6s | %6s | %s\n' "$wl" \
            "$(fmt_int "${WRES[$wl,runs]:-}")" "$(fmt_int "${WRES[$wl,steps]:-}")" "" "" ""
    done
    bare=${RES[process, 4 workers,orchestrator]:-}; bare_from='"process, 4 workers" above'
    bare_note=${NOTE[process, 4 workers,orchestrator]:-}
    if [ -z "$bare" ]; then
        bare=${RES[$WF_BARE,orchestrator]:-}; bare_note=${NOTE[$WF_BARE,orchestrator]:-}
        bare_from="measured in the wf group: ${bare_note:-n/a}"
    fi
    # WAL per step / WAL per bare job: the same comparison in bytes written,
    # which other work on the machine does not skew.
    bare_wal=$(printf '%s' "$bare_note" | sed -n 's/.* \([0-9][0-9]*\) B WAL\/job.*/\1/p')
    if [ -n "$bare_wal" ] && [ -n "${WRES[$WF_LINEAR,wal]:-}" ]; then
        walr=$(awk -v s="${WRES[$WF_LINEAR,wal]}" -v b="$bare_wal" 'BEGIN{printf "%.2fx", s/b}')
    fi
    steps=${WRES[$WF_LINEAR,steps]:-}
    local chain=${WRES[$WF_CHAIN,steps]:-} cratio=n/a cmet=- cwalr=n/a
    if [ -n "$bare" ] && [ -n "$steps" ] && [ "$steps" -gt 0 ]; then
        ratio=$(awk -v b="$bare" -v s="$steps" 'BEGIN{printf "%.2f", b/s}')
    fi
    if [ -n "$chain" ] && [ -n "$steps" ] && [ "$steps" -gt 0 ]; then
        cratio=$(awk -v b="$chain" -v s="$steps" 'BEGIN{printf "%.2f", b/s}')
        cmet=$(awk -v r="$cratio" -v t="$WF_TARGET" 'BEGIN{print (r <= t) ? "yes" : "NO"}')
    fi
    if [ -n "${WRES[$WF_CHAIN,wal]:-}" ] && [ -n "${WRES[$WF_LINEAR,wal]:-}" ]; then
        cwalr=$(awk -v s="${WRES[$WF_LINEAR,wal]}" -v b="${WRES[$WF_CHAIN,wal]}" 'BEGIN{printf "%.2fx", s/b}')
    fi
    printf '%-36s | %19s | %15s | %6s | %6s | %s\n' "$WF_CHAIN" "" "$(fmt_int "$chain")" "" "" ""
    printf '%-36s | %19s | %15s | %6s | %6s | %s\n' "wf: step cost / bare task cost" \
        "" "" "$cratio" "<=${WF_TARGET}x" "$cmet"
    printf '%-36s | %19s | %15s | %6s | %6s | %s\n' "  (vs claim + complete only)" \
        "" "" "$ratio" "" ""
    echo
    echo "runs counted from orch.runs (succeeded), steps from their completed tasks; window = pgbench start .. last finish"
    for wl in "$WF_LINEAR" "$WF_FAN"; do
        printf '  %-30s %s\n' "$wl" "${WNOTE[$wl]:-n/a}"
    done
    printf '  %-30s %s\n' "$WF_CHAIN" "${WNOTE[$WF_CHAIN]:-n/a}"
    printf '  %-30s %s\n' "wf: step cost / bare task cost" \
        "= chained bare tasks/s / linear steps/s = $(fmt_int "$chain") / $(fmt_int "$steps"): the same 5 tasks in a line, each enqueued by its predecessor's completion, with and without the workflow layer"
    printf '  %-30s %s\n' "" "WAL per linear step / per chained task = ${WRES[$WF_LINEAR,wal]:-?} / ${WRES[$WF_CHAIN,wal]:-?} B = $cwalr"
    printf '  %-30s %s\n' "  (vs claim + complete only)" \
        "= bare-task jobs/s / linear steps/s = $(fmt_int "$bare") / $(fmt_int "$steps") (bare tasks: $bare_from; their enqueue is not timed); WAL ${WRES[$WF_LINEAR,wal]:-?} / ${bare_wal:-?} B = $walr"
}

report() {
    local wl o b ratio tgt met mem fs
    echo
    echo "orchestrator benchmark ($( [ "$QUICK" = 1 ] && echo "QUICK smoke run" || echo "full run"), $(date -u '+%Y-%m-%d %H:%M UTC'), $(( T_END - T_START )) s)"
    echo
    if group enqueue || group process || group batch; then
    printf '%-36s | %19s | %15s | %11s | %6s | %6s | %6s | %s\n' \
        workload "orchestrator jobs/s" "baseline jobs/s" "pgmq jobs/s" "/plain" "/pgmq" target met
    printf '%s\n' "-------------------------------------+---------------------+-----------------+-------------+--------+--------+--------+-----"
    local p rp
    for wl in "${WORKLOADS[@]}"; do
        o=${RES[$wl,orchestrator]:-}
        b=${RES[$wl,baseline]:-}
        p=${RES[$wl,pgmq]:-}
        ratio=n/a; rp=n/a; met=-
        if [ -n "$o" ] && [ -n "$b" ] && [ "$b" -gt 0 ]; then
            ratio=$(awk -v o="$o" -v b="$b" 'BEGIN{printf "%.2f", o/b}')
        fi
        if [ -n "$o" ] && [ -n "$p" ] && [ "$p" -gt 0 ]; then
            rp=$(awk -v o="$o" -v b="$p" 'BEGIN{printf "%.2f", o/b}')
        fi
        tgt=${TARGET[$wl]}
        if [ -n "$tgt" ] && [ "$ratio" != n/a ]; then
            met=$(awk -v r="$ratio" -v t="$tgt" 'BEGIN{print (r >= t) ? "yes" : "NO"}')
        fi
        printf '%-36s | %19s | %15s | %11s | %6s | %6s | %6s | %s\n' "$wl" \
            "$(fmt_int "$o")" "$(fmt_int "$b")" "$(fmt_int "$p")" \
            "$ratio" "$rp" "${tgt:+>=${tgt}x}" "$met"
    done
    echo
    [ -n "$PGMQ_NOTE" ] && echo "$PGMQ_NOTE"
    echo "jobs counted from the tables; window = pgbench start .. last job's timestamp; WAL written during the run per job"
    if [ "$REPS" -gt 1 ]; then echo "each row: the median of $REPS repetitions, the sides alternating (A B, B A, A B)"; fi
    # WAL per job of the happy path: its enqueue plus its claim and complete
    local pair e p wo wb
    for pair in "one at a time|enqueue, 1 client|process, 1 worker" \
                "in batches|enqueue, batches of 1000|process, claim 100, $BATCH_WORKERS workers"; do
        e=${pair#*|}; p=${e#*|}; e=${e%%|*}
        wo=; wb=
        if [ -n "${WAL[$e,orchestrator]:-}" ] && [ -n "${WAL[$p,orchestrator]:-}" ]; then wo=$(( ${WAL[$e,orchestrator]} + ${WAL[$p,orchestrator]} )); fi
        if [ -n "${WAL[$e,baseline]:-}" ] && [ -n "${WAL[$p,baseline]:-}" ]; then wb=$(( ${WAL[$e,baseline]} + ${WAL[$p,baseline]} )); fi
        [ -n "$wo" ] && [ -n "$wb" ] || continue
        awk -v o="$wo" -v b="$wb" -v what="${pair%%|*}" 'BEGIN {
            r = (b > 0) ? o / b : 0;
            printf "WAL per job, happy path %s (enqueue + claim + complete): orchestrator %d B, baseline %d B = %.2fx   target <= 1.30x: %s\n",
                   what, o, b, r, (r <= 1.3) ? "met" : "NOT met" }'
    done
    for wl in "${WORKLOADS[@]}"; do
        printf '  %-30s orchestrator: %-44s baseline: %-44s pgmq: %s\n' "$wl" \
            "${NOTE[$wl,orchestrator]:-n/a}" "${NOTE[$wl,baseline]:-n/a}" "${NOTE[$wl,pgmq]:-n/a}"
    done
    echo
    fi
    if want orchestrator && group wf; then report_wf; echo; fi
    if want orchestrator && group subflows; then report_subflows; echo; fi
    if want orchestrator && group signals; then report_signals; echo; fi
    if group latency; then
    echo "latency, 1 client, backlog kept near its size (ms; from pgbench -l, per transaction)"
    printf '%-14s | %-15s | %10s | %9s | %9s | %9s | %9s | %7s\n' \
        side measured waiting p50 p90 p99 max n
    printf '%s\n' "---------------+-----------------+------------+-----------+-----------+-----------+-----------+--------"
    local side kind size v what
    for kind in process claim; do
        for side in $SYSTEMS; do
            for size in "$LAT_SMALL" "$LAT_BIG"; do
                v=${LAT[$kind,$side,$size]:-}
                [ -n "$v" ] || continue
                if [ "$kind" = process ]; then what="claim+complete"; else what="claim only"; fi
                # shellcheck disable=SC2086
                set -- $v
                printf '%-14s | %-15s | %10s | %9s | %9s | %9s | %9s | %7s\n' \
                    "$side" "$what" "$(fmt_int "$size")" "$1" "$2" "$3" "$4" "$5"
            done
        done
    done
    echo
    for kind in process claim; do
        for side in $SYSTEMS; do
            local s=${LAT[$kind,$side,$LAT_SMALL]:-} l=${LAT[$kind,$side,$LAT_BIG]:-}
            [ -n "$s" ] && [ -n "$l" ] || continue
            if [ "$kind" = process ]; then what="claim+complete"; else what="claim only"; fi
            awk -v s="$s" -v l="$l" -v side="$side" -v what="$what" -v big="$LAT_BIG" -v small="$LAT_SMALL" \
                -v tgt="$( [ "$side" = orchestrator ] && [ "$kind" = process ] && echo 1 || echo 0)" 'BEGIN {
                    split(s, a, " "); split(l, b, " ");
                    r = (a[3] > 0) ? b[3] / a[3] : 0;
                    printf "%s %s p99: %s waiting %.3f ms vs %s waiting %.3f ms = %.2fx", side, what, big, b[3], small, a[3], r;
                    if (tgt) printf "   target <= 2.00x: %s", (r <= 2.0) ? "met" : "NOT met";
                    printf "\n" }'
        done
    done

    fi
    if group steady; then echo; report_steady; echo; fi
    if group waiting; then echo; report_waiting; echo; fi
    if [ -n "${LAT[backlog,orchestrator,0]:-}${LAT[backlog,baseline,0]:-}" ]; then
        echo "backlog not due (claim+complete, 1 client; ms): $LAT_SMALL ready alone vs with $(fmt_int "$DELAYED") not due"
        for side in $SYSTEMS; do
            local e=${LAT[backlog,$side,0]:-} f=${LAT[backlog,$side,$DELAYED]:-}
            [ -n "$e" ] && [ -n "$f" ] || continue
            awk -v s="$e" -v l="$f" -v side="$side" -v tgt="$( [ "$side" = orchestrator ] && echo 1 || echo 0)" 'BEGIN {
                split(s, a, " "); split(l, b, " "); r = (a[3] > 0) ? b[3] / a[3] : 0;
                printf "  %-13s p50 %.3f / %.3f   p99 %.3f / %.3f   p99 ratio %.2fx", side, a[1], b[1], a[3], b[3], r;
                if (tgt) printf "   target <= 1.20x: %s", (r <= 1.2) ? "met" : "NOT met";
                printf "\n" }'
        done
    fi
    if [ -n "${LAT[tenants,orchestrator,0]:-}" ] && [ -n "${LAT[tenants,orchestrator,$NOISY]:-}" ]; then
        echo "noisy neighbour (orchestrator; claim+complete of tenant quiet, 1 client; ms): $LAT_SMALL waiting alone vs behind $(fmt_int "$NOISY") of tenant noisy"
        awk -v s="${LAT[tenants,orchestrator,0]}" -v l="${LAT[tenants,orchestrator,$NOISY]}" 'BEGIN {
            split(s, a, " "); split(l, b, " "); r = (a[3] > 0) ? b[3] / a[3] : 0;
            printf "  %-13s p50 %.3f / %.3f   p99 %.3f / %.3f   p99 ratio %.2fx   target <= 2.00x: %s\n",
                   "orchestrator", a[1], b[1], a[3], b[3], r, (r <= 2.0) ? "met" : "NOT met" }'
        if [ -n "${LAT[tenants,orchestrator,stale]:-}" ]; then
            awk -v l="${LAT[tenants,orchestrator,stale]}" 'BEGIN {
                split(l, b, " ");
                printf "  statistics taken before tenant quiet existed (autovacuum off): p50 %.3f p99 %.3f max %.3f ms   target p99 <= 5 ms: %s\n",
                       b[1], b[3], b[4], (b[3] <= 5.0) ? "met" : "NOT met" }'
        fi
    fi
    if [ -n "${READ[by_id]:-}" ]; then
        echo "readers (orchestrator; a role bound to tenant quiet, $LAT_SMALL tasks, beside $(fmt_int "$NOISY") newer of tenant noisy; 1 client; ms):"
        for shape in by_id newest view_by_id by_id_big newest_big; do
            [ -n "${READ[$shape]:-}" ] || continue
            awk -v s="${READ[$shape]}" -v n="$shape" 'BEGIN {
                split(s, a, " ");
                label = (n == "by_id") ? "orch_task_rows, one task by id" : (n == "newest") ? "orch_task_rows, the newest 50" : \
                        (n == "by_id_big") ? "as tenant noisy: one task by id" : (n == "newest_big") ? "as tenant noisy: the newest 50" : \
                        "orch_tasks WHERE task_id = (the view)";
                printf "  %-38s p50 %.3f p99 %.3f max %.3f (n %d)", label, a[1], a[3], a[4], a[5];
                if (n != "view_by_id") printf "   target p99 <= 5 ms: %s", (a[3] <= 5.0) ? "met" : "NOT met";
                printf "\n" }'
        done
    fi
    if [ -n "${FAIR[fair]:-}" ] && [ -n "${FAIR[lat]:-}" ]; then
        echo "fair claims (orchestrator; a claim of 10, rolled back, 1 client; $(fmt_int "$NOISY") tasks of one tenant, then one each of $(fmt_int "$FAIR_KEYS") others; ms):"
        for q in fair lat; do
            awk -v s="${FAIR[$q]}" -v q="$q" 'BEGIN {
                split(s, a, " ");
                printf "  %-44s p50 %.3f p99 %.3f max %.3f (n %d)\n",
                       (q == "fair") ? "fairness round_robin (10 tenants served)" : "fairness none (the big tenant'"'"'s 10)",
                       a[1], a[3], a[4], a[5] }'
        done
    fi
    if [ -n "${RET[off]:-}" ] && [ -n "${RET[on]:-}" ]; then
        echo "retention (orchestrator; $RET_WORKERS workers claim one + complete for ${RET_SECS}s; retention ${RET_KEEP}s, history partitions of ${RET_PART}s, orch_maintain every ${RET_EVERY}s):"
        awk -v off="${RET[off]}" -v on="${RET[on]}" 'BEGIN {
            split(off, a, " "); split(on, b, " "); r = (a[1] > 0) ? b[1] / a[1] : 0;
            printf "  without %d jobs/s, with %d jobs/s (%d finished tasks purged during the run) = %.2fx   target >= 0.90x: %s\n",
                   a[1], b[1], b[2], r, (r >= 0.9) ? "met" : "NOT met" }'
    fi
    if [ "${#DECAY_ROWS[@]}" -gt 0 ]; then
        echo
        echo "no decay: $DECAY_ROUNDS rounds of $(fmt_int "$DECAY_CHUNK") tasks (enqueue batches of 1,000; $DECAY_WORKERS workers claim 100 + orch_complete_batch;"
        echo "          orch_maintain every second, retention ${DECAY_RETENTION}s; $(fmt_int "${DECAY_PURGED:-0}") tasks purged in all)"
        printf '  %5s | %12s | %12s | %9s | %10s | %11s | %10s\n' round "enqueue/s" "process/s" "tasks MB" "events MB" "attempts MB" "task rows"
        local r
        for r in "${DECAY_ROWS[@]}"; do
            # shellcheck disable=SC2086
            set -- $r
            printf '  %5s | %12s | %12s | %9s | %10s | %11s | %10s\n' "$1" "$(fmt_int "$2")" "$(fmt_int "$3")" "$4" "$5" "$6" "$(fmt_int "$7")"
        done
        # shellcheck disable=SC2086
        set -- ${DECAY_ROWS[0]}; local e1=$2 p1=$3
        # shellcheck disable=SC2086
        set -- ${DECAY_ROWS[${#DECAY_ROWS[@]}-1]}; local en=$2 pn=$3
        awk -v e1="$e1" -v p1="$p1" -v en="$en" -v pn="$pn" 'BEGIN {
            re = (e1 > 0) ? en / e1 : 0; rp = (p1 > 0) ? pn / p1 : 0;
            printf "  last round / first round: enqueue %.2fx, processing %.2fx   target >= 0.90x: %s\n", re, rp, (rp >= 0.9 && re >= 0.9) ? "met" : "NOT met" }'
    fi
    if [ -n "${KRES[16 workers, no keys]:-}" ] && [ -n "${KRES[16 workers, $KEYS keys (limit 1)]:-}" ]; then
        local kk=${KRES[16 workers, $KEYS keys (limit 1)]} kn=${KRES[16 workers, no keys]}
        echo "concurrency keys (orchestrator against itself):"
        printf '  %-34s %8s jobs/s   (%s)\n' "16 workers, no keys" "$(fmt_int "$kn")" "${KNOTE[16 workers, no keys]}"
        printf '  %-34s %8s jobs/s   (%s)\n' "16 workers, $KEYS keys (limit 1)" "$(fmt_int "$kk")" "${KNOTE[16 workers, $KEYS keys (limit 1)]}"
        awk -v k="$kk" -v n="$kn" 'BEGIN{ r = (n > 0) ? k / n : 0; printf "  ratio keys / no keys = %.2f   target >= 0.70: %s\n", r, (r >= 0.7) ? "met" : "NOT met" }'
        local sm=${LAT[keys,orchestrator,$BLOCKED_SMALL]:-} bg=${LAT[keys,orchestrator,$BLOCKED_BIG]:-}
        if [ -n "$sm" ] && [ -n "$bg" ]; then
            awk -v s="$sm" -v l="$bg" -v small="$BLOCKED_SMALL" -v big="$BLOCKED_BIG" 'BEGIN {
                split(s, a, " "); split(l, b, " ");
                printf "  claim+complete with %s blocked keys: p50 %.3f p99 %.3f ms; with %s: p50 %.3f p99 %.3f ms; p99 ratio %.2fx   target: no growth (<= 1.5x): %s\n",
                    small, a[1], a[3], big, b[1], b[3], (a[3] > 0) ? b[3] / a[3] : 0, (a[3] > 0 && b[3] / a[3] <= 1.5) ? "met" : "NOT met" }'
        fi
    fi
    echo
    mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
    fs=$(df -PT "$DATA" | awk 'NR == 2 {print $2 " on " $1}')
    echo "machine: $(nproc) CPUs ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $mem RAM, kernel $(uname -r), data dir $fs"
    echo "load:    /proc/loadavg $LOAD_START at start, $LOAD_END at end (the benchmark itself adds up to ~2)"
    if awk -v l="${LOAD_START%% *}" 'BEGIN{exit !(l > 1.0)}'; then
        echo "WARNING: the machine was busy when the run started; other work skews both sides (compare ratios, rerun when idle)"
    fi
    echo "server:  $(sql 'SELECT version()')"
    echo "settings (same for both sides):"
    local name line=""
    for name in shared_buffers max_connections synchronous_commit fsync full_page_writes wal_level \
                max_wal_size checkpoint_timeout work_mem maintenance_work_mem autovacuum autovacuum_naptime jit \
                random_page_cost huge_pages shared_preload_libraries; do
        line+="$name=$(setting "$name") "
    done
    echo "$line" | fold -s -w 96 | sed 's/^/  /' 
    echo "sizes: enqueue ${ENQ_SECS}s per run; process $PROC_JOBS pre-loaded jobs per run ($BATCH_JOBS for claim 100; cap ${PROC_CAP}s);" \
         "latency ${LAT_SECS}s claim+complete, ${CLAIM_SECS}s claim-only, backlogs $LAT_SMALL and $LAT_BIG"
    echo "pgbench: -M prepared, Unix socket, -j min(clients, nproc); extension built from $REPO" \
         "($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no commit'))"
    [ "$PROFILE" = 1 ] && echo "NOTE: BENCH_PROFILE=1 (pg_stat_statements track=all loaded): not for headline numbers"
    return 0
}

if [ -n "$OUT" ]; then report | tee "$OUT"; else report; fi
if [ "$PROFILE" = 1 ] && [ "$KEEP" = 1 ]; then log "profile: $WORK/profile.txt"; fi
