//! Unit tests of the DRR core: the seed's worked examples, arbitration,
//! limits, a Dynamo-schema profile (classification, models, errors naming
//! their path) and load-based dispatchability.

use super::*;
use crate::error::{Error, LimitKind};

fn args(cost: u64) -> PushArgs {
    PushArgs {
        snapshot: Snapshot::from_cost(cost),
        strict_priority: 0,
        priority_jump: 0.0,
        arrival: 0.0,
    }
}

fn q(specs: &[(&str, u64)]) -> DrrQueue<u32> {
    DrrQueue::from_classes(
        specs
            .iter()
            .map(|&(n, qn)| ClassConfig::new(n, qn, QueueOrder::Fcfs))
            .collect(),
    )
    .unwrap()
}

#[test]
fn burst_from_one_quantum() {
    let mut d = q(&[("a", 10), ("b", 10)]);
    for k in 0..4 {
        d.push(0, k, args(3)).unwrap();
    }
    d.push(1, 100, args(5)).unwrap();
    let mut seen = vec![];
    for _ in 0..3 {
        let (i, e) = d.pop(&[]).unwrap();
        assert_eq!(i, 0);
        seen.push((e.item, d.deficit(0), d.cursor(), d.cursor_retained()));
    }
    assert_eq!(
        seen,
        vec![(0, 7, 0, true), (1, 4, 0, true), (2, 1, 1, false)]
    );
    let (i, _) = d.pop(&[]).unwrap();
    assert_eq!(i, 1);
}

#[test]
fn bulk_credit_worked_example() {
    let mut d = q(&[("standard", 1000), ("latency", 2000)]);
    d.push(0, 1, args(7000)).unwrap();
    d.push(1, 2, args(9000)).unwrap();
    let (i, e) = d.pop(&[]).unwrap();
    assert_eq!((i, e.item), (1, 2));
    assert_eq!(d.deficit(0), 5000);
    assert_eq!(d.deficit(1), 0); // latency emptied: reset
}

#[test]
fn huge_cost_one_pop() {
    let mut d = q(&[("a", 1)]);
    d.push(0, 1, args(1_000_000_000)).unwrap();
    d.push(0, 2, args(1_000_000_000)).unwrap();
    assert_eq!(d.pop(&[]).unwrap().1.item, 1);
    assert_eq!(d.deficit(0), 0);
}

#[test]
fn blocked_earns_nothing_and_predicate_error_rolls_back() {
    let mut d = q(&[("a", 10), ("b", 10)]);
    d.push(0, 1, args(25)).unwrap();
    d.push(1, 2, args(25)).unwrap();
    assert_eq!(d.pop(&[true, true]).map(|x| x.0), None);
    assert_eq!((d.deficit(0), d.deficit(1)), (0, 0));
    let (i, _) = d.pop(&[true, false]).unwrap();
    assert_eq!((i, d.deficit(0)), (1, 0));
    // predicate error after a quantum was added: rolled back
    d.push(1, 3, args(25)).unwrap();
    let mut calls = vec![];
    let r: std::result::Result<_, &str> = d.pop_with(|i, _| {
        calls.push(i);
        if i == 1 {
            Err("boom")
        } else {
            Ok(true)
        }
    });
    assert!(r.is_err());
    assert_eq!(calls, vec![0, 1]);
    assert_eq!((d.deficit(0), d.deficit(1), d.len()), (0, 0, 2));
}

#[test]
fn limits_and_validation() {
    let mut spec = ClassConfig::new("a", 5, QueueOrder::Wspt);
    spec.limits.max_queued_requests = Some(1);
    spec.limits.max_queued_tokens = Some(10);
    let mut d: DrrQueue<u8> = DrrQueue::from_classes(vec![spec]).unwrap();
    assert!(matches!(
        d.push(0, 1, args(11)),
        Err(Error::QueueFull {
            limit: LimitKind::Tokens,
            current: 11,
            max: 10,
            ..
        })
    ));
    d.push(0, 1, args(4)).unwrap();
    assert!(matches!(
        d.push(0, 1, args(1)),
        Err(Error::QueueFull {
            limit: LimitKind::Requests,
            ..
        })
    ));
    let mut a = args(1);
    a.priority_jump = f64::NAN;
    assert!(d.push(0, 1, a).is_err());
    assert_eq!(d.len(), 1);
    assert!(
        DrrQueue::<u8>::from_classes(vec![ClassConfig::new("a", 0, QueueOrder::Fcfs)]).is_err()
    );
    assert!(DrrQueue::<u8>::from_classes(vec![
        ClassConfig::new("a", 1, QueueOrder::Fcfs),
        ClassConfig::new("a", 1, QueueOrder::Fcfs)
    ])
    .is_err());
    assert!(Snapshot::new(3, 4).is_err());
    assert_eq!(Snapshot::new(5, 5).unwrap().cost, 1);
}

#[test]
fn ordering_tiers_fcfs_wspt_and_remove() {
    let mut d: DrrQueue<u8> = DrrQueue::from_classes(vec![
        ClassConfig::new("f", 1000, QueueOrder::Fcfs),
        ClassConfig::new("w", 1000, QueueOrder::Wspt),
    ])
    .unwrap();
    let mk = |cost, tier, jump, arrival| PushArgs {
        snapshot: Snapshot::from_cost(cost),
        strict_priority: tier,
        priority_jump: jump,
        arrival,
    };
    d.push(0, 1, mk(1, 0, 0.0, 1.0)).unwrap();
    d.push(0, 2, mk(1, 0, 5.0, 3.0)).unwrap(); // effective -2
    d.push(0, 3, mk(1, 1, 0.0, 9.0)).unwrap(); // higher tier
    let t = d.push(1, 4, mk(100, 0, 0.0, 0.0)).unwrap();
    d.push(1, 5, mk(10, 0, 0.0, 0.0)).unwrap();
    d.push(1, 6, mk(100, 0, 9.0, 0.0)).unwrap(); // 10/100 == 1/10, later seq
    assert_eq!(d.head(0).unwrap().item, 3);
    assert_eq!(d.head(1).unwrap().item, 5);
    assert_eq!(d.remove(t).unwrap().1.item, 4);
    assert!(d.remove(t).is_err());
    let order: Vec<u8> = std::iter::from_fn(|| d.pop(&[]).map(|x| x.1.item)).collect();
    assert_eq!(order, vec![3, 2, 1, 5, 6]);
    assert!(d.is_empty());
}

// ------------------------------------------------ Dynamo-schema documents

fn s(x: &str) -> Value {
    Value::str(x)
}
fn i(x: i128) -> Value {
    Value::Int(x)
}
fn f(x: f64) -> Value {
    Value::Float(x)
}
fn l(v: Vec<Value>) -> Value {
    Value::List(v)
}
fn m(pairs: &[(&str, Value)]) -> Value {
    Value::map(pairs.iter().map(|(k, v)| (*k, v.clone())))
}

fn class(name: &str, family: Option<&str>, bucket: Option<&str>, quantum: i128) -> Value {
    let mut p = vec![("name", s(name)), ("quantum", i(quantum))];
    if let Some(fa) = family {
        p.push(("policy_family", s(fa)));
    }
    if let Some(b) = bucket {
        p.push(("cache_bucket", s(b)));
    }
    m(&p)
}

/// Two families x two buckets, an explicit class and a model profile.
fn dynamo_doc() -> Value {
    m(&[
        ("default_policy_family", s("standard")),
        (
            "uncached_isl_buckets",
            l(vec![
                m(&[("min_tokens", i(0)), ("bucket", s("warm"))]),
                m(&[("min_tokens", i(1024)), ("bucket", s("cold"))]),
            ]),
        ),
        (
            "policy_classes",
            l(vec![
                class("std-warm", Some("standard"), Some("warm"), 2048),
                class("std-cold", Some("standard"), Some("cold"), 512),
                class("batch-warm", Some("batch"), Some("warm"), 256),
                class("batch-cold", Some("batch"), Some("cold"), 128),
                class("ops", None, None, 1024),
            ]),
        ),
        (
            "models",
            m(&[(
                "llama",
                m(&[
                    ("default_policy_family", s("interactive")),
                    (
                        "uncached_isl_buckets",
                        l(vec![m(&[("min_tokens", i(0)), ("bucket", s("all"))])]),
                    ),
                    (
                        "policy_classes",
                        l(vec![class("only", Some("interactive"), Some("all"), 7)]),
                    ),
                ]),
            )]),
        ),
    ])
}

fn names(p: &PolicyProfile) -> Vec<&str> {
    p.classes.iter().map(|c| c.name.as_str()).collect()
}

fn cls(p: &PolicyProfile, fam: Option<&str>, u: u64) -> String {
    p.classes[p.classify(fam, u).unwrap()].name.clone()
}

#[test]
fn dynamo_profile_classifies_at_bucket_edges_with_fallback_and_explicit() {
    let p = resolve(&dynamo_doc(), None).unwrap();
    assert_eq!(p.schema, Schema::Dynamo);
    assert_eq!(
        names(&p),
        ["std-warm", "std-cold", "batch-warm", "batch-cold", "ops"]
    );
    assert_eq!(cls(&p, None, 0), "std-warm");
    assert_eq!(cls(&p, None, 1023), "std-warm");
    assert_eq!(cls(&p, None, 1024), "std-cold");
    assert_eq!(cls(&p, Some("batch"), 1023), "batch-warm");
    assert_eq!(cls(&p, Some("batch"), 1024), "batch-cold");
    assert_eq!(cls(&p, Some("batch"), u64::MAX), "batch-cold");
    // unknown, empty, or a matrix class's name: the default family
    assert_eq!(cls(&p, Some("nope"), 5000), "std-cold");
    assert_eq!(cls(&p, Some(""), 1), "std-warm");
    assert_eq!(cls(&p, Some("batch-cold"), 0), "std-warm");
    // an explicit class by its exact name, whatever the tokens
    assert_eq!(cls(&p, Some("ops"), 0), "ops");
    assert_eq!(cls(&p, Some("ops"), 1 << 40), "ops");
}

#[test]
fn model_profile_replaces_root_wholesale() {
    let doc = dynamo_doc();
    let p = resolve(&doc, Some("llama")).unwrap();
    assert_eq!(names(&p), ["only"]);
    assert_eq!(cls(&p, Some("standard"), 5000), "only");
    assert_eq!(cls(&p, Some("ops"), 0), "only"); // root's explicit class is gone
                                                 // a model without a profile gets the root
    assert_eq!(names(&resolve(&doc, Some("other")).unwrap())[0], "std-warm");
    // no root: the synthetic default class, which takes everything
    let Value::Map(pairs) = &doc else { panic!() };
    let rootless = Value::Map(
        pairs
            .iter()
            .filter(|(k, _)| k == "models")
            .cloned()
            .collect(),
    );
    let p = resolve(&rootless, Some("other")).unwrap();
    assert_eq!(names(&p), ["default"]);
    assert_eq!(cls(&p, Some("anything"), 9), "default");
    assert_eq!(names(&resolve(&rootless, Some("llama")).unwrap()), ["only"]);
}

/// Replace the value at `path` (keys and list indices) in a document.
fn with(doc: &Value, path: &[&str], v: Option<Value>) -> Value {
    let mut d = doc.clone();
    let mut cur = &mut d;
    for (n, key) in path.iter().enumerate() {
        let last = n + 1 == path.len();
        match cur {
            Value::Map(pairs) => {
                let pos = pairs.iter().position(|(k, _)| k == key);
                if last {
                    match (pos, v) {
                        (Some(p), Some(v)) => pairs[p].1 = v,
                        (None, Some(v)) => pairs.push((key.to_string(), v)),
                        (Some(p), None) => {
                            pairs.remove(p);
                        }
                        (None, None) => {}
                    }
                    return d;
                }
                cur = &mut pairs[pos.expect("path exists")].1;
            }
            Value::List(items) => {
                let k: usize = key.parse().unwrap();
                if last {
                    match v {
                        Some(v) => items[k] = v,
                        None => {
                            items.remove(k);
                        }
                    }
                    return d;
                }
                cur = &mut items[k];
            }
            _ => panic!("not a container at {key}"),
        }
    }
    d
}

fn err(doc: &Value) -> String {
    match resolve(doc, None) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn every_error_names_its_field() {
    let d = dynamo_doc();
    let pc = "policy_classes";
    let cases: Vec<(Value, &str)> = vec![
        (with(&d, &[pc, "2", "quantum"], Some(i(0))), "policy_classes[2].quantum must be an integer > 0, got 0"),
        (with(&d, &[pc, "2", "quantum"], Some(f(1.5))), "policy_classes[2].quantum must be an integer > 0, got 1.5"),
        (with(&d, &[pc, "2", "quantum"], None), "policy_classes[2].quantum is required"),
        (with(&d, &["models", "llama", pc, "0", "quantum"], Some(i(-1))), "models.llama.policy_classes[0].quantum must be an integer > 0"),
        (with(&d, &["models", "llama", pc, "0", "bogus"], Some(i(1))), "models.llama.policy_classes[0]: unknown field 'bogus'"),
        (with(&d, &["models", "llama", "extra"], Some(i(1))), "models.llama: unknown field 'extra'"),
        (with(&d, &["models", "llama", "default_policy_family"], None), "models.llama.default_policy_family is required"),
        (with(&d, &[pc, "0", "queue_policy"], Some(s("lcfs"))), "policy_classes[0].queue_policy must be 'fcfs' or 'wspt', got 'lcfs'"),
        (with(&d, &[pc, "0", "max_queued_requests"], Some(i(3))), "policy_classes[0]: unknown field 'max_queued_requests'"),
        (with(&d, &[pc, "0", "name"], Some(s("a b"))), "policy_classes[0].name 'a b' must match [A-Za-z0-9_.-]+"),
        (with(&d, &[pc, "1", "name"], Some(s("std-warm"))), "policy_classes[1].name 'std-warm' is a duplicate class name"),
        (with(&d, &[pc, "1", "cache_bucket"], None), "policy_classes[1] must specify both policy_family and cache_bucket"),
        (with(&d, &[pc, "1", "cache_bucket"], Some(s("hot"))), "policy_classes[1].cache_bucket 'hot' is not a configured cache bucket"),
        (with(&d, &[pc, "1", "cache_bucket"], Some(s("warm"))), "policy_classes[1] has policy_family 'standard' x cache_bucket 'warm', which already has class 'std-warm'"),
        (with(&d, &[pc, "3"], None), "policy_family 'batch' x cache_bucket 'cold' has no class"),
        (with(&d, &[pc, "4", "name"], Some(s("batch"))), "policy_classes[4].name 'batch' names an explicit class"),
        (with(&d, &[pc], Some(l(vec![]))), "policy_classes must be a non-empty list"),
        (with(&d, &["default_policy_family"], Some(s("premium"))), "default_policy_family 'premium' is not the policy_family of any class"),
        (with(&d, &["default_policy_family"], None), "default_policy_family is missing"),
        (with(&d, &["uncached_isl_buckets", "0", "min_tokens"], Some(i(5))), "uncached_isl_buckets[0].min_tokens must be 0"),
        (with(&d, &["uncached_isl_buckets", "1", "min_tokens"], Some(i(0))), "uncached_isl_buckets[1].min_tokens must be strictly greater than 0"),
        (with(&d, &["uncached_isl_buckets", "1", "bucket"], Some(s("warm"))), "uncached_isl_buckets[1].bucket 'warm' is a duplicate bucket name"),
        (with(&d, &["uncached_isl_buckets", "1", "name"], Some(s("x"))), "uncached_isl_buckets[1]: unknown field 'name'"),
        (with(&d, &["uncached_isl_buckets"], Some(l(vec![]))), "uncached_isl_buckets must be a non-empty list"),
        (with(&d, &[pc, "0", "prefill_busy_threshold_frac"], Some(f(-1.0))), "policy_classes[0].prefill_busy_threshold_frac must be a finite number >= 0"),
        (with(&d, &[pc, "0", "prefill_busy_threshold"], Some(i(-3))), "policy_classes[0].prefill_busy_threshold must be an integer >= 0"),
        (with(&d, &[pc, "0", "busy_worker_ratio"], Some(f(0.5))), "policy_classes[0].busy_worker_ratio needs prefill_busy_threshold"),
        (with(&with(&d, &[pc, "0", "busy_worker_ratio"], Some(f(16.0))), &[pc, "0", "prefill_busy_threshold"], Some(i(1))), "policy_classes[0].busy_worker_ratio must be a fraction"),
        (with(&d, &[pc, "0", "request_queue_limit_per_worker"], Some(s("many"))), "policy_classes[0].request_queue_limit_per_worker must be an integer >= 0, got 'many'"),
        (with(&d, &[pc, "0", "raw_isl_token_queue_limit_per_worker"], Some(Value::BigInt("2**70".into()))), "policy_classes[0].raw_isl_token_queue_limit_per_worker must be an integer >= 0 (at most 2**64-1)"),
        (with(&d, &[pc, "0", "cached_token_queue_limit_per_worker"], Some(f(1.0))), "policy_classes[0].cached_token_queue_limit_per_worker must be an integer >= 0"),
        (with(&d, &["default_family"], Some(s("standard"))), "mixes fairq's schema"),
        (with(&d, &["nonsense"], Some(i(1))), "unknown field 'nonsense'"),
        (with(&d, &["models"], Some(i(1))), "models must be a mapping"),
        (m(&[("models", m(&[]))]), "must define a root profile"),
    ];
    for (doc, want) in cases {
        let got = err(&doc);
        assert!(got.contains(want), "want {want:?} in {got:?}");
    }
    assert!(matches!(resolve(&i(3), None), Err(Error::Type(_))));
    // worker_selection alone is accepted (not interpreted): synthetic profile
    let ws = m(&[("worker_selection", m(&[]))]);
    assert_eq!(names(&resolve(&ws, None).unwrap()), ["default"]);
}

#[test]
fn fairq_schema_is_still_read_and_strict() {
    let doc = m(&[
        ("default_family", s("std")),
        (
            "cache_buckets",
            l(vec![
                m(&[("name", s("hot")), ("min_tokens", i(0))]),
                m(&[("name", s("cold")), ("min_tokens", i(100))]),
            ]),
        ),
        (
            "policy_classes",
            l(vec![
                class("h", Some("std"), Some("hot"), 4),
                class("c", Some("std"), Some("cold"), 8),
                class("x", None, None, 1),
            ]),
        ),
    ]);
    let p = resolve(&doc, None).unwrap();
    assert_eq!(p.schema, Schema::Fairq);
    assert_eq!(cls(&p, None, 99), "h");
    assert_eq!(cls(&p, Some("std"), 100), "c");
    assert!(matches!(p.classify(Some("nope"), 1), Err(Error::Key(_))));
    assert!(matches!(p.classify(Some("x"), 1), Err(Error::Key(_))));
    assert!(resolve(&doc, Some("llama"))
        .unwrap_err()
        .to_string()
        .contains("no models"));
}

// ------------------------------------------------------------- limits

fn limited(per_worker: Limits) -> DrrQueue<u32> {
    let mut c = ClassConfig::new("a", 10, QueueOrder::Fcfs);
    c.limits = per_worker;
    DrrQueue::from_classes(vec![c]).unwrap()
}

fn snap(raw: u64, cached: u64) -> PushArgs {
    PushArgs {
        snapshot: Snapshot::new(raw, cached).unwrap(),
        strict_priority: 0,
        priority_jump: 0.0,
        arrival: 0.0,
    }
}

#[test]
fn request_limit_scales_with_workers_at_run_time() {
    let mut d = limited(Limits {
        request_queue_limit_per_worker: Some(2),
        ..Limits::default()
    });
    assert_eq!(d.num_workers(), 1);
    d.push(0, 1, args(1)).unwrap();
    d.push(0, 2, args(1)).unwrap();
    let e = d.push(0, 3, args(1)).unwrap_err();
    assert_eq!(
        e,
        Error::QueueFull {
            class_name: "a".into(),
            limit: LimitKind::RequestsPerWorker,
            current: 2,
            max: 2
        }
    );
    assert_eq!(d.len(), 2);
    d.set_num_workers(3);
    for k in 3..7 {
        d.push(0, k, args(1)).unwrap();
    }
    assert!(d.push(0, 7, args(1)).is_err()); // 6 = 2 x 3
    d.set_num_workers(1); // shrinking evicts nothing; pushes refuse until it drains
    assert_eq!(d.len(), 6);
    assert!(d.push(0, 8, args(1)).is_err());
    for _ in 0..5 {
        d.pop(&[]).unwrap();
    }
    d.push(0, 9, args(1)).unwrap();
    d.set_num_workers(0);
    assert!(d.push(0, 10, args(1)).is_err());
}

#[test]
fn token_limits_compare_usage_before_the_push() {
    let mut d = limited(Limits {
        raw_isl_token_queue_limit_per_worker: Some(100),
        cached_token_queue_limit_per_worker: Some(50),
        ..Limits::default()
    });
    d.set_num_workers(2); // raw 200, cached 100
    d.push(0, 1, snap(150, 0)).unwrap();
    d.push(0, 2, snap(150, 0)).unwrap(); // crosses 200: accepted (usage was 150)
    let e = d.push(0, 3, snap(1, 0)).unwrap_err();
    assert!(matches!(
        e,
        Error::QueueFull {
            limit: LimitKind::RawIslTokensPerWorker,
            current: 300,
            max: 200,
            ..
        }
    ));
    let (_, e1) = d.pop(&[]).unwrap();
    assert_eq!(e1.item, 1);
    d.pop(&[]).unwrap();
    d.push(0, 4, snap(120, 120)).unwrap();
    let e = d.push(0, 5, snap(10, 0)).unwrap_err();
    assert!(matches!(
        e,
        Error::QueueFull {
            limit: LimitKind::CachedTokensPerWorker,
            current: 120,
            max: 100,
            ..
        }
    ));
    assert_eq!(d.stats(0).queued_cached_tokens, 120);
    assert_eq!(d.stats(0).queued_raw_isl_tokens, 120);
    // a zero limit refuses everything (Dynamo's shed)
    let mut z = limited(Limits {
        request_queue_limit_per_worker: Some(0),
        ..Limits::default()
    });
    assert!(z.push(0, 1, args(1)).is_err());
}

// --------------------------------------------------------- dispatchability

fn rule(abs: Option<u64>, frac: Option<f64>, ratio: Option<f64>) -> BusyRule {
    BusyRule {
        prefill_busy_threshold: abs,
        prefill_busy_threshold_frac: frac,
        busy_worker_ratio: ratio,
    }
}

#[test]
fn busy_rule_thresholds_and_pool_ratio() {
    let r = rule(Some(10), Some(0.5), None);
    assert!(r.worker_is_busy(11, 10_000_000)); // absolute
    assert!(r.worker_is_busy(6, 10)); // fractional: 6 > 5
    assert!(!r.worker_is_busy(5, 10) && !r.worker_is_busy(10, 100));
    assert!(!r.pool_is_busy(127, 128) && r.pool_is_busy(128, 128));
    let r = rule(Some(0), None, Some(0.95));
    assert!(!r.pool_is_busy(121, 128) && r.pool_is_busy(122, 128));
    assert!(!r.pool_is_busy(1, 2) && r.pool_is_busy(2, 2));
    assert!(!r.pool_is_busy(0, 0) && !rule(Some(0), None, None).pool_is_busy(0, 0));
    assert!(!rule(None, None, None).worker_is_busy(u64::MAX, 0));
}

fn gated() -> DrrQueue<u32> {
    let mut a = ClassConfig::new("abs", 10, QueueOrder::Fcfs);
    a.busy = rule(Some(100), None, None);
    let mut b = ClassConfig::new("frac", 10, QueueOrder::Fcfs);
    b.busy = rule(None, Some(2.0), Some(0.5));
    let c = ClassConfig::new("free", 10, QueueOrder::Fcfs);
    let mut d = ClassConfig::new("abs2", 10, QueueOrder::Fcfs);
    d.busy = rule(Some(100), None, None); // same rule as "abs": shared
    let mut q = DrrQueue::from_classes(vec![a, b, c, d]).unwrap();
    for k in 0..4 {
        q.push(k as usize, k, args(5)).unwrap();
    }
    q
}

fn pop_load(q: &mut DrrQueue<u32>, t: &[u64], m: MaxBatched<'_>) -> Option<u32> {
    let load = LoadSnapshot::new(t, m).unwrap();
    let r: crate::error::Result<_> = q.pop_with_load(&load, &[], |_, _| Ok(true));
    r.unwrap().map(|(_, e)| e.item)
}

#[test]
fn pop_with_load_blocks_busy_pools() {
    // every worker above 100 tokens: "abs" and "abs2" blocked; frac: 2*50 = 100,
    // busy workers 3 of 3 >= 0.5*3: blocked too; "free" dispatches
    let mut q = gated();
    assert_eq!(
        pop_load(&mut q, &[150, 101, 200], MaxBatched::Same(50)),
        Some(2)
    );
    assert_eq!(q.deficit(0), 0, "blocked classes earn no credit");
    // one worker idle for "abs": the cursor is on "abs2", which shares
    // its rule (evaluated once): not all busy -> abs2 dispatches
    assert_eq!(
        pop_load(&mut q, &[150, 100, 200], MaxBatched::Same(50)),
        Some(3)
    );
    // all above 100 and above 2 * 150: "abs" and "frac" (3 of 3 >= 1.5) blocked
    let per = [150u64, 150, 150];
    assert_eq!(
        pop_load(&mut q, &[301, 301, 301], MaxBatched::PerWorker(&per)),
        None
    );
    assert_eq!((q.deficit(0), q.deficit(1)), (0, 0));
    // "abs" open again (two idle workers)
    assert_eq!(
        pop_load(&mut q, &[301, 10, 10], MaxBatched::PerWorker(&per)),
        Some(0)
    );
    // frac with busy_worker_ratio 0.5: 2 of 3 busy >= 1.5 -> blocked; 1 of 3 -> open
    assert_eq!(
        pop_load(&mut q, &[301, 301, 10], MaxBatched::PerWorker(&per)),
        None
    );
    assert_eq!(
        pop_load(&mut q, &[301, 10, 10], MaxBatched::PerWorker(&per)),
        Some(1)
    );
    // no eligible worker: nothing blocks (the caller reports its error)
    q.push(0, 9, args(5)).unwrap();
    assert_eq!(pop_load(&mut q, &[], MaxBatched::Unknown), Some(9));
    assert!(q.is_empty());
}

#[test]
fn pop_with_load_validates_before_changing_anything() {
    let mut q = gated();
    let t = [1u64, 2];
    let load = LoadSnapshot::new(&t, MaxBatched::Unknown).unwrap();
    let r: crate::error::Result<_> = q.pop_with_load(&load, &[], |_, _| Ok(true));
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("max_num_batched_tokens is required"));
    assert_eq!(q.len(), 4);
    assert!(LoadSnapshot::new(&t, MaxBatched::PerWorker(&[1])).is_err());
}
