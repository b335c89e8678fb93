'use strict';
// A worker serving several queues: each queue has its own slots, every task
// of each is run once, an idle queue does not hold the others up, and the
// start is logged in one line.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, Worker } = require('./client');
const { connection, uniq, connect, waitUntil, rows, createQueue, states } = require('./support');

test('one worker, several queues, slots per queue, one start line', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const [a, b, idle] = [uniq('qa'), uniq('qb'), uniq('qidle')];
  for (const q of [a, b, idle]) await createQueue(db, q, {});
  const producer = new Client(connection);
  const idsA = await producer.enqueueBatch(a, Array.from({ length: 6 }, (_, i) => ({ i })));
  const idsB = await producer.enqueueBatch(b, Array.from({ length: 4 }, (_, i) => ({ i })));
  await producer.end();
  const running = { [a]: 0, [b]: 0 };
  const peak = { [a]: 0, [b]: 0 };
  const seen = [];
  const lines = [];
  const logger = { info: (m) => lines.push(m), warn: (m) => lines.push(m), error: (m) => lines.push(m) };
  const w = new Worker({
    connection, queues: { [a]: 2, [b]: 1, [idle]: 1 }, workerId: 'multi-1', wait: 2000, logger,
    handler: async (task) => {
      running[task.queue] += 1;
      peak[task.queue] = Math.max(peak[task.queue], running[task.queue]);
      seen.push([task.queue, task.id]);
      await new Promise((r) => setTimeout(r, 100));
      running[task.queue] -= 1;
      return { queue: task.queue };
    },
  });
  assert.deepEqual(w.queues, [a, b, idle]);
  assert.equal(w.concurrency, 4);
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await states(db, a)).completed === 6 && (await states(db, b)).completed === 4,
      { timeout: 20000, what: 'both queues done' });
  } finally {
    w.stop({ grace: 5000 });
  }
  const stats = await done;
  assert.equal(stats.completed, 10);
  assert.deepEqual(peak, { [a]: 2, [b]: 1 }, 'each queue ran up to its own slots');
  assert.equal(seen.length, 10, 'each task ran once');
  assert.deepEqual((await rows(db, 'SELECT count(*)::int FROM orch.tasks WHERE id = ANY($1::bigint[]) AND state = \'completed\'', [[...idsA, ...idsB]]))[0][0], 10);
  assert.equal(lines[0], `worker multi-1: queues ${a}, ${b}, ${idle}, concurrency ${a} 2, ${b} 1, ${idle} 1, lease the queue's, claims wait 2000 ms`);
});

test('one queue: the start line names it, its concurrency and lease', async () => {
  const lines = [];
  const w = new Worker({ connection, queue: 'nowhere_q', concurrency: 3, lease: '45 seconds', wait: null, workerId: 'one-1',
    logger: { info: (m) => lines.push(m), warn() {}, error() {} }, handler: async () => null });
  const done = w.run({ handleSignals: false });
  await new Promise((r) => setTimeout(r, 100));
  await w.stop();
  await done;
  assert.equal(lines[0], "worker one-1: queue nowhere_q, concurrency 3, lease 45 seconds, polling");
  assert.throws(() => new Worker({ connection, queues: ['x', 'x'], handler: async () => null }), /named twice/);
  assert.throws(() => new Worker({ connection, handler: async () => null }), /queue/);
});
