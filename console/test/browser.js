'use strict';
// console/test/browser.js: the console's browser tests, run by
// scripts/test-console.sh against the fixture of console/test/fixture.sql.
// Headless Chromium (puppeteer-core) clicks through the pages; every
// expectation about data is checked against the database through the SQL
// API (views and functions), as a superuser.  Prints one line per test,
// "PASS name" or "FAIL name" (with the reason indented below), and exits
// non-zero when a test failed.
//
// Environment (set by scripts/test-console.sh):
//   CONSOLE_URL         console as console_admin
//   CONSOLE_RO_URL      console as console_admin, read-only mode
//   CONSOLE_READER_URL  console as console_reader (orch_reader only)
//   CONSOLE_ACME_URL    console as console_acme (orch_reader, bound to tenant acme)
//   CHROMIUM            the browser (default /usr/bin/chromium)
//   SHOTS               where the screenshots go (default docs/console of the repository)
//   PGHOST, PGPORT, PGUSER, PGDATABASE   the database, for the checks

const assert = require('assert/strict');
const http = require('http');
const path = require('path');
const fs = require('fs');
const puppeteer = require('puppeteer-core');
const { Client } = require('pg');

const ADMIN = process.env.CONSOLE_URL;
const RO = process.env.CONSOLE_RO_URL;
const READER = process.env.CONSOLE_READER_URL;
const ACME = process.env.CONSOLE_ACME_URL;
const SHOTS = process.env.SHOTS || path.join(__dirname, '..', '..', 'docs', 'console');

let browser;
let page;
let pg;
const dialogs = [];
const pageErrors = [];

async function sql(text, params = []) {
  return (await pg.query(text, params)).rows;
}
async function val(text, params = []) {
  const r = await sql(text, params);
  return r.length ? Object.values(r[0])[0] : undefined;
}

// goto(url): load a page; returns the HTTP status.
async function goto(url) {
  const res = await page.goto(url, { waitUntil: 'load' });
  return res.status();
}

// submit(selector): click a submit button and wait for the page it leads to.
async function submit(selector) {
  const [res] = await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click(selector)]);
  return res ? res.status() : null;
}

const text = (sel) => page.$eval(sel, (e) => e.innerText);
const texts = (sel) => page.$$eval(sel, (els) => els.map((e) => e.innerText.trim()));
const attrs = (sel, a) => page.$$eval(sel, (els, name) => els.map((e) => e.getAttribute(name)), a);

async function shot(name) {
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

// Raw HTTP, for what a browser will not send (a foreign Origin, a forged Host).
function request(base, method, p, { headers = {}, body } = {}) {
  const u = new URL(p, base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path: u.pathname + u.search, headers }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
    });
    req.on('error', reject);
    if (body) req.write(body);
    req.end();
  });
}

// session(base, p): a session cookie and the CSRF token of a page's forms.
async function session(base, p) {
  const r = await request(base, 'GET', p);
  const cookie = String(r.headers['set-cookie'] || '').split(';')[0];
  const m = /name="csrf" value="([^"]+)"/.exec(r.body);
  return { cookie, token: m ? m[1] : null };
}

const runId = (key) => val('SELECT run_id FROM orch_runs WHERE idempotency_key = $1', [key]);
const isDeadLetter = async (id) => (await val('SELECT count(*)::int FROM orch_dead_letters WHERE task_id = $1', [id])) === 1;

// ---------------------------------------------------------------------------
const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('queues-page', async () => {
  assert.equal(await goto(`${ADMIN}/queues`), 200);
  const names = await attrs('#queues tbody tr', 'data-queue');
  for (const q of ['emails', 'billing', 'reports', 'release']) assert.ok(names.includes(q), `queue ${q} listed`);
  for (const [q, tenant] of [['billing', 'default'], ['reports', 'default'], ['emails', 'default'], ['emails', 'acme'], ['release', 'default']]) {
    const s = (await sql('SELECT * FROM orch_queue_stats WHERE queue = $1 AND tenant_id = $2', [q, tenant]))[0];
    const row = `#queues tr[data-queue="${q}"][data-tenant="${tenant}"]`;
    for (const col of ['ready', 'queued', 'executing', 'dead_letters', 'completed_1h', 'failed_1h']) {
      assert.equal(await text(`${row} td[data-col="${col}"]`), String(s[col]), `${q}/${tenant} ${col}`);
    }
  }
  assert.ok(Number(await text('#queues tr[data-queue="release"] td[data-col="completed_1h"]')) > 0, 'throughput counted');
  assert.notEqual(await text('#queues tr[data-queue="reports"] td[data-col="oldest_ready_age"]'), '—', 'oldest ready age shown');
  await shot('queues');
});

test('tasks-page', async () => {
  assert.equal(await goto(`${ADMIN}/tasks`), 200);
  const shown = await attrs('#tasks tbody tr', 'data-task');
  const want = (await sql('SELECT task_id FROM orch_tasks ORDER BY task_id DESC LIMIT 100')).map((r) => r.task_id);
  assert.deepEqual(shown, want);
  await shot('tasks');
});

test('tasks-filters', async () => {
  // by URL: queue and state
  await goto(`${ADMIN}/tasks?queue=reports&state=queued`);
  let ids = await attrs('#tasks tbody tr', 'data-task');
  let want = (await sql(`SELECT task_id FROM orch_tasks WHERE queue = 'reports' AND state = 'queued' ORDER BY task_id DESC`)).map((r) => r.task_id);
  assert.ok(want.length >= 4);
  assert.deepEqual(ids, want);
  // with the form: queue + error class
  await goto(`${ADMIN}/tasks`);
  await page.select('#f-queue', 'emails');
  await page.select('#f-error_class', 'NON_RETRYABLE');
  await submit('form.filters button[type=submit]');
  ids = await attrs('#tasks tbody tr', 'data-task');
  want = (await sql(`SELECT task_id FROM orch_tasks WHERE queue = 'emails' AND last_error_class = 'NON_RETRYABLE' ORDER BY task_id DESC`)).map((r) => r.task_id);
  assert.ok(want.length >= 3);
  assert.deepEqual(ids, want);
  // tenant
  await goto(`${ADMIN}/tasks?tenant=acme`);
  ids = await attrs('#tasks tbody tr', 'data-task');
  want = (await sql(`SELECT task_id FROM orch_tasks WHERE tenant_id = 'acme' ORDER BY task_id DESC`)).map((r) => r.task_id);
  assert.equal(want.length, 3);
  assert.deepEqual(ids, want);
  // time: nothing was created in 2999, everything after 2000
  await goto(`${ADMIN}/tasks?from=${encodeURIComponent('2999-01-01 00:00')}`);
  assert.equal((await attrs('#tasks tbody tr', 'data-task')).length, 0);
  await goto(`${ADMIN}/tasks?from=2000-01-01&to=2999-01-01&queue=billing`);
  assert.equal((await attrs('#tasks tbody tr', 'data-task')).length, 3);
  // a bad time is the database's 22007, shown as such
  assert.equal(await goto(`${ADMIN}/tasks?from=yesterday-ish`), 400);
  assert.equal(await text('#sqlstate'), '22007');
});

test('task-page', async () => {
  const id = await val(`SELECT task_id FROM orch_tasks WHERE queue = 'reports' AND payload ->> 'report' = 'weekly'`);
  assert.equal(await goto(`${ADMIN}/tasks/${id}`), 200);
  const h = await sql('SELECT kind FROM orch_history($1)', [id]);
  assert.equal((await attrs('#history tr.kind-attempt', 'class')).length, h.filter((r) => r.kind === 'attempt').length);
  assert.equal((await attrs('#history tr.kind-event', 'class')).length, h.filter((r) => r.kind === 'event').length);
  assert.ok(h.some((r) => r.kind === 'attempt') && h.some((r) => r.kind === 'event'));
  const body = await text('main');
  assert.match(body, /awaiting_tool/);
  assert.match(body, /warehouse timeout/);
  assert.match(body, /"report": "weekly"/);
  await shot('task');
});

test('payloads-rendered-escaped', async () => {
  const xss = await val(`SELECT task_id FROM orch_tasks WHERE payload ->> 'to' = 'mallory@example.com'`);
  const wait1 = await runId('fx-wait1');
  for (const p of [`/tasks/${xss}`, '/dead-letters?queue=emails', `/tasks?correlation_id=${encodeURIComponent('<b>corr-xss</b>')}`, `/runs/${wait1}`, '/tasks?queue=emails']) {
    assert.equal(await goto(`${ADMIN}${p}`), 200, p);
    const dom = await page.evaluate(() => ({
      scripts: document.querySelectorAll('script').length,
      imgs: document.querySelectorAll('img').length,
      bolds: document.querySelectorAll('main b').length,
      text: document.body.innerText,
    }));
    assert.equal(dom.scripts, 0, `${p}: no script element`);
    assert.equal(dom.imgs, 0, `${p}: no img element`);
    if (p.startsWith('/tasks/')) {
      assert.ok(dom.text.includes('<script>alert(1)</script>'), `${p}: the payload shown as text`);
      assert.ok(dom.text.includes('<img src=x onerror=alert(2)>'), `${p}: the payload shown as text`);
      assert.ok(dom.text.includes('</pre><script>alert(3)</script>'), `${p}: the error shown as text`);
      assert.ok(dom.text.includes('<b>corr-xss</b>'), `${p}: the correlation id shown as text`);
    }
    if (p.startsWith('/runs/')) assert.ok(dom.text.includes('<script>alert(4)</script>'), `${p}: the run input shown as text`);
  }
  assert.equal(dialogs.length, 0, `no dialog opened (${dialogs.join(', ')})`);
});

test('dead-letters-page', async () => {
  assert.equal(await goto(`${ADMIN}/dead-letters`), 200);
  const ids = await attrs('#dead-letters tbody tr', 'data-task');
  const want = (await sql('SELECT task_id FROM orch_dead_letters ORDER BY failed_at DESC, task_id DESC')).map((r) => r.task_id);
  assert.ok(want.length >= 7);
  assert.deepEqual(ids, want);
  await shot('dead-letters');
});

test('runs-page', async () => {
  assert.equal(await goto(`${ADMIN}/runs`), 200);
  const ids = await attrs('#runs tbody tr', 'data-run');
  assert.deepEqual(ids, (await sql('SELECT run_id FROM orch_runs ORDER BY run_id DESC')).map((r) => r.run_id));
  await page.select('#f-state', 'waiting_approval');
  await submit('form.filters button[type=submit]');
  const waiting = await attrs('#runs tbody tr', 'data-run');
  assert.deepEqual(waiting, (await sql(`SELECT run_id FROM orch_runs WHERE state = 'waiting_approval' ORDER BY run_id DESC`)).map((r) => r.run_id));
  assert.equal(waiting.length, 3);
  await goto(`${ADMIN}/runs`);
  await shot('runs');
});

test('run-page-dag', async () => {
  const id = await runId('fx-wait3');
  assert.equal(await goto(`${ADMIN}/runs/${id}`), 200);
  const steps = await sql('SELECT step_id, state FROM orch_run_steps WHERE run_id = $1 ORDER BY ord', [id]);
  assert.equal(steps.length, 8);
  const nodes = await page.$$eval('svg.dag a.node', (els) => els.map((e) => [e.getAttribute('data-step'), e.getAttribute('data-state')]));
  assert.deepEqual(new Map(nodes), new Map(steps.map((s) => [s.step_id, s.state])));
  // 7 depends_on edges and design_review's on_failure edge
  assert.equal((await attrs('svg.dag path.edge-depends_on', 'd')).length, 7);
  assert.equal((await attrs('svg.dag path.edge-on_failure', 'd')).length, 1);
  assert.equal(nodes.find(([s]) => s === 'release_approval')[1], 'awaiting_approval');
  // each step: state, input, output, events, children
  const build = await text('#step-build');
  assert.match(build, /succeeded/);
  assert.match(build, /"step": "build"/);          // its output
  assert.match(build, /"input":/);                   // its task's payload
  assert.match(build, /step_succeeded/);             // its events
  const task = await val(`SELECT task_id FROM orch_tasks WHERE run_id = $1 AND step_key = 'build'`, [id]);
  assert.ok(await page.$(`#step-build a[href="/tasks/${task}"]`), 'its task is linked');
  assert.match(await text('#step-release_approval'), /approval expires/);
  await shot('run');
  // the failed run: deploy failed, build compensated
  const failed = await runId('fx-fail');
  await goto(`${ADMIN}/runs/${failed}`);
  assert.equal(await page.$eval('svg.dag a.node[data-step="deploy"]', (e) => e.getAttribute('data-state')), 'failed');
  assert.match(await text('#step-build'), /build:compensate/);
});

test('run-page-signals', async () => {
  const id = await runId('fx-signal');
  assert.equal(await goto(`${ADMIN}/runs/${id}`), 200);
  // the step that waits, and the signals as orch_signals has them
  assert.match(await text('#run-signal-waits'), /paid \(payment_received\)/);
  assert.match(await text('#step-paid'), /waits for signal\s*payment_received/);
  const rows = await page.$$eval('#run-signals tbody tr', (els) => els.map((e) => [e.getAttribute('data-signal'), e.textContent]));
  const want = await sql('SELECT signal_id, name, consumed_at FROM orch_signals WHERE run_id = $1 ORDER BY signal_id', [id]);
  assert.deepEqual(rows.map(([sid]) => sid), want.map((w) => String(w.signal_id)));
  assert.equal(want.length, 1);
  assert.match(rows[0][1], /refund_requested/);
  assert.match(rows[0][1], /pending/);
  // a run without signals says so
  await goto(`${ADMIN}/runs/${await runId('fx-ok')}`);
  assert.match(await text('body'), /No signal\./);
});

test('approvals-page', async () => {
  assert.equal(await goto(`${ADMIN}/approvals`), 200);
  const rows = await page.$$eval('#approvals tbody tr', (els) => els.map((e) => ({
    run: e.getAttribute('data-run'), step: e.getAttribute('data-step'),
    expires: e.querySelector('td.expires time') ? e.querySelector('td.expires time').getAttribute('title') : null,
    deadline: e.querySelector('td.deadline time') ? e.querySelector('td.deadline time').getAttribute('title') : null,
  })));
  const want = await sql(`SELECT s.run_id, s.step_id, s.timeout_at::text AS t, r.deadline_at::text AS d
                            FROM orch_run_steps s JOIN orch_runs r ON r.run_id = s.run_id
                           WHERE s.state = 'awaiting_approval' ORDER BY s.run_id`);
  assert.equal(rows.length, 3);
  assert.deepEqual(rows.map((r) => [r.run, r.step, r.expires, r.deadline]).sort(),
    want.map((w) => [w.run_id, w.step_id, w.t, w.d]).sort());
  await shot('approvals');
});

test('approve', async () => {
  const id = await runId('fx-wait1');
  await goto(`${ADMIN}/approvals`);
  const row = `#approvals tr[data-run="${id}"][data-step="design_review"]`;
  await page.type(`${row} input[name=approval_ref]`, 'CAB-fx-1');
  await page.type(`${row} input[name=actor]`, 'carol');
  await page.type(`${row} input[name=note]`, 'looks <b>good</b>');
  assert.equal(await submit(`${row} button[value=approve]`), 200);
  assert.match(await text('.flash-ok'), /approved with reference CAB-fx-1/);
  const st = JSON.parse((await sql('SELECT orch_run_status($1)::text AS d', [id]))[0].d);
  const a = st.approvals.find((x) => x.step_id === 'design_review');
  assert.ok(a && a.approved === true && a.approval_ref === 'CAB-fx-1' && a.label === 'carol' && a.note === 'looks <b>good</b>');
  assert.equal(a.actor, 'console_admin', 'decided as the console\'s role');
  assert.equal(await val(`SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = 'design_review'`, [id]), 'succeeded');
  assert.equal(await val('SELECT state FROM orch_runs WHERE run_id = $1', [id]), 'running');
  assert.equal(await page.$(row), null, 'no longer listed');
});

test('reject', async () => {
  const id = await runId('fx-wait2');
  await goto(`${ADMIN}/runs/${id}`);
  await page.type('#step-design_review input[name=approval_ref]', 'CAB-fx-2');
  await page.type('#step-design_review input[name=note]', 'not this week');
  assert.equal(await submit('#step-design_review button[value=reject]'), 200);
  assert.match(await text('.flash-ok'), /rejected with reference CAB-fx-2/);
  const st = JSON.parse((await sql('SELECT orch_run_status($1)::text AS d', [id]))[0].d);
  assert.ok(st.approvals.some((x) => x.approval_ref === 'CAB-fx-2' && x.approved === false));
  assert.equal(await val(`SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = 'design_review'`, [id]), 'failed');
  // the rejection took design_review's on_failure edge: notify_rejected runs
  assert.equal(await val(`SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = 'notify_rejected'`, [id]), 'running');
  assert.equal(await page.$eval('svg.dag a.node[data-step="notify_rejected"]', (e) => e.getAttribute('data-state')), 'running');
});

test('refusal-page-OR009', async () => {
  // an approval reference is single-use: the database refuses, the console says so
  const id = await runId('fx-wait3');
  await goto(`${ADMIN}/approvals`);
  const row = `#approvals tr[data-run="${id}"][data-step="release_approval"]`;
  await page.type(`${row} input[name=approval_ref]`, 'CAB-fx-1');
  assert.equal(await submit(`${row} button[value=approve]`), 409);
  assert.equal(await text('#sqlstate'), 'OR009');
  assert.ok((await text('#message')).length > 0);
  assert.equal(await val(`SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = 'release_approval'`, [id]), 'awaiting_approval');
});

test('refusal-page-OR005', async () => {
  assert.equal(await goto(`${ADMIN}/tasks/987654321`), 404);
  assert.equal(await text('#sqlstate'), 'OR005');
  assert.equal(await goto(`${ADMIN}/runs/987654321`), 404);
  assert.equal(await text('#sqlstate'), 'OR005');
});

test('dead-letter-retry', async () => {
  const id = await val(`SELECT task_id FROM orch_dead_letters WHERE queue = 'emails' AND tenant_id = 'default'
                         AND payload ->> 'to' LIKE 'bounce%' ORDER BY task_id LIMIT 1`);
  await goto(`${ADMIN}/dead-letters?queue=emails`);
  assert.equal(await submit(`#dead-letters tr[data-task="${id}"] button[type=submit]`), 200);
  const fresh = await val('SELECT task_id FROM orch_tasks WHERE retry_of = $1', [id]);
  assert.ok(fresh, 're-driven task exists');
  assert.match(await text('.flash-ok'), new RegExp(`#${id} re-driven as task #${fresh}`));
  assert.equal(await isDeadLetter(id), false);
  assert.equal(await val('SELECT state FROM orch_tasks WHERE task_id = $1', [fresh]), 'queued');
  assert.equal(await page.$(`#dead-letters tr[data-task="${id}"]`), null, 'no longer listed');
});

test('dead-letters-bulk-needs-confirmation', async () => {
  const before = await val(`SELECT count(*)::int FROM orch_dead_letters WHERE queue = 'billing'`);
  await goto(`${ADMIN}/dead-letters`);
  await page.select('#f-bulk-queue', 'billing');
  assert.equal(await submit('#bulk-reprocess'), 400);
  assert.equal(await val(`SELECT count(*)::int FROM orch_dead_letters WHERE queue = 'billing'`), before);
});

test('dead-letters-bulk-reprocess', async () => {
  const ids = (await sql(`SELECT task_id FROM orch_dead_letters WHERE queue = 'billing' ORDER BY task_id`)).map((r) => r.task_id);
  assert.equal(ids.length, 3);
  await goto(`${ADMIN}/dead-letters`);
  await page.select('#f-bulk-queue', 'billing');
  await page.select('#f-bulk-reason', 'compensation_required');
  await page.click('#f-bulk-confirm');
  assert.equal(await submit('#bulk-reprocess'), 200);
  assert.match(await text('.flash-ok'), /re-drove 3 dead letters/);
  assert.equal(await val(`SELECT count(*)::int FROM orch_dead_letters WHERE queue = 'billing'`), 0);
  const redriven = (await sql('SELECT retry_of FROM orch_tasks WHERE retry_of = ANY($1::bigint[]) ORDER BY retry_of', [ids])).map((r) => r.retry_of);
  assert.deepEqual(redriven, ids);
});

test('csrf-token-required', async () => {
  const id = await val(`SELECT task_id FROM orch_dead_letters WHERE queue = 'emails' AND tenant_id = 'default' ORDER BY task_id LIMIT 1`);
  // a form posted from the console's own page (same origin, the session
  // cookie sent), without the token, then with a wrong one
  const post = async (fields) => {
    await goto(`${ADMIN}/dead-letters`);
    const [res] = await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.evaluate((tid, f) => {
      const form = document.createElement('form');
      form.method = 'post';
      form.action = `/dead-letters/${tid}/retry`;
      for (const [k, v] of Object.entries(f)) {
        const i = document.createElement('input');
        i.type = 'hidden';
        i.name = k;
        i.value = v;
        form.appendChild(i);
      }
      document.body.appendChild(form);
      form.submit();
    }, id, fields)]);
    return res.status();
  };
  const statuses = [await post({ back: '/dead-letters' }), await post({ csrf: 'AAAA', back: '/dead-letters' })];
  assert.match(await text('#message'), /CSRF token/);
  assert.deepEqual(statuses, [403, 403]);
  assert.equal(await isDeadLetter(id), true, 'nothing changed');
  assert.equal(await val('SELECT count(*)::int FROM orch_tasks WHERE retry_of = $1', [id]), 0);
});

test('csrf-origin-checked', async () => {
  const id = await val(`SELECT task_id FROM orch_dead_letters WHERE queue = 'emails' AND tenant_id = 'default' ORDER BY task_id LIMIT 1`);
  const { cookie, token } = await session(ADMIN, '/dead-letters');
  assert.ok(cookie && token);
  const host = new URL(ADMIN).host;
  const body = `csrf=${encodeURIComponent(token)}`;
  const headers = (origin) => ({ Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Host: host, ...(origin ? { Origin: origin } : {}) });
  // a valid token from another origin, or with no origin at all: refused
  assert.equal((await request(ADMIN, 'POST', `/dead-letters/${id}/retry`, { headers: headers('http://evil.example'), body })).status, 403);
  assert.equal((await request(ADMIN, 'POST', `/dead-letters/${id}/retry`, { headers: headers(null), body })).status, 403);
  assert.equal(await isDeadLetter(id), true, 'nothing changed');
  // the same token from the console's origin passes (a harmless action)
  assert.equal((await request(ADMIN, 'POST', '/metrics/refresh', { headers: headers(`http://${host}`), body })).status, 303);
});

test('host-header-checked', async () => {
  const r = await request(ADMIN, 'GET', '/queues', { headers: { Host: `evil.example:${new URL(ADMIN).port}` } });
  assert.equal(r.status, 421);
  assert.doesNotMatch(r.body, /emails/);
});

test('security-headers', async () => {
  const r = await request(ADMIN, 'GET', '/queues');
  assert.equal(r.status, 200);
  assert.match(r.headers['content-security-policy'], /default-src 'none'/);
  assert.match(r.headers['content-security-policy'], /frame-ancestors 'none'/);
  assert.equal(r.headers['x-frame-options'], 'DENY');
  assert.match(String(r.headers['set-cookie']), /HttpOnly/);
  assert.match(String(r.headers['set-cookie']), /SameSite=Strict/);
});

test('read-only-mode', async () => {
  const run = await runId('fx-wait3');
  const dl = await val(`SELECT task_id FROM orch_dead_letters ORDER BY task_id LIMIT 1`);
  for (const p of ['/queues', '/dead-letters', '/approvals', `/runs/${run}`, `/tasks/${dl}`]) {
    assert.equal(await goto(`${RO}${p}`), 200, p);
    assert.equal((await page.$$('form[method=post]')).length, 0, `${p}: no action form`);
    assert.equal((await page.$$('button.act')).length, 0, `${p}: no action button`);
  }
  assert.match(await text('header .ro'), /read-only/);
  const host = new URL(RO).host;
  const { cookie } = await session(RO, '/approvals');
  const r = await request(RO, 'POST', `/dead-letters/${dl}/retry`, {
    headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` }, body: 'csrf=x',
  });
  assert.equal(r.status, 403);
  assert.match(r.body, /read-only/);
  const r2 = await request(RO, 'POST', '/approvals/decide', {
    headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` },
    body: `run_id=${run}&step_id=release_approval&approval_ref=RO-1&decision=approve`,
  });
  assert.equal(r2.status, 403);
  assert.equal(await isDeadLetter(dl), true, 'nothing changed');
  assert.equal(await val(`SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = 'release_approval'`, [run]), 'awaiting_approval');
});

test('refusal-page-42501', async () => {
  // console_reader may read but not decide: the database refuses with 42501
  const run = await runId('fx-wait3');
  assert.equal(await goto(`${READER}/approvals`), 200);
  const row = `#approvals tr[data-run="${run}"][data-step="release_approval"]`;
  await page.type(`${row} input[name=approval_ref]`, 'READER-1');
  assert.equal(await submit(`${row} button[value=approve]`), 403);
  assert.equal(await text('#sqlstate'), '42501');
  assert.match(await text('#message'), /permission denied for function orch_approve/);
  assert.match(await text('#refusal'), /console_reader/);
  assert.equal(await val(`SELECT state FROM orch_run_steps WHERE run_id = $1 AND step_id = 'release_approval'`, [run]), 'awaiting_approval');
  // and a dead letter retry (orch_admin only)
  const dl = await val(`SELECT task_id FROM orch_dead_letters WHERE tenant_id = 'default' ORDER BY task_id LIMIT 1`);
  await goto(`${READER}/dead-letters`);
  assert.equal(await submit(`#dead-letters tr[data-task="${dl}"] button[type=submit]`), 403);
  assert.equal(await text('#sqlstate'), '42501');
  assert.equal(await isDeadLetter(dl), true, 'nothing changed');
});

test('tenant-bound-role', async () => {
  assert.equal(await goto(`${ACME}/tasks`), 200);
  const tenants = await texts('#tasks tbody tr td:nth-child(3)');
  const want = await val(`SELECT count(*)::int FROM orch_tasks WHERE tenant_id = 'acme'`);
  assert.equal(tenants.length, want);
  assert.ok(tenants.every((t) => t === 'acme'));
  await goto(`${ACME}/queues`);
  assert.deepEqual([...new Set(await attrs('#queues tbody tr', 'data-tenant'))], ['acme']);
  await goto(`${ACME}/dead-letters`);
  assert.ok((await texts('#dead-letters tbody tr td:nth-child(3)')).every((t) => t === 'acme'));
  // another tenant's task does not exist for this role
  const other = await val(`SELECT task_id FROM orch_tasks WHERE tenant_id = 'default' LIMIT 1`);
  assert.equal(await goto(`${ACME}/tasks/${other}`), 404);
  assert.equal(await text('#sqlstate'), 'OR005');
});

// ---------------------------------------------------------------------------
async function main() {
  for (const [k, v] of Object.entries({ CONSOLE_URL: ADMIN, CONSOLE_RO_URL: RO, CONSOLE_READER_URL: READER, CONSOLE_ACME_URL: ACME })) {
    if (!v) { console.log(`FAIL setup (${k} is not set)`); process.exit(1); }
  }
  pg = new Client();
  await pg.connect();
  browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--hide-scrollbars', '--font-render-hinting=none'],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  let failed = 0;
  for (const t of tests) {
    try {
      await t.fn();
      console.log(`PASS ${t.name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${t.name}`);
      console.log(String(e && e.stack ? e.stack : e).split('\n').slice(0, 8).map((l) => `    | ${l}`).join('\n'));
    }
  }
  if (dialogs.length || pageErrors.length) {
    failed++;
    console.log('FAIL no-script-ran');
    console.log(`    | dialogs: ${JSON.stringify(dialogs)}; page errors: ${JSON.stringify(pageErrors)}`);
  } else {
    console.log('PASS no-script-ran');
  }
  await browser.close();
  await pg.end();
  process.exit(failed ? 1 : 0);
}

main().catch(async (e) => {
  console.log('FAIL setup (browser tests)');
  console.log(String(e.stack || e).split('\n').map((l) => `    | ${l}`).join('\n'));
  try { if (browser) await browser.close(); } catch { /* ignore */ }
  process.exit(1);
});
