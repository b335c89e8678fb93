'use strict';
// db.js: every SQL statement of the console.  Only the extension's SQL API
// (its views and functions) is used, never the orch.* tables, and always
// with parameters ($1, $2, ...), never with values pasted into SQL text.
// The console acts as the role it connects as: grants, tenant bindings and
// row-level security decide what it sees and may do.

const { Pool, types: pgTypes } = require('pg');

// Timestamps, intervals, json and bigint are shown as PostgreSQL prints
// them: no conversion in JavaScript (no time zone shift, no precision loss).
const AS_TEXT = new Set([20, 114, 1082, 1114, 1184, 1186, 3802]);
const types = {
  getTypeParser(oid, format) {
    if (AS_TEXT.has(oid)) return (v) => v;
    return pgTypes.getTypeParser(oid, format);
  },
};

const TASK_STATES = ['received', 'queued', 'executing', 'awaiting_tool', 'awaiting_user_confirmation',
  'completed', 'failed', 'cancelled'];
const ERROR_CLASSES = ['TRANSIENT', 'RETRYABLE', 'RATE_LIMITED', 'DEPENDENCY_FAILED', 'NON_RETRYABLE',
  'COMPENSATION_REQUIRED'];
const DEAD_LETTER_REASONS = ['max_attempts_exhausted', 'max_failures_exhausted', 'non_retryable',
  'compensation_required', 'not_safe_to_retry'];
const RUN_STATES = ['running', 'waiting_approval', 'paused', 'succeeded', 'failed', 'canceled'];
const PAGE = 100;
const COUNT_CAP = 10000;      // totals are counted up to this, then shown as "more than"
const BULK_MAX = 1000;        // the most tasks one bulk action touches

// Derived states: what orch_queue_stats counts, as conditions on the
// columns of orch_tasks.  Each names the raw state it is a case of.
const DERIVED_STATES = {
  ready: { label: 'ready', raw: 'queued', sql: "(state = 'queued' AND NOT gated AND run_at <= now())" },
  delayed: { label: 'delayed', raw: 'queued', sql: "(state = 'queued' AND NOT gated AND run_at > now())" },
  gated: { label: 'gated', raw: 'queued', sql: "(state = 'queued' AND gated)" },
  retry_waiting: { label: 'retry waiting', raw: 'awaiting_tool', sql: "(state = 'awaiting_tool' AND retry_at IS NOT NULL)" },
  tool_waiting: { label: 'awaiting a tool', raw: 'awaiting_tool', sql: "(state = 'awaiting_tool' AND retry_at IS NULL)" },
};

// The derived state of a row of orch_tasks, in SQL (NULL: none).
const DERIVED_SQL = `CASE WHEN state = 'awaiting_tool' AND retry_at IS NOT NULL THEN 'retry_waiting'
                          WHEN state = 'queued' AND gated THEN 'gated'
                          WHEN state = 'queued' AND run_at > now() THEN 'delayed'
                          WHEN state = 'queued' THEN 'ready' END AS derived`;

// where(filters): a WHERE clause and its parameters from [column, operator,
// value] triples whose value is not empty.  Columns and operators come from
// this file, values only ever travel as parameters.
function where(filters, params) {
  const parts = [];
  for (const [col, op, value, cast] of filters) {
    if (value === undefined || value === null || value === '') continue;
    params.push(value);
    parts.push(`${col} ${op} $${params.length}${cast ? `::${cast}` : ''}`);
  }
  return parts.length ? `WHERE ${parts.join(' AND ')}` : '';
}

// Is a list asked for with none of these filters (its page only)?
function onlyPaging(f, filters) {
  return filters.every((k) => f[k] === undefined || f[k] === null || f[k] === '');
}

// The columns of a schedule the console shows: the target's kind and name
// apart, the next slot also as a wall-clock time in the schedule's zone.
const SCHEDULE_COLS = `name, tenant_id, cron, timezone, jsonb_pretty(target) AS target_pretty,
  target ->> 'queue' AS target_queue, target ->> 'definition' AS target_definition,
  target ->> 'version' AS target_version, overlap, catch_up, catch_up_window, paused, next_fire_at,
  to_char(next_fire_at AT TIME ZONE timezone, 'YYYY-MM-DD HH24:MI') AS next_fire_local,
  last_fired_slot, to_char(last_fired_slot AT TIME ZONE timezone, 'YYYY-MM-DD HH24:MI') AS last_fired_local,
  pending_slot, last_task_id, last_run_id, fired, skipped, last_error, created_by, created_at, updated_at`;

function createDb(connectionString) {
  const pool = new Pool({
    connectionString: connectionString || undefined,
    max: 5,
    application_name: 'orchestrator-console',
    types,
  });
  pool.on('error', () => {});   // an idle client lost its connection: the next query reconnects

  const q = async (sql, params = []) => (await pool.query(sql, params)).rows;
  const one = async (sql, params) => (await q(sql, params))[0];

  return {
    end: () => pool.end(),

    whoami: () => one('SELECT current_user AS role, current_database() AS db, orch_caller_tenants() AS tenants'),

    // ---- queues ---------------------------------------------------------
    queueStats: () => q('SELECT * FROM orch_queue_stats ORDER BY queue, tenant_id'),
    queues: () => q('SELECT queue, paused FROM orch_queues ORDER BY queue'),
    pauseQueue: (name) => one('SELECT orch_pause_queue($1) AS r', [name]),
    resumeQueue: (name) => one('SELECT orch_resume_queue($1) AS r', [name]),
    // The per-minute series of the last hour (orch_throughput), for the
    // sparklines; null where the extension does not have it.
    throughput: async () => {
      const have = await one("SELECT to_regprocedure('orch_throughput(interval)') IS NOT NULL AS ok");
      if (!have.ok) return null;
      return q(`SELECT (extract(epoch FROM minute) / 60)::bigint AS minute, queue, tenant_id,
                       enqueued, completed, failed
                  FROM orch_throughput('1 hour')`);
    },
    // The folded counters of every queue, for the throughput sampler.
    queueTotals: () => q(`SELECT queue, tenant_id, enqueued_total, completed_total, failed_total, metrics_as_of
                            FROM orch_queue_stats`),
    errorStats: () => q(`SELECT * FROM orch_error_stats WHERE retries_1h > 0 OR failures_1h > 0
                          ORDER BY queue, tenant_id, error_class, reason_code`),
    metricsRefresh: () => one('SELECT orch_metrics_refresh() AS n'),

    // ---- tasks ----------------------------------------------------------
    // taskWhere(f): the WHERE clause of a task filter over orch_tasks.  The
    // derived states are the open-task figures of orch_queue_stats, read
    // from the view's columns: a retry wait is awaiting_tool with a
    // retry_at, delayed is queued for later, gated waits for a
    // concurrency slot.
    taskWhere(f, params) {
      const parts = [];
      const add = (sql, value, cast) => {
        if (value === undefined || value === null || value === '') return;
        params.push(value);
        parts.push(sql.replace('?', `$${params.length}${cast ? `::${cast}` : ''}`));
      };
      add('queue = ?', f.queue);
      if (DERIVED_STATES[f.state]) parts.push(DERIVED_STATES[f.state].sql);
      else add('state = ?', f.state);
      add('tenant_id = ?', f.tenant);
      add('last_error_class = ?', f.error_class);
      add('created_at >= ?', f.from, 'timestamptz');
      add('created_at < ?', f.to, 'timestamptz');
      add('run_id = ?', f.run_id, 'bigint');
      add('correlation_id = ?', f.correlation_id);
      add('payload @> ?', f.payload, 'jsonb');
      return parts;
    },
    tasks(f) {
      const params = [];
      const parts = this.taskWhere(f, params);
      // no filter but the page: the reader by key, which a tenant-bound role
      // reads through an index (the view reads every row of its tenants)
      const cols = `task_id, tenant_id, queue, state, reason_code, priority, attempts, failures,
                    last_error_class, last_error, run_id, step_key, correlation_id, created_at, updated_at,
                    run_at, retry_at, gated, ${DERIVED_SQL}`;
      if (!parts.length && !f.after) {
        return q(`SELECT ${cols} FROM orch_task_rows(before => $1::bigint, "limit" => $2)
                   ORDER BY task_id DESC`, [f.before || null, PAGE + 1]);
      }
      if (f.after) {
        // a page of newer tasks: read upwards, shown newest first
        params.push(f.after);
        parts.push(`task_id > $${params.length}::bigint`);
        params.push(PAGE + 1);
        return q(`SELECT * FROM (SELECT ${cols} FROM orch_tasks WHERE ${parts.join(' AND ')}
                   ORDER BY task_id LIMIT $${params.length}) t ORDER BY task_id DESC`, params);
      }
      if (f.before) { params.push(f.before); parts.push(`task_id < $${params.length}::bigint`); }
      params.push(PAGE + 1);
      return q(`SELECT ${cols} FROM orch_tasks WHERE ${parts.join(' AND ')}
                 ORDER BY task_id DESC LIMIT $${params.length}`, params);
    },
    // How many tasks match (paging aside), counted up to COUNT_CAP + 1.
    async taskCount(f) {
      const params = [];
      const parts = this.taskWhere(f, params);
      params.push(COUNT_CAP + 1);
      const r = await one(`SELECT count(*)::int AS n FROM (SELECT 1 FROM orch_tasks
                             ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''} LIMIT $${params.length}) c`, params);
      return r.n;
    },
    // The ids of the tasks matching a filter, newest first, at most max.
    async taskIds(f, max) {
      const params = [];
      const parts = this.taskWhere(f, params);
      params.push(max);
      return (await q(`SELECT task_id FROM orch_tasks ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''}
                        ORDER BY task_id DESC LIMIT $${params.length}`, params)).map((r) => r.task_id);
    },
    // Is there a task newer than this id under the filter?
    async newerTask(f, id) {
      const params = [];
      const parts = this.taskWhere(f, params);
      params.push(id);
      parts.push(`task_id > $${params.length}::bigint`);
      return !!(await one(`SELECT 1 AS x FROM orch_tasks WHERE ${parts.join(' AND ')} LIMIT 1`, params));
    },
    // What bulk actions need to know of some tasks: state, whether it is a
    // dead letter, its reason, its run.
    bulkRows: (ids) => q(`SELECT t.task_id, t.queue, t.state, t.reason_code, t.run_id, t.step_key,
                                 (t.state = 'failed' AND t.reason_code = ANY ($2::text[])
                                  AND NOT EXISTS (SELECT 1 FROM orch_task_rows(retry_of => t.task_id))) AS dead_letter
                            FROM orch_task_rows(task_ids => $1::bigint[], "limit" => 10000) t
                           ORDER BY t.task_id DESC`, [ids, DEAD_LETTER_REASONS]),
    // Do the bulk functions exist here?
    hasBulk: async () => (await one(`SELECT to_regprocedure('orch_cancel_where(jsonb,text,integer)') IS NOT NULL
                                            AND to_regprocedure('orch_retry_where(jsonb,integer)') IS NOT NULL AS b`)).b,
    cancelWhere: (ids, reason) => q(`SELECT task_id, state FROM orch_cancel_where($1::jsonb, $2, $3::int)`,
      [JSON.stringify({ task_ids: ids.map(Number) }), reason || null, Math.max(1, ids.length)]),
    retryWhere: (ids) => q(`SELECT task_id, new_task_id FROM orch_retry_where($1::jsonb, $2::int)`,
      [JSON.stringify({ task_ids: ids.map(Number) }), Math.max(1, ids.length)]),
    // orch_status raises OR005 for an unknown task (or one of another tenant).
    taskStatus: (id) => one('SELECT * FROM orch_status($1::bigint)', [id]),
    taskDetail: (id) => one(`SELECT jsonb_pretty(payload) AS payload, jsonb_pretty(result) AS result,
                                    jsonb_pretty(wait_data) AS wait_data, jsonb_pretty(resume_data) AS resume_data,
                                    run_id, step_key, owner, concurrency_key, idempotency_key, correlation_id,
                                    retry_of, finished_at, claimed_at, max_attempts, max_failures, gated, ${DERIVED_SQL}
                               FROM orch_task_rows(task_ids => ARRAY[$1::bigint])`, [id]),
    taskHistory: (id) => q('SELECT * FROM orch_history($1::bigint)', [id]),
    redrivenAs: (id) => q('SELECT task_id, state FROM orch_task_rows(retry_of => $1::bigint) ORDER BY task_id', [id]),
    // a dead letter: failed for one of the dead-letter reasons, not re-driven yet
    isDeadLetter: async (id) => !!(await one(`SELECT 1 AS x FROM orch_task_rows(task_ids => ARRAY[$1::bigint]) t
                                               WHERE t.state = 'failed' AND t.reason_code = ANY ($2::text[])
                                                 AND NOT EXISTS (SELECT 1 FROM orch_task_rows(retry_of => t.task_id))`,
    [id, DEAD_LETTER_REASONS])),
    cancelTask: (id, reason) => one('SELECT orch_cancel($1::bigint, $2) AS state', [id, reason || null]),

    // ---- dead letters ---------------------------------------------------
    deadLetterWhere(f, params) {
      const parts = [];
      const add = (sql, value, cast) => {
        if (value === undefined || value === null || value === '') return;
        params.push(value);
        parts.push(sql.replace('?', `$${params.length}${cast ? `::${cast}` : ''}`));
      };
      add('queue = ?', f.queue);
      add('reason = ?', f.reason);
      add('tenant_id = ?', f.tenant);
      add('last_error_class = ?', f.error_class);
      add('failed_at >= ?', f.failed_after, 'timestamptz');
      add('payload @> ?', f.payload, 'jsonb');
      return parts;
    },
    deadLetters(f, limit = PAGE + 1) {
      const params = [];
      const parts = this.deadLetterWhere(f, params);
      params.push(limit);
      return q(`SELECT d.task_id, d.tenant_id, d.queue, d.reason, d.failed_at, d.last_error, d.last_error_class, d.attempts,
                       d.failures, jsonb_pretty(d.payload) AS payload, d.owner, d.created_at, t.run_id, t.step_key
                  FROM (SELECT * FROM orch_dead_letters ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''}
                         ORDER BY failed_at DESC, task_id DESC LIMIT $${params.length}) d
                  LEFT JOIN LATERAL orch_task_rows(task_ids => ARRAY[d.task_id]) t ON true
                 ORDER BY d.failed_at DESC, d.task_id DESC`, params);
    },
    async deadLetterCount(f) {
      const params = [];
      const parts = this.deadLetterWhere(f, params);
      params.push(COUNT_CAP + 1);
      return (await one(`SELECT count(*)::int AS n FROM (SELECT 1 FROM orch_dead_letters
                           ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''} LIMIT $${params.length}) c`, params)).n;
    },
    async deadLetterIds(f, max) {
      const params = [];
      const parts = this.deadLetterWhere(f, params);
      params.push(max);
      return (await q(`SELECT task_id FROM orch_dead_letters ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''}
                        ORDER BY failed_at DESC, task_id DESC LIMIT $${params.length}`, params)).map((r) => r.task_id);
    },
    retry: (id) => one('SELECT orch_retry($1::bigint) AS new_task_id', [id]),
    reprocess: (f) => q(`SELECT task_id, new_task_id
                           FROM orch_reprocess(queue => $1, reason_code => $2, failed_after => $3::timestamptz,
                                               max => $4::int)`,
    [f.queue || null, f.reason || null, f.failed_after || null, f.max || null]),

    // ---- runs -----------------------------------------------------------
    definitions: () => q('SELECT DISTINCT name FROM orch_definitions ORDER BY name'),
    runs(f, { parent = false } = {}) {
      const params = [];
      const w = where([
        ['definition', '=', f.definition], ['state', '=', f.state], ['tenant_id', '=', f.tenant],
        ['created_at', '>=', f.from, 'timestamptz'], ['created_at', '<', f.to, 'timestamptz'],
        ['correlation_id', '=', f.correlation_id], ['run_id', '<', f.before, 'bigint'],
      ], params);
      const cols = `run_id, tenant_id, definition, version, state, phase, reason_code, failed_step,
                    error, correlation_id, created_at, updated_at, finished_at, retry_of${parent ? ', parent_run_id' : ''}`;
      if (onlyPaging(f, ['definition', 'state', 'tenant', 'from', 'to', 'correlation_id'])) {
        return q(`SELECT ${cols} FROM orch_run_rows(before => $1::bigint, "limit" => $2)
                   ORDER BY run_id DESC`, [f.before || null, PAGE + 1]);
      }
      params.push(PAGE + 1);
      return q(`SELECT ${cols} FROM orch_runs ${w} ORDER BY run_id DESC LIMIT $${params.length}`, params);
    },
    // orch_run_status raises OR005 for an unknown run.  Parsed for its
    // structure only; values shown come pretty-printed from the views.
    runStatus: async (id) => JSON.parse((await one('SELECT orch_run_status($1::bigint) AS doc', [id])).doc),
    runRow: (id) => one(`SELECT *, jsonb_pretty(input) AS input_pretty, jsonb_pretty(output) AS output_pretty,
                                jsonb_pretty(pins) AS pins_pretty
                           FROM orch_run_rows(run_ids => ARRAY[$1::bigint])`, [id]),
    runSteps: (id) => q(`SELECT step_id, ord, type, state, task_id, jsonb_pretty(output) AS output, error,
                                wake_at, timeout_at, started_at, finished_at, compensation
                           FROM orch_run_step_rows($1::bigint) ORDER BY ord`, [id]),
    runTasks: (id) => q(`SELECT task_id, step_key, state, reason_code, attempts, jsonb_pretty(payload) AS payload,
                                jsonb_pretty(result) AS result
                           FROM orch_task_rows(run_id => $1::bigint, "limit" => 10000) ORDER BY task_id`, [id]),
    definitionSpec: async (name, version) =>
      JSON.parse((await one('SELECT spec::text AS spec FROM orch_definition($1, $2::int)', [name, version])).spec),
    retriedAs: (id) => q('SELECT run_id, state FROM orch_run_rows(retry_of => $1::bigint) ORDER BY run_id', [id]),
    cancelRun: (id, reason) => one('SELECT orch_cancel_run($1::bigint, $2) AS state', [id, reason || null]),
    pauseRun: (id) => one('SELECT orch_pause_run($1::bigint) AS state', [id]),
    resumeRun: (id, pins) => one('SELECT orch_resume_run($1::bigint, $2::jsonb) AS state', [id, pins || null]),
    retryRun: (id) => one('SELECT orch_retry_run($1::bigint) AS new_run_id', [id]),

    // Does orch_runs have parent_run_id (an extension with sub-workflows)?
    runsHaveParent: async () => (await one(`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                                                     WHERE attrelid = to_regclass('orch_runs')
                                                       AND attname = 'parent_run_id' AND NOT attisdropped) AS ok`)).ok,

    // ---- schedules ------------------------------------------------------
    // scheduleWhere(f): the WHERE clause of a filter over orch_schedules
    // (the view shows a tenant-bound role its tenants' only).
    scheduleWhere(f, params) {
      const parts = [];
      const add = (sql, value) => {
        if (value === undefined || value === null || value === '') return;
        params.push(value);
        parts.push(sql.replace(/\?/g, `$${params.length}`));
      };
      add('strpos(lower(name), lower(?)) > 0', f.name);
      add('tenant_id = ?', f.tenant);
      add("coalesce(target ->> 'queue', target ->> 'definition') = ?", f.target);
      if (f.kind === 'queue') parts.push("target ? 'queue'");
      if (f.kind === 'definition') parts.push("target ? 'definition'");
      if (f.state === 'paused') parts.push('paused');
      if (f.state === 'active') parts.push('NOT paused');
      return parts;
    },
    // A page of schedules by name (then tenant), from after a (name, tenant).
    schedules(f) {
      const params = [];
      const parts = this.scheduleWhere(f, params);
      if (f.after) {
        params.push(f.after, f.after_tenant || '');
        parts.push(`(name, tenant_id) > ($${params.length - 1}, $${params.length})`);
      }
      params.push(PAGE + 1);
      return q(`SELECT ${SCHEDULE_COLS} FROM orch_schedules ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''}
                 ORDER BY name, tenant_id LIMIT $${params.length}`, params);
    },
    async scheduleCount(f) {
      const params = [];
      const parts = this.scheduleWhere(f, params);
      params.push(COUNT_CAP + 1);
      return (await one(`SELECT count(*)::int AS n FROM (SELECT 1 FROM orch_schedules
                           ${parts.length ? `WHERE ${parts.join(' AND ')}` : ''} LIMIT $${params.length}) c`, params)).n;
    },
    schedule: (name, tenant) => one(`SELECT ${SCHEDULE_COLS} FROM orch_schedules WHERE name = $1 AND tenant_id = $2`, [name, tenant]),
    pauseSchedule: (name, tenant) => one('SELECT orch_pause_schedule($1, $2) AS r', [name, tenant]),
    resumeSchedule: (name, tenant) => one('SELECT orch_resume_schedule($1, $2) AS r', [name, tenant]),
    unschedule: async (name, tenant) => (await one('SELECT orch_unschedule($1, $2) AS removed', [name, tenant])).removed,

    // ---- approvals ------------------------------------------------------
    // What waits for a person's decision, from the review queue; the expiry
    // of a human_approval step is its step timeout (orch_run_steps), and the
    // run's deadline (orch_runs) ends the wait too.
    approvals: () => q(`SELECT r.kind, r.tenant_id, r.queue AS definition, r.run_id, r.step_id, r.state, r.since,
                               s.timeout_at AS expires_at, s.type AS step_type, u.deadline_at
                          FROM orch_review_queue r
                          LEFT JOIN orch_run_steps s ON s.run_id = r.run_id AND s.step_id = r.step_id
                          LEFT JOIN orch_runs u ON u.run_id = r.run_id
                         WHERE r.kind IN ('approval_waiting', 'compensation_approval')
                         ORDER BY r.since, r.run_id, r.step_id`),
    decide: (approve, f) => one(`SELECT ${approve ? 'orch_approve' : 'orch_reject'}($1::bigint, $2, $3, $4, $5) AS state`,
      [f.run_id, f.step_id, f.approval_ref, f.actor || null, f.note || null]),
  };
}

module.exports = { createDb, TASK_STATES, ERROR_CLASSES, DEAD_LETTER_REASONS, RUN_STATES, PAGE, COUNT_CAP, BULK_MAX, DERIVED_STATES };
