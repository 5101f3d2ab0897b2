//! Unit tests of the local schedulers (every policy through the facade).

use super::*;
use crate::value::Value;

fn ids<T>(v: &[Admission<T>]) -> Vec<RequestId> {
    v.iter().map(|a| a.id.clone()).collect()
}
fn int(i: i64) -> RequestId {
    RequestId::Int(i)
}
/// Add request `int(id)` of `client` with prompt `toks` (no item, the
/// default namespace); it must be accepted.
fn add(
    s: &mut LocalScheduler<()>,
    tree: Option<&mut RadixTree>,
    id: i64,
    client: &str,
    toks: Vec<u32>,
) {
    s.add(tree, int(id), client, toks, (), Namespace::Default)
        .unwrap();
}

#[test]
fn lpm_order_and_skip() {
    let mut t = RadixTree::new(None, 1).unwrap();
    let ns = Namespace::Default;
    t.insert(&ns, &[1, 2, 3, 4]);
    let mut s = LocalScheduler::new(Policy::Lpm).unwrap();
    add(&mut s, Some(&mut t), 0, "a", vec![9, 9]);
    add(&mut s, Some(&mut t), 1, "a", vec![1, 2, 7]);
    add(&mut s, Some(&mut t), 2, "b", vec![1, 2, 3, 4, 5]);
    add(&mut s, Some(&mut t), 3, "b", vec![7; 50]);
    let adm = s.schedule(Some(&t), 10, None).unwrap();
    assert_eq!(ids(&adm), vec![int(2), int(1), int(0)]);
    assert_eq!(adm[0].cached_len, 4);
    assert_eq!(s.len(), 1);
    assert_eq!(s.num_running(), 3);
    assert!(s
        .add(Some(&mut t), int(2), "b", vec![], (), ns.clone())
        .is_err());
    // an empty prompt is refused, and nothing changes
    let e = s
        .add(Some(&mut t), int(9), "c", vec![], (), ns)
        .unwrap_err();
    assert!(e.to_string().contains("prompt is empty"), "{e}");
    assert_eq!((s.len(), s.num_running()), (1, 3));
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
            quantum_scale: 0.0,
            strict_credit: 0.0,
        })
        .unwrap();
        let mut id = 0;
        for _ in 0..3000 {
            let len = 1 + (next() % 9) as usize; // a prompt has at least one token
            let toks: Vec<u32> = (0..len).map(|_| (next() % 3) as u32).collect();
            match next() % 5 {
                0 => {
                    let c = ["a", "b", "c"][(next() % 3) as usize];
                    add(&mut s, Some(&mut t), id, c, toks);
                    id += 1;
                }
                1 => {
                    t.insert(&ns, &toks);
                }
                2 => {
                    if next() % 2 == 0 {
                        t.evict((next() % 8) as usize);
                    } else {
                        let keep = (next() % 6) as usize;
                        t.truncate(&ns, &toks, keep).unwrap();
                    }
                }
                3 => {
                    for a in s.schedule(Some(&t), (next() % 12) as usize, None).unwrap() {
                        if next() % 4 == 0 {
                            // the engine skipped or preempted it
                            let refund = next() % 2 == 0;
                            s.requeue(Some(&mut t), &a.id, toks.clone(), (), refund)
                                .unwrap();
                        } else {
                            s.finish(&a.id).unwrap();
                        }
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
    add(&mut v, None, 1, "a", vec![0; 10]);
    add(&mut v, None, 2, "a", vec![0; 10]);
    v.schedule(None, 10, None).unwrap();
    v.charge_output(&int(1), 5).unwrap();
    add(&mut v, None, 3, "b", vec![0; 4]);
    assert_eq!(v.counter("b"), 20.0);

    let mut t = RadixTree::new(None, 1).unwrap();
    let mut d: LocalScheduler<()> = LocalScheduler::new(Policy::Dlpm {
        quantum: 5.0,
        w_e: 1.0,
        w_q: 2.0,
        quantum_scale: 0.0,
        strict_credit: 0.0,
    })
    .unwrap();
    add(&mut d, Some(&mut t), 1, "a", vec![1; 4]);
    add(&mut d, Some(&mut t), 2, "a", vec![1; 4]);
    add(&mut d, Some(&mut t), 3, "b", vec![2; 4]);
    let adm = d.schedule(Some(&t), 100, None).unwrap();
    assert_eq!(ids(&adm), vec![int(1), int(2), int(3)]);
    assert_eq!(d.deficit("a"), -3.0);
    assert_eq!(d.deficit("b"), 1.0);
    assert_eq!(d.refills(), 1);
    d.check_invariants(Some(&t));
}

#[test]
fn dlpm_extreme_weights_saturate() {
    let mut d = LocalScheduler::new(Policy::Dlpm {
        quantum: 1.0,
        w_e: 1e308,
        w_q: 1e308,
        quantum_scale: 0.0,
        strict_credit: 0.0,
    })
    .unwrap();
    let mut t = RadixTree::new(None, 1).unwrap();
    add(&mut d, Some(&mut t), 1, "x", vec![1; 10]);
    d.schedule(Some(&t), 100, None).unwrap();
    assert_eq!(d.deficit("x"), f64::MIN);
    d.charge_output(&RequestId::Int(1), 1000).unwrap();
    assert_eq!(d.deficit("x"), f64::MIN);
    // recharging down from an overflowed charge: no inf - inf
    d.recharge_extend(&RequestId::Int(1), 0).unwrap();
    assert!(d.deficit("x").is_finite());
    d.recharge_extend(&RequestId::Int(1), 10).unwrap();
    assert!(d.deficit("x").is_finite());
    add(&mut d, Some(&mut t), 2, "x", vec![2; 3]);
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
        quantum_scale: 0.0,
        strict_credit: 0.0,
    })
    .unwrap()
}

#[test]
fn dlpm_small_quantum_is_work_conserving() {
    let mut t = RadixTree::new(None, 1).unwrap();
    let mut d = dlpm(1e-3);
    let mut l: LocalScheduler<()> = LocalScheduler::new(Policy::Lpm).unwrap();
    for i in 0..30 {
        let toks: Vec<u32> = (0..10).map(|j| (i * 100 + j) as u32).collect();
        let c = ["a", "b", "c"][i % 3];
        add(&mut d, Some(&mut t), i as i64, c, toks.clone());
        add(&mut l, Some(&mut t), i as i64, c, toks);
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

/// DLPM with `quantum` over a fresh tree, holding a0 = [1; 4], a1 = [2; 4]
/// and b2 = [3; `b_len`], none admitted.
fn dlpm_a_a_b(quantum: f64, b_len: usize) -> (RadixTree, LocalScheduler<()>) {
    let dlpm = Policy::Dlpm {
        quantum,
        w_e: 1.0,
        w_q: 2.0,
        quantum_scale: 0.0,
        strict_credit: 0.0,
    };
    holding(
        dlpm,
        &[("a", vec![1; 4]), ("a", vec![2; 4]), ("b", vec![3; b_len])],
    )
}

/// A scheduler of `policy` over a fresh tree (page 1) holding each
/// `(client, prompt)` of `requests` as request `int(i)` at index `i`, none
/// admitted.
fn holding(policy: Policy, requests: &[(&str, Vec<u32>)]) -> (RadixTree, LocalScheduler<()>) {
    let mut t = RadixTree::new(None, 1).unwrap();
    let mut s = LocalScheduler::new(policy).unwrap();
    for (i, (client, toks)) in requests.iter().enumerate() {
        add(&mut s, Some(&mut t), i as i64, client, toks.clone());
    }
    (t, s)
}

#[test]
fn dlpm_strict_credit_does_not_start_a_request_on_crumbs() {
    // a0, a1 of a cost 8 each, b2 of b costs 8; quantum 10
    let requests = [("a", vec![1; 8]), ("a", vec![2; 8]), ("b", vec![3; 8])];
    let policy = |strict_credit| Policy::Dlpm {
        quantum: 10.0,
        w_e: 1.0,
        w_q: 2.0,
        quantum_scale: 0.0,
        strict_credit,
    };
    // the paper's rule: a1 is admitted on a's 2 left after a0 (a: -6)
    let (t, mut d) = holding(policy(0.0), &requests);
    let adm = d.schedule(Some(&t), 100, None).unwrap();
    assert_eq!(ids(&adm), vec![int(0), int(1), int(2)]);
    assert_eq!(
        (d.deficit("a"), d.deficit("b"), d.refills()),
        (-6.0, 2.0, 1)
    );
    // strict credit: a's 2 do not cover a1 (8), so b2 goes first; then
    // only a waits, with credit that covers nothing: one refill round
    // (a: 2 + 10 = 12 > 8; b, idle with q > 0, gets nothing) and a1 (a: 4)
    let (t, mut d) = holding(policy(1.0), &requests);
    let adm = d.schedule(Some(&t), 100, None).unwrap();
    assert_eq!(ids(&adm), vec![int(0), int(2), int(1)]);
    assert_eq!((d.deficit("a"), d.deficit("b"), d.refills()), (4.0, 2.0, 2));
    d.check_invariants(Some(&t));
    // a request its client's credit covers but the budget does not blocks
    // that refill, as under the paper's rule; the oversize rule admits it
    let (t, mut d) = holding(
        policy(1.0),
        &[("a", vec![1; 3]), ("a", vec![2; 9]), ("b", vec![3; 8])],
    );
    // refill (+10 each); a0 (a: 7); a1 (9) not covered; b2 (8) covered, does not fit 7 left
    let adm = d.schedule(Some(&t), 10, None).unwrap();
    assert_eq!(ids(&adm), vec![int(0)]);
    assert_eq!(d.refills(), 1);
    let adm = d.schedule(Some(&t), 4, None).unwrap();
    assert_eq!(ids(&adm), vec![int(2)]);
    assert_eq!(d.refills(), 1);
    // now only a (7) waits, a1 costs 9: one round (17), admitted (a: 8)
    let adm = d.schedule(Some(&t), 10, None).unwrap();
    assert_eq!(ids(&adm), vec![int(1)]);
    assert_eq!((d.deficit("a"), d.refills()), (8.0, 2));
    d.check_invariants(Some(&t));
    // a bad value is refused naming the option
    let e = LocalScheduler::<()>::new(policy(0.5)).unwrap_err();
    assert!(
        e.to_string().contains("strict_credit must be 0 or 1"),
        "{e}"
    );
}

#[test]
fn dlpm_credit_client_that_does_not_fit_blocks_refills_for_one_call() {
    // Theorem 4.1 needs refills only when every waiting client has
    // q <= 0: a client with credit whose requests do not fit blocks them,
    // until the oversize rule admits its request alone.
    let (mut t, mut d) = dlpm_a_a_b(5.0, 50);
    // refill (+5 each); a0 admitted (a: 1); a1 admitted (a: -3);
    // b2 does not fit; b keeps q = 5 and no refill is allowed
    let adm = d.schedule(Some(&t), 10, None).unwrap();
    assert_eq!(ids(&adm), vec![int(0), int(1)]);
    add(&mut d, Some(&mut t), 3, "a", vec![4; 2]);
    // a3 fits but a has no credit and b (credit) does not fit: with the
    // oversize rule off, nothing, and no refill
    let off = d.schedule_step(Some(&t), 10, None, Some(0), true).unwrap();
    assert!(off.is_empty());
    assert_eq!(d.refills(), 1);
    // with it on (the default), b2 (50 > 10: it never fits) goes alone,
    // charged as usual: b: 5 - 50
    let adm = d.schedule(Some(&t), 10, None).unwrap();
    assert_eq!(ids(&adm), vec![int(2)]);
    assert_eq!(adm[0].extend_len, 50);
    assert_eq!(d.deficit("b"), -45.0);
    assert_eq!(d.refills(), 1);
    d.check_invariants(Some(&t));
    // no waiting client has credit: one refill (a: 2, b: -40), then a3
    let adm = d.schedule(Some(&t), 10, None).unwrap();
    assert_eq!(ids(&adm), vec![int(3)]);
    assert_eq!(d.refills(), 2);
    assert_eq!((d.deficit("a"), d.deficit("b")), (0.0, -40.0));
    d.check_invariants(Some(&t));
}

/// Every policy: [`four_policies`] with DLPM's quantum 5, and LAS.
fn all_policies() -> [Policy; 5] {
    let [fcfs, lpm, vtc, dlpm] = four_policies(1.0, 5.0);
    let las = Policy::Las {
        half_life_s: 60.0,
        w_in: 1.0,
        w_out: 2.0,
    };
    [fcfs, lpm, vtc, dlpm, las]
}

/// FCFS, LPM, VTC and DLPM with input weight `w_in` (DLPM's `w_e`), output
/// weight 2 and DLPM's `quantum`.
fn four_policies(w_in: f64, quantum: f64) -> [Policy; 4] {
    [
        Policy::Fcfs,
        Policy::Lpm,
        Policy::Vtc { w_in, w_out: 2.0 },
        Policy::Dlpm {
            quantum,
            w_e: w_in,
            w_q: 2.0,
            quantum_scale: 0.0,
            strict_credit: 0.0,
        },
    ]
}

#[test]
fn oversize_request_is_admitted_alone_in_every_policy() {
    // a's 100-token request arrives first; b's three 3-token requests after
    // it; budget 10. The big one never fits a step: each policy admits it
    // alone in a call that admits nothing else, and nobody waits forever.
    for policy in all_policies() {
        let b = |i| ("b", vec![i; 3]);
        let (t, mut s) = holding(policy, &[("a", vec![9; 100]), b(1), b(2), b(3)]);
        let mut calls = Vec::new();
        while !s.is_empty() {
            let adm = s.schedule(Some(&t), 10, None).unwrap();
            assert!(!adm.is_empty(), "{policy:?}: a call admitted nothing");
            let extend: usize = adm.iter().map(|a| a.extend_len).sum();
            assert!(extend <= 10 || adm.len() == 1, "{policy:?}");
            calls.push(ids(&adm));
            s.check_invariants(Some(&t));
        }
        let want: Vec<Vec<RequestId>> = match policy {
            // the head goes alone, then the rest fits
            Policy::Fcfs => vec![vec![int(0)], vec![int(1), int(2), int(3)]],
            // a (counter 0, first seen) first: alone; then b
            Policy::Vtc { .. } => vec![vec![int(0)], vec![int(1), int(2), int(3)]],
            // what fits first; the big one when nothing else is left
            Policy::Lpm => vec![vec![int(1), int(2), int(3)], vec![int(0)]],
            // refill (+5 each); b1 (b: 2), b2 (b: -1); a has credit, but its
            // request never fits and b3's turn needs a refill: alone, a
            // goes to 5 - 100; then both are refilled (a: -90, b: 4) and b3
            // goes (b: 1)
            Policy::Dlpm { .. } => vec![vec![int(1), int(2)], vec![int(0)], vec![int(3)]],
            // a (0, first seen) first: alone, then b (0 < 100)
            Policy::Las { .. } => vec![vec![int(0)], vec![int(1), int(2), int(3)]],
        };
        assert_eq!(calls, want, "{policy:?}");
        match policy {
            Policy::Vtc { .. } => assert_eq!(s.counter("a"), 100.0),
            Policy::Dlpm { .. } => {
                assert_eq!(s.deficit("a"), -90.0);
                assert_eq!(s.deficit("b"), 1.0);
                assert_eq!(s.refills(), 2);
            }
            _ => {}
        }
        assert_eq!(s.service("a"), 100.0);
    }
}

#[test]
fn oversize_rule_only_when_a_call_admits_nothing() {
    // What only misses what is left after other admissions keeps waiting
    // (FCFS: and stops the walk, as before); the rule needs a free slot.
    for policy in all_policies() {
        let a = [("a", vec![1; 6]), ("a", vec![2; 8]), ("a", vec![3; 30])];
        let (t, mut s) = holding(policy, &a);
        assert!(s.schedule(Some(&t), 10, Some(0)).unwrap().is_empty());
        // 6 fits, then neither 8 nor 30 fits the 4 left: they wait
        let adm = s.schedule(Some(&t), 10, None).unwrap();
        assert_eq!(ids(&adm), vec![int(0)], "{policy:?}");
        let adm = s.schedule(Some(&t), 10, None).unwrap();
        assert_eq!(ids(&adm), vec![int(1)], "{policy:?}");
        let adm = s.schedule(Some(&t), 10, None).unwrap();
        assert_eq!(ids(&adm), vec![int(2)], "{policy:?}");
        assert!(s.schedule(Some(&t), 10, None).unwrap().is_empty());
    }
}

#[test]
fn oversize_budget_caps_the_rule_or_turns_it_off() {
    for policy in all_policies() {
        for refill in [true, false] {
            let (t, mut s) = holding(policy, &[("a", vec![1; 40]), ("b", vec![2; 20])]);
            if !refill {
                // DLPM: nobody has credit yet and this call must not refill
                let adm = s.schedule_step(Some(&t), 10, None, None, false).unwrap();
                if matches!(policy, Policy::Dlpm { .. }) {
                    assert!(adm.is_empty());
                    assert_eq!(s.refills(), 0);
                    continue;
                }
                assert_eq!(ids(&adm), vec![int(0)], "{policy:?}");
                continue;
            }
            let step = |s: &mut LocalScheduler<()>, room| {
                ids(&s
                    .schedule_step(Some(&t), 10, Some(5), room, refill)
                    .unwrap())
            };
            // off: nothing; a cap below every request: nothing
            assert!(step(&mut s, Some(0)).is_empty(), "{policy:?}");
            assert!(step(&mut s, Some(10)).is_empty(), "{policy:?}");
            assert!(step(&mut s, Some(19)).is_empty(), "{policy:?}");
            // a cap of 30: the policy's next request within it. FCFS and VTC
            // stop at their head (40 > 30); LPM and DLPM skip to the 20
            let got = step(&mut s, Some(30));
            match policy {
                Policy::Fcfs | Policy::Vtc { .. } | Policy::Las { .. } => {
                    assert!(got.is_empty(), "{policy:?}")
                }
                _ => assert_eq!(got, vec![int(1)], "{policy:?}"),
            }
            // unlimited: one request, alone
            assert_eq!(step(&mut s, None).len(), 1, "{policy:?}");
            s.check_invariants(Some(&t));
        }
    }
}

#[test]
fn max_prompt_tokens_rejects_at_add_and_changes_nothing() {
    let ns = Namespace::Default;
    for policy in all_policies() {
        let mut t = RadixTree::new(None, 1).unwrap();
        let mut s: LocalScheduler<()> = LocalScheduler::new(policy).unwrap();
        assert_eq!(s.max_prompt_tokens(), None);
        s.set_max_prompt_tokens(Some(8));
        add(&mut s, Some(&mut t), 0, "a", vec![1; 8]);
        // request "big" of client b, `len` tokens
        let big = |s: &mut LocalScheduler<()>, t: &mut RadixTree, len| {
            s.add(
                Some(t),
                RequestId::from("big"),
                "b",
                vec![2; len],
                (),
                ns.clone(),
            )
        };
        let err = big(&mut s, &mut t, 9).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Value(_)), "{policy:?}");
        assert!(
            msg.contains("request_id \"big\"") && msg.contains("max_prompt_tokens = 8"),
            "{msg}"
        );
        assert_eq!(
            (s.len(), s.num_clients(), s.clients()),
            (1, 1, vec!["a".to_string()])
        );
        s.check_invariants(Some(&t));
        // the id is free: it may come back shorter
        big(&mut s, &mut t, 3).unwrap();
        assert_eq!(s.schedule(Some(&t), 11, None).unwrap().len(), 2);
        // an engine setting, not fairness state: a load keeps it
        let mut fresh: LocalScheduler<()> = LocalScheduler::new(policy).unwrap();
        fresh.set_max_prompt_tokens(Some(3));
        fresh.load_state(&s.state().unwrap()).unwrap();
        assert_eq!(fresh.max_prompt_tokens(), Some(3));
    }
}

#[test]
fn recharge_extend_replaces_the_admission_charge() {
    let ns = Namespace::Default;
    for policy in four_policies(1.5, 100.0) {
        let mut t = RadixTree::new(None, 1).unwrap();
        t.insert(&ns, &[1, 2, 3, 4]);
        let mut s = LocalScheduler::new(policy).unwrap();
        s.set_weight("a", 2.0).unwrap();
        add(&mut s, Some(&mut t), 0, "a", vec![1, 2, 3, 4, 5, 6]);
        add(&mut s, Some(&mut t), 1, "a", vec![9; 3]);
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
    let (t, mut d) = dlpm_a_a_b(4.0, 4);
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

#[test]
fn state_round_trip_restores_counters_and_running_requests() {
    let mut t = RadixTree::new(None, 1).unwrap();
    let mut s = LocalScheduler::new(Policy::Dlpm {
        quantum: 4.0,
        w_e: 1.0,
        w_q: 2.0,
        quantum_scale: 0.0,
        strict_credit: 0.0,
    })
    .unwrap();
    s.set_weight("a", 2.0).unwrap();
    add(&mut s, Some(&mut t), 1, "a", vec![1, 2, 3]);
    add(&mut s, Some(&mut t), 2, "b", vec![4, 5]);
    s.schedule(Some(&t), 100, None).unwrap();
    s.charge_output(&int(2), 3).unwrap();
    let state = s.state().unwrap();

    let mut r = LocalScheduler::<()>::new(Policy::Dlpm {
        quantum: 1.0,
        w_e: 1.0,
        w_q: 1.0,
        quantum_scale: 0.0,
        strict_credit: 0.0,
    })
    .unwrap();
    r.load_state(&state).unwrap();
    assert_eq!(r.state().unwrap(), state);
    assert_eq!(r.policy(), s.policy());
    assert_eq!(r.num_running(), 2);
    assert_eq!(r.deficit("a"), s.deficit("a"));
    assert_eq!(r.weight("a"), 2.0);
    assert_eq!(r.refills(), s.refills());
    r.finish(&int(1)).unwrap();
    assert_eq!(r.running_of("a"), 0);
}

#[test]
fn bad_state_names_its_field_and_changes_nothing() {
    let mut s = LocalScheduler::<()>::new(Policy::Vtc {
        w_in: 1.0,
        w_out: 2.0,
    })
    .unwrap();
    add(&mut s, None, 1, "a", vec![1]);
    let good = s.state().unwrap();
    let Value::Map(mut pairs) = good.clone() else {
        panic!("a state is a mapping")
    };
    for (k, v) in pairs.iter_mut() {
        if k == "clients" {
            *v = Value::List(vec![Value::map([
                ("name", Value::str("a")),
                ("weight", Value::Float(1.0)),
                ("service", Value::Float(0.0)),
                ("waiting", Value::Int(0)),
                ("admitted", Value::Int(0)),
                ("counter", Value::Float(f64::NAN)),
            ])]);
        }
    }
    let mut fresh = LocalScheduler::<()>::new(Policy::Vtc {
        w_in: 1.0,
        w_out: 2.0,
    })
    .unwrap();
    let err = fresh.load_state(&Value::Map(pairs)).unwrap_err();
    assert!(err.to_string().contains("clients[0].counter"), "{err}");
    assert!(fresh.clients().is_empty());
    // a scheduler holding requests refuses any state
    let err = s.load_state(&good).unwrap_err();
    assert!(err.to_string().contains("no requests"), "{err}");
}

/// A policy's observable accounting: per-client (service, counter, deficit),
/// and the waiting / running counts.
fn accounting<T>(s: &LocalScheduler<T>, clients: &[&str]) -> Vec<(f64, f64, f64)> {
    clients
        .iter()
        .map(|c| (s.service(c), s.counter(c), s.deficit(c)))
        .collect()
}

#[test]
fn requeue_with_refund_undoes_the_admission_exactly() {
    for policy in four_policies(1.0, 8.0) {
        let mut t = RadixTree::new(None, 1).unwrap();
        let ns = Namespace::Default;
        t.insert(&ns, &[1, 2, 3]);
        let mut s = LocalScheduler::new(policy).unwrap();
        s.add(
            Some(&mut t),
            int(0),
            "a",
            vec![1, 2, 3, 4, 5],
            10,
            ns.clone(),
        )
        .unwrap();
        s.add(Some(&mut t), int(1), "b", vec![6, 7], 11, ns.clone())
            .unwrap();
        let before = accounting(&s, &["a", "b"]);
        let first = s.schedule(Some(&t), 100, Some(1)).unwrap();
        assert_eq!(first.len(), 1);
        let (id, item) = (first[0].id.clone(), first[0].item);
        let toks = if item == 10 {
            vec![1, 2, 3, 4, 5]
        } else {
            vec![6, 7]
        };
        s.requeue(Some(&mut t), &id, toks, item, true).unwrap();
        let mut expect = before.clone();
        if matches!(policy, Policy::Dlpm { .. }) {
            // the schedule call refilled every client once (all had q = 0);
            // that is DLPM's clock moving, not the admission, and stays
            for e in &mut expect {
                e.2 += 8.0;
            }
        }
        assert_eq!(accounting(&s, &["a", "b"]), expect, "{policy:?}");
        assert_eq!((s.len(), s.num_running()), (2, 0));
        // and the same request comes first again
        let again = s.schedule(Some(&t), 100, Some(1)).unwrap();
        assert_eq!(again[0].id, id, "{policy:?}");
    }
}

#[test]
fn requeue_after_preemption_charges_nothing_more() {
    let vtc = Policy::Vtc {
        w_in: 1.0,
        w_out: 2.0,
    };
    let mut s: LocalScheduler<u32> = LocalScheduler::new(vtc).unwrap();
    let ns = Namespace::Default;
    s.add(None, int(0), "a", vec![1; 10], 0, ns.clone())
        .unwrap();
    s.add(None, int(1), "a", vec![1; 4], 1, ns.clone()).unwrap();
    s.add(None, int(2), "b", vec![2; 30], 2, ns).unwrap();
    let adm = s.schedule(None, 10, Some(1)).unwrap();
    assert_eq!(adm[0].id, int(0));
    s.charge_output(&int(0), 3).unwrap();
    let charged = accounting(&s, &["a", "b"]);
    assert_eq!(charged[0].1, 10.0 + 6.0);
    // preempted: back to waiting, first of its client again (arrival order)
    s.requeue(None, &int(0), vec![1; 13], 0, false).unwrap();
    assert_eq!(accounting(&s, &["a", "b"]), charged);
    assert_eq!((s.len(), s.num_running()), (3, 0));
    // b (counter 0) goes first; then a's preempted request, charged nothing
    let adm = s.schedule(None, 100, Some(2)).unwrap();
    assert_eq!(ids(&adm), vec![int(2), int(0)]);
    assert_eq!(s.counter("a"), 16.0);
    assert_eq!(s.charged_extend(&int(0)).unwrap(), 10);
    s.finish(&int(0)).unwrap();
    assert!(s.requeue(None, &int(0), vec![], 0, false).is_err());
}

#[test]
fn requeue_keeps_the_vtc_client_unlifted() {
    let vtc = Policy::Vtc {
        w_in: 1.0,
        w_out: 2.0,
    };
    let mut s: LocalScheduler<()> = LocalScheduler::new(vtc).unwrap();
    add(&mut s, None, 0, "a", vec![1; 2]);
    add(&mut s, None, 1, "b", vec![1; 2]);
    add(&mut s, None, 2, "b", vec![1; 2]);
    let adm = s.schedule(None, 100, Some(2)).unwrap(); // a (0 -> 2), then b (0 -> 2)
    assert_eq!(ids(&adm), vec![int(0), int(1)]);
    s.charge_output(&int(1), 5).unwrap(); // b: 12
                                          // a's only request is skipped by the engine and requeued with a refund:
                                          // a is back at 0, not lifted to b's 12
    s.requeue(None, &int(0), vec![1; 2], (), true).unwrap();
    assert_eq!(s.counter("a"), 0.0);
}

#[test]
fn schedule_within_credit_stops_where_a_refill_would_be_needed() {
    let mut t = RadixTree::new(None, 1).unwrap();
    let mut d = dlpm(10.0);
    for i in 0..6 {
        let c = ["a", "b"][i % 2];
        add(&mut d, Some(&mut t), i as i64, c, vec![i as u32; 4]);
    }
    // nobody has credit yet: nothing is admitted and nothing refilled
    assert!(d
        .schedule_within_credit(Some(&t), 100, None)
        .unwrap()
        .is_empty());
    assert_eq!((d.refills(), d.deficit("a")), (0, 0.0));
    // one admission refills (+10 each): a0 (a: 6)
    assert_eq!(
        ids(&d.schedule(Some(&t), 100, Some(1)).unwrap()),
        vec![int(0)]
    );
    assert_eq!(d.refills(), 1);
    // within the credit left: b1 (b: 6), a2 (a: 2), b3 (b: 2), a4 (a: -2),
    // b5 (b: -2); then a refill would be needed and nothing is left anyway
    let adm = d.schedule_within_credit(Some(&t), 100, Some(3)).unwrap();
    assert_eq!(ids(&adm), vec![int(1), int(2), int(3)]);
    let adm = d.schedule_within_credit(Some(&t), 100, None).unwrap();
    assert_eq!(ids(&adm), vec![int(4), int(5)]);
    assert_eq!((d.deficit("a"), d.deficit("b")), (-2.0, -2.0));
    // a new request of a: no waiting client has credit, so it stops at once
    add(&mut d, Some(&mut t), 6, "a", vec![9; 4]);
    assert!(d
        .schedule_within_credit(Some(&t), 100, None)
        .unwrap()
        .is_empty());
    assert_eq!(d.refills(), 1);
    // while schedule refills and admits it
    assert_eq!(ids(&d.schedule(Some(&t), 100, None).unwrap()), vec![int(6)]);
    assert_eq!(d.refills(), 2);
    d.check_invariants(Some(&t));
}

/// The tree holds [1, 2, 3, 4]; r0 = [9; 6] (match 0, extend 6), r1 = 12
/// tokens from [1..] (match 4, extend 8), r2 = [1, 2, 5] (match 2, extend 1).
fn lpm_rule_case(rule: LpmRule) -> (RadixTree, LocalScheduler<()>) {
    let mut t = RadixTree::new(None, 1).unwrap();
    let ns = Namespace::Default;
    t.insert(&ns, &[1, 2, 3, 4]);
    let mut s = LocalScheduler::new(Policy::Lpm).unwrap();
    s.set_lpm_rule(rule).unwrap();
    add(&mut s, Some(&mut t), 0, "a", vec![9; 6]);
    s.add(
        Some(&mut t),
        int(1),
        "b",
        (1..=12).collect(),
        (),
        ns.clone(),
    )
    .unwrap();
    add(&mut s, Some(&mut t), 2, "c", vec![1, 2, 5]);
    (t, s)
}

#[test]
fn lpm_rule_stop_at_unfit_and_fcfs_fallback() {
    // (stop_at_unfit, fcfs_above, what one call with budget 7 admits)
    let cases = [
        // the paper's walk: r1 (8) does not fit 7 and is skipped; r2, r0 fit
        (false, None, vec![int(2), int(0)]),
        // SGLang's walk stops at r1; nothing admitted, so the oversize rule
        // admits r1 alone (prefilled in chunks)
        (true, None, vec![int(1)]),
        // 3 waiting > 2: arrival order; r0 (6) fits, r1 skipped, r2 (1) fits
        (false, Some(2), vec![int(0), int(2)]),
        // 3 waiting, not > 3: longest match first again
        (false, Some(3), vec![int(2), int(0)]),
        // SGLang's rule in arrival order: r0 fits, r1 does not: stop
        (true, Some(2), vec![int(0)]),
    ];
    for (stop_at_unfit, fcfs_above, want) in cases {
        let rule = LpmRule {
            stop_at_unfit,
            fcfs_above,
            multi_priority: false,
        };
        let (t, mut s) = lpm_rule_case(rule);
        assert_eq!(
            ids(&s.schedule(Some(&t), 7, None).unwrap()),
            want,
            "{rule:?}"
        );
        s.check_invariants(Some(&t));
        assert_eq!(s.lpm_rule(), rule);
    }
}

#[test]
fn lpm_rule_errors_leave_the_scheduler_unchanged() {
    let mut d: LocalScheduler<()> = LocalScheduler::new(Policy::Fcfs).unwrap();
    assert!(d.set_lpm_rule(LpmRule::SGLANG).is_err());
    assert_eq!(d.lpm_rule(), LpmRule::default());
    let (_t, mut s) = lpm_rule_case(LpmRule::default());
    let err = s.set_lpm_rule(LpmRule::SGLANG).unwrap_err();
    assert!(err.to_string().contains("waiting"), "{err}");
    assert_eq!(s.lpm_rule(), LpmRule::default());
    assert_eq!(s.len(), 3);
}

// ----- Preble's queue (LpmRule::PREBLE) -------------------------------------

#[test]
fn preble_levels_and_quota() {
    use super::preble::{level, quota};
    assert_eq!(level(0, 10), 0);
    assert_eq!(level(1, 10), 0); // ratio 0.1: ceil(1) - 1
    assert_eq!(level(2, 10), 1);
    assert_eq!(level(9, 10), 8);
    assert_eq!(level(10, 10), 9);
    assert_eq!(level(91, 100), 9);
    assert_eq!(level(0, 0), 0);
    assert_eq!((quota(0), quota(9)), (10, 100));
}

/// `n` requests of client `client`, ids from `first`, each `hot` (the cached
/// prompt 1..=10 plus one token) or cold (11 uncached tokens).
fn preble_add(
    s: &mut LocalScheduler<()>,
    t: &mut RadixTree,
    client: &str,
    first: i64,
    n: i64,
    hot: bool,
) {
    for i in first..first + n {
        let toks: Vec<u32> = if hot {
            (1..=11).collect()
        } else {
            vec![100 + i as u32; 11]
        };
        add(s, Some(t), i, client, toks);
    }
}

#[test]
fn preble_serves_one_level_per_step_top_down() {
    let mut t = RadixTree::new(None, 1).unwrap();
    t.insert(&Namespace::Default, &(1..=10).collect::<Vec<u32>>());
    let mut s = LocalScheduler::new(Policy::Lpm).unwrap();
    s.set_lpm_rule(LpmRule::PREBLE).unwrap();
    assert!(s.lpm_rule().multi_priority);
    preble_add(&mut s, &mut t, "cold", 0, 3, false); // level 0
    preble_add(&mut s, &mut t, "hot", 10, 3, true); // 10/11 cached: level 9
                                                    // level 9 first (all three, under its quota of 100), nothing of level 0
    let a = s.schedule(Some(&t), 1000, None).unwrap();
    assert_eq!(ids(&a), [int(10), int(11), int(12)]);
    assert!(a.iter().all(|x| x.cached_len == 10 && x.extend_len == 1));
    // next step: level 0, arrival order
    let a = s.schedule(Some(&t), 1000, None).unwrap();
    assert_eq!(ids(&a), [int(0), int(1), int(2)]);
    s.check_invariants(Some(&t));
    // quota: 25 cold requests, a level-0 step admits 10
    preble_add(&mut s, &mut t, "cold", 100, 25, false);
    assert_eq!(s.schedule(Some(&t), 10_000, None).unwrap().len(), 10);
    // an unfit request is skipped, the walk goes on (budget 11 + 0)
    let mut s = LocalScheduler::new(Policy::Lpm).unwrap();
    s.set_lpm_rule(LpmRule::PREBLE).unwrap();
    add(&mut s, Some(&mut t), 0, "a", vec![7; 20]);
    preble_add(&mut s, &mut t, "a", 1, 1, false);
    assert_eq!(ids(&s.schedule(Some(&t), 11, None).unwrap()), [int(1)]);
    // the oversize rule on the same level: r0 (20 > 11) alone
    assert_eq!(ids(&s.schedule(Some(&t), 11, None).unwrap()), [int(0)]);
    // the rule excludes SGLang's settings
    let mut s: LocalScheduler<()> = LocalScheduler::new(Policy::Lpm).unwrap();
    let bad = LpmRule {
        stop_at_unfit: true,
        ..LpmRule::PREBLE
    };
    assert!(s.set_lpm_rule(bad).is_err());
}

#[test]
fn preble_does_not_starve_a_low_hit_request() {
    // A hot client keeps a steady stream of level-9 requests waiting; plain
    // LPM never admits the cold request while it does, Preble's queue admits
    // it within one round of the levels.
    for (rule, starves) in [(LpmRule::default(), true), (LpmRule::PREBLE, false)] {
        let mut t = RadixTree::new(None, 1).unwrap();
        t.insert(&Namespace::Default, &(1..=10).collect::<Vec<u32>>());
        let mut s = LocalScheduler::new(Policy::Lpm).unwrap();
        s.set_lpm_rule(rule).unwrap();
        preble_add(&mut s, &mut t, "cold", 0, 1, false);
        let mut next = 1;
        let mut cold_at = None;
        for step in 0..50 {
            preble_add(&mut s, &mut t, "hot", next, 4, true);
            next += 4;
            // room for 4 requests a step
            let a = s.schedule(Some(&t), 1000, Some(4)).unwrap();
            assert!(!a.is_empty());
            if ids(&a).contains(&int(0)) {
                cold_at = Some(step);
                break;
            }
        }
        if starves {
            assert_eq!(cold_at, None, "LPM admitted the cold request");
        } else {
            assert_eq!(cold_at, Some(1), "Preble: level 9, then level 0");
        }
    }
}

#[test]
fn las_decays_by_half_per_half_life_and_orders_by_decayed_service() {
    let policy = Policy::Las {
        half_life_s: 10.0,
        w_in: 1.0,
        w_out: 2.0,
    };
    let mut s: LocalScheduler<()> = LocalScheduler::new(policy).unwrap();
    s.set_time(0.0).unwrap();
    add(&mut s, None, 0, "a", vec![1; 80]);
    assert_eq!(ids(&s.schedule(None, 100, None).unwrap()), vec![int(0)]);
    s.charge_output(&int(0), 10).unwrap(); // a: 80 + 20
    assert_eq!(s.state_value("a"), 100.0);
    for (t, want) in [(10.0, 50.0), (20.0, 25.0), (40.0, 6.25)] {
        s.set_time(t).unwrap();
        assert_eq!(s.state_value("a"), want, "t = {t}");
    }
    // b used 10 at t = 40: a (6.25) is served before b (10)
    add(&mut s, None, 1, "b", vec![2; 10]);
    assert_eq!(ids(&s.schedule(None, 100, Some(1)).unwrap()), vec![int(1)]);
    add(&mut s, None, 2, "b", vec![2; 5]);
    add(&mut s, None, 3, "a", vec![3; 5]);
    assert_eq!(ids(&s.schedule(None, 100, Some(1)).unwrap()), vec![int(3)]);
    s.check_invariants(None);
    // the clock never goes back; the state round-trips
    assert!(s.set_time(39.0).is_err());
    let saved = s.state().unwrap();
    let mut r: LocalScheduler<()> = LocalScheduler::new(policy).unwrap();
    r.set_time(40.0).unwrap();
    r.load_state(&saved).unwrap();
    assert_eq!(r.state_value("a"), s.state_value("a"));
    add(&mut r, None, 2, "b", vec![2; 5]); // re-add the waiting
    assert_eq!(r.state().unwrap(), saved);
}

#[test]
fn share_lead_is_larger_for_the_client_served_more_in_every_policy() {
    for policy in all_policies() {
        let (t, mut s) = holding(policy, &[("heavy", vec![1; 50]), ("light", vec![2; 5])]);
        s.set_time(0.0).unwrap();
        let adm = s.schedule(Some(&t), 1000, None).unwrap();
        assert_eq!(adm.len(), 2, "{policy:?}");
        s.charge_output(&int(0), 20).unwrap();
        assert!(
            s.share_lead("heavy") > s.share_lead("light"),
            "{policy:?}: {} vs {}",
            s.share_lead("heavy"),
            s.share_lead("light")
        );
        assert_eq!(s.share_lead("nobody"), 0.0);
    }
}
