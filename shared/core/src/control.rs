//! The control plane: the one authority for every state-changing operator action. It is asked as
//! a [`Caller`] AWS verified (the principal of the request's context, never a field of the
//! payload), allows each [`Operation`] to the roles `domain::operator` names, and refuses the rest
//! with the role needed; a refusal is audited (`ACCESS_REFUSED`) and changes nothing.
//!
//! On AWS it is a function behind an HTTP API with IAM authorization; locally the same handler
//! runs in-process, given the identity the request context would carry.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::domain::approval::{ApprovalPolicy, Refused, RequestStatus};
use crate::domain::input;
use crate::domain::operator::{Caller, Operation, OperatorRole};
use crate::domain::reference::{CurrencyMapping, PeriodRecord, PeriodStatus};
use crate::domain::{AuditKind, AuditRecord};
use crate::ports::{AuditLog, FlowError, ReferenceData};
use crate::replay::{ReplayPorts, Replayer};

/// What a caller asks: `{"operation": "...", ...}`. Unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "operation", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Command {
    Whoami,
    SetPolicy {
        policy: ApprovalPolicy,
    },
    ClosePeriod {
        entity: String,
        period: String,
    },
    OpenPeriod {
        entity: String,
        period: String,
    },
    SchedulePeriodClose {
        entity: String,
        period: String,
        closes_on: NaiveDate,
    },
    PutCurrency {
        code: String,
        minor_units: u32,
        #[serde(default)]
        description: String,
    },
    Approve {
        request_id: String,
        #[serde(default)]
        reason: String,
    },
    Reject {
        request_id: String,
        reason: String,
    },
}

impl Command {
    pub fn operation(&self) -> Operation {
        match self {
            Command::Whoami => Operation::Whoami,
            Command::SetPolicy { .. } => Operation::SetPolicy,
            Command::ClosePeriod { .. } => Operation::ClosePeriod,
            Command::OpenPeriod { .. } => Operation::OpenPeriod,
            Command::SchedulePeriodClose { .. } => Operation::SchedulePeriodClose,
            Command::PutCurrency { .. } => Operation::PutCurrency,
            Command::Approve { .. } => Operation::Approve,
            Command::Reject { .. } => Operation::Reject,
        }
    }
}

/// Why the control plane did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The caller may not (their role), or the state refuses it (self-approval, a closed
    /// period): audited, nothing changed.
    #[error("refused: {0}")]
    Refused(Refused),
    /// The request itself is malformed (a field out of its rule).
    #[error("invalid: {0}")]
    Invalid(String),
    /// A store failed: nothing is known to have changed; the caller may ask again.
    #[error(transparent)]
    Flow(FlowError),
}

impl From<FlowError> for ControlError {
    fn from(e: FlowError) -> Self {
        match e {
            FlowError::Refused(r) => ControlError::Refused(r),
            other => ControlError::Flow(other),
        }
    }
}

impl From<crate::ports::StoreError> for ControlError {
    fn from(e: crate::ports::StoreError) -> Self {
        ControlError::Flow(e.into())
    }
}

/// Who asks, in which request.
struct Asked<'a> {
    caller: &'a Caller,
    request_id: &'a str,
}

/// The control plane over the replay's ports (the requests live with the envelopes, the policy,
/// periods and currencies in the reference data).
pub struct ControlPlane<P: ReplayPorts> {
    pub replayer: Replayer<P>,
}

impl<P: ReplayPorts> ControlPlane<P> {
    /// Do what `caller` asks in request `request_id` (the invocation's id: it names the audit
    /// records of what it did), if their role may; a refusal is audited before it is returned.
    pub async fn handle(
        &self,
        caller: &Caller,
        request_id: &str,
        command: Command,
    ) -> Result<serde_json::Value, ControlError> {
        let asked = Asked { caller, request_id };
        let op = command.operation();
        let outcome = match caller.may(op) {
            Ok(role) => self.perform(&asked, role, command).await,
            Err(refused) => Err(ControlError::Refused(refused)),
        };
        match outcome {
            Err(ControlError::Refused(why)) => {
                self.refused(&asked, op, &why).await?;
                Err(ControlError::Refused(why))
            }
            other => other,
        }
    }

    async fn perform(
        &self,
        asked: &Asked<'_>,
        role: OperatorRole,
        command: Command,
    ) -> Result<serde_json::Value, ControlError> {
        let me = &asked.caller.identity;
        match command {
            Command::Whoami => Ok(serde_json::to_value(asked.caller).unwrap_or_default()),
            Command::SetPolicy { policy } => {
                policy.check().map_err(ControlError::Invalid)?;
                let reference = &self.replayer.reference;
                let before = reference.refresh().await?.approval().clone();
                reference.put_approval_policy(&policy).await?;
                self.changed(
                    asked,
                    "POLICY#approval",
                    format!("approval policy: {before} -> {policy}"),
                )
                .await?;
                Ok(serde_json::to_value(&policy).unwrap_or_default())
            }
            Command::ClosePeriod { entity, period } => self.set_period(asked, &entity, &period, None, true).await,
            Command::OpenPeriod { entity, period } => self.set_period(asked, &entity, &period, None, false).await,
            Command::SchedulePeriodClose {
                entity,
                period,
                closes_on,
            } => self.set_period(asked, &entity, &period, Some(closes_on), false).await,
            Command::PutCurrency {
                code,
                minor_units,
                description,
            } => {
                let mapping = CurrencyMapping {
                    code: input::currency_code(&code).map_err(ControlError::Invalid)?,
                    minor_units: input::minor_units(minor_units).map_err(ControlError::Invalid)?,
                    description,
                };
                let code = &mapping.code;
                let before = self.replayer.reference.refresh().await?.minor_units(code);
                self.replayer.reference.put_currency(&mapping).await?;
                let was = before.map_or_else(|| "unmapped".to_owned(), |u| format!("{u} minor units"));
                let detail = format!("currency {code}: {was} -> {minor_units} minor units");
                self.changed(asked, &format!("CURRENCY#{code}"), detail).await?;
                Ok(serde_json::to_value(&mapping).unwrap_or_default())
            }
            Command::Approve { request_id, reason } => {
                let decided = self.replayer.decide(&request_id, me, true, &reason).await?;
                Ok(serde_json::to_value(&decided).unwrap_or_default())
            }
            Command::Reject { request_id, reason } => {
                // A maker rejects only their own request: a withdrawal.
                if role == OperatorRole::Maker {
                    let r = self.replayer.request(&request_id).await?;
                    if r.requested_by.person() != me.person() {
                        return Err(ControlError::Refused(Refused(format!(
                            "a maker withdraws only their own request; {request_id} is {}'s (an approver rejects it)",
                            r.requested_by.arn
                        ))));
                    }
                    if r.status != RequestStatus::PendingApproval {
                        return Err(ControlError::Refused(Refused(format!(
                            "request {request_id} is {}: nothing to withdraw",
                            r.status
                        ))));
                    }
                }
                let decided = self.replayer.decide(&request_id, me, false, &reason).await?;
                Ok(serde_json::to_value(&decided).unwrap_or_default())
            }
        }
    }

    /// Close, open or plan the close of a period of an entity.
    async fn set_period(
        &self,
        asked: &Asked<'_>,
        entity: &str,
        period: &str,
        closes_on: Option<NaiveDate>,
        close: bool,
    ) -> Result<serde_json::Value, ControlError> {
        let period = input::period(period).map_err(ControlError::Invalid)?;
        let entity = input::entity(entity).map_err(ControlError::Invalid)?;
        let before = self.replayer.reference.refresh().await?.period_status(&entity, &period);
        if let Some(on) = closes_on {
            if before == PeriodStatus::Closed {
                return Err(ControlError::Refused(Refused(format!(
                    "{period} of {entity} is closed already: nothing to schedule (open it first)"
                ))));
            }
            if on.format("%Y-%m").to_string() <= period {
                return Err(ControlError::Invalid(format!(
                    "{period} cannot close on {on}: a period closes after it ends (on or after the first day of the next month)"
                )));
            }
        }
        let status = if close {
            PeriodStatus::Closed
        } else {
            PeriodStatus::Open
        };
        let record = PeriodRecord {
            entity: entity.clone(),
            period: period.clone(),
            status,
            closes_on,
        };
        self.replayer.reference.put_period(&record).await?;
        let planned = closes_on.map_or_else(String::new, |d| format!(", closing on {d}"));
        let detail = format!("period {period} of {entity}: {before} -> {status}{planned}");
        self.changed(asked, &format!("PERIOD#{entity}#{period}"), detail)
            .await?;
        Ok(serde_json::to_value(&record).unwrap_or_default())
    }

    /// Record a change of reference data the caller made.
    async fn changed(&self, asked: &Asked<'_>, subject: &str, detail: String) -> Result<(), ControlError> {
        self.record(AuditKind::ReferenceChanged, asked, subject, detail).await
    }

    /// Record a refusal: who asked what, and why not.
    async fn refused(&self, asked: &Asked<'_>, op: Operation, why: &Refused) -> Result<(), ControlError> {
        let detail = format!("`{op}` refused: {}", why.0);
        self.record(AuditKind::AccessRefused, asked, "CONTROL", detail).await
    }

    /// The record of request `asked` about `subject` (the request's id makes it one of its own).
    async fn record(
        &self,
        kind: AuditKind,
        asked: &Asked<'_>,
        subject: &str,
        detail: String,
    ) -> Result<(), ControlError> {
        let subject = format!("{subject}#{}", asked.request_id);
        let arn = &asked.caller.identity.arn;
        let record = AuditRecord::system(kind, &subject, self.replayer.clock.now(), arn, detail);
        self.replayer.audit.append(&record).await?;
        Ok(())
    }
}
