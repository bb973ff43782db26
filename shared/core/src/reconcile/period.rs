//! What a reconciliation of one period reads besides the ledger: that period's exceptions — its
//! envelopes and the audit records a reconciliation reads — through the stores' period indexes,
//! with those of no known period (a body without a readable value date; records from before
//! records carried their period), instead of every envelope and the whole trail. A lineage may
//! cross periods (an approved edit may change the value date: the edited copy posts in another
//! period than its original's envelope), and an index may lag or hold a record from before
//! records carried their period under none: what the read names and does not hold is then
//! fetched by key ([`complete_exceptions`]).

use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use super::read::{LedgerRead, Links, read_ledger};
use crate::domain::envelope::envelope_id;
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, Posting, Segment, message::parse_date};
use crate::ports::{EnvelopeStore, EnvelopesOfPeriod, Ledger, LedgerReader, LedgerScope, RecordsOfPeriod, StoreResult};

/// The envelopes and audit records a reconciliation reads.
#[derive(Clone, Debug, Default)]
pub struct Exceptions {
    pub envelopes: Vec<DlqEnvelope>,
    pub audit: Vec<AuditRecord>,
}

/// How many envelopes named across periods are fetched at once.
const FETCHES_AT_ONCE: usize = 16;

/// The exceptions of `period` and those of no known period.
pub async fn exceptions_of_period<E, A>(envelopes: &E, audit: &A, period: &str) -> StoreResult<Exceptions>
where
    E: EnvelopesOfPeriod + ?Sized,
    A: RecordsOfPeriod + ?Sized,
{
    let (mut of_period, of_none, mut records, records_of_none) = futures::try_join!(
        envelopes.envelopes_of_period(Some(period)),
        envelopes.envelopes_of_period(None),
        audit.records_of_period(Some(period)),
        audit.records_of_period(None),
    )?;
    of_period.extend(of_none);
    records.extend(records_of_none);
    Ok(Exceptions {
        envelopes: of_period,
        audit: records,
    })
}

/// What the read names but does not hold: every envelope a record of it names by `replay.of`
/// (an edit's copy in this period, its original in another), a dead letter's or an envelope
/// record's own envelope (a record from before records carried their period, read under none,
/// or an index that lags), the envelope that handed a duplicate's transaction to a manual
/// journal, and the fate of each copy an envelope of the read sent that the read does not
/// meet (an edit's copy dead-lettered again, or suppressed as a duplicate, in another period).
/// Fetched by key, and again for what those name, until nothing is missing; what is nowhere
/// stays missing, and the reconciliation names it.
pub async fn complete_exceptions<E, A, L>(
    store: &E,
    audit: &A,
    ledger: &L,
    postings: &[Posting],
    exceptions: &mut Exceptions,
) -> StoreResult<()>
where
    E: EnvelopeStore + ?Sized,
    A: RecordsOfPeriod + ?Sized,
    L: Ledger + ?Sized,
{
    let mut asked: BTreeSet<String> = BTreeSet::new();
    // A lineage is as long as the replays of one message; the bound guards against a cycle.
    for _ in 0..64 {
        let wanted = Wanted::of(postings, exceptions, &asked);
        let hand_offs: Vec<String> = futures::stream::iter(wanted.hand_offs.iter())
            .map(|h| ledger.lookup(h))
            .buffer_unordered(FETCHES_AT_ONCE)
            .try_filter_map(|found| async move { Ok(found.and_then(|c| c.manual_journal)) })
            .try_collect()
            .await?;
        let envelopes: BTreeSet<String> = wanted
            .envelopes
            .into_iter()
            .chain(hand_offs)
            .filter(|id| !asked.contains(id) && !exceptions.envelopes.iter().any(|e| &e.envelope_id == id))
            .collect();
        asked.extend(wanted.hand_offs);
        if envelopes.is_empty() && wanted.records.is_empty() {
            return Ok(());
        }
        let found: Vec<DlqEnvelope> = futures::stream::iter(envelopes.iter())
            .map(|id| store.get(id))
            .buffer_unordered(FETCHES_AT_ONCE)
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await?;
        let records: Vec<AuditRecord> = futures::stream::iter(wanted.records.iter())
            .map(|id| audit.record(id))
            .buffer_unordered(FETCHES_AT_ONCE)
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await?;
        asked.extend(envelopes);
        asked.extend(wanted.records);
        exceptions.envelopes.extend(found);
        exceptions.audit.extend(records);
    }
    Ok(())
}

/// What one round of [`complete_exceptions`] asks for.
struct Wanted {
    envelopes: BTreeSet<String>,
    records: BTreeSet<String>,
    /// Transactions of duplicates the read holds no posting or hand-off of.
    hand_offs: BTreeSet<String>,
}

impl Wanted {
    fn of(postings: &[Posting], ex: &Exceptions, asked: &BTreeSet<String>) -> Wanted {
        let held: BTreeSet<&str> = ex.envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
        let records: BTreeSet<&str> = ex.audit.iter().map(|r| r.audit_id.as_str()).collect();
        let fresh = |id: &str| !held.contains(id) && !asked.contains(id);
        // Every SQS message with a fate in the read (a posting, a duplicate record, an envelope).
        let fated: BTreeSet<&str> = postings
            .iter()
            .map(|p| p.sqs_message_id.as_str())
            .chain(
                ex.audit
                    .iter()
                    .filter(|r| r.kind == AuditKind::DuplicateSuppressed)
                    .map(|r| r.sqs_message_id.as_str()),
            )
            .chain(ex.envelopes.iter().map(|e| e.original.source_message_id.as_str()))
            .collect();
        let copies: Vec<&str> = ex
            .envelopes
            .iter()
            .flat_map(|e| e.replays.iter().filter_map(|r| r.sqs_message_id.as_deref()))
            .filter(|copy| !fated.contains(copy))
            .collect();
        let named = postings
            .iter()
            .filter_map(|p| p.replay_of.clone())
            .chain(ex.audit.iter().filter_map(|r| r.replay_of.clone()))
            .chain(ex.envelopes.iter().filter_map(|e| e.replay_of().map(str::to_owned)))
            .chain(ex.audit.iter().filter_map(own_envelope))
            .chain(copies.iter().map(|copy| envelope_id(copy)));
        let committed: BTreeSet<&str> = postings
            .iter()
            .map(|p| p.source_hash.as_str())
            .chain(ex.envelopes.iter().map(|e| e.source_hash.as_str()))
            .collect();
        Wanted {
            envelopes: named.filter(|id| fresh(id)).collect(),
            records: copies
                .iter()
                .map(|copy| AuditRecord::id_for(AuditKind::DuplicateSuppressed, copy))
                .filter(|id| !records.contains(id.as_str()) && !asked.contains(id))
                .collect(),
            hand_offs: ex
                .audit
                .iter()
                .filter(|r| r.kind == AuditKind::DuplicateSuppressed)
                .filter_map(|r| r.source_hash.clone())
                .filter(|h| !committed.contains(h.as_str()) && !asked.contains(h))
                .collect(),
        }
    }
}

/// The envelope a dead letter's record or an envelope's own record is about.
fn own_envelope(r: &AuditRecord) -> Option<String> {
    match r.kind {
        AuditKind::DeadLettered => Some(envelope_id(&r.sqs_message_id)),
        AuditKind::Enriched | AuditKind::Quarantined => {
            let (_, rest) = r.audit_id.split_once('#')?;
            rest.split('#').next().filter(|id| !id.is_empty()).map(str::to_owned)
        }
        _ => None,
    }
}

/// One invocation of a reconciliation's fan-out: one segment of one period's ledger read
/// (`{"reconcile_segment": {"period": "YYYY-MM", "segment": "INDEX/COUNT"}}` to the replay
/// function).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentRead {
    pub period: String,
    /// `INDEX/COUNT`.
    pub segment: String,
}

impl SegmentRead {
    /// The period and segment, checked.
    pub fn parts(&self) -> Result<(&str, Segment), String> {
        if self.period.len() != 7 || parse_date(&format!("{}-01", self.period)).is_none() {
            return Err(format!("`period` must be YYYY-MM, not {:?}", self.period));
        }
        let segment: Segment = self.segment.parse().map_err(|e| format!("`segment`: {e}"))?;
        Ok((&self.period, segment))
    }
}

/// One segment of a period's fan-out: the period's exceptions read here again, their links, and
/// the segment's ledger read (its postings of a lineage kept whole, the rest counted). The
/// caller read the exceptions before invoking; exceptions only ever grow (envelopes and records
/// are never removed), so these links hold the caller's: a posting kept here that the caller's
/// links do not name is one committed transaction in its outcomes, counted once either way.
pub async fn read_period_segment<R, E, A>(
    reader: &R,
    envelopes: &E,
    audit: &A,
    req: &SegmentRead,
) -> Result<LedgerRead, String>
where
    R: LedgerReader + ?Sized,
    E: EnvelopesOfPeriod + ?Sized,
    A: RecordsOfPeriod + ?Sized,
{
    let (period, segment) = req.parts()?;
    let exceptions = exceptions_of_period(envelopes, audit, period)
        .await
        .map_err(|e| e.to_string())?;
    let links = Links::of(&exceptions.envelopes, &exceptions.audit);
    let scope = LedgerScope::period(period).segment(segment);
    read_ledger(reader, &scope, 1, &links).await.map_err(|e| e.to_string())
}
