-- pgmq worker loop, 100 messages: read up to 100 (transaction 1), then
-- delete them all with one call (transaction 2).
SELECT count(*) AS n, coalesce(array_agg(msg_id), '{}')::text AS ids FROM pgmq.read(:queue, 300, 100)
\gset
\if :n > 0
SELECT count(*) FROM pgmq.delete(:queue, :ids::bigint[]);
\endif
