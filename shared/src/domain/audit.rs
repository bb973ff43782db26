//! Durable audit records: one per decision off the happy path (the happy path's evidence is the
//! ledger posting itself, which carries the same fields).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::failure::FailureCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AuditKind {
    /// The consumer saw a transaction that is already committed and acknowledged it unposted.
    DuplicateSuppressed,
    /// The consumer sent a message to the DLQ.
    DeadLettered,
    /// The enricher wrapped a dead letter in an envelope (and its WORM copy).
    Enriched,
    /// An envelope went to quarantine (terminal, WORM).
    Quarantined,
    /// PENDING envelopes crossed the high-water mark (one record per crossing).
    DlqOverflow,
    /// A replay re-injected an envelope's original into the main queue.
    ReplayReinjected,
    /// A replay found the envelope's transaction already committed and did not re-inject it.
    ReplaySuppressed,
    /// Reference data changed: a currency mapping, or an accounting period opened or closed.
    ReferenceChanged,
}

impl AuditKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::DuplicateSuppressed => "DUPLICATE_SUPPRESSED",
            AuditKind::DeadLettered => "DEAD_LETTERED",
            AuditKind::Enriched => "ENRICHED",
            AuditKind::Quarantined => "QUARANTINED",
            AuditKind::DlqOverflow => "DLQ_OVERFLOW",
            AuditKind::ReplayReinjected => "REPLAY_REINJECTED",
            AuditKind::ReplaySuppressed => "REPLAY_SUPPRESSED",
            AuditKind::ReferenceChanged => "REFERENCE_CHANGED",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Deterministic (`<kind>#<sqs message id>`, `<kind>#<envelope id>`, `DLQ_OVERFLOW#<episode>`):
    /// writing the same decision twice, after a redelivery, leaves one record.
    pub audit_id: String,
    pub kind: AuditKind,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub sqs_message_id: String,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub source_hash: Option<String>,
    #[serde(default)]
    pub match_decision: Option<String>,
    #[serde(default)]
    pub failure_code: Option<FailureCode>,
    #[serde(default)]
    pub root_cause: Option<String>,
    pub attempt_count: u32,
    #[serde(default)]
    pub ledger_entity: Option<String>,
    #[serde(default)]
    pub currency: Option<String>,
    #[serde(default)]
    pub amount: Option<String>,
    #[serde(default)]
    pub detail: String,
}

impl AuditRecord {
    pub fn id_for(kind: AuditKind, subject: &str) -> String {
        format!("{}#{subject}", kind.as_str())
    }
}
