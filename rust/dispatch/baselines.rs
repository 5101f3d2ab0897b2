//! Baseline dispatchers: shared helpers and the prefix-affinity rule.
//!
//! Round-robin, least-loaded and per-client round-robin are a few lines each
//! and live inline in [`super::Dispatcher::dispatch`]. Prefix affinity is the
//! SGLang-router / Preble style: send the request to the worker with the best
//! prefix match unless the load is imbalanced
//! (`max_load - min_load > abs_threshold` and `max_load > rel_threshold *
//! min_load`) or the match ratio `matched / input_len` is below
//! `match_threshold`; then send it to the least-loaded worker.

use super::tree::WorkerSet;
use super::{check_fraction, check_weight, match_counts};
use crate::error::Result;

/// The lowest-`load` member of `workers` (the first one on ties), `None` if
/// there is none: the one least-loaded choice of every dispatcher.
pub fn argmin(load: &[u64], workers: impl Iterator<Item = usize>) -> Option<usize> {
    let mut best: Option<usize> = None;
    for w in workers {
        if best.map_or(true, |b| load[w] < load[b]) {
            best = Some(w);
        }
    }
    best
}

/// Prefix-affinity thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AffinityConfig {
    /// Load gap (in queued requests) above which affinity is abandoned.
    pub abs_threshold: f64,
    /// ... and only if `max_load > rel_threshold * min_load` as well.
    pub rel_threshold: f64,
    /// Below this `matched / input_len`, go to the least-loaded worker.
    pub match_threshold: f64,
}

impl Default for AffinityConfig {
    /// SGLang router's cache-aware defaults: abs 32, rel 1.5, cache 0.5.
    fn default() -> Self {
        AffinityConfig {
            abs_threshold: 32.0,
            rel_threshold: 1.5,
            match_threshold: 0.5,
        }
    }
}

impl AffinityConfig {
    pub fn validate(&self) -> Result<()> {
        check_weight("abs_threshold", self.abs_threshold)?;
        check_weight("rel_threshold", self.rel_threshold)?;
        check_fraction("match_threshold", self.match_threshold)?;
        Ok(())
    }

    /// Choose a worker given the longest match (`matched` tokens held by `g`).
    pub fn select(&self, matched: usize, input_len: usize, g: &WorkerSet, load: &[u64]) -> usize {
        let n = load.len();
        let max = *load.iter().max().expect("workers") as f64;
        let min = *load.iter().min().expect("workers") as f64;
        let imbalanced = max - min > self.abs_threshold && max > self.rel_threshold * min;
        if imbalanced || !match_counts(matched, input_len, self.match_threshold) {
            argmin(load, 0..n).expect("at least one worker")
        } else {
            argmin(load, g.iter()).expect("a match is held by some worker")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Dispatcher, RequestId};
    use super::*;

    #[test]
    fn affinity_escapes_on_imbalance_and_short_match() {
        let cfg = AffinityConfig {
            abs_threshold: 2.0,
            rel_threshold: 1.5,
            match_threshold: 0.5,
        };
        let mut d = Dispatcher::prefix_affinity(2, cfg).unwrap();
        let p: Vec<u32> = (0..10).collect();
        assert_eq!(d.dispatch(RequestId::Int(0), "a", &p).unwrap(), 0);
        assert_eq!(d.dispatch(RequestId::Int(1), "a", &p).unwrap(), 0);
        assert_eq!(d.dispatch(RequestId::Int(2), "a", &p).unwrap(), 0);
        // load (3, 0): gap 3 > 2 and 3 > 1.5*0 -> least loaded
        assert_eq!(d.dispatch(RequestId::Int(3), "a", &p).unwrap(), 1);
        // a short match (2 of 10 tokens) goes to the least loaded worker
        let q: Vec<u32> = vec![0, 1, 90, 91, 92, 93, 94, 95, 96, 97];
        d.on_finish(&RequestId::Int(0), 1).unwrap();
        d.on_finish(&RequestId::Int(1), 1).unwrap();
        // load (1, 1): tie -> 0 even though both hold [0, 1]
        assert_eq!(d.dispatch(RequestId::Int(4), "b", &q).unwrap(), 0);
        assert!(AffinityConfig {
            match_threshold: 1.5,
            ..cfg
        }
        .validate()
        .is_err());
    }
}
