//! The escalation chain for long-lived exceptions (the source document's fallback chain): after
//! how long a PENDING dead letter goes to whom. Written `4h:on-call,24h:finance-controller`;
//! stages in increasing age. Pure.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The default chain: the on-call after 4 hours, the finance controller after 24.
pub const DEFAULT_ESCALATION: &str = "4h:on-call,24h:finance-controller";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    /// Who is told: a name of 1-40 of a-z 0-9 - (an alarm's, a topic's).
    pub name: String,
    pub after_hours: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscalationChain {
    pub stages: Vec<Stage>,
}

impl EscalationChain {
    /// The stages an age has reached, in order (empty: none).
    pub fn reached(&self, age_secs: u64) -> impl Iterator<Item = &Stage> {
        self.stages
            .iter()
            .filter(move |s| age_secs >= u64::from(s.after_hours) * 3600)
    }

    /// The youngest age any stage escalates (none: nothing ever escalates).
    pub fn first_secs(&self) -> Option<u64> {
        self.stages.first().map(|s| u64::from(s.after_hours) * 3600)
    }
}

impl Default for EscalationChain {
    fn default() -> Self {
        DEFAULT_ESCALATION
            .parse()
            .unwrap_or(EscalationChain { stages: Vec::new() })
    }
}

impl FromStr for EscalationChain {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut stages: Vec<Stage> = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("`{part}`: a stage is HOURSh:NAME (4h:on-call), NAME 1-40 of a-z 0-9 -");
            let (hours, name) = part.split_once(':').ok_or_else(bad)?;
            let after_hours: u32 = hours
                .trim()
                .strip_suffix('h')
                .and_then(|h| h.parse().ok())
                .filter(|h| (1..=24 * 366).contains(h))
                .ok_or_else(bad)?;
            let name = name.trim();
            if name.is_empty()
                || name.len() > 40
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(bad());
            }
            if let Some(prev) = stages.last()
                && prev.after_hours >= after_hours
            {
                return Err(format!(
                    "`{part}`: stages go in increasing age ({}h before it)",
                    prev.after_hours
                ));
            }
            if stages.iter().any(|x| x.name == name) {
                return Err(format!("`{part}`: stage {name} named twice"));
            }
            stages.push(Stage {
                name: name.to_owned(),
                after_hours,
            });
        }
        Ok(EscalationChain { stages })
    }
}

impl fmt::Display for EscalationChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.stages.iter().enumerate() {
            write!(f, "{}{}h:{}", if i == 0 { "" } else { "," }, s.after_hours, s.name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_reads_in_increasing_age_and_says_which_stages_an_age_reached() {
        let c: EscalationChain = DEFAULT_ESCALATION.parse().unwrap();
        assert_eq!(c.to_string(), DEFAULT_ESCALATION);
        let reached = |secs| c.reached(secs).map(|s| s.name.as_str()).collect::<Vec<_>>();
        assert!(reached(4 * 3600 - 1).is_empty());
        assert_eq!(reached(4 * 3600), ["on-call"]);
        assert_eq!(reached(30 * 3600), ["on-call", "finance-controller"]);
        assert_eq!(c.first_secs(), Some(4 * 3600));
        assert_eq!(
            "".parse::<EscalationChain>().unwrap().first_secs(),
            None,
            "no chain: nothing escalates"
        );
        for bad in [
            "4:x",
            "h:x",
            "0h:x",
            "4h:",
            "4h:On-Call",
            "24h:a,4h:b",
            "4h:a,8h:a",
            "4h x",
        ] {
            assert!(bad.parse::<EscalationChain>().is_err(), "{bad}");
        }
    }
}
