-- pgmq worker loop, one message: read it with a visibility timeout of 5
-- minutes (transaction 1), then delete it (transaction 2), as a pgmq worker
-- acknowledges one.  The read always returns one row (n = 0 when the queue
-- is empty) so that \gset never fails; the delete is skipped then.
SELECT count(*) AS n, max(msg_id) AS mid FROM pgmq.read(:queue, 300, 1)
\gset
\if :n > 0
SELECT pgmq.delete(:queue, :mid::bigint);
\endif
