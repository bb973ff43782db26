//! Maker-checker approvals: the policy that says which remediation needs a second person, the
//! request that holds exactly the envelopes a dry run would change, and the decisions on it.
//!
//! A request names its envelopes with a fingerprint of each one's state ([`fingerprint`]), and
//! the set with a digest ([`ChangeSet::digest`]). Executing an approved request touches only
//! those envelopes, and only while each is as it was when the request was made: an envelope
//! added since is not in the set, one changed since (replayed, quarantined, edited) is skipped.
//! Every transition is checked here, before a store is asked to make it under a version
//! condition ([`ApprovalRequest::version`]). Pure.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::canary::Canary;
pub use super::change_set::{Action, Change, ChangeSet, fingerprint, request_digest};
use super::edit::Edit;
use super::hash::sha256_hex;
pub use super::identity::{AssumedRole, Identity};
pub use super::policy::{ApprovalPolicy, DEFAULT_EXPIRE_HOURS, Exposure, Refused};

/// At most this many envelopes in one request: the request is one item of the envelope table
/// (400 KB); a larger remediation is several requests (`--max-items`).
pub const MAX_REQUEST_ENVELOPES: usize = 1000;

/// How long one execution holds a request before another may resume it (a crashed execution).
pub const EXECUTION_LEASE_MINUTES: i64 = 15;

named! {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub enum RequestStatus {
        PendingApproval = "PENDING_APPROVAL",
        Approved = "APPROVED",
        Rejected = "REJECTED",
        Executing = "EXECUTING",
        /// Its canary failed, or its run stopped early (time, back-pressure, the rate limit): the
        /// rest waits for a second person to look and go on (or not) before it expires.
        Paused = "PAUSED",
        Executed = "EXECUTED",
        Expired = "EXPIRED",
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub by: Identity,
    pub at: DateTime<Utc>,
    pub reason: String,
    /// The control plane's seal on the decision ([`ApprovalRequest::decision_message`]); none
    /// for a decision made without it, which the control plane does not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
}

/// What happened when an approved request ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    pub replay_id: String,
    pub by: String,
    pub started_at: Option<DateTime<Utc>>,
    pub lease_until: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The replay's counts, one line.
    #[serde(default)]
    pub summary: String,
    /// Envelopes of the set skipped because they changed since the request (the first
    /// [`MAX_LISTED_CHANGED`]; the count is complete).
    #[serde(default)]
    pub changed_since: Vec<String>,
    #[serde(default)]
    pub changed_since_count: u64,
}

/// Changed envelopes listed on a request (the item must stay within DynamoDB's 400 KB).
pub const MAX_LISTED_CHANGED: usize = 50;

/// The longest reason and selector text a request keeps.
pub const MAX_REASON_BYTES: usize = 1000;

/// A remediation waiting for (or past) a second person's decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub request_id: String,
    /// Bumped by every change: a store writes a change only over the version it was made from.
    pub version: u64,
    #[serde(rename = "request_status")]
    pub status: RequestStatus,
    pub action: Action,
    /// The selector as the requester gave it (for the reader; execution uses the set).
    pub selector: String,
    pub reason: String,
    pub requested_by: Identity,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Why the policy asks for approval.
    pub why: Vec<String>,
    /// The dry run's counts, one line.
    pub dry_run: String,
    pub digest: String,
    pub exposure: Exposure,
    pub set: ChangeSet,
    /// Run the set behind this canary (its first slice, then the rest if it passes).
    pub canary: Option<Canary>,
    /// The policy's `distinct_roles` when the request was made.
    #[serde(default)]
    pub distinct_roles: bool,
    /// An edit's body and diff (action `EDIT`).
    pub edit: Option<Edit>,
    /// Runs before the current one (a paused run, then its resumption).
    #[serde(default)]
    pub earlier: Vec<Execution>,
    pub decision: Option<Decision>,
    pub execution: Option<Execution>,
}

pub struct NewRequest {
    pub action: Action,
    pub selector: String,
    pub reason: String,
    pub requested_by: Identity,
    pub why: Vec<String>,
    pub dry_run: String,
    pub set: ChangeSet,
    pub canary: Option<Canary>,
    pub edit: Option<Edit>,
}

impl ApprovalRequest {
    pub fn new(n: NewRequest, policy: &ApprovalPolicy, now: DateTime<Utc>) -> Result<Self, Refused> {
        if n.set.is_empty() {
            return Err(Refused("nothing would change: there is nothing to approve".into()));
        }
        if n.set.len() > MAX_REQUEST_ENVELOPES {
            return Err(Refused(format!(
                "{} envelopes would change; one request holds at most {MAX_REQUEST_ENVELOPES} (narrow the selector or pass --max-items)",
                n.set.len()
            )));
        }
        if n.reason.trim().is_empty() {
            return Err(Refused("a request must say why (--reason)".into()));
        }
        if n.reason.len() > MAX_REASON_BYTES {
            return Err(Refused(format!(
                "a reason of {} bytes: at most {MAX_REASON_BYTES} (a ticket reference says more)",
                n.reason.len()
            )));
        }
        let is_edit = n.action == Action::Edit;
        let edits_its_set = n
            .edit
            .as_ref()
            .is_some_and(|e| n.set.len() == 1 && n.set.changes.iter().all(|c| c.envelope_id == e.envelope_id));
        if is_edit != n.edit.is_some() || (is_edit && (!edits_its_set || n.canary.is_some())) {
            return Err(Refused(
                "an edit request holds exactly one envelope, its edit, and no canary".into(),
            ));
        }
        let selector = super::failure::bounded_detail(&n.selector).to_owned();
        let digest = request_digest(n.action, n.canary.as_ref(), &n.set, n.edit.as_ref());
        let seed = format!(
            "{digest}|{}|{}",
            n.requested_by.arn,
            now.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
        );
        Ok(ApprovalRequest {
            request_id: format!("apr_{}", &sha256_hex(seed.as_bytes())[..20]),
            version: 1,
            status: RequestStatus::PendingApproval,
            action: n.action,
            selector,
            reason: n.reason,
            requested_by: n.requested_by,
            created_at: now,
            expires_at: now + Duration::hours(i64::from(policy.expire_hours)),
            why: n.why,
            dry_run: n.dry_run,
            digest,
            exposure: n.set.exposure(),
            set: n.set,
            canary: n.canary,
            distinct_roles: policy.distinct_roles,
            edit: n.edit,
            earlier: Vec::new(),
            decision: None,
            execution: None,
        })
    }

    /// What the control plane seals of a decision that `approved` (or rejected) it: the
    /// request, its action and set (by digest), who decided, when and why, one field a line
    /// (`None`: undecided). Changing any of them breaks the seal.
    pub fn decision_message(&self, approved: bool) -> Option<String> {
        let d = self.decision.as_ref()?;
        let verdict = if approved { "APPROVED" } else { "REJECTED" };
        let action = serde_json::to_value(self.action).ok()?;
        // Who asked and until when, too: a maker rewriting either (to pass as someone else, or
        // to keep an approval alive) breaks the seal.
        let fields = [
            "recon-approval-decision/v2",
            &self.request_id,
            action.as_str()?,
            &self.digest,
            &self.requested_by.arn,
            &super::audit::canonical_time(self.expires_at),
            verdict,
            &d.by.arn,
            &super::audit::canonical_time(d.at),
            &d.reason,
        ];
        Some(fields.map(super::audit::json_string).join("\n"))
    }

    /// The set still hashes to the digest recorded with the request (a stored request whose set
    /// was edited is refused).
    pub fn check_digest(&self) -> Result<(), Refused> {
        if let Some(e) = &self.edit {
            e.check()
                .map_err(|why| Refused(format!("request {}: {why}; refused", self.request_id)))?;
        }
        let digest = request_digest(self.action, self.canary.as_ref(), &self.set, self.edit.as_ref());
        if digest != self.digest || self.set.len() as u64 != self.exposure.count {
            return Err(Refused(format!(
                "request {}: its envelope set no longer matches its digest {}; refused",
                self.request_id, self.digest
            )));
        }
        Ok(())
    }

    fn step(&mut self, to: RequestStatus) {
        self.status = to;
        self.version += 1;
    }

    /// Past its expiry and still waiting (for a decision or an execution): it expires.
    pub fn expire_if_due(&mut self, now: DateTime<Utc>) -> bool {
        let waiting = matches!(
            self.status,
            RequestStatus::PendingApproval | RequestStatus::Approved | RequestStatus::Paused
        );
        if waiting && now >= self.expires_at {
            self.step(RequestStatus::Expired);
            return true;
        }
        false
    }

    fn pending(&self, now: DateTime<Utc>) -> Result<(), Refused> {
        if self.status != RequestStatus::PendingApproval {
            return Err(Refused(format!(
                "request {} is {}, not PENDING_APPROVAL",
                self.request_id, self.status
            )));
        }
        if now >= self.expires_at {
            return Err(Refused(format!(
                "request {} expired at {}",
                self.request_id, self.expires_at
            )));
        }
        Ok(())
    }

    /// Approve: by an identity other than the requester's (the ARN AWS vouches for, whatever
    /// names were given).
    pub fn approve(&mut self, by: &Identity, reason: &str, now: DateTime<Utc>) -> Result<(), Refused> {
        self.pending(now)?;
        self.another_person(by, "approval")?;
        self.check_digest()?;
        self.decide(by, reason, now, RequestStatus::Approved);
        Ok(())
    }

    /// `by` is not the requester: another ARN and another person (session), and under
    /// `distinct_roles` another role.
    fn another_person(&self, by: &Identity, what: &str) -> Result<(), Refused> {
        let same = by.arn == self.requested_by.arn
            || by.person() == self.requested_by.person()
            || by.subject().is_some_and(|s| self.requested_by.subject() == Some(s))
            || (self.distinct_roles && by.principal() == self.requested_by.principal());
        if same {
            return Err(Refused(format!(
                "{} requested {}; {what} needs a different identity (self-approval refused)",
                self.requested_by.arn, self.request_id
            )));
        }
        Ok(())
    }

    /// Reject (anyone may, the requester too: a withdrawal), with a reason.
    pub fn reject(&mut self, by: &Identity, reason: &str, now: DateTime<Utc>) -> Result<(), Refused> {
        self.pending(now)?;
        if reason.trim().is_empty() {
            return Err(Refused("a rejection must say why (--reason)".into()));
        }
        self.decide(by, reason, now, RequestStatus::Rejected);
        Ok(())
    }

    fn decide(&mut self, by: &Identity, reason: &str, at: DateTime<Utc>, to: RequestStatus) {
        let (by, reason) = (by.clone(), reason.to_owned());
        self.decision = Some(Decision {
            by,
            at,
            reason,
            mac: None,
        });
        self.step(to);
    }

    /// Start executing: approved, or paused and resumed by a person other than the requester
    /// (`resumer`, the identity AWS vouches for), before it expires; or executing under a lease
    /// that ran out (a crashed run).
    pub fn start(&mut self, by: &str, resumer: Option<&Identity>, now: DateTime<Utc>) -> Result<(), Refused> {
        let crashed = self.stalled(now);
        match self.status {
            RequestStatus::Approved => {}
            RequestStatus::Paused => {
                let who = resumer.ok_or_else(|| {
                    Refused(format!(
                        "request {} is PAUSED: a person other than its requester resumes it (dlqctl requests execute)",
                        self.request_id
                    ))
                })?;
                self.another_person(who, "resuming it")?;
            }
            _ if crashed => {}
            _ => {
                return Err(Refused(format!(
                    "request {} is {}: only an APPROVED request runs",
                    self.request_id, self.status
                )));
            }
        }
        if !crashed && now >= self.expires_at {
            return Err(Refused(format!(
                "request {} expired at {} before it ran",
                self.request_id, self.expires_at
            )));
        }
        self.check_digest()?;
        if let Some(done) = self.execution.take_if(|x| x.finished_at.is_some()) {
            self.earlier.push(done);
        }
        self.execution = Some(Execution {
            by: by.to_owned(),
            started_at: Some(now),
            lease_until: Some(now + Duration::minutes(EXECUTION_LEASE_MINUTES)),
            ..Execution::default()
        });
        self.step(RequestStatus::Executing);
        Ok(())
    }

    /// Executed (or paused, when its canary failed): the replay's counts and the envelopes
    /// skipped as changed since.
    pub fn finish(
        &mut self,
        replay_id: &str,
        summary: String,
        changed_since: Vec<String>,
        paused: bool,
        now: DateTime<Utc>,
    ) {
        let x = self.execution.get_or_insert_with(Execution::default);
        replay_id.clone_into(&mut x.replay_id);
        x.finished_at = Some(now);
        x.summary = summary;
        x.changed_since_count = changed_since.len() as u64;
        x.changed_since = changed_since.into_iter().take(MAX_LISTED_CHANGED).collect();
        self.step(if paused {
            RequestStatus::Paused
        } else {
            RequestStatus::Executed
        });
    }

    /// Executing, but its run's lease ended without a finish (it crashed, or its send kept
    /// failing): someone resumes it (`dlqctl requests execute`).
    pub fn stalled(&self, now: DateTime<Utc>) -> bool {
        self.status == RequestStatus::Executing
            && self
                .execution
                .as_ref()
                .and_then(|x| x.lease_until)
                .is_some_and(|l| l <= now)
    }

    /// Whether this run is the first (its canary applies) rather than the resumption of a paused
    /// one (someone looked at the report and goes on without another canary).
    pub fn first_run(&self) -> bool {
        self.status != RequestStatus::Paused
    }
}

#[cfg(test)]
mod tests;
