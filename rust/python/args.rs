//! Argument conversions that name the field on every failure.
//!
//! pyo3's own `i64` / `f64` extraction raises `OverflowError` ("Python int
//! too large to convert to C long", "int too large to convert to float") for
//! huge ints without saying which argument was wrong. These helpers turn that
//! into a `ValueError` naming the field and the value, and a wrong type into
//! a `TypeError` naming the field; a plain `ValueError` from `__float__`
//! (numpy < 2.3 rejecting `np.array(["a"])`) gets the field named, with the
//! original as its cause; any other exception (one raised by a user's
//! `__index__` / `__float__`) propagates unchanged. Use them through
//! `#[pyo3(from_py_with = ...)]` with the small named extractors below, so
//! signatures keep their plain Rust types and defaults.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};

pub(crate) fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// `str(v)`, shortened when long (a 2**2000 would fill a screen).
pub(crate) fn shown(v: &Bound<'_, PyAny>) -> String {
    let s = v.to_string();
    let n = s.chars().count();
    if n <= 40 {
        s
    } else {
        format!("{}... ({n} digits)", s.chars().take(20).collect::<String>())
    }
}

/// A count or an index: an int already extracted (see [`int_arg`]) that
/// must be `>= 0`; otherwise a `ValueError` naming the field. The one
/// non-negative check of the bindings.
pub fn non_negative(field: &str, v: i64) -> PyResult<usize> {
    usize::try_from(v)
        .map_err(|_| PyValueError::new_err(format!("{field} must be an int >= 0, got {v}")))
}

/// `v` as an `i64`; out of range: `ValueError`, not an int or a `bool`
/// (Python's or numpy's: `placement_slack=True` is a mistake, not a count of
/// 1; as [`float_arg`]): `TypeError`.
pub fn int_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<i64> {
    if is_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{field} must be an int, got bool"
        )));
    }
    v.extract::<i64>().map_err(|e| {
        let py = v.py();
        if e.is_instance_of::<PyOverflowError>(py) {
            PyValueError::new_err(format!(
                "{field} = {} is out of range (must fit in a signed 64-bit integer)",
                shown(v)
            ))
        } else if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!("{field} must be an int, got {}", type_name(v)))
        } else {
            e
        }
    })
}

/// `v` as an `f64`; an int too large for a float, or a plain `ValueError`
/// from its `__float__`: `ValueError` naming the field; not a number, or a
/// `bool` (Python's or numpy's: `weight=True` is a mistake, not a weight of
/// 1): `TypeError`. (NaN and infinities pass; the core validates values.)
pub fn float_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<f64> {
    if is_bool(v) {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a number, got bool"
        )));
    }
    v.extract::<f64>().map_err(|e| {
        let py = v.py();
        if e.is_instance_of::<PyOverflowError>(py) {
            PyValueError::new_err(format!(
                "{field} must be a finite number, got an int too large for a float: {}",
                shown(v)
            ))
        } else if e.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err(format!("{field} must be a number, got {}", type_name(v)))
        } else if e.get_type(py).is(py.get_type::<PyValueError>()) {
            // A `__float__` that rejects its value with a plain ValueError
            // (numpy < 2.3 for `np.array(["a"])`: "could not convert string
            // to float") names no field; say which one, keep it as the cause.
            let named = PyValueError::new_err(format!("{field} must be a number: {e}"));
            named.set_cause(py, Some(e));
            named
        } else {
            e
        }
    })
}

/// A Python `bool` or a numpy bool (`numpy.bool_`, named `bool` in numpy 2),
/// which `f64` extraction would read as 0 or 1.
fn is_bool(v: &Bound<'_, PyAny>) -> bool {
    v.is_instance_of::<PyBool>() || matches!(type_name(v).as_str(), "bool_" | "bool")
}

/// `v` as a `String`; not a str: `TypeError`, a str that is not valid
/// Unicode (lone surrogates): `ValueError`; both name `field` (pyo3's `&str`
/// extraction raises a bare `UnicodeEncodeError` for the latter).
pub fn str_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    let s = v.downcast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!("{field} must be a str, got {}", type_name(v)))
    })?;
    s.to_str().map(str::to_owned).map_err(|_| {
        PyValueError::new_err(format!(
            "{field} must be a valid str, got one with lone surrogates"
        ))
    })
}

/// Named `i64` / `f64` / `String` extractors for `#[pyo3(from_py_with = ...)]`.
macro_rules! named {
    ($($name:ident: $f:ident($field:literal) -> $t:ty;)*) => {$(
        pub fn $name(v: &Bound<'_, PyAny>) -> PyResult<$t> {
            $f($field, v)
        }
    )*};
}

named! {
    num_workers: int_arg("num_workers") -> i64;
    output_tokens: int_arg("output_tokens") -> i64;
    worker: int_arg("worker") -> i64;
    placement_slack: int_arg("placement_slack") -> i64;
    name: str_arg("name") -> String;
    kept: int_arg("kept") -> i64;
    worker_quantum: float_arg("worker_quantum") -> f64;
    w_e: float_arg("w_e") -> f64;
    w_q: float_arg("w_q") -> f64;
    abs_threshold: float_arg("abs_threshold") -> f64;
    rel_threshold: float_arg("rel_threshold") -> f64;
    match_threshold: float_arg("match_threshold") -> f64;
    spread_by_credit: bool_arg("spread_by_credit") -> bool;
    page_size: int_arg("page_size") -> i64;
    n_tokens: int_arg("n_tokens") -> i64;
    keep: int_arg("keep") -> i64;
    output_budget: int_arg("output_budget") -> i64;
    available_blocks: int_arg("available_blocks") -> i64;
    min_think_reservation: int_arg("min_think_reservation") -> i64;
    think_batch_multiplier: float_arg("think_batch_multiplier") -> f64;
    strict_priority: int_arg("strict_priority") -> i64;
    priority_jump: float_arg("priority_jump") -> f64;
    tokens: float_arg("tokens") -> f64;
    weight: float_arg("weight") -> f64;
    arrival: float_arg("arrival") -> f64;
    remaining: float_arg("remaining") -> f64;
    client: str_arg("client") -> String;
    class_name: str_arg("class_name") -> String;
    phase: str_arg("phase") -> String;
    token_budget: int_arg("token_budget") -> i64;
    extend_len: int_arg("extend_len") -> i64;
    w: float_arg("w") -> f64;
    w_in: float_arg("w_in") -> f64;
    w_out: float_arg("w_out") -> f64;
}

/// A quantum: a number (see [`float_arg`]) or the string `"auto"` (`None`:
/// the automatic quantum, `crate::quantum`).
pub fn quantum_or_auto(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if let Ok(s) = v.extract::<String>() {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(None);
        }
        return Err(PyValueError::new_err(format!(
            "{field} must be a number or \"auto\", got {}",
            shown(v)
        )));
    }
    float_arg(field, v).map(Some)
}

/// DLPM's `quantum`: a number or `"auto"`.
pub fn quantum(v: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    quantum_or_auto("quantum", v)
}

/// `quantum_scale`: `None` or a number.
pub fn quantum_scale(v: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if v.is_none() {
        Ok(None)
    } else {
        float_arg("quantum_scale", v).map(Some)
    }
}

/// `strict_credit`: `None` (DLPM's default: on with `quantum="auto"`) or a
/// switch (see [`bool_arg`]).
pub fn strict_credit(v: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    if v.is_none() {
        Ok(None)
    } else {
        bool_arg("strict_credit", v).map(Some)
    }
}

/// A switch: a bool, or 0 / 1 (the engines pass their options as numbers);
/// otherwise a `ValueError` / `TypeError` naming the field.
pub fn bool_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    if is_bool(v) {
        return v.is_truthy();
    }
    match v.extract::<f64>() {
        Ok(x) if x == 0.0 || x == 1.0 => Ok(x == 1.0),
        Ok(_) => Err(PyValueError::new_err(format!(
            "{field} must be a bool (or 0 / 1), got {}",
            shown(v)
        ))),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{field} must be a bool, got {}",
            type_name(v)
        ))),
    }
}

/// `capacity`: `None` or an int (see [`int_arg`]).
pub fn capacity(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        Ok(None)
    } else {
        int_arg("capacity", v).map(Some)
    }
}

/// `max_requests`: `None` or an int (see [`int_arg`]).
pub fn max_requests(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        Ok(None)
    } else {
        int_arg("max_requests", v).map(Some)
    }
}

/// `oversize_budget`: `None` or an int (see [`int_arg`]).
pub fn oversize_budget(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        Ok(None)
    } else {
        int_arg("oversize_budget", v).map(Some)
    }
}

/// `max_prompt_tokens`: `None` or an int (see [`int_arg`]).
pub fn max_prompt_tokens(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        Ok(None)
    } else {
        int_arg("max_prompt_tokens", v).map(Some)
    }
}

/// `fcfs_above`: `None` or an int (see [`int_arg`]).
pub fn fcfs_above(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        Ok(None)
    } else {
        int_arg("fcfs_above", v).map(Some)
    }
}

/// `arrival`: `None` or a number (see [`float_arg`]).
pub fn arrival_opt(v: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if v.is_none() {
        Ok(None)
    } else {
        float_arg("arrival", v).map(Some)
    }
}

/// `phase`: `None` or a str (see [`str_arg`]).
pub fn phase_opt(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if v.is_none() {
        Ok(None)
    } else {
        str_arg("phase", v).map(Some)
    }
}

/// `tokens`: `None` or a number (see [`float_arg`]).
pub fn tokens_opt(v: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if v.is_none() {
        Ok(None)
    } else {
        float_arg("tokens", v).map(Some)
    }
}
