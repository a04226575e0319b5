//! When a view derived from a reflector's store (the Watchers by namespace, the compiled image
//! policies) is rebuilt. Every change to the store marks it; the first reader after a change
//! rebuilds it, and a reader that comes while a rebuild is under way waits for it, never
//! reading the view of before a change the store already holds. Otherwise a burst of
//! admissions right after a Watcher is created (a Deployment's pods, created the moment the
//! Watcher is `Ready`) could see it in the store and not in the view: the first rebuilds, the
//! others answer from the old view.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lock;

/// Changes marked, and the last one a rebuild included.
#[derive(Debug)]
pub(crate) struct Freshness {
    /// Marks so far; a fresh view needs a first build.
    marked: AtomicU64,
    /// The mark the last rebuild included (it read the store after reading the mark).
    built: AtomicU64,
    rebuilding: Mutex<()>,
}

impl Default for Freshness {
    fn default() -> Self {
        Self { marked: AtomicU64::new(1), built: AtomicU64::new(0), rebuilding: Mutex::new(()) }
    }
}

impl Freshness {
    /// A change that the store has taken: the next read rebuilds.
    pub(crate) fn mark(&self) {
        self.marked.fetch_add(1, Ordering::AcqRel);
    }

    /// Runs `rebuild` (which reads the store) when a change came since the last one, one at a
    /// time; returns once the view includes every change marked before the call.
    pub(crate) fn refresh(&self, rebuild: impl FnOnce()) {
        if self.built.load(Ordering::Acquire) >= self.marked.load(Ordering::Acquire) {
            return; // the common path: two loads
        }
        let _one = lock(&self.rebuilding);
        let wanted = self.marked.load(Ordering::Acquire);
        if self.built.load(Ordering::Acquire) >= wanted {
            return; // rebuilt while this reader waited
        }
        rebuild();
        self.built.store(wanted, Ordering::Release);
    }

    /// Whether a change was marked since the last call (or rebuild), for tests of what marks.
    #[cfg(test)]
    pub(crate) fn take_marked(&self) -> bool {
        let marked = self.marked.load(Ordering::Acquire);
        self.built.swap(marked, Ordering::AcqRel) < marked
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;

    use super::*;

    /// A reader that comes while another rebuilds waits for that rebuild and does not rebuild
    /// again; a change marked during a rebuild is rebuilt by the next read.
    #[test]
    fn readers_wait_for_a_rebuild_under_way() {
        let freshness = Arc::new(Freshness::default());
        let rebuilds = Arc::new(AtomicUsize::new(0));
        let (started, wait_started) = mpsc::channel();
        let (finish, wait_finish) = mpsc::channel::<()>();
        let first = {
            let (freshness, rebuilds) = (freshness.clone(), rebuilds.clone());
            std::thread::spawn(move || {
                freshness.refresh(|| {
                    started.send(()).expect("started");
                    wait_finish.recv().expect("finish");
                    rebuilds.fetch_add(1, Ordering::SeqCst);
                });
            })
        };
        wait_started.recv().expect("the first reader rebuilds");
        let (done, wait_done) = mpsc::channel();
        let second = {
            let (freshness, rebuilds) = (freshness.clone(), rebuilds.clone());
            std::thread::spawn(move || {
                freshness.refresh(|| {
                    rebuilds.fetch_add(1, Ordering::SeqCst);
                });
                // What it read next is the rebuilt view.
                done.send(rebuilds.load(Ordering::SeqCst)).expect("done");
            })
        };
        assert!(wait_done.try_recv().is_err(), "the second reader does not read the view being rebuilt");
        finish.send(()).expect("finish");
        first.join().expect("first");
        second.join().expect("second");
        assert_eq!(wait_done.recv().expect("done"), 1, "it waited for the one rebuild");

        freshness.mark();
        freshness.refresh(|| {
            rebuilds.fetch_add(1, Ordering::SeqCst);
        });
        freshness.refresh(|| {
            rebuilds.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(rebuilds.load(Ordering::SeqCst), 2, "one rebuild per change");
    }

    #[test]
    fn a_change_during_a_rebuild_is_rebuilt_next() {
        let freshness = Freshness::default();
        let mut rebuilds = 0;
        freshness.refresh(|| {
            rebuilds += 1;
            freshness.mark(); // the store changed after the rebuild read it
        });
        freshness.refresh(|| rebuilds += 1);
        assert_eq!(rebuilds, 2);
        assert!(!freshness.take_marked());
    }
}
