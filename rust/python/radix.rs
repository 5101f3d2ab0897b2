//! Bindings for `crate::radix`: `fairq.RadixTree`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

use crate::python::args;
use crate::python::tokens::extract_tokens;
use crate::radix::{Namespace, RadixTree};

/// `None` -> default namespace, `str` or `int` -> its own namespace.
pub fn extract_namespace(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Namespace> {
    let Some(o) = obj else {
        return Ok(Namespace::Default);
    };
    if o.is_none() {
        return Ok(Namespace::Default);
    }
    if let Ok(s) = o.downcast::<PyString>() {
        return match s.to_str() {
            Ok(s) => Ok(Namespace::Str(s.to_owned())),
            Err(_) => Err(PyValueError::new_err(
                "namespace must be a valid str, got one with lone surrogates",
            )),
        };
    }
    if o.is_instance_of::<PyInt>() && !o.is_instance_of::<PyBool>() {
        return o.extract::<i64>().map(Namespace::Int).map_err(|_| {
            PyValueError::new_err(format!("namespace = {o} is out of the 64-bit int range"))
        });
    }
    Err(PyTypeError::new_err(format!(
        "namespace must be None, a str or an int, got {}",
        o.get_type().name()?
    )))
}

/// The namespace and the token ids of a call, checked in that order.
fn path_of(
    tokens: &Bound<'_, PyAny>,
    namespace: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Namespace, Vec<u32>)> {
    Ok((
        extract_namespace(namespace)?,
        extract_tokens(tokens, "tokens")?,
    ))
}

/// Token radix tree modelling an engine's prefix (KV) cache.
///
/// Holds token-id sequences the way an engine's prefix cache holds KV pages:
/// `match(tokens)` is the length of the longest cached prefix (whole pages of
/// `page_size` tokens; a pure query, no LRU touch), `insert(tokens)` caches a
/// sequence and returns how much was already there, `evict(n)` frees
/// least-recently-used unlocked leaves until `n` tokens are freed, and
/// `lock`/`unlock` pin a prefix against eviction (every `lock` needs its own
/// `unlock`). With a `capacity` (tokens) `insert` evicts LRU leaves to make
/// room. `namespace` (None, a str or an int) keeps separate trees in one
/// object (e.g. one per LoRA adapter or cache salt). Token ids: a list, tuple,
/// numpy integer array, `array.array`, memoryview or uint32 buffer; each id a
/// non-negative int < 2**32. The local schedulers LPM and DLPM read it to
/// order requests; an engine integration inserts what it really cached.
#[pyclass(name = "RadixTree", module = "fairq._core")]
pub struct PyRadixTree {
    pub inner: RadixTree,
}

#[pymethods]
impl PyRadixTree {
    #[new]
    #[pyo3(signature = (capacity = None, page_size = 1))]
    fn new(
        #[pyo3(from_py_with = args::capacity)] capacity: Option<i64>,
        #[pyo3(from_py_with = args::page_size)] page_size: i64,
    ) -> PyResult<Self> {
        let cap = match capacity {
            None => None,
            Some(c) if c >= 0 => Some(c as usize),
            Some(c) => {
                return Err(PyValueError::new_err(format!(
                    "capacity must be None or an int >= 0, got {c}"
                )))
            }
        };
        if page_size < 1 {
            return Err(PyValueError::new_err(format!(
                "page_size must be an int >= 1, got {page_size}"
            )));
        }
        Ok(PyRadixTree {
            inner: RadixTree::new(cap, page_size as usize)?,
        })
    }

    /// Longest cached prefix length of `tokens` (whole pages). Pure query.
    #[pyo3(signature = (tokens, namespace = None))]
    fn r#match(
        &self,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (ns, t) = path_of(tokens, namespace)?;
        Ok(self.inner.match_len(&ns, &t))
    }

    /// Insert `tokens` (whole pages); returns the length already present.
    #[pyo3(signature = (tokens, namespace = None))]
    fn insert(
        &mut self,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (ns, t) = path_of(tokens, namespace)?;
        Ok(self.inner.insert(&ns, &t))
    }

    /// Lock the cached prefix of `tokens`; returns the locked length.
    #[pyo3(signature = (tokens, namespace = None))]
    fn lock(
        &mut self,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (ns, t) = path_of(tokens, namespace)?;
        Ok(self.inner.lock(&ns, &t))
    }

    /// Release one earlier `lock` of the same tokens (KeyError if none).
    #[pyo3(signature = (tokens, namespace = None))]
    fn unlock(
        &mut self,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (ns, t) = path_of(tokens, namespace)?;
        Ok(self.inner.unlock(&ns, &t)?)
    }

    /// Free LRU unlocked leaves until `n_tokens` are freed; returns tokens freed.
    fn evict(&mut self, #[pyo3(from_py_with = args::n_tokens)] n_tokens: i64) -> PyResult<usize> {
        let n_tokens = args::non_negative("n_tokens", n_tokens)?;
        Ok(self.inner.evict(n_tokens))
    }

    /// Remove what the tree holds on the path of `tokens` past its first
    /// `keep` tokens (whole pages): an engine evicted that block, so nothing
    /// after it can match. Returns the tokens removed; a locked part ->
    /// ValueError (nothing changes).
    #[pyo3(signature = (tokens, keep, namespace = None))]
    fn truncate(
        &mut self,
        tokens: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::keep)] keep: i64,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (ns, t) = path_of(tokens, namespace)?;
        let keep = args::non_negative("keep", keep)?;
        Ok(self.inner.truncate(&ns, &t, keep)?)
    }

    /// Tokens cached.
    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }
    /// Cached tokens not pinned by a lock (what evict can free).
    #[getter]
    fn evictable_size(&self) -> usize {
        self.inner.evictable_size()
    }
    /// Token capacity (None: unbounded).
    #[getter]
    fn capacity(&self) -> Option<usize> {
        self.inner.capacity()
    }
    /// Tokens per page: matches and inserts count whole pages.
    #[getter]
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }
    /// Live nodes including namespace roots (diagnostics).
    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.num_nodes()
    }
    fn __len__(&self) -> usize {
        self.inner.size()
    }
    fn __repr__(&self) -> String {
        format!(
            "RadixTree(size={}, evictable_size={}, capacity={}, page_size={})",
            self.inner.size(),
            self.inner.evictable_size(),
            self.inner
                .capacity()
                .map_or_else(|| "None".to_string(), |c| c.to_string()),
            self.inner.page_size()
        )
    }
    /// Assert internal invariants (tests only; panics are bugs).
    fn _check(&self) {
        self.inner.check_invariants();
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRadixTree>()?;
    Ok(())
}
