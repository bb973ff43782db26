//! Which chain an append goes to: the trail spreads over as many chains as writers contend for it.
//!
//! A record may go to any chain (its put is conditional on its id being new, so a retried append
//! on another chain still records it once), so the chain is chosen for speed alone. Each append
//! of this process takes a chain no other append of this process is on at that moment, and gives
//! it back with the head it left, so the next append there needs no read. A process that never
//! met another writer stays on the lowest chains; an append whose head moved under it (another
//! process on the same chain) leaves that chain to the other writer, and from then on this process
//! takes new chains at random among the [`AUDIT_CHAINS`]: under load the writers settle on chains
//! of their own, and appends stop meeting.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use recon_core::domain::audit::AUDIT_CHAINS;

/// A chain taken for one append (or one transaction's records), with its head as this process
/// last wrote it (`None`: read it first).
#[derive(Clone, Debug)]
struct Slot {
    chain: String,
    head: Option<(u64, String)>,
}

/// A chain an append holds until it says what came of its transaction ([`Taken::written`],
/// [`Taken::head_moved`]); dropped without either (an error, a cancelled append), the chain goes
/// back to be read again, never lost to the process.
#[derive(Debug)]
pub(crate) struct Taken {
    placement: Placement,
    slot: Option<Slot>,
}

impl Taken {
    pub(crate) fn chain(&self) -> &str {
        self.slot.as_ref().map_or("", |s| s.chain.as_str())
    }

    /// The head as this process left it, if it knows it (once: after a failed write it does not).
    pub(crate) fn known_head(&mut self) -> Option<(u64, String)> {
        self.slot.as_mut().and_then(|s| s.head.take())
    }

    /// Written: the chain goes back with its head now at `head`.
    pub(crate) fn written(mut self, head: (u64, String)) {
        if let Some(slot) = self.slot.take() {
            self.placement.give_back(slot, Some(head));
        }
    }

    /// The head had moved: another writer is on this chain; leave it.
    pub(crate) fn head_moved(mut self) {
        if let Some(slot) = self.slot.take() {
            self.placement.leave(slot);
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.placement.give_back(slot, None);
        }
    }
}

/// This process's chains: those free to take (with their heads), those it holds, how often it met
/// another writer.
#[derive(Debug, Default)]
struct State {
    free: Vec<Slot>,
    held: BTreeSet<u8>,
    met: u64,
    /// The chain last left: another writer is there.
    left: Option<u8>,
}

/// Shared by the clones of one audit log (one per process).
#[derive(Clone, Debug, Default)]
pub(crate) struct Placement(Arc<Mutex<State>>);

fn number(chain: &str) -> Option<u8> {
    chain.strip_prefix('c').and_then(|n| n.parse().ok())
}

impl Placement {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A chain no other append of this process is on: a free one it holds, else one it does not
    /// hold yet (the lowest, or once it met another writer one at random, not the one it last
    /// left). With every chain taken (more appends at once than chains), one at random: the head's
    /// condition keeps it correct.
    pub(crate) fn take(&self) -> Taken {
        Taken {
            placement: self.clone(),
            slot: Some(self.slot()),
        }
    }

    fn slot(&self) -> Slot {
        let mut s = self.state();
        if let Some(slot) = s.free.pop() {
            return slot;
        }
        let open: Vec<u8> = (0..AUDIT_CHAINS)
            .filter(|c| !s.held.contains(c) && s.left != Some(*c))
            .collect();
        let random = || usize::try_from(RandomState::new().hash_one(s.met)).unwrap_or(0);
        let n = match (open.first(), s.met) {
            (None, _) => u8::try_from(random() % usize::from(AUDIT_CHAINS)).unwrap_or(0),
            (Some(&lowest), 0) => lowest,
            (Some(_), _) => open[random() % open.len()],
        };
        s.held.insert(n);
        Slot {
            chain: format!("c{n}"),
            head: None,
        }
    }

    /// The append is done with `slot`, its head now `head` (`None`: not known, read it next time).
    fn give_back(&self, mut slot: Slot, head: Option<(u64, String)>) {
        slot.head = head;
        let mut s = self.state();
        // A chain this process no longer holds (another append of it left it meanwhile) is not
        // taken again from here.
        if !number(&slot.chain).is_some_and(|n| s.held.contains(&n)) {
            return;
        }
        s.free.push(slot);
        // The lowest last: `take` pops it first, so a quiet process keeps to few chains.
        s.free.sort_by_key(|f| std::cmp::Reverse(number(&f.chain)));
    }

    /// The head moved under the append on `slot`: another writer is on that chain; leave it.
    fn leave(&self, slot: Slot) {
        let mut s = self.state();
        if let Some(n) = number(&slot.chain) {
            s.held.remove(&n);
            s.left = Some(n);
        }
        s.met += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_process_keeps_to_the_lowest_chains_and_concurrent_appends_never_share_one() {
        let p = Placement::default();
        let a = p.take();
        let b = p.take();
        assert_eq!((a.chain(), b.chain()), ("c0", "c1"));
        b.written((4, "h4".into()));
        a.written((7, "h7".into()));
        let mut again = p.take();
        assert_eq!(again.chain(), "c0");
        assert_eq!(again.known_head(), Some((7, "h7".into())));
        // Dropped unsettled (an error, a cancelled append): the chain is free again, its head to read.
        drop(again);
        let mut after = p.take();
        assert_eq!(after.chain(), "c0");
        assert_eq!(after.known_head(), None);
    }

    #[test]
    fn a_chain_another_writer_moved_is_left_and_new_chains_spread() {
        let p = Placement::default();
        p.take().head_moved();
        let mut seen = BTreeSet::new();
        let mut slots: Vec<Taken> = (1..usize::from(AUDIT_CHAINS)).map(|_| p.take()).collect();
        for s in &mut slots {
            assert!(seen.insert(s.chain().to_owned()), "{} taken twice at once", s.chain());
            assert_ne!(s.chain(), "c0", "the chain left is not taken again at once");
            assert_eq!(s.known_head(), None);
        }
        // Taken in a random order once another writer was met, not lowest first.
        let order: Vec<u8> = slots.iter().filter_map(|s| number(s.chain())).collect();
        assert_ne!(order, (1..AUDIT_CHAINS).collect::<Vec<_>>());
        // Every chain held: one more append still gets a chain.
        assert!(number(p.take().chain()).is_some_and(|n| n < AUDIT_CHAINS));
    }
}
