-- The ledger: one row per transaction, keyed by its source_hash (the dedup key is the primary
-- key, so a posting and its dedup mark are one insert, atomic by construction). A row is a
-- posting, or a hand-off to a manual journal (no posting may follow); the two exclude each other
-- through the same key. Amounts are NUMERIC, never floating point.
CREATE TABLE ledger_entries (
    source_hash     text        PRIMARY KEY CHECK (source_hash ~ '^[0-9a-f]{64}$'),
    kind            text        NOT NULL CHECK (kind IN ('POSTING', 'HAND_OFF')),
    committed_at    timestamptz NOT NULL,
    -- the posting
    sqs_message_id  text,
    message_id      text,
    trace_id        text,
    ledger_entity   text,
    currency        text,
    amount          numeric,
    value_date      date,
    period          text CHECK (period ~ '^[0-9]{4}-[0-9]{2}$'),
    match_decision  text,
    external_ref    text,
    counterparty    text,
    attempt_count   integer,
    replay_of       text,
    -- the hand-off
    manual_journal  text,
    replay_id       text,
    CHECK (kind <> 'POSTING' OR (sqs_message_id IS NOT NULL AND message_id IS NOT NULL
        AND trace_id IS NOT NULL AND ledger_entity IS NOT NULL AND currency IS NOT NULL
        AND amount IS NOT NULL AND value_date IS NOT NULL AND period IS NOT NULL
        AND match_decision IS NOT NULL AND external_ref IS NOT NULL AND counterparty IS NOT NULL
        AND attempt_count IS NOT NULL AND manual_journal IS NULL)),
    CHECK (kind <> 'HAND_OFF' OR (manual_journal IS NOT NULL AND replay_id IS NOT NULL))
);

-- Reads by period (reconcile, evidence export) per entity.
CREATE INDEX ledger_entries_by_period ON ledger_entries (period, ledger_entity) WHERE kind = 'POSTING';
