//! The control plane: the one authority for every state-changing operator action. It is asked as
//! a [`Caller`] AWS verified (the principal of the request's context, never a field of the
//! payload), allows each [`Operation`] to the roles `domain::operator` names, and refuses the rest
//! with the role needed; a refusal is audited (`ACCESS_REFUSED`) and changes nothing.
//!
//! On AWS it is a function behind an HTTP API with IAM authorization; locally the same handler
//! runs in-process, given the identity the request context would carry.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::FailureCode;
use crate::domain::approval::{ApprovalPolicy, ApprovalRequest, MAX_REASON_BYTES, Refused, RequestStatus};
use crate::domain::canary::Canary;
use crate::domain::edit::Proposal;
use crate::domain::input;
use crate::domain::operator::{Caller, Operation, OperatorRole};
use crate::domain::reference::{CurrencyMapping, PeriodRecord, PeriodStatus};
use crate::domain::{AuditKind, AuditRecord};
use crate::ports::{AuditLog, EnvelopesOfPeriod, FlowError, LedgerReader, RecordsOfPeriod, ReferenceData, Signer};
use crate::reconcile::{SegmentRead, read_period_segment};
use crate::replay::{ReplayPorts, ReplayRequest, Replayer, RequestError, Segment, Selector};

pub mod assets;
mod detail;
mod evidence;
pub mod http;
mod read;

pub use read::EnvelopeQuery;

/// What a caller asks: `{"operation": "...", ...}`. Unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "operation", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Command {
    Whoami,
    Replay(Remediation),
    Quarantine(Remediation),
    Edit {
        envelope_id: String,
        proposal: Proposal,
        reason: String,
    },
    /// Run an approved request, or resume a paused one.
    Execute {
        request_id: String,
    },
    /// One segment of a period's postings, for a reconciliation (reads only).
    ReconcileSegment(SegmentRead),
    /// Seal the audit trail now.
    Seal,
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
    /// The PENDING envelopes grouped by failure code and root cause (reads only).
    Triage,
    /// A page of envelopes (reads only).
    Envelopes(EnvelopeQuery),
    /// One envelope in full (reads only).
    Envelope {
        envelope_id: String,
    },
    /// A page of approval requests, newest first (reads only).
    Requests {
        #[serde(default)]
        cursor: Option<String>,
        #[serde(default)]
        limit: Option<usize>,
    },
    /// One approval request (reads only).
    Request {
        request_id: String,
    },
    /// A period's reconciliation (reads only; the auditor's).
    Reconcile {
        period: String,
    },
    /// The audit trail verified against the bucket's seals: whole, or what came after seal
    /// `from_seal` (reads only; the auditor's).
    VerifyAudit {
        #[serde(default)]
        from_seal: Option<u64>,
    },
    /// Seal the trail and keep the evidence bundle of `period` in the bucket, with an address to
    /// download it from (the auditor's).
    ExportEvidence {
        period: String,
    },
}

/// Which envelopes to replay or quarantine, and how: what `dlqctl replay` and `quarantine` give.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Remediation {
    /// Why (audited; required).
    pub reason: String,
    pub failure_code: Option<FailureCode>,
    /// Exact root cause, or a prefix ending in `*`.
    pub root_cause: Option<String>,
    pub entity: Option<String>,
    pub envelope_ids: Vec<String>,
    pub max_items: Option<usize>,
    /// Only report what would happen, each gate's decision included: changes nothing.
    pub dry_run: bool,
    /// Re-inject a slice first and go on only if its copies post.
    pub canary: Option<Canary>,
    /// Only this part of the envelopes, `INDEX/COUNT`: several runs at once, each its own part.
    #[serde(default)]
    pub segment: Option<String>,
}

impl Remediation {
    /// This remediation limited to what `preview` (its dry run) selected
    /// ([`crate::replay::pin`]): what its caller confirmed is what runs.
    pub fn pinned_to(mut self, preview: &crate::replay::ReplayReport) -> Self {
        crate::replay::pin(&mut self.envelope_ids, &mut self.max_items, preview);
        self
    }

    /// The replay request it asks for, as `by` (the caller AWS verified) in control-plane request
    /// `invocation`. Refused: no reason, a reason of two lines or above 1000 bytes, no item, a
    /// segment not `INDEX/COUNT`, a canary out of its bounds.
    pub fn request(&self, by: &str, invocation: &str, quarantine: bool) -> Result<ReplayRequest, RequestError> {
        if self.reason.trim().is_empty() {
            return Err(RequestError(
                "`reason` must say why this replay is run (it is audited)".into(),
            ));
        }
        if self.reason.len() > MAX_REASON_BYTES || self.reason.chars().any(char::is_control) {
            return Err(RequestError(format!(
                "`reason` is one line of at most {MAX_REASON_BYTES} bytes (a ticket reference says more)"
            )));
        }
        if self.max_items == Some(0) {
            return Err(RequestError("`max_items` must be at least 1".into()));
        }
        let segment = self.segment.as_deref().map(str::parse::<Segment>).transpose();
        let segment = segment.map_err(|e| RequestError(e.0))?;
        if let Some(c) = &self.canary {
            c.check().map_err(RequestError)?;
        }
        Ok(ReplayRequest {
            selector: Selector {
                failure_code: self.failure_code,
                root_cause: self.root_cause.clone(),
                entity: self.entity.clone(),
                envelope_ids: self.envelope_ids.clone(),
                max_items: self.max_items,
                segment,
            },
            dry_run: self.dry_run,
            quarantine,
            invocation: Some(invocation.to_owned()),
            ..ReplayRequest::by_hand(self.reason.clone(), by.to_owned())
        })
    }
}

impl Command {
    pub fn operation(&self) -> Operation {
        match self {
            Command::Whoami => Operation::Whoami,
            Command::Replay(_) => Operation::Replay,
            Command::Quarantine(_) => Operation::Quarantine,
            Command::Edit { .. } => Operation::Edit,
            Command::Execute { .. } => Operation::Execute,
            Command::ReconcileSegment(_) => Operation::ReconcileSegment,
            Command::Seal => Operation::Seal,
            Command::SetPolicy { .. } => Operation::SetPolicy,
            Command::ClosePeriod { .. } => Operation::ClosePeriod,
            Command::OpenPeriod { .. } => Operation::OpenPeriod,
            Command::SchedulePeriodClose { .. } => Operation::SchedulePeriodClose,
            Command::PutCurrency { .. } => Operation::PutCurrency,
            Command::Approve { .. } => Operation::Approve,
            Command::Reject { .. } => Operation::Reject,
            Command::Triage => Operation::Triage,
            Command::Envelopes(_) => Operation::Envelopes,
            Command::Envelope { .. } => Operation::Envelope,
            Command::Requests { .. } => Operation::Requests,
            Command::Request { .. } => Operation::Request,
            Command::Reconcile { .. } => Operation::Reconcile,
            Command::VerifyAudit { .. } => Operation::VerifyAudit,
            Command::ExportEvidence { .. } => Operation::ExportEvidence,
        }
    }
}

/// Why the control plane did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The caller's role may not ask for it: audited, nothing changed.
    #[error("forbidden: {0}")]
    Forbidden(Refused),
    /// The state refuses it (self-approval, a request decided already, a closed period):
    /// audited, nothing changed.
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
            FlowError::IllegalTransition(t) => ControlError::Refused(Refused(t.to_string())),
            other => ControlError::Flow(other),
        }
    }
}

impl From<crate::ports::StoreError> for ControlError {
    fn from(e: crate::ports::StoreError) -> Self {
        ControlError::Flow(e.into())
    }
}

/// Who asks, in which invocation (its id, which no caller chooses, names the audit records of
/// what it did), by when it must have answered.
pub struct Asked<'a> {
    pub caller: &'a Caller,
    pub request_id: &'a str,
    pub deadline: Option<DateTime<Utc>>,
}

/// The control plane over the replay's ports (the requests live with the envelopes, the policy,
/// periods and currencies in the reference data), and the key it seals its decisions with.
pub struct ControlPlane<P: ReplayPorts, G: Signer> {
    pub replayer: Replayer<P>,
    pub signer: G,
    /// How long a record may wait for a seal (`SealPolicy::max_unsealed`): an audit
    /// verification calls sealing stopped past it.
    pub max_unsealed: chrono::Duration,
}

impl<P: ReplayPorts, G: Signer> ControlPlane<P, G>
where
    P::Ledger: LedgerReader,
    P::Store: EnvelopesOfPeriod,
    P::Audit: RecordsOfPeriod,
{
    /// Do what `asked.caller` asks, if their role may; a refusal is audited before it is
    /// returned.
    pub async fn handle(&self, asked: &Asked<'_>, command: Command) -> Result<serde_json::Value, ControlError> {
        let caller = asked.caller;
        let op = command.operation();
        let outcome = match caller.may(op) {
            Ok(role) => self.perform(asked, role, command).await,
            Err(refused) => Err(ControlError::Forbidden(refused)),
        };
        match &outcome {
            Err(ControlError::Forbidden(why) | ControlError::Refused(why)) => self.refused(asked, op, &why.0).await?,
            Err(ControlError::Invalid(why)) => self.refused(asked, op, why).await?,
            _ => {}
        }
        outcome
    }

    /// Refuse a console sign-in's choice of role (`why`: not theirs, or none of several),
    /// audited as the person's (the caller without a role).
    pub async fn sign_in_refused(&self, asked: &Asked<'_>, why: String) -> Result<serde_json::Value, ControlError> {
        let detail = format!("a console sign-in refused: {}", shown(&why));
        self.record(AuditKind::AccessRefused, asked, "CONTROL", detail).await?;
        Err(ControlError::Forbidden(Refused(why)))
    }

    /// Refuse a request whose body is not a command (`why`), audited as the caller's.
    pub async fn malformed(&self, asked: &Asked<'_>, why: String) -> Result<serde_json::Value, ControlError> {
        let detail = format!("a request that is not a command refused: {}", shown(&why));
        self.record(AuditKind::AccessRefused, asked, "CONTROL", detail).await?;
        Err(ControlError::Invalid(why))
    }

    async fn perform(
        &self,
        asked: &Asked<'_>,
        role: OperatorRole,
        command: Command,
    ) -> Result<serde_json::Value, ControlError> {
        let me = &asked.caller.identity;
        match command {
            Command::Whoami => Ok(json(asked.caller)),
            // The reads, one boxed arm (a debug build's poll frame holds each arm's temporaries).
            read @ (Command::Triage
            | Command::Envelopes(_)
            | Command::Envelope { .. }
            | Command::Requests { .. }
            | Command::Request { .. }
            | Command::Reconcile { .. }
            | Command::VerifyAudit { .. }) => self.read(asked, read).await,
            // Boxed: a replay's future is deep (a debug build's stack would not hold it).
            Command::Replay(r) => Box::pin(self.remediate(asked, &r, false)).await,
            Command::Quarantine(r) => Box::pin(self.remediate(asked, &r, true)).await,
            Command::Edit {
                envelope_id,
                proposal,
                reason,
            } => {
                if reason.trim().is_empty() {
                    return Err(ControlError::Invalid("an edit must say why (`reason`)".into()));
                }
                let request = self.replayer.request_edit(&envelope_id, &proposal, &reason, me).await?;
                Ok(json(&request))
            }
            Command::Execute { request_id } => {
                let r = self.replayer.request(&request_id).await?;
                // Whatever would run carries the seal of its approval (an undecided request is
                // refused by its own rules).
                let would_run = matches!(
                    r.status,
                    RequestStatus::Approved | RequestStatus::Paused | RequestStatus::Executing
                );
                if would_run {
                    self.check_seal(&r).await?;
                }
                // Going on after a paused run (a failed canary, a run stopped early) is a second
                // person's decision: an approver's.
                if r.status == RequestStatus::Paused && role != OperatorRole::Approver {
                    return Err(ControlError::Refused(Refused(format!(
                        "request {request_id} is PAUSED: an approver decides whether it goes on"
                    ))));
                }
                // What runs is the copy whose seal was just checked (a write to the table since
                // is overwritten by its start, not run).
                let by = me.arn.as_str();
                let (request, report) =
                    Box::pin(
                        self.replayer
                            .execute_request(r, by, Some(asked.request_id), Some(me), asked.deadline),
                    )
                    .await?;
                Ok(serde_json::json!({ "request": request, "report": report }))
            }
            Command::ReconcileSegment(read) => {
                read.parts().map_err(ControlError::Invalid)?;
                let out = read_period_segment(&self.replayer.ledger, &read).await;
                Ok(json(&out.map_err(crate::ports::StoreError::infra)?))
            }
            Command::ExportEvidence { period } => Box::pin(self.export_evidence(asked, &period)).await,
            Command::Seal => {
                // Not `Replayer::seal`: that one is the seal schedule's heartbeat.
                let r = &self.replayer;
                let (key, seal) = crate::evidence::seal(&r.audit, &r.worm, r.clock.now()).await?;
                tracing::info!(seal = %key, by = %me.arn, request = %asked.request_id, "audit trail sealed on request");
                let chains = seal.heads.len();
                Ok(
                    serde_json::json!({ "key": key, "trail": seal.trail, "seq": seal.seq, "chains": chains, "root": seal.root }),
                )
            }
            Command::SetPolicy { policy } => {
                policy.check().map_err(ControlError::Invalid)?;
                let reference = &self.replayer.reference;
                let before = reference.refresh().await?.approval().clone();
                reference.put_approval_policy(&policy).await?;
                self.changed(
                    asked,
                    "POLICY#approval",
                    format!("approval policy: {} -> {}", json(&before), json(&policy)),
                )
                .await?;
                Ok(json(&policy))
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
                if description.chars().count() > MAX_DESCRIPTION_CHARS {
                    return Err(ControlError::Invalid(format!(
                        "a currency's description is at most {MAX_DESCRIPTION_CHARS} characters"
                    )));
                }
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
                Ok(json(&mapping))
            }
            Command::Approve { request_id, reason } => {
                let decided = self
                    .replayer
                    .decide_sealed(&request_id, me, true, &reason, Some(&self.signer))
                    .await?;
                Ok(json(&decided))
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
                let decided = self
                    .replayer
                    .decide_sealed(&request_id, me, false, &reason, Some(&self.signer))
                    .await?;
                Ok(json(&decided))
            }
        }
    }

    /// A replay or quarantine asked by `me`: its dry run; or, under the approval policy, the run
    /// of exactly what that dry run selected; above it, an approval request for exactly that.
    async fn remediate(
        &self,
        asked: &Asked<'_>,
        r: &Remediation,
        quarantine: bool,
    ) -> Result<serde_json::Value, ControlError> {
        let me = &asked.caller.identity;
        let wanted = r.request(&me.arn, asked.request_id, quarantine);
        let wanted = wanted.map_err(|e| ControlError::Invalid(e.0))?;
        let assessed = self.replayer.assess(&wanted, asked.deadline).await?;
        if r.dry_run {
            return Ok(serde_json::json!({ "report": assessed.preview, "needs_approval": assessed.why }));
        }
        if !assessed.why.is_empty() {
            let request = self.replayer.request_approval(&wanted, &assessed, me, r.canary).await?;
            return Ok(serde_json::json!({ "request": request }));
        }
        if assessed.preview.changed() == 0 {
            return Ok(serde_json::json!({ "report": assessed.preview }));
        }
        let req = wanted.pinned_to(&assessed.preview);
        let report = self
            .replayer
            .run_guarded(&req, r.canary.as_ref(), asked.deadline)
            .await?;
        Ok(serde_json::json!({ "report": report }))
    }

    /// `r`'s approval carries this control plane's seal: it was decided here, and nothing of it
    /// (the set, the decider, the reason) changed since.
    async fn check_seal(&self, r: &ApprovalRequest) -> Result<(), ControlError> {
        let mac = r.decision.as_ref().and_then(|d| d.mac.as_deref());
        let sealed = match (r.decision_message(true), mac) {
            (Some(message), Some(mac)) => self.signer.verify(message.as_bytes(), mac).await?,
            _ => false,
        };
        if sealed {
            return Ok(());
        }
        Err(ControlError::Refused(Refused(format!(
            "the approval of {} does not carry the control plane's seal (decided elsewhere, or altered since): it does not run",
            r.request_id
        ))))
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
        Ok(json(&record))
    }

    /// Record a change of reference data the caller made.
    async fn changed(&self, asked: &Asked<'_>, subject: &str, detail: String) -> Result<(), ControlError> {
        self.record(AuditKind::ReferenceChanged, asked, subject, detail).await
    }

    /// Record a refusal: who asked what, and why not.
    async fn refused(&self, asked: &Asked<'_>, op: Operation, why: &str) -> Result<(), ControlError> {
        let detail = format!("`{op}` refused: {}", shown(why));
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

/// The most of a refusal's reason its audit record keeps (a reason may quote the caller's input).
const MAX_REFUSAL_CHARS: usize = 300;

/// A refusal's reason as its audit record keeps it: its first [`MAX_REFUSAL_CHARS`] characters,
/// control characters (the caller's, quoted) as `?`.
fn shown(why: &str) -> String {
    why.chars()
        .take(MAX_REFUSAL_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The longest description of a currency mapping (it travels in every reference snapshot).
pub const MAX_DESCRIPTION_CHARS: usize = 200;

/// A result as the caller gets it.
fn json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}
