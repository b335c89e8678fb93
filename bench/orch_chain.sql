-- The hand-made equivalent of the 5-step linear workflow: a chain of bare
-- tasks where completing one enqueues the next (payload "left": tasks
-- still to come).  orch_dequeue (transaction 1); orch_complete and, unless
-- it was the last, orch_enqueue of the successor (transaction 2, one
-- statement) -- what a workflow step's completion does, without the
-- workflow layer.
SELECT count(*) AS n, max(task_id) AS tid, max(lease_token::text) AS tok,
       max((payload ->> 'left')::int) AS left_
  FROM orch_dequeue(:queue, 'w' || :client_id, 1)
\gset
\if :n > 0
SELECT orch_complete(:tid, :tok::uuid, '{}'),
       CASE WHEN (:left_)::int > 1
            THEN orch_enqueue(:queue, jsonb_build_object('left', (:left_)::int - 1)) END;
\endif
