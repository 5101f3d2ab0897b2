//! VTC (ALGORITHMS.md §5): per-client virtual counters. The waiting client
//! with the smallest counter (ties: first-seen client) has its oldest request
//! admitted if it fits; stop at the first that does not fit (one larger than
//! the whole budget: admitted alone by the facade's oversize rule,
//! `sched/mod.rs`, charged as any admission). Admission
//! charges `w_in * input_len / w_c`, each output token `w_out / w_c`. A
//! client whose queue goes from empty to non-empty is lifted to the minimum
//! counter of the other waiting clients.

use super::book::Book;
use super::least::LeastValue;
use super::lpm::LpmRule;
use super::policy::{AdmissionOrder, OptionSpec, PolicySpec, Registered, Room, StateField};
use super::state::SavedClient;
use crate::radix::RadixTree;

#[derive(Debug)]
pub(super) struct Vtc {
    w_in: f64,
    w_out: f64,
    /// The virtual counters and the waiting clients by counter.
    order: LeastValue,
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
            order: LeastValue::default(),
            restored_waiting: Vec::new(),
        }
    }
}

impl Registered for Vtc {
    const SPEC: PolicySpec = PolicySpec {
        name: "vtc",
        class_name: "VTC",
        options: &[OptionSpec::new("w_in", 1.0), OptionSpec::new("w_out", 2.0)],
        needs_tree: false,
        refills: false,
        stop_at_unfit: true,
        state_field: Some(StateField {
            name: "counter",
            min: Some(0.0),
            metric: "scheduler_vtc_counter",
            help: "VTC counter",
            lead_sign: 1.0,
        }),
        service_weights: Some((0, 1)),
    };
    fn build(options: &[f64], _rule: LpmRule) -> Self {
        Vtc::new(options[0], options[1])
    }
}

impl AdmissionOrder for Vtc {
    fn add_client(&mut self) {
        self.order.add_client();
        self.restored_waiting.push(false);
    }

    fn reuse_client(&mut self, c: u32) {
        self.order.reset(c);
        self.restored_waiting[c as usize] = false;
    }

    /// Forget an idle client whose counter is at or below the lift floor
    /// (the smallest counter of the clients with waiting requests): back,
    /// it would be lifted at least to the floor as a new client is, so it
    /// carries no debt. With nobody waiting there is no floor: keep it.
    fn can_forget<T>(&self, _book: &Book<T>, c: u32) -> bool {
        self.order
            .least()
            .is_some_and(|floor| self.order.value(c) <= floor)
    }

    /// Its counter: what it is ahead of a new client (who starts at 0).
    fn debt(&self, c: u32) -> f64 {
        self.order.value(c)
    }

    fn load_counters(&mut self, clients: &[SavedClient], _refills: u64) {
        for (c, saved) in clients.iter().enumerate() {
            self.order.set_idle(c as u32, saved.counter);
            self.restored_waiting[c] = saved.waiting > 0;
        }
    }

    fn enqueue<T>(&mut self, book: &Book<T>, _tree: Option<&RadixTree>, r: u32) {
        let c = book.req(r).client;
        if book.clients[c as usize].waiting == 0 {
            // Lift to the minimum counter of the other waiting clients
            // (not a client re-added after a restore: it was waiting).
            let restored = std::mem::take(&mut self.restored_waiting[c as usize]);
            if let (false, Some(min)) = (restored, self.order.least()) {
                self.order.set_idle(c, self.order.value(c).max(min));
            }
        }
        self.order.enqueue(book, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.order.dequeue(book, r);
    }

    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        self.order.next_candidate(book, room)
    }

    fn charge_admission<T>(&mut self, book: &Book<T>, r: u32, _extend: usize) {
        let q = book.req(r);
        if !q.resumed {
            let w = book.clients[q.client as usize].weight;
            self.charge(book, q.client, self.w_in * q.input_len as f64 / w);
        }
    }

    fn refund_input<T>(&mut self, book: &Book<T>, c: u32, input_len: usize, admission_weight: f64) {
        self.charge(book, c, -(self.w_in * input_len as f64 / admission_weight));
    }

    fn keep_place<T>(&mut self, book: &Book<T>, c: u32) {
        // Only a client with nothing waiting would be lifted.
        if book.clients[c as usize].waiting == 0 {
            self.restored_waiting[c as usize] = true;
        }
    }

    fn charge_output<T>(&mut self, book: &Book<T>, c: u32, tokens: f64) {
        let w = book.clients[c as usize].weight;
        self.charge(book, c, self.w_out * tokens / w);
    }

    fn state_value(&self, c: u32, _now: f64) -> f64 {
        self.order.value(c)
    }

    fn check_invariants<T>(&self, book: &Book<T>, _tree: Option<&RadixTree>) {
        self.order.check_invariants(book);
    }
}

impl Vtc {
    /// Add `x` to client `c`'s counter.
    fn charge<T>(&mut self, book: &Book<T>, c: u32, x: f64) {
        let counter = self.order.value(c) + x;
        self.order.set(book, c, counter);
    }
}
