//! D2LPM (the paper's Section 5.2, Algorithm 2): double-deficit dispatch.
//!
//! Per (client, worker) deficit `q[c][w]` and a worker quantum `Q_w`. For a
//! request r of client c, with `G` the workers holding r's longest matched
//! prefix (all workers when nothing matches):
//!
//! 1. `avail = {w : q[c][w] > 0}`; while `avail` is empty, add `Q_w` to every
//!    `q[c][w]`. The loop is done in one O(W) pass: the number of rounds is
//!    the smallest `k` making some `q[c][w] + k * Q_w > 0`.
//! 2. `cand = G ∩ avail`; pick the smallest queue size `s_w` over `cand`, or
//!    over `avail` when `cand` is empty (ties: lowest worker index; with
//!    `placement_slack > 0`, by the agreed placement of [`super::placement`]).
//!    With `match_threshold > 0` (fairq's extension, off by default), a
//!    longest match shorter than that fraction of the prompt is no locality:
//!    the pick comes from `avail`, as when nothing matches. With `spread_by_credit`
//!    (also fairq's, off by default), a request placed from `avail` (its
//!    match decides nothing, or its client has no credit on the holders)
//!    goes to the worker of `avail` where its client has the most credit
//!    left, the smallest `s_w` among those: a client's documents spread over
//!    the workers as its credit will later ask, instead of piling where the
//!    load happened to be low.
//! 3. `q[c][w] -= w_e * input_len(r)`; the caller updates `s_w` and inserts
//!    r's tokens for `w` in the global tree.
//!
//! On finish: `q[c][w] -= w_q * output_len`. `Q_w = inf` makes every worker
//! always available: pure prefix affinity with least-loaded tie-breaking.

use super::placement::Placement;
use super::tree::WorkerSet;
use super::{check_fraction, check_quantum, check_weight, match_counts};
use crate::deficit::{add_saturating, refill, rounds_until_positive};
use crate::error::Result;

/// D2LPM knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct D2lpmConfig {
    /// `Q_w`, credit per refill round; `> 0`, may be `f64::INFINITY`.
    pub worker_quantum: f64,
    /// Weight of an input token in the cost (`w_e`, default 1).
    pub w_e: f64,
    /// Weight of an output token in the cost (`w_q`, default 2).
    pub w_q: f64,
    /// Load (requests) above the least within which the last step hashes
    /// the request's prefix instead of taking the least loaded
    /// ([`super::placement`]); 0 (the default): the paper's rule.
    pub placement_slack: u64,
    /// The fraction of the prompt the longest match must cover for its
    /// holders to be `G` (in [0, 1]; with a shorter match, such as a system
    /// prompt shared by every document, the pick comes from `avail`); 0
    /// (the default): every match counts, the paper's rule.
    pub match_threshold: f64,
    /// A request placed from `avail` goes where its client has the most
    /// credit (then the least loaded); false (the default): the least
    /// loaded of `avail`, the paper's rule.
    pub spread_by_credit: bool,
}

impl D2lpmConfig {
    pub fn new(worker_quantum: f64) -> Self {
        D2lpmConfig {
            worker_quantum,
            w_e: 1.0,
            w_q: 2.0,
            placement_slack: 0,
            match_threshold: 0.0,
            spread_by_credit: false,
        }
    }

    pub fn validate(&self) -> Result<()> {
        check_quantum("worker_quantum", self.worker_quantum)?;
        check_weight("w_e", self.w_e)?;
        check_weight("w_q", self.w_q)?;
        check_fraction("match_threshold", self.match_threshold)?;
        Ok(())
    }
}

/// D2LPM state: the per-(client, worker) deficits.
#[derive(Debug, Clone)]
pub struct State {
    pub cfg: D2lpmConfig,
    /// `q[c][w]`, rows indexed by the dispatcher's client index.
    q: Vec<Vec<f64>>,
    /// Refill rounds granted so far (all clients), for diagnostics.
    refills: u64,
}

impl State {
    pub fn new(cfg: D2lpmConfig) -> Self {
        State {
            cfg,
            q: Vec::new(),
            refills: 0,
        }
    }

    pub fn deficit(&self, client: usize, worker: usize) -> f64 {
        self.q.get(client).map_or(0.0, |row| row[worker])
    }

    pub fn refills(&self) -> u64 {
        self.refills
    }

    /// Client slot `c` now holds a new client: deficits 0 on every worker.
    pub fn reset_client(&mut self, c: usize) {
        if let Some(row) = self.q.get_mut(c) {
            row.iter_mut().for_each(|x| *x = 0.0);
        }
    }

    /// A state restore: the deficit rows (one per client, in client order)
    /// and the refill count.
    pub fn restore(&mut self, rows: Vec<Vec<f64>>, refills: u64) {
        self.q = rows;
        self.refills = refills;
    }

    /// Add `Q_w` to every `q[c][w]` of an eligible worker as many rounds as
    /// the paper's while loop would (the rounds after which some eligible
    /// `q[c][w] > 0`), in O(W), with the closed-form refill DLPM uses
    /// ([`crate::deficit`]). Every worker is eligible except in
    /// [`State::select_among`].
    fn refill(&mut self, c: usize, eligible: impl Fn(usize) -> bool + Copy) {
        let qw = self.cfg.worker_quantum;
        let row = &mut self.q[c];
        let credits = row.iter().enumerate().filter(|(w, _)| eligible(*w));
        let Some(rounds) = rounds_until_positive(credits.map(|(_, &x)| x), qw) else {
            return;
        };
        self.refills = self.refills.saturating_add(rounds.count);
        let eligible_rows = row.iter_mut().enumerate().filter(|(w, _)| eligible(*w));
        refill(eligible_rows.map(|(_, x)| x), qw, rounds);
        debug_assert!(row.iter().enumerate().any(|(w, &x)| eligible(w) && x > 0.0));
    }

    /// Charge `cost` to `q[c][w]`, saturating at `f64::MIN`: an overflowing
    /// charge (`w_e * tokens` beyond `f64::MAX`) must not leave `-inf`,
    /// which a refill would turn into NaN and no worker would be eligible.
    fn charge(x: &mut f64, cost: f64) {
        *x = add_saturating(*x, -cost);
    }

    /// Algorithm 2's SelectWorker plus the dispatch-time charge, given the
    /// longest match (its length and its holders `G`); `place` makes the
    /// last step's choice ([`Placement::LEAST_LOADED`]: the paper's).
    pub fn select(
        &mut self,
        c: usize,
        g: (usize, &WorkerSet),
        load: &[u64],
        input_len: usize,
        place: &Placement<'_>,
    ) -> usize {
        self.select_in(c, g, load, input_len, place, |_| true)
    }

    /// [`State::select`] over the workers in `eligible` only (non-empty):
    /// the refill loop and both candidate sets leave the others out, as if
    /// they did not exist. With one eligible worker this is the D2LPM
    /// accounting of a dispatch to that worker.
    pub fn select_among(
        &mut self,
        c: usize,
        g: (usize, &WorkerSet),
        load: &[u64],
        input_len: usize,
        place: &Placement<'_>,
        eligible: &WorkerSet,
    ) -> usize {
        self.select_in(c, g, load, input_len, place, |w| eligible.contains(w))
    }

    fn select_in(
        &mut self,
        c: usize,
        (matched, g): (usize, &WorkerSet),
        load: &[u64],
        input_len: usize,
        place: &Placement<'_>,
        eligible: impl Fn(usize) -> bool + Copy,
    ) -> usize {
        let n = load.len();
        if self.q.len() <= c {
            self.q.resize_with(c + 1, || vec![0.0; n]);
        }
        let row = &self.q[c];
        if !(0..n).any(|w| eligible(w) && row[w] > 0.0) {
            self.refill(c, eligible);
        }
        let row = &self.q[c];
        let avail = |w: &usize| eligible(*w) && row[*w] > 0.0;
        let local = match_counts(matched, input_len, self.cfg.match_threshold);
        let w = local
            .then(|| place.choose(load, g.iter().filter(avail)))
            .flatten()
            .unwrap_or_else(|| {
                let most = if self.cfg.spread_by_credit {
                    (0..n)
                        .filter(avail)
                        .map(|w| row[w])
                        .fold(f64::MIN, f64::max)
                } else {
                    f64::MIN
                };
                place
                    .choose(load, (0..n).filter(|w| avail(w) && row[*w] >= most))
                    .expect("a refill leaves some worker with credit")
            });
        Self::charge(&mut self.q[c][w], self.cfg.w_e * input_len as f64);
        w
    }

    /// Give back the dispatch-time charge of `input_len` tokens on `q[c][w]`
    /// (a dispatch withdrawn before the worker served it).
    pub fn refund(&mut self, c: usize, w: usize, input_len: u64) {
        if let Some(row) = self.q.get_mut(c) {
            row[w] = add_saturating(row[w], self.cfg.w_e * input_len as f64);
        }
    }

    /// Worker slot `w` now holds a new worker: every client's deficit there is 0.
    pub fn reset_worker(&mut self, w: usize) {
        for row in &mut self.q {
            row[w] = 0.0;
        }
    }

    /// Charge `cost` to `q[c][w]` for work another router dispatched (the
    /// shared view), creating the client's row (all 0) if it has none, so
    /// the charge is not lost before the client's first own dispatch.
    pub fn charge_observed(&mut self, c: usize, w: usize, num_workers: usize, cost: f64) {
        if self.q.len() <= c {
            self.q.resize_with(c + 1, || vec![0.0; num_workers]);
        }
        Self::charge(&mut self.q[c][w], cost);
    }

    pub fn on_finish(&mut self, c: usize, w: usize, output_tokens: u64) {
        if let Some(row) = self.q.get_mut(c) {
            Self::charge(&mut row[w], self.cfg.w_q * output_tokens as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Dispatcher, RequestId};
    use super::*;

    #[test]
    fn extreme_weights_never_leave_no_eligible_worker() {
        // w_e * tokens overflows to inf: the charge saturates at f64::MIN
        // (a -inf deficit refilled to NaN made every worker ineligible and
        // argmin panicked).
        for qw in [5e-324, 1.0, 1e300, f64::INFINITY] {
            let cfg = D2lpmConfig {
                worker_quantum: qw,
                w_e: 1e308,
                w_q: 1e308,
                ..D2lpmConfig::new(qw)
            };
            let mut d = Dispatcher::d2lpm(3, cfg).unwrap();
            for i in 0..20 {
                let w = d.dispatch(RequestId::Int(i), "a", &[1, 2, 3]).unwrap();
                assert!(w < 3);
                if i % 3 == 0 {
                    d.on_finish(&RequestId::Int(i), u64::MAX).unwrap();
                }
            }
            for w in 0..3 {
                assert!(!d.deficit("a", w).unwrap().is_nan());
            }
        }
        // a tiny quantum must not turn into infinite credit
        let mut st = State::new(D2lpmConfig::new(5e-324));
        st.q = vec![vec![-10.0, -20.0]];
        st.refill(0, |_| true);
        assert!(st.q[0][0] > 0.0 && st.q[0][0].is_finite() && st.q[0][1] < 0.0);
        // a debt beyond float precision: adding Q changes nothing
        let mut st = State::new(D2lpmConfig::new(1.0));
        st.q = vec![vec![-1e300, -2e300]];
        st.refill(0, |_| true);
        assert!(st.q[0].iter().any(|&x| x > 0.0));
    }

    #[test]
    fn a_short_match_places_nothing_and_credit_spreads_documents() {
        let system: Vec<u32> = (100..228).collect(); // a 128-token system prompt
        let doc = |k: u32| -> Vec<u32> {
            let mut t = system.clone();
            t.extend((0..400).map(|i| 1000 * (k + 1) + i));
            t
        };
        let cfg = D2lpmConfig {
            match_threshold: 0.5,
            spread_by_credit: true,
            ..D2lpmConfig::new(1e6)
        };
        let mut paper = Dispatcher::d2lpm(2, D2lpmConfig::new(1e6)).unwrap();
        let mut ext = Dispatcher::d2lpm(2, cfg).unwrap();
        for d in [&mut paper, &mut ext] {
            d.dispatch(RequestId::Int(0), "probe", &system).unwrap();
            d.on_finish(&RequestId::Int(0), 0).unwrap();
        }
        // the paper's rule: the system prompt's holder takes every document
        let on_paper: Vec<usize> = (1..5)
            .map(|k| {
                paper
                    .dispatch(RequestId::Int(k), "a", &doc(k as u32))
                    .unwrap()
            })
            .collect();
        assert_eq!(on_paper, vec![0, 0, 0, 0]);
        // ... here a's documents alternate by its credit, whatever the loads
        for k in 1..5 {
            let w = ext
                .dispatch(RequestId::Int(k), "a", &doc(k as u32))
                .unwrap();
            ext.on_finish(&RequestId::Int(k), 0).unwrap();
            assert_eq!(w, (k as usize + 1) % 2);
        }
        // a document's own prefix still places it
        let w = ext.dispatch(RequestId::Int(9), "a", &doc(1)).unwrap();
        assert_eq!(w, 0);
        assert!(D2lpmConfig {
            match_threshold: 1.5,
            ..D2lpmConfig::new(1.0)
        }
        .validate()
        .is_err());
    }

    #[test]
    fn refill_is_the_while_loop() {
        let mut st = State::new(D2lpmConfig::new(10.0));
        st.q = vec![vec![-25.0, -5.0, -31.0]];
        st.refill(0, |_| true);
        // one round makes w1 positive (5 > 0)
        assert_eq!(st.q[0], vec![-15.0, 5.0, -21.0]);
        st.q = vec![vec![-20.0, -30.0]];
        st.refill(0, |_| true);
        // -20 needs 3 rounds (exactly 0 after 2 is not > 0)
        assert_eq!(st.q[0], vec![10.0, 0.0]);
        assert_eq!(st.refills(), 4);
    }

    #[test]
    fn worked_example_affinity_until_deficit_runs_out() {
        // Q_w = 250, prompts of 100 tokens sharing a prefix: the client stays
        // on the worker holding it while its deficit there is positive.
        let mut d = Dispatcher::d2lpm(2, D2lpmConfig::new(250.0)).unwrap();
        let p: Vec<u32> = (0..100).collect();
        let w0 = d.dispatch(RequestId::Int(0), "a", &p).unwrap();
        assert_eq!(w0, 0); // new client: both refilled to 250, tie -> 0
        assert_eq!(d.deficit("a", 0).unwrap(), 150.0);
        assert_eq!(d.dispatch(RequestId::Int(1), "a", &p).unwrap(), 0); // 50
        assert_eq!(d.dispatch(RequestId::Int(2), "a", &p).unwrap(), 0); // -50
                                                                        // worker 0 exhausted: avail = {1}, G = {0}: cand empty -> worker 1
        assert_eq!(d.dispatch(RequestId::Int(3), "a", &p).unwrap(), 1);
        assert_eq!(d.deficit("a", 1).unwrap(), 150.0);
        // now both hold the prefix; worker 1 is the only available one
        assert_eq!(d.dispatch(RequestId::Int(4), "a", &p).unwrap(), 1);
        assert_eq!(d.dispatch(RequestId::Int(5), "a", &p).unwrap(), 1); // -50
                                                                        // all exhausted: one refill round -> 200, 200; s = (3, 3): tie -> 0
        assert_eq!(d.dispatch(RequestId::Int(6), "a", &p).unwrap(), 0);
        assert_eq!(d.deficit("a", 0).unwrap(), 100.0);
        assert_eq!(d.deficit("a", 1).unwrap(), 200.0);
        // finishing charges the output
        d.on_finish(&RequestId::Int(6), 10).unwrap();
        assert_eq!(d.deficit("a", 0).unwrap(), 80.0);
        assert_eq!(d.queue_sizes(), &[3, 3]);
    }

    #[test]
    fn infinite_quantum_is_pure_affinity() {
        let mut d = Dispatcher::d2lpm(4, D2lpmConfig::new(f64::INFINITY)).unwrap();
        let p: Vec<u32> = (0..50).collect();
        for i in 0..20 {
            assert_eq!(d.dispatch(RequestId::Int(i), "a", &p).unwrap(), 0);
        }
    }

    #[test]
    fn quantum_error_says_what_is_accepted() {
        // inf is accepted, so the message must not say "finite"
        for (q, shown) in [(0.0, "0"), (-1.0, "-1"), (f64::NAN, "NaN")] {
            let e = Dispatcher::d2lpm(2, D2lpmConfig::new(q)).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("worker_quantum must be a number > 0 or inf, got {shown}")
            );
        }
        assert!(Dispatcher::d2lpm(2, D2lpmConfig::new(f64::INFINITY)).is_ok());
    }
}
