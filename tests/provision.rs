//! The local stack as `recon_harness::provision` builds it from `infra/template.yaml`: what the code
//! relies on and no request of the other suites would show.

use aws_sdk_sqs::types::QueueAttributeName;
use recon_harness::pump::Poll;
use recon_harness::stack::TestStack;

/// What the code relies on but no request shows: the reservations expire by the attribute the
/// code writes, the reference table streams both images, a dead letter outlives the main queue's
/// retention and the largest message fits both queues, the bucket locks objects by default (all
/// built from the template).
/// The keys and indexes the code queries need no such test: a wrong one fails every test by use.
#[tokio::test]
async fn the_local_stack_is_built_as_the_template_declares_it() {
    use recon_core::resources::keys;
    let s = TestStack::new("dp-built").await;
    let n = &s.stack.names;
    let ttl = s
        .clients
        .dynamodb
        .describe_time_to_live()
        .table_name(&n.dedup_table)
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some(keys::DEDUP_TTL));
    let reference = s
        .clients
        .dynamodb
        .describe_table()
        .table_name(&n.reference_table)
        .send()
        .await
        .unwrap();
    let stream = reference.table().and_then(|t| t.stream_specification()).unwrap();
    assert_eq!(
        stream.stream_view_type(),
        Some(&aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)
    );
    // The control plane's decision key: HMAC, under the alias its settings name.
    let alias = s.control_settings().decision_key;
    let key = s.clients.kms().describe_key().key_id(&alias).send().await.unwrap();
    let key = key.key_metadata().unwrap();
    assert_eq!(
        (key.key_spec(), key.key_usage()),
        (
            Some(&aws_sdk_kms::types::KeySpec::Hmac256),
            Some(&aws_sdk_kms::types::KeyUsageType::GenerateVerifyMac)
        ),
        "{alias}"
    );
    let attributes = |url: String| {
        let sqs = s.clients.sqs.clone();
        async move {
            let out = sqs
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .unwrap();
            let get = |a: QueueAttributeName| -> u64 {
                out.attributes()
                    .and_then(|m| m.get(&a))
                    .and_then(|v| v.parse().ok())
                    .unwrap()
            };
            (
                get(QueueAttributeName::MessageRetentionPeriod),
                get(QueueAttributeName::MaximumMessageSize),
            )
        }
    };
    let (main_retention, main_size) = attributes(s.stack.main_queue_url.clone()).await;
    let (dlq_retention, dlq_size) = attributes(s.stack.dlq_url.clone()).await;
    // A dead letter outlives its time on the main queue, and the largest message fits both.
    assert!(dlq_retention > main_retention, "{dlq_retention} <= {main_retention}");
    let largest = u64::from(recon_core::resources::MAX_MESSAGE_BYTES);
    assert_eq!((main_size, dlq_size), (largest, largest));
    // Only the main queue may move its dead letters to the DLQ: the ARN the template writes out
    // (a reference back would be a cycle) is the main queue's own.
    let dlq = s.clients.sqs.get_queue_attributes().queue_url(&s.stack.dlq_url);
    let dlq = dlq
        .attribute_names(QueueAttributeName::RedriveAllowPolicy)
        .send()
        .await
        .unwrap();
    let allow = dlq
        .attributes()
        .and_then(|m| m.get(&QueueAttributeName::RedriveAllowPolicy));
    let allow: serde_json::Value = serde_json::from_str(allow.unwrap()).unwrap();
    let main_arn = recon_aws::stack::queue_arn(&s.clients, &s.stack.main_queue_url)
        .await
        .unwrap();
    assert_eq!(allow["redrivePermission"], "byQueue");
    assert_eq!(allow["sourceQueueArns"], serde_json::json!([main_arn]));
    let retention = recon_harness::provision::worm_retention(&s.clients, &n.bucket())
        .await
        .unwrap();
    assert_eq!(
        retention,
        Some((aws_sdk_s3::types::ObjectLockRetentionMode::Compliance, 1))
    );
}

/// Every object the WORM adapter writes carries its own COMPLIANCE retain-until date, the bucket's
/// default retention away (on AWS the bucket policy refuses any other put; LocalStack enforces no
/// bucket policy, so the adapter's side is what this proves).
#[tokio::test]
async fn every_object_written_carries_its_own_compliance_retention() {
    use recon_core::ports::Worm;
    let s = TestStack::new("pv-lock").await;
    let bucket = s.stack.names.bucket();
    let worm = recon_aws::s3::S3Worm::new(s.clients.s3.clone(), &bucket);
    let before = chrono::Utc::now();
    worm.put("probe/retention.json", b"{}").await.unwrap();
    let got = s
        .clients
        .s3
        .get_object_retention()
        .bucket(&bucket.name)
        .expected_bucket_owner(&bucket.owner)
        .key("probe/retention.json")
        .send()
        .await
        .unwrap();
    let retention = got.retention().unwrap();
    assert_eq!(
        retention.mode(),
        Some(&aws_sdk_s3::types::ObjectLockRetentionMode::Compliance)
    );
    let until = retention.retain_until_date().unwrap().secs();
    let (_, days) = recon_harness::provision::worm_retention(&s.clients, &bucket)
        .await
        .unwrap()
        .unwrap();
    // Its own date, not the bucket's default applied at the put (which would end `days` after it
    // to the second): the start of a day at least `days` whole days away.
    let own = recon_aws::s3::retain_until(before, i64::from(days));
    assert!(until >= own.timestamp(), "{until} < {own}");
}

/// A dead letter the enricher keeps failing on is parked behind the DLQ after the template's
/// `EnricherMaxReceiveCount` receives, never left there to expire (the redrive is the template's,
/// the local stack built from it).
#[tokio::test]
async fn a_dead_letter_the_enricher_keeps_failing_on_is_parked() {
    use recon_harness::template::Template;
    let s = TestStack::new("pv-park").await;
    let names = &s.stack.names;
    let deployment = Template::ours()
        .unwrap()
        .deploy(
            &names.account,
            "us-east-1",
            &[("StackPrefix", serde_json::json!(names.prefix))],
        )
        .unwrap();
    let budget: u32 = deployment
        .parameter("EnricherMaxReceiveCount")
        .unwrap()
        .parse()
        .unwrap();
    let parked_name = deployment.text("ParkingQueue", "QueueName").unwrap();
    let sqs = &s.clients.sqs;
    sqs.send_message()
        .queue_url(&s.stack.dlq_url)
        .message_body("{\"not\": \"enveloped\"}")
        .send()
        .await
        .unwrap();
    // The enricher fails it: received, never deleted, visible again at once.
    for attempt in 1..=budget {
        let got = s.dlq().receive(1, 1, Some(0)).await.unwrap();
        assert_eq!(got.len(), 1, "receive {attempt} of {budget}");
    }
    assert!(
        s.dlq().receive(1, 1, Some(0)).await.unwrap().is_empty(),
        "still in the DLQ after {budget} receives"
    );
    let parked_url = sqs
        .get_queue_url()
        .queue_name(&parked_name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let parked = sqs
        .receive_message()
        .queue_url(&parked_url)
        .wait_time_seconds(2)
        .send()
        .await
        .unwrap();
    assert_eq!(parked.messages().len(), 1);
}
