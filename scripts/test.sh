#!/usr/bin/env bash
# scripts/test.sh: build, install and run every test suite of orchestrator.
#
#   bash scripts/test.sh            (as root; CI runs it from .ci/run)
#
# Suites, each counted test by test:
#   regress    pg_regress on the Makefile's REGRESS list (test/sql/,
#              test/expected/)
#   isolation  pg_isolation_regress on the ISOLATION list (test/specs/,
#              test/expected/)
#   pgtap      pg_prove on test/pgtap/*.sql, one file at a time, each in a
#              fresh database that has the pgtap extension (a file creates
#              orchestrator itself)
#   tap        Perl TAP t/*.pl (PostgreSQL::Test::Cluster), one file at a
#              time, as the postgres OS user
#   clients    the Python and Node worker clients (scripts/test-clients.sh,
#              its own cluster), each test file
# Before them, Citus 13.2.2 (for t/050_citus.pl) is built from the vendored
# source ../shared/vendor/citus-13.2.2.tar.gz when it is there and Citus is
# not installed yet (lib.sh ensure_citus; docs/citus.md).  With that
# source present a failed Citus build and a skipped t/050 are failures;
# without it t/050 skips with its reason and counts as passed.
# regress, isolation and pgtap share one throwaway cluster in /tmp (port
# 55432 or $ORCH_TEST_PORT) with pg_cron preloaded (cron.database_name =
# orchestrator); it is always stopped at exit.
#
# Ends with the line "N passed, N failed"; exits non-zero when anything
# failed or nothing ran.  ORCH_TEST_KEEP=1 keeps the temp dir (logs).
set -uo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PASSED=0
FAILED=0
FAILED_NAMES=()
SUITE_TIMEOUT=${ORCH_SUITE_TIMEOUT:-1500}   # seconds per pg_regress run
FILE_TIMEOUT=${ORCH_FILE_TIMEOUT:-600}      # seconds per pgTAP / Perl TAP file

pass() { PASSED=$((PASSED + 1)); printf '    PASS  %s\n' "$1"; }
fail() { FAILED=$((FAILED + 1)); FAILED_NAMES+=("$1"); printf '    FAIL  %s\n' "$1"; }

finish() {
    echo
    echo "==================== summary ===================="
    if [ ${#FAILED_NAMES[@]} -gt 0 ]; then
        echo "failed:"
        printf '  %s\n' "${FAILED_NAMES[@]}"
    fi
    if [ $((PASSED + FAILED)) -eq 0 ]; then
        echo "no test ran: that is a failure"
    fi
    echo "$PASSED passed, $FAILED failed"
    if [ "$FAILED" -gt 0 ] || [ $((PASSED + FAILED)) -eq 0 ]; then
        exit 1
    fi
    exit 0
}

# Print a file, at most N lines (the rest is left in the file).
show_file() {
    local file=$1 max=${2:-400} n
    [ -f "$file" ] || return 0
    n=$(wc -l <"$file")
    echo "----- $file ($n lines) -----"
    head -n "$max" "$file"
    [ "$n" -gt "$max" ] && echo "----- ($((n - max)) more lines in $file) -----"
    echo "----- end of $file -----"
}

require_root
cd "$ORCH_REPO" || exit 1

log "orchestrator tests in $ORCH_REPO"
ensure_packages
if ! (build_install); then
    fail "build (make && make install)"
    finish
fi
# Citus for t/050_citus.pl, built from the vendored source when it is there
# (docs/citus.md).  With the source present Citus must be there: a
# failed build is a failed test, and so is t/050 skipping.
CITUS_EXPECTED=0
[ -f "$(citus_tarball)" ] && CITUS_EXPECTED=1
(ensure_citus)
case $? in
    0|2) ;;
    *) fail "citus build (see above; t/050_citus.pl will skip)" ;;
esac

# --------------------------------------------------------------------------
# Throwaway cluster
# --------------------------------------------------------------------------
TESTROOT=$(mktemp -d /tmp/orch-test.XXXXXX)
chmod 755 "$TESTROOT"
CLUSTER=$TESTROOT/pg
PORT=${ORCH_TEST_PORT:-55432}
if [ -z "${ORCH_TEST_PORT:-}" ]; then
    while port_in_use "$PORT"; do
        warn "port $PORT is busy, trying $((PORT + 1))"
        PORT=$((PORT + 1))
    done
fi

cleanup() {
    local rc=$?
    cluster_stop "$CLUSTER"
    if [ "${ORCH_TEST_KEEP:-0}" = 1 ] || [ "$FAILED" -gt 0 ]; then
        echo "(test files and logs kept in $TESTROOT)"
    else
        rm -rf "$TESTROOT"
    fi
    return $rc
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM

if ! (cluster_start "$CLUSTER" "$PORT" orchestrator fast); then
    fail "cluster start (port $PORT)"
    finish
fi
# cluster_start ran in a subshell to survive its die; export its settings.
export PGHOST=$(cluster_socket_dir "$CLUSTER") PGPORT=$PORT PGUSER=postgres
# pg_cron's launcher needs its database.
q -d postgres -c "CREATE DATABASE orchestrator" \
    && q -d orchestrator -c "CREATE EXTENSION IF NOT EXISTS pg_cron" \
    || warn "could not prepare database orchestrator with pg_cron"

# --------------------------------------------------------------------------
# pg_regress / pg_isolation_regress
# --------------------------------------------------------------------------
# run_regress KIND DRIVER TESTS_VAR OPTS_VAR
run_regress() {
    local kind=$1 driver=$2 tests opts outdir rc name line status logf
    tests=$(make_var "$3") || { fail "$kind (cannot read $3 from the Makefile)"; return; }
    opts=$(make_var "$4") || { fail "$kind (cannot read $4 from the Makefile)"; return; }
    # shellcheck disable=SC2206
    local test_arr=($tests) opt_arr=($opts)
    echo
    log "$kind: ${#test_arr[@]} test(s)"
    if [ ${#test_arr[@]} -eq 0 ]; then
        echo "    (no $kind tests in this repository)"
        return
    fi
    # pg_regress stops the whole run at a test without an expected file, so
    # such a test is failed here and left out; the others still run.  The
    # expected files are in INPUTDIR/expected/ (--inputdir of the options).
    local runnable=() t o expdir=expected
    for o in "${opt_arr[@]}"; do
        case "$o" in --inputdir=*) expdir=${o#--inputdir=}/expected ;; esac
    done
    for t in "${test_arr[@]}"; do
        if [ -f "$expdir/$t.out" ] || compgen -G "$expdir/${t}_[0-9].out" >/dev/null; then
            runnable+=("$t")
        else
            fail "$kind/$t (no $expdir/$t.out: not run)"
        fi
    done
    [ ${#runnable[@]} -gt 0 ] || return
    test_arr=("${runnable[@]}")
    outdir=results-$kind
    for o in "${opt_arr[@]}"; do
        case "$o" in --outputdir=*) outdir=${o#--outputdir=} ;; esac
    done
    logf=$TESTROOT/$kind.out
    timeout --kill-after=30 "$SUITE_TIMEOUT" \
        "$driver" "${opt_arr[@]}" --bindir="$PG_BINDIR" \
        --host="$PGHOST" --port="$PGPORT" --user=postgres \
        "${test_arr[@]}" >"$logf" 2>&1
    rc=$?
    sed 's/^/    | /' "$logf"
    [ $rc -eq 124 ] && echo "    $kind: timed out after ${SUITE_TIMEOUT}s"
    local counted=0
    for name in "${test_arr[@]}"; do
        # PG15: "test NAME ... ok 12 ms" (serial) or "     NAME ... FAILED" (group)
        line=$(grep -E "^(test +| +)${name} +\.\.\. " "$logf" | tail -n 1)
        status=$(printf '%s' "$line" | sed -E 's/^.*\.\.\. +//')
        case "$status" in
            ok*)      pass "$kind/$name"; counted=$((counted + 1)) ;;
            FAILED*)  fail "$kind/$name"; counted=$((counted + 1)) ;;
            "failed (ignored)"*) fail "$kind/$name (failed, marked ignore)"; counted=$((counted + 1)) ;;
            *)        fail "$kind/$name (no ok/FAILED line: did not run, or pg_regress stopped before it)" ;;
        esac
    done
    if [ $rc -ne 0 ]; then
        if [ $counted -eq ${#test_arr[@]} ] && ! grep -qE '\.\.\. +(FAILED|failed)' "$logf"; then
            fail "$kind (driver exited $rc)"
        fi
        show_file "$outdir/regression.diffs" 600
    fi
}

run_regress regress "$PG_REGRESS" REGRESS REGRESS_OPTS
run_regress isolation "$PG_ISOLATION_REGRESS" ISOLATION ISOLATION_OPTS

# --------------------------------------------------------------------------
# pgTAP
# --------------------------------------------------------------------------
shopt -s nullglob
pgtap_files=(test/pgtap/*.sql)
echo
log "pgtap: ${#pgtap_files[@]} file(s)"
if [ ${#pgtap_files[@]} -eq 0 ]; then
    echo "    (no pgTAP tests in test/pgtap/)"
fi
i=0
for f in "${pgtap_files[@]}"; do
    i=$((i + 1))
    db=orch_pgtap_$i
    out=$TESTROOT/pgtap_$i.out
    if ! q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >"$out" 2>&1 \
       || ! q -d "$db" -c "CREATE EXTENSION pgtap" >>"$out" 2>&1; then
        cat "$out"
        fail "pgtap/$(basename "$f") (could not prepare database $db)"
        continue
    fi
    timeout --kill-after=30 "$FILE_TIMEOUT" \
        pg_prove --verbose --failures -h "$PGHOST" -p "$PGPORT" -U postgres -d "$db" "$f" >"$out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^Result: PASS' "$out"; then
        tail -n 3 "$out" | sed 's/^/    | /'
        pass "pgtap/$(basename "$f")"
    else
        sed 's/^/    | /' "$out"
        [ $rc -eq 124 ] && echo "    timed out after ${FILE_TIMEOUT}s"
        fail "pgtap/$(basename "$f")"
    fi
    q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
done

# --------------------------------------------------------------------------
# The README's "Using it" snippet runs as written (pasted into psql)
# --------------------------------------------------------------------------
echo
log "readme: the \"Using it\" snippet"
out=$TESTROOT/readme_snippet.out
snippet=$TESTROOT/readme_snippet.sql
awk '/^## Using it/ {u = 1} u && /^```sql/ {s = 1; next} s && /^```/ {exit} s {print}' README.md >"$snippet"
if [ -s "$snippet" ] \
   && q -d postgres -c "DROP DATABASE IF EXISTS orch_readme" -c "CREATE DATABASE orch_readme" >"$out" 2>&1 \
   && q -d orch_readme -c "CREATE EXTENSION orchestrator" >>"$out" 2>&1 \
   && "$PG_BINDIR/psql" -X -v ON_ERROR_STOP=1 -d orch_readme -f "$snippet" >>"$out" 2>&1 \
   && grep -q 'completed' "$out" && grep -q 'retry_scheduled' "$out"; then
    sed 's/^/    | /' "$out" | tail -n 12
    pass "readme/using_it"
else
    sed 's/^/    | /' "$out"
    fail "readme/using_it"
fi
q -d postgres -c "DROP DATABASE IF EXISTS orch_readme WITH (FORCE)" >/dev/null 2>&1 || true

# --------------------------------------------------------------------------
# Every example of the README runs as written against the setup cluster:
# in database "orchestrator" (pg_cron's), with the extension and the state
# scripts/setup.sh leaves there (its demo: queue demo, workflow
# demo_release and its runs), each ```sql block in the order of the file,
# pasted into psql (ON_ERROR_STOP).  One test per block, named by its
# heading.
# --------------------------------------------------------------------------
echo
log "readme: every sql example, after the setup demo"
exdir=$TESTROOT/readme_examples
rm -rf "$exdir"; mkdir -p "$exdir"
awk -v dir="$exdir" '
    /^#+ / { head = $0; sub(/^#+ /, "", head) }
    /^```sql$/ { n++; f = sprintf("%s/%03d.sql", dir, n); printf "%s\n", head > (f ".head"); s = 1; next }
    s && /^```/ { s = 0; close(f); next }
    s { print > f }' README.md
chmod -R a+rX "$exdir"
if q -d orchestrator -c "CREATE EXTENSION IF NOT EXISTS orchestrator" >/dev/null 2>&1 \
   && ORCH_DB=orchestrator bash scripts/demo.sh >"$exdir/demo.out" 2>&1; then
    for ex in "$exdir"/*.sql; do
        name="readme/example $(basename "$ex" .sql) ($(head -c 70 "$ex.head"))"
        if "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d orchestrator -f "$ex" >"$ex.out" 2>&1; then
            pass "$name"
        else
            sed 's/^/    | /' "$ex"; echo "    | ---"; sed 's/^/    | /' "$ex.out" | tail -n 20
            fail "$name"
        fi
    done
else
    sed 's/^/    | /' "$exdir/demo.out" | tail -n 30
    fail "readme/examples (the setup demo did not run in database orchestrator)"
fi
q -d orchestrator -c "SELECT orch_unschedule_maintenance()" >/dev/null 2>&1 || true

# --------------------------------------------------------------------------
# The C files call only files below them (docs/architecture.md's table)
# --------------------------------------------------------------------------
echo
log "architecture: scripts/check_layers.py"
if out=$(python3 scripts/check_layers.py 2>&1); then
    echo "    | $out"
    pass "architecture/layers"
else
    echo "$out" | sed 's/^/    | /' | head -n 40
    fail "architecture/layers"
fi

# The shared cluster is no longer needed.
# --------------------------------------------------------------------------
# The Prometheus exposition, parsed by the prometheus_client text parser
# (Debian's python3-prometheus-client), counters checked to only grow.
# --------------------------------------------------------------------------
echo
log "prometheus: orch_metrics_prometheus() through the prometheus_client parser"
out=$TESTROOT/prometheus_check.out
if q -d postgres -c "DROP DATABASE IF EXISTS orch_prometheus" -c "CREATE DATABASE orch_prometheus" >"$out" 2>&1 \
   && q -d orch_prometheus -c "CREATE EXTENSION orchestrator" >>"$out" 2>&1 \
   && PATH="$PG_BINDIR:$PATH" timeout --kill-after=30 "$FILE_TIMEOUT" \
        /usr/bin/python3 test/prometheus_check.py orch_prometheus >>"$out" 2>&1 \
   && grep -q '^ok ' "$out" && ! grep -q '^not ok' "$out"; then
    sed 's/^/    | /' "$out" | tail -n 40
    pass "prometheus/exposition"
else
    sed 's/^/    | /' "$out"
    fail "prometheus/exposition"
fi
q -d postgres -c "DROP DATABASE IF EXISTS orch_prometheus WITH (FORCE)" >/dev/null 2>&1 || true

cluster_stop "$CLUSTER"

# --------------------------------------------------------------------------
# Perl TAP (t/*.pl) as the postgres OS user
# --------------------------------------------------------------------------
tap_files=(t/*.pl)
echo
log "tap: ${#tap_files[@]} file(s)"
if [ ${#tap_files[@]} -eq 0 ]; then
    echo "    (no Perl TAP tests in t/)"
fi
if [ ${#tap_files[@]} -gt 0 ]; then
    TAPDIR=$TESTROOT/tap
    mkdir -p "$TAPDIR"
    cp -r t "$TAPDIR/t"
    # (t/050_citus.pl runs the update script docs/citus-upgrade-0.7.0-0.8.0.sql)
    cp -r docs "$TAPDIR/docs"
    chown -R postgres:postgres "$TAPDIR"
    for f in "${tap_files[@]}"; do
        name=$(basename "$f" .pl)
        out=$TESTROOT/tap_$name.out
        mkdir -p "$TAPDIR/$name"
        chown postgres:postgres "$TAPDIR/$name"
        # Environment as PGXS's prove_installcheck sets it up.
        timeout --kill-after=30 "$FILE_TIMEOUT" \
            runuser -u postgres -- env -C "$TAPDIR" \
                PATH="$PG_BINDIR:$PATH" \
                TESTDIR="$TAPDIR/$name" \
                PG_REGRESS="$PG_REGRESS" \
                PGPORT=65432 \
                prove -v -I "$PG_TEST_PERL" -I "$TAPDIR/t" "t/$name.pl" </dev/null >"$out" 2>&1
        rc=$?
        sed 's/^/    | /' "$out"
        if [ $rc -eq 0 ] && grep -q '^Result: PASS' "$out"; then
            pass "tap/$name"
        elif [ $rc -eq 0 ] && grep -q '^Result: NOTESTS' "$out" && grep -q 'skipped: ' "$out"; then
            # skip_all with its reason (t/050_citus.pl without Citus): counted
            # as passed, unless the vendored Citus source is there (Citus
            # should have been built: then a skip is a failure)
            reason=$(sed -n 's/.*skipped: //p' "$out" | head -1)
            if [ "$name" = 050_citus ] && [ "$CITUS_EXPECTED" = 1 ]; then
                fail "tap/$name (skipped although the vendored Citus source is present: $reason)"
            else
                pass "tap/$name (skipped: $reason)"
            fi
        else
            [ $rc -eq 124 ] && echo "    timed out after ${FILE_TIMEOUT}s"
            for l in "$TAPDIR/$name"/tmp_check/log/*; do
                show_file "$l" 200
            done
            fail "tap/$name"
        fi
    done
fi

# --------------------------------------------------------------------------
# scripts/setup.sh run again keeps the data (test/setup_rerun.sh; its own
# throwaway cluster and port, stopped and removed at its end)
# --------------------------------------------------------------------------
echo
log "scripts/setup_rerun: test/setup_rerun.sh"
out=$TESTROOT/setup_rerun.out
timeout --kill-after=30 "$FILE_TIMEOUT" bash test/setup_rerun.sh </dev/null >"$out" 2>&1
rc=$?
sed 's/^/    | /' "$out"
if [ $rc -eq 0 ] && grep -q '^ok ' "$out" && ! grep -q '^not ok' "$out"; then
    pass "scripts/setup_rerun"
else
    [ $rc -eq 124 ] && echo "    timed out after ${FILE_TIMEOUT}s"
    fail "scripts/setup_rerun"
fi

# --------------------------------------------------------------------------
# Worker clients (clients/python, clients/node): scripts/test-clients.sh on
# its own throwaway cluster; each of its test files counts
# --------------------------------------------------------------------------
echo
log "clients: scripts/test-clients.sh"
out=$TESTROOT/clients.out
timeout --kill-after=30 "$FILE_TIMEOUT" bash scripts/test-clients.sh </dev/null >"$out" 2>&1
rc=$?
sed 's/^/    | /' "$out"
counted=0
while read -r status name; do
    counted=$((counted + 1))
    if [ "$status" = PASS ]; then pass "clients/$name"; else fail "clients/$name"; fi
done < <(grep -E '^(PASS|FAIL) ' "$out")
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
    [ $rc -eq 124 ] && echo "    timed out after ${FILE_TIMEOUT}s"
    fail "clients (scripts/test-clients.sh exited $rc)"
fi

# --------------------------------------------------------------------------
# Operator console (console/): scripts/test-console.sh on its own throwaway
# cluster, in headless Chromium; each of its tests counts
# --------------------------------------------------------------------------
echo
log "console: scripts/test-console.sh"
out=$TESTROOT/console.out
timeout --kill-after=30 "$FILE_TIMEOUT" bash scripts/test-console.sh </dev/null >"$out" 2>&1
rc=$?
sed 's/^/    | /' "$out"
while read -r status name; do
    if [ "$status" = PASS ]; then pass "console/$name"; else fail "console/$name"; fi
done < <(grep -E '^(PASS|FAIL) ' "$out")
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
    [ $rc -eq 124 ] && echo "    timed out after ${FILE_TIMEOUT}s"
    fail "console (scripts/test-console.sh exited $rc)"
fi

finish
