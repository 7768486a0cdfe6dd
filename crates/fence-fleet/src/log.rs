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
//! use fence_core::{runtime::Fence, MemoryStore};
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
use fence_core::decide::claimed::record_is_ours;
use fence_core::decide::Flaws;
use fence_core::runtime::{read_cell, CellClaim, Fence, WriteAck};
use fence_core::{CasGuard, Error, ErrorKind, Key, Ownership, PutOutcome, Version};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

/// Writes of one record object before giving up.
const RECORD_TRIES: usize = 4;
/// How often an append rebuilds on a head that moved under it before it gives up.
const MOVED_TRIES: usize = 4;
/// Record reads in flight at once.
const READS_IN_FLIGHT: usize = 16;

/// The committed index of a log: what the cell's head holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHead {
    /// The sequence number of the next record: records `0..next` are committed.
    pub next: u64,
    /// Where each run of records begins, ascending in sequence number and epoch.
    pub runs: Vec<Run>,
}

/// From `first_seq` on (until the next run), records were written under `epoch`, named with
/// `tag` if it has one. Stored as `[first_seq, epoch]` or `[first_seq, epoch, "tag"]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "RunRepr", into = "RunRepr")]
pub struct Run {
    /// The first sequence number of the run.
    pub first_seq: u64,
    /// The epoch its records were written under.
    pub epoch: u64,
    /// Set when the run's plain names were taken (see the module docs).
    pub tag: Option<String>,
}

impl Run {
    /// A run without a tag.
    pub fn new(first_seq: u64, epoch: u64) -> Run {
        Run {
            first_seq,
            epoch,
            tag: None,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RunRepr {
    Plain(u64, u64),
    Tagged(u64, u64, String),
}

impl From<RunRepr> for Run {
    fn from(r: RunRepr) -> Run {
        match r {
            RunRepr::Plain(first_seq, epoch) => Run::new(first_seq, epoch),
            RunRepr::Tagged(first_seq, epoch, tag) => Run {
                first_seq,
                epoch,
                tag: Some(tag),
            },
        }
    }
}

impl From<Run> for RunRepr {
    fn from(r: Run) -> RunRepr {
        match r.tag {
            None => RunRepr::Plain(r.first_seq, r.epoch),
            Some(t) => RunRepr::Tagged(r.first_seq, r.epoch, t),
        }
    }
}

impl LogHead {
    /// Decodes the data of a cell at epoch `cell_epoch` (empty: a new log). A head whose
    /// runs are out of order, name an invalid tag, or name an epoch above the cell's (no
    /// claim can have written it: the next append would write a head nothing could read) is
    /// [`ErrorKind::Corrupt`].
    pub fn decode(key: &Key, data: &[u8], cell_epoch: u64) -> Result<LogHead, Error> {
        if data.is_empty() {
            return Ok(LogHead::default());
        }
        let head: LogHead = serde_json::from_slice(data)
            .map_err(|e| Error::corrupt(key, format!("not a log head: {e}")))?;
        let ordered = head.runs.windows(2).all(|w| {
            w[0].first_seq <= w[1].first_seq
                && (w[0].epoch < w[1].epoch || (w[0].epoch == w[1].epoch && w[0].tag != w[1].tag))
        });
        let covered = head.next == 0 || head.runs.first().is_some_and(|r| r.first_seq == 0);
        let named = head
            .runs
            .iter()
            .all(|r| r.tag.as_deref().is_none_or(valid_tag));
        if !ordered || !covered || head.runs.last().is_some_and(|r| r.first_seq > head.next) {
            return Err(Error::corrupt(key, "log head runs out of order"));
        }
        if head.runs.iter().any(|r| r.epoch > cell_epoch) {
            return Err(Error::corrupt(
                key,
                format!("log head names an epoch above the cell's ({cell_epoch})"),
            ));
        }
        if !named {
            return Err(Error::corrupt(
                key,
                "log head names a run with an invalid tag",
            ));
        }
        if head.next == u64::MAX {
            return Err(Error::corrupt(
                key,
                "log head is at the end of the sequence",
            ));
        }
        Ok(head)
    }

    /// Encodes as the cell's data.
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The run record `seq` belongs to, if committed.
    pub fn run_of(&self, seq: u64) -> Option<&Run> {
        if seq >= self.next {
            return None;
        }
        self.runs.iter().rev().find(|r| r.first_seq <= seq)
    }

    /// The epoch record `seq` was written under, if committed.
    pub fn epoch_of(&self, seq: u64) -> Option<u64> {
        self.run_of(seq).map(|r| r.epoch)
    }

    /// The object name of committed record `seq`.
    pub fn name_of(&self, seq: u64) -> Option<String> {
        self.run_of(seq)
            .map(|r| record_name(seq, r.epoch, r.tag.as_deref()))
    }

    /// The head with record `seq` committed (`decode` refuses a head whose `next` cannot be
    /// raised, so this never wraps).
    fn appended(&self, seq: u64, epoch: u64, tag: Option<&str>) -> LogHead {
        let mut next = self.clone();
        next.next = seq.saturating_add(1);
        let same = next
            .runs
            .last()
            .is_some_and(|r| r.epoch == epoch && r.tag.as_deref() == tag);
        if !same {
            next.runs.push(Run {
                first_seq: seq,
                epoch,
                tag: tag.map(str::to_owned),
            });
        }
        next
    }
}

/// The name of record `seq` under `epoch` (and the run's `tag`, if it has one).
pub fn record_name(seq: u64, epoch: u64, tag: Option<&str>) -> String {
    match tag {
        None => format!("{seq:020}-{epoch}"),
        Some(t) => format!("{seq:020}-{epoch}-{t}"),
    }
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty() && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_alphanumeric())
}

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

/// A log head as read or written, with the version of the cell head that holds it (`None`:
/// the cell held no data).
type SeenHead = (LogHead, Option<Version>);

/// Appends through one claim. Appends are serialised.
#[derive(Debug)]
pub struct AppendLog {
    own: Arc<Ownership>,
    claim: Arc<CellClaim>,
    /// The bound of one record request: the fence's longest attempt timeout.
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
    /// epoch, not just the number. `Ok(false)` means it never landed and never will: append
    /// it again. An error means nothing could be settled (say, this process's lease ran out
    /// while the cell still names it): ask again.
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
        if head.epoch_of(seq) != Some(epoch) {
            return Ok(false);
        }
        let name = head.name_of(seq).unwrap_or_default();
        let key = self.own.log_key(self.claim.cell(), &name)?;
        let bound = Duration::from_millis(self.attempt_ms.max(1));
        let read = tokio::time::timeout(bound, self.own.store().get(&key)).await;
        match read.map_err(|_| timed_out(&key))?? {
            Some(s) => Ok(s.body == record),
            None => Err(Error::corrupt(&key, "a committed log record is missing")),
        }
    }

    /// The log head, if the cell's head is at an epoch above `epoch` (none of our appends can
    /// land any more).
    async fn moved_past(&self, epoch: u64) -> Result<Option<LogHead>, Error> {
        let cell = self.claim.cell();
        let key = self.own.owner_key(cell)?;
        let bound = Duration::from_millis(self.attempt_ms.max(1));
        let read = tokio::time::timeout(bound, read_cell(&self.own, cell)).await;
        match read.map_err(|_| timed_out(&key))?? {
            Some(d) if d.epoch > epoch => Ok(Some(LogHead::decode(&key, &d.payload, d.epoch)?)),
            _ => Ok(None),
        }
    }

    /// Writes the log head as it is, at this claim's epoch, over the version just read: from
    /// then on no earlier append of this claim can land.
    async fn seal(&self) -> Result<SeenHead, Error> {
        let mut last = None;
        for _ in 0..MOVED_TRIES {
            let (head, version) = self.read_head().await?;
            match self.claim.write_if(version.as_ref(), head.encode()).await {
                Ok(ack) => return Ok((head, Some(ack.version))),
                // Someone wrote in between (and proved ours did not land): read again.
                Err(e) if proven_unwritten(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::new(ErrorKind::Busy, "the log head kept moving")))
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
    pub async fn append_with(
        &self,
        mut record: impl FnMut(u64) -> Bytes,
    ) -> Result<Appended, Error> {
        let mut slot = self.head.lock().await;
        let mut tries = 0;
        loop {
            let (head, version) = match slot.0.take() {
                Some(h) => h,
                None => self.read_head().await?,
            };
            let (seq, epoch) = (head.next, self.claim.epoch());
            let body = record(seq);
            if let Err(e) = self.put_record(seq, epoch, &mut slot.1, &body).await {
                slot.0 = Some((head, version));
                return Err(e);
            }
            let next = head.appended(seq, epoch, slot.1.as_deref());
            match self.claim.write_if(version.as_ref(), next.encode()).await {
                Ok(ack) => {
                    slot.0 = Some((next, Some(ack.version.clone())));
                    return Ok(Appended { seq, epoch, ack });
                }
                // The head moved: rebuild on the head as it is now (the record object made
                // for `seq` is an orphan no head names).
                Err(e) if proven_unwritten(&e) && tries < MOVED_TRIES => tries += 1,
                Err(e) => {
                    // A head this append did not change stays the one to build on; after a
                    // moved head, an ambiguous answer or a fence, read the head first.
                    let kept = !e.is_ambiguous()
                        && !matches!(e.kind(), ErrorKind::Fenced | ErrorKind::Conflict);
                    if kept {
                        slot.0 = Some((head, version));
                    }
                    return Err(e);
                }
            }
        }
    }

    async fn read_head(&self) -> Result<SeenHead, Error> {
        let cell = self.claim.cell();
        let key = self.own.owner_key(cell)?;
        match self.claim.read().await? {
            Some(d) => Ok((LogHead::decode(&key, &d.payload, d.epoch)?, Some(d.version))),
            None => Ok((LogHead::default(), None)),
        }
    }

    /// Creates record `seq` under `epoch` with `Absent` — never over any object. An object
    /// already there with our bytes is ours (an ambiguous create that landed); one with other
    /// bytes belongs to someone else (an orphan, or another claim of this epoch): the log
    /// takes a fresh `tag` and creates the record under that name instead. Every request is
    /// bounded by the fence's longest attempt timeout.
    async fn put_record(
        &self,
        seq: u64,
        epoch: u64,
        tag: &mut Option<String>,
        body: &Bytes,
    ) -> Result<(), Error> {
        if !self.claim.is_held() {
            return Err(Error::fenced(format!(
                "log of {}: the claim is no longer held; nothing written",
                self.claim.cell()
            )));
        }
        let store = self.own.store();
        let bound = Duration::from_millis(self.attempt_ms.max(1));
        let mut last = None;
        for _ in 0..RECORD_TRIES {
            let key = self
                .own
                .log_key(self.claim.cell(), &record_name(seq, epoch, tag.as_deref()))?;
            match tokio::time::timeout(bound, store.put(&key, body.clone(), CasGuard::Absent)).await
            {
                Ok(Ok(PutOutcome::Applied(_))) => return Ok(()),
                Ok(Ok(PutOutcome::Rejected)) => {}
                Ok(Err(e)) if e.is_ambiguous() || e.is_retryable() => last = Some(e),
                Ok(Err(e)) => return Err(e),
                Err(_) => last = Some(timed_out(&key)),
            }
            match tokio::time::timeout(bound, store.get(&key)).await {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(s))) if record_is_ours(&s.body, body, self.flaws) => return Ok(()),
                Ok(Ok(Some(_))) => *tag = Some(self.own.fresh_nonce()),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(timed_out(&key)),
            }
        }
        // A record object no head names commits nothing.
        Err(last
            .unwrap_or_else(|| Error::new(ErrorKind::Conflict, "log record names kept being taken"))
            .not_committed())
    }
}

/// Whether `e` proves the head write it answers did not land, and never will.
fn proven_unwritten(e: &Error) -> bool {
    e.kind() == ErrorKind::Conflict && !e.is_ambiguous()
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
