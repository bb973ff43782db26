//! What a reconciliation of one period reads besides the ledger: that period's exceptions — its
//! envelopes and the audit records a reconciliation reads — through the stores' period indexes,
//! with those of no known period (a body without a readable value date; records from before
//! records carried their period), instead of every envelope and the whole trail. A lineage may
//! cross periods (an approved edit may change the value date: the edited copy posts in another
//! period than its original's envelope), and an index may lag or hold a record from before
//! records carried their period under none: what the read names and does not hold is then
//! fetched by key ([`complete_exceptions`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use super::read::{LedgerRead, Links, fetch, read_ledger};
use crate::domain::envelope::envelope_id;
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, Posting, Segment, TxKey, message::parse_date};
use crate::ports::{EnvelopeStore, EnvelopesOfPeriod, Ledger, LedgerReader, LedgerScope, RecordsOfPeriod, StoreResult};

/// The envelopes and audit records a reconciliation reads.
#[derive(Clone, Debug, Default)]
pub struct Exceptions {
    pub envelopes: Vec<DlqEnvelope>,
    pub audit: Vec<AuditRecord>,
}

/// The exceptions of `period` and those of no known period.
pub async fn exceptions_of_period<E, A>(envelopes: &E, audit: &A, period: &str) -> StoreResult<Exceptions>
where
    E: EnvelopesOfPeriod + ?Sized,
    A: RecordsOfPeriod + ?Sized,
{
    let (mut envelopes, envelopes_of_none, mut audit, audit_of_none) = futures::try_join!(
        envelopes.envelopes_of_period(Some(period)),
        envelopes.envelopes_of_period(None),
        audit.records_of_period(Some(period)),
        audit.records_of_period(None),
    )?;
    envelopes.extend(envelopes_of_none);
    audit.extend(audit_of_none);
    Ok(Exceptions { envelopes, audit })
}

/// What the read names but does not hold: every envelope a record of it names by `replay.of`
/// (an edit's copy in this period, its original in another), a dead letter's or an envelope
/// record's own envelope (a record from before records carried their period, read under none,
/// or an index that lags), the envelope that handed a duplicate's transaction to a manual
/// journal, and the fate of each copy an envelope of the read sent that the read does not
/// meet (an edit's copy dead-lettered again, suppressed as a duplicate, or posted — under the
/// transaction its replay record names — in another period). Fetched by key, and again for what
/// those name, until nothing is missing; what is nowhere stays missing, and the reconciliation
/// names it. A posting found so is added to `read` only if it is of another period than
/// `period` (one of `period` was read already: kept, or counted).
pub async fn complete_exceptions<E, A, L>(
    store: &E,
    audit: &A,
    ledger: &L,
    period: &str,
    read: &mut LedgerRead,
    exceptions: &mut Exceptions,
) -> StoreResult<()>
where
    E: EnvelopeStore + ?Sized,
    A: RecordsOfPeriod + ?Sized,
    L: Ledger + LedgerReader + ?Sized,
{
    let mut asked = Keys::default();
    // A lineage is as long as the replays of one message; the bound guards against a cycle.
    for _ in 0..64 {
        let mut wanted = Keys::wanted(&read.linked, exceptions, &asked);
        if wanted.is_empty() {
            return Ok(());
        }
        let handed: Vec<String> = ledger
            .lookup_many(&wanted.hand_offs.iter().cloned().collect::<Vec<_>>())
            .await?
            .into_values()
            .filter_map(|c| c.manual_journal)
            .collect();
        let held: BTreeSet<&str> = exceptions.envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
        wanted.envelopes.extend(
            handed
                .into_iter()
                .filter(|id| !asked.envelopes.contains(id) && !held.contains(id.as_str())),
        );
        exceptions
            .envelopes
            .extend(fetch(&wanted.envelopes, |id| store.get(id)).await?);
        exceptions
            .audit
            .extend(fetch(&wanted.records, |id| audit.record(id)).await?);
        let postings = ledger
            .postings_of(&wanted.postings.iter().cloned().collect::<Vec<_>>())
            .await?;
        read.linked.extend(postings.into_iter().filter(|p| p.period != period));
        asked.envelopes.extend(wanted.envelopes);
        asked.records.extend(wanted.records);
        asked.hand_offs.extend(wanted.hand_offs);
        asked.postings.extend(wanted.postings);
    }
    Ok(())
}

/// Keys by kind: what one round of [`complete_exceptions`] asks for, or what it has asked for
/// already.
#[derive(Default)]
struct Keys {
    envelopes: BTreeSet<String>,
    records: BTreeSet<String>,
    /// Transactions of duplicates the read holds no posting or hand-off of.
    hand_offs: BTreeSet<TxKey>,
    /// Transactions of edited copies without a fate in the read.
    postings: BTreeSet<TxKey>,
}

impl Keys {
    fn is_empty(&self) -> bool {
        self.envelopes.is_empty() && self.records.is_empty() && self.hand_offs.is_empty() && self.postings.is_empty()
    }

    fn wanted(postings: &[Posting], ex: &Exceptions, asked: &Keys) -> Keys {
        let held: BTreeSet<&str> = ex.envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
        let records: BTreeSet<&str> = ex.audit.iter().map(|r| r.audit_id.as_str()).collect();
        let fated = super::fated(postings, &ex.envelopes, &ex.audit);
        let unfated: Vec<&crate::domain::ReplayRecord> = ex
            .envelopes
            .iter()
            .flat_map(|e| e.replays.iter())
            .filter(|r| r.sqs_message_id.as_deref().is_some_and(|copy| !fated.contains(copy)))
            .collect();
        let copies = || unfated.iter().filter_map(|r| r.sqs_message_id.as_deref());
        let named = postings
            .iter()
            .filter_map(|p| p.replay_of.clone())
            .chain(ex.audit.iter().filter_map(|r| r.replay_of.clone()))
            .chain(ex.envelopes.iter().filter_map(|e| e.replay_of().map(str::to_owned)))
            .chain(ex.audit.iter().filter_map(own_envelope))
            .chain(copies().map(envelope_id));
        let committed: BTreeSet<&str> = postings
            .iter()
            .map(|p| p.source_hash.as_str())
            .chain(ex.envelopes.iter().map(|e| e.source_hash.as_str()))
            .collect();
        Keys {
            envelopes: named
                .filter(|id| !held.contains(id.as_str()) && !asked.envelopes.contains(id))
                .collect(),
            records: copies()
                .map(|copy| AuditRecord::id_for(AuditKind::DuplicateSuppressed, copy))
                .filter(|id| !records.contains(id.as_str()) && !asked.records.contains(id))
                .collect(),
            hand_offs: ex
                .audit
                .iter()
                .filter(|r| r.kind == AuditKind::DuplicateSuppressed)
                .filter_map(|r| Some(TxKey::new(r.source_hash.clone()?, r.period.clone())))
                .filter(|k| !committed.contains(k.source_hash.as_str()) && !asked.hand_offs.contains(k))
                .collect(),
            postings: unfated
                .iter()
                .filter_map(|r| Some(TxKey::new(r.copy_source_hash.clone()?, r.copy_period.clone())))
                .filter(|k| !committed.contains(k.source_hash.as_str()) && !asked.postings.contains(k))
                .collect(),
        }
    }
}

/// The envelope a dead letter's record or an envelope's own record is about.
fn own_envelope(r: &AuditRecord) -> Option<String> {
    match r.kind {
        AuditKind::DeadLettered => Some(envelope_id(&r.sqs_message_id)),
        _ => r.envelope_named().filter(|id| !id.is_empty()).map(str::to_owned),
    }
}

/// One request of a reconciliation's fan-out: one segment of one period's ledger read, with the
/// links the caller read (`{"operation": "reconcile-segment", "period": "YYYY-MM", "segment":
/// "INDEX/COUNT", "links": {…}}` to the control plane).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentRead {
    pub period: String,
    /// `INDEX/COUNT`.
    pub segment: String,
    /// The caller's: every segment keeps exactly the postings the caller's own read would keep
    /// (an invocation reading the exceptions again, through indexes that may lag, could count a
    /// posting the caller then looks up by key: counted twice).
    pub links: Links,
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

/// One segment of a period's fan-out: the segment's ledger read with the caller's links (its
/// postings of a lineage kept whole, the rest counted), which the caller merges with the other
/// segments' exactly.
pub async fn read_period_segment<R: LedgerReader + ?Sized>(
    reader: &R,
    req: &SegmentRead,
) -> Result<LedgerRead, String> {
    let (period, segment) = req.parts()?;
    let scope = LedgerScope::period(period).segment(segment);
    read_ledger(reader, &scope, 1, &req.links)
        .await
        .map_err(|e| e.to_string())
}

/// What a read of the stores concludes: each message's outcome (only those of `period` when one
/// was read), the problems met, and the reconciliation against `manifest` with `queued` still in
/// the queues (read after the stores: a message settled in between is counted in neither, which
/// errs towards not holding, never towards HOLDS).
pub fn conclude(
    read: LedgerRead,
    exceptions: &Exceptions,
    period: Option<&str>,
    manifest: Option<&[super::Entry]>,
    queued: crate::ports::Queued,
) -> Concluded {
    let (outcomes, problems) = super::outcomes(
        &read.linked,
        &exceptions.envelopes,
        &exceptions.audit,
        // A letter parked behind the DLQ has no envelope yet, as one still in it.
        queued.dead_letters == 0 && queued.parked == 0,
    );
    // The period's transactions: the read held only its postings, the outcomes are cut here.
    let outcomes = match period {
        Some(p) => super::of_period(outcomes, p, manifest),
        None => outcomes,
    };
    let reconciliation = super::reconcile_counted(read.counted, &outcomes, problems.clone(), manifest, queued.total());
    (outcomes, problems, reconciliation)
}

/// A period's reconciliation from the stores: its exceptions, its postings read in `segments`
/// at once, what those name from other periods, then the queues. `Err(why)` inside: nothing
/// is concluded (items from before the period indexes not yet indexed, or queues not seen).
pub async fn reconcile_period<E, A, L, Q>(
    store: &E,
    audit: &A,
    ledger: &L,
    queues: &Q,
    period: &str,
    segments: u32,
) -> StoreResult<Result<super::Reconciliation, String>>
where
    E: EnvelopeStore + EnvelopesOfPeriod + ?Sized,
    A: RecordsOfPeriod + ?Sized,
    L: Ledger + LedgerReader + ?Sized,
    Q: crate::ports::ReplayQueue + ?Sized,
{
    let concluded = gather_period(store, audit, ledger, queues, (period, segments), false, None).await?;
    Ok(concluded.map(|(_, _, reconciliation)| reconciliation))
}

/// What [`conclude`] concludes of one period from the stores (against `manifest`, when given),
/// as [`reconcile_period`] reads them, its ledger in `segments` at once; with `every`, each
/// committed posting of the period is an outcome (what a bundle lists and a manifest matches),
/// not only those of a lineage (the rest counted). `dlqctl reconcile --period` and `evidence
/// export`, and the console's export, gather a period here.
pub async fn gather_period<E, A, L, Q>(
    store: &E,
    audit: &A,
    ledger: &L,
    queues: &Q,
    (period, segments): (&str, u32),
    every: bool,
    manifest: Option<&[super::Entry]>,
) -> StoreResult<Result<Concluded, String>>
where
    E: EnvelopeStore + EnvelopesOfPeriod + ?Sized,
    A: RecordsOfPeriod + ?Sized,
    L: Ledger + LedgerReader + ?Sized,
    Q: crate::ports::ReplayQueue + ?Sized,
{
    if !store.periods_indexed().await? {
        return Ok(Err(UNINDEXED.to_owned()));
    }
    let mut exceptions = exceptions_of_period(store, audit, period).await?;
    let mut links = Links::of(&exceptions.envelopes, &exceptions.audit);
    if every {
        links = links.keeping_everything();
    }
    let scope = LedgerScope::period(period);
    let mut read = read_ledger(ledger, &scope, segments, &links).await?;
    complete_exceptions(store, audit, ledger, period, &mut read, &mut exceptions).await?;
    let Some(queued) = queues.queued().await? else {
        return Ok(Err(
            "the queues cannot be seen from here: what they hold would decide it".to_owned(),
        ));
    };
    Ok(Ok(conclude(read, &exceptions, Some(period), manifest, queued)))
}

/// What [`conclude`] returns: each message's outcome, the problems met, the reconciliation.
pub type Concluded = (Vec<(super::State, super::Entry)>, Vec<String>, super::Reconciliation);

/// Why a period is not read where the items written before the period indexes may lack their
/// entries there.
pub const UNINDEXED: &str = "a period is read through the period indexes, and this deployment does not say that what was written before them has its entries there (a deployment from before them, or one its template created): run `dlqctl index-periods` once, then this again";
