-- What `syncward status` shows per daemon: its workers, and how many are
-- busy, as of its last heartbeat.
ALTER TABLE processes ADD COLUMN workers_total integer NOT NULL DEFAULT 0;
ALTER TABLE processes ADD COLUMN workers_busy integer NOT NULL DEFAULT 0;
