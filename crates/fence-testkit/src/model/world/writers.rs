//! The cell's other writers beside a node's task: its payload collection
//! (`collect_garbage`) and the co-writer at the cell's epoch (`update_cell`).

use super::*;
use fence_core::decide::collect::{unused_payload, Fate};

/// The co-writer: `update_cell` at the cell's current epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoWriter {
    pub(super) left: u8,
    /// Its payload object is being created; the head write follows.
    pub(super) storing: bool,
    pub(crate) write: Option<(HeadWrite, CellHead, u8)>,
    pub(super) reading: bool,
    pub(super) tries: u8,
    /// The payload of the head its write in flight builds on (what a landed write frees).
    pub(super) replaced: CellPayload,
}

impl FenceModel {
    /// `Claim::collect_garbage`: list the cell's payload objects, read the head, delete each
    /// object the core's rule ([`collectable`] of its [`blob_epoch`]) lets the claim's epoch
    /// delete.
    pub(super) fn start_collect(&self, w: &mut World, n: usize) {
        w.nodes[n].cell.collecting = Some(None);
        let bound = self.bound(w, n);
        self.send(w, n, Thread::Gc, Op::ListBlobs, bound);
    }

    pub(super) fn gc_answer(&self, w: &mut World, n: usize, outcome: Option<Outcome>) {
        let bound = self.bound(w, n);
        let node = &mut w.nodes[n];
        match (node.cell.collecting.take(), outcome) {
            (Some(None), Some(Outcome::Names(names))) => {
                node.cell.collecting = Some(Some(names));
                self.send(w, n, Thread::Gc, Op::GetHead, bound);
            }
            (Some(Some(names)), Some(Outcome::Head(head))) => {
                let Some(epoch) = node.cell.claim.as_ref().map(|c| c.epoch) else {
                    return;
                };
                let current = head.as_ref().and_then(|(h, _)| h.payload.blob().cloned());
                for name in names {
                    let is_current = current.as_ref().is_some_and(|b| b.name == name);
                    if collectable(blob_epoch(&name), epoch, is_current, self.flaws) {
                        self.send(w, n, Thread::Gc, Op::DeleteBlob { name }, bound);
                    }
                }
            }
            // A delete's answer, or a failed request (the collection gives up).
            _ => {}
        }
    }

    pub(super) fn co_answer(&self, w: &mut World, outcome: Option<Outcome>, refused: bool) {
        if w.co.storing {
            w.co.storing = false;
            let stored = matches!(outcome, Some(Outcome::Done));
            let step = match w.co.write.as_mut() {
                Some((write, _, _)) if stored => write.start(),
                _ => {
                    // No head write was sent: not committed.
                    self.co_refused(w);
                    return;
                }
            };
            return self.co_step(w, step);
        }
        if w.co.reading {
            w.co.reading = false;
            let Some(Outcome::Head(Some((head, version)))) = outcome else {
                return;
            };
            return self.co_build(w, head, version);
        }
        let Some((write, _, _)) = w.co.write.as_mut() else {
            return;
        };
        let step = match outcome {
            Some(Outcome::Put(Some(v))) => write.on_put(PutAnswer::Applied(v)),
            Some(Outcome::Put(None)) => write.on_put(PutAnswer::Rejected),
            Some(Outcome::Head(h)) => write.on_read(ReadAnswer::Head(h)),
            None if refused => write.on_put(PutAnswer::NotCommitted { retryable: true }),
            None => write.on_put(PutAnswer::Ambiguous),
            Some(
                Outcome::Lease(_)
                | Outcome::Done
                | Outcome::Names(_)
                | Outcome::Created(_)
                | Outcome::Record(_),
            ) => return,
        };
        self.co_step(w, step);
    }

    fn co_build(&self, w: &mut World, head: CellHead, version: Version) {
        // update_cell: only over a head naming an owner at the epoch it was handed.
        let Some(owner) = head.node.clone() else {
            return;
        };
        w.co.tries += 1;
        // With the log in the scope, the co-writer writes the log's head back as it is (a
        // second `AppendLog` of the claim sealing it, or `fence put` of the same bytes): no
        // data of its own (id 0).
        let id = if self.cfg.appends > 0 {
            0
        } else {
            200 + w.co.tries
        };
        // With collections in the scope, the co-writer's data goes to a payload object.
        let data = if self.cfg.appends > 0 {
            head.payload.clone()
        } else if self.cfg.collections > 0 {
            blob_payload(head.epoch, id)
        } else {
            payload(id)
        };
        w.co.replaced = head.payload.clone();
        let body = CellHead {
            nonce: format!("co-{}", w.co.tries),
            payload: data,
            format: HeadFormat::V2,
            ..head
        };
        let mut write = HeadWrite::new(
            body.nonce.clone(),
            CasGuard::Match(version),
            &owner,
            body.epoch,
        )
        .with_flaws(self.flaws);
        if let Some(blob) = body.payload.blob() {
            let op = Op::PutBlob {
                name: blob.name.clone(),
            };
            w.co.write = Some((write, body, id));
            w.co.storing = true;
            let bound = self.lease_cfg[0].attempt_max_ms;
            return self.send(w, CO as usize, Thread::Co, op, bound);
        }
        let step = write.start();
        w.co.write = Some((write, body, id));
        self.co_step(w, step);
    }

    fn co_step(&self, w: &mut World, step: WriteStep) {
        let bound = self.lease_cfg[0].attempt_max_ms;
        let fate = match &step {
            WriteStep::Done(settled) => Some(Fate::of_settled(settled)),
            WriteStep::Failed(why) => Some(Fate::of_failure(unsettled_error(*why).1)),
            WriteStep::Send | WriteStep::Pause(_) | WriteStep::Read => None,
        };
        if let Some(fate) = fate {
            self.co_free(w, fate);
        }
        match step {
            WriteStep::Send | WriteStep::Pause(_) => {
                let Some((write, body, id)) = &w.co.write else {
                    return;
                };
                let op = Op::PutHead {
                    guard: write.guard().clone(),
                    head: body.clone(),
                    data: (*id != 0).then_some(*id),
                };
                self.send(w, CO as usize, Thread::Co, op, bound);
            }
            WriteStep::Read => self.send(w, CO as usize, Thread::Co, Op::GetHead, bound),
            WriteStep::Done(Settled::Landed(_)) => {
                if let Some((_, _, id)) = w.co.write.take().filter(|(_, _, id)| *id != 0) {
                    self.acknowledged(w, id);
                }
            }
            // Proven not landed: rebuilt on the head found, as new data.
            WriteStep::Done(Settled::Moved { head, version }) if w.co.tries < 3 => {
                self.co_refused(w);
                self.co_build(w, head, version);
            }
            WriteStep::Done(Settled::Moved { .. })
            | WriteStep::Done(Settled::Fenced {
                maybe_landed: false,
                ..
            }) => self.co_refused(w),
            WriteStep::Failed(why) if !unsettled_error(why).1 => self.co_refused(w),
            WriteStep::Done(_) | WriteStep::Failed(_) => w.co.write = None,
        }
    }

    /// What `update_cell` deletes once its write ended with `fate`: the payload object the
    /// core's rule ([`unused_payload`]) leaves to nobody — the replaced one after a landed
    /// write, its own after one proven not to land, none after an unknown fate. Sent and
    /// not awaited, as the runtime's background delete (its answer is dropped).
    fn co_free(&self, w: &mut World, fate: Fate) {
        let replaced = std::mem::take(&mut w.co.replaced);
        let Some((_, body, _)) = &w.co.write else {
            return;
        };
        let Some(blob) = unused_payload(fate, &body.payload, &replaced) else {
            return;
        };
        let op = Op::DeleteBlob {
            name: blob.name.clone(),
        };
        let bound = self.lease_cfg[0].attempt_max_ms;
        self.send(w, CO as usize, Thread::Co, op, bound);
    }

    /// The co-writer's write ends not committed (proven not landed).
    fn co_refused(&self, w: &mut World) {
        if let Some((_, _, id)) = w.co.write.take().filter(|(_, _, id)| *id != 0) {
            w.hist.refused(id);
        }
    }
}
