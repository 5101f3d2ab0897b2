//! Prefix matching and parking: the longest-match order of LPM and DLPM,
//! kept up to date incrementally as the engine's tree changes.
//!
//! Every waiting request remembers where its match against the tree ended
//! ([`Match`]: the deepest fully matched node and its generation, the matched
//! length, the key of the child the match would continue into) and is
//! *parked* on that node (an intrusive doubly linked list per (node, child
//! key)). The tree logs every node whose children changed and every node it
//! removed; before each operation the scheduler consumes the log from its
//! cursor ([`PrefixIndex::sync`]) and re-matches only the requests parked on
//! logged nodes, starting from their node if it is still alive (else from the
//! namespace root).
//!
//! The order is a `BTreeMap` keyed by [`LpmKey`] `(Reverse(match_len), seq)`,
//! re-keyed on change, plus a `BTreeSet` of `(extend_len, seq)` whose minimum
//! ends a walk early once nothing left can fit. A step therefore costs
//! O((admitted + skipped + re-matched) log n), independent of the number
//! waiting when the cache changed little. DLPM also needs each client's
//! requests in the same order (`by_client`, enabled with
//! [`PrefixIndex::with_client_orders`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

use super::book::Book;

/// The `prefix` / `prefix_mut` accessors of [`super::policy::AdmissionOrder`]
/// for a policy that orders by prefix match and keeps its index in
/// `self.$field` (LPM, DLPM).
macro_rules! prefix_accessors {
    ($field:ident) => {
        fn prefix(&self) -> Option<&PrefixIndex> {
            Some(&self.$field)
        }
        fn prefix_mut(&mut self) -> Option<&mut PrefixIndex> {
            Some(&mut self.$field)
        }
    };
}
use super::NIL;
use crate::hash::FastMap;
use crate::radix::{Change, RadixTree, ALL_CHILDREN};
pub(super) use prefix_accessors;

/// LPM order: longest match first, then arrival.
pub(super) type LpmKey = (Reverse<u32>, u64);

/// Where a waiting request's match against the tree ended, and its links in
/// the list of requests parked there.
#[derive(Debug, Clone, Copy)]
struct Match {
    /// Deepest fully matched node.
    node: u32,
    /// `node`'s generation when matched (a reused node id has another).
    generation: u32,
    /// Matched tokens.
    len: u32,
    /// Key of the child of `node` the match would continue into.
    child_key: u64,
    /// Previous / next request parked on (`node`, `child_key`), or `NIL`.
    prev: u32,
    next: u32,
}

impl Default for Match {
    fn default() -> Self {
        Match {
            node: NIL,
            generation: 0,
            len: 0,
            child_key: 0,
            prev: NIL,
            next: NIL,
        }
    }
}

/// The waiting requests of a prefix-ordered policy, by match (see the
/// module docs).
#[derive(Debug, Default)]
pub(super) struct PrefixIndex {
    /// Per slot: the match of the waiting request in it.
    matches: Vec<Match>,
    /// node -> child key -> head of the list of requests parked there.
    parked: FastMap<u32, FastMap<u64, u32>>,
    /// Every waiting request, longest match first.
    by_match: BTreeMap<LpmKey, u32>,
    /// `(extend_len, seq)` of every waiting request (minimum: smallest need).
    by_extend: BTreeSet<(u32, u64)>,
    /// DLPM: each client's waiting requests in [`LpmKey`] order.
    by_client: Option<Vec<BTreeMap<LpmKey, u32>>>,
    /// Position in the tree's change log consumed so far (`None`: not yet
    /// bound to a tree).
    cursor: Option<u64>,
    /// Re-matches done while consuming the change log (diagnostics).
    rematches: u64,
    /// Scratch buffers for change-log processing.
    changes: Vec<Change>,
    batch: Vec<u32>,
}

impl PrefixIndex {
    /// An index that also keeps each client's requests in order (DLPM).
    pub fn with_client_orders() -> Self {
        PrefixIndex {
            by_client: Some(Vec::new()),
            ..PrefixIndex::default()
        }
    }

    pub fn add_client(&mut self) {
        if let Some(v) = &mut self.by_client {
            v.push(BTreeMap::new());
        }
    }

    pub fn rematches(&self) -> u64 {
        self.rematches
    }

    /// Matched tokens of waiting request `r`.
    pub fn match_len(&self, r: u32) -> usize {
        self.matches[r as usize].len as usize
    }

    /// The smallest extend length among waiting requests.
    pub fn min_extend(&self) -> Option<usize> {
        self.by_extend.iter().next().map(|&(e, _)| e as usize)
    }

    /// The first request after `pos` in LPM order (`None`: from the start).
    pub fn next_after(&self, pos: Option<LpmKey>) -> Option<(LpmKey, u32)> {
        let next = match pos {
            None => self.by_match.iter().next(),
            Some(k) => self.by_match.range((Excluded(k), Unbounded)).next(),
        };
        next.map(|(&k, &r)| (k, r))
    }

    fn client_order(&self, c: u32) -> &BTreeMap<LpmKey, u32> {
        &self.by_client.as_ref().expect("per-client orders")[c as usize]
    }
    fn client_order_mut(&mut self, c: u32) -> &mut BTreeMap<LpmKey, u32> {
        &mut self.by_client.as_mut().expect("per-client orders")[c as usize]
    }

    /// The first key of client `c`'s order after `pos`.
    pub fn client_next(&self, c: u32, pos: Option<LpmKey>) -> Option<LpmKey> {
        let m = self.client_order(c);
        match pos {
            None => m.keys().next().copied(),
            Some(k) => m.range((Excluded(k), Unbounded)).next().map(|x| *x.0),
        }
    }
    /// The request at key `k` of client `c`'s order.
    pub fn client_request(&self, c: u32, k: LpmKey) -> u32 {
        self.client_order(c)[&k]
    }
    /// Take key `k` out of client `c`'s order only (the global order keeps
    /// it); whether it was there.
    pub fn hide_from_client(&mut self, c: u32, k: LpmKey) -> bool {
        self.client_order_mut(c).remove(&k).is_some()
    }
    /// Undo [`PrefixIndex::hide_from_client`].
    pub fn unhide_from_client(&mut self, c: u32, k: LpmKey, r: u32) {
        self.client_order_mut(c).insert(k, r);
    }

    // ----- joining and leaving ------------------------------------------------

    /// Match waiting request `r` against `tree`, park it and order it.
    pub fn insert<T>(&mut self, book: &Book<T>, tree: &RadixTree, r: u32) {
        let q = book.req(r);
        let m = tree.match_from(q.root, &q.tokens);
        if self.matches.len() <= r as usize {
            self.matches.resize(r as usize + 1, Match::default());
        }
        self.matches[r as usize] = Match {
            node: m.node,
            generation: m.gen,
            len: m.len as u32,
            child_key: tree.next_key(m.node, &q.tokens),
            prev: NIL,
            next: NIL,
        };
        self.link(book, r);
        self.park(r);
    }

    /// Unorder and unpark waiting request `r`.
    pub fn remove<T>(&mut self, book: &Book<T>, r: u32) {
        self.unlink(book, r);
        self.unpark(r);
    }

    fn keys<T>(&self, book: &Book<T>, r: u32) -> (LpmKey, (u32, u64)) {
        let q = book.req(r);
        let len = self.matches[r as usize].len;
        ((Reverse(len), q.seq), (q.input_len as u32 - len, q.seq))
    }

    fn link<T>(&mut self, book: &Book<T>, r: u32) {
        let (order_key, extend_key) = self.keys(book, r);
        self.by_match.insert(order_key, r);
        self.by_extend.insert(extend_key);
        if self.by_client.is_some() {
            let c = book.req(r).client;
            self.client_order_mut(c).insert(order_key, r);
        }
    }

    fn unlink<T>(&mut self, book: &Book<T>, r: u32) {
        let (order_key, extend_key) = self.keys(book, r);
        self.by_match.remove(&order_key);
        self.by_extend.remove(&extend_key);
        if self.by_client.is_some() {
            let c = book.req(r).client;
            self.client_order_mut(c).remove(&order_key);
        }
    }

    fn park(&mut self, r: u32) {
        let Match {
            node, child_key, ..
        } = self.matches[r as usize];
        let head = self
            .parked
            .entry(node)
            .or_default()
            .insert(child_key, r)
            .unwrap_or(NIL);
        let m = &mut self.matches[r as usize];
        m.prev = NIL;
        m.next = head;
        if head != NIL {
            self.matches[head as usize].prev = r;
        }
    }

    fn unpark(&mut self, r: u32) {
        let Match {
            node,
            child_key,
            prev,
            next,
            ..
        } = self.matches[r as usize];
        if prev != NIL {
            self.matches[prev as usize].next = next;
        } else {
            let inner = self.parked.get_mut(&node).expect("parked node");
            if next == NIL {
                inner.remove(&child_key);
                if inner.is_empty() {
                    self.parked.remove(&node);
                }
            } else {
                inner.insert(child_key, next);
            }
        }
        if next != NIL {
            self.matches[next as usize].prev = prev;
        }
    }

    // ----- following the tree -----------------------------------------------

    /// Re-match one waiting request, fixing its parking and keys.
    fn rematch<T>(&mut self, book: &Book<T>, tree: &RadixTree, r: u32) {
        self.rematches += 1;
        let q = book.req(r);
        let old = self.matches[r as usize];
        let start = if tree.is_alive(old.node, old.generation) {
            old.node
        } else {
            q.root
        };
        let m = tree.match_from(start, &q.tokens);
        let child_key = tree.next_key(m.node, &q.tokens);
        if m.node != old.node || m.gen != old.generation || child_key != old.child_key {
            self.unpark(r);
            let at = &mut self.matches[r as usize];
            at.node = m.node;
            at.generation = m.gen;
            at.child_key = child_key;
            self.park(r);
        }
        if m.len as u32 != old.len {
            self.unlink(book, r);
            self.matches[r as usize].len = m.len as u32;
            self.link(book, r);
        }
    }

    /// Consume the tree's change log and re-match the requests parked on
    /// changed nodes (all of them if the log was truncated past the cursor).
    pub fn sync<T>(&mut self, book: &Book<T>, tree: &RadixTree) {
        let Some(cursor) = self.cursor else {
            // first use: everything matched from here on is current
            self.cursor = Some(tree.log_end());
            return;
        };
        let mut nodes = std::mem::take(&mut self.changes);
        nodes.clear();
        match tree.changes_since(cursor) {
            Some(changes) => {
                nodes.extend_from_slice(changes);
                nodes.sort_unstable_by_key(|c| (c.node, c.key));
                nodes.dedup();
                let mut batch = std::mem::take(&mut self.batch);
                for change in &nodes {
                    batch.clear();
                    if let Some(inner) = self.parked.get(&change.node) {
                        let mut push = |mut r: u32| {
                            while r != NIL {
                                batch.push(r);
                                r = self.matches[r as usize].next;
                            }
                        };
                        if change.key == ALL_CHILDREN {
                            for &head in inner.values() {
                                push(head);
                            }
                        } else if let Some(&head) = inner.get(&change.key) {
                            push(head);
                        }
                    }
                    for &r in &batch {
                        self.rematch(book, tree, r);
                    }
                }
                self.batch = batch;
            }
            None => {
                let all: Vec<u32> = self.by_match.values().copied().collect();
                for r in all {
                    self.rematch(book, tree, r);
                }
            }
        }
        self.changes = nodes;
        self.cursor = Some(tree.log_end());
    }

    /// Every waiting request is ordered once; with the log consumed, every
    /// recorded match equals a fresh one.
    pub fn check_invariants<T>(&self, book: &Book<T>, tree: Option<&RadixTree>) {
        assert_eq!(self.by_match.len(), book.waiting);
        assert_eq!(self.by_extend.len(), book.waiting);
        if let Some(t) = tree {
            if t.changes_since(self.cursor.unwrap_or(0)) == Some(&[]) {
                for (r, q) in book.waiting_requests() {
                    assert_eq!(self.match_len(r), t.match_from(q.root, &q.tokens).len);
                }
            }
        }
    }
}
