//! The approval policy: which remediation needs a second person, judged on what it would move
//! ([`Exposure`]). A leaf of the domain (it knows amounts, nothing of envelopes or messages), so
//! the reference data that carries it depends on nothing above it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

use super::total::{Tally, Total};

/// Why a request cannot take a step, or an edit cannot be proposed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Hours a request waits for a decision, unless the policy says otherwise.
pub const DEFAULT_EXPIRE_HOURS: u32 = 72;

/// What a remediation would move: how many envelopes, their absolute amounts per currency (a
/// credit moves money as much as a debit), and how many belong to a closed period.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposure {
    pub count: u64,
    pub gross: Tally,
    pub closed_period: u64,
}

/// Which remediation needs a second person. Kept in the reference table, whose stream audits
/// every change to it; the default needs no approval for anything.
/// A field left out takes its value from [`ApprovalPolicy::default`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// A replay or quarantine that would change more envelopes than this.
    pub max_count: Option<u64>,
    /// … whose amounts in a currency add up (absolute values) to more than this.
    pub max_amount: BTreeMap<String, Total>,
    /// … that touches an envelope of a closed accounting period.
    pub closed_period: bool,
    /// Hours a request waits for a decision (and an approved one for its execution).
    pub expire_hours: u32,
    /// The approver must act in another role than the requester, whatever the session names
    /// (where callers choose their own session names; with IAM Identity Center the session name
    /// is the person, and the full ARNs differ between two people of one permission set).
    pub distinct_roles: bool,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        ApprovalPolicy {
            max_count: None,
            max_amount: BTreeMap::new(),
            closed_period: false,
            expire_hours: DEFAULT_EXPIRE_HOURS,
            distinct_roles: false,
        }
    }
}

impl ApprovalPolicy {
    /// Nothing needs approval.
    pub fn is_empty(&self) -> bool {
        self.max_count.is_none() && self.max_amount.is_empty() && !self.closed_period
    }

    /// Refuse what could not have been meant: no hours to decide, a negative threshold, a
    /// currency that is not upper-case letters and digits.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=24 * 90).contains(&self.expire_hours) {
            return Err(format!(
                "expire_hours {} is outside 1..=2160 (90 days)",
                self.expire_hours
            ));
        }
        for (currency, limit) in &self.max_amount {
            if currency.is_empty()
                || currency.len() > 12
                || !currency.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            {
                return Err(format!(
                    "max_amount currency `{currency}` must be 1-12 upper-case letters or digits"
                ));
            }
            if limit.is_negative() {
                return Err(format!("max_amount {currency} {limit} is negative"));
            }
        }
        Ok(())
    }

    /// Why a remediation of this exposure needs approval (empty: it does not).
    pub fn requires(&self, x: &Exposure) -> Vec<String> {
        let mut why = Vec::new();
        if let Some(max) = self.max_count
            && x.count > max
        {
            why.push(format!("{} envelopes would change (policy: more than {max})", x.count));
        }
        for (currency, limit) in &self.max_amount {
            let total = x.gross.get(currency);
            if x.gross.overflowed.contains(currency) || total.exceeds(limit) {
                why.push(format!("{currency} {total} would move (policy: more than {limit})"));
            }
        }
        if !self.max_amount.is_empty() && x.gross.without_amount > 0 {
            why.push(format!(
                "{} envelopes carry no readable amount (policy: amounts are limited)",
                x.gross.without_amount
            ));
        }
        if self.closed_period && x.closed_period > 0 {
            why.push(format!(
                "{} envelopes belong to a closed period (policy: always)",
                x.closed_period
            ));
        }
        why
    }
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "no remediation needs approval");
        }
        let mut rules = Vec::new();
        if let Some(max) = self.max_count {
            rules.push(format!("more than {max} envelopes"));
        }
        for (c, limit) in &self.max_amount {
            rules.push(format!("more than {c} {limit}"));
        }
        if self.closed_period {
            rules.push("any envelope of a closed period".into());
        }
        let by = if self.distinct_roles {
            "; the approver in another role than the requester"
        } else {
            ""
        };
        write!(
            f,
            "approval needed for {}; requests expire after {} h{by}",
            rules.join(", "),
            self.expire_hours
        )
    }
}
