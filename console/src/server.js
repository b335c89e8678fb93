'use strict';
// server.js: the HTTP server (Node's http module): routing, request checks,
// actions, and the refusal page.  Start it with scripts/console.sh, or
// `node src/server.js --help`.

const http = require('http');
const fs = require('fs');
const path = require('path');
const config = require('./config');
const csrf = require('./csrf');
const pages = require('./pages');
const { url } = require('./html');
const { createDb, BULK_MAX } = require('./db');
const { Sampler } = require('./throughput');

const SAMPLE_EVERY = 60 * 1000;   // ms between reads of the counters for the sparklines

const CSS = fs.readFileSync(path.join(__dirname, '..', 'static', 'console.css'));
const MAX_BODY = 64 * 1024;
const SECURITY_HEADERS = {
  'Content-Security-Policy': "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'same-origin',
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Resource-Policy': 'same-origin',
  'Cache-Control': 'no-store',
};

// SQLSTATEs the console names, and the HTTP status of a refusal.
const SQLSTATE_NAMES = {
  OR001: 'invalid_transition', OR002: 'terminal_state', OR003: 'stale_lease', OR004: 'idempotency_conflict',
  OR005: 'not_found', OR006: 'admission_rejected', OR007: 'definition_immutable', OR008: 'invalid_definition',
  OR009: 'approval_invalid', OR010: 'drift_detected', 42501: 'insufficient_privilege',
  22023: 'invalid_parameter_value', 22004: 'null_value_not_allowed', 22007: 'invalid_datetime_format',
  22008: 'datetime_field_overflow', '22P02': 'invalid_text_representation', 55000: 'object_not_in_prerequisite_state',
  55006: 'object_in_use', '0A000': 'feature_not_supported', 28000: 'invalid_authorization_specification',
  '3D000': 'invalid_catalog_name', 40001: 'serialization_failure', 57014: 'query_canceled',
};
function httpStatusOf(code) {
  if (code === '42501') return 403;
  if (code === 'OR005') return 404;
  if (/^22/.test(code)) return 400;
  if (/^(OR|55|0A|40)/.test(code)) return 409;
  if (/^(08|28|3D|57P)/.test(code)) return 503;
  return 500;
}

class HttpError extends Error {
  constructor(status, title, message) { super(message); this.status = status; this.title = title; }
}

// Filters a page accepts from its query string.
const FILTERS = {
  tasks: ['queue', 'state', 'tenant', 'error_class', 'from', 'to', 'run_id', 'correlation_id', 'payload', 'before', 'after'],
  deadLetters: ['queue', 'reason', 'tenant', 'error_class', 'failed_after', 'payload'],
  runs: ['definition', 'state', 'tenant', 'from', 'to', 'correlation_id', 'before'],
  schedules: ['name', 'tenant', 'kind', 'target', 'state', 'after', 'after_tenant'],
};
function pick(params, keys) {
  const out = {};
  for (const k of keys) {
    const v = params.get(k);
    if (v !== null && v.trim() !== '') out[k] = v.trim();
  }
  return out;
}

function readForm(req) {
  return new Promise((resolve, reject) => {
    const type = String(req.headers['content-type'] || '').split(';')[0].trim().toLowerCase();
    if (type !== 'application/x-www-form-urlencoded') {
      reject(new HttpError(415, 'Unsupported request', 'Only HTML form posts (application/x-www-form-urlencoded) are accepted.'));
      req.resume();
      return;
    }
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new HttpError(413, 'Request too large', `A form may carry at most ${MAX_BODY} bytes.`));
        req.destroy();
      } else {
        chunks.push(c);
      }
    });
    req.on('end', () => {
      const form = { ids: [] };
      for (const [k, v] of new URLSearchParams(Buffer.concat(chunks).toString('utf8'))) {
        if (k === 'id') form.ids.push(v);
        else if (!(k in form)) form[k] = v;
      }
      resolve(form);
    });
    req.on('error', reject);
  });
}

// A schedule is named by its name and tenant (one name per tenant); the
// database checks both (22023 for a malformed one).
function scheduleKey(name, tenant) {
  const ok = (v) => typeof v === 'string' && v.length > 0 && v.length <= 256;
  if (!ok(name) || !ok(tenant)) throw new HttpError(400, 'Bad request', 'A schedule is named by its name and its tenant.');
  return { name, tenant };
}

// A "back" path from a form: a local path only.
function localPath(p, fallback) {
  return typeof p === 'string' && /^\/(?![/\\])[^\s]*$/.test(p) && p.length < 2000 ? p : fallback;
}

// The path of the Referer header, if it has a readable one.
function refererPath(req) {
  try {
    return req.headers.referer ? new URL(req.headers.referer).pathname : null;
  } catch {
    return null;
  }
}

function redactedDb(cs) {
  if (!cs) return '(libpq environment: PGHOST, PGPORT, PGUSER, PGDATABASE)';
  try {
    const u = new URL(cs);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(connection string)';
  }
}

function createServer(cfg, db) {
  const hosts = csrf.allowedHosts(cfg);
  const flashes = new Map();   // session id -> message shown on the next page
  const refreshes = new Map(); // session id -> auto-refresh period (s), when on
  const sampler = new Sampler();
  const sample = () => db.queueTotals().then((rows) => sampler.record(rows), () => {});
  sample();
  const sampleTimer = setInterval(sample, SAMPLE_EVERY);
  sampleTimer.unref();

  const setFlash = (sid, f) => {
    if (flashes.size > 10000) flashes.clear();
    flashes.set(sid, f);
  };
  const takeFlash = (sid) => {
    const f = flashes.get(sid);
    flashes.delete(sid);
    return f;
  };

  // ---- bulk actions -------------------------------------------------------
  // A bulk action acts on ticked tasks (ids) or on everything a filter
  // matches (the newest BULK_MAX, read again when confirmed).
  function bulkRequest(scope, action, matching, filters, ids) {
    if (scope !== 'tasks' && scope !== 'dead-letters') throw new HttpError(400, 'Bad request', 'Unknown list.');
    if (!(action === 'cancel' || action === 'retry') || (scope === 'dead-letters' && action !== 'retry')) {
      throw new HttpError(400, 'Bad request', 'Unknown action.');
    }
    const f = { ...filters };
    delete f.before;
    delete f.after;
    if (!matching) {
      if (!ids.length) throw new HttpError(400, 'Nothing ticked', 'Tick the tasks to act on, or act on everything the filter matches.');
      if (ids.length > BULK_MAX) throw new HttpError(400, 'Too many', `One action takes at most ${BULK_MAX} tasks.`);
      if (!ids.every((id) => /^\d{1,19}$/.test(id))) throw new HttpError(400, 'Bad request', 'A task id is a number.');
    }
    return { scope, action, matching, filters: matching ? f : {}, ids: matching ? [] : [...new Set(ids)] };
  }
  async function bulkIds(b) {
    if (!b.matching) return { ids: b.ids, total: b.ids.length };
    const tasks = b.scope === 'tasks';
    const [ids, total] = await Promise.all([
      tasks ? db.taskIds(b.filters, BULK_MAX) : db.deadLetterIds(b.filters, BULK_MAX),
      tasks ? db.taskCount(b.filters) : db.deadLetterCount(b.filters)]);
    return { ids, total };
  }
  // One call per task, when the extension has no bulk function: each call
  // commits on its own; a refusal is reported and the others go on, except
  // a refusal of the role (42501), which stops at the first.
  async function eachTask(ids, fn, ctx, name) {
    const done = [];
    const refused = [];
    for (const id of ids) {
      ctx.call = `${name}(${id})`;
      try {
        done.push({ task_id: id, ...(await fn(id)) });
      } catch (e) {
        if (!e.code || e.code === '42501' || /^(08|57P)/.test(e.code)) throw e;
        refused.push({ task_id: id, code: e.code, message: e.message });
      }
    }
    return { done, refused };
  }
  async function bulkAct(form, ctx) {
    const filters = {};
    for (const k of form.scope === 'tasks' ? FILTERS.tasks : FILTERS.deadLetters) {
      const v = form[`f_${k}`];
      if (typeof v === 'string' && v.trim() !== '') filters[k] = v.trim();
    }
    const b = bulkRequest(form.scope, form.action, form.matching === '1', filters, form.ids);
    if (form.confirm !== 'yes') throw new HttpError(400, 'Not confirmed', 'Tick "I mean it" to act on many tasks at once.');
    const { ids } = await bulkIds(b);
    const rows = ids.length ? await db.bulkRows(ids) : [];
    const sorted = pages.sortBulk(b.action, rows, form.include_unsafe === 'yes');
    const act = sorted.act.map((t) => t.task_id);
    const left = rows.length - act.length;
    const back = url(b.scope === 'tasks' ? '/tasks' : '/dead-letters', b.filters);
    if (!act.length) return { text: `Nothing to ${b.action === 'cancel' ? 'cancel' : 're-drive'}: none of the ${rows.length} task${rows.length === 1 ? '' : 's'} qualifies.`, items: [], back };
    const bulk = await db.hasBulk();
    let done;
    let refused = [];
    let how;
    if (b.action === 'cancel') {
      if (bulk) {
        ctx.call = 'orch_cancel_where(filter, reason, max)';
        done = await db.cancelWhere(act, form.reason);
        how = 'orch_cancel_where';
      } else {
        ({ done, refused } = await eachTask(act, async (id) => ({ state: (await db.cancelTask(id, form.reason)).state }), ctx, 'orch_cancel'));
        how = `${act.length} orch_cancel call${act.length === 1 ? '' : 's'}`;
      }
    } else if (bulk) {
      ctx.call = 'orch_retry_where(filter, max)';
      done = await db.retryWhere(act);
      how = 'orch_retry_where';
    } else {
      ({ done, refused } = await eachTask(act, async (id) => ({ new_task_id: (await db.retry(id)).new_task_id }), ctx, 'orch_retry'));
      how = `${act.length} orch_retry call${act.length === 1 ? '' : 's'}`;
    }
    ctx.call = null;
    const items = done.slice(0, 50).map((r) => (r.new_task_id
      ? { text: `#${r.task_id} → #${r.new_task_id}`, href: `/tasks/${r.new_task_id}` }
      : { text: `#${r.task_id}: ${r.state}`, href: `/tasks/${r.task_id}` }));
    if (done.length > 50) items.push({ text: `and ${done.length - 50} more` });
    for (const r of refused.slice(0, 20)) items.push({ text: `#${r.task_id} refused: ${r.code} ${r.message}`, href: `/tasks/${r.task_id}` });
    const verb = b.action === 'cancel' ? 'Cancelled' : 'Re-drove';
    return {
      text: `${verb} ${done.length} task${done.length === 1 ? '' : 's'} (${how})${refused.length ? `; ${refused.length} refused` : ''}${left ? `; ${left} left alone` : ''}.`,
      items, back,
    };
  }

  function send(res, status, body, type = 'text/html; charset=utf-8') {
    res.writeHead(status, { 'Content-Type': type });
    res.end(String(body));
  }
  function redirect(res, to) {
    res.writeHead(303, { Location: to });
    res.end();
  }

  async function who(ctx) {
    if (ctx.who) return;
    try {
      ctx.who = await db.whoami();
    } catch {
      ctx.who = null;
    }
  }

  async function page(res, ctx, render, status = 200) {
    await who(ctx);
    send(res, status, render(ctx));
  }

  // ---- GET pages ----------------------------------------------------------
  async function get(u, ctx, res) {
    const p = u.pathname;
    let m;
    if (p === '/' || p === '') return redirect(res, '/queues');
    if (p === '/queues') {
      ctx.section = '/queues';
      const [stats, queues, errors, who_] = await Promise.all([db.queueStats(), db.queues(), db.errorStats(), db.whoami()]);
      ctx.who = who_;
      const perMinute = await db.throughput();
      if (perMinute) sampler.load(perMinute);
      else sampler.record(stats);
      const series = (queue, tenant) => sampler.series(queue, tenant);
      return page(res, ctx, (c) => pages.queuesPage(c, { stats, queues, errors, series }));
    }
    if (p === '/refresh') {
      const every = Number(u.searchParams.get('every'));
      if ([5, 15, 60].includes(every)) refreshes.set(ctx.sid, every);
      else refreshes.delete(ctx.sid);
      if (refreshes.size > 10000) refreshes.clear();
      return redirect(res, localPath(u.searchParams.get('back'), '/queues'));
    }
    if (p === '/tasks/go') {
      const id = String(u.searchParams.get('id') || '').trim().replace(/^#/, '');
      if (!/^\d{1,19}$/.test(id)) throw new HttpError(400, 'Not a task id', 'A task id is a number, e.g. 42.');
      return redirect(res, `/tasks/${id}`);
    }
    if (p === '/tasks') {
      ctx.section = '/tasks';
      const filters = pick(u.searchParams, FILTERS.tasks);
      const [rows, queues, total] = await Promise.all([db.tasks(filters), db.queues(), db.taskCount(filters)]);
      const first = rows.length ? rows[0].task_id : null;
      const hasNewer = first !== null && (filters.before || filters.after) ? await db.newerTask(filters, first) : false;
      return page(res, ctx, (c) => pages.tasksPage(c, { filters, rows, queues, total, hasNewer }));
    }
    if ((m = /^\/tasks\/(\d{1,19})$/.exec(p))) {
      ctx.section = '/tasks';
      const id = m[1];
      ctx.call = `orch_status(${id})`;
      const status = await db.taskStatus(id);
      ctx.call = `orch_history(${id})`;
      const [detail, history, deadLetter, redriven] = await Promise.all([
        db.taskDetail(id), db.taskHistory(id), db.isDeadLetter(id), db.redrivenAs(id)]);
      return page(res, ctx, (c) => pages.taskPage(c, { status, detail: detail || {}, history, deadLetter, redriven }));
    }
    if (p === '/dead-letters') {
      ctx.section = '/dead-letters';
      const filters = pick(u.searchParams, FILTERS.deadLetters);
      const [rows, queues, total] = await Promise.all([db.deadLetters(filters), db.queues(), db.deadLetterCount(filters)]);
      return page(res, ctx, (c) => pages.deadLettersPage(c, { filters, rows, queues, total }));
    }
    if ((m = /^\/dead-letters\/(\d{1,19})\/retry$/.exec(p))) {
      ctx.section = '/dead-letters';
      ctx.call = `orch_status(${m[1]})`;
      const [status] = await Promise.all([db.taskStatus(m[1])]);
      const detail = (await db.taskDetail(m[1])) || {};
      return page(res, ctx, (c) => pages.retryConfirmPage(c, { task: { ...status, run_id: detail.run_id, step_key: detail.step_key } }));
    }
    if (p === '/bulk') {
      const b = bulkRequest(u.searchParams.get('scope'), u.searchParams.get('action'), u.searchParams.get('matching') === '1',
        pick(u.searchParams, u.searchParams.get('scope') === 'tasks' ? FILTERS.tasks : FILTERS.deadLetters),
        u.searchParams.getAll('id'));
      ctx.section = b.scope === 'tasks' ? '/tasks' : '/dead-letters';
      const { ids, total } = await bulkIds(b);
      const [rows, bulk] = await Promise.all([ids.length ? db.bulkRows(ids) : [], db.hasBulk()]);
      return page(res, ctx, (c) => pages.bulkPage(c, { ...b, ids, rows, total, bulk }));
    }
    if (p === '/runs') {
      ctx.section = '/runs';
      const filters = pick(u.searchParams, FILTERS.runs);
      const parent = await db.runsHaveParent();
      const [rows, definitions] = await Promise.all([db.runs(filters, { parent }), db.definitions()]);
      return page(res, ctx, (c) => pages.runsPage(c, { filters, rows, definitions, parent }));
    }
    if ((m = /^\/runs\/(\d{1,19})$/.exec(p))) {
      ctx.section = '/runs';
      const id = m[1];
      ctx.call = `orch_run_status(${id})`;
      const status = await db.runStatus(id);
      ctx.call = null;
      const [run, steps, tasks, retriedAs] = await Promise.all([db.runRow(id), db.runSteps(id), db.runTasks(id), db.retriedAs(id)]);
      if (!run) throw new HttpError(404, 'Not found', `Run ${id} is not visible to this role.`);
      let spec = null;
      let specError = null;
      try {
        spec = await db.definitionSpec(run.definition, run.version);
      } catch (e) {
        specError = e.code ? `${e.code}: ${e.message}` : e.message;
      }
      return page(res, ctx, (c) => pages.runPage(c, { run, status, steps, tasks, spec, specError, retriedAs }));
    }
    if (p === '/schedules') {
      ctx.section = '/schedules';
      const filters = pick(u.searchParams, FILTERS.schedules);
      if (filters.kind && !['queue', 'definition'].includes(filters.kind)) throw new HttpError(400, 'Bad request', 'A schedule fires tasks (queue) or runs (definition).');
      if (filters.state && !['active', 'paused'].includes(filters.state)) throw new HttpError(400, 'Bad request', 'A schedule is active or paused.');
      const [rows, total] = await Promise.all([db.schedules(filters), db.scheduleCount(filters)]);
      return page(res, ctx, (c) => pages.schedulesPage(c, { filters, rows, total }));
    }
    if (p === '/schedules/unschedule') {
      ctx.section = '/schedules';
      const { name, tenant } = scheduleKey(u.searchParams.get('name'), u.searchParams.get('tenant'));
      const schedule = await db.schedule(name, tenant);
      if (!schedule) throw new HttpError(404, 'Not found', `There is no schedule ${name} of tenant ${tenant} visible to this role.`);
      return page(res, ctx, (c) => pages.unscheduleConfirmPage(c, { schedule }));
    }
    if (p === '/approvals') {
      ctx.section = '/approvals';
      const rows = await db.approvals();
      return page(res, ctx, (c) => pages.approvalsPage(c, { rows }));
    }
    throw new HttpError(404, 'Not found', `There is no page ${p}.`);
  }

  // ---- POST actions -------------------------------------------------------
  // Each action is one call of the SQL API as the console's role; the
  // result is shown on the next page (post/redirect/get).
  async function post(u, form, ctx, res) {
    const p = u.pathname;
    let m;
    const ok = (text, items, fallback) => {
      setFlash(ctx.sid, { kind: 'ok', text, items });
      // a confirmation page is not where one goes back to
      const back = localPath(form.back, fallback);
      redirect(res, /^\/(bulk|dead-letters\/\d+\/retry|schedules\/unschedule)\b/.test(back) ? fallback : back);
    };
    if ((m = /^\/tasks\/(\d{1,19})\/cancel$/.exec(p))) {
      ctx.call = `orch_cancel(${m[1]}, reason)`;
      const r = await db.cancelTask(m[1], form.reason);
      return ok(`Task #${m[1]}: ${r.state}.`, [], `/tasks/${m[1]}`);
    }
    if (p === '/bulk') {
      const r = await bulkAct(form, ctx);
      return ok(r.text, r.items, r.back);
    }
    if ((m = /^\/queues\/([^/]{1,200})\/(pause|resume)$/.exec(p))) {
      let name;
      try {
        name = decodeURIComponent(m[1]);
      } catch {
        throw new HttpError(400, 'Bad request', 'Not a queue name.');
      }
      ctx.call = `orch_${m[2]}_queue('${name}')`;
      await (m[2] === 'pause' ? db.pauseQueue(name) : db.resumeQueue(name));
      return ok(`Queue ${name} ${m[2] === 'pause' ? 'paused: orch_dequeue hands out none of its tasks until it is resumed' : 'resumed'}.`, [], '/queues');
    }
    if ((m = /^\/dead-letters\/(\d{1,19})\/retry$/.exec(p))) {
      if (form.confirm !== 'yes') {
        // a dead letter not safe to retry, or a workflow step's: ask first
        ctx.call = `orch_status(${m[1]})`;
        const [st, detail] = await Promise.all([db.taskStatus(m[1]), db.taskDetail(m[1])]);
        if (pages.retryRisk({ ...st, run_id: detail && detail.run_id })) return redirect(res, `/dead-letters/${m[1]}/retry`);
      }
      ctx.call = `orch_retry(${m[1]})`;
      const r = await db.retry(m[1]);
      return ok(`Dead letter #${m[1]} re-driven as task #${r.new_task_id} (orch_retry).`,
        [{ text: `task #${r.new_task_id}`, href: `/tasks/${r.new_task_id}` }], '/dead-letters');
    }
    if (p === '/dead-letters/reprocess') {
      if (form.confirm !== 'yes') {
        throw new HttpError(400, 'Not confirmed', 'Tick "I mean it" to re-drive dead letters in bulk.');
      }
      ctx.call = 'orch_reprocess(queue, reason_code, failed_after, max)';
      const rows = await db.reprocess(form);
      const items = rows.slice(0, 50).map((r) => ({ text: `#${r.task_id} → #${r.new_task_id}`, href: `/tasks/${r.new_task_id}` }));
      if (rows.length > 50) items.push({ text: `and ${rows.length - 50} more` });
      return ok(`orch_reprocess re-drove ${rows.length} dead letter${rows.length === 1 ? '' : 's'}.`, items, '/dead-letters');
    }
    if ((m = /^\/runs\/(\d{1,19})\/(pause|resume|cancel|retry)$/.exec(p))) {
      const [, id, what] = m;
      if (what === 'pause') { ctx.call = `orch_pause_run(${id})`; const r = await db.pauseRun(id); return ok(`Run ${id}: ${r.state}.`, [], `/runs/${id}`); }
      if (what === 'resume') { ctx.call = `orch_resume_run(${id}, pins)`; const r = await db.resumeRun(id, form.pins); return ok(`Run ${id}: ${r.state}.`, [], `/runs/${id}`); }
      if (what === 'cancel') { ctx.call = `orch_cancel_run(${id}, reason)`; const r = await db.cancelRun(id, form.reason); return ok(`Run ${id}: ${r.state}.`, [], `/runs/${id}`); }
      ctx.call = `orch_retry_run(${id})`;
      const r = await db.retryRun(id);
      return ok(`Run ${id} retried as run ${r.new_run_id}.`, [{ text: `run ${r.new_run_id}`, href: `/runs/${r.new_run_id}` }], `/runs/${id}`);
    }
    if (p === '/approvals/decide') {
      if (form.decision !== 'approve' && form.decision !== 'reject') {
        throw new HttpError(400, 'Bad request', 'The decision must be approve or reject.');
      }
      if (!/^\d{1,19}$/.test(form.run_id || '')) throw new HttpError(400, 'Bad request', 'No run id.');
      const fn = form.decision === 'approve' ? 'orch_approve' : 'orch_reject';
      ctx.call = `${fn}(${form.run_id}, '${form.step_id}', approval_ref, actor, note)`;
      const r = await db.decide(form.decision === 'approve', form);
      return ok(`Run ${form.run_id}, step ${form.step_id}: ${form.decision === 'approve' ? 'approved' : 'rejected'} with reference ${form.approval_ref}; the run is ${r.state}.`,
        [{ text: `run ${form.run_id}`, href: `/runs/${form.run_id}` }], '/approvals');
    }
    if ((m = /^\/schedules\/(pause|resume|unschedule)$/.exec(p))) {
      const { name, tenant } = scheduleKey(form.name, form.tenant);
      const what = m[1];
      const which = `Schedule ${name}${tenant === 'default' ? '' : ` (tenant ${tenant})`}`;
      if (what === 'unschedule') {
        if (form.confirm !== 'yes') throw new HttpError(400, 'Not confirmed', 'Tick "I mean it" to remove a schedule.');
        ctx.call = `orch_unschedule('${name}', '${tenant}')`;
        const removed = await db.unschedule(name, tenant);
        return ok(removed ? `${which} removed (orch_unschedule): no slot of it fires again; what it fired stays.`
          : `${which} was not there any more: nothing to remove.`, [], '/schedules');
      }
      ctx.call = `orch_${what}_schedule('${name}', '${tenant}')`;
      await (what === 'pause' ? db.pauseSchedule(name, tenant) : db.resumeSchedule(name, tenant));
      return ok(what === 'pause' ? `${which} paused: no slot fires until it is resumed.`
        : `${which} resumed: it goes on from its first slot after now.`, [], '/schedules');
    }
    if (p === '/metrics/refresh') {
      ctx.call = 'orch_metrics_refresh()';
      const r = await db.metricsRefresh();
      return ok(`orch_metrics_refresh() read ${r.n} event and attempt rows.`, [], '/queues');
    }
    throw new HttpError(404, 'Not found', `There is no action ${p}.`);
  }

  async function refuse(res, ctx, err) {
    let status;
    let e;
    if (err instanceof HttpError) {
      status = err.status;
      e = { title: err.title, message: err.message };
    } else if (typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code)) {
      status = httpStatusOf(err.code);
      e = {
        title: ctx.method === 'POST' ? 'The database refused the action' : 'The database refused the request',
        sqlstate: err.code, sqlstateName: SQLSTATE_NAMES[err.code],
        message: err.message, detail: err.detail, hint: err.hint, call: ctx.call,
      };
    } else if (err.code === 'ECONNREFUSED' || err.code === 'ENOENT' || err.code === 'ETIMEDOUT') {
      status = 503;
      e = { title: 'Database unreachable', message: `The console cannot connect to the database (${err.code}).` };
    } else {
      status = 500;
      e = { title: 'Internal error', message: 'The console failed to build this page; see its log.' };
      console.error(err);
    }
    e.back = ctx.back;
    try {
      await page(res, ctx, (c) => pages.errorPage(c, e), status);
    } catch (e2) {
      console.error(e2);
      if (!res.headersSent) send(res, status, `${status} ${e.title}`, 'text/plain; charset=utf-8');
    }
  }

  async function handle(req, res) {
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) res.setHeader(k, v);
    if (!csrf.hostAllowed(req, hosts)) {
      send(res, 421, 'This console does not answer to that Host header (see --allowed-host).\n', 'text/plain; charset=utf-8');
      return;
    }
    const u = new URL(req.url, 'http://console.invalid');
    if (u.pathname === '/static/console.css' && (req.method === 'GET' || req.method === 'HEAD')) {
      res.setHeader('Cache-Control', 'max-age=300');
      send(res, 200, CSS, 'text/css; charset=utf-8');
      return;
    }
    if (u.pathname === '/favicon.ico') { res.writeHead(204); res.end(); return; }
    const sess = csrf.session(req, res);
    const ctx = {
      method: req.method, sid: sess.sid, csrf: csrf.token(sess.sid), readonly: cfg.readonly,
      path: u.pathname + u.search, flash: null, who: null, call: null, refresh: refreshes.get(sess.sid) || 0,
    };
    try {
      if (req.method === 'POST') {
        ctx.back = localPath(refererPath(req), '/queues');
        if (cfg.readonly) {
          req.resume();
          throw new HttpError(403, 'Read-only console', 'This console runs in read-only mode: it takes no action.');
        }
        const form = await readForm(req);
        const why = csrf.checkPost(req, sess, form, hosts);
        if (why) throw new HttpError(403, 'Refused', why);
        ctx.back = localPath(form.back, ctx.back);
        await post(u, form, ctx, res);
      } else if (req.method === 'GET' || req.method === 'HEAD') {
        ctx.flash = takeFlash(sess.sid);
        await get(u, ctx, res);
      } else {
        res.setHeader('Allow', 'GET, HEAD, POST');
        throw new HttpError(405, 'Method not allowed', `${req.method} is not allowed.`);
      }
    } catch (err) {
      await refuse(res, ctx, err);
    }
  }

  return http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      console.error(err);
      if (!res.headersSent) send(res, 500, 'internal error', 'text/plain; charset=utf-8');
    });
  });
}

async function main() {
  let cfg;
  try {
    cfg = config.parse(process.argv.slice(2), process.env);
  } catch (e) {
    console.error(`error: ${e.message}\n${config.USAGE}`);
    process.exit(2);
  }
  if (cfg.help) { console.log(config.USAGE); return; }
  const db = createDb(cfg.db);
  const server = createServer(cfg, db);
  server.on('error', (e) => {
    console.error(`error: cannot listen on ${cfg.host}:${cfg.port}: ${e.message}`);
    process.exit(1);
  });
  server.listen(cfg.port, cfg.host, async () => {
    const shown = cfg.host.includes(':') ? `[${cfg.host}]` : cfg.host;
    console.log(`orchestrator console listening on http://${shown}:${cfg.port}/${cfg.readonly ? ' (read-only)' : ''}`);
    console.log(`database: ${redactedDb(cfg.db)}`);
    if (!config.isLoopback(cfg.host)) {
      console.log(`warning: bound to ${cfg.host}, not loopback: whoever reaches it acts as the database role below`);
    }
    try {
      const w = await db.whoami();
      console.log(`connected as role ${w.role}${w.tenants ? ` (tenants ${w.tenants.join(', ')})` : ''} to database ${w.db}`);
    } catch (e) {
      console.log(`warning: the database is not usable yet: ${e.code ? `${e.code} ` : ''}${e.message}`);
    }
  });
  const stop = () => {
    server.close();
    db.end().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 3000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (require.main === module) main();

module.exports = { createServer };
