//! DLPM (ALGORITHMS.md §6, Algorithm 1): LPM order gated by per-client
//! deficits.
//!
//! Walk in LPM order; a request of a client with `q <= 0` triggers the refill
//! check (if no waiting client has `q > 0`, every known client with `q <= 0`
//! gets `+Q_u`); a request is admitted if its client has `q > 0` and it fits
//! (else skipped), charging `w_e * extend_len / w_c`; output tokens charge
//! `w_q / w_c`. The walk is repeated (Algorithm 1's `while not
//! Queue.empty()`) until a whole walk admits nothing and refills nothing, so
//! DLPM is work-conserving: it only reorders.
//!
//! A refill check that fires applies at once the `k` single refills after
//! which some waiting client has `q > 0` (`k` = min over waiting clients of
//! the refills each needs; each known client with `q <= 0` gets `Q_u` per
//! refill until positive or `k` are done; [`Dlpm::refills`] counts all `k`),
//! computed in O(#clients) by [`crate::deficit`], never one quantum at a
//! time.
//!
//! One case is not work-conserving, on purpose: a waiting client with
//! `q > 0` none of whose requests fits blocks the refill that clients without
//! credit need (the paper's CheckRefill). Refilling past it would give the
//! others quanta it does not get, breaking Theorem 4.1 (its proof needs every
//! backlogged client refilled the same number of times) and letting small
//! requests starve its large one. Such a call admits nothing, so the
//! facade's oversize rule (`sched/mod.rs`) then admits alone what a walk with
//! unlimited budget admits first: the first request, in LPM order, of a
//! waiting client with credit (every one of them exceeds the whole budget).
//! Its deficit is charged as usual (it may go far below 0: the client then
//! waits as many refills as its debt takes), and the next call refills if
//! no waiting client has credit left. So a request that can never fit
//! blocks the others' refills for one call only; with the rule off
//! (`oversize_budget <= token_budget`) it blocks them while its client has
//! credit.
//!
//! Strict credit (option `strict_credit`; ALGORITHMS.md §6; off in the
//! paper's Algorithm 1 and with a fixed quantum, on with the automatic
//! quantum, the engines' default): a request is admitted only when its
//! charge is below its client's deficit. A request of a client with credit
//! that does not cover it is set aside for the pass (`Walk::poor`), like
//! one that does not fit. A walk that admits nothing, while every waiting
//! client with credit has only such requests, refills in rounds
//! ([`Dlpm::poverty_refill`]) until some waiting client can pay for its
//! cheapest request; a client with credit and a covered request that does
//! not fit blocks it, as above. Theorem 4.1's bound is unchanged (the
//! deficit's range moves up by one charge and no longer goes below `-w_q *
//! M`).
//!
//! Cost: the repeated walks stay within LPM's bound. A request seen not to
//! fit leaves its client's order for the rest of the call (the budget only
//! shrinks), a walk is repeated only after a refill or admission, and a
//! refill event needs an admission since the previous one. While some
//! waiting client has credit, requests of clients without credit are skipped
//! with no side effect, so the walk merges only the credit clients' orders.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::book::Book;
use super::lpm::LpmRule;
use super::policy::{AdmissionOrder, OptionSpec, PolicySpec, Registered, Room, StateField, Unfit};
use super::prefix::{prefix_accessors, LpmKey, PrefixIndex};
use super::state::SavedClient;
use crate::deficit::{add_saturating, refill, refill_steps_above, rounds_until_positive, Rounds};
use crate::quantum::Quantum;
use crate::radix::RadixTree;

#[derive(Debug)]
pub(super) struct Dlpm {
    /// `Q_u`: fixed, or automatic (`quantum_scale > 0`, `crate::quantum`).
    quantum: Quantum,
    /// The largest quantum a refill has used (Theorem 4.1's `Q*`; 0 before
    /// the first refill).
    largest_quantum: f64,
    w_e: f64,
    w_q: f64,
    index: PrefixIndex,
    /// Per client: the deficit `q`.
    deficits: Vec<f64>,
    /// Clients with waiting requests and `q > 0`.
    credit_clients_waiting: usize,
    /// Virtual refills so far (diagnostics).
    refills: u64,
    /// Strict credit (option `strict_credit`, see the module docs): a
    /// request is admitted only when its charge is below its client's
    /// deficit.
    strict: bool,
    /// The current pass.
    walk: Walk,
}

impl Dlpm {
    pub fn new(quantum: f64, w_e: f64, w_q: f64, quantum_scale: f64, strict: bool) -> Self {
        Dlpm {
            quantum: Quantum::new(quantum, quantum_scale),
            largest_quantum: 0.0,
            w_e,
            w_q,
            index: PrefixIndex::with_client_orders(),
            deficits: Vec::new(),
            credit_clients_waiting: 0,
            refills: 0,
            strict,
            walk: Walk::default(),
        }
    }

    fn has_credit(&self, c: u32) -> bool {
        self.deficits[c as usize] > 0.0
    }

    /// Client `c` has waiting requests and credit.
    fn waits_with_credit<T>(&self, book: &Book<T>, c: u32) -> bool {
        credit_waits(book, &self.deficits, c)
    }

    /// Move client `c`'s deficit by `delta` (saturating), keeping
    /// `credit_clients_waiting` in step.
    fn add_deficit<T>(&mut self, book: &Book<T>, c: u32, delta: f64) {
        let before = self.waits_with_credit(book, c);
        let q = &mut self.deficits[c as usize];
        *q = add_saturating(*q, delta);
        let after = self.waits_with_credit(book, c);
        match (before, after) {
            (false, true) => self.credit_clients_waiting += 1,
            (true, false) => self.credit_clients_waiting -= 1,
            _ => {}
        }
    }

    /// The refill check fired (no waiting client has `q > 0`): apply in one
    /// go the `k` consecutive single refills (`q += Q_u` for every known
    /// client with `q <= 0`) after which some waiting client has `q > 0`. A
    /// client with `q <= 0` gets `Q_u` per refill until it is positive or the
    /// `k` refills are done. `refills` counts the `k` virtual refills.
    /// O(#clients); never loops once per quantum.
    fn bulk_refill<T>(&mut self, book: &Book<T>) {
        debug_assert_eq!(self.credit_clients_waiting, 0);
        let waiting = book
            .clients
            .iter()
            .zip(&self.deficits)
            .filter(|(cl, _)| cl.waiting > 0)
            .map(|(_, &q)| q);
        let quantum = self.quantum.value();
        let Some(rounds) = rounds_until_positive(waiting, quantum) else {
            return;
        };
        self.apply_rounds(book, quantum, rounds, &[]);
        debug_assert!(self.credit_clients_waiting > 0);
    }

    /// Apply `rounds` refill rounds of `quantum`: every known client with
    /// `q <= 0` gets `quantum` per round until positive, and each
    /// `(client, threshold)` of `poor` (strict credit) per round until `q`
    /// exceeds its threshold; counted in `refills`, `largest_quantum` and
    /// `credit_clients_waiting` kept in step.
    fn apply_rounds<T>(
        &mut self,
        book: &Book<T>,
        quantum: f64,
        rounds: Rounds,
        poor: &[(u32, f64)],
    ) {
        self.largest_quantum = self.largest_quantum.max(quantum);
        self.refills = self.refills.saturating_add(rounds.count);
        refill(&mut self.deficits, quantum, rounds);
        for &(c, t) in poor {
            let q = &mut self.deficits[c as usize];
            *q = refill_steps_above(*q, t, quantum, rounds.count).1;
        }
        self.credit_clients_waiting = (0..book.clients.len() as u32)
            .filter(|&c| self.waits_with_credit(book, c))
            .count();
    }
}

impl Dlpm {
    /// What admitting waiting request `r` would take from its client's
    /// deficit now: `w_e * extend / w` (nothing for a preempted request
    /// coming back, see `charge_admission`).
    fn charge<T>(&self, book: &Book<T>, r: u32) -> f64 {
        let q = book.req(r);
        if q.resumed {
            return 0.0;
        }
        let extend = q.input_len - self.index.match_len(r);
        self.w_e * extend as f64 / book.clients[q.client as usize].weight
    }

    /// Whether client `c` may be admitted request `r`: `q > 0`, and under
    /// strict credit the charge below `q` (or infinite: a charge no credit
    /// can cover, from a weight near 0, needs only `q > 0`, else it would
    /// wait forever).
    fn affordable<T>(&self, book: &Book<T>, c: u32, r: u32) -> bool {
        if !self.has_credit(c) {
            return false;
        }
        let charge = if self.strict {
            self.charge(book, r)
        } else {
            0.0
        };
        charge < self.deficits[c as usize] || charge.is_infinite()
    }

    /// Strict credit's refill, at the end of a walk that admitted nothing:
    /// every waiting client with credit has only requests it cannot afford
    /// (each seen in this pass and set aside). Unless a client with credit
    /// set aside a request it can afford (one that did not fit the budget:
    /// it blocks refills as a client with credit always does), apply the `k`
    /// rounds after which some waiting client can afford its cheapest
    /// request: each round gives `Q_u` to every known client with `q <= 0`
    /// (until positive) and to every waiting client with credit (until `q`
    /// exceeds its cheapest charge); `k` is the fewest any waiting client
    /// needs, so every waiting client gets all `k`. Returns whether it
    /// refilled.
    fn poverty_refill<T>(&mut self, book: &Book<T>) -> bool {
        if self.walk.poor.is_empty() {
            return false;
        }
        let blocked = self
            .walk
            .hidden
            .iter()
            .any(|&(c, _, r)| self.affordable(book, c, r));
        if blocked {
            return false;
        }
        // each waiting client with credit: its cheapest charge (every one
        // of its waiting requests is set aside by now)
        // (a per-client column, so many clients and set-aside requests
        // cost O(set aside + clients), not their product)
        let mut least = vec![f64::INFINITY; book.clients.len()];
        let set_aside = self.walk.poor.iter().chain(&self.walk.hidden);
        for &(c, _, r) in set_aside {
            if credit_waits(book, &self.deficits, c) {
                let t = &mut least[c as usize];
                *t = t.min(self.charge(book, r));
            }
        }
        let cheapest: Vec<(u32, f64)> = (0..book.clients.len() as u32)
            .zip(least)
            .filter(|(_, t)| *t < f64::INFINITY)
            .collect();
        debug_assert_eq!(cheapest.len(), self.credit_clients_waiting);
        let quantum = self.quantum.value();
        let in_debt = book
            .clients
            .iter()
            .zip(&self.deficits)
            .filter(|(cl, &q)| cl.waiting > 0 && q <= 0.0)
            .map(|(_, &q)| q);
        let to_positive = rounds_until_positive(in_debt, quantum);
        let to_afford = cheapest
            .iter()
            .map(|&(c, t)| refill_steps_above(self.deficits[c as usize], t, quantum, u64::MAX).0)
            .min();
        let rounds = match (to_positive, to_afford) {
            (Some(r), Some(k)) if r.count <= k => r,
            (_, Some(k)) => Rounds::exactly(k),
            (Some(r), None) => r,
            (None, None) => return false,
        };
        self.apply_rounds(book, quantum, rounds, &cheapest);
        // what was set aside as unaffordable may be affordable now
        for (c, k, r) in std::mem::take(&mut self.walk.poor) {
            self.index.unhide_from_client(c, k, r);
        }
        true
    }
}

/// Client `c` has waiting requests and credit (`q > 0`).
fn credit_waits<T>(book: &Book<T>, deficits: &[f64], c: u32) -> bool {
    book.clients[c as usize].waiting > 0 && deficits[c as usize] > 0.0
}

/// The state of one `schedule` pass: Algorithm 1's walks (see the module
/// docs), repeated until a whole walk admits nothing and refills nothing.
#[derive(Debug, Default)]
struct Walk {
    /// Position of the current walk (None: before its first request).
    pos: Option<LpmKey>,
    /// The current walk admitted or refilled.
    progress: bool,
    /// The credit clients' orders merged (valid until a refill or the end
    /// of a walk).
    merge: BinaryHeap<Reverse<(LpmKey, u32)>>,
    merge_valid: bool,
    /// Requests seen not to fit cannot fit again in this pass (the budget
    /// only shrinks), so later walks must not step over them again: they
    /// leave their client's order (used by the merge) until the end of the
    /// pass. The global order keeps them: they still trigger refill checks.
    hidden: Vec<(u32, LpmKey, u32)>,
    /// Strict credit: requests set aside because their client's credit
    /// does not cover their charge, hidden the same way until a refill or
    /// the end of the pass.
    poor: Vec<(u32, LpmKey, u32)>,
    /// The current candidate's key.
    key: Option<LpmKey>,
}

impl Dlpm {
    /// The next request of the walk in LPM order: the credit clients' orders
    /// merged while some waiting client has credit (requests of clients
    /// without credit are then skipped with no side effect), else the
    /// global order.
    fn step<T>(&mut self, book: &Book<T>) -> Option<(LpmKey, u32)> {
        if self.credit_clients_waiting == 0 {
            return self.index.next_after(self.walk.pos);
        }
        let walk = &mut self.walk;
        if !walk.merge_valid {
            walk.merge.clear();
            for c in 0..book.clients.len() as u32 {
                if credit_waits(book, &self.deficits, c) {
                    if let Some(k) = self.index.client_next(c, walk.pos) {
                        walk.merge.push(Reverse((k, c)));
                    }
                }
            }
            walk.merge_valid = true;
        }
        while let Some(Reverse((k, c))) = walk.merge.pop() {
            if !(credit_waits(book, &self.deficits, c)) {
                continue;
            }
            if let Some(nk) = self.index.client_next(c, Some(k)) {
                walk.merge.push(Reverse((nk, c)));
            }
            return Some((k, self.index.client_request(c, k)));
        }
        None
    }
}

impl Registered for Dlpm {
    const SPEC: PolicySpec = PolicySpec {
        name: "dlpm",
        class_name: "DLPM",
        // the engine's quantum: sized for one engine batch
        options: &[
            OptionSpec::new("quantum", 512.0),
            OptionSpec::new("w_e", 1.0),
            OptionSpec::new("w_q", 2.0),
            // engines: automatic (the quantum above is its initial value)
            OptionSpec::new("quantum_scale", crate::quantum::DEFAULT_SCALE).zero_is_off(),
            // 0 or 1: admit only what the credit covers (module docs); the
            // engines' default with the automatic quantum (a fixed quantum
            // given without it keeps the paper's rule)
            OptionSpec::new("strict_credit", 1.0).flag(),
        ],
        needs_tree: true,
        refills: true,
        stop_at_unfit: false,
        state_field: Some(StateField {
            name: "deficit",
            min: None,
            metric: "scheduler_deficit",
            help: "DLPM deficit",
            lead_sign: -1.0,
        }),
        service_weights: Some((1, 2)),
    };
    fn build(options: &[f64], _rule: LpmRule) -> Self {
        Dlpm::new(
            options[0],
            options[1],
            options[2],
            options[3],
            options[4] != 0.0,
        )
    }
}

impl AdmissionOrder for Dlpm {
    fn add_client(&mut self) {
        self.deficits.push(0.0);
        self.index.add_client();
    }

    fn reuse_client(&mut self, c: u32) {
        self.deficits[c as usize] = 0.0;
    }

    /// Forget an idle client whose debt is paid (`q > 0`; refills bring an
    /// idle client there): back, it starts at 0 like a new client, at most
    /// one quantum less credit than it had, never less debt.
    fn can_forget<T>(&self, _book: &Book<T>, c: u32) -> bool {
        self.has_credit(c)
    }

    /// Its unpaid debt `-q` (a client with `q <= 0`).
    fn debt(&self, c: u32) -> f64 {
        -self.deficits[c as usize]
    }

    fn load_counters(&mut self, clients: &[SavedClient], refills: u64) {
        for (c, saved) in clients.iter().enumerate() {
            self.deficits[c] = saved.counter;
        }
        self.refills = refills;
    }

    fn enqueue<T>(&mut self, book: &Book<T>, tree: Option<&RadixTree>, r: u32) {
        let tree = tree.expect("DLPM is given a tree (checked by the facade)");
        self.index.insert(book, tree, r);
        let c = book.req(r).client;
        if book.clients[c as usize].waiting == 0 && self.has_credit(c) {
            self.credit_clients_waiting += 1;
        }
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.index.remove(book, r);
        let c = book.req(r).client;
        if book.clients[c as usize].waiting == 1 && self.has_credit(c) {
            self.credit_clients_waiting -= 1;
        }
    }

    fn begin_pass<T>(&mut self, _book: &Book<T>, max_requests: usize) -> usize {
        self.walk = Walk::default();
        max_requests
    }

    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        loop {
            if !self.index.min_extend().is_some_and(|e| e <= room.left) {
                // Nothing left fits: no walk admits anything any more, but
                // the next request visited (in this walk or the next) still
                // runs the refill check. If no waiting client has credit it
                // fires (in bulk) and then never again.
                if room.refill && self.credit_clients_waiting == 0 && book.waiting > 0 {
                    self.bulk_refill(book);
                }
                return None;
            }
            let Some((k, r)) = self.step(book) else {
                // End of a walk: repeat it if it admitted or refilled.
                if !(self.walk.progress || room.refill && self.poverty_refill(book)) {
                    return None;
                }
                self.walk.progress = false;
                self.walk.pos = None;
                self.walk.merge_valid = false;
                continue;
            };
            self.walk.pos = Some(k);
            let c = book.req(r).client;
            if !self.has_credit(c) && self.credit_clients_waiting == 0 {
                if !room.refill {
                    return None;
                }
                self.bulk_refill(book);
                self.walk.progress = true;
                self.walk.merge_valid = false;
            }
            if self.affordable(book, c, r) {
                self.walk.key = Some(k);
                return Some((r, self.index.match_len(r)));
            }
            if self.has_credit(c) && self.index.hide_from_client(c, k) {
                // strict credit: set aside until a refill or the pass ends
                self.walk.poor.push((c, k, r));
            }
        }
    }

    /// Skipped, and hidden from its client's order for the rest of the pass.
    fn unfit<T>(&mut self, book: &Book<T>, r: u32) -> Unfit {
        let c = book.req(r).client;
        let k = self.walk.key.expect("a candidate was returned");
        if self.index.hide_from_client(c, k) {
            self.walk.hidden.push((c, k, r));
        }
        Unfit::Skip
    }

    fn charge_admission<T>(&mut self, book: &Book<T>, r: u32, extend: usize) {
        let q = book.req(r);
        if !q.resumed {
            let c = q.client;
            let w = book.clients[c as usize].weight;
            // the automatic quantum follows the cost of a miss: the whole input
            self.quantum.admitted(self.w_e * q.input_len as f64 / w);
            self.add_deficit(book, c, -(self.w_e * extend as f64 / w));
        }
        self.walk.progress = true;
    }

    fn end_pass<T>(&mut self, _book: &Book<T>, _admitted: usize) {
        let set_aside = std::mem::take(&mut self.walk.poor);
        for (c, k, r) in std::mem::take(&mut self.walk.hidden)
            .into_iter()
            .chain(set_aside)
        {
            self.index.unhide_from_client(c, k, r);
        }
    }

    fn charge_output<T>(&mut self, book: &Book<T>, c: u32, tokens: f64) {
        let w = book.clients[c as usize].weight;
        self.quantum.charged(self.w_q * tokens / w);
        self.add_deficit(book, c, -(self.w_q * tokens / w));
    }

    fn recharge_extend<T>(
        &mut self,
        book: &Book<T>,
        c: u32,
        old: usize,
        new: usize,
        admission_weight: f64,
    ) {
        let (w_e, w) = (self.w_e, admission_weight);
        let mut delta = w_e * old as f64 / w - w_e * new as f64 / w;
        if !delta.is_finite() {
            // one of the two charges overflowed (`inf - x` or `inf - inf`):
            // charge the difference directly (saturated by add_deficit)
            delta = w_e * (old as f64 - new as f64) / w;
        }
        self.add_deficit(book, c, delta);
    }

    fn state_value(&self, c: u32, _now: f64) -> f64 {
        self.deficits[c as usize]
    }
    fn refills(&self) -> u64 {
        self.refills
    }
    fn quantum_now(&self) -> Option<(f64, f64)> {
        Some((self.quantum.value(), self.largest_quantum))
    }
    fn quantum_memory(&self) -> Option<(f64, f64)> {
        self.quantum.memory()
    }
    fn load_quantum_memory(&mut self, cost: f64, count: f64) {
        self.quantum.restore(cost, count);
    }

    prefix_accessors!(index);

    fn check_invariants<T>(&self, book: &Book<T>, tree: Option<&RadixTree>) {
        self.index.check_invariants(book, tree);
        let count = (0..book.clients.len() as u32)
            .filter(|&c| self.waits_with_credit(book, c))
            .count();
        assert_eq!(count, self.credit_clients_waiting);
    }
}
