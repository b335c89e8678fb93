// Type declarations of orchestrator-client (index.js).  They describe
// what the client needs of pg's objects structurally, so that an
// application needs no @types/pg to use them.

/** A pg config (connectionString, host, user, ..., as pg.Pool takes). */
export interface PoolConfig { connectionString?: string; [option: string]: unknown }
/** What the client calls on a pg.Client, pg.PoolClient or pg.Pool. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
}
/** A pg.Pool. */
export interface Pool extends Queryable {
  connect(): Promise<PoolClient>;
  end(): Promise<void>;
  on(event: 'error', listener: (err: Error) => void): unknown;
  removeListener(event: 'error', listener: (err: Error) => void): unknown;
}
/** A client checked out of a pg.Pool. */
export interface PoolClient extends Queryable { release(err?: boolean | Error): void }
type PgClient = Queryable;

/** Milliseconds, or a PostgreSQL interval string ('2 seconds'). */
export type Duration = number | string;
/** Ids are bigint: strings in JavaScript. */
export type Id = string;

export type ErrorClass = 'TRANSIENT' | 'RETRYABLE' | 'RATE_LIMITED' | 'DEPENDENCY_FAILED'
  | 'NON_RETRYABLE' | 'COMPENSATION_REQUIRED';
export const ERROR_CLASSES: readonly ErrorClass[];

// ---- handler errors ---------------------------------------------------------

export interface TaskErrorOptions { retryAfter?: Duration; cause?: unknown }
export class TaskError extends Error {
  constructor(message?: string, options?: TaskErrorOptions);
  readonly errorClass: ErrorClass;
  retryAfter?: Duration;
}
export class TransientError extends TaskError {}
export class RetryableError extends TaskError {}
export class RateLimitedError extends TaskError {}
export class DependencyFailedError extends TaskError {}
export class NonRetryableError extends TaskError {}
export class CompensationRequiredError extends TaskError {}

// ---- database errors --------------------------------------------------------

export class OrchestratorError extends Error {
  constructor(message: string, options?: { sqlstate?: string; detail?: string; hint?: string; cause?: unknown });
  /** The SQLSTATE (OR005, 55000, 22023...). */
  code: string | undefined;
  sqlstate: string | undefined;
  detail: string | undefined;
  hint: string | undefined;
}
export class InvalidTransition extends OrchestratorError {}
export class TerminalState extends OrchestratorError {}
export class StaleLease extends OrchestratorError {}
export class IdempotencyConflict extends OrchestratorError {}
export class NotFound extends OrchestratorError {}
export class AdmissionRejected extends OrchestratorError {}
export class DefinitionImmutable extends OrchestratorError {}
export class InvalidDefinition extends OrchestratorError {}
export class ApprovalInvalid extends OrchestratorError {}
export class DriftDetected extends OrchestratorError {}
export const ERRORS_BY_SQLSTATE: Readonly<Record<string, typeof OrchestratorError>>;
/** The OrchestratorError for a pg error with a SQLSTATE; anything else unchanged. */
export function wrapError(e: unknown): unknown;

// ---- producer ----------------------------------------------------------------

export interface EnqueueOptions {
  priority?: number;
  idempotencyKey?: string;
  runAt?: Date | string;
  tenant?: string;
  owner?: string;
  concurrencyKey?: string;
  maxAttempts?: number;
  maxFailures?: number;
  retryPolicy?: Record<string, unknown>;
  timeout?: Duration;
  onRateLimit?: string;
  correlationId?: string;
}
export interface EnqueueBatchOptions extends Omit<EnqueueOptions, 'idempotencyKey'> {
  /** One key (or null) per payload. */
  idempotencyKeys?: Array<string | null>;
}
export interface StartOptions {
  version?: number;
  idempotencyKey?: string;
  tenant?: string;
  pins?: Record<string, unknown>;
  correlationId?: string;
}
/** A row of orch_status. */
export interface TaskStatus {
  task_id: Id;
  tenant_id: string;
  queue: string;
  state: string;
  reason_code: string | null;
  attempts: number;
  failures: number;
  result: unknown;
  last_error: string | null;
  last_error_class: ErrorClass | null;
  [column: string]: unknown;
}

export type Connection = string | PoolConfig;

export class Client {
  /** A connection string or pg config (the client owns a small pool), or
   * a pg Pool / Client of yours (used as it is: your transaction). */
  constructor(connection?: Connection | Pool | PgClient | PoolClient);
  db: Queryable;
  end(): Promise<void>;
  enqueue(queue: string, payload: unknown, options?: EnqueueOptions): Promise<Id>;
  enqueueBatch(queue: string, payloads: unknown[], options?: EnqueueBatchOptions): Promise<Id[]>;
  start(name: string, input: unknown, options?: StartOptions): Promise<Id>;
  runStatus(runId: Id | number): Promise<any>;
  status(taskId: Id | number): Promise<TaskStatus>;
  cancel(taskId: Id | number, reason?: string | null): Promise<string>;
}

// ---- worker ------------------------------------------------------------------

export type CancelReason = 'cancelled' | 'lease_lost' | 'shutdown';

export class TaskAbortedError extends Error {
  constructor(reason: CancelReason);
  reason: CancelReason;
}

/** A claimed task, as orch_dequeue returned it. */
export class Task<P = any> {
  id: Id;
  leaseToken: string;
  attempt: number;
  payload: P;
  queue: string;
  priority: number;
  stepKey: string | null;
  guard: string | null;
  leaseExpiresAt: Date;
  resumeData: unknown;
  /** Aborted when the worker learns it should stop working on the task. */
  signal: AbortSignal;
  cancelReason: CancelReason | null;
  readonly cancelled: boolean;
  /** Run `await fn(client)` in the transaction that calls orch_complete, before it. */
  onComplete(fn: (client: PoolClient) => unknown | Promise<unknown>): void;
}

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export interface WorkerOptions<P = any> {
  /** A connection string or pg config: the worker owns a pool. */
  connection?: Connection;
  /** A pool of yours (not ended by the worker). */
  pool?: Pool;
  /** One queue. */
  queue?: string;
  /** Several queues: names (each with `concurrency` slots) or {name: slots}. */
  queues?: string[] | Record<string, number>;
  handler: (task: Task<P>) => unknown | Promise<unknown>;
  /** Handlers at once, per queue. */
  concurrency?: number;
  workerId?: string;
  lease?: Duration | null;
  heartbeatEvery?: number | null;
  batch?: number;
  pollMin?: number;
  pollMax?: number;
  /** ms a claim waits in the server for work; null: poll. */
  wait?: number | null;
  grace?: number;
  listen?: boolean;
  tenant?: string | null;
  defaultErrorClass?: ErrorClass;
  maxErrorLength?: number;
  logger?: Logger | null;
}

export interface WorkerStats {
  claimed: number;
  completed: number;
  failed: number;
  lost: number;
  reportErrors: number;
  abandoned: Id[];
}

export class Worker<P = any> {
  constructor(options: WorkerOptions<P>);
  readonly queues: string[];
  /** The first (or only) queue. */
  readonly queue: string;
  /** Handlers at once, over all queues. */
  readonly concurrency: number;
  readonly workerId: string;
  readonly stats: WorkerStats;
  readonly stopping: boolean;
  run(options?: { handleSignals?: boolean }): Promise<WorkerStats>;
  stop(options?: { grace?: number }): Promise<WorkerStats>;
}
