"""Worker and producer client for the orchestrator PostgreSQL extension.

Everything talks to the extension's SQL API (README.md of the repository):
``orch_dequeue`` / ``orch_heartbeat`` / ``orch_complete`` / ``orch_fail`` for
workers, ``orch_enqueue`` / ``orch_enqueue_batch`` / ``orch_start`` /
``orch_status`` / ``orch_run_status`` / ``orch_cancel`` for producers.
Built on psycopg 3 (Debian: python3-psycopg).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import select
import signal
import socket
import threading
import time
import traceback
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

__all__ = [
    "Client", "Worker", "Task", "WorkerStats",
    # handler exceptions, one per error class of orch_fail
    "TaskError", "TransientError", "RetryableError", "RateLimitedError",
    "DependencyFailedError", "NonRetryableError", "CompensationRequiredError",
    "ERROR_CLASSES",
    # database errors, by SQLSTATE
    "OrchestratorError", "InvalidTransition", "TerminalState", "StaleLease",
    "IdempotencyConflict", "NotFound", "AdmissionRejected",
    "DefinitionImmutable", "InvalidDefinition", "ApprovalInvalid",
    "DriftDetected", "ERRORS_BY_SQLSTATE",
]

log = logging.getLogger("orchestrator_client")

Interval = Union[None, str, int, float, _dt.timedelta]
#: An on_complete hook: fn(cursor) for Worker; for AsyncWorker it gets an
#: AsyncCursor and may be a coroutine function.
CompleteHook = Union[Callable[[psycopg.Cursor], object],
                     Callable[[psycopg.AsyncCursor], Awaitable[object]]]

# --------------------------------------------------------------------------
# Handler exceptions: raise one of these to choose orch_fail's error class
# --------------------------------------------------------------------------

#: The error classes orch_fail accepts (README, orch_fail / retry decision).
ERROR_CLASSES = ("TRANSIENT", "RETRYABLE", "RATE_LIMITED", "DEPENDENCY_FAILED",
                 "NON_RETRYABLE", "COMPENSATION_REQUIRED")


class TaskError(Exception):
    """Base of the handler exceptions.  ``error_class`` is what the worker
    passes to ``orch_fail``; ``retry_after`` (seconds, a timedelta or an
    interval string) is passed as ``retry_after`` (the server uses it for
    RATE_LIMITED and keeps the policy's delay for the other classes)."""

    error_class = "RETRYABLE"

    def __init__(self, message: str = "", *, retry_after: Interval = None):
        super().__init__(message)
        self.retry_after = retry_after


class TransientError(TaskError):
    """A passing fault (timeout, connection reset): retried per policy."""
    error_class = "TRANSIENT"


class RetryableError(TaskError):
    """A failure worth retrying: retried per policy."""
    error_class = "RETRYABLE"


class RateLimitedError(TaskError):
    """Throttled by a downstream; ``retry_after`` replaces the policy delay."""
    error_class = "RATE_LIMITED"


class DependencyFailedError(TaskError):
    """A dependency is down: retried with twice the policy's delay."""
    error_class = "DEPENDENCY_FAILED"


class NonRetryableError(TaskError):
    """Deterministic or fatal (bad input, validation): no retry, the task
    fails at once (reason ``non_retryable``) and becomes a dead letter."""
    error_class = "NON_RETRYABLE"


class CompensationRequiredError(TaskError):
    """Failed after a partial side effect: no retry (reason
    ``compensation_required``); a workflow run compensates."""
    error_class = "COMPENSATION_REQUIRED"


# --------------------------------------------------------------------------
# Database errors, by SQLSTATE (README "Errors")
# --------------------------------------------------------------------------

class OrchestratorError(Exception):
    """An error raised by the database.  ``sqlstate`` is its SQLSTATE
    (``OR005``, ``55000``, ``22023``...); ``message``, ``detail`` and
    ``hint`` are the server's; the psycopg exception is ``__cause__``."""

    def __init__(self, message: str, sqlstate: Optional[str] = None,
                 detail: Optional[str] = None, hint: Optional[str] = None):
        super().__init__(f"{message} (SQLSTATE {sqlstate})" if sqlstate else message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint


class InvalidTransition(OrchestratorError): """OR001"""
class TerminalState(OrchestratorError): """OR002"""
class StaleLease(OrchestratorError): """OR003"""
class IdempotencyConflict(OrchestratorError): """OR004"""
class NotFound(OrchestratorError): """OR005"""
class AdmissionRejected(OrchestratorError): """OR006"""
class DefinitionImmutable(OrchestratorError): """OR007"""
class InvalidDefinition(OrchestratorError): """OR008"""
class ApprovalInvalid(OrchestratorError): """OR009"""
class DriftDetected(OrchestratorError): """OR010"""


ERRORS_BY_SQLSTATE = {
    "OR001": InvalidTransition, "OR002": TerminalState, "OR003": StaleLease,
    "OR004": IdempotencyConflict, "OR005": NotFound, "OR006": AdmissionRejected,
    "OR007": DefinitionImmutable, "OR008": InvalidDefinition,
    "OR009": ApprovalInvalid, "OR010": DriftDetected,
}


def _wrap(e: psycopg.Error) -> Exception:
    """The OrchestratorError for a psycopg error that carries a SQLSTATE;
    connection failures (no SQLSTATE) are returned unchanged."""
    state = getattr(e, "sqlstate", None)
    if not state:
        return e
    diag = e.diag
    cls = ERRORS_BY_SQLSTATE.get(state, OrchestratorError)
    return cls(diag.message_primary or str(e), state,
               diag.message_detail, diag.message_hint)


class _db_errors:
    """``with _db_errors():`` re-raises psycopg errors as OrchestratorError."""

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if ev is not None and isinstance(ev, psycopg.Error):
            w = _wrap(ev)
            if w is not ev:
                raise w from ev
        return False


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def _interval(v: Interval) -> Union[None, str, _dt.timedelta]:
    """Seconds (int/float) become a timedelta; strings ('2 seconds') and
    timedeltas pass through (cast to interval in SQL)."""
    if v is None or isinstance(v, (str, _dt.timedelta)):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return _dt.timedelta(seconds=v)
    raise TypeError(f"an interval must be seconds, a timedelta or a string, not {v!r}")


def _retryable(e: psycopg.Error, conn: Union[None, psycopg.Connection, psycopg.AsyncConnection]) -> bool:
    """A connection failure, server shutdown, resource shortage or
    serialization failure: worth retrying on a new connection."""
    st = getattr(e, "sqlstate", None)
    return (not st or st[:2] in ("08", "40", "53", "57", "58")
            or (conn is not None and conn.closed))


def _jsonb(v: Any) -> Optional[Jsonb]:
    return None if v is None else Jsonb(v)


# option name -> (SQL cast, adapter) of orch_enqueue / orch_enqueue_batch
_ENQUEUE_OPTIONS = {
    "priority": ("int", None),
    "run_at": ("timestamptz", None),
    "tenant": ("text", None),
    "owner": ("text", None),
    "concurrency_key": ("text", None),
    "max_attempts": ("int", None),
    "max_failures": ("int", None),
    "retry_policy": ("jsonb", _jsonb),
    "timeout": ("interval", _interval),
    "on_rate_limit": ("text", None),
    "correlation_id": ("text", None),
}
_START_OPTIONS = {
    "version": ("int", None),
    "idempotency_key": ("text", None),
    "tenant": ("text", None),
    "pins": ("jsonb", _jsonb),
    "correlation_id": ("text", None),
}


def _named(options: Dict[str, Any], allowed: Mapping[str, tuple], params: list) -> str:
    """', name => %s::type' for each given option (names from a fixed list)."""
    sql = []
    for name, value in options.items():
        if name not in allowed:
            raise TypeError(f"unknown option {name!r} (allowed: {', '.join(sorted(allowed))})")
        if value is None:
            continue
        cast, adapt = allowed[name]
        params.append(adapt(value) if adapt else value)
        sql.append(f", {name} => %s::{cast}")
    return "".join(sql)


# --------------------------------------------------------------------------
# Producer
# --------------------------------------------------------------------------

class Client:
    """Producer helpers on one connection.

    ``Client("dbname=app")`` opens (and owns) an autocommit connection;
    ``Client(conn)`` uses a psycopg connection of yours, so enqueues take
    part in your transaction (enqueue together with your own writes).
    Every database error is raised as :class:`OrchestratorError` (or its
    subclass for the SQLSTATE) with ``.sqlstate``.
    """

    def __init__(self, conn: Union[str, psycopg.Connection], **connect_kwargs):
        if isinstance(conn, psycopg.Connection):
            self.conn = conn
            self._owned = False
        else:
            self.conn = psycopg.connect(conn, autocommit=True, **connect_kwargs)
            self._owned = True

    def close(self) -> None:
        if self._owned:
            self.conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _one(self, sql: str, params: Sequence[Any]) -> Any:
        with _db_errors(), self.conn.cursor() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
            return row[0] if row is not None else None

    def enqueue(self, queue: str, payload: Any, *, idempotency_key: Optional[str] = None,
                **options: Any) -> int:
        """``orch_enqueue``: returns the task id.  Options: priority, run_at,
        tenant, owner, concurrency_key, max_attempts, max_failures,
        retry_policy, timeout, on_rate_limit, correlation_id."""
        params: list = [queue, Jsonb(payload)]
        extra = _named({"idempotency_key": idempotency_key, **options},
                       {**_ENQUEUE_OPTIONS, "idempotency_key": ("text", None)}, params)
        return self._one(f"SELECT orch_enqueue(%s::text, %s::jsonb{extra})", params)

    def enqueue_batch(self, queue: str, payloads: Iterable[Any], *,
                      idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                      **options: Any) -> List[int]:
        """``orch_enqueue_batch``: one call for many payloads; returns the
        ids in the order of ``payloads``.  ``idempotency_keys``: one key (or
        None) per payload.  Other options as :meth:`enqueue`, for every task."""
        params: list = [queue, [Jsonb(p) for p in payloads]]
        extra = _named({"idempotency_keys": idempotency_keys, **options},
                       {**_ENQUEUE_OPTIONS, "idempotency_keys": ("text[]", list)}, params)
        sql = (f"SELECT t.id FROM orch_enqueue_batch(%s::text, %s::jsonb[]{extra})"
               " WITH ORDINALITY AS t(id, n) ORDER BY t.n")
        with _db_errors(), self.conn.cursor() as cur:
            cur.execute(sql, params)
            return [r[0] for r in cur.fetchall()]

    def start(self, name: str, input: Any, **options: Any) -> int:
        """``orch_start``: starts a run of a published workflow; returns the
        run id.  Options: version, idempotency_key, tenant, pins,
        correlation_id."""
        params: list = [name, Jsonb(input)]
        extra = _named(options, _START_OPTIONS, params)
        return self._one(f"SELECT orch_start(%s::text, %s::jsonb{extra})", params)

    def run_status(self, run_id: int) -> Dict[str, Any]:
        """``orch_run_status``: the run, its steps, attempts and events."""
        return self._one("SELECT orch_run_status(%s::bigint)", [run_id])

    def status(self, task_id: int) -> Dict[str, Any]:
        """``orch_status``: one task as a dict (state, attempts, reason_code,
        result, last_error, ...).  Unknown id: :class:`NotFound` (OR005)."""
        with _db_errors(), self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT * FROM orch_status(%s::bigint)", [task_id])
            row = cur.fetchone()
            assert row is not None      # orch_status raises OR005 for an unknown task
            return row

    def cancel(self, task_id: int, reason: Optional[str] = None) -> str:
        """``orch_cancel``: cancels a task that has not finished."""
        return self._one("SELECT orch_cancel(%s::bigint, %s::text)", [task_id, reason])


# --------------------------------------------------------------------------
# Worker
# --------------------------------------------------------------------------

class Task:
    """A claimed task, as ``orch_dequeue`` returned it, handed to the handler.

    ``cancel_event`` is set when the worker learns it should stop working on
    the task: ``cancel_reason`` is ``"cancelled"`` (orch_heartbeat returned
    cancelled), ``"lease_lost"`` (the heartbeat was refused: OR003/OR002)
    or ``"shutdown"`` (the worker's grace period ended).  A long handler
    should check :attr:`cancelled` or wait on the event.
    """

    def __init__(self, row: Dict[str, Any]):
        self.id: int = row["task_id"]
        self.lease_token = row["lease_token"]
        self.attempt: int = row["attempt"]
        self.payload = row["payload"]
        self.queue: str = row["queue"]
        self.priority: int = row["priority"]
        self.step_key: Optional[str] = row["step_key"]
        self.guard: Optional[str] = row["guard"]
        self.lease_expires_at = row["lease_expires_at"]
        self.resume_data = row["resume_data"]
        self.lease_seconds: float = float(row["lease_seconds"])
        self.cancel_event = threading.Event()
        self.cancel_reason: Optional[str] = None
        self._on_complete: List[CompleteHook] = []
        self._next_beat = 0.0

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def on_complete(self, fn: CompleteHook) -> None:
        """Run ``fn(cursor)`` in the transaction that calls orch_complete,
        before it: your writes commit if and only if the completion does
        (a lost lease rolls them back).  Use it for exactly-once effects
        in the same database."""
        self._on_complete.append(fn)

    def _cancel(self, reason: str) -> None:
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()

    def __repr__(self) -> str:
        return f"Task(id={self.id}, queue={self.queue!r}, attempt={self.attempt})"


class WorkerStats:
    """Counters of one :meth:`Worker.run`."""

    def __init__(self) -> None:
        self.claimed = 0
        self.completed = 0
        self.failed = 0
        self.lost = 0              # completion/failure refused (OR002/OR003)
        self.report_errors = 0     # outcome not recorded (connection lost...)
        self.abandoned: List[int] = []   # still running when the grace ended

    def __repr__(self) -> str:
        return (f"WorkerStats(claimed={self.claimed}, completed={self.completed}, "
                f"failed={self.failed}, lost={self.lost}, report_errors={self.report_errors}, "
                f"abandoned={self.abandoned})")


_STOP = object()


class Worker:
    """Claims tasks of one queue and runs ``handler(task)`` on ``concurrency``
    threads.

    * claims with ``orch_dequeue(queue, worker_id, batch, lease, wait)``,
      never more than free threads; the claim waits in the server up to
      ``wait`` seconds for work (a commit wakes it); with ``wait=None`` (or
      an extension without waiting claims) it polls with exponential backoff
      (``poll_min`` to ``poll_max`` seconds) when the queue is empty, and
      with ``listen`` wakes early on ``NOTIFY orch_enqueue`` (sent when the
      producer's session has ``orchestrator.notify = on``);
    * heartbeats each running task (``orch_heartbeat``) every third of its
      lease (``heartbeat_every`` to override);
    * the handler's return value (JSON) goes to ``orch_complete``; an
      exception to ``orch_fail`` with the class of :class:`TaskError`
      subclasses, ``default_error_class`` for any other exception;
    * :meth:`stop` (or SIGTERM/SIGINT in :meth:`run`) stops claiming, waits up
      to ``grace`` seconds for running handlers, then returns; tasks still
      running are abandoned: no more heartbeats, their leases expire and
      the next claim recovers them as a failed TRANSIENT attempt
      (``lease_expired``), retried per the queue's policy.  The API has no
      call to hand a claimed task back.
    """

    def __init__(self, conninfo: str, queue: str, handler: Callable[[Task], Any], *,
                 concurrency: int = 1, worker_id: Optional[str] = None,
                 lease: Interval = None, heartbeat_every: Optional[float] = None,
                 batch: int = 10, poll_min: float = 0.05, poll_max: float = 2.0,
                 wait: Optional[float] = 5.0,
                 grace: float = 30.0, listen: bool = True, tenant: Optional[str] = None,
                 default_error_class: str = "RETRYABLE", max_error_length: int = 4000,
                 connect_kwargs: Optional[Dict[str, Any]] = None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if default_error_class not in ERROR_CLASSES:
            raise ValueError(f"default_error_class must be one of {ERROR_CLASSES}")
        self.conninfo = conninfo
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{id(self) & 0xffff:x}"
        self.lease = _interval(lease)
        self.heartbeat_every = heartbeat_every
        self.batch = max(1, batch)
        self.poll_min = poll_min
        self.poll_max = max(poll_min, poll_max)
        if wait is not None and wait <= 0:
            raise ValueError("wait must be positive (or None to poll)")
        self.wait = wait
        self.grace = grace
        # a waiting claim is woken by the server: LISTEN only when polling
        self.listen = listen and wait is None
        self.tenant = tenant
        self.default_error_class = default_error_class
        self.max_error_length = max_error_length
        self.connect_kwargs = connect_kwargs or {}
        self.stats = WorkerStats()

        self._lock = threading.Condition()
        self._inflight: Dict[int, Task] = {}
        self._stopping = threading.Event()
        self._abandoned = False
        # a socket pair wakes the claim loop (select) from stop(), signal
        # handlers and finished handlers; closed when run() ends
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._notified = False
        self._thread: Optional[threading.Thread] = None
        self._claiming: Optional[psycopg.Connection] = None   # a claim in flight (stop cancels it)

    # ---- public -----------------------------------------------------------

    def stop(self, grace: Optional[float] = None) -> None:
        """Stop claiming; running handlers get ``grace`` seconds (default:
        the constructor's) to finish.  Safe from signal handlers and other
        threads; returns at once (``run`` returns when done)."""
        if grace is not None:
            self.grace = grace
        elif self._stopping.is_set():
            self.grace = 0.0          # a second stop (signal) ends the grace
        self._stopping.set()
        self._wake()
        c = self._claiming
        if c is not None:
            try:
                c.cancel()       # a waiting claim ends at once (57014), having claimed nothing
            except Exception:
                pass

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> threading.Thread:
        """Run :meth:`run` in a background thread (no signal handlers)."""
        self._thread = threading.Thread(target=self.run, kwargs={"install_signal_handlers": False},
                                        name=f"orch-worker-{self.queue}", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait for a :meth:`start`-ed worker; True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def run(self, install_signal_handlers: bool = True) -> WorkerStats:
        """Claim and run tasks until :meth:`stop` (or SIGTERM/SIGINT);
        returns the stats, ``abandoned`` listing what did not finish."""
        old = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, lambda s, f: self.stop())
        try:
            self._run()
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
            self._wake_w.close()
            self._wake_r.close()
        return self.stats

    # ---- internals --------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.conninfo, autocommit=True, **self.connect_kwargs)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:          # full (a wake-up is pending anyway) or closed
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except OSError:
            pass

    def _on_notify(self, n: psycopg.Notify) -> None:
        if n.payload == self.queue:
            self._notified = True

    def _wait(self, timeout: Optional[float], conn: Optional[psycopg.Connection]) -> None:
        fds: List[Any] = [self._wake_r]
        if conn is not None and self.listen and not conn.closed:
            fds.append(conn.fileno())
        try:
            select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            time.sleep(min(timeout or 0.1, 0.1))
        self._drain_wake()

    def _free_slots(self) -> int:
        with self._lock:
            return self.concurrency - len(self._inflight)

    def _claim(self, conn: psycopg.Connection, n: int) -> List[Task]:
        sql = ("SELECT d.*, extract(epoch FROM d.lease_expires_at - now())::float8 AS lease_seconds"
               " FROM orch_dequeue(queue => %s::text, worker => %s::text, batch => %s::int,"
               " lease => %s::interval, tenant => %s::text{}) AS d")
        args: List[Any] = [self.queue, self.worker_id, n, self.lease, self.tenant]
        if self.wait is not None:
            sql = sql.format(", wait => %s::interval")
            args.append(_dt.timedelta(seconds=self.wait))
        else:
            sql = sql.format("")
        with conn.cursor(row_factory=dict_row) as cur:
            self._claiming = conn
            try:
                if self._stopping.is_set():
                    return []
                cur.execute(sql, args)
            except psycopg.errors.UndefinedFunction:
                if self.wait is None:
                    raise
                # an extension without waiting claims: poll instead
                log.info("worker %s: orch_dequeue has no wait here: polling", self.worker_id)
                self.wait = None
                return []
            except psycopg.errors.QueryCanceled:
                if self._stopping.is_set():
                    return []       # stop() cancelled the waiting claim
                raise
            finally:
                self._claiming = None
            return [Task(r) for r in cur.fetchall()]

    def _run(self) -> None:
        log.info("worker %s: queue %s, concurrency %d, lease %s, %s", self.worker_id, self.queue,
                 self.concurrency, self.lease or "the queue's",
                 f"claims wait {self.wait:g} s" if self.wait is not None else "polling")
        jobs: "list" = []
        self._jobs_cv = threading.Condition()
        self._jobs = jobs
        threads = [threading.Thread(target=self._handler_thread, name=f"orch-handler-{i}", daemon=True)
                   for i in range(self.concurrency)]
        for t in threads:
            t.start()
        hb = threading.Thread(target=self._heartbeat_thread, name="orch-heartbeat", daemon=True)
        hb.start()

        conn: Optional[psycopg.Connection] = None
        delay = self.poll_min
        try:
            while not self._stopping.is_set():
                if conn is None or conn.closed:
                    try:
                        conn = self._connect()
                        if self.listen:
                            conn.add_notify_handler(self._on_notify)
                            conn.execute("LISTEN orch_enqueue")
                    except psycopg.Error as e:
                        log.warning("worker %s: cannot connect: %s", self.worker_id, e)
                        conn = None
                        self._wait(delay, None)
                        delay = min(delay * 2, self.poll_max)
                        continue
                free = self._free_slots()
                if free <= 0:
                    self._wait(None, None)     # a finished handler wakes us
                    continue
                try:
                    tasks = self._claim(conn, min(free, self.batch))
                except psycopg.Error as e:
                    if not _retryable(e, conn):
                        # an error of the API (bad queue name, 0A000, 42501...):
                        # nothing a retry fixes; run() raises it
                        raise _wrap(e) from e
                    log.warning("worker %s: claim failed (SQLSTATE %s): %s",
                                self.worker_id, getattr(e, "sqlstate", None), e)
                    try:
                        conn.close()
                    except Exception:
                        pass
                    conn = None
                    self._wait(delay, None)
                    delay = min(delay * 2, self.poll_max)
                    continue
                if tasks:
                    delay = self.poll_min
                    now = time.monotonic()
                    with self._lock:
                        for task in tasks:
                            task._next_beat = now + self._beat_period(task)
                            self._inflight[task.id] = task
                            self.stats.claimed += 1
                        self._lock.notify_all()
                    with self._jobs_cv:
                        jobs.extend(tasks)
                        self._jobs_cv.notify_all()
                    continue
                if self._notified:
                    self._notified = False
                    continue
                if self.wait is not None:
                    continue        # the claim itself waited
                self._wait(delay, conn)
                delay = min(delay * 2, self.poll_max)
        finally:
            self._stopping.set()
            log.info("worker %s: stopping: no more claims; %d task(s) running, grace %.1fs",
                     self.worker_id, len(self._inflight), self.grace)
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            self._shutdown(threads, hb)

    def _shutdown(self, threads: List[threading.Thread], hb: threading.Thread) -> None:
        started = time.monotonic()
        with self._lock:
            while self._inflight:
                # re-read self.grace: a second stop() ends it at once
                left = started + max(0.0, self.grace) - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 0.1))
            self._abandoned = True
            for t in self._inflight.values():
                self.stats.abandoned.append(t.id)
                t._cancel("shutdown")
            if self._inflight:
                log.warning("worker %s: grace ended with %d task(s) running (%s): "
                            "left to lease expiry", self.worker_id, len(self._inflight),
                            ", ".join(str(i) for i in self._inflight))
            self._lock.notify_all()
        with self._jobs_cv:
            self._jobs.extend([_STOP] * len(threads))
            self._jobs_cv.notify_all()
        hb.join(5)
        for th in threads:
            th.join(0 if self.stats.abandoned else 5)

    def _beat_period(self, t: Task) -> float:
        if self.heartbeat_every is not None:
            return self.heartbeat_every
        return max(0.1, t.lease_seconds / 3.0)

    # -- heartbeats -------------------------------------------------------

    def _heartbeat_thread(self) -> None:
        conn: Optional[psycopg.Connection] = None
        try:
            while True:
                with self._lock:
                    if self._abandoned or (self._stopping.is_set() and not self._inflight):
                        return
                    now = time.monotonic()
                    due = [t for t in self._inflight.values()
                           if t._next_beat <= now and not t.cancelled]
                    if not due:
                        nxt = min((t._next_beat for t in self._inflight.values()
                                   if not t.cancelled), default=now + 1.0)
                        self._lock.wait(max(0.01, min(nxt - now, 1.0)))
                        continue
                for t in due:
                    if conn is None or conn.closed:
                        try:
                            conn = self._connect()
                        except psycopg.Error as e:
                            log.warning("worker %s: heartbeat cannot connect: %s", self.worker_id, e)
                            conn = None
                            time.sleep(0.2)
                            break
                    self._beat(conn, t)
        finally:
            if conn is not None:
                conn.close()

    def _beat(self, conn: psycopg.Connection, t: Task) -> None:
        with self._lock:
            if self._abandoned or t.id not in self._inflight:
                return
        try:
            beat = conn.execute("SELECT orch_heartbeat(%s::bigint, %s::uuid, %s::interval)",
                                [t.id, t.lease_token, self.lease]).fetchone()
            state = beat[0] if beat is not None else None
        except psycopg.Error as e:
            st = getattr(e, "sqlstate", None)
            if st in ("OR002", "OR003", "OR005"):
                log.warning("worker %s: task %s: heartbeat refused (%s): lease lost",
                            self.worker_id, t.id, st)
                t._cancel("lease_lost")
            else:
                log.warning("worker %s: task %s: heartbeat failed: %s", self.worker_id, t.id, e)
                t._next_beat = time.monotonic() + 0.2
                if conn is not None and not st:
                    conn.close()
            return
        if state == "cancelled":
            log.info("worker %s: task %s was cancelled", self.worker_id, t.id)
            t._cancel("cancelled")
        else:
            t._next_beat = time.monotonic() + self._beat_period(t)

    # -- handlers ---------------------------------------------------------

    def _handler_thread(self) -> None:
        conn: Optional[psycopg.Connection] = None
        try:
            while True:
                with self._jobs_cv:
                    while not self._jobs:
                        self._jobs_cv.wait()
                    t = self._jobs.pop(0)
                if t is _STOP:
                    return
                conn = self._process(conn, t)
        finally:
            if conn is not None:
                conn.close()

    def _process(self, conn: Optional[psycopg.Connection], t: Task) -> Optional[psycopg.Connection]:
        error: Optional[BaseException] = None
        result: Any = None
        try:
            result = self.handler(t)
        except Exception as e:       # noqa: BLE001 - every handler error is reported
            error = e
        try:
            with self._lock:
                skip = self._abandoned or t.cancel_reason in ("cancelled", "lease_lost")
            if skip:
                log.warning("worker %s: task %s: not reported (%s)", self.worker_id, t.id,
                            "worker shut down" if self._abandoned else t.cancel_reason)
                return conn
            if conn is None or conn.closed:
                conn = self._connect()
            if error is None:
                try:
                    with conn.transaction():
                        with conn.cursor() as cur:
                            for fn in t._on_complete:
                                fn(cur)  # type: ignore[arg-type]  # a Worker's hooks take a Cursor
                            cur.execute("SELECT orch_complete(%s::bigint, %s::uuid, %s::jsonb)",
                                        [t.id, t.lease_token, _jsonb(result)])
                    self._count("completed")
                    return conn
                except psycopg.Error as e:
                    if e.sqlstate in ("OR002", "OR003"):
                        self._lost(t, "complete", e)
                        return conn
                    if not e.sqlstate:
                        raise
                    error = e        # e.g. an on_complete write failed: fail the task
                except Exception as e:   # noqa: BLE001 - on_complete raised
                    error = e
            self._fail(conn, t, error)
            return conn
        except psycopg.Error as e:
            log.error("worker %s: task %s: could not report the outcome (SQLSTATE %s: %s); "
                      "the lease will expire", self.worker_id, t.id, getattr(e, "sqlstate", None), e)
            self._count("report_errors")
            if conn is not None and not getattr(e, "sqlstate", None):
                conn.close()
                conn = None
            return conn
        finally:
            with self._lock:
                self._inflight.pop(t.id, None)
                self._lock.notify_all()
            self._wake()

    def _fail(self, conn: psycopg.Connection, t: Task, error: BaseException) -> None:
        if isinstance(error, TaskError):
            cls, retry_after = error.error_class, _interval(error.retry_after)
        else:
            cls, retry_after = self.default_error_class, None
        text = f"{type(error).__name__}: {error}"
        if not isinstance(error, TaskError):
            tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            text = f"{text}\n{tb}"
        text = text.replace("\x00", "")[: self.max_error_length]
        try:
            row = conn.execute(
                "SELECT state, reason_code, retry_at FROM orch_fail(%s::bigint, %s::uuid,"
                " %s::text, %s::text, %s::interval)",
                [t.id, t.lease_token, cls, text, retry_after]).fetchone()
            assert row is not None      # orch_fail returns one row
            log.info("worker %s: task %s failed (%s): %s %s", self.worker_id, t.id, cls, row[0], row[1])
            self._count("failed")
        except psycopg.Error as e:
            if e.sqlstate in ("OR002", "OR003"):
                self._lost(t, "fail", e)
            else:
                raise

    def _lost(self, t: Task, what: str, e: psycopg.Error) -> None:
        log.warning("worker %s: task %s: %s refused (%s %s)", self.worker_id, t.id, what,
                    e.sqlstate, e.diag.message_primary)
        self._count("lost")

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)
