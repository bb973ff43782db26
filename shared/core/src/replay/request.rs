//! What a replay is asked to do: the selector, and the request built from a hand-invoked payload
//! (unknown fields refused) or from an EventBridge scheduled event.

use serde::{Deserialize, Serialize};

pub use crate::domain::segment::Segment;
use crate::domain::{DlqEnvelope, FailureCode};

/// Which envelopes a replay considers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Selector {
    pub failure_code: Option<FailureCode>,
    /// Exact root cause, or a prefix ending in `*` (`UNMAPPED_CURRENCY:*`).
    pub root_cause: Option<String>,
    pub entity: Option<String>,
    pub envelope_ids: Vec<String>,
    pub max_items: Option<usize>,
    /// Only this part of the backlog: several replays, one per segment, sweep it at once.
    pub segment: Option<Segment>,
}

impl Selector {
    pub fn matches(&self, e: &DlqEnvelope) -> bool {
        self.segment.is_none_or(|s| s.holds(&e.envelope_id))
            && self.failure_code.is_none_or(|c| c == e.failure_code)
            && self.root_cause.as_deref().is_none_or(|r| match r.strip_suffix('*') {
                Some(prefix) => e.root_cause.starts_with(prefix),
                None => e.root_cause == r,
            })
            && self
                .entity
                .as_deref()
                .is_none_or(|x| e.ledger_entity.as_deref() == Some(x))
    }
}

/// A replay to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplayRequest {
    pub selector: Selector,
    pub dry_run: bool,
    pub reason: String,
    pub triggered_by: String,
    /// A scheduled sweep resumes from (and saves) the persisted cursor.
    pub scheduled: bool,
    /// Operator decision: quarantine every selected envelope (for a manual journal) instead of
    /// replaying it — for records whose root cause cannot be fixed.
    pub quarantine: bool,
}

/// The payload of a hand-invoked replay. Unknown fields are refused: a typo in a selector must
/// not silently widen a replay.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManualReplay {
    pub reason: String,
    pub triggered_by: String,
    pub failure_code: Option<FailureCode>,
    pub root_cause: Option<String>,
    pub entity: Option<String>,
    #[serde(default)]
    pub envelope_ids: Vec<String>,
    pub max_items: Option<usize>,
    /// `INDEX/COUNT`: only that part of the backlog ([`Segment`]).
    pub segment: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid replay request: {0}")]
pub struct RequestError(pub String);

impl ManualReplay {
    pub fn into_request(self) -> Result<ReplayRequest, RequestError> {
        if self.reason.trim().is_empty() {
            return Err(RequestError(
                "`reason` must say why this replay is run (it is audited)".into(),
            ));
        }
        if self.triggered_by.trim().is_empty() {
            return Err(RequestError(
                "`triggered_by` must name who runs this replay (it is audited)".into(),
            ));
        }
        if self.max_items == Some(0) {
            return Err(RequestError("`max_items` must be at least 1".into()));
        }
        let segment = self.segment.as_deref().map(str::parse::<Segment>).transpose();
        let segment = segment.map_err(|e| RequestError(e.0))?;
        Ok(ReplayRequest {
            selector: Selector {
                failure_code: self.failure_code,
                root_cause: self.root_cause,
                entity: self.entity,
                envelope_ids: self.envelope_ids,
                max_items: self.max_items,
                segment,
            },
            dry_run: self.dry_run,
            ..ReplayRequest::by_hand(self.reason, self.triggered_by)
        })
    }
}

impl ReplayRequest {
    /// A replay by `triggered_by` for `reason`: nothing selected, no dry run, no quarantine.
    pub(super) fn by_hand(reason: String, triggered_by: String) -> Self {
        ReplayRequest {
            selector: Selector::default(),
            dry_run: false,
            reason,
            triggered_by,
            scheduled: false,
            quarantine: false,
        }
    }

    /// A scheduled sweep: every PENDING envelope from the saved cursor. Its actor is the schedule
    /// itself, never a name taken from the payload.
    pub fn scheduled(schedule: &str) -> Self {
        ReplayRequest {
            scheduled: true,
            ..ReplayRequest::by_hand("scheduled sweep".into(), format!("schedule:{schedule}"))
        }
    }
}

/// The schedules a "Scheduled Event" names (`None`: not a scheduled event).
fn scheduled_event(payload: &serde_json::Value) -> Option<Vec<&str>> {
    if payload.get("detail-type").and_then(|d| d.as_str()) != Some("Scheduled Event") {
        return None;
    }
    Some(
        payload
            .get("resources")
            .and_then(|r| r.as_array())
            .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default(),
    )
}

/// `named` includes `schedule`, by name or by an ARN ending in `/<name>`.
fn names_schedule(named: &[&str], schedule: &str) -> bool {
    named
        .iter()
        .any(|n| *n == schedule || n.ends_with(&format!("/{schedule}")))
}

/// What one invocation of the replay function asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invocation {
    Replay(ReplayRequest),
    /// Seal the audit trail, nothing else (the seal schedule: sealing whatever the sweep does).
    Seal,
    /// Read one segment of one period's ledger for a reconciliation's fan-out (reads only).
    ReconcileSegment(crate::reconcile::SegmentRead),
}

/// Read the replay function's payload: a scheduled event from the seal schedule only seals (it
/// needs no actor: a seal decides nothing); anything else is [`parse_invocation`].
pub fn parse_function_invocation(
    payload: &serde_json::Value,
    sweep_schedule: &str,
    seal_schedule: &str,
) -> Result<Invocation, RequestError> {
    if scheduled_event(payload).is_some_and(|named| names_schedule(&named, seal_schedule)) {
        return Ok(Invocation::Seal);
    }
    if let Some(segment) = payload.get("reconcile_segment") {
        if payload.as_object().is_some_and(|o| o.len() > 1) {
            return Err(RequestError("`reconcile_segment` comes alone".into()));
        }
        let read: crate::reconcile::SegmentRead =
            serde_json::from_value(segment.clone()).map_err(|e| RequestError(format!("reconcile_segment: {e}")))?;
        read.parts()
            .map_err(|e| RequestError(format!("reconcile_segment: {e}")))?;
        return Ok(Invocation::ReconcileSegment(read));
    }
    if payload.get("approved_request").is_some() {
        // Who runs it would be a name in the payload: an approved request runs only through the
        // control plane, which knows its caller and checks the approval's seal.
        return Err(RequestError(
            "an approved request runs through the control plane (`dlqctl requests execute`), not by invoking the replay function".into(),
        ));
    }
    parse_invocation(payload, sweep_schedule).map(Invocation::Replay)
}

/// Read a Lambda payload. An EventBridge "Scheduled Event" starts a sweep only if it names this
/// deployment's sweep schedule (`schedule`: its name, or an ARN ending in `/<name>`), and the
/// sweep's actor is that schedule whatever else the payload says; a scheduled event naming
/// anything else is refused (it cannot say who it is). Anything else must be a [`ManualReplay`].
pub fn parse_invocation(payload: &serde_json::Value, schedule: &str) -> Result<ReplayRequest, RequestError> {
    if let Some(named) = scheduled_event(payload) {
        if names_schedule(&named, schedule) {
            return Ok(ReplayRequest::scheduled(schedule));
        }
        let shown: Vec<String> = named
            .iter()
            .take(3)
            .map(|n| {
                n.chars()
                    .filter(|c| !c.is_control() && !matches!(c, '"' | '\\' | '`'))
                    .take(100)
                    .collect()
            })
            .collect();
        return Err(RequestError(format!(
            "a scheduled event must come from this deployment's sweep schedule `{schedule}`, this one names [{}]: refused (a manual replay names its reason and who runs it)",
            shown.join(", ")
        )));
    }
    if !payload.is_object() {
        return Err(RequestError(
            "a replay request must be a JSON object (see docs/how-it-works.md: `reason`, `triggered_by`, a selector)"
                .into(),
        ));
    }
    let manual: ManualReplay = serde_json::from_value(payload.clone()).map_err(|e| RequestError(e.to_string()))?;
    manual.into_request()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_split_the_envelopes_exactly_and_refuse_what_is_not_index_of_count() {
        let of = 4;
        let segments: Vec<Segment> = (0..of).map(|i| format!("{i}/{of}").parse().unwrap()).collect();
        let mut sizes = vec![0; of as usize];
        for n in 0..4000 {
            let id = format!("env-{n:08x}");
            let holders: Vec<usize> = (0..segments.len()).filter(|&i| segments[i].holds(&id)).collect();
            assert_eq!(holders.len(), 1, "{id} is held by {holders:?}");
            sizes[holders[0]] += 1;
        }
        // Each quarter within 10 % of 1000.
        assert!(sizes.iter().all(|&n| (900..=1100).contains(&n)), "{sizes:?}");
        for bad in ["4/4", "1/0", "0/65", "a/2", "1", "-1/2", ""] {
            let e = bad.parse::<Segment>().unwrap_err();
            assert!(e.0.contains("INDEX/COUNT"), "{bad}: {e}");
        }
        assert_eq!("2 / 4".parse::<Segment>().unwrap().to_string(), "2/4");
        let payload = serde_json::json!({"reason": "r", "triggered_by": "t", "segment": "5/4"});
        assert!(parse_invocation(&payload, "sweep").is_err());
        let payload = serde_json::json!({"reason": "r", "triggered_by": "t", "segment": "3/4"});
        let req = parse_invocation(&payload, "sweep").unwrap();
        assert_eq!(req.selector.segment, Some(Segment { index: 3, of: 4 }));
    }

    #[test]
    fn the_seal_schedule_only_seals_and_the_sweep_schedule_only_sweeps() {
        let event = |name: &str| serde_json::json!({"detail-type": "Scheduled Event", "source": "aws.scheduler", "resources": [name]});
        let parse = |p: &serde_json::Value| parse_function_invocation(p, SWEEP, "p-audit-seal");
        assert_eq!(parse(&event("p-audit-seal")), Ok(Invocation::Seal));
        assert_eq!(
            parse(&event(SWEEP)),
            Ok(Invocation::Replay(ReplayRequest::scheduled(SWEEP)))
        );
        assert!(parse(&event("someone-else")).is_err());
        assert!(matches!(
            parse(&serde_json::json!({"reason": "r", "triggered_by": "t"})),
            Ok(Invocation::Replay(_))
        ));
        // An approved request is not run by whoever may invoke the function, under a name they give.
        let execute = parse(&serde_json::json!({"approved_request": "apr_1", "triggered_by": "t"}));
        assert!(execute.is_err_and(|e| e.0.contains("control plane")));
        // A reconciliation's segment: only a period and a segment, checked; nothing beside it.
        let segment =
            |p: &str, s: &str| serde_json::json!({"reconcile_segment": {"period": p, "segment": s, "links": {}}});
        assert_eq!(
            parse(&segment("2026-11", "1/4")),
            Ok(Invocation::ReconcileSegment(crate::reconcile::SegmentRead {
                period: "2026-11".into(),
                segment: "1/4".into(),
                links: crate::reconcile::Links::default(),
            }))
        );
        // Without the caller's links a segment would count what the caller keeps: refused.
        assert!(parse(&serde_json::json!({"reconcile_segment": {"period": "2026-11", "segment": "0/1"}})).is_err());
        assert!(parse(&segment("2026-13", "1/4")).is_err());
        assert!(parse(&segment("2026-11", "4/4")).is_err());
        assert!(
            parse(
                &serde_json::json!({"reconcile_segment": {"period": "2026-11", "segment": "0/1", "links": {}, "x": 1}})
            )
            .is_err()
        );
        let mut beside = segment("2026-11", "0/1");
        beside["reason"] = "r".into();
        assert!(parse(&beside).is_err());
    }

    #[test]
    fn a_manual_payload_needs_a_reason_and_refuses_unknown_fields() {
        let ok = parse_invocation(
            &serde_json::json!({
                "reason": "XAU mapped", "triggered_by": "alice", "root_cause": "UNMAPPED_CURRENCY:XAU", "dry_run": true
            }),
            SWEEP,
        )
        .unwrap();
        assert!(ok.dry_run && !ok.scheduled);
        assert_eq!(ok.selector.root_cause.as_deref(), Some("UNMAPPED_CURRENCY:XAU"));

        let err = parse_invocation(&serde_json::json!({"triggered_by": "alice"}), SWEEP).unwrap_err();
        assert!(err.0.contains("missing field `reason`"), "{err}");
        let err = parse_invocation(
            &serde_json::json!({"reason": "x", "triggered_by": "a", "rootcause": "X"}),
            SWEEP,
        )
        .unwrap_err();
        assert!(err.0.contains("unknown field `rootcause`"), "{err}");
        let err = parse_invocation(&serde_json::json!({"reason": " ", "triggered_by": "a"}), SWEEP).unwrap_err();
        assert!(err.0.contains("reason"), "{err}");
        let err = parse_invocation(
            &serde_json::json!({"reason": "r", "triggered_by": "a", "failure_code": "NOPE"}),
            SWEEP,
        )
        .unwrap_err();
        assert!(err.0.contains("NOPE"), "{err}");
    }

    const SWEEP: &str = "recon-dlq-replay-sweep";

    #[test]
    fn a_scheduled_event_starts_a_sweep_as_its_schedule() {
        for named in [
            SWEEP.to_owned(),
            format!("arn:aws:scheduler:us-east-1:0:schedule/default/{SWEEP}"),
        ] {
            let r = parse_invocation(
                &serde_json::json!({
                    "version": "0", "id": "x", "detail-type": "Scheduled Event", "source": "aws.scheduler",
                    "resources": [named], "detail": {}, "triggered_by": "mallory"
                }),
                SWEEP,
            )
            .unwrap();
            assert!(r.scheduled);
            assert_eq!(
                r.triggered_by,
                format!("schedule:{SWEEP}"),
                "the actor is never the payload's"
            );
        }
    }

    #[test]
    fn a_scheduled_event_naming_another_schedule_is_refused() {
        // Regression (issue 11): anyone allowed to invoke the function could send a scheduled
        // event naming any actor and run a sweep under that name.
        for payload in [
            serde_json::json!({"detail-type": "Scheduled Event", "resources": ["rule/anyone-i-like"]}),
            serde_json::json!({"detail-type": "Scheduled Event", "source": "alice"}),
            serde_json::json!({"detail-type": "Scheduled Event", "resources": [format!("{SWEEP}-not")]}),
        ] {
            let err = parse_invocation(&payload, SWEEP).unwrap_err();
            assert!(
                err.0.contains("must come from this deployment's sweep schedule"),
                "{err}"
            );
        }
    }

    #[test]
    fn selectors_match_code_cause_prefix_and_entity() {
        let e = crate::domain::envelope_from_dlq_message(
            &{
                let mut m = aws_lambda_events::event::sqs::SqsMessage::default();
                m.message_id = Some("x".into());
                m.body = Some("{}".into());
                m
            },
            chrono::DateTime::UNIX_EPOCH,
            "t",
        );
        assert!(Selector::default().matches(&e));
        assert!(
            Selector {
                root_cause: Some("REDRIVEN_*".into()),
                ..Selector::default()
            }
            .matches(&e)
        );
        assert!(
            !Selector {
                root_cause: Some("REDRIVEN".into()),
                ..Selector::default()
            }
            .matches(&e)
        );
        assert!(
            !Selector {
                failure_code: Some(FailureCode::UnrecoverablePayload),
                ..Selector::default()
            }
            .matches(&e)
        );
        assert!(
            !Selector {
                entity: Some("E".into()),
                ..Selector::default()
            }
            .matches(&e)
        );
    }
}
