//! [`OrdF64`]: the one total-order float key of the crate.
//!
//! `f64` is only `PartialOrd` (NaN), so ordered containers (`BTreeMap`,
//! `BinaryHeap`, [`crate::heap::IndexedHeap`]) cannot key on it directly.
//! Every sort key that holds a float wraps it in [`OrdF64`] (alone, in a tuple
//! or as a field of a `#[derive(Ord)]` struct) instead of hand-writing
//! `Ord` with `total_cmp`.
//!
//! The order is IEEE 754 `totalOrder` ([`f64::total_cmp`]): `-NaN < -inf <
//! ... < -0.0 < +0.0 < ... < +inf < +NaN`. Callers keep NaN out (the core
//! validates every float it is given) and normalize `-0.0` to `+0.0` where
//! the two must tie ([`OrdF64::new`] does that), so on the values that reach
//! a key the order is the usual numeric one.

use std::cmp::Ordering;

/// A float ordered by [`f64::total_cmp`]; equality agrees with that order
/// (so `OrdF64(0.0) != OrdF64(-0.0)`: build keys with [`OrdF64::new`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct OrdF64(pub f64);

impl OrdF64 {
    /// Wrap `v`, mapping `-0.0` to `+0.0` so the two compare equal.
    #[inline]
    pub fn new(v: f64) -> Self {
        OrdF64(v + 0.0)
    }
    #[inline]
    pub fn get(self) -> f64 {
        self.0
    }
}

impl PartialEq for OrdF64 {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    #[inline]
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    #[inline]
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl From<f64> for OrdF64 {
    fn from(v: f64) -> Self {
        OrdF64::new(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_order_on_floats() {
        let mut v: Vec<OrdF64> = [3.0, -1.0, f64::INFINITY, 0.0, f64::NEG_INFINITY, 2.5]
            .into_iter()
            .map(OrdF64::new)
            .collect();
        v.sort();
        let got: Vec<f64> = v.iter().map(|x| x.get()).collect();
        assert_eq!(got, [f64::NEG_INFINITY, -1.0, 0.0, 2.5, 3.0, f64::INFINITY]);
        assert_eq!(OrdF64::new(-0.0), OrdF64::new(0.0));
        assert!(OrdF64(-0.0) < OrdF64(0.0));
        assert!(OrdF64(f64::NAN) > OrdF64(f64::INFINITY));
        // in derived keys
        assert!((OrdF64::new(1.0), 2u32) < (OrdF64::new(1.0), 3u32));
    }
}
