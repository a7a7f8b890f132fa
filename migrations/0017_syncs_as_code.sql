-- Syncs as code. Every published definition is kept with its version (a run
-- records the version it ran; `sync show --version N` and `sync rollback`
-- read them). A sync whose file is gone is archived, never deleted: it keeps
-- its history and ledger and is restored by applying its file again. A full
-- resync starts a new ledger epoch: the epoch is part of every delivery key,
-- so keys of earlier epochs no longer match.
CREATE TABLE sync_versions (
    sync_id       text NOT NULL REFERENCES syncs (id),
    version       integer NOT NULL CHECK (version >= 1),
    definition    jsonb NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now(),
    -- Who published it: cli, api, or `migration` for the definitions stored
    -- before versions were kept.
    actor         text NOT NULL,
    PRIMARY KEY (sync_id, version)
);
INSERT INTO sync_versions (sync_id, version, definition, published_at, actor)
    SELECT id, version, definition, changed_at, 'migration' FROM syncs;

ALTER TABLE syncs DROP CONSTRAINT syncs_status_check;
ALTER TABLE syncs ADD CONSTRAINT syncs_status_check
    CHECK (status IN ('active', 'paused', 'archived'));
ALTER TABLE syncs ADD COLUMN archived_at timestamptz;
ALTER TABLE syncs ADD COLUMN ledger_epoch integer NOT NULL DEFAULT 0 CHECK (ledger_epoch >= 0);
-- The epoch (and version) a run ran with, set when it is claimed.
ALTER TABLE runs ADD COLUMN ledger_epoch integer NOT NULL DEFAULT 0;
