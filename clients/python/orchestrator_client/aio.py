"""The asyncio worker: :class:`AsyncWorker` runs ``async def handler(task)``
coroutines on one event loop, with psycopg's ``AsyncConnection``.

It behaves as :class:`orchestrator_client.Worker` does (waiting claims,
polling when the extension has none, heartbeats, error classes, graceful
shutdown), with these differences: handlers are coroutines, run as asyncio
tasks (``concurrency`` at once) instead of threads; ``on_complete`` hooks get
an ``AsyncCursor`` and may be coroutines; a handler still running when the
grace period ends is cancelled (``asyncio.CancelledError``) as well as
abandoned; and when polling there is no ``LISTEN`` wake-up.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import os
import signal
import socket
import threading
import time
import traceback
from typing import Any, Awaitable, Callable, Dict, List, Optional

import psycopg
from psycopg.rows import dict_row

from .core import (ERROR_CLASSES, Interval, Task, TaskError, WorkerStats, _interval, _jsonb,
                   _retryable, _wrap, log)

__all__ = ["AsyncWorker"]

AsyncHandler = Callable[[Task], Awaitable[Any]]

_CLAIM_SQL = ("SELECT d.*, extract(epoch FROM d.lease_expires_at - now())::float8 AS lease_seconds"
              " FROM orch_dequeue(queue => %s::text, worker => %s::text, batch => %s::int,"
              " lease => %s::interval, tenant => %s::text{}) AS d")


class AsyncWorker:
    """Claims tasks of one queue and awaits ``handler(task)`` for each, up
    to ``concurrency`` at once, on the running event loop.

    ``await worker.run()`` claims until :meth:`stop` (or SIGTERM/SIGINT when
    ``install_signal_handlers``) and returns the :class:`WorkerStats`.
    The options are those of :class:`orchestrator_client.Worker` but
    ``listen``.
    """

    def __init__(self, conninfo: str, queue: str, handler: AsyncHandler, *,
                 concurrency: int = 1, worker_id: Optional[str] = None,
                 lease: Interval = None, heartbeat_every: Optional[float] = None,
                 batch: int = 10, poll_min: float = 0.05, poll_max: float = 2.0,
                 wait: Optional[float] = 5.0, grace: float = 30.0,
                 tenant: Optional[str] = None, default_error_class: str = "RETRYABLE",
                 max_error_length: int = 4000,
                 connect_kwargs: Optional[Dict[str, Any]] = None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if default_error_class not in ERROR_CLASSES:
            raise ValueError(f"default_error_class must be one of {ERROR_CLASSES}")
        if wait is not None and wait <= 0:
            raise ValueError("wait must be positive (or None to poll)")
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
        self.wait = wait
        self.grace = grace
        self.tenant = tenant
        self.default_error_class = default_error_class
        self.max_error_length = max_error_length
        self.connect_kwargs = connect_kwargs or {}
        self.stats = WorkerStats()
        self._inflight: Dict[int, "asyncio.Task[None]"] = {}
        self._tasks: Dict[int, Task] = {}
        self._stopping = False
        self._abandoned = False
        self._wakeup: Optional[asyncio.Event] = None
        self._claiming: Optional[psycopg.AsyncConnection] = None
        self._report: Optional[psycopg.AsyncConnection] = None
        self._report_lock: Optional[asyncio.Lock] = None
        self._ran = False

    # ---- public -----------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, grace: Optional[float] = None) -> None:
        """Stop claiming; running handlers get ``grace`` seconds (default:
        the constructor's) to finish; a second call ends the grace at once.
        Call it from the event loop's thread (signal handlers do)."""
        if grace is not None:
            self.grace = grace
        elif self._stopping:
            self.grace = 0.0
        self._stopping = True
        if self._wakeup is not None:
            self._wakeup.set()
        c = self._claiming
        if c is not None:
            try:
                c.cancel()      # a waiting claim ends at once (57014), having claimed nothing
            except Exception:   # noqa: BLE001 - the claim may have just finished
                pass

    async def run(self, install_signal_handlers: bool = True) -> WorkerStats:
        """Claim and run tasks until :meth:`stop`; returns the stats."""
        if self._ran:
            raise RuntimeError("an AsyncWorker runs once")
        self._ran = True
        loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._report_lock = asyncio.Lock()
        sigs: List[signal.Signals] = []
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
                sigs.append(sig)
        log.info("worker %s: queue %s, concurrency %d, lease %s, %s", self.worker_id, self.queue,
                 self.concurrency, self.lease or "the queue's",
                 f"claims wait {self.wait:g} s" if self.wait is not None else "polling")
        try:
            await self._loop()
        finally:
            self._stopping = True
            log.info("worker %s: stopping: no more claims; %d task(s) running, grace %.1fs",
                     self.worker_id, len(self._inflight), self.grace)
            await self._shutdown()
            for sig in sigs:
                loop.remove_signal_handler(sig)
        return self.stats

    # ---- claims -----------------------------------------------------------

    async def _connect(self) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, **self.connect_kwargs)

    async def _sleep(self, seconds: Optional[float]) -> None:
        assert self._wakeup is not None
        try:
            await asyncio.wait_for(self._wakeup.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        self._wakeup.clear()

    async def _claim(self, conn: psycopg.AsyncConnection, n: int) -> List[Task]:
        args: List[Any] = [self.queue, self.worker_id, n, self.lease, self.tenant]
        if self.wait is not None:
            sql = _CLAIM_SQL.format(", wait => %s::interval")
            args.append(_dt.timedelta(seconds=self.wait))
        else:
            sql = _CLAIM_SQL.format("")
        async with conn.cursor(row_factory=dict_row) as cur:
            self._claiming = conn
            try:
                if self._stopping:
                    return []
                await cur.execute(sql, args)
            except psycopg.errors.UndefinedFunction:
                if self.wait is None:
                    raise
                log.info("worker %s: orch_dequeue has no wait here: polling", self.worker_id)
                self.wait = None
                return []
            except psycopg.errors.QueryCanceled:
                if self._stopping:
                    return []
                raise
            finally:
                self._claiming = None
            return [Task(r) for r in await cur.fetchall()]

    async def _loop(self) -> None:
        conn: Optional[psycopg.AsyncConnection] = None
        delay = self.poll_min
        try:
            while not self._stopping:
                if conn is None or conn.closed:
                    try:
                        conn = await self._connect()
                    except psycopg.Error as e:
                        log.warning("worker %s: cannot connect: %s", self.worker_id, e)
                        conn = None
                        await self._sleep(delay)
                        delay = min(delay * 2, self.poll_max)
                        continue
                free = self.concurrency - len(self._inflight)
                if free <= 0:
                    await self._sleep(None)      # a finished handler wakes the loop
                    continue
                try:
                    tasks = await self._claim(conn, min(free, self.batch))
                except psycopg.Error as e:
                    if not _retryable(e, conn):
                        raise _wrap(e) from e
                    log.warning("worker %s: claim failed (SQLSTATE %s): %s",
                                self.worker_id, getattr(e, "sqlstate", None), e)
                    await conn.close()
                    conn = None
                    await self._sleep(delay)
                    delay = min(delay * 2, self.poll_max)
                    continue
                if tasks:
                    delay = self.poll_min
                    for t in tasks:
                        self._start(t)
                    continue
                if self.wait is not None:
                    continue                     # the claim itself waited
                await self._sleep(delay)
                delay = min(delay * 2, self.poll_max)
        finally:
            if conn is not None:
                await conn.close()

    def _start(self, t: Task) -> None:
        self.stats.claimed += 1
        self._tasks[t.id] = t
        job = asyncio.ensure_future(self._process(t))
        self._inflight[t.id] = job

        def done(_: "asyncio.Future[None]") -> None:
            self._inflight.pop(t.id, None)
            self._tasks.pop(t.id, None)
            if self._wakeup is not None:
                self._wakeup.set()
        job.add_done_callback(done)

    # ---- one task ---------------------------------------------------------

    def _beat_period(self, t: Task) -> float:
        if self.heartbeat_every is not None:
            return self.heartbeat_every
        return max(0.1, t.lease_seconds / 3.0)

    async def _heartbeats(self, t: Task) -> None:
        conn: Optional[psycopg.AsyncConnection] = None
        try:
            while not t.cancelled and not self._abandoned:
                await asyncio.sleep(self._beat_period(t))
                try:
                    if conn is None or conn.closed:
                        conn = await self._connect()
                    cur = await conn.execute("SELECT orch_heartbeat(%s::bigint, %s::uuid, %s::interval)",
                                             [t.id, t.lease_token, self.lease])
                    row = await cur.fetchone()
                    state = row[0] if row else None
                except psycopg.Error as e:
                    st = getattr(e, "sqlstate", None)
                    if st in ("OR002", "OR003", "OR005"):
                        log.warning("worker %s: task %s: heartbeat refused (%s): lease lost",
                                    self.worker_id, t.id, st)
                        t._cancel("lease_lost")
                        return
                    log.warning("worker %s: task %s: heartbeat failed: %s", self.worker_id, t.id, e)
                    if conn is not None and not st:
                        await conn.close()
                        conn = None
                    continue
                if state == "cancelled":
                    log.info("worker %s: task %s was cancelled", self.worker_id, t.id)
                    t._cancel("cancelled")
                    return
        finally:
            if conn is not None:
                await conn.close()

    async def _process(self, t: Task) -> None:
        beats = asyncio.ensure_future(self._heartbeats(t))
        error: Optional[BaseException] = None
        result: Any = None
        try:
            result = await self.handler(t)
        except asyncio.CancelledError:
            beats.cancel()
            raise                    # abandoned at shutdown: nothing is reported
        except Exception as e:       # noqa: BLE001 - every handler error is reported
            error = e
        finally:
            beats.cancel()
        if self._abandoned or t.cancel_reason in ("cancelled", "lease_lost"):
            log.warning("worker %s: task %s: not reported (%s)", self.worker_id, t.id,
                        "worker shut down" if self._abandoned else t.cancel_reason)
            return
        assert self._report_lock is not None
        async with self._report_lock:
            try:
                if self._report is None or self._report.closed:
                    self._report = await self._connect()
                if error is None:
                    error = await self._complete(self._report, t, result)
                    if error is None:
                        return
                await self._fail(self._report, t, error)
            except psycopg.Error as e:
                log.error("worker %s: task %s: could not report the outcome (SQLSTATE %s: %s); "
                          "the lease will expire", self.worker_id, t.id, getattr(e, "sqlstate", None), e)
                self.stats.report_errors += 1
                if self._report is not None and not getattr(e, "sqlstate", None):
                    await self._report.close()
                    self._report = None

    async def _complete(self, conn: psycopg.AsyncConnection, t: Task, result: Any) -> Optional[BaseException]:
        """orch_complete with the on_complete hooks in its transaction; the
        error to fail the task with when a hook failed, else None."""
        try:
            async with conn.transaction():
                async with conn.cursor() as cur:
                    for fn in t._on_complete:
                        r = fn(cur)  # type: ignore[arg-type]
                        if inspect.isawaitable(r):
                            await r
                    await cur.execute("SELECT orch_complete(%s::bigint, %s::uuid, %s::jsonb)",
                                      [t.id, t.lease_token, _jsonb(result)])
            self.stats.completed += 1
            return None
        except psycopg.Error as e:
            if e.sqlstate in ("OR002", "OR003"):
                self._lost(t, "complete", e)
                return None
            if not e.sqlstate:
                raise
            return e
        except Exception as e:       # noqa: BLE001 - an on_complete hook raised
            return e

    async def _fail(self, conn: psycopg.AsyncConnection, t: Task, error: BaseException) -> None:
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
            cur = await conn.execute(
                "SELECT state, reason_code, retry_at FROM orch_fail(%s::bigint, %s::uuid,"
                " %s::text, %s::text, %s::interval)",
                [t.id, t.lease_token, cls, text, retry_after])
            row = await cur.fetchone()
            log.info("worker %s: task %s failed (%s): %s %s", self.worker_id, t.id, cls,
                     row[0] if row else None, row[1] if row else None)
            self.stats.failed += 1
        except psycopg.Error as e:
            if e.sqlstate in ("OR002", "OR003"):
                self._lost(t, "fail", e)
            else:
                raise

    def _lost(self, t: Task, what: str, e: psycopg.Error) -> None:
        log.warning("worker %s: task %s: %s refused (%s %s)", self.worker_id, t.id, what,
                    e.sqlstate, e.diag.message_primary)
        self.stats.lost += 1

    # ---- shutdown ---------------------------------------------------------

    async def _shutdown(self) -> None:
        started = time.monotonic()
        while self._inflight:
            left = started + max(0.0, self.grace) - time.monotonic()   # a second stop() ends it
            if left <= 0:
                break
            await asyncio.wait(list(self._inflight.values()), timeout=min(left, 0.1))
        if self._inflight:
            self._abandoned = True
            ids = list(self._inflight)
            log.warning("worker %s: grace ended with %d task(s) running (%s): left to lease expiry",
                        self.worker_id, len(ids), ", ".join(str(i) for i in ids))
            for tid in ids:
                self.stats.abandoned.append(tid)
                t = self._tasks.get(tid)
                if t is not None:
                    t._cancel("shutdown")
                self._inflight[tid].cancel()
            await asyncio.wait(list(self._inflight.values()), timeout=5)
        if self._report is not None:
            await self._report.close()
            self._report = None
