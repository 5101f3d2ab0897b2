//! Saving and restoring a WFQ queue ([`Wfq::state`], [`Wfq::load_state`]).
//!
//! ```text
//! {"format": "fairq.WFQQueue", "version": 1, "virtual_clock": "start" | "finish",
//!  "virtual_time": V,
//!  "flows": [{"flow": key, "last_finish": F_last}],
//!  "waiting": [{"flow": key | null, "start", "finish", "arrival", "remaining", "weight"}]}
//! ```
//!
//! A flow key is a JSON string or integer (the caller's flow, e.g. a
//! client id). The state holds the virtual time, every flow's `F_last` and
//! the tags of the queued requests in arrival order, but not the requests
//! themselves: they are the caller's, and it adds them again, in their
//! original order, after the load. Each such add takes the next saved tags
//! instead of computing new ones (they were computed against the virtual
//! time of their own arrival), after checking it is the same request (flow,
//! size, weight, arrival); the queue then pops exactly as one that never
//! stopped. Tags of requests popped before the save (kept by object
//! identity for `prepend`) are not saved: identities do not survive a
//! restart.

use std::collections::VecDeque;
use std::hash::Hash;

use super::{check_finite, Tags, VirtualClock, Wfq};
use crate::error::{Error, Result};
use crate::value::{check_state_envelope, Fields, Path, Value};

/// The `format` field of a WFQ queue's state.
pub const FORMAT: &str = "fairq.WFQQueue";
/// The state version this build writes and reads.
pub const VERSION: u64 = 1;

/// A validated state. [`parse_state`] gives the flows as their document
/// values (`K = Value`); the caller maps them to its own flow keys once
/// validation has passed and hands the result to [`Wfq::load_state`].
#[derive(Debug, Clone)]
pub struct ParsedState<K = Value> {
    pub clock: VirtualClock,
    pub virtual_time: f64,
    /// `(flow, F_last)`.
    pub flows: Vec<(K, f64)>,
    /// Tags of the waiting requests in arrival order.
    pub waiting: Vec<Tags<K>>,
}

/// Saved tags an add must match, and where they stood in the document.
#[derive(Debug, Clone)]
pub(super) struct Pending<K> {
    pub tags: Tags<K>,
    pub index: usize,
}

fn number(f: &Fields<'_>, name: &str) -> Result<f64> {
    let v = f
        .opt_f64(name)?
        .ok_or_else(|| f.at(name).err("is required"))?;
    check_finite("", v).map_err(|_| {
        f.at(name).err(format!(
            "must be a finite number, got {}",
            Value::Float(v).describe()
        ))
    })
}

fn flow_value(v: &Value, path: &Path, nullable: bool) -> Result<Value> {
    match v {
        Value::Str(_) | Value::Int(_) => Ok(v.clone()),
        Value::Null if nullable => Ok(Value::Null),
        other => Err(path.err(format!(
            "must be a string or an integer{}, got {}",
            if nullable { " (or null)" } else { "" },
            other.describe()
        ))),
    }
}

/// Read and validate a state document (nothing is changed anywhere).
pub fn parse_state(v: &Value) -> Result<ParsedState> {
    let f = Fields::new(v, Path::root(), "the state")?;
    f.deny_unknown(
        &[
            "format",
            "version",
            "virtual_clock",
            "virtual_time",
            "flows",
            "waiting",
        ],
        "state: ",
        |_| None,
    )?;
    check_state_envelope(&f, FORMAT, VERSION, "a WFQ queue")?;
    let clock = match f.required("virtual_clock")? {
        Value::Str(s) => VirtualClock::parse(s).map_err(|_| {
            f.at("virtual_clock")
                .err(format!("must be 'start' or 'finish', got {s:?}"))
        })?,
        other => {
            return Err(f.at("virtual_clock").err(format!(
                "must be 'start' or 'finish', got {}",
                other.describe()
            )))
        }
    };
    let virtual_time = number(&f, "virtual_time")?;
    let mut flows = Vec::new();
    let mut seen = Vec::new();
    for (i, fv) in f.opt_list("flows")?.unwrap_or_default().iter().enumerate() {
        let ff = Fields::new(fv, f.at("flows").index(i), "flow")?;
        ff.deny_unknown(&["flow", "last_finish"], "", |_| None)?;
        let key = flow_value(ff.required("flow")?, &ff.at("flow"), false)?;
        if seen.contains(&key) {
            return Err(ff.at("flow").err(format!(
                "repeats flow {} (flows are unique)",
                key.describe()
            )));
        }
        seen.push(key.clone());
        flows.push((key, number(&ff, "last_finish")?));
    }
    let mut waiting = Vec::new();
    for (i, wv) in f
        .opt_list("waiting")?
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let wf = Fields::new(wv, f.at("waiting").index(i), "waiting request")?;
        wf.deny_unknown(
            &["flow", "start", "finish", "arrival", "remaining", "weight"],
            "",
            |_| None,
        )?;
        let flow = match wf.get("flow") {
            None => Value::Null,
            Some(v) => flow_value(v, &wf.at("flow"), true)?,
        };
        if flow != Value::Null && !seen.contains(&flow) {
            return Err(wf.at("flow").err(format!(
                "names {}, which is not in flows (a flow with waiting requests has state)",
                flow.describe()
            )));
        }
        let start = number(&wf, "start")?;
        let finish = number(&wf, "finish")?;
        if finish < start {
            return Err(wf
                .at("finish")
                .err(format!("({finish}) must be >= start ({start})")));
        }
        let remaining = number(&wf, "remaining")?;
        if remaining < 0.0 {
            return Err(wf
                .at("remaining")
                .err(format!("must be >= 0, got {remaining}")));
        }
        let weight = number(&wf, "weight")?;
        if weight <= 0.0 {
            return Err(wf.at("weight").err(format!("must be > 0, got {weight}")));
        }
        waiting.push(Tags {
            flow: Some(flow).filter(|f| *f != Value::Null),
            weight,
            start,
            finish,
            arrival: number(&wf, "arrival")?,
            remaining,
            seq: i as u64,
        });
    }
    Ok(ParsedState {
        clock,
        virtual_time,
        flows,
        waiting,
    })
}

impl<K: Hash + Eq + Clone, V> Wfq<K, V> {
    /// The state as a JSON-ready document; `flow_value` writes a flow key
    /// (a string or an integer; its error names the flow).
    pub fn state(&self, mut flow_value: impl FnMut(&K) -> Result<Value>) -> Result<Value> {
        let mut flows = self
            .flows
            .iter()
            .map(|(k, f)| Ok((flow_value(k)?, f.last_finish)))
            .collect::<Result<Vec<(Value, f64)>>>()?;
        // Deterministic: by F_last, then by key (integers first).
        let rank = |v: &Value| match v {
            Value::Int(i) => (0, *i, String::new()),
            Value::Str(s) => (1, 0, s.clone()),
            _ => (2, 0, String::new()),
        };
        flows.sort_by(|a, b| {
            a.1.total_cmp(&b.1)
                .then_with(|| rank(&a.0).cmp(&rank(&b.0)))
        });
        let written = flows
            .into_iter()
            .map(|(k, last)| Value::map([("flow", k), ("last_finish", Value::Float(last))]))
            .collect();
        let mut queued: Vec<Tags<K>> = self
            .heap
            .iter_unordered()
            .map(|(h, k, e)| Self::tags_of(k, self.heap.seq_of(h).expect("live"), e))
            .collect();
        queued.sort_by_key(|t| t.seq);
        let waiting = queued
            .iter()
            .map(|t| {
                Ok(Value::map([
                    (
                        "flow",
                        t.flow.as_ref().map_or(Ok(Value::Null), &mut flow_value)?,
                    ),
                    ("start", Value::Float(t.start)),
                    ("finish", Value::Float(t.finish)),
                    ("arrival", Value::Float(t.arrival)),
                    ("remaining", Value::Float(t.remaining)),
                    ("weight", Value::Float(t.weight)),
                ]))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Value::map([
            ("format", Value::str(FORMAT)),
            ("version", Value::Int(VERSION as i128)),
            ("virtual_clock", Value::str(self.clock.as_str())),
            ("virtual_time", Value::Float(self.vtime)),
            ("flows", Value::List(written)),
            ("waiting", Value::List(waiting)),
        ]))
    }

    /// Restore a parsed state whose flows the caller has mapped to its keys
    /// (`flows` in document order, `waiting` tags with mapped flows). The
    /// queue must be empty. The next adds must re-add the waiting requests
    /// in order (see the module docs).
    pub fn load_state(&mut self, state: ParsedState<K>) -> Result<()> {
        let ParsedState {
            clock,
            virtual_time,
            flows,
            waiting,
        } = state;
        if !self.heap.is_empty() {
            return Err(Error::value(format!(
                "load_state needs an empty queue; this one holds {} requests (load into a fresh \
                 queue, then add the waiting requests again)",
                self.heap.len()
            )));
        }
        self.clock = clock;
        self.vtime = virtual_time;
        self.flows.clear();
        for (k, last) in flows {
            self.flows.insert(
                k,
                super::Flow {
                    last_finish: last,
                    queued: 0,
                },
            );
        }
        self.pending = waiting
            .into_iter()
            .enumerate()
            .map(|(index, tags)| Pending { tags, index })
            .collect::<VecDeque<_>>();
        Ok(())
    }

    /// Requests of a loaded state still to be re-added.
    pub fn pending_readds(&self) -> usize {
        self.pending.len()
    }

    /// An add while saved tags are pending: it must be the next waiting
    /// request of the state; it gets its saved tags.
    pub(super) fn take_pending(
        &mut self,
        flow: &Option<K>,
        tokens: f64,
        weight: f64,
        arrival: f64,
    ) -> Result<Option<Tags<K>>> {
        let Some(p) = self.pending.front() else {
            return Ok(None);
        };
        let t = &p.tags;
        let same = t.flow == *flow
            && t.remaining == tokens
            && t.weight == weight
            && t.arrival == arrival + 0.0;
        if !same {
            return Err(Error::value(format!(
                "this add is not waiting[{}] of the loaded state, which must be added again \
                 first and in order (expected tokens {}, weight {}, arrival {} and its flow; got \
                 tokens {tokens}, weight {weight}, arrival {arrival})",
                p.index, t.remaining, t.weight, t.arrival
            )));
        }
        Ok(self.pending.pop_front().map(|p| p.tags))
    }
}
