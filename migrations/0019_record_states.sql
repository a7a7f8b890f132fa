-- Diff and mirror modes (`source.sync_mode`): per sync and ledger epoch,
-- what each record was last delivered as. `identity` is a digest of the
-- record's mapped e-mail address salted with the sync id and ledger epoch
-- (so it alone is the key) and `fingerprint`
-- the SHA-256 of the source record's canonical JSON; a run sends a record
-- only when its fingerprint differs from the one kept here. Mirror mode also
-- keeps the address (`email`, to take the contact off the lists once it
-- leaves the query; `syncward forget` erases it) and the last run whose
-- read saw it (`seen_run`): after a complete read, the rows it did not see
-- left the query.
CREATE TABLE record_states (
    sync_id       text NOT NULL,
    ledger_epoch  integer NOT NULL,
    identity      bytea NOT NULL CHECK (length(identity) = 32),
    fingerprint   bytea NOT NULL CHECK (length(fingerprint) = 32),
    delivered_at  timestamptz NOT NULL DEFAULT now(),
    email         text,
    seen_run      bigint,
    -- The identity alone: a page's lookup names nothing but its identities,
    -- so it can only probe this index, whatever the planner believes of a
    -- sync's row count (a table one run filled has no statistics yet).
    PRIMARY KEY (identity)
);
-- Mirror mode's pass over one sync's records after a complete read.
CREATE INDEX record_states_by_sync ON record_states (sync_id, ledger_epoch, identity);

-- Diff mode's fast path: per page (its ledger page id: sync, source, epoch
-- and the page's place in the read), the digest of the mapping and of the
-- records it held when last made clean. A page read again with the same
-- digest is skipped whole.
CREATE TABLE diff_pages (
    page    bytea PRIMARY KEY CHECK (length(page) = 32),
    digest  bytea NOT NULL CHECK (length(digest) = 32)
);
