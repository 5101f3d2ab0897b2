//! Bindings for `crate::dispatch`: `fairq.D2LPM` and the baseline
//! dispatchers. One base class (`_core.Dispatcher`, not constructible) holds
//! the core dispatcher and every shared method; each policy is a subclass
//! with its own constructor and policy-specific getters.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::args;
use super::tokens::extract_tokens;
use crate::dispatch::{AffinityConfig, D2lpmConfig, Dispatcher, Policy};
use crate::python::request_id;
use crate::python::value::{from_value, to_value};

fn num_workers(v: i64) -> PyResult<usize> {
    if v < 1 {
        return Err(PyValueError::new_err(format!(
            "num_workers must be >= 1, got {v}"
        )));
    }
    Ok(v as usize)
}

/// Base class of every dispatcher: dispatch, completion and eviction reports.
#[pyclass(subclass, module = "fairq._core", name = "Dispatcher")]
pub struct PyDispatcher {
    inner: Dispatcher,
}

#[pymethods]
impl PyDispatcher {
    /// Choose a worker for a new request, record it in flight there and
    /// return the worker index. A duplicate in-flight id is a ValueError.
    fn dispatch(
        &mut self,
        request_id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::client)] client: String,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        let toks = extract_tokens(tokens, "tokens")?;
        Ok(self.inner.dispatch(id, &client, &toks)?)
    }

    /// Report that an in-flight request finished with `output_tokens`
    /// output tokens; returns its worker. Unknown id: KeyError.
    fn on_finish(
        &mut self,
        request_id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::output_tokens)] output_tokens: i64,
    ) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        let n = args::non_negative("output_tokens", output_tokens)? as u64;
        Ok(self.inner.on_finish(&id, n)?)
    }

    /// Report that `worker` evicted `tokens` from its cache: it no longer
    /// holds `tokens[:kept + 1]` nor anything longer; it still holds
    /// `tokens[:kept]` (default 0: none of it). Returns the number of token
    /// positions the worker no longer holds (0 for dispatchers without a
    /// tree), the same after a state round trip.
    #[pyo3(signature = (worker, tokens, kept = 0))]
    fn on_evict(
        &mut self,
        #[pyo3(from_py_with = args::worker)] worker: i64,
        tokens: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::kept)] kept: i64,
    ) -> PyResult<usize> {
        let w = args::non_negative("worker", worker)?;
        let kept = args::non_negative("kept", kept)?;
        let toks = extract_tokens(tokens, "tokens")?;
        Ok(self.inner.on_evict(w, &toks, kept)?)
    }

    /// The shared view: another router dispatched `client`'s request of
    /// `tokens` to `worker`. The prefix tree records that `worker` holds
    /// `tokens`, D2LPM charges `w_e * input_len` (default `len(tokens)`: give
    /// the prompt's length when `tokens` is only its start) to the client's
    /// deficit there, and the worker's external load grows by one.
    #[pyo3(signature = (client, worker, tokens, input_len = None))]
    fn observe_dispatch(
        &mut self,
        #[pyo3(from_py_with = args::client)] client: String,
        #[pyo3(from_py_with = args::worker)] worker: i64,
        tokens: &Bound<'_, PyAny>,
        input_len: Option<i64>,
    ) -> PyResult<()> {
        let w = args::non_negative("worker", worker)?;
        let n = input_len
            .map(|n| args::non_negative("input_len", n).map(|n| n as u64))
            .transpose()?;
        let toks = extract_tokens(tokens, "tokens")?;
        Ok(self.inner.observe_dispatch(&client, w, &toks, n)?)
    }

    /// The shared view: a request another router dispatched to `worker`
    /// finished after `output_tokens`: D2LPM charges `w_q * output_tokens`,
    /// the worker's external load shrinks by one (never below 0).
    fn observe_finish(
        &mut self,
        #[pyo3(from_py_with = args::client)] client: String,
        #[pyo3(from_py_with = args::worker)] worker: i64,
        #[pyo3(from_py_with = args::output_tokens)] output_tokens: i64,
    ) -> PyResult<()> {
        let w = args::non_negative("worker", worker)?;
        let n = args::non_negative("output_tokens", output_tokens)? as u64;
        Ok(self.inner.observe_finish(&client, w, n)?)
    }

    /// The shared view's requests in flight per worker that other routers
    /// dispatched; a worker is chosen on `queue_sizes + external_load`.
    #[getter]
    fn external_load(&self) -> Vec<u64> {
        self.inner.external_load().to_vec()
    }

    /// Replace the external load with a snapshot, one count (an int >= 0)
    /// per worker; a wrong length is a ValueError and changes nothing.
    #[setter]
    fn set_external_load(&mut self, loads: Vec<i64>) -> PyResult<()> {
        let mut v = Vec::with_capacity(loads.len());
        for x in loads {
            v.push(args::non_negative("external_load", x)? as u64);
        }
        Ok(self.inner.set_external_load(&v)?)
    }

    /// Undo the dispatch of an in-flight request its worker never served
    /// (cancelled, or sent elsewhere): it leaves the table and the queue
    /// size, and D2LPM refunds its dispatch-time charge. The global tree
    /// keeps the prefix on the worker. Returns the worker; unknown id:
    /// KeyError.
    fn withdraw(&mut self, request_id: &Bound<'_, PyAny>) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        Ok(self.inner.withdraw(&id)?)
    }

    /// Worker `worker` is gone (died, scaled down, replaced): removed from
    /// the global tree, every client's D2LPM deficit there reset to 0, its
    /// in-flight requests dropped without a charge. Returns their ids
    /// (sorted); a new worker may then take the slot.
    fn remove_worker(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::worker)] worker: i64,
    ) -> PyResult<Vec<PyObject>> {
        let w = args::non_negative("worker", worker)?;
        let gone = self.inner.remove_worker(w)?;
        Ok(gone.iter().map(|id| request_id::to_py(py, id)).collect())
    }

    /// Worker serving an in-flight request (KeyError if not in flight).
    fn worker_of(&self, request_id: &Bound<'_, PyAny>) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        Ok(self.inner.worker_of(&id)?)
    }

    /// `(length, workers)`: the longest prefix of `tokens` some worker is
    /// believed to hold, and those workers (all of them at length 0).
    fn longest_match(&self, tokens: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<usize>)> {
        let toks = extract_tokens(tokens, "tokens")?;
        Ok(self.inner.longest_match(&toks))
    }

    /// `(length, workers, counts)`: `longest_match(tokens)`, and whether
    /// that match counts as locality by this dispatcher's own rule (D2LPM:
    /// something matched and at least `match_threshold` of the prompt; the
    /// other dispatchers: something matched).
    fn locality(&self, tokens: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<usize>, bool)> {
        let toks = extract_tokens(tokens, "tokens")?;
        Ok(self.inner.locality(&toks))
    }

    /// Length of the prefix of `tokens` that `worker` is believed to hold.
    fn held_len(
        &self,
        #[pyo3(from_py_with = args::worker)] worker: i64,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let w = args::non_negative("worker", worker)?;
        let toks = extract_tokens(tokens, "tokens")?;
        Ok(self.inner.held_len(&toks, w)?)
    }

    /// Number of workers.
    #[getter]
    fn num_workers(&self) -> usize {
        self.inner.num_workers()
    }

    /// `s_w`: requests dispatched to each worker and not yet finished.
    #[getter]
    fn queue_sizes(&self) -> Vec<u64> {
        self.inner.queue_sizes().to_vec()
    }

    /// Requests ever dispatched to each worker.
    #[getter]
    fn dispatched_counts(&self) -> Vec<u64> {
        self.inner.dispatched_counts().to_vec()
    }

    /// Nodes of the global prefix tree (0 for dispatchers without one).
    #[getter]
    fn tree_nodes(&self) -> usize {
        self.inner.tree().map_or(0, |t| t.num_nodes())
    }

    /// Policy name.
    #[getter]
    fn policy(&self) -> &'static str {
        self.inner.policy().name()
    }

    /// Clients seen so far, in order of first dispatch.
    fn clients(&self) -> Vec<String> {
        self.inner.clients().to_vec()
    }

    /// The dispatcher's state as plain JSON data: policy, workers, options,
    /// clients (D2LPM deficits per worker, cursors), dispatch counts, the
    /// in-flight requests and the global prefix tree (which worker holds
    /// which prefix). See `load_state_dict`.
    /// `include_tree=False` leaves the tree out (a cheap summary, e.g. for
    /// metrics; it does not load back into D2LPM or PrefixAffinity).
    #[pyo3(signature = (include_tree = true))]
    fn state_dict(&self, py: Python<'_>, include_tree: bool) -> PyResult<PyObject> {
        from_value(py, &self.inner.state(include_tree)?)
    }

    /// Restore a `state_dict()` into this dispatcher, which must have nothing
    /// in flight and the same policy and number of workers; it then
    /// dispatches exactly as the saved one would have. Validated first
    /// (errors name the field, e.g. `clients[1].deficits[0]`); nothing
    /// changes on error. The state's options replace the constructor's.
    fn load_state_dict(&mut self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(self.inner.load_state(&to_value(state, "the state")?)?)
    }

    /// Forget every client with nothing in flight (its deficits or cursor):
    /// back, it starts as a new client. Changes only where its next request
    /// goes, never its share of service (the workers' schedulers keep that).
    /// Runs by itself whenever the client table doubles from 1,024. Returns
    /// how many were forgotten.
    fn forget_idle_clients(&mut self) -> usize {
        self.inner.forget_idle_clients()
    }

    /// Clients known now (forgotten ones excluded).
    #[getter]
    fn num_clients(&self) -> usize {
        self.inner.num_clients()
    }

    /// Whether `request_id` is in flight.
    fn __contains__(&self, request_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.inner.is_inflight(&request_id::parse(request_id)?))
    }

    /// Requests in flight.
    fn __len__(&self) -> usize {
        self.inner.num_inflight()
    }

    fn __repr__(&self) -> String {
        format!(
            "{}(num_workers={}, in_flight={})",
            self.inner.policy().name(),
            self.inner.num_workers(),
            self.inner.num_inflight()
        )
    }
}

fn base(d: crate::Result<Dispatcher>) -> PyResult<PyDispatcher> {
    Ok(PyDispatcher { inner: d? })
}

/// D2LPM, the distributed dispatcher (paper Algorithm 2).
///
/// Keeps a global prefix tree of which worker holds what, a queue size per
/// worker and a deficit per (client, worker) (`deficit(client, worker)`; new:
/// 0). `dispatch(request_id, client, tokens)`: G = the workers holding the
/// longest matched prefix (all if none); avail = workers where the client's
/// deficit is > 0, refilled by `worker_quantum` (Q_w) on every worker while
/// avail is empty; the least-loaded worker of G & avail (or of avail when
/// that is empty) gets the request, its deficit there drops by
/// `w_e * len(tokens)`, its load by one, and the tree records the tokens on
/// it. `on_finish(request_id, output_tokens)` charges `w_q * output_tokens`
/// and frees the load; `on_evict(worker, tokens, kept=0)` removes the worker
/// from the nodes beyond `tokens[:kept]`. Reports never block. Bound: service
/// of backlogged clients differs by at most 2 * W * (U + Q_u) with DLPM on
/// every worker. `worker_quantum` > 0, or `float("inf")` (pure affinity, no
/// fairness); weights `w_e`, `w_q` finite and >= 0 (ValueError naming the
/// field). `placement_slack` (int >= 0, default 0: the paper's rule): among
/// the chosen set's workers loaded at most this many requests above its
/// least, the one ranked first for the request's prefix by rendezvous
/// hashing gets it, so several routers whose loads differ by less agree on
/// where a new document goes (workers ranked by the name `set_worker_name`
/// gave them, else by slot). `match_threshold` (a fraction in [0, 1],
/// default 0: the paper's rule, every match counts): a longest match
/// covering less of the prompt than this, such as a system prompt every
/// document shares, is no locality, and the request is placed by credit and
/// load among all workers. `spread_by_credit` (default False: the paper's
/// rule, the least loaded): a request its match does not place goes where
/// its client has the most credit left, so a client's documents spread over
/// the workers as its credit will later ask.
#[pyclass(extends = PyDispatcher, module = "fairq._core", name = "D2LPM")]
pub struct PyD2LPM;

#[pymethods]
impl PyD2LPM {
    #[new]
    #[pyo3(signature = (
        num_workers,
        worker_quantum,
        w_e = 1.0,
        w_q = 2.0,
        placement_slack = 0,
        match_threshold = 0.0,
        spread_by_credit = false
    ))]
    fn new(
        #[pyo3(from_py_with = args::num_workers)] num_workers: i64,
        #[pyo3(from_py_with = args::worker_quantum)] worker_quantum: f64,
        #[pyo3(from_py_with = args::w_e)] w_e: f64,
        #[pyo3(from_py_with = args::w_q)] w_q: f64,
        #[pyo3(from_py_with = args::placement_slack)] placement_slack: i64,
        #[pyo3(from_py_with = args::match_threshold)] match_threshold: f64,
        #[pyo3(from_py_with = args::spread_by_credit)] spread_by_credit: bool,
    ) -> PyResult<(Self, PyDispatcher)> {
        let cfg = D2lpmConfig {
            worker_quantum,
            w_e,
            w_q,
            placement_slack: args::non_negative("placement_slack", placement_slack)? as u64,
            match_threshold,
            spread_by_credit,
        };
        Ok((
            PyD2LPM,
            base(Dispatcher::d2lpm(self::num_workers(num_workers)?, cfg))?,
        ))
    }

    /// Deficit `q[client][worker]` (0 for a client never seen).
    fn deficit(
        slf: PyRef<'_, Self>,
        #[pyo3(from_py_with = args::client)] client: String,
        #[pyo3(from_py_with = args::worker)] worker: i64,
    ) -> PyResult<f64> {
        let w = args::non_negative("worker", worker)?;
        Ok(slf.as_super().inner.deficit(&client, w)?)
    }

    /// `dispatch` over the workers in `workers` only (the slots holding a
    /// live worker now): the others are left out of the refill loop and of
    /// both candidate sets. With one worker it records a dispatch there with
    /// D2LPM's charge. Empty `workers`: ValueError; out of range: IndexError.
    fn dispatch_among(
        mut slf: PyRefMut<'_, Self>,
        request_id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::client)] client: String,
        tokens: &Bound<'_, PyAny>,
        workers: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        let toks = extract_tokens(tokens, "tokens")?;
        let ws = worker_list(workers)?;
        Ok(slf
            .as_super()
            .inner
            .dispatch_among(id, &client, &toks, &ws)?)
    }

    /// Charge `w_q * output_tokens` to `client` on `worker` after its request
    /// left the table (finished with `on_finish(request_id, 0)`, the output
    /// count reported later). Returns False for a client not known (never
    /// seen or forgotten).
    fn charge_output(
        mut slf: PyRefMut<'_, Self>,
        #[pyo3(from_py_with = args::client)] client: String,
        #[pyo3(from_py_with = args::worker)] worker: i64,
        #[pyo3(from_py_with = args::output_tokens)] output_tokens: i64,
    ) -> PyResult<bool> {
        let w = args::non_negative("worker", worker)?;
        let n = args::non_negative("output_tokens", output_tokens)? as u64;
        Ok(slf.as_super().inner.charge_output(&client, w, n)?)
    }

    /// `Q_w`.
    #[getter]
    fn worker_quantum(slf: PyRef<'_, Self>) -> f64 {
        cfg(&slf.as_super().inner).worker_quantum
    }

    /// Weight of an input token.
    #[getter]
    fn w_e(slf: PyRef<'_, Self>) -> f64 {
        cfg(&slf.as_super().inner).w_e
    }

    /// Weight of an output token.
    #[getter]
    fn w_q(slf: PyRef<'_, Self>) -> f64 {
        cfg(&slf.as_super().inner).w_q
    }

    /// Load above the least within which new prefixes are placed by
    /// rendezvous hashing (0: least loaded, the paper's rule).
    #[getter]
    fn placement_slack(slf: PyRef<'_, Self>) -> u64 {
        cfg(&slf.as_super().inner).placement_slack
    }

    /// The fraction of a prompt its longest match must cover to count as
    /// locality (0: every match, the paper's rule).
    #[getter]
    fn match_threshold(slf: PyRef<'_, Self>) -> f64 {
        cfg(&slf.as_super().inner).match_threshold
    }

    /// Whether a request its match does not place goes where its client
    /// has the most credit (False: the least loaded, the paper's rule).
    #[getter]
    fn spread_by_credit(slf: PyRef<'_, Self>) -> bool {
        cfg(&slf.as_super().inner).spread_by_credit
    }

    /// Name the worker in slot `worker` (e.g. its replica id) for the
    /// placement: routers that name a replica alike rank it alike whatever
    /// slot it holds. `remove_worker` forgets the name.
    fn set_worker_name(
        mut slf: PyRefMut<'_, Self>,
        #[pyo3(from_py_with = args::worker)] worker: i64,
        #[pyo3(from_py_with = args::name)] name: String,
    ) -> PyResult<()> {
        let w = args::non_negative("worker", worker)?;
        Ok(slf.as_super().inner.set_worker_name(w, &name)?)
    }
}

/// `workers`: a sequence of ints >= 0 (the range is the core's to check).
fn worker_list(v: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if v.is_instance_of::<pyo3::types::PyString>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "workers must be a sequence of ints, got str",
        ));
    }
    let items = v.try_iter().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "workers must be a sequence of ints, got {}",
            args::type_name(v)
        ))
    })?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let field = format!("workers[{i}]");
        out.push(args::non_negative(&field, args::int_arg(&field, &item?)?)?);
    }
    Ok(out)
}

fn cfg(d: &Dispatcher) -> D2lpmConfig {
    match d.policy() {
        Policy::D2lpm(st) => st.cfg,
        _ => unreachable!("PyD2LPM wraps a D2LPM dispatcher"),
    }
}

/// Round-robin dispatch: the k-th request goes to worker `k mod W`.
#[pyclass(extends = PyDispatcher, module = "fairq._core", name = "RoundRobin")]
pub struct PyRoundRobin;

#[pymethods]
impl PyRoundRobin {
    #[new]
    fn new(
        #[pyo3(from_py_with = args::num_workers)] num_workers: i64,
    ) -> PyResult<(Self, PyDispatcher)> {
        Ok((
            PyRoundRobin,
            base(Dispatcher::round_robin(self::num_workers(num_workers)?))?,
        ))
    }
}

/// Least-loaded dispatch: the worker with the fewest in-flight requests.
#[pyclass(extends = PyDispatcher, module = "fairq._core", name = "LeastLoaded")]
pub struct PyLeastLoaded;

#[pymethods]
impl PyLeastLoaded {
    #[new]
    fn new(
        #[pyo3(from_py_with = args::num_workers)] num_workers: i64,
    ) -> PyResult<(Self, PyDispatcher)> {
        Ok((
            PyLeastLoaded,
            base(Dispatcher::least_loaded(self::num_workers(num_workers)?))?,
        ))
    }
}

/// Per-client round-robin (the dispatcher paired with VTC): each client
/// cycles through the workers on its own cursor.
#[pyclass(extends = PyDispatcher, module = "fairq._core", name = "ClientRoundRobin")]
pub struct PyClientRoundRobin;

#[pymethods]
impl PyClientRoundRobin {
    #[new]
    fn new(
        #[pyo3(from_py_with = args::num_workers)] num_workers: i64,
    ) -> PyResult<(Self, PyDispatcher)> {
        Ok((
            PyClientRoundRobin,
            base(Dispatcher::client_round_robin(self::num_workers(
                num_workers,
            )?))?,
        ))
    }
}

/// Prefix affinity with a load-imbalance escape (SGLang router / Preble
/// style): best prefix match unless `max_load - min_load > abs_threshold and
/// max_load > rel_threshold * min_load`, or the matched fraction is below
/// `match_threshold`; then the least-loaded worker.
#[pyclass(extends = PyDispatcher, module = "fairq._core", name = "PrefixAffinity")]
pub struct PyPrefixAffinity;

#[pymethods]
impl PyPrefixAffinity {
    #[new]
    #[pyo3(signature = (num_workers, abs_threshold = 32.0, rel_threshold = 1.5, match_threshold = 0.5))]
    fn new(
        #[pyo3(from_py_with = args::num_workers)] num_workers: i64,
        #[pyo3(from_py_with = args::abs_threshold)] abs_threshold: f64,
        #[pyo3(from_py_with = args::rel_threshold)] rel_threshold: f64,
        #[pyo3(from_py_with = args::match_threshold)] match_threshold: f64,
    ) -> PyResult<(Self, PyDispatcher)> {
        let cfg = AffinityConfig {
            abs_threshold,
            rel_threshold,
            match_threshold,
        };
        Ok((
            PyPrefixAffinity,
            base(Dispatcher::prefix_affinity(
                self::num_workers(num_workers)?,
                cfg,
            ))?,
        ))
    }

    /// `(abs_threshold, rel_threshold, match_threshold)`.
    #[getter]
    fn thresholds(slf: PyRef<'_, Self>) -> (f64, f64, f64) {
        match slf.as_super().inner.policy() {
            Policy::PrefixAffinity(c) => (c.abs_threshold, c.rel_threshold, c.match_threshold),
            _ => unreachable!("PyPrefixAffinity wraps an affinity dispatcher"),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDispatcher>()?;
    m.add_class::<PyD2LPM>()?;
    m.add_class::<PyRoundRobin>()?;
    m.add_class::<PyLeastLoaded>()?;
    m.add_class::<PyClientRoundRobin>()?;
    m.add_class::<PyPrefixAffinity>()?;
    Ok(())
}
