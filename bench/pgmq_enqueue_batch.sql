-- pgmq: send 1,000 messages in one transaction (pgmq.send_batch), the array
-- built server-side by the same expression as the other sides'.
SELECT count(*) FROM pgmq.send_batch(:queue, ARRAY(SELECT jsonb_build_object('kind', 'email', 'n', g)
                                                       FROM generate_series(1, 1000) g));
