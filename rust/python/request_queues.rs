//! Bindings for [`crate::request_queue`]: the Rust halves of
//! `fairq.vllm.FCFSRequestQueue` and `fairq.vllm.PriorityRequestQueue`.
//!
//! Requests are arbitrary Python objects held as `Py<PyAny>` (a strong
//! reference while queued); their identity is the object's address, which
//! cannot be reused while the queue keeps the object alive. Every method is
//! one FFI call. Methods taking an iterable collect it fully *before*
//! borrowing the queue, so a Python iterator that touches the queue (or the
//! queue itself, as in `q.remove_requests(q)`) is safe, and every input is
//! validated before anything is mutated.

use pyo3::exceptions::{PyAttributeError, PyIndexError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyIterator, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::python::request_id;
use crate::registry::IdMap;
use crate::request_queue::{FcfsQueue, Num, PriorityKey, PriorityQueue, RequestId};

fn oid(obj: &Bound<'_, PyAny>) -> u64 {
    obj.as_ptr() as usize as u64
}

fn repr_of(obj: &Bound<'_, PyAny>) -> String {
    match obj.repr() {
        Ok(s) => s.to_string(),
        Err(_) => format!("<{} object>", type_name(obj)),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Every item of `iterable`, collected before any queue is borrowed.
fn collect<'py>(iterable: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if let Ok(l) = iterable.downcast::<PyList>() {
        return Ok(l.iter().collect());
    }
    if let Ok(t) = iterable.downcast::<PyTuple>() {
        return Ok(t.iter().collect());
    }
    iterable.try_iter()?.collect()
}

/// Cached iteration snapshot: a tuple of the queue's items plus the
/// mutation count it was taken at. Every mutation bumps the count and drops
/// the tuple, so a snapshot is only ever reused for an unchanged queue.
#[derive(Default)]
struct Snapshot {
    version: u64,
    tuple: Option<Py<PyTuple>>,
}

impl Snapshot {
    /// Record a mutation; returns the stale tuple so that callers holding a
    /// borrow of the queue can drop it after the borrow ends.
    #[must_use]
    fn invalidate(&mut self) -> Option<Py<PyTuple>> {
        self.version = self.version.wrapping_add(1);
        self.tuple.take()
    }
}

/// `iter(snapshot)` for a queue whose snapshot lives at `$field`, reusing
/// the cached tuple while the queue is unchanged. The tuple is built under a
/// shared borrow and stored only if no mutation happened meanwhile
/// (allocating may run the GC, hence finalizers that touch the queue).
macro_rules! cached_iter {
    ($slf:expr, $build:expr) => {{
        let slf = $slf;
        let py = slf.py();
        let version = {
            let me = slf
                .try_borrow()
                .map_err(|_| super::busy("a fairq vLLM queue"))?;
            if let Some(t) = &me.snap.tuple {
                return t.bind(py).try_iter();
            }
            me.snap.version
        };
        let t: Bound<'_, PyTuple> = $build(
            &*slf
                .try_borrow()
                .map_err(|_| super::busy("a fairq vLLM queue"))?,
            py,
        )?;
        if let Ok(mut me) = slf.try_borrow_mut() {
            if me.snap.version == version {
                me.snap.tuple = Some(t.clone().unbind());
            }
        }
        t.try_iter()
    }};
}

fn traverse<'a>(
    items: impl Iterator<Item = &'a Py<PyAny>>,
    visit: &PyVisit<'_>,
) -> Result<(), PyTraverseError> {
    for it in items {
        visit.call(it)?;
    }
    Ok(())
}

// ----------------------------------------------------------------- keys ----

fn attr<'py>(obj: &Bound<'py, PyAny>, name: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
    obj.getattr(name).map_err(|e| {
        if e.is_instance_of::<PyAttributeError>(obj.py()) {
            PyTypeError::new_err(format!(
                "{} object has no attribute '{}': PriorityRequestQueue needs \
                 priority, arrival_time and request_id",
                type_name(obj),
                name
            ))
        } else {
            e
        }
    })
}

fn out_of_range(field: &str, v: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!(
        "{field} = {} is out of range: integers must fit in 64 bits",
        repr_of(v)
    ))
}

fn read_num(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>, field: &str) -> PyResult<Num> {
    let v = attr(obj, name)?;
    if let Ok(f) = v.downcast::<PyFloat>() {
        return Ok(Num::float(field, f.value())?);
    }
    if v.is_instance_of::<PyInt>() {
        return v
            .extract::<i64>()
            .map(Num::Int)
            .map_err(|_| out_of_range(field, &v));
    }
    // Other integer types (numpy ints) via __index__.
    if v.hasattr(intern!(v.py(), "__index__"))? {
        let i = v.call_method0(intern!(v.py(), "__index__"))?;
        return i
            .extract::<i64>()
            .map(Num::Int)
            .map_err(|_| out_of_range(field, &v));
    }
    Err(PyTypeError::new_err(format!(
        "{field} must be an int or float, got {} {}",
        type_name(&v),
        repr_of(&v)
    )))
}

fn read_request_id(obj: &Bound<'_, PyAny>) -> PyResult<RequestId> {
    request_id::parse(&attr(obj, intern!(obj.py(), "request_id"))?)
}

fn read_key(obj: &Bound<'_, PyAny>) -> PyResult<PriorityKey> {
    let py = obj.py();
    Ok(PriorityKey {
        priority: read_num(obj, intern!(py, "priority"), "priority")?,
        arrival_time: read_num(obj, intern!(py, "arrival_time"), "arrival_time")?,
        request_id: read_request_id(obj)?,
    })
}

// --------------------------------------------------------------- shared ----

/// What the FCFS and the priority half share: the name their errors give,
/// their iteration snapshot and their core's removals by identity.
trait QueueHalf: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::False> {
    const OBJECT: &'static str;
    fn snap(&mut self) -> &mut Snapshot;
    /// Remove the first queued occurrence of `id`.
    fn take(&mut self, id: u64) -> Option<Py<PyAny>>;
    /// Remove every queued occurrence of each of `ids`.
    fn take_all(&mut self, ids: Vec<u64>) -> Vec<Py<PyAny>>;
    fn len(&self) -> usize;
}

/// [`QueueHalf`] for a class holding its core in `q` and its snapshot in
/// `snap`, whose core removes one occurrence with `$take`.
macro_rules! queue_half {
    ($class:ty, $object:expr, $take:ident) => {
        impl QueueHalf for $class {
            const OBJECT: &'static str = $object;
            fn snap(&mut self) -> &mut Snapshot {
                &mut self.snap
            }
            fn take(&mut self, id: u64) -> Option<Py<PyAny>> {
                self.q.$take(id)
            }
            fn take_all(&mut self, ids: Vec<u64>) -> Vec<Py<PyAny>> {
                self.q.remove_all(ids)
            }
            fn len(&self) -> usize {
                self.q.len()
            }
        }
    };
}

/// Remove `request` (by identity); whether it was queued. The removed
/// object and the stale snapshot are dropped after the borrow ends (a
/// `__del__` that touches this queue must not see it borrowed).
fn remove_one<T: QueueHalf>(slf: &Bound<'_, T>, request: &Bound<'_, PyAny>) -> PyResult<bool> {
    let (removed, stale) = {
        let mut me = super::lock_mut(slf, T::OBJECT)?;
        let removed = me.take(oid(request));
        let stale = if removed.is_some() {
            me.snap().invalidate()
        } else {
            None
        };
        (removed, stale)
    };
    drop(stale);
    Ok(removed.is_some())
}

/// Remove every occurrence of each of `requests` (collected first); absent
/// ones are ignored. Decrefs run after the borrow ends.
fn remove_each<T: QueueHalf>(slf: &Bound<'_, T>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
    let ids: Vec<u64> = collect(requests)?.iter().map(oid).collect();
    let (removed, stale) = {
        let mut me = super::lock_mut(slf, T::OBJECT)?;
        (me.take_all(ids), me.snap().invalidate())
    };
    drop(stale);
    drop(removed);
    Ok(())
}

/// `Name(len=n)`, with the name of `slf`'s (sub)class.
fn repr<T: QueueHalf>(slf: &Bound<'_, T>) -> PyResult<String> {
    Ok(format!(
        "{}(len={})",
        slf.as_any().get_type().name()?,
        super::lock(slf, T::OBJECT)?.len()
    ))
}

// ----------------------------------------------------------------- FCFS ----

/// Rust half of `fairq.vllm.FCFSRequestQueue` (vLLM's deque-based FCFS queue).
#[pyclass(subclass, module = "fairq._core", name = "FCFSQueueCore")]
pub struct PyFcfsQueue {
    q: FcfsQueue<Py<PyAny>>,
    snap: Snapshot,
}

const FCFS: &str = "fairq.vllm.FCFSRequestQueue";

#[pymethods]
impl PyFcfsQueue {
    #[new]
    fn new() -> Self {
        PyFcfsQueue {
            q: FcfsQueue::new(),
            snap: Snapshot::default(),
        }
    }

    /// Append at the back.
    #[pyo3(signature = (request, /))]
    fn add_request(&mut self, request: Bound<'_, PyAny>) {
        // The stale snapshot's items all stay referenced, so dropping it here
        // runs no finalizer.
        drop(self.snap.invalidate());
        self.q.push_back(oid(&request), request.unbind());
    }

    /// Pop the oldest; ``IndexError`` when empty.
    fn pop_request(&mut self) -> PyResult<Py<PyAny>> {
        let r = self.q.pop_front()?.1;
        drop(self.snap.invalidate()); // `r` keeps the popped item alive
        Ok(r)
    }

    /// The oldest, not removed; ``IndexError`` when empty.
    fn peek_request(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.q.peek_front()?.1.clone_ref(py))
    }

    /// Put at the front.
    fn prepend_request(&mut self, request: Bound<'_, PyAny>) {
        drop(self.snap.invalidate());
        self.q.push_front(oid(&request), request.unbind());
    }

    /// Put every item of ``requests`` at the front in turn (reverse order of appearance).
    fn prepend_requests(slf: &Bound<'_, Self>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        let items = collect(requests)?;
        let mut me = super::lock_mut(slf, FCFS)?;
        drop(me.snap.invalidate());
        me.q.extend_front(items.into_iter().map(|r| (oid(&r), r.unbind())));
        Ok(())
    }

    /// Remove the first occurrence (by identity); ``ValueError`` if absent.
    fn remove_request(slf: &Bound<'_, Self>, request: &Bound<'_, PyAny>) -> PyResult<()> {
        if remove_one(slf, request)? {
            return Ok(());
        }
        // deque.remove's message since CPython 3.10 (fairq's floor).
        Err(PyValueError::new_err(format!(
            "{} is not in deque",
            repr_of(request)
        )))
    }

    /// Remove every occurrence of each of ``requests``; absent ones are ignored.
    fn remove_requests(slf: &Bound<'_, Self>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        remove_each(slf, requests)
    }

    fn __contains__(&self, request: &Bound<'_, PyAny>) -> bool {
        self.q.count(oid(request)) > 0
    }

    /// `queue[index]`, as vLLM's deque: negative indices from the back,
    /// `IndexError` out of range, `TypeError` for a non-integer. O(1) at
    /// both ends.
    fn __getitem__(slf: &Bound<'_, Self>, index: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        // `__index__` may run Python code: read before the queue is borrowed.
        if index.is_instance_of::<pyo3::types::PyBool>() || index.hasattr("__index__")? {
            let i: i64 = index
                .call_method0("__index__")?
                .extract()
                .map_err(|_| PyIndexError::new_err("deque index out of range"))?;
            let me = super::lock(slf, FCFS)?;
            return Ok(me.q.get(i)?.clone_ref(slf.py()));
        }
        Err(PyTypeError::new_err(format!(
            "sequence index must be integer, not '{}'",
            index.get_type().name()?
        )))
    }

    fn __len__(&self) -> usize {
        self.q.len()
    }

    fn __bool__(&self) -> bool {
        !self.q.is_empty()
    }

    /// A snapshot in queue order (cached until the next mutation).
    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyIterator>> {
        cached_iter!(slf, |me: &Self, py| PyTuple::new(
            py,
            me.q.iter().map(|(_, r)| r.clone_ref(py))
        ))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr(slf)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.snap.tuple)?;
        traverse(self.q.iter().map(|(_, r)| r), &visit)
    }

    fn __clear__(&mut self) {
        drop(self.snap.invalidate());
        self.q.clear();
    }
}

queue_half!(PyFcfsQueue, FCFS, remove_first);

// ------------------------------------------------------------- priority ----

/// Rust half of `fairq.vllm.PriorityRequestQueue`.
#[pyclass(subclass, module = "fairq._core", name = "PriorityQueueCore")]
pub struct PyPriorityQueue {
    q: PriorityQueue<Py<PyAny>>,
    snap: Snapshot,
}

fn already_queued(request: &Bound<'_, PyAny>) -> PyErr {
    PyValueError::new_err(format!(
        "{} is already in the priority queue",
        repr_of(request)
    ))
}

const PRIORITY: &str = "fairq.vllm.PriorityRequestQueue";

#[pymethods]
impl PyPriorityQueue {
    #[new]
    fn new() -> Self {
        PyPriorityQueue {
            q: PriorityQueue::new(),
            snap: Snapshot::default(),
        }
    }

    /// Insert by ``(priority, arrival_time, request_id)``, read now.
    #[pyo3(signature = (request, /))]
    fn add_request(slf: &Bound<'_, Self>, request: Bound<'_, PyAny>) -> PyResult<()> {
        let id = oid(&request);
        if super::lock(slf, PRIORITY)?.q.contains(id) {
            return Err(already_queued(&request));
        }
        // Reading the key runs Python code (properties): no borrow is held,
        // so that code may use this queue; the check is repeated after.
        let key = read_key(&request)?;
        let mut me = super::lock_mut(slf, PRIORITY)?;
        if me.q.contains(id) {
            return Err(already_queued(&request));
        }
        me.q.push(id, key, request.unbind())?;
        drop(me.snap.invalidate());
        Ok(())
    }

    /// Pop the smallest key; ``IndexError`` when empty.
    fn pop_request(&mut self) -> PyResult<Py<PyAny>> {
        let r = self.q.pop()?.1;
        drop(self.snap.invalidate()); // `r` keeps the popped item alive
        Ok(r)
    }

    /// The smallest key, not removed; ``IndexError`` when empty.
    fn peek_request(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.q.peek()?.2.clone_ref(py))
    }

    /// Same as ``add_request`` (a priority queue has no front).
    fn prepend_request(slf: &Bound<'_, Self>, request: Bound<'_, PyAny>) -> PyResult<()> {
        Self::add_request(slf, request)
    }

    /// Add every item of ``requests``; all or nothing.
    fn prepend_requests(slf: &Bound<'_, Self>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        let items = collect(requests)?;
        let mut batch = Vec::with_capacity(items.len());
        let mut seen: IdMap<()> = IdMap::default();
        {
            let me = super::lock(slf, PRIORITY)?;
            for r in &items {
                let id = oid(r);
                if me.q.contains(id) || seen.insert(id, ()).is_some() {
                    return Err(already_queued(r));
                }
            }
        }
        // Reading keys runs Python code (properties), so no borrow is held.
        for r in items {
            let key = read_key(&r)?;
            batch.push((oid(&r), key, r.unbind()));
        }
        let mut me = super::lock_mut(slf, PRIORITY)?;
        me.q.push_batch(batch)?;
        drop(me.snap.invalidate());
        Ok(())
    }

    /// Remove by identity in O(log n); ``ValueError`` if absent.
    fn remove_request(slf: &Bound<'_, Self>, request: &Bound<'_, PyAny>) -> PyResult<()> {
        match remove_one(slf, request)? {
            true => Ok(()),
            false => Err(PyValueError::new_err("list.remove(x): x not in list")),
        }
    }

    /// Remove each of ``requests`` present; absent ones are ignored.
    fn remove_requests(slf: &Bound<'_, Self>, requests: &Bound<'_, PyAny>) -> PyResult<()> {
        remove_each(slf, requests)
    }

    fn __contains__(&self, request: &Bound<'_, PyAny>) -> bool {
        self.q.contains(oid(request))
    }

    fn __len__(&self) -> usize {
        self.q.len()
    }

    fn __bool__(&self) -> bool {
        !self.q.is_empty()
    }

    /// A snapshot in priority order (cached until the next mutation); the
    /// queue is not changed.
    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyIterator>> {
        cached_iter!(slf, |me: &Self, py| PyTuple::new(
            py,
            me.q.sorted().into_iter().map(|(_, r)| r.clone_ref(py))
        ))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        repr(slf)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.snap.tuple)?;
        traverse(self.q.iter_unordered().map(|(_, r)| r), &visit)
    }

    fn __clear__(&mut self) {
        drop(self.snap.invalidate());
        self.q.clear();
    }
}

queue_half!(PyPriorityQueue, PRIORITY, remove);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFcfsQueue>()?;
    m.add_class::<PyPriorityQueue>()?;
    Ok(())
}
