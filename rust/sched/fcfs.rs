//! FCFS: admit in arrival (`seq`) order; stop at the first request that does
//! not fit the remaining budget (no overtaking). Charges nothing but the
//! facade's `service` (input weight 1, output weight 2). A head larger than
//! the whole budget is admitted alone by the facade's oversize rule
//! (`sched/mod.rs`), so it never blocks the queue.

use std::collections::BTreeMap;

use super::book::Book;
use super::lpm::LpmRule;
use super::policy::{AdmissionOrder, PolicySpec, Registered, Room};
use crate::radix::RadixTree;

#[derive(Debug, Default)]
pub(super) struct Fcfs {
    /// Waiting requests: seq -> slot.
    by_arrival: BTreeMap<u64, u32>,
}

impl Registered for Fcfs {
    const SPEC: PolicySpec = PolicySpec {
        name: "fcfs",
        class_name: "FCFS",
        options: &[],
        needs_tree: false,
        refills: false,
        stop_at_unfit: true,
        state_field: None,
        service_weights: None,
    };
    fn build(_options: &[f64], _rule: LpmRule) -> Self {
        Fcfs::default()
    }
}

impl AdmissionOrder for Fcfs {
    fn enqueue<T>(&mut self, book: &Book<T>, _tree: Option<&RadixTree>, r: u32) {
        self.by_arrival.insert(book.req(r).seq, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.by_arrival.remove(&book.req(r).seq);
    }

    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        let (_, &r) = self.by_arrival.iter().next()?;
        Some((r, book.cached_now(room.tree, r)))
    }
}
