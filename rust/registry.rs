//! Identity registry: opaque `u64` object id -> the queue entry handle(s).
//!
//! The binding layer uses a Python object's address as its id (the queue holds
//! a strong reference while the object is queued, so the address cannot be
//! reused meanwhile). The core never interprets ids; it only needs them to be
//! equal exactly for the same object. Lookup, insert and remove are O(1)
//! expected. One id may map to several handles (vLLM's FCFS queue is a deque,
//! which accepts the same object twice); the common single-handle case stores
//! no heap allocation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for object ids (addresses): one multiply-fold, far cheaper than
/// SipHash and well mixed in both the low and the high bits.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }
    fn write_u64(&mut self, x: u64) {
        let x = x ^ self.0;
        // Bucket index (low bits): the 4 KiB page of the address, mixed,
        // plus the 16-byte slot inside the page. Objects allocated one
        // after another (requests arriving in order, usually in the same
        // allocator pool) land in neighbouring buckets, so FIFO traffic stays
        // in cache, while addresses with large power-of-two strides still
        // spread over the table. Tag (top 7 bits): a mix of the whole address.
        let page = fold(x >> 12);
        let index = page.wrapping_add((x >> 4) & 0xFF);
        const TOP7: u64 = !(u64::MAX >> 7);
        self.0 = (index & !TOP7) | (fold(x) & TOP7);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

fn fold(x: u64) -> u64 {
    let m = u128::from(x) * 0x9E37_79B9_7F4A_7C15_u128;
    (m as u64) ^ ((m >> 64) as u64)
}

/// `HashMap` keyed by object id with [`IdHasher`].
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

#[derive(Debug, Clone)]
enum Slot<H> {
    One(H),
    Many(Vec<H>),
}

/// Map from object id to the handles of its live entries.
#[derive(Debug, Clone)]
pub struct Registry<H> {
    map: IdMap<Slot<H>>,
    entries: usize,
}

impl<H: Copy + Eq> Default for Registry<H> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Copy + Eq> Registry<H> {
    pub fn new() -> Self {
        Registry {
            map: IdMap::default(),
            entries: 0,
        }
    }

    /// Number of (id, handle) pairs.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Number of distinct ids.
    pub fn distinct(&self) -> usize {
        self.map.len()
    }

    pub fn contains(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    /// Handles registered for `id` (empty if none), in no particular order.
    pub fn get(&self, id: u64) -> &[H] {
        match self.map.get(&id) {
            None => &[],
            Some(Slot::One(h)) => std::slice::from_ref(h),
            Some(Slot::Many(v)) => v,
        }
    }

    /// Register one more handle for `id`.
    pub fn insert(&mut self, id: u64, h: H) {
        use std::collections::hash_map::Entry;
        match self.map.entry(id) {
            Entry::Vacant(e) => {
                e.insert(Slot::One(h));
            }
            Entry::Occupied(mut e) => {
                let s = e.get_mut();
                match s {
                    Slot::One(old) => *s = Slot::Many(vec![*old, h]),
                    Slot::Many(v) => v.push(h),
                }
            }
        }
        self.entries += 1;
    }

    /// Unregister handle `h` of `id`; false if it was not registered.
    pub fn remove(&mut self, id: u64, h: H) -> bool {
        use std::collections::hash_map::Entry;
        let Entry::Occupied(mut e) = self.map.entry(id) else {
            return false;
        };
        let removed = match e.get_mut() {
            Slot::One(old) => {
                if *old != h {
                    return false;
                }
                e.remove();
                true
            }
            Slot::Many(v) => match v.iter().position(|x| *x == h) {
                None => false,
                Some(i) => {
                    v.swap_remove(i);
                    if v.len() == 1 {
                        let last = v[0];
                        *e.get_mut() = Slot::One(last);
                    }
                    true
                }
            },
        };
        if removed {
            self.entries -= 1;
        }
        removed
    }

    /// Unregister every handle of `id`, returning them.
    pub fn take(&mut self, id: u64) -> Vec<H> {
        match self.map.remove(&id) {
            None => Vec::new(),
            Some(Slot::One(h)) => {
                self.entries -= 1;
                vec![h]
            }
            Some(Slot::Many(v)) => {
                self.entries -= v.len();
                v
            }
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.entries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_and_many() {
        let mut r: Registry<u32> = Registry::new();
        assert!(r.is_empty());
        r.insert(7, 1);
        assert_eq!(r.get(7), &[1]);
        r.insert(7, 2);
        r.insert(9, 3);
        assert_eq!(r.get(7), &[1, 2]); // insertion order until a removal
        assert_eq!((r.len(), r.distinct()), (3, 2));
        assert!(!r.remove(7, 5));
        assert!(r.remove(7, 1));
        assert_eq!(r.get(7), &[2]);
        assert!(r.remove(7, 2));
        assert!(!r.contains(7));
        assert!(r.get(7).is_empty());
        assert_eq!(r.take(9), vec![3]);
        assert!(r.is_empty());
        assert!(r.take(9).is_empty());
        assert!(!r.remove(1, 1));
    }

    #[test]
    fn take_many() {
        let mut r: Registry<u32> = Registry::new();
        for h in 0..5 {
            r.insert(1, h);
        }
        r.insert(2, 9);
        assert_eq!(r.take(1), vec![0, 1, 2, 3, 4]);
        assert_eq!(r.len(), 1);
        r.clear();
        assert!(r.is_empty());
    }

    #[test]
    fn hasher_spreads_aligned_addresses() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<IdHasher>::default();
        let hs: std::collections::HashSet<u64> = (0..1000u64)
            .map(|i| b.hash_one(0x7f00_0000_0000 + i * 16) >> 57)
            .collect();
        assert!(hs.len() > 64, "top bits poorly mixed: {}", hs.len());
        // Large power-of-two strides still spread over the bucket index.
        let low: std::collections::HashSet<u64> =
            (0..1000u64).map(|i| b.hash_one(i << 20) & 0xFFFF).collect();
        assert!(low.len() > 900, "strided addresses collide: {}", low.len());
        // Neighbouring small objects get neighbouring buckets.
        let (h0, h1) = (
            b.hash_one(0x7f00_0000_1040u64),
            b.hash_one(0x7f00_0000_1080u64),
        );
        assert_eq!((h1 & 0xFFFF) - (h0 & 0xFFFF), 4);
    }

    #[test]
    fn strided_ids_stay_fast() {
        let mut r: Registry<u32> = Registry::new();
        for i in 0..100_000u64 {
            r.insert(i << 20, i as u32);
        }
        for i in 0..100_000u64 {
            assert!(r.remove(i << 20, i as u32));
        }
        assert!(r.is_empty());
    }
}
