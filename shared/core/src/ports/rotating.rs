//! A credential an adapter reads from its secret again (the HTTP ledger's token, the PostgreSQL
//! ledger's user and password): once it is `max_age` old, and at once when the service refuses
//! it. A rotation then costs one refused request, not a wave of transient failures until the
//! retry budget turns valid transactions into dead letters.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Clock, StoreResult, SystemClock};

/// Reads the credential from where it is kept (on AWS: a Secrets Manager secret).
pub type Fetch<T> = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = StoreResult<T>> + Send>> + Send + Sync>;

/// Reads the credential a rotation in progress has staged, if any (on AWS: the secret's
/// `AWSPENDING` version).
pub type FetchPending<T> = Fetch<Option<T>>;

/// The value of the `alarm` field of the log line a refused credential writes when reading its
/// secret again does not help; the template's log metric filters count these lines
/// (`LedgerCredentialRefused`) and an alarm pages on them.
pub const CREDENTIAL_REFUSED: &str = "LEDGER_CREDENTIAL_REFUSED";

/// After a refusal, the secret still held the refused value: it is not read again for this long
/// (a wrong password refused by every connection attempt reads its secret once a second at most).
pub const REFETCH_AFTER_UNCHANGED: Duration = Duration::from_secs(1);

/// Log a credential refused that nothing else can replace (the alarm counts these lines).
/// `service` names the ledger, `detail` is its answer (never the credential).
pub fn log_refused(service: &str, detail: &str) {
    tracing::error!(
        alarm = CREDENTIAL_REFUSED,
        ledger = service,
        detail,
        "the ledger refused its credentials"
    );
}

/// Times are the clock's monotonic readings.
struct State<T> {
    value: Option<T>,
    fetched_at: Duration,
    /// When a fetch after a refusal last found the refused value unchanged.
    unchanged_at: Option<Duration>,
    /// The staged value handed out after a refusal, and one that was refused in turn: that one
    /// is not tried again (a rotation that failed leaves it behind; the alarm, not a loop between
    /// it and the current one, answers that).
    staged_given: Option<T>,
    staged_refused: Option<T>,
}

/// A credential shared by every clone: read from its [`Fetch`] when there is none, when it is
/// `max_age` old, and when the service refused it.
#[derive(Clone)]
pub struct Rotating<T> {
    fetch: Fetch<T>,
    pending: Option<FetchPending<T>>,
    max_age: Duration,
    state: Arc<Mutex<State<T>>>,
    /// One read of the secret at a time: a wave of refusals reads it once.
    reading: Arc<tokio::sync::Mutex<()>>,
    clock: Arc<dyn Clock>,
}

/// Never the value: whether one is held, and how long it is kept.
impl<T> std::fmt::Debug for Rotating<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.state.lock().map(|s| s.value.is_some()).unwrap_or(false);
        f.debug_struct("Rotating")
            .field("held", &held)
            .field("max_age", &self.max_age)
            .finish()
    }
}

impl<T: Clone + PartialEq + Send> Rotating<T> {
    /// Read with `fetch`, again once `max_age` old; nothing is read before it is first asked for.
    pub fn new(fetch: Fetch<T>, max_age: Duration) -> Self {
        Rotating {
            fetch,
            pending: None,
            max_age,
            state: Arc::new(Mutex::new(State {
                value: None,
                fetched_at: Duration::ZERO,
                unchanged_at: None,
                staged_given: None,
                staged_refused: None,
            })),
            reading: Arc::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// How long ago the clock read `then`.
    fn since(&self, then: Duration) -> Duration {
        self.clock.monotonic().saturating_sub(then)
    }

    /// One that, refused with a value its secret still holds, tries the value a rotation has
    /// staged (once each): a single-user rotation changes the password before the secret names
    /// it, and for that moment only the staged value connects.
    pub fn with_pending(mut self, pending: FetchPending<T>) -> Self {
        self.pending = Some(pending);
        self
    }

    /// One that starts from `value`, read now.
    pub fn starting_with(self, value: T) -> Self {
        {
            let mut state = self.lock();
            state.value = Some(value);
            state.fetched_at = self.clock.monotonic();
        }
        self
    }

    /// A value that never changes (nothing to read it from again).
    pub fn fixed(value: T) -> Self
    where
        T: Sync + 'static,
    {
        let kept = value.clone();
        let fetch: Fetch<T> = Arc::new(move || {
            let value = kept.clone();
            Box::pin(async move { Ok(value) })
        });
        Self::new(fetch, Duration::MAX).starting_with(value)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value held now, however old (what a connection made this instant uses).
    pub fn latest(&self) -> Option<T> {
        self.lock().value.clone()
    }

    fn young(&self) -> Option<T> {
        let state = self.lock();
        state
            .value
            .clone()
            .filter(|_| self.since(state.fetched_at) < self.max_age)
    }

    async fn read(&self) -> StoreResult<T> {
        let value = (self.fetch)().await?;
        let now = self.clock.monotonic();
        let mut state = self.lock();
        state.value = Some(value.clone());
        state.fetched_at = now;
        Ok(value)
    }

    /// The credential to use: read when there is none yet or it is `max_age` old.
    pub async fn current(&self) -> StoreResult<T> {
        if let Some(value) = self.young() {
            return Ok(value);
        }
        let _one = self.reading.lock().await;
        match self.young() {
            Some(value) => Ok(value),
            None => self.read().await,
        }
    }

    /// `used` was refused by `service` (`detail`: its answer): read again unless another caller
    /// already has. `Some` is the value to try again with (a rotation: logged as a warning);
    /// `None` when the secret still holds the refused value (a wrong credential, not a rotated
    /// one: logged for the alarm).
    pub async fn refused(&self, used: &T, service: &str, detail: &str) -> StoreResult<Option<T>> {
        let again = self.read_again(used).await?;
        match again {
            Some(_) => tracing::warn!(
                ledger = service,
                detail,
                "the ledger refused credentials its secret has since replaced"
            ),
            None => log_refused(service, detail),
        }
        Ok(again)
    }

    async fn read_again(&self, used: &T) -> StoreResult<Option<T>> {
        let _one = self.reading.lock().await;
        let (held, unchanged_at) = {
            let mut state = self.lock();
            if state.staged_given.as_ref() == Some(used) {
                state.staged_refused = Some(used.clone());
            }
            (state.value.clone(), state.unchanged_at)
        };
        if let Some(held) = held.filter(|h| h != used) {
            return Ok(Some(held));
        }
        if unchanged_at.is_some_and(|at| self.since(at) < REFETCH_AFTER_UNCHANGED) {
            return Ok(None);
        }
        let fresh = self.read().await?;
        if fresh == *used {
            if let Some(staged) = self.staged(used).await {
                return Ok(Some(staged));
            }
            let now = self.clock.monotonic();
            self.lock().unchanged_at = Some(now);
            return Ok(None);
        }
        Ok(Some(fresh))
    }

    /// The value a rotation has staged, unless it is `used` or was refused already; held from now
    /// on (until it is old, when the secret names it, or refused). A staged value that cannot be
    /// read is none (a warning): the refusal goes on to the alarm.
    async fn staged(&self, used: &T) -> Option<T> {
        let pending = self.pending.as_ref()?;
        let refused = self.lock().staged_refused.clone();
        let staged = match pending().await {
            Ok(staged) => staged?,
            Err(e) => {
                tracing::warn!(error = %e, "the staged version of the ledger's secret could not be read");
                return None;
            }
        };
        if staged == *used || refused.as_ref() == Some(&staged) {
            return None;
        }
        let now = self.clock.monotonic();
        let mut state = self.lock();
        state.staged_given = Some(staged.clone());
        state.value = Some(staged.clone());
        state.fetched_at = now;
        Some(staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A secret holding `values` in turn (the last one for ever), counting its reads.
    fn secret(values: &'static [&'static str], reads: Arc<AtomicU64>) -> Fetch<String> {
        Arc::new(move || {
            let n = reads.fetch_add(1, Ordering::Relaxed) as usize;
            let value = values[n.min(values.len() - 1)].to_owned();
            Box::pin(async move { Ok(value) })
        })
    }

    #[tokio::test]
    async fn read_when_first_asked_again_when_old_and_when_refused_once_per_rotation() {
        let reads = Arc::new(AtomicU64::new(0));
        let r = Rotating::new(secret(&["a", "b", "c"], reads.clone()), Duration::from_secs(3600));
        assert_eq!(r.latest(), None);
        assert_eq!(r.current().await.unwrap(), "a");
        assert_eq!(r.current().await.unwrap(), "a");
        assert_eq!(reads.load(Ordering::Relaxed), 1, "kept while young");
        // Refused: read again; a second caller refused with the same old value gets the new one
        // without reading the secret again.
        assert_eq!(r.refused(&"a".into(), "t", "no").await.unwrap(), Some("b".into()));
        assert_eq!(r.refused(&"a".into(), "t", "no").await.unwrap(), Some("b".into()));
        assert_eq!(reads.load(Ordering::Relaxed), 2);
        assert_eq!(r.latest().as_deref(), Some("b"));
        // Old: read before use.
        let aging = Rotating::new(secret(&["a", "b"], Arc::default()), Duration::ZERO);
        assert_eq!(aging.current().await.unwrap(), "a");
        assert_eq!(aging.current().await.unwrap(), "b");
    }

    #[tokio::test]
    async fn a_refused_value_the_secret_still_holds_is_not_retried_nor_read_again_at_once() {
        let reads = Arc::new(AtomicU64::new(0));
        let r = Rotating::new(secret(&["wrong"], reads.clone()), Duration::from_secs(3600));
        let used = r.current().await.unwrap();
        assert_eq!(r.refused(&used, "t", "no").await.unwrap(), None);
        assert_eq!(r.refused(&used, "t", "no").await.unwrap(), None);
        assert_eq!(
            reads.load(Ordering::Relaxed),
            2,
            "one read for the first refusal, none for the next"
        );
        let fixed = Rotating::fixed("token".to_owned());
        assert_eq!(fixed.current().await.unwrap(), "token");
        assert_eq!(fixed.refused(&"token".into(), "t", "no").await.unwrap(), None);
    }

    /// A secret whose staged version cannot be read.
    fn unreadable_stage() -> FetchPending<String> {
        Arc::new(|| Box::pin(async { Err(crate::ports::StoreError::infra("AccessDenied")) }))
    }

    /// A secret whose staged version holds `staged` (a rotation in progress).
    fn staged(staged: Option<&'static str>, reads: Arc<AtomicU64>) -> FetchPending<String> {
        Arc::new(move || {
            reads.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move { Ok(staged.map(str::to_owned)) })
        })
    }

    #[tokio::test]
    async fn refused_mid_rotation_the_staged_value_is_tried_once_and_then_the_alarm() {
        // A single-user rotation between setting the password and naming it: only the staged
        // value connects.
        let pending_reads = Arc::new(AtomicU64::new(0));
        let r = Rotating::new(secret(&["old"], Arc::default()), Duration::from_secs(3600))
            .with_pending(staged(Some("new"), pending_reads.clone()));
        let used = r.current().await.unwrap();
        assert_eq!(r.refused(&used, "t", "no").await.unwrap(), Some("new".into()));
        assert_eq!(r.latest().as_deref(), Some("new"), "held from now on");
        // A rotation that failed left its staged value behind: refused too, the current one is
        // tried again, then nothing more (the alarm), never a loop between the two.
        assert_eq!(r.refused(&"new".into(), "t", "no").await.unwrap(), Some("old".into()));
        assert_eq!(r.refused(&"old".into(), "t", "no").await.unwrap(), None);
        assert_eq!(pending_reads.load(Ordering::Relaxed), 2);
        // A staged value that worked is tried again when, read again once old, the current one
        // is refused (a rotation stuck after changing the password); one refused is not.
        let r = Rotating::new(secret(&["old"], Arc::default()), Duration::ZERO)
            .with_pending(staged(Some("new"), Arc::default()));
        let used = r.current().await.unwrap();
        assert_eq!(r.refused(&used, "t", "no").await.unwrap(), Some("new".into()));
        assert_eq!(r.current().await.unwrap(), "old", "read again once old");
        assert_eq!(r.refused(&"old".into(), "t", "no").await.unwrap(), Some("new".into()));
        // Nothing staged, or the refused value itself staged: nothing to try.
        for pending in [None, Some("old")] {
            let r = Rotating::new(secret(&["old"], Arc::default()), Duration::from_secs(3600))
                .with_pending(staged(pending, Arc::default()));
            let used = r.current().await.unwrap();
            assert_eq!(r.refused(&used, "t", "no").await.unwrap(), None);
        }
        // A staged version that cannot be read: the refusal goes on to the alarm (None).
        let r =
            Rotating::new(secret(&["old"], Arc::default()), Duration::from_secs(3600)).with_pending(unreadable_stage());
        let used = r.current().await.unwrap();
        assert_eq!(r.refused(&used, "t", "no").await.unwrap(), None);
    }
}
