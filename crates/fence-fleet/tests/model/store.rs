//! The model's store, as the fleet sees it: cell heads (owner, epoch, generation), node
//! leases (renewed every tick while their process runs), and assignment records. The core's
//! claim rule is taken as proven (fence-testkit's model checks it): a claim lands when the
//! head names nobody, this node, or a node whose lease is released or was not renewed for a
//! TTL; a resume, a hand-off and a release land on the head they were made from.

use std::collections::{BTreeMap, BTreeSet};

use fence_core::decide::ObservedLease;
use fence_core::{NodeLeaseRecord, Version};
use fence_fleet::decide::record::{Assignment, Notice, Watched};
use fence_fleet::decide::{Claimed, Seen};

/// A cell head.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Head {
    pub owner: Option<String>,
    pub epoch: u64,
    /// The owner's lease generation when it wrote the head.
    pub generation: String,
}

/// A node lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub generation: String,
    /// Bumped by every write (renewal, release, tombstone).
    pub version: u64,
    /// When (monotonic ms) it was last renewed.
    pub renewed_mono: u64,
    pub released: bool,
}

/// An assignment record, hashable (the record's unknown fields are never written here).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rec {
    pub generation: String,
    pub leaving: bool,
    pub term: u64,
    pub leader: String,
    pub cells: Vec<String>,
    pub heirs: BTreeMap<String, String>,
    pub moves: BTreeMap<String, String>,
    pub watch: Vec<Watched>,
    pub notices: Vec<Notice>,
}

impl Rec {
    pub fn assignment(&self, node: &str) -> Assignment {
        Assignment {
            generation: self.generation.clone(),
            leaving: self.leaving,
            term: self.term,
            leader: self.leader.clone(),
            cells: self.cells.clone(),
            heirs: self.heirs.clone(),
            moves: self.moves.clone(),
            watch: self.watch.clone(),
            notices: self.notices.clone(),
            ..Assignment::empty(node)
        }
    }
}

/// The store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Store {
    pub heads: BTreeMap<String, Head>,
    pub leases: BTreeMap<String, Lease>,
    pub records: BTreeMap<String, Rec>,
}

impl Store {
    pub fn head(&self, cell: &str) -> Seen {
        let h = self.heads.get(cell).cloned().unwrap_or_default();
        Seen {
            owner: h.owner,
            epoch: h.epoch,
        }
    }

    /// Whether `node`'s lease is dead by the claim rule at `now_mono`: released, absent, or
    /// not renewed for a TTL.
    pub fn lease_dead(&self, node: &str, now_mono: u64, ttl_ms: u64) -> bool {
        self.leases
            .get(node)
            .is_none_or(|l| l.released || now_mono >= l.renewed_mono + ttl_ms)
    }

    /// Claims `cell` for `me` (generation `gen`), or resumes it if the head names `me`
    /// under a vouched generation.
    pub fn claim(
        &mut self,
        cell: &str,
        me: &str,
        gen: &str,
        vouched: &BTreeSet<String>,
        now_mono: u64,
        ttl_ms: u64,
    ) -> Claimed {
        let h = self.heads.get(cell).cloned().unwrap_or_default();
        let mine = h.owner.as_deref() == Some(me);
        if mine && vouched.contains(&h.generation) {
            self.write_head(cell, me, h.epoch, gen);
            return Claimed::Held {
                epoch: h.epoch,
                resumed: true,
            };
        }
        let free = match &h.owner {
            None => true,
            Some(o) => o == me || self.lease_dead(o, now_mono, ttl_ms),
        };
        if !free {
            return Claimed::Busy;
        }
        self.write_head(cell, me, h.epoch + 1, gen);
        Claimed::Held {
            epoch: h.epoch + 1,
            resumed: false,
        }
    }

    /// Adopts `cell` (it must name `me`): a seal at its epoch under `gen`.
    pub fn adopt(&mut self, cell: &str, me: &str, gen: &str) -> Option<u64> {
        let h = self.heads.get(cell).cloned().unwrap_or_default();
        if h.owner.as_deref() != Some(me) {
            return None;
        }
        self.write_head(cell, me, h.epoch, gen);
        Some(h.epoch)
    }

    /// Hands `cell`, held by `me` at `epoch`, to `to` (generation `gen`) at the next epoch.
    pub fn hand_off(
        &mut self,
        cell: &str,
        me: &str,
        epoch: u64,
        to: &str,
        gen: &str,
    ) -> Option<u64> {
        let h = self.heads.get(cell).cloned().unwrap_or_default();
        if h.owner.as_deref() != Some(me) || h.epoch != epoch {
            return None;
        }
        self.write_head(cell, to, epoch + 1, gen);
        Some(epoch + 1)
    }

    /// Releases `cell`, held by `me` at `epoch` (the epoch is kept).
    pub fn release(&mut self, cell: &str, me: &str, epoch: u64) -> bool {
        let Some(h) = self.heads.get_mut(cell) else {
            return false;
        };
        if h.owner.as_deref() != Some(me) || h.epoch != epoch {
            return false;
        }
        h.owner = None;
        true
    }

    fn write_head(&mut self, cell: &str, owner: &str, epoch: u64, gen: &str) {
        let h = Head {
            owner: Some(owner.to_owned()),
            epoch,
            generation: gen.to_owned(),
        };
        self.heads.insert(cell.to_owned(), h);
    }

    /// `node`'s lease as a read returns it (`None`: there is none).
    pub fn observe(&self, node: &str, ttl_ms: u64, wall_base: u64) -> Option<ObservedLease> {
        let l = self.leases.get(node)?;
        let expires_ms = if l.released {
            0
        } else {
            wall_base + l.renewed_mono + ttl_ms
        };
        let record = NodeLeaseRecord {
            node: node.to_owned(),
            expires_ms,
            addr: String::new(),
            peer_protocol: 1,
            generation: l.generation.clone(),
        };
        Some(ObservedLease {
            record,
            version: Version::new(format!("v{}", l.version)).ok()?,
            nonce: format!("{}-{}", l.generation, l.version),
            ttl_ms: Some(ttl_ms),
        })
    }

    /// Writes the released record over the version observed, if the lease has not moved.
    pub fn tombstone(&mut self, node: &str, version: &str) -> bool {
        let Some(l) = self.leases.get_mut(node) else {
            return false;
        };
        if format!("v{}", l.version) != version || l.released {
            return false;
        }
        l.released = true;
        l.version += 1;
        true
    }

    /// Appends `notices` to `node`'s record.
    pub fn post(&mut self, node: &str, notices: &[Notice]) {
        let rec = self.records.entry(node.to_owned()).or_default();
        for n in notices {
            if !rec.notices.contains(n) {
                rec.notices.push(n.clone());
            }
        }
    }
}
