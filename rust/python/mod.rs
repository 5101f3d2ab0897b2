//! PyO3 binding layer (feature `python`). It only translates: Python
//! arguments to core types, core [`Error`]s to Python exceptions, and Python
//! objects to opaque payloads the core stores. No policy logic lives here.
//!
//! One file per core concept, each exposing `register(m)`:
//! `vllm` (drop-in queues), `drr`, `wfq`, `dualphase`, `radix`, `sched`
//! (FCFS/LPM/VTC/DLPM local schedulers), `dispatch` (D2LPM and baselines);
//! `request_id` (the one request-id parser), `args` and `tokens` (argument
//! conversions) are shared by all.

use pyo3::create_exception;
use pyo3::exceptions::{PyIndexError, PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;

pub mod args;
pub mod dispatch;
pub mod drr;
pub mod dualphase;
pub mod radix;
pub mod request_id;
pub mod sched;
pub mod tokens;
pub mod value;
pub mod vllm;
pub mod wfq;

create_exception!(
    _core,
    QueueFull,
    PyRuntimeError,
    "A push would exceed a per-class queue limit; nothing was enqueued."
);

/// Re-entrancy, in one place. A fairq object is borrowed by the call in
/// progress; when that call runs Python code (a DRR `dispatchable` predicate,
/// a vLLM request's attributes) and that code calls the same object again,
/// pyo3 refuses the inner call with a bare "Already borrowed", before it
/// changes anything. Where the outer call gets that error back from the
/// Python code it ran, this turns it into an error that says what happened
/// (the original is chained as the cause). Nothing is ever half-done: the
/// inner call did nothing and the outer one fails as a whole.
pub fn reentrant(py: Python<'_>, err: PyErr, object: &str, during: &str) -> PyErr {
    if !err.is_instance_of::<PyRuntimeError>(py) {
        return err;
    }
    let msg = err
        .value(py)
        .str()
        .map(|s| s.to_string())
        .unwrap_or_default();
    if !(msg.starts_with("Already") && msg.contains("borrowed")) {
        return err;
    }
    let new = PyRuntimeError::new_err(format!(
        "re-entrant use of {object}: {during} called back into the same object while it was \
         busy; a fairq object cannot be used from inside its own calls (nor from another \
         thread while one of its calls runs Python code: serialize such use with a lock)"
    ));
    new.set_cause(py, Some(err));
    new
}

/// Translate a core error into the Python exception users see.
pub fn to_py(err: Error) -> PyErr {
    match err {
        Error::Value(m) => PyValueError::new_err(m),
        Error::Type(m) => PyTypeError::new_err(m),
        Error::Key(m) => PyKeyError::new_err(m),
        Error::Index(m) => PyIndexError::new_err(m),
        e @ Error::QueueFull { .. } => {
            let msg = e.to_string();
            let Error::QueueFull {
                class_name,
                limit,
                current,
                max,
            } = e
            else {
                unreachable!()
            };
            QueueFull::new_err((msg, class_name, limit.as_str(), current, max))
        }
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> Self {
        to_py(e)
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("QueueFull", m.py().get_type::<QueueFull>())?;
    tokens::register(m)?;
    vllm::register(m)?;
    drr::register(m)?;
    wfq::register(m)?;
    dualphase::register(m)?;
    radix::register(m)?;
    sched::register(m)?;
    dispatch::register(m)?;
    Ok(())
}
