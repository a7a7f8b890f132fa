-- What a person wrote when pausing a sync (`sync pause --reason`, the API's
-- and the page's reason): shown with the pause until it is resumed.
ALTER TABLE syncs ADD COLUMN paused_note text;

-- `runs cancel` of a running run: the run reads it with its next checkpoint
-- (the statement it writes anyway) and stops there, ended `skipped`
-- (`run_cancelled`). A queued run is ended at once instead.
ALTER TABLE runs ADD COLUMN cancel_requested_at timestamptz;
