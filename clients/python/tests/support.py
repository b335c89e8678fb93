"""Shared helpers of the client tests: a database from ORCH_TEST_DSN (the
extension created in it), unique queue names, and waiting on database state
with a deadline (never sleep-and-hope)."""

import os
import sys
import time
import uuid

import unittest

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
# the client from this checkout, unless the tests run against an installed
# package (ORCH_CLIENT_INSTALLED=1, as scripts/test-clients.sh does)
if os.environ.get("ORCH_CLIENT_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))

DSN = os.environ.get("ORCH_TEST_DSN", "")


def connect():
    return psycopg.connect(DSN, autocommit=True)


def uniq(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def rows(conn, sql, params=()):
    return conn.execute(sql, params).fetchall()


def one(conn, sql, params=()):
    r = conn.execute(sql, params).fetchone()
    return None if r is None else r[0]


def wait_until(pred, timeout=30.0, interval=0.02, what="condition"):
    """Poll pred() until it returns a true value (returned), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def create_queue(conn, name, settings):
    import json
    conn.execute("SELECT orch_create_queue(%s, %s::jsonb)", [name, json.dumps(settings)])


def states(conn, queue):
    """{state: count} of a queue's tasks."""
    return dict(rows(conn, "SELECT state, count(*) FROM orch.tasks WHERE queue = %s GROUP BY 1", [queue]))


class DBTestCase(unittest.TestCase):
    """self.db: an autocommit connection, closed after the test."""

    def setUp(self):
        self.db = connect()
        self.addCleanup(self.db.close)

    def one(self, sql, params=()):
        return one(self.db, sql, params)

    def rows(self, sql, params=()):
        return rows(self.db, sql, params)

    def task(self, task_id):
        """orch.tasks row of a task as a dict."""
        cur = self.db.execute("SELECT * FROM orch.tasks WHERE id = %s", [task_id])
        names = [d.name for d in cur.description]
        r = cur.fetchone()
        return None if r is None else dict(zip(names, r))


def wait_line(stream, needle, timeout=30.0):
    """Read lines of a subprocess stream until one contains needle; fail
    after timeout.  Returns the lines read."""
    import queue as _q
    import threading
    lines = _q.Queue()

    def pump():
        for line in stream:
            lines.put(line)
            if needle in line:
                return
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except _q.Empty:
            raise AssertionError(f"no line with {needle!r} within {timeout}s; got {seen!r}")
        if line is None:
            raise AssertionError(f"the stream ended without {needle!r}; got {seen!r}")
        seen.append(line)
        if needle in line:
            return seen
