//! [`Value`]: a document in the JSON / YAML data model, and the path-naming
//! readers ([`Fields`], [`Path`]) that validate one.
//!
//! The core owns no parser. Documents come in from the caller as a
//! [`Value`] (the Python binding converts a parsed object once,
//! `rust/python/value.rs`) and the core is their only validator, naming the
//! offending field by its path (`policy_classes[2].quantum`,
//! `clients[3].deficit`). Two kinds of documents use it: DRR policy configs
//! ([`crate::drr::resolve`]) and saved fairness state
//! ([`crate::sched::LocalScheduler::state`] / `load_state`), which also goes
//! out as a [`Value`].

use crate::error::{Error, Result};

/// A parsed configuration document (YAML/JSON data model).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    /// An integer outside `i128`, kept as its decimal text for the error message.
    BigInt(String),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    /// A mapping in document order (keys are unique).
    Map(Vec<(String, Value)>),
    /// Any other object (its type name), rejected with the field's path.
    Other(String),
}

impl Value {
    /// Build a map from `(key, value)` pairs (tests and Rust callers).
    pub fn map<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Map(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    /// The value as a user reads it in an error message (Python spelling,
    /// since that is where configs come from).
    pub fn describe(&self) -> String {
        match self {
            Value::Null => "None".into(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Int(i) => i.to_string(),
            Value::BigInt(s) => s.clone(),
            Value::Float(f) if f.is_nan() => "nan".into(),
            Value::Float(f) if f.is_infinite() => {
                if *f > 0.0 {
                    "inf".into()
                } else {
                    "-inf".into()
                }
            }
            Value::Float(f) => format!("{f:?}"),
            Value::Str(s) => format!("'{}'", s.escape_debug()),
            Value::List(_) => "a list".into(),
            Value::Map(_) => "a mapping".into(),
            Value::Other(t) => format!("a {t}"),
        }
    }
}

/// Where a field sits in the document, e.g. `models.llama.policy_classes[2]`.
#[derive(Debug, Clone, Default)]
pub struct Path(String);

impl Path {
    pub fn root() -> Path {
        Path(String::new())
    }

    pub fn field(&self, name: &str) -> Path {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    /// A mapping key chosen by the user (a model name): dotted when it is a
    /// plain identifier, else quoted in brackets.
    pub fn key(&self, k: &str) -> Path {
        let plain = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if plain {
            self.field(k)
        } else {
            Path(format!("{}[{k:?}]", self.0))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `"{path} {msg}"`, or `msg` alone at the root.
    pub fn err(&self, msg: impl std::fmt::Display) -> Error {
        if self.0.is_empty() {
            Error::value(msg.to_string())
        } else {
            Error::value(format!("{} {msg}", self.0))
        }
    }
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A mapping being read: typed getters that name the field's path, and
/// rejection of fields outside `known`.
pub struct Fields<'a> {
    pub path: Path,
    pairs: &'a [(String, Value)],
}

impl<'a> Fields<'a> {
    /// Read `v` as a mapping at `path`; `what` names it at the root (e.g.
    /// "policy config"), where a non-mapping is a `TypeError`.
    pub fn new(v: &'a Value, path: Path, what: &str) -> Result<Fields<'a>> {
        match v {
            Value::Map(pairs) => Ok(Fields { path, pairs }),
            other => {
                let msg = format!("must be a mapping, got {}", other.describe());
                if path.as_str().is_empty() {
                    Err(Error::type_(format!("{what} {msg}")))
                } else {
                    Err(Error::value(format!("{path} {msg}")))
                }
            }
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.pairs.iter().map(|(k, _)| k.as_str())
    }

    /// Reject the first field not in `known`; `hint(field)` may add a sentence.
    pub fn deny_unknown(
        &self,
        known: &[&str],
        prefix: &str,
        hint: impl Fn(&str) -> Option<String>,
    ) -> Result<()> {
        for k in self.keys() {
            if !known.contains(&k) {
                let mut msg = format!("{prefix}unknown field '{k}' (known: {})", known.join(", "));
                if let Some(h) = hint(k) {
                    msg.push_str("; ");
                    msg.push_str(&h);
                }
                return Err(if self.path.as_str().is_empty() {
                    Error::value(msg)
                } else {
                    Error::value(format!("{}: {msg}", self.path))
                });
            }
        }
        Ok(())
    }

    /// The field's value; an explicit null counts as absent (as serde's
    /// `Option` fields read it).
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .filter(|v| !matches!(v, Value::Null))
    }

    pub fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == name)
    }

    pub fn at(&self, name: &str) -> Path {
        self.path.field(name)
    }

    pub fn required(&self, name: &str) -> Result<&'a Value> {
        self.get(name)
            .ok_or_else(|| self.at(name).err("is required"))
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(v) => Err(self
                .at(name)
                .err(format!("must be a string, got {}", v.describe()))),
        }
    }

    /// A non-empty string (required).
    pub fn name(&self, name: &str) -> Result<&'a str> {
        match self.get(name) {
            Some(Value::Str(s)) if !s.is_empty() => Ok(s),
            None if !self.has(name) => Err(self.at(name).err("is required")),
            v => Err(self.at(name).err(format!(
                "must be a non-empty string, got {}",
                v.unwrap_or(&Value::Null).describe()
            ))),
        }
    }

    /// An optional integer in `min..=u64::MAX`.
    pub fn opt_u64(&self, name: &str, min: u64) -> Result<Option<u64>> {
        self.get(name)
            .map(|v| as_u64(v, &self.at(name), min))
            .transpose()
    }

    pub fn opt_f64(&self, name: &str) -> Result<Option<f64>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Float(f)) => Ok(Some(*f)),
            Some(Value::Int(i)) => Ok(Some(*i as f64)),
            Some(v) => Err(self
                .at(name)
                .err(format!("must be a number, got {}", v.describe()))),
        }
    }

    /// A required string naming an entry of `index` (built from the list
    /// `list` of the same document); the entry's value.
    pub fn lookup<T: Copy>(
        &self,
        name: &str,
        index: &std::collections::HashMap<String, T>,
        list: &str,
    ) -> Result<T> {
        match self.required(name)? {
            Value::Str(s) => index.get(s).copied().ok_or_else(|| {
                self.at(name)
                    .err(format!("names {s:?}, which is not in {list}"))
            }),
            other => Err(self
                .at(name)
                .err(format!("must be a string, got {}", other.describe()))),
        }
    }

    /// A list entry's required `name` string, which must not repeat one of
    /// `index`: it is added there with value `i` (a state's client names
    /// are unique).
    pub fn unique_name<T>(
        &self,
        index: &mut std::collections::HashMap<String, T>,
        i: T,
    ) -> Result<String> {
        let name = match self.required("name")? {
            Value::Str(s) => s.clone(),
            other => {
                return Err(self
                    .at("name")
                    .err(format!("must be a string, got {}", other.describe())))
            }
        };
        if index.insert(name.clone(), i).is_some() {
            return Err(self
                .at("name")
                .err(format!("repeats client {name:?} (names are unique)")));
        }
        Ok(name)
    }

    pub fn opt_list(&self, name: &str) -> Result<Option<&'a [Value]>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::List(l)) => Ok(Some(l)),
            Some(v) => Err(self
                .at(name)
                .err(format!("must be a list, got {}", v.describe()))),
        }
    }
}

/// An integer in `min..=u64::MAX`, naming `path` otherwise.
pub fn as_u64(v: &Value, path: &Path, min: u64) -> Result<u64> {
    let bound = match min {
        0 => "an integer >= 0".to_string(),
        1 => "an integer > 0".to_string(),
        _ => format!("an integer >= {min}"),
    };
    match v {
        Value::Int(i) if *i >= min as i128 && *i <= u64::MAX as i128 => Ok(*i as u64),
        Value::Int(i) if *i < min as i128 => {
            Err(path.err(format!("must be {bound}, got {}", v.describe())))
        }
        Value::Int(_) | Value::BigInt(_) => Err(path.err(format!(
            "must be {bound} (at most 2**64-1), got {}",
            v.describe()
        ))),
        other => Err(path.err(format!("must be {bound}, got {}", other.describe()))),
    }
}

/// `v` as a bool (an error naming `path` otherwise).
pub fn as_bool(v: &Value, path: &Path) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => Err(path.err(format!("must be a bool, got {}", other.describe()))),
    }
}

/// The envelope every saved state starts with: `format` (which structure
/// wrote it) and `version`. `what` names the structure in the error (e.g.
/// "a local scheduler"). Errors name the field.
pub fn check_state_envelope(f: &Fields<'_>, format: &str, version: u64, what: &str) -> Result<()> {
    match f.required("format")? {
        Value::Str(s) if s == format => {}
        other => {
            return Err(f.at("format").err(format!(
                "must be '{format}' (the state of {what}), got {}",
                other.describe()
            )))
        }
    }
    let got = as_u64(f.required("version")?, &f.at("version"), 0)?;
    if got != version {
        return Err(f.at("version").err(format!(
            "is {got}: this fairq reads {what} state version {version}"
        )));
    }
    Ok(())
}
