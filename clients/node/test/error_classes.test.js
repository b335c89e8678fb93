'use strict';
// Each handler error reaches orch_fail with its error class, and the retry
// decision of SPEC section 4 follows: retryable classes are retried (and
// exhaust max_attempts), NON_RETRYABLE and COMPENSATION_REQUIRED become dead
// letters at once.
const test = require('node:test');
const assert = require('node:assert/strict');
const {
  Client, Worker, TransientError, RetryableError, RateLimitedError, DependencyFailedError,
  NonRetryableError, CompensationRequiredError,
} = require('./client');
const { connection, quiet, uniq, connect, waitUntil, one, rows, task, createQueue } = require('./support');

const FIRST_ATTEMPT = {
  transient_once: () => new TransientError('connection reset'),
  retryable_once: () => new RetryableError('try again'),
  dependency_once: () => new DependencyFailedError('db down'),
  rate_limited_once: () => new RateLimitedError('HTTP 429', { retryAfter: 200 }),
  plain_once: () => new TypeError('unexpected'), // default class RETRYABLE
  duck_once: () => Object.assign(new Error('classed by property'), { errorClass: 'TRANSIENT' }),
};

async function handler(t) {
  const { kind } = t.payload;
  if (kind === 'non_retryable') throw new NonRetryableError("invalid input: no 'to'");
  if (kind === 'compensation') throw new CompensationRequiredError('charged but not shipped');
  if (kind === 'always_transient') throw new TransientError(`still down (attempt ${t.attempt})`);
  if (FIRST_ATTEMPT[kind] && t.attempt === 1) throw FIRST_ATTEMPT[kind]();
  return { ok: true, attempt: t.attempt };
}

test('error classes: retry versus dead letter', async (t) => {
  const db = await connect();
  t.after(() => db.end());
  const queue = uniq('ec');
  await createQueue(db, queue, { lease: 30, max_attempts: 3, backoff: 'fixed', initial_delay: 0.05, max_delay: 0.05 });
  const kinds = ['non_retryable', 'compensation', 'always_transient', ...Object.keys(FIRST_ATTEMPT)];
  const producer = new Client(connection);
  const idList = await producer.enqueueBatch(queue, kinds.map((kind) => ({ kind })));
  await producer.end();
  const ids = Object.fromEntries(kinds.map((k, i) => [k, idList[i]]));

  const w = new Worker({ connection, queue, handler, concurrency: 2, pollMax: 100, logger: quiet });
  const done = w.run({ handleSignals: false });
  try {
    await waitUntil(async () => (await one(db,
      "SELECT count(*)::int FROM orch.tasks WHERE queue = $1 AND state IN ('completed', 'failed')", [queue])) === kinds.length,
    { what: 'every task finished' });
  } finally {
    w.stop({ grace: 5000 });
    await done;
  }
  const classes = async (kind) => (await rows(db,
    'SELECT error_class FROM orch_attempts WHERE task_id = $1 ORDER BY attempt', [ids[kind]])).map((r) => r[0]);

  for (const [kind, cls, reason] of [['non_retryable', 'NON_RETRYABLE', 'non_retryable'],
    ['compensation', 'COMPENSATION_REQUIRED', 'compensation_required']]) {
    const row = await task(db, ids[kind]);
    assert.deepEqual([row.state, row.reason_code, row.attempts, row.last_error_class], ['failed', reason, 1, cls], kind);
    assert.match(row.last_error, /Error: /);
    assert.equal(await one(db, 'SELECT reason FROM orch_dead_letters WHERE task_id = $1', [ids[kind]]), reason);
  }
  const exhausted = await task(db, ids.always_transient);
  assert.deepEqual([exhausted.state, exhausted.reason_code, exhausted.attempts], ['failed', 'max_attempts_exhausted', 3]);
  assert.deepEqual(await classes('always_transient'), ['TRANSIENT', 'TRANSIENT', 'TRANSIENT']);
  for (const [kind, cls] of [['transient_once', 'TRANSIENT'], ['retryable_once', 'RETRYABLE'],
    ['dependency_once', 'DEPENDENCY_FAILED'], ['rate_limited_once', 'RATE_LIMITED'],
    ['plain_once', 'RETRYABLE'], ['duck_once', 'TRANSIENT']]) {
    const row = await task(db, ids[kind]);
    assert.deepEqual([row.state, row.attempts, row.result], ['completed', 2, { ok: true, attempt: 2 }], kind);
    assert.deepEqual(await classes(kind), [cls, null], kind);
  }
  // RATE_LIMITED: retryAfter (200 ms) replaced the policy's 50 ms
  assert.ok(await one(db, "SELECT retry_at - finished_at >= interval '150 ms' FROM orch_attempts WHERE task_id = $1 AND attempt = 1",
    [ids.rate_limited_once]));
  const err = await one(db, 'SELECT error FROM orch_attempts WHERE task_id = $1 AND attempt = 1', [ids.plain_once]);
  assert.ok(err.startsWith('TypeError: unexpected\n'), err);
  assert.match(err, /\n    at /, "the stack is kept");
  assert.deepEqual([w.stats.completed, w.stats.failed], [6, 2 + 3 + 6]);
});
