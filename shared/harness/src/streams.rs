//! The stand-in for Lambda's DynamoDB stream event-source mapping on the local stack: read a
//! table's stream from the start (every shard, oldest record first), deliver it in batches as the
//! Lambda event `reference-audit` receives, and stop at the first record a batch reports failed.

use aws_lambda_events::dynamodb::Event;
use aws_sdk_dynamodbstreams::types::{AttributeValue, Record, ShardIteratorType};
use recon_aws::{AwsClients, ClientTimeouts, Target};
use recon_core::ports::AuditLog;
use recon_core::reference_audit::ReferenceAuditor;
use serde_json::{Value, json};

/// Deliver every record of `table`'s stream to `auditor`. Returns the number of records delivered.
/// Records are delivered again on every call (from the start): the auditor's ids make that
/// harmless, as a redelivery by Lambda is.
pub async fn pump_stream<A: AuditLog>(
    clients: &AwsClients,
    table: &str,
    auditor: &ReferenceAuditor<A>,
) -> Result<usize, String> {
    let Target::Local { dynamodb_url, .. } = &clients.target else {
        return Err("the stream pump runs against the local stack only".into());
    };
    let shared = recon_aws::client::shared_config(&clients.target, ClientTimeouts::INTERACTIVE).await;
    let streams = aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&shared)
            .endpoint_url(dynamodb_url)
            .build(),
    );
    let described = clients
        .dynamodb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| format!("DescribeTable: {e}"))?;
    let arn = described
        .table()
        .and_then(|t| t.latest_stream_arn())
        .ok_or_else(|| format!("table {table} has no stream"))?
        .to_owned();
    let stream = streams
        .describe_stream()
        .stream_arn(&arn)
        .send()
        .await
        .map_err(|e| format!("DescribeStream: {e}"))?;
    let shards: Vec<String> = stream
        .stream_description()
        .map(|d| {
            d.shards()
                .iter()
                .filter_map(|s| s.shard_id().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut delivered = 0;
    for shard in shards {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(&arn)
            .shard_id(&shard)
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .map_err(|e| format!("GetShardIterator: {e}"))?
            .shard_iterator
            .map(|s| s.to_owned());
        while let Some(it) = iterator {
            let out = streams
                .get_records()
                .shard_iterator(it)
                .send()
                .await
                .map_err(|e| format!("GetRecords: {e}"))?;
            if out.records().is_empty() {
                break;
            }
            let event: Event = serde_json::from_value(json!({
                "Records": out.records().iter().map(|r| lambda_record(r, &arn)).collect::<Vec<_>>()
            }))
            .map_err(|e| format!("stream records as a Lambda event: {e}"))?;
            let response = auditor.handle(&event).await;
            if let Some(f) = response.batch_item_failures.first() {
                return Err(format!("the auditor reported record {:?} failed", f.item_identifier));
            }
            delivered += event.records.len();
            iterator = out.next_shard_iterator().map(str::to_owned);
        }
    }
    Ok(delivered)
}

/// One stream record as Lambda delivers it.
fn lambda_record(r: &Record, arn: &str) -> Value {
    let change = r.dynamodb();
    let image = |m: Option<&std::collections::HashMap<String, AttributeValue>>| {
        m.map(|m| Value::Object(m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect()))
    };
    json!({
        "eventID": r.event_id(),
        "eventName": r.event_name().map(|n| n.as_str()),
        "eventSource": "aws:dynamodb",
        "eventVersion": "1.1",
        "awsRegion": r.aws_region().unwrap_or("us-east-1"),
        "eventSourceARN": arn,
        "dynamodb": {
            "ApproximateCreationDateTime": change.and_then(|c| c.approximate_creation_date_time()).map(|t| t.secs()),
            "Keys": image(change.and_then(|c| c.keys.as_ref())),
            "NewImage": image(change.and_then(|c| c.new_image.as_ref())),
            "OldImage": image(change.and_then(|c| c.old_image.as_ref())),
            "SequenceNumber": change.and_then(|c| c.sequence_number()),
            "SizeBytes": change.and_then(|c| c.size_bytes()).unwrap_or(0),
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
    })
}

/// An attribute value in DynamoDB's JSON.
fn attribute(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(_) => json!({ "NULL": true }),
        AttributeValue::Ss(v) => json!({ "SS": v }),
        AttributeValue::Ns(v) => json!({ "NS": v }),
        AttributeValue::L(v) => json!({ "L": v.iter().map(attribute).collect::<Vec<_>>() }),
        AttributeValue::M(m) => {
            json!({ "M": m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect::<serde_json::Map<_, _>>() })
        }
        _ => json!({ "NULL": true }),
    }
}
