'use strict';
// Graceful shutdown: stop() (or SIGTERM) stops claiming and lets in-flight
// handlers finish; a handler that outlives the grace period is abandoned and
// its task recovered after the lease expires.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const { spawn } = require('child_process');
const { Client, Worker } = require('./client');
const { connection, quiet, uniq, connect, waitUntil, one, rows, task, createQueue, states, waitLine } = require('./support');

function gate() {
  let open;
  const p = new Promise((r) => { open = r; });
  return { p, open };
}

test('stop() finishes in-flight work and claims no more', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('sd');
  await createQueue(db, queue, { lease: 30 });
  const producer = new Client(connection);
  const ids = await producer.enqueueBatch(queue, [0, 1, 2, 3, 4].map((i) => ({ i })));
  await producer.end();
  const release = gate();
  const w = new Worker({ connection, queue, concurrency: 2, pollMax: 100, logger: quiet,
    handler: async (tk) => { await release.p; return { i: tk.payload.i }; } });
  const done = w.run({ handleSignals: false });
  let ended = false;
  done.then(() => { ended = true; });
  try {
    await waitUntil(async () => JSON.stringify(await states(db, queue)) === JSON.stringify({ executing: 2, queued: 3 }),
      { what: 'two claimed' });
    const stopped = w.stop({ grace: 30000 });
    assert.equal(w.stopping, true);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(ended, false, 'run() ended while handlers were running');
    release.open();
    await stopped;
  } finally {
    release.open();
    w.stop({ grace: 0 });
    await done;
  }
  assert.deepEqual(await states(db, queue), { completed: 2, queued: 3 });
  assert.equal((await task(db, ids[0])).state, 'completed');
  assert.equal((await task(db, ids[1])).state, 'completed');
  assert.deepEqual([w.stats.claimed, w.stats.completed, w.stats.abandoned], [2, 2, []]);
});

test('a handler past the grace period is left to lease expiry', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('sdg');
  await createQueue(db, queue, { lease: 2 });
  const producer = new Client(connection);
  const id = await producer.enqueue(queue, {});
  await producer.end();
  const release = gate();
  const aborted = [];
  const w1 = new Worker({ connection, queue, lease: 2000, workerId: 'w-stuck', pollMax: 100, logger: quiet,
    handler: async (tk) => { tk.signal.addEventListener('abort', () => aborted.push(tk.cancelReason)); await release.p; return { by: 'stuck' }; } });
  const done1 = w1.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await task(db, id)).state === 'executing', { what: 'the claim' });
    const stats = await w1.stop({ grace: 300 });
    assert.deepEqual(stats.abandoned, [id]);
    assert.deepEqual(aborted, ['shutdown']);
    await waitUntil(() => one(db, 'SELECT lease_expires_at < now() FROM orch.tasks WHERE id = $1', [id]),
      { timeout: 10000, what: 'lease expiry' });
    const w2 = new Worker({ connection, queue, workerId: 'w2', pollMax: 100, logger: quiet, handler: async () => ({ by: 'w2' }) });
    const done2 = w2.run({ handleSignals: false });
    await waitUntil(async () => (await task(db, id)).state === 'completed', { what: 'recovery by w2' });
    w2.stop();
    await done2;
  } finally {
    release.open();
    await done1;
  }
  const row = await task(db, id);
  assert.deepEqual([row.attempts, row.result, row.lease_owner], [2, { by: 'w2' }, 'w2']);
  assert.deepEqual(await rows(db, 'SELECT attempt, outcome, error_class FROM orch_attempts WHERE task_id = $1 ORDER BY attempt', [id]),
    [[1, 'lease_expired', 'TRANSIENT'], [2, 'completed', null]]);
});

test('SIGTERM to a worker process: in-flight work finishes, nothing new is claimed', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('sdt');
  await createQueue(db, queue, { lease: 2 });
  for (const tbl of ['executions', 'results', 'go']) {
    await db.query(`CREATE TABLE ${tbl}_${queue} (task_id bigint, worker text, attempt int)`);
  }
  const producer = new Client(connection);
  const ids = await producer.enqueueBatch(queue, [{ i: 0 }, { i: 1 }]);
  const p = spawn(process.execPath, [path.join(__dirname, 'worker_proc.js'), queue, 'w-term', 'sigterm'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d) => { out += d; });
  const exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
  let late;
  try {
    await waitUntil(async () => (await one(db, `SELECT count(*)::int FROM executions_${queue}`)) === 2,
      { what: 'both handlers running' });
    p.kill('SIGTERM');
    await waitLine(p.stderr, 'stopping: no more claims');
    late = await producer.enqueue(queue, { late: true });
    assert.equal(p.exitCode, null, 'the worker exited before its handlers finished');
    await db.query(`INSERT INTO go_${queue} VALUES (0)`);
    const { code } = await exited;
    assert.equal(code, 0);
  } finally {
    if (p.exitCode === null) p.kill('SIGKILL');
    await producer.end();
  }
  assert.match(out, /completed=2/);
  for (const id of ids) assert.equal((await task(db, id)).state, 'completed');
  assert.equal((await task(db, late)).state, 'queued');
  assert.equal(await one(db, `SELECT count(*)::int FROM results_${queue}`), 2);
});
