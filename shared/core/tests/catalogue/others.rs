//! Dead letters (as the enricher files them), operator input and configuration values.

use super::*;

pub fn dead_letters() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |kind, name, shown, expect, got| cases.push(Case::new(kind, name, shown, expect, got));
    // Dead letters, as the enricher files them.
    let poison = builders::body(&tx(2));
    let mut dl = |name: &'static str, shown: &str, m: SqsMessage, expect: &'static str| {
        let got = enrich(&m);
        add("dead letter", name, short(shown), expect, got);
    };
    let consumer_attrs = [
        (attrs::FAILURE_CODE, "POISON_MESSAGE"),
        (attrs::ROOT_CAUSE, "UNMAPPED_CURRENCY:XAU"),
    ];
    dl(
        "moved by the redrive policy",
        "no attributes",
        dead_letter(&poison, &[]),
        "PENDING POISON_MESSAGE REDRIVEN_BY_SQS",
    );
    dl(
        "an unknown failure code",
        "dlq.failure_code=BANANA, dlq.root_cause=UNMAPPED_CURRENCY:XAU",
        dead_letter(&poison, &[(attrs::FAILURE_CODE, "BANANA"), consumer_attrs[1]]),
        "PENDING POISON_MESSAGE UNMAPPED_CURRENCY:XAU attempts=1 entity=ACME-US currency=USD detail=unknown failure code `BANANA`",
    );
    dl(
        "an attempt count that is not a number",
        "dlq.attempt_count=three",
        dead_letter(
            &poison,
            &[consumer_attrs[0], consumer_attrs[1], (attrs::ATTEMPT_COUNT, "three")],
        ),
        "PENDING POISON_MESSAGE UNMAPPED_CURRENCY:XAU attempts=1",
    );
    dl(
        "a context attribute that is not JSON",
        "dlq.context={not json",
        dead_letter(
            &poison,
            &[consumer_attrs[0], consumer_attrs[1], (attrs::CONTEXT, "{not json")],
        ),
        "PENDING POISON_MESSAGE UNMAPPED_CURRENCY:XAU",
    );
    dl(
        "no root cause",
        "dlq.failure_code=POISON_MESSAGE only",
        dead_letter(&poison, &consumer_attrs[..1]),
        "PENDING POISON_MESSAGE UNKNOWN",
    );
    dl(
        "an empty entity label",
        "body \"ledger_entity\": \"\"",
        dead_letter(
            &tx_with(|m| m.ledger_entity = String::new()),
            &[consumer_attrs[0], (attrs::ROOT_CAUSE, "SCHEMA_VIOLATION:ledger_entity")],
        ),
        "PENDING POISON_MESSAGE SCHEMA_VIOLATION:ledger_entity attempts=1 entity=- currency=USD",
    );
    dl(
        "a body that is not JSON",
        "body %%%",
        dead_letter(
            "%%%",
            &[
                (attrs::FAILURE_CODE, "UNRECOVERABLE_PAYLOAD"),
                (attrs::ROOT_CAUSE, "NOT_JSON"),
            ],
        ),
        "QUARANTINED UNRECOVERABLE_PAYLOAD NOT_JSON attempts=1 entity=- currency=-",
    );
    cases
}

pub fn operator_input() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |kind, name, shown, expect, got| cases.push(Case::new(kind, name, shown, expect, got));
    // Operator input: a control plane's body asking for a replay (`dlqctl replay`), the replay
    // function's payloads, and reference data.
    let mut op = |name: &'static str, shown: String, got: String, expect: &'static str| {
        add("operator", name, short(&shown), expect, got)
    };
    for (name, body, expect) in [
        (
            "replay without a reason",
            serde_json::json!({"operation": "replay"}),
            "refused (400): invalid replay request: `reason` must say why this replay is run",
        ),
        (
            "replay naming who runs it",
            serde_json::json!({"operation": "replay", "reason": "fixed", "triggered_by": "alice"}),
            "refused (400): not a command: unknown field `triggered_by`",
        ),
        (
            "replay with a misspelt field",
            serde_json::json!({"operation": "replay", "reason": "fixed", "dryrun": true}),
            "refused (400): not a command: unknown field `dryrun`",
        ),
        (
            "replay with a blank reason",
            serde_json::json!({"operation": "replay", "reason": " "}),
            "refused (400): invalid replay request: `reason` must say why this replay is run",
        ),
        (
            "replay with a two-line reason",
            serde_json::json!({"operation": "replay", "reason": "fixed\n[invocation forged]"}),
            "refused (400): invalid replay request: `reason` is one line of at most 1000 bytes",
        ),
        (
            "replay of zero items",
            serde_json::json!({"operation": "replay", "reason": "fixed", "max_items": 0}),
            "refused (400): invalid replay request: `max_items` must be at least 1",
        ),
        (
            "replay ids not a list",
            serde_json::json!({"operation": "replay", "reason": "fixed", "envelope_ids": "env_1"}),
            "refused (400): not a command: invalid type: string \"env_1\", expected a sequence",
        ),
        (
            "replay of segment 4 of 4",
            serde_json::json!({"operation": "replay", "reason": "fixed", "segment": "4/4"}),
            "refused (400): invalid replay request: segment \"4/4\" must be INDEX/COUNT",
        ),
        (
            "replay by a maker",
            serde_json::json!({"operation": "replay", "reason": "fixed", "max_items": 5, "dry_run": true}),
            "accepted: dry_run=true max_items=Some(5) triggered_by=arn:aws:sts::123456789012:assumed-role/recon-dlq-maker/alice",
        ),
    ] {
        op(name, body.to_string(), remediation(body), expect);
    }
    for (name, payload, expect) in [
        (
            "replay function asked for a replay by hand",
            serde_json::json!({"reason": "fixed", "triggered_by": "alice", "dry_run": true}),
            "refused: invalid replay request: the replay function runs only its schedules",
        ),
        (
            "replay function asked to run an approved request",
            serde_json::json!({"approved_request": "apr_1"}),
            "refused: invalid replay request: the replay function runs only its schedules",
        ),
        (
            "replay function payload not an object",
            serde_json::json!([1, 2]),
            "refused: invalid replay request: the replay function runs only its schedules",
        ),
        (
            "scheduled event naming another schedule",
            serde_json::json!({"detail-type": "Scheduled Event", "resources": ["rule/mallory"]}),
            "refused: invalid replay request: a scheduled event must come from this deployment's sweep schedule",
        ),
        (
            "scheduled event naming its own actor",
            serde_json::json!({"detail-type": "Scheduled Event", "resources": ["recon-dlq-replay-sweep"], "triggered_by": "mallory"}),
            "accepted: sweep triggered_by=schedule:recon-dlq-replay-sweep",
        ),
        (
            "the seal schedule's event",
            serde_json::json!({"detail-type": "Scheduled Event", "resources": ["recon-dlq-audit-seal"]}),
            "accepted: seal",
        ),
    ] {
        op(name, payload.to_string(), replay(payload), expect);
    }
    op(
        "currency code of one letter",
        "ref add X".into(),
        operator(input::currency_code("X")),
        "refused: currency code `X` must be 3 to 12 letters or digits",
    );
    op(
        "currency code in lower case",
        "ref add xau".into(),
        operator(input::currency_code("xau")),
        "accepted: XAU",
    );
    op(
        "29 minor units",
        "ref add XAU --minor-units 29".into(),
        operator(input::minor_units(29)),
        "refused: minor units must be at most 28",
    );
    op(
        "period month 13",
        "period close ACME-US 2026-13".into(),
        operator(input::period("2026-13")),
        "refused: period `2026-13` must be YYYY-MM",
    );
    op(
        "period as a date",
        "period close ACME-US 2026-10-01".into(),
        operator(input::period("2026-10-01")),
        "refused: period `2026-10-01` must be YYYY-MM",
    );
    op(
        "entity with a space",
        "period close 'ACME US' 2026-10".into(),
        operator(input::entity("ACME US")),
        "refused: `ledger_entity` may hold only letters, digits, `-`, `_` and `.`",
    );
    op(
        "entity in lower case",
        "period close acme-us 2026-10".into(),
        operator(input::entity("acme-us")),
        "accepted: ACME-US",
    );
    cases
}

pub fn configuration() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |kind, name, shown, expect, got| cases.push(Case::new(kind, name, shown, expect, got));
    // Configuration values, as each function reads its environment.
    for (name, vars, expect) in [
        (
            "max attempts not a number",
            vec![("DLQ_MAX_ATTEMPTS", "three")],
            "refused: DLQ_MAX_ATTEMPTS=\"three\" is not valid; allowed: 1-1000 receives",
        ),
        (
            "max attempts zero",
            vec![("DLQ_MAX_ATTEMPTS", "0")],
            "refused: DLQ_MAX_ATTEMPTS=\"0\" is not valid; allowed: 1-1000 receives",
        ),
        (
            "backoff cap below its base",
            vec![("DLQ_BACKOFF_BASE_SECS", "60"), ("DLQ_BACKOFF_CAP_SECS", "10")],
            "refused: DLQ_BACKOFF_CAP_SECS=\"10\" is not valid; allowed: DLQ_BACKOFF_BASE_SECS (60) to 43200 seconds",
        ),
        (
            "backoff cap above SQS's 12 hours",
            vec![("DLQ_BACKOFF_CAP_SECS", "99999")],
            "refused: DLQ_BACKOFF_CAP_SECS=\"99999\" is not valid; allowed: 1-43200 seconds, not below the base",
        ),
        (
            "batch concurrency zero",
            vec![("DLQ_BATCH_CONCURRENCY", "0")],
            "refused: DLQ_BATCH_CONCURRENCY=\"0\" is not valid; allowed: 1-100 messages",
        ),
        (
            "main queue URL unset",
            vec![("DLQ_MAIN_QUEUE_URL", "")],
            "refused: DLQ_MAIN_QUEUE_URL is not set: the main queue (the consumer reads it, replay re-injects into it), an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)",
        ),
        (
            "a queue name where its URL belongs",
            vec![("DLQ_DEAD_LETTER_QUEUE_URL", "acme-dead-letter")],
            "refused: DLQ_DEAD_LETTER_QUEUE_URL=\"acme-dead-letter\" is not valid; allowed: an SQS queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)",
        ),
        (
            "table name blank",
            vec![("DLQ_LEDGER_TABLE", " ")],
            "refused: DLQ_LEDGER_TABLE is not set: the ledger table, a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)",
        ),
        (
            "bucket name in capitals",
            vec![("DLQ_QUARANTINE_BUCKET", "Acme-Quarantine")],
            "refused: DLQ_QUARANTINE_BUCKET=\"Acme-Quarantine\" is not valid; allowed: an S3 bucket name (3-63 of a-z 0-9 . -, starting and ending with a letter or digit)",
        ),
        (
            "bucket owner not an account id",
            vec![("DLQ_QUARANTINE_BUCKET_OWNER", "acme")],
            "refused: DLQ_QUARANTINE_BUCKET_OWNER=\"acme\" is not valid; allowed: an AWS account id (12 digits)",
        ),
        (
            "no replays allowed per envelope",
            vec![("DLQ_REPLAY_MAX_PER_ENVELOPE", "0")],
            "refused: DLQ_REPLAY_MAX_PER_ENVELOPE=\"0\" is not valid; allowed: 1-100 replays",
        ),
        (
            "negative replay rate",
            vec![("DLQ_REPLAY_RATE_PER_SEC", "-1")],
            "refused: DLQ_REPLAY_RATE_PER_SEC=\"-1\" is not valid; allowed: 0-10000 messages per second, 0 for no limit",
        ),
        (
            "fractional high-water mark",
            vec![("DLQ_OVERFLOW_HIGH_WATER", "1.5")],
            "refused: DLQ_OVERFLOW_HIGH_WATER=\"1.5\" is not valid; allowed: 0-1000000000 PENDING envelopes",
        ),
        (
            "replay window of zero days",
            vec![("DLQ_REPLAY_WINDOW_DAYS", "0")],
            "refused: DLQ_REPLAY_WINDOW_DAYS=\"0\" is not valid; allowed: 1-3650 days",
        ),
        (
            "replay page size of a million",
            vec![("DLQ_REPLAY_PAGE_SIZE", "1000000")],
            "refused: DLQ_REPLAY_PAGE_SIZE=\"1000000\" is not valid; allowed: 1-1000 envelopes per page",
        ),
        (
            "a deadline margin longer than the consumer's run",
            vec![("DLQ_DEADLINE_MARGIN_MS", "60000")],
            "refused: DLQ_DEADLINE_MARGIN_MS=\"60000\" is not valid; allowed: 100-15000 milliseconds",
        ),
        (
            "metrics in AWS's own namespace",
            vec![("DLQ_METRICS_NAMESPACE", "AWS/Lambda")],
            "refused: DLQ_METRICS_NAMESPACE=\"AWS/Lambda\" is not valid; allowed: a CloudWatch namespace (1-255 of A-Z a-z 0-9 . - _ / # :, not AWS/…)",
        ),
    ] {
        let shown = vars
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        add("config", name, shown, expect, config(&vars));
    }
    cases
}
