-- A claim finds each workspace's due runs through runs_claimable_by_workspace.
-- Analysed while nothing was queued (most of the time, for a store whose
-- bursts come and go between autovacuum's analyses), every index of queued
-- runs looked empty and so alike, and the planner took the smallest, by sync:
-- each claim then read the whole queue once per workspace it probed (250 ms a
-- claim at 10,000 queued runs over 50 workspaces, instead of 2-20). Now the
-- by-workspace index is the only one a claim's condition proves: the
-- queue-wide order by due time goes (no statement reads the queue in that
-- order since claims rotate across workspaces), and the one-queued-run-per-
-- sync rule names `sync_id IS NOT NULL` (true of every row), which only a
-- condition on sync_id proves (as in 0027).
DROP INDEX runs_claimable;
DROP INDEX runs_one_queued_per_sync;
CREATE UNIQUE INDEX runs_one_queued_per_sync ON runs (sync_id)
    WHERE status = 'queued' AND sync_id IS NOT NULL;
