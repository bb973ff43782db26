//! A deterministic executor over the virtual clock (`clock.rs`). Tasks are polled one at a time, the next one
//! chosen by the run's generator among those ready, so every interleaving of concurrent Lambda
//! invocations is reachable and a seed replays the same one. Virtual time moves only when no
//! task is ready (to the earliest timer). An invocation can be dropped at any await: at random
//! (a crash) or when virtual time passes its deadline (Lambda's timeout).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use super::clock::SimClock;
use super::rng::SharedRng;
use super::trace::Trace;

pub type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// An await point: the task gives way once, so another may run (or this one may be dropped).
pub fn yield_now() -> impl Future<Output = ()> + Send {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
}

struct TaskWaker {
    id: u64,
    ready: Arc<Mutex<BTreeSet<u64>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).insert(self.id);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A model or a driver (pollers, schedule, producer): never crashes.
    Service,
    /// A Lambda invocation or an operator command: may crash, and dies at its deadline.
    Invocation { deadline: Option<Duration> },
}

struct Task {
    name: String,
    kind: Kind,
    future: LocalFuture,
    waker: Waker,
}

#[derive(Default)]
struct Spawned {
    next_id: u64,
    new: Vec<(u64, String, Kind, LocalFuture)>,
}

/// Starts tasks from inside the run.
#[derive(Clone, Default)]
pub struct Spawner(Rc<RefCell<Spawned>>);

impl Spawner {
    fn push(&self, name: String, kind: Kind, future: LocalFuture) {
        let mut s = self.0.borrow_mut();
        let id = s.next_id;
        s.next_id += 1;
        s.new.push((id, name, kind, future));
    }

    pub fn spawn(&self, name: impl Into<String>, future: impl Future<Output = ()> + 'static) {
        self.push(name.into(), Kind::Service, Box::pin(future));
    }

    /// Start an invocation that dies at `deadline` (virtual elapsed time) or at a crash; the
    /// handle resolves to `None` then.
    pub fn invoke<T: 'static>(
        &self,
        name: impl Into<String>,
        deadline: Option<Duration>,
        future: impl Future<Output = T> + 'static,
    ) -> JoinHandle<T> {
        let state = Rc::new(RefCell::new(JoinState {
            result: None,
            waker: None,
        }));
        let guard = Completion(state.clone());
        self.push(
            name.into(),
            Kind::Invocation { deadline },
            Box::pin(async move {
                let value = future.await;
                guard.complete(Some(value));
            }),
        );
        JoinHandle(state)
    }
}

struct JoinState<T> {
    /// `Some(None)`: the invocation died.
    result: Option<Option<T>>,
    waker: Option<Waker>,
}

/// Completes the handle when the invocation ends, or, dropped unfinished, reports it dead.
struct Completion<T>(Rc<RefCell<JoinState<T>>>);

impl<T> Completion<T> {
    fn complete(&self, value: Option<T>) {
        let waker = {
            let mut s = self.0.borrow_mut();
            if s.result.is_some() {
                return;
            }
            s.result = Some(value);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Drop for Completion<T> {
    fn drop(&mut self) {
        self.complete(None);
    }
}

/// The outcome of an invocation: `Some` with its value, `None` when it crashed or timed out.
pub struct JoinHandle<T>(Rc<RefCell<JoinState<T>>>);

impl<T> Future for JoinHandle<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.0.borrow_mut();
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

pub struct Executor {
    clock: SimClock,
    spawner: Spawner,
    tasks: BTreeMap<u64, Task>,
    ready: Arc<Mutex<BTreeSet<u64>>>,
    pub polls: u64,
    /// Invocations that crashed or were killed at their timeout.
    pub deaths: u64,
}

impl Executor {
    pub fn new(clock: SimClock) -> Self {
        Executor {
            clock,
            spawner: Spawner::default(),
            tasks: BTreeMap::new(),
            ready: Arc::default(),
            polls: 0,
            deaths: 0,
        }
    }

    pub fn spawner(&self) -> Spawner {
        self.spawner.clone()
    }

    fn absorb(&mut self) {
        let new = std::mem::take(&mut self.spawner.0.borrow_mut().new);
        for (id, name, kind, future) in new {
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                ready: self.ready.clone(),
            }));
            self.tasks.insert(
                id,
                Task {
                    name,
                    kind,
                    future,
                    waker,
                },
            );
            self.ready.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
        }
    }

    /// Run until every task has ended. Invocations crash with probability `crash_ppm` (read at
    /// each poll: the run turns crashes off to settle) at each poll. Fails when tasks wait with no
    /// timer left (a deadlock) or after `max_polls`.
    pub fn run(&mut self, rng: &SharedRng, crash_ppm: &AtomicU32, max_polls: u64, trace: &Trace) -> Result<(), String> {
        loop {
            self.absorb();
            if self.tasks.is_empty() {
                return Ok(());
            }
            let now = self.clock.elapsed();
            let expired: Vec<u64> = self
                .tasks
                .iter()
                .filter(|(_, t)| matches!(t.kind, Kind::Invocation { deadline: Some(d) } if d <= now))
                .map(|(id, _)| *id)
                .collect();
            for id in expired {
                if let Some(t) = self.tasks.remove(&id) {
                    self.deaths += 1;
                    trace.log(&self.clock, format!("{} killed at its timeout", t.name));
                }
            }
            let ready: Vec<u64> = {
                let mut r = self.ready.lock().unwrap_or_else(|p| p.into_inner());
                let ids = r.iter().copied().filter(|id| self.tasks.contains_key(id)).collect();
                r.clear();
                ids
            };
            if ready.is_empty() {
                match self.clock.next_timer() {
                    Some(at) => {
                        self.clock.advance_to(at);
                        continue;
                    }
                    None if self.tasks.is_empty() => return Ok(()),
                    None => {
                        let names: Vec<&str> = self.tasks.values().map(|t| t.name.as_str()).collect();
                        return Err(format!("deadlock: {names:?} wait with no timer left"));
                    }
                }
            }
            let (pick, crash) = {
                let mut g = rng.get();
                let pick = ready[g.below(ready.len() as u64) as usize];
                let crash = matches!(self.tasks.get(&pick).map(|t| t.kind), Some(Kind::Invocation { .. }))
                    && g.chance(crash_ppm.load(Ordering::SeqCst));
                (pick, crash)
            };
            self.ready
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(ready.iter().copied().filter(|id| *id != pick));
            if crash {
                if let Some(t) = self.tasks.remove(&pick) {
                    self.deaths += 1;
                    trace.log(&self.clock, format!("{} crashed", t.name));
                }
                continue;
            }
            self.polls += 1;
            if self.polls > max_polls {
                return Err(format!("no end after {max_polls} polls (livelock)"));
            }
            let Some(task) = self.tasks.get_mut(&pick) else {
                continue;
            };
            let waker = task.waker.clone();
            let mut cx = Context::from_waker(&waker);
            if task.future.as_mut().poll(&mut cx).is_ready() {
                self.tasks.remove(&pick);
            }
        }
    }
}

/// Run a future of the memory stores (ready at the first poll).
pub fn ready<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}
