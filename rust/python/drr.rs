//! Bindings for `crate::drr`: `_DRRCore`, subclassed by `fairq.drr.DRRQueue`
//! (which adds configuration, classification and the `PolicyClass` API).
//! Items are opaque `Py<PyAny>` payloads; the core never looks at them.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PySet, PyString, PyTuple};

use crate::drr::{ClassSpec, DrrQueue, PushArgs, QueueOrder, Snapshot};
use crate::python::args;

/// Extract a non-negative integer, naming `field` on error.
fn non_negative_int(field: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be an int, got bool {v}"
        )));
    }
    match v.extract::<u64>() {
        Ok(x) => Ok(x),
        Err(_) => match v.extract::<i128>() {
            Ok(x) => Err(PyValueError::new_err(format!(
                "{field} must be an integer >= 0 (at most 2**64-1), got {x}"
            ))),
            Err(_) => Err(PyTypeError::new_err(format!(
                "{field} must be an int, got {}",
                v.get_type().name()?
            ))),
        },
    }
}

/// `(name, quantum, queue_policy, max_queued_requests, max_queued_tokens)`.
type SpecTuple = (String, u64, String, Option<u64>, Option<u64>);

/// Rust core of `fairq.DRRQueue` (use that class; this one has no config layer).
#[pyclass(subclass, module = "fairq._core", name = "_DRRCore")]
pub struct PyDrrCore {
    q: DrrQueue<Py<PyAny>>,
    names: Vec<Py<PyString>>,
    monotonic: Py<PyAny>,
}

impl PyDrrCore {
    fn idx(&self, name: &str) -> PyResult<usize> {
        Ok(self.q.class_index(name)?)
    }

    fn blocked_mask(&self, blocked: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<bool>> {
        let mut mask = vec![false; self.q.num_classes()];
        if let Some(b) = blocked {
            if b.is_none() {
                return Ok(mask);
            }
            if b.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(
                    "blocked must be a set of class names, got a str",
                ));
            }
            for name in b.try_iter()? {
                let name = name?;
                let s: String = name.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "blocked must contain class names (str), got {name}"
                    ))
                })?;
                mask[self.q.class_index(&s).map_err(|_| {
                    pyo3::exceptions::PyKeyError::new_err(format!(
                        "blocked: {s:?} is not a configured class"
                    ))
                })?] = true;
            }
        }
        Ok(mask)
    }

    #[allow(clippy::too_many_arguments)]
    fn push_impl(
        &mut self,
        py: Python<'_>,
        item: Py<PyAny>,
        class_name: &str,
        snapshot: Snapshot,
        strict_priority: i64,
        priority_jump: f64,
        arrival: Option<f64>,
    ) -> PyResult<u64> {
        let idx = self.idx(class_name)?;
        let arrival = match arrival {
            Some(a) => a,
            None => self.monotonic.bind(py).call0()?.extract::<f64>()?,
        };
        Ok(self.q.push(
            idx,
            item,
            PushArgs {
                snapshot,
                strict_priority,
                priority_jump,
                arrival,
            },
        )?)
    }
}

#[pymethods]
impl PyDrrCore {
    /// `specs`: list of `(name, quantum, order, max_queued_requests | None,
    /// max_queued_tokens | None)` tuples, in ring order.
    #[new]
    #[pyo3(signature = (specs, *_args, **_kwargs))]
    fn new(
        py: Python<'_>,
        specs: Vec<SpecTuple>,
        _args: &Bound<'_, PyTuple>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut out = Vec::with_capacity(specs.len());
        for (i, (name, quantum, order, mr, mt)) in specs.into_iter().enumerate() {
            let order = QueueOrder::parse(&format!("policy_classes[{i}].queue_policy"), &order)?;
            let mut s = ClassSpec::new(name, quantum, order);
            s.max_queued_requests = mr;
            s.max_queued_tokens = mt;
            out.push(s);
        }
        let q = DrrQueue::new(out)?;
        let names = (0..q.num_classes())
            .map(|i| PyString::new(py, &q.spec(i).name).unbind())
            .collect();
        let monotonic = py.import("time")?.getattr("monotonic")?.unbind();
        Ok(PyDrrCore {
            q,
            names,
            monotonic,
        })
    }

    /// Enqueue `item` into `class_name` with scheduling cost `cost`
    /// (clamped to >= 1). Returns a ticket for `remove`.
    #[pyo3(signature = (item, class_name, cost, strict_priority=0, priority_jump=0.0, arrival=None))]
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        py: Python<'_>,
        item: Py<PyAny>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
        cost: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::strict_priority)] strict_priority: i64,
        #[pyo3(from_py_with = args::priority_jump)] priority_jump: f64,
        #[pyo3(from_py_with = args::arrival_opt)] arrival: Option<f64>,
    ) -> PyResult<u64> {
        let cost = non_negative_int("cost", cost)?;
        self.push_impl(
            py,
            item,
            &class_name,
            Snapshot::from_cost(cost),
            strict_priority,
            priority_jump,
            arrival,
        )
    }

    /// Enqueue with a full token snapshot (`raw_isl_tokens`, `cached_tokens`).
    #[pyo3(signature = (item, class_name, raw_isl_tokens, cached_tokens, strict_priority=0, priority_jump=0.0, arrival=None))]
    #[allow(clippy::too_many_arguments)]
    fn _push_snapshot(
        &mut self,
        py: Python<'_>,
        item: Py<PyAny>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
        raw_isl_tokens: &Bound<'_, PyAny>,
        cached_tokens: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::strict_priority)] strict_priority: i64,
        #[pyo3(from_py_with = args::priority_jump)] priority_jump: f64,
        #[pyo3(from_py_with = args::arrival_opt)] arrival: Option<f64>,
    ) -> PyResult<u64> {
        let raw = non_negative_int("raw_isl_tokens", raw_isl_tokens)?;
        let cached = non_negative_int("cached_tokens", cached_tokens)?;
        let snap = Snapshot::new(raw, cached)?;
        self.push_impl(
            py,
            item,
            &class_name,
            snap,
            strict_priority,
            priority_jump,
            arrival,
        )
    }

    /// One DRR arbitration. `blocked`: class names that cannot dispatch now.
    /// `dispatchable(class_name, item) -> bool`: called at most once per
    /// class per pop (never for blocked or empty classes); an exception it
    /// raises propagates and leaves the queue unchanged.
    /// Returns `(class_name, item)` or `None`.
    #[pyo3(signature = (blocked=None, dispatchable=None))]
    fn pop(
        &mut self,
        py: Python<'_>,
        blocked: Option<&Bound<'_, PyAny>>,
        dispatchable: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(Py<PyString>, Py<PyAny>)>> {
        let fast_empty = match blocked {
            None => true,
            Some(b) => {
                b.is_none()
                    || (b.is_instance_of::<PyFrozenSet>() || b.is_instance_of::<PySet>())
                        && b.len()? == 0
            }
        };
        let mask = if fast_empty {
            Vec::new()
        } else {
            self.blocked_mask(blocked)?
        };
        let pred = dispatchable.filter(|p| !p.is_none());
        let names = &self.names;
        let r = match pred {
            // No predicate: the core's mask path never touches the heaps of
            // classes it only scans (the head costs sit in its compact array).
            None => Ok(self.q.pop(&mask)),
            Some(p) => self.q.pop_with(|i, head| {
                if mask.get(i).copied().unwrap_or(false) {
                    return Ok(false);
                }
                p.call1((names[i].clone_ref(py), head.item.clone_ref(py)))?
                    .is_truthy()
            }),
        }?;
        Ok(r.map(|(i, e)| (self.names[i].clone_ref(py), e.item)))
    }

    /// Remove a queued request by the ticket `push` returned; returns the item.
    fn remove(&mut self, ticket: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        // Tickets are u64; any other int cannot name a queued request.
        let t = match ticket.extract::<u64>() {
            Ok(t) => t,
            Err(_) if ticket.is_instance_of::<pyo3::types::PyInt>() => {
                return Err(pyo3::exceptions::PyKeyError::new_err(format!(
                    "ticket {ticket} is not queued"
                )))
            }
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "ticket must be an int, got {}",
                    ticket.get_type().name()?
                )))
            }
        };
        Ok(self.q.remove(t)?.1.item)
    }

    /// The class's current credit (earned, unspent).
    fn deficit(
        &self,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<u128> {
        Ok(self.q.deficit(self.idx(&class_name)?))
    }

    /// Number of queued requests in the class.
    fn depth(
        &self,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<usize> {
        Ok(self.q.depth(self.idx(&class_name)?))
    }

    /// The class head (the request arbitration would consider), or None.
    fn head(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<Option<Py<PyAny>>> {
        Ok(self
            .q
            .head(self.idx(&class_name)?)
            .map(|e| e.item.clone_ref(py)))
    }

    /// Scheduling cost of the class head, or None when empty.
    fn head_cost(
        &self,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<Option<u64>> {
        Ok(self.q.head(self.idx(&class_name)?).map(|e| e.snapshot.cost))
    }

    /// Name of the class the next pop starts its scan from.
    #[getter]
    fn cursor(&self, py: Python<'_>) -> Py<PyString> {
        self.names[self.q.cursor()].clone_ref(py)
    }

    /// Class names in ring order.
    #[getter]
    fn class_names(&self) -> Vec<String> {
        (0..self.q.num_classes())
            .map(|i| self.q.spec(i).name.clone())
            .collect()
    }

    fn __len__(&self) -> usize {
        self.q.len()
    }

    fn __bool__(&self) -> bool {
        !self.q.is_empty()
    }

    /// Per-class statistics: `{name: {quantum, queue_policy, depth, deficit,
    /// queued_cost, dispatched, dispatched_cost}}` in ring order.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for i in 0..self.q.num_classes() {
            let s = self.q.stats(i);
            let d = PyDict::new(py);
            d.set_item("quantum", s.quantum)?;
            d.set_item("queue_policy", s.order.as_str())?;
            d.set_item("depth", s.depth)?;
            d.set_item("deficit", s.deficit)?;
            d.set_item("queued_cost", s.queued_cost)?;
            d.set_item("dispatched", s.dispatched)?;
            d.set_item("dispatched_cost", s.dispatched_cost)?;
            out.set_item(s.name, d)?;
        }
        Ok(out)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDrrCore>()?;
    // Readable attributes on fairq.QueueFull (args stay the tuple
    // (message, class_name, limit, current, max)).
    let py = m.py();
    let qf = m.getattr("QueueFull")?;
    let property = py.import("builtins")?.getattr("property")?;
    for (i, name) in ["class_name", "limit", "current", "max"].iter().enumerate() {
        let k = i + 1;
        let code = format!("lambda self: self.args[{k}] if len(self.args) > {k} else None");
        let f = py.eval(&std::ffi::CString::new(code)?, None, None)?;
        qf.setattr(*name, property.call1((f,))?)?;
    }
    Ok(())
}
