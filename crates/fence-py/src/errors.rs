//! fence's errors as Python exceptions: one class per [`ErrorKind`], all under `FenceError`,
//! each carrying `kind`, `commit`, `ambiguous`, `key` and `message`.

use fence_core::{Commit, Error, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _fence,
    FenceError,
    PyException,
    "Every fence error. `kind` names the ErrorKind, `commit` is \"not_committed\" (the write \
     provably did not land) or \"ambiguous\" (it may have), `key` the store key when known."
);
create_exception!(
    _fence,
    InvalidKeyError,
    FenceError,
    "A key failed validation; nothing was sent."
);
create_exception!(
    _fence,
    InvalidInputError,
    FenceError,
    "A configuration or argument is invalid."
);
create_exception!(
    _fence,
    NotFoundError,
    FenceError,
    "The object does not exist where the operation needs it."
);
create_exception!(
    _fence,
    PermissionDeniedError,
    FenceError,
    "The store refused the credentials or permissions."
);
create_exception!(
    _fence,
    UnavailableError,
    FenceError,
    "The store could not be reached or answered with a server error."
);
create_exception!(
    _fence,
    ConflictError,
    FenceError,
    "A conflicting conditional write came first."
);
create_exception!(
    _fence,
    StoreTimeoutError,
    FenceError,
    "A request outlived its deadline."
);
create_exception!(
    _fence,
    CorruptError,
    FenceError,
    "A stored record could not be decoded; nothing was overwritten."
);
create_exception!(
    _fence,
    UnsupportedError,
    FenceError,
    "The store lacks a capability the operation needs."
);
create_exception!(
    _fence,
    BusyError,
    FenceError,
    "Another live holder has the lease or the cell; try again later."
);
create_exception!(
    _fence,
    FencedError,
    FenceError,
    "Authority is gone: the lease is lost or the epoch was superseded."
);

/// The Python exception of `e`, with its attributes set: missing credentials said as the
/// `fence` command says them ([`fence::missing_credentials`]), the message one plain line
/// with its causes ([`fence::describe`]), escaped as the `fence` command escapes what it
/// prints ([`fence::message::escape`]): it carries text from the store and its servers (node
/// names, error bodies), and a traceback prints it raw to a terminal.
pub(crate) fn to_py(e: Error) -> PyErr {
    let e = fence::missing_credentials(&e).unwrap_or(e);
    Python::attach(|py| {
        let message = fence::message::escape(&fence::describe(&e)).into_owned();
        let err = match e.kind() {
            ErrorKind::InvalidKey => InvalidKeyError::new_err(message.clone()),
            ErrorKind::InvalidInput => InvalidInputError::new_err(message.clone()),
            ErrorKind::NotFound => NotFoundError::new_err(message.clone()),
            ErrorKind::PermissionDenied => PermissionDeniedError::new_err(message.clone()),
            ErrorKind::Unavailable => UnavailableError::new_err(message.clone()),
            ErrorKind::Conflict => ConflictError::new_err(message.clone()),
            ErrorKind::Timeout => StoreTimeoutError::new_err(message.clone()),
            ErrorKind::Corrupt => CorruptError::new_err(message.clone()),
            ErrorKind::Unsupported => UnsupportedError::new_err(message.clone()),
            ErrorKind::Busy => BusyError::new_err(message.clone()),
            ErrorKind::Fenced => FencedError::new_err(message.clone()),
            _ => FenceError::new_err(message.clone()),
        };
        let commit = match e.commit() {
            Commit::NotCommitted => "not_committed",
            Commit::Ambiguous => "ambiguous",
        };
        let value = err.value(py);
        let _ = value.setattr("kind", kind_name(e.kind()));
        let _ = value.setattr("commit", commit);
        let _ = value.setattr("message", message);
        let _ = value.setattr("ambiguous", e.is_ambiguous());
        let _ = value.setattr("key", e.key().map(|k| k.as_str().to_owned()));
        err
    })
}

/// The `kind` attribute: the ErrorKind's name in snake case.
fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidKey => "invalid_key",
        ErrorKind::InvalidInput => "invalid_input",
        ErrorKind::NotFound => "not_found",
        ErrorKind::PermissionDenied => "permission_denied",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::Conflict => "conflict",
        ErrorKind::Timeout => "timeout",
        ErrorKind::Corrupt => "corrupt",
        ErrorKind::Unsupported => "unsupported",
        ErrorKind::Busy => "busy",
        ErrorKind::Fenced => "fenced",
        _ => "other",
    }
}

/// Registers the exception classes on the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("FenceError", py.get_type::<FenceError>())?;
    m.add("InvalidKeyError", py.get_type::<InvalidKeyError>())?;
    m.add("InvalidInputError", py.get_type::<InvalidInputError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add(
        "PermissionDeniedError",
        py.get_type::<PermissionDeniedError>(),
    )?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("StoreTimeoutError", py.get_type::<StoreTimeoutError>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("FencedError", py.get_type::<FencedError>())?;
    Ok(())
}
