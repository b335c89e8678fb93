"""Graceful shutdown: stop() (or SIGTERM) stops claiming and lets in-flight
handlers finish; a handler that outlives the grace period is abandoned and
its task recovered after the lease expires."""

import os
import signal
import subprocess
import sys
import threading
import unittest

from support import DSN, HERE, DBTestCase, create_queue, states, uniq, wait_line, wait_until
from orchestrator_client import Client, Worker


class Shutdown(DBTestCase):
    def test_stop_finishes_in_flight_and_claims_no_more(self):
        queue = uniq("sd")
        create_queue(self.db, queue, {"lease": 30})
        with Client(DSN) as c:
            ids = c.enqueue_batch(queue, [{"i": i} for i in range(5)])
        release = threading.Event()

        def handler(task):
            if not release.wait(30):
                raise RuntimeError("never released")
            return {"i": task.payload["i"]}

        w = Worker(DSN, queue, handler, concurrency=2, poll_max=0.1)
        w.start()
        try:
            wait_until(lambda: states(self.db, queue) == {"executing": 2, "queued": 3}, what="two claimed")
            w.stop(grace=30)
            self.assertTrue(w.stopping)
            self.assertFalse(w.join(0.3), "run() returned while handlers were running")
            release.set()
            self.assertTrue(w.join(20), "worker did not stop after its handlers finished")
        finally:
            release.set()
            w.stop(grace=0)
        self.assertEqual(states(self.db, queue), {"completed": 2, "queued": 3})
        self.assertEqual([self.task(i)["state"] for i in ids[:2]], ["completed", "completed"])
        self.assertEqual((w.stats.claimed, w.stats.completed, w.stats.abandoned), (2, 2, []))

    def test_grace_expiry_leaves_task_to_lease_expiry(self):
        queue = uniq("sdg")
        create_queue(self.db, queue, {"lease": 2})
        with Client(DSN) as c:
            tid = c.enqueue(queue, {})
        release = threading.Event()

        def stuck(task):
            release.wait(60)
            return {"by": "stuck"}

        w1 = Worker(DSN, queue, stuck, lease=2, worker_id="w-stuck", poll_max=0.1)
        w1.start()
        try:
            wait_until(lambda: self.task(tid)["state"] == "executing", what="claim")
            w1.stop(grace=0.3)
            self.assertTrue(w1.join(10))
            self.assertEqual(w1.stats.abandoned, [tid])
            # no more heartbeats: the lease runs out while the handler still runs
            wait_until(lambda: self.one("SELECT lease_expires_at < now() FROM orch.tasks WHERE id = %s", [tid]),
                       timeout=10, what="lease expiry")
            w2 = Worker(DSN, queue, lambda task: {"by": "w2"}, worker_id="w2", poll_max=0.1)
            w2.start()
            wait_until(lambda: self.task(tid)["state"] == "completed", what="recovery by w2")
            w2.stop()
            self.assertTrue(w2.join(10))
        finally:
            release.set()
        t = self.task(tid)
        self.assertEqual((t["attempts"], t["result"], t["lease_owner"]), (2, {"by": "w2"}, "w2"))
        self.assertEqual(self.rows("SELECT attempt, outcome, error_class FROM orch_attempts"
                                   " WHERE task_id = %s ORDER BY attempt", [tid]),
                         [(1, "lease_expired", "TRANSIENT"), (2, "completed", None)])

    def test_sigterm_subprocess(self):
        queue = uniq("sdt")
        create_queue(self.db, queue, {"lease": 2})
        for t in ("executions", "results", "go"):
            self.db.execute(f"CREATE TABLE {t}_{queue} (task_id bigint, worker text, attempt int)")
        with Client(DSN) as c:
            ids = c.enqueue_batch(queue, [{"i": i} for i in range(2)])
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "worker_proc.py"), queue, "w-term", "sigterm"],
                             cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: self.one(f"SELECT count(*) FROM executions_{queue}") == 2,
                       what="both handlers running")
            p.send_signal(signal.SIGTERM)
            # the worker logs this once its claim loop has ended
            wait_line(p.stderr, "stopping: no more claims")
            with Client(DSN) as c:
                late = c.enqueue(queue, {"late": True})
            self.assertIsNone(p.poll(), "the worker exited before its handlers finished")
            self.db.execute(f"INSERT INTO go_{queue} VALUES (0)")
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("completed=2", out)
        self.assertEqual([self.task(i)["state"] for i in ids], ["completed", "completed"])
        self.assertEqual(self.task(late)["state"], "queued")
        self.assertEqual(self.one(f"SELECT count(*) FROM results_{queue}"), 2)


if __name__ == "__main__":
    unittest.main()
