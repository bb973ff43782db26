//! Ports: the traits every store and queue is reached through, one small trait per role. The
//! flows are generic over them, so the same code runs against AWS, the local emulators, or the
//! in-memory adapters of unit tests and the simulator (`recon-testkit`).
//!
//! Every port reports failures as [`StoreError`], which is transient by definition: a store
//! that cannot answer says nothing about the message, so the message is retried, never blamed.
//! The envelope store may also refuse a status change the life cycle forbids
//! ([`FlowError::IllegalTransition`]): a defect, never retried into success.

/// Ports: each trait as written (`Send + Sync`), and the same trait for an `Arc` of any
/// implementation, forwarding every method (default ones too, so an adapter's own answer is
/// kept): a shared adapter is the adapter. The methods are listed once, here.
macro_rules! port {
    ($($(#[$attr:meta])* pub trait $name:ident { $($methods:tt)* })+) => {
        $(port!(@method [$(#[$attr])* $name] [] [] $($methods)*);)+
    };
    // A method each port must write.
    (@method $head:tt [$($decl:tt)*] [$($arc:tt)*]
        $(#[$m:meta])* fn $f:ident(&$s:tt $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?; $($rest:tt)*) => {
        port!(@method $head
            [$($decl)* $(#[$m])* fn $f(&$s $(, $arg: $ty)*) $(-> $ret)?;]
            [$($arc)* fn $f(&$s $(, $arg: $ty)*) $(-> $ret)? { (**$s).$f($($arg),*) }]
            $($rest)*);
    };
    // A method with a default.
    (@method $head:tt [$($decl:tt)*] [$($arc:tt)*]
        $(#[$m:meta])* fn $f:ident(&$s:tt $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)? $body:block $($rest:tt)*) => {
        port!(@method $head
            [$($decl)* $(#[$m])* fn $f(&$s $(, $arg: $ty)*) $(-> $ret)? $body]
            [$($arc)* fn $f(&$s $(, $arg: $ty)*) $(-> $ret)? { (**$s).$f($($arg),*) }]
            $($rest)*);
    };
    (@method [$(#[$attr:meta])* $name:ident] [$($decl:tt)*] [$($arc:tt)*]) => {
        $(#[$attr])*
        pub trait $name: Send + Sync { $($decl)* }
        impl<T: $name> $name for std::sync::Arc<T> { $($arc)* }
    };
}

mod approvals;
mod audit;
mod clock;
mod envelopes;
mod ledger;
mod metrics;
mod periods;
mod queues;
mod reference;
mod rotating;
mod signer;
mod worm;

pub use approvals::{ApprovalRequests, RequestPage};
pub use audit::{AuditLog, ChainPage, read_chain};
pub use clock::{Clock, Deadline, SystemClock, lambda_deadline};
pub use envelopes::{
    AuditOutbox, Backlog, CreateOutcome, EnvelopePage, EnvelopeStore, Finish, Settled, SweepCursors, all_envelopes,
};
pub use ledger::{
    Cursor, DedupTable, ExternalLedger, Ledger, LedgerReader, LedgerScope, Posted, PostingPage, READ_PAGE,
    ReserveOutcome, Voided, each_page, read_postings, tally_postings,
};
pub use metrics::{Metric, Metrics};
pub use periods::{EnvelopesOfPeriod, RecordsOfPeriod};
pub use queues::{
    DeadLetterQueue, OutgoingMessage, Queued, ReplayQueue, WorkQueue, batches, dead_letter_message, is_binary,
};
pub use reference::ReferenceData;
pub use rotating::{CREDENTIAL_REFUSED, Fetch, FetchPending, REFETCH_AFTER_UNCHANGED, Rotating, log_refused};
pub use signer::{NoSigner, Signer};
pub use worm::{ObjectVersion, Worm, Written};

use crate::domain::{IllegalTransition, ProcessError, TransientKind, bounded_detail};

/// A store or queue could not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {detail}")]
pub struct StoreError {
    pub kind: TransientKind,
    pub detail: String,
}

impl StoreError {
    pub fn new(kind: TransientKind, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        StoreError {
            kind,
            detail: bounded_detail(&detail).to_owned(),
        }
    }

    /// A [`TransientKind::Infrastructure`] failure: none of the other kinds (a misconfiguration, say).
    pub fn infra(detail: impl Into<String>) -> Self {
        StoreError::new(TransientKind::Infrastructure, detail)
    }
}

impl From<StoreError> for ProcessError {
    fn from(e: StoreError) -> Self {
        ProcessError::Transient {
            kind: e.kind,
            detail: e.detail,
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Why a step of a flow that changes envelopes could not be done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// A store or queue failed: transient, the step can be tried again.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A change of status the envelope life cycle forbids (`domain::status`): a defect in the
    /// caller, refused before anything was written.
    #[error(transparent)]
    IllegalTransition(#[from] IllegalTransition),
    /// Refused by the approval rules (`domain::approval`): nothing was changed.
    #[error(transparent)]
    Refused(#[from] crate::domain::approval::Refused),
}

pub type FlowResult<T> = Result<T, FlowError>;
