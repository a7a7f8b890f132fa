-- An outage costs no record's attempt budget: an attempt whose failure a run
-- observed is given back. A bulk claim whose call may have written (a
-- timeout) keeps its keys pending with the attempts they had before, which
-- may be none.
ALTER TABLE delivery_batches DROP CONSTRAINT delivery_batches_attempts_check;
ALTER TABLE delivery_batches ADD CONSTRAINT delivery_batches_attempts_check CHECK (attempts >= 0);

-- A rejected or quarantined record keeps where it was read (the page's ledger
-- id and the cursor the page was read from: JSON null for the source's start)
-- so `sync retry-rejected` can send it again after the cursor moved past it.
-- `put_back_at` marks the ones already put back.
ALTER TABLE rejected_records ADD COLUMN page bytea CHECK (page IS NULL OR octet_length(page) = 32);
ALTER TABLE rejected_records ADD COLUMN page_cursor jsonb;
ALTER TABLE rejected_records ADD COLUMN put_back_at timestamptz;
CREATE INDEX rejected_records_open_by_sync ON rejected_records (sync_id, id) WHERE put_back_at IS NULL;
