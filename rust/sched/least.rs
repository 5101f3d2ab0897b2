//! The order the per-client-value policies share (VTC's counter, LAS's
//! attained service): one value per client, each client's waiting requests
//! in arrival order, and the clients with waiting requests ordered by
//! (value, client index). The next candidate is the oldest request of the
//! waiting client with the least value (ties: the client seen first).

use std::collections::{BTreeMap, BTreeSet};

use super::book::Book;
use super::policy::Room;
use crate::ordf64::OrdF64;

#[derive(Debug, Default)]
pub(super) struct LeastValue {
    /// Per client: its value.
    values: Vec<f64>,
    /// Per client: its waiting requests, seq -> slot.
    queues: Vec<BTreeMap<u64, u32>>,
    /// Clients with waiting requests by (value, client index).
    listed: BTreeSet<(OrdF64, u32)>,
}

impl LeastValue {
    /// A client was created (value 0).
    pub fn add_client(&mut self) {
        self.values.push(0.0);
        self.queues.push(BTreeMap::new());
    }

    /// A forgotten client's slot holds a new client (value 0; not waiting).
    pub fn reset(&mut self, c: u32) {
        self.values[c as usize] = 0.0;
    }

    pub fn value(&self, c: u32) -> f64 {
        self.values[c as usize]
    }

    /// The least value among the clients with waiting requests.
    pub fn least(&self) -> Option<f64> {
        self.listed.iter().next().map(|&(OrdF64(v), _)| v)
    }

    /// Set client `c`'s value, re-keying it if it is listed (waiting).
    pub fn set<T>(&mut self, book: &Book<T>, c: u32, value: f64) {
        let listed = book.clients[c as usize].waiting > 0;
        if listed {
            self.listed.remove(&(OrdF64(self.values[c as usize]), c));
        }
        self.values[c as usize] = value;
        if listed {
            self.listed.insert((OrdF64(value), c));
        }
    }

    /// Set the value of client `c`, which has no waiting request.
    pub fn set_idle(&mut self, c: u32, value: f64) {
        debug_assert!(!self.listed.contains(&(OrdF64(self.values[c as usize]), c)));
        self.values[c as usize] = value;
    }

    /// Multiply every value by `f > 0` (the order is kept).
    pub fn scale(&mut self, f: f64) {
        for v in &mut self.values {
            *v *= f;
        }
        self.listed = std::mem::take(&mut self.listed)
            .into_iter()
            .map(|(OrdF64(v), c)| (OrdF64(v * f), c))
            .collect();
    }

    /// Waiting request `r` joins (before the book counts it): its client is
    /// listed with its value if this is its first waiting request.
    pub fn enqueue<T>(&mut self, book: &Book<T>, r: u32) {
        let q = book.req(r);
        let c = q.client;
        if book.clients[c as usize].waiting == 0 {
            self.listed.insert((OrdF64(self.values[c as usize]), c));
        }
        self.queues[c as usize].insert(q.seq, r);
    }

    /// Waiting request `r` leaves (while the book still counts it).
    pub fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
        let q = book.req(r);
        let c = q.client;
        self.queues[c as usize].remove(&q.seq);
        if book.clients[c as usize].waiting == 1 {
            self.listed.remove(&(OrdF64(self.values[c as usize]), c));
        }
    }

    /// The oldest request of the waiting client with the least value, and
    /// its cached prefix in `room.tree` now (the pass's next candidate).
    pub fn next_candidate<T>(&self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
        let &(_, c) = self.listed.iter().next()?;
        let (_, &r) = self.queues[c as usize]
            .iter()
            .next()
            .expect("listed client has a waiting request");
        Some((r, book.cached_now(room.tree, r)))
    }

    /// Assert the lists agree with the book and the values (tests).
    pub fn check_invariants<T>(&self, book: &Book<T>) {
        let waiting = book.clients.iter().filter(|c| c.waiting > 0).count();
        assert_eq!(self.listed.len(), waiting, "listed clients");
        for &(OrdF64(v), c) in &self.listed {
            assert_eq!(v, self.values[c as usize], "listed value");
        }
        for (c, q) in self.queues.iter().enumerate() {
            assert_eq!(q.len(), book.clients[c].waiting, "client queue");
        }
    }
}
