//! Workers that come and go, and dispatches that do not go through: what a
//! router in front of a changing set of replicas (a Ray Serve deployment)
//! needs beyond [`Dispatcher::dispatch`].
//!
//! The dispatcher's workers are slots `0..num_workers`; the caller maps its
//! replicas to slots. [`Dispatcher::dispatch_among`] runs D2LPM over the
//! slots that hold a live replica now (the others are left out of the refill
//! loop and of both candidate sets, as if they did not exist);
//! [`Dispatcher::remove_worker`] empties a slot whose replica died or was
//! scaled down (its tree holdings, every client's deficit there, its
//! in-flight requests) so a new replica can take it;
//! [`Dispatcher::withdraw`] undoes a dispatch the worker never served (the
//! caller cancelled it, or the runtime sent it elsewhere);
//! [`Dispatcher::charge_output`] charges output tokens reported after the
//! request already left the in-flight table.

use super::tree::WorkerSet;
use super::{placement, Dispatcher, Policy, RequestId};
use crate::error::{Error, Result};

impl Dispatcher {
    /// [`Dispatcher::dispatch`] restricted to `workers` (non-empty, each in
    /// `0..num_workers`; repeats allowed): D2LPM only. With one worker it
    /// records a dispatch to that worker with D2LPM's charge. Errors (a
    /// duplicate in-flight id, bad `workers`, another policy) change nothing.
    pub fn dispatch_among(
        &mut self,
        id: RequestId,
        client: &str,
        tokens: &[u32],
        workers: &[usize],
    ) -> Result<usize> {
        if !matches!(self.policy, Policy::D2lpm(_)) {
            return Err(Error::type_(format!(
                "dispatch_among() is defined for D2LPM only, not {}",
                self.policy.name()
            )));
        }
        if workers.is_empty() {
            return Err(Error::value("workers must name at least one worker"));
        }
        let mut eligible = WorkerSet::empty(self.num_workers);
        for &w in workers {
            if w >= self.num_workers {
                return Err(Error::index(format!(
                    "workers must be in 0..{}, got {w}",
                    self.num_workers
                )));
            }
            eligible.insert(w);
        }
        let c = self.client_for(&id, client)?;
        let Policy::D2lpm(st) = &mut self.policy else {
            unreachable!("checked above");
        };
        let tree = self.tree.as_ref().expect("D2LPM has a tree");
        let (len, g) = tree.longest_match_ref(tokens);
        let seen = super::view::seen_load(&self.load, &self.external);
        let load: &[u64] = seen.as_deref().unwrap_or(&self.load);
        let place = super::placement_for(st, tokens, len, &self.worker_keys);
        let w = st.select_among(c, (len, g), load, tokens.len(), &place, &eligible);
        self.record(id, c, tokens, w);
        Ok(w)
    }

    /// Undo the dispatch of an in-flight request its worker never served:
    /// it leaves the in-flight table and the queue size, and D2LPM gives the
    /// client back its dispatch-time charge on that worker. The global tree
    /// keeps the prefix on the worker (a belief that eviction reports
    /// correct). Returns the worker. Unknown id: `KeyError`, nothing changes.
    pub fn withdraw(&mut self, id: &RequestId) -> Result<usize> {
        let Some(r) = self.inflight.remove(id) else {
            return Err(Error::key(format!("request_id {id} is not in flight")));
        };
        self.load[r.worker] -= 1;
        self.client_inflight[r.client] -= 1;
        if let Policy::D2lpm(st) = &mut self.policy {
            st.refund(r.client, r.worker, r.input_len);
        }
        Ok(r.worker)
    }

    /// Worker `worker` is gone (died, scaled down, replaced): it is removed
    /// from every node of the global tree, every client's D2LPM deficit there
    /// becomes 0 (a new worker in the slot starts like a new worker), and its
    /// in-flight requests leave the table without a charge. Returns their ids
    /// (sorted); the caller decides whether to dispatch them again.
    pub fn remove_worker(&mut self, worker: usize) -> Result<Vec<RequestId>> {
        self.check_worker(worker)?;
        if let Some(t) = self.tree.as_mut() {
            t.remove_worker(worker);
        }
        if let Policy::D2lpm(st) = &mut self.policy {
            st.reset_worker(worker);
        }
        let mut gone: Vec<RequestId> = self
            .inflight
            .iter()
            .filter(|(_, r)| r.worker == worker)
            .map(|(id, _)| id.clone())
            .collect();
        gone.sort();
        for id in &gone {
            let r = self.inflight.remove(id).expect("listed above");
            self.client_inflight[r.client] -= 1;
        }
        self.load[worker] = 0;
        self.external[worker] = 0;
        self.worker_keys[worker] = placement::slot_key(worker);
        Ok(gone)
    }

    /// Name the worker in slot `worker` for the agreed placement
    /// ([`placement`]): routers that give the same replica the same name
    /// rank it alike whatever slot it took. Until named (and after
    /// [`Dispatcher::remove_worker`]) a slot is ranked by its index.
    pub fn set_worker_name(&mut self, worker: usize, name: &str) -> Result<()> {
        self.check_worker(worker)?;
        self.worker_keys[worker] = placement::name_key(name);
        Ok(())
    }

    /// Charge `output_tokens` to `client` on `worker` after its request left
    /// the in-flight table (`on_finish(id, 0)` at completion, the output count
    /// reported later): D2LPM's `w_q * output_tokens`. Returns whether a
    /// deficit was charged (false for an unknown or forgotten client, and for
    /// policies without deficits).
    pub fn charge_output(
        &mut self,
        client: &str,
        worker: usize,
        output_tokens: u64,
    ) -> Result<bool> {
        self.check_worker(worker)?;
        let (Policy::D2lpm(st), Some(&c)) = (&mut self.policy, self.clients.get(client)) else {
            return Ok(false);
        };
        st.on_finish(c, worker, output_tokens);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::D2lpmConfig;
    use super::*;

    fn id(i: i64) -> RequestId {
        RequestId::Int(i)
    }

    #[test]
    fn dispatch_among_leaves_other_workers_out() {
        let mut d = Dispatcher::d2lpm(4, D2lpmConfig::new(100.0)).unwrap();
        let p: Vec<u32> = (0..10).collect();
        for i in 0..40 {
            let w = d.dispatch_among(id(i), "a", &p, &[1, 3]).unwrap();
            assert!(w == 1 || w == 3);
        }
        // the refill loop ran over workers 1 and 3 only
        assert_eq!(d.deficit("a", 0).unwrap(), 0.0);
        assert_eq!(d.deficit("a", 2).unwrap(), 0.0);
        assert_eq!(d.dispatched_counts()[0] + d.dispatched_counts()[2], 0);
        // one worker: a forced dispatch with the D2LPM charge
        let before = d.deficit("b", 2).unwrap();
        assert_eq!(d.dispatch_among(id(99), "b", &p, &[2]).unwrap(), 2);
        assert_eq!(d.deficit("b", 2).unwrap(), before + 100.0 - 10.0);
    }

    #[test]
    fn dispatch_among_equals_dispatch_over_all_workers() {
        let mut a = Dispatcher::d2lpm(3, D2lpmConfig::new(25.0)).unwrap();
        let mut b = a.clone();
        for i in 0..60i64 {
            let client = ["x", "y", "z"][(i % 3) as usize];
            let toks: Vec<u32> = (0..(i as u32 % 7 + 3))
                .map(|t| t + (i as u32 % 2))
                .collect();
            assert_eq!(
                a.dispatch(id(i), client, &toks).unwrap(),
                b.dispatch_among(id(i), client, &toks, &[0, 1, 2]).unwrap()
            );
            if i % 4 == 0 {
                a.on_finish(&id(i), 5).unwrap();
                b.on_finish(&id(i), 5).unwrap();
            }
        }
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn withdraw_refunds_and_errors_change_nothing() {
        let mut d = Dispatcher::d2lpm(2, D2lpmConfig::new(100.0)).unwrap();
        let before = format!("{d:?}");
        assert!(matches!(
            d.dispatch_among(id(1), "a", &[1], &[]),
            Err(Error::Value(_))
        ));
        assert!(matches!(
            d.dispatch_among(id(1), "a", &[1], &[0, 2]),
            Err(Error::Index(_))
        ));
        assert!(matches!(d.withdraw(&id(1)), Err(Error::Key(_))));
        assert_eq!(before, format!("{d:?}"));
        let w = d.dispatch(id(1), "a", &[1, 2, 3]).unwrap();
        let q = d.deficit("a", w).unwrap();
        assert_eq!(d.withdraw(&id(1)).unwrap(), w);
        assert_eq!(d.deficit("a", w).unwrap(), q + 3.0);
        assert_eq!(d.queue_sizes(), &[0, 0]);
        assert_eq!(d.num_inflight(), 0);
        let mut rr = Dispatcher::round_robin(2).unwrap();
        assert!(matches!(
            rr.dispatch_among(id(1), "a", &[1], &[0]),
            Err(Error::Type(_))
        ));
    }

    #[test]
    fn remove_worker_clears_tree_deficits_and_inflight() {
        let mut d = Dispatcher::d2lpm(2, D2lpmConfig::new(1000.0)).unwrap();
        let p: Vec<u32> = (0..20).collect();
        let q: Vec<u32> = (100..120).collect();
        assert_eq!(d.dispatch_among(id(1), "a", &p, &[0]).unwrap(), 0);
        assert_eq!(d.dispatch_among(id(2), "b", &q, &[0]).unwrap(), 0);
        assert_eq!(d.dispatch_among(id(3), "b", &q, &[1]).unwrap(), 1);
        d.on_finish(&id(2), 1).unwrap();
        assert_eq!(d.remove_worker(0).unwrap(), vec![id(1)]);
        assert_eq!(d.queue_sizes(), &[0, 1]);
        assert_eq!(d.held_len(&p, 0).unwrap(), 0);
        assert_eq!(d.held_len(&q, 0).unwrap(), 0);
        assert_eq!(d.held_len(&q, 1).unwrap(), 20);
        assert_eq!(d.longest_match(&p).0, 0);
        assert_eq!(d.deficit("a", 0).unwrap(), 0.0);
        assert_eq!(d.deficit("b", 0).unwrap(), 0.0);
        assert!(d.tree().unwrap().check().is_ok());
        assert!(matches!(d.on_finish(&id(1), 1), Err(Error::Key(_))));
        assert!(matches!(d.remove_worker(2), Err(Error::Index(_))));
        // the slot takes a new worker: D2LPM treats it as new
        assert_eq!(d.dispatch_among(id(4), "a", &p, &[0, 1]).unwrap(), 0);
    }

    #[test]
    fn charge_output_after_the_request_left() {
        let mut d = Dispatcher::d2lpm(2, D2lpmConfig::new(100.0)).unwrap();
        let w = d.dispatch(id(1), "a", &[1, 2]).unwrap();
        d.on_finish(&id(1), 0).unwrap();
        let q = d.deficit("a", w).unwrap();
        assert!(d.charge_output("a", w, 10).unwrap());
        assert_eq!(d.deficit("a", w).unwrap(), q - 20.0);
        assert!(!d.charge_output("nobody", w, 10).unwrap());
        assert!(matches!(d.charge_output("a", 5, 1), Err(Error::Index(_))));
        let mut ll = Dispatcher::least_loaded(2).unwrap();
        assert!(!ll.charge_output("a", 0, 1).unwrap());
    }
}
