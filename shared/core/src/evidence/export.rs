//! The evidence bundle written as it is read (`dlqctl evidence export`): the audit records go
//! from the trail to the file a page at a time (`AuditLog::chain_page`), so exporting one period
//! holds that period's transactions (which its reconciliation needs) and one page of records,
//! never the trail, which grows with the whole history. The file reads back as a
//! [`super::Bundle`].

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::io::Write;

use super::anchors::{read_worm, seal};
use super::bundle::{BUNDLE_SCHEMA, Bundle, BundleSeal};
use super::stream::VERIFY_PAGE;
use crate::domain::audit::AUDIT_CHAINS;
use crate::domain::seal::{AuditSeal, parse_seal_key};
use crate::ports::{AuditLog, Cursor, StoreError, StoreResult, Worm};
use crate::reconcile::{Entry, Reconciliation, State};

/// What a written bundle holds, for the operator's summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BundleWritten {
    pub transactions: usize,
    pub audit_records: u64,
    pub chains: usize,
    pub seals: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing the bundle: {0}")]
    Write(#[from] std::io::Error),
    #[error("writing the bundle: {0}")]
    Json(#[from] serde_json::Error),
}

/// One `"name":value` member of the bundle's object, after a comma unless it is the first.
fn member<O: Write, T: Serialize + ?Sized>(out: &mut O, first: bool, name: &str, value: &T) -> Result<(), ExportError> {
    if !first {
        out.write_all(b",\n")?;
    }
    serde_json::to_writer(&mut *out, name)?;
    out.write_all(b":")?;
    serde_json::to_writer(&mut *out, value)?;
    Ok(())
}

/// Write the bundle of `trail` to `out` (as [`super::export_bundle`] gathers it: every record its
/// latest seal covers, every seal of the trail as stored, with proofs), the records chain by chain
/// as their pages are read. The caller seals the trail first (`dlqctl evidence export` asks the
/// control plane to) and gives that seal's number, `sealed`: a trail whose latest readable seal is
/// older is refused, not written as a bundle that leaves the newest records out.
#[allow(clippy::too_many_arguments)]
pub async fn write_bundle<A: AuditLog, W: Worm, O: Write>(
    audit: &A,
    worm: &W,
    (trail, sealed): (&str, u64),
    now: DateTime<Utc>,
    period: &str,
    outcomes: &[(State, Entry)],
    reconciliation: &Reconciliation,
    out: &mut O,
) -> Result<BundleWritten, ExportError> {
    let mut ev = read_worm(worm, Some(trail)).await?;
    // Up to seal `sealed`: one written since covers records the bundle's read may not hold.
    ev.seals
        .retain(|s| parse_seal_key(&s.key).is_some_and(|(_, n)| n <= sealed));
    // The records the last seal covers: each chain up to the head it commits to.
    let latest = ev.seals.last().and_then(|s| AuditSeal::parse(s.body.as_bytes()).ok());
    if latest.as_ref().is_none_or(|l| l.seq < sealed) {
        let read = latest.as_ref().map_or("none".to_owned(), |l| format!("seal {}", l.seq));
        return Err(StoreError::infra(format!(
            "trail {trail}: its latest readable seal is {read}, not seal {sealed} written for this export: nothing written"
        ))
        .into());
    }
    let heads = latest.map(|s| s.heads).unwrap_or_default();
    out.write_all(b"{")?;
    member(out, true, "schema", BUNDLE_SCHEMA)?;
    member(out, false, "exported_at", &now)?;
    member(out, false, "period", period)?;
    member(out, false, "outcomes", outcomes)?;
    member(out, false, "reconciliation", reconciliation)?;
    member(out, false, "trail", trail)?;
    out.write_all(b",\n\"audit_records\":[")?;
    let mut written = 0u64;
    for i in 0..AUDIT_CHAINS {
        let chain = format!("c{i}");
        let Some(head) = heads.iter().find(|h| h.chain == chain) else {
            continue;
        };
        let mut cursor = Cursor::new("audit chain read");
        while let Some(at) = cursor.at() {
            let (records, next) = audit.chain_page(&chain, 0, at, VERIFY_PAGE).await?;
            for r in records.iter().filter(|r| r.seq <= head.seq) {
                out.write_all(if written == 0 { b"\n" } else { b",\n" })?;
                serde_json::to_writer(&mut *out, r)?;
                written += 1;
            }
            cursor.follow(next)?;
        }
    }
    out.write_all(b"]")?;
    member(out, false, "heads", &heads)?;
    let seals = ev.seals.len();
    out.write_all(b",\n\"seals\":[")?;
    for (n, stored) in ev.seals.into_iter().enumerate() {
        out.write_all(if n == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut *out, &BundleSeal::new(stored))?;
    }
    out.write_all(b"]")?;
    member(out, false, "worm_findings", &ev.findings)?;
    out.write_all(b"}\n")?;
    out.flush()?;
    Ok(BundleWritten {
        transactions: outcomes.len(),
        audit_records: written,
        chains: heads.len(),
        seals,
    })
}

/// Seal the trail now, then gather the bundle: every record the new seal covers, every seal of
/// the trail as stored, with proofs. The bundle [`write_bundle`] writes, read back: one
/// implementation, the one `dlqctl evidence export` runs.
pub async fn export_bundle<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    now: DateTime<Utc>,
    period: &str,
    outcomes: Vec<(State, Entry)>,
    reconciliation: Reconciliation,
) -> StoreResult<Bundle> {
    let (bytes, _) = sealed_bundle(audit, worm, now, period, &outcomes, &reconciliation)
        .await
        .map_err(store_error)?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::infra(format!("the bundle: {e}")))
}

/// Where [`store_bundle`] writes: `evidence-bundles/<period>/<time>-<name>.json`.
pub const BUNDLE_PREFIX: &str = "evidence-bundles/";

/// A bundle written into the bucket, as [`store_bundle`] wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BundleStored {
    pub key: String,
    pub version_id: String,
    pub bytes: usize,
    /// SHA-256 of its bytes, hex: what the auditor checks the file they downloaded against.
    pub sha256: String,
    #[serde(flatten)]
    pub written: BundleWritten,
}

/// Seal the trail now, write the bundle of `period` (as [`export_bundle`] gathers it) and keep
/// it in the bucket, under its own COMPLIANCE date as every object there: the bundle as it was
/// handed over, which no one can change since. `name` (a request's id: letters, digits and `-`
/// kept) makes its key unique. The bundle is held in memory while it is written.
pub async fn store_bundle<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    now: DateTime<Utc>,
    period: &str,
    (outcomes, reconciliation): (&[(State, Entry)], &Reconciliation),
    name: &str,
) -> StoreResult<BundleStored> {
    let (bytes, written) = sealed_bundle(audit, worm, now, period, outcomes, reconciliation)
        .await
        .map_err(store_error)?;
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    let key = format!("{BUNDLE_PREFIX}{period}/{}-{name}.json", now.format("%Y%m%dT%H%M%SZ"));
    match worm.put(&key, &bytes).await? {
        crate::ports::Written::New { version_id } => Ok(BundleStored {
            key,
            version_id,
            bytes: bytes.len(),
            sha256: crate::domain::hash::sha256_hex(&bytes),
            written,
        }),
        crate::ports::Written::Exists => Err(StoreError::infra(format!(
            "{key} is already in the bucket: a bundle is never written over another"
        ))),
    }
}

/// The trail sealed now, and the bundle covering that seal written into memory.
async fn sealed_bundle<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    now: DateTime<Utc>,
    period: &str,
    outcomes: &[(State, Entry)],
    reconciliation: &Reconciliation,
) -> Result<(Vec<u8>, BundleWritten), ExportError> {
    let (_, sealed) = seal(audit, worm, now).await?;
    let mut bytes = Vec::new();
    let written = write_bundle(
        audit,
        worm,
        (&sealed.trail, sealed.seq),
        now,
        period,
        outcomes,
        reconciliation,
        &mut bytes,
    )
    .await?;
    Ok((bytes, written))
}

fn store_error(e: ExportError) -> StoreError {
    match e {
        ExportError::Store(e) => e,
        e => StoreError::infra(format!("the bundle: {e}")),
    }
}
