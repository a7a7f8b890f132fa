-- A claim reserves a record's attempt; the attempt is spent only once the
-- call may have left (guarantee 4: only attempts whose outcome no run
-- observed count). A claim is written with `call_started = false` and marked
-- `true` as its call goes out, so a process killed between the claim and the
-- call leaves a claim that spent nothing: its keys' attempts read one less.
-- Rows written otherwise (answers, given-back attempts) record calls made.
ALTER TABLE deliveries ADD COLUMN call_started boolean NOT NULL DEFAULT true;
ALTER TABLE delivery_batches ADD COLUMN call_started boolean NOT NULL DEFAULT true;

-- Every key's effective state, as migration 0016 defined it, with the
-- attempts a claim whose call never left did not spend taken off.
CREATE OR REPLACE VIEW delivery_states AS
SELECT d.sync_id, d.key,
       CASE WHEN d.status = 'completed' OR b.completed_at IS NOT NULL
            THEN 'completed' ELSE 'pending' END AS status,
       d.attempts - (NOT d.call_started)::int AS attempts,
       coalesce(d.result, b.result) AS result,
       d.run_id, d.fence, d.claimed_at,
       coalesce(d.completed_at, b.completed_at) AS completed_at,
       d.batch_id
FROM deliveries d
LEFT JOIN delivery_batches b ON b.id = d.batch_id
UNION ALL
(SELECT DISTINCT ON (b.sync_id, k.key)
       b.sync_id, k.key,
       CASE WHEN b.completed_at IS NOT NULL THEN 'completed' ELSE 'pending' END,
       b.attempts - (NOT b.call_started)::int, b.result, b.run_id, b.fence, b.created_at,
       b.completed_at, b.id
 FROM delivery_batches b
 CROSS JOIN LATERAL (
   SELECT substring(b.packed_keys FROM i * 32 + 1 FOR 32)
   FROM generate_series(0, octet_length(b.packed_keys) / 32 - 1) AS i) AS k(key)
 WHERE NOT b.per_key
 ORDER BY b.sync_id, k.key, b.completed_at IS NOT NULL DESC, b.attempts DESC);
