-- A request slot of the destination account's shared budget that a run
-- reserved before it gave its worker back (the account was booked further
-- ahead than a run may wait holding a worker): the run is queued to come back
-- just before it, and its first request leaves then, in its place in the
-- account's line instead of at the end of it.
ALTER TABLE runs ADD COLUMN slot_at timestamptz;
