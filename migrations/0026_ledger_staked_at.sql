-- The ledger's word for reserving a record's attempt before its call is
-- "stake" ("claim" is the run queue's): the column that says when a key was
-- staked is named for it. The view is made again for its column's name (a
-- view keeps the names it was created with).
ALTER TABLE deliveries RENAME COLUMN claimed_at TO staked_at;
DROP VIEW delivery_states;

-- Every key's effective state, as migration 0022 defined it.
CREATE VIEW delivery_states AS
SELECT d.sync_id, d.key,
       CASE WHEN d.status = 'completed' OR b.completed_at IS NOT NULL
            THEN 'completed' ELSE 'pending' END AS status,
       d.attempts - (NOT d.call_started)::int AS attempts,
       coalesce(d.result, b.result) AS result,
       d.run_id, d.fence, d.staked_at,
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
