//! The records each seal covers, written into the WORM bucket before the seal itself: the evidence
//! then outlives the audit table. Seal `n` covers, of every chain, the records after the head seal
//! `n - 1` named up to the head seal `n` names; they are written as JSON lines (each record as a
//! bundle holds it), [`RECORDS_PER_PART`] to an object, under [`records_key`]. Nothing else
//! vouches for a part: the hash links of its records, from seal `n - 1`'s head to seal `n`'s, are
//! what make it genuine, so a verification from the bucket alone ([`super::BucketTrail`]) checks
//! it as it checks the table.

use crate::domain::TransientKind;
use crate::domain::audit::ChainHead;
use crate::domain::seal::{AuditSeal, first_after, records_key};
use crate::ports::{AuditLog, Cursor, StoreError, StoreResult, Worm, Written};

/// Records in one object: about 4.5 MB of JSON lines at the demo's average record (900 bytes).
pub const RECORDS_PER_PART: usize = 5000;

/// Bytes in one object at most, whatever the records' size (a part is read whole).
const PART_BYTES: usize = 8 << 20;

/// Records of a chain read from the table at a time.
const READ_PAGE: usize = 1000;

/// Write the records `next` covers beyond `prev` (every record of a chain `prev` does not name;
/// `None`: the trail's first seal) into the bucket, chain by chain, a part at a time. A part
/// already there (a sealer with the same heads wrote it) must hold the same bytes. Returns the
/// number of records written.
pub(super) async fn archive<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    prev: Option<&AuditSeal>,
    next: &AuditSeal,
) -> StoreResult<u64> {
    let mut written = 0;
    for head in &next.heads {
        let from = first_after(prev, &head.chain);
        if from <= head.seq {
            written += archive_chain(audit, worm, next, head, from).await?;
        }
    }
    Ok(written)
}

/// Records `from..=head.seq` of one chain, as the table holds them (a forged record beside a
/// genuine one at the same `seq` included: the bucket keeps what verification must name). Every
/// `seq` of the span must be there, or nothing is sealed: a chain index that does not show them
/// yet (it is eventually consistent) would otherwise leave a gap in the bucket for ever. (A
/// record whose hash is not what the head says is written as it is: verify names it.)
async fn archive_chain<A: AuditLog, W: Worm>(
    audit: &A,
    worm: &W,
    seal: &AuditSeal,
    head: &ChainHead,
    from: u64,
) -> StoreResult<u64> {
    let (mut part, mut lines, mut buf, mut written) = (0u32, 0usize, Vec::new(), 0u64);
    // The next `seq` the span needs.
    let mut expected = from;
    let key = |part| records_key(&seal.trail, seal.seq, &seal.root, &head.chain, part);
    let mut cursor = Cursor::new("audit chain read");
    // Read to the chain's end (the records after the head, appended since the heads were read,
    // are few), not to the first record past the head: a forged key must not cut the span short.
    while let Some(at) = cursor.at() {
        let (records, next) = audit.chain_page(&head.chain, from, at, READ_PAGE).await?;
        for r in records.iter().filter(|r| r.seq <= head.seq) {
            if r.seq == expected {
                expected += 1;
            } else if r.seq > expected {
                // A gap before this record: nothing more is written, so that the parts already
                // written hold the same bytes when sealing tries again over the whole span.
                return Err(not_whole(head, from, expected));
            }
            serde_json::to_writer(&mut buf, r).map_err(|e| StoreError::infra(format!("audit record: {e}")))?;
            buf.push(b'\n');
            (lines, written) = (lines + 1, written + 1);
            if lines == RECORDS_PER_PART || buf.len() >= PART_BYTES {
                put_part(worm, &key(part), &buf).await?;
                (part, lines) = (part + 1, 0);
                buf.clear();
            }
        }
        cursor.follow(next)?;
    }
    if expected <= head.seq {
        return Err(not_whole(head, from, expected));
    }
    if lines > 0 {
        put_part(worm, &key(part), &buf).await?;
    }
    Ok(written)
}

/// The span `from..=head.seq` is not whole in the table: `expected` is the first `seq` missing.
fn not_whole(head: &ChainHead, from: u64, expected: u64) -> StoreError {
    StoreError::new(
        TransientKind::Conflict,
        format!(
            "chain {}: the table shows records {from}..{} only up to {}: not sealed (sealing tries again)",
            head.chain,
            head.seq,
            expected.saturating_sub(1)
        ),
    )
}

/// Write a part unless it is there with these bytes.
async fn put_part<W: Worm>(worm: &W, key: &str, bytes: &[u8]) -> StoreResult<()> {
    match worm.put(key, bytes).await? {
        Written::New { .. } => Ok(()),
        Written::Exists => {
            let first = worm
                .versions(key)
                .await?
                .into_iter()
                .find(|v| v.key == key && !v.delete_marker);
            let held = match first {
                Some(v) => worm.get_version(key, &v.version_id).await?,
                None => None,
            };
            if held.as_deref() == Some(bytes) {
                Ok(())
            } else {
                Err(StoreError::infra(format!(
                    "{key} already holds other records than the table's: not sealed (verify names what differs)"
                )))
            }
        }
    }
}
