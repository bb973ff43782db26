//! The variables without a default each function needs: what the template must set for it
//! (checked against the template by the template check, and against the parsers by a test).

use super::vars::*;

pub const CONSUMER: &[&str] = &[
    MAIN_QUEUE_URL,
    DEAD_LETTER_QUEUE_URL,
    LEDGER_TABLE,
    REFERENCE_TABLE,
    AUDIT_TABLE,
    QUARANTINE_BUCKET,
    QUARANTINE_BUCKET_OWNER,
    CONSUMER_SENDERS,
    REPLAY_SENDERS,
];
pub const ENRICHER: &[&str] = &[
    ENVELOPE_TABLE,
    AUDIT_TABLE,
    QUARANTINE_BUCKET,
    QUARANTINE_BUCKET_OWNER,
    STACK_PREFIX,
    CONSUMER_SENDERS,
    REPLAY_SENDERS,
];
pub const REPLAY: &[&str] = &[
    MAIN_QUEUE_URL,
    ENVELOPE_TABLE,
    LEDGER_TABLE,
    REFERENCE_TABLE,
    AUDIT_TABLE,
    QUARANTINE_BUCKET,
    QUARANTINE_BUCKET_OWNER,
    STACK_PREFIX,
    SWEEP_SCHEDULE,
    SEAL_SCHEDULE,
];
pub const CONTROL: &[&str] = &[
    MAIN_QUEUE_URL,
    ENVELOPE_TABLE,
    LEDGER_TABLE,
    REFERENCE_TABLE,
    AUDIT_TABLE,
    QUARANTINE_BUCKET,
    QUARANTINE_BUCKET_OWNER,
    STACK_PREFIX,
    SWEEP_SCHEDULE,
    SEAL_SCHEDULE,
    OPERATOR_ROLES,
    DECISION_KEY,
];
pub const REFERENCE_AUDIT: &[&str] = &[REFERENCE_TABLE, AUDIT_TABLE, QUARANTINE_BUCKET, QUARANTINE_BUCKET_OWNER];
