-- Migration 0002 notified `syncward_syncs` on every change of `syncs`; nothing
-- has listened on that channel since the schedule moved into Postgres
-- (migration 0015): every apply, pause and breaker trip paid for a NOTIFY
-- no one read.
DROP TRIGGER syncs_notify_changed ON syncs;
DROP FUNCTION syncward_notify_sync_changed();
