"""A worker process for the kill and SIGTERM tests.

    python3 worker_proc.py QUEUE WORKER_ID MODE [asyncio]

MODE kill:    tasks whose payload has "block" never finish (until the
              process is killed); the others write their result row in the
              completion's transaction.
MODE sigterm: every task waits until the table go_<QUEUE> has a row, then
              completes writing its result row.
Each handler start is recorded (autocommit) in executions_<QUEUE>.  Logs go
to stderr; run() installs the SIGTERM/SIGINT handlers.  With "asyncio", the
worker is an AsyncWorker and the handler a coroutine (MODE kill only).
"""

import logging
import os
import sys
import threading
import time

import psycopg

from support import DSN
from orchestrator_client import AsyncWorker, Worker

queue, worker_id, mode = sys.argv[1:4]
use_asyncio = sys.argv[4:5] == ["asyncio"]


def orphan_watch(parent=os.getppid()):
    """Exit when the test that started this process is gone."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(3)


threading.Thread(target=orphan_watch, daemon=True).start()
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")


def handler(task):
    with psycopg.connect(DSN, autocommit=True) as c:
        c.execute(f"INSERT INTO executions_{queue} VALUES (%s, %s, %s)", [task.id, worker_id, task.attempt])
        if mode == "kill" and task.payload.get("block"):
            while True:
                time.sleep(1)
        if mode == "sigterm":
            while not c.execute(f"SELECT EXISTS (SELECT FROM go_{queue})").fetchone()[0]:
                time.sleep(0.02)
    task.on_complete(lambda cur: cur.execute(
        f"INSERT INTO results_{queue} VALUES (%s, %s)", [task.id, worker_id]))
    return {"by": worker_id}


async def async_handler(task):
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await c.execute(f"INSERT INTO executions_{queue} VALUES (%s, %s, %s)", [task.id, worker_id, task.attempt])
    if mode == "kill" and task.payload.get("block"):
        while True:
            await asyncio.sleep(1)

    async def record(cur):
        await cur.execute(f"INSERT INTO results_{queue} VALUES (%s, %s)", [task.id, worker_id])
    task.on_complete(record)
    return {"by": worker_id}


if use_asyncio:
    import asyncio
    aw = AsyncWorker(DSN, queue, async_handler, concurrency=2, lease=2, worker_id=worker_id, grace=30)
    stats = asyncio.run(aw.run())
else:
    w = Worker(DSN, queue, handler, concurrency=2, lease=2, worker_id=worker_id, poll_max=0.2, grace=30)
    stats = w.run()
print(f"stats {stats}", flush=True)
