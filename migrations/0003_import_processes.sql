-- Brevo imports are asynchronous: `POST /contacts/import` answers 202 with a
-- process id, and only the process says later whether the rows arrived. Each
-- one a run started is kept here until the sweeper has seen it end.
CREATE TABLE import_processes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sync_id     text NOT NULL REFERENCES syncs (id),
    run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    process_id  bigint NOT NULL,
    -- Records the import carried.
    records     integer NOT NULL,
    -- `pending` until Brevo reports `completed`, `failed` or `cancelled`.
    status      text NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'completed', 'failed', 'cancelled')),
    -- Brevo's `info.import` counts (imported, updated, invalid_emails, duplicates).
    counts      jsonb,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    checked_at  timestamptz,
    checks      integer NOT NULL DEFAULT 0,
    UNIQUE (sync_id, process_id)
);
CREATE INDEX import_processes_pending ON import_processes (coalesce(checked_at, created_at))
    WHERE status = 'pending';
CREATE INDEX import_processes_by_run ON import_processes (run_id, id);
