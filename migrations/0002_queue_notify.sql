-- Wake idle workers when a run becomes claimable, and schedulers when a sync
-- changes. Payloads are empty: listeners re-read the tables.
CREATE FUNCTION syncward_notify_run_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('syncward_runs', '');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER runs_notify_queued
    AFTER INSERT OR UPDATE OF status, scheduled_at ON runs
    FOR EACH ROW EXECUTE FUNCTION syncward_notify_run_queued();

CREATE FUNCTION syncward_notify_sync_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('syncward_syncs', '');
    RETURN NULL;
END $$;

CREATE TRIGGER syncs_notify_changed
    AFTER INSERT OR UPDATE OR DELETE ON syncs
    FOR EACH STATEMENT EXECUTE FUNCTION syncward_notify_sync_changed();
