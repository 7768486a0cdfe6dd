//! Fair placement of cells on live nodes.
//!
//! Two functions:
//!
//! - [`plan`]: what a fleet's leader publishes. It starts from the previous placement and
//!   changes only what must change: cells of departed nodes go to their **heirs** (named in
//!   advance, so survivors can act on a death without waiting for the leader), nodes above
//!   `ceil(cells / nodes)` give up their excess, and nodes below `floor(cells / nodes)` (a
//!   joiner) receive cells from the fullest ones. Every cell also gets an heir: the node that
//!   takes it if its owner dies or leaves, chosen so that no heir would then hold more than
//!   the fair share of the smaller fleet. Cost `O(cells · log nodes)`; it moves the fewest
//!   cells a fair placement allows, where a pure function of the live set moves many more
//!   (every cap change reshuffles it).
//! - [`assign`]: a pure function of the cell set and the live set (rendezvous hashing),
//!   `O(cells · nodes)`: for small fleets and for tools that need the same answer everywhere
//!   without a leader.
//!
//! ```
//! use fence_fleet::assign::{assign, fair_share, plan, Placement};
//! let cells: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
//! let nodes = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
//! let placed = assign(&cells, &nodes);
//! assert_eq!(placed.len(), 10);
//! assert_eq!(fair_share(10, 3), 4);
//! for n in &nodes {
//!     assert!(placed.values().filter(|v| *v == n).count() <= 4);
//! }
//! // The leader's placement: a fourth node joins and takes its share from the others.
//! let three = plan(&Placement::default(), &cells, &nodes);
//! let four_nodes = ["a".to_owned(), "b".to_owned(), "c".to_owned(), "d".to_owned()];
//! let four = plan(&three, &cells, &four_nodes);
//! let moved = cells.iter().filter(|c| three.targets[*c] != four.targets[*c]).count();
//! assert_eq!(moved, 2); // d holds floor(10 / 4) = 2, and nothing else moves
//! assert!(four.heirs.iter().all(|(c, h)| four.targets[c] != *h));
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// Where every cell goes, and who inherits it: the leader's placement.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The node each cell is placed on.
    pub targets: BTreeMap<String, String>,
    /// The node that takes each cell if the node it is placed on dies or leaves (none in a
    /// fleet of one).
    pub heirs: BTreeMap<String, String>,
}

impl Placement {
    /// The cells placed on `node`, sorted.
    pub fn cells_of(&self, node: &str) -> Vec<String> {
        let on = self.targets.iter().filter(|(_, n)| *n == node);
        on.map(|(c, _)| c.clone()).collect()
    }

    /// How many cells each node holds.
    pub fn loads(&self) -> BTreeMap<String, usize> {
        let mut loads = BTreeMap::new();
        for n in self.targets.values() {
            *loads.entry(n.clone()).or_default() += 1;
        }
        loads
    }
}

/// The next placement of `cells` over the `live` nodes, from `prev` (see the module docs).
/// Deterministic; the order of the inputs does not matter, and duplicates count once.
///
/// Guarantees, for `n` live nodes and `m` cells: every node holds `floor(m / n)` or
/// `ceil(m / n)` cells; a cell moves only if its node left, was above `ceil(m / n)`, or gave
/// it to a node below `floor(m / n)`; a cell whose node left goes to its heir in `prev`
/// when that heir is live and has room; every heir differs from the cell's node, and the
/// heirs of one node's cells would each hold at most `ceil(m / (n - 1))` after that node
/// left.
pub fn plan(prev: &Placement, cells: &[String], live: &[String]) -> Placement {
    let live: BTreeSet<&str> = live.iter().map(String::as_str).collect();
    let cells: BTreeSet<&str> = cells.iter().map(String::as_str).collect();
    if live.is_empty() {
        return Placement::default();
    }
    let mut on = Holdings::new(&live);
    let cap = fair_share(cells.len(), live.len());
    let mut unplaced = Vec::new();
    for c in &cells {
        match prev.targets.get(*c).map(String::as_str) {
            Some(t) if live.contains(t) => on.put(c, t),
            _ => unplaced.push(*c),
        }
    }
    // Nodes above the cap give up their excess, lowest score first.
    loop {
        let (load, node) = on.most();
        if load <= cap {
            break;
        }
        unplaced.push(on.take_weakest(node, &BTreeSet::new()));
    }
    // Cells placed just now stay where they land (an heir may already be taking one).
    let pinned: BTreeSet<&str> = unplaced.iter().copied().collect();
    for c in unplaced {
        let heir = prev.heirs.get(c).map(String::as_str);
        let to = match heir.filter(|h| live.contains(h) && on.load(h) < cap) {
            Some(h) => h,
            None => on.least(),
        };
        on.put(c, to);
    }
    // Nodes below the floor (joiners) take cells from the fullest, one at a time.
    let floor = cells.len() / live.len();
    loop {
        let needy = on.least();
        let (most, donor) = on.most();
        if on.load(needy) >= floor || most <= floor {
            break;
        }
        let c = on.take_weakest(donor, &pinned);
        on.put(c, needy);
    }
    let heirs = choose_heirs(prev, &on);
    Placement {
        targets: on
            .target
            .iter()
            .map(|(c, n)| ((*c).to_owned(), (*n).to_owned()))
            .collect(),
        heirs,
    }
}

/// Which node each cell is on, each node's cells by score, and the nodes by load.
struct Holdings<'a> {
    target: BTreeMap<&'a str, &'a str>,
    /// Each node's cells as (score, cell): the first is the one it gives up first.
    cells: HashMap<&'a str, BTreeSet<(u64, &'a str)>>,
    /// (load, tie-break, node).
    order: BTreeSet<(usize, u64, &'a str)>,
}

impl<'a> Holdings<'a> {
    fn new(live: &BTreeSet<&'a str>) -> Self {
        Holdings {
            target: BTreeMap::new(),
            cells: live.iter().map(|n| (*n, BTreeSet::new())).collect(),
            order: live
                .iter()
                .map(|n| (0, stable_hash(n.as_bytes()), *n))
                .collect(),
        }
    }

    fn load(&self, node: &str) -> usize {
        self.cells.get(node).map_or(0, BTreeSet::len)
    }

    fn reorder(&mut self, node: &'a str, before: usize) {
        let tie = stable_hash(node.as_bytes());
        self.order.remove(&(before, tie, node));
        self.order.insert((self.load(node), tie, node));
    }

    fn put(&mut self, cell: &'a str, node: &'a str) {
        let before = self.load(node);
        self.target.insert(cell, node);
        let set = self.cells.entry(node).or_default();
        set.insert((score(cell, node), cell));
        self.reorder(node, before);
    }

    /// Removes and returns `node`'s lowest-scoring cell that is not `pinned` (or, if all
    /// are, its lowest-scoring one).
    fn take_weakest(&mut self, node: &'a str, pinned: &BTreeSet<&str>) -> &'a str {
        let before = self.load(node);
        let Some(set) = self.cells.get_mut(node) else {
            return "";
        };
        let pick = set.iter().find(|(_, c)| !pinned.contains(c)).copied();
        let Some(entry @ (_, cell)) = pick.or_else(|| set.first().copied()) else {
            return "";
        };
        set.remove(&entry);
        self.target.remove(cell);
        self.reorder(node, before);
        cell
    }

    fn least(&self) -> &'a str {
        self.order.first().map_or("", |(_, _, n)| n)
    }

    fn most(&self) -> (usize, &'a str) {
        self.order.last().map_or((0, ""), |(l, _, n)| (*l, *n))
    }
}

/// Score of `cell` on `node`: which of a node's cells it gives up first (the lowest).
fn score(cell: &str, node: &str) -> u64 {
    mix(stable_hash(cell.as_bytes()) ^ mix(stable_hash(node.as_bytes())))
}

/// An heir for every cell: the previous one while it is still valid, else the node with the
/// least load plus cells to inherit — never the cell's own node, and never more of one
/// node's cells than keep the heir within `ceil(cells / (nodes - 1))` once that node left.
fn choose_heirs(prev: &Placement, on: &Holdings<'_>) -> BTreeMap<String, String> {
    let nodes = on.cells.len();
    let mut heirs = BTreeMap::new();
    if nodes < 2 {
        return heirs;
    }
    let cap = fair_share(on.target.len(), nodes - 1);
    // (load + cells to inherit, tie-break, node): the next heir is the first with room.
    let mut burden: BTreeSet<(usize, u64, &str)> = on.order.iter().copied().collect();
    let mut owners: Vec<&&str> = on.cells.keys().collect();
    owners.sort();
    for owner in owners {
        let mut taken: HashMap<&str, usize> = HashMap::new();
        let room = |h: &str, taken: &HashMap<&str, usize>| {
            h != *owner
                && on.cells.contains_key(h)
                && on.load(h) + taken.get(h).copied().unwrap_or(0) < cap
        };
        let mut owned: Vec<&str> = on.cells[*owner].iter().map(|(_, c)| *c).collect();
        owned.sort_unstable();
        let mut fresh = Vec::new();
        for c in owned {
            match prev.heirs.get(c).map(String::as_str) {
                Some(h) if room(h, &taken) => {
                    *taken.entry(h).or_default() += 1;
                    heirs.insert(c.to_owned(), h.to_owned());
                }
                _ => fresh.push(c),
            }
        }
        for c in fresh {
            let pick = burden.iter().find(|(_, _, h)| room(h, &taken)).copied();
            let Some(entry @ (b, tie, h)) = pick else {
                continue;
            };
            burden.remove(&entry);
            burden.insert((b + 1, tie, h));
            *taken.entry(h).or_default() += 1;
            heirs.insert(c.to_owned(), h.to_owned());
        }
    }
    heirs
}

/// Who watches whom (`watched → watcher`): the `members` on a ring ordered by a stable hash
/// of their ids, each watching the next; each of the `leaving` nodes (members no longer, but
/// not gone yet) is watched by the member that precedes it on that ring. Every node is
/// watched by exactly one other; a member's join or leave changes the watcher of one member.
pub fn watchers(members: &[String], leaving: &[String]) -> BTreeMap<String, String> {
    let place = |n: &String| (stable_hash(n.as_bytes()), n.clone());
    let mut ring: Vec<(u64, String)> = members.iter().map(place).collect();
    ring.sort();
    ring.dedup();
    let mut out = BTreeMap::new();
    if ring.is_empty() {
        return out;
    }
    if ring.len() > 1 {
        for (i, (_, n)) in ring.iter().enumerate() {
            let next = &ring[(i + 1) % ring.len()].1;
            out.insert(next.clone(), n.clone());
        }
    }
    for l in leaving {
        let at = ring.partition_point(|p| *p < place(l));
        let before = &ring[(at + ring.len() - 1) % ring.len()].1;
        if before != l {
            out.insert(l.clone(), before.clone());
        }
    }
    out
}

/// FNV-1a over `bytes`, finished with [`mix`]. Written here rather than taken from std:
/// every node of a fleet — different processes, builds and Rust releases — must compute the
/// same placement, and std's `DefaultHasher` promises no stable output.
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
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

    /// A tiny deterministic generator for the placement tests.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    /// Every invariant `plan` promises, for `p` over `cells` and `live`.
    fn check(p: &Placement, cells: &[String], live: &[String]) {
        assert_eq!(p.targets.len(), cells.len(), "every cell placed");
        let (m, n) = (cells.len(), live.len());
        let loads = p.loads();
        for node in live {
            let l = loads.get(node).copied().unwrap_or(0);
            assert!(l >= m / n && l <= fair_share(m, n), "{node} holds {l}");
        }
        if n < 2 {
            assert!(p.heirs.is_empty());
            return;
        }
        assert_eq!(p.heirs.len(), m, "every cell has an heir");
        let cap = fair_share(m, n - 1);
        for owner in live {
            let mut after = loads.clone();
            for c in p.cells_of(owner) {
                let h = &p.heirs[&c];
                assert!(h != owner && live.contains(h), "{c}: heir {h}");
                *after.entry(h.clone()).or_default() += 1;
            }
            after.remove(owner);
            assert!(
                after.values().all(|l| *l <= cap),
                "{owner} leaving: {after:?}"
            );
        }
    }

    #[test]
    fn a_plan_keeps_every_promise_through_random_joins_and_leaves() {
        let mut rng = Lcg(7);
        for round in 0..40 {
            let cells = names("c", 1 + rng.below(60));
            let mut live: Vec<String> = names("n", 1 + rng.below(8));
            let mut p = plan(&Placement::default(), &cells, &live);
            check(&p, &cells, &live);
            for _ in 0..12 {
                let before = p.clone();
                let leave = live.len() > 1 && rng.below(2) == 0;
                let gone = if leave {
                    Some(live.remove(rng.below(live.len())))
                } else {
                    live.push(format!("j{round}-{}", rng.below(1_000_000)));
                    None
                };
                p = plan(&before, &cells, &live);
                check(&p, &cells, &live);
                let moved: Vec<&String> = cells
                    .iter()
                    .filter(|c| before.targets[*c] != p.targets[*c])
                    .collect();
                let m = cells.len();
                match gone {
                    // The leaver's cells, plus at most what the new floor asks of others.
                    Some(g) => {
                        let lost = before.cells_of(&g).len();
                        let floor = m / live.len();
                        assert!(moved.len() <= lost + floor, "leave moved {}", moved.len());
                        let kept_heirs = before
                            .cells_of(&g)
                            .iter()
                            .filter(|c| p.targets[*c] == before.heirs[*c])
                            .count();
                        assert_eq!(kept_heirs, lost, "a leaver's cells go to their heirs");
                    }
                    // A join moves exactly what the joiner takes, and others only to shed
                    // above the new cap.
                    None => {
                        let joiner = live.last().unwrap();
                        let taken = p.cells_of(joiner).len();
                        assert_eq!(moved.len(), taken, "join moved {}", moved.len());
                    }
                }
            }
        }
    }

    #[test]
    fn a_death_in_a_large_fleet_moves_only_the_dead_nodes_cells_to_distinct_heirs() {
        let cells = names("cell-", 8_000);
        let nodes = names("node-", 1_000);
        let p = plan(&Placement::default(), &cells, &nodes);
        check(&p, &cells, &nodes);
        let dead = &nodes[17];
        let survivors: Vec<String> = nodes.iter().filter(|n| *n != dead).cloned().collect();
        let after = plan(&p, &cells, &survivors);
        let moved: Vec<&String> = cells
            .iter()
            .filter(|c| p.targets[*c] != after.targets[*c])
            .collect();
        assert_eq!(moved.len(), 8);
        let heirs: BTreeSet<&String> = moved.iter().map(|c| &after.targets[*c]).collect();
        assert_eq!(heirs.len(), 8, "each heir takes one");
        for c in moved {
            assert_eq!(after.targets[c], p.heirs[c]);
        }
        // A join takes 8 (the floor of 8000 / 1000 nodes): the 8 heirs give theirs up.
        let mut joined = survivors.clone();
        joined.push("node-new".into());
        let j = plan(&after, &cells, &joined);
        let moved = cells
            .iter()
            .filter(|c| after.targets[*c] != j.targets[*c])
            .count();
        assert_eq!((moved, j.cells_of("node-new").len()), (8, 8));
    }

    #[test]
    fn every_member_is_watched_by_exactly_one_other() {
        for n in [0, 1, 2, 3, 50] {
            let members = names("m", n);
            let leaving = names("gone-", 3);
            let w = watchers(&members, &leaving);
            for l in &leaving {
                assert_eq!(w.contains_key(l), n > 0, "{l} is watched while it leaves");
            }
            let w: BTreeMap<String, String> = w
                .into_iter()
                .filter(|(d, _)| !d.starts_with("gone-"))
                .collect();
            assert!(w.values().all(|watcher| members.contains(watcher)));
            assert_eq!(w.len(), if n < 2 { 0 } else { n });
            let mut watching: BTreeMap<&String, usize> = BTreeMap::new();
            for (watched, watcher) in &w {
                assert_ne!(watched, watcher);
                *watching.entry(watcher).or_default() += 1;
            }
            assert!(watching.values().all(|k| *k == 1));
        }
    }
}
