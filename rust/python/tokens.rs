//! Token-id input: a Python list/tuple of ints, a numpy integer array, an
//! `array.array` of ints, a `memoryview`, or a bytes-like object holding
//! native-endian `uint32` values. Crossed once per operation; the core only
//! ever sees `&[u32]`.
//!
//! The abi3 (CPython >= 3.10) limited API has no buffer protocol before
//! 3.11, so numpy arrays, `array.array`s and memoryviews are read with one
//! `tobytes()` memcpy (numpy: of their `uint32` view) rather than zero-copy.
//! Other integer item types are decoded from those bytes in Rust with a
//! range check naming the first bad index. `bool` is not a token id: a bool
//! item, a numpy bool array and a `'?'` memoryview are a `TypeError`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyList, PyString, PyTuple, PyType};

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

fn bad_item(it: &Bound<'_, PyAny>, i: usize, field: &str) -> PyErr {
    // Out-of-range Python ints, bools and non-ints are told apart.
    if it.is_instance_of::<PyBool>() {
        return PyTypeError::new_err(format!(
            "{field}[{i}] must be an int token id, got bool ({it})"
        ));
    }
    if it.extract::<num_big::Probe>().is_ok() {
        return PyValueError::new_err(format!(
            "{field}[{i}] = {it} is not a valid token id (must be in 0..=4294967295)"
        ));
    }
    let ty = it
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    PyTypeError::new_err(format!("{field}[{i}] must be an int token id, got {ty}"))
}

/// One item: an int or an int-like (`__index__`, e.g. numpy integers), not
/// a bool. A bool extracts as 0 or 1, so only those values pay the type
/// check.
#[inline]
fn item(it: &Bound<'_, PyAny>, i: usize, field: &str) -> PyResult<u32> {
    match it.extract::<i64>() {
        Ok(0 | 1) if it.is_instance_of::<PyBool>() => Err(bad_item(it, i, field)),
        Ok(v) => check_id(v, i, field),
        Err(_) => Err(bad_item(it, i, field)),
    }
}

fn from_iter<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    field: &str,
) -> PyResult<Vec<u32>> {
    let mut out = Vec::with_capacity(items.size_hint().0);
    for (i, it) in items.enumerate() {
        out.push(item(&it, i, field)?);
    }
    Ok(out)
}

/// A tuple's items are read as borrowed references (no refcount traffic per
/// item): a tuple cannot change while we hold it, even if an item's
/// `__index__` runs Python code.
fn from_tuple(t: &Bound<'_, PyTuple>, field: &str) -> PyResult<Vec<u32>> {
    let mut out = Vec::with_capacity(t.len());
    for (i, it) in t.iter_borrowed().enumerate() {
        out.push(item(&it, i, field)?);
    }
    Ok(out)
}

/// A list is first copied to a tuple (one C-level pass), then read like a
/// tuple: cheaper than fetching each item through the list API with its
/// reference count, and immune to the list being mutated by an item's
/// `__index__` while we read it.
fn from_list(l: &Bound<'_, PyList>, field: &str) -> PyResult<Vec<u32>> {
    from_tuple(&l.to_tuple(), field)
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
        return from_list(l, field);
    }
    if let Ok(t) = obj.downcast::<PyTuple>() {
        return from_tuple(t, field);
    }
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return from_ne_bytes(b.as_bytes(), field);
    }
    if let Ok(b) = obj.downcast::<PyByteArray>() {
        return from_ne_bytes(&b.to_vec(), field);
    }
    let py = obj.py();
    if obj.is_instance(MEMORYVIEW.import(py, "builtins", "memoryview")?)? {
        return from_memoryview(obj, field);
    }
    if obj.is_instance(ARRAY.import(py, "array", "array")?)? {
        return from_array(obj, field);
    }
    if obj.hasattr("dtype")? && obj.hasattr("tobytes")? {
        return from_numpy(obj, field);
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a sequence of int token ids, got str"
        )));
    }
    match obj.try_iter() {
        Ok(it) => from_iter(it.collect::<PyResult<Vec<_>>>()?.into_iter(), field),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{field} must be a list of ints, a numpy integer array, an array.array, a memoryview or a uint32 buffer, got {}",
            obj.get_type().name()?
        ))),
    }
}

static MEMORYVIEW: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static ARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// Byte order of buffer items.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Native,
    Little,
    Big,
}

/// Decode `itemsize`-byte integers (signed or not, in `order`) from `bytes`
/// into token ids, with a range check naming the first bad index.
fn decode_ints(
    bytes: &[u8],
    itemsize: usize,
    signed: bool,
    order: Order,
    field: &str,
) -> PyResult<Vec<u32>> {
    if !matches!(itemsize, 1 | 2 | 4 | 8) || bytes.len() % itemsize != 0 {
        return Err(PyTypeError::new_err(format!(
            "{field}: unsupported integer item size {itemsize}"
        )));
    }
    let big = match order {
        Order::Native => cfg!(target_endian = "big"),
        Order::Little => false,
        Order::Big => true,
    };
    bytes
        .chunks_exact(itemsize)
        .enumerate()
        .map(|(i, c)| {
            let mut b = [0u8; 8];
            let u = if big {
                b[8 - itemsize..].copy_from_slice(c);
                u64::from_be_bytes(b)
            } else {
                b[..itemsize].copy_from_slice(c);
                u64::from_le_bytes(b)
            };
            let v: i128 = if signed {
                // sign-extend the item's top bit
                let shift = 64 - 8 * itemsize as u32;
                (((u << shift) as i64) >> shift) as i128
            } else {
                u as i128
            };
            u32::try_from(v).map_err(|_| {
                PyValueError::new_err(format!(
                    "{field}[{i}] = {v} is not a valid token id (must be in 0..=4294967295)"
                ))
            })
        })
        .collect()
}

fn tobytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let b = obj.call_method0("tobytes")?;
    Ok(b.downcast::<PyBytes>()?.as_bytes().to_vec())
}

/// A `memoryview`: struct-module format `[@=<>!]?X`. Raw bytes (`B`, `b`,
/// `c`) are read as native uint32 like `bytes`; other integer formats are
/// decoded item by item (native `I`/`L` of size 4: a plain copy); anything
/// else is a `TypeError`.
fn from_memoryview(mv: &Bound<'_, PyAny>, field: &str) -> PyResult<Vec<u32>> {
    let format: String = mv.getattr("format")?.extract()?;
    let itemsize: usize = mv.getattr("itemsize")?.extract()?;
    let ndim: usize = mv.getattr("ndim")?.extract()?;
    let (order, code) = match format.as_bytes() {
        [b'@' | b'=', c] | [c] => (Order::Native, *c),
        [b'<', c] => (Order::Little, *c),
        [b'>' | b'!', c] => (Order::Big, *c),
        _ => (Order::Native, 0),
    };
    let signed = match code {
        b'B' | b'b' | b'c' => None,
        b'h' | b'i' | b'l' | b'q' | b'n' => Some(true),
        b'H' | b'I' | b'L' | b'Q' | b'N' => Some(false),
        _ => {
            let what = if code == b'?' {
                " (bool is not a token id)"
            } else {
                ""
            };
            return Err(PyTypeError::new_err(format!(
                "{field}: a memoryview of token ids must have an integer format, got {format:?}{what}"
            )));
        }
    };
    if ndim != 1 {
        return Err(PyValueError::new_err(format!(
            "{field} must be a 1-D memoryview of token ids, got {ndim}-D"
        )));
    }
    let bytes = tobytes(mv)?;
    match signed {
        None => from_ne_bytes(&bytes, field),
        Some(false) if itemsize == 4 && order == Order::Native => from_ne_bytes(&bytes, field),
        Some(signed) => decode_ints(&bytes, itemsize, signed, order, field),
    }
}

/// An `array.array`: typecode `I`/`L` of size 4 is one copy; other integer
/// typecodes are decoded with range checks; `f`, `d`, `u`, `w`: `TypeError`.
fn from_array(arr: &Bound<'_, PyAny>, field: &str) -> PyResult<Vec<u32>> {
    let code: String = arr.getattr("typecode")?.extract()?;
    let itemsize: usize = arr.getattr("itemsize")?.extract()?;
    let signed = match code.as_str() {
        "b" | "h" | "i" | "l" | "q" => true,
        "B" | "H" | "I" | "L" | "Q" => false,
        _ => {
            return Err(PyTypeError::new_err(format!(
                "{field}: an array.array of token ids must have an integer typecode, got {code:?}"
            )))
        }
    };
    let bytes = tobytes(arr)?;
    if !signed && itemsize == 4 {
        from_ne_bytes(&bytes, field)
    } else {
        decode_ints(&bytes, itemsize, signed, Order::Native, field)
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
    if kind == "b" {
        return Err(PyTypeError::new_err(format!(
            "{field} must have an integer dtype, got bool (a bool is not a token id)"
        )));
    }
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
