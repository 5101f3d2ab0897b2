//! Distributed dispatch: which worker serves a new request.
//!
//! One [`Dispatcher`] type with a [`Policy`]: D2LPM (the paper's Algorithm 2,
//! in [`d2lpm`]) and the baselines (round-robin, least-loaded, per-client
//! round-robin, prefix affinity with a load-imbalance escape, in
//! [`baselines`]). They share the bookkeeping every router needs: the
//! in-flight requests (id -> client, worker), the per-worker queue size `s_w`
//! (dispatched and not finished), the client interner and, for the
//! prefix-aware policies, the global [`tree::WorkerTree`] recording which
//! workers hold which prefix.
//!
//! The dispatcher never waits on a worker: `on_finish` and `on_evict` are
//! reports that arrive whenever the worker sends them. [`state`] saves and
//! restores all of it (`state_dict` / `load_state_dict`).

pub mod baselines;
pub mod d2lpm;
pub mod membership;
pub mod placement;
pub mod state;
pub mod tree;
pub mod view;

use std::collections::HashMap;

use crate::error::{check_non_negative, Error, Result};

pub use baselines::AffinityConfig;
pub use d2lpm::D2lpmConfig;
use tree::WorkerTree;

pub use crate::request_id::RequestId;

#[derive(Debug, Clone)]
struct Inflight {
    client: usize,
    worker: usize,
    /// Prompt tokens charged at dispatch (what [`Dispatcher::withdraw`] refunds).
    input_len: u64,
}

/// The dispatch rule.
#[derive(Debug, Clone)]
pub enum Policy {
    /// Algorithm 2 of the paper (per-(client, worker) deficits, prefix tree).
    D2lpm(d2lpm::State),
    /// Worker `k mod W` for the k-th request.
    RoundRobin { next: usize },
    /// Smallest queue size `s_w` (lowest index on ties).
    LeastLoaded,
    /// Each client cycles through the workers on its own cursor (VTC's dispatcher).
    ClientRoundRobin { next: Vec<usize> },
    /// Best prefix match unless load is imbalanced or the match is short.
    PrefixAffinity(AffinityConfig),
}

impl Policy {
    /// Policy name as the Python classes spell it.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::D2lpm(_) => "D2LPM",
            Policy::RoundRobin { .. } => "RoundRobin",
            Policy::LeastLoaded => "LeastLoaded",
            Policy::ClientRoundRobin { .. } => "ClientRoundRobin",
            Policy::PrefixAffinity(_) => "PrefixAffinity",
        }
    }

    fn uses_tree(&self) -> bool {
        matches!(self, Policy::D2lpm(_) | Policy::PrefixAffinity(_))
    }
}

/// A global dispatcher over `num_workers` workers.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    num_workers: usize,
    load: Vec<u64>,
    dispatched: Vec<u64>,
    inflight: HashMap<RequestId, Inflight>,
    clients: HashMap<String, usize>,
    client_names: Vec<String>,
    /// Per client slot: requests in flight, and whether the slot is live
    /// (a forgotten client's slot goes to the next new client).
    client_inflight: Vec<u64>,
    client_live: Vec<bool>,
    free_clients: Vec<usize>,
    /// Live clients above which the next finish sweeps idle ones.
    forget_at: usize,
    tree: Option<WorkerTree>,
    policy: Policy,
    /// The shared view's requests in flight per worker that other routers
    /// dispatched ([`view`]); added to `load` when choosing a worker.
    external: Vec<u64>,
    /// Each slot's key for the agreed placement ([`placement`]): its
    /// worker's name's, or the slot's own.
    worker_keys: Vec<u64>,
}

/// Client-table size below which idle clients are never swept.
const FORGET_MIN: usize = 1024;

fn check_workers(num_workers: usize) -> Result<()> {
    if num_workers == 0 {
        return Err(Error::value("num_workers must be >= 1, got 0"));
    }
    if num_workers > 4096 {
        return Err(Error::value(format!(
            "num_workers must be <= 4096, got {num_workers}"
        )));
    }
    Ok(())
}

/// The last step's rule of a D2LPM dispatch of `tokens` whose first
/// `matched` tokens some worker holds.
fn placement_for<'a>(
    st: &d2lpm::State,
    tokens: &[u32],
    matched: usize,
    keys: &'a [u64],
) -> placement::Placement<'a> {
    match st.cfg.placement_slack {
        0 => placement::Placement::LEAST_LOADED,
        slack => placement::Placement {
            slack,
            prefix: placement::prefix_key(tokens, matched),
            keys,
        },
    }
}

impl Dispatcher {
    fn with_policy(num_workers: usize, policy: Policy) -> Result<Self> {
        check_workers(num_workers)?;
        let tree = policy.uses_tree().then(|| WorkerTree::new(num_workers));
        Ok(Dispatcher {
            num_workers,
            load: vec![0; num_workers],
            dispatched: vec![0; num_workers],
            inflight: HashMap::new(),
            clients: HashMap::new(),
            client_names: Vec::new(),
            client_inflight: Vec::new(),
            client_live: Vec::new(),
            free_clients: Vec::new(),
            forget_at: FORGET_MIN,
            tree,
            policy,
            external: vec![0; num_workers],
            worker_keys: (0..num_workers).map(placement::slot_key).collect(),
        })
    }

    /// D2LPM with worker quantum `Q_w` (`f64::INFINITY` allowed: pure
    /// affinity) and cost weights `w_e` (input) and `w_q` (output).
    pub fn d2lpm(num_workers: usize, cfg: D2lpmConfig) -> Result<Self> {
        cfg.validate()?;
        Self::with_policy(num_workers, Policy::D2lpm(d2lpm::State::new(cfg)))
    }

    pub fn round_robin(num_workers: usize) -> Result<Self> {
        Self::with_policy(num_workers, Policy::RoundRobin { next: 0 })
    }

    pub fn least_loaded(num_workers: usize) -> Result<Self> {
        Self::with_policy(num_workers, Policy::LeastLoaded)
    }

    pub fn client_round_robin(num_workers: usize) -> Result<Self> {
        Self::with_policy(num_workers, Policy::ClientRoundRobin { next: Vec::new() })
    }

    pub fn prefix_affinity(num_workers: usize, cfg: AffinityConfig) -> Result<Self> {
        cfg.validate()?;
        Self::with_policy(num_workers, Policy::PrefixAffinity(cfg))
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn num_workers(&self) -> usize {
        self.num_workers
    }

    /// `s_w`: requests dispatched to each worker and not yet finished.
    pub fn queue_sizes(&self) -> &[u64] {
        &self.load
    }

    /// Requests ever dispatched to each worker.
    pub fn dispatched_counts(&self) -> &[u64] {
        &self.dispatched
    }

    /// Requests dispatched and not yet finished.
    pub fn num_inflight(&self) -> usize {
        self.inflight.len()
    }

    pub fn is_inflight(&self, id: &RequestId) -> bool {
        self.inflight.contains_key(id)
    }

    /// Worker serving an in-flight request.
    pub fn worker_of(&self, id: &RequestId) -> Result<usize> {
        self.inflight
            .get(id)
            .map(|r| r.worker)
            .ok_or_else(|| Error::key(format!("request_id {id} is not in flight")))
    }

    /// Clients known now, in slot order (first seen, except that a new client
    /// may take a forgotten one's slot).
    pub fn clients(&self) -> Vec<String> {
        self.client_names
            .iter()
            .zip(&self.client_live)
            .filter(|(_, &live)| live)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Global prefix tree (prefix-aware policies only).
    pub fn tree(&self) -> Option<&WorkerTree> {
        self.tree.as_ref()
    }

    /// Longest prefix of `tokens` the dispatcher believes some worker holds,
    /// and those workers (all workers at length 0, or without a tree).
    pub fn longest_match(&self, tokens: &[u32]) -> (usize, Vec<usize>) {
        match &self.tree {
            Some(t) => {
                let m = t.longest_match(tokens);
                (m.len, m.workers.iter().collect())
            }
            None => (0, (0..self.num_workers).collect()),
        }
    }

    /// [`Self::longest_match`], and whether that match counts as locality
    /// by D2LPM's rule ([`match_counts`] with its `match_threshold`; for the
    /// other policies every match counts: the affinity baselines' own
    /// threshold decides their routing together with the load, not what a
    /// router's probe names). Routers ask it before a dispatch to name the
    /// placement they see.
    pub fn locality(&self, tokens: &[u32]) -> (usize, Vec<usize>, bool) {
        let (held, holders) = self.longest_match(tokens);
        let threshold = match &self.policy {
            Policy::D2lpm(st) => st.cfg.match_threshold,
            _ => 0.0,
        };
        (held, holders, match_counts(held, tokens.len(), threshold))
    }

    /// Length of the prefix of `tokens` the dispatcher believes `worker` holds.
    pub fn held_len(&self, tokens: &[u32], worker: usize) -> Result<usize> {
        self.check_worker(worker)?;
        Ok(self.tree.as_ref().map_or(0, |t| t.held_len(tokens, worker)))
    }

    /// D2LPM deficit `q[client][worker]` (0 for an unknown client).
    pub fn deficit(&self, client: &str, worker: usize) -> Result<f64> {
        self.check_worker(worker)?;
        let Policy::D2lpm(st) = &self.policy else {
            return Err(Error::type_(format!(
                "deficit() is defined for D2LPM only, not {}",
                self.policy.name()
            )));
        };
        Ok(self
            .clients
            .get(client)
            .map_or(0.0, |&c| st.deficit(c, worker)))
    }

    fn check_worker(&self, worker: usize) -> Result<()> {
        if worker >= self.num_workers {
            return Err(Error::index(format!(
                "worker must be in 0..{}, got {worker}",
                self.num_workers
            )));
        }
        Ok(())
    }

    /// A slot for a new client: a forgotten client's (its policy state
    /// reset to a new client's) or a new one at the end.
    fn new_client(&mut self, name: &str) -> usize {
        let c = match self.free_clients.pop() {
            Some(c) => {
                self.client_names[c] = name.to_string();
                self.client_live[c] = true;
                match &mut self.policy {
                    Policy::D2lpm(st) => st.reset_client(c),
                    Policy::ClientRoundRobin { next } if c < next.len() => {
                        next[c] = c % self.num_workers;
                    }
                    _ => {}
                }
                c
            }
            None => {
                self.client_names.push(name.to_string());
                self.client_inflight.push(0);
                self.client_live.push(true);
                self.client_names.len() - 1
            }
        };
        self.clients.insert(name.to_string(), c);
        c
    }

    /// Clients known now (forgotten ones excluded).
    pub fn num_clients(&self) -> usize {
        self.client_names.len() - self.free_clients.len()
    }

    /// Forget every client with nothing in flight: its deficits (D2LPM) or
    /// cursor (per-client round robin). Back, it starts as a new client.
    /// This only changes which worker its next request goes to, never how
    /// much service it gets: that is the workers' local schedulers' to
    /// share (ALGORITHMS.md section 7: each worker runs DLPM). Runs by itself
    /// whenever the client table doubles from 1,024, so tenants that come
    /// and go keep memory bounded. Returns how many were forgotten.
    pub fn forget_idle_clients(&mut self) -> usize {
        let mut n = 0;
        for c in 0..self.client_names.len() {
            if self.client_live[c] && self.client_inflight[c] == 0 {
                self.clients.remove(&self.client_names[c]);
                self.client_names[c] = String::new();
                self.client_live[c] = false;
                self.free_clients.push(c);
                n += 1;
            }
        }
        self.forget_at = FORGET_MIN.max(2 * self.num_clients());
        n
    }

    /// Choose a worker for a new request and record it as in flight there.
    /// A duplicate in-flight id is a `ValueError` and changes nothing.
    pub fn dispatch(&mut self, id: RequestId, client: &str, tokens: &[u32]) -> Result<usize> {
        let c = self.client_for(&id, client)?;
        let seen = view::seen_load(&self.load, &self.external);
        let load: &[u64] = seen.as_deref().unwrap_or(&self.load);
        let w = match &mut self.policy {
            Policy::D2lpm(st) => {
                let tree = self.tree.as_ref().expect("D2LPM has a tree");
                let (len, g) = tree.longest_match_ref(tokens);
                let place = placement_for(st, tokens, len, &self.worker_keys);
                st.select(c, (len, g), load, tokens.len(), &place)
            }
            Policy::RoundRobin { next } => {
                let w = *next;
                *next = (w + 1) % self.num_workers;
                w
            }
            Policy::LeastLoaded => {
                baselines::argmin(load, 0..self.num_workers).expect("at least one worker")
            }
            Policy::ClientRoundRobin { next } => {
                if next.len() <= c {
                    // A new client starts where the previous new client would
                    // have gone next, spreading clients over the workers.
                    next.resize(c + 1, 0);
                    next[c] = c % self.num_workers;
                }
                let w = next[c];
                next[c] = (w + 1) % self.num_workers;
                w
            }
            Policy::PrefixAffinity(cfg) => {
                let tree = self.tree.as_ref().expect("affinity has a tree");
                let (len, g) = tree.longest_match_ref(tokens);
                cfg.select(len, tokens.len(), g, load)
            }
        };
        self.record(id, c, tokens, w);
        Ok(w)
    }

    /// The client slot of a new request `id` (interned if new); a duplicate
    /// in-flight id is a `ValueError` and changes nothing.
    fn client_for(&mut self, id: &RequestId, client: &str) -> Result<usize> {
        if self.inflight.contains_key(id) {
            return Err(Error::value(format!(
                "request_id {id} is already in flight"
            )));
        }
        Ok(match self.clients.get(client) {
            Some(&c) => c,
            None => self.new_client(client),
        })
    }

    /// The bookkeeping of a dispatch of `tokens` by client slot `c` to `w`:
    /// the tree, the counts and the in-flight record.
    fn record(&mut self, id: RequestId, c: usize, tokens: &[u32], w: usize) {
        if let Some(t) = self.tree.as_mut() {
            t.insert(tokens, w);
        }
        self.load[w] += 1;
        self.dispatched[w] += 1;
        self.client_inflight[c] += 1;
        self.inflight.insert(
            id,
            Inflight {
                client: c,
                worker: w,
                input_len: tokens.len() as u64,
            },
        );
    }

    /// Report that an in-flight request finished after `output_tokens`
    /// output tokens. Unknown id: `KeyError`, nothing changes.
    pub fn on_finish(&mut self, id: &RequestId, output_tokens: u64) -> Result<usize> {
        let Some(r) = self.inflight.remove(id) else {
            return Err(Error::key(format!("request_id {id} is not in flight")));
        };
        self.load[r.worker] -= 1;
        self.client_inflight[r.client] -= 1;
        if let Policy::D2lpm(st) = &mut self.policy {
            st.on_finish(r.client, r.worker, output_tokens);
        }
        if self.num_clients() > self.forget_at {
            self.forget_idle_clients();
        }
        Ok(r.worker)
    }

    /// Report that `worker` no longer holds `tokens[..kept + 1]`; it still
    /// holds `tokens[..kept]` (`kept = 0`: none of it). Returns the number of
    /// tree nodes the worker was removed from.
    pub fn on_evict(&mut self, worker: usize, tokens: &[u32], kept: usize) -> Result<usize> {
        self.check_worker(worker)?;
        Ok(match self.tree.as_mut() {
            Some(t) => t.evict(tokens, worker, kept),
            None => 0,
        })
    }
}

/// Whether the longest match, `matched` of a prompt's `input_len` tokens,
/// counts as locality: something matched and `matched / input_len` is at
/// least `threshold` (a fraction in [0, 1]; 0 counts every match). The
/// affinity baselines and D2LPM's `match_threshold` share this rule.
pub(crate) fn match_counts(matched: usize, input_len: usize, threshold: f64) -> bool {
    let ratio = if input_len == 0 {
        0.0
    } else {
        matched as f64 / input_len as f64
    };
    matched > 0 && ratio >= threshold
}

/// `v` as a fraction: finite and in [0, 1] (a `ValueError` naming `field`).
pub(crate) fn check_fraction(field: &str, v: f64) -> Result<f64> {
    check_weight(field, v)?;
    if v > 1.0 {
        return Err(Error::value(format!("{field} must be in [0, 1], got {v}")));
    }
    Ok(v)
}

/// Validate a D2LPM / affinity float knob (shared by the configs): finite
/// and >= 0, naming `field`.
pub(crate) fn check_weight(field: &str, v: f64) -> Result<f64> {
    check_non_negative(field, v)
}

/// Validate a quantum that may be infinite (`Q_w = inf`: no fairness limit),
/// naming `field`; the message says so, unlike `check_positive`'s "finite".
pub(crate) fn check_quantum(field: &str, v: f64) -> Result<f64> {
    if v > 0.0 {
        return Ok(v);
    }
    Err(Error::value(format!(
        "{field} must be a number > 0 or inf, got {v}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: i64) -> RequestId {
        RequestId::Int(i)
    }

    #[test]
    fn round_robin_and_least_loaded() {
        let mut d = Dispatcher::round_robin(3).unwrap();
        let ws: Vec<usize> = (0..5)
            .map(|i| d.dispatch(id(i), "a", &[1]).unwrap())
            .collect();
        assert_eq!(ws, vec![0, 1, 2, 0, 1]);
        assert_eq!(d.queue_sizes(), &[2, 2, 1]);
        d.on_finish(&id(0), 3).unwrap();
        assert_eq!(d.queue_sizes(), &[1, 2, 1]);
        let mut l = Dispatcher::least_loaded(3).unwrap();
        l.dispatch(id(0), "a", &[]).unwrap();
        l.dispatch(id(1), "a", &[]).unwrap();
        l.on_finish(&id(0), 1).unwrap();
        assert_eq!(l.dispatch(id(2), "a", &[]).unwrap(), 0);
    }

    #[test]
    fn locality_follows_d2lpms_match_threshold() {
        let doc: Vec<u32> = (1..=64).collect();
        let longer: Vec<u32> = doc.iter().copied().chain(100..200).collect(); // 64 of 164
        for (threshold, counts) in [(0.0, true), (0.39, true), (0.4, false)] {
            let mut cfg = D2lpmConfig::new(100.0);
            cfg.match_threshold = threshold;
            let mut d = Dispatcher::d2lpm(2, cfg).unwrap();
            let w = d.dispatch(id(0), "a", &doc).unwrap();
            assert_eq!(d.locality(&longer), (64, vec![w], counts));
            assert_eq!(d.locality(&[999]), (0, vec![0, 1], false));
        }
        let mut a = Dispatcher::round_robin(2).unwrap();
        a.dispatch(id(0), "a", &doc).unwrap();
        assert!(!a.locality(&longer).2); // no tree: nothing is ever held
    }

    #[test]
    fn client_round_robin_cycles_per_client() {
        let mut d = Dispatcher::client_round_robin(2).unwrap();
        let a: Vec<usize> = (0..3)
            .map(|i| d.dispatch(id(i), "a", &[]).unwrap())
            .collect();
        let b: Vec<usize> = (3..6)
            .map(|i| d.dispatch(id(i), "b", &[]).unwrap())
            .collect();
        assert_eq!(a, vec![0, 1, 0]);
        assert_eq!(b, vec![1, 0, 1]);
    }

    #[test]
    fn state_round_trip_dispatches_like_the_original() {
        let mut d = Dispatcher::d2lpm(3, D2lpmConfig::new(7.0)).unwrap();
        let p: Vec<u32> = (0..6).collect();
        for i in 0..5 {
            d.dispatch(
                id(i),
                if i % 2 == 0 { "a" } else { "b" },
                &p[..(i as usize + 1)],
            )
            .unwrap();
        }
        d.on_finish(&id(0), 4).unwrap();
        d.on_evict(0, &p, 2).unwrap();
        let state = d.state(true).unwrap();
        let mut r = Dispatcher::d2lpm(3, D2lpmConfig::new(1.0)).unwrap();
        r.load_state(&state).unwrap();
        assert_eq!(r.state(true).unwrap(), state);
        for i in 5..12 {
            assert_eq!(
                r.dispatch(id(i), "a", &p[..3]).unwrap(),
                d.dispatch(id(i), "a", &p[..3]).unwrap()
            );
        }
        assert_eq!(
            r.on_finish(&id(3), 2).unwrap(),
            d.on_finish(&id(3), 2).unwrap()
        );
        assert_eq!(r.state(true).unwrap(), d.state(true).unwrap());
        // another policy's state is refused, naming the field
        let mut rr = Dispatcher::round_robin(3).unwrap();
        let err = rr.load_state(&state).unwrap_err().to_string();
        assert!(err.contains("policy"), "{err}");
    }

    #[test]
    fn errors_leave_state_unchanged() {
        let mut d = Dispatcher::d2lpm(2, D2lpmConfig::new(100.0)).unwrap();
        d.dispatch(id(1), "a", &[1, 2]).unwrap();
        let before = format!("{d:?}");
        assert!(matches!(d.dispatch(id(1), "b", &[3]), Err(Error::Value(_))));
        assert!(matches!(d.on_finish(&id(9), 1), Err(Error::Key(_))));
        assert!(matches!(d.on_evict(2, &[1], 0), Err(Error::Index(_))));
        assert_eq!(before, format!("{d:?}"));
        assert!(Dispatcher::round_robin(0).is_err());
        assert!(Dispatcher::d2lpm(2, D2lpmConfig::new(0.0)).is_err());
        assert!(Dispatcher::d2lpm(2, D2lpmConfig::new(f64::NAN)).is_err());
        assert!(Dispatcher::d2lpm(2, D2lpmConfig::new(f64::INFINITY)).is_ok());
    }
}
