//! Bindings for `crate::dualphase`: `fairq._core.DualPhaseQueue`.
//!
//! Request ids are any hashable; this layer interns them to `u64` keys
//! through a dict and stores `(request_id, item)` as the core payload.

use crate::python::value::{from_value, to_value};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::dualphase::{DualPhase, Phase};
use crate::python::args;

type Slots<'py> = Vec<Bound<'py, PyTuple>>;

const DUAL: &str = "fairq.DualPhaseQueue";

/// Two FIFOs of active decode requests, ``output`` drained first.
///
/// See ``fairq.dualphase`` for the full description.
#[pyclass(module = "fairq._core", name = "DualPhaseQueue", subclass)]
pub struct PyDualPhase {
    core: DualPhase<u64, (Py<PyAny>, Py<PyAny>)>,
    keys: Py<PyDict>,
    next_key: u64,
}

impl PyDualPhase {
    /// The id-to-key dict, taken under a short borrow: dict operations hash
    /// `request_id` (Python code), so they run while the queue is not
    /// borrowed; each is atomic, and the core operation that follows runs no
    /// Python code, so every method stays one atomic step for other threads.
    fn keys<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        Ok(super::lock(slf, DUAL)?.keys.bind(slf.py()).clone())
    }

    fn key_of(slf: &Bound<'_, Self>, request_id: &Bound<'_, PyAny>) -> PyResult<u64> {
        match Self::keys(slf)?.get_item(request_id)? {
            Some(k) => k.extract(),
            None => Err(PyKeyError::new_err(request_id.clone().unbind())),
        }
    }

    fn slots<'py>(&self, py: Python<'py>, keys: &[u64]) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        keys.iter()
            .map(|k| {
                let (_, (rid, item)) = self.core.get(k).expect("scheduled key is queued");
                PyTuple::new(py, [rid.bind(py), item.bind(py)])
            })
            .collect()
    }
}

#[pymethods]
impl PyDualPhase {
    #[new]
    #[pyo3(signature = (think_batch_multiplier = 2.5, min_think_reservation = 1))]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = args::think_batch_multiplier)] think_batch_multiplier: f64,
        #[pyo3(from_py_with = args::min_think_reservation)] min_think_reservation: i64,
    ) -> PyResult<Self> {
        let r = args::non_negative("min_think_reservation", min_think_reservation)?;
        Ok(PyDualPhase {
            core: DualPhase::new(think_batch_multiplier, r)?,
            keys: PyDict::new(py).unbind(),
            next_key: 0,
        })
    }

    /// Think slots per output slot of budget (>= 1.0).
    #[getter]
    fn think_batch_multiplier(&self) -> f64 {
        self.core.think_batch_multiplier()
    }

    /// Think slots kept while output is below its budget (0: none).
    #[getter]
    fn min_think_reservation(&self) -> usize {
        self.core.min_think_reservation()
    }

    /// Queue ``request_id`` (any hashable, unique) at the back of ``phase``.
    #[pyo3(
        signature = (request_id, item = None, phase = String::from("think")),
        text_signature = "($self, request_id, item=None, phase='think')"
    )]
    fn add(
        slf: &Bound<'_, Self>,
        request_id: &Bound<'_, PyAny>,
        item: Option<Py<PyAny>>,
        #[pyo3(from_py_with = args::phase)] phase: String,
    ) -> PyResult<()> {
        let py = slf.py();
        let phase = Phase::parse(&phase)?;
        let keys = Self::keys(slf)?;
        // A fresh key, reserved now (one never reused, even if this fails).
        let k = {
            let mut me = super::lock_mut(slf, DUAL)?;
            me.next_key += 1;
            me.next_key - 1
        };
        // One dict operation (one hash of `request_id`): if it raises, nothing
        // changed; a get-then-set pair could fail half way (a `__hash__` that
        // raises on its second call) and leave the core and the dict apart.
        let got: u64 = keys
            .call_method1(intern!(py, "setdefault"), (request_id, k))?
            .extract()?;
        if got != k {
            return Err(PyValueError::new_err(format!(
                "request_id {} is already queued",
                request_id.repr()?
            )));
        }
        let item = item.unwrap_or_else(|| py.None());
        let added = super::lock_mut(slf, DUAL)
            .and_then(|mut me| Ok(me.core.add(k, (request_id.clone().unbind(), item), phase)?));
        if let Err(e) = added {
            keys.del_item(request_id)?;
            return Err(e);
        }
        Ok(())
    }

    /// Remove a request; returns its item. ``KeyError`` if not queued.
    fn remove(slf: &Bound<'_, Self>, request_id: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        // Forget the id first, in one dict operation (KeyError if absent):
        // removing from the core first and then failing to forget the id (a
        // raising `__hash__`) left a stale key behind.
        let py = slf.py();
        let keys = Self::keys(slf)?;
        let k: u64 = keys
            .call_method1(intern!(py, "pop"), (request_id,))?
            .extract()?;
        let removed = super::lock_mut(slf, DUAL).and_then(|mut me| Ok(me.core.remove(&k)?.1 .1));
        if removed.is_err() {
            keys.set_item(request_id, k)?;
        }
        removed
    }

    /// End of think: move the request to the front of ``output`` before the
    /// next ``schedule``. Returns ``False`` if it already was in ``output``.
    fn on_phase_event(slf: &Bound<'_, Self>, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = Self::key_of(slf, request_id)?;
        Ok(super::lock_mut(slf, DUAL)?.core.on_phase_event(&k)?)
    }

    /// ``"think"`` or ``"output"``; ``KeyError`` if not queued.
    fn phase_of(slf: &Bound<'_, Self>, request_id: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        let k = Self::key_of(slf, request_id)?;
        let me = super::lock(slf, DUAL)?;
        match me.core.get(&k) {
            Some((phase, _)) => Ok(phase.as_str()),
            None => Err(PyKeyError::new_err(request_id.clone().unbind())),
        }
    }

    /// One step's batch as ``(output_slots, think_slots)``, each a list of
    /// ``(request_id, item)`` in dispatch order. Scheduled requests move to
    /// the back of their queue.
    fn schedule_phases<'py>(
        &mut self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::output_budget)] output_budget: i64,
        #[pyo3(from_py_with = args::available_blocks)] available_blocks: i64,
    ) -> PyResult<(Slots<'py>, Slots<'py>)> {
        let b = args::non_negative("output_budget", output_budget)?;
        let a = args::non_negative("available_blocks", available_blocks)?;
        let batch = self.core.schedule(b, a);
        Ok((
            self.slots(py, &batch.output)?,
            self.slots(py, &batch.think)?,
        ))
    }

    /// One step's batch: the output slots then the think slots, as a list of
    /// ``(request_id, item)``.
    fn schedule<'py>(
        &mut self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::output_budget)] output_budget: i64,
        #[pyo3(from_py_with = args::available_blocks)] available_blocks: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let (mut out, think) = self.schedule_phases(py, output_budget, available_blocks)?;
        out.extend(think);
        PyList::new(py, out)
    }

    /// Request ids of ``phase`` in queue order.
    #[pyo3(signature = (phase))]
    fn ids<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = args::phase)] phase: String,
    ) -> PyResult<Bound<'py, PyList>> {
        let phase = Phase::parse(&phase)?;
        let v: Vec<_> = self
            .core
            .iter_phase(phase)
            .map(|k| {
                let (_, (rid, _)) = self.core.get(k).expect("queued");
                rid.bind(py)
            })
            .collect();
        PyList::new(py, v)
    }

    /// Queue length of one phase (``None``: both).
    #[pyo3(signature = (phase = None))]
    fn len(
        &self,
        #[pyo3(from_py_with = args::phase_opt)] phase: Option<String>,
    ) -> PyResult<usize> {
        Ok(match phase {
            None => self.core.len(),
            Some(p) => self.core.len_phase(Phase::parse(&p)?),
        })
    }

    /// The metrics as a plain dict (names in ``fairq.dualphase``).
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("queue_depth_output", self.core.len_phase(Phase::Output))?;
        d.set_item("queue_depth_think", self.core.len_phase(Phase::Think))?;
        d.set_item("batch_size_output", m.last_output_batch)?;
        d.set_item("batch_size_think", m.last_think_batch)?;
        d.set_item("scheduled_output_total", m.output_scheduled_total)?;
        d.set_item("scheduled_think_total", m.think_scheduled_total)?;
        d.set_item("budget_force_triggered_total", m.forced_budget_events)?;
        d.set_item("think_wait_longest_rounds", self.core.longest_think_wait())?;
        d.set_item("phase_transitions_total", m.phase_transitions)?;
        d.set_item("schedule_calls_total", m.schedule_calls)?;
        Ok(d)
    }

    /// Options, metrics and each queued request's last-served round (per
    /// phase, in queue order) as plain JSON data; not the request ids.
    fn state_dict(&self, py: Python<'_>) -> PyResult<PyObject> {
        from_value(py, &self.core.state())
    }

    /// Restore a `state_dict()` into this empty queue (options and metrics
    /// replaced); then add each phase's requests again in queue order.
    /// Validated first (errors name the field); nothing changes on error.
    fn load_state_dict(&mut self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(self.core.load_state(&to_value(state, "the state")?)?)
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __bool__(&self) -> bool {
        !self.core.is_empty()
    }

    fn __contains__(slf: &Bound<'_, Self>, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(Self::keys(slf)?.get_item(request_id)?.is_some())
    }

    fn __repr__(&self) -> String {
        format!(
            "DualPhaseQueue(output={}, think={}, think_batch_multiplier={}, min_think_reservation={})",
            self.core.len_phase(Phase::Output),
            self.core.len_phase(Phase::Think),
            self.core.think_batch_multiplier(),
            self.core.min_think_reservation()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDualPhase>()?;
    Ok(())
}
