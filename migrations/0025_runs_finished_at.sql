-- The history purge looks for finished runs older than the retention: with no
-- index on when a run finished, each purge (every minute, in every daemon)
-- read the whole runs table, ~0.3 s at 200,000 runs with none to delete.
CREATE INDEX runs_finished_at ON runs (finished_at)
    WHERE status IN ('succeeded', 'failed', 'skipped');
