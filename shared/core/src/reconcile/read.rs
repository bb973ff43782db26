//! Reading the ledger for a reconciliation in bounded memory. Most postings take part in no
//! lineage (no dead letter, no replay, no duplicate names them): each of them is one message,
//! committed, and only its count and amount matter. Those are summed page by page and dropped;
//! only the postings that take part in a lineage are kept for [`super::outcomes`]. The read
//! runs over segments of the scope at once, and the segments' sums merge exactly, so the same
//! read can be split over several readers (tasks here, or invocations of a fan-out).

use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeMap, BTreeSet};

use super::{Counts, State};
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, Posting, Segment, TxKey};
use crate::ports::{LedgerReader, LedgerScope, StoreResult, each_page};

/// What makes a posting part of a lineage: the SQS message ids and transactions the envelopes
/// and the duplicate records name.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Links {
    ids: BTreeSet<String>,
    /// Producer message ids: a period keeps every record of a message by its key.
    message_ids: BTreeSet<String>,
    /// Transactions a record names, with their period when the record says it (a duplicate
    /// record from before records carried their period does not): a read of one period that
    /// does not meet one of that period, or of an unknown one, looks it up by key.
    named: BTreeMap<String, Option<String>>,
    /// The period of an edited copy's transaction, named above without one (a read of any
    /// period looks it up): where a ledger keyed by period finds it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    copy_periods: BTreeMap<String, String>,
    /// Keep every posting (a manifest is matched by each message's key).
    everything: bool,
}

impl Links {
    pub fn of(envelopes: &[DlqEnvelope], audit: &[AuditRecord]) -> Links {
        let mut links = Links::default();
        for e in envelopes {
            links.ids.insert(e.original.source_message_id.clone());
            links
                .ids
                .extend(e.replays.iter().filter_map(|r| r.sqs_message_id.clone()));
            links.message_ids.extend(e.message_id.clone());
            // Its period where its body decoded to the hash; a hash it merely claims may be of
            // another period than its labels say (an altered value date): none then.
            links
                .named
                .entry(e.source_hash.clone())
                .or_insert_with(|| e.decoded_key().period);
            // An edited copy's transaction, in whichever period the edit put it (recorded since
            // replays record the copy's period).
            for r in &e.replays {
                if let Some(h) = &r.copy_source_hash {
                    links.named.insert(h.clone(), None);
                    if let Some(period) = &r.copy_period {
                        links.copy_periods.insert(h.clone(), period.clone());
                    }
                }
            }
        }
        for r in audit.iter().filter(|r| r.kind == AuditKind::DuplicateSuppressed) {
            links.ids.insert(r.sqs_message_id.clone());
            links.message_ids.extend(r.message_id.clone());
            if let Some(h) = &r.source_hash {
                // A record of no period makes its transaction's period unknown.
                let period = links.named.entry(h.clone()).or_insert_with(|| r.period.clone());
                if r.period.is_none() {
                    *period = None;
                }
            }
        }
        links
    }

    /// These links, keeping every posting besides: for a manifest, which matches each message by
    /// its key, and for a bundle, which lists each.
    pub fn keeping_everything(self) -> Links {
        Links {
            everything: true,
            ..self
        }
    }

    /// Whether `p` takes part in a lineage (or a cross-check) and must be kept.
    fn takes_part(&self, p: &Posting) -> bool {
        self.everything
            || p.replay_of.is_some()
            || self.ids.contains(&p.sqs_message_id)
            || self.named.contains_key(&p.source_hash)
            || self.message_ids.contains(&p.message_id)
    }
}

/// What a read of the ledger gives a reconciliation (and what one invocation of a fan-out
/// returns for its segment).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LedgerRead {
    /// The postings that take part in a lineage, kept whole.
    pub linked: Vec<Posting>,
    /// The others: committed, one message each, counted.
    pub counted: Counts,
    /// Postings read, and pages.
    pub postings: u64,
    pub pages: u64,
}

impl LedgerRead {
    fn add(&mut self, p: Posting, links: &Links) {
        self.postings += 1;
        if links.takes_part(&p) {
            self.linked.push(p);
        } else {
            self.counted.add(
                State::Committed,
                Some(p.currency.as_str()),
                Some(p.amount),
                Some(p.ledger_entity.as_str()),
                Some(p.period.as_str()),
            );
        }
    }

    /// Exactly: two reads of disjoint segments make the read of both (before [`look_up_unmet`]).
    pub fn merge(&mut self, other: LedgerRead) {
        self.linked.extend(other.linked);
        self.counted.merge(&other.counted);
        self.postings += other.postings;
        self.pages += other.pages;
    }
}

/// Read `scope` (split into `segments` read at once, when it is not one segment already),
/// keeping the postings `links` names and counting the rest; then, unless `scope` is one segment
/// (whose reads a fan-out merges first), [`look_up_unmet`].
pub async fn read_ledger<R: LedgerReader + ?Sized>(
    reader: &R,
    scope: &LedgerScope,
    segments: u32,
    links: &Links,
) -> StoreResult<LedgerRead> {
    let parts: Vec<LedgerScope> = match scope.segment {
        None if segments > 1 => Segment::all_of(segments.min(Segment::MAX))
            .into_iter()
            .map(|s| scope.segment(s))
            .collect(),
        _ => vec![scope.clone()],
    };
    let reads = futures::future::try_join_all(parts.iter().map(|part| async move {
        let mut read = LedgerRead::default();
        each_page(reader, part, |page| {
            read.pages += 1;
            for p in page {
                read.add(p, links);
            }
        })
        .await?;
        StoreResult::Ok(read)
    }))
    .await?;
    let mut read = LedgerRead::default();
    for r in reads {
        read.merge(r);
    }
    if scope.segment.is_none() {
        look_up_unmet(reader, scope, links, &mut read).await?;
    }
    Ok(read)
}

/// After the read of a whole scope (its segments merged) that is not the whole ledger: each
/// transaction a record names that the read did not meet is looked up by key (a strongly
/// consistent read) and kept when found — unless the record puts it in another period. A
/// duplicate record from before records carried their period names none, and its transaction may
/// be posted in any (the duplicate is a problem only if the ledger holds it nowhere); and a
/// period's index may not yet show a copy a replay posted a moment ago.
pub async fn look_up_unmet<R: LedgerReader + ?Sized>(
    reader: &R,
    scope: &LedgerScope,
    links: &Links,
    read: &mut LedgerRead,
) -> StoreResult<()> {
    if scope.period.is_none() && scope.entity.is_none() {
        return Ok(());
    }
    let met: BTreeSet<&str> = read.linked.iter().map(|p| p.source_hash.as_str()).collect();
    let unmet = links
        .named
        .iter()
        .filter(|(h, period)| {
            !met.contains(h.as_str()) && (period.is_none() || scope.period.is_none() || *period == &scope.period)
        })
        .map(|(h, period)| TxKey::new(h, period.clone().or_else(|| links.copy_periods.get(h).cloned())))
        .collect::<Vec<_>>();
    let found = reader.postings_of(&unmet).await?;
    read.linked.extend(found);
    Ok(())
}

/// How many keys are looked up at once.
const LOOKUPS_AT_ONCE: usize = 16;

/// Each key's answer, [`LOOKUPS_AT_ONCE`] at a time; those found.
pub(super) async fn fetch<'k, T, F, Fut>(keys: impl IntoIterator<Item = &'k String>, get: F) -> StoreResult<Vec<T>>
where
    F: Fn(&'k str) -> Fut,
    Fut: std::future::Future<Output = StoreResult<Option<T>>>,
{
    futures::stream::iter(keys)
        .map(|k| get(k))
        .buffer_unordered(LOOKUPS_AT_ONCE)
        .try_filter_map(|found| async move { Ok(found) })
        .try_collect()
        .await
}
