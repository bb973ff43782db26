//! Runtime configuration from the environment, checked at start-up in one vocabulary.
//!
//! Every variable has one entry in [`VARIABLES`]: what it may hold (a [`Rule`]), its default,
//! what it means. A value outside its rule stops start-up with an error naming the variable, the
//! value and what is allowed; nothing is clamped. Every resource a function talks to is named by
//! its environment (the template sets each one; nothing is derived from the prefix, whose rule
//! a deployed stack need not follow). docs/configuration.md's table is this table.

use std::time::Duration;

use crate::decisions::retry::MAX_VISIBILITY_SECS;
use crate::decisions::{DEFAULT_MAX_ATTEMPTS, RetryPolicy};
use crate::resources::{self, Bucket};

pub mod vars {
    pub const STACK_PREFIX: &str = "DLQ_STACK_PREFIX";
    pub const CONSUMER_SENDERS: &str = "DLQ_CONSUMER_SENDERS";
    pub const REPLAY_SENDERS: &str = "DLQ_REPLAY_SENDERS";
    pub const MAIN_QUEUE_URL: &str = "DLQ_MAIN_QUEUE_URL";
    pub const DEAD_LETTER_QUEUE_URL: &str = "DLQ_DEAD_LETTER_QUEUE_URL";
    pub const PARKING_QUEUE_URL: &str = "DLQ_PARKING_QUEUE_URL";
    pub const LEDGER_TABLE: &str = "DLQ_LEDGER_TABLE";
    pub const REFERENCE_TABLE: &str = "DLQ_REFERENCE_TABLE";
    pub const AUDIT_TABLE: &str = "DLQ_AUDIT_TABLE";
    pub const MAX_ATTEMPTS: &str = "DLQ_MAX_ATTEMPTS";
    pub const BACKOFF_BASE_SECS: &str = "DLQ_BACKOFF_BASE_SECS";
    pub const BACKOFF_CAP_SECS: &str = "DLQ_BACKOFF_CAP_SECS";
    pub const ESCALATION: &str = "DLQ_ESCALATION";
    pub const PERIOD_CLOSE_WARNING_HOURS: &str = "DLQ_PERIOD_CLOSE_WARNING_HOURS";
    pub const SWEEP_CANARY: &str = "DLQ_SWEEP_CANARY";
    pub const DEADLINE_MARGIN_MS: &str = "DLQ_DEADLINE_MARGIN_MS";
    pub const BATCH_CONCURRENCY: &str = "DLQ_BATCH_CONCURRENCY";
    pub const REFERENCE_CACHE_SECS: &str = "DLQ_REFERENCE_CACHE_SECS";
    pub const ENVELOPE_TABLE: &str = "DLQ_ENVELOPE_TABLE";
    pub const QUARANTINE_BUCKET: &str = "DLQ_QUARANTINE_BUCKET";
    pub const QUARANTINE_BUCKET_OWNER: &str = "DLQ_QUARANTINE_BUCKET_OWNER";
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
    pub const LEDGER: &str = "DLQ_LEDGER";
    pub const POSTGRES_URL: &str = "DLQ_POSTGRES_URL";
    pub const POSTGRES_SECRET_ARN: &str = "DLQ_POSTGRES_SECRET_ARN";
    pub const POSTGRES_TLS: &str = "DLQ_POSTGRES_TLS";
    pub const POSTGRES_CA_FILE: &str = "DLQ_POSTGRES_CA_FILE";
    pub const HTTP_LEDGER_URL: &str = "DLQ_HTTP_LEDGER_URL";
    pub const HTTP_LEDGER_SECRET_ARN: &str = "DLQ_HTTP_LEDGER_SECRET_ARN";
    pub const DEDUP_TABLE: &str = "DLQ_DEDUP_TABLE";
    pub const OPERATOR_ROLES: &str = "DLQ_OPERATOR_ROLES";
    pub const DECISION_KEY: &str = "DLQ_DECISION_KEY";
    pub const CONSOLE_GROUPS: &str = "DLQ_CONSOLE_GROUPS";
    pub const CONSOLE_GROUPS_CLAIM: &str = "DLQ_CONSOLE_GROUPS_CLAIM";
    pub const CONSOLE_NAME_CLAIM: &str = "DLQ_CONSOLE_NAME_CLAIM";
    pub const CONSOLE_ISSUER: &str = "DLQ_CONSOLE_ISSUER";
    pub const CONSOLE_CLIENT_ID: &str = "DLQ_CONSOLE_CLIENT_ID";
    pub const CONSOLE_SIGN_IN_ORIGIN: &str = "DLQ_CONSOLE_SIGN_IN_ORIGIN";
}

mod ledger;
pub use ledger::{HttpLocation, LedgerSettings, PostgresLocation, PostgresTls};
pub mod needs;
mod rules;
pub use rules::{MAX_PREFIX_LEN, Rule, UNSET};
mod variables;
pub use variables::{VARIABLES, Variable, configuration_table};

/// The name-valued variables of a deployment with these names and queue URLs: what the template
/// sets, and what the local stack gives the functions.
pub fn environment(
    names: &resources::ResourceNames,
    main_queue_url: &str,
    dlq_url: &str,
    parked_url: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (vars::STACK_PREFIX, names.prefix.clone()),
        (vars::MAIN_QUEUE_URL, main_queue_url.to_owned()),
        (vars::DEAD_LETTER_QUEUE_URL, dlq_url.to_owned()),
        (vars::PARKING_QUEUE_URL, parked_url.to_owned()),
        (vars::LEDGER_TABLE, names.ledger_table.clone()),
        (vars::REFERENCE_TABLE, names.reference_table.clone()),
        (vars::AUDIT_TABLE, names.audit_table.clone()),
        (vars::ENVELOPE_TABLE, names.envelope_table.clone()),
        (vars::QUARANTINE_BUCKET, names.quarantine_bucket.clone()),
        (vars::QUARANTINE_BUCKET_OWNER, names.account.clone()),
        (vars::SWEEP_SCHEDULE, names.sweep_schedule.clone()),
        (vars::SEAL_SCHEDULE, names.seal_schedule.clone()),
        (vars::DEDUP_TABLE, names.dedup_table.clone()),
        (vars::OPERATOR_ROLES, operator_roles(&names.prefix)),
        (vars::DECISION_KEY, format!("alias/{}-decisions", names.prefix)),
        // LocalStack names every sender of the account by the account.
        (vars::CONSUMER_SENDERS, names.account.clone()),
        (vars::REPLAY_SENDERS, names.account.clone()),
    ]
}

/// Whom the functions believe `dlq.*` and `replay.*` attributes from.
fn trust<G: Fn(&str) -> Option<String>>(env: &Env<G>) -> Result<crate::domain::sqs::Trust, ConfigError> {
    Ok(crate::domain::sqs::Trust {
        dead_letters: env.parsed(vars::CONSUMER_SENDERS)?,
        replays: env.parsed(vars::REPLAY_SENDERS)?,
    })
}

/// The operator roles of a deployment: `<prefix>-<role>`, as the template names them.
pub fn operator_roles(prefix: &str) -> String {
    let pairs = crate::domain::operator::OperatorRole::ALL.map(|r| format!("{r}:{prefix}-{r}"));
    pairs.join(",")
}

/// The entry of `name` (every name the parsers read has one: a test checks it).
pub fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} is not set: {meaning}, {allowed}")]
    Missing {
        var: &'static str,
        meaning: &'static str,
        allowed: String,
    },
    #[error("{var}={value:?} is not valid; allowed: {allowed}")]
    Invalid {
        var: &'static str,
        value: String,
        allowed: String,
    },
    /// A variable the code reads but [`VARIABLES`] does not list (a bug, caught by the tests).
    #[error("{0} is read but not documented")]
    Undocumented(&'static str),
}

impl ConfigError {
    pub fn variable(&self) -> &'static str {
        match self {
            ConfigError::Missing { var, .. } | ConfigError::Invalid { var, .. } | ConfigError::Undocumented(var) => var,
        }
    }
}

/// `value` of `var`, or the error saying it is missing.
fn required(value: Option<String>, var: &'static str) -> Result<String, ConfigError> {
    let spec = variable(var).ok_or(ConfigError::Undocumented(var))?;
    value.ok_or_else(|| ConfigError::Missing {
        var,
        meaning: spec.meaning,
        allowed: spec.rule.allowed(),
    })
}

/// A settings lookup (the process environment, or a test's map) read through [`VARIABLES`],
/// remembering each value it gave (a default included): what [`Audited`] records.
struct Env<G> {
    get: G,
    read: std::cell::RefCell<Audited>,
}

impl<G: Fn(&str) -> Option<String>> Env<G> {
    fn new(get: G) -> Self {
        Env {
            get,
            read: Default::default(),
        }
    }

    /// `value` as the value of `var`, remembered.
    fn gave<T: ToString>(&self, var: &str, value: T) -> T {
        self.read.borrow_mut().insert(var.to_owned(), value.to_string());
        value
    }

    /// What was read, with the code's version: the configuration recorded in the audit trail.
    fn audited(&self) -> Audited {
        let mut read = self.read.borrow().clone();
        read.insert("code_version".into(), env!("CARGO_PKG_VERSION").into());
        read
    }

    fn spec(var: &'static str) -> Result<&'static Variable, ConfigError> {
        variable(var).ok_or(ConfigError::Undocumented(var))
    }

    /// The value set for `var`; blank counts as unset.
    fn raw(&self, var: &str) -> Option<String> {
        (self.get)(var).filter(|v| !v.trim().is_empty())
    }

    /// A required name, checked against its rule.
    fn name(&self, var: &'static str) -> Result<String, ConfigError> {
        let spec = Self::spec(var)?;
        let value = required(self.raw(var).or_else(|| spec.default.map(str::to_owned)), var)?;
        if spec.rule.admits(&value) {
            Ok(self.gave(var, value))
        } else {
            Err(ConfigError::Invalid {
                var,
                value,
                allowed: spec.rule.allowed(),
            })
        }
    }

    /// A required value read as a `T` (its rule is that it reads: the parse's own error names
    /// what is wrong).
    fn parsed<T: std::str::FromStr<Err = String>>(&self, var: &'static str) -> Result<T, ConfigError> {
        let value = self.name(var)?;
        value
            .parse()
            .map_err(|allowed| ConfigError::Invalid { var, value, allowed })
    }

    /// An optional name, checked against its rule when set.
    fn optional(&self, var: &'static str) -> Result<Option<String>, ConfigError> {
        Self::spec(var)?;
        self.raw(var).map(|_| self.name(var)).transpose()
    }

    /// A whole number within its rule; `default` when unset.
    fn whole<T: TryFrom<u64> + ToString>(&self, var: &'static str, default: T) -> Result<T, ConfigError> {
        let spec = Self::spec(var)?;
        let Some(value) = self.raw(var) else {
            return Ok(self.gave(var, default));
        };
        let invalid = || ConfigError::Invalid {
            var,
            value: value.clone(),
            allowed: spec.rule.allowed(),
        };
        let n = spec.rule.whole(value.trim()).ok_or_else(invalid)?;
        T::try_from(n).map(|n| self.gave(var, n)).map_err(|_| invalid())
    }
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
        Self::read(&Env::new(get))
    }

    fn read<G: Fn(&str) -> Option<String>>(env: &Env<G>) -> Result<Self, ConfigError> {
        let d = SealPolicy::default();
        Ok(SealPolicy {
            every_records: env.whole(vars::SEAL_EVERY_RECORDS, d.every_records)?,
            every_minutes: env.whole(vars::SEAL_EVERY_MINUTES, d.every_minutes)?,
        })
    }

    /// How long a record may stay unsealed: two intervals (one missed run is tolerated).
    pub fn max_unsealed(&self) -> chrono::Duration {
        chrono::Duration::minutes(2 * i64::from(self.every_minutes))
    }
}

impl Bucket {
    fn read<G: Fn(&str) -> Option<String>>(env: &Env<G>) -> Result<Self, ConfigError> {
        Ok(Bucket {
            name: env.name(vars::QUARANTINE_BUCKET)?,
            owner: env.name(vars::QUARANTINE_BUCKET_OWNER)?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSettings {
    pub main_queue_url: String,
    pub dead_letter_queue_url: String,
    pub ledger_table: String,
    /// The ledger the consumer commits to (the table above, or your own).
    pub ledger: LedgerSettings,
    pub reference_table: String,
    pub audit_table: String,
    pub retry: RetryPolicy,
    pub deadline_margin: Duration,
    pub concurrency: usize,
    pub reference_cache: Duration,
    /// The Object Lock bucket (the append path writes seals there).
    pub quarantine_bucket: Bucket,
    pub seal: SealPolicy,
    /// Whom it believes `replay.*` attributes from (and `dlq.*`, which it never reads).
    pub trust: crate::domain::sqs::Trust,
    pub audited: Audited,
}

impl ConsumerSettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// `get`: the process environment, or a test's map.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        let d = RetryPolicy::default();
        let retry = RetryPolicy {
            max_attempts: env.whole(vars::MAX_ATTEMPTS, DEFAULT_MAX_ATTEMPTS)?,
            backoff_base_secs: env.whole(vars::BACKOFF_BASE_SECS, d.backoff_base_secs)?,
            backoff_cap_secs: env.whole(vars::BACKOFF_CAP_SECS, d.backoff_cap_secs)?,
        };
        // The one rule between two variables: the cap is not below the base.
        if retry.backoff_cap_secs < retry.backoff_base_secs {
            return Err(ConfigError::Invalid {
                var: vars::BACKOFF_CAP_SECS,
                value: retry.backoff_cap_secs.to_string(),
                allowed: format!(
                    "{} ({}) to {MAX_VISIBILITY_SECS} seconds",
                    vars::BACKOFF_BASE_SECS,
                    retry.backoff_base_secs
                ),
            });
        }
        Ok(ConsumerSettings {
            main_queue_url: env.name(vars::MAIN_QUEUE_URL)?,
            dead_letter_queue_url: env.name(vars::DEAD_LETTER_QUEUE_URL)?,
            ledger_table: env.name(vars::LEDGER_TABLE)?,
            ledger: LedgerSettings::read(&env)?,
            reference_table: env.name(vars::REFERENCE_TABLE)?,
            audit_table: env.name(vars::AUDIT_TABLE)?,
            retry,
            deadline_margin: Duration::from_millis(env.whole(vars::DEADLINE_MARGIN_MS, 3000)?),
            concurrency: env.whole(vars::BATCH_CONCURRENCY, resources::DEFAULT_BATCH_CONCURRENCY)?,
            reference_cache: Duration::from_secs(env.whole(vars::REFERENCE_CACHE_SECS, 30)?),
            quarantine_bucket: Bucket::read(&env)?,
            seal: SealPolicy::read(&env)?,
            trust: trust(&env)?,
            audited: env.audited(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnricherSettings {
    pub envelope_table: String,
    pub audit_table: String,
    pub quarantine_bucket: Bucket,
    pub overflow_high_water: i64,
    pub metrics_namespace: String,
    /// The deployment's prefix (`DLQ_STACK_PREFIX`): a dimension of every metric.
    pub stack: String,
    pub concurrency: usize,
    pub deadline_margin: Duration,
    pub seal: SealPolicy,
    /// Whom it believes `dlq.*` and `replay.*` attributes from.
    pub trust: crate::domain::sqs::Trust,
    pub audited: Audited,
}

impl EnricherSettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(&Env::new(get))
    }

    fn read<G: Fn(&str) -> Option<String>>(env: &Env<G>) -> Result<Self, ConfigError> {
        Ok(EnricherSettings {
            envelope_table: env.name(vars::ENVELOPE_TABLE)?,
            audit_table: env.name(vars::AUDIT_TABLE)?,
            quarantine_bucket: Bucket::read(env)?,
            overflow_high_water: env.whole(vars::OVERFLOW_HIGH_WATER, resources::DEFAULT_OVERFLOW_HIGH_WATER)?,
            metrics_namespace: env.name(vars::METRICS_NAMESPACE)?,
            stack: env.name(vars::STACK_PREFIX)?,
            concurrency: env.whole(vars::BATCH_CONCURRENCY, resources::DEFAULT_BATCH_CONCURRENCY)?,
            deadline_margin: Duration::from_millis(env.whole(vars::DEADLINE_MARGIN_MS, 3000)?),
            seal: SealPolicy::read(env)?,
            trust: trust(env)?,
            audited: env.audited(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaySettings {
    pub main_queue_url: String,
    pub envelope_table: String,
    pub ledger_table: String,
    /// The ledger gate 2 asks: the one the consumer commits to.
    pub ledger: LedgerSettings,
    pub reference_table: String,
    pub audit_table: String,
    pub quarantine_bucket: Bucket,
    pub lease_secs: i64,
    pub max_replays: u32,
    pub window_days: i64,
    pub rate_per_sec: u32,
    pub main_queue_high_water: u64,
    pub page_size: usize,
    /// The schedule a scheduled event must name (`DLQ_SWEEP_SCHEDULE`).
    pub sweep_schedule: String,
    /// The schedule whose scheduled events only seal (`DLQ_SEAL_SCHEDULE`).
    pub seal_schedule: String,
    pub seal: SealPolicy,
    pub overflow_high_water: i64,
    pub metrics_namespace: String,
    pub stack: String,
    pub deadline_margin: Duration,
    /// The escalation chain the scheduled sweep measures the PENDING backlog against.
    pub escalation: crate::decisions::escalation::EscalationChain,
    /// Hours before an open period's planned close that its PENDING dead letters escalate.
    pub period_close_warning_hours: u32,
    /// The scheduled sweep's canary slice per group (0: none).
    pub sweep_canary: u32,
    pub audited: Audited,
}

impl ReplaySettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(&Env::new(get))
    }

    fn read<G: Fn(&str) -> Option<String>>(env: &Env<G>) -> Result<Self, ConfigError> {
        Ok(ReplaySettings {
            main_queue_url: env.name(vars::MAIN_QUEUE_URL)?,
            envelope_table: env.name(vars::ENVELOPE_TABLE)?,
            ledger_table: env.name(vars::LEDGER_TABLE)?,
            ledger: LedgerSettings::read(env)?,
            reference_table: env.name(vars::REFERENCE_TABLE)?,
            audit_table: env.name(vars::AUDIT_TABLE)?,
            quarantine_bucket: Bucket::read(env)?,
            lease_secs: env.whole(vars::REPLAY_LEASE_SECS, 300)?,
            max_replays: env.whole(vars::REPLAY_MAX_PER_ENVELOPE, 3)?,
            window_days: env.whole(vars::REPLAY_WINDOW_DAYS, 90)?,
            rate_per_sec: env.whole(vars::REPLAY_RATE_PER_SEC, 50)?,
            main_queue_high_water: env.whole(vars::REPLAY_QUEUE_HIGH_WATER, 10_000)?,
            page_size: env.whole(vars::REPLAY_PAGE_SIZE, 100)?,
            sweep_schedule: env.name(vars::SWEEP_SCHEDULE)?,
            seal_schedule: env.name(vars::SEAL_SCHEDULE)?,
            seal: SealPolicy::read(env)?,
            overflow_high_water: env.whole(vars::OVERFLOW_HIGH_WATER, resources::DEFAULT_OVERFLOW_HIGH_WATER)?,
            metrics_namespace: env.name(vars::METRICS_NAMESPACE)?,
            stack: env.name(vars::STACK_PREFIX)?,
            deadline_margin: Duration::from_millis(env.whole(vars::DEADLINE_MARGIN_MS, 5000)?),
            escalation: env
                .name(vars::ESCALATION)?
                .parse()
                .map_err(|why| ConfigError::Invalid {
                    var: vars::ESCALATION,
                    value: String::new(),
                    allowed: why,
                })?,
            period_close_warning_hours: env.whole(vars::PERIOD_CLOSE_WARNING_HOURS, 48)?,
            sweep_canary: env.whole(vars::SWEEP_CANARY, 0)?,
            audited: env.audited(),
        })
    }
}

/// The control plane: the replay's settings (it runs the replay engine for its callers) and the
/// IAM names of the operator roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlSettings {
    pub replay: ReplaySettings,
    /// The DLQ and the queue behind it, whose depths a reconciliation waits on.
    pub dead_letter_queue_url: String,
    pub parking_queue_url: String,
    pub roles: crate::domain::operator::RoleNames,
    /// Who a console sign-in is (`DLQ_CONSOLE_GROUPS`; unset: no console sign-in is answered).
    pub console: Option<crate::domain::console::ConsoleSignIn>,
    /// How the console's page signs a person in, where the control plane serves it
    /// (`DLQ_CONSOLE_ISSUER`; unset: it serves no page).
    pub console_page: Option<crate::domain::console::OidcSignIn>,
    /// The KMS HMAC key the control plane seals its decisions with.
    pub decision_key: String,
    pub audited: Audited,
}

impl ControlSettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        Ok(ControlSettings {
            replay: ReplaySettings::read(&env)?,
            dead_letter_queue_url: env.name(vars::DEAD_LETTER_QUEUE_URL)?,
            parking_queue_url: env.name(vars::PARKING_QUEUE_URL)?,
            roles: env.parsed(vars::OPERATOR_ROLES)?,
            console: console_sign_in(&env)?,
            console_page: console_page(&env)?,
            decision_key: env.name(vars::DECISION_KEY)?,
            audited: env.audited(),
        })
    }
}

/// The console page's sign-in, when `DLQ_CONSOLE_ISSUER` names the identity provider (its client
/// id then required).
fn console_page<G: Fn(&str) -> Option<String>>(
    env: &Env<G>,
) -> Result<Option<crate::domain::console::OidcSignIn>, ConfigError> {
    // Each read (and checked) whether or not the page is served: a mistyped one fails the start.
    let issuer = env.optional(vars::CONSOLE_ISSUER)?;
    let client_id = env.optional(vars::CONSOLE_CLIENT_ID)?;
    let sign_in_origin = env.optional(vars::CONSOLE_SIGN_IN_ORIGIN)?;
    let Some(issuer) = issuer else {
        return Ok(None);
    };
    Ok(Some(crate::domain::console::OidcSignIn {
        issuer,
        client_id: required(client_id, vars::CONSOLE_CLIENT_ID)?,
        sign_in_origin,
    }))
}

/// The console's sign-in, when `DLQ_CONSOLE_GROUPS` maps a group to a role.
fn console_sign_in<G: Fn(&str) -> Option<String>>(
    env: &Env<G>,
) -> Result<Option<crate::domain::console::ConsoleSignIn>, ConfigError> {
    // Read (and checked) whether or not the console is on: a mistyped claim fails the start.
    let groups_claim = env.name(vars::CONSOLE_GROUPS_CLAIM)?;
    let name_claim = env.name(vars::CONSOLE_NAME_CLAIM)?;
    let Some(groups) = env.optional(vars::CONSOLE_GROUPS)? else {
        return Ok(None);
    };
    let groups = groups.parse().map_err(|allowed| ConfigError::Invalid {
        var: vars::CONSOLE_GROUPS,
        value: groups,
        allowed,
    })?;
    Ok(Some(crate::domain::console::ConsoleSignIn {
        groups,
        groups_claim,
        name_claim,
    }))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReferenceAuditSettings {
    pub reference_table: String,
    pub audit_table: String,
    pub quarantine_bucket: Bucket,
    pub seal: SealPolicy,
    pub audited: Audited,
}

impl ReferenceAuditSettings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env::new(get);
        Ok(ReferenceAuditSettings {
            reference_table: env.name(vars::REFERENCE_TABLE)?,
            audit_table: env.name(vars::AUDIT_TABLE)?,
            quarantine_bucket: Bucket::read(&env)?,
            seal: SealPolicy::read(&env)?,
            audited: env.audited(),
        })
    }
}

/// Every variable a function read, by name, as it read it (a default included), and the code's
/// version: the configuration recorded in the audit trail (there are no secrets among them).
pub type Audited = std::collections::BTreeMap<String, String>;

#[cfg(test)]
mod tests;
