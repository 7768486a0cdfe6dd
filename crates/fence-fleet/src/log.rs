//! An append log on a cell: each record is its own immutable object, and the cell's head
//! commits a small index, so an append costs the same whatever the log's length.
//!
//! Record `seq` written under epoch `e` is the object `cells/<cell>/log/<seq>-<e>` (seq
//! zero-padded). The head's data is a [`LogHead`]: the next sequence number and, per epoch
//! that wrote, the first sequence number it wrote — one entry per change of owner, not per
//! record. An append creates the record object, then writes the head through the claim (a
//! fenced write): the record counts once the head names it.
//!
//! A stale writer's records are orphans: its head write is rejected by the store, and its
//! record objects carry its own, older epoch, so they are never the object a head names (the
//! current owner writes under its own epoch). Readers read only records below
//! [`LogHead::next`], which are never rewritten.
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

use bytes::Bytes;
use fence_core::runtime::{read_cell, CellClaim, Fence, WriteAck};
use fence_core::{CasGuard, Error, ErrorKind, Key, Ownership, PutOutcome};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// Writes of one record object before giving up.
const RECORD_TRIES: usize = 4;
/// Record reads in flight at once.
const READS_IN_FLIGHT: usize = 16;

/// The committed index of a log: what the cell's head holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHead {
    /// The sequence number of the next record: records `0..next` are committed.
    pub next: u64,
    /// `(first_seq, epoch)`: from `first_seq` on, records were written under `epoch`
    /// (ascending in both).
    pub runs: Vec<(u64, u64)>,
}

impl LogHead {
    /// Decodes a cell's data (empty: a new log).
    pub fn decode(key: &Key, data: &[u8]) -> Result<LogHead, Error> {
        if data.is_empty() {
            return Ok(LogHead::default());
        }
        let head: LogHead = serde_json::from_slice(data)
            .map_err(|e| Error::corrupt(key, format!("not a log head: {e}")))?;
        let ordered = head
            .runs
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1);
        let covered = head.next == 0 || head.runs.first().is_some_and(|r| r.0 == 0);
        if !ordered || !covered || head.runs.last().is_some_and(|r| r.0 > head.next) {
            return Err(Error::corrupt(key, "log head runs out of order"));
        }
        Ok(head)
    }

    /// Encodes as the cell's data.
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The epoch record `seq` was written under, if committed.
    pub fn epoch_of(&self, seq: u64) -> Option<u64> {
        if seq >= self.next {
            return None;
        }
        self.runs.iter().rev().find(|r| r.0 <= seq).map(|r| r.1)
    }

    fn appended(&self, seq: u64, epoch: u64) -> LogHead {
        let mut next = self.clone();
        next.next = seq + 1;
        if next.runs.last().map(|r| r.1) != Some(epoch) {
            next.runs.push((seq, epoch));
        }
        next
    }
}

/// The name of record `seq` under `epoch`.
pub fn record_name(seq: u64, epoch: u64) -> String {
    format!("{seq:020}-{epoch}")
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

/// Appends through one claim. Appends are serialised.
#[derive(Debug)]
pub struct AppendLog {
    own: Arc<Ownership>,
    claim: Arc<CellClaim>,
    /// The head as this claim last wrote or read it; `None`: read it first.
    head: tokio::sync::Mutex<Option<LogHead>>,
}

impl AppendLog {
    /// The log of `claim`'s cell, in `fence`'s store.
    pub fn new(fence: &Fence, claim: Arc<CellClaim>) -> Self {
        AppendLog {
            own: fence.ownership().clone(),
            claim,
            head: tokio::sync::Mutex::new(None),
        }
    }

    /// The sequence number the next append gets, read from the store (after an ambiguous
    /// append: the record landed if this moved past it).
    pub async fn next_seq(&self) -> Result<u64, Error> {
        let mut slot = self.head.lock().await;
        let head = self.read_head().await?;
        let next = head.next;
        *slot = Some(head);
        Ok(next)
    }

    /// Appends `record`: one create of the record object, then one fenced head write (two
    /// requests, plus a head read after a failure). Errors are the head write's
    /// ([`CellClaim::write`]): [`ErrorKind::Fenced`] means the record will never count; an
    /// ambiguous one may have committed it (see [`next_seq`](Self::next_seq)).
    pub async fn append(&self, record: impl Into<Bytes>) -> Result<Appended, Error> {
        let record = record.into();
        self.append_with(|_| record).await
    }

    /// [`append`](Self::append) of the record `record(seq)` builds for the sequence number
    /// it gets (a record that names its own place in the log).
    pub async fn append_with(&self, record: impl FnOnce(u64) -> Bytes) -> Result<Appended, Error> {
        let mut slot = self.head.lock().await;
        let head = match slot.take() {
            Some(h) => h,
            None => self.read_head().await?,
        };
        let (seq, epoch) = (head.next, self.claim.epoch());
        let record = record(seq);
        if let Err(e) = self.put_record(seq, epoch, &record).await {
            *slot = Some(head);
            return Err(e);
        }
        let next = head.appended(seq, epoch);
        match self.claim.write(next.encode()).await {
            Ok(ack) => {
                *slot = Some(next);
                Ok(Appended { seq, epoch, ack })
            }
            Err(e) => {
                if !e.is_ambiguous() && e.kind() != ErrorKind::Fenced {
                    *slot = Some(head);
                }
                Err(e)
            }
        }
    }

    async fn read_head(&self) -> Result<LogHead, Error> {
        let cell = self.claim.cell();
        let key = self.own.owner_key(cell)?;
        match self.claim.read().await? {
            Some(d) => LogHead::decode(&key, &d.payload),
            None => Ok(LogHead::default()),
        }
    }

    /// Creates record `seq` under `epoch`. An object already there is uncommitted (the head
    /// says `next == seq`, and only this epoch's one claim writes `…-<epoch>` objects): it is
    /// a failed attempt of ours, replaced.
    async fn put_record(&self, seq: u64, epoch: u64, body: &Bytes) -> Result<(), Error> {
        let key = self
            .own
            .log_key(self.claim.cell(), &record_name(seq, epoch))?;
        let store = self.own.store();
        let mut last = None;
        for _ in 0..RECORD_TRIES {
            let guard = match store.get(&key).await {
                Ok(None) => CasGuard::Absent,
                Ok(Some(s)) if s.body == *body => return Ok(()),
                Ok(Some(s)) => CasGuard::Match(s.version),
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match store.put(&key, body.clone(), guard).await {
                Ok(PutOutcome::Applied(_)) => return Ok(()),
                Ok(PutOutcome::Rejected) => {}
                Err(e) if e.is_ambiguous() || e.is_retryable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::new(ErrorKind::Conflict, "log record kept changing").not_committed()
        }))
    }
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

/// Reads `cell`'s log from record `from` on: the head, then each committed record.
pub async fn read_log(fence: &Fence, cell: &str, from: u64) -> Result<LogRead, Error> {
    let own = fence.ownership();
    let key = own.owner_key(cell)?;
    let Some(data) = read_cell(own, cell).await? else {
        return Ok(LogRead {
            head: LogHead::default(),
            epoch: 0,
            records: Vec::new(),
        });
    };
    let head = LogHead::decode(&key, &data.payload)?;
    let reads = (from..head.next).map(|seq| {
        let head = &head;
        async move {
            let epoch = head.epoch_of(seq).unwrap_or_default();
            let rk = own.log_key(cell, &record_name(seq, epoch))?;
            match own.store().get(&rk).await? {
                Some(s) => Ok((seq, s.body)),
                None => Err(Error::corrupt(&rk, "a committed log record is missing")),
            }
        }
    });
    let records: Vec<Result<(u64, Bytes), Error>> = futures::stream::iter(reads)
        .buffered(READS_IN_FLIGHT)
        .collect()
        .await;
    Ok(LogRead {
        head,
        epoch: data.epoch,
        records: records.into_iter().collect::<Result<_, _>>()?,
    })
}
