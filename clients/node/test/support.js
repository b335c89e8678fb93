'use strict';
// Shared helpers of the client tests: the database comes from the libpq
// environment (PGHOST, PGPORT, PGUSER, PGDATABASE; the extension created in
// it), queue names are unique, and waiting is on database state with a
// deadline (never sleep-and-hope).
const crypto = require('crypto');
const pg = require('./pg');

const connection = process.env.ORCH_TEST_URL ? { connectionString: process.env.ORCH_TEST_URL } : {};
const quiet = { info() {}, warn() {}, error() {} };

function uniq(prefix) {
  return `${prefix}_${crypto.randomBytes(5).toString('hex')}`;
}

async function connect() {
  const c = new pg.Client(connection);
  await c.connect();
  return c;
}

async function waitUntil(pred, { timeout = 30000, interval = 20, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

async function one(db, sql, params = []) {
  const r = await db.query({ text: sql, values: params, rowMode: 'array' });
  return r.rows.length ? r.rows[0][0] : null;
}

async function rows(db, sql, params = []) {
  return (await db.query({ text: sql, values: params, rowMode: 'array' })).rows;
}

async function task(db, id) {
  return (await db.query('SELECT * FROM orch.tasks WHERE id = $1', [id])).rows[0];
}

async function createQueue(db, name, settings) {
  await db.query('SELECT orch_create_queue($1, $2::jsonb)', [name, JSON.stringify(settings)]);
}

/** {state: count} of a queue's tasks. */
async function states(db, queue) {
  const out = {};
  for (const [s, n] of await rows(db, 'SELECT state, count(*)::int FROM orch.tasks WHERE queue = $1 GROUP BY 1', [queue])) out[s] = n;
  return out;
}

/** Resolves when a line of a child's stream contains needle. */
function waitLine(stream, needle, timeout = 30000) {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => { cleanup(); reject(new Error(`no line with ${needle} in ${timeout} ms; got ${buf}`)); }, timeout);
    const onData = (d) => {
      buf += d;
      if (buf.includes(needle)) { cleanup(); resolve(buf); }
    };
    const onEnd = () => { cleanup(); reject(new Error(`stream ended without ${needle}; got ${buf}`)); };
    function cleanup() { clearTimeout(timer); stream.off('data', onData); stream.off('end', onEnd); }
    stream.setEncoding('utf8');
    stream.on('data', onData);
    stream.on('end', onEnd);
  });
}

module.exports = { connection, quiet, uniq, connect, waitUntil, one, rows, task, createQueue, states, waitLine };
