-- bench/baseline_schema.sql: the baseline, a minimal hand-written queue.
--
-- What a team writes when it rolls its own PostgreSQL job queue: one table,
-- a state column, a lease (locked_by / locked_until), a partial index that
-- holds only the pending rows, claims with FOR UPDATE SKIP LOCKED, and
-- completion by UPDATE (finished rows are kept for inspection, not deleted).
-- No audit trail, no retry policy, no fencing token: it is the floor the
-- orchestrator is measured against.  Recreated before every workload.
DROP TABLE IF EXISTS jobs;
CREATE TABLE jobs (
    id           bigserial PRIMARY KEY,
    queue        text        NOT NULL,
    priority     integer     NOT NULL DEFAULT 0,
    payload      jsonb       NOT NULL,
    state        text        NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'running', 'done', 'failed')),
    attempts     integer     NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    locked_by    text,
    locked_until timestamptz,
    started_at   timestamptz,
    done_at      timestamptz,
    result       jsonb
);
-- Claim path: only pending rows are indexed, in claim order.
CREATE INDEX jobs_pending_idx ON jobs (queue, priority, created_at, id)
    WHERE state = 'pending';
