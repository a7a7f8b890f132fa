-- `[notify]`: one event per finished run, written where the run's end is
-- recorded and delivered by the sweeper (at least once, retried with
-- backoff), so a receiver that is down never holds a run.
CREATE TABLE run_notifications (
    id           bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES runs (id),
    sync_id      text NOT NULL REFERENCES syncs (id),
    event        jsonb NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_notifications_due ON run_notifications (next_at) WHERE delivered_at IS NULL;
