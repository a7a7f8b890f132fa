-- A run's row is written several times (claim, lease, progress, heartbeat,
-- finish). Room on each page lets the writes that touch no indexed column
-- (lease, progress, heartbeat) stay on the page without new index entries.
ALTER TABLE runs SET (fillfactor = 70);

-- Call the notify function only for rows that became claimable, not on every
-- claim and finish.
DROP TRIGGER runs_notify_queued ON runs;
CREATE TRIGGER runs_notify_queued
    AFTER INSERT OR UPDATE OF status, scheduled_at ON runs
    FOR EACH ROW WHEN (NEW.status = 'queued')
    EXECUTE FUNCTION syncward_notify_run_queued();
