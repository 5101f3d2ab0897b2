//! Bindings for `crate::dispatch` (placeholder: filled in by its issue).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
