-- Pages of one period's postings in source_hash order (reconcile and evidence export read one
-- period at a time, keyset-paged), so a period costs in proportion to its own postings.
CREATE INDEX ledger_entries_period_pages ON ledger_entries (period, source_hash) WHERE kind = 'POSTING';
