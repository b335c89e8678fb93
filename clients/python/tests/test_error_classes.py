"""Each handler exception reaches orch_fail with its error class, and the
retry decision of SPEC section 4 follows: retryable classes are retried
(and exhaust max_attempts), NON_RETRYABLE and COMPENSATION_REQUIRED become
dead letters at once."""

import datetime
import unittest

from support import DSN, DBTestCase, create_queue, uniq, wait_until
from orchestrator_client import (Client, CompensationRequiredError, DependencyFailedError,
                                 NonRetryableError, RateLimitedError, RetryableError,
                                 TransientError, Worker)

# kind -> (exception on the first attempt, or every attempt with "always")
FIRST_ATTEMPT = {
    "transient_once": lambda: TransientError("connection reset"),
    "retryable_once": lambda: RetryableError("try again"),
    "dependency_once": lambda: DependencyFailedError("db down"),
    "rate_limited_once": lambda: RateLimitedError("HTTP 429", retry_after=0.2),
    "plain_once": lambda: ValueError("unexpected"),          # default class RETRYABLE
}


def handler(task):
    kind = task.payload["kind"]
    if kind == "non_retryable":
        raise NonRetryableError("invalid input: no 'to'")
    if kind == "compensation":
        raise CompensationRequiredError("charged but not shipped")
    if kind == "always_transient":
        raise TransientError(f"still down (attempt {task.attempt})")
    if kind in FIRST_ATTEMPT and task.attempt == 1:
        raise FIRST_ATTEMPT[kind]()
    return {"ok": True, "attempt": task.attempt}


class ErrorClasses(DBTestCase):
    def test_mapping_retry_and_dead_letters(self):
        queue = uniq("ec")
        create_queue(self.db, queue, {"lease": 30, "max_attempts": 3, "backoff": "fixed",
                                      "initial_delay": 0.05, "max_delay": 0.05})
        kinds = ["non_retryable", "compensation", "always_transient", *FIRST_ATTEMPT]
        with Client(DSN) as c:
            ids = dict(zip(kinds, c.enqueue_batch(queue, [{"kind": k} for k in kinds])))

        w = Worker(DSN, queue, handler, concurrency=2, poll_max=0.1)
        w.start()
        try:
            wait_until(lambda: self.one(
                "SELECT count(*) FROM orch.tasks WHERE queue = %s AND state IN ('completed', 'failed')",
                [queue]) == len(kinds), what="every task finished")
        finally:
            w.stop(grace=5)
            self.assertTrue(w.join(10))

        def attempt_classes(kind):
            return [r[0] for r in self.rows(
                "SELECT error_class FROM orch_attempts WHERE task_id = %s ORDER BY attempt", [ids[kind]])]

        # dead letters at once
        for kind, cls, reason in [("non_retryable", "NON_RETRYABLE", "non_retryable"),
                                  ("compensation", "COMPENSATION_REQUIRED", "compensation_required")]:
            t = self.task(ids[kind])
            self.assertEqual((t["state"], t["reason_code"], t["attempts"], t["last_error_class"]),
                             ("failed", reason, 1, cls), kind)
            self.assertIn("Error: ", t["last_error"])
            self.assertEqual(self.one("SELECT reason FROM orch_dead_letters WHERE task_id = %s", [ids[kind]]),
                             reason)
        # retried until max_attempts (3)
        t = self.task(ids["always_transient"])
        self.assertEqual((t["state"], t["reason_code"], t["attempts"]),
                         ("failed", "max_attempts_exhausted", 3))
        self.assertEqual(attempt_classes("always_transient"), ["TRANSIENT"] * 3)
        # retried once, then completed on attempt 2
        for kind, cls in [("transient_once", "TRANSIENT"), ("retryable_once", "RETRYABLE"),
                          ("dependency_once", "DEPENDENCY_FAILED"), ("rate_limited_once", "RATE_LIMITED"),
                          ("plain_once", "RETRYABLE")]:
            t = self.task(ids[kind])
            self.assertEqual((t["state"], t["attempts"], t["result"]),
                             ("completed", 2, {"ok": True, "attempt": 2}), kind)
            self.assertEqual(attempt_classes(kind), [cls, None], kind)
        # RATE_LIMITED: retry_after replaced the policy's 50 ms delay
        fin, retry_at = self.rows("SELECT finished_at, retry_at FROM orch_attempts WHERE task_id = %s"
                                  " AND attempt = 1", [ids["rate_limited_once"]])[0]
        self.assertGreaterEqual(retry_at - fin, datetime.timedelta(milliseconds=150))
        # a plain exception carries its traceback in the error text
        err = self.one("SELECT error FROM orch_attempts WHERE task_id = %s AND attempt = 1", [ids["plain_once"]])
        self.assertTrue(err.startswith("ValueError: unexpected"), err)
        self.assertIn("Traceback", err)
        self.assertEqual((w.stats.completed, w.stats.failed), (5, 2 + 3 + 5))


if __name__ == "__main__":
    unittest.main()
