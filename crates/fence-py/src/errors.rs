//! fence's errors as Python exceptions: one class per [`ErrorKind`], all under `FenceError`,
//! each carrying `kind`, `commit`, `ambiguous`, `key` and `message`.

use fence_core::{Commit, Error, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

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
create_exception!(
    _fence,
    ForkedError,
    FenceError,
    "A forked child called an object its parent made: after os.fork() the child holds \
     nothing and makes its own fence objects. Nothing was sent."
);
create_exception!(
    _fence,
    AlreadyHeldError,
    FenceError,
    "This process already holds the node lease asked for (through this Fence or another \
     with the same store and node id): acquiring it again would wait on itself. Nothing was \
     sent."
);

/// `InvalidInputError`: a configuration or argument is invalid (a bad duration among them).
/// Both a `FenceError` and a `ValueError`, so `except ValueError` catches a bad argument as
/// it does for the standard library; made at import (a class of two bases).
static INVALID_INPUT: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn invalid_input_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    INVALID_INPUT
        .get_or_try_init(py, || {
            let bases = PyTuple::new(
                py,
                [py.get_type::<FenceError>(), py.get_type::<PyValueError>()],
            )?;
            let dict = PyDict::new(py);
            dict.set_item("__module__", "fence")?;
            dict.set_item(
                "__doc__",
                "A configuration or argument is invalid (a bad duration among them); also a \
                 ValueError. Nothing was sent.",
            )?;
            let ty = py
                .get_type::<PyType>()
                .call1(("InvalidInputError", bases, dict))?;
            Ok(ty.cast_into::<PyType>()?.unbind())
        })
        .map(|t| t.bind(py))
}

/// The Python exception of `e`, with its attributes set: missing credentials said as the
/// `fence` command says them ([`fence::missing_credentials`]), the message one plain line
/// with its causes ([`fence::describe`]), escaped as the `fence` command escapes what it
/// prints ([`fence::message::escape`]): it carries text from the store and its servers (node
/// names, error bodies), and a traceback prints it raw to a terminal.
pub(crate) fn to_py(e: Error) -> PyErr {
    let e = fence::missing_credentials(&e).unwrap_or(e);
    Python::attach(|py| {
        let message = fence::message::escape(&fence::describe(&e)).into_owned();
        let ty = match e.kind() {
            ErrorKind::InvalidKey => py.get_type::<InvalidKeyError>(),
            ErrorKind::InvalidInput => match invalid_input_type(py) {
                Ok(ty) => ty.clone(),
                Err(err) => return err,
            },
            ErrorKind::NotFound => py.get_type::<NotFoundError>(),
            ErrorKind::PermissionDenied => py.get_type::<PermissionDeniedError>(),
            ErrorKind::Unavailable => py.get_type::<UnavailableError>(),
            ErrorKind::Conflict => py.get_type::<ConflictError>(),
            ErrorKind::Timeout => py.get_type::<StoreTimeoutError>(),
            ErrorKind::Corrupt => py.get_type::<CorruptError>(),
            ErrorKind::Unsupported => py.get_type::<UnsupportedError>(),
            ErrorKind::Busy => py.get_type::<BusyError>(),
            ErrorKind::Fenced => py.get_type::<FencedError>(),
            _ => py.get_type::<FenceError>(),
        };
        let commit = match e.commit() {
            Commit::NotCommitted => "not_committed",
            Commit::Ambiguous => "ambiguous",
        };
        let key = e.key().map(|k| k.as_str().to_owned());
        raise(py, &ty, kind_name(e.kind()), commit, message, key)
    })
}

/// An exception of class `ty` with fence's attributes set.
fn raise(
    py: Python<'_>,
    ty: &Bound<'_, PyType>,
    kind: &str,
    commit: &str,
    message: String,
    key: Option<String>,
) -> PyErr {
    let err = PyErr::from_type(ty.clone(), (message.clone(),));
    let value = err.value(py);
    let _ = value.setattr("kind", kind);
    let _ = value.setattr("commit", commit);
    let _ = value.setattr("message", message);
    let _ = value.setattr("ambiguous", commit == "ambiguous");
    let _ = value.setattr("key", key);
    err
}

/// `ForkedError` (kind `"forked"`, not committed).
pub(crate) fn forked(message: String) -> PyErr {
    Python::attach(|py| {
        raise(
            py,
            &py.get_type::<ForkedError>(),
            "forked",
            "not_committed",
            message,
            None,
        )
    })
}

/// `AlreadyHeldError` (kind `"already_held"`, not committed).
pub(crate) fn already_held(message: String) -> PyErr {
    Python::attach(|py| {
        let message = fence::message::escape(&message).into_owned();
        raise(
            py,
            &py.get_type::<AlreadyHeldError>(),
            "already_held",
            "not_committed",
            message,
            None,
        )
    })
}

/// `InvalidInputError` (kind `"invalid_input"`, not committed): a bad argument.
pub(crate) fn invalid_input(message: impl Into<String>) -> PyErr {
    to_py(Error::new(ErrorKind::InvalidInput, message).not_committed())
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
    m.add("InvalidInputError", invalid_input_type(py)?)?;
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
    m.add("ForkedError", py.get_type::<ForkedError>())?;
    m.add("AlreadyHeldError", py.get_type::<AlreadyHeldError>())?;
    Ok(())
}
