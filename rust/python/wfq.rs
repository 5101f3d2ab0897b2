//! Bindings for `crate::wfq`: `fairq._core.WFQQueue`.
//!
//! The core stores the Python item as an opaque payload and flows as `u64`
//! ids. This layer only translates:
//! - flow keys (any hashable) <-> ids, through a dict; ids whose flow state
//!   the core dropped are forgotten here too;
//! - item identity (`id(item)`) -> heap handles, for O(log n) removal and
//!   re-keying (items are compared by identity, like vLLM requests);
//! - the tags of popped items, held against a *weak* reference so
//!   `prepend(item)` can restore them after preemption without keeping
//!   finished items alive.

use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple, PyWeakrefMethods, PyWeakrefReference};

use crate::heap::Handle;
use crate::python::args;
use crate::wfq::{FastMap, Tags, VirtualClock, Wfq};

/// Live handles of one item (an item may be queued more than once).
enum Handles {
    One(Handle),
    Many(Vec<Handle>),
}

struct Departed {
    wref: Py<PyWeakrefReference>,
    flow_key: Option<Py<PyAny>>,
    tags: Tags<u64>,
}

const SWEEP_MIN: usize = 1024;

fn ident(obj: &Bound<'_, PyAny>) -> usize {
    obj.as_ptr() as usize
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
    core: Wfq<u64, Py<PyAny>>,
    ids: FastMap<usize, Handles>,
    flow_ids: Py<PyDict>,
    flow_keys: FastMap<u64, Py<PyAny>>,
    next_flow: u64,
    departed: FastMap<usize, Departed>,
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

    fn push_handle(&mut self, id: usize, h: Handle) {
        match self.ids.get_mut(&id) {
            None => {
                self.ids.insert(id, Handles::One(h));
            }
            Some(Handles::One(h0)) => {
                let h0 = *h0;
                self.ids.insert(id, Handles::Many(vec![h0, h]));
            }
            Some(Handles::Many(v)) => v.push(h),
        }
    }

    fn drop_handle(&mut self, id: usize, h: Handle) {
        let remove_all = match self.ids.get_mut(&id) {
            Some(Handles::One(_)) => true,
            Some(Handles::Many(v)) => {
                v.retain(|x| *x != h);
                if v.len() == 1 {
                    let only = v[0];
                    self.ids.insert(id, Handles::One(only));
                }
                false
            }
            None => false,
        };
        if remove_all {
            self.ids.remove(&id);
        }
    }

    /// The handle of `item` that comes first in queue order.
    fn first_handle(&self, item: &Bound<'_, PyAny>) -> Option<Handle> {
        match self.ids.get(&ident(item))? {
            Handles::One(h) => Some(*h),
            Handles::Many(v) => v
                .iter()
                .copied()
                .min_by_key(|h| self.core.get(*h).expect("live").1.queue_order()),
        }
    }

    fn remember(&mut self, item: &Bound<'_, PyAny>, tags: Tags<u64>) {
        let py = item.py();
        let tp = item.get_type().as_ptr() as usize;
        if self.no_weakref.contains_key(&tp) {
            return;
        }
        let Ok(wref) = PyWeakrefReference::new(item) else {
            // Not weak-referenceable: not remembered.
            self.no_weakref.insert(tp, ());
            return;
        };
        let flow_key = tags
            .flow
            .and_then(|id| self.flow_keys.get(&id))
            .map(|k| k.clone_ref(py));
        self.departed.insert(
            ident(item),
            Departed {
                wref: wref.unbind(),
                flow_key,
                tags,
            },
        );
        if self.departed.len() > self.sweep_at {
            self.departed
                .retain(|_, d| d.wref.bind(py).upgrade().is_some());
            self.sweep_at = SWEEP_MIN.max(2 * self.departed.len());
        }
    }

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
            .preview(resolved.map(|r| r.0).as_ref(), tokens, weight, arrival)?;
        if let (Some((id, true)), Some(key)) = (resolved, flow) {
            self.register_flow(key, id)?;
        }
        let h = self.core.add(
            item.clone().unbind(),
            resolved.map(|r| r.0),
            tokens,
            weight,
            arrival,
        )?;
        self.push_handle(ident(item), h);
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
            core: Wfq::with_clock(clock),
            ids: FastMap::default(),
            flow_ids: PyDict::new(py).unbind(),
            flow_keys: FastMap::default(),
            next_flow: 0,
            departed: FastMap::default(),
            sweep_at: SWEEP_MIN,
            no_weakref: FastMap::default(),
        })
    }

    /// ``"start"`` or ``"finish"``: how ``pop()`` advances ``virtual_time``.
    #[getter]
    fn virtual_clock(&self) -> &'static str {
        self.core.virtual_clock().as_str()
    }

    /// Queue ``item`` needing ``tokens`` tokens (prompt + max new tokens).
    ///
    /// ``flow``: any hashable (a client id); ``None`` makes the item its own
    /// flow. ``weight`` must be finite and > 0, ``tokens`` finite and >= 0,
    /// ``arrival`` finite (a tie-break only). Errors leave the queue unchanged.
    #[pyo3(signature = (item, *, tokens, flow = None, weight = 1.0, arrival = 0.0))]
    fn add(
        &mut self,
        item: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tokens)] tokens: f64,
        flow: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::weight)] weight: f64,
        #[pyo3(from_py_with = args::arrival)] arrival: f64,
    ) -> PyResult<()> {
        self.fresh_add(item, tokens, flow, weight, arrival)
    }

    /// Remove and return the item with the smallest virtual finish time;
    /// ``virtual_time`` advances to its start (clock ``"start"``) or finish
    /// (clock ``"finish"``) tag if that is larger.
    fn pop(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let h = self
            .core
            .peek_handle()
            .ok_or_else(|| PyIndexError::new_err("pop from empty heap"))?;
        let (item, tags) = self.core.pop().expect("non-empty");
        let b = item.bind(py);
        self.drop_handle(ident(b), h);
        self.remember(b, tags);
        self.forget_dropped_flows(py);
        Ok(item)
    }

    /// The item ``pop()`` would return, without removing it.
    fn peek(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.core
            .peek()
            .map(|(_, v, _)| v.clone_ref(py))
            .ok_or_else(|| PyIndexError::new_err("peek from empty heap"))
    }

    /// Remove ``item`` (by identity). ``ValueError`` if it is not queued.
    /// The flow's ``F_last`` and ``V`` are not rewound.
    fn remove(&mut self, item: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.discard(item) {
            Ok(())
        } else {
            Err(PyValueError::new_err(
                "WFQQueue.remove(item): item not in queue",
            ))
        }
    }

    /// Remove ``item`` if queued; return whether it was.
    fn discard(&mut self, item: &Bound<'_, PyAny>) -> bool {
        let Some(h) = self.first_handle(item) else {
            return false;
        };
        self.core.remove(h);
        self.drop_handle(ident(item), h);
        self.forget_dropped_flows(item.py());
        true
    }

    /// Put ``item`` back after preemption.
    ///
    /// If ``item`` was popped from this queue (and is weak-referenceable),
    /// it returns with its original virtual start/finish, arrival and
    /// insertion order; the keyword arguments are ignored. Otherwise it is
    /// added fresh with them (``tokens`` required, else ``KeyError``).
    #[pyo3(signature = (item, *, tokens = None, flow = None, weight = 1.0, arrival = 0.0))]
    fn prepend(
        &mut self,
        item: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::tokens_opt)] tokens: Option<f64>,
        flow: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = args::weight)] weight: f64,
        #[pyo3(from_py_with = args::arrival)] arrival: f64,
    ) -> PyResult<()> {
        let py = item.py();
        if let Some(d) = self.departed_of(item) {
            let flow_key = d.flow_key.as_ref().map(|k| k.clone_ref(py));
            let mut tags = d.tags.clone();
            let resolved = self.resolve_flow(flow_key.as_ref().map(|k| k.bind(py)))?;
            if let (Some((id, true)), Some(key)) = (resolved, &flow_key) {
                self.register_flow(key.bind(py), id)?;
            }
            tags.flow = resolved.map(|r| r.0);
            let h = self.core.readd(item.clone().unbind(), tags)?;
            self.push_handle(ident(item), h);
            self.departed.remove(&ident(item));
            return Ok(());
        }
        match tokens {
            Some(t) => self.fresh_add(item, t, flow, weight, arrival),
            None => Err(PyKeyError::new_err(
                "prepend(item): item was not popped from this queue (or is not \
                 weak-referenceable); pass tokens= to add it fresh",
            )),
        }
    }

    /// Whether ``prepend(item)`` would restore remembered virtual times.
    fn remembers(&self, item: &Bound<'_, PyAny>) -> bool {
        self.departed_of(item).is_some()
    }

    /// Drop the remembered tags of a popped ``item``; returns whether any.
    fn forget(&mut self, item: &Bound<'_, PyAny>) -> bool {
        self.departed.remove(&ident(item)).is_some()
    }

    /// Partial prefill: ``remaining`` tokens are still needed, so
    /// ``F = S + remaining / weight`` and the order is restored. Returns the
    /// new ``F``. ``KeyError`` if ``item`` is not queued.
    fn update_remaining(
        &mut self,
        item: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::remaining)] remaining: f64,
    ) -> PyResult<f64> {
        let h = self
            .first_handle(item)
            .ok_or_else(|| PyKeyError::new_err("update_remaining(item): item not in queue"))?;
        Ok(self.core.update_remaining(h, remaining)?)
    }

    /// ``{"flow", "weight", "start", "finish", "arrival", "remaining", "seq"}``
    /// of a queued item (its first occurrence). ``KeyError`` if not queued.
    fn tags<'py>(&self, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let h = self
            .first_handle(item)
            .ok_or_else(|| PyKeyError::new_err("tags(item): item not in queue"))?;
        let (_, t) = self.core.get(h).expect("live");
        self.tags_dict(item.py(), &t)
    }

    /// ``(start, finish)`` virtual times of a queued item. ``KeyError`` if absent.
    fn times<'py>(&self, item: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let h = self
            .first_handle(item)
            .ok_or_else(|| PyKeyError::new_err("times(item): item not in queue"))?;
        let (_, t) = self.core.get(h).expect("live");
        PyTuple::new(item.py(), [t.start, t.finish])
    }

    /// The global virtual time ``V`` (never decreases).
    #[getter]
    fn virtual_time(&self) -> f64 {
        self.core.virtual_time()
    }

    /// Number of flows whose state the queue holds.
    #[getter]
    fn flow_count(&self) -> usize {
        self.core.flow_count()
    }

    /// ``F_last`` of ``flow``, or ``None`` if the queue holds no state for it
    /// (then its next request starts at ``V``).
    fn flow_last_finish(&self, flow: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        Ok(match self.resolve_flow(Some(flow))? {
            Some((id, false)) => self.core.flow_last_finish(&id),
            _ => None,
        })
    }

    /// Items in pop order (a snapshot list; the queue is not changed).
    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let v: Vec<_> = self.core.iter_sorted().map(|(_, v)| v.bind(py)).collect();
        PyList::new(py, v)
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.items(py)?.try_iter().map(|it| it.into_any())
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __bool__(&self) -> bool {
        !self.core.is_empty()
    }

    fn __contains__(&self, item: &Bound<'_, PyAny>) -> bool {
        self.ids.contains_key(&ident(item))
    }

    fn __repr__(&self) -> String {
        format!(
            "WFQQueue(len={}, virtual_time={}, flows={}, virtual_clock={:?})",
            self.core.len(),
            self.core.virtual_time(),
            self.core.flow_count(),
            self.core.virtual_clock().as_str()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWfqQueue>()?;
    Ok(())
}
