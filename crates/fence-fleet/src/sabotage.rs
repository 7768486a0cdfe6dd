//! Deliberate breakage of the fleet's real rules, compiled only with the `sabotage` feature,
//! which only the fleet's model check and sabotage test ask for
//! (`cargo test -p fence-fleet --features sabotage --test model --test sabotage`), so no
//! other build contains the switches. The model check and the simulated fleet run with one
//! switch on and must catch each one; a switch nothing catches is a hole in the checks.
//!
//! | switch | what breaks |
//! |---|---|
//! | `place-twice` | the leader's part of a node keeps a cell the placement moved away from it: two nodes' records of one term place the cell |
//! | `unsticky-placement` | the leader places cells by a pure function of the live set (rendezvous hashing) instead of from the previous placement: a join or a death moves cells between nodes that stay |
//! | `leave-strands-cells` | a drain neither hands off nor releases its cells: they wait for the node's lease to be observed dead |

use std::fmt;

/// One sabotage switch of the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sabotage {
    /// See the module table.
    PlaceTwice,
    /// See the module table.
    UnstickyPlacement,
    /// See the module table.
    LeaveStrandsCells,
}

impl Sabotage {
    /// Every switch.
    pub const ALL: [Sabotage; 3] = [
        Sabotage::PlaceTwice,
        Sabotage::UnstickyPlacement,
        Sabotage::LeaveStrandsCells,
    ];

    /// The switches a test runs: all of them, or only the one `only` names. A name that
    /// matches no switch is an error listing the names.
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

    /// The switch's name, as the checks print it.
    pub fn name(self) -> &'static str {
        match self {
            Sabotage::PlaceTwice => "place-twice",
            Sabotage::UnstickyPlacement => "unsticky-placement",
            Sabotage::LeaveStrandsCells => "leave-strands-cells",
        }
    }
}

impl fmt::Display for Sabotage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
