//! The one fast hasher of the core: maps keyed by integers the process
//! chooses itself (token pages, node ids, flow ids, object addresses), where
//! SipHash's DoS resistance buys nothing and costs a lot.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A small fast hasher for integer-like keys (flow ids, object addresses):
/// multiply-rotate per word, high bits folded into the low ones at the end so
/// aligned pointers do not cluster. Not DoS-resistant; keys here are chosen
/// by the process, not by remote input.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(23) ^ v).wrapping_mul(MIX);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_addresses_spread_over_low_bits() {
        let b = BuildHasherDefault::<FastHasher>::default();
        let mut low = std::collections::HashSet::new();
        for i in 0..1024u64 {
            low.insert(b.hash_one(0x7f00_0000_0000 + i * 64) & 1023);
        }
        assert!(low.len() > 600, "only {} distinct buckets", low.len());
    }
}
