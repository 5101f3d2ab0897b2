//! Slab-backed double-ended FIFO with stable handles.
//!
//! O(1) push at either end, pop from either end, and removal of an arbitrary
//! entry by handle (a doubly linked list threaded through a slab, so no
//! per-node allocation). Each entry also gets a *position*: push_back takes
//! one above every position in use, push_front one below, so queue order is
//! always ascending position. That makes "which of these entries comes
//! first?" an O(1) comparison, which the identity registry uses to find the
//! first occurrence of an object queued twice.

const NIL: u32 = u32::MAX;

/// Stable reference to a FIFO entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    idx: u32,
    gen: u32,
}

#[derive(Debug, Clone)]
struct Node<T> {
    gen: u32,
    prev: u32,
    next: u32,
    pos: i64,
    val: Option<T>,
}

/// A double-ended queue with O(1) removal by handle.
#[derive(Debug, Clone)]
pub struct Fifo<T> {
    nodes: Vec<Node<T>>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    len: usize,
    front_pos: i64,
    back_pos: i64,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Fifo<T> {
    pub fn new() -> Self {
        Fifo {
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
            front_pos: 0,
            back_pos: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn alloc(&mut self, val: T, pos: i64) -> u32 {
        match self.free.pop() {
            Some(i) => {
                let n = &mut self.nodes[i as usize];
                n.val = Some(val);
                n.pos = pos;
                n.prev = NIL;
                n.next = NIL;
                i
            }
            None => {
                assert!(self.nodes.len() < NIL as usize, "Fifo is full");
                self.nodes.push(Node {
                    gen: 0,
                    prev: NIL,
                    next: NIL,
                    pos,
                    val: Some(val),
                });
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn handle(&self, idx: u32) -> Handle {
        Handle {
            idx,
            gen: self.nodes[idx as usize].gen,
        }
    }

    pub fn push_back(&mut self, val: T) -> Handle {
        let pos = if self.len == 0 {
            self.front_pos = 0;
            self.back_pos = 0;
            0
        } else {
            self.back_pos += 1;
            self.back_pos
        };
        let i = self.alloc(val, pos);
        self.nodes[i as usize].prev = self.tail;
        if self.tail != NIL {
            self.nodes[self.tail as usize].next = i;
        } else {
            self.head = i;
        }
        self.tail = i;
        self.len += 1;
        self.handle(i)
    }

    pub fn push_front(&mut self, val: T) -> Handle {
        let pos = if self.len == 0 {
            self.front_pos = 0;
            self.back_pos = 0;
            0
        } else {
            self.front_pos -= 1;
            self.front_pos
        };
        let i = self.alloc(val, pos);
        self.nodes[i as usize].next = self.head;
        if self.head != NIL {
            self.nodes[self.head as usize].prev = i;
        } else {
            self.tail = i;
        }
        self.head = i;
        self.len += 1;
        self.handle(i)
    }

    fn live(&self, h: Handle) -> bool {
        self.nodes
            .get(h.idx as usize)
            .is_some_and(|n| n.gen == h.gen && n.val.is_some())
    }

    pub fn contains(&self, h: Handle) -> bool {
        self.live(h)
    }

    pub fn get(&self, h: Handle) -> Option<&T> {
        if self.live(h) {
            self.nodes[h.idx as usize].val.as_ref()
        } else {
            None
        }
    }

    pub fn get_mut(&mut self, h: Handle) -> Option<&mut T> {
        if self.live(h) {
            self.nodes[h.idx as usize].val.as_mut()
        } else {
            None
        }
    }

    /// Queue position: smaller means closer to the front. Only comparable
    /// between entries that are queued at the same time.
    pub fn position(&self, h: Handle) -> Option<i64> {
        self.live(h).then(|| self.nodes[h.idx as usize].pos)
    }

    pub fn front(&self) -> Option<(Handle, &T)> {
        (self.head != NIL).then(|| {
            (
                self.handle(self.head),
                self.nodes[self.head as usize].val.as_ref().expect("live"),
            )
        })
    }

    /// The `i`-th entry from the front, walking from the nearer end:
    /// O(1) at both ends, O(min(i, len - i)) in between (a deque's cost).
    pub fn nth(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let (mut cur, steps, forward) = if i <= self.len / 2 {
            (self.head, i, true)
        } else {
            (self.tail, self.len - 1 - i, false)
        };
        for _ in 0..steps {
            let n = &self.nodes[cur as usize];
            cur = if forward { n.next } else { n.prev };
        }
        self.nodes[cur as usize].val.as_ref()
    }

    pub fn back(&self) -> Option<(Handle, &T)> {
        (self.tail != NIL).then(|| {
            (
                self.handle(self.tail),
                self.nodes[self.tail as usize].val.as_ref().expect("live"),
            )
        })
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let (h, _) = self.front()?;
        self.remove(h)
    }

    pub fn pop_back(&mut self) -> Option<T> {
        let (h, _) = self.back()?;
        self.remove(h)
    }

    /// Remove by handle in O(1); `None` if the handle is stale.
    pub fn remove(&mut self, h: Handle) -> Option<T> {
        if !self.live(h) {
            return None;
        }
        let i = h.idx as usize;
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        let n = &mut self.nodes[i];
        n.gen = n.gen.wrapping_add(1);
        n.prev = NIL;
        n.next = NIL;
        let v = n.val.take();
        self.free.push(h.idx);
        self.len -= 1;
        v
    }

    pub fn clear(&mut self) {
        self.nodes.clear();
        self.free.clear();
        self.head = NIL;
        self.tail = NIL;
        self.len = 0;
    }

    /// Front-to-back iteration.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            fifo: self,
            cur: self.head,
            left: self.len,
        }
    }
}

/// Iterator returned by [`Fifo::iter`].
pub struct Iter<'a, T> {
    fifo: &'a Fifo<T>,
    cur: u32,
    left: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = (Handle, &'a T);
    fn next(&mut self) -> Option<Self::Item> {
        if self.cur == NIL {
            return None;
        }
        let i = self.cur;
        let n = &self.fifo.nodes[i as usize];
        self.cur = n.next;
        self.left -= 1;
        Some((self.fifo.handle(i), n.val.as_ref().expect("live")))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn contents(f: &Fifo<u32>) -> Vec<u32> {
        f.iter().map(|(_, v)| *v).collect()
    }

    #[test]
    fn both_ends_and_removal() {
        let mut f = Fifo::new();
        let a = f.push_back(1);
        let b = f.push_back(2);
        let c = f.push_front(0);
        assert_eq!(contents(&f), vec![0, 1, 2]);
        assert!(f.position(c) < f.position(a) && f.position(a) < f.position(b));
        assert_eq!(f.remove(a), Some(1));
        assert_eq!(f.remove(a), None);
        assert_eq!(contents(&f), vec![0, 2]);
        assert_eq!(f.pop_front(), Some(0));
        assert_eq!(f.pop_back(), Some(2));
        assert!(f.is_empty());
        assert_eq!(f.pop_front(), None);
    }

    #[test]
    fn random_ops_match_vecdeque() {
        let mut s = 7u64;
        let mut rnd = || crate::testutil::lcg(&mut s) as u32;
        let mut f = Fifo::new();
        let mut m: VecDeque<(u32, Handle)> = VecDeque::new();
        for v in 0..20_000u32 {
            match rnd() % 6 {
                0 | 1 => m.push_back((v, f.push_back(v))),
                2 => m.push_front((v, f.push_front(v))),
                3 => assert_eq!(f.pop_front(), m.pop_front().map(|t| t.0)),
                4 if !m.is_empty() => {
                    let i = rnd() as usize % m.len();
                    let (val, h) = m.remove(i).unwrap();
                    assert_eq!(f.remove(h), Some(val));
                }
                _ => {}
            }
            assert_eq!(f.len(), m.len());
            if v % 1013 == 0 {
                let want: Vec<u32> = m.iter().map(|t| t.0).collect();
                assert_eq!(contents(&f), want);
                let pos: Vec<i64> = m.iter().map(|t| f.position(t.1).unwrap()).collect();
                assert!(pos.windows(2).all(|w| w[0] < w[1]));
            }
        }
    }
}
