//! Saving and restoring a local scheduler's fairness state
//! ([`LocalScheduler::state`], [`LocalScheduler::load_state`]).
//!
//! The state is a [`Value`] document (plain JSON data):
//!
//! ```text
//! {"format": "fairq.LocalScheduler", "version": 1,
//!  "policy": "fcfs" | "lpm" | "vtc" | "dlpm" | "las" (a registered name),
//!  "options": {} | {"w_in", "w_out"} | {"quantum", "w_e", "w_q"} | ... (its options),
//!  "clients": [{"name", "weight", "service", "waiting", "admitted",
//!               its state field: "counter" (VTC) | "deficit" (DLPM) | "attained" (LAS)}],
//!  "running": [{"request_id", "client", "input_len", "charged_extend", "admission_weight"}],
//!  "refills": n (DLPM),
//!  "quantum_memory": {"cost", "count"} (DLPM with the automatic quantum)}
//! ```
//!
//! What it holds: the policy and its options, every client in first-seen
//! order (weight, service so far, VTC counter or DLPM deficit, how many
//! requests it had waiting), DLPM's refill count and, with the automatic
//! quantum, its memory (`crate::quantum::Quantum::memory`: the decayed charge
//! sum and admission count, so a restart keeps the quantum it had learned
//! rather than re-learning it from the initial value), and the admitted,
//! unfinished requests, so `charge_output`, `recharge_extend` and `finish`
//! after a restore land as they would have. What it does not hold: the
//! waiting requests (the engine's; the caller re-adds them, in their
//! original order) and the prefix cache (the engine's `RadixTree`).
//!
//! The one rule that makes a restore exact: a client that had requests
//! waiting when the state was saved is *not* lifted (VTC's rule for a client
//! whose queue goes from empty to non-empty) when its first request is
//! re-added, because in the uninterrupted scheduler its queue never went
//! empty. Re-adding the waiting requests in their original order (relative
//! order is all the arrival numbers carry) then gives the same admissions,
//! counters and service as a scheduler that never stopped.
//!
//! Loading validates the whole document first, naming the field by its path
//! (`clients[2].deficit must be a finite number, got nan`), and changes
//! nothing on error. It needs a scheduler with no waiting or running
//! requests (a fresh one); the state's options replace the scheduler's.

use std::collections::{HashMap, HashSet};

use super::book::{Client, Req};
use super::policy::AdmissionOrder;
use super::{LocalScheduler, Order, Policy, RequestId, NIL};
use crate::error::{Error, Result};
use crate::value::{as_u64, check_state_envelope, Fields, Path, Value};

/// The `format` field of a local scheduler's state.
pub const FORMAT: &str = "fairq.LocalScheduler";
/// The state version this build writes and reads.
pub const VERSION: u64 = 1;

/// A client as saved: what the book keeps plus the policy's counter.
#[derive(Debug, Clone)]
pub(super) struct SavedClient {
    pub name: String,
    pub weight: f64,
    pub service: f64,
    pub waiting: usize,
    pub admitted: u64,
    /// The policy's state field (VTC's counter, DLPM's deficit; 0 for FCFS /
    /// LPM).
    pub counter: f64,
}

struct SavedRunning {
    id: RequestId,
    client: u32,
    input_len: usize,
    charged_extend: usize,
    admission_weight: f64,
}

fn float(f: f64) -> Value {
    Value::Float(f)
}

/// A required finite number; `min` (exclusive when `strict`) if given.
fn number(f: &Fields<'_>, name: &str, min: Option<(f64, bool)>) -> Result<f64> {
    let path = f.at(name);
    let x = f.opt_f64(name)?.ok_or_else(|| path.err("is required"))?;
    if !x.is_finite() {
        return Err(path.err(format!(
            "must be a finite number, got {}",
            Value::Float(x).describe()
        )));
    }
    match min {
        Some((m, true)) if x <= m => Err(path.err(format!("must be > {m}, got {x}"))),
        Some((m, false)) if x < m => Err(path.err(format!("must be >= {m}, got {x}"))),
        _ => Ok(x),
    }
}

fn count(f: &Fields<'_>, name: &str) -> Result<usize> {
    let v = f.required(name)?;
    let n = as_u64(v, &f.at(name), 0)?;
    usize::try_from(n).map_err(|_| f.at(name).err(format!("is too large, got {n}")))
}

/// The options document of a policy, and the policy it describes.
fn read_options(kind: &Policy, v: &Value, path: Path) -> Result<Policy> {
    let f = Fields::new(v, path, "options")?;
    let spec = kind.spec();
    let known: Vec<&str> = spec.options.iter().map(|o| o.name).collect();
    f.deny_unknown(&known, "", |_| None)?;
    let values = spec
        .options
        .iter()
        .map(|o| {
            if o.zero_is_off && f.opt_f64(o.name)?.is_none() {
                return Ok(0.0); // a state written before the option existed
            }
            let x = number(&f, o.name, Some((0.0, !o.zero_is_off)))?;
            if o.flag && x != 0.0 && x != 1.0 {
                return Err(f
                    .at(o.name)
                    .err(format!("must be 0 or 1 (off or on), got {x}")));
            }
            Ok(x)
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(Policy::from_options(spec.name, &values).expect("registered policy"))
}

fn options_value(p: &Policy) -> Value {
    let names = p.spec().options.iter().map(|o| o.name);
    Value::map(names.zip(p.option_values().into_iter().map(float)))
}

impl<T> LocalScheduler<T> {
    /// The fairness state as a JSON-ready document (see the module docs).
    /// Fails only for a running request whose id holds a lone surrogate.
    pub fn state(&self) -> Result<Value> {
        let field = self.policy.spec().state_field;
        let now = self.now();
        let clients = self
            .book
            .clients
            .iter()
            .enumerate()
            .filter(|(_, cl)| cl.live)
            .map(|(c, cl)| {
                let mut pairs = vec![
                    ("name", Value::str(cl.name.as_str())),
                    ("weight", float(cl.weight)),
                    ("service", float(cl.service)),
                    ("waiting", Value::Int(cl.waiting as i128)),
                    ("admitted", Value::Int(cl.admitted as i128)),
                ];
                if let Some(field) = field {
                    pairs.push((field.name, float(self.order.state_value(c as u32, now))));
                }
                Value::map(pairs)
            })
            .collect();
        let mut running: Vec<&Req<T>> = self.book.running_requests().collect();
        running.sort_by_key(|q| q.seq);
        let running = running
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let at = Path::root().field("running").index(i).field("request_id");
                Ok(Value::map([
                    ("request_id", q.id.to_value(&at)?),
                    (
                        "client",
                        Value::str(self.book.clients[q.client as usize].name.as_str()),
                    ),
                    ("input_len", Value::Int(q.input_len as i128)),
                    ("charged_extend", Value::Int(q.charged_extend as i128)),
                    ("admission_weight", float(q.admission_weight)),
                ]))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut doc = vec![
            ("format", Value::str(FORMAT)),
            ("version", Value::Int(VERSION as i128)),
            ("policy", Value::str(self.policy.spec().name)),
            ("options", options_value(&self.policy)),
            ("clients", Value::List(clients)),
            ("running", Value::List(running)),
        ];
        if self.policy.spec().refills {
            doc.push(("refills", Value::Int(self.order.refills() as i128)));
        }
        if let Some((cost, count)) = self.order.quantum_memory() {
            let memory = Value::map([("cost", float(cost)), ("count", float(count))]);
            doc.push(("quantum_memory", memory));
        }
        Ok(Value::map(doc))
    }

    /// Restore a state written by [`Self::state`] into this scheduler, which
    /// must hold no waiting or running request; the caller then re-adds the
    /// waiting requests in their original order. Validates everything first
    /// (errors name the field's path) and changes nothing on error.
    pub fn load_state(&mut self, v: &Value) -> Result<()> {
        if !self.book.is_empty() {
            return Err(Error::value(format!(
                "load_state needs a scheduler with no requests; this one has {} waiting and {} \
                 running (load into a fresh scheduler, then re-add the waiting requests)",
                self.book.waiting, self.book.running
            )));
        }
        let f = Fields::new(v, Path::root(), "the state")?;
        let mut known = vec![
            "format", "version", "policy", "options", "clients", "running",
        ];
        if self.policy.spec().refills {
            known.extend(["refills", "quantum_memory"]);
        }
        f.deny_unknown(&known, "state: ", |_| None)?;
        check_state_envelope(&f, FORMAT, VERSION, "a local scheduler")?;
        let kind = self.policy.spec().name;
        match f.required("policy")? {
            Value::Str(s) if s == kind => {}
            other => {
                return Err(f.at("policy").err(format!(
                    "is {}, but this scheduler runs '{kind}' (load a state into a scheduler of \
                     the same policy)",
                    other.describe()
                )))
            }
        }
        let policy = read_options(&self.policy, f.required("options")?, f.at("options"))?;
        let field = policy.spec().state_field;

        let mut clients = Vec::new();
        let mut index: HashMap<String, u32> = HashMap::new();
        for (i, cv) in f
            .opt_list("clients")?
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let cf = Fields::new(cv, f.at("clients").index(i), "client")?;
            let mut known = vec!["name", "weight", "service", "waiting", "admitted"];
            known.extend(field.map(|f| f.name));
            cf.deny_unknown(&known, "", |_| None)?;
            let name = cf.unique_name(&mut index, i as u32)?;
            clients.push(SavedClient {
                weight: number(&cf, "weight", Some((0.0, true)))?,
                service: number(&cf, "service", Some((0.0, false)))?,
                waiting: count(&cf, "waiting")?,
                admitted: as_u64(cf.required("admitted")?, &cf.at("admitted"), 0)?,
                counter: match field {
                    Some(field) => number(&cf, field.name, field.min.map(|m| (m, false)))?,
                    None => 0.0,
                },
                name,
            });
        }

        let mut running = Vec::new();
        let mut ids = HashSet::new();
        for (i, rv) in f
            .opt_list("running")?
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let rf = Fields::new(rv, f.at("running").index(i), "running request")?;
            rf.deny_unknown(
                &[
                    "request_id",
                    "client",
                    "input_len",
                    "charged_extend",
                    "admission_weight",
                ],
                "",
                |_| None,
            )?;
            let id = RequestId::unique_field(&rf, &mut ids)?;
            let client = rf.lookup("client", &index, "clients")?;
            let input_len = count(&rf, "input_len")?;
            if input_len >= u32::MAX as usize {
                return Err(rf
                    .at("input_len")
                    .err(format!("is too long, got {input_len}")));
            }
            let charged_extend = count(&rf, "charged_extend")?;
            if charged_extend > input_len {
                return Err(rf.at("charged_extend").err(format!(
                    "({charged_extend}) exceeds input_len ({input_len})"
                )));
            }
            running.push(SavedRunning {
                id,
                client,
                input_len,
                charged_extend,
                admission_weight: number(&rf, "admission_weight", Some((0.0, true)))?,
            });
        }
        let refills = if policy.spec().refills {
            as_u64(f.required("refills")?, &f.at("refills"), 0)?
        } else {
            0
        };
        let memory = match f.get("quantum_memory") {
            Some(m) => {
                let mf = Fields::new(m, f.at("quantum_memory"), "quantum_memory")?;
                mf.deny_unknown(&["cost", "count"], "", |_| None)?;
                Some((
                    number(&mf, "cost", Some((0.0, false)))?,
                    number(&mf, "count", Some((0.0, false)))?,
                ))
            }
            None => None,
        };

        // Valid: apply (nothing below fails).
        self.policy = policy;
        self.book.reset_clients(policy.service_weights());
        self.order = Order::new(policy, self.lpm_rule);
        for saved in &clients {
            self.book.restore_client(Client {
                name: saved.name.clone(),
                weight: saved.weight,
                service: saved.service,
                waiting: 0,
                running: 0,
                admitted: saved.admitted,
                live: true,
            });
            self.order.add_client();
        }
        self.order.set_time(self.now());
        self.order.load_counters(&clients, refills);
        if let Some((cost, count)) = memory {
            self.order.load_quantum_memory(cost, count);
        }
        for r in running {
            self.book.restore_running(Req {
                id: r.id,
                client: r.client,
                tokens: Vec::new(),
                root: NIL,
                input_len: r.input_len,
                item: None,
                seq: 0,
                running: true,
                charged_extend: r.charged_extend,
                admission_weight: r.admission_weight,
                resumed: false,
            });
        }
        Ok(())
    }
}
