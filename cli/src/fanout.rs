//! `dlqctl reconcile --period P --fan-out N`: the period's ledger read as N invocations of the
//! deployment's replay function at once, one segment each (`{"reconcile_segment": …}`), for a
//! ledger one machine reads too slowly. Each invocation reads the period's exceptions itself
//! (after this process did: exceptions only grow, so its links hold ours) and returns its
//! segment's read: the postings of a lineage whole, the rest counted. The reads merge exactly
//! (`LedgerRead::merge`); what the merged read does not meet is looked up here, as a local read
//! of the segments does.

use anyhow::{Context, Result, bail};
use aws_sdk_lambda::config::timeout::TimeoutConfig;
use aws_sdk_lambda::primitives::Blob;
use recon_aws::AwsClients;
use recon_core::domain::Segment;
use recon_core::reconcile::{LedgerRead, SegmentRead};
use recon_core::resources::REPLAY_TIMEOUT;
use std::time::Duration;

/// Which function a fan-out invokes, where, and over how many segments.
#[derive(Clone, Debug)]
pub struct FanOut {
    pub segments: u32,
    pub function: String,
    /// The Lambda Invoke API (none: AWS's for the region).
    pub endpoint: Option<String>,
}

/// A Lambda client that waits as long as an invocation may run.
fn client(clients: &AwsClients, endpoint: Option<&str>) -> aws_sdk_lambda::Client {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(10))
        .operation_attempt_timeout(REPLAY_TIMEOUT + Duration::from_secs(30))
        .operation_timeout(2 * REPLAY_TIMEOUT)
        .build();
    let mut b = aws_sdk_lambda::config::Builder::from(&clients.config).timeout_config(timeouts);
    if let Some(url) = endpoint {
        b = b.endpoint_url(url);
    }
    aws_sdk_lambda::Client::from_conf(b.build())
}

/// The period's ledger read, segment by segment in the function, merged.
pub async fn read(clients: &AwsClients, f: &FanOut, period: &str) -> Result<LedgerRead> {
    let client = client(clients, f.endpoint.as_deref());
    let segments = Segment::all_of(f.segments);
    if segments.is_empty() {
        bail!("--fan-out takes 1 to {} segments", Segment::MAX);
    }
    let reads =
        futures::future::try_join_all(segments.into_iter().map(|s| invoke(&client, &f.function, period, s))).await?;
    let mut read = LedgerRead::default();
    for r in reads {
        read.merge(r);
    }
    Ok(read)
}

async fn invoke(client: &aws_sdk_lambda::Client, function: &str, period: &str, s: Segment) -> Result<LedgerRead> {
    let segment = format!("{}/{}", s.index, s.of);
    let request = SegmentRead {
        period: period.to_owned(),
        segment: segment.clone(),
    };
    let payload = serde_json::to_vec(&serde_json::json!({ "reconcile_segment": request }))?;
    let out = client
        .invoke()
        .function_name(function)
        .payload(Blob::new(payload))
        .send()
        .await
        .with_context(|| format!("invoking {function} for segment {segment} of {period}"))?;
    let body = out.payload().map(|b| b.as_ref().to_vec()).unwrap_or_default();
    if let Some(error) = out.function_error() {
        bail!(
            "{function} failed on segment {segment} of {period} ({error}): {}",
            crate::text::printable(&String::from_utf8_lossy(&body))
        );
    }
    serde_json::from_slice(&body).with_context(|| format!("segment {segment}'s answer from {function}"))
}
