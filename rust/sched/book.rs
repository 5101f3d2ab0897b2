//! What every policy shares: the requests and the clients.
//!
//! A request lives in a slot (`u32`, reused after it leaves) from `add` to
//! `remove` or `finish`; policies refer to it by slot and order it by its
//! arrival number `seq`. A client is an index in first-seen order.
//!
//! Waiting counts follow one rule the policies rely on: a policy's
//! `enqueue` runs *before* the book counts the request as waiting and its
//! `dequeue` runs *while* the book still counts it (so `client.waiting == 0`
//! in `enqueue` means "the client's first waiting request").

use std::collections::HashMap;

use super::{Admission, RequestId};
use crate::radix::RadixTree;

/// One request, waiting or running.
#[derive(Debug)]
pub(super) struct Req<T> {
    pub id: RequestId,
    pub client: u32,
    /// Waiting: the prompt's token ids (dropped at admission).
    pub tokens: Vec<u32>,
    /// The namespace's root node in the tree (`NIL` when added without one).
    pub root: u32,
    pub input_len: usize,
    /// The caller's payload; taken at admission.
    pub item: Option<T>,
    /// Arrival number (unique, increasing): FCFS order and every tie-break.
    pub seq: u64,
    pub running: bool,
    /// Running: extend tokens charged (admission, or the last
    /// [`super::LocalScheduler::recharge_extend`]).
    pub charged_extend: usize,
    /// Running: the client's weight when it was admitted (DLPM divides the
    /// extend charge by it; a recharge replaces that charge exactly).
    pub admission_weight: f64,
    /// Waiting again after [`super::LocalScheduler::requeue`] without a
    /// refund (the engine preempted it): its charges stand, and its next
    /// admission charges nothing more.
    pub resumed: bool,
}

impl<T> Req<T> {
    /// A new waiting request (`seq` is set by [`Book::insert`]).
    pub fn waiting(id: RequestId, client: u32, tokens: Vec<u32>, root: u32, item: T) -> Self {
        Req {
            id,
            client,
            input_len: tokens.len(),
            tokens,
            root,
            item: Some(item),
            seq: 0,
            running: false,
            charged_extend: 0,
            admission_weight: 1.0,
            resumed: false,
        }
    }
}

/// What the facade knows of a client; policy counters (VTC's virtual
/// counter, DLPM's deficit) live in the policy.
#[derive(Debug, Clone)]
pub(super) struct Client {
    pub name: String,
    pub weight: f64,
    pub service: f64,
    pub waiting: usize,
    pub running: usize,
    /// Requests admitted so far.
    pub admitted: u64,
    /// `false` for a forgotten client's slot, free for the next new client.
    pub live: bool,
}

impl Client {
    fn new(name: &str) -> Self {
        Client {
            name: name.to_owned(),
            weight: 1.0,
            service: 0.0,
            waiting: 0,
            running: 0,
            admitted: 0,
            live: true,
        }
    }
}

/// How [`Book::client_or_create`] found a client's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Existing,
    /// Appended: the policy must add a client.
    New,
    /// A forgotten client's slot: the policy must reset it.
    Reused,
}

/// The requests (by slot and by id) and the clients of one scheduler.
#[derive(Debug)]
pub(super) struct Book<T> {
    slots: Vec<Option<Req<T>>>,
    free: Vec<u32>,
    by_id: HashMap<RequestId, u32>,
    pub clients: Vec<Client>,
    client_by_name: HashMap<String, u32>,
    /// Slots of forgotten clients, reused by new ones.
    free_clients: Vec<u32>,
    next_seq: u64,
    /// Waiting / running requests in total.
    pub waiting: usize,
    pub running: usize,
    /// (input/extend weight, output weight) of `service`.
    pub service_weights: (f64, f64),
}

impl<T> Book<T> {
    pub fn new(service_weights: (f64, f64)) -> Self {
        Book {
            slots: Vec::new(),
            free: Vec::new(),
            by_id: HashMap::new(),
            clients: Vec::new(),
            client_by_name: HashMap::new(),
            free_clients: Vec::new(),
            next_seq: 0,
            waiting: 0,
            running: 0,
            service_weights,
        }
    }

    pub fn req(&self, r: u32) -> &Req<T> {
        self.slots[r as usize].as_ref().expect("live request")
    }
    pub fn req_mut(&mut self, r: u32) -> &mut Req<T> {
        self.slots[r as usize].as_mut().expect("live request")
    }
    pub fn slot_of(&self, id: &RequestId) -> Option<u32> {
        self.by_id.get(id).copied()
    }

    pub fn client_index(&self, name: &str) -> Option<u32> {
        self.client_by_name.get(name).copied()
    }
    pub fn client(&self, name: &str) -> Option<&Client> {
        self.client_index(name).map(|c| &self.clients[c as usize])
    }
    /// The client's index and how its slot was found (new ones: weight 1).
    pub fn client_or_create(&mut self, name: &str) -> (u32, Slot) {
        if let Some(c) = self.client_index(name) {
            return (c, Slot::Existing);
        }
        let (c, slot) = match self.free_clients.pop() {
            Some(c) => {
                self.clients[c as usize] = Client::new(name);
                (c, Slot::Reused)
            }
            None => {
                self.clients.push(Client::new(name));
                ((self.clients.len() - 1) as u32, Slot::New)
            }
        };
        self.client_by_name.insert(name.to_owned(), c);
        (c, slot)
    }

    /// Clients known now (forgotten ones excluded).
    pub fn live_clients(&self) -> usize {
        self.clients.len() - self.free_clients.len()
    }

    /// Whether client `c` holds nothing but history: no waiting or running
    /// request and the default weight (a weight set by the caller is
    /// configuration, never forgotten).
    pub fn is_idle(&self, c: u32) -> bool {
        let cl = &self.clients[c as usize];
        cl.live && cl.waiting == 0 && cl.running == 0 && cl.weight == 1.0
    }

    /// Forget idle client `c`; its slot goes to the next new client.
    pub fn forget_client(&mut self, c: u32) {
        debug_assert!(self.is_idle(c));
        let cl = &mut self.clients[c as usize];
        self.client_by_name.remove(&cl.name);
        *cl = Client::new("");
        cl.live = false;
        self.free_clients.push(c);
    }

    /// Store a new request (not yet counted as waiting) and give it the next
    /// arrival number; returns its slot.
    pub fn insert(&mut self, mut req: Req<T>) -> u32 {
        req.seq = self.next_seq;
        self.next_seq += 1;
        let id = req.id.clone();
        let r = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(req);
                i
            }
            None => {
                self.slots.push(Some(req));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_id.insert(id, r);
        r
    }

    /// Free a slot and forget its id.
    pub fn release(&mut self, r: u32) -> Req<T> {
        let req = self.slots[r as usize].take().expect("live request");
        self.by_id.remove(&req.id);
        self.free.push(r);
        req
    }

    /// Count `r` as waiting (after the policy's `enqueue`).
    pub fn count_waiting(&mut self, r: u32) {
        let c = self.req(r).client;
        self.waiting += 1;
        self.clients[c as usize].waiting += 1;
    }
    /// Stop counting `r` as waiting (after the policy's `dequeue`).
    pub fn uncount_waiting(&mut self, r: u32) {
        let c = self.req(r).client;
        self.waiting -= 1;
        self.clients[c as usize].waiting -= 1;
    }

    /// Tokens of waiting request `r` the tree holds now (0 without a tree).
    pub fn cached_now(&self, tree: Option<&RadixTree>, r: u32) -> usize {
        match tree {
            Some(t) => {
                let q = self.req(r);
                t.match_from(q.root, &q.tokens).len
            }
            None => 0,
        }
    }

    /// Move waiting request `r`, which its policy has just dequeued, to
    /// running with `cached` tokens cached; charge the client's service for
    /// the extend tokens and build the admission record.
    pub fn admit(&mut self, r: u32, cached: usize) -> Admission<T> {
        self.uncount_waiting(r);
        self.running += 1;
        let (input_weight, _) = self.service_weights;
        let q = self.slots[r as usize].as_mut().expect("live request");
        q.running = true;
        q.tokens = Vec::new();
        let item = q.item.take().expect("waiting request has its item");
        let c = q.client;
        let input_len = q.input_len;
        let id = q.id.clone();
        let extend = input_len.saturating_sub(cached);
        let resumed = std::mem::take(&mut q.resumed);
        if !resumed {
            q.charged_extend = extend;
            q.admission_weight = self.clients[c as usize].weight;
        }
        let cl = &mut self.clients[c as usize];
        cl.running += 1;
        if !resumed {
            cl.admitted += 1;
            cl.service += input_weight * extend as f64;
        }
        Admission {
            id,
            client: cl.name.clone(),
            item,
            input_len,
            cached_len: cached.min(input_len),
            extend_len: extend,
        }
    }

    /// Running request `r` goes back to waiting with `tokens` and `item`
    /// (its slot, client and arrival number kept); the policy enqueues it and
    /// the facade counts it as waiting afterwards.
    pub fn unadmit(&mut self, r: u32, tokens: Vec<u32>, item: T, resumed: bool) {
        self.running -= 1;
        let q = self.slots[r as usize].as_mut().expect("live request");
        q.running = false;
        q.input_len = tokens.len();
        q.tokens = tokens;
        q.item = Some(item);
        q.resumed = resumed;
        let c = q.client;
        self.clients[c as usize].running -= 1;
    }

    /// A running request is done: free its slot.
    pub fn finish(&mut self, r: u32) {
        let c = self.release(r).client;
        self.running -= 1;
        self.clients[c as usize].running -= 1;
    }

    /// No request waiting or running.
    pub fn is_empty(&self) -> bool {
        self.waiting == 0 && self.running == 0
    }

    /// Running requests, in slot order.
    pub fn running_requests(&self) -> impl Iterator<Item = &Req<T>> {
        self.slots.iter().flatten().filter(|q| q.running)
    }

    /// Forget every client (the book holds no request) and take new service
    /// weights: the first step of a state restore.
    pub fn reset_clients(&mut self, service_weights: (f64, f64)) {
        debug_assert!(self.is_empty());
        self.clients.clear();
        self.client_by_name.clear();
        self.free_clients.clear();
        self.service_weights = service_weights;
    }

    /// Append a restored client (next index, first-seen order kept).
    pub fn restore_client(&mut self, client: Client) {
        let c = self.clients.len() as u32;
        self.client_by_name.insert(client.name.clone(), c);
        self.clients.push(client);
    }

    /// Store a restored running request (an admitted, unfinished one).
    pub fn restore_running(&mut self, req: Req<T>) {
        debug_assert!(req.running && req.item.is_none());
        let c = req.client;
        let r = self.insert(req);
        self.slots[r as usize]
            .as_mut()
            .expect("just stored")
            .running = true;
        self.running += 1;
        self.clients[c as usize].running += 1;
    }

    /// Waiting requests (slot, request).
    pub fn waiting_requests(&self) -> impl Iterator<Item = (u32, &Req<T>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(r, q)| q.as_ref().map(|q| (r as u32, q)))
            .filter(|(_, q)| !q.running)
    }

    /// The totals agree with the requests stored.
    pub fn check_invariants(&self) {
        let waiting = self.slots.iter().flatten().filter(|q| !q.running).count();
        assert_eq!(waiting, self.waiting);
        let running = self.slots.iter().flatten().filter(|q| q.running).count();
        assert_eq!(running, self.running);
        assert_eq!(self.by_id.len(), waiting + running);
    }
}
