'use strict';
// pages.js: the HTML of every page.  Pure functions of what db.js returned;
// every value goes through html`` (escaped), see html.js.

const { html, url } = require('./html');
const { renderDag, legend } = require('./dag');
const { TASK_STATES, ERROR_CLASSES, DEAD_LETTER_REASONS, RUN_STATES, PAGE, COUNT_CAP, BULK_MAX, DERIVED_STATES } = require('./db');
const { sparkline } = require('./throughput');

const REFRESH_CHOICES = [0, 5, 15, 60];

const NAV = [
  ['/queues', 'Queues'], ['/tasks', 'Tasks'], ['/dead-letters', 'Dead letters'],
  ['/runs', 'Runs'], ['/approvals', 'Approvals'], ['/schedules', 'Schedules'],
];

// ---- small pieces ----------------------------------------------------------

function layout(ctx, title, body) {
  const who = ctx.who || {};
  const tenants = who.tenants ? who.tenants.join(', ') : 'all (unbound role)';
  return html`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · orchestrator console</title>
${ctx.refresh && !ctx.noRefresh ? html`<meta http-equiv="refresh" content="${ctx.refresh}">` : ''}
<link rel="stylesheet" href="/static/console.css">
</head>
<body>
<header class="top">
  <a class="brand" href="/queues">orchestrator</a>
  <nav>${NAV.map(([href, label]) => html`<a href="${href}"${ctx.section === href ? html` class="current"` : ''}>${label}</a>`)}</nav>
  ${refreshToggle(ctx)}
  <span class="who">role <b>${who.role || '?'}</b> · database <b>${who.db || '?'}</b> · tenants ${tenants}${ctx.readonly ? html` · <span class="ro">read-only</span>` : ''}</span>
</header>
<main>
${ctx.flash ? flashBox(ctx.flash) : ''}
<h1>${title}</h1>
${body}
</main>
</body>
</html>`;
}

// The auto-refresh switch: off by default; a choice holds for the session.
function refreshToggle(ctx) {
  if (ctx.noRefresh) return '';
  const back = ctx.path || '/queues';
  return html`<span class="refresh" id="refresh">auto-refresh${ctx.refresh ? html` <span class="live">every ${ctx.refresh} s</span>` : ''}:
${REFRESH_CHOICES.map((n) => html` <a href="${url('/refresh', { every: n, back })}" data-every="${n}"${(ctx.refresh || 0) === n ? html` class="current" aria-current="true"` : ''}>${n ? `${n} s` : 'off'}</a>`)}</span>`;
}

function flashBox(f) {
  return html`<div class="flash flash-${f.kind === 'ok' ? 'ok' : 'error'}" role="status"><p>${f.text}</p>${f.items && f.items.length
    ? html`<ul>${f.items.map((i) => html`<li>${i.href ? html`<a href="${i.href}">${i.text}</a>` : i.text}</li>`)}</ul>` : ''}</div>`;
}

// A timestamp as PostgreSQL printed it, without the fractional seconds.
function ts(v) {
  if (!v) return html`<span class="none">—</span>`;
  return html`<time title="${v}">${String(v).replace(/^(\d{4}-\d\d-\d\d)T/, '$1 ').replace(/(\d\d:\d\d:\d\d)\.\d+/, '$1')}</time>`;
}

function val(v) {
  return v === null || v === undefined || v === '' ? html`<span class="none">—</span>` : v;
}

function pre(text, cls = 'json') {
  return text === null || text === undefined ? html`<span class="none">—</span>` : html`<pre class="${cls}">${text}</pre>`;
}

function clip(s, n = 140) {
  if (s === null || s === undefined) return html`<span class="none">—</span>`;
  s = String(s);
  return s.length > n ? html`<span title="${s}">${s.slice(0, n - 1)}…</span>` : s;
}

function stateBadge(state) {
  const cls = String(state || 'none').replace(/[^a-z_]/g, '_');
  return html`<span class="state state-${cls}">${state || '—'}</span>`;
}

function csrfField(ctx) {
  return html`<input type="hidden" name="csrf" value="${ctx.csrf}">`;
}

// postForm(ctx, action, inner, cls): an action form, or nothing in read-only
// mode.
function postForm(ctx, action, inner, cls = 'inline') {
  if (ctx.readonly) return '';
  return html`<form method="post" action="${action}" class="${cls}">${csrfField(ctx)}<input type="hidden" name="back" value="${ctx.path}">${inner}</form>`;
}

function select(name, options, current, any = 'any') {
  return html`<select name="${name}" id="f-${name}"><option value="">${any}</option>${options.map((o) => html`<option value="${o}"${o === current ? html` selected` : ''}>${o}</option>`)}</select>`;
}

function textInput(name, current, placeholder = '', size = 14) {
  return html`<input type="text" name="${name}" id="f-${name}" value="${current || ''}" placeholder="${placeholder}" size="${size}">`;
}

function field(label, name, control) {
  return html`<label for="f-${name}">${label}</label> ${control}`;
}

function moreLink(path, filters, rows, idKey) {
  if (rows.length <= PAGE) return '';
  return html`<p class="more"><a href="${url(path, { ...filters, before: rows[PAGE - 1][idKey] })}" id="older">older →</a></p>`;
}

const TIME_HINT = 'e.g. 2026-11-25 14:00 (the database session time zone applies)';

// ---- queues ----------------------------------------------------------------

function queuesPage(ctx, { stats, queues, errors, series }) {
  const paused = new Map(queues.map((q) => [q.queue, q.paused]));
  const asOf = stats.length ? stats[0].metrics_as_of : null;
  // a count links to the task list filtered to what it counts
  const count = (s, col, state, n = s[col]) => html`<td class="n" data-col="${col}">${Number(n) > 0
    ? html`<a href="${url('/tasks', { queue: s.queue, tenant: s.tenant_id, state })}">${n}</a>` : n}</td>`;
  const seen = new Set();
  const queueControl = (q) => {
    if (seen.has(q)) return '';
    seen.add(q);
    return paused.get(q)
      ? postForm(ctx, `/queues/${encodeURIComponent(q)}/resume`, html`<button type="submit" class="act small" data-resume="${q}">resume</button>`)
      : postForm(ctx, `/queues/${encodeURIComponent(q)}/pause`, html`<button type="submit" class="small" data-pause="${q}">pause</button>`);
  };
  const body = html`
<p class="note">Open tasks are counted live; a count links to those tasks. Throughput and totals are the rolling counters
(<code>orch_queue_stats</code>), folded by <code>orch_maintain()</code>; as of ${ts(asOf)}. The sparklines show enqueued,
completed and failed tasks per minute over the last hour, as the folds counted them while this console ran.</p>
${postForm(ctx, '/metrics/refresh', html`<button type="submit">Fold the counters now (orch_metrics_refresh)</button>`)}
<div class="scroll">
<table class="grid wrap" id="queues">
<thead>
<tr><th colspan="3"></th><th colspan="9" class="group">open tasks</th><th colspan="2"></th><th colspan="3" class="group">last hour</th><th colspan="3" class="group">all time</th></tr>
<tr><th>queue</th><th>tenant</th><th>per minute <span class="lg-spark"><i class="k-enqueued">enqueued</i> <i class="k-completed">completed</i> <i class="k-failed">failed</i></span></th>
<th>received</th><th>queued</th><th>ready</th><th>delayed</th><th>retry waiting</th><th>gated</th><th>executing</th><th>awaiting tool</th><th>awaiting confirm&shy;ation</th>
<th>dead letters</th><th>oldest ready</th>
<th>completed</th><th>failed</th><th>lease expiries</th><th>enqueued</th><th>completed</th><th>failed</th></tr>
</thead>
<tbody>
${stats.map((s) => html`<tr data-queue="${s.queue}" data-tenant="${s.tenant_id}">
<td><a href="${url('/tasks', { queue: s.queue, tenant: s.tenant_id })}">${s.queue}</a>${paused.get(s.queue) ? html` <span class="state state-paused">paused</span>` : ''} ${queueControl(s.queue)}</td><td>${s.tenant_id}</td>
<td class="sparkcell">${sparkline(series(s.queue, s.tenant_id))}</td>
${count(s, 'received', 'received')}${count(s, 'queued', 'queued')}${count(s, 'ready', 'ready')}${count(s, 'delayed', 'delayed')}${count(s, 'retry_waiting', 'retry_waiting')}${count(s, 'gated', 'gated')}
${count(s, 'executing', 'executing')}${count(s, 'awaiting_tool', 'awaiting_tool')}${count(s, 'awaiting_user_confirmation', 'awaiting_user_confirmation')}
<td class="n" data-col="dead_letters">${Number(s.dead_letters) > 0 ? html`<a href="${url('/dead-letters', { queue: s.queue, tenant: s.tenant_id })}">${s.dead_letters}</a>` : s.dead_letters}</td>
<td data-col="oldest_ready_age">${val(s.oldest_ready_age)}</td>
<td class="n" data-col="completed_1h">${s.completed_1h}</td><td class="n" data-col="failed_1h">${s.failed_1h}</td><td class="n">${s.lease_expiries_1h}</td>
<td class="n">${s.enqueued_total}</td><td class="n">${s.completed_total}</td><td class="n">${s.failed_total}</td>
</tr>`)}
</tbody>
</table>
</div>
${stats.length ? '' : html`<p class="none">No queue is visible to this role.</p>`}
<h2>Retries and failures in the last hour</h2>
${errors.length ? html`<table class="grid" id="errors">
<thead><tr><th>queue</th><th>tenant</th><th>error class</th><th>reason</th><th>retries (1 h)</th><th>failures (1 h)</th><th>retries (all time)</th><th>failures (all time)</th></tr></thead>
<tbody>${errors.map((e) => html`<tr><td>${e.queue}</td><td>${e.tenant_id}</td><td>${val(e.error_class)}</td><td>${val(e.reason_code)}</td>
<td class="n">${e.retries_1h}</td><td class="n">${e.failures_1h}</td><td class="n">${e.retries_total}</td><td class="n">${e.failures_total}</td></tr>`)}</tbody>
</table>` : html`<p class="none">None counted (<code>orch_error_stats</code>).</p>`}`;
  return layout(ctx, 'Queues', body);
}

// ---- tasks -----------------------------------------------------------------

// The state of a task: its derived state (what the Queues page counts it
// as), with the raw state beside it.
function taskState(t) {
  const d = t.derived && DERIVED_STATES[t.derived];
  if (!d || t.derived === 'ready') return stateBadge(t.state);
  return html`<span class="state state-${t.derived}" data-derived="${t.derived}">${d.label}</span> <small class="raw" title="the task's state">${t.state}</small>`;
}

function stateSelect(current) {
  const opt = (v, label) => html`<option value="${v}"${v === current ? html` selected` : ''}>${label}</option>`;
  return html`<select name="state" id="f-state"><option value="">any</option>
<optgroup label="state">${TASK_STATES.map((s) => opt(s, s))}</optgroup>
<optgroup label="derived (raw state)">${Object.entries(DERIVED_STATES).map(([k, d]) => opt(k, `${d.label} (${d.raw})`))}</optgroup></select>`;
}

function totalLine(n, what) {
  return html`<p class="total" id="total" data-total="${n > COUNT_CAP ? '' : n}">${n > COUNT_CAP ? `More than ${COUNT_CAP.toLocaleString('en')}` : n.toLocaleString('en')} ${what}${n === 1 ? '' : 's'} match${n === 1 ? 'es' : ''}.</p>`;
}

// pager(path, filters, rows, idKey, hasNewer): "newer" and "older" links.
function pager(path, f, rows, idKey, hasNewer) {
  const base = { ...f };
  delete base.before;
  delete base.after;
  const shown = rows.slice(0, PAGE);
  const older = f.after ? shown.length > 0 : rows.length > PAGE;
  const out = [];
  if (hasNewer && shown.length) out.push(html`<a href="${url(path, { ...base, after: shown[0][idKey] })}" rel="prev" id="newer">← newer</a>`);
  if (older && shown.length) out.push(html`<a href="${url(path, { ...base, before: shown[shown.length - 1][idKey] })}" rel="next" id="older">older →</a>`);
  return out.length ? html`<p class="more pager">${out.map((x, i) => html`${i ? ' · ' : ''}${x}`)}</p>` : '';
}

// bulkBar(ctx, scope, f, total, actions): the buttons that act on the
// ticked rows, and the links to act on everything the filter matches.
function bulkBar(ctx, scope, f, total, actions) {
  if (ctx.readonly) return '';
  const filters = { ...f };
  delete filters.before;
  delete filters.after;
  const n = Math.min(total, BULK_MAX);
  return html`<div class="bulkbar">
<span>ticked:</span> ${actions.map((a) => html`<button type="submit" name="action" value="${a}" class="${a === 'cancel' ? 'danger' : ''}" id="bulk-${a}-selected">${a === 'cancel' ? 'Cancel' : 'Retry'} selected…</button> `)}
${total > 0 ? html`<span>everything this filter matches:</span> ${actions.map((a) => html`<a class="button${a === 'cancel' ? ' danger' : ''}" id="bulk-${a}-matching" href="${url('/bulk', { scope, action: a, matching: 1, ...filters })}">${a === 'cancel' ? 'Cancel' : 'Retry'} all ${total > BULK_MAX ? `${n} (of ${total > COUNT_CAP ? `${COUNT_CAP}+` : total})` : total} matching…</a> `)}` : ''}
</div>`;
}

function tasksPage(ctx, { filters: f, rows, queues, total, hasNewer }) {
  const ro = ctx.readonly;
  const body = html`
<form method="get" action="/tasks/go" class="jump" id="jump">
<label for="f-jump">task id</label> <input type="text" name="id" id="f-jump" size="10" inputmode="numeric" placeholder="e.g. 42"> <button type="submit">Go</button>
</form>
<form method="get" action="/tasks" class="filters">
${field('queue', 'queue', select('queue', queues.map((q) => q.queue), f.queue))}
${field('state', 'state', stateSelect(f.state))}
${field('tenant', 'tenant', textInput('tenant', f.tenant, 'any', 10))}
${field('error class', 'error_class', select('error_class', ERROR_CLASSES, f.error_class))}
${field('created from', 'from', textInput('from', f.from, TIME_HINT, 16))}
${field('to', 'to', textInput('to', f.to, '', 16))}
${field('run', 'run_id', textInput('run_id', f.run_id, 'id', 6))}
${field('correlation id', 'correlation_id', textInput('correlation_id', f.correlation_id, '', 12))}
${field('payload contains', 'payload', textInput('payload', f.payload, '{"customer": 42}', 18))}
<button type="submit">Filter</button> <a href="/tasks">clear</a>
</form>
${totalLine(total, 'task')}
<form method="get" action="/bulk" id="bulk-form">
<input type="hidden" name="scope" value="tasks">
${bulkBar(ctx, 'tasks', f, total, ['cancel', 'retry'])}
<table class="grid" id="tasks">
<thead><tr>${ro ? '' : html`<th></th>`}<th>task</th><th>queue</th><th>tenant</th><th>state</th><th>reason</th><th>attempts</th><th>error class</th><th>last error</th><th>run / step</th><th>created</th></tr></thead>
<tbody>
${rows.slice(0, PAGE).map((t) => html`<tr data-task="${t.task_id}">
${ro ? '' : html`<td><input type="checkbox" name="id" value="${t.task_id}" aria-label="select task ${t.task_id}"></td>`}<td><a href="/tasks/${t.task_id}">#${t.task_id}</a></td><td>${t.queue}</td><td>${t.tenant_id}</td><td class="st">${taskState(t)}</td><td>${val(t.reason_code)}</td>
<td class="n">${t.attempts}</td><td>${val(t.last_error_class)}</td><td>${clip(t.last_error, 80)}</td>
<td>${t.run_id ? html`<a href="/runs/${t.run_id}">run ${t.run_id}</a> ${t.step_key}` : html`<span class="none">—</span>`}</td>
<td>${ts(t.created_at)}</td></tr>`)}
</tbody>
</table>
</form>
${rows.length ? '' : html`<p class="none">No task matches.</p>`}
${pager('/tasks', f, rows, 'task_id', hasNewer)}`;
  return layout(ctx, 'Tasks', body);
}

function historyTable(rows) {
  return html`<table class="grid" id="history">
<thead><tr><th>at</th><th>kind</th><th>attempt</th><th>transition</th><th>reason</th><th>actor</th><th>label</th><th>outcome</th><th>error class</th><th>error</th><th>note</th></tr></thead>
<tbody>${rows.map((h) => html`<tr class="kind-${h.kind === 'attempt' ? 'attempt' : 'event'}">
<td>${ts(h.at)}</td><td>${h.kind}</td><td class="n">${val(h.attempt)}</td>
<td>${h.kind === 'event' ? html`${val(h.from_state)} → ${h.to_state}` : html`<span class="none">—</span>`}</td>
<td>${val(h.reason_code)}</td><td>${val(h.actor)}</td><td>${val(h.label)}</td><td>${val(h.outcome)}</td>
<td>${val(h.error_class)}</td><td>${clip(h.error, 200)}</td><td>${clip(h.note, 200)}</td></tr>`)}</tbody>
</table>`;
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

function taskPage(ctx, { status: s, detail: d, history, deadLetter, redriven }) {
  const attempts = history.filter((h) => h.kind === 'attempt').length;
  const events = history.length - attempts;
  const actions = html`
${deadLetter ? retryControl(ctx, { task_id: s.task_id, reason: s.reason_code, run_id: d.run_id }, 'Retry this dead letter (orch_retry)') : ''}
${!TERMINAL.has(s.state) ? postForm(ctx, `/tasks/${s.task_id}/cancel`, html`<input type="text" name="reason" placeholder="reason" size="24"> <button type="submit" class="act danger">Cancel task (orch_cancel)</button>`) : ''}`;
  const body = html`
<p id="task-state">${taskState({ ...s, derived: d.derived })} ${deadLetter ? html`<span class="state state-dead">dead letter</span>` : ''}</p>
<div class="actions">${actions}</div>
<dl class="facts">
<dt>queue</dt><dd><a href="${url('/tasks', { queue: s.queue })}">${s.queue}</a></dd>
<dt>tenant</dt><dd>${s.tenant_id}</dd>
<dt>reason</dt><dd>${val(s.reason_code)}</dd>
<dt>priority</dt><dd>${s.priority}</dd>
<dt>attempts / failures</dt><dd>${s.attempts} / ${s.failures}${d.max_attempts || d.max_failures ? ` (this task's budget: ${d.max_attempts || 'queue default'} / ${d.max_failures || 'queue default'})` : ''}</dd>
<dt>last error</dt><dd>${val(s.last_error_class)} ${clip(s.last_error, 400)}</dd>
<dt>run at</dt><dd>${ts(s.run_at)}</dd>
<dt>retry at</dt><dd>${ts(s.retry_at)}</dd>
<dt>lease owner</dt><dd>${val(s.lease_owner)} (lease until ${ts(s.lease_expires_at)})</dd>
<dt>run / step</dt><dd>${d.run_id ? html`<a href="/runs/${d.run_id}">run ${d.run_id}</a> ${d.step_key}` : html`<span class="none">—</span>`}</dd>
<dt>owner</dt><dd>${val(d.owner)}</dd>
<dt>concurrency key</dt><dd>${val(d.concurrency_key)}${d.gated ? ' (gated)' : ''}</dd>
<dt>idempotency key</dt><dd>${val(d.idempotency_key)}</dd>
<dt>correlation id</dt><dd>${val(d.correlation_id)}</dd>
<dt>retry of</dt><dd>${d.retry_of ? html`<a href="/tasks/${d.retry_of}">#${d.retry_of}</a>` : html`<span class="none">—</span>`}</dd>
<dt>re-driven as</dt><dd>${redriven.length ? redriven.map((r) => html`<a href="/tasks/${r.task_id}">#${r.task_id}</a> (${r.state}) `) : html`<span class="none">—</span>`}</dd>
<dt>created</dt><dd>${ts(s.created_at)}</dd>
<dt>updated</dt><dd>${ts(s.updated_at)}</dd>
<dt>finished</dt><dd>${ts(d.finished_at)}</dd>
</dl>
<div class="cols">
<section><h2>Payload</h2>${pre(d.payload)}</section>
<section><h2>Result</h2>${pre(d.result)}</section>
${d.wait_data ? html`<section><h2>Waiting for</h2>${pre(d.wait_data)}</section>` : ''}
${d.resume_data ? html`<section><h2>Resume data</h2>${pre(d.resume_data)}</section>` : ''}
</div>
<h2>Attempts and events <small>(${attempts} attempt${attempts === 1 ? '' : 's'}, ${events} event${events === 1 ? '' : 's'}; <code>orch_history</code>)</small></h2>
${historyTable(history)}`;
  return layout(ctx, `Task #${s.task_id}`, body);
}

// ---- dead letters ----------------------------------------------------------

// Why re-driving a dead letter needs a second look, or null.
function retryRisk(t) {
  if (t.run_id) {
    return { kind: 'workflow_step', text: `This task is step ${t.step_key || ''} of run ${t.run_id}. Re-driving the task alone does not move the run: retry the run (orch_retry_run), which re-runs its failed steps.` };
  }
  if (t.reason === 'not_safe_to_retry' || t.reason_code === 'not_safe_to_retry') {
    return { kind: 'not_safe_to_retry', text: 'Its queue or step declares the work not safe to retry (retry_safety NOT_SAFE_TO_RETRY): it may have had its effect already. Check that it did not before running it again.' };
  }
  return null;
}

// retryControl(ctx, t, label): a dead letter's retry button, or a link to
// its confirmation page when re-driving it needs a second look.
function retryControl(ctx, t, label = 'Retry') {
  if (ctx.readonly) return '';
  if (retryRisk(t)) {
    return html`<a class="button" href="/dead-letters/${t.task_id}/retry" data-confirm-retry="${t.task_id}">${label}…</a>`;
  }
  return postForm(ctx, `/dead-letters/${t.task_id}/retry`, html`<button type="submit" class="act">${label}</button>`);
}

function retryConfirmPage(ctx, { task: t }) {
  const risk = retryRisk(t);
  const body = html`
<div class="confirm" id="confirm">
<p class="why" id="why">${risk.text}</p>
<dl class="facts"><dt>queue</dt><dd>${t.queue}</dd><dt>reason</dt><dd>${t.reason_code}</dd>
<dt>last error</dt><dd>${clip(t.last_error, 300)}</dd>${t.run_id ? html`<dt>run / step</dt><dd><a href="/runs/${t.run_id}">run ${t.run_id}</a> ${t.step_key}</dd>` : ''}</dl>
${t.run_id ? html`<p><a class="button act" id="to-run" href="/runs/${t.run_id}">Go to run ${t.run_id} and retry it there</a></p>` : ''}
${postForm(ctx, `/dead-letters/${t.task_id}/retry`, html`<input type="hidden" name="confirm" value="yes">
<button type="submit" class="${t.run_id ? 'danger' : 'act'}" id="confirm-retry">${t.run_id ? 'Re-drive the task alone anyway (orch_retry)' : 'Re-drive it (orch_retry)'}</button>`)}
<p><a href="/dead-letters">back to the dead letters</a></p>
</div>`;
  return layout({ ...ctx, noRefresh: true }, `Re-drive dead letter #${t.task_id}?`, body);
}

function deadLettersPage(ctx, { filters: f, rows, queues, total }) {
  const ro = ctx.readonly;
  const bulk = postForm(ctx, '/dead-letters/reprocess', html`
<fieldset><legend>Re-drive by filter (<code>orch_reprocess</code>: the oldest dead letters matching every given filter)</legend>
${field('queue', 'bulk-queue', html`<select name="queue" id="f-bulk-queue"><option value="">any</option>${queues.map((q) => html`<option value="${q.queue}"${q.queue === f.queue ? html` selected` : ''}>${q.queue}</option>`)}</select>`)}
${field('reason', 'bulk-reason', html`<select name="reason" id="f-bulk-reason"><option value="">any</option>${DEAD_LETTER_REASONS.map((r) => html`<option value="${r}"${r === f.reason ? html` selected` : ''}>${r}</option>`)}</select>`)}
${field('failed after', 'bulk-failed_after', html`<input type="text" name="failed_after" id="f-bulk-failed_after" value="${f.failed_after || ''}" placeholder="${TIME_HINT}" size="16">`)}
${field('at most', 'bulk-max', html`<input type="number" name="max" id="f-bulk-max" value="100" min="1" max="100000">`)}
<label><input type="checkbox" name="confirm" value="yes" id="f-bulk-confirm"> I mean it</label>
<button type="submit" class="act" id="bulk-reprocess">Re-drive matching dead letters</button>
</fieldset>`, 'bulk');
  const body = html`
<form method="get" action="/dead-letters" class="filters">
${field('queue', 'queue', select('queue', queues.map((q) => q.queue), f.queue))}
${field('reason', 'reason', select('reason', DEAD_LETTER_REASONS, f.reason))}
${field('tenant', 'tenant', textInput('tenant', f.tenant, 'any', 10))}
${field('error class', 'error_class', select('error_class', ERROR_CLASSES, f.error_class))}
${field('failed after', 'failed_after', textInput('failed_after', f.failed_after, TIME_HINT, 16))}
${field('payload contains', 'payload', textInput('payload', f.payload, '{"customer": 42}', 18))}
<button type="submit">Filter</button> <a href="/dead-letters">clear</a>
</form>
${totalLine(total, 'dead letter')}
<form method="get" action="/bulk" id="bulk-form">
<input type="hidden" name="scope" value="dead-letters">
${bulkBar(ctx, 'dead-letters', f, total, ['retry'])}
<table class="grid" id="dead-letters">
<thead><tr>${ro ? '' : html`<th></th>`}<th>task</th><th>queue</th><th>tenant</th><th>reason</th><th>failed at</th><th>error class</th><th>last error</th><th>attempts</th><th>payload</th><th></th></tr></thead>
<tbody>
${rows.slice(0, PAGE).map((t) => html`<tr data-task="${t.task_id}">
${ro ? '' : html`<td><input type="checkbox" name="id" value="${t.task_id}" aria-label="select task ${t.task_id}"></td>`}<td><a href="/tasks/${t.task_id}">#${t.task_id}</a></td><td>${t.queue}</td><td>${t.tenant_id}</td><td>${t.reason}${t.run_id ? html` <small><a href="/runs/${t.run_id}">run ${t.run_id}</a> ${t.step_key}</small>` : ''}</td>
<td>${ts(t.failed_at)}</td><td>${val(t.last_error_class)}</td><td>${clip(t.last_error, 80)}</td><td class="n">${t.attempts}</td>
<td><details><summary>${clip(t.payload.replace(/\s+/g, ' '), 40)}</summary>${pre(t.payload)}</details></td>
<td class="act-cell">${ro ? '' : retryRisk(t) ? retryControl(ctx, t) : html`<button type="submit" form="retry-${t.task_id}" class="act">Retry</button>`}</td></tr>`)}
</tbody>
</table>
</form>
${ro ? '' : rows.slice(0, PAGE).filter((t) => !retryRisk(t)).map((t) => html`<form method="post" action="/dead-letters/${t.task_id}/retry" id="retry-${t.task_id}" class="hidden">${csrfField(ctx)}<input type="hidden" name="back" value="${ctx.path}"></form>`)}
${rows.length ? '' : html`<p class="none">No dead letter matches.</p>`}
${rows.length > PAGE ? html`<p class="more">Showing the newest ${PAGE}; narrow the filter to see others.</p>` : ''}
${bulk}`;
  return layout(ctx, 'Dead letters', body);
}

// ---- bulk actions ------------------------------------------------------------

const TERMINAL_STATES = new Set(['completed', 'failed', 'cancelled']);

// sortBulk(action, rows, includeUnsafe): which of the tasks the action
// applies to, and which it leaves, with why.
function sortBulk(action, rows, includeUnsafe) {
  const act = [];
  const unsafe = [];
  const steps = [];
  const skip = [];
  for (const t of rows) {
    if (action === 'cancel') {
      (TERMINAL_STATES.has(t.state) ? skip : act).push(t);
    } else if (!t.dead_letter) {
      skip.push(t);
    } else if (t.run_id) {
      steps.push(t);
    } else if (t.reason_code === 'not_safe_to_retry') {
      (includeUnsafe ? act : unsafe).push(t);
    } else {
      act.push(t);
    }
  }
  return { act, unsafe, steps, skip };
}

function idList(rows, n = 40) {
  return html`${rows.slice(0, n).map((t) => html`<a href="/tasks/${t.task_id}">#${t.task_id}</a> `)}${rows.length > n ? `and ${rows.length - n} more` : ''}`;
}

function bulkPage(ctx, { scope, action, matching, filters, ids, rows, total, bulk }) {
  const what = action === 'cancel' ? 'Cancel' : 'Re-drive';
  const sorted = sortBulk(action, rows, false);
  const hidden = [];
  hidden.push(html`<input type="hidden" name="scope" value="${scope}"><input type="hidden" name="action" value="${action}">`);
  if (matching) {
    hidden.push(html`<input type="hidden" name="matching" value="1">`);
    for (const [k, v] of Object.entries(filters)) hidden.push(html`<input type="hidden" name="f_${k}" value="${v}">`);
  } else {
    for (const id of ids) hidden.push(html`<input type="hidden" name="id" value="${id}">`);
  }
  const how = action === 'cancel'
    ? (bulk ? 'one call of orch_cancel_where over these task ids' : 'one orch_cancel call per task')
    : (bulk ? 'one call of orch_retry_where over these task ids' : 'one orch_retry call per dead letter');
  const filterText = Object.entries(filters).map(([k, v]) => `${k} = ${v}`).join(', ');
  const body = html`
<div class="confirm" id="confirm">
<p id="preview" data-count="${sorted.act.length}" data-total="${total}">${matching
    ? html`The filter (${filterText || 'none'}) matches <b>${total > COUNT_CAP ? `more than ${COUNT_CAP}` : total}</b> ${scope === 'tasks' ? 'task' : 'dead letter'}${total === 1 ? '' : 's'}${total > BULK_MAX ? html`; one action takes the newest <b>${BULK_MAX}</b>` : ''}.`
    : html`<b>${ids.length}</b> ticked.`}
${what} applies to <b id="act-count">${sorted.act.length}</b> of them (${how}); the tasks are read again when you confirm.</p>
${sorted.act.length ? html`<p class="sub">${idList(sorted.act)}</p>` : ''}
${sorted.skip.length ? html`<p class="sub" id="skipped">Left alone, ${action === 'cancel' ? 'already finished' : 'not dead letters'}: ${idList(sorted.skip)}</p>` : ''}
${sorted.steps.length ? html`<p class="warn" id="steps">${sorted.steps.length} belong${sorted.steps.length === 1 ? 's' : ''} to a workflow run and ${sorted.steps.length === 1 ? 'is' : 'are'} left alone: re-driving a step's task does not move its run; retry the run instead: ${sorted.steps.map((t) => html`<a href="/runs/${t.run_id}">run ${t.run_id}</a> (#${t.task_id}) `)}</p>` : ''}
${postForm(ctx, '/bulk', html`${hidden}
${action === 'cancel' ? html`<label for="f-reason">reason</label> <input type="text" name="reason" id="f-reason" size="28" placeholder="why (kept in the audit trail)">` : ''}
${sorted.unsafe.length ? html`<p class="warn" id="unsafe">${sorted.unsafe.length} ${sorted.unsafe.length === 1 ? 'is' : 'are'} not safe to retry (retry_safety NOT_SAFE_TO_RETRY): the work may have had its effect already. ${idList(sorted.unsafe)}<br>
<label><input type="checkbox" name="include_unsafe" value="yes" id="f-include-unsafe"> re-drive those too</label></p>` : ''}
<label><input type="checkbox" name="confirm" value="yes" id="f-confirm" required> I mean it</label>
<button type="submit" class="act${action === 'cancel' ? ' danger' : ''}" id="confirm-bulk">${what} ${matching ? 'everything matching' : 'the ticked tasks'}</button>`, 'bulk-confirm')}
${ctx.readonly ? html`<p class="none">Read-only console: it takes no action.</p>` : ''}
<p><a href="${matching ? url(scope === 'tasks' ? '/tasks' : '/dead-letters', filters) : (scope === 'tasks' ? '/tasks' : '/dead-letters')}">back</a></p>
</div>`;
  return layout({ ...ctx, noRefresh: true }, `${what} ${scope === 'tasks' ? 'tasks' : 'dead letters'}?`, body);
}

// ---- runs ------------------------------------------------------------------

function runsPage(ctx, { filters: f, rows, definitions, parent = false }) {
  const body = html`
<form method="get" action="/runs" class="filters">
${field('definition', 'definition', select('definition', definitions.map((d) => d.name), f.definition))}
${field('state', 'state', select('state', RUN_STATES, f.state))}
${field('tenant', 'tenant', textInput('tenant', f.tenant, 'any', 10))}
${field('created from', 'from', textInput('from', f.from, TIME_HINT, 16))}
${field('to', 'to', textInput('to', f.to, '', 16))}
${field('correlation id', 'correlation_id', textInput('correlation_id', f.correlation_id, '', 12))}
<button type="submit">Filter</button> <a href="/runs">clear</a>
</form>
<table class="grid" id="runs">
<thead><tr><th>run</th>${parent ? html`<th>parent run</th>` : ''}<th>definition</th><th>tenant</th><th>state</th><th>phase</th><th>reason</th><th>failed step</th><th>error</th><th>created</th><th>finished</th></tr></thead>
<tbody>
${rows.slice(0, PAGE).map((r) => html`<tr data-run="${r.run_id}"${r.parent_run_id ? html` data-parent="${r.parent_run_id}"` : ''}>
<td><a href="/runs/${r.run_id}">run ${r.run_id}</a></td>${parent ? html`<td class="parent">${r.parent_run_id ? html`↳ <a href="/runs/${r.parent_run_id}">run ${r.parent_run_id}</a>` : html`<span class="none">—</span>`}</td>` : ''}<td>${r.definition} v${r.version}</td><td>${r.tenant_id}</td><td>${stateBadge(r.state)}</td>
<td>${val(r.phase)}</td><td>${val(r.reason_code)}</td><td>${val(r.failed_step)}</td><td>${clip(r.error, 60)}</td><td>${ts(r.created_at)}</td><td>${ts(r.finished_at)}</td></tr>`)}
</tbody>
</table>
${rows.length ? '' : html`<p class="none">No run matches.</p>`}
${moreLink('/runs', f, rows, 'run_id')}`;
  return layout(ctx, 'Runs', body);
}

function decideForm(ctx, runId, stepId, idSuffix) {
  return postForm(ctx, '/approvals/decide', html`
<input type="hidden" name="run_id" value="${runId}"><input type="hidden" name="step_id" value="${stepId}">
<input type="text" name="approval_ref" placeholder="approval reference" size="22" required id="ref-${idSuffix}">
<input type="text" name="actor" placeholder="your name" size="12">
<button type="submit" name="decision" value="approve" class="act">Approve</button>
<input type="text" name="note" placeholder="note" size="22">
<button type="submit" name="decision" value="reject" class="act danger">Reject</button>`, 'decide');
}

function runActions(ctx, r) {
  const out = [];
  if (r.state === 'running') out.push(postForm(ctx, `/runs/${r.run_id}/pause`, html`<button type="submit" class="act">Pause (orch_pause_run)</button>`));
  if (r.state === 'paused') {
    out.push(postForm(ctx, `/runs/${r.run_id}/resume`, html`<input type="text" name="pins" placeholder='pins, e.g. {"commit": "9f1c2e"} (optional)' size="30"> <button type="submit" class="act">Resume (orch_resume_run)</button>`));
  }
  if (['running', 'waiting_approval', 'paused'].includes(r.state)) {
    out.push(postForm(ctx, `/runs/${r.run_id}/cancel`, html`<input type="text" name="reason" placeholder="reason" size="20"> <button type="submit" class="act danger">Cancel run (orch_cancel_run)</button>`));
  }
  if (r.state === 'failed') out.push(postForm(ctx, `/runs/${r.run_id}/retry`, html`<button type="submit" class="act">Retry from the failed steps (orch_retry_run)</button>`));
  return out;
}

function eventsTable(events, id) {
  if (!events.length) return html`<p class="none">No event.</p>`;
  return html`<table class="grid events"${id ? html` id="${id}"` : ''}>
<thead><tr><th>at</th><th>entity</th><th>task</th><th>transition</th><th>reason</th><th>actor</th><th>label</th><th>note</th></tr></thead>
<tbody>${events.map((e) => html`<tr><td>${ts(e.at)}</td><td>${e.entity}</td><td>${e.task_id ? html`<a href="/tasks/${e.task_id}">#${e.task_id}</a>` : ''}</td>
<td>${val(e.from_state)} → ${e.to_state}</td><td>${val(e.reason_code)}</td><td>${val(e.actor)}</td><td>${val(e.label)}</td><td>${clip(e.note, 120)}</td></tr>`)}</tbody>
</table>`;
}

// A run id from a status document, or null: only digits make a link.
function runRef(v) {
  return v !== null && v !== undefined && /^\d{1,19}$/.test(String(v)) ? String(v) : null;
}

// runFamily(status, r): a run's place among sub-workflows, as
// orch_run_status tells it: its parent (the run object's parent_run_id,
// parent_step, parent_index; or the row's parent_run_id) and its child runs
// ("children": run_id, step_id, index, definition, version, state).  Neither
// exists for an extension without sub-workflows: null then.
function runFamily(status, r) {
  const doc = status && status.run && typeof status.run === 'object' ? status.run : {};
  const pick = (k) => {
    if (doc[k] !== undefined && doc[k] !== null) return doc[k];
    return r && r[k] !== undefined && r[k] !== null ? r[k] : null;
  };
  const parentId = runRef(pick('parent_run_id'));
  const parent = parentId ? { run_id: parentId, step: pick('parent_step'), index: pick('parent_index') } : null;
  const children = status && Array.isArray(status.children)
    ? status.children.filter((c) => c && typeof c === 'object' && runRef(c.run_id)) : null;
  return { parent, children };
}

function childRunsTable(children, id, withStep = true) {
  return html`<table class="grid child-runs"${id ? html` id="${id}"` : ''}>
<thead><tr><th>run</th>${withStep ? html`<th>step</th>` : ''}<th>item</th><th>definition</th><th>state</th></tr></thead>
<tbody>${children.map((c) => html`<tr data-run="${runRef(c.run_id)}" data-step="${c.step_id}">
<td><a href="/runs/${runRef(c.run_id)}" class="child-run">run ${runRef(c.run_id)}</a></td>
${withStep ? html`<td>${c.step_id ? html`<a href="#step-${c.step_id}">${c.step_id}</a>` : html`<span class="none">—</span>`}</td>` : ''}
<td class="n">${val(c.index)}</td>
<td>${c.definition ? html`<a href="${url('/runs', { definition: c.definition })}">${c.definition}</a>${c.version !== null && c.version !== undefined ? `@${c.version}` : ''}` : html`<span class="none">—</span>`}</td>
<td>${stateBadge(c.state)}</td></tr>`)}</tbody></table>`;
}

// "3 child runs: 2 succeeded, 1 running"
function childSummary(children) {
  const by = new Map();
  for (const c of children) by.set(c.state || '?', (by.get(c.state || '?') || 0) + 1);
  return `${children.length} child run${children.length === 1 ? '' : 's'}: ${[...by].map(([k, n]) => `${n} ${k}`).join(', ')}`;
}

function runPage(ctx, { run: r, status, steps, tasks, spec, specError, retriedAs }) {
  const docSteps = new Map((status.steps || []).map((s) => [s.step_id, s]));
  const { parent, children } = runFamily(status, r);
  const childrenOf = (stepId) => (children || []).filter((c) => c.step_id === stepId);
  const byId = {};
  for (const s of steps) {
    // a subflow step names its child run (or, for a map, how many it started)
    const childId = runRef((docSteps.get(s.step_id) || {}).child_run_id);
    const n = childrenOf(s.step_id).length;
    const child = childId && n <= 1 ? `run ${childId}` : (n ? `${n} runs` : null);
    byId[s.step_id] = { type: s.type, state: s.state, compensation: s.compensation, child };
  }
  const taskById = new Map(tasks.map((t) => [String(t.task_id), t]));
  const events = status.events || [];
  const approvals = status.approvals || [];
  // Signals sent to the run (orch_signal), pending or consumed, and the
  // steps that wait for one (a wait step's "signal" in orch_run_status).
  const signals = status.signals || [];
  const signalWaits = (status.steps || []).filter((s) => s.signal && s.state === 'waiting');

  const stepSection = (s) => {
    const doc = docSteps.get(s.step_id) || {};
    const stepTasks = (doc.tasks || []).map((t) => ({ ...t, ...(taskById.get(String(t.task_id)) || {}) }));
    const taskIds = new Set(stepTasks.map((t) => String(t.task_id)));
    // A step's events: its own (entity run_step, the step id in the note)
    // and those of its tasks.
    const ev = events.filter((e) => (e.entity === 'run_step' && e.note === s.step_id)
      || (e.task_id !== null && e.task_id !== undefined && taskIds.has(String(e.task_id))));
    const inputs = stepTasks.filter((t) => t.payload);
    const waiting = s.state === 'awaiting_approval';
    const childId = runRef(doc.child_run_id);
    const stepChildren = childrenOf(s.step_id);
    const childState = childId ? (stepChildren.find((c) => runRef(c.run_id) === childId) || {}).state : null;
    return html`<section class="step" id="step-${s.step_id}">
<h3>${s.step_id} <small>${s.type}</small> ${stateBadge(s.state)}${s.compensation ? html` <span class="state">compensation ${s.compensation}</span>` : ''}</h3>
<dl class="facts">
<dt>started</dt><dd>${ts(s.started_at)}</dd><dt>finished</dt><dd>${ts(s.finished_at)}</dd>
${s.timeout_at ? html`<dt>${s.type === 'human_approval' ? 'approval expires' : 'times out'}</dt><dd>${ts(s.timeout_at)}</dd>` : ''}
${s.wake_at ? html`<dt>wakes</dt><dd>${ts(s.wake_at)}</dd>` : ''}
${doc.signal ? html`<dt>${s.state === 'waiting' ? 'waits for signal' : 'signal'}</dt><dd><code>${doc.signal}</code></dd>` : ''}
${childId ? html`<dt>child run</dt><dd><a href="/runs/${childId}" class="child-run" data-run="${childId}">run ${childId}</a>${childState ? html` ${stateBadge(childState)}` : ''}</dd>` : ''}
${s.error ? html`<dt>error</dt><dd>${clip(s.error, 400)}</dd>` : ''}
</dl>
${stepChildren.length && !(stepChildren.length === 1 && runRef(stepChildren[0].run_id) === childId)
    ? html`<h4>Child runs <small>(${childSummary(stepChildren)})</small></h4>${childRunsTable(stepChildren, null, false)}` : ''}
${waiting ? html`<div class="actions">${decideForm(ctx, r.run_id, s.step_id, `step-${s.step_id}`)}</div>` : ''}
<div class="cols">
<section><h4>Input</h4>${inputs.length ? inputs.map((t) => html`<p class="sub">task <a href="/tasks/${t.task_id}">#${t.task_id}</a> ${t.step_key}</p>${pre(t.payload)}`) : html`<p class="none">No task (the run's input applies).</p>`}</section>
<section><h4>Output</h4>${pre(s.output)}</section>
</div>
<h4>Children: tasks and attempts</h4>
${stepTasks.length ? html`<table class="grid children"><thead><tr><th>task</th><th>key</th><th>state</th><th>reason</th><th>attempts</th><th>attempt history</th></tr></thead>
<tbody>${stepTasks.map((t) => html`<tr><td><a href="/tasks/${t.task_id}">#${t.task_id}</a></td><td>${t.step_key}</td><td>${stateBadge(t.state)}</td><td>${val(t.reason_code)}</td><td class="n">${t.attempts}</td>
<td>${(t.attempt_history || []).map((a) => html`<div>${a.attempt}: ${a.outcome || 'running'} by ${val(a.worker)}${a.error_class ? html` (${a.error_class}: ${clip(a.error, 80)})` : ''}</div>`)}</td></tr>`)}</tbody></table>`
    : html`<p class="none">No task.</p>`}
<h4>Events</h4>
${eventsTable(ev)}
</section>`;
  };

  const parentStep = parent && parent.step !== null && parent.step !== undefined ? String(parent.step) : null;
  const body = html`
<p>${stateBadge(r.state)} ${r.definition} version ${r.version} · phase ${val(r.phase)} · reason ${val(r.reason_code)}</p>
${parent ? html`<p class="family" id="run-parent">Child run of <a href="/runs/${parent.run_id}" id="parent-link">run ${parent.run_id}</a>${parentStep
    ? html`, started by its step <a href="/runs/${parent.run_id}#step-${parentStep}">${parentStep}</a>` : ''}${parent.index !== null && parent.index !== undefined ? html`, map item ${parent.index}` : ''}.</p>` : ''}
<div class="actions">${runActions(ctx, r)}</div>
<div class="dagbox">${spec ? renderDag(spec.steps || [], byId) : renderDag([], byId)}</div>
${legend()}
${specError ? html`<p class="none">The definition could not be read (${specError}): the edges are not drawn.</p>` : ''}
<dl class="facts">
<dt>tenant</dt><dd>${r.tenant_id}</dd>
<dt>content hash</dt><dd><code>${r.content_hash}</code></dd>
${r.failed_step ? html`<dt>failed step</dt><dd><a href="#step-${r.failed_step}">${r.failed_step}</a>: ${clip(r.error, 400)}</dd>` : ''}
<dt>deadline</dt><dd>${ts(r.deadline_at)}</dd>
<dt>started by</dt><dd>${val(r.created_by)}</dd>
<dt>idempotency key</dt><dd>${val(r.idempotency_key)}</dd>
<dt>correlation id</dt><dd>${val(r.correlation_id)}</dd>
${parent ? html`<dt>parent run</dt><dd><a href="/runs/${parent.run_id}">run ${parent.run_id}</a>${parentStep ? ` step ${parentStep}` : ''}${parent.index !== null && parent.index !== undefined ? ` item ${parent.index}` : ''}</dd>` : ''}
<dt>retry of</dt><dd>${r.retry_of ? html`<a href="/runs/${r.retry_of}">run ${r.retry_of}</a>` : html`<span class="none">—</span>`}</dd>
<dt>retried as</dt><dd>${retriedAs.length ? retriedAs.map((x) => html`<a href="/runs/${x.run_id}">run ${x.run_id}</a> (${x.state}) `) : html`<span class="none">—</span>`}</dd>
<dt>created</dt><dd>${ts(r.created_at)}</dd><dt>finished</dt><dd>${ts(r.finished_at)}</dd>
</dl>
<div class="cols">
<section><h2>Input</h2>${pre(r.input_pretty)}</section>
<section><h2>Output</h2>${pre(r.output_pretty)}</section>
<section><h2>Pins</h2>${pre(r.pins_pretty)}</section>
</div>
${children ? html`<h2>Child runs <small>(${children.length ? childSummary(children) : 'none'})</small></h2>
${children.length ? childRunsTable(children, 'run-children') : html`<p class="none">No child run.</p>`}` : ''}
<h2>Approvals</h2>
${approvals.length ? html`<table class="grid" id="run-approvals"><thead><tr><th>step</th><th>decision</th><th>reference</th><th>actor</th><th>label</th><th>note</th><th>decided</th></tr></thead>
<tbody>${approvals.map((a) => html`<tr><td>${a.step_id}</td><td>${a.approved ? 'approved' : 'rejected'}</td><td>${a.approval_ref}</td><td>${val(a.actor)}</td><td>${val(a.label)}</td><td>${clip(a.note, 200)}</td><td>${ts(a.decided_at)}</td></tr>`)}</tbody></table>`
    : html`<p class="none">No decision yet.</p>`}
<h2>Signals</h2>
${signalWaits.length ? html`<p id="run-signal-waits">Waiting for a signal: ${signalWaits.map((w, i) => html`${i ? ', ' : ''}<a href="#step-${w.step_id}">${w.step_id}</a> (<code>${w.signal}</code>)`)}</p>` : ''}
${signals.length ? html`<table class="grid" id="run-signals"><thead><tr><th>signal</th><th>name</th><th>payload</th><th>sent</th><th>consumed</th><th>by step</th></tr></thead>
<tbody>${signals.map((g) => html`<tr data-signal="${g.signal_id}"><td>${g.signal_id}</td><td><code>${g.name}</code></td><td>${clip(JSON.stringify(g.payload), 200)}</td><td>${ts(g.sent_at)}</td>
<td>${g.consumed_at ? ts(g.consumed_at) : html`<span class="state state-pending">pending</span>`}</td><td>${g.consumed_by ? html`<a href="#step-${g.consumed_by}">${g.consumed_by}</a>` : html`<span class="none">—</span>`}</td></tr>`)}</tbody></table>`
    : html`<p class="none">No signal.</p>`}
<h2>Steps</h2>
${steps.map(stepSection)}
<h2>Run events</h2>
${eventsTable(events.filter((e) => e.entity === 'run'), 'run-events')}`;
  return layout(ctx, `Run ${r.run_id}`, body);
}

// ---- approvals -------------------------------------------------------------

function approvalsPage(ctx, { rows }) {
  const body = html`
<p class="note">Steps waiting for a person (<code>orch_review_queue</code>). An approval expires at its step's
timeout (then the step follows <code>on_timeout</code>); the run's deadline, a hard cap, ends the wait too. A decision calls
<code>orch_approve</code> / <code>orch_reject</code> as this console's role; the approval reference is
single-use (another run or step: OR009).</p>
<table class="grid" id="approvals">
<thead><tr><th>run</th><th>tenant</th><th>step</th><th>waiting since</th><th>expires</th><th>run deadline</th><th>decision</th></tr></thead>
<tbody>
${rows.map((a) => html`<tr data-run="${a.run_id}" data-step="${a.step_id}">
<td><a href="/runs/${a.run_id}#step-${a.step_id}">run ${a.run_id}</a> <small>${a.definition}</small></td><td>${a.tenant_id}</td>
<td>${a.step_id}${a.kind === 'compensation_approval' ? html` <small>(compensation)</small>` : ''}</td><td>${ts(a.since)}</td>
<td class="expires">${a.kind === 'approval_waiting' && a.expires_at ? ts(a.expires_at) : html`<span class="none">no expiry</span>`}</td><td class="deadline">${a.deadline_at ? ts(a.deadline_at) : html`<span class="none">none</span>`}</td>
<td>${ctx.readonly ? html`<span class="none">read-only</span>` : decideForm(ctx, a.run_id, a.step_id, `${a.run_id}-${a.step_id}`)}</td></tr>`)}
</tbody>
</table>
${rows.length ? '' : html`<p class="none">Nothing waits for a decision.</p>`}`;
  return layout(ctx, 'Approvals waiting', body);
}

// ---- schedules -------------------------------------------------------------

// What a schedule fires: a task in a queue, or a run of a definition.
function scheduleTarget(s) {
  if (s.target_queue !== null && s.target_queue !== undefined) {
    return html`<span class="kind">task in</span> <a href="${url('/tasks', { queue: s.target_queue, tenant: s.tenant_id })}" data-target="queue">${s.target_queue}</a>`;
  }
  if (s.target_definition !== null && s.target_definition !== undefined) {
    return html`<span class="kind">run of</span> <a href="${url('/runs', { definition: s.target_definition, tenant: s.tenant_id })}" data-target="definition">${s.target_definition}</a>${s.target_version ? `@${s.target_version}` : ''}`;
  }
  return html`<span class="none">—</span>`;
}

// A slot: as PostgreSQL prints it, and as a wall-clock time of the
// schedule's time zone.
function slot(v, local, tz) {
  if (!v) return html`<span class="none">—</span>`;
  const same = local && String(v).replace('T', ' ').startsWith(local);   // the same wall clock: said once
  return html`${ts(v)}${local && !same ? html`<br><small class="local">${local} ${tz}</small>` : ''}`;
}

function scheduleHidden(s) {
  return html`<input type="hidden" name="name" value="${s.name}"><input type="hidden" name="tenant" value="${s.tenant_id}">`;
}

function scheduleActions(ctx, s) {
  if (ctx.readonly) return '';
  return html`${s.paused
    ? postForm(ctx, '/schedules/resume', html`${scheduleHidden(s)}<button type="submit" class="act small" data-resume="${s.name}">resume</button>`)
    : postForm(ctx, '/schedules/pause', html`${scheduleHidden(s)}<button type="submit" class="small" data-pause="${s.name}">pause</button>`)}<a
 class="button small danger" href="${url('/schedules/unschedule', { name: s.name, tenant: s.tenant_id })}" data-unschedule="${s.name}">unschedule…</a>`;
}

function scheduleFired(s) {
  const made = [];
  if (s.last_task_id) made.push(html`<a href="/tasks/${s.last_task_id}">task #${s.last_task_id}</a>`);
  if (s.last_run_id) made.push(html`<a href="/runs/${s.last_run_id}">run ${s.last_run_id}</a>`);
  return html`${slot(s.last_fired_slot, s.last_fired_local, s.timezone)}${made.length ? html`<br><small>made ${made}</small>` : ''}${s.pending_slot
    ? html`<br><small class="pending" title="overlap queue_one: fires when the last fire's work is finished">held back: ${ts(s.pending_slot)}</small>` : ''}`;
}

function schedulePager(f, rows) {
  const base = { ...f };
  delete base.after;
  delete base.after_tenant;
  const out = [];
  if (f.after) out.push(html`<a href="${url('/schedules', base)}" id="first">← first page</a>`);
  if (rows.length > PAGE) {
    const last = rows[PAGE - 1];
    out.push(html`<a href="${url('/schedules', { ...base, after: last.name, after_tenant: last.tenant_id })}" rel="next" id="next">next →</a>`);
  }
  return out.length ? html`<p class="more pager">${out.map((x, i) => html`${i ? ' · ' : ''}${x}`)}</p>` : '';
}

function schedulesPage(ctx, { filters: f, rows, total }) {
  const body = html`
<p class="note">Cron schedules (<code>orch_schedules</code>): at each slot a schedule enqueues a task or starts a run. Slots
fire when <code>orch_maintain</code> (pg_cron) or <code>orch_schedule_tick</code> runs. A slot is shown as PostgreSQL prints
it and, below, as the wall-clock time of the schedule's time zone. Pause, resume and unschedule call
<code>orch_pause_schedule</code>, <code>orch_resume_schedule</code> and <code>orch_unschedule</code> as this console's role.</p>
<form method="get" action="/schedules" class="filters">
${field('name contains', 'name', textInput('name', f.name, '', 14))}
${field('tenant', 'tenant', textInput('tenant', f.tenant, 'any', 10))}
${field('fires', 'kind', html`<select name="kind" id="f-kind"><option value="">anything</option><option value="queue"${f.kind === 'queue' ? html` selected` : ''}>tasks</option><option value="definition"${f.kind === 'definition' ? html` selected` : ''}>runs</option></select>`)}
${field('queue or definition', 'target', textInput('target', f.target, '', 12))}
${field('state', 'state', select('state', ['active', 'paused'], f.state))}
<button type="submit">Filter</button> <a href="/schedules">clear</a>
</form>
${totalLine(total, 'schedule')}
<div class="scroll">
<table class="grid" id="schedules">
<thead><tr><th>schedule</th><th>tenant</th><th>cron <small>time zone</small></th><th>fires</th><th>next slot</th><th>last fired slot</th>
<th>fired</th><th>skipped</th><th>overlap<br>catch-up</th><th>last error</th><th>state</th></tr></thead>
<tbody>
${rows.slice(0, PAGE).map((s) => html`<tr data-name="${s.name}" data-tenant="${s.tenant_id}"${s.paused ? html` class="paused"` : ''}>
<td><b>${s.name}</b></td><td>${s.tenant_id}</td><td data-col="cron"><code>${s.cron}</code><br><small data-col="timezone">${s.timezone}</small></td>
<td data-col="target">${scheduleTarget(s)}<details><summary>target</summary>${pre(s.target_pretty)}</details></td>
<td data-col="next_fire_at">${s.paused ? html`<span class="none">none while paused</span>` : slot(s.next_fire_at, s.next_fire_local, s.timezone)}</td>
<td data-col="last_fired_slot">${scheduleFired(s)}</td>
<td class="n" data-col="fired">${s.fired}</td><td class="n" data-col="skipped">${s.skipped}</td>
<td data-col="policies">${s.overlap}<br>${s.catch_up}${s.catch_up === 'all' ? html` <small>(${s.catch_up_window})</small>` : ''}</td>
<td data-col="last_error">${clip(s.last_error, 80)}</td>
<td data-col="state" class="act-cell">${s.paused ? stateBadge('paused') : stateBadge('active')}${ctx.readonly ? '' : html`<div class="acts">${scheduleActions(ctx, s)}</div>`}</td></tr>`)}
</tbody>
</table>
</div>
${rows.length ? '' : html`<p class="none">No schedule matches.</p>`}
${schedulePager(f, rows)}`;
  return layout(ctx, 'Schedules', body);
}

function unscheduleConfirmPage(ctx, { schedule: s }) {
  const body = html`
<div class="confirm" id="confirm">
<p class="why" id="why">Unscheduling removes schedule <b>${s.name}</b> of tenant <b>${s.tenant_id}</b>: none of its slots fires
again, and its counts and last fired slot go with it. The tasks and runs it fired stay. To stop it for a while, pause it
instead: it keeps its counts, and resumed it goes on from its first slot after then.</p>
<dl class="facts">
<dt>cron</dt><dd><code>${s.cron}</code> (${s.timezone})</dd>
<dt>fires</dt><dd>${scheduleTarget(s)}</dd>
<dt>next slot</dt><dd>${s.paused ? html`<span class="none">none while paused</span>` : slot(s.next_fire_at, s.next_fire_local, s.timezone)}</dd>
<dt>last fired slot</dt><dd>${scheduleFired(s)}</dd>
<dt>fired / skipped</dt><dd>${s.fired} / ${s.skipped}</dd>
<dt>state</dt><dd>${s.paused ? stateBadge('paused') : stateBadge('active')}</dd>
</dl>
${pre(s.target_pretty)}
${postForm(ctx, '/schedules/unschedule', html`${scheduleHidden(s)}
<label><input type="checkbox" name="confirm" value="yes" id="f-confirm" required> I mean it</label>
<button type="submit" class="act danger" id="confirm-unschedule">Unschedule it (orch_unschedule)</button>`, 'bulk-confirm')}
${s.paused ? '' : postForm(ctx, '/schedules/pause', html`${scheduleHidden(s)}<button type="submit" id="pause-instead">Pause it instead (orch_pause_schedule)</button>`)}
${ctx.readonly ? html`<p class="none">Read-only console: it takes no action.</p>` : ''}
<p><a href="/schedules">back to the schedules</a></p>
</div>`;
  return layout({ ...ctx, noRefresh: true }, `Unschedule ${s.name}?`, body);
}

// ---- errors ----------------------------------------------------------------

function errorPage(ctx, e) {
  const body = html`
<div class="refusal" id="refusal">
${e.sqlstate ? html`<p class="sqlstate">SQLSTATE <code id="sqlstate">${e.sqlstate}</code>${e.sqlstateName ? html` (${e.sqlstateName})` : ''}</p>` : ''}
<p class="message" id="message">${e.message}</p>
${e.detail ? html`<p><b>Detail:</b> ${e.detail}</p>` : ''}
${e.hint ? html`<p><b>Hint:</b> ${e.hint}</p>` : ''}
${e.call ? html`<p class="note">The call: <code>${e.call}</code>, as role <b>${(ctx.who && ctx.who.role) || '?'}</b>.</p>` : ''}
</div>
<p><a href="${e.back || '/queues'}">back</a></p>`;
  return layout({ ...ctx, noRefresh: true }, e.title || 'Refused', body);
}

module.exports = { bulkPage, sortBulk, retryConfirmPage, retryRisk, queuesPage, tasksPage, taskPage, deadLettersPage, runsPage, runPage, runFamily, approvalsPage, schedulesPage, unscheduleConfirmPage, errorPage, layout };
