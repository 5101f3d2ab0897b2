//! Bindings for `crate::wfq`: `fairq._core.WFQQueue`.
//!
//! The core ([`ItemQueue`]) holds the queue, the identity map (object id ->
//! heap handles) and the tags of popped items; items are opaque payloads
//! identified by their address (`id(item)`, compared by identity like vLLM
//! requests). This layer only translates:
//! - flow keys (any hashable) <-> `u64` ids, through a dict; ids whose flow
//!   state the core dropped are forgotten here too;
//! - liveness of popped items: a *weak* reference per remembered item, so
//!   `prepend(item)` restores its tags only if `item` is the very object
//!   popped (an address can be reused once it dies), without keeping
//!   finished items alive. Dead ones are swept from here and the core.

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyWeakrefMethods, PyWeakrefReference};

use crate::python::args;
use crate::python::value::{from_value, to_value};
use crate::value::Value;
use crate::wfq::state::{parse_state, ParsedState};
use crate::wfq::{FastMap, ItemQueue, Tags, VirtualClock};

/// What the binding keeps of a popped item besides the core's tags.
struct Departed {
    wref: Py<PyWeakrefReference>,
    /// The Python flow key (the core's flow id may be dropped meanwhile).
    flow_key: Option<Py<PyAny>>,
}

const SWEEP_MIN: usize = 1024;

fn ident(obj: &Bound<'_, PyAny>) -> u64 {
    obj.as_ptr() as usize as u64
}

/// A flow key as a state document value: a ``str`` or an ``int``.
fn flow_key_value(key: &Bound<'_, PyAny>) -> crate::Result<Value> {
    if let Ok(s) = key.downcast::<pyo3::types::PyString>() {
        if let Ok(s) = s.to_str() {
            return Ok(Value::str(s));
        }
    }
    if key.is_instance_of::<pyo3::types::PyInt>() && !key.is_instance_of::<pyo3::types::PyBool>() {
        if let Ok(i) = key.extract::<i128>() {
            return Ok(Value::Int(i));
        }
    }
    let shown = key
        .repr()
        .map_or_else(|_| "?".to_string(), |r| r.to_string());
    Err(crate::error::Error::value(format!(
        "flow {shown} cannot be saved: flow keys in a state must be str or int"
    )))
}

/// Weighted Fair Queuing on per-flow virtual finish times.
///
/// ``add(item, tokens=..., flow=..., weight=..., arrival=...)`` computes
/// ``S = max(V, F_last[flow])`` and ``F = S + tokens / weight``; ``pop()``
/// returns the item with the smallest ``(F, S, arrival, insertion order)``
/// and advances the virtual time ``V`` to ``max(V, S)``
/// (``virtual_clock="start"``, the default) or ``max(V, F)``
/// (``virtual_clock="finish"``: self-clocked, bounded waiting when items are
/// their own flows). Items are compared by identity. See ``fairq.wfq`` for
/// the full description.
#[pyclass(module = "fairq._core", name = "WFQQueue", subclass)]
pub struct PyWfqQueue {
    core: ItemQueue<u64, Py<PyAny>>,
    flow_ids: Py<PyDict>,
    flow_keys: FastMap<u64, Py<PyAny>>,
    next_flow: u64,
    departed: FastMap<u64, Departed>,
    sweep_at: usize,
    /// Types seen not to support weak references (skips a failing call and
    /// its exception on every pop). Only negative answers are cached, so a
    /// reused type address can at worst cost one failing call.
    no_weakref: FastMap<usize, ()>,
}

impl PyWfqQueue {
    /// Resolve a flow key without registering it: `(id, is_new)`.
    fn resolve_flow(&self, flow: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(u64, bool)>> {
        let Some(key) = flow.filter(|k| !k.is_none()) else {
            return Ok(None);
        };
        let py = key.py();
        match self.flow_ids.bind(py).get_item(key)? {
            Some(id) => Ok(Some((id.extract::<u64>()?, false))),
            None => Ok(Some((self.next_flow, true))),
        }
    }

    fn register_flow(&mut self, key: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        self.flow_ids.bind(key.py()).set_item(key, id)?;
        self.flow_keys.insert(id, key.clone().unbind());
        self.next_flow = self.next_flow.max(id + 1);
        Ok(())
    }

    fn forget_dropped_flows(&mut self, py: Python<'_>) {
        let dropped: Vec<u64> = self.core.drain_dropped_flows().collect();
        let d = self.flow_ids.bind(py);
        for id in dropped {
            if let Some(key) = self.flow_keys.remove(&id) {
                // The key was hashable when registered; ignore a key whose
                // hash started failing rather than leak the error here.
                let _ = d.del_item(key.bind(py));
            }
        }
    }

    /// Keep a weak reference to a popped `item` whose tags the core now
    /// remembers; an item that cannot be weakly referenced is not
    /// remembered (the core forgets it too).
    fn remember(&mut self, item: &Bound<'_, PyAny>, flow: Option<u64>) {
        let py = item.py();
        let id = ident(item);
        let tp = item.get_type().as_ptr() as usize;
        let wref = if self.no_weakref.contains_key(&tp) {
            None
        } else {
            PyWeakrefReference::new(item).ok()
        };
        let Some(wref) = wref else {
            self.no_weakref.insert(tp, ());
            self.departed.remove(&id);
            self.core.forget(id);
            return;
        };
        let flow_key = flow
            .and_then(|f| self.flow_keys.get(&f))
            .map(|k| k.clone_ref(py));
        self.departed.insert(
            id,
            Departed {
                wref: wref.unbind(),
                flow_key,
            },
        );
        if self.departed.len() > self.sweep_at {
            self.departed
                .retain(|_, d| d.wref.bind(py).upgrade().is_some());
            let departed = &self.departed;
            self.core.retain_departed(|id| departed.contains_key(&id));
            self.sweep_at = SWEEP_MIN.max(2 * self.departed.len());
        }
    }

    /// The binding's record of `item` if it is the very object popped.
    fn departed_of(&self, item: &Bound<'_, PyAny>) -> Option<&Departed> {
        let d = self.departed.get(&ident(item))?;
        let alive = d.wref.bind(item.py()).upgrade()?;
        alive.is(item).then_some(d)
    }

    fn fresh_add(
        &mut self,
        item: &Bound<'_, PyAny>,
        tokens: f64,
        flow: Option<&Bound<'_, PyAny>>,
        weight: f64,
        arrival: f64,
    ) -> PyResult<()> {
        let resolved = self.resolve_flow(flow)?;
        // Validate before registering anything.
        self.core
            .wfq()
            .preview(resolved.map(|r| r.0).as_ref(), tokens, weight, arrival)?;
        if let (Some((id, true)), Some(key)) = (resolved, flow) {
            self.register_flow(key, id)?;
        }
        self.core.add(
            ident(item),
            item.clone().unbind(),
            resolved.map(|r| r.0),
            tokens,
            weight,
            arrival,
        )?;
        self.departed.remove(&ident(item));
        self.forget_dropped_flows(item.py());
        Ok(())
    }

    fn tags_dict<'py>(&self, py: Python<'py>, t: &Tags<u64>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let flow = t.flow.and_then(|id| self.flow_keys.get(&id));
        d.set_item("flow", flow.map(|k| k.bind(py).clone()))?;
        d.set_item("weight", t.weight)?;
        d.set_item("start", t.start)?;
        d.set_item("finish", t.finish)?;
        d.set_item("arrival", t.arrival)?;
        d.set_item("remaining", t.remaining)?;
        d.set_item("seq", t.seq)?;
        Ok(d)
    }
}

#[pymethods]
impl PyWfqQueue {
    /// ``virtual_clock``: ``"start"`` (default; ``None`` also means it) or
    /// ``"finish"``; another ``str`` is a ``ValueError``, a non-``str`` a
    /// ``TypeError``.
    #[new]
    #[pyo3(signature = (*, virtual_clock = None), text_signature = "(*, virtual_clock=\"start\")")]
    fn new(py: Python<'_>, virtual_clock: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let clock = match virtual_clock {
            None => VirtualClock::Start,
            Some(obj) => {
                let Ok(s) = obj.downcast::<pyo3::types::PyString>() else {
                    return Err(PyTypeError::new_err(format!(
                        "virtual_clock must be \"start\" or \"finish\", got {} {}",
                        obj.get_type().name()?,
                        obj.repr()?
                    )));
                };
                VirtualClock::parse(s.to_str()?)?
            }
        };
        Ok(PyWfqQueue {
            core: ItemQueue::with_clock(clock),
            flow_ids: PyDict::new(py).unbind(),
            flow_keys: FastMap::default(),
            next_flow: 0,
            departed: FastMap::default(),
            sweep_at: SWEEP_MIN,
            no_weakref: FastMap::default(),
        })
    }

    /// The state as plain JSON data: virtual clock and time, every flow's
    /// ``F_last`` and the waiting items' tags in arrival order (not the
    /// items). Flow keys must be ``str`` or ``int`` to be saved.
    fn state_dict(slf: &Bound<'_, Self>, py: Python<'_>) -> PyResult<PyObject> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        let keys = &this.flow_keys;
        let doc = this.core.wfq().state(|id| {
            let key = keys.get(id).expect("a flow with state is registered");
            flow_key_value(key.bind(py))
        })?;
        from_value(py, &doc)
    }

    /// Restore a ``state_dict()`` into this empty queue; then add the
    /// waiting items again, in their original order and with their original
    /// arguments: each such add takes its saved tags (checked to be the same
    /// item: flow, tokens, weight, arrival). Validated first (errors name the
    /// field); nothing changes on error. The state's clock replaces the
    /// constructor's.
    fn load_state_dict(
        slf: &Bound<'_, Self>,
        py: Python<'_>,
        state: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        let parsed = parse_state(&to_value(state, "the state")?)?;
        if !this.core.is_empty() {
            return Err(PyValueError::new_err(format!(
                "load_state needs an empty queue; this one holds {} items (load into a fresh \
                 queue, then add the waiting items again)",
                this.core.len()
            )));
        }
        let mut intern = |v: &Value| -> PyResult<u64> {
            let key = from_value(py, v)?.into_bound(py);
            let (id, new) = this
                .resolve_flow(Some(&key))?
                .expect("a flow key is not None");
            if new {
                this.register_flow(&key, id)?;
            }
            Ok(id)
        };
        let flows = parsed
            .flows
            .iter()
            .map(|(k, last)| Ok((intern(k)?, *last)))
            .collect::<PyResult<Vec<_>>>()?;
        let waiting = parsed
            .waiting
            .into_iter()
            .map(|t| {
                Ok(Tags {
                    flow: t.flow.as_ref().map(&mut intern).transpose()?,
                    weight: t.weight,
                    start: t.start,
                    finish: t.finish,
                    arrival: t.arrival,
                    remaining: t.remaining,
                    seq: t.seq,
                })
            })
            .collect::<PyResult<Vec<_>>>()?;
        this.core.load_state(ParsedState {
            clock: parsed.clock,
            virtual_time: parsed.virtual_time,
            flows,
            waiting,
        })?;
        this.departed.clear();
        Ok(())
    }

    /// Waiting items of a loaded state not added again yet.
    #[getter]
    fn pending_readds(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.core.wfq().pending_readds())
    }

    /// ``"start"`` or ``"finish"``: how ``pop()`` advances ``virtual_time``.
    #[getter]
    fn virtual_clock(slf: &Bound<'_, Self>) -> PyResult<&'static str> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.core.wfq().virtual_clock().as_str())
    }

    /// Queue ``item`` needing ``tokens`` tokens (prompt + max new tokens).
    ///
    /// ``flow``: any hashable (a client id); ``None`` makes the item its own
    /// flow. ``weight`` must be finite and > 0, ``tokens`` finite and >= 0,
    /// ``arrival`` finite (a tie-break only). Errors leave the queue unchanged.
    #[pyo3(signature = (item, *, tokens, flow = None, weight = 1.0, arrival = 0.0))]
    fn add(
        slf: &Bound<'_, Self>,
        item: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tokens)] tokens: f64,
        flow: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::weight)] weight: f64,
        #[pyo3(from_py_with = args::arrival)] arrival: f64,
    ) -> PyResult<()> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        this.fresh_add(item, tokens, flow, weight, arrival)
    }

    /// Remove and return the item with the smallest virtual finish time;
    /// ``virtual_time`` advances to its start (clock ``"start"``) or finish
    /// (clock ``"finish"``) tag if that is larger.
    fn pop(slf: &Bound<'_, Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        let (_, item, tags) = this
            .core
            .pop()
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err("pop from empty heap"))?;
        let flow = tags.flow;
        this.remember(item.bind(py), flow);
        this.forget_dropped_flows(py);
        Ok(item)
    }

    /// The item ``pop()`` would return, without removing it.
    fn peek(slf: &Bound<'_, Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        this.core
            .peek()
            .map(|v| v.clone_ref(py))
            .ok_or_else(|| pyo3::exceptions::PyIndexError::new_err("peek from empty heap"))
    }

    /// Remove ``item`` (by identity). ``ValueError`` if it is not queued.
    /// The flow's ``F_last`` and ``V`` are not rewound.
    fn remove(slf: &Bound<'_, Self>, item: &Bound<'_, PyAny>) -> PyResult<()> {
        if Self::discard(slf, item)? {
            Ok(())
        } else {
            Err(PyValueError::new_err(
                "WFQQueue.remove(item): item not in queue",
            ))
        }
    }

    /// Remove ``item`` if queued; return whether it was.
    fn discard(slf: &Bound<'_, Self>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        if this.core.discard(ident(item)).is_none() {
            return Ok(false);
        }
        this.forget_dropped_flows(item.py());
        Ok(true)
    }

    /// Put ``item`` back after preemption.
    ///
    /// If ``item`` was popped from this queue (and is weak-referenceable),
    /// it returns with its original virtual start/finish, arrival and
    /// insertion order; the keyword arguments are ignored. Otherwise it is
    /// added fresh with them (``tokens`` required, else ``KeyError``).
    #[pyo3(signature = (item, *, tokens = None, flow = None, weight = 1.0, arrival = 0.0))]
    fn prepend(
        slf: &Bound<'_, Self>,
        item: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tokens_opt)] tokens: Option<f64>,
        flow: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::weight)] weight: f64,
        #[pyo3(from_py_with = args::arrival)] arrival: f64,
    ) -> PyResult<()> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        let py = item.py();
        if let Some(d) = this.departed_of(item) {
            let flow_key = d.flow_key.as_ref().map(|k| k.clone_ref(py));
            let resolved = this.resolve_flow(flow_key.as_ref().map(|k| k.bind(py)))?;
            if let (Some((id, true)), Some(key)) = (resolved, &flow_key) {
                this.register_flow(key.bind(py), id)?;
            }
            this.core
                .readd(ident(item), item.clone().unbind(), resolved.map(|r| r.0))?;
            this.departed.remove(&ident(item));
            return Ok(());
        }
        match tokens {
            Some(t) => this.fresh_add(item, t, flow, weight, arrival),
            None => Err(PyKeyError::new_err(
                "prepend(item): item was not popped from this queue (or is not \
                 weak-referenceable); pass tokens= to add it fresh",
            )),
        }
    }

    /// Whether ``prepend(item)`` would restore remembered virtual times.
    fn remembers(slf: &Bound<'_, Self>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.departed_of(item).is_some())
    }

    /// Drop the remembered tags of a popped ``item``; returns whether any.
    fn forget(slf: &Bound<'_, Self>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        Ok({
            this.core.forget(ident(item));
            this.departed.remove(&ident(item)).is_some()
        })
    }

    /// Partial prefill: ``remaining`` tokens are still needed, so
    /// ``F = S + remaining / weight`` and the order is restored. Returns the
    /// new ``F``. ``KeyError`` if ``item`` is not queued.
    fn update_remaining(
        slf: &Bound<'_, Self>,
        item: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::remaining)] remaining: f64,
    ) -> PyResult<f64> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        Ok(this.core.update_remaining(ident(item), remaining)?)
    }

    /// ``{"flow", "weight", "start", "finish", "arrival", "remaining", "seq"}``
    /// of a queued item (its first occurrence). ``KeyError`` if not queued.
    fn tags<'py>(slf: &Bound<'_, Self>, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        let t = this
            .core
            .tags(ident(item))
            .ok_or_else(|| PyKeyError::new_err("tags(item): item not in queue"))?;
        this.tags_dict(item.py(), &t)
    }

    /// ``(start, finish)`` virtual times of a queued item. ``KeyError`` if absent.
    fn times<'py>(
        slf: &Bound<'_, Self>,
        item: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        let t = this
            .core
            .tags(ident(item))
            .ok_or_else(|| PyKeyError::new_err("times(item): item not in queue"))?;
        PyTuple::new(item.py(), [t.start, t.finish])
    }

    /// Validate a batch of fresh adds ``[(flow, tokens, weight, arrival),
    /// ...]``, made in that order, without adding anything: raises what the
    /// first failing ``add`` would raise (each start chains on the finish of
    /// the previous request of its flow in the batch). Used by
    /// ``WFQRequestQueue.prepend_requests`` (all or nothing).
    fn check_adds(slf: &Bound<'_, Self>, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        let py = batch.py();
        let new_flows = PyDict::new(py);
        let mut rows: Vec<(Option<u64>, f64, f64, f64)> = Vec::new();
        for row in batch.try_iter()? {
            let (flow, tokens, weight, arrival): (
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
                Bound<'_, PyAny>,
            ) = row?.extract()?;
            let flow_id = match this.resolve_flow(Some(&flow))? {
                None => None,
                Some((id, false)) => Some(id),
                Some((_, true)) => Some(match new_flows.get_item(&flow)? {
                    Some(id) => id.extract::<u64>()?,
                    None => {
                        let id = this.next_flow + new_flows.len() as u64;
                        new_flows.set_item(&flow, id)?;
                        id
                    }
                }),
            };
            rows.push((
                flow_id,
                args::float_arg("tokens", &tokens)?,
                args::float_arg("weight", &weight)?,
                args::float_arg("arrival", &arrival)?,
            ));
        }
        Ok(this
            .core
            .wfq()
            .preview_batch(rows.iter().map(|(f, t, w, a)| (f.as_ref(), *t, *w, *a)))?)
    }

    /// The global virtual time ``V`` (never decreases).
    #[getter]
    fn virtual_time(slf: &Bound<'_, Self>) -> PyResult<f64> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.core.wfq().virtual_time())
    }

    /// Number of flows whose state the queue holds.
    #[getter]
    fn flow_count(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.core.wfq().flow_count())
    }

    /// Give ``flow`` back ``tokens`` it was charged for and did not use
    /// (its request's estimate was larger than what it used): ``F_last -=
    /// tokens / weight``, never below ``V``; its next request starts earlier.
    /// Returns the virtual time given back (0.0 for a flow without state).
    #[pyo3(signature = (flow, tokens, weight = 1.0))]
    fn refund_flow(
        slf: &Bound<'_, Self>,
        flow: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tokens)] tokens: f64,
        #[pyo3(from_py_with = args::weight)] weight: f64,
    ) -> PyResult<f64> {
        let mut this = super::lock_mut(slf, "fairq.WFQQueue")?;
        Ok(match this.resolve_flow(Some(flow))? {
            Some((id, false)) => this.core.refund_flow(&id, tokens, weight)?,
            _ => 0.0,
        })
    }

    /// ``F_last`` of ``flow``, or ``None`` if the queue holds no state for it
    /// (then its next request starts at ``V``).
    fn flow_last_finish(slf: &Bound<'_, Self>, flow: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(match this.resolve_flow(Some(flow))? {
            Some((id, false)) => this.core.wfq().flow_last_finish(&id),
            _ => None,
        })
    }

    /// How far ``flow`` is over its fair share: ``F_last - V`` (0 if the
    /// queue holds no state for it); what admission control ranks flows by.
    fn share_lead(slf: &Bound<'_, Self>, flow: &Bound<'_, PyAny>) -> PyResult<f64> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(match this.resolve_flow(Some(flow))? {
            Some((id, false)) => this.core.wfq().flow_lead(&id),
            _ => 0.0,
        })
    }

    /// Items in pop order (a snapshot list; the queue is not changed).
    fn items<'py>(slf: &Bound<'_, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        let v: Vec<_> = this.core.iter_sorted().map(|v| v.bind(py)).collect();
        PyList::new(py, v)
    }

    fn __iter__<'py>(slf: &Bound<'_, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Self::items(slf, py)?.try_iter().map(|it| it.into_any())
    }

    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.core.len())
    }

    fn __bool__(slf: &Bound<'_, Self>) -> PyResult<bool> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(!this.core.is_empty())
    }

    fn __contains__(slf: &Bound<'_, Self>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok(this.core.contains(ident(item)))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let this = super::lock(slf, "fairq.WFQQueue")?;
        Ok({
            format!(
                "WFQQueue(len={}, virtual_time={}, flows={}, virtual_clock={:?})",
                this.core.len(),
                this.core.wfq().virtual_time(),
                this.core.wfq().flow_count(),
                this.core.wfq().virtual_clock().as_str()
            )
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWfqQueue>()?;
    Ok(())
}
