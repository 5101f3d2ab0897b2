//! Saving and restoring a DRR queue's fairness state ([`DrrQueue::state`],
//! [`DrrQueue::load_state`]).
//!
//! ```text
//! {"format": "fairq.DRRQueue", "version": 1, "num_workers": n,
//!  "cursor": "class name", "retained": bool,
//!  "classes": [{"name", "quantum", "deficit", "dispatched", "dispatched_cost"}]}
//! ```
//!
//! The classes' configuration is not in it: the queue is rebuilt from the
//! same policy file, and loading checks that the ring (names, order and
//! quanta) is the one the state was saved from, naming the first class that
//! differs. The state holds what arbitration accumulates: each class's
//! unspent credit, the cursor and whether it is finishing a burst, the
//! dispatch counters, and the settable `num_workers`. Queued requests are
//! not in it: the caller pushes them again in their original order (with
//! their original `arrival`), and the queue then pops exactly as one that
//! never stopped. Loading validates everything first and changes nothing on
//! error; it needs an empty queue.

use super::DrrQueue;
use crate::error::{Error, Result};
use crate::value::{as_bool, as_u64, check_state_envelope, Fields, Path, Value};

/// The `format` field of a DRR queue's state.
pub const FORMAT: &str = "fairq.DRRQueue";
/// The state version this build writes and reads.
pub const VERSION: u64 = 1;

fn int(n: u128) -> Value {
    Value::Int(n as i128)
}

/// An integer in `0..=u128::MAX / 2` (what a JSON int carried by `i128` holds).
fn big(v: &Value, path: &Path) -> Result<u128> {
    match v {
        Value::Int(i) if *i >= 0 => Ok(*i as u128),
        other => Err(path.err(format!("must be an integer >= 0, got {}", other.describe()))),
    }
}

impl<T> DrrQueue<T> {
    /// The arbitration state as a JSON-ready document (see the module docs).
    pub fn state(&self) -> Value {
        let classes = (0..self.num_classes())
            .map(|i| {
                let s = self.stats(i);
                Value::map([
                    ("name", Value::str(s.name)),
                    ("quantum", int(s.quantum as u128)),
                    ("deficit", int(s.deficit)),
                    ("dispatched", int(s.dispatched as u128)),
                    ("dispatched_cost", int(s.dispatched_cost)),
                ])
            })
            .collect();
        Value::map([
            ("format", Value::str(FORMAT)),
            ("version", int(VERSION as u128)),
            ("num_workers", int(self.num_workers() as u128)),
            ("cursor", Value::str(self.spec(self.cursor()).name.as_str())),
            ("retained", Value::Bool(self.cursor_retained())),
            ("classes", Value::List(classes)),
        ])
    }

    /// Restore a state written by [`Self::state`] into this empty queue,
    /// built from the same policy (same classes, order and quanta).
    /// Validates everything first (errors name the field) and changes
    /// nothing on error.
    pub fn load_state(&mut self, v: &Value) -> Result<()> {
        if !self.is_empty() {
            return Err(Error::value(format!(
                "load_state needs an empty queue; this one holds {} requests (load into a fresh \
                 queue, then push the queued requests again)",
                self.len()
            )));
        }
        let f = Fields::new(v, Path::root(), "the state")?;
        f.deny_unknown(
            &[
                "format",
                "version",
                "num_workers",
                "cursor",
                "retained",
                "classes",
            ],
            "state: ",
            |_| None,
        )?;
        check_state_envelope(&f, FORMAT, VERSION, "a DRR queue")?;
        let num_workers = as_u64(f.required("num_workers")?, &f.at("num_workers"), 0)?;
        let retained = as_bool(f.required("retained")?, &f.at("retained"))?;
        let list = f
            .opt_list("classes")?
            .ok_or_else(|| f.at("classes").err("is required"))?;
        let n = self.num_classes();
        if list.len() != n {
            return Err(f.at("classes").err(format!(
                "lists {} classes, but this queue has {n} (build the queue from the policy the \
                 state was saved with)",
                list.len()
            )));
        }
        let mut rows = Vec::with_capacity(n);
        for (i, cv) in list.iter().enumerate() {
            let cf = Fields::new(cv, f.at("classes").index(i), "class")?;
            cf.deny_unknown(
                &[
                    "name",
                    "quantum",
                    "deficit",
                    "dispatched",
                    "dispatched_cost",
                ],
                "",
                |_| None,
            )?;
            let spec = self.spec(i);
            match cf.required("name")? {
                Value::Str(s) if *s == spec.name => {}
                other => {
                    return Err(cf.at("name").err(format!(
                        "is {}, but class {i} of this queue is '{}' (the ring must be the one \
                         the state was saved from)",
                        other.describe(),
                        spec.name
                    )))
                }
            }
            let quantum = as_u64(cf.required("quantum")?, &cf.at("quantum"), 1)?;
            if quantum != spec.quantum {
                return Err(cf.at("quantum").err(format!(
                    "is {quantum}, but class '{}' of this queue has quantum {}",
                    spec.name, spec.quantum
                )));
            }
            rows.push((
                big(cf.required("deficit")?, &cf.at("deficit"))?,
                as_u64(cf.required("dispatched")?, &cf.at("dispatched"), 0)?,
                big(cf.required("dispatched_cost")?, &cf.at("dispatched_cost"))?,
            ));
        }
        let cursor = match f.required("cursor")? {
            Value::Str(s) => self.class_index(s).map_err(|_| {
                f.at("cursor")
                    .err(format!("names {s:?}, which is not a class"))
            })?,
            other => {
                return Err(f
                    .at("cursor")
                    .err(format!("must be a class name, got {}", other.describe())))
            }
        };
        // Valid: apply.
        for (i, (deficit, dispatched, dispatched_cost)) in rows.into_iter().enumerate() {
            self.restore_class(i, deficit, dispatched, dispatched_cost);
        }
        self.restore_cursor(cursor, retained);
        self.set_num_workers(num_workers);
        Ok(())
    }
}
