//! The evidence bundle exported at the console (the auditor's): the control plane seals the
//! trail, writes the period's bundle into the Object Lock bucket, and answers its key, version,
//! SHA-256 and an address to download it from. The bundle read back from the bucket verifies
//! offline and lists the period's transactions; no other role may export.

use recon_core::evidence::{Bundle, verify_bundle};
use recon_core::ports::Worm;
use recon_harness::stack::TestStack;
use serde_json::json;

use crate::control::{Control, xau};

#[tokio::test]
async fn an_auditor_exports_a_periods_bundle_into_the_bucket_and_it_verifies_offline() {
    let s = TestStack::new("con-export").await;
    let bodies: Vec<String> = (1..=4)
        .map(|n| {
            if n % 2 == 0 {
                xau(n)
            } else {
                recon_testkit::builders::tx(n)
            }
        })
        .map(|m| m.to_body().unwrap())
        .collect();
    s.remediated(&bodies, 1000).await;
    let c = Control::new(&s).await;
    let export = json!({"operation": "export-evidence", "period": "2026-11"});

    let (status, out) = c.ask("auditor", "audrey", export.clone()).await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(
        (out["verdict"].as_str(), out["transactions"].as_u64()),
        (Some("HOLDS"), Some(4)),
        "{out}"
    );
    let key = out["key"].as_str().unwrap();
    assert!(key.starts_with("evidence-bundles/2026-11/"), "{out}");
    let url = out["url"].as_str().unwrap_or_default();
    assert!(url.contains(key) && url.contains("X-Amz-Signature"), "{out}");

    // The version the answer names, read from the bucket: the bytes it hashed, a bundle that
    // verifies offline with the period's four transactions and every record sealed.
    let worm = recon_aws::s3::S3Worm::new(s.clients.s3.clone(), &s.stack.names.bucket());
    let bytes = worm
        .get_version(key, out["version_id"].as_str().unwrap())
        .await
        .unwrap()
        .expect("the bundle's version");
    assert_eq!(
        recon_core::domain::hash::sha256_hex(&bytes),
        out["sha256"].as_str().unwrap()
    );
    let bundle: Bundle = serde_json::from_slice(&bytes).unwrap();
    let report = verify_bundle(&bundle);
    assert!(report.intact(), "{report:?}");
    assert_eq!(bundle.outcomes.len(), 4);
    assert_eq!(report.records, out["audit_records"].as_u64().unwrap(), "{report:?}");

    // A second export is a bundle of its own, beside the first (never written over it).
    let (status, again) = c.ask("auditor", "audrey", export.clone()).await;
    assert_eq!(status, 200, "{again}");
    assert_ne!(again["key"], out["key"]);
    // No other role exports; a period out of its form is the caller's to mend.
    for role in ["viewer", "maker", "approver", "admin"] {
        let (status, body) = c.ask(role, "mallory", export.clone()).await;
        assert_eq!(status, 403, "{role}: {body}");
    }
    let (status, _) = c
        .ask(
            "auditor",
            "audrey",
            json!({"operation": "export-evidence", "period": "2026-13"}),
        )
        .await;
    assert_eq!(status, 400);
    let listed = worm.list("evidence-bundles/").await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    // Each export is audited: who, and what the bucket keeps.
    let exported: Vec<_> = s
        .audit()
        .await
        .into_iter()
        .filter(|r| r.kind == recon_core::domain::AuditKind::EvidenceExported)
        .collect();
    assert_eq!(exported.len(), 2, "{exported:?}");
    assert!(
        exported.iter().all(|r| r.actor.ends_with("-auditor/audrey")),
        "{exported:?}"
    );
    assert!(exported.iter().any(|r| r.detail.contains(key)), "{exported:?}");
    s.cleanup().await;
}
