//! An append log on a cell: each record is its own immutable object, and the cell's head
//! commits a small index, so an append costs the same whatever the log's length.
//!
//! Record `seq` written under epoch `e` is the object `cells/<cell>/log/<seq>-<e>` (seq
//! zero-padded), or `<seq>-<e>-<tag>` when the run that wrote it has a tag (below). The
//! head's data is a [`LogHead`]: the next sequence number and its [`Run`]s — where each run of
//! records written under one epoch begins: one entry per change of owner, not per record. An
//! append creates the record object, then writes the head through the claim (a fenced
//! write): the record counts once the head names it.
//!
//! **No record object is ever replaced**: every create is `Absent`. A stale writer's records
//! are orphans: its head write is rejected by the store, and its record objects carry its
//! own, older epoch, so they are never the object a head names. When a create finds another
//! object at its name — the orphan of an append whose head write failed, or the record of
//! another claim of the same epoch (a resumed cell, whose old claim may still have a create
//! in flight) — the log starts a new run at that sequence number under a fresh random tag, so
//! two writers never share an object and the records below [`LogHead::next`] are exactly the
//! bytes their appends committed.
//!
//! ```
//! # fn block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
//! # }
//! # block(async {
//! use std::sync::Arc;
//! use fence::{Fence, MemoryStore};
//! use fence_fleet::log::{read_log, AppendLog};
//! let fence = Fence::builder(Arc::new(MemoryStore::new()), "a").build().unwrap();
//! let lease = fence.acquire().await.unwrap();
//! let log = AppendLog::new(&fence, Arc::new(lease.claim("orders").await.unwrap()));
//! assert_eq!(log.append("first").await.unwrap().seq, 0);
//! assert_eq!(log.append("second").await.unwrap().seq, 1);
//! let read = read_log(&fence, "orders", 0).await.unwrap();
//! assert_eq!(read.records[1].1, "second");
//! # });
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fence_core::decide::log::{
    Append, AppendEnd, AppendStep, Created, HeadWritten, Landed, RecordRead, Seal, SealStep,
    SeenHead,
};
use fence_core::decide::{self, Flaws};
use fence_core::runtime::{read_cell, CellClaim, Fence, WriteAck};
use fence_core::{CasGuard, Error, ErrorKind, Key, Ownership, PutOutcome};
use futures::{StreamExt, TryStreamExt};

pub use fence_core::decide::log::{record_name, LogHead, Run};

/// Record reads in flight at once.
const READS_IN_FLIGHT: usize = 16;

/// A committed append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    /// The record's sequence number.
    pub seq: u64,
    /// The epoch it was written under.
    pub epoch: u64,
    /// The head write that committed it.
    pub ack: WriteAck,
}

/// Appends through one claim. Appends are serialised.
#[derive(Debug)]
pub struct AppendLog {
    own: Arc<Ownership>,
    claim: Arc<CellClaim>,
    /// The bound of a read that settles an append once the seal is done or refused (the
    /// fence's longest attempt timeout: a lapsed lease must still be able to make it).
    attempt_ms: u64,
    /// The head as this claim last wrote or read it, with the cell head's version (`None`:
    /// read it first), and the tag this log names its records with (`None` until a create
    /// found its name taken).
    head: tokio::sync::Mutex<(Option<SeenHead>, Option<String>)>,
    flaws: Flaws,
}

impl AppendLog {
    /// The log of `claim`'s cell, in `fence`'s store.
    pub fn new(fence: &Fence, claim: Arc<CellClaim>) -> Self {
        AppendLog {
            own: fence.ownership().clone(),
            claim,
            attempt_ms: fence.config().attempt_max_ms,
            head: tokio::sync::Mutex::new((None, None)),
            flaws: fence.flaws(),
        }
    }

    /// The sequence number the next append gets, settled: it first *seals* the log — a
    /// write of the head as it is, at this claim's epoch, guarded on its version — so no
    /// append of this claim still held up in the network can land after the answer. The
    /// answer is therefore true until this log appends again: after an ambiguous append of
    /// sequence number `s` (and no other append through this claim since), the record
    /// landed exactly when this answers more than `s` — or ask [`landed`](Self::landed),
    /// which also compares the record. Errors are the seal's ([`CellClaim::write_if`]):
    /// [`ErrorKind::Fenced`] once the cell moved on (ask `landed`).
    pub async fn next_seq(&self) -> Result<u64, Error> {
        let mut slot = self.head.lock().await;
        let sealed = self.seal().await?;
        let next = sealed.0.next;
        slot.0 = Some(sealed);
        Ok(next)
    }

    /// Whether `record` is committed at sequence number `seq` under this claim's epoch —
    /// settled, for an append whose answer was ambiguous: the log is sealed first (see
    /// [`next_seq`](Self::next_seq)), or, if the cell has moved to a later epoch, that later
    /// head settles it (the claim that raised the epoch replaced every head an append of
    /// ours could still land on). Then the committed record at `seq` is compared, bytes and
    /// epoch, not just the number ([`decide::log::landed`]).
    /// `Ok(false)` means it never landed and never will: append it again. An error means
    /// nothing could be settled (say, this process's lease ran out while the cell still
    /// names it): ask again.
    pub async fn landed(&self, seq: u64, record: &[u8]) -> Result<bool, Error> {
        let mut slot = self.head.lock().await;
        let epoch = self.claim.epoch();
        let head = match self.seal().await {
            Ok(sealed) => {
                let head = sealed.0.clone();
                slot.0 = Some(sealed);
                head
            }
            Err(e) => self.moved_past(epoch).await?.ok_or(e)?,
        };
        let Landed::Compare { name } = decide::log::landed(&head, seq, epoch) else {
            return Ok(false);
        };
        let key = self.own.log_key(self.claim.cell(), &name)?;
        match self.settling(&key, self.own.store().get(&key)).await? {
            Some(s) => Ok(s.body == record),
            None => Err(Error::corrupt(&key, "a committed log record is missing")),
        }
    }

    /// The log head, if the cell's head is at an epoch above `epoch` (none of our appends can
    /// land any more).
    async fn moved_past(&self, epoch: u64) -> Result<Option<LogHead>, Error> {
        let cell = self.claim.cell();
        let key = self.own.owner_key(cell)?;
        match self.settling(&key, read_cell(&self.own, cell)).await? {
            Some(d) if d.epoch > epoch => Ok(Some(LogHead::decode(&key, &d.payload, d.epoch)?)),
            _ => Ok(None),
        }
    }

    /// Performs the steps of a [`Seal`]: from then on no earlier append of this claim can
    /// land.
    async fn seal(&self) -> Result<SeenHead, Error> {
        let mut seal = Seal::new();
        let mut step = seal.start();
        let mut last = None;
        loop {
            step = match step {
                SealStep::ReadHead => {
                    let (head, version) = self.read_head().await?;
                    seal.on_head(head, version)
                }
                SealStep::WriteHead { head, expected } => {
                    let written = self.claim.write_if(expected.as_ref(), head.encode()).await;
                    seal.on_written(self.head_written(written, &mut last))
                }
                SealStep::Sealed(head, version) => return Ok((head, Some(version))),
                SealStep::Failed { .. } => {
                    return Err(last.unwrap_or_else(|| {
                        Error::new(ErrorKind::Busy, "the log head kept moving")
                    }))
                }
            };
        }
    }

    /// The answer a head write gives the log's machines; its error, if any, is kept in
    /// `last`.
    fn head_written(
        &self,
        written: Result<WriteAck, Error>,
        last: &mut Option<Error>,
    ) -> HeadWritten {
        match written {
            Ok(ack) => HeadWritten::Landed(ack.version),
            Err(e) => {
                let answer = HeadWritten::of_error(e.kind(), e.is_ambiguous());
                *last = Some(e);
                answer
            }
        }
    }

    /// Appends `record`: one create of the record object, then one fenced head write (two
    /// requests, plus a head read after a failure). Errors are the head write's
    /// ([`CellClaim::write`]): [`ErrorKind::Fenced`] that is not ambiguous means the record
    /// will never count; an ambiguous one may have committed it — [`landed`](Self::landed)
    /// settles which, before the record is appended again.
    pub async fn append(&self, record: impl Into<Bytes>) -> Result<Appended, Error> {
        let record = record.into();
        self.append_with(|_| record.clone()).await
    }

    /// [`append`](Self::append) of the record `record(seq)` builds for the sequence number
    /// it gets (a record that names its own place in the log). `record` runs again, for the
    /// next number, only when the store *proved* this append's head write did not land
    /// (a [`Conflict`](ErrorKind::Conflict) that is not ambiguous: the head moved before it,
    /// say an earlier ambiguous append landing late): the head write lands only over the
    /// head the append was built on ([`CellClaim::write_if`]), so no record a reader saw is
    /// ever replaced, and no record is appended twice. An ambiguous error (a co-writer moved
    /// the head after ours may have landed, say) is the caller's: settle it with
    /// [`landed`](Self::landed) before appending again.
    ///
    /// The steps are those of the pure [`Append`] machine, which the model check drives too.
    pub async fn append_with(&self, record: impl FnMut(u64) -> Bytes) -> Result<Appended, Error> {
        let mut slot = self.head.lock().await;
        // The tag is cloned, not taken: a cancelled append leaves the log's tag as it was.
        let mut append =
            Append::new(self.claim.epoch(), slot.0.take(), slot.1.clone()).with_flaws(self.flaws);
        let result = self.drive(&mut append, record).await;
        *slot = (append.cache(), append.tag());
        result
    }

    /// Performs the steps of `append` until it ends.
    async fn drive(
        &self,
        append: &mut Append,
        mut record: impl FnMut(u64) -> Bytes,
    ) -> Result<Appended, Error> {
        let store = self.own.store();
        let mut last: Option<Error> = None;
        let mut step = append.start();
        loop {
            step = match step {
                // Before this round's head write nothing can count: every error there is not
                // committed (a record object no head names commits nothing).
                AppendStep::ReadHead => {
                    let (head, version) = self.read_head().await.map_err(Error::not_committed)?;
                    append.on_head(head, version)
                }
                AppendStep::Build { seq } => {
                    // This round's errors only: an earlier round's head write was proven
                    // unwritten.
                    last = None;
                    if !self.claim.is_held() {
                        return Err(Error::fenced(format!(
                            "log of {}: the claim is no longer held; nothing written",
                            self.claim.cell()
                        )));
                    }
                    append.on_built(record(seq))
                }
                AppendStep::Create { name } => {
                    let key = self
                        .own
                        .log_key(self.claim.cell(), &name)
                        .map_err(Error::not_committed)?;
                    let put = store.put(&key, append.body().clone(), CasGuard::Absent);
                    append.on_created(match self.bounded(&key, put).await {
                        Ok(PutOutcome::Applied(_)) => Created::Applied,
                        Ok(PutOutcome::Rejected) => Created::Taken,
                        Err(e) if e.is_ambiguous() || e.is_retryable() => {
                            last = Some(e);
                            Created::Unknown
                        }
                        Err(e) => return Err(e.not_committed()),
                    })
                }
                AppendStep::ReadRecord { name } => {
                    let key = self
                        .own
                        .log_key(self.claim.cell(), &name)
                        .map_err(Error::not_committed)?;
                    append.on_record(match self.bounded(&key, store.get(&key)).await {
                        Ok(None) => RecordRead::Absent,
                        Ok(Some(s)) => RecordRead::Found(s.body),
                        Err(e) => {
                            last = Some(e);
                            RecordRead::Failed
                        }
                    })
                }
                AppendStep::Retag => append.on_tag(self.own.fresh_nonce()),
                AppendStep::WriteHead { head, expected } => {
                    let written = self.claim.write_if(expected.as_ref(), head.encode()).await;
                    append.on_head_written(self.head_written(written, &mut last))
                }
                AppendStep::Done(AppendEnd::Appended {
                    seq,
                    epoch,
                    version,
                }) => {
                    let ack = WriteAck { epoch, version };
                    return Ok(Appended { seq, epoch, ack });
                }
                // A record object no head names commits nothing.
                AppendStep::Done(AppendEnd::RecordFailed) => {
                    return Err(last
                        .unwrap_or_else(|| {
                            Error::new(ErrorKind::Conflict, "log record names kept being taken")
                        })
                        .not_committed())
                }
                AppendStep::Done(AppendEnd::Full) => {
                    let key = self.own.owner_key(self.claim.cell())?;
                    return Err(Error::corrupt(
                        &key,
                        "the log is at the end of its sequence",
                    ));
                }
                AppendStep::Done(AppendEnd::HeadFailed) => {
                    return Err(last.unwrap_or_else(|| {
                        Error::new(ErrorKind::Conflict, "the log head kept moving").not_committed()
                    }))
                }
            };
        }
    }

    async fn read_head(&self) -> Result<SeenHead, Error> {
        let cell = self.claim.cell();
        let key = self.own.owner_key(cell)?;
        match self.bounded(&key, read_cell(&self.own, cell)).await? {
            Some(d) => Ok((LogHead::decode(&key, &d.payload, d.epoch)?, Some(d.version))),
            None => Ok((LogHead::default(), None)),
        }
    }

    /// `request`, bounded by the fence's longest attempt timeout ([`ErrorKind::Timeout`]):
    /// the reads of [`landed`](Self::landed) after its seal.
    async fn settling<T>(
        &self,
        key: &Key,
        request: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        within(Duration::from_millis(self.attempt_ms), key, request).await
    }

    /// `request`, bounded like every request of the claim ([`CellClaim::request_bound`]:
    /// less time as the lease's authority runs out; [`ErrorKind::Timeout`]).
    async fn bounded<T>(
        &self,
        key: &Key,
        request: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        within(self.claim.request_bound(), key, request).await
    }
}

/// `request` within `bound` (at least 1 ms), else [`ErrorKind::Timeout`] naming `key`.
async fn within<T>(
    bound: Duration,
    key: &Key,
    request: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(bound.max(Duration::from_millis(1)), request).await {
        Ok(r) => r,
        Err(_) => Err(timed_out(key)),
    }
}

fn timed_out(key: &Key) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("{key}: no answer within the attempt timeout"),
    )
}

/// A log as read: its head and the records from the requested one on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRead {
    /// The committed index.
    pub head: LogHead,
    /// The cell's epoch when its head was read.
    pub epoch: u64,
    /// `(seq, record)`, ascending.
    pub records: Vec<(u64, Bytes)>,
}

/// Reads `cell`'s log from record `from` on: the head, then each committed record. Each
/// request is bounded by the fence's longest attempt timeout ([`ErrorKind::Timeout`]).
pub async fn read_log(fence: &Fence, cell: &str, from: u64) -> Result<LogRead, Error> {
    let own = fence.ownership();
    let key = own.owner_key(cell)?;
    let bound = Duration::from_millis(fence.config().attempt_max_ms.max(1));
    let within = |what: &Key| {
        let what = what.clone();
        move |_| timed_out(&what)
    };
    let head_read = tokio::time::timeout(bound, read_cell(own, cell)).await;
    let Some(data) = head_read.map_err(within(&key))?? else {
        return Ok(LogRead {
            head: LogHead::default(),
            epoch: 0,
            records: Vec::new(),
        });
    };
    let head = LogHead::decode(&key, &data.payload, data.epoch)?;
    let reads = (from..head.next).map(|seq| {
        let head = &head;
        async move {
            let name = head.name_of(seq).unwrap_or_default();
            let rk = own.log_key(cell, &name)?;
            let read = tokio::time::timeout(bound, own.store().get(&rk)).await;
            match read.map_err(within(&rk))?? {
                Some(s) => Ok((seq, s.body)),
                None => Err(Error::corrupt(&rk, "a committed log record is missing")),
            }
        }
    });
    // The first failed read ends the whole read (a missing record answers `Corrupt` at once).
    let records: Vec<(u64, Bytes)> = futures::stream::iter(reads)
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(LogRead {
        head,
        epoch: data.epoch,
        records,
    })
}
