-- Pages a run has checkpointed, for its live progress on the run page.
-- Updated in the page's checkpoint statement with the other counts.
ALTER TABLE runs ADD COLUMN pages integer NOT NULL DEFAULT 0;
