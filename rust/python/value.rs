//! Python objects <-> [`Value`], the core's JSON / YAML data model: in for
//! the documents the core validates (DRR policy configs, saved state), out
//! for the documents it writes (`state_dict()`). The binding converts; the
//! core reads and validates (`crate::value`).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};

use crate::value::Value;

/// Nesting deeper than this is not a document we read (and guards cycles).
const MAX_DEPTH: usize = 32;

/// Convert a parsed YAML/JSON object (dicts, lists, str, int, float, bool,
/// None) into the core's [`Value`]; `what` names the document at its root in
/// errors ("the policy config", "the state"). Other objects become
/// `Value::Other`, which the core rejects naming the field; only a non-str
/// mapping key or a document nested deeper than 32 levels fail here (naming
/// the path).
pub fn to_value(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    convert(v, what, "", 0)
}

fn convert(v: &Bound<'_, PyAny>, what: &str, path: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        let doc = what.strip_prefix("the ").unwrap_or(what);
        return Err(PyValueError::new_err(format!(
            "{doc} is nested deeper than {MAX_DEPTH} levels at {path}"
        )));
    }
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.downcast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(match v.extract::<i128>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(format!(
                "an integer of {} bits",
                v.call_method0("bit_length")?
            )),
        });
    }
    if let Ok(f) = v.downcast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return Ok(match s.to_str() {
            Ok(s) => Value::Str(s.to_owned()),
            Err(_) => Value::Other("str that is not valid UTF-8 (lone surrogate)".into()),
        });
    }
    let item =
        |x: &Bound<'_, PyAny>, i: usize| convert(x, what, &format!("{path}[{i}]"), depth + 1);
    let seq: Option<Vec<Bound<'_, PyAny>>> = if let Ok(l) = v.downcast::<PyList>() {
        Some(l.iter().collect())
    } else if let Ok(t) = v.downcast::<PyTuple>() {
        Some(t.iter().collect())
    } else {
        None
    };
    if let Some(seq) = seq {
        return seq
            .iter()
            .enumerate()
            .map(|(i, x)| item(x, i))
            .collect::<PyResult<_>>()
            .map(Value::List);
    }
    let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = if let Ok(d) = v.downcast::<PyDict>() {
        d.iter().collect()
    } else if let Ok(m) = v.downcast::<PyMapping>() {
        m.items()?
            .iter()
            .map(|kv| kv.extract())
            .collect::<PyResult<_>>()?
    } else {
        return Ok(Value::Other(v.get_type().name()?.to_string()));
    };
    let mut out = Vec::with_capacity(pairs.len());
    for (k, x) in pairs {
        let key = match k.downcast::<PyString>().map(|s| s.to_str()) {
            Ok(Ok(s)) => s.to_owned(),
            _ => {
                let at = if path.is_empty() { what } else { path };
                return Err(PyTypeError::new_err(format!(
                    "{at}: mapping keys must be strings, got {}",
                    k.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                )));
            }
        };
        let sub = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let xv = convert(&x, what, &sub, depth + 1)?;
        out.push((key, xv));
    }
    Ok(Value::Map(out))
}

/// A [`Value`] as plain Python data (dict, list, str, int, float, bool,
/// None), what `json.dumps` takes. `Other` never comes out of the core.
pub fn from_value(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::BigInt(s) | Value::Other(s) => PyString::new(py, s).into_any().unbind(),
        Value::Float(f) => PyFloat::new(py, *f).into_any().unbind(),
        Value::Str(s) => PyString::new(py, s).into_any().unbind(),
        Value::List(items) => {
            let out = PyList::empty(py);
            for x in items {
                out.append(from_value(py, x)?)?;
            }
            out.into_any().unbind()
        }
        Value::Map(pairs) => {
            let out = PyDict::new(py);
            for (k, x) in pairs {
                out.set_item(k, from_value(py, x)?)?;
            }
            out.into_any().unbind()
        }
    })
}
