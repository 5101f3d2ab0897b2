//! Weighted Fair Queuing on per-flow virtual finish times (ALGORITHMS.md §3).
//!
//! Every request belongs to a *flow* (a client, or the request alone) and has
//! a weight `> 0` and a size `tokens >= 0` (prompt + max new tokens). On add:
//!
//! ```text
//! S = max(V, F_last[flow]);  F = S + tokens / weight;  F_last[flow] = F
//! ```
//!
//! Pop takes the smallest `(F, S, arrival, seq)` and advances the global
//! virtual time `V`, which never decreases, according to the queue's
//! [`VirtualClock`]:
//!
//! - [`VirtualClock::Start`] (default, exactly ALGORITHMS.md §3):
//!   `V = max(V, S)` of the popped request;
//! - [`VirtualClock::Finish`] (self-clocked fair queueing, Golestani 1994):
//!   `V = max(V, F)` of the popped request.
//!
//! Under `Start`, requests that are their own flow all start at `V`, and `V`
//! only reaches start tags, so among them the order is shortest
//! (`tokens / weight`) first and a long request can wait forever behind a
//! stream of short ones (V can stay at 0 forever). Under `Finish`, `V`
//! reaches the finish tag of each request served, so requests added later
//! start at or beyond those tags: a request added once `V` has reached a
//! queued request's `F` no longer overtakes it, and `V` keeps moving while
//! requests of positive size are served, so waiting is bounded. Example:
//! with one request added before each pop, a request queued alone with
//! `F - V = T` is served within `ceil(T / d) + 1` pops, `d` being the
//! smallest `tokens / weight` of the others. The bound needs `d > 0`:
//! zero-token requests (`F = S = V`) do not move `V` under either clock.
//!
//! Everything else is the same under both clocks. Two continuously backlogged
//! flows are served in the ratio of their weights because each flow's finish
//! tags are chained through `F_last`: a flow that queues many requests pushes
//! its own later requests further into virtual time instead of starting every
//! one of them at `V` (the seed's per-request formula, which is the special
//! case of one request per flow).
//!
//! All times are `f64` validated finite at every entry point, so the heap key
//! never holds NaN and `total_cmp` gives a real total order. Preemption
//! ([`Wfq::readd`]) restores a popped request with its original tags and
//! sequence number; partial prefill ([`Wfq::update_remaining`]) recomputes
//! `F = S + remaining / weight` and re-keys in O(log n). Removing a request
//! never rewinds `F_last` (a client cannot buy an earlier slot by cancelling).
//!
//! Flow state is dropped when a flow has nothing queued and `F_last <= V`
//! (then `max(V, F_last) = V`, indistinguishable from an unknown flow). Idle
//! flows still ahead (`F_last > V`) are kept up to [`MAX_IDLE_FLOWS_AHEAD`],
//! the least ahead dropped first beyond it (a returning one is forgiven
//! `F_last - V`): with `virtual_clock="start"` and a flow per request, `V`
//! may never pass them. The sweep is amortized O(1): it runs when the flow
//! table doubles. Dropped flow
//! keys are reported through [`Wfq::drain_dropped_flows`] so a binding layer
//! can forget its own key interning.
//!
//! [`state`] saves and restores the virtual time, the flows' `F_last` and
//! the waiting requests' tags (`state_dict` / `load_state_dict`).

use std::hash::Hash;

use crate::error::{check_non_negative, check_positive, Error, Result};
mod items;
pub mod state;

pub use items::ItemQueue;

use crate::heap::{Handle, IndexedHeap};
use crate::ordf64::OrdF64;

pub use crate::hash::{FastHasher, FastMap};

/// Heap key: virtual finish, then virtual start, then arrival (the heap adds
/// the insertion `seq` as the final tie-break). Never NaN by construction;
/// `-0.0` is normalized on the way in (`check_finite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub finish: OrdF64,
    pub start: OrdF64,
    pub arrival: OrdF64,
}

impl Key {
    pub fn new(finish: f64, start: f64, arrival: f64) -> Self {
        Key {
            finish: OrdF64(finish),
            start: OrdF64(start),
            arrival: OrdF64(arrival),
        }
    }
}

/// Everything the queue knows about one request: what [`Wfq::pop`] hands
/// back and what [`Wfq::readd`] takes to restore it after preemption.
#[derive(Debug, Clone, PartialEq)]
pub struct Tags<K> {
    /// The flow, or `None` for a request that is its own flow.
    pub flow: Option<K>,
    pub weight: f64,
    /// Virtual start `S`.
    pub start: f64,
    /// Virtual finish `F`.
    pub finish: f64,
    pub arrival: f64,
    /// Tokens still needed (the size `F` was last computed from).
    pub remaining: f64,
    /// Insertion sequence number (final tie-break).
    pub seq: u64,
}

impl<K> Tags<K> {
    /// Where these tags put a request in pop order: `(key, seq)`.
    pub fn queue_order(&self) -> (Key, u64) {
        (Key::new(self.finish, self.start, self.arrival), self.seq)
    }
}

#[derive(Debug, Clone)]
struct Entry<K, V> {
    flow: Option<K>,
    weight: f64,
    remaining: f64,
    value: V,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Flow {
    last_finish: f64,
    queued: usize,
}

const GC_MIN: usize = 1024;

/// Idle flows still ahead of the virtual time (`F_last > V`) kept at most;
/// beyond it the ones least ahead are dropped first (see `maybe_gc`).
pub const MAX_IDLE_FLOWS_AHEAD: usize = 65_536;

/// Validate a timestamp-like value (finite; any sign), naming `field`.
fn check_finite(field: &str, v: f64) -> Result<f64> {
    if v.is_finite() {
        Ok(v + 0.0) // normalizes -0.0 so total_cmp treats it like 0.0
    } else {
        Err(Error::value(format!(
            "{field} must be a finite number, got {v}"
        )))
    }
}

fn finish_of(start: f64, tokens: f64, weight: f64) -> Result<f64> {
    let f = start + tokens / weight;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(Error::value(format!(
            "virtual finish time overflows: start {start} + tokens {tokens} / weight {weight} is not finite"
        )))
    }
}

/// How [`Wfq::pop`] advances the virtual time `V`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VirtualClock {
    /// `V = max(V, S)` of the popped request (ALGORITHMS.md §3).
    #[default]
    Start,
    /// `V = max(V, F)` of the popped request (self-clocked fair queueing):
    /// bounded waiting even when every request is its own flow.
    Finish,
}

impl VirtualClock {
    /// Parse `"start"` or `"finish"`; anything else is an [`Error::Value`]
    /// naming `virtual_clock` and the value.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "start" => Ok(VirtualClock::Start),
            "finish" => Ok(VirtualClock::Finish),
            _ => Err(Error::value(format!(
                "virtual_clock must be \"start\" or \"finish\", got {s:?}"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VirtualClock::Start => "start",
            VirtualClock::Finish => "finish",
        }
    }
}

/// The WFQ queue: flows of type `K`, payloads of type `V`.
#[derive(Debug, Clone)]
pub struct Wfq<K, V> {
    heap: IndexedHeap<Key, Entry<K, V>>,
    flows: FastMap<K, Flow>,
    vtime: f64,
    clock: VirtualClock,
    gc_threshold: usize,
    dropped: Vec<K>,
    /// Tags of a loaded state's waiting requests, re-added in order by the
    /// next adds (see [`state`]).
    pending: std::collections::VecDeque<state::Pending<K>>,
}

impl<K: Hash + Eq + Clone, V> Default for Wfq<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone, V> Wfq<K, V> {
    /// A queue with the default [`VirtualClock::Start`].
    pub fn new() -> Self {
        Self::with_clock(VirtualClock::Start)
    }

    /// A queue whose pops advance `V` according to `clock`.
    pub fn with_clock(clock: VirtualClock) -> Self {
        Wfq {
            heap: IndexedHeap::new(),
            flows: FastMap::default(),
            vtime: 0.0,
            clock,
            gc_threshold: GC_MIN,
            dropped: Vec::new(),
            pending: std::collections::VecDeque::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// How pops advance `V`.
    pub fn virtual_clock(&self) -> VirtualClock {
        self.clock
    }

    /// The global virtual time `V` (never decreases).
    pub fn virtual_time(&self) -> f64 {
        self.vtime
    }

    /// Number of flows with state (queued requests or `F_last > V`).
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// `F_last` of a flow, if the queue still holds state for it.
    pub fn flow_last_finish(&self, flow: &K) -> Option<f64> {
        self.flows.get(flow).map(|f| f.last_finish)
    }

    /// How far `flow` is over its fair share: `F_last - V`, the virtual
    /// time its queued work reaches past the global clock (0 for a flow the
    /// queue holds no state for). WFQ's `share_lead` (see
    /// `LocalScheduler::share_lead`).
    pub fn flow_lead(&self, flow: &K) -> f64 {
        self.flow_last_finish(flow)
            .map_or(0.0, |f| (f - self.vtime).max(0.0))
    }

    /// Give a flow back `tokens` it was charged for and did not use (a
    /// request's tags were computed from an estimate, e.g. prompt + max
    /// output tokens, and it used fewer): `F_last -= tokens / weight`, never
    /// below `V` (a refund is not credit against the other flows). Tags of
    /// requests already queued stay as they are; the flow's next request
    /// starts earlier. Returns the virtual time given back (0 for a flow the
    /// queue holds no state for: its next request starts at `V` anyway).
    ///
    /// Errors (nothing changes): `tokens` negative or not finite, `weight`
    /// not finite and > 0 -> `Value`.
    pub fn refund_flow(&mut self, flow: &K, tokens: f64, weight: f64) -> Result<f64> {
        check_non_negative("tokens", tokens)?;
        check_positive("weight", weight)?;
        let v = self.vtime;
        Ok(match self.flows.get_mut(flow) {
            Some(f) => {
                let new = (f.last_finish - tokens / weight).max(v);
                let back = (f.last_finish - new).max(0.0);
                f.last_finish = new.min(f.last_finish);
                back
            }
            None => 0.0,
        })
    }

    /// Number of queued requests of a flow.
    pub fn flow_queued(&self, flow: &K) -> usize {
        self.flows.get(flow).map_or(0, |f| f.queued)
    }

    /// Validate an add without changing anything; returns `(S, F)`.
    pub fn preview(
        &self,
        flow: Option<&K>,
        tokens: f64,
        weight: f64,
        arrival: f64,
    ) -> Result<(f64, f64)> {
        check_positive("weight", weight)?;
        check_non_negative("tokens", tokens)?;
        check_finite("arrival", arrival)?;
        let last = flow
            .and_then(|k| self.flows.get(k))
            .map_or(self.vtime, |f| f.last_finish);
        let start = self.vtime.max(last);
        Ok((start, finish_of(start, tokens, weight)?))
    }

    /// Validate a batch of adds, made in order, without changing anything:
    /// `Ok` iff adding each in turn would succeed (each request's start
    /// chains on the finish of the previous one of its flow in the batch).
    pub fn preview_batch<'a>(
        &self,
        batch: impl IntoIterator<Item = (Option<&'a K>, f64, f64, f64)>,
    ) -> Result<()>
    where
        K: 'a,
    {
        let mut last: FastMap<&K, f64> = FastMap::default();
        for (flow, tokens, weight, arrival) in batch {
            check_positive("weight", weight)?;
            check_non_negative("tokens", tokens)?;
            check_finite("arrival", arrival)?;
            let prev = flow.and_then(|k| {
                last.get(k)
                    .copied()
                    .or_else(|| self.flows.get(k).map(|f| f.last_finish))
            });
            let start = prev.map_or(self.vtime, |p| self.vtime.max(p));
            let finish = finish_of(start, tokens, weight)?;
            if let Some(k) = flow {
                last.insert(k, finish);
            }
        }
        Ok(())
    }

    /// Add a request of `tokens` tokens with `weight` to `flow`.
    pub fn add(
        &mut self,
        value: V,
        flow: Option<K>,
        tokens: f64,
        weight: f64,
        arrival: f64,
    ) -> Result<Handle> {
        let (start, finish) = self.preview(flow.as_ref(), tokens, weight, arrival)?;
        if let Some(tags) = self.take_pending(&flow, tokens, weight, arrival)? {
            // A waiting request of a loaded state: its saved tags.
            return self.push_tagged(value, tags, false);
        }
        let arrival = arrival + 0.0;
        if let Some(k) = &flow {
            let f = self.flows.entry(k.clone()).or_insert(Flow {
                last_finish: start,
                queued: 0,
            });
            f.last_finish = finish;
            f.queued += 1;
        }
        let h = self.heap.push(
            Key::new(finish, start, arrival),
            Entry {
                flow,
                weight,
                remaining: tokens,
                value,
            },
        );
        self.maybe_gc();
        Ok(h)
    }

    /// Put back a request with the tags it had when popped (preemption):
    /// same `S`, `F`, arrival and `seq`, so it returns to its old place.
    /// `F_last` of its flow only grows (`max(F_last, F)`).
    pub fn readd(&mut self, value: V, tags: Tags<K>) -> Result<Handle> {
        self.push_tagged(value, tags, true)
    }

    /// Push a request with given tags; `raise_last`: `F_last` of its flow
    /// becomes `max(F_last, F)` (a preempted request), else it is left as
    /// is (a loaded state's waiting request: `F_last` was saved exactly).
    fn push_tagged(&mut self, value: V, tags: Tags<K>, raise_last: bool) -> Result<Handle> {
        check_positive("weight", tags.weight)?;
        check_non_negative("remaining", tags.remaining)?;
        let start = check_finite("start", tags.start)?;
        let finish = check_finite("finish", tags.finish)?;
        let arrival = check_finite("arrival", tags.arrival)?;
        if finish < start {
            return Err(Error::value(format!(
                "finish must be >= start, got start {start} and finish {finish}"
            )));
        }
        if let Some(k) = &tags.flow {
            let vtime = self.vtime;
            let f = self.flows.entry(k.clone()).or_insert(Flow {
                last_finish: vtime,
                queued: 0,
            });
            if raise_last {
                f.last_finish = f.last_finish.max(finish);
            }
            f.queued += 1;
        }
        Ok(self.heap.push_with_seq(
            Key::new(finish, start, arrival),
            tags.seq,
            Entry {
                flow: tags.flow,
                weight: tags.weight,
                remaining: tags.remaining,
                value,
            },
        ))
    }

    fn tags_of(key: &Key, seq: u64, e: &Entry<K, V>) -> Tags<K> {
        Tags {
            flow: e.flow.clone(),
            weight: e.weight,
            start: key.start.0,
            finish: key.finish.0,
            arrival: key.arrival.0,
            remaining: e.remaining,
            seq,
        }
    }

    /// The request with the smallest `(F, S, arrival, seq)`.
    pub fn peek(&self) -> Option<(Handle, &V, Tags<K>)> {
        let (h, k, e) = self.heap.peek()?;
        let seq = self.heap.seq_of(h).expect("live handle");
        Some((h, &e.value, Self::tags_of(k, seq, e)))
    }

    pub fn peek_handle(&self) -> Option<Handle> {
        self.heap.peek_handle()
    }

    pub fn get(&self, h: Handle) -> Option<(&V, Tags<K>)> {
        let (k, e) = self.heap.get(h)?;
        let seq = self.heap.seq_of(h)?;
        Some((&e.value, Self::tags_of(k, seq, e)))
    }

    pub fn contains(&self, h: Handle) -> bool {
        self.heap.contains(h)
    }

    /// Pop the next request; advances `V` to `max(V, S)` (clock `Start`) or
    /// `max(V, F)` (clock `Finish`).
    pub fn pop(&mut self) -> Option<(V, Tags<K>)> {
        let h = self.heap.peek_handle()?;
        let out = self.take(h)?;
        let reached = match self.clock {
            VirtualClock::Start => out.1.start,
            VirtualClock::Finish => out.1.finish,
        };
        self.vtime = self.vtime.max(reached);
        self.maybe_gc();
        Some(out)
    }

    /// Remove a queued request (cancel). `V` and `F_last` are unchanged.
    pub fn remove(&mut self, h: Handle) -> Option<(V, Tags<K>)> {
        let out = self.take(h)?;
        self.maybe_gc();
        Some(out)
    }

    fn take(&mut self, h: Handle) -> Option<(V, Tags<K>)> {
        let seq = self.heap.seq_of(h)?;
        let (key, e) = self.heap.remove(h)?;
        if let Some(k) = &e.flow {
            if let Some(f) = self.flows.get_mut(k) {
                f.queued -= 1;
            }
        }
        let tags = Self::tags_of(&key, seq, &e);
        Some((e.value, tags))
    }

    /// Partial prefill: `remaining` tokens are still needed, so
    /// `F = S + remaining / weight`; the heap order is restored in O(log n).
    /// Returns the new `F`. `F_last` of the flow is unchanged.
    pub fn update_remaining(&mut self, h: Handle, remaining: f64) -> Result<f64> {
        check_non_negative("remaining", remaining)?;
        let (key, e) = self
            .heap
            .get(h)
            .ok_or_else(|| Error::key("request is not queued"))?;
        let finish = finish_of(key.start.0, remaining, e.weight)?;
        let new_key = Key {
            finish: OrdF64(finish),
            ..*key
        };
        self.heap.get_mut(h).expect("live handle").remaining = remaining;
        self.heap.rekey(h, new_key);
        Ok(finish)
    }

    /// Queued requests in pop order, without mutating the queue.
    pub fn iter_sorted(&self) -> impl Iterator<Item = (Handle, &V)> + '_ {
        self.heap.iter_sorted().map(|(h, _, e)| (h, &e.value))
    }

    /// Queued requests in arbitrary order.
    pub fn iter_unordered(&self) -> impl Iterator<Item = (Handle, &V)> + '_ {
        self.heap.iter_unordered().map(|(h, _, e)| (h, &e.value))
    }

    /// Flow keys whose state was dropped since the last call.
    pub fn drain_dropped_flows(&mut self) -> std::vec::Drain<'_, K> {
        self.dropped.drain(..)
    }

    fn maybe_gc(&mut self) {
        if self.flows.len() <= self.gc_threshold {
            return;
        }
        let v = self.vtime;
        let dropped = &mut self.dropped;
        self.flows.retain(|k, f| {
            let keep = f.queued > 0 || f.last_finish > v;
            if !keep {
                dropped.push(k.clone());
            }
            keep
        });
        // Idle flows ahead of V carry a claim (their next start is F_last,
        // not V). With `virtual_clock="start"` and one flow per request, V
        // need not pass them ever, so they are capped: the ones least ahead
        // are dropped first, each forgiven `F_last - V` should it return.
        let mut ahead: Vec<(OrdF64, K)> = self
            .flows
            .iter()
            .filter(|(_, f)| f.queued == 0)
            .map(|(k, f)| (OrdF64::new(f.last_finish), k.clone()))
            .collect();
        if ahead.len() > MAX_IDLE_FLOWS_AHEAD {
            let excess = ahead.len() - MAX_IDLE_FLOWS_AHEAD;
            ahead.select_nth_unstable_by(excess - 1, |a, b| a.0.cmp(&b.0));
            for (_, k) in ahead.drain(..excess) {
                self.flows.remove(&k);
                self.dropped.push(k);
            }
        }
        self.gc_threshold = GC_MIN.max(2 * self.flows.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testutil::lcg;

    fn drain(q: &mut Wfq<u32, u32>) -> Vec<u32> {
        std::iter::from_fn(|| q.pop().map(|(v, _)| v)).collect()
    }

    #[test]
    fn worked_example_per_flow_chaining() {
        // Flow A (w=1) queues three 10-token requests, flow B (w=1) one.
        let mut q: Wfq<u32, &str> = Wfq::new();
        q.add("a1", Some(1), 10.0, 1.0, 0.0).unwrap();
        q.add("a2", Some(1), 10.0, 1.0, 0.0).unwrap();
        q.add("a3", Some(1), 10.0, 1.0, 0.0).unwrap();
        q.add("b1", Some(2), 10.0, 1.0, 1.0).unwrap();
        // a1: S=0 F=10, a2: S=10 F=20, a3: S=20 F=30, b1: S=0 F=10
        let t = q.peek().unwrap().2;
        assert_eq!((t.start, t.finish), (0.0, 10.0));
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(v, _)| v)).collect();
        assert_eq!(order, vec!["a1", "b1", "a2", "a3"]);
        assert_eq!(q.virtual_time(), 20.0);
    }

    #[test]
    fn equal_weights_single_request_flows_is_fcfs() {
        // One request per flow, equal weights and sizes: arrival order.
        let mut q2: Wfq<u32, u32> = Wfq::new();
        for i in 0..50u32 {
            q2.add(i, Some(i), 7.0, 1.0, i as f64).unwrap();
        }
        assert_eq!(drain(&mut q2), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn weighted_share_two_backlogged_flows() {
        let mut q: Wfq<u32, u32> = Wfq::new();
        // flow 1 weight 1 queues 300 requests, flow 2 weight 2 queues 100.
        for i in 0..300u32 {
            q.add(1, Some(1), 10.0, 1.0, i as f64).unwrap();
        }
        for i in 0..100u32 {
            q.add(2, Some(2), 10.0, 2.0, i as f64).unwrap();
        }
        let mut served = [0.0f64; 3];
        for _ in 0..120 {
            let (v, t) = q.pop().unwrap();
            served[v as usize] += t.remaining;
        }
        let ratio = served[2] / served[1];
        assert!((ratio - 2.0).abs() < 0.1, "ratio {ratio}");
    }

    #[test]
    fn preemption_restores_place_and_tags() {
        let mut q: Wfq<u32, u32> = Wfq::new();
        for i in 0..5u32 {
            q.add(i, Some(i % 2), 5.0, 1.0, 0.0).unwrap();
        }
        let (v, t) = q.pop().unwrap();
        let vt = q.virtual_time();
        q.readd(v, t.clone()).unwrap();
        assert_eq!(q.virtual_time(), vt);
        let (v2, t2) = q.pop().unwrap();
        assert_eq!((v2, t2), (v, t));
    }

    #[test]
    fn update_remaining_rekeys() {
        let mut q: Wfq<u32, u32> = Wfq::new();
        let a = q.add(0, None, 100.0, 1.0, 0.0).unwrap();
        q.add(1, None, 50.0, 1.0, 0.0).unwrap();
        assert_eq!(q.peek().unwrap().1, &1);
        assert_eq!(q.update_remaining(a, 10.0).unwrap(), 10.0);
        assert_eq!(q.peek().unwrap().1, &0);
        assert!(q.update_remaining(a, f64::NAN).is_err());
        assert_eq!(q.get(a).unwrap().1.finish, 10.0);
    }

    #[test]
    fn bad_input_leaves_queue_unchanged() {
        let mut q: Wfq<u32, u32> = Wfq::new();
        q.add(0, Some(1), 10.0, 1.0, 0.0).unwrap();
        for (tok, w, arr) in [
            (1.0, 0.0, 0.0),
            (1.0, -1.0, 0.0),
            (1.0, f64::NAN, 0.0),
            (1.0, f64::INFINITY, 0.0),
            (-1.0, 1.0, 0.0),
            (f64::NAN, 1.0, 0.0),
            (1.0, 1.0, f64::NAN),
            (1e308, 1e-300, 0.0),
        ] {
            let e = q.add(9, Some(1), tok, w, arr).unwrap_err();
            assert!(matches!(e, Error::Value(_)));
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.flow_last_finish(&1), Some(10.0));
        assert_eq!(q.flow_queued(&1), 1);
    }

    #[test]
    fn remove_does_not_rewind_and_gc_drops_idle_flows() {
        let mut q: Wfq<u32, u32> = Wfq::new();
        let h = q.add(0, Some(7), 10.0, 1.0, 0.0).unwrap();
        q.remove(h).unwrap();
        assert_eq!(q.flow_last_finish(&7), Some(10.0));
        q.add(1, Some(7), 10.0, 1.0, 0.0).unwrap();
        assert_eq!(q.peek().unwrap().2.start, 10.0);
        q.pop();
        // One-shot flows keep F_last > V (their state still matters) until
        // V passes them; then the amortized sweep drops them.
        for i in 0..3000u32 {
            q.add(i, Some(100 + i), 1.0, 1.0, 0.0).unwrap();
            q.pop().unwrap();
        }
        assert_eq!(q.flow_count(), 3001);
        for _ in 0..2 {
            q.add(0, Some(7), 5.0, 1.0, 0.0).unwrap();
        }
        q.pop().unwrap();
        q.pop().unwrap();
        assert!(q.virtual_time() > 11.0);
        for i in 0..3000u32 {
            q.add(i, Some(10_000 + i), 1.0, 1.0, 0.0).unwrap();
        }
        assert!(q.flow_count() <= 3001, "{}", q.flow_count());
        assert!(q.drain_dropped_flows().count() > 0);
    }

    /// Random add/pop/remove/readd/update_remaining against a naive model (a
    /// Vec scanned for the minimum key, `F_last` of every flow ever seen, no
    /// GC). With many flows the core's flow GC runs; tags must not change.
    fn random_ops_match_naive_model(clock: VirtualClock, nflows: u64, steps: u64, seed: u64) {
        let mut s = seed;
        let mut q: Wfq<u32, u64> = Wfq::with_clock(clock);
        let mut model: Vec<(Key, u64, Handle)> = Vec::new();
        let mut popped: Vec<(u64, Tags<u32>)> = Vec::new();
        let mut last: std::collections::HashMap<u32, f64> = std::collections::HashMap::new();
        let mut v = 0.0f64;
        let mut gc_seen = false;
        for step in 0..steps {
            match lcg(&mut s) % 8 {
                0..=2 => {
                    let flow = (lcg(&mut s) % nflows) as u32;
                    let tok = (lcg(&mut s) % 20) as f64;
                    let w = [0.5, 1.0, 2.0][(lcg(&mut s) % 3) as usize];
                    let st = v.max(*last.get(&flow).unwrap_or(&v));
                    let f = st + tok / w;
                    last.insert(flow, f);
                    let h = q.add(step, Some(flow), tok, w, 0.0).unwrap();
                    let key = Key::new(f, st, 0.0);
                    model.push((key, step, h));
                }
                3 | 4 => {
                    let i = (0..model.len()).min_by(|&a, &b| {
                        model[a]
                            .0
                            .cmp(&model[b].0)
                            .then(model[a].1.cmp(&model[b].1))
                    });
                    let got = q.pop();
                    match i {
                        None => assert!(got.is_none()),
                        Some(i) => {
                            let (k, id, _) = model.remove(i);
                            let (gv, gt) = got.unwrap();
                            assert_eq!(gv, id);
                            assert_eq!((gt.start, gt.finish), (k.start.0, k.finish.0));
                            v = v.max(match clock {
                                VirtualClock::Start => k.start.0,
                                VirtualClock::Finish => k.finish.0,
                            });
                            popped.push((id, gt));
                        }
                    }
                }
                5 if !model.is_empty() => {
                    let i = lcg(&mut s) as usize % model.len();
                    let (_, id, h) = model.swap_remove(i);
                    assert_eq!(q.remove(h).unwrap().0, id);
                }
                6 if !model.is_empty() => {
                    let i = lcg(&mut s) as usize % model.len();
                    let rem = (lcg(&mut s) % 10) as f64;
                    let (_, t) = q.get(model[i].2).unwrap();
                    let nf = q.update_remaining(model[i].2, rem).unwrap();
                    assert_eq!(nf, t.start + rem / t.weight);
                    model[i].0.finish = OrdF64(nf);
                }
                7 if !popped.is_empty() => {
                    let i = lcg(&mut s) as usize % popped.len();
                    let (id, t) = popped.swap_remove(i);
                    let flow = t.flow.unwrap();
                    let l = last.entry(flow).or_insert(v);
                    *l = l.max(t.finish);
                    let key = Key::new(t.finish, t.start, t.arrival);
                    let h = q.readd(id, t).unwrap();
                    model.push((key, id, h));
                }
                _ => {}
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.virtual_time(), v);
            gc_seen |= q.drain_dropped_flows().count() > 0;
        }
        // Flow state the core kept starts the next request where the model
        // would (a flow re-created by readd after GC may hold max(V, F)
        // instead of the model's max(F_last, F), both <= V or equal).
        for (flow, l) in &last {
            match q.flow_last_finish(flow) {
                Some(x) => assert_eq!(x.max(v), l.max(v)),
                None => assert!(*l <= v && q.flow_queued(flow) == 0),
            }
        }
        assert_eq!(gc_seen, nflows > GC_MIN as u64, "gc ran: {gc_seen}");
    }

    #[test]
    fn random_ops_match_naive_model_start_clock() {
        random_ops_match_naive_model(VirtualClock::Start, 5, 5000, 11);
    }

    #[test]
    fn random_ops_match_naive_model_finish_clock() {
        random_ops_match_naive_model(VirtualClock::Finish, 5, 5000, 12);
    }

    #[test]
    fn random_ops_with_flow_gc_match_naive_model_both_clocks() {
        for (clock, seed) in [(VirtualClock::Start, 13), (VirtualClock::Finish, 14)] {
            random_ops_match_naive_model(clock, 4000, 30_000, seed);
        }
    }

    #[test]
    fn virtual_clock_parse() {
        assert_eq!(VirtualClock::parse("start").unwrap(), VirtualClock::Start);
        assert_eq!(VirtualClock::parse("finish").unwrap(), VirtualClock::Finish);
        assert_eq!(VirtualClock::default(), VirtualClock::Start);
        assert_eq!(Wfq::<u32, u32>::new().virtual_clock(), VirtualClock::Start);
        for c in [VirtualClock::Start, VirtualClock::Finish] {
            assert_eq!(VirtualClock::parse(c.as_str()).unwrap(), c);
        }
        for bad in ["", "Start", "finish ", "self-clocked"] {
            let Error::Value(m) = VirtualClock::parse(bad).unwrap_err() else {
                panic!("not a value error")
            };
            assert!(
                m.contains("virtual_clock") && m.contains(&format!("{bad:?}")),
                "{m}"
            );
        }
    }

    /// A long one-request flow plus one short one-request flow added before
    /// every pop; returns after how many pops the long one came out (or
    /// `None` within `limit` pops) and the final `V`.
    fn long_vs_stream_of_short(clock: VirtualClock, limit: u32) -> (Option<u32>, f64) {
        let mut q: Wfq<u32, u32> = Wfq::with_clock(clock);
        q.add(u32::MAX, None, 1000.0, 1.0, 0.0).unwrap();
        for i in 0..limit {
            q.add(i, None, 10.0, 1.0, f64::from(i) + 1.0).unwrap();
            if q.pop().unwrap().0 == u32::MAX {
                return (Some(i + 1), q.virtual_time());
            }
        }
        (None, q.virtual_time())
    }

    #[test]
    fn start_clock_starves_long_single_request_flow() {
        // The documented hazard of ALGORITHMS.md §3 with one request per flow.
        assert_eq!(
            long_vs_stream_of_short(VirtualClock::Start, 10_000),
            (None, 0.0)
        );
    }

    #[test]
    fn finish_clock_bounds_wait_of_long_single_request_flow() {
        // Bound ceil(T / d) + 1 = 1000 / 10 + 1 pops.
        let (n, v) = long_vs_stream_of_short(VirtualClock::Finish, 10_000);
        let n = n.expect("long request served");
        assert!(n <= 101, "{n}");
        assert_eq!(v, 1000.0);
    }

    #[test]
    fn finish_clock_weighted_share_and_chaining() {
        let mut q: Wfq<u32, u32> = Wfq::with_clock(VirtualClock::Finish);
        for i in 0..300u32 {
            q.add(1, Some(1), 10.0, 1.0, f64::from(i)).unwrap();
        }
        for i in 0..100u32 {
            q.add(2, Some(2), 10.0, 2.0, f64::from(i)).unwrap();
        }
        let mut served = [0.0f64; 3];
        let mut v = 0.0;
        for _ in 0..120 {
            let (x, t) = q.pop().unwrap();
            served[x as usize] += t.remaining;
            assert!(q.virtual_time() >= v);
            assert_eq!(q.virtual_time(), v.max(t.finish));
            v = q.virtual_time();
        }
        let ratio = served[2] / served[1];
        assert!((ratio - 2.0).abs() < 0.1, "ratio {ratio}");
    }

    #[test]
    fn finish_clock_worked_example_and_preemption() {
        let mut q: Wfq<u32, &str> = Wfq::with_clock(VirtualClock::Finish);
        q.add("a1", Some(1), 10.0, 1.0, 0.0).unwrap();
        q.add("a2", Some(1), 10.0, 1.0, 0.0).unwrap();
        q.add("b1", Some(2), 10.0, 1.0, 1.0).unwrap();
        let (x, t) = q.pop().unwrap();
        assert_eq!((x, q.virtual_time()), ("a1", 10.0));
        // A new one-request flow now starts at V = 10 (Start clock: 0).
        let c1 = q.add("c1", None, 5.0, 1.0, 2.0).unwrap();
        let t1 = q.get(c1).unwrap().1;
        assert_eq!((t1.start, t1.finish), (10.0, 15.0));
        // Preempted a1 returns with its old tags (F = 10 <= V): first again.
        q.readd(x, t.clone()).unwrap();
        assert_eq!(q.virtual_time(), 10.0);
        assert_eq!(q.pop().unwrap(), ("a1", t));
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(v, _)| v)).collect();
        assert_eq!(order, vec!["b1", "c1", "a2"]);
        assert_eq!(q.virtual_time(), 20.0);
    }

    #[test]
    fn refund_flow_moves_f_last_back_not_below_v() {
        let mut q: Wfq<u32, &str> = Wfq::new();
        q.add("a1", Some(1), 100.0, 1.0, 0.0).unwrap();
        q.add("b1", Some(2), 10.0, 1.0, 0.0).unwrap();
        assert_eq!(q.flow_last_finish(&1), Some(100.0));
        assert_eq!(q.refund_flow(&1, 60.0, 2.0).unwrap(), 30.0);
        assert_eq!(q.flow_last_finish(&1), Some(70.0));
        // the next request of flow 1 starts at the refunded F_last
        let h = q.add("a2", Some(1), 10.0, 1.0, 0.0).unwrap();
        assert_eq!(q.get(h).unwrap().1.start, 70.0);
        // never below V
        q.pop().unwrap();
        let v = q.virtual_time();
        q.refund_flow(&1, 1e9, 1.0).unwrap();
        assert_eq!(q.flow_last_finish(&1), Some(v));
        assert_eq!(q.refund_flow(&99, 5.0, 1.0).unwrap(), 0.0);
        assert!(q.refund_flow(&1, -1.0, 1.0).is_err());
        assert!(q.refund_flow(&1, 1.0, 0.0).is_err());
    }

    #[test]
    fn start_clock_caps_idle_flows_ahead() {
        // Start clock, one flow per request: V stays at 0 (every request
        // starts at V), so every popped flow stays ahead (F_last > V) and
        // only the cap bounds the table; the least ahead go first.
        let mut q: Wfq<u32, u32> = Wfq::new();
        let n = 2 * MAX_IDLE_FLOWS_AHEAD as u32 + 10_000;
        let mut peak = 0;
        for i in 0..n {
            q.add(i, Some(i), 1.0 + (i % 4) as f64, 1.0, 0.0).unwrap();
            q.pop().unwrap();
            peak = peak.max(q.flow_count());
        }
        assert_eq!(q.virtual_time(), 0.0);
        assert!(peak <= 2 * MAX_IDLE_FLOWS_AHEAD + 2, "{peak}");
        let dropped: std::collections::HashSet<u32> = q.drain_dropped_flows().collect();
        assert!(dropped.len() as u32 >= n - 2 * MAX_IDLE_FLOWS_AHEAD as u32 - 1);
        // The least ahead go first: flows with F_last = 1 are dropped far
        // more often than those with F_last = 4.
        let by = |c: u32| dropped.iter().filter(|&&k| k % 4 == c).count();
        assert!(by(0) > 2 * by(3), "{} {}", by(0), by(3));
    }

    #[test]
    fn finish_clock_drops_one_shot_flows() {
        let mut q: Wfq<u32, u32> = Wfq::with_clock(VirtualClock::Finish);
        for i in 0..5000u32 {
            q.add(i, Some(i), 1.0, 1.0, 0.0).unwrap();
            q.pop().unwrap();
        }
        // Each popped flow has F_last = V at once: swept when the table doubles.
        assert!(q.flow_count() <= GC_MIN + 1, "{}", q.flow_count());
        assert!(q.drain_dropped_flows().count() >= 3900);
        q.add(0, Some(7), 3.0, 1.0, 0.0).unwrap();
        assert_eq!(q.peek().unwrap().2.start, q.virtual_time());
    }
}
