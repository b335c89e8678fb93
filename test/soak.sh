#!/usr/bin/env bash
# test/soak.sh: the fault-injection suite (t/010_worker_kills.pl and
# t/011_backend_kills_and_restarts.pl) in soak mode: many more jobs and
# faults than the CI run.  Run it by hand, as root or as the postgres OS
# user, after `make && make install`:
#
#   bash test/soak.sh
#   SOAK_JOBS=20000 SOAK_KILLS=100 bash test/soak.sh
#   SOAK_TESTS=010 SOAK_SEED=4242 bash test/soak.sh
#
# Knobs (environment; the tests read them, with small CI defaults):
#   SOAK_JOBS            jobs per test                      (default 50000; CI 5000)
#   SOAK_KILLS           kill -9 of worker processes, t/010 (default 300;   CI 30)
#   SOAK_BACKEND_KILLS   kill -9 of worker backends, t/011  (default 50;    CI 10)
#   SOAK_RESTARTS        immediate stop + start, t/011      (default 50;    CI 10)
#   SOAK_SEED            random seed (default: from the clock; printed)
#   SOAK_DRAIN_TIMEOUT   seconds to finish after the last fault (default 120 + jobs/100)
#   SOAK_TESTS           which tests: "010 011" (default both)
#   SOAK_BUILD=1         run make && make install first (as root)
#   SOAK_KEEP=1          keep the work directory (server and client logs)
#
# Prints, per test, the counts: jobs, completed, lost, double-completed,
# overlaps, kills (and restarts), and exits non-zero when a test failed.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_BINDIR=${PG_BINDIR:-/usr/lib/postgresql/15/bin}
PGXS_DIR=${PGXS_DIR:-/usr/lib/postgresql/15/lib/pgxs}
PG_REGRESS=$PGXS_DIR/src/test/regress/pg_regress
PG_TEST_PERL=$PGXS_DIR/src/test/perl

export SOAK_JOBS=${SOAK_JOBS:-50000}
export SOAK_KILLS=${SOAK_KILLS:-300}
export SOAK_BACKEND_KILLS=${SOAK_BACKEND_KILLS:-50}
export SOAK_RESTARTS=${SOAK_RESTARTS:-50}
[ -n "${SOAK_SEED:-}" ] && export SOAK_SEED
[ -n "${SOAK_DRAIN_TIMEOUT:-}" ] && export SOAK_DRAIN_TIMEOUT
TESTS=${SOAK_TESTS:-"010 011"}

die() { echo "soak: $*" >&2; exit 2; }

[ -x "$PG_BINDIR/postgres" ] || die "PostgreSQL 15 not found in $PG_BINDIR"
[ -f "$PG_TEST_PERL/PostgreSQL/Test/Cluster.pm" ] || die "PostgreSQL TAP modules not found in $PG_TEST_PERL"
command -v prove >/dev/null || die "prove (Perl Test::Harness) is not installed"
perl -MIPC::Run -e 1 2>/dev/null || die "IPC::Run is not installed (apt-get install libipc-run-perl)"

if [ "${SOAK_BUILD:-0}" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "SOAK_BUILD=1 needs root (make install)"
    make -C "$REPO" -s PG_CONFIG="$PG_BINDIR/pg_config" && \
        make -C "$REPO" -s PG_CONFIG="$PG_BINDIR/pg_config" install || die "build failed"
fi

# initdb refuses root: as root, run the tests as the postgres OS user from a
# copy of t/ it owns.
WORK=$(mktemp -d /tmp/orch-soak.XXXXXX)
chmod 755 "$WORK"
cp -r "$REPO/t" "$WORK/t"
if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "the postgres OS user does not exist"
    chown -R postgres: "$WORK"
    RUN=(runuser -u postgres --)
else
    RUN=()
fi

cleanup() {
    if [ "${SOAK_KEEP:-0}" = 1 ] || [ "${FAILED:-0}" -gt 0 ]; then
        echo "soak: work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

echo "soak: jobs=$SOAK_JOBS worker_kills=$SOAK_KILLS backend_kills=$SOAK_BACKEND_KILLS restarts=$SOAK_RESTARTS tests='$TESTS'"
FAILED=0
SUMMARIES=()
for t in $TESTS; do
    f=$(cd "$WORK" && ls t/${t}_*.pl 2>/dev/null | head -n 1)
    [ -n "$f" ] || die "no test t/${t}_*.pl"
    name=$(basename "$f" .pl)
    mkdir -p "$WORK/$name"
    [ "$(id -u)" = 0 ] && chown postgres: "$WORK/$name"
    echo
    echo "==> $name"
    start=$(date +%s)
    (cd "$WORK" && "${RUN[@]}" env PATH="$PG_BINDIR:$PATH" TESTDIR="$WORK/$name" \
        PG_REGRESS="$PG_REGRESS" PGPORT=65432 \
        SOAK_JOBS="$SOAK_JOBS" SOAK_KILLS="$SOAK_KILLS" \
        SOAK_BACKEND_KILLS="$SOAK_BACKEND_KILLS" SOAK_RESTARTS="$SOAK_RESTARTS" \
        ${SOAK_SEED:+SOAK_SEED="$SOAK_SEED"} ${SOAK_DRAIN_TIMEOUT:+SOAK_DRAIN_TIMEOUT="$SOAK_DRAIN_TIMEOUT"} \
        prove -v -I "$PG_TEST_PERL" -I "$WORK/t" "$f" </dev/null) >"$WORK/$name.out" 2>&1
    rc=$?
    grep -E '^(not ok|# +Failed|Result:)' "$WORK/$name.out" | head -n 40
    line=$(grep -o 'FAULT-SUMMARY.*' "$WORK/$name.out" | tail -n 1)
    if [ $rc -ne 0 ] || ! grep -q '^Result: PASS' "$WORK/$name.out"; then
        FAILED=$((FAILED + 1))
        echo "    FAILED ($(( $(date +%s) - start )) s); output: $WORK/$name.out, logs: $WORK/$name/tmp_check/log/"
    else
        echo "    passed ($(( $(date +%s) - start )) s)"
    fi
    SUMMARIES+=("${line:-FAULT-SUMMARY test=$name (no summary: the test died early)}")
done

echo
echo "==================== soak summary ===================="
for line in "${SUMMARIES[@]}"; do
    # FAULT-SUMMARY key=value ...
    declare -A kv=()
    for pair in ${line#FAULT-SUMMARY }; do
        case "$pair" in *=*) kv[${pair%%=*}]=${pair#*=} ;; esac
    done
    kills=${kv[kills]:-}
    [ -z "$kills" ] && kills="${kv[backend_kills]:-?} backend + ${kv[restarts]:-?} restarts"
    printf '%-32s jobs=%s completed=%s lost=%s double-completed=%s overlaps=%s kills=%s lease_expired=%s seed=%s elapsed=%s\n' \
        "${kv[test]:-?}" "${kv[jobs]:-?}" "${kv[completed]:-?}" "${kv[lost]:-?}" \
        "${kv[double_completed]:-?}" "${kv[overlaps]:-?}" "$kills" \
        "${kv[lease_expired]:-?}" "${kv[seed]:-?}" "${kv[elapsed]:-?}"
    unset kv
done
if [ "$FAILED" -gt 0 ]; then
    echo "soak: $FAILED test(s) FAILED"
    exit 1
fi
echo "soak: all passed"
exit 0
