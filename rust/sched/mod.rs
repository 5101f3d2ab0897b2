//! Local (per-worker) schedulers: FCFS, LPM, VTC and DLPM behind one type.
//!
//! [`LocalScheduler`] holds the waiting and running requests of one worker
//! and admits waiting requests into a batch under a token budget. The policy
//! ([`Policy`]) only changes the admission order and the counters charged:
//!
//! * **FCFS**: arrival (`seq`) order; stops at the first request that does
//!   not fit (no overtaking).
//! * **LPM**: longest cached prefix first, ties by `seq`; a request that does
//!   not fit is skipped and the walk goes on (the paper's `CanAdd`), so LPM is
//!   exactly DLPM with an infinite quantum.
//! * **VTC** (ALGORITHMS.md §5): per-client counters; the waiting client with
//!   the smallest counter (ties: first-seen client) has its oldest request
//!   admitted if it fits; stop at the first that does not fit. Admission
//!   charges `w_in * input_len / w_c`, each output token `w_out / w_c`.
//!   A client whose queue goes from empty to non-empty is lifted to the
//!   minimum counter of the other waiting clients.
//! * **DLPM** (ALGORITHMS.md §6, Algorithm 1): walk in LPM order; a request
//!   of a client with `q <= 0` triggers the refill check (if no waiting client
//!   has `q > 0`, every known client with `q <= 0` gets `+Q_u`); a request is
//!   admitted if its client has `q > 0` and it fits (else skipped),
//!   charging `w_e * extend_len / w_c`; output tokens charge `w_q / w_c`.
//!   The walk is repeated (Algorithm 1's `while not Queue.empty()`) until a
//!   whole walk admits nothing and refills nothing, so DLPM is
//!   work-conserving: it only reorders. A refill check that fires applies at
//!   once the `k` single refills after which some waiting client has `q > 0`
//!   (`k` = min over waiting clients of the refills each needs; each known
//!   client with `q <= 0` gets `Q_u` per refill until positive or `k` are
//!   done; [`LocalScheduler::refills`] counts all `k`), computed in
//!   O(#clients) by [`refill_steps`], never one quantum at a time. One case
//!   is not work-conserving, on purpose: a waiting client with `q > 0` none of
//!   whose requests fits blocks the refill that clients without credit need
//!   (the paper's CheckRefill). Refilling past it would give the others
//!   quanta it does not get, breaking Theorem 4.1 (its proof needs every
//!   backlogged client refilled the same number of times) and letting small
//!   requests starve its large one. Corollary: a request that can never fit
//!   any budget the caller passes blocks refills while its client has credit;
//!   remove such requests.
//!
//! Incremental matching (LPM, DLPM): every waiting request remembers where its
//! match against the tree ended (deepest fully matched node + generation,
//! matched length) and is *parked* on that node (intrusive list). The tree
//! logs every node whose children changed and every node it removed; before
//! each operation the scheduler consumes the log from its cursor and
//! re-matches only the requests parked on logged nodes, starting from their
//! node if it is still alive (else from the namespace root). The LPM order is
//! a `BTreeMap` keyed by `(Reverse(match_len), seq)`, re-keyed on change, plus
//! a `BTreeSet` of `(extend_len, seq)` whose minimum ends the walk early once
//! nothing left can fit. A step therefore costs O((admitted + skipped +
//! re-matched) log n), independent of the number waiting when the cache
//! changed little. DLPM's repeated walks stay within that: a request seen not
//! to fit leaves its client's map for the rest of the call (the budget only
//! shrinks), a walk is repeated only after a refill or admission, and a refill
//! event needs an admission since the previous one.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::fmt;
use std::ops::Bound::{Excluded, Unbounded};

use crate::error::{check_positive, Error, Result};
use crate::hash::FastMap;
use crate::radix::{Change, Namespace, RadixTree, ALL_CHILDREN};

const NIL: u32 = u32::MAX;

/// LPM order: longest match first, then arrival.
type LpmKey = (Reverse<u32>, u64);

/// A request id: an int or a string (unique among waiting + running).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestId {
    Int(i64),
    Str(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(i) => write!(f, "{i}"),
            RequestId::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The admission policy and its weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    Fcfs,
    Lpm,
    Vtc { w_in: f64, w_out: f64 },
    Dlpm { quantum: f64, w_e: f64, w_q: f64 },
}

impl Policy {
    fn incremental(&self) -> bool {
        matches!(self, Policy::Lpm | Policy::Dlpm { .. })
    }
    /// (input/extend weight, output weight) used for `service`.
    fn service_weights(&self) -> (f64, f64) {
        match *self {
            Policy::Fcfs | Policy::Lpm => (1.0, 2.0),
            Policy::Vtc { w_in, w_out } => (w_in, w_out),
            Policy::Dlpm { w_e, w_q, .. } => (w_e, w_q),
        }
    }
}

/// One admitted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission<T> {
    pub id: RequestId,
    pub client: String,
    pub item: T,
    pub input_len: usize,
    pub cached_len: usize,
    pub extend_len: usize,
}

/// Total order on finite floats for ordered sets.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

#[derive(Debug, Clone)]
struct Client {
    name: String,
    weight: f64,
    service: f64,
    counter: f64,
    deficit: f64,
    waiting: usize,
    running: usize,
    /// VTC: this client's waiting requests by seq.
    queue: BTreeMap<u64, u32>,
    /// DLPM: this client's waiting requests in LPM order.
    lpm: BTreeMap<LpmKey, u32>,
}

#[derive(Debug)]
struct Req<T> {
    id: RequestId,
    client: u32,
    tokens: Vec<u32>,
    root: u32,
    input_len: usize,
    item: Option<T>,
    seq: u64,
    running: bool,
    /// Running: extend tokens charged (admission, or the last
    /// [`LocalScheduler::recharge_extend`]).
    extend: usize,
    /// Running: the client's weight when it was admitted (DLPM divides the
    /// extend charge by it; a recharge replaces that charge exactly).
    adm_weight: f64,
    mnode: u32,
    mgen: u32,
    mlen: u32,
    pkey: u64,
    prev: u32,
    next: u32,
}

/// A local scheduler for one worker (see the module docs).
#[derive(Debug)]
pub struct LocalScheduler<T> {
    policy: Policy,
    reqs: Vec<Option<Req<T>>>,
    free: Vec<u32>,
    ids: HashMap<RequestId, u32>,
    clients: Vec<Client>,
    client_ids: HashMap<String, u32>,
    next_seq: u64,
    n_waiting: usize,
    n_running: usize,
    fifo: BTreeMap<u64, u32>,
    vtc_order: BTreeSet<(OrdF64, u32)>,
    lpm: BTreeMap<(Reverse<u32>, u64), u32>,
    ext: BTreeSet<(u32, u64)>,
    /// node -> next-child key -> head of the intrusive list of requests.
    parked: FastMap<u32, FastMap<u64, u32>>,
    tree_id: Option<u64>,
    cursor: u64,
    /// DLPM: clients with waiting requests and `q > 0`.
    pos_waiting: usize,
    /// DLPM: number of refills so far (diagnostics).
    refills: u64,
    /// Re-matches done while consuming the tree's change log (diagnostics).
    rematches: u64,
    /// Scratch buffers for change-log processing.
    scratch: Vec<Change>,
    batch: Vec<u32>,
}

impl<T> LocalScheduler<T> {
    /// Validate weights and build an empty scheduler.
    pub fn new(policy: Policy) -> Result<Self> {
        match policy {
            Policy::Vtc { w_in, w_out } => {
                check_positive("w_in", w_in)?;
                check_positive("w_out", w_out)?;
            }
            Policy::Dlpm { quantum, w_e, w_q } => {
                check_positive("quantum", quantum)?;
                check_positive("w_e", w_e)?;
                check_positive("w_q", w_q)?;
            }
            _ => {}
        }
        Ok(LocalScheduler {
            policy,
            reqs: Vec::new(),
            free: Vec::new(),
            ids: HashMap::new(),
            clients: Vec::new(),
            client_ids: HashMap::new(),
            next_seq: 0,
            n_waiting: 0,
            n_running: 0,
            fifo: BTreeMap::new(),
            vtc_order: BTreeSet::new(),
            lpm: BTreeMap::new(),
            ext: BTreeSet::new(),
            parked: FastMap::default(),
            tree_id: None,
            cursor: 0,
            pos_waiting: 0,
            refills: 0,
            rematches: 0,
            scratch: Vec::new(),
            batch: Vec::new(),
        })
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }
    /// Waiting requests.
    pub fn len(&self) -> usize {
        self.n_waiting
    }
    pub fn is_empty(&self) -> bool {
        self.n_waiting == 0
    }
    pub fn num_running(&self) -> usize {
        self.n_running
    }
    pub fn refills(&self) -> u64 {
        self.refills
    }
    /// Re-matches done so far because the tree changed (diagnostics).
    pub fn rematches(&self) -> u64 {
        self.rematches
    }

    fn req(&self, r: u32) -> &Req<T> {
        self.reqs[r as usize].as_ref().expect("live request")
    }
    fn req_mut(&mut self, r: u32) -> &mut Req<T> {
        self.reqs[r as usize].as_mut().expect("live request")
    }

    fn client_idx(&mut self, name: &str) -> u32 {
        if let Some(&c) = self.client_ids.get(name) {
            return c;
        }
        let c = self.clients.len() as u32;
        self.clients.push(Client {
            name: name.to_owned(),
            weight: 1.0,
            service: 0.0,
            counter: 0.0,
            deficit: 0.0,
            waiting: 0,
            running: 0,
            queue: BTreeMap::new(),
            lpm: BTreeMap::new(),
        });
        self.client_ids.insert(name.to_owned(), c);
        c
    }

    fn check_tree(&mut self, tree: &RadixTree) -> Result<()> {
        match self.tree_id {
            None => {
                self.tree_id = Some(tree.id());
                self.cursor = tree.log_end();
                Ok(())
            }
            Some(id) if id == tree.id() => Ok(()),
            Some(_) => Err(Error::value(
                "this scheduler is bound to a different RadixTree (pass the same tree every time)",
            )),
        }
    }

    // ----- DLPM positive-waiting bookkeeping --------------------------------

    fn dlpm_flag(&self, c: u32) -> bool {
        let cl = &self.clients[c as usize];
        cl.waiting > 0 && cl.deficit > 0.0
    }

    fn set_waiting(&mut self, c: u32, up: bool) {
        let before = self.dlpm_flag(c);
        let cl = &mut self.clients[c as usize];
        if up {
            cl.waiting += 1;
        } else {
            cl.waiting -= 1;
        }
        let after = self.dlpm_flag(c);
        self.adjust_pos(before, after);
    }

    /// Move a DLPM deficit by `delta`, saturating at `f64::MIN` /
    /// `f64::MAX`: an overflowing charge (`w_e * extend_len / w_c` beyond
    /// `f64::MAX`, e.g. `w_e = 1e308`) must not leave `-inf`, which a refill
    /// would turn into NaN (`-inf + inf`). Deficits are always finite, so
    /// `x + delta` is never `inf - inf`; a NaN `delta` is a caller bug.
    fn add_deficit(&mut self, c: u32, delta: f64) {
        debug_assert!(!delta.is_nan());
        let before = self.dlpm_flag(c);
        let x = &mut self.clients[c as usize].deficit;
        *x = (*x + delta).clamp(f64::MIN, f64::MAX);
        let after = self.dlpm_flag(c);
        self.adjust_pos(before, after);
    }

    fn adjust_pos(&mut self, before: bool, after: bool) {
        match (before, after) {
            (false, true) => self.pos_waiting += 1,
            (true, false) => self.pos_waiting -= 1,
            _ => {}
        }
    }

    /// DLPM refill check fired (no waiting client has `q > 0`): apply in one
    /// go the `k` consecutive single refills (`q += Q_u` for every known
    /// client with `q <= 0`) after which some waiting client has `q > 0`,
    /// i.e. `k = min` over waiting clients of the refills each needs. A
    /// client with `q <= 0` gets `Q_u` per refill until it is positive or the
    /// `k` refills are done. `refills` counts the `k` virtual refills.
    /// O(#clients); never loops once per quantum.
    fn bulk_refill(&mut self, quantum: f64) {
        debug_assert_eq!(self.pos_waiting, 0);
        let k = self
            .clients
            .iter()
            .filter(|cl| cl.waiting > 0)
            .map(|cl| refill_steps(cl.deficit, quantum, u64::MAX).0)
            .min()
            .unwrap_or(0);
        if k == 0 {
            return;
        }
        self.refills = self.refills.saturating_add(k);
        for cl in &mut self.clients {
            if cl.deficit <= 0.0 {
                cl.deficit = refill_steps(cl.deficit, quantum, k).1;
            }
        }
        self.pos_waiting = (0..self.clients.len() as u32)
            .filter(|&c| self.dlpm_flag(c))
            .count();
        debug_assert!(self.pos_waiting > 0);
    }

    // ----- VTC ordering -----------------------------------------------------

    fn vtc_set_counter(&mut self, c: u32, value: f64) {
        let cl = &self.clients[c as usize];
        let listed = cl.waiting > 0;
        if listed {
            self.vtc_order.remove(&(OrdF64(cl.counter), c));
        }
        self.clients[c as usize].counter = value;
        if listed {
            self.vtc_order.insert((OrdF64(value), c));
        }
    }

    // ----- parking ----------------------------------------------------------

    fn park(&mut self, r: u32) {
        let (node, key) = {
            let q = self.req(r);
            (q.mnode, q.pkey)
        };
        let head = self
            .parked
            .entry(node)
            .or_default()
            .insert(key, r)
            .unwrap_or(NIL);
        {
            let q = self.req_mut(r);
            q.prev = NIL;
            q.next = head;
        }
        if head != NIL {
            self.req_mut(head).prev = r;
        }
    }

    fn unpark(&mut self, r: u32) {
        let (node, key, prev, next) = {
            let q = self.req(r);
            (q.mnode, q.pkey, q.prev, q.next)
        };
        if prev != NIL {
            self.req_mut(prev).next = next;
        } else {
            let inner = self.parked.get_mut(&node).expect("parked node");
            if next == NIL {
                inner.remove(&key);
                if inner.is_empty() {
                    self.parked.remove(&node);
                }
            } else {
                inner.insert(key, next);
            }
        }
        if next != NIL {
            self.req_mut(next).prev = prev;
        }
    }

    fn lpm_keys(&self, r: u32) -> (LpmKey, (u32, u64)) {
        let q = self.req(r);
        (
            (Reverse(q.mlen), q.seq),
            (q.input_len as u32 - q.mlen, q.seq),
        )
    }

    fn lpm_link(&mut self, r: u32) {
        let (k1, k2) = self.lpm_keys(r);
        self.lpm.insert(k1, r);
        self.ext.insert(k2);
        if matches!(self.policy, Policy::Dlpm { .. }) {
            let c = self.req(r).client;
            self.clients[c as usize].lpm.insert(k1, r);
        }
    }

    fn lpm_unlink(&mut self, r: u32) {
        let (k1, k2) = self.lpm_keys(r);
        self.lpm.remove(&k1);
        self.ext.remove(&k2);
        if matches!(self.policy, Policy::Dlpm { .. }) {
            let c = self.req(r).client;
            self.clients[c as usize].lpm.remove(&k1);
        }
    }

    /// Re-match one waiting request (LPM/DLPM), fixing parking and keys.
    fn rematch(&mut self, tree: &RadixTree, r: u32) {
        self.rematches += 1;
        let q = self.req(r);
        let start = if tree.is_alive(q.mnode, q.mgen) {
            q.mnode
        } else {
            q.root
        };
        let mp = tree.match_from(start, &q.tokens);
        let key = tree.next_key(mp.node, &q.tokens);
        let (old_node, old_gen, old_len, old_key) = (q.mnode, q.mgen, q.mlen, q.pkey);
        if mp.node != old_node || mp.gen != old_gen || key != old_key {
            self.unpark(r);
            let q = self.req_mut(r);
            q.mnode = mp.node;
            q.mgen = mp.gen;
            q.pkey = key;
            self.park(r);
        }
        if mp.len as u32 != old_len {
            self.lpm_unlink(r);
            self.req_mut(r).mlen = mp.len as u32;
            self.lpm_link(r);
        }
    }

    /// Consume the tree's change log and re-match affected requests.
    fn sync(&mut self, tree: &RadixTree) -> Result<()> {
        self.check_tree(tree)?;
        if !self.policy.incremental() {
            return Ok(());
        }
        let mut nodes = std::mem::take(&mut self.scratch);
        nodes.clear();
        match tree.changes_since(self.cursor) {
            Some(ch) => {
                nodes.extend_from_slice(ch);
                nodes.sort_unstable_by_key(|c| (c.node, c.key));
                nodes.dedup();
                let mut batch = std::mem::take(&mut self.batch);
                for ch in &nodes {
                    batch.clear();
                    if let Some(inner) = self.parked.get(&ch.node) {
                        let mut push = |mut r: u32| {
                            while r != NIL {
                                batch.push(r);
                                r = self.reqs[r as usize].as_ref().expect("live").next;
                            }
                        };
                        if ch.key == ALL_CHILDREN {
                            for &h in inner.values() {
                                push(h);
                            }
                        } else if let Some(&h) = inner.get(&ch.key) {
                            push(h);
                        }
                    }
                    for &r in &batch {
                        self.rematch(tree, r);
                    }
                }
                self.batch = batch;
            }
            None => {
                let all: Vec<u32> = self.lpm.values().copied().collect();
                for r in all {
                    self.rematch(tree, r);
                }
            }
        }
        self.scratch = nodes;
        self.cursor = tree.log_end();
        Ok(())
    }

    // ----- public operations --------------------------------------------------

    /// Add a waiting request. `tree` is required for LPM/DLPM and optional
    /// otherwise (used only to report `cached_len`).
    pub fn add(
        &mut self,
        tree: Option<&mut RadixTree>,
        id: RequestId,
        client: &str,
        tokens: Vec<u32>,
        item: T,
        ns: Namespace,
    ) -> Result<()> {
        if self.ids.contains_key(&id) {
            return Err(Error::value(format!(
                "request_id {id} is already waiting or running in this scheduler"
            )));
        }
        if tokens.len() >= u32::MAX as usize {
            return Err(Error::value(format!(
                "tokens: {} tokens is too long (max {})",
                tokens.len(),
                u32::MAX - 1
            )));
        }
        if self.policy.incremental() && tree.is_none() {
            return Err(Error::value("this policy needs a RadixTree"));
        }
        let mut root = NIL;
        let mut mp = None;
        let mut tree_key = None;
        if let Some(t) = tree {
            self.sync(t)?;
            root = t.root_or_create(&ns);
            if self.policy.incremental() {
                let m = t.match_from(root, &tokens);
                tree_key = Some(t.next_key(m.node, &tokens));
                mp = Some(m);
            }
        }
        let c = self.client_idx(client);
        let seq = self.next_seq;
        self.next_seq += 1;
        let input_len = tokens.len();
        let req = Req {
            id: id.clone(),
            client: c,
            tokens,
            root,
            input_len,
            item: Some(item),
            seq,
            running: false,
            extend: 0,
            adm_weight: 1.0,
            mnode: mp.map_or(root, |m| m.node),
            mgen: mp.map_or(0, |m| m.gen),
            mlen: mp.map_or(0, |m| m.len as u32),
            pkey: tree_key.unwrap_or(0),
            prev: NIL,
            next: NIL,
        };
        let r = match self.free.pop() {
            Some(i) => {
                self.reqs[i as usize] = Some(req);
                i
            }
            None => {
                self.reqs.push(Some(req));
                (self.reqs.len() - 1) as u32
            }
        };
        self.ids.insert(id, r);
        self.n_waiting += 1;
        match self.policy {
            Policy::Fcfs => {
                self.fifo.insert(seq, r);
                self.set_waiting(c, true);
            }
            Policy::Vtc { .. } => {
                if self.clients[c as usize].waiting == 0 {
                    // Lift to the minimum counter of the other waiting clients.
                    if let Some(&(OrdF64(min), _)) = self.vtc_order.iter().next() {
                        let cl = &mut self.clients[c as usize];
                        cl.counter = cl.counter.max(min);
                    }
                    let cnt = self.clients[c as usize].counter;
                    self.vtc_order.insert((OrdF64(cnt), c));
                }
                self.clients[c as usize].queue.insert(seq, r);
                self.set_waiting(c, true);
            }
            Policy::Lpm | Policy::Dlpm { .. } => {
                self.lpm_link(r);
                self.park(r);
                self.set_waiting(c, true);
            }
        }
        Ok(())
    }

    /// Remove a waiting request and return its item.
    pub fn remove(&mut self, id: &RequestId) -> Result<T> {
        let &r = self
            .ids
            .get(id)
            .ok_or_else(|| Error::key(format!("request_id {id} is not waiting")))?;
        if self.req(r).running {
            return Err(Error::key(format!(
                "request_id {id} is running, not waiting (use finish)"
            )));
        }
        self.take_waiting(r);
        self.ids.remove(id);
        let req = self.reqs[r as usize].take().expect("live request");
        self.free.push(r);
        Ok(req.item.expect("waiting request has its item"))
    }

    /// Unlink a waiting request from every waiting structure.
    fn take_waiting(&mut self, r: u32) {
        let (c, seq) = {
            let q = self.req(r);
            (q.client, q.seq)
        };
        self.n_waiting -= 1;
        match self.policy {
            Policy::Fcfs => {
                self.fifo.remove(&seq);
                self.set_waiting(c, false);
            }
            Policy::Vtc { .. } => {
                self.clients[c as usize].queue.remove(&seq);
                if self.clients[c as usize].waiting == 1 {
                    let cnt = self.clients[c as usize].counter;
                    self.vtc_order.remove(&(OrdF64(cnt), c));
                }
                self.set_waiting(c, false);
            }
            Policy::Lpm | Policy::Dlpm { .. } => {
                self.lpm_unlink(r);
                self.unpark(r);
                self.set_waiting(c, false);
            }
        }
    }

    /// Move a waiting request to running and build its admission record.
    fn admit(&mut self, r: u32, cached: usize) -> Admission<T> {
        self.take_waiting(r);
        self.n_running += 1;
        let q = self.reqs[r as usize].as_mut().expect("live request");
        q.running = true;
        q.tokens = Vec::new();
        let item = q.item.take().expect("waiting request has its item");
        let c = q.client;
        let input_len = q.input_len;
        let id = q.id.clone();
        let extend = input_len - cached;
        q.extend = extend;
        q.adm_weight = self.clients[c as usize].weight;
        let (we, _) = self.policy.service_weights();
        let cl = &mut self.clients[c as usize];
        cl.running += 1;
        cl.service += we * extend as f64;
        Admission {
            id,
            client: cl.name.clone(),
            item,
            input_len,
            cached_len: cached,
            extend_len: extend,
        }
    }

    /// Admit waiting requests in policy order under `token_budget` extend
    /// tokens and at most `max_requests` requests.
    pub fn schedule(
        &mut self,
        tree: Option<&RadixTree>,
        token_budget: usize,
        max_requests: Option<usize>,
    ) -> Result<Vec<Admission<T>>> {
        if self.policy.incremental() && tree.is_none() {
            return Err(Error::value("this policy needs a RadixTree"));
        }
        if let Some(t) = tree {
            self.sync(t)?;
        }
        let max_req = max_requests.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        let mut rem = token_budget;
        match self.policy {
            Policy::Fcfs => {
                while out.len() < max_req {
                    let Some((_, &r)) = self.fifo.iter().next() else {
                        break;
                    };
                    let cached = self.cached_now(tree, r);
                    let ext = self.req(r).input_len - cached;
                    if ext > rem {
                        break;
                    }
                    rem -= ext;
                    out.push(self.admit(r, cached));
                }
            }
            Policy::Vtc { w_in, .. } => {
                while out.len() < max_req {
                    let Some(&(_, c)) = self.vtc_order.iter().next() else {
                        break;
                    };
                    let (_, &r) = self.clients[c as usize]
                        .queue
                        .iter()
                        .next()
                        .expect("listed client has a waiting request");
                    let cached = self.cached_now(tree, r);
                    let input_len = self.req(r).input_len;
                    let ext = input_len - cached;
                    if ext > rem {
                        break;
                    }
                    rem -= ext;
                    let w = self.clients[c as usize].weight;
                    let new = self.clients[c as usize].counter + w_in * input_len as f64 / w;
                    self.vtc_set_counter(c, new);
                    out.push(self.admit(r, cached));
                }
            }
            Policy::Lpm | Policy::Dlpm { .. } => {
                let dlpm = match self.policy {
                    Policy::Dlpm { quantum, w_e, .. } => Some((quantum, w_e)),
                    _ => None,
                };
                // Position of the current walk (None: before its first request).
                let mut pos: Option<LpmKey> = None;
                // DLPM repeats the walk (Algorithm 1's `while not
                // Queue.empty()`) until a whole walk admits nothing and
                // refills nothing; LPM needs one walk.
                let mut progress = false;
                let mut merge: BinaryHeap<Reverse<(LpmKey, u32)>> = BinaryHeap::new();
                let mut merge_valid = false;
                // DLPM: requests seen not to fit cannot fit again in this call
                // (the budget only shrinks), so later walks must not step over
                // them again: they leave their client's LPM map (used by the
                // merge) until the end of the call. The global order keeps
                // them: they still trigger refill checks.
                let mut dead: Vec<(u32, LpmKey, u32)> = Vec::new();
                while out.len() < max_req {
                    match self.ext.iter().next() {
                        Some(&(e, _)) if (e as usize) <= rem => {}
                        _ => {
                            // Nothing left fits: no walk admits anything any
                            // more, but under DLPM the next request visited
                            // (in this walk or the next) still runs the
                            // refill check. If no waiting client has credit
                            // it fires (in bulk) and then never again.
                            if let Some((quantum, _)) = dlpm {
                                if self.pos_waiting == 0 && self.n_waiting > 0 {
                                    self.bulk_refill(quantum);
                                }
                            }
                            break;
                        }
                    }
                    let next = if dlpm.is_some() && self.pos_waiting > 0 {
                        // Some waiting client has credit, so requests of
                        // clients without credit are skipped with no side
                        // effect: merge only the credit clients' LPM orders.
                        if !merge_valid {
                            merge.clear();
                            for c in 0..self.clients.len() as u32 {
                                if self.dlpm_flag(c) {
                                    if let Some(k) = self.client_next(c, pos) {
                                        merge.push(Reverse((k, c)));
                                    }
                                }
                            }
                            merge_valid = true;
                        }
                        let mut found = None;
                        while let Some(Reverse((k, c))) = merge.pop() {
                            if !self.dlpm_flag(c) {
                                continue;
                            }
                            if let Some(nk) = self.client_next(c, Some(k)) {
                                merge.push(Reverse((nk, c)));
                            }
                            found = Some((k, self.clients[c as usize].lpm[&k]));
                            break;
                        }
                        found
                    } else {
                        let n = match pos {
                            None => self.lpm.iter().next(),
                            Some(k) => self.lpm.range((Excluded(k), Unbounded)).next(),
                        };
                        n.map(|(&k, &r)| (k, r))
                    };
                    let Some((k, r)) = next else {
                        // End of a walk.
                        if dlpm.is_none() || !progress {
                            break;
                        }
                        progress = false;
                        pos = None;
                        merge_valid = false;
                        continue;
                    };
                    pos = Some(k);
                    let (c, input_len, mlen) = {
                        let q = self.req(r);
                        (q.client, q.input_len, q.mlen as usize)
                    };
                    if let Some((quantum, _)) = dlpm {
                        if self.clients[c as usize].deficit <= 0.0 && self.pos_waiting == 0 {
                            self.bulk_refill(quantum);
                            progress = true;
                            merge_valid = false;
                        }
                        if self.clients[c as usize].deficit <= 0.0 {
                            continue;
                        }
                    }
                    let ext = input_len - mlen;
                    if ext > rem {
                        if dlpm.is_some() && self.clients[c as usize].lpm.remove(&k).is_some() {
                            dead.push((c, k, r));
                        }
                        continue;
                    }
                    rem -= ext;
                    if let Some((_, w_e)) = dlpm {
                        let w = self.clients[c as usize].weight;
                        self.add_deficit(c, -(w_e * ext as f64 / w));
                    }
                    out.push(self.admit(r, mlen));
                    progress = true;
                }
                for (c, k, r) in dead {
                    self.clients[c as usize].lpm.insert(k, r);
                }
            }
        }
        Ok(out)
    }

    /// DLPM: the first key of client `c`'s LPM order after `pos`.
    fn client_next(&self, c: u32, pos: Option<LpmKey>) -> Option<LpmKey> {
        let m = &self.clients[c as usize].lpm;
        match pos {
            None => m.keys().next().copied(),
            Some(k) => m.range((Excluded(k), Unbounded)).next().map(|x| *x.0),
        }
    }

    fn cached_now(&self, tree: Option<&RadixTree>, r: u32) -> usize {
        match tree {
            Some(t) => {
                let q = self.req(r);
                t.match_from(q.root, &q.tokens).len
            }
            None => 0,
        }
    }

    fn running_client(&self, id: &RequestId) -> Result<(u32, u32)> {
        match self.ids.get(id) {
            Some(&r) if self.req(r).running => Ok((r, self.req(r).client)),
            Some(_) => Err(Error::key(format!(
                "request_id {id} is waiting, not running"
            ))),
            None => Err(Error::key(format!("request_id {id} is not running"))),
        }
    }

    /// Charge `n_tokens` decode tokens of a running request.
    pub fn charge_output(&mut self, id: &RequestId, n_tokens: usize) -> Result<()> {
        let (_, c) = self.running_client(id)?;
        let n = n_tokens as f64;
        let (_, wq) = self.policy.service_weights();
        let w = self.clients[c as usize].weight;
        self.clients[c as usize].service += wq * n;
        match self.policy {
            Policy::Vtc { w_out, .. } => {
                let new = self.clients[c as usize].counter + w_out * n / w;
                self.vtc_set_counter(c, new);
            }
            Policy::Dlpm { w_q, .. } => self.add_deficit(c, -(w_q * n / w)),
            _ => {}
        }
        Ok(())
    }

    /// Replace the extend tokens charged at a running request's admission by
    /// `extend_len` (e.g. once the engine knows its real prefix match) and
    /// return the value charged before. Everything admission charged for
    /// extend tokens moves by the difference: `service(client)` by
    /// `w_e * delta` (VTC: `w_in`; FCFS/LPM: 1) and, under DLPM, the deficit
    /// by `-w_e * delta / w_c` with the weight `w_c` the client had at
    /// admission, so the request ends up charged exactly as if it had been
    /// admitted with `extend_len`. VTC's counter is unchanged: it charges
    /// `w_in * input_len / w_c` whatever the cache holds (ALGORITHMS.md §5).
    /// May be called again (each call replaces the previous value).
    ///
    /// Errors (nothing changes): unknown or waiting id -> `Key`;
    /// `extend_len > input_len` -> `Value`.
    pub fn recharge_extend(&mut self, id: &RequestId, extend_len: usize) -> Result<usize> {
        let (r, c) = self.running_client(id)?;
        let (old, input_len, w) = {
            let q = self.req(r);
            (q.extend, q.input_len, q.adm_weight)
        };
        if extend_len > input_len {
            return Err(Error::value(format!(
                "extend_len = {extend_len} exceeds the input_len ({input_len}) of request_id {id}"
            )));
        }
        if extend_len == old {
            return Ok(old);
        }
        let (we, _) = self.policy.service_weights();
        let delta = extend_len as f64 - old as f64;
        self.clients[c as usize].service += we * delta;
        if let Policy::Dlpm { w_e, .. } = self.policy {
            let mut delta = w_e * old as f64 / w - w_e * extend_len as f64 / w;
            if !delta.is_finite() {
                // one of the two charges overflowed (`inf - x` or `inf - inf`):
                // charge the difference directly (saturated by add_deficit)
                delta = w_e * (old as f64 - extend_len as f64) / w;
            }
            self.add_deficit(c, delta);
        }
        self.req_mut(r).extend = extend_len;
        Ok(old)
    }

    /// Extend tokens currently charged for a running request (`Key` error if
    /// it is not running).
    pub fn charged_extend(&self, id: &RequestId) -> Result<usize> {
        let (r, _) = self.running_client(id)?;
        Ok(self.req(r).extend)
    }

    /// A running request is done.
    pub fn finish(&mut self, id: &RequestId) -> Result<()> {
        let (r, c) = self.running_client(id)?;
        self.ids.remove(id);
        self.reqs[r as usize] = None;
        self.free.push(r);
        self.n_running -= 1;
        self.clients[c as usize].running -= 1;
        Ok(())
    }

    fn known(&self, client: &str) -> Option<&Client> {
        self.client_ids
            .get(client)
            .map(|&c| &self.clients[c as usize])
    }

    /// Raw service received: input weight x extend + output weight x output tokens.
    pub fn service(&self, client: &str) -> f64 {
        self.known(client).map_or(0.0, |c| c.service)
    }
    /// VTC counter (0 for unknown clients).
    pub fn counter(&self, client: &str) -> f64 {
        self.known(client).map_or(0.0, |c| c.counter)
    }
    /// DLPM deficit (0 for unknown clients).
    pub fn deficit(&self, client: &str) -> f64 {
        self.known(client).map_or(0.0, |c| c.deficit)
    }
    pub fn weight(&self, client: &str) -> f64 {
        self.known(client).map_or(1.0, |c| c.weight)
    }
    /// Set a client's weight (> 0, finite); creates the client if unknown.
    pub fn set_weight(&mut self, client: &str, w: f64) -> Result<()> {
        check_positive("weight", w)?;
        let c = self.client_idx(client);
        self.clients[c as usize].weight = w;
        Ok(())
    }
    /// Clients in first-seen order.
    pub fn clients(&self) -> Vec<String> {
        self.clients.iter().map(|c| c.name.clone()).collect()
    }
    /// Waiting requests of a client.
    pub fn waiting_of(&self, client: &str) -> usize {
        self.known(client).map_or(0, |c| c.waiting)
    }
    /// Running requests of a client.
    pub fn running_of(&self, client: &str) -> usize {
        self.known(client).map_or(0, |c| c.running)
    }
    /// Current match length recorded for a waiting request (LPM/DLPM).
    pub fn cached_len(&self, id: &RequestId) -> Option<usize> {
        let &r = self.ids.get(id)?;
        let q = self.req(r);
        (!q.running).then_some(q.mlen as usize)
    }

    /// Check internal invariants (tests): recorded matches equal fresh ones.
    pub fn check_invariants(&self, tree: Option<&RadixTree>) {
        let waiting = self.reqs.iter().flatten().filter(|q| !q.running).count();
        assert_eq!(waiting, self.n_waiting);
        let running = self.reqs.iter().flatten().filter(|q| q.running).count();
        assert_eq!(running, self.n_running);
        assert_eq!(self.ids.len(), waiting + running);
        if self.policy.incremental() {
            assert_eq!(self.lpm.len(), waiting);
            assert_eq!(self.ext.len(), waiting);
            if let Some(t) = tree {
                if t.changes_since(self.cursor) == Some(&[]) {
                    for q in self.reqs.iter().flatten().filter(|q| !q.running) {
                        assert_eq!(q.mlen as usize, t.match_from(q.root, &q.tokens).len);
                    }
                }
            }
        }
        let pos = (0..self.clients.len() as u32)
            .filter(|&c| self.dlpm_flag(c))
            .count();
        assert_eq!(pos, self.pos_waiting);
    }
}

/// Single refills done one at a time before switching to the closed form.
const NATIVE_REFILLS: u64 = 64;

/// Apply up to `limit` single DLPM refills (`q += quantum`, each only while
/// `q <= 0`) to one deficit: returns (refills applied, new deficit). Stops as
/// soon as the deficit is positive, so with `limit = u64::MAX` the count is
/// the number of refills that make it positive (`u64::MAX` means no limit;
/// a count beyond `u64::MAX` saturates).
///
/// The first [`NATIVE_REFILLS`] additions are done one by one (bit-identical
/// to the literal algorithm); beyond that the rest is `x + j * quantum` with
/// the smallest such `j`, computed in O(1). That equals `j` sequential
/// additions whenever these are exact (e.g. `quantum` a multiple of the ulp
/// of `x`, such as any integer or dyadic quantum with moderate deficits);
/// otherwise it is the more accurate of the two. Where sequential additions
/// would stall (`x + quantum == x`), the closed form still terminates.
/// `x + j * quantum` is fused (one rounding, no overflow of `j * quantum`).
/// When the count itself is beyond `f64` (a denormal `quantum` against a
/// normal debt, or a debt saturated at `f64::MIN`, see `add_deficit`), the
/// count saturates and the deficit becomes `quantum`, the top of the
/// `(0, quantum]` interval the exact result lies in: never `+inf` credit.
fn refill_steps(q: f64, quantum: f64, limit: u64) -> (u64, f64) {
    let mut x = q;
    let mut n = 0u64;
    while x <= 0.0 && n < limit && n < NATIVE_REFILLS {
        x += quantum;
        n += 1;
    }
    if x > 0.0 || n == limit {
        return (n, x);
    }
    // Smallest j >= 1 with x + j * quantum > 0 (the sum is monotone in j).
    const EXACT: f64 = 4_503_599_627_370_496.0; // 2^52: j + 1 is exact below
    let up = |j: f64| {
        if j < EXACT {
            j + 1.0
        } else {
            j * (1.0 + f64::EPSILON)
        }
    };
    // `x + j * quantum` fused (one rounding): exact `j * quantum` never
    // overflows on the way to a result in `[x, quantum]`.
    let at = |j: f64| j.mul_add(quantum, x);
    let mut j = (-x / quantum).ceil().max(1.0);
    while j.is_finite() && at(j) <= 0.0 {
        j = up(j);
    }
    while j > 1.0 && j < EXACT && at(j - 1.0) > 0.0 {
        j -= 1.0;
    }
    let left = limit - n;
    // `limit == u64::MAX` is unlimited (a count past u64 saturates).
    if limit == u64::MAX || j <= left as f64 {
        if j.is_finite() {
            (n.saturating_add(j as u64), at(j))
        } else {
            // the count is beyond f64 (a tiny quantum next to the debt, e.g.
            // 5e-324 vs -10, or a debt of f64::MIN): the exact result of
            // those refills lies in (0, quantum]; `x + inf` would hand out
            // infinite credit.
            (u64::MAX, quantum)
        }
    } else {
        (limit, at(left as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids<T>(v: &[Admission<T>]) -> Vec<RequestId> {
        v.iter().map(|a| a.id.clone()).collect()
    }
    fn int(i: i64) -> RequestId {
        RequestId::Int(i)
    }

    #[test]
    fn lpm_order_and_skip() {
        let mut t = RadixTree::new(None, 1).unwrap();
        let ns = Namespace::Default;
        t.insert(&ns, &[1, 2, 3, 4]);
        let mut s = LocalScheduler::new(Policy::Lpm).unwrap();
        s.add(Some(&mut t), int(0), "a", vec![9, 9], (), ns.clone())
            .unwrap();
        s.add(Some(&mut t), int(1), "a", vec![1, 2, 7], (), ns.clone())
            .unwrap();
        s.add(
            Some(&mut t),
            int(2),
            "b",
            vec![1, 2, 3, 4, 5],
            (),
            ns.clone(),
        )
        .unwrap();
        s.add(Some(&mut t), int(3), "b", vec![7; 50], (), ns.clone())
            .unwrap();
        let adm = s.schedule(Some(&t), 10, None).unwrap();
        assert_eq!(ids(&adm), vec![int(2), int(1), int(0)]);
        assert_eq!(adm[0].cached_len, 4);
        assert_eq!(s.len(), 1);
        assert_eq!(s.num_running(), 3);
        assert!(s.add(Some(&mut t), int(2), "b", vec![], (), ns).is_err());
    }

    #[test]
    fn incremental_matches_follow_tree_changes() {
        let mut rng = 11u64;
        let mut next = || crate::testutil::lcg(&mut rng);
        for page in [1usize, 2] {
            let mut t = RadixTree::new(Some(60), page).unwrap();
            let ns = Namespace::Default;
            let mut s = LocalScheduler::new(Policy::Dlpm {
                quantum: 5.0,
                w_e: 1.0,
                w_q: 2.0,
            })
            .unwrap();
            let mut id = 0;
            for _ in 0..3000 {
                let len = (next() % 10) as usize;
                let toks: Vec<u32> = (0..len).map(|_| (next() % 3) as u32).collect();
                match next() % 5 {
                    0 => {
                        let c = ["a", "b", "c"][(next() % 3) as usize];
                        s.add(Some(&mut t), int(id), c, toks, (), ns.clone())
                            .unwrap();
                        id += 1;
                    }
                    1 => {
                        t.insert(&ns, &toks);
                    }
                    2 => {
                        t.evict((next() % 8) as usize);
                    }
                    3 => {
                        for a in s.schedule(Some(&t), (next() % 12) as usize, None).unwrap() {
                            s.finish(&a.id).unwrap();
                        }
                    }
                    _ => {
                        // sync happens on the next call; check after one
                        s.schedule(Some(&t), 0, Some(0)).unwrap();
                        s.check_invariants(Some(&t));
                    }
                }
            }
        }
    }

    #[test]
    fn vtc_lift_and_dlpm_refill() {
        let mut v: LocalScheduler<()> = LocalScheduler::new(Policy::Vtc {
            w_in: 1.0,
            w_out: 2.0,
        })
        .unwrap();
        let ns = Namespace::Default;
        v.add(None, int(1), "a", vec![0; 10], (), ns.clone())
            .unwrap();
        v.add(None, int(2), "a", vec![0; 10], (), ns.clone())
            .unwrap();
        v.schedule(None, 10, None).unwrap();
        v.charge_output(&int(1), 5).unwrap();
        v.add(None, int(3), "b", vec![0; 4], (), ns.clone())
            .unwrap();
        assert_eq!(v.counter("b"), 20.0);

        let mut t = RadixTree::new(None, 1).unwrap();
        let mut d: LocalScheduler<()> = LocalScheduler::new(Policy::Dlpm {
            quantum: 5.0,
            w_e: 1.0,
            w_q: 2.0,
        })
        .unwrap();
        d.add(Some(&mut t), int(1), "a", vec![1; 4], (), ns.clone())
            .unwrap();
        d.add(Some(&mut t), int(2), "a", vec![1; 4], (), ns.clone())
            .unwrap();
        d.add(Some(&mut t), int(3), "b", vec![2; 4], (), ns)
            .unwrap();
        let adm = d.schedule(Some(&t), 100, None).unwrap();
        assert_eq!(ids(&adm), vec![int(1), int(2), int(3)]);
        assert_eq!(d.deficit("a"), -3.0);
        assert_eq!(d.deficit("b"), 1.0);
        assert_eq!(d.refills(), 1);
        d.check_invariants(Some(&t));
    }

    /// One refill at a time, as the literal algorithm does it.
    fn native_steps(q: f64, quantum: f64, limit: u64) -> (u64, f64) {
        let (mut x, mut n) = (q, 0);
        while x <= 0.0 && n < limit {
            x += quantum;
            n += 1;
        }
        (n, x)
    }

    #[test]
    fn refill_steps_equal_single_refills() {
        let mut rng = 7u64;
        let mut next = || crate::testutil::lcg(&mut rng);
        // Dyadic / integer quanta: every addition is exact, so the closed
        // form must equal the sequential sums bit for bit.
        for _ in 0..3000 {
            let quantum = [1.0 / 1024.0, 0.25, 0.5, 3.0, 10.0][(next() % 5) as usize];
            let q = -((next() % 100_000) as f64) / [1.0, 2.0, 8.0][(next() % 3) as usize];
            let limit = [1, 5, 64, 65, 300, u64::MAX][(next() % 6) as usize];
            assert_eq!(
                refill_steps(q, quantum, limit),
                native_steps(q, quantum, limit),
                "q={q} quantum={quantum} limit={limit}"
            );
        }
        // Non-dyadic: the count still agrees and the value is within rounding.
        for q in [-0.3, -1.0 / 3.0, -100.0, -7.7] {
            let (n1, x1) = refill_steps(q, 1e-3, u64::MAX);
            let (n2, x2) = native_steps(q, 1e-3, u64::MAX);
            assert!(n1.abs_diff(n2) <= 1, "{q}: {n1} vs {n2}");
            assert!((x1 - x2).abs() < 1e-9);
            assert!(x1 > 0.0 && x1 <= 1e-3 + 1e-12);
        }
        // Sequential refills would stall here; the closed form terminates.
        let (n, x) = refill_steps(-1e20, 1e-3, u64::MAX);
        assert!(x > 0.0 && n > 1u64 << 60);
        assert_eq!(refill_steps(0.0, 2.0, u64::MAX), (1, 2.0));
        assert_eq!(refill_steps(-0.0, 2.0, 0), (0, -0.0));
    }

    #[test]
    fn refill_steps_extremes_stay_finite() {
        // a denormal quantum: the count is beyond f64, the credit is not inf
        let (n, x) = refill_steps(-10.0, 5e-324, u64::MAX);
        assert_eq!(n, u64::MAX);
        assert!(x > 0.0 && x <= 5e-324);
        // the saturated debt: j * quantum would overflow
        for q in [1.0, 1e300, f64::MAX] {
            let (n, x) = refill_steps(f64::MIN, q, u64::MAX);
            assert!(n >= 1 && x > 0.0 && x <= q && x.is_finite(), "{q}: {n} {x}");
        }
        // limited: stays a finite non-positive partial refill
        let (n, x) = refill_steps(f64::MIN, 1.0, 1000);
        assert_eq!(n, 1000);
        assert!(x.is_finite() && x <= 0.0);
        let (n, x) = refill_steps(-10.0, 5e-324, 1 << 40);
        assert_eq!(n, 1 << 40);
        assert!(x.is_finite() && x < 0.0);
    }

    #[test]
    fn dlpm_extreme_weights_saturate() {
        let mut d = LocalScheduler::new(Policy::Dlpm {
            quantum: 1.0,
            w_e: 1e308,
            w_q: 1e308,
        })
        .unwrap();
        let mut t = RadixTree::new(None, 1).unwrap();
        d.add(
            Some(&mut t),
            RequestId::Int(1),
            "x",
            vec![1; 10],
            (),
            Namespace::Default,
        )
        .unwrap();
        d.schedule(Some(&t), 100, None).unwrap();
        assert_eq!(d.deficit("x"), f64::MIN);
        d.charge_output(&RequestId::Int(1), 1000).unwrap();
        assert_eq!(d.deficit("x"), f64::MIN);
        // recharging down from an overflowed charge: no inf - inf
        d.recharge_extend(&RequestId::Int(1), 0).unwrap();
        assert!(d.deficit("x").is_finite());
        d.recharge_extend(&RequestId::Int(1), 10).unwrap();
        assert!(d.deficit("x").is_finite());
        d.add(
            Some(&mut t),
            RequestId::Int(2),
            "x",
            vec![2; 3],
            (),
            Namespace::Default,
        )
        .unwrap();
        let a = d.schedule(Some(&t), 100, None).unwrap();
        assert_eq!(a.len(), 1);
        assert!(d.deficit("x").is_finite());
        d.check_invariants(Some(&t));
        // a denormal quantum
        let mut d = dlpm(5e-324);
        for i in 0..6 {
            d.add(
                Some(&mut t),
                RequestId::Int(i),
                "a",
                vec![1, 2, 3],
                (),
                Namespace::Default,
            )
            .unwrap();
        }
        d.schedule(Some(&t), 100, None).unwrap();
        assert!(d.deficit("a").is_finite());
        d.check_invariants(Some(&t));
    }

    fn dlpm(quantum: f64) -> LocalScheduler<()> {
        LocalScheduler::new(Policy::Dlpm {
            quantum,
            w_e: 1.0,
            w_q: 2.0,
        })
        .unwrap()
    }

    #[test]
    fn dlpm_small_quantum_is_work_conserving() {
        let ns = Namespace::Default;
        let mut t = RadixTree::new(None, 1).unwrap();
        let mut d = dlpm(1e-3);
        let mut l: LocalScheduler<()> = LocalScheduler::new(Policy::Lpm).unwrap();
        for i in 0..30 {
            let toks: Vec<u32> = (0..10).map(|j| (i * 100 + j) as u32).collect();
            let c = ["a", "b", "c"][i % 3];
            d.add(Some(&mut t), int(i as i64), c, toks.clone(), (), ns.clone())
                .unwrap();
            l.add(Some(&mut t), int(i as i64), c, toks, (), ns.clone())
                .unwrap();
        }
        for _ in 0..3 {
            let a = d.schedule(Some(&t), 95, None).unwrap();
            let b = l.schedule(Some(&t), 95, None).unwrap();
            assert_eq!(a.len(), 9);
            assert_eq!(a.len(), b.len());
            d.check_invariants(Some(&t));
        }
        // Each refill event makes exactly one more waiting client positive,
        // after ~10 / 1e-3 virtual refills.
        assert!(d.refills() > 10_000, "{}", d.refills());
        assert_eq!(d.schedule(Some(&t), 1000, None).unwrap().len(), 3);
    }

    #[test]
    fn dlpm_credit_client_that_does_not_fit_blocks_refills() {
        // Theorem 4.1 needs refills only when every waiting client has
        // q <= 0: a client with credit whose requests do not fit blocks them.
        let ns = Namespace::Default;
        let mut t = RadixTree::new(None, 1).unwrap();
        let mut d = dlpm(5.0);
        d.add(Some(&mut t), int(0), "a", vec![1; 4], (), ns.clone())
            .unwrap();
        d.add(Some(&mut t), int(1), "a", vec![2; 4], (), ns.clone())
            .unwrap();
        d.add(Some(&mut t), int(2), "b", vec![3; 50], (), ns.clone())
            .unwrap();
        // refill (+5 each); a0 admitted (a: 1); a1 admitted (a: -3);
        // b2 does not fit; b keeps q = 5 and no refill is allowed
        let adm = d.schedule(Some(&t), 10, None).unwrap();
        assert_eq!(ids(&adm), vec![int(0), int(1)]);
        d.add(Some(&mut t), int(3), "a", vec![4; 2], (), ns.clone())
            .unwrap();
        // a3 fits but a has no credit and b (credit) does not fit: nothing
        assert!(d.schedule(Some(&t), 10, None).unwrap().is_empty());
        assert_eq!(d.refills(), 1);
        // once b's request fits, it goes first, then a is refilled
        let adm = d.schedule(Some(&t), 60, None).unwrap();
        assert_eq!(ids(&adm), vec![int(2), int(3)]);
        d.check_invariants(Some(&t));
    }

    #[test]
    fn recharge_extend_replaces_the_admission_charge() {
        let ns = Namespace::Default;
        for policy in [
            Policy::Fcfs,
            Policy::Lpm,
            Policy::Vtc {
                w_in: 1.5,
                w_out: 2.0,
            },
            Policy::Dlpm {
                quantum: 100.0,
                w_e: 1.5,
                w_q: 2.0,
            },
        ] {
            let mut t = RadixTree::new(None, 1).unwrap();
            t.insert(&ns, &[1, 2, 3, 4]);
            let mut s = LocalScheduler::new(policy).unwrap();
            s.set_weight("a", 2.0).unwrap();
            s.add(
                Some(&mut t),
                int(0),
                "a",
                vec![1, 2, 3, 4, 5, 6],
                (),
                ns.clone(),
            )
            .unwrap();
            s.add(Some(&mut t), int(1), "a", vec![9; 3], (), ns.clone())
                .unwrap();
            let adm = s.schedule(Some(&t), 100, Some(1)).unwrap();
            assert_eq!(ids(&adm), vec![int(0)]);
            assert_eq!(adm[0].extend_len, 2);
            let (we, _) = policy.service_weights();
            assert_eq!(s.service("a"), we * 2.0);
            let (counter, deficit) = (s.counter("a"), s.deficit("a"));
            // the weight changes after admission: the recharge uses the old one
            s.set_weight("a", 4.0).unwrap();
            assert_eq!(s.charged_extend(&int(0)).unwrap(), 2);
            assert_eq!(s.recharge_extend(&int(0), 5).unwrap(), 2);
            assert_eq!(s.charged_extend(&int(0)).unwrap(), 5);
            assert_eq!(s.service("a"), we * 5.0);
            assert_eq!(s.counter("a"), counter); // VTC charges input_len
            if let Policy::Dlpm { w_e, .. } = policy {
                assert_eq!(s.deficit("a"), deficit - w_e * 3.0 / 2.0);
            } else {
                assert_eq!(s.deficit("a"), deficit);
            }
            // back down, then equal (no-op), then to 0
            assert_eq!(s.recharge_extend(&int(0), 1).unwrap(), 5);
            assert_eq!(s.recharge_extend(&int(0), 1).unwrap(), 1);
            assert_eq!(s.service("a"), we * 1.0);
            assert_eq!(s.recharge_extend(&int(0), 0).unwrap(), 1);
            assert_eq!(s.service("a"), 0.0);
            if let Policy::Dlpm { w_e, .. } = policy {
                assert_eq!(s.deficit("a"), deficit + w_e * 2.0 / 2.0);
            }
            // errors change nothing
            let before = (s.service("a"), s.counter("a"), s.deficit("a"));
            assert!(matches!(
                s.recharge_extend(&int(0), 7),
                Err(Error::Value(_))
            ));
            assert!(matches!(s.recharge_extend(&int(1), 1), Err(Error::Key(_))));
            assert!(matches!(s.recharge_extend(&int(9), 1), Err(Error::Key(_))));
            assert!(matches!(s.charged_extend(&int(1)), Err(Error::Key(_))));
            assert_eq!(before, (s.service("a"), s.counter("a"), s.deficit("a")));
            assert_eq!(s.charged_extend(&int(0)).unwrap(), 0);
            s.recharge_extend(&int(0), 6).unwrap();
            s.charge_output(&int(0), 3).unwrap();
            s.finish(&int(0)).unwrap();
            assert!(matches!(s.recharge_extend(&int(0), 1), Err(Error::Key(_))));
            let (_, wq) = policy.service_weights();
            assert_eq!(s.service("a"), we * 6.0 + wq * 3.0);
            s.check_invariants(Some(&t));
        }
    }

    #[test]
    fn dlpm_recharge_moves_the_positive_waiting_count() {
        // A recharge can give a backlogged client credit back (or take it).
        let ns = Namespace::Default;
        let mut t = RadixTree::new(None, 1).unwrap();
        let mut d = dlpm(4.0);
        d.add(Some(&mut t), int(0), "a", vec![1; 4], (), ns.clone())
            .unwrap();
        d.add(Some(&mut t), int(1), "a", vec![2; 4], (), ns.clone())
            .unwrap();
        d.add(Some(&mut t), int(2), "b", vec![3; 4], (), ns.clone())
            .unwrap();
        let adm = d.schedule(Some(&t), 4, None).unwrap();
        assert_eq!(ids(&adm), vec![int(0)]);
        assert_eq!(d.deficit("a"), 0.0);
        d.check_invariants(Some(&t));
        d.recharge_extend(&int(0), 1).unwrap(); // a: q = 3 > 0
        assert_eq!(d.deficit("a"), 3.0);
        d.check_invariants(Some(&t));
        // a has credit again, so a1 goes before any refill
        let adm = d.schedule(Some(&t), 4, None).unwrap();
        assert_eq!(ids(&adm), vec![int(1)]);
        d.recharge_extend(&int(1), 0).unwrap(); // a: q = 3 again
        d.recharge_extend(&int(0), 4).unwrap(); // a: q = 0
        assert_eq!(d.deficit("a"), 0.0);
        d.check_invariants(Some(&t));
    }
}
