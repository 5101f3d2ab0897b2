//! Helpers shared by the core's unit tests (compiled only under `cargo test`).

/// Tiny deterministic PRNG (a 64-bit LCG, high bits out): reproducible random
/// operation sequences without an external crate.
pub fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}
