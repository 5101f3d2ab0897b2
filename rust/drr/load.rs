//! Dispatchability from worker load: which class heads are blocked because
//! their worker pool counts as busy (Dynamo's thresholds, [`BusyRule`]).
//!
//! A pop with a [`LoadSnapshot`] of W workers evaluates each distinct busy
//! rule of the profile at most once (lazily, only when the arbitration asks
//! about a class using it), each evaluation one pass over the workers that
//! stops once the pool's answer is decided. Cost per pop: O(C + R * W), R =
//! number of distinct rules (a constant of the profile; classes without a
//! threshold need none). Every worker in the snapshot counts as eligible for
//! every class; a caller with per-request eligibility passes the eligible
//! workers' loads (or uses the dispatchable closure).
//!
//! Exact O(C + W) for arbitrary rules is out of reach in general: with
//! per-worker `max_num_batched_tokens`, both thresholds and a
//! `busy_worker_ratio`, counting busy workers for C different rules is
//! offline 2-D dominance counting. Sharing equal rules covers real profiles,
//! which use a handful of threshold settings.

use super::config::{BusyRule, PolicyProfile};
use crate::error::{Error, Result};

/// `max_num_batched_tokens` of the workers in a snapshot.
#[derive(Debug, Clone, Copy)]
pub enum MaxBatched<'a> {
    /// Not known: only absolute thresholds can be evaluated.
    Unknown,
    /// The same for every worker.
    Same(u64),
    /// One per worker, aligned with the active prefill tokens.
    PerWorker(&'a [u64]),
}

/// The load of the eligible workers at the moment of a pop.
#[derive(Debug, Clone, Copy)]
pub struct LoadSnapshot<'a> {
    active_prefill_tokens: &'a [u64],
    max_num_batched_tokens: MaxBatched<'a>,
}

impl<'a> LoadSnapshot<'a> {
    /// Validates that a per-worker `max_num_batched_tokens` has one entry per worker.
    pub fn new(
        active_prefill_tokens: &'a [u64],
        max_num_batched_tokens: MaxBatched<'a>,
    ) -> Result<Self> {
        if let MaxBatched::PerWorker(m) = max_num_batched_tokens {
            if m.len() != active_prefill_tokens.len() {
                return Err(Error::value(format!(
                    "max_num_batched_tokens has {} entries but active_prefill_tokens has {} \
                     (one per worker)",
                    m.len(),
                    active_prefill_tokens.len()
                )));
            }
        }
        Ok(LoadSnapshot {
            active_prefill_tokens,
            max_num_batched_tokens,
        })
    }

    pub fn num_workers(&self) -> usize {
        self.active_prefill_tokens.len()
    }

    fn max_of(&self, w: usize) -> u64 {
        match self.max_num_batched_tokens {
            MaxBatched::Unknown => 0,
            MaxBatched::Same(m) => m,
            MaxBatched::PerWorker(m) => m[w],
        }
    }

    /// Whether the pool counts as busy under `rule`: one pass, early exit.
    pub fn pool_is_busy(&self, rule: &BusyRule) -> bool {
        let n = self.active_prefill_tokens.len();
        if n == 0 {
            return false;
        }
        let mut busy = 0usize;
        for (w, &t) in self.active_prefill_tokens.iter().enumerate() {
            if rule.worker_is_busy(t, self.max_of(w)) {
                busy += 1;
                if rule.pool_is_busy(busy, n) {
                    return true;
                }
            } else if !rule.pool_is_busy(busy + (n - w - 1), n) {
                return false;
            }
        }
        rule.pool_is_busy(busy, n)
    }
}

/// Per-queue memo of the busy rules for one pop.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadGate {
    rules: Vec<BusyRule>,
    class_rule: Vec<Option<usize>>,
    /// Per rule this pop: 0 unknown, 1 not busy, 2 busy.
    state: Vec<u8>,
    /// Name of a class with a fractional threshold, if any.
    needs_max: Option<usize>,
}

impl LoadGate {
    pub(crate) fn new(profile: &PolicyProfile) -> Self {
        let (rules, class_rule) = profile.busy_rules();
        let needs_max = profile
            .classes
            .iter()
            .position(|c| c.busy.prefill_busy_threshold_frac.is_some());
        LoadGate {
            state: vec![0; rules.len()],
            rules,
            class_rule,
            needs_max,
        }
    }

    /// Reject a snapshot the profile cannot be evaluated against.
    pub(crate) fn check(&self, load: &LoadSnapshot<'_>, profile: &PolicyProfile) -> Result<()> {
        if let (Some(i), MaxBatched::Unknown, 1..) = (
            self.needs_max,
            load.max_num_batched_tokens,
            load.num_workers(),
        ) {
            return Err(Error::value(format!(
                "max_num_batched_tokens is required: class '{}' has a \
                 prefill_busy_threshold_frac",
                profile.classes[i].name.escape_debug()
            )));
        }
        Ok(())
    }

    pub(crate) fn start(&mut self) {
        self.state.iter_mut().for_each(|s| *s = 0);
    }

    /// Whether load blocks class `i` (memoised per rule for this pop).
    pub(crate) fn blocked(&mut self, i: usize, load: &LoadSnapshot<'_>) -> bool {
        let Some(r) = self.class_rule[i] else {
            return false;
        };
        if self.state[r] == 0 {
            self.state[r] = 1 + u8::from(load.pool_is_busy(&self.rules[r]));
        }
        self.state[r] == 2
    }
}
