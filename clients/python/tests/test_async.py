"""The asyncio worker: handlers are coroutines, run concurrently on one
event loop; results, failures and on_complete hooks as in the threaded
worker; stop() lets running handlers finish, or cancels them when the grace
ends; the start is logged in one line."""

import asyncio
import logging
import unittest

from support import DSN, DBTestCase, create_queue, states, uniq, wait_until
from orchestrator_client import AsyncWorker, Client, NonRetryableError


class Async(DBTestCase):
    def test_complete_fail_and_hooks(self):
        queue = uniq("aio")
        create_queue(self.db, queue, {"lease": 5})
        self.db.execute(f"CREATE TABLE results_{queue} (task_id bigint, n int)")
        with Client(DSN) as c:
            ids = c.enqueue_batch(queue, [{"n": i, "bad": i == 3} for i in range(8)])
        running = {"now": 0, "max": 0}

        async def handler(task):
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
            try:
                await asyncio.sleep(0.2)
                if task.payload["bad"]:
                    raise NonRetryableError("bad input")

                async def hook(cur):
                    await cur.execute(f"INSERT INTO results_{queue} VALUES (%s, %s)", [task.id, task.payload["n"]])
                task.on_complete(hook)
                return {"n": task.payload["n"]}
            finally:
                running["now"] -= 1

        async def main():
            w = AsyncWorker(DSN, queue, handler, concurrency=3, worker_id="aio-1", wait=1.0)
            run = asyncio.ensure_future(w.run(install_signal_handlers=False))
            while states(self.db, queue) != {"completed": 7, "failed": 1}:
                await asyncio.sleep(0.05)
            w.stop(grace=5)
            return await asyncio.wait_for(run, 10)

        with self.assertLogs("orchestrator_client", logging.INFO) as logs:
            stats = asyncio.run(main())
        self.assertIn(f"worker aio-1: queue {queue}, concurrency 3, lease the queue's, claims wait 1 s", logs.output[0])
        self.assertEqual((stats.claimed, stats.completed, stats.failed, stats.abandoned), (8, 7, 1, []))
        self.assertEqual(running["max"], 3, "three handlers ran at once")
        rows = dict(self.rows(f"SELECT task_id, n FROM results_{queue}"))
        self.assertEqual(sorted(rows), sorted(i for j, i in enumerate(ids) if j != 3))
        self.assertEqual(self.task(ids[3])["reason_code"], "non_retryable")
        self.assertEqual(self.task(ids[0])["result"], {"n": 0})

    def test_grace_ends_cancels_the_handler(self):
        queue = uniq("aiog")
        create_queue(self.db, queue, {"lease": 30})
        with Client(DSN) as c:
            tid = c.enqueue(queue, {})
        cancelled = []

        async def stuck(task):
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(task.cancel_reason)
                raise

        async def main():
            w = AsyncWorker(DSN, queue, stuck, worker_id="aio-2")
            run = asyncio.ensure_future(w.run(install_signal_handlers=False))
            while self.task(tid)["state"] != "executing":
                await asyncio.sleep(0.05)
            w.stop(grace=0.3)
            return await asyncio.wait_for(run, 10)

        stats = asyncio.run(main())
        self.assertEqual(stats.abandoned, [tid])
        self.assertEqual(cancelled, ["shutdown"])
        self.assertEqual(self.task(tid)["state"], "executing", "left to its lease")

    def test_polls_without_wait(self):
        queue = uniq("aiop")
        create_queue(self.db, queue, {})

        async def handler(task):
            return {"ok": True}

        async def main():
            w = AsyncWorker(DSN, queue, handler, wait=None, poll_max=0.1)
            run = asyncio.ensure_future(w.run(install_signal_handlers=False))
            await asyncio.sleep(0.3)
            with Client(DSN) as c:
                c.enqueue(queue, {})
            while states(self.db, queue) != {"completed": 1}:
                await asyncio.sleep(0.05)
            w.stop()
            return await asyncio.wait_for(run, 10)

        self.assertEqual(asyncio.run(main()).completed, 1)


if __name__ == "__main__":
    unittest.main()
