'use strict';
// Heartbeats keep a long handler's lease alive past the lease length, and a
// cancellation reaches the handler through the heartbeat (task.signal).
const test = require('node:test');
const assert = require('node:assert/strict');
const { once } = require('events');
const { Client, Worker } = require('./client');
const { connection, quiet, uniq, connect, waitUntil, one, rows, task, createQueue } = require('./support');

test('the lease is renewed past its length while the handler runs', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('hb');
  await createQueue(db, queue, { lease: 2 });
  const producer = new Client(connection);
  const id = await producer.enqueue(queue, { long: true });
  let release;
  const released = new Promise((r) => { release = r; });
  const seen = [];
  const w = new Worker({
    connection, queue, lease: '2 seconds', workerId: 'hb-worker', logger: quiet,
    handler: async (tk) => { seen.push(tk.attempt); await released; return { done: true }; },
  });
  const done = w.run({ handleSignals: false });
  try {
    const [[claimedAt, firstExpiry]] = await waitUntil(async () => {
      const r = await rows(db, "SELECT claimed_at, lease_expires_at FROM orch.tasks WHERE id = $1 AND state = 'executing'", [id]);
      return r.length ? r : null;
    }, { what: 'the claim' });
    assert.ok(firstExpiry - claimedAt <= 2001);
    // past the first lease's end, still executing on a renewed lease
    await waitUntil(() => one(db, `SELECT now() > $1::timestamptz + interval '0.5 s' AND lease_expires_at > now()
        AND lease_expires_at > $1::timestamptz FROM orch.tasks WHERE id = $2 AND state = 'executing'`, [firstExpiry, id]),
    { timeout: 20000, what: 'a renewed lease past the first one' });
    assert.equal(await one(db, "SELECT count(*)::int FROM orch_dequeue($1, 'intruder')", [queue]), 0);
    release();
    await waitUntil(async () => (await task(db, id)).state === 'completed', { what: 'completion' });
  } finally {
    release();
    w.stop({ grace: 5000 });
    await done;
    await producer.end();
  }
  const row = await task(db, id);
  assert.deepEqual([row.attempts, row.failures, row.result, row.lease_owner], [1, 0, { done: true }, 'hb-worker']);
  assert.deepEqual(seen, [1]);
  assert.deepEqual(await rows(db, 'SELECT outcome FROM orch_attempts WHERE task_id = $1', [id]), [['completed']]);
});

test('a cancellation aborts task.signal', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('hbc');
  await createQueue(db, queue, { lease: 2 });
  const producer = new Client(connection);
  const id = await producer.enqueue(queue, {});
  const reasons = [];
  const w = new Worker({
    connection, queue, lease: 2000, logger: quiet,
    handler: async (tk) => {
      await once(tk.signal, 'abort'); // set by the heartbeat after the cancel
      reasons.push(tk.cancelReason, tk.signal.reason.reason);
      return { should: 'not be recorded' };
    },
  });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await task(db, id)).state === 'executing', { what: 'the claim' });
    assert.equal(await producer.cancel(id, 'test cancels it'), 'cancelled');
    await waitUntil(() => reasons.length > 0, { what: 'the handler to see the cancellation' });
  } finally {
    w.stop({ grace: 5000 });
    await done;
    await producer.end();
  }
  assert.deepEqual(reasons, ['cancelled', 'cancelled']);
  const row = await task(db, id);
  assert.deepEqual([row.state, row.result], ['cancelled', null]);
  assert.deepEqual([w.stats.completed, w.stats.failed], [0, 0]);
});
