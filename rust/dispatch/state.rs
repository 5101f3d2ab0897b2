//! Saving and restoring a dispatcher ([`Dispatcher::state`],
//! [`Dispatcher::load_state`]).
//!
//! The state is a [`Value`] document (plain JSON data):
//!
//! ```text
//! {"format": "fairq.Dispatcher", "version": 1, "policy": "D2LPM", "num_workers": W,
//!  "options": {"worker_quantum", "w_e", "w_q", "placement_slack" (optional, default 0),
//!              "match_threshold" (optional, default 0),
//!              "spread_by_credit" (optional, default false)}
//!             | {"abs_threshold", ...} | {},
//!  "clients": [{"name", "deficits": [W numbers] (D2LPM), "next": w (ClientRoundRobin)}],
//!  "cursor": w (RoundRobin), "refills": n (D2LPM),
//!  "worker_keys": [W keys] (D2LPM, optional: only when a worker is named),
//!  "dispatched": [W counts],
//!  "inflight": [{"request_id", "client", "worker", "input_len" (optional, default 0)}],
//!  "tree": [{"tokens": [...], "workers": [...]}] (D2LPM, PrefixAffinity)}
//! ```
//!
//! It holds everything a dispatch depends on: the options, the clients in
//! first-seen order with their per-worker deficits (D2LPM) or cursor, the
//! in-flight requests (so `on_finish` after a restore charges and frees the
//! right worker; the queue sizes `s_w` are their count per worker), and the
//! global prefix tree as the fewest inserts that rebuild it (which worker
//! holds which prefix is the dispatcher's own record, not an engine's, so a
//! restore without it would lose every affinity). A restored dispatcher
//! dispatches exactly as one that never stopped. Loading validates the whole
//! document first, naming the field by its path, and changes nothing on
//! error; it needs a dispatcher with nothing in flight and the same policy
//! and number of workers. The state's options replace the constructor's.

use std::collections::{HashMap, HashSet};

use super::baselines::AffinityConfig;
use super::d2lpm::{self, D2lpmConfig};
use super::placement;
use super::tree::WorkerTree;
use super::{Dispatcher, Inflight, Policy, RequestId};
use crate::error::{Error, Result};
use crate::value::{as_bool, as_u64, check_state_envelope, Fields, Path, Value};

/// The `format` field of a dispatcher's state.
pub const FORMAT: &str = "fairq.Dispatcher";
/// The state version this build writes and reads.
pub const VERSION: u64 = 1;

fn float(f: f64) -> Value {
    Value::Float(f)
}
fn int(n: u64) -> Value {
    Value::Int(n as i128)
}
fn ints(xs: impl IntoIterator<Item = u64>) -> Value {
    Value::List(xs.into_iter().map(int).collect())
}

fn list<'a>(f: &Fields<'a>, name: &str) -> Result<&'a [Value]> {
    f.opt_list(name)?
        .ok_or_else(|| f.at(name).err("is required"))
}

/// A required number (an int is read as a float); NaN is never accepted.
fn number(v: &Value, path: &Path) -> Result<f64> {
    let x = match v {
        Value::Float(x) => *x,
        Value::Int(i) => *i as f64,
        other => return Err(path.err(format!("must be a number, got {}", other.describe()))),
    };
    if x.is_nan() {
        return Err(path.err("must be a number, got nan"));
    }
    Ok(x)
}

fn worker(v: &Value, path: &Path, num_workers: usize) -> Result<usize> {
    let w = as_u64(v, path, 0)?;
    if w as usize >= num_workers || w > u32::MAX as u64 {
        return Err(path.err(format!("must be a worker in 0..{num_workers}, got {w}")));
    }
    Ok(w as usize)
}

/// A config's own check, its message naming the field under `options.`.
fn under_options(r: Result<()>) -> Result<()> {
    r.map_err(|e| match e {
        Error::Value(m) => Error::value(format!("options.{m}")),
        other => other,
    })
}

impl Dispatcher {
    /// The dispatcher's state as a JSON-ready document (see the module
    /// docs); `with_tree: false` leaves the prefix tree out (a summary, e.g.
    /// for metrics; such a document does not load into a prefix-aware
    /// dispatcher). Fails only for an in-flight id holding a lone surrogate.
    pub fn state(&self, with_tree: bool) -> Result<Value> {
        let w = self.num_workers;
        let options = match &self.policy {
            Policy::D2lpm(st) => {
                let mut pairs = vec![
                    ("worker_quantum", float(st.cfg.worker_quantum)),
                    ("w_e", float(st.cfg.w_e)),
                    ("w_q", float(st.cfg.w_q)),
                ];
                if st.cfg.placement_slack > 0 {
                    pairs.push(("placement_slack", int(st.cfg.placement_slack)));
                }
                if st.cfg.match_threshold > 0.0 {
                    pairs.push(("match_threshold", float(st.cfg.match_threshold)));
                }
                if st.cfg.spread_by_credit {
                    pairs.push(("spread_by_credit", Value::Bool(true)));
                }
                Value::map(pairs)
            }
            Policy::PrefixAffinity(cfg) => Value::map([
                ("abs_threshold", float(cfg.abs_threshold)),
                ("rel_threshold", float(cfg.rel_threshold)),
                ("match_threshold", float(cfg.match_threshold)),
            ]),
            _ => Value::map(Vec::<(&str, Value)>::new()),
        };
        let clients = self
            .client_names
            .iter()
            .enumerate()
            .filter(|&(c, _)| self.client_live[c])
            .map(|(c, name)| {
                let mut pairs = vec![("name", Value::str(name.as_str()))];
                match &self.policy {
                    Policy::D2lpm(st) => pairs.push((
                        "deficits",
                        Value::List((0..w).map(|k| float(st.deficit(c, k))).collect()),
                    )),
                    Policy::ClientRoundRobin { next } => {
                        if let Some(&n) = next.get(c) {
                            pairs.push(("next", int(n as u64)));
                        }
                    }
                    _ => {}
                }
                Value::map(pairs)
            })
            .collect();
        let mut inflight: Vec<(&RequestId, &Inflight)> = self.inflight.iter().collect();
        inflight.sort_by(|a, b| a.0.cmp(b.0));
        let inflight = inflight
            .into_iter()
            .enumerate()
            .map(|(i, (id, r))| {
                let at = Path::root().field("inflight").index(i).field("request_id");
                Ok(Value::map([
                    ("request_id", id.to_value(&at)?),
                    ("client", Value::str(self.client_names[r.client].as_str())),
                    ("worker", int(r.worker as u64)),
                    ("input_len", int(r.input_len)),
                ]))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut doc = vec![
            ("format", Value::str(FORMAT)),
            ("version", int(VERSION)),
            ("policy", Value::str(self.policy.name())),
            ("num_workers", int(w as u64)),
            ("options", options),
            ("clients", Value::List(clients)),
            ("dispatched", ints(self.dispatched.iter().copied())),
            ("inflight", Value::List(inflight)),
        ];
        match &self.policy {
            Policy::RoundRobin { next } => doc.push(("cursor", int(*next as u64))),
            Policy::D2lpm(st) => {
                doc.push(("refills", int(st.refills())));
                let named = (0..w).any(|k| self.worker_keys[k] != placement::slot_key(k));
                if named {
                    doc.push(("worker_keys", ints(self.worker_keys.iter().copied())));
                }
            }
            _ => {}
        }
        if let Some(t) = self.tree.as_ref().filter(|_| with_tree) {
            let held = t
                .holdings()
                .into_iter()
                .map(|(tokens, workers)| {
                    Value::map([
                        ("tokens", ints(tokens.into_iter().map(u64::from))),
                        ("workers", ints(workers.into_iter().map(|x| x as u64))),
                    ])
                })
                .collect();
            doc.push(("tree", Value::List(held)));
        }
        Ok(Value::map(doc))
    }

    /// Restore a state written by [`Self::state`]. The dispatcher must have
    /// nothing in flight and the state's policy and number of workers.
    /// Validates everything first (errors name the field) and changes
    /// nothing on error.
    pub fn load_state(&mut self, v: &Value) -> Result<()> {
        if !self.inflight.is_empty() {
            return Err(Error::value(format!(
                "load_state needs a dispatcher with nothing in flight; this one has {} \
                 (load into a fresh dispatcher)",
                self.inflight.len()
            )));
        }
        let n = self.num_workers;
        let name = self.policy.name();
        let f = Fields::new(v, Path::root(), "the state")?;
        let mut known = vec![
            "format",
            "version",
            "policy",
            "num_workers",
            "options",
            "clients",
            "dispatched",
            "inflight",
        ];
        match &self.policy {
            Policy::RoundRobin { .. } => known.push("cursor"),
            Policy::D2lpm(_) => known.extend(["refills", "tree", "worker_keys"]),
            Policy::PrefixAffinity(_) => known.push("tree"),
            _ => {}
        }
        f.deny_unknown(&known, "state: ", |_| None)?;
        check_state_envelope(&f, FORMAT, VERSION, "a dispatcher")?;
        match f.required("policy")? {
            Value::Str(s) if s == name => {}
            other => {
                return Err(f.at("policy").err(format!(
                    "is {}, but this dispatcher is {name} (load a state into a dispatcher of \
                     the same policy)",
                    other.describe()
                )))
            }
        }
        let workers = as_u64(f.required("num_workers")?, &f.at("num_workers"), 1)?;
        if workers != n as u64 {
            return Err(f
                .at("num_workers")
                .err(format!("is {workers}, but this dispatcher has {n} workers")));
        }

        // options
        let of = Fields::new(f.required("options")?, f.at("options"), "options")?;
        let opt = |k: &str| number(of.required(k)?, &of.at(k));
        let mut policy = match &self.policy {
            Policy::D2lpm(_) => {
                of.deny_unknown(
                    &[
                        "worker_quantum",
                        "w_e",
                        "w_q",
                        "placement_slack",
                        "match_threshold",
                        "spread_by_credit",
                    ],
                    "",
                    |_| None,
                )?;
                let cfg = D2lpmConfig {
                    worker_quantum: opt("worker_quantum")?,
                    w_e: opt("w_e")?,
                    w_q: opt("w_q")?,
                    placement_slack: match of.get("placement_slack") {
                        Some(x) => as_u64(x, &of.at("placement_slack"), 0)?,
                        None => 0,
                    },
                    match_threshold: match of.get("match_threshold") {
                        Some(_) => opt("match_threshold")?,
                        None => 0.0,
                    },
                    spread_by_credit: match of.get("spread_by_credit") {
                        Some(x) => as_bool(x, &of.at("spread_by_credit"))?,
                        None => false,
                    },
                };
                under_options(cfg.validate())?;
                Policy::D2lpm(d2lpm::State::new(cfg))
            }
            Policy::PrefixAffinity(_) => {
                of.deny_unknown(
                    &["abs_threshold", "rel_threshold", "match_threshold"],
                    "",
                    |_| None,
                )?;
                let cfg = AffinityConfig {
                    abs_threshold: opt("abs_threshold")?,
                    rel_threshold: opt("rel_threshold")?,
                    match_threshold: opt("match_threshold")?,
                };
                under_options(cfg.validate())?;
                Policy::PrefixAffinity(cfg)
            }
            Policy::RoundRobin { .. } => {
                of.deny_unknown(&[], "", |_| None)?;
                let cursor = worker(f.required("cursor")?, &f.at("cursor"), n)?;
                Policy::RoundRobin { next: cursor }
            }
            Policy::LeastLoaded => {
                of.deny_unknown(&[], "", |_| None)?;
                Policy::LeastLoaded
            }
            Policy::ClientRoundRobin { .. } => {
                of.deny_unknown(&[], "", |_| None)?;
                Policy::ClientRoundRobin { next: Vec::new() }
            }
        };

        // clients
        let mut names = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut rows = Vec::new();
        let mut cursors = Vec::new();
        for (i, cv) in list(&f, "clients")?.iter().enumerate() {
            let cf = Fields::new(cv, f.at("clients").index(i), "client")?;
            let known: &[&str] = match policy {
                Policy::D2lpm(_) => &["name", "deficits"],
                Policy::ClientRoundRobin { .. } => &["name", "next"],
                _ => &["name"],
            };
            cf.deny_unknown(known, "", |_| None)?;
            let name = cf.unique_name(&mut index, i)?;
            names.push(name);
            if let Policy::D2lpm(_) = policy {
                let row = list(&cf, "deficits")?;
                if row.len() != n {
                    return Err(cf.at("deficits").err(format!(
                        "must list one deficit per worker ({n}), got {}",
                        row.len()
                    )));
                }
                let row = row
                    .iter()
                    .enumerate()
                    .map(|(k, x)| {
                        let at = cf.at("deficits").index(k);
                        let q = number(x, &at)?;
                        if q == f64::NEG_INFINITY {
                            return Err(at.err("must not be -inf"));
                        }
                        Ok(q)
                    })
                    .collect::<Result<Vec<f64>>>()?;
                rows.push(row);
            }
            if let Policy::ClientRoundRobin { .. } = policy {
                match cf.get("next") {
                    Some(x) if cursors.len() == i => cursors.push(worker(x, &cf.at("next"), n)?),
                    Some(_) => {
                        return Err(cf.at("next").err(
                            "is set after a client without one (cursors belong to the first \
                             clients)",
                        ))
                    }
                    None => {}
                }
            }
        }

        // counters, in-flight requests, tree
        let dispatched = list(&f, "dispatched")?;
        if dispatched.len() != n {
            return Err(f.at("dispatched").err(format!(
                "must list one count per worker ({n}), got {}",
                dispatched.len()
            )));
        }
        let dispatched = dispatched
            .iter()
            .enumerate()
            .map(|(k, x)| as_u64(x, &f.at("dispatched").index(k), 0))
            .collect::<Result<Vec<u64>>>()?;
        let mut inflight = HashMap::new();
        let mut load = vec![0u64; n];
        let mut seen = HashSet::new();
        for (i, rv) in list(&f, "inflight")?.iter().enumerate() {
            let rf = Fields::new(rv, f.at("inflight").index(i), "in-flight request")?;
            rf.deny_unknown(&["request_id", "client", "worker", "input_len"], "", |_| {
                None
            })?;
            let id = RequestId::unique_field(&rf, &mut seen)?;
            let client = rf.lookup("client", &index, "clients")?;
            let w = worker(rf.required("worker")?, &rf.at("worker"), n)?;
            load[w] += 1;
            if load[w] > dispatched[w] {
                return Err(rf.at("worker").err(format!(
                    "puts more requests in flight on worker {w} than dispatched[{w}] = {}",
                    dispatched[w]
                )));
            }
            let input_len = match rf.get("input_len") {
                Some(x) => as_u64(x, &rf.at("input_len"), 0)?,
                None => 0,
            };
            inflight.insert(
                id,
                Inflight {
                    client,
                    worker: w,
                    input_len,
                },
            );
        }
        let refills = match policy {
            Policy::D2lpm(_) => as_u64(f.required("refills")?, &f.at("refills"), 0)?,
            _ => 0,
        };
        let worker_keys = match f.get("worker_keys") {
            Some(_) => {
                let keys = list(&f, "worker_keys")?;
                if keys.len() != n {
                    return Err(f.at("worker_keys").err(format!(
                        "must list one key per worker ({n}), got {}",
                        keys.len()
                    )));
                }
                keys.iter()
                    .enumerate()
                    .map(|(k, x)| as_u64(x, &f.at("worker_keys").index(k), 0))
                    .collect::<Result<Vec<u64>>>()?
            }
            None => (0..n).map(placement::slot_key).collect(),
        };
        let tree = if matches!(policy, Policy::D2lpm(_) | Policy::PrefixAffinity(_)) {
            let mut t = WorkerTree::new(n);
            for (i, hv) in list(&f, "tree")?.iter().enumerate() {
                let hf = Fields::new(hv, f.at("tree").index(i), "tree entry")?;
                hf.deny_unknown(&["tokens", "workers"], "", |_| None)?;
                let tokens = list(&hf, "tokens")?
                    .iter()
                    .enumerate()
                    .map(|(k, x)| {
                        let at = hf.at("tokens").index(k);
                        let id = as_u64(x, &at, 0)?;
                        u32::try_from(id).map_err(|_| at.err(format!("must be < 2**32, got {id}")))
                    })
                    .collect::<Result<Vec<u32>>>()?;
                let holders = list(&hf, "workers")?
                    .iter()
                    .enumerate()
                    .map(|(k, x)| worker(x, &hf.at("workers").index(k), n))
                    .collect::<Result<Vec<usize>>>()?;
                for w in holders {
                    t.insert(&tokens, w);
                }
            }
            Some(t)
        } else {
            None
        };

        // Valid: apply (nothing below fails).
        match &mut policy {
            Policy::D2lpm(st) => st.restore(rows, refills),
            Policy::ClientRoundRobin { next } => *next = cursors,
            _ => {}
        }
        self.policy = policy;
        let mut client_inflight = vec![0u64; names.len()];
        for r in inflight.values() {
            client_inflight[r.client] += 1;
        }
        self.client_live = vec![true; names.len()];
        self.client_inflight = client_inflight;
        self.free_clients.clear();
        self.clients = index;
        self.client_names = names;
        self.dispatched = dispatched;
        self.load = load;
        self.inflight = inflight;
        self.tree = tree;
        self.worker_keys = worker_keys;
        Ok(())
    }
}
