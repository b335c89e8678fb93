#!/usr/bin/env bash
# bench/scrape.sh: what a metrics scrape costs on a database with a long
# finished history (issue 9: 10M completed tasks, a scrape under 50 ms).
#
#   bash bench/scrape.sh                    # 10M completed tasks (~10 min)
#   SCRAPE_ROWS=1000000 bash bench/scrape.sh
#
# Loads SCRAPE_ROWS completed tasks (with one attempt and one event each,
# written the way pg_restore writes them), two days of per-minute counters
# for 20 (tenant, queue) pairs, and open work (10,000 ready tasks, 100
# executing, 50 dead letters) through the API; then times, with pgbench,
# one client, SCRAPE_SECS seconds each: orch_metrics_prometheus(), the views
# orch_queue_stats, orch_error_stats, orch_durations, orch_review_queue, and
# orch_metrics_refresh() with nothing new; next to them, as the baseline,
# the query an operator would write without the counters (tasks by queue
# and state: a scan of the whole table).
#
# Environment: SCRAPE_PORT (default 55434), SCRAPE_ROWS (10000000),
# SCRAPE_SECS (10), BENCH_SKIP_BUILD=1, BENCH_KEEP=1, ORCH_PG_BINDIR.  Runs
# as root.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"
PORT=${SCRAPE_PORT:-55434}
ROWS=${SCRAPE_ROWS:-10000000}
SECS=${SCRAPE_SECS:-10}
KEEP=${BENCH_KEEP:-0}

[ "$(id -u)" = 0 ] || die "run as root (PostgreSQL runs as the postgres OS user)"
ensure_packages
build_extension

WORK=$(work_dir orch-scrape)
DATA=$WORK/data
cleanup() {
    local rc=$?
    [ -f "$DATA/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true
    if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

init_cluster "$DATA" "$WORK" "$PORT"
cat >>"$DATA/postgresql.conf" <<EOF

# ---- bench/scrape.sh ----
work_mem = 16MB
maintenance_work_mem = 512MB
random_page_cost = 1.1
EOF
start_cluster "$DATA" "$WORK/server.log"
PSQL=("$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -U postgres)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE bench" >/dev/null
sql() { "${PSQL[@]}" -d bench -At -c "$1"; }
sql "CREATE EXTENSION orchestrator" >/dev/null

log "loading $ROWS completed tasks with their attempts and events (restore path)"
t0=$(date +%s)
"${PSQL[@]}" -d bench >/dev/null <<EOF
SET synchronous_commit = off;
SET row_security = off;   -- the restore path: rows go in as they are
SELECT count(orch_create_queue('q' || i)) FROM generate_series(0, 9) i;
INSERT INTO orch.tasks (id, tenant_id, queue, state, payload, result, run_at, attempts,
                        reason_code, created_at, updated_at, finished_at, claimed_at)
SELECT g, CASE WHEN g % 2 = 0 THEN 'default' ELSE 't2' END, 'q' || (g % 10), 'completed',
       '{"n": 1}', '{"ok": true}', now() - interval '3 days', 1, 'completed',
       now() - interval '3 days', now() - interval '2 days', now() - interval '2 days',
       now() - interval '2 days'
  FROM generate_series(1, $ROWS) g;
-- (xact NULL: rows from before the counters, as after an upgrade; the
-- fold never reads them)
INSERT INTO orch.attempts (tenant_id, task_id, attempt, worker, started_at, finished_at, outcome, xact)
SELECT CASE WHEN g % 2 = 0 THEN 'default' ELSE 't2' END, g, 1, 'w', now() - interval '2 days',
       now() - interval '2 days', 'completed', NULL
  FROM generate_series(1, $ROWS) g;
INSERT INTO orch.events (tenant_id, task_id, entity, from_state, to_state, reason_code, actor, attempt, at, xact)
SELECT CASE WHEN g % 2 = 0 THEN 'default' ELSE 't2' END, g, 'task', 'executing', 'completed',
       'completed', 'w', 1, now() - interval '2 days', NULL
  FROM generate_series(1, $ROWS) g;
SELECT setval('orch.events_id_seq', $ROWS);
-- two days of folded counters, as orch_maintain leaves them
INSERT INTO orch.metric_minutes (minute, tenant_id, queue, metric, l1, l2, value)
SELECT m, t, 'q' || q, x.metric, x.l1, x.l2, 10
  FROM generate_series(date_trunc('minute', now()) - interval '2 days', date_trunc('minute', now()), '1 minute') m,
       unnest(ARRAY['default', 't2']) t, generate_series(0, 9) q,
       (VALUES ('enqueued', '', ''), ('started', '', ''), ('finished', 'completed', ''),
               ('attempt', 'completed', ''), ('retry', 'TRANSIENT', 'retry_scheduled'),
               ('attempt_seconds', 'task', '0.1'), ('attempt_seconds', 'task', '0.25'),
               ('attempt_seconds_sum', 'task', ''), ('wait_seconds', 'task', '0.01'),
               ('wait_seconds_sum', 'task', '')) x(metric, l1, l2);
INSERT INTO orch.metric_totals (tenant_id, queue, metric, l1, l2, value)
SELECT tenant_id, queue, metric, l1, l2, sum(value) FROM orch.metric_minutes GROUP BY 1, 2, 3, 4, 5
ON CONFLICT (tenant_id, queue, metric, l1, l2) DO UPDATE SET value = excluded.value;
EOF
log "loaded in $(( $(date +%s) - t0 ))s; adding open work through the API"
"${PSQL[@]}" -d bench >/dev/null <<'EOF'
SELECT count(*) FROM (SELECT orch_enqueue_batch('q' || i, array_fill('{}'::jsonb, ARRAY[1000]))
                        FROM generate_series(0, 9) i) s;
SELECT count(*) FROM orch_dequeue('q1', 'bench-worker', 100);
SELECT orch_create_queue('dead', '{"max_attempts": 1}');
SELECT count(*) FROM orch_enqueue_batch('dead', array_fill('{}'::jsonb, ARRAY[50]));
SELECT count(*) FROM orch_dequeue('dead', 'w', 50) d, LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'bench') f;
SELECT orch_metrics_refresh() >= 0;
VACUUM ANALYZE;
CHECKPOINT;
EOF

sizes=$(sql "SELECT string_agg(format('%s %s', c.relname, pg_size_pretty(pg_total_relation_size(c.oid))), ', ' ORDER BY c.relname)
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'orch' AND c.relname IN ('tasks', 'attempts', 'events', 'metric_minutes', 'metric_totals')")

time_query() { # NAME SQL -> "name p50 p95 p99 n"
    local name=$1 q=$2 f=$WORK/q_$1.sql
    printf '%s\n' "$q" >"$f"
    chmod 644 "$f"
    rm -f "$WORK"/pgbench_log.*
    (cd "$WORK" && as_pg "$PGBIN/pgbench" -n -h "$WORK" -p "$PORT" -U postgres -c 1 -T "$SECS" \
        -f "$f" -l --log-prefix="$WORK/pgbench_log" bench >/dev/null 2>&1) || die "pgbench failed: $name"
    cat "$WORK"/pgbench_log.* | awk '{print $3}' | sort -n | awk -v name="$name" '
        { v[NR] = $1 }
        END { if (NR == 0) { print name, "-", "-", "-", 0; exit }
              printf "%s %.2f %.2f %.2f %d\n", name, v[int(NR*0.5)+ (NR*0.5 > int(NR*0.5))]/1000,
                     v[int(NR*0.95) + (NR*0.95 > int(NR*0.95))]/1000, v[int(NR*0.99) + (NR*0.99 > int(NR*0.99))]/1000, NR }'
}

log "timing ($SECS s each, one client)"
results=()
results+=("$(time_query prometheus 'SELECT length(orch_metrics_prometheus());')")
results+=("$(time_query queue_stats 'SELECT count(*) FROM orch_queue_stats;')")
results+=("$(time_query error_stats 'SELECT count(*) FROM orch_error_stats;')")
results+=("$(time_query durations 'SELECT count(*) FROM orch_durations;')")
results+=("$(time_query review_queue 'SELECT count(*) FROM orch_review_queue;')")
results+=("$(time_query refresh_idle 'SELECT orch_metrics_refresh();')")
results+=("$(time_query baseline_group_by 'SELECT queue, state, count(*) FROM orch.tasks GROUP BY 1, 2;')")

echo
echo "orchestrator metrics scrape: $ROWS completed tasks, 10,000 ready, 100 executing, 50 dead letters"
echo "table sizes: $sizes"
printf '%-20s %10s %10s %10s %8s\n' query p50_ms p95_ms p99_ms calls
for r in "${results[@]}"; do
    set -- $r
    printf '%-20s %10s %10s %10s %8s\n' "$1" "$2" "$3" "$4" "$5"
done
echo "(baseline_group_by: the same per-queue, per-state counts without the counters: a scan of the whole task table)"
