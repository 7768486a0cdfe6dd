//! Reprs in Python's own syntax (`owner='worker-1'`, `None`, `True`), made by Python's
//! `repr()` of each field, so they read as the values a user would type.

use pyo3::prelude::*;
use pyo3::BoundObject;

/// `Name(field=repr(value), …)`.
pub(crate) fn repr(name: &str, fields: &[(&str, Bound<'_, PyAny>)]) -> String {
    let shown: Vec<String> = fields
        .iter()
        .map(|(field, value)| {
            let value = value
                .repr()
                .map_or_else(|_| "?".to_owned(), |r| r.to_string());
            format!("{field}={value}")
        })
        .collect();
    format!("{name}({})", shown.join(", "))
}

/// A field value for [`repr`].
pub(crate) fn v<'py, T>(py: Python<'py>, value: T) -> Bound<'py, PyAny>
where
    T: IntoPyObject<'py>,
{
    match value.into_pyobject(py) {
        Ok(o) => o.into_any().into_bound(),
        Err(_) => py.None().into_bound(py),
    }
}
