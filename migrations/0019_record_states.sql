-- Diff mode (`source.sync_mode = "diff"`): per sync and ledger epoch, what
-- each record was last delivered as. `identity` is a digest of the record's
-- mapped e-mail address (salted with the sync id: no address is kept) and
-- `fingerprint` the SHA-256 of the source record's canonical JSON. A run
-- sends a record only when its fingerprint differs from the one kept here.
CREATE TABLE record_states (
    sync_id       text NOT NULL,
    ledger_epoch  integer NOT NULL,
    identity      bytea NOT NULL CHECK (length(identity) = 32),
    fingerprint   bytea NOT NULL CHECK (length(fingerprint) = 32),
    delivered_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sync_id, ledger_epoch, identity)
);
