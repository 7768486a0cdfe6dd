//! A cell's data from Python: raw bytes (`write`, `write_if`) and the key map that the
//! `fence put` / `fence get` commands keep (`put`, `get`, `delete`, `keys`, fence-core's
//! [`keymap`]: one implementation for both).
//!
//! A raw write replaces the cell's whole data. Over a key map (data in exactly the shape
//! `fence put` writes, [`KeyMap::recognise`]) it is refused unless the caller passes
//! `overwrite_keymap=True`: the check and the write are one compare-and-swap on the head
//! version the check read, so a `fence put` landing in between makes the write look again.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use fence_core::keymap::{self, KeyMap};
use fence_core::runtime::update_cell;
use fence_core::{CellClaim, Error, ErrorKind, Ownership, Version, WriteAck};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyString;

/// How many times a guarded write looks again after a co-writer moved the head.
const GUARDED_ATTEMPTS: usize = 16;

/// A payload from Python: ``bytes``, ``bytearray`` or ``str`` (written as UTF-8).
pub(crate) fn payload(data: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(s) = data.cast::<PyString>() {
        return Ok(Bytes::copy_from_slice(s.to_cow()?.as_bytes()));
    }
    match data.extract::<PyBackedBytes>() {
        Ok(b) => Ok(Bytes::copy_from_slice(&b)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "data must be bytes, bytearray or str (written as UTF-8), not {}",
            data.get_type().name()?
        ))),
    }
}

/// The refusal of a raw write over a key map: nothing written.
fn keymap_refusal(cell: &str, map: &KeyMap) -> Error {
    let keys: Vec<&str> = map.keys().take(5).collect();
    Error::new(
        ErrorKind::InvalidInput,
        format!(
            "cell {cell} holds a key map (the data of `fence put`/`fence get` and put(); keys \
             {}{}): a raw write would replace all of it; pass overwrite_keymap=True to do so, \
             or change single keys with put() and delete()",
            keys.join(", "),
            if map.keys().count() > keys.len() {
                ", …"
            } else {
                ""
            }
        ),
    )
    .not_committed()
}

fn refuse_keymap(cell: &str, current: &[u8]) -> Result<(), Error> {
    match KeyMap::recognise(current) {
        Some(map) => Err(keymap_refusal(cell, &map)),
        None => Ok(()),
    }
}

/// A claim's raw writes, with the version of its own last raw write: a write over that
/// version needs no look at the data (it is this claim's own raw bytes).
#[derive(Default)]
pub(crate) struct RawWrites {
    last: Mutex<Option<Version>>,
}

impl RawWrites {
    fn last(&self) -> Option<Version> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn wrote(&self, ack: &WriteAck) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(ack.version.clone());
    }

    /// A raw write through `claim`: over the head version `expected` when given
    /// (`Some(None)`: only while the cell holds no data), else over whatever head is there.
    /// Refuses to replace a key map unless `overwrite`.
    pub(crate) async fn write(
        &self,
        claim: &CellClaim,
        data: Bytes,
        expected: Option<Option<Version>>,
        overwrite: bool,
    ) -> Result<WriteAck, Error> {
        let ack = match (overwrite, expected) {
            (true, None) => claim.write(data).await,
            (true, Some(v)) => claim.write_if(v.as_ref(), data).await,
            (false, expected) => self.guarded(claim, data, expected).await,
        }?;
        self.wrote(&ack);
        Ok(ack)
    }

    async fn guarded(
        &self,
        claim: &CellClaim,
        data: Bytes,
        expected: Option<Option<Version>>,
    ) -> Result<WriteAck, Error> {
        let own_last = self.last();
        if let Some(last) = own_last.as_ref() {
            if expected.as_ref().is_none_or(|e| e.as_ref() == Some(last)) {
                match claim.write_if(Some(last), data.clone()).await {
                    Err(e) if moved(&e) && expected.is_none() => {}
                    other => return other,
                }
            }
        }
        for _ in 0..GUARDED_ATTEMPTS {
            let seen = claim.read().await?;
            let version = seen.as_ref().map(|d| d.version.clone());
            if let Some(exp) = &expected {
                if *exp != version {
                    return Err(head_moved(claim.cell()));
                }
            }
            if let Some(d) = &seen {
                refuse_keymap(claim.cell(), &d.payload)?;
            }
            match claim.write_if(version.as_ref(), data.clone()).await {
                Err(e) if moved(&e) && expected.is_none() => continue,
                other => return other,
            }
        }
        Err(Error::new(
            ErrorKind::Timeout,
            format!(
                "cell {}: other writes of this epoch landed first on each of \
                 {GUARDED_ATTEMPTS} attempts; nothing written",
                claim.cell()
            ),
        )
        .not_committed())
    }
}

/// A `write_if` that the store proved did not land because the head moved.
fn moved(e: &Error) -> bool {
    e.kind() == ErrorKind::Conflict && !e.is_ambiguous()
}

/// What `write_if` answers for a head that is not the expected one.
fn head_moved(cell: &str) -> Error {
    Error::new(
        ErrorKind::Conflict,
        format!("cell {cell}: the head moved past the expected version; nothing written"),
    )
    .not_committed()
}

/// A raw fenced write of `cell` at `epoch` without a claim (`Fence.write`): refuses to
/// replace a key map unless `overwrite`.
pub(crate) async fn write_at(
    own: &Ownership,
    cell: &str,
    epoch: u64,
    data: Bytes,
    overwrite: bool,
    bound: Duration,
) -> Result<WriteAck, Error> {
    update_cell(own, cell, epoch, bound, |current| {
        if !overwrite {
            refuse_keymap(cell, current)?;
        }
        Ok(data.clone())
    })
    .await
}

/// The claim must still act for a key-map change through it: a lease lost or a claim ended
/// refuses locally, as its raw writes do.
pub(crate) fn acting(claim: &CellClaim, what: &str) -> Result<(), Error> {
    if claim.is_held() {
        return Ok(());
    }
    Err(Error::fenced(format!(
        "cell {}: the claim does not hold (its lease is lost, or it ended); {what} refused \
         locally, nothing written",
        claim.cell()
    )))
}

/// A key-map `put` through `claim` (at its epoch).
pub(crate) async fn claim_put(
    claim: &CellClaim,
    key: &str,
    value: &[u8],
) -> Result<WriteAck, Error> {
    acting(claim, "put")?;
    let own = claim.fence().ownership();
    keymap::put(
        own,
        claim.cell(),
        claim.epoch(),
        key,
        value,
        claim.request_bound(),
    )
    .await
}

/// A key-map `delete` through `claim` (at its epoch).
pub(crate) async fn claim_delete(claim: &CellClaim, key: &str) -> Result<bool, Error> {
    acting(claim, "delete")?;
    let own = claim.fence().ownership();
    keymap::delete(own, claim.cell(), claim.epoch(), key, claim.request_bound()).await
}
