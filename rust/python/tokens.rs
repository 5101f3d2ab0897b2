//! Token-id input: a Python list/tuple of ints, a numpy integer array, or a
//! bytes-like object holding native-endian `uint32` values. Crossed once per
//! operation; the core only ever sees `&[u32]`.
//!
//! The abi3 (CPython >= 3.10) limited API has no buffer protocol before
//! 3.11, so numpy arrays are read with one `tobytes()` memcpy of their
//! `uint32` view rather than zero-copy.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyTuple};

fn from_ne_bytes(bytes: &[u8], field: &str) -> PyResult<Vec<u32>> {
    if bytes.len() % 4 != 0 {
        return Err(PyValueError::new_err(format!(
            "{field}: a bytes-like token buffer must hold uint32 values (length divisible by 4), got {} bytes",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn check_id(v: i64, i: usize, field: &str) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| {
        PyValueError::new_err(format!(
            "{field}[{i}] = {v} is not a valid token id (must be in 0..=4294967295)"
        ))
    })
}

fn from_iter<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    field: &str,
) -> PyResult<Vec<u32>> {
    let mut out = Vec::with_capacity(items.size_hint().0);
    for (i, it) in items.enumerate() {
        let v: i64 = match it.extract::<i64>() {
            Ok(v) => v,
            Err(_) => {
                // Out-of-range Python ints and non-ints are told apart.
                if it.extract::<num_big::Probe>().is_ok() {
                    return Err(PyValueError::new_err(format!(
                        "{field}[{i}] = {it} is not a valid token id (must be in 0..=4294967295)"
                    )));
                }
                return Err(PyTypeError::new_err(format!(
                    "{field}[{i}] must be an int token id, got {}",
                    it.get_type().name()?
                )));
            }
        };
        out.push(check_id(v, i, field)?);
    }
    Ok(out)
}

mod num_big {
    use pyo3::prelude::*;
    use pyo3::types::PyInt;
    /// Extracts only if the object is a Python int (of any size).
    pub struct Probe;
    impl<'py> FromPyObject<'py> for Probe {
        fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
            ob.downcast::<PyInt>()?;
            Ok(Probe)
        }
    }
}

/// Convert a Python token sequence to `Vec<u32>`, with errors naming `field`.
pub fn extract_tokens(obj: &Bound<'_, PyAny>, field: &str) -> PyResult<Vec<u32>> {
    if let Ok(l) = obj.downcast::<PyList>() {
        return from_iter(l.iter(), field);
    }
    if let Ok(t) = obj.downcast::<PyTuple>() {
        return from_iter(t.iter(), field);
    }
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return from_ne_bytes(b.as_bytes(), field);
    }
    if let Ok(b) = obj.downcast::<PyByteArray>() {
        return from_ne_bytes(&b.to_vec(), field);
    }
    if obj.hasattr("dtype")? && obj.hasattr("tobytes")? {
        return from_numpy(obj, field);
    }
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a sequence of int token ids, got str"
        )));
    }
    match obj.try_iter() {
        Ok(it) => from_iter(it.collect::<PyResult<Vec<_>>>()?.into_iter(), field),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{field} must be a list of ints, a numpy integer array or a uint32 buffer, got {}",
            obj.get_type().name()?
        ))),
    }
}

fn from_numpy(arr: &Bound<'_, PyAny>, field: &str) -> PyResult<Vec<u32>> {
    let ndim: usize = arr.getattr("ndim")?.extract()?;
    if ndim != 1 {
        return Err(PyValueError::new_err(format!(
            "{field} must be a 1-D array of token ids, got {ndim}-D"
        )));
    }
    let dtype = arr.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    if kind != "i" && kind != "u" {
        return Err(PyTypeError::new_err(format!(
            "{field} must have an integer dtype, got {}",
            dtype.str()?
        )));
    }
    let size: usize = arr.getattr("size")?.extract()?;
    if size == 0 {
        return Ok(Vec::new());
    }
    let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
    let native_u32 =
        kind == "u" && itemsize == 4 && dtype.getattr("isnative")?.extract::<bool>()?;
    let view = if native_u32 {
        arr.clone()
    } else {
        let lo: i128 = arr.call_method0("min")?.extract()?;
        let hi: i128 = arr.call_method0("max")?.extract()?;
        if lo < 0 || hi > u32::MAX as i128 {
            // Find the first offender for a precise message.
            let list = arr.call_method0("tolist")?;
            let l = list.downcast::<PyList>()?;
            for (i, v) in l.iter().enumerate() {
                let v: i128 = v.extract()?;
                if v < 0 || v > u32::MAX as i128 {
                    return Err(PyValueError::new_err(format!(
                        "{field}[{i}] = {v} is not a valid token id (must be in 0..=4294967295)"
                    )));
                }
            }
        }
        arr.call_method1("astype", ("=u4",))?
    };
    let bytes = view.call_method0("tobytes")?;
    from_ne_bytes(bytes.downcast::<PyBytes>()?.as_bytes(), field)
}

/// `_core.as_tokens(x)`: the normalisation every token-taking API uses,
/// exposed for tests and for Python code that wants to validate early.
#[pyfunction]
#[pyo3(signature = (tokens, field = "tokens"))]
fn as_tokens(tokens: &Bound<'_, PyAny>, field: &str) -> PyResult<Vec<u32>> {
    extract_tokens(tokens, field)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(as_tokens, m)?)?;
    Ok(())
}
