//! Agreed placement: routers that do not yet see each other's latest
//! dispatches choose alike for a prefix none of them has placed.
//!
//! D2LPM's last step sends a request to the least-loaded candidate (ties: the
//! lowest slot). Several routers in front of the same workers each count
//! loads from their own dispatches plus a shared view that lags by up to
//! seconds, so for a new document they often disagree on the least-loaded
//! worker and place it on two; both then hold it, stay candidates for it,
//! and the caches hold more than their share (measured in
//! `docs/results/ray_vllm.md`). With `placement_slack = k > 0` the choice
//! among the candidates whose load is within `k` of the least is made by
//! rendezvous hashing instead: each candidate scores
//! `mix(prefix key, worker key)` and the highest wins, so routers whose
//! loads differ by less than `k` agree without talking. The prefix key
//! hashes the [`KEY_TOKENS`] tokens after the longest prefix some worker
//! already holds (the document's own first tokens: what a router that has
//! not seen the document yet matches too); the worker key hashes the
//! worker's name (the same replica has the same name in every router,
//! whatever slot it took), or its slot when it has none. `k = 0` is the
//! paper's rule, unchanged.

use super::baselines::argmin;
use crate::hash::FastHasher;
use std::hash::Hasher;

/// Tokens after the matched prefix that make a request's prefix key.
pub const KEY_TOKENS: usize = 64;

/// SplitMix64's finalizer: a bijection of `u64` whose every output bit
/// depends on every input bit.
fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The key of a worker slot without a name.
pub fn slot_key(worker: usize) -> u64 {
    mix64(worker as u64 ^ 0x5EED_0F51_07C0_FFEE)
}

/// The key of a worker named `name` (the same in every process).
pub fn name_key(name: &str) -> u64 {
    let mut h = FastHasher::default();
    h.write(name.as_bytes());
    h.write_usize(name.len());
    mix64(h.finish())
}

/// The prefix key of `tokens` whose first `matched` tokens some worker
/// holds: the next [`KEY_TOKENS`] tokens, or the last ones when all match.
pub fn prefix_key(tokens: &[u32], matched: usize) -> u64 {
    let n = tokens.len();
    let start = if matched < n {
        matched
    } else {
        n.saturating_sub(KEY_TOKENS)
    };
    let mut h = FastHasher::default();
    for &t in &tokens[start..n.min(start + KEY_TOKENS)] {
        h.write_u32(t);
    }
    mix64(h.finish())
}

/// How the last step of a dispatch picks among its candidates.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    /// Load above the least within which candidates are hashed (0: none).
    pub slack: u64,
    /// The request's [`prefix_key`].
    pub prefix: u64,
    /// Each worker slot's key ([`slot_key`] or [`name_key`]).
    pub keys: &'a [u64],
}

impl Placement<'_> {
    /// The paper's rule: least loaded, lowest slot on ties.
    pub const LEAST_LOADED: Placement<'static> = Placement {
        slack: 0,
        prefix: 0,
        keys: &[],
    };

    /// The chosen member of `workers` (`None` if there is none): the least
    /// loaded with `slack` 0; else, among those loaded at most `slack` above
    /// the least, the highest rendezvous score (then the lowest slot).
    pub fn choose(&self, load: &[u64], workers: impl Iterator<Item = usize>) -> Option<usize> {
        if self.slack == 0 {
            return argmin(load, workers);
        }
        let workers: Vec<usize> = workers.collect();
        let least = argmin(load, workers.iter().copied())?;
        let bound = load[least].saturating_add(self.slack);
        let score = |w: usize| mix64(self.prefix ^ self.keys[w]);
        let mut best = least;
        let mut best_score = score(least);
        for w in workers.into_iter().filter(|&w| load[w] <= bound) {
            let s = score(w);
            if s > best_score || (s == best_score && w < best) {
                best = w;
                best_score = s;
            }
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<u64> {
        (0..n).map(slot_key).collect()
    }

    #[test]
    fn zero_slack_is_least_loaded_lowest_slot() {
        let load = [3, 1, 1, 2];
        assert_eq!(Placement::LEAST_LOADED.choose(&load, 0..4), Some(1));
        assert_eq!(
            Placement::LEAST_LOADED.choose(&load, [0, 3].into_iter()),
            Some(3)
        );
        assert_eq!(Placement::LEAST_LOADED.choose(&load, 0..0), None);
    }

    #[test]
    fn slack_bounds_the_load_and_ignores_small_differences() {
        let k = keys(8);
        for prefix in 0..200u64 {
            let p = Placement {
                slack: 2,
                prefix: mix64(prefix),
                keys: &k,
            };
            let a = [5, 3, 4, 9, 3, 5, 10, 4];
            let w = p.choose(&a, 0..8).unwrap();
            assert!(a[w] <= 3 + 2, "{w} over the bound");
            // another router that counts one more request here and there
            // (within the slack of everyone's least load) picks the same
            let b = [5, 4, 4, 9, 3, 5, 10, 5];
            assert_eq!(p.choose(&b, 0..8), Some(w));
        }
    }

    #[test]
    fn prefix_key_reads_the_tokens_after_the_match() {
        let sys: Vec<u32> = (0..10).collect();
        let doc =
            |d: u32| -> Vec<u32> { sys.iter().copied().chain(d * 100..d * 100 + 80).collect() };
        // the same document, matched up to the system prompt or not at all
        assert_eq!(prefix_key(&doc(1), 10), prefix_key(&doc(1)[10..], 0));
        assert_ne!(prefix_key(&doc(1), 10), prefix_key(&doc(2), 10));
        // a fully matched prompt keys on its last tokens
        assert_eq!(prefix_key(&doc(1), 90), prefix_key(&doc(1)[26..], 0));
        assert_eq!(prefix_key(&[], 0), prefix_key(&[], 0));
    }

    #[test]
    fn names_key_alike_everywhere_and_spread_documents() {
        assert_eq!(name_key("replica-a"), name_key("replica-a"));
        assert_ne!(name_key("replica-a"), name_key("replica-b"));
        let k = [name_key("replica-a"), name_key("replica-b")];
        let load = [0, 0];
        let on_a = (0..1000u32)
            .filter(|d| {
                let p = Placement {
                    slack: 1,
                    prefix: prefix_key(&[*d, d + 1], 0),
                    keys: &k,
                };
                p.choose(&load, 0..2) == Some(0)
            })
            .count();
        assert!((400..600).contains(&on_a), "{on_a} of 1000 on one worker");
    }

    mod routers {
        use super::super::super::{D2lpmConfig, Dispatcher, RequestId};

        fn router(slack: u64, names: &[&str]) -> Dispatcher {
            let cfg = D2lpmConfig {
                placement_slack: slack,
                ..D2lpmConfig::new(f64::INFINITY)
            };
            let mut d = Dispatcher::d2lpm(names.len(), cfg).unwrap();
            for (w, n) in names.iter().enumerate() {
                d.set_worker_name(w, n).unwrap();
            }
            d
        }

        fn doc(system: &[u32], d: u32) -> Vec<u32> {
            system
                .iter()
                .copied()
                .chain(1000 * d..1000 * d + 100)
                .collect()
        }

        /// Two routers whose loads differ (each counts its own busy work)
        /// and whose slots hold the replicas in different orders: with a
        /// slack they place every new document on the same replica; with
        /// none (the paper's rule) they split documents by their own loads.
        #[test]
        fn routers_agree_on_new_documents_within_the_slack() {
            let system: Vec<u32> = (0..50).collect();
            let agreed = |slack: u64| -> usize {
                let mut a = router(slack, &["r0", "r1", "r2"]);
                let mut b = router(slack, &["r2", "r0", "r1"]);
                let slot_b = [1, 2, 0]; // a's slot -> b's slot of the same replica
                                        // the system prompt is everywhere; a is busier on r0, b on r2
                for w in 0..3 {
                    a.dispatch_among(RequestId::Int(w), "s", &system, &[w as usize])
                        .unwrap();
                    b.dispatch_among(RequestId::Int(w), "s", &system, &[w as usize])
                        .unwrap();
                }
                a.dispatch_among(RequestId::Int(9), "busy", &[7], &[0])
                    .unwrap();
                b.dispatch_among(RequestId::Int(9), "busy", &[7], &[0])
                    .unwrap();
                (0..60u32)
                    .filter(|&d| {
                        let t = doc(&system, d + 1);
                        let id = RequestId::Int(100 + i64::from(d));
                        let wa = a.dispatch(id.clone(), "c", &t).unwrap();
                        let wb = b.dispatch(id.clone(), "c", &t).unwrap();
                        a.on_finish(&id, 0).unwrap();
                        b.on_finish(&id, 0).unwrap();
                        slot_b[wa] == wb
                    })
                    .count()
            };
            assert_eq!(agreed(2), 60);
            assert!(agreed(0) < 30, "{}", agreed(0));
        }

        #[test]
        fn a_named_slot_and_the_slack_survive_a_restore() {
            let mut a = router(3, &["x", "y"]);
            let t: Vec<u32> = (0..20).collect();
            a.dispatch(RequestId::Int(1), "c", &t).unwrap();
            let mut b = router(0, &["p", "q"]);
            b.remove_worker(0).unwrap();
            let st = a.state(true).unwrap();
            b.load_state(&st).unwrap();
            assert_eq!(b.state(true).unwrap(), st);
            // never named: no keys in the document
            let plain = Dispatcher::d2lpm(2, D2lpmConfig::new(5.0)).unwrap();
            let doc = format!("{:?}", plain.state(true).unwrap());
            assert!(!doc.contains("worker_keys") && !doc.contains("placement_slack"));
        }
    }
}
