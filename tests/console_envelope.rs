//! The console's envelope page on the local stack: one envelope with its WORM copy as the bucket
//! holds it, the audit records about it, and its lineage (what each copy became, who holds the
//! transaction in the ledger). Each part is watched telling a change in the stores.

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::primitives::ByteStream;
use recon_core::domain::EnvelopeStatus;
use recon_core::ports::EnvelopeStore;
use recon_harness::stack::TestStack;
use serde_json::{Value, json};

use crate::control::{Control, xau};

fn kinds(page: &Value) -> Vec<&str> {
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn an_envelope_page_shows_its_worm_copy_its_records_and_what_its_copy_became() {
    let s = TestStack::new("con-envelope").await;
    s.remediated(&[xau(1).to_body().unwrap()], 1000).await;
    let store = s.envelope_store();
    let (replayed, _) = store.list_by_status(EnvelopeStatus::Replayed, None, 10).await.unwrap();
    let e = replayed.first().expect("the sweep replayed the XAU dead letter");
    let c = Control::new(&s).await;
    let page = || {
        c.ask(
            "viewer",
            "vera",
            json!({"operation": "envelope", "envelope_id": e.envelope_id}),
        )
    };

    let (status, one) = page().await;
    assert_eq!(status, 200, "{one}");
    // Its records, in time order: the consumer's dead letter, the enricher's envelope, the
    // replay's re-injection.
    assert_eq!(
        kinds(&one),
        ["DEAD_LETTERED", "ENRICHED", "REPLAY_REINJECTED"],
        "{}",
        one["records"]
    );
    // The WORM copy: one version, whose bytes hash to what the envelope names.
    let worm = &one["worm"];
    assert_eq!(worm["versions"].as_array().map(Vec::len), Some(1), "{worm}");
    assert_eq!(worm["first_version_matches"], true, "{worm}");
    // Its copy posted: the ledger's posting is the copy's delivery.
    let copy = &one["lineage"]["copies"][0];
    assert_eq!(copy["fate"], "POSTED", "{}", one["lineage"]);
    let held_by = one["lineage"]["ledger"][0]["held_by"].as_str().unwrap_or_default();
    assert!(
        held_by.contains(copy["sqs_message_id"].as_str().unwrap()),
        "{}",
        one["lineage"]
    );
    assert!(one["lineage"]["replay_of"].is_null());
    assert_eq!(
        one["lineage"]["ledger"][0]["unlisted_delivery"], false,
        "{}",
        one["lineage"]
    );

    // A newer version at the WORM key (Object Lock allows one): listed, and the first version
    // is still the one read.
    let key = worm["key"].as_str().unwrap();
    s.clients
        .s3
        .put_object()
        .bucket(&s.stack.names.quarantine_bucket)
        .key(key)
        .body(ByteStream::from_static(b"{}"))
        .send()
        .await
        .expect("Object Lock does not refuse a newer version");
    let (_, one) = page().await;
    assert_eq!(
        one["worm"]["versions"].as_array().map(Vec::len),
        Some(2),
        "{}",
        one["worm"]
    );
    assert_eq!(one["worm"]["first_version_matches"], true, "{}", one["worm"]);
    assert_eq!(one["worm"]["envelope_matches"], true, "{}", one["worm"]);
    assert_eq!(one["unread"], json!([]), "{one}");
    // The envelope changed in the table (a field its copy keeps), its hash of the copy left:
    // the copy's bytes still hash to it, but the envelope no longer makes them.
    let change = |expression: &'static str, value: &str| {
        s.clients
            .dynamodb
            .update_item()
            .table_name(&s.stack.names.envelope_table)
            .key("envelope_id", AttributeValue::S(e.envelope_id.clone()))
            .update_expression(expression)
            .expression_attribute_values(":x", AttributeValue::S(value.to_owned()))
            .send()
    };
    change("SET error_detail = :x", "a kinder story").await.unwrap();
    let (_, one) = page().await;
    assert_eq!(one["worm"]["first_version_matches"], true, "{}", one["worm"]);
    assert_eq!(one["worm"]["envelope_matches"], false, "{}", one["worm"]);
    // The envelope's hash of its copy changed too: the copy no longer hashes to it.
    change("SET worm.sha256 = :x", &"0".repeat(64)).await.unwrap();
    let (_, one) = page().await;
    assert_eq!(one["worm"]["first_version_matches"], false, "{}", one["worm"]);

    // The copy's posting gone: nothing holds the transaction, and the copy was not seen.
    let posting = s.postings().await.into_iter().next().expect("the copy's posting");
    s.delete_posting(&posting).await;
    let (_, one) = page().await;
    assert_eq!(one["lineage"]["copies"][0]["fate"], "NOT_SEEN", "{}", one["lineage"]);
    assert!(one["lineage"]["ledger"][0]["held_by"].is_null(), "{}", one["lineage"]);
    // Back, and the envelope's replays gone from it (as a replay that lost its claim after
    // sending leaves it): the delivery that holds the transaction is one the page does not list.
    s.restore_posting(&posting).await;
    s.clients
        .dynamodb
        .update_item()
        .table_name(&s.stack.names.envelope_table)
        .key("envelope_id", AttributeValue::S(e.envelope_id.clone()))
        .update_expression("REMOVE replays")
        .send()
        .await
        .unwrap();
    let (_, one) = page().await;
    assert_eq!(one["lineage"]["copies"], json!([]), "{}", one["lineage"]);
    assert_eq!(
        one["lineage"]["ledger"][0]["unlisted_delivery"], true,
        "{}",
        one["lineage"]
    );
    s.cleanup().await;
}
