//! Property tests of the core structures and policies (`proptest`): random
//! operation sequences against a small, obviously-correct model or against
//! the invariants every structure promises (conservation: every request
//! added leaves exactly once).
//!
//! `cargo test` runs 256 cases per property (`PROPTEST_CASES` overrides it;
//! the long run is `PROPTEST_CASES=1000000 cargo test --release proptests`,
//! see `docs/results/proptest.md`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use proptest::prelude::*;

use crate::dispatch::{AffinityConfig, D2lpmConfig, Dispatcher};
use crate::drr::{ClassConfig, DrrQueue, PushArgs, QueueOrder, Snapshot};
use crate::fifo::Fifo;
use crate::heap::IndexedHeap;
use crate::radix::{Namespace, RadixTree};
use crate::registry::Registry;
use crate::request_id::RequestId;
use crate::sched::{LocalScheduler, LpmRule, Policy};
use crate::wfq::{VirtualClock, Wfq};

fn config() -> ProptestConfig {
    // PROPTEST_CASES (read by proptest) overrides the default of 256.
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------- heap

#[derive(Debug, Clone)]
enum HeapOp {
    Push(u8),
    Pop,
    Remove(usize),
    Rekey(usize, u8),
}

fn heap_op() -> impl Strategy<Value = HeapOp> {
    prop_oneof![
        any::<u8>().prop_map(HeapOp::Push),
        Just(HeapOp::Pop),
        any::<usize>().prop_map(HeapOp::Remove),
        (any::<usize>(), any::<u8>()).prop_map(|(i, k)| HeapOp::Rekey(i, k)),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The indexed heap pops in `(key, seq)` order like a sorted set, and
    /// remove / rekey by handle agree with the model.
    #[test]
    fn heap_matches_a_sorted_set(ops in prop::collection::vec(heap_op(), 0..200)) {
        let mut h: IndexedHeap<u8, u64> = IndexedHeap::new();
        let mut model: BTreeSet<(u8, u64)> = BTreeSet::new();
        let mut live: Vec<(crate::heap::Handle, u64)> = Vec::new();
        let mut key_of: HashMap<u64, u8> = HashMap::new();
        let mut seq = 0u64;
        for op in ops {
            match op {
                HeapOp::Push(k) => {
                    let hd = h.push(k, seq);
                    model.insert((k, seq));
                    key_of.insert(seq, k);
                    live.push((hd, seq));
                    seq += 1;
                }
                HeapOp::Pop => {
                    let got = h.pop();
                    let want = model.iter().next().copied();
                    prop_assert_eq!(got, want);
                    if let Some((_, s)) = want {
                        model.remove(&(key_of[&s], s));
                        live.retain(|&(_, x)| x != s);
                    }
                }
                HeapOp::Remove(i) if !live.is_empty() => {
                    let (hd, s) = live.swap_remove(i % live.len());
                    prop_assert_eq!(h.remove(hd), Some((key_of[&s], s)));
                    model.remove(&(key_of[&s], s));
                    prop_assert!(!h.contains(hd));
                }
                HeapOp::Rekey(i, k) if !live.is_empty() => {
                    let (hd, s) = live[i % live.len()];
                    let old = key_of[&s];
                    prop_assert_eq!(h.rekey(hd, k), Some(old));
                    model.remove(&(old, s));
                    model.insert((k, s));
                    key_of.insert(s, k);
                }
                _ => {}
            }
            prop_assert_eq!(h.len(), model.len());
            prop_assert_eq!(h.peek().map(|(_, k, v)| (*k, *v)), model.iter().next().copied());
        }
        let sorted: Vec<(u8, u64)> = h.iter_sorted().map(|(_, k, v)| (*k, *v)).collect();
        prop_assert_eq!(sorted, model.into_iter().collect::<Vec<_>>());
    }
}

// ---------------------------------------------------------------- fifo

#[derive(Debug, Clone)]
enum FifoOp {
    PushBack,
    PushFront,
    PopFront,
    PopBack,
    Remove(usize),
}

fn fifo_op() -> impl Strategy<Value = FifoOp> {
    prop_oneof![
        Just(FifoOp::PushBack),
        Just(FifoOp::PushFront),
        Just(FifoOp::PopFront),
        Just(FifoOp::PopBack),
        any::<usize>().prop_map(FifoOp::Remove),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The handle FIFO behaves as a deque with O(1) removal by handle, and
    /// positions stay in queue order.
    #[test]
    fn fifo_matches_a_deque(ops in prop::collection::vec(fifo_op(), 0..200)) {
        let mut f: Fifo<u32> = Fifo::new();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut handles: HashMap<u32, crate::fifo::Handle> = HashMap::new();
        let mut next = 0u32;
        for op in ops {
            match op {
                FifoOp::PushBack => {
                    handles.insert(next, f.push_back(next));
                    model.push_back(next);
                    next += 1;
                }
                FifoOp::PushFront => {
                    handles.insert(next, f.push_front(next));
                    model.push_front(next);
                    next += 1;
                }
                FifoOp::PopFront => prop_assert_eq!(f.pop_front(), model.pop_front()),
                FifoOp::PopBack => prop_assert_eq!(f.pop_back(), model.pop_back()),
                FifoOp::Remove(i) if !model.is_empty() => {
                    let v = model.remove(i % model.len()).expect("in range");
                    prop_assert_eq!(f.remove(handles[&v]), Some(v));
                    prop_assert_eq!(f.remove(handles[&v]), None);
                }
                _ => {}
            }
            prop_assert_eq!(f.len(), model.len());
            let got: Vec<u32> = f.iter().map(|(_, v)| *v).collect();
            prop_assert_eq!(&got, &model.iter().copied().collect::<Vec<_>>());
            let pos: Vec<i64> = f.iter().map(|(h, _)| f.position(h).expect("live")).collect();
            prop_assert!(pos.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

// ---------------------------------------------------------------- registry

proptest! {
    #![proptest_config(config())]

    /// The identity registry holds exactly the (id, handle) pairs inserted
    /// and not removed, whatever the order.
    #[test]
    fn registry_matches_a_multimap(
        ops in prop::collection::vec((any::<bool>(), 0u64..8, 0u32..6), 0..200)
    ) {
        let mut r: Registry<u32> = Registry::new();
        let mut model: HashMap<u64, Vec<u32>> = HashMap::new();
        for (insert, id, h) in ops {
            if insert {
                if model.get(&id).is_some_and(|v| v.contains(&h)) {
                    continue; // a live handle is never inserted twice
                }
                r.insert(id, h);
                model.entry(id).or_default().push(h);
            } else {
                let had = model.get(&id).is_some_and(|v| v.contains(&h));
                prop_assert_eq!(r.remove(id, h), had);
                if had {
                    let v = model.get_mut(&id).expect("present");
                    v.retain(|&x| x != h);
                    if v.is_empty() {
                        model.remove(&id);
                    }
                }
            }
            prop_assert_eq!(r.len(), model.values().map(Vec::len).sum::<usize>());
            prop_assert_eq!(r.distinct(), model.len());
            for id in 0..8 {
                let mut got = r.get(id).to_vec();
                got.sort_unstable();
                let mut want = model.get(&id).cloned().unwrap_or_default();
                want.sort_unstable();
                prop_assert_eq!(got, want);
            }
        }
    }
}

// ---------------------------------------------------------------- radix tree

#[derive(Debug, Clone)]
enum RadixOp {
    Insert(Vec<u32>),
    Lock(Vec<u32>),
    Unlock(usize),
    Evict(usize),
}

fn tokens() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0u32..4, 0..10)
}

/// A request's prompt: at least one token (an empty one is refused).
fn prompt() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0u32..4, 1..10)
}

fn radix_op() -> impl Strategy<Value = RadixOp> {
    prop_oneof![
        3 => tokens().prop_map(RadixOp::Insert),
        1 => tokens().prop_map(RadixOp::Lock),
        1 => any::<usize>().prop_map(RadixOp::Unlock),
        1 => (0usize..12).prop_map(RadixOp::Evict),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The radix tree keeps its invariants; a match is a prefix of the
    /// query in whole pages and never longer than what was inserted; an
    /// insert without capacity makes the whole (paged) sequence match;
    /// locked prefixes are never evicted; a capacity is never exceeded.
    #[test]
    fn radix_tree_invariants(
        ops in prop::collection::vec(radix_op(), 0..120),
        page in 1usize..3,
        capacity in prop::option::of(4usize..40),
    ) {
        let ns = Namespace::Default;
        let mut t = RadixTree::new(capacity, page).expect("valid");
        let mut locks: Vec<Vec<u32>> = Vec::new();
        let mut inserted: BTreeSet<Vec<u32>> = BTreeSet::new();
        for op in ops {
            match op {
                RadixOp::Insert(toks) => {
                    t.insert(&ns, &toks);
                    let whole = toks.len() / page * page;
                    if capacity.is_none() {
                        prop_assert_eq!(t.match_len(&ns, &toks), whole);
                    }
                    inserted.insert(toks);
                }
                RadixOp::Lock(toks) => {
                    let n = t.lock(&ns, &toks);
                    prop_assert_eq!(n, t.match_len(&ns, &toks));
                    locks.push(toks);
                }
                RadixOp::Unlock(i) if !locks.is_empty() => {
                    let toks = locks.swap_remove(i % locks.len());
                    t.unlock(&ns, &toks).expect("locked before");
                }
                RadixOp::Evict(n) => {
                    t.evict(n);
                }
                _ => {}
            }
            t.check_invariants();
            if let Some(c) = capacity {
                prop_assert!(t.size() <= c.max(t.size() - t.evictable_size()));
            }
            prop_assert!(t.evictable_size() <= t.size());
            for toks in inserted.iter().take(8) {
                let m = t.match_len(&ns, toks);
                prop_assert!(m <= toks.len() && m % page == 0);
            }
        }
        // with every lock released, everything is evictable
        for toks in locks.drain(..) {
            t.unlock(&ns, &toks).expect("locked before");
        }
        prop_assert_eq!(t.evictable_size(), t.size());
        t.evict(usize::MAX);
        prop_assert_eq!(t.size(), 0);
    }
}

// ---------------------------------------------------------------- DRR

proptest! {
    #![proptest_config(config())]

    /// DRR conserves requests (every push leaves once, by pop or remove),
    /// pops only unblocked classes' heads, and keeps per-class depths.
    #[test]
    fn drr_conserves_requests(
        quanta in prop::collection::vec(1u64..50, 1..5),
        ops in prop::collection::vec((0u8..4, 0usize..8, 0u64..200, 0u8..16), 0..200),
    ) {
        let classes = quanta
            .iter()
            .enumerate()
            .map(|(i, &q)| ClassConfig::new(format!("c{i}"), q, if i % 2 == 0 {
                QueueOrder::Fcfs
            } else {
                QueueOrder::Wspt
            }))
            .collect();
        let mut q: DrrQueue<u64> = DrrQueue::from_classes(classes).expect("valid");
        let n = quanta.len();
        let mut queued: HashMap<u64, (usize, u64)> = HashMap::new(); // item -> (class, ticket)
        let mut left: HashSet<u64> = HashSet::new();
        let mut item = 0u64;
        for (kind, c, cost, mask) in ops {
            match kind {
                0 | 1 => {
                    let args = PushArgs {
                        snapshot: Snapshot::from_cost(cost),
                        strict_priority: (cost % 3) as i64,
                        priority_jump: 0.0,
                        arrival: item as f64,
                    };
                    let t = q.push(c % n, item, args).expect("no limits");
                    queued.insert(item, (c % n, t));
                    item += 1;
                }
                2 => {
                    let blocked: Vec<bool> = (0..n).map(|i| mask & (1 << (i % 4)) != 0).collect();
                    if let Some((class, e)) = q.pop(&blocked) {
                        prop_assert!(!blocked[class]);
                        let (c0, _) = queued.remove(&e.item).expect("popped once");
                        prop_assert_eq!(c0, class);
                        prop_assert!(left.insert(e.item));
                    } else {
                        // nothing unblocked is queued
                        prop_assert!(queued.values().all(|&(c, _)| blocked[c]));
                    }
                }
                _ => {
                    if let Some(&it) = queued.keys().min() {
                        let (_, t) = queued.remove(&it).expect("queued");
                        let (_, e) = q.remove(t).expect("live ticket");
                        prop_assert_eq!(e.item, it);
                        prop_assert!(left.insert(it));
                        prop_assert!(q.remove(t).is_err());
                    }
                }
            }
            prop_assert_eq!(q.len(), queued.len());
            for i in 0..n {
                prop_assert_eq!(q.depth(i), queued.values().filter(|&&(c, _)| c == i).count());
            }
        }
        let none = vec![false; n];
        while let Some((_, e)) = q.pop(&none) {
            prop_assert!(queued.remove(&e.item).is_some());
        }
        prop_assert!(queued.is_empty());
    }
}

// ---------------------------------------------------------------- WFQ

proptest! {
    #![proptest_config(config())]

    /// WFQ pops the smallest (F, S, arrival, seq) of what is queued, V never
    /// decreases, F = S + tokens / weight, and every add leaves once.
    #[test]
    fn wfq_pops_the_smallest_tag(
        finish_clock in any::<bool>(),
        ops in prop::collection::vec((0u8..3, prop::option::of(0u32..3), 0u32..50, 1u32..4), 0..200),
    ) {
        let clock = if finish_clock { VirtualClock::Finish } else { VirtualClock::Start };
        let mut q: Wfq<u32, u64> = Wfq::with_clock(clock);
        let mut handles: BTreeMap<u64, crate::heap::Handle> = BTreeMap::new();
        let mut next = 0u64;
        let mut v_prev = 0.0;
        for (kind, flow, tokens, weight) in ops {
            match kind {
                0 | 1 => {
                    let h = q
                        .add(next, flow, tokens as f64, weight as f64, (next % 5) as f64)
                        .expect("valid");
                    let (_, t) = q.get(h).expect("queued");
                    prop_assert!(t.start >= q.virtual_time());
                    prop_assert!((t.finish - (t.start + tokens as f64 / weight as f64)).abs() < 1e-9);
                    handles.insert(next, h);
                    next += 1;
                }
                _ => {
                    let min = handles
                        .values()
                        .map(|&h| q.get(h).expect("queued").1.queue_order())
                        .min();
                    match q.pop() {
                        Some((item, t)) => {
                            prop_assert_eq!(Some(t.queue_order()), min);
                            prop_assert!(handles.remove(&item).is_some());
                        }
                        None => prop_assert!(handles.is_empty()),
                    }
                }
            }
            prop_assert!(q.virtual_time() >= v_prev);
            v_prev = q.virtual_time();
            prop_assert_eq!(q.len(), handles.len());
        }
    }
}

// ---------------------------------------------------------------- local schedulers

fn policy(i: u8) -> Policy {
    if i == 10 {
        // DLPM with strict credit (fixed quantum)
        return Policy::Dlpm {
            quantum: 5.0,
            w_e: 1.0,
            w_q: 2.0,
            quantum_scale: 0.0,
            strict_credit: 1.0,
        };
    }
    match i % 5 {
        0 => Policy::Fcfs,
        1 | 4 => Policy::Lpm,
        2 => Policy::Vtc {
            w_in: 1.0,
            w_out: 2.0,
        },
        // i >= 5: the automatic quantum (a small scale: refills are frequent)
        _ => Policy::Dlpm {
            quantum: 5.0,
            w_e: 1.0,
            w_q: 2.0,
            quantum_scale: if i >= 5 { 0.05 } else { 0.0 },
            strict_credit: 0.0,
        },
    }
}

/// A scheduler of `policy(i)`; `i % 5 == 4`: LPM with Preble's queue;
/// `i == 8`: DLPM with the automatic quantum; `i == 10`: DLPM with strict
/// credit.
fn scheduler(i: u8) -> LocalScheduler<u64> {
    let mut s = LocalScheduler::new(policy(i)).expect("valid");
    if i % 5 == 4 {
        s.set_lpm_rule(LpmRule::PREBLE)
            .expect("LPM, nothing waiting");
    }
    s
}

proptest! {
    #![proptest_config(config())]

    /// Every request added to a local scheduler leaves exactly once (admitted
    /// then finished, or removed); a step never admits more extend tokens
    /// than its budget unless it admits exactly one request (the oversize
    /// rule: one larger than the whole budget, when nothing else fits), and
    /// admits something whenever a request waits; service only grows.
    #[test]
    fn local_schedulers_conserve_requests(
        which in 0u8..11,
        ops in prop::collection::vec((0u8..5, 0u8..3, prompt(), 0u32..30), 0..150),
    ) {
        let ns = Namespace::Default;
        let mut tree = RadixTree::new(Some(64), 1).expect("valid");
        let mut s: LocalScheduler<u64> = scheduler(which);
        let mut waiting: BTreeSet<i64> = BTreeSet::new();
        let mut running: BTreeSet<i64> = BTreeSet::new();
        let mut gone: HashSet<i64> = HashSet::new();
        let mut next = 0i64;
        let clients = ["a", "b", "c"];
        let mut service = [0.0f64; 3];
        for (kind, c, toks, x) in ops {
            match kind {
                0 | 1 => {
                    s.add(Some(&mut tree), RequestId::Int(next), clients[c as usize], toks, next as u64, ns.clone())
                        .expect("fresh id");
                    waiting.insert(next);
                    next += 1;
                }
                2 => {
                    let adm = s.schedule(Some(&tree), x as usize, None).expect("tree given");
                    let extend: usize = adm.iter().map(|a| a.extend_len).sum();
                    prop_assert!(extend <= x as usize || adm.len() == 1);
                    prop_assert_eq!(adm.is_empty(), waiting.is_empty());
                    for a in adm {
                        let RequestId::Int(id) = a.id else { unreachable!() };
                        prop_assert!(waiting.remove(&id), "admitted twice or never added");
                        prop_assert_eq!(a.item, id as u64);
                        prop_assert_eq!(a.cached_len + a.extend_len, a.input_len);
                        running.insert(id);
                    }
                }
                3 => {
                    if let Some(&id) = running.iter().nth(x as usize % running.len().max(1)) {
                        s.charge_output(&RequestId::Int(id), 1).expect("running");
                        if x % 2 == 0 {
                            s.finish(&RequestId::Int(id)).expect("running");
                            running.remove(&id);
                            prop_assert!(gone.insert(id));
                        }
                    }
                }
                _ => {
                    if let Some(&id) = waiting.iter().nth(x as usize % waiting.len().max(1)) {
                        prop_assert_eq!(s.remove(&RequestId::Int(id)).expect("waiting"), id as u64);
                        waiting.remove(&id);
                        prop_assert!(gone.insert(id));
                    }
                    tree.evict(x as usize);
                }
            }
            s.check_invariants(Some(&tree));
            prop_assert_eq!(s.len(), waiting.len());
            prop_assert_eq!(s.num_running(), running.len());
            for (i, c) in clients.iter().enumerate() {
                let now = s.service(c);
                prop_assert!(now >= service[i]);
                service[i] = now;
            }
        }
        prop_assert_eq!(waiting.len() + running.len() + gone.len(), next as usize);
    }
}

/// One step of [`no_waiting_request_is_blocked_forever`]'s history.
#[derive(Debug, Clone)]
enum LiveOp {
    /// A request of client `.0` with these tokens.
    Add(u8, Vec<u32>),
    /// `schedule(budget, k)`; the engine then caches the admitted prompts.
    Schedule(usize),
    /// Finish the running request at this index (mod the number running).
    Finish(usize),
    /// The engine's cache evicts this many tokens.
    Evict(usize),
}

fn live_op() -> impl Strategy<Value = LiveOp> {
    prop_oneof![
        4 => (0u8..3, prop::collection::vec(0u32..4, 1..30)).prop_map(|(c, t)| LiveOp::Add(c, t)),
        3 => (1usize..4).prop_map(LiveOp::Schedule),
        2 => any::<usize>().prop_map(LiveOp::Finish),
        1 => (0usize..20).prop_map(LiveOp::Evict),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The oversize rule, as liveness: with any mix of request sizes (many
    /// larger than the step's budget), every `schedule(budget, k)` call with
    /// a request waiting admits at least one (within `budget`, or one
    /// request alone that exceeds it); so once arrivals stop, `n` more
    /// one-request calls admit the `n` still waiting, and every request is
    /// admitted exactly once. No waiting request blocks another forever.
    #[test]
    fn no_waiting_request_is_blocked_forever(
        which in 0u8..11,
        budget in 1usize..12,
        ops in prop::collection::vec(live_op(), 0..120),
    ) {
        let ns = Namespace::Default;
        let mut tree = RadixTree::new(Some(64), 1).expect("valid");
        let mut s: LocalScheduler<u64> = scheduler(which);
        let mut toks_of: HashMap<i64, Vec<u32>> = HashMap::new();
        let mut waiting: BTreeSet<i64> = BTreeSet::new();
        let mut running: Vec<i64> = Vec::new();
        let mut admitted: HashSet<i64> = HashSet::new();
        let clients = ["a", "b", "c"];
        let mut step = |s: &mut LocalScheduler<u64>,
                        tree: &mut RadixTree,
                        waiting: &mut BTreeSet<i64>,
                        running: &mut Vec<i64>,
                        toks_of: &HashMap<i64, Vec<u32>>,
                        k: usize|
         -> Result<(), TestCaseError> {
            let adm = s.schedule(Some(tree), budget, Some(k)).expect("tree given");
            prop_assert_eq!(adm.is_empty(), waiting.is_empty(), "a call admitted nothing");
            prop_assert!(adm.len() <= k);
            let extend: usize = adm.iter().map(|a| a.extend_len).sum();
            prop_assert!(extend <= budget || adm.len() == 1, "{} admitted over budget", adm.len());
            for a in adm {
                let RequestId::Int(id) = a.id else { unreachable!() };
                prop_assert!(waiting.remove(&id), "admitted twice or never added");
                prop_assert!(admitted.insert(id));
                tree.insert(&Namespace::Default, &toks_of[&id]);
                running.push(id);
            }
            s.check_invariants(Some(tree));
            Ok(())
        };
        let mut next = 0i64;
        for op in ops {
            match op {
                LiveOp::Add(c, toks) => {
                    s.add(Some(&mut tree), RequestId::Int(next), clients[c as usize], toks.clone(), next as u64, ns.clone())
                        .expect("fresh id");
                    toks_of.insert(next, toks);
                    waiting.insert(next);
                    next += 1;
                }
                LiveOp::Schedule(k) => step(&mut s, &mut tree, &mut waiting, &mut running, &toks_of, k)?,
                LiveOp::Finish(i) => {
                    if !running.is_empty() {
                        let id = running.swap_remove(i % running.len());
                        s.charge_output(&RequestId::Int(id), 1 + i % 7).expect("running");
                        s.finish(&RequestId::Int(id)).expect("running");
                    }
                }
                LiveOp::Evict(n) => {
                    tree.evict(n);
                }
            }
        }
        // arrivals stop: as many one-request calls as requests wait
        for _ in 0..waiting.len() {
            step(&mut s, &mut tree, &mut waiting, &mut running, &toks_of, 1)?;
        }
        prop_assert!(waiting.is_empty());
        prop_assert_eq!(s.len(), 0);
        prop_assert_eq!(admitted.len(), next as usize);
    }
}

/// One step of [`within_credit_equals_schedule_until_a_refill`]'s history.
#[derive(Debug, Clone)]
enum WcOp {
    Add(u8, Vec<u32>),
    Insert(Vec<u32>),
    /// `schedule_within_credit(budget, k)`
    Admit(usize, usize),
    Charge(usize, usize),
    Finish(usize),
    Requeue(usize),
    Remove(usize),
}

/// Replay `ops` on a fresh scheduler and tree (deterministic: the same
/// history gives the same state); returns the ids running and waiting.
fn wc_replay(which: u8, ops: &[WcOp]) -> (LocalScheduler<u64>, RadixTree, Vec<i64>, Vec<i64>) {
    let ns = Namespace::Default;
    let mut tree = RadixTree::new(Some(64), 1).expect("valid");
    let mut s: LocalScheduler<u64> = scheduler(which);
    let (mut waiting, mut running): (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
    let mut toks_of: HashMap<i64, Vec<u32>> = HashMap::new();
    let mut next = 0i64;
    let clients = ["a", "b", "c"];
    for op in ops {
        match op {
            WcOp::Add(c, toks) => {
                s.add(
                    Some(&mut tree),
                    RequestId::Int(next),
                    clients[*c as usize],
                    toks.clone(),
                    next as u64,
                    ns.clone(),
                )
                .expect("fresh id");
                toks_of.insert(next, toks.clone());
                waiting.push(next);
                next += 1;
            }
            WcOp::Insert(toks) => {
                tree.insert(&ns, toks);
            }
            WcOp::Admit(budget, k) => {
                for a in s
                    .schedule_within_credit(Some(&tree), *budget, Some(*k))
                    .expect("tree")
                {
                    let RequestId::Int(id) = a.id else {
                        unreachable!()
                    };
                    waiting.retain(|&w| w != id);
                    running.push(id);
                }
            }
            WcOp::Charge(i, n) => {
                if !running.is_empty() {
                    let id = running[i % running.len()];
                    s.charge_output(&RequestId::Int(id), *n).expect("running");
                }
            }
            WcOp::Finish(i) => {
                if !running.is_empty() {
                    let id = running.remove(i % running.len());
                    s.finish(&RequestId::Int(id)).expect("running");
                }
            }
            WcOp::Requeue(i) => {
                if !running.is_empty() {
                    let id = running.remove(i % running.len());
                    let toks = toks_of[&id].clone();
                    s.requeue(Some(&mut tree), &RequestId::Int(id), toks, id as u64, true)
                        .expect("running");
                    waiting.push(id);
                }
            }
            WcOp::Remove(i) => {
                if !waiting.is_empty() {
                    let id = waiting.remove(i % waiting.len());
                    s.remove(&RequestId::Int(id)).expect("waiting");
                }
            }
        }
    }
    (s, tree, waiting, running)
}

fn wc_op() -> impl Strategy<Value = WcOp> {
    prop_oneof![
        4 => (0u8..3, prompt()).prop_map(|(c, t)| WcOp::Add(c, t)),
        1 => tokens().prop_map(WcOp::Insert),
        3 => (prop_oneof![0usize..20, Just(usize::MAX)], 1usize..5).prop_map(|(b, k)| WcOp::Admit(b, k)),
        2 => (any::<usize>(), 0usize..4).prop_map(|(i, n)| WcOp::Charge(i, n)),
        1 => any::<usize>().prop_map(WcOp::Finish),
        1 => any::<usize>().prop_map(WcOp::Requeue),
        1 => any::<usize>().prop_map(WcOp::Remove),
    ]
}

/// What an admission looked like: (id, cached, extend).
fn wc_key(a: &crate::sched::Admission<u64>) -> (RequestId, usize, usize) {
    (a.id.clone(), a.cached_len, a.extend_len)
}

proptest! {
    #![proptest_config(config())]

    /// `schedule_within_credit(budget, k)` never refills, and admits exactly
    /// what `schedule(budget, k)` admits on the same state (same requests,
    /// matches, charges) when that makes no refill; when it does refill,
    /// exactly its admissions before the refill (a prefix). And it equals
    /// `k` one-request calls (each with the budget left) whenever those
    /// make no refill. FCFS, LPM, VTC: always the same as `schedule`.
    #[test]
    fn within_credit_equals_schedule_until_a_refill(
        which in prop::sample::select(vec![0u8, 1, 2, 3, 8, 10]),
        ops in prop::collection::vec(wc_op(), 0..80),
    ) {
        let mut history: Vec<WcOp> = Vec::new();
        let clients = ["a", "b", "c"];
        for op in ops {
            if let WcOp::Admit(budget, k) = op {
                let (mut a, tree_a, ..) = wc_replay(which, &history);
                let (mut b, tree_b, ..) = wc_replay(which, &history);
                let (mut c, tree_c, ..) = wc_replay(which, &history);
                let refills = a.refills();
                let got = a.schedule_within_credit(Some(&tree_a), budget, Some(k)).expect("tree");
                prop_assert_eq!(a.refills(), refills, "schedule_within_credit refilled");
                let full = b.schedule(Some(&tree_b), budget, Some(k)).expect("tree");
                let got_keys: Vec<_> = got.iter().map(wc_key).collect();
                let full_keys: Vec<_> = full.iter().map(wc_key).collect();
                if b.refills() == refills {
                    prop_assert_eq!(&got_keys, &full_keys);
                    for cl in clients {
                        prop_assert_eq!(a.deficit(cl), b.deficit(cl));
                        prop_assert_eq!(a.counter(cl), b.counter(cl));
                        prop_assert_eq!(a.service(cl), b.service(cl));
                    }
                } else {
                    prop_assert!(got_keys.len() <= full_keys.len());
                    prop_assert_eq!(&got_keys[..], &full_keys[..got_keys.len()]);
                }
                // k one-request calls, each with the budget left; the ones
                // after the first with the oversize rule off (what is left
                // is not a whole step), none after a request admitted alone
                let mut singles = Vec::new();
                let mut left = budget;
                for i in 0..k {
                    let room = if i == 0 { None } else { Some(0) };
                    let one = c.schedule_step(Some(&tree_c), left, Some(1), room, true).expect("tree");
                    let Some(x) = one.first() else { break };
                    singles.push(wc_key(x));
                    if x.extend_len > left {
                        break; // admitted alone
                    }
                    left -= x.extend_len;
                }
                if c.refills() == refills {
                    prop_assert_eq!(&got_keys, &singles);
                }
                a.check_invariants(Some(&tree_a));
            }
            history.push(op);
        }
    }
}

// ---------------------------------------------------------------- Preble's queue

/// One step of [`preble_queue_matches_a_model`]'s history.
#[derive(Debug, Clone)]
enum PrebleOp {
    Add(Vec<u32>),
    /// The engine caches these tokens (matches grow).
    Insert(Vec<u32>),
    /// The engine's cache evicts this many tokens (matches shrink).
    Evict(usize),
    /// `schedule(budget, k)`
    Schedule(usize, usize),
    /// Remove the waiting request at this index (mod the number waiting).
    Remove(usize),
}

fn preble_op() -> impl Strategy<Value = PrebleOp> {
    // a small alphabet so prompts share prefixes and land on many levels
    let toks = |min: usize| prop::collection::vec(0u32..3, min..12);
    prop_oneof![
        5 => toks(1).prop_map(PrebleOp::Add),
        2 => toks(0).prop_map(PrebleOp::Insert),
        1 => (0usize..10).prop_map(PrebleOp::Evict),
        3 => (0usize..25, 1usize..40).prop_map(|(b, k)| PrebleOp::Schedule(b, k)),
        1 => any::<usize>().prop_map(PrebleOp::Remove),
    ]
}

/// Preble's queue written the obvious way: a list of waiting requests in
/// arrival order, each with its level once it has one.
struct PrebleModel {
    /// (id, tokens, level)
    waiting: Vec<(i64, Vec<u32>, Option<usize>)>,
    next_level: usize,
}

impl PrebleModel {
    /// The admissions `schedule(budget, k)` makes: (id, cached, extend).
    fn schedule(&mut self, tree: &RadixTree, budget: usize, k: usize) -> Vec<(i64, usize, usize)> {
        let ns = Namespace::Default;
        for (_, toks, lvl) in &mut self.waiting {
            if lvl.is_none() {
                let m = tree.match_len(&ns, toks);
                *lvl = Some(if m == 0 {
                    0
                } else {
                    (10 * m).div_ceil(toks.len()) - 1
                });
            }
        }
        // the first non-empty level from the pointer down, cyclically
        let Some(l) = (0..10)
            .map(|i| (self.next_level + 10 - i) % 10)
            .find(|&l| self.waiting.iter().any(|w| w.2 == Some(l)))
        else {
            return Vec::new();
        };
        let walk = |cap: usize, mut left: usize, waiting: &[(i64, Vec<u32>, Option<usize>)]| {
            let mut out = Vec::new();
            for (id, toks, lvl) in waiting {
                if out.len() == cap {
                    break;
                }
                if *lvl != Some(l) {
                    continue;
                }
                let cached = tree.match_len(&ns, toks);
                let extend = toks.len() - cached;
                if extend <= left {
                    left -= extend;
                    out.push((*id, cached, extend));
                }
            }
            out
        };
        let mut out = walk(((l + 1) * 10).min(k), budget, &self.waiting);
        if out.is_empty() {
            out = walk(1, usize::MAX, &self.waiting); // the oversize rule
        }
        if !out.is_empty() {
            self.next_level = (l + 9) % 10;
        }
        self.waiting.retain(|w| !out.iter().any(|a| a.0 == w.0));
        out
    }
}

proptest! {
    #![proptest_config(config())]

    /// LPM with [`LpmRule::PREBLE`] admits exactly what a plain list model
    /// of Preble's queue admits (levels by hit ratio at the first schedule
    /// after arrival, one level per call round-robin from level 9 down,
    /// quota `(level + 1) * 10`, arrival order within the level, unfit
    /// requests skipped, the oversize retry on the same level), with the
    /// same cached and extend lengths, while the cache grows and shrinks.
    #[test]
    fn preble_queue_matches_a_model(ops in prop::collection::vec(preble_op(), 0..150)) {
        let ns = Namespace::Default;
        let mut tree = RadixTree::new(Some(40), 1).expect("valid");
        let mut s = scheduler(4);
        let mut model = PrebleModel { waiting: Vec::new(), next_level: 9 };
        let mut next = 0i64;
        for op in ops {
            match op {
                PrebleOp::Add(toks) => {
                    s.add(Some(&mut tree), RequestId::Int(next), "a", toks.clone(), next as u64, ns.clone())
                        .expect("fresh id");
                    model.waiting.push((next, toks, None));
                    next += 1;
                }
                PrebleOp::Insert(toks) => {
                    tree.insert(&ns, &toks);
                }
                PrebleOp::Evict(n) => {
                    tree.evict(n);
                }
                PrebleOp::Schedule(budget, k) => {
                    let got: Vec<(i64, usize, usize)> = s
                        .schedule(Some(&tree), budget, Some(k))
                        .expect("tree given")
                        .into_iter()
                        .map(|a| {
                            let RequestId::Int(id) = a.id else { unreachable!() };
                            (id, a.cached_len, a.extend_len)
                        })
                        .collect();
                    prop_assert_eq!(got, model.schedule(&tree, budget, k));
                }
                PrebleOp::Remove(i) => {
                    if !model.waiting.is_empty() {
                        let (id, ..) = model.waiting.remove(i % model.waiting.len());
                        s.remove(&RequestId::Int(id)).expect("waiting");
                    }
                }
            }
            s.check_invariants(Some(&tree));
            prop_assert_eq!(s.len(), model.waiting.len());
        }
    }
}

// ---------------------------------------------------------------- dispatch

proptest! {
    #![proptest_config(config())]

    /// Every dispatcher picks a valid worker, keeps `s_w` equal to the
    /// requests in flight on each worker, conserves requests, and D2LPM's
    /// deficits never become NaN.
    #[test]
    fn dispatchers_conserve_requests(
        which in 0u8..5,
        workers in 1usize..5,
        ops in prop::collection::vec((0u8..4, 0u8..3, tokens(), 0u64..20), 0..150),
    ) {
        let mut d = match which {
            0 => Dispatcher::d2lpm(workers, D2lpmConfig::new(7.0)),
            1 => Dispatcher::round_robin(workers),
            2 => Dispatcher::least_loaded(workers),
            3 => Dispatcher::client_round_robin(workers),
            _ => Dispatcher::prefix_affinity(workers, AffinityConfig::default()),
        }
        .expect("valid");
        let mut inflight: BTreeMap<i64, usize> = BTreeMap::new();
        let mut next = 0i64;
        let clients = ["a", "b", "c"];
        for (kind, c, toks, x) in ops {
            match kind {
                0 | 1 => {
                    let w = d.dispatch(RequestId::Int(next), clients[c as usize], &toks).expect("fresh");
                    prop_assert!(w < workers);
                    inflight.insert(next, w);
                    next += 1;
                }
                2 => {
                    if let Some((&id, &w)) = inflight.iter().nth(x as usize % inflight.len().max(1)) {
                        prop_assert_eq!(d.on_finish(&RequestId::Int(id), x).expect("in flight"), w);
                        inflight.remove(&id);
                        prop_assert!(d.on_finish(&RequestId::Int(id), x).is_err());
                    }
                }
                _ => {
                    d.on_evict(x as usize % workers, &toks, (x as usize) % 3).expect("valid worker");
                }
            }
            let mut load = vec![0u64; workers];
            for &w in inflight.values() {
                load[w] += 1;
            }
            prop_assert_eq!(d.queue_sizes(), &load[..]);
            prop_assert_eq!(d.num_inflight(), inflight.len());
            if which == 0 {
                for c in clients {
                    for w in 0..workers {
                        prop_assert!(!d.deficit(c, w).expect("valid").is_nan());
                    }
                }
            }
        }
    }
}
