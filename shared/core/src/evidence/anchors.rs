//! The trail's anchors in the WORM bucket — its identity, its chained seals, its retirement — and
//! what the bucket shows when read by version: the first version of every key is the one that
//! counts (Object Lock keeps it); a newer version or a delete marker at any key is named.

use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};

use super::archive::archive;
use crate::domain::TransientKind;
use crate::domain::seal::{
    AuditSeal, FIRST_PREV, SEAL_PREFIX, TRAIL_PREFIX, TrailAnchor, TrailRetirement, anchor_key, is_trail_id,
    new_trail_id, parse_records_key, parse_seal_key, retirement_key, seal_digest, seal_key,
};
use crate::ports::{AuditLog, ObjectVersion, StoreError, StoreResult, Worm, Written};

/// The trail the table names, anchored in the bucket (started, and anchored, when there is none).
pub(super) async fn ensure_trail<A: AuditLog, W: Worm>(audit: &A, worm: &W, now: DateTime<Utc>) -> StoreResult<String> {
    let trail = audit.start_trail(&new_trail_id(worm.bucket(), now)).await?;
    if !is_trail_id(&trail) {
        return Err(StoreError::infra(format!(
            "the audit table names trail {trail:?}, which is not a trail id: refusing to anchor it"
        )));
    }
    let key = anchor_key(&trail);
    if worm.versions(&key).await?.is_empty() {
        worm.put(&key, TrailAnchor::new(&trail, now).canonical().as_bytes())
            .await?;
    }
    Ok(trail)
}

/// Write the next seal of the trail: the heads of every chain, chained to the latest seal by its
/// digest, at the next sequence number, after the records it covers (`archive.rs`), written only
/// if that key is new (a concurrent sealer that wins makes this one read again and write the one
/// after). Returns its key.
pub async fn seal<A: AuditLog, W: Worm>(audit: &A, worm: &W, now: DateTime<Utc>) -> StoreResult<(String, AuditSeal)> {
    let trail = ensure_trail(audit, worm, now).await?;
    for _ in 0..16 {
        // A hint not read is a longer read of the bucket, not a reason not to seal.
        let hint = audit.sealed_up_to(&trail).await.unwrap_or_default();
        let (seq, prev, before) = match latest_seal(worm, &trail, hint).await? {
            // A seal that is not genuine (planted at the next key) is chained to by its digest, as
            // ever, and verify names it; its successor writes no records beside it (the bucket's
            // run ends before it, and reading every chain from its first record might not end).
            Some((seq, body)) => {
                let genuine = AuditSeal::parse(&body)
                    .ok()
                    .filter(|s| s.root_holds() && s.trail == trail && s.seq == seq);
                (seq, seal_digest(&body), Some(genuine))
            }
            None => (0, FIRST_PREV.to_owned(), None),
        };
        let next = seq
            .checked_add(1)
            .ok_or_else(|| StoreError::infra("the seal numbers are exhausted"))?;
        let seal = AuditSeal::new(&trail, next, &prev, now, audit.heads().await?);
        // The records first: a seal in the bucket has its records beside it.
        if let Some(None) = before {
            tracing::warn!(trail = %trail, seq, "the newest seal is not genuine: no records written beside the next");
        } else {
            archive(audit, worm, before.as_ref().and_then(Option::as_ref), &seal).await?;
        }
        let key = seal_key(&trail, seal.seq);
        match worm.put(&key, seal.canonical().as_bytes()).await {
            Ok(Written::New { .. }) => {
                // Only a hint for the next sealer: a seal not noted costs it a longer read.
                if let Err(e) = audit.note_seal(&trail, seal.seq).await {
                    tracing::warn!(error = %e, seal = %key, "seal written but not noted; the next sealer reads every seal");
                }
                return Ok((key, seal));
            }
            // Another sealer took this number (or is taking it): read the latest again.
            Ok(Written::Exists) => {}
            Err(e) if e.kind == TransientKind::Conflict => {}
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::new(
        TransientKind::Conflict,
        format!("audit trail {trail}: too many concurrent sealers; not sealed"),
    ))
}

/// The last seal of the unbroken run 1, 2, … of `trail`'s seals (a forged key far ahead is a gap
/// verify names; sealing goes on from the genuine run) and its first version's bytes. With
/// `hint`, the seal a sealer noted last, only the seals from it on are listed (its run before it
/// is taken as written; verify checks it); a hint that names no seal there is ignored.
async fn latest_seal<W: Worm>(worm: &W, trail: &str, hint: Option<u64>) -> StoreResult<Option<(u64, Vec<u8>)>> {
    let prefix = format!("{SEAL_PREFIX}{trail}/");
    let mut found = None;
    if let Some(h) = hint.filter(|h| *h > 0) {
        let listed = worm.versions_after(&prefix, &seal_key(trail, h - 1)).await?;
        found = run_from(&listed, h);
    }
    if found.is_none() {
        found = run_from(&worm.versions(&prefix).await?, 1);
    }
    let Some((seq, v)) = found else { return Ok(None) };
    let bytes = worm
        .get_version(&v.key, &v.version_id)
        .await?
        .ok_or_else(|| StoreError::infra(format!("seal {} unreadable", v.key)))?;
    Ok(Some((seq, bytes)))
}

/// The last seal of the unbroken run of seal keys from `start` in `versions` (first versions, no
/// delete markers), if there is a seal `start`.
fn run_from(versions: &[ObjectVersion], start: u64) -> Option<(u64, ObjectVersion)> {
    let mut first: BTreeMap<u64, &ObjectVersion> = BTreeMap::new();
    for v in versions.iter().filter(|v| !v.delete_marker) {
        if let Some((_, seq)) = parse_seal_key(&v.key) {
            first.entry(seq).or_insert(v);
        }
    }
    first
        .into_iter()
        .skip_while(|(seq, _)| *seq < start)
        .zip(start..)
        .take_while(|((seq, _), n)| seq == n)
        .last()
        .map(|((seq, v), _)| (seq, v.clone()))
}

/// End the trail the table names (before its table is rebuilt): a retirement record in the bucket,
/// which verification lists. Returns the retired trail, if there was one.
pub async fn retire_trail<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    now: DateTime<Utc>,
    by: &str,
    reason: &str,
) -> StoreResult<Option<String>> {
    let Some(trail) = audit.current_trail().await? else {
        return Ok(None);
    };
    if is_trail_id(&trail) {
        let doc = TrailRetirement::new(&trail, now, by, reason);
        worm.put(&retirement_key(&trail), doc.canonical().as_bytes()).await?;
    }
    Ok(Some(trail))
}

/// A seal as read from the bucket: its key, the version read (the first written) and its bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredSeal {
    pub key: String,
    pub version_id: String,
    pub body: String,
}

/// A trail the bucket knows of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownTrail {
    pub anchor: Option<TrailAnchor>,
    pub retired: Option<TrailRetirement>,
    pub seals: u64,
}

/// What the bucket shows, read by version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WormEvidence {
    /// Every trail with an anchor, a retirement or a seal.
    pub trails: BTreeMap<String, KnownTrail>,
    /// The seals of the trail asked for, first versions, in key order.
    pub seals: Vec<StoredSeal>,
    /// Anything no honest writer leaves: newer versions, delete markers, objects that do not read.
    pub findings: Vec<String>,
    /// `Some(n)`: a continuation's read — the trail objects (anchors, retirements) and the seals
    /// of the trail asked for from seal `n` on; nothing else of the bucket (other keys' versions,
    /// earlier seals, other trails' seals) was read.
    pub seals_from: Option<u64>,
    /// A whole read's parts of records beside the seals of the trail asked for (`archive.rs`):
    /// the seal number, root and chain of each key with a first version. `None`: not listed (a
    /// continuation).
    pub record_parts: Option<BTreeSet<(u64, String, String)>>,
}

/// Read the whole bucket by version, and the seals of `trail`.
pub async fn read_worm<W: Worm>(worm: &W, trail: Option<&str>) -> StoreResult<WormEvidence> {
    evidence(worm, worm.versions("").await?, trail).await
}

/// Read by version the trail objects (every trail's anchor and retirement: a few keys) and the
/// seals of `trail` from seal `from_seal` on, listed after the key of the seal before it: a
/// continuation's read, whose cost does not grow with the seals before `from_seal`. Also returns
/// whether an object (not only a delete marker) was ever written at seal `from_seal`'s key.
pub(super) async fn read_worm_from_seal<W: Worm>(
    worm: &W,
    trail: Option<&str>,
    from_seal: u64,
) -> StoreResult<(WormEvidence, bool)> {
    let mut versions = worm.versions(TRAIL_PREFIX).await?;
    let mut present = false;
    if let Some(t) = trail {
        let before = seal_key(t, from_seal.saturating_sub(1));
        let seals = worm.versions_after(&format!("{SEAL_PREFIX}{t}/"), &before).await?;
        let start = seal_key(t, from_seal);
        present = seals.iter().any(|v| v.key == start && !v.delete_marker);
        versions.extend(seals);
    }
    let mut ev = evidence(worm, versions, trail).await?;
    ev.seals_from = Some(from_seal);
    ev.record_parts = None;
    Ok((ev, present))
}

/// What `versions` show, each key's first version read.
async fn evidence<W: Worm>(worm: &W, versions: Vec<ObjectVersion>, trail: Option<&str>) -> StoreResult<WormEvidence> {
    let mut by_key: BTreeMap<String, Vec<ObjectVersion>> = BTreeMap::new();
    for v in versions {
        by_key.entry(v.key.clone()).or_default().push(v);
    }
    let mut ev = WormEvidence::default();
    let mut parts = BTreeSet::new();
    for (key, versions) in &by_key {
        let objects: Vec<&ObjectVersion> = versions.iter().filter(|v| !v.delete_marker).collect();
        for v in objects.iter().skip(1) {
            ev.findings.push(format!(
                "s3 key {key}: a newer version ({}) was written over the first; the first is the one read",
                v.version_id
            ));
        }
        for v in versions.iter().filter(|v| v.delete_marker) {
            ev.findings.push(format!(
                "s3 key {key}: a delete marker ({}) hides it from LIST and GET",
                v.version_id
            ));
        }
        let Some(first) = objects.first() else { continue };
        if let Some(k) = parse_records_key(key).filter(|k| Some(k.trail.as_str()) == trail) {
            parts.insert((k.seq, k.root, k.chain));
        } else if let Some(rest) = key.strip_prefix(TRAIL_PREFIX) {
            read_trail_object(worm, &mut ev, key, rest, &first.version_id).await?;
        } else if key.starts_with(SEAL_PREFIX) {
            let Some((t, _)) = parse_seal_key(key) else {
                ev.findings.push(format!("s3 key {key}: no sealer writes this key"));
                continue;
            };
            ev.trails.entry(t.clone()).or_default().seals += 1;
            if Some(t.as_str()) == trail {
                match read_text(worm, key, &first.version_id).await? {
                    Ok(body) => ev.seals.push(StoredSeal {
                        key: key.clone(),
                        version_id: first.version_id.clone(),
                        body,
                    }),
                    Err(why) => ev.findings.push(format!("seal {key}: {why}")),
                }
            }
        }
    }
    ev.record_parts = Some(parts);
    Ok(ev)
}

async fn read_text<W: Worm>(worm: &W, key: &str, version_id: &str) -> StoreResult<Result<String, String>> {
    Ok(match worm.get_version(key, version_id).await? {
        None => Err(format!("its first version ({version_id}) cannot be read")),
        Some(bytes) => String::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned()),
    })
}

async fn read_trail_object<W: Worm>(
    worm: &W,
    ev: &mut WormEvidence,
    key: &str,
    rest: &str,
    version_id: &str,
) -> StoreResult<()> {
    let Some((t, file)) = rest.split_once('/').filter(|(t, _)| is_trail_id(t)) else {
        ev.findings
            .push(format!("s3 key {key}: no writer of this system writes this key"));
        return Ok(());
    };
    let body = match read_text(worm, key, version_id).await? {
        Ok(b) => b,
        Err(why) => {
            ev.findings.push(format!("{key}: {why}"));
            return Ok(());
        }
    };
    let disagree =
        |content: &str| format!("{key}: its key names trail {t}, its content {content}: key and content disagree");
    match file {
        "anchor.json" => match TrailAnchor::parse(body.as_bytes()) {
            Ok(a) if a.trail == t => ev.trails.entry(t.to_owned()).or_default().anchor = Some(a),
            Ok(a) => ev.findings.push(disagree(&a.trail)),
            Err(why) => ev.findings.push(format!("trail anchor {key} {why}")),
        },
        "retired.json" => match TrailRetirement::parse(body.as_bytes()) {
            Ok(r) if r.trail == t => ev.trails.entry(t.to_owned()).or_default().retired = Some(r),
            Ok(r) => ev.findings.push(disagree(&r.trail)),
            Err(why) => ev.findings.push(format!("trail retirement {key} {why}")),
        },
        _ => ev
            .findings
            .push(format!("s3 key {key}: no writer of this system writes this key")),
    }
    Ok(())
}
