//! The shared view: what one router of several learns about the others.
//!
//! With `N` routers in front of the same workers, each holds a [`Dispatcher`]
//! that records its own dispatches exactly. The shared view (published by the
//! workers or the other routers, read with some staleness) adds the rest:
//!
//! - [`Dispatcher::observe_dispatch`]: another router sent `client`'s request
//!   of `tokens` to `worker`: the prefix tree records that `worker` holds
//!   `tokens`, D2LPM charges `w_e * len(tokens)` to `q[client][worker]` and
//!   the external load of `worker` grows by one;
//! - [`Dispatcher::observe_finish`]: such a request finished after
//!   `output_tokens`: D2LPM charges `w_q * output_tokens` and the external
//!   load shrinks by one (never below 0);
//! - [`Dispatcher::set_external_load`]: a snapshot of the other routers'
//!   requests in flight per worker replaces the running count (what a
//!   worker publishes, less this router's own).
//!
//! Every choice of a worker uses `s_w = own in flight + external`. Refills
//! stay local: each router refills its own deficit row when every entry is
//! exhausted, so with a fresh view every router's row is the one a single
//! router seeing all the dispatches would hold, and with `N` routers and a
//! view of age 0 the `N` routers choose exactly as one router would
//! (`tests/test_sim_routers.py` checks it). The external count is a view,
//! not owned state: it is not saved by `state`, and `remove_worker` zeroes it.

use super::{Dispatcher, Policy};
use crate::error::{Error, Result};

/// `own + external` per worker when some external load is known, else
/// `None` (the caller uses `own` as is, without a copy).
pub(super) fn seen_load(own: &[u64], external: &[u64]) -> Option<Vec<u64>> {
    if external.iter().all(|&x| x == 0) {
        return None;
    }
    Some(
        own.iter()
            .zip(external)
            .map(|(&a, &b)| a.saturating_add(b))
            .collect(),
    )
}

impl Dispatcher {
    /// The shared view's count of requests in flight per worker that other
    /// routers dispatched.
    pub fn external_load(&self) -> &[u64] {
        &self.external
    }

    /// Replace the external load with a snapshot (one entry per worker).
    /// A wrong length is a `ValueError` and changes nothing.
    pub fn set_external_load(&mut self, loads: &[u64]) -> Result<()> {
        if loads.len() != self.num_workers {
            return Err(Error::value(format!(
                "external load must have one entry per worker ({}), got {}",
                self.num_workers,
                loads.len()
            )));
        }
        self.external.copy_from_slice(loads);
        Ok(())
    }

    /// The slot of `client` (interned if new) for a charge from the view.
    fn observed_client(&mut self, client: &str) -> usize {
        match self.clients.get(client) {
            Some(&c) => c,
            None => self.new_client(client),
        }
    }

    /// Another router dispatched `client`'s request of `tokens` to `worker`
    /// (see the module doc); the charge is `w_e * input_len`, `input_len`
    /// defaulting to `tokens.len()` (a view may carry a prompt's first tokens
    /// only, and its length). A bad worker is an `IndexError` and changes
    /// nothing.
    pub fn observe_dispatch(
        &mut self,
        client: &str,
        worker: usize,
        tokens: &[u32],
        input_len: Option<u64>,
    ) -> Result<()> {
        self.check_worker(worker)?;
        if let Some(t) = self.tree.as_mut() {
            t.insert(tokens, worker);
        }
        self.external[worker] = self.external[worker].saturating_add(1);
        if matches!(self.policy, Policy::D2lpm(_)) {
            let c = self.observed_client(client);
            let n = self.num_workers;
            if let Policy::D2lpm(st) = &mut self.policy {
                let cost = st.cfg.w_e * input_len.unwrap_or(tokens.len() as u64) as f64;
                st.charge_observed(c, worker, n, cost);
            }
        }
        Ok(())
    }

    /// A request another router dispatched to `worker` finished after
    /// `output_tokens` output tokens (see the module doc). A bad worker is an
    /// `IndexError` and changes nothing.
    pub fn observe_finish(
        &mut self,
        client: &str,
        worker: usize,
        output_tokens: u64,
    ) -> Result<()> {
        self.check_worker(worker)?;
        self.external[worker] = self.external[worker].saturating_sub(1);
        if matches!(self.policy, Policy::D2lpm(_)) {
            let c = self.observed_client(client);
            let n = self.num_workers;
            if let Policy::D2lpm(st) = &mut self.policy {
                let cost = st.cfg.w_q * output_tokens as f64;
                st.charge_observed(c, worker, n, cost);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{D2lpmConfig, RequestId};
    use super::*;

    fn id(i: i64) -> RequestId {
        RequestId::Int(i)
    }

    #[test]
    fn two_routers_with_a_fresh_view_choose_as_one() {
        // one global router, and two routers each told of the other's work
        let p: Vec<Vec<u32>> = (0..6).map(|k| (k * 100..k * 100 + 40).collect()).collect();
        let mut one = Dispatcher::d2lpm(3, D2lpmConfig::new(90.0)).unwrap();
        let mut two = [
            Dispatcher::d2lpm(3, D2lpmConfig::new(90.0)).unwrap(),
            Dispatcher::d2lpm(3, D2lpmConfig::new(90.0)).unwrap(),
        ];
        let mut owner = Vec::new();
        for i in 0..60i64 {
            let client = ["a", "b", "c"][(i % 3) as usize];
            let toks = &p[(i as usize * 7) % 6];
            let r = (i as usize * 5 / 3) % 2;
            let w = one.dispatch(id(i), client, toks).unwrap();
            assert_eq!(
                two[r].dispatch(id(i), client, toks).unwrap(),
                w,
                "request {i}"
            );
            two[1 - r].observe_dispatch(client, w, toks, None).unwrap();
            owner.push((r, client, w));
            if i >= 4 && i % 2 == 0 {
                let j = i - 4;
                let (r, client, w) = owner[j as usize];
                let out = (j as u64 * 13) % 50;
                one.on_finish(&id(j), out).unwrap();
                two[r].on_finish(&id(j), out).unwrap();
                two[1 - r].observe_finish(client, w, out).unwrap();
            }
        }
        for router in &two {
            let seen: Vec<u64> = router
                .queue_sizes()
                .iter()
                .zip(router.external_load())
                .map(|(a, b)| a + b)
                .collect();
            assert_eq!(seen, one.queue_sizes());
            // a row differs from the global one by refill rounds this router
            // has not granted yet (it grants them at its next dispatch of
            // that client): the same whole number of `Q_w` on every worker
            for c in ["a", "b", "c"] {
                let gap: Vec<f64> = (0..3)
                    .map(|w| one.deficit(c, w).unwrap() - router.deficit(c, w).unwrap())
                    .collect();
                assert!(gap.iter().all(|&g| g == gap[0]), "{c}: {gap:?}");
                assert!(gap[0] >= 0.0 && gap[0] % 90.0 == 0.0, "{c}: {gap:?}");
            }
        }
    }

    #[test]
    fn external_load_steers_and_errors_change_nothing() {
        let mut d = Dispatcher::least_loaded(3).unwrap();
        d.set_external_load(&[5, 0, 2]).unwrap();
        assert_eq!(d.dispatch(id(0), "a", &[]).unwrap(), 1);
        let before = format!("{d:?}");
        assert!(matches!(d.set_external_load(&[1, 2]), Err(Error::Value(_))));
        assert!(matches!(
            d.observe_dispatch("a", 3, &[1], None),
            Err(Error::Index(_))
        ));
        assert!(matches!(d.observe_finish("a", 9, 1), Err(Error::Index(_))));
        assert_eq!(before, format!("{d:?}"));
        // a finish never takes the count below 0
        d.observe_finish("a", 1, 0).unwrap();
        d.observe_finish("a", 1, 0).unwrap();
        assert_eq!(d.external_load(), &[5, 0, 2]);
        d.remove_worker(0).unwrap();
        assert_eq!(d.external_load(), &[0, 0, 2]);
    }

    #[test]
    fn an_observed_charge_before_the_first_own_dispatch_is_kept() {
        let mut d = Dispatcher::d2lpm(2, D2lpmConfig::new(100.0)).unwrap();
        d.observe_dispatch("a", 0, &[1; 50], Some(150)).unwrap();
        assert_eq!(d.deficit("a", 0).unwrap(), -150.0);
        assert_eq!(d.held_len(&[1; 60], 0).unwrap(), 50);
        // refill: two rounds make worker 0 positive, one makes worker 1
        assert_eq!(d.dispatch(id(0), "a", &[9]).unwrap(), 1);
        assert_eq!(d.deficit("a", 0).unwrap(), -50.0);
    }
}
