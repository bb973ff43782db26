//! How a ledger finds a transaction: its hash and the period of its value date.

/// How a ledger finds a transaction: its `source_hash`, and the period of its value date when
/// the caller knows it. The hash covers the value date, so a hash has one period: a ledger keyed
/// by period (ours on DynamoDB, one write unit a commit) reads the one item there, and has to
/// search for a key without one. Every caller that decoded the transaction passes its period.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxKey {
    pub source_hash: String,
    /// `YYYY-MM` (`None`: not known, as for a hash a body claims without a readable value date).
    pub period: Option<String>,
}

impl TxKey {
    pub fn new(source_hash: impl Into<String>, period: Option<String>) -> Self {
        TxKey {
            source_hash: source_hash.into(),
            period,
        }
    }

    /// A bare hash, its period not known.
    pub fn hash_only(source_hash: impl Into<String>) -> Self {
        TxKey::new(source_hash, None)
    }
}
