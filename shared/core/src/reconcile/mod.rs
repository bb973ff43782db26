//! Completeness reconciliation: every transaction that entered the pipeline is committed,
//! suppressed as a duplicate, pending remediation, quarantined, or in flight — by count and by
//! amount per currency, overall and per entity and period. With a producer manifest (what was
//! sent) every missing or extra record is named; without one, the stores are cross-checked against
//! each other and the audit trail (a dead letter without its envelope, a duplicate whose posting
//! is gone, a replayed posting without its envelope...).
//!
//! Records are matched by the producer's `message_id` (`msg:<id>`), or by the SHA-256 of the body
//! for payloads without one (`raw:<hex>`); a key may legitimately occur several times (the same
//! message sent twice), so matching is by multiset.
//!
//! Each message the producer sent counts once, however many records it left: a replay's
//! re-injected copies are linked to their original (the envelope's replay records, and the
//! `replay.of` a copy's posting, duplicate record or later envelope carries), and the message's
//! state is that of its whole lineage — committed if any copy posted (a write that landed before a
//! dead letter, two copies of one re-injection), in flight while a replay holds it or a copy is on
//! its way, else pending, duplicate or quarantined. With the queues empty, anything in flight is a
//! problem: reconcile does not hold until it settles.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use crate::domain::hash::sha256_hex;
use crate::domain::money::parse_amount;
use crate::domain::{AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, Posting, Tally, labels};

mod checks;
pub mod edits;
pub mod period;
pub mod read;
pub use period::{
    Exceptions, SegmentRead, complete_exceptions, conclude, exceptions_of_period, read_period_segment, reconcile_period,
};
pub use read::{LedgerRead, Links, look_up_unmet, read_ledger};

/// Where a transaction ended up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    Committed,
    Duplicate,
    Pending,
    Quarantined,
    InFlight,
}

/// One record of the population: a sent message (manifest) or a terminal state (stores).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub currency: Option<String>,
    pub amount: Option<Decimal>,
    pub entity: Option<String>,
    pub period: Option<String>,
    /// The store record it comes from (posting hash, envelope id, audit id).
    #[serde(default)]
    pub reference: String,
    /// A transaction posted by an approved edit: what the producer sent (its original's labels),
    /// which the manifest holds ([`edits`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_from: Option<edits::AsSent>,
}

fn key_of(message_id: Option<&str>, body_sha256: &str) -> String {
    match message_id {
        Some(id) if !id.is_empty() => format!("msg:{id}"),
        _ => format!("raw:{body_sha256}"),
    }
}

/// A manifest line (a message body as sent) as an entry.
pub fn manifest_entry(body: &str) -> Entry {
    let l = labels(body);
    Entry {
        key: key_of(l.message_id.as_deref(), &sha256_hex(body.as_bytes())),
        currency: l.currency.clone(),
        amount: l.amount.as_deref().and_then(|a| parse_amount(a).ok()),
        entity: l.ledger_entity.clone(),
        period: l.period(),
        reference: String::new(),
        edited_from: None,
    }
}

/// What the stores hold about one message the producer sent: the postings, duplicate records and
/// envelopes of the message and of every copy a replay re-injected from it.
#[derive(Default)]
struct Fate<'a> {
    postings: Vec<&'a Posting>,
    duplicates: Vec<&'a AuditRecord>,
    envelopes: Vec<&'a DlqEnvelope>,
}

/// Every SQS message with a fate of its own (a posting, a duplicate record, an envelope): a
/// re-injected copy without one is still on its way.
fn fated<'a>(postings: &'a [Posting], envelopes: &'a [DlqEnvelope], audit: &'a [AuditRecord]) -> BTreeSet<&'a str> {
    postings
        .iter()
        .map(|p| p.sqs_message_id.as_str())
        .chain(
            audit
                .iter()
                .filter(|r| r.kind == AuditKind::DuplicateSuppressed)
                .map(|r| r.sqs_message_id.as_str()),
        )
        .chain(envelopes.iter().map(|e| e.original.source_message_id.as_str()))
        .collect()
}

/// SQS message ids linked to the message they were re-injected from: each copy's id (from the
/// envelope's replay records, or from the `replay.of` a posting, a duplicate record or a later
/// envelope carries) to the id of the message whose dead letter was replayed.
struct Lineage<'a> {
    parent: BTreeMap<&'a str, &'a str>,
}

impl<'a> Lineage<'a> {
    fn new(postings: &'a [Posting], envelopes: &'a [DlqEnvelope], audit: &'a [AuditRecord]) -> Self {
        let source: BTreeMap<&str, &str> = envelopes
            .iter()
            .map(|e| (e.envelope_id.as_str(), e.original.source_message_id.as_str()))
            .collect();
        let mut parent = BTreeMap::new();
        for e in envelopes {
            for copy in e.replays.iter().filter_map(|r| r.sqs_message_id.as_deref()) {
                parent.insert(copy, e.original.source_message_id.as_str());
            }
        }
        let mut link = |sqs_id: &'a str, replay_of: Option<&'a str>| {
            if let Some(origin) = replay_of.and_then(|id| source.get(id)) {
                parent.entry(sqs_id).or_insert(*origin);
            }
        };
        for p in postings {
            link(&p.sqs_message_id, p.replay_of.as_deref());
        }
        for r in audit.iter().filter(|r| r.kind == AuditKind::DuplicateSuppressed) {
            link(&r.sqs_message_id, r.replay_of.as_deref());
        }
        for e in envelopes {
            link(&e.original.source_message_id, e.replay_of());
        }
        Lineage { parent }
    }

    /// The message the producer sent that `sqs_id` is, or descends from.
    fn root(&self, sqs_id: &'a str) -> &'a str {
        let mut id = sqs_id;
        // A lineage is as long as the replays of one message (bounded by the replay cap); the
        // bound only guards against a cycle in corrupted records.
        for _ in 0..64 {
            match self.parent.get(id) {
                Some(up) if *up != id => id = up,
                _ => break,
            }
        }
        id
    }
}

impl Fate<'_> {
    /// Where the message ended: committed if any copy posted; in flight while a replay holds it
    /// or a re-injected copy is still on its way; otherwise pending, a duplicate, or quarantined.
    fn state(&self, fated: &BTreeSet<&str>) -> State {
        if !self.postings.is_empty() {
            return State::Committed;
        }
        // A re-injected (or edited) copy with no fate of its own yet.
        let copy_on_its_way = |e: &&DlqEnvelope| {
            let mut copies = e.replays.iter().filter_map(|r| r.sqs_message_id.as_deref()).peekable();
            let sent = match e.status {
                EnvelopeStatus::Replayed => true,
                EnvelopeStatus::Superseded => copies.peek().is_some(),
                _ => false,
            };
            sent && !copies.any(|copy| fated.contains(copy))
        };
        if self
            .envelopes
            .iter()
            .any(|e| e.status == EnvelopeStatus::Replaying || copy_on_its_way(e))
        {
            return State::InFlight;
        }
        let any = |s: EnvelopeStatus| self.envelopes.iter().any(|e| e.status == s);
        if any(EnvelopeStatus::Pending) {
            State::Pending
        } else if !self.duplicates.is_empty() || any(EnvelopeStatus::SuppressedDuplicate) {
            State::Duplicate
        } else if any(EnvelopeStatus::Quarantined) {
            // (Also an edited copy dead-lettered again and quarantined: its original was
            // superseded, the copy is where the transaction waits.)
            State::Quarantined
        } else if any(EnvelopeStatus::Superseded) {
            // An edit whose transaction another message of the producer's posted: nothing sent.
            State::Duplicate
        } else {
            State::Quarantined
        }
    }

    /// The message's labels, from its best record: a posting, else an envelope, else a record.
    /// `root` is the SQS message the producer sent (the lineage's first).
    fn entry(&self, root: &str) -> Entry {
        let reference = self
            .postings
            .iter()
            .map(|p| format!("posting {}", p.source_hash))
            .chain(self.envelopes.iter().map(|e| format!("envelope {}", e.envelope_id)))
            .chain(self.duplicates.iter().map(|r| r.audit_id.clone()))
            .collect::<Vec<_>>()
            .join(", ");
        if let Some(p) = self.postings.first() {
            return Entry {
                key: key_of(Some(&p.message_id), ""),
                currency: Some(p.currency.clone()),
                amount: Some(p.amount),
                entity: Some(p.ledger_entity.clone()),
                period: Some(p.period.clone()),
                reference,
                edited_from: edits::as_sent(&self.envelopes, root),
            };
        }
        // The first dead letter of the lineage: the message as the producer sent it (a copy an
        // edit moved to another period, or changed, is not), whichever order the envelopes were
        // read in — the envelope of the root message itself, else the earliest (a wall clock
        // that jumped back may date a copy's dead letter before its original's).
        if let Some(e) = self
            .envelopes
            .iter()
            .find(|e| e.original.source_message_id == root)
            .or_else(|| {
                self.envelopes
                    .iter()
                    .min_by(|a, b| (a.dead_lettered_at, &a.envelope_id).cmp(&(b.dead_lettered_at, &b.envelope_id)))
            })
        {
            return Entry {
                key: key_of(e.message_id.as_deref(), &e.original.body_sha256),
                currency: e.currency.clone(),
                amount: e.amount.as_deref().and_then(|a| parse_amount(a).ok()),
                entity: e.ledger_entity.clone(),
                period: e.accounting_period.clone(),
                reference,
                edited_from: None,
            };
        }
        let r = self.duplicates.first();
        Entry {
            key: key_of(r.and_then(|r| r.message_id.as_deref()), ""),
            currency: r.and_then(|r| r.currency.clone()),
            amount: r.and_then(|r| r.amount.as_deref()).and_then(|a| parse_amount(a).ok()),
            entity: r.and_then(|r| r.ledger_entity.clone()),
            period: r.and_then(|r| r.period.clone()),
            reference,
            edited_from: None,
        }
    }
}

/// Where every message ended, one outcome per message the producer sent — its copies (a replay's
/// re-injections, a copy dead-lettered again, a duplicate copy) follow it, so nothing is counted
/// twice — and the cross-store problems found on the way.
pub fn outcomes(
    postings: &[Posting],
    envelopes: &[DlqEnvelope],
    audit: &[AuditRecord],
    dlq_empty: bool,
) -> (Vec<(State, Entry)>, Vec<String>) {
    let mut problems = Vec::new();
    let committed = checks::committed(postings, envelopes);
    checks::envelopes_against_ledger(postings, envelopes, &committed, &mut problems);
    let envelope_ids: BTreeSet<&str> = envelopes.iter().map(|e| e.envelope_id.as_str()).collect();
    let dead_lettered: BTreeSet<&str> = envelopes
        .iter()
        .map(|e| e.original.source_message_id.as_str())
        .collect();

    let lineage = Lineage::new(postings, envelopes, audit);
    let root = |id| lineage.root(id);
    let mut fates: BTreeMap<&str, Fate<'_>> = BTreeMap::new();
    for p in postings {
        fates.entry(root(&p.sqs_message_id)).or_default().postings.push(p);
        if let Some(e) = &p.replay_of
            && !envelope_ids.contains(e.as_str())
        {
            problems.push(format!(
                "posting {} was replayed from envelope {e}, which is missing",
                p.source_hash
            ));
        }
    }
    for r in audit {
        match r.kind {
            AuditKind::DuplicateSuppressed => {
                fates.entry(root(&r.sqs_message_id)).or_default().duplicates.push(r);
                if let Some(h) = &r.source_hash
                    && !committed.contains(h.as_str())
                {
                    problems.push(format!(
                        "{} suppressed a duplicate of {h}, whose posting (or manual journal) is missing",
                        r.audit_id
                    ));
                }
            }
            AuditKind::DeadLettered if dlq_empty && !dead_lettered.contains(r.sqs_message_id.as_str()) => {
                problems.push(format!(
                    "{}: dead-lettered, but no envelope holds SQS message {}",
                    r.audit_id, r.sqs_message_id
                ));
            }
            AuditKind::Enriched | AuditKind::Quarantined => {
                let id = r.envelope_named().unwrap_or("");
                if !envelope_ids.contains(id) {
                    problems.push(format!("{}: envelope {id} is missing", r.audit_id));
                }
            }
            _ => {}
        }
    }
    for e in envelopes {
        let fate = fates.entry(root(&e.original.source_message_id)).or_default();
        fate.envelopes.push(e);
    }
    let fated = fated(postings, envelopes, audit);
    let mut out = Vec::with_capacity(fates.len());
    for (root, f) in &fates {
        // One message, one transaction: copies carry the same one, and an edit's original is
        // handed off before its edited copy is sent.
        let hashes: BTreeSet<&str> = f.postings.iter().map(|p| p.source_hash.as_str()).collect();
        if hashes.len() > 1 {
            problems.push(format!(
                "SQS message {root} is posted as {} transactions: {}",
                hashes.len(),
                hashes.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        out.push((f.state(&fated), f.entry(root)));
    }
    (out, problems)
}

/// The outcomes of the transactions of `period`: those of that period, and those of no known
/// period (a duplicate's record carries no value date of its own) whose message has a record of
/// that period or is named by the (period's) manifest. A message id reused in another period
/// does not bring that period's transactions along. Against a manifest (what was sent in the
/// period) a transaction an approved edit moved to another period is the period's it was sent
/// in; without one, the period it is posted in.
pub fn of_period(outcomes: Vec<(State, Entry)>, period: &str, manifest: Option<&[Entry]>) -> Vec<(State, Entry)> {
    let its_period = |e: &Entry| match (&e.edited_from, manifest) {
        (Some(from), Some(_)) => from.period.clone().or_else(|| e.period.clone()),
        _ => e.period.clone(),
    };
    let in_period: BTreeSet<String> = outcomes
        .iter()
        .filter(|(_, e)| its_period(e).as_deref() == Some(period))
        .map(|(_, e)| e.key.clone())
        .chain(manifest.unwrap_or_default().iter().map(|e| e.key.clone()))
        .collect();
    outcomes
        .into_iter()
        .filter(|(_, e)| match its_period(e).as_deref() {
            Some(p) => p == period,
            None => in_period.contains(&e.key),
        })
        .collect()
}

/// What a reconciliation concludes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Every message sent is in exactly one state, by count and by amount, and nothing is
    /// queued.
    Holds,
    /// Something is wrong now, whatever the queues still hold: a problem, a record never sent,
    /// an amount other than was sent, or (with nothing queued) a message missing.
    #[default]
    DoesNotHold,
    /// Nothing is wrong yet, but messages are still queued: what they become decides.
    Undecided,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// What was sent (from the manifest), when one was given.
    pub sent: Option<Tally>,
    pub by_state: BTreeMap<State, Tally>,
    /// `entity period` -> state -> count
    pub by_entity_period: BTreeMap<String, BTreeMap<State, u64>>,
    /// Messages still in the queues (in flight, not yet attributable).
    pub queued: u64,
    /// Manifest keys with fewer outcomes than sends, and outcomes without a send.
    pub missing: Vec<String>,
    pub extra: Vec<String>,
    /// Transactions posted by an approved edit: as sent -> as posted. With a manifest, each is
    /// reconciled by what the producer sent (counted once, its amount as sent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edited: Vec<String>,
    /// Manifest keys whose records carry other amounts than were sent (per key, as a
    /// multiset; an edited transaction by what was sent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub altered: Vec<String>,
    pub problems: Vec<String>,
    #[serde(default)]
    pub verdict: Verdict,
    /// `verdict == Holds`.
    pub holds: bool,
}

/// Count and amount per state, and count per entity and period: what a reconciliation sums,
/// for transactions counted without being kept (see [`read::read_ledger`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub by_state: BTreeMap<State, Tally>,
    pub by_entity_period: BTreeMap<String, BTreeMap<State, u64>>,
}

impl Counts {
    pub fn add(
        &mut self,
        state: State,
        currency: Option<&str>,
        amount: Option<Decimal>,
        entity: Option<&str>,
        period: Option<&str>,
    ) {
        self.by_state.entry(state).or_default().add_parts(currency, amount);
        let ep = format!("{} {}", entity.unwrap_or("-"), period.unwrap_or("-"));
        *self.by_entity_period.entry(ep).or_default().entry(state).or_default() += 1;
    }

    /// Exactly (a total too large to keep exactly is named, never rounded).
    pub fn merge(&mut self, other: &Counts) {
        for (state, t) in &other.by_state {
            self.by_state.entry(*state).or_default().merge(t);
        }
        for (ep, counts) in &other.by_entity_period {
            let mine = self.by_entity_period.entry(ep.clone()).or_default();
            for (state, n) in counts {
                *mine.entry(*state).or_default() += n;
            }
        }
    }
}

/// Reconcile outcomes (and queued messages) with a manifest, if any.
pub fn reconcile(
    outcomes: Vec<(State, Entry)>,
    problems: Vec<String>,
    manifest: Option<&[Entry]>,
    queued: u64,
) -> Reconciliation {
    reconcile_counted(Counts::default(), &outcomes, problems, manifest, queued)
}

/// [`reconcile`], with `counted` transactions beside the outcomes: committed postings of no
/// lineage, summed as the ledger was read. A manifest must then be matched elsewhere: only the
/// outcomes carry keys.
pub fn reconcile_counted(
    counted: Counts,
    outcomes: &[(State, Entry)],
    problems: Vec<String>,
    manifest: Option<&[Entry]>,
    queued: u64,
) -> Reconciliation {
    let mut counts = counted;
    for (state, e) in outcomes {
        counts.add(
            *state,
            e.currency.as_deref(),
            e.amount,
            e.entity.as_deref(),
            e.period.as_deref(),
        );
    }
    let mut r = Reconciliation {
        queued,
        problems,
        by_state: counts.by_state,
        by_entity_period: counts.by_entity_period,
        ..Reconciliation::default()
    };
    let mut total = Tally::default();
    for t in r.by_state.values() {
        total.merge(t);
    }
    if queued == 0 {
        // Nothing in the queues, yet not settled: a claim held, or a re-injected copy lost.
        for (_, e) in outcomes.iter().filter(|(s, _)| *s == State::InFlight) {
            r.problems.push(format!(
                "{} is in flight but no queue holds anything ({}): a replay holds its claim, or its re-injected copy was lost",
                e.key, e.reference
            ));
        }
    }
    r.edited = edits::listed(outcomes);
    let sent = manifest.map(|m| {
        let mut t = Tally::default();
        for e in m {
            t.add_parts(e.currency.as_deref(), e.amount);
        }
        t
    });
    for c in total
        .overflowed
        .iter()
        .chain(sent.iter().flat_map(|t| t.overflowed.iter()))
    {
        r.problems.push(format!(
            "the amounts in {c} are too large to total exactly: not reconciled by amount"
        ));
    }
    r.sent = sent;
    let mut amounts_hold = true;
    if let Some(manifest) = manifest {
        let want = multiset(manifest.iter().map(|e| e.key.as_str()));
        let have = multiset(outcomes.iter().map(|(_, e)| e.key.as_str()));
        for (k, n) in &want {
            let missing = n.saturating_sub(have.get(k).copied().unwrap_or(0));
            r.missing.extend(std::iter::repeat_n((*k).to_owned(), missing));
        }
        for (k, n) in &have {
            let extra = n.saturating_sub(want.get(k).copied().unwrap_or(0));
            if extra > 0 {
                let refs: Vec<&str> = outcomes
                    .iter()
                    .filter(|(_, e)| e.key == *k)
                    .map(|(_, e)| e.reference.as_str())
                    .collect();
                r.extra
                    .extend(std::iter::repeat_n(format!("{k} ({})", refs.join(", ")), extra));
            }
        }
        r.altered = checks::altered(manifest, outcomes);
        // What was sent, with each edited transaction as it was posted: what the states must total.
        let expected = edits::sent_as_posted(manifest, outcomes);
        amounts_hold = total.amounts == expected.amounts && total.without_amount == expected.without_amount;
    }
    // Without a manifest nothing is missing, extra or altered, and no amount is compared.
    let wrong = !r.problems.is_empty() || !r.extra.is_empty() || !r.altered.is_empty();
    // Queued messages cannot be named; they may account for missing ones, never for more.
    r.verdict = if wrong || r.missing.len() as u64 > queued {
        Verdict::DoesNotHold
    } else if queued > 0 {
        Verdict::Undecided
    } else if r.missing.is_empty() && amounts_hold {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    };
    r.holds = r.verdict == Verdict::Holds;
    r
}

/// How many times each key occurs.
fn multiset<'a>(keys: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut counts = BTreeMap::new();
    for k in keys {
        *counts.entry(k).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests;
