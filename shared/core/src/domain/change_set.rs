//! The envelopes a remediation would change, as its dry run saw them: each with a fingerprint of
//! its state ([`fingerprint`]), the set with a digest ([`ChangeSet::digest`]) and its exposure
//! (count, gross amounts per currency, closed-period share). What an approval covers. Pure.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::canary::Canary;
use super::edit::Edit;
use super::envelope::DlqEnvelope;
use super::hash::sha256_hex;
use super::money::parse_amount;
use super::policy::Exposure;

impl Exposure {
    pub fn add(&mut self, c: &Change) {
        self.count += 1;
        let amount = c.amount.as_deref().and_then(|a| parse_amount(a).ok()).map(|a| a.abs());
        self.gross.add_parts(c.currency.as_deref(), amount);
        self.closed_period += u64::from(c.closed_period);
    }
}

/// What a request asks to do with its envelopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Action {
    Replay,
    Quarantine,
    /// Post an edited body of one envelope as a new message ([`super::edit`]).
    Edit,
}

/// One envelope a remediation would change, as its dry run saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub envelope_id: String,
    /// [`fingerprint`] of the envelope when the dry run read it.
    pub fingerprint: String,
    /// What the dry run said would happen (`REINJECTED`, `QUARANTINED`, …).
    pub outcome: String,
    pub currency: Option<String>,
    pub amount: Option<String>,
    pub entity: Option<String>,
    pub period: Option<String>,
    #[serde(default)]
    pub closed_period: bool,
}

impl Change {
    pub fn of(e: &DlqEnvelope, outcome: &str, closed_period: bool) -> Self {
        Change {
            envelope_id: e.envelope_id.clone(),
            fingerprint: fingerprint(e),
            outcome: outcome.to_owned(),
            currency: e.currency.clone(),
            amount: e.amount.clone(),
            entity: e.ledger_entity.clone(),
            period: e.accounting_period.clone(),
            closed_period,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
}

impl ChangeSet {
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    pub fn exposure(&self) -> Exposure {
        let mut x = Exposure::default();
        for c in &self.changes {
            x.add(c);
        }
        x
    }

    /// SHA-256 over the set's ids and fingerprints, in id order: what an approver approves.
    pub fn digest(&self) -> String {
        let mut lines: Vec<String> = self
            .changes
            .iter()
            .map(|c| format!("{} {}\n", c.envelope_id, c.fingerprint))
            .collect();
        lines.sort();
        sha256_hex(format!("recon-approval-set/v1\n{}", lines.concat()).as_bytes())
    }

    /// Each envelope id with the fingerprint it must still have.
    pub fn expected(&self) -> BTreeMap<String, String> {
        self.changes
            .iter()
            .map(|c| (c.envelope_id.clone(), c.fingerprint.clone()))
            .collect()
    }
}

/// What an approver approves: the action, the canary, the set (its ids and fingerprints), and
/// an edit's exact body.
pub fn request_digest(action: Action, canary: Option<&Canary>, set: &ChangeSet, edit: Option<&Edit>) -> String {
    let canary = canary.map_or_else(|| "none".to_owned(), |c| c.to_string());
    let edit = edit.map_or_else(String::new, |e| format!("\nedit {}", e.digest_text()));
    sha256_hex(format!("recon-approval/v2\n{action:?}\n{canary}\n{}{edit}", set.digest()).as_bytes())
}

/// The state of an envelope that an approval covers: anything a remediation or an operator
/// changes moves it (status and its history, replays, the failure, the economic fields, the
/// original's bytes).
pub fn fingerprint(e: &DlqEnvelope) -> String {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let last = e
        .status_history
        .last()
        .map(|c| c.at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        .unwrap_or_default();
    let text = [
        "recon-envelope-state/v1".to_owned(),
        e.envelope_id.clone(),
        e.status.as_str().to_owned(),
        e.status_history.len().to_string(),
        last,
        e.replays.len().to_string(),
        e.replay_generation.to_string(),
        e.failure_code.as_str().to_owned(),
        e.root_cause.clone(),
        e.source_hash.clone(),
        opt(&e.amount),
        opt(&e.currency),
        opt(&e.ledger_entity),
        opt(&e.accounting_period),
        opt(&e.value_date),
        e.original.body_sha256.clone(),
    ]
    .join("\n");
    sha256_hex(text.as_bytes())[..32].to_owned()
}
