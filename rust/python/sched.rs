//! Bindings for `crate::sched`: `fairq.LocalScheduler`, the base class that
//! holds the core scheduler (`LocalScheduler<Py<PyAny>>`) and binds every
//! shared method once; one class per policy extending it (`FCFS`, `LPM`,
//! `VTC`, `DLPM`: its constructor and its own getters, as HF `tokenizers`
//! does with `extends=`); `fairq.Admission`; and `policies()`, the policy
//! registry (`crate::sched::REGISTRY`) as Python data.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::python::args;
use crate::python::radix::{extract_namespace, PyRadixTree};
use crate::python::request_id;
use crate::python::tokens::extract_tokens;
use crate::python::value::{from_value, to_value};
use crate::radix::RadixTree;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::sched::{Admission, LocalScheduler, LpmRule, Policy, REGISTRY};

/// One admitted request, as returned by `schedule`.
#[pyclass(name = "Admission", module = "fairq._core", frozen)]
pub struct PyAdmission {
    /// The request id as given to `add`.
    #[pyo3(get)]
    request_id: PyObject,
    /// The client the request was added for.
    #[pyo3(get)]
    client: String,
    /// The item given to `add` (None if none was).
    #[pyo3(get)]
    item: PyObject,
    /// Prompt tokens.
    #[pyo3(get)]
    input_len: usize,
    /// Prompt tokens served from the prefix cache at admission (the tree's match).
    #[pyo3(get)]
    cached_len: usize,
    /// Prompt tokens to compute: input_len - cached_len (what was charged).
    #[pyo3(get)]
    extend_len: usize,
}

#[pymethods]
impl PyAdmission {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Admission(request_id={}, client={:?}, input_len={}, cached_len={}, extend_len={})",
            self.request_id.bind(py).repr()?,
            self.client,
            self.input_len,
            self.cached_len,
            self.extend_len
        ))
    }
}

fn to_admissions(py: Python<'_>, v: Vec<Admission<PyObject>>) -> Vec<PyAdmission> {
    v.into_iter()
        .map(|a| PyAdmission {
            request_id: request_id::to_py(py, &a.id),
            client: a.client,
            item: a.item,
            input_len: a.input_len,
            cached_len: a.cached_len,
            extend_len: a.extend_len,
        })
        .collect()
}

fn borrow_tree<'py>(
    py: Python<'py>,
    tree: &'py Option<Py<PyRadixTree>>,
) -> PyResult<Option<PyRefMut<'py, PyRadixTree>>> {
    match tree {
        None => Ok(None),
        Some(t) => t
            .bind(py)
            .try_borrow_mut()
            .map(Some)
            .map_err(|_| PyRuntimeError::new_err("the RadixTree is in use")),
    }
}

/// The shared body of `schedule` and `schedule_within_credit` (`refill`):
/// the argument checks, the tree borrowed for the call, the one core path
/// (`LocalScheduler::schedule_step`, oversize rule included), the
/// admissions translated.
fn admit_py(
    py: Python<'_>,
    core: &mut LocalScheduler<PyObject>,
    tree: &Option<Py<PyRadixTree>>,
    token_budget: i64,
    max_requests: Option<i64>,
    oversize_budget: Option<i64>,
    refill: bool,
) -> PyResult<Vec<PyAdmission>> {
    let budget = args::non_negative("token_budget", token_budget)?;
    let maxr = max_requests
        .map(|m| args::non_negative("max_requests", m))
        .transpose()?;
    let room = oversize_budget
        .map(|m| args::non_negative("oversize_budget", m))
        .transpose()?;
    let t = borrow_tree(py, tree)?;
    let tr: Option<&RadixTree> = t.as_deref().map(|x| &x.inner);
    let adm = core.schedule_step(tr, budget, maxr, room, refill)?;
    drop(t);
    Ok(to_admissions(py, adm))
}

/// `now`: a float (see [`args::float_arg`]).
fn now_arg(v: &Bound<'_, PyAny>) -> PyResult<f64> {
    args::float_arg("now", v)
}

/// The base class of every local scheduler (`fairq.LocalScheduler`): the
/// core scheduler, the tree it matches against and every shared method,
/// bound once. Each policy's class extends it with its constructor (and
/// its own getters), so `isinstance(s, fairq.LocalScheduler)` holds.
#[pyclass(name = "LocalScheduler", module = "fairq._core", subclass)]
pub struct PyLocalScheduler {
    core: LocalScheduler<PyObject>,
    tree: Option<Py<PyRadixTree>>,
}

impl PyLocalScheduler {
    /// A new scheduler of `policy` with the constructor's
    /// `max_prompt_tokens`, over `tree`.
    fn new(
        policy: Policy,
        tree: Option<Py<PyRadixTree>>,
        max_prompt_tokens: Option<i64>,
    ) -> PyResult<Self> {
        let limit = max_prompt_tokens
            .map(|m| args::non_negative("max_prompt_tokens", m))
            .transpose()?;
        let mut core = LocalScheduler::new(policy)?;
        core.set_max_prompt_tokens(limit);
        Ok(PyLocalScheduler { core, tree })
    }
}

/// The shared contract of every local scheduler (see FCFS's docstring).
#[pymethods]
impl PyLocalScheduler {
    /// Add a waiting request (duplicate id -> ValueError; a prompt
    /// longer than `max_prompt_tokens` -> ValueError naming the
    /// request and the limit; nothing changes on error).
    #[pyo3(signature = (request_id, client, tokens, item = None, namespace = None))]
    fn add(
        &mut self,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::client)] client: String,
        tokens: &Bound<'_, PyAny>,
        item: Option<PyObject>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let id = request_id::parse(request_id)?;
        let toks = extract_tokens(tokens, "tokens")?;
        let ns = extract_namespace(namespace)?;
        let item = item.unwrap_or_else(|| py.None());
        let mut t = borrow_tree(py, &self.tree)?;
        let tr: Option<&mut RadixTree> = t.as_deref_mut().map(|x| &mut x.inner);
        Ok(self.core.add(tr, id, &client, toks, item, ns)?)
    }

    /// Remove a waiting request; returns its item (unknown -> KeyError).
    fn remove(&mut self, request_id: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let id = request_id::parse(request_id)?;
        Ok(self.core.remove(&id)?)
    }

    /// Admit waiting requests in policy order while their extend
    /// length fits `token_budget` (and `max_requests`). Oversize
    /// rule: if that admits nothing and a slot is free, the policy's
    /// next request is admitted alone (it exceeds the whole budget:
    /// the engine prefills it in chunks) if its extend tokens fit
    /// `oversize_budget` (None: any; 0: the rule is off, for a
    /// `token_budget` that is only what is left of a step).
    #[pyo3(signature = (token_budget, max_requests = None, *, oversize_budget = None))]
    fn schedule(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::token_budget)] token_budget: i64,
        #[pyo3(from_py_with = args::max_requests)] max_requests: Option<i64>,
        #[pyo3(from_py_with = args::oversize_budget)] oversize_budget: Option<i64>,
    ) -> PyResult<Vec<PyAdmission>> {
        admit_py(
            py,
            &mut self.core,
            &self.tree,
            token_budget,
            max_requests,
            oversize_budget,
            true,
        )
    }

    /// `schedule` without refilling: admits exactly what `schedule`
    /// would (same order, same charges) up to where it would refill
    /// (DLPM: no waiting client has credit left) and stops there;
    /// `refills` never moves. For FCFS, LPM and VTC, which never
    /// refill, the same as `schedule`. For a caller that may hand
    /// part of a batch back (`requeue(..., refund=True)` undoes each
    /// admission exactly): no refill happens on behalf of requests
    /// it then does not take. With no refill needed, one call with
    /// `max_requests = k` equals `k` calls with `max_requests = 1`
    /// (the later ones with the budget left and `oversize_budget=0`,
    /// none after a request admitted alone). The oversize rule and
    /// `oversize_budget` are `schedule`'s.
    #[pyo3(signature = (token_budget, max_requests = None, *, oversize_budget = None))]
    fn schedule_within_credit(
        &mut self,
        py: Python<'_>,
        #[pyo3(from_py_with = args::token_budget)] token_budget: i64,
        #[pyo3(from_py_with = args::max_requests)] max_requests: Option<i64>,
        #[pyo3(from_py_with = args::oversize_budget)] oversize_budget: Option<i64>,
    ) -> PyResult<Vec<PyAdmission>> {
        admit_py(
            py,
            &mut self.core,
            &self.tree,
            token_budget,
            max_requests,
            oversize_budget,
            false,
        )
    }

    /// Charge `n_tokens` decode tokens of a running request.
    #[pyo3(signature = (request_id, n_tokens = 1))]
    fn charge_output(
        &mut self,
        request_id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::n_tokens)] n_tokens: i64,
    ) -> PyResult<()> {
        let id = request_id::parse(request_id)?;
        let n = args::non_negative("n_tokens", n_tokens)?;
        Ok(self.core.charge_output(&id, n)?)
    }

    /// Replace the extend tokens charged at a running request's
    /// admission by `extend_len` (the engine's real prefix match is
    /// known); returns the value charged before. `service(client)`
    /// moves by the difference (DLPM: the deficit too, with the
    /// client's weight at admission; VTC's counter charges the input
    /// length and does not move). Not running -> KeyError;
    /// `extend_len` < 0 or > input_len -> ValueError.
    fn recharge_extend(
        &mut self,
        request_id: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::extend_len)] extend_len: i64,
    ) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        let n = args::non_negative("extend_len", extend_len)?;
        Ok(self.core.recharge_extend(&id, n)?)
    }

    /// A running request goes back to waiting, keeping its place
    /// (arrival order) and client: `tokens` to match now, `item`;
    /// `refund=True` undoes its admission's charges (the engine never
    /// ran it), `refund=False` keeps them and its next admission
    /// charges nothing (a preemption). Not running -> KeyError.
    #[pyo3(signature = (request_id, tokens, item = None, *, refund = false))]
    fn requeue(
        &mut self,
        py: Python<'_>,
        request_id: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        item: Option<PyObject>,
        refund: bool,
    ) -> PyResult<()> {
        let id = request_id::parse(request_id)?;
        let toks = extract_tokens(tokens, "tokens")?;
        let item = item.unwrap_or_else(|| py.None());
        let mut t = borrow_tree(py, &self.tree)?;
        let tr: Option<&mut RadixTree> = t.as_deref_mut().map(|x| &mut x.inner);
        Ok(self.core.requeue(tr, &id, toks, item, refund)?)
    }

    /// Extend tokens charged for a running request (admission or the
    /// last `recharge_extend`); not running -> KeyError.
    fn charged_extend(&self, request_id: &Bound<'_, PyAny>) -> PyResult<usize> {
        let id = request_id::parse(request_id)?;
        Ok(self.core.charged_extend(&id)?)
    }

    /// A running request finished (unknown -> KeyError).
    fn finish(&mut self, request_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = request_id::parse(request_id)?;
        Ok(self.core.finish(&id)?)
    }

    /// Service received by `client`: w_e*extend + w_q*output tokens.
    fn service(&self, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        self.core.service(&client)
    }

    /// Set a client's weight (> 0, finite).
    fn set_weight(
        &mut self,
        #[pyo3(from_py_with = args::client)] client: String,
        #[pyo3(from_py_with = args::w)] w: f64,
    ) -> PyResult<()> {
        Ok(self.core.set_weight(&client, w)?)
    }

    /// A client's weight (1.0 unless set).
    fn weight(&self, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        self.core.weight(&client)
    }

    /// Clients in first-seen order.
    fn clients(&self) -> Vec<String> {
        self.core.clients()
    }

    /// Waiting requests of one client.
    fn num_waiting(&self, #[pyo3(from_py_with = args::client)] client: String) -> usize {
        self.core.waiting_of(&client)
    }

    /// Forget every idle client that carries nothing (no requests,
    /// default weight; VTC: counter at or below the lift floor;
    /// DLPM: debt paid, q > 0): coming back it is treated as new,
    /// which gives it no more than it would have had. Its
    /// `service()` restarts at 0. Runs by itself whenever the client
    /// table doubles (from 1,024 clients). Returns how many.
    fn forget_idle_clients(&mut self) -> usize {
        self.core.forget_idle_clients()
    }

    /// Clients known now (forgotten ones excluded).
    #[getter]
    fn num_clients(&self) -> usize {
        self.core.num_clients()
    }

    /// Re-matches done because the tree changed (diagnostics).
    #[getter]
    fn _rematches(&self) -> u64 {
        self.core.rematches()
    }

    /// Admitted requests not finished yet.
    #[getter]
    fn num_running(&self) -> usize {
        self.core.num_running()
    }

    /// The constructor's limit on prompt tokens at `add` (None: any).
    #[getter]
    fn max_prompt_tokens(&self) -> Option<usize> {
        self.core.max_prompt_tokens()
    }

    /// The RadixTree this scheduler matches against (None if none).
    #[getter]
    fn tree(&self, py: Python<'_>) -> Option<Py<PyRadixTree>> {
        self.tree.as_ref().map(|t| t.clone_ref(py))
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        let this = slf.borrow();
        Ok(format!(
            "{}(waiting={}, running={}, clients={})",
            name,
            this.core.len(),
            this.core.num_running(),
            this.core.clients().len()
        ))
    }

    /// Run on injected time: the scheduler's clock reads `now` seconds
    /// from here on (finite, not before the last time set; ValueError
    /// naming `now` otherwise, nothing changes). Without a call the
    /// clock is the wall clock (seconds since the UNIX epoch). Only the
    /// policies whose charges depend on time read it (LAS's decay); a
    /// simulator sets its simulated time before each step.
    fn set_time(&mut self, #[pyo3(from_py_with = now_arg)] now: f64) -> PyResult<()> {
        Ok(self.core.set_time(now)?)
    }

    /// The policy's per-client number now (its registered state field:
    /// VTC's counter, DLPM's deficit, ...; 0 for unknown clients and
    /// policies without one).
    fn state_value(&self, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        self.core.state_value(&client)
    }

    /// How far ``client`` is over its fair share by the policy's own
    /// account (larger = further over; VTC's counter, minus DLPM's
    /// deficit, LAS's attained service, else service / weight; 0 for an
    /// unknown client): what admission control ranks tenants by.
    fn share_lead(&self, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        self.core.share_lead(&client)
    }

    /// The fairness state as plain JSON data: policy, options, every
    /// client (weight, service, VTC counter / DLPM deficit, requests
    /// waiting), DLPM's refills and the admitted, unfinished requests.
    /// Not the waiting requests (re-add them after a load) nor the
    /// RadixTree (the engine's cache).
    fn state_dict(&self, py: Python<'_>) -> PyResult<PyObject> {
        from_value(py, &self.core.state()?)
    }

    /// Restore a `state_dict()` into this scheduler, which must hold no
    /// requests (a fresh one); then re-add the waiting requests in
    /// their original order. Everything is validated first (errors
    /// name the field, e.g. `clients[2].deficit`) and nothing changes
    /// on error. The state's options replace the constructor's.
    fn load_state_dict(&mut self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(self.core.load_state(&to_value(state, "the state")?)?)
    }

    /// Assert internal invariants (tests only).
    fn _check(&self, py: Python<'_>) -> PyResult<()> {
        let t = borrow_tree(py, &self.tree)?;
        self.core.check_invariants(t.as_deref().map(|x| &x.inner));
        Ok(())
    }
}

#[doc = "First come, first served.

Admits waiting requests in arrival order (the order of add) and stops at the
first request whose extend tokens do not fit token_budget, so a large request
is never overtaken (one larger than the whole budget goes alone: the
oversize rule below). With a RadixTree the admissions report the tree's cached
prefix (cached_len) and charge only the rest (extend_len); without one every
prompt token is extend. Client weights are stored but do not change the order.

Contract shared by FCFS, LPM, VTC and DLPM (fairq.LocalScheduler):
add(request_id, client, tokens, item=None, namespace=None) queues a request
(duplicate id: ValueError); schedule(token_budget, max_requests=None,
*, oversize_budget=None) admits in policy order and returns Admissions ([]
when nothing may go). Oversize rule: a call that admits nothing, with
max_requests >= 1, admits the policy's next request alone (it exceeds the
whole token_budget, so no step of that budget could ever hold it: the
engine prefills it in chunks) if its extend tokens fit oversize_budget
(None: any; 0 turns the rule off, for a token_budget that is only what is
left of a step another prefill is using). A request that only misses what
is left after others were admitted keeps waiting. max_prompt_tokens=N (a
keyword of every constructor): add rejects a longer prompt with a
ValueError naming the request and N, for an engine that cannot chunk; not
part of state_dict. Admitted requests are running until
finish(request_id); charge_output(request_id, n) charges decoded tokens;
remove(request_id) drops a waiting request and returns its item (unknown:
KeyError). service(client) = w_e*extend + w_q*output
tokens served (VTC: w_in and w_out in those roles; FCFS, LPM: 1 and 2), not
divided by the client's weight.
Every failing call raises before changing anything. Every request added
leaves exactly once: admitted then finished, or removed."]
#[pyclass(name = "FCFS", module = "fairq._core", extends = PyLocalScheduler)]
pub struct PyFcfs;

#[pymethods]
impl PyFcfs {
    #[new]
    #[pyo3(signature = (tree = None, *, max_prompt_tokens = None))]
    fn new(
        tree: Option<Py<PyRadixTree>>,
        #[pyo3(from_py_with = args::max_prompt_tokens)] max_prompt_tokens: Option<i64>,
    ) -> PyResult<(Self, PyLocalScheduler)> {
        Ok((
            Self,
            PyLocalScheduler::new(Policy::Fcfs, tree, max_prompt_tokens)?,
        ))
    }
}

#[doc = "Longest prefix match first.

Each schedule orders the waiting requests by the length of their longest
match in `tree` (the engine's prefix cache, a RadixTree), longest first, ties
in arrival order, and admits in that order; a request whose extend tokens do
not fit the budget left is skipped, not a stop. Matches are kept current
incrementally: a request is parked on the tree node where its match ends and
re-matched only when an insert or evict changes that node. Maximises cache
reuse; not fair: a client with a hot prefix can starve the others
(ALGORITHMS.md section 6).

The defaults are the paper's idealised LPM. As SGLang 0.5 runs it:
stop_at_unfit=True (the walk stops at the first request whose extend tokens
do not fit what is left of the budget) and fcfs_above=128 (with more than
128 requests waiting, walk in arrival order instead). Engine settings, not
fairness state (state_dict does not hold them); fcfs_above: None or an int
>= 0 (ValueError naming it).

multi_priority=True replaces the walk by Preble's local wait queue (its
fcfs-mpq heuristic): ten levels by cache-hit ratio at the first schedule
after arrival (level 0: no hit, else ceil(10 * matched / input_len) - 1),
one level served per schedule, round-robin from level 9 down, at most
(level + 1) * 10 requests from it, arrival order within the level, a request
that does not fit skipped. No starvation across levels, no per-client
fairness. Excludes stop_at_unfit and fcfs_above (ValueError). Shared
contract: see help(fairq.FCFS)."]
#[pyclass(name = "LPM", module = "fairq._core", extends = PyLocalScheduler)]
pub struct PyLpm;

#[pymethods]
impl PyLpm {
    #[new]
    #[pyo3(signature = (tree, *, max_prompt_tokens = None, stop_at_unfit = false, fcfs_above = None, multi_priority = false))]
    fn new(
        tree: Py<PyRadixTree>,
        #[pyo3(from_py_with = args::max_prompt_tokens)] max_prompt_tokens: Option<i64>,
        stop_at_unfit: bool,
        #[pyo3(from_py_with = args::fcfs_above)] fcfs_above: Option<i64>,
        multi_priority: bool,
    ) -> PyResult<(Self, PyLocalScheduler)> {
        let fcfs_above = fcfs_above
            .map(|n| args::non_negative("fcfs_above", n))
            .transpose()?;
        let mut base = PyLocalScheduler::new(Policy::Lpm, Some(tree), max_prompt_tokens)?;
        base.core.set_lpm_rule(LpmRule {
            stop_at_unfit,
            fcfs_above,
            multi_priority,
        })?;
        Ok((Self, base))
    }

    /// Whether the walk stops at the first request that does not fit
    /// (SGLang) instead of skipping it (the paper).
    #[getter]
    fn stop_at_unfit(slf: PyRef<'_, Self>) -> bool {
        slf.as_super().core.lpm_rule().stop_at_unfit
    }

    /// Waiting requests above which the walk is in arrival order
    /// (None: never).
    #[getter]
    fn fcfs_above(slf: PyRef<'_, Self>) -> Option<usize> {
        slf.as_super().core.lpm_rule().fcfs_above
    }

    /// Whether the order is Preble's multi-level priority queue.
    #[getter]
    fn multi_priority(slf: PyRef<'_, Self>) -> bool {
        slf.as_super().core.lpm_rule().multi_priority
    }
}

#[doc = "Virtual Token Counter (Sheng et al.), artifact rules.

Keeps a counter per client (counter(client); new client: 0). Admission
repeatedly takes the waiting client with the smallest counter and admits its
oldest request if it fits, stopping at the first that does not; an admission
adds w_in * input_len / weight, charge_output(n) adds w_out * n / weight.
Lift: when a client's waiting queue goes from empty to non-empty its counter
becomes max(counter, min counter of the other clients with waiting requests),
so an idle client banks no credit. Backlogged clients' weighted service stays
within a bound of each other; cache locality is ignored (ALGORITHMS.md
section 5). w_in, w_out: > 0 and finite (ValueError naming the field).
Shared contract: see help(fairq.FCFS)."]
#[pyclass(name = "VTC", module = "fairq._core", extends = PyLocalScheduler)]
pub struct PyVtc;

#[pymethods]
impl PyVtc {
    #[new]
    #[pyo3(signature = (tree = None, w_in = 1.0, w_out = 2.0, *, max_prompt_tokens = None))]
    fn new(
        tree: Option<Py<PyRadixTree>>,
        #[pyo3(from_py_with = args::w_in)] w_in: f64,
        #[pyo3(from_py_with = args::w_out)] w_out: f64,
        #[pyo3(from_py_with = args::max_prompt_tokens)] max_prompt_tokens: Option<i64>,
    ) -> PyResult<(Self, PyLocalScheduler)> {
        let policy = Policy::Vtc { w_in, w_out };
        Ok((
            Self,
            PyLocalScheduler::new(policy, tree, max_prompt_tokens)?,
        ))
    }

    /// The client's virtual token counter (0 for unknown clients).
    fn counter(slf: PyRef<'_, Self>, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        slf.as_super().core.counter(&client)
    }
}

#[doc = "Deficit Longest Prefix Match (paper Algorithm 1).

Walks the waiting requests in LPM order (longest match in `tree` first) and
gates each by its client's deficit q (deficit(client); new client: 0):
a request of a client with q > 0 is admitted if its extend tokens fit, and
q -= w_e * extend_len / weight; charge_output(n) takes w_q * n / weight. When
the walk meets a client with q <= 0 and no client with waiting requests has
q > 0, every known client with q <= 0 gets q += quantum (the paper's Q_u;
consecutive refills are applied in bulk, counted in `refills`). One schedule
call repeats the walk until a walk admits nothing (work conserving).
quantum -> 0 behaves like VTC, quantum -> inf like LPM.

The quantum is fixed (a number, quantum_scale None or 0) or automatic
(quantum=\"auto\", or quantum_scale > 0): quantum_scale (default 0.8) times
the mean uncached cost of a request over about the last 64 admissions
(w_e * input_len + w_q * output, divided by the weight), the number given
(or 512 for \"auto\") until the first admission. `quantum` reads the value a
refill would use now, `largest_quantum` the largest one a refill used.
Bound (Theorem 4.1): two continuously backlogged clients' service differs by
at most 2 * (U + Q*), U = w_e * max input + w_q * max running tokens, Q* the
largest quantum used (the fixed quantum). quantum, w_e, w_q: > 0 and finite,
quantum_scale >= 0 and finite (ValueError naming the field).

strict_credit (default None: on with quantum=\"auto\", the engines'
DLPM; off with a number, the paper's Algorithm 1) admits a request only
when its charge is below its client's deficit (Deficit Round Robin's
rule; a request of a client with q > 0 it does not cover waits). When
every waiting client with credit has only such requests, a refill gives
quantum to each known client with q <= 0 and to each of those clients,
round by round, until some waiting client covers its cheapest request.
A client no longer starts a request on the crumbs of its credit (under
cache pressure: a new document it cannot finish). The bound above still
holds. Shared contract: see
help(fairq.FCFS)."]
#[pyclass(name = "DLPM", module = "fairq._core", extends = PyLocalScheduler)]
pub struct PyDlpm;

#[pymethods]
impl PyDlpm {
    #[new]
    #[pyo3(signature = (tree, quantum, w_e = 1.0, w_q = 2.0, *, quantum_scale = None, strict_credit = None, max_prompt_tokens = None))]
    fn new(
        tree: Py<PyRadixTree>,
        #[pyo3(from_py_with = args::quantum)] quantum: Option<f64>,
        #[pyo3(from_py_with = args::w_e)] w_e: f64,
        #[pyo3(from_py_with = args::w_q)] w_q: f64,
        #[pyo3(from_py_with = args::quantum_scale)] quantum_scale: Option<f64>,
        #[pyo3(from_py_with = args::strict_credit)] strict_credit: Option<bool>,
        #[pyo3(from_py_with = args::max_prompt_tokens)] max_prompt_tokens: Option<i64>,
    ) -> PyResult<(Self, PyLocalScheduler)> {
        // "auto": the engine defaults (the initial quantum, the scale)
        let spec = |name: &str| {
            REGISTRY
                .iter()
                .filter(|p| p.name == "dlpm")
                .flat_map(|p| p.options)
                .find(|o| o.name == name)
                .map_or(0.0, |o| o.engine_default)
        };
        // "auto" is the engines' DLPM: strict credit unless given; a number
        // is the paper's admission rule unless given
        let strict_credit =
            strict_credit.unwrap_or(quantum.is_none() && spec("strict_credit") != 0.0);
        let (quantum, quantum_scale) = match (quantum, quantum_scale) {
            (Some(q), scale) => (q, scale.unwrap_or(0.0)),
            // scale 0 turns the automatic quantum off: with "auto" that
            // would silently be the fixed initial quantum
            (None, Some(0.0)) => {
                return Err(PyValueError::new_err(
                    "quantum_scale must be > 0 with quantum=\"auto\" (0 is a fixed \
                     quantum: give quantum a number), got 0",
                ))
            }
            (None, scale) => (
                spec("quantum"),
                scale.unwrap_or_else(|| spec("quantum_scale")),
            ),
        };
        let policy = Policy::Dlpm {
            quantum,
            w_e,
            w_q,
            quantum_scale,
            strict_credit: if strict_credit { 1.0 } else { 0.0 },
        };
        Ok((
            Self,
            PyLocalScheduler::new(policy, Some(tree), max_prompt_tokens)?,
        ))
    }

    /// Whether strict credit is on (a request is admitted only when its
    /// charge is below its client's deficit).
    #[getter]
    fn strict_credit(slf: PyRef<'_, Self>) -> bool {
        matches!(
            slf.as_super().core.policy(),
            Policy::Dlpm { strict_credit, .. } if strict_credit != 0.0
        )
    }

    /// The client's deficit counter q (0 for unknown clients).
    fn deficit(slf: PyRef<'_, Self>, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        slf.as_super().core.deficit(&client)
    }

    /// Virtual refills so far: a refill check that fires applies in one
    /// go the k single refills (+quantum each) the walk would do one at a
    /// time; all k are counted.
    #[getter]
    fn refills(slf: PyRef<'_, Self>) -> u64 {
        slf.as_super().core.refills()
    }

    /// The quantum a refill would use now (the fixed one, or the automatic
    /// one's current value).
    #[getter]
    fn quantum(slf: PyRef<'_, Self>) -> f64 {
        slf.as_super().core.quantum().map_or(0.0, |q| q.0)
    }

    /// The largest quantum a refill has used so far (Theorem 4.1's Q*; 0
    /// before the first refill).
    #[getter]
    fn largest_quantum(slf: PyRef<'_, Self>) -> f64 {
        slf.as_super().core.quantum().map_or(0.0, |q| q.1)
    }
}

/// The registered local policies, one dict each, in registration order:
/// `name`, `class_name` (its class in `fairq._core`), `options` (names in
/// constructor order), `engine_defaults` (option -> the value an engine
/// uses when the user gives none), `flags` (the options that are 0 / 1
/// switches), `needs_tree`, `refills`,
/// `stop_at_unfit`, `state_fields` (the per-client numbers `state_dict`
/// reports, each a dict `name`, `metric`, `help`).
#[pyfunction]
fn policies(py: Python<'_>) -> PyResult<Vec<PyObject>> {
    REGISTRY
        .iter()
        .map(|spec| {
            let d = PyDict::new(py);
            d.set_item("name", spec.name)?;
            d.set_item("class_name", spec.class_name)?;
            let names: Vec<&str> = spec.options.iter().map(|o| o.name).collect();
            d.set_item("options", PyTuple::new(py, names)?)?;
            let defaults = PyDict::new(py);
            for o in spec.options {
                defaults.set_item(o.name, o.engine_default)?;
            }
            d.set_item("engine_defaults", defaults)?;
            let flags: Vec<&str> = spec
                .options
                .iter()
                .filter(|o| o.flag)
                .map(|o| o.name)
                .collect();
            d.set_item("flags", PyTuple::new(py, flags)?)?;
            d.set_item("needs_tree", spec.needs_tree)?;
            d.set_item("refills", spec.refills)?;
            d.set_item("stop_at_unfit", spec.stop_at_unfit)?;
            let fields = PyList::empty(py);
            for f in spec.state_field.iter() {
                let fd = PyDict::new(py);
                fd.set_item("name", f.name)?;
                fd.set_item("metric", f.metric)?;
                fd.set_item("help", f.help)?;
                fields.append(fd)?;
            }
            d.set_item("state_fields", fields)?;
            Ok(d.into_any().unbind())
        })
        .collect()
}

/// `half_life_s`: a float (see [`args::float_arg`]).
fn half_life_s(v: &Bound<'_, PyAny>) -> PyResult<f64> {
    args::float_arg("half_life_s", v)
}

/// Least attained service per tenant with half-life decay (llm-d's flow
/// control fairness; ALGORITHMS.md section 5b).
///
/// Each client's attained service S (attained(client); new client: 0) grows
/// by w_in * extend_len / weight at admission and w_out * n / weight per
/// charge_output(n), and decays between charges, halving every half_life_s
/// seconds of the scheduler's clock: set_time(now) (the simulator's
/// simulated time, a test's), else the wall clock. The waiting client with
/// the least S now (ties: first seen) has its oldest request admitted if it
/// fits; the pass stops at the first that does not. No lift: an idle
/// client's S decays, so one back after a while is not punished for old
/// use. half_life_s, w_in, w_out: > 0 and finite (ValueError naming the
/// field). Shared contract: see help(fairq.FCFS).
#[pyclass(name = "LAS", module = "fairq._core", extends = PyLocalScheduler)]
pub struct PyLas;

#[pymethods]
impl PyLas {
    #[new]
    #[pyo3(signature = (tree = None, half_life_s = 60.0, w_in = 1.0, w_out = 2.0, *, max_prompt_tokens = None))]
    fn new(
        tree: Option<Py<PyRadixTree>>,
        #[pyo3(from_py_with = half_life_s)] half_life_s: f64,
        #[pyo3(from_py_with = args::w_in)] w_in: f64,
        #[pyo3(from_py_with = args::w_out)] w_out: f64,
        #[pyo3(from_py_with = args::max_prompt_tokens)] max_prompt_tokens: Option<i64>,
    ) -> PyResult<(Self, PyLocalScheduler)> {
        let policy = Policy::Las {
            half_life_s,
            w_in,
            w_out,
        };
        Ok((
            Self,
            PyLocalScheduler::new(policy, tree, max_prompt_tokens)?,
        ))
    }

    /// The client's attained service now, decayed (0 for unknown clients).
    fn attained(slf: PyRef<'_, Self>, #[pyo3(from_py_with = args::client)] client: String) -> f64 {
        slf.as_super().core.state_value(&client)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAdmission>()?;
    m.add_class::<PyLocalScheduler>()?;
    m.add_function(wrap_pyfunction!(policies, m)?)?;
    m.add_class::<PyFcfs>()?;
    m.add_class::<PyLpm>()?;
    m.add_class::<PyVtc>()?;
    m.add_class::<PyDlpm>()?;
    m.add_class::<PyLas>()?;
    Ok(())
}
