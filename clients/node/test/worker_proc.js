'use strict';
// A worker process for the kill and SIGTERM tests.
//
//   node worker_proc.js QUEUE WORKER_ID MODE
//
// MODE kill:    tasks whose payload has "block" never finish (until the
//               process is killed); the others write their result row in the
//               completion's transaction.
// MODE sigterm: every task waits until the table go_<QUEUE> has a row, then
//               completes writing its result row.
// Each handler start is recorded in executions_<QUEUE>.  Logs go to stderr;
// run() handles SIGTERM/SIGINT.
const pg = require('./pg');
const { Worker } = require('./client');
const { connection } = require('./support');

const [queue, workerId, mode] = process.argv.slice(2);
// exit when the test that started this process is gone
const parent = process.ppid;
setInterval(() => { if (process.ppid !== parent) process.exit(3); }, 500).unref();
const pool = new pg.Pool({ ...connection, max: 8 });
const logger = { info: (m) => console.error(m), warn: (m) => console.error(m), error: (m) => console.error(m) };

async function handler(task) {
  await pool.query(`INSERT INTO executions_${queue} VALUES ($1, $2, $3)`, [task.id, workerId, task.attempt]);
  if (mode === 'kill' && task.payload.block) await new Promise(() => setInterval(() => {}, 1000));
  if (mode === 'sigterm') {
    while (!(await pool.query(`SELECT EXISTS (SELECT FROM go_${queue}) AS go`)).rows[0].go) {
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  task.onComplete((c) => c.query(`INSERT INTO results_${queue} VALUES ($1, $2, $3)`, [task.id, workerId, task.attempt]));
  return { by: workerId };
}

const w = new Worker({ connection, queue, handler, concurrency: 2, lease: 2000, workerId, pollMax: 200, grace: 30000, logger });
w.run().then(async (stats) => {
  console.log(`stats completed=${stats.completed} abandoned=${stats.abandoned.length}`);
  await pool.end();
  process.exit(0);
}, (e) => { console.error(e); process.exit(2); });
