//! The auditor's evidence at the console: a period's reconciliation, the audit trail verified
//! against the bucket's seals (both reads), and the evidence bundle exported into the bucket,
//! with an address to download it from for a quarter of an hour.
//!
//! An export seals the trail (as `seal` does) and writes the bundle `dlqctl evidence export`
//! writes, of one period, into the Object Lock bucket under its own COMPLIANCE date: the bundle
//! as it was handed over stays there, unchangeable, and an `EVIDENCE_EXPORTED` record names who
//! exported what. It is written in one invocation and held in memory meanwhile (twice, as it is
//! put): a trail too large for that needs `dlqctl evidence export`.

use super::read::read;
use super::{Asked, ControlError, ControlPlane, json};
use crate::domain::AuditKind;
use crate::domain::approval::Refused;
use crate::ports::{EnvelopesOfPeriod, LedgerReader, RecordsOfPeriod, Signer, Worm};
use crate::replay::ReplayPorts;

/// Ledger segments a reconciliation reads at once.
const SEGMENTS: u32 = 4;
/// How long an exported bundle's download address is valid.
pub const DOWNLOAD_VALID_FOR: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl<P: ReplayPorts, G: Signer> ControlPlane<P, G>
where
    P::Ledger: LedgerReader,
    P::Store: EnvelopesOfPeriod,
    P::Audit: RecordsOfPeriod,
{
    /// `period`'s reconciliation, as `dlqctl reconcile --period` makes it (the auditor's): HOLDS,
    /// UNDECIDED while the queues hold what would decide it, or the problems named.
    pub(super) async fn reconcile(&self, asked: &Asked<'_>, period: &str) -> Result<serde_json::Value, ControlError> {
        let period = crate::domain::input::period(period).map_err(ControlError::Invalid)?;
        let r = &self.replayer;
        let concluded =
            crate::reconcile::reconcile_period(&r.store, &r.audit, &r.ledger, &r.queue, &period, SEGMENTS).await?;
        let reconciliation = concluded.map_err(|why| ControlError::Refused(Refused(why)))?;
        read(asked, "reconcile", 1);
        Ok(json(&reconciliation))
    }

    /// The audit trail verified against the bucket's seals, as `dlqctl audit verify` verifies it:
    /// whole, or from seal `from_seal` (what came after it: quicker, as a trail grows). Its
    /// report names every break; the newest seal's number is where the next one may start.
    pub(super) async fn verify_audit(
        &self,
        asked: &Asked<'_>,
        from_seal: Option<u64>,
    ) -> Result<serde_json::Value, ControlError> {
        let r = &self.replayer;
        // As `dlqctl audit verify`: sealing that stopped (a record unsealed past its window) is
        // a break, since a trail cut short after its last seal would otherwise go unseen.
        let opts = crate::evidence::VerifyOptions {
            window: Some(crate::evidence::SealWindow {
                now: r.clock.now(),
                max_age: self.max_unsealed,
            }),
            ..crate::evidence::VerifyOptions::default()
        };
        let report = match from_seal {
            None => crate::evidence::verify_trail(&r.audit, &r.worm, &opts).await?,
            Some(n) => crate::evidence::verify_from_seal(&r.audit, &r.worm, n, &opts)
                .await
                .map_err(|e| match e {
                    crate::evidence::FromSealError::NotASeal(why) => ControlError::Invalid(why),
                    crate::evidence::FromSealError::Store(s) => s.into(),
                })?,
        };
        read(
            asked,
            "verify-audit",
            usize::try_from(report.records).unwrap_or(usize::MAX),
        );
        let mut out = json(&report);
        out["intact"] = serde_json::Value::Bool(report.intact());
        Ok(out)
    }

    /// The evidence bundle of `period` (the auditor's), as `dlqctl evidence export` writes it,
    /// kept in the bucket: its key, version and SHA-256, what it holds, the period's verdict
    /// (as `reconcile` says it, the queues counted) and an address to download it from.
    pub(super) async fn export_evidence(
        &self,
        asked: &Asked<'_>,
        period: &str,
    ) -> Result<serde_json::Value, ControlError> {
        let period = crate::domain::input::period(period).map_err(ControlError::Invalid)?;
        let r = &self.replayer;
        let read = (period.as_str(), SEGMENTS);
        let gathered =
            crate::reconcile::period::gather_period(&r.store, &r.audit, &r.ledger, &r.queue, read, true, None).await?;
        let (outcomes, problems, live) = gathered.map_err(|why| ControlError::Refused(Refused(why)))?;
        // As `dlqctl evidence export`: the bundle is verified offline against its own outcomes,
        // every one listed, none queued.
        let own = crate::reconcile::reconcile_counted(Default::default(), &outcomes, problems, None, 0);
        let at = r.clock.now();
        let stored =
            crate::evidence::store_bundle(&r.audit, &r.worm, at, &period, (&outcomes, &own), asked.request_id).await?;
        let detail = format!(
            "evidence bundle of {period} kept at s3://{}/{} version {}, SHA-256 {}: {} transactions, {} audit records in {} chains, {} seals",
            r.worm.bucket(),
            stored.key,
            stored.version_id,
            stored.sha256,
            stored.written.transactions,
            stored.written.audit_records,
            stored.written.chains,
            stored.written.seals
        );
        self.record(
            AuditKind::EvidenceExported,
            asked,
            &format!("EVIDENCE#{period}"),
            detail,
        )
        .await?;
        let url = r
            .worm
            .download_url(&stored.key, &stored.version_id, DOWNLOAD_VALID_FOR)
            .await?;
        let valid_for = chrono::Duration::from_std(DOWNLOAD_VALID_FOR).unwrap_or_default();
        tracing::info!(bundle = %stored.key, version = %stored.version_id, by = %asked.caller.identity.arn, request = %asked.request_id, "evidence bundle exported");
        let mut out = json(&stored);
        out["period"] = serde_json::json!(period);
        out["verdict"] = json(&live.verdict);
        out["queued"] = serde_json::json!(live.queued);
        out["url"] = serde_json::json!(url);
        out["url_expires_at"] = serde_json::json!(url.as_ref().map(|_| at + valid_for));
        Ok(out)
    }
}
