-- When each workspace last had a run claimed: the claim's fairness order
-- (served longest ago first), stamped by the claim itself. It replaces
-- reading each workspace's running and finished runs on every claim (three
-- index probes per workspace; most of a claim's time in a burst of 10,000
-- due runs over 50 workspaces), so a claim now probes the queue only of the
-- workspaces it walks in that order, until it has enough.
ALTER TABLE workspaces ADD COLUMN served_at timestamptz;
UPDATE workspaces ws SET served_at = greatest(
    (SELECT max(started_at) FROM runs WHERE workspace_id = ws.id AND status = 'running'),
    (SELECT finished_at FROM runs
     WHERE workspace_id = ws.id AND status IN ('succeeded', 'failed')
     ORDER BY finished_at DESC LIMIT 1));
-- Only the claim read running runs by workspace.
DROP INDEX runs_running_by_workspace;
