//! The store: one lease key per node and each cell's head, payload and log record objects,
//! with versions per key; how a request lands in it.

use super::*;

/// A lease record as stored.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseObj {
    pub(crate) record: NodeLeaseRecord,
    pub(crate) nonce: String,
    pub(crate) ttl_ms: u64,
}

/// The store: one lease key per node and the cell's head (of the cell in place, see
/// [`Parked`]). Versions count per key (the
/// store contract asks a new version per write of a key, nothing across keys), so writes of
/// different keys in either order reach the same state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    pub(crate) leases: Vec<Option<(LeaseObj, Version)>>,
    pub(super) lease_versions: Vec<u16>,
    /// The part of the cell in place (see [`Parked`]).
    pub(crate) cell: CellStore,
}

impl Store {
    fn lease_version(&mut self, n: usize) -> Version {
        self.lease_versions[n] += 1;
        version(&format!("l{n}.{}", self.lease_versions[n]))
    }

    fn head_version(&mut self) -> Version {
        self.cell.head_versions += 1;
        version(&format!("h{}", self.cell.head_versions))
    }
}

pub(super) fn version(token: &str) -> Version {
    Version::new(token).unwrap_or_else(|_| unreachable!("a version token is never empty"))
}

impl FenceModel {
    /// Request `i` lands in the store (in its cell).
    pub(super) fn land(&self, w: &mut World, i: usize) -> Outcome {
        let req = w.net[i].clone();
        self.in_cell(w, req.cell, |w| self.land_here(w, req))
    }

    fn land_here(&self, w: &mut World, req: Req) -> Outcome {
        match req.op {
            Op::GetLease { node } => Outcome::Lease(w.store.leases[node as usize].clone()),
            Op::GetHead => Outcome::Head(w.store.cell.head.clone()),
            Op::PutLease {
                guard,
                obj,
                sent_mono,
            } => {
                let n = req.from as usize;
                let current = w.store.leases[n].as_ref().map(|(_, v)| v.clone());
                if !guard_holds(&guard, current.as_ref()) {
                    return Outcome::Put(None);
                }
                let node = &mut w.nodes[n];
                if node.generation().as_ref() == Some(&obj.record.generation) {
                    let latest = node.authority_sent.map_or(sent_mono, |s| s.max(sent_mono));
                    node.authority_sent = Some(latest);
                }
                let v = w.store.lease_version(n);
                w.store.leases[n] = Some((obj, v.clone()));
                Outcome::Put(Some(v))
            }
            Op::PutHead { guard, head, data } => {
                let current = w.store.cell.head.as_ref().map(|(_, v)| v.clone());
                if !guard_holds(&guard, current.as_ref()) {
                    return Outcome::Put(None);
                }
                self.head_lands(w, &head, data);
                let v = w.store.head_version();
                w.store.cell.head = Some((head, v.clone()));
                Outcome::Put(Some(v))
            }
            Op::PutBlob { name } => {
                if let Err(at) = w.store.cell.blobs.binary_search(&name) {
                    w.store.cell.blobs.insert(at, name);
                }
                Outcome::Done
            }
            Op::ListBlobs => Outcome::Names(w.store.cell.blobs.clone()),
            Op::DeleteBlob { name } => {
                w.store.cell.blobs.retain(|b| *b != name);
                Outcome::Done
            }
            Op::PutRecord { name, id } => {
                match w.store.cell.records.binary_search_by(|(x, _)| x.cmp(&name)) {
                    Ok(_) => Outcome::Created(false),
                    Err(at) => {
                        w.store.cell.records.insert(at, (name, id));
                        Outcome::Created(true)
                    }
                }
            }
            Op::GetRecord { name } => {
                let found = w.store.cell.records.iter().find(|(x, _)| *x == name);
                Outcome::Record(found.map(|(_, id)| *id))
            }
        }
    }
}

fn guard_holds(guard: &CasGuard, current: Option<&Version>) -> bool {
    match (guard, current) {
        (CasGuard::Absent, None) => true,
        (CasGuard::Match(want), Some(have)) => want == have,
        _ => false,
    }
}
