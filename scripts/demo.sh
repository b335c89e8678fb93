#!/usr/bin/env bash
# scripts/demo.sh: a short live demo of orchestrator with plain psql sessions.
#
#   bash scripts/demo.sh        (setup.sh runs it; rerun it any time)
#
# Two producers enqueue 60 tasks into queue 'demo'; each payload tells the
# worker what to do (complete, fail with an error class N times, wait for a
# tool, wait for a human, run long).  Three workers claim with orch_dequeue
# and act with orch_complete / orch_fail / orch_await_tool /
# orch_await_confirmation / orch_heartbeat; a "tool" answers with
# orch_resume; an "approver" approves or rejects with orch_confirm; the demo
# cancels a few tasks.  It waits until every task is terminal, prints the
# final counts, the audit trail summary and one task's history, and checks
# that every task ended where its payload said it would.
#
# Connection: PGHOST/PGPORT when set (setup.sh sets them), else the cluster
# that setup.sh started (in $ORCH_CLUSTER_DIR when set).  Database: $ORCH_DB
# (default orchestrator).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DB=${ORCH_DB:-orchestrator}
QUEUE=demo
TIMEOUT=${ORCH_DEMO_TIMEOUT:-50}

if [ -z "${PGHOST:-}" ] || [ -z "${PGPORT:-}" ]; then
    dir=$(setup_cluster_dir)
    cluster_running "$dir" || die "no cluster running in $dir: run 'bash scripts/setup.sh' first"
    export PGHOST=$(cluster_socket_dir "$dir") PGPORT=$(cluster_port "$dir")
fi
export PGUSER=${PGUSER:-postgres} PGDATABASE=$DB PGAPPNAME=orchestrator-demo

# One SQL call: unaligned, tuples only, '|' separated; errors verbose (with
# the SQLSTATE) on stderr.
sql() {
    "$PG_BINDIR/psql" -X -q -A -t -F '|' -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$1"
}
# A table for people to read.
show() {
    "$PG_BINDIR/psql" -X -q -P footer=off -v ON_ERROR_STOP=1 -c "$1"
}

sql "SELECT 1 FROM pg_extension WHERE extname = 'orchestrator'" | grep -q 1 \
    || die "extension orchestrator is not installed in database $DB (run bash scripts/setup.sh)"

WORK=$(mktemp -d /tmp/orch-demo.XXXXXX)
RUN=$(date +%s)-$$
BGPIDS=()
cleanup() {
    touch "$WORK/stop"
    local p
    for p in "${BGPIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# Errors that workers may legitimately meet (a task cancelled under them:
# OR002; a lease lost: OR003) go to expected.log, anything else to errors.log.
record_error() {    # who, what, stderr file
    local who=$1 what=$2 f=$3 line
    line=$(grep -m1 -E '^(ERROR|FATAL|psql):' "$f" || head -n1 "$f")
    if printf '%s' "$line" | grep -qE 'ERROR: +OR00[23]:'; then
        printf '%s %s: %s\n' "$who" "$what" "$line" >>"$WORK/expected.log"
        printf '  %-9s %s -> %s\n' "$who" "$what" "$line"
    else
        printf '%s %s: %s\n' "$who" "$what" "$line" >>"$WORK/errors.log"
        printf '  %-9s %s -> UNEXPECTED %s\n' "$who" "$what" "$line"
    fi
}

echo "== orchestrator demo (run $RUN) on ${PGHOST}:${PGPORT}, database $DB"

# ---------------------------------------------------------------------------
# Queue: short delays so that retries go through to exhaustion quickly.
# ---------------------------------------------------------------------------
SETTINGS='{"initial_delay": "1 second", "max_delay": "4 seconds", "max_attempts": 3, "lease": "30 seconds"}'
sql "SELECT CASE WHEN EXISTS (SELECT 1 FROM orch_queues WHERE queue = '$QUEUE')
            THEN orch_configure_queue('$QUEUE', '$SETTINGS')
            ELSE orch_create_queue('$QUEUE', '$SETTINGS') END" >/dev/null
echo "queue '$QUEUE': $(sql "SELECT orch_queue_settings('$QUEUE')")"
left=$(sql "SELECT count(orch_cancel(task_id, 'demo: leftover of an earlier run'))
              FROM orch_tasks WHERE queue = '$QUEUE'
               AND state NOT IN ('completed', 'failed', 'cancelled')")
[ "$left" = 0 ] || echo "cancelled $left task(s) left over from an earlier demo run"

# ---------------------------------------------------------------------------
# The 60 tasks.  "expect" is where each should end (checked at the end).
# ---------------------------------------------------------------------------
PAYLOADS=()
add() {     # count json-fields
    local n=$1 i; shift
    for ((i = 0; i < n; i++)); do
        PAYLOADS+=("{\"run\": \"$RUN\", $*}")
    done
}
add 27 '"action": "complete", "expect": "completed"'
add 2  '"action": "fail", "class": "TRANSIENT", "times": 1, "expect": "completed"'
add 2  '"action": "fail", "class": "TRANSIENT", "times": 99, "expect": "failed", "expect_reason": "max_attempts_exhausted"'
add 2  '"action": "fail", "class": "RETRYABLE", "times": 2, "expect": "completed"'
add 1  '"action": "fail", "class": "RETRYABLE", "times": 99, "expect": "failed", "expect_reason": "max_attempts_exhausted"'
add 2  '"action": "fail", "class": "RATE_LIMITED", "retry_after": "2 seconds", "times": 1, "expect": "completed"'
add 1  '"action": "fail", "class": "RATE_LIMITED", "retry_after": "2 seconds", "times": 99, "expect": "failed", "expect_reason": "max_attempts_exhausted"'
add 1  '"action": "fail", "class": "DEPENDENCY_FAILED", "times": 1, "expect": "completed"'
add 1  '"action": "fail", "class": "DEPENDENCY_FAILED", "times": 99, "expect": "failed", "expect_reason": "max_attempts_exhausted", "show_history": true'
add 3  '"action": "fail", "class": "NON_RETRYABLE", "times": 99, "expect": "failed", "expect_reason": "non_retryable"'
add 2  '"action": "fail", "class": "COMPENSATION_REQUIRED", "times": 99, "expect": "failed", "expect_reason": "compensation_required"'
add 6  '"action": "tool", "tool": "weather", "expect": "completed"'
add 4  '"action": "confirm", "approve": true, "expect": "completed"'
add 2  '"action": "confirm", "approve": false, "expect": "failed", "expect_reason": "confirmation_rejected"'
add 1  '"action": "long", "expect": "cancelled", "expect_reason": "cancelled"'
add 3  '"action": "complete", "scheduled": true, "expect": "cancelled", "expect_reason": "cancelled"'
TOTAL=${#PAYLOADS[@]}

# Interleave the kinds (a fixed permutation: i*7 mod 60), so workers meet
# them mixed; the scheduled ones run an hour from now (and get cancelled).
ORDERED=()
for ((i = 0; i < TOTAL; i++)); do ORDERED+=("${PAYLOADS[$(( (i * 7) % TOTAL ))]}"); done

producer() {    # name, then payloads
    local me=$1 p n=0 batch=() id; shift
    for p in "$@"; do
        if [[ $p == *'"scheduled": true'* ]]; then
            id=$(sql "SELECT orch_enqueue('$QUEUE', '$p', run_at => now() + interval '1 hour')") \
                2>"$WORK/$me.err" || { record_error "$me" enqueue "$WORK/$me.err"; continue; }
            printf '  %-9s enqueued #%s to run in 1 hour\n' "$me" "$id"
            continue
        fi
        if [ "$me" = producer-1 ]; then
            # one call per task
            sql "SELECT orch_enqueue('$QUEUE', '$p')" >/dev/null 2>"$WORK/$me.err" \
                || record_error "$me" enqueue "$WORK/$me.err"
            n=$((n + 1))
            [ $((n % 5)) = 0 ] && sleep 0.2
        else
            # orch_enqueue_batch, five at a time
            batch+=("'$p'::jsonb")
            if [ ${#batch[@]} = 5 ]; then
                sql "SELECT count(*) FROM orch_enqueue_batch('$QUEUE', ARRAY[$(IFS=,; echo "${batch[*]}")])" \
                    >/dev/null 2>"$WORK/$me.err" || record_error "$me" enqueue_batch "$WORK/$me.err"
                batch=()
                sleep 0.3
            fi
        fi
    done
    if [ ${#batch[@]} -gt 0 ]; then
        sql "SELECT count(*) FROM orch_enqueue_batch('$QUEUE', ARRAY[$(IFS=,; echo "${batch[*]}")])" \
            >/dev/null 2>"$WORK/$me.err" || record_error "$me" enqueue_batch "$WORK/$me.err"
    fi
    printf '  %-9s done\n' "$me"
}

# Act on one claimed task as its payload says.
work_on() {     # me id token attempt action class times retry_after has_resume
    local me=$1 id=$2 tok=$3 att=$4 action=$5 class=$6 times=$7 ra=$8 resumed=$9
    local call what out i st
    case "$action" in
        fail)
            if [ "$att" -le "$times" ]; then
                if [ -n "$ra" ]; then
                    call="SELECT state || ' ' || coalesce(reason_code, '-') || coalesce(' (retry in ' || ceil(extract(epoch FROM retry_at - now())) || 's)', '') FROM orch_fail($id, '$tok', '$class', 'simulated $class error', '$ra')"
                else
                    call="SELECT state || ' ' || coalesce(reason_code, '-') || coalesce(' (retry in ' || ceil(extract(epoch FROM retry_at - now())) || 's)', '') FROM orch_fail($id, '$tok', '$class', 'simulated $class error')"
                fi
                what="fail $class"
            else
                call="SELECT orch_complete($id, '$tok', '{\"done_by\": \"$me\", \"after_failures\": $times}')"
                what="complete"
            fi ;;
        tool)
            if [ "$resumed" = t ]; then
                call="SELECT orch_complete($id, '$tok', jsonb_build_object('done_by', '$me', 'tool_answer', (SELECT resume_data FROM orch_tasks WHERE task_id = $id)))"
                what="complete with the tool's answer"
            else
                call="SELECT orch_await_tool($id, '$tok', 'weather', '{\"city\": \"Lisbon\"}')"
                what="await tool"
            fi ;;
        confirm)
            if [ "$resumed" = t ]; then
                call="SELECT orch_complete($id, '$tok', '{\"done_by\": \"$me\", \"approved\": true}')"
                what="complete after approval"
            else
                call="SELECT orch_await_confirmation($id, '$tok', '{\"question\": \"ship it?\"}')"
                what="await confirmation"
            fi ;;
        long)
            printf '  %-9s #%s attempt %s: long job, heartbeating\n' "$me" "$id" "$att"
            for ((i = 0; i < 160; i++)); do
                st=$(sql "SELECT orch_heartbeat($id, '$tok', '10 seconds')" 2>"$WORK/$me.err") \
                    || { record_error "$me" "#$id heartbeat" "$WORK/$me.err"; return; }
                if [ "$st" = cancelled ]; then
                    printf '  %-9s #%s heartbeat says cancelled: stopping the job\n' "$me" "$id"
                    return
                fi
                sleep 0.25
            done
            call="SELECT orch_complete($id, '$tok', '{\"done_by\": \"$me\"}')"
            what="complete long job" ;;
        *)
            call="SELECT orch_complete($id, '$tok', '{\"done_by\": \"$me\"}')"
            what="complete" ;;
    esac
    if out=$(sql "$call" 2>"$WORK/$me.err"); then
        printf '  %-9s #%s attempt %s: %-30s -> %s\n' "$me" "$id" "$att" "$what" "$out"
    else
        record_error "$me" "#$id attempt $att: $what" "$WORK/$me.err"
    fi
}

worker() {
    local me=$1 rows id tok att action class times ra resumed
    while [ ! -e "$WORK/stop" ]; do
        # The claim is its own committed transaction; work happens after it.
        if ! rows=$(sql "SELECT d.task_id, d.lease_token, d.attempt,
                                coalesce(d.payload->>'action', ''), coalesce(d.payload->>'class', ''),
                                coalesce(d.payload->>'times', '0'), coalesce(d.payload->>'retry_after', ''),
                                d.resume_data IS NOT NULL
                           FROM orch_dequeue('$QUEUE', '$me', 5) d" 2>"$WORK/$me.err"); then
            record_error "$me" dequeue "$WORK/$me.err"
            sleep 0.5
            continue
        fi
        if [ -z "$rows" ]; then
            sleep 0.2
            continue
        fi
        while IFS='|' read -r id tok att action class times ra resumed; do
            work_on "$me" "$id" "$tok" "$att" "$action" "$class" "$times" "$ra" "$resumed"
        done <<<"$rows"
    done
}

tool() {    # answers every task waiting for a tool (not retry-waits)
    local ids id out
    while [ ! -e "$WORK/stop" ]; do
        ids=$(sql "SELECT task_id FROM orch_tasks WHERE queue = '$QUEUE' AND state = 'awaiting_tool'
                     AND retry_at IS NULL AND resume_data IS NULL AND payload->>'run' = '$RUN'
                   ORDER BY task_id" 2>/dev/null || true)
        for id in $ids; do
            if out=$(sql "SELECT orch_resume($id, '{\"forecast\": \"sunny\", \"temp_c\": 21}')" 2>"$WORK/tool.err"); then
                printf '  %-9s #%s: orch_resume with the forecast -> %s\n' tool "$id" "$out"
            else
                record_error tool "#$id resume" "$WORK/tool.err"
            fi
        done
        sleep 0.7
    done
}

approver() {    # approves or rejects as the payload says
    local rows id approve out
    while [ ! -e "$WORK/stop" ]; do
        rows=$(sql "SELECT task_id, payload->>'approve' FROM orch_tasks WHERE queue = '$QUEUE'
                      AND state = 'awaiting_user_confirmation' AND resume_data IS NULL
                      AND payload->>'run' = '$RUN' ORDER BY task_id" 2>/dev/null || true)
        while IFS='|' read -r id approve; do
            [ -n "$id" ] || continue
            if [ "$approve" = true ]; then
                out=$(sql "SELECT orch_confirm($id, true, 'alice', 'looks good')" 2>"$WORK/approver.err") \
                    && printf '  %-9s #%s: approved by alice -> %s\n' approver "$id" "$out" \
                    || record_error approver "#$id approve" "$WORK/approver.err"
            else
                out=$(sql "SELECT orch_confirm($id, false, 'bob', 'not today')" 2>"$WORK/approver.err") \
                    && printf '  %-9s #%s: rejected by bob -> %s\n' approver "$id" "$out" \
                    || record_error approver "#$id reject" "$WORK/approver.err"
            fi
        done <<<"$rows"
        sleep 1
    done
}

RUNTASKS="(SELECT task_id FROM orch_tasks WHERE payload->>'run' = '$RUN')"
counts() {
    sql "SELECT coalesce(string_agg(state || '=' || n, '  ' ORDER BY state), 'none')
           FROM (SELECT state, count(*) AS n FROM orch_tasks
                  WHERE payload->>'run' = '$RUN' GROUP BY state) s"
}
nonterminal() {
    sql "SELECT count(*) FROM orch_tasks WHERE payload->>'run' = '$RUN'
            AND state NOT IN ('completed', 'failed', 'cancelled')"
}

# ---------------------------------------------------------------------------
# Go.
# ---------------------------------------------------------------------------
START=$(date +%s)
half=$((TOTAL / 2))
producer producer-1 "${ORDERED[@]:0:$half}" & P1=$!
producer producer-2 "${ORDERED[@]:$half}" & P2=$!
BGPIDS+=("$P1" "$P2")
for w in 1 2 3; do worker "worker-$w" & BGPIDS+=($!); done
tool & BGPIDS+=($!)
approver & BGPIDS+=($!)

producers_done=0
scheduled_cancelled=0
long_cancelled=0
while :; do
    sleep 1
    elapsed=$(( $(date +%s) - START ))
    n=$(sql "SELECT count(*) FROM orch_tasks WHERE payload->>'run' = '$RUN'")
    printf '[%2ss] %s/%s tasks  %s\n' "$elapsed" "$n" "$TOTAL" "$(counts)"
    if [ $producers_done = 0 ] && ! kill -0 "$P1" 2>/dev/null && ! kill -0 "$P2" 2>/dev/null; then
        producers_done=1
    fi
    # Cancel the tasks scheduled for later: they never run.
    if [ $producers_done = 1 ] && [ $scheduled_cancelled = 0 ]; then
        scheduled_cancelled=1
        sql "SELECT task_id, orch_cancel(task_id, 'demo: no longer needed')
               FROM orch_tasks WHERE payload->>'run' = '$RUN' AND payload ? 'scheduled'
                AND state = 'queued' ORDER BY task_id" 2>"$WORK/main.err" \
            | while IFS='|' read -r id st; do
                  printf '  %-9s #%s (scheduled in 1 hour): orch_cancel -> %s\n' demo "$id" "$st"
              done || record_error demo "cancel scheduled" "$WORK/main.err"
    fi
    # Cancel the long job once a worker runs it (the worker sees it on its
    # next heartbeat).
    if [ $long_cancelled = 0 ]; then
        id=$(sql "SELECT task_id FROM orch_tasks WHERE payload->>'run' = '$RUN'
                   AND payload->>'action' = 'long' AND state = 'executing'")
        if [ -n "$id" ] || [ "$elapsed" -ge 15 ]; then
            [ -n "$id" ] || id=$(sql "SELECT task_id FROM orch_tasks WHERE payload->>'run' = '$RUN'
                                        AND payload->>'action' = 'long'")
            if [ -n "$id" ]; then
                long_cancelled=1
                if st=$(sql "SELECT orch_cancel($id, 'demo: operator stopped a long job')" 2>"$WORK/main.err"); then
                    printf '  %-9s #%s (long job): orch_cancel -> %s\n' demo "$id" "$st"
                else
                    record_error demo "#$id cancel" "$WORK/main.err"
                fi
            fi
        fi
    fi
    # Done when the producers are and nothing is left in flight (a task that
    # failed to enqueue is reported below).
    if [ $producers_done = 1 ] && [ $scheduled_cancelled = 1 ] && [ "$(nonterminal)" = 0 ]; then
        break
    fi
    if [ "$elapsed" -ge "$TIMEOUT" ]; then
        echo "TIMEOUT: tasks still not terminal after ${TIMEOUT}s"
        break
    fi
done
touch "$WORK/stop"
wait "${BGPIDS[@]}" 2>/dev/null || true
BGPIDS=()
ELAPSED=$(( $(date +%s) - START ))

# ---------------------------------------------------------------------------
# Report.
# ---------------------------------------------------------------------------
echo
echo "== final states after ${ELAPSED}s"
show "SELECT state, count(*) AS tasks, string_agg(DISTINCT coalesce(reason_code, '-'), ', ') AS reason_codes
        FROM orch_tasks WHERE payload->>'run' = '$RUN' GROUP BY state ORDER BY state"
echo "== retries and every other transition by reason code (orch_events)"
show "SELECT e.reason_code, e.from_state || ' -> ' || e.to_state AS transition, count(*) AS events
        FROM orch_events e WHERE e.task_id IN $RUNTASKS
       GROUP BY 1, 2 ORDER BY (e.reason_code = 'retry_scheduled') DESC, 3 DESC, 1"
echo "== failed attempts by error class (orch_attempts)"
show "SELECT error_class, outcome, count(*) AS attempts
        FROM orch_attempts WHERE task_id IN $RUNTASKS AND error_class IS NOT NULL
       GROUP BY 1, 2 ORDER BY 1, 2"
hid=$(sql "SELECT task_id FROM orch_tasks WHERE payload->>'run' = '$RUN' AND payload ? 'show_history' LIMIT 1")
if [ -n "$hid" ]; then
    echo "== orch_history($hid): DEPENDENCY_FAILED every time (doubled backoff: 2 s, then 4 s), then exhausted"
    show "SELECT to_char(at, 'HH24:MI:SS.MS') AS at, kind, attempt, from_state, to_state, reason_code,
                 actor, outcome, error_class, note
            FROM orch_history($hid)"
fi

# ---------------------------------------------------------------------------
# Checks.
# ---------------------------------------------------------------------------
problems=0
n=$(sql "SELECT count(*) FROM orch_tasks WHERE payload->>'run' = '$RUN'")
if [ "$n" != "$TOTAL" ]; then
    echo "PROBLEM: $n tasks recorded, expected $TOTAL"; problems=$((problems + 1))
fi
left=$(nonterminal)
if [ "$left" != 0 ]; then
    echo "PROBLEM: $left task(s) not terminal:"
    show "SELECT task_id, state, reason_code, retry_at, payload FROM orch_tasks
           WHERE payload->>'run' = '$RUN' AND state NOT IN ('completed', 'failed', 'cancelled')"
    problems=$((problems + 1))
fi
wrong=$(sql "SELECT count(*) FROM orch_tasks WHERE payload->>'run' = '$RUN'
               AND (state IS DISTINCT FROM payload->>'expect'
                    OR (payload ? 'expect_reason' AND reason_code IS DISTINCT FROM payload->>'expect_reason'))")
if [ "$wrong" != 0 ]; then
    echo "PROBLEM: $wrong task(s) ended elsewhere than expected:"
    show "SELECT task_id, state, reason_code, attempts, failures, payload->>'action' AS action,
                 payload->>'class' AS class, payload->>'expect' AS expected, payload->>'expect_reason' AS expected_reason
            FROM orch_tasks WHERE payload->>'run' = '$RUN'
             AND (state IS DISTINCT FROM payload->>'expect'
                  OR (payload ? 'expect_reason' AND reason_code IS DISTINCT FROM payload->>'expect_reason'))
           ORDER BY task_id"
    problems=$((problems + 1))
fi
if [ -s "$WORK/errors.log" ]; then
    echo "PROBLEM: unexpected errors:"
    sed 's/^/  /' "$WORK/errors.log"
    problems=$((problems + 1))
fi
if [ -s "$WORK/expected.log" ]; then
    echo "(expected errors seen by workers: $(wc -l <"$WORK/expected.log"))"
fi
if [ "$problems" -gt 0 ]; then
    echo "demo: FAILED ($problems problem(s))"
    exit 1
fi
echo "demo: OK: $TOTAL tasks, all terminal and where their payload said, in ${ELAPSED}s"
