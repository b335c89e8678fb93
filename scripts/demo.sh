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
# Then workflows: a gated release pipeline (plan ->
# design_review gate -> build -> test -> release_approval gate -> deploy,
# build and deploy compensable, a 1 hour deadline) is defined and published
# once per database (reused while its spec is unchanged) and run three
# times, two workers running its step tasks from queue 'demo_wf' and the
# demo acting as the approver and operator: (1) the happy path, both gates
# approved with orch_approve; (2) approved and paused (orch_pause_run) in one
# transaction after the first gate, orch_resume_run with other pins refused
# with OR010, then resumed with the pinned ones; (3) deploy fails
# NON_RETRYABLE after build succeeded, so build's compensation runs and the
# run ends failed.  Each run's summary comes from orch_runs, orch_run_steps
# and orch_run_status; every expectation is checked.  Idempotency keys and
# approval references carry the demo run's id, so reruns start new runs.
# A fourth run (scenario "waiting") is left waiting at its first gate, so
# that the console (scripts/console.sh) has an approval to show; it is
# started only when no such run is waiting already (it ends with the
# definition's 1 hour deadline), and reruns keep it.
# Any failed check makes the demo exit 1.
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
    touch "$WORK/stop" "$WORK/wf-stop"
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
if [ "$problems" -eq 0 ]; then
    echo "tasks: OK: $TOTAL tasks, all terminal and where their payload said, in ${ELAPSED}s"
fi
TASK_PROBLEMS=$problems
ERRORS_SEEN=$( [ -f "$WORK/errors.log" ] && wc -l <"$WORK/errors.log" || echo 0)

# ===========================================================================
# Workflows: a gated release pipeline (internal steps
# that run automatically, two human gates, a compensable deploy, a hard
# deadline), three runs: the happy path, a paused run resumed with a drift
# check (OR010), and a deploy that fails after a compensable step succeeded.
# ===========================================================================
WF=demo_release
WFQ=demo_wf
WF_TIMEOUT=${ORCH_DEMO_WF_TIMEOUT:-40}
WF_SPEC=$(cat <<'JSON'
{
  "description": "Demo release pipeline: internal steps run automatically, two human gates wait for a person, deploy is never retried blindly and is compensated, any failure undoes what succeeded.",
  "input_schema": {
    "required": ["change_id", "scenario"],
    "properties": {"change_id": {"type": "string"}, "scenario": {"type": "string"}}
  },
  "policies": {
    "deadline": "1 hour",
    "queue": "demo_wf",
    "retry_policy": {"max_attempts": 3, "schedule": ["1 s", "2 s", "4 s"], "retry_on": ["TRANSIENT", "RATE_LIMITED"]}
  },
  "steps": [
    {"step_id": "plan", "handler": "release.plan", "timeout": "2 minutes"},
    {"step_id": "design_review", "type": "human_approval", "description": "gate 1: a person reviews the plan",
     "depends_on": ["plan"], "timeout": "8 hours"},
    {"step_id": "build", "handler": "release.build", "depends_on": ["design_review"], "timeout": "10 minutes",
     "compensation": {"handler": "release.discard_build"}},
    {"step_id": "test", "handler": "release.test", "depends_on": ["build"], "timeout": "10 minutes"},
    {"step_id": "release_approval", "type": "human_approval", "description": "gate 2: a person approves the release",
     "depends_on": ["test"], "timeout": "8 hours"},
    {"step_id": "deploy", "type": "external_call", "handler": "release.deploy", "depends_on": ["release_approval"],
     "timeout": "5 minutes", "retry_safety": "NOT_SAFE_TO_RETRY",
     "compensation": {"handler": "release.rollback"}}
  ]
}
JSON
)

echo
echo "== workflows: definition '$WF' (gated release pipeline), queue '$WFQ'"
sql "SELECT CASE WHEN EXISTS (SELECT 1 FROM orch_queues WHERE queue = '$WFQ')
            THEN orch_configure_queue('$WFQ', '{\"lease\": \"30 seconds\"}')
            ELSE orch_create_queue('$WFQ', '{\"lease\": \"30 seconds\"}') END" >/dev/null
# Define and publish once per database: reuse the latest published version
# when its spec is this one; otherwise (first run, or the spec changed)
# define the next version and publish it.
same=$(sql "SELECT coalesce((SELECT (spec = \$spec\$$WF_SPEC\$spec\$::jsonb)::text FROM orch_definitions
                              WHERE name = '$WF' AND status = 'published' ORDER BY version DESC LIMIT 1), 'none')")
if [ "$same" = true ]; then
    echo "reusing the published definition (defined by an earlier demo run):"
else
    v=$(sql "SELECT orch_define('$WF', \$spec\$$WF_SPEC\$spec\$::jsonb)")
    sql "SELECT orch_publish('$WF', $v)" >/dev/null
    echo "defined and published version $v$( [ "$same" = false ] && echo " (the spec changed since the last published version)"):"
fi
show "SELECT name, version, status, left(content_hash, 16) || '...' AS content_hash,
             jsonb_array_length(spec -> 'steps') AS steps, spec -> 'policies' ->> 'deadline' AS deadline
        FROM orch_definition('$WF')"
sql "SELECT string_agg(format('%s (%s%s%s)', s ->> 'step_id', coalesce(s ->> 'type', 'task'),
                              coalesce(', after ' || (s -> 'depends_on' ->> 0), ''),
                              coalesce(', compensation ' || (s -> 'compensation' ->> 'handler'), '')), ' -> ')
       FROM orch_definition('$WF') d, jsonb_array_elements(d.spec -> 'steps') s" | fold -s -w 100 | sed 's/^/  /'

# Runs of earlier demo runs that did not finish (an interrupted demo) are
# cancelled, so that their tasks do not meet this run's workers; a run left
# waiting at a gate on purpose (scenario "waiting", below) is kept.
left=$(sql "SELECT count(orch_cancel_run(run_id, 'demo: leftover of an earlier run'))
              FROM orch_runs WHERE definition = '$WF' AND state IN ('running', 'waiting_approval', 'paused')
               AND NOT (state = 'waiting_approval' AND input ->> 'scenario' = 'waiting')")
[ "$left" = 0 ] || echo "cancelled $left workflow run(s) left over from an earlier demo run"

# Workers: claim one step task at a time from the queue and act as the run's
# input says (the failure scenario's deploy fails NON_RETRYABLE); a
# compensation task (step_key "<step>:compensate") is completed.
wf_worker() {
    local me=$1 row id tok key run scen handler comp call out
    while [ ! -e "$WORK/wf-stop" ]; do
        if ! row=$(sql "SELECT d.task_id, d.lease_token, d.step_key, coalesce(d.payload ->> 'run_id', '?'),
                               coalesce(d.payload -> 'input' ->> 'scenario', ''), coalesce(d.payload ->> 'handler', ''),
                               coalesce(d.payload ->> 'compensation', '')
                          FROM orch_dequeue('$WFQ', '$me') d" 2>"$WORK/$me.err"); then
            record_error "$me" dequeue "$WORK/$me.err"
            sleep 0.5
            continue
        fi
        if [ -z "$row" ]; then sleep 0.2; continue; fi
        IFS='|' read -r id tok key run scen handler comp <<<"$row"
        if [ -n "$comp" ]; then
            call="SELECT orch_complete($id, '$tok', '{\"undone\": true, \"by\": \"$me\"}')"
            handler=$comp
        elif [ "$key" = deploy ] && [ "$scen" = failure ]; then
            call="SELECT state || ' (' || reason_code || ')' FROM orch_fail($id, '$tok', 'NON_RETRYABLE', 'deploy: canary health check failed on 3 of 3 hosts (simulated)')"
        else
            call="SELECT orch_complete($id, '$tok', jsonb_build_object('by', '$me', 'handler', '$handler'))"
        fi
        if out=$(sql "$call" 2>"$WORK/$me.err"); then
            printf '  %-11s run %s %-18s %-22s -> %s\n' "$me" "$run" "$key" "($handler)" "$out"
        else
            record_error "$me" "run $run $key" "$WORK/$me.err"
        fi
    done
}

# wait_for WHAT SQL: poll until SQL returns t (or WF_TIMEOUT seconds pass).
wait_for() {
    local what=$1 q=$2 i
    for ((i = 0; i < WF_TIMEOUT * 5; i++)); do
        [ "$(sql "$q" 2>/dev/null)" = t ] && return 0
        sleep 0.2
    done
    echo "  TIMEOUT after ${WF_TIMEOUT}s waiting for: $what"
    return 1
}
step_state() { # run step -> "<state>"
    sql "SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = '$2'"
}
await_gate() { # run step
    wait_for "run $1: $2 awaiting approval" \
        "SELECT EXISTS (SELECT 1 FROM orch_run_steps WHERE run_id = $1 AND step_id = '$2' AND state = 'awaiting_approval')"
}
approve() { # run step ref actor note -> the run's state
    local out
    if out=$(sql "SELECT orch_approve($1, '$2', '$3', '$4', '$5')" 2>"$WORK/approve.err"); then
        printf '  %-11s run %s %-18s approved by %s with reference %s -> run %s\n' operator "$1" "$2" "$4" "$3" "$out"
    else
        record_error operator "run $1 approve $2" "$WORK/approve.err"
    fi
}

wf_problems=0
wf_problem() { echo "PROBLEM: $*"; wf_problems=$((wf_problems + 1)); }
expect() { # description got want
    if [ "$2" = "$3" ]; then
        printf '  ok   %s\n' "$1"
    else
        printf '  FAIL %s: got "%s", expected "%s"\n' "$1" "$2" "$3"
        wf_problems=$((wf_problems + 1))
    fi
}

# Three runs; idempotency keys and approval references carry this demo run's
# id, so a rerun starts new runs (and a reference is never reused: OR009).
start_run() { # scenario pins
    sql "SELECT orch_start('$WF', jsonb_build_object('change_id', 'CHG-$RUN', 'scenario', '$1'),
                           idempotency_key => 'demo-$RUN-$1', pins => '$2')"
}
PINS='{"commit": "c0ffee1", "config": "prod-v42"}'
R_HAPPY=$(start_run happy '{"commit": "c0ffee1"}')
R_DRIFT=$(start_run drift "$PINS")
R_FAIL=$(start_run failure '{"commit": "c0ffee1"}')
again=$(start_run happy '{"commit": "c0ffee1"}')
echo "started run $R_HAPPY (happy path), run $R_DRIFT (pause + drift-checked resume), run $R_FAIL (deploy fails, compensation)"
# A fourth run is left waiting at its first gate for a person (the console
# shows it), unless one waits already: reruns do not pile them up.
R_WAIT=$(sql "SELECT min(run_id) FROM orch_runs WHERE definition = '$WF' AND state = 'waiting_approval'
                 AND input ->> 'scenario' = 'waiting'")
WAIT_NEW=0
if [ -z "$R_WAIT" ]; then
    R_WAIT=$(start_run waiting '{"commit": "c0ffee1"}')
    WAIT_NEW=1
    echo "started run $R_WAIT (left waiting at its first gate for a person)"
fi
echo "  orch_start again with the key demo-$RUN-happy returns run $again (the same run, nothing new)"
expect "the same idempotency key returns the same run" "$again" "$R_HAPPY"

rm -f "$WORK/wf-stop"
for w in 1 2; do wf_worker "wf-worker-$w" & BGPIDS+=($!); done
WF_START=$(date +%s)

# Gate 1 (design_review) on all three; the drift run is approved and paused
# in one transaction, so no worker can pick up its next step in between.
for r in "$R_HAPPY" "$R_DRIFT" "$R_FAIL"; do await_gate "$r" design_review || wf_problems=$((wf_problems + 1)); done
approve "$R_HAPPY" design_review "DR-$RUN-1" alice "plan reviewed"
approve "$R_FAIL"  design_review "DR-$RUN-3" alice "plan reviewed"
if out=$(sql "SELECT orch_approve($R_DRIFT, 'design_review', 'DR-$RUN-2', 'alice', 'plan reviewed');
              SELECT orch_pause_run($R_DRIFT)" 2>"$WORK/approve.err"); then
    printf '  %-11s run %s %-18s approved by alice with reference DR-%s-2 and paused in the same transaction -> run %s\n' \
        operator "$R_DRIFT" design_review "$RUN" "$(echo "$out" | tail -n1)"
else
    record_error operator "run $R_DRIFT approve+pause" "$WORK/approve.err"
fi
sleep 2
printf '  %-11s run %s 2 s later: run %s, its build step %s, build task %s (not handed out while paused)\n' \
    operator "$R_DRIFT" "$(sql "SELECT state FROM orch_runs WHERE run_id = $R_DRIFT")" "$(step_state "$R_DRIFT" build)" \
    "$(sql "SELECT coalesce(max(state), 'none') FROM orch_tasks WHERE run_id = $R_DRIFT AND step_key = 'build'")"
expect "run $R_DRIFT is paused" "$(sql "SELECT state FROM orch_runs WHERE run_id = $R_DRIFT")" paused
expect "the paused run's build task is not handed out" \
    "$(sql "SELECT coalesce(max(state), 'none') FROM orch_tasks WHERE run_id = $R_DRIFT AND step_key = 'build'")" queued

# Resume with other pins: OR010 (drift), nothing changes; then the matching pins.
WRONG='{"commit": "deadbee", "config": "prod-v42"}'
if sql "SELECT orch_resume_run($R_DRIFT, '$WRONG')" >/dev/null 2>"$WORK/drift.err"; then
    echo "  operator    run $R_DRIFT orch_resume_run with pins $WRONG succeeded: NO DRIFT DETECTED"
    wf_problems=$((wf_problems + 1))
else
    echo "  operator    run $R_DRIFT orch_resume_run with pins $WRONG -> refused, as it should be:"
    grep -E '^(ERROR|DETAIL|HINT):' "$WORK/drift.err" | sed 's/^/                /'
    expect "the drift is reported with SQLSTATE OR010" \
        "$(grep -qE '^ERROR: +OR010:' "$WORK/drift.err" && echo OR010 || head -n1 "$WORK/drift.err")" OR010
fi
expect "run $R_DRIFT is still paused after the refused resume" \
    "$(sql "SELECT state FROM orch_runs WHERE run_id = $R_DRIFT")" paused
if out=$(sql "SELECT orch_resume_run($R_DRIFT, '$PINS')" 2>"$WORK/drift.err"); then
    echo "  operator    run $R_DRIFT orch_resume_run with the pinned $PINS -> $out"
else
    record_error operator "run $R_DRIFT resume" "$WORK/drift.err"
fi

# Gate 2 (release_approval) on all three, then deploy.
for r in "$R_HAPPY" "$R_DRIFT" "$R_FAIL"; do
    if await_gate "$r" release_approval; then
        approve "$r" release_approval "REL-$RUN-$r" bob "release window open"
    else
        wf_problems=$((wf_problems + 1))
    fi
done
wait_for "every run finished (the failed one compensated)" \
    "SELECT bool_and(state IN ('succeeded', 'failed', 'canceled')) FROM orch_runs
      WHERE run_id IN ($R_HAPPY, $R_DRIFT, $R_FAIL)" || wf_problems=$((wf_problems + 1))
if [ "$WAIT_NEW" = 1 ]; then
    await_gate "$R_WAIT" design_review || wf_problems=$((wf_problems + 1))
fi
touch "$WORK/wf-stop"
wait "${BGPIDS[@]}" 2>/dev/null || true
BGPIDS=()
WF_ELAPSED=$(( $(date +%s) - WF_START ))

# ---------------------------------------------------------------------------
# Summary per run: orch_runs (state, reason), orch_run_steps (steps) and
# orch_run_status (each step's tasks and attempts, approvals, events).
# ---------------------------------------------------------------------------
summary() { # run title
    echo
    echo "== run $1: $2"
    sql "SELECT format('state %s (reason %s, phase %s)%s; definition %s v%s; pins %s; deadline %s (%s after the start)',
                       state, reason_code, phase,
                       coalesce(', failed step ' || failed_step || ': ' || error, ''),
                       definition, version, pins - 'definition' - 'version' - 'content_hash',
                       to_char(deadline_at AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC', deadline_at - created_at)
           FROM orch_runs WHERE run_id = $1" | fold -s -w 110 | sed 's/^/  /'
    show "SELECT s.step_id, s.type, s.state, coalesce(s.compensation, '') AS compensation,
                 coalesce((SELECT string_agg(format('%s: %s%s, %s attempt(s)', t ->> 'step_key', t ->> 'state',
                                         CASE WHEN t ->> 'reason_code' <> t ->> 'state'
                                              THEN ' (' || (t ->> 'reason_code') || ')' ELSE '' END,
                                         t ->> 'attempts'), '; ')
                             FROM jsonb_array_elements(x -> 'tasks') t), '') AS tasks,
                 coalesce((SELECT string_agg(format('%s by %s', a ->> 'approval_ref', a ->> 'label'), ', ')
                             FROM jsonb_array_elements(st -> 'approvals') a
                            WHERE a ->> 'step_id' = s.step_id), '') AS approval
            FROM orch_run_steps s
            CROSS JOIN orch_run_status($1) st
            LEFT JOIN LATERAL (SELECT x FROM jsonb_array_elements(st -> 'steps') x
                                WHERE x ->> 'step_id' = s.step_id) j ON true
           WHERE s.run_id = $1 ORDER BY s.ord"
    sql "SELECT 'run transitions: ' || string_agg(coalesce(e ->> 'from_state', '') || '->' || (e ->> 'to_state')
                                                   || ' (' || (e ->> 'reason_code') || ')', ', ')
           FROM jsonb_array_elements(orch_run_status($1) -> 'events') e WHERE e ->> 'entity' = 'run'" \
        | fold -s -w 110 | sed 's/^/  /'
}
summary "$R_HAPPY" "happy path (both gates approved, deploy completes)"
summary "$R_DRIFT" "paused after gate 1, resume refused on drift (OR010), resumed with the pinned context"
summary "$R_FAIL"  "deploy fails NON_RETRYABLE after build succeeded: build is compensated"

# ---------------------------------------------------------------------------
# Checks.
# ---------------------------------------------------------------------------
echo
echo "== workflow checks"
rs() { sql "SELECT state || '/' || reason_code FROM orch_runs WHERE run_id = $1"; }
steps_of() { sql "SELECT string_agg(step_id || '=' || state, ' ' ORDER BY ord) FROM orch_run_steps WHERE run_id = $1"; }
ALLOK="plan=succeeded design_review=succeeded build=succeeded test=succeeded release_approval=succeeded deploy=succeeded"
expect "run $R_HAPPY succeeded" "$(rs "$R_HAPPY")" succeeded/completed
expect "run $R_HAPPY: every step succeeded" "$(steps_of "$R_HAPPY")" "$ALLOK"
expect "run $R_HAPPY: both gates approved with their references" \
    "$(sql "SELECT string_agg(step_id || ':' || approval_ref, ' ' ORDER BY decided_at) FROM orch.approvals WHERE run_id = $R_HAPPY AND approved")" \
    "design_review:DR-$RUN-1 release_approval:REL-$RUN-$R_HAPPY"
expect "run $R_HAPPY: deadline 1 hour after the start" \
    "$(sql "SELECT deadline_at - created_at FROM orch_runs WHERE run_id = $R_HAPPY")" 01:00:00
expect "run $R_DRIFT succeeded" "$(rs "$R_DRIFT")" succeeded/completed
expect "run $R_DRIFT: every step succeeded" "$(steps_of "$R_DRIFT")" "$ALLOK"
expect "run $R_DRIFT: paused once, resumed once (the refused resume changed nothing)" \
    "$(sql "SELECT count(*) FILTER (WHERE to_state = 'paused') || ' paused, '
                   || count(*) FILTER (WHERE from_state = 'paused' AND to_state = 'running') || ' resumed'
              FROM orch_events WHERE run_id = $R_DRIFT AND entity = 'run'")" "1 paused, 1 resumed"
expect "run $R_FAIL failed at deploy" \
    "$(sql "SELECT state || '/' || reason_code || '/' || failed_step FROM orch_runs WHERE run_id = $R_FAIL")" failed/step_failed/deploy
expect "run $R_FAIL: deploy failed once, not retried (NOT_SAFE_TO_RETRY, NON_RETRYABLE)" \
    "$(sql "SELECT state || ' after ' || attempts || ' attempt(s)' FROM orch_tasks WHERE run_id = $R_FAIL AND step_key = 'deploy'")" \
    "failed after 1 attempt(s)"
expect "run $R_FAIL: build's compensation ran and is done" "$(sql "SELECT compensation FROM orch_run_steps WHERE run_id = $R_FAIL AND step_id = 'build'")" "done"
expect "run $R_FAIL: the compensation task (release.discard_build) completed" \
    "$(sql "SELECT string_agg(state || ':' || (payload ->> 'compensation'), ' ') FROM orch_tasks WHERE run_id = $R_FAIL AND step_key LIKE '%:compensate'")" \
    "completed:release.discard_build"
expect "run $R_FAIL: the compensation started when deploy failed" \
    "$(sql "SELECT count(*) FROM orch_events WHERE run_id = $R_FAIL AND entity = 'run' AND reason_code = 'compensation_started'")" 1
open=$(sql "SELECT count(*) FROM orch_tasks WHERE run_id IN ($R_HAPPY, $R_DRIFT, $R_FAIL) AND state NOT IN ('completed', 'failed', 'cancelled')")
expect "no task of the three runs left open" "$open" 0
now_errors=$( [ -f "$WORK/errors.log" ] && wc -l <"$WORK/errors.log" || echo 0)
if [ "$now_errors" -gt "$ERRORS_SEEN" ]; then
    echo "PROBLEM: unexpected errors in the workflow part:"
    tail -n +"$((ERRORS_SEEN + 1))" "$WORK/errors.log" | sed 's/^/  /'
    wf_problems=$((wf_problems + 1))
fi
gate=$(sql "SELECT string_agg(step_id, ', ') FROM orch_run_steps WHERE run_id = $R_WAIT AND state = 'awaiting_approval'")
expect "run $R_WAIT waits for a person" "$(sql "SELECT state FROM orch_runs WHERE run_id = $R_WAIT")" waiting_approval
echo "run $R_WAIT is left waiting at its gate ${gate:-?}$( [ "$WAIT_NEW" = 1 ] || echo " (started by an earlier demo; no new one started)"):" \
     "approve or reject it in the console (bash scripts/console.sh, page Approvals) or with" \
     "SELECT orch_approve($R_WAIT, '${gate:-design_review}', '<reference>'); it fails at its deadline" \
     "$(sql "SELECT to_char(deadline_at AT TIME ZONE 'UTC', 'HH24:MI') || ' UTC' FROM orch_runs WHERE run_id = $R_WAIT")"
if [ "$wf_problems" -eq 0 ]; then
    echo "workflows: OK: 3 runs (succeeded; succeeded after a refused drifted resume; failed at deploy with build compensated) in ${WF_ELAPSED}s"
fi

# What an operator sees: the counters (folded now, as orch_maintain does
# every minute), the durations, and the review queue.
echo
echo "== operating: orch_queue_stats, orch_durations, orch_review_queue, Prometheus =="
sql "SELECT orch_metrics_refresh()" >/dev/null
show "SELECT tenant_id, queue, ready, executing, enqueued_total, completed_total, failed_total, dead_letters
                    FROM orch_queue_stats ORDER BY queue" || wf_problems=$((wf_problems + 1))
show "SELECT queue, step_type, kind, samples, round(p50_seconds::numeric, 3) AS p50_s,
                        round(p95_seconds::numeric, 3) AS p95_s
                   FROM orch_durations ORDER BY queue, step_type, kind" || wf_problems=$((wf_problems + 1))
show "SELECT kind, queue, task_id, run_id, action FROM orch_review_queue ORDER BY since LIMIT 10" \
    || wf_problems=$((wf_problems + 1))
prom_lines=$(sql "SELECT count(*) FROM regexp_split_to_table(orch_metrics_prometheus(), E'\\n') l WHERE l LIKE 'orch_%'")
echo "orch_metrics_prometheus(): $prom_lines samples"
[ "${prom_lines:-0}" -gt 0 ] || { echo "PROBLEM: no Prometheus samples"; wf_problems=$((wf_problems + 1)); }

problems=$((TASK_PROBLEMS + wf_problems))
if [ "$problems" -gt 0 ]; then
    echo "demo: FAILED ($TASK_PROBLEMS task problem(s), $wf_problems workflow problem(s))"
    exit 1
fi
echo "demo: OK: $TOTAL tasks, all terminal and where their payload said, in ${ELAPSED}s; 3 workflow runs as expected in ${WF_ELAPSED}s; run $R_WAIT waits at a gate"
