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
    /// Never written: a stored record that could not be read back (a field edited into a value
    /// no version of the code writes). Verification names it; nothing else counts it.
    Unreadable,
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
            AuditKind::Unreadable => "UNREADABLE",
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
    /// The envelope this message was re-injected from, when a replay sent it (links a copy's
    /// fate to its original in reconcile). Absent, it is not part of the record's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
}

impl AuditRecord {
    pub fn id_for(kind: AuditKind, subject: &str) -> String {
        format!("{}#{subject}", kind.as_str())
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
        }
    }
}

/// How many independent hash chains the audit trail is spread over: appends to different chains
/// never wait for each other (no global lock), and each chain is verified on its own.
pub const AUDIT_CHAINS: u8 = 8;

/// The `prev_hash` of the first record of every chain.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An audit record as stored: linked into its chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainedRecord {
    #[serde(flatten)]
    pub record: AuditRecord,
    /// `c0` .. `c7`.
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

/// The chain a record belongs to, from its id (stable: a retried append goes to the same chain).
pub fn chain_of(audit_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(audit_id.as_bytes());
    format!("c{}", d[0] % AUDIT_CHAINS)
}

/// `sha256("recon-audit/v1;" + canonical JSON of the record + ";" + chain + ";" + seq + ";" +
/// prev_hash)`, hex. The canonical JSON has its keys sorted (serde_json's map) and absent fields as
/// `null`, so a record read back from the store hashes the same.
pub fn record_hash(record: &AuditRecord, chain: &str, seq: u64, prev_hash: &str) -> String {
    use sha2::{Digest, Sha256};
    let body = serde_json::to_value(record).map(|v| v.to_string()).unwrap_or_default();
    hex::encode(Sha256::digest(
        format!("recon-audit/v1;{body};{chain};{seq};{prev_hash}").as_bytes(),
    ))
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

/// The head of a chain: its last sequence number and hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    pub chain: String,
    pub seq: u64,
    pub hash: String,
}

/// Where and how a chain is broken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("chain {chain}, record {seq}{}: {problem}", audit_id.as_deref().map(|a| format!(" ({a})")).unwrap_or_default())]
pub struct ChainBreak {
    pub chain: String,
    pub seq: u64,
    pub audit_id: Option<String>,
    pub problem: String,
}

/// Verify one chain (records in `seq` order) against its head: every link, every hash, no gap.
/// Returns the chain's length.
pub fn verify_chain(chain: &str, records: &[ChainedRecord], head: Option<&ChainHead>) -> Result<u64, ChainBreak> {
    let mut expected_prev = GENESIS.to_owned();
    let mut expected_seq = 1;
    for r in records {
        let brk = |seq: u64, problem: String| ChainBreak {
            chain: chain.to_owned(),
            seq,
            audit_id: Some(r.record.audit_id.clone()),
            problem,
        };
        if let Some(why) = &r.unreadable {
            return Err(brk(r.seq, format!("cannot be read back as a record ({why}): modified")));
        }
        if r.chain != chain {
            return Err(brk(r.seq, format!("belongs to chain {}", r.chain)));
        }
        if r.seq != expected_seq {
            return Err(ChainBreak {
                chain: chain.to_owned(),
                seq: expected_seq,
                audit_id: None,
                problem: format!(
                    "missing: the next record present is {} ({}) — deleted or reordered",
                    r.seq, r.record.audit_id
                ),
            });
        }
        if r.prev_hash != expected_prev {
            return Err(brk(
                r.seq,
                "its prev_hash is not the hash of the record before it (reordered or replaced)".into(),
            ));
        }
        if record_hash(&r.record, &r.chain, r.seq, &r.prev_hash) != r.hash {
            return Err(brk(r.seq, "its content does not match its hash (modified)".into()));
        }
        expected_prev = r.hash.clone();
        expected_seq += 1;
    }
    let length = expected_seq - 1;
    if let Some(h) = head {
        if h.seq != length || (length > 0 && h.hash != expected_prev) {
            return Err(ChainBreak {
                chain: chain.to_owned(),
                seq: length + 1,
                audit_id: None,
                problem: format!(
                    "the chain ends at record {length} but its head says {} records (hash {}…): the last records were deleted or the head rewritten",
                    h.seq,
                    short_hash(&h.hash)
                ),
            });
        }
    }
    Ok(length)
}

/// A seal: the heads of every chain at one instant, and their Merkle root, written to the WORM
/// bucket so that later rewrites of the audit table (even of whole chains) are detectable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditSeal {
    pub schema: String,
    /// The trail this seal belongs to.
    #[serde(default)]
    pub trail: String,
    pub at: DateTime<Utc>,
    pub heads: Vec<ChainHead>,
    pub root: String,
}

/// The first twelve characters of a stored hash, for messages. Stored hashes are read back from
/// stores anyone with write access can edit: cut on characters, never on bytes.
pub fn short_hash(hash: &str) -> &str {
    match hash.char_indices().nth(12) {
        Some((end, _)) => &hash[..end],
        None => hash,
    }
}

/// Merkle root of chain heads (sorted by chain): leaves `sha256(chain:seq:hash)`, pairs hashed up,
/// an odd last node carried up as is.
pub fn merkle_root(heads: &[ChainHead]) -> String {
    use sha2::{Digest, Sha256};
    let mut sorted: Vec<&ChainHead> = heads.iter().collect();
    sorted.sort_by(|a, b| a.chain.cmp(&b.chain));
    let mut level: Vec<[u8; 32]> = sorted
        .iter()
        .map(|h| Sha256::digest(format!("{}:{}:{}", h.chain, h.seq, h.hash).as_bytes()).into())
        .collect();
    if level.is_empty() {
        return GENESIS.to_owned();
    }
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| match p {
                [a, b] => {
                    let mut h = Sha256::new();
                    h.update(a);
                    h.update(b);
                    h.finalize().into()
                }
                [a] => *a,
                _ => unreachable!("chunks(2) yields one or two"),
            })
            .collect();
    }
    hex::encode(level[0])
}

impl AuditSeal {
    pub fn new(trail: &str, at: DateTime<Utc>, heads: Vec<ChainHead>) -> Self {
        let root = merkle_root(&heads);
        AuditSeal {
            schema: "recon-dlq/audit-seal/v1".into(),
            trail: trail.to_owned(),
            at,
            heads,
            root,
        }
    }

    /// The seal is internally consistent (its root is the root of its heads).
    pub fn root_holds(&self) -> bool {
        merkle_root(&self.heads) == self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn seals_commit_to_every_head() {
        let heads = vec![
            ChainHead {
                chain: "c1".into(),
                seq: 3,
                hash: "aa".repeat(32),
            },
            ChainHead {
                chain: "c0".into(),
                seq: 9,
                hash: "bb".repeat(32),
            },
            ChainHead {
                chain: "c2".into(),
                seq: 1,
                hash: "cc".repeat(32),
            },
        ];
        let seal = AuditSeal::new("t", Utc::now(), heads.clone());
        assert!(seal.root_holds());
        let mut reordered = heads.clone();
        reordered.reverse();
        assert_eq!(merkle_root(&reordered), seal.root, "order-independent");
        let mut changed = seal.clone();
        changed.heads[0].seq = 4;
        assert!(!changed.root_holds());
    }
}
