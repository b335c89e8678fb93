"""Heartbeats keep a long handler's lease alive past the lease length, and
a cancellation reaches the handler through the heartbeat."""

import threading
import unittest

from support import DSN, DBTestCase, create_queue, uniq, wait_until
from orchestrator_client import Client, Worker


class Heartbeat(DBTestCase):
    def test_lease_renewed_past_its_length(self):
        queue = uniq("hb")
        create_queue(self.db, queue, {"lease": 2})
        with Client(DSN) as c:
            tid = c.enqueue(queue, {"long": True})
        release = threading.Event()
        seen = []

        def handler(task):
            seen.append(task.attempt)
            if not release.wait(60):
                raise RuntimeError("the test never released the handler")
            return {"done": True}

        w = Worker(DSN, queue, handler, lease="2 seconds", worker_id="hb-worker")
        w.start()
        try:
            first = wait_until(lambda: self.rows(
                "SELECT claimed_at, lease_expires_at FROM orch.tasks WHERE id = %s AND state = 'executing'",
                [tid]), what="the task claimed")[0]
            claimed_at, first_expiry = first
            self.assertLessEqual((first_expiry - claimed_at).total_seconds(), 2.001)
            # Wait until the clock is past the first lease's end while the
            # task is still executing on a renewed lease.
            wait_until(lambda: self.one(
                "SELECT now() > %s + interval '0.5 s' AND lease_expires_at > now() AND lease_expires_at > %s"
                " FROM orch.tasks WHERE id = %s AND state = 'executing'",
                [first_expiry, first_expiry, tid]), timeout=20, what="a renewed lease past the first one")
            # Nobody can take it over: a claim finds nothing to recover.
            self.assertEqual(self.one("SELECT count(*) FROM orch_dequeue(%s, 'intruder')", [queue]), 0)
            release.set()
            wait_until(lambda: self.task(tid)["state"] == "completed", what="completion")
        finally:
            release.set()
            w.stop(grace=5)
            self.assertTrue(w.join(10))
        t = self.task(tid)
        self.assertEqual((t["attempts"], t["failures"], t["result"], t["lease_owner"]),
                         (1, 0, {"done": True}, "hb-worker"))
        self.assertEqual(seen, [1])
        self.assertEqual(self.rows("SELECT outcome FROM orch_attempts WHERE task_id = %s", [tid]),
                         [("completed",)])

    def test_cancel_seen_by_heartbeat(self):
        queue = uniq("hbc")
        create_queue(self.db, queue, {"lease": 2})
        with Client(DSN) as c:
            tid = c.enqueue(queue, {})
        reasons = []

        def handler(task):
            # waits for the worker to signal it: set on the heartbeat after
            # the cancellation (no sleep)
            if not task.cancel_event.wait(30):
                raise RuntimeError("cancellation never reached the handler")
            reasons.append(task.cancel_reason)
            return {"should": "not be recorded"}

        w = Worker(DSN, queue, handler, lease=2)
        w.start()
        try:
            wait_until(lambda: self.task(tid)["state"] == "executing", what="claim")
            with Client(DSN) as c:
                self.assertEqual(c.cancel(tid, "test cancels it"), "cancelled")
            wait_until(lambda: reasons, what="the handler to see the cancellation")
        finally:
            w.stop(grace=5)
            self.assertTrue(w.join(10))
        self.assertEqual(reasons, ["cancelled"])
        t = self.task(tid)
        self.assertEqual((t["state"], t["result"]), ("cancelled", None))
        self.assertEqual((w.stats.completed, w.stats.failed), (0, 0))


if __name__ == "__main__":
    unittest.main()
