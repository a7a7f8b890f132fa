-- Brevo import outcomes (issue 19): an import whose end cannot be learned
-- (Brevo answers 404 for its process, or it never finishes within the checks
-- allowed) ends `unknown`; a completed import's `info.import.invalid_emails`
-- is kept as a column, so a run's total is one sum.
ALTER TABLE import_processes DROP CONSTRAINT import_processes_status_check;
ALTER TABLE import_processes ADD CONSTRAINT import_processes_status_check
    CHECK (status IN ('pending', 'completed', 'failed', 'cancelled', 'unknown'));
ALTER TABLE import_processes ADD COLUMN invalid_emails integer;
