//! The resolved router policy: classes with their thresholds and limits,
//! buckets, families, and the classifier from (requested family, exact
//! uncached tokens) to a class. [`resolve`](super::resolve::resolve) builds
//! it from a raw document, once; nothing else validates a DRR configuration.
//!
//! Two schemas are read (chosen from the document's top-level fields, never
//! guessed per field):
//!
//! - **Dynamo's** router policy schema (`lib/kv-router/src/scheduling/
//!   policy_config.rs`): a root profile of `default_policy_family`,
//!   `uncached_isl_buckets` (`min_tokens`, `bucket`) and `policy_classes`,
//!   all three or none; `models:` profiles that replace the root wholesale;
//!   `worker_selection` accepted and not interpreted (fairq selects no
//!   workers). Unknown requested families fall back to the default family;
//!   a class with neither family nor bucket is *explicit*, selected by its
//!   exact name, and that name may not also be a family.
//! - **fairq's** earlier schema (`default_family`, `cache_buckets` with
//!   `name`, per-class `max_queued_requests` / `max_queued_tokens`), kept
//!   working: an unknown family is an error there, buckets are optional and
//!   explicit classes are reachable by `push(class_name=...)` only. A
//!   document mixing the two is rejected with the renames that migrate it.
//!
//! Errors are `Error::Value` naming the field by its path, e.g.
//! `models.llama.policy_classes[2].quantum must be an integer > 0, got 0`.

use std::collections::HashMap;

use super::resolve::build_matrix;
use crate::error::{Error, Result};
use crate::value::Path;

/// Within-class order of a policy class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOrder {
    /// Earlier `arrival - priority_jump` first.
    Fcfs,
    /// Larger `(1 + priority_jump) / cost` first.
    Wspt,
}

impl QueueOrder {
    /// Parse `"fcfs"` / `"wspt"` (case-sensitive), naming `field` on error.
    pub fn parse(field: &str, s: &str) -> Result<Self> {
        match s {
            "fcfs" => Ok(QueueOrder::Fcfs),
            "wspt" => Ok(QueueOrder::Wspt),
            other => Err(Error::value(format!(
                "{field} must be 'fcfs' or 'wspt', got '{}'",
                other.escape_debug()
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            QueueOrder::Fcfs => "fcfs",
            QueueOrder::Wspt => "wspt",
        }
    }
}

/// When a class's worker pool counts as busy (Dynamo's semantics).
///
/// A worker is busy when its active prefill tokens exceed
/// `prefill_busy_threshold`, OR exceed `prefill_busy_threshold_frac *
/// max_num_batched_tokens`. The pool of eligible workers is busy when every
/// one is busy, or, with `busy_worker_ratio`, when `busy >= ratio *
/// eligible`. No eligible worker: not busy (the caller reports its error).
/// With neither threshold no worker is ever busy and the class never blocks.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BusyRule {
    pub prefill_busy_threshold: Option<u64>,
    pub prefill_busy_threshold_frac: Option<f64>,
    pub busy_worker_ratio: Option<f64>,
}

impl BusyRule {
    /// Whether load can block this class at all.
    pub fn queueing_enabled(&self) -> bool {
        self.prefill_busy_threshold.is_some() || self.prefill_busy_threshold_frac.is_some()
    }

    pub fn worker_is_busy(&self, active_prefill_tokens: u64, max_num_batched_tokens: u64) -> bool {
        self.prefill_busy_threshold
            .is_some_and(|t| active_prefill_tokens > t)
            || self
                .prefill_busy_threshold_frac
                .is_some_and(|f| active_prefill_tokens as f64 > f * max_num_batched_tokens as f64)
    }

    pub fn pool_is_busy(&self, busy_workers: usize, eligible_workers: usize) -> bool {
        if eligible_workers == 0 {
            return false;
        }
        match self.busy_worker_ratio {
            Some(r) => busy_workers as f64 >= r * eligible_workers as f64,
            None => busy_workers == eligible_workers,
        }
    }

    /// Bitwise identity, so equal rules share one evaluation per pop.
    pub(crate) fn same(&self, o: &BusyRule) -> bool {
        let f = |x: Option<f64>| x.map(f64::to_bits);
        self.prefill_busy_threshold == o.prefill_busy_threshold
            && f(self.prefill_busy_threshold_frac) == f(o.prefill_busy_threshold_frac)
            && f(self.busy_worker_ratio) == f(o.busy_worker_ratio)
    }
}

/// Queue limits of one class. The `*_per_worker` limits (Dynamo's) are
/// multiplied by the queue's current `num_workers` and compared with the
/// usage *before* the push, as Dynamo does: a push is refused once usage has
/// reached the limit (so the push that crosses a token limit is accepted).
/// `max_queued_*` (fairq's schema) are absolute and refuse a push that would
/// take usage past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub request_queue_limit_per_worker: Option<u64>,
    pub raw_isl_token_queue_limit_per_worker: Option<u64>,
    pub cached_token_queue_limit_per_worker: Option<u64>,
    pub max_queued_requests: Option<u64>,
    /// On the sum of queued scheduling costs (uncached tokens, >= 1 each).
    pub max_queued_tokens: Option<u64>,
}

/// One resolved physical policy class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassConfig {
    pub name: String,
    /// Credit earned per ring visit, in uncached tokens; > 0.
    pub quantum: u64,
    pub order: QueueOrder,
    pub busy: BusyRule,
    pub limits: Limits,
    pub policy_family: Option<String>,
    pub cache_bucket: Option<String>,
}

impl ClassConfig {
    /// An explicit class with no thresholds and no limits.
    pub fn new(name: impl Into<String>, quantum: u64, order: QueueOrder) -> Self {
        ClassConfig {
            name: name.into(),
            quantum,
            order,
            busy: BusyRule::default(),
            limits: Limits::default(),
            policy_family: None,
            cache_bucket: None,
        }
    }
}

/// Which schema a profile was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    Dynamo,
    Fairq,
}

/// An uncached-ISL bucket: requests with `uncached >= min_tokens` (and below
/// the next floor) belong to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub name: String,
    pub min_tokens: u64,
}

/// A resolved profile: the classes in ring order and the classifier from
/// (requested family, exact uncached tokens) to a class index.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyProfile {
    pub schema: Schema,
    pub classes: Vec<ClassConfig>,
    pub default_family: Option<String>,
    pub buckets: Vec<Bucket>,
    pub(super) classifier: Classifier,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Classifier {
    /// Everything goes to one class. `strict`: a named family is an error.
    Single {
        class: usize,
        strict: bool,
    },
    Matrix(Matrix),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Matrix {
    pub(super) default_family: Option<usize>,
    pub(super) families: HashMap<String, usize>,
    pub(super) family_names: Vec<String>,
    pub(super) explicit: HashMap<String, usize>,
    pub(super) floors: Vec<u64>,
    /// `table[family * floors.len() + bucket]` = class index.
    pub(super) table: Vec<usize>,
    /// fairq's schema: an unknown family is an error, not the default.
    pub(super) strict: bool,
}

pub const SYNTHETIC_CLASS: &str = "default";

impl PolicyProfile {
    /// The single synthetic `default` class (FCFS, quantum 1, never blocked).
    /// `strict`: a request naming a family is an error (fairq's schema);
    /// otherwise every request goes to `default` (Dynamo's fallback).
    pub fn synthetic(schema: Schema) -> Self {
        PolicyProfile {
            schema,
            classes: vec![ClassConfig::new(SYNTHETIC_CLASS, 1, QueueOrder::Fcfs)],
            default_family: None,
            buckets: Vec::new(),
            classifier: Classifier::Single {
                class: 0,
                strict: schema == Schema::Fairq,
            },
        }
    }

    /// Explicit classes built in Rust (no families): validated like a
    /// fairq-schema document. No classes: the synthetic profile.
    pub fn from_classes(classes: Vec<ClassConfig>) -> Result<Self> {
        if classes.is_empty() {
            return Ok(PolicyProfile::synthetic(Schema::Fairq));
        }
        for (i, c) in classes.iter().enumerate() {
            let p = Path::root().field("policy_classes").index(i);
            if c.name.is_empty() {
                return Err(p.field("name").err("must be a non-empty string, got ''"));
            }
            if c.quantum == 0 {
                return Err(p.field("quantum").err("must be an integer > 0, got 0"));
            }
            super::resolve::check_busy(&c.busy, &p)?;
            if classes[..i].iter().any(|o| o.name == c.name) {
                return Err(p.field("name").err(format!(
                    "'{}' is a duplicate class name",
                    c.name.escape_debug()
                )));
            }
        }
        build_matrix(classes, Vec::new(), None, Schema::Fairq, &Path::root())
    }

    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }

    /// The class a request of `requested` family with exactly `uncached`
    /// uncached tokens goes to (highest bucket floor <= `uncached`).
    ///
    /// Dynamo's schema: an exact explicit-class name selects that class; a
    /// configured family selects it; anything else (None, empty, unknown, a
    /// matrix class's name) uses the default family. fairq's schema: None
    /// uses `default_family` (ValueError without one), an unknown family is a
    /// KeyError.
    pub fn classify(&self, requested: Option<&str>, uncached: u64) -> Result<usize> {
        match &self.classifier {
            Classifier::Single { class, strict } => match requested {
                Some(f) if *strict => Err(Error::key(format!(
                    "policy_family '{}' is not configured (no policy families)",
                    f.escape_debug()
                ))),
                _ => Ok(*class),
            },
            Classifier::Matrix(m) => {
                if !m.strict {
                    if let Some(&c) = requested.and_then(|r| m.explicit.get(r)) {
                        return Ok(c);
                    }
                }
                let family = match requested {
                    Some(r) => match m.families.get(r) {
                        Some(&f) => Some(f),
                        None if m.strict => {
                            let mut known = m.family_names.clone();
                            known.sort();
                            return Err(Error::key(format!(
                                "policy_family '{}' is not configured (known: {})",
                                r.escape_debug(),
                                known.join(", ")
                            )));
                        }
                        None => m.default_family,
                    },
                    None => m.default_family,
                };
                let family = family.ok_or_else(|| {
                    Error::value(
                        "policy_family is required: no default_family is configured, got None",
                    )
                })?;
                let bucket = m
                    .floors
                    .partition_point(|&f| f <= uncached)
                    .saturating_sub(1);
                Ok(m.table[family * m.floors.len() + bucket])
            }
        }
    }

    /// The distinct busy rules of the classes, and each class's rule index
    /// (None: no threshold, never blocked). Equal rules are evaluated once
    /// per pop.
    pub fn busy_rules(&self) -> (Vec<BusyRule>, Vec<Option<usize>>) {
        let mut rules: Vec<BusyRule> = Vec::new();
        let idx = self
            .classes
            .iter()
            .map(|c| {
                c.busy.queueing_enabled().then(|| {
                    rules
                        .iter()
                        .position(|r| r.same(&c.busy))
                        .unwrap_or_else(|| {
                            rules.push(c.busy);
                            rules.len() - 1
                        })
                })
            })
            .collect();
        (rules, idx)
    }
}
