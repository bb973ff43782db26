//! What the WORM bucket holds about the audit trail: the trail's anchor (its identity, written
//! once), its seals (the head of every chain at one instant and their Merkle root, each naming the
//! digest of the seal before it), and the retirement of a trail. Every object is stored in its
//! canonical form (docs/evidence.md, "Audit evidence: formats"), so its digest is over the stored bytes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::audit::{ChainHead, GENESIS, canonical_object, canonical_time, json_string};
use super::hash::sha256_hex;

pub const SEAL_SCHEMA: &str = "recon-dlq/audit-seal/v2";
pub const ANCHOR_SCHEMA: &str = "recon-dlq/audit-trail/v1";
pub const RETIREMENT_SCHEMA: &str = "recon-dlq/audit-trail-retired/v1";
/// Domain tag of a seal's digest.
pub const SEAL_TAG: &str = "recon-audit/v2 seal";
/// First byte hashed for a Merkle leaf, and for an inner node: a leaf can never be read as a node.
pub const LEAF_PREFIX: u8 = 0x00;
pub const NODE_PREFIX: u8 = 0x01;

/// Where seals live: `audit-seals/<trail>/<seq, 20 digits>.json` (every `u64` fits).
pub const SEAL_PREFIX: &str = "audit-seals/";
/// Where trail anchors and retirements live: `audit-trails/<trail>/{anchor,retired}.json`.
pub const TRAIL_PREFIX: &str = "audit-trails/";

pub fn seal_key(trail: &str, seq: u64) -> String {
    format!("{SEAL_PREFIX}{trail}/{seq:020}.json")
}

/// `(trail, seq)` of a seal key; `None` for a key no sealer writes.
pub fn parse_seal_key(key: &str) -> Option<(String, u64)> {
    let rest = key.strip_prefix(SEAL_PREFIX)?;
    let (trail, file) = rest.split_once('/')?;
    let digits = file.strip_suffix(".json")?;
    if !is_trail_id(trail) || digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((trail.to_owned(), digits.parse().ok()?))
}

/// Where the records each seal covers live, beside it:
/// `audit-records/<trail>/<seal seq, 20 digits>/<the seal's root>/<chain>/<part, 6 digits>.jsonl`.
/// The root is in the key so that sealers racing for one number with different heads never write
/// to the same key: only the parts under the root of the seal that was written count.
pub const RECORDS_PREFIX: &str = "audit-records/";

/// The key of part `part` of `chain`'s records that seal `seq` (root `root`) of `trail` covers.
pub fn records_key(trail: &str, seq: u64, root: &str, chain: &str, part: u32) -> String {
    format!("{RECORDS_PREFIX}{trail}/{seq:020}/{root}/{chain}/{part:06}.jsonl")
}

/// A records key read back: whose it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordsKey {
    pub trail: String,
    pub seq: u64,
    pub root: String,
    pub chain: String,
    pub part: u32,
}

/// What [`records_key`] wrote; `None` for a key no sealer writes.
pub fn parse_records_key(key: &str) -> Option<RecordsKey> {
    let rest = key.strip_prefix(RECORDS_PREFIX)?;
    let mut it = rest.split('/');
    let (trail, seq, root, chain, file) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let part = file.strip_suffix(".jsonl")?;
    let hex64 = root.len() == 64 && root.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let chain_ok = super::audit::is_chain(chain);
    if it.next().is_some() || !is_trail_id(trail) || !digits(seq, 20) || !hex64 || !chain_ok || !digits(part, 6) {
        return None;
    }
    Some(RecordsKey {
        trail: trail.to_owned(),
        seq: seq.parse().ok()?,
        root: root.to_owned(),
        chain: chain.to_owned(),
        part: part.parse().ok()?,
    })
}

pub fn anchor_key(trail: &str) -> String {
    format!("{TRAIL_PREFIX}{trail}/anchor.json")
}

pub fn retirement_key(trail: &str) -> String {
    format!("{TRAIL_PREFIX}{trail}/retired.json")
}

/// A trail id: 16 lower-case hex digits.
pub fn is_trail_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A new trail id, from the instant and a name (uniqueness, not secrecy, is what matters).
pub fn new_trail_id(name: &str, now: DateTime<Utc>) -> String {
    let seed = format!("{name}/{}", canonical_time(now));
    hex::encode(Sha256::digest(seed.as_bytes()))[..16].to_owned()
}

/// A stored object parsed back: the value, or why it is not genuine.
fn parse_canonical<T: for<'de> Deserialize<'de>>(bytes: &[u8], canonical: impl Fn(&T) -> String) -> Result<T, String> {
    let value: T = serde_json::from_slice(bytes).map_err(|e| format!("does not parse: {e}"))?;
    if canonical(&value).as_bytes() != bytes {
        return Err("is not in its canonical form".into());
    }
    Ok(value)
}

/// A seal: the heads of every chain at one instant and their Merkle root, the `seq`-th of its
/// trail, naming the digest of seal `seq - 1` (GENESIS for the first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditSeal {
    pub schema: String,
    pub trail: String,
    pub seq: u64,
    pub prev: String,
    pub at: DateTime<Utc>,
    /// Sorted by chain.
    pub heads: Vec<ChainHead>,
    pub root: String,
}

impl AuditSeal {
    pub fn new(trail: &str, seq: u64, prev: &str, at: DateTime<Utc>, mut heads: Vec<ChainHead>) -> Self {
        heads.sort_by(|a, b| a.chain.cmp(&b.chain));
        let root = merkle_root(&heads);
        AuditSeal {
            schema: SEAL_SCHEMA.into(),
            trail: trail.to_owned(),
            seq,
            prev: prev.to_owned(),
            at,
            heads,
            root,
        }
    }

    /// The stored bytes: fields in this order, heads in the order held.
    pub fn canonical(&self) -> String {
        let heads: Vec<String> = self
            .heads
            .iter()
            .map(|h| {
                canonical_object(&[
                    ("chain", json_string(&h.chain)),
                    ("seq", h.seq.to_string()),
                    ("hash", json_string(&h.hash)),
                ])
            })
            .collect();
        canonical_object(&[
            ("schema", json_string(&self.schema)),
            ("trail", json_string(&self.trail)),
            ("seq", self.seq.to_string()),
            ("prev", json_string(&self.prev)),
            ("at", json_string(&canonical_time(self.at))),
            ("heads", format!("[{}]", heads.join(","))),
            ("root", json_string(&self.root)),
        ])
    }

    /// `hex(sha256(SEAL_TAG || 0x00 || canonical))`: what the next seal names as `prev`.
    pub fn digest(&self) -> String {
        seal_digest(self.canonical().as_bytes())
    }

    /// Parse stored bytes; refused unless they are exactly the canonical form of what they hold.
    pub fn parse(bytes: &[u8]) -> Result<AuditSeal, String> {
        parse_canonical(bytes, AuditSeal::canonical)
    }

    /// The root is the Merkle root of the heads, and the heads are sorted by chain, one per chain.
    pub fn root_holds(&self) -> bool {
        self.heads.windows(2).all(|w| w[0].chain < w[1].chain) && merkle_root(&self.heads) == self.root
    }
}

/// The first `seq` of `chain` that a seal after `prev` covers: the record after `prev`'s head of
/// it, or the chain's first (no `prev`, or one that names no head of `chain`).
pub fn first_after(prev: Option<&AuditSeal>, chain: &str) -> u64 {
    prev.and_then(|p| p.heads.iter().find(|h| h.chain == chain))
        .map_or(1, |h| h.seq.saturating_add(1))
}

pub fn seal_digest(canonical_bytes: &[u8]) -> String {
    sha256_hex(&[SEAL_TAG.as_bytes(), b"\0", canonical_bytes].concat())
}

/// The first seal's `prev`.
pub const FIRST_PREV: &str = GENESIS;

/// A trail's identity, written once when the trail starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrailAnchor {
    pub schema: String,
    pub trail: String,
    pub created_at: DateTime<Utc>,
}

impl TrailAnchor {
    pub fn new(trail: &str, created_at: DateTime<Utc>) -> Self {
        TrailAnchor {
            schema: ANCHOR_SCHEMA.into(),
            trail: trail.to_owned(),
            created_at,
        }
    }
    pub fn canonical(&self) -> String {
        canonical_object(&[
            ("schema", json_string(&self.schema)),
            ("trail", json_string(&self.trail)),
            ("created_at", json_string(&canonical_time(self.created_at))),
        ])
    }
    pub fn parse(bytes: &[u8]) -> Result<TrailAnchor, String> {
        parse_canonical(bytes, TrailAnchor::canonical)
    }
}

/// An explicit end of a trail (its table was rebuilt): who, when and why. Verification lists every
/// retired trail; a trail that is neither current nor retired was replaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrailRetirement {
    pub schema: String,
    pub trail: String,
    pub at: DateTime<Utc>,
    pub by: String,
    pub reason: String,
}

impl TrailRetirement {
    pub fn new(trail: &str, at: DateTime<Utc>, by: &str, reason: &str) -> Self {
        TrailRetirement {
            schema: RETIREMENT_SCHEMA.into(),
            trail: trail.to_owned(),
            at,
            by: by.to_owned(),
            reason: reason.to_owned(),
        }
    }
    pub fn canonical(&self) -> String {
        canonical_object(&[
            ("schema", json_string(&self.schema)),
            ("trail", json_string(&self.trail)),
            ("at", json_string(&canonical_time(self.at))),
            ("by", json_string(&self.by)),
            ("reason", json_string(&self.reason)),
        ])
    }
    pub fn parse(bytes: &[u8]) -> Result<TrailRetirement, String> {
        parse_canonical(bytes, TrailRetirement::canonical)
    }
}

/// `sha256(0x00 || chain ":" seq ":" hash)`.
fn leaf(h: &ChainHead) -> [u8; 32] {
    let mut d = Sha256::new();
    d.update([LEAF_PREFIX]);
    d.update(format!("{}:{}:{}", h.chain, h.seq, h.hash).as_bytes());
    d.finalize().into()
}

/// `sha256(0x01 || left || right)`.
fn node(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    let mut d = Sha256::new();
    d.update([NODE_PREFIX]);
    d.update(left);
    d.update(right);
    d.finalize().into()
}

/// One level up: pairs hashed left to right, an odd last node carried up unchanged.
fn next_level(level: &[[u8; 32]]) -> Vec<[u8; 32]> {
    level
        .chunks(2)
        .map(|p| match p {
            [a, b] => node(a, b),
            [a] => *a,
            _ => unreachable!("chunks(2) yields one or two"),
        })
        .collect()
}

/// Merkle root of heads in the order given (seals hold them sorted by chain): leaves paired left
/// to right, level by level; an odd last node is carried up unchanged. No heads: GENESIS.
pub fn merkle_root(heads: &[ChainHead]) -> String {
    let mut level: Vec<[u8; 32]> = heads.iter().map(leaf).collect();
    if level.is_empty() {
        return GENESIS.to_owned();
    }
    while level.len() > 1 {
        level = next_level(&level);
    }
    hex::encode(level[0])
}

/// One step of an inclusion proof: the sibling's hash and which side it is on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofStep {
    /// `left` or `right`.
    pub side: String,
    pub hash: String,
}

/// The path from head `index`'s leaf to the root (levels where the node is carried up add no step).
pub fn merkle_proof(heads: &[ChainHead], index: usize) -> Vec<ProofStep> {
    let mut level: Vec<[u8; 32]> = heads.iter().map(leaf).collect();
    let mut at = index;
    let mut steps = Vec::new();
    while level.len() > 1 {
        let sibling = at ^ 1;
        if let Some(s) = level.get(sibling) {
            steps.push(ProofStep {
                side: if sibling < at { "left" } else { "right" }.into(),
                hash: hex::encode(s),
            });
        }
        level = next_level(&level);
        at /= 2;
    }
    steps
}

/// The root an inclusion proof leads to from `head` (None when a step does not read).
pub fn proof_root(head: &ChainHead, steps: &[ProofStep]) -> Option<String> {
    let mut cur = leaf(head);
    for s in steps {
        let sib: [u8; 32] = hex::decode(&s.hash).ok()?.try_into().ok()?;
        cur = match s.side.as_str() {
            "left" => node(&sib, &cur),
            "right" => node(&cur, &sib),
            _ => return None,
        };
    }
    Some(hex::encode(cur))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heads(n: usize) -> Vec<ChainHead> {
        (0..n)
            .map(|i| ChainHead {
                chain: format!("c{i}"),
                seq: i as u64 + 1,
                hash: format!("{i:x}").repeat(64)[..64].to_owned(),
            })
            .collect()
    }

    #[test]
    fn every_proof_leads_to_the_root_and_no_other_head_does() {
        for n in 1..=9 {
            let hs = heads(n);
            let root = merkle_root(&hs);
            for (i, h) in hs.iter().enumerate() {
                let proof = merkle_proof(&hs, i);
                assert_eq!(proof_root(h, &proof).as_deref(), Some(root.as_str()), "n={n} i={i}");
                let mut forged = h.clone();
                forged.seq += 1;
                assert_ne!(proof_root(&forged, &proof).as_deref(), Some(root.as_str()));
            }
        }
    }

    /// The test vectors of docs/evidence.md ("Audit evidence: formats"), pinned: an independent verifier is
    /// written against them, so a change here is a change of format.
    #[test]
    fn readme_vectors() {
        use crate::domain::audit::{canonical_record, record_hash};
        use crate::domain::{AuditKind, AuditRecord, FailureCode};
        let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 1, 9, 30, 0).unwrap();
        let mut r = AuditRecord::system(AuditKind::DeadLettered, "sqs-1", at, "consumer", "say \"hi\"\n".into());
        r.sqs_message_id = "sqs-1".into();
        r.failure_code = Some(FailureCode::PoisonMessage);
        r.root_cause = Some("INVALID_DECIMAL".into());
        r.amount = Some("1,00".into());
        r.currency = Some("EUR".into());
        r.attempt_count = 1;
        assert_eq!(
            canonical_record(&r),
            r#"{"audit_id":"DEAD_LETTERED#sqs-1","kind":"DEAD_LETTERED","at":"2026-12-01T09:30:00.000000000Z","actor":"consumer","sqs_message_id":"sqs-1","message_id":null,"trace_id":null,"source_hash":null,"match_decision":null,"failure_code":"POISON_MESSAGE","root_cause":"INVALID_DECIMAL","attempt_count":1,"ledger_entity":null,"currency":"EUR","amount":"1,00","detail":"say \"hi\"\u000a","replay_of":null}"#
        );
        let hash = record_hash(&r, "c3", 1, GENESIS);
        let heads: Vec<ChainHead> = ["c0", "c1", "c2"]
            .iter()
            .enumerate()
            .map(|(i, c)| ChainHead {
                chain: (*c).into(),
                seq: i as u64 + 1,
                hash: hash.clone(),
            })
            .collect();
        let seal = AuditSeal::new("0123456789abcdef", 1, GENESIS, at, heads.clone());
        assert_eq!(
            merkle_proof(&heads, 2),
            vec![ProofStep {
                side: "left".into(),
                hash: "d7c61d349a5cc1451c857c1e11d19eef87d49ce50b2df5cba27b3e01187ccab4".into()
            }]
        );
        assert_eq!(hash, "54715b7f9f1927778a1df1b6266c3e66ec029b3153315c008970024569568977");
        assert_eq!(
            seal.root,
            "107c472e66e0234d35c50be85fa082e4a431d0ebd3430811cf520a4a5eeb9598"
        );
        assert_eq!(
            seal.digest(),
            "81515fb1435f3df650f46601e5bd2fe9e33259e3c4c6f271d2316c1f42316568"
        );
        // With a period: the one field written only when present, last.
        r.period = Some("2026-12".into());
        assert!(canonical_record(&r).ends_with(r#","replay_of":null,"period":"2026-12"}"#));
        assert_eq!(
            record_hash(&r, "c3", 1, GENESIS),
            "bba1ff9f3eb5911e3c19e550aebe7434db8bedbc1c8be73c081d1720f0cb1360"
        );
    }

    #[test]
    fn a_seal_parses_back_only_from_its_canonical_bytes() {
        let at = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 12, 1, 0, 0, 0).unwrap();
        let seal = AuditSeal::new("0123456789abcdef", 2, &"ab".repeat(32), at, heads(3));
        let bytes = seal.canonical();
        assert_eq!(AuditSeal::parse(bytes.as_bytes()), Ok(seal.clone()));
        assert!(seal.root_holds());
        let pretty = serde_json::to_string_pretty(&seal).unwrap();
        assert!(AuditSeal::parse(pretty.as_bytes()).unwrap_err().contains("canonical"));
        let mut unsorted = seal.clone();
        unsorted.heads.reverse();
        unsorted.root = merkle_root(&unsorted.heads);
        assert!(!unsorted.root_holds(), "heads must be sorted by chain");
        assert_eq!(
            parse_seal_key(&seal_key("0123456789abcdef", 2)),
            Some(("0123456789abcdef".into(), 2))
        );
        assert_eq!(parse_seal_key("audit-seals/0123456789abcdef/2.json"), None);
        assert_eq!(
            parse_seal_key(&seal_key("0123456789abcdef", u64::MAX)).map(|k| k.1),
            Some(u64::MAX)
        );
        assert_eq!(
            parse_seal_key("audit-seals/0123456789abcdef/99999999999999999999.json"),
            None
        );
    }
}
