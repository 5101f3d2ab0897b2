//! FCFS: admit in arrival (`seq`) order; stop at the first request that does
//! not fit the remaining budget (no overtaking). Charges nothing but the
//! facade's `service` (input weight 1, output weight 2). A head larger than
//! the whole budget is admitted alone by the facade's oversize rule
//! (`sched/mod.rs`), so it never blocks the queue.

use std::collections::BTreeMap;

use super::book::Book;
use super::policy::AdmissionOrder;
use super::Admission;
use crate::radix::RadixTree;

#[derive(Debug, Default)]
pub(super) struct Fcfs {
    /// Waiting requests: seq -> slot.
    by_arrival: BTreeMap<u64, u32>,
}

impl AdmissionOrder for Fcfs {
    fn enqueue<T>(&mut self, book: &Book<T>, _tree: Option<&RadixTree>, r: u32) {
        self.by_arrival.insert(book.req(r).seq, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.by_arrival.remove(&book.req(r).seq);
    }

    fn schedule<T>(
        &mut self,
        book: &mut Book<T>,
        tree: Option<&RadixTree>,
        budget: usize,
        max_requests: usize,
        _refill: bool,
    ) -> Vec<Admission<T>> {
        let mut out = Vec::new();
        let mut left = budget;
        while out.len() < max_requests {
            let Some((_, &r)) = self.by_arrival.iter().next() else {
                break;
            };
            let cached = book.cached_now(tree, r);
            let extend = book.req(r).input_len - cached;
            if extend > left {
                break;
            }
            left -= extend;
            self.dequeue(book, r);
            out.push(book.admit(r, cached));
        }
        out
    }
}
