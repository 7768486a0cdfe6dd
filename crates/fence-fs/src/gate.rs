//! The in-process queue of a key's writers: of the writers of one key that share a store
//! handle, one at a time tries the key's file lock; the others wait their turn in FIFO order
//! on an async mutex, holding no thread and making no system call while they wait.
//!
//! This is load shedding, not correctness: the file lock decides. A thousand writers stuck
//! behind a lock held by a paused process cost one poller, not a thousand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fence_core::Key;

use crate::layout::fnv1a64;

type Queue = Arc<tokio::sync::Mutex<()>>;

/// The queues of the keys being written, created on first use and dropped with their last
/// writer.
#[derive(Debug, Default)]
pub struct Gates {
    queues: Mutex<HashMap<u64, Queue>>,
}

impl Gates {
    /// The queue of `key` (keys whose hashes collide share one, which only serialises them).
    pub fn gate(&self, key: &Key) -> Gate<'_> {
        let id = fnv1a64(key.as_str().as_bytes());
        let queue = self.lock().entry(id).or_default().clone();
        Gate {
            gates: self,
            id,
            queue: Some(queue),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Queue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// One writer's place in a key's queue.
#[derive(Debug)]
pub struct Gate<'a> {
    gates: &'a Gates,
    id: u64,
    queue: Option<Queue>,
}

impl Gate<'_> {
    /// The queue's mutex: hold it while trying the file lock and writing.
    pub fn queue(&self) -> &tokio::sync::Mutex<()> {
        self.queue.as_ref().expect("present until dropped")
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let mut queues = self.gates.lock();
        // Our reference goes under the registry's lock, so the count below is exact.
        drop(self.queue.take());
        if queues
            .get(&self.id)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            queues.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_are_shared_per_key_and_dropped_with_their_last_writer() {
        let gates = Gates::default();
        let (a, b) = (Key::new("a").unwrap(), Key::new("b").unwrap());
        let first = gates.gate(&a);
        let second = gates.gate(&a);
        let other = gates.gate(&b);
        assert!(std::ptr::eq(first.queue(), second.queue()));
        assert!(!std::ptr::eq(first.queue(), other.queue()));
        let turn = first.queue().try_lock().unwrap();
        assert!(second.queue().try_lock().is_err());
        drop(turn);
        drop((first, other));
        assert_eq!(gates.len(), 1);
        drop(second);
        assert_eq!(gates.len(), 0);
    }
}
