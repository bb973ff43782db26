//! Edit-and-retry (`domain::edit`): an operator proposes an edited body for one PENDING dead
//! letter; every edit is an approval request (a second person approves it); the approved edit
//! is posted as a new message whose `replay.*` attributes name the original envelope, which
//! becomes SUPERSEDED. The original is never altered: its bytes stay in the envelope and in the
//! WORM bucket, and the edit's own document (who, why, the diff, both bodies' digests) goes next
//! to them.
//!
//! Exactly once, when the edit changes the transaction (a new `source_hash`): under the claim,
//! the original transaction is handed off in the ledger (conditional like a commit, naming the
//! envelope) before the edited copy is sent, so a later delivery of the original is suppressed
//! as a duplicate, and an original committed meanwhile suppresses the edit instead. The claim's
//! replay id is the request's (`edit_<request>`): a sweep never takes it over, and a crashed
//! execution, resumed, finds its own claim and sends the same copy again (the ledger keeps the
//! edited transaction single).

use super::ReplayPorts;
use super::report::{ReplayItem, ReplayOutcome, ReplayReport, item};
use super::settle::Settlement;
use super::{Gate, ReplayRequest, Replayer, Run, Selector};
use crate::domain::approval::{Action, ApprovalRequest, Change, Identity, NewRequest, Refused};
use crate::domain::edit::{Edit, Proposal, edit_claim, propose};
use crate::domain::hash::sha256_hex;
use crate::domain::{AuditKind, DlqEnvelope, EnvelopeStatus, TransientKind, validate};
use crate::envelopes::original_body;
use crate::ports::{AuditLog, EnvelopeStore, FlowResult, Ledger, ReferenceData, ReplayQueue, StoreError, Worm};

pub const WOULD_EDIT: &str = "WOULD_EDIT";

impl<P: ReplayPorts> Replayer<P> {
    /// Propose an edit of PENDING envelope `envelope_id`: the edited body must pass gate 1 with
    /// today's reference data, and its transaction must not be in the ledger yet. Every edit
    /// waits for a second person's approval.
    pub async fn request_edit(
        &self,
        envelope_id: &str,
        proposal: &Proposal,
        reason: &str,
        requester: &Identity,
    ) -> FlowResult<ApprovalRequest> {
        let e = self
            .store
            .get(envelope_id)
            .await?
            .ok_or_else(|| Refused(format!("no envelope {envelope_id}")))?;
        if e.status != EnvelopeStatus::Pending {
            return Err(Refused(format!(
                "envelope {envelope_id} is {}: only a PENDING one is edited",
                e.status
            ))
            .into());
        }
        let original = original_body(&e, &self.worm)
            .await?
            .ok_or_else(|| Refused(format!("the original body of {envelope_id} is not available")))?;
        let edit = propose(envelope_id, &e.source_hash, &original, proposal)?;
        let snapshot = self.reference.snapshot().await?;
        if let Err(err) = validate(&edit.body, &snapshot) {
            return Err(Refused(format!("the edited body does not pass gate 1: {err}")).into());
        }
        // The edited message must be one SQS accepts, with the replay's attributes.
        let preview_req = ReplayRequest {
            dry_run: true,
            ..ReplayRequest::by_hand(reason.to_owned(), requester.to_string())
        };
        let claim = edit_claim("apr_00000000000000000000");
        let preview = Run::new(&preview_req, claim, snapshot.clone(), &*self.clock, None);
        if let Err(why) = self.reinjection(&preview, &e, edit.body.clone()) {
            return Err(Refused(format!("the edited message could never be sent: {why}")).into());
        }
        if let Some(c) = self.ledger.lookup(&edit.key()).await? {
            return Err(Refused(format!(
                "the edited transaction is in the ledger already ({}): nothing to post",
                c.holder()
            ))
            .into());
        }
        let r = ApprovalRequest::new(
            NewRequest {
                action: Action::Edit,
                selector: serde_json::to_string(&Selector {
                    envelope_ids: vec![envelope_id.to_owned()],
                    ..Selector::default()
                })
                .unwrap_or_default(),
                reason: reason.to_owned(),
                requested_by: requester.clone(),
                why: vec!["every edit needs a second person's approval".into()],
                dry_run: format!("1 envelope would be posted edited: {}", edit.diff_line()),
                set: crate::domain::approval::ChangeSet {
                    changes: vec![Change::of(&e, WOULD_EDIT, false)],
                },
                canary: None,
                edit: Some(edit),
            },
            snapshot.approval(),
            self.clock.now(),
        )?;
        let diff = r.edit.as_ref().map(Edit::diff_line).unwrap_or_default();
        let detail = format!(
            "edit of envelope {envelope_id} requested by {requester}: {}; diff: {diff}",
            r.reason
        );
        self.create_request(&r, requester, detail).await?;
        tracing::info!(request_id = %r.request_id, envelope_id, diff = %diff, requested_by = %requester, "edit requested");
        Ok(r)
    }

    /// Post approved edit request `r` (started by its caller): the envelope only as it was when
    /// the edit was requested, or as its own crashed execution left it.
    pub(super) async fn run_edit(
        &self,
        r: &ApprovalRequest,
        req: &ReplayRequest,
        deadline: Option<chrono::DateTime<chrono::Utc>>,
    ) -> FlowResult<ReplayReport> {
        let edit = r
            .edit
            .as_ref()
            .ok_or_else(|| Refused(format!("request {} holds no edit", r.request_id)))?;
        let expected = r.set.expected();
        let snapshot = self.reference.snapshot().await?;
        let run = Run::new(req, edit_claim(&r.request_id), snapshot, &*self.clock, deadline);
        let mut report = ReplayReport {
            selected: 1,
            completed: true,
            ..run.report()
        };
        let e = self.store.get(&edit.envelope_id).await?;
        let ours = e.as_ref().is_some_and(|e| {
            e.status == EnvelopeStatus::Replaying && e.replay.as_ref().is_some_and(|c| c.replay_id == run.replay_id)
        });
        let as_requested = e
            .as_ref()
            .is_some_and(|e| expected.get(&e.envelope_id) == Some(&crate::domain::approval::fingerprint(e)));
        let claimed = match e.as_ref().filter(|_| ours || as_requested) {
            Some(e) => self.claim(&run, e, false).await?,
            None => false,
        };
        let Some(e) = e.filter(|_| claimed) else {
            if ours {
                // Its own earlier run's claim, still leased: the request stays EXECUTING.
                let why = format!(
                    "envelope {} is still held by this edit's earlier run: resume after its lease",
                    edit.envelope_id
                );
                return Err(StoreError::new(TransientKind::Conflict, why).into());
            }
            report.changed_since.push(edit.envelope_id.clone());
            report.skipped = 1;
            return Ok(report);
        };
        // Whatever the outcome (posted, suppressed, still failing: a new edit is a new request),
        // the request is done.
        let it = self.post_edit(&run, r, edit, &e).await?;
        report.push(it);
        Ok(report)
    }

    /// Under the edit's claim: the original's transaction (committed meanwhile: the edit is
    /// moot); gate 1 on the edited body and its message, unless this edit has handed the original
    /// off already (then it goes out whatever: the consumer checks the copy again and
    /// dead-letters it visibly, naming this envelope); the hand-off of the original (an economic
    /// edit); the edited copy sent, unless its transaction is in the ledger already; SUPERSEDED.
    async fn post_edit(
        &self,
        run: &Run<'_>,
        r: &ApprovalRequest,
        edit: &Edit,
        e: &DlqEnvelope,
    ) -> FlowResult<ReplayItem> {
        // Only a body that decodes identifies its transaction: one that does not posts nothing
        // and is never handed off under the hash it claims (it may be another transaction's).
        let original = self
            .identified_transaction(e)
            .await?
            .filter(|h| h.source_hash != edit.source_hash);
        let held = match &original {
            Some(h) => self.ledger.lookup(h).await?,
            None => None,
        };
        if let Some(c) = &held
            && !c.handed_off_by(&e.envelope_id)
        {
            return self.settle_claimed_duplicate(run, e, &c.holder()).await;
        }
        let handed_off = held.is_some();
        let release = |detail: String, gate: Gate| async move {
            self.finish(run, e, Settlement::release(detail.clone())).await?;
            FlowResult::Ok(item(e, ReplayOutcome::StillFailing, Some(gate), detail))
        };
        if !handed_off && let Err(err) = validate(&edit.body, &run.snapshot) {
            return release(
                format!("the edited body no longer passes gate 1: {err}"),
                Gate::Integrity,
            )
            .await;
        }
        let message = match self.reinjection(run, e, edit.body.clone()) {
            Ok(m) => m,
            Err(why) if !handed_off => {
                return release(format!("the edited message cannot be sent: {why}"), Gate::Transport).await;
            }
            Err(why) => {
                let detail = format!(
                    "the edited message cannot be sent ({why}); book the edited transaction by hand: {}",
                    edit.diff_line()
                );
                return self.quarantine(run, e, Gate::Transport, &detail, true, false).await;
            }
        };
        // Nothing sent yet: a request in doubt takes it back to PENDING until it is settled; the
        // original committed meanwhile suppresses the edit.
        if let Some(key) = original
            && !handed_off
            && let Some(instead) = self
                .hand_off(run, e, key, Gate::Idempotency, " of the original")
                .await?
        {
            return Ok(instead);
        }
        // The edited transaction in the ledger already: posted by this edit's copy (a crashed
        // execution resumed; the copy's posting names the envelope) or by a message of the
        // producer's own. Either way it is there once (and the original handed off): nothing
        // is sent.
        if let Some(c) = self.ledger.lookup(&edit.key()).await?
            && !c.handed_off_by(&e.envelope_id)
        {
            return self
                .supersede(run, r, edit, e, None, &format!("already posted by {}", c.holder()))
                .await;
        }
        // A failed send keeps the claim (never a release, which would leave the original
        // handed off and unposted): the request's resumption sends again.
        let sent = self.queue.send_batch(std::slice::from_ref(&message)).await?;
        let copy = match sent.into_iter().next() {
            Some(Ok(id)) => id,
            Some(Err(why)) => {
                let why = format!("the edited copy was not sent ({why}); resume the request to send it");
                return Err(StoreError::infra(why).into());
            }
            None => return Err(StoreError::infra("the queue answered nothing for the edited copy").into()),
        };
        let what = format!("posted edited as SQS message {copy}");
        self.supersede(run, r, edit, e, Some(copy), &what).await
    }

    /// The edit's document to the WORM bucket, then SUPERSEDED with its `EDITED` record.
    async fn supersede(
        &self,
        run: &Run<'_>,
        r: &ApprovalRequest,
        edit: &Edit,
        e: &DlqEnvelope,
        copy: Option<String>,
        what: &str,
    ) -> FlowResult<ReplayItem> {
        let approver = r.decision.as_ref().map(|d| d.by.to_string()).unwrap_or_default();
        let doc = serde_json::json!({
            "schema": "recon-dlq/edit/v1",
            "envelope_id": e.envelope_id,
            "request_id": r.request_id,
            "requested_by": r.requested_by.to_string(),
            "approved_by": approver,
            "reason": r.reason,
            "diff": edit.diff,
            "original_body_sha256": e.original.body_sha256,
            "envelope_worm_key": e.worm.as_ref().map(|w| w.key.clone()),
            "source_hash_before": edit.source_hash_before,
            "edited_body": edit.body,
            "edited_body_sha256": edit.body_sha256,
            "source_hash": edit.source_hash,
        })
        .to_string();
        let key = format!("edits/{}/{}.json", e.envelope_id, sha256_hex(doc.as_bytes()));
        self.worm.put(&key, doc.as_bytes()).await?;
        let detail = format!(
            "{what}; edit {} requested by {} ({}), approved by {approver}; diff: {}; transaction {} -> {}; WORM s3://{}/{key}",
            r.request_id,
            r.requested_by,
            r.reason,
            edit.diff_line(),
            edit.source_hash_before,
            edit.source_hash,
            self.worm.bucket()
        );
        let record = self.audit_record(run, e, AuditKind::Edited, None, detail.clone());
        // The edited transaction, whether this edit sent its copy now or found it posted (by its
        // own earlier copy, whose send answered an error): a reconciliation of the original's
        // period looks it up by this key, in whichever period the edit put it.
        let economic = edit.source_hash != edit.source_hash_before;
        let settled = Settlement {
            copy_tx: (copy.is_some() || economic).then(|| edit.key()),
            copy,
            ..Settlement::decided(EnvelopeStatus::Superseded, detail.clone(), &record)
        };
        if self.finish(run, e, settled).await? {
            self.publish(&record).await;
        } else {
            self.audit.append(&record).await?;
        }
        Ok(item(e, ReplayOutcome::Reinjected, None, detail))
    }
}
