//! Raw router policy document -> resolved [`PolicyProfile`], as Dynamo's
//! `policy_config.rs` does: validate every field (naming its path), check
//! the family x bucket matrix, select the profile for a model.

use std::collections::HashMap;

use super::config::{
    Bucket, BusyRule, ClassConfig, Classifier, Limits, Matrix, PolicyProfile, QueueOrder, Schema,
};
use crate::error::{Error, Result};
use crate::value::{as_u64, Fields, Path, Value};

const DYNAMO_TOP: &[&str] = &[
    "default_policy_family",
    "uncached_isl_buckets",
    "policy_classes",
    "models",
    "worker_selection",
];
const DYNAMO_PROFILE: &[&str] = &[
    "default_policy_family",
    "uncached_isl_buckets",
    "policy_classes",
];
const FAIRQ_TOP: &[&str] = &["policy_classes", "cache_buckets", "default_family"];
const DYNAMO_CLASS: &[&str] = &[
    "name",
    "policy_family",
    "cache_bucket",
    "queue_policy",
    "quantum",
    "prefill_busy_threshold",
    "prefill_busy_threshold_frac",
    "busy_worker_ratio",
    "request_queue_limit_per_worker",
    "raw_isl_token_queue_limit_per_worker",
    "cached_token_queue_limit_per_worker",
];
const FAIRQ_ONLY_CLASS: &[&str] = &["max_queued_requests", "max_queued_tokens"];

/// Resolve a configuration document into the profile for `model`: the
/// model's profile if `models:` has one, else the root profile, else the
/// synthetic `default` class (Dynamo's order). Every profile in the document
/// is validated, whichever is selected.
pub fn resolve(doc: &Value, model: Option<&str>) -> Result<PolicyProfile> {
    let top = Fields::new(doc, Path::root(), "policy config")?;
    let dynamo = top.keys().any(|k| {
        matches!(
            k,
            "default_policy_family" | "uncached_isl_buckets" | "models" | "worker_selection"
        )
    });
    let fairq = top
        .keys()
        .any(|k| matches!(k, "default_family" | "cache_buckets"));
    if dynamo && fairq {
        return Err(Error::value(
            "policy config mixes fairq's schema (default_family, cache_buckets) with Dynamo's \
             (default_policy_family, uncached_isl_buckets, models): write Dynamo's: rename \
             default_family -> default_policy_family and cache_buckets -> uncached_isl_buckets \
             (each bucket's `name:` -> `bucket:`), and replace max_queued_requests / \
             max_queued_tokens by request_queue_limit_per_worker / \
             raw_isl_token_queue_limit_per_worker",
        ));
    }
    if dynamo {
        resolve_dynamo(&top, model)
    } else {
        if let Some(m) = model {
            return Err(Error::value(format!(
                "model '{}' was given but the policy config has no models: section \
                 (fairq's schema has no model profiles; use Dynamo's)",
                m.escape_debug()
            )));
        }
        resolve_fairq(&top)
    }
}

fn resolve_dynamo(top: &Fields<'_>, model: Option<&str>) -> Result<PolicyProfile> {
    top.deny_unknown(DYNAMO_TOP, "policy config: ", |k| {
        matches!(k, "default_family" | "cache_buckets").then(|| {
            "that is fairq's schema; Dynamo's names are default_policy_family and \
             uncached_isl_buckets"
                .to_string()
        })
    })?;
    let present: Vec<&str> = DYNAMO_PROFILE
        .iter()
        .copied()
        .filter(|k| top.get(k).is_some())
        .collect();
    let root = match present.len() {
        0 => None,
        3 => Some(resolve_dynamo_profile(top)?),
        _ => {
            let missing: Vec<&str> = DYNAMO_PROFILE
                .iter()
                .copied()
                .filter(|k| !present.contains(k))
                .collect();
            return Err(top.at(missing[0]).err(format!(
                "is missing: the root profile needs default_policy_family, \
                 uncached_isl_buckets and policy_classes together, or none of them \
                 (missing: {})",
                missing.join(", ")
            )));
        }
    };
    let mut chosen = None;
    let mut n_models = 0;
    if let Some(models) = top.get("models") {
        let mp = top.at("models");
        let Value::Map(pairs) = models else {
            return Err(mp.err(format!(
                "must be a mapping of model name -> profile, got {}",
                models.describe()
            )));
        };
        for (name, raw) in pairs {
            if name.is_empty() {
                return Err(mp.err("has a model profile with an empty name"));
            }
            let f = Fields::new(raw, mp.key(name), "model profile")?;
            f.deny_unknown(DYNAMO_PROFILE, "", |_| {
                Some("a model profile has default_policy_family, uncached_isl_buckets and policy_classes only".into())
            })?;
            for k in DYNAMO_PROFILE {
                f.required(k)?;
            }
            let p = resolve_dynamo_profile(&f)?;
            n_models += 1;
            if model == Some(name.as_str()) {
                chosen = Some(p);
            }
        }
    }
    if root.is_none() && n_models == 0 && top.get("worker_selection").is_none() {
        return Err(Error::value(
            "policy config must define a root profile (default_policy_family, \
             uncached_isl_buckets, policy_classes), at least one model profile under \
             models:, or worker_selection",
        ));
    }
    Ok(chosen
        .or(root)
        .unwrap_or_else(|| PolicyProfile::synthetic(Schema::Dynamo)))
}

/// Validate one class alone, as fairq's schema reads it (what
/// `fairq.PolicyClass` checks at construction; paths are the bare field names).
pub fn check_class(raw: &Value) -> Result<()> {
    let f = Fields::new(raw, Path::root(), "policy class")?;
    let known: Vec<&str> = DYNAMO_CLASS
        .iter()
        .chain(FAIRQ_ONLY_CLASS)
        .copied()
        .collect();
    f.deny_unknown(&known, "policy class: ", |_| None)?;
    read_class(&f, Schema::Fairq).map(|_| ())
}

fn check_identifier(v: &str, path: &Path) -> Result<()> {
    if !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        Ok(())
    } else {
        Err(path.err(format!("'{}' must match [A-Za-z0-9_.-]+", v.escape_debug())))
    }
}

fn ident<'a>(f: &Fields<'a>, name: &str) -> Result<Option<&'a str>> {
    let v = f.opt_str(name)?;
    if let Some(s) = v {
        check_identifier(s, &f.at(name))?;
    }
    Ok(v)
}

pub(super) fn check_busy(b: &BusyRule, p: &Path) -> Result<()> {
    if let Some(f) = b.prefill_busy_threshold_frac {
        if !f.is_finite() || f < 0.0 {
            return Err(p
                .field("prefill_busy_threshold_frac")
                .err(format!("must be a finite number >= 0, got {}", fmt_f(f))));
        }
    }
    if let Some(r) = b.busy_worker_ratio {
        if !r.is_finite() || r <= 0.0 || r > 1.0 {
            return Err(p.field("busy_worker_ratio").err(format!(
                "must be a fraction of the eligible workers in (0.0, 1.0], got {} \
                 (prefill_busy_threshold_frac is the per-worker multiplier)",
                fmt_f(r)
            )));
        }
        if !b.queueing_enabled() {
            return Err(p.field("busy_worker_ratio").err(
                "needs prefill_busy_threshold or prefill_busy_threshold_frac: without \
                 one no worker is ever busy",
            ));
        }
    }
    Ok(())
}

fn fmt_f(f: f64) -> String {
    Value::Float(f).describe()
}

/// The class fields both schemas share.
fn read_class(f: &Fields<'_>, schema: Schema) -> Result<ClassConfig> {
    let name = f.name("name")?;
    if schema == Schema::Dynamo {
        check_identifier(name, &f.at("name"))?;
    }
    let quantum = as_u64(f.required("quantum")?, &f.at("quantum"), 1)?;
    let order = match f.get("queue_policy") {
        None => QueueOrder::Fcfs,
        Some(Value::Str(s)) => QueueOrder::parse(f.at("queue_policy").as_str(), s)?,
        Some(v) => {
            return Err(f
                .at("queue_policy")
                .err(format!("must be 'fcfs' or 'wspt', got {}", v.describe())))
        }
    };
    let busy = BusyRule {
        prefill_busy_threshold: f.opt_u64("prefill_busy_threshold", 0)?,
        prefill_busy_threshold_frac: f.opt_f64("prefill_busy_threshold_frac")?,
        busy_worker_ratio: f.opt_f64("busy_worker_ratio")?,
    };
    check_busy(&busy, &f.path)?;
    let limits = Limits {
        request_queue_limit_per_worker: f.opt_u64("request_queue_limit_per_worker", 0)?,
        raw_isl_token_queue_limit_per_worker: f
            .opt_u64("raw_isl_token_queue_limit_per_worker", 0)?,
        cached_token_queue_limit_per_worker: f.opt_u64("cached_token_queue_limit_per_worker", 0)?,
        max_queued_requests: f.opt_u64("max_queued_requests", 0)?,
        max_queued_tokens: f.opt_u64("max_queued_tokens", 0)?,
    };
    let (policy_family, cache_bucket) = match schema {
        Schema::Dynamo => (ident(f, "policy_family")?, ident(f, "cache_bucket")?),
        Schema::Fairq => (f.opt_str("policy_family")?, f.opt_str("cache_bucket")?),
    };
    for (k, v) in [
        ("policy_family", policy_family),
        ("cache_bucket", cache_bucket),
    ] {
        if v == Some("") {
            return Err(f.at(k).err("must be a non-empty string, got ''"));
        }
    }
    match (policy_family, cache_bucket) {
        (None, Some(b)) if schema == Schema::Fairq => {
            return Err(f
                .at("cache_bucket")
                .err(format!("'{}' needs a policy_family", b.escape_debug())))
        }
        (Some(_), None) | (None, Some(_)) if schema == Schema::Dynamo => {
            return Err(f.path.err(
                "must specify both policy_family and cache_bucket, or neither for an \
                 explicit class",
            ))
        }
        _ => {}
    }
    Ok(ClassConfig {
        name: name.to_string(),
        quantum,
        order,
        busy,
        limits,
        policy_family: policy_family.map(str::to_string),
        cache_bucket: cache_bucket.map(str::to_string),
    })
}

fn read_classes(f: &Fields<'_>, schema: Schema, known: &[&str]) -> Result<Vec<ClassConfig>> {
    let p = f.at("policy_classes");
    let list = match f.get("policy_classes") {
        Some(Value::List(l)) if !l.is_empty() => l,
        v => {
            return Err(p.err(format!(
                "must be a non-empty list, got {}",
                v.map_or("None".into(), |v| match v {
                    Value::List(_) => "[]".into(),
                    v => v.describe(),
                })
            )))
        }
    };
    let mut out: Vec<ClassConfig> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let cf = Fields::new(raw, p.index(i), "policy class")?;
        cf.deny_unknown(known, "", |k| {
            (schema == Schema::Dynamo && FAIRQ_ONLY_CLASS.contains(&k)).then(|| {
                "that is fairq's schema; Dynamo's limits are request_queue_limit_per_worker, \
                 raw_isl_token_queue_limit_per_worker and cached_token_queue_limit_per_worker"
                    .to_string()
            })
        })?;
        let c = read_class(&cf, schema)?;
        if out.iter().any(|o| o.name == c.name) {
            return Err(cf.at("name").err(format!(
                "'{}' is a duplicate class name",
                c.name.escape_debug()
            )));
        }
        out.push(c);
    }
    Ok(out)
}

fn read_buckets(list: &[Value], p: &Path, name_key: &str, schema: Schema) -> Result<Vec<Bucket>> {
    let mut out: Vec<Bucket> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let bp = p.index(i);
        let f = Fields::new(raw, bp.clone(), "bucket")?;
        f.deny_unknown(&["min_tokens", name_key], "", |_| None)?;
        let name = f.name(name_key)?;
        if schema == Schema::Dynamo {
            check_identifier(name, &f.at(name_key))?;
        }
        let min = as_u64(f.required("min_tokens")?, &f.at("min_tokens"), 0)?;
        if i == 0 && min != 0 {
            return Err(f
                .at("min_tokens")
                .err(format!("must be 0 (floors start at 0), got {min}")));
        }
        if let Some(prev) = out.last() {
            if min <= prev.min_tokens {
                return Err(f.at("min_tokens").err(format!(
                    "must be strictly greater than {} (floors increase), got {min}",
                    prev.min_tokens
                )));
            }
        }
        if out.iter().any(|b| b.name == name) {
            return Err(f.at(name_key).err(format!(
                "'{}' is a duplicate bucket name",
                name.escape_debug()
            )));
        }
        out.push(Bucket {
            name: name.to_string(),
            min_tokens: min,
        });
    }
    Ok(out)
}

fn resolve_dynamo_profile(f: &Fields<'_>) -> Result<PolicyProfile> {
    let default = f.name("default_policy_family")?;
    check_identifier(default, &f.at("default_policy_family"))?;
    let bp = f.at("uncached_isl_buckets");
    let buckets = match f.opt_list("uncached_isl_buckets")? {
        Some(l) if !l.is_empty() => read_buckets(l, &bp, "bucket", Schema::Dynamo)?,
        _ => return Err(bp.err("must be a non-empty list")),
    };
    let classes = read_classes(f, Schema::Dynamo, DYNAMO_CLASS)?;
    build_matrix(classes, buckets, Some(default), Schema::Dynamo, &f.path)
}

fn resolve_fairq(top: &Fields<'_>) -> Result<PolicyProfile> {
    top.deny_unknown(FAIRQ_TOP, "", |_| None)
        .map_err(|e| match e {
            Error::Value(m) => {
                Error::value(m.replacen("unknown field", "unknown policy config field", 1))
            }
            e => e,
        })?;
    let known: Vec<&str> = DYNAMO_CLASS
        .iter()
        .chain(FAIRQ_ONLY_CLASS)
        .copied()
        .collect();
    let classes = read_classes(top, Schema::Fairq, &known)?;
    let buckets = match top.opt_list("cache_buckets")? {
        Some(l) => read_buckets(l, &top.at("cache_buckets"), "name", Schema::Fairq)?,
        None => Vec::new(),
    };
    let default = match top.get("default_family") {
        None => None,
        Some(Value::Str(s)) if !s.is_empty() => Some(s.as_str()),
        Some(v) => {
            return Err(top
                .at("default_family")
                .err(format!("must be a non-empty string, got {}", v.describe())))
        }
    };
    build_matrix(classes, buckets, default, Schema::Fairq, &Path::root())
}

/// Check the family x bucket matrix and build the classifier. In fairq's
/// schema `buckets` may be empty (one implicit bucket from 0).
pub(super) fn build_matrix(
    classes: Vec<ClassConfig>,
    buckets: Vec<Bucket>,
    default: Option<&str>,
    schema: Schema,
    at: &Path,
) -> Result<PolicyProfile> {
    let cp = at.field("policy_classes");
    let bucket_names: Vec<&str> = buckets.iter().map(|b| b.name.as_str()).collect();
    let nb = buckets.len().max(1);
    let mut families: HashMap<String, usize> = HashMap::new();
    let mut family_names: Vec<String> = Vec::new();
    for c in &classes {
        if let Some(f) = &c.policy_family {
            if !families.contains_key(f) {
                families.insert(f.clone(), family_names.len());
                family_names.push(f.clone());
            }
        }
    }
    let mut table: Vec<Option<usize>> = vec![None; family_names.len() * nb];
    let mut explicit = HashMap::new();
    for (i, c) in classes.iter().enumerate() {
        let Some(fam) = &c.policy_family else {
            if schema == Schema::Dynamo && families.contains_key(&c.name) {
                return Err(cp.index(i).field("name").err(format!(
                    "'{}' names an explicit class (no policy_family / cache_bucket) and \
                     collides with the policy family of the same name",
                    c.name.escape_debug()
                )));
            }
            explicit.insert(c.name.clone(), i);
            continue;
        };
        let b = match (&c.cache_bucket, buckets.is_empty()) {
            (None, true) => 0,
            (None, false) => {
                return Err(cp.index(i).field("cache_bucket").err(format!(
                    "is required for family '{}' when cache_buckets are configured, got None",
                    fam.escape_debug()
                )))
            }
            (Some(b), _) => bucket_names.iter().position(|n| n == b).ok_or_else(|| {
                cp.index(i).field("cache_bucket").err(format!(
                    "'{}' is not a configured cache bucket (known: {})",
                    b.escape_debug(),
                    bucket_names.join(", ")
                ))
            })?,
        };
        let slot = &mut table[families[fam] * nb + b];
        if let Some(prev) = slot {
            return Err(cp.index(i).err(format!(
                "has policy_family '{}' x cache_bucket '{}', which already has class '{}' \
                 (each pair needs exactly one class)",
                fam.escape_debug(),
                c.cache_bucket.as_deref().unwrap_or("").escape_debug(),
                classes[*prev].name.escape_debug()
            )));
        }
        *slot = Some(i);
    }
    for (fi, fam) in family_names.iter().enumerate() {
        for b in 0..nb {
            if table[fi * nb + b].is_none() {
                return Err(at.err(format!(
                    "policy_family '{}' x cache_bucket '{}' has no class (each pair needs \
                     exactly one class)",
                    fam.escape_debug(),
                    bucket_names.get(b).copied().unwrap_or("").escape_debug()
                )));
            }
        }
    }
    let default_family = match default {
        None => None,
        Some(d) => Some(*families.get(d).ok_or_else(|| {
            let key = match schema {
                Schema::Dynamo => "default_policy_family",
                Schema::Fairq => "default_family",
            };
            let mut known = family_names.clone();
            known.sort();
            at.field(key).err(format!(
                "'{}' is not the policy_family of any class (known: {})",
                d.escape_debug(),
                known.join(", ")
            ))
        })?),
    };
    let floors = if buckets.is_empty() {
        vec![0]
    } else {
        buckets.iter().map(|b| b.min_tokens).collect()
    };
    Ok(PolicyProfile {
        schema,
        default_family: default.map(str::to_string),
        buckets,
        classifier: Classifier::Matrix(Matrix {
            default_family,
            families,
            family_names,
            explicit,
            floors,
            table: table
                .into_iter()
                .map(|c| c.expect("complete matrix"))
                .collect(),
            strict: schema == Schema::Fairq,
        }),
        classes,
    })
}
