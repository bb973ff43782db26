//! What a reconciliation of one period reads besides the ledger: that period's exceptions — its
//! envelopes and the audit records a reconciliation reads — through the stores' period indexes,
//! with those of no known period (a body without a readable value date; records from before
//! records carried their period), instead of every envelope and the whole trail. A lineage may
//! cross periods (an approved edit may change the value date: the edited copy posts in another
//! period than its original's envelope), so every envelope a record of the read names by
//! `replay.of` and the read did not meet is then fetched by id.

use futures::{StreamExt, TryStreamExt};
use std::collections::BTreeSet;

use crate::domain::{AuditRecord, DlqEnvelope, Posting};
use crate::ports::{EnvelopeStore, EnvelopesOfPeriod, RecordsOfPeriod, StoreResult};

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

/// Fetch by id every envelope that `postings` (kept by the ledger read), the records and the
/// envelopes name by `replay.of` and that `exceptions` does not hold, and again for what those
/// name, until none is missing. One that is nowhere stays missing: the reconciliation names it.
pub async fn fetch_named_envelopes<E: EnvelopeStore + ?Sized>(
    store: &E,
    postings: &[Posting],
    exceptions: &mut Exceptions,
) -> StoreResult<()> {
    let mut asked: BTreeSet<String> = BTreeSet::new();
    // A lineage is as long as the replays of one message; the bound guards against a cycle.
    for _ in 0..64 {
        let held: BTreeSet<&str> = exceptions.envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
        let named: BTreeSet<String> = postings
            .iter()
            .filter_map(|p| p.replay_of.as_deref())
            .chain(exceptions.audit.iter().filter_map(|r| r.replay_of.as_deref()))
            .chain(exceptions.envelopes.iter().filter_map(DlqEnvelope::replay_of))
            .filter(|id| !held.contains(id) && !asked.contains(*id))
            .map(str::to_owned)
            .collect();
        if named.is_empty() {
            return Ok(());
        }
        let found: Vec<DlqEnvelope> = futures::stream::iter(named.iter())
            .map(|id| store.get(id))
            .buffer_unordered(FETCHES_AT_ONCE)
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await?;
        asked.extend(named);
        exceptions.envelopes.extend(found);
    }
    Ok(())
}
