//! The automatic quantum (ALGORITHMS.md §6): DLPM's `Q_u` derived from
//! what the scheduler observes, so that nobody has to size it against the
//! request cost by hand.
//!
//! The quantum is `scale` times the mean *uncached* cost of a request
//! (`w_e * input_len + w_q * output`, divided by the client's weight) over
//! a window of about [`WINDOW`] admissions: every admission adds its input
//! charge to a decayed sum and 1 to a decayed count, every output charge
//! is added to the sum when it is made, and both decay by `1 - 1/WINDOW`
//! per admission. Their ratio is the cost per admission whichever way the
//! engine reports output (per token, per step or at the end). The result
//! is rounded to a whole number when it is at least 1, so deficits of
//! integer charges stay exact. Before the first admission (and while the
//! mean is not positive) the quantum is `initial`.
//!
//! Why the uncached cost and not the charge (which counts only the extend
//! tokens): DLPM's locality needs a quantum that pays for a cache miss and
//! leaves credit for the cheap hits that follow it. A quantum that followed
//! the charges would shrink as the hit rate rises, clients would then take
//! turns after every request, evict each other's prefixes, and the hit rate
//! would fall: measured inside vLLM's scheduler (docs/results/quantum_auto.md)
//! that feedback settled at a hit rate of 0.53-0.64 against a fixed
//! quantum's 0.92. The uncached cost does not move with the hit rate. Why
//! the mean and not a high quantile: the mean is two numbers (saved with
//! the state) and the scale covers the spread.
//!
//! **Bound**: Theorem 4.1 holds with `Q_u` replaced by `Q*`, the largest
//! quantum any refill used up to the end of the interval (ALGORITHMS.md §6
//! gives the argument): every refill round gives every backlogged client
//! the same amount, and a deficit never exceeds the quantum of the refill
//! that last raised it.

/// Admissions the mean is taken over (the decay is `1 - 1/WINDOW` per
/// admission).
pub const WINDOW: f64 = 64.0;

/// DLPM's default `scale` where the quantum is automatic (the engines'
/// default, and `DLPM(quantum="auto")`), which comes with strict credit
/// (`rust/sched/dlpm.rs`): a refill round gives each backlogged client the
/// uncached cost of about this many mean requests. With strict credit a
/// client saves up across rounds for a miss it cannot yet cover, so the
/// quantum no longer has to pay for a whole miss at once. Measured (issue
/// 35, docs/results/frontier.md): strict credit at 0.8 keeps >= 0.9x LPM's
/// throughput at Jain >= 0.9 in all 12 cache-pressure cells (the paper's rule
/// at 1, the former default: 8; at 1.5: 11, with Jain below 0.9 where a
/// tenant's whole backlog is about a quantum and a half), and reaches the
/// hand-tuned fixed quantum's result inside vLLM's scheduler
/// (docs/results/quantum_auto.md).
pub const DEFAULT_SCALE: f64 = 0.8;

/// A quantum, fixed (`scale == 0`) or automatic (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantum {
    /// The fixed quantum, or the automatic one's value before anything is
    /// observed (> 0, finite).
    initial: f64,
    /// 0: fixed; > 0: the multiple of the mean charge per admission.
    scale: f64,
    /// The decayed sum of charges (>= 0).
    cost: f64,
    /// The decayed number of admissions (>= 0).
    count: f64,
}

impl Quantum {
    /// `scale == 0`: the fixed quantum `initial`; `scale > 0`: automatic,
    /// `initial` until the first admission. Both validated by the caller
    /// (`initial > 0`, `scale >= 0`, finite).
    pub fn new(initial: f64, scale: f64) -> Self {
        Quantum {
            initial,
            scale,
            cost: 0.0,
            count: 0.0,
        }
    }

    /// Whether the quantum follows the observed charges.
    pub fn is_auto(&self) -> bool {
        self.scale > 0.0
    }

    /// The quantum a refill uses now (> 0).
    pub fn value(&self) -> f64 {
        if !self.is_auto() || self.count <= 0.0 {
            return self.initial;
        }
        let q = self.scale * (self.cost / self.count);
        if q.is_nan() || q <= 0.0 {
            self.initial
        } else if q >= 1.0 {
            q.round().min(f64::MAX)
        } else {
            q
        }
    }

    /// A request was admitted; `charge` (>= 0) is its weighted input
    /// charge (`w_e * input_len / weight`).
    pub fn admitted(&mut self, charge: f64) {
        if !self.is_auto() {
            return;
        }
        let keep = 1.0 - 1.0 / WINDOW;
        self.cost *= keep;
        self.count = self.count * keep + 1.0;
        self.charged(charge);
    }

    /// A further charge (output tokens) of a request admitted before.
    /// Non-finite charges are ignored; the sum never goes below 0.
    pub fn charged(&mut self, charge: f64) {
        if !self.is_auto() || !charge.is_finite() {
            return;
        }
        let sum = self.cost + charge;
        self.cost = if sum.is_finite() {
            sum.max(0.0)
        } else {
            self.cost
        };
    }

    /// What a saved state keeps of it: `(cost, count)` (automatic only).
    pub fn memory(&self) -> Option<(f64, f64)> {
        self.is_auto().then_some((self.cost, self.count))
    }

    /// Restore [`Self::memory`] (validated: finite, `>= 0`); ignored when
    /// the quantum is fixed.
    pub fn restore(&mut self, cost: f64, count: f64) {
        if self.is_auto() {
            self.cost = cost;
            self.count = count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The obvious reference: the weighted mean over every event, each
    /// admission's weight `keep^(admissions after it)`, each later charge
    /// weighted like the admission count at its time.
    fn reference(events: &[(bool, f64)], scale: f64, initial: f64) -> f64 {
        let keep = 1.0 - 1.0 / WINDOW;
        let admissions = events.iter().filter(|e| e.0).count() as i32;
        if admissions == 0 {
            return initial;
        }
        let (mut cost, mut count, mut seen) = (0.0, 0.0, 0);
        for &(admit, charge) in events {
            if admit {
                seen += 1;
                count += keep.powi(admissions - seen);
            }
            cost += charge * keep.powi(admissions - seen);
        }
        let q = scale * cost.max(0.0) / count;
        if q <= 0.0 {
            initial
        } else if q >= 1.0 {
            q.round()
        } else {
            q
        }
    }

    #[test]
    fn fixed_never_moves() {
        let mut q = Quantum::new(512.0, 0.0);
        q.admitted(10_000.0);
        q.charged(5.0);
        assert_eq!(q.value(), 512.0);
        assert_eq!(q.memory(), None);
    }

    #[test]
    fn initial_until_the_first_admission() {
        let mut q = Quantum::new(512.0, 2.0);
        assert_eq!(q.value(), 512.0);
        q.admitted(100.0);
        assert_eq!(q.value(), 200.0);
        q.charged(50.0); // its output
        assert_eq!(q.value(), 300.0);
    }

    #[test]
    fn converges_to_scale_times_the_mean_cost() {
        let mut q = Quantum::new(1.0, 3.0);
        for i in 0..2000 {
            q.admitted(if i % 2 == 0 { 100.0 } else { 300.0 });
            q.charged(40.0);
        }
        // mean charge per admission 240
        assert!((q.value() - 720.0).abs() <= 20.0, "{}", q.value());
    }

    #[test]
    fn matches_the_reference_on_random_events() {
        let mut seed = 0x9e37_79b9_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300 {
            let scale = [0.5, 1.0, 2.0, 8.0][(next() % 4) as usize];
            let n = (next() % 80) as usize;
            let events: Vec<(bool, f64)> = (0..n)
                .map(|_| (next() % 3 != 0, (next() % 1000) as f64))
                .collect();
            let mut q = Quantum::new(64.0, scale);
            for &(admit, c) in &events {
                if admit {
                    q.admitted(c);
                } else {
                    q.charged(c);
                }
            }
            // charges before the first admission count once it comes (the
            // reference weighs them as the first admission's)
            let want = reference(&events, scale, 64.0);
            let got = q.value();
            assert!(
                (got - want).abs() <= 1.0 + want * 1e-9,
                "{events:?}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn never_negative_never_nan() {
        let mut q = Quantum::new(8.0, 2.0);
        q.admitted(10.0);
        q.charged(-1e9);
        assert_eq!(q.value(), 8.0); // mean 0: the initial quantum
        q.charged(f64::INFINITY);
        q.charged(f64::NAN);
        q.admitted(f64::MAX);
        q.admitted(f64::MAX);
        assert!(q.value().is_finite() && q.value() > 0.0);
    }

    #[test]
    fn memory_round_trips() {
        let mut q = Quantum::new(8.0, 2.0);
        q.admitted(100.0);
        q.charged(20.0);
        let (cost, count) = q.memory().unwrap();
        let mut r = Quantum::new(8.0, 2.0);
        r.restore(cost, count);
        assert_eq!(r, q);
    }
}
