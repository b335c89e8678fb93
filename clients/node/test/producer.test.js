'use strict';
// Producer helpers, database errors with their SQLSTATE, a workflow run
// driven by a worker, and the LISTEN/NOTIFY wake-up.
const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('./pg');
const {
  Client, Worker, OrchestratorError, NotFound, IdempotencyConflict, TerminalState,
} = require('./client');
const { connection, quiet, uniq, connect, waitUntil, one, task, createQueue } = require('./support');

async function setup(t) {
  const db = await connect();
  const client = new Client(connection);
  t.after(async () => { await client.end(); await db.end(); });
  return { db, client };
}

test('enqueue with options and idempotency', async (t) => {
  const { db, client } = await setup(t);
  const queue = uniq('pe');
  const k1 = uniq('k1'); // idempotency keys are unique per tenant, across queues
  const a = await client.enqueue(queue, { to: 'a' }, { idempotencyKey: k1, priority: 3, correlationId: 'req-1', maxAttempts: 2, timeout: 60000 });
  assert.equal(await client.enqueue(queue, { to: 'a' }, { idempotencyKey: k1 }), a);
  await assert.rejects(client.enqueue(queue, { to: 'b' }, { idempotencyKey: k1 }),
    (e) => e instanceof IdempotencyConflict && e.sqlstate === 'OR004' && e.code === 'OR004' && e.cause instanceof pg.DatabaseError);
  const st = await client.status(a);
  assert.deepEqual([st.state, st.priority, st.queue], ['queued', 3, queue]);
  const row = await task(db, a);
  assert.deepEqual([row.correlation_id, row.max_attempts, row.timeout.minutes], ['req-1', 2, 1]);
  await assert.rejects(client.enqueue(queue, {}, { noSuchOption: 1 }), TypeError);
});

test('enqueueBatch keeps the order; keys per payload', async (t) => {
  const { db, client } = await setup(t);
  const queue = uniq('pb');
  const payloads = Array.from({ length: 20 }, (_, n) => ({ n, nested: [1, { a: 'x' }] }));
  const ids = await client.enqueueBatch(queue, payloads, { priority: 1 });
  assert.equal(new Set(ids).size, 20);
  for (let i = 0; i < 20; i += 1) assert.deepEqual((await task(db, ids[i])).payload, payloads[i]);
  const b1 = uniq('b1');
  const keyed = await client.enqueueBatch(queue, [{ k: 1 }, { k: 2 }], { idempotencyKeys: [b1, null] });
  assert.deepEqual(await client.enqueueBatch(queue, [{ k: 1 }], { idempotencyKeys: [b1] }), keyed.slice(0, 1));
  await assert.rejects(client.enqueueBatch(queue, [{ k: 1 }], { idempotencyKeys: ['x', 'y'] }),
    (e) => e instanceof OrchestratorError && e.sqlstate === '22023');
});

test('database errors carry their SQLSTATE', async (t) => {
  const { client } = await setup(t);
  await assert.rejects(client.status('987654321'),
    (e) => e instanceof NotFound && e.sqlstate === 'OR005' && /987654321/.test(e.message));
  await assert.rejects(client.start(uniq('no_such_workflow'), {}), NotFound);
  const id = await client.enqueue(uniq('pc'), {});
  assert.equal(await client.cancel(id, 'not needed'), 'cancelled');
  await assert.rejects(client.cancel(id, 'again'), (e) => e instanceof TerminalState && e.sqlstate === 'OR002');
  await assert.rejects(client.enqueue('bad queue name!', {}), (e) => e instanceof OrchestratorError && e.sqlstate === '22023');
  // a claim error is not swallowed by the worker loop: run() rejects with it
  const w = new Worker({ connection, queue: 'bad queue name!', handler: async () => null, logger: quiet });
  await assert.rejects(w.run({ handleSignals: false }), (e) => e instanceof OrchestratorError && e.sqlstate === '22023');
});

test("a Client on the caller's pg.Client joins its transaction", async (t) => {
  const { client } = await setup(t);
  const own = await connect();
  t.after(() => own.end());
  await own.query('BEGIN');
  const id = await new Client(own).enqueue(uniq('px'), { x: 1 });
  await own.query('ROLLBACK');
  await assert.rejects(client.status(id), NotFound);
});

test('a workflow run: start, worker, runStatus', async (t) => {
  const { db, client } = await setup(t);
  const name = uniq('wf');
  const queue = uniq('wfq');
  const spec = { policies: { queue }, steps: [{ step_id: 'a', handler: 'double' }, { step_id: 'b', handler: 'double', depends_on: ['a'] }] };
  await db.query('SELECT orch_define($1, $2::jsonb)', [name, JSON.stringify(spec)]);
  await db.query('SELECT orch_publish($1, 1)', [name]);
  const run = await client.start(name, { x: 5 }, { idempotencyKey: `${name}-1`, correlationId: 'wf-1' });
  assert.equal(await client.start(name, { x: 5 }, { idempotencyKey: `${name}-1` }), run);
  await assert.rejects(client.start(name, { x: 6 }, { idempotencyKey: `${name}-1` }), IdempotencyConflict);
  assert.equal((await client.runStatus(run)).run.state, 'running');
  const w = new Worker({ connection, queue, pollMax: 100, logger: quiet,
    handler: async (tk) => ({ x: 2 * (tk.payload.deps.a ? tk.payload.deps.a.x : tk.payload.input.x) }) });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await client.runStatus(run)).run.state === 'succeeded', { what: 'the run to succeed' });
  } finally {
    w.stop();
    await done;
  }
  const doc = await client.runStatus(run);
  assert.deepEqual(Object.fromEntries(doc.steps.map((s) => [s.step_id, s.output])), { a: { x: 10 }, b: { x: 20 } });
  assert.equal(doc.run.correlation_id, 'wf-1');
  await assert.rejects(client.runStatus('987654321'), (e) => e instanceof NotFound && e.sqlstate === 'OR005');
});

test('NOTIFY orch_enqueue wakes a worker that polls rarely', async (t) => {
  const { db } = await setup(t);
  const queue = uniq('pn');
  await createQueue(db, queue, {});
  const app = uniq('notify_worker');
  // polls only every 60 s: only the NOTIFY can make it claim quickly
  const w = new Worker({ connection: { ...connection, application_name: app }, queue, pollMin: 60000, pollMax: 60000,
    wait: null, logger: quiet, handler: async () => ({ woken: true }) });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await one(db, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1
        AND state = 'idle' AND query LIKE '%orch_dequeue%'`, [app])) >= 1, { what: 'the worker idle after a claim' });
    await waitUntil(async () => (await one(db, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1
        AND query = 'LISTEN orch_enqueue'`, [app])) === 1, { what: 'the LISTEN' });
    const p = await connect();
    await p.query('SET orchestrator.notify = on');
    const id = await new Client(p).enqueue(queue, {});
    await p.end();
    await waitUntil(async () => (await task(db, id)).state === 'completed', { timeout: 15000, what: 'the notified worker to complete the task' });
  } finally {
    w.stop();
    await done;
  }
});

test('a waiting claim wakes the worker when a task is committed (no NOTIFY, no polling)', async (t) => {
  const { db } = await setup(t);
  const queue = uniq('pw');
  await createQueue(db, queue, {});
  const app = uniq('waiting_worker');
  // polls only every 60 s, and waits in the claim for 60 s: only the commit can wake it
  const w = new Worker({ connection: { ...connection, application_name: app }, queue, pollMin: 60000, pollMax: 60000,
    wait: 60000, logger: quiet, handler: async () => ({ woken: true }) });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await one(db, `SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1
        AND state = 'active' AND query LIKE '%orch_dequeue%'`, [app])) >= 1, { what: 'the worker waiting in a claim' });
    const id = await new Client(db).enqueue(queue, {});
    await waitUntil(async () => (await task(db, id)).state === 'completed', { timeout: 15000, what: 'the waiting worker to complete the task' });
  } finally {
    await w.stop({ grace: 5000 }); // cancels the claim waiting for 60 s
    await done;
  }
});
