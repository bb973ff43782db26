//! What a replay is asked to do: the selector, the request, and what one invocation of the replay
//! function may ask (its own two schedules' work, nothing else).

use serde::Serialize;

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
    /// Who runs it: the schedule, or the caller AWS verified (never a name from a payload).
    pub triggered_by: String,
    /// The invocation that runs it (the replay function's Lambda request id, the control plane's
    /// request id): its envelopes' audit records name it.
    pub invocation: Option<String>,
    /// A scheduled sweep resumes from (and saves) the persisted cursor.
    pub scheduled: bool,
    /// Operator decision: quarantine every selected envelope (for a manual journal) instead of
    /// replaying it — for records whose root cause cannot be fixed.
    pub quarantine: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid replay request: {0}")]
pub struct RequestError(pub String);

impl ReplayRequest {
    /// A replay by `triggered_by` for `reason`: nothing selected, no dry run, no quarantine.
    pub(crate) fn by_hand(reason: String, triggered_by: String) -> Self {
        ReplayRequest {
            selector: Selector::default(),
            dry_run: false,
            reason,
            triggered_by,
            invocation: None,
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

    /// Who runs it as its audit records name them: the actor, in which invocation, then why. The
    /// invocation comes before the reason, which is the caller's text: the first `[invocation …]`
    /// is the one that ran it, whatever a reason says.
    pub fn actor(&self) -> String {
        match &self.invocation {
            Some(id) => format!("{} [invocation {id}] ({})", self.triggered_by, self.reason),
            None => format!("{} ({})", self.triggered_by, self.reason),
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
    /// A sweep over PENDING envelopes (the sweep schedule).
    Sweep(ReplayRequest),
    /// Seal the audit trail, nothing else (the seal schedule: sealing whatever the sweep does).
    Seal,
}

/// Read the replay function's payload: an EventBridge "Scheduled Event" naming this deployment's
/// seal schedule seals; one naming its sweep schedule (its name, or an ARN ending in `/<name>`)
/// sweeps, as that schedule whatever else the payload says. Anything else is refused: a replay or
/// quarantine by hand, an approved request and a period's segment are asked of the control
/// plane, which knows who asks; this function would have only a name in the payload.
pub fn parse_invocation(
    payload: &serde_json::Value,
    sweep_schedule: &str,
    seal_schedule: &str,
) -> Result<Invocation, RequestError> {
    let Some(named) = scheduled_event(payload) else {
        return Err(RequestError(format!(
            "the replay function runs only its schedules (`{sweep_schedule}`, `{seal_schedule}`): a replay or quarantine by hand, an approved request and a reconcile segment are asked of the control plane (`dlqctl replay`, `dlqctl requests execute`, `dlqctl reconcile --fan-out`), which knows who asks"
        )));
    };
    if names_schedule(&named, seal_schedule) {
        return Ok(Invocation::Seal);
    }
    if names_schedule(&named, sweep_schedule) {
        return Ok(Invocation::Sweep(ReplayRequest::scheduled(sweep_schedule)));
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
    Err(RequestError(format!(
        "a scheduled event must come from this deployment's sweep schedule `{sweep_schedule}` or seal schedule `{seal_schedule}`, this one names [{}]: refused",
        shown.join(", ")
    )))
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
    }

    const SWEEP: &str = "recon-dlq-replay-sweep";
    const SEAL: &str = "recon-dlq-audit-seal";

    fn parse(payload: &serde_json::Value) -> Result<Invocation, RequestError> {
        parse_invocation(payload, SWEEP, SEAL)
    }

    fn event(named: &str) -> serde_json::Value {
        serde_json::json!({"version": "0", "id": "x", "detail-type": "Scheduled Event", "source": "aws.scheduler", "resources": [named], "detail": {}})
    }

    #[test]
    fn the_seal_schedule_only_seals_and_the_sweep_schedule_only_sweeps_as_itself() {
        assert_eq!(parse(&event(SEAL)), Ok(Invocation::Seal));
        for named in [
            SWEEP.to_owned(),
            format!("arn:aws:scheduler:us-east-1:0:schedule/default/{SWEEP}"),
        ] {
            let mut payload = event(&named);
            payload["triggered_by"] = "mallory".into();
            let Ok(Invocation::Sweep(r)) = parse(&payload) else {
                panic!("{named}: not a sweep")
            };
            assert!(r.scheduled && !r.dry_run && !r.quarantine);
            assert_eq!(
                r.triggered_by,
                format!("schedule:{SWEEP}"),
                "the actor is never the payload's"
            );
        }
    }

    #[test]
    fn anything_but_this_deployments_schedules_is_refused() {
        // Regression (issue 11): anyone allowed to invoke the function could send a scheduled
        // event naming any actor and run a sweep under that name; (issue 30) or a replay by
        // hand under any name, an approved request, or read a period's postings.
        for payload in [
            event("rule/anyone-i-like"),
            event(&format!("{SWEEP}-not")),
            serde_json::json!({"detail-type": "Scheduled Event", "source": "alice"}),
        ] {
            let err = parse(&payload).unwrap_err();
            assert!(
                err.0.contains("must come from this deployment's sweep schedule"),
                "{err}"
            );
        }
        for payload in [
            serde_json::json!({"reason": "fixed", "triggered_by": "alice", "dry_run": true}),
            serde_json::json!({"approved_request": "apr_1", "triggered_by": "t"}),
            serde_json::json!({"reconcile_segment": {"period": "2026-11", "segment": "0/1", "links": {}}}),
            serde_json::json!([1, 2]),
            serde_json::json!(null),
        ] {
            let err = parse(&payload).unwrap_err();
            assert!(
                err.0.contains("runs only its schedules") && err.0.contains("control plane"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_audit_records_actor_names_the_invocation() {
        let mut r = ReplayRequest::scheduled(SWEEP);
        assert_eq!(r.actor(), format!("schedule:{SWEEP} (scheduled sweep)"));
        r.invocation = Some("4f1c".into());
        assert_eq!(
            r.actor(),
            format!("schedule:{SWEEP} [invocation 4f1c] (scheduled sweep)")
        );
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
