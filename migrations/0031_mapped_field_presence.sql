-- How often each mapped attribute's source field held a value (present and
-- not null) in a sync's last complete read: the vanished-field guard compares
-- a run's records with it before sending (`mapped_field_vanished`). Counts
-- only, no values. A row holds for the field it was measured on: an
-- attribute mapped from another field since is not compared with it.
CREATE TABLE mapped_field_presence (
    sync_id     text NOT NULL REFERENCES syncs (id),
    attribute   text NOT NULL,
    field       text NOT NULL,
    present     bigint NOT NULL CHECK (present >= 0),
    read        bigint NOT NULL CHECK (read >= present),
    run_id      bigint NOT NULL,
    measured_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sync_id, attribute)
);
