'use strict';
// Worker loop and producer helpers for the orchestrator PostgreSQL extension,
// on node-postgres (`pg`).  Everything goes through the extension's SQL API
// (README.md of the repository): orch_dequeue / orch_heartbeat /
// orch_complete / orch_fail for workers; orch_enqueue / orch_enqueue_batch /
// orch_start / orch_status / orch_run_status / orch_cancel for producers.
//
// Durations given as numbers are milliseconds; strings are PostgreSQL
// intervals ('2 seconds').  Task and run ids are strings (bigint).

const os = require('os');
const pg = require('pg');

// ---------------------------------------------------------------------------
// Handler errors: throw one of these to choose orch_fail's error class
// ---------------------------------------------------------------------------

/** The error classes orch_fail accepts (README: orch_fail, retry decision). */
const ERROR_CLASSES = Object.freeze(['TRANSIENT', 'RETRYABLE', 'RATE_LIMITED',
  'DEPENDENCY_FAILED', 'NON_RETRYABLE', 'COMPENSATION_REQUIRED']);

/** Base of the handler errors.  `errorClass` goes to orch_fail; `retryAfter`
 * (ms or an interval string) is passed as retry_after (the server uses it
 * for RATE_LIMITED and keeps the policy's delay for the other classes). */
class TaskError extends Error {
  constructor(message, { retryAfter, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = this.constructor.name;
    this.retryAfter = retryAfter;
  }
  get errorClass() { return 'RETRYABLE'; }
}
/** A passing fault (timeout, connection reset): retried per policy. */
class TransientError extends TaskError { get errorClass() { return 'TRANSIENT'; } }
/** A failure worth retrying: retried per policy. */
class RetryableError extends TaskError { get errorClass() { return 'RETRYABLE'; } }
/** Throttled downstream: `retryAfter` replaces the policy's delay. */
class RateLimitedError extends TaskError { get errorClass() { return 'RATE_LIMITED'; } }
/** A dependency is down: retried with twice the policy's delay. */
class DependencyFailedError extends TaskError { get errorClass() { return 'DEPENDENCY_FAILED'; } }
/** Deterministic or fatal (bad input, validation): no retry, dead letter. */
class NonRetryableError extends TaskError { get errorClass() { return 'NON_RETRYABLE'; } }
/** Failed after a partial side effect: no retry; a workflow compensates. */
class CompensationRequiredError extends TaskError { get errorClass() { return 'COMPENSATION_REQUIRED'; } }

// ---------------------------------------------------------------------------
// Database errors, by SQLSTATE (README "Errors")
// ---------------------------------------------------------------------------

/** An error raised by the database: `code` and `sqlstate` are its SQLSTATE
 * (OR005, 55000, 22023...), `detail` and `hint` the server's, `cause` the
 * pg error. */
class OrchestratorError extends Error {
  constructor(message, { sqlstate, detail, hint, cause } = {}) {
    super(sqlstate ? `${message} (SQLSTATE ${sqlstate})` : message, cause ? { cause } : undefined);
    this.name = this.constructor.name;
    this.code = sqlstate;
    this.sqlstate = sqlstate;
    this.detail = detail;
    this.hint = hint;
  }
}
class InvalidTransition extends OrchestratorError {}     // OR001
class TerminalState extends OrchestratorError {}         // OR002
class StaleLease extends OrchestratorError {}            // OR003
class IdempotencyConflict extends OrchestratorError {}   // OR004
class NotFound extends OrchestratorError {}              // OR005
class AdmissionRejected extends OrchestratorError {}     // OR006
class DefinitionImmutable extends OrchestratorError {}   // OR007
class InvalidDefinition extends OrchestratorError {}     // OR008
class ApprovalInvalid extends OrchestratorError {}       // OR009
class DriftDetected extends OrchestratorError {}         // OR010

const ERRORS_BY_SQLSTATE = Object.freeze({
  OR001: InvalidTransition, OR002: TerminalState, OR003: StaleLease,
  OR004: IdempotencyConflict, OR005: NotFound, OR006: AdmissionRejected,
  OR007: DefinitionImmutable, OR008: InvalidDefinition, OR009: ApprovalInvalid,
  OR010: DriftDetected,
});

/** The OrchestratorError for a pg error with a SQLSTATE; other errors
 * (connection failures) unchanged. */
function wrapError(e) {
  if (!e || e instanceof OrchestratorError || !(e instanceof pg.DatabaseError) || !e.code) return e;
  const Cls = ERRORS_BY_SQLSTATE[e.code] || OrchestratorError;
  return new Cls(e.message, { sqlstate: e.code, detail: e.detail, hint: e.hint, cause: e });
}

/** Connection failure, shutdown, resource shortage, serialization failure. */
function isRetryable(e) {
  if (!(e instanceof pg.DatabaseError) || !e.code) return true;
  return ['08', '40', '53', '57', '58'].includes(e.code.slice(0, 2));
}

async function q(db, text, values) {
  try {
    return await db.query(text, values);
  } catch (e) {
    throw wrapError(e);
  }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

function interval(v) {
  if (v === undefined || v === null) return null;
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new TypeError(`not a duration: ${v}`);
    return `${v} milliseconds`;
  }
  if (typeof v === 'string') return v;
  throw new TypeError(`a duration must be milliseconds or an interval string, not ${typeof v}`);
}
const json = (v) => (v === undefined || v === null ? null : JSON.stringify(v));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// option (camelCase) -> [SQL argument name, cast, adapter]
const ENQUEUE_OPTIONS = {
  priority: ['priority', 'int'],
  runAt: ['run_at', 'timestamptz'],
  tenant: ['tenant', 'text'],
  owner: ['owner', 'text'],
  concurrencyKey: ['concurrency_key', 'text'],
  maxAttempts: ['max_attempts', 'int'],
  maxFailures: ['max_failures', 'int'],
  retryPolicy: ['retry_policy', 'jsonb', json],
  timeout: ['timeout', 'interval', interval],
  onRateLimit: ['on_rate_limit', 'text'],
  correlationId: ['correlation_id', 'text'],
};
const START_OPTIONS = {
  version: ['version', 'int'],
  idempotencyKey: ['idempotency_key', 'text'],
  tenant: ['tenant', 'text'],
  pins: ['pins', 'jsonb', json],
  correlationId: ['correlation_id', 'text'],
};

function named(options, allowed, params) {
  let sql = '';
  for (const [key, value] of Object.entries(options || {})) {
    const spec = allowed[key];
    if (!spec) throw new TypeError(`unknown option ${key} (allowed: ${Object.keys(allowed).join(', ')})`);
    if (value === undefined || value === null) continue;
    const [name, cast, adapt] = spec;
    params.push(adapt ? adapt(value) : value);
    sql += `, ${name} => $${params.length}::${cast}`;
  }
  return sql;
}

function isQueryable(c) {
  return c && typeof c === 'object' && typeof c.query === 'function';
}

function makePool(connection, max) {
  const config = typeof connection === 'string' ? { connectionString: connection } : { ...(connection || {}) };
  return new pg.Pool({ max, ...config });
}

// ---------------------------------------------------------------------------
// Producer
// ---------------------------------------------------------------------------

/** Producer helpers.  `new Client(connectionStringOrConfig)` owns a small
 * pool (close it with `end()`); `new Client(poolOrClient)` uses yours: with
 * a pg.Client inside BEGIN ... COMMIT, enqueues join your transaction.
 * Database errors are thrown as OrchestratorError (`.sqlstate`). */
class Client {
  constructor(connection) {
    if (isQueryable(connection)) {
      this.db = connection;
      this._owned = false;
    } else {
      this.db = makePool(connection, 2);
      this.db.on('error', () => {}); // an idle client lost: the pool replaces it
      this._owned = true;
    }
  }

  async end() {
    if (this._owned) await this.db.end();
  }

  /** orch_enqueue: returns the task id.  Options: priority, idempotencyKey,
   * runAt, tenant, owner, concurrencyKey, maxAttempts, maxFailures,
   * retryPolicy, timeout, onRateLimit, correlationId. */
  async enqueue(queue, payload, options = {}) {
    const params = [queue, JSON.stringify(payload)];
    const extra = named(options, { ...ENQUEUE_OPTIONS, idempotencyKey: ['idempotency_key', 'text'] }, params);
    const r = await q(this.db, `SELECT orch_enqueue($1::text, $2::jsonb${extra}) AS id`, params);
    return r.rows[0].id;
  }

  /** orch_enqueue_batch: many payloads in one call; ids in payload order.
   * `idempotencyKeys`: one key (or null) per payload. */
  async enqueueBatch(queue, payloads, options = {}) {
    const params = [queue, payloads.map((p) => JSON.stringify(p))];
    const extra = named(options, { ...ENQUEUE_OPTIONS, idempotencyKeys: ['idempotency_keys', 'text[]'] }, params);
    const r = await q(this.db,
      `SELECT t.id FROM orch_enqueue_batch($1::text, $2::jsonb[]${extra}) WITH ORDINALITY AS t(id, n) ORDER BY t.n`,
      params);
    return r.rows.map((row) => row.id);
  }

  /** orch_start: starts a run of a published workflow; returns the run id.
   * Options: version, idempotencyKey, tenant, pins, correlationId. */
  async start(name, input, options = {}) {
    const params = [name, JSON.stringify(input)];
    const extra = named(options, START_OPTIONS, params);
    const r = await q(this.db, `SELECT orch_start($1::text, $2::jsonb${extra}) AS id`, params);
    return r.rows[0].id;
  }

  /** orch_run_status: the run, its steps, attempts and events. */
  async runStatus(runId) {
    const r = await q(this.db, 'SELECT orch_run_status($1::bigint) AS doc', [runId]);
    return r.rows[0].doc;
  }

  /** orch_status: one task (state, attempts, reason_code, result, ...);
   * unknown id: NotFound (OR005). */
  async status(taskId) {
    const r = await q(this.db, 'SELECT * FROM orch_status($1::bigint)', [taskId]);
    return r.rows[0];
  }

  /** orch_cancel: cancels a task that has not finished. */
  async cancel(taskId, reason = null) {
    const r = await q(this.db, 'SELECT orch_cancel($1::bigint, $2::text) AS state', [taskId, reason]);
    return r.rows[0].state;
  }
}

// ---------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------

/** Why a task's signal was aborted: 'cancelled' (orch_heartbeat returned
 * cancelled), 'lease_lost' (the heartbeat was refused) or 'shutdown' (the
 * worker's grace period ended). */
class TaskAbortedError extends Error {
  constructor(reason) {
    super(`task aborted: ${reason}`);
    this.name = 'TaskAbortedError';
    this.reason = reason;
  }
}

/** A claimed task as orch_dequeue returned it, handed to the handler. */
class Task {
  constructor(row) {
    this.id = row.task_id;
    this.leaseToken = row.lease_token;
    this.attempt = row.attempt;
    this.payload = row.payload;
    this.queue = row.queue;
    this.priority = row.priority;
    this.stepKey = row.step_key;
    this.guard = row.guard;
    this.leaseExpiresAt = row.lease_expires_at;
    this.resumeData = row.resume_data;
    this.leaseMs = Number(row.lease_seconds) * 1000;
    this._controller = new AbortController();
    /** Aborted when the worker learns it should stop working on the task. */
    this.signal = this._controller.signal;
    this.cancelReason = null;
    this._onComplete = [];
    this._timer = null;
  }

  get cancelled() { return this.signal.aborted; }

  /** Run `await fn(client)` in the transaction that calls orch_complete,
   * before it: your writes commit if and only if the completion does. */
  onComplete(fn) { this._onComplete.push(fn); }

  _abort(reason) {
    if (!this.signal.aborted) {
      this.cancelReason = reason;
      this._controller.abort(new TaskAbortedError(reason));
    }
  }
}

const quietLogger = { info() {}, warn() {}, error() {} };

/** Claims tasks of one queue, or of several (`queues`), and runs
 * `await handler(task)`, up to `concurrency` at once; see README.md. */
class Worker {
  constructor({
    connection, pool, queue, queues, handler, concurrency = 1, workerId, lease = null,
    heartbeatEvery = null, batch = 10, pollMin = 50, pollMax = 2000, wait = 5000, grace = 30000,
    listen = true, tenant = null, defaultErrorClass = 'RETRYABLE', maxErrorLength = 4000,
    logger = console,
  } = {}) {
    // queues: a list of names (each with `concurrency` slots) or
    // {name: slots}; queue: one name
    let slots;
    if (queues !== undefined && queues !== null && !Array.isArray(queues) && typeof queues === 'object') {
      slots = Object.entries(queues);
    } else {
      const names = queues !== undefined && queues !== null ? queues : [queue];
      if (!Array.isArray(names)) throw new TypeError('queues must be a list of names or {name: concurrency}');
      if (new Set(names).size !== names.length) throw new TypeError('a queue is named twice');
      slots = names.map((n) => [n, concurrency]);
    }
    if (slots.length === 0 || !slots.every(([n]) => typeof n === 'string' && n !== '')) {
      throw new TypeError('queue (a name) or queues (names) is required');
    }
    if (!slots.every(([, c]) => Number.isInteger(c) && c >= 1)) throw new RangeError('concurrency must be at least 1');
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    if (!ERROR_CLASSES.includes(defaultErrorClass)) {
      throw new RangeError(`defaultErrorClass must be one of ${ERROR_CLASSES.join(', ')}`);
    }
    this.slots = new Map(slots);
    this.queues = [...this.slots.keys()];
    this.queue = this.queues[0];
    this.handler = handler;
    this.concurrency = [...this.slots.values()].reduce((a, c) => a + c, 0); // handlers at once, all queues
    this.workerId = workerId || `${os.hostname()}:${process.pid}:${Math.random().toString(16).slice(2, 6)}`;
    this.lease = interval(lease);
    this.heartbeatEvery = heartbeatEvery;
    this.batch = Math.max(1, batch);
    this.pollMin = pollMin;
    this.pollMax = Math.max(pollMin, pollMax);
    if (wait !== null && !(wait > 0)) throw new RangeError('wait must be positive (or null to poll)');
    this.wait = wait; // ms a claim waits in the server for work; null: poll
    this.grace = grace;
    this.listen = listen && wait === null; // a waiting claim is woken by the server
    this.tenant = tenant;
    this.defaultErrorClass = defaultErrorClass;
    this.maxErrorLength = maxErrorLength;
    this.log = logger || quietLogger;
    if (pool) {
      this.pool = pool;
      this._ownPool = false;
    } else {
      // a claim connection per queue, heartbeats and reports, LISTEN
      this.pool = makePool(connection, this.concurrency + this.queues.length + 2);
      this._ownPool = true;
    }
    this._onPoolError = (e) => this.log.warn(`worker ${this.workerId}: idle connection lost: ${e.message}`);
    this.pool.on('error', this._onPoolError);
    this.stats = { claimed: 0, completed: 0, failed: 0, lost: 0, reportErrors: 0, abandoned: [] };
    this._inflight = new Map();
    this._stopping = false;
    this._abandoned = false;
    this._running = false;
    this._waiters = new Set();
    this._notified = new Set();
    this._listenClient = null;
    this._listenPromise = null;
    this._claimPids = new Set(); // the backends of claims in flight (stop() cancels them)
    this._busy = new Map(this.queues.map((q) => [q, 0])); // running handlers per queue
  }

  get stopping() { return this._stopping; }

  /** Stop claiming; running handlers get `grace` ms (default: the
   * constructor's) to finish.  A second stop() ends the grace at once.
   * Returns the promise of run()'s end when running. */
  stop({ grace } = {}) {
    if (grace !== undefined) this.grace = grace;
    else if (this._stopping) this.grace = 0;
    this._stopping = true;
    this._wake();
    for (const pid of this._claimPids) {
      // a waiting claim ends at once (57014), having claimed nothing
      this.pool.query('SELECT pg_cancel_backend($1)', [pid]).catch(() => {});
    }
    return this._runPromise || Promise.resolve(this.stats);
  }

  /** Claim and run tasks until stop() (or SIGTERM/SIGINT with
   * handleSignals); resolves to the stats (`abandoned`: ids still running
   * when the grace ended).  Rejects with an OrchestratorError when the
   * claim itself is refused (bad queue name, 42501, 0A000...). */
  run({ handleSignals = true } = {}) {
    if (this._runPromise) return this._runPromise;
    this._runPromise = this._run(handleSignals);
    return this._runPromise;
  }

  async _run(handleSignals) {
    const onSignal = () => this.stop();
    if (handleSignals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    const lease = this.lease === null ? "the queue's" : this.lease;
    const conc = this.queues.length > 1 ? [...this.slots].map(([q, c]) => `${q} ${c}`).join(', ') : String(this.concurrency);
    this.log.info(`worker ${this.workerId}: queue${this.queues.length > 1 ? 's' : ''} ${this.queues.join(', ')}, concurrency ${conc}, lease ${lease}, ${this.wait !== null ? `claims wait ${this.wait} ms` : 'polling'}`);
    try {
      // one claim loop per queue, each with its own slots
      await Promise.all(this.queues.map((q) => this._loop(q)));
    } finally {
      this._stopping = true;
      this.log.info(`worker ${this.workerId}: stopping: no more claims; ${this._inflight.size} task(s) running, grace ${this.grace} ms`);
      await this._shutdown();
      if (handleSignals) {
        process.removeListener('SIGTERM', onSignal);
        process.removeListener('SIGINT', onSignal);
      }
    }
    return this.stats;
  }

  _wake() {
    const ws = [...this._waiters];
    this._waiters.clear();
    for (const f of ws) f();
  }

  /** Sleep until ms pass (null: forever) or _wake(). */
  _sleep(ms) {
    return new Promise((resolve) => {
      let timer = null;
      const f = () => { if (timer) clearTimeout(timer); resolve(); };
      this._waiters.add(f);
      if (ms !== null) timer = setTimeout(() => { this._waiters.delete(f); resolve(); }, ms);
    });
  }

  async _ensureListener() {
    if (!this.listen || this._listenClient) return;
    // the claim loops of several queues share one LISTEN connection
    if (!this._listenPromise) this._listenPromise = this._listenConnect().finally(() => { this._listenPromise = null; });
    await this._listenPromise;
  }

  async _listenConnect() {
    const client = await this.pool.connect();
    const drop = (e) => {
      if (this._listenClient !== client) return;
      this.log.warn(`worker ${this.workerId}: LISTEN connection lost: ${e && e.message}`);
      this._listenClient = null;
      client.release(true);
    };
    client.on('error', drop);
    client.on('notification', (msg) => {
      if (msg.channel === 'orch_enqueue' && this.queues.includes(msg.payload)) {
        this._notified.add(msg.payload);
        this._wake();
      }
    });
    try {
      await client.query('LISTEN orch_enqueue');
    } catch (e) {
      client.release(true);
      throw e;
    }
    this._listenClient = client;
  }

  async _claim(queue, n) {
    const waiting = this.wait !== null;
    const args = [queue, this.workerId, n, this.lease, this.tenant];
    if (waiting) args.push(`${this.wait} milliseconds`);
    const client = await this.pool.connect();
    let broken = false;
    const pid = client.processID;
    this._claimPids.add(pid);
    try {
      if (this._stopping) return [];
      const r = await client.query(
        `SELECT d.*, extract(epoch FROM d.lease_expires_at - now())::float8 AS lease_seconds
           FROM orch_dequeue(queue => $1::text, worker => $2::text, batch => $3::int,
                             lease => $4::interval, tenant => $5::text${waiting ? ', wait => $6::interval' : ''}) AS d`,
        args);
      return r.rows.map((row) => new Task(row));
    } catch (e) {
      if (waiting && e.code === '42883') {
        // an extension without waiting claims: poll instead
        this.log.info(`worker ${this.workerId}: orch_dequeue has no wait here: polling`);
        this.wait = null;
        return [];
      }
      if (e.code === '57014' && this._stopping) return []; // stop() cancelled the waiting claim
      broken = !e.code;
      throw e;
    } finally {
      this._claimPids.delete(pid);
      client.release(broken);
    }
  }

  async _loop(queue) {
    let delay = this.pollMin;
    while (!this._stopping) {
      const free = this.slots.get(queue) - this._busy.get(queue);
      if (free <= 0) {
        await this._sleep(null); // a finished handler wakes the loop
        continue;
      }
      const n = Math.min(free, this.batch);
      let tasks;
      try {
        await this._ensureListener();
        tasks = await this._claim(queue, n);
      } catch (e) {
        if (!isRetryable(e)) {
          this.stop({ grace: this.grace }); // the other queues' loops end too
          throw wrapError(e);
        }
        this.log.warn(`worker ${this.workerId}: claim failed (SQLSTATE ${e.code}): ${e.message}`);
        await this._sleep(delay);
        delay = Math.min(delay * 2, this.pollMax);
        continue;
      }
      if (tasks.length > 0) {
        delay = this.pollMin;
        for (const t of tasks) this._start(queue, t);
        continue;
      }
      if (this._notified.has(queue)) {
        this._notified.delete(queue);
        continue;
      }
      if (this.wait !== null) continue; // the claim itself waited
      await this._sleep(delay);
      delay = Math.min(delay * 2, this.pollMax);
    }
  }

  _beatPeriod(t) {
    return this.heartbeatEvery !== null ? this.heartbeatEvery : Math.max(100, t.leaseMs / 3);
  }

  _start(queue, task) {
    this.stats.claimed += 1;
    this._busy.set(queue, this._busy.get(queue) + 1);
    this._inflight.set(task.id, task);
    this._scheduleBeat(task, this._beatPeriod(task));
    task._promise = this._process(task).finally(() => {
      clearTimeout(task._timer);
      this._inflight.delete(task.id);
      this._busy.set(queue, this._busy.get(queue) - 1);
      this._wake();
    });
  }

  _scheduleBeat(task, ms) {
    task._timer = setTimeout(() => { this._beat(task); }, ms);
  }

  async _beat(task) {
    if (this._abandoned || task.cancelled || !this._inflight.has(task.id)) return;
    let state;
    try {
      const r = await this.pool.query('SELECT orch_heartbeat($1::bigint, $2::uuid, $3::interval) AS state',
        [task.id, task.leaseToken, this.lease]);
      state = r.rows[0].state;
    } catch (e) {
      if (['OR002', 'OR003', 'OR005'].includes(e.code)) {
        this.log.warn(`worker ${this.workerId}: task ${task.id}: heartbeat refused (${e.code}): lease lost`);
        task._abort('lease_lost');
      } else if (!this._abandoned && this._inflight.has(task.id)) {
        this.log.warn(`worker ${this.workerId}: task ${task.id}: heartbeat failed: ${e.message}`);
        this._scheduleBeat(task, 200);
      }
      return;
    }
    if (state === 'cancelled') {
      this.log.info(`worker ${this.workerId}: task ${task.id} was cancelled`);
      task._abort('cancelled');
    } else if (!this._abandoned && this._inflight.has(task.id)) {
      this._scheduleBeat(task, this._beatPeriod(task));
    }
  }

  async _process(task) {
    let result;
    let error = null;
    let ok = false;
    try {
      result = json(await this.handler(task)); // a result JSON cannot hold fails the task
      ok = true;
    } catch (e) {
      error = e;
    }
    if (this._abandoned || task.cancelReason === 'cancelled' || task.cancelReason === 'lease_lost') {
      this.log.warn(`worker ${this.workerId}: task ${task.id}: not reported (${this._abandoned ? 'worker shut down' : task.cancelReason})`);
      return;
    }
    try {
      if (ok) {
        const outcome = await this._complete(task, result);
        if (outcome === 'completed') {
          this.stats.completed += 1;
          return;
        }
        if (outcome === 'lost') return;
        error = outcome.error; // an onComplete hook failed: fail the task
      }
      await this._fail(task, error);
    } catch (e) {
      this.log.error(`worker ${this.workerId}: task ${task.id}: could not report the outcome (SQLSTATE ${e.code}): ${e.message}; the lease will expire`);
      this.stats.reportErrors += 1;
    }
  }

  async _complete(task, result) {
    const args = [task.id, task.leaseToken, result];
    const sql = 'SELECT orch_complete($1::bigint, $2::uuid, $3::jsonb)';
    try {
      if (task._onComplete.length === 0) {
        await this.pool.query(sql, args);
        return 'completed';
      }
      const client = await this.pool.connect();
      let broken = false;
      try {
        await client.query('BEGIN');
        try {
          for (const fn of task._onComplete) await fn(client);
        } catch (hookError) {
          await client.query('ROLLBACK');
          return { error: hookError };
        }
        try {
          await client.query(sql, args);
          await client.query('COMMIT');
        } catch (e) {
          await client.query('ROLLBACK').catch(() => { broken = true; });
          throw e;
        }
        return 'completed';
      } catch (e) {
        if (isRetryable(e)) broken = true;
        throw e;
      } finally {
        client.release(broken);
      }
    } catch (e) {
      if (e.code === 'OR002' || e.code === 'OR003') {
        this._lost(task, 'complete', e);
        return 'lost';
      }
      throw e;
    }
  }

  async _fail(task, error) {
    let cls = this.defaultErrorClass;
    let retryAfter = null;
    if (error && ERROR_CLASSES.includes(error.errorClass)) {
      cls = error.errorClass;
      retryAfter = interval(error.retryAfter);
    }
    let text;
    if (error instanceof Error) {
      // a stack starts with "Name: message"; a TaskError needs none
      text = !(error instanceof TaskError) && error.stack ? error.stack : `${error.name}: ${error.message}`;
    } else {
      text = `thrown: ${String(error)}`;
    }
    text = text.replace(/\u0000/g, '').slice(0, this.maxErrorLength);
    try {
      const r = await this.pool.query(
        'SELECT state, reason_code, retry_at FROM orch_fail($1::bigint, $2::uuid, $3::text, $4::text, $5::interval)',
        [task.id, task.leaseToken, cls, text, retryAfter]);
      this.stats.failed += 1;
      this.log.info(`worker ${this.workerId}: task ${task.id} failed (${cls}): ${r.rows[0].state} ${r.rows[0].reason_code}`);
    } catch (e) {
      if (e.code === 'OR002' || e.code === 'OR003') this._lost(task, 'fail', e);
      else throw e;
    }
  }

  _lost(task, what, e) {
    this.log.warn(`worker ${this.workerId}: task ${task.id}: ${what} refused (${e.code} ${e.message})`);
    this.stats.lost += 1;
  }

  async _shutdown() {
    const started = Date.now();
    while (this._inflight.size > 0) {
      const left = started + Math.max(0, this.grace) - Date.now(); // re-read: stop() may end it
      if (left <= 0) break;
      const pending = [...this._inflight.values()].map((t) => t._promise);
      await Promise.race([Promise.allSettled(pending), sleep(Math.min(left, 100))]);
    }
    if (this._inflight.size > 0) {
      this._abandoned = true;
      const ids = [...this._inflight.keys()];
      this.log.warn(`worker ${this.workerId}: grace ended with ${ids.length} task(s) running (${ids.join(', ')}): left to lease expiry`);
      for (const t of this._inflight.values()) {
        clearTimeout(t._timer);
        this.stats.abandoned.push(t.id);
        t._abort('shutdown');
      }
    }
    if (this._listenClient) {
      const c = this._listenClient;
      this._listenClient = null;
      c.release(true);
    }
    this.pool.removeListener('error', this._onPoolError);
    if (this._ownPool) await this.pool.end();
  }
}

module.exports = {
  Worker, Client, Task, TaskAbortedError, ERROR_CLASSES,
  TaskError, TransientError, RetryableError, RateLimitedError, DependencyFailedError,
  NonRetryableError, CompensationRequiredError,
  OrchestratorError, InvalidTransition, TerminalState, StaleLease, IdempotencyConflict,
  NotFound, AdmissionRejected, DefinitionImmutable, InvalidDefinition, ApprovalInvalid,
  DriftDetected, ERRORS_BY_SQLSTATE, wrapError,
};
