//! The three gates (and the replay cap), evaluated for one envelope with reads only, after two
//! things that decide before any gate: a hand-off waiting for a request in doubt (PENDING until
//! then, unclaimed), and a hand-off a replay began under its claim and did not finish (finished
//! now, whatever the gates say):
//!
//! - **gate 2, idempotency**, asked first once the body decodes (or its hashed fields name its
//!   transaction): its `source_hash` is not committed in the ledger the consumer writes (else
//!   `REPLAY_DUPLICATE`: `SUPPRESSED_DUPLICATE`, never re-injected; its own hand-off found there
//!   is finished);
//! - **replay cap**: an envelope whose message was already replayed `max_replays` times goes to
//!   quarantine for review;
//! - **gate 1, integrity**: the verbatim original decodes and its currency/scale validate with
//!   today's code and reference data (the consumer's own functions); still poison -> stays
//!   PENDING; unrecoverable -> quarantine;
//! - **gate 3, temporal**: its accounting period is open and it is inside the replay window (else
//!   quarantine, flagged for a manual journal);
//! - **manual journal**: every quarantine flagged for a manual journal first hands the transaction
//!   off in the ledger ([`crate::domain::HandOff`], conditional like a commit), so no later
//!   delivery or replay posts what an accountant books by hand; a hand-off that loses to a posting
//!   suppresses the envelope as a duplicate instead;
//! - **transport**: an envelope whose re-injection failed [`MAX_RELEASES`] times goes to
//!   quarantine, flagged for a manual journal (under the claim, an original over SQS's limits with
//!   the replay's attributes goes there at once: `reinject`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

use super::ReplayPorts;
use super::{ReplayRequest, Replayer};
use crate::domain::message::{check_currency, check_period, decode, identified_by_content, identifies};
use crate::domain::{CommittedRef, DlqEnvelope, EnvelopeStatus, ProcessError, ReferenceSnapshot, TxKey};
use crate::envelopes::original_body;
use crate::ports::{Ledger, StoreResult};

/// Gate 2's answers for several envelopes, read ahead in one request
/// ([`Ledger::lookup_many`]): a page's before the gates, a chunk's again once it is claimed. A
/// transaction not read ahead (its body is in the bucket) is asked on its own; a read ahead that
/// fails leaves every one to be asked on its own.
#[derive(Debug, Default)]
pub(super) struct ReadAhead {
    asked: HashSet<TxKey>,
    found: HashMap<String, CommittedRef>,
}

impl ReadAhead {
    pub(super) async fn of<'e, L: Ledger>(ledger: &L, envelopes: impl IntoIterator<Item = &'e DlqEnvelope>) -> Self {
        let keys: Vec<TxKey> = envelopes.into_iter().filter_map(inline_transaction).collect();
        if keys.is_empty() {
            return ReadAhead::default();
        }
        match ledger.lookup_many(&keys).await {
            Ok(found) => ReadAhead {
                asked: keys.into_iter().collect(),
                found,
            },
            Err(e) => {
                tracing::warn!(error = %e, envelopes = keys.len(), "gate 2 not read ahead; asked one by one");
                ReadAhead::default()
            }
        }
    }

    /// [`Ledger::lookup`], answered from the read ahead when it asked this key.
    pub(super) async fn lookup<L: Ledger>(&self, ledger: &L, key: &TxKey) -> StoreResult<Option<CommittedRef>> {
        if self.asked.contains(key) {
            return Ok(self.found.get(&key.source_hash).cloned());
        }
        ledger.lookup(key).await
    }
}

/// The ledger key gate 2 asks for an envelope whose body is inline: the transaction the body
/// identifies (a hash it merely claims is asked only when needed: its period is not known, and a
/// ledger keyed by period has to search for it).
fn inline_transaction(e: &DlqEnvelope) -> Option<TxKey> {
    identifies(e.original.body.as_deref()?)
}

/// Re-injections of one envelope that may fail (a refused send, released back to PENDING) before
/// it is quarantined for review: each attempt adds to its history, which must stay bounded.
pub const MAX_RELEASES: usize = 12;

/// The verdict for an envelope whose own hand-off to a manual journal is in the ledger: a replay
/// wrote it and stopped before settling the envelope; the quarantine is finished.
pub(super) const RESUMED_HAND_OFF: &str =
    "handed to a manual journal by an earlier replay, which stopped before settling the envelope";

/// Why an operator's quarantine of a body that does not identify its transaction is not flagged
/// for a manual journal.
pub(super) const NOT_IDENTIFIED: &str = "its content does not reproduce the hash it claims, so no hand-off can keep that transaction from being booked again: quarantined for review, not for a manual journal (the producer's corrected resend books it)";

/// Which gate decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Gate {
    Integrity,
    Idempotency,
    Temporal,
    ReplayCap,
    /// The original cannot be re-injected as it is (SQS's limits), or its sends kept failing.
    Transport,
    /// An operator quarantined it by hand.
    Operator,
}

/// What the gates say about an envelope (read-only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Reinject,
    Duplicate {
        /// Who holds the transaction in the ledger ([`crate::domain::CommittedRef::holder`]).
        committed_by: String,
    },
    StillFailing {
        gate: Gate,
        detail: String,
    },
    Quarantine {
        gate: Gate,
        detail: String,
        manual_journal: bool,
    },
}

impl<P: ReplayPorts> Replayer<P> {
    /// The verdict for `e` under `req`, with reads only: an operator's quarantine decides at once.
    pub(super) async fn verdict_for(
        &self,
        req: &ReplayRequest,
        e: &DlqEnvelope,
        snapshot: &ReferenceSnapshot,
        now: DateTime<Utc>,
        ahead: &ReadAhead,
    ) -> StoreResult<Verdict> {
        if let Some(waits) = waits_in_doubt(e, now) {
            return Ok(waits);
        }
        if req.quarantine {
            if !handing_off(e) && self.identified_transaction(e).await?.is_none() {
                // A manual journal is fenced by its hand-off under the transaction's hash; one
                // whose content does not reproduce the hash it claims (altered, or a hashed field
                // unreadable) cannot be, and the message that does carry that transaction may be
                // handed off or posted later: booked twice. It is quarantined for review instead,
                // unless the transaction it claims is committed already.
                if let Some(claimed) = e.claimed_hash()
                    && let Some(committed) = ahead.lookup(&self.ledger, &TxKey::hash_only(claimed)).await?
                {
                    return Ok(Verdict::Duplicate {
                        committed_by: committed.holder(),
                    });
                }
                let detail = format!("{}; {NOT_IDENTIFIED}", req.reason);
                return Ok(Verdict::quarantine(Gate::Operator, detail, false));
            }
            return Ok(Verdict::quarantine(Gate::Operator, req.reason.clone(), true));
        }
        if handing_off(e) {
            // A replay was handing it off (its intent written under its claim) and stopped:
            // whatever the gates say today, the transaction is the accountant's now.
            return Ok(Verdict::quarantine(Gate::Idempotency, RESUMED_HAND_OFF, true));
        }
        let Some(body) = original_body(e, &self.worm).await? else {
            return Ok(Verdict::quarantine(
                Gate::Integrity,
                "the original body is missing",
                false,
            ));
        };
        let msg = match decode(&body) {
            Ok(m) => m,
            Err(ProcessError::Unrecoverable { cause, detail }) => {
                return Ok(Verdict::quarantine(
                    Gate::Integrity,
                    format!("{cause}: {detail}"),
                    false,
                ));
            }
            Err(err) => {
                // Still failing, unless the transaction its hashed fields name is committed (or
                // handed off) already: settled whatever the rest of the body says.
                if let Some(key) = identified_by_content(&body)
                    && let Some(committed) = ahead.lookup(&self.ledger, &key).await?
                {
                    return Ok(Verdict::held(&committed, e));
                }
                return Ok(Verdict::still_failing(Gate::Integrity, err));
            }
        };
        // Gate 2 before the others: a transaction committed (or handed off — by this envelope
        // itself, an earlier replay's hand-off it must finish) is settled whatever the rest say.
        if let Some(committed) = ahead.lookup(&self.ledger, &msg.key()).await? {
            return Ok(Verdict::held(&committed, e));
        }
        if e.replay_generation >= self.config.max_replays {
            let detail = format!(
                "already replayed {} times: a repeat offender, review by hand",
                e.replay_generation
            );
            return Ok(Verdict::quarantine(Gate::ReplayCap, detail, false));
        }
        if let Err(err) = check_currency(&msg, snapshot) {
            return Ok(Verdict::still_failing(Gate::Integrity, err));
        }
        if let Err(err) = check_period(&msg, snapshot) {
            return Ok(Verdict::quarantine(Gate::Temporal, err.to_string(), true));
        }
        // Failed re-injections (a release that waited for a request in doubt is not one).
        let releases = e
            .replays
            .iter()
            .filter(|r| r.outcome == EnvelopeStatus::Pending && r.in_doubt_until.is_none())
            .count();
        if releases >= MAX_RELEASES {
            let detail = format!("re-injection attempted {releases} times without success: review by hand");
            return Ok(Verdict::quarantine(Gate::Transport, detail, true));
        }
        if now - e.dead_lettered_at > self.config.replay_window {
            let detail = format!(
                "dead-lettered {} days ago, beyond the replay window of {} days",
                (now - e.dead_lettered_at).num_days(),
                self.config.replay_window.num_days()
            );
            return Ok(Verdict::quarantine(Gate::Temporal, detail, true));
        }
        Ok(Verdict::Reinject)
    }

    /// The transaction the envelope's original identifies ([`identifies`]).
    pub(super) async fn identified_transaction(&self, e: &DlqEnvelope) -> StoreResult<Option<TxKey>> {
        Ok(original_body(e, &self.worm).await?.as_deref().and_then(identifies))
    }
}

/// A PENDING envelope whose last release waits for a request in doubt: still failing, unclaimed,
/// until then.
fn waits_in_doubt(e: &DlqEnvelope, now: DateTime<Utc>) -> Option<Verdict> {
    let until = e
        .replays
        .iter()
        .max_by_key(|r| r.at)
        .and_then(|r| r.in_doubt_until)
        .filter(|until| e.status == EnvelopeStatus::Pending && *until > now)?;
    Some(Verdict::still_failing(
        Gate::Idempotency,
        format!(
            "its hand-off waits until {until}: a request to the general ledger may still be applied (it cannot void a key)"
        ),
    ))
}

/// Was a replay handing the envelope's transaction off when it stopped? Its intent is a REPLAYING
/// change flagged for a manual journal, written under its claim (`EnvelopeStore::renew`) before
/// the hand-off; a takeover since keeps it in the history's REPLAYING stretch.
pub(super) fn handing_off(e: &DlqEnvelope) -> bool {
    e.status == EnvelopeStatus::Replaying
        && e.status_history
            .iter()
            .rev()
            .take_while(|c| c.status == EnvelopeStatus::Replaying)
            .any(|c| c.manual_journal)
}

impl Verdict {
    fn quarantine(gate: Gate, detail: impl Into<String>, manual_journal: bool) -> Self {
        Verdict::Quarantine {
            gate,
            detail: detail.into(),
            manual_journal,
        }
    }

    fn still_failing(gate: Gate, detail: impl ToString) -> Self {
        Verdict::StillFailing {
            gate,
            detail: detail.to_string(),
        }
    }

    /// `e`'s transaction is held in the ledger: by `e`'s own hand-off (an earlier replay's, to
    /// finish), or committed by another (a duplicate).
    fn held(committed: &CommittedRef, e: &DlqEnvelope) -> Self {
        if committed.handed_off_by(&e.envelope_id) {
            Verdict::quarantine(Gate::Idempotency, RESUMED_HAND_OFF, true)
        } else {
            Verdict::Duplicate {
                committed_by: committed.holder(),
            }
        }
    }
}
