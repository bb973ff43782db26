//! Maker-checker for manual remediation (`domain::approval`): a dry run's exposure measured
//! against the policy; a request holding exactly what that dry run would change; a decision by
//! another identity; and the execution of exactly the approved set, each envelope only while it
//! is as it was when the request was made. Every step is one conditional write of the request
//! with its audit record in the outbox, then the record published.

use super::ReplayPorts;
use super::{ReplayReport, ReplayRequest, Replayer};
use crate::domain::approval::{Action, ApprovalRequest, Identity, NewRequest, Refused, RequestStatus};
use crate::domain::canary::Canary;
use crate::domain::{AuditKind, AuditRecord};
use crate::envelopes::publish;
use crate::ports::{ApprovalRequests, FlowResult, ReferenceData, Signer};

/// A manual remediation's dry run and what the policy says of it.
#[derive(Clone, Debug)]
pub struct Assessment {
    pub preview: ReplayReport,
    /// Why it needs approval (empty: it does not).
    pub why: Vec<String>,
}

pub(super) fn needs_approval(req: &ReplayRequest, why: &[String]) -> Refused {
    let what = if req.quarantine { "quarantine" } else { "replay" };
    Refused(format!(
        "this {what} needs a second person's approval ({}): request it with `dlqctl {what}`, which makes an approval request, or narrow the selector",
        why.join("; ")
    ))
}

pub(super) fn record(kind: AuditKind, r: &ApprovalRequest, actor: &str, detail: String) -> AuditRecord {
    let at = match kind {
        AuditKind::ApprovalRequested => r.created_at,
        AuditKind::ApprovalGranted | AuditKind::ApprovalRejected => r.decision.as_ref().map_or(r.created_at, |d| d.at),
        _ => r.execution.as_ref().and_then(|x| x.finished_at).unwrap_or(r.expires_at),
    };
    // One record per step: the version tells a paused run's record from its resumption's.
    let subject = format!("{}#v{}", r.request_id, r.version);
    let mut rec = AuditRecord::system(kind, &subject, at, actor, detail);
    rec.sqs_message_id = r.digest.clone();
    rec
}

impl<P: ReplayPorts> Replayer<P> {
    /// Dry-run `req` and measure what it would change against the approval policy.
    pub async fn assess(
        &self,
        req: &ReplayRequest,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> FlowResult<Assessment> {
        let dry = ReplayRequest {
            dry_run: true,
            scheduled: false,
            ..req.clone()
        };
        let preview = self.run_with(&dry, None, deadline).await?;
        if preview.stopped.as_deref() == Some(super::sweep::OUT_OF_TIME) {
            return Err(Refused(
                "the dry run did not finish within the time budget, so what would change is not known: narrow the selector (or --max-items)"
                    .into(),
            )
            .into());
        }
        let why = self.reference.snapshot().await?.approval().requires(&preview.exposure);
        Ok(Assessment { preview, why })
    }

    /// Write new request `r` with its `APPROVAL_REQUESTED` record, then publish the record.
    pub(super) async fn create_request(
        &self,
        r: &ApprovalRequest,
        requester: &Identity,
        detail: String,
    ) -> FlowResult<()> {
        let rec = record(AuditKind::ApprovalRequested, r, &requester.to_string(), detail);
        if !self.store.create_request(r, &rec).await? {
            return Err(Refused(format!("request {} exists already", r.request_id)).into());
        }
        Ok(publish(&self.store, &self.audit, &self.metrics, &rec).await?)
    }

    /// Write `r` with the record of its step, then publish the record. `false`: `r` changed
    /// meanwhile, nothing written.
    async fn write_request(&self, r: &ApprovalRequest, rec: &AuditRecord) -> FlowResult<bool> {
        let written = self.store.update_request(r, Some(rec)).await?;
        if written {
            publish(&self.store, &self.audit, &self.metrics, rec).await?;
        }
        Ok(written)
    }

    /// Make `assessed` (a dry run of `req` the policy holds above it) a request waiting for a
    /// second person: exactly the envelopes it would change, each with its state.
    pub async fn request_approval(
        &self,
        req: &ReplayRequest,
        assessed: &Assessment,
        requester: &Identity,
        canary: Option<Canary>,
    ) -> FlowResult<ApprovalRequest> {
        if req.quarantine && canary.is_some() {
            return Err(Refused("a quarantine re-injects nothing: a canary would have nothing to watch".into()).into());
        }
        if assessed.preview.changes_truncated {
            return Err(Refused(format!(
                "{} envelopes would change, more than one request holds: narrow the selector or pass --max-items",
                assessed.preview.exposure.count
            ))
            .into());
        }
        let snapshot = self.reference.snapshot().await?;
        let r = ApprovalRequest::new(
            NewRequest {
                action: if req.quarantine {
                    Action::Quarantine
                } else {
                    Action::Replay
                },
                selector: serde_json::to_string(&req.selector).unwrap_or_default(),
                reason: req.reason.clone(),
                requested_by: requester.clone(),
                why: assessed.why.clone(),
                dry_run: assessed.preview.summary(),
                set: assessed.preview.changes.clone(),
                canary,
                edit: None,
            },
            snapshot.approval(),
            self.clock.now(),
        )?;
        let detail = format!(
            "{:?} of {} envelopes (set {}) requested by {}: {}; needs approval because {}",
            r.action,
            r.exposure.count,
            r.digest,
            requester,
            r.reason,
            r.why.join("; ")
        );
        self.create_request(&r, requester, detail).await?;
        tracing::info!(request_id = %r.request_id, count = r.exposure.count, digest = %r.digest, requested_by = %requester, "approval requested");
        Ok(r)
    }

    /// The request, expired first if its time is up (refused when there is none).
    pub async fn request(&self, id: &str) -> FlowResult<ApprovalRequest> {
        let missing = || Refused(format!("no approval request {id}"));
        let mut r = self.store.get_request(id).await?.ok_or_else(missing)?;
        if r.expire_if_due(self.clock.now()) {
            let detail = format!("expired at {} undecided or unexecuted", r.expires_at);
            let rec = record(AuditKind::ApprovalExpired, &r, &self.config.actor, detail);
            self.write_request(&r, &rec).await?;
            r = self.store.get_request(id).await?.ok_or_else(missing)?;
        }
        Ok(r)
    }

    /// Expire every waiting request whose time is up; returns how many (the scheduled sweep and
    /// `dlqctl requests list` call it).
    pub async fn expire_requests(&self) -> FlowResult<u64> {
        let (mut cursor, mut expired) = (crate::ports::Cursor::new("request read"), 0);
        while let Some(at) = cursor.at() {
            let (page, next) = self.store.list_requests(at, 100).await?;
            for r in page {
                let waiting = matches!(r.status, RequestStatus::PendingApproval | RequestStatus::Approved);
                if waiting && self.clock.now() >= r.expires_at {
                    expired += u64::from(self.request(&r.request_id).await?.status == RequestStatus::Expired);
                }
            }
            cursor.follow(next)?;
        }
        Ok(expired)
    }

    pub async fn decide(&self, id: &str, by: &Identity, approve: bool, reason: &str) -> FlowResult<ApprovalRequest> {
        self.decide_sealed(id, by, approve, reason, None::<&crate::ports::NoSigner>)
            .await
    }

    /// [`Replayer::decide`], the decision sealed by `signer` (the control plane's key) in the
    /// same write.
    pub async fn decide_sealed<G: Signer>(
        &self,
        id: &str,
        by: &Identity,
        approve: bool,
        reason: &str,
        signer: Option<&G>,
    ) -> FlowResult<ApprovalRequest> {
        let mut r = self.request(id).await?;
        let now = self.clock.now();
        let kind = if approve {
            r.approve(by, reason, now)?;
            AuditKind::ApprovalGranted
        } else {
            r.reject(by, reason, now)?;
            AuditKind::ApprovalRejected
        };
        if let (Some(signer), Some(message)) = (signer, r.decision_message(approve)) {
            let mac = signer.sign(message.as_bytes()).await?;
            if let Some(d) = r.decision.as_mut() {
                d.mac = Some(mac);
            }
        }
        let detail = format!(
            "{} {} by {by} (requested by {}; set {} of {} envelopes): {reason}",
            r.request_id, r.status, r.requested_by, r.digest, r.exposure.count
        );
        let rec = record(kind, &r, &by.to_string(), detail);
        if !self.write_request(&r, &rec).await? {
            return Err(Refused(format!(
                "request {id} changed while it was being decided; look at it again"
            ))
            .into());
        }
        Ok(r)
    }

    /// Run approved request `id`: exactly its set, each envelope only while it is as it was when
    /// the request was made (an envelope changed since is skipped and named). `by` runs it.
    /// A paused request is resumed only by `resumer`, a person other than its requester (the
    /// identity AWS vouches for; the replay function, which knows none, cannot resume one).
    pub async fn execute(
        &self,
        id: &str,
        by: &str,
        resumer: Option<&Identity>,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> FlowResult<(ApprovalRequest, ReplayReport)> {
        let r = self.request(id).await?;
        Box::pin(self.execute_request(r, by, None, resumer, deadline)).await
    }

    /// [`Replayer::execute`] of request `r` as its caller read and checked it (the control plane:
    /// its seal): that copy is what starts, is written back and runs, whatever was written to the
    /// table between the caller's read and now.
    pub async fn execute_request(
        &self,
        mut r: ApprovalRequest,
        by: &str,
        invocation: Option<&str>,
        resumer: Option<&Identity>,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> FlowResult<(ApprovalRequest, ReplayReport)> {
        let id = &r.request_id.clone();
        // A paused request resumed goes on without its canary: someone looked at its report.
        let canary = r.canary.filter(|_| r.first_run());
        // What cannot run is refused before the request is marked EXECUTING.
        if r.set.is_empty() {
            return Err(Refused(format!("request {id} names no envelope")).into());
        }
        if r.action == Action::Edit && r.edit.is_none() {
            return Err(Refused(format!("request {id} holds no edit")).into());
        }
        r.start(by, resumer, self.clock.now())?;
        if !self.store.update_request(&r, None).await? {
            return Err(Refused(format!("request {id} changed as it was to start (another execution?)")).into());
        }
        let what = if r.action == Action::Edit { "edit" } else { "request" };
        let req = ReplayRequest {
            quarantine: r.action == Action::Quarantine,
            invocation: invocation.map(str::to_owned),
            ..ReplayRequest::by_hand(format!("{} (approved {what} {id})", r.reason), by.to_owned())
        };
        let report = if r.action == Action::Edit {
            self.run_edit(&r, &req, deadline).await?
        } else {
            let what = format!("approval request {id} was made");
            self.run_set(&req, &r.set, &what, canary.as_ref(), deadline).await?
        };
        // A failed canary, or a run stopped early (time, back-pressure, the rate limit): the
        // rest waits for a second person.
        let paused = report.canary.as_ref().is_some_and(|c| !c.passed) || !report.completed;
        r.finish(
            &report.replay_id,
            report.summary(),
            report.changed_since.clone(),
            paused,
            self.clock.now(),
        );
        let approver = r.decision.as_ref().map(|d| d.by.to_string()).unwrap_or_default();
        let canary_note = report.canary.as_ref().map(|c| format!("; {c}")).unwrap_or_default();
        let detail = format!(
            "{id} ran as {} by {by} (approved by {approver}): {}; {} changed since the request, not touched{canary_note}",
            report.replay_id,
            report.summary(),
            report.changed_since.len()
        );
        let kind = if paused {
            AuditKind::ApprovalPaused
        } else {
            AuditKind::ApprovalExecuted
        };
        let rec = record(kind, &r, by, detail);
        if !self.write_request(&r, &rec).await? {
            tracing::error!(request_id = %id, replay_id = %report.replay_id, "approved request ran, but its record could not be written: it changed meanwhile");
        }
        Ok((r, report))
    }
}
