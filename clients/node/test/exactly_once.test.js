'use strict';
// A worker with concurrency 4 processes N tasks exactly once.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, Worker } = require('./client');
const { connection, quiet, uniq, connect, waitUntil, one, rows, createQueue } = require('./support');

const N = 40;

test('concurrency 4: each task processed and completed once', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('eo');
  const results = uniq('results');
  await createQueue(db, queue, { lease: 30 });
  await db.query(`CREATE TABLE ${results} (task_id bigint NOT NULL, i int NOT NULL)`);
  const producer = new Client(connection);
  const ids = await producer.enqueueBatch(queue, Array.from({ length: N }, (_, i) => ({ i })));
  await producer.end();
  assert.equal(ids.length, N);

  let running = 0;
  let peak = 0;
  // The first four tasks return only once all four run at once: proves four
  // concurrent handlers (the timeout fails the test otherwise).
  let arrived = 0;
  let openBarrier;
  const barrier = new Promise((resolve) => { openBarrier = resolve; });
  const handler = async (task) => {
    running += 1;
    peak = Math.max(peak, running);
    try {
      if (task.payload.i < 4) {
        arrived += 1;
        if (arrived === 4) openBarrier();
        await barrier;
      }
      task.onComplete((c) => c.query(`INSERT INTO ${results} VALUES ($1, $2)`, [task.id, task.payload.i]));
      return { i: task.payload.i, attempt: task.attempt };
    } finally {
      running -= 1;
    }
  };
  const w = new Worker({ connection, queue, handler, concurrency: 4, pollMax: 200, workerId: 'eo-worker', logger: quiet });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await one(db,
      "SELECT count(*)::int FROM orch.tasks WHERE queue = $1 AND state = 'completed'", [queue])) === N,
    { what: 'all tasks completed' });
  } finally {
    w.stop({ grace: 10000 });
    await done;
  }
  assert.equal(peak, 4, 'at most 4 (and at some point 4) handlers at once');
  const got = await rows(db, `SELECT task_id, count(*)::int FROM ${results} GROUP BY 1`);
  assert.deepEqual(got.map((r) => r[0]).sort(), [...ids].sort());
  assert.ok(got.every((r) => r[1] === 1), 'a task was recorded twice');
  const bad = await rows(db, `SELECT id, state, attempts, result FROM orch.tasks WHERE queue = $1
      AND (state <> 'completed' OR attempts <> 1 OR (result->>'attempt')::int <> 1
           OR (result->>'i')::int <> (payload->>'i')::int)`, [queue]);
  assert.deepEqual(bad, []);
  assert.equal(await one(db, `SELECT count(*)::int FROM orch_attempts a JOIN orch.tasks t ON t.id = a.task_id
      WHERE t.queue = $1 AND a.outcome = 'completed'`, [queue]), N);
  assert.deepEqual([w.stats.claimed, w.stats.completed, w.stats.failed, w.stats.abandoned], [N, N, 0, []]);
});
