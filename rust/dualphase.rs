//! Dual-phase (think / output) queue for reasoning models (ALGORITHMS.md §4).
//!
//! Two FIFOs of *active* decode requests: `output` (user-visible answer
//! tokens, latency-critical) and `think` (hidden reasoning, throughput-bound).
//! A request stays queued until [`DualPhase::remove`] (finished or aborted);
//! every [`DualPhase::schedule`] call picks the batch of one engine step:
//!
//! 1. output requests from the front, up to `min(output_budget, available_blocks)`;
//! 2. think requests from the front, up to `floor(output_budget * think_batch_multiplier)`,
//!    capped by the blocks left.
//!
//! Each request takes one block (slot). Scheduled requests move to the back
//! of their queue (round robin within a phase), so every request of a phase
//! gets its turn and the front of `think` is always the request that has
//! waited longest.
//!
//! Starvation guard (the decision record's mitigation): while
//! `len(output) < output_budget`, `min(min_think_reservation, len(think),
//! available_blocks)` blocks are held back from output for think, so output
//! traffic that fills the memory cap without filling its budget cannot starve
//! think forever. A *forced budget event* is counted whenever the guard gave
//! think more slots than the plain rule would have.
//!
//! [`DualPhase::on_phase_event`] moves a request from `think` to the *front*
//! of `output` (it emitted the end-of-think token), effective for the next
//! `schedule` call.

use std::collections::HashMap;
use std::hash::Hash;

use crate::error::{Error, Result};
use crate::fifo::{Fifo, Handle};

/// Which queue a request is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Think,
    Output,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Think => "think",
            Phase::Output => "output",
        }
    }

    /// Parse `"think"` / `"output"`.
    pub fn parse(s: &str) -> Result<Phase> {
        match s {
            "think" => Ok(Phase::Think),
            "output" => Ok(Phase::Output),
            other => Err(Error::value(format!(
                "phase must be \"think\" or \"output\", got {other:?}"
            ))),
        }
    }
}

/// Counters and gauges (see `docs/design/core.md` for the exported names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Metrics {
    pub schedule_calls: u64,
    pub last_output_batch: usize,
    pub last_think_batch: usize,
    pub output_scheduled_total: u64,
    pub think_scheduled_total: u64,
    pub forced_budget_events: u64,
    pub phase_transitions: u64,
}

#[derive(Debug, Clone)]
struct Slot<K> {
    key: K,
    /// `schedule_calls` when the request was added or last scheduled.
    last_served: u64,
}

/// The batch chosen by one [`DualPhase::schedule`] call, in dispatch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch<K> {
    pub output: Vec<K>,
    pub think: Vec<K>,
}

/// The dual-phase queue; `K` identifies requests, `V` is the payload.
#[derive(Debug, Clone)]
pub struct DualPhase<K, V> {
    think: Fifo<Slot<K>>,
    output: Fifo<Slot<K>>,
    index: HashMap<K, (Phase, Handle, V)>,
    multiplier: f64,
    reservation: usize,
    metrics: Metrics,
    /// A loaded state's `last_served` rounds per phase (think, output), in
    /// queue order, taken by the re-adds of that phase.
    pending: [std::collections::VecDeque<u64>; 2],
}

/// Validate `think_batch_multiplier` (finite, `>= 1.0`).
pub fn check_multiplier(m: f64) -> Result<f64> {
    if m.is_finite() && m >= 1.0 {
        Ok(m)
    } else {
        Err(Error::value(format!(
            "think_batch_multiplier must be a finite number >= 1.0, got {m}"
        )))
    }
}

impl<K: Hash + Eq + Clone, V> DualPhase<K, V> {
    pub fn new(think_batch_multiplier: f64, min_think_reservation: usize) -> Result<Self> {
        Ok(DualPhase {
            think: Fifo::new(),
            output: Fifo::new(),
            index: HashMap::new(),
            multiplier: check_multiplier(think_batch_multiplier)?,
            reservation: min_think_reservation,
            metrics: Metrics::default(),
            pending: Default::default(),
        })
    }

    pub fn think_batch_multiplier(&self) -> f64 {
        self.multiplier
    }

    pub fn min_think_reservation(&self) -> usize {
        self.reservation
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn len_phase(&self, phase: Phase) -> usize {
        match phase {
            Phase::Think => self.think.len(),
            Phase::Output => self.output.len(),
        }
    }

    pub fn metrics(&self) -> Metrics {
        self.metrics
    }

    /// Schedule calls the front think request has waited since it was added
    /// or last scheduled (0 when `think` is empty).
    pub fn longest_think_wait(&self) -> u64 {
        self.think
            .front()
            .map_or(0, |(_, s)| self.metrics.schedule_calls - s.last_served)
    }

    pub fn get(&self, key: &K) -> Option<(Phase, &V)> {
        self.index.get(key).map(|(p, _, v)| (*p, v))
    }

    fn fifo(&mut self, phase: Phase) -> &mut Fifo<Slot<K>> {
        match phase {
            Phase::Think => &mut self.think,
            Phase::Output => &mut self.output,
        }
    }

    /// Queue a request at the back of `phase`. Duplicate keys: `ValueError`.
    pub fn add(&mut self, key: K, value: V, phase: Phase) -> Result<()> {
        if self.index.contains_key(&key) {
            return Err(Error::value("request_id is already queued"));
        }
        let saved = self.pending[phase as usize].pop_front();
        let slot = Slot {
            key: key.clone(),
            last_served: saved.unwrap_or(self.metrics.schedule_calls),
        };
        let h = self.fifo(phase).push_back(slot);
        self.index.insert(key, (phase, h, value));
        Ok(())
    }

    /// Remove a request (finished or aborted).
    pub fn remove(&mut self, key: &K) -> Result<(Phase, V)> {
        let (phase, h, v) = self
            .index
            .remove(key)
            .ok_or_else(|| Error::key("request_id is not queued"))?;
        self.fifo(phase).remove(h);
        Ok((phase, v))
    }

    /// End of think: move the request to the front of `output`. Returns
    /// `false` (and changes nothing) if it is already in `output`.
    pub fn on_phase_event(&mut self, key: &K) -> Result<bool> {
        let (phase, h, _) = self
            .index
            .get(key)
            .ok_or_else(|| Error::key("request_id is not queued"))?;
        if *phase == Phase::Output {
            return Ok(false);
        }
        let h = *h;
        let slot = self.think.remove(h).expect("indexed handle is live");
        let nh = self.output.push_front(slot);
        let e = self.index.get_mut(key).expect("present");
        e.0 = Phase::Output;
        e.1 = nh;
        self.metrics.phase_transitions += 1;
        Ok(true)
    }

    /// Slot counts `(output, think, forced)` one call would dispatch.
    pub fn plan(&self, output_budget: usize, available_blocks: usize) -> (usize, usize, bool) {
        let (n_out, n_think) = (self.output.len(), self.think.len());
        let out_cap = output_budget.min(available_blocks);
        // `as usize` saturates, so huge products are safe.
        let think_budget = (output_budget as f64 * self.multiplier).floor() as usize;
        let reserve = if self.reservation > 0 && n_out < output_budget {
            self.reservation.min(n_think).min(available_blocks)
        } else {
            0
        };
        let take_out = n_out.min(out_cap).min(available_blocks - reserve);
        let take_think = n_think
            .min(think_budget.max(reserve))
            .min(available_blocks - take_out);
        // What the plain rule (no guard) would give think:
        let plain_out = n_out.min(out_cap);
        let plain_think = n_think.min(think_budget).min(available_blocks - plain_out);
        (take_out, take_think, take_think > plain_think)
    }

    /// Pick one step's batch: output first, then think (see module docs).
    pub fn schedule(&mut self, output_budget: usize, available_blocks: usize) -> Batch<K> {
        let (take_out, take_think, forced) = self.plan(output_budget, available_blocks);
        self.metrics.schedule_calls += 1;
        let round = self.metrics.schedule_calls;
        let output = self.rotate(Phase::Output, take_out, round);
        let think = self.rotate(Phase::Think, take_think, round);
        let m = &mut self.metrics;
        m.last_output_batch = take_out;
        m.last_think_batch = take_think;
        m.output_scheduled_total += take_out as u64;
        m.think_scheduled_total += take_think as u64;
        if forced {
            m.forced_budget_events += 1;
        }
        Batch { output, think }
    }

    fn rotate(&mut self, phase: Phase, n: usize, round: u64) -> Vec<K> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let fifo = self.fifo(phase);
            let mut slot = fifo.pop_front().expect("n <= len");
            slot.last_served = round;
            let key = slot.key.clone();
            let h = self.fifo(phase).push_back(slot);
            self.index.get_mut(&key).expect("indexed").1 = h;
            out.push(key);
        }
        out
    }

    /// Requests of one phase in queue order.
    pub fn iter_phase(&self, phase: Phase) -> impl Iterator<Item = &K> + '_ {
        let f = match phase {
            Phase::Think => &self.think,
            Phase::Output => &self.output,
        };
        f.iter().map(|(_, s)| &s.key)
    }
}

/// The `format` field of a dual-phase queue's state.
pub const STATE_FORMAT: &str = "fairq.DualPhaseQueue";
/// The state version this build writes and reads.
pub const STATE_VERSION: u64 = 1;

impl<K: Hash + Eq + Clone, V> DualPhase<K, V> {
    /// The state as a JSON-ready document:
    /// `{"format": "fairq.DualPhaseQueue", "version": 1,
    /// "think_batch_multiplier", "min_think_reservation", "metrics": {...},
    /// "think": [last_served, ...], "output": [...]}`. The requests are not
    /// in it (their ids are the caller's): re-add each phase's requests in
    /// queue order (front first) after a load, and they take their saved
    /// `last_served` rounds, so batches and metrics continue exactly.
    pub fn state(&self) -> crate::value::Value {
        use crate::value::Value;
        let int = |n: u64| Value::Int(n as i128);
        let m = &self.metrics;
        let rounds =
            |f: &Fifo<Slot<K>>| Value::List(f.iter().map(|(_, s)| int(s.last_served)).collect());
        Value::map([
            ("format", Value::str(STATE_FORMAT)),
            ("version", int(STATE_VERSION)),
            ("think_batch_multiplier", Value::Float(self.multiplier)),
            ("min_think_reservation", int(self.reservation as u64)),
            (
                "metrics",
                Value::map([
                    ("schedule_calls", int(m.schedule_calls)),
                    ("last_output_batch", int(m.last_output_batch as u64)),
                    ("last_think_batch", int(m.last_think_batch as u64)),
                    ("output_scheduled_total", int(m.output_scheduled_total)),
                    ("think_scheduled_total", int(m.think_scheduled_total)),
                    ("forced_budget_events", int(m.forced_budget_events)),
                    ("phase_transitions", int(m.phase_transitions)),
                ]),
            ),
            ("think", rounds(&self.think)),
            ("output", rounds(&self.output)),
        ])
    }

    /// Restore a state written by [`Self::state`] into this empty queue
    /// (options and metrics replaced). Validates everything first, naming
    /// the field; changes nothing on error.
    pub fn load_state(&mut self, v: &crate::value::Value) -> Result<()> {
        use crate::value::{as_u64, check_state_envelope, Fields, Path, Value};
        if !self.is_empty() {
            return Err(Error::value(format!(
                "load_state needs an empty queue; this one holds {} requests",
                self.len()
            )));
        }
        let f = Fields::new(v, Path::root(), "the state")?;
        f.deny_unknown(
            &[
                "format",
                "version",
                "think_batch_multiplier",
                "min_think_reservation",
                "metrics",
                "think",
                "output",
            ],
            "state: ",
            |_| None,
        )?;
        check_state_envelope(&f, STATE_FORMAT, STATE_VERSION, "a dual-phase queue")?;
        let m = f
            .opt_f64("think_batch_multiplier")?
            .ok_or_else(|| f.at("think_batch_multiplier").err("is required"))?;
        let multiplier = check_multiplier(m).map_err(|_| {
            f.at("think_batch_multiplier").err(format!(
                "must be a finite number >= 1.0, got {}",
                Value::Float(m).describe()
            ))
        })?;
        let count = |fields: &Fields<'_>, name: &str| -> Result<u64> {
            as_u64(fields.required(name)?, &fields.at(name), 0)
        };
        let reservation = count(&f, "min_think_reservation")? as usize;
        let mf = Fields::new(f.required("metrics")?, f.at("metrics"), "metrics")?;
        let names = [
            "schedule_calls",
            "last_output_batch",
            "last_think_batch",
            "output_scheduled_total",
            "think_scheduled_total",
            "forced_budget_events",
            "phase_transitions",
        ];
        mf.deny_unknown(&names, "", |_| None)?;
        let metrics = Metrics {
            schedule_calls: count(&mf, "schedule_calls")?,
            last_output_batch: count(&mf, "last_output_batch")? as usize,
            last_think_batch: count(&mf, "last_think_batch")? as usize,
            output_scheduled_total: count(&mf, "output_scheduled_total")?,
            think_scheduled_total: count(&mf, "think_scheduled_total")?,
            forced_budget_events: count(&mf, "forced_budget_events")?,
            phase_transitions: count(&mf, "phase_transitions")?,
        };
        let mut pending: [std::collections::VecDeque<u64>; 2] = Default::default();
        for (phase, name) in [(Phase::Think, "think"), (Phase::Output, "output")] {
            let list = f.opt_list(name)?.unwrap_or_default();
            for (i, x) in list.iter().enumerate() {
                let at = f.at(name).index(i);
                let round = as_u64(x, &at, 0)?;
                if round > metrics.schedule_calls {
                    return Err(at.err(format!(
                        "({round}) is after metrics.schedule_calls ({})",
                        metrics.schedule_calls
                    )));
                }
                pending[phase as usize].push_back(round);
            }
        }
        self.multiplier = multiplier;
        self.reservation = reservation;
        self.metrics = metrics;
        self.pending = pending;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(m: f64, r: usize) -> DualPhase<u32, ()> {
        DualPhase::new(m, r).unwrap()
    }

    #[test]
    fn output_first_then_expanded_think() {
        let mut d = q(2.5, 0);
        for i in 0..10 {
            d.add(i, (), Phase::Think).unwrap();
        }
        for i in 100..103 {
            d.add(i, (), Phase::Output).unwrap();
        }
        let b = d.schedule(2, 100);
        assert_eq!(b.output, vec![100, 101]);
        assert_eq!(b.think, vec![0, 1, 2, 3, 4]); // floor(2 * 2.5)
        let b = d.schedule(2, 100);
        assert_eq!(b.output, vec![102, 100]);
        assert_eq!(b.think, vec![5, 6, 7, 8, 9]);
    }

    #[test]
    fn memory_cap_saturates() {
        let mut d = q(3.0, 0);
        for i in 0..10 {
            d.add(i, (), Phase::Think).unwrap();
            d.add(100 + i, (), Phase::Output).unwrap();
        }
        let b = d.schedule(4, 6);
        assert_eq!((b.output.len(), b.think.len()), (4, 2));
        let b = d.schedule(4, 3);
        assert_eq!((b.output.len(), b.think.len()), (3, 0));
        let b = d.schedule(4, 0);
        assert_eq!((b.output.len(), b.think.len()), (0, 0));
    }

    #[test]
    fn phase_event_moves_to_output_front() {
        let mut d = q(1.0, 0);
        d.add(1, (), Phase::Think).unwrap();
        d.add(2, (), Phase::Output).unwrap();
        assert_eq!(d.schedule(1, 10).think, vec![1]);
        assert!(d.on_phase_event(&1).unwrap());
        assert!(!d.on_phase_event(&1).unwrap());
        assert!(d.on_phase_event(&9).is_err());
        let b = d.schedule(1, 10);
        assert_eq!(b.output, vec![1]);
        assert!(b.think.is_empty());
        assert_eq!(d.len_phase(Phase::Think), 0);
        assert_eq!(d.metrics().phase_transitions, 1);
    }

    #[test]
    fn guard_prevents_starvation() {
        // 3 output requests (< budget 4) fill all 3 blocks every step.
        for (r, expect_think) in [(0usize, 0usize), (1, 1)] {
            let mut d = q(2.0, r);
            for i in 0..3 {
                d.add(100 + i, (), Phase::Output).unwrap();
            }
            for i in 0..4 {
                d.add(i, (), Phase::Think).unwrap();
            }
            let mut served = 0;
            for _ in 0..8 {
                let b = d.schedule(4, 3);
                assert_eq!(b.think.len(), expect_think);
                served += b.think.len();
            }
            assert_eq!(d.metrics().forced_budget_events, served as u64);
            if r > 0 {
                assert!(d.longest_think_wait() <= 4);
            } else {
                assert_eq!(d.longest_think_wait(), 8);
            }
        }
        // Guard inactive when output is at its budget.
        let mut d = q(2.0, 1);
        for i in 0..4 {
            d.add(100 + i, (), Phase::Output).unwrap();
        }
        d.add(0, (), Phase::Think).unwrap();
        assert!(d.schedule(4, 4).think.is_empty());
    }

    #[test]
    fn validation() {
        assert!(DualPhase::<u32, ()>::new(0.99, 0).is_err());
        assert!(DualPhase::<u32, ()>::new(f64::NAN, 0).is_err());
        assert!(DualPhase::<u32, ()>::new(f64::INFINITY, 0).is_err());
        let mut d = q(1.0, 0);
        d.add(1, (), Phase::Think).unwrap();
        assert!(d.add(1, (), Phase::Output).is_err());
        assert_eq!(d.len(), 1);
        assert!(d.remove(&2).is_err());
        assert_eq!(d.remove(&1).unwrap().0, Phase::Think);
        assert!(d.is_empty());
        assert!(Phase::parse("x").is_err());
    }
}
