-- A bulk call (one Brevo import, one webhook batch) delivers a whole batch of
-- keys with one answer. Its keys are claimed together with a batch row, and the
-- answer completes that one row instead of rewriting a thousand key rows (each
-- rewrite a new row version and index entry). A key is completed when its own
-- row says so or when its batch does: read keys through `delivery_states`.
CREATE TABLE delivery_batches (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sync_id      text NOT NULL,
    run_id       bigint,
    -- The batch's keys, so retention and a failed import can delete them
    -- through the ledger's primary key.
    keys         bytea[] NOT NULL,
    -- The destination's answer for the whole batch (a Brevo import's processId).
    result       jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz
);
CREATE INDEX delivery_batches_completed_at ON delivery_batches (completed_at)
    WHERE completed_at IS NOT NULL;
CREATE INDEX delivery_batches_open ON delivery_batches (created_at)
    WHERE completed_at IS NULL;

-- The batch a key was last claimed in (none for per-record destinations).
ALTER TABLE deliveries ADD COLUMN batch_id bigint;

-- Every key's effective state.
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
LEFT JOIN delivery_batches b ON b.id = d.batch_id;

-- The key leads the primary key: a page's lookup (`key = ANY(...)`) is then
-- one index descent per key whatever the statistics say. Led by the sync, a
-- new sync (no statistics yet) made the planner scan all of its keys per page.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_pkey;
ALTER TABLE deliveries ADD PRIMARY KEY (key, sync_id);
