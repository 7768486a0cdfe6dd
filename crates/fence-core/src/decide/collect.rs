//! Which payload objects may be deleted, and when: the rules of payload collection.
//!
//! A payload object `cells/<cell>/blobs/<epoch>-<nonce>` is created before the head write
//! that names it, by a writer at `<epoch>`. It becomes nobody's in three ways, and each has
//! its rule here:
//!
//! - **its write's fate is known** ([`unused_payload`]): a write that landed frees the object
//!   it replaced; a write the store proved never lands frees its own. A write whose fate is
//!   unknown (an answer lost, and read-backs that failed) frees **nothing**: the head may
//!   name its object now, or later, and deleting it would leave the cell unreadable.
//! - **its writer died** between creating it and its head write (a killed `fence put`, a
//!   crashed process), or before deleting an object it freed: only a later epoch's seal
//!   proves such an object dead ([`collectable`]). A claim at epoch `e` seals every earlier
//!   epoch — no head write of an epoch below `e` can land after it — so an object of an
//!   earlier epoch is nobody's unless the head names it (data carried forward). An object of
//!   epoch `e` itself may belong to a live co-writer whose head write is on its way, whatever
//!   its age: it is never collected at its own epoch.
//! - **when** ([`victims`]): every claim that seals a new epoch lists its cell's payload
//!   objects once and deletes at most [`MAX_VICTIMS`] of them, in the background, so a claim's
//!   latency does not grow with what earlier writers left. After that collection, a cell
//!   holds the object its head names, objects of the claim's epoch, and objects of earlier
//!   epochs beyond the first [`MAX_VICTIMS`] found (left to the next claims).
//!
//! ```
//! use fence_core::decide::collect::{victims, Fate, unused_payload};
//! use fence_core::decide::Flaws;
//! use fence_core::record::{BlobRef, CellPayload};
//! let listed = ["3-aa", "4-bb", "4-cc", "5-dd"];
//! // A claim at epoch 5 whose head carries 4-bb forward: 3-aa and 4-cc are nobody's.
//! assert_eq!(victims(listed, 5, Some("4-bb"), Flaws::default()), ["3-aa", "4-cc"]);
//! let ours = CellPayload::Blob(BlobRef { name: "5-ee".into(), len: 9 });
//! assert_eq!(unused_payload(Fate::Unknown, &ours, &CellPayload::Empty), None);
//! ```

use super::claimed::CellEnd;
use super::write::Settled;
use crate::flaws::{sabotaged, Flaws};
use crate::record::{BlobRef, CellPayload};

/// The most payload objects one claim's collection deletes. One listing page of the S3
/// API holds 1,000 keys.
pub const MAX_VICTIMS: usize = 1_000;

/// What is known of a data write's fate, as far as its payload objects go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// It landed: the head named its payload when it did.
    Landed,
    /// The store proved it never lands: refused before it was sent, a guard the store
    /// rejected, a head that moved or ended first.
    NotLanded,
    /// It may have landed, or may land still: an answer was lost and no evidence settled it.
    Unknown,
}

impl Fate {
    /// The fate a finished change of a claimed cell stands for.
    pub fn of_end(end: &CellEnd) -> Fate {
        match end {
            CellEnd::Written { .. } => Fate::Landed,
            CellEnd::Superseded {
                maybe_landed: true, ..
            } => Fate::Unknown,
            CellEnd::Conflict { .. } | CellEnd::Superseded { .. } | CellEnd::KeptMoving => {
                Fate::NotLanded
            }
        }
    }

    /// The fate a settled head write stands for.
    pub fn of_settled(settled: &Settled) -> Fate {
        match settled {
            Settled::Landed(_) => Fate::Landed,
            Settled::Fenced {
                maybe_landed: true, ..
            } => Fate::Unknown,
            Settled::Moved { .. } | Settled::Fenced { .. } => Fate::NotLanded,
        }
    }

    /// The fate of a write that failed without a verdict: unknown if an attempt of it may
    /// have landed (an ambiguous error), else not landed.
    pub fn of_failure(maybe_landed: bool) -> Fate {
        if maybe_landed {
            Fate::Unknown
        } else {
            Fate::NotLanded
        }
    }
}

/// The payload object a finished data write leaves to nobody, to delete now: the one it
/// replaced once it landed (unless it wrote that same object), its own once the store proved
/// it never lands — and **never the object of a write whose fate is unknown**: an ambiguous
/// write whose read-backs all failed may be the current head, which then names that object,
/// and deleting it would leave the cell unreadable. (Such an object, if its write did not
/// land after all, is collected by the next claim at a later epoch.)
///
/// ```
/// use fence_core::decide::collect::{unused_payload, Fate};
/// use fence_core::record::{BlobRef, CellPayload};
/// let blob = |n: &str| CellPayload::Blob(BlobRef { name: n.into(), len: 9 });
/// let (new, old) = (blob("2-new"), blob("1-old"));
/// assert_eq!(unused_payload(Fate::Landed, &new, &old).map(|b| b.name.as_str()), Some("1-old"));
/// assert_eq!(unused_payload(Fate::NotLanded, &new, &old).map(|b| b.name.as_str()), Some("2-new"));
/// assert_eq!(unused_payload(Fate::Unknown, &new, &old), None);
/// ```
pub fn unused_payload<'a>(
    fate: Fate,
    written: &'a CellPayload,
    replaced: &'a CellPayload,
) -> Option<&'a BlobRef> {
    match fate {
        Fate::Landed => replaced.blob().filter(|old| Some(*old) != written.blob()),
        Fate::NotLanded => written.blob(),
        Fate::Unknown => None,
    }
}

/// Whether a payload object written under `epoch` (`None`: a name fence did not write) may
/// be deleted by a claim at `claim_epoch` (`current`: the head points at it now). Only
/// objects of *earlier* epochs: no writer of an earlier epoch can land a head after this
/// claim's seal, while a write of this epoch (an ambiguous one landing late, a co-writer's)
/// may still point a head at its object.
pub fn collectable(epoch: Option<u64>, claim_epoch: u64, current: bool, flaws: Flaws) -> bool {
    let older = if sabotaged!(flaws, GcCurrentEpoch) {
        epoch.is_some_and(|e| e <= claim_epoch)
    } else {
        epoch.is_some_and(|e| e < claim_epoch)
    };
    older && !current
}

/// The epoch a payload object's name states (`<epoch>-<nonce>`, as fence names them), or
/// `None` for a name fence did not write. With [`collectable`], the rule that decides which
/// objects of a listing a claim may delete.
pub fn blob_epoch(name: &str) -> Option<u64> {
    name.split('-').next().and_then(|e| e.parse::<u64>().ok())
}

/// The payload objects (names, the last segment of each key listed under the cell's
/// `blobs/`) a claim at `claim_epoch` deletes, in listing order and at most
/// [`MAX_VICTIMS`]: those [`collectable`] at its epoch other than `keep`, the object its
/// head names (the data its seal carried forward, or the head read since).
pub fn victims<'a>(
    listed: impl IntoIterator<Item = &'a str>,
    claim_epoch: u64,
    keep: Option<&str>,
    flaws: Flaws,
) -> Vec<&'a str> {
    listed
        .into_iter()
        .filter(|name| {
            let current = keep == Some(*name);
            collectable(blob_epoch(name), claim_epoch, current, flaws)
        })
        .take(MAX_VICTIMS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Version;

    fn blob(name: &str) -> CellPayload {
        CellPayload::Blob(BlobRef {
            name: name.into(),
            len: 1,
        })
    }

    #[test]
    fn only_earlier_epochs_are_collected() {
        let f = Flaws::default();
        assert!(collectable(Some(2), 3, false, f));
        assert!(
            !collectable(Some(3), 3, false, f),
            "a write of this epoch may still land"
        );
        assert!(!collectable(Some(2), 3, true, f), "the head points at it");
        assert!(!collectable(None, 3, false, f), "not a name fence wrote");
        assert_eq!(blob_epoch("12-ab3f"), Some(12));
        assert_eq!(blob_epoch("notes.txt"), None);
    }

    #[test]
    fn a_claim_keeps_its_heads_object_its_own_epoch_and_names_it_did_not_write() {
        let listed = ["1-a", "2-b", "2-c", "3-d", "x", "9-z"];
        let f = Flaws::default();
        assert_eq!(victims(listed, 3, Some("2-b"), f), ["1-a", "2-c"]);
        assert_eq!(victims(listed, 3, None, f), ["1-a", "2-b", "2-c"]);
        assert!(victims(listed, 1, None, f).is_empty());
        let many: Vec<String> = (0..MAX_VICTIMS + 5).map(|i| format!("1-{i}")).collect();
        let found = victims(many.iter().map(String::as_str), 2, None, f);
        assert_eq!(found.len(), MAX_VICTIMS, "bounded work per claim");
    }

    #[test]
    fn a_write_of_unknown_fate_frees_nothing() {
        let (new, old) = (blob("2-new"), blob("1-old"));
        assert_eq!(unused_payload(Fate::Landed, &new, &old), old.blob());
        assert_eq!(
            unused_payload(Fate::Landed, &old, &old),
            None,
            "its own object"
        );
        assert_eq!(unused_payload(Fate::NotLanded, &new, &old), new.blob());
        assert_eq!(unused_payload(Fate::Unknown, &new, &old), None);
        let fenced = |maybe_landed| Settled::Fenced {
            epoch: 3,
            maybe_landed,
        };
        assert_eq!(Fate::of_settled(&fenced(true)), Fate::Unknown);
        assert_eq!(Fate::of_settled(&fenced(false)), Fate::NotLanded);
        assert_eq!(
            Fate::of_settled(&Settled::Landed(Version::new("v").unwrap())),
            Fate::Landed
        );
        let superseded = |maybe_landed| CellEnd::Superseded {
            epoch: 3,
            maybe_landed,
        };
        assert_eq!(Fate::of_end(&superseded(true)), Fate::Unknown);
        assert_eq!(Fate::of_end(&superseded(false)), Fate::NotLanded);
        assert_eq!(Fate::of_end(&CellEnd::KeptMoving), Fate::NotLanded);
        assert_eq!(Fate::of_failure(true), Fate::Unknown);
        assert_eq!(Fate::of_failure(false), Fate::NotLanded);
    }
}
