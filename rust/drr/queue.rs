//! The DRR queue: arbitration across the class ring (ALGORITHMS.md
//! section 2), per-class heaps, tickets, limits.
//!
//! DRR decides *which class* dispatches next; each class's own heap (strict
//! priority tier, then FCFS or WSPT, then insertion order) decides *which
//! request* inside it. Costs are immutable snapshots taken at enqueue
//! ([`Snapshot`]); deficits and costs are integers (`u64` costs and quanta,
//! `u128` deficits, so bulk credit can never overflow).
//!
//! One arbitration ([`DrrQueue::pop_with`]) is O(C) in the number of classes
//! whatever the costs and quanta:
//! 1. cursor-retained burst: the class that dispatched last and whose next
//!    head was affordable is served again from its remaining credit;
//! 2. one ring scan from the cursor (empty: reset; blocked: keep credit, earn
//!    none; affordable: dispatch without a quantum; else one quantum, then
//!    dispatch if affordable);
//! 3. if nothing dispatched but a class is dispatchable: the minimum number
//!    of virtual rounds `r` any dispatchable head still needs, `r * quantum`
//!    credited to every dispatchable class, and one more scan (which only
//!    dispatches: the bulk credit already stands for the final round's visit);
//! 4. otherwise nothing, and no credit.
//!
//! Dispatchability is the caller's: a closure on `(class index, head)`,
//! called at most once per class per arbitration (and/or a worker-load
//! snapshot, [`DrrQueue::pop_with_load`]). If it fails, the queue is rolled
//! back to exactly its state before the call.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::config::{ClassConfig, PolicyProfile, QueueOrder};
use super::load::{LoadGate, LoadSnapshot};
use crate::error::{check_non_negative, Error, LimitKind, Result};
use crate::heap::{Handle, IndexedHeap};
use crate::ordf64::OrdF64;

/// Immutable cost snapshot taken when a request is enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub raw_isl_tokens: u64,
    pub cached_tokens: u64,
    /// `raw_isl_tokens - cached_tokens`, exact (used for bucket classification).
    pub uncached_tokens: u64,
    /// `max(1, uncached_tokens)`, what DRR charges and WSPT weighs.
    pub cost: u64,
}

impl Snapshot {
    /// Snapshot of a request with `raw` input tokens of which `cached` hit the cache.
    pub fn new(raw_isl_tokens: u64, cached_tokens: u64) -> Result<Self> {
        if cached_tokens > raw_isl_tokens {
            return Err(Error::value(format!(
                "cached_tokens ({cached_tokens}) must not exceed raw_isl_tokens ({raw_isl_tokens})"
            )));
        }
        let uncached = raw_isl_tokens - cached_tokens;
        Ok(Snapshot {
            raw_isl_tokens,
            cached_tokens,
            uncached_tokens: uncached,
            cost: uncached.max(1),
        })
    }

    /// Snapshot of a request given directly by its cost (no cache hit).
    pub fn from_cost(cost: u64) -> Self {
        Snapshot {
            raw_isl_tokens: cost,
            cached_tokens: 0,
            uncached_tokens: cost,
            cost: cost.max(1),
        }
    }
}

/// Heap key: higher strict-priority tier first, then the policy key
/// (smaller first), then the heap's insertion sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    tier: Reverse<i64>,
    policy: OrdF64,
}

/// A queued request as the core stores it.
#[derive(Debug, Clone)]
pub struct Entry<T> {
    pub item: T,
    pub ticket: u64,
    pub snapshot: Snapshot,
    pub strict_priority: i64,
    pub priority_jump: f64,
    pub arrival: f64,
}

/// Everything a push needs besides the item and the class.
#[derive(Debug, Clone, Copy)]
pub struct PushArgs {
    pub snapshot: Snapshot,
    pub strict_priority: i64,
    pub priority_jump: f64,
    pub arrival: f64,
}

#[derive(Debug, Clone)]
struct Class<T> {
    heap: IndexedHeap<Key, Entry<T>>,
    queued_cost: u128,
    queued_raw_isl_tokens: u128,
    queued_cached_tokens: u128,
    dispatched: u64,
    dispatched_cost: u128,
}

/// The per-class state arbitration touches, kept in one compact array.
#[derive(Debug, Clone, Copy)]
struct Hot {
    /// Earned, unspent credit.
    deficit: u128,
    quantum: u64,
    /// Scheduling cost of the class head; 0 when the class is empty (costs are >= 1).
    head: u64,
}

impl<T> Class<T> {
    fn unqueue(&mut self, s: &Snapshot) {
        self.queued_cost -= s.cost as u128;
        self.queued_raw_isl_tokens -= s.raw_isl_tokens as u128;
        self.queued_cached_tokens -= s.cached_tokens as u128;
    }
}

/// Per-class statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassStats {
    pub name: String,
    pub quantum: u64,
    pub order: QueueOrder,
    pub depth: usize,
    pub deficit: u128,
    pub queued_cost: u128,
    pub queued_raw_isl_tokens: u128,
    pub queued_cached_tokens: u128,
    pub dispatched: u64,
    pub dispatched_cost: u128,
}

/// The DRR queue over the fixed ring of a resolved [`PolicyProfile`].
#[derive(Debug, Clone)]
pub struct DrrQueue<T> {
    profile: PolicyProfile,
    classes: Vec<Class<T>>,
    /// Eligible workers the `*_per_worker` limits scale with.
    num_workers: u64,
    gate: LoadGate,
    hot: Vec<Hot>,
    by_name: HashMap<String, usize>,
    cursor: usize,
    /// The cursor class dispatched last and its next head was affordable.
    retained: bool,
    tickets: HashMap<u64, (usize, Handle)>,
    next_ticket: u64,
    len: usize,
    // Per-pop scratch: predicate cache stamped with `epoch`, and the log of
    // empty-class resets (for rollback when the predicate fails).
    epoch: u64,
    mark: Vec<u64>,
    undo: Vec<(usize, u128)>,
}

impl<T> DrrQueue<T> {
    /// A queue over a resolved profile (ring order = class order), with
    /// `num_workers` eligible workers for the per-worker limits.
    pub fn new(profile: PolicyProfile, num_workers: u64) -> Self {
        let c = profile.classes.len();
        let hot = profile
            .classes
            .iter()
            .map(|s| Hot {
                deficit: 0,
                quantum: s.quantum,
                head: 0,
            })
            .collect();
        let by_name = profile
            .classes
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        let classes = (0..c)
            .map(|_| Class {
                heap: IndexedHeap::new(),
                queued_cost: 0,
                queued_raw_isl_tokens: 0,
                queued_cached_tokens: 0,
                dispatched: 0,
                dispatched_cost: 0,
            })
            .collect();
        let gate = LoadGate::new(&profile);
        DrrQueue {
            profile,
            hot,
            classes,
            num_workers,
            gate,
            by_name,
            cursor: 0,
            retained: false,
            tickets: HashMap::new(),
            next_ticket: 0,
            len: 0,
            epoch: 0,
            mark: vec![0; c],
            undo: Vec::with_capacity(c),
        }
    }

    /// A queue over explicit classes in ring order (one worker), validated
    /// like a fairq-schema document: non-empty unique names, quantum > 0.
    /// No classes: the synthetic `default` class.
    pub fn from_classes(classes: Vec<ClassConfig>) -> Result<Self> {
        Ok(DrrQueue::new(PolicyProfile::from_classes(classes)?, 1))
    }

    /// The resolved profile (classes, buckets, families).
    pub fn profile(&self) -> &PolicyProfile {
        &self.profile
    }

    pub fn num_workers(&self) -> u64 {
        self.num_workers
    }

    /// Change the number of eligible workers the per-worker limits scale
    /// with. Queued requests stay; a lower limit only refuses new pushes.
    pub fn set_num_workers(&mut self, n: u64) {
        self.num_workers = n;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }

    pub fn spec(&self, idx: usize) -> &ClassConfig {
        &self.profile.classes[idx]
    }

    /// Index of a class by name (`Error::Key` naming it if unknown).
    pub fn class_index(&self, name: &str) -> Result<usize> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::key(format!("class_name {name:?} is not a configured class")))
    }

    /// Class index the next arbitration starts from.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// A state restore: class `idx`'s credit and dispatch counters.
    pub(super) fn restore_class(
        &mut self,
        idx: usize,
        deficit: u128,
        dispatched: u64,
        dispatched_cost: u128,
    ) {
        self.hot[idx].deficit = deficit;
        self.classes[idx].dispatched = dispatched;
        self.classes[idx].dispatched_cost = dispatched_cost;
    }

    /// A state restore: the cursor and whether it is finishing a burst.
    pub(super) fn restore_cursor(&mut self, cursor: usize, retained: bool) {
        self.cursor = cursor;
        self.retained = retained;
    }

    /// Whether the cursor stays on a class finishing its burst (step 1).
    pub fn cursor_retained(&self) -> bool {
        self.retained
    }

    pub fn deficit(&self, idx: usize) -> u128 {
        self.hot[idx].deficit
    }

    pub fn depth(&self, idx: usize) -> usize {
        self.classes[idx].heap.len()
    }

    /// The head of one class (what arbitration would look at), if any.
    pub fn head(&self, idx: usize) -> Option<&Entry<T>> {
        self.classes[idx].heap.peek().map(|(_, _, e)| e)
    }

    pub fn stats(&self, idx: usize) -> ClassStats {
        let c = &self.classes[idx];
        let spec = &self.profile.classes[idx];
        ClassStats {
            name: spec.name.clone(),
            quantum: spec.quantum,
            order: spec.order,
            depth: c.heap.len(),
            deficit: self.hot[idx].deficit,
            queued_cost: c.queued_cost,
            queued_raw_isl_tokens: c.queued_raw_isl_tokens,
            queued_cached_tokens: c.queued_cached_tokens,
            dispatched: c.dispatched,
            dispatched_cost: c.dispatched_cost,
        }
    }

    /// Enqueue `item` into class `idx`. Validates everything (class index,
    /// `priority_jump`, `arrival`, limits) before mutating; returns a ticket
    /// for [`remove`](Self::remove).
    pub fn push(&mut self, idx: usize, item: T, args: PushArgs) -> Result<u64> {
        if idx >= self.classes.len() {
            return Err(Error::index(format!(
                "class index {idx} out of range (0..{})",
                self.classes.len()
            )));
        }
        check_non_negative("priority_jump", args.priority_jump)?;
        if !args.arrival.is_finite() {
            return Err(Error::value(format!(
                "arrival must be a finite number, got {}",
                args.arrival
            )));
        }
        self.check_limits(idx, &args.snapshot)?;
        let spec = &self.profile.classes[idx];
        let policy = match spec.order {
            QueueOrder::Fcfs => args.arrival - args.priority_jump,
            QueueOrder::Wspt => -((1.0 + args.priority_jump) / args.snapshot.cost as f64),
        };
        if !policy.is_finite() {
            return Err(Error::value(format!(
                "arrival - priority_jump must be finite, got arrival={} priority_jump={}",
                args.arrival, args.priority_jump
            )));
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let c = &mut self.classes[idx];
        let key = Key {
            tier: Reverse(args.strict_priority),
            policy: OrdF64::new(policy),
        };
        let h = c.heap.push(
            key,
            Entry {
                item,
                ticket,
                snapshot: args.snapshot,
                strict_priority: args.strict_priority,
                priority_jump: args.priority_jump,
                arrival: args.arrival,
            },
        );
        c.queued_cost += args.snapshot.cost as u128;
        c.queued_raw_isl_tokens += args.snapshot.raw_isl_tokens as u128;
        c.queued_cached_tokens += args.snapshot.cached_tokens as u128;
        self.tickets.insert(ticket, (idx, h));
        self.len += 1;
        self.refresh_head(idx);
        Ok(ticket)
    }

    /// Classify a request by `policy_family` and its exact uncached tokens
    /// (see [`PolicyProfile::classify`]) and enqueue it there. Returns
    /// `(class index, ticket)`; an error enqueues nothing.
    pub fn push_request(
        &mut self,
        policy_family: Option<&str>,
        item: T,
        args: PushArgs,
    ) -> Result<(usize, u64)> {
        let idx = self
            .profile
            .classify(policy_family, args.snapshot.uncached_tokens)?;
        Ok((idx, self.push(idx, item, args)?))
    }

    /// Refuse a push into class `idx` that a limit forbids (nothing changes).
    fn check_limits(&self, idx: usize, snap: &Snapshot) -> Result<()> {
        let c = &self.classes[idx];
        let spec = &self.profile.classes[idx];
        let l = &spec.limits;
        let full = |limit, current: u128, max: u128| Error::QueueFull {
            class_name: spec.name.clone(),
            limit,
            current: u64::try_from(current).unwrap_or(u64::MAX),
            max: u64::try_from(max).unwrap_or(u64::MAX),
        };
        // Dynamo's rule: per-worker limit x eligible workers, compared with
        // the usage before this push (the push that crosses it is accepted).
        for (kind, current, per_worker) in [
            (
                LimitKind::RequestsPerWorker,
                c.heap.len() as u128,
                l.request_queue_limit_per_worker,
            ),
            (
                LimitKind::RawIslTokensPerWorker,
                c.queued_raw_isl_tokens,
                l.raw_isl_token_queue_limit_per_worker,
            ),
            (
                LimitKind::CachedTokensPerWorker,
                c.queued_cached_tokens,
                l.cached_token_queue_limit_per_worker,
            ),
        ] {
            if let Some(p) = per_worker {
                let limit = p as u128 * self.num_workers as u128;
                if current >= limit {
                    return Err(full(kind, current, limit));
                }
            }
        }
        // fairq's absolute limits: refuse what would take usage past them.
        if let Some(max) = l.max_queued_requests {
            let would = c.heap.len() as u128 + 1;
            if would > max as u128 {
                return Err(full(LimitKind::Requests, would, max as u128));
            }
        }
        if let Some(max) = l.max_queued_tokens {
            let would = c.queued_cost + snap.cost as u128;
            if would > max as u128 {
                return Err(full(LimitKind::Tokens, would, max as u128));
            }
        }
        Ok(())
    }

    /// Class index of a queued ticket.
    pub fn ticket_class(&self, ticket: u64) -> Option<usize> {
        self.tickets.get(&ticket).map(|&(i, _)| i)
    }

    /// Remove a queued request by ticket. A class emptied this way loses its
    /// credit (an empty class holds none), as if its empty visit happened now.
    pub fn remove(&mut self, ticket: u64) -> Result<(usize, Entry<T>)> {
        let (idx, h) = self
            .tickets
            .remove(&ticket)
            .ok_or_else(|| Error::key(format!("ticket {ticket} is not queued")))?;
        let c = &mut self.classes[idx];
        let (_, e) = c.heap.remove(h).expect("ticket map and heap agree");
        c.unqueue(&e.snapshot);
        let emptied = c.heap.is_empty();
        self.refresh_head(idx);
        if emptied {
            self.hot[idx].deficit = 0;
            if self.cursor == idx {
                self.retained = false;
            }
        }
        self.len -= 1;
        Ok((idx, e))
    }

    /// Arbitrate with a set of blocked classes (`blocked[i]` true: class `i`
    /// cannot dispatch now). Missing entries count as not blocked.
    pub fn pop(&mut self, blocked: &[bool]) -> Option<(usize, Entry<T>)> {
        let r: std::result::Result<_, std::convert::Infallible> =
            self.arbitrate(|i, _| Ok(!blocked.get(i).copied().unwrap_or(false)));
        match r {
            Ok(v) => v,
            Err(never) => match never {},
        }
    }

    /// One arbitration. `dispatchable(class, head)` says whether the class
    /// head can dispatch now; it is called at most once per class per call,
    /// only for non-empty classes. If it returns `Err`, the queue is restored
    /// to its exact state before the call and the error is returned.
    pub fn pop_with<E, F>(
        &mut self,
        mut dispatchable: F,
    ) -> std::result::Result<Option<(usize, Entry<T>)>, E>
    where
        F: FnMut(usize, &Entry<T>) -> std::result::Result<bool, E>,
    {
        self.arbitrate(|i, classes| {
            let (_, _, head) = classes[i]
                .heap
                .peek()
                .expect("asked only for non-empty classes");
            dispatchable(i, head)
        })
    }

    /// One arbitration with a worker-load snapshot: a class is blocked when
    /// `blocked[i]`, when its worker pool is busy by its thresholds
    /// ([`BusyRule`](super::config::BusyRule)), or when `dispatchable(i,
    /// head)` says so (asked last, at most once per class).
    ///
    /// Cost: O(C + R * W) for C classes, W workers and R distinct busy rules
    /// among the classes (fixed by the profile; equal rules share one pass
    /// over the workers, each pass stops as soon as the answer is known), so
    /// O(C + W) for a given profile. An invalid snapshot is rejected before
    /// anything changes.
    pub fn pop_with_load<E, F>(
        &mut self,
        load: &LoadSnapshot<'_>,
        blocked: &[bool],
        mut dispatchable: F,
    ) -> std::result::Result<Option<(usize, Entry<T>)>, E>
    where
        F: FnMut(usize, &Entry<T>) -> std::result::Result<bool, E>,
        E: From<Error>,
    {
        self.gate.check(load, &self.profile)?;
        let mut gate = std::mem::take(&mut self.gate);
        gate.start();
        let r = self.arbitrate(|i, classes| {
            if blocked.get(i).copied().unwrap_or(false) || gate.blocked(i, load) {
                return Ok(false);
            }
            let (_, _, head) = classes[i]
                .heap
                .peek()
                .expect("asked only for non-empty classes");
            dispatchable(i, head)
        });
        self.gate = gate;
        r
    }

    /// The arbitration itself. `ok(i, classes)` is the memoised
    /// dispatchability test; the scan reads and writes only the compact
    /// `hot` array (deficit, quantum, head cost), so a pass over the ring is
    /// a linear walk over contiguous memory.
    fn arbitrate<E, F>(&mut self, mut ok_fn: F) -> std::result::Result<Option<(usize, Entry<T>)>, E>
    where
        F: FnMut(usize, &[Class<T>]) -> std::result::Result<bool, E>,
    {
        let n = self.hot.len();
        self.epoch += 1;
        let epoch = self.epoch;

        // `mark[i] == 2 * epoch + ok`: class i's dispatchability, asked once
        // this call (epochs start at 1, so a stale or zero mark never matches).
        let seen = 2 * epoch;

        // Step 1: the cursor class continues its burst from retained credit.
        if self.retained {
            let i = self.cursor;
            let h = &self.hot[i];
            if h.head != 0 && h.deficit >= h.head as u128 {
                let ok = ok_fn(i, &self.classes)?;
                self.mark[i] = seen | ok as u64;
                if ok {
                    return Ok(Some(self.dispatch(i)));
                }
            }
        }

        // Step 2: one ring scan from the cursor. It changes deficits in two
        // ways: +quantum to each visited dispatchable class (undone by
        // subtracting it again) and a reset of empty classes (logged).
        let mut undo = std::mem::take(&mut self.undo);
        undo.clear();
        let mut found = None;
        let mut any_ok = false;
        let cursor = self.cursor;
        for i in (cursor..n).chain(0..cursor) {
            let h = &mut self.hot[i];
            if h.head == 0 {
                if h.deficit != 0 {
                    undo.push((i, h.deficit));
                    h.deficit = 0;
                }
                continue;
            }
            let m = self.mark[i];
            let ok = if m & !1 == seen {
                m & 1 == 1
            } else {
                match ok_fn(i, &self.classes) {
                    Ok(v) => {
                        self.mark[i] = seen | v as u64;
                        v
                    }
                    Err(e) => {
                        // Roll back: every class visited before `i` that is
                        // non-empty and dispatchable received one quantum.
                        for k in (cursor..n).chain(0..cursor).take_while(|&k| k != i) {
                            let h = &mut self.hot[k];
                            if h.head != 0 && self.mark[k] == seen | 1 {
                                h.deficit -= h.quantum as u128;
                            }
                        }
                        for &(k, d) in undo.iter() {
                            self.hot[k].deficit = d;
                        }
                        self.undo = undo;
                        return Err(e);
                    }
                }
            };
            if !ok {
                continue;
            }
            any_ok = true;
            let cost = h.head as u128;
            if h.deficit >= cost {
                found = Some(i);
                break;
            }
            h.deficit += h.quantum as u128;
            if h.deficit >= cost {
                found = Some(i);
                break;
            }
        }
        self.undo = undo;
        if let Some(i) = found {
            return Ok(Some(self.dispatch(i)));
        }
        // Step 4: nothing dispatchable, no credit.
        if !any_ok {
            return Ok(None);
        }

        // Step 3: bulk credit by the minimum number of virtual rounds. The
        // scan visited every class, so each non-empty one is marked and no
        // further predicate calls happen (nothing can fail from here).
        // `need` is in 1..=head (the scan did not dispatch this class), so it
        // fits in u64; a division happens only when it can lower `r`.
        let live = seen | 1;
        let mut r = u64::MAX;
        for (h, &m) in self.hot.iter().zip(&self.mark) {
            if h.head != 0 && m == live {
                let need = (h.head as u128 - h.deficit) as u64;
                if (need as u128) <= (r as u128 - 1) * h.quantum as u128 {
                    r = need.div_ceil(h.quantum);
                }
            }
        }
        let r = r as u128;
        // Credit every dispatchable class; the first affordable one from the
        // cursor dispatches (the bulk credit already includes its visit).
        let mut first = None;
        for i in (cursor..n).chain(0..cursor) {
            let h = &mut self.hot[i];
            if h.head != 0 && self.mark[i] == live {
                h.deficit += r * h.quantum as u128;
                if first.is_none() && h.deficit >= h.head as u128 {
                    first = Some(i);
                }
            }
        }
        let i = first.expect("bulk credit always makes some dispatchable head affordable");
        Ok(Some(self.dispatch(i)))
    }

    fn refresh_head(&mut self, i: usize) {
        self.hot[i].head = self.classes[i]
            .heap
            .peek()
            .map_or(0, |(_, _, e)| e.snapshot.cost);
    }

    /// Pop the head of class `i`, charge it, and move the cursor.
    fn dispatch(&mut self, i: usize) -> (usize, Entry<T>) {
        let n = self.hot.len();
        let c = &mut self.classes[i];
        let (_, e) = c.heap.pop().expect("dispatch from a non-empty class");
        let cost = e.snapshot.cost as u128;
        c.unqueue(&e.snapshot);
        c.dispatched += 1;
        c.dispatched_cost += cost;
        self.tickets.remove(&e.ticket);
        self.len -= 1;
        self.refresh_head(i);
        let h = &mut self.hot[i];
        h.deficit -= cost;
        if h.head == 0 {
            h.deficit = 0;
            self.cursor = (i + 1) % n;
            self.retained = false;
        } else if h.deficit >= h.head as u128 {
            self.cursor = i;
            self.retained = true;
        } else {
            self.cursor = (i + 1) % n;
            self.retained = false;
        }
        (i, e)
    }
}
