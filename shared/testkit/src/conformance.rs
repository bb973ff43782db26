//! What every implementation of a port must do, as checks any test runs against its adapter: the
//! memory adapters in `recon-core`'s tests, the AWS adapters on the local stack. One definition of
//! the behaviour, so the two cannot drift apart.

use recon_core::domain::status::IllegalTransition;
use recon_core::domain::{DlqEnvelope, EnvelopeStatus, ReplayClaim, StatusChange};
use recon_core::ports::{Backlog, CreateOutcome, EnvelopeStore, FlowError};

use crate::builders::{self, settle_by_hand};

/// The envelope life cycle (`domain::status`), whatever the store: an envelope is born PENDING
/// or QUARANTINED, changes only under a claim, and a settled one never changes again; a refused
/// change writes nothing, the PENDING count included. `id` must be unused in `store`.
pub async fn envelope_store_keeps_the_life_cycle<S: EnvelopeStore + Backlog>(store: &S, id: &str) {
    let pending = || async { store.pending_count().await.expect("pending count") };
    let status = || async { store.get(id).await.expect("get").map(|e| e.status) };
    let before = pending().await;

    let mut born_replayed: DlqEnvelope = builders::envelope(id);
    born_replayed.status = EnvelopeStatus::Replayed;
    assert_eq!(
        store.create(&born_replayed).await,
        Err(FlowError::IllegalTransition(IllegalTransition::Initial(
            EnvelopeStatus::Replayed
        ))),
        "an envelope cannot be born REPLAYED"
    );
    assert_eq!(status().await, None, "a refused create writes nothing");

    assert_eq!(store.create(&builders::envelope(id)).await, Ok(CreateOutcome::Created));
    assert_eq!(pending().await, before + 1);

    // A claim whose history entry would say anything but REPLAYING is refused before writing.
    let now = builders::now();
    let claim = ReplayClaim {
        replay_id: "illegal".into(),
        triggered_by: "test".into(),
        reason: "conformance".into(),
        claimed_at: now,
        lease_until: now + chrono::Duration::minutes(5),
    };
    let skip_the_claim = StatusChange {
        status: EnvelopeStatus::Quarantined,
        at: now,
        actor: "test".into(),
        reason: "straight to quarantine".into(),
        manual_journal: false,
    };
    assert_eq!(
        store.claim(id, &claim, now, &skip_the_claim).await,
        Err(FlowError::IllegalTransition(IllegalTransition::Change {
            from: EnvelopeStatus::Pending,
            to: EnvelopeStatus::Quarantined
        }))
    );
    assert_eq!(
        status().await,
        Some(EnvelopeStatus::Pending),
        "a refused claim writes nothing"
    );
    assert_eq!(pending().await, before + 1);

    settle_by_hand(store, id, EnvelopeStatus::Quarantined).await;
    assert_eq!(status().await, Some(EnvelopeStatus::Quarantined));
    assert_eq!(pending().await, before);

    // Settled: no claim takes it back (QUARANTINED -> PENDING cannot be expressed).
    let reclaim = StatusChange {
        status: EnvelopeStatus::Replaying,
        ..skip_the_claim
    };
    assert_eq!(store.claim(id, &claim, now, &reclaim).await, Ok(false));
    assert_eq!(status().await, Some(EnvelopeStatus::Quarantined));
    assert_eq!(pending().await, before);
}
