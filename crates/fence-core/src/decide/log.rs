//! The append log's rules, as step machines: an append (create the record object, never over
//! another's; commit it with one head write over the head it was built on; rebuild only when
//! the store proved that write unwritten) and a seal (a write of the log head as it is, at the
//! claim's epoch, after which no earlier append of that claim can land), and the verdict on
//! an ambiguous append. fence-fleet's `AppendLog` drives them against a store, and the model
//! check drives the very same machines against its model of one.
//!
//! Record `seq` written under epoch `e` is the object `cells/<cell>/log/<seq>-<e>` (seq
//! zero-padded), or `<seq>-<e>-<tag>` when the run that wrote it has a tag. The cell's head
//! holds a [`LogHead`]: the next sequence number and the [`Run`]s — where each run of
//! records written under one epoch (and tag) begins.
//!
//! ```
//! use fence_core::decide::log::{Append, AppendStep, Created, HeadWritten};
//! use fence_core::Version;
//! let mut a = Append::new(1, None, None);
//! assert_eq!(a.start(), AppendStep::ReadHead);
//! assert_eq!(a.on_head(Default::default(), None), AppendStep::Build { seq: 0 });
//! let step = a.on_built("first".into());
//! assert_eq!(step, AppendStep::Create { name: "00000000000000000000-1".into() });
//! let AppendStep::WriteHead { head, expected } = a.on_created(Created::Applied) else { panic!() };
//! assert_eq!((head.next, expected), (1, None));
//! let v = Version::new("v1").unwrap();
//! assert!(matches!(a.on_head_written(HeadWritten::Landed(v)), AppendStep::Done(_)));
//! ```

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::claimed::record_is_ours;
use crate::error::{Error, ErrorKind};
use crate::flaws::{sabotaged, Flaws};
use crate::key::Key;
use crate::store::Version;

/// Creates of one record object before an append gives up.
pub const RECORD_TRIES: u8 = 4;
/// How often an append (or a seal) rebuilds on a head that moved under it before it gives up.
pub const MOVED_TRIES: u8 = 4;

/// The committed index of a log: what the cell's head holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogHead {
    /// The sequence number of the next record: records `0..next` are committed.
    pub next: u64,
    /// Where each run of records begins, ascending in sequence number and epoch.
    pub runs: Vec<Run>,
}

/// From `first_seq` on (until the next run), records were written under `epoch`, named with
/// `tag` if it has one. Stored as `[first_seq, epoch]` or `[first_seq, epoch, "tag"]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
        let head: LogHead = crate::record::rules::parse_json(data)
            .and_then(serde_json::from_value)
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
    fn appended(&self, seq: u64, epoch: u64, tag: Option<&str>, flaws: Flaws) -> LogHead {
        let mut next = self.clone();
        next.next = seq.saturating_add(1);
        let ignore_tag = sabotaged!(flaws, LogRunIgnoresTag);
        let same = next
            .runs
            .last()
            .is_some_and(|r| r.epoch == epoch && (r.tag.as_deref() == tag || ignore_tag));
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

/// A log head as read or written, with the version of the cell head that holds it (`None`:
/// the cell held no data).
pub type SeenHead = (LogHead, Option<Version>);

/// What became of one create (`Absent`) of a record object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Created {
    /// Created.
    Applied,
    /// An object is already at the name.
    Taken,
    /// No verdict: an ambiguous or retryable failure, a timeout.
    Unknown,
}

/// What a read of a record object's name returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RecordRead {
    /// An object with these bytes.
    Found(Bytes),
    /// No object.
    Absent,
    /// The read failed or timed out.
    Failed,
}

/// What became of a head write made over the version the append (or seal) was built on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HeadWritten {
    /// Landed at this version.
    Landed(Version),
    /// Proven not landed, and never will: the head moved before it (a [`ErrorKind::Conflict`]
    /// that is not ambiguous).
    Moved,
    /// Any other failure; `head_kept` when it proves the head is still the one written over
    /// (nothing was sent, or the store proved it unwritten without the head moving).
    Failed {
        /// The head the write was built on is still the cell's.
        head_kept: bool,
    },
}

impl HeadWritten {
    /// The answer a failed head write gives, by its error's kind and whether it may have
    /// landed: only a `Conflict` that is not ambiguous proves the head moved first.
    pub fn of_error(kind: ErrorKind, ambiguous: bool) -> HeadWritten {
        if kind == ErrorKind::Conflict && !ambiguous {
            return HeadWritten::Moved;
        }
        HeadWritten::Failed {
            head_kept: !ambiguous && !matches!(kind, ErrorKind::Fenced | ErrorKind::Conflict),
        }
    }
}

/// What the shell does next for an [`Append`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendStep {
    /// Read the cell's head through the claim and call [`Append::on_head`] (an error ends the
    /// append with it).
    ReadHead,
    /// Build the record for sequence number `seq` and call [`Append::on_built`] (check first
    /// that the claim is still held: if not, end the append, nothing written).
    Build {
        /// The record's sequence number.
        seq: u64,
    },
    /// Create the object `name` (never over another) and call [`Append::on_created`].
    Create {
        /// The record object's name under the cell's `log/`.
        name: String,
    },
    /// Read the object `name` and call [`Append::on_record`].
    ReadRecord {
        /// The record object's name under the cell's `log/`.
        name: String,
    },
    /// Make a fresh random tag and call [`Append::on_tag`].
    Retag,
    /// Write `head` through the claim, only over the head at `expected` (`None`: only while
    /// the cell holds no data), and call [`Append::on_head_written`].
    WriteHead {
        /// The head with the record committed.
        head: LogHead,
        /// The version it must land on.
        expected: Option<Version>,
    },
    /// Finished: the log head to keep ([`Append::cache`]) and the tag are settled.
    Done(AppendEnd),
}

/// How an append ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendEnd {
    /// Committed: record `seq` under `epoch`, at the cell head's `version`.
    Appended {
        /// The record's sequence number.
        seq: u64,
        /// The epoch it was written under.
        epoch: u64,
        /// The cell head's version that commits it.
        version: Version,
    },
    /// The record object could not be created: nothing committed (a record object no head
    /// names commits nothing).
    RecordFailed,
    /// The head write failed: the error is the head write's.
    HeadFailed,
    /// The log is at the end of its sequence: a head with its next record committed could
    /// not be read back ([`LogHead::decode`] refuses `next` = `u64::MAX`). Nothing written.
    Full,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Reading,
    Building,
    Creating,
    Checking,
    Retagging,
    Committing(LogHead),
    Done,
}

/// One append through a claim at `epoch`: the steps of `AppendLog::append_with`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Append {
    epoch: u64,
    /// The head this append builds on; after the append ends, the head to keep.
    head: Option<SeenHead>,
    tag: Option<String>,
    seq: u64,
    body: Bytes,
    creates: u8,
    rebuilds: u8,
    phase: Phase,
    flaws: Flaws,
}

impl Append {
    /// An append at `epoch`, on `cached` (the head as this claim's log last wrote or read it;
    /// `None`: read it first), naming its records with `tag` if the log has one.
    pub fn new(epoch: u64, cached: Option<SeenHead>, tag: Option<String>) -> Self {
        Append {
            epoch,
            head: cached,
            tag,
            seq: 0,
            body: Bytes::new(),
            creates: 0,
            rebuilds: 0,
            phase: Phase::Reading,
            flaws: Flaws::default(),
        }
    }

    /// With sabotage switches (feature `sabotage`; otherwise none).
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// The first step.
    pub fn start(&mut self) -> AppendStep {
        match self.head.clone() {
            Some((head, _)) => self.build(&head),
            None => {
                self.phase = Phase::Reading;
                AppendStep::ReadHead
            }
        }
    }

    /// The cell's head as read (`version` `None`: it held no data).
    pub fn on_head(&mut self, head: LogHead, version: Option<Version>) -> AppendStep {
        let step = self.build(&head);
        self.head = Some((head, version));
        step
    }

    fn build(&mut self, head: &LogHead) -> AppendStep {
        if head.next >= u64::MAX - 1 {
            self.phase = Phase::Done;
            return AppendStep::Done(AppendEnd::Full);
        }
        self.seq = head.next;
        self.creates = 0;
        self.phase = Phase::Building;
        AppendStep::Build { seq: self.seq }
    }

    /// The record built for the sequence number [`AppendStep::Build`] named.
    pub fn on_built(&mut self, body: Bytes) -> AppendStep {
        self.body = body;
        self.create()
    }

    fn create(&mut self) -> AppendStep {
        if self.creates >= RECORD_TRIES {
            self.phase = Phase::Done;
            return AppendStep::Done(AppendEnd::RecordFailed);
        }
        self.creates += 1;
        self.phase = Phase::Creating;
        AppendStep::Create { name: self.name() }
    }

    /// The record object's name, as this append creates it now.
    pub fn name(&self) -> String {
        record_name(self.seq, self.epoch, self.tag.as_deref())
    }

    /// The record this append writes (as built).
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The epoch this append writes under.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The sequence number this append commits its record at (once built).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// What the create of the record object answered.
    pub fn on_created(&mut self, answer: Created) -> AppendStep {
        match answer {
            Created::Applied => self.commit(),
            // Whose object is there, if any? Only bytes that are exactly ours are ours.
            Created::Taken | Created::Unknown => {
                self.phase = Phase::Checking;
                AppendStep::ReadRecord { name: self.name() }
            }
        }
    }

    /// What the read of the record object's name returned.
    pub fn on_record(&mut self, read: RecordRead) -> AppendStep {
        match read {
            RecordRead::Found(found) if record_is_ours(&found, &self.body, self.flaws) => {
                self.commit()
            }
            // Another writer's object (an orphan, another claim of this epoch): never ours,
            // never replaced; the log moves to a fresh name.
            RecordRead::Found(_) => {
                self.phase = Phase::Retagging;
                AppendStep::Retag
            }
            RecordRead::Absent | RecordRead::Failed => self.create(),
        }
    }

    /// The fresh tag [`AppendStep::Retag`] asked for.
    pub fn on_tag(&mut self, tag: String) -> AppendStep {
        self.tag = Some(tag);
        self.create()
    }

    fn commit(&mut self) -> AppendStep {
        let Some((head, expected)) = self.head.clone() else {
            self.phase = Phase::Done;
            return AppendStep::Done(AppendEnd::RecordFailed);
        };
        let next = head.appended(self.seq, self.epoch, self.tag.as_deref(), self.flaws);
        self.phase = Phase::Committing(next.clone());
        AppendStep::WriteHead {
            head: next,
            expected,
        }
    }

    /// What the head write answered.
    pub fn on_head_written(&mut self, answer: HeadWritten) -> AppendStep {
        let Phase::Committing(next) = std::mem::replace(&mut self.phase, Phase::Done) else {
            return AppendStep::Done(AppendEnd::HeadFailed);
        };
        match answer {
            HeadWritten::Landed(version) => {
                self.head = Some((next, Some(version.clone())));
                AppendStep::Done(AppendEnd::Appended {
                    seq: self.seq,
                    epoch: self.epoch,
                    version,
                })
            }
            // The head moved before ours: rebuild on the head as it is now (the record object
            // made for `seq` is an orphan no head names).
            HeadWritten::Moved if self.rebuilds < MOVED_TRIES => {
                self.rebuilds += 1;
                self.head = None;
                self.phase = Phase::Reading;
                AppendStep::ReadHead
            }
            HeadWritten::Moved => {
                self.head = None;
                AppendStep::Done(AppendEnd::HeadFailed)
            }
            // A head this append did not change stays the one to build on; after a moved
            // head, an ambiguous answer or a fence, the next append reads the head first.
            HeadWritten::Failed { head_kept } => {
                if !head_kept {
                    self.head = None;
                }
                AppendStep::Done(AppendEnd::HeadFailed)
            }
        }
    }

    /// The head the log keeps for its next append once this one ended (or was abandoned).
    pub fn cache(&self) -> Option<SeenHead> {
        self.head.clone()
    }

    /// The tag the log names its records with from now on.
    pub fn tag(&self) -> Option<String> {
        self.tag.clone()
    }
}

/// What the shell does next for a [`Seal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealStep {
    /// Read the cell's head through the claim and call [`Seal::on_head`].
    ReadHead,
    /// Write `head` (unchanged) through the claim over `expected`, and call
    /// [`Seal::on_written`].
    WriteHead {
        /// The log head as read.
        head: LogHead,
        /// The version it must land on.
        expected: Option<Version>,
    },
    /// Sealed: no append of this claim sent before can land any more; the log head as
    /// written, at this version.
    Sealed(LogHead, Version),
    /// Not sealed: `moved` when the head kept moving (the error is then `Busy` unless a write
    /// said otherwise); otherwise the head write's error.
    Failed {
        /// The head kept moving.
        moved: bool,
    },
}

/// The seal of a log by its claim: the log head written as it is, at the claim's epoch, over
/// the version just read, so no earlier append of that claim still held up in the network can
/// land after it (their guards name older versions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seal {
    read: Option<LogHead>,
    tries: u8,
}

impl Seal {
    /// A seal.
    pub fn new() -> Self {
        Seal::default()
    }

    /// The first step.
    pub fn start(&mut self) -> SealStep {
        SealStep::ReadHead
    }

    /// The cell's head as read.
    pub fn on_head(&mut self, head: LogHead, version: Option<Version>) -> SealStep {
        self.read = Some(head.clone());
        self.tries += 1;
        SealStep::WriteHead {
            head,
            expected: version,
        }
    }

    /// What the head write answered.
    pub fn on_written(&mut self, answer: HeadWritten) -> SealStep {
        match answer {
            HeadWritten::Landed(v) => SealStep::Sealed(self.read.take().unwrap_or_default(), v),
            // Someone wrote in between (and proved ours did not land): read again.
            HeadWritten::Moved if self.tries < MOVED_TRIES => SealStep::ReadHead,
            HeadWritten::Moved => SealStep::Failed { moved: true },
            HeadWritten::Failed { .. } => SealStep::Failed { moved: false },
        }
    }
}

/// The verdict on whether record `seq`, appended under `epoch`, is committed, given a head
/// that settles it: one written by the claim's own seal, or one at a later epoch (the claim
/// that raised the epoch replaced every head an append of ours could still land on).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Landed {
    /// Not committed, and never will be: append it again.
    No,
    /// Committed under our epoch as object `name`: it is ours only if its bytes are exactly
    /// the record's.
    Compare {
        /// The committed record's object name.
        name: String,
    },
}

/// The verdict of `head` on record `seq` appended under `epoch`.
pub fn landed(head: &LogHead, seq: u64, epoch: u64) -> Landed {
    landed_with(head, seq, epoch, Flaws::default())
}

/// [`landed`] with sabotage `flaws` (only ever set with the `sabotage` feature).
pub fn landed_with(head: &LogHead, seq: u64, epoch: u64, flaws: Flaws) -> Landed {
    match head.run_of(seq) {
        Some(run) if run.epoch == epoch || sabotaged!(flaws, LogSettlesOnOwnOrphan) => {
            Landed::Compare {
                name: record_name(seq, epoch, run.tag.as_deref()),
            }
        }
        _ => Landed::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::new(s).unwrap()
    }

    /// Drives an append on an empty log to its head write.
    fn to_create(a: &mut Append, body: &str) -> AppendStep {
        assert_eq!(a.start(), AppendStep::ReadHead);
        assert_eq!(
            a.on_head(LogHead::default(), Some(v("h1"))),
            AppendStep::Build { seq: 0 }
        );
        a.on_built(Bytes::from(body.to_owned()))
    }

    #[test]
    fn a_foreign_object_at_the_name_is_never_taken_for_ours() {
        let mut a = Append::new(3, None, None);
        to_create(&mut a, "mine");
        let name = "00000000000000000000-3".to_owned();
        assert_eq!(
            a.on_created(Created::Taken),
            AppendStep::ReadRecord { name: name.clone() }
        );
        assert_eq!(
            a.on_record(RecordRead::Found(Bytes::from("theirs"))),
            AppendStep::Retag
        );
        let AppendStep::Create { name: tagged } = a.on_tag("t1".into()) else {
            panic!("a retag creates again")
        };
        assert_eq!(tagged, format!("{name}-t1"));
        let AppendStep::WriteHead { head, expected } = a.on_created(Created::Applied) else {
            panic!("a created record is committed")
        };
        assert_eq!(expected, Some(v("h1")));
        assert_eq!(head.name_of(0), Some(tagged));
    }

    #[test]
    fn an_object_with_our_bytes_is_our_ambiguous_create() {
        let mut a = Append::new(1, None, None);
        to_create(&mut a, "mine");
        assert!(matches!(
            a.on_created(Created::Unknown),
            AppendStep::ReadRecord { .. }
        ));
        assert!(matches!(
            a.on_record(RecordRead::Found(Bytes::from("mine"))),
            AppendStep::WriteHead { .. }
        ));
    }

    #[test]
    fn creates_give_up_after_record_tries_and_commit_nothing() {
        let mut a = Append::new(1, None, None);
        to_create(&mut a, "mine");
        for _ in 1..RECORD_TRIES {
            assert!(matches!(
                a.on_created(Created::Unknown),
                AppendStep::ReadRecord { .. }
            ));
            assert!(matches!(
                a.on_record(RecordRead::Absent),
                AppendStep::Create { .. }
            ));
        }
        a.on_created(Created::Unknown);
        assert_eq!(
            a.on_record(RecordRead::Failed),
            AppendStep::Done(AppendEnd::RecordFailed)
        );
        assert_eq!(a.cache(), Some((LogHead::default(), Some(v("h1")))));
    }

    #[test]
    fn only_a_proven_unwritten_head_write_rebuilds() {
        assert_eq!(
            HeadWritten::of_error(ErrorKind::Conflict, false),
            HeadWritten::Moved
        );
        for (kind, ambiguous, kept) in [
            (ErrorKind::Conflict, true, false),
            (ErrorKind::Fenced, false, false),
            (ErrorKind::Timeout, true, false),
            (ErrorKind::Timeout, false, true),
        ] {
            assert_eq!(
                HeadWritten::of_error(kind, ambiguous),
                HeadWritten::Failed { head_kept: kept },
                "{kind:?} ambiguous={ambiguous}"
            );
        }
        let mut a = Append::new(1, None, None);
        to_create(&mut a, "r");
        a.on_created(Created::Applied);
        assert_eq!(a.on_head_written(HeadWritten::Moved), AppendStep::ReadHead);
        assert_eq!(a.cache(), None, "a moved head is read again");
        let mut b = Append::new(1, None, None);
        to_create(&mut b, "r");
        b.on_created(Created::Applied);
        let ambiguous = HeadWritten::of_error(ErrorKind::Timeout, true);
        assert_eq!(
            b.on_head_written(ambiguous),
            AppendStep::Done(AppendEnd::HeadFailed)
        );
        assert_eq!(
            b.cache(),
            None,
            "after an ambiguous answer the head is read again"
        );
    }

    #[test]
    fn an_append_never_writes_a_head_that_decode_refuses() {
        let key = Key::new("cells/c/own.json").unwrap();
        let head = LogHead {
            next: u64::MAX - 1,
            runs: vec![Run::new(0, 1)],
        };
        assert!(LogHead::decode(&key, &head.encode(), 1).is_ok());
        let mut a = Append::new(1, Some((head, Some(v("h1")))), None);
        assert_eq!(a.start(), AppendStep::Done(AppendEnd::Full));
    }

    #[test]
    fn the_verdict_compares_only_records_of_our_epoch() {
        let head = LogHead {
            next: 3,
            runs: vec![Run::new(0, 1), Run::new(2, 2)],
        };
        assert_eq!(landed(&head, 1, 2), Landed::No, "seq 1 is epoch 1's");
        assert_eq!(landed(&head, 3, 2), Landed::No, "not committed");
        assert_eq!(
            landed(&head, 2, 2),
            Landed::Compare {
                name: record_name(2, 2, None)
            }
        );
    }

    #[test]
    fn a_seal_rewrites_the_head_as_read_and_rereads_when_it_moved() {
        let mut s = Seal::new();
        assert_eq!(s.start(), SealStep::ReadHead);
        let head = LogHead {
            next: 1,
            runs: vec![Run::new(0, 1)],
        };
        assert_eq!(
            s.on_head(head.clone(), Some(v("h2"))),
            SealStep::WriteHead {
                head: head.clone(),
                expected: Some(v("h2"))
            }
        );
        assert_eq!(s.on_written(HeadWritten::Moved), SealStep::ReadHead);
        s.on_head(head.clone(), Some(v("h3")));
        assert_eq!(
            s.on_written(HeadWritten::Landed(v("h4"))),
            SealStep::Sealed(head, v("h4"))
        );
    }
}
