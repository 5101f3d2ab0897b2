//! The dispatcher's global radix tree: which workers hold which prefix.
//!
//! A compressed radix tree over token ids. Every node carries the set of
//! workers that hold the *whole* prefix ending at that node (a bitset). Since
//! an engine's prefix cache is prefix-closed, the sets shrink going down:
//! `workers(child) ⊆ workers(parent)`. Inserting marks the worker on every
//! node of the path; an eviction report unmarks it on a whole subtree; nodes
//! no worker holds are pruned, so every non-root node has a non-empty set.
//!
//! This is deliberately a separate structure from the engine-side
//! `crate::radix` tree: it stores no KV sizes, no locks and no LRU order, only
//! "who holds what", which is all a router needs.

use std::collections::HashMap;

use crate::radix::common_prefix;

/// A fixed-width bitset over worker indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSet {
    words: Vec<u64>,
}

impl WorkerSet {
    /// The empty set for `n` workers.
    pub fn empty(n: usize) -> Self {
        WorkerSet {
            words: vec![0; n.div_ceil(64).max(1)],
        }
    }

    /// The set of all `n` workers.
    pub fn full(n: usize) -> Self {
        let mut s = Self::empty(n);
        for w in 0..n {
            s.insert(w);
        }
        s
    }

    pub fn insert(&mut self, w: usize) {
        self.words[w / 64] |= 1 << (w % 64);
    }

    pub fn remove(&mut self, w: usize) {
        self.words[w / 64] &= !(1 << (w % 64));
    }

    pub fn contains(&self, w: usize) -> bool {
        self.words[w / 64] & (1 << (w % 64)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&x| x == 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|x| x.count_ones() as usize).sum()
    }

    /// Members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut x = word;
            std::iter::from_fn(move || {
                if x == 0 {
                    return None;
                }
                let b = x.trailing_zeros() as usize;
                x &= x - 1;
                Some(i * 64 + b)
            })
        })
    }
}

#[derive(Debug, Clone)]
struct Node {
    /// Edge label from the parent (empty only for the root).
    key: Vec<u32>,
    children: HashMap<u32, usize>,
    parent: usize,
    workers: WorkerSet,
}

const ROOT: usize = 0;

/// Global prefix tree recording, per node, the workers holding that prefix.
#[derive(Debug, Clone)]
pub struct WorkerTree {
    num_workers: usize,
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    live: usize,
}

/// Result of [`WorkerTree::longest_match`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Tokens of the query held by at least one worker.
    pub len: usize,
    /// Workers holding exactly that longest prefix (all workers when `len == 0`).
    pub workers: WorkerSet,
}

impl WorkerTree {
    /// An empty tree for `num_workers` workers (the root, the empty prefix, is
    /// held by every worker).
    pub fn new(num_workers: usize) -> Self {
        let root = Node {
            key: Vec::new(),
            children: HashMap::new(),
            parent: ROOT,
            workers: WorkerSet::full(num_workers),
        };
        WorkerTree {
            num_workers,
            nodes: vec![Some(root)],
            free: Vec::new(),
            live: 1,
        }
    }

    /// Number of nodes, root included.
    pub fn num_nodes(&self) -> usize {
        self.live
    }

    fn node(&self, i: usize) -> &Node {
        self.nodes[i].as_ref().expect("live node")
    }

    fn node_mut(&mut self, i: usize) -> &mut Node {
        self.nodes[i].as_mut().expect("live node")
    }

    fn alloc(&mut self, node: Node) -> usize {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            self.nodes[i] = Some(node);
            i
        } else {
            self.nodes.push(Some(node));
            self.nodes.len() - 1
        }
    }

    /// Split node `i` after `at` tokens of its key; returns the new upper node
    /// (which takes `i`'s place under the parent and has `i` as only child).
    fn split(&mut self, i: usize, at: usize) -> usize {
        let (parent, upper_key, workers, first) = {
            let n = self.node_mut(i);
            let rest = n.key.split_off(at);
            let upper_key = std::mem::replace(&mut n.key, rest);
            (n.parent, upper_key, n.workers.clone(), n.key[0])
        };
        let head = upper_key[0];
        let mut children = HashMap::new();
        children.insert(first, i);
        let up = self.alloc(Node {
            key: upper_key,
            children,
            parent,
            workers,
        });
        self.node_mut(i).parent = up;
        self.node_mut(parent).children.insert(head, up);
        up
    }

    /// Longest prefix of `tokens` held by some worker, and who holds it.
    pub fn longest_match(&self, tokens: &[u32]) -> Match {
        let (len, workers) = self.longest_match_ref(tokens);
        Match {
            len,
            workers: workers.clone(),
        }
    }

    /// [`longest_match`](Self::longest_match) without copying the worker set.
    pub fn longest_match_ref(&self, tokens: &[u32]) -> (usize, &WorkerSet) {
        let mut cur = ROOT;
        let mut pos = 0;
        let mut best = ROOT;
        while pos < tokens.len() {
            let Some(&c) = self.node(cur).children.get(&tokens[pos]) else {
                break;
            };
            let n = self.node(c);
            let k = common_prefix(&n.key, &tokens[pos..]);
            pos += k;
            best = c;
            if k < n.key.len() {
                break;
            }
            cur = c;
        }
        (pos, &self.node(best).workers)
    }

    /// Length of the longest prefix of `tokens` that worker `w` holds.
    pub fn held_len(&self, tokens: &[u32], w: usize) -> usize {
        let mut cur = ROOT;
        let mut pos = 0;
        while pos < tokens.len() {
            let Some(&c) = self.node(cur).children.get(&tokens[pos]) else {
                break;
            };
            let n = self.node(c);
            if !n.workers.contains(w) {
                break;
            }
            let k = common_prefix(&n.key, &tokens[pos..]);
            pos += k;
            if k < n.key.len() {
                break;
            }
            cur = c;
        }
        pos
    }

    /// What the tree records, as the fewest `insert`s that rebuild it: each
    /// `(tokens, workers)` says every worker in `workers` holds `tokens`
    /// and nothing longer below it (a worker listed on a node but on none
    /// of its children). Depth-first, children by first token, so the list
    /// is deterministic; inserting it into an empty tree gives a tree with
    /// the same holdings (the same matches).
    pub fn holdings(&self) -> Vec<(Vec<u32>, Vec<usize>)> {
        let mut out = Vec::new();
        let mut path = Vec::new();
        self.collect(ROOT, &mut path, &mut out);
        out
    }

    fn collect(&self, i: usize, path: &mut Vec<u32>, out: &mut Vec<(Vec<u32>, Vec<usize>)>) {
        let node = self.node(i);
        let depth = path.len();
        path.extend_from_slice(&node.key);
        let mut firsts: Vec<u32> = node.children.keys().copied().collect();
        firsts.sort_unstable();
        if i != ROOT {
            let ends: Vec<usize> = node
                .workers
                .iter()
                .filter(|&w| {
                    !node
                        .children
                        .values()
                        .any(|&c| self.node(c).workers.contains(w))
                })
                .collect();
            if !ends.is_empty() {
                out.push((path.clone(), ends));
            }
        }
        for t in firsts {
            self.collect(node.children[&t], path, out);
        }
        path.truncate(depth);
    }

    /// Record that worker `w` holds `tokens` (and so every prefix of it).
    pub fn insert(&mut self, tokens: &[u32], w: usize) {
        let mut cur = ROOT;
        let mut pos = 0;
        while pos < tokens.len() {
            match self.node(cur).children.get(&tokens[pos]).copied() {
                None => {
                    let mut workers = WorkerSet::empty(self.num_workers);
                    workers.insert(w);
                    let leaf = self.alloc(Node {
                        key: tokens[pos..].to_vec(),
                        children: HashMap::new(),
                        parent: cur,
                        workers,
                    });
                    self.node_mut(cur).children.insert(tokens[pos], leaf);
                    return;
                }
                Some(c) => {
                    let k = common_prefix(&self.node(c).key, &tokens[pos..]);
                    let next = if k < self.node(c).key.len() {
                        self.split(c, k)
                    } else {
                        c
                    };
                    self.node_mut(next).workers.insert(w);
                    pos += k;
                    cur = next;
                }
            }
        }
    }

    /// Worker `w` no longer holds `tokens[..kept + 1]` (nor anything longer
    /// along `tokens`); it still holds `tokens[..kept]`. Unmarks `w` on the
    /// subtree below position `kept` of the path and prunes nodes nobody
    /// holds. Returns the number of token positions `w` no longer holds (the
    /// summed key lengths of the nodes it was removed from: the same for
    /// every tree holding the same prefixes, however its nodes were split,
    /// so a tree restored from a saved state answers as the original).
    pub fn evict(&mut self, tokens: &[u32], w: usize, kept: usize) -> usize {
        if kept >= tokens.len() {
            return 0;
        }
        // Find the node covering position `kept` along `tokens`.
        let mut cur = ROOT;
        let mut pos = 0; // depth at the end of `cur`
        let target = loop {
            let Some(&c) = self.node(cur).children.get(&tokens[pos]) else {
                return 0;
            };
            let klen = self.node(c).key.len();
            let k = common_prefix(&self.node(c).key, &tokens[pos..]);
            if pos + klen > kept {
                // `c` covers position `kept`; the path must match up to it.
                if k < kept - pos + 1 {
                    return 0;
                }
                if !self.node(c).workers.contains(w) {
                    return 0;
                }
                if kept > pos {
                    // Split so a node starts exactly at `kept`.
                    self.split(c, kept - pos);
                }
                break c;
            }
            if k < klen {
                return 0;
            }
            pos += klen;
            cur = c;
        };
        // Unmark w on the subtree of `target`.
        let mut removed = 0;
        let mut stack = vec![target];
        let mut order = Vec::new();
        while let Some(i) = stack.pop() {
            let n = self.node_mut(i);
            if !n.workers.contains(w) {
                continue;
            }
            n.workers.remove(w);
            removed += n.key.len();
            order.push(i);
            stack.extend(n.children.values().copied());
        }
        // Prune emptied nodes, deepest first (children were pushed after parents).
        for &i in order.iter().rev() {
            if self.node(i).workers.is_empty() {
                debug_assert!(self.node(i).children.is_empty());
                let n = self.nodes[i].take().expect("live node");
                self.live -= 1;
                self.free.push(i);
                if let Some(p) = self.nodes[n.parent].as_mut() {
                    p.children.remove(&n.key[0]);
                }
            }
        }
        self.merge_chain(self.parent_of_path(tokens, kept));
        removed
    }

    /// Worker `w` holds nothing any more (it left, or its slot is reused):
    /// unmark it everywhere and prune. Returns the number of token positions
    /// it no longer holds (see [`WorkerTree::evict`]).
    pub fn remove_worker(&mut self, w: usize) -> usize {
        let firsts: Vec<u32> = self.node(ROOT).children.keys().copied().collect();
        firsts.into_iter().map(|t| self.evict(&[t], w, 0)).sum()
    }

    /// After a prune, the node ending at depth `kept` may have one child with
    /// the same worker set; merge them so the tree stays compressed.
    fn parent_of_path(&self, tokens: &[u32], depth: usize) -> Option<usize> {
        let mut cur = ROOT;
        let mut pos = 0;
        while pos < depth {
            let &c = self.node(cur).children.get(&tokens[pos])?;
            let klen = self.node(c).key.len();
            pos += klen;
            cur = c;
        }
        (pos == depth && cur != ROOT).then_some(cur)
    }

    fn merge_chain(&mut self, at: Option<usize>) {
        let Some(i) = at else { return };
        let only = {
            let n = self.node(i);
            if n.children.len() != 1 {
                return;
            }
            *n.children.values().next().expect("one child")
        };
        if self.node(only).workers != self.node(i).workers {
            return;
        }
        let child = self.nodes[only].take().expect("live node");
        self.live -= 1;
        self.free.push(only);
        for &g in child.children.values() {
            self.node_mut(g).parent = i;
        }
        let n = self.node_mut(i);
        n.key.extend_from_slice(&child.key);
        n.children = child.children;
    }

    /// Check the invariants (tests): subset property, non-empty sets,
    /// children keyed by their first token, parent links.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = 0;
        let mut stack = vec![ROOT];
        while let Some(i) = stack.pop() {
            seen += 1;
            let n = self.node(i);
            if i != ROOT {
                if n.key.is_empty() {
                    return Err(format!("node {i} has an empty key"));
                }
                if n.workers.is_empty() {
                    return Err(format!("node {i} is held by no worker"));
                }
            }
            for (&t, &c) in &n.children {
                let ch = self.node(c);
                if ch.key[0] != t || ch.parent != i {
                    return Err(format!("bad child link {i} -> {c}"));
                }
                if ch.workers.iter().any(|w| !n.workers.contains(w)) {
                    return Err(format!("child {c} holds a worker its parent {i} lacks"));
                }
                stack.push(c);
            }
        }
        if seen != self.live {
            return Err(format!("{seen} reachable nodes, {} live", self.live));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_insert_split() {
        let mut t = WorkerTree::new(4);
        let m = t.longest_match(&[1, 2, 3]);
        assert_eq!(m.len, 0);
        assert_eq!(m.workers.len(), 4);
        t.insert(&[1, 2, 3, 4], 0);
        t.insert(&[1, 2, 9], 1);
        t.check().unwrap();
        let m = t.longest_match(&[1, 2, 3, 4, 5]);
        assert_eq!(m.len, 4);
        assert_eq!(m.workers.iter().collect::<Vec<_>>(), vec![0]);
        let m = t.longest_match(&[1, 2, 7]);
        assert_eq!(m.len, 2);
        assert_eq!(m.workers.iter().collect::<Vec<_>>(), vec![0, 1]);
        // partial match inside an edge: holders of the longer prefix
        let m = t.longest_match(&[1, 2, 3, 8]);
        assert_eq!(m.len, 3);
        assert_eq!(m.workers.iter().collect::<Vec<_>>(), vec![0]);
        assert_eq!(t.held_len(&[1, 2, 3, 4], 1), 2);
        assert_eq!(t.held_len(&[1, 2, 3, 4], 0), 4);
    }

    #[test]
    fn evict_keeps_shorter_prefix_and_prunes() {
        let mut t = WorkerTree::new(2);
        t.insert(&[1, 2, 3, 4], 0);
        t.insert(&[1, 2, 3, 4], 1);
        t.insert(&[1, 2, 5], 0);
        // positions 1.. of [1, 2, 3, 4] and of [1, 2, 5]: [2], [3, 4], [5]
        assert_eq!(t.evict(&[1, 2, 3, 4], 0, 1), 4);
        t.check().unwrap();
        assert_eq!(t.held_len(&[1, 2, 3, 4], 0), 1);
        assert_eq!(t.held_len(&[1, 2, 5], 0), 1);
        assert_eq!(t.held_len(&[1, 2, 3, 4], 1), 4);
        t.evict(&[1, 2, 3, 4], 1, 0);
        t.check().unwrap();
        // worker 0 still holds [1]; worker 1 holds nothing
        let m = t.longest_match(&[1, 2, 3, 4]);
        assert_eq!((m.len, m.workers.iter().collect::<Vec<_>>()), (1, vec![0]));
        t.evict(&[1], 0, 0);
        t.check().unwrap();
        assert_eq!(t.num_nodes(), 1);
        // evicting what is not there is a no-op
        assert_eq!(t.evict(&[7, 7], 0, 0), 0);
        assert_eq!(t.evict(&[1], 0, 5), 0);
    }

    #[test]
    fn merge_after_prune_keeps_tree_compressed() {
        let mut t = WorkerTree::new(2);
        t.insert(&[1, 2, 3], 0);
        t.insert(&[1, 2, 4], 1);
        t.insert(&[1, 2, 3], 1);
        t.evict(&[1, 2, 4], 1, 2);
        t.check().unwrap();
        // [1,2] and [3] now both held by {0,1}: merged into one node
        assert_eq!(t.num_nodes(), 2);
    }

    #[test]
    fn worker_set_iter() {
        let mut s = WorkerSet::empty(130);
        for w in [0, 63, 64, 129] {
            s.insert(w);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        assert_eq!(s.len(), 4);
        s.remove(64);
        assert!(!s.contains(64));
    }
}
