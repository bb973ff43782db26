//! What must hold after every run, judged from the stores (and the producer's manifest) with the
//! production code's own reconcile and audit verification:
//!
//! - at most one posting per `source_hash`, and every valid transaction sent is committed (or
//!   quarantined for a manual journal by a decision);
//! - every message sent is in exactly one terminal state, by count and by amount per currency,
//!   and once quiet nothing is left in flight or in a queue, and no message expired unseen;
//! - no envelope flagged for a manual journal whose transaction is committed;
//! - every envelope's creation and every replay decision has its audit record, every crossing of
//!   the high-water mark its `DLQ_OVERFLOW` record and at least one metric, nothing is left in
//!   the audit outbox, and the chains verify;
//! - no envelope's history grows without bound;
//! - triage's totals, kept by the envelope store through every change, equal a recount.

use recon_core::decisions::totals;
use recon_core::domain::{
    AuditKind, AuditRecord, DlqEnvelope, EnvelopeStatus, Posting, Segment, TransientKind, decode, identified_by_content,
};
use recon_core::envelopes::original_body;
use recon_core::evidence::verify_trail;
use recon_core::ports::{AuditOutbox, Backlog, LedgerScope, StoreError, all_envelopes};
use recon_core::reconcile::{
    Exceptions, LedgerRead, Links, SegmentRead, State, complete_exceptions, exceptions_of_period, look_up_unmet,
    manifest_entry, of_period, outcomes, read_ledger, read_period_segment, reconcile, reconcile_counted,
};
use recon_core::replay::MAX_RELEASES;
use std::collections::{BTreeMap, BTreeSet};

use super::exec::ready;
use super::truth;
use super::workload::{CLOSED_ENTITY, CLOSED_PERIOD};
use super::world::{DLQ, MAIN, World};
use crate::memory::{MemoryAuditLog, MemoryEnvelopeStore};
use recon_core::ports::{Ledger, LedgerReader};

/// Status changes one envelope may go through before it counts as stuck in a loop: a claim and
/// a release per failed re-injection, up to the cap, and a few more (creation, takeovers, the
/// final decision).
pub const MAX_HISTORY: usize = 2 * MAX_RELEASES + 8;

pub fn check(world: &World) -> Vec<String> {
    let s = &world.stores;
    let mut v = Vec::new();
    let postings = s.books.postings();
    let Some(Ok(envelopes)) = ready(all_envelopes(&*s.envelopes, None)) else {
        return vec!["the envelope store did not answer".into()];
    };
    let audit = s.audit.records();
    let sent = world.sent.borrow();

    // At most one posting per transaction; every valid transaction sent is committed.
    let committed: BTreeSet<&str> = postings.iter().map(|p| p.source_hash.as_str()).collect();
    if committed.len() != postings.len() {
        v.push(format!(
            "{} postings for {} transactions",
            postings.len(),
            committed.len()
        ));
    }
    // Completeness, by the production reconcile against the manifest.
    let main = s.sqs.depth(MAIN);
    let dlq = s.sqs.depth(DLQ);
    let manifest: Vec<_> = sent.iter().map(|p| manifest_entry(&p.body)).collect();
    let (out, problems) = outcomes(&postings, &envelopes, &audit, dlq.total() == 0);
    let r = reconcile(out, problems, Some(&manifest), main.total() + dlq.total());
    // The ground truth judges the books, and production reconcile with them.
    let findings = truth::judge(
        &sent,
        &world.transactions.borrow(),
        &postings,
        &envelopes,
        &audit,
        &s.books.hand_offs(),
        &world.edits.borrow(),
    );
    if r.holds && !findings.books_wrong.is_empty() {
        v.push(format!(
            "false HOLDS: production reconcile holds, but {}",
            findings.books_wrong_in(None).join("; ")
        ));
    }
    // Each period against the manifest's lines of it, as `reconcile --period P --manifest M`:
    // HOLDS only when nothing of that period is wrong, and it holds when nothing is.
    let whole_clean = findings.books_wrong.is_empty() && r.holds;
    let mut periods: BTreeSet<String> = manifest.iter().filter_map(|m| m.period.clone()).collect();
    periods.extend(postings.iter().map(|p| p.period.clone()));
    for p in &periods {
        let lines: Vec<_> = manifest
            .iter()
            .filter(|m| m.period.as_deref() == Some(p.as_str()))
            .cloned()
            .collect();
        let (out, problems) = outcomes(&postings, &envelopes, &audit, dlq.total() == 0);
        let rp = reconcile(of_period(out, p, Some(&lines)), problems, Some(&lines), 0);
        let wrong = findings.books_wrong_in(Some(p.as_str()));
        if rp.holds && !wrong.is_empty() {
            v.push(format!("false HOLDS for period {p}: {}", wrong.join("; ")));
        }
        if !rp.holds && whole_clean {
            v.push(format!(
                "period {p} does not hold against its manifest lines though nothing is wrong: missing {:?}, extra {:?}, altered {:?}, problems {:?}",
                rp.missing, rp.extra, rp.altered, rp.problems
            ));
        }
    }
    for (at, finding) in world.audits.borrow().iter() {
        v.push(format!("at {at:?}: {finding}"));
    }
    v.extend(findings.all());
    if !r.holds {
        let states: Vec<String> = r
            .by_state
            .iter()
            .map(|(s, t)| {
                format!(
                    "{s:?} {} {:?} (+{} without amount)",
                    t.count, t.amounts, t.without_amount
                )
            })
            .collect();
        v.push(format!(
            "reconcile does not hold: missing {:?}, extra {:?}, problems {:?}; sent {:?}; states {states:?}",
            r.missing, r.extra, r.problems, r.sent
        ));
    }
    v.extend(bounded_read_agrees(
        &s.books,
        (&s.envelopes, &s.audit),
        &postings,
        &envelopes,
        &audit,
        dlq.total() == 0,
    ));
    if let Some(t) = r.by_state.get(&State::InFlight).filter(|t| t.count > 0) {
        v.push(format!("{} records left in flight once quiet", t.count));
    }
    if main.total() + dlq.total() > 0 {
        v.push(format!("queues not empty once quiet: main {main:?}, DLQ {dlq:?}"));
    }
    for (queue, id, _) in s.sqs.expired() {
        v.push(format!("message {id} expired in {queue} before it was settled"));
    }

    // Nothing posts into the closed period while it stays closed, whatever the entity's spelling.
    if world.settings.reopen_period_at.is_none() {
        for p in postings
            .iter()
            .filter(|p| p.ledger_entity.eq_ignore_ascii_case(CLOSED_ENTITY) && p.period == CLOSED_PERIOD)
        {
            v.push(format!(
                "{} posted into {CLOSED_ENTITY}'s closed period {CLOSED_PERIOD} as `{}`",
                p.message_id, p.ledger_entity
            ));
        }
    }

    // Manual journals only for what did not post.
    for e in &envelopes {
        if e.left_for_manual_journal() && committed.contains(e.source_hash.as_str()) {
            v.push(format!(
                "envelope {} (of {}) is flagged for a manual journal, but its transaction {} is committed; history {:?}",
                e.envelope_id, e.original.source_message_id, e.source_hash, e.status_history
            ));
        }
    }

    // A manual journal is handed off in the ledger by its own envelope (so nothing posts it
    // after), and a hand-off belongs to an envelope left for a manual journal (else the
    // transaction would be neither posted nor booked by hand).
    let hand_offs = s.books.hand_offs();
    let manual: BTreeSet<&str> = envelopes
        .iter()
        .filter(|e| e.left_for_manual_journal())
        .map(|e| e.envelope_id.as_str())
        .collect();
    // Every one: a body that does not identify its transaction is never left for a manual journal
    // (nothing could fence it), only quarantined for review.
    for e in envelopes.iter().filter(|e| manual.contains(e.envelope_id.as_str())) {
        if !hand_offs.iter().any(|h| h.handed_off_by(&e.envelope_id)) {
            v.push(format!(
                "envelope {} is left for a manual journal without a hand-off in the ledger",
                e.envelope_id
            ));
        }
    }
    // An operator's quarantine of a transaction its body identifies (it decodes, or its hashed
    // fields reproduce the hash it claims) is a manual journal, as the operator decided; only a
    // body that identifies none is held for review instead.
    for e in envelopes.iter().filter(|e| {
        e.status == EnvelopeStatus::Quarantined
            && !manual.contains(e.envelope_id.as_str())
            && e.status_history
                .last()
                .is_some_and(|c| c.reason.starts_with("quarantined by the Operator gate"))
    }) {
        if let Some(Ok(Some(body))) = ready(original_body(e, &*s.worm))
            // Composed here, not through the replay's own `identifies`: a bug there must not
            // blind the check on it.
            && (decode(&body).is_ok() || identified_by_content(&body).is_some())
        {
            v.push(format!(
                "envelope {} identifies its transaction, and an operator quarantined it for a manual journal, but it is held for review only",
                e.envelope_id
            ));
        }
    }
    // Each layer's own protocol.
    v.extend(super::protocol::check(world, &envelopes, &audit));

    // Every decision has its record.
    let ids: BTreeSet<&str> = audit.iter().map(|r| r.audit_id.as_str()).collect();
    for e in &envelopes {
        v.extend(missing_records(e, &ids));
        if e.status_history.len() > MAX_HISTORY {
            let last: Vec<&str> = e
                .status_history
                .iter()
                .rev()
                .take(4)
                .map(|c| c.reason.as_str())
                .collect();
            v.push(format!(
                "envelope {} went through {} status changes ({}): a loop; the last {last:?}",
                e.envelope_id,
                e.status_history.len(),
                e.root_cause
            ));
        }
    }
    let overflow_records = audit.iter().filter(|r| r.kind == AuditKind::DlqOverflow).count() as u64;
    let episodes = s.envelopes.overflow_episodes();
    if overflow_records != episodes {
        v.push(format!(
            "{episodes} crossings of the high-water mark, {overflow_records} DLQ_OVERFLOW records"
        ));
    }
    // At least once: the alarm pages on it (a publication repeated after a failure emits again).
    let overflow_metrics = s.metrics.emitted().iter().filter(|m| m.name == "DlqOverflow").count() as u64;
    if overflow_metrics < episodes {
        v.push(format!(
            "{episodes} crossings of the high-water mark, {overflow_metrics} DlqOverflow metrics"
        ));
    }
    // Triage's totals, as the store kept them through every change, equal a recount.
    match (ready(s.envelopes.triage_totals()), totals::recount(&envelopes)) {
        (Some(Ok(Some(kept))), Ok(counted)) if totals::normalized(kept.clone()) == counted => {}
        (Some(Ok(Some(kept))), counted) => v.push(format!(
            "triage's totals are not a recount of the PENDING envelopes: kept {:?}, counted {counted:?}",
            totals::normalized(kept)
        )),
        (Some(Ok(None)), _) => v.push("the envelope store no longer keeps triage's totals".into()),
        _ => v.push("triage's totals could not be read".into()),
    }
    match ready(s.envelopes.pending_records(1000)) {
        Some(Ok(left)) if left.is_empty() => {}
        Some(Ok(left)) => v.push(format!(
            "{} audit records still in the outbox once quiet: {:?}",
            left.len(),
            left.iter().map(|r| r.audit_id.as_str()).collect::<Vec<_>>()
        )),
        _ => v.push("the audit outbox could not be read".into()),
    }
    match ready(verify_trail(
        &*s.audit,
        &*s.worm,
        &recon_core::evidence::VerifyOptions::default(),
    )) {
        Some(Ok(report)) if report.intact() => {}
        Some(Ok(report)) => v.push(format!("the audit trail does not verify: {:?}", report.breaks)),
        _ => v.push("the audit trail could not be read".into()),
    }
    // Last, as it changes the stores: an outsider with write access to the ledger.
    if let Some(tamper) = world.settings.tamper {
        v.extend(tampered(world, tamper, &manifest, &envelopes, &audit));
    }
    v
}

/// What an outsider with write access to the ledger does behind the pipeline's back, once the run
/// is over: reconcile must never hold after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tamper {
    /// Posts a transaction left for a manual journal (booked twice: by hand and in the ledger).
    PostsAManualJournal,
    /// Deletes a posting (a transaction lost).
    DeletesAPosting,
    /// Alters a posting's amount.
    AltersAnAmount,
}

fn tampered(
    world: &World,
    tamper: Tamper,
    manifest: &[recon_core::reconcile::Entry],
    envelopes: &[DlqEnvelope],
    audit: &[AuditRecord],
) -> Vec<String> {
    use super::ledger::Books;
    let books = &world.stores.books;
    let put = |p: Posting| match books {
        Books::Reference(l) => l.overwrite(&p.source_hash.clone(), Some(p)),
        Books::Claiming { gl, .. } => gl.insert(p),
    };
    let remove = |key: &str| match books {
        Books::Reference(l) => l.overwrite(key, None),
        Books::Claiming { gl, .. } => {
            gl.remove(key);
        }
    };
    // A posting of a message no envelope names: its loss or change leaves the message with no
    // other documented state to stand in for it.
    let mut postings: Vec<Posting> = books
        .postings()
        .into_iter()
        .filter(|p| {
            !envelopes
                .iter()
                .any(|e| e.message_id.as_deref() == Some(p.message_id.as_str()))
        })
        .collect();
    postings.sort_by(|a, b| a.source_hash.cmp(&b.source_hash));
    let what = match tamper {
        Tamper::PostsAManualJournal => {
            let Some((e, m)) = envelopes.iter().filter(|e| e.left_for_manual_journal()).find_map(|e| {
                let m = decode(e.original.body.as_deref()?).ok()?;
                Some((e, m))
            }) else {
                return Vec::new();
            };
            // As if the original delivery's write had landed after all: the posting names the
            // message the envelope holds, so only the cross-check of manual journals against
            // postings can tell.
            let at = e.dead_lettered_at;
            put(Posting::from_message(&m, &e.original.source_message_id, 1, at, None));
            format!(
                "posted {}, left for a manual journal by {}",
                m.source_hash, e.envelope_id
            )
        }
        Tamper::DeletesAPosting => {
            let Some(p) = postings.first() else { return Vec::new() };
            remove(&p.source_hash);
            format!("deleted the posting {}", p.source_hash)
        }
        Tamper::AltersAnAmount => {
            let Some(p) = postings.first() else { return Vec::new() };
            let Some(amount) = p.amount.checked_add(rust_decimal::Decimal::ONE) else {
                return Vec::new();
            };
            remove(&p.source_hash);
            put(Posting { amount, ..p.clone() });
            format!("added 1 to the amount of {}", p.source_hash)
        }
    };
    let after = books.postings();
    let (out, problems) = outcomes(&after, envelopes, audit, true);
    let r = reconcile(out, problems, Some(manifest), 0);
    if r.holds {
        vec![format!("false HOLDS: reconcile holds after an outsider {what}")]
    } else {
        Vec::new()
    }
}

/// The audit records an envelope's history calls for and the trail lacks.
fn missing_records(e: &DlqEnvelope, ids: &BTreeSet<&str>) -> Vec<String> {
    let mut missing = Vec::new();
    let id = &e.envelope_id;
    let created = [AuditKind::Enriched, AuditKind::Quarantined]
        .iter()
        .any(|k| ids.contains(format!("{}#{id}", k.as_str()).as_str()));
    if !created {
        missing.push(format!("envelope {id} has no ENRICHED or QUARANTINED record"));
    }
    let by_replay: BTreeMap<&str, EnvelopeStatus> =
        e.replays.iter().map(|r| (r.replay_id.as_str(), r.outcome)).collect();
    for (replay_id, outcome) in by_replay {
        let kind = match outcome {
            EnvelopeStatus::Replayed => AuditKind::ReplayReinjected,
            EnvelopeStatus::SuppressedDuplicate => AuditKind::ReplaySuppressed,
            EnvelopeStatus::Quarantined => AuditKind::Quarantined,
            _ => continue,
        };
        let audit_id = format!("{}#{id}#{replay_id}", kind.as_str());
        if !ids.contains(audit_id.as_str()) {
            missing.push(format!(
                "envelope {id}: {outcome} by {replay_id} has no {} record",
                kind.as_str()
            ));
        }
    }
    missing
}

/// One segment of `period` read as `dlqctl reconcile --fan-out` has the replay function read it.
async fn segment_as_invoked<L: LedgerReader>(
    ledger: &L,
    period: &str,
    segment: Segment,
    links: &Links,
) -> Result<LedgerRead, StoreError> {
    let wrong = |e: String| StoreError::new(TransientKind::Infrastructure, e);
    let request = SegmentRead {
        period: period.to_owned(),
        segment: format!("{}/{}", segment.index, segment.of),
        links: links.clone(),
    };
    let request: SegmentRead = serde_json::to_value(&request)
        .and_then(serde_json::from_value)
        .map_err(|e| wrong(e.to_string()))?;
    let answer = read_period_segment(ledger, &request).await.map_err(wrong)?;
    serde_json::to_value(&answer)
        .and_then(serde_json::from_value)
        .map_err(|e| wrong(e.to_string()))
}

/// The reads `dlqctl reconcile` and `evidence export` make — the ledger in segments, a period
/// through its index and that period's exceptions through theirs, without a manifest the
/// postings of no lineage only counted — must tell what the whole read tells: the same counts
/// and amounts per state and per entity and period, the same problems (for a period, none the
/// whole read does not name), whether it holds.
pub fn bounded_read_agrees<L: Ledger + LedgerReader>(
    ledger: &L,
    (envelope_store, audit_log): (&MemoryEnvelopeStore, &MemoryAuditLog),
    postings: &[Posting],
    envelopes: &[DlqEnvelope],
    audit: &[AuditRecord],
    dlq_empty: bool,
) -> Vec<String> {
    let mut v = Vec::new();
    let (whole, whole_problems) = outcomes(postings, envelopes, audit, dlq_empty);
    // Every period something is of: postings, envelopes, records.
    let periods: BTreeSet<&str> = postings
        .iter()
        .map(|p| p.period.as_str())
        .chain(envelopes.iter().filter_map(|e| e.accounting_period.as_deref()))
        .chain(audit.iter().filter_map(|r| r.period.as_deref()))
        .collect();
    let scopes = std::iter::once(None).chain(periods.into_iter().map(Some));
    for (period, keep_every) in scopes.flat_map(|p| [(p, false), (p, true)]) {
        let scope = LedgerScope {
            period: period.map(str::to_owned),
            ..LedgerScope::default()
        };
        let exceptions = match period {
            None => Some(Ok(Exceptions {
                envelopes: envelopes.to_vec(),
                audit: audit.to_vec(),
            })),
            Some(p) => ready(exceptions_of_period(envelope_store, audit_log, p)),
        };
        let Some(Ok(mut exceptions)) = exceptions else {
            v.push(format!("the stores did not answer a read of {scope:?}'s exceptions"));
            continue;
        };
        let links = Links::of(&exceptions.envelopes, &exceptions.audit);
        let links = if keep_every { links.keeping_everything() } else { links };
        let links = &links;
        // Keeping every posting: three segments read at once. Keeping the linked ones: as a
        // fan-out would, each segment read on its own (a period's as the replay function reads
        // it, its request and answer through JSON), the reads merged, then the lookups.
        let fan_out = async {
            let mut read = LedgerRead::default();
            for segment in Segment::all_of(3) {
                let part = match period {
                    Some(p) => segment_as_invoked(ledger, p, segment, links).await?,
                    None => read_ledger(ledger, &scope.segment(segment), 1, links).await?,
                };
                read.merge(part);
            }
            look_up_unmet(ledger, &scope, links, &mut read).await?;
            Ok::<_, StoreError>(read)
        };
        let read = if keep_every {
            ready(read_ledger(ledger, &scope, 3, links))
        } else {
            ready(fan_out)
        };
        let Some(Ok(mut read)) = read else {
            v.push(format!("the ledger did not answer a read of {scope:?} in segments"));
            continue;
        };
        if let Some(p) = period
            && ready(complete_exceptions(
                envelope_store,
                audit_log,
                ledger,
                p,
                &mut read,
                &mut exceptions,
            ))
            .is_none_or(|r| r.is_err())
        {
            v.push(format!("the envelope store did not answer the lookups of {scope:?}"));
            continue;
        }
        let (linked, problems) = outcomes(&read.linked, &exceptions.envelopes, &exceptions.audit, dlq_empty);
        let cut = |o| match period {
            Some(p) => of_period(o, p, None),
            None => o,
        };
        let bounded = reconcile_counted(read.counted, &cut(linked), problems, None, 0);
        let expected = reconcile(cut(whole.clone()), whole_problems.clone(), None, 0);
        let mut named = bounded.problems.clone();
        let mut all = expected.problems.clone();
        named.sort();
        all.sort();
        // A period's read names only that period's problems; the whole read names them all.
        let (problems_agree, holds_agree) = match period {
            None => (named == all, bounded.holds == expected.holds),
            Some(_) => (
                named.iter().all(|p| all.binary_search(p).is_ok()),
                bounded.holds || !expected.holds,
            ),
        };
        if bounded.by_state != expected.by_state
            || bounded.by_entity_period != expected.by_entity_period
            || !problems_agree
            || !holds_agree
        {
            v.push(format!(
                "the bounded read of {scope:?} tells otherwise: {bounded:?}, the whole read {expected:?}"
            ));
        }
    }
    v
}
