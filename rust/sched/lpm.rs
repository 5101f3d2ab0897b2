//! LPM: longest cached prefix first, ties by arrival; a request that does not
//! fit is skipped and the walk goes on (the paper's `CanAdd`), so LPM is
//! exactly DLPM with an infinite quantum. One walk per `schedule`, ended
//! early once the smallest extend length left exceeds the budget. Charges
//! nothing but the facade's `service` (input weight 1, output weight 2).
//! When every waiting request exceeds the whole budget, the facade's
//! oversize rule (`sched/mod.rs`) admits the first in LPM order alone.

use super::book::Book;
use super::policy::AdmissionOrder;
use super::prefix::{LpmKey, PrefixIndex};
use super::Admission;
use crate::radix::RadixTree;

#[derive(Debug, Default)]
pub(super) struct Lpm {
    index: PrefixIndex,
}

impl AdmissionOrder for Lpm {
    fn enqueue<T>(&mut self, book: &Book<T>, tree: Option<&RadixTree>, r: u32) {
        let tree = tree.expect("LPM is given a tree (checked by the facade)");
        self.index.insert(book, tree, r);
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.index.remove(book, r);
    }

    fn schedule<T>(
        &mut self,
        book: &mut Book<T>,
        _tree: Option<&RadixTree>,
        budget: usize,
        max_requests: usize,
        _refill: bool,
    ) -> Vec<Admission<T>> {
        let mut out = Vec::new();
        let mut left = budget;
        let mut pos: Option<LpmKey> = None;
        while out.len() < max_requests {
            if !self.index.min_extend().is_some_and(|e| e <= left) {
                break; // nothing left fits
            }
            let Some((k, r)) = self.index.next_after(pos) else {
                break;
            };
            pos = Some(k);
            let cached = self.index.match_len(r);
            let extend = book.req(r).input_len - cached;
            if extend > left {
                continue;
            }
            left -= extend;
            self.dequeue(book, r);
            out.push(book.admit(r, cached));
        }
        out
    }

    fn prefix(&self) -> Option<&PrefixIndex> {
        Some(&self.index)
    }
    fn prefix_mut(&mut self) -> Option<&mut PrefixIndex> {
        Some(&mut self.index)
    }

    fn check_invariants<T>(&self, book: &Book<T>, tree: Option<&RadixTree>) {
        self.index.check_invariants(book, tree);
    }
}
