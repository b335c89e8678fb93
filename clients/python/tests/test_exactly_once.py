"""A worker with concurrency 4 processes N tasks exactly once."""

import threading
import unittest

from support import DSN, DBTestCase, create_queue, uniq, wait_until
from orchestrator_client import Client, Worker

N = 40


class ExactlyOnce(DBTestCase):
    def test_concurrency_4_each_task_once(self):
        db = self.db
        queue = uniq("eo")
        results = uniq("results")
        create_queue(db, queue, {"lease": 30})
        db.execute(f"CREATE TABLE {results} (task_id bigint NOT NULL, i int NOT NULL)")
        with Client(DSN) as c:
            ids = c.enqueue_batch(queue, [{"i": i} for i in range(N)])
        self.assertEqual(len(ids), N)

        lock = threading.Lock()
        running = [0]
        peak = [0]
        # The first four tasks only return once all four run at once: proves
        # the worker runs four handlers concurrently (a timeout fails it).
        barrier = threading.Barrier(4, timeout=30)

        def handler(task):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                if task.payload["i"] < 4:
                    barrier.wait()
                task.on_complete(lambda cur: cur.execute(
                    f"INSERT INTO {results} VALUES (%s, %s)", [task.id, task.payload["i"]]))
                return {"i": task.payload["i"], "attempt": task.attempt}
            finally:
                with lock:
                    running[0] -= 1

        w = Worker(DSN, queue, handler, concurrency=4, poll_max=0.2, worker_id="eo-worker")
        w.start()
        try:
            wait_until(lambda: self.one("SELECT count(*) FROM orch.tasks WHERE queue = %s AND state = 'completed'",
                                   [queue]) == N, what="all tasks completed")
        finally:
            w.stop(grace=10)
            self.assertTrue(w.join(20), "worker did not stop")

        self.assertFalse(barrier.broken, "four handlers never ran at once")
        self.assertEqual(peak[0], 4, "at most 4 (and at some point 4) handlers at once")
        got = self.rows(f"SELECT task_id, count(*) FROM {results} GROUP BY 1")
        self.assertEqual(sorted(r[0] for r in got), sorted(ids))
        self.assertTrue(all(r[1] == 1 for r in got), "a task was recorded twice")
        bad = self.rows("SELECT id, state, attempts, result FROM orch.tasks WHERE queue = %s"
                       " AND (state <> 'completed' OR attempts <> 1 OR (result->>'attempt')::int <> 1"
                       "      OR (result->>'i')::int <> (payload->>'i')::int)", [queue])
        self.assertEqual(bad, [])
        self.assertEqual(self.one("SELECT count(*) FROM orch_attempts a JOIN orch.tasks t ON t.id = a.task_id"
                                 " WHERE t.queue = %s AND a.outcome = 'completed'", [queue]), N)
        self.assertEqual((w.stats.claimed, w.stats.completed, w.stats.failed, w.stats.abandoned),
                         (N, N, 0, []))


if __name__ == "__main__":
    unittest.main()
