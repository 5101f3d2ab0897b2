//! Indexed binary min-heap with stable handles.
//!
//! Entries are ordered by `(key, seq)`: `key` is any `Ord` type chosen by the
//! policy (wrap it in [`std::cmp::Reverse`] for a max-heap) and `seq` is the
//! insertion sequence number, so the order is total and deterministic.
//! Every entry gets a [`Handle`] that stays valid until the entry leaves the
//! heap, which makes remove-by-handle and re-key O(log n). Handles carry a
//! generation so a stale handle is detected instead of touching a reused slot.
//!
//! [`IndexedHeap::iter_sorted`] walks the entries in order without mutating
//! the heap: a best-first traversal of the implicit tree, O(k log k) for the
//! first k entries.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Stable reference to a heap entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    idx: u32,
    gen: u32,
}

impl Handle {
    /// Slot index; unique among live entries of one heap.
    pub fn index(self) -> usize {
        self.idx as usize
    }
}

const FREE: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Slot<K, V> {
    gen: u32,
    /// Position in `order`, or `FREE` when the slot is vacant.
    pos: u32,
    seq: u64,
    entry: Option<(K, V)>,
}

/// A min-heap over `(key, seq)` with O(log n) push, pop, remove and re-key.
#[derive(Debug, Clone)]
pub struct IndexedHeap<K, V> {
    order: Vec<u32>,
    slots: Vec<Slot<K, V>>,
    free: Vec<u32>,
    next_seq: u64,
}

impl<K: Ord, V> Default for IndexedHeap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord, V> IndexedHeap<K, V> {
    pub fn new() -> Self {
        IndexedHeap {
            order: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }

    pub fn with_capacity(n: usize) -> Self {
        IndexedHeap {
            order: Vec::with_capacity(n),
            slots: Vec::with_capacity(n),
            free: Vec::new(),
            next_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The sequence number the next [`push`](Self::push) will use.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Insert with a fresh insertion sequence number.
    pub fn push(&mut self, key: K, value: V) -> Handle {
        let seq = self.next_seq;
        self.push_with_seq(key, seq, value)
    }

    /// Insert with an explicit sequence number (e.g. to put back a request at
    /// its original place among equal keys). Later `push` calls always get a
    /// larger sequence number than any seen so far.
    pub fn push_with_seq(&mut self, key: K, seq: u64, value: V) -> Handle {
        self.next_seq = self.next_seq.max(seq.saturating_add(1));
        let pos = self.order.len() as u32;
        let idx = match self.free.pop() {
            Some(i) => {
                let s = &mut self.slots[i as usize];
                s.pos = pos;
                s.seq = seq;
                s.entry = Some((key, value));
                i
            }
            None => {
                assert!(self.slots.len() < FREE as usize, "IndexedHeap is full");
                self.slots.push(Slot {
                    gen: 0,
                    pos,
                    seq,
                    entry: Some((key, value)),
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.order.push(idx);
        self.sift_up(pos as usize);
        Handle {
            idx,
            gen: self.slots[idx as usize].gen,
        }
    }

    pub fn contains(&self, h: Handle) -> bool {
        self.slot(h).is_some()
    }

    fn slot(&self, h: Handle) -> Option<&Slot<K, V>> {
        self.slots
            .get(h.idx as usize)
            .filter(|s| s.gen == h.gen && s.pos != FREE)
    }

    pub fn get(&self, h: Handle) -> Option<(&K, &V)> {
        self.slot(h)
            .and_then(|s| s.entry.as_ref())
            .map(|(k, v)| (k, v))
    }

    pub fn seq_of(&self, h: Handle) -> Option<u64> {
        self.slot(h).map(|s| s.seq)
    }

    /// Mutable access to the value (not the key: use [`rekey`](Self::rekey)).
    pub fn get_mut(&mut self, h: Handle) -> Option<&mut V> {
        let ok = self.slot(h).is_some();
        if !ok {
            return None;
        }
        self.slots[h.idx as usize].entry.as_mut().map(|(_, v)| v)
    }

    pub fn peek(&self) -> Option<(Handle, &K, &V)> {
        let idx = *self.order.first()?;
        let s = &self.slots[idx as usize];
        let (k, v) = s.entry.as_ref()?;
        Some((Handle { idx, gen: s.gen }, k, v))
    }

    pub fn peek_handle(&self) -> Option<Handle> {
        self.peek().map(|(h, _, _)| h)
    }

    pub fn pop(&mut self) -> Option<(K, V)> {
        let h = self.peek_handle()?;
        self.remove(h)
    }

    /// Remove an entry by handle; `None` if the handle is stale.
    pub fn remove(&mut self, h: Handle) -> Option<(K, V)> {
        self.slot(h)?;
        let pos = self.slots[h.idx as usize].pos as usize;
        let last = self.order.len() - 1;
        self.swap(pos, last);
        self.order.pop();
        let s = &mut self.slots[h.idx as usize];
        s.pos = FREE;
        s.gen = s.gen.wrapping_add(1);
        let entry = s.entry.take();
        self.free.push(h.idx);
        if pos < self.order.len() {
            // The entry now at `pos` came from the bottom of the heap, so it
            // most likely belongs near the bottom again: Floyd's bottom-up
            // deletion (walk the hole to a leaf, then sift up) needs about
            // half the comparisons of a plain sift-down.
            if pos > 0 && self.less(pos, (pos - 1) / 2) {
                self.sift_up(pos);
            } else {
                self.sift_down_to_leaf(pos);
            }
        }
        entry
    }

    /// Change an entry's key, keeping its sequence number. Returns the old key.
    pub fn rekey(&mut self, h: Handle, key: K) -> Option<K> {
        self.slot(h)?;
        let s = &mut self.slots[h.idx as usize];
        let pos = s.pos as usize;
        let (k, _) = s.entry.as_mut()?;
        let old = std::mem::replace(k, key);
        self.restore(pos);
        Some(old)
    }

    /// Remove everything, keeping the sequence counter.
    pub fn clear(&mut self) {
        self.order.clear();
        self.slots.clear();
        self.free.clear();
    }

    /// Entries in heap-array order (arbitrary, O(n), no allocation).
    pub fn iter_unordered(&self) -> impl Iterator<Item = (Handle, &K, &V)> + '_ {
        self.order.iter().map(move |&idx| {
            let s = &self.slots[idx as usize];
            let (k, v) = s.entry.as_ref().expect("live slot");
            (Handle { idx, gen: s.gen }, k, v)
        })
    }

    /// Entries in `(key, seq)` order without mutating the heap.
    pub fn iter_sorted(&self) -> SortedIter<'_, K, V> {
        let mut frontier = BinaryHeap::new();
        if !self.order.is_empty() {
            frontier.push(self.cand(0));
        }
        SortedIter {
            heap: self,
            frontier,
        }
    }

    fn cand(&self, pos: usize) -> Cand<'_, K> {
        let s = &self.slots[self.order[pos] as usize];
        Cand {
            key: &s.entry.as_ref().expect("live slot").0,
            seq: s.seq,
            pos,
        }
    }

    fn less(&self, a: usize, b: usize) -> bool {
        let sa = &self.slots[self.order[a] as usize];
        let sb = &self.slots[self.order[b] as usize];
        let ka = &sa.entry.as_ref().expect("live slot").0;
        let kb = &sb.entry.as_ref().expect("live slot").0;
        match ka.cmp(kb) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => sa.seq < sb.seq,
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.order.swap(a, b);
        self.slots[self.order[a] as usize].pos = a as u32;
        self.slots[self.order[b] as usize].pos = b as u32;
    }

    fn restore(&mut self, pos: usize) {
        if pos > 0 && self.less(pos, (pos - 1) / 2) {
            self.sift_up(pos);
        } else {
            self.sift_down(pos);
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if self.less(pos, parent) {
                self.swap(pos, parent);
                pos = parent;
            } else {
                break;
            }
        }
    }

    /// Move the entry at `pos` down along the path of smaller children to a
    /// leaf, then up to its place (one comparison per level going down).
    fn sift_down_to_leaf(&mut self, mut pos: usize) {
        while let Some(child) = self.smaller_child(pos) {
            self.swap(pos, child);
            pos = child;
        }
        self.sift_up(pos);
    }

    fn sift_down(&mut self, mut pos: usize) {
        while let Some(child) = self.smaller_child(pos) {
            if !self.less(child, pos) {
                break;
            }
            self.swap(pos, child);
            pos = child;
        }
    }

    /// The smaller child of the entry at `pos` (the left one on a tie), if
    /// it has one.
    fn smaller_child(&self, pos: usize) -> Option<usize> {
        let (l, n) = (2 * pos + 1, self.order.len());
        if l >= n {
            return None;
        }
        let r = l + 1;
        Some(if r < n && self.less(r, l) { r } else { l })
    }
}

struct Cand<'a, K> {
    key: &'a K,
    seq: u64,
    pos: usize,
}

impl<K: Ord> PartialEq for Cand<'_, K> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<K: Ord> Eq for Cand<'_, K> {}
impl<K: Ord> PartialOrd for Cand<'_, K> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<K: Ord> Ord for Cand<'_, K> {
    // Reversed so std's max-heap pops the smallest (key, seq).
    fn cmp(&self, o: &Self) -> Ordering {
        o.key.cmp(self.key).then(o.seq.cmp(&self.seq))
    }
}

/// Iterator returned by [`IndexedHeap::iter_sorted`].
pub struct SortedIter<'a, K, V> {
    heap: &'a IndexedHeap<K, V>,
    frontier: BinaryHeap<Cand<'a, K>>,
}

impl<'a, K: Ord, V> Iterator for SortedIter<'a, K, V> {
    type Item = (Handle, &'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        let c = self.frontier.pop()?;
        let n = self.heap.order.len();
        for child in [2 * c.pos + 1, 2 * c.pos + 2] {
            if child < n {
                self.frontier.push(self.heap.cand(child));
            }
        }
        let idx = self.heap.order[c.pos];
        let s = &self.heap.slots[idx as usize];
        let (k, v) = s.entry.as_ref().expect("live slot");
        Some((Handle { idx, gen: s.gen }, k, v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.heap.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;

    use crate::testutil::lcg;

    #[test]
    fn pops_in_key_then_insertion_order() {
        let mut h = IndexedHeap::new();
        h.push(3, "c");
        h.push(1, "a1");
        h.push(2, "b");
        h.push(1, "a2");
        let out: Vec<_> = std::iter::from_fn(|| h.pop().map(|(_, v)| v)).collect();
        assert_eq!(out, vec!["a1", "a2", "b", "c"]);
    }

    #[test]
    fn max_heap_via_reverse() {
        let mut h = IndexedHeap::new();
        for k in [5, 9, 1] {
            h.push(Reverse(k), k);
        }
        assert_eq!(h.pop().unwrap().1, 9);
    }

    #[test]
    fn remove_rekey_and_stale_handles() {
        let mut h = IndexedHeap::new();
        let a = h.push(10, 'a');
        let b = h.push(20, 'b');
        let c = h.push(30, 'c');
        assert_eq!(h.remove(b), Some((20, 'b')));
        assert_eq!(h.remove(b), None, "stale handle");
        assert!(!h.contains(b));
        assert_eq!(h.rekey(c, 5), Some(30));
        assert_eq!(h.peek().unwrap().2, &'c');
        let d = h.push(1, 'd'); // reuses b's slot, new generation
        assert_eq!(d.index(), b.index());
        assert!(h.get(b).is_none());
        assert_eq!(h.get(d), Some((&1, &'d')));
        assert_eq!(h.get(a), Some((&10, &'a')));
        let sorted: Vec<_> = h.iter_sorted().map(|(_, _, v)| *v).collect();
        assert_eq!(sorted, vec!['d', 'c', 'a']);
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn random_ops_match_sorted_vec_model() {
        let mut rng = 42u64;
        let mut h: IndexedHeap<u64, u64> = IndexedHeap::new();
        let mut model: Vec<(u64, u64, Handle)> = Vec::new(); // (key, seq, handle)
        for step in 0..20_000u64 {
            match lcg(&mut rng) % 5 {
                0 | 1 => {
                    let k = lcg(&mut rng) % 50;
                    let seq = h.next_seq();
                    let hd = h.push(k, step);
                    model.push((k, seq, hd));
                }
                2 => {
                    model.sort_by_key(|t| (t.0, t.1));
                    let got = h.pop().map(|(k, _)| k);
                    let want = if model.is_empty() {
                        None
                    } else {
                        Some(model.remove(0).0)
                    };
                    assert_eq!(got, want);
                }
                3 if !model.is_empty() => {
                    let i = (lcg(&mut rng) as usize) % model.len();
                    let (k, _, hd) = model.swap_remove(i);
                    assert_eq!(h.remove(hd).map(|(k, _)| k), Some(k));
                }
                4 if !model.is_empty() => {
                    let i = (lcg(&mut rng) as usize) % model.len();
                    let nk = lcg(&mut rng) % 50;
                    model[i].0 = nk;
                    h.rekey(model[i].2, nk).unwrap();
                }
                _ => {}
            }
            assert_eq!(h.len(), model.len());
            if step % 997 == 0 {
                let mut m = model.clone();
                m.sort_by_key(|t| (t.0, t.1));
                let it: Vec<Handle> = h.iter_sorted().map(|(hd, _, _)| hd).collect();
                let want: Vec<Handle> = m.iter().map(|t| t.2).collect();
                assert_eq!(it, want);
            }
        }
    }
}
