//! Deficit refills: the one implementation of "refill every deficit by a
//! quantum until some backlogged one is positive" that DLPM (the local
//! scheduler, [`crate::sched`]) and D2LPM (the dispatcher,
//! [`crate::dispatch`]) share.
//!
//! Both algorithms, literally, loop one refill round at a time: while no
//! deficit that matters is positive, add the quantum. The loop can run for
//! billions of rounds (a small quantum against a large debt), so the rounds
//! are counted and applied in closed form: [`rounds_until_positive`] finds
//! `k`, the fewest rounds after which some deficit is positive, and
//! [`refill`] applies them, through [`refill_steps`] (up to `k` rounds to one
//! deficit, bit-identical to the loop for the first [`NATIVE_REFILLS`] rounds
//! and exact, or the more accurate of the two, beyond).

/// Move a deficit by `delta`, saturating at `f64::MIN` (and at `f64::MAX`
/// for a finite deficit): an overflowing charge (a weight near `f64::MAX`
/// times a token count) must not leave `-inf`, which a refill would turn into
/// NaN (`-inf + inf`). An infinite deficit (D2LPM with an infinite quantum)
/// stays infinite. A NaN `delta` is a caller bug.
#[inline]
pub fn add_saturating(deficit: f64, delta: f64) -> f64 {
    debug_assert!(!delta.is_nan());
    let sum = deficit + delta;
    if deficit.is_finite() {
        sum.clamp(f64::MIN, f64::MAX)
    } else {
        sum.max(f64::MIN)
    }
}

/// The refill rounds a bulk refill applies: the fewest after which some
/// deficit is positive ([`rounds_until_positive`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rounds {
    /// How many (saturating at `u64::MAX`: then too many to count).
    pub count: u64,
    /// The deficit that needs the fewest rounds (the largest), before and
    /// after them.
    least_in_debt: f64,
    least_in_debt_after: f64,
}

impl Rounds {
    /// Exactly `count` rounds (DLPM's strict credit: the count comes from
    /// [`refill_steps_above`], not from the deficits [`refill`] moves).
    /// `u64::MAX`: too many to count, every deficit [`refill`] moves ends
    /// positive.
    pub fn exactly(count: u64) -> Rounds {
        Rounds {
            count,
            least_in_debt: f64::NEG_INFINITY,
            least_in_debt_after: f64::NEG_INFINITY,
        }
    }
}

/// The fewest refill rounds (each `+quantum` to every non-positive deficit)
/// after which some deficit of `deficits` is positive: those of the largest
/// (the count is monotone in the deficit). `None` if one already is
/// positive or there are none.
pub fn rounds_until_positive(
    deficits: impl IntoIterator<Item = f64>,
    quantum: f64,
) -> Option<Rounds> {
    let least_in_debt = deficits.into_iter().fold(f64::NEG_INFINITY, f64::max);
    if least_in_debt == f64::NEG_INFINITY || least_in_debt > 0.0 {
        return None;
    }
    let (count, least_in_debt_after) = refill_steps(least_in_debt, quantum, u64::MAX);
    Some(Rounds {
        count,
        least_in_debt,
        least_in_debt_after,
    })
}

/// Apply `rounds` to every non-positive deficit of `deficits` (each gets
/// `+quantum` per round until positive or the rounds are done): the one bulk
/// refill of DLPM and D2LPM. When the rounds are too many to count (a
/// denormal quantum against a normal debt), a deficit deeper in debt than
/// the one that set them moves by the same credit that one got, so it stays
/// behind it instead of being handed the top of the `(0, quantum]` interval.
pub fn refill<'a>(deficits: impl IntoIterator<Item = &'a mut f64>, quantum: f64, rounds: Rounds) {
    for q in deficits {
        if *q > 0.0 {
            continue;
        }
        *q = if rounds.count < u64::MAX || *q >= rounds.least_in_debt {
            refill_steps(*q, quantum, rounds.count).1
        } else {
            // (q - least) + least_after: the same credit, without overflow
            (*q - rounds.least_in_debt) + rounds.least_in_debt_after
        };
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
/// normal debt, or a debt saturated at `f64::MIN`, see [`add_saturating`]), the
/// count saturates and the deficit becomes `quantum`, the top of the
/// `(0, quantum]` interval the exact result lies in: never `+inf` credit.
pub fn refill_steps(q: f64, quantum: f64, limit: u64) -> (u64, f64) {
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

/// [`refill_steps`] with a threshold: up to `limit` single refills
/// (`q += quantum`, each only while `q <= threshold`) to one deficit; returns
/// (refills applied, new deficit). DLPM's strict credit refills a client
/// whose every waiting request costs more than its credit until the cheapest
/// one is affordable (`q > threshold`, the cheapest charge). `threshold`
/// finite and `>= 0`; 0 is [`refill_steps`] exactly. The first [`NATIVE_REFILLS`] additions are
/// done one by one (bit-identical to the literal loop), the rest in closed
/// form.
pub fn refill_steps_above(q: f64, threshold: f64, quantum: f64, limit: u64) -> (u64, f64) {
    debug_assert!(threshold >= 0.0 && threshold.is_finite());
    if threshold == 0.0 {
        return refill_steps(q, quantum, limit);
    }
    let mut x = q;
    let mut n = 0u64;
    while x <= threshold && n < limit && n < NATIVE_REFILLS {
        x += quantum;
        n += 1;
    }
    if x > threshold || n == limit {
        return (n, x);
    }
    // The rounds the gap `x - threshold` needs to become positive, then the
    // same number of quanta added to `x` itself (one rounding).
    let left = if limit == u64::MAX {
        u64::MAX
    } else {
        limit - n
    };
    let (j, _) = refill_steps(x - threshold, quantum, left);
    if j == u64::MAX {
        // too many to count: the exact result lies in (threshold, threshold
        // + quantum], whose top may round to the threshold itself
        return (u64::MAX, (threshold + quantum).max(next_up(threshold)));
    }
    let mut j = j;
    let mut y = (j as f64).mul_add(quantum, x);
    // rounding may leave `x + j * quantum` at the threshold where the gap
    // was just past it: a few more rounds, then the least value above it
    // (where a round is below the threshold's ulp)
    let mut bumps = 0;
    while y <= threshold && j < left {
        if bumps == 4 {
            return (n.saturating_add(j), next_up(threshold));
        }
        j += 1;
        bumps += 1;
        y = (j as f64).mul_add(quantum, x);
    }
    (n.saturating_add(j), y)
}

/// The least `f64` above a finite `x >= 0`.
fn next_up(x: f64) -> f64 {
    debug_assert!(x >= 0.0 && x.is_finite());
    f64::from_bits(x.to_bits() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn refill_steps_above_is_the_literal_loop() {
        for &(q, t, quantum) in &[
            (-10.0, 5.0, 3.0),
            (0.5, 7.0, 2.0),
            (4.0, 4.0, 1.0),
            (-1e6, 100.0, 7.0),
            (1.0, 592.0, 0.125),
            (3.0, 2.0, 1.0),
        ] {
            for limit in [0, 1, 2, 5, 64, 65, 1000, u64::MAX] {
                let (mut x, mut n) = (q, 0u64);
                while x <= t && n < limit && n < 200_000 {
                    x += quantum;
                    n += 1;
                }
                let (m, y) = refill_steps_above(q, t, quantum, limit);
                assert_eq!(m, n, "{q} {t} {quantum} {limit}");
                if n <= NATIVE_REFILLS {
                    assert_eq!(y, x);
                } else {
                    assert!((y - x).abs() <= 1e-6 * x.abs().max(1.0), "{y} {x}");
                }
                if limit == u64::MAX {
                    assert!(y > t);
                }
            }
        }
        assert_eq!(
            refill_steps_above(-3.0, 0.0, 2.0, 9),
            refill_steps(-3.0, 2.0, 9)
        );
        // uncountable: a denormal quantum against a normal gap
        let (n, y) = refill_steps_above(1.0, 10.0, 5e-324, u64::MAX);
        assert_eq!(n, u64::MAX);
        assert!(y > 10.0 && y.is_finite());
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
    fn bulk_refill_is_the_literal_loop() {
        // While no deficit is positive, every non-positive one gets +quantum.
        let mut rng = 3u64;
        let mut next = || crate::testutil::lcg(&mut rng);
        for _ in 0..500 {
            let quantum = [0.25, 1.0, 3.0][(next() % 3) as usize];
            let n = 1 + (next() % 5) as usize;
            let start: Vec<f64> = (0..n).map(|_| -((next() % 400) as f64) / 4.0).collect();
            let mut literal = start.clone();
            let mut count = 0u64;
            while literal.iter().all(|&x| x <= 0.0) {
                literal.iter_mut().for_each(|x| *x += quantum);
                count += 1;
            }
            let mut bulk = start.clone();
            let rounds = rounds_until_positive(bulk.iter().copied(), quantum).unwrap();
            refill(bulk.iter_mut(), quantum, rounds);
            assert_eq!(
                (rounds.count, &bulk),
                (count, &literal),
                "{start:?} {quantum}"
            );
        }
        assert_eq!(rounds_until_positive([1.0, -3.0], 1.0), None);
        assert_eq!(rounds_until_positive([], 1.0), None);
    }

    #[test]
    fn uncountable_rounds_keep_the_deeper_debt_behind() {
        // A denormal quantum: the rounds are beyond u64, the credit is not.
        let mut row = [-10.0, -20.0, 3.0];
        let rounds = rounds_until_positive(row.iter().copied().filter(|&x| x <= 0.0), 5e-324);
        refill(row.iter_mut(), 5e-324, rounds.unwrap());
        assert!(row[0] > 0.0 && row[0] <= 5e-324);
        assert!((row[1] + 10.0).abs() < 1e-9, "{}", row[1]);
        assert_eq!(row[2], 3.0);
        // infinite quantum (D2LPM): one round, infinite credit
        let mut row = [-1.0, -2.0];
        let rounds = rounds_until_positive(row, f64::INFINITY).unwrap();
        refill(row.iter_mut(), f64::INFINITY, rounds);
        assert_eq!((rounds.count, row), (1, [f64::INFINITY; 2]));
        assert_eq!(add_saturating(f64::INFINITY, -1e308), f64::INFINITY);
        assert_eq!(add_saturating(-1e308, -1e308), f64::MIN);
        assert_eq!(add_saturating(1e308, 1e308), f64::MAX);
    }
}
