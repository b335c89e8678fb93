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
  const tenants = await texts('#tasks tbody tr td:nth-child(4)');   // after the checkbox, task and queue
  const want = await val(`SELECT count(*)::int FROM orch_tasks WHERE tenant_id = 'acme'`);
  assert.equal(tenants.length, want);
  assert.ok(tenants.every((t) => t === 'acme'));
  await goto(`${ACME}/queues`);
  assert.deepEqual([...new Set(await attrs('#queues tbody tr', 'data-tenant'))], ['acme']);
  await goto(`${ACME}/dead-letters`);
  assert.ok((await texts('#dead-letters tbody tr td:nth-child(4)')).every((t) => t === 'acme'));
  // another tenant's task does not exist for this role
  const other = await val(`SELECT task_id FROM orch_tasks WHERE tenant_id = 'default' LIMIT 1`);
  assert.equal(await goto(`${ACME}/tasks/${other}`), 404);
  assert.equal(await text('#sqlstate'), 'OR005');
});

// ---- a live console ---------------------------------------------------------

test('auto-refresh', async () => {
  await goto(`${ADMIN}/queues`);
  assert.equal(await page.$('meta[http-equiv="refresh"]'), null, 'off by default');
  assert.match(await text('#refresh a.current'), /off/);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#refresh a[data-every="5"]')]);
  assert.equal(new URL(page.url()).pathname, '/queues', 'back on the same page');
  assert.equal(await page.$eval('meta[http-equiv="refresh"]', (e) => e.getAttribute('content')), '5');
  assert.match(await text('#refresh'), /every 5 s/);
  // the page reloads by itself
  const t0 = Date.now();
  await page.waitForNavigation({ waitUntil: 'load', timeout: 20000 });
  assert.ok(Date.now() - t0 >= 3000, 'not at once: after the interval');
  // it holds on other pages, not on a confirmation
  await goto(`${ADMIN}/tasks`);
  assert.ok(await page.$('meta[http-equiv="refresh"]'));
  await goto(`${ADMIN}/bulk?scope=tasks&action=cancel&matching=1&queue=bulkq`);
  assert.equal(await page.$('meta[http-equiv="refresh"]'), null, 'a confirmation page does not reload');
  await goto(`${ADMIN}/queues`);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#refresh a[data-every="0"]')]);
  assert.equal(await page.$('meta[http-equiv="refresh"]'), null, 'switched off');
});

test('queue-counts-link-to-tasks', async () => {
  await goto(`${ADMIN}/queues`);
  const stats = (await sql(`SELECT * FROM orch_queue_stats WHERE queue = 'reports' AND tenant_id = 'default'`))[0];
  const row = '#queues tr[data-queue="reports"][data-tenant="default"]';
  for (const [col, state] of [['queued', 'queued'], ['ready', 'ready'], ['delayed', 'delayed'], ['retry_waiting', 'retry_waiting'],
    ['executing', 'executing'], ['awaiting_tool', 'awaiting_tool'], ['awaiting_user_confirmation', 'awaiting_user_confirmation']]) {
    assert.ok(Number(stats[col]) > 0, `fixture has ${col}`);
    const href = await page.$eval(`${row} td[data-col="${col}"] a`, (a) => a.getAttribute('href'));
    const u = new URL(href, ADMIN);
    assert.equal(u.searchParams.get('state'), state);
    assert.equal(u.searchParams.get('queue'), 'reports');
    await goto(`${ADMIN}${href}`);
    assert.equal((await attrs('#tasks tbody tr', 'data-task')).length, Number(stats[col]), `${col}: the list has what the count says`);
    assert.equal(await page.$eval('#total', (e) => e.getAttribute('data-total')), String(stats[col]), `${col}: total`);
    await goto(`${ADMIN}/queues`);
  }
});

test('throughput-sparklines', async () => {
  await sql(`SELECT orch_create_queue('sparkq', '{}')`);
  const spark = '#queues tr[data-queue="sparkq"][data-tenant="default"] svg.spark';
  const sums = async () => {
    await goto(`${ADMIN}/queues`);
    return page.$eval(spark, (e) => ({ enq: Number(e.dataset.enqueued), done: Number(e.dataset.completed), failed: Number(e.dataset.failed) }));
  };
  await sql('SELECT orch_metrics_refresh()');
  const before = await sums();
  // enqueue 4, complete 3, fail 1 (NON_RETRYABLE)
  for (let i = 0; i < 4; i++) {
    await sql(`SELECT orch_enqueue('sparkq', jsonb_build_object('n', $1::int))`, [i]);
    const t = (await sql(`SELECT task_id, lease_token FROM orch_dequeue('sparkq', 'spark')`))[0];
    if (i < 3) await sql('SELECT orch_complete($1, $2)', [t.task_id, t.lease_token]);
    else await sql(`SELECT * FROM orch_fail($1, $2, 'NON_RETRYABLE', 'spark failure')`, [t.task_id, t.lease_token]);
  }
  await sql('SELECT orch_metrics_refresh()');
  const after = await sums();
  assert.deepEqual({ enq: after.enq - before.enq, done: after.done - before.done, failed: after.failed - before.failed },
    { enq: 4, done: 3, failed: 1 });
  assert.equal((await page.$$('#queues svg.spark')).length, (await attrs('#queues tbody tr', 'data-queue')).length, 'one per row');
  // the series is the extension's (orch_throughput), whole from the first
  // page: a queue whose tasks were folded before the console ever showed it
  await sql(`SELECT orch_create_queue('sparkq2', '{}')`);
  await sql(`SELECT orch_enqueue_batch('sparkq2', ARRAY['{}', '{}']::jsonb[])`);
  await sql('SELECT orch_metrics_refresh()');
  await goto(`${ADMIN}/queues`);
  assert.equal(await page.$eval('#queues tr[data-queue="sparkq2"][data-tenant="default"] svg.spark',
    (e) => Number(e.dataset.enqueued)), 2, 'the minutes folded before the first look are drawn');
  assert.equal((await page.$$(`${spark} polyline`)).length, 3);
  await shot('queues');
});

test('queue-pause-resume', async () => {
  await goto(`${ADMIN}/queues`);
  assert.equal(await val(`SELECT paused FROM orch_queues WHERE queue = 'reports'`), false);
  assert.equal(await submit('button[data-pause="reports"]'), 200);
  assert.match(await text('.flash-ok'), /Queue reports paused/);
  assert.equal(await val(`SELECT paused FROM orch_queues WHERE queue = 'reports'`), true);
  assert.match(await text('#queues tr[data-queue="reports"] td:first-child'), /paused/);
  assert.equal(await submit('button[data-resume="reports"]'), 200);
  assert.equal(await val(`SELECT paused FROM orch_queues WHERE queue = 'reports'`), false);
  // a reader may not: the database says so
  await goto(`${READER}/queues`);
  assert.equal(await submit('button[data-pause="reports"]'), 403);
  assert.equal(await text('#sqlstate'), '42501');
  assert.equal(await val(`SELECT paused FROM orch_queues WHERE queue = 'reports'`), false);
});

// ---- navigation ------------------------------------------------------------

test('derived-states', async () => {
  const weekly = await val(`SELECT task_id FROM orch_tasks WHERE queue = 'reports' AND payload ->> 'report' = 'weekly'`);
  const geo = await val(`SELECT task_id FROM orch_tasks WHERE queue = 'reports' AND payload ->> 'report' = 'geo'`);
  // the filter offers the derived states with their raw state
  await goto(`${ADMIN}/tasks`);
  const opts = await page.$$eval('#f-state optgroup[label^="derived"] option', (els) => els.map((e) => [e.value, e.textContent]));
  assert.deepEqual(opts.map((o) => o[0]).sort(), ['delayed', 'gated', 'ready', 'retry_waiting', 'tool_waiting']);
  assert.ok(opts.some(([v, t]) => v === 'retry_waiting' && /retry waiting \(awaiting_tool\)/.test(t)));
  await page.select('#f-queue', 'reports');
  await page.select('#f-state', 'retry_waiting');
  await submit('form.filters button[type=submit]');
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), [weekly]);
  // a task waiting to retry reads as such, its raw state beside
  assert.equal(await text(`#tasks tr[data-task="${weekly}"] td.st [data-derived]`), 'retry waiting');
  assert.equal(await text(`#tasks tr[data-task="${weekly}"] td.st small.raw`), 'awaiting_tool');
  // a task waiting for a tool is not a retry wait
  await goto(`${ADMIN}/tasks?queue=reports&state=tool_waiting`);
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), [geo]);
  await goto(`${ADMIN}/tasks?queue=reports&state=delayed`);
  const delayed = (await sql(`SELECT task_id FROM orch_tasks WHERE queue = 'reports' AND state = 'queued' AND run_at > now() ORDER BY task_id DESC`)).map((r) => r.task_id);
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), delayed);
  assert.equal(await text(`#tasks tr[data-task="${delayed[0]}"] td.st small.raw`), 'queued');
  // and on the task's own page
  await goto(`${ADMIN}/tasks/${weekly}`);
  assert.match(await text('#task-state'), /retry waiting\s+awaiting_tool/);
});

test('total-paging-both-ways', async () => {
  const all = (await sql(`SELECT task_id FROM orch_tasks WHERE queue = 'bulkq' ORDER BY task_id DESC`)).map((r) => r.task_id);
  assert.equal(all.length, 130);
  await goto(`${ADMIN}/tasks?queue=bulkq`);
  assert.equal(await page.$eval('#total', (e) => e.getAttribute('data-total')), '130');
  assert.match(await text('#total'), /130 tasks match/);
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), all.slice(0, 100));
  assert.equal(await page.$('#newer'), null, 'the first page has nothing newer');
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#older')]);
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), all.slice(100));
  assert.equal(await page.$('#older'), null, 'the last page has nothing older');
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#newer')]);
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), all.slice(0, 100), 'newer leads back to the first page');
  assert.equal(await page.$('#newer'), null);
  // unfiltered too
  await goto(`${ADMIN}/tasks`);
  const total = await val('SELECT count(*)::int FROM orch_tasks');
  assert.equal(await page.$eval('#total', (e) => e.getAttribute('data-total')), String(total));
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#older')]);
  assert.ok(await page.$('#newer'));
});

test('jump-to-task-and-payload-search', async () => {
  const id = await val(`SELECT task_id FROM orch_tasks WHERE queue = 'bulkq' AND payload ->> 'n' = '7'`);
  await goto(`${ADMIN}/tasks`);
  await page.type('#f-jump', String(id));
  assert.equal(await submit('#jump button'), 200);
  assert.equal(new URL(page.url()).pathname, `/tasks/${id}`);
  assert.equal(await goto(`${ADMIN}/tasks/go?id=abc`), 400);
  // payload containment
  await goto(`${ADMIN}/tasks`);
  await page.type('#f-payload', '{"n": 7}');
  await submit('form.filters button[type=submit]');
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), [id]);
  await goto(`${ADMIN}/tasks?payload=${encodeURIComponent('{"grp": "a"}')}`);
  const want = (await sql(`SELECT task_id FROM orch_tasks WHERE payload @> '{"grp": "a"}' ORDER BY task_id DESC`)).map((r) => r.task_id);
  assert.equal(want.length, 13);
  assert.deepEqual(await attrs('#tasks tbody tr', 'data-task'), want);
  // not JSON: the database's 22P02
  assert.equal(await goto(`${ADMIN}/tasks?payload=${encodeURIComponent('{n: 7')}`), 400);
  assert.equal(await text('#sqlstate'), '22P02');
});

// ---- bulk actions ----------------------------------------------------------

const hasBulkFns = async () => val(`SELECT to_regprocedure('orch_cancel_where(jsonb,text,integer)') IS NOT NULL`);
// withoutBulkFns(fn): run fn as against an extension without
// orch_cancel_where / orch_retry_where (renamed for the while), so that the
// console falls back to one call per task.
async function withoutBulkFns(fn) {
  if (!(await hasBulkFns())) return fn();
  await sql('ALTER FUNCTION orch_cancel_where(jsonb, text, integer) RENAME TO orch_cancel_where_hidden');
  await sql('ALTER FUNCTION orch_retry_where(jsonb, integer) RENAME TO orch_retry_where_hidden');
  try {
    return await fn();
  } finally {
    await sql('ALTER FUNCTION orch_cancel_where_hidden(jsonb, text, integer) RENAME TO orch_cancel_where');
    await sql('ALTER FUNCTION orch_retry_where_hidden(jsonb, integer) RENAME TO orch_retry_where');
  }
}

test('bulk-cancel-selected', async () => {
  const ids = (await sql(`SELECT task_id FROM orch_tasks WHERE queue = 'bulkq' AND payload ->> 'grp' = 'b' ORDER BY task_id DESC LIMIT 2`)).map((r) => r.task_id);
  await goto(`${ADMIN}/tasks?queue=bulkq`);
  for (const id of ids) await page.click(`#tasks tr[data-task="${id}"] input[type=checkbox]`);
  assert.equal(await submit('#bulk-cancel-selected'), 200);
  assert.equal(new URL(page.url()).pathname, '/bulk');
  assert.equal(await page.$eval('#preview', (e) => e.getAttribute('data-count')), '2');
  // nothing happens before the confirmation
  assert.equal(await val(`SELECT count(*)::int FROM orch_tasks WHERE task_id = ANY($1::bigint[]) AND state = 'cancelled'`, [ids]), 0);
  await page.type('#f-reason', 'duplicate import');
  await page.click('#f-confirm');
  await shot('bulk');
  // one orch_cancel per task when the extension has no orch_cancel_where
  await withoutBulkFns(async () => {
    assert.equal(await submit('#confirm-bulk'), 200);
    assert.match(await text('.flash-ok'), /Cancelled 2 tasks \(2 orch_cancel calls\)/);
  });
  assert.deepEqual((await sql('SELECT state FROM orch_tasks WHERE task_id = ANY($1::bigint[])', [ids])).map((r) => r.state), ['cancelled', 'cancelled']);
  const note = await val(`SELECT note FROM orch_events WHERE task_id = $1 AND to_state = 'cancelled'`, [ids[0]]);
  assert.match(String(note), /duplicate import/);
});

test('bulk-cancel-matching', async () => {
  const f = '{"grp": "a"}';
  const want = (await sql(`SELECT task_id FROM orch_tasks WHERE queue = 'bulkq' AND payload @> $1::jsonb AND state = 'queued' ORDER BY task_id`, [f])).map((r) => r.task_id);
  assert.equal(want.length, 13);
  await goto(`${ADMIN}/tasks?queue=bulkq&payload=${encodeURIComponent(f)}`);
  assert.match(await text('#bulk-cancel-matching'), /Cancel all 13 matching/);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#bulk-cancel-matching')]);
  assert.equal(await page.$eval('#preview', (e) => e.getAttribute('data-total')), '13');
  assert.match(await text('#preview'), /matches 13 tasks/);
  // without "I mean it" the browser does not send the form; the server refuses it too
  const { cookie, token } = await session(ADMIN, page.url().replace(ADMIN, ''));
  const host = new URL(ADMIN).host;
  const r = await request(ADMIN, 'POST', '/bulk', { headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` },
    body: `csrf=${encodeURIComponent(token)}&scope=tasks&action=cancel&matching=1&f_queue=bulkq&f_payload=${encodeURIComponent(f)}` });
  assert.equal(r.status, 400);
  assert.equal(await val(`SELECT count(*)::int FROM orch_tasks WHERE task_id = ANY($1::bigint[]) AND state = 'cancelled'`, [want]), 0);
  await page.click('#f-confirm');
  assert.equal(await submit('#confirm-bulk'), 200);
  assert.equal(await hasBulkFns(), true, 'this extension has the bulk functions');
  assert.match(await text('.flash-ok'), /Cancelled 13 tasks \(orch_cancel_where\)/);
  assert.equal(await val(`SELECT count(*)::int FROM orch_tasks WHERE task_id = ANY($1::bigint[]) AND state = 'cancelled'`, [want]), 13);
  assert.equal(await val(`SELECT count(*)::int FROM orch_tasks WHERE queue = 'bulkq' AND state = 'queued'`), 130 - 2 - 13);
});

test('bulk-retry-dead-letters', async () => {
  const ids = (await sql(`SELECT task_id FROM orch_dead_letters WHERE queue = 'imports' ORDER BY task_id`)).map((r) => r.task_id);
  assert.equal(ids.length, 4);
  // two ticked
  await goto(`${ADMIN}/dead-letters?queue=imports`);
  assert.match(await text('#total'), /4 dead letters match/);
  for (const id of ids.slice(0, 2)) await page.click(`#dead-letters tr[data-task="${id}"] input[type=checkbox]`);
  assert.equal(await submit('#bulk-retry-selected'), 200);
  assert.equal(await page.$eval('#preview', (e) => e.getAttribute('data-count')), '2');
  await page.click('#f-confirm');
  await withoutBulkFns(async () => {
    assert.equal(await submit('#confirm-bulk'), 200);
    assert.match(await text('.flash-ok'), /Re-drove 2 tasks \(2 orch_retry calls\)/);
  });
  assert.deepEqual((await sql('SELECT retry_of FROM orch_tasks WHERE retry_of = ANY($1::bigint[]) ORDER BY retry_of', [ids])).map((r) => r.retry_of), ids.slice(0, 2));
  // the rest, by filter
  await goto(`${ADMIN}/dead-letters?queue=imports`);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#bulk-retry-matching')]);
  assert.equal(await page.$eval('#preview', (e) => e.getAttribute('data-count')), '2');
  await page.click('#f-confirm');
  assert.equal(await submit('#confirm-bulk'), 200);
  assert.match(await text('.flash-ok'), /Re-drove 2 tasks \(orch_retry_where\)/);
  assert.equal(await val(`SELECT count(*)::int FROM orch_dead_letters WHERE queue = 'imports'`), 0);
  assert.equal(await val('SELECT count(*)::int FROM orch_tasks WHERE retry_of = ANY($1::bigint[])', [ids]), 4);
});

// ---- safer re-drive --------------------------------------------------------

test('redrive-not-safe-to-retry-asks', async () => {
  const id = await val(`SELECT task_id FROM orch_dead_letters WHERE queue = 'payments'`);
  assert.equal(await val('SELECT reason FROM orch_dead_letters WHERE task_id = $1', [id]), 'not_safe_to_retry');
  await goto(`${ADMIN}/dead-letters?queue=payments`);
  // no one-click retry: a link to the confirmation
  assert.equal(await page.$(`#dead-letters tr[data-task="${id}"] button[type=submit]`), null);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click(`#dead-letters tr[data-task="${id}"] a[data-confirm-retry]`)]);
  assert.match(await text('#why'), /not safe to retry/);
  assert.match(await text('#why'), /may have had its effect already/);
  // a POST without the confirmation is sent to the question, and does nothing
  const { cookie, token } = await session(ADMIN, `/dead-letters/${id}/retry`);
  const host = new URL(ADMIN).host;
  const r = await request(ADMIN, 'POST', `/dead-letters/${id}/retry`, { headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` },
    body: `csrf=${encodeURIComponent(token)}` });
  assert.equal(r.status, 303);
  assert.equal(r.headers.location, `/dead-letters/${id}/retry`);
  assert.equal(await isDeadLetter(id), true);
  // in bulk it is held back unless ticked
  await goto(`${ADMIN}/bulk?scope=dead-letters&action=retry&matching=1&queue=payments`);
  assert.equal(await page.$eval('#preview', (e) => e.getAttribute('data-count')), '0');
  assert.match(await text('#unsafe'), /not safe to retry/);
  // confirmed: re-driven
  await goto(`${ADMIN}/dead-letters/${id}/retry`);
  assert.equal(await submit('#confirm-retry'), 200);
  assert.match(await text('.flash-ok'), new RegExp(`#${id} re-driven`));
  assert.equal(await isDeadLetter(id), false);
});

test('redrive-workflow-step-points-to-run', async () => {
  const run = await runId('fx-fail');
  const id = await val(`SELECT d.task_id FROM orch_dead_letters d JOIN orch_tasks t USING (task_id) WHERE t.run_id = $1`, [run]);
  assert.ok(id, 'the failed deploy is a dead letter');
  await goto(`${ADMIN}/tasks/${id}`);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('a[data-confirm-retry]')]);
  assert.match(await text('#why'), new RegExp(`step deploy of run ${run}`));
  assert.match(await text('#why'), /retry the run \(orch_retry_run\)/);
  assert.equal(await page.$eval('#to-run', (a) => a.getAttribute('href')), `/runs/${run}`);
  await shot('redrive-confirm');
  // in bulk a step's dead letter is left alone, with its run linked
  await goto(`${ADMIN}/bulk?scope=dead-letters&action=retry&matching=1&queue=release`);
  assert.equal(await page.$eval('#preview', (e) => e.getAttribute('data-count')), '0');
  assert.ok(await page.$(`#steps a[href="/runs/${run}"]`));
  assert.equal(await isDeadLetter(id), true);
  // the run's retry is where it leads
  await goto(`${ADMIN}/runs/${run}`);
  assert.ok(await page.$(`form[action="/runs/${run}/retry"]`));
});

// ---- the graph ---------------------------------------------------------------

test('dag-long-edge-ends-in-its-box', async () => {
  const id = await runId('fx-diamond');
  assert.equal(await goto(`${ADMIN}/runs/${id}`), 200);
  const check = await page.evaluate(() => {
    const boxes = {};
    for (const a of document.querySelectorAll('svg.dag a.node')) {
      const r = a.querySelector('rect');
      boxes[a.getAttribute('data-step')] = { x: +r.getAttribute('x'), y: +r.getAttribute('y'), w: +r.getAttribute('width'), h: +r.getAttribute('height') };
    }
    const inside = (b, p, m = 1) => p.x > b.x + m && p.x < b.x + b.w - m && p.y > b.y + m && p.y < b.y + b.h - m;
    const out = [];
    for (const path of document.querySelectorAll('svg.dag path.edge')) {
      const from = path.getAttribute('data-from');
      const to = path.getAttribute('data-to');
      const len = path.getTotalLength();
      const end = path.getPointAtLength(len);
      const t = boxes[to];
      const crossed = new Set();
      for (let i = 1; i < 200; i++) {
        const p = path.getPointAtLength((len * i) / 200);
        for (const [k, b] of Object.entries(boxes)) if (k !== from && k !== to && inside(b, p)) crossed.add(k);
      }
      out.push({ from, to, endsAtTarget: Math.abs(end.x - t.x) <= 3 && end.y > t.y && end.y < t.y + t.h, crossed: [...crossed] });
    }
    return out;
  });
  assert.equal(check.length, 5);
  const long = check.find((e) => e.from === 'right' && e.to === 'join');
  assert.ok(long, 'the long edge is drawn');
  for (const e of check) {
    assert.ok(e.endsAtTarget, `${e.from} → ${e.to} ends at the left side of ${e.to}`);
    assert.deepEqual(e.crossed, [], `${e.from} → ${e.to} passes through no other box`);
  }
  // the release run's graph too
  await goto(`${ADMIN}/runs/${await runId('fx-wait3')}`);
  assert.ok((await page.$$('svg.dag path.edge')).length >= 8);
});

// ---- schedules ---------------------------------------------------------------

const scheduleRow = (name, tenant = 'default') => `#schedules tr[data-name="${name}"][data-tenant="${tenant}"]`;
const scheduleOf = async (name, tenant = 'default') => (await sql(`SELECT *, next_fire_at::text AS next_t, last_fired_slot::text AS last_t
                                                                     FROM orch_schedules WHERE name = $1 AND tenant_id = $2`, [name, tenant]))[0];

test('schedules-page', async () => {
  assert.equal(await goto(`${ADMIN}/schedules`), 200);
  assert.equal(await page.$eval('header nav a[href="/schedules"]', (a) => a.className), 'current');
  const want = await sql(`SELECT name, tenant_id, cron, timezone, paused, fired::int, skipped::int, next_fire_at::text AS next_t,
                                 last_fired_slot::text AS last_t, last_task_id, last_run_id,
                                 coalesce(target ->> 'queue', target ->> 'definition') AS target
                            FROM orch_schedules ORDER BY name, tenant_id`);
  assert.ok(want.length >= 4, 'the fixture has schedules');
  const shown = await page.$$eval('#schedules tbody tr', (els) => els.map((e) => [e.getAttribute('data-name'), e.getAttribute('data-tenant')]));
  assert.deepEqual(shown, want.map((w) => [w.name, w.tenant_id]));
  assert.equal(await page.$eval('#total', (e) => e.getAttribute('data-total')), String(want.length));
  for (const w of want) {
    const row = scheduleRow(w.name, w.tenant_id);
    const cell = (col) => text(`${row} td[data-col="${col}"]`);
    assert.match(await cell('cron'), new RegExp(`^${w.cron.replace(/[*]/g, '\\*')}\\s+${w.timezone}$`), `${w.name}: cron and time zone`);
    assert.equal(await cell('fired'), String(w.fired), `${w.name}: fired`);
    assert.equal(await cell('skipped'), String(w.skipped), `${w.name}: skipped`);
    assert.match(await cell('state'), new RegExp(`^${w.paused ? 'paused' : 'active'}`), `${w.name}: state`);
    assert.equal(await page.$eval(`${row} td[data-col="target"] a[data-target]`, (a) => a.textContent), w.target, `${w.name}: target`);
    if (w.paused) assert.match(await cell('next_fire_at'), /none while paused/);
    else assert.equal(await page.$eval(`${row} td[data-col="next_fire_at"] time`, (t) => t.getAttribute('title')), w.next_t, `${w.name}: next slot`);
  }
  // what fired: the slot and the task it made, which carries the slot
  const nightly = want.find((w) => w.name === 'nightly-report');
  assert.equal(nightly.fired, 1);
  assert.equal(await page.$eval(`${scheduleRow('nightly-report')} td[data-col="last_fired_slot"] time`, (t) => t.getAttribute('title')), nightly.last_t);
  assert.equal(await page.$eval(`${scheduleRow('nightly-report')} td[data-col="last_fired_slot"] a`, (a) => a.getAttribute('href')), `/tasks/${nightly.last_task_id}`);
  assert.ok(await val(`SELECT payload ? 'scheduled_for' FROM orch_tasks WHERE task_id = $1`, [nightly.last_task_id]));
  // the wall clock of the schedule's zone
  assert.match(await text(`${scheduleRow('nightly-report')} td[data-col="next_fire_at"] small.local`), / 02:30 Europe\/Berlin$/);
  // a target of a run links to the definition's runs
  assert.equal(await page.$eval(`${scheduleRow('release-train')} a[data-target="definition"]`, (a) => a.getAttribute('href')), '/runs?definition=release&tenant=default');
  // the target's payload, markup included, is text
  const dom = await page.evaluate(() => ({ scripts: document.querySelectorAll('script').length, text: document.querySelector('#schedules').textContent }));
  assert.equal(dom.scripts, 0);
  assert.ok(dom.text.includes('"note": "<script>alert(5)</script>"'), 'the payload shown as text');
  await shot('schedules');
});

test('schedules-filters-and-paging', async () => {
  await goto(`${ADMIN}/schedules?state=paused`);
  assert.deepEqual(await attrs('#schedules tbody tr', 'data-name'), (await sql('SELECT name FROM orch_schedules WHERE paused ORDER BY name')).map((r) => r.name));
  await goto(`${ADMIN}/schedules?kind=definition`);
  assert.deepEqual(await attrs('#schedules tbody tr', 'data-name'), ['release-train']);
  await goto(`${ADMIN}/schedules`);
  await page.type('#f-target', 'digests');
  await page.select('#f-state', 'active');
  await submit('form.filters button[type=submit]');
  assert.deepEqual(await attrs('#schedules tbody tr', 'data-name'),
    (await sql(`SELECT name FROM orch_schedules WHERE target ->> 'queue' = 'digests' AND NOT paused ORDER BY name, tenant_id`)).map((r) => r.name));
  assert.equal(await goto(`${ADMIN}/schedules?kind=bogus`), 400);
  // 130 more, a page of 100 and the rest
  await sql(`SELECT orch_schedule('page-' || lpad(i::text, 3, '0'), '0 0 1 1 *', '{"queue": "digests", "payload": {}}')
               FROM generate_series(1, 130) i`);
  try {
    const all = (await sql(`SELECT name FROM orch_schedules WHERE name LIKE 'page-%' ORDER BY name, tenant_id`)).map((r) => r.name);
    assert.equal(all.length, 130);
    await goto(`${ADMIN}/schedules?name=page-`);
    assert.equal(await page.$eval('#total', (e) => e.getAttribute('data-total')), '130');
    assert.deepEqual(await attrs('#schedules tbody tr', 'data-name'), all.slice(0, 100));
    assert.equal(await page.$('#first'), null, 'the first page');
    await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#next')]);
    assert.deepEqual(await attrs('#schedules tbody tr', 'data-name'), all.slice(100));
    assert.equal(await page.$('#next'), null, 'the last page');
    assert.equal(new URL(page.url()).searchParams.get('name'), 'page-', 'the filter holds');
    await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click('#first')]);
    assert.deepEqual(await attrs('#schedules tbody tr', 'data-name'), all.slice(0, 100));
  } finally {
    await sql(`SELECT orch_unschedule(name) FROM orch_schedules WHERE name LIKE 'page-%'`);
  }
});

test('schedule-pause-resume', async () => {
  await goto(`${ADMIN}/schedules`);
  assert.equal((await scheduleOf('nightly-report')).paused, false);
  assert.equal(await submit(`${scheduleRow('nightly-report')} button[data-pause]`), 200);
  assert.match(await text('.flash-ok'), /Schedule nightly-report paused/);
  assert.equal(new URL(page.url()).pathname, '/schedules');
  assert.equal((await scheduleOf('nightly-report')).paused, true);
  assert.match(await text(`${scheduleRow('nightly-report')} td[data-col="state"]`), /^paused/);
  assert.match(await text(`${scheduleRow('nightly-report')} td[data-col="next_fire_at"]`), /none while paused/);
  assert.equal(await submit(`${scheduleRow('nightly-report')} button[data-resume]`), 200);
  assert.match(await text('.flash-ok'), /Schedule nightly-report resumed/);
  const s = await scheduleOf('nightly-report');
  assert.equal(s.paused, false);
  assert.ok(await val('SELECT next_fire_at > now() FROM orch_schedules WHERE name = $1', ['nightly-report']), 'goes on from a slot after now');
  assert.equal(await page.$eval(`${scheduleRow('nightly-report')} td[data-col="next_fire_at"] time`, (t) => t.getAttribute('title')), s.next_t);
  // another tenant's schedule, as an unbound admin: its tenant is passed
  assert.equal(await submit(`${scheduleRow('acme-digest', 'acme')} button[data-pause]`), 200);
  assert.match(await text('.flash-ok'), /Schedule acme-digest \(tenant acme\) paused/);
  assert.equal((await scheduleOf('acme-digest', 'acme')).paused, true);
  assert.equal(await submit(`${scheduleRow('acme-digest', 'acme')} button[data-resume]`), 200);
  assert.equal((await scheduleOf('acme-digest', 'acme')).paused, false);
  // a reader may not: the database says so
  await goto(`${READER}/schedules`);
  assert.equal(await submit(`${scheduleRow('nightly-report')} button[data-pause]`), 403);
  assert.equal(await text('#sqlstate'), '42501');
  assert.match(await text('#message'), /orch_pause_schedule/);
  assert.match(await text('#refusal'), /orch_pause_schedule\('nightly-report', 'default'\)/);
  assert.equal((await scheduleOf('nightly-report')).paused, false);
  // a schedule that is gone: OR005
  const { cookie, token } = await session(ADMIN, '/schedules');
  const host = new URL(ADMIN).host;
  const r = await request(ADMIN, 'POST', '/schedules/pause', { headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` },
    body: `csrf=${encodeURIComponent(token)}&name=no-such-schedule&tenant=default` });
  assert.equal(r.status, 404);
  assert.match(r.body, /OR005/);
});

test('schedule-unschedule', async () => {
  const before = await scheduleOf('nightly-report');
  await goto(`${ADMIN}/schedules`);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), page.click(`${scheduleRow('nightly-report')} a[data-unschedule]`)]);
  assert.equal(new URL(page.url()).pathname, '/schedules/unschedule');
  assert.match(await text('#why'), /removes schedule nightly-report of tenant default/);
  assert.match(await text('#why'), /The tasks and runs it fired stay/);
  assert.equal(await page.$('meta[http-equiv="refresh"]'), null);
  // not without "I mean it", nor without the CSRF token
  const { cookie, token } = await session(ADMIN, page.url().replace(ADMIN, ''));
  const host = new URL(ADMIN).host;
  const post = (body) => request(ADMIN, 'POST', '/schedules/unschedule', { headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` }, body });
  assert.equal((await post(`csrf=${encodeURIComponent(token)}&name=nightly-report&tenant=default`)).status, 400);
  assert.equal((await post('name=nightly-report&tenant=default&confirm=yes')).status, 403);
  assert.ok(await scheduleOf('nightly-report'), 'still there');
  await page.click('#f-confirm');
  assert.equal(await submit('#confirm-unschedule'), 200);
  assert.equal(new URL(page.url()).pathname, '/schedules', 'back to the list, not to the question');
  assert.match(await text('.flash-ok'), /Schedule nightly-report removed \(orch_unschedule\)/);
  assert.equal(await scheduleOf('nightly-report'), undefined);
  assert.equal(await page.$(scheduleRow('nightly-report')), null, 'no longer listed');
  assert.ok(await val('SELECT count(*)::int FROM orch_tasks WHERE task_id = $1', [before.last_task_id]), 'what it fired stays');
  // the question for a schedule that is not there
  assert.equal(await goto(`${ADMIN}/schedules/unschedule?name=nightly-report&tenant=default`), 404);
});

test('schedules-read-only', async () => {
  for (const p of ['/schedules', '/schedules/unschedule?name=release-train&tenant=default']) {
    assert.equal(await goto(`${RO}${p}`), 200, p);
    assert.equal((await page.$$('form[method=post]')).length, 0, `${p}: no action form`);
    assert.equal((await page.$$('button.act, a[data-unschedule]')).length, 0, `${p}: no action`);
  }
  assert.match(await text('#confirm'), /Read-only console/);
  const host = new URL(RO).host;
  const { cookie } = await session(RO, '/schedules');
  const r = await request(RO, 'POST', '/schedules/pause', {
    headers: { Cookie: cookie, 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${host}` }, body: 'csrf=x&name=release-train&tenant=default',
  });
  assert.equal(r.status, 403);
  assert.equal((await scheduleOf('release-train')).paused, false);
});

test('schedules-tenant-bound', async () => {
  assert.equal(await goto(`${ACME}/schedules`), 200);
  const rows = await page.$$eval('#schedules tbody tr', (els) => els.map((e) => [e.getAttribute('data-name'), e.getAttribute('data-tenant')]));
  const want = (await sql(`SELECT name, tenant_id FROM orch_schedules WHERE tenant_id = 'acme' ORDER BY name`)).map((r) => [r.name, r.tenant_id]);
  assert.ok(want.length >= 1);
  assert.deepEqual(rows, want);
  assert.ok(await val(`SELECT count(*)::int FROM orch_schedules WHERE tenant_id <> 'acme'`) > 0, 'other tenants have schedules');
  // another tenant's schedule does not exist for this role
  assert.equal(await goto(`${ACME}/schedules/unschedule?name=release-train&tenant=default`), 404);
  assert.equal(await goto(`${ACME}/schedules?tenant=default`), 200);
  assert.equal((await attrs('#schedules tbody tr', 'data-name')).length, 0);
});

// ---- sub-workflows: a run's parent and children ---------------------------
// orch_run_status tells a child run its parent (run.parent_run_id,
// parent_step, parent_index) and a parent its children ("children"); a
// subflow step names its child (child_run_id).  The run page is rendered
// from such a document by its page function and shown in the browser; with
// an extension that has sub-workflows and a child run, a live one too.

const pages = require('../src/pages');

function familyPage({ parent = true, children = true } = {}) {
  const ctx = { csrf: 'token', path: '/runs/41', readonly: false, section: '/runs', who: { role: 'console_admin', db: 'orch_console', tenants: null } };
  const run = {
    run_id: '41', tenant_id: 'default', definition: 'fanout', version: 2, state: 'running', phase: 'forward', reason_code: 'started',
    content_hash: 'c0ffee', created_at: '2026-11-29 12:00:00+00', input_pretty: '{}', output_pretty: null, pins_pretty: '{}',
  };
  const step = (step_id, type, state, extra = {}) => ({ step_id, type, state, tasks: [], output: null, error: null, ...extra });
  const status = {
    run: { id: 41, definition: 'fanout', state: 'running', ...(parent ? { parent_run_id: 7, parent_step: 'ship_all', parent_index: 2 } : {}) },
    steps: [step('prepare', 'task', 'succeeded'), step('one_child', 'subflow', 'running', { child_run_id: 42 }), step('per_item', 'subflow', 'running')],
    events: [],
    approvals: [],
    ...(children ? {
      children: [
        { run_id: 42, step_id: 'one_child', index: null, definition: 'child', version: 1, state: 'running' },
        { run_id: 43, step_id: 'per_item', index: 0, definition: 'item<b>x</b>', version: 3, state: 'succeeded' },
        { run_id: 44, step_id: 'per_item', index: 1, definition: 'item<b>x</b>', version: 3, state: 'failed' },
      ],
    } : {}),
  };
  const steps = status.steps.map((s, i) => ({ step_id: s.step_id, ord: i, type: s.type, state: s.state, output: null }));
  const spec = { steps: [{ step_id: 'prepare' }, { step_id: 'one_child', type: 'subflow', depends_on: ['prepare'] },
    { step_id: 'per_item', type: 'subflow', depends_on: ['prepare'] }] };
  return String(pages.runPage(ctx, { run, status, steps, tasks: [], spec, specError: null, retriedAs: [] }));
}

test('run-page-parent-and-children', async () => {
  await goto(`${ADMIN}/runs`);   // the console's origin, for its stylesheet
  await page.setContent(familyPage(), { waitUntil: 'load' });
  // the parent: run, step, map item
  assert.equal(await page.$eval('#parent-link', (a) => a.getAttribute('href')), '/runs/7');
  assert.match(await text('#run-parent'), /Child run of run 7, started by its step ship_all, map item 2\./);
  assert.equal(await page.$eval('#run-parent a[href="/runs/7#step-ship_all"]', (a) => a.textContent), 'ship_all');
  // the children, each linked, with its step, item, definition@version and state
  const rows = await page.$$eval('#run-children tbody tr', (els) => els.map((e) => ({
    run: e.getAttribute('data-run'), step: e.getAttribute('data-step'), href: e.querySelector('a.child-run').getAttribute('href'),
    cells: [...e.querySelectorAll('td')].map((td) => td.textContent.trim()),
  })));
  assert.deepEqual(rows.map((r) => [r.run, r.step, r.href]), [['42', 'one_child', '/runs/42'], ['43', 'per_item', '/runs/43'], ['44', 'per_item', '/runs/44']]);
  assert.deepEqual(rows[1].cells, ['run 43', 'per_item', '0', 'item<b>x</b>@3', 'succeeded']);
  assert.equal(rows[0].cells[2], '—', 'a single subflow has no item index');
  assert.equal(await page.$$eval('#run-children b', (els) => els.length), 0, 'a definition name is text');
  assert.match(await text('main'), /3 child runs: 1 running, 1 succeeded, 1 failed/);
  // a subflow step links its child; a map of subflows lists its children
  assert.equal(await page.$eval('#step-one_child a.child-run', (a) => a.getAttribute('href')), '/runs/42');
  assert.deepEqual(await attrs('#step-per_item table.child-runs tbody tr', 'data-run'), ['43', '44']);
  assert.equal(await page.$('#step-prepare a.child-run'), null);
  // and the graph says so in its boxes
  assert.match(await page.$eval('svg.dag a.node[data-step="one_child"] .node-type', (t) => t.textContent), /subflow → run 42/);
  assert.match(await page.$eval('svg.dag a.node[data-step="per_item"] .node-type', (t) => t.textContent), /subflow → 2 runs/);
  // without the keys (an extension without sub-workflows): neither
  await page.setContent(familyPage({ parent: false, children: false }), { waitUntil: 'load' });
  assert.equal(await page.$('#run-parent'), null);
  assert.equal(await page.$('#run-children'), null);
  assert.equal(await page.$eval('#step-one_child a.child-run', (a) => a.getAttribute('href')), '/runs/42', 'child_run_id alone still links');
  // the runs list, when orch_runs has parent_run_id: a parent column
  const list = String(pages.runsPage({ csrf: 't', path: '/runs', who: {} }, {
    filters: {}, definitions: [], parent: true,
    rows: [{ run_id: '42', parent_run_id: '41', definition: 'child', version: 1, tenant_id: 'default', state: 'running' },
      { run_id: '41', parent_run_id: null, definition: 'fanout', version: 2, tenant_id: 'default', state: 'running' }],
  }));
  await page.setContent(list, { waitUntil: 'load' });
  assert.equal(await page.$eval('#runs tr[data-run="42"] td.parent a', (a) => a.getAttribute('href')), '/runs/41');
  assert.match(await text('#runs tr[data-run="41"] td.parent'), /—/);
});

test('run-pages-with-the-extension-as-it-is', async () => {
  // today's runs render, with a parent column exactly when orch_runs has one
  const hasParent = await val(`SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'orch_runs'::regclass
                                                AND attname = 'parent_run_id' AND NOT attisdropped)`);
  assert.equal(await goto(`${ADMIN}/runs`), 200);
  assert.equal((await texts('#runs thead th')).includes('parent run'), hasParent);
  const id = await runId('fx-diamond');
  assert.equal(await goto(`${ADMIN}/runs/${id}`), 200);
  const doc = JSON.parse((await sql('SELECT orch_run_status($1)::text AS d', [id]))[0].d);
  assert.equal(!!(await page.$('#run-children')), Array.isArray(doc.children));
  assert.equal(!!(await page.$('#run-parent')), !!doc.run.parent_run_id);
  // a child run of the database, if there is one: its page links its parent,
  // and the parent's lists it
  const child = hasParent ? (await sql('SELECT run_id, parent_run_id FROM orch_runs WHERE parent_run_id IS NOT NULL ORDER BY run_id LIMIT 1'))[0] : null;
  if (!child) {
    console.log(`    | (no child run in this database${hasParent ? '' : ': orch_runs has no parent_run_id'}; the page function's test covers them)`);
    return;
  }
  assert.equal(await goto(`${ADMIN}/runs/${child.run_id}`), 200);
  assert.equal(await page.$eval('#parent-link', (a) => a.getAttribute('href')), `/runs/${child.parent_run_id}`);
  assert.equal(await goto(`${ADMIN}/runs/${child.parent_run_id}`), 200);
  assert.ok(await page.$(`#run-children tr[data-run="${child.run_id}"] a[href="/runs/${child.run_id}"]`));
  await goto(`${ADMIN}/runs`);
  assert.equal(await page.$eval(`#runs tr[data-run="${child.run_id}"] td.parent a`, (a) => a.getAttribute('href')), `/runs/${child.parent_run_id}`);
  // the fixture's family: every child as orch_run_status lists it, the single
  // subflow's child linked from its step and its box, the map's from its step
  const family = await runId('fx-family');
  if (!family) return;
  const st = JSON.parse((await sql('SELECT orch_run_status($1)::text AS d', [family]))[0].d);
  assert.equal(st.children.length, 3);
  await goto(`${ADMIN}/runs/${family}`);
  assert.deepEqual(await page.$$eval('#run-children tbody tr', (els) => els.map((e) => [e.getAttribute('data-run'), e.getAttribute('data-step'), e.querySelector('.state').textContent])),
    st.children.map((c) => [String(c.run_id), c.step_id, c.state]));
  const one = st.steps.find((x) => x.step_id === 'one').child_run_id;
  assert.ok(one, 'the single subflow names its child');
  assert.equal(await page.$eval('#step-one a.child-run', (a) => a.getAttribute('href')), `/runs/${one}`);
  assert.match(await page.$eval('svg.dag a.node[data-step="one"] .node-type', (t) => t.textContent), new RegExp(`subflow → run ${one}`));
  assert.deepEqual(await attrs('#step-each table.child-runs tbody tr', 'data-run'),
    st.children.filter((c) => c.step_id === 'each').map((c) => String(c.run_id)));
  const item = st.children.find((c) => c.step_id === 'each' && c.index === 1);
  await goto(`${ADMIN}/runs/${item.run_id}`);
  assert.match(await text('#run-parent'), new RegExp(`Child run of run ${family}, started by its step each, map item 1\\.`));
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
