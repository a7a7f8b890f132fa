-- The schedule lives in the store: each sync's next due time, advanced by the
-- same statement that enqueues its run, so any daemon can fire it and a tick
-- that fell while no daemon ran is still due when one starts. A narrow table
-- of its own: a busy second rewrites a thousand of these rows per statement,
-- and a wide `syncs` row (its definition) would be copied each time.
-- '-infinity' means not armed yet (a new or re-scheduled sync, or one just
-- resumed or restored): the next tick sets it to the schedule's next time
-- after now, enqueueing nothing; it also sorts first.
CREATE TABLE sync_schedule (
    sync_id      text PRIMARY KEY REFERENCES syncs (id),
    next_due_at  timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX sync_schedule_due ON sync_schedule (next_due_at);
INSERT INTO sync_schedule (sync_id) SELECT id FROM syncs;

-- A tick inserts up to a thousand queued runs in one statement: one wake-up
-- for them all, not one trigger call per row. Rows put back in the queue
-- (an update) still notify one by one.
DROP TRIGGER runs_notify_queued ON runs;
CREATE TRIGGER runs_notify_queued
    AFTER UPDATE OF status, scheduled_at ON runs
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION syncward_notify_run_queued();
CREATE FUNCTION syncward_notify_runs_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('syncward_runs', '');
    RETURN NULL;
END $$;
CREATE TRIGGER runs_notify_inserted
    AFTER INSERT ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION syncward_notify_runs_inserted();
