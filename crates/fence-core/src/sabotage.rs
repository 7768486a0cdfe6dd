//! Deliberate breakage of the real core and runtime, compiled only with the `sabotage`
//! feature, which only fence-testkit's own `sabotage` feature turns on — and only the
//! sabotage test asks for that (`cargo test -p fence-testkit --features sabotage --test sim`),
//! so no other build, not even `cargo build --workspace`, contains the switches. The
//! simulation runs every node with one switch on and must catch each one; a switch that no
//! property catches is a hole in the simulation.
//!
//! | switch | what breaks |
//! |---|---|
//! | `skip-seal` | a claim returns without writing the head at its new epoch (the claim's CAS *is* the seal that fences every earlier epoch) |
//! | `early-seal-read` | a claim carries forward the payload of an earlier read than the one its guard comes from |
//! | `no-landed-after-expiry` | a renewal answered after the lease's authority ended is installed instead of fencing |
//! | `ack-without-owner-read` | a write whose answer was lost is acknowledged without evidence that it landed under our ownership |
//! | `steal-live-owner` | a claim takes over a foreign owner without observing its lease dead |
//! | `skip-fenced-check` | writes go to the store although the lease is no longer held by our own clock |
//! | `reapply-after-ambiguity` | writes through one claim are not serialised, and a write whose read-back shows another version is re-applied on top |
//! | `rollback-acknowledged` | a claim restores the payload this process last wrote to the cell instead of carrying the current one forward |
//! | `resume-without-seal` | a resume acts on the head it read without writing it at the same epoch (a peer's takeover racing the resume also succeeds) |
//! | `hand-off-unregisters-early` | a hand-off takes the cell out of the lease's register before its write is sent (the lease can resume the cell it is handing away) |
//! | `confirm-at-return` | a confirming read of a peer's lease counts from when it *returned*, not when it was sent (a renewal that landed while it travelled back is missed) |
//! | `gc-current-epoch` | payload collection treats objects of the claim's own epoch as collectable (a write of that epoch still on its way then points the head at a deleted object) |
//! | `log-accepts-foreign-record` | the append log takes any object already at a record's name for its own |
//! | `holder-overstays` | a holder believes its lease for TTL + TTL/5 after the anchor, not TTL |
//! | `authority-from-answer` | a renewal's authority counts from when its answer came, not from when it was sent |
//! | `superseded-forgets-ambiguity` | a write whose answer was lost and whose read-back shows a later epoch is reported not committed (it may have landed) |
//! | `resume-unvouched` | a claim resumes a head naming its node whatever generation wrote it |
//! | `register-admits-twice` | a lease's register of claims never refuses a second claim of a cell |
//! | `log-run-ignores-tag` | an append after a retag extends the log's last run of its epoch instead of starting a tagged one |
//! | `log-settles-on-own-orphan` | an ambiguous append is settled by comparing the record object of its own epoch whatever epoch the settling head committed at its number |
//! | `observer-ignores-stated-ttl` | a peer judges a lease by its own TTL, ignoring the longer one the record states |

use std::fmt;

/// One sabotage switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sabotage {
    /// See the module table.
    SkipSeal,
    /// See the module table.
    EarlySealRead,
    /// See the module table.
    NoLandedAfterExpiry,
    /// See the module table.
    AckWithoutOwnerRead,
    /// See the module table.
    StealLiveOwner,
    /// See the module table.
    SkipFencedCheck,
    /// See the module table.
    ReapplyAfterAmbiguity,
    /// See the module table.
    RollbackAcknowledged,
    /// See the module table.
    ResumeWithoutSeal,
    /// See the module table.
    HandOffUnregistersEarly,
    /// See the module table.
    ConfirmAtReturn,
    /// See the module table.
    GcCurrentEpoch,
    /// See the module table.
    LogAcceptsForeignRecord,
    /// See the module table.
    HolderOverstays,
    /// See the module table.
    AuthorityFromAnswer,
    /// See the module table.
    SupersededForgetsAmbiguity,
    /// See the module table.
    ResumeUnvouched,
    /// See the module table.
    RegisterAdmitsTwice,
    /// See the module table.
    LogRunIgnoresTag,
    /// See the module table.
    LogSettlesOnOwnOrphan,
    /// See the module table.
    ObserverIgnoresStatedTtl,
}

impl Sabotage {
    /// Every switch.
    pub const ALL: [Sabotage; 21] = [
        Sabotage::SkipSeal,
        Sabotage::EarlySealRead,
        Sabotage::NoLandedAfterExpiry,
        Sabotage::AckWithoutOwnerRead,
        Sabotage::StealLiveOwner,
        Sabotage::SkipFencedCheck,
        Sabotage::ReapplyAfterAmbiguity,
        Sabotage::RollbackAcknowledged,
        Sabotage::ResumeWithoutSeal,
        Sabotage::HandOffUnregistersEarly,
        Sabotage::ConfirmAtReturn,
        Sabotage::GcCurrentEpoch,
        Sabotage::LogAcceptsForeignRecord,
        Sabotage::HolderOverstays,
        Sabotage::AuthorityFromAnswer,
        Sabotage::SupersededForgetsAmbiguity,
        Sabotage::ResumeUnvouched,
        Sabotage::RegisterAdmitsTwice,
        Sabotage::LogRunIgnoresTag,
        Sabotage::LogSettlesOnOwnOrphan,
        Sabotage::ObserverIgnoresStatedTtl,
    ];

    /// The switches a test runs: all of them, or only the one `only` names (a developer's
    /// `FENCE_SIM_SWITCH` / `FENCE_MODEL_SWITCH`). A name that matches no switch is an error
    /// listing the names, never an empty selection that would pass.
    pub fn selected(only: Option<&str>) -> Result<Vec<Sabotage>, String> {
        let Some(name) = only else {
            return Ok(Sabotage::ALL.to_vec());
        };
        match Sabotage::ALL.into_iter().find(|s| s.name() == name) {
            Some(switch) => Ok(vec![switch]),
            None => {
                let names: Vec<&str> = Sabotage::ALL.iter().map(|s| s.name()).collect();
                Err(format!("{name:?} names no switch; the switches: {names:?}"))
            }
        }
    }

    /// The switch's name, as CI prints it.
    pub fn name(self) -> &'static str {
        match self {
            Sabotage::SkipSeal => "skip-seal",
            Sabotage::EarlySealRead => "early-seal-read",
            Sabotage::NoLandedAfterExpiry => "no-landed-after-expiry",
            Sabotage::AckWithoutOwnerRead => "ack-without-owner-read",
            Sabotage::StealLiveOwner => "steal-live-owner",
            Sabotage::SkipFencedCheck => "skip-fenced-check",
            Sabotage::ReapplyAfterAmbiguity => "reapply-after-ambiguity",
            Sabotage::RollbackAcknowledged => "rollback-acknowledged",
            Sabotage::ResumeWithoutSeal => "resume-without-seal",
            Sabotage::HandOffUnregistersEarly => "hand-off-unregisters-early",
            Sabotage::ConfirmAtReturn => "confirm-at-return",
            Sabotage::GcCurrentEpoch => "gc-current-epoch",
            Sabotage::LogAcceptsForeignRecord => "log-accepts-foreign-record",
            Sabotage::HolderOverstays => "holder-overstays",
            Sabotage::AuthorityFromAnswer => "authority-from-answer",
            Sabotage::SupersededForgetsAmbiguity => "superseded-forgets-ambiguity",
            Sabotage::ResumeUnvouched => "resume-unvouched",
            Sabotage::RegisterAdmitsTwice => "register-admits-twice",
            Sabotage::LogRunIgnoresTag => "log-run-ignores-tag",
            Sabotage::LogSettlesOnOwnOrphan => "log-settles-on-own-orphan",
            Sabotage::ObserverIgnoresStatedTtl => "observer-ignores-stated-ttl",
        }
    }
}

impl fmt::Display for Sabotage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
