-- One claim of 10 of queue :queue, rolled back (the queue's state, its
-- fairness cursor among it, is the same for every claim): what a claim costs.
BEGIN;
SELECT count(*) FROM orch_dequeue(:queue, 'bench', 10);
ROLLBACK;
