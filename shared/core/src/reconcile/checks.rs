//! Cross-checks between the ledger's postings and the envelopes, and the comparison of amounts
//! sent with amounts recorded: problems no single store shows.

use rust_decimal::Decimal;
use std::collections::{BTreeMap, BTreeSet};

use super::edits::show;
use super::{Entry, State};
use crate::domain::{DlqEnvelope, EnvelopeStatus, Posting};

/// Transactions the ledger holds: posted, handed to a manual journal, or handed off by an edit
/// that posted another in their place.
pub(super) fn committed<'a>(postings: &'a [Posting], envelopes: &'a [DlqEnvelope]) -> BTreeSet<&'a str> {
    postings
        .iter()
        .map(|p| p.source_hash.as_str())
        .chain(
            envelopes
                .iter()
                .filter(|e| e.left_for_manual_journal() || e.status == EnvelopeStatus::Superseded)
                .map(|e| e.source_hash.as_str()),
        )
        .collect()
}

/// An envelope's claim on the ledger, checked against the postings: a transaction left for a
/// manual journal must not also be posted nor left for another, and one suppressed as a duplicate
/// must be held.
pub(super) fn envelopes_against_ledger(
    postings: &[Posting],
    envelopes: &[DlqEnvelope],
    committed: &BTreeSet<&str>,
    problems: &mut Vec<String>,
) {
    // A transaction left for a manual journal (the hash its body decodes to, or only claims)
    // that the ledger holds as a posting is booked twice: by the pipeline and by hand.
    // Two envelopes left for manual journals under one hash are one transaction booked twice
    // by hand.
    let posted: BTreeMap<&str, &Posting> = postings.iter().map(|p| (p.source_hash.as_str(), p)).collect();
    let mut by_hand: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (e, hash) in envelopes
        .iter()
        .filter(|e| e.left_for_manual_journal())
        .filter_map(|e| Some((e, e.claimed_hash()?)))
    {
        by_hand.entry(hash).or_default().push(e.envelope_id.as_str());
        if let Some(p) = posted.get(hash) {
            problems.push(format!(
                "envelope {} is left for a manual journal, but its transaction {} is posted (message {}, SQS {}): booked twice",
                e.envelope_id, e.source_hash, p.message_id, p.sqs_message_id
            ));
        }
    }
    for (hash, ids) in by_hand.iter().filter(|(_, ids)| ids.len() > 1) {
        problems.push(format!(
            "transaction {hash} is left for {} manual journals (envelopes {}): booked twice by hand",
            ids.len(),
            ids.join(", ")
        ));
    }
    // An envelope suppressed as a duplicate names a transaction the ledger holds (posted, or
    // handed to a manual journal): else it was counted as settled by something that is gone.
    for (e, hash) in envelopes
        .iter()
        .filter(|e| e.status == EnvelopeStatus::SuppressedDuplicate)
        .filter_map(|e| Some((e, e.claimed_hash()?)))
    {
        if !committed.contains(hash) {
            problems.push(format!(
                "envelope {} was suppressed as a duplicate of {}, whose posting (or manual journal) is missing",
                e.envelope_id, e.source_hash
            ));
        }
    }
}

/// The manifest keys whose matched records carry other amounts than were sent. Per key, the
/// amounts sent and recorded are compared as multisets (two sends under one key may end in either
/// order); an edited transaction is compared by what was sent. Keys with more or fewer records
/// than sends are named as missing or extra instead.
pub(super) fn altered(manifest: &[Entry], outcomes: &[(State, Entry)]) -> Vec<String> {
    type Amounts = Vec<(Option<String>, Option<Decimal>)>;
    let amount = |currency: Option<&String>, amount: Option<Decimal>| {
        (currency.map(|c| c.to_ascii_uppercase()), amount.map(|a| a.normalize()))
    };
    let mut sent: BTreeMap<&str, Amounts> = BTreeMap::new();
    for e in manifest {
        sent.entry(&e.key)
            .or_default()
            .push(amount(e.currency.as_ref(), e.amount));
    }
    let mut recorded: BTreeMap<&str, Amounts> = BTreeMap::new();
    for (_, e) in outcomes {
        let as_sent = match &e.edited_from {
            Some(from) => amount(from.currency.as_ref(), from.amount),
            None => amount(e.currency.as_ref(), e.amount),
        };
        recorded.entry(&e.key).or_default().push(as_sent);
    }
    let show = |a: &Amounts| {
        a.iter()
            .map(|(c, x)| show(c.as_deref(), *x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::new();
    for (key, mut s) in sent {
        let Some(r) = recorded.get_mut(key) else { continue };
        if r.len() != s.len() {
            continue;
        }
        s.sort();
        r.sort();
        if s != *r {
            out.push(format!("{key}: sent {}, recorded {}", show(&s), show(r)));
        }
    }
    out
}
