//! `dlqctl reconcile --period P --fan-out N`: the period's ledger read as N requests to the
//! control plane (`reconcile-segment`, which only the auditor role may ask), one segment each, for
//! a ledger one machine reads too slowly. Each request is sent this process's links (what makes a
//! posting part of a lineage), so every segment keeps exactly the postings a read here would
//! keep, and returns its segment's read: those postings whole, the rest counted. The reads merge
//! exactly (`LedgerRead::merge`); what the merged read does not meet is looked up here, as a local
//! read of the segments does. At most `at_once` run at a time (the control function's reserved
//! concurrency bounds them too).

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use recon_aws::AwsClients;
use recon_core::domain::Segment;
use recon_core::reconcile::{LedgerRead, Links, SegmentRead};
use recon_core::resources::ResourceNames;

/// Over how many segments a fan-out reads, and how many at once.
#[derive(Clone, Debug)]
pub struct FanOut {
    pub segments: u32,
    /// Requests running at once.
    pub at_once: u32,
}

/// The period's ledger read with `links`, segment by segment by the control plane, merged.
pub async fn read(
    clients: &AwsClients,
    names: &ResourceNames,
    f: &FanOut,
    period: &str,
    links: &Links,
) -> Result<LedgerRead> {
    let segments = Segment::all_of(f.segments);
    if segments.is_empty() {
        bail!("--fan-out takes 1 to {} segments", Segment::MAX);
    }
    let at_once = usize::try_from(f.at_once.max(1)).unwrap_or(1);
    let control = crate::control::connect_as_cli(clients, names).await?;
    let reads: Vec<LedgerRead> = futures::stream::iter(segments)
        .map(|s| ask(&control, period, s, links))
        .buffer_unordered(at_once)
        .try_collect()
        .await?;
    let mut read = LedgerRead::default();
    for r in reads {
        read.merge(r);
    }
    Ok(read)
}

/// Segment `s` of `period` read with `links`; refused when the links are larger than what one
/// request to the control plane may carry.
fn segment_read(period: &str, s: Segment, links: &Links) -> Result<SegmentRead> {
    let max = recon_core::control::http::MAX_BODY_BYTES;
    let request = SegmentRead {
        period: period.to_owned(),
        segment: format!("{}/{}", s.index, s.of),
        links: links.clone(),
    };
    let size = serde_json::to_vec(&request)?.len();
    if size > max {
        bail!(
            "the period's links (what makes a posting part of a lineage) are {size} bytes, above what one request may carry ({max}): reconcile the period in this process (without --fan-out)"
        );
    }
    Ok(request)
}

/// One segment asked of the control plane (as the caller: an auditor).
async fn ask(control: &crate::control::ControlPlane, period: &str, s: Segment, links: &Links) -> Result<LedgerRead> {
    let request = segment_read(period, s, links)?;
    let segment = request.segment.clone();
    let read = control
        .ask(&recon_core::control::Command::ReconcileSegment(request))
        .await
        .with_context(|| format!("segment {segment} of {period}"))?;
    serde_json::from_value(read).with_context(|| format!("segment {segment}'s answer from the control plane"))
}
