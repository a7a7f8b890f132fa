-- Address digests are SipHash-2-4 under the first 16 bytes of the install's
-- key (`store::trace::TraceKey`) instead of HMAC-SHA-256: as sound a keyed
-- function for a lookup, at a tenth of the cost on the run path (issue 63
-- allows the trace 5 % of it). Entries digested the old way could no longer
-- be found by any address: they go, with nothing else.
DELETE FROM trace_pages;
