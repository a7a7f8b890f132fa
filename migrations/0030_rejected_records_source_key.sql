-- Where a rejected record can be found in its source: the value of the
-- source's key field (the cursor column, or the record's id), as text.
ALTER TABLE rejected_records ADD COLUMN source_key text;
