-- Claims rotate across workspaces: each workspace's oldest due runs, and when
-- it was last served (its newest running or finished run), found per
-- workspace through these indexes instead of one queue-wide scan.
CREATE INDEX runs_claimable_by_workspace ON runs (workspace_id, scheduled_at, id)
    WHERE status = 'queued';
CREATE INDEX runs_running_by_workspace ON runs (workspace_id, started_at)
    WHERE status = 'running';
