//! LPM: longest cached prefix first, ties by arrival; a request that does not
//! fit is skipped and the walk goes on (the paper's `CanAdd`), so LPM is
//! exactly DLPM with an infinite quantum. One walk per `schedule`, ended
//! early once the smallest extend length left exceeds the budget. Charges
//! nothing but the facade's `service` (input weight 1, output weight 2).
//! When every waiting request exceeds the whole budget, the facade's
//! oversize rule (`sched/mod.rs`) admits the first in LPM order alone.
//!
//! [`LpmRule`] turns this idealised walk into the one an engine runs:
//! SGLang's (0.5) `PrefillAdder` stops at the first request that does not
//! fit, and its `SchedulePolicy` falls back to arrival order when more than
//! 128 requests wait ([`LpmRule::SGLANG`]).

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

use super::book::Book;
use super::policy::{AdmissionOrder, PolicySpec, Registered, Room, Unfit};
use super::preble::Preble;
use super::prefix::{prefix_accessors, LpmKey, PrefixIndex};
use crate::radix::RadixTree;

/// How an LPM walk treats a request that does not fit, and when it gives up
/// the prefix order (an engine setting, not fairness state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LpmRule {
    /// Stop the walk at the first request whose extend tokens do not fit
    /// what is left of the budget (SGLang's `PrefillAdder`), instead of
    /// skipping it (the paper's `CanAdd`, the default).
    pub stop_at_unfit: bool,
    /// With more than this many requests waiting, walk in arrival order
    /// instead of longest-match order (SGLang: 128); `None` (the default):
    /// always longest match.
    pub fcfs_above: Option<usize>,
    /// Replace the LPM walk by Preble's multi-level priority wait queue
    /// ([`Preble`], `sched/preble.rs`: ten levels by cache-hit ratio, one level per
    /// step, round-robin, quota growing with the level). Excludes the two
    /// fields above.
    pub multi_priority: bool,
}

impl LpmRule {
    /// SGLang 0.5's LPM: stop at the first request that does not fit; FCFS
    /// above 128 waiting.
    pub const SGLANG: LpmRule = LpmRule {
        stop_at_unfit: true,
        fcfs_above: Some(128),
        multi_priority: false,
    };

    /// Preble's local queue (its "fcfs-mpq" heuristic; `sched/preble.rs`).
    pub const PREBLE: LpmRule = LpmRule {
        stop_at_unfit: false,
        fcfs_above: None,
        multi_priority: true,
    };
}

#[derive(Debug, Default)]
pub(super) struct Lpm {
    index: PrefixIndex,
    rule: LpmRule,
    /// Waiting requests by arrival (seq -> slot), kept only with
    /// `rule.fcfs_above` set.
    by_arrival: BTreeMap<u64, u32>,
    /// Where the current pass is.
    walk: Walk,
    /// With `rule.multi_priority`: Preble's levels, walked instead.
    preble: Option<Preble>,
}

/// An LPM pass's position: in longest-match order (`pos`) or, above
/// `fcfs_above`, in arrival order (`seq_pos`).
#[derive(Debug, Default)]
struct Walk {
    fcfs: bool,
    pos: Option<LpmKey>,
    seq_pos: Option<u64>,
}

impl Lpm {
    pub fn new(rule: LpmRule) -> Self {
        Lpm {
            rule,
            preble: rule.multi_priority.then(Preble::default),
            ..Lpm::default()
        }
    }
}

impl Registered for Lpm {
    const SPEC: PolicySpec = PolicySpec {
        name: "lpm",
        class_name: "LPM",
        options: &[],
        needs_tree: true,
        refills: false,
        stop_at_unfit: false,
        state_field: None,
        service_weights: None,
    };
    fn build(_options: &[f64], rule: LpmRule) -> Self {
        Lpm::new(rule)
    }
}

impl AdmissionOrder for Lpm {
    fn enqueue<T>(&mut self, book: &Book<T>, tree: Option<&RadixTree>, r: u32) {
        let tree = tree.expect("LPM is given a tree (checked by the facade)");
        self.index.insert(book, tree, r);
        let seq = book.req(r).seq;
        if let Some(p) = &mut self.preble {
            p.enqueue(seq, r);
        }
        if self.rule.fcfs_above.is_some() {
            self.by_arrival.insert(seq, r);
        }
    }

    fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        self.index.remove(book, r);
        let seq = book.req(r).seq;
        if let Some(p) = &mut self.preble {
            p.dequeue(seq, r);
        }
        if self.rule.fcfs_above.is_some() {
            self.by_arrival.remove(&seq);
        }
    }

    fn begin_pass<T>(&mut self, book: &Book<T>, max_requests: usize) -> usize {
        if let Some(p) = &mut self.preble {
            return p.begin_pass(&self.index, book, max_requests);
        }
        let fcfs = self
            .rule
            .fcfs_above
            .is_some_and(|n| self.by_arrival.len() > n);
        self.walk = Walk {
            fcfs,
            ..Walk::default()
        };
        max_requests
    }

    fn next_candidate<T>(&mut self, _book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        if !self.index.min_extend().is_some_and(|e| e <= room.left) {
            return None; // nothing left fits
        }
        let walk = &mut self.walk;
        let r = if let Some(p) = &mut self.preble {
            p.next_candidate()?
        } else if walk.fcfs {
            let (&s, &r) = match walk.seq_pos {
                None => self.by_arrival.iter().next(),
                Some(s) => self.by_arrival.range((Excluded(s), Unbounded)).next(),
            }?;
            walk.seq_pos = Some(s);
            r
        } else {
            let (k, r) = self.index.next_after(walk.pos)?;
            walk.pos = Some(k);
            r
        };
        Some((r, self.index.match_len(r)))
    }

    /// Skipped (the paper's `CanAdd`, Preble's walk), or the pass stops
    /// (`stop_at_unfit`, SGLang's `PrefillAdder`).
    fn unfit<T>(&mut self, _book: &Book<T>, _r: u32) -> Unfit {
        if self.rule.stop_at_unfit {
            Unfit::Stop
        } else {
            Unfit::Skip
        }
    }

    fn end_pass<T>(&mut self, _book: &Book<T>, admitted: usize) {
        if let Some(p) = &mut self.preble {
            p.end_pass(admitted);
        }
    }

    prefix_accessors!(index);

    fn check_invariants<T>(&self, book: &Book<T>, tree: Option<&RadixTree>) {
        self.index.check_invariants(book, tree);
        if let Some(p) = &self.preble {
            p.check_invariants(book);
        }
        if self.rule.fcfs_above.is_some() {
            assert_eq!(self.by_arrival.len(), book.waiting, "arrival index size");
            for (&seq, &r) in &self.by_arrival {
                assert_eq!(book.req(r).seq, seq, "arrival index key");
            }
        }
    }
}
