//! Transactions posted by an approved edit (`domain::edit`): the producer sent one transaction,
//! the ledger holds its edited form. Its lineage links the edited copy to the message sent, so it
//! counts once; by amount, the manifest's line for it is taken as posted (each such substitution
//! listed in the reconciliation, next to the audit trail's `EDITED` record that explains it).

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::{Entry, State};
use crate::domain::money::parse_amount;
use crate::domain::{DlqEnvelope, EnvelopeStatus, Tally};

/// An edited transaction as the producer sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsSent {
    pub currency: Option<String>,
    pub amount: Option<Decimal>,
    /// The envelope the edit superseded.
    pub envelope_id: String,
    /// The accounting period as sent (an edit may move the value date): where a manifest, which
    /// says what was sent, has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

/// The original's labels when one of a lineage's envelopes was superseded by an edit (the
/// first dead-lettered: an edited copy dead-lettered and edited again is not what was sent).
pub(super) fn as_sent(envelopes: &[&DlqEnvelope], root: &str) -> Option<AsSent> {
    let superseded = || envelopes.iter().filter(|e| e.status == EnvelopeStatus::Superseded);
    superseded()
        .find(|e| e.original.source_message_id == root)
        .or_else(|| superseded().min_by_key(|e| e.dead_lettered_at))
        .map(|e| AsSent {
            currency: e.currency.clone(),
            amount: e.amount.as_deref().and_then(|a| parse_amount(a).ok()),
            envelope_id: e.envelope_id.clone(),
            period: e.accounting_period.clone(),
        })
}

/// `amount currency`, `-` for what is not known.
pub(super) fn show(currency: Option<&str>, amount: Option<Decimal>) -> String {
    format!(
        "{} {}",
        amount.map_or_else(|| "-".to_owned(), |a| a.to_string()),
        currency.unwrap_or("-")
    )
}

/// Each edited transaction: `key: as sent -> as posted (envelope)`.
pub(super) fn listed(outcomes: &[(State, Entry)]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|(_, e)| {
            let from = e.edited_from.as_ref()?;
            Some(format!(
                "{}: {} as sent -> {} as posted (envelope {} superseded by an approved edit)",
                e.key,
                show(from.currency.as_deref(), from.amount),
                show(e.currency.as_deref(), e.amount),
                from.envelope_id
            ))
        })
        .collect()
}

/// The manifest's total with each edited transaction's line (matched by key and by what was
/// sent) counted as it was posted.
pub(super) fn sent_as_posted(manifest: &[Entry], outcomes: &[(State, Entry)]) -> Tally {
    let mut edited: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for (_, e) in outcomes.iter().filter(|(_, e)| e.edited_from.is_some()) {
        edited.entry(e.key.as_str()).or_default().push(e);
    }
    let mut t = Tally::default();
    for line in manifest {
        let posted = edited.get_mut(line.key.as_str()).and_then(|cands| {
            let i = cands.iter().position(|e| {
                e.edited_from
                    .as_ref()
                    .is_some_and(|f| f.currency == line.currency && f.amount == line.amount)
            })?;
            Some(cands.swap_remove(i))
        });
        match posted {
            Some(e) => t.add_parts(e.currency.as_deref(), e.amount),
            None => t.add_parts(line.currency.as_deref(), line.amount),
        }
    }
    t
}
