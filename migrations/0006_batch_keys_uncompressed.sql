-- A batch's keys are SHA-256 digests: they do not compress, and trying to
-- (pglz, on every bulk page's ~32 KB array) showed in profiles. Kept out of
-- line as they are.
ALTER TABLE delivery_batches ALTER COLUMN keys SET STORAGE EXTERNAL;
