'use strict';
// Exactly once under kill -9: a worker process is killed while it holds
// claimed tasks; after their leases expire a second worker finishes
// everything, and every task completes exactly once (result rows are written
// in the completion's transaction).
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('path');
const { spawn } = require('child_process');
const { Client, Worker } = require('./client');
const { connection, quiet, uniq, connect, waitUntil, one, rows, createQueue, states } = require('./support');

const N = 9;

test('kill -9 while holding tasks, then a second worker: each task completes once', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('kill');
  await createQueue(db, queue, { lease: 2 });
  for (const tbl of ['executions', 'results']) {
    await db.query(`CREATE TABLE ${tbl}_${queue} (task_id bigint, worker text, attempt int)`);
  }
  const producer = new Client(connection);
  // tasks 0, 3, 6 block in the first worker; with concurrency 2 it finishes
  // 1 and 2, then holds 0 and 3
  const ids = await producer.enqueueBatch(queue, Array.from({ length: N }, (_, i) => ({ i, block: i % 3 === 0 })));
  await producer.end();
  const blocked = [ids[0], ids[3]];
  const p = spawn(process.execPath, [path.join(__dirname, 'worker_proc.js'), queue, 'w-killed', 'kill'], { stdio: 'ignore' });
  const exited = new Promise((r) => p.on('exit', (code, signal) => r({ code, signal })));
  try {
    await waitUntil(async () => {
      const held = await rows(db, `SELECT id FROM orch.tasks WHERE queue = $1 AND state = 'executing'
          AND lease_owner = 'w-killed' AND lease_expires_at > now() ORDER BY id`, [queue]);
      return JSON.stringify(held.map((r) => r[0])) === JSON.stringify(blocked) && (await states(db, queue)).completed === 2;
    }, { what: 'the first worker holding tasks 0 and 3' });
    p.kill('SIGKILL');
    assert.equal((await exited).signal, 'SIGKILL');
  } finally {
    if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  }

  const w = new Worker({ connection, queue, concurrency: 1, lease: 2000, workerId: 'w2', pollMax: 200, logger: quiet,
    handler: async (tk) => {
      await db.query(`INSERT INTO executions_${queue} VALUES ($1, 'w2', $2)`, [tk.id, tk.attempt]);
      tk.onComplete((c) => c.query(`INSERT INTO results_${queue} VALUES ($1, 'w2', $2)`, [tk.id, tk.attempt]));
      return { by: 'w2' };
    } });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => JSON.stringify(await states(db, queue)) === JSON.stringify({ completed: N }),
      { timeout: 40000, what: 'every task completed' });
  } finally {
    w.stop({ grace: 5000 });
    await done;
  }
  const perTask = await rows(db, `SELECT task_id, count(*)::int FROM results_${queue} GROUP BY 1`);
  assert.deepEqual(perTask.map((r) => r[0]).sort(), [...ids].sort());
  assert.ok(perTask.every((r) => r[1] === 1), 'a task completed twice');
  for (const id of blocked) {
    assert.deepEqual(await rows(db, `SELECT worker, attempt FROM results_${queue} WHERE task_id = $1`, [id]), [['w2', 2]]);
    assert.deepEqual(await rows(db, 'SELECT attempt, outcome, worker FROM orch_attempts WHERE task_id = $1 ORDER BY attempt', [id]),
      [[1, 'lease_expired', 'w-killed'], [2, 'completed', 'w2']]);
  }
  assert.equal(await one(db, `SELECT count(*)::int FROM results_${queue} WHERE worker = 'w-killed'`), 2);
  assert.equal(await one(db, 'SELECT count(*)::int FROM orch.tasks WHERE queue = $1 AND result IS NULL', [queue]), 0);
});
