//! A lease's register of the cells it has claimed, and the rule of what it lets claim, resume
//! or adopt a cell while another claim of the same lease is under way.
//!
//! One lease (one process generation) holds at most one claim of a cell. A claim, a resume
//! and an adoption each [`reserve`](Register::reserve) the cell before any I/O and
//! [`keep`](Register::keep) it at their epoch once they landed; a claim leaves the register
//! only when it is over in this process ([`leave`](Register::leave)). A hand-off under way
//! stays in the register until it settled or was given up
//! ([`hand_off_begins`](Register::hand_off_begins)): while it may still land, this lease
//! must not resume the cell it is handing away — a resume at the epoch the hand-off leaves
//! would make the hand-off's write move on top of it, and two nodes would act.
//!
//! The tokio runtime ([`LeaseKeeper::claim`](crate::LeaseKeeper::claim),
//! [`adopt`](crate::LeaseKeeper::adopt), [`CellClaim::hand_off`](crate::CellClaim::hand_off))
//! and the model check run this very type.
//!
//! ```
//! use fence_core::decide::register::Register;
//! use fence_core::decide::Flaws;
//! let mut reg = Register::default();
//! reg.reserve("orders").unwrap();
//! assert_eq!(reg.reserve("orders"), Err(0)); // a claim of it is in progress
//! reg.keep("orders", 3);
//! assert!(!reg.hand_off_begins("orders", 3, Flaws::default())); // still registered
//! assert_eq!(reg.reserve("orders"), Err(3)); // no adoption while the hand-off may land
//! reg.leave("orders", 3);
//! assert!(reg.reserve("orders").is_ok());
//! ```

use std::collections::BTreeMap;

use crate::flaws::{sabotaged, Flaws};

/// The cells a lease has claimed (epoch), or is claiming (0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Register {
    claimed: BTreeMap<Box<str>, u64>,
    flaws: Flaws,
}

impl Register {
    /// The same register with sabotage `flaws` (only ever set with the `sabotage` feature).
    #[must_use]
    pub fn with_flaws(mut self, flaws: Flaws) -> Self {
        self.flaws = flaws;
        self
    }

    /// Reserves `cell` for a claim, resume or adoption about to start (epoch 0 until it
    /// lands); `Err(epoch)` if this lease already has a claim of it (`0`: one in progress).
    pub fn reserve(&mut self, cell: &str) -> Result<(), u64> {
        if let Some(e) = self.claimed.get(cell) {
            if !sabotaged!(self.flaws, RegisterAdmitsTwice) {
                return Err(*e);
            }
        }
        self.claimed.insert(cell.into(), 0);
        Ok(())
    }

    /// The claim of `cell` landed at `epoch`: it stays registered until it is over.
    pub fn keep(&mut self, cell: &str, epoch: u64) {
        self.claimed.insert(cell.into(), epoch);
    }

    /// The claim of `cell` at `epoch` (`0`: a reservation that did not land) is over in this
    /// process; a later claim of the cell at another epoch stays.
    pub fn leave(&mut self, cell: &str, epoch: u64) {
        if self.claimed.get(cell) == Some(&epoch) {
            self.claimed.remove(cell);
        }
    }

    /// The epoch this lease holds `cell` at (`Some(0)`: a claim in progress).
    pub fn epoch_of(&self, cell: &str) -> Option<u64> {
        self.claimed.get(cell).copied()
    }

    /// How many cells are registered.
    pub fn len(&self) -> usize {
        self.claimed.len()
    }

    /// Whether no cell is registered.
    pub fn is_empty(&self) -> bool {
        self.claimed.is_empty()
    }

    /// The claim of `cell` at `epoch` is about to send its hand-off: it stays registered, so
    /// the lease cannot resume the cell while the hand-off may still land. Returns whether
    /// the claim left the register (only the `hand-off-unregisters-early` sabotage does).
    pub fn hand_off_begins(&mut self, cell: &str, epoch: u64, flaws: Flaws) -> bool {
        if sabotaged!(flaws, HandOffUnregistersEarly) {
            self.leave(cell, epoch);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_is_claimed_once_per_lease_and_a_hand_off_keeps_it_until_it_settles() {
        let mut reg = Register::default();
        assert_eq!(reg.reserve("c"), Ok(()));
        assert_eq!(reg.reserve("c"), Err(0));
        reg.leave("c", 0);
        assert!(reg.is_empty());
        reg.reserve("c").unwrap();
        reg.keep("c", 4);
        assert!(!reg.hand_off_begins("c", 4, Flaws::default()));
        assert_eq!(reg.reserve("c"), Err(4));
        // A stale leave (another epoch) does not free a later claim.
        reg.leave("c", 3);
        assert_eq!(reg.epoch_of("c"), Some(4));
        reg.leave("c", 4);
        assert_eq!((reg.len(), reg.epoch_of("c")), (0, None));
    }

    #[cfg(feature = "sabotage")]
    #[test]
    fn the_sabotaged_hand_off_leaves_the_register_before_it_is_sent() {
        use crate::sabotage::Sabotage;
        let mut reg = Register::default();
        reg.keep("c", 4);
        let flaws = Flaws::switch(Some(Sabotage::HandOffUnregistersEarly));
        assert!(reg.hand_off_begins("c", 4, flaws));
        assert_eq!(reg.reserve("c"), Ok(()));
    }
}
