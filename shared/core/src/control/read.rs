//! The control plane's reads, for the console: triage, a filtered page of envelopes, one envelope
//! in full (`detail.rs`), approval requests; the auditor's reads are in `evidence.rs`. Any
//! operator role may ask these (break-glass is no operator of the control plane); they change
//! nothing, so they are logged, not audited.
//!
//! A page of envelopes reads at most [`MAX_SCANNED`] envelopes of the store however rare its
//! filter's matches, and stops early near the invocation's deadline (the rest is behind its
//! cursor); a page of requests holds at most [`MAX_REQUESTS`], each as a summary row. Triage
//! reads the store's totals, or, where they do not cover every envelope, every PENDING
//! envelope. Reading a request whose time is up marks it expired, as any read of it does.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::{Asked, Command, ControlError, ControlPlane, json};
use crate::decisions::{totals, triage};
use crate::domain::approval::{Action, ApprovalRequest, RequestStatus};
use crate::domain::identity::Identity;
use crate::domain::policy::Exposure;
use crate::domain::{DlqEnvelope, EnvelopeStatus, FailureCode};
use crate::ports::{
    ApprovalRequests, Deadline, EnvelopeStore, EnvelopesOfPeriod, LedgerReader, RecordsOfPeriod, ReferenceData, Signer,
};
use crate::replay::ReplayPorts;

/// The most envelopes one page of [`EnvelopeQuery`] reads from the store.
pub const MAX_SCANNED: usize = 2_000;
/// The most envelopes one page returns.
pub const MAX_PAGE: usize = 200;
/// The most envelopes one request to the store reads for a page.
const STORE_PAGE: usize = 500;
/// The most requests one page of requests returns.
pub const MAX_REQUESTS: usize = 100;
/// The most characters of an envelope's error detail a page shows (its detail shows it all).
const DETAIL_CHARS: usize = 200;

/// Which envelopes, a page at a time (`cursor`: the previous page's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnvelopeQuery {
    /// PENDING unless named.
    pub status: Option<EnvelopeStatus>,
    pub failure_code: Option<FailureCode>,
    /// Exact root cause, or a prefix ending in `*`.
    pub root_cause: Option<String>,
    pub entity: Option<String>,
    /// Currency code (upper or lower case).
    pub currency: Option<String>,
    /// Dead-lettered at least this many hours ago.
    pub min_age_hours: Option<u32>,
    /// Text the verbatim body holds (bodies kept in the bucket, being large, are not searched).
    pub text: Option<String>,
    pub limit: Option<usize>,
    pub cursor: Option<String>,
}

impl EnvelopeQuery {
    fn matches(&self, e: &DlqEnvelope, now: DateTime<Utc>) -> bool {
        let same = |want: &Option<String>, have: &Option<String>| {
            want.as_ref()
                .is_none_or(|w| have.as_ref().is_some_and(|h| h.eq_ignore_ascii_case(w)))
        };
        let cause = self.root_cause.as_ref().is_none_or(|c| match c.strip_suffix('*') {
            Some(prefix) => e.root_cause.starts_with(prefix),
            None => e.root_cause == *c,
        });
        let old_enough = self
            .min_age_hours
            .is_none_or(|h| now - e.dead_lettered_at >= chrono::Duration::hours(i64::from(h)));
        let text = self
            .text
            .as_ref()
            .is_none_or(|t| e.original.body.as_ref().is_some_and(|b| b.contains(t.as_str())));
        self.failure_code.is_none_or(|c| c == e.failure_code)
            && cause
            && same(&self.entity, &e.ledger_entity)
            && same(&self.currency, &e.currency)
            && old_enough
            && text
    }
}

/// One envelope as a page lists it.
#[derive(Clone, Debug, Serialize)]
pub struct EnvelopeRow {
    pub envelope_id: String,
    pub status: EnvelopeStatus,
    pub failure_code: FailureCode,
    pub root_cause: String,
    pub entity: Option<String>,
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub accounting_period: Option<String>,
    pub dead_lettered_at: DateTime<Utc>,
    pub attempt_count: u32,
    pub error_detail: String,
}

impl From<&DlqEnvelope> for EnvelopeRow {
    fn from(e: &DlqEnvelope) -> Self {
        EnvelopeRow {
            envelope_id: e.envelope_id.clone(),
            status: e.status,
            failure_code: e.failure_code,
            root_cause: e.root_cause.clone(),
            entity: e.ledger_entity.clone(),
            amount: e.amount.clone(),
            currency: e.currency.clone(),
            accounting_period: e.accounting_period.clone(),
            dead_lettered_at: e.dead_lettered_at,
            attempt_count: e.attempt_count,
            error_detail: e.error_detail.chars().take(DETAIL_CHARS).collect(),
        }
    }
}

/// An approval request as a page of them lists it.
#[derive(Clone, Debug, Serialize)]
pub struct RequestRow {
    pub request_id: String,
    pub request_status: RequestStatus,
    pub action: Action,
    pub reason: String,
    pub requested_by: Identity,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub exposure: Exposure,
}

impl From<&ApprovalRequest> for RequestRow {
    fn from(r: &ApprovalRequest) -> Self {
        RequestRow {
            request_id: r.request_id.clone(),
            request_status: r.status,
            action: r.action,
            reason: r.reason.clone(),
            requested_by: r.requested_by.clone(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            exposure: r.exposure.clone(),
        }
    }
}

/// A triage group as the console shows it: [`triage::TriageGroup`], with the planned period
/// close it must be decided before (the earliest among its envelopes' periods).
#[derive(Clone, Debug, Serialize)]
pub struct GroupRow {
    #[serde(flatten)]
    pub group: triage::TriageGroup,
    pub decide_before: Option<NaiveDate>,
}

impl<P: ReplayPorts, G: Signer> ControlPlane<P, G>
where
    P::Ledger: LedgerReader,
    P::Store: EnvelopesOfPeriod,
    P::Audit: RecordsOfPeriod,
{
    /// A read `command` asks (any other command is not a read: refused as invalid). Each read's
    /// future is made here and boxed, in a frame of its own that is gone before it is polled: a
    /// debug build would otherwise hold every read's future (a reconciliation's is large) in the
    /// frame of every command's poll.
    pub(super) fn read<'a>(
        &'a self,
        asked: &'a Asked<'a>,
        command: Command,
    ) -> impl std::future::Future<Output = Result<serde_json::Value, ControlError>> + 'a {
        use futures::future::Either::{Left, Right};
        match command {
            Command::Triage => Left(Box::pin(self.triage(asked))),
            Command::Envelopes(q) => Right(Left(Box::pin(async move { self.envelopes(asked, &q).await }))),
            Command::Envelope { envelope_id } => Right(Right(Left(Box::pin(async move {
                self.envelope(asked, &envelope_id).await
            })))),
            Command::Requests { cursor, limit } => {
                Right(Right(Right(Left(Box::pin(self.requests(asked, cursor, limit))))))
            }
            Command::Request { request_id } => Right(Right(Right(Right(Left(Box::pin(async move {
                self.one_request(asked, &request_id).await
            })))))),
            Command::Reconcile { period } => Right(Right(Right(Right(Right(Left(Box::pin(async move {
                self.reconcile(asked, &period).await
            }))))))),
            Command::VerifyAudit { from_seal } => Right(Right(Right(Right(Right(Right(Left(Box::pin(
                self.verify_audit(asked, from_seal),
            )))))))),
            other => {
                let why = format!("`{}` is not a read", other.operation());
                Right(Right(Right(Right(Right(Right(Right(std::future::ready(Err(
                    ControlError::Invalid(why),
                )))))))))
            }
        }
    }

    /// The PENDING envelopes grouped by failure code and root cause, largest first: from the
    /// store's totals (a few items), or, where they do not cover every envelope, by reading
    /// every PENDING envelope (`counted` says which).
    async fn triage(&self, asked: &Asked<'_>) -> Result<serde_json::Value, ControlError> {
        let r = &self.replayer;
        let snapshot = r.reference.snapshot().await?;
        let (groups, counted, read_count) = match crate::ports::Backlog::triage_totals(&r.store).await? {
            Some(totals) => {
                let groups = totals::groups(&totals, &snapshot).map_err(crate::ports::StoreError::infra)?;
                (groups, "totals", totals.len())
            }
            None => {
                let pending = crate::ports::all_envelopes(&r.store, Some(EnvelopeStatus::Pending)).await?;
                let deadlines = triage::deadlines(&pending, &snapshot);
                let groups = triage::triage(&pending)
                    .into_iter()
                    .map(|g| {
                        let due = deadlines.get(&(g.failure_code, g.root_cause.clone())).copied();
                        (g, due)
                    })
                    .collect();
                (groups, "envelopes", pending.len())
            }
        };
        let envelopes: u64 = groups.iter().map(|(g, _)| g.tally.count).sum();
        let groups: Vec<GroupRow> = groups
            .into_iter()
            .map(|(group, decide_before)| GroupRow { group, decide_before })
            .collect();
        read(asked, "triage", read_count);
        Ok(serde_json::json!({
            "at": r.clock.now(), "envelopes": envelopes, "counted": counted, "read": read_count, "groups": groups
        }))
    }

    /// A page of the envelopes `q` selects, oldest first, and the cursor of the next (none: the
    /// last page). A page holds at most `limit` (default 50, at most [`MAX_PAGE`]) and reads at
    /// most [`MAX_SCANNED`]: a page of a rare filter may be short, or empty, with a cursor.
    async fn envelopes(&self, asked: &Asked<'_>, q: &EnvelopeQuery) -> Result<serde_json::Value, ControlError> {
        let limit = q.limit.unwrap_or(50);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ControlError::Invalid(format!("`limit` is 1 to {MAX_PAGE}")));
        }
        let r = &self.replayer;
        let now = r.clock.now();
        let status = q.status.unwrap_or(EnvelopeStatus::Pending);
        let deadline = asked.deadline.map(|d| Deadline::at(&*r.clock, d));
        // One group (a code and an exact cause, as triage links to it): its own envelopes, of
        // every status, through the cause index; else every envelope of the status.
        let group = match (q.failure_code, q.root_cause.as_deref()) {
            (Some(code), Some(cause)) if !cause.ends_with('*') => Some((code, cause)),
            _ => None,
        };
        let (mut rows, mut scanned, mut cursor) = (Vec::new(), 0, q.cursor.clone());
        for round in 0u32.. {
            // What the page has room for, doubled each round a filter leaves it short (a rare
            // one reads the store in few requests), never past the read's bound.
            let room = limit - rows.len();
            let want = (room << round.min(8))
                .min(STORE_PAGE)
                .max(room)
                .min(MAX_SCANNED - scanned);
            let at = cursor.take();
            let (page, next) = match group {
                Some((code, cause)) => r.store.list_by_cause(code, cause, at.clone(), want).await?,
                None => r.store.list_by_status(status, at.clone(), want).await?,
            };
            if next.is_some() && next == at {
                return Err(ControlError::Flow(
                    crate::ports::StoreError::infra("the envelope store's cursor did not move").into(),
                ));
            }
            cursor = next;
            for (i, e) in page.iter().enumerate() {
                scanned += 1;
                if e.status != status || !q.matches(e, now) {
                    continue;
                }
                rows.push(EnvelopeRow::from(e));
                if rows.len() == limit {
                    // Full inside the store's page: the next one starts just after this envelope
                    // (none skipped), or where the store's would.
                    if i + 1 < page.len() {
                        cursor = Some(r.store.cursor_after(e, group));
                    }
                    break;
                }
            }
            let late = deadline
                .as_ref()
                .is_some_and(|d| d.within(&*r.clock, r.config.deadline_margin));
            if cursor.is_none() || rows.len() >= limit || scanned >= MAX_SCANNED || late {
                break;
            }
        }
        read(asked, "envelopes", rows.len());
        Ok(serde_json::json!({ "envelopes": rows, "scanned": scanned, "cursor": cursor }))
    }

    /// A page of approval requests, newest first.
    async fn requests(
        &self,
        asked: &Asked<'_>,
        cursor: Option<String>,
        limit: Option<usize>,
    ) -> Result<serde_json::Value, ControlError> {
        let limit = limit.unwrap_or(50);
        if !(1..=MAX_REQUESTS).contains(&limit) {
            return Err(ControlError::Invalid(format!("`limit` is 1 to {MAX_REQUESTS}")));
        }
        let (requests, cursor) = self.replayer.store.list_requests(cursor, limit).await?;
        read(asked, "requests", requests.len());
        // Summaries: a request in full (its set, its dry run, an edit's body) is up to an item's
        // 400 KB, and a page of them would not fit an answer.
        let rows: Vec<RequestRow> = requests.iter().map(RequestRow::from).collect();
        Ok(serde_json::json!({ "requests": rows, "cursor": cursor }))
    }

    /// One approval request.
    async fn one_request(&self, asked: &Asked<'_>, id: &str) -> Result<serde_json::Value, ControlError> {
        let request = self.replayer.request(id).await?;
        read(asked, "request", 1);
        Ok(json(&request))
    }
}

/// Log a read (not audited: it changes nothing; CloudWatch keeps who read what).
pub(super) fn read(asked: &Asked<'_>, what: &str, items: usize) {
    tracing::info!(read = what, items, by = %asked.caller.identity.arn, request = %asked.request_id, "control plane read");
}
