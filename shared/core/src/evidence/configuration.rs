//! Configuration as an auditable event: each function records the settings that decide what it
//! does (by variable name), and when it starts with settings other than the last ones recorded for
//! it, a `CONFIG_CHANGED` record names every difference.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

use crate::domain::{AuditKind, AuditRecord};

/// The configuration last recorded for one function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigState {
    /// 1 for the first recorded configuration, then one more per change.
    pub version: u64,
    pub fingerprint: String,
    pub settings: BTreeMap<String, String>,
}

/// `sha256` over `name=value\n` per setting, in name order.
fn fingerprint(settings: &BTreeMap<String, String>) -> String {
    let mut h = Sha256::new();
    for (k, v) in settings {
        h.update(format!("{k}={v}\n").as_bytes());
    }
    hex::encode(h.finalize())
}

/// The record and the new state when `current` differs from what was last recorded (`None`: no
/// change). The record's id names the function, the new version and the new fingerprint, so cold
/// starts racing with the same settings write one record.
pub fn config_change(
    function: &str,
    previous: Option<&ConfigState>,
    current: &BTreeMap<String, String>,
    now: DateTime<Utc>,
) -> Option<(AuditRecord, ConfigState)> {
    let fp = fingerprint(current);
    if previous.is_some_and(|p| p.fingerprint == fp) {
        return None;
    }
    let version = previous.map_or(1, |p| p.version + 1);
    let detail = match previous {
        None => format!(
            "first recorded configuration of {function}: {}",
            current
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(p) => format!(
            "{function} started with a changed configuration (version {} -> {version}): {}",
            p.version,
            difference(&p.settings, current).join("; ")
        ),
    };
    // The previous fingerprint in the id too: a change back to earlier settings is a record of
    // its own even when the previous state was lost (read as version 0).
    let short = |f: &str| f.chars().take(16).collect::<String>();
    let prev = previous.map_or_else(|| "none".to_owned(), |p| short(&p.fingerprint));
    let subject = format!("{function}#{version}#{prev}#{}", short(&fp));
    let mut record = AuditRecord::system(AuditKind::ConfigChanged, &subject, now, function, detail);
    record.match_decision = Some(format!("config {fp}"));
    let state = ConfigState {
        version,
        fingerprint: fp,
        settings: current.clone(),
    };
    Some((record, state))
}

/// Every setting that differs: changed (`K: old -> new`), added (`K=new`, added) or removed.
fn difference(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in new {
        match old.get(k) {
            Some(o) if o == v => {}
            Some(o) => out.push(format!("{k}: {o} -> {v}")),
            None => out.push(format!("{k}={v} (added)")),
        }
    }
    for (k, o) in old {
        if !new.contains_key(k) {
            out.push(format!("{k} (was {o}) removed"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_first_start_and_every_change_are_recorded_and_a_restart_is_not() {
        let a = settings(&[("DLQ_MAX_ATTEMPTS", "5"), ("DLQ_AUDIT_TABLE", "t")]);
        let (first, s1) = config_change("consumer", None, &a, Utc::now()).unwrap();
        assert!(first.detail.contains("first recorded configuration"), "{first:?}");
        assert_eq!(s1.version, 1);
        assert!(
            config_change("consumer", Some(&s1), &a, Utc::now()).is_none(),
            "same settings"
        );
        let b = settings(&[("DLQ_MAX_ATTEMPTS", "8"), ("DLQ_SEAL_EVERY_RECORDS", "10")]);
        let (changed, s2) = config_change("consumer", Some(&s1), &b, Utc::now()).unwrap();
        assert_eq!(changed.kind, AuditKind::ConfigChanged);
        assert!(
            changed.detail.contains("DLQ_MAX_ATTEMPTS: 5 -> 8"),
            "{}",
            changed.detail
        );
        assert!(
            changed.detail.contains("DLQ_SEAL_EVERY_RECORDS=10 (added)"),
            "{}",
            changed.detail
        );
        assert!(
            changed.detail.contains("DLQ_AUDIT_TABLE (was t) removed"),
            "{}",
            changed.detail
        );
        assert_eq!(s2.version, 2);
        // Back to the first settings: a change again, with its own record.
        let (back, _) = config_change("consumer", Some(&s2), &a, Utc::now()).unwrap();
        assert_ne!(back.audit_id, first.audit_id);
    }
}
