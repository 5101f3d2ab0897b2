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
pub mod request_queues;
pub mod sched;
pub mod tokens;
pub mod value;
pub mod wfq;

create_exception!(
    _core,
    QueueFull,
    PyRuntimeError,
    "A push would exceed a per-class queue limit; nothing was enqueued."
);

/// Concurrent and re-entrant use, in one place. Every call on a fairq
/// object borrows it for the call's duration, under the GIL, so calls from
/// several threads are serialized and each is atomic. Most objects run no
/// Python code while borrowed (the vLLM queues read request attributes, the
/// dual-phase queue hashes request ids, before or between borrows), so one
/// call never observes another and code they run may use them freely. Two
/// run user code mid-operation: `DRRQueue.pop(dispatchable=...)` (the
/// predicate) and `WFQQueue` (a flow key's `__hash__`/`__eq__`). A call on
/// such an object made meanwhile, from that code (re-entrant use) or from
/// another thread (the code released the GIL), finds it busy: it gets this
/// error, naming the object and both causes, and changes nothing (pyo3's own
/// message would be a bare "Already borrowed").
pub fn busy(object: &str) -> PyErr {
    PyRuntimeError::new_err(format!(
        "{object} is busy: one of its calls is running Python code (a callback, a \
         __hash__); calling it from that code (re-entrant use) or from another thread \
         meanwhile (concurrent use) is refused and changed nothing; serialize threads \
         that share it with a lock"
    ))
}

/// Borrow `slf` for a read, or [`busy`].
pub fn lock<'py, T: pyo3::PyClass>(slf: &Bound<'py, T>, object: &str) -> PyResult<PyRef<'py, T>> {
    slf.try_borrow().map_err(|_| busy(object))
}

/// Borrow `slf` for a change, or [`busy`].
pub fn lock_mut<'py, T: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::False>>(
    slf: &Bound<'py, T>,
    object: &str,
) -> PyResult<PyRefMut<'py, T>> {
    slf.try_borrow_mut().map_err(|_| busy(object))
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
    request_queues::register(m)?;
    drr::register(m)?;
    wfq::register(m)?;
    dualphase::register(m)?;
    radix::register(m)?;
    sched::register(m)?;
    dispatch::register(m)?;
    Ok(())
}
