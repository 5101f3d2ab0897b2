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

use std::collections::{BTreeMap, BTreeSet};

use super::book::Book;
use super::lpm::LpmRule;
use super::policy::{AdmissionOrder, OptionSpec, PolicySpec, Registered, Room, StateField};
use super::state::SavedClient;
use crate::ordf64::OrdF64;

/// Half-lives after which the values are rescaled to the current time.
const RESCALE_AFTER: f64 = 64.0;
/// Decayed service below which an idle client carries nothing (forgettable).
const NEGLIGIBLE: f64 = 1e-9;

#[derive(Debug)]
pub(super) struct Las {
    half_life: f64,
    w_in: f64,
    w_out: f64,
    /// Per client: its service scaled to `t_ref`.
    v: Vec<f64>,
    /// Per client: its waiting requests, seq -> slot.
    queues: Vec<BTreeMap<u64, u32>>,
    /// Clients with waiting requests by (scaled service, client index).
    by_service: BTreeSet<(OrdF64, u32)>,
    /// The time `v` is scaled to, and the clock's last reading.
    t_ref: f64,
    now: f64,
}

impl Registered for Las {
    const SPEC: PolicySpec = PolicySpec {
        name: "las",
        class_name: "LAS",
        options: &[
            OptionSpec {
                name: "half_life_s",
                engine_default: 60.0,
            },
            OptionSpec {
                name: "w_in",
                engine_default: 1.0,
            },
            OptionSpec {
                name: "w_out",
                engine_default: 2.0,
            },
        ],
        needs_tree: false,
        refills: false,
        stop_at_unfit: true,
        state_field: Some(StateField {
            name: "attained",
            min: Some(0.0),
            metric: "scheduler_las_attained",
            help: "LAS attained service (decayed)",
        }),
        service_weights: Some((1, 2)),
    };
    fn build(options: &[f64], _rule: LpmRule) -> Self {
        Las {
            half_life: options[0],
            w_in: options[1],
            w_out: options[2],
            v: Vec::new(),
            queues: Vec::new(),
            by_service: BTreeSet::new(),
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
        let f = self.growth(self.t_ref - t);
        for x in &mut self.v {
            *x *= f;
        }
        self.by_service = std::mem::take(&mut self.by_service)
            .into_iter()
            .map(|(OrdF64(x), c)| (OrdF64(x * f), c))
            .collect();
        self.t_ref = t;
    }

    /// Set client `c`'s scaled value, re-keying it if it is listed (waiting).
    fn set_value<T>(&mut self, book: &Book<T>, c: u32, value: f64) {
        let listed = book.clients[c as usize].waiting > 0;
        if listed {
            self.by_service.remove(&(OrdF64(self.v[c as usize]), c));
        }
        self.v[c as usize] = value;
        if listed {
            self.by_service.insert((OrdF64(value), c));
        }
    }

    /// Charge client `c` `x` tokens of service now (never below 0).
    fn charge<T>(&mut self, book: &Book<T>, c: u32, x: f64) {
        let value = self.v[c as usize] + x * self.growth(self.now - self.t_ref);
        // never below 0, and never -0.0 (a distinct key)
        self.set_value(book, c, if value > 0.0 { value } else { 0.0 });
    }
}

impl AdmissionOrder for Las {
    fn add_client(&mut self) {
        self.v.push(0.0);
        self.queues.push(BTreeMap::new());
    }

    fn reuse_client(&mut self, c: u32) {
        self.v[c as usize] = 0.0;
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
            self.v[c] = saved.counter * g;
        }
    }

    fn enqueue<T>(&mut self, book: &Book<T>, _tree: Option<&crate::radix::RadixTree>, r: u32) {
        let q = book.req(r);
        let c = q.client;
        if book.clients[c as usize].waiting == 0 {
            self.by_service.insert((OrdF64(self.v[c as usize]), c));
        }
        self.queues[c as usize].insert(q.seq, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        let q = book.req(r);
        let c = q.client;
        self.queues[c as usize].remove(&q.seq);
        if book.clients[c as usize].waiting == 1 {
            self.by_service.remove(&(OrdF64(self.v[c as usize]), c));
        }
    }

    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        let &(_, c) = self.by_service.iter().next()?;
        let (_, &r) = self.queues[c as usize].iter().next()?;
        Some((r, book.cached_now(room.tree, r)))
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

    fn state_value(&self, c: u32, now: f64) -> f64 {
        self.v[c as usize] * self.growth(self.t_ref - now.max(self.now))
    }

    fn check_invariants<T>(&self, book: &Book<T>, _tree: Option<&crate::radix::RadixTree>) {
        let listed = (0..book.clients.len())
            .filter(|&c| book.clients[c].waiting > 0)
            .count();
        assert_eq!(self.by_service.len(), listed, "listed clients");
        for &(OrdF64(x), c) in &self.by_service {
            assert_eq!(x, self.v[c as usize], "listed value");
            assert_eq!(
                self.queues[c as usize].len(),
                book.clients[c as usize].waiting
            );
        }
        assert!(self.v.iter().all(|&x| x >= 0.0), "service never negative");
    }
}
