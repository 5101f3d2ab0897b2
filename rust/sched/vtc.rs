//! VTC (ALGORITHMS.md §5): per-client virtual counters. The waiting client
//! with the smallest counter (ties: first-seen client) has its oldest request
//! admitted if it fits; stop at the first that does not fit (one larger than
//! the whole budget: admitted alone by the facade's oversize rule,
//! `sched/mod.rs`, charged as any admission). Admission
//! charges `w_in * input_len / w_c`, each output token `w_out / w_c`. A
//! client whose queue goes from empty to non-empty is lifted to the minimum
//! counter of the other waiting clients.

use std::collections::{BTreeMap, BTreeSet};

use super::book::Book;
use super::lpm::LpmRule;
use super::policy::{AdmissionOrder, OptionSpec, PolicySpec, Registered, Room, StateField};
use super::state::SavedClient;
use crate::ordf64::OrdF64;
use crate::radix::RadixTree;

#[derive(Debug)]
pub(super) struct Vtc {
    w_in: f64,
    w_out: f64,
    /// Per client: the virtual counter.
    counters: Vec<f64>,
    /// Per client: its waiting requests, seq -> slot.
    queues: Vec<BTreeMap<u64, u32>>,
    /// Clients with waiting requests by (counter, client index).
    by_counter: BTreeSet<(OrdF64, u32)>,
    /// Per client: it had requests waiting when a restored state was saved,
    /// so its first re-added request must not lift it (its queue never went
    /// empty in the scheduler that saved the state).
    restored_waiting: Vec<bool>,
}

impl Vtc {
    pub fn new(w_in: f64, w_out: f64) -> Self {
        Vtc {
            w_in,
            w_out,
            counters: Vec::new(),
            queues: Vec::new(),
            by_counter: BTreeSet::new(),
            restored_waiting: Vec::new(),
        }
    }

    /// Set client `c`'s counter, re-keying it if it is listed (waiting).
    fn set_counter<T>(&mut self, book: &Book<T>, c: u32, value: f64) {
        let listed = book.clients[c as usize].waiting > 0;
        if listed {
            self.by_counter
                .remove(&(OrdF64(self.counters[c as usize]), c));
        }
        self.counters[c as usize] = value;
        if listed {
            self.by_counter.insert((OrdF64(value), c));
        }
    }
}

impl Registered for Vtc {
    const SPEC: PolicySpec = PolicySpec {
        name: "vtc",
        class_name: "VTC",
        options: &[
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
            name: "counter",
            min: Some(0.0),
            metric: "scheduler_vtc_counter",
            help: "VTC counter",
        }),
        service_weights: Some((0, 1)),
    };
    fn build(options: &[f64], _rule: LpmRule) -> Self {
        Vtc::new(options[0], options[1])
    }
}

impl AdmissionOrder for Vtc {
    fn add_client(&mut self) {
        self.counters.push(0.0);
        self.queues.push(BTreeMap::new());
        self.restored_waiting.push(false);
    }

    fn reuse_client(&mut self, c: u32) {
        self.counters[c as usize] = 0.0;
        self.restored_waiting[c as usize] = false;
    }

    /// Forget an idle client whose counter is at or below the lift floor
    /// (the smallest counter of the clients with waiting requests): back,
    /// it would be lifted at least to the floor as a new client is, so it
    /// carries no debt. With nobody waiting there is no floor: keep it.
    fn can_forget<T>(&self, _book: &Book<T>, c: u32) -> bool {
        self.by_counter
            .iter()
            .next()
            .is_some_and(|&(OrdF64(floor), _)| self.counters[c as usize] <= floor)
    }

    /// Its counter: what it is ahead of a new client (who starts at 0).
    fn debt(&self, c: u32) -> f64 {
        self.counters[c as usize]
    }

    fn load_counters(&mut self, clients: &[SavedClient], _refills: u64) {
        for (c, saved) in clients.iter().enumerate() {
            self.counters[c] = saved.counter;
            self.restored_waiting[c] = saved.waiting > 0;
        }
    }

    fn enqueue<T>(&mut self, book: &Book<T>, _tree: Option<&RadixTree>, r: u32) {
        let q = book.req(r);
        let c = q.client;
        if book.clients[c as usize].waiting == 0 {
            // Lift to the minimum counter of the other waiting clients
            // (not a client re-added after a restore: it was waiting).
            let counter = &mut self.counters[c as usize];
            let restored = std::mem::take(&mut self.restored_waiting[c as usize]);
            if let (false, Some(&(OrdF64(min), _))) = (restored, self.by_counter.iter().next()) {
                *counter = counter.max(min);
            }
            self.by_counter.insert((OrdF64(*counter), c));
        }
        self.queues[c as usize].insert(q.seq, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        let q = book.req(r);
        let c = q.client;
        self.queues[c as usize].remove(&q.seq);
        if book.clients[c as usize].waiting == 1 {
            self.by_counter
                .remove(&(OrdF64(self.counters[c as usize]), c));
        }
    }

    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        let &(_, c) = self.by_counter.iter().next()?;
        let (_, &r) = self.queues[c as usize]
            .iter()
            .next()
            .expect("listed client has a waiting request");
        Some((r, book.cached_now(room.tree, r)))
    }

    fn charge_admission<T>(&mut self, book: &Book<T>, r: u32, _extend: usize) {
        let q = book.req(r);
        if !q.resumed {
            let c = q.client;
            let w = book.clients[c as usize].weight;
            let counter = self.counters[c as usize] + self.w_in * q.input_len as f64 / w;
            self.set_counter(book, c, counter);
        }
    }

    fn refund_input<T>(&mut self, book: &Book<T>, c: u32, input_len: usize, admission_weight: f64) {
        let counter = self.counters[c as usize] - self.w_in * input_len as f64 / admission_weight;
        self.set_counter(book, c, counter);
    }

    fn keep_place<T>(&mut self, book: &Book<T>, c: u32) {
        // Only a client with nothing waiting would be lifted.
        if book.clients[c as usize].waiting == 0 {
            self.restored_waiting[c as usize] = true;
        }
    }

    fn charge_output<T>(&mut self, book: &Book<T>, c: u32, tokens: f64) {
        let w = book.clients[c as usize].weight;
        let counter = self.counters[c as usize] + self.w_out * tokens / w;
        self.set_counter(book, c, counter);
    }

    fn state_value(&self, c: u32, _now: f64) -> f64 {
        self.counters[c as usize]
    }
}
