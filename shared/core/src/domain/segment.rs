//! One of `of` disjoint parts of a population, so that several workers can each take one and
//! together cover it exactly once: a replay's backlog (by a hash of the envelope id), or a read
//! of the ledger (each ledger splits its own way; see `ports::LedgerScope`). Written `index/of`.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub index: u32,
    pub of: u32,
}

/// Text that is not `INDEX/COUNT` with `0 <= INDEX < COUNT <= Segment::MAX`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SegmentError(pub String);

impl Segment {
    /// The most segments a population is split into.
    pub const MAX: u32 = 64;

    /// The whole population, as one segment.
    pub const ALL: Segment = Segment { index: 0, of: 1 };

    /// Every segment of a split into `of` (none when `of` is 0 or above [`Segment::MAX`]).
    pub fn all_of(of: u32) -> Vec<Segment> {
        if of == 0 || of > Segment::MAX {
            return Vec::new();
        }
        (0..of).map(|index| Segment { index, of }).collect()
    }

    /// Whether this segment holds `key`: the first 8 bytes of its SHA-256, modulo `of` (stable
    /// across processes and versions).
    pub fn holds(&self, key: &str) -> bool {
        use sha2::{Digest, Sha256};
        if self.of == 0 {
            return false; // no such segment (parsing refuses it)
        }
        let d = Sha256::digest(key.as_bytes());
        d.first_chunk()
            .is_some_and(|first| u64::from_be_bytes(*first) % u64::from(self.of) == u64::from(self.index))
    }
}

impl std::str::FromStr for Segment {
    type Err = SegmentError;
    fn from_str(text: &str) -> Result<Self, SegmentError> {
        let bad = || {
            SegmentError(format!(
                "segment {:?} must be INDEX/COUNT with 0 <= INDEX < COUNT <= {} (e.g. 2/4)",
                text.chars().take(40).collect::<String>(),
                Segment::MAX
            ))
        };
        let (index, of) = text.split_once('/').ok_or_else(bad)?;
        let index: u32 = index.trim().parse().map_err(|_| bad())?;
        let of: u32 = of.trim().parse().map_err(|_| bad())?;
        if of == 0 || of > Segment::MAX || index >= of {
            return Err(bad());
        }
        Ok(Segment { index, of })
    }
}

impl std::fmt::Display for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.of)
    }
}
