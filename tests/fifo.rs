//! What SQS carries with a message, on the real local stack (LocalStack's SQS): FIFO groups —
//! producers set the message group to the ledger entity; each entity's transactions are consumed
//! in order, a dead letter keeps its group, and a replay goes back into that group with a
//! deduplication id of its own, posted once — and the X-Ray trace header, which follows a
//! transaction from its delivery through the DLQ to its replay.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use recon_core::domain::{EnvelopeStatus, NewMessage};
use recon_core::ports::OutgoingMessage;
use recon_core::replay::{ReplayRequest, Selector};
use recon_harness::pump::Poll;
use recon_harness::stack::TestStack;
use recon_testkit::builders::{body, tx, tx_in};

fn message(m: &NewMessage) -> OutgoingMessage {
    OutgoingMessage {
        body: body(m),
        // The producer's contract on a FIFO queue: the group is the ledger entity.
        group_id: Some(m.ledger_entity.clone()),
        dedup_id: Some(m.message_id.clone()),
        ..Default::default()
    }
}

fn in_entity(m: NewMessage, entity: &str) -> NewMessage {
    NewMessage {
        ledger_entity: entity.into(),
        ..m
    }
}

fn manual() -> ReplayRequest {
    ReplayRequest {
        selector: Selector::default(),
        dry_run: false,
        reason: "XAU mapped".into(),
        triggered_by: "integration-test".into(),
        invocation: None,
        scheduled: false,
        quarantine: false,
    }
}

/// Map XAU, replay, and receive the one copy it re-injected (left visible).
async fn replay_the_fix(s: &TestStack) -> (recon_core::replay::ReplayReport, aws_sdk_sqs::types::Message) {
    s.map_currency("XAU", 4).await;
    let report = s.replayer().run(&manual(), None).await.unwrap();
    assert_eq!(report.reinjected, 1, "{report:#?}");
    let mut copies = s.main_queue().receive(10, 1, Some(0)).await.unwrap();
    assert_eq!(copies.len(), 1);
    (report, copies.remove(0))
}

fn system(m: &aws_sdk_sqs::types::Message, name: MessageSystemAttributeName) -> Option<&str> {
    m.attributes().and_then(|a| a.get(&name)).map(String::as_str)
}

#[tokio::test]
async fn each_entity_keeps_its_order_and_a_replay_goes_back_into_its_group_once() {
    let s = TestStack::new_fifo("ff-order").await;
    assert!(s.stack.main_queue_url.ends_with(".fifo") && s.stack.dlq_url.ends_with(".fifo"));
    // Two entities, interleaved; the second of ACME-US is poison (an unmapped currency).
    let us: Vec<NewMessage> = vec![
        in_entity(tx(1), "ACME-US"),
        in_entity(tx_in(2, "XAU", "2.0625"), "ACME-US"),
        in_entity(tx(3), "ACME-US"),
        in_entity(tx(4), "ACME-US"),
    ];
    let de: Vec<NewMessage> = (5..=7).map(|n| in_entity(tx(n), "ACME-DE")).collect();
    let sent: Vec<OutgoingMessage> = [&us[0], &de[0], &us[1], &de[1], &us[2], &de[2], &us[3]]
        .into_iter()
        .map(message)
        .collect();
    s.main_queue().send_batch(&sent).await.unwrap();

    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;
    let postings = s.postings().await;
    assert_eq!(postings.len(), 6, "three of each entity but the poison one");
    // Within each entity, commits follow the order the producer sent.
    for entity in ["ACME-US", "ACME-DE"] {
        let order: Vec<&str> = sent
            .iter()
            .filter(|m| m.group_id.as_deref() == Some(entity))
            .filter_map(|m| m.dedup_id.as_deref())
            .collect();
        let mut mine: Vec<_> = postings.iter().filter(|p| p.ledger_entity == entity).collect();
        mine.sort_by_key(|p| order.iter().position(|id| *id == p.message_id));
        assert!(
            mine.windows(2).all(|w| w[0].committed_at <= w[1].committed_at),
            "{entity} committed out of order: {:?}",
            mine.iter().map(|p| (&p.message_id, p.committed_at)).collect::<Vec<_>>()
        );
    }

    // The dead letter stays in its entity's group.
    let dead = s.dlq().receive(10, 1, Some(0)).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        system(&dead[0], MessageSystemAttributeName::MessageGroupId),
        Some("ACME-US")
    );
    s.pump_dlq(&s.enricher(10_000)).await;
    let envelope = s.envelopes().await.remove(0);
    assert_eq!(envelope.original.message_group_id.as_deref(), Some("ACME-US"));

    // Fixed, replayed: back into the same group, with a deduplication id of the replay's own.
    let (report, copy) = replay_the_fix(&s).await;
    assert_eq!(
        system(&copy, MessageSystemAttributeName::MessageGroupId),
        Some("ACME-US")
    );
    assert_eq!(
        system(&copy, MessageSystemAttributeName::MessageDeduplicationId),
        Some(format!("{}-{}", envelope.envelope_id, report.replay_id).as_str())
    );
    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;
    assert_eq!(s.postings().await.len(), 7);
    assert_eq!(s.envelopes().await[0].status, EnvelopeStatus::Replayed);

    // A second replay finds nothing to do: posted once.
    let again = s.replayer().run(&manual(), None).await.unwrap();
    assert_eq!(again.reinjected, 0, "{again:#?}");
    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;
    assert_eq!(s.postings().await.len(), 7);
    s.cleanup().await;
}

#[tokio::test]
async fn the_trace_header_follows_the_message_to_the_dlq_the_envelope_and_the_replayed_copy() {
    let s = TestStack::new("rp-trace").await;
    let header = "Root=1-67891233-abcdef012345678912345678;Parent=463ac35c9f6413ad;Sampled=1";
    let sent = OutgoingMessage {
        body: body(&tx_in(21, "XAU", "21.0625")),
        trace_header: Some(header.into()),
        ..Default::default()
    };
    s.main_queue().send_batch(&[sent]).await.unwrap().remove(0).unwrap();
    s.pump(&s.consumer_with(s.ledger(), s.main_queue())).await;

    // The dead letter carries the original's trace as its own system attribute (seen without
    // hiding it), and the envelope keeps it.
    let dead = s.dlq().receive(10, 1, Some(0)).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        system(&dead[0], MessageSystemAttributeName::AwsTraceHeader),
        Some(header)
    );
    s.pump_dlq(&s.enricher(10_000)).await;
    let envelope = s.envelopes().await.remove(0);
    assert_eq!(envelope.original.aws_trace_header.as_deref(), Some(header));

    // The replayed copy continues the same trace.
    let (_, copy) = replay_the_fix(&s).await;
    assert_eq!(system(&copy, MessageSystemAttributeName::AwsTraceHeader), Some(header));
    s.cleanup().await;
}
