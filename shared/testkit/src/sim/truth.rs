//! The oracle's own ground truth: what each message the producer sent really was (its kind, by
//! construction) and which transaction it meant (the generator's number for it), against what
//! the stores hold. Nothing here asks the production code for a verdict: a posting is matched to
//! its transaction by the message that made it, and judged field by field, never by the
//! `source_hash` the ledger is keyed on (a store keyed by hash cannot hold two postings under one
//! hash, so "one posting per hash" could never fail).
//!
//! The violations come in two sorts: those that mean the books are wrong (a transaction lost,
//! booked twice, or booked with other amounts than were sent) and the others. Production
//! reconcile must never say HOLDS while one of the first sort stands: that is a false HOLDS.

use recon_core::domain::{AuditRecord, CommittedRef, DlqEnvelope, EnvelopeStatus, Posting, labels};
use rust_decimal::Decimal;
use std::collections::{BTreeMap, BTreeSet};

use super::workload::{Produced, Transaction};

/// What the ground truth found.
#[derive(Debug, Default)]
pub struct Findings {
    /// The books are wrong: a transaction lost, booked twice, or with other amounts; with the
    /// accounting period of the transaction as sent, when one is known.
    pub books_wrong: Vec<(Option<String>, String)>,
    /// Something else broke.
    pub other: Vec<String>,
}

impl Findings {
    pub fn all(self) -> Vec<String> {
        self.books_wrong.into_iter().map(|(_, w)| w).chain(self.other).collect()
    }

    /// What is wrong with the books, in `period` (`None`: anywhere).
    pub fn books_wrong_in(&self, period: Option<&str>) -> Vec<&str> {
        self.books_wrong
            .iter()
            .filter(|(p, _)| period.is_none() || p.is_none() || p.as_deref() == period)
            .map(|(_, w)| w.as_str())
            .collect()
    }
}

/// Which transaction each message id carries, by construction.
fn transaction_of_message(sent: &[Produced]) -> BTreeMap<String, usize> {
    sent.iter()
        .filter_map(|p| Some((labels(&p.body).message_id?, p.txn?)))
        .collect()
}

/// The posting's transaction fields against the transaction's as sent.
fn differs(p: &Posting, t: &Transaction) -> Option<String> {
    let mine = (
        p.ledger_entity.to_uppercase(),
        p.currency.to_uppercase(),
        p.amount.normalize(),
        p.value_date.to_string(),
    );
    let sent: (String, String, Decimal, String) = (
        t.ledger_entity.clone(),
        t.currency.clone(),
        t.amount,
        t.value_date.clone(),
    );
    (mine != sent).then(|| format!("posted {mine:?}, sent {sent:?}"))
}

/// Judge the stores against what was sent.
pub fn judge(
    sent: &[Produced],
    transactions: &[Transaction],
    postings: &[Posting],
    envelopes: &[DlqEnvelope],
    audit: &[AuditRecord],
    hand_offs: &[CommittedRef],
    edits: &BTreeMap<usize, Transaction>,
) -> Findings {
    let mut f = Findings::default();
    let txn_of = transaction_of_message(sent);
    let truth: BTreeMap<usize, &Transaction> = transactions.iter().map(|t| (t.id, t)).collect();
    let period = |t: Option<usize>| {
        t.and_then(|t| truth.get(&t))
            .and_then(|tx| tx.value_date.get(..7))
            .map(str::to_owned)
    };
    let by_hash: BTreeMap<&str, usize> = transactions
        .iter()
        .filter_map(|t| Some((t.source_hash.as_deref()?, t.id)))
        .collect();
    let may_post: BTreeSet<usize> = sent
        .iter()
        .filter(|p| !p.kind.invalid_by_construction())
        .filter_map(|p| p.txn)
        .collect();

    // Each posting: a message the producer sent, a transaction one of its valid messages carries,
    // and the fields as sent.
    let mut posted: BTreeMap<usize, Vec<&Posting>> = BTreeMap::new();
    for p in postings {
        let Some(t) = txn_of.get(&p.message_id) else {
            f.books_wrong.push((
                Some(p.period.clone()),
                format!(
                    "posting {} names message {}, which no producer sent",
                    p.source_hash, p.message_id
                ),
            ));
            continue;
        };
        posted.entry(*t).or_default().push(p);
        if !may_post.contains(t) {
            f.books_wrong.push((
                period(Some(*t)),
                format!(
                    "transaction {t} is posted ({}, by SQS {}), but no message sent for it was valid",
                    p.source_hash, p.sqs_message_id
                ),
            ));
        }
        // As sent, or as an approved edit made it.
        let edited = edits.get(t);
        if let Some(why) = truth
            .get(t)
            .and_then(|tx| differs(p, tx))
            .filter(|_| edited.and_then(|e| differs(p, e)).is_some() || edited.is_none())
        {
            f.books_wrong.push((
                period(Some(*t)),
                format!(
                    "transaction {t} is posted with other fields than were sent ({}): {why}",
                    p.source_hash
                ),
            ));
        }
        if let Some(hash) = truth.get(t).and_then(|tx| tx.source_hash.as_ref())
            && *hash != p.source_hash
            && edited.and_then(|e| e.source_hash.as_ref()) != Some(&p.source_hash)
        {
            f.books_wrong.push((
                period(Some(*t)),
                format!(
                    "transaction {t} is posted under {}, not the hash its producer computed ({hash})",
                    p.source_hash
                ),
            ));
        }
    }
    for (t, ps) in posted.iter().filter(|(_, ps)| ps.len() > 1) {
        let by: Vec<String> = ps
            .iter()
            .map(|p| format!("{} by SQS {}", p.source_hash, p.sqs_message_id))
            .collect();
        f.books_wrong.push((
            period(Some(*t)),
            format!("transaction {t} is posted {} times: {}", ps.len(), by.join(", ")),
        ));
    }

    // Manual journals: at most one per transaction, and none beside a posting.
    let mut by_hand: BTreeMap<usize, Vec<&DlqEnvelope>> = BTreeMap::new();
    for e in envelopes.iter().filter(|e| e.left_for_manual_journal()) {
        if let Some(t) = e.message_id.as_deref().and_then(|id| txn_of.get(id)) {
            by_hand.entry(*t).or_default().push(e);
        }
    }
    for (t, es) in &by_hand {
        let ids: Vec<&str> = es.iter().map(|e| e.envelope_id.as_str()).collect();
        if es.len() > 1 {
            f.books_wrong.push((
                period(Some(*t)),
                format!(
                    "transaction {t} is left for {} manual journals: envelopes {ids:?}",
                    es.len()
                ),
            ));
        }
        if let Some(ps) = posted.get(t) {
            f.books_wrong.push((
                period(Some(*t)),
                format!(
                    "transaction {t} is posted ({}) and left for a manual journal (envelopes {ids:?})",
                    ps[0].source_hash
                ),
            ));
        }
    }

    // A hand-off in the ledger keeps the transaction from ever posting: it belongs to an envelope
    // left for a manual journal (the accountant books it), or to one an approved edit superseded
    // (its edited copy posts instead). Any other is a transaction nobody will book.
    for h in hand_offs {
        let by = h.manual_journal.as_deref().unwrap_or_default();
        let e = envelopes.iter().find(|e| e.envelope_id == by);
        if !e.is_some_and(|e| e.left_for_manual_journal() || e.status == EnvelopeStatus::Superseded) {
            f.books_wrong.push((
                period(by_hash.get(h.source_hash.as_str()).copied()),
                format!(
                "transaction {} is handed off by envelope {by} (of {:?}, {:?}), which is neither left for a manual journal nor superseded by an edit: nobody books it",
                h.source_hash,
                e.and_then(|e| e.message_id.as_deref()),
                e.map(|e| e.status)
            )));
        }
    }

    // Every transaction sent ends in a documented state: posted (or booked by hand), or an
    // envelope of it awaiting remediation (PENDING) or in quarantine. Replayed, suppressed or
    // superseded envelopes only hand it on: where it ends, it must be.
    let open: BTreeSet<usize> = envelopes
        .iter()
        .filter(|e| matches!(e.status, EnvelopeStatus::Pending | EnvelopeStatus::Quarantined))
        .filter_map(|e| e.message_id.as_deref().and_then(|id| txn_of.get(id)).copied())
        .collect();
    let owed: BTreeSet<usize> = sent.iter().filter_map(|p| p.txn).collect();
    for t in owed {
        if !posted.contains_key(&t) && !open.contains(&t) {
            let messages: Vec<String> = sent
                .iter()
                .filter(|p| p.txn == Some(t))
                .map(|p| format!("{} ({:?})", p.sqs_id, p.kind))
                .collect();
            let records: Vec<String> = envelopes
                .iter()
                .filter(|e| e.message_id.as_deref().and_then(|id| txn_of.get(id)) == Some(&t))
                .map(|e| format!("envelope {} {}", e.envelope_id, e.status))
                .chain(
                    audit
                        .iter()
                        .filter(|r| r.message_id.as_deref().and_then(|id| txn_of.get(id)) == Some(&t))
                        .map(|r| format!("{}: {}", r.audit_id, r.detail)),
                )
                .collect();
            f.books_wrong.push((
                period(Some(t)),
                format!(
                "transaction {t} is lost: not posted, no envelope of it pending or in quarantine; sent as {messages:?}; the stores hold {records:?}"
            )));
        }
    }

    // Every message invalid by construction reaches an envelope of its own.
    let enveloped: BTreeSet<&str> = envelopes
        .iter()
        .map(|e| e.original.source_message_id.as_str())
        .collect();
    for p in sent.iter().filter(|p| p.kind.invalid_by_construction()) {
        if !enveloped.contains(p.sqs_id.as_str()) {
            f.books_wrong.push((
                period(p.txn),
                format!(
                    "SQS {} ({:?}, transaction {:?}) is invalid, yet no envelope holds it",
                    p.sqs_id, p.kind, p.txn
                ),
            ));
        }
    }
    // A quarantined envelope's transaction is never pending elsewhere: nothing stays REPLAYING.
    for e in envelopes.iter().filter(|e| e.status == EnvelopeStatus::Replaying) {
        f.other.push(format!("envelope {} is left REPLAYING", e.envelope_id));
    }
    f
}
