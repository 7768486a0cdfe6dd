//! The settlement of one head write by evidence, as a step machine: the shell sends, reads
//! back and waits as told, and feeds each answer in; the machine says what the answers prove.
//!
//! The same body (one nonce) is sent on every attempt under the same guard, so at most one
//! attempt can land and a read-back recognises whichever did ([`readback_as`]). After an
//! ambiguous answer the write is only ever re-sent unchanged; it is never rebuilt on a newer
//! head, because a head that moved on does not prove ours never landed underneath it.
//!
//! Every head write — claim, resume, fenced write, release, hand-off, `update_cell` — runs
//! this machine, in the tokio runtime and in the model check alike.
//!
//! ```
//! use fence_core::decide::write::{HeadWrite, PutAnswer, Settled, WriteStep};
//! use fence_core::{CasGuard, Version};
//! let mut w = HeadWrite::new("n1", CasGuard::Absent, "me", 1);
//! assert_eq!(w.start(), WriteStep::Send);
//! let v = Version::new("v1").unwrap();
//! assert_eq!(w.on_put(PutAnswer::Applied(v.clone())), WriteStep::Done(Settled::Landed(v)));
//! ```

use super::cell::{readback_as, Evidence};
use crate::flaws::{sabotaged, Flaws};
use crate::record::CellHead;
use crate::store::{CasGuard, Version};

/// Sends per write, re-sends of the same request included.
pub const MAX_SENDS: u8 = 4;

/// What became of one send of the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutAnswer {
    /// Applied at this version.
    Applied(Version),
    /// The store proved the guard false.
    Rejected,
    /// Provably not written; `retryable` when sending again may help.
    NotCommitted {
        /// Whether the failure is worth another send.
        retryable: bool,
    },
    /// May have landed (a lost answer, a timeout after sending).
    Ambiguous,
}

/// What a read-back of the head returned.
#[derive(Clone, Debug, PartialEq)]
pub enum ReadAnswer {
    /// The head (`None`: absent) and its version.
    Head(Option<(CellHead, Version)>),
    /// The read failed or timed out.
    Failed,
}

/// How a head write settled.
#[derive(Clone, Debug, PartialEq)]
pub enum Settled {
    /// The write is in the store at this version.
    Landed(Version),
    /// Proven not landed; the head moved to `head` at `version`, still `(owner, epoch)` (a
    /// co-writer at the same epoch): rebuild on it and write again.
    Moved {
        /// The head found.
        head: CellHead,
        /// Its version.
        version: Version,
    },
    /// The cell is no longer `(owner, epoch)`'s: a later epoch, another owner, a release.
    Fenced {
        /// The epoch found (0 when the head is gone).
        epoch: u64,
        /// Whether our write may have landed before it was superseded.
        maybe_landed: bool,
    },
}

/// A write that got no verdict the caller can build on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unsettled {
    /// Sends ran out, or a send failed for good: the last store error says why.
    /// `ambiguous` when an attempt may have landed.
    NoVerdict {
        /// Whether an attempt may have landed.
        ambiguous: bool,
    },
    /// A read-back failed and nothing was ambiguous: not written.
    ReadFailed,
    /// The store rejected a write whose guard still holds (not linearizable?).
    GuardStillHolds,
    /// Another write at our epoch came first after an ambiguous attempt: ours may have landed
    /// under it, and is never re-applied.
    MovedAfterAmbiguity,
}

/// What the shell does next.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteStep {
    /// Send the write (the same body under the same guard).
    Send,
    /// Wait this many ms, then call [`HeadWrite::resume`] (a refused send, retried).
    Pause(u64),
    /// Read the head back and call [`HeadWrite::on_read`].
    Read,
    /// Settled by evidence.
    Done(Settled),
    /// No verdict to build on.
    Failed(Unsettled),
}

/// One head write being settled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeadWrite {
    nonce: String,
    guard: CasGuard,
    owner: String,
    epoch: u64,
    /// The lease generation of the process writing, if known.
    writer: Option<String>,
    sends: u8,
    uncertain: bool,
    resend_first: bool,
    flaws: Flaws,
}

impl HeadWrite {
    /// A write of a body with `nonce` under `guard`, by `owner` at `epoch` (whose ownership
    /// a read-back must show for the write to still be ours).
    pub fn new(nonce: impl Into<String>, guard: CasGuard, owner: &str, epoch: u64) -> Self {
        HeadWrite {
            nonce: nonce.into(),
            guard,
            owner: owner.to_owned(),
            epoch,
            writer: None,
            sends: 0,
            uncertain: false,
            resend_first: false,
            flaws: Flaws::default(),
        }
    }

    /// The same write with sabotage `flaws` (only ever set with the `sabotage` feature).
    #[must_use]
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// The same write on a store whose rejections carry the current head
    /// ([`Capabilities::current_on_reject`](crate::Capabilities::current_on_reject)): after
    /// an ambiguous answer it sends again before it reads. The re-send is the same request
    /// under the same guard, so it settles as a read and a send would: applied if nothing
    /// landed meanwhile, or rejected with the head that shows whether ours did — one request
    /// instead of two. The last send allowed is still followed by a read.
    ///
    /// ```
    /// use fence_core::decide::write::{HeadWrite, PutAnswer, WriteStep};
    /// use fence_core::CasGuard;
    /// let mut w = HeadWrite::new("n1", CasGuard::Absent, "me", 1).resending_first(true);
    /// w.start();
    /// assert_eq!(w.on_put(PutAnswer::Ambiguous), WriteStep::Send);
    /// ```
    #[must_use]
    pub fn resending_first(mut self, resend: bool) -> Self {
        self.resend_first = resend;
        self
    }

    /// The same write by the process of lease generation `generation`: a read-back that
    /// finds a head at `(owner, epoch)` written by another process of that node takes the
    /// cell for that process's ([`readback_as`]), not for a co-writer's move.
    #[must_use]
    pub fn writing_as(mut self, generation: &str) -> Self {
        self.writer = Some(generation.to_owned());
        self
    }

    /// The guard every send carries.
    pub fn guard(&self) -> &CasGuard {
        &self.guard
    }

    /// The write's identity.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// Whether an attempt may have landed.
    pub fn uncertain(&self) -> bool {
        self.uncertain
    }

    /// The first step: send.
    pub fn start(&mut self) -> WriteStep {
        self.send()
    }

    fn send(&mut self) -> WriteStep {
        if self.sends >= MAX_SENDS {
            return WriteStep::Failed(Unsettled::NoVerdict {
                ambiguous: self.uncertain,
            });
        }
        self.sends += 1;
        WriteStep::Send
    }

    /// After a [`WriteStep::Pause`]: send again.
    pub fn resume(&mut self) -> WriteStep {
        self.send()
    }

    /// The answer to the last send.
    pub fn on_put(&mut self, answer: PutAnswer) -> WriteStep {
        match answer {
            PutAnswer::Applied(v) => WriteStep::Done(Settled::Landed(v)),
            PutAnswer::Rejected => WriteStep::Read,
            PutAnswer::NotCommitted { retryable } => {
                if !retryable || self.sends >= MAX_SENDS {
                    return WriteStep::Failed(Unsettled::NoVerdict {
                        ambiguous: self.uncertain,
                    });
                }
                WriteStep::Pause(5 << (self.sends - 1))
            }
            PutAnswer::Ambiguous => {
                if sabotaged!(self.flaws, AckWithoutOwnerRead) {
                    if let Ok(v) = Version::new("unconfirmed") {
                        return WriteStep::Done(Settled::Landed(v));
                    }
                }
                self.uncertain = true;
                if self.resend_first && self.sends < MAX_SENDS {
                    return self.send();
                }
                WriteStep::Read
            }
        }
    }

    /// The answer to the last read-back.
    pub fn on_read(&mut self, answer: ReadAnswer) -> WriteStep {
        let read = match answer {
            // Re-sending the same request is safe either way; a plain rejection with
            // nothing uncertain is not re-sent.
            ReadAnswer::Failed if self.uncertain => return self.send(),
            ReadAnswer::Failed => return WriteStep::Failed(Unsettled::ReadFailed),
            ReadAnswer::Head(read) => read,
        };
        let nonces = [self.nonce.clone()];
        let seen = read.as_ref().map(|(h, v)| (h, v));
        let writer = self.writer.as_deref();
        match readback_as(seen, &nonces, &self.guard, &self.owner, self.epoch, writer) {
            Evidence::Landed(v) => WriteStep::Done(Settled::Landed(v)),
            Evidence::Unchanged if self.uncertain => self.send(),
            Evidence::Unchanged => WriteStep::Failed(Unsettled::GuardStillHolds),
            Evidence::MovedOn(version)
                if !self.uncertain || sabotaged!(self.flaws, ReapplyAfterAmbiguity) =>
            {
                match read {
                    Some((head, _)) => WriteStep::Done(Settled::Moved { head, version }),
                    None => WriteStep::Failed(Unsettled::ReadFailed),
                }
            }
            Evidence::MovedOn(_) => WriteStep::Failed(Unsettled::MovedAfterAmbiguity),
            Evidence::Superseded { epoch } => WriteStep::Done(Settled::Fenced {
                epoch,
                maybe_landed: self.uncertain && !sabotaged!(self.flaws, SupersededForgetsAmbiguity),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CellPayload, Extra, HeadFormat};

    fn v(s: &str) -> Version {
        Version::new(s).unwrap()
    }

    fn head(node: &str, epoch: u64, nonce: &str) -> CellHead {
        CellHead {
            node: Some(node.into()),
            epoch,
            nonce: nonce.into(),
            generation: None,
            payload: CellPayload::Empty,
            extra: Extra::new(),
            format: HeadFormat::V2,
        }
    }

    #[test]
    fn an_ambiguous_send_still_unchanged_is_sent_again_and_never_more_than_max() {
        let mut w = HeadWrite::new("n", CasGuard::Match(v("g")), "me", 3);
        assert_eq!(w.start(), WriteStep::Send);
        for _ in 1..MAX_SENDS {
            assert_eq!(w.on_put(PutAnswer::Ambiguous), WriteStep::Read);
            let same = ReadAnswer::Head(Some((head("me", 3, "old"), v("g"))));
            assert_eq!(w.on_read(same), WriteStep::Send);
        }
        assert_eq!(w.on_put(PutAnswer::Ambiguous), WriteStep::Read);
        let same = ReadAnswer::Head(Some((head("me", 3, "old"), v("g"))));
        assert_eq!(
            w.on_read(same),
            WriteStep::Failed(Unsettled::NoVerdict { ambiguous: true })
        );
    }

    #[test]
    fn a_moved_head_after_ambiguity_is_never_rebuilt_on() {
        let mut w = HeadWrite::new("n", CasGuard::Match(v("g")), "me", 3);
        w.start();
        w.on_put(PutAnswer::Ambiguous);
        let moved = ReadAnswer::Head(Some((head("me", 3, "co"), v("h"))));
        assert_eq!(
            w.on_read(moved.clone()),
            WriteStep::Failed(Unsettled::MovedAfterAmbiguity)
        );
        let mut plain = HeadWrite::new("n", CasGuard::Match(v("g")), "me", 3);
        plain.start();
        assert_eq!(plain.on_put(PutAnswer::Rejected), WriteStep::Read);
        assert!(matches!(
            plain.on_read(moved),
            WriteStep::Done(Settled::Moved { .. })
        ));
    }

    #[test]
    fn resending_first_sends_again_after_ambiguity_and_reads_after_the_last_send() {
        let mut w = HeadWrite::new("n", CasGuard::Match(v("g")), "me", 3).resending_first(true);
        assert_eq!(w.start(), WriteStep::Send);
        for _ in 1..MAX_SENDS {
            assert_eq!(w.on_put(PutAnswer::Ambiguous), WriteStep::Send);
        }
        assert_eq!(w.on_put(PutAnswer::Ambiguous), WriteStep::Read);
        let ours = ReadAnswer::Head(Some((head("me", 3, "n"), v("h"))));
        assert_eq!(w.on_read(ours), WriteStep::Done(Settled::Landed(v("h"))));
    }

    #[test]
    fn a_resent_write_rejected_with_our_nonce_landed_and_with_another_did_not() {
        let resent = || {
            let mut w = HeadWrite::new("n", CasGuard::Match(v("g")), "me", 3).resending_first(true);
            w.start();
            assert_eq!(w.on_put(PutAnswer::Ambiguous), WriteStep::Send);
            assert_eq!(w.on_put(PutAnswer::Rejected), WriteStep::Read);
            w
        };
        let ours = ReadAnswer::Head(Some((head("me", 3, "n"), v("h"))));
        assert_eq!(
            resent().on_read(ours),
            WriteStep::Done(Settled::Landed(v("h")))
        );
        let co_writer = ReadAnswer::Head(Some((head("me", 3, "co"), v("h"))));
        assert_eq!(
            resent().on_read(co_writer),
            WriteStep::Failed(Unsettled::MovedAfterAmbiguity)
        );
        let later = ReadAnswer::Head(Some((head("other", 4, "x"), v("h"))));
        assert_eq!(
            resent().on_read(later),
            WriteStep::Done(Settled::Fenced {
                epoch: 4,
                maybe_landed: true
            })
        );
    }

    #[test]
    fn refused_sends_pause_and_a_failed_read_without_ambiguity_is_not_written() {
        let mut w = HeadWrite::new("n", CasGuard::Absent, "me", 1);
        w.start();
        assert_eq!(
            w.on_put(PutAnswer::NotCommitted { retryable: true }),
            WriteStep::Pause(5)
        );
        assert_eq!(w.resume(), WriteStep::Send);
        assert_eq!(
            w.on_put(PutAnswer::NotCommitted { retryable: false }),
            WriteStep::Failed(Unsettled::NoVerdict { ambiguous: false })
        );
        let mut r = HeadWrite::new("n", CasGuard::Absent, "me", 1);
        r.start();
        r.on_put(PutAnswer::Rejected);
        assert_eq!(
            r.on_read(ReadAnswer::Failed),
            WriteStep::Failed(Unsettled::ReadFailed)
        );
    }
}
