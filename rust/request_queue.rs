//! vLLM-compatible request queues (ALGORITHMS.md section 1), generic over
//! the payload and free of Python.
//!
//! - [`FcfsQueue`]: vLLM's `FCFSRequestQueue` (a `deque`) on a [`Fifo`]:
//!   append, popleft, appendleft, `extendleft` for a batch (reverse order of
//!   appearance), removal of the *first occurrence* of an object in O(1)
//!   expected (the same object may be queued twice, as in a deque; Fifo
//!   positions tell which of its entries is first).
//! - [`PriorityQueue`]: vLLM's `PriorityRequestQueue`, an indexed binary heap
//!   ordered by [`PriorityKey`] `(priority, arrival_time, request_id)` then
//!   insertion sequence, specialised so comparisons use a compact copy of the
//!   key stored in the heap array (a generic `crate::heap::IndexedHeap` with
//!   the full key measured about 2x slower on pop). An object may be queued
//!   at most once.
//!
//! Objects are identified by an opaque `u64` id chosen by the caller (the
//! bindings use the Python object's address) and found through a
//! [`Registry`]. Every fallible operation validates first, so after an error
//! the queue is unchanged.

use std::cmp::Ordering;

use crate::error::{Error, Result};
use crate::fifo::{self, Fifo};
use crate::registry::{IdMap, Registry};

/// `IndexError` text of `deque.popleft()` on an empty deque.
pub const FCFS_POP_EMPTY: &str = "pop from an empty deque";
/// `IndexError` text of vLLM's `FCFSRequestQueue.peek_request` when empty.
pub const FCFS_PEEK_EMPTY: &str = "peek from an empty queue";
/// `IndexError` text of vLLM's `PriorityRequestQueue.pop_request` when empty.
pub const PRIO_POP_EMPTY: &str = "pop from empty heap";
/// `IndexError` text of vLLM's `PriorityRequestQueue.peek_request` when empty.
pub const PRIO_PEEK_EMPTY: &str = "peek from empty heap";

/// A real number that is an integer or a non-NaN float, ordered exactly as
/// Python orders `int` and `float` (no rounding when comparing the two).
#[derive(Debug, Clone, Copy)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    /// A float key; `field` names it in the `ValueError` for NaN.
    pub fn float(field: &str, v: f64) -> Result<Num> {
        if v.is_nan() {
            return Err(Error::value(format!("{field} must not be NaN")));
        }
        Ok(Num::Float(v))
    }
}

/// Exact comparison of an integer with a non-NaN float.
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    // 2^63 as f64 is exact; every i64 lies in [-2^63, 2^63).
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if f >= TWO63 {
        return Ordering::Less;
    }
    if f < -TWO63 {
        return Ordering::Greater;
    }
    let t = f.trunc(); // in [-2^63, 2^63): fits i64 exactly
    let ti = t as i64;
    match i.cmp(&ti) {
        Ordering::Equal => {
            let frac = f - t;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

impl Ord for Num {
    fn cmp(&self, other: &Self) -> Ordering {
        match (*self, *other) {
            (Num::Int(a), Num::Int(b)) => a.cmp(&b),
            // NaN is rejected at construction, so partial_cmp always succeeds.
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            (Num::Int(a), Num::Float(b)) => cmp_int_float(a, b),
            (Num::Float(a), Num::Int(b)) => cmp_int_float(b, a).reverse(),
        }
    }
}
impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Num {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Num {}

/// The request id (`crate::request_id`): integers before strings, integers
/// numerically, strings by code point.
pub use crate::request_id::RequestId;

/// Sort key of [`PriorityQueue`]: `(priority, arrival_time, request_id)`
/// ascending, compared lexicographically; insertion order breaks ties.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PriorityKey {
    pub priority: Num,
    pub arrival_time: Num,
    pub request_id: RequestId,
}

/// vLLM's `FCFSRequestQueue` semantics over opaque `(id, payload)` entries.
#[derive(Debug, Clone)]
pub struct FcfsQueue<T> {
    fifo: Fifo<(u64, T)>,
    reg: Registry<fifo::Handle>,
}

impl<T> Default for FcfsQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> FcfsQueue<T> {
    pub fn new() -> Self {
        FcfsQueue {
            fifo: Fifo::new(),
            reg: Registry::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    /// Number of queued entries of object `id`.
    pub fn count(&self, id: u64) -> usize {
        self.reg.get(id).len()
    }

    /// Append at the back (`deque.append`).
    pub fn push_back(&mut self, id: u64, item: T) {
        let h = self.fifo.push_back((id, item));
        self.reg.insert(id, h);
    }

    /// Put at the front (`deque.appendleft`).
    pub fn push_front(&mut self, id: u64, item: T) {
        let h = self.fifo.push_front((id, item));
        self.reg.insert(id, h);
    }

    /// `deque.extendleft(items)`: each goes to the front in turn, so the
    /// batch ends up in reverse order of appearance.
    pub fn extend_front(&mut self, items: impl IntoIterator<Item = (u64, T)>) {
        for (id, item) in items {
            self.push_front(id, item);
        }
    }

    /// Pop the oldest (`deque.popleft`); `Error::Index` when empty.
    pub fn pop_front(&mut self) -> Result<(u64, T)> {
        let (h, &(id, _)) = self
            .fifo
            .front()
            .ok_or_else(|| Error::index(FCFS_POP_EMPTY))?;
        self.reg.remove(id, h);
        Ok(self.fifo.remove(h).expect("front is live"))
    }

    /// The oldest entry; `Error::Index` when empty.
    pub fn peek_front(&self) -> Result<(u64, &T)> {
        self.fifo
            .front()
            .map(|(_, (id, t))| (*id, t))
            .ok_or_else(|| Error::index(FCFS_PEEK_EMPTY))
    }

    /// Remove the first occurrence (in queue order) of `id`; `None` if absent.
    pub fn remove_first(&mut self, id: u64) -> Option<T> {
        let hs = self.reg.get(id);
        let h = *hs
            .iter()
            .min_by_key(|h| self.fifo.position(**h).expect("registered handle is live"))?;
        self.reg.remove(id, h);
        self.fifo.remove(h).map(|(_, t)| t)
    }

    /// Remove every occurrence of every id in `ids` (absent ids are ignored),
    /// like vLLM's filter over `set(requests)`. Returns the removed payloads.
    pub fn remove_all(&mut self, ids: impl IntoIterator<Item = u64>) -> Vec<T> {
        let mut out = Vec::new();
        for id in ids {
            for h in self.reg.take(id) {
                if let Some((_, t)) = self.fifo.remove(h) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// `deque[index]`: negative indices count from the back; out of range
    /// is `Error::Index` with deque's message. O(1) at both ends.
    pub fn get(&self, index: i64) -> Result<&T> {
        let n = self.fifo.len() as i64;
        let i = if index < 0 { index + n } else { index };
        if !(0..n).contains(&i) {
            return Err(Error::index("deque index out of range"));
        }
        Ok(&self.fifo.nth(i as usize).expect("in range").1)
    }

    /// Front-to-back.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, &T)> + '_ {
        self.fifo.iter().map(|(_, (id, t))| (*id, t))
    }

    pub fn clear(&mut self) {
        self.fifo.clear();
        self.reg.clear();
    }
}

/// Order-preserving `u64` image of a key number when it is exactly an `f64`
/// (every float; ints up to 2^53 in magnitude), so most comparisons in the
/// heap are two integer compares on data stored inline in the heap array.
fn fast_bits(n: Num) -> Option<u64> {
    let f = match n {
        Num::Float(f) => f + 0.0, // -0.0 == 0.0
        Num::Int(i) if i.unsigned_abs() <= 1 << 53 => i as f64,
        Num::Int(_) => return None,
    };
    let b = f.to_bits();
    Some(if b >> 63 == 1 { !b } else { b | 1 << 63 })
}

/// One heap element: the compact sort prefix plus the slot it belongs to.
#[derive(Debug, Clone, Copy)]
struct Ent {
    p: u64,
    a: u64,
    seq: u64,
    slot: u32,
    exact: bool,
}

#[derive(Debug, Clone)]
struct PSlot<T> {
    id: u64,
    entry: Option<(PriorityKey, T)>,
}

/// vLLM's `PriorityRequestQueue` semantics over opaque `(id, payload)` entries.
///
/// An indexed binary min-heap specialised for [`PriorityKey`]: the heap array
/// holds `(priority, arrival_time)` as order-preserving integers plus the
/// insertion `seq`, so sifting rarely touches the slots (only on equal
/// `(priority, arrival_time)`, for `request_id`, or for ints beyond 2^53,
/// compared exactly from the full key). Slots give O(log n) removal by id.
#[derive(Debug, Clone)]
pub struct PriorityQueue<T> {
    heap: Vec<Ent>,
    slots: Vec<PSlot<T>>,
    /// Heap position of each slot, apart from the slots so sifting writes to
    /// a small dense array.
    pos: Vec<u32>,
    free: Vec<u32>,
    reg: IdMap<u32>,
    next_seq: u64,
}

impl<T> Default for PriorityQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

fn duplicate() -> Error {
    Error::value("request is already in the priority queue")
}

impl<T> PriorityQueue<T> {
    pub fn new() -> Self {
        PriorityQueue {
            heap: Vec::new(),
            slots: Vec::new(),
            pos: Vec::new(),
            free: Vec::new(),
            reg: IdMap::default(),
            next_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.reg.contains_key(&id)
    }

    fn key(&self, slot: u32) -> &PriorityKey {
        &self.slots[slot as usize]
            .entry
            .as_ref()
            .expect("live slot")
            .0
    }

    /// Total order of heap elements: `(key, seq)`.
    fn cmp_ent(&self, x: &Ent, y: &Ent) -> Ordering {
        let o = if x.exact && y.exact {
            (x.p, x.a).cmp(&(y.p, y.a)).then_with(|| {
                self.key(x.slot)
                    .request_id
                    .cmp(&self.key(y.slot).request_id)
            })
        } else {
            self.key(x.slot).cmp(self.key(y.slot))
        };
        o.then(x.seq.cmp(&y.seq))
    }

    #[inline]
    fn lt(&self, x: &Ent, y: &Ent) -> bool {
        // Fast path: decided by the inline prefix (the common case).
        if x.exact & y.exact {
            if x.p != y.p {
                return x.p < y.p;
            }
            if x.a != y.a {
                return x.a < y.a;
            }
        }
        self.cmp_ent(x, y) == Ordering::Less
    }

    fn place(&mut self, pos: usize, e: Ent) {
        self.heap[pos] = e;
        self.pos[e.slot as usize] = pos as u32;
    }

    fn sift_up(&mut self, mut pos: usize) {
        let e = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let pe = self.heap[parent];
            if !self.lt(&e, &pe) {
                break;
            }
            self.place(pos, pe);
            pos = parent;
        }
        self.place(pos, e);
    }

    /// Take the element at heap position `pos` out; returns its slot's content.
    fn remove_at(&mut self, pos: usize) -> (u64, T) {
        let slot = self.heap[pos].slot;
        let last = self.heap.pop().expect("non-empty");
        let n = self.heap.len();
        if pos < n {
            // Bottom-up deletion: walk the hole down to a leaf along the
            // smaller children (one comparison per level), put `last` there
            // and sift it up (usually a level or two). Correct for any `pos`:
            // everything moved up was >= the removed entry >= its ancestors.
            let mut hole = pos;
            loop {
                let l = 2 * hole + 1;
                if l >= n {
                    break;
                }
                let r = l + 1;
                let c = if r < n && self.lt(&self.heap[r], &self.heap[l]) {
                    r
                } else {
                    l
                };
                let ce = self.heap[c];
                self.place(hole, ce);
                hole = c;
            }
            self.place(hole, last);
            self.sift_up(hole);
        }
        let s = &mut self.slots[slot as usize];
        let id = s.id;
        let (_, t) = s.entry.take().expect("live slot");
        self.free.push(slot);
        self.reg.remove(&id);
        (id, t)
    }

    fn insert(&mut self, id: u64, key: PriorityKey, item: T) {
        let (p, a) = (fast_bits(key.priority), fast_bits(key.arrival_time));
        let pos = self.heap.len() as u32;
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = PSlot {
                    id,
                    entry: Some((key, item)),
                };
                self.pos[i as usize] = pos;
                i
            }
            None => {
                self.slots.push(PSlot {
                    id,
                    entry: Some((key, item)),
                });
                self.pos.push(pos);
                (self.slots.len() - 1) as u32
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Ent {
            p: p.unwrap_or(0),
            a: a.unwrap_or(0),
            seq,
            slot,
            exact: p.is_some() && a.is_some(),
        });
        self.reg.insert(id, slot);
        self.sift_up(pos as usize);
    }

    /// Insert; `Error::Value` (queue unchanged) if `id` is already queued.
    pub fn push(&mut self, id: u64, key: PriorityKey, item: T) -> Result<()> {
        if self.contains(id) {
            return Err(duplicate());
        }
        self.insert(id, key, item);
        Ok(())
    }

    /// Insert a batch in order, all or nothing: a duplicate (against the
    /// queue or within the batch) is an `Error::Value` and nothing is added.
    pub fn push_batch(&mut self, items: Vec<(u64, PriorityKey, T)>) -> Result<()> {
        let mut seen: IdMap<()> = IdMap::default();
        for (id, _, _) in &items {
            if self.contains(*id) || seen.insert(*id, ()).is_some() {
                return Err(duplicate());
            }
        }
        for (id, key, item) in items {
            self.insert(id, key, item);
        }
        Ok(())
    }

    /// Pop the smallest key; `Error::Index` when empty.
    pub fn pop(&mut self) -> Result<(u64, T)> {
        if self.heap.is_empty() {
            return Err(Error::index(PRIO_POP_EMPTY));
        }
        Ok(self.remove_at(0))
    }

    /// The smallest entry; `Error::Index` when empty.
    pub fn peek(&self) -> Result<(u64, &PriorityKey, &T)> {
        let e = self
            .heap
            .first()
            .ok_or_else(|| Error::index(PRIO_PEEK_EMPTY))?;
        let s = &self.slots[e.slot as usize];
        let (k, t) = s.entry.as_ref().expect("live slot");
        Ok((s.id, k, t))
    }

    /// Remove `id` in O(log n); `None` if absent.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let slot = *self.reg.get(&id)?;
        let pos = self.pos[slot as usize] as usize;
        Some(self.remove_at(pos).1)
    }

    /// Remove every present id of `ids`, ignoring absent ones.
    pub fn remove_all(&mut self, ids: impl IntoIterator<Item = u64>) -> Vec<T> {
        ids.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// All entries in priority order, without changing the queue (a sorted
    /// copy of the heap array: O(n log n), mostly inline comparisons).
    pub fn sorted(&self) -> Vec<(u64, &T)> {
        let mut v = self.heap.clone();
        v.sort_unstable_by(|x, y| self.cmp_ent(x, y));
        v.iter()
            .map(|e| {
                let s = &self.slots[e.slot as usize];
                (s.id, &s.entry.as_ref().expect("live slot").1)
            })
            .collect()
    }

    /// Entries in arbitrary order.
    pub fn iter_unordered(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        self.heap.iter().map(|e| {
            let s = &self.slots[e.slot as usize];
            (s.id, &s.entry.as_ref().expect("live slot").1)
        })
    }

    pub fn clear(&mut self) {
        self.heap.clear();
        self.slots.clear();
        self.pos.clear();
        self.free.clear();
        self.reg.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i64, a: f64, r: &str) -> PriorityKey {
        PriorityKey {
            priority: Num::Int(p),
            arrival_time: Num::Float(a),
            request_id: RequestId::Str(r.as_bytes().into()),
        }
    }

    #[test]
    fn num_order_is_exact() {
        use Num::*;
        assert!(Int(1) < Float(1.5));
        assert!(Float(1.5) < Int(2));
        assert_eq!(Int(3), Float(3.0));
        assert!(Int(i64::MAX) < Float(9.3e18));
        assert!(Int(i64::MIN) > Float(-1e19));
        assert!(Int(i64::MIN) == Float(-9_223_372_036_854_775_808.0));
        // 2^53 + 1 is not representable: the int is strictly greater.
        assert!(Int((1 << 53) + 1) > Float((1u64 << 53) as f64));
        assert!(Int(-2) < Float(-1.5));
        assert!(Int(-1) > Float(-1.5));
        assert!(Float(f64::NEG_INFINITY) < Int(i64::MIN));
        assert!(Float(f64::INFINITY) > Int(i64::MAX));
        assert!(Num::float("arrival_time", f64::NAN).is_err());
        assert_eq!(Int(0), Float(-0.0));
    }

    #[test]
    fn request_id_ints_before_strings() {
        assert!(RequestId::Int(i64::MAX) < RequestId::Str(b"".to_vec().into()));
        assert!(RequestId::Str(b"a".to_vec().into()) < RequestId::Str(b"b".to_vec().into()));
        assert!(RequestId::Str(b"a".to_vec().into()) < RequestId::Str(b"ab".to_vec().into()));
    }

    #[test]
    fn fcfs_basic_order_and_prepend_batch() {
        let mut q = FcfsQueue::new();
        assert_eq!(q.pop_front().unwrap_err(), Error::index(FCFS_POP_EMPTY));
        assert_eq!(q.peek_front().unwrap_err(), Error::index(FCFS_PEEK_EMPTY));
        q.push_back(4, 'd');
        q.extend_front([(1, 'a'), (2, 'b'), (3, 'c')]);
        let v: Vec<char> = q.iter().map(|(_, c)| *c).collect();
        assert_eq!(v, ['c', 'b', 'a', 'd']);
        assert_eq!(q.peek_front().unwrap(), (3, &'c'));
        assert_eq!(q.pop_front().unwrap(), (3, 'c'));
        assert_eq!(q.len(), 3);
    }

    #[test]
    fn fcfs_duplicates_remove_first_occurrence() {
        let mut q = FcfsQueue::new();
        q.push_back(1, "x1");
        q.push_back(2, "y");
        q.push_back(1, "x2");
        q.push_front(1, "x0");
        assert_eq!(q.count(1), 3);
        assert_eq!(q.remove_first(1), Some("x0"));
        assert_eq!(q.remove_first(1), Some("x1"));
        assert_eq!(q.remove_first(9), None);
        q.push_back(1, "x3");
        let removed = q.remove_all([1, 7]);
        assert_eq!(removed.len(), 2);
        let v: Vec<&str> = q.iter().map(|(_, s)| *s).collect();
        assert_eq!(v, ["y"]);
        assert_eq!(q.remove_first(2), Some("y"));
        assert!(q.is_empty());
    }

    #[test]
    fn priority_order_ties_and_remove() {
        let mut q = PriorityQueue::new();
        q.push(1, key(1, 0.0, "a"), 'a').unwrap();
        q.push(2, key(0, 5.0, "b"), 'b').unwrap();
        q.push(3, key(0, 5.0, "b"), 'c').unwrap(); // same key: insertion order
        q.push(4, key(0, 1.0, "z"), 'd').unwrap();
        assert_eq!(q.push(4, key(9, 9.0, "q"), 'e'), Err(duplicate()));
        let v: Vec<char> = q.sorted().into_iter().map(|(_, c)| *c).collect();
        assert_eq!(v, ['d', 'b', 'c', 'a']);
        assert_eq!(q.len(), 4);
        assert_eq!(q.remove(2), Some('b'));
        assert_eq!(q.remove(2), None);
        assert_eq!(q.peek().unwrap().2, &'d');
        assert_eq!(q.pop().unwrap(), (4, 'd'));
        assert_eq!(q.remove_all([3, 99]), vec!['c']);
        assert_eq!(q.pop().unwrap(), (1, 'a'));
        assert_eq!(q.pop().unwrap_err(), Error::index(PRIO_POP_EMPTY));
        assert_eq!(q.peek().unwrap_err(), Error::index(PRIO_PEEK_EMPTY));
    }

    #[test]
    fn priority_batch_is_all_or_nothing() {
        let mut q = PriorityQueue::new();
        q.push(1, key(0, 0.0, "a"), 1).unwrap();
        assert!(q
            .push_batch(vec![(2, key(0, 0.0, "b"), 2), (1, key(0, 0.0, "c"), 3)])
            .is_err());
        assert!(q
            .push_batch(vec![(2, key(0, 0.0, "b"), 2), (2, key(0, 0.0, "c"), 3)])
            .is_err());
        assert_eq!(q.len(), 1);
        q.push_batch(vec![(2, key(0, 0.0, "b"), 2), (3, key(-1, 0.0, "c"), 3)])
            .unwrap();
        let v: Vec<i32> = q.sorted().into_iter().map(|(_, x)| *x).collect();
        assert_eq!(v, [3, 1, 2]);
    }

    use crate::testutil::lcg;

    /// Random push / pop / remove / sorted against a sorted-Vec model, with
    /// keys mixing small ints, floats, huge ints (slow path) and id kinds.
    #[test]
    fn priority_matches_sorted_model() {
        let mut x = 7u64;
        for _round in 0..20 {
            let mut q = PriorityQueue::new();
            let mut model: Vec<(PriorityKey, u64, u64)> = Vec::new(); // (key, seq, id)
            let mut seq = 0u64;
            for _ in 0..400 {
                match lcg(&mut x) % 5 {
                    0 | 1 => {
                        let id = lcg(&mut x) % 60;
                        let num = |r: u64| match r % 4 {
                            0 => Num::Int((r % 3) as i64 - 1),
                            1 => Num::Float((r % 5) as f64 * 0.5 - 1.0),
                            2 => Num::Int(i64::MAX - (r % 2) as i64),
                            _ => Num::Float(9.3e18),
                        };
                        let k = PriorityKey {
                            priority: num(lcg(&mut x)),
                            arrival_time: num(lcg(&mut x)),
                            request_id: if lcg(&mut x) % 2 == 0 {
                                RequestId::Int((lcg(&mut x) % 3) as i64)
                            } else {
                                RequestId::Str(vec![b'a' + (lcg(&mut x) % 3) as u8].into())
                            },
                        };
                        let dup = model.iter().any(|m| m.2 == id);
                        assert_eq!(q.push(id, k.clone(), id).is_err(), dup);
                        if !dup {
                            model.push((k, seq, id));
                            seq += 1;
                        }
                    }
                    2 => {
                        model.sort();
                        let got = q.pop().ok().map(|(id, _)| id);
                        let want = (!model.is_empty()).then(|| model.remove(0).2);
                        assert_eq!(got, want);
                    }
                    3 => {
                        let id = lcg(&mut x) % 60;
                        let want = model.iter().position(|m| m.2 == id);
                        assert_eq!(q.remove(id), want.map(|i| model.remove(i).2));
                    }
                    _ => {
                        model.sort();
                        let got: Vec<u64> = q.sorted().into_iter().map(|(id, _)| id).collect();
                        let want: Vec<u64> = model.iter().map(|m| m.2).collect();
                        assert_eq!(got, want);
                        if let Some(m) = model.first() {
                            assert_eq!(q.peek().unwrap().0, m.2);
                        }
                    }
                }
                assert_eq!(q.len(), model.len());
            }
        }
    }
}
