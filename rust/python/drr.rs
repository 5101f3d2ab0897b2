//! Bindings for `crate::drr`: `_DRRCore`, subclassed by `fairq.drr.DRRQueue`
//! (which reads files and builds the `PolicyClass` objects). The binding
//! converts the parsed configuration into a `crate::drr::Value` once; the
//! core resolves and validates it. Items are opaque `Py<PyAny>` payloads.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple};

use crate::drr::{
    resolve, DrrQueue, LoadSnapshot, MaxBatched, PolicyProfile, PushArgs, Schema, Snapshot, Value,
};
use crate::python::args;
use crate::python::value::{from_value, to_value};

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

fn raw_isl_tokens_arg(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    non_negative_int("raw_isl_tokens", v)
}

fn cached_tokens_arg(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    non_negative_int("cached_tokens", v)
}

/// `policy_family`: None or a str, naming the field on error.
fn family_opt(v: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if v.is_none() {
        Ok(None)
    } else if v.is_instance_of::<PyString>() {
        args::str_arg("policy_family", v).map(Some)
    } else {
        Err(PyTypeError::new_err(format!(
            "policy_family must be a str or None, got {}",
            v.get_type().name()?
        )))
    }
}

/// One non-negative int per worker from any iterable (list, tuple, numpy
/// array), naming the element on error.
fn int_list(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if v.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{field} must be a sequence of ints (one per worker), got a str"
        )));
    }
    if let Ok(l) = v.downcast::<PyList>() {
        // The common case: a list of ints, read without an iterator.
        let mut out = Vec::with_capacity(l.len());
        for (i, x) in l.iter().enumerate() {
            out.push(match x.extract::<u64>() {
                Ok(n) if !x.is_instance_of::<PyBool>() => n,
                _ => non_negative_int(&format!("{field}[{i}]"), &x)?,
            });
        }
        return Ok(out);
    }
    if let Some(out) = from_numpy(field, v)? {
        return Ok(out);
    }
    let it = v.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{field} must be a sequence of ints (one per worker), got {}",
            v.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    it.enumerate()
        .map(|(i, x)| non_negative_int(&format!("{field}[{i}]"), &x?))
        .collect()
}

/// A 1-D numpy integer array read with one `astype` + `tobytes` copy
/// (abi3 has no buffer protocol before 3.11); None for anything else,
/// which takes the element-by-element path (and its error messages).
fn from_numpy(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u64>>> {
    // Not imported yet: `v` cannot be a numpy array (and no import is tried).
    let modules = v.py().import("sys")?.getattr("modules")?;
    let Ok(np) = modules.get_item("numpy") else {
        return Ok(None);
    };
    if !v.is_instance(&np.getattr("ndarray")?)? {
        return Ok(None);
    }
    let kind: String = v.getattr("dtype")?.getattr("kind")?.extract()?;
    let ndim: usize = v.getattr("ndim")?.extract()?;
    if ndim != 1 || (kind != "i" && kind != "u") {
        return Ok(None);
    }
    let signed = kind == "i";
    let bytes = v
        .call_method1("astype", (if signed { "<i8" } else { "<u8" },))?
        .call_method0("tobytes")?;
    let bytes: &[u8] = bytes.downcast::<pyo3::types::PyBytes>()?.as_bytes();
    bytes
        .chunks_exact(8)
        .enumerate()
        .map(|(i, c)| {
            let b: [u8; 8] = c.try_into().expect("chunks of 8");
            if signed {
                let x = i64::from_le_bytes(b);
                u64::try_from(x).map_err(|_| {
                    PyValueError::new_err(format!(
                        "{field}[{i}] must be an integer >= 0 (at most 2**64-1), got {x}"
                    ))
                })
            } else {
                Ok(u64::from_le_bytes(b))
            }
        })
        .collect::<PyResult<Vec<u64>>>()
        .map(Some)
}

/// Rust core of `fairq.DRRQueue` (use that class; it adds file reading and
/// the `PolicyClass` view).
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

    fn arrival(&self, py: Python<'_>, arrival: Option<f64>) -> PyResult<f64> {
        match arrival {
            Some(a) => Ok(a),
            None => self.monotonic.bind(py).call0()?.extract::<f64>(),
        }
    }

    /// What `push` and `push_request` hand the queue; `arrival` None:
    /// `time.monotonic()` now.
    fn push_args(
        &self,
        py: Python<'_>,
        snapshot: Snapshot,
        strict_priority: i64,
        priority_jump: f64,
        arrival: Option<f64>,
    ) -> PyResult<PushArgs> {
        Ok(PushArgs {
            snapshot,
            strict_priority,
            priority_jump,
            arrival: self.arrival(py, arrival)?,
        })
    }
}

#[pymethods]
impl PyDrrCore {
    /// `config`: a parsed policy document (Dynamo's or fairq's schema; see
    /// `crate::drr::config`), or None for the synthetic `default` class.
    /// `model`: which `models:` profile to use. `num_workers`: the eligible
    /// workers the per-worker limits scale with.
    #[new]
    /// `document=True`: `config` is a parsed document even when None (an
    /// empty file), which is then rejected.
    #[pyo3(signature = (config=None, model=None, num_workers=None, *_args, document=false, **_kwargs))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        config: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        num_workers: Option<&Bound<'_, PyAny>>,
        _args: &Bound<'_, PyTuple>,
        document: bool,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let model = match model.filter(|m| !m.is_none()) {
            None => None,
            Some(m) if m.is_instance_of::<PyString>() => Some(args::str_arg("model", m)?),
            Some(m) => {
                return Err(PyTypeError::new_err(format!(
                    "model must be a str or None, got {}",
                    m.get_type().name()?
                )))
            }
        };
        let n = match num_workers.filter(|n| !n.is_none()) {
            None => 1,
            Some(n) => non_negative_int("num_workers", n)?,
        };
        let profile = match config.filter(|c| !c.is_none()) {
            None if model.is_none() && !document => PolicyProfile::synthetic(Schema::Fairq),
            None => resolve(&Value::Null, model.as_deref())?,
            Some(c) => resolve(&to_value(c, "the policy config")?, model.as_deref())?,
        };
        let q = DrrQueue::new(profile, n);
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
    fn push(
        slf: &Bound<'_, Self>,
        item: Py<PyAny>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
        cost: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::strict_priority)] strict_priority: i64,
        #[pyo3(from_py_with = args::priority_jump)] priority_jump: f64,
        #[pyo3(from_py_with = args::arrival_opt)] arrival: Option<f64>,
    ) -> PyResult<u64> {
        let mut this = super::lock_mut(slf, "fairq.DRRQueue")?;
        let snapshot = Snapshot::from_cost(non_negative_int("cost", cost)?);
        let idx = this.idx(&class_name)?;
        let args = this.push_args(slf.py(), snapshot, strict_priority, priority_jump, arrival)?;
        Ok(this.q.push(idx, item, args)?)
    }

    /// Enqueue with a full token snapshot (`raw_isl_tokens`, `cached_tokens`).
    #[pyo3(signature = (item, class_name, raw_isl_tokens, cached_tokens, strict_priority=0, priority_jump=0.0, arrival=None))]
    #[allow(clippy::too_many_arguments)]
    fn _push_snapshot(
        slf: &Bound<'_, Self>,
        item: Py<PyAny>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
        raw_isl_tokens: &Bound<'_, PyAny>,
        cached_tokens: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::strict_priority)] strict_priority: i64,
        #[pyo3(from_py_with = args::priority_jump)] priority_jump: f64,
        #[pyo3(from_py_with = args::arrival_opt)] arrival: Option<f64>,
    ) -> PyResult<u64> {
        let mut this = super::lock_mut(slf, "fairq.DRRQueue")?;
        let raw = non_negative_int("raw_isl_tokens", raw_isl_tokens)?;
        let cached = non_negative_int("cached_tokens", cached_tokens)?;
        let snapshot = Snapshot::new(raw, cached)?;
        let idx = this.idx(&class_name)?;
        let args = this.push_args(slf.py(), snapshot, strict_priority, priority_jump, arrival)?;
        Ok(this.q.push(idx, item, args)?)
    }

    /// Classify by family and exact uncached tokens, snapshot the cost
    /// `max(1, raw_isl_tokens - cached_tokens)` and enqueue. Returns the
    /// ticket; an error (bad value, unknown family in fairq's schema,
    /// `QueueFull`) enqueues nothing.
    #[pyo3(signature = (item, policy_family=None, raw_isl_tokens=0, cached_tokens=0, *, strict_priority=0, priority_jump=0.0, arrival=None))]
    #[allow(clippy::too_many_arguments)]
    fn push_request(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        item: Py<PyAny>,
        #[pyo3(from_py_with = family_opt)] policy_family: Option<String>,
        #[pyo3(from_py_with = raw_isl_tokens_arg)] raw_isl_tokens: u64,
        #[pyo3(from_py_with = cached_tokens_arg)] cached_tokens: u64,
        #[pyo3(from_py_with = args::strict_priority)] strict_priority: i64,
        #[pyo3(from_py_with = args::priority_jump)] priority_jump: f64,
        #[pyo3(from_py_with = args::arrival_opt)] arrival: Option<f64>,
    ) -> PyResult<u64> {
        let mut this = super::lock_mut(slf, "fairq.DRRQueue")?;
        let snapshot = Snapshot::new(raw_isl_tokens, cached_tokens)?;
        let args = this.push_args(py, snapshot, strict_priority, priority_jump, arrival)?;
        let (_, ticket) = this.q.push_request(policy_family.as_deref(), item, args)?;
        Ok(ticket)
    }

    /// The class a request of `policy_family` with exactly `uncached_tokens`
    /// uncached tokens would go to.
    fn classify(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        #[pyo3(from_py_with = family_opt)] policy_family: Option<String>,
        uncached_tokens: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyString>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        let u = non_negative_int("uncached_tokens", uncached_tokens)?;
        let i = this.q.profile().classify(policy_family.as_deref(), u)?;
        Ok(this.names[i].clone_ref(py))
    }

    /// One DRR arbitration. `blocked`: class names that cannot dispatch now.
    /// `dispatchable(class_name, item) -> bool`: called at most once per
    /// class per pop (never for blocked or empty classes); an exception it
    /// raises propagates and leaves the queue unchanged.
    /// `active_prefill_tokens` (one int per eligible worker) with
    /// `max_num_batched_tokens` (an int for all, or one per worker): a
    /// class whose pool is busy by its thresholds is blocked; O(C + R*W).
    /// Returns `(class_name, item)` or `None`.
    #[pyo3(signature = (blocked=None, dispatchable=None, *, active_prefill_tokens=None, max_num_batched_tokens=None))]
    fn pop(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        blocked: Option<&Bound<'_, PyAny>>,
        dispatchable: Option<&Bound<'_, PyAny>>,
        active_prefill_tokens: Option<&Bound<'_, PyAny>>,
        max_num_batched_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(Py<PyString>, Py<PyAny>)>> {
        let mut guard = super::lock_mut(slf, "fairq.DRRQueue")?;
        let this = &mut *guard; // split borrows of its fields
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
            this.blocked_mask(blocked)?
        };
        let pred = dispatchable.filter(|p| !p.is_none());
        let tokens = match active_prefill_tokens.filter(|t| !t.is_none()) {
            Some(t) => Some(int_list("active_prefill_tokens", t)?),
            None => None,
        };
        let max_list;
        let max = match max_num_batched_tokens.filter(|m| !m.is_none()) {
            None => MaxBatched::Unknown,
            Some(m) if m.is_instance_of::<PyInt>() => {
                MaxBatched::Same(non_negative_int("max_num_batched_tokens", m)?)
            }
            Some(m) => {
                max_list = int_list("max_num_batched_tokens", m)?;
                MaxBatched::PerWorker(&max_list)
            }
        };
        if tokens.is_none() && !matches!(max, MaxBatched::Unknown) {
            return Err(PyValueError::new_err(
                "max_num_batched_tokens needs active_prefill_tokens (the load snapshot)",
            ));
        }
        let names = &this.names;
        let r = match (tokens, pred) {
            // No predicate, no load: the core's mask path never touches the
            // heaps of classes it only scans.
            (None, None) => Ok(this.q.pop(&mask)),
            (None, Some(p)) => this.q.pop_with(|i, head| {
                if mask.get(i).copied().unwrap_or(false) {
                    return Ok(false);
                }
                p.call1((names[i].clone_ref(py), head.item.clone_ref(py)))?
                    .is_truthy()
            }),
            (Some(t), p) => {
                let load = LoadSnapshot::new(&t, max)?;
                this.q.pop_with_load(&load, &mask, |i, head| match p {
                    None => Ok(true),
                    Some(p) => p
                        .call1((names[i].clone_ref(py), head.item.clone_ref(py)))?
                        .is_truthy(),
                })
            }
        }?;
        Ok(r.map(|(i, e)| (this.names[i].clone_ref(py), e.item)))
    }

    /// Eligible workers the `*_per_worker` limits scale with (settable).
    #[getter]
    fn get_num_workers(slf: &Bound<'_, Self>) -> PyResult<u64> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this.q.num_workers())
    }

    #[setter]
    fn set_num_workers(slf: &Bound<'_, Self>, v: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let mut this = super::lock_mut(slf, "fairq.DRRQueue")?;
        let v = v.ok_or_else(|| PyTypeError::new_err("num_workers cannot be deleted"))?;
        this.q.set_num_workers(non_negative_int("num_workers", v)?);
        Ok(())
    }

    /// The resolved profile as plain data: `{schema, default_family,
    /// buckets: [(name, min_tokens)], classes: [{field: value}]}`.
    fn _profile<'py>(slf: &Bound<'_, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        let p = this.q.profile();
        let out = PyDict::new(py);
        out.set_item(
            "schema",
            match p.schema {
                Schema::Dynamo => "dynamo",
                Schema::Fairq => "fairq",
            },
        )?;
        out.set_item("default_family", p.default_family.as_deref())?;
        let buckets: Vec<(&str, u64)> = p
            .buckets
            .iter()
            .map(|b| (b.name.as_str(), b.min_tokens))
            .collect();
        out.set_item("buckets", buckets)?;
        let classes = PyList::empty(py);
        for c in &p.classes {
            let d = PyDict::new(py);
            d.set_item("name", &c.name)?;
            d.set_item("quantum", c.quantum)?;
            d.set_item("order", c.order.as_str())?;
            d.set_item("policy_family", c.policy_family.as_deref())?;
            d.set_item("cache_bucket", c.cache_bucket.as_deref())?;
            d.set_item("max_queued_requests", c.limits.max_queued_requests)?;
            d.set_item("max_queued_tokens", c.limits.max_queued_tokens)?;
            d.set_item("prefill_busy_threshold", c.busy.prefill_busy_threshold)?;
            d.set_item(
                "prefill_busy_threshold_frac",
                c.busy.prefill_busy_threshold_frac,
            )?;
            d.set_item("busy_worker_ratio", c.busy.busy_worker_ratio)?;
            d.set_item(
                "request_queue_limit_per_worker",
                c.limits.request_queue_limit_per_worker,
            )?;
            d.set_item(
                "raw_isl_token_queue_limit_per_worker",
                c.limits.raw_isl_token_queue_limit_per_worker,
            )?;
            d.set_item(
                "cached_token_queue_limit_per_worker",
                c.limits.cached_token_queue_limit_per_worker,
            )?;
            classes.append(d)?;
        }
        out.set_item("classes", classes)?;
        Ok(out)
    }

    /// Remove a queued request by the ticket `push` returned; returns the item.
    fn remove(slf: &Bound<'_, Self>, ticket: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let mut this = super::lock_mut(slf, "fairq.DRRQueue")?;
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
        Ok(this.q.remove(t)?.1.item)
    }

    /// The class's current credit (earned, unspent).
    fn deficit(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<u128> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this.q.deficit(this.idx(&class_name)?))
    }

    /// Number of queued requests in the class.
    fn depth(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<usize> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this.q.depth(this.idx(&class_name)?))
    }

    /// The class head (the request arbitration would consider), or None.
    fn head(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<Option<Py<PyAny>>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this
            .q
            .head(this.idx(&class_name)?)
            .map(|e| e.item.clone_ref(py)))
    }

    /// Scheduling cost of the class head, or None when empty.
    fn head_cost(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = args::class_name)] class_name: String,
    ) -> PyResult<Option<u64>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this.q.head(this.idx(&class_name)?).map(|e| e.snapshot.cost))
    }

    /// Name of the class the next pop starts its scan from.
    #[getter]
    fn cursor(slf: &Bound<'_, Self>, py: Python<'_>) -> PyResult<Py<PyString>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this.names[this.q.cursor()].clone_ref(py))
    }

    /// Class names in ring order.
    #[getter]
    fn class_names(slf: &Bound<'_, Self>) -> PyResult<Vec<String>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok((0..this.q.num_classes())
            .map(|i| this.q.spec(i).name.clone())
            .collect())
    }

    /// The arbitration state as plain JSON data: each class's unspent
    /// credit and dispatch counters, the cursor, `num_workers`. Not the
    /// queued requests (push them again after a load) nor the policy (build
    /// the queue from the same file).
    fn state_dict(slf: &Bound<'_, Self>, py: Python<'_>) -> PyResult<PyObject> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        from_value(py, &this.q.state())
    }

    /// Restore a `state_dict()` into this empty queue, built from the same
    /// policy (same classes, order, quanta); then push the queued requests
    /// again in their original order with their original `arrival`.
    /// Validated first (errors name the field); nothing changes on error.
    fn load_state_dict(slf: &Bound<'_, Self>, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut this = super::lock_mut(slf, "fairq.DRRQueue")?;
        Ok(this.q.load_state(&to_value(state, "the state")?)?)
    }

    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(this.q.len())
    }

    fn __bool__(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        Ok(!this.q.is_empty())
    }

    /// Per-class statistics: `{name: {quantum, queue_policy, depth, deficit,
    /// queued_cost, dispatched, dispatched_cost}}` in ring order.
    fn stats<'py>(slf: &Bound<'_, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let this = super::lock(slf, "fairq.DRRQueue")?;
        let out = PyDict::new(py);
        for i in 0..this.q.num_classes() {
            let s = this.q.stats(i);
            let d = PyDict::new(py);
            d.set_item("quantum", s.quantum)?;
            d.set_item("queue_policy", s.order.as_str())?;
            d.set_item("depth", s.depth)?;
            d.set_item("deficit", s.deficit)?;
            d.set_item("queued_cost", s.queued_cost)?;
            d.set_item("queued_raw_isl_tokens", s.queued_raw_isl_tokens)?;
            d.set_item("queued_cached_tokens", s.queued_cached_tokens)?;
            d.set_item("dispatched", s.dispatched)?;
            d.set_item("dispatched_cost", s.dispatched_cost)?;
            out.set_item(s.name, d)?;
        }
        Ok(out)
    }
}

/// Validate one policy class's fields (a dict) with the core's resolver;
/// raises ValueError/TypeError naming the field. Used by `fairq.PolicyClass`.
#[pyfunction]
fn _drr_check_class(fields: &Bound<'_, PyAny>) -> PyResult<()> {
    Ok(crate::drr::check_class(&to_value(
        fields,
        "the policy config",
    )?)?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDrrCore>()?;
    m.add_function(wrap_pyfunction!(_drr_check_class, m)?)?;
    // Readable attributes on fairq.QueueFull (args stay the tuple
    // (message, class_name, limit, current, max)).
    let py = m.py();
    let qf = m.getattr("QueueFull")?;
    let property = py.import("builtins")?.getattr("property")?;
    let fields = [
        ("class_name", "The policy class the push was for."),
        (
            "limit",
            "The limit's field name, e.g. 'request_queue_limit_per_worker'.",
        ),
        (
            "current",
            "The usage before the push (class limits: the usage it would make).",
        ),
        ("max", "The limit (per-worker limits: times num_workers)."),
    ];
    for (i, (name, doc)) in fields.iter().enumerate() {
        let k = i + 1;
        let code = format!("lambda self: self.args[{k}] if len(self.args) > {k} else None");
        let f = py.eval(&std::ffi::CString::new(code)?, None, None)?;
        qf.setattr(*name, property.call1((f, py.None(), py.None(), *doc))?)?;
    }
    // str(e) is the message alone, not the args tuple.
    let to_str = py.eval(
        c"lambda self: str(self.args[0]) if self.args else ''",
        None,
        None,
    )?;
    qf.setattr("__str__", to_str)?;
    Ok(())
}
