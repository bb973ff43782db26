//! Durable audit records: one per decision off the happy path (the happy path's evidence is the
//! ledger posting itself, which carries the same fields).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::failure::FailureCode;
use super::hash::sha256_hex;

named! {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum AuditKind {
        /// The consumer saw a transaction that is already committed and acknowledged it unposted.
        DuplicateSuppressed = "DUPLICATE_SUPPRESSED",
        /// The consumer sent a message to the DLQ.
        DeadLettered = "DEAD_LETTERED",
        /// The enricher wrapped a dead letter in an envelope (and its WORM copy).
        Enriched = "ENRICHED",
        /// An envelope went to quarantine (terminal, WORM).
        Quarantined = "QUARANTINED",
        /// PENDING envelopes crossed the high-water mark (one record per crossing).
        DlqOverflow = "DLQ_OVERFLOW",
        /// A replay re-injected an envelope's original into the main queue.
        ReplayReinjected = "REPLAY_REINJECTED",
        /// A replay found the envelope's transaction already committed and did not re-inject it.
        ReplaySuppressed = "REPLAY_SUPPRESSED",
        /// Reference data changed: a currency mapping, or an accounting period opened or closed.
        ReferenceChanged = "REFERENCE_CHANGED",
        /// A function started with a configuration other than the last one recorded for it.
        ConfigChanged = "CONFIG_CHANGED",
        /// A remediation above the approval policy became a request waiting for a second person.
        ApprovalRequested = "APPROVAL_REQUESTED",
        /// A second identity approved a request.
        ApprovalGranted = "APPROVAL_GRANTED",
        /// A request was rejected (or withdrawn by its requester).
        ApprovalRejected = "APPROVAL_REJECTED",
        /// An approved request ran: exactly its set, less what changed since.
        ApprovalExecuted = "APPROVAL_EXECUTED",
        /// An approved request's run stopped (its canary failed, or time ran out): the rest waits.
        ApprovalPaused = "APPROVAL_PAUSED",
        /// A PENDING dead letter's age reached a stage of the escalation chain.
        Escalated = "ESCALATED",
        /// A request waited past its expiry, undecided or unexecuted.
        ApprovalExpired = "APPROVAL_EXPIRED",
        /// An approved edit of a dead letter's body was posted as a new message (the envelope is
        /// SUPERSEDED): who proposed it, who approved it, why, and the field diff.
        Edited = "EDITED",
        /// The scheduled sweep's canary of a large group failed: the rest of the group is held.
        SweepCanaryHeld = "SWEEP_CANARY_HELD",
        /// The control plane refused an operator's operation (their role, or the state of what
        /// they asked about): who asked what, and why not. Nothing changed.
        AccessRefused = "ACCESS_REFUSED",
        /// An auditor exported a period's evidence bundle at the console: where the bucket keeps
        /// it (key, version), its SHA-256, what it holds.
        EvidenceExported = "EVIDENCE_EXPORTED",
        /// Never written: a stored record that could not be read back (a field edited into a value
        /// no version of the code writes). Verification names it; nothing else counts it.
        Unreadable = "UNREADABLE",
    }
}

impl AuditKind {
    /// The kinds a reconciliation reads (one message's fate, or a cross-check of the envelopes):
    /// the records the audit table indexes by period.
    pub const RECONCILED: [AuditKind; 4] = [
        AuditKind::DuplicateSuppressed,
        AuditKind::DeadLettered,
        AuditKind::Enriched,
        AuditKind::Quarantined,
    ];

    /// Whether a reconciliation reads records of this kind ([`AuditKind::RECONCILED`]).
    pub fn reconciled(self) -> bool {
        AuditKind::RECONCILED.contains(&self)
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
    pub message_id: Option<String>,
    pub trace_id: Option<String>,
    pub source_hash: Option<String>,
    pub match_decision: Option<String>,
    pub failure_code: Option<FailureCode>,
    pub root_cause: Option<String>,
    pub attempt_count: u32,
    pub ledger_entity: Option<String>,
    pub currency: Option<String>,
    pub amount: Option<String>,
    #[serde(default)]
    pub detail: String,
    /// The envelope this message was re-injected from, when a replay sent it (links a copy's
    /// fate to its original in reconcile). Absent, it is not part of the record's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    /// The accounting period (`YYYY-MM`) of the transaction a record about one message is about,
    /// when its body tells it: what a reconciliation of one period reads the record by
    /// ([`AuditKind::reconciled`]). Absent (records from before it, system records), it is not
    /// part of the record's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

impl AuditRecord {
    pub fn id_for(kind: AuditKind, subject: &str) -> String {
        format!("{}#{subject}", kind.as_str())
    }

    /// The id of the record replay `replay_id` leaves about envelope `envelope_id`.
    pub fn replay_id_for(kind: AuditKind, envelope_id: &str, replay_id: &str) -> String {
        AuditRecord::id_for(kind, &format!("{envelope_id}#{replay_id}"))
    }

    /// The envelope an `ENRICHED` or `QUARANTINED` record is about: its id's second part
    /// (`<kind>#<envelope id>[#<replay id>]`).
    pub fn envelope_named(&self) -> Option<&str> {
        match self.kind {
            AuditKind::Enriched | AuditKind::Quarantined => self
                .audit_id
                .split_once('#')
                .map(|(_, rest)| rest.split('#').next().unwrap_or("")),
            _ => None,
        }
    }

    /// A record about the system rather than one message (overflow, reference-data changes).
    pub fn system(kind: AuditKind, subject: &str, at: DateTime<Utc>, actor: &str, detail: String) -> Self {
        AuditRecord {
            audit_id: AuditRecord::id_for(kind, subject),
            kind,
            at,
            actor: actor.to_owned(),
            sqs_message_id: String::new(),
            message_id: None,
            trace_id: None,
            source_hash: None,
            match_decision: None,
            failure_code: None,
            root_cause: None,
            attempt_count: 0,
            ledger_entity: None,
            currency: None,
            amount: None,
            detail,
            replay_of: None,
            period: None,
        }
    }
}

/// How many independent hash chains an audit trail may be spread over (`c0` .. `c63`): appends to
/// different chains never wait for each other (no global lock), and each chain is verified on its
/// own. Verification, seals and exports read every one of them; a writer uses as many as it meets
/// contention for (the DynamoDB log's placement), so a quiet trail has few.
pub const AUDIT_CHAINS: u8 = 64;

/// The chains [`chain_of`] spreads records over by id (the in-memory log's placement).
pub const ID_CHAINS: u8 = 8;

/// The `prev_hash` of the first record of every chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An audit record as stored: linked into its chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainedRecord {
    #[serde(flatten)]
    pub record: AuditRecord,
    /// `c0` .. `c63`.
    pub chain: String,
    /// 1, 2, 3, … within the chain, without gaps.
    pub seq: u64,
    /// The `hash` of record `seq - 1` (GENESIS for the first).
    pub prev_hash: String,
    /// SHA-256 over this record's content, chain, seq and `prev_hash` ([`record_hash`]).
    pub hash: String,
    /// Why the stored record could not be read back (then `record` holds only its id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

impl ChainedRecord {
    /// A stored record that does not read back as a record: its place in the chain, as far as
    /// it can be read, and why. Verification reports it as a break at that record.
    pub fn unreadable(audit_id: &str, chain: &str, seq: u64, prev_hash: &str, hash: &str, why: String) -> Self {
        let mut record = AuditRecord::system(AuditKind::Unreadable, "", DateTime::UNIX_EPOCH, "", String::new());
        audit_id.clone_into(&mut record.audit_id);
        ChainedRecord {
            record,
            chain: chain.to_owned(),
            seq,
            prev_hash: prev_hash.to_owned(),
            hash: hash.to_owned(),
            unreadable: Some(why),
        }
    }
}

/// `c0` .. `c{AUDIT_CHAINS - 1}`.
pub fn is_chain(name: &str) -> bool {
    name.strip_prefix('c')
        .and_then(|n| n.parse::<u8>().ok())
        .is_some_and(|n| n < AUDIT_CHAINS && name == format!("c{n}"))
}

/// A chain for a record from its id alone, one of the first [`ID_CHAINS`] (the in-memory log's
/// placement; any chain is as valid: a record's id is recorded once whichever chain it is in).
pub fn chain_of(audit_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(audit_id.as_bytes());
    format!("c{}", d[0] % ID_CHAINS)
}

/// The record's canonical form (specified in docs/evidence.md, "Audit evidence: formats"): a JSON
/// object written field by field in this fixed order, never through a serializer's defaults.
/// Every field is always present but `period`, written last and only when the record has one (so
/// records from before it hash as they did); an absent optional is `null`; `at` is UTC with nine
/// fractional digits; `attempt_count` a decimal integer; every other value a string
/// ([`json_string`]).
pub fn canonical_record(r: &AuditRecord) -> String {
    let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "null".to_owned(), json_string);
    let mut fields: Vec<(&str, String)> = vec![
        ("audit_id", json_string(&r.audit_id)),
        ("kind", json_string(r.kind.as_str())),
        ("at", json_string(&canonical_time(r.at))),
        ("actor", json_string(&r.actor)),
        ("sqs_message_id", json_string(&r.sqs_message_id)),
        ("message_id", opt(&r.message_id)),
        ("trace_id", opt(&r.trace_id)),
        ("source_hash", opt(&r.source_hash)),
        ("match_decision", opt(&r.match_decision)),
        ("failure_code", opt(&r.failure_code.map(|c| c.as_str().to_owned()))),
        ("root_cause", opt(&r.root_cause)),
        ("attempt_count", r.attempt_count.to_string()),
        ("ledger_entity", opt(&r.ledger_entity)),
        ("currency", opt(&r.currency)),
        ("amount", opt(&r.amount)),
        ("detail", json_string(&r.detail)),
        ("replay_of", opt(&r.replay_of)),
    ];
    if let Some(period) = &r.period {
        fields.push(("period", json_string(period)));
    }
    canonical_object(&fields)
}

/// `{"name":value,...}` in the order given, no white space.
pub fn canonical_object(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", json_string(k))).collect();
    format!("{{{}}}", body.join(","))
}

/// A JSON string as the canonical forms write it: `"` and `\` escaped with a backslash, U+0000 to
/// U+001F as `\u00xx` (lower-case hex), every other character as itself in UTF-8.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A time as the canonical forms write it: `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`, UTC.
pub fn canonical_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
}

/// Domain tag of a record hash (a seal's digest and the Merkle tree use others).
pub const RECORD_TAG: &str = "recon-audit/v2 record";

/// `hex(sha256(RECORD_TAG || 0x00 || canonical_record || 0x00 || chain || 0x00 || seq || 0x00 ||
/// prev_hash))`, with `seq` in decimal. No part can contain a NUL byte (the canonical form escapes
/// it), so the parts cannot be shifted into one another.
pub fn record_hash(record: &AuditRecord, chain: &str, seq: u64, prev_hash: &str) -> String {
    let parts = [
        RECORD_TAG,
        &canonical_record(record),
        chain,
        &seq.to_string(),
        prev_hash,
    ];
    sha256_hex(parts.join("\0").as_bytes())
}

/// Link `record` after `(seq, hash)`, the current head of `chain`.
pub fn link(record: AuditRecord, chain: &str, head_seq: u64, head_hash: &str) -> ChainedRecord {
    let seq = head_seq + 1;
    let hash = record_hash(&record, chain, seq, head_hash);
    ChainedRecord {
        record,
        chain: chain.to_owned(),
        seq,
        prev_hash: head_hash.to_owned(),
        hash,
        unreadable: None,
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    pub chain: String,
    pub seq: u64,
    pub hash: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chain {chain}, record {seq}{}: {problem}", audit_id.as_deref().map(|a| format!(" ({a})")).unwrap_or_default())]
pub struct ChainBreak {
    pub chain: String,
    pub seq: u64,
    pub audit_id: Option<String>,
    pub problem: String,
}

mod verifier;
pub use verifier::{ChainVerifier, RecordLink, verify_chain};

/// The first twelve characters of a stored hash, for messages. Stored hashes are read back from
/// stores anyone with write access can edit: cut on characters, never on bytes.
pub fn short_hash(hash: &str) -> &str {
    match hash.char_indices().nth(12) {
        Some((end, _)) => &hash[..end],
        None => hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`verify_chain`] from record `from_seq` on ([`ChainVerifier::new`]).
    fn verify_chain_from(
        chain: &str,
        records: &[ChainedRecord],
        from_seq: u64,
        head: Option<&ChainHead>,
    ) -> Result<u64, ChainBreak> {
        let mut verifier = ChainVerifier::new(chain, from_seq);
        for r in records {
            verifier.push(r);
        }
        verifier.finish(head)
    }

    fn rec(n: u32) -> AuditRecord {
        AuditRecord {
            audit_id: format!("DEAD_LETTERED#s{n}"),
            kind: AuditKind::DeadLettered,
            at: chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 1, 0, 0, n).unwrap(),
            actor: "consumer".into(),
            sqs_message_id: format!("s{n}"),
            message_id: None,
            trace_id: Some(format!("t{n}")),
            source_hash: Some("ab".repeat(32)),
            match_decision: None,
            failure_code: Some(FailureCode::PoisonMessage),
            root_cause: Some("INVALID_DECIMAL".into()),
            attempt_count: 1,
            ledger_entity: None,
            currency: None,
            amount: Some("1,00".into()),
            detail: String::new(),
            replay_of: None,
            period: None,
        }
    }

    fn chain(n: u32) -> (Vec<ChainedRecord>, ChainHead) {
        let mut out: Vec<ChainedRecord> = Vec::new();
        for i in 1..=n {
            let (seq, prev) = out.last().map_or((0, GENESIS.to_owned()), |r| (r.seq, r.hash.clone()));
            out.push(link(rec(i), "c0", seq, &prev));
        }
        let last = out.last().unwrap();
        let head = ChainHead {
            chain: "c0".into(),
            seq: last.seq,
            hash: last.hash.clone(),
        };
        (out, head)
    }

    #[test]
    fn an_intact_chain_verifies() {
        let (records, head) = chain(5);
        assert_eq!(verify_chain("c0", &records, Some(&head)), Ok(5));
        assert_eq!(verify_chain("c0", &[], None), Ok(0));
    }

    #[test]
    fn modification_deletion_and_reordering_are_named() {
        let (records, head) = chain(5);
        let mut modified = records.clone();
        modified[2].record.amount = Some("100,00".into());
        let e = verify_chain("c0", &modified, Some(&head)).unwrap_err();
        assert_eq!((e.seq, e.audit_id.as_deref()), (3, Some("DEAD_LETTERED#s3")));
        assert!(e.problem.contains("modified"));

        let mut deleted = records.clone();
        deleted.remove(1);
        let e = verify_chain("c0", &deleted, Some(&head)).unwrap_err();
        assert_eq!(e.seq, 2);
        assert!(e.problem.contains("missing"), "{e}");

        let mut swapped = records.clone();
        swapped.swap(1, 2);
        let (a, b) = (swapped[1].seq, swapped[2].seq);
        swapped[1].seq = b;
        swapped[2].seq = a;
        let e = verify_chain("c0", &swapped, Some(&head)).unwrap_err();
        assert_eq!(e.seq, 2, "{e}");

        let mut truncated = records.clone();
        truncated.pop();
        let e = verify_chain("c0", &truncated, Some(&head)).unwrap_err();
        assert!(e.problem.contains("head says 5"), "{e}");
    }

    #[test]
    fn a_chain_verified_from_a_later_record_checks_that_record_and_every_link_after_it() {
        let (records, head) = chain(6);
        let tail = &records[2..];
        assert_eq!(verify_chain_from("c0", tail, 3, Some(&head)), Ok(6));
        assert_eq!(
            verify_chain_from("c0", &records, 0, Some(&head)),
            Ok(6),
            "0 is from genesis"
        );
        // The first record's content still hashes to its hash; its prev_hash is not read.
        let mut modified = tail.to_vec();
        modified[0].record.amount = Some("100,00".into());
        let e = verify_chain_from("c0", &modified, 3, Some(&head)).unwrap_err();
        assert_eq!(e.seq, 3, "{e}");
        // A gap at the start, and a record after it no longer linked.
        let e = verify_chain_from("c0", &records[3..], 3, Some(&head)).unwrap_err();
        assert!(e.seq == 3 && e.problem.contains("missing"), "{e}");
        let mut relinked = tail.to_vec();
        relinked[1] = link(relinked[1].record.clone(), "c0", 3, GENESIS);
        let e = verify_chain_from("c0", &relinked, 3, Some(&head)).unwrap_err();
        assert!(e.seq == 4 && e.problem.contains("prev_hash"), "{e}");
        // The head beyond the records read.
        let e = verify_chain_from("c0", &tail[..2], 3, Some(&head)).unwrap_err();
        assert!(e.problem.contains("head says 6"), "{e}");
    }
}
