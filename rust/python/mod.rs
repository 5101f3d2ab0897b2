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
