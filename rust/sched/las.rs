//! LAS (ALGORITHMS.md §5b): least attained service per tenant, with
//! half-life decay (the fairness policy of llm-d's flow control: token
//! weighted service that decays, so a tenant idle for a while is not
//! punished for old use).
//!
//! Each client has an attained service `S`: admission adds
//! `w_in * extend_len / w_c`, each output token `w_out / w_c` (a recharge of
//! the extend tokens moves it by the difference, with the weight at
//! admission), and between charges `S` decays exponentially, halving every
//! `half_life_s` seconds of the scheduler's clock
//! (`LocalScheduler::set_time`, else the wall clock). The waiting client
//! with the least `S` now (ties: first-seen client) has its oldest request
//! admitted if it fits; the pass stops at the first that does not (one
//! larger than the whole budget: admitted alone by the facade's oversize
//! rule). No lift: a new or returning client starts from what its decayed
//! `S` is (0 for a new one). `S` never goes below 0.
//!
//! Decay multiplies every client's `S` by the same factor, so it never
//! changes their order: only when charges happen does. So `S` is kept
//! scaled to a reference time `t_ref` (`S_c(t) = v_c * 2^(-(t - t_ref) /
//! h)`); a charge at `now` adds `x * 2^((now - t_ref) / h)` to `v_c`, and
//! the order is by `v`. Every 64 half-lives (or when the clock goes back)
//! the values are rescaled to `t_ref = now`, one O(clients) pass.

use super::book::Book;
use super::least::LeastValue;
use super::lpm::LpmRule;
use super::policy::{AdmissionOrder, OptionSpec, PolicySpec, Registered, Room, StateField};
use super::state::SavedClient;
use crate::radix::RadixTree;

/// Half-lives after which the values are rescaled to the current time.
const RESCALE_AFTER: f64 = 64.0;
/// Decayed service below which an idle client carries nothing (forgettable).
const NEGLIGIBLE: f64 = 1e-9;

#[derive(Debug)]
pub(super) struct Las {
    half_life: f64,
    w_in: f64,
    w_out: f64,
    /// Per client its service scaled to `t_ref`, and the waiting clients by it.
    order: LeastValue,
    /// The time the values are scaled to, and the clock's last reading.
    t_ref: f64,
    now: f64,
}

impl Registered for Las {
    const SPEC: PolicySpec = PolicySpec {
        name: "las",
        class_name: "LAS",
        options: &[
            OptionSpec::new("half_life_s", 60.0),
            OptionSpec::new("w_in", 1.0),
            OptionSpec::new("w_out", 2.0),
        ],
        needs_tree: false,
        refills: false,
        stop_at_unfit: true,
        state_field: Some(StateField {
            name: "attained",
            min: Some(0.0),
            metric: "scheduler_las_attained",
            help: "LAS attained service (decayed)",
            lead_sign: 1.0,
        }),
        service_weights: Some((1, 2)),
    };
    fn build(options: &[f64], _rule: LpmRule) -> Self {
        Las {
            half_life: options[0],
            w_in: options[1],
            w_out: options[2],
            order: LeastValue::default(),
            t_ref: 0.0,
            now: 0.0,
        }
    }
}

impl Las {
    /// `2^(dt / h)`.
    fn growth(&self, dt: f64) -> f64 {
        (dt / self.half_life).exp2()
    }

    /// Rescale every value to `t_ref = t` (`t >= t_ref`).
    fn rescale(&mut self, t: f64) {
        self.order.scale(self.growth(self.t_ref - t));
        self.t_ref = t;
    }

    /// Charge client `c` `x` tokens of service now (never below 0).
    fn charge<T>(&mut self, book: &Book<T>, c: u32, x: f64) {
        let value = self.order.value(c) + x * self.growth(self.now - self.t_ref);
        // never below 0, and never -0.0 (a distinct key)
        self.order
            .set(book, c, if value > 0.0 { value } else { 0.0 });
    }
}

impl AdmissionOrder for Las {
    fn add_client(&mut self) {
        self.order.add_client();
    }

    fn reuse_client(&mut self, c: u32) {
        self.order.reset(c);
    }

    /// Forget an idle client whose service has decayed to nothing: back, it
    /// starts at 0 as it nearly would have.
    fn can_forget<T>(&self, _book: &Book<T>, c: u32) -> bool {
        self.state_value(c, self.now) < NEGLIGIBLE
    }

    /// Its decayed service: what it is behind a new client.
    fn debt(&self, c: u32) -> f64 {
        self.state_value(c, self.now)
    }

    fn set_time(&mut self, now: f64) {
        if now < self.now {
            // the clock went back (a new time base): keep the values as
            // they are now, relabelled to the new time
            self.rescale(self.now);
            self.t_ref = now;
        } else if (now - self.t_ref) / self.half_life > RESCALE_AFTER {
            self.rescale(now);
        }
        self.now = now;
    }

    fn load_counters(&mut self, clients: &[SavedClient], _refills: u64) {
        let g = self.growth(self.now - self.t_ref);
        for (c, saved) in clients.iter().enumerate() {
            self.order.set_idle(c as u32, saved.counter * g);
        }
    }

    fn charge_admission<T>(&mut self, book: &Book<T>, r: u32, extend: usize) {
        let q = book.req(r);
        if !q.resumed {
            let c = q.client;
            let w = book.clients[c as usize].weight;
            self.charge(book, c, self.w_in * extend as f64 / w);
        }
    }

    fn charge_output<T>(&mut self, book: &Book<T>, c: u32, tokens: f64) {
        let w = book.clients[c as usize].weight;
        self.charge(book, c, self.w_out * tokens / w);
    }

    fn recharge_extend<T>(&mut self, book: &Book<T>, c: u32, old: usize, new: usize, w: f64) {
        self.charge(book, c, self.w_in * (new as f64 - old as f64) / w);
    }

    /// The least decayed service first: the least scaled value (decay
    /// scales every value alike).
    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        self.order.next_candidate(book, room)
    }

    fn enqueue<T>(&mut self, book: &Book<T>, _tree: Option<&RadixTree>, r: u32) {
        self.order.enqueue(book, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.order.dequeue(book, r);
    }

    fn state_value(&self, c: u32, now: f64) -> f64 {
        self.order.value(c) * self.growth(self.t_ref - now.max(self.now))
    }

    fn check_invariants<T>(&self, book: &Book<T>, _tree: Option<&RadixTree>) {
        self.order.check_invariants(book);
        let clients = book.clients.len() as u32;
        assert!(
            (0..clients).all(|c| self.order.value(c) >= 0.0),
            "service never negative"
        );
    }
}
