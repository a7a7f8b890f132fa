-- The schedule lives in the store: each active sync's next due time, advanced
-- by the same statement that enqueues its run, so any daemon can fire it and a
-- tick that fell while no daemon ran is still due when one starts. NULL means
-- not yet armed (a new or re-scheduled sync, or one just resumed): the next
-- tick sets it to the schedule's next time after now, enqueueing nothing.
ALTER TABLE syncs ADD COLUMN next_due_at timestamptz;
CREATE INDEX syncs_due ON syncs (next_due_at) WHERE status = 'active';
