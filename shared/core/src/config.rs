//! Runtime configuration from the environment, validated at start-up with errors that say which
//! variable is wrong and what it should be. Every variable is documented in the README.

use std::time::Duration;

use crate::decisions::{DEFAULT_MAX_ATTEMPTS, PolicyError, RetryPolicy};
use crate::resources::{self, ResourceNames};

pub mod vars {
    pub const STACK_PREFIX: &str = "DLQ_STACK_PREFIX";
    pub const MAIN_QUEUE_URL: &str = "DLQ_MAIN_QUEUE_URL";
    pub const DEAD_LETTER_QUEUE_URL: &str = "DLQ_DEAD_LETTER_QUEUE_URL";
    pub const LEDGER_TABLE: &str = "DLQ_LEDGER_TABLE";
    pub const REFERENCE_TABLE: &str = "DLQ_REFERENCE_TABLE";
    pub const AUDIT_TABLE: &str = "DLQ_AUDIT_TABLE";
    pub const MAX_ATTEMPTS: &str = "DLQ_MAX_ATTEMPTS";
    pub const BACKOFF_BASE_SECS: &str = "DLQ_BACKOFF_BASE_SECS";
    pub const BACKOFF_CAP_SECS: &str = "DLQ_BACKOFF_CAP_SECS";
    pub const DEADLINE_MARGIN_MS: &str = "DLQ_DEADLINE_MARGIN_MS";
    pub const BATCH_CONCURRENCY: &str = "DLQ_BATCH_CONCURRENCY";
    pub const REFERENCE_CACHE_SECS: &str = "DLQ_REFERENCE_CACHE_SECS";
    pub const ENVELOPE_TABLE: &str = "DLQ_ENVELOPE_TABLE";
    pub const QUARANTINE_BUCKET: &str = "DLQ_QUARANTINE_BUCKET";
    pub const OVERFLOW_HIGH_WATER: &str = "DLQ_OVERFLOW_HIGH_WATER";
    pub const METRICS_NAMESPACE: &str = "DLQ_METRICS_NAMESPACE";
    pub const REPLAY_LEASE_SECS: &str = "DLQ_REPLAY_LEASE_SECS";
    pub const REPLAY_MAX_PER_ENVELOPE: &str = "DLQ_REPLAY_MAX_PER_ENVELOPE";
    pub const REPLAY_WINDOW_DAYS: &str = "DLQ_REPLAY_WINDOW_DAYS";
    pub const REPLAY_RATE_PER_SEC: &str = "DLQ_REPLAY_RATE_PER_SEC";
    pub const REPLAY_QUEUE_HIGH_WATER: &str = "DLQ_REPLAY_QUEUE_HIGH_WATER";
    pub const REPLAY_PAGE_SIZE: &str = "DLQ_REPLAY_PAGE_SIZE";
    pub const SWEEP_SCHEDULE: &str = "DLQ_SWEEP_SCHEDULE";
    pub const SEAL_EVERY_RECORDS: &str = "DLQ_SEAL_EVERY_RECORDS";
    pub const SEAL_EVERY_MINUTES: &str = "DLQ_SEAL_EVERY_MINUTES";
    pub const SEAL_SCHEDULE: &str = "DLQ_SEAL_SCHEDULE";
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} is not set: {hint}")]
    Missing { var: &'static str, hint: &'static str },
    #[error("{var}={value:?} is not valid: {hint}")]
    Invalid {
        var: &'static str,
        value: String,
        hint: String,
    },
}

/// How often the audit chains are sealed whatever the sweep does: on the append path, whenever a
/// chain reaches a multiple of `every_records`; and by the seal schedule, every `every_minutes`.
/// Verification calls sealing stopped when a record has waited more than twice the interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealPolicy {
    pub every_records: u64,
    pub every_minutes: u32,
}

impl Default for SealPolicy {
    fn default() -> Self {
        SealPolicy {
            every_records: 500,
            every_minutes: 15,
        }
    }
}

impl SealPolicy {
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let d = SealPolicy::default();
        Ok(SealPolicy {
            every_records: ranged(
                get,
                vars::SEAL_EVERY_RECORDS,
                d.every_records,
                1..=100_000,
                "records per chain between seals, 1-100000",
            )?,
            every_minutes: ranged(
                get,
                vars::SEAL_EVERY_MINUTES,
                d.every_minutes,
                2..=1440,
                "minutes between scheduled seals, 2-1440",
            )?,
        })
    }

    /// How long a record may stay unsealed: two intervals (one missed run is tolerated).
    pub fn max_unsealed(&self) -> chrono::Duration {
        chrono::Duration::minutes(2 * i64::from(self.every_minutes))
    }
}

/// Everything the consumer needs to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSettings {
    pub main_queue_url: String,
    pub dead_letter_queue_url: String,
    pub ledger_table: String,
    pub reference_table: String,
    pub audit_table: String,
    pub retry: RetryPolicy,
    pub deadline_margin: Duration,
    pub concurrency: usize,
    pub reference_cache: Duration,
    /// The Object Lock bucket (the append path writes seals there).
    pub quarantine_bucket: String,
    pub seal: SealPolicy,
}

fn number<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    default: T,
    hint: &str,
) -> Result<T, ConfigError> {
    match get(var).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
            var,
            value: v,
            hint: hint.to_owned(),
        }),
    }
}

/// [`number`], refused outside `range` (never silently clamped: a value that was not meant is a
/// deployment mistake to hear about).
fn ranged<T>(
    get: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    default: T,
    range: std::ops::RangeInclusive<T>,
    hint: &str,
) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let v = number(get, var, default, hint)?;
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(ConfigError::Invalid {
            var,
            value: v.to_string(),
            hint: hint.to_owned(),
        })
    }
}

impl ConsumerSettings {
    /// Read the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read settings through `get` (the environment, or a map in tests). Queue URLs are
    /// required; table names default to the names derived from `DLQ_STACK_PREFIX`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let names = ResourceNames::with_prefix(
            &get(vars::STACK_PREFIX).unwrap_or_else(|| resources::DEFAULT_PREFIX.to_owned()),
        );
        let required = |var: &'static str, hint: &'static str| {
            get(var)
                .filter(|v| !v.trim().is_empty())
                .ok_or(ConfigError::Missing { var, hint })
        };
        let retry = RetryPolicy {
            max_attempts: number(
                &get,
                vars::MAX_ATTEMPTS,
                DEFAULT_MAX_ATTEMPTS,
                "a whole number of receives, 1-1000",
            )?,
            backoff_base_secs: number(
                &get,
                vars::BACKOFF_BASE_SECS,
                RetryPolicy::default().backoff_base_secs,
                "whole seconds",
            )?,
            backoff_cap_secs: number(
                &get,
                vars::BACKOFF_CAP_SECS,
                RetryPolicy::default().backoff_cap_secs,
                "whole seconds",
            )?,
        };
        retry.validate().map_err(|e| {
            let (var, value) = match e {
                PolicyError::MaxAttempts(v) => (vars::MAX_ATTEMPTS, v),
                PolicyError::Base(v) => (vars::BACKOFF_BASE_SECS, v),
                PolicyError::Cap { cap, .. } => (vars::BACKOFF_CAP_SECS, cap),
            };
            ConfigError::Invalid {
                var,
                value: value.to_string(),
                hint: e.to_string(),
            }
        })?;
        let concurrency = ranged(&get, vars::BATCH_CONCURRENCY, 8usize, 1..=100, "a whole number 1-100")?;
        Ok(ConsumerSettings {
            main_queue_url: required(vars::MAIN_QUEUE_URL, "the URL of the main queue the consumer reads")?,
            dead_letter_queue_url: required(vars::DEAD_LETTER_QUEUE_URL, "the URL of the DLQ the consumer writes")?,
            ledger_table: get(vars::LEDGER_TABLE).unwrap_or(names.ledger_table),
            reference_table: get(vars::REFERENCE_TABLE).unwrap_or(names.reference_table),
            audit_table: get(vars::AUDIT_TABLE).unwrap_or(names.audit_table),
            retry,
            deadline_margin: Duration::from_millis(number(&get, vars::DEADLINE_MARGIN_MS, 3000, "milliseconds")?),
            concurrency,
            reference_cache: Duration::from_secs(number(&get, vars::REFERENCE_CACHE_SECS, 30, "whole seconds")?),
            quarantine_bucket: get(vars::QUARANTINE_BUCKET).unwrap_or(names.quarantine_bucket),
            seal: SealPolicy::from_lookup(&get)?,
        })
    }
}

/// Everything the enricher needs to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnricherSettings {
    pub envelope_table: String,
    pub audit_table: String,
    pub quarantine_bucket: String,
    pub overflow_high_water: i64,
    pub metrics_namespace: String,
    /// The deployment's prefix (`DLQ_STACK_PREFIX`): a dimension of every metric.
    pub stack: String,
    pub concurrency: usize,
    pub deadline_margin: Duration,
    pub seal: SealPolicy,
}

impl EnricherSettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Names default to those derived from `DLQ_STACK_PREFIX`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let names = ResourceNames::with_prefix(
            &get(vars::STACK_PREFIX).unwrap_or_else(|| resources::DEFAULT_PREFIX.to_owned()),
        );
        let high_water = ranged(
            &get,
            vars::OVERFLOW_HIGH_WATER,
            resources::DEFAULT_OVERFLOW_HIGH_WATER,
            0..=i64::MAX,
            "a whole number of PENDING envelopes, 0 or more",
        )?;
        Ok(EnricherSettings {
            envelope_table: get(vars::ENVELOPE_TABLE).unwrap_or(names.envelope_table),
            audit_table: get(vars::AUDIT_TABLE).unwrap_or(names.audit_table),
            quarantine_bucket: get(vars::QUARANTINE_BUCKET).unwrap_or(names.quarantine_bucket),
            overflow_high_water: high_water,
            metrics_namespace: get(vars::METRICS_NAMESPACE)
                .unwrap_or_else(|| resources::DEFAULT_METRICS_NAMESPACE.to_owned()),
            stack: get(vars::STACK_PREFIX).unwrap_or_else(|| resources::DEFAULT_PREFIX.to_owned()),
            concurrency: ranged(&get, vars::BATCH_CONCURRENCY, 8usize, 1..=100, "a whole number 1-100")?,
            deadline_margin: Duration::from_millis(number(&get, vars::DEADLINE_MARGIN_MS, 3000, "milliseconds")?),
            seal: SealPolicy::from_lookup(&get)?,
        })
    }
}

/// Everything the replay needs to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaySettings {
    pub main_queue_url: String,
    pub envelope_table: String,
    pub ledger_table: String,
    pub reference_table: String,
    pub audit_table: String,
    pub quarantine_bucket: String,
    pub lease_secs: i64,
    pub max_replays: u32,
    pub window_days: i64,
    pub rate_per_sec: u32,
    pub main_queue_high_water: u64,
    pub page_size: usize,
    /// The schedule a scheduled event must name (`DLQ_SWEEP_SCHEDULE`, default from the prefix).
    pub sweep_schedule: String,
    /// The schedule whose scheduled events only seal (`DLQ_SEAL_SCHEDULE`, default from the prefix).
    pub seal_schedule: String,
    pub seal: SealPolicy,
    pub overflow_high_water: i64,
    pub metrics_namespace: String,
    pub stack: String,
    pub deadline_margin: Duration,
}

impl ReplaySettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let names = ResourceNames::with_prefix(
            &get(vars::STACK_PREFIX).unwrap_or_else(|| resources::DEFAULT_PREFIX.to_owned()),
        );
        let enricher = EnricherSettings::from_lookup(&get)?;
        let page_size = ranged(
            &get,
            vars::REPLAY_PAGE_SIZE,
            100usize,
            1..=1000,
            "envelopes per page, 1-1000",
        )?;
        Ok(ReplaySettings {
            main_queue_url: get(vars::MAIN_QUEUE_URL)
                .filter(|v| !v.trim().is_empty())
                .ok_or(ConfigError::Missing {
                    var: vars::MAIN_QUEUE_URL,
                    hint: "the URL of the main queue replays re-inject into",
                })?,
            envelope_table: enricher.envelope_table,
            ledger_table: get(vars::LEDGER_TABLE).unwrap_or(names.ledger_table),
            reference_table: get(vars::REFERENCE_TABLE).unwrap_or(names.reference_table),
            audit_table: enricher.audit_table,
            quarantine_bucket: enricher.quarantine_bucket,
            lease_secs: ranged(&get, vars::REPLAY_LEASE_SECS, 300, 1..=86_400, "whole seconds, 1-86400")?,
            max_replays: number(&get, vars::REPLAY_MAX_PER_ENVELOPE, 3, "a whole number of replays")?,
            window_days: ranged(&get, vars::REPLAY_WINDOW_DAYS, 90, 1..=3650, "whole days, 1-3650")?,
            rate_per_sec: number(
                &get,
                vars::REPLAY_RATE_PER_SEC,
                50,
                "messages per second, 0 for no limit",
            )?,
            main_queue_high_water: number(
                &get,
                vars::REPLAY_QUEUE_HIGH_WATER,
                10_000,
                "a number of visible messages",
            )?,
            page_size,
            sweep_schedule: get(vars::SWEEP_SCHEDULE)
                .filter(|v| !v.trim().is_empty())
                .unwrap_or(names.sweep_schedule),
            seal_schedule: get(vars::SEAL_SCHEDULE)
                .filter(|v| !v.trim().is_empty())
                .unwrap_or(names.seal_schedule),
            seal: enricher.seal,
            overflow_high_water: enricher.overflow_high_water,
            metrics_namespace: enricher.metrics_namespace,
            stack: enricher.stack,
            deadline_margin: Duration::from_millis(number(&get, vars::DEADLINE_MARGIN_MS, 5000, "milliseconds")?),
        })
    }
}

/// Everything the reference-audit function needs to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceAuditSettings {
    pub reference_table: String,
    pub audit_table: String,
    pub quarantine_bucket: String,
    pub seal: SealPolicy,
}

impl ReferenceAuditSettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let names = ResourceNames::with_prefix(
            &get(vars::STACK_PREFIX).unwrap_or_else(|| resources::DEFAULT_PREFIX.to_owned()),
        );
        Ok(ReferenceAuditSettings {
            reference_table: get(vars::REFERENCE_TABLE).unwrap_or(names.reference_table),
            audit_table: get(vars::AUDIT_TABLE).unwrap_or(names.audit_table),
            quarantine_bucket: get(vars::QUARANTINE_BUCKET).unwrap_or(names.quarantine_bucket),
            seal: SealPolicy::from_lookup(&get)?,
        })
    }

    pub fn audited(&self) -> Audited {
        let mut pairs = vec![
            (vars::REFERENCE_TABLE, self.reference_table.clone()),
            (vars::AUDIT_TABLE, self.audit_table.clone()),
            (vars::QUARANTINE_BUCKET, self.quarantine_bucket.clone()),
        ];
        pairs.extend(self.seal.audited());
        audited(&pairs)
    }
}

/// The settings that decide what a function does, by variable name (the configuration recorded
/// in the audit trail; there are no secrets among them).
type Audited = std::collections::BTreeMap<String, String>;

fn audited(pairs: &[(&str, String)]) -> Audited {
    let mut map: Audited = pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    map.insert("code_version".into(), env!("CARGO_PKG_VERSION").into());
    map
}

impl SealPolicy {
    fn audited(&self) -> [(&'static str, String); 2] {
        [
            (vars::SEAL_EVERY_RECORDS, self.every_records.to_string()),
            (vars::SEAL_EVERY_MINUTES, self.every_minutes.to_string()),
        ]
    }
}

impl ConsumerSettings {
    pub fn audited(&self) -> Audited {
        let mut pairs = vec![
            (vars::MAIN_QUEUE_URL, self.main_queue_url.clone()),
            (vars::DEAD_LETTER_QUEUE_URL, self.dead_letter_queue_url.clone()),
            (vars::LEDGER_TABLE, self.ledger_table.clone()),
            (vars::REFERENCE_TABLE, self.reference_table.clone()),
            (vars::AUDIT_TABLE, self.audit_table.clone()),
            (vars::QUARANTINE_BUCKET, self.quarantine_bucket.clone()),
            (vars::MAX_ATTEMPTS, self.retry.max_attempts.to_string()),
            (vars::BACKOFF_BASE_SECS, self.retry.backoff_base_secs.to_string()),
            (vars::BACKOFF_CAP_SECS, self.retry.backoff_cap_secs.to_string()),
            (vars::DEADLINE_MARGIN_MS, self.deadline_margin.as_millis().to_string()),
            (vars::BATCH_CONCURRENCY, self.concurrency.to_string()),
            (vars::REFERENCE_CACHE_SECS, self.reference_cache.as_secs().to_string()),
        ];
        pairs.extend(self.seal.audited());
        audited(&pairs)
    }
}

impl EnricherSettings {
    pub fn audited(&self) -> Audited {
        let mut pairs = vec![
            (vars::ENVELOPE_TABLE, self.envelope_table.clone()),
            (vars::AUDIT_TABLE, self.audit_table.clone()),
            (vars::QUARANTINE_BUCKET, self.quarantine_bucket.clone()),
            (vars::OVERFLOW_HIGH_WATER, self.overflow_high_water.to_string()),
            (vars::METRICS_NAMESPACE, self.metrics_namespace.clone()),
            (vars::STACK_PREFIX, self.stack.clone()),
            (vars::BATCH_CONCURRENCY, self.concurrency.to_string()),
            (vars::DEADLINE_MARGIN_MS, self.deadline_margin.as_millis().to_string()),
        ];
        pairs.extend(self.seal.audited());
        audited(&pairs)
    }
}

impl ReplaySettings {
    pub fn audited(&self) -> Audited {
        let mut pairs = vec![
            (vars::MAIN_QUEUE_URL, self.main_queue_url.clone()),
            (vars::ENVELOPE_TABLE, self.envelope_table.clone()),
            (vars::LEDGER_TABLE, self.ledger_table.clone()),
            (vars::REFERENCE_TABLE, self.reference_table.clone()),
            (vars::AUDIT_TABLE, self.audit_table.clone()),
            (vars::QUARANTINE_BUCKET, self.quarantine_bucket.clone()),
            (vars::REPLAY_LEASE_SECS, self.lease_secs.to_string()),
            (vars::REPLAY_MAX_PER_ENVELOPE, self.max_replays.to_string()),
            (vars::REPLAY_WINDOW_DAYS, self.window_days.to_string()),
            (vars::REPLAY_RATE_PER_SEC, self.rate_per_sec.to_string()),
            (vars::REPLAY_QUEUE_HIGH_WATER, self.main_queue_high_water.to_string()),
            (vars::REPLAY_PAGE_SIZE, self.page_size.to_string()),
            (vars::SWEEP_SCHEDULE, self.sweep_schedule.clone()),
            (vars::SEAL_SCHEDULE, self.seal_schedule.clone()),
            (vars::OVERFLOW_HIGH_WATER, self.overflow_high_water.to_string()),
            (vars::METRICS_NAMESPACE, self.metrics_namespace.clone()),
            (vars::STACK_PREFIX, self.stack.clone()),
            (vars::DEADLINE_MARGIN_MS, self.deadline_margin.as_millis().to_string()),
        ];
        pairs.extend(self.seal.audited());
        audited(&pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_and_queue_urls_are_required() {
        let err = ConsumerSettings::from_lookup(lookup(&[])).unwrap_err();
        assert_eq!(
            err,
            ConfigError::Missing {
                var: vars::MAIN_QUEUE_URL,
                hint: "the URL of the main queue the consumer reads"
            }
        );
        let s = ConsumerSettings::from_lookup(lookup(&[
            (vars::MAIN_QUEUE_URL, "q"),
            (vars::DEAD_LETTER_QUEUE_URL, "d"),
        ]))
        .unwrap();
        assert_eq!(s.ledger_table, "recon-dlq-ledger");
        assert_eq!(s.retry, RetryPolicy::default());
    }

    #[test]
    fn enricher_settings_default_from_the_prefix_and_refuse_a_negative_mark() {
        let s = EnricherSettings::from_lookup(lookup(&[(vars::STACK_PREFIX, "acme")])).unwrap();
        assert_eq!(s.envelope_table, "acme-envelopes");
        assert_eq!(s.quarantine_bucket, "acme-quarantine");
        assert_eq!(s.overflow_high_water, resources::DEFAULT_OVERFLOW_HIGH_WATER);
        assert!(EnricherSettings::from_lookup(lookup(&[(vars::OVERFLOW_HIGH_WATER, "-1")])).is_err());
    }

    #[test]
    fn bad_numbers_name_the_variable() {
        let err = ConsumerSettings::from_lookup(lookup(&[
            (vars::MAIN_QUEUE_URL, "q"),
            (vars::DEAD_LETTER_QUEUE_URL, "d"),
            (vars::MAX_ATTEMPTS, "five"),
        ]))
        .unwrap_err();
        assert!(
            err.to_string().starts_with("DLQ_MAX_ATTEMPTS=\"five\" is not valid"),
            "{err}"
        );
        let err = ConsumerSettings::from_lookup(lookup(&[
            (vars::MAIN_QUEUE_URL, "q"),
            (vars::DEAD_LETTER_QUEUE_URL, "d"),
            (vars::BACKOFF_CAP_SECS, "99999"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("43200"), "{err}");
    }
}
