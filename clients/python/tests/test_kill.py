"""Exactly once under kill -9: a worker process (threaded, or on asyncio) is
killed while it holds claimed tasks; after their leases expire a second
worker finishes everything, and every task completes exactly once (result
rows are written in the completion's transaction)."""

import os
import signal
import subprocess
import sys
import unittest

from support import DSN, HERE, DBTestCase, connect, create_queue, states, uniq, wait_until
from orchestrator_client import Client, Worker

N = 9


class Kill(DBTestCase):
    def test_kill_9_then_second_worker(self):
        self.kill_then_second_worker([])

    def test_kill_9_asyncio_worker_then_second_worker(self):
        self.kill_then_second_worker(["asyncio"])

    def kill_then_second_worker(self, variant):
        queue = uniq("kill")
        create_queue(self.db, queue, {"lease": 2})
        for t in ("executions", "results"):
            self.db.execute(f"CREATE TABLE {t}_{queue} (task_id bigint, worker text, attempt int)")
        with Client(DSN) as c:
            # tasks 0, 3, 6 block in the first worker; with concurrency 2 it
            # finishes 1 and 2, then holds 0 and 3
            ids = c.enqueue_batch(queue, [{"i": i, "block": i % 3 == 0} for i in range(N)])
        blocked = [ids[0], ids[3]]
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_proc.py"), queue, "w-killed", "kill", *variant],
                             cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: self.rows(
                "SELECT id FROM orch.tasks WHERE queue = %s AND state = 'executing'"
                " AND lease_owner = 'w-killed' AND lease_expires_at > now() ORDER BY id", [queue]) == [
                    (i,) for i in blocked] and states(self.db, queue).get("completed") == 2,
                what="the first worker holding tasks 0 and 3")
            p.send_signal(signal.SIGKILL)
            p.wait(10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, -signal.SIGKILL)

        def handler(task):
            self.db_w.execute(f"INSERT INTO executions_{queue} VALUES (%s, 'w2', %s)", [task.id, task.attempt])
            task.on_complete(lambda cur: cur.execute(
                f"INSERT INTO results_{queue} VALUES (%s, 'w2', %s)", [task.id, task.attempt]))
            return {"by": "w2"}

        self.db_w = connect()
        self.addCleanup(self.db_w.close)
        w = Worker(DSN, queue, handler, concurrency=1, lease=2, worker_id="w2", poll_max=0.2)
        w.start()
        try:
            wait_until(lambda: states(self.db, queue) == {"completed": N}, timeout=40,
                       what="every task completed")
        finally:
            w.stop(grace=5)
            self.assertTrue(w.join(10))

        per_task = dict(self.rows(f"SELECT task_id, count(*) FROM results_{queue} GROUP BY 1"))
        self.assertEqual(sorted(per_task), sorted(ids))
        self.assertEqual(set(per_task.values()), {1}, "a task completed twice")
        # the tasks the killed worker held ran twice and were completed by w2
        # on attempt 2, after their first attempt ended as lease_expired
        for tid in blocked:
            self.assertEqual(self.rows(f"SELECT worker, attempt FROM results_{queue} WHERE task_id = %s", [tid]),
                             [("w2", 2)])
            self.assertEqual(self.rows("SELECT attempt, outcome, worker FROM orch_attempts"
                                       " WHERE task_id = %s ORDER BY attempt", [tid]),
                             [(1, "lease_expired", "w-killed"), (2, "completed", "w2")])
        # two finished before the kill, by the first worker
        self.assertEqual(self.one(f"SELECT count(*) FROM results_{queue} WHERE worker = 'w-killed'"), 2)
        self.assertEqual(self.one("SELECT count(*) FROM orch.tasks WHERE queue = %s AND result IS NULL", [queue]), 0)


if __name__ == "__main__":
    unittest.main()
