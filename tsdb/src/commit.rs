//! Commits that wait for the disk without a thread: [`Appender::commit_async`]'s future.
//!
//! A blocking commit parks its thread until the fsync that covers its records is done; a
//! server that answers each push on a thread of its own pays two thread switches a push for
//! that, and a convoy on the sync lock when many wait at once. An async commit instead leaves
//! a [`Waiter`] with the store and returns a future. The store's WAL sync thread makes every
//! waiting record durable with one fsync (group commit), heals the log if that failed, and
//! wakes the futures with the outcome each would have had from [`Appender::commit`].
//!
//! [`Appender::commit`]: crate::Appender::commit
//! [`Appender::commit_async`]: crate::Appender::commit_async

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::Error;

/// What one async commit waits for, and how it ended.
#[derive(Debug, Default)]
pub(crate) struct Waiter {
    state: Mutex<WaiterState>,
}

#[derive(Debug, Default)]
struct WaiterState {
    outcome: Option<Result<(), Error>>,
    waker: Option<Waker>,
}

impl Waiter {
    /// Ends the wait with `outcome` and wakes the future, if it is being polled.
    pub fn resolve(&self, outcome: Result<(), Error>) {
        let waker = {
            let mut state = self.state.lock().expect("commit waiter lock poisoned");
            state.outcome = Some(outcome);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The async commits waiting for the WAL sync thread: each with the sequence number of its
/// last record.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    waiters: Mutex<Vec<(u64, Arc<Waiter>)>>,
}

impl Waiting {
    /// Registers a commit waiting for record `seq` to be durable.
    pub fn add(&self, seq: u64) -> Arc<Waiter> {
        let waiter = Arc::new(Waiter::default());
        self.waiters
            .lock()
            .expect("commit waiters lock poisoned")
            .push((seq, Arc::clone(&waiter)));
        waiter
    }

    /// Every commit waiting now, for the sync thread to settle.
    pub fn take(&self) -> Vec<(u64, Arc<Waiter>)> {
        std::mem::take(&mut *self.waiters.lock().expect("commit waiters lock poisoned"))
    }
}

/// Resolves once the profiles an appender appended are on disk, with what
/// [`crate::Appender::commit`] would have returned: on error none of them is stored (the log
/// was healed, taking them out of the head, before the future resolves, unless maintenance was
/// healing it at that moment, which then does). Holds no lock and no thread while it waits.
#[derive(Debug)]
#[must_use = "the profiles are not known to be durable until the commit resolves"]
pub struct Commit {
    waiter: Option<Arc<Waiter>>,
}

impl Commit {
    /// A commit with nothing to wait for.
    pub(crate) fn done() -> Commit {
        Commit { waiter: None }
    }

    /// A commit waiting on `waiter`.
    pub(crate) fn waiting(waiter: Arc<Waiter>) -> Commit {
        Commit {
            waiter: Some(waiter),
        }
    }
}

impl Future for Commit {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(waiter) = &self.waiter else {
            return Poll::Ready(Ok(()));
        };
        let mut state = waiter.state.lock().expect("commit waiter lock poisoned");
        match state.outcome.take() {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                match &mut state.waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}
