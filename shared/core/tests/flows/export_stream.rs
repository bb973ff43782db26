//! The evidence bundle written as it is read (`write_bundle`): the same bundle `export_bundle`
//! gathers in memory, read a page of records at a time, and it verifies offline.

use chrono::{DateTime, Utc};
use recon_core::domain::{AuditKind, AuditRecord};
use recon_core::evidence::{
    Bundle, BundleWritten, ExportError, VERIFY_PAGE, export_bundle, seal, verify_bundle, write_bundle,
};
use recon_core::ports::{AuditLog, ChainPage, StoreResult};
use recon_core::reconcile::reconcile;
use recon_testkit::memory::{MemoryAuditLog, MemoryWorm};
use std::sync::Mutex;

/// Seal `audit`'s trail at `now`, then write its bundle: what `write_bundle` answered and the
/// bytes it wrote, asked for the seal `ahead` numbers past the one just written (0: that one).
async fn seal_and_write(
    audit: &Paged,
    worm: &MemoryWorm,
    now: DateTime<Utc>,
    ahead: u64,
) -> (Result<BundleWritten, ExportError>, Vec<u8>) {
    let (_, sealed) = seal(audit, worm, now).await.unwrap();
    let reconciliation = reconcile(Vec::new(), Vec::new(), None, 0);
    let mut file = Vec::new();
    let asked = (sealed.trail.as_str(), sealed.seq + ahead);
    let written = write_bundle(audit, worm, asked, now, "2026-12", &[], &reconciliation, &mut file).await;
    (written, file)
}

fn rec(n: u32) -> AuditRecord {
    AuditRecord::system(
        AuditKind::ReferenceChanged,
        &format!("r{n}"),
        Utc::now(),
        "it",
        format!("record {n}"),
    )
}

/// The memory log, recording the size of every page read, refusing whole-chain reads, and
/// appending `append_at_first_page` records when the first page is read (after the export sealed).
#[derive(Default)]
struct Paged {
    inner: MemoryAuditLog,
    pages: Mutex<Vec<usize>>,
    append_at_first_page: u32,
}

impl AuditLog for Paged {
    async fn append(&self, record: &AuditRecord) -> StoreResult<Option<u64>> {
        self.inner.append(record).await
    }
    async fn chain_page(
        &self,
        chain: &str,
        from_seq: u64,
        cursor: Option<String>,
        limit: usize,
    ) -> StoreResult<ChainPage> {
        let first = self.pages.lock().unwrap().is_empty();
        if first {
            for i in 0..self.append_at_first_page {
                self.inner.append(&rec(100_000 + i)).await?;
            }
        }
        let page = self.inner.chain_page(chain, from_seq, cursor, limit).await?;
        self.pages.lock().unwrap().push(page.0.len());
        Ok(page)
    }
    async fn heads(&self) -> StoreResult<Vec<recon_core::domain::audit::ChainHead>> {
        self.inner.heads().await
    }
    async fn current_trail(&self) -> StoreResult<Option<String>> {
        self.inner.current_trail().await
    }
    async fn start_trail(&self, candidate: &str) -> StoreResult<String> {
        self.inner.start_trail(candidate).await
    }
}

#[tokio::test]
async fn a_written_bundle_is_the_gathered_one_read_a_page_at_a_time_and_verifies_offline() {
    let audit = Paged::default();
    // More than a page in every chain.
    for i in 0..9_000 {
        audit.append(&rec(i)).await.unwrap();
    }
    let worm = MemoryWorm::default();
    let now = Utc::now();
    let (written, file) = seal_and_write(&audit, &worm, now, 0).await;
    let written = written.unwrap();
    let streamed: Bundle = serde_json::from_slice(&file).expect("the file reads back as a bundle");
    assert_eq!(written.audit_records, 9_000);
    assert_eq!(streamed.audit_records.len(), 9_000);
    assert_eq!(
        (written.chains, written.seals),
        (streamed.heads.len(), streamed.seals.len())
    );
    assert!(verify_bundle(&streamed).intact(), "{:?}", verify_bundle(&streamed));
    let pages = audit.pages.lock().unwrap().clone();
    assert!(pages.len() > 8 && pages.iter().all(|&n| n <= VERIFY_PAGE), "{pages:?}");

    // Gathered in memory after it (its own seal commits to the same heads): the same records,
    // heads and seals (but its own).
    let reconciliation = reconcile(Vec::new(), Vec::new(), None, 0);
    let gathered = export_bundle(&audit.inner, &worm, now, "2026-12", Vec::new(), reconciliation)
        .await
        .unwrap();
    let json = |v: &Bundle| serde_json::to_value(&v.audit_records).unwrap();
    assert_eq!(json(&streamed), json(&gathered));
    assert_eq!(streamed.heads, gathered.heads);
    assert_eq!(streamed.seals[..], gathered.seals[..streamed.seals.len()]);
    assert_eq!(gathered.seals.len(), streamed.seals.len() + 1);
    assert_eq!(
        (streamed.schema, streamed.period, streamed.trail),
        (gathered.schema, gathered.period, gathered.trail)
    );
}

/// Records appended after the export's seal are not in the bundle: it ends where the seal says.
#[tokio::test]
async fn records_appended_while_it_is_written_stay_out_of_the_bundle() {
    let audit = Paged {
        append_at_first_page: 80,
        ..Paged::default()
    };
    for i in 0..3_000 {
        audit.inner.append(&rec(i)).await.unwrap();
    }
    let worm = MemoryWorm::default();
    let (written, file) = seal_and_write(&audit, &worm, Utc::now(), 0).await;
    let written = written.unwrap();
    let streamed: Bundle = serde_json::from_slice(&file).unwrap();
    assert_eq!(
        written.audit_records, 3_000,
        "the 80 appended during the read are left out"
    );
    assert_eq!(
        audit.inner.heads().await.unwrap().iter().map(|h| h.seq).sum::<u64>(),
        3_080
    );
    assert!(verify_bundle(&streamed).intact(), "{:?}", verify_bundle(&streamed));
}

/// A trail whose latest readable seal is older than the one its caller wrote is refused: the bundle
/// would leave the newest records out and still say it was exported.
#[tokio::test]
async fn a_bundle_is_not_written_from_a_seal_older_than_the_one_written_for_it() {
    let audit = Paged::default();
    audit.append(&rec(0)).await.unwrap();
    let worm = MemoryWorm::default();
    let (written, file) = seal_and_write(&audit, &worm, Utc::now(), 1).await;
    let err = written.unwrap_err();
    assert!(err.to_string().contains("not seal"), "{err}");
    assert!(file.is_empty(), "nothing written");
}
