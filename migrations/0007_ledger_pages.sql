-- Every claim is a batch row marked with the page its keys were read from
-- (`page` = SHA-256 of the sync, the source fingerprint and the page cursor;
-- see `store::ledger::page_id`). A key hashes its page cursor, so a key can
-- only ever have been claimed from its own page: a page with no batch row has
-- no key in the ledger, and its lookup needs no per-key probe.
--
-- A bulk call's keys live in its batch row alone (`per_key` false), packed:
-- 32 bytes each, one after the other (`packed_keys`; no array to build or
-- take apart, on either side, per claim and per lookup). Claiming a page is
-- one row, not a thousand. Per-record destinations still keep one
-- `deliveries` row per key (`per_key` true), pointing at their batch, whose
-- `keys` array lists them.
ALTER TABLE delivery_batches ADD COLUMN page bytea CHECK (page IS NULL OR octet_length(page) = 32);
ALTER TABLE delivery_batches ADD COLUMN per_key boolean NOT NULL DEFAULT true;
-- Sends spent on a batch-only claim's keys, this one included.
ALTER TABLE delivery_batches ADD COLUMN attempts integer NOT NULL DEFAULT 1 CHECK (attempts >= 1);
ALTER TABLE delivery_batches ADD COLUMN fence bigint;
ALTER TABLE delivery_batches ADD COLUMN packed_keys bytea;
ALTER TABLE delivery_batches ALTER COLUMN packed_keys SET STORAGE EXTERNAL;
ALTER TABLE delivery_batches ADD CONSTRAINT delivery_batches_packed_keys
    CHECK (per_key OR (packed_keys IS NOT NULL AND octet_length(packed_keys) % 32 = 0));
CREATE INDEX delivery_batches_page ON delivery_batches (page) WHERE page IS NOT NULL;

-- Syncs with keys claimed before pages were recorded: their lookups probe
-- every key, as before, since a missing page row proves nothing for them.
CREATE TABLE ledger_unpaged_syncs (sync_id text PRIMARY KEY);
INSERT INTO ledger_unpaged_syncs
SELECT sync_id FROM deliveries UNION SELECT sync_id FROM delivery_batches;

-- Every key's effective state: per-key rows (completed by their own row or
-- their batch), then batch-only keys (completed when any batch holding them
-- is; otherwise pending with the most attempts any holds).
CREATE OR REPLACE VIEW delivery_states AS
SELECT d.sync_id, d.key,
       CASE WHEN d.status = 'completed' OR b.completed_at IS NOT NULL
            THEN 'completed' ELSE 'pending' END AS status,
       d.attempts,
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
       b.attempts, b.result, b.run_id, b.fence, b.created_at, b.completed_at, b.id
 FROM delivery_batches b
 CROSS JOIN LATERAL (
   SELECT substring(b.packed_keys FROM i * 32 + 1 FOR 32)
   FROM generate_series(0, octet_length(b.packed_keys) / 32 - 1) AS i) AS k(key)
 WHERE NOT b.per_key
 ORDER BY b.sync_id, k.key, b.completed_at IS NOT NULL DESC, b.attempts DESC);
