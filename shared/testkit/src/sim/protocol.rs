//! Each layer's own protocol, checked from the memory stores' journal (`memory::journal`) and
//! their contents, not only from the end state: a later layer (the consumer's conditional commit,
//! a replay that takes a claim over) can rescue what an earlier one got wrong, and would hide it.
//!
//! - **a lease is honoured**: no claim is taken over while the claim before it was live (its
//!   holder's wall clock plus the configured lease, whatever the claim itself says);
//! - **gate 2 under the claim**: no copy is re-injected of an envelope whose transaction was
//!   committed (posted or handed off) before the claim it was sent under;
//! - **a hand-off fenced by its claim**: written while its replay still held the envelope (the
//!   reference ledger's journal says which replay wrote it);
//! - **the WORM copy**: every envelope's WORM document, and its body when the bucket holds it,
//!   are there with the digest the envelope names;
//! - **the consumer's record**: every dead letter the consumer sent has its `DEAD_LETTERED`
//!   record in the trail.

use recon_core::domain::hash::sha256_hex;
use recon_core::domain::{AuditKind, AuditRecord, DlqEnvelope, decode};
use recon_core::ports::Worm;
use recon_core::replay::ReplayConfig;
use std::collections::{BTreeMap, BTreeSet};

use super::ledger::Books;
use super::sqs::Reinjection;
use super::world::CONSUMER;
use crate::memory::MemoryWorm;
use crate::memory::journal::ClaimEvent;

/// A claim's lease, as the deployment configures it (the simulated replays use the default).
fn lease() -> chrono::Duration {
    ReplayConfig::default().lease
}

/// No claim taken over while the one before it was live.
pub fn leases_honoured(claims: &[ClaimEvent]) -> Vec<String> {
    claims
        .iter()
        .filter_map(|c| {
            let before = c.took_over.as_ref()?;
            let live_until = before.now + lease();
            (c.now < live_until).then(|| {
                format!(
                    "envelope {}: {} took the claim over at {} while {}'s was live until {live_until} (a lease not honoured)",
                    c.envelope_id, c.replay_id, c.now, before.replay_id
                )
            })
        })
        .collect()
}

/// No copy re-injected of an envelope whose transaction was committed before its claim.
pub fn gate_2_under_the_claim(
    claims: &[ClaimEvent],
    reinjections: &[Reinjection],
    committed: &[(u64, String)],
) -> Vec<String> {
    let mut first: BTreeMap<&str, u64> = BTreeMap::new();
    for (at, hash) in committed {
        first.entry(hash.as_str()).or_insert(*at);
    }
    let mut v = Vec::new();
    for r in reinjections {
        let Ok(msg) = decode(&r.body) else { continue };
        // The claim it was sent under: the last claim (not a renewal) of the envelope by its
        // replay before the send.
        let Some(claim) = claims
            .iter()
            .filter(|c| c.envelope_id == r.envelope_id && c.replay_id == r.replay_id && !c.renewal && c.at < r.at)
            .max_by_key(|c| c.at)
        else {
            v.push(format!(
                "copy {} of envelope {} was re-injected by {} without a claim",
                r.message_id, r.envelope_id, r.replay_id
            ));
            continue;
        };
        if let Some(at) = first.get(msg.source_hash.as_str())
            && *at < claim.at
        {
            v.push(format!(
                "copy {} of envelope {} was re-injected by {}, though its transaction {} was committed before the claim (gate 2 not asked under the claim)",
                r.message_id, r.envelope_id, r.replay_id, msg.source_hash
            ));
        }
    }
    v
}

/// Every hand-off fenced by its replay's claim: written while the envelope's last claim (or
/// renewal) was that replay's, or after that replay recorded its intent to hand off under its
/// claim (which any replay taking the claim over finishes, so a late hand-off of the same envelope
/// changes nothing). One that lands after another replay took the claim over with no such intent
/// (that replay may have re-injected a copy meanwhile) is unfenced.
pub fn hand_offs_fenced(claims: &[ClaimEvent], hand_offs: &[(u64, String, String)]) -> Vec<String> {
    hand_offs
        .iter()
        .filter_map(|(at, envelope_id, replay_id)| {
            let before: Vec<&ClaimEvent> = claims
                .iter()
                .filter(|c| c.envelope_id == *envelope_id && c.at < *at)
                .collect();
            let last = before.iter().max_by_key(|c| c.at)?;
            let intended = before.iter().any(|c| c.replay_id == *replay_id && c.intent);
            (last.replay_id != *replay_id && !intended).then(|| {
                format!(
                    "envelope {envelope_id}: {replay_id} wrote its hand-off after {} had taken its claim over (a hand-off not fenced by its claim)",
                    last.replay_id
                )
            })
        })
        .collect()
}

/// Every envelope's WORM document (and body, when the bucket holds it) is there, as named.
pub fn worm_copies(envelopes: &[DlqEnvelope], worm: &MemoryWorm) -> Vec<String> {
    let get = |key: &str| super::exec::ready(worm.get(key)).and_then(Result::ok).flatten();
    let mut v = Vec::new();
    for e in envelopes {
        match &e.worm {
            None => v.push(format!("envelope {} names no WORM copy", e.envelope_id)),
            Some(w) => match get(&w.key) {
                None => v.push(format!(
                    "envelope {}: its WORM copy {} is missing",
                    e.envelope_id, w.key
                )),
                Some(bytes) if sha256_hex(&bytes) != w.sha256 => v.push(format!(
                    "envelope {}: its WORM copy {} is not the one it names",
                    e.envelope_id, w.key
                )),
                Some(_) => {}
            },
        }
        if let Some(key) = &e.original.body_key
            && get(key).is_none()
        {
            v.push(format!(
                "envelope {}: its body {key} is not in the bucket",
                e.envelope_id
            ));
        }
    }
    v
}

/// Every dead letter the consumer sent (an envelope it made) has its `DEAD_LETTERED` record, and
/// the consumer itself attempted it (whoever wrote it first: the enricher writes one it finds
/// missing) unless something explains why not: a fault on its DLQ send or audit append, or an
/// invocation that died between the send and the append.
pub fn dead_letters_recorded(
    envelopes: &[DlqEnvelope],
    audit: &[AuditRecord],
    attempted: &BTreeSet<String>,
    consumer: &str,
    explained: bool,
) -> Vec<String> {
    let records: BTreeMap<&str, &AuditRecord> = audit
        .iter()
        .filter(|r| r.kind == AuditKind::DeadLettered)
        .map(|r| (r.sqs_message_id.as_str(), r))
        .collect();
    let mut v = Vec::new();
    for e in envelopes.iter().filter(|e| e.dead_lettered_by == consumer) {
        match records.get(e.original.source_message_id.as_str()) {
            None => v.push(format!(
                "envelope {}: the consumer dead-lettered SQS {} without its DEAD_LETTERED record",
                e.envelope_id, e.original.source_message_id
            )),
            Some(r) if !explained && !attempted.contains(&r.audit_id) => v.push(format!(
                "envelope {}: the consumer never attempted the DEAD_LETTERED record of SQS {}, and no fault or dead invocation explains why",
                e.envelope_id, e.original.source_message_id
            )),
            Some(_) => {}
        }
    }
    v
}

/// Every protocol check of a finished run.
pub fn check(world: &super::world::World, envelopes: &[DlqEnvelope], audit: &[AuditRecord]) -> Vec<String> {
    let s = &world.stores;
    let claims = s.envelopes.claim_log();
    let mut v = leases_honoured(&claims);
    if let Books::Reference(ledger) = &s.books {
        v.extend(hand_offs_fenced(&claims, &ledger.hand_off_log()));
    }
    v.extend(gate_2_under_the_claim(
        &claims,
        &s.sqs.reinjections(),
        &s.books.commit_log(),
    ));
    v.extend(worm_copies(envelopes, &s.worm));
    // What explains a record another layer wrote for the consumer: a fault on its DLQ send or
    // audit append, or an invocation that died.
    let f = &world.faults;
    let explained = f.fired("DLQ.send") + f.fired("Audit.append") + world.deaths.get() > 0;
    let attempted: BTreeSet<String> = f
        .attempts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(flow, _)| *flow == CONSUMER)
        .map(|(_, id)| id.clone())
        .collect();
    v.extend(dead_letters_recorded(envelopes, audit, &attempted, CONSUMER, explained));
    v
}
