//! The one Python -> [`RequestId`] parser, used by every API that takes a
//! request id (local schedulers, dispatchers, the vLLM queues' `request_id`
//! attribute). The accepted inputs are the contract in
//! [`crate::request_id`]: `str` (lone surrogates included), `int` and
//! `__index__` integers (numpy) within 64 bits; `bool` and everything else
//! are a `TypeError`, an out-of-range integer a `ValueError`, both naming
//! `request_id`. `tests/test_request_ids.py` checks every API agrees.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyString};

use super::args::{shown, type_name};
use crate::request_id::RequestId;

fn not_an_id(v: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!(
        "request_id must be an int or a str, got {}",
        type_name(v)
    ))
}

fn int_id(v: &Bound<'_, PyAny>, int: &Bound<'_, PyAny>) -> PyResult<RequestId> {
    int.extract::<i64>().map(RequestId::Int).map_err(|_| {
        PyValueError::new_err(format!(
            "request_id = {} is out of range: integers must fit in 64 bits",
            shown(v)
        ))
    })
}

/// `numpy.bool` (`np.True_`): not a Python `bool`, but numpy < 2.3 (the
/// numpy of CPython 3.10) gives it an `__index__`, so it must be refused by
/// type before the `__index__` path, as `bool` is.
fn is_numpy_bool(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = v.py();
    let t = v.get_type();
    let module = t.getattr(intern!(py, "__module__"))?;
    if !module
        .downcast::<PyString>()
        .is_ok_and(|m| m.to_str().is_ok_and(|m| m == "numpy"))
    {
        return Ok(false);
    }
    let name = t.name()?;
    Ok(matches!(name.to_str()?, "bool" | "bool_"))
}

/// Parse a request id (usable as `#[pyo3(from_py_with = request_id::parse)]`).
pub fn parse(v: &Bound<'_, PyAny>) -> PyResult<RequestId> {
    let py = v.py();
    if let Ok(s) = v.downcast::<PyString>() {
        let bytes: Box<[u8]> = match s.to_str() {
            Ok(s) => s.as_bytes().into(),
            // Lone surrogates: their surrogatepass UTF-8 keeps code-point order.
            Err(_) => s
                .call_method1(intern!(py, "encode"), ("utf-8", "surrogatepass"))?
                .downcast_into::<PyBytes>()?
                .as_bytes()
                .into(),
        };
        return Ok(RequestId::Str(bytes));
    }
    if v.is_instance_of::<PyBool>() || is_numpy_bool(v)? {
        return Err(not_an_id(v));
    }
    if v.is_instance_of::<PyInt>() {
        return int_id(v, v);
    }
    // Other integer types (numpy integers) via __index__.
    if v.get_type().hasattr(intern!(py, "__index__"))? {
        let int = v.call_method0(intern!(py, "__index__"))?;
        return int_id(v, &int);
    }
    Err(not_an_id(v))
}

/// A request id back as the Python `int` or `str` it was parsed from.
/// Infallible, so a caller holding admissions it must hand back cannot lose
/// them: decoding our own surrogatepass bytes fails only on `MemoryError`,
/// and then the id comes back with U+FFFD in place of its lone surrogates.
pub fn to_py(py: Python<'_>, id: &RequestId) -> PyObject {
    match id {
        RequestId::Int(i) => PyInt::new(py, *i).into_any().unbind(),
        RequestId::Str(b) => match std::str::from_utf8(b) {
            Ok(s) => PyString::new(py, s).into_any().unbind(),
            Err(_) => PyBytes::new(py, b)
                .call_method1(intern!(py, "decode"), ("utf-8", "surrogatepass"))
                .map(Bound::unbind)
                .unwrap_or_else(|_| {
                    PyString::new(py, &String::from_utf8_lossy(b))
                        .into_any()
                        .unbind()
                }),
        },
    }
}
