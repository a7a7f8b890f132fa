-- The claim finds each workspace's last served time through the by-workspace
-- indexes. With statistics from before any run finished (a fresh store's first
-- burst, until autovacuum's next analyse) the planner took the by-sync
-- indexes, which hold the same rows, for as cheap: each claim then read every
-- finished and running run once per workspace (41 ms a claim at 5,000
-- finished runs and 50 workspaces, instead of 2). `sync_id IS NOT NULL` (true
-- of every row) keeps them for the reads that name a sync: only a condition on
-- sync_id proves that predicate, so a read by workspace cannot use them.
DROP INDEX runs_finished_by_sync;
CREATE INDEX runs_finished_by_sync ON runs (sync_id, finished_at DESC)
    WHERE status IN ('succeeded', 'failed') AND sync_id IS NOT NULL;
DROP INDEX runs_running_by_sync;
CREATE INDEX runs_running_by_sync ON runs (sync_id)
    WHERE status = 'running' AND sync_id IS NOT NULL;
