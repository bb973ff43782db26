//! One envelope in full, for the console's envelope page: its fields and verbatim body, its WORM
//! copy as the bucket holds it (every version, and whether the first one's bytes still hash to
//! what the envelope names), the audit records about it, and its lineage: the envelope it is a
//! copy of, each copy its replays sent and what became of it, and who holds its transaction in
//! the ledger.
//!
//! The records are read by their ids, which are deterministic ([`AuditRecord::id_for`]): the
//! dead letter's, the envelope's creation, each of its newest [`MAX_REPLAYS`] replays' (one of
//! four kinds), the escalations it was the oldest of. A replay that sent a copy but lost its
//! claim before it wrote the envelope leaves a record the page does not ask for, and a copy it
//! does not list: a delivery the ledger names that is not one of the page's is said to be so.
//! What the page shows is what the stores hold now; whether the trail is intact is the Evidence
//! page's verification, not this read. A part that cannot be read (the bucket, the ledger) is
//! named as unread; the rest is shown.

use futures::{StreamExt, TryStreamExt};
use serde::Serialize;

use super::read::read;
use super::{Asked, ControlError, ControlPlane};
use crate::domain::envelope::envelope_id;
use crate::domain::hash::sha256_hex;
use crate::domain::{AuditKind, AuditRecord, CommittedRef, DlqEnvelope, TxKey};
use crate::ports::{
    EnvelopeStore, EnvelopesOfPeriod, Ledger, LedgerReader, RecordsOfPeriod, Signer, StoreResult, Worm,
};
use crate::replay::ReplayPorts;

/// The replays of one envelope whose records and copies the page reads (the newest).
pub const MAX_REPLAYS: usize = 20;
/// Reads of one kind (records, envelopes, ledger keys) in flight at once.
const AT_ONCE: usize = 16;

/// The kinds of record a replay of an envelope may leave (one of them, as it settled).
const REPLAY_KINDS: [AuditKind; 4] = [
    AuditKind::ReplayReinjected,
    AuditKind::ReplaySuppressed,
    AuditKind::Quarantined,
    AuditKind::Edited,
];

/// The WORM copy as the bucket holds it.
#[derive(Clone, Debug, Serialize)]
pub struct WormCopy {
    pub bucket: String,
    pub key: String,
    /// The SHA-256 the envelope names.
    pub sha256: String,
    /// The bucket this deployment reads, when the envelope names another (its copy not read).
    pub other_bucket: Option<String>,
    /// Every version at the key, oldest first, then any delete marker (one version: as written).
    pub versions: Vec<Version>,
    /// The first version's id: the copy Object Lock keeps (none: the bucket holds no object).
    pub first_version: Option<String>,
    /// Whether the first version's bytes hash to `sha256` (none: not read).
    pub first_version_matches: Option<bool>,
    /// Whether the envelope as the table holds it, with its body, makes exactly the first
    /// version's bytes under the key it names ([`DlqEnvelope::worm_document`], built from
    /// fields that never change): a change to the envelope in the table, whatever `sha256` it
    /// names (none: not read).
    pub envelope_matches: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Version {
    pub version_id: String,
    pub delete_marker: bool,
}

/// What became of a copy a replay sent.
#[derive(Clone, Debug, Serialize)]
pub struct CopyFate {
    pub replay_id: String,
    pub sqs_message_id: String,
    /// `POSTED` (the ledger's posting is this copy's delivery), `DUPLICATE_SUPPRESSED` (the
    /// consumer found it committed), `DEAD_LETTERED` (again: `envelope_id`), or `NOT_SEEN`
    /// (none of those: in a queue still, or held by a delivery the ledger names otherwise).
    pub fate: &'static str,
    pub envelope_id: Option<String>,
}

/// Who holds one transaction in the ledger.
#[derive(Clone, Debug, Serialize)]
pub struct Held {
    pub source_hash: String,
    pub period: Option<String>,
    /// Nothing holds it (none), a delivery, or a hand-off to a manual journal.
    pub held_by: Option<String>,
    /// A delivery holds it that is neither the message as sent nor a copy the page lists (a
    /// replay that lost its claim after sending, one older than the newest [`MAX_REPLAYS`]).
    pub unlisted_delivery: bool,
    #[serde(skip)]
    committed: Option<CommittedRef>,
}

/// The ids of the records about `e` a page reads: its dead letter's, its creation's, its newest
/// [`MAX_REPLAYS`] replays' (each of the kinds a replay may leave), and the escalations of
/// `stages` for its failure code it may have been the oldest of.
pub fn record_ids<'s>(e: &DlqEnvelope, stages: impl IntoIterator<Item = &'s str>) -> Vec<String> {
    let mut ids = vec![
        AuditRecord::id_for(AuditKind::DeadLettered, &e.original.source_message_id),
        AuditRecord::id_for(AuditKind::Enriched, &e.envelope_id),
        AuditRecord::id_for(AuditKind::Quarantined, &e.envelope_id),
    ];
    for replay in replay_ids(e) {
        ids.extend(
            REPLAY_KINDS
                .iter()
                .map(|k| AuditRecord::replay_id_for(*k, &e.envelope_id, replay)),
        );
    }
    for stage in stages {
        let subject = format!("{stage}#{}#{}", e.failure_code.as_str(), e.envelope_id);
        ids.push(AuditRecord::id_for(AuditKind::Escalated, &subject));
    }
    ids
}

/// The ids of `e`'s newest [`MAX_REPLAYS`] replays, each once.
fn replay_ids(e: &DlqEnvelope) -> Vec<&str> {
    let mut ids = distinct_replays(e);
    ids.truncate(MAX_REPLAYS);
    ids
}

/// The ids of `e`'s replays, each once, newest first.
fn distinct_replays(e: &DlqEnvelope) -> Vec<&str> {
    let mut ids: Vec<&str> = Vec::new();
    for r in e.replays.iter().rev() {
        if !ids.contains(&r.replay_id.as_str()) {
            ids.push(&r.replay_id);
        }
    }
    ids
}

/// The WORM copy `e` names, as the bucket holds it (none: it names none). `body`: the verbatim
/// body, when it was read (the envelope is compared with the copy only then).
async fn worm_copy<W: Worm>(e: &DlqEnvelope, body: Option<&str>, worm: &W) -> StoreResult<Option<WormCopy>> {
    let Some(w) = &e.worm else { return Ok(None) };
    let mut copy = WormCopy {
        bucket: w.bucket.clone(),
        key: w.key.clone(),
        sha256: w.sha256.clone(),
        other_bucket: (w.bucket != worm.bucket()).then(|| worm.bucket().to_owned()),
        versions: Vec::new(),
        first_version: None,
        first_version_matches: None,
        envelope_matches: None,
    };
    if copy.other_bucket.is_some() {
        return Ok(Some(copy));
    }
    copy.versions = worm
        .versions(&w.key)
        .await?
        .into_iter()
        .filter(|v| v.key == w.key)
        .map(|v| Version {
            version_id: v.version_id,
            delete_marker: v.delete_marker,
        })
        .collect();
    copy.first_version = copy
        .versions
        .iter()
        .find(|v| !v.delete_marker)
        .map(|v| v.version_id.clone());
    let first = match &copy.first_version {
        Some(id) => worm.get_version(&w.key, id).await?,
        None => None,
    };
    if let Some(bytes) = first {
        copy.first_version_matches = Some(sha256_hex(&bytes) == w.sha256);
        copy.envelope_matches = body.map(|b| e.worm_document(b) == (w.key.clone(), bytes));
    }
    Ok(Some(copy))
}

/// `what` read, or why not in `unread` (the page shows the rest).
fn or_unread<T>(read: StoreResult<T>, what: &str, unread: &mut Vec<String>) -> Option<T> {
    read.map_err(|e| unread.push(format!("{what}: {e}"))).ok()
}

impl<P: ReplayPorts, G: Signer> ControlPlane<P, G>
where
    P::Ledger: LedgerReader,
    P::Store: EnvelopesOfPeriod,
    P::Audit: RecordsOfPeriod,
{
    /// One envelope in full: its fields, attempts, status history and replays, the verbatim body
    /// (from the bucket when it was too large for the table), its WORM copy, the audit records
    /// about it and its lineage.
    pub(super) async fn envelope(&self, asked: &Asked<'_>, id: &str) -> Result<serde_json::Value, ControlError> {
        let r = &self.replayer;
        let Some(e) = r.store.get(id).await? else {
            return Err(ControlError::Invalid(format!("no envelope {id}")));
        };
        let mut unread = Vec::new();
        let body = crate::envelopes::original_body(&e, &r.worm).await;
        let body = or_unread(body, "the verbatim body", &mut unread);
        // A body neither in the table nor the bucket is the empty one the enricher copied.
        let copied = body.as_ref().map(|b| b.as_deref().unwrap_or(""));
        let worm = Box::pin(worm_copy(&e, copied, &r.worm)).await;
        let worm = or_unread(worm, "the WORM copy", &mut unread).flatten();
        let stages = r.config.escalation.stages.iter().map(|s| s.name.as_str());
        let ids = record_ids(&e, stages);
        let records = futures::stream::iter(ids.iter().map(|id| r.audit.record(id)))
            .buffered(AT_ONCE)
            .try_filter_map(|found| std::future::ready(Ok(found)))
            .try_collect::<Vec<AuditRecord>>()
            .await;
        let mut records = or_unread(records, "the audit records", &mut unread).unwrap_or_default();
        records.sort_by(|a, b| (a.at, &a.audit_id).cmp(&(b.at, &b.audit_id)));
        let lineage = Box::pin(self.lineage(&e)).await;
        let (held, copies) = or_unread(lineage, "the lineage", &mut unread).unwrap_or_default();
        let not_read = distinct_replays(&e).len().saturating_sub(MAX_REPLAYS);
        read(asked, "envelope", 1 + records.len());
        Ok(serde_json::json!({
            "envelope": e, "body": body.flatten(), "worm": worm, "records": records,
            "lineage": { "replay_of": e.replay_of(), "copies": copies, "ledger": held, "replays_not_read": not_read },
            "unread": unread,
        }))
    }

    /// Who holds `e`'s transaction (and an edit's) in the ledger, and what became of each copy
    /// its newest replays sent.
    async fn lineage(&self, e: &DlqEnvelope) -> StoreResult<(Vec<Held>, Vec<CopyFate>)> {
        let r = &self.replayer;
        // The transaction the envelope names (a raw digest names none) and each edit's.
        let mut keys: Vec<TxKey> = e.claimed_hash().map(|_| e.decoded_key()).into_iter().collect();
        for replay in &e.replays {
            if let Some(hash) = &replay.copy_source_hash {
                let key = TxKey::new(hash.clone(), replay.copy_period.clone());
                // One transaction once: under its period where one is known.
                match keys.iter_mut().find(|k| k.source_hash == key.source_hash) {
                    Some(k) if k.period.is_none() => *k = key,
                    Some(_) => {}
                    None => keys.push(key),
                }
            }
        }
        let mut held: Vec<Held> = futures::stream::iter(keys.into_iter().map(|key| async move {
            let committed = r.ledger.lookup(&key).await?;
            Ok::<_, crate::ports::StoreError>(Held {
                held_by: committed.as_ref().map(CommittedRef::holder),
                source_hash: key.source_hash,
                period: key.period,
                unlisted_delivery: false,
                committed,
            })
        }))
        .buffered(AT_ONCE)
        .try_collect()
        .await?;
        let newest = replay_ids(e);
        let sent: Vec<(&str, &str)> = e
            .replays
            .iter()
            .filter(|x| newest.contains(&x.replay_id.as_str()))
            .filter_map(|x| x.sqs_message_id.as_deref().map(|m| (x.replay_id.as_str(), m)))
            .collect();
        let posted: Vec<&str> = held
            .iter()
            .filter_map(|h| h.committed.as_ref())
            .map(|c| c.sqs_message_id.as_str())
            .collect();
        let posted = &posted;
        let copies: Vec<CopyFate> = futures::stream::iter(sent.into_iter().map(|(replay, message)| async move {
            let (fate, envelope) = if posted.contains(&message) {
                ("POSTED", None)
            } else if let Some(again) = r.store.get(&envelope_id(message)).await? {
                ("DEAD_LETTERED", Some(again.envelope_id))
            } else if r
                .audit
                .record(&AuditRecord::id_for(AuditKind::DuplicateSuppressed, message))
                .await?
                .is_some()
            {
                ("DUPLICATE_SUPPRESSED", None)
            } else {
                ("NOT_SEEN", None)
            };
            Ok::<_, crate::ports::StoreError>(CopyFate {
                replay_id: replay.to_owned(),
                sqs_message_id: message.to_owned(),
                fate,
                envelope_id: envelope,
            })
        }))
        .buffered(AT_ONCE)
        .try_collect()
        .await?;
        for h in &mut held {
            let delivery = h.committed.as_ref().map(|c| c.sqs_message_id.as_str());
            h.unlisted_delivery = delivery.is_some_and(|d| {
                !d.is_empty() && d != e.original.source_message_id && !copies.iter().any(|c| c.sqs_message_id == d)
            });
        }
        Ok((held, copies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_records_read_are_the_dead_letter_the_creation_each_replay_and_the_escalations() {
        let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
        m.message_id = Some("dlq-1".into());
        m.body = Some("{}".into());
        let mut e = crate::domain::envelope::envelope_from_dlq_message(&m, chrono::Utc::now(), "enricher");
        e.envelope_id = "env-1".into();
        e.original.source_message_id = "sqs-1".into();
        let replay = |id: &str| crate::domain::envelope::ReplayRecord {
            replay_id: id.into(),
            triggered_by: "t".into(),
            reason: "r".into(),
            at: e.dead_lettered_at,
            outcome: crate::domain::EnvelopeStatus::Pending,
            sqs_message_id: None,
            copy_source_hash: None,
            copy_period: None,
            in_doubt_until: None,
        };
        e.replays = vec![replay("r1"), replay("r2"), replay("r1")];
        let ids = record_ids(&e, ["on-call"]);
        assert_eq!(
            &ids[..3],
            ["DEAD_LETTERED#sqs-1", "ENRICHED#env-1", "QUARANTINED#env-1"]
        );
        assert!(ids.contains(&"REPLAY_REINJECTED#env-1#r2".to_owned()));
        assert!(ids.contains(&"EDITED#env-1#r1".to_owned()));
        assert_eq!(ids.len(), 3 + 2 * REPLAY_KINDS.len() + 1, "each replay once: {ids:?}");
        let code = e.failure_code.as_str();
        assert_eq!(ids.last().unwrap(), &format!("ESCALATED#on-call#{code}#env-1"));
        // Only the newest replays are read.
        e.replays = (0..MAX_REPLAYS + 5).map(|i| replay(&format!("r{i}"))).collect();
        let ids = replay_ids(&e);
        assert_eq!(ids.len(), MAX_REPLAYS);
        assert_eq!(ids[0], format!("r{}", MAX_REPLAYS + 4));
    }
}
