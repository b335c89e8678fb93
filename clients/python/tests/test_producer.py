"""Producer helpers, database errors with their SQLSTATE, a workflow run
driven by a worker, and the LISTEN/NOTIFY wake-up."""

import json
import time
import unittest

import psycopg

from support import DSN, DBTestCase, create_queue, uniq, wait_until
from orchestrator_client import (Client, IdempotencyConflict, InvalidTransition, NotFound,
                                 OrchestratorError, TerminalState, Worker)


class Producer(DBTestCase):
    def test_enqueue_options_and_idempotency(self):
        queue = uniq("pe")
        k1 = uniq("k1")    # idempotency keys are unique per tenant, across queues
        with Client(DSN) as c:
            a = c.enqueue(queue, {"to": "a"}, idempotency_key=k1, priority=3, correlation_id="req-1",
                          max_attempts=2, timeout=60)
            self.assertEqual(c.enqueue(queue, {"to": "a"}, idempotency_key=k1), a)
            with self.assertRaises(IdempotencyConflict) as cm:
                c.enqueue(queue, {"to": "b"}, idempotency_key=k1)
            self.assertEqual(cm.exception.sqlstate, "OR004")
            self.assertIsInstance(cm.exception.__cause__, psycopg.Error)
            st = c.status(a)
            self.assertEqual((st["state"], st["priority"], st["queue"]), ("queued", 3, queue))
            self.assertEqual(self.task(a)["correlation_id"], "req-1")
            self.assertEqual(self.task(a)["max_attempts"], 2)
            with self.assertRaises(TypeError):
                c.enqueue(queue, {}, no_such_option=1)

    def test_enqueue_batch_order_and_keys(self):
        queue = uniq("pb")
        payloads = [{"n": i} for i in range(20)]
        with Client(DSN) as c:
            ids = c.enqueue_batch(queue, payloads, priority=1)
            self.assertEqual(len(set(ids)), 20)
            self.assertEqual([self.task(i)["payload"] for i in ids], payloads)
            b1 = uniq("b1")
            keyed = c.enqueue_batch(queue, [{"k": 1}, {"k": 2}], idempotency_keys=[b1, None])
            self.assertEqual(c.enqueue_batch(queue, [{"k": 1}], idempotency_keys=[b1]), keyed[:1])
            with self.assertRaises(OrchestratorError) as cm:
                c.enqueue_batch(queue, [{"k": 1}], idempotency_keys=["x", "y"])
            self.assertEqual(cm.exception.sqlstate, "22023")

    def test_errors_carry_sqlstate(self):
        with Client(DSN) as c:
            with self.assertRaises(NotFound) as cm:
                c.status(987654321)
            self.assertEqual(cm.exception.sqlstate, "OR005")
            self.assertIn("987654321", cm.exception.message)
            with self.assertRaises(NotFound):
                c.start(uniq("no_such_workflow"), {})
            tid = c.enqueue(uniq("pc"), {})
            self.assertEqual(c.cancel(tid, "not needed"), "cancelled")
            with self.assertRaises(TerminalState) as cm:
                c.cancel(tid, "again")
            self.assertEqual(cm.exception.sqlstate, "OR002")
            with self.assertRaises(OrchestratorError) as cm:
                c.enqueue("bad queue name!", {})
            self.assertEqual(cm.exception.sqlstate, "22023")
        # a claim error is not swallowed by the worker loop: run() raises it
        w = Worker(DSN, "bad queue name!", lambda t: None)
        with self.assertRaises(OrchestratorError) as cm:
            w.run(install_signal_handlers=False)
        self.assertEqual(cm.exception.sqlstate, "22023")

    def test_client_on_callers_connection_joins_its_transaction(self):
        queue = uniq("px")
        conn = psycopg.connect(DSN)
        self.addCleanup(conn.close)
        c = Client(conn)
        tid = c.enqueue(queue, {"x": 1})
        conn.rollback()
        with self.assertRaises(NotFound):
            Client(self.db).status(tid)

    def test_workflow_run(self):
        name, queue = uniq("wf"), uniq("wfq")
        spec = {"policies": {"queue": queue},
                "steps": [{"step_id": "a", "handler": "double"},
                          {"step_id": "b", "handler": "double", "depends_on": ["a"]}]}
        self.db.execute("SELECT orch_define(%s, %s::jsonb)", [name, json.dumps(spec)])
        self.db.execute("SELECT orch_publish(%s, 1)", [name])

        def handler(task):
            p = task.payload
            x = p["deps"]["a"]["x"] if p["deps"] else p["input"]["x"]
            return {"x": x * 2}

        with Client(DSN) as c:
            run = c.start(name, {"x": 5}, idempotency_key=f"{name}-1", correlation_id="wf-1")
            self.assertEqual(c.start(name, {"x": 5}, idempotency_key=f"{name}-1"), run)
            with self.assertRaises(IdempotencyConflict):
                c.start(name, {"x": 6}, idempotency_key=f"{name}-1")
            self.assertEqual(c.run_status(run)["run"]["state"], "running")
            w = Worker(DSN, queue, handler, poll_max=0.1)
            w.start()
            try:
                wait_until(lambda: c.run_status(run)["run"]["state"] == "succeeded", what="run succeeded")
            finally:
                w.stop()
                self.assertTrue(w.join(10))
            doc = c.run_status(run)
            self.assertEqual({s["step_id"]: s["output"] for s in doc["steps"]}, {"a": {"x": 10}, "b": {"x": 20}})
            self.assertEqual(doc["run"]["correlation_id"], "wf-1")
            with self.assertRaises(NotFound) as cm:
                c.run_status(987654321)
            self.assertEqual(cm.exception.sqlstate, "OR005")

    def test_notify_wakes_the_worker(self):
        queue = uniq("pn")
        create_queue(self.db, queue, {})
        app = uniq("notify_worker")
        # polls only every 60 s: only the NOTIFY can make it claim quickly
        w = Worker(DSN, queue, lambda t: {"woken": True}, poll_min=60, poll_max=60, wait=None,
                   connect_kwargs={"application_name": app})
        w.start()
        try:
            # the claim connection has listened and run an (empty) claim
            wait_until(lambda: self.one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
                " AND query LIKE '%%orch_dequeue%%'", [app]) == 1, what="the worker idle after a claim")
            with psycopg.connect(DSN, autocommit=True) as p:
                p.execute("SET orchestrator.notify = on")
                tid = Client(p).enqueue(queue, {})
            t0 = time.monotonic()
            wait_until(lambda: self.task(tid)["state"] == "completed", timeout=15,
                       what="the notified worker to complete the task")
            self.assertLess(time.monotonic() - t0, 15)
        finally:
            w.stop()
            self.assertTrue(w.join(10))

    def test_waiting_claim_wakes_the_worker(self):
        queue = uniq("pw")
        create_queue(self.db, queue, {})
        app = uniq("waiting_worker")
        # polls every 60 s and waits in the claim for 60 s: only the commit can wake it
        w = Worker(DSN, queue, lambda t: {"woken": True}, poll_min=60, poll_max=60, wait=60,
                   connect_kwargs={"application_name": app})
        w.start()
        try:
            wait_until(lambda: self.one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND state = 'active'"
                " AND query LIKE '%%orch_dequeue%%'", [app]) == 1, what="the worker waiting in a claim")
            tid = Client(self.db).enqueue(queue, {})
            wait_until(lambda: self.task(tid)["state"] == "completed", timeout=15,
                       what="the waiting worker to complete the task")
        finally:
            w.stop()
            self.assertTrue(w.join(10), "stop() ends the claim waiting for 60 s")


if __name__ == "__main__":
    unittest.main()
