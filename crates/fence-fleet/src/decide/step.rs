//! What a [`FleetCore`](super::FleetCore) takes in and gives out: its inputs, its effects,
//! and the small values they carry.

use std::collections::{BTreeMap, BTreeSet};

use fence_core::decide::Observation;
use fence_core::Error;

use super::lead::{Death, LeadEffect, LeadInput};
use super::record::{Assignment, Notice, Watched};
use crate::shard::StopReason;

/// What a read answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Read<T> {
    /// The object is there.
    Found(T),
    /// There is none.
    Absent,
    /// The read failed or got no answer.
    Failed,
}

/// The owner a head named when this node last read it (or learned it by its own doing).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seen {
    /// The owner, `None` when released (or there is no head).
    pub owner: Option<String>,
    /// The head's epoch (0: no head).
    pub epoch: u64,
}

impl Seen {
    /// Whether the head names `node` at `epoch`.
    pub fn is_owned_by(&self, node: &str, epoch: u64) -> bool {
        self.owner.as_deref() == Some(node) && self.epoch == epoch
    }
}

/// What this node's assignment record says, as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mine {
    /// The term of the leader that wrote it (0: never placed).
    pub term: u64,
    /// That leader.
    pub leader: String,
    /// The cells placed on this node (of this fleet).
    pub targets: BTreeSet<String>,
    /// The heir of each of them.
    pub heirs: BTreeMap<String, String>,
    /// Cells moved elsewhere since, and where.
    pub moves: BTreeMap<String, String>,
}

/// Why heads are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeadsFor {
    /// Hand-offs without a verdict, not adopted back.
    Settle,
    /// Cells wanted whose owner is not known.
    Take,
    /// Every cell not held (opt-in).
    Follow,
    /// The leadership cell, to tell its holder this node joined.
    Join,
}

/// Why cells naming this node are adopted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdoptFor {
    /// A hand-off without a verdict: adopting it again proves it never lands.
    Settle,
    /// Asked for a cell the store names as this node's.
    Ask,
    /// A drain takes what the store names as its own, to hand or release it.
    Drain,
}

/// Why cells are handed off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandOffFor {
    /// The placement moved them elsewhere (the receiver reads it in its record).
    Shed,
    /// Another node asked (it is told).
    Ask,
    /// The application asked ([`FleetInput::HandOffAsked`]; it is answered).
    Asked,
    /// A drain (each receiver is told).
    Drain,
}

impl HandOffFor {
    pub(super) fn notify(self) -> bool {
        self != HandOffFor::Shed
    }
}

/// How a claim (or resume) of a cell ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Claimed {
    /// Held at `epoch`; `resumed`: at the epoch the store named it with.
    Held {
        /// The epoch.
        epoch: u64,
        /// Resumed rather than claimed anew.
        resumed: bool,
    },
    /// A live owner holds it.
    Busy,
    /// The claim failed otherwise (the store).
    Failed,
}

/// How a hand-off ended.
#[derive(Debug)]
pub enum HandOffOutcome {
    /// The receiver holds the cell at this epoch.
    Landed(u64),
    /// Not made: the store still names this node (`lease_held`: the lease is still held).
    NotMade {
        /// Whether the node lease is still held.
        lease_held: bool,
        /// Why.
        error: Error,
    },
    /// No verdict: it may have landed.
    Unsettled {
        /// Why.
        error: Error,
    },
}

/// An input to a [`FleetCore`](super::FleetCore).
#[derive(Debug)]
pub enum FleetInput {
    /// Time passed: the wake-up the core asked for (a round), or any other reason to look.
    Tick,
    /// What the shell found before a round: the held cells whose shards ended on their
    /// own, and whether the leadership's claim (if any) is still held.
    Reap {
        /// Cells whose shards ended.
        ended: Vec<String>,
        /// Whether the leadership claim is held.
        leadership_held: bool,
    },
    /// The node lease is lost: every shard stops.
    LeaseLost,
    /// The node lease was acquired again under `generation`.
    LeaseAcquired {
        /// The new generation.
        generation: String,
    },
    /// The handle is gone: every shard stops.
    Closed,
    /// The answer to [`FleetEffect::ReadRecord`].
    Record(Read<Assignment>),
    /// The answer to [`FleetEffect::ReadHeads`]: the heads read (failed reads left out).
    Heads {
        /// Why they were read.
        purpose: HeadsFor,
        /// Each cell's head.
        heads: Vec<(String, Seen)>,
    },
    /// A poll of the held cells' heads ([`FleetEffect::Poll`]) came back.
    Polled(Vec<(String, Seen)>),
    /// The answer to [`FleetEffect::Claim`].
    Claimed(Vec<(String, Claimed)>),
    /// The answer to [`FleetEffect::ClaimLeadership`].
    LeadershipClaimed(Claimed),
    /// The answer to [`FleetEffect::Adopt`]: each cell's epoch, or whether the lease was
    /// still held when the adoption failed.
    Adopted {
        /// Why.
        purpose: AdoptFor,
        /// Each cell's outcome.
        results: Vec<(String, Result<u64, bool>)>,
    },
    /// The answer to [`FleetEffect::ReadReceivers`]: the generation of each receiver that
    /// takes cells now.
    Receivers(BTreeMap<String, String>),
    /// The answer to [`FleetEffect::HandOff`]: (cell, receiver, outcome).
    HandedOff(Vec<(String, String, HandOffOutcome)>),
    /// The answer to [`FleetEffect::Release`]: each cell released, or whether the lease
    /// was still held when its release failed.
    Released(Vec<(String, Result<(), bool>)>),
    /// The answer to [`FleetEffect::Join`]: whether the notice was posted.
    Joined(bool),
    /// The answer to [`FleetEffect::ObserveLease`] (`None`: the read failed).
    LeaseObserved(Option<Observation>),
    /// The watcher buried `node`: the cells this node inherits.
    Buried {
        /// The dead node.
        node: String,
        /// The cells this node inherits.
        inherit: Vec<String>,
    },
    /// The answer to [`FleetEffect::Bury`]: the cells this node inherits.
    Inherits(Vec<String>),
    /// This node is an heir of an overdue node: read the record closely for a while.
    Overdue,
    /// The application asks to hand `cell` to `to`.
    HandOffAsked {
        /// The cell.
        cell: String,
        /// The receiver.
        to: String,
    },
    /// The application asks to leave the fleet.
    Drain,
    /// The drain's deadline passed: what is not done is left.
    DrainDeadline,
    /// The answer to [`FleetEffect::Wait`].
    Waited,
    /// The answer to [`FleetEffect::HandLeadership`]: whether the leadership was handed.
    LeadershipHanded(bool),
    /// The answer to [`FleetEffect::ReleaseLease`]: whether a read after the release shows
    /// the released record.
    LeaseReleased(bool),
    /// An answer to the leader's effects.
    Lead(LeadInput),
}

/// An effect of a [`FleetCore`](super::FleetCore), for the shell to perform in order.
#[derive(Debug)]
pub enum FleetEffect {
    /// Read this node's record; answer [`FleetInput::Record`].
    ReadRecord,
    /// Write this node's own part of its record: its generation, and whether it leaves.
    WriteOwn {
        /// Whether it leaves.
        leaving: bool,
    },
    /// Read the heads of `cells`; answer [`FleetInput::Heads`].
    ReadHeads {
        /// The cells.
        cells: Vec<String>,
        /// Why.
        purpose: HeadsFor,
    },
    /// Start reading the heads of `cells` in the background; answer
    /// [`FleetInput::Polled`] whenever done.
    Poll {
        /// The cells.
        cells: Vec<String>,
    },
    /// Claim `cells`, or resume those a vouched generation wrote; answer
    /// [`FleetInput::Claimed`] and keep the claims for [`FleetEffect::Install`].
    Claim {
        /// The cells.
        cells: Vec<String>,
    },
    /// Adopt `cells` (they name this node); answer [`FleetInput::Adopted`].
    Adopt {
        /// The cells.
        cells: Vec<String>,
        /// Why.
        purpose: AdoptFor,
    },
    /// Read the records of `nodes`; answer [`FleetInput::Receivers`].
    ReadReceivers {
        /// The nodes.
        nodes: BTreeSet<String>,
    },
    /// Stop acting on each cell, then hand it to its receiver (with its generation); answer
    /// [`FleetInput::HandedOff`].
    HandOff {
        /// (cell, receiver, receiver's generation).
        jobs: Vec<(String, String, String)>,
        /// Why.
        purpose: HandOffFor,
    },
    /// Stop acting on `cells` and release them; answer [`FleetInput::Released`].
    Release {
        /// The cells.
        cells: Vec<String>,
    },
    /// Stop acting on `cells`, close their claims (no write in flight), and stop their
    /// shards for `reason`.
    Close {
        /// The cells.
        cells: Vec<String>,
        /// Why.
        reason: StopReason,
    },
    /// Start a shard of `cell` from the claim just made: `Started` is told.
    Install {
        /// The cell.
        cell: String,
        /// Resumed at the store's epoch.
        resumed: bool,
    },
    /// Forget `cell`'s shard; tell `reason` (unless it was told already).
    Remove {
        /// The cell.
        cell: String,
        /// Why, if it is known.
        reason: Option<StopReason>,
    },
    /// Forget `cell`'s shard, keeping its end until [`FleetEffect::Finish`]: a hand-off got
    /// no verdict.
    Unsettle {
        /// The cell.
        cell: String,
    },
    /// Tell why an unsettled hand-off's shard ended.
    Finish {
        /// The cell.
        cell: String,
        /// Why.
        reason: StopReason,
    },
    /// Tell the owner this node now knows `cell` has.
    NewOwner {
        /// The cell.
        cell: String,
        /// The owner.
        owner: Option<String>,
        /// The epoch.
        epoch: u64,
    },
    /// Post notices, one edit per recipient.
    Post {
        /// The notices, by recipient.
        to: BTreeMap<String, Vec<Notice>>,
    },
    /// The watcher's duty changed: whom to watch, and who leads.
    Duty {
        /// The nodes to watch, and the heirs of their cells.
        watched: Vec<Watched>,
        /// The leader.
        leader: String,
    },
    /// Read `node`'s lease by observation; answer [`FleetInput::LeaseObserved`].
    ObserveLease {
        /// The node.
        node: String,
    },
    /// The answer to the application's hand-off.
    Reply(Result<u64, Error>),
    /// Claim (or resume) the leadership cell; answer [`FleetInput::LeadershipClaimed`].
    ClaimLeadership,
    /// Post the join notice to `leader`; answer [`FleetInput::Joined`].
    Join {
        /// The leader.
        leader: String,
        /// The notice.
        notice: Notice,
    },
    /// The leadership ended: close its claim.
    CloseLeadership,
    /// Release the leadership cell (a drain, no receiver).
    ReleaseLeadership,
    /// Hand the leadership cell to `to` and tell it; answer
    /// [`FleetInput::LeadershipHanded`].
    HandLeadership {
        /// The receiver.
        to: String,
        /// Its generation.
        generation: String,
        /// The notice it is told.
        notice: Notice,
    },
    /// An effect of the leader.
    Lead(LeadEffect),
    /// Tombstone a node the leader found dead and tell its heirs; answer
    /// [`FleetInput::Inherits`].
    Bury(Death),
    /// Wait `ms`; answer [`FleetInput::Waited`].
    Wait {
        /// How long.
        ms: u64,
    },
    /// Release the node lease; answer [`FleetInput::LeaseReleased`].
    ReleaseLease,
    /// The drain is done.
    Drained {
        /// Cells handed off.
        handed_off: BTreeSet<String>,
        /// Cells released.
        released: BTreeSet<String>,
        /// Cells left to be taken over.
        left: BTreeSet<String>,
        /// Whether the lease's release shows in the store.
        lease_released: bool,
    },
    /// Call [`FleetInput::Tick`] at this monotonic time.
    WakeAt(u64),
}
