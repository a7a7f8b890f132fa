-- The ledger by day (issue 23): completed keys are kept in one partition per
-- UTC day they completed on, and retention drops whole days (DETACH + DROP)
-- instead of DELETE, which left a week of dead rows for vacuum on the ledger's
-- busiest tables.
--
-- Why this shape: a partitioned table's unique indexes must hold its partition
-- key, yet a claim relies on (key, sync_id) being unique among open claims
-- (a second insert of a pending key means another run wrote: fenced). So the
-- partition key, `completed_on`, is 'infinity' for every row not completed
-- yet: all pending rows share one value and one partition (`*_pending`, small
-- and hot), where (key, sync_id) is unique exactly as before. Completing a row
-- sets `completed_on` to the day, which moves it into that day's partition;
-- lookups read the whole table (one index probe per partition). A completed
-- row never goes back to pending, and a pending row is never in a day
-- partition (CHECK), so dropping a day can only forget completed keys.
--
-- Day partitions are created ahead (today and the next days, by the sweeper
-- and `syncward migrate`, through `ledger_create_day`); a default partition
-- takes a row whose day has none (a sweeper that did not run for days), and
-- the purge deletes its rows past retention one by one, as before. Rows
-- carried over get partitions for their days (the last 60); older ones land
-- in the default partition and go at the next purge.

DROP VIEW delivery_states;
ALTER TABLE deliveries RENAME TO deliveries_unpartitioned;
ALTER TABLE delivery_batches RENAME TO delivery_batches_unpartitioned;

CREATE SEQUENCE delivery_batch_ids;
SELECT setval('delivery_batch_ids', coalesce(max(id), 0) + 1, false)
FROM delivery_batches_unpartitioned;

-- The claims of pages (see migrations 0004 and 0007).
CREATE TABLE delivery_batches (
    id           bigint NOT NULL DEFAULT nextval('delivery_batch_ids'),
    sync_id      text NOT NULL,
    run_id       bigint,
    keys         bytea[] NOT NULL,
    result       jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    page         bytea CONSTRAINT delivery_batches_page_check
                       CHECK (page IS NULL OR octet_length(page) = 32),
    per_key      boolean NOT NULL DEFAULT true,
    attempts     integer NOT NULL DEFAULT 1
                       CONSTRAINT delivery_batches_attempts_check CHECK (attempts >= 0),
    fence        bigint,
    packed_keys  bytea,
    -- The UTC day the batch completed on; 'infinity' while it is open.
    completed_on date NOT NULL DEFAULT 'infinity',
    CONSTRAINT delivery_batches_packed_keys
        CHECK (per_key OR (packed_keys IS NOT NULL AND octet_length(packed_keys) % 32 = 0)),
    CONSTRAINT delivery_batches_completed_on
        CHECK ((completed_at IS NULL) = (completed_on = 'infinity'))
) PARTITION BY RANGE (completed_on);
ALTER SEQUENCE delivery_batch_ids OWNED BY delivery_batches.id;
ALTER TABLE delivery_batches ALTER COLUMN keys SET STORAGE EXTERNAL;
ALTER TABLE delivery_batches ALTER COLUMN packed_keys SET STORAGE EXTERNAL;

-- The delivery ledger's per-key rows (see migration 0001).
CREATE TABLE deliveries (
    sync_id      text NOT NULL,
    key          bytea NOT NULL CONSTRAINT deliveries_key_check CHECK (octet_length(key) = 32),
    status       text NOT NULL
                 CONSTRAINT deliveries_status_check CHECK (status IN ('pending', 'completed')),
    attempts     integer NOT NULL DEFAULT 1
                 CONSTRAINT deliveries_attempts_check CHECK (attempts >= 0),
    result       jsonb,
    run_id       bigint,
    fence        bigint NOT NULL,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    batch_id     bigint,
    -- The UTC day the key completed on; 'infinity' while it is pending.
    completed_on date NOT NULL DEFAULT 'infinity',
    CONSTRAINT deliveries_check CHECK ((status = 'completed') = (completed_at IS NOT NULL)),
    CONSTRAINT deliveries_completed_on CHECK ((status = 'completed') = (completed_on <> 'infinity'))
) PARTITION BY RANGE (completed_on);

CREATE TABLE deliveries_pending PARTITION OF deliveries
    FOR VALUES FROM ('infinity') TO (MAXVALUE);
CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT;
CREATE TABLE delivery_batches_pending PARTITION OF delivery_batches
    FOR VALUES FROM ('infinity') TO (MAXVALUE);
CREATE TABLE delivery_batches_default PARTITION OF delivery_batches DEFAULT;

-- Creates the partitions of one UTC day in both tables, unless they exist.
-- Fails (check_violation) when the default partition already holds rows of
-- that day. Concurrent callers take turns on a transaction advisory lock.
CREATE FUNCTION ledger_create_day(day date) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    created boolean := false;
    parent text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('syncward ledger days'));
    FOREACH parent IN ARRAY ARRAY['deliveries', 'delivery_batches'] LOOP
        IF to_regclass(format('%I', parent || '_' || to_char(day, 'YYYY_MM_DD'))) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           parent || '_' || to_char(day, 'YYYY_MM_DD'), parent, day, day + 1);
            created := true;
        END IF;
    END LOOP;
    RETURN created;
END $$;

-- Partitions for the days of the rows carried over (the last 60), today and
-- the next three.
SELECT ledger_create_day(d)
FROM (SELECT (completed_at AT TIME ZONE 'UTC')::date AS d
      FROM deliveries_unpartitioned WHERE completed_at IS NOT NULL
      UNION
      SELECT (completed_at AT TIME ZONE 'UTC')::date
      FROM delivery_batches_unpartitioned WHERE completed_at IS NOT NULL
      UNION
      SELECT generate_series((now() AT TIME ZONE 'UTC')::date,
                             (now() AT TIME ZONE 'UTC')::date + 3, interval '1 day')::date) AS days
WHERE d >= (now() AT TIME ZONE 'UTC')::date - 60
ORDER BY d;

INSERT INTO delivery_batches
    (id, sync_id, run_id, keys, result, created_at, completed_at, page, per_key, attempts,
     fence, packed_keys, completed_on)
SELECT id, sync_id, run_id, keys, result, created_at, completed_at, page, per_key, attempts,
       fence, packed_keys,
       coalesce((completed_at AT TIME ZONE 'UTC')::date, 'infinity')
FROM delivery_batches_unpartitioned;

-- A per-key row whose batch completed is completed (as the view said): it is
-- carried over completed, so it goes with its day.
INSERT INTO deliveries
    (sync_id, key, status, attempts, result, run_id, fence, claimed_at, completed_at,
     batch_id, completed_on)
SELECT d.sync_id, d.key,
       CASE WHEN d.status = 'completed' OR b.completed_at IS NOT NULL
            THEN 'completed' ELSE 'pending' END,
       d.attempts, coalesce(d.result, b.result), d.run_id, d.fence, d.claimed_at,
       coalesce(d.completed_at, b.completed_at), d.batch_id,
       coalesce((coalesce(d.completed_at, b.completed_at) AT TIME ZONE 'UTC')::date, 'infinity')
FROM deliveries_unpartitioned d
LEFT JOIN delivery_batches_unpartitioned b ON b.id = d.batch_id;

DROP TABLE deliveries_unpartitioned;
DROP TABLE delivery_batches_unpartitioned;

-- (key, sync_id) is unique among pending rows (one partition); the key leads,
-- as in migration 0004, so a page's lookup is one descent per key and partition.
ALTER TABLE deliveries ADD PRIMARY KEY (key, sync_id, completed_on);
ALTER TABLE delivery_batches ADD PRIMARY KEY (id, completed_on);
CREATE INDEX deliveries_completed_at ON deliveries (completed_at) WHERE status = 'completed';
CREATE INDEX delivery_batches_completed_at ON delivery_batches (completed_at)
    WHERE completed_at IS NOT NULL;
CREATE INDEX delivery_batches_open ON delivery_batches (created_at) WHERE completed_at IS NULL;
CREATE INDEX delivery_batches_page ON delivery_batches (page) WHERE page IS NOT NULL;

-- Every key's effective state (as migration 0007 defined it).
CREATE VIEW delivery_states AS
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
