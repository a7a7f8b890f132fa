-- Mirror mode: the exact records a run refused to take off the destination
-- (`mirror_removal_refused`), held for a person to look at
-- (`sync removals RUN`) and approve (`sync approve-removals RUN`); the next
-- run takes off exactly the approved ones still absent from the query. Only
-- identities: their addresses stay in record_states (which an erasure
-- clears), so a held record whose address is forgotten cannot be named.
CREATE TABLE held_removals (
    run_id      bigint NOT NULL REFERENCES runs (id),
    sync_id     text NOT NULL REFERENCES syncs (id),
    identity    bytea NOT NULL,
    approved_at timestamptz,
    approved_by text,
    PRIMARY KEY (run_id, identity)
);
CREATE INDEX held_removals_approved ON held_removals (sync_id) WHERE approved_at IS NOT NULL;
