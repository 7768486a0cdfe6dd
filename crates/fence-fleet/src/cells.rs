//! A fleet's cell names, sorted, kept once per process.
//!
//! Every node of a fleet is given the same names; a process that runs many nodes (a demo, a
//! simulation, tests) keeps one copy of them, not one per node: 80,000 names cost about
//! 2 MB, which 10,000 simulated nodes could not each keep.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

/// A sorted, deduplicated list of cell names.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Cells(Vec<String>);

impl Cells {
    /// The names, sorted.
    pub(crate) fn names(&self) -> &[String] {
        &self.0
    }

    pub(crate) fn contains(&self, cell: &str) -> bool {
        self.0.binary_search_by(|c| c.as_str().cmp(cell)).is_ok()
    }
}

/// The lists given to fleets of this process, by a hash of their names.
static SHARED: Mutex<Option<HashMap<u64, Vec<Weak<Cells>>>>> = Mutex::new(None);

/// The cell set of `names` (sorted and deduplicated), shared with any fleet of this process
/// given the same names.
pub(crate) fn intern(mut names: Vec<String>) -> Arc<Cells> {
    names.sort_unstable();
    names.dedup();
    let cells = Cells(names);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cells.0.hash(&mut h);
    let key = h.finish();
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let all = shared.get_or_insert_with(HashMap::new);
    let same = all.entry(key).or_default();
    same.retain(|w| w.strong_count() > 0);
    if let Some(found) = same.iter().filter_map(Weak::upgrade).find(|c| **c == cells) {
        return found;
    }
    let cells = Arc::new(cells);
    same.push(Arc::downgrade(&cells));
    all.retain(|_, v| !v.is_empty());
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lists_are_kept_once_and_freed_with_their_last_fleet() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = intern(names(&["b", "a", "b"]));
        let b = intern(names(&["a", "b"]));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.names(), ["a", "b"]);
        assert!(a.contains("b") && !a.contains("c"));
        let c = intern(names(&["a", "c"]));
        assert!(!Arc::ptr_eq(&a, &c));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(weak.upgrade().is_none());
    }
}
