//! Token radix tree modelling an engine's prefix (KV) cache.
//!
//! * Nodes live in a slab (`Vec<Node>`) with a free list; an evicted node's
//!   edge label is dropped and its slot reused, so memory follows the tokens
//!   stored (plus the peak node count of the slab).
//! * Each node holds an edge label (`key`, a multiple of `page_size` tokens),
//!   its parent, and a child map keyed by a 64-bit key of the child's first
//!   page (the token itself when `page_size == 1`); children whose keys
//!   collide are chained through `sib`, and a lookup always compares the whole
//!   first page, so collisions cost time, never correctness.
//! * Namespaces (LoRA adapter, cache salt) get separate roots: equal tokens
//!   under different namespaces never share a node. A root is created the
//!   first time a namespace is used and kept (one empty node per namespace).
//! * A logical clock stamps every node touched by `insert` and `lock`; `match`
//!   is a pure query and touches nothing. Touched ranges always end on a node
//!   boundary (we split), so every token of a node shares its node's stamp.
//! * Unlocked leaves sit in an ordered set by `(last_access, slot)`; `evict`
//!   pops from it (LRU first) and frees whole leaves, so it may free more than
//!   asked; a parent that becomes an unlocked leaf joins the set.
//! * Locks are reference counts along the path root..end; lock counts are
//!   prefix-closed (a parent's count >= its child's). Each `lock(tokens)`
//!   records the end node so `unlock(tokens)` releases exactly that path even
//!   if the prefix grew or the path was split in between.
//! * Capacity (tokens) is enforced on insert: LRU unlocked leaves are evicted
//!   (never the path being inserted into) and, if still short of room, only
//!   the whole pages that fit are inserted (a cache silently keeps less).
//! * Change log: every node whose child set or child edges changed, and every
//!   removed node, is appended to a bounded log. Schedulers keep a cursor into
//!   it and re-match only the waiting requests parked on logged nodes (see
//!   `crate::sched`). If a consumer falls behind the retained window it sees
//!   `None` from [`RadixTree::changes_since`] and re-matches everything.

use std::collections::BTreeSet;
use std::hash::Hasher;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::hash::{FastHasher, FastMap};

const NIL: u32 = u32::MAX;
const LOG_MAX: usize = 1 << 16;

/// Namespace key: equal tokens under different namespaces never match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Namespace {
    #[default]
    Default,
    Str(String),
    Int(i64),
}

#[derive(Debug, Clone)]
struct Node {
    key: Vec<u32>,
    parent: u32,
    children: FastMap<u64, u32>,
    sib: u32,
    lock: u32,
    last_access: u64,
    depth: u32,
    gen: u32,
    live: bool,
    /// Stamp under which the node sits in `lru` (leaf, unlocked, not a root).
    in_lru: Option<u64>,
}

impl Node {
    fn empty() -> Self {
        Node {
            key: Vec::new(),
            parent: NIL,
            children: FastMap::default(),
            sib: NIL,
            lock: 0,
            last_access: 0,
            depth: 0,
            gen: 0,
            live: false,
            in_lru: None,
        }
    }
}

/// Where a match ended: the deepest node fully matched, its generation, and
/// the matched length (which may run part-way into one child, in whole pages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchPos {
    pub node: u32,
    pub gen: u32,
    pub len: usize,
}

/// One change-log entry: the child of `node` whose first page has key
/// `key` was added, split or removed, or (`key == ALL_CHILDREN`) `node`
/// itself was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub node: u32,
    pub key: u64,
}

/// [`Change::key`] meaning "the node itself was removed".
pub const ALL_CHILDREN: u64 = u64::MAX;
/// Park key of a request whose tokens end at its node (no next page).
pub const END_KEY: u64 = u64::MAX - 1;

static NEXT_TREE_ID: AtomicU64 = AtomicU64::new(1);

/// A token radix tree with LRU eviction, locks, pages and namespaces.
#[derive(Debug)]
pub struct RadixTree {
    id: u64,
    nodes: Vec<Node>,
    free: Vec<u32>,
    roots: FastMap<Namespace, u32>,
    lru: BTreeSet<(u64, u32)>,
    locks: FastMap<(u32, Vec<u32>), Vec<u32>>,
    clock: u64,
    size: usize,
    locked_size: usize,
    capacity: Option<usize>,
    page: usize,
    log: Vec<Change>,
    log_base: u64,
}

/// Length of the common prefix of two token sequences (compared 16 tokens
/// at a time): the one used by every prefix tree (`radix`, `dispatch::tree`).
#[inline]
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 16 <= n {
        if a[i..i + 16] != b[i..i + 16] {
            break;
        }
        i += 16;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

impl RadixTree {
    /// `capacity` in tokens (`None` = unbounded), `page_size >= 1`.
    pub fn new(capacity: Option<usize>, page_size: usize) -> Result<Self> {
        if page_size == 0 {
            return Err(Error::value("page_size must be an int >= 1, got 0"));
        }
        Ok(RadixTree {
            id: NEXT_TREE_ID.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            free: Vec::new(),
            roots: FastMap::default(),
            lru: BTreeSet::new(),
            locks: FastMap::default(),
            clock: 0,
            size: 0,
            locked_size: 0,
            capacity,
            page: page_size,
            log: Vec::new(),
            log_base: 0,
        })
    }

    /// Process-unique identity (schedulers check they read the same tree).
    pub fn id(&self) -> u64 {
        self.id
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn evictable_size(&self) -> usize {
        self.size - self.locked_size
    }
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }
    pub fn page_size(&self) -> usize {
        self.page
    }
    /// Live nodes (roots included).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Child-map key of a first page: the token itself when `page_size`
    /// is 1, else a hash of the page (never [`ALL_CHILDREN`]).
    #[inline]
    pub fn page_key(&self, page: &[u32]) -> u64 {
        if self.page == 1 {
            page[0] as u64
        } else {
            let mut h = FastHasher::default();
            for &t in page {
                h.write_u32(t);
            }
            h.finish() >> 1
        }
    }

    fn alloc(&mut self, n: Node) -> u32 {
        match self.free.pop() {
            Some(i) => {
                let gen = self.nodes[i as usize].gen;
                self.nodes[i as usize] = Node { gen, ..n };
                i
            }
            None => {
                assert!(self.nodes.len() < NIL as usize, "RadixTree is full");
                self.nodes.push(n);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn push_log(&mut self, node: u32, key: u64) {
        if self.log.len() >= LOG_MAX {
            let half = self.log.len() / 2;
            self.log.drain(..half);
            self.log_base += half as u64;
        }
        self.log.push(Change { node, key });
    }

    /// Absolute position just past the last change-log entry.
    pub fn log_end(&self) -> u64 {
        self.log_base + self.log.len() as u64
    }

    /// Nodes changed since `cursor` (an earlier [`log_end`](Self::log_end)),
    /// or `None` if that part of the log was discarded (re-match everything).
    pub fn changes_since(&self, cursor: u64) -> Option<&[Change]> {
        if cursor < self.log_base {
            return None;
        }
        let start = (cursor - self.log_base) as usize;
        self.log.get(start..).or(Some(&[]))
    }

    /// The root of `ns`, if the namespace was ever used.
    pub fn root(&self, ns: &Namespace) -> Option<u32> {
        self.roots.get(ns).copied()
    }

    /// The root of `ns`, created on first use.
    pub fn root_or_create(&mut self, ns: &Namespace) -> u32 {
        if let Some(r) = self.roots.get(ns) {
            return *r;
        }
        let mut n = Node::empty();
        n.live = true;
        let r = self.alloc(n);
        self.roots.insert(ns.clone(), r);
        r
    }

    /// Is `(node, gen)` still the same live node?
    pub fn is_alive(&self, node: u32, gen: u32) -> bool {
        self.nodes
            .get(node as usize)
            .is_some_and(|n| n.live && n.gen == gen)
    }

    /// Tokens from the root to the end of `node`.
    pub fn depth(&self, node: u32) -> usize {
        self.nodes[node as usize].depth as usize
    }

    fn find_child(&self, node: u32, page: &[u32]) -> Option<u32> {
        let k = self.page_key(page);
        let mut c = *self.nodes[node as usize].children.get(&k)?;
        while c != NIL {
            let cn = &self.nodes[c as usize];
            if cn.key[..self.page] == *page {
                return Some(c);
            }
            c = cn.sib;
        }
        None
    }

    /// Descend from `start` (whose depth `tokens` already matched) as far as
    /// `tokens` go. Returns the deepest node fully matched and the matched
    /// length in whole pages (possibly part-way into one child).
    pub fn match_from(&self, start: u32, tokens: &[u32]) -> MatchPos {
        let p = self.page;
        let mut node = start;
        let mut pos = self.nodes[start as usize].depth as usize;
        loop {
            if tokens.len() < pos + p {
                break;
            }
            let Some(c) = self.find_child(node, &tokens[pos..pos + p]) else {
                break;
            };
            let key = &self.nodes[c as usize].key;
            let common = common_prefix(key, &tokens[pos..]);
            if common == key.len() {
                node = c;
                pos += common;
            } else {
                let common = common / p * p;
                return MatchPos {
                    node,
                    gen: self.nodes[node as usize].gen,
                    len: pos + common,
                };
            }
        }
        MatchPos {
            node,
            gen: self.nodes[node as usize].gen,
            len: pos,
        }
    }

    /// Key of the child a request would descend into after fully matching
    /// `node`: the page key of `tokens[depth..depth+page]`, or [`END_KEY`]
    /// if the tokens end there. Schedulers park requests on `(node, key)`.
    pub fn next_key(&self, node: u32, tokens: &[u32]) -> u64 {
        let d = self.nodes[node as usize].depth as usize;
        if tokens.len() >= d + self.page {
            self.page_key(&tokens[d..d + self.page])
        } else {
            END_KEY
        }
    }

    /// Longest cached prefix of `tokens` under `ns`, in whole pages.
    pub fn match_len(&self, ns: &Namespace, tokens: &[u32]) -> usize {
        match self.root(ns) {
            Some(r) => self.match_from(r, tokens).len,
            None => 0,
        }
    }

    fn refresh_lru(&mut self, idx: u32) {
        let n = &self.nodes[idx as usize];
        let want = if n.live && n.parent != NIL && n.lock == 0 && n.children.is_empty() {
            Some(n.last_access)
        } else {
            None
        };
        if want == n.in_lru {
            return;
        }
        if let Some(ts) = n.in_lru {
            self.lru.remove(&(ts, idx));
        }
        if let Some(ts) = want {
            self.lru.insert((ts, idx));
        }
        self.nodes[idx as usize].in_lru = want;
    }

    fn touch(&mut self, idx: u32) {
        if self.nodes[idx as usize].last_access != self.clock {
            self.nodes[idx as usize].last_access = self.clock;
            self.refresh_lru(idx);
        }
    }

    /// Replace `old` by `new` in `parent`'s child map (same first page).
    fn replace_child(&mut self, parent: u32, old: u32, new: u32) {
        let k = self.page_key(&self.nodes[new as usize].key[..self.page]);
        let sib = self.nodes[old as usize].sib;
        self.nodes[new as usize].sib = sib;
        self.nodes[old as usize].sib = NIL;
        self.relink(parent, k, old, new);
    }

    /// Point the link that leads to `child` in `parent`'s chain of children
    /// whose first page is `k` (the child map's entry, or the previous
    /// sibling's `sib`) at `to` instead; `to == NIL` at the head drops the
    /// entry.
    fn relink(&mut self, parent: u32, k: u64, child: u32, to: u32) {
        let children = &mut self.nodes[parent as usize].children;
        let head = children[&k];
        if head == child {
            if to == NIL {
                children.remove(&k);
            } else {
                children.insert(k, to);
            }
        } else {
            let mut c = head;
            while self.nodes[c as usize].sib != child {
                c = self.nodes[c as usize].sib;
            }
            self.nodes[c as usize].sib = to;
        }
    }

    fn add_child(&mut self, parent: u32, child: u32) {
        let k = self.page_key(&self.nodes[child as usize].key[..self.page]);
        let prev = self.nodes[parent as usize].children.insert(k, child);
        self.nodes[child as usize].sib = prev.unwrap_or(NIL);
        self.refresh_lru(parent);
        self.push_log(parent, k);
    }

    fn remove_child(&mut self, parent: u32, child: u32) {
        let k = self.page_key(&self.nodes[child as usize].key[..self.page]);
        let sib = self.nodes[child as usize].sib;
        self.relink(parent, k, child, sib);
        self.nodes[child as usize].sib = NIL;
        self.push_log(parent, k);
    }

    /// Split `c` so that its first `at` tokens (0 < at < len, whole pages)
    /// become a new parent node. `c` keeps its identity (and depth).
    fn split(&mut self, c: u32, at: usize) -> u32 {
        let parent = self.nodes[c as usize].parent;
        let cn = &self.nodes[c as usize];
        let upper_key = cn.key[..at].to_vec();
        let m = Node {
            key: upper_key,
            parent,
            children: FastMap::default(),
            sib: NIL,
            lock: cn.lock,
            last_access: cn.last_access,
            depth: cn.depth - (cn.key.len() - at) as u32,
            gen: 0,
            live: true,
            in_lru: None,
        };
        let m = self.alloc(m);
        self.replace_child(parent, c, m);
        let rest = self.nodes[c as usize].key[at..].to_vec();
        self.nodes[c as usize].key = rest;
        self.nodes[c as usize].parent = m;
        let k = self.page_key(&self.nodes[c as usize].key[..self.page]);
        self.nodes[m as usize].children.insert(k, c);
        let pk = self.page_key(&self.nodes[m as usize].key[..self.page]);
        self.push_log(parent, pk);
        m
    }

    /// Walk `tokens` from the root of `ns`, splitting so the matched part ends
    /// on a node boundary, touching every node on the way. Returns the end
    /// node and matched length.
    fn walk_split_touch(&mut self, root: u32, tokens: &[u32]) -> (u32, usize) {
        let p = self.page;
        let mut node = root;
        let mut pos = 0usize;
        self.touch(node);
        loop {
            if tokens.len() < pos + p {
                break;
            }
            let Some(c) = self.find_child(node, &tokens[pos..pos + p]) else {
                break;
            };
            let klen = self.nodes[c as usize].key.len();
            let common = common_prefix(&self.nodes[c as usize].key, &tokens[pos..]) / p * p;
            let next = if common < klen {
                self.split(c, common)
            } else {
                c
            };
            node = next;
            pos += common;
            self.touch(node);
            if common < klen {
                break;
            }
        }
        (node, pos)
    }

    fn add_lock(&mut self, mut node: u32, delta_up: bool) {
        while self.nodes[node as usize].parent != NIL {
            let n = &mut self.nodes[node as usize];
            let len = n.key.len();
            if delta_up {
                n.lock += 1;
                if n.lock == 1 {
                    self.locked_size += len;
                }
            } else {
                n.lock -= 1;
                if n.lock == 0 {
                    self.locked_size -= len;
                }
            }
            self.refresh_lru(node);
            node = self.nodes[node as usize].parent;
        }
    }

    /// Insert `tokens` (truncated to whole pages) under `ns`. Returns the
    /// length that was already present. With a capacity, LRU unlocked leaves
    /// are evicted to make room; if that is not enough, only the whole pages
    /// that fit are inserted.
    pub fn insert(&mut self, ns: &Namespace, tokens: &[u32]) -> usize {
        let tokens = &tokens[..tokens.len() / self.page * self.page];
        let root = self.root_or_create(ns);
        self.clock += 1;
        let (node, pos) = self.walk_split_touch(root, tokens);
        let mut need = tokens.len() - pos;
        if need == 0 {
            return pos;
        }
        if let Some(cap) = self.capacity {
            if self.size + need > cap {
                // Protect the path we are extending while evicting.
                self.add_lock(node, true);
                self.evict(self.size + need - cap);
                self.add_lock(node, false);
                let room = cap.saturating_sub(self.size);
                need = need.min(room) / self.page * self.page;
                if need == 0 {
                    return pos;
                }
            }
        }
        let depth = self.nodes[node as usize].depth + need as u32;
        let leaf = Node {
            key: tokens[pos..pos + need].to_vec(),
            parent: node,
            children: FastMap::default(),
            sib: NIL,
            lock: 0,
            last_access: self.clock,
            depth,
            gen: 0,
            live: true,
            in_lru: None,
        };
        let leaf = self.alloc(leaf);
        self.add_child(node, leaf);
        self.size += need;
        self.refresh_lru(leaf);
        pos
    }

    /// Lock the cached prefix of `tokens` (whole pages) against eviction.
    /// Returns the locked length. Each lock is released by one `unlock`
    /// with the same tokens and namespace.
    pub fn lock(&mut self, ns: &Namespace, tokens: &[u32]) -> usize {
        let root = self.root_or_create(ns);
        self.clock += 1;
        let (node, pos) = self.walk_split_touch(root, tokens);
        self.add_lock(node, true);
        self.locks
            .entry((root, tokens.to_vec()))
            .or_default()
            .push(node);
        pos
    }

    /// Release the most recent `lock` taken with these tokens and namespace.
    pub fn unlock(&mut self, ns: &Namespace, tokens: &[u32]) -> Result<()> {
        let err = || {
            Error::key(format!(
                "unlock: no lock is held for these tokens (len {}) in namespace {ns:?}",
                tokens.len()
            ))
        };
        let root = self.root(ns).ok_or_else(err)?;
        let key = (root, tokens.to_vec());
        let stack = self.locks.get_mut(&key).ok_or_else(err)?;
        let node = stack.pop().expect("non-empty lock stack");
        if stack.is_empty() {
            self.locks.remove(&key);
        }
        self.add_lock(node, false);
        Ok(())
    }

    /// Number of locks currently held.
    pub fn num_locks(&self) -> usize {
        self.locks.values().map(Vec::len).sum()
    }

    /// Free least-recently-used unlocked leaves until at least `n_tokens`
    /// are freed or nothing is evictable. Returns the tokens freed.
    pub fn evict(&mut self, n_tokens: usize) -> usize {
        let mut freed = 0;
        while freed < n_tokens {
            let Some(&(ts, idx)) = self.lru.iter().next() else {
                break;
            };
            self.lru.remove(&(ts, idx));
            self.nodes[idx as usize].in_lru = None;
            let parent = self.nodes[idx as usize].parent;
            self.remove_child(parent, idx);
            let n = &mut self.nodes[idx as usize];
            let len = n.key.len();
            n.key = Vec::new();
            n.children = FastMap::default();
            n.live = false;
            n.gen = n.gen.wrapping_add(1);
            n.parent = NIL;
            self.free.push(idx);
            self.size -= len;
            freed += len;
            self.push_log(idx, ALL_CHILDREN);
            self.refresh_lru(parent);
        }
        freed
    }

    /// Remove what the tree holds on the path of `tokens` past its first
    /// `keep` tokens (rounded down to whole pages): the node at that depth
    /// on the path (split off if `keep` falls inside one) and everything
    /// below it. What an engine's cache does when it evicts a block: the
    /// blocks after it in any sequence can no longer be matched. Returns the
    /// tokens removed (0 when the tree does not hold `tokens` up to at
    /// least one page past `keep`).
    ///
    /// Errors (nothing changes): the part to remove is locked -> `Value`.
    pub fn truncate(&mut self, ns: &Namespace, tokens: &[u32], keep: usize) -> Result<usize> {
        let p = self.page;
        let keep = keep / p * p;
        if tokens.len() < keep + p {
            return Ok(0);
        }
        let Some(mut node) = self.root(ns) else {
            return Ok(0);
        };
        let mut pos = 0usize;
        // Walk to the child `c` that holds position `keep` on the path.
        let (c, cut) = loop {
            let Some(c) = self.find_child(node, &tokens[pos..pos + p]) else {
                return Ok(0);
            };
            let klen = self.nodes[c as usize].key.len();
            let common = common_prefix(&self.nodes[c as usize].key, &tokens[pos..]) / p * p;
            if pos + klen <= keep {
                if common < klen {
                    return Ok(0); // the path leaves the tree before `keep`
                }
                node = c;
                pos += klen;
                if pos == keep {
                    match self.find_child(node, &tokens[pos..pos + p]) {
                        Some(c) => break (c, 0),
                        None => return Ok(0),
                    }
                }
                continue;
            }
            // `c` spans `keep`: it must hold the path up to one page past it.
            if common < keep - pos + p {
                return Ok(0);
            }
            break (c, keep - pos);
        };
        if self.nodes[c as usize].lock > 0 {
            return Err(Error::value(format!(
                "truncate: the tokens past {keep} are locked (unlock them first)"
            )));
        }
        let top = if cut > 0 {
            self.split(c, cut);
            c // `split` keeps `c` as the lower part
        } else {
            c
        };
        let parent = self.nodes[top as usize].parent;
        self.remove_child(parent, top);
        let mut removed = 0;
        let mut stack = vec![top];
        while let Some(idx) = stack.pop() {
            let heads: Vec<u32> = self.nodes[idx as usize]
                .children
                .values()
                .copied()
                .collect();
            for mut k in heads {
                while k != NIL {
                    stack.push(k);
                    k = self.nodes[k as usize].sib;
                }
            }
            let n = &mut self.nodes[idx as usize];
            if let Some(ts) = n.in_lru.take() {
                self.lru.remove(&(ts, idx));
            }
            let n = &mut self.nodes[idx as usize];
            removed += n.key.len();
            n.key = Vec::new();
            n.children = FastMap::default();
            n.live = false;
            n.gen = n.gen.wrapping_add(1);
            n.parent = NIL;
            n.sib = NIL;
            self.free.push(idx);
            self.push_log(idx, ALL_CHILDREN);
        }
        self.size -= removed;
        self.refresh_lru(parent);
        Ok(removed)
    }

    /// Check every internal invariant (tests).
    pub fn check_invariants(&self) {
        let mut size = 0;
        let mut locked = 0;
        let mut live = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.live {
                continue;
            }
            live += 1;
            if n.parent == NIL {
                assert!(self.roots.values().any(|&r| r as usize == i));
                assert_eq!(n.depth, 0);
                continue;
            }
            assert!(!n.key.is_empty() && n.key.len() % self.page == 0);
            let p = &self.nodes[n.parent as usize];
            assert!(p.live);
            assert_eq!(n.depth as usize, p.depth as usize + n.key.len());
            assert!(p.parent == NIL || p.lock >= n.lock);
            assert_eq!(
                self.find_child(n.parent, &n.key[..self.page]),
                Some(i as u32)
            );
            size += n.key.len();
            if n.lock > 0 {
                locked += n.key.len();
            }
            let leaf_ok = n.lock == 0 && n.children.is_empty();
            assert_eq!(n.in_lru.is_some(), leaf_ok);
            if let Some(ts) = n.in_lru {
                assert!(self.lru.contains(&(ts, i as u32)));
            }
        }
        assert_eq!(live, self.num_nodes());
        assert_eq!(size, self.size);
        assert_eq!(locked, self.locked_size);
        if let Some(c) = self.capacity {
            assert!(self.size <= c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> Namespace {
        Namespace::Default
    }

    #[test]
    fn insert_match_split() {
        let mut t = RadixTree::new(None, 1).unwrap();
        assert_eq!(t.insert(&ns(), &[1, 2, 3, 4]), 0);
        assert_eq!(t.match_len(&ns(), &[1, 2, 3, 4, 5]), 4);
        assert_eq!(t.match_len(&ns(), &[1, 2, 9]), 2);
        assert_eq!(t.insert(&ns(), &[1, 2, 9]), 2);
        assert_eq!(t.size(), 5);
        assert_eq!(t.match_len(&Namespace::Str("a".into()), &[1, 2]), 0);
        t.check_invariants();
    }

    #[test]
    fn truncate_removes_the_path_past_keep() {
        let mut t = RadixTree::new(None, 2).unwrap();
        t.insert(&ns(), &[1, 2, 3, 4, 5, 6]);
        t.insert(&ns(), &[1, 2, 3, 4, 7, 8]);
        t.insert(&ns(), &[1, 2, 9, 9]);
        // not on the path / nothing past keep: no-op
        assert_eq!(t.truncate(&ns(), &[1, 2, 8, 8], 2).unwrap(), 0);
        assert_eq!(t.truncate(&ns(), &[1, 2, 3, 4], 4).unwrap(), 0);
        // inside a node: split, drop the lower part and what hangs below
        assert_eq!(t.truncate(&ns(), &[1, 2, 3, 4], 2).unwrap(), 6);
        assert_eq!(t.match_len(&ns(), &[1, 2, 3, 4, 5, 6]), 2);
        assert_eq!(t.match_len(&ns(), &[1, 2, 9, 9]), 4);
        assert_eq!(t.size(), 4);
        t.check_invariants();
        // keep rounds down to a page; a whole child at a node boundary
        assert_eq!(t.truncate(&ns(), &[1, 2, 9, 9], 3).unwrap(), 2);
        assert_eq!(t.size(), 2);
        t.check_invariants();
        // locked: refused, nothing changes
        t.insert(&ns(), &[1, 2, 5, 5]);
        t.lock(&ns(), &[1, 2, 5, 5]);
        assert!(t.truncate(&ns(), &[1, 2, 5, 5], 2).is_err());
        assert_eq!(t.size(), 4);
        t.check_invariants();
    }

    #[test]
    fn truncate_matches_a_set_of_prefixes() {
        // Reference: the set of cached token prefixes (whole pages); a
        // truncation removes every cached sequence extending tokens[..keep+p].
        random_steps(5, None, &[1, 2, 4], 2000, |t, page, seqs, next| {
            let len = page * (next() % 5) as usize;
            let toks: Vec<u32> = (0..len).map(|_| (next() % 2) as u32).collect();
            if next() % 3 > 0 {
                t.insert(&ns(), &toks);
                seqs.push(toks);
            } else {
                let keep = (next() % 5) as usize;
                let kp = keep / page * page;
                let held = |s: &Vec<u32>| {
                    s.len() >= kp + page && s[..kp + page] == toks[..(kp + page).min(toks.len())]
                };
                let before = t.size();
                let n = t.truncate(&ns(), &toks, keep).unwrap();
                if toks.len() >= kp + page {
                    for s in seqs.iter_mut() {
                        if held(s) {
                            s.truncate(kp);
                        }
                    }
                }
                assert_eq!(before - n, t.size());
            }
            for s in seqs.iter() {
                assert_eq!(t.match_len(&ns(), s), s.len());
            }
        });
    }

    /// For each page size in `pages`, a fresh tree of `capacity` and an
    /// empty list of sequences, then `steps` calls of `step(tree, page,
    /// sequences, next)`, each followed by the tree's invariant check; one
    /// generator seeded with `seed` for the whole run.
    fn random_steps(
        seed: u64,
        capacity: Option<usize>,
        pages: &[usize],
        steps: usize,
        mut step: impl FnMut(&mut RadixTree, usize, &mut Vec<Vec<u32>>, &mut dyn FnMut() -> u64),
    ) {
        let mut rng = seed;
        let mut next = || crate::testutil::lcg(&mut rng);
        for &page in pages {
            let mut t = RadixTree::new(capacity, page).unwrap();
            let mut seqs = Vec::new();
            for _ in 0..steps {
                step(&mut t, page, &mut seqs, &mut next);
                t.check_invariants();
            }
        }
    }

    #[test]
    fn pages() {
        let mut t = RadixTree::new(None, 2).unwrap();
        assert_eq!(t.insert(&ns(), &[1, 2, 3, 4, 5]), 0);
        assert_eq!(t.size(), 4);
        assert_eq!(t.match_len(&ns(), &[1, 2, 3, 9]), 2);
        assert_eq!(t.insert(&ns(), &[1, 2, 3, 9]), 2);
        assert_eq!(t.insert(&ns(), &[1, 7, 3, 9]), 0);
        assert_eq!(t.size(), 10);
        assert_eq!(t.match_len(&ns(), &[1, 7, 3]), 2);
        t.check_invariants();
    }

    #[test]
    fn evict_lru_and_locks() {
        let mut t = RadixTree::new(None, 1).unwrap();
        t.insert(&ns(), &[1, 2, 3]);
        t.insert(&ns(), &[1, 2, 4]);
        t.insert(&ns(), &[5]);
        assert_eq!(t.lock(&ns(), &[1, 2, 4, 7]), 3);
        assert_eq!(t.evictable_size(), 2);
        assert_eq!(t.evict(1), 1); // [3] is LRU
        assert_eq!(t.match_len(&ns(), &[1, 2, 3]), 2);
        assert_eq!(t.evict(10), 1); // [5]; [1,2],[4] locked
        t.unlock(&ns(), &[1, 2, 4, 7]).unwrap();
        assert!(t.unlock(&ns(), &[1, 2, 4, 7]).is_err());
        assert_eq!(t.evict(10), 3);
        assert_eq!(t.size(), 0);
        t.check_invariants();
    }

    #[test]
    fn capacity() {
        let mut t = RadixTree::new(Some(5), 1).unwrap();
        t.insert(&ns(), &[1, 2, 3]);
        t.insert(&ns(), &[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(t.size(), 5);
        assert_eq!(t.match_len(&ns(), &[1, 2, 3, 4, 5, 6, 7]), 5);
        t.insert(&ns(), &[9, 9]);
        assert_eq!(t.size(), 5);
        assert_eq!(t.match_len(&ns(), &[1, 2, 3, 4]), 3);
        assert_eq!(t.match_len(&ns(), &[9, 9]), 2);
        t.lock(&ns(), &[9, 9]);
        t.lock(&ns(), &[1, 2, 3]);
        t.insert(&ns(), &[7, 7, 7]);
        assert_eq!(t.size(), 5);
        assert_eq!(t.match_len(&ns(), &[7, 7, 7]), 0);
        t.check_invariants();
    }

    #[test]
    fn random_ops_invariants() {
        random_steps(7, Some(200), &[1, 2, 3], 3000, |t, _, held, next| {
            let len = (next() % 12) as usize;
            let toks: Vec<u32> = (0..len).map(|_| (next() % 3) as u32).collect();
            match next() % 6 {
                0..=2 => {
                    t.insert(&ns(), &toks);
                }
                3 => {
                    t.lock(&ns(), &toks);
                    held.push(toks);
                }
                4 if !held.is_empty() => {
                    let i = (next() as usize) % held.len();
                    let k = held.swap_remove(i);
                    t.unlock(&ns(), &k).unwrap();
                }
                _ => {
                    t.evict((next() % 10) as usize);
                }
            }
        });
    }
}
