//! Fair placement of cells on live nodes: a pure function of the cell set and the live set,
//! so every node computes the same answer from the same view, with no coordinator.
//!
//! Each (cell, node) pair gets a score from a stable hash (rendezvous hashing). Pairs are
//! taken best score first; a pair is used when its cell is still unplaced and its node has
//! fewer than `ceil(cells / nodes)` cells. The result is the stable matching of cells and
//! nodes under one shared score: it does not depend on the order of the inputs, no node gets
//! more than its fair share, and when one node joins or leaves, a cell's target changes only
//! where the changed node now wins it or it lost its place — mostly the cells of the node
//! that left, or the share a joining node takes.
//!
//! ```
//! use fence_fleet::assign::{assign, fair_share};
//! let cells: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
//! let nodes = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
//! let placed = assign(&cells, &nodes);
//! assert_eq!(placed.len(), 10);
//! assert_eq!(fair_share(10, 3), 4);
//! for n in &nodes {
//!     assert!(placed.values().filter(|v| *v == n).count() <= 4);
//! }
//! ```

use std::collections::{BTreeMap, HashMap};

/// The most cells one node may hold with `nodes` live nodes: `ceil(cells / nodes)`
/// (`cells` when there are no nodes).
pub fn fair_share(cells: usize, nodes: usize) -> usize {
    if nodes == 0 {
        return cells;
    }
    cells.div_ceil(nodes)
}

/// The target node of every cell, over the live `nodes` (empty when there are none).
/// Duplicates in either list count once.
pub fn assign(cells: &[String], nodes: &[String]) -> BTreeMap<String, String> {
    let mut nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut cells: Vec<&str> = cells.iter().map(String::as_str).collect();
    cells.sort_unstable();
    cells.dedup();
    let mut placed = BTreeMap::new();
    if nodes.is_empty() {
        return placed;
    }
    let cap = fair_share(cells.len(), nodes.len());
    let node_hash: Vec<u64> = nodes.iter().map(|n| stable_hash(n.as_bytes())).collect();
    let mut pairs: Vec<(u64, u32, u32)> = Vec::with_capacity(cells.len() * nodes.len());
    for (ci, c) in cells.iter().enumerate() {
        let ch = stable_hash(c.as_bytes());
        for (ni, nh) in node_hash.iter().enumerate() {
            pairs.push((mix(ch ^ mix(*nh)), ci as u32, ni as u32));
        }
    }
    // Best score first; ties (vanishingly rare) broken by name order, so still deterministic.
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut load: HashMap<u32, usize> = HashMap::new();
    for (_, ci, ni) in pairs {
        let cell = cells[ci as usize];
        if placed.contains_key(cell) {
            continue;
        }
        let l = load.entry(ni).or_default();
        if *l < cap {
            *l += 1;
            placed.insert(cell.to_owned(), nodes[ni as usize].to_owned());
        }
    }
    placed
}

/// FNV-1a over `bytes`, finished with [`mix`]. Written here rather than taken from std:
/// every node of a fleet — different processes, builds and Rust releases — must compute the
/// same placement, and std's `DefaultHasher` promises no stable output.
fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// The splitmix64 finaliser: spreads every input bit over the output.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn moved(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> usize {
        a.iter().filter(|(c, n)| b.get(*c) != Some(n)).count()
    }

    #[test]
    fn every_cell_is_placed_within_the_fair_share_whatever_the_input_order() {
        for (m, n) in [(1_024, 3), (32, 4), (7, 10), (100, 1), (33, 2)] {
            let cells = names("shard-", m);
            let nodes = names("node-", n);
            let placed = assign(&cells, &nodes);
            assert_eq!(placed.len(), m);
            let cap = fair_share(m, n);
            for node in &nodes {
                assert!(placed.values().filter(|v| *v == node).count() <= cap);
            }
            let mut rev_cells = cells.clone();
            rev_cells.reverse();
            let mut rev_nodes = nodes.clone();
            rev_nodes.reverse();
            assert_eq!(assign(&rev_cells, &rev_nodes), placed);
        }
        assert!(assign(&names("c", 3), &[]).is_empty());
    }

    #[test]
    fn a_join_or_a_leave_moves_little_more_than_the_share_that_must_move() {
        let cells = names("shard-", 1_024);
        let three = assign(&cells, &names("node-", 3));
        let four = assign(&cells, &names("node-", 4));
        let two = assign(&cells, &names("node-", 2));
        // A join must move a quarter (256) to the new node; a leave must move the third
        // (≈341) the node held.
        let join = moved(&three, &four);
        let leave = moved(&three, &two);
        assert!(join <= 256 * 13 / 10, "join moved {join}");
        assert!(leave <= 342 * 13 / 10, "leave moved {leave}");
    }
}
