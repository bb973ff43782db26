//! The trail as the WORM bucket alone holds it: its seals and, beside each, the records it covers
//! (`archive.rs`), read as an [`AuditLog`] so that the one verification and the one bundle
//! writer run on it unchanged (`audit verify --from-bucket`, `evidence export --from-bucket`):
//! for when the audit table is lost, or to check that the bucket's copy holds on its own.
//!
//! Its heads are those of the newest seal of the unbroken run from seal 1 (each key in order,
//! each parsing, each root that of its heads); its records are the parts under the keys those
//! seals name (their number and root), read by first version. A part under a root no seal of the
//! run has is a sealer's that lost the race for that number, and is not read. What no honest
//! writer leaves (a key no sealer writes, a part that does not read, a line that is not a record
//! of its chain) is a finding, which [`verify_bucket`] reports as a break; a missing part is a gap
//! in its chain, which verification names.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::anchors::{StoredSeal, read_worm, read_worm_from_seal};
use super::verify::{VerifyOptions, VerifyReport};
use crate::domain::AuditRecord;
use crate::domain::audit::{ChainHead, ChainedRecord};
use crate::domain::seal::{AuditSeal, RECORDS_PREFIX, parse_records_key, parse_seal_key};
use crate::ports::{AuditLog, ChainPage, StoreError, StoreResult, Worm};

/// The trail of one bucket, read only.
pub struct BucketTrail<'w, W> {
    worm: &'w W,
    trail: String,
    /// The newest seal of the run, and its heads.
    latest: Option<AuditSeal>,
    /// Of each chain, its parts in order (seal, then part): key and first version.
    parts: BTreeMap<String, Vec<(String, String)>>,
    /// The part read last, parsed: a chain's pages are read from it one after another.
    cached: Mutex<Option<(String, Arc<Vec<ChainedRecord>>)>>,
    findings: Mutex<Vec<String>>,
}

/// Which trail the bucket holds: `named`, or the only one anchored and not retired.
async fn which_trail<W: Worm>(worm: &W, named: Option<&str>) -> StoreResult<String> {
    if let Some(t) = named {
        return Ok(t.to_owned());
    }
    let (ev, _) = read_worm_from_seal(worm, None, 1).await?;
    let live: Vec<&String> = ev
        .trails
        .iter()
        .filter(|(_, k)| k.retired.is_none())
        .map(|(t, _)| t)
        .collect();
    match live.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(StoreError::infra(format!(
            "bucket {}: no trail is anchored there without a retirement: name one with --trail",
            worm.bucket()
        ))),
        many => Err(StoreError::infra(format!(
            "bucket {}: {} trails are anchored without a retirement ({}): name one with --trail",
            worm.bucket(),
            many.len(),
            many.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

impl<'w, W: Worm> BucketTrail<'w, W> {
    /// Read the seals and list the parts of `trail` (`None`: the only live trail of the bucket).
    pub async fn open(worm: &'w W, trail: Option<&str>) -> StoreResult<Self> {
        let trail = which_trail(worm, trail).await?;
        let (ev, _) = read_worm_from_seal(worm, Some(&trail), 1).await?;
        Self::of_seals(worm, &trail, &ev.seals).await
    }

    /// The trail as `seals` (read first) end it, its parts listed now: a seal written since is
    /// not part of it, whatever parts it has.
    async fn of_seals(worm: &'w W, trail: &str, seals: &[StoredSeal]) -> StoreResult<Self> {
        let trail = trail.to_owned();
        let mut run: Vec<AuditSeal> = Vec::new();
        for stored in seals {
            let expected = run.len() as u64 + 1;
            let seal = AuditSeal::parse(stored.body.as_bytes())
                .ok()
                .filter(AuditSeal::root_holds);
            match (parse_seal_key(&stored.key), seal) {
                (Some((_, seq)), Some(seal)) if seq == expected && seal.seq == seq => run.push(seal),
                _ => break,
            }
        }
        let mut findings = Vec::new();
        let mut parts: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let listed = worm.versions(&format!("{RECORDS_PREFIX}{trail}/")).await?;
        let mut seen = std::collections::BTreeSet::new();
        for v in listed.into_iter().filter(|v| !v.delete_marker) {
            if !seen.insert(v.key.clone()) {
                continue; // a newer version: read_worm names it; the first is the one read
            }
            let Some(k) = parse_records_key(&v.key) else {
                findings.push(format!("s3 key {}: no sealer writes this key", v.key));
                continue;
            };
            let sealed = usize::try_from(k.seq)
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| run.get(i))
                .is_some_and(|s| s.root == k.root);
            if sealed {
                parts.entry(k.chain).or_default().push((v.key, v.version_id));
            }
        }
        Ok(BucketTrail {
            worm,
            trail,
            latest: run.pop(),
            parts,
            cached: Mutex::new(None),
            findings: Mutex::new(findings),
        })
    }

    /// What was found that no honest writer leaves, so far.
    pub fn findings(&self) -> Vec<String> {
        self.findings.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The newest seal of the unbroken run from seal 1.
    pub fn latest_seal(&self) -> Option<&AuditSeal> {
        self.latest.as_ref()
    }

    fn found(&self, what: String) {
        self.findings.lock().unwrap_or_else(PoisonError::into_inner).push(what);
    }

    /// The records of one part, read once while its chain's pages are taken from it.
    async fn part(&self, chain: &str, key: &str, version_id: &str) -> StoreResult<Arc<Vec<ChainedRecord>>> {
        if let Some((k, records)) = self.cached.lock().unwrap_or_else(PoisonError::into_inner).as_ref()
            && k == key
        {
            return Ok(records.clone());
        }
        let mut records = Vec::new();
        match self.worm.get_version(key, version_id).await? {
            None => self.found(format!("{key}: its first version ({version_id}) cannot be read")),
            Some(bytes) => {
                for (n, line) in bytes.split(|b| *b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
                    match serde_json::from_slice::<ChainedRecord>(line) {
                        Ok(r) if r.chain == chain => records.push(r),
                        Ok(r) => self.found(format!("{key} line {}: a record of chain {}", n + 1, r.chain)),
                        Err(e) => self.found(format!("{key} line {}: not an audit record: {e}", n + 1)),
                    }
                }
            }
        }
        let records = Arc::new(records);
        *self.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some((key.to_owned(), records.clone()));
        Ok(records)
    }
}

fn read_only() -> StoreError {
    StoreError::infra("the trail read from the bucket is read only")
}

impl<W: Worm> AuditLog for BucketTrail<'_, W> {
    async fn append(&self, _: &AuditRecord) -> StoreResult<Option<u64>> {
        Err(read_only())
    }
    /// A cursor is `<part>:<record>`: where in the chain's parts the next page starts.
    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        let Some(parts) = self.parts.get(chain) else {
            return Ok((Vec::new(), None));
        };
        let (mut i, mut j) = match cursor.as_deref().map(|c| c.split_once(':')) {
            None => (0usize, 0usize),
            Some(Some((i, j))) => match (i.parse(), j.parse()) {
                (Ok(i), Ok(j)) => (i, j),
                _ => {
                    return Err(StoreError::infra(format!(
                        "not a cursor of the bucket's trail: {cursor:?}"
                    )));
                }
            },
            Some(None) => {
                return Err(StoreError::infra(format!(
                    "not a cursor of the bucket's trail: {cursor:?}"
                )));
            }
        };
        let limit = limit.max(1);
        let mut page = Vec::new();
        while let Some((key, version)) = parts.get(i).filter(|_| page.len() < limit) {
            let records = self.part(chain, key, version).await?;
            while let Some(r) = records.get(j).filter(|_| page.len() < limit) {
                j += 1;
                if r.seq >= from_seq {
                    page.push(r.clone());
                }
            }
            if j >= records.len() {
                (i, j) = (i + 1, 0);
            }
        }
        Ok((page, (i < parts.len()).then(|| format!("{i}:{j}"))))
    }
    async fn heads(&self) -> StoreResult<Vec<ChainHead>> {
        Ok(self.latest.as_ref().map(|s| s.heads.clone()).unwrap_or_default())
    }
    async fn current_trail(&self) -> StoreResult<Option<String>> {
        Ok(Some(self.trail.clone()))
    }
    async fn start_trail(&self, _: &str) -> StoreResult<String> {
        Err(read_only())
    }
}

/// Verify the trail from the bucket alone ([`BucketTrail`]): the verification of the table's
/// trail, with the bucket's records and its newest seal's heads; its findings are breaks.
///
/// As [`super::verify_trail`]: the bucket first (a seal written after it is read is not checked),
/// then the parts, which the seals read say which to take.
pub async fn verify_bucket<W: Worm>(worm: &W, trail: Option<&str>, opts: &VerifyOptions) -> StoreResult<VerifyReport> {
    let trail = which_trail(worm, trail).await?;
    let ev = read_worm(worm, Some(&trail)).await?;
    let bucket = BucketTrail::of_seals(worm, &trail, &ev.seals).await?;
    let mut report = super::verify_read(&bucket, Some(trail), &ev, opts, super::VERIFY_PAGE).await?;
    report.breaks.extend(bucket.findings());
    report.from_bucket = true;
    Ok(report)
}
