-- `syncward trace ADDRESS` (issue 63): which run sent what for one address,
-- and what came back, without keeping any address in clear. Every stake of
-- a call writes one row beside its batch row, in the same statement: the
-- call's records' addresses as keyed digests (HMAC-SHA-256 under this
-- install's key, first 8 bytes each) and what was sent for each (the
-- mapped record without its address), in the call's order, which is the
-- order of its batch's keys (`delivery_batches.packed_keys`, or `keys` for
-- per-record calls): a record's delivery key is its batch's at the same
-- place, and goes when the batch does. A small Bloom filter of the digests lets a lookup read ~1 KB a call
-- and open the rest only where the address may be. Kept as long as the
-- ledger keeps completed keys (`ledger.retention`); `forget` blanks an
-- address's entries.

-- The install's key for the digests, made once here from Postgres' strong
-- random source. Whoever holds the store can digest a guessed address, as
-- they could read it anywhere else syncward keeps one; a copy of this table
-- alone cannot.
CREATE TABLE trace_key (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    key      bytea NOT NULL CHECK (octet_length(key) = 32)
);
INSERT INTO trace_key (key)
SELECT decode(replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex');

CREATE TABLE trace_pages (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sync_id    text NOT NULL,
    run_id     bigint NOT NULL,
    -- The call's stake (`delivery_batches.id`): its keys, answer and state.
    -- None for a mirror run's removals (`removed`).
    batch_id   bigint,
    removed    boolean NOT NULL DEFAULT false CHECK (removed = (batch_id IS NULL)),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Bit i set for each digest's five positions (h1 + i * h2) mod bits.
    bloom      bytea NOT NULL CHECK (octet_length(bloom) >= 8),
    digests    bytea NOT NULL CHECK (octet_length(digests) % 8 = 0),
    -- What was sent for each record but its address, as JSON in columns
    -- (`store::trace::SentColumns`): the attribute names once, each
    -- record's values and consent state, the lists by consent state.
    sent       bytea NOT NULL
);
-- Random bytes do not compress: stored out of line as they are.
ALTER TABLE trace_pages ALTER COLUMN digests SET STORAGE EXTERNAL;
CREATE INDEX trace_pages_by_sync ON trace_pages (sync_id, id);
CREATE INDEX trace_pages_created ON trace_pages (created_at);

-- What was sent compresses well; lz4 is far cheaper than the default where
-- the server has it.
DO $$
BEGIN
    ALTER TABLE trace_pages ALTER COLUMN sent SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    NULL;
END $$;
